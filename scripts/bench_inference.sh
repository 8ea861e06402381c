#!/usr/bin/env bash
# bench_inference.sh [BUILD_DIR]: what inferring write sets costs (issue 15). Each shared trace
# (tests/data) is replayed by sim_trace_replay on simcuda under the executor, with a budget above
# its peak (no pressure: only the learning differs), twice in the same run: CAPUCHIN_RECOMPUTE=
# declared (the baseline: no probation) and auto (probations). Printed per trace: probations,
# the bytes they checksummed (on the device where the checksum kernel loads: checksum=device),
# the bytes they copied (device to host: the candidates kept until the verdict, and every
# checksummed byte where the checksum runs on the host), checksummed bytes against what one
# iteration's kernels touch, the
# simulated time the probations added over the whole run (simcuda virtual time, the host clock
# at each iteration's end; all of it in the learning iterations) and that as a multiple of one
# steady iteration. Simulated, simcuda's cost model (pageable copies at 10 GB/s): on a GPU the
# copies are 2-5x faster and the synchronisations cost what the device is doing then.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
replay=$build/bin/sim_trace_replay
lib=$build/lib/libcapuchin.so
[ -x "$replay" ] && [ -f "$lib" ] || { echo "bench_inference: build first (cmake --build --preset release)" >&2; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export LD_LIBRARY_PATH=$build/lib/simcuda
iters=6
printf '%-22s %10s %8s %14s %14s %12s %12s %14s\n' trace probations checksum bytes_summed bytes_copied x_iteration added_ms x_steady_iter
for t in tests/data/*.jsonl.gz; do
  name=$(basename "$t" .jsonl.gz)
  peak=$("$replay" --trace "$t" --iters $iters --print-peak)
  budget=$((peak * 2))
  for mode in declared auto; do
    CAPUCHIN_BUDGET=$budget CAPUCHIN_RECOMPUTE=$mode CAPUCHIN_LOG=info LD_PRELOAD=$lib \
      "$replay" --trace "$t" --iters $iters --timing "$tmp/$mode.timing" > "$tmp/$mode.out" 2> "$tmp/$mode.err"
  done
  cmp -s "$tmp/declared.out" "$tmp/auto.out" || { echo "bench_inference: $name: outputs differ" >&2; exit 1; }
  python3 - "$t" "$tmp" "$name" <<'PY'
import gzip, json, re, sys
trace, tmp, name = sys.argv[1:]
def timing(mode):
    return {int(a): int(b) for a, b in (l.split() for l in open(f"{tmp}/{mode}.timing") if not l.startswith("#"))}
base, auto = timing("declared"), timing("auto")
last = max(base)
added_ns = auto[last] - base[last]
steady_ns = (base[last] - base[last - 2]) / 2
m = re.search(r"probations=(\d+) probation_bytes=(\d+) probation_copied=(\d+) checksum=(\w+)", open(f"{tmp}/auto.err").read())
if not m: sys.exit(f"bench_inference: {name}: no executor summary in the auto run's log")
probations, read, copied, where = int(m.group(1)), int(m.group(2)), int(m.group(3)), m.group(4)
sizes, touched, it = {}, 0, 0
with gzip.open(trace, "rt") as f:
    next(f)
    events = [json.loads(l) for l in f]
last_iter = max((e["n"] for e in events if e["op"] == "iter"), default=0)
for e in events:
    if e["op"] == "alloc": sizes[e["id"]] = e["bytes"]
    elif e["op"] == "iter": it = e["n"]
    elif e["op"] == "kernel" and it == last_iter:
        touched += sum(sizes.get(i, 0) for i in set(e.get("reads", []) + e.get("writes", []) + e.get("touch", [])))
print(f"{name:<22} {probations:>10} {where:>8} {read:>14} {copied:>14} {read / touched:>12.2f} {added_ns / 1e6:>12.2f} {added_ns / steady_ns:>14.2f}")
PY
done
