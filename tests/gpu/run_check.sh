#!/bin/sh
# run_check.sh: one real-GPU check (ctest label gpu; scripts/gpu-check.sh runs the same).
#
# Usage: run_check.sh CASE OUTDIR
#   CASE: capture | capture_static | param_info | graph | cupti | sync13 | checksum   (capture under LD_PRELOAD)
#         evict_uvm | evict_pinned | missed_uvm | missed_pinned | ipc_uvm | ipc_pinned
#         infer_uvm | infer_pinned                                  (the executor under a budget)
# Environment: GPU_BIN (folder of the tests/gpu programs), CAPUCHIN_LIB (libcapuchin.so),
#   CAPUCHIN_CLI (the capuchin command; optional: trace validation), PRELOAD_PREFIX (optional:
#   sanitizer runtimes), GPU_BUDGET (executor cases, bytes, default 209715200 = 200 MiB:
#   about 3 of the 64 MiB buffers), PYTHON (default python3).
# Every case first runs its program plain: exit 77 there (no GPU) is this script's exit 77
# (SKIP). Then it runs it under libcapuchin.so and requires: the program's own PASS, the same
# CHECKSUM lines as the plain run, and (capture cases) the recorded trace valid and holding
# what the program's EXPECT lines say; (executor cases) the decision log showing evictions.
# Exit 0 pass, 1 fail, 77 skipped (no GPU, or no executor in this libcapuchin.so).
set -u
case_name=${1:?usage: run_check.sh CASE OUTDIR}
out=${2:?usage: run_check.sh CASE OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python3}
mkdir -p "$out"
log="$out/$case_name"

prog=""; args=""; executor=""; backend=""
case "$case_name" in
  capture) prog=gpu_capture ;;
  capture_static) prog=gpu_capture_static ;;
  param_info) prog=gpu_param_info ;;
  graph) prog=gpu_graph ;;
  cupti) prog=gpu_cupti ;;
  sync13) prog=gpu_sync13 ;;
  checksum) prog=gpu_checksum ;;
  evict_uvm|evict_pinned|missed_uvm|missed_pinned|ipc_uvm|ipc_pinned)
    prog=gpu_executor; args=${case_name%_*}; backend=${case_name#*_}; executor=1 ;;
  infer_uvm|infer_pinned) prog=gpu_infer; backend=${case_name#*_}; executor=1 ;;
  *) echo "run_check.sh: unknown case '$case_name'" >&2; exit 2 ;;
esac
bin="${GPU_BIN:?GPU_BIN must name the folder of the tests/gpu programs}/$prog"
[ -x "$bin" ] || { echo "FAIL $case_name: $bin not built" ; exit 1; }

"$bin" $args >"$log.plain.log" 2>&1
rc=$?
cat "$log.plain.log"
[ $rc -eq 77 ] && exit 77
# 78: the driver is older than the runtime the program was built with (a SKIP for ctest; the
# line above says so, and scripts/gpu-check.sh reports it apart from "no GPU").
[ $rc -eq 78 ] && exit 77
if [ $rc -ne 0 ]; then echo "FAIL $case_name: the program fails without capuchin (exit $rc)"; exit 1; fi

lib=${CAPUCHIN_LIB:-}
if [ -z "$lib" ] || [ ! -r "$lib" ]; then
  echo "FAIL $case_name: no libcapuchin.so (CAPUCHIN_LIB='$lib')"; exit 1
fi
preload="${PRELOAD_PREFIX:-}$lib"
trace="$log.trace.jsonl"
decisions="$log.decisions.jsonl"
rm -f "$trace" "$decisions"
if [ -n "$executor" ]; then
  if ! grep -q CAPUCHIN_DECISION_LOG "$lib"; then
    echo "SKIP $case_name: this libcapuchin.so has no executor (no CAPUCHIN_DECISION_LOG); contents verified plain only"
    exit 77
  fi
  env LD_PRELOAD="$preload" CAPUCHIN_SINK=null CAPUCHIN_BUDGET="${GPU_BUDGET:-209715200}" CAPUCHIN_BACKEND="$backend" \
      CAPUCHIN_DECISION_LOG="$decisions" CAPUCHIN_LOG=info "$bin" $args >"$log.capuchin.log" 2>&1
else
  env LD_PRELOAD="$preload" CAPUCHIN_RECORD="$trace" CAPUCHIN_LOG=info "$bin" $args >"$log.capuchin.log" 2>&1
fi
rc=$?
cat "$log.capuchin.log"
fail=0
# ipc under a budget: the driver has no IPC handle for the memory capuchin serves; what must hold
# then is the driver's own error, capuchin saying why, and a clean exit (README: the executor).
if [ -n "$executor" ] && grep -q '^REFUSED ipc' "$log.capuchin.log"; then
  if [ $rc -eq 0 ] && grep -q 'the driver refused a handle to tensor' "$log.capuchin.log"; then
    echo "PASS $case_name: the driver refused an IPC handle for served memory ($(grep '^REFUSED' "$log.capuchin.log")) and capuchin said why"
    echo "RESULT $case_name PASS"; exit 0
  fi
  echo "FAIL $case_name: the IPC handle was refused without capuchin's explanation (exit $rc)"
  echo "RESULT $case_name FAIL"; exit 1
fi
if [ -n "$executor" ] && [ "$backend" = pinned ] && ! grep -q 'executor summary: backend=pinned ' "$log.capuchin.log"; then
  echo "FAIL $case_name: the pinned backend did not run (the summary names another; see the driver's features above)"; fail=1
fi
if [ $rc -ne 0 ]; then echo "FAIL $case_name: exit $rc under libcapuchin.so"; fail=1; fi
# The probations' checksums ran on the device: the embedded PTX loaded (else they hash on the host).
if [ "$prog" = gpu_infer ]; then
  if grep -q 'executor summary: .* checksum=device ' "$log.capuchin.log"; then
    echo "PASS $case_name: the probations checksummed on the device (checksum=device)"
  else
    echo "FAIL $case_name: the probations did not checksum on the device (the summary says: $(grep -o 'checksum=[a-z]*' "$log.capuchin.log"); see 'checksum kernels' above)"; fail=1
  fi
fi
grep '^CHECKSUM' "$log.plain.log" >"$log.sum.plain"
grep '^CHECKSUM' "$log.capuchin.log" >"$log.sum.capuchin"
if cmp -s "$log.sum.plain" "$log.sum.capuchin"; then
  echo "PASS $case_name: results bit-identical to the plain run ($(wc -l <"$log.sum.plain") checksums)"
else
  echo "FAIL $case_name: results differ from the plain run:"; diff "$log.sum.plain" "$log.sum.capuchin"; fail=1
fi

if [ -n "$executor" ]; then
  if [ ! -s "$decisions" ]; then
    echo "FAIL $case_name: no decision log written at $decisions"; fail=1
  else
    evicts=$(grep -c -E "\"action\": ?\"evict\"" "$decisions")
    ins=$(grep -c -E "\"action\": ?\"(prefetch|swapin_on_demand)\"" "$decisions")
    fallbacks=$(grep -c -E "\"action\": ?\"fallback\"" "$decisions")
    echo "INFO $case_name: decisions: $evicts evict, $ins prefetch/swap-in, $fallbacks fallback ($(wc -l <"$decisions") records)"
    if [ "$evicts" -gt 0 ] && [ "$ins" -gt 0 ]; then
      echo "PASS $case_name: the budget forced evictions and swap-ins ($backend backend)"
    else
      echo "FAIL $case_name: a budget of ${GPU_BUDGET:-209715200} below the working set led to no eviction/swap-in"; fail=1
    fi
  fi
  # Inferred write sets (gpu_infer): each real kernel judged as it deserves.
  if [ "$prog" = gpu_infer ] && [ -s "$decisions" ]; then
    "$py" - "$decisions" <<'PY' || fail=1
import json, sys
seen = [(r.get("note", ""), r["reason"]) for r in map(json.loads, open(sys.argv[1])) if r["action"] == "verdict"]
def has(part, reason): return any(part in n.lower() and r == reason for n, r in seen)
checks = [("a cuBLAS SGEMM writing a new tensor is replayable", has("gemm", "replayable")),
          ("scale (elementwise) is replayable", has("scale", "replayable")),
          ("stamp (the GPU timer) is not-deterministic", has("stamp", "not-deterministic")),
          ("stamp is never replayable", not has("stamp", "replayable")),
          ("accumulate (atomics, in place) is never replayable", not has("accumulate", "replayable"))]
for what, ok in checks: print(("PASS" if ok else "FAIL") + " infer: " + what)
print("INFO infer: verdicts " + "; ".join(sorted({f"{n}: {r}" for n, r in seen})))
sys.exit(0 if all(ok for _, ok in checks) else 1)
PY
  fi
  # The executor's own account (CAPUCHIN_LOG=info): the most it held resident.
  peak=$(grep -o 'peak_resident=[0-9]*' "$log.capuchin.log" | tail -1 | cut -d= -f2)
  if [ -z "$peak" ]; then
    echo "FAIL $case_name: no 'executor summary' line (was the executor on?)"; fail=1
  elif [ "$peak" -le "${GPU_BUDGET:-209715200}" ]; then
    echo "PASS $case_name: resident peak $peak bytes within the budget ${GPU_BUDGET:-209715200}"
  else
    echo "FAIL $case_name: resident peak $peak bytes above the budget ${GPU_BUDGET:-209715200}"; fail=1
  fi
else
  if [ -n "${CAPUCHIN_CLI:-}" ] && [ -x "${CAPUCHIN_CLI}" ]; then
    if "$CAPUCHIN_CLI" trace validate "$trace"; then echo "PASS $case_name: trace valid"
    else echo "FAIL $case_name: trace invalid"; fail=1; fi
  fi
  if grep -q '^EXPECT' "$log.plain.log"; then
    "$py" "$here/trace_expect.py" "$trace" "$log.plain.log" || fail=1
  fi
fi
[ $fail -eq 0 ] && echo "RESULT $case_name PASS" || echo "RESULT $case_name FAIL"
exit $fail
