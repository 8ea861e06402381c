#!/bin/sh
# dead_reuse.sh OUTDIR: exec_dead_reuse (a freed, cached tensor moved out by a shortage, its
# block then reused on the same stream and written by an upload) plain and under the uvm
# executor, whose move of a freed block is a discard on its own out stream. With random worker
# delays (SIMCUDA_JITTER_US) that discard runs after the upload whenever nothing orders the two,
# and simcuda's discard leaves 0xFF (cuda.h: "an indeterminate value"). Checks: every round of
# the run under capuchin read its upload back (the same rounds as the plain run), the scenario
# happened (most rounds' X' got X's block back, and simcuda's timeline shows discards of X's
# size on a stream that is not the job's: capuchin's moves of the cached block), the executor
# moved something out, and simcuda never evicted managed memory itself (the device is the
# budget).
# Environment: PROG, PRELOAD (set by ctest).
set -eu
out=$1
mkdir -p "$out"
rounds=${ROUNDS:-40}
"$PROG" "$rounds" > "$out/ref.txt" || { echo "FAIL: the plain run"; tail -3 "$out/ref.txt"; exit 1; }
status=0
SIMCUDA_JITTER_US=${JITTER_US:-3000} SIMCUDA_DEVICE_BYTES=6MiB SIMCUDA_STATS_FILE="$out/stats.json" SIMCUDA_TIMELINE="$out/timeline.txt" \
  CAPUCHIN_BUDGET=6MiB CAPUCHIN_BACKEND=uvm CAPUCHIN_LOG=info LD_PRELOAD="$PRELOAD" \
  timeout 240 "$PROG" "$rounds" > "$out/capuchin.txt" 2> "$out/capuchin.err" || status=$?
if [ "$status" -ne 0 ]; then
  echo "FAIL: exit status $status under the executor (2: a round read back something else than its upload)"
  grep -v ' ok$' "$out/capuchin.txt" | head -5; tail -5 "$out/capuchin.err"; exit 1
fi
grep '^round' "$out/ref.txt" > "$out/ref.rounds"; grep '^round' "$out/capuchin.txt" > "$out/capuchin.rounds"
cmp -s "$out/ref.rounds" "$out/capuchin.rounds" || { echo "FAIL: output differs"; diff "$out/ref.rounds" "$out/capuchin.rounds" | head -5; exit 1; }
reused=$(awk '/^reused/ { print $2 }' "$out/capuchin.txt")
[ -n "$reused" ] && [ "$reused" -ge $((rounds / 2)) ] || { echo "FAIL: X' got X's block back in ${reused:-no} rounds of $rounds"; exit 1; }
# timeline: stream kind(8 discard) start end stream_free not_before dependency bytes; the job's
# stream a is the first stream it creates after the legacy stream (id 2)
discards=$(awk '!/^#/ && $2 == 8 && $8 == 196608 && $1 != 2 { n++ } END { print n + 0 }' "$out/timeline.txt")
[ "$discards" -ge $((rounds / 2)) ] || { echo "FAIL: only $discards discards of the cached block's size on capuchin's streams in $rounds rounds"; exit 1; }
grep -q 'executor summary: .*evictions=[1-9]' "$out/capuchin.err" || { echo "FAIL: the executor moved nothing out"; tail -5 "$out/capuchin.err"; exit 1; }
grep -q '"uvm_evictions": 0' "$out/stats.json" || { echo "FAIL: simcuda evicted managed memory itself"; cat "$out/stats.json"; exit 1; }
echo dead-reuse-ok
