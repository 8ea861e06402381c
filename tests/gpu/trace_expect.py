#!/usr/bin/env python3
"""trace_expect.py: checks a trace recorded by libcapuchin.so against the EXPECT lines the
program printed about itself (tests/gpu/*.cu). Standard library only (runs on a bare GPU
machine).

Usage: trace_expect.py TRACE(.jsonl or .jsonl.gz) PROGRAM_OUTPUT_LOG

EXPECT lines (one fact each):
  EXPECT alloc bytes B count_min N            at least N allocations of exactly B bytes
  EXPECT kernel REGEX count N touch K         exactly N kernels whose name matches REGEX
                                              (re.search), each touching exactly K allocations
  EXPECT kernel REGEX count_min N touch_min K at least N such kernels touching >= K each
  EXPECT copy count_min N                     at least N copies
(count/count_min and touch/touch_min mix freely.) Prints PASS/FAIL per line; exit 0 when all
hold, 1 otherwise, 2 on unreadable input or when the log holds no EXPECT line.
"""
import gzip
import json
import re
import sys


def load(path):
    opener = gzip.open if open(path, "rb").read(2) == b"\x1f\x8b" else open
    events = []
    with opener(path, "rt") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise SystemExit(f"trace_expect: {path}:{n}: not JSON ({e})")
    return events


def touched(ev):
    ids = set()
    for key in ("touch", "reads", "writes"):
        ids.update(ev.get(key) or [])
    return len(ids)


def parse_pairs(words):
    out = {}
    for i in range(0, len(words) - 1, 2):
        out[words[i]] = int(words[i + 1])
    return out


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    try:
        events = load(argv[1])
        expects = [l.split()[1:] for l in open(argv[2], errors="replace") if l.startswith("EXPECT ")]
    except OSError as e:
        print(f"trace_expect: {e}", file=sys.stderr)
        return 2
    if not expects:
        print(f"trace_expect: no EXPECT line in {argv[2]}", file=sys.stderr)
        return 2
    kernels = [e for e in events if e.get("op") == "kernel"]
    allocs = [e for e in events if e.get("op") == "alloc"]
    copies = [e for e in events if e.get("op") == "copy"]
    failures = 0
    for words in expects:
        what = " ".join(words)
        if words[0] == "alloc":
            p = parse_pairs(words[1:])
            got = sum(1 for a in allocs if a.get("bytes") == p["bytes"])
            ok = got >= p["count_min"]
            detail = f"{got} allocations of {p['bytes']} bytes"
        elif words[0] == "copy":
            p = parse_pairs(words[1:])
            ok = len(copies) >= p["count_min"]
            detail = f"{len(copies)} copies"
        elif words[0] == "kernel":
            rx = re.compile(words[1])
            p = parse_pairs(words[2:])
            match = [k for k in kernels if rx.search(k.get("name", ""))]
            if "touch" in p:
                good = [k for k in match if touched(k) == p["touch"]]
            else:
                good = [k for k in match if touched(k) >= p.get("touch_min", 0)]
            if "count" in p:
                ok = len(match) == p["count"] and len(good) == len(match)
            else:
                ok = len(good) >= p["count_min"]
            names = sorted({k.get("name", "") for k in match})[:3]
            detail = (f"{len(match)} matching kernels, {len(good)} with the expected touches; "
                      f"touch counts {sorted(touched(k) for k in match)[:8]}; names {names}")
        else:
            ok, detail = False, "unknown EXPECT kind"
        print(f"{'PASS' if ok else 'FAIL'} trace: {what} ({detail})")
        failures += 0 if ok else 1
    print(f"trace_expect: {len(events)} events, {len(kernels)} kernels, {len(allocs)} allocations; "
          f"{failures} failed of {len(expects)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
