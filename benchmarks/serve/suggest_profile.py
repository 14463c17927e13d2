#!/usr/bin/env python
"""Where one single-record suggest spends its time (issue 23), stage by stage.

Loads a trained hybrid project, wraps its stages with timers (language guess, analyzer,
TF-IDF, encoder, each source, fusion merge, ranker, reasons, the REST layer's response
building) and serves it with uvicorn in this process on a free localhost port; then sends
``--requests`` seeded dev records one at a time to ``/tagalign/v1`` (title + abstract,
``--limit``) and prints the median and p95 of each stage per request. ``http + pydantic``
is what the client waited for beyond `Tagger.tag` (the call the endpoint makes): uvicorn, FastAPI's
request parsing and validation, the response model and JSON, the socket.

    python -m benchmarks.serve.suggest_profile --project runs/serve-latency/hybrid-3000-seed0
"""

from __future__ import annotations

import argparse
import functools
import os
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import uvicorn

from benchmarks._common import DATA, free_port
from tagalign.project import Project, Tagger
from tagalign.records import read_records

#: seconds spent in each stage during the current request
SPENT: dict[str, float] = defaultdict(float)


def timed(name: str, fn: Callable) -> Callable:
    @functools.wraps(fn)
    def run(*a: Any, **kw: Any) -> Any:
        t = time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            SPENT[name] += time.perf_counter() - t
    return run


def instrument(project: Project) -> None:
    """Wrap the stages of the project's hybrid pipeline (and the REST layer's) with timers."""
    import tagalign.serve.suggestions as suggestions_module
    import tagalign.suggest.pipeline as pipeline_module

    pipe = project.recipe.pipeline
    pipeline_module.merge = timed("fusion: merge", pipeline_module.merge)
    pipeline_module.top_k = timed("fusion: top k", pipeline_module.top_k)
    pipe.analyzer.tokens = timed("analyzer (tokens)", pipe.analyzer.tokens)
    pipe.featurizer.transform = timed("tfidf transform", pipe.featurizer.transform)
    if pipe.encoder is not None:
        pipe.encoder.encode = timed("encoder", pipe.encoder.encode)
    for src in pipe.sources:
        src.candidates = timed(f"source {src.name}", src.candidates)
    pipe.ranker.predict = timed("fusion: ranker predict", pipe.ranker.predict)
    pipe._suggestions = timed("reasons (suggestions)", pipe._suggestions)
    if pipe.quality is not None:
        pipe.quality.predict = timed("quality estimate", pipe.quality.predict)
    project.recipe.suggest = timed("recipe (pipeline)", project.recipe.suggest)
    # the service makes a tagger per request: its class is timed
    Tagger.tag = timed("Tagger.tag", Tagger.tag)
    suggestions_module._out = timed("response objects (_out)", suggestions_module._out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--project", type=Path, required=True)
    ap.add_argument("--records", type=Path, default=DATA / "llms4subjects/dev.jsonl.gz")
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0, help="Seed of the record sample.")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--limit", type=int, default=10)
    args = ap.parse_args()

    from tagalign.feedback import FeedbackStore
    from tagalign.serve.app import create_app

    project = Project.load(args.project)
    instrument(project)
    db = Path(tempfile.mkdtemp(prefix="tagalign-profile-")) / "feedback.sqlite"
    app = create_app({args.project.name: project}, FeedbackStore(f"sqlite:///{db}"))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    url = f"http://127.0.0.1:{port}"
    while not server.started:
        time.sleep(0.05)

    pool = list(read_records(args.records))
    idx = np.random.default_rng(args.seed).choice(len(pool), min(args.requests, len(pool)),
                                                  replace=False)
    recs = [pool[i] for i in idx]
    endpoint = f"{url}/tagalign/v1/projects/{args.project.name}/suggest"
    rows: list[dict[str, float]] = []
    with httpx.Client(timeout=60) as client:
        for n, r in enumerate(recs[:args.warmup] + recs):
            body = {"title": r.title, "abstract": r.abstract, "limit": args.limit,
                    **({"language": r.language} if r.language in ("de", "en") else {})}
            SPENT.clear()
            t = time.perf_counter()
            res = client.post(endpoint, json=body)
            total = time.perf_counter() - t
            res.raise_for_status()
            if n >= args.warmup:
                row = dict(SPENT)
                row["http + pydantic"] = total - SPENT["Tagger.tag"]
                row["total (client)"] = total
                rows.append(row)
    server.should_exit = True

    names = list(dict.fromkeys(k for row in rows for k in row))
    print(f"{len(rows)} single-record requests ({args.project.name}, limit {args.limit}, "
          f"records seeded {args.seed}); {os.cpu_count()} CPUs, load "
          f"{os.getloadavg()[0]:.2f}")
    print(f"{'stage':28s} {'median ms':>10s} {'p95 ms':>8s}")
    for name in names:
        ms = np.array([row.get(name, 0.0) for row in rows]) * 1000
        print(f"{name:28s} {np.median(ms):10.2f} {np.percentile(ms, 95):8.2f}")


if __name__ == "__main__":
    main()
