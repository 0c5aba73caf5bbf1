#!/usr/bin/env python3
"""Answers: does the bundled paraphraser keep meaning on news text it never
saw, and what do the decoding controls (no_repeat_ngram_size,
repetition_penalty) change? Quoted in docs/training.md ("Paraphrasing")
and the paraphraser's card.

The English side of WMT19 newstest (held out from every bundled model's
training: tools/models/marian_model.py HELD_OUT_PREFIXES), sentences of at
most 30 words, the first --limit; each setting paraphrases them with
`paraforge paraphrase` and is scored against its input with
`paraforge_corpus.score_pairs` (para_score under --scorer, trigram
overlap), plus the share of outputs with a word trigram repeated.

Usage: paraphrase_news.py --paraforge target/release/paraforge \
    --bitext ../shared/data/bitext/wmt-newstest.cs-en.tsv [--limit 300]
(run with a Python that has paraforge_corpus, e.g. .cache/pytest-env).
"""

import argparse
import json
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

import paraforge_corpus as pf

SETTINGS = {
    "plain": [],
    "no_repeat_ngram_size 3": ["--no-repeat-ngram-size", "3"],
    "repetition_penalty 1.2": ["--repetition-penalty", "1.2"],
    "no_repeat 3 + repetition 1.2": ["--no-repeat-ngram-size", "3", "--repetition-penalty", "1.2"],
}


def repeats(text: str, times: int) -> bool:
    w = text.lower().split()
    return any(c >= times for c in Counter(zip(w, w[1:], w[2:])).values())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--paraforge", required=True)
    ap.add_argument("--bitext", required=True)
    ap.add_argument("--model", default="models/paraphrase-en")
    ap.add_argument("--scorer", default="models/scorer-trigram")
    ap.add_argument("--limit", type=int, default=300)
    ap.add_argument("--beam", type=int, default=12)
    ap.add_argument("--json")
    a = ap.parse_args()
    inputs = []
    for line in open(a.bitext, encoding="utf-8"):
        cols = line.rstrip("\n").split("\t")
        if len(cols) == 4 and cols[0].startswith("wmt19-newstest2019encs-") and len(cols[3].split()) <= 30:
            inputs.append(" ".join(cols[3].split()))
        if len(inputs) == a.limit:
            break
    out = {"inputs": len(inputs), "beam": a.beam, "settings": {}}
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "in.txt"
        src.write_text("".join(s + "\n" for s in inputs), encoding="utf-8")
        for name, flags in SETTINGS.items():
            r = subprocess.run([a.paraforge, "paraphrase", "--model", a.model, "--beam", str(a.beam),
                                *flags, str(src)], check=True, capture_output=True, text=True)
            outputs = r.stdout.splitlines()
            assert len(outputs) == len(inputs), (name, len(outputs))
            s = pf.score_pairs(inputs, outputs, model=a.scorer)
            para = [float(p) for p in s["para_score"] if p is not None]
            tri = [float(t) for t in s["trigram_overlap"] if t is not None]
            row = {
                "repeated_trigram": sum(repeats(o, 2) for o in outputs) / len(outputs),
                "trigram_three_times": sum(repeats(o, 3) for o in outputs) / len(outputs),
                "inputs_with_repeated_trigram": sum(repeats(i, 2) for i in inputs) / len(inputs),
                "mean_para_score": sum(para) / len(para),
                "mean_trigram_overlap": sum(tri) / len(tri),
                "identical": sum(o == i for o, i in zip(outputs, inputs)) / len(inputs),
                "examples": [[i, o] for i, o in zip(inputs[:5], outputs[:5])],
            }
            out["settings"][name] = row
            print(f"{name:32} repeated trigram {row['repeated_trigram']:.1%} (3x {row['trigram_three_times']:.1%}), "
                  f"para_score {row['mean_para_score']:.3f}, trigram overlap {row['mean_trigram_overlap']:.3f}, "
                  f"identical {row['identical']:.1%}", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
