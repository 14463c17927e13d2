"""The benchmark suite (index: benchmarks/README.md). Run a script as a module from the
repository root, ``python -m benchmarks.FOLDER.NAME``; `benchmarks/run_tagging.py`, the
held-out evaluation's fixed entry point, runs as a file."""
