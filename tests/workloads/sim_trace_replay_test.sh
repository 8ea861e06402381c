#!/bin/sh
# sim_trace_replay_test.sh REPLAY DATA OUTDIR: the replay of real-model traces is a sound test
# bed before anything runs under it:
#   1. each trace (resnet18, mobilenet_v2, tiny_transformer from DATA) prints exactly one
#      `iter N loss <hex>` line per iteration and a final `weights <hex>` line, nothing else;
#   2. the output is the same on a second run and with every allocator mode (async, sync,
#      caching) and sync option: nothing in it depends on addresses or timing;
#   3. one changed byte (a stale or lost page) changes the output: in a batch upload, in an
#      activation, and in the optimizer's last write;
#   4. bad input gets a clear error and exit 1: a missing file, a broken line (named), a trace
#      without an `iter`.
# Environment: LD_LIBRARY_PATH reaches simcuda.
set -eu
replay=$1; data=$2; out=$3
rm -rf "$out"; mkdir -p "$out"
fail() { echo "FAIL: $*"; exit 1; }
for model in resnet18-b16 tiny_transformer-b8 mobilenet_v2-b16; do
  t="$data/$model.jsonl.gz"
  "$replay" --trace "$t" --iters 3 > "$out/$model.ref" || fail "$model: exit $?"
  [ "$(grep -c '^iter [1-3] loss [0-9a-f]\{16\}$' "$out/$model.ref")" -eq 3 ] || fail "$model: not 3 iter lines"
  [ "$(wc -l < "$out/$model.ref")" -eq 4 ] && tail -1 "$out/$model.ref" | grep -q '^weights [0-9a-f]\{16\}$' ||
    fail "$model: output is not 3 iter lines and a weights line: $(cat "$out/$model.ref")"
  [ "$(grep '^iter' "$out/$model.ref" | cut -d' ' -f4 | sort -u | wc -l)" -eq 3 ] || fail "$model: the loss does not change between iterations"
  [ "$model" = mobilenet_v2-b16 ] && continue  # the largest: its output and format are enough
  for opts in "--alloc async" "--alloc sync" "--alloc caching" "--alloc caching --syncs loss" "--syncs loss,batch,device"; do
    "$replay" --trace "$t" --iters 3 $opts > "$out/$model.run" || fail "$model $opts: exit $?"
    cmp -s "$out/$model.ref" "$out/$model.run" || fail "$model $opts: output differs from --alloc async"
  done
  for k in 1 40 100000; do
    "$replay" --trace "$t" --iters 3 --perturb-write $k > "$out/$model.bad" 2> "$out/$model.bad.err" || fail "$model: perturbed run exit $?"
    if [ $k -eq 100000 ]; then  # past the iteration's last write: nothing changes, the run says nothing
      cmp -s "$out/$model.ref" "$out/$model.bad" && ! grep -q perturbed "$out/$model.bad.err" || fail "$model: perturbing nothing changed the output"
    else
      grep -q perturbed "$out/$model.bad.err" || fail "$model: write $k was not perturbed"
      cmp -s "$out/$model.ref" "$out/$model.bad" && fail "$model: one changed byte after write $k left the output unchanged"
    fi
  done
  echo "$model: deterministic over allocator and sync modes; one changed byte shows"
done
rc=0; "$replay" --trace /nonexistent.jsonl > /dev/null 2> "$out/err1" || rc=$?
[ $rc -eq 1 ] && grep -q "nonexistent" "$out/err1" || fail "missing file: exit $rc, $(cat "$out/err1")"
printf '{"format":"capuchin-trace","version":1}\n{"op":"alloc","id":0,"bytes":64}\n{"op":"iter","n":1}\n{"op":"kernel","name":"k","reads":[7]}\n' > "$out/bad.jsonl"
rc=0; "$replay" --trace "$out/bad.jsonl" > /dev/null 2> "$out/err2" || rc=$?
[ $rc -eq 1 ] && grep -q "bad.jsonl:4" "$out/err2" || fail "broken line: exit $rc, $(cat "$out/err2")"
printf '{"format":"capuchin-trace","version":1}\n{"op":"alloc","id":0,"bytes":64}\n' > "$out/noiter.jsonl"
rc=0; "$replay" --trace "$out/noiter.jsonl" > /dev/null 2> "$out/err3" || rc=$?
[ $rc -eq 1 ] && grep -q "no .iter." "$out/err3" || fail "no iter: exit $rc, $(cat "$out/err3")"
echo "sim_trace_replay: ok"
