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
    src_col, tgt_col = (1, 2) if args.direction == "cs-en" else (2, 1)

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
        if args.direction == "en-cs":
            cfg = json.loads((hf_dir / "tokenizer_config.json").read_text())
            cfg.update(source_lang="en", target_lang="cs")
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


def cmd_export(args) -> None:
    from transformers import MarianMTModel, MarianTokenizer

    src = args.model
    if not Path(src).exists():
        # A hub name: download once into a local directory (needs internet).
        tmp = Path(args.out) / "hf"
        MarianTokenizer.from_pretrained(src).save_pretrained(tmp)
        MarianMTModel.from_pretrained(src).save_pretrained(tmp)
        src = tmp
    export(Path(src), Path(args.out), merged=args.merged, quantize=args.quantize)


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
    t.add_argument("--direction", choices=["cs-en", "en-cs"], default="cs-en")
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
    e.set_defaults(fn=cmd_export)

    r = sub.add_parser("random")
    r.add_argument("--out", required=True)
    r.add_argument("--tokenizer-from", required=True, help="a model directory with source.spm, vocab.json")
    arch(r, 512, 6, 8, 2048, 62509, 512)
    r.set_defaults(fn=cmd_random)

    args = p.parse_args(argv)
    args.fn(args)


if __name__ == "__main__":
    main()
