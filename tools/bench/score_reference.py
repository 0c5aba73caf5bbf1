#!/usr/bin/env python3
"""The pair scores of docs/DEFINITIONS.md section 3 in plain Python: the peer of
paraforge's scorer in `make bench-score`, and a second reading of the
definitions (tools/bench/bench_score.py checks that both agree).

Tokens: lowercase, then maximal runs of letters/digits/combining marks, every
other non-space character alone. Overlap: S the shorter n-gram list, L the
other; |{i : S[i] in L}| / |S|, 0 when S is empty. para_score: cosine of the
averaged vectors of known tokens; None when a side has none.
"""
from __future__ import annotations

import gzip
import math
import unicodedata


def is_word_char(c: str) -> bool:
    return c.isalnum() or unicodedata.category(c).startswith("M")


def tokenize(text: str) -> list[str]:
    out, cur = [], []
    for c in text.lower():
        if is_word_char(c):
            cur.append(c)
            continue
        if cur:
            out.append("".join(cur))
            cur = []
        if not c.isspace():
            out.append(c)
    if cur:
        out.append("".join(cur))
    return out


def ngrams(toks: list[str], n: int) -> list[tuple[str, ...]]:
    return [tuple(toks[i : i + n]) for i in range(len(toks) - n + 1)]


def overlap(a: list[str], b: list[str], n: int) -> float:
    ga, gb = ngrams(a, n), ngrams(b, n)
    s, l = (ga, gb) if len(ga) <= len(gb) else (gb, ga)
    if not s:
        return 0.0
    ls = set(l)
    return sum(1 for g in s if g in ls) / len(s)


def load_vectors(path: str) -> dict[str, list[float]]:
    opener = gzip.open if path.endswith(".gz") else open
    vecs: dict[str, list[float]] = {}
    with opener(path, "rt", encoding="utf-8") as f:
        for line in f:
            parts = line.rstrip("\n").split(" ")
            if len(parts) > 2 and parts[0] not in vecs:
                vecs[parts[0]] = [float(x) for x in parts[1:]]
    return vecs


def para_score(a: list[str], b: list[str], vecs) -> float | None:
    def total(toks):
        acc, k = None, 0
        for t in toks:
            v = vecs.get(t)
            if v is None:
                continue
            acc = list(v) if acc is None else [x + y for x, y in zip(acc, v)]
            k += 1
        return acc
    sa, sb = total(a), total(b)
    if sa is None or sb is None:
        return None
    dot = sum(x * y for x, y in zip(sa, sb))
    na = math.sqrt(sum(x * x for x in sa))
    nb = math.sqrt(sum(x * x for x in sb))
    if na == 0 or nb == 0:
        return 0.0
    return max(-1.0, min(1.0, dot / (na * nb)))


def score(reference: str, translation: str, vecs) -> dict:
    r, t = tokenize(reference), tokenize(translation)
    return {
        "para_score": para_score(r, t, vecs),
        "unigram_overlap": overlap(r, t, 1),
        "bigram_overlap": overlap(r, t, 2),
        "trigram_overlap": overlap(r, t, 3),
        "reference_len": len(r),
        "translation_len": len(t),
    }
