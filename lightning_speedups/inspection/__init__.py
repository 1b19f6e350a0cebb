"""The shared inspection of a setup (layer 2): what doctor, bench and every tip's check read."""

from lightning_speedups.inspection.words import (
    counted,
    device_words,
    fmt_bytes,
    has_callback,
    loader_label,
    missing_reason,
    names_text,
    plural,
    short_path,
)

__all__ = [
    "counted",
    "device_words",
    "fmt_bytes",
    "has_callback",
    "loader_label",
    "missing_reason",
    "names_text",
    "plural",
    "short_path",
]
