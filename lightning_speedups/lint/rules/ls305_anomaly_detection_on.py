"""LS305 (tip T14), anomaly-detection-on: set_detect_anomaly(True) / detect_anomaly() / Trainer(detect_anomaly=True)
outside debugging code."""

from __future__ import annotations

from collections.abc import Iterator

from lightning_speedups.lint.astutil import TRAINER, is_const, keyword
from lightning_speedups.lint.context import FileContext
from lightning_speedups.lint.rules.base import AnyHit, Rule

_DEBUG_WORDS = ("debug",)


def _anomaly_on(ctx: FileContext) -> Iterator[AnyHit]:
    for call in ctx.calls:
        name = ctx.call_name(call)
        hit = None
        if name == "torch.autograd.set_detect_anomaly":
            kw = keyword(call, "mode")
            value = kw.value if kw is not None else (call.args[0] if call.args else None)
            if is_const(value, True):
                hit = "torch.autograd.set_detect_anomaly(True) re-runs checks on every backward op"
        elif name == "torch.autograd.detect_anomaly":
            hit = "torch.autograd.detect_anomaly() re-runs checks on every backward op"
        elif name == TRAINER:
            kw = keyword(call, "detect_anomaly")
            if kw is not None and is_const(kw.value, True):
                hit = "Trainer(detect_anomaly=True) re-runs checks on every backward op"
        if hit and not ctx.purpose.is_exempt(call, _DEBUG_WORDS, ("anomaly",)):
            yield call, hit + " (outside debugging code)"


RULE = Rule(
    "LS305",
    "T14",
    "anomaly-detection-on",
    "set_detect_anomaly(True) / detect_anomaly() / Trainer(detect_anomaly=True) outside debugging code",
    "remove it, or turn it on only while hunting a NaN (behind a --debug flag, or the debug preset)",
    _anomaly_on,
    ("anomaly",),
)
