#!/usr/bin/env python3
"""Records what transformers does with a MarianMT model, for paraforge's parity tests.

Writes to --out:
  tokenizer.jsonl        per sentence: MarianTokenizer source ids of the Czech
                         side, target ids of the English side, and the decoded
                         text of those ids (skip_special_tokens=True)
  generate-beamN.jsonl   per sentence: MarianMTModel.generate(num_beams=N)
                         generated ids (after the decoder start, eos included)
                         and the score (sequences_scores; for N=1 the same
                         length-normalised sum of masked log-probabilities)
  settings.json          the generation settings used

Tooling only (torch, transformers); `make fixtures` runs it.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

EDGE_CASES = [
    "",
    " ",
    "   Dvojité   mezery  a\ttabulátor  ",
    "ﬁnále ½ Ⅻ ＡＢＣ",  # NFKC-normalised by the spm charsmap
    "Emoji 😀 a čínština 汉字 nejsou ve slovníku.",
    "Zvláštní tokeny </s> uprostřed <unk> a <pad>.",
    ">>eng<< jazykový kód na začátku",
    "Čísla 3,14 a 1 000 000 a data 21. 11. 2026.",
    "„Uvozovky“ – pomlčky — a … tři tečky",
    "ÁČĎÉĚÍŇÓŘŠŤÚŮÝŽ áčďéěíňóřšťúůýž",
    "a" * 300,
]


def generated_ids(ids: list, eos: int, pad: int) -> list:
    """A generated sequence as the engine returns it: up to and including
    eos, or without the padding of a batch's shorter rows."""
    if eos in ids:
        return ids[: ids.index(eos) + 1]
    while ids and ids[-1] == pad:
        ids.pop()
    return ids


def read_pairs(paths, limit_per_file):
    rows = []
    for p in paths:
        n = 0
        with open(p, encoding="utf-8") as f:
            for i, line in enumerate(f):
                cols = line.rstrip("\n").split("\t")
                if len(cols) != 4 or i % 13:
                    continue
                rows.append((cols[0], cols[2], cols[3]))
                n += 1
                if n >= limit_per_file:
                    break
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hf", required=True, help="the Hugging Face model directory")
    ap.add_argument("--sentences", required=True, help="Czech sentences, one per line")
    ap.add_argument("--bitext", nargs="+", required=True, help="CzEng-layout TSV files for tokenizer cases")
    ap.add_argument("--out", required=True)
    ap.add_argument("--beams", default="1,4,12")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--controls-only", action="store_true",
                    help="write only generate-controls.jsonl: the sentences under each of CONTROLS "
                         "(no_repeat_ngram_size, repetition_penalty, length_penalty)")
    ap.add_argument("--positions-from", metavar="ONNX_DIR",
                    help="use the position tables stored in these ONNX graphs instead of the exact sinusoids "
                         "(a model rebuilt by `marian_model.py from-onnx` from int8 graphs, whose tables are "
                         "int8-rounded; transformers otherwise always recomputes them)")
    args = ap.parse_args()

    import torch
    from transformers import MarianMTModel, MarianTokenizer

    torch.set_num_threads(2)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tok = MarianTokenizer.from_pretrained(args.hf)
    model = MarianMTModel.from_pretrained(args.hf).eval()
    if args.positions_from:
        import sys

        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from marian_model import onnx_graph_files, onnx_weights

        sd = model.state_dict()
        for f in onnx_graph_files(Path(args.positions_from)):
            for k, v in onnx_weights(f).items():
                if k.endswith("embed_positions.weight"):
                    with torch.no_grad():
                        sd[k].copy_(torch.tensor(v))
        print(f"position tables from {args.positions_from}")

    if args.controls_only:
        controls(tok, model, args, out)
        return

    # Tokenizer: real pairs plus edge cases.
    pairs = read_pairs(args.bitext, 500)
    pairs += [(f"edge-{i}", s, s) for i, s in enumerate(EDGE_CASES)]
    with open(out / "tokenizer.jsonl", "w", encoding="utf-8") as f:
        for pid, cs, en in pairs:
            src = tok(cs)["input_ids"]
            tgt = tok(text_target=en)["input_ids"]
            dec = tok.decode(tgt, skip_special_tokens=True)
            f.write(json.dumps({"id": pid, "cs": cs, "en": en, "source_ids": src, "target_ids": tgt, "decoded": dec}, ensure_ascii=False) + "\n")
    print(f"tokenizer: {len(pairs)} cases")

    sentences = [l.rstrip("\n") for l in open(args.sentences, encoding="utf-8")]
    settings = {"max_new_tokens": args.max_new_tokens, "batch_size": args.batch_size, "beams": args.beams}
    (out / "settings.json").write_text(json.dumps(settings, indent=1))
    cfg = model.generation_config
    max_length = args.max_new_tokens + 1
    eos = cfg.eos_token_id
    pad = cfg.pad_token_id
    for nb in [int(b) for b in args.beams.split(",")]:
        rows = []
        for i in range(0, len(sentences), args.batch_size):
            batch = sentences[i : i + args.batch_size]
            enc = tok(batch, return_tensors="pt", padding=True, truncation=True)
            with torch.no_grad():
                g = model.generate(
                    **enc,
                    num_beams=nb,
                    do_sample=False,
                    max_new_tokens=args.max_new_tokens,
                    return_dict_in_generate=True,
                    output_scores=nb > 1,
                    output_logits=nb == 1,
                )
            seqs = g.sequences[:, 1:]
            if nb > 1:
                scores = g.sequences_scores.tolist()
            else:
                # Greedy has no sequences_scores: sum the log-softmax of the
                # chosen tokens (0 for a forced eos, as beam search scores it)
                # over the number of generated tokens.
                logp = torch.stack([torch.log_softmax(l.float(), dim=-1) for l in g.logits], dim=1)
                scores = []
                for r in range(seqs.shape[0]):
                    total, n = 0.0, 0
                    for t in range(seqs.shape[1]):
                        tokid = int(seqs[r, t])
                        cur_len = t + 1
                        forced = cur_len + 1 == max_length and tokid == eos
                        total += 0.0 if forced else float(logp[r, t, tokid])
                        n += 1
                        if tokid == eos:
                            break
                    scores.append(total / max(n, 1))
            for r, s in enumerate(batch):
                ids = generated_ids(seqs[r].tolist(), eos, pad)
                rows.append({"source": s, "tokens": ids, "score": scores[r], "text": tok.decode(ids, skip_special_tokens=True)})
        with open(out / f"generate-beam{nb}.jsonl", "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        print(f"beam {nb}: {len(rows)} sentences")


# The repetition controls of `generate`, each with the beams it runs at.
CONTROLS = [
    {"num_beams": 4, "no_repeat_ngram_size": 3},
    {"num_beams": 4, "repetition_penalty": 1.5},
    {"num_beams": 4, "no_repeat_ngram_size": 2, "repetition_penalty": 1.2, "length_penalty": 0.6},
    {"num_beams": 12, "no_repeat_ngram_size": 3, "repetition_penalty": 1.3},
    {"num_beams": 1, "no_repeat_ngram_size": 3, "repetition_penalty": 1.5},
]


def controls(tok, model, args, out: Path) -> None:
    """generate-controls.jsonl: per (setting, sentence) the generated ids
    (eos included) and, for beam search, sequences_scores."""
    import torch

    sentences = [l.rstrip("\n") for l in open(args.sentences, encoding="utf-8")]
    eos, pad = model.generation_config.eos_token_id, model.generation_config.pad_token_id
    rows = []
    for c in CONTROLS:
        for i in range(0, len(sentences), args.batch_size):
            batch = sentences[i : i + args.batch_size]
            enc = tok(batch, return_tensors="pt", padding=True, truncation=True)
            with torch.no_grad():
                g = model.generate(**enc, do_sample=False, max_new_tokens=args.max_new_tokens,
                                   return_dict_in_generate=True, output_scores=True, **c)
            seqs = g.sequences[:, 1:]
            for r, s in enumerate(batch):
                ids = generated_ids(seqs[r].tolist(), eos, pad)
                score = float(g.sequences_scores[r]) if c["num_beams"] > 1 else None
                rows.append({"settings": c, "source": s, "tokens": ids, "score": score})
    with open(out / "generate-controls.jsonl", "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"controls: {len(rows)} rows, transformers {__import__('transformers').__version__}")


if __name__ == "__main__":
    main()
