"""gpu_torch_common.py: what the PyTorch steps of scripts/gpu-check.sh share
(scripts/gpu_torch_check.py, scripts/gpu_torch_issue16.py): running one job with a time
limit that kills everything it started, reading the executor's summary line, judging it,
and asking the daemon about sessions. Standard library only (a bare GPU machine).
"""
import json
import os
import signal
import subprocess
import sys
import time


def session_members(sid):
    """Pids of the live processes in session `sid` (/proc/PID/stat field 6)."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # after "pid (comm)": state ppid pgrp session ...
        if len(fields) > 3 and int(fields[3]) == sid and fields[0] != "Z":
            pids.append(int(d))
    return pids


def kill_session(sid, grace_s=5.0):
    """SIGTERM then SIGKILL to every process of session `sid`: the job's whole tree, its own
    process groups included (`capuchin run` puts the job in a group of its own, torchrun's
    workers in theirs). Returns the pids that were still there."""
    left = session_members(sid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in session_members(sid):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        while session_members(sid) and time.monotonic() < deadline:
            time.sleep(0.1)
    return left


_current_session = None  # the session of the job now running (killed if we are told to stop)


def _on_term(signum, _frame):
    """scripts/gpu-check.sh's step limit (timeout's SIGTERM) reached us: the job's session is
    one of its own, out of the step's reach, so kill it here before going."""
    if _current_session is not None:
        kill_session(_current_session, grace_s=2.0)
    sys.exit(128 + signum)


signal.signal(signal.SIGTERM, _on_term)


def run(cmd, env, log_path, timeout):
    """Runs cmd in a session of its own, output to log_path. On timeout, or when it leaves
    processes behind, the whole session is killed (nothing may stay on the GPU for the next
    run). Returns (exit code or 'timeout', the job's SUMMARY dict or None, wall s)."""
    t0 = time.monotonic()
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        p = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        global _current_session
        _current_session = p.pid
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = "timeout"
            left = kill_session(p.pid)
            p.wait()
            log.write(f"\n[gpu-check] timed out after {timeout:.0f} s: killed session {p.pid} ({len(left)} processes)\n")
        left = kill_session(p.pid) if rc != "timeout" else []
        _current_session = None
        if left:
            log.write(f"\n[gpu-check] the job left {len(left)} processes behind ({left}): killed\n")
    wall = time.monotonic() - t0
    summary = None
    with open(log_path, errors="replace") as f:
        for line in f:
            if line.startswith("SUMMARY "):
                try:
                    summary = json.loads(line[len("SUMMARY "):])
                except json.JSONDecodeError:
                    pass
    return rc, summary, wall


def executor_summaries(log_path):
    """Every `executor summary: k=v ...` line (the interposer's, at exit, CAPUCHIN_LOG=info;
    interpose/exec/executor.cpp shutdown()) of a log, as dicts, in order."""
    out = []
    with open(log_path, errors="replace") as f:
        for line in f:
            if "executor summary:" not in line:
                continue
            d = {}
            for kv in line.split("executor summary:", 1)[1].split():
                k, _, v = kv.partition("=")
                d[k] = int(v) if v.isdigit() else v
            out.append(d)
    return out


def executor_summary(log_path):
    found = executor_summaries(log_path)
    return found[-1] if found else None


def judge_executor(ex, budget, natural_peak):
    """The executor ran and did its job: [(ok, text)]. `budget` bytes requested; natural_peak
    the plain run's peak (evictions are required only when the budget is below it)."""
    if ex is None:
        return [(False, "no 'executor summary' line: the executor never started (or the job died before exit)")]
    checks = []
    ex_budget, peak = ex.get("budget"), ex.get("peak_resident")
    checks.append((ex_budget == budget, f"executor budget {ex_budget} is the requested {budget}"))
    checks.append((isinstance(peak, int) and peak <= budget, f"resident peak {peak} within the budget {budget}"))
    if natural_peak is not None and budget < natural_peak:
        checks.append((ex.get("evictions", 0) > 0, f"evictions {ex.get('evictions')} > 0 (budget below the peak {natural_peak})"))
    checks.append((ex.get("plans", 0) > 0 and ex.get("planned_iterations", 0) > 0,
                   f"plans applied: plans {ex.get('plans')}, planned iterations {ex.get('planned_iterations')}"))
    checks.append((ex.get("fallbacks", 1) == 0, f"fallbacks {ex.get('fallbacks')} == 0"))
    return checks


def sessions(capuchin, env=None):
    """The daemon's sessions (`capuchin sessions --all --json`), [] when it cannot answer."""
    try:
        p = subprocess.run([capuchin, "sessions", "--all", "--json"], capture_output=True, text=True, timeout=10,
                           env=env)
        s = json.loads(p.stdout)
        return s if isinstance(s, list) else s.get("sessions", [])
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return []


def daemon_session(capuchin, pid, env=None):
    # The newest with that pid: the daemon also lists sessions of earlier runs (kept across its
    # restarts), whose pid may have been reused.
    return next((s for s in reversed(sessions(capuchin, env)) if int(s.get("pid", -1)) == pid), None)


def mib(b):
    if isinstance(b, float) and 0 < b <= 1:
        return f"{b:g} of peak"
    return f"{b / 2**20:.0f} MiB" if isinstance(b, (int, float)) else "-"
