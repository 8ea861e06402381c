#!/bin/sh
# stress_executor.sh [RUNS] [SEED] [BUILD_DIR]: randomized end-to-end runs of the executor on
# simcuda. Each run draws a backend (uvm | pinned), a network (depth, width, batch), a seed,
# allocation mode, stream, worker timing jitter (SIMCUDA_JITTER_US), kernel times, whether
# pre-activations are kept (recomputation), and a budget between the minimum the job needs
# (the most one launch touches, measured) and its natural peak P as the backend charges it
# (64 KiB pages for uvm, 2 MiB chunks for pinned's large tensors); the device is given exactly
# that budget. The run must finish with output bit-identical to an unconstrained reference run,
# simcuda must never have evicted or faulted managed memory itself, and its peak device bytes
# must stay within the budget. Prints one line per run and a summary; exit 1 on any failure.
# Defaults: 200 runs, seed 1, build/release. ctest runs a short version (10 runs).
set -eu
RUNS=${1:-200}
SEED=${2:-1}
BUILD=${3:-build/release}
exec python3 - "$RUNS" "$SEED" "$BUILD" <<'PY'
import json, os, random, re, subprocess, sys, tempfile, time
runs, seed, build = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
train = os.path.join(build, "bin", "sim_mlp_train")
lib = os.path.abspath(os.path.join(build, "lib", "libcapuchin.so"))
prefix = os.environ.get("CAPUCHIN_PRELOAD_PREFIX", "")
env0 = dict(os.environ, LD_LIBRARY_PATH=os.path.abspath(os.path.join(build, "lib", "simcuda")))
for k in ("CAPUCHIN_BUDGET", "CAPUCHIN_BACKEND", "SIMCUDA_DEVICE_BYTES", "LD_PRELOAD"):
    env0.pop(k, None)
outputs = "relu_forward:2,relu_backward:3,simblas_sgemm_nn:9,simblas_sgemm_tn:9,simblas_sgemm_nt:9"
rng = random.Random(seed)
tmp = tempfile.mkdtemp(prefix="capuchin-stress-")
ok = failed = 0
slow = []
t0 = time.time()

def run(args, env):
    return subprocess.run([train] + args, env=env, capture_output=True, text=True, timeout=600)

for i in range(runs):
    backend = rng.choice(["uvm", "pinned"])
    depth = rng.randint(2, 6)
    width = rng.choice([32, 64, 128])
    batch = rng.choice([4096, 8192]) if backend == "pinned" else rng.choice([256, 512, 1024, 2048])
    if backend == "pinned" and width == 128: batch = 4096
    args = ["--depth", str(depth), "--width", str(width), "--batch", str(batch), "--iters", str(rng.randint(3, 6)),
            "--seed", str(rng.randint(1, 10**6)), "--alloc", rng.choice(["async", "sync"]),
            "--stream", rng.choice(["default", "created"]), "--kernel-ns", str(rng.choice([0, 20000, 100000]))]
    if rng.random() < 0.5: args.append("--keep-preact")
    jitter = rng.choice(["0", "0", "50"])
    P = int(run(args + ["--print-peak"], env0).stdout)
    ref = run(args, dict(env0, SIMCUDA_JITTER_US=jitter))
    if ref.returncode != 0:
        print(f"run {i}: reference failed: {ref.stderr[-300:]}"); failed += 1; continue
    env = dict(env0, CAPUCHIN_BACKEND=backend, CAPUCHIN_KERNEL_OUTPUTS=outputs, CAPUCHIN_LOG="info",
               SIMCUDA_JITTER_US=jitter, LD_PRELOAD=prefix + lib)
    # The range, in the backend's own granules (uvm: 64 KiB pages, pinned: 2 MiB chunks for
    # large tensors): from a run without pressure, its peak (the natural peak as charged) and
    # the most one launch needs (plus unevictable memory): the minimum.
    probe = run(args, dict(env, CAPUCHIN_BUDGET=str(8 * P)))
    m = re.search(r"peak_resident=(\d+) min_needed=(\d+)", probe.stderr)
    if not m:
        print(f"run {i}: probe failed: {probe.stderr[-300:]}"); failed += 1; continue
    P = int(m.group(1))
    lo = int(m.group(2))
    u = rng.uniform(0.0, 1.0)
    for attempt in range(4):
        budget = min(P, int(lo * 1.02 + u * (P - lo * 1.02)))
        stats = os.path.join(tmp, f"stats-{i}.json")
        r = run(args, dict(env, CAPUCHIN_BUDGET=str(budget), SIMCUDA_DEVICE_BYTES=str(budget), SIMCUDA_STATS_FILE=stats))
        if r.returncode != 0 and "capuchin: out of memory" in r.stderr and attempt < 3:
            u = (1 + u) / 2  # below what this run's granules need: move towards P
            continue
        break
    problems = []
    if r.returncode != 0:
        why = [l for l in r.stderr.splitlines() if "error" in l or "failed" in l]
        problems.append(f"exit {r.returncode}: {' | '.join(why)[-400:]}")
    elif r.stdout != ref.stdout: problems.append("output differs from the reference")
    else:
        st = json.load(open(stats))
        if st["uvm_evictions"] or st["uvm_faults"]: problems.append(f"simcuda evicted {st['uvm_evictions']} / faulted {st['uvm_faults']}")
        if st["peak_device_bytes"] > budget: problems.append(f"peak {st['peak_device_bytes']} > budget {budget}")
    s = re.search(r"evictions=(\d+).*?on_demand=(\d+).*?recomputes=(\d+)", r.stderr)
    desc = f"{backend:6} {' '.join(args)} jitter={jitter} budget={budget / P:.2f}P"
    if s: desc += f" evict={s.group(1)} on_demand={s.group(2)} recompute={s.group(3)}"
    if problems:
        failed += 1
        print(f"run {i}: FAIL {desc}: {'; '.join(problems)}", flush=True)
    else:
        ok += 1
        print(f"run {i}: ok   {desc}", flush=True)
print(f"stress_executor: {ok} of {runs} runs bit-identical, {failed} failed ({time.time() - t0:.0f} s)")
sys.exit(1 if failed else 0)
PY
