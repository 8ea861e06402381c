#!/usr/bin/env bash
# gpu-check-prepare.sh: `scripts/gpu-check.sh --prepare`: on a development machine with our
# Debian dependencies, builds build/gpu-carry: capuchin, capuchind and libcapuchin.so (RPATH
# $ORIGIN/../lib, with copies of the shared libraries they need beyond the base system; RPATH,
# not RUNPATH, because only RPATH is also searched for those libraries' own needs: the bundled
# libspdlog needs the bundled libfmt) and,
# where nvcc is found, the GPU programs; then checks that they run with those packages hidden.
# Carry build/gpu-carry to the GPU machine with the working tree (the device tool's `carry`).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
# shellcheck source=scripts/gpu-check-programs.sh
. scripts/gpu-check-programs.sh

prepare() {
  local build=build/gpu-carry-build carry=build/gpu-carry
  echo "== building $build (release, RPATH \$ORIGIN/../lib)"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCAPUCHIN_BUILD_TESTS=ON \
        -DCAPUCHIN_BUILD_BENCHMARKS=ON '-DCMAKE_BUILD_RPATH=$ORIGIN/../lib' \
        -DCMAKE_EXE_LINKER_FLAGS=-Wl,--disable-new-dtags -DCMAKE_SHARED_LINKER_FLAGS=-Wl,--disable-new-dtags \
        >/dev/null || return 1
  local targets=(capuchin_cli capuchind capuchin_interpose)
  local gpu_targets=("${GPU_PROGRAMS[@]}")
  cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" || return 1
  if grep -q '^CMAKE_CUDA_COMPILER:[A-Z]*=/' "$build/CMakeCache.txt"; then
    # -k 0: each program on its own; one that does not build is left out (the GPU machine
    # then builds the programs itself, and judges each).
    cmake --build "$build" -j "$(nproc)" --target "${gpu_targets[@]}" -- -k 0 ||
      echo "  (some GPU programs did not build: $(cd "$build/bin" && for t in "${gpu_targets[@]}"; do [ -x "$t" ] || printf '%s ' "$t"; done))"
  else
    echo "  (no nvcc: the GPU programs will be built on the GPU machine)"
  fi
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
  echo "   needs at least $glibc and $glibcxx on the GPU machine (Ubuntu 24.04 has GLIBC_2.39 and GLIBCXX_3.4.33)"
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

prepare
