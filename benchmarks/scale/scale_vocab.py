#!/usr/bin/env python
"""A 1.5-million-heading GND vocabulary (issue 48): its authority dump loaded with
``tagalign vocab load --entity-types all`` and what the vocabulary builds, sized and timed.

The sample (written once, seeded, as one gzipped MARC-XML authority dump in the DNB's layout,
``authorities-gnd_dnbmarc_scale-N.mrc.xml.gz``):

- the 204,569 real GND subject headings of ``gnd/gnd-subjects.tsv.gz`` in file order: their
  id, German preferred label (150 $a; the DNB's own idn in 001 and 035), 075 ``s``/``saz``
  and, for the 78,394 with an English label, that label as their one alternative label
  (450; the TSV holds no other alternative labels, broader terms nor notations, so those
  records carry none);
- then generated headings up to ``--headings`` (1,295,431 for 1.5M), drawn with one
  `random.Random(SEED)` in a fixed order, so the first n are the same whatever the total:
  45 % persons (075 ``p``/``piz``, 100 ``Surname, Given`` with $d dates, 400 ``Given
  Surname`` or ``Surname, G.``, a 550 profession pointing at a real subject heading, which
  a person's mapping ignores), 20 % corporate bodies (``b``/``kiz``, 110 $a + $g place,
  410 an abbreviation), 20 % places (``g``/``gik``, 151 $a [+ $g qualifier], 451 a
  variant; half with a 551 ``obpa`` broader link to an earlier generated place) and 15 %
  works (``u``/``wit``, half as 130 $a title + 430, half as 100 $a name $t title + 400
  $a $t); every one with exactly one preferred and one alternative label. Names are
  German-looking syllable compounds and a list of given names, so labels repeat now and
  then (as the GND's undifferentiated names do); ids are new-style GND ids (``1`` + 8
  digits + the mod-11 check character) that none of the real ones uses.

Other benchmarks take generated headings as gold from `generated_headings` (the same list
for the same ``n`` and seed; `gold_headings` draws a seeded sample of it): each
`Heading`'s ``label`` and ``alt`` are as the loader displays them.

Measured, each in a fresh process under ``/usr/bin/time -v`` (``--lock FILE``: each heavy
step holds that lock, so runs on a shared machine queue): ``tagalign vocab load DUMP
--entity-types all``; loading the saved fast form; the prefix index (built on first use,
in memory only) and its queries; the lexical matcher (the ``lexical`` recipe, fitted on the
vocabulary alone), saved and loaded; the label index (the hybrid's ``labels`` source, ``ivf``,
every preferred and alternative label a row) over a StaticEmbedding of the hybrid's size with
seeded random weights (no training records here, so no trained encoder: the sizes and times
of a trained one, not its quality), saved and loaded, read and memory-mapped. Then a table.
Omikuji is not measured: its trees grow with the labels that occur in training records, so
they need the records (issue 48's training runs).

    python -m benchmarks.scale.scale_vocab --lock /tmp/tagalign-cpu.lock \
        --dump /tmp/gnd-1.5m.mrc.xml.gz
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

from benchmarks._common import DATA, cpu_lock, peak_rss_gb

SEED = 48
HEADINGS = 1_500_000
REAL = DATA / "gnd" / "gnd-subjects.tsv.gz"
#: generated entity types (075 $b gndgen) and their shares
SHARES = (("p", 0.45), ("b", 0.20), ("g", 0.20), ("u", 0.15))
#: 075 $b gndspec of each type: individualised person, organisation, territorial body, work
SPECIFIC = {"s": "saz", "p": "piz", "b": "kiz", "g": "gik", "u": "wit"}

Subfields = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Heading:
    """One generated authority record: ``label`` and ``alt`` as ``vocab load`` displays
    them; ``head``/``alt_head`` the subfields of its 1XX/4XX (tags in ``tags``);
    ``broader``: the id a 551 points at (places only), ``profession`` a real subject id
    a person's 550 points at."""

    id: str
    type: str
    label: str
    alt: str
    tags: tuple[str, str]
    head: Subfields
    alt_head: Subfields
    broader: str | None = None
    profession: str | None = None


# -- names -------------------------------------------------------------------------------
_ONSETS = ("Ber", "Hof", "Lin", "Kra", "Mai", "Schwa", "Wei", "Ro", "Fi", "Ha", "Kel",
           "Brun", "Stein", "Wal", "Ei", "Lo", "Gro", "Kle", "Sto", "Trau", "Fal", "Mer",
           "Dre", "Hel", "Ost", "Nie", "Sa", "Wil", "Gun", "Ar", "Bra", "Eb")
_MIDDLES = ("", "", "en", "el", "ter", "de", "li", "ner", "ro", "wen", "ka", "sel")
_CODAS = ("ner", "mann", "ke", "berg", "ler", "rich", "hardt", "sch", "ter", "wald", "er",
          "bach", "dorf", "ling", "stedt", "heim", "feld", "hausen", "au", "brück")
_GIVEN = ("Anna", "Maria", "Elisabeth", "Ursula", "Monika", "Petra", "Sabine", "Claudia",
          "Andrea", "Julia", "Katharina", "Sophie", "Johanna", "Helga", "Ingrid", "Karin",
          "Hans", "Peter", "Klaus", "Wolfgang", "Jürgen", "Michael", "Thomas", "Andreas",
          "Stefan", "Frank", "Johann", "Friedrich", "Karl", "Heinrich", "Wilhelm", "Georg",
          "Ludwig", "Otto", "Ernst", "Paul", "Jakob", "Martin", "Christian", "Matthias")
_BODIES = ("Verein für Heimatkunde", "Historischer Verein", "Gesangverein", "Sportverein",
           "Stadtbibliothek", "Kunstverein", "Evangelische Kirchengemeinde",
           "Katholische Pfarrei", "Freiwillige Feuerwehr", "Gymnasium", "Museum",
           "Genossenschaftsbank", "Stadtwerke", "Verkehrsverein", "Naturschutzbund",
           "Handwerkskammer", "Stiftung", "Institut für Landesgeschichte", "Orchester",
           "Verlag")
_PLACE_KINDS = ("Landkreis", "Fluss", "Berg", "Region", "Ortsteil", "Burg", "Kloster")
_WORK_WORDS = ("Lieder", "Briefe", "Gedichte", "Chronik", "Tagebuch", "Sonate", "Messe",
               "Erzählungen", "Reise", "Geschichte", "Predigten", "Symphonie", "Roman",
               "Fragmente", "Streichquartett")


def _name(rng: random.Random) -> str:
    return rng.choice(_ONSETS) + rng.choice(_MIDDLES) + rng.choice(_CODAS)


def _check(digits: str) -> str:
    """The GND's mod-11 check character of ``digits`` (weights 2, 3, … from the right)."""
    total = sum(int(d) * w for w, d in enumerate(reversed(digits), 2))
    check = (11 - total % 11) % 11
    return "X" if check == 10 else str(check)


def _display(subfields: Subfields) -> str:
    from tagalign.vocab.gnd_marc import heading

    return heading(list(subfields))


def _headings(rng: random.Random, i: int, gid: str, earlier_place: str | None,
              real_ids: list[str]) -> Heading:
    kinds, weights = zip(*SHARES, strict=True)
    kind = rng.choices(kinds, weights)[0]
    broader = profession = None
    if kind == "p":
        surname, given = _name(rng), rng.choice(_GIVEN)
        born = rng.randrange(1450, 1990)
        head: Subfields = (("a", f"{surname}, {given}"),
                           ("d", f"{born}-{born + rng.randrange(25, 95)}"))
        alt: Subfields = (("a", f"{given} {surname}" if rng.random() < 0.5
                           else f"{surname}, {given[0]}."),)
        tags = ("100", "400")
        profession = rng.choice(real_ids)
    elif kind == "b":
        body, town = rng.choice(_BODIES), _name(rng)
        head = (("a", body), ("g", town))
        alt = (("a", "".join(w[0] for w in body.split()) + f" {town}"),)
        tags = ("110", "410")
    elif kind == "g":
        town = _name(rng)
        head = (("a", town),) + ((("g", rng.choice(_PLACE_KINDS)),) if rng.random() < 0.4
                                  else ())
        alt = (("a", rng.choice((f"{town}-{_name(rng)}", f"Alt-{town}", f"{town} an der "
                                 f"{_name(rng)}"))),)
        tags = ("151", "451")
        if earlier_place is not None and rng.random() < 0.5:
            broader = earlier_place
    else:
        title = f"{rng.choice(_WORK_WORDS)} {rng.choice(('aus', 'von', 'über', 'für'))} " \
                f"{_name(rng)}"
        other = f"{rng.choice(_WORK_WORDS)} ({rng.randrange(1, 40)})"
        if rng.random() < 0.5:
            head, alt, tags = (("a", title),), (("a", other),), ("130", "430")
        else:
            author = f"{_name(rng)}, {rng.choice(_GIVEN)}"
            head, alt = (("a", author), ("t", title)), (("a", author), ("t", other))
            tags = ("100", "400")
    label, alt_label = _display(head), _display(alt)
    if alt_label == label:  # the loader drops an alternative equal to the label
        alt = (*alt, ("g", "Variante")) if tags[1] != "400" else (*alt, ("c", "Variante"))
        alt_label = _display(alt)
    return Heading(gid, kind, label, alt_label, tags, head, alt, broader, profession)


def iter_generated(n: int, seed: int = SEED) -> Iterator[Heading]:
    """The first ``n`` generated headings (the module docstring says what they are): the
    same for the same seed, and a prefix of a longer run's."""
    real = real_subjects()
    real_ids = [sid for sid, _, _ in real]
    taken = set(real_ids)
    rng = random.Random(seed)
    number, made, last_place = 30_000_000, 0, None
    while made < n:
        number += 1 + rng.randrange(4)
        digits = f"1{number:08d}"
        gid = digits + _check(digits)
        if gid in taken:
            continue
        h = _headings(rng, made, gid, last_place, real_ids)
        if h.type == "g":
            last_place = h.id
        made += 1
        yield h


def generated_headings(n: int = HEADINGS - 204_569, seed: int = SEED) -> list[Heading]:
    """`iter_generated` as a list (for 1.5M headings: the 1,295,431 beyond the real ones)."""
    return list(iter_generated(n, seed))


def gold_headings(k: int, n: int = HEADINGS - 204_569, seed: int = SEED) -> list[Heading]:
    """``k`` of the ``n`` generated headings drawn with ``seed`` (in their order): gold
    subjects a synthetic record can carry so they can be suggested."""
    pool = generated_headings(n, seed)
    picked = sorted(random.Random(seed + 1).sample(range(len(pool)), k))
    return [pool[i] for i in picked]


def real_subjects() -> list[tuple[str, str, str]]:
    """(id, German label, English label or "") of every real GND subject heading."""
    with gzip.open(REAL, "rt", encoding="utf-8") as fh:
        next(fh)
        return [(row[0], row[1], row[2] if len(row) > 2 else "")
                for row in (line.rstrip("\n").split("\t") for line in fh) if row[0]]


# -- the dump ----------------------------------------------------------------------------
_LEADER = "00000nz  a2200000nc 4500"


def _datafield(tag: str, subfields: Subfields, ind1: str = " ", ind2: str = " ") -> str:
    subs = "".join(f'\n      <subfield code="{c}">{escape(v)}</subfield>' for c, v in subfields)
    return f'\n    <datafield tag="{tag}" ind1="{ind1}" ind2="{ind2}">{subs}\n    </datafield>'


def _record(idn: str, gid: str, kind: str, fields: list[str]) -> str:
    head = (f'\n  <record type="Authority">\n    <leader>{_LEADER}</leader>'
            f'\n    <controlfield tag="001">{idn}</controlfield>'
            '\n    <controlfield tag="003">DE-101</controlfield>'
            '\n    <controlfield tag="005">20240213103012.0</controlfield>'
            '\n    <controlfield tag="008">160412n||azznnbabn           | ana    |c</controlfield>')
    ids = (_datafield("024", (("a", gid), ("0", f"http://d-nb.info/gnd/{gid}"), ("2", "gnd")),
                      "7")
           + _datafield("035", (("a", f"(DE-101){idn}"),))
           + _datafield("035", (("a", f"(DE-588){gid}"),))
           + _datafield("040", (("a", "DE-101"), ("c", "DE-101"), ("b", "ger"),
                                ("f", "rswk")))
           + _datafield("075", (("b", kind), ("2", "gndgen")))
           + _datafield("075", (("b", SPECIFIC[kind]), ("2", "gndspec"))))
    return head + ids + "".join(fields) + _datafield("670", (("a", "Vorlage"),)) + \
        "\n  </record>"


def _real_record(sid: str, de: str, en: str) -> str:
    idn = "0" + re.sub(r"\D", "", sid) if "-" in sid else sid
    fields = [_datafield("150", (("a", de),))]
    if en and en != de:
        fields.append(_datafield("450", (("a", en),)))
    return _record(idn, sid, "s", fields)


def _generated_record(h: Heading, labels: dict[str, str]) -> str:
    head_tag, alt_tag = h.tags
    ind1 = {"100": "1", "110": "2"}.get(head_tag, " ")  # surname first; name of a place
    fields = [_datafield(head_tag, h.head, ind1),
              _datafield(alt_tag, h.alt_head)]
    if h.broader:
        fields.append(_datafield("551", (
            ("0", f"(DE-588){h.broader}"), ("0", f"https://d-nb.info/gnd/{h.broader}"),
            ("a", labels[h.broader]), ("4", "obpa"),
            ("4", "https://d-nb.info/standards/elementset/gnd#broaderTermPartitive"),
            ("w", "r"), ("i", "Oberbegriff partitiv"))))
    if h.profession:
        fields.append(_datafield("550", (
            ("0", f"(DE-588){h.profession}"), ("0", f"https://d-nb.info/gnd/{h.profession}"),
            ("a", labels.get(h.profession, "")), ("4", "beru"), ("w", "r"),
            ("i", "Beruf"))))
    return _record(h.id, h.id, h.type, fields)


def write_dump(path: Path, headings: int = HEADINGS, seed: int = SEED) -> dict[str, int]:
    """The sample (module docstring) as one gzipped MARC-XML collection; its counts."""
    real = real_subjects()[:headings]
    labels = {sid: de for sid, de, _ in real}
    counts = {"s": len(real)}
    tmp = path.with_name(path.name + ".partial")
    with gzip.open(tmp, "wb", compresslevel=6) as raw, \
            io.TextIOWrapper(raw, encoding="utf-8") as fh:
        fh.write('<?xml version="1.0" encoding="UTF-8"?>\n'
                 '<collection xmlns="http://www.loc.gov/MARC21/slim">')
        fh.writelines(_real_record(*row) for row in real)
        for h in iter_generated(headings - len(real), seed):
            if h.type == "g":
                labels[h.id] = h.label
            counts[h.type] = counts.get(h.type, 0) + 1
            fh.write(_generated_record(h, labels))
        fh.write("\n</collection>\n")
    tmp.replace(path)
    return counts


# -- measuring ---------------------------------------------------------------------------


def timed_run(cmd: list[str], lock: Path | None) -> dict:
    """``cmd`` under ``nice -n 5 /usr/bin/time -v``: wall s, CPU s, peak RSS GiB, its
    stdout's last JSON line (if any)."""
    with cpu_lock(lock):
        proc = subprocess.run(["nice", "-n", "5", "/usr/bin/time", "-v", *cmd],
                              capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"{cmd} failed:\n{proc.stdout}\n{proc.stderr}")
    stats = dict(line.strip().rsplit(": ", 1) for line in proc.stderr.splitlines()
                 if ": " in line and line.startswith("\t"))
    h, m, s = ([0.0] + [float(x) for x in
                        stats["Elapsed (wall clock) time (h:mm:ss or m:ss)"].split(":")])[-3:]
    out = {"wall": h * 3600 + m * 60 + s,
           "cpu": float(stats["User time (seconds)"]) + float(stats["System time (seconds)"]),
           "rss_gib": int(stats["Maximum resident set size (kbytes)"]) / 2**20}
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    if lines:
        out.update(json.loads(lines[-1]))
    return out


def child_saved(folder: str) -> None:
    """Fresh process: the saved fast form loaded, then the prefix index built and asked."""
    from tagalign.vocab import Vocabulary

    base = peak_rss_gb()
    t0 = time.perf_counter()
    vocab = Vocabulary.load(folder)
    load_s = time.perf_counter() - t0
    rss_vocab = peak_rss_gb()
    t0 = time.perf_counter()
    index = vocab.prefix_index
    build_s = time.perf_counter() - t0
    rng = random.Random(SEED)
    prefixes = [lab[:rng.randrange(2, 6)] for lab in
                (vocab.subjects[rng.randrange(len(vocab))].label() for _ in range(1000))]
    took = []
    for p in prefixes:
        t0 = time.perf_counter()
        index.search(p, 10)
        took.append(time.perf_counter() - t0)
    took.sort()
    print(json.dumps({"subjects": len(vocab), "labels": len(index), "load_s": load_s,
                      "base_gb": base, "vocab_gb": rss_vocab, "prefix_build_s": build_s,
                      "prefix_gb": peak_rss_gb(), "prefix_ms_mean": 1e3 * sum(took) / 1000,
                      "prefix_ms_p95": 1e3 * took[949]}))


def child_lexical_fit(folder: str, out: str) -> None:
    """Fresh process: the ``lexical`` recipe fitted on the saved vocabulary and saved."""
    from tagalign.recipes import get_recipe
    from tagalign.vocab import Vocabulary

    vocab = Vocabulary.load(folder)
    base = peak_rss_gb()
    recipe = get_recipe("lexical")(vocab)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        recipe.fit([], workdir=Path(tmp))
    fit_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    recipe.save(Path(out))
    print(json.dumps({"fit_s": fit_s, "save_s": time.perf_counter() - t0, "vocab_gb": base,
                      "keys": len(recipe.matcher_.table_), "fit_gb": peak_rss_gb()}))


def child_lexical_load(folder: str, model: str) -> None:
    """Fresh process: the saved lexical matcher loaded (the vocabulary first)."""
    from tagalign.recipes import Recipe
    from tagalign.vocab import Vocabulary

    vocab = Vocabulary.load(folder)
    base = peak_rss_gb()
    t0 = time.perf_counter()
    Recipe.load(Path(model), vocab)
    print(json.dumps({"load_s": time.perf_counter() - t0, "vocab_gb": base,
                      "loaded_gb": peak_rss_gb()}))


def child_labels_fit(folder: str, out: str, dim: str, kind: str) -> None:
    """Fresh process: the label index (`LabelRetrieval`, an index of ``kind``) over every
    preferred and alternative label, encoded by a StaticEmbedding of ``dim`` dimensions
    (the hybrid's: 384) and a 40,000-token WordPiece vocabulary learnt from the labels,
    with seeded random weights: no training records, so no trained encoder; sizes and
    times are those of a trained one (an ``ivf`` index's clustering sees other vectors)."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import StaticEmbedding

    from tagalign.encode.static import StaticEmbeddingEncoder
    from tagalign.suggest.sources.base import FitContext
    from tagalign.suggest.sources.labels import LabelRetrieval, LabelRetrievalConfig
    from tagalign.text import Analyzer
    from tagalign.train.static_model import train_tokenizer
    from tagalign.vocab import Vocabulary

    vocab = Vocabulary.load(folder)
    base = peak_rss_gb()
    t0 = time.perf_counter()
    tokenizer = train_tokenizer([lab for s in vocab for lab in s.all_labels()], 40_000)
    torch.manual_seed(SEED)
    encoder = StaticEmbeddingEncoder(SentenceTransformer(
        modules=[StaticEmbedding(tokenizer, embedding_dim=int(dim))], device="cpu"))
    tok_s = time.perf_counter() - t0
    source = LabelRetrieval(LabelRetrievalConfig(index=kind))
    t0 = time.perf_counter()
    source.fit(FitContext(vocab, Analyzer(), encoder=encoder))
    fit_s = time.perf_counter() - t0
    Path(out).mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    source.save(Path(out))
    print(json.dumps({"tokenizer_s": tok_s, "fit_s": fit_s, "save_s": time.perf_counter() - t0,
                      "rows": len(source.index_), "vocab_gb": base, "fit_gb": peak_rss_gb()}))


def child_labels_load(folder: str, index: str, mmap: str) -> None:
    """Fresh process: the saved label index loaded (memory-mapped or not) and asked 1,000
    seeded random queries for its 40 best subjects."""
    import numpy as np

    from tagalign.suggest.sources.base import FitContext
    from tagalign.suggest.sources.labels import LabelRetrieval
    from tagalign.text import Analyzer
    from tagalign.vocab import Vocabulary

    vocab = Vocabulary.load(folder)
    base = peak_rss_gb()
    source = LabelRetrieval()
    t0 = time.perf_counter()
    source.load_state(Path(index), FitContext(vocab, Analyzer(), mmap=mmap == "mmap"))
    load_s = time.perf_counter() - t0
    loaded = peak_rss_gb()
    q = np.random.default_rng(SEED).standard_normal((1000, source.index_.dim), np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    t0 = time.perf_counter()
    for start in range(0, len(q), 100):
        source._search(q[start:start + 100])
    print(json.dumps({"load_s": load_s, "vocab_gb": base, "loaded_gb": loaded,
                      "qps": len(q) / (time.perf_counter() - t0), "after_gb": peak_rss_gb()}))


def size_mib(path: Path) -> float:
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files) / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--headings", type=int, default=HEADINGS)
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--dump", type=Path, help="the dump: written unless it exists "
                    "(default: a temporary file)")
    ap.add_argument("--lock", type=Path, help="a file whose flock each heavy step holds")
    ap.add_argument("--label-dim", type=int, default=384,
                    help="the label index's dimensions (the hybrid's: 384)")
    ap.add_argument("--label-index", default="ivf", help="its kind (the hybrid's: ivf)")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        {"saved": child_saved, "lexical-fit": child_lexical_fit,
         "lexical-load": child_lexical_load, "labels-fit": child_labels_fit,
         "labels-load": child_labels_load}[args.child[0]](*args.child[1:])
        return
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        dump = args.dump or work / f"authorities-gnd_dnbmarc_scale-{args.headings}.mrc.xml.gz"
        if not dump.exists():
            t0 = time.perf_counter()
            with cpu_lock(args.lock):
                counts = write_dump(dump, args.headings, args.seed)
            print(f"wrote {dump} in {time.perf_counter() - t0:.0f} s: {counts}")
        rows = measure(dump, work, args.lock, args.label_dim, args.label_index)
    print_table(rows, dump)


def measure(dump: Path, work: Path, lock: Path | None, label_dim: int = 384,
            label_index: str = "ivf") -> dict[str, dict]:
    me = [sys.executable, "-m", __spec__.name, "--child"]
    rows: dict[str, dict] = {}
    vocab = work / "vocab"
    rows["load"] = timed_run([sys.executable, "-m", "tagalign.cli.main", "vocab", "load",
                              str(dump), "--entity-types", "all", "--out", str(vocab)], lock)
    rows["saved"] = timed_run([*me, "saved", str(vocab)], lock)
    lexical = work / "lexical"
    rows["lexical-fit"] = timed_run([*me, "lexical-fit", str(vocab), str(lexical)], lock)
    rows["lexical-load"] = timed_run([*me, "lexical-load", str(vocab), str(lexical)], lock)
    labels = work / "labels"
    rows["labels-fit"] = timed_run([*me, "labels-fit", str(vocab), str(labels),
                                    str(label_dim), label_index], lock)
    rows["labels-fit"].update(dim=label_dim, kind=label_index)
    for how in ("read", "mmap"):
        rows[f"labels-{how}"] = timed_run([*me, "labels-load", str(vocab), str(labels), how],
                                          lock)
    rows["sizes"] = {"dump": size_mib(dump), "vocab": size_mib(vocab),
                     "lexical": size_mib(lexical), "labels": size_mib(labels)}
    shutil.rmtree(lexical)
    shutil.rmtree(labels)
    return rows


def print_table(rows: dict[str, dict], dump: Path) -> None:
    load, saved, fit, lex = (rows[k] for k in ("load", "saved", "lexical-fit",
                                               "lexical-load"))
    sizes = rows["sizes"]
    n = saved["subjects"]
    print(f"\n{n:,} headings, {saved['labels']:,} labels (preferred + alternative); "
          f"dump {dump.name}: {sizes['dump']:,.0f} MiB gzipped")
    print("| what | on disk | time | CPU s | peak RSS |\n|---|---|---|---|---|")
    print(f"| `vocab load DUMP --entity-types all` (target ≤ 10 min, ≤ 4 GB) | "
          f"{sizes['vocab']:,.0f} MiB saved | {load['wall']:.0f} s | {load['cpu']:.0f} "
          f"({n / load['cpu']:,.0f} headings per CPU s) | {load['rss_gib']:.2f} GiB |")
    print(f"| saved fast form, `Vocabulary.load` | {sizes['vocab']:,.0f} MiB | "
          f"{saved['load_s']:.1f} s | | {saved['vocab_gb']:.2f} GB |")
    print(f"| prefix index (in memory, built on first use) | — | {saved['prefix_build_s']:.1f} s"
          f" build; query mean {saved['prefix_ms_mean']:.3f} ms, p95 "
          f"{saved['prefix_ms_p95']:.3f} ms | | {saved['prefix_gb']:.2f} GB "
          f"(+{saved['prefix_gb'] - saved['vocab_gb']:.2f}) |")
    print(f"| lexical matcher, fit (`lexical` recipe) + save | {sizes['lexical']:,.0f} MiB | "
          f"{fit['fit_s']:.0f} s fit, {fit['save_s']:.0f} s save ({fit['keys']:,} keys) | "
          f"{fit['cpu']:.0f} | {fit['rss_gib']:.2f} GiB (+{fit['fit_gb'] - fit['vocab_gb']:.2f}"
          " GB) |")
    print(f"| lexical matcher, load | {sizes['lexical']:,.0f} MiB | {lex['load_s']:.1f} s | "
          f"{lex['cpu']:.0f} | {lex['rss_gib']:.2f} GiB (+{lex['loaded_gb'] - lex['vocab_gb']:.2f}"
          " GB) |")
    fit, sizes = rows["labels-fit"], rows["sizes"]
    print(f"| label index (`{fit['kind']}`, {fit['dim']} dims, {fit['rows']:,} rows), "
          "fit + save | "
          f"{sizes['labels']:,.0f} MiB | {fit['fit_s']:.0f} s fit (tokenizer "
          f"{fit['tokenizer_s']:.0f} s), {fit['save_s']:.0f} s save | {fit['cpu']:.0f} | "
          f"{fit['rss_gib']:.2f} GiB |")
    for how in ("read", "mmap"):
        row = rows[f"labels-{how}"]
        print(f"| label index, load{' memory-mapped' if how == 'mmap' else ''} | "
              f"{sizes['labels']:,.0f} MiB | {row['load_s']:.1f} s; {row['qps']:,.0f} "
              f"queries/s | {row['cpu']:.0f} | {row['rss_gib']:.2f} GiB "
              f"(+{row['loaded_gb'] - row['vocab_gb']:.2f} GB loaded, "
              f"{row['after_gb']:.2f} GB after 1,000 queries) |")


if __name__ == "__main__":
    main()
