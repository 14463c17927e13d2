"""What the benchmark scripts share: where the shared data lives, peak memory."""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"


def peak_rss_gb() -> float:
    """This process's peak RSS so far in GB: the package's own reading (Linux ``VmHWM``;
    ``ru_maxrss`` keeps a parent's high-water mark across fork + exec)."""
    # imported here: `behaviour_check.py` imports this module with older tagalign too
    from tagalign.train.phases import peak_rss_gb as package_peak

    return package_peak()


def process_memory_mib(pid: int) -> dict[str, float]:
    """A process's resident memory (MiB): ``rss``, and its ``anon`` part (heap: what only it
    holds) and ``file`` part (mapped file pages: shared with other processes mapping the same
    files and evictable by the kernel), from /proc/PID/status; ``pss``, its proportional
    share (a page shared by n processes counts 1/n), from /proc/PID/smaps_rollup (Linux)."""
    fields = {"VmRSS": "rss", "RssAnon": "anon", "RssFile": "file", "Pss": "pss"}
    out = {}
    for name in ("status", "smaps_rollup"):
        for line in Path(f"/proc/{pid}/{name}").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in fields:
                out[fields[key]] = int(value.split()[0]) / 1024  # kB
    return out


def model_parts(model: Path) -> dict[str, float]:
    """MiB on disk of each part of a model folder (each source apart), largest first."""
    parts: dict[str, float] = {}
    for f in model.rglob("*"):
        if f.is_file():
            rel = f.relative_to(model).parts
            top = "/".join(rel[:2]) if rel[0] == "sources" else rel[0]
            parts[top] = parts.get(top, 0) + f.stat().st_size / 2**20
    return dict(sorted(parts.items(), key=lambda kv: -kv[1]))


def add_data_args(ap: argparse.ArgumentParser) -> None:
    """--train/--dev/--vocab, defaulting to the shared LLMs4Subjects data and GND TSV."""
    ap.add_argument("--train", type=Path, default=DATA / "llms4subjects/train.jsonl.gz")
    ap.add_argument("--dev", type=Path, default=DATA / "llms4subjects/dev.jsonl.gz")
    ap.add_argument("--vocab", type=Path, default=DATA / "gnd/gnd-subjects.tsv.gz")


def add_domain_data_args(ap: argparse.ArgumentParser) -> None:
    """--train/--dev/--label-set of the domain benchmarks (the shared LLMs4Subjects data)."""
    ap.add_argument("--train", type=Path, default=DATA / "llms4subjects/train.jsonl.gz")
    ap.add_argument("--dev", type=Path, default=DATA / "llms4subjects/dev.jsonl.gz")
    ap.add_argument("--label-set", type=Path, default=DATA / "llms4subjects/domains.csv")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(project: Path, *extra: str, stop_timeout: float = 30, log: Path | None = None
          ) -> Iterator[str]:
    """Run `tagalign serve PROJECT` on a free localhost port until the block ends; yields its
    base URL once /tagalign/v1/health answers (exits if it never does within 300 s).
    ``log``: the server's output (its access log) goes to this file, not to ours."""
    with serve_process(project, *extra, stop_timeout=stop_timeout, log=log) as (url, _):
        yield url


@contextlib.contextmanager
def serve_process(project: Path, *extra: str, stop_timeout: float = 30,
                  log: Path | None = None) -> Iterator[tuple[str, subprocess.Popen]]:
    """`serve`, also yielding the server process (to measure its memory)."""
    import httpx

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    out = open(log, "ab") if log else None  # noqa: SIM115 (closed below)
    server = subprocess.Popen([sys.executable, "-m", "tagalign.cli.main", "serve", str(project),
                               "--port", str(port), *extra], stdout=out, stderr=out,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        t0 = time.time()
        while True:
            try:
                if httpx.get(f"{url}/tagalign/v1/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None or time.time() - t0 > 300:
                sys.exit("server did not start")
            time.sleep(0.3)
        print(f"server up after {time.time() - t0:.1f} s (model load)")
        yield url, server
    finally:
        server.terminate()
        server.wait(stop_timeout)
        if out:
            out.close()


def seeded_sample(records: list, size: int | None, seed: int) -> list:
    """``size`` records drawn with ``seed``, in file order (all when size is None or
    larger): never a file prefix, since the data files are sorted by language and type."""
    if not size or size >= len(records):
        return list(records)
    import numpy as np

    idx = np.random.default_rng(seed).choice(len(records), size, replace=False)
    return [records[i] for i in sorted(idx)]


def seeded_records(path: Path, vocab, size: int | None, seed: int) -> list:
    """`seeded_sample` of the records in ``path`` that have gold subjects."""
    from tagalign.records import read_records

    return seeded_sample([r for r in read_records(path, vocab=vocab) if r.subjects], size,
                         seed)


def add_project_dev_args(ap: argparse.ArgumentParser, limit_dev: int) -> None:
    """A trained project and a seeded dev sample (`project_and_dev`)."""
    ap.add_argument("--project", type=Path, required=True)
    ap.add_argument("--dev", type=Path, default=DATA / "llms4subjects/dev.jsonl.gz")
    ap.add_argument("--limit-dev", type=int, default=limit_dev)
    ap.add_argument("--seed", type=int, default=0)


def project_and_dev(args: argparse.Namespace, runtime: Any = None) -> tuple:
    """The project of ``--project`` (loaded with ``runtime``, a `tagalign.runtime.Runtime`;
    None: the library's default) and ``--limit-dev`` dev records drawn with ``--seed``
    (`seeded_sample`); prints the sample's make-up by language and type."""
    from collections import Counter

    from tagalign.project import Project
    from tagalign.records import read_records

    project = Project.load(args.project, runtime=runtime)
    dev = seeded_sample(list(read_records(args.dev, vocab=project.vocab)), args.limit_dev,
                        args.seed)
    print(f"dev: {len(dev)} records (seed {args.seed}): " + ", ".join(
        f"{k} {n}" for k, n in Counter(f"{r.language}/{r.type}" for r in dev).most_common()))
    return project, dev



def suggestions(project, records: list, *, jobs: int = 1, batch_size: int = 512,
                **request) -> list:
    """Each record's suggestions for ``SuggestRequest(**request)`` without a quality
    estimate, through the project's one entry point (`Tagger.tag`); ``jobs`` other than 1:
    in that many forked processes (0: one per core), ``batch_size`` records a batch, every
    batch queued at once, as `tagalign suggest --jobs` tags a file."""
    # imported here: `behaviour_check.py` imports this module with older tagalign too
    from tagalign.project import Tagger
    from tagalign.project.jobs import TaggingJobs
    from tagalign.suggest import SuggestRequest

    ask = SuggestRequest(**{"quality": False, **request})
    if jobs == 1:
        return [t.suggestions for t in Tagger(project).tag(records, ask)]
    with TaggingJobs(Tagger(project), jobs) as tagging:
        waiting = [tagging.submit(records[start:start + batch_size], ask)
                   for start in range(0, len(records), batch_size)]
        return [t.suggestions for wait in waiting for t in wait()]


def recipe_suggestions(recipe, records: list, limit: int) -> list:
    """A recipe's plain ranking (no threshold, no quality estimate) for each record."""
    from tagalign.suggest import SuggestRequest

    ask = SuggestRequest(limit=limit, threshold=0.0, quality=False)
    return [t.suggestions for t in recipe.suggest(records, ask)]


@contextlib.contextmanager
def cpu_lock(path: Path | None) -> Iterator[None]:
    """Hold ``path``'s exclusive flock (as ``flock FILE cmd`` takes it) for one heavy step
    of a benchmark (none without a path): long runs queue per step, never for a whole run."""
    if path is None:
        yield
        return
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _set_label_index(src, field: str, value: str) -> None:
    """`set_search` of the label index itself: its lists a query, or the index rebuilt as
    HNSW (issue 66: does a graph search the headings faster at the same reach?)."""
    from dataclasses import replace

    from tagalign.index.faiss_index import VectorIndex

    index = src.index_
    if field == "nprobe":
        src.config = replace(src.config, nprobe=int(value))
        index.probe(int(value))
    elif field == "index":
        kind, _, m = value.partition(":")
        if kind != "hnsw":
            raise SystemExit(f"--set labels.index={value!r}: hnsw or hnsw:M")
        src.index_ = VectorIndex("hnsw", hnsw_m=int(m or 32)).build(index.vectors())
    elif index.kind != "hnsw":
        raise SystemExit("--set labels.ef_search: the label index is not HNSW "
                         "(set labels.index=hnsw first)")
    else:
        index.ef_search = index.index_.hnsw.efSearch = int(value)


#: the label index's own settings (`_set_label_index`)
LABEL_INDEX = ("nprobe", "index", "ef_search")
#: what `set_search` may change: source name → its search settings
SEARCH_SETTINGS = {"omikuji": ("beam_size",),
                   "tfidf_knn": ("postings", "rescore", "k", "top_k"),
                   "emb_knn": ("nprobe", "k", "top_k"),
                   "labels": ("title_top_k", "title_nprobe", "top_k", *LABEL_INDEX),
                   "lexical": ("scattered", "scattered_slack", "compounds")}
#: widths every source of these has in its config: the neighbours searched (``k``) and the
#: candidates kept (``top_k``)
WIDTHS = ("k", "top_k")


def add_search_args(ap: argparse.ArgumentParser) -> None:
    """``--set SOURCE.FIELD=VALUE`` (repeated; `set_search`) and ``--no-compile-ranker``
    (LightGBM's own prediction; default: compiled, as `tagalign suggest` runs)."""
    ap.add_argument("--set", action="append", default=[], metavar="SOURCE.FIELD=VALUE",
                    help="A search setting changed after loading, to time it beside the "
                         "trained one: omikuji.beam_size, tfidf_knn.postings, "
                         "tfidf_knn.rescore, emb_knn.nprobe (_common.set_search).")
    ap.add_argument("--no-compile-ranker", dest="compile_ranker", action="store_false",
                    help="LightGBM's own prediction (default: compiled, as `tagalign suggest`).")


def set_search(project, assignments: list[str]) -> None:
    """A/B runs on one saved model: change a hybrid's search settings in memory, after
    loading (``SOURCE.FIELD=VALUE``: ``omikuji.beam_size``, ``tfidf_knn.postings`` and
    ``.rescore`` of an impact search, ``emb_knn.nprobe`` of an IVF index, the label index's
    ``labels.title_top_k``, ``.title_nprobe`` and ``.nprobe`` (its inverted lists a query,
    both queries' unless ``title_nprobe`` is set), ``labels.index=hnsw[:M]`` (the label
    index rebuilt as HNSW of its own rows, M links a node, default 32; row order kept, so
    every row still names its subject) and ``labels.ef_search`` (that graph's search
    width; after ``labels.index``), the lexical matcher's looser matches as
    JSON values: ``lexical.scattered=true``; the neighbours' and the label index's widths,
    `WIDTHS`: ``tfidf_knn.k``, ``emb_knn.top_k``, ``labels.top_k``), so a benchmark
    can time the settings a model was trained with beside others in one run. Not a product
    feature: the ranker learned its features from the searches of the trained settings."""
    from dataclasses import replace

    from tagalign.index.sparse import search_config

    sources = {s.name: s for s in project.recipe.pipeline_.sources}
    for assignment in assignments:
        key, _, value = assignment.partition("=")
        name, _, field = key.partition(".")
        if field not in SEARCH_SETTINGS.get(name, ()) or name not in sources or not value:
            raise SystemExit(f"--set {assignment!r}: SOURCE.FIELD=VALUE, one of "
                             f"{SEARCH_SETTINGS} of the model's sources {sorted(sources)}")
        src = sources[name]
        if field in WIDTHS:
            src.config = replace(src.config, **{field: int(value)})
            continue
        if name == "emb_knn":
            src.index_.probe(int(value))
            continue
        if name == "labels" and field in LABEL_INDEX:
            _set_label_index(src, field, value)
            continue
        if name == "lexical":
            src.set_matching(**{field: json.loads(value)})
            continue
        if name == "tfidf_knn" and field not in search_config(src.config.search, {}).values():
            raise SystemExit(f"--set {assignment!r}: this model's TF-IDF search "
                             f"({src.config.search}) has no {field!r}")
        src.config = replace(src.config, **{field: int(value)})
        for index in getattr(src, "_index", {}).values():  # tfidf_knn's loaded searches
            index.config = search_config(src.config.search, src.config.values())
