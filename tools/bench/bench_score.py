#!/usr/bin/env python3
"""Scoring benchmark: paraforge's scorer against a plain Python
implementation of the same definitions (tools/bench/score_reference.py), on the
same real pairs in the same run; also checks that both give the same scores
(with GloVe averaging, the para_score the Python peer implements), then
measures the default scorer (models/scorer-trigram, a trained TRIGRAM
model) on the same pairs.

Pairs: the English references of the bundled sample
(data/sample/czeng16-heldout.cs-en.tsv) with back-translations of their Czech
side by the bundled model (greedy), so lengths and vocabulary are real.

usage: tools/bench/bench_score.py --paraforge target/release/paraforge --bench target/release/examples/bench_score
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "bench"))
import score_reference as ref  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--paraforge", required=True)
    ap.add_argument("--bench", required=True)
    ap.add_argument("--vectors", default=str(ROOT / "data/vectors/glove.6B.50d.top25k.txt.gz"))
    ap.add_argument("--scorer", default=str(ROOT / "models/scorer-trigram"))
    ap.add_argument("--python-pairs", type=int, default=20000)
    ap.add_argument("--transformer", help="also time an exported transformer encoder (e.g. "
                    ".cache/all-minilm-l6-v2 from tools/models/export_sentence_encoder.py) on every pair once")
    args = ap.parse_args()
    out = ROOT / "bench-out"
    out.mkdir(exist_ok=True)
    sample = (ROOT / "data/sample/czeng16-heldout.cs-en.tsv").read_text(encoding="utf-8").splitlines()
    cols = [l.split("\t") for l in sample]
    pairs_file = out / "score-pairs.tsv"
    if not pairs_file.exists():
        (out / "score-cs.txt").write_text("\n".join(c[2] for c in cols) + "\n", encoding="utf-8")
        subprocess.run([args.paraforge, "translate", "--model", str(ROOT / "models/tiny-cs-en"), "--beam", "1",
                        "--max-new-tokens", "64", str(out / "score-cs.txt"), "-o", str(out / "score-en.txt")], check=True)
        trans = (out / "score-en.txt").read_text(encoding="utf-8").splitlines()
        pairs_file.write_text("".join(f"{c[3]}\t{t}\n" for c, t in zip(cols, trans)), encoding="utf-8")
    pairs = [l.split("\t", 1) for l in pairs_file.read_text(encoding="utf-8").splitlines()]

    dump = out / "score-rust.jsonl"
    subprocess.run([args.bench, str(pairs_file), args.vectors, "1"], check=True, capture_output=True,
                   env={**os.environ, "BENCH_DUMP": str(dump)})

    def bench(scorer: str, min_pairs: int = 2_000_000) -> dict:
        r = subprocess.run([args.bench, str(pairs_file), scorer, str(min_pairs)], check=True, capture_output=True,
                           text=True)
        return json.loads(r.stdout.strip().splitlines()[-1])

    # GloVe and the default scorer alternate, three runs each, median kept:
    # this shared machine's speed drifts by tens of percent within minutes.
    runs = {"glove": [], "default": []}
    for _ in range(3):
        runs["glove"].append(bench(args.vectors))
        runs["default"].append(bench(args.scorer))
    median = lambda rs: sorted(rs, key=lambda x: x["pairs_per_second_without_bleu"])[len(rs) // 2]
    rust, default = median(runs["glove"]), median(runs["default"])
    # A transformer runs a network per sentence: the pairs once (each timed
    # pass scores them all), right after the default scorer's runs.
    transformer = bench(args.transformer, len(pairs)) if args.transformer else None

    t = time.perf_counter()
    vecs = ref.load_vectors(args.vectors)
    py_load = time.perf_counter() - t
    n = args.python_pairs
    t = time.perf_counter()
    done = 0
    while done < n:
        for a, b in pairs:
            ref.score(a, b, vecs)
            done += 1
            if done >= n:
                break
    py = n / (time.perf_counter() - t)

    # Agreement on every pair.
    rust_rows = [json.loads(l) for l in dump.read_text().splitlines()]
    worst, mismatched = 0.0, 0
    for (a, b), rr in zip(pairs, rust_rows):
        pr = ref.score(a, b, vecs)
        for k in ("unigram_overlap", "bigram_overlap", "trigram_overlap", "reference_len", "translation_len"):
            if abs(pr[k] - rr[k]) > 1e-6:
                mismatched += 1
                break
        if (pr["para_score"] is None) != (rr["para_score"] is None):
            mismatched += 1
        elif pr["para_score"] is not None:
            worst = max(worst, abs(pr["para_score"] - rr["para_score"]))

    res = {"rust": rust, "default_scorer": default,
           "default_vs_glove": default["pairs_per_second_without_bleu"] / rust["pairs_per_second_without_bleu"],
           "runs_pairs_per_second": {k: [x["pairs_per_second"] for x in v] for k, v in runs.items()},
           "runs_pairs_per_second_without_bleu": {k: [x["pairs_per_second_without_bleu"] for x in v]
                                                  for k, v in runs.items()},
           "runs_pairs_per_second_bleu_only": {k: [x["pairs_per_second_bleu_only"] for x in v]
                                               for k, v in runs.items()}, "python_pairs_per_second": py, "python_vectors_load_seconds": py_load,
           "ratio": rust["pairs_per_second_without_bleu"] / py, "pairs_compared": len(rust_rows),
           "pairs_disagreeing": mismatched, "worst_para_score_difference": worst}
    if transformer:
        res["transformer"] = transformer
        res["transformer_vs_default"] = (transformer["pairs_per_second_without_bleu"]
                                         / default["pairs_per_second_without_bleu"])
    (out / "score.json").write_text(json.dumps(res, indent=1))
    print(f"{len(pairs)} real pairs (reference, back-translation)")
    # Every column, and every column but sentence BLEU (what the Python peer
    # computes, and what the scorer's speed target was set on).
    for name, r in (("default scorer", default), ("GloVe", rust)):
        print(f"paraforge, {name} ({r['scorer']}), {r['threads']} threads, {r['pairs']:,} pairs: "
              f"{r['pairs_per_second']:,.0f} pairs/s with sentence BLEU, "
              f"{r['pairs_per_second_without_bleu']:,.0f} without")
    # What the BLEU column costs beside every other score (microseconds per
    # pair per thread).
    us = lambda pps, r: 1e6 * r["threads"] / pps
    print(f"sentence BLEU alone {default['pairs_per_second_bleu_only']:,.0f} pairs/s: "
          f"{us(default['pairs_per_second_bleu_only'], default):.2f} us per pair per thread against "
          f"{us(default['pairs_per_second_without_bleu'], default):.2f} for every other score "
          f"with the default scorer")
    if transformer:
        r = transformer
        print(f"paraforge, transformer ({r['scorer']}), {r['threads']} threads, {r['pairs']:,} pairs: "
              f"{r['pairs_per_second']:,.0f} pairs/s with sentence BLEU, "
              f"{r['pairs_per_second_without_bleu']:,.0f} without "
              f"({1e3 / r['pairs_per_second_without_bleu']:.2f} ms per pair; "
              f"{res['transformer_vs_default']:.4f} of the default scorer)")
    print(f"default scorer / GloVe without BLEU, same run: {res['default_vs_glove']:.2f} "
          f"(medians of 3 alternating runs: {res['runs_pairs_per_second_without_bleu']})")
    print(f"python:    {py:,.0f} pairs/s (1 thread, {n:,} pairs)")
    print(f"ratio:     {res['ratio']:.0f}x (GloVe without BLEU / python, the same scores)")
    print(f"agreement: {len(rust_rows) - mismatched}/{len(rust_rows)} pairs identical, "
          f"worst para_score difference {worst:.2e}")
    print(f"load: GloVe paraforge {rust['load_seconds']:.2f} s, python {py_load:.2f} s; "
          f"default scorer {default['load_seconds']:.2f} s")


if __name__ == "__main__":
    main()
