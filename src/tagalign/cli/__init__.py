"""`tagalign` command line: thin layers over the package's project objects."""

from tagalign.cli import (  # noqa: F401 - each module registers its commands on `app`
    classify_cmd,
    data_cmd,
    demo_cmd,
    encode_cmd,
    eval_cmd,
    export_cmd,
    lang_cmd,
    pairs_cmd,
    projects_cmd,
    records_cmd,
    serve_cmd,
    suggest_cmd,
    tokens_cmd,
    train_cmd,
    tune_cmd,
    vocab_cmd,
)
from tagalign.cli.app import app, main

__all__ = ["app", "main"]
