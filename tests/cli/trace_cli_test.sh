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

# trace import simrd: a two-operator log becomes a valid one-iteration trace; a broken one is
# refused with its line named and an existing output file left as it was.
printf '%s\n' '{"ANNOTATION":"START","INSTRUCTION":"ANNOTATE"}' '{"INSTRUCTION":"CONSTANT","NAME":"p"}' \
  '{"INSTRUCTION":"MEMORY","MEMORY":"64","NAME":"p"}' \
  '{"ARGS":["p"],"INSTRUCTION":"CALL","NAME":"relu","RESULT":["r"],"TIME":"1500"}' \
  '{"INSTRUCTION":"MEMORY","MEMORY":"64","NAME":"r"}' '{"ALIAS":"-1","INSTRUCTION":"ALIAS","NAME":"r"}' \
  '{"ARGS":["r"],"INSTRUCTION":"MUTATE","MUTATE":[0],"NAME":"add_","TIME":"500"}' > "$tmp/step.log"
out=$("$bin" trace import simrd "$tmp/step.log" -o "$tmp/step.jsonl.gz")
check "import simrd exits 0" test $? -eq 0
check "import simrd summarises" grep -q '2 operators (1 in place), measured 0.0 ms in all; 2 allocations (1 parameters in the set-up)' <<<"$out"
"$bin" trace validate -q "$tmp/step.jsonl.gz"
check "the imported trace is valid" test $? -eq 0
printf '%s\n' '{"ANNOTATION":"START","INSTRUCTION":"ANNOTATE"}' '{"INSTRUCTION":"NOPE"}' > "$tmp/bad.log"
echo keep > "$tmp/kept.jsonl"
err=$("$bin" trace import simrd "$tmp/bad.log" -o "$tmp/kept.jsonl" 2>&1)
check "import simrd exits 1 on a broken log, naming its line" grep -q "bad.log:2: unknown INSTRUCTION 'NOPE'" <<<"$err"
check "an existing output is left as it was" test "$(cat "$tmp/kept.jsonl")" = keep

echo "$((19 - fails)) passed, $fails failed"
[ "$fails" -eq 0 ]
