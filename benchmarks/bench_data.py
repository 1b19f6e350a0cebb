"""Data-pipeline benchmark: workers, persistent workers, zero-copy collate, on-device normalisation.

Reference workload: a small CNN on sklearn's handwritten digits, upsampled to 32x32 and augmented per
sample with numpy (random shift, flip, brightness, a separable blur, noise): about a millisecond of
real CPU work per sample, like a light image pipeline. Each variant is the loader that
``LoaderTuning`` builds (``resolve_loader_settings`` + ``rebuild_dataloader``) feeding the same CNN
training step. On a shared machine the load changes over seconds, so variants run in short bursts
(``--steps`` training steps each), back to back, round after round, and every figure is the median
of per-round ratios to the first variant of its group: adjacent bursts see the same load.

Run (about 2-3 minutes on 2 CPU cores)::

    /work/venv/bin/python benchmarks/bench_data.py --out benchmarks/data.md

What is measured (throughput = training samples per second over the timed steps):

* ``workers=0/1/2/auto``: ratios to 0 workers; ``auto`` resolved on this machine.
* persistent workers: 1 worker, persistent on vs off; every burst is a new epoch, so the
  non-persistent one starts and stops its worker each time (the other groups use persistent
  workers, so that only the loading itself is compared).
* zero-copy collate: the dataset returns numpy arrays batched by ``zero_copy_collate`` vs
  ``torch.tensor`` per sample plus ``default_collate`` (two copies); also the collate alone on
  ImageNet-sized uint8 samples.
* on-device normalisation: uint8 images normalised by ``DeviceNormalize`` after the transfer vs
  float32 normalised per sample in the dataset; and the bytes per batch that cross to the device.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, default_collate

from lightning_speedups.data.collate import zero_copy_collate
from lightning_speedups.data.loaders import (
    LoaderSettings,
    rebuild_dataloader,
    resolve_loader_settings,
)
from lightning_speedups.data.normalize import DeviceNormalizer

MEAN, STD = 0.25, 0.35  # of the digits in 0..1


# ----------------------------------------------------------------------------------- workload
def load_digits_uint8() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    d = load_digits()
    images = (d.images / 16.0 * 255.0).round().astype(np.uint8)  # 1797 x 8 x 8, 0..255
    return images, d.target.astype(np.int64)


def augment(img8: np.ndarray, rng: np.random.Generator, work: int) -> np.ndarray:
    """8x8 uint8 -> 32x32 uint8, with real per-sample numpy work (``work`` blur passes)."""
    x = np.kron(img8.astype(np.float32), np.ones((4, 4), np.float32))  # 32 x 32
    x = np.roll(x, shift=(int(rng.integers(-3, 4)), int(rng.integers(-3, 4))), axis=(0, 1))
    if rng.random() < 0.5:
        x = x[:, ::-1]
    x = x * rng.uniform(0.8, 1.2)
    k = np.array([1, 4, 6, 4, 1], np.float32) / 16.0
    for _ in range(work):  # separable 5-tap blur, the bulk of the per-sample cost
        p = np.pad(x, 2, mode="edge")
        x = sum(k[i] * p[i : i + 32, 2:-2] for i in range(5))
        p = np.pad(x, 2, mode="edge")
        x = sum(k[i] * p[2:-2, i : i + 32] for i in range(5))
    x = x + rng.normal(0.0, 4.0, size=x.shape).astype(np.float32)
    return np.clip(x, 0, 255).astype(np.uint8)


class DigitsAug(Dataset):
    """Augmented digits. ``mode``: 'uint8' (numpy uint8), 'float' (normalised float32 numpy, per
    sample on the CPU), 'tensor_copy' (``torch.tensor`` of the normalised float32: an extra copy)."""

    def __init__(self, mode: str = "float", work: int = 6, n: int = 1797) -> None:
        self.images, self.labels = load_digits_uint8()
        self.images, self.labels = self.images[:n], self.labels[:n]
        self.mode, self.work = mode, work

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> Any:
        rng = np.random.default_rng(i)
        img = augment(self.images[i], rng, self.work)[None]  # 1 x 32 x 32 uint8
        if self.mode == "uint8":
            return img, self.labels[i]
        x = ((img.astype(np.float32) / 255.0) - MEAN) / STD
        if self.mode == "tensor_copy":
            return torch.tensor(x), torch.tensor(self.labels[i])
        return x, self.labels[i]


class RefCNN(pl.LightningModule):
    def __init__(
        self,
        mode: str = "float",
        batch_size: int = 32,
        collate: Callable = default_collate,
        work: int = 6,
    ) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10),
        )  # fmt: skip
        self.mode, self.batch_size, self.collate, self.work = (
            mode,
            batch_size,
            collate,
            work,
        )

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(
            DigitsAug(self.mode, self.work),
            batch_size=self.batch_size,
            shuffle=True,
            collate_fn=self.collate,
            drop_last=True,
        )

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


# ----------------------------------------------------------------------------------- variants
class Variant:
    """One loader configuration; ``burst`` times ``k`` training steps pulled from it."""

    def __init__(self, name: str, loader: DataLoader, post: Callable[[Any], Any] = lambda b: b) -> None:
        self.name, self.loader, self.post = name, loader, post
        self.it = None

    def _next(self) -> Any:
        if self.it is None:
            self.it = iter(self.loader)
        try:
            return next(self.it)
        except StopIteration:
            self.it = iter(self.loader)
            return next(self.it)

    def burst(self, model: nn.Module, opt: torch.optim.Optimizer, k: int) -> float:
        """Samples per second over ``k`` steps, each burst a fresh ``iter(loader)``.

        A fresh iterator per burst keeps variants from loading ahead while the others are timed;
        persistent workers survive it, other workers start here and are shut down before the clock
        stops, so their start-up and shutdown are counted, as they are once per epoch in training.
        """
        t0 = time.perf_counter()
        self.it = iter(self.loader)
        n = 0
        for _ in range(k):
            x, y = self.post(self._next())
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            n += len(y)
        if not self.loader.persistent_workers:
            self.it = None  # shuts its workers down
        return n / (time.perf_counter() - t0)


def tuned(ds: Dataset, bs: int, collate: Callable, **settings: Any) -> DataLoader:
    """The loader LoaderTuning would build from the user's plain loader with these settings."""
    base = DataLoader(ds, batch_size=bs, shuffle=True, collate_fn=collate, drop_last=True)
    resolved = resolve_loader_settings(LoaderSettings(**settings), base, accelerator="cpu")
    return rebuild_dataloader(base, **resolved.kwargs)


def build_variants(args: argparse.Namespace) -> dict[str, list[Variant]]:
    bs, w = args.batch_size, args.work
    norm = DeviceNormalizer(MEAN, STD)
    flt = DigitsAug("float", w)
    return {
        "workers": [
            Variant(
                f"workers={n}",
                tuned(flt, bs, default_collate, num_workers=n, persistent_workers="auto"),
            )
            for n in (0, 1, 2, "auto")
        ],
        "persistent": [
            Variant(
                "1 worker, not persistent",
                tuned(flt, bs, default_collate, num_workers=1, persistent_workers=False),
            ),
            Variant(
                "1 worker, persistent",
                tuned(flt, bs, default_collate, num_workers=1, persistent_workers=True),
            ),
        ],
        "collate": [
            Variant(
                "torch.tensor + default_collate",
                tuned(DigitsAug("tensor_copy", w), bs, default_collate, num_workers=0),
            ),
            Variant(
                "numpy + zero_copy_collate",
                tuned(flt, bs, zero_copy_collate, num_workers=0),
            ),
        ],
        "normalise": [
            Variant(
                "float32 normalised per sample (CPU)",
                tuned(flt, bs, zero_copy_collate, num_workers=0),
            ),
            Variant(
                "uint8 + on-device normalisation",
                tuned(DigitsAug("uint8", w), bs, zero_copy_collate, num_workers=0),
                post=norm,
            ),
        ],
    }


def collate_micro(rounds: int = 15) -> dict[str, float]:
    """Collate alone on 32 ImageNet-sized samples (3x224x224 float32): median ms per batch, and the
    median of the per-round ratios (the two run back to back each round)."""
    rng = np.random.default_rng(0)
    arrays = [rng.integers(0, 256, (3, 224, 224), dtype=np.uint8).astype(np.float32) for _ in range(32)]
    default_collate([torch.tensor(a) for a in arrays])  # first calls pay one-off costs
    zero_copy_collate(arrays)
    copy_ms, zero_ms, ratio = [], [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        default_collate([torch.tensor(a) for a in arrays])
        t1 = time.perf_counter()
        zero_copy_collate(arrays)
        t2 = time.perf_counter()
        copy_ms.append(1000 * (t1 - t0))
        zero_ms.append(1000 * (t2 - t1))
        ratio.append((t1 - t0) / (t2 - t1))
    return {
        "torch.tensor + default_collate": statistics.median(copy_ms),
        "zero_copy_collate": statistics.median(zero_ms),
        "ratio": statistics.median(ratio),
    }


def per_sample_ms(work: int, n: int = 200) -> float:
    ds = DigitsAug("float", work)
    t0 = time.perf_counter()
    for i in range(n):
        ds[i]
    return 1000 * (time.perf_counter() - t0) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--steps",
        type=int,
        default=8,
        help="training steps per burst (one burst per variant a round)",
    )
    parser.add_argument("--rounds", type=int, default=30, help="most rounds")
    parser.add_argument(
        "--budget",
        type=float,
        default=150.0,
        help="stop starting rounds after this many seconds",
    )
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument(
        "--work",
        type=int,
        default=6,
        help="blur passes per sample (per-sample CPU cost)",
    )
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated groups: workers,persistent,collate,normalise",
    )
    parser.add_argument("--out", default="", help="write a markdown table here")
    parser.add_argument("--json", default="", help="write the raw figures here")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    import logging

    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    torch.set_num_threads(max(1, len(os.sched_getaffinity(0))))

    dl = RefCNN(work=args.work).train_dataloader()
    auto = resolve_loader_settings(LoaderSettings(), dl, accelerator="cuda" if torch.cuda.is_available() else "cpu")
    header = {
        "cpus": len(os.sched_getaffinity(0)),
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "per_sample_ms": round(per_sample_ms(args.work), 3),
        "auto": auto.summary() + " [" + "; ".join(auto.reasons) + "]",
        "torch": torch.__version__,
        "lightning": pl.__version__,
        "args": vars(args),
    }
    print(json.dumps(header, indent=1), flush=True)

    groups = build_variants(args)
    if args.only:
        keep = {v.strip() for v in args.only.split(",")}
        groups = {g: vs for g, vs in groups.items() if g in keep}
    model = RefCNN().net
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for vs in groups.values():  # warm-up burst per variant (worker start-up, first-call costs), untimed
        for v in vs:
            v.burst(model, opt, 2)
    # ratios per round against the first variant of the group, measured back to back: load on a shared
    # machine changes over seconds, so adjacent bursts see the same load and their ratio cancels it
    ratios: dict[str, list[float]] = {v.name: [] for vs in groups.values() for v in vs}
    rates: dict[str, list[float]] = {k: [] for k in ratios}
    t_start = time.perf_counter()
    rounds = 0
    while rounds < args.rounds and time.perf_counter() - t_start < args.budget:
        for vs in groups.values():
            base_rate = None
            for v in vs:
                rate = v.burst(model, opt, args.steps)
                base_rate = base_rate or rate
                rates[v.name].append(rate)
                ratios[v.name].append(rate / base_rate)
        rounds += 1
        print(
            f"round {rounds}: " + ", ".join(f"{k} {r[-1]:.2f}" for k, r in ratios.items()),
            flush=True,
        )
    elapsed = time.perf_counter() - t_start
    for vs in groups.values():
        for v in vs:
            v.it = None  # stop workers
    micro = collate_micro()

    def q(v: list[float], p: float) -> float:
        v = sorted(v)
        return v[min(len(v) - 1, max(0, round(p * (len(v) - 1))))]

    lines = [
        f"| variant | samples/s (median) | ratio to first of group (median of {rounds} paired rounds) | IQR of ratio |",
        "|---|---:|---:|---:|",
    ]
    for vs in groups.values():
        for v in vs:
            r = ratios[v.name]
            lines.append(
                f"| {v.name} | {statistics.median(rates[v.name]):.0f} | {statistics.median(r):.2f} | "
                f"{q(r, 0.25):.2f}-{q(r, 0.75):.2f} |"
            )
    verdict = ""
    if "workers" in groups:
        med = {v.name: statistics.median(ratios[v.name]) for v in groups["workers"]}
        fixed = ["workers=0", "workers=1", "workers=2"]
        best = max(fixed, key=lambda k: med[k])
        auto_r = [a / b for a, b in zip(ratios["workers=auto"], ratios[best])]
        ratio = statistics.median(auto_r)
        noise = (q(auto_r, 0.75) - q(auto_r, 0.25)) / 2
        verdict = f"auto / best fixed ({best}) = {ratio:.2f} (median of paired rounds, half-IQR {noise:.2f}): " + (
            "within the noise" if ratio >= 1 - max(noise, 0.02) else "SLOWER than the noise allows"
        )
    collate_line = (
        f"Collate alone, 32 samples of 3x224x224 float32: torch.tensor + default_collate "
        f"{micro['torch.tensor + default_collate']:.1f} ms, zero_copy_collate {micro['zero_copy_collate']:.1f} ms "
        f"(median of per-round ratios {micro['ratio']:.2f}x)."
    )
    bytes_line = (
        f"Bytes per batch to the device: float32 {args.batch_size * 32 * 32 * 4} vs uint8 {args.batch_size * 32 * 32}"
        " (4x fewer)."
    )
    table = "\n".join(lines)
    print(
        "\n"
        + table
        + "\n\n"
        + verdict
        + "\n"
        + collate_line
        + "\n"
        + bytes_line
        + f"\n({rounds} rounds, {elapsed:.0f} s)"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "header": header,
                    "ratios": ratios,
                    "rates": rates,
                    "collate_ms": micro,
                },
                f,
                indent=1,
            )
    if args.out:
        with open(args.out, "w") as f:
            f.write("# Data pipeline benchmark (tips T02, T03, T13, T18, T21)\n\n")
            f.write("Command: `" + " ".join(["/work/venv/bin/python", *sys.argv]) + "`\n\n")
            f.write("```json\n" + json.dumps(header, indent=1) + "\n```\n\n")
            f.write(table + "\n\n" + verdict + "\n\n" + collate_line + "\n\n" + bytes_line + "\n")


if __name__ == "__main__":
    main()
