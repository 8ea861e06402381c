#!/bin/sh
# ranks.sh OUTDIR: a data-parallel job of two ranks on a node of two simcuda devices, started as
# torchrun starts them (launch_ranks.sh: LOCAL_RANK=0/1, each rank trains sim_mlp_train on
# cudaSetDevice(LOCAL_RANK)), under one `capuchin run --budget B` (B = 0.6 of the natural
# peak P; each device holds P) with each backend. Checks, per backend:
#   1. both ranks exit 0 with the output of an unconstrained run;
#   2. each rank's executor ran on its own device: rank r's log says "device r", its simcuda
#      statistics show device r peaking within B and the other device never used (rank 1's
#      memory is not on device 0);
#   3. the daemon took each rank as its own session: two sessions of the training command,
#      on devices 0 and 1, each with budget B.
# Environment (set by ctest): CAPUCHIN, CAPUCHIND, TRAIN, LD_LIBRARY_PATH (simcuda), PRELOAD_PREFIX.
set -eu
out=$1
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$out"; mkdir -p "$out"
args="--depth 6 --width 64 --batch 2048 --seed 3"
P=$("$TRAIN" $args --iters 6 --print-peak)
B=$(awk -v p="$P" 'BEGIN { printf "%d", p * 0.6 }')
"$TRAIN" $args --iters 6 > "$out/reference.txt"

for backend in uvm pinned; do
  dir="$out/$backend"; mkdir -p "$dir"
  sock="$dir/run/capuchind.sock"
  "$CAPUCHIND" --socket "$sock" --log-dir "$dir/logs" > "$dir/daemon.log" 2>&1 &
  dpid=$!
  trap 'kill $dpid 2>/dev/null || true' EXIT
  i=0
  until "$CAPUCHIN" --socket "$sock" status --json > /dev/null 2>&1; do
    i=$((i + 1)); [ $i -gt 100 ] && { echo "FAIL: capuchind did not start"; cat "$dir/daemon.log"; exit 1; }
    sleep 0.1
  done
  SIMCUDA_DEVICES=2 SIMCUDA_DEVICE_BYTES=$P CAPUCHIN_LOG=info LD_PRELOAD="$PRELOAD_PREFIX" \
    "$CAPUCHIN" run --socket "$sock" --budget "$B" --backend "$backend" -- \
    sh "$here/launch_ranks.sh" 2 "$dir/rank" "$TRAIN" $args --iters 6 ||
    { echo "FAIL ($backend): a rank failed"; tail -5 "$dir"/rank*.err; exit 1; }
  for r in 0 1; do
    cmp -s "$out/reference.txt" "$dir/rank$r.txt" || { echo "FAIL ($backend): rank $r's output differs"; exit 1; }
    grep -q "executor on: .*backend $backend, device $r" "$dir/rank$r.err" ||
      { echo "FAIL ($backend): rank $r's executor did not run on device $r"; grep "executor" "$dir/rank$r.err" | head -3; exit 1; }
  done
  python3 - "$dir" "$B" <<'PY'
import json, sys
d, budget = sys.argv[1], int(sys.argv[2])
for r in (0, 1):
    s = json.load(open(f"{d}/rank{r}.stats.json"))
    dev = {x["device"]: x for x in s["devices"]}
    if s["sticky_error"] != 0: sys.exit(f"FAIL: rank {r}'s context failed ({s['sticky_error']})")
    if not 0 < dev[r]["peak_bytes"] <= budget:
        sys.exit(f"FAIL: rank {r}'s device {r} peaked at {dev[r]['peak_bytes']}, budget {budget}")
    if dev[1 - r]["peak_bytes"] != 0:
        sys.exit(f"FAIL: rank {r} used device {1 - r} ({dev[1 - r]['peak_bytes']} bytes)")
    print(f"rank {r}: device {r} peak {dev[r]['peak_bytes']} <= {budget}; device {1 - r} unused")
PY
  "$CAPUCHIN" --socket "$sock" sessions --all --json > "$dir/sessions.json"
  python3 - "$dir" "$B" <<'PY'
import json, sys
d, budget = sys.argv[1], int(sys.argv[2])
sessions = json.load(open(f"{d}/sessions.json"))
ranks = [s for s in sessions if "sim_mlp_train" in s["cmdline"]]
if len(ranks) != 2: sys.exit(f"FAIL: {len(ranks)} training sessions, expected 2: {sessions}")
got = sorted((s["device"], s["budget_bytes"]) for s in ranks)
if got != [(0, budget), (1, budget)]: sys.exit(f"FAIL: sessions' (device, budget) {got}, expected devices 0 and 1 at {budget}")
print("sessions:", [(s["id"], s["pid"], s["device"], s["budget_bytes"]) for s in ranks])
PY
  "$CAPUCHIN" --socket "$sock" sessions --all
  kill $dpid 2>/dev/null || true
  wait $dpid 2>/dev/null || true
  trap - EXIT
  echo "$backend: two ranks on devices 0 and 1, identical output, each within budget, two sessions"
done
