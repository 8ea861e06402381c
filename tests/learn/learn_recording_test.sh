#!/bin/sh
# The learner on a real recording: sim_mlp_train run on simcuda under the interposer with
# CAPUCHIN_RECORD, then `capuchin trace learn`: the period must equal the program's kernels
# per iteration (measured as the difference between a 6- and a 3-iteration run) and the
# tensors of consecutive iterations must match one to one.
# Env: LD_LIBRARY_PATH (simcuda), PRELOAD, TRAIN, CAPUCHIN. Arg: a scratch directory.
set -eu
dir=$1
mkdir -p "$dir"
kernels() { "$CAPUCHIN" trace stats --json "$1" | sed 's/.*"kernels":\([0-9]*\).*/\1/'; }
CAPUCHIN_RECORD="$dir/six.jsonl" LD_PRELOAD="$PRELOAD" "$TRAIN" --iters 6 >/dev/null
CAPUCHIN_RECORD="$dir/three.jsonl" LD_PRELOAD="$PRELOAD" "$TRAIN" --iters 3 >/dev/null
per_iter=$(( ($(kernels "$dir/six.jsonl") - $(kernels "$dir/three.jsonl")) / 3 ))
out=$("$CAPUCHIN" trace learn --json "$dir/six.jsonl")
echo "$out"
echo "$out" | grep -q '"found":true' || { echo "FAIL: no iterations found"; exit 1; }
echo "$out" | grep -q "\"period_kernels\":$per_iter," || { echo "FAIL: period is not $per_iter kernels"; exit 1; }
echo "$out" | grep -q '"identities_stable":true' || { echo "FAIL: identities differ"; exit 1; }
n=$(echo "$out" | grep -o '"n":' | wc -l)
[ "$n" -ge 5 ] || { echo "FAIL: only $n iterations"; exit 1; }
echo "ok: $n iterations of $per_iter kernels, identities stable"
