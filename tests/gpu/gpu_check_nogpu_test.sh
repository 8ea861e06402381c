#!/bin/sh
# gpu_check_nogpu_test.sh: scripts/gpu-check.sh on a machine without a GPU ends at once with
# exit 77 and a summary.md that says "No GPU" (never an obscure failure, never a build).
# Usage: gpu_check_nogpu_test.sh SOURCE_DIR OUTDIR. Skipped (77) where a GPU is present.
set -u
src=${1:?usage: gpu_check_nogpu_test.sh SOURCE_DIR OUTDIR}
out=${2:?usage: gpu_check_nogpu_test.sh SOURCE_DIR OUTDIR}
if nvidia-smi -L >/dev/null 2>&1 || ls /dev/nvidia[0-9]* >/dev/null 2>&1; then
  echo "a GPU is present: this test is for machines without one"; exit 77
fi
rm -rf "$out"
start=$(date +%s)
"$src/scripts/gpu-check.sh" "$out"
rc=$?
took=$(( $(date +%s) - start ))
fail=0
[ "$rc" -eq 77 ] || { echo "FAIL: exit $rc, expected 77 (no GPU)"; fail=1; }
[ -s "$out/summary.md" ] || { echo "FAIL: no $out/summary.md"; fail=1; }
grep -q '^\*\*No GPU here' "$out/summary.md" 2>/dev/null || { echo "FAIL: the summary does not say 'No GPU here'"; fail=1; }
[ "$took" -le 20 ] || { echo "FAIL: took $took s (it must not build anything without a GPU)"; fail=1; }
[ ! -d "$out/check-capture" ] || { echo "FAIL: checks ran without a GPU"; fail=1; }
[ $fail -eq 0 ] && echo "PASS: gpu-check.sh without a GPU: exit 77 and a 'No GPU' summary in $took s"
exit $fail
