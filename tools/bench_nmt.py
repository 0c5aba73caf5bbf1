#!/usr/bin/env python3
"""Engine benchmark: paraforge against transformers, Optimum and CTranslate2.

All engines translate the same real Czech sentences with the same model (the
exact opus-mt-cs-en architecture: 6+6 layers, d_model 512, 8 heads, FFN 2048,
swish, vocab 62,509; random weights, which is fine for timing), beam 12, a
fixed output length (min = max = 24 new tokens) so that every engine does the
same work, batch 16, and the same number of threads. Prints sentences/s per
engine and the ratio of paraforge to each peer, and writes bench-out/nmt.json.

The model is built once into .cache/bench/ (about 1 GB with the CTranslate2
copies; not committed).

usage: tools/bench_nmt.py --paraforge target/release/paraforge [--sentences 256]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache" / "bench" / "opus-mt-cs-en-shape"
NEW_TOKENS = 24


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def build_model(tokenizer_from: Path) -> None:
    if (CACHE / "onnx" / "encoder_model_quantized.onnx").exists() and (CACHE / "ct2-int8" / "model.bin").exists():
        return
    log(f"building the benchmark model in {CACHE} (once)")
    subprocess.run(
        [sys.executable, str(ROOT / "tools" / "marian_model.py"), "random", "--out", str(CACHE),
         "--tokenizer-from", str(tokenizer_from), "--quantize"],
        check=True,
    )
    import ctranslate2.converters

    for q, d in (("float32", "ct2-fp32"), ("int8", "ct2-int8")):
        ctranslate2.converters.TransformersConverter(str(CACHE / "hf")).convert(
            str(CACHE / d), quantization=q, force=True
        )


def sentences(n: int) -> list[str]:
    # Real Czech from the held-out WMT19 test set bundled for the tests.
    lines = (ROOT / "tests" / "data" / "parity-cs.txt").read_text(encoding="utf-8").splitlines()
    out = [l for l in lines if l.strip()]
    while len(out) < n:
        out += out
    return out[:n]


def bench_paraforge(binary: str, src: Path, threads: int, batch: int, quantized: bool) -> float:
    cmd = [binary, "translate", "--model", str(CACHE / "onnx"), "--beam", "12", "--batch-size", str(batch),
           "--min-new-tokens", str(NEW_TOKENS), "--max-new-tokens", str(NEW_TOKENS), "--threads", str(threads),
           "--timing", str(src), "-o", os.devnull]
    if quantized:
        cmd.append("--quantized")
    r = subprocess.run(cmd, check=True, capture_output=True, text=True)
    timing = [json.loads(l) for l in r.stderr.splitlines() if l.startswith("{")][-1]
    return timing["sentences"] / timing["seconds"]


def bench_transformers(sents, threads, batch) -> float:
    import torch
    from transformers import MarianMTModel, MarianTokenizer

    torch.set_num_threads(threads)
    tok = MarianTokenizer.from_pretrained(CACHE / "hf")
    model = MarianMTModel.from_pretrained(CACHE / "hf").eval()
    return _hf_generate(model, tok, sents, batch)


def bench_optimum(sents, threads, batch) -> float:
    import onnxruntime as ort
    from optimum.onnxruntime import ORTModelForSeq2SeqLM
    from transformers import MarianTokenizer

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    tok = MarianTokenizer.from_pretrained(CACHE / "hf")
    model = ORTModelForSeq2SeqLM.from_pretrained(
        CACHE / "onnx",
        session_options=so,
        use_cache=True,
        use_merged=False,
        encoder_file_name="encoder_model.onnx",
        decoder_file_name="decoder_model.onnx",
        decoder_with_past_file_name="decoder_with_past_model.onnx",
    )
    return _hf_generate(model, tok, sents, batch)


def _hf_generate(model, tok, sents, batch) -> float:
    import torch

    def run(items):
        for i in range(0, len(items), batch):
            enc = tok(items[i : i + batch], return_tensors="pt", padding=True)
            with torch.no_grad():
                model.generate(**enc, num_beams=12, min_new_tokens=NEW_TOKENS, max_new_tokens=NEW_TOKENS)

    run(sents[:batch])  # warm-up
    t = time.perf_counter()
    run(sents)
    return len(sents) / (time.perf_counter() - t)


def bench_ct2(sents, threads, batch, variant) -> float:
    import ctranslate2
    from transformers import MarianTokenizer

    tok = MarianTokenizer.from_pretrained(CACHE / "hf")
    tr = ctranslate2.Translator(str(CACHE / variant), device="cpu", inter_threads=1, intra_threads=threads)
    toks = [tok.convert_ids_to_tokens(tok(s)["input_ids"]) for s in sents]
    kw = dict(beam_size=12, max_batch_size=batch, min_decoding_length=NEW_TOKENS, max_decoding_length=NEW_TOKENS)
    tr.translate_batch(toks[:batch], **kw)  # warm-up
    t = time.perf_counter()
    tr.translate_batch(toks, **kw)
    return len(sents) / (time.perf_counter() - t)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--paraforge", required=True)
    ap.add_argument("--sentences", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--tokenizer-from", default=str(ROOT / "models" / "tiny-cs-en"))
    ap.add_argument("--engines", default="paraforge,paraforge-int8,ct2-fp32,ct2-int8,optimum,transformers")
    args = ap.parse_args()

    build_model(Path(args.tokenizer_from))
    sents = sentences(args.sentences)
    src = ROOT / "bench-out" / "nmt-input.txt"
    src.parent.mkdir(exist_ok=True)
    src.write_text("\n".join(sents) + "\n", encoding="utf-8")

    results = {}
    for name in args.engines.split(","):
        log(f"running {name} ...")
        if name == "paraforge":
            v = bench_paraforge(args.paraforge, src, args.threads, args.batch_size, False)
        elif name == "paraforge-int8":
            v = bench_paraforge(args.paraforge, src, args.threads, args.batch_size, True)
        elif name == "transformers":
            v = bench_transformers(sents, args.threads, args.batch_size)
        elif name == "optimum":
            v = bench_optimum(sents, args.threads, args.batch_size)
        elif name in ("ct2-fp32", "ct2-int8"):
            v = bench_ct2(sents, args.threads, args.batch_size, name)
        else:
            sys.exit(f"unknown engine {name}")
        results[name] = v
        log(f"  {name}: {v:.2f} sentences/s")

    print(f"\n{args.sentences} real Czech sentences, beam 12, {NEW_TOKENS} new tokens, batch {args.batch_size}, "
          f"{args.threads} threads, opus-mt-cs-en architecture\n")
    print("| engine | sentences/s | paraforge fp32 / engine | paraforge int8 / engine |")
    print("|---|---:|---:|---:|")
    for name, v in results.items():
        r32 = f"{results['paraforge'] / v:.2f}" if "paraforge" in results else "-"
        r8 = f"{results['paraforge-int8'] / v:.2f}" if "paraforge-int8" in results else "-"
        print(f"| {name} | {v:.2f} | {r32} | {r8} |")
    out = {"sentences": args.sentences, "threads": args.threads, "batch_size": args.batch_size,
           "new_tokens": NEW_TOKENS, "beam": 12, "sentences_per_second": results}
    (ROOT / "bench-out" / "nmt.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
