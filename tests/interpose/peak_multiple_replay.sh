#!/bin/sh
# peak_multiple_replay.sh HOST_REPLAY STUB_DIR PRELOAD TRACE: CAPUCHIN_BUDGET=0.5x on a real
# model's call sequence (host_replay on the null driver): when the budget is resolved at an
# iteration end, the blocks the job freed are still cached on the device and the resident
# bytes are far above the new budget; the executor must shed them at once, so the resident
# peak it reports from then on is within the budget (before: resnet18's stayed at the natural
# peak, twice the budget, until the next allocation happened to make room).
set -u
replay=$1 stub=$2 preload=$3 trace=$4
err=$(LD_LIBRARY_PATH="$stub" LD_PRELOAD="$preload" CAPUCHIN_SINK=null CAPUCHIN_LOG=info CAPUCHIN_BUDGET=0.5x \
  "$replay" trace "$trace" --iters 4 --warmup 2 2>&1 >/dev/null) || { echo "FAIL: the replay failed"; echo "$err" | tail; exit 1; }
python3 - "$err" <<'PY' || exit 1
import re, sys
err = sys.argv[1]
m = re.search(r"0\.5 x the natural peak (\d+) bytes = (\d+) bytes", err)
s = re.search(r"executor summary: backend=\w+ budget=(\d+) peak_resident=(\d+)", err)
if not m or not s: sys.exit("FAIL: no resolution or no summary:\n" + err[-2000:])
budget, peak = int(s.group(1)), int(s.group(2))
if budget != int(m.group(2)): sys.exit(f"FAIL: the summary's budget {budget} is not the resolved {m.group(2)}")
if not 0 < peak <= budget: sys.exit(f"FAIL: resident peak {peak} over the budget {budget} (natural peak {m.group(1)})")
print(f"resolved {budget} of {m.group(1)} bytes; resident peak {peak}")
PY
echo peak-replay-ok
