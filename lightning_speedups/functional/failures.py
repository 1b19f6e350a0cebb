"""An exception in a phrase, and where it came from: the lines the pack writes when a part steps aside.

A part that fails on a user's model is turned off for the run (see :mod:`lightning_speedups.callbacks.safeguard`);
its line in the start-up summary names the error in a phrase (:func:`error_phrase`), the operation that raised
it (:func:`raising_op`: the innermost frame, and the user's or library's own line that called into it) and what to
do.

Examples:
    >>> try:
    ...     raise RuntimeError("could not create a primitive descriptor for the LSTM forward propagation primitive."
    ...                        " Run workload with environment variable ONEDNN_VERBOSE=all to get more")
    ... except RuntimeError as err:
    ...     error_phrase(err)
    'RuntimeError: could not create a primitive descriptor for the LSTM forward propagation primitive'
"""

from __future__ import annotations

import os
import re
import traceback
from typing import Optional

__all__ = ["error_phrase", "raising_op", "user_frame"]

#: the longest phrase kept of an error's message
MAX_PHRASE = 160
_PACKAGES = ("torch", "lightning", "pytorch_lightning", "lightning_fabric", "lightning_utilities", "typing_extensions")
_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def error_phrase(err: BaseException, limit: int = MAX_PHRASE) -> str:
    """``Type: the first sentence of the message`` on one line, at most ``limit`` characters."""
    text = " ".join(str(err).split())
    first = re.split(r"(?<=[.!?])\s+(?=[A-Z])", text, maxsplit=1)[0].rstrip(".") if text else ""
    if len(first) > limit:
        first = first[: limit - 3].rstrip() + "..."
    name = type(err).__name__
    return f"{name}: {first}" if first else name


def _where(frame: traceback.FrameSummary) -> str:
    parts = frame.filename.replace("\\", "/").split("/")
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] in ("site-packages", "dist-packages"):
            return f"{'/'.join(parts[i + 1 :])}:{frame.lineno}"
    return f"{os.path.basename(frame.filename)}:{frame.lineno}"


def _in_package(filename: str, packages: tuple[str, ...]) -> bool:
    path = filename.replace("\\", "/")
    return any(f"/{name}/" in path for name in packages) or path.startswith(_HERE.replace("\\", "/"))


def user_frame(err: BaseException) -> Optional[traceback.FrameSummary]:
    """The innermost frame of ``err``'s traceback outside torch, Lightning and this pack: the user's (or their
    library's) own line that led to the error, or ``None``."""
    frames = traceback.extract_tb(err.__traceback__)
    for frame in reversed(frames):
        if not _in_package(frame.filename, _PACKAGES) and not frame.filename.startswith("<"):
            return frame
    return None


def raising_op(err: BaseException) -> str:
    """Where ``err`` was raised, in words: ``"`_VF.lstm` (torch/nn/modules/rnn.py:1123), from model.py:40"``; the
    innermost frame, and the user's own line that called into torch when it is another one (``""``: no traceback)."""
    frames = traceback.extract_tb(err.__traceback__)
    if not frames:
        return ""
    last = frames[-1]
    code = (last.line or "").strip()
    call = re.search(r"([\w.]+)\(", code)
    what = f"`{call.group(1)}` ({_where(last)})" if call else _where(last)
    mine = user_frame(err)
    if mine is not None and mine is not last:
        what += f", from {_where(mine)}"
    return what
