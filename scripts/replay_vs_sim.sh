#!/usr/bin/env bash
# Benchmark: the executor's slowdown on simcuda next to the simulator's prediction for the same
# run. Every figure is SIMULATED: simcuda's virtual time for the executor, `capuchin sim` on
# the GPU profile `simcuda` (whose rates are simcuda's) for the prediction; no GPU is involved.
#
# Usage: scripts/replay_vs_sim.sh [ITERS] [TRACES...]
#   ITERS   iterations of each run, >= 8 (default 8); TRACES default to the three in tests/data.
# For each trace, budget fraction f in {0.8, 0.5, 0.3} and backend in {uvm, pinned}:
#   - P = the replay's own device peak (sim_trace_replay --print-peak, bytes), B = floor(f x P);
#   - the replay (tests/workloads/sim_trace_replay.cpp: the trace's set-up, then its last
#     iteration ITERS times) runs unconstrained, and under capuchin with
#     SIMCUDA_DEVICE_BYTES=B CAPUCHIN_BUDGET=B CAPUCHIN_BACKEND=<backend> LD_PRELOAD=libcapuchin.so;
#     its stdout must be identical to the unconstrained run's (else the row says FAIL);
#   - executor slowdown = steady time per iteration under capuchin / unconstrained, where the
#     steady time is the mean over iterations 5..ITERS (plans apply from about the 4th), from
#     --timing (simcuda's host virtual clock at each iteration's end): (T[N] - T[4]) / (N - 4);
#   - sim slowdown = the same window's mean of `capuchin sim --trace T --iters ITERS --gpu simcuda
#     --budget B --policy P --json` iteration times / that of --policy ideal, P = capuchin-swap
#     (swaps only, as the executor without declared kernel outputs) when this build's
#     `capuchin sim` knows it, else capuchin; the budget is B bytes, as the executor's;
#   - difference % = (executor slowdown / sim slowdown - 1) x 100.
# Prints a markdown table; an infeasible simulation or a failed replay is a row that says so.
# Environment: BUILD_DIR (default build/release, built when missing), REPLAY_ALLOC (async |
# sync | caching, default async), REPLAY_SYNCS (default loss,batch: pageable blocking batch
# uploads, which simcuda charges at 10 GB/s and the simulator at the profile's 25 GB/s link),
# RUN_TIMEOUT (seconds per replay, default 300), OUT (keep the runs' files there; default: a
# temporary directory, removed). Exit 0 when the table was printed, 1 on bad usage or a
# missing program, 2 when a row failed (the table is still printed).
set -euo pipefail
here=$(pwd)
cd "$(dirname "$0")/.."
root=$(pwd)

die() { echo "replay_vs_sim: $*" >&2; exit 1; }

iters=${1:-8}
[ $# -gt 0 ] && shift
case $iters in '' | *[!0-9]*) die "ITERS must be a number (got '$iters')" ;; esac
[ "$iters" -ge 8 ] || die "ITERS must be at least 8 (the steady window is iterations 5..ITERS; got $iters)"

traces=()
if [ $# -eq 0 ]; then
  traces=(tests/data/resnet18-b16.jsonl.gz tests/data/mobilenet_v2-b16.jsonl.gz tests/data/tiny_transformer-b8.jsonl.gz)
else
  for t in "$@"; do  # relative to where the script was called, else to the repository root
    case $t in /*) ;; *) [ -e "$here/$t" ] && t="$here/$t" ;; esac
    [ -e "$t" ] || die "no such trace: $t"
    traces+=("$t")
  done
fi

build=${BUILD_DIR:-build/release}
case $build in /*) ;; *) build=$root/$build ;; esac
replay=$build/bin/sim_trace_replay
capuchin=$build/bin/capuchin
preload=$build/lib/libcapuchin.so
simlib=$build/lib/simcuda
if [ ! -x "$replay" ] || [ ! -x "$capuchin" ] || [ ! -e "$preload" ] || [ ! -e "$simlib/libcuda.so.1" ]; then
  [ -z "${BUILD_DIR:-}" ] || die "$build lacks sim_trace_replay, capuchin, libcapuchin.so or simcuda: build it first"
  cmake --preset release >/dev/null
  cmake --build --preset release -j "$(nproc)" --target sim_trace_replay capuchin_cli capuchin_interpose >/dev/null
fi
alloc=${REPLAY_ALLOC:-async}
syncs=${REPLAY_SYNCS:-loss,batch}
run_timeout=${RUN_TIMEOUT:-300}
export LD_LIBRARY_PATH="$simlib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

if [ -n "${OUT:-}" ]; then
  work=$OUT
  mkdir -p "$work"
else
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi

# The policy: capuchin-swap where this capuchin sim knows it (its --help or a probe run).
policy=capuchin
if "$capuchin" sim --help 2>/dev/null | grep -q capuchin-swap ||
   "$capuchin" sim --trace "${traces[0]}" --iters 1 --gpu simcuda --policy capuchin-swap --json >/dev/null 2>&1; then
  policy=capuchin-swap
fi

# steady_replay TIMING: mean ns per iteration over iterations 5..N of a --timing file.
steady_replay() { awk -v n="$iters" '!/^#/ { t[$1] = $2 } END { if (!(n in t) || !(4 in t)) exit 1; printf "%.3f", (t[n] - t[4]) / (n - 4) }' "$1"; }
# sim_json JSON: "feasible <mean s over iterations 5..N>" or "infeasible <line> <reason>".
sim_json() {
  python3 -c '
import json, sys
j = json.load(open(sys.argv[1])); n = int(sys.argv[2])
if not j["feasible"]:
    w = j["infeasible"]; print("infeasible", w["line"], w["reason"].replace("|", "/")); sys.exit(0)
it = j["iteration_time_s"]
if len(it) < n: sys.exit("capuchin sim gave %d iteration times, not %d" % (len(it), n))
print("feasible %.12g" % (sum(it[4:n]) / (n - 4)))' "$1" "$iters"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }

fails=0
rows=()
summary=()
for trace in "${traces[@]}"; do
  name=$(basename "$trace"); name=${name%.gz}; name=${name%.jsonl}
  d=$work/$name
  mkdir -p "$d"
  common=(--trace "$trace" --iters "$iters" --gpu simcuda --alloc "$alloc" --syncs "$syncs")
  if ! peak=$("$replay" "${common[@]}" --print-peak 2> "$d/peak.err"); then
    rows+=("| $name | - | - | - | FAIL (--print-peak: $(tail -1 "$d/peak.err" | cut -c1-120)) | - | - |")
    fails=$((fails + 1)); continue
  fi
  if ! timeout "$run_timeout" "$replay" "${common[@]}" --timing "$d/unconstrained.tim" > "$d/unconstrained.out" 2> "$d/unconstrained.err"; then
    rows+=("| $name | - | - | - | FAIL (unconstrained run: $(tail -1 "$d/unconstrained.err" | cut -c1-120)) | - | - |")
    fails=$((fails + 1)); continue
  fi
  base_ns=$(steady_replay "$d/unconstrained.tim")
  "$capuchin" sim --trace "$trace" --iters "$iters" --gpu simcuda --policy ideal --json > "$d/ideal.json" ||
    die "capuchin sim --policy ideal failed on $trace"
  ideal=$(sim_json "$d/ideal.json") || die "cannot read $d/ideal.json"
  ideal_s=${ideal#feasible }
  summary+=("$name: peak $peak B; unconstrained replay $(awk -v x="$base_ns" 'BEGIN { printf "%.3f", x / 1e6 }') ms/iteration, capuchin sim ideal $(awk -v x="$ideal_s" 'BEGIN { printf "%.3f", x * 1e3 }') ms/iteration")
  for frac in 0.8 0.5 0.3; do
    budget=$(awk -v p="$peak" -v f="$frac" 'BEGIN { printf "%d", p * f }')
    sim_cell="-"; sim_slow=""
    rc=0  # capuchin sim: 0 feasible, 3 infeasible (both a result), else a failure
    "$capuchin" sim --trace "$trace" --iters "$iters" --gpu simcuda --budget "$budget" --policy "$policy" --json \
      > "$d/sim_$frac.json" 2> "$d/sim_$frac.err" || rc=$?
    if [ "$rc" -eq 0 ] || [ "$rc" -eq 3 ]; then
      result=$(sim_json "$d/sim_$frac.json") || die "cannot read $d/sim_$frac.json"
      state=${result%% *} rest=${result#* }
      if [ "$state" = feasible ]; then
        sim_slow=$(ratio "$rest" "$ideal_s"); sim_cell=$sim_slow
      else
        reason=${rest#* }
        sim_cell="infeasible (line ${rest%% *}: ${reason%%:*})"
      fi
    else
      sim_cell="FAIL ($(tail -1 "$d/sim_$frac.err" | cut -c1-100))"
      fails=$((fails + 1))
    fi
    for backend in uvm pinned; do
      tag=${frac}_$backend
      status=0
      env SIMCUDA_DEVICE_BYTES="$budget" CAPUCHIN_BUDGET="$budget" CAPUCHIN_BACKEND="$backend" LD_PRELOAD="$preload" \
        timeout "$run_timeout" "$replay" "${common[@]}" --timing "$d/$tag.tim" > "$d/$tag.out" 2> "$d/$tag.err" || status=$?
      exec_cell=""; diff_cell="-"
      if [ "$status" -eq 124 ]; then
        exec_cell="FAIL (timed out after ${run_timeout} s)"
      elif [ "$status" -ne 0 ]; then
        exec_cell="FAIL (exit $status: $(grep -v '^$' "$d/$tag.err" | tail -1 | cut -c1-100 | tr '|' '/'))"
      elif ! cmp -s "$d/unconstrained.out" "$d/$tag.out"; then
        exec_cell="FAIL (output differs from the unconstrained run)"
      else
        exec_slow=$(ratio "$(steady_replay "$d/$tag.tim")" "$base_ns")
        exec_cell=$exec_slow
        [ -n "$sim_slow" ] && diff_cell=$(awk -v e="$exec_slow" -v s="$sim_slow" 'BEGIN { printf "%+.1f", (e / s - 1) * 100 }')
      fi
      case $exec_cell in FAIL*) fails=$((fails + 1)) ;; esac
      rows+=("| $name | $frac | $budget | $backend | $exec_cell | $sim_cell | $diff_cell |")
    done
  done
done

echo "All figures simulated (simcuda virtual time / capuchin sim, profile simcuda): steady time per iteration = mean"
echo "over iterations 5..$iters of $iters; slowdown = under the budget / unconstrained (executor) or / policy ideal (sim)."
echo "Replay --alloc $alloc --syncs $syncs; sim policy $policy; library ${preload#"$root"/}."
echo
for s in "${summary[@]}"; do echo "- $s"; done
echo
echo "| trace | fraction | budget B (bytes) | backend | executor slowdown | sim slowdown | difference % |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for r in "${rows[@]}"; do echo "$r"; done
[ "$fails" -eq 0 ] || exit 2
