#!/bin/sh
# launch_ranks.sh N OUTPREFIX CMD...: a stand-in for torchrun on one node: starts N copies of
# CMD at once, each with the environment torchrun gives a rank (LOCAL_RANK, RANK, WORLD_SIZE,
# LOCAL_WORLD_SIZE), rank r's stdout/stderr in OUTPREFIXr.txt / .err and its simcuda statistics
# in OUTPREFIXr.stats.json; waits for all and exits 1 if any failed.
set -u
n=$1; prefix=$2; shift 2
pids=""
r=0
while [ "$r" -lt "$n" ]; do
  LOCAL_RANK=$r RANK=$r WORLD_SIZE=$n LOCAL_WORLD_SIZE=$n SIMCUDA_STATS_FILE="$prefix$r.stats.json" \
    "$@" > "$prefix$r.txt" 2> "$prefix$r.err" &
  pids="$pids $!"
  r=$((r + 1))
done
rc=0
for p in $pids; do wait "$p" || rc=1; done
exit $rc
