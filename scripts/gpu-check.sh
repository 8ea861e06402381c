#!/usr/bin/env bash
# gpu-check.sh: everything that needs a real GPU, in one go, within 8 minutes: the tests/gpu
# checks (capture of runtime, driver and cuBLAS calls under LD_PRELOAD, cuFuncGetParamInfo,
# graphs, CUPTI, the executor's uvm and pinned backends with forced evictions and missed
# accesses), the bench/gpu figures (the interposer's per-launch cost on the real driver;
# pinned-copy vs UVM-prefetch bandwidth each way, against the simulator's h200 profile) and
# the PyTorch training comparison (scripts/gpu_torch_check.py: plain, and under
# `capuchin run --budget` 0.5 and 0.3 of its peak).
#
# Usage:
#   scripts/gpu-check.sh OUTDIR           run everything; OUTDIR/summary.md + logs
#   scripts/gpu-check.sh --prepare        (on a development machine with our Debian
#                                         dependencies) build build/gpu-carry: see below
# Exit: 0 all ran and passed; 1 something failed; 77 no GPU here (summary.md says so).
# Environment: GPU_CHECK_LIMIT_S (default 480), GPU_CHECK_BACKEND (uvm or pinned, for the
# PyTorch runs; default uvm), GPU_CHECK_ASSUME_GPU=1 (skip the quick nvidia-smi / /dev/nvidia*
# look; the CUDA probe decides).
#
# A bare GPU machine (CUDA toolkit, CMake, python3 with PyTorch; no Debian -dev packages, no
# package registry) cannot build capuchin itself (it needs Boost, spdlog, fmt, CLI11,
# nlohmann-json, simdjson). So:
#  * capuchin (bin/capuchin, bin/capuchind, lib/libcapuchin.so) comes from build/gpu-carry,
#    made beforehand by `scripts/gpu-check.sh --prepare` on a development machine: a release
#    build whose binaries have RUNPATH $ORIGIN/../lib and whose lib/ holds copies of the
#    shared libraries they need beyond glibc, libstdc++, libgcc_s and zlib (libfmt,
#    libspdlog, libsimdjson), checked to run with those packages hidden. It is a few MiB:
#    carry it to the GPU machine with the working tree (the device tool's `carry`:
#    ["build/gpu-carry"]). Without it, the script builds capuchin normally if the
#    dependencies happen to be there (build/gpu-release), else reports the capuchin checks
#    as unavailable and still runs the CUDA-only ones.
#  * the CUDA programs (tests/gpu, bench/gpu) are taken from build/gpu-carry/bin when they run
#    there, else built on the spot with only the CUDA toolkit: tests/gpu is a CMake project
#    of its own (cmake -S tests/gpu -B build/gpu-programs).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
TOTAL_LIMIT_S=${GPU_CHECK_LIMIT_S:-480}   # the hard limit: 8 minutes for everything
start_s=$SECONDS

# ---- --prepare: the carried build -------------------------------------------------------
prepare() {
  local build=build/gpu-carry-build carry=build/gpu-carry
  echo "== building $build (release, RUNPATH \$ORIGIN/../lib)"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCAPUCHIN_BUILD_TESTS=ON \
        -DCAPUCHIN_BUILD_BENCHMARKS=ON '-DCMAKE_BUILD_RPATH=$ORIGIN/../lib' >/dev/null || return 1
  local targets=(capuchin_cli capuchind capuchin_interpose)
  local gpu_targets=(gpu_capture gpu_capture_static gpu_param_info gpu_graph gpu_executor gpu_cupti
                     bench_gpu_launch bench_gpu_bandwidth)
  if grep -q '^CMAKE_CUDA_COMPILER:[A-Z]*=/' "$build/CMakeCache.txt"; then
    targets+=("${gpu_targets[@]}")
  else
    echo "  (no nvcc: the GPU programs will be built on the GPU machine)"
  fi
  cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" || return 1
  rm -rf "$carry"
  mkdir -p "$carry/bin" "$carry/lib"
  cp "$build/bin/capuchin" "$build/bin/capuchind" "$carry/bin/"
  cp "$build/lib/libcapuchin.so" "$carry/lib/"
  for t in "${gpu_targets[@]}"; do [ -x "$build/bin/$t" ] && cp "$build/bin/$t" "$carry/bin/"; done
  # Shared libraries beyond the base system: copied beside them (found through $ORIGIN/../lib).
  local base_re='/(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|libz|ld-linux-x86-64)\.so'
  ldd "$carry/bin/capuchin" "$carry/bin/capuchind" "$carry/lib/libcapuchin.so" 2>/dev/null |
    awk '/=> \// {print $3}' | sort -u | grep -v -E "$base_re" | grep -v -E 'libcud|libcublas|libcupti' |
    while read -r so; do cp -L "$so" "$carry/lib/"; done
  strip --strip-unneeded "$carry"/bin/* "$carry"/lib/*.so* 2>/dev/null
  echo "== $carry: $(du -sh "$carry" | cut -f1); bundled: $(cd "$carry/lib" && ls | grep -v libcapuchin | tr '\n' ' ')"
  local glibc glibcxx
  glibc=$(objdump -T "$carry"/bin/* "$carry"/lib/*.so* 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
  glibcxx=$(objdump -T "$carry"/bin/* "$carry"/lib/*.so* 2>/dev/null | grep -o 'GLIBCXX_[0-9.]*' | sort -uV | tail -1)
  echo "   needs at least $glibc and $glibcxx on the GPU machine (Ubuntu 22.04 and later have both)"
  prepare_verify "$carry"
}

# Runs the carried binaries with our Debian packages hidden (a private mount namespace where
# their headers and shared libraries are replaced by empty files), as on a bare machine.
prepare_verify() {
  local carry=$1 hide=()
  for f in /usr/include/fmt /usr/include/spdlog /usr/include/boost /usr/include/nlohmann /usr/include/CLI \
           /usr/include/simdjson.h /usr/lib/x86_64-linux-gnu/libfmt.so* /usr/lib/x86_64-linux-gnu/libspdlog.so* \
           /usr/lib/x86_64-linux-gnu/libsimdjson.so*; do
    [ -e "$f" ] && hide+=("$f")
  done
  if ! unshare -rm true 2>/dev/null; then
    echo "   (cannot hide packages here: no user mount namespace; ldd check only)"
    ldd "$carry"/bin/capuchin "$carry"/bin/capuchind "$carry"/lib/libcapuchin.so | grep -q 'not found' && return 1
    return 0
  fi
  # shellcheck disable=SC2016
  unshare -rm bash -c '
    set -e
    for f in "$@"; do
      if [ -d "$f" ]; then mount -t tmpfs none "$f"; else mount --bind /dev/null "$f"; fi
    done
    c='"$carry"'
    test ! -s /usr/lib/x86_64-linux-gnu/libfmt.so.9 || { echo "hiding failed"; exit 1; }
    "$c/bin/capuchin" --help >/dev/null
    "$c/bin/capuchind" --help >/dev/null
    LD_PRELOAD="$PWD/$c/lib/libcapuchin.so" CAPUCHIN_SINK=null sh -c "echo preload-ok" | grep -q preload-ok
    echo "   verified with fmt, spdlog, simdjson, Boost, CLI11, nlohmann-json hidden: capuchin, capuchind and libcapuchin.so load and run"
  ' _ "${hide[@]}"
}

if [ "${1:-}" = "--prepare" ]; then
  prepare
  exit $?
fi

out=${1:?usage: scripts/gpu-check.sh OUTDIR (or --prepare)}
mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)
summary="$out/summary.md"
rows=()        # check table rows
notes=()       # lines for the summary
failures=0; passes=0; skips=0

remaining() { echo $(( TOTAL_LIMIT_S - (SECONDS - start_s) )); }
# step NAME LIMIT_S LOG cmd...: runs cmd under `timeout` (its limit, or what is left of the
# total minus a reserve for the summary); output to LOG. Returns cmd's status, 124 on timeout,
# 125 when no time is left.
step() {
  local name=$1 limit=$2 log=$3; shift 3
  local left=$(( $(remaining) - 15 ))
  if [ "$left" -le 5 ]; then echo "out of time before: $name" >"$log"; return 125; fi
  [ "$limit" -gt "$left" ] && limit=$left
  local t0=$SECONDS
  timeout --kill-after=5 "$limit" "$@" >"$log" 2>&1
  local rc=$?
  echo "  $name: exit $rc in $((SECONDS - t0)) s (limit $limit s)"
  return $rc
}
record() {  # record CHECK STATUS DETAIL LOG
  rows+=("| $1 | $2 | $3 | $(basename "$4") |")
  case $2 in PASS) passes=$((passes + 1)) ;; SKIP*) skips=$((skips + 1)) ;; *) failures=$((failures + 1)) ;; esac
  echo "$2 $1: $3"
}

export PATH="$PATH:/usr/local/cuda/bin"
# The CUDA programs find cudart, cuBLAS and CUPTI here; PyTorch (step 7) runs with the caller's
# LD_LIBRARY_PATH, so it keeps the CUDA libraries it was built with.
saved_ld_path=${LD_LIBRARY_PATH:-}
for d in "${CUDA_HOME:-/usr/local/cuda}/lib64" "${CUDA_HOME:-/usr/local/cuda}/extras/CUPTI/lib64"; do
  [ -d "$d" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"
done

echo "== gpu-check: logs in $out (limit ${TOTAL_LIMIT_S} s)"
if command -v nvidia-smi >/dev/null; then nvidia-smi -L >"$out/nvidia-smi.log" 2>&1; else echo "no nvidia-smi" >"$out/nvidia-smi.log"; fi
nvcc_version=$(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo "no nvcc")
torch_info="not probed"
gpu_name=""; cap_from="not needed"; gpu_from="not needed"

write_summary() {
  {
    echo "# capuchin GPU check"
    echo
    echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(hostname); GPU: ${gpu_name:-none}; nvcc: $nvcc_version; torch: $torch_info;"
    echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'); $((SECONDS - start_s)) s of the ${TOTAL_LIMIT_S} s limit."
    echo
    echo "**$1**"
    echo
    echo "- capuchin: $cap_from"
    echo "- GPU programs: ${gpu_from:-none}"
    for n in "${notes[@]}"; do echo "$n"; done
    if [ ${#rows[@]} -gt 0 ]; then
      echo
      echo "## Checks"
      echo
      echo "| check | result | detail | log |"
      echo "| --- | --- | --- | --- |"
      for r in "${rows[@]}"; do echo "$r"; done
    fi
    for part in launch.md bandwidth.md torch.md; do
      [ -s "$out/$part" ] && { echo; cat "$out/$part"; }
    done
  } >"$summary"
  echo "== summary: $summary"
}

# ---- 0. a quick look: no NVIDIA device node and no nvidia-smi -> nothing to build or run
if [ -z "${GPU_CHECK_ASSUME_GPU:-}" ] && ! nvidia-smi -L >/dev/null 2>&1 && ! ls /dev/nvidia[0-9]* >/dev/null 2>&1; then
  notes+=("- no NVIDIA GPU: nvidia-smi finds none and there is no /dev/nvidia* device ($(head -1 "$out/nvidia-smi.log"))")
  write_summary "No GPU here: nothing was built or run. Run this script on a machine with an NVIDIA GPU (exit 77 = skipped)."
  cat "$summary"
  exit 77
fi

torch_info=$(timeout 60 python3 -c 'import torch; print(torch.__version__, "cuda" if torch.cuda.is_available() else "no-cuda")' 2>/dev/null || echo "no torch")

# ---- 1. capuchin itself ----------------------------------------------------------------
cap_bin=""; cap_lib=""; cap_from=""
if [ -x build/gpu-carry/bin/capuchin ] && build/gpu-carry/bin/capuchin --help >"$out/carry-check.log" 2>&1; then
  cap_bin=$root/build/gpu-carry/bin/capuchin; cap_lib=$root/build/gpu-carry/lib/libcapuchin.so
  cap_from="carried prebuilt build/gpu-carry"
elif [ -x build/gpu-carry/bin/capuchin ]; then
  notes+=("- build/gpu-carry is here but does not run: $(head -c 300 "$out/carry-check.log" | tr '\n' ' ')")
fi
if [ -z "$cap_bin" ]; then
  echo "== building capuchin (release) in build/gpu-release"
  if step "build capuchin" 300 "$out/build-capuchin.log" bash -c \
      "cmake -S . -B build/gpu-release -G Ninja -DCMAKE_BUILD_TYPE=Release -DCAPUCHIN_BUILD_TESTS=OFF -DCAPUCHIN_BUILD_BENCHMARKS=OFF \
       && cmake --build build/gpu-release -j $(nproc) --target capuchin_cli capuchind capuchin_interpose"; then
    cap_bin=$root/build/gpu-release/bin/capuchin; cap_lib=$root/build/gpu-release/lib/libcapuchin.so
    cap_from="built here (build/gpu-release)"
  else
    cap_from="unavailable: no carried build/gpu-carry and it cannot be built here ($(grep -m1 -E 'Could NOT find|CMake Error|error' "$out/build-capuchin.log" | head -c 200))"
  fi
fi
echo "capuchin: $cap_from"

# ---- 2. the CUDA programs ----------------------------------------------------------------
gpu_bin=""; gpu_from=""
for d in build/gpu-carry/bin build/gpu-release/bin; do
  [ -x "$d/gpu_param_info" ] || continue
  "$d/gpu_param_info" >"$out/programs-probe.log" 2>&1
  case $? in  # 0/1: ran on the GPU; 77: ran, no GPU; anything else (127: a library missing): unusable
    0|1|77) gpu_bin=$root/$d; gpu_from="$d"; break ;;
    *) notes+=("- $d/gpu_param_info does not run here: $(head -c 200 "$out/programs-probe.log" | tr '\n' ' ')") ;;
  esac
done
if [ -z "$gpu_bin" ]; then
  echo "== building the GPU programs with the CUDA toolkit only (build/gpu-programs)"
  if step "build GPU programs" 240 "$out/build-gpu-programs.log" bash -c \
      "cmake -S tests/gpu -B build/gpu-programs -DCMAKE_BUILD_TYPE=Release && cmake --build build/gpu-programs -j $(nproc)"; then
    gpu_bin=$root/build/gpu-programs/bin; gpu_from="built here with the CUDA toolkit only (build/gpu-programs)"
  else
    gpu_from="unavailable: the build failed (build-gpu-programs.log)"
  fi
fi
echo "GPU programs: $gpu_from"

# ---- 3. is there a GPU? ------------------------------------------------------------------
if [ -z "$gpu_bin" ]; then
  write_summary "FAILED: the GPU programs could not be built (see build-gpu-programs.log)."
  exit 1
fi
gpu_state="none"
if [ -n "$gpu_bin" ]; then
  "$gpu_bin/gpu_param_info" >"$out/gpu-probe.log" 2>&1
  [ $? -ne 77 ] && gpu_state="present"
  gpu_name=$(grep -m1 -o 'device 0 [^,]*' "$out/gpu-probe.log" | sed 's/device 0 //')
fi
if [ "$gpu_state" = "none" ]; then
  notes+=("- $(head -1 "$out/gpu-probe.log" 2>/dev/null)")
  write_summary "No GPU usable by CUDA here: the programs were built but exit 77 (skipped); nothing ran on a GPU."
  cat "$summary"
  exit 77
fi

# ---- 4. the checks -----------------------------------------------------------------------
echo "== checks on ${gpu_name:-the GPU}"
export GPU_BIN=$gpu_bin CAPUCHIN_LIB=$cap_lib CAPUCHIN_CLI=$cap_bin
for c in capture capture_static param_info graph cupti evict_uvm evict_pinned missed_uvm missed_pinned; do
  log="$out/check-$c.log"
  if [ -z "$cap_lib" ]; then  # the program alone still proves the GPU side
    case $c in evict_*|missed_*) prog=(gpu_executor "${c%%_*}") ;; *) prog=("gpu_$c") ;; esac
    "$gpu_bin/${prog[0]}" "${prog[@]:1}" >"$log" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then record "$c" "SKIP (no capuchin)" "the program passes plain; no libcapuchin.so to check it under" "$log"
    else record "$c" FAIL "the program itself fails (exit $rc) without capuchin" "$log"; fi
    continue
  fi
  step "check $c" 90 "$log" sh tests/gpu/run_check.sh "$c" "$out/check-$c"
  rc=$?
  detail=$(grep -E '^(FAIL|SKIP)' "$log" | head -2 | sed -E "s/^(FAIL|SKIP) $c: //" | tr '|' '/' | tr '\n' ' ')
  [ -z "$detail" ] && detail=$(grep -E '^(PASS|INFO)' "$log" | grep -v '^INFO gpu' | tail -2 | tr '|' '/' | tr '\n' ' ')
  case $rc in
    0) record "$c" PASS "$detail" "$log" ;;
    77) record "$c" "SKIP" "$detail" "$log" ;;
    124|137) record "$c" "FAIL (timeout)" "$detail" "$log" ;;
    125) record "$c" "NOT RUN (out of time)" "" "$log" ;;
    *) record "$c" FAIL "$detail" "$log" ;;
  esac
done

# ---- 5. per-launch overhead ----------------------------------------------------------------
echo "== launch overhead"
launch_row() {  # launch_row LABEL LOG -> "| label | runtime enqueue | total | driver enqueue | total |"
  awk -v l="$1" '/^launch runtime/ {re=$4; rt=$6} /^launch driver/ {de=$4; dt=$6}
                 END {printf "| %s | %s | %s | %s | %s |\n", l, re, rt, de, dt}' "$2"
}
{
  echo "## Per-launch cost on the real driver (measured, ${gpu_name:-GPU}; ns per launch, median of 7 x 20000)"
  echo
  echo "| configuration | runtime <<<>>> enqueue | runtime total | driver cuLaunchKernel enqueue | driver total |"
  echo "| --- | --- | --- | --- | --- |"
} >"$out/launch.md"
configs=("plain|" "preloaded, CAPUCHIN_DISABLE=1|CAPUCHIN_DISABLE=1" "capture on, CAPUCHIN_SINK=null|CAPUCHIN_SINK=null"
         "capture to a trace file|CAPUCHIN_RECORD=$out/launch-trace.jsonl.gz")
if [ -n "$cap_lib" ] && grep -q CAPUCHIN_DECISION_LOG "$cap_lib"; then
  configs+=("executor on, budget 1TiB (no eviction)|CAPUCHIN_SINK=null CAPUCHIN_BUDGET=1TiB")
fi
i=0
for cfg in "${configs[@]}"; do
  label=${cfg%%|*}; envs=${cfg#*|}; log="$out/bench-launch-$i.log"; i=$((i + 1))
  if [ -n "$envs" ] && [ -z "$cap_lib" ]; then continue; fi
  if [ "$label" = plain ]; then step "launch $label" 60 "$log" "$gpu_bin/bench_gpu_launch"
  else step "launch $label" 60 "$log" env LD_PRELOAD="$cap_lib" $envs "$gpu_bin/bench_gpu_launch"; fi
  [ $? -eq 0 ] && launch_row "$label" "$log" >>"$out/launch.md" || echo "| $label | failed: $(basename "$log") | | | |" >>"$out/launch.md"
done
echo >>"$out/launch.md"
echo "Enqueue: the host loop alone; total: including the final synchronisation. The interposer's added cost is a row minus \`plain\` (bench/bench_launch_overhead measures it against a stub driver on the CPU)." >>"$out/launch.md"

# ---- 6. bandwidth ----------------------------------------------------------------------------
echo "== bandwidth"
blog="$out/bench-bandwidth.log"
if step "bandwidth" 90 "$blog" "$gpu_bin/bench_gpu_bandwidth" 256 1024; then
  {
    echo "## Host <-> device bandwidth (measured, ${gpu_name:-GPU}; best of 5, GB/s = 1e9 B/s)"
    echo
    echo "| kind | MiB | GB/s | vs the h200 profile's host link (63 GB/s each way, src/sim/profiles.cpp) |"
    echo "| --- | --- | --- | --- |"
    awk '/^bw / {printf "| %s | %s | %s | %.0f%% |\n", $2, $3, $4, 100 * $4 / 63.0}' "$blog"
    echo
    echo "pinned_*: cudaMemcpyAsync from/to cudaMallocHost memory (the pinned backend); uvm_prefetch_*: cudaMemPrefetchAsync of managed memory (the uvm backend); uvm_fault_h2d: a kernel touching one float per 4 KiB of host-resident managed memory (on-demand migration)."
  } >"$out/bandwidth.md"
else
  echo "## Bandwidth: failed (bench-bandwidth.log)" >"$out/bandwidth.md"
fi

# ---- 7. PyTorch ----------------------------------------------------------------------------
echo "== PyTorch"
export LD_LIBRARY_PATH=$saved_ld_path
tlog="$out/torch-check.log"
if [ "$torch_info" = "no torch" ] || [ "${torch_info#* }" != "cuda" ]; then
  record "pytorch" "SKIP" "python3 has no CUDA-enabled torch ($torch_info)" "$tlog"
elif [ -z "$cap_bin" ]; then
  record "pytorch" "SKIP (no capuchin)" "capuchin run unavailable" "$tlog"
else
  export CAPUCHIN_SOCKET=/tmp/capuchin-gpucheck-$$/capuchind.sock  # a daemon of its own (capuchin run starts it)
  left=$(( $(remaining) - 25 ))
  per_run=$(( left / 6 )); [ $per_run -gt 120 ] && per_run=120
  step "pytorch" "$left" "$tlog" python3 scripts/gpu_torch_check.py --capuchin "$cap_bin" --out "$out" \
       --timeout "$per_run" --backend "${GPU_CHECK_BACKEND:-uvm}"
  rc=$?
  detail=$(grep -E '^(PASS|FAIL)' "$tlog" | awk '{print $1, $3, $4, $5}' | tr '\n' ';' | head -c 400)
  case $rc in
    0) record "pytorch" PASS "$detail" "$tlog" ;;
    77) record "pytorch" SKIP "torch sees no GPU" "$tlog" ;;
    124|137) record "pytorch" "FAIL (timeout)" "$detail" "$tlog" ;;
    *) record "pytorch" FAIL "$detail" "$tlog" ;;
  esac
fi

verdict="$passes passed, $failures failed, $skips skipped"
if [ $failures -eq 0 ]; then write_summary "ALL RAN: $verdict"; else write_summary "FAILURES: $verdict"; fi
cat "$summary"
[ $failures -eq 0 ]
