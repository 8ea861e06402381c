#!/bin/sh
# two_devices.sh OUTDIR BACKEND: a process that switches between two simcuda devices
# (two_devices_prog: tensors on device 0 under pressure, one on device 1 at each step that also
# receives a device-0 tensor by a copy issued on device 1) plain and
# under CAPUCHIN_BUDGET (3 of device 0's 4 tensors fit) with BACKEND (uvm|pinned). Checks: the
# same output (device 1's tensor is device memory of device 1 in both: the executor passes
# other devices' allocations through rather than serve them with device 0's memory, which a
# kernel on device 1 could not touch under pinned); the executor ran on device 0 and evicted
# there, within the budget, with no failed event record (its events are created in its own
# context); device 1 held exactly its one tensor at a time; the log said once that device 1's
# allocations are passed through.
# Environment: PROG, PRELOAD (set by ctest), LD_LIBRARY_PATH (simcuda).
set -eu
out=$1; backend=$2
rm -rf "$out"; mkdir -p "$out"
bytes=2097152; steps=8; budget=6291456
export SIMCUDA_DEVICES=2 SIMCUDA_DEVICE_BYTES=16777216
"$PROG" $bytes $steps > "$out/plain.txt"
grep -qx "U: device memory of device 1" "$out/plain.txt" || { echo "FAIL: plain run: U is not device 1's memory"; cat "$out/plain.txt"; exit 1; }
SIMCUDA_STATS_FILE="$out/stats.json" CAPUCHIN_BUDGET=$budget CAPUCHIN_BACKEND=$backend CAPUCHIN_LOG=info \
  CAPUCHIN_DECISION_LOG="$out/decisions.jsonl" LD_PRELOAD="$PRELOAD" \
  "$PROG" $bytes $steps > "$out/preload.txt" 2> "$out/preload.err" || {
  echo "FAIL: two_devices_prog under the executor ($backend) failed"; tail -20 "$out/preload.err"; exit 1; }
if ! cmp -s "$out/plain.txt" "$out/preload.txt"; then
  echo "FAIL: output differs under the executor ($backend)"; diff "$out/plain.txt" "$out/preload.txt" || true; exit 1
fi
grep -q "executor on: .*backend $backend, device 0" "$out/preload.err" ||
  { echo "FAIL: the executor did not start on device 0 with $backend"; grep "executor" "$out/preload.err" | head; exit 1; }
grep -q 'evictions=[1-9]' "$out/preload.err" || { echo "FAIL: the executor evicted nothing"; grep summary "$out/preload.err"; exit 1; }
# Its events live in its own context: none fails to record on its streams (or on device 1's,
# whose work it leaves alone) while device 1 is current.
if grep -q "warn: executor" "$out/preload.err"; then
  echo "FAIL: the executor warned:"; grep "warn: executor" "$out/preload.err" | sort | uniq -c | head; exit 1
fi
n=$(grep -c "work on another device uses device 0's tensors" "$out/preload.err" || true)
[ "$n" -eq 1 ] || { echo "FAIL: device 1's copies of device 0's tensors were logged $n times, not once"; exit 1; }
n=$(grep -c "serves device 0 only; allocations on device 1 are passed through" "$out/preload.err" || true)
[ "$n" -eq 1 ] || { echo "FAIL: the pass-through of device 1 was logged $n times, not once"; exit 1; }
python3 - "$out/stats.json" "$budget" "$bytes" <<'PY'
import json, sys
stats, budget, bytes_ = json.load(open(sys.argv[1])), int(sys.argv[2]), int(sys.argv[3])
dev = {d["device"]: d for d in stats["devices"]}
if stats["sticky_error"] != 0: sys.exit(f"FAIL: the context failed: {stats['sticky_error']}")
if not 0 < dev[0]["peak_bytes"] <= budget: sys.exit(f"FAIL: device 0 peaked at {dev[0]['peak_bytes']}, budget {budget}")
if dev[1]["peak_bytes"] != bytes_: sys.exit(f"FAIL: device 1 peaked at {dev[1]['peak_bytes']}, expected its one tensor ({bytes_})")
print(f"device 0 peak {dev[0]['peak_bytes']} <= budget {budget}; device 1 peak {dev[1]['peak_bytes']}")
PY
echo "two devices under $backend: identical output; device 1 passed through"
