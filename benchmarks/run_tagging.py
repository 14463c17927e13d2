#!/usr/bin/env python
"""Train a tagger through the public API and write predictions for a test file.

The held-out evaluation runs exactly this script; its arguments are stable:

    python benchmarks/run_tagging.py --train TRAIN --dev DEV --vocab VOCAB --test TEST \
        --out PRED.jsonl [--recipe NAME] [--param key=value ...] [--config PARAMS.json]
        [--project-dir DIR] [--limit-train N]

Prints train time, suggest records/s and peak memory. When --dev is given (and is not the
test file) the dev records are scored first, then — for recipes that learn online, unless
--no-learn-dev — they join the record-neighbour memory before the test is tagged, as
confirmed records would (the ranker never sees them). Works with any records file in our
JSONL format.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

# run as a file (the held-out evaluation's fixed path): the repository root, for benchmarks._common
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import peak_rss_gb, suggestions
from tagalign.cli.common import make_runtime, parse_params
from tagalign.errors import TagalignError
from tagalign.evaluate import evaluate
from tagalign.predictions import write_predictions
from tagalign.project import DEFAULT_RECIPE, Project
from tagalign.project.jobs import DEFAULT_JOBS
from tagalign.records import InputReport, read_records
from tagalign.vocab import load_vocabulary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--train", required=True, type=Path)
    ap.add_argument("--dev", type=Path)
    ap.add_argument("--vocab", required=True, type=Path)
    ap.add_argument("--test", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--recipe", default=DEFAULT_RECIPE)
    ap.add_argument("--project-dir", type=Path)
    ap.add_argument("--limit-train", type=int)
    ap.add_argument("--limit", type=int, default=20, help="subjects per record (default 20)")
    ap.add_argument("--param", action="append", default=[],
                    help="recipe parameter key=value (JSON values; plain text is a string)")
    ap.add_argument("--config", type=Path, help="JSON file of recipe parameters")
    ap.add_argument("--no-learn-dev", dest="learn_dev", action="store_false",
                    help="do not add the scored dev records to the neighbour memory")
    args = ap.parse_args(argv)

    try:
        params = parse_params(args.param, args.config)
    except TagalignError as exc:  # the CLI's one line
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    t0 = time.perf_counter()
    vocab = load_vocabulary(args.vocab)
    print(f"vocabulary: {len(vocab)} subjects ({time.perf_counter() - t0:.1f} s)", flush=True)
    report = InputReport()
    train = list(read_records(args.train, vocab=vocab, limit=args.limit_train, report=report))
    if (summary := report.end_summary()) is not None:
        print(summary, file=sys.stderr)
    print(f"training records: {len(train)}", flush=True)

    tmp = None
    project_dir = args.project_dir
    if project_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="tagalign-run-")
        project_dir = Path(tmp.name) / "project"
    project = Project.create(project_dir, vocab, args.recipe, params, overwrite=True)
    t0 = time.perf_counter()
    project.train(train, resume=False)
    train_s = time.perf_counter() - t0
    print(f"train time: {train_s:.1f} s (peak RSS so far {peak_rss_gb():.2f} GB)", flush=True)
    del train

    if args.dev is not None and args.dev.resolve() != args.test.resolve():
        dev = list(read_records(args.dev, vocab=vocab))
        dpreds = suggestions(project, dev, limit=args.limit)
        scores = evaluate(dev, {r.id: [s.id for s in row] for r, row in zip(dev, dpreds,
                                                                            strict=True)})
        project.set_scores(scores["overall"])
        print("dev:", json.dumps({k: round(v, 4) for k, v in scores["overall"].items()}))
        if args.learn_dev:
            try:
                project.recipe.learn([r for r in dev if r.subjects])
                project.save_model(project.recipe)  # what tags test is what DIR serves
                print(f"dev records added to the neighbour memory: {len(dev)}")
            except NotImplementedError:
                pass

    test = list(read_records(args.test))
    # as `tagalign suggest` tags a file: the saved project loaded with the command's
    # defaults (all cores, the ranker compiled), its default --jobs, its --batch-size
    project = Project.load(project_dir, runtime=make_runtime(0, compile_ranker=True))
    t0 = time.perf_counter()
    preds = suggestions(project, test, limit=args.limit, jobs=DEFAULT_JOBS)
    suggest_s = time.perf_counter() - t0
    write_predictions(args.out, ((r.id, row) for r, row in zip(test, preds, strict=True)))
    print(f"suggest: {len(test)} records in {suggest_s:.1f} s = "
          f"{len(test) / max(suggest_s, 1e-9):.0f} records/s", flush=True)
    print(f"predictions: {args.out}")
    if any(r.subjects for r in test):
        scores = evaluate(test, {r.id: [s.id for s in row] for r, row in zip(test, preds,
                                                                             strict=True)})
        print("test:", json.dumps({k: round(v, 4) for k, v in scores["overall"].items()}))
    print(f"peak RSS: {peak_rss_gb():.2f} GB")
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
