#!/bin/bash
# sim_mlp_train under an LD_PRELOAD shim that interposes dlsym("cuGetProcAddress_v2") (as a CUDA
# interposer does): both simcuda's libcudart and the simblas vendor library must resolve their
# driver calls through it, and the program's output must not change.
# Usage: sim_mlp_train_spy_test.sh BIN LIBDIR SPY_LIB [sanitized]
set -u
if [ "${4:-}" = sanitized ]; then
  # A preloaded dlsym sits in front of the sanitizer runtime's own dlsym(RTLD_NEXT) lookups at
  # startup, which then resolve relative to the shim and recurse: skip, explicitly.
  echo "SKIP: dlsym interposition conflicts with the sanitizer runtime's interceptors"
  exit 77
fi
BIN=$1
export LD_LIBRARY_PATH=$2
SPY=$3
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
ARGS=(--depth 2 --width 32 --batch 16 --iters 2)
"$BIN" "${ARGS[@]}" > "$TMP/plain.txt" || fail "plain run"
# ASan wants to be first in the library list; the shim only wraps dlsym.
ASAN_OPTIONS=verify_asan_link_order=0 SIMCUDA_SPY_LOG="$TMP/log" LD_PRELOAD="$SPY" "$BIN" "${ARGS[@]}" > "$TMP/spied.txt" ||
  fail "spied run"
cmp -s "$TMP/plain.txt" "$TMP/spied.txt" || fail "output changed under the shim"
for sym in cuInit cuMemAllocAsync cuMemFreeAsync cuMemcpyDtoHAsync cuMemcpyHtoD cuStreamSynchronize \
           cuLaunchKernel simcuda_register_kernel simcuda_function_for_stub; do
  grep -q "^$sym " "$TMP/log" || fail "$sym was not looked up through cuGetProcAddress_v2"
done
# libcudart asks for CUDA 13.0 symbols; simblas (a vendor library built for 12.0) for 12000 ones.
grep -q "^cuLaunchKernel 13000 " "$TMP/log" || fail "no runtime lookup of cuLaunchKernel"
grep -q "^cuLaunchKernel 12000 " "$TMP/log" || fail "no vendor-library lookup of cuLaunchKernel"
grep -q "^cuLaunchKernel 13000 2$" "$TMP/log" || fail "no per-thread (_ptsz) lookup"
echo "PASS: $(wc -l < "$TMP/log") lookups seen"
