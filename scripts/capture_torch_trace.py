#!/usr/bin/env python3
"""Capture a PyTorch training job on the CPU as a capuchin trace (../shared/TRACE_FORMAT.md).

Runs N training iterations (forward, backward, optimizer step) of a model on the CPU under a
TorchDispatchMode and writes every aten op as a `kernel` event with the storages it reads
and writes (storage identity, not tensor identity: views share their base's storage), flops
for convolutions and matrix products (torch.utils.flop_counter's formulas; elementwise ops
count one per output element), bytes moved, allocations when a storage first appears and
frees right after each storage's last use (as a refcounting framework frees them). The input
batch enters by an h2d copy, the loss leaves by a d2h copy and a sync. A `_foreach_*` op
(the optimizers' foreach=True) is recorded as the kernel launches PyTorch's multi_tensor_apply
makes of it on a GPU (scripts/foreach_launches.py; --kernel-args picks the limits of the
job's PyTorch build). Parameters, their
gradients and optimizer state are labelled with roles; 0-dim optimizer step counters (host
scalars) are left out. So a user can plan for a GPU they do not have:

    scripts/capture_torch_trace.py --model resnet18 --batch-size 32 --iterations 3 --out r18.jsonl.gz
    capuchin sim --trace r18.jsonl.gz --gpu h200 --budget 12GiB --policy vdnn

--model: small-cnn or mlp (defined here, no torchvision needed), any torchvision.models
name, or MODULE:CALLABLE returning an nn.Module (its input shape from --input-shape).
Exit status 0 on success, 1 with a message on bad input.
"""
import argparse
import gzip
import importlib
import json
import math
import os
import sys


def die(msg):
    print(f"capture_torch_trace: {msg}", file=sys.stderr)
    sys.exit(1)


try:
    import torch
    import torch.nn as nn
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten
except ImportError as e:  # pragma: no cover - the CI test skips before this
    die(f"torch is required ({e}); pip install torch")

try:
    from torch.utils.flop_counter import flop_registry
except ImportError:  # older torch
    flop_registry = {}

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from foreach_launches import SPLIT_EXCLUDED, TERNARY, base_name, launches, per_position, split_kernel  # noqa: E402


def replay_mark(func, name):
    """The kernel's `replay` field (docs/TRACE_FORMAT.md): False when re-running the op would not
    reproduce what it wrote because it draws random numbers (the `nondeterministic_seeded` tag,
    or by name where torch has no tags) or writes an argument in place (its schema says so);
    None (the field left out) otherwise, so that readers apply their list of operators known not
    to be replayable (include/capuchin/replayable.hpp: batch norm's running statistics, which
    the schema does not mark, and atomics) rather than a second copy of it kept here."""
    tags = getattr(func, "tags", ())
    seeded = getattr(torch.Tag, "nondeterministic_seeded", None) if hasattr(torch, "Tag") else None
    if seeded is not None and seeded in tags:
        return False
    if any(w in name for w in ("dropout", "bernoulli", "rand", "normal", "uniform_", "multinomial")):
        return False
    if any(a.alias_info is not None and a.alias_info.is_write for a in func._schema.arguments):
        return False
    return None


class SmallCNN(nn.Module):
    """A small CNN for 3x32x32 images (conv-bn-relu x3, pooling, linear)."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(inplace=True), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(64, num_classes)

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1))


class MLP(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Dropout(0.1), nn.Linear(512, 512), nn.GELU(),
                                 nn.Linear(512, num_classes))

    def forward(self, x):
        return self.net(x)


def build_model(name, num_classes, input_shape):
    if name == "small-cnn":
        return SmallCNN(num_classes), input_shape or (3, 32, 32)
    if name == "mlp":
        return MLP(num_classes), input_shape or (256,)
    if ":" in name:
        mod, _, attr = name.partition(":")
        try:
            fn = getattr(importlib.import_module(mod), attr)
        except (ImportError, AttributeError) as e:
            die(f"cannot load {name}: {e}")
        if not input_shape:
            die("--input-shape is required with MODULE:CALLABLE")
        return fn(), input_shape
    try:
        import torchvision
    except ImportError:
        die(f"unknown model '{name}' (torchvision is not installed; use small-cnn, mlp or MODULE:CALLABLE)")
    if not hasattr(torchvision.models, name):
        die(f"unknown model '{name}': not small-cnn, mlp or a torchvision.models name")
    return getattr(torchvision.models, name)(weights=None, num_classes=num_classes), input_shape or (3, 224, 224)


def foreach_launches(func, args, kwargs, out, kernel_args):
    """A `_foreach_*` op's tensor lists, the tensors outside them and its launches on a GPU
    (scripts/foreach_launches.py), or None for any other op. The lists are the schema's
    `Tensor[]` arguments, then the returned list of an out-of-place op; the fast route
    (multi_tensor_apply) needs one device and dtype, dense strided tensors and, at each
    position, the same sizes and strides in every list, else every position is its own launch."""
    if not func._schema.name.startswith("aten::_foreach_") or base_name(func._schema.name) in SPLIT_EXCLUDED:
        return None
    lists, constant, scalar_list = [], [], False
    for i, a in enumerate(func._schema.arguments):
        v = args[i] if i < len(args) else kwargs.get(a.name)
        kind = str(a.type)
        if kind == "List[Tensor]" and v is not None:
            lists.append(list(v))
        elif kind == "List[number]":
            scalar_list = True
        elif isinstance(v, torch.Tensor):
            constant.append(v)
    inputs = len(lists)
    if any(str(r.type) == "List[Tensor]" for r in func._schema.returns) and isinstance(out, (list, tuple)):
        lists.append(list(out))
    if not lists or not lists[0] or any(len(lst) != len(lists[0]) for lst in lists):
        return None
    if base_name(func._schema.name) in TERNARY and func._schema.overload_name == "Tensor":
        scalar_list = True  # its scalars tensor becomes a list of scalars (convert_tensor_to_scalar_list)
    first = lists[0][0]
    # (The argument lists decide the route, as PyTorch's can_use_fast_route does.)
    fast = len(lists) <= 5 and all(
        t.device == first.device and t.dtype == first.dtype and t.layout == torch.strided and t.is_contiguous()
        and t.shape == lists[0][p].shape for lst in lists[:inputs] for p, t in enumerate(lst))
    numels = [t.numel() for t in lists[0]]
    plan = launches(numels, len(lists), kernel_args, scalar_list) if fast else per_position(numels)
    return lists, constant, plan


ALLOC_ONLY = {"aten::empty", "aten::empty_like", "aten::empty_strided", "aten::new_empty",
              "aten::new_empty_strided"}


class Recorder(TorchDispatchMode):
    """Records aten ops as trace events with storage ids."""

    def __init__(self, kernel_args="32kb"):
        super().__init__()
        self.kernel_args = kernel_args  # foreach launch limits (foreach_launches.py)
        self.events = []     # dicts in issue order (frees are added at the end)
        self.ids = {}        # storage cdata -> (id, StorageWeakRef)
        self.bytes = {}      # id -> bytes
        self.died = set()    # ids whose storage is known to be gone
        self.last_use = {}   # id -> index in events of its last access
        self.next_id = 0
        self.excluded = set()  # ids left out (host scalars)
        self.role = {}

    # Storage identity: a cdata seen before names the same storage unless that one died.
    def storage_id(self, t, create=True):
        s = t.untyped_storage()
        key = s._cdata
        known = self.ids.get(key)
        if known is not None and not known[1].expired():
            return known[0], False
        if known is not None:
            self.died.add(known[0])
        if not create:
            return None, False
        sid = self.next_id
        self.next_id += 1
        self.ids[key] = (sid, StorageWeakRef(s))
        self.bytes[sid] = max(int(s.nbytes()), 1)
        return sid, True

    def alloc(self, t, role=None):
        sid, new = self.storage_id(t)
        if new:
            ev = {"op": "alloc", "id": sid, "bytes": self.bytes[sid]}
            if role:
                self.role[sid] = role
            self.events.append(ev)
            self.last_use[sid] = len(self.events) - 1
        return sid

    def touch(self, sid):
        self.last_use[sid] = len(self.events) - 1

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func._schema.name
        in_tensors = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
        out_tensors = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
        if name == "aten::_local_scalar_dense":  # .item(): the value goes to the host
            sid = self.alloc(in_tensors[0])
            self.events.append({"op": "copy", "dir": "d2h", "bytes": in_tensors[0].element_size(), "src": sid})
            self.touch(sid)
            self.events.append({"op": "sync"})
            return out
        # Arguments the schema marks as written (in-place and out= ops).
        written_args = set()
        flat_schema_args = func._schema.arguments
        for i, a in enumerate(flat_schema_args):
            if a.alias_info is not None and a.alias_info.is_write:
                v = args[i] if i < len(args) else kwargs.get(a.name)
                for t in tree_flatten(v)[0]:
                    if isinstance(t, torch.Tensor):
                        written_args.add(id(t))
        reads, writes, new = [], [], []
        for t in in_tensors:
            sid = self.alloc(t)  # a storage first seen as an input (created outside the mode)
            if id(t) in written_args:
                if sid not in writes:
                    writes.append(sid)
                if sid not in reads:
                    reads.append(sid)  # in-place ops read what they overwrite
            elif sid not in reads:
                reads.append(sid)
        for t in out_tensors:
            sid, fresh = self.storage_id(t)
            if fresh:
                new.append((sid, t))
                if sid not in writes:
                    writes.append(sid)
        if not new and not writes:
            return out  # a view or metadata op: no kernel runs
        for sid, _ in new:
            self.events.append({"op": "alloc", "id": sid, "bytes": self.bytes[sid]})
            self.last_use[sid] = len(self.events) - 1
        if name in ALLOC_ONLY:
            return out
        moved = sum(t.numel() * t.element_size() for t in in_tensors) + \
            sum(t.numel() * t.element_size() for t in out_tensors)
        flops = None
        formula = flop_registry.get(func.overloadpacket)
        if formula is not None:
            try:
                flops = int(formula(*args, **kwargs, out_val=out))
            except Exception:  # a formula that does not fit this overload: count elements
                flops = None
        if flops is None:
            flops = max((t.numel() for t in out_tensors), default=0)
        ev = {"op": "kernel", "name": name, "reads": reads, "writes": writes, "bytes": moved}
        if replay_mark(func, name) is False:
            ev["replay"] = False
        if flops:
            ev["flops"] = flops
        pieces = [ev]
        found = foreach_launches(func, args, kwargs, out, self.kernel_args)
        if found is not None:  # one kernel event per launch, as a GPU runs the op
            lists, constant, plan = found
            sid_lists = [[self.storage_id(t, create=False)[0] for t in lst] for lst in lists]
            sid_const = [self.storage_id(t, create=False)[0] for t in constant]
            pieces = split_kernel(ev, sid_lists, plan, sid_const)
        for piece in pieces:  # a storage's last use is the last launch that touches it
            self.events.append(piece)
            for sid in piece["reads"] + piece["writes"]:
                self.touch(sid)
        return out


def write_trace(path, header, rec):
    drop = rec.excluded
    # Frees right after each dead storage's last use.
    frees_after = {}
    for key, (sid, ref) in rec.ids.items():
        if ref.expired():
            rec.died.add(sid)
    # Storages no op ever accessed (scalars wrapped for a view op, say) are left out.
    accessed = set()
    for ev in rec.events:
        if ev["op"] == "kernel":
            accessed.update(ev["reads"], ev["writes"])
        elif ev["op"] == "copy":
            accessed.update(v for k, v in ev.items() if k in ("src", "dst"))
    drop = drop | {sid for sid in rec.died if sid not in accessed}
    for sid in rec.died:
        if sid not in drop:
            frees_after.setdefault(rec.last_use[sid], []).append(sid)
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8") as f:
        f.write(json.dumps(header) + "\n")
        for i, ev in enumerate(rec.events):
            op = ev["op"]
            if op == "alloc" and ev["id"] in drop:
                continue
            if op == "kernel":
                ev = dict(ev, reads=[s for s in ev["reads"] if s not in drop],
                          writes=[s for s in ev["writes"] if s not in drop])
                if not ev["reads"] and not ev["writes"]:
                    ev = None
            elif op == "copy" and ev.get("src") in drop:
                ev = None
            if op == "alloc" and ev["id"] in rec.role:
                ev = dict(ev, role=rec.role[ev["id"]])
            if ev is not None:
                f.write(json.dumps(ev, separators=(",", ":")) + "\n")
            for sid in sorted(frees_after.get(i, [])):
                f.write(json.dumps({"op": "free", "id": sid}, separators=(",", ":")) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="small-cnn")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--input-shape", default="", help="per-sample shape, e.g. 3,224,224")
    ap.add_argument("--num-classes", type=int, default=10)
    ap.add_argument("--optimizer", choices=["sgd", "adamw"], default="sgd")
    ap.add_argument("--out", required=True, help="trace file (.jsonl or .jsonl.gz)")
    ap.add_argument("--kernel-args", choices=["32kb", "4kb"], default="32kb",
                    help="the foreach launch limits of the PyTorch build the job runs: 32kb (built with "
                         "CUDA 13+, the default) or 4kb (CUDA 12, ROCm)")
    o = ap.parse_args()
    if o.batch_size <= 0 or o.iterations <= 0:
        die("--batch-size and --iterations must be positive")
    try:
        shape = tuple(int(x) for x in o.input_shape.split(",")) if o.input_shape else None
    except ValueError:
        die(f"--input-shape '{o.input_shape}' is not a comma-separated list of integers")

    torch.manual_seed(0)
    model, shape = build_model(o.model, o.num_classes, shape)
    model.train()
    if o.optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=True)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    loss_fn = nn.CrossEntropyLoss()
    batches = [(torch.randn(o.batch_size, *shape), torch.randint(0, o.num_classes, (o.batch_size,)))
               for _ in range(o.iterations)]

    rec = Recorder(o.kernel_args)
    with torch.no_grad():  # outside the mode: set-up allocations, no kernels
        for p in model.parameters():
            rec.alloc(p, "param")
        for b in model.buffers():
            rec.alloc(b, "other")
    with rec:
        for n in range(1, o.iterations + 1):
            rec.events.append({"op": "iter", "n": n})
            x, y = batches[n - 1]
            for t, role in ((x, "input"), (y, "input")):
                sid = rec.alloc(t, role)
                rec.events.append({"op": "copy", "dir": "h2d", "bytes": rec.bytes[sid], "dst": sid})
                rec.touch(sid)
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            for p in model.parameters():
                if p.grad is not None:
                    sid, _ = rec.storage_id(p.grad, create=False)
                    if sid is not None:
                        rec.role.setdefault(sid, "grad")
            opt.step()
            for state in opt.state.values():
                for k, v in state.items():
                    if isinstance(v, torch.Tensor):
                        sid, _ = rec.storage_id(v, create=False)
                        if sid is None:
                            continue
                        if k == "step" and v.dim() == 0:
                            rec.excluded.add(sid)  # a host scalar
                        else:
                            rec.role.setdefault(sid, "optim")
            loss.item()
            del loss, x, y, t
        opt.zero_grad(set_to_none=True)  # gradients die after the last step, as in every iteration
        batches.clear()
    import gc
    gc.collect()
    header = {"format": "capuchin-trace", "version": 1, "source": "torch-dispatch", "model": o.model,
              "batch_size": o.batch_size, "dtype": "float32", "iterations": o.iterations,
              "foreach_launches": o.kernel_args,
              "notes": f"captured on the CPU with torch {torch.__version__} by scripts/capture_torch_trace.py; "
                       "frees placed after last use; foreach ops as the launches of multi_tensor_apply"}
    write_trace(o.out, header, rec)
    kernels = sum(1 for e in rec.events if e["op"] == "kernel")
    print(f"wrote {o.out}: {o.iterations} iterations, {kernels} kernels, {rec.next_id - len(rec.excluded)} allocations")


if __name__ == "__main__":
    main()
