#!/usr/bin/env bash
# deb_test.sh OUTDIR: `cpack -G DEB` in the build tree makes a .deb with the installed layout
# (usr/bin, usr/lib/capuchin, usr/include/capuchin, usr/share/doc/capuchin) and nothing else,
# sensible control fields (package, version, Depends on the C runtime and zlib, nothing
# test-only), and its unpacked capuchin finds its own interposer under usr/lib/capuchin.
# Exit 77 (skip) without dpkg-deb. Environment (set by ctest): CPACK, BUILD, VERSION, PRELOAD_PREFIX.
set -u
out=$1
command -v dpkg-deb > /dev/null || { echo "SKIP: no dpkg-deb"; exit 77; }
rm -rf "$out"; mkdir -p "$out"
sockdir=$(mktemp -d /tmp/capuchin-deb.XXXXXX)  # a socket path stays under 108 bytes
trap 'rm -rf "$sockdir"' EXIT
fails=0
check() {  # check DESCRIPTION CONDITION...
  local what=$1; shift
  if "$@"; then echo "ok   - $what"; else echo "FAIL - $what"; fails=$((fails + 1)); fi
}
if ! (cd "$BUILD" && "$CPACK" --config CPackConfig.cmake -G DEB -B "$out") > "$out/cpack.log" 2>&1; then
  echo "FAIL - cpack -G DEB"; cat "$out/cpack.log"; exit 1
fi
deb=$(ls "$out"/*.deb 2>/dev/null | head -n 1)
[ -n "$deb" ] || { echo "FAIL - no .deb written"; cat "$out/cpack.log"; exit 1; }
echo "package: $deb"
dpkg-deb -I "$deb" | sed -n '/Package:/,$p'
dpkg-deb -c "$deb" | awk '{ print $6 }' | grep -v '/$' | sed 's|^\./||' | sort > "$out/files.txt"
cat "$out/files.txt"

field() { dpkg-deb -f "$deb" "$1"; }
check "Package: capuchin" test "$(field Package)" = capuchin
check "Version: $VERSION" test "$(field Version)" = "$VERSION"
check "a Maintainer and a Description" test -n "$(field Maintainer)" -a -n "$(field Description)"
deps=$(field Depends)
check "Depends names the C library and zlib ($deps)" test -n "$(grep -E 'libc6' <<<"$deps" | grep -E 'zlib1g')"
check "Depends names nothing test-only" test -z "$(grep -Ei 'gtest|gmock|benchmark|cuda' <<<"$deps")"
for f in usr/bin/capuchin usr/bin/capuchind usr/lib/capuchin/libcapuchin.so usr/include/capuchin/trace.hpp \
         usr/share/doc/capuchin/README.md usr/share/doc/capuchin/TRACE_FORMAT.md; do
  check "contains $f" grep -qx "$f" "$out/files.txt"
done
extra=$(grep -vE '^usr/(bin/capuchind?|lib/capuchin/libcapuchin\.so|include/capuchin/[A-Za-z0-9_]+\.hpp|share/doc/capuchin/(README\.md|TRACE_FORMAT\.md|LICENSE|copyright))$' "$out/files.txt")
check "nothing else (tests, simcuda, benchmarks)${extra:+: $(echo $extra)}" test -z "$extra"

# Unpacked (not installed: the test must not change the machine), the package's capuchin finds
# its interposer in usr/lib/capuchin.
dpkg-deb -x "$deb" "$out/root"
check "the packaged capuchin runs (--version)" "$out/root/usr/bin/capuchin" --version
seen=$(LD_PRELOAD="${PRELOAD_PREFIX:-}" "$out/root/usr/bin/capuchin" run --socket "$sockdir/s.sock" --daemon-idle-exit 5 \
         -- sh -c 'printf %s "$LD_PRELOAD"' 2> "$out/run.err")
check "the packaged capuchin preloads usr/lib/capuchin/libcapuchin.so" test "${seen##*:}" = "$out/root/usr/lib/capuchin/libcapuchin.so"
pid=$("$out/root/usr/bin/capuchin" --socket "$sockdir/s.sock" status --json 2>/dev/null |
      python3 -c 'import json, sys; print(json.load(sys.stdin)["pid"])' 2>/dev/null)
[ -n "$pid" ] && kill "$pid" 2>/dev/null

if [ $fails -ne 0 ]; then echo "deb: $fails check(s) failed"; exit 1; fi
echo "deb-ok"
