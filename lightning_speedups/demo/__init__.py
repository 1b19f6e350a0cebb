"""The embedded default: a small CNN on scikit-learn's bundled 8x8 handwritten digits."""

from lightning_speedups.demo.digits import DigitsCNN, DigitsDataModule

__all__ = ["DigitsCNN", "DigitsDataModule"]
