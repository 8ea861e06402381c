#!/bin/sh
# sim_trace_replay_test.sh REPLAY DATA OUTDIR: the replay of real-model traces is a sound test
# bed before anything runs under it:
#   1. each trace (resnet18, mobilenet_v2, tiny_transformer from DATA) prints exactly one
#      `iter N loss <hex>` line per iteration and a final `weights <hex>` line, nothing else;
#   2. the output is the same on a second run and with every allocator mode (async, sync,
#      caching) and sync option: nothing in it depends on addresses or timing;
#   3. one changed byte (a stale or lost page) changes the output: after the first write of an
#      iteration (the batch upload) and after the 40th (an activation); in small traces, also
#      in a read of a kernel split over several launches with a single output, and in a
#      tensor the last iteration makes and keeps; a partial d2d copy, a trace that frees the
#      previous iteration's gradients, and touch lists give the same output with every
#      allocator;
#   4. bad input gets a clear error and exit 1: a missing file, a broken line (named), a trace
#      without an `iter`, a trace whose last iteration cannot be repeated.
# Environment: LD_LIBRARY_PATH reaches simcuda; SANITIZED=1 (CI time) leaves 1. to 3. on the
# real models to the release build: they test the test bed's own determinism (33 s under ASan
# when the replay program was instrumented, the phase's third-longest test); capuchin_core's
# trace loading on real models runs sanitized in the interpose.exec_replay_* tests. The small
# traces and the bad input (4.) still run there.
set -eu
replay=$1; data=$2; out=$3
rm -rf "$out"; mkdir -p "$out"
fail() { echo "FAIL: $*"; exit 1; }
models="resnet18-b16 tiny_transformer-b8 mobilenet_v2-b16"
[ "${SANITIZED:-0}" = 1 ] && models=""
for model in $models; do
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
# Small traces for the edge cases (3.). split: 30 tensors read by one kernel writing one.
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
def write(name, events):
    with open(f"{out}/{name}.jsonl", "w") as f:
        f.write(json.dumps({"format": "capuchin-trace", "version": 1}) + "\n")
        for e in events: f.write(json.dumps(e) + "\n")
ev = [{"op": "alloc", "id": 0, "bytes": 8192}, {"op": "iter", "n": 1}]
for i in range(1, 31): ev += [{"op": "alloc", "id": i, "bytes": 8192}, {"op": "kernel", "name": "w", "reads": [], "writes": [i]}]
ev += [{"op": "kernel", "name": "sum", "reads": list(range(1, 31)), "writes": [0]}] + [{"op": "free", "id": i} for i in range(1, 31)]
write("split", ev)
write("keep", [{"op": "alloc", "id": 0, "bytes": 8192}, {"op": "alloc", "id": 5, "bytes": 8192}, {"op": "iter", "n": 1},
               {"op": "kernel", "name": "t", "touch": [0]}, {"op": "free", "id": 5}, {"op": "iter", "n": 2},
               {"op": "alloc", "id": 2, "bytes": 8192}, {"op": "kernel", "name": "t", "touch": [0, 2]}])
write("d2d", [{"op": "alloc", "id": 0, "bytes": 16384}, {"op": "iter", "n": 1},
              {"op": "alloc", "id": 9, "bytes": 16384}, {"op": "kernel", "name": "w", "reads": [], "writes": [9]}, {"op": "free", "id": 9},
              {"op": "alloc", "id": 1, "bytes": 16384}, {"op": "kernel", "name": "w", "reads": [], "writes": [1]},
              {"op": "alloc", "id": 2, "bytes": 16384}, {"op": "copy", "dir": "d2d", "bytes": 4096, "src": 1, "dst": 2},
              {"op": "kernel", "name": "r", "reads": [2], "writes": [0]}, {"op": "copy", "dir": "d2h", "bytes": 4, "src": 0},
              {"op": "free", "id": 1}, {"op": "free", "id": 2}])
write("gradfree", [{"op": "alloc", "id": 0, "bytes": 8192}, {"op": "iter", "n": 1}, {"op": "alloc", "id": 1, "bytes": 8192},
                   {"op": "kernel", "name": "bwd", "reads": [0], "writes": [1]}, {"op": "kernel", "name": "opt", "reads": [1], "writes": [0]},
                   {"op": "iter", "n": 2}, {"op": "free", "id": 1}, {"op": "alloc", "id": 2, "bytes": 8192},
                   {"op": "kernel", "name": "bwd", "reads": [0], "writes": [2]}, {"op": "kernel", "name": "opt", "reads": [2], "writes": [0]}])
PY
for small in split keep d2d gradfree; do
  "$replay" --trace "$out/$small.jsonl" --iters 3 > "$out/$small.ref" || fail "$small: exit $?"
  for a in sync caching; do
    "$replay" --trace "$out/$small.jsonl" --iters 3 --alloc $a > "$out/$small.run" || fail "$small --alloc $a: exit $?"
    cmp -s "$out/$small.ref" "$out/$small.run" || fail "$small: --alloc $a gives another output"
  done
done
# keep: write 2 is the kept tensor's; with one iteration it is alive at the end (later ones
# replace it), so only the weights line can show it.
for case in "split 5 3" "split 20 3" "keep 2 1"; do
  set -- $case
  "$replay" --trace "$out/$1.jsonl" --iters $3 > "$out/$1.ref1" || fail "$1: exit $?"
  "$replay" --trace "$out/$1.jsonl" --iters $3 --perturb-write $2 > "$out/$1.bad" 2> /dev/null || fail "$1: perturbed run exit $?"
  cmp -s "$out/$1.ref1" "$out/$1.bad" && fail "$1: one changed byte after write $2 left the output unchanged"
done
echo "small traces: split kernels, kept tensors, partial copies, freed gradients ok"
rc=0; "$replay" --trace /nonexistent.jsonl > /dev/null 2> "$out/err1" || rc=$?
[ $rc -eq 1 ] && grep -q "nonexistent" "$out/err1" || fail "missing file: exit $rc, $(cat "$out/err1")"
printf '{"format":"capuchin-trace","version":1}\n{"op":"alloc","id":0,"bytes":64}\n{"op":"iter","n":1}\n{"op":"kernel","name":"k","reads":[7]}\n' > "$out/bad.jsonl"
rc=0; "$replay" --trace "$out/bad.jsonl" > /dev/null 2> "$out/err2" || rc=$?
[ $rc -eq 1 ] && grep -q "bad.jsonl:4" "$out/err2" || fail "broken line: exit $rc, $(cat "$out/err2")"
printf '{"format":"capuchin-trace","version":1}\n{"op":"alloc","id":0,"bytes":64}\n' > "$out/noiter.jsonl"
rc=0; "$replay" --trace "$out/noiter.jsonl" > /dev/null 2> "$out/err3" || rc=$?
[ $rc -eq 1 ] && grep -q "no .iter." "$out/err3" || fail "no iter: exit $rc, $(cat "$out/err3")"
printf '{"format":"capuchin-trace","version":1}\n{"op":"alloc","id":0,"bytes":64}\n{"op":"iter","n":1}\n{"op":"alloc","id":1,"bytes":64}\n{"op":"iter","n":2}\n{"op":"free","id":1}\n' > "$out/norepeat.jsonl"
rc=0; "$replay" --trace "$out/norepeat.jsonl" > /dev/null 2> "$out/err4" || rc=$?
[ $rc -eq 1 ] && grep -q "norepeat.jsonl: the last iteration frees 1 tensors.*cannot be repeated" "$out/err4" ||
  fail "unrepeatable trace: exit $rc, $(cat "$out/err4")"
echo "sim_trace_replay: ok"
