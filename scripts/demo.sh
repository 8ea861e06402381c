#!/usr/bin/env bash
# The main job: installs dependencies if needed, builds the release preset, and runs the
# most complete thing capuchin can do today: read, check and measure the traces of real
# models (../shared/traces beside the checkout; the bundled resnet18 copy otherwise).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" >/dev/null

traces=()
if compgen -G "../shared/traces/*.jsonl*" >/dev/null; then
  traces=(../shared/traces/*.jsonl*)
else
  echo "(../shared/traces not found: using the bundled copy in tests/data)"
  traces=(tests/data/*.jsonl.gz)
fi

echo "== capuchin trace validate"
build/release/bin/capuchin trace validate "${traces[@]}"
echo
echo "== capuchin trace stats"
build/release/bin/capuchin trace stats "${traces[@]}"
