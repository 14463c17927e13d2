"""Record domains from text and suggested subjects together (issue 34): `linear-ngrams` vs
subjects only vs `subjects-stack` (text + subjects) [vs mCPT at an hour's budget].

The protocol of `benchmarks/domains_variants.py` (removed; `git checkout 6a2d4a2`): all
training records (labelled), one seeded (``--seed``) permutation of the labelled dev
records, its first ``--n-tune`` (4,000) tune the thresholds (global + per class, micro-F1)
— and are the stacker's ``--dev`` —
the other 15,896 are scored; all 29 labels of ``domains.csv`` scored. The subject project
(``--project``, default the full-train hybrid) is read only; it never saw a dev record.

Rows:

* ``linear-ngrams`` — the text classifier alone (the `classify` default);
* ``subjects only`` — Σ score·P(d|s) / Σ score over the project's top ``--top-k``
  suggestions, P(d|s) counted on train's gold subjects × gold domains; thresholds tuned;
* ``text + subjects (lightgbm|logistic)`` — `subjects-stack`: the stacker cross-fitted on
  the 4,000 tune records (out-of-fold scores tune the thresholds), refit on them, scoring
  the 15,896 (``--stackers`` picks which), without the neighbour records' domains;
* ``text + subjects + neighbours (…)`` — the same with them (the default recipe): the gold
  domains of each record's 30 nearest training records in the project's `tfidf_knn` and
  `emb_knn` searches (`tagalign.classify.neighbours`);
* ``held-out`` — the default recipe as `tagalign classify train --subjects-project`
  trains it on a project that keeps held-out evidence (`tagalign.suggest.held_out`): the
  stacker also learns from the training records the project held out (its split B, about
  12,000, with the out-of-fold lists and split-A neighbours the project kept for them),
  and the text model learns from the other training records only (``text-model-heldout``;
  its own scores are reported beside the row);
* ``no-dev`` — the same recipe trained without ``--dev``: the stacker learns from the
  held-out training records alone, its thresholds tuned on their out-of-fold scores (the
  4,000 tune records unread; scored on the same 15,896);
* ``mcpt`` — `label-contrastive` on a seeded ``--mcpt-n-train`` sample at the budget knobs
  below; only with ``--rows ...,mcpt`` (up to an hour on 2 cores: ask before running it).

``--few-shot DOMAIN`` keeps only ``--few-shot-n`` (50) seeded training records of that
domain (the others are dropped from train for the text model and the profiles; the
subject project stays the full one): the few-shot setting of the issue (mCPT's sample then
holds all of those records besides its seeded ``--mcpt-n-train``). Every row also
reports the F1 of each domain with ≤ 50 training records (and of those in ``--show``).

Intermediate results are cached in ``--work-dir``: the trained text model, its dev scores,
the project's top-k suggestions and neighbour records for every dev record (JSONL) and
their timings; a rerun
reuses them, so stacker variants cost seconds. Rows are appended to
``WORK/results.jsonl`` as they finish and the table is printed at the end.

    flock /tmp/tagalign-cpu.lock nice -n 5 .venv/bin/python -m benchmarks.domains.domains_stack
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from benchmarks._common import add_domain_data_args, peak_rss_gb

SMALL = 50  # "few-shot": a domain with at most this many training records


def load_data(args):
    from tagalign.classify import read_examples
    from tagalign.records import InputReport

    quiet = InputReport(stream=open("/dev/null", "w"))  # noqa: SIM115 - skips not shown
    train = read_examples(args.train, report=quiet, require_labels=True)
    dev = read_examples(args.dev, report=quiet, require_labels=True)
    if args.few_shot:
        rng = np.random.default_rng(args.seed)
        having = [i for i, ex in enumerate(train) if args.few_shot in ex.labels]
        drop = set(rng.permutation(having)[args.few_shot_n:].tolist())
        train = [ex for i, ex in enumerate(train) if i not in drop]
    perm = np.random.default_rng(args.seed).permutation(len(dev))
    tune = [dev[i] for i in perm[: args.n_tune]]
    start = max(args.n_tune, args.eval_from or 0)
    evals = [dev[i] for i in perm[start: start + args.n_eval]]
    return train, tune, evals


def tag(args) -> str:
    return f"-fs-{args.few_shot}{args.few_shot_n}" if args.few_shot else ""


def text_model(args, train, tune, labels, suffix: str = ""):
    """The trained `linear-ngrams` (cached folder ``text-model{suffix}``) and its minutes."""
    from tagalign.classify import Classifier, get_classifier

    folder = args.work_dir / f"text-model{tag(args)}{suffix}"
    meta = args.work_dir / f"text-model{tag(args)}{suffix}.json"
    if (folder / "config.json").exists() and meta.exists():
        return Classifier.load(folder, labels=labels), json.loads(meta.read_text())["minutes"]
    t0 = time.perf_counter()
    clf = get_classifier("linear-ngrams")
    clf.fit(train, tune, labels=labels)
    minutes = (time.perf_counter() - t0) / 60
    clf.save(folder)
    meta.write_text(json.dumps({"minutes": minutes, "n_train": len(train)}))
    print(f"text model trained in {minutes:.1f} min", flush=True)
    return clf, minutes


def text_probs(args, clf, tune, evals, suffix: str = "") -> tuple[np.ndarray, np.ndarray,
                                                                   float]:
    """The text model's probabilities of the tune and scored records, cached with their
    ids (a rerun with another split of the same dev records reads the cache)."""
    path = args.work_dir / f"text-probs{tag(args)}{suffix}-seed{args.seed}.npy"
    meta = path.with_suffix(".json")
    wanted = [ex.id for ex in tune + evals]
    cached = json.loads(meta.read_text()) if path.exists() and meta.exists() else {}
    if "ids" in cached and set(wanted) <= set(cached["ids"]):
        at = {rid: i for i, rid in enumerate(cached["ids"])}
        probs = np.load(path)[[at[rid] for rid in wanted]]
        minutes = cached["minutes"]
    else:
        t0 = time.perf_counter()
        probs = clf.predict_proba(tune + evals)
        minutes = (time.perf_counter() - t0) / 60
        np.save(path, probs)
        meta.write_text(json.dumps({"minutes": minutes, "ids": wanted}))
    return probs[: len(tune)], probs[len(tune):], minutes


def suggestions(args, examples) -> tuple[dict[str, list], dict[str, dict], float]:
    """The project's top ``--top-k`` for every dev record and its neighbour records of the
    same pass (cached JSONL: ``suggested-topK.jsonl``, ``neighbours.jsonl``), and minutes.
    A work dir holding suggestions without neighbours (made before they were read) reads
    its suggestions and runs the project once more for the neighbours."""
    path = args.work_dir / f"suggested-top{args.top_k}.jsonl"
    meta = args.work_dir / f"suggested-top{args.top_k}.json"
    nb_path = args.work_dir / "neighbours.jsonl"
    rows: dict[str, list] = {}
    nbrs: dict[str, dict] = {}
    if path.exists() and meta.exists():
        for line in path.read_text("utf-8").splitlines():
            obj = json.loads(line)
            rows[obj["id"]] = [tuple(x) for x in obj["s"]]
    if nb_path.exists():
        for line in nb_path.read_text("utf-8").splitlines():
            obj = json.loads(line)
            nbrs[obj["id"]] = {src: [tuple(x) for x in found] for src, found in
                               obj["n"].items()}
    if all(ex.id in rows and ex.id in nbrs for ex in examples):
        return rows, nbrs, json.loads(meta.read_text())["minutes"]
    from tagalign.project import Project
    from tagalign.project.domains import suggest_into
    from tagalign.records import InputReport, read_records

    t0 = time.perf_counter()
    project = Project.load(args.project)
    load_min = (time.perf_counter() - t0) / 60
    quiet = InputReport(stream=open("/dev/null", "w"))  # noqa: SIM115
    records = {r.id: r for r in read_records(args.dev, report=quiet)}
    todo = list(examples)
    t0 = time.perf_counter()

    def tick(done: int, total: int) -> None:
        if done % 2048 < 512:
            rate = done / max(time.perf_counter() - t0, 1e-9)
            print(f"  suggested {done}/{total} ({rate:.0f} rec/s)", flush=True)

    suggest_into(project, todo, args.top_k, records, on_batch=tick)
    minutes = (time.perf_counter() - t0) / 60
    if rows:  # the same ranking as the cached suggestions: the lists must agree
        same = sum([s for s, _ in rows[ex.id]] == [s for s, _ in ex.suggested] for ex in todo)
        print(f"  {same} of {len(todo)} suggestion lists equal the cached ones", flush=True)
    with open(path, "w", encoding="utf-8") as fh:
        for ex in todo:
            fh.write(json.dumps({"id": ex.id, "s": ex.suggested}) + "\n")
    with open(nb_path, "w", encoding="utf-8") as fh:
        for ex in todo:
            fh.write(json.dumps({"id": ex.id, "n": ex.neighbours}) + "\n")
    meta.write_text(json.dumps({"minutes": minutes, "load_minutes": load_min,
                                "n": len(todo)}))
    print(f"suggestions and neighbours of {len(todo)} dev records in {minutes:.1f} min "
          f"(+{load_min:.1f} min loading the project)", flush=True)
    return ({ex.id: ex.suggested for ex in todo}, {ex.id: ex.neighbours for ex in todo},
            minutes)


def score(name, labels, gold, probs, per_class, minutes, small, extra=None) -> dict:
    from tagalign.classify.metrics import report
    from tagalign.classify.thresholds import decide

    r = report(gold, decide(probs, np.asarray(per_class, np.float32)), labels.labels)
    return {"row": name, "micro_f1": r["micro_f1"], "macro_f1": r["macro_f1"],
            "minutes": minutes, "small_domains": {
                d: round(r["per_class"].get(d, {"f1": 0.0})["f1"], 4) for d in small},
            "rss_gb": peak_rss_gb(), **(extra or {})}


def new_stack(args, labels, text, evidence, vocab, train, **params):
    """`subjects-stack` around an already trained text model and profiles (what its `_fit`
    would make), bound to the project's vocabulary."""
    import scipy.sparse as sp

    from tagalign.classify import get_classifier

    extra = dict(kv.split("=", 1) for kv in args.param)
    stack = get_classifier("subjects-stack", top_k=args.top_k, folds=args.folds,
                           seed=args.seed, **{**params, **{k: json.loads(v)
                                                            for k, v in extra.items()}})
    stack.labels_, stack.text_, stack.evidence_ = labels, text, evidence
    stack.train_domains_ = ([ex.id for ex in train], sp.csr_matrix(labels.matrix(train)))
    stack.bind(vocab)
    stack.vocabulary_ = {"fingerprint": vocab.fingerprint, "size": len(vocab)}
    return stack


def stack_row(name, stack, oof, y_tune, n_tune, probs, labels, gold, minutes, small,
              extra=None, tuned_on="dev (out of fold)") -> dict:
    """The row of a stack whose out-of-fold tuning scores are ``oof``: thresholds tuned on
    them, the decision the recipe chooses, ``probs`` (the scored records) at it, and the
    other decision's figures beside it."""
    from tagalign.classify.thresholds import tune as tune_thresholds

    found = tune_thresholds(oof, y_tune)
    stack.thresholds_ = {**found, "tuned_on": tuned_on, "tuned_on_records": n_tune}
    chosen = stack.choose_decision(oof, y_tune)
    other = "per_class" if chosen == "global" else "global"
    return score(f"{name} ({stack.params['stacker']}, {chosen} thr.)", labels, gold, probs,
                 found[chosen], minutes, small, {
                     "params": stack.params, "decision": chosen,
                     "oof_micro_f1": found["dev_micro_f1_per_class"],
                     "nested": stack.thresholds_["nested_micro_f1"],
                     "other_decision": score(other, labels, gold, probs, found[other], 0,
                                             small), **(extra or {})})


def held_out_setup(args, train, tune, evals, labels):
    """What the held-out rows share: the suggestions of tune and scored records, the
    project's held-out training records (``held``), the text model without them (cached
    ``text-model-heldout``) with its tune / scored probabilities, a stack around it and the
    minutes spent (text model, its predictions, suggestions)."""
    from tagalign.classify.profiles import SubjectEvidence
    from tagalign.project import Project
    from tagalign.project.domains import held_out_examples

    sug, nbrs, sug_min = suggestions(args, tune + evals)
    for ex in tune + evals:
        ex.suggested, ex.neighbours = sug[ex.id], nbrs[ex.id]
    project = Project.load(args.project)
    held = held_out_examples(project, train, args.top_k)
    if not held:
        raise SystemExit(f"{args.project} keeps no held-out evidence (trained before it was "
                         "kept?): retrain it")
    ids = {ex.id for ex in held}
    text, train_min = text_model(args, [ex for ex in train if ex.id not in ids], tune,
                                 labels.labels, "-heldout")
    pt, pe, pred_min = text_probs(args, text, tune, evals, "-heldout")
    t0 = time.perf_counter()
    evidence = SubjectEvidence.fit(project.vocab, [ex.subjects for ex in train],
                                   labels.matrix(train), args.top_k)
    stack = new_stack(args, labels, text, evidence, project.vocab, train)
    stack._held_out_examples = held  # what `fit(held_out_examples=…)` keeps
    return held, stack, pt, pe, train_min + pred_min + sug_min + (
        time.perf_counter() - t0) / 60, train_min + pred_min


def held_out_row(args, train, tune, evals, labels, small, gold) -> dict:
    """`subjects-stack` as `tagalign classify train --subjects-project` trains it on a
    project that keeps held-out evidence: the stacker learns from the 4,000 tune records
    and from the training records the project held out (split B, with the lists and
    neighbours the project kept for them); the text model from the other training
    records only (``text-model-heldout``)."""
    from tagalign.classify.thresholds import tune as tune_thresholds

    held, stack, pt, pe, before, text_min = held_out_setup(args, train, tune, evals, labels)
    t0 = time.perf_counter()
    y_tune = labels.matrix(tune)
    _, tune_on, _ = stack._tuning_records(train, tune)
    oof = stack._tuning_scores(tune_on)  # as `fit` makes them: the text model reads dev here
    probs = stack.stack_proba(pe, [ex.suggested for ex in evals],
                              [ex.neighbours for ex in evals])
    minutes = before + (time.perf_counter() - t0) / 60
    row = stack_row(f"text + subjects + neighbours + {len(held)} held-out train records",
                    stack, oof, y_tune, len(tune), probs, labels, gold, minutes, small,
                    {"held_out": len(held)})
    text_alone = tune_thresholds(pt, y_tune)
    row["text_model_alone"] = score("linear-ngrams without split B", labels, gold, pe,
                                    text_alone["per_class"], text_min, small)
    stack.subjects_project_ = str(args.project)
    stack.save(args.work_dir / f"stack-held-out{tag(args)}")
    if args.curve:
        row["curve"] = held_out_curve(args, stack, held, tune, evals, pt, pe, labels, gold)
    return row


def no_dev_row(args, train, tune, evals, labels, small, gold) -> dict:
    """`tagalign classify train --subjects-project` without ``--dev``: the stacker is
    cross-fitted on the project's held-out training records alone and the thresholds are
    tuned on their out-of-fold scores; no dev record is read before the scored ones (the
    4,000 tune records are left unused, so the scored records are the other rows')."""
    held, stack, _, pe, before, _ = held_out_setup(args, train, tune, evals, labels)
    t0 = time.perf_counter()
    _, tune_on, where = stack._tuning_records(train, None)
    assert where == "held_out"
    oof = stack._tuning_scores(tune_on)
    probs = stack.stack_proba(pe, [ex.suggested for ex in evals],
                              [ex.neighbours for ex in evals])
    minutes = before + (time.perf_counter() - t0) / 60
    row = stack_row(f"no --dev: stacker on the {len(held)} held-out train records", stack,
                    oof, labels.matrix(tune_on), len(tune_on), probs, labels, gold, minutes,
                    small, {"held_out": len(held), "dev_records_read": 0},
                    tuned_on="held-out training records (out of fold)")
    stack.subjects_project_ = str(args.project)
    stack.save(args.work_dir / f"stack-no-dev{tag(args)}")
    return row


def held_out_curve(args, stack, held, tune, evals, pt, pe, labels, gold) -> list[dict]:
    """The stacker learned from the first n tune records alone vs from them and the
    held-out training records, for each n of ``--curve`` and each seed of ``--curve-seeds``
    (LightGBM, cross-fitted and thresholded on the n records as the recipe does; the same
    scored records; the held-out row's text model in both: ``pt``/``pe``, its probabilities
    of the tune and scored records)."""
    from tagalign.classify.metrics import micro_f1
    from tagalign.classify.stacker import DomainStacker, cross_fit
    from tagalign.classify.thresholds import decide
    from tagalign.classify.thresholds import tune as tune_thresholds

    y_held, y_tune = labels.matrix(held), labels.matrix(tune)
    X_held = stack._features(stack.text_.predict_proba(held), [ex.suggested for ex in held],
                             [ex.neighbours for ex in held],
                             stack.evidence_.own([ex.subjects for ex in held], y_held))
    X_tune = stack._features(pt, [ex.suggested for ex in tune], [ex.neighbours for ex in tune])
    X_eval = stack._features(pe, [ex.suggested for ex in evals],
                             [ex.neighbours for ex in evals])
    out = []
    for n in [int(x) for x in args.curve.split(",")]:
        for seed in [int(x) for x in args.curve_seeds.split(",")]:
            r = {"n_dev": n, "seed": seed}
            for name, extra in (("dev_only", None), ("with_held_out", (X_held, y_held))):
                oof, _, full = cross_fit(DomainStacker(seed=seed), X_tune[:n], y_tune[:n],
                                         args.folds, seed, extra)
                t = tune_thresholds(oof, y_tune[:n])["global"]
                r[name] = round(micro_f1(gold, decide(full.predict_proba(X_eval), t)), 4)
            print(f"  stacker records: {n} dev (seed {seed}): dev only {r['dev_only']:.4f}, "
                  f"+ {len(held)} held-out {r['with_held_out']:.4f}", flush=True)
            out.append(r)
    return out


def mcpt_row(args, train, tune, evals, labels, small, gold) -> dict:
    """`label-contrastive` at the budget knobs (seeded train sample): built, run on request."""
    from tagalign.classify import get_classifier

    idx = np.random.default_rng(args.seed).permutation(len(train))[: args.mcpt_n_train]
    if args.few_shot:  # the few-shot domain's records all in the sample: its few examples
        idx = np.union1d(idx, [i for i, ex in enumerate(train) if args.few_shot in ex.labels])
    idx = np.sort(idx)
    params = {"base_model": "e5-small", "max_seq_length": args.mcpt_seq,
              "train_layers": args.mcpt_train_layers, "epochs_head": 50,
              "epochs_contrastive": args.mcpt_epochs, "epochs_post": 50,
              "per_language": False}
    t0 = time.perf_counter()
    clf = get_classifier("label-contrastive", **params)
    clf.fit([train[i] for i in idx], tune, labels=labels.labels)
    probs = clf.predict_proba(evals)
    minutes = (time.perf_counter() - t0) / 60
    return score("mcpt", labels, gold, probs, clf.thresholds_["per_class"], minutes, small,
                 {"params": params, "n_train": len(idx)})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_domain_data_args(ap)
    ap.add_argument("--project", type=Path, default=Path("runs/full/project"))
    ap.add_argument("--work-dir", type=Path, default=Path("runs/domains"))
    ap.add_argument("--rows", default="text,subjects,stack,held-out,no-dev",
                    help="text, subjects, stack, held-out (the stack learning from the "
                    "project's held-out training records too), no-dev (from them alone), "
                    "mcpt (mcpt: up to an hour)")
    ap.add_argument("--stackers", default="lightgbm,logistic")
    ap.add_argument("--neighbours", default="off,on",
                    help="stack rows without (off) and with (on) the neighbour records' domains")
    ap.add_argument("--top-k", type=int, default=20)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--param", action="append", default=[],
                    help="subjects-stack parameter key=value (JSON), e.g. rounds=500")
    ap.add_argument("--n-tune", type=int, default=4000)
    ap.add_argument("--n-eval", type=int, default=10**9, help="default: all the rest")
    ap.add_argument("--eval-from", type=int, default=None,
                    help="score the permutation's records from this position on (default "
                    "--n-tune): learning curves of the stacker on one scored set")
    ap.add_argument("--few-shot", default=None, help="a domain cut to --few-shot-n records")
    ap.add_argument("--few-shot-n", type=int, default=SMALL)
    ap.add_argument("--show", default="", help="domains whose F1 is reported besides those "
                    f"with ≤ {SMALL} training records (comma-separated)")
    ap.add_argument("--curve", default="", help="with the held-out row: stacker learning "
                    "curves over these numbers of dev records, alone vs with the held-out "
                    "records (e.g. 250,500,1000,4000)")
    ap.add_argument("--curve-seeds", default="0,1,2")
    ap.add_argument("--mcpt-n-train", type=int, default=40000)
    ap.add_argument("--mcpt-epochs", type=int, default=1)
    ap.add_argument("--mcpt-seq", type=int, default=64)
    ap.add_argument("--mcpt-train-layers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    args.work_dir.mkdir(parents=True, exist_ok=True)
    run(args)


def run(args) -> list[dict]:

    from tagalign.classify import LabelSet, read_label_set
    from tagalign.classify.profiles import SubjectEvidence
    from tagalign.classify.thresholds import tune as tune_thresholds
    from tagalign.vocab import Vocabulary

    rows = args.rows.split(",")
    labels = LabelSet(read_label_set(args.label_set))
    train, tune, evals = load_data(args)
    counts = labels.matrix(train).sum(0)
    small = [d for d, c in zip(labels.labels, counts, strict=True)
             if c <= SMALL or d in args.show.split(",")]
    y_tune, gold = labels.matrix(tune), labels.matrix(evals)
    print(f"train {len(train)}, tune {len(tune)}, scored {len(evals)}, {len(labels)} labels; "
          f"domains with ≤ {SMALL} training records: {small or 'none'}", flush=True)
    out_path = args.work_dir / f"results{tag(args)}.jsonl"
    results = []

    def emit(r: dict) -> None:
        r = {**r, "few_shot": args.few_shot, "n_tune": len(tune), "n_eval": len(evals)}
        results.append(r)
        with open(out_path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(r) + "\n")
        print(f"{r['row']:34s} micro-F1 {r['micro_f1']:.4f} macro-F1 {r['macro_f1']:.4f} "
              f"{r['minutes']:.1f} min small {r['small_domains']}", flush=True)

    text_min = sug_min = 0.0
    if {"text", "stack"} & set(rows):
        clf, train_min = text_model(args, train, tune, labels.labels)
        pt, pe, pred_min = text_probs(args, clf, tune, evals)
        text_min = train_min + pred_min
        if "text" in rows:
            found = tune_thresholds(pt, y_tune)
            emit(score("linear-ngrams", labels, gold, pe, found["per_class"], text_min, small))
    if {"subjects", "stack"} & set(rows):
        sug, nbrs, sug_min = suggestions(args, tune + evals)
        s_tune, s_eval = [sug[ex.id] for ex in tune], [sug[ex.id] for ex in evals]
        t0 = time.perf_counter()
        vocab = Vocabulary.load(args.project)
        evidence = SubjectEvidence.fit(vocab, [ex.subjects for ex in train], labels.matrix(train),
                                       args.top_k)
        prof_min = (time.perf_counter() - t0) / 60
        if "subjects" in rows:
            found = tune_thresholds(evidence.weighted(s_tune), y_tune)
            emit(score("subjects only", labels, gold, evidence.weighted(s_eval),
                       found["per_class"], sug_min + prof_min, small))
    if "stack" in rows:
        n_tune, n_eval = [nbrs[ex.id] for ex in tune], [nbrs[ex.id] for ex in evals]
        for kind in args.stackers.split(","):
            for with_nb in [{"off": False, "on": True}[x] for x in args.neighbours.split(",")]:
                t0 = time.perf_counter()
                stack = new_stack(args, labels, clf, evidence, vocab, train, stacker=kind,
                                  neighbours=with_nb)
                oof = stack.fit_stacker(pt, s_tune, y_tune, n_tune)
                probs = stack.stack_proba(pe, s_eval, n_eval)
                minutes = text_min + sug_min + prof_min + (time.perf_counter() - t0) / 60
                what = "text + subjects + neighbours" if with_nb else "text + subjects"
                emit(stack_row(what, stack, oof, y_tune, len(tune), probs, labels, gold,
                               minutes, small))
                stack.subjects_project_ = str(args.project)
                stack.save(args.work_dir / f"stack-{kind}{'-nb' if with_nb else ''}{tag(args)}")
    if "held-out" in rows:
        emit(held_out_row(args, train, tune, evals, labels, small, gold))
    if "no-dev" in rows:
        emit(no_dev_row(args, train, tune, evals, labels, small, gold))
    if "mcpt" in rows:
        emit(mcpt_row(args, train, tune, evals, labels, small, gold))
    print()
    print(table(results, small))
    return results


def table(results: list[dict], small: list[str]) -> str:
    head = "| row | micro-F1 | macro-F1 | minutes |" + "".join(f" F1 {d} |" for d in small)
    lines = [head, "|---|---|---|---|" + "---|" * len(small)]
    for r in results:
        lines.append(f"| {r['row']} | {r['micro_f1']:.4f} | {r['macro_f1']:.4f} | "
                     f"{r['minutes']:.1f} |" + "".join(f" {r['small_domains'].get(d, 0):.4f} |"
                                                      for d in small))
    return "\n".join(lines)


if __name__ == "__main__":
    main()
