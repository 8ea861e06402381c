#!/usr/bin/env bash
# Benchmark: every policy (the baselines and capuchin) at every budget on the real-model traces in
# ../shared/traces, side by side; prints the markdown table and writes sweep.md, sweep.csv
# and one SVG plot per trace, and explain.md (where capuchin's time goes: recomputation and stalls by
# cause against the lower bound) when capuchin is among the policies. All figures are simulated
# for the named GPU profile.
# Usage: scripts/sim_sweep.sh [GPU ...]   (default: h200; e.g. `scripts/sim_sweep.sh p100 h200`)
# Each trace's last iteration is repeated to ITERS iterations (default 8: the capuchin policies
# learn the iteration and follow a plan from about the 4th, as the executor does); the steady
# figure is the mean over iterations 2..ITERS.
# Env: CAPUCHIN_BIN (default build/release/bin/capuchin, built if missing),
#      OUT (default build/sim-sweep), BUDGETS, POLICIES, ITERS.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${CAPUCHIN_BIN:-build/release/bin/capuchin}
if [ ! -x "$bin" ]; then
  cmake --preset release >/dev/null
  cmake --build --preset release --target capuchin_cli -j "$(nproc)"
fi
traces=(../shared/traces/*.jsonl.gz)
if [ ! -e "${traces[0]}" ]; then
  echo "sim_sweep: no traces in ../shared/traces" >&2
  exit 1
fi
out=${OUT:-build/sim-sweep}
budgets=${BUDGETS:-1x,0.8x,0.6x,0.5x,0.4x,0.3x,0.2x}
policies=${POLICIES:-ideal,none,lru-uvm,vdnn,dtr,checkpoint-sqrt,capuchin,capuchin-swap}
iters=${ITERS:-8}
gpus=("$@")
[ ${#gpus[@]} -eq 0 ] && gpus=(h200)
for gpu in "${gpus[@]}"; do
  echo "== $gpu"
  "$bin" sim sweep --trace "${traces[@]}" --gpu "$gpu" --budgets "$budgets" --policies "$policies" --iters "$iters" --out "$out/$gpu"
done
