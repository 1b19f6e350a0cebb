"""lightning_speedups: make PyTorch Lightning training faster."""

__version__ = "0.1.0"
