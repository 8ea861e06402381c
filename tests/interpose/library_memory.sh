#!/bin/sh
# library_memory.sh OUTDIR BACKEND: exec_library_memory plain and under the executor (BACKEND)
# with a budget of a few of its tensors. Checks: the library's allocation is not served
# (managed=0 under uvm, and a library-allocation fallback in the decision log); the tensors'
# sums after pressure are those of the plain run; an IPC handle of served memory is refused
# by the driver with its own error and capuchin says why.
# Environment: PROG, PRELOAD (set by ctest).
set -eu
out=$1; backend=$2
mkdir -p "$out"
"$PROG" > "$out/ref.txt" 2> "$out/ref.err" || { echo "FAIL: the plain run failed"; cat "$out/ref.err"; exit 1; }
grep -q '^library allocation managed=0$' "$out/ref.txt" && grep -q '^ipc handle given$' "$out/ref.txt" || {
  echo "FAIL: the plain run is not what the test expects"; cat "$out/ref.txt"; exit 1; }
rm -f "$out/decisions.jsonl"
CAPUCHIN_BUDGET=9MiB CAPUCHIN_BACKEND=$backend CAPUCHIN_LOG=info CAPUCHIN_DECISION_LOG="$out/decisions.jsonl" \
  LD_PRELOAD="$PRELOAD" "$PROG" > "$out/capuchin.txt" 2> "$out/capuchin.err" || {
  echo "FAIL: the run under the executor failed"; tail -20 "$out/capuchin.err"; exit 1; }
grep -q 'executor summary: .*evictions=[1-9]' "$out/capuchin.err" || { echo "FAIL: no pressure"; cat "$out/capuchin.err"; exit 1; }
grep -q '^library allocation managed=0$' "$out/capuchin.txt" || { echo "FAIL: the library's allocation was served"; cat "$out/capuchin.txt"; exit 1; }
grep -Eq '"reason": ?"library-allocation"' "$out/decisions.jsonl" || { echo "FAIL: no library-allocation fallback logged"; exit 1; }
grep '^pressure' "$out/ref.txt" > "$out/ref.sums"; grep '^pressure' "$out/capuchin.txt" > "$out/capuchin.sums"  # (with the registered tensor's)
cmp -s "$out/ref.sums" "$out/capuchin.sums" || { echo "FAIL: sums differ"; cat "$out/ref.sums" "$out/capuchin.sums"; exit 1; }
grep -q '^ipc handle cudaErrorInvalidValue$' "$out/capuchin.txt" || { echo "FAIL: the IPC request on served memory did not get the driver's own error"; cat "$out/capuchin.txt"; exit 1; }
grep -q 'the driver refused a handle to tensor' "$out/capuchin.err" || { echo "FAIL: capuchin does not say why the handle was refused"; exit 1; }
# Plain: cudaMalloc memory has no VMM allocation handle. Pinned: the 2 MiB tensor is a VMM block,
# whose handle was retained: it must still be the one mapped after the pressure.
grep -q '^retain handle refused$' "$out/ref.txt" || { echo "FAIL: the plain run got an allocation handle"; exit 1; }
if [ "$backend" = pinned ]; then
  grep -q '^retain handle stable=1$' "$out/capuchin.txt" || { echo "FAIL: the retained allocation handle is no longer the one mapped (the tensor moved)"; cat "$out/capuchin.txt"; exit 1; }
  grep -Eq '"reason": ?"handle-exported"' "$out/decisions.jsonl" || { echo "FAIL: no handle-exported record"; exit 1; }
fi
echo library-memory-ok
