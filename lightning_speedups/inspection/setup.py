"""What ``bench`` plans with: the counts of :func:`~lightning_speedups.inspection.model.inspect_model`.

:class:`SetupInfo` is the small summary bench needs to decide which tips to time on a setup (a tip's
bench variant ``needs`` ``"cuda"``, ``"convs"``, ``"conv_bias"``, ``"blocks"`` or ``"compile"``);
:func:`inspect_setup` fills it from the same model inspection the doctor reads.

Example::

    info = inspect_setup(model, "cpu")
    info.has("conv_bias")      # True: a biased convolution feeds a BatchNorm
    info.has("cuda")           # False
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from lightning_speedups.inspection.model import ModelFacts, inspect_model

__all__ = ["NEEDS", "NEED_PARTS", "SetupInfo", "inspect_setup"]

#: part of :class:`~lightning_speedups.inspection.model.ModelFacts` behind each model need.
NEED_PARTS = {"convs": "channels_last", "conv_bias": "conv_bias", "blocks": "checkpointing", "compile": "compile"}
#: everything :meth:`SetupInfo.has` knows.
NEEDS = ("cuda", *NEED_PARTS)


@dataclass
class SetupInfo:
    """What ``bench`` learnt about the user's setup before running anything.

    Attributes:
        device: ``"cpu"`` or ``"cuda"``.
        conv_modules: modules with 4D/5D weights (``None``: could not tell).
        conv_bias_pairs: biased convolutions that feed a BatchNorm.
        repeated_blocks: blocks ``checkpointing.targets: [auto]`` would wrap.
        compile_targets: sub-modules ``compile.enabled`` would compile.
        model: the model's class name.
        errors: part name -> why the inspection with that part failed.
    """

    device: str = "cpu"
    conv_modules: Optional[int] = 0
    conv_bias_pairs: Optional[int] = 0
    repeated_blocks: Optional[int] = 0
    compile_targets: Optional[int] = 0
    model: str = ""
    errors: dict[str, str] = field(default_factory=dict)

    def has(self, need: str) -> Optional[bool]:
        """Whether the setup has ``need`` (``None``: unknown, the part could not inspect the model)."""
        if need == "cuda":
            return self.device == "cuda"
        value = {
            "convs": self.conv_modules,
            "conv_bias": self.conv_bias_pairs,
            "blocks": self.repeated_blocks,
            "compile": self.compile_targets,
        }[need]
        return None if value is None else value > 0

    @classmethod
    def from_model_facts(cls, facts: ModelFacts) -> SetupInfo:
        """The counts of one model inspection (only the parts bench plans with)."""

        def count(value: Any) -> Optional[int]:
            return None if value is None else len(value)

        plan = facts.conv_bias_plan
        return cls(
            device=facts.device,
            conv_modules=count(facts.channels_last_modules),
            conv_bias_pairs=None if plan is None else len(plan.pairs),
            repeated_blocks=count(facts.checkpoint_candidates),
            compile_targets=count(facts.compile_targets),
            model=facts.model,
            errors={p: e for p, e in facts.errors.items() if p in NEED_PARTS.values()},
        )


def inspect_setup(model: Any, device: str) -> SetupInfo:
    """Inspect a built model (nothing is changed) and count what bench's variants need.

    A part that fails on the model is recorded in ``errors`` and its count is ``None``.
    """
    return SetupInfo.from_model_facts(inspect_model(model, device))
