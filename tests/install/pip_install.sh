#!/usr/bin/env bash
# pip_install.sh OUTDIR: the Python package as a user gets it. An sdist is made from this
# checkout with scikit-build-core (from the Python package index, into a fresh venv: exit 77,
# a skip, when it cannot be obtained), the wheel is built from that sdist (the whole project
# again, tests/simcuda/benchmarks/GPU programs left out), then installed into another fresh venv
# where `capuchin --version` and `capuchin run` over a simcuda job (sim_mlp_train at half its
# natural peak, which fails without capuchin) must work with the wheel's own libcapuchin.so and
# capuchind. Prints how long the wheel build took.
# Runs only with CAPUCHIN_TEST_PIP=1 (else exit 77, a skip): the wheel build costs about 4 of
# CI's 20 minutes on 2 cores, and the installed layout itself is checked by install.layout.
# Environment (set by ctest): SRC, TRAIN, LD_LIBRARY_PATH (simcuda), PYTHON (python3).
set -u
if [ "${CAPUCHIN_TEST_PIP:-0}" != 1 ]; then
  echo "skipped: set CAPUCHIN_TEST_PIP=1 to build the wheel and install it into a fresh venv (about 4 minutes on 2 cores)"
  exit 77
fi
out=$1
rm -rf "$out"; mkdir -p "$out"
tmp=$(mktemp -d /tmp/capuchin-pip.XXXXXX)  # short socket paths; the venvs
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
py=${PYTHON:-python3}
pipq=(--disable-pip-version-check --no-input -q)

# ---- scikit-build-core, or a skip -----------------------------------------------------------
if ! "$py" -m venv "$tmp/build-venv" > "$out/venv.log" 2>&1; then
  echo "FAIL - $py -m venv does not work (Debian: the python3-venv package; scripts/install-deps.sh installs it)"
  cat "$out/venv.log"; exit 1
fi
if ! "$tmp/build-venv/bin/pip" install "${pipq[@]}" --timeout 15 --retries 1 "scikit-build-core>=0.10" > "$out/skbuild.log" 2>&1; then
  echo "SKIP: scikit-build-core cannot be obtained from the package index (no network?)"
  tail -n 3 "$out/skbuild.log"
  exit 77
fi

# ---- sdist, then the wheel from it ----------------------------------------------------------
(cd "$SRC" && "$tmp/build-venv/bin/python" -c 'import sys, scikit_build_core.build as b; print(b.build_sdist(sys.argv[1]))' "$out/dist") \
  > "$out/sdist.log" 2>&1
sdist=$(ls "$out"/dist/*.tar.gz 2>/dev/null | head -n 1)
[ -n "$sdist" ] || { echo "FAIL - no sdist"; cat "$out/sdist.log"; exit 1; }
check "the sdist is named capuchin_gpu-<version>.tar.gz" grep -q '/capuchin_gpu-[0-9.]*\.tar\.gz$' <<<"$sdist"
start=$(date +%s)
# build-dir: kept, so what was built can be checked below.
if ! "$tmp/build-venv/bin/pip" wheel "${pipq[@]}" --no-build-isolation --no-deps -w "$out/wheels" \
       --config-settings=build-dir="$out/wheel-build" "$sdist" > "$out/wheel.log" 2>&1; then
  echo "FAIL - building the wheel from $sdist"; tail -n 40 "$out/wheel.log"; exit 1
fi
echo "wheel build: $(( $(date +%s) - start )) s"
wheel=$(ls "$out"/wheels/capuchin_gpu-*.whl 2>/dev/null | head -n 1)
[ -n "$wheel" ] || { echo "FAIL - no wheel written"; exit 1; }
echo "wheel: $wheel"
"$py" -c 'import sys, zipfile; print("\n".join(sorted(zipfile.ZipFile(sys.argv[1]).namelist())))' "$wheel" | tee "$out/wheel-files.txt"
check "the wheel is for any Python 3 (py3-none)" grep -q -- '-py3-none-linux_[a-z0-9_]*\.whl$' <<<"$wheel"
extra=$(grep -vE '^capuchin_gpu-[0-9.]+\.(data/scripts/capuchind?|data/data/lib/capuchin/libcapuchin\.so|dist-info/.*)$' "$out/wheel-files.txt")
check "the wheel holds capuchin, capuchind and libcapuchin.so only${extra:+ (also: $(echo $extra))}" test -z "$extra"
check "... all three" test "$(grep -cE 'scripts/capuchind?$|libcapuchin\.so$' "$out/wheel-files.txt")" = 3
check "the wheel was built here, now (its build tree has bin/capuchin)" test -x "$out/wheel-build/bin/capuchin"
built=$(find "$out/wheel-build" \( -name 'libcuda.so*' -o -name 'sim_mlp_train' -o -name '*_tests' -o -name 'bench_*' \) | head -n 3)
check "the wheel build built nothing test-only${built:+ (built: $(echo $built))}" test -z "$built"

# ---- a user's fresh environment -------------------------------------------------------------
"$py" -m venv "$tmp/user"
if ! "$tmp/user/bin/pip" install "${pipq[@]}" --no-index "$wheel" > "$out/install.log" 2>&1; then
  echo "FAIL - pip install $wheel"; cat "$out/install.log"; exit 1
fi
U=$tmp/user
check "pip put capuchin and capuchind into the venv's bin/" test -x "$U/bin/capuchin" -a -x "$U/bin/capuchind"
check "... and libcapuchin.so into its lib/capuchin/" test -f "$U/lib/capuchin/libcapuchin.so"
version=$(env PATH="$U/bin:$PATH" capuchin --version 2>&1)
echo "$version"
check "capuchin --version (from the venv's PATH)" grep -qE '^capuchin [0-9]+\.[0-9]+\.[0-9]+ \(commit [^,]+, CUDA headers [0-9.]+\)$' <<<"$version"

train=("$TRAIN" --depth 4 --width 64 --batch 2048 --iters 6 --seed 7)
peak=$("${train[@]}" --print-peak)
half=$((peak / 2))
"${train[@]}" > "$out/reference.txt" || { echo "FAIL - the reference run failed"; exit 1; }
SIMCUDA_DEVICE_BYTES=$half "${train[@]}" > "$out/plain-half.txt" 2>&1
rc=$?
check "without capuchin the job runs out of memory in $half bytes" test $rc -ne 0 -a -n "$(grep 'out of memory' "$out/plain-half.txt")"
sock=$tmp/s.sock
# As a user of the venv would: `capuchin` from PATH, nothing pointing at the build tree.
(cd / && env -u CAPUCHIN_INTERPOSER -u CAPUCHIN_DAEMON -u CAPUCHIN_SOCKET PATH="$U/bin:$PATH" \
   SIMCUDA_DEVICE_BYTES=$half CAPUCHIN_LOG=info \
   capuchin run --socket "$sock" --daemon-idle-exit 30 --budget "$half" -- "${train[@]}" > "$out/run.txt" 2> "$out/run.err")
rc=$?
dpid=$("$U/bin/capuchin" --socket "$sock" status --json 2>/dev/null | "$py" -c 'import json, sys; print(json.load(sys.stdin)["pid"])' 2>/dev/null)
[ -n "$dpid" ] && daemons+=("$dpid")
check "capuchin run (the venv's): exit 0" test $rc -eq 0
check "... output bit-identical to the unconstrained run" cmp -s "$out/reference.txt" "$out/run.txt"
check "... the wheel's interposer ran the executor (executor summary)" grep -q "executor summary" "$out/run.err"
check "... the daemon started is the wheel's capuchind" \
  test -n "$dpid" -a "$(readlink "/proc/$dpid/exe" 2>/dev/null)" = "$U/bin/capuchind"
seen=$(PATH="$U/bin:$PATH" capuchin run --socket "$sock" -- sh -c 'printf %s "$LD_PRELOAD"')
check "... the job preloads the wheel's libcapuchin.so ($seen)" test "${seen##*:}" = "$U/lib/capuchin/libcapuchin.so"

if [ $fails -ne 0 ]; then
  echo "--- run.err"; tail -n 20 "$out/run.err" 2>/dev/null
  echo "pip-install: $fails check(s) failed"
  exit 1
fi
rm -rf "$out/wheel-build"  # a quarter of a GiB of objects; kept only when a check failed
echo "pip-install-ok"
