#!/usr/bin/env python3
"""memviz_check.py SNAPSHOT [options]: checks a PyTorch CUDA memory snapshot as
`capuchin export memory-viz` writes it, with the standard pickle module only (and, where
`import torch` works, with torch's own reader too).

What a snapshot must satisfy (the readers' assumptions: torch/cuda/_memory_viz.py's segsum
and trace, torch/utils/viz/MemoryViz.js's timeline and segment views):
  - a dict with 'segments' (list) and 'device_traces' (a list per device of entry dicts);
  - every entry has a known action and its fields with the right types (frames: a list of
    {filename: str, line: int, name: str}); time_us never goes back;
  - replayed in order: every alloc lies inside a mapped segment, overlaps no live block and
    is not live already; every free_requested matches a live alloc (same address and size)
    and is completed by a free_completed of the same; nothing is left half-freed;
  - the final segments are that replay's end: blocks tile each segment exactly (sum of sizes
    = total_size, addresses contiguous), allocated_size = the active blocks' sizes, the
    active blocks are exactly the allocations still live (address and requested size), and
    the segments are exactly the mapped ranges.
Options add expectations: --expect ACTION=TEXT (some ACTION entry's first frame names TEXT;
TEXT may hold alternatives a|b), --no-frame TEXT (no frame anywhere names TEXT),
--peak-eq/--peak-le BYTES (most live requested bytes on device 0), --devices N,
--tensor-frames (every alloc has a frame naming its tensor). --self-test also breaks the
snapshot in several ways and fails unless every broken copy is rejected.
Exit 0 when all holds, 1 with one line per problem otherwise.
"""
import argparse
import copy
import pickle
import sys

ACTIONS = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
           "segment_map", "segment_unmap", "snapshot", "oom"}
BLOCK_STATES = {"active_allocated", "active_pending_free", "inactive"}


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def check_frames(frames, where, errs):
    if not isinstance(frames, list):
        errs.append(f"{where}: frames is not a list")
        return
    for f in frames:
        if not (isinstance(f, dict) and isinstance(f.get("filename"), str) and is_int(f.get("line"))
                and isinstance(f.get("name"), str)):
            errs.append(f"{where}: a frame is not {{filename: str, line: int, name: str}}: {f!r}")
            return


def check_entry(e, where, errs):
    if not isinstance(e, dict) or e.get("action") not in ACTIONS:
        errs.append(f"{where}: not an entry with a known action: {e!r}"[:300])
        return False
    need = ["size", "stream", "time_us", "frames"] + (["device_free"] if e["action"] == "oom" else ["addr"])
    for k in need:
        if k not in e:
            errs.append(f"{where}: {e['action']} without '{k}'")
            return False
    for k in need:
        if k != "frames" and not (is_int(e[k]) and e[k] >= 0):
            errs.append(f"{where}: {k} is not a non-negative int: {e[k]!r}")
            return False
    check_frames(e["frames"], where, errs)
    return True


class Replay:
    """One device's trace replayed: live blocks, mapped ranges, peak of live requested bytes."""

    def __init__(self):
        self.live = {}      # addr -> size
        self.pending = set()
        self.mapped = []    # [start, end) ranges
        self.bytes = self.peak = 0

    def in_mapped(self, a, b):  # adjacent mapped ranges are one (an expandable segment grows)
        return any(s <= a and b <= e for s, e in self.merged())

    def overlaps(self, a, b):
        return [x for x, n in self.live.items() if x < b and a < x + n]

    def step(self, e, where, errs):
        act, addr, size = e["action"], e.get("addr"), e["size"]
        if act in ("segment_map", "segment_alloc"):
            if any(s < addr + size and addr < t for s, t in self.mapped):
                errs.append(f"{where}: {act} over mapped memory")
            self.mapped.append((addr, addr + size))
        elif act in ("segment_unmap", "segment_free"):
            if self.overlaps(addr, addr + size):
                errs.append(f"{where}: {act} of memory holding live blocks")
            self.unmap(addr, addr + size, where, errs)
        elif act == "alloc":
            if size <= 0 or addr in self.live:
                errs.append(f"{where}: alloc of {size} bytes at {addr:#x}, already live or empty")
            elif not self.in_mapped(addr, addr + size):
                errs.append(f"{where}: alloc at {addr:#x} outside every mapped segment")
            elif self.overlaps(addr, addr + size):
                errs.append(f"{where}: alloc at {addr:#x} overlaps a live block")
            self.live[addr] = size
            self.bytes += size
            self.peak = max(self.peak, self.bytes)
        elif act == "free_requested":
            if self.live.get(addr) != size or addr in self.pending:
                errs.append(f"{where}: free_requested of {size} bytes at {addr:#x} matches no live alloc")
            self.pending.add(addr)
        elif act == "free_completed":
            if addr not in self.pending or self.live.get(addr) != size:
                errs.append(f"{where}: free_completed of {size} bytes at {addr:#x} without its free_requested")
            self.pending.discard(addr)
            if addr in self.live:
                self.bytes -= self.live.pop(addr)

    def unmap(self, a, b, where, errs):
        for i, (s, e) in enumerate(self.mapped):
            if s <= a and b <= e:
                self.mapped[i:i + 1] = [r for r in ((s, a), (b, e)) if r[0] < r[1]]
                return
        errs.append(f"{where}: unmap of memory that is not mapped")

    def merged(self):
        out = []
        for s, e in sorted(self.mapped):
            if out and out[-1][1] == s:
                out[-1] = (out[-1][0], e)
            else:
                out.append((s, e))
        return out


def check_segments(data, replays, errs):
    by_device = {}
    for i, seg in enumerate(data["segments"]):
        where = f"segments[{i}]"
        need = ["device", "address", "total_size", "allocated_size", "active_size", "stream", "segment_type", "blocks"]
        if not isinstance(seg, dict) or any(k not in seg for k in need):
            errs.append(f"{where}: missing one of {need}")
            continue
        addr, total, at, allocated, active = seg["address"], seg["total_size"], seg["address"], 0, set()
        for j, b in enumerate(seg["blocks"]):
            if b.get("state") not in BLOCK_STATES or not is_int(b.get("size")):
                errs.append(f"{where}.blocks[{j}]: bad state or size: {b!r}"[:300])
                continue
            if b.get("address", at) != at:
                errs.append(f"{where}.blocks[{j}]: address {b.get('address'):#x}, expected {at:#x} (blocks must tile)")
            if b["state"] == "active_allocated":
                req = b.get("requested_size", b["size"])
                if not (0 < req <= b["size"]):
                    errs.append(f"{where}.blocks[{j}]: requested_size {req} not in (0, size {b['size']}]")
                check_frames(b.get("frames", []), f"{where}.blocks[{j}]", errs)
                allocated += b["size"]
                active.add((at, req))
            at += b["size"]
        if at - addr != total:
            errs.append(f"{where}: blocks add up to {at - addr} bytes, total_size is {total}")
        if seg["allocated_size"] != allocated:
            errs.append(f"{where}: allocated_size {seg['allocated_size']} != active blocks' {allocated}")
        d = by_device.setdefault(seg["device"], {"ranges": [], "active": set()})
        d["ranges"].append((addr, addr + total))
        d["active"] |= active
    for dev, r in enumerate(replays):
        got = by_device.get(dev, {"ranges": [], "active": set()})
        live = set(r.live.items())
        if got["active"] != live:
            errs.append(f"device {dev}: final segments' active blocks differ from the allocations live at the end "
                        f"({len(got['active'] - live)} extra, {len(live - got['active'])} missing)")
        if sorted(got["ranges"]) != r.merged():
            errs.append(f"device {dev}: final segments {sorted(got['ranges'])[:3]} are not the mapped ranges {r.merged()[:3]}")


def check(data):
    errs = []
    if not isinstance(data, dict) or not isinstance(data.get("segments"), list) \
            or not isinstance(data.get("device_traces"), list):
        return ["not a snapshot: a dict with 'segments' and 'device_traces' lists"], []
    replays = []
    for d, entries in enumerate(data["device_traces"]):
        r, last_t = Replay(), None
        replays.append(r)
        if not isinstance(entries, list):
            errs.append(f"device_traces[{d}] is not a list")
            continue
        for i, e in enumerate(entries):
            where = f"device {d} entry {i}"
            if not check_entry(e, where, errs):
                continue
            if last_t is not None and e["time_us"] < last_t:
                errs.append(f"{where}: time_us goes back ({e['time_us']} < {last_t})")
            last_t = e["time_us"]
            r.step(e, where, errs)
        if r.pending:
            errs.append(f"device {d}: {len(r.pending)} free_requested never completed")
    check_segments(data, replays, errs)
    return errs, replays


def first_frame(e):
    return e["frames"][0]["name"] if e.get("frames") else ""


def check_expectations(data, replays, a, say=lambda s: None):
    errs = []
    entries = [e for t in data["device_traces"] for e in t]
    for want in a.expect:
        action, text = want.split("=", 1)
        alts = text.split("|")
        n = sum(1 for e in entries if e.get("action") == action and any(t in first_frame(e) for t in alts))
        if n == 0:
            errs.append(f"no {action} entry whose first frame names {text!r}")
        else:
            say(f"  {n} {action} entries: {text}")
    for text in a.no_frame:
        if any(text in f["name"] for e in entries for f in e.get("frames", [])):
            errs.append(f"a frame names {text!r}")
    if a.tensor_frames:
        bad = [e for e in entries if e.get("action") == "alloc"
               and not any(f["name"].startswith("tensor ") for f in e["frames"])]
        if bad:
            errs.append(f"{len(bad)} allocs without a frame naming their tensor, e.g. {bad[0]['frames']}"[:300])
    peak = replays[0].peak if replays else 0
    if a.peak_eq is not None and peak != a.peak_eq:
        errs.append(f"device 0 peak live bytes {peak}, expected {a.peak_eq}")
    if a.peak_le is not None and peak > a.peak_le:
        errs.append(f"device 0 peak live bytes {peak} > {a.peak_le}")
    if a.devices is not None and len(data["device_traces"]) != a.devices:
        errs.append(f"{len(data['device_traces'])} devices, expected {a.devices}")
    return errs


def all_errors(data, a, say=lambda s: None):
    errs, replays = check(data)
    return errs + (check_expectations(data, replays, a, say) if not errs else [])


def breakages(data, a):
    """Broken copies of a good snapshot, each of which the checks must reject."""
    def first(actions, device=0):
        return next(i for i, e in enumerate(data["device_traces"][device]) if e["action"] in actions)

    def mutate(name, f):
        d = copy.deepcopy(data)
        f(d)
        return name, d

    t = data["device_traces"][0]
    freed = {e["addr"] for e in t if e["action"] == "free_completed"}
    alloc_freed = next(i for i, e in enumerate(t) if e["action"] == "alloc" and e["addr"] in freed)
    out = [
        mutate("an alloc removed (its free matches nothing)", lambda d: d["device_traces"][0].pop(alloc_freed)),
        mutate("a free_completed with another size",
               lambda d: d["device_traces"][0][first({"free_completed"})].update(size=t[first({"free_completed"})]["size"] + 1)),
        mutate("an alloc twice", lambda d: d["device_traces"][0].insert(alloc_freed + 1, dict(t[alloc_freed]))),
        mutate("an unknown action", lambda d: d["device_traces"][0][0].update(action="allocate")),
        mutate("a frame without a line", lambda d: d["device_traces"][0][first({"alloc"})]["frames"].append({"name": "x"})),
        mutate("time going back", lambda d: d["device_traces"][0][-1].update(time_us=-1)),
        mutate("a segment's block resized", lambda d: d["segments"][0]["blocks"][0].update(size=d["segments"][0]["blocks"][0]["size"] + 512)),
        mutate("the segments emptied", lambda d: d.update(segments=[])),
        mutate("a segment_map lost", lambda d: d["device_traces"][0].pop(first({"segment_map"}))),
    ]
    active = [(i, b) for i, b in enumerate(data["segments"][0]["blocks"]) if b["state"] == "active_allocated"] if data["segments"] else []
    if active:
        i, b = active[0]
        out.append(mutate("a live block marked inactive", lambda d: d["segments"][0]["blocks"][i].update(state="inactive")))
    for want in a.expect:
        text = want.split("=", 1)[1]

        def strip(d, text=text):
            for e in (e for t in d["device_traces"] for e in t):
                for f in e["frames"]:
                    for alt in text.split("|"):
                        f["name"] = f["name"].replace(alt, "something else")
        out.append(mutate(f"frames naming {text!r} renamed", strip))
    return out


def self_test(raw, data, a):
    errs = []
    for name, broken in breakages(data, a):
        if not all_errors(broken, a):
            errs.append(f"self-test: a snapshot with {name} passes the checks")
    try:
        pickle.loads(raw[: len(raw) // 2])
        errs.append("self-test: a truncated snapshot loads")
    except Exception:
        pass
    if not errs:
        print(f"  self-test: {len(breakages(data, a)) + 1} broken copies all rejected")
    return errs


def torch_reader(data):
    """torch's own reader over the snapshot, where torch can be imported."""
    try:
        from torch.cuda import _memory_viz as mv
    except Exception as e:  # not installed here: the structural checks above stand alone
        print(f"  torch not importable ({type(e).__name__}): torch's reader skipped")
        return []
    try:
        mv.segsum(data)
        mv.trace(data)
        mv.trace_plot(data)
        mv.segment_plot(data)
    except Exception as e:
        return [f"torch's _memory_viz rejects the snapshot: {type(e).__name__}: {e}"]
    print("  torch's _memory_viz: segsum, trace, trace_plot, segment_plot ok")
    return []


def main():
    p = argparse.ArgumentParser()
    p.add_argument("snapshot")
    p.add_argument("--expect", action="append", default=[])
    p.add_argument("--no-frame", action="append", default=[])
    p.add_argument("--peak-eq", type=int)
    p.add_argument("--peak-le", type=int)
    p.add_argument("--devices", type=int)
    p.add_argument("--tensor-frames", action="store_true")
    p.add_argument("--self-test", action="store_true")
    a = p.parse_args()
    raw = open(a.snapshot, "rb").read()
    try:
        data = pickle.loads(raw)
    except Exception as e:
        print(f"FAIL: {a.snapshot}: not a pickle: {e}")
        return 1
    errs = all_errors(data, a, print)
    if not errs:
        n = sum(len(t) for t in data["device_traces"])
        print(f"  {a.snapshot}: {len(data['device_traces'])} device(s), {n} entries, {len(data['segments'])} segment(s): structure ok")
        errs += torch_reader(data)
        if a.self_test:
            errs += self_test(raw, data, a)
    for e in errs[:20]:
        print(f"FAIL: {a.snapshot}: {e}")
    return 1 if errs else 0


if __name__ == "__main__":
    sys.exit(main())
