#!/usr/bin/env python3
"""Answers: does a second bootstrap round, trained only on the pairs the
first round scores highest, retrieve held-out pairs better than the first
round? Quoted in docs/new-language.md.

For each fold i of a bootstrapped dataset (`make demo LANG=cs`'s
out/demo-cs-scored): the pairs outside fold i are scored by fold i's own
round-1 model (it trained on them, so this only ranks them), the top
--keep share is written as a `pairs` job and a TRIGRAM is trained on it
with the bootstrap's settings (5 epochs, seed 1 + i, the last epoch
kept); a replica trained the same way on all the pairs outside fold i is
the baseline. Each is evaluated on fold i (which none saw) by P@1, as
bootstrap_retrieval.py does.

Usage: bootstrap_rounds.py --paraforge target/release/paraforge \
    --translated out/demo-cs --scored out/demo-cs-scored --work /tmp/rounds
"""

import argparse
import json
import subprocess
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import xxhash

from bootstrap_retrieval import embed, p_at_1


def rows(data: Path, cols: list[str]) -> dict:
    m = json.loads((data / "_manifest.json").read_text())
    out = {c: [] for c in cols}
    for f in m["files"]:
        t = pq.read_table(data / f["path"], columns=cols)
        for c in cols:
            out[c] += t[c].to_pylist()
    return out


def run(cmd: list) -> None:
    subprocess.run([str(c) for c in cmd], check=True, capture_output=True)


def train(bin_: str, pairs: list, work: Path, name: str, seed: int) -> Path:
    """A TRIGRAM on `pairs` (id, reference, translation) through a `pairs` job."""
    tsv = work / f"{name}.tsv"
    tsv.write_text("".join(f"{r}\t{t}\t{i}\n" for i, r, t in pairs), encoding="utf-8")
    out = work / f"{name}-data"
    cfg = work / f"{name}.toml"
    cfg.write_text(
        f'[job]\nname = "{name}"\noutput = "{out}"\nshard_pairs = 100000\n'
        f'[input]\npaths = ["{tsv}"]\nformat = "pairs"\nid_column = 2\n'
        f'[coordinator]\nlisten = "127.0.0.1:0"\nmetrics = "127.0.0.1:0"\n'
    )
    run([bin_, "run", "--config", cfg])
    model = work / f"{name}.pfe"
    run([bin_, "train", "--model", "trigram", "--data", out, "--epochs", 5, "--seed", seed,
         "--no-dev", "--out", model])
    return model


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--paraforge", required=True)
    ap.add_argument("--translated", required=True)
    ap.add_argument("--scored", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--keep", type=float, action="append", default=[])
    a = ap.parse_args()
    keeps = a.keep or [0.5, 0.75]
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    scored = Path(a.scored)
    folds = json.loads((scored / "_manifest.json").read_text())["folds"]
    k = len(folds)
    d = rows(Path(a.translated), ["id", "reference", "translation"])
    fold_of = [xxhash.xxh3_128_intdigest(i.encode()) % k for i in d["id"]]
    for i, f in enumerate(folds):
        # Round 1's model i ranks the pairs it trained on.
        r1 = work / f"r1-{i}"
        run([a.paraforge, "rescore", "--data", a.translated, "--model", scored / f["model"], "--out", r1, "--overwrite"])
        s = rows(r1, ["id", "para_score"])
        score = dict(zip(s["id"], s["para_score"]))
        outside = [(d["id"][j], d["reference"][j], d["translation"][j])
                   for j in range(len(fold_of)) if fold_of[j] != i]
        held = [j for j in range(len(fold_of)) if fold_of[j] == i]
        refs = [d["reference"][j] for j in held]
        trans = [d["translation"][j] for j in held]
        models = {"round 1 (all pairs outside the fold)": train(a.paraforge, outside, work, f"all-{i}", 1 + i)}
        ranked = sorted(outside, key=lambda p: -(score[p[0]] if score[p[0]] is not None else -9))
        for keep in keeps:
            top = ranked[: int(len(ranked) * keep)]
            models[f"round 2, top {keep:.0%} by round 1"] = train(a.paraforge, top, work, f"top{int(keep*100)}-{i}", 1 + i)
        figures = []
        for name, m in models.items():
            safe = "".join(c if c.isalnum() else "_" for c in name)
            p = p_at_1(embed(a.paraforge, str(m), refs, work, f"r{i}{safe}"),
                       embed(a.paraforge, str(m), trans, work, f"t{i}{safe}"))
            figures.append(f"{name} {p:.3f}")
        print(f"fold {i} of {k}: {len(held)} held-out pairs, {len(outside)} to train on; P@1 " + ", ".join(figures), flush=True)


if __name__ == "__main__":
    main()
