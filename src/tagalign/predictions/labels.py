"""Label predictions (`tagalign classify predict`): ``{"id", "labels": [{"label", "score"}]}``
per JSONL line, best first; a plain list of label names is read too."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from tagalign.io import InputReport
from tagalign.predictions.subjects import label_scores, read_rows_by_id


def labels_line(rid: str, labels: Sequence[tuple[str, float]]) -> str:
    return json.dumps({"id": rid, "labels": label_scores(labels)}, ensure_ascii=False) + "\n"


def _labels(obj: dict) -> list[str]:
    rows = obj.get("labels")
    if not isinstance(rows, list):
        raise ValueError("'labels' is not a list")
    return [r["label"] if isinstance(r, dict) else str(r) for r in rows]


def read_label_predictions(path: Path | str, report: InputReport | None = None
                           ) -> dict[str, list[str]]:
    """``{id: [labels]}``; malformed lines are reported as ``path:line`` (see
    `read_rows_by_id`)."""
    return read_rows_by_id(path, report, _labels)
