#!/usr/bin/env python3
"""Inputs of any size for `make bench-scale`, from the bundled real pairs.

Writes LINES distinct lines in CzEng 1.6 layout (`id TAB score TAB cs TAB
en`) and, with --pairs, the same pairs translated already (`id TAB
reference TAB translation TAB translation_score`, paraforge's `pairs`
format), from the bundled sample and its translations by the demo model.

Copy k of the sample (k >= 1) has every word (whitespace-separated)
replaced by the word k places further in its language's vocabulary (the
sample's words, most frequent first; English sides share one
vocabulary): a copy's sentences have the sample's lengths, which are
CzEng's, and a reference and its translation share the same words as in
the sample, but every line's source, reference and (reference,
translation) pair is new text, as in a real bitext, so dedup keys stay
distinct and files compress like real text (copies that only differed
by a suffix would compress away). Ids are unique (`b<k>-<sample id>`).
Standard library only.
"""

from collections import Counter

import argparse
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sample", required=True, help="CzEng 1.6 sample (id, score, cs, en)")
    ap.add_argument("--translations", help="one `score TAB translation` line per sample line")
    ap.add_argument("--lines", type=int, required=True)
    ap.add_argument("--czeng", help="write the CzEng-layout input here")
    ap.add_argument("--pairs", help="write the already-translated pairs here")
    a = ap.parse_args()
    if a.lines < 1:
        sys.exit("--lines must be at least 1")
    rows = []
    with open(a.sample, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            cols = line.rstrip("\n").split("\t")
            if len(cols) != 4:
                sys.exit(f"{a.sample}:{n}: {len(cols)} columns, expected 4")
            rows.append(cols)
    trans = None
    if a.pairs:
        if not a.translations:
            sys.exit("--pairs needs --translations")
        with open(a.translations, encoding="utf-8") as f:
            trans = [l.rstrip("\n").split("\t", 1) for l in f]
        if len(trans) != len(rows):
            sys.exit(f"{a.translations}: {len(trans)} lines, the sample has {len(rows)}")
    # Each side as word indices into its vocabulary, most frequent first.
    def vocab(texts):
        counts = Counter(w for t in texts for w in t.split())
        words = [w for w, _ in counts.most_common()]
        index = {w: i for i, w in enumerate(words)}
        return words, [[index[w] for w in t.split()] for t in texts]

    cs_words, cs_ix = vocab([r[2] for r in rows])
    en_texts = [r[3] for r in rows] + ([t[1] for t in trans] if trans else [])
    en_words, en_ix = vocab(en_texts)
    ref_ix, tr_ix = en_ix[: len(rows)], en_ix[len(rows) :]

    def side(words, ix, k):
        n = len(words)
        return [" ".join([words[(i + k) % n] for i in s]) for s in ix]

    cz = open(a.czeng, "w", encoding="utf-8") if a.czeng else None
    pr = open(a.pairs, "w", encoding="utf-8") if a.pairs else None
    written, k = 0, 0
    while written < a.lines:
        take = min(len(rows), a.lines - written)
        part = rows[:take]
        # Copy 0 is the sample as it is (its spacing kept).
        en = [r[3] for r in part] if k == 0 else side(en_words, ref_ix[:take], k)
        if cz:
            cs = [r[2] for r in part] if k == 0 else side(cs_words, cs_ix[:take], k)
            cz.write("".join(f"b{k}-{r[0]}\t{r[1]}\t{c}\t{e}\n" for r, c, e in zip(part, cs, en)))
        if pr:
            tr = [t[1] for t in trans[:take]] if k == 0 else side(en_words, tr_ix[:take], k)
            pr.write(
                "".join(
                    f"b{k}-{r[0]}\t{e}\t{t}\t{s[0]}\n"
                    for r, e, t, s in zip(part, en, tr, trans[:take])
                )
            )
        written += take
        k += 1
    for f in (cz, pr):
        if f:
            f.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
