#!/usr/bin/env python3
"""Answers: on pairs no fold model saw, does a bootstrap scorer
(`paraforge rescore --bootstrap`) rank each reference's own translation
first more often than other scorers? Quoted in docs/new-language.md.

For each fold i of a rescored dataset, the references and translations of
the pairs in fold i (xxh3-128 of the id mod k, as paraforge's folds) are
embedded by fold i's model (which never saw them) and by each --other
model; P@1 is the share of references whose nearest translation (cosine)
is their own, by cosine and by the ratio margin of Artetxe and Schwenk
(2019) (the cosine over the mean cosine of each side's 4 nearest
neighbours in the fold). Needs numpy, pyarrow and xxhash (the test venv
has them).

Usage: bootstrap_retrieval.py --paraforge target/debug/paraforge \
    --data out/x-scored [--other NAME=MODEL ...]
"""

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import xxhash


def embed(bin_: str, model: str, lines: list[str], tmp: Path, name: str) -> np.ndarray:
    txt, npy = tmp / f"{name}.txt", tmp / f"{name}.npy"
    txt.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    subprocess.run([bin_, "embed", "--model", model, "--input", str(txt), "--out", str(npy), "--overwrite"],
                   check=True, capture_output=True)
    e = np.load(npy)
    return e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)


def p_at_1(refs: np.ndarray, trans: np.ndarray) -> float:
    sims = refs @ trans.T
    return float((sims.argmax(axis=1) == np.arange(len(refs))).mean())


def margin_p_at_1(refs: np.ndarray, trans: np.ndarray, k: int = 4) -> float:
    """P@1 under the ratio margin of Artetxe and Schwenk (2019): cos(x, y)
    over the mean of x's k nearest translations and y's k nearest
    references (each side's neighbours among the fold's other sentences)."""
    sims = refs @ trans.T
    knn_r = np.sort(sims, axis=1)[:, -k:].mean(axis=1)
    knn_t = np.sort(sims, axis=0)[-k:, :].mean(axis=0)
    margin = sims / ((knn_r[:, None] + knn_t[None, :]) / 2)
    return float((margin.argmax(axis=1) == np.arange(len(refs))).mean())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--paraforge", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--other", action="append", default=[], help="NAME=MODEL")
    a = ap.parse_args()
    data = Path(a.data)
    manifest = json.loads((data / "_manifest.json").read_text())
    folds = manifest["folds"]
    k = len(folds)
    ids, refs, trans = [], [], []
    for f in manifest["files"]:
        t = pq.read_table(data / f["path"], columns=["id", "reference", "translation"])
        ids += t["id"].to_pylist()
        refs += t["reference"].to_pylist()
        trans += t["translation"].to_pylist()
    fold_of = [xxhash.xxh3_128_intdigest(i.encode()) % k for i in ids]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for i, f in enumerate(folds):
            rows = [j for j, fo in enumerate(fold_of) if fo == i]
            r = [refs[j] for j in rows]
            t = [trans[j] for j in rows]
            models = [("bootstrap (fold model)", str(data / f["model"]))]
            models += [tuple(o.split("=", 1)) for o in a.other]
            figures = []
            for name, m in models:
                safe = "".join(c if c.isalnum() else "_" for c in name)
                er = embed(a.paraforge, m, r, tmp, f"r{i}{safe}")
                et = embed(a.paraforge, m, t, tmp, f"t{i}{safe}")
                figures.append(f"{name} {p_at_1(er, et):.3f} (margin {margin_p_at_1(er, et):.3f})")
            print(f"fold {i} of {k}: {len(rows)} held-out pairs; P@1 " + ", ".join(figures))


if __name__ == "__main__":
    main()
