#!/bin/sh
# exports_test.sh LIB CUDA_INCLUDE_DIR STATIC_CXX_RUNTIME(ON|OFF): the preload hygiene of
# libcapuchin.so. Its dynamic symbol table defines only CUDA entry points declared in cuda.h or
# cuda_runtime_api.h (their _ptsz / _ptds twins by their base name), dlsym and capuchin_*: no C++
# symbol (a standard-library instantiation would interpose on the job's own), nothing versioned.
# With a static C++ runtime, it needs neither libstdc++ nor libgcc_s, and no shared library but
# glibc's and zlib (fmt is used header-only; the trace reader and its simdjson are not linked):
# a C++ library would bring the system libstdc++ into the job.
set -u
lib=$1 inc=$2 static=$3
fails=0
fail() { echo "FAIL - $*"; fails=$((fails + 1)); }

syms=$(nm -D --defined-only "$lib" | awk '{print $3}')
count=0
for s in $syms; do
  count=$((count + 1))
  case $s in
    dlsym | capuchin_*) ;;
    cu*)
      base=${s%_ptsz}; base=${base%_ptds}
      grep -qw "$base" "$inc/cuda.h" "$inc/cuda_runtime_api.h" || fail "$s: exported, not a CUDA entry point" ;;
    *) fail "$s: exported" ;;
  esac
done
echo "exports: $count"
for want in dlsym capuchin_mark_iteration capuchin_finish cuGetProcAddress cuGetProcAddress_v2 cuLaunchKernel \
            cudaLaunchKernel_ptsz cuCtxSynchronize cuCtxSynchronize_v2 cudaMalloc cudaLaunchKernel cudaMemcpy_ptds; do
  printf '%s\n' $syms | grep -qx "$want" || fail "$want: not exported"
done

needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
echo "needed: $(echo $needed)"
if [ "$static" = ON ]; then
  for n in $needed; do
    case $n in
      libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | librt.so.* | ld-linux*.so.* | libz.so.*) ;;
      *) fail "$n: needed (a preloaded library must not load the C++ runtime or another C++ library)" ;;
    esac
  done
fi

[ "$fails" -eq 0 ] && echo "all ok" || { echo "$fails failed"; exit 1; }
