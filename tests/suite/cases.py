"""The cases the suite runs: every ``SuiteCase`` of every tip of the registry."""

from __future__ import annotations

from lightning_speedups.tips.record import SuiteCase

from suite.harness import Entry


def _dev_entries() -> list[Entry]:  # TEMPORARY: until lightning_speedups.tips carries the records
    from lightning_speedups.functional import to_channels_last

    return [
        Entry("T16", SuiteCase("conv_bias", settings={"conv_bias": True}, maths="unchanged", kinds=("cnn", "manual")), ("conv_bias",)),
        Entry("T24", SuiteCase("channels_last", settings={"channels_last": True}, maths="unchanged", kinds=("cnn",)), ("channels_last",)),
        Entry("T24", SuiteCase("to_channels_last", function=to_channels_last, maths="unchanged", kinds=("cnn",))),
        Entry("T01", SuiteCase("lr_schedule", settings={"lr_schedule.name": "onecycle"}), ("lr_schedule",)),
        Entry("T09", SuiteCase("checkpointing", settings={"checkpointing.targets": ["auto"]}, maths="unchanged", kinds=("transformer",)), ("checkpointing",)),
        Entry("T14", SuiteCase("debug", settings={"debug": True}, compose=False), ("debug",)),
        Entry("T15", SuiteCase("grad_clip_norm", settings={"grad_clip.algorithm": "norm"}), ("grad_clip",)),
        Entry("T10", SuiteCase("effective_batch", settings={"effective_batch_size": 8}), ("effective_batch_size",)),
    ]


ENTRIES: list[Entry] = _dev_entries()
BY_ID: dict[str, Entry] = {e.id: e for e in ENTRIES}
