#!/usr/bin/env bash
# `capuchin run` and PyTorch's allocator setting: the value of PYTORCH_CUDA_ALLOC_CONF (and
# PYTORCH_ALLOC_CONF) the job sees for the user's own, and the notes printed (cli/alloc_conf.hpp).
# Usage: alloc_conf_test.sh CAPUCHIN_BIN CAPUCHIND_BIN (environment: PRELOAD_PREFIX, set by ctest)
set -u
bin=$1 daemon=$2
tmp=$(mktemp -d)
sock=$tmp/s.sock
# One daemon of our own for all the runs (so none is started per run), stopped at the end.
"$daemon" --socket "$sock" --log-dir "$tmp" --idle-exit 60 > "$tmp/daemon.log" 2>&1 &
dpid=$!
trap 'kill "$dpid" 2>/dev/null; wait "$dpid" 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
fails=0
check() {  # check DESCRIPTION CONDITION...
  local what=$1; shift
  if "$@"; then echo "ok   - $what"; else echo "FAIL - $what"; fails=$((fails + 1)); fi
}

# job USER_VALUE|-: runs `capuchin run` with PYTORCH_CUDA_ALLOC_CONF set to USER_VALUE (unset
# for -); the job prints what it got; $seen is that, $notes capuchin's stderr.
job() {
  # PRELOAD_PREFIX: a sanitizer runtime that must come before libcapuchin.so (asan builds)
  local env=(env -u PYTORCH_CUDA_ALLOC_CONF -u PYTORCH_ALLOC_CONF "LD_PRELOAD=${PRELOAD_PREFIX:-}")
  [ "$1" = - ] || env+=("PYTORCH_CUDA_ALLOC_CONF=$1")
  seen=$("${env[@]}" "$bin" run --socket "$sock" -- \
           sh -c 'printf "%s|%s" "$PYTORCH_CUDA_ALLOC_CONF" "${PYTORCH_ALLOC_CONF-unset}"' 2> "$tmp/err")
  notes=$(grep 'PYTORCH' "$tmp/err")
}

job -
check "unset: backend:cudaMallocAsync" test "$seen" = "backend:cudaMallocAsync|unset"
check "unset: no note" test -z "$notes"

job "backend:cudaMallocAsync"
check "already async: unchanged, no note" test "$seen|$notes" = "backend:cudaMallocAsync|unset|"

job "expandable_segments:True"
check "expandable_segments dropped" test "$seen" = "backend:cudaMallocAsync|unset"
check "the note names expandable_segments:True" grep -q "note: PYTORCH_CUDA_ALLOC_CONF: dropped expandable_segments:True (native caching allocator only" <<<"$notes"

job "backend:native,max_split_size_mb:128,pinned_use_cuda_host_register:True"
check "native backend replaced, pinned option kept" \
  test "$seen" = "backend:cudaMallocAsync,pinned_use_cuda_host_register:True|unset"
check "the note says backend:native was replaced" grep -q "'backend:native' replaced by backend:cudaMallocAsync" <<<"$notes"
check "the note names max_split_size_mb:128" grep -q "dropped max_split_size_mb:128 (" <<<"$notes"

job "roundup_power2_divisions:[256:1,512:2,>:4], garbage_collection_threshold : 0.6,per_process_memory_fraction:0.9"
check "bracketed list and spaces: native options dropped, the rest kept" \
  test "$seen" = "backend:cudaMallocAsync,per_process_memory_fraction:0.9|unset"
check "one note names both" grep -q "dropped roundup_power2_divisions:\[256:1,512:2,>:4\], garbage_collection_threshold:0.6 (" <<<"$notes"

# Malformed: an option without a value, empty options, a key PyTorch does not know (kept for
# PyTorch to judge), a trailing comma.
job "expandable_segments,,pinned_num_register_threads:8,bogus_key,"
check "malformed options: native key dropped, empties dropped, unknown kept" \
  test "$seen" = "backend:cudaMallocAsync,pinned_num_register_threads:8,bogus_key|unset"
check "the note names the bare expandable_segments" grep -q "dropped expandable_segments (" <<<"$notes"

job "roundup_power2_divisions:[256:1,max_split_size_mb:64"
check "unbalanced brackets: left unchanged" test "$seen" = "roundup_power2_divisions:[256:1,max_split_size_mb:64|unset"
check "unbalanced brackets: said so" grep -q "unbalanced brackets: left unchanged (PyTorch will reject it)" <<<"$notes"

job "   "
check "blank: as unset" test "$seen|$notes" = "backend:cudaMallocAsync|unset|"

# PyTorch 2.9's PYTORCH_ALLOC_CONF is merged too (which of the two PyTorch reads first varies).
seen=$(env -u PYTORCH_CUDA_ALLOC_CONF PYTORCH_ALLOC_CONF="expandable_segments:True,backend:native" LD_PRELOAD="${PRELOAD_PREFIX:-}" \
         "$bin" run --socket "$sock" -- sh -c 'printf "%s|%s" "$PYTORCH_CUDA_ALLOC_CONF" "$PYTORCH_ALLOC_CONF"' 2> "$tmp/err")
check "PYTORCH_ALLOC_CONF merged as well" test "$seen" = "backend:cudaMallocAsync|backend:cudaMallocAsync"
check "its note names it" grep -q "note: PYTORCH_ALLOC_CONF: dropped expandable_segments:True" "$tmp/err"

[ "$fails" -eq 0 ] && echo "all ok" || { echo "$fails failed"; exit 1; }
