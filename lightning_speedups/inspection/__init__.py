"""The shared inspection of a setup (layer 2): what doctor, bench and every tip's check read.

- :mod:`~lightning_speedups.inspection.model`: :func:`inspect_model`, one static inspection of a
  model with each part's own planning function (:class:`ModelFacts`);
- :mod:`~lightning_speedups.inspection.setup`: :class:`SetupInfo`, the counts bench plans with
  (:func:`inspect_setup`), from that same inspection;
- :mod:`~lightning_speedups.inspection.facts`: :class:`Facts`, everything a doctor check reads about
  a run (:func:`collect_static` fills the static part, the model's from :func:`inspect_model`);
- :mod:`~lightning_speedups.inspection.findings`: :class:`Finding` and :class:`Item`, a check's result;
- :mod:`~lightning_speedups.inspection.words`: the formatting helpers the checks share;
- :mod:`~lightning_speedups.inspection.report`: the terminal report and the JSON object of findings.

Nothing here imports the tip registry, the advisor, doctor, bench or the CLI.
"""

from lightning_speedups.inspection.facts import (
    Facts,
    TensorInfo,
    collect_static,
    user_source_files,
)
from lightning_speedups.inspection.findings import (
    MEASURED_VERDICTS,
    PRINCIPLE_OF,
    PRINCIPLES,
    SEVERITIES,
    STATUSES,
    Finding,
    Item,
    Measured,
    severity_rank,
    worst,
)
from lightning_speedups.inspection.model import (
    PARTS,
    ModelFacts,
    error_text,
    inspect_model,
)
from lightning_speedups.inspection.report import (
    counts,
    principle_summary,
    print_report,
    to_dict,
    to_json,
)
from lightning_speedups.inspection.setup import (
    NEED_PARTS,
    NEEDS,
    SetupInfo,
    inspect_setup,
)
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
    "MEASURED_VERDICTS",
    "NEEDS",
    "NEED_PARTS",
    "PARTS",
    "PRINCIPLES",
    "PRINCIPLE_OF",
    "SEVERITIES",
    "STATUSES",
    "Facts",
    "Finding",
    "Item",
    "Measured",
    "ModelFacts",
    "SetupInfo",
    "TensorInfo",
    "collect_static",
    "counted",
    "counts",
    "device_words",
    "error_text",
    "fmt_bytes",
    "has_callback",
    "inspect_model",
    "inspect_setup",
    "loader_label",
    "missing_reason",
    "names_text",
    "plural",
    "principle_summary",
    "print_report",
    "severity_rank",
    "short_path",
    "to_dict",
    "to_json",
    "user_source_files",
    "worst",
]
