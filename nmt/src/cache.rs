//! The decoder's key/value caches between steps, on the host or on the
//! device, and their reorder by beam parent on the host.

use ort::session::SessionInputValue;
use ort::value::{DynValue, TensorRef};
use rayon::prelude::*;

use crate::error::NmtError;

/// The self-attention cache fed to the next step: either the graph's
/// own `present` outputs (when beams kept their order, or when the graph
/// reorders them itself, `beam_gather.rs`) or copies reordered by beam
/// parent into buffers that are reused across steps, so that the reorder
/// does not allocate (and fault in) fresh memory.
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
                // Grown empty: a Vec growing while filled would copy its
                // old, already cleared contents along (realloc).
                let need = rows.len() * row;
                if buf.capacity() < need {
                    *buf = Vec::with_capacity(need + need / 2);
                }
                for &r in rows {
                    buf.extend_from_slice(&data[r * row..(r + 1) * row]);
                }
            });
        dims[0] = rows.len();
        Ok(Cache::Own { bufs, dims })
    }

    /// Keeps rows `rows` of this cache in place (row i becomes row
    /// `rows[i]`) when it owns its buffers and every `rows[i] >= i`, so
    /// that no row is read after it was overwritten: dropping finished
    /// sentences then moves only the rows that changed place. Returns
    /// false, changing nothing, when that does not hold.
    pub(crate) fn compact(&mut self, rows: &[usize]) -> bool {
        let Cache::Own { bufs, dims } = self else {
            return false;
        };
        if rows.iter().enumerate().any(|(i, &r)| r < i || r >= dims[0]) {
            return false;
        }
        let row = dims[1] * dims[2] * dims[3];
        bufs.par_iter_mut().for_each(|buf| {
            for (i, &r) in rows.iter().enumerate() {
                if r != i {
                    buf.copy_within(r * row..(r + 1) * row, i * row);
                }
            }
            buf.truncate(rows.len() * row);
        });
        dims[0] = rows.len();
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn own(rows: usize) -> Cache {
        // Two tensors, rows of 2x1x3 values; value = 100 * tensor + 10 * row + i.
        let bufs = (0..2)
            .map(|t| {
                (0..rows)
                    .flat_map(|r| (0..6).map(move |i| (100 * t + 10 * r + i) as f32))
                    .collect()
            })
            .collect();
        Cache::Own {
            bufs,
            dims: [rows, 2, 1, 3],
        }
    }

    #[test]
    fn compacting_in_place_gives_what_a_gather_gives() {
        let rows = [0, 4, 2, 5];
        let want = own(6).gather(&rows, Vec::new()).unwrap();
        let mut got = own(6);
        assert!(got.compact(&rows));
        let (a, da) = want.slices().unwrap();
        let (b, db) = got.slices().unwrap();
        assert_eq!((a, da), (b, db));
    }

    #[test]
    fn a_row_needed_after_it_was_overwritten_is_not_compacted() {
        let mut c = own(3);
        // Row 1 would take row 0 (a row before it, which an in-place copy
        // may already have overwritten); row 1 would take row 7 of 3: both
        // refused, nothing changed.
        assert!(!c.compact(&[0, 0, 1]));
        assert!(!c.compact(&[1, 7]));
        let (a, d) = c.slices().unwrap();
        let fresh = own(3);
        let (b, e) = fresh.slices().unwrap();
        assert_eq!((a, d), (b, e));
    }
}
