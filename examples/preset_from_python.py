"""A preset used from Python: the same parts as `configs/fast.yaml`, on your own Trainer.

Run:  python examples/preset_from_python.py [--preset fast] [--max-epochs 3]
"""

import argparse

from lightning.pytorch import Trainer

from lightning_speedups import preset
from lightning_speedups.demo import DigitsCNN, DigitsDataModule


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--preset", nargs="+", default=["fast"], help="one or more presets, composed in order")
    parser.add_argument("--max-epochs", type=int, default=3)
    parser.add_argument("--max-steps", type=int, default=-1)
    args = parser.parse_args()

    p = preset(*args.preset)  # e.g. preset("fast", "memory")
    print("parts turned on:", ", ".join(sorted(p.parts())) or "none")
    trainer = Trainer(
        **p.trainer_kwargs(),
        callbacks=p.callbacks(),
        max_epochs=args.max_epochs,
        max_steps=args.max_steps,
        logger=False,
        enable_checkpointing=False,
    )
    model, data = DigitsCNN(), DigitsDataModule()
    trainer.fit(model, datamodule=data)
    (metrics,) = trainer.validate(model, datamodule=data, verbose=False)
    print("val_acc:", metrics["val_acc"])


if __name__ == "__main__":
    main()
