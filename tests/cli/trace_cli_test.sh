#!/usr/bin/env bash
# `capuchin trace stats|validate` end to end: exact figures, exit codes, FILE:LINE errors.
# Usage: trace_cli_test.sh CAPUCHIN_BIN DATA_DIR
set -u
bin=$1 data=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() {  # check DESCRIPTION CONDITION...
  local what=$1; shift
  if "$@"; then echo "ok   - $what"; else echo "FAIL - $what"; fails=$((fails + 1)); fi
}

out=$("$bin" trace stats --json "$data/resnet18-b16.jsonl.gz")
check "stats exits 0" test $? -eq 0
check "peak_bytes 479227264" grep -q '"peak_bytes":479227264' <<<"$out"
check "iteration peaks" grep -q '"iteration_peak_bytes":\[432469216,479227264,479227264\]' <<<"$out"
check "events/kernels/allocs" grep -q '"events":2032,"kernels":501,"allocs":850' <<<"$out"
check "persistent_bytes" grep -q '"persistent_bytes":93554656' <<<"$out"

table=$("$bin" trace stats "$data/resnet18-b16.jsonl.gz")
check "table has a header and the peak" grep -q '457.0 MiB' <<<"$table"

printf '%s\n' '{"format":"capuchin-trace","version":1}' '{"op":"alloc","id":0,"bytes":8}' \
  '{"op":"kernel","name":"k","reads":[3],"writes":[0]}' > "$tmp/bad.jsonl"
err=$("$bin" trace validate "$tmp/bad.jsonl" 2>&1)
rc=$?
check "validate exits 1 on a broken trace" test $rc -eq 1
check "validate names FILE:LINE: reason" grep -q "^$tmp/bad.jsonl:3: id 3 used before its alloc" <<<"$err"

ok=$("$bin" trace validate "$data/resnet18-b16.jsonl.gz")
check "validate exits 0 on a valid trace" test $? -eq 0
check "validate says valid" grep -q 'valid (2032 events)' <<<"$ok"

"$bin" trace validate "$data/resnet18-b16.jsonl.gz" "$tmp/bad.jsonl" "$tmp/missing.jsonl" >/dev/null 2>"$tmp/err"
check "one bad file among several: exit 1" test $? -eq 1
check "missing file named" grep -q "$tmp/missing.jsonl: cannot open" "$tmp/err"

"$bin" trace stats --json "$tmp/bad.jsonl" >/dev/null 2>&1
check "stats on a broken trace exits 1" test $? -eq 1

"$bin" trace bogus >/dev/null 2>&1
check "unknown subcommand is an error" test $? -ne 0

echo "$((13 - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
