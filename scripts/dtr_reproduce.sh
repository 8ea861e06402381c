#!/usr/bin/env bash
# DTR's own measurements next to the simulator's: for each model DTR both logged and measured at
# the same batch size (transformer 10, unet 6, densenet121 84), its operator log is imported
# (`capuchin trace import simrd`) and simulated on the titan-v profile (the GPU DTR ran on) at
# each memory budget DTR ran, with our `dtr` policy and with `capuchin`; DTR's measured slowdown
# is its time at that budget over its baseline run's time (dtr-prototype-measured.json).
# Simulated figures: steady iterations of `capuchin sim --iters 4` (iterations 2-4), labelled as
# such, and the lower bound any policy is held to (`capuchin sim bound`); DTR's: measured on a
# real Titan V by DTR's authors (their runtime overhead included).
# Usage: scripts/dtr_reproduce.sh [CAPUCHIN_BIN] [DTR_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/build/release/bin/capuchin}
dir=${2:-$root/../shared/external/dtr-simrd}
[ -x "$bin" ] || { echo "dtr_reproduce: no capuchin binary at $bin (build first: cmake --workflow --preset release)" >&2; exit 1; }
[ -d "$dir" ] || { echo "dtr_reproduce: no DTR logs at $dir (../shared/external/dtr-simrd beside the checkout)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "| model (batch) | budget | of DTR's peak | DTR measured (Titan V) | dtr, simulated (titan-v) | capuchin, simulated (titan-v) | bound (titan-v) |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
for spec in transformer:10 unet:6 tv_densenet121:84; do
  model=${spec%%:*} batch=${spec##*:}
  log=$(ls "$dir/$model-$batch-"*.log.gz | head -1)
  "$bin" trace import simrd "$log" -o "$tmp/$model.jsonl.gz" --model "$model" >/dev/null
  python3 - "$dir/dtr-prototype-measured.json" "$model" "$batch" >"$tmp/budgets" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
model, batch = sys.argv[2], int(sys.argv[3])
runs = [r for r in d[model] if r["specific_params"].get("batch_size") == batch]
base = [r for r in runs if r["specific_params"]["type"] == "baseline"][0]["summary"][0]
for r in runs:
    p = r["specific_params"]
    if p["type"] != "dtr" or p.get("kind") != "fixed":
        continue
    s = r["summary"][0]
    print(int(p["memory_budget"]), p["memory_budget"] / (base["total_mem"]["median"] * 1e6),
          s["time"]["median"] / base["time"]["median"])
EOF
  while read -r budget share measured; do
    cells=()
    for policy in dtr capuchin; do
      rc=0
      json=$("$bin" sim --trace "$tmp/$model.jsonl.gz" --gpu titan-v --policy "$policy" --budget "$budget" --iters 4 --json) || rc=$?
      [ "$rc" -eq 0 ] || [ "$rc" -eq 3 ] || { echo "dtr_reproduce: capuchin sim failed ($model, $policy, $budget)" >&2; exit 1; }
      cells+=("$(python3 -c 'import json,sys; j=json.load(sys.stdin); print("%.3f" % j["ratio"] if j["feasible"] else "infeasible")' <<<"$json")")
    done
    # the lower bound (any policy), carried by the last result
    cells+=("$(python3 -c 'import json,sys; b=json.load(sys.stdin)["bound"]; print("%.3f" % b["ratio"] if b["feasible"] else "infeasible")' <<<"$json")")
    printf '| %s (%s) | %s GB | %.2f | %.3f | %s | %s | %s |\n' "$model" "$batch" "$((budget / 1000000000))" "$share" \
      "$measured" "${cells[0]}" "${cells[1]}" "${cells[2]}"
  done <"$tmp/budgets"
done
