"""Label variants mined from training records: phrases that stand for a subject.

Issue 33: 36 % of English records' gold subjects have no English label, so the lexical
source cannot find them in English texts. Training records show which phrases their
cataloguers answered with which subject: a phrase ``g`` (1 to ``max_n`` consecutive
tokens as `tagalign.text.Analyzer.tokens` makes them: stemmed, stop words out) becomes a
label variant of subject ``s`` when

    support   c(g, s) = records whose text holds g and whose gold subjects hold s >= min_support
    precision c(g, s) / (df(g) + smoothing) >= min_precision

with ``df(g)`` the records whose text holds ``g`` (the smoothing keeps a phrase of three
records from counting as certain). Each subject keeps its ``max_per_subject`` most precise
phrases. The mined keys are the stemmed phrases, as `LabelMatcher` keys its labels.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp


def record_grams(tokens: Sequence[str], max_n: int) -> set[str]:
    """The distinct phrases of 1..``max_n`` consecutive tokens of one text."""
    out = set()
    for i in range(len(tokens)):
        gram = tokens[i]
        out.add(gram)
        for j in range(i + 1, min(i + max_n, len(tokens))):
            gram = gram + " " + tokens[j]
            out.add(gram)
    return out


def mine_label_variants(tokens: Sequence[Sequence[str]], Y: sp.spmatrix, *,
                        max_n: int = 3, min_support: int = 3, min_precision: float = 0.5,
                        smoothing: float = 1.0, max_per_subject: int = 5,
                        subjects: np.ndarray | None = None
                        ) -> dict[str, list[tuple[int, float]]]:
    """Stemmed phrase → [(subject position, smoothed precision)] over the records whose
    tokens are ``tokens`` and whose gold subjects are the rows of ``Y`` (records ×
    subjects); ``subjects``: a boolean mask of the subjects to mine for (None: all)."""
    per_record = [record_grams(t, max_n) for t in tokens]
    df = Counter(g for grams in per_record for g in grams)
    index = {g: i for i, g in enumerate(g for g, n in df.items() if n >= min_support)}
    if not index:
        return {}
    rows, cols = [], []
    for r, grams in enumerate(per_record):
        kept = [index[g] for g in grams if g in index]
        rows.extend([r] * len(kept))
        cols.extend(kept)
    del per_record
    G = sp.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)),
                      shape=(len(tokens), len(index)))
    Ys = sp.csr_matrix(Y, dtype=np.float32)
    if subjects is not None:
        Ys = Ys @ sp.diags(np.asarray(subjects, np.float32))
    C = (G.T @ Ys).tocoo()  # phrase × subject co-occurrence counts
    names = np.array(list(index))
    df_kept = np.asarray(G.sum(axis=0)).ravel()
    prec = C.data.astype(np.float64) / (df_kept[C.row] + smoothing)
    keep = (C.data >= min_support) & (prec >= min_precision)
    g, s, p = C.row[keep], C.col[keep], prec[keep]
    order = np.lexsort((-C.data[keep], -p, s))  # per subject, most precise first
    out: dict[str, list[tuple[int, float]]] = {}
    taken: Counter[int] = Counter()
    for i in order:
        pos = int(s[i])
        if taken[pos] >= max_per_subject:
            continue
        taken[pos] += 1
        out.setdefault(str(names[g[i]]), []).append((pos, float(p[i])))
    return out
