#!/usr/bin/env python
"""Is hybrid training reproducible? The static encoder's tokenizer, before and after.

The hybrid's static encoder used to get its WordPiece vocabulary from tokenizers'
``WordPieceTrainer``, whose BPE merges break count ties in hash-map order
(huggingface/tokenizers#1794): the same records gave another vocabulary on each run, so
another encoder and other suggestions. ``tagalign.train.static_model.train_tokenizer`` now
reads the vocabulary off ``WordLevelTrainer``'s tie-sorted word ranking (alphabet, then
frequent words, each also as a ``##`` piece).

Protocol: a seeded train sample and a seeded dev sample (``numpy.random.default_rng(seed)``,
never a file prefix: the files are sorted by language and type; make-ups printed). The
default hybrid is trained twice with the new builder and twice with the old trainer
(patched back in here, the same 8 lines as before), each from scratch. Prints, per run:
the tokenizer's vocabulary digest, avg R@5..20 and R@5..50 on the dev sample, training
seconds; then per pair of runs which trained parts came out byte-identical, the mean share
of the top-10 suggestions the two runs have in common, and the paired bootstrap difference
of avg recall (95 % interval).

    python benchmarks/hybrid_reproducible.py [--n-train 20000] [--n-dev 2000] [--seed 0]
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path

import numpy as np

from _common import recipe_suggestions
from hybrid_domains import KS20, KS50, bootstrap, load_samples, per_record_recall, sample_args
from tagalign.recipes.hybrid import HybridRecipe
from tagalign.train import static_model


def library_wordpiece(texts, vocab_size: int, **_: object):
    """The builder before this change: tokenizers' WordPieceTrainer (not deterministic)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=False)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(texts, trainer=trainers.WordPieceTrainer(
        vocab_size=vocab_size, min_frequency=2, special_tokens=["[UNK]", "[PAD]"],
        show_progress=False))
    tok.enable_truncation(512)
    return tok


def run(vocab, train, dev, workdir: Path) -> dict:
    shutil.rmtree(workdir, ignore_errors=True)
    recipe = HybridRecipe(vocab)
    t0 = time.perf_counter()
    recipe.fit(train, workdir=workdir)
    train_s = time.perf_counter() - t0
    tok = recipe.pipeline.encoder.model[0].tokenizer
    digest = hashlib.sha1(json.dumps(sorted(tok.get_vocab().items())).encode()).hexdigest()
    rankings = [[s.id for s in row] for row in recipe_suggestions(recipe, dev, 50)]
    return {"train_s": train_s, "vocab": digest[:12], "vocab_size": tok.get_vocab_size(),
            "rankings": rankings, "files": digests(workdir)}


def digests(workdir: Path) -> dict[str, str]:
    """md5 of each trained file under the phase folders (not the timings and model cards)."""
    return {str(f.relative_to(workdir)): hashlib.md5(f.read_bytes()).hexdigest()
            for f in sorted(workdir.rglob("*")) if f.is_file()
            and f.name not in ("phase.json", "README.md")}


def same_parts(a: dict[str, str], b: dict[str, str]) -> str:
    phases = sorted({k.split("/")[0] for k in a})
    same = [p for p in phases if all(a[k] == b.get(k) for k in a if k.startswith(p + "/"))]
    return f"identical: {', '.join(same) or 'none'}; differ: " \
        f"{', '.join(p for p in phases if p not in same) or 'none'}"


def main() -> None:
    args = sample_args(__doc__, "runs/hybrid-reproducible").parse_args()
    vocab, train, dev = load_samples(args)
    print("anchors: two trainings on the same records give the same suggestions; the new "
          "vocabulary costs no recall beyond noise (default hybrid on this sample: avg "
          "R@5..20 0.5583, R@5..50 0.6246 in issue 10's ablation)")

    new_builder = static_model.train_tokenizer
    runs: dict[str, dict] = {}
    for name, builder in (("new-1", new_builder), ("new-2", new_builder),
                          ("old-1", library_wordpiece), ("old-2", library_wordpiece)):
        static_model.train_tokenizer = builder
        runs[name] = run(vocab, train, dev, args.workdir / name)
        r20 = per_record_recall(dev, runs[name]["rankings"], KS20).mean()
        r50 = per_record_recall(dev, runs[name]["rankings"], KS50).mean()
        runs[name].update(r20=r20, r50=r50)
        print(f"{name}: vocab {runs[name]['vocab']} ({runs[name]['vocab_size']:,} tokens), "
              f"avg R@5..20 {r20:.4f}, R@5..50 {r50:.4f}, trained in "
              f"{runs[name]['train_s']:.0f} s", flush=True)
    static_model.train_tokenizer = new_builder

    for a, b in (("new-1", "new-2"), ("old-1", "old-2"), ("old-1", "new-1"),
                 ("old-2", "new-2")):
        common = np.mean([len(set(x[:10]) & set(y[:10])) / 10 for x, y in
                          zip(runs[a]["rankings"], runs[b]["rankings"], strict=True)])
        print(f"{a} vs {b}: {same_parts(runs[a]['files'], runs[b]['files'])}")
        line = f"  top-10 in common {common:.1%} (mean over {len(dev)} dev records)"
        for ks, label in ((KS20, "5..20"), (KS50, "5..50")):
            diff = per_record_recall(dev, runs[b]["rankings"], ks) - \
                per_record_recall(dev, runs[a]["rankings"], ks)
            lo, hi, _ = bootstrap(diff, args.bootstrap, args.seed)
            line += f"; avg R@{label} {b} − {a} {diff.mean():+.4f} [{lo:+.4f}, {hi:+.4f}]"
        print(line)


if __name__ == "__main__":
    main()
