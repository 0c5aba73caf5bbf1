#!/usr/bin/env python3
"""Probe: ONNX Runtime's DecoderMaskedMultiHeadAttention (contrib op, CPU
kernel) in place of an Optimum Marian decoder-with-past graph's
self-attention. Not used by paraforge; it measures whether wiring the op
into the engine would pay (docs/bench/HISTORY.md, "Natural lengths").

The op keeps the self-attention cache in a buffer of fixed capacity,
appends the new key and value in place, and reads past positions through a
cache-indirection table ([sentences, beams, capacity] of beam indices), so
that the beam reorder would move a few ints per row instead of the cache.

For each graph given: rewrites every layer's self-attention into the op
(scale taken from the graph's two Mul constants; the position offset taken
from a new `past_sequence_length` input instead of the past key's shape;
dead nodes pruned), then feeds both graphs one decoder call's worth of
random inputs (ROWS rows, PAST past positions, identity indirection),
checks the logits agree, and times both at 1 thread, interleaved.

usage: tools/bench/probe_dmmha.py GRAPH.onnx [GRAPH.onnx ...] [--rows 192] [--past 11]
(e.g. the exports in .cache/bench/demo-cs-en/onnx/ built by `make bench-nmt-natural`)
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper


def rewrite(src: Path, dst: Path) -> tuple[int, int, int]:
    m = onnx.load(src)
    g = m.graph
    prod = {o: n for n in g.node for o in n.output}
    consts = {n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in g.node if n.op_type == "Constant"}
    consts.update({i.name: numpy_helper.to_array(i) for i in g.initializer})
    key_in = next(i for i in g.input if i.name == "past_key_values.0.decoder.key")
    heads = key_in.type.tensor_type.shape.dim[1].dim_value
    layers = sum(1 for i in g.input if i.name.endswith(".decoder.key"))
    drop, new = set(), []
    for l in range(layers):
        ck, cv = prod[f"present.{l}.decoder.key"], prod[f"present.{l}.decoder.value"]
        k_lin = prod[prod[ck.input[1]].input[0]].input[0]  # Concat <- Transpose <- Reshape(k)
        v_lin = prod[prod[cv.input[1]].input[0]].input[0]
        pv = next(n for n in g.node if n.op_type == "MatMul" and n.input[1] == f"present.{l}.decoder.value")
        t4 = next(n for n in g.node if pv.output[0] in n.input)
        r3 = next(n for n in g.node if t4.output[0] in n.input)
        add = prod[prod[pv.input[0]].input[0]]  # Softmax <- Add(mask)
        qk = prod[add.input[0]]
        mq, mk = prod[qk.input[0]], prod[qk.input[1]]
        scale = float(consts[mq.input[1]]) * float(consts[mk.input[1]])
        q_lin = prod[prod[mq.input[0]].input[0]].input[0]
        drop |= {id(ck), id(cv), id(r3)}
        new.append(helper.make_node(
            "DecoderMaskedMultiHeadAttention",
            [q_lin, k_lin, v_lin, "", "", f"past_key_values.{l}.decoder.key", f"past_key_values.{l}.decoder.value",
             "past_sequence_length", "beam_width", "cache_indirection"],
            [r3.output[0], f"present.{l}.decoder.key", f"present.{l}.decoder.value"],
            name=f"/probe/self.{l}", domain="com.microsoft", num_heads=heads, past_present_share_buffer=1,
            scale=scale))
    # The positions came from the past key's length, now the capacity.
    for n in g.node:
        if n.op_type == "Shape" and n.input[0] == "past_key_values.0.decoder.key":
            for c in g.node:
                if c.op_type == "Gather" and c.input[0] == n.output[0] and int(consts[c.input[1]]) == 2:
                    drop.add(id(c))
                    new.append(helper.make_node("Squeeze", ["past_sequence_length"], ["/probe/psl"]))
                    new.append(helper.make_node("Cast", ["/probe/psl"], [c.output[0]], to=TensorProto.INT64))
    nodes = [n for n in g.node if id(n) not in drop] + new
    need, alive, grown = {o.name for o in g.output}, set(), True
    while grown:
        grown = False
        for n in nodes:
            if id(n) not in alive and any(o in need for o in n.output):
                alive.add(id(n))
                need |= {i for i in n.input if i}
                grown = True
    live = [n for n in nodes if id(n) in alive]
    extra = ["past_sequence_length", "beam_width", "cache_indirection"]
    avail = {i.name for i in g.input} | {i.name for i in g.initializer} | {""} | set(extra)
    ordered, pending = [], live
    while pending:
        rest = []
        for n in pending:
            if all(i in avail for i in n.input):
                ordered.append(n)
                avail |= set(n.output)
            else:
                rest.append(n)
        if len(rest) == len(pending):
            raise SystemExit(f"{src}: the rewritten graph does not resolve ({rest[0].name})")
        pending = rest
    before = len(g.node)
    del g.node[:]
    g.node.extend(ordered)
    g.input.extend([helper.make_tensor_value_info("past_sequence_length", TensorProto.INT32, [1]),
                    helper.make_tensor_value_info("beam_width", TensorProto.INT32, [1]),
                    helper.make_tensor_value_info("cache_indirection", TensorProto.INT32, ["n", "beams", "capacity"])])
    for v in list(g.input) + list(g.output):
        if ".decoder." in v.name:
            v.type.tensor_type.shape.dim[2].dim_param = "capacity"
    if not any(o.domain == "com.microsoft" for o in m.opset_import):
        m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    onnx.save(m, dst)
    return before, len(ordered), heads


def session(path) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def probe(graph: Path, rows: int, past: int, beams: int, capacity: int, src_len: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "dmmha.onnx"
        before, after, heads = rewrite(graph, out)
        a, b = session(graph), session(out)
    dim = next(i for i in a.get_inputs() if i.name == "past_key_values.0.decoder.key").shape[3]
    layers = sum(1 for i in a.get_inputs() if i.name.endswith(".decoder.key"))
    rng = np.random.default_rng(1)
    feed = {"input_ids": rng.integers(1, 1000, (rows, 1)).astype(np.int64),
            "encoder_attention_mask": np.ones((rows, src_len), np.int64)}
    for l in range(layers):
        for part in ("key", "value"):
            feed[f"past_key_values.{l}.encoder.{part}"] = rng.standard_normal((rows, heads, src_len, dim)).astype(np.float32)
            feed[f"past_key_values.{l}.decoder.{part}"] = rng.standard_normal((rows, heads, past, dim)).astype(np.float32)
    presents = [f"present.{l}.decoder.{p}" for l in range(layers) for p in ("key", "value")]
    want = a.run(["logits"], feed)[0]
    io = b.io_binding()
    keep = []
    for k, v in feed.items():
        if ".decoder." not in k:
            io.bind_cpu_input(k, v)
    for l in range(layers):
        for part in ("key", "value"):
            buf = np.zeros((rows, heads, capacity, dim), np.float32)
            buf[:, :, :past] = feed[f"past_key_values.{l}.decoder.{part}"]
            v = ort.OrtValue.ortvalue_from_numpy(buf)
            keep.append((buf, v))
            io.bind_ortvalue_input(f"past_key_values.{l}.decoder.{part}", v)
            io.bind_ortvalue_output(f"present.{l}.decoder.{part}", v)  # the same buffer: appended in place
    io.bind_cpu_input("past_sequence_length", np.array([past], np.int32))
    io.bind_cpu_input("beam_width", np.array([beams], np.int32))
    io.bind_cpu_input("cache_indirection",
                      np.tile(np.arange(beams, dtype=np.int32)[None, :, None], (rows // beams, 1, capacity)))
    io.bind_output("logits")
    b.run_with_iobinding(io)
    got = io.copy_outputs_to_cpu()[-1]
    print(f"{graph}: {before} -> {after} nodes; logits max |difference| {float(np.abs(want - got).max()):.3g}, "
          f"same argmax on {int((want.argmax(-1) == got.argmax(-1)).sum())}/{rows} rows")
    ta, tb = [], []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(20):
            a.run(["logits"] + presents, feed)
        ta.append((time.perf_counter() - t0) / 20)
        t0 = time.perf_counter()
        for _ in range(20):
            b.run_with_iobinding(io)
        tb.append((time.perf_counter() - t0) / 20)
    print(f"  one decoder call, 1 thread, {rows} rows, {past} past positions (median of 7 x 20, interleaved): "
          f"as exported {np.median(ta) * 1e3:.2f} ms, with the op {np.median(tb) * 1e3:.2f} ms")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("graphs", nargs="+", type=Path)
    ap.add_argument("--rows", type=int, default=192, help="decoder rows (sentences x beams)")
    ap.add_argument("--past", type=int, default=11, help="past positions")
    ap.add_argument("--beams", type=int, default=12)
    ap.add_argument("--capacity", type=int, default=64, help="cache buffer positions")
    ap.add_argument("--source-len", type=int, default=18)
    a = ap.parse_args()
    if a.rows % a.beams or a.past >= a.capacity:
        raise SystemExit("--rows must be a multiple of --beams and --past below --capacity")
    for g in a.graphs:
        probe(g, a.rows, a.past, a.beams, a.capacity, a.source_len)


if __name__ == "__main__":
    main()
