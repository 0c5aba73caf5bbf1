//! `GatherConcat` as ONNX Runtime calls it: inputs past, new and parents,
//! output the present; each row computed by `kernel_cpu.rs` on the
//! session's intra-op threads.

use ort::operator::{
    BoxedKernel, ComputeContext, KernelContext, Operator, OperatorInput, OperatorOutput,
};
use ort::value::TensorElementType;

use crate::ops::{RowsOut, ROW_BATCHES};

use super::kernel_cpu::{gather_concat_row, out_shape};
use super::OP;

pub(crate) struct GatherConcat;

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
