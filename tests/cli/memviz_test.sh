#!/bin/sh
# memviz_test.sh MODE CAPUCHIN DATA OUTDIR: `capuchin export memory-viz` run as a user runs it,
# each snapshot loaded with Python's pickle and checked by memviz_check.py (structure, every
# free matching an earlier alloc, final segments = the blocks still alive, capuchin's actions
# present; torch's own reader too where `import torch` works; --self-test: broken copies of
# the snapshot must all be rejected, so the checks are not vacuous).
#   MODE trace: real-model traces (../shared/traces, else the copies in DATA): without a budget
#     the peak of live bytes is the trace's own (computed here from the trace file); with one,
#     swap-outs, prefetches, on-demand swap-ins, drops and recomputes appear and the peak stays
#     within it; an infeasible budget ends in an 'oom' entry; bad input gets one error line, a
#     non-zero exit and no output file. SANITIZED=1 (CI time): mobilenet_v2 at half its peak,
#     10 of the test's 29 s under ASan, is left to the release build.
#   MODE log: decision logs of two workloads run under the executor on simcuda (a real model's
#     trace replayed at half its peak: evictions, prefetches, swap-ins on demand; the MLP with
#     declared kernel outputs: drops and recomputations), one gzipped, exported with a trace:
#     one device per trace and per process, and as many swap-outs / swap-ins / drops /
#     recomputes in the snapshot as the logs recorded.
# Environment: SHARED_TRACES (trace); PRELOAD, REPLAY (sim_trace_replay), TRAIN (sim_mlp_train),
# LD_LIBRARY_PATH (simcuda) (log).
set -eu
mode=$1; cap=$2; data=$3; out=$4
here=$(cd "$(dirname "$0")" && pwd)
check() { python3 "$here/memviz_check.py" "$@"; }
mkdir -p "$out"
rm -rf "$out"/*
fail() { echo "FAIL: $*"; exit 1; }

trace_file() {  # SHARED_TRACES (../shared/traces) when there, else the test data's copy
  for d in "${SHARED_TRACES:-/nonexistent}" "$data"; do
    [ -f "$d/$1" ] && { echo "$d/$1"; return; }
  done
}

# The most live bytes of a trace, from the file itself (independent of capuchin's reader).
trace_peak() {
  python3 - "$1" <<'PY'
import gzip, json, sys
live = peak = 0
size = {}
for i, line in enumerate(gzip.open(sys.argv[1], "rt")):
    e = json.loads(line)
    if i == 0: continue
    if e["op"] == "alloc": size[e["id"]] = e["bytes"]; live += e["bytes"]; peak = max(peak, live)
    elif e["op"] == "free": live -= size.pop(e["id"])
print(peak)
PY
}

# A bad input: exit non-zero, one line on stderr naming WORDS, no output (nor temporary) file.
# bad WORDS OUTPUT ARGS...
bad() {
  words=$1; o=$2; shift 2
  if "$cap" export memory-viz "$@" -o "$o" > "$out/bad.out" 2> "$out/bad.err"; then fail "accepted: $*"; fi
  [ "$(wc -l < "$out/bad.err")" -eq 1 ] || fail "not one error line for $*: $(cat "$out/bad.err")"
  grep -q "^capuchin export memory-viz: .*$words" "$out/bad.err" || fail "error for $* does not say '$words': $(cat "$out/bad.err")"
  if ls "$o"* > /dev/null 2>&1; then fail "an output file was left for $*: $(ls "$o"*)"; fi
  echo "  bad input ($*): $(cat "$out/bad.err")"
}

if [ "$mode" = trace ]; then
  r18=$(trace_file resnet18-b16.jsonl.gz)
  peak=$(trace_peak "$r18")
  "$cap" export memory-viz "$r18" -o "$out/natural.pickle"
  check "$out/natural.pickle" --peak-eq "$peak" --no-frame "capuchin:" --tensor-frames --devices 1 --self-test

  "$cap" export memory-viz "$r18" --budget 240MiB --iters 6 -o "$out/capuchin.pickle"
  check "$out/capuchin.pickle" --peak-le 251658240 --tensor-frames --self-test \
    --expect "free_completed=capuchin: swapped out to host" --expect "alloc=capuchin: prefetched" \
    --expect "alloc=capuchin: swapped in on demand" --expect "free_completed=capuchin: dropped" \
    --expect "alloc=capuchin: recomputed by aten::"

  if [ "${SANITIZED:-0}" != 1 ]; then
    mb=$(trace_file mobilenet_v2-b16.jsonl.gz)
    mbpeak=$(trace_peak "$mb")
    "$cap" export memory-viz "$mb" --budget 0.5x -o "$out/mobilenet.pickle"
    check "$out/mobilenet.pickle" --peak-le $((mbpeak / 2)) --tensor-frames --expect "free_completed=capuchin: swapped out to host"
  fi

  "$cap" export memory-viz "$r18" --budget 0.3x -o "$out/oom.pickle" 2> "$out/oom.err" || fail "an infeasible budget is not an error"
  grep -q "warning: the capuchin policy cannot run" "$out/oom.err" || fail "no warning for an infeasible budget: $(cat "$out/oom.err")"
  check "$out/oom.pickle" --expect "oom=capuchin: out of memory at budget"

  # A hand-written log with the awkward cases: a folded repeat, a stall, a drop and its
  # recompute, two processes, an iteration number going back, an oom, no trailing newline.
  printf '%s\n' \
    '{"t":0.1,"pid":7,"iteration":1,"action":"evict","tensor":1,"bytes":1000,"reason":"pressure"}' \
    '{"t":0.2,"pid":7,"iteration":1,"action":"prefetch","tensor":1,"bytes":1000}' \
    '{"t":0.25,"pid":7,"iteration":1,"action":"prefetch","tensor":1,"bytes":1000,"note":"repeated 3 more times"}' \
    '' \
    '{"t":0.3,"pid":7,"iteration":2,"action":"drop","tensor":2,"bytes":4096}' \
    '{"t":0.35,"pid":7,"iteration":2,"action":"stall","tensor":2,"bytes":4096,"actual_s":0.01}' \
    '{"t":0.4,"pid":7,"iteration":2,"action":"recompute","tensor":2,"bytes":4096}' \
    '{"t":0.5,"pid":8,"iteration":1,"action":"evict","tensor":1,"bytes":2048}' \
    '{"t":0.6,"pid":7,"iteration":1,"action":"evict","tensor":3,"bytes":512}' > "$out/hand.jsonl"
  printf '%s' '{"t":0.7,"pid":7,"iteration":3,"action":"oom","bytes":99999,"note":"cuMemAlloc failed"}' >> "$out/hand.jsonl"
  "$cap" export memory-viz "$out/hand.jsonl" -o "$out/hand.pickle"
  check "$out/hand.pickle" --devices 2 --tensor-frames --expect "alloc=capuchin: prefetched" \
    --expect "free_completed=capuchin: dropped" --expect "alloc=capuchin: recomputed" --expect "oom=capuchin: out of memory"
  python3 - "$out/hand.pickle" <<'PY'
import pickle, sys
d = pickle.load(open(sys.argv[1], "rb"))
acts = [(e["action"], e["size"], e["time_us"]) for e in d["device_traces"][0] if e["action"] in ("alloc", "free_completed", "oom")]
want = [("alloc", 1000, 100000), ("free_completed", 1000, 100000), ("alloc", 1000, 200000), ("alloc", 4096, 300000),
        ("free_completed", 4096, 300000), ("free_completed", 1000, 300000), ("alloc", 4096, 400000),
        ("alloc", 512, 100000), ("free_completed", 512, 600000), ("free_completed", 4096, 600000), ("oom", 99999, 700000)]
want.sort(key=lambda a: a[2])  # in time order, ties as logged
if sorted(acts, key=lambda a: a[2]) != acts or sorted(acts) != sorted(want):
    print(f"FAIL: hand-written log: {acts}\n  expected (any order of ties) {want}"); sys.exit(1)
print("  hand-written log: as expected")
PY
  ob="$out/bad.pickle"
  bad "nosuch.jsonl: cannot open" "$ob" "$out/nosuch.jsonl"
  echo "not a trace" > "$out/text.txt"
  bad "neither a capuchin trace nor a decision log" "$ob" "$out/text.txt"
  : > "$out/empty.jsonl"
  bad "empty" "$ob" "$out/empty.jsonl"
  bad "neither a capuchin trace nor a decision log" "$ob" "$out/natural.pickle"
  head -c 8000 "$r18" > "$out/cut.jsonl.gz"  # a trace cut short
  bad "truncated gzip" "$ob" "$out/cut.jsonl.gz"
  bad "cannot write $out/no/such/dir/bad.pickle" "$out/no/such/dir/bad.pickle" "$r18"
  bad "unknown GPU profile" "$ob" "$r18" --gpu nosuch
  bad "cannot write $out/text.txt/x.pickle" "$out/text.txt/x.pickle" "$r18"
  mkdir -p "$out/adir"
  if "$cap" export memory-viz "$r18" -o "$out/adir" 2> "$out/dir.err"; then fail "a directory as -o accepted"; fi
  grep -q "it is a directory" "$out/dir.err" || fail "-o DIR: $(cat "$out/dir.err")"
  echo "memviz_test trace: ok"
  exit 0
fi

[ "$mode" = log ] || fail "unknown mode $mode"
r18="$data/resnet18-b16.jsonl.gz"
P=$("$REPLAY" --trace "$r18" --iters 4 --print-peak)
B=$((P / 2))
# CAPUCHIN_PLAN=always: the planner's own plan, so the log holds its prefetches whichever
# candidate the replay would pick in 4 iterations.
SIMCUDA_DEVICE_BYTES=$B CAPUCHIN_BUDGET=$B CAPUCHIN_DECISION_LOG="$out/replay.jsonl" CAPUCHIN_PLAN=always LD_PRELOAD="$PRELOAD" \
  timeout 120 "$REPLAY" --trace "$r18" --iters 4 > "$out/replay.out" 2> "$out/replay.err" || fail "sim_trace_replay under capuchin: $(tail -3 "$out/replay.err")"
gzip -f "$out/replay.jsonl"
mlp="--depth 6 --width 64 --batch 8192 --iters 6 --seed 3 --kernel-ns 200000 --keep-preact"
P=$("$TRAIN" $mlp --print-peak)
B=$((P / 2))
# CAPUCHIN_PLAN=always (the planner's own plan): the log must hold drops and recomputations;
# for this small MLP the replay-chosen candidate makes none.
SIMCUDA_DEVICE_BYTES=$B CAPUCHIN_BUDGET=$B CAPUCHIN_BACKEND=pinned CAPUCHIN_DECISION_LOG="$out/mlp.jsonl" CAPUCHIN_PLAN=always \
  CAPUCHIN_KERNEL_OUTPUTS="relu_forward:2,relu_backward:3,simblas_sgemm_nn:9,simblas_sgemm_tn:9,simblas_sgemm_nt:9" \
  LD_PRELOAD="$PRELOAD" timeout 120 "$TRAIN" $mlp > "$out/mlp.out" 2> "$out/mlp.err" || fail "sim_mlp_train under capuchin: $(tail -3 "$out/mlp.err")"

"$cap" export memory-viz "$r18" "$out/replay.jsonl.gz" "$out/mlp.jsonl" -o "$out/logs.pickle" | tee "$out/logs.out"
check "$out/logs.pickle" --devices 3 --tensor-frames --self-test \
  --expect "free_completed=capuchin: swapped out to host" --expect "alloc=capuchin: prefetched" \
  --expect "alloc=capuchin: swapped in on demand" --expect "free_completed=capuchin: dropped" \
  --expect "alloc=capuchin: recomputed"
# Per process, the snapshot has what its log recorded: every evict, prefetch, on-demand swap-in and
# recompute, and every drop of a tensor on the device.
python3 - "$out" <<'PY'
import gzip, json, pickle, sys
out = sys.argv[1]
snap = pickle.load(open(f"{out}/logs.pickle", "rb"))
errors = []
for dev, log in ((1, gzip.open(f"{out}/replay.jsonl.gz", "rt")), (2, open(f"{out}/mlp.jsonl"))):
    recs = [json.loads(l) for l in log]
    want = {a: sum(1 for r in recs if r["action"] == a) for a in ("evict", "prefetch", "swapin_on_demand", "recompute", "drop")}
    entries = snap["device_traces"][dev]
    def count(action, words):
        return sum(1 for e in entries if e["action"] == action and words in e["frames"][0]["name"])
    got = {"evict": count("free_completed", "swapped out to host"), "prefetch": count("alloc", "prefetched"),
           "swapin_on_demand": count("alloc", "swapped in on demand"), "recompute": count("alloc", "recomputed"),
           "drop": count("free_completed", "dropped")}
    for a in ("evict", "prefetch", "swapin_on_demand", "recompute"):
        if got[a] != want[a]: errors.append(f"device {dev}: {got[a]} {a} in the snapshot, {want[a]} in the log")
    if not 0 < got["drop"] <= want["drop"] and want["drop"]: errors.append(f"device {dev}: {got['drop']} drops of {want['drop']}")
    print(f"  device {dev}: {got} (log: {want})")
    if sum(want.values()) == 0: errors.append(f"device {dev}: its log recorded nothing")
if errors: print("FAIL: " + "; ".join(errors)); sys.exit(1)
PY
echo "memviz_test log: ok"
