"""Evaluation with the shared task's exact metrics (see `tagalign.evaluate.metrics`).

Prediction files are read and written by `tagalign.predictions`; this package only scores.
"""

from tagalign.evaluate.evaluator import SubjectEvaluator, evaluate
from tagalign.evaluate.frequency import frequency_report, subject_counts, subject_recall
from tagalign.evaluate.metrics import DEFAULT_KS, check_ks, group_metrics
from tagalign.evaluate.report import report_tables

__all__ = ["DEFAULT_KS", "SubjectEvaluator", "check_ks", "evaluate", "frequency_report",
           "group_metrics", "report_tables", "subject_counts", "subject_recall"]
