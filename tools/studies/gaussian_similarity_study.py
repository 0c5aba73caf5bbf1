#!/usr/bin/env python3
"""Why the Gaussian encoders trail WORD on STS Benchmark (docs/encoders.md):
one trained `gaussian` model scored on STS Benchmark test four ways from its
own [mu, var] embeddings (`paraforge embed`), beside a WORD model trained on
the same pairs:

  cos([mu, var])  what eval-sts scores (Chen and Gimpel, 2020, section 6.5);
  cos(mu)         the means alone;
  d               the training similarity, log N(0; mu1 - mu2, var1 + var2);
  -|mu1 - mu2|    the distance of the means, the variances left out.

usage: gaussian_similarity_study.py PARAFORGE GAUSSIAN_MODEL WORD_MODEL STSB_TEST_CSV OUTDIR
Needs numpy.
"""
import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np


def pearson(a, b):
    a, b = np.asarray(a, float), np.asarray(b, float)
    a, b = a - a.mean(), b - b.mean()
    return float((a * b).sum() / np.sqrt((a * a).sum() * (b * b).sum()))


def embed(paraforge, model, sentences, out):
    txt = out.with_suffix(".txt")
    txt.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    subprocess.run([paraforge, "embed", "--model", model, "--input", str(txt), "--out", str(out),
                    "--overwrite"], check=True, capture_output=True)
    return np.load(out)


def main():
    paraforge, gauss, word, test, outdir = sys.argv[1:6]
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    rows = [r for r in csv.reader(open(test, encoding="utf-8"), delimiter="\t", quoting=csv.QUOTE_NONE)
            if len(r) >= 7]
    gold = [float(r[4]) for r in rows]
    s1, s2 = [r[5] for r in rows], [r[6] for r in rows]
    g1, g2 = embed(paraforge, gauss, s1, out / "g1.npy"), embed(paraforge, gauss, s2, out / "g2.npy")
    w1, w2 = embed(paraforge, word, s1, out / "w1.npy"), embed(paraforge, word, s2, out / "w2.npy")
    ok = ~(np.isnan(g1).any(1) | np.isnan(g2).any(1) | np.isnan(w1).any(1) | np.isnan(w2).any(1))
    k = g1.shape[1] // 2

    def cos(a, b):
        return (a * b).sum(1) / np.sqrt((a * a).sum(1) * (b * b).sum(1))

    mu1, var1, mu2, var2 = g1[:, :k], g1[:, k:], g2[:, :k], g2[:, k:]
    v = var1 + var2
    d = -0.5 * (np.log(v) + (mu1 - mu2) ** 2 / v).sum(1)
    gold = np.asarray(gold)[ok]
    res = {
        "pairs": int(ok.sum()),
        # Pearson r on STS Benchmark test.
        "gaussian cos([mu, var])": pearson(cos(g1, g2)[ok], gold),
        "gaussian cos(mu)": pearson(cos(mu1, mu2)[ok], gold),
        "gaussian d (training similarity)": pearson(d[ok], gold),
        "gaussian -|mu1 - mu2|": pearson(-np.sqrt(((mu1 - mu2) ** 2).sum(1))[ok], gold),
        "word cos": pearson(cos(w1, w2)[ok], gold),
        "word -|g1 - g2|": pearson(-np.sqrt(((w1 - w2) ** 2).sum(1))[ok], gold),
        "gaussian var spread (std of var over sentences / mean)": float(
            np.concatenate([var1, var2]).std(0).mean() / np.concatenate([var1, var2]).mean()),
        "gaussian |mu| mean": float(np.sqrt((mu1 ** 2).sum(1)).mean()),
    }
    for key, val in res.items():
        print(f"{key}: {val:.4f}" if isinstance(val, float) else f"{key}: {val}")
    (out / "study.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
