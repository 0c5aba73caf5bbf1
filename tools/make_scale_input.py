#!/usr/bin/env python3
"""Inputs of any size for `make bench-scale`, from the bundled real pairs.

Writes LINES distinct lines in CzEng 1.6 layout (`id TAB score TAB cs TAB
en`) and, with --pairs, the same pairs translated already (`id TAB
reference TAB translation TAB translation_score`, paraforge's `pairs`
format), from the bundled sample and its translations by the demo model.

Copy k of the sample (k >= 1) carries " k" at the end of every side, so
each line's source, reference and (reference, translation) pair stays
distinct, as in a real bitext, and the line lengths stay the sample's,
which is CzEng's. Ids are unique (`b<k>-<sample id>`). Standard library
only; about a million lines a second.
"""

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
    outs = []
    cz = open(a.czeng, "w", encoding="utf-8") if a.czeng else None
    pr = open(a.pairs, "w", encoding="utf-8") if a.pairs else None
    written, k = 0, 0
    while written < a.lines:
        take = min(len(rows), a.lines - written)
        sfx = "" if k == 0 else f" {k}"
        if cz:
            cz.write(
                "".join(
                    f"b{k}-{r[0]}\t{r[1]}\t{r[2]}{sfx}\t{r[3]}{sfx}\n" for r in rows[:take]
                )
            )
        if pr:
            pr.write(
                "".join(
                    f"b{k}-{r[0]}\t{r[3]}{sfx}\t{t[1]}{sfx}\t{t[0]}\n"
                    for r, t in zip(rows[:take], trans[:take])
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
