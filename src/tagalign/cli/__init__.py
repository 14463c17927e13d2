"""`tagalign` command line: thin layers over the package's project objects."""

import importlib

from tagalign.cli.app import app

# Each module registers its commands on `app` (or a sub-app) when imported.
for _mod in ("vocab_cmd", "records_cmd", "eval_cmd", "train_cmd", "serve_cmd", "data_cmd",
             "demo_cmd", "export_cmd"):
    try:
        importlib.import_module(f"tagalign.cli.{_mod}")
    except ModuleNotFoundError as exc:  # a command module not written yet
        if exc.name != f"tagalign.cli.{_mod}":
            raise

__all__ = ["app"]
