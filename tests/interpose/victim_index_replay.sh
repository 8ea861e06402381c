#!/bin/sh
# victim_index_replay.sh HOST_REPLAY STUB_DIR PRELOAD TRACE: mobilenet_v2's call sequence at
# CAPUCHIN_BUDGET=0.5x on the null driver, whose shortages price about 440 blocks each: the
# executor must start its victim index (VictimIndex::kWorthFrom), find its victims through it
# from then on, evict, keep the resident peak within the budget, and finish without an error.
# (The index's order against the priced one is checked in victim_index_test.cpp; this is the
# executor's use of it: the Ledger's upkeep at every move and use, the search's acceptance.)
set -u
replay=$1 stub=$2 preload=$3 trace=$4
err=$(LD_LIBRARY_PATH="$stub" LD_PRELOAD="$preload" CAPUCHIN_SINK=null CAPUCHIN_LOG=info CAPUCHIN_BUDGET=0.5x \
  "$replay" trace "$trace" --iters 40 --warmup 2 2>&1 >/dev/null) || { echo "FAIL: the replay failed"; echo "$err" | tail; exit 1; }
python3 - "$err" <<'PY' || exit 1
import re, sys
err = sys.argv[1]
s = re.search(r"executor summary: backend=\w+ budget=(\d+) peak_resident=(\d+) .*? evictions=(\d+) .*"
              r"shortages=(\d+) shortages_indexed=(\d+)", err)
if not s: sys.exit("FAIL: no executor summary:\n" + err[-2000:])
budget, peak, evictions, shortages, indexed = map(int, s.groups())
if re.search(r"\berror\b", err, re.I): sys.exit("FAIL: an error was logged:\n" + err[-2000:])
if evictions == 0: sys.exit("FAIL: nothing evicted: not under pressure")
if not 0 < indexed < shortages: sys.exit(f"FAIL: {indexed} of {shortages} shortages used the index (want some, after priced ones)")
if not 0 < peak <= budget: sys.exit(f"FAIL: resident peak {peak} over the budget {budget}")
print(f"{evictions} evictions; {indexed} of {shortages} shortages through the index; peak {peak} of {budget}")
PY
echo victim-index-replay-ok
