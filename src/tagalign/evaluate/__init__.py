"""Evaluation with the shared task's exact metrics (see `tagalign.evaluate.metrics`)."""

from tagalign.evaluate.evaluator import SubjectEvaluator, evaluate
from tagalign.evaluate.metrics import DEFAULT_KS, check_ks, group_metrics
from tagalign.evaluate.predictions import read_predictions, write_predictions
from tagalign.evaluate.report import print_report
from tagalign.evaluate.submission import read_submission, write_submission

__all__ = ["DEFAULT_KS", "SubjectEvaluator", "check_ks", "evaluate", "group_metrics",
           "print_report", "read_predictions", "read_submission", "write_predictions",
           "write_submission"]
