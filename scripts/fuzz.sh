#!/usr/bin/env bash
# Fuzzes the trace reader with libFuzzer (clang + ASan + UBSan) for SECONDS (default 60),
# starting from tests/fuzz/corpus/trace. Findings land in build/fuzz/findings/.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
scripts/install-deps.sh
CC=clang CXX=clang++ cmake -S . -B build/fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCAPUCHIN_LIBFUZZER=ON -DCAPUCHIN_BUILD_BENCHMARKS=OFF >/dev/null
cmake --build build/fuzz --target fuzz_trace_reader -j "$(nproc)"
mkdir -p build/fuzz/corpus build/fuzz/findings
cp -n tests/fuzz/corpus/trace/* build/fuzz/corpus/
build/fuzz/bin/fuzz_trace_reader -max_total_time="$seconds" -max_len=4096 \
  -artifact_prefix=build/fuzz/findings/ build/fuzz/corpus
