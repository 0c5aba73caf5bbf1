//! The decoder's self-attention over its cache as one operator per layer:
//! rewrites of an Optimum export's `decoder_with_past` graph, applied at
//! load on the CPU, and the kernels they need.
//!
//! As exported, each layer attends with `MatMul(q, Mul(Transpose(present_k),
//! c)) -> Add(mask) -> Softmax -> MatMul(., present_v)`. With one query per
//! row, ONNX Runtime runs those two MatMuls as rows x heads separate
//! 1 x head_dim GEMMs of a few dozen columns each, and their per-call cost
//! dominates: in an ONNX Runtime profile of the int8 demo model they took
//! 16% of the decoder graph's time for under 1% of its multiply-adds
//! (BENCHMARKS.md). [`in_graph`] makes the six nodes one, `Attend(q,
//! present_k, present_v, mask)` (domain `ai.paraforge`); where the cache is
//! also reordered in the graph (`beam_gather.rs`), [`with_gather`] fuses the
//! two into `GatherAttend`, which attends to each row's new cache right
//! after writing it.
//!
//! The result is the same attention up to float rounding (the dot products
//! and sums run in another order than ONNX Runtime's, and the exponential
//! is `fastmath`'s), and it does not depend on the batch: each row's values
//! come from that row alone, in a fixed order, with the same bits on every
//! x86-64 CPU. fp32 output was identical to the export's on the 200
//! held-out benchmark sentences and on the parity tests.
//!
//! Per layer it needs: `present.L.decoder.key` read by one `Transpose(perm
//! 0,1,3,2)` (and otherwise only by `Shape`s), optionally scaled by a
//! scalar constant, as the second input of a `MatMul`; that product,
//! optionally plus a mask, into a last-axis `Softmax`; the probabilities as
//! the first input of a `MatMul` whose second is `present.L.decoder.value`,
//! its only reader. Each intermediate has that one reader and is no graph
//! output. Where any layer differs the graph is left alone.

use std::collections::{HashMap, HashSet};

use ort::operator::{
    BoxedKernel, ComputeContext, KernelContext, Operator, OperatorInput, OperatorOutput,
};
use ort::value::TensorElementType;

use crate::onnx_graph::onnx::{
    attribute_proto::AttributeType, tensor_proto::DataType, tensor_shape_proto::dimension,
    type_proto::Value, AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto,
};
use crate::onnx_graph::{node, op, swaps_last_two, tensor_info};

pub(crate) const OP: &str = "Attend";
pub(crate) const GATHER_OP: &str = "GatherAttend";
pub(crate) const HISTORY_OP: &str = "HistoryAttend";

/// Rewrites `m` in place so that each layer's self-attention is one
/// `Attend`; false, changing nothing, when a layer does not have the
/// pattern above (a layer already rewritten no longer has it).
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
        if !crate::beam_gather::float_rank4(g, &past) {
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
        a.domain = Some(crate::beam_gather::DOMAIN.into());
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
        .any(|o| o.domain.as_deref() == Some(crate::beam_gather::DOMAIN))
    {
        m.opset_import
            .push(crate::onnx_graph::onnx::OperatorSetIdProto {
                domain: Some(crate::beam_gather::DOMAIN.into()),
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
    let ints = crate::beam_gather::constants(g0);
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
        n.domain = Some(crate::beam_gather::DOMAIN.into());
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
        h.domain = Some(crate::beam_gather::DOMAIN.into());
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

/// One-element float32 constants by name: initializers and `Constant` nodes.
fn float_scalars(g: &GraphProto) -> HashMap<&str, f32> {
    crate::onnx_graph::scalar_constants(g, |t: &TensorProto| {
        if t.data_type != Some(DataType::Float as i32) {
            return None;
        }
        match (&t.float_data[..], t.raw_data.as_deref()) {
            ([v], _) => Some(*v),
            ([], Some(raw)) if raw.len() == 4 => Some(f32::from_le_bytes(raw.try_into().ok()?)),
            _ => None,
        }
    })
}

fn float_attr(name: &str, v: f32) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        f: Some(v),
        r#type: Some(AttributeType::Float as i32),
        ..Default::default()
    }
}

pub(crate) struct Attend;

impl Operator for Attend {
    type Kernel<'attr> = BoxedKernel<'attr>;

    fn name(&self) -> &str {
        OP
    }

    fn inputs(&self) -> impl IntoIterator<Item = OperatorInput> {
        [
            OperatorInput::required(TensorElementType::Float32),
            OperatorInput::required(TensorElementType::Float32),
            OperatorInput::required(TensorElementType::Float32),
            OperatorInput::optional(TensorElementType::Float32),
        ]
    }

    fn outputs(&self) -> impl IntoIterator<Item = OperatorOutput> {
        [OperatorOutput::required(TensorElementType::Float32)]
    }

    fn create_kernel<'attr>(&self, ctx: &KernelContext<'attr>) -> ort::Result<Self::Kernel<'attr>> {
        let scale = scale_of(ctx)?;
        Ok(Box::new(move |ctx: &ComputeContext| {
            let missing = || ort::Error::new("Attend: an input is missing");
            let q = ctx.input(0)?.ok_or_else(missing)?;
            let k = ctx.input(1)?.ok_or_else(missing)?;
            let v = ctx.input(2)?.ok_or_else(missing)?;
            let mask = ctx.input(3)?;
            let (qs, q) = q.try_extract_tensor::<f32>()?;
            let (ks, k) = k.try_extract_tensor::<f32>()?;
            let (vs, v) = v.try_extract_tensor::<f32>()?;
            let mask = match &mask {
                Some(m) => Some(m.try_extract_tensor::<f32>()?),
                None => None,
            };
            let shape =
                Shape::of(qs, ks, vs, mask.map(|(s, _)| &s[..]), false).map_err(ort::Error::new)?;
            let mask = mask.map(|(_, d)| d);
            let mut out = ctx
                .output(0, qs.to_vec())?
                .ok_or_else(|| ort::Error::new("Attend: no output"))?;
            let (_, out) = out.try_extract_tensor_mut::<f32>()?;
            if out.len() != q.len() {
                return Err(ort::Error::new("Attend: output and query sizes differ"));
            }
            let (q_len, kv_len) = shape.row_lens();
            let base = RowsOut(out.as_mut_ptr());
            ctx.par_for(shape.rows, ROW_BATCHES, |r| {
                // SAFETY: `out` holds rows x q_len values (checked above);
                // row r is written by this call only, and par_for returns
                // after all.
                let out = unsafe { std::slice::from_raw_parts_mut(base.row(r * q_len), q_len) };
                let kv = r * kv_len..(r + 1) * kv_len;
                let row = Row {
                    q: &q[r * q_len..(r + 1) * q_len],
                    k: &k[kv.clone()],
                    v: &v[kv],
                    mask: mask.map(|m| &m[r * shape.mask_strides[0]..]),
                };
                attend_row(&shape, scale, row, out);
            })?;
            Ok(())
        }))
    }
}

/// `GatherConcat` of the key and the value cache and `Attend` over them in
/// one pass per row, while the row's new cache is still in the core's
/// cache (see [`with_gather`]). Inputs: q, past key, new key, past value,
/// new value, parents, and optionally the mask source, whose last axis is
/// cut to the key count; outputs: present key, present value, attention.
pub(crate) struct GatherAttend;

impl Operator for GatherAttend {
    type Kernel<'attr> = BoxedKernel<'attr>;

    fn name(&self) -> &str {
        GATHER_OP
    }

    fn inputs(&self) -> impl IntoIterator<Item = OperatorInput> {
        let f = || OperatorInput::required(TensorElementType::Float32);
        [
            f(),
            f(),
            f(),
            f(),
            f(),
            OperatorInput::required(TensorElementType::Int64),
            OperatorInput::optional(TensorElementType::Float32),
        ]
    }

    fn outputs(&self) -> impl IntoIterator<Item = OperatorOutput> {
        let f = || OperatorOutput::required(TensorElementType::Float32);
        [f(), f(), f()]
    }

    fn create_kernel<'attr>(&self, ctx: &KernelContext<'attr>) -> ort::Result<Self::Kernel<'attr>> {
        let scale = scale_of(ctx)?;
        Ok(Box::new(move |ctx: &ComputeContext| {
            let missing = || ort::Error::new("GatherAttend: an input is missing");
            let input = |i| ctx.input(i)?.ok_or_else(missing);
            let (q, pk, nk, pv, nv, parents) = (
                input(0)?,
                input(1)?,
                input(2)?,
                input(3)?,
                input(4)?,
                input(5)?,
            );
            let mask = ctx.input(6)?;
            let (qs, q) = q.try_extract_tensor::<f32>()?;
            let (pks, pk) = pk.try_extract_tensor::<f32>()?;
            let (nks, nk) = nk.try_extract_tensor::<f32>()?;
            let (pvs, pv) = pv.try_extract_tensor::<f32>()?;
            let (nvs, nv) = nv.try_extract_tensor::<f32>()?;
            let (_, parents) = parents.try_extract_tensor::<i64>()?;
            let mask = mask
                .as_ref()
                .map(|m| m.try_extract_tensor::<f32>())
                .transpose()?;
            let dims = |s: &[i64]| -> ort::Result<[usize; 4]> {
                let v: Option<Vec<usize>> = s.iter().map(|&d| usize::try_from(d).ok()).collect();
                v.and_then(|v| v.try_into().ok())
                    .ok_or_else(|| ort::Error::new(format!("GatherAttend: {s:?} is not 4-d")))
            };
            let (pks, nks, pvs, nvs) = (dims(pks)?, dims(nks)?, dims(pvs)?, dims(nvs)?);
            let ks = crate::beam_gather::out_shape(pks, nks, parents).map_err(ort::Error::new)?;
            let vs = crate::beam_gather::out_shape(pvs, nvs, parents).map_err(ort::Error::new)?;
            let (ks, vs) = (ks.map(|d| d as i64), vs.map(|d| d as i64));
            let shape = Shape::of(qs, &ks, &vs, mask.map(|(s, _)| &s[..]), true)
                .map_err(ort::Error::new)?;
            let mask = mask.map(|(_, d)| d);
            let (q_len, kv_len) = shape.row_lens();
            let rows = shape.rows;
            let [ko, vo, ao] = row_outputs(
                ctx,
                GATHER_OP,
                [
                    (ks.to_vec(), rows * kv_len),
                    (vs.to_vec(), rows * kv_len),
                    (qs.to_vec(), rows * q_len),
                ],
            )?;
            let (ko, vo, ao) = (&ko, &vo, &ao);
            ctx.par_for(shape.rows, ROW_BATCHES, |r| {
                // SAFETY: each output holds rows x its row length values
                // (checked above); row r of each is written by this call
                // only, and par_for returns after all.
                let (k, v, out) = unsafe {
                    (
                        std::slice::from_raw_parts_mut(ko.row(r * kv_len), kv_len),
                        std::slice::from_raw_parts_mut(vo.row(r * kv_len), kv_len),
                        std::slice::from_raw_parts_mut(ao.row(r * q_len), q_len),
                    )
                };
                let p = parents[r] as usize;
                crate::beam_gather::gather_concat_row(pk, pks, nk, p, r, k);
                crate::beam_gather::gather_concat_row(pv, pvs, nv, p, r, v);
                let row = Row {
                    q: &q[r * q_len..(r + 1) * q_len],
                    k,
                    v,
                    mask: mask.map(|m| &m[r * shape.mask_strides[0]..]),
                };
                attend_row(&shape, scale, row, out);
            })?;
            Ok(())
        }))
    }
}

/// Attention over a cache that is never moved ([`with_history`]). Inputs:
/// q `[rows, h, 1, d]`, the step's new key and value `[rows, h, 1, d]`,
/// each row's slot per earlier position `[rows, t]`, the key and value
/// history `[slots, h, d]`, and optionally the mask source, cut to `t + 1`
/// keys. Outputs: the new key and value (copied, for the engine to append)
/// and the attention `[rows, h, 1, d]`. The same keys in the same order as
/// `GatherAttend` would have gathered, so the same bits.
pub(crate) struct HistoryAttend;

impl Operator for HistoryAttend {
    type Kernel<'attr> = BoxedKernel<'attr>;

    fn name(&self) -> &str {
        HISTORY_OP
    }

    fn inputs(&self) -> impl IntoIterator<Item = OperatorInput> {
        let f = || OperatorInput::required(TensorElementType::Float32);
        [
            f(),
            f(),
            f(),
            OperatorInput::required(TensorElementType::Int64),
            f(),
            f(),
            OperatorInput::optional(TensorElementType::Float32),
        ]
    }

    fn outputs(&self) -> impl IntoIterator<Item = OperatorOutput> {
        let f = || OperatorOutput::required(TensorElementType::Float32);
        [f(), f(), f()]
    }

    fn create_kernel<'attr>(&self, ctx: &KernelContext<'attr>) -> ort::Result<Self::Kernel<'attr>> {
        let scale = scale_of(ctx)?;
        Ok(Box::new(move |ctx: &ComputeContext| {
            let missing = || ort::Error::new("HistoryAttend: an input is missing");
            let input = |i| ctx.input(i)?.ok_or_else(missing);
            let (q, nk, nv, slots, hk, hv) = (
                input(0)?,
                input(1)?,
                input(2)?,
                input(3)?,
                input(4)?,
                input(5)?,
            );
            let mask = ctx.input(6)?;
            let (qs, q) = q.try_extract_tensor::<f32>()?;
            let (nks, nk) = nk.try_extract_tensor::<f32>()?;
            let (nvs, nv) = nv.try_extract_tensor::<f32>()?;
            let (ss, slots) = slots.try_extract_tensor::<i64>()?;
            let (hks, hk) = hk.try_extract_tensor::<f32>()?;
            let (hvs, hv) = hv.try_extract_tensor::<f32>()?;
            let mask = mask
                .as_ref()
                .map(|m| m.try_extract_tensor::<f32>())
                .transpose()?;
            let h = History::of(qs, nks, nvs, ss, slots, hks, hvs).map_err(ort::Error::new)?;
            // The keys as GatherAttend sees them: t earlier ones and the new.
            let kv = [qs[0], qs[1], h.positions as i64 + 1, qs[3]];
            let shape = Shape::of(qs, &kv, &kv, mask.map(|(s, _)| &s[..]), true)
                .map_err(ort::Error::new)?;
            let mask = mask.map(|(_, d)| d);
            let q_len = shape.heads * shape.dim;
            let want = shape.rows * q_len;
            let [ko, vo, ao] = row_outputs(
                ctx,
                HISTORY_OP,
                [
                    (nks.to_vec(), want),
                    (nvs.to_vec(), want),
                    (qs.to_vec(), want),
                ],
            )?;
            let (ko, vo, ao) = (&ko, &vo, &ao);
            ctx.par_for(shape.rows, ROW_BATCHES, |r| {
                // SAFETY: each output holds rows x q_len values (checked
                // above); row r of each is written by this call only, and
                // par_for returns after all.
                let (k, v, out) = unsafe {
                    (
                        std::slice::from_raw_parts_mut(ko.row(r * q_len), q_len),
                        std::slice::from_raw_parts_mut(vo.row(r * q_len), q_len),
                        std::slice::from_raw_parts_mut(ao.row(r * q_len), q_len),
                    )
                };
                let row = r * q_len..(r + 1) * q_len;
                k.copy_from_slice(&nk[row.clone()]);
                v.copy_from_slice(&nv[row.clone()]);
                let at = HistoryRow {
                    slots: &slots[r * h.positions..(r + 1) * h.positions],
                    hk,
                    hv,
                    new_k: k,
                    new_v: v,
                };
                let mask = mask.map(|m| &m[r * shape.mask_strides[0]..]);
                attend_history(&shape, scale, &q[row], at, mask, out);
            })?;
            Ok(())
        }))
    }
}

/// Output i of `shapes`, each checked to hold the values its kernel will
/// write by row, as pointers for the rows `par_for` writes side by side.
fn row_outputs<const N: usize>(
    ctx: &ComputeContext,
    op: &str,
    shapes: [(Vec<i64>, usize); N],
) -> ort::Result<[RowsOut; N]> {
    let mut outs = Vec::with_capacity(N);
    for (i, (shape, want)) in shapes.into_iter().enumerate() {
        let mut o = ctx
            .output(i, shape)?
            .ok_or_else(|| ort::Error::new(format!("{op}: an output is missing")))?;
        let (_, d) = o.try_extract_tensor_mut::<f32>()?;
        if d.len() != want {
            return Err(ort::Error::new(format!(
                "{op}: an output of the wrong size"
            )));
        }
        outs.push(RowsOut(d.as_mut_ptr()));
    }
    outs.try_into()
        .map_err(|_| ort::Error::new(format!("{op}: outputs miscounted")))
}

/// The checked sizes of a `HistoryAttend` call.
struct History {
    positions: usize,
}

impl History {
    fn of(
        q: &[i64],
        nk: &[i64],
        nv: &[i64],
        slots_shape: &[i64],
        slots: &[i64],
        hk: &[i64],
        hv: &[i64],
    ) -> Result<History, String> {
        let (rows, heads, dim) = match q {
            [r, h, 1, d] => (*r, *h, *d),
            _ => {
                return Err(format!(
                    "HistoryAttend: query {q:?} is not [rows, heads, 1, dim]"
                ))
            }
        };
        let [sr, positions] = slots_shape else {
            return Err(format!("HistoryAttend: slots {slots_shape:?} are not 2-d"));
        };
        let total = match hk {
            [n, h, d] if (*h, *d) == (heads, dim) && hv == hk => *n,
            _ => {
                return Err(format!(
                    "HistoryAttend: history {hk:?} and {hv:?} for query {q:?}"
                ))
            }
        };
        if nk != q || nv != q || *sr != rows {
            return Err(format!(
                "HistoryAttend: query {q:?}, new key {nk:?}, new value {nv:?} and slots {slots_shape:?} do not fit together"
            ));
        }
        if let Some(s) = slots.iter().find(|&&s| !(0..total).contains(&s)) {
            return Err(format!(
                "HistoryAttend: slot {s} is not one of the {total} in the history"
            ));
        }
        Ok(History {
            positions: *positions as usize,
        })
    }
}

/// One row's keys and values: earlier positions from the history by slot,
/// the last one new.
struct HistoryRow<'a> {
    slots: &'a [i64],
    hk: &'a [f32],
    hv: &'a [f32],
    new_k: &'a [f32],
    new_v: &'a [f32],
}

/// [`attend_row`] over keys and values gathered by slot, in the same order
/// and with the same arithmetic, so the same bits.
fn attend_history(
    s: &Shape,
    scale: f32,
    q: &[f32],
    at: HistoryRow<'_>,
    mask: Option<&[f32]>,
    out: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the features were detected on this CPU.
            return unsafe { attend_history_avx2(s, scale, q, at, mask, out) };
        }
    }
    attend_history_generic::<false>(s, scale, q, at, mask, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn attend_history_avx2(
    s: &Shape,
    scale: f32,
    q: &[f32],
    at: HistoryRow<'_>,
    mask: Option<&[f32]>,
    out: &mut [f32],
) {
    attend_history_generic::<true>(s, scale, q, at, mask, out)
}

/// Position by position, all heads at once: a slot's heads lie together
/// (`[slots, heads, dim]`), so each position is one contiguous read of
/// heads x dim values rather than one per head at different times.
#[inline(always)]
fn attend_history_generic<'a_, const AVX2: bool>(
    s: &Shape,
    scale: f32,
    q: &[f32],
    at: HistoryRow<'a_>,
    mask: Option<&[f32]>,
    out: &mut [f32],
) {
    let (d, n, heads) = (s.dim, s.keys, s.heads);
    let width = heads * d;
    let [_, mh, _, mk] = s.mask_strides;
    // Position j's keys or values, all heads: from its slot, or new.
    let at_pos = |hist: &'a_ [f32], new: &'a_ [f32], j: usize| -> &'a_ [f32] {
        match at.slots.get(j) {
            Some(&slot) => &hist[slot as usize * width..(slot as usize + 1) * width],
            None => new,
        }
    };
    let keys = |j| at_pos(at.hk, at.new_k, j);
    let values = |j| at_pos(at.hv, at.new_v, j);
    // p[h * n + j]: head h's score, then weight, of position j.
    let mut p = vec![0f32; heads * n];
    for j in 0..n {
        let k = keys(j);
        for h in 0..heads {
            p[h * n + j] = dot::<AVX2>(&q[h * d..(h + 1) * d], &k[h * d..(h + 1) * d]) * scale;
        }
    }
    for (h, ph) in p.chunks_exact_mut(n).enumerate() {
        if let Some(m) = mask {
            for (j, pj) in ph.iter_mut().enumerate() {
                *pj += m[h * mh + j * mk];
            }
        }
        let max = lanes(ph, f32::NEG_INFINITY, f32::max);
        for pj in ph.iter_mut() {
            *pj = crate::fastmath::exp(*pj - max);
        }
        let sum = lanes(ph, 0.0, |a, b| a + b);
        for pj in ph.iter_mut() {
            *pj /= sum;
        }
    }
    out.fill(0.0);
    for j in 0..n {
        let v = values(j);
        for h in 0..heads {
            let w = p[h * n + j];
            for (oj, vj) in out[h * d..(h + 1) * d]
                .iter_mut()
                .zip(&v[h * d..(h + 1) * d])
            {
                *oj += w * vj;
            }
        }
    }
}

fn scale_of(ctx: &KernelContext<'_>) -> ort::Result<f32> {
    ctx.get("scale")
        .ok_or_else(|| ort::Error::new("Attend: no scale attribute"))
}

const ROW_BATCHES: usize = 8;

use crate::beam_gather::RowsOut;

/// The sizes of one call, checked against each other: q [rows, heads,
/// queries, dim], k and v [rows, heads, keys, dim], the mask broadcast to
/// [rows, heads, queries, keys] (each axis 1 or full; with `cut`, its last
/// axis may be longer and is cut to the keys).
#[derive(Debug, Clone, PartialEq)]
struct Shape {
    rows: usize,
    heads: usize,
    queries: usize,
    keys: usize,
    dim: usize,
    /// The mask's strides over [row, head, query, key] (0 where broadcast).
    mask_strides: [usize; 4],
}

impl Shape {
    fn of(
        q: &[i64],
        k: &[i64],
        v: &[i64],
        mask: Option<&[i64]>,
        cut: bool,
    ) -> Result<Shape, String> {
        let dims = |what: &str, s: &[i64]| -> Result<[usize; 4], String> {
            let v: Vec<usize> = s
                .iter()
                .map(|&d| usize::try_from(d).ok())
                .collect::<Option<_>>()
                .ok_or_else(|| format!("Attend: {what} {s:?}"))?;
            v.try_into()
                .map_err(|_| format!("Attend: {what} {s:?} is not 4-d"))
        };
        let [rows, heads, queries, dim] = dims("query", q)?;
        let kd = dims("key", k)?;
        let keys = kd[2];
        if kd != [rows, heads, keys, dim] || dims("value", v)? != kd || keys == 0 || dim == 0 {
            return Err(format!(
                "Attend: query {q:?}, key {k:?} and value {v:?} do not fit together"
            ));
        }
        let full = [rows, heads, queries, keys];
        let mut mask_strides = [0; 4];
        if let Some(m) = mask {
            if m.len() > 4 {
                return Err(format!("Attend: mask {m:?} has more than 4 axes"));
            }
            let mut md = [1usize; 4];
            for (i, &d) in m.iter().enumerate() {
                md[4 - m.len() + i] =
                    usize::try_from(d).map_err(|_| format!("Attend: mask {m:?}"))?;
            }
            let mut stride = 1;
            for a in (0..4).rev() {
                let fits = md[a] == full[a] || (cut && a == 3 && md[a] > full[a]);
                if md[a] != 1 && fits {
                    mask_strides[a] = stride;
                } else if md[a] != 1 {
                    return Err(format!("Attend: mask {m:?} does not broadcast to {full:?}"));
                }
                stride *= md[a];
            }
        }
        Ok(Shape {
            rows,
            heads,
            queries,
            keys,
            dim,
            mask_strides,
        })
    }

    /// The values per row of the query (and output), and of the key (and
    /// value).
    fn row_lens(&self) -> (usize, usize) {
        (
            self.heads * self.queries * self.dim,
            self.heads * self.keys * self.dim,
        )
    }
}

/// One row's inputs; the mask from the row's first value on.
#[derive(Clone, Copy)]
struct Row<'a> {
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    mask: Option<&'a [f32]>,
}

/// One row of the output: for each head and query, the softmax over the
/// keys of `q . k * scale + mask`, times v. On x86-64 with AVX2 and FMA the same
/// code is built for 256-bit registers: the lanes add in the same order
/// (Rust never contracts a multiply and an add into an FMA) and `mul_add`
/// rounds once on every build, so all builds give the same bits.
fn attend_row(s: &Shape, scale: f32, row: Row<'_>, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the features were detected on this CPU.
            return unsafe { attend_row_avx2(s, scale, row, out) };
        }
    }
    attend_row_generic::<false>(s, scale, row, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn attend_row_avx2(s: &Shape, scale: f32, row: Row<'_>, out: &mut [f32]) {
    attend_row_generic::<true>(s, scale, row, out)
}

/// `AVX2` only where called from a function built with AVX2 enabled
/// (`dot`).
#[inline(always)]
fn attend_row_generic<const AVX2: bool>(s: &Shape, scale: f32, row: Row<'_>, out: &mut [f32]) {
    let (d, n) = (s.dim, s.keys);
    let [_, mh, mq, mk] = s.mask_strides;
    let mut p = vec![0f32; n];
    for h in 0..s.heads {
        let (kh, vh) = (
            &row.k[h * n * d..(h + 1) * n * d],
            &row.v[h * n * d..(h + 1) * n * d],
        );
        for i in 0..s.queries {
            let qo = (h * s.queries + i) * d;
            let qi = &row.q[qo..qo + d];
            for (pj, kj) in p.iter_mut().zip(kh.chunks_exact(d)) {
                *pj = dot::<AVX2>(qi, kj) * scale;
            }
            if let Some(m) = row.mask {
                for (j, pj) in p.iter_mut().enumerate() {
                    *pj += m[h * mh + i * mq + j * mk];
                }
            }
            // Each pass on its own so that it vectorizes (the maximum is
            // the same in any order; the sum is taken in fixed lanes).
            let max = lanes(&p, f32::NEG_INFINITY, f32::max);
            for pj in p.iter_mut() {
                *pj = crate::fastmath::exp(*pj - max);
            }
            let sum = lanes(&p, 0.0, |a, b| a + b);
            let o = &mut out[qo..qo + d];
            o.fill(0.0);
            for (&pj, vj) in p.iter().zip(vh.chunks_exact(d)) {
                let w = pj / sum;
                for (oj, v) in o.iter_mut().zip(vj) {
                    *oj += w * v;
                }
            }
        }
    }
}

/// `x` folded with `f` in eight lanes, then the lanes in a fixed order.
#[inline(always)]
fn lanes(x: &[f32], init: f32, f: impl Fn(f32, f32) -> f32) -> f32 {
    let mut acc = [init; 8];
    let mut chunks = x.chunks_exact(8);
    for c in &mut chunks {
        for l in 0..8 {
            acc[l] = f(acc[l], c[l]);
        }
    }
    for (l, &v) in chunks.remainder().iter().enumerate() {
        acc[l] = f(acc[l], v);
    }
    f(
        f(f(acc[0], acc[4]), f(acc[1], acc[5])),
        f(f(acc[2], acc[6]), f(acc[3], acc[7])),
    )
}

/// A dot product in eight lanes (one 256-bit register), then the lanes in
/// a fixed order: the same on every CPU and build. `AVX2` is true only in
/// the kernels built with AVX2 enabled (the `*_avx2` functions, called
/// after detection), where the lanes are one register: the compiler left
/// to itself split them into pairs and singles (perf: a third of the
/// self-attention kernel on a scalar add; 3x faster here, same bits).
#[inline(always)]
fn dot<const AVX2: bool>(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if AVX2 {
        // SAFETY: AVX2 is only true inside functions built with AVX2
        // enabled, which run only where it was detected.
        return unsafe { dot_avx2(a, b) };
    }
    dot_lanes(a, b)
}

#[inline(always)]
fn dot_lanes(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let mut xs = a.chunks_exact(8);
    let mut ys = b.chunks_exact(8);
    for (x, y) in (&mut xs).zip(&mut ys) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    for (l, (x, y)) in xs.remainder().iter().zip(ys.remainder()).enumerate() {
        acc[l] += x * y;
    }
    reduce_lanes(acc)
}

#[inline(always)]
fn reduce_lanes(acc: [f32; 8]) -> f32 {
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))
}

/// `dot_lanes` in one 256-bit register: a multiply, then an add, per lane
/// (no FMA, as Rust never contracts them), so the same bits.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    use std::arch::x86_64::{
        _mm256_add_ps, _mm256_loadu_ps, _mm256_mul_ps, _mm256_setzero_ps, _mm256_storeu_ps,
    };
    let n = a.len().min(b.len());
    let whole = n - n % 8;
    let mut acc = _mm256_setzero_ps();
    let mut i = 0;
    while i < whole {
        // SAFETY: i + 8 <= whole <= both lengths.
        let (x, y) = unsafe {
            (
                _mm256_loadu_ps(a.as_ptr().add(i)),
                _mm256_loadu_ps(b.as_ptr().add(i)),
            )
        };
        acc = _mm256_add_ps(acc, _mm256_mul_ps(x, y));
        i += 8;
    }
    let mut l = [0f32; 8];
    // SAFETY: l holds 8 floats.
    unsafe { _mm256_storeu_ps(l.as_mut_ptr(), acc) };
    for (j, (x, y)) in a[whole..n].iter().zip(&b[whole..n]).enumerate() {
        l[j] += x * y;
    }
    reduce_lanes(l)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    use crate::onnx_graph::bundled_model as model;

    /// The textbook attention, in f64.
    fn reference(s: &Shape, scale: f32, q: &[f32], k: &[f32], v: &[f32], mask: &[f32]) -> Vec<f64> {
        let (d, n) = (s.dim, s.keys);
        let mut out = Vec::new();
        for r in 0..s.rows {
            for h in 0..s.heads {
                for i in 0..s.queries {
                    let qo = ((r * s.heads + h) * s.queries + i) * d;
                    let kv = (r * s.heads + h) * n * d;
                    let x: Vec<f64> = (0..n)
                        .map(|j| {
                            let dot: f64 = (0..d)
                                .map(|c| q[qo + c] as f64 * k[kv + j * d + c] as f64)
                                .sum();
                            let [a, b, c, e] = s.mask_strides;
                            dot * scale as f64 + mask[r * a + h * b + i * c + j * e] as f64
                        })
                        .collect();
                    let max = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = x.iter().map(|x| (x - max).exp()).collect();
                    let sum: f64 = e.iter().sum();
                    for c in 0..d {
                        out.push((0..n).map(|j| e[j] / sum * v[kv + j * d + c] as f64).sum());
                    }
                }
            }
        }
        out
    }

    #[test]
    fn attention_with_a_broadcast_mask_is_the_textbook_one() {
        // 3 rows, 2 heads, 1 query, 5 keys, dim 11 (a tail past the lanes).
        let (rows, heads, keys, dim) = (3usize, 2usize, 5usize, 11usize);
        let val = |i: usize, m: f32| ((i * 7919 % 23) as f32 - 11.0) * m;
        let q: Vec<f32> = (0..rows * heads * dim).map(|i| val(i, 0.13)).collect();
        let k: Vec<f32> = (0..rows * heads * keys * dim)
            .map(|i| val(i + 5, 0.07))
            .collect();
        let v: Vec<f32> = (0..rows * heads * keys * dim)
            .map(|i| val(i + 9, 0.3))
            .collect();
        // One mask row for all rows and heads; the last key hidden.
        let mask = [0.0, 0.0, -1.5, 0.0, f32::MIN];
        let s = Shape::of(
            &[3, 2, 1, 11],
            &[3, 2, 5, 11],
            &[3, 2, 5, 11],
            Some(&[1, 1, 1, 5]),
            false,
        )
        .unwrap();
        assert_eq!(s.mask_strides, [0, 0, 0, 1]);
        let run = |v: &[f32]| {
            let mut out = vec![0f32; rows * heads * dim];
            let (q_len, kv_len) = s.row_lens();
            for (r, o) in out.chunks_mut(q_len).enumerate() {
                let row = Row {
                    q: &q[r * q_len..(r + 1) * q_len],
                    k: &k[r * kv_len..(r + 1) * kv_len],
                    v: &v[r * kv_len..(r + 1) * kv_len],
                    mask: Some(&mask),
                };
                attend_row(&s, 0.125, row, o);
            }
            out
        };
        let out = run(&v);
        let want = reference(&s, 0.125, &q, &k, &v, &mask);
        for (i, (a, b)) in out.iter().zip(&want).enumerate() {
            assert!((*a as f64 - b).abs() < 1e-5, "value {i}: {a} against {b}");
        }
        // The hidden key weighs next to nothing (exp clamps at -87, so
        // about 1e-38): a large change of its value is lost in rounding.
        let mut v2 = v.clone();
        for r in 0..rows * heads {
            v2[(r * keys + 4) * dim] += 100.0;
        }
        assert_eq!(out, run(&v2));
        // The generic build gives the bits the dispatched one does.
        let (q_len, kv_len) = s.row_lens();
        let mut generic = vec![0f32; q_len];
        let row = Row {
            q: &q[q_len..2 * q_len],
            k: &k[kv_len..2 * kv_len],
            v: &v[kv_len..2 * kv_len],
            mask: Some(&mask),
        };
        attend_row_generic::<false>(&s, 0.125, row, &mut generic);
        assert_eq!(generic, out[q_len..2 * q_len]);
    }

    #[test]
    fn the_avx2_dot_gives_the_bits_of_the_lanes_it_stands_for() {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            let x: Vec<f32> = (0..71)
                .map(|i| ((i * 7919) % 97) as f32 / 9.7 - 5.0)
                .collect();
            let y: Vec<f32> = (0..71)
                .map(|i| ((i * 104729) % 89) as f32 / 3.1 - 14.0)
                .collect();
            for n in 0..=71 {
                let want = dot_lanes(&x[..n], &y[..n]);
                // SAFETY: AVX2 was detected.
                let got = unsafe { dot_avx2(&x[..n], &y[..n]) };
                assert_eq!(got.to_bits(), want.to_bits(), "length {n}");
            }
        }
    }

    #[test]
    fn shapes_that_do_not_fit_are_errors() {
        let (q, kv) = ([2i64, 4, 1, 8], [2i64, 4, 6, 8]);
        assert!(Shape::of(&q, &kv, &kv, None, false).is_ok());
        assert!(Shape::of(&q, &kv, &kv, Some(&[2, 1, 1, 6]), false).is_ok());
        // A longer last axis only where the op cuts it to the keys.
        assert!(Shape::of(&q, &kv, &kv, Some(&[2, 1, 1, 9]), false).is_err());
        let cut = Shape::of(&q, &kv, &kv, Some(&[2, 1, 1, 9]), true).unwrap();
        assert_eq!(cut.mask_strides, [9, 0, 0, 1]);
        assert!(Shape::of(&q, &kv, &kv, Some(&[2, 1, 1, 5]), true).is_err());
        assert!(Shape::of(&q, &kv, &kv, Some(&[6]), false).is_ok());
        let e = Shape::of(&q, &kv, &kv, Some(&[3, 1, 1, 6]), false).unwrap_err();
        assert!(e.contains("does not broadcast"), "{e}");
        assert!(Shape::of(&q, &kv, &kv, Some(&[1, 1, 1, 5]), false).is_err());
        assert!(Shape::of(&q, &[2, 4, 6, 7], &kv, None, false).is_err());
        assert!(Shape::of(&q, &kv, &[2, 4, 5, 8], None, false).is_err());
        assert!(Shape::of(&q, &[3, 4, 6, 8], &[3, 4, 6, 8], None, false).is_err());
        assert!(Shape::of(&[2, 4, 8], &kv, &kv, None, false).is_err());
        assert!(Shape::of(&q, &[2, 4, 0, 8], &[2, 4, 0, 8], None, false).is_err());
    }

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
    fn attending_by_slot_gives_the_gathered_caches_bits() {
        // 2 rows, 3 heads, dim 10, 4 earlier positions in a history of 6
        // slots, plus the new one; rows share some slots, as beams do.
        let (heads, dim, t, total) = (3usize, 10usize, 4usize, 6usize);
        let width = heads * dim;
        let val = |i: usize, m: f32| ((i * 7919 % 29) as f32 - 14.0) * m;
        let hk: Vec<f32> = (0..total * width).map(|i| val(i, 0.05)).collect();
        let hv: Vec<f32> = (0..total * width).map(|i| val(i + 3, 0.2)).collect();
        let nk: Vec<f32> = (0..2 * width).map(|i| val(i + 11, 0.05)).collect();
        let nv: Vec<f32> = (0..2 * width).map(|i| val(i + 17, 0.2)).collect();
        let q: Vec<f32> = (0..2 * width).map(|i| val(i + 23, 0.1)).collect();
        let slots: [i64; 8] = [0, 2, 3, 5, 1, 2, 4, 5];
        let mask = [0.0, -0.5, 0.0, 0.0, 0.0, 0.0, 0.0];
        let s = Shape::of(
            &[2, 3, 1, 10],
            &[2, 3, 5, 10],
            &[2, 3, 5, 10],
            Some(&[1, 1, 1, 7]),
            true,
        )
        .unwrap();
        for r in 0..2 {
            // The row's cache as GatherConcat would have built it.
            let gather = |hist: &[f32], new: &[f32]| -> Vec<f32> {
                let mut c = Vec::new();
                for h in 0..heads {
                    for &slot in &slots[r * t..(r + 1) * t] {
                        let o = slot as usize * width + h * dim;
                        c.extend_from_slice(&hist[o..o + dim]);
                    }
                    c.extend_from_slice(&new[r * width + h * dim..r * width + (h + 1) * dim]);
                }
                c
            };
            let (k, v) = (gather(&hk, &nk), gather(&hv, &nv));
            let row = Row {
                q: &q[r * width..(r + 1) * width],
                k: &k,
                v: &v,
                mask: Some(&mask),
            };
            let mut want = vec![0f32; width];
            attend_row(&s, 0.3, row, &mut want);
            let at = HistoryRow {
                slots: &slots[r * t..(r + 1) * t],
                hk: &hk,
                hv: &hv,
                new_k: &nk[r * width..(r + 1) * width],
                new_v: &nv[r * width..(r + 1) * width],
            };
            let mut got = vec![0f32; width];
            attend_history(
                &s,
                0.3,
                &q[r * width..(r + 1) * width],
                at,
                Some(&mask),
                &mut got,
            );
            assert_eq!(got, want, "row {r}");
        }
        // A slot beyond the history, and sizes that do not fit.
        let q4 = [2i64, 3, 1, 10];
        let h = [6i64, 3, 10];
        let e = History::of(&q4, &q4, &q4, &[2, 4], &[0, 1, 2, 6, 0, 0, 0, 0], &h, &h)
            .err()
            .unwrap();
        assert!(e.contains("slot 6"), "{e}");
        assert!(History::of(&q4, &q4, &q4, &[2, 4], &slots, &h, &h).is_ok());
        assert!(History::of(&q4, &q4, &q4, &[3, 4], &slots, &h, &h).is_err());
        assert!(History::of(&q4, &q4, &q4, &[2, 4], &slots, &[6, 3, 9], &[6, 3, 9]).is_err());
        assert!(History::of(&[2, 3, 2, 10], &q4, &q4, &[2, 4], &slots, &h, &h).is_err());
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
