#!/usr/bin/env python3
"""gpu_torch_check.py: tests/gpu/torch_train.py three ways on a real GPU (plain; under
`capuchin run` at 0.5 and 0.3 of the plain run's peak), compared.

For each model (resnet, gpt; gpt-bf16: the gpt under torch.autocast bf16, its GEMMs
cuBLASLt's, at the first budget only): the plain run gives the natural peak
(torch.cuda.max_memory_allocated) and the reference losses; each budgeted run is
`capuchin run --budget <fraction x peak, in bytes> --backend B -- python3 torch_train.py`
with CAPUCHIN_DECISION_LOG set. Checked and reported: losses bit-identical to plain, the
slowdown (mean steady-state iteration time, and wall time, over plain), the resident peak
(device memory in use sampled by the script, minus the CUDA context; and the daemon's view
from `capuchin sessions --all --json`), bytes swapped out and in, and the decision counts
from the decision log. All runs use PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync (what
`capuchin run` sets, so plain and managed runs allocate alike).

A budgeted run passes only when it completed, its losses are bit-identical to plain, AND the
executor shows it did its work (so a run in which the executor never started cannot pass):
its `executor summary` line is there, with the requested budget, a resident peak within it,
evictions (the budget is below the peak), plans applied, and no fallback
(gpu_torch_common.judge_executor). Every run is in a session of its own, killed whole on
timeout.

Order: every model's plain run and first budget, then the second budgets; with --deadline,
runs that no longer fit are left out (a SKIP line each, listed in torch.md), never cut short.

Writes OUT/torch.md (markdown tables), OUT/torch.json and one log per run; exit 0 when every
run that ran passed (and at least one model ran plain), 1 otherwise, 77 when torch sees no GPU.

Usage: gpu_torch_check.py --capuchin build/release/bin/capuchin --out OUT
       [--models resnet gpt gpt-bf16] [--budgets 0.5 0.3] [--backend uvm|pinned] [--iters 12]
       [--timeout 120]
"""
import argparse
import json
import os
import sys
import time
from collections import Counter

from gpu_torch_common import daemon_session, executor_summary, judge_executor, mib, run

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.normpath(os.path.join(HERE, "..", "tests", "gpu", "torch_train.py"))


def steady_mean(times):
    """Mean of the second half of the iterations (past learning and planning)."""
    tail = times[len(times) // 2:] or times
    return sum(tail) / len(tail)


def decisions(path):
    counts, out_bytes, in_bytes = Counter(), 0, 0
    if not os.path.exists(path):
        return None
    with open(path, errors="replace") as f:
        for line in f:
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
            a = r.get("action", "?")
            counts[a] += 1
            if a in ("evict",):
                out_bytes += int(r.get("bytes", 0))
            elif a in ("prefetch", "swapin_on_demand"):
                in_bytes += int(r.get("bytes", 0))
    return {"counts": dict(counts), "bytes_out": out_bytes, "bytes_in": in_bytes}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--capuchin", required=True, help="the capuchin command (build/release/bin/capuchin)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", nargs="+", default=["resnet", "gpt", "gpt-bf16"], choices=["resnet", "gpt", "gpt-bf16"])
    ap.add_argument("--budgets", nargs="+", type=float, default=[0.5, 0.3])
    ap.add_argument("--backend", default="uvm", choices=["uvm", "pinned"])
    ap.add_argument("--iters", type=int, default=12)
    ap.add_argument("--timeout", type=float, default=120, help="seconds per run")
    ap.add_argument("--deadline", type=float, default=0,
                    help="seconds this script may use in all (0: no limit); runs that no longer fit are left out (SKIP lines)")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--dry", action="store_true",
                    help="logic check without a GPU: the trainer's --dry CPU mode, budgets passed as fractions")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    env = dict(os.environ)
    env["PYTORCH_CUDA_ALLOC_CONF"] = "backend:cudaMallocAsync"
    results, state = [], {"ok": True, "not_run": []}
    t_end = time.monotonic() + a.deadline if a.deadline else None

    def limit(what):
        """This run's timeout: --timeout, or less near --deadline; None: no time left for it."""
        if t_end is None:
            return a.timeout
        left = t_end - time.monotonic() - 5
        if left < 20:
            print(f"SKIP torch {what}: not run, out of time (--deadline {a.deadline:.0f} s)", flush=True)
            state["not_run"].append(what)
            return None
        return min(a.timeout, left)

    def base_cmd(model):
        return ([a.python, TRAIN, "--model", model.split("-")[0], "--iters", str(a.iters)] +
                (["--bf16"] if model.endswith("-bf16") else []) + (["--dry"] if a.dry else []))

    def plain_run(model):
        t = limit(f"{model} plain")
        if t is None:
            return None
        rc, plain, wall = run(base_cmd(model), env, os.path.join(a.out, f"torch-{model}-plain.log"), t)
        if rc == 77:
            return 77
        if rc != 0 or plain is None:
            print(f"FAIL torch {model} plain: exit {rc} (see torch-{model}-plain.log)")
            results.append({"model": model, "run": "plain", "rc": rc})
            state["ok"] = False
            return None
        print(f"INFO torch {model} plain: peak_allocated {mib(plain['peak_allocated'])}, steady iteration "
              f"{steady_mean(plain['iter_s']) * 1e3:.1f} ms, wall {wall:.1f} s", flush=True)
        results.append({"model": model, "run": "plain", "rc": 0, "wall_s": wall, "summary": plain})
        return plain, wall

    def budget_run(model, frac, plain, wall):
        t = limit(f"{model} budget {frac}")
        if t is None:
            return
        peak = plain["peak_allocated"]
        budget = int(frac * peak) if not a.dry else f"{frac:g}x"
        tag = f"torch-{model}-b{frac}"
        dlog = os.path.join(a.out, tag + ".decisions.jsonl")
        if os.path.exists(dlog):
            os.remove(dlog)
        renv = dict(env, CAPUCHIN_DECISION_LOG=dlog, CAPUCHIN_LOG="info")  # info: the executor's summary line
        cmd = [a.capuchin, "run", "--budget", str(budget), "--backend", a.backend, "--"] + base_cmd(model)
        rc, s, wall_b = run(cmd, renv, os.path.join(a.out, tag + ".log"), t)
        row = {"model": model, "run": f"budget {frac}", "fraction": frac, "budget_bytes": budget, "rc": rc,
               "wall_s": wall_b, "summary": s, "decisions": decisions(dlog)}
        row["executor"] = executor_summary(os.path.join(a.out, tag + ".log"))
        if s is not None:
            row["session"] = daemon_session(a.capuchin, s["pid"])
            n = min(len(s["losses"]), len(plain["losses"]))
            first_diff = next((i for i in range(n) if s["losses"][i] != plain["losses"][i]), None)
            row["losses_identical"] = first_diff is None and len(s["losses"]) == len(plain["losses"])
            row["first_diff_iter"] = None if first_diff is None else first_diff + 1
            row["slowdown_steady"] = steady_mean(s["iter_s"]) / steady_mean(plain["iter_s"])
            row["slowdown_wall"] = wall_b / wall
            row["resident_peak"] = s["device_used_peak"] - s["device_used_base"]
        # The executor's own account (not judged in --dry: the CPU job has no CUDA, no executor).
        verdicts = [] if a.dry else judge_executor(row["executor"], budget, peak)
        row["executor_checks"] = [{"ok": c[0], "check": c[1]} for c in verdicts]
        bad = [c[1] for c in verdicts if not c[0]]
        good = rc == 0 and s is not None and row.get("losses_identical") and not bad
        state["ok"] = state["ok"] and bool(good)
        d = row["decisions"] or {}
        print(f"{'PASS' if good else 'FAIL'} torch {model} budget {frac} ({mib(budget)}, {a.backend}): exit {rc}, "
              f"losses {'identical' if row.get('losses_identical') else 'DIFFER from iteration ' + str(row.get('first_diff_iter'))}, "
              f"slowdown {row.get('slowdown_steady', float('nan')):.2f}x steady / {row.get('slowdown_wall', float('nan')):.2f}x wall, "
              f"resident peak {mib(row.get('resident_peak'))} sampled / {mib((row['executor'] or {}).get('peak_resident'))} executor, swapped out {mib(d.get('bytes_out'))} in {mib(d.get('bytes_in'))}, "
              f"decisions {d.get('counts', 'none (no decision log)')}, "
              f"link measured {(row['executor'] or {}).get('link_out_gbps', '?')} GB/s to the host / "
              f"{(row['executor'] or {}).get('link_in_gbps', '?')} to the device"
              + (f"; executor: {'; '.join(bad)}" if bad else "; executor: ran, within budget, evicted, planned, no fallback"
                 if verdicts else ""), flush=True)
        results.append(row)

    # Every model's plain run and first budget before any second budget: when time runs short
    # (--deadline), what is left out is the least informative.
    plains = {}
    for model in a.models:
        p = plain_run(model)
        if p == 77:
            print(f"SKIP torch: {model}: torch sees no GPU")
            return 77
        if p is not None:
            plains[model] = p
            budget_run(model, a.budgets[0], *p)
    for frac in a.budgets[1:]:
        for model, p in plains.items():
            if not model.endswith("-bf16"):
                budget_run(model, frac, *p)
    if state["not_run"]:
        print(f"INFO torch: {len(state['not_run'])} runs not run for lack of time: {', '.join(state['not_run'])}")
    ok = state["ok"] and bool(plains)
    ran = [r for r in results if r["run"] != "plain"]
    passed = sum(1 for r in ran if r.get("losses_identical") and r["rc"] == 0 and all(c["ok"] for c in r["executor_checks"]))
    print(f"RESULT pytorch {'PASS' if ok else 'FAIL'}: {passed} of {len(ran)} budgeted runs passed "
          f"({', '.join(sorted(plains))} ran plain)"
          + (f"; {len(state['not_run'])} not run for lack of time" if state["not_run"] else ""), flush=True)
    with open(os.path.join(a.out, "torch.json"), "w") as f:
        json.dump(results, f, indent=1)
    write_markdown(os.path.join(a.out, "torch.md"), results, a, state["not_run"])
    return 0 if ok else 1


def write_markdown(path, results, a, not_run):
    where = "DRY RUN on the CPU: a logic check, no GPU figures" if a.dry else "measured on this GPU"
    lines = [f"### PyTorch training under capuchin ({where}; backend {a.backend}, {a.iters} iterations)", "",
             "| model | run | budget | exit | losses vs plain | steady iter | slowdown (steady / wall) | "
             "resident peak (sampled / executor) | daemon peak | swapped out / in | decisions | executor checks |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        s = r.get("summary") or {}
        it = f"{steady_mean(s['iter_s']) * 1e3:.1f} ms" if s.get("iter_s") else "-"
        if r["run"] == "plain":
            lines.append(f"| {r['model']} | plain | none (peak_allocated {mib(s.get('peak_allocated'))}) | {r['rc']} | "
                         f"reference | {it} | 1.00 | {mib(s.get('device_used_peak', 0) - s.get('device_used_base', 0)) if s else '-'} "
                         f"| - | - | - | - |")
            continue
        d = r.get("decisions") or {}
        sess = r.get("session") or {}
        same = {True: "identical", False: f"differ from iter {r.get('first_diff_iter')}"}.get(r.get("losses_identical"), "-")
        slow = (f"{r['slowdown_steady']:.2f}x / {r['slowdown_wall']:.2f}x" if "slowdown_steady" in r else "-")
        counts = ", ".join(f"{k} {v}" for k, v in sorted((d.get("counts") or {}).items())) or "no log"
        failed = [c["check"] for c in r.get("executor_checks", []) if not c["ok"]]
        checks = ("FAILED: " + "; ".join(failed) if failed else "all held" if r.get("executor_checks") else "not judged")
        lines.append(f"| {r['model']} | {r['run']} | {mib(r['budget_bytes'])} | {r['rc']} | {same} | {it} | {slow} | "
                     f"{mib(r.get('resident_peak'))} / {mib((r.get('executor') or {}).get('peak_resident'))} | {mib(sess.get('peak_bytes'))} | "
                     f"{mib(d.get('bytes_out'))} / {mib(d.get('bytes_in'))} | {counts} | {checks} |")
    lines += ["", "Resident peak (sampled): cudaMemGetInfo in use after each forward and backward, minus the use "
              "before the model existed (CUDA context, cuBLAS workspace); executor: its `peak_resident` (bytes it held on "
              "the device at most). Daemon peak: `capuchin sessions`. Budgets are bytes (the fraction times the plain run's "
              "peak_allocated): a fractional CAPUCHIN_BUDGET would mean a fraction of the whole device."]
    if not_run:
        lines += ["", f"Not run for lack of time: {', '.join(not_run)}."]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
