#!/bin/sh
# unknown_race.sh BACKEND RUNS: exec_unknown_race (PROG) under the executor, RUNS times: each run
# prints exactly what it prints without capuchin, and the runs together dropped tensors while
# the other thread's graph launches settled (decisions `drop` and `recompute:unknown-access`),
# so the race they guard against was given its chance (a graph launch every 20 ms: more often,
# and each one's forgetting of every producer leaves little to drop). The plan is kept as made
# (CAPUCHIN_PLAN=always) on the p100 profile, whose slow link makes recomputation the plan.
# It did not fail with the library before the fix it accompanies (the window is a few waits
# wide): it shows that drops and graph launches on two threads give identical results.
# Environment (set by ctest): PROG, PRELOAD, LD_LIBRARY_PATH (simcuda).
set -eu
backend=$1; runs=$2
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
"$PROG" 80 20000 > "$dir/ref.txt"
drops=0; settled=0
for i in $(seq 1 "$runs"); do
  rm -f "$dir/d.jsonl"
  CAPUCHIN_PLAN=always CAPUCHIN_GPU=p100 CAPUCHIN_BUDGET=6MiB CAPUCHIN_BACKEND="$backend" \
    CAPUCHIN_KERNEL_OUTPUTS=produce:2 CAPUCHIN_DECISION_LOG="$dir/d.jsonl" LD_PRELOAD="$PRELOAD" \
    "$PROG" 80 20000 > "$dir/got.txt" 2> "$dir/err.txt" || { echo "FAIL: run $i exited $?"; tail -5 "$dir/err.txt"; exit 1; }
  cmp -s "$dir/ref.txt" "$dir/got.txt" || { echo "FAIL: run $i printed other results"; diff "$dir/ref.txt" "$dir/got.txt" | head; exit 1; }
  drops=$((drops + $(grep -c '"action":"drop"' "$dir/d.jsonl" || true)))
  settled=$((settled + $(grep '"action":"recompute"' "$dir/d.jsonl" | grep -c '"reason":"unknown-access"' || true)))
done
echo "$runs runs identical; $drops drops, $settled recomputed before a graph launch"
[ "$drops" -gt 0 ] && [ "$settled" -gt 0 ] || { echo "FAIL: no drop met a graph launch: the test tested nothing"; exit 1; }
echo "unknown-race-ok"
