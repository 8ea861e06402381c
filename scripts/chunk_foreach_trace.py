#!/usr/bin/env python3
"""Rewrite a trace's `aten::_foreach_*` kernels as the launches a GPU would run.

Traces captured before scripts/capture_torch_trace.py split foreach ops (../shared/traces/)
record each one as a single kernel touching every tensor of its lists; on a GPU PyTorch
launches it in pieces (scripts/foreach_launches.py says how), and the interposer sees those
launches. This converter recovers each op's tensor lists from the event and writes one kernel
event per launch; every other line is copied unchanged.

    scripts/chunk_foreach_trace.py IN.jsonl.gz OUT.jsonl.gz [--kernel-args 32kb|4kb]

--kernel-args: 32kb (PyTorch built with CUDA 13+, such as torch 2.15.0+cu132 from PyPI; the
default) or 4kb (PyTorch built with CUDA 12, or ROCm); scripts/foreach_launches.py says why.
What a trace cannot say, and is assumed: every foreach op took the fast route (one dtype, dense
tensors: true of a float32 model's parameters and optimizer state); no op passed a list of
scalars (whose 4 KB limit at depth 1 is 96 tensors, not 110); and a list passed twice was
passed once, but for addcmul/addcdiv's second and third (AdamW's grads, grads). Lists are
recovered from the capture's rule (reads in argument order, each storage once; an in-place op's
first list is what it writes, in its order); an event they cannot be recovered from (sizes that
differ between lists at a position, a tensor outside the lists, storages shared within a list)
is kept whole and counted on stderr, as is `_foreach_norm`. Traces whose reads are sorted by
storage id (../shared/traces/: an earlier capture sorted them) line up only where every list
was allocated in parameter order; where they do not, sizes usually differ and the op is kept
whole, but tensors of one size may be paired other than in the job (which of them share a
launch; not how many). Element counts are the storages' bytes over the
header's dtype size (float32 when absent).

Prints what it did (ops, launches, the largest launch's bytes before and after). Exit status 0
on success, 1 with a message on bad input; OUT is written to a temporary name and renamed, so a
failure leaves no partial file.
"""
import argparse
import gzip
import json
import os
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from foreach_launches import LIMITS, SPLIT_EXCLUDED, TERNARY, base_name, launches, split_kernel  # noqa: E402

DTYPE_BYTES = {"float32": 4, "float": 4, "tf32": 4, "float64": 8, "double": 8, "float16": 2, "half": 2,
               "bfloat16": 2, "bf16": 2, "fp16": 2, "fp32": 4, "int8": 1, "uint8": 1}


def die(msg):
    print(f"chunk_foreach_trace: {msg}", file=sys.stderr)
    sys.exit(1)


def infer_lists(ev):
    """(lists, depth) of a recorded foreach kernel, or None when its reads and writes do not show them."""
    reads, writes = ev.get("reads", []), ev.get("writes", [])
    n = len(writes)
    if n == 0 or len(set(writes)) != n:
        return None
    written = set(writes)
    if written <= set(reads):  # in place: list 0 is read and written, the other lists are read
        rest = [r for r in reads if r not in written]
        lists = [writes]
    elif not written & set(reads):  # out of place: the input lists, then the new outputs
        rest = reads
        lists = []
    else:
        return None
    if len(rest) % n:
        return None  # a tensor outside the lists (a scalar tensor): its place is not known
    inputs = [rest[i:i + n] for i in range(0, len(rest), n)]
    in_place = bool(lists)
    lists = lists + inputs if in_place else inputs + [writes]
    depth = len(lists)
    if base_name(ev["name"]) in TERNARY:  # its second and third lists may be one (shown once)
        depth = max(depth, 3 if in_place else 4)
    return lists, depth


def same_sizes(lists, size):
    """The fast route's rule, as far as a trace shows it: at each position every list's storage
    has list 0's size (one dtype assumed). False also where list 0 repeats a storage (views of
    one buffer), which the reads, naming each storage once, cannot place."""
    if len(set(lists[0])) != len(lists[0]):
        return False
    return all(size.get(lst[p]) == size.get(lists[0][p]) for lst in lists[1:] for p in range(len(lists[0])))


class Launches:
    """One op's launches, held until the frees that follow it are read: a storage freed after the
    op is freed after the last launch that touches it, where the capture frees it."""

    def __init__(self):
        self.pieces, self.frees = [], []

    def hold(self, pieces):
        self.pieces, self.frees = pieces, [[] for _ in pieces]

    def take(self, free):
        """Files a free that follows the held op; False when none is held."""
        if not self.pieces:
            return False
        last = len(self.pieces) - 1
        for k in range(last, -1, -1):
            if free["id"] in self.pieces[k]["reads"] or free["id"] in self.pieces[k]["writes"]:
                last = k
                break
        self.frees[last].append(free)
        return True

    def flush(self, out):
        for piece, frees in zip(self.pieces, self.frees):
            for ev in [piece] + frees:
                out.write(json.dumps(ev, separators=(",", ":")) + "\n")
        self.pieces, self.frees = [], []


def convert(src, dst, kernel_args):
    with open(src, "rb") as f:  # gzip by its magic bytes, as the trace reader decides
        opener_in = gzip.open if f.read(2) == b"\x1f\x8b" else open
    opener_out = gzip.open if dst.endswith(".gz") else open
    tmp = dst + ".partial"
    size = {}
    held = Launches()
    elem = None  # the dtype's size, from the header
    ops = kept_whole = launched = 0
    worst_before = worst_after = 0
    try:
        with opener_in(src, "rt", encoding="utf-8") as f, opener_out(tmp, "wt", encoding="utf-8") as out:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    ev = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{src}:{lineno}: not JSON ({e})")
                if not isinstance(ev, dict):
                    raise ValueError(f"{src}:{lineno}: not a JSON object")
                try:
                    if ev.get("op") == "alloc":
                        int(ev["id"]), int(ev["bytes"])
                    if ev.get("op") == "free":
                        int(ev["id"])
                    if ev.get("op") == "kernel" and not (isinstance(ev.get("reads", []), list)
                                                         and isinstance(ev.get("writes", []), list)):
                        raise TypeError("reads and writes must be lists")
                except (KeyError, TypeError, ValueError) as e:
                    raise ValueError(f"{src}:{lineno}: bad {ev.get('op')} event ({e!r})")
                if elem is None:  # the first non-blank line: the header
                    if ev.get("format") != "capuchin-trace":
                        raise ValueError(f"{src}:{lineno}: not a capuchin trace header")
                    if ev.get("foreach_launches"):
                        raise ValueError(f"{src}: foreach kernels already split ({ev['foreach_launches']})")
                    elem = DTYPE_BYTES.get(str(ev.get("dtype", "float32")).lower(), 4)
                    ev["foreach_launches"] = kernel_args
                    ev["notes"] = (ev.get("notes", "") + "; " if ev.get("notes") else "") + \
                        f"foreach kernels split into launches ({kernel_args} kernel arguments) by scripts/chunk_foreach_trace.py"
                    out.write(json.dumps(ev, separators=(",", ":")) + "\n")
                    continue
                op = ev.get("op")
                if op == "free" and held.take(ev):
                    continue
                held.flush(out)
                if op == "alloc":
                    size[ev["id"]] = int(ev["bytes"])
                if op != "kernel" or not str(ev.get("name", "")).startswith("aten::_foreach_"):
                    out.write(line if line.endswith("\n") else line + "\n")
                    continue
                ops += 1
                found = None if base_name(ev["name"]) in SPLIT_EXCLUDED else infer_lists(ev)
                if found is not None and not same_sizes(found[0], size):
                    found = None
                pieces = [ev]
                if found is None:
                    kept_whole += len(set(ev.get("reads", [])) | set(ev.get("writes", []))) > 1
                else:
                    lists, depth = found
                    numels = [size.get(s, 0) // elem for s in lists[0]]
                    pieces = split_kernel(ev, lists, launches(numels, depth, kernel_args))
                launched += len(pieces)
                tensor_bytes = lambda e: sum(size.get(s, 0) for s in set(e["reads"]) | set(e["writes"]))
                worst_before = max(worst_before, tensor_bytes(ev))
                worst_after = max(worst_after, max(tensor_bytes(p) for p in pieces))
                held.hold(pieces)
            held.flush(out)
            if elem is None:
                raise ValueError(f"{src}: empty (no header)")
        os.replace(tmp, dst)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return ops, launched, kept_whole, worst_before, worst_after


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--kernel-args", default="32kb", help="32kb (PyTorch built with CUDA 13+; default) or 4kb (CUDA 12)")
    o = ap.parse_args()
    if o.kernel_args not in LIMITS:
        die(f"--kernel-args must be one of {', '.join(sorted(LIMITS))}, not '{o.kernel_args}'")
    if os.path.abspath(o.input) == os.path.abspath(o.output):
        die("OUT must differ from IN (IN is never overwritten)")
    if not os.path.isfile(o.input):
        die(f"cannot read '{o.input}'")
    try:
        ops, launched, whole, before, after = convert(o.input, o.output, o.kernel_args)
    except (ValueError, OSError, EOFError, zlib.error) as e:
        die(str(e))
    print(f"wrote {o.output}: {ops} foreach kernels -> {launched} launches ({o.kernel_args} kernel arguments); "
          f"largest working set {before} -> {after} bytes")
    if whole:
        print(f"chunk_foreach_trace: {whole} foreach kernels kept whole (their lists could not be recovered)",
              file=sys.stderr)


if __name__ == "__main__":
    main()
