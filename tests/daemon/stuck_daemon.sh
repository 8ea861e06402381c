#!/bin/sh
# stuck_daemon.sh OUTDIR: a daemon that is stopped or never accepts cannot hold a job back, and
# `capuchin run` passes signals on to its job.
#   1. capuchind under SIGSTOP: `capuchin run` says so, the job starts at once, finishes with
#      the right output, and the whole run takes under 20 s (it waited ~17 minutes);
#   2. a socket whose backlog is full and never accepts: a job preloaded with CAPUCHIN_SOCKET
#      on it finishes and exits (its drain thread blocked in connect() forever and the exit
#      joined it), `capuchin status` fails within its timeout naming the problem, and
#      `capuchin run` starts the job within a few seconds;
#   3. SIGTERM / SIGINT / SIGHUP sent to `capuchin run` reach the job, and capuchin exits with
#      the job's status; SIGKILL of capuchin takes the job with it (PR_SET_PDEATHSIG).
# Environment (ctest): CAPUCHIN, CAPUCHIND, LOOP, LD_LIBRARY_PATH (simcuda), PRELOAD, PRELOAD_PREFIX.
set -eu
out=$1
rm -rf "$out"; mkdir -p "$out"
pids=""
cleanup() { for p in $pids; do kill -CONT "$p" 2>/dev/null || true; kill -9 "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
now() { date +%s; }
"$LOOP" --iters 4 > "$out/reference.txt"

# 1. A stopped daemon.
sock1="$out/stopped/s.sock"
"$CAPUCHIND" --socket "$sock1" --idle-exit 120 > "$out/daemon1.log" 2>&1 & dpid=$!; pids="$pids $dpid"
i=0
until "$CAPUCHIN" --socket "$sock1" status > /dev/null 2>&1; do
  i=$((i + 1)); [ $i -gt 100 ] && { echo "FAIL: capuchind did not start"; exit 1; }; sleep 0.1
done
kill -STOP "$dpid"
t0=$(now)
LD_PRELOAD="$PRELOAD_PREFIX" timeout 120 "$CAPUCHIN" run --socket "$sock1" --budget 11MiB -- "$LOOP" --iters 4 \
  > "$out/run1.txt" 2> "$out/run1.err" || { echo "FAIL: capuchin run with a stopped daemon failed ($?)"; tail -5 "$out/run1.err"; exit 1; }
t=$(( $(now) - t0 ))
cmp -s "$out/reference.txt" "$out/run1.txt" || { echo "FAIL: output differs with a stopped daemon"; exit 1; }
grep -q "does not answer" "$out/run1.err" || { echo "FAIL: capuchin run did not say the daemon does not answer"; cat "$out/run1.err"; exit 1; }
[ "$t" -lt 20 ] || { echo "FAIL: capuchin run with a stopped daemon took $t s"; exit 1; }
kill -CONT "$dpid"; kill "$dpid" 2>/dev/null || true
echo "1. stopped daemon: the job ran in $t s, output identical"

# 2. A listener that never accepts, its backlog full.
sock2="$out/full.sock"
python3 - "$sock2" > "$out/listener.log" 2>&1 <<'PY' & lpid=$!
import socket, sys, time
path = sys.argv[1]
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(path)
srv.listen(0)
queued = []
for _ in range(8):  # fill the backlog: later connects would block (or fail with EAGAIN)
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.setblocking(False)
    try:
        c.connect(path)
    except BlockingIOError:
        break
    queued.append(c)
print("listening, backlog full after", len(queued), flush=True)
time.sleep(600)
PY
pids="$pids $lpid"
i=0
until grep -q "backlog full" "$out/listener.log" 2>/dev/null; do
  i=$((i + 1)); [ $i -gt 100 ] && { echo "FAIL: the listener did not start"; cat "$out/listener.log"; exit 1; }; sleep 0.1
done
t0=$(now)
CAPUCHIN_SOCKET="$sock2" CAPUCHIN_BUDGET=11MiB LD_PRELOAD="$PRELOAD" timeout 60 "$LOOP" --iters 4 > "$out/run2.txt" 2> "$out/run2.err" ||
  { echo "FAIL: a job attached to a socket that never accepts exited $?"; tail -5 "$out/run2.err"; exit 1; }
cmp -s "$out/reference.txt" "$out/run2.txt" || { echo "FAIL: output differs with a socket that never accepts"; exit 1; }
t=$(( $(now) - t0 )); [ "$t" -lt 20 ] || { echo "FAIL: the job took $t s"; exit 1; }
rc=0; t0=$(now)
timeout 60 "$CAPUCHIN" --socket "$sock2" status > "$out/status2.txt" 2>&1 || rc=$?
t=$(( $(now) - t0 ))
[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$t" -lt 20 ] || { echo "FAIL: capuchin status on a full backlog: exit $rc after $t s"; cat "$out/status2.txt"; exit 1; }
grep -q "does not accept\|did not answer" "$out/status2.txt" || { echo "FAIL: capuchin status does not name the problem"; cat "$out/status2.txt"; exit 1; }
t0=$(now)
LD_PRELOAD="$PRELOAD_PREFIX" timeout 120 "$CAPUCHIN" run --socket "$sock2" --budget 11MiB -- "$LOOP" --iters 4 \
  > "$out/run2b.txt" 2> "$out/run2b.err" || { echo "FAIL: capuchin run on a full backlog failed ($?)"; tail -5 "$out/run2b.err"; exit 1; }
t=$(( $(now) - t0 )); [ "$t" -lt 20 ] || { echo "FAIL: capuchin run on a full backlog took $t s"; exit 1; }
cmp -s "$out/reference.txt" "$out/run2b.txt" || { echo "FAIL: output differs under capuchin run on a full backlog"; exit 1; }
kill "$lpid" 2>/dev/null || true
echo "2. full backlog: the job exits, status fails in $t s or less ($(head -c 120 "$out/status2.txt")), capuchin run starts"

# 3. Signals reach the job; capuchin exits with its status. (The jobs are python and sh, not
#    built with our sanitizers: under asan their leak report would be about them.)
for sig in TERM INT HUP; do
  rm -f "$out/got" "$out/ready"
  # python, not sh: a background sh job starts with SIGINT ignored and could not trap it.
  # The signal goes only once the job says its handler is in place: before that it would
  # (rightly) end capuchin run or the job by the signal's default action, and how long
  # capuchin takes to start a daemon and the job depends on the machine (CI under asan: >0.8 s).
  ASAN_OPTIONS=detect_leaks=0 LD_PRELOAD="$PRELOAD_PREFIX" "$CAPUCHIN" run --socket "$out/none.sock" --daemon-idle-exit 2 -- python3 -c "
import signal, sys, time
def on(*_):
    open(sys.argv[1], 'w').write('$sig')
    sys.exit(42)
signal.signal(signal.SIG$sig, on)
open(sys.argv[2], 'w').write('ready')
while True: time.sleep(0.1)" "$out/got" "$out/ready" > /dev/null 2>&1 & cpid=$!
  i=0; until [ -s "$out/ready" ]; do
    i=$((i + 1)); [ $i -gt 400 ] && { echo "FAIL: the SIG$sig job did not start in 20 s"; exit 1; }; sleep 0.05
  done
  kill -$sig "$cpid"
  rc=0; wait "$cpid" || rc=$?
  [ "$rc" -eq 42 ] && [ "$(cat "$out/got" 2>/dev/null)" = "$sig" ] ||
    { echo "FAIL: SIG$sig to capuchin run: exit $rc, the job saw '$(cat "$out/got" 2>/dev/null)'"; exit 1; }
done
ASAN_OPTIONS=detect_leaks=0 LD_PRELOAD="$PRELOAD_PREFIX" "$CAPUCHIN" run --socket "$out/none.sock" --daemon-idle-exit 2 -- sh -c 'echo $$ > "$0"; while :; do sleep 0.1; done' "$out/job.pid" > /dev/null 2>&1 & cpid=$!
i=0; until [ -s "$out/job.pid" ]; do i=$((i + 1)); [ $i -gt 100 ] && { echo "FAIL: the job did not start"; exit 1; }; sleep 0.05; done
jpid=$(cat "$out/job.pid")
kill -KILL "$cpid"; wait "$cpid" 2>/dev/null || true
i=0  # a zombie (Z) is dead, not yet reaped; a loaded machine may take a moment to get there
while :; do
  state=$(awk '{ print $3 }' "/proc/$jpid/stat" 2>/dev/null || echo gone)
  { [ "$state" = gone ] || [ "$state" = Z ]; } && break
  i=$((i + 1)); [ $i -gt 100 ] && break; sleep 0.05
done
if [ "$state" != gone ] && [ "$state" != Z ]; then kill -9 "$jpid"; echo "FAIL: the job outlived a SIGKILLed capuchin run ($state)"; exit 1; fi
echo "3. SIGTERM, SIGINT, SIGHUP forwarded (exit 42 from the job); SIGKILL of capuchin ends the job"
echo "stuck_daemon: ok"
