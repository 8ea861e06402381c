#!/usr/bin/env bash
# install_layout.sh OUTDIR: `cmake --install` into a prefix, the prefix MOVED elsewhere, then the
# demo's workload run from there as a user would: the installed `capuchin run` preloads the
# installed libcapuchin.so and starts the installed capuchind, and the job (sim_mlp_train on
# simcuda at half its natural peak, which fails without capuchin) trains to the unconstrained
# run's exact output under a budget. Also: nothing test-only is installed, every RPATH is
# relative ($ORIGIN), `ldd` resolves every installed binary, and a `capuchin` copied away from
# its prefix says what it looked for and how to point it (CAPUCHIN_INTERPOSER, CAPUCHIN_DAEMON).
# Environment (set by ctest): CMAKE, BUILD (the build tree), SRC (the source tree), TRAIN,
# LD_LIBRARY_PATH (simcuda), PRELOAD_PREFIX (a sanitizer runtime to preload first, asan builds).
set -u
out=$1
rm -rf "$out"; mkdir -p "$out"
# Sockets and the moved prefix live under /tmp: a Unix socket path must stay under 108 bytes
# wherever the build tree is, and the move crosses to another directory tree.
tmp=$(mktemp -d /tmp/capuchin-install.XXXXXX)
daemons=()
cleanup() {
  for p in "${daemons[@]}"; do kill "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
fails=0
check() {  # check DESCRIPTION CONDITION...
  local what=$1; shift
  if "$@"; then echo "ok   - $what"; else echo "FAIL - $what"; fails=$((fails + 1)); fi
}
# daemon_pid SOCKET: the pid of the capuchind answering there (capuchin status --json).
daemon_pid() {
  "$P/bin/capuchin" --socket "$1" status --json 2>/dev/null |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["pid"])' 2>/dev/null
}

# ---- install, then move the prefix --------------------------------------------------------
if ! "$CMAKE" --install "$BUILD" --prefix "$out/staged" > "$out/install.log" 2>&1; then
  echo "FAIL - cmake --install $BUILD"; cat "$out/install.log"; exit 1
fi
if [ ! -d "$out/staged" ]; then echo "FAIL - cmake --install installed nothing"; cat "$out/install.log"; exit 1; fi
mkdir -p "$tmp/moved"
mv "$out/staged" "$tmp/moved/prefix"
P=$tmp/moved/prefix
echo "installed to $out/staged, moved to $P:"
(cd "$P" && find . -type f -o -type l | sed 's|^\./||' | sort) | tee "$out/files.txt"

# ---- the layout: what a user needs, nothing test-only ---------------------------------------
check "bin/capuchin and bin/capuchind are executables" test -x "$P/bin/capuchin" -a -x "$P/bin/capuchind"
check "lib/capuchin/libcapuchin.so is installed" test -f "$P/lib/capuchin/libcapuchin.so"
for h in "$SRC"/include/capuchin/*.hpp; do
  [ -f "$P/include/capuchin/$(basename "$h")" ] || { echo "FAIL - header $(basename "$h") not installed"; fails=$((fails + 1)); }
done
check "the docs (README.md, TRACE_FORMAT.md) are in share/doc/capuchin" \
  test -f "$P/share/doc/capuchin/README.md" -a -f "$P/share/doc/capuchin/TRACE_FORMAT.md"
extra=$(grep -vE '^(bin/capuchind?|lib/capuchin/libcapuchin\.so|include/capuchin/[A-Za-z0-9_]+\.hpp|share/doc/capuchin/(README\.md|TRACE_FORMAT\.md|LICENSE))$' "$out/files.txt")
check "nothing else installed (tests, simcuda, benchmarks, GPU programs)${extra:+: $(echo $extra)}" test -z "$extra"

# ---- relocatable: no absolute RPATH/RUNPATH; every needed library resolves ------------------
for f in "$P/bin/capuchin" "$P/bin/capuchind" "$P/lib/capuchin/libcapuchin.so"; do
  paths=$(readelf -d "$f" | sed -n 's/.*(\(RPATH\|RUNPATH\)).*\[\(.*\)\]/\2/p' | tr ':' '\n')
  bad=$(grep -v '^\$ORIGIN' <<<"$paths" | grep -v '^$')
  check "$(basename "$f"): RPATH/RUNPATH only \$ORIGIN-relative${bad:+ (has $(echo $bad))}" test -z "$bad"
  missing=$(env -u LD_LIBRARY_PATH ldd "$f" 2>&1 | grep -E 'not found|not a dynamic')
  check "$(basename "$f"): ldd resolves every library${missing:+ ($(echo $missing))}" test -z "$missing"
done

# ---- the demo's workload from the moved prefix ----------------------------------------------
train=("$TRAIN" --depth 4 --width 64 --batch 2048 --iters 6 --seed 7)
peak=$("${train[@]}" --print-peak)
half=$((peak / 2))
"${train[@]}" > "$out/reference.txt" || { echo "FAIL - the reference run failed"; exit 1; }
SIMCUDA_DEVICE_BYTES=$half "${train[@]}" > "$out/plain-half.txt" 2>&1
rc=$?
check "without capuchin the job runs out of memory in $half bytes (so the run below needs it)" \
  test $rc -ne 0 -a -n "$(grep 'out of memory' "$out/plain-half.txt")"

sock=$tmp/a.sock
# From another directory, with nothing pointing at the build tree: the installed capuchin must
# find its own library and daemon. CAPUCHIN_LOG=info prints the executor's summary.
(cd / && env -u CAPUCHIN_INTERPOSER -u CAPUCHIN_DAEMON -u CAPUCHIN_SOCKET \
   SIMCUDA_DEVICE_BYTES=$half CAPUCHIN_LOG=info CAPUCHIN_DECISION_LOG="$out/decisions.jsonl" \
   LD_PRELOAD="${PRELOAD_PREFIX:-}" \
   "$P/bin/capuchin" run --socket "$sock" --daemon-idle-exit 30 --budget "$half" --record "$out/trace.jsonl.gz" \
   -- "${train[@]}" > "$out/run.txt" 2> "$out/run.err")
rc=$?
dpid=$(daemon_pid "$sock"); [ -n "$dpid" ] && daemons+=("$dpid")
check "installed capuchin run: exit 0" test $rc -eq 0
check "installed capuchin run: output bit-identical to the unconstrained run" cmp -s "$out/reference.txt" "$out/run.txt"
check "the interposer's executor ran (executor summary on stderr)" grep -q "executor summary" "$out/run.err"
check "it evicted under the budget (decision log has evict records)" grep -q '"action":"evict"' "$out/decisions.jsonl"
check "the recorded trace is valid (installed capuchin trace validate)" \
  "$P/bin/capuchin" trace validate "$out/trace.jsonl.gz"
check "the auto-started daemon is the installed capuchind" \
  test -n "$dpid" -a "$(readlink "/proc/$dpid/exe" 2>/dev/null)" = "$P/bin/capuchind"
"$P/bin/capuchin" --socket "$sock" sessions --all --json > "$out/sessions.json" 2>&1
check "the daemon has the job's session, with events" python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
sys.exit(not (len(s) == 1 and s[0]["events"] > 0))' "$out/sessions.json"
seen=$(LD_PRELOAD="${PRELOAD_PREFIX:-}" "$P/bin/capuchin" run --socket "$sock" -- sh -c 'printf %s "$LD_PRELOAD"')
check "the job preloads the installed libcapuchin.so (LD_PRELOAD=$seen)" test "${seen##*:}" = "$P/lib/capuchin/libcapuchin.so"

# ---- a capuchin copied away from its prefix -------------------------------------------------
mkdir -p "$tmp/lonely/bin"
cp "$P/bin/capuchin" "$tmp/lonely/bin/"
lonely=$tmp/lonely/bin/capuchin
env -u CAPUCHIN_INTERPOSER -u CAPUCHIN_DAEMON LD_PRELOAD="${PRELOAD_PREFIX:-}" \
  "$lonely" run --socket "$tmp/b.sock" -- true > /dev/null 2> "$out/lonely.err"
rc=$?
cat "$out/lonely.err"
check "copied capuchin without its library: exit 2" test $rc -eq 2
check "... says which paths it looked for" grep -qF "$tmp/lonely/lib/capuchin/libcapuchin.so" "$out/lonely.err"
check "... and how to point it (CAPUCHIN_INTERPOSER)" grep -q "CAPUCHIN_INTERPOSER=" "$out/lonely.err"
CAPUCHIN_INTERPOSER=$tmp/nowhere.so LD_PRELOAD="${PRELOAD_PREFIX:-}" "$lonely" run --socket "$tmp/b.sock" -- true 2> "$out/bad-env.err"
rc=$?
check "CAPUCHIN_INTERPOSER naming no file: exit 2, the variable named" \
  test $rc -eq 2 -a -n "$(grep -F "CAPUCHIN_INTERPOSER=$tmp/nowhere.so" "$out/bad-env.err")"
seen=$(CAPUCHIN_INTERPOSER=$P/lib/capuchin/libcapuchin.so CAPUCHIN_DAEMON=$P/bin/capuchind LD_PRELOAD="${PRELOAD_PREFIX:-}" \
         "$lonely" run --socket "$tmp/b.sock" --daemon-idle-exit 30 -- sh -c 'printf %s "$LD_PRELOAD"' 2> "$out/pointed.err")
dpid=$(daemon_pid "$tmp/b.sock"); [ -n "$dpid" ] && daemons+=("$dpid")
check "copied capuchin pointed by CAPUCHIN_INTERPOSER: the job preloads it" test "${seen##*:}" = "$P/lib/capuchin/libcapuchin.so"
check "... and CAPUCHIN_DAEMON: that capuchind is started" \
  test -n "$dpid" -a "$(readlink "/proc/$dpid/exe" 2>/dev/null)" = "$P/bin/capuchind"

if [ $fails -ne 0 ]; then
  echo "--- run.err"; tail -n 20 "$out/run.err"
  echo "install-layout: $fails check(s) failed"
  exit 1
fi
echo "install-layout-ok"
