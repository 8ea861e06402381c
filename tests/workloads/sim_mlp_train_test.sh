#!/bin/bash
# sim_mlp_train on simcuda: the loss falls, the output is bit-identical across runs, worker
# timing (SIMCUDA_JITTER_US), allocation mode and stream choice; simcuda's measured peak equals
# --print-peak; a capacity one byte below the peak fails with "out of memory", exactly the peak
# succeeds; the ground truth lists gemm launches and frees every allocation.
# Usage: sim_mlp_train_test.sh BIN LIBDIR
set -u
BIN=$1
export LD_LIBRARY_PATH=$2
ARGS=(--depth 3 --width 96 --batch 48 --iters 6 --seed 7)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$BIN" "${ARGS[@]}" > "$TMP/a.txt" || fail "baseline run exited $?"
cat "$TMP/a.txt"
[ "$(grep -c '^iter [0-9]* loss 0x' "$TMP/a.txt")" -eq 6 ] || fail "expected 6 iteration lines"
grep -qE '^weights [0-9a-f]{16}$' "$TMP/a.txt" || fail "missing weights line"
first=$(awk '/^iter 0 /{print $4}' "$TMP/a.txt")
last=$(awk '/^iter 5 /{print $4}' "$TMP/a.txt")
awk -v a="$(printf '%.9g' "$first")" -v b="$(printf '%.9g' "$last")" 'BEGIN{exit !(b < a * 0.999)}' ||
  fail "loss did not fall: $first -> $last"

"$BIN" "${ARGS[@]}" > "$TMP/b.txt" && cmp -s "$TMP/a.txt" "$TMP/b.txt" || fail "second run differs"
SIMCUDA_JITTER_US=300 "$BIN" "${ARGS[@]}" > "$TMP/c.txt" && cmp -s "$TMP/a.txt" "$TMP/c.txt" || fail "jittered workers change the output"
"$BIN" "${ARGS[@]}" --alloc sync > "$TMP/d.txt" && cmp -s "$TMP/a.txt" "$TMP/d.txt" || fail "--alloc sync changes the output"
"$BIN" "${ARGS[@]}" --stream created > "$TMP/e.txt" && cmp -s "$TMP/a.txt" "$TMP/e.txt" || fail "--stream created changes the output"
"$BIN" --depth 3 --width 96 --batch 48 --iters 6 --seed 8 > "$TMP/f.txt" && ! cmp -s "$TMP/a.txt" "$TMP/f.txt" || fail "another seed gives the same output"

# Small buffers share pages and are reused in stream order: stress worker timing there too.
SMALL=(--depth 4 --width 64 --batch 16 --iters 3)
"$BIN" "${SMALL[@]}" > "$TMP/s0.txt" || fail "small run exited $?"
for i in 1 2 3 4 5; do
  SIMCUDA_JITTER_US=200 "$BIN" "${SMALL[@]}" > "$TMP/s$i.txt" 2>&1 && cmp -s "$TMP/s0.txt" "$TMP/s$i.txt" ||
    fail "jittered small run $i differs: $(cat "$TMP/s$i.txt")"
done

peak=$("$BIN" "${ARGS[@]}" --print-peak) || fail "--print-peak exited $?"
[[ "$peak" =~ ^[0-9]+$ ]] || fail "--print-peak printed '$peak'"
for mode in async sync; do
  SIMCUDA_STATS_FILE="$TMP/stats.json" "$BIN" "${ARGS[@]}" --alloc $mode > /dev/null || fail "stats run ($mode)"
  measured=$(grep -o '"peak_device_bytes": [0-9]*' "$TMP/stats.json" | grep -o '[0-9]*$')
  [ "$measured" = "$peak" ] || fail "simcuda peak $measured != --print-peak $peak ($mode)"
  grep -q '"device_bytes_in_use": 0' "$TMP/stats.json" || fail "memory left allocated at exit ($mode)"
done
echo "peak $peak bytes matches simcuda's measured peak"

SIMCUDA_DEVICE_BYTES=$((peak - 1)) "$BIN" "${ARGS[@]}" > "$TMP/oom.txt" 2>&1
rc=$?
[ $rc -ne 0 ] || fail "ran with capacity below its peak"
grep -q "out of memory" "$TMP/oom.txt" || fail "no 'out of memory' message: $(cat "$TMP/oom.txt")"
SIMCUDA_DEVICE_BYTES=$peak "$BIN" "${ARGS[@]}" > "$TMP/exact.txt" && cmp -s "$TMP/a.txt" "$TMP/exact.txt" ||
  fail "does not run in exactly its peak"

"$BIN" "${ARGS[@]}" --ground-truth "$TMP/truth.jsonl" > /dev/null || fail "ground-truth run"
grep -q '"kernel":"simblas_sgemm_nn"' "$TMP/truth.jsonl" || fail "no gemm launch in the ground truth"
allocs=$(grep -c '"event":"alloc"' "$TMP/truth.jsonl")
frees=$(grep -c '"event":"free"' "$TMP/truth.jsonl")
[ "$allocs" -gt 0 ] && [ "$allocs" -eq "$frees" ] || fail "ground truth: $allocs allocations, $frees frees"
echo "PASS"
