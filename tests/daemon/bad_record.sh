#!/bin/sh
# bad_record.sh OUTDIR: `capuchin run --budget B --record PATH` with a PATH that cannot be
# written. capuchin must say what really happens: no trace is written, the job stays attached
# to capuchind (its session is there) and the budget still applies (the executor ran); the job
# itself completes with its normal output.
# Environment (set by ctest): CAPUCHIN, CAPUCHIND, TRAIN, LD_LIBRARY_PATH (simcuda), PRELOAD_PREFIX.
set -u
out=$1
rm -rf "$out"; mkdir -p "$out"
sock=$out/s.sock
"$CAPUCHIND" --socket "$sock" --log-dir "$out/logs" --idle-exit 60 > "$out/daemon.log" 2>&1 &
dpid=$!
trap 'kill $dpid 2>/dev/null; wait $dpid 2>/dev/null' EXIT
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
"$TRAIN" --iters 3 > "$out/ref.txt"
CAPUCHIN_LOG=info LD_PRELOAD="$PRELOAD_PREFIX" "$CAPUCHIN" run --socket "$sock" --budget 50% --record "$out/no/such/dir/t.jsonl" \
  -- "$TRAIN" --iters 3 > "$out/run.txt" 2> "$out/run.err" || { echo "FAIL: the job failed"; cat "$out/run.err"; exit 1; }
cmp -s "$out/ref.txt" "$out/run.txt" || { echo "FAIL: output differs"; exit 1; }
grep -q "no trace is written; the job stays attached to capuchind; CAPUCHIN_BUDGET still applies" "$out/run.err" || {
  echo "FAIL: capuchin does not say what happens"; grep -i record "$out/run.err"; exit 1; }
grep -q "capture is off, the program runs unchanged" "$out/run.err" && { echo "FAIL: the old, wrong message"; exit 1; }
grep -q "executor summary" "$out/run.err" || { echo "FAIL: no executor"; exit 1; }
[ ! -e "$out/no" ] || { echo "FAIL: a trace path was created"; exit 1; }
"$CAPUCHIN" --socket "$sock" sessions --all --json > "$out/sessions.json"
python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); assert len(s) == 1 and s[0]["events"] > 0, s' "$out/sessions.json" || {
  echo "FAIL: no session with events in the daemon"; cat "$out/sessions.json"; exit 1; }
echo bad-record-ok
