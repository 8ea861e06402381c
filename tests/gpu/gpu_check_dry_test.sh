#!/bin/sh
# gpu_check_dry_test.sh: `scripts/gpu-check.sh --dry` (any machine, no GPU needed) walks every
# step and prints, for each check, the command it would run and its pass criteria; it exits 0
# at once and runs or builds nothing. The checks listed here are the ones the issue asks for
# (issue 16 included): one missing from the walk is a failure.
# Usage: gpu_check_dry_test.sh SOURCE_DIR OUTDIR
set -u
src=${1:?usage: gpu_check_dry_test.sh SOURCE_DIR OUTDIR}
out=${2:?usage: gpu_check_dry_test.sh SOURCE_DIR OUTDIR}
rm -rf "$out"
mkdir -p "$out"
start=$(date +%s)
"$src/scripts/gpu-check.sh" --dry "$out/dry" >"$out/dry.log" 2>&1
rc=$?
took=$(( $(date +%s) - start ))
fail=0
[ "$rc" -eq 0 ] || { echo "FAIL: --dry exit $rc, expected 0"; fail=1; }
[ "$took" -le 20 ] || { echo "FAIL: --dry took $took s (it must run nothing)"; fail=1; }
for c in capture capture_static param_info graph cupti sync13 checksum evict_uvm evict_pinned missed_uvm missed_pinned \
         ipc_uvm ipc_pinned infer_uvm infer_pinned pytorch i16-graph i16-expandable i16-bf16-scan i16-ranks; do
  # "  check NAME", then its "run:" line; the criteria follow as "PASS when:".
  if ! grep -A1 -E "^  check $c\$" "$out/dry.log" | grep -q -E '^    run: +[^ ]'; then
    echo "FAIL: --dry does not show check '$c' with the command it runs"; fail=1
  fi
done
checks=$(grep -c -E '^  check ' "$out/dry.log")
criteria=$(grep -c -E '^    PASS when: .{20,}' "$out/dry.log")
[ "$checks" -eq "$criteria" ] || { echo "FAIL: $checks checks but $criteria pass criteria"; fail=1; }
grep -q 'torchrun --nproc-per-node 2' "$out/dry.log" || { echo "FAIL: the torchrun check's command is not shown"; fail=1; }
grep -q 'nothing was run; exit 0' "$out/dry.log" || { echo "FAIL: no closing line"; fail=1; }
# Nothing run: no summary, no logs, no check folders.
[ -z "$(ls -A "$out/dry" 2>/dev/null)" ] || { echo "FAIL: --dry wrote into its output folder: $(ls "$out/dry" | head -5 | tr '\n' ' ')"; fail=1; }
if [ $fail -eq 0 ]; then echo "PASS: gpu-check.sh --dry shows $checks checks, each with its command and pass criteria, in $took s"
else echo "--- dry output:"; cat "$out/dry.log"; fi
exit $fail
