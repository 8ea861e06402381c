#!/usr/bin/env bash
# host_cost_instructions.sh: the host work libcapuchin.so adds per CUDA call, counted in
# instructions (valgrind's callgrind) instead of seconds, so that two builds can be compared on a
# machine whose timings swing by 2x from run to run (a shared 2-vCPU VM: bench_host_cost's medians
# moved 600-900 us per mobilenet_v2 iteration for one build in one hour). Instruction counts do not
# depend on what else the machine is doing; they are not time (a cache miss costs more than an
# add), so bench_host_cost stays the figure to quote and this one the figure to compare builds by.
#
# For each trace it replays the trace's CUDA calls (bench/host_cost/host_replay.cpp) on the null
# driver under callgrind in the five modes of bench_host_cost (direct, capture, exec, replay,
# pressure; `replay` is described below),
# each at two lengths (WARMUP+2 and WARMUP+2+STEADY iterations): the difference is STEADY
# steady iterations, with start-up, trace loading and learning cancelled out. It prints
#   - instructions added per call of each kind on the calling thread: the inclusive count of
#     libcapuchin.so's hook bodies (body_MemAllocAsync, body_LaunchKernel, ...: everything a hook
#     does but the exported entry's few instructions of dispatch) minus the null driver's own
#     count for the same calls in the direct run. Not the exported cu* entry's count: where a hook
#     calls the driver's function of the same name (capture's cuMemAllocAsync calling the null
#     driver's), callgrind takes the two for one function and counts the driver's cost twice
#     (capture's alloc and free read about 300 instructions high that way until 2026-12-06);
#   - added instructions per iteration on the calling thread (`main`: the program's main thread,
#     counted apart with --separate-threads, less capuchin_finish at exit, whose last drain pass
#     takes what timing left), of which in the hook bodies (`hooks`: the
#     per-call figures times the calls), and on capuchin's own threads (`other`: the drain, the
#     planner, and capuchin_finish's last drain pass; their passes depend on timing, so short
#     runs can even show it negative).
# `pressure` uses CAPUCHIN_BUDGET=0.5x (half the resident peak the executor saw in the first
# learned iteration; bench_host_cost uses half the simulated natural peak).
#
# Exits 1 when a run failed or a preloaded mode counted no launch hook, 77 without valgrind.
#
# Usage: scripts/host_cost_instructions.sh [BUILD_DIR] [TRACES_DIR or TRACE] [STEADY] [WARMUP]
#   defaults (from the checkout): build/release ../shared/traces 4 10; about 40 s for the three shared traces on 2 cores.
#   HOST_COST_LIB=/other/libcapuchin.so measures another build's library with this replay.
#   HOST_COST_MODES="exec replay" runs only those modes (and `direct`, the baseline).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(realpath -m "${1:-$root/build/release}")
traces=$(realpath -m "${2:-$root/../shared/traces}")
steady=${3:-4}
warmup=${4:-10}
[[ $steady =~ ^[1-9][0-9]*$ && $warmup =~ ^[0-9]+$ ]] ||
  { echo "host_cost_instructions: STEADY must be a positive count and WARMUP a count (got '$steady', '$warmup')" >&2; exit 2; }
replay=$build/bin/host_replay
stub=$build/lib/stubcuda
lib=${HOST_COST_LIB:-$build/lib/libcapuchin.so}  # HOST_COST_LIB: another build's library, same replay
command -v valgrind >/dev/null && command -v callgrind_annotate >/dev/null ||
  { echo "host_cost_instructions: needs valgrind (callgrind_annotate); not run" >&2; exit 77; }
[[ -x $replay && -f $lib && -d $stub ]] || { echo "host_cost_instructions: build $build first (host_replay, libcapuchin.so)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# `replay`: exec with every kernel's written pointer declared (`host_replay declared-outputs`
# says which), so each launch keeps a producer for its output as on a GPU, where probations find
# most kernels replayable; the null driver's kernels write nothing, so in `exec` every probation
# says no-output and no producer is ever kept.
declared=$(LD_LIBRARY_PATH="$stub" "$replay" declared-outputs)

# run MODE TRACE ITERS: callgrind output in $work/MODE.TRACE.ITERS.{cg,out}
run() {
  local mode=$1 trace=$2 iters=$3 env=()
  case $mode in
    direct) ;;
    capture) env=(LD_PRELOAD="$lib" CAPUCHIN_SINK=null CAPUCHIN_DRAIN_US=200) ;;
    exec) env=(LD_PRELOAD="$lib" CAPUCHIN_SINK=null CAPUCHIN_DRAIN_US=200 CAPUCHIN_BUDGET=70GiB) ;;
    pressure) env=(LD_PRELOAD="$lib" CAPUCHIN_SINK=null CAPUCHIN_DRAIN_US=200 CAPUCHIN_BUDGET=0.5x) ;;
    replay) env=(LD_PRELOAD="$lib" CAPUCHIN_SINK=null CAPUCHIN_DRAIN_US=200 CAPUCHIN_BUDGET=70GiB
                 CAPUCHIN_KERNEL_OUTPUTS="$declared") ;;
  esac
  local name=$(basename "$trace" .jsonl.gz)
  env -u LD_PRELOAD LD_LIBRARY_PATH="$stub" CAPUCHIN_LOG=error "${env[@]}" \
    valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$work/$mode.$name.$iters.cg" \
    "$replay" trace "$trace" --iters "$iters" --warmup "$warmup" >"$work/$mode.$name.$iters.out" 2>&1 ||
    { echo "host_cost_instructions: host_replay failed ($mode, $name, $iters iterations):" >&2; tail -5 "$work/$mode.$name.$iters.out" >&2; return 1; }
}

# counts CG MODE: "main N" (the calling thread's instructions), "total N" (every thread's) and
# "<kind> N" lines (inclusive counts of the null driver's cu* entry points in the direct run, of
# libcapuchin.so's hook bodies otherwise). --separate-threads writes CG-01 (the main thread),
# CG-02, ...
counts() {
  local cg=$1 mode=$2 f
  for f in "$cg"-[0-9]*; do awk '/^totals:/ { print "thread", $2 }' "$f"; done
  awk '/^totals:/ { print "main", $2 }' "$cg-01"
  callgrind_annotate --inclusive=yes --threshold=100 "$cg-01" 2>/dev/null | awk -v mode="$mode" '
    {
      n = $1; gsub(",", "", n); if (n !~ /^[0-9]+$/) next
      # "COUNT (PCT)  FILE:NAME(ARGS) [OBJECT]", FILE "???" or a source path (line tables)
      f = $0; sub(/^ *[0-9,]+ +(\([^)]*\) +)?/, "", f); sub(/ \[[^]]*\]$/, "", f)
      sub(/^(\?\?\?|[^:( ]*\.[a-zA-Z]+):/, "", f)
      if (f == "capuchin_finish") { finish += n; next }  # the last drain pass, at exit (below)
      if (mode == "direct") {
        if (index($0, "libcuda.so.1]") == 0 || f !~ /^cu[A-Za-z0-9_]*$/) next
        sub(/^cu/, "", f)
      } else {
        # a hook body itself: not a lambda, template or .cold clone that names one inside it
        if (f !~ /^capuchin::interpose::\(anonymous namespace\)::body_[A-Za-z0-9_]+\([^()]*\)$/) next
        sub(/^.*::body_/, "", f); sub(/\(.*$/, "", f)
      }
      k = ""
      if (f ~ /^MemAlloc/) k = "alloc"; else if (f ~ /^MemFree/) k = "free"
      else if (f ~ /^Launch/) k = "launch"; else if (f ~ /^Mem(cpy|set)/) k = "copy"
      else if (f ~ /Synchronize/) k = "sync"
      if (k != "") sum[k] += n
    }
    END { for (k in sum) print k, sum[k]; print "finish", finish + 0 }'
}

shopt -s nullglob
if [[ -f $traces ]]; then all=("$traces"); else all=("$traces"/*.jsonl.gz); fi  # one trace, or a folder
((${#all[@]} > 0)) || { echo "host_cost_instructions: no traces (*.jsonl.gz) in $traces" >&2; exit 2; }
kinds="alloc free launch copy sync"
modes="direct ${HOST_COST_MODES:-capture exec replay pressure}"
failed=0
short=$((warmup + 2))
long=$((short + steady))
echo "# Instructions added per CUDA call and per steady iteration (valgrind callgrind, null driver;"
echo "# iterations $((short + 1))..$long against $((warmup + 1))..$short; counts, not time)"
printf '%-22s %-9s %9s %9s %9s %9s %9s %14s %14s %14s\n' trace mode alloc free launch copy sync main_instr/it hooks_instr/it other_instr/it
for trace in "${all[@]}"; do
  name=$(basename "$trace" .jsonl.gz)
  ran=1
  for mode in $modes; do
    run "$mode" "$trace" "$short" & p1=$!
    run "$mode" "$trace" "$long" & p2=$!
    wait "$p1" || ran=0
    wait "$p2" || ran=0
  done
  if ((!ran)); then
    echo "host_cost_instructions: $name: a replay failed; no figures for it" >&2
    failed=1
    continue
  fi
  declare -A base=() calls=()
  for k in $kinds; do
    calls[$k]=$(awk -v k="$k" '$1 == "kind" && $2 == k { print $3 }' "$work/direct.$name.$long.out")
  done
  for mode in $modes; do
    declare -A a=() b=()
    while read -r k n; do
      if [[ $k == thread ]]; then a[total]=$(( ${a[total]:-0} + n )); else a[$k]=$n; fi
    done < <(counts "$work/$mode.$name.$short.cg" "$mode")
    while read -r k n; do
      if [[ $k == thread ]]; then b[total]=$(( ${b[total]:-0} + n )); else b[$k]=$n; fi
    done < <(counts "$work/$mode.$name.$long.cg" "$mode")
    if [[ -z ${a[main]:-} || -z ${b[main]:-} ]]; then
      echo "host_cost_instructions: $name ($mode): no per-thread totals in $work/$mode.$name.*.cg-01" >&2
      failed=1
      break
    fi
    line=$(printf '%-22s %-9s' "$name" "$mode")
    hook=0
    for k in $kinds; do
      d=$(( ${b[$k]:-0} - ${a[$k]:-0} ))
      if [[ $mode == direct ]]; then base[$k]=$d; fi
      added=$(( d - ${base[$k]:-0} ))
      hook=$(( hook + added ))
      per=$(awk -v x="$added" -v c="${calls[$k]:-0}" -v s="$steady" -v m="$mode" \
        'BEGIN { if (c == 0 || m == "direct") print "-"; else printf "%.0f", x / (c * s) }')
      line+=$(printf ' %9s' "$per")
      # A hook that added nothing was not found in the counts (renamed, inlined into its entry,
      # not preloaded): no figure.
      if [[ $mode != direct && $(awk -v c="${calls[$k]:-0}" 'BEGIN { print (c > 0) }') == 1 && -z ${b[$k]:-} ]]; then
        echo "host_cost_instructions: no $k hook body counted for $name ($mode): the figures would be vacuous" >&2
        failed=1
      elif [[ $mode != direct && $k == launch && ( $per == - || $per -le 0 ) ]]; then
        echo "host_cost_instructions: no launch hook counted for $name ($mode): the figures would be vacuous" >&2
        failed=1
      fi
    done
    total=$(( ${b[total]} - ${a[total]} ))
    # Less what capuchin_finish did: at exit the calling thread drains what the drain thread had
    # not reached yet, as much as timing left (thousands of events or none).
    main=$(( ${b[main]} - ${b[finish]:-0} - ${a[main]} + ${a[finish]:-0} ))
    if [[ $mode == direct ]]; then base[total]=$total; base[main]=$main; fi
    main_added=$(( main - ${base[main]} ))
    other=$(( total - ${base[total]} - main_added ))
    if [[ $mode == direct ]]; then
      line+=$(printf ' %14s %14s %14s' "$((main / steady)) (program)" - -)
    else
      line+=$(printf ' %14d %14d %14d' $((main_added / steady)) $((hook / steady)) $((other / steady)))
    fi
    echo "$line"
  done
  echo "$name calls per iteration: $(for k in $kinds; do printf '%s %s ' "$k" "${calls[$k]}"; done)"
done
exit $failed
