#!/bin/sh
# run_summary.sh OUTDIR: what `capuchin run` tells the user, and the one budget syntax.
#   1. --budget B (bytes, B = half the natural peak P) --record T: at the end a summary on
#      stderr names the session, the budget, the natural and resident peaks (resident within
#      the budget), bytes evicted and prefetched, the plans applied and who made them, the
#      decision log (which exists) and the trace, and a report command that works as printed.
#   2. --quiet: no summary.
#   3. --budget 0.5x: the budget resolves once the first iteration is learned; the summary says
#      "0.5x the natural peak = N" and the resident peak since then stays within N.
#   4. --budget 0.5 (ambiguous): refused before the job runs, naming the three forms.
#   5. Ctrl-C (SIGINT to capuchin): the job ends by the signal and the summary still comes.
# Environment (set by ctest): CAPUCHIN, CAPUCHIND, TRAIN, LD_LIBRARY_PATH (simcuda), PRELOAD_PREFIX.
set -u
out=$1
rm -rf "$out"; mkdir -p "$out"
sock=$out/s.sock
"$CAPUCHIND" --socket "$sock" --log-dir "$out/logs" --idle-exit 120 > "$out/daemon.log" 2>&1 &
dpid=$!
trap 'kill $dpid 2>/dev/null; wait $dpid 2>/dev/null' EXIT
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
args="--depth 8 --width 64 --batch 2048 --seed 7"
P=$("$TRAIN" $args --print-peak)
B=$((P / 2))
"$TRAIN" $args --iters 8 > "$out/ref.txt"
fail() { echo "FAIL: $1"; [ $# -gt 1 ] && cat "$2"; exit 1; }
field() { sed -n "s/^    $1 *//p" "$2"; }  # a summary line's value

# 1. The job is held before its 6th iteration until capuchind shows a plan: the summary must
#    count one applied, and a job never waits for its plan (under ASan the daemon plans slower
#    than the job runs).
. "$(dirname "$0")/until_within.sh"
LD_PRELOAD="$PRELOAD_PREFIX" SIMCUDA_DEVICE_BYTES=$B "$CAPUCHIN" run --socket "$sock" --budget "$B" --record "$out/t.jsonl.gz" \
  -- "$TRAIN" $args --iters 8 --hold-before 6 --hold-file "$out/go1" > "$out/run1.txt" 2> "$out/run1.err" & job=$!
until_within 120 session_ready "$sock" plan || { touch "$out/go1"; wait $job; fail "capuchind showed no plan within 120 s" "$out/run1.err"; }
touch "$out/go1"
wait $job || fail "the job failed" "$out/run1.err"
cmp -s "$out/ref.txt" "$out/run1.txt" || fail "output differs under capuchin run"
grep -q "^capuchin run: the job ended (exit status 0); summary:" "$out/run1.err" || fail "no summary" "$out/run1.err"
grep -Eq "^  session [0-9]+ \(pid [0-9]+, closed" "$out/run1.err" || fail "the summary names no session" "$out/run1.err"
field budget "$out/run1.err" | grep -q "($B bytes)" || fail "the budget is not named in bytes" "$out/run1.err"
want=$(python3 -c "print(f'{$P / 1048576:.1f} MiB allocated')")
field "natural peak" "$out/run1.err" | grep -q "^$want" || fail "the natural peak is not the job's allocated peak ($want)" "$out/run1.err"
python3 - "$out/run1.err" "$B" <<'EOF' || exit 1
import re, sys
text, budget = open(sys.argv[1]).read(), int(sys.argv[2])
unit = {"B": 1, "KiB": 1024, "MiB": 1 << 20, "GiB": 1 << 30}
def size(label):
    m = re.search(r"^    " + label + r"\s+([0-9.]+) (B|KiB|MiB|GiB)", text, re.M)
    if not m: sys.exit(f"FAIL: no '{label}' in the summary:\n{text}")
    return float(m.group(1)) * unit[m.group(2)]
resident = size("resident peak")
if not 0 < resident <= budget * 1.001: sys.exit(f"FAIL: resident peak {resident} not within the budget {budget}")
m = re.search(r"^    moved\s+evicted ([0-9.]+) (B|KiB|MiB|GiB), prefetched ([0-9.]+) (B|KiB|MiB|GiB)", text, re.M)
if not m or float(m.group(1)) == 0 or float(m.group(3)) == 0: sys.exit(f"FAIL: nothing evicted or prefetched:\n{text}")
m = re.search(r"^    plans applied\s+(\d+) \((\d+) made by capuchind, (\d+) in the job\)", text, re.M)
if not m or int(m.group(1)) < 1 or int(m.group(1)) != int(m.group(2)) + int(m.group(3)):
    sys.exit(f"FAIL: plans applied missing or inconsistent:\n{text}")
print(f"1. summary: resident peak {resident:.0f} <= budget {budget}; plans {m.group(1)}")
EOF
log=$(field "decision log" "$out/run1.err")
[ -s "$log" ] || fail "the decision log named ($log) does not exist" "$out/run1.err"
grep -q "^  trace            $out/t.jsonl.gz" "$out/run1.err" || fail "the trace is not named" "$out/run1.err"
report=$(sed -n 's/^  report: *//p' "$out/run1.err" | sed "s|-o report.html|-o $out/report.html|")
[ -n "$report" ] || fail "no report command" "$out/run1.err"
sh -c "\"$CAPUCHIN\" ${report#capuchin }" > "$out/report.out" 2>&1 || fail "the printed report command failed: $report" "$out/report.out"
[ -s "$out/report.html" ] || fail "the report command wrote nothing"

# 2.
LD_PRELOAD="$PRELOAD_PREFIX" "$CAPUCHIN" run --socket "$sock" --quiet --budget "$B" -- "$TRAIN" $args --iters 2 \
  > /dev/null 2> "$out/run2.err" || fail "the --quiet job failed" "$out/run2.err"
grep -q "summary" "$out/run2.err" && fail "--quiet printed a summary" "$out/run2.err"

# 3.
LD_PRELOAD="$PRELOAD_PREFIX" "$CAPUCHIN" run --socket "$sock" --budget 0.5x -- "$TRAIN" $args --iters 8 \
  > "$out/run3.txt" 2> "$out/run3.err" || fail "the 0.5x job failed" "$out/run3.err"
cmp -s "$out/ref.txt" "$out/run3.txt" || fail "output differs under 0.5x"
python3 - "$out/run3.err" <<'EOF' || exit 1
import re, sys
text = open(sys.argv[1]).read()
m = re.search(r"^    budget\s+0\.5x the natural peak = [0-9.]+ \w+ \((\d+) bytes\)", text, re.M)
if not m: sys.exit(f"FAIL: the 0.5x budget is not resolved in the summary:\n{text}")
budget = int(m.group(1))
n = re.search(r"^    natural peak\s+[0-9.]+ MiB allocated(?: \(([0-9.]+) MiB as the executor counts it)?", text, re.M)
counted = n and (n.group(1) or re.search(r"^    natural peak\s+([0-9.]+)", text, re.M).group(1))
if not n or abs(budget - 0.5 * float(counted) * (1 << 20)) > 0.01 * budget:
    sys.exit(f"FAIL: the budget {budget} is not half the natural peak:\n{text}")
r = re.search(r"^    resident peak\s+([0-9.]+) MiB", text, re.M)
if not r or float(r.group(1)) * (1 << 20) > budget * 1.01:
    sys.exit(f"FAIL: the resident peak since the budget applied is over it:\n{text}")
print(f"3. 0.5x resolved to {budget} bytes; resident peak {r.group(1)} MiB")
EOF

# 4.
rc=0
LD_PRELOAD="$PRELOAD_PREFIX" "$CAPUCHIN" run --socket "$sock" --budget 0.5 -- sh -c "touch $out/ran" > /dev/null 2> "$out/run4.err" || rc=$?
[ "$rc" -eq 2 ] || fail "an ambiguous budget exited $rc, not 2" "$out/run4.err"
[ ! -e "$out/ran" ] || fail "the job ran with an ambiguous budget"
grep -q "budget '0.5' is ambiguous: write a size (0.5GiB, 0.5MB), a share of the device's memory (50%) or a multiple of the job's natural peak (0.5x)" \
  "$out/run4.err" || fail "the message does not name the three forms" "$out/run4.err"

# 5. Started from Python: a shell's background job would inherit SIGINT ignored, as a job
# started by `cmd &` in a script does, and never see the Ctrl-C.
python3 - "$CAPUCHIN" "$sock" "$B" "$out" "$TRAIN" $args <<'EOF' || exit 1
import os, signal, subprocess, sys, time
capuchin, sock, budget, out, train, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6:]
env = dict(os.environ, LD_PRELOAD=os.environ.get("PRELOAD_PREFIX", ""))
with open(os.path.join(out, "run5.err"), "w") as err:
    p = subprocess.Popen([capuchin, "run", "--socket", sock, "--budget", budget, "--", train, *args, "--iters", "1000000"],
                         stdout=subprocess.DEVNULL, stderr=err, env=env)
    logs = os.path.join(out, "logs")
    deadline = time.time() + 30
    while len(os.listdir(logs)) < 4 and time.time() < deadline: time.sleep(0.05)  # the job attached
    time.sleep(1)
    p.send_signal(signal.SIGINT)
    try:
        rc = p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        sys.exit("FAIL: capuchin run did not end within 60 s of SIGINT")
text = open(os.path.join(out, "run5.err")).read()
if rc != 130: sys.exit(f"FAIL: Ctrl-C: exit status {rc}, not 130:\n{text}")
if "capuchin run: the job ended (signal 2); summary:" not in text or "  session " not in text:
    sys.exit(f"FAIL: no summary (or no session in it) after Ctrl-C:\n{text}")
print("5. Ctrl-C: exit 130, summary printed")
EOF
echo run-summary-ok
