"""Faults survived (issue 30): kill -9 at seeded random moments, then restart or resume.

    python -m benchmarks.faults --work runs/faults [--kills 20] [--only suggest,server]

Scenarios (each killed ``--kills`` times, at a moment drawn with ``--seed`` between the
start and the length of an uninterrupted run):

- ``train``: a small hybrid on 1,500 seeded training records: ``--train-refs`` (5)
  uninterrupted trainings and ``--train-resumes`` (20) killed ones resumed with `tagalign
  train` on the same records, taken in turn (a run that ends before its kill is one more
  reference; issue 64 ran ``--train-refs 20``), each scored by avg R@5..20 on 200 seeded
  dev records. Both spreads (n, mean, sd, range), Welch's t-test and a Mann-Whitney U of
  whether the resumed mean differs, a Brown-Forsythe test of the spreads (Omikuji's trees
  are unseeded: no run is bit-identical), and the resumed scores by the last phase
  finished before the kill.
  Every tenth kill resumes with *other* records instead (an extra run): no finished phase
  may then be reused ("finished earlier").
- ``suggest``: `tagalign suggest --output` on 1,500 seeded dev records, killed, then
  `--resume`: the output must equal an uninterrupted run line for line (ids, subjects,
  scores), no record lost or doubled.
- ``batch``: the same on Ray (`--engine ray`, a folder of shards), rerun to resume.
- ``server``: `tagalign serve --allow-learn` under a learn + suggest load, killed, then
  restarted: every learn request acknowledged (HTTP 200) before the kill is in the feedback
  store (`tagalign feedback export`).
- ``download``: `tagalign download --force` of an update into a project with feedback,
  killed: afterwards the folder holds the old project with its feedback or the new one
  with the same feedback, never neither (then a rerun completes it).
- ``downloads`` (issue 46): ``--kills`` pairs of downloads of two versions into one
  folder started at once (one of each pair with ``--wait``), then as many downloads while
  `serve` reloads the folder in a loop and `serve --workers 2` gets SIGHUP: the folder
  holds one version whole with its feedback, every answer is the model's its
  X-Model-Version names ("mixes seen" must be 0); the row says what the users saw.
- ``store_disk`` / ``postgres`` (issue 46): `serve --allow-learn` under learn + suggest load
  while the SQLite store's tmpfs is filled, or a real PostgreSQL store is restarted,
  stopped for 30 s and the server killed: learns answer 200, 507 or 503 only, suggests
  keep answering, no acknowledged decision lost.
- ``oom`` / ``ray_kill`` / ``ray_disk`` (issue 46): a `serve --workers 2` worker put into a
  tight memory cgroup until the kernel kills it (replaced, the other serving, no learn
  lost); a Ray worker killed mid-shard (output equal, nothing doubled); Ray shards on a
  full tmpfs (one `error:` line, finished shards kept, the rerun completes).
- ``disk`` (root: it mounts a size-limited tmpfs): a full disk during `train`, `suggest
  --output` (JSONL and MARC), `download --force` of an update and `upload` to a file://
  store, at seeded random fill levels: one `error:` line naming the path, what was
  finished kept, the rerun completes (`scenario_disk`); a row per path.
- ``start_full`` / ``start_readonly`` / ``start_postgres_down`` / ``start_wrong`` (issue 64):
  `serve` started while its store is away (the SQLite store's tmpfs full, remounted
  read-only, a real PostgreSQL stopped) or wrong (`benchmarks/faults/startup.py`): seconds to
  the first suggest 200, the answers while away (learns 507 or 503 only), seconds to
  learning once the store is given back (no restart), acknowledged learns lost (must be 0);
  a wrong store must stop the start with one `error:` line.
- ``soak`` (root: its PostgreSQL store is on a tmpfs): ``--soak-minutes`` (5; the issue's
  soak is 60) of a mixed load from ``--soak-clients`` (16) on ``--soak-project`` served with
  2 workers, reloads, the feedback store taken away twice and its disk filled once
  (`benchmarks/faults/soak.py` says what the load holds, `soak_store.py` when the store
  goes): failed requests, refused while away, acknowledged learns lost, each worker's RSS
  growth over the last 40 % of the run, p95 by tenth.

Prints per scenario: kills, survivals, records lost (must be 0), and the figures above.
The sample: seeded draws of the shared LLMs4Subjects train/dev (both languages, all types).
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

from benchmarks._common import DATA, seeded_records
from benchmarks.faults.common import SMALL, run, write_jsonl
from benchmarks.faults.disk import scenario_disk
from benchmarks.faults.download import scenario_download, scenario_downloads
from benchmarks.faults.oom import scenario_oom
from benchmarks.faults.outputs import scenario_batch, scenario_suggest
from benchmarks.faults.ray import scenario_ray_disk, scenario_ray_kill
from benchmarks.faults.server import scenario_server
from benchmarks.faults.soak import scenario_soak
from benchmarks.faults.startup import (
    scenario_start_full,
    scenario_start_postgres_down,
    scenario_start_readonly,
    scenario_start_wrong,
)
from benchmarks.faults.store import scenario_postgres, scenario_store_disk
from benchmarks.faults.train import scenario_train

SCENARIOS = {"train": scenario_train, "suggest": scenario_suggest, "batch": scenario_batch,
             "server": scenario_server, "download": scenario_download,
             "downloads": scenario_downloads, "disk": scenario_disk,
             "store_disk": scenario_store_disk, "postgres": scenario_postgres,
             "oom": scenario_oom, "ray_kill": scenario_ray_kill, "ray_disk": scenario_ray_disk,
             "start_full": scenario_start_full, "start_readonly": scenario_start_readonly,
             "start_postgres_down": scenario_start_postgres_down,
             "start_wrong": scenario_start_wrong, "soak": scenario_soak}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, default=Path("runs/faults"))
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--train-refs", type=int, default=5,
                    help="train: uninterrupted reference trainings")
    ap.add_argument("--train-resumes", type=int, default=20,
                    help="train: killed-then-resumed trainings on the same records")
    ap.add_argument("--soak-minutes", type=float, default=5.0)
    ap.add_argument("--soak-clients", type=int, default=16)
    ap.add_argument("--soak-project", type=Path, default=Path("runs/bc20k"),
                    help="soak: the trained project to serve (never written)")
    ap.add_argument("--only", default=",".join(SCENARIOS))
    ap.add_argument("--vocab", type=Path, default=DATA / "gnd/gnd-subjects.tsv.gz")
    ap.add_argument("--train", type=Path, default=DATA / "llms4subjects/train.jsonl.gz")
    ap.add_argument("--dev", type=Path, default=DATA / "llms4subjects/dev.jsonl.gz")
    args = ap.parse_args()
    from tagalign.vocab import load_vocabulary

    ctx = argparse.Namespace(work=args.work.resolve(), kills=args.kills, vocab_file=args.vocab)
    ctx.train_refs, ctx.train_resumes = args.train_refs, args.train_resumes
    ctx.soak_minutes, ctx.soak_project = args.soak_minutes, args.soak_project.resolve()
    ctx.soak_clients = args.soak_clients
    ctx.work.mkdir(parents=True, exist_ok=True)
    vocab = load_vocabulary(args.vocab)
    train = seeded_records(args.train, vocab, 3000, args.seed)
    ctx.train_file = write_jsonl(ctx.work / "train.jsonl", train[:1500])
    ctx.other_train_file = write_jsonl(ctx.work / "train-other.jsonl", train[1500:])
    ctx.dev = seeded_records(args.dev, vocab, 1500, args.seed)
    ctx.dev_file = write_jsonl(ctx.work / "dev.jsonl", ctx.dev)
    langs = {lg: sum(r.language == lg for r in ctx.dev) for lg in ("de", "en")}
    print(f"sample (seed {args.seed}): train 1,500 + 1,500 other, dev {len(ctx.dev)} {langs}")
    ctx.project = ctx.work / "project"
    only = args.only.split(",")
    if set(only) - {"soak"} and not (ctx.project / "model").exists():  # soak serves its own
        run("train", str(ctx.project), "--vocab", str(args.vocab), "--train",
            str(ctx.train_file), *[a for k, v in SMALL.items()
                                   for a in ("--param", f"{k}={v}")])
    rng = random.Random(args.seed)
    for name in only:
        SCENARIOS[name](ctx, rng)


if __name__ == "__main__":
    main()
