"""The Lightning package the shared suite runs under: ``lightning.pytorch`` by default, ``pytorch_lightning``
with ``SPEEDUPS_SUITE_NAMESPACE=pytorch_lightning`` (``tests/test_suite_namespaces.py`` runs the whole suite so:
every part, in a Trainer and on modules of the older package)."""

from __future__ import annotations

import importlib
import os

NAMESPACE = os.environ.get("SPEEDUPS_SUITE_NAMESPACE", "lightning.pytorch")
pl = importlib.import_module(NAMESPACE)
Callback = pl.Callback
