#!/bin/sh
# exec_loop.sh OUTDIR BACKEND FRACTION [program options...]: the executor on a loop with
# PyTorch's habits: LOOP is sim_loop_train (uploads into reused blocks, memsets, frees under
# pressure, dynamic shapes, forks) or sim_trace_replay (a real model's trace; both print their
# natural peak with --print-peak). With P = that peak and B = FRACTION x P:
#   - under CAPUCHIN_BUDGET=B (CAPUCHIN_BACKEND=BACKEND) it completes, within 120 s, with output
#     bit-identical to a run without capuchin, and the executor evicted something;
#   - by default the device has exactly B bytes: simcuda never evicted or faulted managed memory
#     itself and its peak stays within B (DEVICE=large: a 16 GiB device, no such checks);
#   - the decision log has at most MAX_LOG_LINES lines (default 20000);
#   - EXPECT_LOG=regex: stderr matches it; NO_FALLBACK=1: no fallback decision;
#   - EXPECT_PLAN=1: the executor learned the iteration and followed a plan (the summary counts
#     planned iterations; the decision log has a `plan` record and evictions the plan made,
#     i.e. with a planner's reason, not only `pressure` ones), and, once two iterations followed
#     it, not every launch was timed. No hook ever waits for a plan.
#   - MAX_RELEARNS=N: the executor learned the iteration again at most N times (the summary's
#     relearns); EXPECT_TOLERATED=1: it followed some differences on (tolerated_events > 0);
#   - EXPECT_DECISIONS="action:reason ...": the decision log has each (e.g. recompute:chain,
#     a dropped tensor recomputed as the input of another recomputation); FORBID_DECISIONS the
#     same, none of them (e.g. evict:msps, a drop the plan made that the executor refused and
#     swapped instead).
# EXTRA_ENV="VAR=value ..." is added to the capuchin run. Environment: LOOP, PRELOAD (ctest).
set -eu
out=$1; backend=$2; frac=$3; shift 3
mkdir -p "$out"
args="$*"
P=$("$LOOP" $args --print-peak)
B=$(awk -v p="$P" -v f="$frac" 'BEGIN { printf "%d", p * f }')
"$LOOP" $args > "$out/reference.txt"
rm -f "$out/decisions.jsonl" "$out/stats.json"
device="SIMCUDA_DEVICE_BYTES=$B"
[ "${DEVICE:-budget}" = large ] && device="SIMCUDA_DEVICE_BYTES=16GiB"
status=0
env $device SIMCUDA_STATS_FILE="$out/stats.json" CAPUCHIN_BUDGET=$B CAPUCHIN_BACKEND=$backend \
  CAPUCHIN_DECISION_LOG="$out/decisions.jsonl" CAPUCHIN_LOG=info ${EXTRA_ENV:-} LD_PRELOAD="$PRELOAD" \
  timeout 120 "$LOOP" $args > "$out/capuchin.txt" 2> "$out/capuchin.err" || status=$?
if [ "$status" -ne 0 ]; then
  echo "FAIL: $(basename "$LOOP") $args under capuchin ($backend, budget $B of peak $P) exited $status"
  grep -v "info: executor: \(plan\|capuchind\|no plan\)" "$out/capuchin.err" | tail -8 | cut -c1-400; exit 1
fi
if ! cmp -s "$out/reference.txt" "$out/capuchin.txt"; then
  echo "FAIL: results differ under capuchin ($backend, budget $B of peak $P)"
  diff "$out/reference.txt" "$out/capuchin.txt" | head -10 || true; exit 1
fi
python3 - "$out" "$B" "${DEVICE:-budget}" "${MAX_LOG_LINES:-20000}" "${EXPECT_LOG:-}" "${NO_FALLBACK:-0}" "${EXPECT_PLAN:-0}" "${EXPECT_DECISIONS:-}" "${FORBID_DECISIONS:-}" "${EXPECT_FORM:-}" "${MAX_RELEARNS:-}" "${EXPECT_TOLERATED:-}" <<'PY'
import json, re, sys
out, budget, device, max_lines, expect, no_fallback = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6] == "1"
expect_plan = sys.argv[7] == "1"
expect_decisions, forbid_decisions = sys.argv[8].split(), sys.argv[9].split()
expect_form = sys.argv[10]  # "1": learned by form (sizes change every step), "0": by signature, "": either
max_relearns, expect_tolerated = sys.argv[11], sys.argv[12] == "1"
errors = []
err = open(f"{out}/capuchin.err").read()
m = re.search(r"executor summary: .*", err)
if not m: errors.append("no executor summary")
elif not re.search(r"evictions=[1-9]", m.group(0)): errors.append("no eviction: the budget put no pressure on the job")
if device == "budget":
    st = json.load(open(f"{out}/stats.json"))
    if st["uvm_evictions"] or st["uvm_faults"]: errors.append(f"simcuda evicted {st['uvm_evictions']} / faulted {st['uvm_faults']} managed blocks itself")
    if st["peak_device_bytes"] > budget: errors.append(f"simcuda peak {st['peak_device_bytes']} > budget {budget}")
lines = open(f"{out}/decisions.jsonl").read().splitlines()
if len(lines) > max_lines: errors.append(f"{len(lines)} decision lines (at most {max_lines})")
actions = [json.loads(l)["action"] for l in lines]
# a stall carries its measured length (the report's stall time adds them up)
for l in lines:
    r = json.loads(l)
    if r["action"] == "stall" and not r.get("actual_s", 0) > 0: errors.append(f"a stall without its measured length: {l[:200]}")
seen = {(r["action"], r.get("reason", "")) for r in map(json.loads, lines)}
for want in expect_decisions:
    action, _, reason = want.partition(":")
    if (action, reason) not in seen: errors.append(f"no {action} decision with reason {reason!r} in the decision log")
for unwanted in forbid_decisions:
    action, _, reason = unwanted.partition(":")
    n = sum(1 for l in lines if (json.loads(l)["action"], json.loads(l).get("reason", "")) == (action, reason))
    if n: errors.append(f"{n} {action} decisions with reason {reason!r} in the decision log")
if no_fallback and "fallback" in actions: errors.append("fallback decisions: " + "; ".join(l for l in lines if '"fallback"' in l)[:300])
if expect and not re.search(expect, err): errors.append(f"stderr does not match {expect!r}")
if m and expect_form:
    f = re.search(r"form_locks=(\d+)", m.group(0))
    locks = int(f.group(1)) if f else -1
    if expect_form == "1" and locks < 1: errors.append(f"not learned by form (form_locks={locks})")
    if expect_form == "0" and locks != 0: errors.append(f"learned by form (form_locks={locks}) though its sizes repeat")
if m and max_relearns:
    r = re.search(r"relearns=(\d+)", m.group(0))
    if not r or int(r.group(1)) > int(max_relearns): errors.append(f"learned again {r.group(1) if r else '?'} times (at most {max_relearns})")
if m and expect_tolerated:
    t = re.search(r"tolerated_events=(\d+)", m.group(0))
    if not t or int(t.group(1)) == 0: errors.append("no difference from the learned iteration was followed on (tolerated_events=0)")
if expect_plan:
    recs = [json.loads(l) for l in lines]
    planned = re.search(r"planned_iterations=(\d+)", m.group(0) if m else "")
    if not planned or int(planned.group(1)) == 0: errors.append("no iteration followed a plan")
    if not any(r["action"] == "plan" for r in recs): errors.append("no plan record in the decision log")
    # Launches are timed until a plan is followed, then one iteration in eight: two followed
    # iterations leave some launches untimed.
    timed = re.search(r"timed_launches=(\d+)/(\d+)", m.group(0) if m else "")
    if not timed: errors.append("no timed_launches in the summary")
    elif planned and int(planned.group(1)) >= 2 and not int(timed.group(1)) < int(timed.group(2)):
        errors.append(f"every launch was timed ({timed.group(0)}) though {planned.group(1)} iterations followed a plan")
    plan_reasons = {"free-time", "least-swap-cost", "cross-iteration", "replay-victim", "msps"}
    if not any(r["action"] in ("evict", "drop") and r.get("reason") in plan_reasons for r in recs):
        errors.append("no eviction the plan made (only passive ones)")
print((m.group(0) if m else "")[:300])
if errors:
    print("FAIL: " + "; ".join(errors)); sys.exit(1)
PY
echo "exec_loop: ok ($backend, budget $B = $frac x $P: $args)"
