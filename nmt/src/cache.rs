//! The decoder's key/value caches between steps, on the host or on the
//! device, and their reorder by beam parent on the host; the
//! self-attention history a decoder reads by slot (`SelfHistory`), and the
//! pool their host buffers return to (`BufferPool`).

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

/// The self-attention cache of a decoder that reads it in place: per layer,
/// key then value, every step's new rows `[slots, heads, dim]`, never moved,
/// and for each live row the slot of each earlier position.
pub(crate) struct SelfHistory {
    pub(crate) kv: Vec<Vec<f32>>,
    pub(crate) slots: usize,
    /// `[rows, positions]`: each row of the last call's slots.
    pub(crate) table: Vec<i64>,
    /// The next call's table as fed (each row its parent's row of
    /// `table`), and a spare for the table after it: reused, not
    /// allocated per step.
    pub(crate) fed: Vec<i64>,
    pub(crate) spare: Vec<i64>,
    pub(crate) positions: usize,
    /// Values per slot (heads x dim).
    pub(crate) width: usize,
}

impl SelfHistory {
    /// Sets the table to feed: row i takes row `parents[i]` of the last
    /// call's.
    pub(crate) fn feed(&mut self, parents: &[i64]) -> Result<(), NmtError> {
        let t = self.positions;
        self.fed.clear();
        for &p in parents {
            let from = usize::try_from(p).ok().and_then(|p| {
                self.table
                    .get(p.checked_mul(t)?..p.checked_add(1)?.checked_mul(t)?)
            });
            let Some(from) = from else {
                return Err(NmtError::inference(
                    "decoder",
                    format!("beam parent {p} beyond the last call's rows"),
                ));
            };
            self.fed.extend_from_slice(from);
        }
        Ok(())
    }

    /// Appends a step's new rows (the decoder's present outputs, `[rows,
    /// heads, 1, dim]` each) to the rows of the table as fed.
    pub(crate) fn append(&mut self, kv: &[DynValue], rows: usize) -> Result<(), NmtError> {
        let table = &self.fed;
        if table.len() != rows * self.positions {
            return Err(NmtError::inference(
                "decoder",
                format!("a slot table of {} for {rows} rows", table.len()),
            ));
        }
        for (buf, v) in self.kv.iter_mut().zip(kv) {
            let (shape, data) = v
                .try_extract_tensor::<f32>()
                .map_err(|e| NmtError::inference("decoder", e))?;
            if data.len() != rows * self.width {
                return Err(NmtError::inference(
                    "decoder",
                    format!("a step's new cache rows of shape {shape:?} for {rows} rows"),
                ));
            }
            buf.extend_from_slice(data);
        }
        let positions = self.positions + 1;
        let mut next = std::mem::take(&mut self.spare);
        next.clear();
        for r in 0..rows {
            next.extend_from_slice(&table[r * self.positions..(r + 1) * self.positions]);
            next.push((self.slots + r) as i64);
        }
        self.slots += rows;
        self.spare = std::mem::replace(&mut self.table, next);
        self.positions = positions;
        Ok(())
    }
}

/// Host cache buffers kept by what they held, so that each batch gets
/// back buffers of the size its role needs: from one shared pool the
/// self-attention history (the largest) was handed the cross-attention's
/// buffers and grew by reallocation, copy and fresh page faults every
/// batch (perf, 2 streams: 7% of all samples zeroing pages under
/// `Vec` growth).
#[derive(Default)]
pub(crate) struct BufferPool {
    pub(crate) self_cache: Vec<Vec<f32>>,
    pub(crate) cross_cache: Vec<Vec<f32>>,
    pub(crate) history: Vec<Vec<f32>>,
}

impl BufferPool {
    /// Up to `n` buffers of `role`, largest first.
    pub(crate) fn take(role: &mut Vec<Vec<f32>>, n: usize) -> Vec<Vec<f32>> {
        role.sort_by_key(|b| std::cmp::Reverse(b.capacity()));
        let mut taken: Vec<Vec<f32>> = role.drain(..n.min(role.len())).collect();
        for b in &mut taken {
            b.clear();
        }
        taken
    }

    /// Returns buffers to `role`, keeping at most `keep` (the largest).
    pub(crate) fn put(role: &mut Vec<Vec<f32>>, bufs: Vec<Vec<f32>>, keep: usize) {
        role.extend(bufs.into_iter().filter(|b| b.capacity() > 0));
        if role.len() > keep {
            role.sort_by_key(|b| std::cmp::Reverse(b.capacity()));
            role.truncate(keep);
        }
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

    #[test]
    fn the_pool_hands_back_its_largest_buffers_cleared_and_keeps_a_bounded_number() {
        let mut role = Vec::new();
        let bufs = [3usize, 100, 7, 0, 50]
            .iter()
            .map(|&n| {
                let mut v = Vec::with_capacity(n);
                v.resize(n, 1.0f32);
                v
            })
            .collect();
        BufferPool::put(&mut role, bufs, 3);
        // The empty one is not kept, and only the three largest are.
        assert_eq!(role.len(), 3);
        let taken = BufferPool::take(&mut role, 2);
        let caps: Vec<usize> = taken.iter().map(Vec::capacity).collect();
        assert!(caps[0] >= 100 && caps[1] >= 50 && caps[1] < 100, "{caps:?}");
        assert!(taken.iter().all(Vec::is_empty), "taken buffers are cleared");
        assert_eq!(role.len(), 1);
        // Asking for more than there are gives what there is.
        assert_eq!(BufferPool::take(&mut role, 5).len(), 1);
        assert!(role.is_empty());
    }
}
