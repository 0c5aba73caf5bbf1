"""BLEU and chrF (sacrebleu) of a paraforge-loadable model on the held-out
sets in data/sample/czeng16-heldout.cs-en.tsv (Multi30K test 2016, Multi30K
test 2018, WMT19 newstest), translated by `paraforge translate` itself, so
the figures are those of the shipped ONNX files.

usage: eval_model.py MODEL_DIR DIRECTION(cs-en|en-cs) [--beam 4] [--out eval.json]
"""

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

import sacrebleu

SETS = [
    ("Multi30K test 2016", "multi30k-test-2016-flickr-"),
    ("Multi30K test 2018", "multi30k-test-2018-flickr-"),
    ("WMT19 newstest", "wmt19-newstest2019encs-"),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("direction", choices=["cs-en", "en-cs"])
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--bitext", default="data/sample/czeng16-heldout.cs-en.tsv")
    ap.add_argument("--bin", default="target/release/paraforge")
    ap.add_argument("--out")
    a = ap.parse_args()
    rows = [l.rstrip("\n").split("\t") for l in open(a.bitext, encoding="utf-8")]
    src_col, ref_col = (2, 3) if a.direction == "cs-en" else (3, 2)
    results = []
    for name, prefix in SETS:
        sel = [r for r in rows if r[0].startswith(prefix)]
        src = [r[src_col] for r in sel]
        refs = [r[ref_col] for r in sel]
        with tempfile.TemporaryDirectory() as d:
            inp, out = Path(d) / "in.txt", Path(d) / "out.txt"
            inp.write_text("\n".join(src) + "\n", encoding="utf-8")
            t = time.time()
            subprocess.run(
                [a.bin, "translate", "--model", a.model, "--beam", str(a.beam), str(inp), "-o", str(out)],
                check=True,
            )
            secs = time.time() - t
            hyp = out.read_text(encoding="utf-8").split("\n")[: len(src)]
        bleu_m, chrf_m = sacrebleu.BLEU(), sacrebleu.CHRF()
        bleu = bleu_m.corpus_score(hyp, [refs])
        chrf = chrf_m.corpus_score(hyp, [refs])
        results.append(
            {
                "set": name,
                "sentences": len(src),
                "bleu": round(bleu.score, 2),
                "chrf": round(chrf.score, 2),
                "bleu_signature": str(bleu_m.get_signature()),
                "chrf_signature": str(chrf_m.get_signature()),
                "seconds": round(secs, 1),
                "examples": [{"source": s, "reference": r, "output": h} for s, r, h in list(zip(src, refs, hyp))[:3]],
            }
        )
        print(f"| {name} | {len(src)} | {bleu.score:.1f} | {chrf.score:.1f} |", flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps({"model": a.model, "direction": a.direction, "beam": a.beam, "results": results}, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
