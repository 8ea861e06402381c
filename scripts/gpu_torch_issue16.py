#!/usr/bin/env python3
"""gpu_torch_issue16.py: issue 16's PyTorch checks on a real GPU, one per call, each judged on
its own (scripts/gpu-check.sh runs them as separate steps). The jobs are tests/gpu/torch_probes.py
and tests/gpu/torch_train.py, run plain and under `capuchin run`; every run is in a session of
its own, killed whole on timeout (gpu_torch_common.run).

  graph       torch.cuda.graph capture (global mode) under a budget of 0.5 x the plain peak,
              with capuchin's drain thread running: PASS when the job completes, no capture is
              invalidated, every replayed loss and parameter is bit-identical to the plain run,
              and the executor ran (its summary) within the budget.
  ranks       `capuchin run -- torchrun --nproc-per-node 2` (needs 2 GPUs; else SKIP "1 GPU"):
              PASS when both ranks complete, and `capuchin sessions` (asked by rank 0 while both
              live) shows one session per rank pid, distinct, each on its rank's device.
  expandable  the job itself sets PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True under
              `capuchin run --budget` (0.5 x the plain peak): PASS when the losses are identical
              and either the budget held (the executor's resident peak within it, and the
              sampled device use within it plus the plain run's non-tensor overhead) or capuchin
              printed a warning naming expandable segments.
  bf16-scan   bf16 GEMMs (cuBLASLt; Hopper may pass operands in TMA descriptors) recorded under
              `capuchin run --record`: results must match the plain run (else
              FAIL); then REPORTS, for each GEMM, which operands the recorded launches touched
              (the launch scan's view) and which it missed. Missing operands are a finding, not
              a failure (exit 3).

Usage: gpu_torch_issue16.py CHECK --capuchin CLI --out DIR [--timeout S] [--backend uvm|pinned]
       [--python PY]
Exit: 0 PASS, 1 FAIL, 3 REPORT (bf16-scan: operands not found), 77 SKIP. The last line is
`RESULT CHECK PASS|FAIL|SKIP|REPORT: detail`.
"""
import argparse
import gzip
import json
import os
import re
import subprocess
import sys

from gpu_torch_common import executor_summary, mib, run

HERE = os.path.dirname(os.path.abspath(__file__))
PROBES = os.path.normpath(os.path.join(HERE, "..", "tests", "gpu", "torch_probes.py"))
TRAIN = os.path.normpath(os.path.join(HERE, "..", "tests", "gpu", "torch_train.py"))
CAPTURE_BROKEN = re.compile(r"(?i)(operation not permitted when stream is capturing|cudaErrorStreamCapture\w*|"
                            r"capture.{0,40}(invalidated|unsupported))")


class Verdict:
    def __init__(self, name):
        self.name, self.failed, self.notes = name, [], []

    def check(self, ok, text):
        print(f"{'PASS' if ok else 'FAIL'} {self.name}: {text}", flush=True)
        if not ok:
            self.failed.append(text)
        return ok

    def end(self, skip=None, report=None):
        if skip:
            print(f"SKIP {self.name}: {skip}\nRESULT {self.name} SKIP: {skip}", flush=True)
            return 77
        if self.failed:
            print(f"RESULT {self.name} FAIL: {'; '.join(self.failed)[:300]}", flush=True)
            return 1
        if report:
            print(f"RESULT {self.name} REPORT: {report}", flush=True)
            return 3
        print(f"RESULT {self.name} PASS: {'; '.join(self.notes)[:300]}", flush=True)
        return 0


def plain_then_managed(a, v, name, job, budget_of, extra_env=None, run_args=()):
    """Runs `job` plain and under capuchin run (budget from the plain SUMMARY). Returns
    (plain summary, managed summary, managed log, budget) or None when already decided."""
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF="backend:cudaMallocAsync", **(extra_env or {}))
    rc, plain, _ = run(job, env, os.path.join(a.out, f"{name}-plain.log"), a.timeout)
    if rc == 77:
        return v.end(skip="torch sees no GPU")
    if not v.check(rc == 0 and plain is not None, f"the job runs plain (exit {rc}; {name}-plain.log)"):
        return v.end()
    budget = budget_of(plain)
    log = os.path.join(a.out, f"{name}-capuchin.log")
    cmd = [a.capuchin, "run"] + (["--budget", str(budget), "--backend", a.backend] if budget else []) + list(run_args)
    renv = dict(env, CAPUCHIN_LOG="info", CAPUCHIN_DECISION_LOG=os.path.join(a.out, f"{name}.decisions.jsonl"))
    rc, managed, _ = run(cmd + ["--"] + job, renv, log, a.timeout)
    v.check(rc == 0 and managed is not None, f"the job runs under capuchin run{f' --budget {budget}' if budget else ''} "
                                             f"(exit {rc}; {os.path.basename(log)})")
    return plain, managed, log, budget


def check_graph(a, v):
    got = plain_then_managed(a, v, "graph", [a.python, PROBES, "graph"], lambda p: int(0.5 * p["peak_allocated"]))
    if isinstance(got, int):
        return got
    plain, managed, log, budget = got
    broken = [line.strip() for line in open(log, errors="replace") if CAPTURE_BROKEN.search(line)]
    v.check(not broken, "no capture invalidated" + (f": {broken[0][:160]}" if broken else ""))
    if managed is not None:
        v.check(managed["losses"] == plain["losses"], f"the {len(plain['losses'])} replayed losses are bit-identical")
        v.check(managed["params"] == plain["params"] and managed["pressure"] == plain["pressure"],
                "parameters and pressure tensors bit-identical after the replays")
    ex = executor_summary(log)
    if v.check(ex is not None, "the executor ran (its summary line; its drain thread ran during the capture)"):
        v.check(ex.get("peak_resident", budget + 1) <= budget, f"resident peak {mib(ex.get('peak_resident'))} within "
                                                               f"the budget {mib(budget)}")
        v.notes.append(f"evictions {ex.get('evictions')}, fallbacks {ex.get('fallbacks')}")
        print(f"INFO graph: executor summary {ex}", flush=True)
    return v.end()


def check_ranks(a, v):
    p = subprocess.run([a.python, "-c", "import torch; print(torch.cuda.device_count())"], capture_output=True,
                       text=True, timeout=120)
    n = int(p.stdout.strip() or 0) if p.returncode == 0 else 0
    if n < 2:
        return v.end(skip=f"{n} GPU" if n else "torch sees no GPU")
    log = os.path.join(a.out, "ranks-capuchin.log")
    env = dict(os.environ, CAPUCHIN_CLI=a.capuchin, CAPUCHIN_LOG="info")
    cmd = [a.capuchin, "run", "--", a.python, "-m", "torch.distributed.run", "--nproc-per-node", "2", PROBES, "ranks"]
    rc, _, _ = run(cmd, env, log, a.timeout)
    v.check(rc == 0, f"torchrun with 2 ranks under capuchin run completes (exit {rc})")
    ranks, sessions = [], None
    for line in open(log, errors="replace"):
        m = re.search(r"\bRANK (\{.*\})", line)
        if m:
            ranks.append(json.loads(m.group(1)))
        m = re.search(r"\bSESSIONS (.*)$", line)
        if m:
            try:
                sessions = json.loads(m.group(1))
                sessions = sessions if isinstance(sessions, list) else sessions.get("sessions", [])
            except json.JSONDecodeError:
                sessions = None
    if not v.check(len(ranks) == 2 and {r["device"] for r in ranks} == {0, 1}, f"two ranks on cuda:0 and cuda:1 ({ranks})"):
        return v.end()
    if not v.check(sessions is not None, "rank 0 got the daemon's sessions (`capuchin sessions --all --json`)"):
        return v.end()
    mine = {r["pid"]: [s for s in sessions if int(s.get("pid", -1)) == r["pid"]] for r in ranks}
    for r in ranks:
        ss = mine[r["pid"]]
        if v.check(len(ss) == 1, f"rank {r['rank']} (pid {r['pid']}) has exactly one session ({len(ss)})"):
            v.check(int(ss[0].get("device", -1)) == r["device"],
                    f"rank {r['rank']}'s session {ss[0].get('id')} is on device {ss[0].get('device')}, the rank's "
                    f"cuda:{r['device']}")
    ids = [s[0].get("id") for s in mine.values() if len(s) == 1]
    v.check(len(set(ids)) == 2, f"two distinct sessions ({ids})")
    return v.end()


def check_expandable(a, v):
    job = ["env", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", a.python, TRAIN, "--model", "gpt", "--iters", "8"]
    got = plain_then_managed(a, v, "expandable", job, lambda p: int(0.5 * p["peak_allocated"]))
    if isinstance(got, int):
        return got
    plain, managed, log, budget = got
    if managed is None:
        return v.end()
    v.check(managed["losses"] == plain["losses"], "losses bit-identical to the plain run (both expandable_segments)")
    warned = [line.strip() for line in open(log, errors="replace")
              if re.search(r"(?i)expandable", line) and re.search(r"(?i)warn", line)]
    ex = executor_summary(log)
    overhead = max(0, plain["device_used_peak"] - plain["device_used_base"] - plain["peak_allocated"])
    sampled = managed["device_used_peak"] - managed["device_used_base"]
    held = ex is not None and ex.get("peak_resident", budget + 1) <= budget and sampled <= budget + overhead
    print(f"INFO expandable: budget {mib(budget)}, executor peak {mib((ex or {}).get('peak_resident'))}, sampled "
          f"in use {mib(sampled)} (allowance for non-tensor memory {mib(overhead)}), warning: "
          f"{warned[0][:200] if warned else 'none'}", flush=True)
    v.check(held or bool(warned), "the budget held" if held else
            ("capuchin warned: " + warned[0][:160]) if warned else
            f"the budget did not hold (executor peak {mib((ex or {}).get('peak_resident'))}, sampled {mib(sampled)} "
            f"over {mib(budget)} + {mib(overhead)}) and no warning named expandable segments")
    return v.end()


def load_trace(path):
    opener = gzip.open if open(path, "rb").read(2) == b"\x1f\x8b" else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()][1:]


def gemm_windows(events, gemms):
    """For each GEMM (label, {operand: bytes}, output operand): the kernels between the alloc
    of its output (the last operand) and the next sync, and the live allocation ids whose
    size is each operand's. Yields (label, kernels, {operand: ids})."""
    live, order = {}, []
    for i, e in enumerate(events):
        if e.get("op") == "alloc":
            live[e["id"]] = e["bytes"]
        elif e.get("op") == "free":
            live.pop(e["id"], None)
        order.append(dict(live))
    fits = lambda have, want: want <= have <= want + max(512, want // 1000)  # noqa: E731
    start = 0
    for label, ops in gemms:
        out_bytes = list(ops.values())[-1]
        i = next((k for k in range(start, len(events)) if events[k].get("op") == "alloc" and fits(events[k]["bytes"], out_bytes)), None)
        if i is None:
            yield label, [], {}
            continue
        j = next((k for k in range(i, len(events)) if events[k].get("op") == "sync"), len(events))
        kernels = [e for e in events[i:j] if e.get("op") == "kernel"]
        ids = {name: {x for x, b in order[i].items() if fits(b, want)} for name, want in ops.items()}
        start = j
        yield label, kernels, ids


def check_bf16_scan(a, v):
    trace = os.path.join(a.out, "bf16-gemm.trace.jsonl.gz")
    # Recorded without a budget: the trace's `touch` lists are the words the launch scan found
    # (interpose/exec/launch_scan.hpp, the same scan the executor uses).
    got = plain_then_managed(a, v, "bf16-gemm", [a.python, PROBES, "gemm"], lambda p: None, run_args=["--record", trace])
    if isinstance(got, int):
        return got
    plain, managed, log, _ = got
    if managed is None:
        return v.end()
    v.check({k: managed[k] for k in ("matmul_bf16", "linear_autocast")} ==
            {k: plain[k] for k in ("matmul_bf16", "linear_autocast")}, "bf16 GEMM results bit-identical to the plain run")
    gemms = []
    for line in open(log, errors="replace"):
        m = re.match(r"GEMM (\S+) (.*)$", line.strip())
        if m:
            gemms.append((m.group(1), {k: int(x) for k, x in (kv.split("=") for kv in m.group(2).split())}))
    if not os.path.exists(trace) or not gemms:
        v.check(False, f"a trace ({os.path.exists(trace)}) and GEMM lines ({len(gemms)}) to compare")
        return v.end()
    missing = []
    for label, kernels, ids in gemm_windows(load_trace(trace), gemms):
        touched = set()
        for k in kernels:
            touched |= set(k.get("touch", [])) | set(k.get("reads", [])) | set(k.get("writes", []))
        found = [n for n, s in ids.items() if s & touched]
        lost = [n for n in gemms[[g[0] for g in gemms].index(label)][1] if n not in found]
        names = sorted({k.get("name", "?")[:60] for k in kernels})
        print(f"INFO bf16-scan {label}: {len(kernels)} launches ({', '.join(names) or 'none found'}); operands the "
              f"scan saw: {', '.join(found) or 'none'}; missed: {', '.join(lost) or 'none'}", flush=True)
        missing += [f"{label}.{n}" for n in lost]
    if missing:
        return v.end(report=f"the launch scan missed {', '.join(missing)} (operands in TMA descriptors?)")
    v.notes.append("the launch scan saw every GEMM operand")
    return v.end()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("check", choices=["graph", "ranks", "expandable", "bf16-scan"])
    ap.add_argument("--capuchin", required=True, help="the capuchin command")
    ap.add_argument("--out", required=True)
    ap.add_argument("--timeout", type=float, default=120, help="seconds per run")
    ap.add_argument("--backend", default="uvm", choices=["uvm", "pinned"])
    ap.add_argument("--python", default=sys.executable)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    v = Verdict(a.check.replace("-", "_"))
    return {"graph": check_graph, "ranks": check_ranks, "expandable": check_expandable,
            "bf16-scan": check_bf16_scan}[a.check](a, v)


if __name__ == "__main__":
    sys.exit(main())
