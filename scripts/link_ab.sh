#!/usr/bin/env bash
# Benchmark: plans timed with the link the job measured against plans timed with the profile's
# link, on a host link slower one way than the profile says. Every figure is SIMULATED: simcuda's
# virtual time, no GPU involved.
#
# Usage: scripts/link_ab.sh [ITERS] [TRACES...]
#   ITERS   iterations of each run, >= 8 (default 10); TRACES default to the three in tests/data.
# For each trace and budget fraction f in FRACTIONS (default "0.5 0.3"), with the uvm backend and
# SIMCUDA_MANAGED_TO_HOST_SHARE=SHARE (default 0.25: managed memory migrates to the host at a
# quarter of the pinned rate, as measured on an H200; README, Results):
#   - P = the replay's own device peak, B = floor(f x P); sim_trace_replay (the trace's set-up,
#     then its last iteration ITERS times) runs unconstrained, then under capuchin with
#     CAPUCHIN_LINK=profile (swaps timed at the planner's simcuda profile's 25 GB/s) and with
#     CAPUCHIN_LINK=measured (the default: at what the executor's moves measured), each
#     interleaved with the other, output compared with the unconstrained run's;
#   - steady time per iteration = mean over iterations 5..ITERS of simcuda's host virtual clock
#     (--timing); each mode runs REPEATS times (default 3), the two modes alternating, and the
#     table gives the median and the range (one run's virtual time depends on when plans land:
#     mobilenet_v2 at 0.5 read 38-45 ms per iteration in three runs of one build), and the ratio
#     of the medians, measured / profile (below 1: the measured link helps).
# Environment: BUILD_DIR (default build/release), SHARE, FRACTIONS, REPEATS, RUN_TIMEOUT (seconds
# per run, default 300). Exit 0 when the table was printed, 1 on bad usage or a missing program,
# 2 when a run failed or its output differed (the table is still printed).
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "link_ab: $*" >&2; exit 1; }
iters=${1:-10}
[ $# -gt 0 ] && shift
case $iters in '' | *[!0-9]*) die "ITERS must be a number (got '$iters')" ;; esac
[ "$iters" -ge 8 ] || die "ITERS must be at least 8 (the steady window is iterations 5..ITERS; got $iters)"
traces=("$@")
[ ${#traces[@]} -eq 0 ] && traces=(tests/data/resnet18-b16.jsonl.gz tests/data/mobilenet_v2-b16.jsonl.gz tests/data/tiny_transformer-b8.jsonl.gz)
build=${BUILD_DIR:-build/release}
replay=$build/bin/sim_trace_replay
preload=$build/lib/libcapuchin.so
[ -x "$replay" ] && [ -f "$preload" ] || die "build $build first (sim_trace_replay, libcapuchin.so)"
export LD_LIBRARY_PATH=$build/lib/simcuda
share=${SHARE:-0.25}
fractions=${FRACTIONS:-0.5 0.3}
run_timeout=${RUN_TIMEOUT:-300}
repeats=${REPEATS:-3}
case $repeats in '' | *[!0-9]* | 0) die "REPEATS must be a positive number (got '$repeats')" ;; esac
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# median_range V...: "median (min-max)" of the values, or the median alone for one.
median_range() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; if (NR == 1) printf "%.3f", m; else printf "%.3f (%.3f-%.3f)", m, v[1], v[NR] }'; }
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { printf "%.6f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
steady() { awk -v n="$iters" '!/^#/ { t[$1] = $2 } END { if (!(n in t) || !(4 in t)) exit 1; printf "%.3f", (t[n] - t[4]) / (n - 4) / 1e6 }' "$1"; }

fails=0
echo "Simulated (simcuda virtual time), uvm backend, managed memory to the host at $share of the pinned rate; ms per steady iteration (iterations 5..$iters), median (range) of $repeats runs each."
echo
echo "| trace | budget | unconstrained | CAPUCHIN_LINK=profile | measured (default) | measured / profile | link measured |"
echo "| --- | --- | ---: | ---: | ---: | ---: | --- |"
for trace in "${traces[@]}"; do
  [ -e "$trace" ] || die "no such trace: $trace"
  name=$(basename "$trace" .jsonl.gz)
  common=(--trace "$trace" --iters "$iters" --gpu simcuda --alloc async --syncs loss,batch)
  peak=$("$replay" "${common[@]}" --print-peak) || die "--print-peak failed on $trace"
  "$replay" "${common[@]}" --timing "$work/u.tim" > "$work/u.out" || die "the unconstrained run of $trace failed"
  base=$(steady "$work/u.tim")
  for frac in $fractions; do
    budget=$(awk -v p="$peak" -v f="$frac" 'BEGIN { printf "%d", p * f }')
    runs_profile=() runs_measured=() failed=""
    link="-"
    for ((r = 0; r < repeats; ++r)); do
      for mode in profile measured; do
        status=0
        env SIMCUDA_MANAGED_TO_HOST_SHARE="$share" SIMCUDA_DEVICE_BYTES="$budget" CAPUCHIN_BUDGET="$budget" \
          CAPUCHIN_BACKEND=uvm CAPUCHIN_LINK=$mode CAPUCHIN_LOG=info LD_PRELOAD="$preload" \
          timeout "$run_timeout" "$replay" "${common[@]}" --timing "$work/$mode.tim" > "$work/$mode.out" 2> "$work/$mode.err" || status=$?
        if [ "$status" -ne 0 ]; then
          failed="$mode exited $status"; fails=$((fails + 1)); continue
        elif ! cmp -s "$work/u.out" "$work/$mode.out"; then
          failed="$mode: output differs"; fails=$((fails + 1)); continue
        fi
        t=$(steady "$work/$mode.tim")
        if [ "$mode" = profile ]; then runs_profile+=("$t"); else runs_measured+=("$t"); fi
        if [ "$mode" = measured ]; then
          link=$(grep -o "measured it: [0-9.]* GB/s to the host, [0-9.]* GB/s to the device" "$work/$mode.err" | tail -1 | sed 's/measured it: //') || link="-"
        fi
      done
    done
    if [ -n "$failed" ] || [ ${#runs_profile[@]} -eq 0 ] || [ ${#runs_measured[@]} -eq 0 ]; then
      echo "| $name | $frac ($budget B) | $base | FAIL (${failed:-no run}) | - | - | - |"
      continue
    fi
    ratio=$(awk -v a="$(median "${runs_measured[@]}")" -v b="$(median "${runs_profile[@]}")" 'BEGIN { printf "%.3f", a / b }')
    echo "| $name | $frac ($budget B) | $base | $(median_range "${runs_profile[@]}") | $(median_range "${runs_measured[@]}") | $ratio | ${link:--} |"
  done
done
[ "$fails" -eq 0 ] || exit 2
