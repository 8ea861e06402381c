#!/bin/sh
# unseen_write.sh OUTDIR: exec_unseen_write (a kernel writing a tensor through a pointer table,
# queued behind a long kernel on another stream when pressure evicts the tensor) plain and under
# the executor's pinned backend. Checks: identical output (the write survived: "tensor 2 2");
# the executor evicted; in simcuda's timeline, the copy out of the tensor started after the long
# kernel and the table kernel ended (it waits for every stream active since the tensor's last
# seen use, not only for that use). Environment: PROG, PRELOAD (set by ctest).
set -eu
out=$1
mkdir -p "$out"
"$PROG" > "$out/ref.txt"
grep -q '^tensor 2 2$' "$out/ref.txt" || { echo "FAIL: the plain run does not see the table kernel's write"; cat "$out/ref.txt"; exit 1; }
# CAPUCHIN_RECOMPUTE=declared: a probation of the fill kernel's inferred write set copies the
# tensor to the host too, which the timeline check below would take for the eviction's copy.
SIMCUDA_TIMELINE="$out/timeline.txt" CAPUCHIN_RECOMPUTE=declared CAPUCHIN_BUDGET=6MiB CAPUCHIN_BACKEND=pinned CAPUCHIN_LOG=info \
  LD_PRELOAD="$PRELOAD" "$PROG" > "$out/capuchin.txt" 2> "$out/capuchin.err" || {
  echo "FAIL: the program failed under the executor"; tail -20 "$out/capuchin.err"; exit 1; }
grep -q 'executor summary: .*evictions=[1-9]' "$out/capuchin.err" || { echo "FAIL: the executor evicted nothing"; cat "$out/capuchin.err"; exit 1; }
cmp -s "$out/ref.txt" "$out/capuchin.txt" || { echo "FAIL: output differs (the table kernel's write was lost)"; diff "$out/ref.txt" "$out/capuchin.txt" || true; exit 1; }
# columns: stream kind start_ns end_ns stream_free_ns not_before_ns dependency_ns bytes; kind 1 = copy
start=$(awk '!/^#/ && $2 == 1 && $8 == 4190208 { print $3; exit }' "$out/timeline.txt")
[ -n "$start" ] || { echo "FAIL: no copy of the tensor in the timeline"; exit 1; }
awk -v s="$start" 'BEGIN { exit !(s >= 20000000) }' || {
  echo "FAIL: the copy out of the tensor started at ${start} ns, before the kernels queued since its last seen use ended (20 ms)"; exit 1; }
echo unseen-write-ok
