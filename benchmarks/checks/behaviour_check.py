"""Behaviour check across a refactor (issue 29): a saved project suggests the same.

Three steps, each its own command:

    python -m benchmarks.checks.behaviour_check train   --project runs/bc20k
    python -m benchmarks.checks.behaviour_check record  --project runs/bc20k \
        --out runs/bc20k.ref.json
    python -m benchmarks.checks.behaviour_check compare --project runs/bc20k \
        --ref runs/bc20k.ref.json

``train`` fits the default hybrid on 20,000 training records drawn with seed 0 (not a file
prefix: the file is sorted by language and type) and saves the project. ``record`` (run
with the code before the change) writes, for 400 dev records drawn with seed 0, each
record's top 20 subjects, their scores, reasons and the quality estimate, with the
compiled ranker off (LightGBM's own predict: the compiled trees agree only to a tolerance).
``compare`` (run with the code after the change, on the project saved before it) loads the
same project, suggests again and prints how many records differ in subjects, order,
reasons or quality, and the largest score difference; it exits 1 on any difference.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

from benchmarks._common import DATA, seeded_records, seeded_sample
from tagalign.project import Project
from tagalign.records import read_records
from tagalign.vocab import load_vocabulary

LIMIT = 20


def load_project(path: Path) -> Project:
    """The project with its ranker's compiled trees off, whichever way this version of
    tagalign says so (an explicit runtime since issue 29, an environment variable before)."""
    try:
        from tagalign.runtime import Runtime
    except ImportError:  # the code before issue 29
        import os

        os.environ["TAGALIGN_COMPILE_RANKER"] = "0"
        return Project.load(path)
    return Project.load(path, runtime=Runtime(compile_ranker=False))


def tag(project: Project, dev: list) -> list:
    """Each record's answer, with its quality estimate, whichever API this version of
    tagalign suggests through (one request type since issue 45, `Project.tag` before)."""
    try:
        from tagalign.project import Tagger
        from tagalign.suggest import SuggestRequest
    except ImportError:  # the code before issue 45
        return project.tag(dev, limit=LIMIT, threshold=0.0)
    return Tagger(project).tag(dev, SuggestRequest(limit=LIMIT, threshold=0.0))


def answers(project: Project, dev_path: Path, n: int, seed: int) -> dict:
    dev = seeded_sample(list(read_records(dev_path, vocab=project.vocab)), n, seed)
    langs = Counter(r.language for r in dev)
    types = Counter(r.type for r in dev)
    print(f"dev sample: {len(dev)} records (seed {seed}); {dict(langs)}; {dict(types)}")
    t0 = time.perf_counter()
    tagged = tag(project, dev)
    print(f"tagged in {time.perf_counter() - t0:.1f} s")
    return {r.id: {"subjects": [[s.id, s.score] for s in t.suggestions],
                   "reasons": [s.reasons for s in t.suggestions],
                   "quality": None if t.quality is None
                   else [t.quality.recall, t.quality.precision]}
            for r, t in zip(dev, tagged, strict=True)}


def compare(ref: dict, now: dict) -> int:
    counts = Counter()
    max_score = max_quality = 0.0
    for rid, old in ref.items():
        new = now.get(rid)
        if new is None:
            counts["missing"] += 1
            continue
        ids_old = [i for i, _ in old["subjects"]]
        ids_new = [i for i, _ in new["subjects"]]
        if set(ids_old) != set(ids_new):
            counts["other subjects"] += 1
        elif ids_old != ids_new:
            counts["other order"] += 1
        else:
            max_score = max([max_score] + [abs(a[1] - b[1]) for a, b in
                                           zip(old["subjects"], new["subjects"], strict=True)])
        if json.dumps(old["reasons"], sort_keys=True) != json.dumps(new["reasons"],
                                                                    sort_keys=True):
            counts["other reasons"] += 1
        if (old["quality"] is None) != (new["quality"] is None):
            counts["quality missing"] += 1
        elif old["quality"] is not None:
            max_quality = max(max_quality, *(abs(a - b) for a, b in
                                             zip(old["quality"], new["quality"], strict=True)))
    print(f"records compared: {len(ref)}")
    for what in ("missing", "other subjects", "other order", "other reasons",
                 "quality missing"):
        print(f"  {what:16s} {counts[what]}")
    print(f"  largest score difference   {max_score:.3g}")
    print(f"  largest quality difference {max_quality:.3g}")
    same = not counts and max_score == 0.0 and max_quality == 0.0
    print("SAME" if same else "DIFFERENT")
    return 0 if same else 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("step", choices=["train", "record", "compare"])
    ap.add_argument("--project", type=Path, default=Path("runs/bc20k"))
    ap.add_argument("--train", type=Path, default=DATA / "llms4subjects/train.jsonl.gz")
    ap.add_argument("--dev", type=Path, default=DATA / "llms4subjects/dev.jsonl.gz")
    ap.add_argument("--vocab", type=Path, default=DATA / "gnd/gnd-subjects.tsv.gz")
    ap.add_argument("--limit-train", type=int, default=20_000)
    ap.add_argument("--limit-dev", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, help="record: where the answers go")
    ap.add_argument("--ref", type=Path, help="compare: the answers recorded before")
    args = ap.parse_args()
    if args.step == "train":
        vocab = load_vocabulary(args.vocab)
        train = seeded_records(args.train, vocab, args.limit_train, args.seed)
        print(f"train sample: {len(train)} records (seed {args.seed}); "
              f"{dict(Counter(r.language for r in train))}")
        t0 = time.perf_counter()
        Project.create(args.project, vocab, overwrite=True).train(train, resume=False)
        print(f"trained in {time.perf_counter() - t0:.0f} s: {args.project}")
        return
    project = load_project(args.project)
    now = answers(project, args.dev, args.limit_dev, args.seed)
    if args.step == "record":
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(now), "utf-8")
        print(f"recorded {len(now)} records: {args.out}")
        return
    sys.exit(compare(json.loads(args.ref.read_text("utf-8")), now))


if __name__ == "__main__":
    main()
