"""Evaluation with the shared task's exact metrics."""

from tagalign.evaluate.evaluator import evaluate
from tagalign.evaluate.metrics import DEFAULT_KS, group_metrics
from tagalign.evaluate.predictions import read_predictions, write_predictions
from tagalign.evaluate.report import print_report
from tagalign.evaluate.submission import write_submission

__all__ = ["DEFAULT_KS", "evaluate", "group_metrics", "print_report", "read_predictions",
           "write_predictions", "write_submission"]
