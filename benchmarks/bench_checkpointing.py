"""T09 benchmark: peak training memory and step time with and without activation checkpointing.

Two models, each measured plain and with ``checkpoint_modules(model, "auto")`` side by side in one
run, on CPU:

* a small transformer encoder (6 layers, d=128, 4 heads, ff=512, batch 8 x 128 tokens),
* a small residual CNN (3 stages x 2 blocks, 32-128 channels, batch 8 x 3 x 64 x 64).

How memory is measured (CPU has no ``torch.cuda.max_memory_allocated``):

1. **Peak allocated during one forward + backward** (the headline figure): ``torch.profiler`` with
   ``profile_memory=True`` records every allocation and free of the CPU allocator with its
   timestamp; the running sum over the step, in time order, gives the peak of live bytes above what
   existed before the step (parameters and the input are already there; gradients, activations and
   temporaries count). This is exact allocator accounting, unaffected by glibc caching and other
   processes, which peak-RSS measurements in subprocesses are not.
2. **Bytes saved for backward** (cross-check): ``torch.autograd.graph.saved_tensors_hooks`` sees
   every tensor autograd keeps for the backward pass; distinct storages are summed once. This is
   the activation memory that checkpointing targets.

Time: the median of interleaved steps (plain, checkpointed, plain, ...) after warm-up, so load from
other processes hits both alike. On a shared, oversubscribed machine wall time is dominated by
waiting for a core, so the CPU time of this process per step (``time.process_time``, one thread by
default) is reported too: it counts the work done and is the figure to trust there. Only ratios are meant to carry over to other machines.

Usage::

    python benchmarks/bench_checkpointing.py [--threads 1] [--steps 6] [--json out.json]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import sys
import time

import torch
from torch import nn

from lightning_speedups.functional.checkpointing import checkpoint_modules

MiB = 2**20


class Transformer(nn.Module):
    def __init__(self, vocab=1000, d=128, heads=4, ff=512, layers=6):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, heads, ff, dropout=0.1, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens):
        return self.head(self.encoder(self.embed(tokens)))


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.skip = (
            nn.Identity()
            if stride == 1 and cin == cout
            else nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
        )

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.skip(x))


class ResNet(nn.Module):
    def __init__(self, widths=(32, 64, 128), blocks=2, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 3, 1, 1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU())
        layers, cin = [], widths[0]
        for i, w in enumerate(widths):
            for j in range(blocks):
                layers.append(Block(cin, w, 2 if (j == 0 and i > 0) else 1))
                cin = w
        self.blocks = nn.Sequential(*layers)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes))

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)))


def step(model, x):
    for p in model.parameters():
        p.grad = None
    out = model(x)
    out.float().square().mean().backward()


def peak_allocated(model, x):
    """Peak live bytes allocated by the CPU allocator during one forward + backward."""
    from torch.profiler import ProfilerActivity, profile

    for p in model.parameters():
        p.grad = None
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step(model, x)
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events.sort(key=lambda e: e.start_ns())
    live = peak = 0
    for e in events:
        live += e.nbytes()
        peak = max(peak, live)
    return peak


def saved_for_backward(model, x):
    """Bytes of the distinct storages autograd saves for the backward pass."""
    storages: dict[int, int] = {}

    def pack(t):
        s = t.untyped_storage()
        storages[s.data_ptr()] = s.nbytes()
        return t

    for p in model.parameters():
        p.grad = None
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(x)
        out.float().square().mean().backward()
    return sum(n for ptr, n in storages.items() if ptr not in params)


def timed(model, x):
    """(wall seconds, CPU seconds of this process) of one step."""
    w0, c0 = time.perf_counter(), time.process_time()
    step(model, x)
    return time.perf_counter() - w0, time.process_time() - c0


def bench(name, factory, make_input, steps):
    torch.manual_seed(0)
    plain = factory()
    ckpt = copy.deepcopy(plain)
    wrapped = checkpoint_modules(ckpt, "auto")
    x = make_input()
    for m in (plain, ckpt):  # warm-up
        step(m, x)
    peak = [peak_allocated(m, x) for m in (plain, ckpt)]
    saved = [saved_for_backward(m, x) for m in (plain, ckpt)]
    times: list[list[tuple[float, float]]] = [[], []]
    for _ in range(steps):
        for i, m in enumerate((plain, ckpt)):
            times[i].append(timed(m, x))
    med = [statistics.median(w for w, _ in t) for t in times]
    cpu = [statistics.median(c for _, c in t) for t in times]
    params = sum(p.numel() * p.element_size() for p in plain.parameters())
    return {
        "model": name,
        "checkpointed_modules": len(wrapped),
        "param_MiB": round(params / MiB, 2),
        "peak_MiB_plain": round(peak[0] / MiB, 1),
        "peak_MiB_ckpt": round(peak[1] / MiB, 1),
        "peak_ratio": round(peak[1] / peak[0], 3),
        "saved_MiB_plain": round(saved[0] / MiB, 1),
        "saved_MiB_ckpt": round(saved[1] / MiB, 1),
        "saved_ratio": round(saved[1] / saved[0], 3),
        "step_ms_plain": round(med[0] * 1e3, 1),
        "step_ms_ckpt": round(med[1] * 1e3, 1),
        "time_ratio": round(med[1] / med[0], 3),
        "cpu_time_ratio": round(cpu[1] / cpu[0], 3),
    }


def cpu_name() -> str:
    from lightning_speedups.functional.precision import cpuinfo_field

    return cpuinfo_field("model name") or platform.processor() or platform.machine()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=6, help="timed steps per variant")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    t0 = time.time()
    results = [
        bench("transformer", Transformer, lambda: torch.randint(0, 1000, (8, 128)), args.steps),
        bench("cnn", ResNet, lambda: torch.randn(8, 3, 64, 64), args.steps),
    ]
    meta = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": f"{cpu_name()}, {os.cpu_count()} logical CPUs",
        "threads": args.threads,
        "date": time.strftime("%Y-%m-%d"),
        "command": "python " + " ".join(sys.argv),
        "wall_s": round(time.time() - t0, 1),
    }
    cols = list(results[0])
    print(" | ".join(cols))
    for r in results:
        print(" | ".join(str(r[c]) for c in cols))
    print(json.dumps(meta))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
