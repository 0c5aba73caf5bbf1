"""Rewrites ONNX Runtime dynamic-int8 graphs (the `*_quantized.onnx` files of
`tools/models/marian_model.py export --quantize`) so that a sentence's output no
longer depends on the other sentences in its batch.

Dynamic quantization computes one activation scale per tensor, i.e. over the
whole batch (DynamicQuantizeLinear), so padding and neighbours change every
row's rounding. Every quantized matmul in those graphs has the form

    xq, xs, xz = DynamicQuantizeLinear(x)
    y = Mul(Cast(MatMulInteger(xq, Wq, xz, Wz)), Mul(xs, Ws))

and is rewritten, from the int8 graphs alone (no checkpoint needed), as one of

  weight-only  y = MatMul(x, DequantizeLinear(Wq, Ws, Wz)): int8 weights on
               disk, fp32 compute. The weights are exactly the int8 ones.
  row-int8     the same MatMulInteger, but x quantized per row
               (symmetric, scale max|x_row|/127, stored as uint8 + 128 so
               that ONNX Runtime's u8s8 kernels run it).
  fp32         MatMul(x, W) with W dequantized into an fp32 initializer
               (4x the size; for comparison only).

usage: requantize.py MODE SRC_DIR OUT_DIR
Non-ONNX files of SRC_DIR are copied; OUT_DIR keeps the file names.
"""

import shutil
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def consumers(graph):
    out = {}
    for n in graph.node:
        for i in n.input:
            out.setdefault(i, []).append(n)
    return out


def rewrite(model, mode):
    g = model.graph
    inits = {i.name: i for i in g.initializer}
    producer = {o: n for n in g.node for o in n.output}
    cons = consumers(g)
    new_nodes = {}  # id(node) -> replacement list (placed where the node was)
    drop = set()
    new_inits = []
    count = 0

    def const(name, arr):
        new_inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    if mode == "row-int8":
        one_e = const("rq_eps", np.array(1e-12, np.float32))
        c127 = const("rq_127", np.array(127.0, np.float32))
        c128 = const("rq_128", np.array(128.0, np.float32))
        zp = const("rq_zp128", np.array(128, np.uint8))
        last = const("rq_axes_last", np.array([-1], np.int64))
        for n in g.node:
            if n.op_type != "DynamicQuantizeLinear":
                continue
            x = n.input[0]
            xq, xs, xz = n.output
            p = x.replace("/", "_") + "_rq"
            # A per-row scale: each row's int8 codes depend on that row only.
            nodes = [
                helper.make_node("Abs", [x], [p + "_abs"]),
                helper.make_node("ReduceMax", [p + "_abs", last], [p + "_amax"], keepdims=1),
                helper.make_node("Max", [p + "_amax", one_e], [p + "_amax_safe"]),
                helper.make_node("Div", [p + "_amax_safe", c127], [xs]),
                helper.make_node("Div", [x, xs], [p + "_scaled"]),
                helper.make_node("Round", [p + "_scaled"], [p + "_round"]),
                helper.make_node("Add", [p + "_round", c128], [p + "_shift"]),
                helper.make_node("Cast", [p + "_shift"], [xq], to=TensorProto.UINT8),
                helper.make_node("Identity", [zp], [xz]),
            ]
            new_nodes[id(n)] = nodes
            count += 1
    else:
        for n in g.node:
            if n.op_type != "MatMulInteger":
                continue
            a, wq, az, wz = n.input
            dql = producer[a]
            assert dql.op_type == "DynamicQuantizeLinear", dql.op_type
            (cast,) = cons[n.output[0]]
            assert cast.op_type == "Cast"
            (mul,) = cons[cast.output[0]]
            assert mul.op_type == "Mul"
            sm = producer[mul.input[1]]
            assert sm.op_type == "Mul" and sm.input[0] == dql.output[1], sm.input
            ws = sm.input[1]
            assert wq in inits and wz in inits and ws in inits
            x = dql.input[0]
            y = mul.output[0]
            if mode == "weight-only":
                w = n.name + "_weight_dequant"
                repl = [
                    helper.make_node("DequantizeLinear", [wq, ws, wz], [w], name=n.name + "_dq"),
                    helper.make_node("MatMul", [x, w], [y], name=n.name.replace("_quant", "")),
                ]
            else:
                q = numpy_helper.to_array(inits[wq]).astype(np.float32)
                z = float(numpy_helper.to_array(inits[wz]))
                s = float(numpy_helper.to_array(inits[ws]))
                w = const(n.name + "_weight", ((q - z) * s).astype(np.float32))
                repl = [helper.make_node("MatMul", [x, w], [y], name=n.name.replace("_quant", ""))]
            new_nodes[id(n)] = repl
            drop.update(id(k) for k in (cast, mul, sm))
            count += 1
        # DynamicQuantizeLinear nodes left without consumers go too.
        used = {i for n in g.node if id(n) not in drop and n.op_type != "MatMulInteger" for i in n.input}
        for nodes in new_nodes.values():
            used.update(i for k in nodes for i in k.input)
        for n in g.node:
            if n.op_type == "DynamicQuantizeLinear" and not any(o in used for o in n.output):
                drop.add(id(n))
    out = []
    for n in g.node:
        if id(n) in new_nodes:
            out.extend(new_nodes[id(n)])
        elif id(n) not in drop:
            out.append(n)
    del g.node[:]
    g.node.extend(out)
    g.initializer.extend(new_inits)
    # Initializers no node reads any more (fp32 mode drops the int8 ones).
    used = {i for n in g.node for i in n.input}
    keep = [i for i in g.initializer if i.name in used]
    del g.initializer[:]
    g.initializer.extend(keep)
    return count


def transpose_cross_attention(model):
    """Cross-attention's probs x V in the decoders is a matmul with one
    query row per head and the (padded) source length as its inner
    dimension. ONNX Runtime runs single-row matmuls with a kernel (MLAS's
    M=1 path) whose summation order depends on that inner length, so the
    zero weights of a neighbour's padding change a row's rounding. Computed
    transposed, V^T x P^T, it has 64 rows and goes through the general
    kernel, which sums along the inner dimension in order: trailing zeros
    then add nothing and the result is the same with or without padding."""
    g = model.graph
    out, count = [], 0
    perm = [0, 1, 3, 2]
    for n in g.node:
        if n.op_type == "MatMul" and "encoder_attn/MatMul_1" in n.name:
            p, v = n.input
            b = n.name
            out += [
                helper.make_node("Transpose", [v], [b + "_vt"], perm=perm, name=b + "_vt"),
                helper.make_node("Transpose", [p], [b + "_pt"], perm=perm, name=b + "_pt"),
                helper.make_node("MatMul", [b + "_vt", b + "_pt"], [b + "_t"], name=b),
                helper.make_node("Transpose", [b + "_t"], [n.output[0]], perm=perm, name=b + "_t"),
            ]
            count += 1
        else:
            out.append(n)
    del g.node[:]
    g.node.extend(out)
    return count


def main():
    mode, src, dst = sys.argv[1:4]
    assert mode in ("weight-only", "row-int8", "fp32"), mode
    src, dst = Path(src), Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    for f in sorted(src.iterdir()):
        if not f.is_file():
            continue
        if f.suffix != ".onnx":
            if f.resolve() != (dst / f.name).resolve():
                shutil.copy2(f, dst / f.name)
            continue
        m = onnx.load(str(f))
        n = rewrite(m, mode)
        t = transpose_cross_attention(m)
        onnx.checker.check_model(m)
        onnx.save(m, str(dst / f.name))
        print(f"{f.name}: {n} rewritten ({mode}), {t} cross-attention matmuls transposed, {(dst / f.name).stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
