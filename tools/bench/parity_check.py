#!/usr/bin/env python3
"""`paraforge translate` against a reference recorded by tools/models/reference_outputs.py.

Translates the reference's sources with the reference's settings (beam,
max_new_tokens, batch size) and counts the sentences whose text equals
transformers' and, for those, the largest score difference. The Rust parity
tests (tests/engine.rs, PARAFORGE_TEST_MODEL / PARAFORGE_TEST_REFERENCE)
compare token ids; this is the same check from the command line, for any
model directory and binary.

usage: parity_check.py --paraforge BIN --model DIR --reference DIR [--beam 12]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--paraforge", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--reference", required=True, help="a directory written by reference_outputs.py")
    ap.add_argument("--beam", type=int, default=12)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--show", type=int, default=5, help="differing sentences to print")
    args = ap.parse_args()

    ref = Path(args.reference)
    settings = json.loads((ref / "settings.json").read_text())
    cases = [json.loads(l) for l in open(ref / f"generate-beam{args.beam}.jsonl", encoding="utf-8")]
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "in.txt"
        out = Path(tmp) / "out.txt"
        src.write_text("".join(c["source"] + "\n" for c in cases), encoding="utf-8")
        subprocess.run(
            [args.paraforge, "translate", "--model", args.model, "--beam", str(args.beam),
             "--max-new-tokens", str(settings["max_new_tokens"]), "--batch-size", str(settings["batch_size"]),
             "--threads", str(args.threads), "--scores", str(src), "-o", str(out)],
            check=True,
        )
        rows = [l.split("\t", 1) for l in out.read_text(encoding="utf-8").splitlines()]
    if len(rows) != len(cases):
        sys.exit(f"parity_check: {len(rows)} translations for {len(cases)} sources")
    same, worst, shown = 0, 0.0, []
    for c, (score, text) in zip(cases, rows):
        if text == c["text"]:
            same += 1
            worst = max(worst, abs(float(score) - c["score"]))
        elif len(shown) < args.show:
            shown.append(f"  {c['source']!r}\n    paraforge    {text!r} {score}\n    transformers {c['text']!r} {c['score']}")
    print(f"beam {args.beam}: {same}/{len(cases)} translations identical to transformers', "
          f"largest score difference among them {worst:.2e}")
    if shown:
        print("\n".join(shown))


if __name__ == "__main__":
    main()
