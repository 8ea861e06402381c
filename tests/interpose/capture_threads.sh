#!/bin/sh
# capture_threads.sh OUTDIR: exec_capture_threads (a global-mode graph capture while capuchin's
# drain polls timing events of earlier launches and another application thread allocates,
# launches and frees on its own streams) plain, then under LD_PRELOAD=libcapuchin.so: capture
# only (every launch timed), and the executor with a budget on each backend; then the same with
# the side thread calling cudaMalloc in relaxed mode during the capture. Checks: every
# run exits 0 (an invalidated capture fails the program) with output identical to the plain run;
# the executor ran; the relaxed cudaMalloc was left to the driver; captured launches are in the
# trace once per graph launch, also for a capture into an existing graph (--to-graph).
# Environment: PROG, PRELOAD (set by ctest).
set -eu
out=$1
mkdir -p "$out"
for arg in "" --relaxed-malloc --to-graph; do
  case $arg in --relaxed-malloc) tag=relaxed ;; --to-graph) tag=to-graph ;; *) tag=plain ;; esac
  "$PROG" $arg > "$out/$tag.ref" 2> "$out/$tag.ref.err" || { echo "FAIL: the program fails without capuchin"; cat "$out/$tag.ref.err"; exit 1; }
  run() {  # NAME ENV...: the program under the interposer with ENV
    name=$1; shift
    env "$@" CAPUCHIN_TIMING_EVERY=1 CAPUCHIN_LOG=info CAPUCHIN_DECISION_LOG="$out/$tag.$name.decisions.jsonl" \
      LD_PRELOAD="$PRELOAD" "$PROG" $arg > "$out/$tag.$name.out" 2> "$out/$tag.$name.err" || {
      echo "FAIL ($tag, $name): the program failed under capuchin"; tail -20 "$out/$tag.$name.err"; exit 1; }
    cmp -s "$out/$tag.ref" "$out/$tag.$name.out" || {
      echo "FAIL ($tag, $name): output differs"; diff "$out/$tag.ref" "$out/$tag.$name.out" || true; exit 1; }
  }
  run capture CAPUCHIN_RECORD="$out/$tag.trace.jsonl"
  # Captured work is in the trace once per graph launch (3 bumps, 2 launches), never at capture.
  bumps=$(grep -c '"name":"bump"' "$out/$tag.trace.jsonl" || true)
  [ "$bumps" = 6 ] || { echo "FAIL ($tag): $bumps bump launches in the trace, expected 6 (3 captured x 2 graph launches)"; exit 1; }
  for backend in uvm pinned; do
    run "$backend" CAPUCHIN_BUDGET=6MiB CAPUCHIN_BACKEND=$backend
    grep -q 'executor summary' "$out/$tag.$backend.err" || { echo "FAIL ($tag, $backend): no executor"; cat "$out/$tag.$backend.err"; exit 1; }
    if [ "$tag" = relaxed ]; then
      grep -Eq '"reason": ?"capture-in-progress"' "$out/$tag.$backend.decisions.jsonl" || {
        echo "FAIL ($tag, $backend): the relaxed cudaMalloc during the capture was not left to the driver"; exit 1; }
    fi
  done
done
echo capture-threads-ok
