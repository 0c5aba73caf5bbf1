//! The rewrite: each layer's `present = Concat(past, new)` becomes a
//! `GatherConcat` reading the parents, where the past is read for nothing
//! but its time length.

use std::collections::HashMap;

use crate::onnx_graph::onnx::{
    tensor_proto::DataType, tensor_shape_proto::dimension, type_proto::Value, GraphProto,
    ModelProto, OperatorSetIdProto,
};
use crate::onnx_graph::{float_rank4, int64_scalars, node, op, tensor_info};
use crate::ops::DOMAIN;

use super::{OP, PARENTS};

/// Rewrites `m` in place so that its decoder call reorders the
/// self-attention cache itself; false, changing nothing, when a layer does
/// not have the pattern (`beam_gather.rs`).
pub(crate) fn in_graph(m: &mut ModelProto, layers: usize) -> bool {
    let Some(g) = m.graph.as_mut() else {
        return false;
    };
    let subgraphs = crate::onnx_graph::has_subgraphs(g);
    if layers == 0 || subgraphs || g.input.iter().any(|i| i.name.as_deref() == Some(PARENTS)) {
        return false;
    }
    let consts = int64_scalars(g);
    let mut concats = Vec::with_capacity(2 * layers);
    for l in 0..layers {
        for part in ["key", "value"] {
            let past = format!("past_key_values.{l}.decoder.{part}");
            let present = format!("present.{l}.decoder.{part}");
            // The kernel takes float32 caches of rank 4.
            if !float_rank4(g, &past) {
                return false;
            }
            let Some(i) = appends(g, &past, &present) else {
                return false;
            };
            if !only_time_length_read(g, &consts, &past, i) {
                return false;
            }
            concats.push(i);
        }
    }
    for i in concats {
        let n = &g.node[i];
        let (past, new, present) = (n.input[0].clone(), n.input[1].clone(), n.output[0].clone());
        let mut gc = node(
            OP,
            &format!("/paraforge/beam_gather/{present}"),
            &[&past, &new, PARENTS],
            &[&present],
            vec![],
        );
        gc.domain = Some(DOMAIN.into());
        g.node[i] = gc;
    }
    g.input
        .push(tensor_info(PARENTS, DataType::Int64, &["rows"]));
    // The past now has the last call's rows, not this call's; shapes the
    // exporter recorded in between no longer hold. (The op infers no shapes:
    // ONNX Runtime takes those below it from the tensors at run time.)
    for i in &mut g.input {
        let name = i.name.as_deref().unwrap_or("");
        if !(name.starts_with("past_key_values.") && name.contains(".decoder.")) {
            continue;
        }
        if let Some(Value::TensorType(t)) = i.r#type.as_mut().and_then(|t| t.value.as_mut()) {
            if let Some(dim) = t.shape.as_mut().and_then(|s| s.dim.first_mut()) {
                dim.value = Some(dimension::Value::DimParam("previous_rows".into()));
            }
        }
    }
    g.value_info.clear();
    m.opset_import.push(OperatorSetIdProto {
        domain: Some(DOMAIN.into()),
        version: Some(1),
    });
    true
}

/// The node appending the new step to `past` as `present`, when it is the
/// export's two-input Concat on the time axis.
fn appends(g: &GraphProto, past: &str, present: &str) -> Option<usize> {
    let i = g
        .node
        .iter()
        .position(|n| n.output.iter().any(|o| o == present))?;
    let n = &g.node[i];
    let axis = n
        .attribute
        .iter()
        .find(|a| a.name.as_deref() == Some("axis"))
        .and_then(|a| a.i);
    (op(n) == "Concat"
        && n.domain.as_deref().unwrap_or("").is_empty()
        && matches!(axis, Some(-2) | Some(2))
        && n.input.len() == 2
        && n.input[0] == past
        && n.output.len() == 1)
        .then_some(i)
}

/// Whether every reader of `past` other than node `concat` is a `Shape`
/// (whole) whose result only feeds `Gather`s of index 2 or -2.
fn only_time_length_read(
    g: &GraphProto,
    consts: &HashMap<&str, i64>,
    past: &str,
    concat: usize,
) -> bool {
    g.node.iter().enumerate().all(|(i, n)| {
        if i == concat || !n.input.iter().any(|x| x == past) {
            return true;
        }
        if op(n) != "Shape" || !n.attribute.is_empty() || n.output.len() != 1 {
            return false;
        }
        let shape = &n.output[0];
        g.node
            .iter()
            .filter(|u| u.input.iter().any(|x| x == shape))
            .all(|u| {
                op(u) == "Gather"
                    && u.input.first() == Some(shape)
                    && u.input
                        .get(1)
                        .and_then(|x| consts.get(x.as_str()))
                        .is_some_and(|&v| v == 2 || v == -2)
            })
            && !g.output.iter().any(|o| o.name.as_ref() == Some(shape))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    use crate::onnx_graph::bundled_model as model;

    #[test]
    fn exports_and_bundled_graphs_are_rewritten() {
        for (dir, file, layers) in [
            ("tiny-cs-en", "decoder_with_past_model.onnx", 2),
            ("tiny-cs-en", "decoder_with_past_model_quantized.onnx", 2),
            ("demo-cs-en", "decoder_with_past_model_quantized.onnx", 3),
        ] {
            let mut m = model(dir, file);
            assert!(in_graph(&mut m, layers), "{dir}/{file}");
            let g = m.graph.as_ref().unwrap();
            let ops = g.node.iter().filter(|n| op(n) == OP).count();
            assert_eq!(ops, 2 * layers, "{dir}/{file}");
            assert!(g.input.iter().any(|i| i.name.as_deref() == Some(PARENTS)));
            // Rewriting twice is refused, not stacked.
            assert!(!in_graph(&mut m, layers));
        }
    }

    #[test]
    fn graphs_without_the_pattern_are_left_alone() {
        for (dir, file, layers) in [
            // The merged decoder keeps its layers inside If branches.
            ("tiny-cs-en", "decoder_model_merged.onnx", 2),
            // A layer count beyond the graph's.
            ("tiny-cs-en", "decoder_with_past_model.onnx", 3),
        ] {
            let mut m = model(dir, file);
            let before = m.encode_to_vec();
            assert!(!in_graph(&mut m, layers), "{dir}/{file}");
            assert_eq!(m.encode_to_vec(), before, "{dir}/{file} changed");
        }
        // A past read for its rows (dimension 0) cannot take the last call's rows.
        let mut m = model("tiny-cs-en", "decoder_with_past_model.onnx");
        let g = m.graph.as_mut().unwrap();
        let shape = g
            .node
            .iter()
            .find(|n| op(n) == "Shape" && n.input[0].contains(".decoder."))
            .map(|n| n.output[0].clone())
            .unwrap();
        g.initializer
            .push(crate::onnx_graph::int64s("/test/zero", &[0]));
        g.initializer.last_mut().unwrap().dims.clear();
        g.node.push(node(
            "Gather",
            "/test/rows",
            &[&shape, "/test/zero"],
            &["/test/rows"],
            vec![],
        ));
        assert!(!in_graph(&mut m, 2));
    }

    /// Each precondition, broken on its own in a graph that otherwise
    /// passes, makes the rewrite refuse and leave the graph as it was.
    #[test]
    fn each_broken_precondition_is_refused() {
        type Break = fn(&mut GraphProto);
        let breaks: [(&str, Break); 5] = [
            ("a Concat on another axis", |g| {
                let n = g
                    .node
                    .iter_mut()
                    .find(|n| n.output.iter().any(|o| o == "present.0.decoder.key"))
                    .unwrap();
                n.attribute[0].i = Some(1);
            }),
            ("a Shape of part of the past", |g| {
                let n = g
                    .node
                    .iter_mut()
                    .find(|n| op(n) == "Shape" && n.input[0] == "past_key_values.0.decoder.key")
                    .unwrap();
                n.attribute.push(crate::onnx_graph::int_attr("start", 1));
            }),
            ("another reader of the past", |g| {
                g.node.push(node(
                    "Identity",
                    "/test/id",
                    &["past_key_values.0.decoder.key"],
                    &["/test/id"],
                    vec![],
                ));
            }),
            ("a half-precision past", |g| {
                let i = g
                    .input
                    .iter_mut()
                    .find(|i| i.name.as_deref() == Some("past_key_values.1.decoder.value"))
                    .unwrap();
                if let Some(Value::TensorType(t)) = i.r#type.as_mut().and_then(|t| t.value.as_mut())
                {
                    t.elem_type = Some(DataType::Float16 as i32);
                }
            }),
            ("a subgraph, which could read the past unseen", |g| {
                let mut a = crate::onnx_graph::int_attr("then_branch", 0);
                a.g = Some(GraphProto::default());
                g.node[0].attribute.push(a);
            }),
        ];
        assert!(in_graph(
            &mut model("tiny-cs-en", "decoder_with_past_model.onnx"),
            2
        ));
        for (what, f) in breaks {
            let mut m = model("tiny-cs-en", "decoder_with_past_model.onnx");
            f(m.graph.as_mut().unwrap());
            let before = m.encode_to_vec();
            assert!(!in_graph(&mut m, 2), "{what}: rewritten");
            assert_eq!(m.encode_to_vec(), before, "{what}: changed");
        }
    }

    /// For the first check to mean something, a graph that reads the past
    /// only for its time length must exist among the fixtures.
    #[test]
    fn the_fixtures_read_the_past_for_its_time_length() {
        let m = model("tiny-cs-en", "decoder_with_past_model.onnx");
        let g = m.graph.as_ref().unwrap();
        assert!(g
            .node
            .iter()
            .any(|n| op(n) == "Shape" && n.input[0] == "past_key_values.0.decoder.key"));
    }
}
