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

echo "$fails failed"
test $fails -eq 0
