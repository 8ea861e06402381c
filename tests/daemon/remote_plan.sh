#!/bin/sh
# remote_plan.sh OUTDIR: the daemon plans for the job's executor, and set-budget reaches a
# running job. sim_mlp_train (natural peak P) runs under `capuchin run --budget B` on a
# simcuda device of B = 0.6 P bytes, attached to a capuchind:
#   1. the output is bit-identical to an unconstrained run; the job applied plans made by
#      capuchind (its decision log: "plan" records with reason "capuchind"); the daemon's
#      session log has the matching "executor-segment" plans and `capuchin plan ID --json`
#      shows one;
#   2. a longer run gets `capuchin set-budget ID <0.5 P bytes>` while it runs: the job records
#      the new budget (action "budget", reason "capuchind"), capuchind then plans for it, the
#      output stays bit-identical and simcuda's peak stays within the device (0.6 P);
#   3. set-budget below the most one launch touches is refused with the job's minimum, and the
#      job completes bit-identically;
#   4. after the job exits, `capuchin tensors ID` still answers from the closed session.
# Environment (set by ctest): CAPUCHIN, CAPUCHIND, TRAIN, LD_LIBRARY_PATH (simcuda), PRELOAD_PREFIX.
set -eu
out=$1
rm -rf "$out"; mkdir -p "$out"
sock="$out/run/capuchind.sock"
args="--depth 6 --width 64 --batch 512 --seed 3 --kernel-ns 50000"
dpid=""
cleanup() { [ -n "$dpid" ] && kill "$dpid" 2>/dev/null || true; }
trap cleanup EXIT

"$CAPUCHIND" --socket "$sock" --log-dir "$out/logs" > "$out/daemon.log" 2>&1 &
dpid=$!
i=0
until "$CAPUCHIN" --socket "$sock" status --json > /dev/null 2>&1; do
  i=$((i + 1)); [ $i -gt 100 ] && { echo "FAIL: capuchind did not start"; cat "$out/daemon.log"; exit 1; }
  sleep 0.1
done

P=$("$TRAIN" $args --iters 6 --print-peak)
B=$(awk -v p="$P" 'BEGIN { printf "%d", p * 0.6 }')
B2=$(awk -v p="$P" 'BEGIN { printf "%d", p * 0.5 }')
run_job() {  # iters outfile decision-log [hold-file [iteration]]: with a hold file, the job waits
             # before the iteration (10) until the file exists, so the test acts on it while it
             # surely runs
  hold=""; [ $# -ge 4 ] && hold="--hold-before ${5:-10} --hold-file $4"
  SIMCUDA_DEVICE_BYTES=$B SIMCUDA_STATS_FILE="$3.stats" CAPUCHIN_DECISION_LOG="$3" CAPUCHIN_LOG=info \
    LD_PRELOAD="$PRELOAD_PREFIX" "$CAPUCHIN" run --socket "$sock" --budget "$B" -- "$TRAIN" $args --iters "$1" $hold > "$2" 2> "$2.err"
}

. "$(dirname "$0")/until_within.sh"
held_job_failed() {  # what FAIL needs to say when a held job was not seen: its log and the daemon's view
  echo "FAIL: $1"; tail -5 "$2.err"; "$CAPUCHIN" --socket "$sock" sessions --json; tail -5 "$out/daemon.log"
  touch "$3"; wait $job || true; exit 1
}

# 1. Plans made by the daemon, applied by the job. The job never waits for a plan, so it is held
#    before its 4th iteration until capuchind shows one (else a daemon slower than the job, as
#    under ASan once the job's GEMMs were not instrumented, left it no iteration to follow one).
"$TRAIN" $args --iters 6 > "$out/reference6.txt"
run_job 6 "$out/run6.txt" "$out/decisions6.jsonl" "$out/go6" 4 & job=$!
until_within 120 session_ready "$sock" plan || held_job_failed "the first job had no plan within 120 s" "$out/run6.txt" "$out/go6"
touch "$out/go6"
wait $job || { echo "FAIL: the job failed"; tail "$out/run6.txt.err"; exit 1; }
cmp -s "$out/reference6.txt" "$out/run6.txt" || { echo "FAIL: output differs under capuchin with the daemon"; exit 1; }
grep '"action":"plan"' "$out/decisions6.jsonl" | grep -q '"reason":"capuchind"' ||
  { echo "FAIL: the job applied no plan made by capuchind"; grep '"plan"' "$out/decisions6.jsonl" | head; tail "$out/run6.txt.err"; exit 1; }
grep -q '"reason":"executor-segment"' "$out"/logs/session-1-*.jsonl ||
  { echo "FAIL: the daemon's session log has no executor-segment plan"; exit 1; }
"$CAPUCHIN" --socket "$sock" plan 1 --json > "$out/plan1.json"
grep -q "the job's iteration" "$out/plan1.json" || { echo "FAIL: capuchin plan 1 does not show the job's plan"; cat "$out/plan1.json"; exit 1; }
# The job never waits for a plan: it follows each from the iteration after it arrived.
planned=$(sed -n 's/.* planned_iterations=\([0-9]*\).*/\1/p' "$out/run6.txt.err")
[ -n "$planned" ] && [ "$planned" -gt 0 ] || { echo "FAIL: no iteration followed a plan: '$planned'"; grep summary "$out/run6.txt.err"; exit 1; }
echo "1. daemon-made plans applied: $(grep -c '"reason":"capuchind"' "$out/decisions6.jsonl") plan(s), $planned planned iteration(s); output identical"

# 2. set-budget on a running job (held before iteration 10 until set-budget was sent).
"$TRAIN" $args --iters 60 > "$out/reference60.txt"
run_job 60 "$out/run60.txt" "$out/decisions60.jsonl" "$out/go60" & job=$!
until_within 120 session_ready "$sock" || held_job_failed "the second job did not attach within 120 s" "$out/run60.txt" "$out/go60"
sid=$ready_sid
"$CAPUCHIN" --socket "$sock" set-budget "$sid" "$B2" > /dev/null
touch "$out/go60"
wait $job || { echo "FAIL: the job failed after set-budget"; tail "$out/run60.txt.err"; exit 1; }
cmp -s "$out/reference60.txt" "$out/run60.txt" || { echo "FAIL: output differs after set-budget"; exit 1; }
# The job's own account of the link: every plan request answered, the one budget received.
grep -q "daemon link: .* budgets_received=1 " "$out/run60.txt.err" || { echo "FAIL: the job did not count the budget"; grep "daemon link" "$out/run60.txt.err"; exit 1; }
link=$(sed -n 's/.*plan_requests=\([0-9]*\) plan_replies=\([0-9]*\).*/\1 \2/p' "$out/run60.txt.err")
echo "$link" | awk 'NF != 2 || $1 == 0 || $1 != $2 { exit 1 }' ||
  { echo "FAIL: plan requests unanswered: '$link'"; grep "daemon link" "$out/run60.txt.err"; exit 1; }
python3 - "$out/decisions60.jsonl" "$out/decisions60.jsonl.stats" "$out/logs" "$sid" "$B" "$B2" <<'PY'
import glob, json, sys
log, stats, logs, sid, dev, new = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
recs = [json.loads(l) for l in open(log)]
budget = [r for r in recs if r["action"] == "budget"]
errors = []
if not budget or budget[0].get("reason") != "capuchind" or budget[0]["bytes"] != new:
    errors.append(f"the job did not record the new budget {new}: {budget[:1]}")
session = [json.loads(l) for f in glob.glob(f"{logs}/session-{sid}-*.jsonl") for l in open(f)]
after = [r for r in session if r["action"] == "plan" and r.get("reason") == "executor-segment" and r["bytes"] == new]
if not after: errors.append(f"capuchind made no plan for the new budget {new}")
st = json.load(open(stats))
if st["peak_device_bytes"] > dev: errors.append(f"simcuda peak {st['peak_device_bytes']} > device {dev}")
if st["sticky_error"] != 0: errors.append(f"sticky error {st['sticky_error']}")
if errors:
    print("FAIL: " + "; ".join(errors)); sys.exit(1)
print(f"2. set-budget {new} reached the running job; {len(after)} plan(s) made for it; peak {st['peak_device_bytes']} <= {dev}")
PY

# 3. set-budget below what the job needs at once is refused, naming the minimum, and the job
#    runs on unharmed (it was accepted, and the job died at its next iteration).
"$TRAIN" $args --iters 25 > "$out/reference25.txt"
run_job 25 "$out/run25.txt" "$out/decisions25.jsonl" "$out/go25" & job=$!
until_within 120 session_ready "$sock" plan || held_job_failed "the third job had no plan within 120 s" "$out/run25.txt" "$out/go25"
sid3=$ready_sid
rc=0
"$CAPUCHIN" --socket "$sock" set-budget "$sid3" 4096 > "$out/low.txt" 2>&1 || rc=$?
touch "$out/go25"
wait $job || { echo "FAIL: the job failed after a refused set-budget"; tail "$out/run25.txt.err"; exit 1; }
[ $rc -ne 0 ] && grep -q "below-minimum.*needs at once" "$out/low.txt" ||
  { echo "FAIL: set-budget 4096 was not refused with the job's minimum (exit $rc)"; cat "$out/low.txt"; exit 1; }
cmp -s "$out/reference25.txt" "$out/run25.txt" || { echo "FAIL: output differs after a refused set-budget"; exit 1; }
echo "3. set-budget 4096 refused: $(cat "$out/low.txt")"

# 4. A closed session still answers tensors.
n=$("$CAPUCHIN" --socket "$sock" tensors "$sid" --json | python3 -c 'import json, sys; print(len(json.load(sys.stdin)))')
[ "$n" -gt 0 ] || { echo "FAIL: tensors of the closed session $sid is empty"; exit 1; }
echo "4. closed session $sid: tensors still answers ($n rows)"
echo "remote_plan: ok"
