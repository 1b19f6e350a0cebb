"""Where the pack lives and which commands it has: plain constants, no imports of torch or Lightning (the
console script reads them before anything heavy loads)."""

from __future__ import annotations

import os

__all__ = ["PACKAGE_DIR", "PACK_COMMANDS", "TRAINER_COMMANDS"]

#: The package's own folder (frames under it are the pack's code).
PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
#: LightningCLI's subcommands.
TRAINER_COMMANDS = ("fit", "validate", "test", "predict")
#: The pack's own commands.
PACK_COMMANDS = ("presets", "tips", "doctor", "lint", "bench")
