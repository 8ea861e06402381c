#!/bin/sh
# infer_writes.sh OUTDIR BACKEND [CHECKSUM]: exec_infer (pure, in-place, side-effect, nondeterministic and
# hidden-pointer kernels; nothing declared) plain on a device of 0.5 x its peak fails, and under
# the executor with that budget gives bit-identical losses and statistics, recomputes (drops
# and recomputes > 0, no CAPUCHIN_KERNEL_OUTPUTS), and logs the verdicts the kernels deserve:
# produce and combine replayable, normalize side-effect, noisy and clamp_ (in place on a tensor
# written unseen) not-deterministic, add_host (reads mapped host memory) foreign-memory; no other kernel
# is judged replayable (scatter and scale_ write no new tensor they name; backward is pure).
# CHECKSUM (device, the default, or host: CAPUCHIN_PROBE_CHECKSUM) is where the probations must
# have checksummed, as the executor summary says: on the device (simcuda's equivalent of the
# embedded PTX kernel), copying less than they checksummed, or through host copies, copying at
# least that. CHECKSUM=fallback: the device kernels load but cannot run (SIMCUDA_PINNED_BYTES leaves no
# page-locked memory for their sums): each probation must fall back to host copies, logged, and
# still reach every verdict (a failed kernel must not spend a probation on an inconclusive result).
# Environment: PROG, PRELOAD (set by ctest).
set -eu
out=$1; backend=$2; checksum=${3:-device}
probe=$checksum; pinned=
if [ "$checksum" = fallback ]; then probe=device; pinned=65536; fi
args="6 524288 6"
mkdir -p "$out"
unset CAPUCHIN_KERNEL_OUTPUTS || true
SIMCUDA_STATS_FILE="$out/ref_stats.json" "$PROG" $args > "$out/ref.txt"
P=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["peak_device_bytes"])' "$out/ref_stats.json")
B=$((P / 2))
if SIMCUDA_DEVICE_BYTES=$B "$PROG" $args > "$out/plain.txt" 2> "$out/plain.err"; then
  echo "FAIL: exec_infer fits in $B bytes without capuchin (peak $P): the test proves nothing"; exit 1
fi
rm -f "$out/decisions.jsonl"
# CAPUCHIN_PLAN=always: the planner's own plan, which recomputes what the inferred write sets allow
# (the replay's choice between it and no plan is not what this tests: on this program they run
# within 1% of each other, and since the planner stopped counting on recomputing what in-place
# and side-effect kernels touch, the replay picks no plan).
SIMCUDA_PINNED_BYTES=$pinned SIMCUDA_DEVICE_BYTES=$B SIMCUDA_STATS_FILE="$out/stats.json" CAPUCHIN_BUDGET=$B CAPUCHIN_BACKEND=$backend CAPUCHIN_LOG=info CAPUCHIN_PROBE_CHECKSUM=$probe CAPUCHIN_PLAN=always \
  CAPUCHIN_DECISION_LOG="$out/decisions.jsonl" LD_PRELOAD="$PRELOAD" "$PROG" $args > "$out/capuchin.txt" 2> "$out/capuchin.err" || {
  echo "FAIL: exec_infer failed under the executor (budget $B of peak $P)"; tail -20 "$out/capuchin.err"; exit 1; }
cmp -s "$out/ref.txt" "$out/capuchin.txt" || {
  echo "FAIL: results differ under capuchin"; diff "$out/ref.txt" "$out/capuchin.txt" || true; exit 1; }
python3 - "$out" "$checksum" <<'PY'
import json, re, sys, collections
out, checksum = sys.argv[1:]
verdicts = collections.defaultdict(set)
actions = collections.Counter()
for line in open(f"{out}/decisions.jsonl"):
    r = json.loads(line)
    actions[r["action"]] += 1
    if r["action"] == "verdict":
        verdicts[r.get("note", "")].add(r["reason"])
want = {"produce": {"replayable"}, "combine": {"replayable"}, "backward": {"replayable"}, "normalize": {"side-effect"},
        "noisy": {"not-deterministic"}, "clamp_": {"not-deterministic"}, "add_host": {"foreign-memory"}}
errors = [f"{k}: verdicts {sorted(verdicts.get(k, set()))}, want {sorted(v)}" for k, v in want.items() if verdicts.get(k) != v]
errors += [f"{k} judged {sorted(v)}" for k, v in verdicts.items() if k not in want]
if actions["drop"] == 0 or actions["recompute"] == 0:
    errors.append(f"no recomputation: {dict(actions)}")
log = open(f"{out}/capuchin.err").read()
m = re.search(r"probation_bytes=(\d+) probation_copied=(\d+) checksum=(\w+)", log)
if not m:
    errors.append("no probation figures in the executor summary")
else:
    summed, copied, where = int(m.group(1)), int(m.group(2)), m.group(3)
    want_where = "host" if checksum == "fallback" else checksum  # the kernels loaded but never ran
    if where != want_where: errors.append(f"the summary says checksum={where}, want {want_where}")
    if checksum == "device" and not copied < summed: errors.append(f"device checksums copied {copied} of {summed} bytes")
    if checksum != "device" and not copied >= summed: errors.append(f"host checksums copied only {copied} of {summed} bytes")
    if checksum == "fallback" and "probations hash on the host" not in log:
        errors.append("the fallback to host checksums was not logged")
if errors:
    print("FAIL: " + "; ".join(errors)); sys.exit(1)
print(f"verdicts {dict((k, sorted(v)) for k, v in verdicts.items())}; actions {dict(actions)}; checksum={checksum}: "
      f"{summed} bytes checksummed, {copied} copied")
PY
echo infer-writes-ok
