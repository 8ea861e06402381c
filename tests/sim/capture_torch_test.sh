#!/usr/bin/env bash
# scripts/capture_torch_trace.py end to end on a small CNN defined in the script: the trace
# it writes passes `capuchin trace validate` and simulates. Exits 77 (ctest SKIP) when
# torch is not importable. Usage: capture_torch_test.sh SCRIPT CAPUCHIN_BIN
set -u
script=$1 bin=$2
py=${CAPUCHIN_PYTHON:-python3}
if ! command -v "$py" >/dev/null || ! "$py" -c "import torch" >/dev/null 2>&1; then
  echo "torch is not importable by $py: skipped"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() {
  local what=$1; shift
  if "$@"; then echo "ok   - $what"; else echo "FAIL - $what"; fails=$((fails + 1)); fi
}

"$py" "$script" --model small-cnn --batch-size 4 --iterations 2 --out "$tmp/cnn.jsonl.gz"
check "capture exits 0" test $? -eq 0
"$bin" trace validate "$tmp/cnn.jsonl.gz"
check "trace is valid" test $? -eq 0
stats=$("$bin" trace stats --json "$tmp/cnn.jsonl.gz")
check "two iterations" grep -q '"iterations":2' <<<"$stats"
check "convolutions have flops" bash -c "zcat '$tmp/cnn.jsonl.gz' | grep -q '\"name\":\"aten::convolution\".*\"flops\"'"
check "backward kernels captured" bash -c "zcat '$tmp/cnn.jsonl.gz' | grep -q 'convolution_backward'"
check "frees placed" bash -c "zcat '$tmp/cnn.jsonl.gz' | grep -q '\"op\":\"free\"'"
out=$("$bin" sim --trace "$tmp/cnn.jsonl.gz" --budget 0.7x --policy lru-uvm --json)
check "simulates" grep -q '"feasible":true' <<<"$out"

"$py" "$script" --model mlp --batch-size 8 --iterations 1 --out "$tmp/mlp.jsonl"
check "mlp capture" test $? -eq 0
"$bin" trace validate -q "$tmp/mlp.jsonl"
check "mlp trace is valid" test $? -eq 0
check "matmuls have flops" grep -q '"name":"aten::\(addmm\|mm\)".*"flops"' "$tmp/mlp.jsonl"

# foreach ops as GPU launches: AdamW over 60 parameters. Its depth-3 ops (addcmul_, addcdiv_)
# take 48 tensors per launch with 4 KB kernel arguments and all 60 with 32 KB; the converter
# applied to the 32 KB capture (one launch per op) gives the 4 KB capture, frees included.
cat >"$tmp/many.py" <<'PY'
import torch.nn as nn
def model():
    return nn.Sequential(*[nn.Linear(8, 8) for _ in range(30)])
PY
count_foreach() { zcat "$1" | grep -c '"name":"aten::_foreach_addcdiv_"'; }
PYTHONPATH="$tmp" "$py" "$script" --model many:model --input-shape 8 --num-classes 8 --optimizer adamw --iterations 2 \
  --kernel-args 4kb --out "$tmp/f4.jsonl.gz"
check "4kb capture" test $? -eq 0
PYTHONPATH="$tmp" "$py" "$script" --model many:model --input-shape 8 --num-classes 8 --optimizer adamw --iterations 2 \
  --out "$tmp/f32.jsonl.gz"
check "32kb capture" test $? -eq 0
check "addcdiv_: two launches per step with 4 KB arguments" test "$(count_foreach "$tmp/f4.jsonl.gz")" -eq 4
check "addcdiv_: one launch per step with 32 KB arguments" test "$(count_foreach "$tmp/f32.jsonl.gz")" -eq 2
"$bin" trace validate -q "$tmp/f4.jsonl.gz"
check "4kb trace is valid" test $? -eq 0
(zcat "$tmp/f32.jsonl.gz" | head -1 | sed 's/"foreach_launches": "32kb", //'; zcat "$tmp/f32.jsonl.gz" | tail -n +2) |
  gzip >"$tmp/f32old.jsonl.gz"
"$py" "$(dirname "$script")/chunk_foreach_trace.py" "$tmp/f32old.jsonl.gz" "$tmp/conv.jsonl.gz" --kernel-args 4kb
check "converter exits 0" test $? -eq 0
check "converter gives the 4kb capture" cmp <(zcat "$tmp/f4.jsonl.gz" | tail -n +2) <(zcat "$tmp/conv.jsonl.gz" | tail -n +2)

echo "$fails failed"
test $fails -eq 0
