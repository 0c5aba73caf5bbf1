//! The beam reorder of the self-attention cache, moved into the decoder
//! call: a rewrite of an Optimum export's `decoder_with_past` graph, applied
//! at load, and the one custom operator it needs.
//!
//! Each decoding step copies the whole self-attention cache twice as
//! exported: the graph appends the new key and value with
//! `present = Concat(past, new)`, and the engine then gathers `present`'s
//! rows by beam parent for the next call. CTranslate2 does the same two
//! copies. Here the graph takes the previous call's `present` as it came
//! out, with the parents as one more input, and builds the new cache in one
//! pass: `present[r] = concat(past[parents[r]], new[r])` along the time
//! axis (`GatherConcat`, domain `ai.paraforge`). The values are the same
//! bits, copied once instead of twice; rows of finished sentences are
//! simply not gathered.
//!
//! Per layer it needs the export's `Concat(past_key_values.L.decoder.X,
//! new, axis=-2)` producing `present.L.decoder.X`, and every other reader
//! of the past to be a `Shape` whose only use is the time length (dimension
//! 2), which the gather keeps; the past's first dimension is now the last
//! call's row count. Where any of that does not hold the graph is left
//! alone and the engine reorders as before.

use std::collections::HashMap;

use ort::operator::{
    BoxedKernel, ComputeContext, KernelContext, Operator, OperatorDomain, OperatorInput,
    OperatorOutput,
};
use ort::value::TensorElementType;

use crate::onnx_graph::onnx::{
    tensor_proto::DataType, tensor_shape_proto::dimension, type_proto::Value, GraphProto,
    ModelProto, OperatorSetIdProto, TensorProto,
};
use crate::onnx_graph::{node, op, tensor_info};

/// The graph input carrying each row's parent (int64, one per row).
pub(crate) const PARENTS: &str = "paraforge_beam_parents";
pub(crate) const DOMAIN: &str = "ai.paraforge";
pub(crate) const OP: &str = "GatherConcat";

/// Rewrites `m` in place so that its decoder call reorders the
/// self-attention cache itself; false, changing nothing, when a layer does
/// not have the pattern above.
pub(crate) fn in_graph(m: &mut ModelProto, layers: usize) -> bool {
    let Some(g) = m.graph.as_mut() else {
        return false;
    };
    let subgraphs = crate::onnx_graph::has_subgraphs(g);
    if layers == 0 || subgraphs || g.input.iter().any(|i| i.name.as_deref() == Some(PARENTS)) {
        return false;
    }
    let consts = constants(g);
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

/// Whether graph input `name` is declared a float32 tensor of rank 4.
pub(crate) fn float_rank4(g: &GraphProto, name: &str) -> bool {
    g.input
        .iter()
        .find(|i| i.name.as_deref() == Some(name))
        .and_then(|i| i.r#type.as_ref()?.value.as_ref())
        .is_some_and(|v| match v {
            Value::TensorType(t) => {
                t.elem_type == Some(DataType::Float as i32)
                    && t.shape.as_ref().is_some_and(|s| s.dim.len() == 4)
            }
            _ => false,
        })
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

/// Scalar (or one-element) int64 constants by name: initializers and
/// `Constant` nodes.
pub(crate) fn constants(g: &GraphProto) -> HashMap<&str, i64> {
    crate::onnx_graph::scalar_constants(g, |t: &TensorProto| {
        if t.data_type != Some(DataType::Int64 as i32) {
            return None;
        }
        match (&t.int64_data[..], t.raw_data.as_deref()) {
            ([v], _) => Some(*v),
            ([], Some(raw)) if raw.len() == 8 => Some(i64::from_le_bytes(raw.try_into().ok()?)),
            _ => None,
        }
    })
}

/// The custom-operator domain the rewritten graphs need: this file's
/// `GatherConcat` and `self_attention.rs`'s `Attend`, `GatherAttend` and `HistoryAttend`.
pub(crate) fn operators() -> ort::Result<OperatorDomain> {
    OperatorDomain::new(DOMAIN)?
        .add(GatherConcat)?
        .add(crate::self_attention::Attend)?
        .add(crate::self_attention::GatherAttend)?
        .add(crate::self_attention::HistoryAttend)
}

struct GatherConcat;

impl Operator for GatherConcat {
    type Kernel<'attr> = BoxedKernel<'attr>;

    fn name(&self) -> &str {
        OP
    }

    fn inputs(&self) -> impl IntoIterator<Item = OperatorInput> {
        [
            OperatorInput::required(TensorElementType::Float32),
            OperatorInput::required(TensorElementType::Float32),
            OperatorInput::required(TensorElementType::Int64),
        ]
    }

    fn outputs(&self) -> impl IntoIterator<Item = OperatorOutput> {
        [OperatorOutput::required(TensorElementType::Float32)]
    }

    fn create_kernel<'attr>(&self, _: &KernelContext<'attr>) -> ort::Result<Self::Kernel<'attr>> {
        Ok(Box::new(|ctx: &ComputeContext| {
            let missing = || ort::Error::new("GatherConcat: an input is missing");
            let past = ctx.input(0)?.ok_or_else(missing)?;
            let new = ctx.input(1)?.ok_or_else(missing)?;
            let parents = ctx.input(2)?.ok_or_else(missing)?;
            let (ps, past) = past.try_extract_tensor::<f32>()?;
            let (ns, new) = new.try_extract_tensor::<f32>()?;
            let (_, parents) = parents.try_extract_tensor::<i64>()?;
            let dims = |s: &[i64]| -> Option<[usize; 4]> {
                let v: Vec<usize> = s
                    .iter()
                    .map(|&d| usize::try_from(d).ok())
                    .collect::<Option<_>>()?;
                v.try_into().ok()
            };
            let (Some(ps), Some(ns)) = (dims(ps), dims(ns)) else {
                return Err(ort::Error::new(format!(
                    "GatherConcat: past {ps:?} and new {ns:?} must be 4-d"
                )));
            };
            let shape = out_shape(ps, ns, parents).map_err(ort::Error::new)?;
            let mut out = ctx
                .output(0, shape.iter().map(|&d| d as i64).collect::<Vec<_>>())?
                .ok_or_else(|| ort::Error::new("GatherConcat: no output"))?;
            let (_, out) = out.try_extract_tensor_mut::<f32>()?;
            // Rows over ONNX Runtime's intra-op threads (inline with one):
            // each writes only its own part of the output.
            let row_len = shape[1] * shape[2] * shape[3];
            if out.len() != parents.len() * row_len {
                return Err(ort::Error::new(format!(
                    "GatherConcat: an output of {} values for shape {shape:?}",
                    out.len()
                )));
            }
            let base = RowsOut(out.as_mut_ptr());
            ctx.par_for(parents.len(), ROW_BATCHES, |r| {
                // SAFETY: `out` holds parents.len() rows of row_len values
                // (ONNX Runtime allocated it to `shape` above); row r is
                // written by this call only, and par_for returns after all.
                let row = unsafe { std::slice::from_raw_parts_mut(base.row(r * row_len), row_len) };
                gather_concat_row(past, ps, new, parents[r] as usize, r, row);
            })?;
            Ok(())
        }))
    }
}

/// The rows are cut into this many chunks for ONNX Runtime's pool (its
/// `num_batch`: at most this many run at once, whatever the thread count);
/// a row is a few tens of kilobytes.
const ROW_BATCHES: usize = 8;

/// The output's base pointer, shared with the pool's threads.
pub(crate) struct RowsOut(pub(crate) *mut f32);

impl RowsOut {
    /// A method rather than the field, so that closures capture the whole
    /// (Sync) wrapper.
    pub(crate) fn row(&self, offset: usize) -> *mut f32 {
        self.0.wrapping_add(offset)
    }
}

// SAFETY: the threads write disjoint rows (see the kernel).
unsafe impl Sync for RowsOut {}

/// The output's shape, or why the inputs do not fit together.
pub(crate) fn out_shape(
    past: [usize; 4],
    new: [usize; 4],
    parents: &[i64],
) -> Result<[usize; 4], String> {
    let [rows_before, h, t, d] = past;
    let [rows, nh, one, nd] = new;
    if (nh, one, nd) != (h, 1, d) || parents.len() != rows {
        return Err(format!(
            "GatherConcat: past {past:?}, new {new:?} and {} parents do not fit together",
            parents.len()
        ));
    }
    if let Some(p) = parents
        .iter()
        .find(|&&p| !usize::try_from(p).is_ok_and(|p| p < rows_before))
    {
        return Err(format!(
            "GatherConcat: parent {p} is not one of the {rows_before} past rows"
        ));
    }
    Ok([rows, h, t + 1, d])
}

/// Row `r` of the output, `concat(past[p], new[r])` along the time axis;
/// shapes checked by [`out_shape`].
pub(crate) fn gather_concat_row(
    past: &[f32],
    ps: [usize; 4],
    new: &[f32],
    p: usize,
    r: usize,
    out: &mut [f32],
) {
    let [_, h, t, d] = ps;
    let (past_head, out_head) = (t * d, (t + 1) * d);
    for j in 0..h {
        let o = &mut out[j * out_head..(j + 1) * out_head];
        let src = (p * h + j) * past_head;
        o[..past_head].copy_from_slice(&past[src..src + past_head]);
        o[past_head..].copy_from_slice(&new[(r * h + j) * d..(r * h + j + 1) * d]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    use crate::onnx_graph::bundled_model as model;

    #[test]
    fn a_gather_then_append_in_one_pass() {
        // Past: 3 rows, 2 heads, 2 steps, dim 1; value = 10 * row + 2 * head + step.
        let past: Vec<f32> = (0..3)
            .flat_map(|r| {
                (0..2).flat_map(move |h| (0..2).map(move |s| (10 * r + 2 * h + s) as f32))
            })
            .collect();
        let new: Vec<f32> = (0..4 * 2).map(|i| 100.0 + i as f32).collect();
        let parents = [2, 0, 0, 1];
        let shape = out_shape([3, 2, 2, 1], [4, 2, 1, 1], &parents).unwrap();
        assert_eq!(shape, [4, 2, 3, 1]);
        let mut out = vec![0.0; 4 * 2 * 3];
        for (r, row) in out.chunks_mut(2 * 3).enumerate() {
            gather_concat_row(&past, [3, 2, 2, 1], &new, parents[r] as usize, r, row);
        }
        #[rustfmt::skip]
        let want = [
            20.0, 21.0, 100.0, 22.0, 23.0, 101.0,
            0.0, 1.0, 102.0, 2.0, 3.0, 103.0,
            0.0, 1.0, 104.0, 2.0, 3.0, 105.0,
            10.0, 11.0, 106.0, 12.0, 13.0, 107.0,
        ];
        assert_eq!(out, want);
    }

    #[test]
    fn parents_and_shapes_that_do_not_fit_are_errors() {
        let e = out_shape([3, 2, 2, 1], [2, 2, 1, 1], &[0, 3]).unwrap_err();
        assert!(e.contains("parent 3 is not one of the 3 past rows"), "{e}");
        assert!(out_shape([3, 2, 2, 1], [2, 2, 1, 1], &[0, -1]).is_err());
        assert!(out_shape([3, 2, 2, 1], [2, 2, 1, 1], &[0]).is_err());
        assert!(out_shape([3, 2, 2, 1], [2, 3, 1, 1], &[0, 1]).is_err());
        assert!(out_shape([3, 2, 2, 1], [2, 2, 2, 1], &[0, 1]).is_err());
    }

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
