//! `Attend`, `GatherAttend` and `HistoryAttend` as ONNX Runtime calls
//! them: inputs and outputs checked and allocated, then each row computed by
//! `kernel_cpu.rs` on the session's intra-op threads.

use ort::operator::{
    BoxedKernel, ComputeContext, KernelContext, Operator, OperatorInput, OperatorOutput,
};
use ort::value::TensorElementType;

use crate::ops::{RowsOut, ROW_BATCHES};

use super::kernel_cpu::{attend_history, attend_row, History, HistoryRow, Row, Shape};
use super::{GATHER_OP, HISTORY_OP, OP};

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
/// cache (see [`with_gather`](super::with_gather)). Inputs: q, past key, new key, past value,
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

/// Attention over a cache that is never moved ([`with_history`](super::with_history)). Inputs:
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

fn scale_of(ctx: &KernelContext<'_>) -> ort::Result<f32> {
    ctx.get("scale")
        .ok_or_else(|| ort::Error::new("Attend: no scale attribute"))
}
