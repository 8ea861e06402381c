#!/bin/sh
# Checks that simcuda's runtime, the simblas vendor library and sim_mlp_train do not link
# libcuda.so.1: each reaches the driver only through dlopen + cuGetProcAddress_v2 (or dlsym).
# Usage: no_direct_driver_link_test.sh FILE...
status=0
for f in "$@"; do
  if [ ! -f "$f" ]; then echo "missing: $f"; status=1; continue; fi
  if readelf -d "$f" | grep NEEDED | grep -q 'libcuda\.so'; then
    echo "FAIL: $f has a DT_NEEDED entry for libcuda"; status=1
  else
    echo "ok: $f does not link libcuda"
  fi
done
exit $status
