//! The decoder's key/value caches between steps, on the host or on the
//! device, and their reorder by beam parent on the host.

use ort::session::SessionInputValue;
use ort::value::{DynValue, TensorRef};
use rayon::prelude::*;

use crate::error::NmtError;

/// The self-attention cache fed to the next step: either the graph's
/// own `present` outputs (when beams kept their order) or copies
/// reordered by beam parent into buffers that are reused across steps, so
/// that the reorder does not allocate (and fault in) fresh memory.
pub(crate) enum Cache {
    Ort(Vec<DynValue>),
    Own {
        bufs: Vec<Vec<f32>>,
        dims: [usize; 4],
    },
    /// Tensors in the execution provider's memory (I/O binding path).
    Device(Vec<DynValue>),
}

impl Cache {
    pub(crate) fn input(&self, i: usize) -> Result<SessionInputValue<'_>, NmtError> {
        Ok(match self {
            Cache::Ort(v) | Cache::Device(v) => v[i].view().into(),
            Cache::Own { bufs, dims } => TensorRef::from_array_view((dims.to_vec(), &bufs[i][..]))
                .map_err(|e| NmtError::inference("cache", e))?
                .into(),
        })
    }

    pub(crate) fn take_bufs(&mut self) -> Vec<Vec<f32>> {
        match self {
            Cache::Own { bufs, .. } => std::mem::take(bufs),
            Cache::Ort(_) | Cache::Device(_) => Vec::new(),
        }
    }

    pub(crate) fn device_values(&self) -> Option<&[DynValue]> {
        match self {
            Cache::Device(v) => Some(v),
            _ => None,
        }
    }
}

impl Cache {
    /// The tensors' data and their common (rows, heads, length, dim) shape.
    fn slices(&self) -> Result<(Vec<&[f32]>, [usize; 4]), NmtError> {
        match self {
            Cache::Own { bufs, dims } => Ok((bufs.iter().map(Vec::as_slice).collect(), *dims)),
            Cache::Ort(values) | Cache::Device(values) => {
                let mut dims = [0usize; 4];
                let data = values
                    .iter()
                    .map(|v| {
                        let (shape, data) = v
                            .try_extract_tensor::<f32>()
                            .map_err(|e| NmtError::inference("cache", e))?;
                        if shape.len() != 4 {
                            return Err(NmtError::inference(
                                "cache",
                                format!("expected a 4-d cache tensor, got {shape:?}"),
                            ));
                        }
                        for (d, &x) in dims.iter_mut().zip(shape.iter()) {
                            *d = x as usize;
                        }
                        Ok(data)
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok((data, dims))
            }
        }
    }

    /// A cache holding `rows` of this one, in that order, built in `bufs`
    /// (one per tensor, capacity reused), copying tensors in parallel.
    pub(crate) fn gather(
        &self,
        rows: &[usize],
        mut bufs: Vec<Vec<f32>>,
    ) -> Result<Cache, NmtError> {
        let (src, mut dims) = self.slices()?;
        bufs.resize_with(src.len(), Vec::new);
        let row = dims[1] * dims[2] * dims[3];
        src.par_iter()
            .zip(bufs.par_iter_mut())
            .for_each(|(data, buf)| {
                buf.clear();
                for &r in rows {
                    buf.extend_from_slice(&data[r * row..(r + 1) * row]);
                }
            });
        dims[0] = rows.len();
        Ok(Cache::Own { bufs, dims })
    }
}
