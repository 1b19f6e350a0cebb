"""The ``tips`` command's table, written out from the registry so that it prints without importing it.

Importing the tip records imports every callback, and so torch and Lightning (several seconds); ``tips``
must answer at once. :data:`ROWS` is :func:`lightning_speedups.tips.catalog_rows` written out;
``tests/test_registry.py`` fails when they differ and prints the rows to paste here.
"""

from __future__ import annotations

from typing import Any, Optional

#: id, slug, title, the keys that turn it on, how bench times it
ROWS: tuple[tuple[str, str, str, str, str], ...] = (
    (
        "T01",
        "lr-schedule",
        "One-cycle / cyclic learning-rate schedules stepped per optimizer step",
        "speedups.lr_schedule",
        "target: 2; not timed by samples/s: a learning-rate schedule changes the optimisation, not the step time: "
        "judged by time to a target (bench --target), not samples/s",
    ),
    (
        "T02",
        "loader-workers",
        "DataLoader workers decided from the CPUs really available",
        "speedups.loaders\nspeedups.monitors.data_wait",
        "throughput: 1",
    ),
    (
        "T03",
        "pin-memory",
        "Pinned host memory for loaders feeding a GPU",
        "speedups.loaders.pin_memory",
        "throughput: 1",
    ),
    (
        "T04",
        "max-batch",
        "Largest batch that fits, learning rate scaled by the linear rule",
        "speedups.largest_batch",
        "target: 2; not timed by samples/s: changes the batch size and the learning rate, so samples/s are not like for "
        "like: judged by time to a target (bench --target)",
    ),
    (
        "T05",
        "amp",
        "Automatic mixed precision chosen for the hardware",
        "speedups.precision\nspeedups.tf32",
        "throughput: 1",
    ),
    ("T06", "optimizer", "Fused / foreach optimizer implementations", "speedups.optimizer", "throughput: 1"),
    (
        "T07",
        "cudnn-benchmark",
        "cudnn.benchmark for fixed input shapes, restored afterwards",
        "speedups.cudnn_benchmark",
        "throughput: 1",
    ),
    (
        "T08",
        "no-sync",
        "No needless CPU<->GPU synchronisations in the training step",
        "speedups.monitors.sync_guard",
        "-; not timed by samples/s: a check or lint rule (doctor / lint), nothing to time",
    ),
    (
        "T09",
        "activation-checkpointing",
        "Activation (gradient) checkpointing of chosen blocks",
        "speedups.checkpointing",
        "throughput: 1",
    ),
    (
        "T10",
        "grad-accumulation",
        "Gradient accumulation to reach an effective batch",
        "speedups.effective_batch_size",
        "-; not timed by samples/s: gradient accumulation changes the optimisation, not the step time: compare "
        "accuracy, not samples/s",
    ),
    (
        "T11",
        "ddp",
        "DistributedDataParallel, never DataParallel",
        "speedups.ddp\nspeedups.fsdp",
        "-; not timed by samples/s: needs several devices; bench times one device (use the ddp preset on the real "
        "machine)",
    ),
    (
        "T12",
        "grads-to-none",
        "zero_grad(set_to_none=True)",
        "speedups.monitors.checks",
        "-; not timed by samples/s: a check or lint rule (doctor / lint), nothing to time",
    ),
    (
        "T13",
        "zero-copy",
        "torch.as_tensor / from_numpy instead of torch.tensor",
        "lint / doctor",
        "-; not timed by samples/s: a check or lint rule (doctor / lint), nothing to time",
    ),
    (
        "T14",
        "debug-off",
        "Debugging tools off when not debugging",
        "speedups.debug\nspeedups.monitors.checks",
        "-; not timed by samples/s: the baseline already runs with the debugging tools off (doctor checks for them)",
    ),
    (
        "T15",
        "grad-clipping",
        "Gradient clipping: norm, value, adaptive (AGC)",
        "speedups.grad_clip",
        "target: 1; not timed by samples/s: gradient clipping changes the optimisation, not the step time: judged by "
        "time to a target (bench --target), not samples/s",
    ),
    ("T16", "conv-bias", "No bias in a convolution right before BatchNorm", "speedups.conv_bias", "throughput: 1"),
    (
        "T17",
        "no-grad-eval",
        "No gradients during validation / inference",
        "speedups.monitors.checks",
        "-; not timed by samples/s: a check or lint rule (doctor / lint), nothing to time",
    ),
    (
        "T18",
        "input-norm",
        "Normalised inputs, normalisation on the device",
        "speedups.device_normalize\nspeedups.monitors.input_stats",
        "-; not timed by samples/s: a check or lint rule (doctor / lint), nothing to time",
    ),
    (
        "T19",
        "fast-storage",
        "Data on fast local storage",
        "speedups.monitors.storage\nspeedups.monitors.storage_root\nspeedups.monitors.data_wait",
        "-; not timed by samples/s: a storage check; the data-wait column shows whether loading limits the step",
    ),
    (
        "T20",
        "on-device",
        "Create tensors directly on the device",
        "lint / doctor",
        "-; not timed by samples/s: a check or lint rule (doctor / lint), nothing to time",
    ),
    (
        "T21",
        "non-blocking",
        "Non-blocking copies from pinned memory",
        "speedups.monitors.non_blocking\nspeedups.loaders.pin_memory",
        "-; not timed by samples/s: covered by T03: non-blocking copies only overlap from pinned memory",
    ),
    ("T22", "fusion", "Fuse element-wise ops with torch.compile", "speedups.compile", "throughput: 1"),
    (
        "T23",
        "multiple-of-8",
        "Sizes that are multiples of 8 for tensor cores",
        "lint / doctor",
        "-; not timed by samples/s: a check or lint rule (doctor / lint), nothing to time",
    ),
    (
        "T24",
        "channels-last",
        "channels_last memory format for 4D/5D tensors",
        "speedups.channels_last",
        "throughput: 1",
    ),
)


def tip_lines(rows: tuple[tuple[str, str, str, str, str], ...] = ROWS, width: int = 80) -> list[str]:
    """The ``tips`` listing as lines of at most ``width`` characters: per tip its id, slug and title, then
    the keys that turn it on and how bench times it, each wrapped under it.

    Examples:
        >>> for line in tip_lines(ROWS[23:], width=60):
        ...     print(line)
        T24 channels-last: channels_last memory format for 4D/5D
            tensors
            on: speedups.channels_last
            bench: throughput: 1
    """
    import textwrap

    width = max(width, 40)
    out: list[str] = []
    for tip, slug, title, keys, bench in rows:
        out += textwrap.wrap(f"{tip} {slug}: {title}", width, subsequent_indent="    ")
        on = ", ".join(keys.split("\n"))
        out += textwrap.wrap(f"on: {on}", width, initial_indent="    ", subsequent_indent="        ")
        out += textwrap.wrap(f"bench: {bench}", width, initial_indent="    ", subsequent_indent="        ")
    return out


def print_rows(rows: tuple[tuple[str, str, str, str, str], ...] = ROWS, console: Optional[Any] = None) -> None:
    """Print the ``tips`` listing at the terminal's width (``COLUMNS``; 80 when unknown), one block per tip."""
    import shutil

    width = console.width if console is not None else shutil.get_terminal_size((80, 24)).columns
    text = "\n".join(["lightning_speedups: the tips (T01-T24)", "", *tip_lines(rows, width)])
    if console is not None:
        console.print(text, markup=False, highlight=False)
    else:
        print(text)


def print_tips(console: Optional[Any] = None) -> None:
    """The ``tips`` command."""
    print_rows(ROWS, console)
