//! `paraforge bin`: the score bins a training stage draws from (docs/DEFINITIONS.md
//! section 5), written as Hive-style partitions with a manifest.
//!
//! * the paper's five para_score ranges (Wieting and Gimpel, 2018, Table 3);
//! * deciles by any score, from a global ranking over the whole dataset:
//!   exact and streaming. Scores map to order-preserving 32-bit keys; one
//!   pass counts keys by their high 16 bits, a second counts the low 16 bits
//!   inside the buckets where decile boundaries fall, which pins each
//!   boundary to an exact key. Ties are broken by row order, so the ten
//!   folds hold ranks `[i*N/10, (i+1)*N/10)` exactly;
//! * the paper's training set: the top two para_score deciles, both sides at
//!   most 30 tokens, a uniform random sample of N pairs with a fixed seed
//!   (the eligible rows are counted first, then N ordinals are drawn).
//!
//! Memory is bounded by the number of rows only through a bitmap of kept
//! rows and, with `--dedup`, a set of 128-bit hashes of kept pairs.

use std::collections::{BTreeMap, BTreeSet};

use std::path::{Path, PathBuf};

use arrow_array::{Array, BooleanArray, Float32Array, Int32Array, RecordBatch, StringArray};
use arrow_select::filter::filter_record_batch;
use paraforge_core::layout::{self, OutputLayout};
use paraforge_core::schema::{self, col, DataError, PairFileWriter, PairReader, SCORE_COLUMNS};
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::output::NewDataset;

/// The paper's para_score ranges; the first is open below.
pub const PARA_RANGES: [(f32, f32, &str); 5] = [
    (f32::NEG_INFINITY, 0.2, "min-0.2"),
    (0.2, 0.4, "0.2-0.4"),
    (0.4, 0.6, "0.4-0.6"),
    (0.6, 0.8, "0.6-0.8"),
    (0.8, f32::INFINITY, "0.8-1.0"),
];

/// Which range a para_score falls in: (lo, hi], the first from -inf.
pub fn para_range(score: Option<f32>) -> Option<usize> {
    let s = score.filter(|s| !s.is_nan())?;
    Some(
        PARA_RANGES
            .iter()
            .position(|&(_, hi, _)| s <= hi)
            .unwrap_or(PARA_RANGES.len() - 1),
    )
}

#[derive(Debug, Clone)]
pub struct BinOptions {
    pub input: PathBuf,
    pub output: PathBuf,
    /// Write the five para_score ranges.
    pub ranges: bool,
    /// Scores to cut into deciles (any of `SCORE_COLUMNS`).
    pub deciles: Vec<String>,
    /// Size of the paper's training sample (top two para_score deciles).
    pub train_sample: Option<usize>,
    /// Longest sentence (tokens, both sides) in the training sample.
    pub train_max_tokens: i32,
    pub seed: u64,
    /// Drop exact duplicates of (reference, translation), keeping the first.
    pub dedup: bool,
    /// Memory the duplicate check may take, in bytes: past it the keys are
    /// spilled to disk and sorted in partitions (`paraforge_core::repeats`).
    pub dedup_memory: u64,
    /// Keep only pairs whose two sides have at least / at most this many tokens.
    pub min_tokens: Option<i32>,
    pub max_tokens: Option<i32>,
    /// Replace a finished dataset at `output` (`--overwrite`; a job
    /// rewriting its own bins).
    pub overwrite: bool,
    /// What the manifest and the card call `input`, when not its path: the
    /// URL of an object-store output staged to a temporary `input`, which
    /// is gone once the bins are uploaded.
    pub input_name: Option<String>,
}

impl BinOptions {
    pub fn new(input: PathBuf, output: PathBuf) -> BinOptions {
        BinOptions {
            input,
            output,
            ranges: true,
            deciles: vec![col::PARA_SCORE.into()],
            train_sample: None,
            train_max_tokens: 30,
            seed: 1,
            dedup: false,
            dedup_memory: paraforge_core::repeats::DEFAULT_BUDGET,
            min_tokens: None,
            max_tokens: None,
            overwrite: false,
            input_name: None,
        }
    }

    /// `input` as the manifest and the card name it.
    fn input_name(&self) -> String {
        self.input_name
            .clone()
            .unwrap_or_else(|| self.input.display().to_string())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BinError {
    #[error(transparent)]
    Data(#[from] DataError),
    #[error("--deciles {0:?}: not a score column (use one of {list})", list = SCORE_COLUMNS.join(", "))]
    UnknownScore(String),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Output(#[from] crate::output::OutputError),
    #[error("{0}: is not empty and is not an earlier bins output (no bins _manifest.json); choose a new or empty directory")]
    NotBins(PathBuf),
    #[error("{input}: none of its {rows} rows was kept (length limits dropped {length}, duplicates {duplicates}); nothing binned")]
    NothingKept {
        input: PathBuf,
        rows: u64,
        length: u64,
        duplicates: u64,
    },
    #[error("{input}: none of the {rows} kept rows has a para_score, so every para_score range is empty; score the output first (`[scoring] model`, or `paraforge rescore --model`)")]
    NoParaScore { input: PathBuf, rows: u64 },
    #[error("{input}: a training sample of {asked} was asked for, but no pair is eligible (top two para_score deciles, both sides at most {max_tokens} tokens)")]
    EmptyTrainSample {
        input: PathBuf,
        asked: usize,
        max_tokens: i32,
    },
}

/// Counts and boundaries, written to `_manifest.json`.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct BinManifest {
    /// Always `bins` (core::layout::ManifestHead).
    pub kind: layout::ManifestKind,
    pub input: String,
    pub input_rows: u64,
    pub kept_rows: u64,
    pub dropped_duplicates: u64,
    pub dropped_length: u64,
    /// para_range label -> rows; `none` holds rows without a para_score.
    pub ranges: BTreeMap<String, u64>,
    pub deciles: BTreeMap<String, Deciles>,
    pub train: Option<TrainSample>,
    pub files: Vec<layout::ListedFile>,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Deciles {
    /// Ranked rows (those with a number for this score).
    pub ranked: u64,
    /// Rows without one (null or NaN); not in any fold.
    pub unranked: u64,
    /// The score at the first rank of folds 1..9.
    pub boundaries: Vec<f32>,
    pub counts: Vec<u64>,
}

#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct TrainSample {
    pub eligible: u64,
    pub sampled: u64,
    pub seed: u64,
    pub max_tokens: i32,
}

/// Order-preserving map from f32 to u32 (NaN excluded by the caller).
pub fn key(x: f32) -> u32 {
    let b = x.to_bits();
    if b & 0x8000_0000 != 0 {
        !b
    } else {
        b | 0x8000_0000
    }
}

fn unkey(k: u32) -> f32 {
    f32::from_bits(if k & 0x8000_0000 != 0 {
        k & 0x7FFF_FFFF
    } else {
        !k
    })
}

/// Exact decile boundaries of one score: boundary i (1..=9) sits at rank
/// `ceil(i * n / 10)`; `take` is how many rows with the boundary's key rank
/// below it.
#[derive(Debug, Clone)]
struct Boundaries {
    keys: Vec<u32>,
    takes: Vec<u64>,
}

/// Assigns folds in row order; the state counts rows seen per boundary key.
struct FoldAssigner<'a> {
    b: &'a Boundaries,
    seen: BTreeMap<u32, u64>,
}

impl<'a> FoldAssigner<'a> {
    fn new(b: &'a Boundaries) -> Self {
        FoldAssigner {
            b,
            seen: BTreeMap::new(),
        }
    }

    fn fold(&mut self, k: u32) -> usize {
        let mut fold = 0;
        let mut on_boundary = false;
        let seen = self.seen.get(&k).copied().unwrap_or(0);
        for (&bk, &take) in self.b.keys.iter().zip(&self.b.takes) {
            if k > bk || (k == bk && seen >= take) {
                fold += 1;
            }
            on_boundary |= k == bk;
        }
        if on_boundary {
            *self.seen.entry(k).or_insert(0) += 1;
        }
        fold
    }
}

fn score_key(
    batch: &RecordBatch,
    name: &str,
    path: &Path,
    row: usize,
) -> Result<Option<u32>, DataError> {
    let c = schema::column::<Float32Array>(batch, name, path)?;
    Ok(if c.is_null(row) || c.value(row).is_nan() {
        None
    } else {
        Some(key(c.value(row)))
    })
}

/// The rows kept after filters, as a bitmap over global row ordinals.
struct Kept {
    bits: Vec<u64>,
}

impl Kept {
    fn get(&self, i: u64) -> bool {
        self.bits
            .get((i / 64) as usize)
            .is_some_and(|w| w >> (i % 64) & 1 == 1)
    }
    fn set(&mut self, i: u64) {
        let w = (i / 64) as usize;
        if self.bits.len() <= w {
            self.bits.resize(w + 1, 0);
        }
        self.bits[w] |= 1 << (i % 64);
    }
}

/// Streams every batch of the dataset in a fixed order with its first
/// row's global ordinal.
fn for_each_batch(
    files: &[PathBuf],
    required: &[&str],
    mut f: impl FnMut(&Path, &RecordBatch, u64) -> Result<(), BinError>,
) -> Result<u64, BinError> {
    let mut ordinal = 0u64;
    for path in files {
        for batch in PairReader::open(path, required)? {
            let batch = batch?;
            f(path, &batch, ordinal)?;
            ordinal += batch.num_rows() as u64;
        }
    }
    Ok(ordinal)
}

/// A pair's dedup key: xxh3-128 of both sides, length-prefixed so that
/// ("ab", "c") and ("a", "bc") differ. Stable across runs, machines and
/// Rust versions (std's `DefaultHasher` promises none of that).
fn pair_hash(reference: &str, translation: &str) -> u128 {
    let mut h = twox_hash::XxHash3_128::new();
    for side in [reference, translation] {
        h.write(&(side.len() as u64).to_le_bytes());
        h.write(side.as_bytes());
    }
    h.finish_128()
}

/// Runs the binning; returns what it wrote. Four passes over the
/// dataset, each streaming it in the same order: filters and coarse
/// histograms, fine histograms at the boundaries, the training sample's
/// draw, and the writes.
///
/// The bins are staged and take the place of `o.output` only when complete
/// and checked (`crate::output`): an earlier dataset there is replaced
/// whole with `o.overwrite` (no stale partition survives), anything else is
/// refused, and a failed run leaves what was there before.
pub fn run(o: &BinOptions) -> Result<BinManifest, BinError> {
    for d in &o.deciles {
        if !SCORE_COLUMNS.contains(&d.as_str()) {
            return Err(BinError::UnknownScore(d.clone()));
        }
    }
    // Verified before anything is claimed or written.
    let files = paraforge_core::dataset::dataset_files(&o.input)?;
    let staged = NewDataset::create(&o.output, &[&o.input], o.overwrite, "bin")?;
    let inner = BinOptions {
        output: staged.dir().to_path_buf(),
        ..o.clone()
    };
    let m = run_passes(&inner, &files).and_then(|m| check_result(o, m))?;
    let text = serde_json::to_string_pretty(&m).unwrap_or_default();
    staged.publish(text.as_bytes())?;
    Ok(m)
}

/// Whether `bytes` are a bins `_manifest.json` (so the directory or prefix
/// holding it may be replaced by new bins).
pub fn is_bins_manifest(bytes: &[u8]) -> bool {
    paraforge_core::layout::ManifestHead::parse(bytes).is_ok_and(|h| h.is_bins())
}

/// Bins that hold nothing of what was asked are a failure, not an empty
/// success.
fn check_result(o: &BinOptions, m: BinManifest) -> Result<BinManifest, BinError> {
    if m.kept_rows == 0 {
        return Err(BinError::NothingKept {
            input: o.input.clone(),
            rows: m.input_rows,
            length: m.dropped_length,
            duplicates: m.dropped_duplicates,
        });
    }
    let scored = m
        .ranges
        .iter()
        .filter(|(k, _)| *k != "none")
        .map(|(_, n)| n)
        .sum::<u64>();
    if o.ranges && scored == 0 {
        return Err(BinError::NoParaScore {
            input: o.input.clone(),
            rows: m.kept_rows,
        });
    }
    if let (Some(asked), Some(t)) = (o.train_sample, &m.train) {
        if t.sampled == 0 {
            return Err(BinError::EmptyTrainSample {
                input: o.input.clone(),
                asked,
                max_tokens: o.train_max_tokens,
            });
        }
    }
    Ok(m)
}

/// The four passes over `files`, writing into `o.output` (all but the
/// manifest, which publishing writes).
fn run_passes(o: &BinOptions, files: &[PathBuf]) -> Result<BinManifest, BinError> {
    let files = files.to_vec();
    let mut scores: Vec<String> = o.deciles.clone();
    if o.train_sample.is_some() && !scores.iter().any(|d| d == col::PARA_SCORE) {
        scores.push(col::PARA_SCORE.into());
    }
    let mut m = BinManifest {
        kind: layout::ManifestKind::Bins,
        input: o.input_name(),
        ..Default::default()
    };
    let first = filter_and_histogram(o, &files, &scores, &mut m)?;
    let bounds = boundaries(&files, &scores, &first, &mut m)?;
    let chosen = draw_training_sample(o, &files, &scores, &first.kept, &bounds, &mut m)?;
    let configs = write_partitions(o, &files, &scores, &first.kept, &bounds, &chosen, &mut m)?;
    write_card(o, &configs, &mut m)?;
    Ok(m)
}

/// What pass 1 leaves: the rows kept, and per decile score the histogram
/// of the keys' high 16 bits and the rows without a score.
struct FirstPass {
    kept: Kept,
    hist_hi: Vec<Vec<u64>>,
    unranked: Vec<u64>,
}

/// Whether a row's length keeps it (`--min-tokens`, `--max-tokens`).
fn in_length_limits(o: &BinOptions, a: i32, b: i32) -> bool {
    !(o.min_tokens.is_some_and(|n| a < n || b < n) || o.max_tokens.is_some_and(|n| a > n || b > n))
}

/// `--dedup`: a hash set while the dataset's keys fit `dedup_memory`;
/// otherwise a pass before pass 1 spills every key to disk and marks the
/// repeated rows in a bitmap (an eighth of a byte a row).
enum Dedup {
    InMemory(paraforge_core::repeats::SeenKeys),
    Spilled(Kept),
}

impl Dedup {
    fn new(o: &BinOptions, files: &[PathBuf]) -> Result<Dedup, BinError> {
        use paraforge_core::repeats::{in_memory_bytes, spill_partitions, SeenKeys, SpilledKeys};
        let mut rows = 0u64;
        for f in files {
            rows += PairReader::open(f, &[])?.num_rows().max(0) as u64;
        }
        if in_memory_bytes(rows) <= o.dedup_memory {
            return Ok(Dedup::InMemory(SeenKeys::with_capacity(rows)));
        }
        let partitions = spill_partitions(rows, o.dedup_memory);
        tracing::info!(
            rows,
            partitions,
            budget = o.dedup_memory,
            "the duplicate check spills its keys to disk"
        );
        let tmp = || std::env::temp_dir();
        let io = |source| BinError::Io {
            path: tmp(),
            source,
        };
        let mut spill = SpilledKeys::new(partitions).map_err(io)?;
        let need = [
            col::REFERENCE_LEN,
            col::TRANSLATION_LEN,
            col::REFERENCE,
            col::TRANSLATION,
        ];
        for_each_batch(files, &need, |path, batch, first| {
            let rl = schema::column::<Int32Array>(batch, col::REFERENCE_LEN, path)?;
            let tl = schema::column::<Int32Array>(batch, col::TRANSLATION_LEN, path)?;
            let refs = schema::column::<StringArray>(batch, col::REFERENCE, path)?;
            let trans = schema::column::<StringArray>(batch, col::TRANSLATION, path)?;
            for r in 0..batch.num_rows() {
                // Rows the length limits drop are never a first occurrence.
                if in_length_limits(o, rl.value(r), tl.value(r)) {
                    let key = pair_hash(refs.value(r), trans.value(r));
                    spill.push(first + r as u64, key).map_err(io)?;
                }
            }
            Ok(())
        })?;
        let mut repeated = Kept { bits: Vec::new() };
        spill.repeats(|row| repeated.set(row)).map_err(io)?;
        Ok(Dedup::Spilled(repeated))
    }

    /// Whether row `row` repeats an earlier kept row's pair.
    fn repeat(&mut self, row: u64, reference: &str, translation: &str) -> bool {
        match self {
            Dedup::InMemory(seen) => seen.repeat(pair_hash(reference, translation)),
            Dedup::Spilled(repeated) => repeated.get(row),
        }
    }
}

/// Pass 1: the length and duplicate filters, and the high-16-bit histogram
/// of every decile score.
fn filter_and_histogram(
    o: &BinOptions,
    files: &[PathBuf],
    decile_scores: &[String],
    m: &mut BinManifest,
) -> Result<FirstPass, BinError> {
    let mut kept = Kept { bits: Vec::new() };
    let mut dedup = if o.dedup {
        Some(Dedup::new(o, files)?)
    } else {
        None
    };
    let mut hist_hi: Vec<Vec<u64>> = vec![vec![0; 1 << 16]; decile_scores.len()];
    let mut unranked = vec![0u64; decile_scores.len()];
    let mut need: Vec<&str> = vec![col::REFERENCE_LEN, col::TRANSLATION_LEN];
    need.extend(decile_scores.iter().map(String::as_str));
    if o.dedup {
        need.extend([col::REFERENCE, col::TRANSLATION]);
    }
    let (mut dropped_length, mut dropped_duplicates) = (0u64, 0u64);
    m.input_rows = for_each_batch(files, &need, |path, batch, first| {
        let rl = schema::column::<Int32Array>(batch, col::REFERENCE_LEN, path)?;
        let tl = schema::column::<Int32Array>(batch, col::TRANSLATION_LEN, path)?;
        let texts = if o.dedup {
            Some((
                schema::column::<StringArray>(batch, col::REFERENCE, path)?,
                schema::column::<StringArray>(batch, col::TRANSLATION, path)?,
            ))
        } else {
            None
        };
        for r in 0..batch.num_rows() {
            if !in_length_limits(o, rl.value(r), tl.value(r)) {
                dropped_length += 1;
                continue;
            }
            if let (Some((refs, trans)), Some(d)) = (texts, dedup.as_mut()) {
                if d.repeat(first + r as u64, refs.value(r), trans.value(r)) {
                    dropped_duplicates += 1;
                    continue;
                }
            }
            kept.set(first + r as u64);
            for (s, name) in decile_scores.iter().enumerate() {
                match score_key(batch, name, path, r)? {
                    Some(k) => hist_hi[s][(k >> 16) as usize] += 1,
                    None => unranked[s] += 1,
                }
            }
        }
        Ok(())
    })?;
    m.dropped_length = dropped_length;
    m.dropped_duplicates = dropped_duplicates;
    m.kept_rows = m.input_rows - m.dropped_duplicates - m.dropped_length;
    Ok(FirstPass {
        kept,
        hist_hi,
        unranked,
    })
}

/// Pass 2: low-16-bit histograms inside the buckets holding boundaries,
/// then the exact boundaries of every decile score (into the manifest).
fn boundaries(
    files: &[PathBuf],
    decile_scores: &[String],
    first: &FirstPass,
    m: &mut BinManifest,
) -> Result<Vec<Boundaries>, BinError> {
    let (kept, hist_hi) = (&first.kept, &first.hist_hi);
    let targets: Vec<(u64, Vec<u64>)> = hist_hi
        .iter()
        .map(|h| {
            let n: u64 = h.iter().sum();
            let ranks = (1..10u64).map(|i| (i * n).div_ceil(10)).collect();
            (n, ranks)
        })
        .collect();
    let mut wanted: Vec<BTreeMap<u16, Vec<u64>>> = vec![BTreeMap::new(); decile_scores.len()];
    let mut below_bucket: Vec<BTreeMap<u16, u64>> = vec![BTreeMap::new(); decile_scores.len()];
    for (s, (n, ranks)) in targets.iter().enumerate() {
        for &rank in ranks {
            if rank >= *n {
                continue; // fewer than 10 rows: empty upper folds
            }
            let (mut acc, mut bucket) = (0u64, 0usize);
            while acc + hist_hi[s][bucket] <= rank {
                acc += hist_hi[s][bucket];
                bucket += 1;
            }
            wanted[s]
                .entry(bucket as u16)
                .or_insert_with(|| vec![0; 1 << 16]);
            below_bucket[s].insert(bucket as u16, acc);
        }
    }
    if wanted.iter().any(|w| !w.is_empty()) {
        let need: Vec<&str> = decile_scores.iter().map(String::as_str).collect();
        for_each_batch(files, &need, |path, batch, first| {
            for r in 0..batch.num_rows() {
                if !kept.get(first + r as u64) {
                    continue;
                }
                for (s, name) in decile_scores.iter().enumerate() {
                    if let Some(k) = score_key(batch, name, path, r)? {
                        if let Some(h) = wanted[s].get_mut(&((k >> 16) as u16)) {
                            h[(k & 0xFFFF) as usize] += 1;
                        }
                    }
                }
            }
            Ok(())
        })?;
    }
    let bounds: Vec<Boundaries> = targets
        .iter()
        .enumerate()
        .map(|(s, (n, ranks))| {
            let mut b = Boundaries {
                keys: Vec::new(),
                takes: Vec::new(),
            };
            for &rank in ranks {
                if rank >= *n {
                    b.keys.push(u32::MAX);
                    b.takes.push(u64::MAX);
                    continue;
                }
                let (mut bucket, mut acc) = (0usize, 0u64);
                while acc + hist_hi[s][bucket] <= rank {
                    acc += hist_hi[s][bucket];
                    bucket += 1;
                }
                let low = &wanted[s][&(bucket as u16)];
                let mut lo = 0usize;
                while acc + low[lo] <= rank {
                    acc += low[lo];
                    lo += 1;
                }
                b.keys.push(((bucket as u32) << 16) | lo as u32);
                b.takes.push(rank - acc);
            }
            b
        })
        .collect();
    for (s, name) in decile_scores.iter().enumerate() {
        m.deciles.insert(
            name.clone(),
            Deciles {
                ranked: targets[s].0,
                unranked: first.unranked[s],
                boundaries: bounds[s]
                    .keys
                    .iter()
                    .filter(|&&k| k != u32::MAX)
                    .map(|&k| unkey(k))
                    .collect(),
                counts: vec![0; 10],
            },
        );
    }
    Ok(bounds)
}

/// Pass 3 (training sample only): counts the eligible rows (top two
/// para_score folds, both sides short enough) and draws the sample's ranks
/// among them.
fn draw_training_sample(
    o: &BinOptions,
    files: &[PathBuf],
    decile_scores: &[String],
    kept: &Kept,
    bounds: &[Boundaries],
    m: &mut BinManifest,
) -> Result<BTreeSet<u64>, BinError> {
    let para_idx = decile_scores.iter().position(|d| d == col::PARA_SCORE);
    let mut chosen: BTreeSet<u64> = BTreeSet::new();
    if let (Some(n), Some(pi)) = (o.train_sample, para_idx) {
        let mut folds = FoldAssigner::new(&bounds[pi]);
        let mut eligible_count = 0u64;
        let need = [col::PARA_SCORE, col::REFERENCE_LEN, col::TRANSLATION_LEN];
        // Drawn rows are named by their rank among eligible rows; pass 4
        // assigns folds in the same order and so meets the same ranks.
        for_each_batch(files, &need, |path, batch, first| {
            let rl = schema::column::<Int32Array>(batch, col::REFERENCE_LEN, path)?;
            let tl = schema::column::<Int32Array>(batch, col::TRANSLATION_LEN, path)?;
            for r in 0..batch.num_rows() {
                if !kept.get(first + r as u64) {
                    continue;
                }
                if let Some(k) = score_key(batch, col::PARA_SCORE, path, r)? {
                    let fold = folds.fold(k);
                    if fold >= 8
                        && rl.value(r) <= o.train_max_tokens
                        && tl.value(r) <= o.train_max_tokens
                    {
                        eligible_count += 1;
                    }
                }
            }
            Ok(())
        })?;
        let take = (n as u64).min(eligible_count);
        // Floyd's algorithm: `take` distinct indices in [0, eligible).
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(o.seed);
        let mut picked: BTreeSet<u64> = BTreeSet::new();
        for j in (eligible_count - take)..eligible_count {
            let t = rng.random_range(0..=j);
            if !picked.insert(t) {
                picked.insert(j);
            }
        }
        chosen = picked;
        m.train = Some(TrainSample {
            eligible: eligible_count,
            sampled: take,
            seed: o.seed,
            max_tokens: o.train_max_tokens,
        });
    }
    Ok(chosen)
}

/// Pass 4: writes every partition (ranges, folds, the training sample);
/// returns the dataset card's configs.
fn write_partitions(
    o: &BinOptions,
    files: &[PathBuf],
    decile_scores: &[String],
    kept: &Kept,
    bounds: &[Boundaries],
    chosen: &BTreeSet<u64>,
    m: &mut BinManifest,
) -> Result<Vec<(String, String)>, BinError> {
    let para_idx = decile_scores.iter().position(|d| d == col::PARA_SCORE);
    let out = &o.output;
    std::fs::create_dir_all(out).map_err(|e| BinError::Io {
        path: out.clone(),
        source: e,
    })?;
    let mut w = PartWriters {
        out,
        metadata: vec![
            (schema::meta::VERSION, env!("CARGO_PKG_VERSION").to_string()),
            ("paraforge.bins.input", o.input_name()),
        ],
        writers: BTreeMap::new(),
    };
    let mut folds: Vec<FoldAssigner> = bounds.iter().map(FoldAssigner::new).collect();
    let mut eligible_rank = 0u64;
    for_each_batch(files, &[], |path, batch, first| {
        let n = batch.num_rows();
        let keep: Vec<bool> = (0..n).map(|r| kept.get(first + r as u64)).collect();
        let rl = schema::column::<Int32Array>(batch, col::REFERENCE_LEN, path)?;
        let tl = schema::column::<Int32Array>(batch, col::TRANSLATION_LEN, path)?;
        if o.ranges {
            write_ranges(batch, path, &keep, m, &mut w)?;
        }
        let mut para_folds: Vec<Option<usize>> = vec![None; n];
        for (s, name) in decile_scores.iter().enumerate() {
            let mut row_fold: Vec<Option<usize>> = vec![None; n];
            for r in 0..n {
                if keep[r] {
                    if let Some(k) = score_key(batch, name, path, r)? {
                        row_fold[r] = Some(folds[s].fold(k));
                    }
                }
            }
            if Some(s) == para_idx {
                para_folds = row_fold.clone();
            }
            if !o.deciles.contains(name) {
                continue;
            }
            let d = m.deciles.get_mut(name).expect("inserted above");
            for f in 0..10 {
                let mask: Vec<bool> = row_fold.iter().map(|x| *x == Some(f)).collect();
                d.counts[f] += mask.iter().filter(|&&b| b).count() as u64;
                w.write(OutputLayout::bin_fold(name, f), batch, mask)?;
            }
        }
        if o.train_sample.is_some() {
            let mut mask = vec![false; n];
            for r in 0..n {
                if para_folds[r].is_some_and(|f| f >= 8)
                    && rl.value(r) <= o.train_max_tokens
                    && tl.value(r) <= o.train_max_tokens
                {
                    mask[r] = chosen.contains(&eligible_rank);
                    eligible_rank += 1;
                }
            }
            w.write(OutputLayout::bin_train(), batch, mask)?;
        }
        Ok(())
    })?;
    w.close(m)
}

/// A batch's kept rows into the para_score ranges (and `none`), counted.
fn write_ranges(
    batch: &RecordBatch,
    path: &Path,
    keep: &[bool],
    m: &mut BinManifest,
    w: &mut PartWriters<'_>,
) -> Result<(), BinError> {
    let n = batch.num_rows();
    let para = schema::column::<Float32Array>(batch, col::PARA_SCORE, path)?;
    let ranges: Vec<Option<usize>> = (0..n)
        .map(|r| {
            para_range(if para.is_null(r) {
                None
            } else {
                Some(para.value(r))
            })
        })
        .collect();
    for (i, &(_, _, label)) in PARA_RANGES.iter().enumerate() {
        let mask: Vec<bool> = (0..n).map(|r| keep[r] && ranges[r] == Some(i)).collect();
        *m.ranges.entry(label.to_string()).or_insert(0) +=
            mask.iter().filter(|&&b| b).count() as u64;
        w.write(OutputLayout::bin_range(label), batch, mask)?;
    }
    let mask: Vec<bool> = (0..n).map(|r| keep[r] && ranges[r].is_none()).collect();
    let c = mask.iter().filter(|&&b| b).count() as u64;
    if c > 0 {
        *m.ranges.entry("none".into()).or_insert(0) += c;
    }
    w.write(OutputLayout::bin_range("none"), batch, mask)
}

/// One Parquet file per partition, opened at its first row.
struct PartWriters<'a> {
    out: &'a Path,
    metadata: Vec<(&'static str, String)>,
    writers: BTreeMap<String, PairFileWriter>,
}

impl PartWriters<'_> {
    /// The rows of `batch` that `mask` selects, into partition `rel`.
    fn write(&mut self, rel: String, batch: &RecordBatch, mask: Vec<bool>) -> Result<(), BinError> {
        if !mask.iter().any(|&b| b) {
            return Ok(());
        }
        let sel = filter_record_batch(batch, &BooleanArray::from(mask)).map_err(|source| {
            DataError::Arrow {
                path: self.out.join(&rel),
                source,
            }
        })?;
        if !self.writers.contains_key(&rel) {
            let w = PairFileWriter::create(&self.out.join(&rel), batch.schema(), &self.metadata)?;
            self.writers.insert(rel.clone(), w);
        }
        self.writers
            .get_mut(&rel)
            .map(|w| w.write(&sel))
            .transpose()?;
        Ok(())
    }

    /// Closes every file, lists it in the manifest, and returns each
    /// partition's config (name, path pattern), sorted.
    fn close(self, m: &mut BinManifest) -> Result<Vec<(String, String)>, BinError> {
        let mut configs = Vec::new();
        for (rel, w) in self.writers {
            let rows = w.close()?;
            let path = self.out.join(&rel);
            let io = |source| BinError::Io {
                path: path.clone(),
                source,
            };
            m.files.push(layout::ListedFile {
                path: rel.clone(),
                rows,
                bytes: Some(std::fs::metadata(&path).map_err(io)?.len()),
                sha256: Some(layout::sha256_file(&path).map_err(io)?),
            });
            configs.push(OutputLayout::bin_config(&rel));
        }
        configs.sort();
        Ok(configs)
    }
}

/// The dataset card (every bin a config, with its rows; where the pairs
/// came from, as the input's manifests say); the deciles the manifest lists.
fn write_card(
    o: &BinOptions,
    configs: &[(String, String)],
    m: &mut BinManifest,
) -> Result<(), BinError> {
    let card = o.output.join(layout::CARD_FILE);
    let configs: Vec<(String, String, u64)> = configs
        .iter()
        .map(|(name, glob)| {
            let dir = glob.trim_end_matches("*.parquet");
            let rows = m
                .files
                .iter()
                .filter(|f| f.path.starts_with(dir))
                .map(|f| f.rows)
                .sum();
            (name.clone(), glob.clone(), rows)
        })
        .collect();
    let mut provenance = paraforge_core::dataset::trace(&o.input);
    if let Some(name) = &o.input_name {
        provenance.rename_dir(&o.input.display().to_string(), name);
    }
    let text = layout::card::bins_card(&layout::card::BinsCard {
        input: &m.input,
        input_rows: m.input_rows,
        kept_rows: m.kept_rows,
        dropped_duplicates: m.dropped_duplicates,
        dropped_length: m.dropped_length,
        configs: &configs,
        provenance: &provenance,
    });
    std::fs::write(&card, text).map_err(|e| BinError::Io {
        path: card.clone(),
        source: e,
    })?;
    m.deciles.retain(|k, _| o.deciles.contains(k));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const STABLE_KEY: &str = "e28c26be0e608a5614e62d038e446ac4";

    #[test]
    fn every_bin_gets_a_config_named_after_it() {
        for (rel, name, glob) in [
            (
                "ranges/para_range=0.8-1.0/part-00000.parquet",
                "range-0.8-1.0",
                "ranges/para_range=0.8-1.0/*.parquet",
            ),
            (
                "deciles/trigram_overlap/fold=9/part-00000.parquet",
                "decile-trigram_overlap-9",
                "deciles/trigram_overlap/fold=9/*.parquet",
            ),
            ("train/part-00000.parquet", "train", "train/*.parquet"),
        ] {
            assert_eq!(
                OutputLayout::bin_config(rel),
                (name.to_string(), glob.to_string())
            );
        }
    }

    #[test]
    fn dedup_keys_are_stable_and_tell_sides_apart() {
        // A fixed value (Python: xxhash.xxh3_128 of the same length-prefixed
        // bytes): the key must not change between runs, machines or versions.
        assert_eq!(
            format!("{:032x}", pair_hash("A man sleeps.", "A man is sleeping.")),
            STABLE_KEY
        );
        assert_ne!(pair_hash("ab", "c"), pair_hash("a", "bc"));
        assert_ne!(pair_hash("a", "b"), pair_hash("b", "a"));
    }

    #[test]
    fn keys_preserve_order_and_round_trip() {
        let xs = [
            f32::NEG_INFINITY,
            -3.5,
            -0.0,
            0.0,
            1e-30,
            0.2,
            0.2000001,
            7.0,
            f32::INFINITY,
        ];
        for w in xs.windows(2) {
            assert!(key(w[0]) < key(w[1]), "{} < {}", w[0], w[1]);
        }
        for x in xs {
            assert_eq!(unkey(key(x)).to_bits(), x.to_bits());
        }
    }

    #[test]
    fn para_ranges_are_closed_above() {
        assert_eq!(para_range(Some(-0.5)), Some(0));
        assert_eq!(para_range(Some(0.2)), Some(0));
        assert_eq!(para_range(Some(0.2000001)), Some(1));
        assert_eq!(para_range(Some(0.8)), Some(3));
        assert_eq!(para_range(Some(1.0)), Some(4));
        assert_eq!(para_range(None), None);
        assert_eq!(para_range(Some(f32::NAN)), None);
    }
}
