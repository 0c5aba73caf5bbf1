//! Each row's log-softmax and best candidates inside the decoder call.
//!
//! The search needs, per row, its best `k` log-probabilities (`k` = twice
//! the beams, plus the banned ids it skips). On the CPU it computes them
//! from the logits in place (`search::row_candidates`, exact with
//! transformers). On a GPU those logits must first be copied back: rows x
//! vocab floats every step (768 x 8,001 x 4 bytes = 24.6 MB at batch 64,
//! beam 12), then scanned on the host. CTranslate2 and Marian instead take
//! the top-k on the device, so only the candidates cross (here 768 x 26
//! pairs).
//!
//! This rewrite ends a decoder graph the same way: its `logits` output is
//! replaced by `TopK(LogSoftmax(logits), paraforge_top_k)`, whose `k` is a
//! graph input the engine feeds each call. The global best `2 x beams`
//! continuations of a sentence are always among its rows' own best
//! `2 x beams`, so the search over candidates is the search over all
//! logits (`search::top_candidates`); only the arithmetic of the
//! log-softmax moves to the execution provider's kernels.

use crate::onnx_graph::onnx::{
    tensor_proto::DataType, tensor_shape_proto::dimension, type_proto, GraphProto, ModelProto,
    ValueInfoProto,
};
use crate::onnx_graph::{int_attr, node, tensor_info};

/// The graph input holding `k` (int64, one element).
pub(crate) const TOP_K: &str = "paraforge_top_k";
/// Each row's best log-probabilities, best first: (rows, 1, k) float.
pub(crate) const TOP_LOGPROBS: &str = "paraforge_top_logprobs";
/// Their token ids: (rows, 1, k) int64.
pub(crate) const TOP_IDS: &str = "paraforge_top_ids";
const LOGPROBS: &str = "paraforge_logprobs";

fn elem_type(v: &ValueInfoProto) -> Option<i32> {
    match v.r#type.as_ref()?.value.as_ref()? {
        type_proto::Value::TensorType(t) => t.elem_type,
        _ => None,
    }
}

fn names_taken(g: &GraphProto) -> bool {
    let ours = [TOP_K, TOP_LOGPROBS, TOP_IDS, LOGPROBS];
    g.input
        .iter()
        .chain(&g.output)
        .any(|v| ours.contains(&v.name.as_deref().unwrap_or("")))
        || g.node
            .iter()
            .flat_map(|n| &n.output)
            .any(|o| ours.contains(&o.as_str()))
}

/// Rewrites `m` so that it returns [`TOP_LOGPROBS`] and [`TOP_IDS`] in
/// place of `logits`, given [`TOP_K`]. Returns false, leaving `m` as it
/// was, where the graph has no float `logits` output of rank 3, imports an
/// opset older than 11 (TopK with `largest` and `sorted`), already uses
/// the names, or declares a vocabulary other than `vocab` (config.json's):
/// the logits path then reports that mismatch at the first step, which
/// candidates alone could not show.
pub(crate) fn in_graph(m: &mut ModelProto, vocab: usize) -> bool {
    let opset = crate::onnx_graph::default_opset(m).unwrap_or(0);
    let Some(g) = m.graph.as_mut() else {
        return false;
    };
    let Some(pos) = g
        .output
        .iter()
        .position(|o| o.name.as_deref() == Some("logits"))
    else {
        return false;
    };
    let dims = match g.output[pos].r#type.as_ref().and_then(|t| t.value.as_ref()) {
        Some(type_proto::Value::TensorType(t)) => t.shape.as_ref().map(|s| s.dim.clone()),
        _ => None,
    };
    let width = dims.as_ref().and_then(|d| match d.last()?.value {
        Some(dimension::Value::DimValue(w)) => Some(w),
        _ => None,
    });
    if opset < 11
        || elem_type(&g.output[pos]) != Some(DataType::Float as i32)
        || dims.map(|d| d.len()) != Some(3)
        || width.is_some_and(|w| w != vocab as i64)
        || names_taken(g)
    {
        return false;
    }
    g.output.remove(pos);
    g.input
        .push(tensor_info(TOP_K, DataType::Int64, &["paraforge_one"]));
    // LogSoftmax before opset 13 flattens to 2-d at `axis`; at the last
    // axis that is the same normalisation over the vocabulary.
    g.node.push(node(
        "LogSoftmax",
        "paraforge_log_softmax",
        &["logits"],
        &[LOGPROBS],
        vec![int_attr("axis", -1)],
    ));
    g.node.push(node(
        "TopK",
        "paraforge_top_k",
        &[LOGPROBS, TOP_K],
        &[TOP_LOGPROBS, TOP_IDS],
        vec![
            int_attr("axis", -1),
            int_attr("largest", 1),
            int_attr("sorted", 1),
        ],
    ));
    let dims = ["rows", "decoder_sequence_length", "paraforge_k"];
    g.output
        .push(tensor_info(TOP_LOGPROBS, DataType::Float, &dims));
    g.output.push(tensor_info(TOP_IDS, DataType::Int64, &dims));
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::onnx_graph::bundled_model;

    /// The tiny test model's vocabulary, as its config.json and graphs say.
    const TINY_VOCAB: usize = 4001;

    #[test]
    fn every_decoder_graph_of_the_tiny_model_takes_the_rewrite() {
        for file in [
            "decoder_model.onnx",
            "decoder_with_past_model.onnx",
            "decoder_model_merged.onnx",
            "decoder_with_past_model_quantized.onnx",
        ] {
            let mut m = bundled_model("tiny-cs-en", file);
            assert!(in_graph(&mut m, TINY_VOCAB), "{file}");
            let g = m.graph.as_ref().unwrap();
            let outs: Vec<&str> = g.output.iter().filter_map(|o| o.name.as_deref()).collect();
            assert!(!outs.contains(&"logits"), "{file}: logits still copied out");
            assert!(
                outs.contains(&TOP_LOGPROBS) && outs.contains(&TOP_IDS),
                "{file}"
            );
            assert!(g.input.iter().any(|i| i.name.as_deref() == Some(TOP_K)));
            // A second pass finds no logits output and leaves it alone.
            let before = m.clone();
            assert!(!in_graph(&mut m, TINY_VOCAB), "{file}: rewritten twice");
            assert_eq!(m, before);
        }
    }

    #[test]
    fn graphs_it_cannot_end_are_left_as_they_are() {
        let base = bundled_model("tiny-cs-en", "decoder_with_past_model.onnx");
        fn logits(m: &mut ModelProto) -> &mut ValueInfoProto {
            let g = m.graph.as_mut().unwrap();
            g.output
                .iter_mut()
                .find(|o| o.name.as_deref() == Some("logits"))
                .unwrap()
        }
        let mut fp16 = base.clone();
        if let Some(type_proto::Value::TensorType(t)) =
            logits(&mut fp16).r#type.as_mut().unwrap().value.as_mut()
        {
            t.elem_type = Some(DataType::Float16 as i32);
        }
        let mut renamed = base.clone();
        logits(&mut renamed).name = Some("scores".into());
        let mut old_opset = base.clone();
        for o in &mut old_opset.opset_import {
            o.version = Some(10);
        }
        let mut taken = base.clone();
        taken
            .graph
            .as_mut()
            .unwrap()
            .input
            .push(tensor_info(TOP_K, DataType::Int64, &["n"]));
        for (what, mut m) in [
            ("fp16 logits", fp16),
            ("no logits output", renamed),
            ("opset 10", old_opset),
            ("name in use", taken),
            ("another vocabulary", base.clone()),
        ] {
            let vocab = if what == "another vocabulary" {
                TINY_VOCAB + 5
            } else {
                TINY_VOCAB
            };
            let before = m.clone();
            assert!(!in_graph(&mut m, vocab), "{what}: rewritten");
            assert_eq!(m, before, "{what}: changed");
        }
    }
}
