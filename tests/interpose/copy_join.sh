#!/bin/sh
# copy_join.sh OUTDIR [BACKEND]: copy_join_prog (strided/3D/peer/symbol copies, captures joined
# through events, a tensor read only by 2D copies) plain and under LD_PRELOAD=libcapuchin.so with
# CAPUCHIN_RECORD. Checks: identical output; a valid trace; every copy of the copy phase with its
# direction, bytes and allocation ids, and every memset with its bytes and allocation; launches and copies captured on the joined stream present
# once per graph launch and only after the capture ended; the 3000-byte reads of T0.
# With BACKEND (uvm|pinned): the same run under CAPUCHIN_BUDGET (4 of the 6 big tensors fit), and
# the executor saw the 2D copies: it evicted tensors, but never T0, the one only they touch (an
# unseen access would leave T0 the stalest tensor, the first victim).
# Environment: PROG, PRELOAD, CAPUCHIN (set by ctest).
set -eu
out=$1; backend=${2:-}
mkdir -p "$out"
bytes=2097152; steps=12
"$PROG" $bytes $steps > "$out/plain.txt"
rm -f "$out/trace.jsonl" "$out/decisions.jsonl"
if [ -z "$backend" ]; then
  CAPUCHIN_RECORD="$out/trace.jsonl" LD_PRELOAD="$PRELOAD" "$PROG" $bytes $steps > "$out/preload.txt" 2> "$out/preload.err" || {
    echo "FAIL: copy_join_prog under the interposer failed"; cat "$out/preload.err"; exit 1; }
else
  SIMCUDA_DEVICE_BYTES=12582912 CAPUCHIN_BUDGET=8388608 CAPUCHIN_BACKEND=$backend CAPUCHIN_LOG=info \
    CAPUCHIN_DECISION_LOG="$out/decisions.jsonl" CAPUCHIN_RECORD="$out/trace.jsonl" LD_PRELOAD="$PRELOAD" \
    "$PROG" $bytes $steps > "$out/preload.txt" 2> "$out/preload.err" || {
    echo "FAIL: copy_join_prog under the executor ($backend) failed"; tail -20 "$out/preload.err"; exit 1; }
  grep -q 'evictions=[1-9]' "$out/preload.err" || { echo "FAIL: the executor evicted nothing"; cat "$out/preload.err"; exit 1; }
fi
if ! cmp -s "$out/plain.txt" "$out/preload.txt"; then
  echo "FAIL: output differs under the interposer"; diff "$out/plain.txt" "$out/preload.txt" || true; exit 1
fi
"$CAPUCHIN" trace validate "$out/trace.jsonl"
python3 - "$out" "$steps" "$backend" <<'PY'
import json, sys
out, steps, backend = sys.argv[1], int(sys.argv[2]), sys.argv[3]
events = [json.loads(l) for l in open(f"{out}/trace.jsonl")][1:]
errors = []
allocs = [e["id"] for e in events if e["op"] == "alloc"]
if len(allocs) < 12: sys.exit(f"FAIL: {len(allocs)} allocations in the trace, expected 12")
def sig(e):
    return (e["dir"], e["bytes"], e.get("src"), e.get("dst"))
A = lambda i: allocs[i]
copies = [(i, e) for i, e in enumerate(events) if e["op"] == "copy"]
# Phase 1: the copies in program order (None: host memory, or the module global, which is no
# allocation of the trace).
expected = [("h2d", 768, None, A(0)), ("d2d", 768, A(0), A(1)), ("d2h", 320, A(0), None),
            ("h2d", 192, None, A(2)), ("d2d", 768, A(1), A(3)), ("h2d", 16, None, None),
            ("d2d", 16, None, A(3)), ("d2d", 64, A(2), A(3)), ("d2d", 100, A(3), A(1)),
            ("d2h", 192, A(2), None), ("d2h", 768, A(1), None), ("d2h", 768, A(3), None)]
got = [sig(e) for _, e in copies[:len(expected)]]
for n, (g, x) in enumerate(zip(got, expected), 1):
    if g != x: errors.append(f"copy c{n}: trace has {g}, expected {x}")
if len(got) < len(expected): errors.append(f"only {len(got)} copies in the trace")
kernels = [(i, e) for i, e in enumerate(events) if e["op"] == "kernel"]
# The memsets: phase 1's 3D, 2D and driver 2D ones, then phase 2's two plain ones.
memsets = [(e.get("bytes"), e.get("writes")) for _, e in kernels if e["name"] == "memset"]
want = [(16, [A(2)]), (16, [A(1)]), (48, [A(3)]), (256, [A(4)]), (256, [A(5)])]
if memsets != want: errors.append(f"memsets {memsets}, expected {want}")
# Phase 2: captured work appears only after the capture ended (marker_kernel), once per launch.
marker = [i for i, e in kernels if e["name"] == "marker_kernel"]
if len(marker) != 1: errors.append(f"{len(marker)} marker_kernel launches, expected 1")
m = marker[0] if marker else 0
for name, count, touch in (("main_kernel", 3, A(4)), ("side_kernel", 6, A(5)), ("side_kernel_drv", 2, A(5))):
    at = [(i, e) for i, e in kernels if e["name"] == name]
    if len(at) != count: errors.append(f"{len(at)} {name} launches in the trace, expected {count}")
    if any(i < m for i, _ in at): errors.append(f"{name} recorded before the graph was launched")
    for i, e in at:
        if e.get("touch") != [touch]: errors.append(f"{name} at event {i} touches {e.get('touch')}, expected [{touch}]")
captured = [i for i, e in copies if sig(e) == ("d2d", 32, A(5), A(4))]
if len(captured) != 3: errors.append(f"{len(captured)} captured 2D copies B -> A in the trace, expected 3")
if any(i < m for i in captured): errors.append("the captured 2D copy was recorded before the graph was launched")
# Phase 3: T0 (allocation #6) is read by one 3000-byte 2D copy after each later upload and step.
reads = [e for _, e in copies if e["dir"] == "d2h" and e["bytes"] == 3000]
if len(reads) != steps + 5 or any(e.get("src") != A(6) for e in reads):
    errors.append(f"T0 reads: {[e.get('src') for e in reads]}, expected {steps + 5} x {A(6)}")
if backend:
    decisions = [json.loads(l) for l in open(f"{out}/decisions.jsonl")]
    evicted = [d.get("tensor") for d in decisions if d["action"] == "evict"]
    if not evicted: errors.append("the decision log has no eviction")
    if A(6) in evicted: errors.append(f"T0 (tensor {A(6)}) was evicted: the executor did not see its 2D reads")
    else: print(f"copy_join: {len(evicted)} evictions, none of T0 (tensor {A(6)})")
if errors:
    print("FAIL:\n  " + "\n  ".join(errors)); sys.exit(1)
print(f"copy_join: {len(copies)} copies and {len(kernels)} kernels as expected")
PY
echo "copy_join: ok (${backend:-record}, $(wc -l < "$out/plain.txt") output lines identical)"
