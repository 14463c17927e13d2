#!/usr/bin/env python
"""Issue 14 benchmark: language identification of bibliographic records (de/en).

Accuracy against the dev records' ``lang`` field, on titles alone and on title + abstract,
for tagalign's old stop-word guess, simplemma (what Annif uses for /detect-language),
py3langid, and the new `tagalign.text.guess_language` (simplemma, stop words on ties),
each restricted to the candidates de and en.
A seeded random sample of dev (never a file prefix: the file is sorted by language).

    python -m benchmarks.quality.language_id [--sample 4000] [--seed 0]
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import time
from collections import Counter
from collections.abc import Callable

import psutil

from benchmarks._common import DATA
from tagalign.text import guess_language
from tagalign.text.analyzer import stopword_guess
from tagalign.text.language import detect_language

CANDIDATES = ("de", "en")


def _py3langid() -> Callable[[str], str | None]:
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    ident = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    ident.set_languages(list(CANDIDATES))
    return lambda text: ident.classify(text)[0] if text.strip() else None


def _simplemma(text: str) -> str | None:
    return detect_language(text, CANDIDATES)[0][0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dev", default=DATA / "llms4subjects/dev.jsonl.gz")
    ap.add_argument("--sample", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    with gzip.open(args.dev, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    rows = [r for r in rows if r.get("lang") in CANDIDATES]
    rows = random.Random(args.seed).sample(rows, min(args.sample, len(rows)))
    proc = psutil.Process()
    rss0 = proc.memory_info().rss
    guess_language("Pilze und Holzschutz")  # loads simplemma's de and en dictionaries
    print(f"simplemma de+en dictionaries: +{(proc.memory_info().rss - rss0) / 1e6:.0f} MB RSS")
    langs = Counter(r["lang"] for r in rows)
    types = Counter(r.get("type") for r in rows)
    print(f"sample: {len(rows)} dev records (seed {args.seed}); lang {dict(langs)}; "
          f"type {dict(types.most_common())}")
    print("reference: the records' `lang` field (the catalogue's language code; a few "
          "records carry a title in the other language, which caps every method)")

    methods: dict[str, Callable[[str], str | None]] = {
        "stop words (old guess)": stopword_guess,
        "simplemma 2.0.0": _simplemma,
        "py3langid 0.4.0": _py3langid(),
        "guess_language: simplemma, stop words on ties (new)": guess_language,
    }
    print("\n| method | titles acc | title+abstract acc | ms/record (t+a) |")
    print("|---|---|---|---|")
    for name, fn in methods.items():
        accs = []
        for field in ("title", "both"):
            texts = [r["title"] if field == "title" else f"{r['title']}\n{r.get('abstract', '')}"
                     for r in rows]
            t0 = time.perf_counter()
            hits = sum(fn(t) == r["lang"] for t, r in zip(texts, rows, strict=True))
            ms = (time.perf_counter() - t0) * 1000 / len(rows)
            accs.append(hits / len(rows))
        print(f"| {name} | {accs[0]:.4f} | {accs[1]:.4f} | {ms:.2f} |")


if __name__ == "__main__":
    main()
