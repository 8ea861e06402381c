#!/bin/sh
# standby_daemon.sh OUTDIR: a job standing by (its budget not binding: launches pass unwatched)
# whose capuchind stops answering, or dies, before memory runs short. sim_loop_train grows 4x
# at iteration 150 of 200 under `capuchin run --budget B` (B = 0.6 of the grown peak):
#   1. the daemon gets SIGSTOP once the job, attached to it, logs "standing by" (and before it
#      logs the wake);
#   2. the same with SIGKILL;
# each time the job notices its daemon gone ("lost capuchind"), wakes when memory runs short,
# completes within 120 s with output identical to a run without capuchin, and its executor
# summary says it stood by and woke.
# Environment (ctest): CAPUCHIN, CAPUCHIND, LOOP, LD_LIBRARY_PATH (simcuda), PRELOAD_PREFIX.
set -eu
out=$1
rm -rf "$out"; mkdir -p "$out"
args="--grow-at 150 --iters 200 --input-bytes 2097152 --layers 2 --weight-bytes 65536 --alloc async"
peak=$("$LOOP" $args --print-peak)
budget=$((peak * 6 / 10))
"$LOOP" $args > "$out/reference.txt"
dpid=""; jpid=""
cleanup() {
  [ -n "$dpid" ] && { kill -CONT "$dpid" 2>/dev/null; kill -9 "$dpid" 2>/dev/null; }
  [ -n "$jpid" ] && kill "$jpid" 2>/dev/null
  true
}
trap cleanup EXIT
trap 'exit 1' HUP INT TERM  # dash runs the EXIT trap on exit, not when a signal ends it
fail() { echo "FAIL: $*"; exit 1; }

for sig in STOP KILL; do
  sock="$out/$sig/s.sock"
  mkdir -p "$out/$sig"
  "$CAPUCHIND" --socket "$sock" --idle-exit 120 > "$out/$sig/daemon.log" 2>&1 & dpid=$!
  i=0
  until "$CAPUCHIN" --socket "$sock" status > /dev/null 2>&1; do
    i=$((i + 1)); [ $i -gt 100 ] && fail "capuchind did not start"; sleep 0.1
  done
  err="$out/$sig/job.err"
  CAPUCHIN_LOG=info SIMCUDA_DEVICE_BYTES=$budget LD_PRELOAD="$PRELOAD_PREFIX" timeout 120 \
    "$CAPUCHIN" run --socket "$sock" --budget "$budget" -- "$LOOP" $args > "$out/$sig/job.txt" 2> "$err" &
  jpid=$!
  i=0
  until grep -q "executor: standing by" "$err" 2>/dev/null; do
    i=$((i + 1)); [ $i -gt 1200 ] && fail "$sig: the job did not stand by within 60 s"; sleep 0.05
  done
  grep -q "attached to capuchind" "$err" || fail "$sig: the job never attached to the daemon"
  if grep -q "watching every call again" "$err"; then
    fail "$sig: the job woke before the daemon got SIG$sig (the test cannot tell what it meant to)"
  fi
  kill -"$sig" "$dpid" || fail "$sig: the daemon was gone before the signal"
  status=0; wait "$jpid" || status=$?; jpid=""
  [ "$status" -eq 0 ] || { tail -5 "$err"; fail "$sig: capuchin run exited $status"; }
  cmp -s "$out/reference.txt" "$out/$sig/job.txt" || fail "$sig: output differs from the run without capuchin"
  grep -q "watching every call again (memory runs short)" "$err" || fail "$sig: the job never woke"
  grep -q "lost capuchind" "$err" || fail "$sig: the job never noticed its daemon gone (\"lost capuchind\")"
  grep -q "executor summary: .*standbys=[1-9][0-9]* wakes=[1-9]" "$err" || { grep "executor summary" "$err"; fail "$sig: the summary does not say it stood by and woke"; }
  kill -CONT "$dpid" 2>/dev/null || true; kill -9 "$dpid" 2>/dev/null || true; dpid=""
  echo "$sig: the job stood by, its daemon got SIG$sig, it woke and finished with identical output"
done
echo standby-daemon-ok
