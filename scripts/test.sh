#!/usr/bin/env bash
# The project's tests: installs dependencies if needed, builds the `release` and `asan`
# presets, and runs ctest on both (output shown for any failure). Exit status 0 only when
# every test of both builds passed.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
jobs=$(nproc)

for preset in release asan; do
  echo "==== build: $preset ($(date +%T))"
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset" -j "$jobs"
done

status=0
for preset in release asan; do
  echo "==== test: $preset ($(date +%T))"
  ctest --preset "$preset" -j "$jobs" || status=1
done
exit $status
