#!/bin/sh
# stress_executor.sh [RUNS] [SEED] [BUILD_DIR]: randomized end-to-end runs of the executor on
# simcuda, each compared with a run without capuchin. Each run draws:
#   - a workload: sim_mlp_train (depth, width, batch, allocation mode, stream, kernel times,
#     kept pre-activations: recomputation), or sim_loop_train, a loop with PyTorch's habits
#     (batches uploaded by copies into reused blocks, memsets, frees under pressure, 1-3 host
#     syncs per iteration, shapes that change every iteration, children forked while another
#     thread launches); or sim_trace_replay, a real model's trace (tests/data: the transformer
#     and resnet18, and mobilenet_v2 in runs of more than 20) with a drawn allocator (async,
#     sync, caching), sync option and iteration count; sizes are drawn freely, granule-aligned
#     or not, for both backends;
#   - a backend (uvm | pinned), worker timing jitter (SIMCUDA_JITTER_US);
#   - a budget between the minimum the job needs (the most one launch touches, as the backend
#     charges it: deterministic, read from a run without pressure) and the natural peak P
#     (the program's own exact count, --print-peak; the minimum when that is larger, as 64 KiB
#     pages can make it for tiny jobs); the device gets exactly that budget;
#   - or, one run in ten, a budget under that minimum on a large device: the job must still
#     complete (what does not fit is used from host memory) and say the budget is too small.
# Every run must finish with output bit-identical to the reference; within the budget simcuda
# must never have evicted or faulted managed memory itself and its peak must stay within the
# budget. No run is ever retried: a failure is a failure. Prints one line per run and a
# summary; exit 1 on any failure. Defaults: 200 runs, seed 1, build/release. ctest runs 6 in
# release (seed 11) and 4 under a sanitizer (seed 12).
set -eu
RUNS=${1:-200}
SEED=${2:-1}
BUILD=${3:-build/release}
exec python3 - "$RUNS" "$SEED" "$BUILD" "$(dirname "$0")/../tests/data" <<'PY'
import json, os, random, re, subprocess, sys, tempfile, time
runs, seed, build, data = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
bins = {"mlp": os.path.join(build, "bin", "sim_mlp_train"), "loop": os.path.join(build, "bin", "sim_loop_train"),
        "replay": os.path.join(build, "bin", "sim_trace_replay")}
lib = os.path.abspath(os.path.join(build, "lib", "libcapuchin.so"))
prefix = os.environ.get("CAPUCHIN_PRELOAD_PREFIX", "")
env0 = dict(os.environ, LD_LIBRARY_PATH=os.path.abspath(os.path.join(build, "lib", "simcuda")))
for k in ("CAPUCHIN_BUDGET", "CAPUCHIN_BACKEND", "SIMCUDA_DEVICE_BYTES", "LD_PRELOAD", "CAPUCHIN_SOCKET"):
    env0.pop(k, None)
outputs = "relu_forward:2,relu_backward:3,simblas_sgemm_nn:9,simblas_sgemm_tn:9,simblas_sgemm_nt:9"
rng = random.Random(seed)
tmp = tempfile.mkdtemp(prefix="capuchin-stress-")
ok = failed = 0
t0 = time.time()

def run(prog, args, env):
    return subprocess.run([bins[prog]] + args, env=env, capture_output=True, text=True, timeout=600)

def mlp_args():
    width = rng.choice([32, 64, 100, 128, 256, 512])
    batch = rng.choice([b for b in (128, 256, 1000, 2048, 4096, 8192) if b * width * width <= 1 << 28])  # CPU time
    a = ["--depth", str(rng.randint(2, 8)), "--width", str(width), "--batch", str(batch), "--iters", str(rng.randint(3, 6)),
         "--seed", str(rng.randint(1, 10**6)), "--alloc", rng.choice(["async", "sync"]),
         "--stream", rng.choice(["default", "created"]), "--kernel-ns", str(rng.choice([0, 20000, 100000]))]
    if rng.random() < 0.5: a.append("--keep-preact")
    return a

def loop_args():
    a = ["--iters", str(rng.randint(3, 6)), "--layers", str(rng.randint(1, 4)), "--seed", str(rng.randint(1, 10**6)),
         "--alloc", rng.choice(["sync", "async"]), "--syncs", str(rng.randint(1, 3)),
         "--input-bytes", str(rng.choice([rng.randint(1 << 16, 8 << 20), 2 << 20, 4 << 20])),
         "--weight-bytes", str(rng.choice([rng.randint(4096, 1 << 20), 1 << 20, 2 << 20]))]
    if rng.random() < 0.3: a.append("--dynamic")
    if rng.random() < 0.15: a.append("--fork")
    return a

def replay_args():
    models = ["tiny_transformer-b8", "resnet18-b16"] + (["mobilenet_v2-b16"] if runs > 20 else [])
    return ["--trace", os.path.join(data, rng.choice(models) + ".jsonl.gz"), "--iters", str(rng.randint(2, 5)),
            "--alloc", rng.choice(["async", "sync", "caching"]), "--syncs", rng.choice(["loss", "loss,batch", "loss,batch,device"])]

for i in range(runs):
    prog = rng.choice(["mlp", "loop", "replay"])
    backend = rng.choice(["uvm", "pinned"])
    args = {"mlp": mlp_args, "loop": loop_args, "replay": replay_args}[prog]()
    jitter = rng.choice(["0", "0", "50"])
    under_min = rng.random() < 0.1
    u = rng.uniform(0.0, 1.0)
    P = int(run(prog, args + ["--print-peak"], env0).stdout)
    ref = run(prog, args, dict(env0, SIMCUDA_JITTER_US=jitter))
    desc = f"{backend:6} {prog} {' '.join(args)} jitter={jitter}"
    if ref.returncode != 0:
        print(f"run {i}: FAIL reference failed: {desc}: {ref.stderr[-300:]}", flush=True); failed += 1; continue
    env = dict(env0, CAPUCHIN_BACKEND=backend, CAPUCHIN_KERNEL_OUTPUTS=outputs, CAPUCHIN_LOG="info",
               SIMCUDA_JITTER_US=jitter, LD_PRELOAD=prefix + lib)
    # The minimum: the most one launch touches at once as this backend charges it, from a run
    # with no pressure (deterministic: the same launches in every run of these options).
    probe = run(prog, args, dict(env, CAPUCHIN_BUDGET=str(64 * P)))
    m = re.search(r"min_needed=(\d+)", probe.stderr)
    if probe.returncode != 0 or not m:
        print(f"run {i}: FAIL probe failed: {desc}: {probe.stderr[-300:]}", flush=True); failed += 1; continue
    lo = int(m.group(1))
    stats = os.path.join(tmp, f"stats-{i}.json")
    if under_min:
        budget = max(4096, int(lo * rng.uniform(0.5, 0.95)))
        r = run(prog, args, dict(env, CAPUCHIN_BUDGET=str(budget), SIMCUDA_DEVICE_BYTES=str(max(4 * P, 1 << 30))))
    else:
        # Tiny jobs: 64 KiB pages can make the minimum exceed the natural (4 KiB-granule) peak.
        floor = int(lo * 1.02)
        budget = int(floor + u * max(0, P - floor))
        r = run(prog, args, dict(env, CAPUCHIN_BUDGET=str(budget), SIMCUDA_DEVICE_BYTES=str(budget), SIMCUDA_STATS_FILE=stats))
    problems = []
    if r.returncode != 0:
        why = [l for l in r.stderr.splitlines() if "error" in l or "failed" in l or "hung" in l]
        problems.append(f"exit {r.returncode}: {' | '.join(why)[-400:]}")
    elif r.stdout != ref.stdout: problems.append("output differs from the reference")
    elif under_min:
        if "is below what this job needs" not in r.stderr: problems.append("no warning that the budget is below the job's minimum")
    else:
        st = json.load(open(stats))
        if st["uvm_evictions"] or st["uvm_faults"]: problems.append(f"simcuda evicted {st['uvm_evictions']} / faulted {st['uvm_faults']}")
        if st["peak_device_bytes"] > budget: problems.append(f"peak {st['peak_device_bytes']} > budget {budget}")
    s = re.search(r"evictions=(\d+).*?on_demand=(\d+).*?recomputes=(\d+).*?fallbacks=(\d+)", r.stderr)
    desc += f" budget={budget / P:.2f}P{' (under the minimum ' + str(lo) + ')' if under_min else ''}"
    if s: desc += f" evict={s.group(1)} on_demand={s.group(2)} recompute={s.group(3)} fallback={s.group(4)}"
    if problems:
        failed += 1
        print(f"run {i}: FAIL {desc}: {'; '.join(problems)}", flush=True)
    else:
        ok += 1
        print(f"run {i}: ok   {desc}", flush=True)
print(f"stress_executor: {ok} of {runs} runs bit-identical, {failed} failed ({time.time() - t0:.0f} s)")
sys.exit(1 if failed else 0)
PY
