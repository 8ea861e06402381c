#!/usr/bin/env bash
# Installs the Debian packages capuchin builds against. Idempotent: does nothing when
# every package is already installed, runs `apt-get update` at most once otherwise.
# Fails, naming what is missing, when no CUDA toolkit is found (headers are needed even
# on machines without a GPU; nvcc ships with the toolkit).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libboost-dev           # Boost.Asio (header-only)
  libspdlog-dev libfmt-dev nlohmann-json3-dev libcli11-dev zlib1g-dev
  libsimdjson-dev        # the trace reader's JSON parser (speed)
  libgtest-dev libgmock-dev libbenchmark-dev
  clang libclang-rt-14-dev  # libFuzzer for the fuzz targets
  chromium               # headless browser for the HTML report test
  file                   # cpack -G DEB computes Depends with dpkg-shlibdeps, which CPack runs through `file`
  python3-venv           # the pip-install test builds the wheel in a fresh venv
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

cuda_root="${CUDAToolkit_ROOT:-/usr/local/cuda}"
if [ ! -f "$cuda_root/include/cuda.h" ] || [ ! -f "$cuda_root/include/cuda_runtime_api.h" ]; then
  echo "install-deps: ERROR: no CUDA toolkit found at $cuda_root" >&2
  echo "  missing: $cuda_root/include/cuda.h and/or cuda_runtime_api.h" >&2
  echo "  install the CUDA toolkit (13.x) or set CUDAToolkit_ROOT to its prefix." >&2
  exit 1
fi
