#!/bin/sh
# restart_keeps_sessions.sh OUTDIR: closed sessions survive a daemon restart (issue 17: the
# auto-started daemon forgot every session after its idle exit and ids restarted at 1).
#   1. capuchind (default store beside the socket) takes two simcuda jobs (one under a budget,
#      one passive) and a third that is still attached when the daemon gets SIGTERM;
#   2. a restarted daemon lists all three as closed (start and end times; the third ended by
#      the daemon's exit), `session ID` shows the detail it showed before, `decisions ID`
#      reads the decision log (the same records), `plan ID` answers, `tensors ID` says
#      clearly that they were not kept;
#   3. a deleted decision log gets a clear message naming the file;
#   4. a new job gets an id after every earlier one;
#   5. a corrupt store: one warning naming the file, the daemon still starts and ids continue
#      after the decision-log file names.
# Environment (set by ctest): CAPUCHIN, CAPUCHIND, TRAIN, LD_LIBRARY_PATH (simcuda), PRELOAD_PREFIX.
set -u
out=$1
rm -rf "$out"; mkdir -p "$out"
sock="$out/run/capuchind.sock"
dpid=""; jpid=""
cleanup() {
  [ -n "$jpid" ] && kill "$jpid" 2>/dev/null
  [ -n "$dpid" ] && kill "$dpid" 2>/dev/null
  true
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

start_daemon() {
  "$CAPUCHIND" --socket "$sock" >> "$out/daemon.log" 2>&1 &
  dpid=$!
  i=0
  until "$CAPUCHIN" --socket "$sock" status --json > /dev/null 2>&1; do
    i=$((i + 1)); [ $i -gt 100 ] && { cat "$out/daemon.log"; fail "capuchind did not start"; }
    sleep 0.1
  done
}
stop_daemon() {  # SIGTERM, as a user or the session manager would
  kill -TERM "$dpid"; wait "$dpid"; rc=$?; dpid=""
  [ $rc -eq 0 ] || fail "capuchind exited $rc after SIGTERM"
}
job() {  # outfile budget-args...
  o=$1; shift
  LD_PRELOAD="$PRELOAD_PREFIX" "$CAPUCHIN" run --socket "$sock" "$@" -- "$TRAIN" --iters 30 > "$o" 2> "$o.err" ||
    { cat "$o.err"; fail "job failed"; }
}
q() { "$CAPUCHIN" --socket "$sock" "$@"; }

# 1. Two jobs that end, one that is attached when the daemon stops.
start_daemon
job "$out/a.txt" --budget 11MiB
job "$out/b.txt"
LD_PRELOAD="$PRELOAD_PREFIX" "$CAPUCHIN" run --socket "$sock" -- "$TRAIN" --iters 1000000 > /dev/null 2>&1 &
jpid=$!
for _ in $(seq 300); do q sessions --json | grep -q '"pid":' && break; sleep 0.05; done
q sessions --json | grep -q '"pid":' || fail "the long job never attached"
q sessions --all --json > "$out/before.json"
python3 - "$out/before.json" <<'PY' || fail "sessions before the restart"
import json, sys
s = json.load(open(sys.argv[1]))
assert [x["id"] for x in s] == [1, 2, 3], s
assert [x["state"] for x in s] == ["closed", "closed", "attached"], s
PY
q session 1 --json > "$out/session1.before.json" || fail "session 1"
q decisions 1 --json --limit 1000 > "$out/decisions1.before.json" || fail "decisions 1"
q status --json > "$out/status.json"
store=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("state_file") or "")' "$out/status.json")
stop_daemon
kill "$jpid"; wait "$jpid" 2>/dev/null; jpid=""
echo "1. three sessions, the daemon stopped by SIGTERM; store '$store'"

# 2. The restarted daemon knows them.
start_daemon
q sessions --all --json > "$out/after.json" || fail "sessions --all after the restart"
q session 1 --json > "$out/session1.after.json" || fail "session 1 after the restart"
q decisions 1 --json --limit 1000 > "$out/decisions1.after.json" || fail "decisions 1 after the restart"
python3 - "$out" <<'PY' || fail "sessions after the restart"
import json, sys
d = sys.argv[1]
load = lambda n: json.load(open(f"{d}/{n}"))
s = load("after.json")
assert [x["id"] for x in s] == [1, 2, 3], s
assert all(x["state"] == "closed" for x in s), s
assert all(x.get("started_at") and x.get("ended_at") for x in s), s
assert all("sim_mlp_train" in x["cmdline"] for x in s), s
b, a = load("session1.before.json"), load("session1.after.json")
for k in ("id", "pid", "cmdline", "events", "peak_bytes", "budget_bytes", "natural_peak_bytes", "plans", "decisions",
          "evicted_bytes", "stalls", "decision_log"):
    assert a[k] == b[k], (k, a[k], b[k])
assert a["close_reason"], a
three = next(x for x in s if x["id"] == 3)
assert "daemon" in three["close_reason"], three
db, da = load("decisions1.before.json"), load("decisions1.after.json")
assert len(da) > 0 and da[0]["action"] == "attach" and da[-1]["action"] == "detach", da
assert da == db, (len(da), len(db))
print("session 1 kept:", {k: a[k] for k in ("events", "peak_bytes", "budget_bytes", "decisions", "started_at", "ended_at")})
print("session 3 ended:", three["close_reason"])
PY
q sessions --all > "$out/sessions.txt" || fail "sessions --all"
grep -q "STARTED" "$out/sessions.txt" && grep -q "ENDED" "$out/sessions.txt" || { cat "$out/sessions.txt"; fail "no start/end times in the table"; }
q sessions > "$out/attached.txt" || fail "sessions"
grep -q "3 closed sessions" "$out/attached.txt" || { cat "$out/attached.txt"; fail "sessions does not mention the closed ones"; }
q session 1 | grep -q "close_reason" || fail "session 1 (table)"
q decisions 1 | grep -q "detach" || fail "decisions 1 (table)"
q plan 1 --json > "$out/plan1.json" || fail "plan 1 after the restart"
q tensors 1 > "$out/tensors1.txt" 2>&1 && fail "tensors of a restored session answered (they are not kept)"
grep -q "not kept" "$out/tensors1.txt" || { cat "$out/tensors1.txt"; fail "tensors: no clear message"; }
echo "2. restarted daemon: sessions 1-3 closed, detail and decisions as before"

# 3. A decision log deleted meanwhile.
log2=$(q session 2 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["decision_log"])')
[ -f "$log2" ] || fail "session 2's decision log $log2 is not there"
rm -f "$log2"
q decisions 2 > "$out/decisions2.txt" 2>&1 && fail "decisions of a deleted log answered"
grep -q "no longer exists" "$out/decisions2.txt" && grep -qF "$log2" "$out/decisions2.txt" ||
  { cat "$out/decisions2.txt"; fail "decisions: no clear message for a deleted log"; }
echo "3. deleted log: $(cat "$out/decisions2.txt")"

# 4. A new job continues the ids.
job "$out/d.txt" --budget 11MiB
q sessions --all --json | python3 -c '
import json, sys
s = json.load(sys.stdin)
assert [x["id"] for x in s] == [1, 2, 3, 4], s' || fail "the new job did not get id 4"
echo "4. a new job got id 4"

# 5. A corrupt store.
stop_daemon
[ -f "$store" ] || fail "status named no session store, or it is not there ('$store')"
printf '{"format": "capuchind-sessions", "sessions": [ {"id": 1, "trunc' > "$store"
start_daemon
n=$(grep -c "session store $store" "$out/daemon.log")
[ "$n" -eq 1 ] || { cat "$out/daemon.log"; fail "$n warnings naming the corrupt store, expected 1"; }
job "$out/e.txt"
q sessions --all --json | python3 -c '
import json, sys
s = json.load(sys.stdin)
assert [x["id"] for x in s] == [5], s' || fail "after a corrupt store the new job did not get id 5 (from the log names)"
echo "5. corrupt store: one warning ($(grep "session store" "$out/daemon.log" | head -1 | cut -c1-160)); ids continue at 5"
echo restart-keeps-sessions-ok
