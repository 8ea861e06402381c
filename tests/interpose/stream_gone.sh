#!/bin/sh
# stream_gone.sh OUTDIR: exec_stream_gone (a tensor's last use is on a stream destroyed at once;
# pressure then evicts it) plain and under both backends. Checks: identical output ("tensor 2 2"),
# the executor evicted, and it recorded the stream's deferred event before the destroy (no
# "recording a deferred event ... failed", the fallback that waits for the whole context).
# Environment: PROG, PRELOAD (set by ctest).
set -eu
out=$1
mkdir -p "$out"
"$PROG" > "$out/ref.txt"
grep -q '^tensor 2 2$' "$out/ref.txt" || { echo "FAIL: the plain run"; cat "$out/ref.txt"; exit 1; }
for backend in pinned uvm; do
  CAPUCHIN_BUDGET=6MiB CAPUCHIN_BACKEND=$backend CAPUCHIN_LOG=info LD_PRELOAD="$PRELOAD" "$PROG" > "$out/$backend.txt" 2> "$out/$backend.err" || {
    echo "FAIL: the program failed under the $backend executor"; tail -20 "$out/$backend.err"; exit 1; }
  grep -q 'executor summary: .*evictions=[1-9]' "$out/$backend.err" || { echo "FAIL: $backend evicted nothing"; cat "$out/$backend.err"; exit 1; }
  cmp -s "$out/ref.txt" "$out/$backend.txt" || { echo "FAIL: $backend output differs"; cat "$out/$backend.txt"; exit 1; }
  if grep -q 'recording a deferred event' "$out/$backend.err"; then
    echo "FAIL: $backend: the destroyed stream's deferred event was not recorded before the destroy"; grep 'deferred' "$out/$backend.err"; exit 1
  fi
done
echo stream-gone-ok
