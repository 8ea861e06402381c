#!/bin/sh
# executor_train.sh OUTDIR BACKEND FRACTION [sim_mlp_train options...]: the executor's
# acceptance on simcuda. With P = sim_mlp_train's natural peak and a device of FRACTION x P:
#   - without capuchin the program fails with "out of memory";
#   - with CAPUCHIN_BUDGET = FRACTION x P (CAPUCHIN_BACKEND=BACKEND) it completes with losses
#     and weight checksum bit-identical to an unconstrained run;
#   - simcuda never had to evict or fault managed memory itself (capuchin's own evictions kept
#     the job within the budget) and its peak device bytes stay within the budget;
#   - the decision log is valid JSON lines with evictions and swap-ins.
# Extra checks through the environment: EXPECT_RECOMPUTE=1 (at least one recompute),
# EXPECT_FEWER_STALLS=1 (planned iterations swap in on demand less than the passive first ones),
# EXPECT_BACKEND=uvm|pinned (the backend the executor's summary says it ran), EXPECT_LOG=regex
# (capuchin's stderr matches it, grep -E).
# Environment: TRAIN, PRELOAD, CAPUCHIN (set by ctest).
set -eu
out=$1; backend=$2; frac=$3; shift 3
mkdir -p "$out"
args="$*"
P=$("$TRAIN" $args --print-peak)
B=$(awk -v p="$P" -v f="$frac" 'BEGIN { printf "%d", p * f }')
"$TRAIN" $args > "$out/reference.txt"
if SIMCUDA_DEVICE_BYTES=$B "$TRAIN" $args > "$out/plain.txt" 2> "$out/plain.err"; then
  echo "FAIL: the program fits in $B bytes without capuchin (peak $P): the test proves nothing"; exit 1
fi
grep -q "out of memory" "$out/plain.err" || { echo "FAIL: no out-of-memory failure without capuchin"; cat "$out/plain.err"; exit 1; }
rm -f "$out/decisions.jsonl" "$out/stats.json"
SIMCUDA_DEVICE_BYTES=$B SIMCUDA_STATS_FILE="$out/stats.json" CAPUCHIN_BUDGET=$B CAPUCHIN_BACKEND=$backend \
  CAPUCHIN_DECISION_LOG="$out/decisions.jsonl" CAPUCHIN_LOG=info LD_PRELOAD="$PRELOAD" \
  "$TRAIN" $args > "$out/capuchin.txt" 2> "$out/capuchin.err" || {
  echo "FAIL: sim_mlp_train under capuchin (budget $B of peak $P) failed"; tail -20 "$out/capuchin.err"; exit 1; }
if [ -n "${EXPECT_BACKEND:-}" ] && ! grep -q "executor summary: backend=$EXPECT_BACKEND " "$out/capuchin.err"; then
  echo "FAIL: the executor did not run the $EXPECT_BACKEND backend"; grep -E "summary|backend|VMM" "$out/capuchin.err"; exit 1
fi
if [ -n "${EXPECT_LOG:-}" ] && ! grep -Eq "$EXPECT_LOG" "$out/capuchin.err"; then
  echo "FAIL: capuchin's log does not say /$EXPECT_LOG/"; cat "$out/capuchin.err"; exit 1
fi
if ! cmp -s "$out/reference.txt" "$out/capuchin.txt"; then
  echo "FAIL: results differ under capuchin"; diff "$out/reference.txt" "$out/capuchin.txt" || true; exit 1
fi
python3 - "$out" "$B" "${EXPECT_RECOMPUTE:-0}" "${EXPECT_FEWER_STALLS:-0}" <<'PY'
import collections, json, re, sys
out, budget, want_recompute, want_fewer = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4] == "1"
st = json.load(open(f"{out}/stats.json"))
errors = []
if st["uvm_evictions"] != 0: errors.append(f"simcuda evicted {st['uvm_evictions']} managed blocks itself")
if st["uvm_faults"] != 0: errors.append(f"{st['uvm_faults']} managed blocks were faulted in by kernels")
if st["peak_device_bytes"] > budget: errors.append(f"peak device bytes {st['peak_device_bytes']} > budget {budget}")
if st["sticky_error"] != 0: errors.append(f"sticky error {st['sticky_error']}")
actions = collections.Counter()
per_iter = collections.defaultdict(int)
last = 0
for n, line in enumerate(open(f"{out}/decisions.jsonl"), 1):
    r = json.loads(line)
    for k in ("t", "pid", "iteration", "action", "bytes"):
        if k not in r: errors.append(f"decisions.jsonl:{n}: no {k}")
    actions[r["action"]] += 1
    last = max(last, r["iteration"])
    if r["action"] == "swapin_on_demand": per_iter[r["iteration"]] += 1
    if r["action"] == "stall" and not r.get("actual_s", 0) > 0:
        errors.append(f"decisions.jsonl:{n}: a stall without its measured length (actual_s)")
if actions["evict"] == 0: errors.append("no eviction in the decision log")
if actions["prefetch"] + actions["swapin_on_demand"] + actions["recompute"] == 0: errors.append("nothing brought back")
if want_recompute and actions["recompute"] == 0: errors.append("no recompute in the decision log")
iters = sorted(per_iter)
# The partial last iteration may have no decision record (its end, the weight download, is
# followed on as a difference, not learned again): the summary counts the iterations.
summary_line = next((l for l in open(f"{out}/capuchin.err") if "executor summary" in l), "")
m_iters = re.search(r" iterations=(\d+)", summary_line)
if m_iters: last = max(last, int(m_iters.group(1)))
if want_fewer:
    # Iterations are the stretches between host syncs; the first two run passive (nothing
    # learned yet), the last one is partial (the final weight download).
    passive = max(per_iter[0], per_iter[1])
    later = [per_iter[i] for i in range(3, last)]
    if passive == 0 or not later or max(later) >= passive:
        errors.append(f"on-demand swap-ins per iteration {dict(per_iter)}: planned iterations not fewer than passive ones")
summary = next((l for l in open(f"{out}/capuchin.err") if "executor summary" in l), "").strip()
print(f"budget {budget}: actions {dict(actions)}; simcuda peak {st['peak_device_bytes']}, virtual {st['max_stream_virtual_ns']} ns")
print(summary)
if errors:
    print("FAIL: " + "; ".join(errors)); sys.exit(1)
PY
echo "executor_train: ok ($backend, budget $B = $frac x $P)"
