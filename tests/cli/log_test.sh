#!/usr/bin/env bash
# `capuchin log` as a user meets it: a plain and a gzipped decision log read alike; --follow
# waits for a file that does not exist yet, hands on only whole lines (a record written in two
# pieces is one record, not a "not JSON" error) and keeps going past the first hundred records;
# a file that is not a decision log is one error, not one per line; `export perfetto` of two
# processes' logs keeps them apart.
# Usage: log_test.sh CAPUCHIN_BIN TRACE_FILE
set -u
bin=$1 trace=$2
tmp=$(mktemp -d)
trap 'kill "${fpid:-}" 2>/dev/null; rm -rf "$tmp"' EXIT
fails=0
check() {  # check DESCRIPTION CONDITION...
  local what=$1; shift
  if "$@"; then echo "ok   - $what"; else echo "FAIL - $what"; fails=$((fails + 1)); fi
}
record() { printf '{"t":%d.5,"pid":42,"iteration":%d,"action":"evict","tensor":%d,"bytes":4096,"reason":"pressure"}\n' "$1" "$1" "$1"; }

for i in $(seq 1 150); do record "$i"; done > "$tmp/d.jsonl"
gzip -c "$tmp/d.jsonl" > "$tmp/d.jsonl.1.gz"
"$bin" log "$tmp/d.jsonl" > "$tmp/plain.out" 2> "$tmp/plain.err"; rc=$?
check "plain log: every record, exit 0" test "$(grep -c ' evict ' "$tmp/plain.out")|$rc" = "150|0"
"$bin" log "$tmp/d.jsonl.1.gz" > "$tmp/gz.out" 2> "$tmp/gz.err"; rc=$?
check "gzipped log: read like the plain one" cmp -s "$tmp/plain.out" "$tmp/gz.out"
check "gzipped log: exit 0, no error" test "$rc|$(wc -c < "$tmp/gz.err")" = "0|0"

# --follow on a file that appears later, written a piece at a time.
f=$tmp/later.jsonl
"$bin" log --follow "$f" > "$tmp/follow.out" 2> "$tmp/follow.err" &
fpid=$!
sleep 0.5
for i in $(seq 1 120); do record "$i"; done > "$f"
line=$(record 121)
printf '%s' "${line:0:40}" >> "$f"   # half a record ...
sleep 0.6                            # ... seen by the follower before the rest arrives
printf '%s\n' "${line:40}" >> "$f"
for i in $(seq 122 130); do record "$i"; done >> "$f"
for _ in $(seq 50); do [ "$(grep -c ' evict ' "$tmp/follow.out")" -ge 130 ] && break; sleep 0.1; done
kill "$fpid" 2>/dev/null; wait "$fpid" 2>/dev/null; fpid=
check "follow: said it waits for the file" grep -q "waiting for $f" "$tmp/follow.err"
check "follow: all 130 records, the split one once" test "$(grep -c ' evict ' "$tmp/follow.out")" = 130
check "follow: no error for the record written in two pieces" test -z "$(grep -v waiting "$tmp/follow.err")"

# export of two processes' logs: two Perfetto processes, each with its own records.
sed 's/"pid":42/"pid":43/' "$tmp/d.jsonl" > "$tmp/other.jsonl"
"$bin" export perfetto "$tmp/d.jsonl" "$tmp/other.jsonl" -o "$tmp/two.json" > /dev/null 2> "$tmp/export.err"
check "export of two processes' logs: one Perfetto process each" python3 -c '
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
names = {e["pid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "process_name"}
evicts = {}
for e in ev:
    if e.get("name") == "evict": evicts.setdefault(e["pid"], set()).add(e["args"]["pid"])
assert len(names) == 2 and any("pid 42" in n for n in names.values()) and any("pid 43" in n for n in names.values()), names
assert sorted(len(v) for v in evicts.values()) == [1, 1] and len(evicts) == 2, evicts
' "$tmp/two.json"

"$bin" log "$trace" > "$tmp/bad.out" 2> "$tmp/bad.err"; rc=$?
check "not a decision log: exit 1" test "$rc" = 1
check "not a decision log: one error that says so" test "$(wc -l < "$tmp/bad.err")" = 1
check "not a decision log: named" grep -q "is not a capuchin decision log (line 1" "$tmp/bad.err"

[ $fails -eq 0 ] && echo "all ok" || { echo "$fails failed"; exit 1; }
