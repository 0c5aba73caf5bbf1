#!/usr/bin/env python3
"""ONNX Runtime's own beam search (the `com.microsoft` `BeamSearch`
operator) over an Optimum Marian export: one `Run` per batch, the whole
search on the execution provider. paraforge does not use it; this measures
it against paraforge's engine (docs/bench/HISTORY.md, "GPU: the decoding
loop on the device").

`build DIR OUT`: wraps DIR's split graphs (encoder_model.onnx,
decoder_model.onnx, decoder_with_past_model.onnx; fp32, or an fp16 export
whose cache is fp16) into one model, in the layout ONNX Runtime's T5
generation uses: an `encoder` subgraph (encoder plus the first decoder
step: logits, encoder states, the first self-attention cache and the
cross-attention cache) and a `decoder` subgraph (one step with past),
int32 ids and masks at their edges, every name prefixed so that the two
copies of the weights never clash.

`run MODEL HF_DIR INPUT OUT`: translates INPUT (one sentence per line)
with beam 12, max_length and pad/eos/start ids from the model's
generation_config.json, <pad> banned through `vocab_mask` as transformers'
bad_words_ids does, length-sorted batches; prints the seconds of the
translation loop (after one warm-up batch) and writes OUT and OUT.scores.

Needs onnx, numpy, onnxruntime (onnxruntime-gpu for --device cuda) and,
for `run`, transformers and sentencepiece for the tokenizer.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def build(src: Path, out: Path) -> None:
    import onnx
    from onnx import TensorProto as T
    from onnx import helper

    cfg = json.loads((src / "config.json").read_text())
    layers, heads = cfg["decoder_layers"], cfg["decoder_attention_heads"]
    head_dim, vocab = cfg["d_model"] // heads, cfg["vocab_size"]

    def load(stem: str):
        return onnx.load(str(src / f"{stem}.onnx")).graph

    def prefixed(g, p: str):
        ren = lambda s: s if s == "" else p + s  # noqa: E731
        nodes = []
        for n in g.node:
            m = onnx.NodeProto()
            m.CopyFrom(n)
            m.name = p + n.name
            del m.input[:]
            m.input.extend(ren(i) for i in n.input)
            del m.output[:]
            m.output.extend(ren(o) for o in n.output)
            nodes.append(m)
        inits = []
        for t in g.initializer:
            u = onnx.TensorProto()
            u.CopyFrom(t)
            u.name = p + t.name
            inits.append(u)
        return nodes, inits

    def vi(name, et, dims):
        return helper.make_tensor_value_info(name, et, dims)

    def node(op, i, o, **kw):
        return helper.make_node(op, i, o, **kw)

    enc, dec, past = load("encoder_model"), load("decoder_model"), load("decoder_with_past_model")
    ft = enc.output[0].type.tensor_type.elem_type  # the cache's type
    logits_ft = dec.output[0].type.tensor_type.elem_type

    def logits_out(src_name: str):
        # Every output of a subgraph must have the cache's type.
        if logits_ft == ft:
            return [node("Identity", [src_name], ["logits"])]
        return [node("Cast", [src_name], ["logits"], to=ft)]

    en, ei = prefixed(enc, "e/")
    dn, di = prefixed(dec, "d/")
    nodes = [node("Cast", ["encoder_input_ids"], ["e/input_ids"], to=T.INT64),
             node("Cast", ["encoder_attention_mask"], ["e/attention_mask"], to=T.INT64),
             node("Cast", ["decoder_input_ids"], ["d/input_ids"], to=T.INT64),
             node("Identity", ["e/attention_mask"], ["d/encoder_attention_mask"])]
    nodes += en + [node("Identity", ["e/last_hidden_state"], ["d/encoder_hidden_states"])] + dn
    nodes += logits_out("d/logits") + [node("Identity", ["e/last_hidden_state"], ["encoder_hidden_states"])]
    outs = [vi("logits", ft, ["B", 1, vocab]), vi("encoder_hidden_states", ft, ["B", "S", cfg["d_model"]])]
    for kind, ours in (("decoder", "self"), ("encoder", "cross")):
        for l in range(layers):
            for kv in ("key", "value"):
                name = f"present_{kv}_{ours}_{l}"
                nodes.append(node("Identity", [f"d/present.{l}.{kind}.{kv}"], [name]))
                outs.append(vi(name, ft, ["B", heads, 1 if ours == "self" else "S", head_dim]))
    encoder = helper.make_graph(
        nodes, "encoder",
        [vi("encoder_input_ids", T.INT32, ["B", "S"]), vi("encoder_attention_mask", T.INT32, ["B", "S"]),
         vi("decoder_input_ids", T.INT32, ["B", 1])],
        outs, ei + di)

    pn, pi = prefixed(past, "p/")
    nodes = [node("Cast", ["input_ids"], ["p/input_ids"], to=T.INT64),
             node("Cast", ["encoder_attention_mask"], ["p/encoder_attention_mask"], to=T.INT64)]
    ins = [vi("input_ids", T.INT32, ["B", 1]), vi("encoder_attention_mask", T.INT32, ["B", "S"])]
    for kind, ours in (("decoder", "self"), ("encoder", "cross")):
        for l in range(layers):
            for kv in ("key", "value"):
                name = f"past_{kv}_{ours}_{l}"
                ins.append(vi(name, ft, ["B", heads, "P" if ours == "self" else "S", head_dim]))
                nodes.append(node("Identity", [name], [f"p/past_key_values.{l}.{kind}.{kv}"]))
    nodes += pn + logits_out("p/logits")
    outs = [vi("logits", ft, ["B", 1, vocab])]
    for l in range(layers):
        for kv in ("key", "value"):
            name = f"present_{kv}_self_{l}"
            nodes.append(node("Identity", [f"p/present.{l}.decoder.{kv}"], [name]))
            outs.append(vi(name, ft, ["B", heads, "P1", head_dim]))
    decoder = helper.make_graph(nodes, "decoder", ins, outs, pi)

    inputs = [("input_ids", T.INT32, ["batch", "S"]), ("max_length", T.INT32, [1]), ("min_length", T.INT32, [1]),
              ("num_beams", T.INT32, [1]), ("num_return_sequences", T.INT32, [1]), ("length_penalty", T.FLOAT, [1]),
              ("repetition_penalty", T.FLOAT, [1]), ("vocab_mask", T.INT32, [vocab]),
              ("attention_mask", T.INT32, ["batch", "S"])]
    names = [n for n, _, _ in inputs]
    bs = node("BeamSearch", names[:8] + [""] + names[8:], ["sequences", "sequences_scores"],
              domain="com.microsoft", eos_token_id=cfg["eos_token_id"], pad_token_id=cfg["pad_token_id"],
              decoder_start_token_id=cfg["decoder_start_token_id"], no_repeat_ngram_size=0, early_stopping=0,
              model_type=1, encoder=encoder, decoder=decoder)
    graph = helper.make_graph([bs], "beam_search", [vi(*i) for i in inputs],
                              [vi("sequences", T.INT32, ["batch", "n", "len"]),
                               vi("sequences_scores", T.FLOAT, ["batch", "n"])])
    opset = max(o.version for o in onnx.load(str(src / "encoder_model.onnx"), load_external_data=False).opset_import
                if o.domain in ("", "ai.onnx"))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("com.microsoft", 1)],
                          ir_version=8)
    onnx.save(m, str(out))
    print(f"{out}: BeamSearch over {src} ({'fp16' if ft == T.FLOAT16 else 'fp32'} cache, {layers} layers)")


def run(model: Path, hf: Path, inp: Path, out: Path, device: str, batch: int, beams: int) -> float:
    import numpy as np
    import onnxruntime as ort
    from transformers import MarianTokenizer

    gen = json.loads((hf / "generation_config.json").read_text())
    cfg = json.loads((hf / "config.json").read_text())
    tok = MarianTokenizer.from_pretrained(str(hf))
    sents = inp.read_text(encoding="utf-8").splitlines()
    providers = ["CUDAExecutionProvider"] if device.startswith("cuda") else ["CPUExecutionProvider"]
    s = ort.InferenceSession(str(model), providers=providers)
    if device.startswith("cuda") and "CUDAExecutionProvider" not in s.get_providers():
        sys.exit("run: the CUDA execution provider did not load")
    mask = np.ones(cfg["vocab_size"], np.int32)
    for ids in gen.get("bad_words_ids", []):
        if len(ids) == 1:
            mask[ids[0]] = 0
    fixed = {"max_length": np.array([gen.get("max_length", 512)], np.int32),
             "min_length": np.array([gen.get("min_length", 0)], np.int32),
             "num_beams": np.array([beams], np.int32), "num_return_sequences": np.array([1], np.int32),
             "length_penalty": np.array([gen.get("length_penalty", 1.0)], np.float32),
             "repetition_penalty": np.array([1.0], np.float32), "vocab_mask": mask}
    lens = [len(x) for x in tok(sents)["input_ids"]]
    order = sorted(range(len(sents)), key=lambda i: (lens[i], i))
    texts, scores = [""] * len(sents), [0.0] * len(sents)

    def one(idx):
        enc = tok([sents[i] for i in idx], return_tensors="np", padding=True)
        seq, sc = s.run(None, {"input_ids": enc["input_ids"].astype(np.int32),
                               "attention_mask": enc["attention_mask"].astype(np.int32), **fixed})
        for j, i in enumerate(idx):
            texts[i] = tok.decode(seq[j, 0], skip_special_tokens=True)
            scores[i] = float(sc[j, 0])

    one(order[:batch])  # warm-up: kernels and arena
    t0 = time.perf_counter()
    for k in range(0, len(order), batch):
        one(order[k:k + batch])
    secs = time.perf_counter() - t0
    out.write_text("\n".join(texts) + "\n", encoding="utf-8")
    Path(str(out) + ".scores").write_text("\n".join(f"{x:.6f}" for x in scores) + "\n")
    print(f"{model.name} {device} batch {batch} beam {beams}: {len(sents)} sentences in {secs:.3f} s "
          f"({len(sents) / secs:.1f} sentences/s)")
    return secs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("dir", type=Path)
    b.add_argument("out", type=Path)
    r = sub.add_parser("run")
    r.add_argument("model", type=Path)
    r.add_argument("hf", type=Path, help="the model's transformers directory (tokenizer, configs)")
    r.add_argument("input", type=Path)
    r.add_argument("out", type=Path)
    r.add_argument("--device", default="cpu")
    r.add_argument("--batch-size", type=int, default=64)
    r.add_argument("--beam", type=int, default=12)
    a = ap.parse_args()
    if a.cmd == "build":
        build(a.dir, a.out)
    else:
        run(a.model, a.hf, a.input, a.out, a.device, a.batch_size, a.beam)


if __name__ == "__main__":
    main()
