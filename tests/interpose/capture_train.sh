#!/bin/sh
# capture_train.sh OUTDIR [sim_mlp_train options...]: runs sim_mlp_train plain and under
# LD_PRELOAD=libcapuchin.so with CAPUCHIN_RECORD, then checks: identical stdout, a valid
# trace, and a trace that matches the program's own ground truth (interpose_trace_check).
# Environment: TRAIN, PRELOAD, CAPUCHIN, CHECK (set by ctest).
set -eu
out=$1; shift
mkdir -p "$out"
args="--depth 3 --width 48 --batch 8 --iters 4 --seed 7 $*"
"$TRAIN" $args > "$out/plain.txt"
CAPUCHIN_RECORD="$out/trace.jsonl.gz" LD_PRELOAD="$PRELOAD" "$TRAIN" $args --ground-truth "$out/truth.jsonl" > "$out/preload.txt"
if ! cmp -s "$out/plain.txt" "$out/preload.txt"; then
  echo "FAIL: output differs under the interposer"; diff "$out/plain.txt" "$out/preload.txt" || true; exit 1
fi
"$CAPUCHIN" trace validate "$out/trace.jsonl.gz"
"$CHECK" "$out/trace.jsonl.gz" "$out/truth.jsonl"
echo "capture_train: ok ($(wc -l < "$out/plain.txt") output lines identical)"
