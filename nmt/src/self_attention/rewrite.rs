//! The rewrites: each layer's six attention nodes become one `Attend`
//! ([`in_graph`]), fused with the cache reorder into `GatherAttend`
//! ([`with_gather`]), then made to read the cache in place by slot
//! (`HistoryAttend`, [`with_history`]).

use std::collections::{HashMap, HashSet};

use crate::onnx_graph::onnx::{
    tensor_proto::DataType, tensor_shape_proto::dimension, type_proto::Value, GraphProto,
    ModelProto, NodeProto,
};
use crate::onnx_graph::{
    float_attr, float_rank4, float_scalars, int64_scalars, node, op, swaps_last_two, tensor_info,
};
use crate::ops::DOMAIN;

use super::{GATHER_OP, HISTORY_OP, OP};

/// Rewrites `m` in place so that each layer's self-attention is one
/// `Attend`; false, changing nothing, when a layer does not have the
/// pattern (`self_attention.rs`; a layer already rewritten no longer has it).
pub(crate) fn in_graph(m: &mut ModelProto, layers: usize) -> bool {
    let opset = crate::onnx_graph::default_opset(m).unwrap_or(0);
    let Some(g) = m.graph.as_mut() else {
        return false;
    };
    if layers == 0 || crate::onnx_graph::has_subgraphs(g) {
        return false;
    }
    let consts = float_scalars(g);
    let mut found = Vec::with_capacity(layers);
    for l in 0..layers {
        let past = format!("past_key_values.{l}.decoder.key");
        if !float_rank4(g, &past) {
            return false;
        }
        let names = (
            format!("present.{l}.decoder.key"),
            format!("present.{l}.decoder.value"),
        );
        let Some(p) = pattern(g, &consts, opset, names) else {
            return false;
        };
        found.push(p);
    }
    let mut drop = Vec::new();
    for p in found {
        let mut inputs = vec![p.q.as_str(), p.key.as_str(), p.value.as_str()];
        if let Some(mask) = &p.mask {
            inputs.push(mask);
        }
        let mut a = node(
            OP,
            &format!("/paraforge/self_attention/{}", p.key),
            &inputs,
            &[&p.out],
            vec![float_attr("scale", p.scale)],
        );
        a.domain = Some(DOMAIN.into());
        // In the product's place: every input is ready there.
        g.node[p.last] = a;
        drop.extend(p.replaced);
    }
    drop.sort_unstable();
    for i in drop.into_iter().rev() {
        g.node.remove(i);
    }
    g.value_info.clear();
    if !m
        .opset_import
        .iter()
        .any(|o| o.domain.as_deref() == Some(DOMAIN))
    {
        m.opset_import
            .push(crate::onnx_graph::onnx::OperatorSetIdProto {
                domain: Some(DOMAIN.into()),
                version: Some(1),
            });
    }
    true
}

/// Rewrites a graph that already has each layer's `GatherConcat`s
/// (`beam_gather.rs`) and `Attend` (above) so that one `GatherAttend` per
/// layer does all three: the cache rows are attended to while they are
/// still in the core's cache, instead of read back from memory. The
/// export's mask is `Slice(source, 0, time_length(present_key), axis 3)`:
/// a node reading the present it would now wait for, so the fused node
/// takes the source and cuts it itself. False, changing nothing, where a
/// layer differs.
pub(crate) fn with_gather(m: &mut ModelProto, layers: usize) -> bool {
    let Some(g0) = m.graph.as_ref() else {
        return false;
    };
    let mut g = g0.clone();
    let ints = int64_scalars(g0);
    let produced_by = |g: &GraphProto, name: &str, op_type: &str| -> Option<usize> {
        g.node
            .iter()
            .position(|n| op(n) == op_type && n.output.first().map(String::as_str) == Some(name))
    };
    let mut drop = Vec::new();
    for l in 0..layers {
        let key = format!("present.{l}.decoder.key");
        let value = format!("present.{l}.decoder.value");
        let (Some(gk), Some(gv)) = (
            produced_by(&g, &key, crate::beam_gather::OP),
            produced_by(&g, &value, crate::beam_gather::OP),
        ) else {
            return false;
        };
        let reads_parents = |i: usize| {
            g.node[i].input.get(2).map(String::as_str) == Some(crate::beam_gather::PARENTS)
        };
        if !reads_parents(gk) || !reads_parents(gv) {
            return false;
        }
        let Some(at) = g.node.iter().position(|n| {
            op(n) == OP && n.input.get(1) == Some(&key) && n.input.get(2) == Some(&value)
        }) else {
            return false;
        };
        let mut inputs: Vec<String> = vec![
            g.node[at].input[0].clone(),
            g.node[gk].input[0].clone(),
            g.node[gk].input[1].clone(),
            g.node[gv].input[0].clone(),
            g.node[gv].input[1].clone(),
            crate::beam_gather::PARENTS.into(),
        ];
        drop.extend([gk, gv]);
        if let Some(mask) = g.node[at].input.get(3) {
            let Some(sl) = cut_to_keys(&g, &ints, mask, &key) else {
                return false;
            };
            inputs.push(g.node[sl].input[0].clone());
            drop.push(sl);
        }
        let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
        let out = g.node[at].output[0].clone();
        let mut n = node(
            GATHER_OP,
            &format!("/paraforge/self_attention/gather/{key}"),
            &refs,
            &[&key, &value, &out],
            g.node[at].attribute.clone(),
        );
        n.domain = Some(DOMAIN.into());
        g.node[at] = n;
    }
    drop.sort_unstable();
    drop.dedup();
    for i in drop.into_iter().rev() {
        g.node.remove(i);
    }
    // The reader of the present's time length now comes before its
    // producer in the list.
    if !crate::onnx_graph::sort_topologically(&mut g) {
        return false;
    }
    m.graph = Some(g);
    true
}

/// The graph input with each row's cache slot per earlier position
/// (int64, `[rows, positions]`), for [`with_history`].
pub(crate) const SLOTS: &str = "paraforge_cache_slots";

/// The graph input holding every step's new keys (or values) of layer `l`,
/// never moved: `[slots, heads, dim]`.
pub(crate) fn history_input(l: usize, part: &str) -> String {
    format!("paraforge_history.{l}.{part}")
}

/// Rewrites a graph with `GatherAttend`s ([`with_gather`]) so that the
/// self-attention cache is never copied: the engine keeps every step's new
/// keys and values where they were written and tells each row, per
/// position, which slot holds its ancestor's (CTranslate2 and Marian copy
/// the cache by beam parent each step instead; FasterTransformer's "cache
/// indirection" is this). `HistoryAttend` reads the slots in place, and
/// `present.L.decoder.*` become only the step's new rows, for the engine to
/// append. The past inputs are still fed for their time length (their
/// readers are `Shape`s only, as `beam_gather.rs` checked), as a tensor of
/// shape `[1, 1, t, 1]`. False, changing nothing, where a layer differs.
pub(crate) fn with_history(m: &mut ModelProto, layers: usize) -> bool {
    let Some(g) = m.graph.as_mut() else {
        return false;
    };
    let fused: Vec<usize> = (0..layers)
        .filter_map(|l| {
            let key = format!("present.{l}.decoder.key");
            g.node
                .iter()
                .position(|n| op(n) == GATHER_OP && n.output.first() == Some(&key))
        })
        .collect();
    let parents_read = g
        .node
        .iter()
        .filter(|n| n.input.iter().any(|x| x == crate::beam_gather::PARENTS))
        .count();
    if layers == 0 || fused.len() != layers || parents_read != layers {
        return false;
    }
    // The present becomes the step's new rows only: a live reader of it
    // (the export's Shape for the mask's cut was one, dead since
    // with_gather) would read another time length.
    let mut pruned = g.clone();
    crate::onnx_graph::prune_dead(&mut pruned);
    let present_read = (0..layers).any(|l| {
        ["key", "value"].iter().any(|part| {
            let name = format!("present.{l}.decoder.{part}");
            pruned.node.iter().any(|n| n.input.contains(&name))
        })
    });
    if present_read {
        return false;
    }
    *g = pruned;
    let fused: Vec<usize> = (0..layers)
        .filter_map(|l| {
            let key = format!("present.{l}.decoder.key");
            g.node
                .iter()
                .position(|n| op(n) == GATHER_OP && n.output.first() == Some(&key))
        })
        .collect();
    for (l, &i) in fused.iter().enumerate() {
        let n = &g.node[i];
        let (hk, hv) = (history_input(l, "key"), history_input(l, "value"));
        let mut inputs = vec![
            n.input[0].as_str(),
            n.input[2].as_str(),
            n.input[4].as_str(),
            SLOTS,
            hk.as_str(),
            hv.as_str(),
        ];
        // A mask that depends on no input's values is the causal mask,
        // which for a step's one query masks nothing: it is left out, and
        // the nodes that made it (a hundred-odd per call in the export,
        // 9 us each in ONNX Runtime's profile) die with it.
        if let Some(mask) = n.input.get(6).filter(|m| !shape_only(g, m)) {
            inputs.push(mask);
        }
        let outputs: Vec<&str> = n.output.iter().map(String::as_str).collect();
        let mut h = node(
            HISTORY_OP,
            &format!("/paraforge/self_attention/history/{l}"),
            &inputs,
            &outputs,
            n.attribute.clone(),
        );
        h.domain = Some(DOMAIN.into());
        g.node[i] = h;
    }
    crate::onnx_graph::prune_dead(g);
    g.input
        .retain(|i| i.name.as_deref() != Some(crate::beam_gather::PARENTS));
    g.input
        .push(tensor_info(SLOTS, DataType::Int64, &["rows", "positions"]));
    for l in 0..layers {
        for part in ["key", "value"] {
            g.input.push(tensor_info(
                &history_input(l, part),
                DataType::Float,
                &["slots", "heads", "dim"],
            ));
        }
    }
    // The past is now a stand-in of shape [1, 1, t, 1]; the present, the
    // step's new rows.
    for v in g.input.iter_mut().chain(g.output.iter_mut()) {
        let name = v.name.as_deref().unwrap_or("");
        let cache = (name.starts_with("past_key_values.") || name.starts_with("present."))
            && name.contains(".decoder.");
        if !cache {
            continue;
        }
        if let Some(Value::TensorType(t)) = v.r#type.as_mut().and_then(|t| t.value.as_mut()) {
            if let Some(shape) = t.shape.as_mut() {
                for (j, dim) in shape.dim.iter_mut().enumerate() {
                    dim.value = Some(dimension::Value::DimParam(format!("cache_{j}")));
                }
            }
        }
    }
    g.value_info.clear();
    true
}

/// Whether `name` depends on the graph's inputs through their shapes alone
/// (every path back to an input passes a `Shape`): the same for every row,
/// whatever the tokens and the cache hold.
fn shape_only(g: &GraphProto, name: &str) -> bool {
    let producer: HashMap<&str, &NodeProto> = g
        .node
        .iter()
        .flat_map(|n| n.output.iter().map(move |o| (o.as_str(), n)))
        .collect();
    let constant: HashSet<&str> = g
        .initializer
        .iter()
        .filter_map(|t| t.name.as_deref())
        .collect();
    let mut seen = HashSet::new();
    let mut todo = vec![name];
    while let Some(x) = todo.pop() {
        if x.is_empty() || !seen.insert(x) {
            continue;
        }
        match producer.get(x) {
            None if constant.contains(x) => {}
            None => return false,
            Some(n) if op(n) == "Shape" && n.domain.as_deref().unwrap_or("").is_empty() => {}
            Some(n)
                if n.attribute
                    .iter()
                    .any(|a| a.g.is_some() || !a.graphs.is_empty()) =>
            {
                return false
            }
            Some(n) => todo.extend(n.input.iter().map(String::as_str)),
        }
    }
    true
}

/// The `Slice` making `mask` when it is the export's cut of a source to
/// `key`'s time length (starts 0, ends that length, axis 3, step 1) and
/// `mask` has no other reader.
fn cut_to_keys(g: &GraphProto, ints: &HashMap<&str, i64>, mask: &str, key: &str) -> Option<usize> {
    let producer = |name: &str| {
        g.node
            .iter()
            .position(|n| n.output.iter().any(|o| o == name))
    };
    let readers = g
        .node
        .iter()
        .filter(|n| n.input.iter().any(|x| x == mask))
        .count();
    if readers != 1 || g.output.iter().any(|o| o.name.as_deref() == Some(mask)) {
        return None;
    }
    let sl = producer(mask)?;
    let n = &g.node[sl];
    let c = |i: usize| n.input.get(i).and_then(|x| ints.get(x.as_str())).copied();
    let step_one = n.input.len() == 4 || c(4) == Some(1);
    if op(n) != "Slice"
        || n.input.len() < 4
        || c(1) != Some(0)
        || !matches!(c(3), Some(3 | -1))
        || !step_one
    {
        return None;
    }
    let un = &g.node[producer(&n.input[2])?];
    if op(un) != "Unsqueeze" || un.input.len() != 2 || ints.get(un.input[1].as_str()) != Some(&0) {
        return None;
    }
    let ga = &g.node[producer(&un.input[0])?];
    if op(ga) != "Gather" || !matches!(ints.get(ga.input.get(1)?.as_str()), Some(2 | -2)) {
        return None;
    }
    let sh = &g.node[producer(&ga.input[0])?];
    (op(sh) == "Shape"
        && sh.attribute.is_empty()
        && sh.input.first().map(String::as_str) == Some(key))
    .then_some(sl)
}

/// One layer's attention as found: the fused node's inputs and output, the
/// node it replaces in place and those it removes.
struct Found {
    q: String,
    key: String,
    value: String,
    mask: Option<String>,
    scale: f32,
    out: String,
    last: usize,
    replaced: Vec<usize>,
}

fn pattern(
    g: &GraphProto,
    consts: &HashMap<&str, f32>,
    opset: i64,
    (key, value): (String, String),
) -> Option<Found> {
    let readers = |name: &str| -> Vec<usize> {
        g.node
            .iter()
            .enumerate()
            .filter(|(_, n)| n.input.iter().any(|x| x == name))
            .map(|(i, _)| i)
            .collect()
    };
    let is_output = |name: &str| g.output.iter().any(|o| o.name.as_deref() == Some(name));
    // The one reader of an intermediate, which must not be a graph output.
    let only = |name: &str| -> Option<usize> {
        match readers(name)[..] {
            [i] if !is_output(name) => Some(i),
            _ => None,
        }
    };
    let standard = |i: usize| g.node[i].domain.as_deref().unwrap_or("").is_empty();
    let key_readers = readers(&key);
    let mut t = None;
    for &i in &key_readers {
        match op(&g.node[i]) {
            "Shape" => {}
            "Transpose" if t.is_none() && swaps_last_two(&g.node[i]) && standard(i) => t = Some(i),
            _ => return None,
        }
    }
    let t = t?;
    let mut replaced = vec![t];
    let mut next = only(&g.node[t].output[0])?;
    let mut scale = 1.0f32;
    if op(&g.node[next]) == "Mul" && standard(next) {
        let n = &g.node[next];
        let other = n.input.iter().find(|x| **x != g.node[t].output[0])?;
        scale = *consts.get(other.as_str())?;
        replaced.push(next);
        next = only(&n.output[0])?;
    }
    let product = &g.node[next];
    let kt = &g.node[*replaced.last()?].output[0];
    if op(product) != "MatMul"
        || !standard(next)
        || product.input.len() != 2
        || product.input[1] != *kt
    {
        return None;
    }
    let q = product.input[0].clone();
    replaced.push(next);
    next = only(&product.output[0])?;
    let mut mask = None;
    if op(&g.node[next]) == "Add" && standard(next) {
        let n = &g.node[next];
        let scores = &g.node[*replaced.last()?].output[0];
        let [a, b] = &n.input[..] else {
            return None;
        };
        if a == b {
            return None;
        }
        mask = Some(if a == scores { b.clone() } else { a.clone() });
        replaced.push(next);
        next = only(&n.output[0])?;
    }
    let softmax = &g.node[next];
    let axis = softmax
        .attribute
        .iter()
        .find(|a| a.name.as_deref() == Some("axis"))
        .map(|a| a.i);
    let last_axis = match axis {
        Some(Some(a)) => a == -1 || a == 3,
        Some(None) => false,
        None => opset >= 13,
    };
    if op(softmax) != "Softmax" || !standard(next) || !last_axis {
        return None;
    }
    replaced.push(next);
    let last = only(&softmax.output[0])?;
    let weighted = &g.node[last];
    let value_readers = readers(&value);
    if op(weighted) != "MatMul"
        || !standard(last)
        || weighted.input.len() != 2
        || weighted.input[0] != softmax.output[0]
        || weighted.input[1] != value
        || value_readers != [last]
        || weighted.output.len() != 1
    {
        return None;
    }
    Some(Found {
        q,
        key,
        value,
        mask,
        scale,
        out: weighted.output[0].clone(),
        last,
        replaced,
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
            let softmaxes = |m: &ModelProto| {
                m.graph
                    .as_ref()
                    .unwrap()
                    .node
                    .iter()
                    .filter(|n| op(n) == "Softmax")
                    .count()
            };
            let before = softmaxes(&m);
            assert!(in_graph(&mut m, layers), "{dir}/{file}");
            let g = m.graph.as_ref().unwrap();
            assert_eq!(g.node.iter().filter(|n| op(n) == OP).count(), layers);
            // Cross-attention keeps its own.
            assert_eq!(softmaxes(&m), before - layers, "{dir}/{file}");
            // Rewriting twice is refused, not stacked.
            assert!(!in_graph(&mut m, layers));
        }
    }

    /// The graphs as the engine loads them on the CPU: the reorder, then
    /// the attention, then both fused.
    fn fused(dir: &str, file: &str, layers: usize) -> (ModelProto, bool) {
        let mut m = model(dir, file);
        assert!(crate::beam_gather::in_graph(&mut m, layers));
        assert!(in_graph(&mut m, layers));
        let done = with_gather(&mut m, layers);
        (m, done)
    }

    #[test]
    fn the_reorder_and_the_attention_fuse_in_the_bundled_graphs() {
        for (dir, file, layers) in [
            ("tiny-cs-en", "decoder_with_past_model.onnx", 2),
            ("demo-cs-en", "decoder_with_past_model_quantized.onnx", 3),
        ] {
            let (m, done) = fused(dir, file, layers);
            assert!(done, "{dir}/{file}");
            let g = m.graph.as_ref().unwrap();
            let count = |t: &str| g.node.iter().filter(|n| op(n) == t).count();
            assert_eq!(count(GATHER_OP), layers);
            assert_eq!(count(OP) + count(crate::beam_gather::OP), 0);
            // Every input is made before it is read.
            let mut made: std::collections::HashSet<&str> =
                g.input.iter().filter_map(|i| i.name.as_deref()).collect();
            made.extend(g.initializer.iter().filter_map(|t| t.name.as_deref()));
            for n in &g.node {
                for i in n.input.iter().filter(|i| !i.is_empty()) {
                    assert!(
                        made.contains(i.as_str()),
                        "{dir}/{file}: {i} read before made"
                    );
                }
                made.extend(n.output.iter().map(String::as_str));
            }
        }
    }

    #[test]
    fn the_bundled_graphs_read_the_cache_in_place() {
        for (dir, file, layers) in [
            ("tiny-cs-en", "decoder_with_past_model.onnx", 2),
            ("demo-cs-en", "decoder_with_past_model_quantized.onnx", 3),
        ] {
            let (mut m, done) = fused(dir, file, layers);
            assert!(done);
            assert!(with_history(&mut m, layers), "{dir}/{file}");
            let g = m.graph.as_ref().unwrap();
            assert_eq!(
                g.node.iter().filter(|n| op(n) == HISTORY_OP).count(),
                layers
            );
            assert_eq!(g.node.iter().filter(|n| op(n) == GATHER_OP).count(), 0);
            let inputs: Vec<&str> = g.input.iter().filter_map(|i| i.name.as_deref()).collect();
            assert!(!inputs.contains(&crate::beam_gather::PARENTS));
            assert!(inputs.contains(&SLOTS));
            for l in 0..layers {
                assert!(inputs.contains(&history_input(l, "value").as_str()));
            }
            // The export's self-attention mask depends on sizes alone: it
            // is left out and the nodes that made it are gone.
            assert!(
                g.node
                    .iter()
                    .filter(|n| op(n) == HISTORY_OP)
                    .all(|n| n.input.len() == 6),
                "{dir}/{file}"
            );
            assert!(
                !g.node.iter().any(|n| op(n) == "ScatterND"),
                "{dir}/{file}: the causal mask's nodes are still there"
            );
            // Not twice.
            assert!(!with_history(&mut m, layers));
        }
        // A mask that reads an input's values is kept.
        let (mut m, _) = fused("tiny-cs-en", "decoder_with_past_model.onnx", 2);
        let g = m.graph.as_mut().unwrap();
        let bias = "test_mask_bias";
        g.input.push(tensor_info(bias, DataType::Float, &["1"]));
        let mut biased = Vec::new();
        for (i, n) in g.node.iter_mut().enumerate() {
            if op(n) == GATHER_OP {
                let from = n.input[6].clone();
                let to = format!("/test/biased/{i}");
                n.input[6] = to.clone();
                biased.push(node("Add", &to, &[&from, bias], &[&to], vec![]));
            }
        }
        assert_eq!(biased.len(), 2);
        g.node.extend(biased);
        assert!(crate::onnx_graph::sort_topologically(g));
        assert!(with_history(&mut m, 2));
        let g = m.graph.as_ref().unwrap();
        assert!(g
            .node
            .iter()
            .filter(|n| op(n) == HISTORY_OP)
            .all(|n| n.input.len() == 7 && n.input[6].starts_with("/test/biased/")));
        // Without the fused reorder there is nothing to turn.
        let mut m = model("tiny-cs-en", "decoder_with_past_model.onnx");
        assert!(in_graph(&mut m, 2));
        assert!(!with_history(&mut m, 2));
        // A live reader of the present would read one step, not all.
        let (mut m, _) = fused("tiny-cs-en", "decoder_with_past_model.onnx", 2);
        let g = m.graph.as_mut().unwrap();
        g.node.push(node(
            "Shape",
            "/test/shape",
            &["present.1.decoder.value"],
            &["/test/shape"],
            vec![],
        ));
        g.output
            .push(tensor_info("/test/shape", DataType::Int64, &["4"]));
        let before = m.encode_to_vec();
        assert!(!with_history(&mut m, 2));
        assert_eq!(m.encode_to_vec(), before);
    }

    #[test]
    fn a_mask_that_is_not_the_exports_cut_is_not_fused() {
        let mut m = model("tiny-cs-en", "decoder_with_past_model.onnx");
        assert!(crate::beam_gather::in_graph(&mut m, 2));
        assert!(in_graph(&mut m, 2));
        // The mask's Slice starting at 1 instead of 0.
        let g = m.graph.as_mut().unwrap();
        let mask = g
            .node
            .iter()
            .find(|n| op(n) == OP && n.input[1] == "present.1.decoder.key")
            .map(|n| n.input[3].clone())
            .unwrap();
        let sl = g.node.iter().position(|n| n.output[0] == mask).unwrap();
        g.initializer
            .push(crate::onnx_graph::int64s("/test/one", &[1]));
        g.node[sl].input[1] = "/test/one".into();
        let before = m.encode_to_vec();
        assert!(!with_gather(&mut m, 2));
        assert_eq!(m.encode_to_vec(), before);
    }

    #[test]
    fn each_broken_precondition_is_refused() {
        type Break = fn(&mut GraphProto);
        let breaks: [(&str, Break); 5] = [
            ("another reader of the key cache", |g| {
                g.node.push(node(
                    "Identity",
                    "/test/id",
                    &["present.1.decoder.key"],
                    &["/test/id"],
                    vec![],
                ));
            }),
            ("another reader of the value cache", |g| {
                g.node.push(node(
                    "Identity",
                    "/test/id",
                    &["present.0.decoder.value"],
                    &["/test/id"],
                    vec![],
                ));
            }),
            ("a softmax over another axis", |g| {
                let n = g.node.iter_mut().find(|n| op(n) == "Softmax").unwrap();
                n.attribute.clear();
                n.attribute.push(crate::onnx_graph::int_attr("axis", 2));
            }),
            ("scores read twice", |g| {
                let s = g
                    .node
                    .iter()
                    .find(|n| op(n) == "Softmax")
                    .map(|n| n.input[0].clone())
                    .unwrap();
                g.node
                    .push(node("Identity", "/test/id", &[&s], &["/test/id"], vec![]));
            }),
            ("a key transposed another way", |g| {
                let n = g
                    .node
                    .iter_mut()
                    .find(|n| swaps_last_two(n) && n.input[0] == "present.0.decoder.key")
                    .unwrap();
                n.attribute[0].ints = vec![0, 2, 1, 3];
            }),
        ];
        for (what, f) in breaks {
            let mut m = model("tiny-cs-en", "decoder_with_past_model.onnx");
            f(m.graph.as_mut().unwrap());
            let before = m.encode_to_vec();
            assert!(!in_graph(&mut m, 2), "{what}: rewritten");
            assert_eq!(m.encode_to_vec(), before, "{what}: changed");
        }
    }
}
