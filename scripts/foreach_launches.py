"""How a PyTorch `_foreach_*` op splits into CUDA kernel launches, for traces.

PyTorch runs a foreach op on CUDA (its fast route) through `multi_tensor_apply`
(aten/src/ATen/native/cuda/MultiTensorApply.cuh): the op's tensor lists (its `depth`: how many
lists, outputs included) are walked position by position; every tensor is cut into chunks of
65,536 elements, one thread block each; a kernel is launched when the launch holds as many
blocks as it may, or as many tensors as it may and the last one's chunks are all placed. A
tensor cut by a full launch is carried into the next launch, which touches it too. The limits
are set by the kernel argument's size, which depends on how PyTorch was built, not on the GPU:
32 KB where it was built with CUDA 13+ (torch 2.15.0+cu132 from PyPI: its
include/ATen/native/cuda/MultiTensorApply.cuh switches at compile time, `CUDART_VERSION >=
13000`), 4 KB with CUDA 12 (the cu12x builds) or ROCm. (Some earlier releases chose 32 KB at run
time with CUDA 12.1+ on compute capability 7.0+, `supports_large_kernel_arg`.)

    depth:                 1    2    3    4    5        blocks per launch
    4 KB, tensors        110   64   48   36   30        320
    4 KB, scalar list     96   64   48   36   30
    32 KB, tensors       770  448  336  252  210        2240
    32 KB, scalar list   672  448  336  252  210

Off the fast route (tensors of different dtypes or devices, not dense, or whose sizes differ
between lists at one position) PyTorch loops over the positions with the plain op: one launch
per position. `_foreach_norm` (clip_grad_norm_) writes its per-tensor results in a second,
cleanup kernel: it is left as one event here (`SPLIT_EXCLUDED`).

Contract: plain Python, no torch (the trace converter runs without it). `launches` follows
multi_tensor_apply exactly for the element counts it is given; `split_kernel` turns one
recorded foreach kernel event into the events of its launches, each touching only its own
tensors, with `bytes` and `flops` shared out by elements so that the launches sum to the
original. Used by scripts/capture_torch_trace.py while capturing and by
scripts/chunk_foreach_trace.py for traces captured before it did this.
"""

CHUNK_ELEMENTS = 65536
LIMITS = {
    "4kb": {"tensors": (110, 64, 48, 36, 30), "tensors_scalar_list": (96, 64, 48, 36, 30), "blocks": 320},
    "32kb": {"tensors": (770, 448, 336, 252, 210), "tensors_scalar_list": (672, 448, 336, 252, 210), "blocks": 2240},
}
# Ops whose tensor-list arguments may repeat one list (AdamW's addcmul_(exp_avg_sq, grads, grads)):
# a trace, which names each storage once, cannot show the repeat, but the kernel gets 3 lists.
TERNARY = ("addcmul", "addcdiv")
# Foreach ops whose launches are not multi_tensor_apply's alone: kept as one event.
SPLIT_EXCLUDED = ("norm",)


def base_name(name):
    """`aten::_foreach_addcmul_` -> `addcmul`."""
    return name.split("::")[-1].removeprefix("_foreach_").rstrip("_")


def launches(numels, depth, kernel_args="32kb", scalar_list=False):
    """multi_tensor_apply's launches for list 0's element counts `numels` at `depth` lists.

    Returns one (positions, elements) pair per launch, in launch order: the list positions it
    touches (ascending; a position carried over from a full launch is in both) and the elements
    it processes. Zero-element tensors are in no launch, as in PyTorch."""
    if kernel_args not in LIMITS:
        raise ValueError(f"kernel_args must be one of {sorted(LIMITS)}, not {kernel_args!r}")
    if not 1 <= depth <= 5:
        raise ValueError(f"multi_tensor_apply takes 1 to 5 tensor lists, not {depth}")
    lim = LIMITS[kernel_args]
    max_tensors = lim["tensors_scalar_list" if scalar_list else "tensors"][depth - 1]
    max_blocks = lim["blocks"]
    out, positions, blocks, elements = [], [], 0, 0
    for t, numel in enumerate(numels):
        if numel <= 0:
            continue
        positions.append(t)
        chunks = -(-numel // CHUNK_ELEMENTS)
        for c in range(chunks):
            blocks += 1
            elements += min(CHUNK_ELEMENTS, numel - c * CHUNK_ELEMENTS)
            last_chunk = c == chunks - 1
            if (len(positions) == max_tensors and last_chunk) or blocks == max_blocks:
                out.append((positions, elements))
                blocks, elements = 0, 0
                positions = [] if last_chunk else [t]  # a cut tensor goes on in the next launch
    if blocks:
        out.append((positions, elements))
    return out


def per_position(numels):
    """The slow route: one launch per non-empty position."""
    return [([t], n) for t, n in enumerate(numels) if n > 0]


def _shares(total, weights):
    """`total` split in proportion to `weights`, in integers that sum to it."""
    whole = sum(weights)
    if whole <= 0:
        return [0] * len(weights)
    out, acc, given = [], 0, 0
    for w in weights:
        acc += w
        upto = total * acc // whole
        out.append(upto - given)
        given = upto
    return out


def split_kernel(ev, lists, plan, constant=()):
    """The events of one foreach kernel event `ev` launched as `plan` (from `launches`).

    `lists`: the op's tensor lists as storage ids, each as long as list 0 (a repeated list may be
    given once); `constant`: storage ids every launch touches (a tensor argument outside the
    lists). Each launch keeps `ev`'s reads and writes (in their order) that belong to its
    positions or to `constant`. A single launch returns `ev` itself."""
    if len(plan) <= 1:
        return [ev]
    elements = [n for _, n in plan]
    byte_shares = _shares(int(ev.get("bytes", 0)), elements)
    flop_shares = _shares(int(ev.get("flops", 0)), elements) if "flops" in ev else None
    events = []
    for k, (positions, _) in enumerate(plan):
        mine = set(constant)
        for lst in lists:
            mine.update(lst[p] for p in positions)
        launch = dict(ev, reads=[s for s in ev["reads"] if s in mine], writes=[s for s in ev["writes"] if s in mine],
                      bytes=byte_shares[k])
        if flop_shares is not None:
            if flop_shares[k]:
                launch["flops"] = flop_shares[k]
            else:
                launch.pop("flops")
        events.append(launch)
    return events
