#!/usr/bin/env python3
"""torch_probes.py: small PyTorch jobs for issue 16's checks on a real GPU, each run plain and
under `capuchin run` by scripts/gpu_torch_issue16.py, which compares and judges them.

  graph: a training step (MLP, SGD) captured with torch.cuda.graph (capture_error_mode
         "global", the default) after eager work on pressure tensors, then replayed 8 times on
         new data. Under a budget capuchin's drain thread runs during the capture: it must not
         invalidate it (an illegal call during a global-mode capture does), and the replayed
         losses must be those of the plain run.
  ranks: one rank of `torchrun --nproc-per-node N`: binds cuda:LOCAL_RANK, a few all_reduce'd
         steps over NCCL, then (between two barriers, so every rank is alive) rank 0 asks the
         daemon for its sessions (`$CAPUCHIN_CLI sessions --all --json`) and prints them.
  gemm:  bf16 GEMMs (a plain bf16 matmul, and F.linear under torch.autocast bf16 with its
         casts) whose operands have byte sizes found nowhere else, printed as OPERAND lines, so
         that the recorded trace can be searched for the launches that touched them (on
         Hopper cuBLASLt may pass operands inside TMA descriptors, which a scan of the
         launch's parameters does not see).
Each prints `SUMMARY {json}` at the end (results as float hex: plain and capuchin runs must
match bit for bit). Exit 0, 1 on a failure, 77 when torch sees no GPU.
"""
import argparse
import json
import os
import subprocess
import sys

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS; before CUDA starts

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def digest(t):
    """A bit-exact fingerprint of a tensor: float64 sum and sum of squares, as hex."""
    d = t.detach().double()
    return [d.sum().item().hex(), (d * d).sum().item().hex()]


def probe_graph():
    dev = torch.device("cuda")
    torch.manual_seed(1)
    gen = torch.Generator().manual_seed(2)
    model = nn.Sequential(nn.Linear(2048, 8192), nn.GELU(), nn.Linear(8192, 2048)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    # Pressure: tensors used eagerly just before the capture, so that under a budget the
    # executor has evictions in flight (its drain thread busy) when the capture begins.
    pressure = [torch.full((64, 2**20), float(i), device=dev) for i in range(6)]  # 6 x 256 MiB
    static_x = torch.randn(512, 2048, generator=gen).to(dev)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up on a side stream, as torch.cuda.graph requires
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            model(static_x).square().mean().backward()
            opt.step()
            for p in pressure:
                p.add_(1.0)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):  # capture_error_mode="global"
        static_loss = model(static_x).square().mean()
        static_loss.backward()
        opt.step()
    losses = []
    for _ in range(8):
        static_x.copy_(torch.randn(512, 2048, generator=gen).to(dev))
        g.replay()
        for p in pressure:  # eager work between replays keeps the budget under pressure
            p.mul_(0.5)
        losses.append(static_loss.item().hex())
    torch.cuda.synchronize()
    print(f"PASS graph: captured and replayed 8 times, last loss {float.fromhex(losses[-1]):.6f}", flush=True)
    return {"losses": losses, "params": [digest(p) for p in model.parameters()],
            "pressure": [digest(p) for p in pressure], "peak_allocated": torch.cuda.max_memory_allocated(dev)}


def probe_ranks():
    import torch.distributed as dist
    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    try:  # device_id (torch 2.3+) binds the communicator at once
        dist.init_process_group("nccl", device_id=dev)
    except TypeError:
        dist.init_process_group("nccl")
    torch.manual_seed(3)
    w = torch.randn(4096, 4096, device=dev)
    for _ in range(4):
        x = torch.randn(1024, 4096, device=dev)
        g = (x @ w).square().mean()
        t = torch.stack([g])
        dist.all_reduce(t)
    torch.cuda.synchronize()
    info = {"rank": rank, "local_rank": local, "pid": os.getpid(), "device": torch.cuda.current_device(),
            "reduced": t.item().hex()}
    print("RANK " + json.dumps(info), flush=True)
    dist.barrier()  # every rank alive and attached: the daemon's view now
    if rank == 0 and os.environ.get("CAPUCHIN_CLI"):
        p = subprocess.run([os.environ["CAPUCHIN_CLI"], "sessions", "--all", "--json"], capture_output=True, text=True,
                           timeout=20)
        print("SESSIONS " + " ".join(p.stdout.split()), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return info


def probe_gemm():
    dev = torch.device("cuda")
    torch.manual_seed(4)
    out = {}
    # 1. bf16 matmul: A (3000 x 2048), B (2048 x 1536), C (3000 x 1536).
    a = torch.randn(3000, 2048, device=dev, dtype=torch.bfloat16)
    b = torch.randn(2048, 1536, device=dev, dtype=torch.bfloat16)
    torch.cuda.synchronize()
    c = a @ b
    torch.cuda.synchronize()
    ops = {"A": a, "B": b, "C": c}
    print("GEMM matmul_bf16 " + " ".join(f"{k}={t.untyped_storage().nbytes()}" for k, t in ops.items()), flush=True)
    out["matmul_bf16"] = digest(c)
    # 2. F.linear under autocast: X (2500 x 1024) and W (768 x 1024) float32, cast to bf16 by
    # autocast (new allocations), bias (768); out (2500 x 768) bf16 (cuBLASLt, bias epilogue).
    x = torch.randn(2500, 1024, device=dev)
    w = torch.randn(768, 1024, device=dev)
    bias = torch.randn(768, device=dev)
    torch.cuda.synchronize()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = F.linear(x, w, bias)
    torch.cuda.synchronize()
    print(f"GEMM linear_autocast X_bf16={2500 * 1024 * 2} W_bf16={768 * 1024 * 2} Y={y.untyped_storage().nbytes()}",
          flush=True)
    out["linear_autocast"] = digest(y)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("probe", choices=["graph", "ranks", "gemm"])
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print(f"SKIP torch_probes {a.probe}: torch.cuda.is_available() is False (no GPU)")
        return 77
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.use_deterministic_algorithms(True)
    print(f"INFO torch {torch.__version__}, probe {a.probe}, allocator "
          f"{os.environ.get('PYTORCH_CUDA_ALLOC_CONF', 'default')}", flush=True)
    result = {"graph": probe_graph, "ranks": probe_ranks, "gemm": probe_gemm}[a.probe]()
    result.update(probe=a.probe, pid=os.getpid(), torch=torch.__version__)
    print("SUMMARY " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
