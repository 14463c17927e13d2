"""The library's own workflows: what `tagalign train`, `tagalign classify train` and
`tagalign suggest --input` do beyond reading options and printing, one function each, for
the CLI and for Python (docs/python-api.md).

* `train_project`: a project's recipe trained on records and on the records librarians
  confirmed through `tagalign serve`, saved into the project folder, then scored on dev
  records (the scores kept in ``project.json``);
* `train_classifier`: a text classifier, or the domain model beside a subject project
  (``subjects-stack``: the project's suggestions fed in, its held-out records joined),
  saved into a folder with its dev scores;
* `tag_file`: every record of a file tagged into a predictions file (JSONL, MARC, or a
  folder of shards on Ray) as `tagalign suggest --input --output` does, resumable, with the
  option combinations checked by `TagFileOptions`.

This layer sits above `tagalign.feedback` (the feedback store), `tagalign.batch` (the
shards) and `tagalign.project`, below `tagalign.cli`.
"""

from typing import Any

from tagalign.workflows.tagging import (
    TagFileOptions,
    TagFileProgress,
    TaggedFile,
    TaggingInterrupted,
    TaggingStopped,
    tag_file,
)
from tagalign.workflows.training import (
    DEV_LIMIT,
    ProjectTraining,
    confirmed_records,
    score_dev,
    train_project,
)

__all__ = ["DEV_LIMIT", "ClassifierTraining", "ProjectTraining", "TagFileOptions",
           "TagFileProgress", "TaggedFile", "TaggingInterrupted", "TaggingStopped",
           "confirmed_records", "score_dev", "tag_file", "train_classifier", "train_project"]


def __getattr__(name: str) -> Any:
    # the classifiers import torch: `tagalign train` (and `import tagalign.workflows`)
    # load them only when `train_classifier` is asked for
    if name in ("ClassifierTraining", "train_classifier"):
        from tagalign.workflows import classify

        return getattr(classify, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
