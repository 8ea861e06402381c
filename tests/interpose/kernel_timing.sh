#!/bin/sh
# kernel_timing.sh OUTDIR: sampled kernel timing in a recorded trace. sim_mlp_train runs under
# the interposer with --kernel-ns 50000 (simcuda gives each elementwise kernel 50 us of
# virtual time): with CAPUCHIN_TIMING_EVERY=1 every kernel carries a dur_ns and each
# elementwise one lies in [50 us, 60 us]; with 4, one launch in four is timed (the first,
# then every fourth); with 0 none is. Output stays identical, the traces validate.
# Environment: TRAIN, PRELOAD, CAPUCHIN (set by ctest).
set -eu
out=$1
mkdir -p "$out"
args="--depth 3 --width 48 --batch 8 --iters 4 --seed 7 --kernel-ns 50000"
"$TRAIN" $args > "$out/plain.txt"
for every in 1 4 0; do
  CAPUCHIN_TIMING_EVERY=$every CAPUCHIN_RECORD="$out/t$every.jsonl" LD_PRELOAD="$PRELOAD" "$TRAIN" $args > "$out/run$every.txt"
  cmp -s "$out/plain.txt" "$out/run$every.txt" || { echo "FAIL: output differs with CAPUCHIN_TIMING_EVERY=$every"; exit 1; }
  "$CAPUCHIN" trace validate "$out/t$every.jsonl" > /dev/null
done
kernels=$(grep -c '"op":"kernel"' "$out/t1.jsonl")
timed=$(grep -c '"op":"kernel".*"dur_ns"' "$out/t1.jsonl")
[ "$kernels" -gt 0 ] && [ "$timed" -eq "$kernels" ] || { echo "FAIL: every=1: $timed of $kernels kernels timed"; exit 1; }
# Elementwise kernels (not the simblas GEMMs) took 50 us of virtual time each.
bad=$(grep '"op":"kernel"' "$out/t1.jsonl" | grep -v simblas | sed 's/.*"dur_ns":\([0-9]*\).*/\1/' |
      awk '$1 < 50000 || $1 > 60000' | wc -l)
[ "$bad" -eq 0 ] || { echo "FAIL: $bad elementwise kernels outside [50000, 60000] ns"; exit 1; }
timed4=$(grep -c '"op":"kernel".*"dur_ns"' "$out/t4.jsonl")
want4=$(( (kernels + 3) / 4 ))
[ "$timed4" -eq "$want4" ] || { echo "FAIL: every=4: $timed4 timed, expected $want4 of $kernels"; exit 1; }
timed0=$(grep -c '"dur_ns"' "$out/t0.jsonl" || true)
[ "$timed0" -eq 0 ] || { echo "FAIL: every=0: $timed0 kernels timed"; exit 1; }
echo "kernel_timing: ok ($kernels kernels; all timed at 1, $timed4 at 4, none at 0)"
