# shellcheck shell=bash disable=SC2154
# gpu-check-bench.sh (sourced by scripts/gpu-check.sh, step 5): bench/gpu's measurements,
# reported in OUTDIR/launch.md and OUTDIR/bandwidth.md, never judged (a failed run is a row
# that says so). Uses the caller's out, dry, gpu_bin, cap_lib, gpu_name, gpu_state and step.

# --dry writes nothing: its tables go nowhere.
launch_md=$out/launch.md; bandwidth_md=$out/bandwidth.md; calls_md=$out/calls.md
[ "$dry" = 1 ] && { launch_md=/dev/null; bandwidth_md=/dev/null; calls_md=/dev/null; }

launch_row() {  # launch_row LABEL LOG -> "| label | runtime enqueue | total | driver enqueue | total |"
  awk -v l="$1" '/^launch runtime/ {re=$4; rt=$6} /^launch driver/ {de=$4; dt=$6}
                 END {printf "| %s | %s | %s | %s | %s |\n", l, re, rt, de, dt}' "$2"
}

if [ "$dry" = 0 ] && [ "$gpu_state" = old-driver ]; then
  echo "## bench/gpu: not run (driver too old for the toolkit's runtime)" >"$launch_md"
else
  [ "$dry" = 1 ] && echo "  launch cost: bench_gpu_launch (runtime <<<>>> and driver cuLaunchKernel, 7 x 20000 launches) in each configuration:"
  {
    echo "## Per-launch cost on the real driver (measured, ${gpu_name:-GPU}; ns per launch, median of 7 x 20000)"
    echo
    echo "| configuration | runtime <<<>>> enqueue | runtime total | driver cuLaunchKernel enqueue | driver total |"
    echo "| --- | --- | --- | --- | --- |"
  } >"$launch_md"
  configs=("plain|" "preloaded, CAPUCHIN_DISABLE=1|CAPUCHIN_DISABLE=1" "capture on, CAPUCHIN_SINK=null|CAPUCHIN_SINK=null"
           "capture to a trace file|CAPUCHIN_RECORD=$out/launch-trace.jsonl.gz")
  if [ -n "$cap_lib" ] && { [ "$dry" = 1 ] || grep -q CAPUCHIN_DECISION_LOG "$cap_lib"; }; then
    configs+=("executor on, budget 1TiB (no eviction)|CAPUCHIN_SINK=null CAPUCHIN_BUDGET=1TiB")
  fi
  i=0
  for cfg in "${configs[@]}"; do
    label=${cfg%%|*}; envs=${cfg#*|}; log="$out/bench-launch-$i.log"; i=$((i + 1))
    if [ -n "$envs" ] && [ -z "$cap_lib" ]; then continue; fi
    [ "$dry" = 1 ] && echo "  launch: $label"
    # shellcheck disable=SC2086
    if [ "$label" = plain ]; then step "launch $label" 60 "$log" "$gpu_bin/bench_gpu_launch"
    else step "launch $label" 60 "$log" env LD_PRELOAD="$cap_lib" $envs "$gpu_bin/bench_gpu_launch"; fi
    if [ $? -eq 0 ] && [ "$dry" = 0 ]; then launch_row "$label" "$log" >>"$launch_md"
    else echo "| $label | failed: $(basename "$log") | | | |" >>"$launch_md"; fi
  done
  echo >>"$launch_md"
  echo "Enqueue: the host loop alone; total: including the final synchronisation. The interposer's added cost is a row minus \`plain\` (bench/bench_launch_overhead measures it against a stub driver on the CPU)." >>"$launch_md"

  [ "$dry" = 1 ] && echo "  bandwidth: pinned copies, pageable copies, UVM prefetch each way, UVM faults (best of 5):"
  blog="$out/bench-bandwidth.log"
  if step "bandwidth" 90 "$blog" "$gpu_bin/bench_gpu_bandwidth" 256 1024 && [ "$dry" = 0 ]; then
    {
      echo "## Host <-> device bandwidth (measured, ${gpu_name:-GPU}; best of 5, GB/s = 1e9 B/s)"
      echo
      echo "| kind | MiB | GB/s | vs the h200 profile's host link (63 GB/s each way, src/sim/profiles.cpp) |"
      echo "| --- | --- | --- | --- |"
      awk '/^bw / {printf "| %s | %s | %s | %.0f%% |\n", $2, $3, $4, 100 * $4 / 63.0}' "$blog"
      echo
      echo "pinned_*: cudaMemcpyAsync from/to cudaMallocHost memory (the pinned backend); uvm_prefetch_*: cudaMemPrefetchAsync of managed memory (the uvm backend); uvm_fault_h2d: a kernel touching one float per 4 KiB of host-resident managed memory (on-demand migration)."
    } >"$bandwidth_md"
  else
    echo "## Bandwidth: failed (bench-bandwidth.log)" >"$bandwidth_md"
  fi
  [ "$dry" = 1 ] && echo "  driver calls: bench_gpu_calls (host ns per call of each entry point the executor makes; 7 runs, medians)"
  clog="$out/bench-calls.log"
  calls_ok=0
  step "driver calls" 120 "$clog" "$gpu_bin/bench_gpu_calls" && calls_ok=1
  if [ "$dry" = 0 ] && grep -q '^call ' "$clog" 2>/dev/null; then  # the rows it printed, even if it failed later
    {
      echo "## Host time per driver call (measured, ${gpu_name:-GPU}; ns, median of 7 runs)"
      echo
      echo "| entry point | ns per call |"
      echo "| --- | --- |"
      awk '/^call / {printf "| %s | %s |\n", $2, ($3 == "ns" ? $4 : $3)}' "$clog"
      echo
      echo "What prices bench_host_cost's driver-call counts (null driver) on this driver: events and streams idle when asked; the UVM rows move one 64 KiB managed block per call (the discard row is a freed block's discard and its fill at the reuse, per pair)."
      [ "$calls_ok" = 1 ] || echo "The run failed part-way (bench-calls.log): the rows above are those it printed."
    } >"$calls_md"
  elif [ "$dry" = 0 ]; then
    echo "## Driver calls: failed (bench-calls.log)" >"$calls_md"
  fi
  [ "$dry" = 1 ] && echo "    reported in summary.md (measured figures, labelled with the GPU), not judged"
fi
