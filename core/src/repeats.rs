//! Which items of a long stream repeat an earlier item's key, in memory
//! bounded by a budget rather than by the stream.
//!
//! Below the budget a hash set decides as items come. Above it, keys go to
//! disk: each (key, ordinal) record is spilled to one of a power-of-two
//! number of partition files by the key's top bits, and each partition is
//! sorted on its own, so memory holds one partition. An item repeats when
//! an item with a smaller ordinal has its key: the first occurrence is
//! kept whatever the partitioning.

use std::collections::HashSet;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::PathBuf;

/// The default memory budget: 2 GiB.
pub const DEFAULT_BUDGET: u64 = 2 << 30;

const RECORD: usize = 16 + 8;

/// Bytes a hash set of `n` 128-bit keys takes when sized for them up front
/// (hashbrown: a power of two of buckets at most 7/8 full, 16 bytes and a
/// control byte each).
pub fn in_memory_bytes(n: u64) -> u64 {
    let buckets = (n.saturating_mul(8) / 7 + 1).next_power_of_two();
    buckets.saturating_mul(17)
}

/// The partitions a spill of `n` keys needs so that one partition sorted in
/// memory (24 bytes a record) takes at most half of `budget`.
pub fn spill_partitions(n: u64, budget: u64) -> usize {
    let half = (budget / 2).max(RECORD as u64);
    let need = (n.saturating_mul(RECORD as u64)).div_ceil(half).max(2);
    (need as usize).next_power_of_two().min(1 << 16)
}

/// Keys spilled to disk, partitioned by their top bits.
pub struct SpilledKeys {
    dir: tempfile::TempDir,
    writers: Vec<BufWriter<std::fs::File>>,
    bits: u32,
}

impl SpilledKeys {
    /// `partitions` is rounded up to a power of two; the files go to the
    /// temporary directory (`TMPDIR`) and are removed on drop.
    pub fn new(partitions: usize) -> std::io::Result<SpilledKeys> {
        let p = partitions.max(1).next_power_of_two();
        let dir = tempfile::Builder::new()
            .prefix("paraforge-repeats-")
            .tempdir()?;
        let mut writers = Vec::with_capacity(p);
        for i in 0..p {
            writers.push(BufWriter::new(std::fs::File::create(
                dir.path().join(format!("part-{i:05}")),
            )?));
        }
        Ok(SpilledKeys {
            dir,
            writers,
            bits: p.trailing_zeros(),
        })
    }

    fn partition(&self, key: u128) -> usize {
        if self.bits == 0 {
            0
        } else {
            (key >> (128 - self.bits)) as usize
        }
    }

    pub fn push(&mut self, ordinal: u64, key: u128) -> std::io::Result<()> {
        let p = self.partition(key);
        let w = &mut self.writers[p];
        w.write_all(&key.to_le_bytes())?;
        w.write_all(&ordinal.to_le_bytes())
    }

    /// Calls `repeat` with the ordinal of every item whose key an item
    /// with a smaller ordinal has (partition by partition, not in order).
    pub fn repeats(self, mut repeat: impl FnMut(u64)) -> std::io::Result<()> {
        let paths: Vec<PathBuf> = (0..self.writers.len())
            .map(|i| self.dir.path().join(format!("part-{i:05}")))
            .collect();
        for w in self.writers {
            w.into_inner().map_err(|e| e.into_error())?.sync_data()?;
        }
        let mut buf = [0u8; RECORD];
        for path in paths {
            let mut records: Vec<(u128, u64)> = Vec::new();
            let mut r = BufReader::with_capacity(1 << 20, std::fs::File::open(&path)?);
            loop {
                match r.read_exact(&mut buf) {
                    Ok(()) => records.push((
                        u128::from_le_bytes(buf[..16].try_into().expect("16 bytes")),
                        u64::from_le_bytes(buf[16..].try_into().expect("8 bytes")),
                    )),
                    Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                    Err(e) => return Err(e),
                }
            }
            records.sort_unstable();
            for w in records.windows(2) {
                if w[0].0 == w[1].0 {
                    repeat(w[1].1);
                }
            }
            std::fs::remove_file(&path)?;
        }
        Ok(())
    }
}

/// The in-memory side: a hash set sized for `n` keys.
pub struct SeenKeys(HashSet<u128>);

impl SeenKeys {
    pub fn with_capacity(n: u64) -> SeenKeys {
        SeenKeys(HashSet::with_capacity(n as usize))
    }
    /// Whether `key` was seen before (and now is).
    pub fn repeat(&mut self, key: u128) -> bool {
        !self.0.insert(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The spilled path marks exactly what a hash set marks, first
    /// occurrences kept, across partition counts.
    #[test]
    fn spilled_repeats_are_the_hash_sets() {
        let keys: Vec<u128> = (0..5000u128)
            .map(|i| (i * 7919 % 1300).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835))
            .collect();
        let mut seen = SeenKeys::with_capacity(keys.len() as u64);
        let want: Vec<u64> = keys
            .iter()
            .enumerate()
            .filter(|(_, k)| seen.repeat(**k))
            .map(|(i, _)| i as u64)
            .collect();
        assert_eq!(want.len(), 5000 - 1300);
        for p in [1, 2, 16] {
            let mut s = SpilledKeys::new(p).unwrap();
            for (i, k) in keys.iter().enumerate() {
                s.push(i as u64, *k).unwrap();
            }
            let mut got = Vec::new();
            s.repeats(|o| got.push(o)).unwrap();
            got.sort();
            assert_eq!(got, want, "{p} partitions");
        }
    }

    #[test]
    fn partitions_grow_with_the_keys_past_the_budget() {
        assert!(in_memory_bytes(51_400_000) < DEFAULT_BUDGET);
        assert!(in_memory_bytes(200_000_000) > DEFAULT_BUDGET);
        let p = spill_partitions(200_000_000, DEFAULT_BUDGET);
        assert!(200_000_000 * RECORD as u64 / p as u64 <= DEFAULT_BUDGET / 2);
        assert_eq!(spill_partitions(10, 1 << 20), 2);
    }
}
