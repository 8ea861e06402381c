#!/usr/bin/env python3
"""report_check.py: reads what `capuchin report` and `capuchin export perfetto` wrote, as a user
(or a script) would, for report_test.sh. Subcommands print their answer or exit 1 with a reason on stderr.

  series HTML PLOT            the plot's embedded JSON (<script type="application/json" id="PLOT-data">)
                              as one line per series: id max n_points (and 'meta' first: JSON)
  labels HTML                 every SVG <text> fits inside its SVG (estimated width: 0.6 x font size
                              per character; text-anchor start/middle/end), else names the ones that do not
  counter JSON NAME           the maximum of a Perfetto counter track NAME ('ph':'C') and how many values
  tensors HTML                the top-tensors rows: id<TAB>what it is<TAB>decisions count<TAB>rows listed
                              under the tensor's anchor (id="tensor-ID")
  origin TRACE ID             the trace file's own answer for a tensor: 'written by K' or 'first used by K',
                              its size and its position 'iteration N, event E of M' (markers in the file)
"""
import gzip
import html
import json
import re
import sys


def fail(msg):  # on stderr: a caller may keep stdout in a file
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def plot_data(page, plot):
    m = re.search(r'<script type="application/json" id="%s-data">(.*?)</script>' % re.escape(plot), page, re.S)
    if not m:
        fail("no JSON data for %s" % plot)
    return json.loads(m.group(1))


def cmd_series(path, plot):
    d = plot_data(open(path).read(), plot)
    meta = {k: v for k, v in d.items() if k != "series"}
    print("meta " + json.dumps(meta, sort_keys=True))
    for s in d["series"]:
        ys = [p[1] for p in s["points"]]
        if max(ys) != s["max"]:  # the plotted points keep the peak (max-preserving downsampling)
            fail("series %s: plotted max %s != its max %s" % (s["id"], max(ys), s["max"]))
        print("%s %d %d" % (s["id"], int(s["max"]), len(ys)))


def attrs(tag):
    return dict(re.findall(r'([\w-]+)="([^"]*)"', tag))


def cmd_labels(path):
    page = open(path).read()
    bad, n = [], 0
    for svg in re.finditer(r"<svg([^>]*)>(.*?)</svg>", page, re.S):
        a = attrs(svg.group(1))
        width, height = float(a["width"]), float(a["height"])
        for t in re.finditer(r"<text([^>]*)>(.*?)</text>", svg.group(2), re.S):
            ta = attrs(t.group(1))
            text = html.unescape(t.group(2))
            w = len(text) * 0.6 * float(ta.get("font-size", "16"))
            x, y = float(ta["x"]), float(ta["y"])
            anchor = ta.get("text-anchor", "start")
            left = x - w if anchor == "end" else x - w / 2 if anchor == "middle" else x
            n += 1
            if left < 0 or left + w > width or y < 0 or y > height:
                bad.append("%s: '%s' spans x %.0f..%.0f of %.0f" % (a.get("id", "?"), text, left, left + w, width))
    if bad:
        fail("%d of %d labels do not fit: %s" % (len(bad), n, "; ".join(bad[:5])))
    print("%d labels fit" % n)


def cmd_counter(path, name):
    d = json.load(open(path))
    vals = [list(e["args"].values())[0] for e in d["traceEvents"] if e.get("ph") == "C" and e.get("name") == name]
    if not vals:
        fail("no counter '%s'" % name)
    print("%d %d" % (max(vals), len(vals)))


def cmd_tensors(path):
    page = open(path).read()
    m = re.search(r'<table id="top-tensors">(.*?)</table>', page, re.S)
    if not m:
        fail("no top-tensors table")
    for row in re.finditer(r'<tr><td><a href="#tensor-(\d+)">\1</a></td><td class="name">(.*?)</td><td>[^<]*</td>'
                           r'<td><a href="#tensor-\1">(\d+)</a></td></tr>', m.group(1)):
        tid = row.group(1)
        d = re.search(r'<details id="tensor-%s" class="tensor">(.*?)</details>' % tid, page, re.S)
        listed = len(re.findall(r"<tr><td>", d.group(1))) if d else -1
        print("%s\t%s\t%s\t%d" % (tid, html.unescape(row.group(2)), row.group(3), listed))


def event_name(e):
    return e["name"] if e["op"] == "kernel" else "copy " + e["dir"] if e["op"] == "copy" else e["op"]


def size_text(n):  # binary units, one decimal (as capuchin prints sizes)
    v, u = float(n), 0
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    while v >= 1024 and u + 1 < len(units):
        v, u = v / 1024, u + 1
    return "%d B" % n if u == 0 else "%.1f %s" % (v, units[u])


def cmd_origin(path, tid):
    tid = int(tid)
    events = [json.loads(l) for l in gzip.open(path, "rt")][1:]
    first_use = first_write = alloc = None
    for i, e in enumerate(events):
        reads = e.get("reads", []) + ([e["src"]] if "src" in e else [])
        writes = e.get("writes", []) + e.get("touch", []) + ([e["dst"]] if "dst" in e else [])
        if e["op"] == "alloc" and e["id"] == tid:
            alloc = i
        if e["op"] in ("kernel", "copy") and (tid in reads or tid in writes):
            if first_use is None:
                first_use = i
            if tid in writes and first_write is None:
                first_write = i
    if alloc is None:
        fail("no tensor %d in %s" % (tid, path))
    if first_write is not None and first_write <= first_use:
        origin = "written by " + event_name(events[first_write])
    else:
        origin = "first used by " + event_name(events[first_use])
    marks = [i for i, e in enumerate(events) if e["op"] == "iter"]
    ends = marks[1:] + [len(events)]
    where = "set-up"
    for k, (b, end) in enumerate(zip(marks, ends)):
        if b <= alloc < end:
            where = "iteration %d, event %d of %d" % (events[b]["n"], alloc - b, end - b - 1)
    print("%s\t%s\t%s" % (origin, size_text(events[alloc]["bytes"]), where))


if __name__ == "__main__":
    cmds = {"series": cmd_series, "labels": cmd_labels, "counter": cmd_counter, "tensors": cmd_tensors, "origin": cmd_origin}
    if len(sys.argv) < 2 or sys.argv[1] not in cmds:
        fail(__doc__)
    cmds[sys.argv[1]](*sys.argv[2:])
