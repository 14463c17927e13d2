"""Prediction files, read and written in one place: subjects (`tagalign suggest`), labels
(`tagalign classify predict`), the shared task's submission folders; the stream that writes
them as they are made and resumes an interrupted run; subjects as MARC fields (`marc`)."""

from tagalign.predictions.labels import label_scores, labels_line, read_label_predictions  # noqa: E501
from tagalign.predictions.marc import (
    MarcPredictionStream,
    open_prediction_stream,
    output_format,
)
from tagalign.predictions.stream import PartialExistsError, PredictionStream, partial_path
from tagalign.predictions.subjects import (
    read_estimates,
    read_predictions,
    read_rows_by_id,
    read_scored_predictions,
    subjects_line,
    subjects_object,
    write_predictions,
)
from tagalign.predictions.submission import read_submission, write_submission
from tagalign.predictions.tagging import TagCounts, review_path, tag_records

__all__ = ["MarcPredictionStream", "PartialExistsError", "PredictionStream", "TagCounts",
           "label_scores", "labels_line", "open_prediction_stream", "output_format", "partial_path",
           "read_estimates", "read_label_predictions", "read_predictions", "read_rows_by_id",
           "read_scored_predictions", "read_submission", "review_path", "subjects_line",
           "subjects_object", "tag_records", "write_predictions", "write_submission"]
