#!/usr/bin/env bash
# scripts/fuzz.sh [SECONDS] [TARGET...]: libFuzzer (clang, ASan, UBSan; the libraries are
# instrumented too) on each fuzz target for SECONDS (default 60): trace (the trace reader),
# proto (the daemon's frame decoding and session ingestion), query (its JSON request handler).
# Each starts from tests/fuzz/corpus/<target> (proto: seeds this build encodes, fuzz_proto_seeds);
# findings land in build/fuzz/findings/<target>/.
# Exit 0 only if no target found anything.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(trace proto query)
scripts/install-deps.sh
CC=clang CXX=clang++ cmake -S . -B build/fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCAPUCHIN_LIBFUZZER=ON -DCAPUCHIN_BUILD_BENCHMARKS=OFF >/dev/null
declare -A binary=([trace]=fuzz_trace_reader [proto]=fuzz_proto [query]=fuzz_query)
# Inputs long enough for what each parses: deep JSON nesting, several frames of events.
declare -A max_len=([trace]=4096 [proto]=65536 [query]=262144)
for t in "${targets[@]}"; do cmake --build build/fuzz --target "${binary[$t]}" -j "$(nproc)"; done
[[ " ${targets[*]} " == *" proto "* ]] && cmake --build build/fuzz --target fuzz_proto_seeds -j "$(nproc)"
status=0
for t in "${targets[@]}"; do
  corpus=build/fuzz/corpus/$t findings=build/fuzz/findings/$t
  mkdir -p "$corpus" "$findings"
  if [[ $t == proto ]]; then build/fuzz/bin/fuzz_proto_seeds "$corpus"; else cp -n tests/fuzz/corpus/"$t"/* "$corpus"/; fi
  echo "==== fuzz $t for ${seconds}s"
  if ! build/fuzz/bin/"${binary[$t]}" -max_total_time="$seconds" -max_len="${max_len[$t]}" -timeout=20 -rss_limit_mb=4096 \
      -artifact_prefix="$findings"/ "$corpus" 2>&1 | tail -n 25; then
    echo "fuzz $t: FOUND a failure (see $findings)"; status=1
  fi
done
exit $status
