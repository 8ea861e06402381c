#!/usr/bin/env bash
# gpu-check.sh: everything that needs a real GPU, in one go, within 9 minutes. A GPU is lent
# rarely, for minutes, once: every step is judged on its own, a failure never stops the run,
# and the PyTorch steps keep a reserve of time that earlier steps cannot use.
#   1. the machine: driver, toolkit, runtime, torch, cuDNN, NCCL versions; device count,
#      concurrentManagedAccess, host-located VMM support (tests/gpu/gpu_info.cu);
#   2. the tests/gpu checks under LD_PRELOAD (capture of runtime, driver and cuBLAS calls,
#      cuFuncGetParamInfo, graphs, CUPTI, cuCtxSynchronize at version 13000; the executor's uvm
#      and pinned backends with forced evictions, missed accesses, an IPC-exported allocation);
#   3. bench/gpu: the interposer's per-launch cost on the real driver; pinned-copy and
#      UVM-prefetch bandwidth each way;
#   4. PyTorch (scripts/gpu_torch_check.py): training plain and under `capuchin run --budget`
#      0.5 and 0.3 of its peak (and a bf16 autocast GPT at 0.5): identical losses AND the
#      executor's own account (it ran, within the budget, evicted, planned, no fallback);
#   5. issue 16 (scripts/gpu_torch_issue16.py): torch.cuda.graph capture under a budget,
#      PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True under a budget, the bf16 GEMM operands
#      the launch scan finds, two torchrun ranks (with 2 GPUs).
#
# Usage:
#   scripts/gpu-check.sh OUTDIR       run everything; OUTDIR/summary.md + logs (+ capuchind.log)
#   scripts/gpu-check.sh --dry        no GPU needed: print every step, its command and its pass
#                                     criteria; run nothing (exit 0)
#   scripts/gpu-check.sh --prepare    (a development machine with our Debian dependencies)
#                                     build build/gpu-carry (scripts/gpu-check-prepare.sh)
# Exit: 0 all ran and passed (REPORT lines are findings, not failures); 1 something failed;
# 77 no GPU here (summary.md says so).
# Environment: GPU_CHECK_LIMIT_S (default 540: one device call may last 600 s), GPU_CHECK_TORCH_RESERVE_S (default 300: kept
# for steps 4 and 5), GPU_CHECK_BACKEND (uvm or pinned, for the PyTorch runs; default uvm),
# GPU_CHECK_PYTHON (the interpreter with PyTorch: a venv's or conda's python; default python3),
# GPU_CHECK_ASSUME_GPU=1 (skip the quick nvidia-smi / /dev/nvidia* look; the CUDA probe decides).
#
# A bare GPU machine (CUDA toolkit 12.x or 13, CMake, python with PyTorch; no Debian -dev
# packages) cannot build capuchin itself (Boost, spdlog, fmt, CLI11, nlohmann-json, simdjson):
# it comes from build/gpu-carry, made beforehand by --prepare and carried with the working tree
# (the device tool's `carry`: ["build/gpu-carry"]). Without it, capuchin is built here if the
# dependencies happen to be there (build/gpu-release), else the capuchin checks are reported
# unavailable and the CUDA-only ones still run. The CUDA programs come from build/gpu-carry/bin
# when all of them run there, else are built here with only the toolkit (tests/gpu is a CMake
# project of its own), each on its own (-k: one that does not compile fails alone).
set -uo pipefail  # not -e: a failing step is recorded, and the run goes on
caller_dir=$(pwd)   # a relative OUTDIR is the caller's
cd "$(dirname "$0")/.." || exit 2
root=$(pwd)
. scripts/gpu-check-lib.sh
. scripts/gpu-check-programs.sh

case "${1:-}" in
  --prepare) exec scripts/gpu-check-prepare.sh ;;
  --dry) dry=1; out=${2:-/tmp/gpu-check-dry} ;;
  ""|-*) echo "usage: scripts/gpu-check.sh OUTDIR | --dry | --prepare" >&2; exit 2 ;;
  *) dry=0; out=$1 ;;
esac
[[ $out = /* ]] || out=$caller_dir/$out
TOTAL_LIMIT_S=${GPU_CHECK_LIMIT_S:-540}
torch_reserve_s=${GPU_CHECK_TORCH_RESERVE_S:-300}
backend=${GPU_CHECK_BACKEND:-uvm}
py=${GPU_CHECK_PYTHON:-python3}
for v in TOTAL_LIMIT_S torch_reserve_s; do
  [[ ${!v} =~ ^[0-9]+$ ]] || { echo "gpu-check.sh: GPU_CHECK_LIMIT_S / GPU_CHECK_TORCH_RESERVE_S must be whole seconds, not '${!v}'" >&2; exit 2; }
done
[ "$torch_reserve_s" -lt "$TOTAL_LIMIT_S" ] || { echo "gpu-check.sh: GPU_CHECK_TORCH_RESERVE_S ($torch_reserve_s) must be below GPU_CHECK_LIMIT_S ($TOTAL_LIMIT_S)" >&2; exit 2; }
case $backend in uvm|pinned) ;; *) echo "gpu-check.sh: GPU_CHECK_BACKEND must be uvm or pinned, not '$backend'" >&2; exit 2 ;; esac
if [ "$dry" = 0 ] && ! command -v "$py" >/dev/null; then
  echo "gpu-check.sh: GPU_CHECK_PYTHON='$py' is not a command here (give the path of a python with PyTorch)" >&2; exit 2
fi
start_s=$SECONDS
reserve_s=$torch_reserve_s   # until the PyTorch steps: they get it
mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)
summary="$out/summary.md"
rows=(); notes=(); facts=()
gpu_name=""; torch_facts=""
failures=0; passes=0; skips=0; reports=0
gpu_from=""; cap_from="not needed"

export PATH="$PATH:/usr/local/cuda/bin"
# The CUDA programs find cudart, cuBLAS and CUPTI here; PyTorch (steps 6, 7) runs with the
# caller's LD_LIBRARY_PATH, so it keeps the CUDA libraries it was built with.
saved_ld_path=${LD_LIBRARY_PATH:-}
for d in "${CUDA_HOME:-/usr/local/cuda}/lib64" "${CUDA_HOME:-/usr/local/cuda}/extras/CUPTI/lib64"; do
  [ -d "$d" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"
done
# A daemon of our own (`capuchin run` starts it beside this socket, its log capuchind.log),
# whose log is copied into OUTDIR however the script ends (trap), and which is stopped at the end.
export CAPUCHIN_SOCKET=/tmp/capuchin-gpucheck-$$/capuchind.sock
save_daemon_log() {  # its log, and the per-session decision logs it keeps beside it
  local d
  d=$(dirname "$CAPUCHIN_SOCKET")
  [ -d "$d/logs" ] && cp -r "$d/logs" "$out/capuchind-logs" 2>/dev/null
  [ -s "$d/capuchind.log" ] && cp "$d/capuchind.log" "$out/capuchind.log"
}
stop_daemon() {  # by the pid the daemon itself reports
  local dpid
  [ -n "$cap_bin" ] && [ -S "$CAPUCHIN_SOCKET" ] || return 0
  dpid=$("$cap_bin" status --json 2>/dev/null | "$py" -c 'import json,sys; print(json.load(sys.stdin).get("pid", ""))' 2>/dev/null)
  [[ $dpid =~ ^[0-9]+$ ]] && kill "$dpid" 2>/dev/null
  return 0
}
[ "$dry" = 0 ] && trap 'save_daemon_log' EXIT

if [ "$dry" = 1 ]; then
  echo "== gpu-check --dry: what \`scripts/gpu-check.sh OUTDIR\` does on a GPU machine, step by step."
  echo "   Nothing is run or built. Total limit ${TOTAL_LIMIT_S} s; ${torch_reserve_s} s kept for the PyTorch steps;"
  echo "   each step runs in a session of its own under \`timeout --kill-after=5\`, and whatever the session"
  echo "   still holds afterwards (the job's process groups, torchrun's workers) is killed."
  echo "   Every check is judged alone: exit 0 PASS, 77/78 SKIP (no GPU / driver too old), 3 REPORT, else FAIL."
fi

# ---- 0. a quick look: no NVIDIA device node and no nvidia-smi -> nothing to build or run
echo "== 0. is there an NVIDIA GPU?"
if [ "$dry" = 1 ]; then
  echo "  run: nvidia-smi -L; ls /dev/nvidia[0-9]*   (neither: summary 'No GPU here', exit 77, in seconds)"
else
  if command -v nvidia-smi >/dev/null; then nvidia-smi -L >"$out/nvidia-smi.log" 2>&1; else echo "no nvidia-smi" >"$out/nvidia-smi.log"; fi
  if [ -z "${GPU_CHECK_ASSUME_GPU:-}" ] && ! nvidia-smi -L >/dev/null 2>&1 && ! ls /dev/nvidia[0-9]* >/dev/null 2>&1; then
    notes+=("- no NVIDIA GPU: nvidia-smi finds none and there is no /dev/nvidia* device ($(head -1 "$out/nvidia-smi.log"))")
    write_summary "No GPU here: nothing was built or run. Run this script on a machine with an NVIDIA GPU (exit 77 = skipped)."
    cat "$summary"
    exit 77
  fi
fi

# ---- 1. capuchin itself ----------------------------------------------------------------
echo "== 1. capuchin (CLI, daemon, libcapuchin.so)"
cap_bin=""; cap_lib=""; cap_from=""
if [ "$dry" = 1 ]; then
  echo "  use build/gpu-carry (made by --prepare and carried) when its capuchin runs; else build build/gpu-release"
  echo "  (neither: the capuchin checks run their programs plain only, the PyTorch steps are SKIP (no capuchin))"
  cap_bin=$root/build/gpu-carry/bin/capuchin; cap_lib=$root/build/gpu-carry/lib/libcapuchin.so
  cap_from="build/gpu-carry (dry run: assumed)"
elif [ -x build/gpu-carry/bin/capuchin ] && build/gpu-carry/bin/capuchin --help >"$out/carry-check.log" 2>&1; then
  cap_bin=$root/build/gpu-carry/bin/capuchin; cap_lib=$root/build/gpu-carry/lib/libcapuchin.so
  cap_from="carried prebuilt build/gpu-carry"
elif [ -x build/gpu-carry/bin/capuchin ]; then
  notes+=("- build/gpu-carry is here but does not run: $(head -c 300 "$out/carry-check.log" | tr '\n' ' ')")
fi
if [ -z "$cap_bin" ]; then
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
echo "== 2. the CUDA programs (tests/gpu, bench/gpu)"
gpu_bin=""
carry_ok=1
for p in "${GPU_PROGRAMS[@]}"; do [ -x "build/gpu-carry/bin/$p" ] || carry_ok=0; done
if [ "$dry" = 0 ] && [ $carry_ok = 1 ]; then
  build/gpu-carry/bin/gpu_param_info >"$out/programs-probe.log" 2>&1
  case $? in  # 0/1: ran on the GPU; 77: ran, no GPU; else (127: a library missing): unusable
    0|1|77) gpu_bin=$root/build/gpu-carry/bin; gpu_from="build/gpu-carry/bin" ;;
    # Built with a newer CUDA than this driver takes: this machine's toolkit may match it.
    78) notes+=("- the carried GPU programs need a newer driver: $(grep -m1 '^SKIP' "$out/programs-probe.log" | head -c 200); rebuilt with this machine's toolkit") ;;
    *) notes+=("- build/gpu-carry/bin/gpu_param_info does not run here: $(head -c 200 "$out/programs-probe.log" | tr '\n' ' ')") ;;
  esac
fi
if [ -z "$gpu_bin" ]; then
  # Ninja or make, each told to keep going (-k): a program that does not compile on this
  # toolkit fails its own check, not the others'.
  if command -v ninja >/dev/null; then gen=(-G Ninja); keep=(-k 0); else gen=(); keep=(-k); fi
  dry_note "all programs are used from build/gpu-carry/bin when all of them are there and run (a driver too old for them: rebuilt); else built here:"
  step "build GPU programs" 240 "$out/build-gpu-programs.log" bash -c \
      "cmake -S tests/gpu -B build/gpu-programs ${gen[*]} -DCMAKE_BUILD_TYPE=Release && cmake --build build/gpu-programs -j $(nproc) -- ${keep[*]}"
  gpu_bin=$root/build/gpu-programs/bin
  built=(); missing=()
  for p in "${GPU_PROGRAMS[@]}"; do if [ -x "$gpu_bin/$p" ]; then built+=("$p"); else missing+=("$p"); fi; done
  gpu_from="built here with the CUDA toolkit only (build/gpu-programs): ${#built[@]} of ${#GPU_PROGRAMS[@]}"
  [ ${#missing[@]} -gt 0 ] && gpu_from+="; NOT built: ${missing[*]} (build-gpu-programs.log)"
  [ "$dry" = 1 ] && gpu_from="(dry run: not looked for) ${GPU_PROGRAMS[*]}"
fi
echo "GPU programs: $gpu_from"

# ---- 3. the machine ------------------------------------------------------------------------
echo "== 3. the machine: versions, managed memory, host VMM"
facts+=("toolkit: $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo 'no nvcc')")
gpu_state=present   # present | none | old-driver | unknown
if [ "$dry" = 1 ]; then
  echo "  run: $gpu_bin/gpu_info (else gpu_param_info): exit 0 GPU present; 77 no GPU (summary, exit 77);"
  echo "       78 driver too old for the toolkit's runtime (reported; the CUDA programs are skipped, PyTorch still runs)"
  echo "  run: nvidia-smi --query-gpu=name,driver_version; $py -c 'torch, torch.version.cuda, cuDNN, NCCL, device count'"
  echo "  summary.md lists: driver, toolkit, runtime, torch, cuDNN, NCCL, devices, concurrentManagedAccess,"
  echo "  pageableMemoryAccess, host NUMA id, HOST_NUMA VMM support, trial cuMemCreate on the host / host NUMA node"
else
  probe=""
  for p in gpu_info gpu_param_info; do [ -x "$gpu_bin/$p" ] && { probe=$p; break; }; done
  if [ -n "$probe" ]; then
    "$gpu_bin/$probe" >"$out/gpu-probe.log" 2>&1
    case $? in 77) gpu_state=none ;; 78) gpu_state=old-driver ;; 0|1) gpu_state=present ;; *) gpu_state=unknown ;; esac
  else
    gpu_state=unknown; echo "no CUDA program to probe with" >"$out/gpu-probe.log"
  fi
  if command -v nvidia-smi >/dev/null; then
    facts+=("nvidia-smi: $(nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader 2>&1 | tr '\n' ';' | head -c 400)")
  fi
  if [ "$probe" = gpu_info ] && [ "$gpu_state" = present ]; then
    facts+=("CUDA (gpu_info): $(sed -n 's/^INFO //p' "$out/gpu-probe.log" | tr '\n' ';' | sed 's/;/; /g' | head -c 600)")
  fi
  [ "$gpu_state" != present ] && facts+=("CUDA probe ($probe): $(grep -m1 -E '^(SKIP|FAIL|INFO)' "$out/gpu-probe.log" | head -c 300)")
  # shellcheck disable=SC2016
  torch_facts=$(LD_LIBRARY_PATH=$saved_ld_path timeout 90 "$py" -c '
import torch
f = ["torch " + torch.__version__, "built for CUDA " + str(torch.version.cuda)]
try: f.append("cuDNN " + str(torch.backends.cudnn.version()))
except Exception as e: f.append("cuDNN ? (%s)" % e)
try: f.append("NCCL " + ".".join(map(str, torch.cuda.nccl.version())))
except Exception as e: f.append("NCCL ? (%s)" % e)
f.append("cuda available %s, %d devices" % (torch.cuda.is_available(), torch.cuda.device_count()))
print("; ".join(f))' 2>"$out/torch-probe.log" || echo "no torch in $py ($(tail -1 "$out/torch-probe.log" | head -c 200))")
  facts+=("python: $py ($("$py" --version 2>&1)); $torch_facts")
  gpu_name=$(grep -m1 -o 'device=[^(]*' "$out/gpu-probe.log" 2>/dev/null | sed 's/device=//; s/ *$//')
  [ -z "$gpu_name" ] && gpu_name=$(grep -m1 -o 'device 0 [^,]*' "$out/gpu-probe.log" 2>/dev/null | sed 's/device 0 //')
  for f in "${facts[@]}"; do echo "  $f"; done
fi
if [ "$gpu_state" = none ] && [[ "$torch_facts" != *"cuda available True"* ]]; then
  notes+=("- $(head -1 "$out/gpu-probe.log" 2>/dev/null)")
  write_summary "No GPU usable by CUDA here: the programs were built but exit 77 (skipped); nothing ran on a GPU."
  cat "$summary"
  exit 77
fi
if [ "$gpu_state" = old-driver ]; then
  notes+=("- **driver too old** for the toolkit's CUDA runtime: $(grep -m1 '^SKIP' "$out/gpu-probe.log" | head -c 300). The CUDA programs are skipped; PyTorch (its own runtime) still runs.")
fi

# ---- 4. the tests/gpu checks -----------------------------------------------------------------
echo "== 4. tests/gpu under libcapuchin.so (each: plain first, then preloaded)"
export GPU_BIN=$gpu_bin CAPUCHIN_LIB=$cap_lib CAPUCHIN_CLI=$cap_bin PYTHON=$py
capture_crit="the program passes plain and under LD_PRELOAD (CAPUCHIN_RECORD); identical CHECKSUM lines; \`capuchin trace validate\` accepts the trace; the trace holds the program's EXPECT lines"
exec_crit="the program passes plain and under CAPUCHIN_BUDGET=200 MiB; identical CHECKSUM lines; the decision log shows evictions and swap-ins; the executor summary's peak_resident <= the budget; pinned cases: the summary says backend=pinned"
for c in capture capture_static param_info graph cupti sync13 checksum evict_uvm evict_pinned missed_uvm missed_pinned ipc_uvm ipc_pinned infer_uvm infer_pinned; do
  log="$out/check-$c.log"
  case $c in
    checksum) crit="$capture_crit; the probation's checksum kernels (checksum_kernels.cuh) agree with the host's checksum for aligned, unaligned, odd and empty ranges up to 64 MiB under 4 launch geometries; a flipped bit changes it; the complement kernel flips exactly its range and undoes itself" ;;
    sync13) crit="$capture_crit; cudaDeviceSynchronize, and cuCtxSynchronize asked at version 13000 (explicit and NULL context) and 12000, each wait for a 20 ms kernel" ;;
    ipc_*) crit="$exec_crit; either cudaIpcGetMemHandle succeeds, another process opens the handle after pressure and sees the current content, its write is seen back and the buffer stays device memory (never moved), or the driver refuses it for the managed/VMM memory capuchin serves and capuchin says why" ;;
    evict_*|missed_*) crit=$exec_crit ;;
    infer_*) crit="$exec_crit; nothing declared: the cuBLAS SGEMM and the elementwise kernel judged replayable, the timer kernel not-deterministic, the atomics kernel never replayable (decision log verdicts); the probations checksummed on the device (the summary says checksum=device: the embedded PTX loaded)" ;;
    *) crit=$capture_crit ;;
  esac
  case $c in evict_*|missed_*|ipc_*) prog=gpu_executor ;; infer_*) prog=gpu_infer ;; *) prog=gpu_$c ;; esac
  if [ "$dry" = 0 ] && [ "$gpu_state" = old-driver ]; then
    record "$c" "SKIP (driver too old)" "the toolkit's runtime needs a newer driver" "$out/gpu-probe.log"; continue
  fi
  if [ "$dry" = 0 ] && [ ! -x "$gpu_bin/$prog" ]; then
    record "$c" FAIL "$prog was not built (build-gpu-programs.log)" "$out/build-gpu-programs.log"; continue
  fi
  if [ "$dry" = 0 ] && [ -z "$cap_lib" ]; then  # the program alone still proves the GPU side
    case $c in evict_*|missed_*|ipc_*) args=("${c%%_*}") ;; *) args=() ;; esac
    check "$c" 90 "$log" "the program passes plain (no libcapuchin.so to check it under)" "$gpu_bin/$prog" "${args[@]}"
    continue
  fi
  check "$c" 90 "$log" "$crit" sh tests/gpu/run_check.sh "$c" "$out/check-$c"
done

# ---- 5. per-launch overhead, bandwidth ------------------------------------------------------
echo "== 5. bench/gpu: per-launch cost, bandwidth (measured; reported, not judged)"
. scripts/gpu-check-bench.sh

# ---- 6. PyTorch ------------------------------------------------------------------------------
echo "== 6. PyTorch training under capuchin run"
reserve_s=0   # the reserve is for these steps
export LD_LIBRARY_PATH=$saved_ld_path
have_torch=1
if [ "$dry" = 0 ] && [[ "$torch_facts" != *"cuda available True"* ]]; then have_torch=0; fi
torch_step() {  # torch_step NAME LIMIT CRITERIA cmd...: a PyTorch check, or its SKIP without torch / capuchin
  if [ "$dry" = 0 ] && [ $have_torch = 0 ]; then record "$1" SKIP "no CUDA-enabled torch in $py ($torch_facts)" "$out/torch-probe.log"; return; fi
  if [ "$dry" = 0 ] && [ -z "$cap_bin" ]; then record "$1" "SKIP (no capuchin)" "capuchin run unavailable" "$out/torch-probe.log"; return; fi
  check "$@"
}
# Step 7's checks need about i16_s; this one may use the rest (it leaves out, never cuts short,
# the runs that no longer fit: --deadline).
i16_s=170
t_main=$(( $(remaining) - 15 - i16_s )); [ $t_main -lt 120 ] && t_main=120
per_run=$(( t_main / 3 )); [ $per_run -gt 90 ] && per_run=90
dry_note "limit: what is left of the total minus ${i16_s} s for step 7 (at least 120 s); each run at most min(90, limit / 3) s"
torch_step pytorch "$t_main" "$out/torch-check.log" \
  "each model (resnet, gpt; gpt-bf16 = gpt under autocast bf16) runs plain, then under capuchin run at 0.5 and 0.3 of its plain peak (gpt-bf16: 0.5; every first budget before any second; runs that no longer fit are left out, listed): exit 0, losses bit-identical to plain, the executor summary present with the requested budget, peak_resident <= budget, evictions > 0, plans and planned iterations > 0, fallbacks 0" \
  "$py" scripts/gpu_torch_check.py --capuchin "$cap_bin" --out "$out" --timeout "$per_run" --deadline $(( t_main - 10 )) \
  --backend "$backend" --python "$py" --models resnet gpt gpt-bf16

# ---- 7. issue 16 ---------------------------------------------------------------------------------
echo "== 7. issue 16: graph capture, expandable segments, bf16 GEMM scan, torchrun ranks"
i16() {  # i16 NAME LIMIT_S RUN_S CRITERIA: one check of scripts/gpu_torch_issue16.py, each of its runs at most RUN_S
  torch_step "i16-$1" "$2" "$out/i16-$1.log" "$4" \
    "$py" scripts/gpu_torch_issue16.py "$1" --capuchin "$cap_bin" --out "$out/i16" --timeout "$3" \
    --backend "$backend" --python "$py"
}
# graph, expandable, bf16-scan: a plain run then a managed one; ranks: one torchrun.
i16 graph 60 28 "torch.cuda.graph (global capture mode) of a training step after eager pressure, under a budget of 0.5 x the plain peak: the job completes, no capture invalidated, 8 replayed losses and all parameters bit-identical to plain, the executor summary present with peak_resident <= budget"
i16 expandable 64 30 "the job sets PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True under capuchin run --budget 0.5 x peak: losses identical to plain, and the budget held (executor peak <= budget, sampled use <= budget + the plain run's non-tensor overhead) or capuchin warned about expandable segments"
i16 bf16-scan 44 20 "bf16 matmul and autocast F.linear under capuchin run --record (the trace holds what the launch scan found): results bit-identical to plain; REPORT (not FAIL) which GEMM operands the recorded launches touched and which the launch scan missed (TMA descriptors)"
i16 ranks 60 50 "with >= 2 GPUs (else SKIP '1 GPU'): capuchin run -- torchrun --nproc-per-node 2: both ranks complete, capuchin sessions shows one session per rank pid, distinct, each on the rank's device"

# ---- the end: the daemon's log, the daemon stopped, the verdict -------------------------------
if [ "$dry" = 1 ]; then
  echo "== end: copy the daemon's log ($(dirname "$CAPUCHIN_SOCKET")/capuchind.log) to OUTDIR/capuchind.log; stop that daemon (by its pid from capuchin status); write OUTDIR/summary.md (the machine, a PASS/FAIL/SKIP/REPORT row per check, the launch, bandwidth and PyTorch tables)"
  echo "== dry run: nothing was run; exit 0"
  exit 0
fi
stop_daemon
save_daemon_log && notes+=("- the daemon's log: capuchind.log") ||
  notes+=("- no daemon log at $(dirname "$CAPUCHIN_SOCKET")/capuchind.log (no capuchin run started one)")
verdict="$passes passed, $failures failed, $skips skipped, $reports reported"
if [ $failures -eq 0 ]; then write_summary "ALL RAN: $verdict"; else write_summary "FAILURES: $verdict"; fi
cat "$summary"
[ $failures -eq 0 ]
