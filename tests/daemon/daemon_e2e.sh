#!/bin/sh
# daemon_e2e.sh OUTDIR: capuchind with simcuda training programs attached through
# `capuchin run`. Checks: three concurrent runs with different budgets each print exactly
# what they print without capuchin, and `capuchin sessions --json` lists all three while they
# run; per-session decision logs are written and readable (`capuchin log`); SIGKILL of the
# daemon mid-run leaves the job's output identical, and a restarted daemon accepts a new
# session; bad input never brings the daemon down (bad_client).
# Environment (set by ctest): CAPUCHIN, CAPUCHIND, TRAIN, BADCLIENT, LD_LIBRARY_PATH (simcuda),
# PRELOAD_PREFIX (the sanitizer runtime that must precede libcapuchin.so, or empty).
set -eu
out=$1
rm -rf "$out"; mkdir -p "$out"
sock="$out/run/capuchind.sock"
args="--depth 3 --width 96 --batch 24"
iters=${ITERS:-400}
dpid=""
cleanup() { [ -n "$dpid" ] && kill "$dpid" 2>/dev/null || true; }
trap cleanup EXIT

start_daemon() {
  "$CAPUCHIND" --socket "$sock" --log-dir "$out/logs" >> "$out/daemon.log" 2>&1 &
  dpid=$!
  i=0
  until "$CAPUCHIN" --socket "$sock" status --json > /dev/null 2>&1; do
    i=$((i + 1)); [ $i -gt 100 ] && { echo "FAIL: capuchind did not start"; cat "$out/daemon.log"; exit 1; }
    sleep 0.1
  done
}
# Runs the job under capuchin (the sanitizer runtime, if any, stays first in LD_PRELOAD).
# With a hold file the job waits before iteration 1 until the file exists: the test acts on the
# running jobs (lists them, kills the daemon) without racing their end on a slow machine.
run_job() {  # budget seed outfile [hold-file]
  hold=""; [ $# -ge 4 ] && hold="--hold-before 1 --hold-file $4"
  LD_PRELOAD="$PRELOAD_PREFIX" "$CAPUCHIN" run --socket "$sock" --budget "$1" -- "$TRAIN" $args --iters $iters --seed "$2" $hold > "$3"
}
. "$(dirname "$0")/until_within.sh"

for s in 1 2 3; do "$TRAIN" $args --iters $iters --seed $s > "$out/plain$s.txt"; done
"$TRAIN" $args --iters $iters --seed 4 > "$out/plain4.txt"
start_daemon

# 1. Three concurrent jobs, different budgets (a share of the device, a size with a unit,
# a share). Budgets are enforced by the executor; eviction itself is tested with it
# (tests/interpose), here every budget leaves room for the job's 64 KiB-granule peak.
# The three are held before their second iteration until the test has seen them together.
run_job 50% 1 "$out/run1.txt" "$out/go1" & p1=$!
run_job 1MiB 2 "$out/run2.txt" "$out/go1" & p2=$!
run_job 90% 3 "$out/run3.txt" "$out/go1" & p3=$!
three_listed() {
  "$CAPUCHIN" --socket "$sock" sessions --json > "$out/sessions.json" 2>/dev/null || return 1
  [ "$(grep -o '"pid":' "$out/sessions.json" | wc -l)" -ge 3 ]
}
seen=0
until_within 120 three_listed && seen=1
touch "$out/go1"
wait $p1; wait $p2; wait $p3
[ $seen -eq 1 ] || { echo "FAIL: capuchin sessions never showed the three jobs at once (120 s)"; cat "$out/sessions.json"; exit 1; }
for s in 1 2 3; do
  cmp -s "$out/plain$s.txt" "$out/run$s.txt" || { echo "FAIL: job $s output differs under capuchin"; diff "$out/plain$s.txt" "$out/run$s.txt" | head; exit 1; }
done
echo "three concurrent jobs: identical output; seen together: $(cat "$out/sessions.json" | head -c 300)"
"$CAPUCHIN" --socket "$sock" sessions --all
nlogs=$(ls "$out/logs" | wc -l)
[ "$nlogs" -eq 3 ] || { echo "FAIL: expected 3 decision logs, found $nlogs"; exit 1; }
for f in "$out"/logs/*.jsonl; do
  grep -q '"action":"attach"' "$f" && grep -q '"action":"detach"' "$f" || { echo "FAIL: $f lacks attach/detach"; cat "$f"; exit 1; }
done
grep -l '"action":"plan"' "$out"/logs/*.jsonl > /dev/null || { echo "FAIL: no session was planned for"; exit 1; }
"$CAPUCHIN" log "$(ls "$out"/logs/*.jsonl | head -1)" --filter attach,plan,detach
"$CAPUCHIN" --socket "$sock" session 1 | grep -q "plan_summary" || { echo "FAIL: capuchin session 1"; exit 1; }
"$CAPUCHIN" --socket "$sock" metrics | grep -q '^capuchin_up 1' || { echo "FAIL: metrics"; exit 1; }
# --json is JSON: one object per sample (the jobs have detached: no per-session samples now)
"$CAPUCHIN" --socket "$sock" metrics --json | python3 -c '
import json, sys
samples = json.load(sys.stdin)
names = {s["name"] for s in samples if "name" in s}
assert {"capuchin_up", "capuchin_sessions"} <= names, names
assert not [s for s in samples if "unparsed" in s], "unparsed lines"
assert all(s["labels"] == {} for s in samples)
assert next(s for s in samples if s.get("name") == "capuchin_up")["value"] == 1
' || { echo "FAIL: metrics --json"; exit 1; }

# 2. SIGKILL the daemon in the middle of a (longer) run; restart it while the job runs: the
# job re-attaches as a new session of the new daemon (an id after every earlier one: the
# restarted daemon also lists the earlier, closed sessions), and its output stays identical.
newer() {  # prints the ids above $1 among all sessions the daemon lists
  "$CAPUCHIN" sessions --all --json --socket "$sock" 2>/dev/null |
    python3 -c 'import json,sys; print(" ".join(str(s["id"]) for s in json.load(sys.stdin) if s["id"] > int(sys.argv[1])))' "$1" || true
}
# The job is held before its second iteration until it has re-attached (or 120 s passed): the
# sink's reconnect attempts after the kill are 100, 200, 400, ... 5000 ms apart
# (interpose/daemon_sink.cpp), and a job that ended before the attempt that finds the restarted
# daemon once failed a clean-clone CI run.
attached_listed() { "$CAPUCHIN" sessions --json --socket "$sock" 2>/dev/null | grep -q '"pid":'; }
reattached_listed() { [ -n "$(newer "$maxid")" ]; }
run_job 50% 4 "$out/run4.txt" "$out/go4" & p4=$!
until_within 120 attached_listed || { touch "$out/go4"; wait $p4 || true; echo "FAIL: the fourth job did not attach (120 s)"; exit 1; }
maxid=$("$CAPUCHIN" sessions --all --json --socket "$sock" | python3 -c 'import json,sys; print(max(s["id"] for s in json.load(sys.stdin)))')
kill -9 "$dpid"; wait "$dpid" 2>/dev/null || true; dpid=""
start_daemon
reattached=0
until_within 120 reattached_listed && reattached=1
touch "$out/go4"
wait $p4 || { echo "FAIL: the job failed after the daemon was killed"; exit 1; }
cmp -s "$out/plain4.txt" "$out/run4.txt" || { echo "FAIL: output differs after SIGKILL of the daemon"; exit 1; }
echo "daemon SIGKILLed mid-run: job output identical; re-attached to the restarted daemon: $reattached"
[ $reattached -eq 1 ] || { echo "FAIL: the job did not re-attach to the restarted daemon"; exit 1; }
run_job 100% 1 "$out/run5.txt"
cmp -s "$out/plain1.txt" "$out/run5.txt" || { echo "FAIL: output differs with the restarted daemon"; exit 1; }
[ -n "$(newer "$maxid")" ] || { echo "FAIL: the restarted daemon took no session"; exit 1; }
echo "restarted daemon accepted a new session (ids after $maxid: $(newer "$maxid"))"

# 3. Bad input.
"$BADCLIENT" "$sock"
"$CAPUCHIN" --socket "$sock" status --json | grep -q '"sessions":\[' || { echo "FAIL: status after bad input"; exit 1; }
echo "daemon_e2e: ok"
