//! Word-pair counts in bounded memory: a hash map up to a budget, sorted
//! runs spilled past it, merged (at most a fan-in at a time) when drained.

use std::collections::BinaryHeap;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::PathBuf;

use rustc_hash::FxHashMap;

use super::{Sides, Totals};

/// Bytes one held pair costs at worst: the hash map's slot (24 bytes and a
/// control byte, at most 7/8 full, doubled while it grows) and the sorted
/// copy a spill makes.
pub(super) const PAIR_BYTES: u64 = 84;

/// Pair counts, [cross, within references, within translations], keyed by
/// `u << 32 | v` with `u < v`; spilled as sorted runs past the budget.
pub(super) struct PairCounts {
    map: FxHashMap<u64, [u32; 3]>,
    max_entries: usize,
    dir: Option<tempfile::TempDir>,
    pub(super) runs: Vec<PathBuf>,
    /// Runs written so far, merged ones included.
    spilled: u64,
    pub(super) fan_in: usize,
}

const RECORD: usize = 8 + 12;

fn key(a: u32, b: u32) -> u64 {
    let (u, v) = if a < b { (a, b) } else { (b, a) };
    (u64::from(u) << 32) | u64::from(v)
}

impl PairCounts {
    pub(super) fn new(memory: u64) -> PairCounts {
        PairCounts {
            map: FxHashMap::default(),
            max_entries: (memory / PAIR_BYTES).max(1) as usize,
            dir: None,
            runs: Vec::new(),
            spilled: 0,
            fan_in: FAN_IN,
        }
    }

    pub(super) fn dir(&self) -> PathBuf {
        self.dir
            .as_ref()
            .map(|d| d.path().to_path_buf())
            .unwrap_or_else(std::env::temp_dir)
    }

    pub(super) fn spills(&self) -> u64 {
        self.spilled
    }

    fn bump(&mut self, key: u64, which: usize) -> std::io::Result<()> {
        let e = self.map.entry(key).or_insert([0; 3]);
        e[which] = e[which].saturating_add(1);
        if self.map.len() >= self.max_entries {
            self.spill()?;
        }
        Ok(())
    }

    pub(super) fn add_pair(&mut self, s: &Sides, t: &mut Totals) -> std::io::Result<()> {
        for &u in &s.r {
            for &v in &s.t {
                if u != v {
                    t.cross += 1;
                    self.bump(key(u, v), 0)?;
                }
            }
        }
        for (side, ids) in [&s.r, &s.t].into_iter().enumerate() {
            for (i, &u) in ids.iter().enumerate() {
                for &v in &ids[i + 1..] {
                    t.within[side] += 1;
                    self.bump(key(u, v), 1 + side)?;
                }
            }
        }
        Ok(())
    }

    fn sorted(&mut self) -> Vec<(u64, [u32; 3])> {
        let mut v: Vec<(u64, [u32; 3])> = self.map.drain().collect();
        v.sort_unstable_by_key(|e| e.0);
        v
    }

    fn spill(&mut self) -> std::io::Result<()> {
        if self.dir.is_none() {
            self.dir = Some(
                tempfile::Builder::new()
                    .prefix("paraforge-lexicon-")
                    .tempdir()?,
            );
        }
        let path = self.dir().join(format!("run-{:05}", self.spilled));
        let mut w = BufWriter::with_capacity(1 << 20, std::fs::File::create(&path)?);
        for (k, c) in self.sorted() {
            write_record(&mut w, k, c)?;
        }
        w.into_inner().map_err(|e| e.into_error())?;
        self.runs.push(path);
        self.spilled += 1;
        if self.runs.len() >= self.fan_in {
            // One run in place of many: the final merge opens at most
            // `fan_in` files whatever the corpus.
            let merged = self.dir().join(format!("merged-{:05}", self.spilled));
            let mut w = BufWriter::with_capacity(1 << 20, std::fs::File::create(&merged)?);
            let mut err = None;
            merge_runs(&self.runs, |k, c| {
                if err.is_none() {
                    err = write_record(&mut w, k, c).err();
                }
            })?;
            if let Some(e) = err {
                return Err(e);
            }
            w.into_inner().map_err(|e| e.into_error())?;
            for r in self.runs.drain(..) {
                std::fs::remove_file(r)?;
            }
            self.runs.push(merged);
        }
        Ok(())
    }

    /// Calls `f` once per key in ascending order with its summed counts.
    pub(super) fn drain_sorted(mut self, mut f: impl FnMut(u64, [u32; 3])) -> std::io::Result<()> {
        if self.runs.is_empty() {
            for (k, c) in self.sorted() {
                f(k, c);
            }
            return Ok(());
        }
        if !self.map.is_empty() {
            self.spill()?;
        }
        self.map = FxHashMap::default();
        merge_runs(&self.runs, f)
    }
}

/// Runs merged at once at most: past it the runs are merged into one
/// first, so that open files and read buffers stay bounded.
const FAN_IN: usize = 64;

/// The k-way merge of sorted run files: `f` once per key, ascending, with
/// the counts of every run that holds it summed.
fn merge_runs(runs: &[PathBuf], mut f: impl FnMut(u64, [u32; 3])) -> std::io::Result<()> {
    let mut readers = Vec::with_capacity(runs.len());
    for p in runs {
        readers.push(BufReader::with_capacity(1 << 16, std::fs::File::open(p)?));
    }
    let mut heap = BinaryHeap::new();
    let mut heads: Vec<[u32; 3]> = vec![[0; 3]; readers.len()];
    for (i, r) in readers.iter_mut().enumerate() {
        if let Some((k, c)) = next_record(r)? {
            heads[i] = c;
            heap.push(std::cmp::Reverse((k, i)));
        }
    }
    let mut cur: Option<(u64, [u32; 3])> = None;
    while let Some(std::cmp::Reverse((k, i))) = heap.pop() {
        let c = heads[i];
        match &mut cur {
            Some((ck, cc)) if *ck == k => {
                for j in 0..3 {
                    cc[j] = cc[j].saturating_add(c[j]);
                }
            }
            _ => {
                if let Some((ck, cc)) = cur.take() {
                    f(ck, cc);
                }
                cur = Some((k, c));
            }
        }
        if let Some((k, c)) = next_record(&mut readers[i])? {
            heads[i] = c;
            heap.push(std::cmp::Reverse((k, i)));
        }
    }
    if let Some((ck, cc)) = cur {
        f(ck, cc);
    }
    Ok(())
}

fn write_record(w: &mut impl Write, k: u64, c: [u32; 3]) -> std::io::Result<()> {
    w.write_all(&k.to_le_bytes())?;
    for x in c {
        w.write_all(&x.to_le_bytes())?;
    }
    Ok(())
}

fn next_record(r: &mut impl Read) -> std::io::Result<Option<(u64, [u32; 3])>> {
    let mut b = [0u8; RECORD];
    match r.read_exact(&mut b) {
        Ok(()) => {
            let u = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
            Ok(Some((
                u64::from_le_bytes(b[..8].try_into().expect("8 bytes")),
                [u(8), u(12), u(16)],
            )))
        }
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(None),
        Err(e) => Err(e),
    }
}
