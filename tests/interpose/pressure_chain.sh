#!/bin/sh
# pressure_chain.sh BACKEND: exec_pressure_chain (PROG) under the executor with a budget of
# 12 MiB (x, the accumulator and four of an iteration's 6-11 activations of 2 MiB): it prints
# exactly what it prints without capuchin, and the pressure rule (no iteration repeats, so no
# plan is made) dropped an activation whose input was dropped already (decision
# `drop:pressure-chain`), recomputed along its chain later (`recompute:chain`).
# Environment (set by ctest): PROG, PRELOAD, LD_LIBRARY_PATH (simcuda).
set -eu
backend=$1
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
"$PROG" 6 > "$dir/ref.txt"
CAPUCHIN_BUDGET=12MiB CAPUCHIN_BACKEND="$backend" CAPUCHIN_KERNEL_OUTPUTS=produce:2 \
  CAPUCHIN_DECISION_LOG="$dir/d.jsonl" LD_PRELOAD="$PRELOAD" "$PROG" 6 > "$dir/got.txt" 2> "$dir/err.txt" ||
  { echo "FAIL: exited $?"; tail -5 "$dir/err.txt"; exit 1; }
cmp -s "$dir/ref.txt" "$dir/got.txt" || { echo "FAIL: other results"; diff "$dir/ref.txt" "$dir/got.txt" | head; exit 1; }
count() { grep "\"action\":\"$1\"" "$dir/d.jsonl" | grep -c "\"reason\":\"$2\"" || true; }
chained=$(count drop pressure-chain); plain=$(count drop pressure); recomputed=$(count recompute chain)
echo "identical; drops under pressure: $plain, $chained of them with a dropped input; $recomputed recomputed as a chain's input"
[ "$chained" -gt 0 ] && [ "$recomputed" -gt 0 ] || { echo "FAIL: no chain dropped under pressure"; tail -3 "$dir/err.txt"; exit 1; }
echo "pressure-chain-ok"
