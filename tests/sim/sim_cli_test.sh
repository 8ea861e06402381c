#!/usr/bin/env bash
# `capuchin sim` and `capuchin sim sweep` end to end: JSON fields, infeasible reports,
# errors naming the problem, the sweep's files (SVG checked as XML when python3 exists).
# Usage: sim_cli_test.sh CAPUCHIN_BIN DATA_DIR [sanitized]
# `sanitized` (CI time): the checks of where waits are named use lru-uvm instead of capuchin,
# and the sweep's explain.md (capuchin's) is left to the release build. Those four capuchin runs
# at 0.5x took 47 of the test's 55 s under ASan (its planner runs 6x slower there than in
# release); what they check is the CLI's, and the planner has its own sanitized tests.
set -u
bin=$1 data=$2
waits_policy=capuchin
[ "${3:-}" = sanitized ] && waits_policy=lru-uvm
trace="$data/resnet18-b16.jsonl.gz"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() {  # check DESCRIPTION CONDITION...
  local what=$1; shift
  if "$@"; then echo "ok   - $what"; else echo "FAIL - $what"; fails=$((fails + 1)); fi
}

out=$("$bin" sim --trace "$trace" --gpu h200 --budget 1x --policy none --json)
check "sim exits 0" test $? -eq 0
for key in policy gpu budget_bytes peak_bytes ideal_time_s time_s ratio stall_s swap_out_bytes swap_in_bytes recompute_s feasible; do
  check "json has $key" grep -q "\"$key\":" <<<"$out"
done
check "none at the natural peak is feasible, ratio 1" grep -q '"budget_bytes":479227264,.*"feasible":true.*"ratio":1.0' <<<"$out"

out=$("$bin" sim --trace "$trace" --budget 0.5x --policy none --json); rc=$?
check "none below the peak is infeasible" grep -q '"feasible":false' <<<"$out"
check "an infeasible run exits 3" test "$rc" -eq 3
"$bin" sim --help | grep -q "3 infeasible" ; check "sim --help documents exit status 3" test $? -eq 0
check "infeasible names line and tensor" grep -q '"infeasible":{"event":[0-9]*,"line":[0-9]*,"tensor_id":[0-9]*' <<<"$out"

out=$("$bin" sim --trace "$trace" --budget 300MiB --policy lru-uvm --timeline "$tmp/tl.csv")
check "human output says simulated" grep -q "simulated on GPU profile h200" <<<"$out"
check "timeline written" grep -q '^h2d,swap_in,' "$tmp/tl.csv"

err=$("$bin" sim --trace "$trace" --policy nosuch 2>&1); rc=$?
check "unknown policy exits 1" test $rc -eq 1
check "unknown policy is named" grep -q "unknown policy 'nosuch'" <<<"$err"
err=$("$bin" sim --trace "$trace" --budget 1.5x 2>&1); rc=$?
check "bad budget exits 1" test $rc -eq 1
check "bad budget is named" grep -q "budget '1.5x'" <<<"$err"
err=$("$bin" sim --trace "$trace" --budget 0.5 2>&1); rc=$?
check "a bare fraction exits 1" test $rc -eq 1
check "a bare fraction is ambiguous, naming the three forms" grep -q "budget '0.5' is ambiguous: write a size (0.5GiB, 0.5MB), a share of the device's memory (50%) or a multiple of the job's natural peak (0.5x)" <<<"$err"
out=$("$bin" sim --trace "$trace" --gpu h200 --budget 1% --policy none --json); rc=$?
check "1% of the h200 profile's memory is its bytes" grep -q "\"budget_bytes\":$(( 141000000000 / 100 ))," <<<"$out"
err=$("$bin" sim --trace "$tmp/missing.jsonl" 2>&1); rc=$?
check "missing trace exits 1" test $rc -eq 1
"$bin" sim --list-gpus | grep -q "h200" ; check "list-gpus lists h200" test $? -eq 0

out=$("$bin" sim sweep --trace "$trace" --gpu p100 --budgets 1x,0.6x --policies ideal,none,lru-uvm --out "$tmp/sw")
check "sweep exits 0" test $? -eq 0
check "sweep prints the table" grep -q '| resnet18-b16 | 0.6x |' <<<"$out"
check "sweep.md" test -s "$tmp/sw/sweep.md"
check "sweep.csv has 6 runs" test "$(wc -l < "$tmp/sw/sweep.csv")" -eq 7
check "svg written" test -s "$tmp/sw/resnet18-b16.svg"
if command -v python3 >/dev/null; then
  python3 -c "import sys, xml.etree.ElementTree as E; r = E.parse(sys.argv[1]).getroot(); assert r.tag.endswith('svg')" \
    "$tmp/sw/resnet18-b16.svg"
  check "svg parses as XML" test $? -eq 0
fi

# --iters N: the set-up, then the last iteration N times (repeat_last_iteration).
out=$("$bin" sim --trace "$trace" --gpu simcuda --policy ideal --iters 5 --json)
check "--iters exits 0" test $? -eq 0
check "--iters 5 gives 5 iteration times" python3 -c \
  'import json, sys; j = json.loads(sys.argv[1]); assert j["repeated_iterations"] == 5 and len(j["iteration_time_s"]) == 5 and j["steady_iterations"] == 4' "$out"
out=$("$bin" sim --trace "$trace" --gpu h200 --budget 0.8x --policy capuchin-paper --iters 6 --json)
check "capuchin-paper runs, settles after a warm-up reported apart" python3 -c \
  'import json, sys; j = json.loads(sys.argv[1]); assert j["policy"] == "capuchin-paper" and j["feasible"] and j["warmup_iterations"] >= 1 and j["steady_iterations"] + j["warmup_iterations"] + 1 == 6 and j["warmup_time_s"] > j["time_s"]' "$out"
out=$("$bin" sim --trace "$trace" --gpu simcuda --policy ideal --json)
check "without --iters: the trace's own 3 iterations" grep -q '"repeated_iterations":0,.*"steady_iterations":2' <<<"$out"
out=$("$bin" sim --trace "$trace" --gpu simcuda --policy ideal --iters 5)
check "human output says the last iteration is repeated" grep -q "the last iteration 5 times" <<<"$out"
check "human output says the steady mean's window" grep -q "mean over iterations 2..5" <<<"$out"
printf '{"format":"capuchin-trace","version":1}\n{"op":"alloc","id":0,"bytes":64}\n{"op":"iter","n":1}\n{"op":"alloc","id":1,"bytes":64}\n{"op":"iter","n":2}\n{"op":"free","id":1}\n' > "$tmp/norepeat.jsonl"
err=$("$bin" sim --trace "$tmp/norepeat.jsonl" --iters 3 2>&1); rc=$?
check "an unrepeatable trace exits 1" test $rc -eq 1
check "an unrepeatable trace is named" grep -q "norepeat.jsonl: the last iteration frees 1 tensors.*cannot be repeated" <<<"$err"
"$bin" sim --list-gpus | grep -q "^simcuda" ; check "list-gpus lists simcuda" test $? -eq 0

# sim bound: the lower bound alone, and beside every result; exit 3 where no policy fits.
out=$("$bin" sim bound --trace "$trace" --budget 0.5x); rc=$?
check "sim bound exits 0 where a policy can fit" test $rc -eq 0
check "sim bound says the least ratio" grep -q "no policy runs a steady iteration faster than ratio 1\.[0-9]" <<<"$out"
"$bin" sim bound --trace "$trace" --budget 0.3x >/dev/null; rc=$?
check "sim bound exits 3 where one kernel alone exceeds the budget" test $rc -eq 3
out=$("$bin" sim --trace "$trace" --policy dtr --budget 0.8x --json)
check "every sim result carries the bound" grep -q '"bound":{"feasible":true,"ratio":' <<<"$out"

# --swap-link: a policy's moves at other rates than the profile's link (what an executor
# measured: Unified Memory to the host on an H200 is 16 GB/s). Labelled, in the JSON, and a
# slower link to the host raises the bound; a rate that is not one is refused by name.
out=$("$bin" sim --trace "$trace" --budget 0.5x --policy capuchin-swap --swap-link 16,49.8)
check "--swap-link is said beside the result" grep -q "swaps at 16 GB/s out, 49.8 in (--swap-link)" <<<"$out"
out=$("$bin" sim bound --trace "$trace" --budget 0.5x --swap-link 16,49.8 --json)
check "--swap-link in the bound's JSON" grep -q '"swap_link_gbps":\[16.0,49.8\]' <<<"$out"
slow=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["bound"]["ratio"])' <<<"$out" 2>/dev/null || echo 0)
fast=$("$bin" sim bound --trace "$trace" --budget 0.5x --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["bound"]["ratio"])' 2>/dev/null || echo 0)
check "a slower link to the host raises the bound ($fast -> $slow)" awk -v a="$fast" -v b="$slow" 'BEGIN { exit !(a > 1 && b > a * 1.2) }'
err=$("$bin" sim --trace "$trace" --budget 0.5x --policy capuchin --swap-link fast 2>&1 >/dev/null); rc=$?
check "a --swap-link that is not a rate exits 1" test $rc -eq 1
check "a bad --swap-link is named" grep -q "\-\-swap-link: 'fast' is not a rate in GB/s" <<<"$err"
for bad in ",49.8" "16," "" "1,2,3"; do
  "$bin" sim --trace "$trace" --budget 0.5x --policy capuchin --swap-link "$bad" >/dev/null 2>&1; rc=$?
  check "--swap-link '$bad' is refused" test $rc -eq 1
done
out=$("$bin" sim sweep --trace "$trace" --budgets 0.5x --policies vdnn --swap-link 16 --out "$tmp/sl")
check "sim sweep labels its tables with --swap-link" grep -q "swaps at 16 GB/s out, 16 in (--swap-link)" "$tmp/sl/sweep.md"

# Where the time goes: stalls by cause (they add up to stall_s) and the largest waits, named.
out=$("$bin" sim --trace "$trace" --budget 300MiB --policy lru-uvm --iters 4 --json)
check "stalls by cause add up to the stall, sites named" python3 -c '
import json, sys
j = json.loads(sys.argv[1])
by = j["stall_by_cause_s"]
assert set(by) == {"room", "on_demand_swap_in", "late_prefetch", "copy_engine"}, by
assert j["stall_s"] > 0 and abs(sum(by.values()) - j["stall_s"]) <= 1e-9 * j["stall_s"], (by, j["stall_s"])
sites = j["stall_sites"]
assert 1 <= len(sites) <= 5 and all(s["stall_s"] > 0 and s["cause"] in by and s["line"] == s["event"] + 2 for s in sites), sites
assert sorted((s["stall_s"] for s in sites), reverse=True) == [s["stall_s"] for s in sites]
assert 0 < j["swap_in_link_s"] <= j["time_s"], j["swap_in_link_s"]' "$out"
out=$("$bin" sim --trace "$trace" --budget 300MiB --policy lru-uvm --iters 4)
check "human output splits the stall by cause" grep -q "stall [0-9.]* ms (on-demand swap-ins [0-9.]*" <<<"$out"
check "human output names the largest waits" grep -q "^    line [0-9]* (.*): [0-9.]* ms, " <<<"$out"
# Under --iters a line is the repeated trace's: the output also names the iteration and the
# trace's own line, which holds the same kernel.
check "a wait names its iteration and the trace's own line" grep -q "^    line [0-9]* (.*; iteration 4, line [0-9]* of the trace): " <<<"$out"
# waits_on_their_lines JSON FILE [bound]: the line of FILE each kernel wait names holds that
# kernel (and, with `bound`, the bound names a line too).
waits_on_their_lines() {
  python3 -c '
import gzip, json, sys
j = json.loads(sys.argv[1])
lines = gzip.open(sys.argv[2], "rt").read().splitlines()
sites = [s for s in j["stall_sites"] if s["op"] == "kernel"]
assert sites, j["stall_sites"]
for s in sites:
    assert s["trace_line"] > 1 and json.loads(lines[s["trace_line"] - 1])["name"] == s["name"], s
assert len(sys.argv) < 4 or j["bound"]["trace_line"] > 1' "$@"
}
out=$("$bin" sim --trace "$trace" --budget 0.5x --policy $waits_policy --iters 8 --json)
check "the trace's own line of each wait holds its kernel" waits_on_their_lines "$out" "$trace" bound
# The same where the iterations are learned (no markers in the file, as `capuchin run --record`
# writes): the lines are the file's, not those of the trace with the markers added.
python3 -c 'import gzip, sys; gzip.open(sys.argv[2], "wt").writelines(l for l in gzip.open(sys.argv[1], "rt") if "\"op\":\"iter\"" not in l)' \
  "$trace" "$tmp/noiter.jsonl.gz"
for iters in "" "--iters 6"; do
  out=$("$bin" sim --trace "$tmp/noiter.jsonl.gz" --budget 0.5x --policy $waits_policy $iters --json 2>/dev/null)
  check "learned iterations${iters:+, $iters}: each wait's line of the file holds its kernel" \
    waits_on_their_lines "$out" "$tmp/noiter.jsonl.gz"
done
if [ $waits_policy = capuchin ]; then
  out=$("$bin" sim sweep --trace "$trace" --budgets 0.5x --policies vdnn,capuchin --iters 6 --out "$tmp/ex")
  check "a sweep with capuchin says where its time goes" grep -q "^| resnet18-b16 | 0.5x | [0-9.]* | [0-9.]* | [0-9.]* | [0-9.]* | [0-9.]* at line [0-9]* (iteration [0-9]*, line [0-9]* of the trace) | .*| line [0-9]* (.*; iteration 6, line [0-9]* of the trace): [0-9.]* ms, " "$tmp/ex/explain.md"
fi
check "a sweep without capuchin writes no explain.md" test ! -e "$tmp/sl/explain.md"

echo "$fails failed"
test $fails -eq 0
