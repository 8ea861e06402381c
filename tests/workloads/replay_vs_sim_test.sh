#!/bin/sh
# replay_vs_sim_test.sh REPLAY CAPUCHIN DATA OUTDIR: the replay on simcuda and the simulator
# on the `simcuda` profile agree on the same repeated run, unconstrained. For resnet18 and the
# transformer (--iters 4, pinned batch uploads: --syncs loss), the replay's steady time per
# iteration (its --timing file: iterations 2..4) is within 1% of `capuchin sim --iters 4 --gpu
# simcuda --policy ideal` (the known residual, under 1%: a kernel the replay splits over L
# launches pays simcuda's 2 us per launch where the simulator charges its 4 us launch latency
# once). Also: the --timing file has one line per iteration plus line 0, increasing, and is
# the same on a second run and under the caching allocator. Virtual time only: nothing here
# depends on the machine's speed. Environment: LD_LIBRARY_PATH reaches simcuda.
set -eu
replay=$1; capuchin=$2; data=$3; out=$4
rm -rf "$out"; mkdir -p "$out"
fail() { echo "FAIL: $*"; exit 1; }
for model in resnet18-b16 tiny_transformer-b8; do
  t="$data/$model.jsonl.gz"
  "$replay" --trace "$t" --iters 4 --gpu simcuda --syncs loss --timing "$out/$model.tim" > "$out/$model.out" || fail "$model: exit $?"
  [ "$(grep -vc '^#' "$out/$model.tim")" -eq 5 ] || fail "$model: --timing has not 5 lines: $(cat "$out/$model.tim")"
  awk '!/^#/ { if (NR > 3 && $2 <= prev) exit 1; prev = $2 }' "$out/$model.tim" || fail "$model: --timing not increasing"
  "$replay" --trace "$t" --iters 4 --gpu simcuda --syncs loss --alloc caching --timing "$out/$model.tim2" > /dev/null || fail "$model caching: exit $?"
  grep -v '^#' "$out/$model.tim" > "$out/a"; grep -v '^#' "$out/$model.tim2" > "$out/b"
  cmp -s "$out/a" "$out/b" || fail "$model: --timing differs between --alloc async and caching"
  "$capuchin" sim --trace "$t" --iters 4 --gpu simcuda --policy ideal --json > "$out/$model.json" || fail "$model: capuchin sim exit $?"
  sim_ns=$(sed 's/.*"time_s":\([0-9.e+-]*\),.*/\1/' "$out/$model.json" | awk '{ printf "%.0f", $1 * 1e9 }')
  replay_ns=$(awk '!/^#/ { t[$1] = $2 } END { printf "%.0f", (t[4] - t[1]) / 3 }' "$out/$model.tim")
  echo "$model: replay $replay_ns ns/iteration, capuchin sim $sim_ns ns/iteration"
  awk -v r="$replay_ns" -v s="$sim_ns" 'BEGIN { d = r / s - 1; exit !(s > 0 && d < 0.01 && d > -0.01) }' ||
    fail "$model: replay $replay_ns ns vs sim $sim_ns ns per iteration: more than 1% apart"
done
echo "replay_vs_sim: ok"
