//! Cross-attention once per sentence instead of once per beam: a rewrite
//! of an Optimum export's `decoder_with_past` graph, applied at load.
//!
//! The export attends to the encoder with one row per beam: the
//! cross-attention keys and values come expanded to `sentences x beams`
//! rows, and each beam's query is its own (1 x d)(d x S) product, one tiny
//! matrix product per beam and head. All beams of a sentence share those
//! keys and values, so the rewritten graph takes them with one row per
//! sentence and multiplies a sentence's `beams` queries at once,
//! (beams x d)(d x S). The engine then keeps the cross-attention cache at
//! one row per sentence: no expansion to beams, 1/beams of the memory and
//! of the copying when sentences finish. The same products per element, in
//! a different blocking: fp32 output was identical on 200 held-out
//! sentences, and the int8 demo export at beam 12 translated them 1.21x
//! faster (BENCHMARKS.md, "Natural lengths").
//!
//! Per layer it matches the pattern the export writes,
//! `MatMul(q, Mul(Transpose(past_key_values.L.encoder.key), scale))` ->
//! `Add(mask)` -> `Softmax` -> `MatMul(_, past_key_values.L.encoder.value)`,
//! (or, in the bundled batch-invariant graphs, the last product as
//! `Transpose(MatMul(Transpose(value), Transpose(probabilities)))`), and
//! wraps it: the query `(rows, h, 1, d)` becomes `(n, h, beams, d)`, the
//! additive mask `(rows, 1, 1, S)` becomes `(n, 1, 1, S)` (a sentence's
//! beams share it), and the result goes back to `(rows, h, 1, d)`. Where
//! any layer does not match (another exporter, the merged decoder) the
//! graph is left as it is and the engine feeds expanded caches.

use crate::onnx_graph::onnx::{
    tensor_shape_proto::dimension, type_proto::Value, GraphProto, ModelProto, NodeProto,
};
use crate::onnx_graph::{int64s, ints_attr, node, op, swaps_last_two};

/// Where one layer's cross-attention sits in the graph (node indices).
struct Site {
    scores: usize,
    add: usize,
    /// Which input of the `Add` is the mask.
    mask_slot: usize,
    out: usize,
}

/// Rewrites `m` in place; false, changing nothing, when the graph is not
/// an export this rewrite knows (every layer must match).
pub(crate) fn per_sentence(m: &mut ModelProto, layers: usize) -> bool {
    // Slice and Unsqueeze take their axes as inputs from opset 13.
    let opset = crate::onnx_graph::default_opset(m);
    let Some(g) = m.graph.as_mut() else {
        return false;
    };
    if opset.is_none_or(|v| v < 13) || layers == 0 {
        return false;
    }
    let Some(sites) = (0..layers).map(|l| find(g, l)).collect::<Option<Vec<_>>>() else {
        return false;
    };
    rewrite(g, &sites);
    true
}

fn find(g: &GraphProto, l: usize) -> Option<Site> {
    let key = format!("past_key_values.{l}.encoder.key");
    let value = format!("past_key_values.{l}.encoder.value");
    let users = |name: &str| -> Vec<usize> {
        g.node
            .iter()
            .enumerate()
            .filter(|(_, n)| n.input.iter().any(|i| i == name))
            .map(|(i, _)| i)
            .collect()
    };
    // The tensor `name` feeds exactly one node, of type `op_type`.
    let only = |name: &str, op_type: &str| -> Option<usize> {
        match users(name)[..] {
            [i] if op(&g.node[i]) == op_type => Some(i),
            _ => None,
        }
    };
    let out0 = |i: usize| g.node[i].output.first().map(String::as_str);
    let transposed = users(&key)
        .into_iter()
        .filter(|&i| swaps_last_two(&g.node[i]))
        .collect::<Vec<_>>();
    let [t] = transposed[..] else {
        return None;
    };
    let scaled = only(out0(t)?, "Mul")?;
    let scores = only(out0(scaled)?, "MatMul")?;
    if g.node[scores].input.get(1).map(String::as_str) != out0(scaled) {
        return None;
    }
    let add = only(out0(scores)?, "Add")?;
    let mask_slot = match g.node[add]
        .input
        .iter()
        .position(|i| Some(i.as_str()) == out0(scores))
    {
        Some(0) => 1,
        Some(1) => 0,
        _ => return None,
    };
    let softmax = only(out0(add)?, "Softmax")?;
    let last_axis = g.node[softmax]
        .attribute
        .iter()
        .find(|a| a.name.as_deref() == Some("axis"))
        .is_none_or(|a| matches!(a.i, Some(-1) | Some(3)));
    // The product with the values: `MatMul(p, v)` as exported, or as the
    // bundled batch-invariant graphs write it, `Transpose(MatMul(v^T, p^T))`.
    let probs = out0(softmax)?;
    let out = match users(probs)[..] {
        [mm] if op(&g.node[mm]) == "MatMul" => {
            let n = &g.node[mm];
            (n.input.first().map(String::as_str) == Some(probs) && n.input.get(1) == Some(&value))
                .then_some(mm)?
        }
        [pt] if swaps_last_two(&g.node[pt]) => {
            let mm = only(out0(pt)?, "MatMul")?;
            let n = &g.node[mm];
            let vt = g
                .node
                .iter()
                .find(|p| p.output.first() == n.input.first())
                .filter(|p| swaps_last_two(p) && p.input.first() == Some(&value))?;
            let back = only(out0(mm)?, "Transpose")?;
            (n.input.get(1).map(String::as_str) == out0(pt)
                && vt.output.len() == 1
                && swaps_last_two(&g.node[back]))
            .then_some(back)?
        }
        _ => return None,
    };
    if !last_axis || g.node[out].output.len() != 1 {
        return None;
    }
    Some(Site {
        scores,
        add,
        mask_slot,
        out,
    })
}

const C0: &str = "/paraforge/cross/0";
const C1: &str = "/paraforge/cross/1";
const C2: &str = "/paraforge/cross/2";
const C3: &str = "/paraforge/cross/3";
const MINUS1: &str = "/paraforge/cross/-1";

fn rewrite(g: &mut GraphProto, sites: &[Site]) {
    g.initializer.extend([
        int64s(C0, &[0]),
        int64s(C1, &[1]),
        int64s(C2, &[2]),
        int64s(C3, &[3]),
        int64s(MINUS1, &[-1]),
    ]);
    let mut before: Vec<Vec<NodeProto>> = vec![Vec::new(); g.node.len()];
    let mut after: Vec<Vec<NodeProto>> = vec![Vec::new(); g.node.len()];
    for (l, s) in sites.iter().enumerate() {
        let p = |what: &str| format!("/paraforge/cross.{l}/{what}");
        let key = format!("past_key_values.{l}.encoder.key");
        let (shape, n, h, len, d) = (p("shape"), p("n"), p("h"), p("s"), p("d"));
        // n, h, S, d from the keys' shape, before the first node that needs them.
        let first = &mut before[s.scores.min(s.add)];
        first.push(node("Shape", &shape, &[&key], &[&shape], vec![]));
        for (out, idx) in [(&n, C0), (&h, C1), (&len, C2), (&d, C3)] {
            first.push(node("Gather", out, &[&shape, idx], &[out], vec![]));
        }
        // Query (rows, h, 1, d) -> (n, beams, h, d) -> (n, h, beams, d).
        let q = g.node[s.scores].input[0].clone();
        let (qshape, q4, qg) = (p("q_shape"), p("q4"), p("q"));
        let b = &mut before[s.scores];
        b.push(node(
            "Concat",
            &qshape,
            &[&n, MINUS1, &h, &d],
            &[&qshape],
            vec![int_axis(0)],
        ));
        b.push(node("Reshape", &q4, &[&q, &qshape], &[&q4], vec![]));
        b.push(node(
            "Transpose",
            &qg,
            &[&q4],
            &[&qg],
            vec![ints_attr("perm", &[0, 2, 1, 3])],
        ));
        g.node[s.scores].input[0] = qg;
        // Mask (rows, 1, 1, S) -> (n, beams, S) -> first beam's -> (n, 1, 1, S).
        let mask = g.node[s.add].input[s.mask_slot].clone();
        let (mshape, m3, m1, mg) = (p("mask_shape"), p("mask3"), p("mask1"), p("mask"));
        let b = &mut before[s.add];
        b.push(node(
            "Concat",
            &mshape,
            &[&n, MINUS1, &len],
            &[&mshape],
            vec![int_axis(0)],
        ));
        b.push(node("Reshape", &m3, &[&mask, &mshape], &[&m3], vec![]));
        b.push(node("Slice", &m1, &[&m3, C0, C1, C1], &[&m1], vec![]));
        b.push(node("Unsqueeze", &mg, &[&m1, C1], &[&mg], vec![]));
        g.node[s.add].input[s.mask_slot] = mg;
        // Result (n, h, beams, d) -> (n, beams, h, d) -> (rows, h, 1, d).
        let out = g.node[s.out].output[0].clone();
        let (og, o4, oshape) = (p("out"), p("out4"), p("out_shape"));
        g.node[s.out].output[0] = og.clone();
        after[s.out].extend([
            node(
                "Transpose",
                &o4,
                &[&og],
                &[&o4],
                vec![ints_attr("perm", &[0, 2, 1, 3])],
            ),
            node(
                "Concat",
                &oshape,
                &[MINUS1, &h, C1, &d],
                &[&oshape],
                vec![int_axis(0)],
            ),
            node(
                "Reshape",
                &p("out_reshape"),
                &[&o4, &oshape],
                &[&out],
                vec![],
            ),
        ]);
    }
    let old = std::mem::take(&mut g.node);
    for ((n, b), a) in old.into_iter().zip(before).zip(after) {
        g.node.extend(b);
        g.node.push(n);
        g.node.extend(a);
    }
    // Shapes recorded by the exporter no longer hold for the tensors in
    // between; ONNX Runtime infers them again. The cross-attention inputs
    // now have their own first dimension.
    g.value_info.clear();
    for i in &mut g.input {
        let name = i.name.as_deref().unwrap_or("");
        if !(name.starts_with("past_key_values.") && name.contains(".encoder.")) {
            continue;
        }
        if let Some(Value::TensorType(t)) = i.r#type.as_mut().and_then(|t| t.value.as_mut()) {
            if let Some(dim) = t.shape.as_mut().and_then(|s| s.dim.first_mut()) {
                dim.value = Some(dimension::Value::DimParam("sentences".into()));
            }
        }
    }
}

fn int_axis(v: i64) -> crate::onnx_graph::onnx::AttributeProto {
    crate::onnx_graph::int_attr("axis", v)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::onnx_graph::bundled_model as model;

    #[test]
    fn the_exports_decoder_with_past_is_rewritten_fp32_and_int8() {
        for file in [
            "decoder_with_past_model.onnx",
            "decoder_with_past_model_quantized.onnx",
        ] {
            let mut m = model("tiny-cs-en", file);
            assert!(per_sentence(&mut m, 2), "{file}: not rewritten");
            let g = m.graph.unwrap();
            let added = g
                .node
                .iter()
                .filter(|n| {
                    n.name
                        .as_deref()
                        .unwrap_or("")
                        .starts_with("/paraforge/cross.")
                })
                .count();
            // Per layer: Shape, 4 Gathers, 3 for the query, 4 for the mask, 3 for the result.
            assert_eq!(added, 2 * 15, "{file}");
            let key = g
                .input
                .iter()
                .find(|i| i.name.as_deref() == Some("past_key_values.1.encoder.key"));
            assert!(format!("{key:?}").contains("sentences"), "{file}: {key:?}");
        }
    }

    #[test]
    fn the_bundled_batch_invariant_graphs_are_rewritten() {
        for dir in ["demo-cs-en", "demo-en-cs"] {
            let mut m = model(dir, "decoder_with_past_model_quantized.onnx");
            assert!(per_sentence(&mut m, 3), "{dir}");
        }
    }

    #[test]
    fn graphs_without_the_pattern_are_left_alone() {
        // The merged decoder keeps its layers inside If branches; a layer
        // count beyond the graph's.
        assert!(!per_sentence(
            &mut model("tiny-cs-en", "decoder_model_merged.onnx"),
            2
        ));
        assert!(!per_sentence(
            &mut model("tiny-cs-en", "decoder_with_past_model.onnx"),
            3
        ));
    }
}
