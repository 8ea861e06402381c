#!/usr/bin/env python3
"""torch_train.py: a deterministic PyTorch training job for checking capuchin on a real GPU.

Two models, sizes fixed so their natural peak is known and repeatable:
  resnet: a ResNet-18-style CNN (basic blocks [2,2,2,2], BatchNorm), batch 64 of 3x128x128,
          100 classes, SGD with momentum;
  gpt:    a GPT-style decoder (6 layers, d_model 768, 12 heads, explicit causal attention,
          GELU MLP, pre-LayerNorm), batch 16 x 512 tokens, vocabulary 8192, AdamW.
Deterministic: fixed seeds, synthetic data from a seeded CPU generator, cudnn.benchmark off,
cudnn.deterministic on, torch.use_deterministic_algorithms(True), CUBLAS_WORKSPACE_CONFIG set
before CUDA starts, no dropout, no non-deterministic ops (explicit attention and mean
pooling instead of fused/atomic kernels). So a run under capuchin must print the same losses,
bit for bit, as a plain run.

Prints per iteration `iter N loss <float.hex> (<decimal>) time_ms T used_mib U` and at the
end one line `SUMMARY {json}`: model, device, pid, iterations, losses (hex), iteration
seconds, torch.cuda.max_memory_allocated (`peak_allocated`), the most device memory seen in
use (cudaMemGetInfo sampled after each forward and backward, `device_used_peak`) and the
use before the model existed (`device_used_base`, the CUDA context).

--bf16: the forward pass and loss under torch.autocast(dtype=torch.bfloat16): bf16 GEMMs
through cuBLASLt (on Hopper, kernels that take their operands in TMA descriptors).

--dry: a degraded CPU mode (tiny sizes, 3 iterations, twice over, checking both passes give
identical losses) for a syntax and logic check where no GPU is present.
"""
import argparse
import json
import os
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS; before CUDA starts

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = None
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.short is None else self.short(x)))


class ResNetish(nn.Module):
    def __init__(self, width=64, classes=100):
        super().__init__()
        w = [width, width * 2, width * 4, width * 8]
        self.stem = nn.Sequential(nn.Conv2d(3, w[0], 3, 1, 1, bias=False), nn.BatchNorm2d(w[0]), nn.ReLU())
        layers, cin = [], w[0]
        for i, c in enumerate(w):
            layers += [BasicBlock(cin, c, 1 if i == 0 else 2), BasicBlock(c, c, 1)]
            cin = c
        self.layers = nn.Sequential(*layers)
        self.head = nn.Linear(cin, classes)

    def forward(self, x):
        return self.head(self.layers(self.stem(x)).mean(dim=(2, 3)))  # mean pooling: deterministic backward


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x, mask):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / (d // self.heads) ** 0.5)
        att = att.masked_fill(mask[:t, :t], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPTish(nn.Module):
    def __init__(self, vocab=8192, d=768, layers=6, heads=12, seq=512):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(seq, d))
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.register_buffer("mask", torch.triu(torch.ones(seq, seq, dtype=torch.bool), diagonal=1), persistent=False)
        nn.init.normal_(self.pos, std=0.02)

    def forward(self, idx):
        x = self.tok(idx) + self.pos[: idx.shape[1]]
        for blk in self.blocks:
            x = blk(x, self.mask)
        return self.head(self.ln(x))


def build(model, dry):
    """The model, optimizer and a batch maker (CPU generator: the same data on any device)."""
    if model == "resnet":
        batch, size, classes = (4, 32, 10) if dry else (64, 128, 100)
        net = ResNetish(width=8 if dry else 64, classes=classes)
        opt = lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=1e-4)  # noqa: E731

        def batch_of(gen):
            x = torch.randn(batch, 3, size, size, generator=gen)
            y = torch.randint(0, classes, (batch,), generator=gen)
            return x, y

        loss_of = lambda out, y: F.cross_entropy(out, y)  # noqa: E731
    else:
        vocab, d, layers, heads, seq, batch = (512, 64, 2, 4, 64, 2) if dry else (8192, 768, 6, 12, 512, 16)
        net = GPTish(vocab, d, layers, heads, seq)
        opt = lambda p: torch.optim.AdamW(p, lr=3e-4, weight_decay=0.01, foreach=True)  # noqa: E731

        def batch_of(gen):
            idx = torch.randint(0, vocab, (batch, seq + 1), generator=gen)
            return idx[:, :-1].contiguous(), idx[:, 1:].contiguous()

        loss_of = lambda out, y: F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))  # noqa: E731
    return net, opt, batch_of, loss_of


def used_bytes(device):
    if device.type != "cuda":
        return 0
    free, total = torch.cuda.mem_get_info(device)
    return total - free


def train(model, device, iters, dry, quiet=False, bf16=False):
    torch.manual_seed(1234)
    gen = torch.Generator().manual_seed(4321)
    base = used_bytes(device)
    net, make_opt, batch_of, loss_of = build(model, dry)
    net = net.to(device).train()
    opt = make_opt(net.parameters())
    losses, times, used_peak = [], [], base
    for it in range(1, iters + 1):
        x, y = batch_of(gen)
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        x, y = x.to(device), y.to(device)
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = loss_of(net(x), y)
        used_peak = max(used_peak, used_bytes(device))
        loss.backward()
        used_peak = max(used_peak, used_bytes(device))
        opt.step()
        value = loss.item()  # a host sync (capuchin learns iterations from the launch pattern, syncs or not)
        dt = time.perf_counter() - t0
        losses.append(value)
        times.append(dt)
        if not quiet:
            print(f"iter {it} loss {value.hex()} ({value:.8f}) time_ms {dt * 1e3:.2f} "
                  f"used_mib {used_bytes(device) / 2**20:.0f}", flush=True)
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0
    return losses, times, peak, used_peak, base


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=["resnet", "gpt"], required=True)
    ap.add_argument("--iters", type=int, default=12)
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    ap.add_argument("--dry", action="store_true", help="tiny sizes on the CPU, a logic check without a GPU")
    ap.add_argument("--bf16", action="store_true", help="forward and loss under torch.autocast bfloat16")
    a = ap.parse_args()
    if a.iters < 1:
        ap.error("--iters must be at least 1")
    if a.dry:
        a.device, a.iters = "cpu", min(a.iters, 3)
    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("SKIP torch_train: torch.cuda.is_available() is False (no GPU); use --dry for a CPU check")
        return 77
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.use_deterministic_algorithms(True)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"INFO torch {torch.__version__}, model {a.model}{' (autocast bf16)' if a.bf16 else ''}, device {name}, iterations {a.iters}, "
          f"allocator {os.environ.get('PYTORCH_CUDA_ALLOC_CONF', 'default')}", flush=True)
    losses, times, peak, used_peak, base = train(a.model, device, a.iters, a.dry, bf16=a.bf16)
    ok = all(l == l and abs(l) != float("inf") for l in losses)
    if a.dry:  # determinism check: a second pass must repeat every loss exactly
        again, _, _, _, _ = train(a.model, device, a.iters, a.dry, quiet=True, bf16=a.bf16)
        same = again == losses
        print(f"{'PASS' if same else 'FAIL'} dry: a second pass repeats the {len(losses)} losses exactly", flush=True)
        ok = ok and same
    print(f"{'PASS' if ok else 'FAIL'} losses finite", flush=True)
    summary = {"model": a.model, "device": name, "pid": os.getpid(), "iterations": a.iters,
               "losses": [l.hex() for l in losses], "iter_s": times, "peak_allocated": peak,
               "device_used_peak": used_peak, "device_used_base": base, "dry": a.dry,
               "torch": torch.__version__, "bf16": a.bf16}
    print("SUMMARY " + json.dumps(summary), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
