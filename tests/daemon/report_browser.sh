#!/bin/sh
# report_browser.sh OUTDIR TRACE: `capuchin report` and `capuchin export perfetto` on a
# recorded trace (simulated at a budget) and on a decision log; the report is loaded in
# headless Debian chromium, which must run its script (data-ready="1") and show the memory
# plot's lines, with no JavaScript error on the console. Exits 77 (ctest: skipped) only
# when chromium is not installed.
set -eu
out=$1; trace=$2
rm -rf "$out"; mkdir -p "$out"
cat > "$out/decisions.jsonl" <<'J'
{"t":0.001,"pid":42,"iteration":0,"action":"attach","bytes":0,"reason":"budget"}
{"t":0.01,"pid":42,"iteration":2,"action":"plan","bytes":300000000,"reason":"learned","expected_s":0.001}
{"t":0.02,"pid":42,"iteration":3,"action":"evict","tensor":17,"bytes":1048576,"reason":"free-time","expected_s":0.0001,"actual_s":0.00012}
{"t":0.03,"pid":42,"iteration":3,"action":"prefetch","tensor":17,"bytes":1048576,"reason":"free-time","actual_s":0.0001}
{"t":0.04,"pid":42,"iteration":3,"action":"stall","tensor":17,"bytes":1048576,"actual_s":0.0002}
J
"$CAPUCHIN" log "$out/decisions.jsonl" --filter evict,stall | tee "$out/log.txt"
[ "$(wc -l < "$out/log.txt")" -eq 2 ] || { echo "FAIL: log --filter"; exit 1; }
"$CAPUCHIN" report "$trace" --budget 0.6x -o "$out/report.html"
"$CAPUCHIN" report "$out/decisions.jsonl" -o "$out/report_log.html"
"$CAPUCHIN" export perfetto "$trace" "$out/decisions.jsonl" --budget 0.6x -o "$out/perfetto.json"
grep -q '"traceEvents"' "$out/perfetto.json" && grep -q '"H2D copy engine"' "$out/perfetto.json" && grep -q '"ph":"C"' "$out/perfetto.json" \
  || { echo "FAIL: perfetto export lacks tracks"; exit 1; }
grep -q 'id="memory-plot"' "$out/report.html" || { echo "FAIL: no memory plot in the report"; exit 1; }
if grep -Eo 'https?://[^" ]+' "$out/report.html" | grep -v '^http://www.w3.org/2000/svg$' | grep -q .; then
  echo "FAIL: the report references the network"; exit 1
fi
browser=""
for b in chromium chromium-browser; do command -v "$b" > /dev/null && browser=$b && break; done
[ -n "$browser" ] || { echo "SKIP: chromium is not installed (scripts/install-deps.sh installs it)"; exit 77; }
for page in report report_log; do
  HOME="$out" timeout 120 "$browser" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --enable-logging=stderr --v=0 \
    --user-data-dir="$out/profile" --dump-dom "file://$out/$page.html" > "$out/$page.dom" 2> "$out/$page.console" || true
  grep -q 'data-ready="1"' "$out/$page.dom" || { echo "FAIL: $page did not run its script / draw its plot"; tail -20 "$out/$page.console"; exit 1; }
  grep -q '<polyline' "$out/$page.dom" || { echo "FAIL: $page shows no plot line"; exit 1; }
  if grep -E 'Uncaught|CONSOLE.*[Ee]rror' "$out/$page.console"; then echo "FAIL: JavaScript error in $page"; exit 1; fi
  echo "$page: loaded in $browser, plot lines: $(grep -o 'data-plot-lines="[0-9]*"' "$out/$page.dom")"
done
echo "report_browser: ok"
