#!/usr/bin/env python3
"""Build, train and export small MarianMT models, and export real ones.

Subcommands
  train    train a MarianMT model from scratch on a CzEng-layout bitext, save
           it in Hugging Face format, then export it (same as `export`)
  export   export a Hugging Face MarianMT model (a local directory, or a hub
           name such as Helsinki-NLP/opus-mt-cs-en on a machine with internet)
           to the ONNX layout paraforge loads, optionally int8-quantized
  random   a MarianMT model with random weights and a given architecture
           (the benchmark builds opus-mt-cs-en's shape this way)
  from-onnx  rebuild the Hugging Face checkpoint from an ONNX export (fp32 or
           weight-only int8, e.g. models/demo-cs-en, whose checkpoint was not
           kept): every weight is read from the graphs, dequantized, and
           mapped to its MarianMTModel parameter by the node that uses it

The ONNX layout is Hugging Face Optimum's: encoder_model.onnx, decoder_model.onnx,
decoder_with_past_model.onnx (or decoder_model_merged.onnx with --merged),
config.json, generation_config.json, source.spm, target.spm, vocab.json.

Tooling only: needs torch, transformers, sentencepiece, optimum-onnx (see
tools/requirements.txt); paraforge itself needs none of them.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

# Held out from every training run: the evaluation sets named in the model cards.
HELD_OUT_PREFIXES = (
    "multi30k-test-2016-flickr-",
    "multi30k-test-2018-flickr-",
    "wmt19-newstest2019encs-",
)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def read_bitext(paths: list[Path]) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
    """Returns (train, held_out) lists of (id, cs, en)."""
    train, held = [], []
    for p in paths:
        with open(p, encoding="utf-8") as f:
            for line in f:
                cols = line.rstrip("\n").split("\t")
                if len(cols) != 4 or not cols[2].strip() or not cols[3].strip():
                    continue
                row = (cols[0], cols[2], cols[3])
                (held if cols[0].startswith(HELD_OUT_PREFIXES) else train).append(row)
    return train, held


def train_spm(texts: list[str], vocab_size: int, out_prefix: Path, seed: int) -> None:
    import sentencepiece as spm

    with tempfile.NamedTemporaryFile("w", encoding="utf-8", suffix=".txt", delete=False) as f:
        for t in texts:
            f.write(t.replace("\n", " ") + "\n")
        corpus = f.name
    try:
        spm.SentencePieceTrainer.train(
            input=corpus,
            model_prefix=str(out_prefix),
            vocab_size=vocab_size,
            model_type="unigram",
            character_coverage=1.0,
            # Marian's convention: ids 0 and 1 are </s> and <unk>, no <s>.
            unk_id=1,
            eos_id=0,
            bos_id=-1,
            pad_id=-1,
            input_sentence_size=2_000_000,
            shuffle_input_sentence=True,
            seed_sentencepiece_size=200_000,
            num_threads=2,
            minloglevel=2,
        )
    finally:
        os.unlink(corpus)


def write_marian_tokenizer_files(spm_model: Path, out: Path) -> dict:
    """vocab.json as Marian's converter writes it: </s>=0, <unk>=1, the pieces,
    then <pad> last. The ids differ from the spm ids on purpose (as in opus-mt)."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(spm_model))
    vocab = {"</s>": 0, "<unk>": 1}
    for i in range(sp.get_piece_size()):
        piece = sp.id_to_piece(i)
        if piece not in vocab:
            vocab[piece] = len(vocab)
    vocab["<pad>"] = len(vocab)
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(spm_model, out / "source.spm")
    shutil.copy(spm_model, out / "target.spm")
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False, indent=1), encoding="utf-8")
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "MarianTokenizer",
                "model_max_length": 512,
                "separate_vocabs": False,
                "source_lang": "cs",
                "target_lang": "en",
                "unk_token": "<unk>",
                "eos_token": "</s>",
                "pad_token": "<pad>",
            },
            indent=1,
        )
    )
    return vocab


def marian_config(vocab_size: int, pad: int, args) -> "MarianConfig":
    from transformers import MarianConfig

    return MarianConfig(
        vocab_size=vocab_size,
        decoder_vocab_size=vocab_size,
        d_model=args.d_model,
        encoder_layers=args.layers,
        decoder_layers=args.layers,
        encoder_attention_heads=args.heads,
        decoder_attention_heads=args.heads,
        encoder_ffn_dim=args.ffn,
        decoder_ffn_dim=args.ffn,
        activation_function="swish",
        max_position_embeddings=args.max_positions,
        pad_token_id=pad,
        decoder_start_token_id=pad,
        eos_token_id=0,
        forced_eos_token_id=0,
        scale_embedding=True,
        static_position_embeddings=True,
        share_encoder_decoder_embeddings=True,
        dropout=args.dropout,
        attention_dropout=0.0,
        activation_dropout=0.0,
    )


def write_generation_config(model_dir: Path, pad: int, max_length: int, num_beams: int) -> None:
    from transformers import GenerationConfig

    GenerationConfig(
        bad_words_ids=[[pad]],
        bos_token_id=0,
        decoder_start_token_id=pad,
        eos_token_id=0,
        forced_eos_token_id=0,
        max_length=max_length,
        num_beams=num_beams,
        pad_token_id=pad,
    ).save_pretrained(model_dir)


def cmd_train(args) -> None:
    import torch
    from transformers import MarianMTModel, MarianTokenizer

    torch.manual_seed(args.seed)
    random.seed(args.seed)
    torch.set_num_threads(args.threads)
    # en-en (a paraphraser): the TSV's third column is the input, the fourth
    # the output, as for cs-en (tools/models/paraphraser.sh writes reference, translation).
    src_col, tgt_col = (2, 1) if args.direction == "en-cs" else (1, 2)

    train, held = read_bitext([Path(p) for p in args.bitext])
    log(f"bitext: {len(train)} training pairs, {len(held)} held out")
    hf_dir = Path(args.out) / "hf"
    state_path = Path(args.out) / "train_state.pt"
    resume = args.resume and (hf_dir / "model.safetensors").exists()
    if resume:
        tok = MarianTokenizer.from_pretrained(hf_dir)
        vocab = tok.get_vocab()
        pad = tok.pad_token_id
        model = MarianMTModel.from_pretrained(hf_dir)
        log(f"resuming from {hf_dir}")
    else:
        hf_dir.mkdir(parents=True, exist_ok=True)
        spm_prefix = hf_dir / "spm"
        train_spm([r[1] for r in train] + [r[2] for r in train], args.vocab, spm_prefix, args.seed)
        vocab = write_marian_tokenizer_files(Path(str(spm_prefix) + ".model"), hf_dir)
        for ext in (".model", ".vocab"):
            os.unlink(str(spm_prefix) + ext)
        if args.direction in ("en-cs", "en-en"):
            cfg = json.loads((hf_dir / "tokenizer_config.json").read_text())
            cfg.update(source_lang="en", target_lang=args.direction[3:])
            (hf_dir / "tokenizer_config.json").write_text(json.dumps(cfg, indent=1))
        tok = MarianTokenizer.from_pretrained(hf_dir)
        pad = vocab["<pad>"]
        model = MarianMTModel(marian_config(len(vocab), pad, args))
    nparams = sum(p.numel() for p in model.parameters())
    log(f"model: {nparams/1e6:.2f}M parameters, vocab {len(vocab)}")

    def encode(rows):
        src = [r[src_col] for r in rows]
        tgt = [r[tgt_col] for r in rows]
        enc = tok(src, text_target=tgt, truncation=True, max_length=args.max_len)
        return list(zip(enc["input_ids"], enc["labels"]))

    data = encode(train)
    dev = encode(held[:: max(1, len(held) // 500)][:500])
    log(f"tokenized {len(data)} pairs")

    def batches(items, max_tokens, shuffle):
        items = sorted(items, key=lambda x: len(x[0]) + random.random())
        out, cur, cur_max = [], [], 0
        for it in items:
            m = max(cur_max, len(it[0]), len(it[1]))
            if cur and m * (len(cur) + 1) > max_tokens:
                out.append(cur)
                cur, m = [], max(len(it[0]), len(it[1]))
            cur.append(it)
            cur_max = m
        if cur:
            out.append(cur)
        if shuffle:
            random.shuffle(out)
        return out

    def collate(batch):
        ls = max(len(s) for s, _ in batch)
        lt = max(len(t) for _, t in batch)
        ids = torch.full((len(batch), ls), pad)
        mask = torch.zeros((len(batch), ls), dtype=torch.long)
        labels = torch.full((len(batch), lt), -100)
        for i, (s, t) in enumerate(batch):
            ids[i, : len(s)] = torch.tensor(s)
            mask[i, : len(s)] = 1
            labels[i, : len(t)] = torch.tensor(t)
        return ids, mask, labels

    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.98), weight_decay=0.0)
    deadline = time.time() + args.minutes * 60
    last_save = time.time()
    step, epoch, trained_s = 0, 0, 0.0
    if resume and state_path.exists():
        st = torch.load(state_path)
        opt.load_state_dict(st["optimizer"])
        step, epoch, trained_s = st["step"], st["epoch"], st.get("trained_s", 0.0)
        log(f"optimizer state restored at step {step}")
    started = time.time()

    def checkpoint():
        model.save_pretrained(hf_dir)
        write_generation_config(hf_dir, pad, args.max_positions, args.num_beams)
        torch.save({"optimizer": opt.state_dict(), "step": step, "epoch": epoch,
                    "trained_s": trained_s + time.time() - started}, state_path)

    warmup = args.warmup
    done = False
    while not done:
        epoch += 1
        for batch in batches(data, args.batch_tokens, True):
            model.train()
            ids, mask, labels = collate(batch)
            lr = args.lr * min(1.0, (step + 1) / warmup) * min(1.0, math.sqrt(warmup / (step + 1)))
            for g in opt.param_groups:
                g["lr"] = lr
            # bf16 autocast keeps fp32 master weights; on CPUs with AVX512-BF16 it
            # halves the step time (measured 1.31 s -> 0.66 s on a 4k-token batch).
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
                out = model(input_ids=ids, attention_mask=mask, labels=labels)
            out.loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad()
            step += 1
            if step % 100 == 0:
                log(f"epoch {epoch} step {step} lr {lr:.2e} loss {out.loss.item():.3f}")
            if step % 1000 == 0:
                model.eval()
                with torch.no_grad():
                    tot, n = 0.0, 0
                    for b in batches(dev, args.batch_tokens, False):
                        i, m, l = collate(b)
                        o = model(input_ids=i, attention_mask=m, labels=l)
                        k = int((l != -100).sum())
                        tot += o.loss.item() * k
                        n += k
                log(f"dev loss {tot/n:.3f} (ppl {math.exp(tot/n):.1f})")
            if args.save_every and time.time() - last_save > args.save_every * 60:
                checkpoint()
                last_save = time.time()
                log(f"checkpoint saved at step {step}")
            if time.time() > deadline or (args.max_steps and step >= args.max_steps):
                done = True
                break
    log(f"trained {step} steps, {epoch} epochs")
    model.eval()
    checkpoint()
    (Path(args.out) / "training.json").write_text(
        json.dumps(
            {
                "direction": args.direction,
                "steps": step,
                "epochs": epoch,
                "minutes": round((trained_s + time.time() - started) / 60, 1),
                "parameters": nparams,
                "vocab": len(vocab),
                "d_model": args.d_model,
                "layers": args.layers,
                "heads": args.heads,
                "ffn": args.ffn,
                "held_out_prefixes": HELD_OUT_PREFIXES,
                "training_pairs": len(train),
                "seed": args.seed,
                "bf16_autocast": args.bf16,
                "lr": args.lr,
                "warmup": args.warmup,
                "batch_tokens": args.batch_tokens,
            },
            indent=1,
        )
    )
    export(hf_dir, Path(args.out) / "onnx", merged=args.merged, quantize=args.quantize)


def export(model_dir: Path, out: Path, merged: str, quantize: bool) -> None:
    """Optimum export plus the tokenizer files paraforge reads. `merged` is
    "no" (decoder + decoder_with_past), "yes" (decoder_model_merged only) or
    "both" (all three decoder graphs, for tests of both layouts)."""
    if merged == "both":
        export(model_dir, out, "no", False)
        with tempfile.TemporaryDirectory() as tmp:
            export(model_dir, Path(tmp), "yes", False)
            shutil.copy(Path(tmp) / "decoder_model_merged.onnx", out / "decoder_model_merged.onnx")
        if quantize:
            quantize_dir(out)
        return
    merged = merged == "yes"
    from optimum.exporters.onnx import main_export

    out.mkdir(parents=True, exist_ok=True)
    log(f"exporting {model_dir} -> {out} ({'merged decoder' if merged else 'decoder + decoder_with_past'})")
    main_export(
        str(model_dir),
        output=str(out),
        task="text2text-generation-with-past",
        no_post_process=not merged,
        do_validation=False,
    )
    if merged:
        for f in ("decoder_model.onnx", "decoder_with_past_model.onnx"):
            if (out / "decoder_model_merged.onnx").exists() and (out / f).exists():
                (out / f).unlink()
    for f in ("source.spm", "target.spm", "vocab.json", "tokenizer_config.json", "generation_config.json"):
        src = Path(model_dir) / f
        if src.exists() and not (out / f).exists():
            shutil.copy(src, out / f)
    for f in ("special_tokens_map.json",):
        if (out / f).exists():
            (out / f).unlink()
    if quantize:
        quantize_dir(out)


def quantize_dir(out: Path) -> None:
    """ONNX Runtime dynamic int8 quantization of every graph in the directory."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    for f in sorted(out.glob("*.onnx")):
        # Where both decoder layouts are present, int8 is for the split pair.
        split = (out / "decoder_model.onnx").exists()
        if f.stem.endswith("_quantized") or (f.stem == "decoder_model_merged" and split):
            continue
        dst = f.with_name(f.stem + "_quantized.onnx")
        log(f"quantizing {f.name} -> {dst.name}")
        quantize_dynamic(str(f), str(dst), weight_type=QuantType.QInt8, per_channel=False)


def fp16_dir(out: Path) -> None:
    """Converts the fp32 graphs of an export to fp16 in place, for CUDA.
    Weights, compute, encoder states and the KV cache become fp16, so that
    no Cast runs on the cache at each step (with fp32 inputs and outputs,
    as before 2026-11-27, the casts cost more than fp16 saved: 318 against
    383 sentences/s on an H200). Only `logits` stays fp32, cast once at the
    end, because the search's log-softmax and top-k run in fp32. The
    engine reads the cache's element type and types its on-device reorder
    graph to match; ids and masks are int64 either way."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    for stem in GRAPH_STEMS:
        f = out / f"{stem}.onnx"
        if not f.exists():
            continue
        m = convert_float_to_float16(onnx.load(str(f)), keep_io_types=["logits"])
        onnx.save(m, str(f))
        log(f"fp16: {f.name} ({f.stat().st_size:,} bytes)")


def cmd_export(args) -> None:
    from transformers import MarianMTModel, MarianTokenizer

    src = args.model
    if not Path(src).exists():
        # A hub name: download once into a local directory (needs internet).
        tmp = Path(args.out) / "hf"
        MarianTokenizer.from_pretrained(src).save_pretrained(tmp)
        MarianMTModel.from_pretrained(src).save_pretrained(tmp)
        src = tmp
    if args.fp16 and (args.quantize or args.merged != "no"):
        sys.exit("export: --fp16 is for the split fp32 graphs (no --quantize, --merged no)")
    export(Path(src), Path(args.out), merged=args.merged, quantize=args.quantize)
    if args.fp16:
        fp16_dir(Path(args.out))


# ONNX graph names -> MarianMTModel parameters (from-onnx). Linear layers
# are MatMul(x, W^T) + bias in the export; their node names carry the
# module path ("/model/decoder/layers.0/self_attn/q_proj/MatMul"; the
# encoder's own graph drops the "model.encoder" prefix).
LINEAR_MODULES = ("q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2", "lm_head")
GRAPH_STEMS = ("encoder_model", "decoder_model", "decoder_with_past_model", "decoder_model_merged")


def onnx_graph_files(src: Path) -> list[Path]:
    """The graphs of an Optimum export: fp32 where present, else the
    `*_quantized.onnx` ones (a directory like models/demo-cs-en)."""
    files = []
    for stem in GRAPH_STEMS:
        if stem == "decoder_model_merged" and any(f.name.startswith("decoder_model") for f in files):
            continue  # the split decoders hold the same weights
        for name in (f"{stem}.onnx", f"{stem}_quantized.onnx"):
            if (src / name).is_file():
                files.append(src / name)
                break
    if not any(f.name.startswith("encoder_model") for f in files) or len(files) < 2:
        sys.exit(f"from-onnx: {src} has no encoder and decoder graphs (Optimum layout)")
    return files


def onnx_weights(path: Path) -> dict:
    """{HF parameter name: fp32 array} for every weight one graph uses.
    Weight-only int8 weights (int8 initializer -> DequantizeLinear) are
    dequantized exactly as ONNX Runtime does: (q - zero_point) * scale in
    fp32; for an embedding the export gathers int8 rows and dequantizes
    after, which is the same per element."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    g = onnx.load(str(path)).graph
    inits = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    producer = {o: n for n in g.node for o in n.output}
    consumers: dict[str, list] = {}
    for n in g.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    encoder = path.name.startswith("encoder_model")

    def dequant(q, n):
        s = inits[n.input[1]]
        z = inits[n.input[2]] if len(n.input) > 2 and n.input[2] else np.zeros((), q.dtype)
        if s.size != 1 or z.size != 1:
            sys.exit(f"from-onnx: {path.name}: {n.name}: only per-tensor scales are handled")
        return (q.astype(np.float32) - np.float32(z)) * np.float32(s)

    def const(name):
        """An initializer, or an initializer dequantized by DequantizeLinear."""
        if name in inits:
            return inits[name]
        p = producer.get(name)
        if p is not None and p.op_type == "DequantizeLinear" and p.input[0] in inits:
            return dequant(inits[p.input[0]], p)
        return None

    def module(node):
        parts = node.name.strip("/").split("/")[:-1]
        m = ".".join(parts)
        if encoder and not m.startswith("model."):
            m = "model.encoder." + m if m else "model.encoder"
        if m == "model.decoder.shared":  # the decoder's embedding is the shared table
            m = "model.shared"
        return m

    out: dict = {}

    def put(name, arr):
        arr = np.ascontiguousarray(np.asarray(arr, dtype=np.float32))
        if name in out and not np.array_equal(out[name], arr):
            sys.exit(f"from-onnx: {path.name}: two different values for {name}")
        out[name] = arr

    for n in g.node:
        op = n.op_type
        if op == "MatMul":
            w = const(n.input[1])
            if w is not None:
                m = module(n)
                if m.split(".")[-1] not in LINEAR_MODULES:
                    sys.exit(f"from-onnx: {path.name}: a weight in {n.name} that maps to no linear layer")
                put(m + ".weight", w.T)
        elif op == "Gather" and n.input[0] in inits:
            table = inits[n.input[0]]
            if table.dtype != np.float32:
                (dq,) = consumers[n.output[0]]
                assert dq.op_type == "DequantizeLinear", (n.name, dq.op_type)
                table = dequant(table, dq)
            put(module(n) + ".weight", table)
        elif op == "Add":
            for i in n.input:
                b = const(i)
                if b is None:
                    continue
                if n.output[0] == "logits" or i == "final_logits_bias":
                    put("final_logits_bias", b.reshape(1, -1))
                elif module(n).split(".")[-1] in LINEAR_MODULES:
                    put(module(n) + ".bias", b)
        elif op == "LayerNormalization":
            put(module(n) + ".weight", const(n.input[1]))
            put(module(n) + ".bias", const(n.input[2]))
        elif op == "If":
            sys.exit(f"from-onnx: {path.name}: a merged decoder (If node); use the split decoder graphs")
    return out


def cmd_from_onnx(args) -> None:
    """Rebuilds the Hugging Face checkpoint of an ONNX export."""
    import numpy as np
    import torch
    from transformers import MarianConfig, MarianMTModel

    src, out = Path(args.onnx), Path(args.out)
    weights: dict = {}
    for f in onnx_graph_files(src):
        for k, v in onnx_weights(f).items():
            if k in weights and not np.array_equal(weights[k], v):
                sys.exit(f"from-onnx: {f.name} and an earlier graph differ in {k}")
            weights[k] = v
        log(f"{f.name}: {len(weights)} parameters so far")
    emb = weights.pop("model.encoder.embed_tokens.weight", None)
    if emb is not None:
        if "model.shared.weight" in weights and not np.array_equal(emb, weights["model.shared.weight"]):
            sys.exit("from-onnx: the encoder and decoder embeddings differ (unshared embeddings are not handled)")
        weights["model.shared.weight"] = emb
    shared = weights["model.shared.weight"]
    weights["model.encoder.embed_tokens.weight"] = shared
    weights["model.decoder.embed_tokens.weight"] = shared
    config = MarianConfig.from_pretrained(src)
    # int8 exports quantize the output projection and the embedding table
    # separately (different scales), so the two differ by up to one step:
    # the checkpoint then keeps both (lm_head untied), as the graphs compute.
    tied = np.array_equal(weights["lm_head.weight"], shared)
    config.tie_word_embeddings = tied
    model = MarianMTModel(config).eval()
    expected = model.state_dict()
    missing = sorted(set(expected) - set(weights))
    extra = sorted(set(weights) - set(expected))
    if missing or extra:
        sys.exit(f"from-onnx: parameters not found in the graphs: {missing}; names that are not parameters: {extra}")
    for k, v in weights.items():
        if tuple(expected[k].shape) != v.shape:
            sys.exit(f"from-onnx: {k}: graph shape {v.shape}, model shape {tuple(expected[k].shape)}")
    model.load_state_dict({k: torch.tensor(v) for k, v in weights.items()}, strict=True)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    for f in ("generation_config.json", "source.spm", "target.spm", "vocab.json", "tokenizer_config.json"):
        if (src / f).exists():
            shutil.copy(src / f, out / f)
    # What from_pretrained gives back must be exactly these weights (a
    # module that re-initialises a parameter at load would otherwise go
    # unnoticed). The one exception is by design: Marian's sinusoidal
    # position tables are not checkpoint parameters (transformers never
    # saves them and recomputes them at load), so the checkpoint has the
    # exact table where an int8 export may have stored a rounded one.
    back = MarianMTModel.from_pretrained(out).state_dict()
    positions = {}
    for k, v in weights.items():
        if k.endswith("embed_positions.weight"):
            positions[k] = v
            d = float(np.abs(back[k].numpy() - v).max())
            if d > 0:
                log(f"{k}: the graphs' table differs from the exact sinusoids by up to {d:.2e} "
                    f"(int8-rounded in the export); transformers uses the exact one")
        elif not np.array_equal(back[k].numpy(), v):
            sys.exit(f"from-onnx: {k} does not survive save_pretrained/from_pretrained")
    n = sum(v.size for k, v in weights.items()
            if not k.endswith(("embed_tokens.weight", "embed_positions.weight")) and not (tied and k == "lm_head.weight"))
    log(f"wrote {out}: {len(weights)} tensors, {n/1e6:.2f}M parameters, lm_head {'tied to' if tied else 'separate from'} the embeddings")
    if args.check:
        check_against_onnx(src, out, args.check, positions)


def check_against_onnx(src: Path, hf: Path, sentences: str, positions: dict) -> None:
    """Runs the graphs (ONNX Runtime) and the rebuilt model (torch) on the
    same inputs. With the graphs' own position tables put into the torch
    model, encoder states and decoder logits must agree to float rounding
    (this checks the mapping of every weight); the difference the exact
    position tables make is printed too."""
    import numpy as np
    import onnxruntime as ort
    import torch
    from transformers import MarianMTModel, MarianTokenizer

    tok = MarianTokenizer.from_pretrained(hf)
    model = MarianMTModel.from_pretrained(hf).eval()
    lines = [l.strip() for l in open(sentences, encoding="utf-8") if l.strip()][:16]
    enc = tok(lines, return_tensors="pt", padding=True)
    files = {f.name.split("_model")[0]: f for f in onnx_graph_files(src)}
    so = ort.SessionOptions()
    so.add_session_config_entry("session.disable_quant_qdq", "1")
    es = ort.InferenceSession(str(files["encoder"]), so, providers=["CPUExecutionProvider"])
    ds = ort.InferenceSession(str(files["decoder"]), so, providers=["CPUExecutionProvider"])
    ids, mask = enc["input_ids"].numpy(), enc["attention_mask"].numpy()
    h_onnx = es.run(None, {"input_ids": ids, "attention_mask": mask})[0]
    # Teacher-forced decoder input: the start token, then source pieces.
    dec_in = np.concatenate([np.full((ids.shape[0], 1), model.config.decoder_start_token_id), ids[:, :8]], axis=1)
    logits_onnx = ds.run(["logits"], {"input_ids": dec_in, "encoder_attention_mask": mask,
                                       "encoder_hidden_states": h_onnx})[0]
    m = mask.astype(bool)

    def compare(what):
        with torch.no_grad():
            h = model.get_encoder()(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).last_hidden_state
            logits = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"],
                           decoder_input_ids=torch.from_numpy(dec_in)).logits
        he = float(np.abs(h.numpy() - h_onnx)[m].max())
        le = float(np.abs(logits.numpy() - logits_onnx).max())
        log(f"check on {len(lines)} sentences, {what}: encoder states max |diff| {he:.2e}, "
            f"decoder logits max |diff| {le:.2e} (largest |logit| {float(np.abs(logits_onnx).max()):.1f})")
        return he, le

    compare("checkpoint as saved (exact position tables)")
    sd = model.state_dict()
    with torch.no_grad():
        for k, v in positions.items():
            sd[k].copy_(torch.from_numpy(v))
    he, le = compare("with the graphs' position tables")
    if he > 1e-3 or le > 1e-3:
        sys.exit("from-onnx: the rebuilt model does not compute what the graphs compute")


def signs_only(model) -> None:
    """Every weight matrix and embedding becomes +-(its own standard
    deviation), the sign drawn at random: the same shapes, scale and work
    for every engine, at one bit of entropy a weight, so that the graphs
    and conversions of the 77M-parameter opus-mt shape compress with xz
    (the fp32 decoder_with_past graph 346 MB to 13.4 MB, CTranslate2's
    float16 model.bin 153 MB to 10.6 MB) and can be carried to a GPU host
    that has no exporter (a device call carries 64 MiB; normal random
    weights do not compress). Norm scales and biases keep their initial constants, the
    sinusoidal positions their table. The speed of a dense kernel does
    not depend on its values: on the CPU, paraforge translated at the same
    speed with both kinds, within 1.4% (docs/bench/HISTORY.md, "GPU")."""
    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            # The sinusoidal position table is fixed by definition.
            if p.dim() >= 2 and "embed_positions" not in name:
                std = float(p.std())
                p.copy_(torch.where(torch.rand_like(p) < 0.5, -std, std))


def cmd_random(args) -> None:
    """A MarianMT model with random weights in the requested shape, with a
    real tokenizer copied from --tokenizer-from (only the vocabulary size is
    taken from --vocab; extra ids decode as unknown pieces)."""
    import torch
    from transformers import MarianMTModel

    torch.manual_seed(args.seed)
    out = Path(args.out)
    hf = out / "hf"
    hf.mkdir(parents=True, exist_ok=True)
    tok_src = Path(args.tokenizer_from)
    vocab = json.loads((tok_src / "vocab.json").read_text(encoding="utf-8"))
    vocab.pop("<pad>", None)
    i = len(vocab)
    while len(vocab) < args.vocab - 1:
        vocab[f"<extra_{i}>"] = len(vocab)
        i += 1
    vocab["<pad>"] = len(vocab)
    for f in ("source.spm", "target.spm"):
        shutil.copy(tok_src / f, hf / f)
    # The source's added-token table pins <pad> to its old id; drop it.
    tcfg = json.loads((tok_src / "tokenizer_config.json").read_text())
    tcfg.pop("added_tokens_decoder", None)
    (hf / "tokenizer_config.json").write_text(json.dumps(tcfg, indent=1))
    (hf / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    pad = vocab["<pad>"]
    config = marian_config(len(vocab), pad, args)
    model = MarianMTModel(config).eval()
    if args.weights == "signs":
        signs_only(model)
    model.save_pretrained(hf)
    write_generation_config(hf, pad, args.max_positions, args.num_beams)
    export(hf, out / "onnx", merged=args.merged, quantize=args.quantize)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)

    def arch(sp, d_model, layers, heads, ffn, vocab, positions):
        sp.add_argument("--d-model", type=int, default=d_model)
        sp.add_argument("--layers", type=int, default=layers)
        sp.add_argument("--heads", type=int, default=heads)
        sp.add_argument("--ffn", type=int, default=ffn)
        sp.add_argument("--vocab", type=int, default=vocab)
        sp.add_argument("--max-positions", type=int, default=positions)
        sp.add_argument("--num-beams", type=int, default=4, help="default beam in generation_config.json")
        sp.add_argument("--dropout", type=float, default=0.1)
        sp.add_argument("--merged", choices=["no", "yes", "both"], default="no",
                        help="decoder layout: split pair, merged graph, or both")
        sp.add_argument("--quantize", action="store_true", help="also write *_quantized.onnx (int8)")
        sp.add_argument("--seed", type=int, default=1)

    t = sub.add_parser("train")
    t.add_argument("--bitext", nargs="+", required=True, help="CzEng-layout TSV files")
    t.add_argument("--out", required=True)
    t.add_argument("--direction", choices=["cs-en", "en-cs", "en-en"], default="cs-en")
    t.add_argument("--minutes", type=float, default=10)
    t.add_argument("--max-steps", type=int, default=0)
    t.add_argument("--batch-tokens", type=int, default=4096)
    t.add_argument("--max-len", type=int, default=128)
    t.add_argument("--lr", type=float, default=1e-3)
    t.add_argument("--warmup", type=int, default=1000)
    t.add_argument("--threads", type=int, default=2)
    t.add_argument("--bf16", action="store_true", help="bf16 autocast (fast on CPUs with AVX512-BF16 or AMX)")
    t.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out if there is one")
    t.add_argument("--save-every", type=float, default=0, help="minutes between checkpoints (0 = only at the end)")
    arch(t, 64, 2, 4, 256, 4000, 256)
    t.set_defaults(fn=cmd_train)

    e = sub.add_parser("export")
    e.add_argument("--model", required=True, help="local HF directory or hub name")
    e.add_argument("--out", required=True)
    e.add_argument("--merged", choices=["no", "yes", "both"], default="no")
    e.add_argument("--quantize", action="store_true")
    e.add_argument("--fp16", action="store_true",
                   help="write fp16 graphs for CUDA (weights, compute, encoder states and KV cache; fp32 logits)")
    e.set_defaults(fn=cmd_export)

    r = sub.add_parser("random")
    r.add_argument("--out", required=True)
    r.add_argument("--tokenizer-from", required=True, help="a model directory with source.spm, vocab.json")
    arch(r, 512, 6, 8, 2048, 62509, 512)
    r.add_argument("--weights", choices=["normal", "signs"], default="normal",
                   help="normal: transformers' initialisation; signs: +-std per matrix, "
                        "which compresses (to carry the graphs to a GPU host)")
    r.set_defaults(fn=cmd_random)

    f = sub.add_parser("from-onnx", help="rebuild the Hugging Face checkpoint from ONNX graphs")
    f.add_argument("--onnx", required=True, help="model directory in Optimum's layout (fp32 or weight-only int8)")
    f.add_argument("--out", required=True, help="where to write the Hugging Face checkpoint")
    f.add_argument("--check", metavar="SENTENCES",
                   help="also run graphs and checkpoint on the first 16 lines of this file and compare")
    f.set_defaults(fn=cmd_from_onnx)

    args = p.parse_args(argv)
    args.fn(args)


if __name__ == "__main__":
    main()
