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

usage: tools/bench/bench_nmt.py --paraforge target/release/paraforge [--sentences 256]

--natural: the trained demo model (models/demo-cs-en) on real held-out
sentences with natural output lengths (beam 12, no minimum, the model's
max_length), paraforge against CTranslate2 converted from the same
checkpoint (rebuilt from the shipped graphs by `tools/models/marian_model.py
from-onnx`), fp32 and int8, repeats interleaved; also counts how many
translations each engine shares with paraforge on the shipped model and
with paraforge's fp32 export. paraforge runs with CTranslate2's stopping
rule (--early-stopping true) so that both do the same search, and the
"-split" rows run the threads as single-threaded decoders on different
batches (paraforge --streams, CTranslate2 inter_threads). Writes
bench-out/nmt-natural.json.

usage: tools/bench/bench_nmt.py --natural --paraforge target/release/paraforge [--sentences 200] [--repeats 3]

--gpu: on a GPU (`--device cuda:N`), two models: the demo model at
natural lengths, as --natural, and opus-mt-cs-en's shape at the fixed 24
new tokens above (weights of random signs, which compress; see
`tools/models/marian_model.py random --weights signs`). paraforge's fp32 graphs
with its CUDA defaults (four streams) and with one stream, its fp16
graphs (`tools/models/marian_model.py export --fp16`), against CTranslate2
(float16 at the same batch and at 512, int8_float16; float32 for the demo
model) and, for the demo model, transformers' generate (fp16, fp32)
(`make bench-gpu`, which runs it only where nvidia-smi finds a GPU).
Writes bench-out/nmt-gpu-MODEL.json per model.
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
CACHE = ROOT / ".cache" / "bench" / "opus-mt-cs-en-shape"
NEW_TOKENS = 24


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def build_model(tokenizer_from: Path) -> None:
    if (CACHE / "onnx" / "encoder_model_quantized.onnx").exists() and (CACHE / "ct2-int8" / "model.bin").exists():
        return
    log(f"building the benchmark model in {CACHE} (once)")
    subprocess.run(
        [sys.executable, str(ROOT / "tools" / "models" / "marian_model.py"), "random", "--out", str(CACHE),
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


def timing_of(stderr: str) -> dict:
    """The `--timing` line paraforge prints last on standard error."""
    return [json.loads(l) for l in stderr.splitlines() if l.startswith("{")][-1]


def bench_paraforge(binary: str, src: Path, threads: int, batch: int, quantized: bool) -> float:
    cmd = [binary, "translate", "--model", str(CACHE / "onnx"), "--beam", "12", "--batch-size", str(batch),
           "--min-new-tokens", str(NEW_TOKENS), "--max-new-tokens", str(NEW_TOKENS), "--threads", str(threads),
           "--timing", "--warmup", str(batch), str(src), "-o", os.devnull]
    if quantized:
        cmd.append("--quantized")
    r = subprocess.run(cmd, check=True, capture_output=True, text=True)
    timing = timing_of(r.stderr)
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


# ---------------------------------------------------------------- natural mode

DEMO = ROOT / "models" / "demo-cs-en"
DEMO_CACHE = ROOT / ".cache" / "bench" / "demo-cs-en"
HELD_OUT = ROOT / "data" / "sample" / "czeng16-heldout.cs-en.tsv"


def build_demo() -> None:
    """The demo model's checkpoint rebuilt from its graphs, an fp32 and a
    dynamic-int8 export of it, and CTranslate2 fp32 and int8 conversions
    of it, in .cache/bench/demo-cs-en (built once)."""
    tool = [sys.executable, str(ROOT / "tools" / "models" / "marian_model.py")]
    hf, onnx = DEMO_CACHE / "hf", DEMO_CACHE / "onnx"
    if not (hf / "model.safetensors").exists():
        log(f"rebuilding the demo model's checkpoint in {hf}")
        subprocess.run(tool + ["from-onnx", "--onnx", str(DEMO), "--out", str(hf)], check=True)
    if not (onnx / "decoder_with_past_model_quantized.onnx").exists():
        log(f"exporting the rebuilt checkpoint to {onnx} (fp32 and dynamic int8)")
        subprocess.run(tool + ["export", "--model", str(hf), "--out", str(onnx), "--quantize"], check=True)
    for q, d in (("float32", "ct2-fp32"), ("int8", "ct2-int8")):
        if not (DEMO_CACHE / d / "model.bin").exists():
            convert_ct2_marian(hf, DEMO_CACHE / d, q)


def convert_ct2_marian(hf: Path, out: Path, quantization: str) -> None:
    """CTranslate2's converter for MarianMTModel assumes what holds for the
    opus-mt models converted from Marian: that the decoder start token
    (<pad>) has a zero embedding, so it starts decoding from a zero vector
    and drops <pad> from the vocabulary. A model trained with transformers
    (the demo models; tied embeddings give <pad> a gradient through the
    output layer) has a non-zero <pad> embedding, and that conversion then
    translates differently (0 of 200 sentences identical, the first word
    often missing). Converted here as transformers runs it: the decoder
    starts from <pad>'s own embedding (BART's way in the same converter),
    <pad> stays in the vocabulary, and decoding suppresses it as
    generation_config.json's bad_words_ids does (Ct2.run)."""
    import ctranslate2.converters
    import ctranslate2.converters.transformers as ct

    loader = ct.MarianMTLoader
    saved = {k: loader.__dict__[k] for k in ("set_decoder", "get_vocabulary", "_remove_pad_weights", "set_config")}

    def set_config(self, config, model, tokenizer):
        config.eos_token = tokenizer.eos_token
        config.unk_token = tokenizer.unk_token
        config.decoder_start_token = tokenizer.convert_ids_to_tokens(model.config.decoder_start_token_id)

    loader.set_decoder = ct.BartLoader.set_decoder
    loader.get_vocabulary = ct.BartLoader.get_vocabulary
    loader._remove_pad_weights = lambda self, spec: None
    loader.set_config = set_config
    try:
        ctranslate2.converters.TransformersConverter(str(hf)).convert(str(out), quantization=quantization, force=True)
    finally:
        for k, v in saved.items():
            setattr(loader, k, v)


def held_out_sentences(n: int) -> tuple[list[str], int]:
    """n Czech sentences spread evenly over the held-out file (Multi30K
    captions and WMT19 news alike): every (lines // n)-th line."""
    rows = [l.rstrip("\n").split("\t") for l in HELD_OUT.read_text(encoding="utf-8").splitlines()]
    cs = [r[2] for r in rows if len(r) == 4 and r[2].strip()]
    step = max(1, len(cs) // n)
    return cs[::step][:n], step


def paraforge_cmd(binary, model, src, threads, batch, quantized, out, device="cpu", extra=(), warmup=0):
    cmd = [binary, "translate", "--model", str(model), "--beam", "12", "--batch-size", str(batch),
           "--threads", str(threads), "--device", device, "--timing", str(src), "-o", str(out), *extra]
    if warmup:
        # The first `warmup` lines once, untimed, as the peers get one warm-up batch.
        cmd += ["--warmup", str(warmup)]
    if quantized:
        cmd.append("--quantized")
    return cmd


def run_paraforge(binary, model, src, threads, batch, quantized, out, device="cpu", extra=(), warmup=0):
    cmd = paraforge_cmd(binary, model, src, threads, batch, quantized, out, device, extra, warmup)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"paraforge failed (exit {r.returncode}): {' '.join(map(str, cmd))}\n{r.stderr[-4000:]}")
    timing = timing_of(r.stderr)
    return timing, out.read_text(encoding="utf-8").splitlines()


class Ct2:
    def __init__(self, variant, threads, batch, max_length, device="cpu", compute_type="default", device_index=0,
                 split=False, cache=None, fixed=None):
        import ctranslate2
        from transformers import MarianTokenizer

        cache = cache or DEMO_CACHE
        self.tok = MarianTokenizer.from_pretrained(cache / "hf")
        # split: one single-threaded replica per thread, batches in parallel.
        inter, intra = (threads, 1) if split else (1, threads)
        self.tr = ctranslate2.Translator(str(cache / variant), device=device, device_index=device_index,
                                         inter_threads=inter, intra_threads=intra, compute_type=compute_type)
        if fixed:
            # Random weights: every engine makes exactly `fixed` tokens.
            self.kw = dict(beam_size=12, max_batch_size=batch, min_decoding_length=fixed,
                           max_decoding_length=fixed)
        else:
            # transformers' max_length counts the decoder start token.
            self.kw = dict(beam_size=12, max_batch_size=batch, max_decoding_length=max_length - 1,
                           suppress_sequences=[["<pad>"]])

    def run(self, sents):
        # Tokenizing and detokenizing stay outside the timed part (in
        # paraforge's time they are inside).
        toks = [self.tok.convert_ids_to_tokens(self.tok(s)["input_ids"]) for s in sents]
        t = time.perf_counter()
        res = self.tr.translate_batch(toks, **self.kw)
        secs = time.perf_counter() - t
        texts = [self.tok.decode(self.tok.convert_tokens_to_ids(r.hypotheses[0]), skip_special_tokens=True)
                 for r in res]
        return secs, texts


def main_natural(args) -> None:
    import statistics

    build_demo()
    import ctranslate2

    gen = json.loads((DEMO / "generation_config.json").read_text())
    max_length = gen["max_length"]
    sents, step = held_out_sentences(args.sentences)
    out_dir = ROOT / "bench-out" / "nmt-natural"
    out_dir.mkdir(parents=True, exist_ok=True)
    src = out_dir / "input.txt"
    src.write_text("\n".join(sents) + "\n", encoding="utf-8")
    # paraforge engines: (model directory, --quantized, extra arguments).
    # All but one stop a sentence's search by CTranslate2's rule (as soon
    # as beam-size hypotheses are finished, transformers' early_stopping =
    # true), so both engines do the same search; "-transformers-rule" keeps
    # the model's own setting (transformers' default heuristic, which runs
    # a few more steps).
    same = ("--early-stopping", "true")
    pf = {
        "paraforge": (DEMO, False, same),
        "paraforge-fp32": (DEMO_CACHE / "onnx", False, same),
        "paraforge-int8": (DEMO_CACHE / "onnx", True, same),
        # Cross-attention once per beam, as the export does it.
        "paraforge-int8-per-beam": (DEMO_CACHE / "onnx", True, same + ("--cross-attention-per-beam",)),
        "paraforge-int8-transformers-rule": (DEMO_CACHE / "onnx", True, ()),
        # The self-attention cache reordered by the engine after each call
        # (before 2026-11-26) instead of inside it (nmt/src/beam_gather.rs).
        "paraforge-int8-reorder-in-engine": (DEMO_CACHE / "onnx", True, same + ("--reorder-in-engine",)),
        # The self-attention as exported (MatMul, Softmax, MatMul) instead
        # of one op per layer fused with the reorder (nmt/src/self_attention.rs).
        "paraforge-int8-unfused-attention": (DEMO_CACHE / "onnx", True, same + ("--unfused-self-attention",)),
    }
    engines = args.engines.split(",") if args.engines_given else \
        ["paraforge", "paraforge-fp32", "paraforge-int8", "paraforge-int8-per-beam",
         "paraforge-int8-transformers-rule", "paraforge-int8-reorder-in-engine", "ct2-fp32", "ct2-int8",
         "paraforge-int8-split", "ct2-int8-split", "paraforge-int8-unfused-attention-split"]
    # "-split": the threads as parallel single-threaded decoders on
    # different batches instead (CTranslate2's inter_threads, paraforge's
    # --streams).
    ct2 = {e: Ct2(e.removesuffix("-split"), args.threads, args.batch_size, max_length, split=e.endswith("-split"))
           for e in engines if e.startswith("ct2-")}
    for e in ct2.values():  # warm-up
        e.run(sents[: args.batch_size])
    times = {e: [] for e in engines}
    texts, profiles = {}, {}
    for rep in range(args.repeats):
        for e in engines:
            if e in pf:
                model, q, extra = pf[e]
                timing, out = run_paraforge(args.paraforge, model, src, args.threads, args.batch_size, q,
                                            out_dir / f"{e}.txt", extra=extra, warmup=args.batch_size)
                secs = timing["seconds"]
                profiles.setdefault(e, []).append(timing)
            elif e.endswith("-split") and e.removesuffix("-split") in pf:
                model, q, extra = pf[e.removesuffix("-split")]
                timing, out = run_paraforge(args.paraforge, model, src, 1, args.batch_size, q,
                                            out_dir / f"{e}.txt", extra=extra + ("--streams", str(args.threads)),
                                            warmup=args.batch_size)
                secs = timing["seconds"]
                profiles.setdefault(e, []).append(timing)
            elif e in ct2:
                secs, out = ct2[e].run(sents)
            else:
                known = list(pf) + ["ct2-fp32", "ct2-int8"]
                sys.exit(f"unknown engine {e} (natural mode: {', '.join(known)}, each also as NAME-split)")
            if len(out) != len(sents):
                sys.exit(f"{e} returned {len(out)} translations for {len(sents)} sentences")
            times[e].append(secs)
            texts[e] = out
            log(f"  repeat {rep + 1}: {e}: {secs:.2f} s, {len(sents) / secs:.2f} sentences/s")
    ref = texts.get("paraforge") or texts[engines[0]]
    rows = {}
    for e in engines:
        med = statistics.median(times[e])
        rows[e] = {
            "seconds": times[e],
            "median_seconds": med,
            "sentences_per_second": len(sents) / med,
            "identical_to_paraforge": sum(a == b for a, b in zip(texts[e], ref)),
            "identical_to_paraforge_fp32": sum(a == b for a, b in zip(texts[e], texts.get("paraforge-fp32", ref))),
            "output_words": sum(len(t.split()) for t in texts[e]),
        }
        if e in profiles:
            rows[e]["timing"] = profiles[e][-1]
    label = {
        "paraforge": "paraforge, shipped graphs (weight-only int8 weights, fp32 compute)",
        "paraforge-fp32": "paraforge, fp32 export of the rebuilt checkpoint",
        "paraforge-int8": "paraforge, dynamic int8 export of the rebuilt checkpoint (--quantized)",
        "ct2-fp32": f"CTranslate2 {ctranslate2.__version__} fp32",
        "ct2-int8": f"CTranslate2 {ctranslate2.__version__} int8",
        "paraforge-int8-per-beam": "paraforge, dynamic int8 export, cross-attention once per beam as exported (--cross-attention-per-beam)",
        "paraforge-int8-transformers-rule": "paraforge, dynamic int8 export, transformers' stopping rule",
        "paraforge-int8-reorder-in-engine": "paraforge, dynamic int8 export, cache reordered by the engine "
                                            "(--reorder-in-engine)",
        "paraforge-int8-unfused-attention": "paraforge, dynamic int8 export, self-attention as exported "
                                            "(--unfused-self-attention)",
    }
    for e in engines:
        if e.endswith("-split") and e.removesuffix("-split") in label:
            how = f"--streams {args.threads} --threads 1" if e.startswith("paraforge") else \
                f"inter_threads={args.threads}, intra_threads=1"
            label[e] = f"{label[e.removesuffix('-split')]}, {how}"
    print(f"\n{len(sents)} held-out Czech sentences (every {step}th line of "
          f"{HELD_OUT.relative_to(ROOT)}), demo-cs-en, beam 12, max_length {max_length}, no minimum, "
          f"batch {args.batch_size}, {args.threads} threads, {args.repeats} interleaved repeats (median); "
          f"paraforge with --early-stopping true (CTranslate2's stopping rule) except where named\n")
    print("| engine | sentences/s | paraforge / engine | paraforge-fp32 / engine | identical to paraforge | identical to paraforge-fp32 |")
    print("|---|---:|---:|---:|---:|---:|")
    for e in engines:
        v = rows[e]["sentences_per_second"]
        r1 = f"{rows['paraforge']['sentences_per_second'] / v:.2f}" if "paraforge" in rows else "-"
        r2 = f"{rows['paraforge-fp32']['sentences_per_second'] / v:.2f}" if "paraforge-fp32" in rows else "-"
        print(f"| {label.get(e, e)} | {v:.2f} | {r1} | {r2} | {rows[e]['identical_to_paraforge']}/{len(sents)} | "
              f"{rows[e]['identical_to_paraforge_fp32']}/{len(sents)} |")
    # The comparisons the goal is about, per repeat (the engines ran
    # interleaved, so a repeat's ratio compares like with like).
    ratios = {}
    for a, b in [("paraforge-int8", "ct2-int8"), ("paraforge-int8-split", "ct2-int8-split"),
                 ("paraforge-fp32", "ct2-fp32"), ("paraforge-int8", "paraforge-int8-reorder-in-engine"),
                 ("paraforge-int8-split", "paraforge-int8-unfused-attention-split")]:
        if a in rows and b in rows:
            per = [tb / ta for ta, tb in zip(times[a], times[b])]
            med = rows[a]["sentences_per_second"] / rows[b]["sentences_per_second"]
            ratios[f"{a} / {b}"] = {"median": med, "repeats": per}
            print(f"{a} / {b}: {med:.2f}x (repeats {min(per):.2f}-{max(per):.2f}x)")
    out = {"mode": "natural", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "ratios": ratios,
           "sentences": len(sents), "threads": args.threads, "batch_size": args.batch_size, "beam": 12,
           "max_length": max_length, "repeats": args.repeats, "ctranslate2": ctranslate2.__version__,
           "engines": rows}
    (ROOT / "bench-out" / "nmt-natural.json").write_text(json.dumps(out, indent=1))


class HfGpu:
    """transformers' own generate on the same device, the reference paraforge
    is token-exact with: the checkpoint in fp16 or fp32, beams and limits from
    its generation_config.json (<pad> suppressed as bad_words_ids there).
    Tokenizing and detokenizing stay outside the timed part, as for Ct2."""

    def __init__(self, dtype, device, batch):
        import torch
        from transformers import MarianMTModel, MarianTokenizer

        self.torch = torch
        self.device = device
        self.batch = batch
        self.tok = MarianTokenizer.from_pretrained(DEMO_CACHE / "hf")
        model = MarianMTModel.from_pretrained(DEMO_CACHE / "hf")
        self.model = load_every_weight(model, DEMO_CACHE / "hf" / "model.safetensors").to(device=device, dtype=dtype)
        self.model.eval()

    def run(self, sents):
        torch = self.torch
        encs = [self.tok(sents[i : i + self.batch], return_tensors="pt", padding=True).to(self.device)
                for i in range(0, len(sents), self.batch)]
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()
        t = time.perf_counter()
        outs = []
        with torch.no_grad():
            for enc in encs:
                outs.append(self.model.generate(**enc, num_beams=12, num_return_sequences=1))
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()
        secs = time.perf_counter() - t
        texts = [s for o in outs for s in self.tok.batch_decode(o, skip_special_tokens=True)]
        return secs, texts


def load_every_weight(model, path: Path):
    """Loads the checkpoint into `model` strictly. transformers 5 no longer
    ties a Marian encoder's and decoder's embed_tokens to model.shared when
    tie_word_embeddings is false (this checkpoint's lm_head is separate), and
    initialises them at random with only a load-report warning: a peer that
    translates with random embeddings. Here each embed_tokens takes the
    shared table, static sinusoidal positions keep the table computed at
    load, and any other weight the checkpoint lacks is an error."""
    from safetensors.torch import load_file

    saved = load_file(str(path))
    full, missing = {}, []
    for k in model.state_dict():
        if k in saved:
            full[k] = saved[k]
        elif k.endswith("embed_tokens.weight") and "model.shared.weight" in saved:
            full[k] = saved["model.shared.weight"]
        elif k.endswith("embed_positions.weight") and model.config.static_position_embeddings:
            full[k] = model.state_dict()[k]  # sinusoids computed at load, not stored
        else:
            missing.append(k)
    if missing:
        raise RuntimeError(f"{path}: no weights for {missing}")
    model.load_state_dict(full, strict=True)
    return model


def gpu_description(dev: str) -> str:
    if not dev.startswith("cuda"):
        return "cpu (a check of the script; not a GPU figure)"
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader",
                            f"--id={dev.split(':')[1] if ':' in dev else 0}"], capture_output=True, text=True)
        return r.stdout.strip() or "unknown GPU"
    except OSError:
        return "unknown GPU"


OPUS_GPU_CACHE = ROOT / ".cache" / "bench" / "opus-mt-cs-en-signs"


def export_fp16(cache: Path) -> None:
    """The fp16 graphs of the checkpoint in cache/hf, in cache/onnx-fp16
    (made once)."""
    if not (cache / "onnx-fp16" / "decoder_with_past_model.onnx").exists():
        subprocess.run([sys.executable, str(ROOT / "tools" / "models" / "marian_model.py"), "export", "--model",
                        str(cache / "hf"), "--out", str(cache / "onnx-fp16"), "--fp16"], check=True)


def build_opus_gpu(tokenizer_from: Path) -> None:
    """opus-mt-cs-en's shape (bench-nmt's model) with sign weights
    (`marian_model.py random --weights signs`: the same work, but graphs
    that compress, so that they can be carried to a GPU host without an
    exporter): fp32 and fp16 graphs and a CTranslate2 float16 conversion
    (int8_float16 is a compute type CTranslate2 applies to it at load), in
    .cache/bench/opus-mt-cs-en-signs (built once)."""
    c = OPUS_GPU_CACHE
    if not (c / "onnx" / "decoder_with_past_model.onnx").exists():
        log(f"building opus-mt-cs-en's shape with sign weights in {c} (once)")
        subprocess.run([sys.executable, str(ROOT / "tools" / "models" / "marian_model.py"), "random", "--out", str(c),
                        "--tokenizer-from", str(tokenizer_from), "--weights", "signs"], check=True)
    export_fp16(c)
    if not (c / "ct2-fp16" / "model.bin").exists():
        import ctranslate2.converters

        ctranslate2.converters.TransformersConverter(str(c / "hf")).convert(
            str(c / "ct2-fp16"), quantization="float16", force=True)


# The models `--gpu` runs: the trained demo model at natural lengths,
# checked against transformers, and opus-mt-cs-en's shape at bench-nmt's
# fixed 24 new tokens (its weights are random, so only the speed means
# anything). CTranslate2 rows: (name, conversion, compute type, batch or
# None for --batch-size).
GPU_MODELS = {
    "demo-cs-en": dict(cache=DEMO_CACHE, fixed=None, transformers=True,
                       ct2=(("ct2-fp16", "ct2-fp16", "float16", None),
                            ("ct2-fp16-batch512", "ct2-fp16", "float16", 512),
                            ("ct2-int8-fp16", "ct2-int8-fp16", "int8_float16", None),
                            ("ct2-fp32", "ct2-fp32", "float32", None))),
    "opus-mt-cs-en-shape": dict(cache=OPUS_GPU_CACHE, fixed=NEW_TOKENS, transformers=False,
                                ct2=(("ct2-fp16", "ct2-fp16", "float16", None),
                                     ("ct2-fp16-batch512", "ct2-fp16", "float16", 512),
                                     ("ct2-int8-fp16", "ct2-fp16", "int8_float16", None))),
}


def main_gpu(args) -> None:
    """paraforge (fp16 and fp32 graphs, --device cuda:N) against CTranslate2
    (float16 at the same batch and at 512, int8_float16) and, for the demo
    model, transformers' generate, on one GPU, for each model of --models
    (GPU_MODELS). Run by `make bench-gpu` only where nvidia-smi finds a GPU;
    `--device cpu` runs the same code on the CPU (a check of the script and
    of the fp16 graphs, not a GPU figure). Writes
    bench-out/nmt-gpu-MODEL.json (with a "model" field) for each model.

    --prepared: the checkpoints, graphs and conversions are already in
    .cache/bench/ (made on another machine by `tools/bench/gpu_stage.sh`: a GPU
    host without the export tooling); nothing is built. A peer that cannot
    run on this host (CTranslate2 built against another CUDA than the
    host's, say) is left out with its reason printed and recorded, never
    silently."""
    models = [m for m in args.models.split(",") if m]
    for m in models:
        if m not in GPU_MODELS:
            sys.exit(f"--models: unknown model {m} (known: {', '.join(GPU_MODELS)})")
    if not args.prepared:
        if "demo-cs-en" in models:
            build_demo()
            export_fp16(DEMO_CACHE)
            for d, q in (("ct2-fp16", "float16"), ("ct2-int8-fp16", "int8_float16")):
                if not (DEMO_CACHE / d / "model.bin").exists():
                    convert_ct2_marian(DEMO_CACHE / "hf", DEMO_CACHE / d, q)
        if "opus-mt-cs-en-shape" in models:
            build_opus_gpu(Path(args.tokenizer_from))
    if args.build_only:
        return
    for m in models:
        gpu_one_model(args, m, **GPU_MODELS[m])


def gpu_one_model(args, name, cache, fixed, transformers, ct2) -> None:
    import statistics

    dev = args.device
    ct2_dev = "cuda" if dev.startswith("cuda") else "cpu"
    ct2_idx = int(dev.split(":")[1]) if ":" in dev else 0
    if fixed:
        max_length = fixed
        length = f"{fixed} new tokens for every sentence and engine (random weights)"
        pf_length = ("--min-new-tokens", str(fixed), "--max-new-tokens", str(fixed))
    else:
        max_length = json.loads((DEMO / "generation_config.json").read_text())["max_length"]
        length = f"natural lengths, max_length {max_length}"
        pf_length = ()
    sents, step = held_out_sentences(args.sentences)
    out_dir = ROOT / "bench-out" / f"nmt-gpu-{name}"
    out_dir.mkdir(parents=True, exist_ok=True)
    src = out_dir / "input.txt"
    src.write_text("\n".join(sents) + "\n", encoding="utf-8")
    # paraforge on a GPU with its CUDA defaults (batch 64 as given here,
    # four streams overlapping one batch's host-side search with another's
    # kernels), the same with one stream, and the fp16 graphs (fp16 cache).
    # On the CPU (a check of the script) the fp16 graphs need the device
    # path, which --io-binding gives there.
    fp16_extra = ("--io-binding",) if dev == "cpu" else ()
    pf = {"paraforge-fp32": (cache / "onnx", pf_length),
          "paraforge-fp32-1-stream": (cache / "onnx", pf_length + ("--streams", "1")),
          "paraforge-fp16": (cache / "onnx-fp16", pf_length + fp16_extra)}
    # The search runs on the host's cores: all of them unless --threads is
    # given (the CPU modes' default of 2 would starve it on a GPU host).
    pf_threads = args.threads if args.threads_given else 0
    peers, not_run = {}, {}
    for hf_name, dtype in (("transformers-fp16", "float16"), ("transformers-fp32", "float32")):
        if not transformers or (ct2_dev == "cpu" and dtype == "float16"):
            continue  # fp16 generate on the CPU is not a configuration anyone runs
        try:
            import torch

            h = HfGpu(getattr(torch, dtype), dev, args.batch_size)
            h.run(sents[: args.batch_size])  # warm-up
            peers[hf_name] = h
        except Exception as e:  # noqa: BLE001 - the reason is the result
            not_run[hf_name] = f"{type(e).__name__}: {e}"
    # CTranslate2 at the same batch, and float16 at 512, its fastest batch
    # on an H200 (2026-11-27: 2,107 sentences/s against 1,227 at 64).
    for peer, variant, ctype, batch in ct2:
        batch = batch or args.batch_size
        if ct2_dev == "cpu" and ctype in ("float16", "int8_float16"):
            ctype = "default"  # CTranslate2 has no fp16 compute on CPU
        try:
            c = Ct2(variant, args.threads, batch, max_length, ct2_dev, ctype, ct2_idx, cache=cache, fixed=fixed)
            c.run(sents[:batch])  # warm-up
            peers[peer] = c
        except Exception as e:  # noqa: BLE001 - the reason is the result
            not_run[peer] = f"{type(e).__name__}: {e}"
    for peer, why in not_run.items():
        log(f"NOT RUN: {name}: {peer}: {why}")
    engines = list(pf) + list(peers)
    times = {e: [] for e in engines}
    texts, timings = {}, {}
    for rep in range(args.repeats):
        for e in engines:
            if e in pf:
                model, extra = pf[e]
                timing, out = run_paraforge(args.paraforge, model, src, pf_threads, args.batch_size, False,
                                            out_dir / f"{e}.txt", device=dev, extra=extra, warmup=args.batch_size)
                secs = timing["seconds"]
                timings[e] = timing
            else:
                secs, out = peers[e].run(sents)
            times[e].append(secs)
            texts[e] = out
            log(f"  {name} repeat {rep + 1}: {e} on {dev}: {secs:.2f} s, {len(sents) / secs:.2f} sentences/s")
    base = "paraforge-fp32"
    # transformers fp32 is the reference paraforge is token-exact with on
    # the CPU; without it (or with random weights) there is no such column.
    ref = "transformers-fp32" if "transformers-fp32" in texts else None
    rows = {}
    for e in engines:
        med = statistics.median(times[e])
        rows[e] = {"seconds": times[e], "sentences_per_second": len(sents) / med,
                   "identical_to_paraforge_fp32": sum(a == b for a, b in zip(texts[e], texts[base])),
                   "identical_to_transformers_fp32": (sum(a == b for a, b in zip(texts[e], texts[ref]))
                                                      if ref else None)}
        if e in timings:
            rows[e]["timing"] = timings[e]  # the last repeat's --timing breakdown
    gpu = gpu_description(dev)
    print(f"\n{name}: {len(sents)} held-out Czech sentences (every {step}th line), beam 12, {length}, "
          f"batch {args.batch_size}, device {dev}: {gpu}, {args.repeats} interleaved repeats (median)\n")
    print("| engine | sentences/s | paraforge fp32 / engine | identical to paraforge fp32 | identical to transformers-fp32 |")
    print("|---|---:|---:|---:|---:|")
    for e in engines:
        v = rows[e]["sentences_per_second"]
        same = rows[e]["identical_to_transformers_fp32"]
        print(f"| {e} | {v:.2f} | {rows[base]['sentences_per_second'] / v:.2f} | "
              f"{rows[e]['identical_to_paraforge_fp32']}/{len(sents)} | "
              f"{'-' if same is None else f'{same}/{len(sents)}'} |")
    for peer, why in not_run.items():
        print(f"\nnot run: {peer}: {why}")
    versions = {}
    for mod in ("ctranslate2", "transformers", "torch"):
        try:
            versions[mod] = __import__(mod).__version__
        except ImportError:
            versions[mod] = None
    out = {"mode": "gpu", "model": name, "device": dev, "gpu": gpu,
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "sentences": len(sents),
           "batch_size": args.batch_size, "beam": 12, "max_length": max_length, "fixed_new_tokens": fixed,
           "repeats": args.repeats, "paraforge_threads": pf_threads, **versions, "engines": rows,
           "not_run": not_run}
    (ROOT / "bench-out" / f"nmt-gpu-{name}.json").write_text(json.dumps(out, indent=1))
    for e, t in texts.items():
        (out_dir / f"{e}.out.txt").write_text("\n".join(t) + "\n", encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--paraforge", required=True)
    ap.add_argument("--sentences", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--tokenizer-from", default=str(ROOT / "models" / "tiny-cs-en"))
    ap.add_argument("--engines", default="paraforge,paraforge-int8,ct2-fp32,ct2-int8,optimum,transformers")
    ap.add_argument("--natural", action="store_true", help="the demo model, natural lengths (see above)")
    ap.add_argument("--repeats", type=int, default=3, help="natural and gpu modes: interleaved repeats")
    ap.add_argument("--gpu", action="store_true", help="fp16 on a GPU against CTranslate2 (make bench-gpu)")
    ap.add_argument("--device", default="cuda:0", help="gpu mode: cuda:N (cpu only to check the script)")
    ap.add_argument("--prepared", action="store_true",
                    help="gpu mode: models already in .cache/bench/ (tools/bench/gpu_stage.sh); build nothing")
    ap.add_argument("--build-only", action="store_true",
                    help="gpu mode: build the models into .cache/bench/ and stop (tools/bench/gpu_stage.sh)")
    ap.add_argument("--models", default=",".join(GPU_MODELS),
                    help="gpu mode: which models, comma-separated (default: all of " + ", ".join(GPU_MODELS) + ")")
    args = ap.parse_args()
    args.engines_given = any(a.startswith("--engines") for a in sys.argv[1:])
    args.threads_given = any(a.startswith("--threads") for a in sys.argv[1:])
    if args.gpu:
        if not any(a.startswith("--sentences") for a in sys.argv[1:]):
            args.sentences = 500
        if not any(a.startswith("--batch-size") for a in sys.argv[1:]):
            args.batch_size = 64
        main_gpu(args)
        return
    if args.natural:
        if not any(a.startswith("--sentences") for a in sys.argv[1:]):
            args.sentences = 200
        main_natural(args)
        return

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
