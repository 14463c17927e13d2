#!/usr/bin/env bash
# The package as a user gets it: `python -m build` (sdist, then the wheel built from the
# sdist), the wheel installed into a fresh virtual environment with requirements.lock as
# constraints, and no CUDA build of torch in it. tests/test_wheel.py runs this (so `make
# test` and CI do) and then the installed `tagalign suggest` on a saved project.
#
#   scripts/wheel-check.sh WORK_DIR      leaves WORK_DIR/venv/bin/tagalign
#
# The tree is copied first (pyproject.toml, README.md, src/): building in place would
# leave src/tagalign.egg-info beside the editable install's own metadata. The fresh venv
# has no pip of its own: the pip of the Python running this installs into it (--python),
# from the index and pip's cache as any install, torch included (==2.13.0 in the lock:
# the CPU build where one is offered, see requirements.lock); --no-compile: no .pyc files
# for 2 GB of packages in a venv that is used once (23 s instead of 60-70 s).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="${1:?usage: scripts/wheel-check.sh WORK_DIR}"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
mkdir -p "$WORK"
WORK="$(cd "$WORK" && pwd)"
rm -rf "$WORK/tree" "$WORK/dist" "$WORK/venv"
mkdir "$WORK/tree"
cp -r "$ROOT/pyproject.toml" "$ROOT/README.md" "$ROOT/src" "$WORK/tree/"
find "$WORK/tree" \( -name __pycache__ -o -name '*.egg-info' \) -prune -exec rm -rf {} +

t0=$(date +%s)
"$PY" -m build --outdir "$WORK/dist" "$WORK/tree" > "$WORK/build.log" 2>&1 \
    || { cat "$WORK/build.log" >&2; exit 1; }
WHEEL="$(ls "$WORK"/dist/tagalign-*.whl)"
t1=$(date +%s)
"$PY" -m venv --without-pip "$WORK/venv"
"$PY" -m pip --python "$WORK/venv/bin/python" install -q --no-compile --disable-pip-version-check \
    -c "$ROOT/requirements.lock" "$WHEEL"
t2=$(date +%s)

# what the wheel pulled in: tagalign from the wheel (not this tree), torch without CUDA,
# no NVIDIA libraries, every other package at its locked version
cd "$WORK"  # not the tree: its src/ must not be importable
"$WORK/venv/bin/python" - "$ROOT/requirements.lock" <<'EOF'
import sys
from importlib.metadata import distributions
from pathlib import Path

import tagalign
import torch

venv = Path(sys.prefix)
assert Path(tagalign.__file__).is_relative_to(venv), f"tagalign from {tagalign.__file__}"
assert torch.version.cuda is None, f"torch {torch.__version__} is a CUDA build"
names = {d.metadata["Name"].lower().replace("_", "-"): d.version for d in distributions()}
nvidia = sorted(n for n in names if n.startswith("nvidia"))
assert not nvidia, f"CUDA libraries installed: {nvidia}"
locked = {}
for line in Path(sys.argv[1]).read_text().splitlines():
    if line and not line.startswith("#"):
        name, version = line.split("==")
        locked[name.lower().replace("_", "-")] = version
off = {n: v for n, v in names.items() if n != "tagalign" and locked.get(n) != v.split("+")[0]}
assert not off, f"not at the locked version: {off}"
print(f"wheel venv: {len(names)} packages, torch {torch.__version__}, no CUDA")
EOF
echo "wheel check: build $((t1 - t0)) s, install $((t2 - t1)) s ($WORK/venv)"
