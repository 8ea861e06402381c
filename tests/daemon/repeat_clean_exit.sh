#!/bin/sh
# repeat_clean_exit.sh OUTDIR: a job under `capuchin run` with a budget below its peak (the
# executor evicts, the daemon attached) run ten times: every run must exit 0 with output
# identical to the plain run. Guards the exit path, where the drain thread still talks to the
# daemon while the process tears down (a double free there once failed 1 run in 6).
# Environment: CAPUCHIN, TRAIN, LD_LIBRARY_PATH (simcuda), PRELOAD_PREFIX.
set -eu
out=$1
rm -rf "$out"; mkdir -p "$out"
args="--depth 4 --width 64 --batch 2048 --iters 4 --kernel-ns 50000"
"$TRAIN" $args > "$out/plain.txt"
budget=$(( $("$TRAIN" $args --print-peak) * 7 / 10 ))
for i in 1 2 3 4 5 6 7 8 9 10; do
  rc=0
  LD_PRELOAD="$PRELOAD_PREFIX" SIMCUDA_DEVICE_BYTES=$budget "$CAPUCHIN" run --socket "$out/s.sock" --budget "$budget" \
    -- "$TRAIN" $args > "$out/run.txt" 2> "$out/err.txt" || rc=$?
  [ $rc -eq 0 ] || { echo "FAIL: run $i exited $rc"; cat "$out/err.txt"; exit 1; }
  cmp -s "$out/plain.txt" "$out/run.txt" || { echo "FAIL: run $i output differs"; exit 1; }
done
echo "ok: 10 runs at budget $budget exited 0 with identical output"
