#!/bin/sh
# peak_multiple_budget.sh OUTDIR: CAPUCHIN_BUDGET=0.5x with no daemon (CAPUCHIN_SINK=null): the
# executor resolves the budget itself once the job's first iteration has been learned (the log
# says so with the bytes, a `budget` decision records it), keeps the resident peak from then on
# within it, and the job's output is bit-identical to a plain run. A bare 0.5 turns the
# executor off with the message naming the three forms.
# Environment (set by ctest): TRAIN, PRELOAD, LD_LIBRARY_PATH (simcuda).
set -u
out=$1
rm -rf "$out"; mkdir -p "$out"
args="--depth 8 --width 64 --batch 2048 --iters 6 --seed 7"
"$TRAIN" $args > "$out/ref.txt"
CAPUCHIN_SINK=null CAPUCHIN_LOG=info CAPUCHIN_BUDGET=0.5x CAPUCHIN_DECISION_LOG="$out/d.jsonl" LD_PRELOAD="$PRELOAD" \
  "$TRAIN" $args > "$out/run.txt" 2> "$out/run.err" || { echo "FAIL: the job failed"; tail "$out/run.err"; exit 1; }
cmp -s "$out/ref.txt" "$out/run.txt" || { echo "FAIL: output differs under 0.5x"; exit 1; }
grep -q "CAPUCHIN_BUDGET=0.5x: the job's natural peak is not known yet; no budget applies until" "$out/run.err" ||
  { echo "FAIL: the wait for the natural peak is not said"; cat "$out/run.err"; exit 1; }
python3 - "$out/run.err" "$out/d.jsonl" <<'PY' || exit 1
import json, re, sys
err = open(sys.argv[1]).read()
m = re.search(r"CAPUCHIN_BUDGET=0\.5x: 0\.5 x the natural peak (\d+) bytes = (\d+) bytes", err)
if not m: sys.exit("FAIL: the resolution is not logged:\n" + err)
peak, budget = int(m.group(1)), int(m.group(2))
if budget != peak // 2: sys.exit(f"FAIL: {budget} is not half of {peak}")
s = re.search(r"executor summary: backend=\w+ budget=(\d+) peak_resident=(\d+)", err)
if not s or int(s.group(1)) != budget or not 0 < int(s.group(2)) <= budget:
    sys.exit(f"FAIL: the summary's budget/peak do not hold the resolved budget {budget}:\n{s and s.group(0)}")
recs = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
b = [r for r in recs if r["action"] == "budget" and r.get("reason") == "natural-peak"]
if len(b) != 1 or b[0]["bytes"] != budget: sys.exit(f"FAIL: no single budget decision for {budget}: {b}")
if not any(r["action"] == "evict" for r in recs): sys.exit("FAIL: nothing was evicted under 0.5x")
print(f"0.5x resolved to {budget} of {peak} bytes; resident peak {s.group(2)}")
PY
CAPUCHIN_SINK=null CAPUCHIN_BUDGET=0.5 LD_PRELOAD="$PRELOAD" "$TRAIN" $args > "$out/bare.txt" 2> "$out/bare.err" ||
  { echo "FAIL: a bare 0.5 broke the job"; exit 1; }
cmp -s "$out/ref.txt" "$out/bare.txt" || { echo "FAIL: output differs with a bare 0.5"; exit 1; }
grep -q "CAPUCHIN_BUDGET=0.5: budget '0.5' is ambiguous: .*; the executor is off" "$out/bare.err" ||
  { echo "FAIL: a bare 0.5 is not refused by name"; cat "$out/bare.err"; exit 1; }
echo peak-multiple-ok
