#!/usr/bin/env bash
# The main job: installs dependencies if needed, builds the release preset and shows the
# product end to end.
#  - Without a GPU (the usual case): a training program on simcuda (the project's
#    device-free CUDA) at half of its natural peak memory: first plain, where it fails with
#    out-of-memory, then under `capuchin run`, where it trains to bit-identical losses and
#    weights; then the daemon's session view, a decision-log summary, the HTML report, and
#    a simulated what-if over the real-model traces.
#  - With a GPU and PyTorch: scripts/gpu-check.sh (real-GPU checks and a PyTorch job under
#    capuchin). Set CAPUCHIN_DEMO_SIMCUDA=1 to force the simcuda demo.
# Output files go to ${DEMO_OUT:-build/demo}.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${CAPUCHIN_DEMO_SIMCUDA:-}" ] && command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 &&
   python3 -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
  echo "== a GPU and PyTorch are here: running scripts/gpu-check.sh"
  out=${DEMO_OUT:-build/demo-gpu}
  rc=0
  scripts/gpu-check.sh "$out" || rc=$?
  cat "$out/summary.md" 2>/dev/null || true
  exit $rc
fi

scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" >/dev/null

B=build/release
out=${DEMO_OUT:-build/demo}
rm -rf "$out"
mkdir -p "$out"
export LD_LIBRARY_PATH="$PWD/$B/lib/simcuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
train=("$B/bin/sim_mlp_train" --depth 8 --width 64 --batch 8192 --iters 8 --seed 7 --kernel-ns 200000)
sock="$out/capuchind.sock"

peak=$("${train[@]}" --print-peak)
half=$((peak / 2))
echo "== sim_mlp_train: an 8-layer MLP trained with SGD on simcuda (elementwise kernels cost"
echo "   200 us of virtual time each); natural peak $peak device bytes. No GPU is involved: times"
echo "   below are simcuda's virtual time (simulated)."
echo
echo "== 1. unconstrained (device capacity = the whole simulated GPU)"
SIMCUDA_STATS_FILE="$out/simcuda-stats-reference.json" "${train[@]}" | tee "$out/reference.txt"
echo
echo "== 2. on a device with half that memory ($half bytes), without capuchin"
if SIMCUDA_DEVICE_BYTES=$half "${train[@]}" >"$out/plain-half.txt" 2>&1; then
  echo "unexpected: it fitted"
else
  tail -n 1 "$out/plain-half.txt"
fi
echo
echo "== 3. the same device, under: capuchin run --budget $half -- sim_mlp_train ..."
SIMCUDA_DEVICE_BYTES=$half SIMCUDA_STATS_FILE="$out/simcuda-stats.json" \
  CAPUCHIN_DECISION_LOG="$out/decisions.jsonl" \
  "$B/bin/capuchin" run --socket "$sock" --budget "$half" --record "$out/trace.jsonl.gz" \
  -- "${train[@]}" | tee "$out/capuchin.txt"
if cmp -s "$out/reference.txt" "$out/capuchin.txt"; then
  echo "-> losses and weight checksum bit-identical to the unconstrained run"
  vns() { sed -n 's/.*"max_stream_virtual_ns": *\([0-9]*\).*/\1/p' "$1"; }
  peak_dev() { sed -n 's/.*"peak_device_bytes": *\([0-9]*\).*/\1/p' "$1"; }
  ref_ns=$(vns "$out/simcuda-stats-reference.json") cap_ns=$(vns "$out/simcuda-stats.json")
  echo "-> device peak $(peak_dev "$out/simcuda-stats.json") bytes (budget $half); simulated time (simcuda virtual ns):" \
       "$cap_ns vs $ref_ns unconstrained, $(awk -v a="$cap_ns" -v b="$ref_ns" 'BEGIN { printf "%.2f", a / b }')x"
else
  echo "-> DIFFERENT from the unconstrained run:"
  diff "$out/reference.txt" "$out/capuchin.txt" || true
  exit 1
fi
echo
echo "== 4. what the daemon saw (capuchin sessions --all)"
"$B/bin/capuchin" --socket "$sock" sessions --all || true
"$B/bin/capuchin" --socket "$sock" session 1 |
  grep -E '^(period_kernels|plans|plan_summary|evicted_bytes|prefetched_bytes|recomputed_bytes|stalls) ' || true
echo
echo "== 5. the executor's decisions (capuchin log $out/decisions.jsonl), counted by action"
"$B/bin/capuchin" log "$out/decisions.jsonl" | awk '{ for (i = 1; i <= NF; ++i) if ($i ~ /^iter$/) { print $(i + 2); break } }' |
  sort | uniq -c | sort -rn
echo
echo "== 6. the report"
"$B/bin/capuchin" report "$out/decisions.jsonl" "$out/trace.jsonl.gz" --budget "$half" -o "$out/report.html"
echo "written: $out/report.html (open it in a browser)"
echo
if compgen -G "../shared/traces/*.jsonl*" >/dev/null; then
  echo "== 7. what-if on real-model traces: capuchin sim (simulated, GPU profile h200, budget 0.5 of each peak,"
  echo "   each trace's last iteration repeated to 8: capuchin follows a plan from about the 4th)"
  for t in ../shared/traces/*.jsonl*; do
    # exit status 3: infeasible at this budget (a result, printed like the others)
    { "$B/bin/capuchin" sim --trace "$t" --iters 8 --gpu h200 --budget 0.5x --policy capuchin || [ $? -eq 3 ]; } | head -n 4
  done
fi
