"""The doctor's run-time view of host reads (T08 off CUDA, issue 29) on a public library's training:
darts' N-BEATS built and fitted by darts itself (``model.fit``), SpeedAdvisor passed the way darts' docs
say (``pl_trainer_kwargs={"callbacks": [...]}``). Prints the host-read table and T08's finding.

    python benchmarks/host_reads_table.py [--steps 20]
"""

from __future__ import annotations

import argparse

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    from darts import TimeSeries
    from darts.models import NBEATSModel

    from lightning_speedups.advisor import SpeedAdvisor

    advisor = SpeedAdvisor(check_steps=args.steps, print_report=False)  # serves either Lightning package
    t = np.arange(400, dtype=np.float32)
    series = TimeSeries.from_values((np.sin(t / 6) + 0.1 * np.cos(t / 2)).astype(np.float32))
    model = NBEATSModel(
        input_chunk_length=12,
        output_chunk_length=4,
        num_stacks=2,
        num_blocks=1,
        num_layers=2,
        layer_widths=32,
        batch_size=16,
        n_epochs=100,
        random_state=0,
        pl_trainer_kwargs={
            "accelerator": "cpu",
            "logger": False,
            "enable_checkpointing": False,
            "max_steps": args.steps,
            "callbacks": [advisor],
        },
    )
    model.fit(series)
    reads = advisor.facts.host_reads
    print("\n".join(reads.table()))
    t08 = next(f for f in advisor.findings if f.tip == "T08")
    print(f"\nT08 {t08.status}: {t08.evidence}")
    for note in t08.notes:
        print(f"note: {note}")


if __name__ == "__main__":
    main()
