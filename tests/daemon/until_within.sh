# until_within.sh: sourced by the daemon tests' scripts (CAPUCHIN set).
# until_within SECONDS COMMAND...: runs COMMAND every 50 ms until it succeeds (status 0) or
# SECONDS pass (status 1). Bounded by time, not by a count of polls: a poll that starts
# processes is slow on a loaded machine, and a count of them once ran out before a job attached.
until_within() {
  deadline=$(( $(date +%s) + $1 )); shift
  while [ "$(date +%s)" -le "$deadline" ]; do
    "$@" && return 0
    sleep 0.05
  done
  return 1
}

# attached_session SOCKET: prints the id of the session attached to capuchind now, or nothing.
attached_session() {
  "$CAPUCHIN" --socket "$1" sessions --json | python3 -c '
import json, sys
s = [x for x in json.load(sys.stdin) if x["state"] == "attached"]
print(s[0]["id"] if s else "")'
}

# session_ready SOCKET [plan]: sets ready_sid to the attached session's id; succeeds once there
# is one (with "plan": once `capuchin plan` shows the job's iteration for it). A job never waits
# for a plan: a test that needs one followed holds the job (sim_mlp_train --hold-before N
# --hold-file F) until this succeeds, else a daemon slower than the job (ASan) may be late.
session_ready() {
  ready_sid=$(attached_session "$1") || return 1
  [ -n "$ready_sid" ] || return 1
  [ $# -lt 2 ] || "$CAPUCHIN" --socket "$1" plan "$ready_sid" --json 2>/dev/null | grep -q "the job's iteration"
}
