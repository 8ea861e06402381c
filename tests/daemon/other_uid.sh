#!/bin/sh
# other_uid.sh OUTDIR: another uid cannot use capuchind. The socket is 0600 in a 0700
# directory (the kernel refuses the connect); and with those permissions opened up, the
# daemon's SO_PEERCRED check refuses the peer itself. Runs the client as uid 65534 through
# setpriv; exits 77 (ctest: skipped) when that is impossible here (not root, no setpriv, or
# the build tree unreadable by that uid), saying why.
set -eu
out=$1
rm -rf "$out"; mkdir -p "$out/run"
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
if [ "$(id -u)" -ne 0 ] || ! command -v setpriv > /dev/null; then
  echo "SKIP: needs root and setpriv to run a client as another uid"; exit 77
fi
if ! as_nobody "$CAPUCHIN" --version > /dev/null 2>&1; then
  echo "SKIP: uid 65534 cannot execute $CAPUCHIN (build tree not readable by it)"; exit 77
fi
sock="$out/run/capuchind.sock"
"$CAPUCHIND" --socket "$sock" --log-dir "$out/logs" > "$out/daemon.log" 2>&1 &
dpid=$!
trap 'kill $dpid 2>/dev/null || true' EXIT
for i in $(seq 1 100); do "$CAPUCHIN" --socket "$sock" status > /dev/null 2>&1 && break; sleep 0.1; done
stat -c '%a %n' "$sock" "$(dirname "$sock")"
[ "$(stat -c %a "$sock")" = 600 ] || { echo "FAIL: socket is not 0600"; exit 1; }
if as_nobody "$CAPUCHIN" --socket "$sock" status --json > "$out/nobody1.txt" 2>&1; then
  echo "FAIL: uid 65534 could query the daemon"; cat "$out/nobody1.txt"; exit 1
fi
echo "file permissions: $(cat "$out/nobody1.txt")"
chmod 0755 "$out/run" "$out"; chmod 0666 "$sock"
if as_nobody "$CAPUCHIN" --socket "$sock" status --json > "$out/nobody2.txt" 2>&1; then
  echo "FAIL: uid 65534 could query the daemon through an open socket"; cat "$out/nobody2.txt"; exit 1
fi
grep -q "forbidden" "$out/nobody2.txt" || { echo "FAIL: expected the daemon's refusal"; cat "$out/nobody2.txt"; exit 1; }
echo "peer-credential check: $(cat "$out/nobody2.txt")"
"$CAPUCHIN" --socket "$sock" metrics | grep -q '^capuchin_rejected_peers_total 1' || { echo "FAIL: refusal not counted"; exit 1; }
"$CAPUCHIN" --socket "$sock" status --json > /dev/null
echo "other_uid: ok"
