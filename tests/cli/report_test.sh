#!/bin/sh
# report_test.sh MODE CAPUCHIN DATA OUTDIR: `capuchin report`, `capuchin export perfetto` and
# `capuchin log` run as a user runs them, their output read back by report_check.py (the
# plots' embedded JSON, the SVG labels, Perfetto counters, the top-tensors table).
#   MODE memory: mobilenet_v2 and resnet18 (../shared/traces, else the copies in DATA) at a
#     budget: the report's capuchin resident series and the Perfetto resident counter stay
#     within the budget when the headline says the run is feasible, and peak where `capuchin
#     sim --json` says the run peaks (the chart plots what the simulation did).
#   MODE log: a report from a decision log alone plots the bytes capuchin held off the device,
#     per process, with the exact peaks of a hand-written log (never an all-zero series), the
#     same from the log gzipped; a log without swaps plots nothing and says so; the Perfetto
#     counter agrees.
#   MODE labels: every tick label, legend and title of every plot fits inside its SVG (reports
#     of a trace, of a long decision log, of many iterations).
#   MODE names: the top-tensors rows name each tensor as the trace file itself does (producing
#     kernel or first user, size, iteration and event position) and link to that tensor's
#     decisions; `capuchin log --trace` names tensors in the same words; `log --tensor ID`
#     keeps one tensor's records.
# Environment: SHARED_TRACES (the shared traces folder; optional).
set -eu
mode=$1; cap=$2; data=$3; out=$4
here=$(cd "$(dirname "$0")" && pwd)
chk() { python3 "$here/report_check.py" "$@"; }
fail() { echo "FAIL: $*"; exit 1; }
mkdir -p "$out"
rm -rf "${out:?}"/*

trace_file() {  # SHARED_TRACES (../shared/traces) when there, else the test data's copy
  for d in "${SHARED_TRACES:-/nonexistent}" "$data"; do
    [ -f "$d/$1" ] && { echo "$d/$1"; return; }
  done
  fail "no $1 in ${SHARED_TRACES:-} or $data"
}
field() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }

# A hand-written decision log: pid 42 holds 1 MiB off (evict 17; a folded repeat changes
# nothing), then 3 MiB (drop 18), 2, 0, and at 150 s 4 MiB (evict 19); pid 43 holds 512 KiB.
write_log() {
  cat > "$1" <<'J'
{"t":0.001,"pid":42,"iteration":0,"action":"budget","bytes":300000000,"reason":"capuchind"}
{"t":0.01,"pid":42,"iteration":2,"action":"plan","bytes":0,"reason":"embedded"}
{"t":0.5,"pid":42,"iteration":3,"action":"evict","tensor":17,"bytes":1048576,"reason":"free-time"}
{"t":0.6,"pid":42,"iteration":3,"action":"evict","tensor":17,"bytes":1048576,"reason":"free-time","note":"repeated 3 more times"}
{"t":1.0,"pid":42,"iteration":3,"action":"drop","tensor":18,"bytes":2097152,"reason":"msps"}
{"t":2.0,"pid":42,"iteration":4,"action":"prefetch","tensor":17,"bytes":1048576,"reason":"free-time"}
{"t":2.1,"pid":42,"iteration":4,"action":"stall","tensor":17,"bytes":1048576,"reason":"prefetch-late","actual_s":0.0002}
{"t":3.0,"pid":42,"iteration":4,"action":"recompute","tensor":18,"bytes":2097152,"reason":"msps"}
{"t":5.0,"pid":43,"iteration":3,"action":"evict","tensor":5,"bytes":524288,"reason":"free-time"}
{"t":6.0,"pid":43,"iteration":3,"action":"swapin_on_demand","tensor":5,"bytes":524288,"reason":"passive"}
{"t":150.0,"pid":42,"iteration":900,"action":"evict","tensor":19,"bytes":4194304,"reason":"free-time"}
J
}

case $mode in
memory)
  for spec in mobilenet_v2-b16.jsonl.gz:0.5x resnet18-b16.jsonl.gz:0.6x resnet18-b16.jsonl.gz:240MiB; do
    tr=$(trace_file "${spec%%:*}"); budget=${spec#*:}; name=$(basename "$tr" .jsonl.gz)-$budget
    "$cap" report "$tr" --budget "$budget" -o "$out/$name.html" > /dev/null
    "$cap" export perfetto "$tr" --budget "$budget" -o "$out/$name.json" > /dev/null
    sim=$("$cap" sim --trace "$tr" --budget "$budget" --policy capuchin --json)
    chk series "$out/$name.html" memory-plot > "$out/$name.series"
    meta=$(sed -n 's/^meta //p' "$out/$name.series")
    b=$(field "$meta" budget_bytes); feasible=$(field "$meta" feasible)
    [ "$b" = "$(field "$sim" budget_bytes)" ] || fail "$name: report budget $b != sim's $(field "$sim" budget_bytes)"
    [ "$feasible" = True ] || fail "$name: the report says the run is not feasible"
    grep -q 'run feasible' "$out/$name.html" || fail "$name: the headline does not say 'run feasible'"
    # The lower bound (sim bound) is in the report, as sim prints it, and not above the run.
    python3 -c 'import json,sys; r=json.loads(sys.argv[1])["bound_ratio"]; s=json.loads(sys.argv[2]);
assert r > 1 and abs(r - s["bound"]["ratio"]) < 1e-9 and r <= s["ratio"] * (1 + 1e-9), (r, s["bound"], s["ratio"])' \
      "$meta" "$sim" || fail "$name: the report's bound is not sim's, or above the run"
    grep -q 'No policy sustains a steady iteration under' "$out/$name.html" || fail "$name: the note does not give the bound"
    peak=$(field "$sim" peak_bytes)
    res=$(awk '$1 == "capuchin-resident" { print $2 }' "$out/$name.series")
    [ -n "$res" ] || fail "$name: no capuchin resident series in the report"
    [ "$res" -le "$b" ] || fail "$name: the report's capuchin resident series peaks at $res bytes, over the budget $b of a feasible run"
    [ "$res" -eq "$peak" ] || fail "$name: the report's capuchin resident series peaks at $res bytes, sim says $peak"
    ctr=$(chk counter "$out/$name.json" "resident bytes" | cut -d' ' -f1)
    [ "$ctr" -le "$b" ] || fail "$name: the Perfetto resident counter peaks at $ctr bytes, over the budget $b"
    [ "$ctr" -eq "$peak" ] || fail "$name: the Perfetto resident counter peaks at $ctr bytes, sim says $peak"
    echo "$name: budget $b, capuchin resident peak $res (report) = $ctr (perfetto) = $peak (sim)"
  done ;;
log)
  write_log "$out/d.jsonl"
  "$cap" report "$out/d.jsonl" -o "$out/log.html" > /dev/null
  chk series "$out/log.html" memory-plot | tee "$out/log.series"
  [ "$(grep -c '^off-device-pid-' "$out/log.series")" -eq 2 ] || fail "not one off-device series per process"
  grep -q '^off-device-pid-42 4194304 ' "$out/log.series" || fail "pid 42's series does not peak at 4 MiB"
  grep -q '^off-device-pid-43 524288 ' "$out/log.series" || fail "pid 43's series does not peak at 512 KiB"
  if awk '$1 != "meta" && $2 <= 0' "$out/log.series" | grep -q .; then fail "an all-zero series is plotted"; fi
  grep -q 'bytes capuchin held off the device' "$out/log.html" || fail "the chart's note does not say what it shows"
  gzip -c "$out/d.jsonl" > "$out/d.jsonl.1.gz"  # a rotated log reads the same
  "$cap" report "$out/d.jsonl.1.gz" -o "$out/gz.html" > /dev/null
  [ "$(chk series "$out/gz.html" memory-plot | grep -v '^meta')" = "$(grep -v '^meta' "$out/log.series")" ] \
    || fail "the report of the gzipped log plots other series"
  "$cap" export perfetto "$out/d.jsonl" -o "$out/log.json" > /dev/null
  [ "$(chk counter "$out/log.json" 'bytes held off the device by capuchin' | cut -d' ' -f1)" -eq 4194304 ] \
    || fail "the Perfetto off-device counter does not peak at 4 MiB"
  # A log without swaps: nothing to plot, said so, no line drawn.
  grep -v '"tensor"' "$out/d.jsonl" > "$out/plans.jsonl"
  "$cap" report "$out/plans.jsonl" -o "$out/plans.html" > /dev/null
  [ "$(chk series "$out/plans.html" memory-plot | grep -vc '^meta')" -eq 0 ] || fail "a log without swaps plots a series"
  grep -q 'nothing to plot' "$out/plans.html" || fail "a log without swaps does not say there is nothing to plot"
  if sed -n '/id="memory-plot"/,/<\/svg>/p' "$out/plans.html" | grep -q '<polyline'; then fail "a line is drawn for no data"; fi
  echo "log: off-device series peak at 4 MiB (pid 42) and 512 KiB (pid 43); a log without swaps plots nothing" ;;
labels)
  write_log "$out/d.jsonl"
  awk 'NR > 1 { sub(/"iteration":900/, "\"iteration\":" NR * 97) } { print }' "$out/d.jsonl" > "$out/many.jsonl"
  "$cap" report "$out/d.jsonl" -o "$out/log.html" > /dev/null
  "$cap" report "$out/many.jsonl" -o "$out/many.html" > /dev/null
  "$cap" report "$(trace_file mobilenet_v2-b16.jsonl.gz)" --budget 0.5x -o "$out/trace.html" > /dev/null
  "$cap" report "$(trace_file resnet18-b16.jsonl.gz)" -o "$out/natural.html" > /dev/null
  for p in log many trace natural; do echo "$p: $(chk labels "$out/$p.html")"; done ;;
names)
  tr=$(trace_file resnet18-b16.jsonl.gz)
  "$cap" report "$tr" --budget 240MiB -o "$out/r.html" > /dev/null
  chk tensors "$out/r.html" > "$out/rows.tsv"
  [ "$(wc -l < "$out/rows.tsv")" -ge 5 ] || fail "fewer than 5 top tensors: $(cat "$out/rows.tsv")"
  while IFS="$(printf '\t')" read -r id name n listed; do
    want=$(chk origin "$tr" "$id")
    origin=$(echo "$want" | cut -f1); where=$(echo "$want" | cut -f3)
    size=$(echo "$want" | cut -f2)
    case $name in "$size"[\ ,]*) ;; *) fail "tensor $id is named '$name', the trace says its size is $size" ;; esac
    case $name in *"$origin;"*) ;; *) fail "tensor $id is named '$name', the trace says '$origin'" ;; esac
    case $name in *"$where,"*) ;; *) fail "tensor $id is named '$name', the trace puts it at '$where'" ;; esac
    [ "$n" -gt 0 ] && [ "$listed" -eq "$(( n < 50 ? n : 51 ))" ] || fail "tensor $id: $n decisions, $listed listed under its anchor"
    echo "  tensor $id: $name; $n decisions"
  done < "$out/rows.tsv"
  # The same words in `capuchin log --trace`, for a log of that trace's tensors.
  id=$(head -1 "$out/rows.tsv" | cut -f1); name=$(head -1 "$out/rows.tsv" | cut -f2)
  printf '{"t":0.1,"pid":7,"iteration":3,"action":"evict","tensor":%s,"bytes":1024}\n{"t":0.2,"pid":7,"iteration":3,"action":"evict","tensor":999999,"bytes":1024}\n{"t":0.3,"pid":7,"iteration":3,"action":"prefetch","tensor":%s,"bytes":1024}\n' \
    "$id" "$id" > "$out/d.jsonl"
  "$cap" log "$out/d.jsonl" --trace "$tr" > "$out/log.txt" 2> "$out/log.err"
  [ "$(grep -cF "[$name]" "$out/log.txt")" -eq 2 ] || fail "log --trace does not name tensor $id as the report does: $(cat "$out/log.txt")"
  grep -q 'tensor 999999 .*\[not in the trace\]' "$out/log.txt" || fail "log --trace: an id not in the trace is not said so"
  "$cap" log "$out/d.jsonl" --tensor "$id" > "$out/one.txt"
  [ "$(wc -l < "$out/one.txt")" -eq 2 ] && ! grep -q 999999 "$out/one.txt" || fail "log --tensor $id: $(cat "$out/one.txt")"
  echo "names: the report's rows and log --trace name tensors as the trace does; log --tensor keeps one tensor" ;;
*) fail "unknown mode $mode" ;;
esac
