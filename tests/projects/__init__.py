"""Projects shaped like popular public Lightning projects, written for these tests (issue 12).

Each module is one project: a LightningModule (and a DataModule where the public ones have one) as
their authors write them, tiny enough to fit a few batches in well under a second on a CPU. Every
model keeps ``last_loss`` (the last training loss) so a test can check that a run stayed finite.
:data:`PROJECTS` names them with what a user's YAML would say (``model`` / ``data`` class paths,
callbacks under ``trainer.callbacks``, Trainer settings).
"""

from __future__ import annotations

from projects.registry import PROJECTS, Project

__all__ = ["PROJECTS", "Project"]
