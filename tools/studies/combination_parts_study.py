#!/usr/bin/env python3
"""How a concatenated combination's parts add up (docs/replication.md,
"Every encoder"): one trained combination (e.g. WORD,TRIGRAM,LSTM; with
equal unit parts the model's cosine is the mean of its parts' cosines, with
parts weighted by dimension their mean weighted by d_i / D)
scored on SemEval 2012-2016 and STS Benchmark test from its own embeddings
(`paraforge embed`), as eval-sts scores them (Pearson x 100 per dataset, a
year the mean of its datasets), by:

  the model's cosine            what eval-sts scores;
  each part's cosine alone      the jointly trained part on its own;
  weighted means of the parts'  w_i cos_i / sum w_i, e.g. weights
  cosines                       proportional to the parts' dimensions.

The datasets are read here as trainer/src/sts.rs reads them; the model's
own figures are checked against `paraforge eval-sts` on the same data, and
the study fails if any year or STSB differs by more than 0.05.

usage: combination_parts_study.py PARAFORGE MODEL STS_DIR NAME:DIM[,NAME:DIM...] OUT.json
  STS_DIR holds semeval/STS20xx-test/ and stsbenchmark/ (as data/sts does).
Needs numpy.
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from gaussian_similarity_study import embed, pearson


def sets(sts):
    """(group, name, [(s1, s2, gold)]) as trainer/src/sts.rs reads them."""
    out = []
    for d in sorted((sts / "semeval").iterdir()):
        if not d.is_dir():
            continue
        group = d.name.split("-")[0]
        for gs in sorted(d.glob("*.gs.*.txt")):
            inp = gs.with_name(gs.name.replace(".gs.", ".input."))
            lines = inp.read_text(encoding="utf-8").splitlines()
            gold = gs.read_text(encoding="utf-8").splitlines()
            assert len(lines) == len(gold), gs
            pairs = [(l.split("\t")[0], l.split("\t")[1], float(g)) for l, g in zip(lines, gold) if g.strip()]
            out.append((group, gs.name, pairs))
    rows = (sts / "stsbenchmark/sts-test.csv").read_text(encoding="utf-8").splitlines()
    pairs = [(c[5], c[6], float(c[4])) for c in (r.split("\t") for r in rows)]
    out.append(("STSB", "sts-test", pairs))
    return out


def main():
    paraforge, model, sts, parts, out = sys.argv[1:6]
    parts = [(p.split(":")[0], int(p.split(":")[1])) for p in parts.split(",")]
    data = sets(Path(sts))
    sentences = sorted({s for _, _, pairs in data for a, b, _ in pairs for s in (a, b)})
    with tempfile.TemporaryDirectory() as tmp:
        emb = embed(paraforge, model, sentences, Path(tmp) / "s.npy")
        subprocess.run([paraforge, "eval-sts", "--model", model, "--sts", sts, "--json",
                        str(Path(tmp) / "sts.json")], check=True, capture_output=True)
        official = {g["group"]: g["pearson"]
                    for g in json.loads((Path(tmp) / "sts.json").read_text())[0]["groups"]}
    assert emb.shape == (len(sentences), sum(d for _, d in parts)), (emb.shape, parts)
    row = {s: i for i, s in enumerate(sentences)}
    bounds, at = [], 0
    for name, d in parts:
        bounds.append((name, at, at + d))
        at += d

    def cos(x, y):
        nx, ny = np.linalg.norm(x, axis=1), np.linalg.norm(y, axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            c = (x * y).sum(1) / (nx * ny)
        return np.nan_to_num(c)

    # Per dataset: the model's cosine and every part's.
    per = []
    for group, name, pairs in data:
        a = emb[[row[p[0]] for p in pairs]]
        b = emb[[row[p[1]] for p in pairs]]
        c = {"model": cos(a, b)}
        for pname, lo, hi in bounds:
            c[pname] = cos(a[:, lo:hi], b[:, lo:hi])
        per.append((group, [p[2] for p in pairs], c))

    def score(weights):
        """SemEval mean of year means and STSB, Pearson x 100."""
        years = {}
        for group, gold, c in per:
            if weights == "model":
                s = c["model"]
            else:
                s = sum(w * c[p] for p, w in weights.items()) / sum(weights.values())
            years.setdefault(group, []).append(100 * pearson(s, gold))
        means = {g: float(np.mean(v)) for g, v in years.items()}
        semeval = float(np.mean([v for g, v in means.items() if g != "STSB"]))
        return {"semeval": round(semeval, 2), "stsb": round(means["STSB"], 2),
                "years": {g: round(v, 2) for g, v in sorted(means.items())}}

    total = sum(d for _, d in parts)
    results = {"model's cosine": score("model")}
    for group, mine in results["model's cosine"]["years"].items():
        if abs(mine - official[group]) > 0.05:
            sys.exit(f"{group}: {mine:.2f} here, {official[group]:.2f} by eval-sts: the study "
                     "no longer reads the data as eval-sts does")
    for pname, _, _ in bounds:
        results[f"{pname} alone"] = score({pname: 1.0})
    results["equal weights"] = score({p: 1.0 for p, _ in parts})
    results["weights by dimension"] = score({p: d / total for p, d in parts})
    names = [p for p, _ in parts]
    for i, p in enumerate(names):
        for q in names[i + 1:]:
            results[f"{p} + {q}, equal"] = score({p: 1.0, q: 1.0})
    strongest = max(names, key=lambda p: results[f"{p} alone"]["semeval"])
    rest = [p for p in names if p != strongest]
    for w in (0.5, 0.6, 0.7, 0.8, 0.9):
        results[f"{strongest} at {w}, the rest equal"] = score(
            {strongest: w, **{p: (1 - w) / len(rest) for p in rest}})
    report = {"model": model, "parts": parts, "sentences": len(sentences), "results": results}
    Path(out).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    for k, v in results.items():
        print(f"{k:40s} SemEval {v['semeval']:6.2f}  STSB {v['stsb']:6.2f}")


if __name__ == "__main__":
    main()
