//! Training (Wieting and Gimpel, 2018, section 4): for a pair (s, s') and its negative t,
//! loss = max(0, delta - cos(g(s), g(s')) + cos(g(s), g(t))), with t the
//! sentence nearest to g(s) among the other pairs of the mega-batch (M
//! mini-batches, chosen with the parameters at the mega-batch's start).
//! Pairs are paraphrases both ways, so each pair contributes the loss from
//! both sides (s' gets its own negative), as in Wieting et al.'s code.
//! Gradients are written out by hand (the models are averages), and Adam
//! updates only the rows a mini-batch touched (lazy Adam, the usual choice
//! for embedding tables: a dense update of 400k x 300 rows per step would
//! cost more than everything else).

use std::time::Instant;

use ndarray::{s, Array2};
use rand::SeedableRng;
use rayon::prelude::*;
use rustc_hash::FxHashMap;

use crate::checkpoint;
use crate::data::{PairSource, ReadStats};
use crate::epochs::{check_finite, Epochs, Saved};
use crate::model::{cosine, for_each_trigram, trigram_text, Encoded, Model};
use crate::{check_pairs, limits, no_usable_pairs, TrainError};
use paraforge_core::PartScale;

#[derive(Debug, Clone)]
pub struct TrainOptions {
    /// Mini-batches per mega-batch (M).
    pub megabatch: usize,
    /// Pairs per mini-batch.
    pub batch_size: usize,
    pub margin: f32,
    pub lr: f32,
    pub epochs: usize,
    pub seed: u64,
    /// Pairs held in the shuffle buffer.
    pub shuffle_buffer: usize,
    /// Stop each epoch after this many pairs (0 = all).
    pub max_pairs: u64,
    /// Where to write a checkpoint after every epoch.
    pub checkpoint: Option<std::path::PathBuf>,
    /// Go on from the checkpoint there, if there is one.
    pub resume: bool,
    /// The SHA-256 of the vectors the word table started from, where any:
    /// a checkpoint resumes only from the same.
    pub init_vectors_sha256: Option<String>,
}

impl Default for TrainOptions {
    fn default() -> Self {
        TrainOptions {
            megabatch: crate::DEFAULT_MEGABATCH,
            batch_size: 100,
            margin: 0.4,
            lr: 0.001,
            epochs: 5,
            seed: 1,
            shuffle_buffer: 100_000,
            max_pairs: 0,
            checkpoint: None,
            resume: false,
            init_vectors_sha256: None,
        }
    }
}

/// Progress after each mega-batch.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    pub epoch: usize,
    pub pairs: u64,
    /// Mean loss over the epoch so far.
    pub loss: f64,
    /// The dev score after the previous epoch.
    pub dev: Option<f64>,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct EpochReport {
    pub epoch: usize,
    pub pairs: u64,
    pub mean_loss: f64,
    pub seconds: f64,
    pub pairs_per_second: f64,
    /// The dev set's score after this epoch, when one was given.
    #[serde(default)]
    pub dev: Option<f64>,
}

impl EpochReport {
    /// An epoch's row from its totals, logged as it is made (both trainers).
    pub fn logged(
        epoch: usize,
        pairs: u64,
        loss_sum: f64,
        secs: f64,
        dev: Option<f64>,
    ) -> EpochReport {
        let mean_loss = loss_sum / pairs.max(1) as f64;
        tracing::info!(epoch, pairs, loss = mean_loss, secs, dev, "epoch done");
        EpochReport {
            epoch,
            pairs,
            mean_loss,
            seconds: secs,
            pairs_per_second: pairs as f64 / secs.max(1e-9),
            dev,
        }
    }
}

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct TrainReport {
    pub epochs: Vec<EpochReport>,
    pub read: ReadStats,
    /// Pairs with a side that has no known word or trigram.
    pub skipped_unembeddable: u64,
    /// The epoch whose model was kept (best dev score), when a dev set chose.
    pub best_epoch: Option<usize>,
    /// Epochs a checkpoint had finished when this run resumed.
    pub resumed_after: Option<usize>,
}

/// Every sentence of the dataset (both sides), tokenized as every score
/// tokenizes, in file order: the pass that counts a vocabulary.
fn each_sentence(
    source: &PairSource,
    mut f: impl FnMut(&paraforge_core::Tokens),
) -> Result<(), TrainError> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    let mut stats = ReadStats::default();
    let mut toks = paraforge_core::Tokens::default();
    for p in source.epoch(1, &mut rng, &mut stats) {
        let (a, b) = p?;
        for text in [&a, &b] {
            paraforge_core::tokenize::tokenize_into(text, &mut toks);
            f(&toks);
        }
    }
    Ok(())
}

/// The trigram vocabulary of a dataset: trigrams seen at least `min_count`
/// times (both sides), the `max` most frequent, ties by text.
pub fn trigram_vocab(
    source: &PairSource,
    min_count: u64,
    max: usize,
) -> Result<Vec<String>, TrainError> {
    let mut counts: FxHashMap<u64, u64> = FxHashMap::default();
    each_sentence(source, |toks| {
        for_each_trigram(toks, |k| *counts.entry(k).or_insert(0) += 1)
    })?;
    let mut v: Vec<(String, u64)> = counts
        .into_iter()
        .filter(|(_, c)| *c >= min_count)
        .map(|(k, c)| (trigram_text(k), c))
        .collect();
    v.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v.truncate(max);
    Ok(v.into_iter().map(|(g, _)| g).collect())
}

/// The word vocabulary of a dataset: tokens (as every paraforge score
/// tokenizes) seen at least `min_count` times (both sides), the `max` most
/// frequent, ties by text.
pub fn word_vocab(
    source: &PairSource,
    min_count: u64,
    max: usize,
) -> Result<Vec<String>, TrainError> {
    let mut counts = WordCounts::default();
    each_sentence(source, |toks| counts.add(toks))?;
    Ok(counts.vocab(min_count, max))
}

/// How often each token was seen: what a word vocabulary is chosen from.
#[derive(Default)]
pub(crate) struct WordCounts(FxHashMap<String, u64>);

impl WordCounts {
    pub fn add(&mut self, toks: &paraforge_core::Tokens) {
        for t in toks.iter() {
            match self.0.get_mut(t.text) {
                Some(c) => *c += 1,
                None => {
                    self.0.insert(t.text.to_string(), 1);
                }
            }
        }
    }

    /// Tokens seen at least `min_count` times, the `max` most frequent,
    /// ties by text.
    pub fn vocab(self, min_count: u64, max: usize) -> Vec<String> {
        let mut v: Vec<(String, u64)> = self
            .0
            .into_iter()
            .filter(|(_, c)| *c >= min_count)
            .collect();
        v.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        v.truncate(max);
        v.into_iter().map(|(w, _)| w).collect()
    }
}

/// Adam moments of one table, updated only on touched rows.
struct Adam {
    m: Vec<f32>,
    v: Vec<f32>,
}

const B1: f32 = 0.9;
const B2: f32 = 0.999;
const EPS: f32 = 1e-8;

impl Adam {
    fn new(n: usize) -> Adam {
        Adam {
            m: vec![0.0; n],
            v: vec![0.0; n],
        }
    }

    /// Updates the rows `grads` touched; returns the first of them left
    /// holding a value that is not a finite number (checked as it is
    /// written: the rows are in cache, and the other rows did not change).
    fn update(
        &mut self,
        table: &mut [f32],
        dim: usize,
        grads: &Grads,
        lr: f32,
        step: u64,
    ) -> Option<u32> {
        let c1 = 1.0 - B1.powf(step as f32);
        let c2 = 1.0 - B2.powf(step as f32);
        let a = lr * c2.sqrt() / c1;
        let mut bad: Option<u32> = None;
        for (&row, &off) in &grads.rows {
            let g = &grads.values[off..off + dim];
            let r = row as usize * dim..(row as usize + 1) * dim;
            let (p, m, v) = (
                &mut table[r.clone()],
                &mut self.m[r.clone()],
                &mut self.v[r],
            );
            for k in 0..dim {
                m[k] = B1 * m[k] + (1.0 - B1) * g[k];
                v[k] = B2 * v[k] + (1.0 - B2) * g[k] * g[k];
                p[k] -= a * m[k] / (v[k].sqrt() + EPS);
            }
            // The smallest row, so that the error does not depend on the
            // map's order.
            if p.iter().any(|x| !x.is_finite()) && bad.is_none_or(|b| row < b) {
                bad = Some(row);
            }
        }
        bad
    }
}

/// What a row of `model` is, for messages: the table, the row and its word
/// or trigram.
fn row_name(model: &Model, word_table: bool, row: u32) -> String {
    let r = row as usize;
    if word_table {
        let w = model.words().get(r).map_or("UNK", |w| w.as_str());
        format!("the word table's row {r} ({w:?})")
    } else {
        let t = model.trigrams().get(r).map_or("?", |t| t.as_str());
        format!("the trigram table's row {r} ({t:?})")
    }
}

/// Sparse gradient of one table: row -> offset into `values`.
#[derive(Default)]
struct Grads {
    rows: FxHashMap<u32, usize>,
    values: Vec<f32>,
}

impl Grads {
    fn clear(&mut self) {
        self.rows.clear();
        self.values.clear();
    }

    /// Adds `scale * g` to each of `rows`.
    fn add(&mut self, rows: &[u32], g: &[f32], scale: f32) {
        let dim = g.len();
        for &r in rows {
            let n = self.values.len();
            let off = *self.rows.entry(r).or_insert(n);
            if off == n {
                self.values.resize(n + dim, 0.0);
            }
            for (x, y) in self.values[off..off + dim].iter_mut().zip(g) {
                *x += scale * y;
            }
        }
    }
}

/// d cos(u, v) / du, added to `out` times `scale`.
fn add_dcos(u: &[f32], v: &[f32], scale: f32, out: &mut [f32]) {
    let (nu, nv) = (
        u.iter().map(|x| x * x).sum::<f32>().sqrt(),
        v.iter().map(|x| x * x).sum::<f32>().sqrt(),
    );
    if nu == 0.0 || nv == 0.0 {
        return;
    }
    let c = cosine(u, v);
    let (a, b) = (1.0 / (nu * nv), c / (nu * nu));
    for k in 0..u.len() {
        out[k] += scale * (a * v[k] - b * u[k]);
    }
}

/// For each sentence of the mega-batch (2p = pair p's reference, 2p+1 its
/// translation) the nearest sentence of another pair, by cosine.
fn negatives(model: &Model, mb: &[(Encoded, Encoded)]) -> Vec<u32> {
    let n = mb.len() * 2;
    let d = model.dim();
    let mut flat = vec![0f32; n * d];
    flat.par_chunks_mut(d.max(1))
        .enumerate()
        .for_each(|(i, out)| {
            let e = if i.is_multiple_of(2) {
                &mb[i / 2].0
            } else {
                &mb[i / 2].1
            };
            model.embed_into(e, out);
            let norm = out.iter().map(|v| v * v).sum::<f32>().sqrt();
            if norm > 0.0 {
                out.iter_mut().for_each(|v| *v /= norm);
            }
        });
    nearest_of_other_pair(&Array2::from_shape_vec((n, d), flat).expect("n x d values"))
}

/// Every sentence has a negative unless the embeddings stopped being numbers
/// (weights blown up by the last step: every similarity NaN); then the run
/// stops with what to change, as a non-finite loss does.
pub(crate) fn check_negatives(neg: &[u32], epoch: usize, pairs: u64) -> Result<(), TrainError> {
    if !neg.contains(&u32::MAX) {
        return Ok(());
    }
    Err(TrainError::Invalid(format!(
        "epoch {epoch}, after {pairs} pairs: the embeddings are no longer finite numbers (training diverged; lower --lr?)"
    )))
}

/// For each row of `x` (unit-length embeddings; rows 2p and 2p+1 are pair
/// p) the first most similar row of another pair.
///
/// The similarities are symmetric, so each is computed once: block b of
/// 128 rows is multiplied only with rows from its own start on, and row j
/// after the block takes its candidates from the block's columns. That
/// halves the n x n product, which was half of a WORD epoch at M = 40.
/// Candidates merge by (larger value, then smaller index), an order that
/// does not depend on how the blocks are spread over threads.
pub(crate) fn nearest_of_other_pair(x: &Array2<f32>) -> Vec<u32> {
    const BLOCK: usize = 128; // even: a pair never straddles two blocks
    let n = x.nrows();
    let none = (f32::NEG_INFINITY, u32::MAX);
    let better = |a: (f32, u32), b: (f32, u32)| {
        if b.0 > a.0 || (b.0 == a.0 && b.1 < a.1) {
            b
        } else {
            a
        }
    };
    let best = (0..n.div_ceil(BLOCK))
        .into_par_iter()
        .fold(
            || (vec![none; n], Vec::new()),
            |(mut best, mut scratch): (Vec<(f32, u32)>, Vec<f32>), b| {
                let (lo, hi) = (b * BLOCK, ((b + 1) * BLOCK).min(n));
                let (rows, w) = (hi - lo, n - lo);
                // One buffer per worker, reused: a fresh product per block
                // was page faults.
                scratch.resize(scratch.len().max(rows * w), 0.0);
                let sims = &mut scratch[..rows * w];
                paraforge_encoders::linalg::general_mat_mul(
                    1.0,
                    &x.slice(s![lo..hi, ..]),
                    &x.slice(s![lo.., ..]).t(),
                    0.0,
                    &mut ndarray::ArrayViewMut2::from_shape((rows, w), &mut *sims)
                        .expect("rows x w"),
                );
                for (r, row) in sims.chunks_exact_mut(w).enumerate() {
                    let i = lo + r;
                    // The sentence's own pair is never its negative.
                    let own = 2 * (i / 2) - lo;
                    row[own] = f32::NEG_INFINITY;
                    if own + 1 < w {
                        row[own + 1] = f32::NEG_INFINITY;
                    }
                    let j = first_max(row);
                    if j != u32::MAX {
                        best[i] = better(best[i], (row[j as usize], lo as u32 + j));
                    }
                }
                // The later rows' candidates from the block's columns, a
                // tile of columns at a time so that their running maxima
                // stay in cache.
                const TILE: usize = 512;
                let (mut col, mut col_at) = ([f32::NEG_INFINITY; TILE], [u32::MAX; TILE]);
                for t0 in (rows..w).step_by(TILE) {
                    let t1 = (t0 + TILE).min(w);
                    let (c, a) = (&mut col[..t1 - t0], &mut col_at[..t1 - t0]);
                    c.fill(f32::NEG_INFINITY);
                    a.fill(u32::MAX);
                    for (r, row) in sims.chunks_exact(w).enumerate() {
                        column_max(&row[t0..t1], (lo + r) as u32, c, a);
                    }
                    for (k, (&v, &at)) in c.iter().zip(a.iter()).enumerate() {
                        best[lo + t0 + k] = better(best[lo + t0 + k], (v, at));
                    }
                }
                (best, scratch)
            },
        )
        .map(|(best, _)| best)
        .reduce(
            || vec![none; n],
            |mut a, b| {
                for (x, y) in a.iter_mut().zip(b) {
                    *x = better(*x, y);
                }
                a
            },
        );
    best.into_iter()
        .map(|(v, j)| if v > f32::NEG_INFINITY { j } else { u32::MAX })
        .collect()
}

/// One row `i` of a block against the later rows' running maxima:
/// `best[k]`/`at[k]` become `row[k]`/`i` where it is larger. Rows come in
/// increasing order, so a tie keeps the earlier row. Vectorises.
#[multiversion::multiversion(targets("x86_64+avx2", "x86_64+sse4.1"))]
fn column_max(row: &[f32], i: u32, best: &mut [f32], at: &mut [u32]) {
    for ((&v, b), a) in row.iter().zip(best.iter_mut()).zip(at.iter_mut()) {
        let take = v > *b;
        *b = if take { v } else { *b };
        *a = if take { i } else { *a };
    }
}

/// The index of the first largest value of `v` (NaN never is), `u32::MAX`
/// when nothing exceeds minus infinity. Each of 16 lanes keeps its largest
/// value and where it was, which vectorises; one loop carrying a single
/// (value, index) does not, and was a third of a WORD epoch at M = 40
/// (BENCHMARKS.md, "Training speed, 2026-11-25").
#[multiversion::multiversion(targets("x86_64+avx2", "x86_64+sse4.1"))]
fn first_max(v: &[f32]) -> u32 {
    const LANES: usize = 16;
    let mut best = [f32::NEG_INFINITY; LANES];
    let mut at = [u32::MAX; LANES];
    let mut chunks = v.chunks_exact(LANES);
    for (k, c) in (&mut chunks).enumerate() {
        for l in 0..LANES {
            // Strictly greater: a lane keeps its first maximum.
            let take = c[l] > best[l];
            best[l] = if take { c[l] } else { best[l] };
            at[l] = if take { (k * LANES + l) as u32 } else { at[l] };
        }
    }
    let tail = v.len() - chunks.remainder().len();
    let mut top = (f32::NEG_INFINITY, u32::MAX);
    let rest = chunks.remainder().iter().enumerate();
    let rest = rest.map(|(j, &x)| (x, (tail + j) as u32));
    for (x, j) in best.into_iter().zip(at).chain(rest) {
        if x > top.0 || (x == top.0 && j < top.1) {
            top = (x, j);
        }
    }
    if top.0 == f32::NEG_INFINITY {
        u32::MAX
    } else {
        top.1
    }
}

/// Loss and embedding gradients of one pair (both directions).
struct PairGrad {
    loss: f32,
    /// (sentence index in the mega-batch, d loss / d embedding).
    grads: Vec<(u32, Vec<f32>)>,
}

fn pair_grad(
    model: &Model,
    mb: &[(Encoded, Encoded)],
    neg: &[u32],
    p: usize,
    margin: f32,
) -> PairGrad {
    let d = model.dim();
    let sent = |i: u32| {
        let q = &mb[i as usize / 2];
        if i.is_multiple_of(2) {
            &q.0
        } else {
            &q.1
        }
    };
    let ids = [2 * p as u32, 2 * p as u32 + 1, neg[2 * p], neg[2 * p + 1]];
    let mut norms = [[1.0f32; 2]; 4];
    let mut g: Vec<Vec<f32>> = ids
        .iter()
        .zip(&mut norms)
        .map(|(&i, n)| {
            let mut v = vec![0.0; d];
            model.means_into(sent(i), &mut v);
            *n = model.scale_parts(&mut v);
            v
        })
        .collect();
    let mut dg = vec![vec![0.0f32; d]; 4];
    let mut loss = 0.0;
    // (anchor, positive, negative) as indices into `ids`.
    for (a, pos, negi) in [(0, 1, 2), (1, 0, 3)] {
        let l = margin - cosine(&g[a], &g[pos]) + cosine(&g[a], &g[negi]);
        if l <= 0.0 {
            continue;
        }
        loss += l;
        let (ga, gp, gn) = (g[a].clone(), g[pos].clone(), g[negi].clone());
        add_dcos(&ga, &gp, -1.0, &mut dg[a]);
        add_dcos(&gp, &ga, -1.0, &mut dg[pos]);
        add_dcos(&ga, &gn, 1.0, &mut dg[a]);
        add_dcos(&gn, &ga, 1.0, &mut dg[negi]);
    }
    if let Some(lengths) = model.part_lengths() {
        // Each half is v = l u with u = m / |m|: with û = v / l,
        // d/dm = l (d/dv - û (û . d/dv)) / |m|.
        let wd = model.word_dim;
        for ((v, dv), n) in g.iter().zip(&mut dg).zip(norms) {
            for ((range, n), l) in [(0..wd, n[0]), (wd..d, n[1])].into_iter().zip(lengths) {
                let (v, dv) = (&v[range.clone()], &mut dv[range]);
                if n == 0.0 {
                    dv.fill(0.0);
                    continue;
                }
                let dot: f32 = v.iter().zip(dv.iter()).map(|(a, b)| a * b).sum::<f32>() / l;
                for (x, &vi) in dv.iter_mut().zip(v) {
                    *x = l * (*x - vi / l * dot) / n;
                }
            }
        }
    }
    g.clear();
    PairGrad {
        loss,
        grads: ids
            .into_iter()
            .zip(dg)
            .filter(|(_, v)| v.iter().any(|x| *x != 0.0))
            .collect(),
    }
}

/// Gradients of the mean loss over the pairs `range` of the mega-batch,
/// per touched row, into `gw`/`gt` (cleared first); returns the loss sum.
fn minibatch_grads(
    model: &Model,
    mb: &[(Encoded, Encoded)],
    neg: &[u32],
    range: std::ops::Range<usize>,
    margin: f32,
    gw: &mut Grads,
    gt: &mut Grads,
) -> f64 {
    let wd = model.word_dim;
    let results: Vec<PairGrad> = range
        .clone()
        .into_par_iter()
        .map(|p| pair_grad(model, mb, neg, p, margin))
        .collect();
    let scale = 1.0 / range.len() as f32;
    gw.clear();
    gt.clear();
    let mut loss = 0.0;
    for r in &results {
        loss += r.loss as f64;
        for (i, dg) in &r.grads {
            let q = &mb[*i as usize / 2];
            let e = if i.is_multiple_of(2) { &q.0 } else { &q.1 };
            if !e.words.is_empty() {
                gw.add(&e.words, &dg[..wd], scale / e.words.len() as f32);
            }
            if !e.trigrams.is_empty() {
                gt.add(&e.trigrams, &dg[wd..], scale / e.trigrams.len() as f32);
            }
        }
    }
    loss
}

/// The next mega-batch (M x batch-size pairs) of an epoch that has
/// `pairs` done so far: `encode` turns a pair into what training needs, or
/// None when a side has nothing to embed (counted in `skipped`). Sets
/// `done` when the epoch's input or `max_pairs` ends.
pub(crate) fn next_megabatch<T>(
    it: &mut impl Iterator<Item = Result<(String, String), TrainError>>,
    o: &TrainOptions,
    pairs: u64,
    skipped: &mut u64,
    done: &mut bool,
    mut encode: impl FnMut(&str, &str) -> Option<T>,
) -> Result<Vec<T>, TrainError> {
    let want = o.megabatch * o.batch_size;
    let mut mb = Vec::with_capacity(want);
    while mb.len() < want {
        if o.max_pairs > 0 && pairs + mb.len() as u64 >= o.max_pairs {
            *done = true;
            break;
        }
        let Some(p) = it.next() else {
            *done = true;
            break;
        };
        let (a, b) = p?;
        match encode(&a, &b) {
            Some(e) => mb.push(e),
            None => *skipped += 1,
        }
    }
    Ok(mb)
}

/// Scores a model on the dev set (higher is better).
pub type DevScore<'a> = &'a (dyn Fn(&Model) -> f64 + Sync);

/// The options' bounds, before anything is allocated for them.
pub(crate) fn check_options(o: &TrainOptions) -> Result<(), TrainError> {
    if o.batch_size < 1 || o.megabatch < 1 || o.epochs < 1 {
        return Err(TrainError::Invalid(
            "batch size, mega-batch size and epochs must be at least 1".into(),
        ));
    }
    limits::at_most("--epochs", o.epochs, limits::MAX_EPOCHS)?;
    limits::at_most("--batch-size", o.batch_size, limits::MAX_MEGABATCH_PAIRS)?;
    let mega = o.megabatch.saturating_mul(o.batch_size);
    if mega > limits::MAX_MEGABATCH_PAIRS {
        return Err(TrainError::Invalid(format!(
            "--megabatch {} x --batch-size {}: more than the limit of {} pairs a mega-batch",
            o.megabatch,
            o.batch_size,
            limits::MAX_MEGABATCH_PAIRS
        )));
    }
    limits::at_most(
        "--shuffle-buffer",
        o.shuffle_buffer,
        limits::MAX_SHUFFLE_BUFFER,
    )
}

/// The margin is between two cosines, whose difference lies in [-2, 2]: a
/// larger one never lets the loss reach zero. An Adam step size past 1
/// moves unit-scale embeddings by more than their length each step. Either
/// gave a finite but meaningless model before.
pub(crate) fn check_margin_lr(margin: f32, lr: f32) -> Result<(), TrainError> {
    if !(margin.is_finite() && margin > 0.0 && margin <= MAX_MARGIN) {
        return Err(TrainError::Invalid(format!(
            "--margin {margin}: must be above 0 and at most {MAX_MARGIN} (a margin between two cosines)"
        )));
    }
    if !(lr.is_finite() && lr > 0.0 && lr <= MAX_LR) {
        return Err(TrainError::Invalid(format!(
            "--lr {lr}: must be above 0 and at most {MAX_LR}"
        )));
    }
    Ok(())
}

/// See [`check_margin_lr`].
pub const MAX_MARGIN: f32 = 2.0;
/// See [`check_margin_lr`].
pub const MAX_LR: f32 = 1.0;

fn run_key(model: &Model, source: &PairSource, o: &TrainOptions) -> checkpoint::RunKey {
    checkpoint::RunKey {
        kind: model.kind.name().to_string(),
        word_dim: model.word_dim,
        trigram_dim: model.trigram_dim,
        words: model.words().len(),
        trigrams: model.trigrams().len(),
        megabatch: o.megabatch,
        batch_size: o.batch_size,
        margin: o.margin,
        lr: o.lr,
        seed: o.seed,
        shuffle_buffer: o.shuffle_buffer,
        max_pairs: o.max_pairs,
        rows: source.rows(),
        unit_parts: model.parts != PartScale::Raw,
        parts_by_dimension: model.parts == PartScale::ByDimension,
        data_sha256: source.digest().to_string(),
        init_vectors_sha256: o.init_vectors_sha256.clone(),
    }
}

/// Trains `model` in place. With `dev`, the model is scored after every
/// epoch and the best epoch's model is the one left in `model`. With
/// `o.checkpoint`, a checkpoint is written after every epoch, and
/// `o.resume` goes on from it: the result is the model an uninterrupted run
/// gives (the same shuffles, steps and Adam state).
pub fn train(
    model: &mut Model,
    source: &PairSource,
    o: &TrainOptions,
    dev: Option<DevScore>,
    progress: &mut dyn FnMut(Progress),
) -> Result<TrainReport, TrainError> {
    check_options(o)?;
    check_pairs(source.rows(), o.max_pairs)?;
    let mut run = Epochs::new(run_key(model, source, o), o.seed);
    let mut adam_w = Adam::new(model.w.len());
    let mut adam_t = Adam::new(model.t.len());
    let (mut gw, mut gt) = (Grads::default(), Grads::default());
    let (wd, td) = (model.word_dim, model.trigram_dim);
    let mut step = 0u64;
    let resumed = run.resume(o, |dir| {
        let c = checkpoint::load(dir)?;
        Ok(Saved {
            state: c.state,
            best: c.best,
            rest: (c.model, c.adam),
        })
    })?;
    if let Some((steps, (m, [mw, vw, mt, vt]))) = resumed {
        *model = m;
        (adam_w.m, adam_w.v, adam_t.m, adam_t.v) = (mw, vw, mt, vt);
        step = steps.step;
    }
    for epoch in run.remaining(o.epochs) {
        let started = Instant::now();
        let (mut pairs, mut loss_sum) = (0u64, 0f64);
        let last_dev = run.last_dev();
        let mut it = source.epoch(o.shuffle_buffer, &mut run.rng, &mut run.stats);
        let (mut done, mut usable) = (false, 0);
        while !done {
            let mb = next_megabatch(&mut it, o, pairs, &mut run.skipped, &mut done, |a, b| {
                let (ea, eb) = (model.encode(a), model.encode(b));
                (!ea.is_empty() && !eb.is_empty()).then_some((ea, eb))
            })?;
            if mb.len() < 2 {
                usable = mb.len();
                break;
            }
            let neg = negatives(model, &mb);
            check_negatives(&neg, epoch, pairs)?;
            for lo in (0..mb.len()).step_by(o.batch_size) {
                let hi = (lo + o.batch_size).min(mb.len());
                loss_sum += minibatch_grads(model, &mb, &neg, lo..hi, o.margin, &mut gw, &mut gt);
                step += 1;
                // Checked after every update, the last of an epoch
                // included: nothing later would see it before the model is
                // written.
                let mut bad = adam_w
                    .update(&mut model.w, wd, &gw, o.lr, step)
                    .map(|r| (true, r));
                if bad.is_none() {
                    bad = adam_t
                        .update(&mut model.t, td, &gt, o.lr, step)
                        .map(|r| (false, r));
                }
                if let Some((word_table, row)) = bad {
                    return Err(TrainError::Diverged {
                        epoch,
                        pairs: pairs + hi as u64,
                        what: row_name(model, word_table, row),
                        lr: o.lr.to_string(),
                    });
                }
            }
            pairs += mb.len() as u64;
            progress(Progress {
                epoch,
                pairs,
                loss: loss_sum / pairs.max(1) as f64,
                dev: last_dev,
            });
        }
        drop(it);
        let secs = started.elapsed().as_secs_f64();
        if pairs == 0 {
            return Err(no_usable_pairs(
                &run.stats,
                run.skipped,
                usable,
                "word or trigram",
            ));
        }
        let score = dev.map(|f| f(model));
        let row = EpochReport::logged(epoch, pairs, loss_sum, secs, score);
        run.end_epoch(row, || model.clone())?;
        if let Some(dir) = &o.checkpoint {
            checkpoint::save(
                dir,
                &checkpoint::Checkpoint {
                    state: run.state(epoch, checkpoint::Steps { step }),
                    model: model.clone(),
                    adam: [
                        adam_w.m.clone(),
                        adam_w.v.clone(),
                        adam_t.m.clone(),
                        adam_t.v.clone(),
                    ],
                    best: run.best().cloned(),
                },
            )?;
        }
    }
    let report = run.finish(|m| *model = m);
    check_finite(
        &report,
        model.first_non_finite().map(|at| at.to_string()),
        o.lr,
    )?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::model::Kind;

    fn tiny_model() -> Model {
        let v = paraforge_core::Vectors::from_reader(
            "a 0.5 0.1 -0.2\nman 0.3 0.9 0.1\nplays 0.2 -0.4 0.8\nguitar -0.6 0.2 0.5\nwoman 0.4 0.7 0.3\ncooks 0.9 0.1 0.1\n"
                .as_bytes(),
            std::path::Path::new("mini.txt"),
        )
        .unwrap()
        .0;
        let tris = ["man", " ma", "an ", " a ", "ook", "gui", "ays"]
            .map(String::from)
            .to_vec();
        crate::model::init(Kind::WordTrigram, Some(&v), tris, 2, 3).unwrap()
    }

    /// The analytic gradient of the mini-batch loss equals central finite
    /// differences on every touched parameter (negatives held fixed),
    /// whatever the halves' scaling.
    #[test]
    fn gradients_match_finite_differences() {
        for parts in [PartScale::Raw, PartScale::Unit, PartScale::ByDimension] {
            let mut m = tiny_model();
            m.parts = parts;
            gradients_match_finite_differences_of(m);
        }
    }

    fn gradients_match_finite_differences_of(mut m: Model) {
        let texts = [
            ("a man plays guitar", "the man plays a guitar"),
            ("a woman cooks", "woman cooking"),
            ("a man cooks", "a guy cooks food"),
        ];
        let mb: Vec<(Encoded, Encoded)> = texts
            .iter()
            .map(|(a, b)| (m.encode(a), m.encode(b)))
            .collect();
        let neg = negatives(&m, &mb);
        assert!(neg
            .iter()
            .enumerate()
            .all(|(i, &j)| j as usize / 2 != i / 2));
        let (mut gw, mut gt) = (Grads::default(), Grads::default());
        let margin = 0.9; // large enough that every hinge is active
        let loss = minibatch_grads(&m, &mb, &neg, 0..3, margin, &mut gw, &mut gt);
        assert!(loss > 0.0);
        let f = |m: &Model| {
            let (mut a, mut b) = (Grads::default(), Grads::default());
            minibatch_grads(m, &mb, &neg, 0..3, margin, &mut a, &mut b) / 3.0
        };
        let mut checked = 0;
        for (table, dim, grads) in [(0, m.word_dim, &gw), (1, m.trigram_dim, &gt)] {
            for (&row, &off) in &grads.rows {
                for k in 0..dim {
                    let idx = row as usize * dim + k;
                    let h = 1e-3;
                    fn get(m: &mut Model, table: usize) -> &mut Vec<f32> {
                        if table == 0 {
                            &mut m.w
                        } else {
                            &mut m.t
                        }
                    }
                    let x0 = get(&mut m, table)[idx];
                    get(&mut m, table)[idx] = x0 + h;
                    let up = f(&m);
                    get(&mut m, table)[idx] = x0 - h;
                    let dn = f(&m);
                    get(&mut m, table)[idx] = x0;
                    let fd = (up - dn) / (2.0 * h as f64);
                    let an = grads.values[off + k] as f64;
                    assert!(
                        (fd - an).abs() < 2e-3,
                        "{:?} table {table} row {row} k {k}: fd {fd} analytic {an}",
                        m.parts
                    );
                    checked += 1;
                }
            }
        }
        assert!(checked > 20, "{:?}: {checked}", m.parts);
    }

    #[test]
    fn dcos_matches_finite_differences() {
        let u = [0.3f32, -1.2, 0.5, 2.0];
        let v = [1.0f32, 0.4, -0.7, 0.9];
        let mut g = [0.0f32; 4];
        add_dcos(&u, &v, 1.0, &mut g);
        for k in 0..4 {
            let h = 1e-3;
            let (mut up, mut dn) = (u, u);
            up[k] += h;
            dn[k] -= h;
            let fd = (cosine(&up, &v) - cosine(&dn, &v)) / (2.0 * h);
            assert!((fd - g[k]).abs() < 1e-3, "{k}: {fd} vs {}", g[k]);
        }
    }

    /// The blocked, vectorised search picks what one plain loop over each
    /// row picks: the first most similar row of another pair, ties and
    /// NaN included, for sizes that are not multiples of the block, tile or
    /// lanes.
    #[test]
    fn nearest_of_other_pair_equals_a_plain_search() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        for n in [2, 3, 17, 130, 301, 1100] {
            // Small integers: products exact in any summation order, and
            // ties common.
            let vals: Vec<f32> = (0..n * 4)
                .map(|_| rng.random_range(-3..=3) as f32)
                .collect();
            let mut x = Array2::from_shape_vec((n, 4), vals).unwrap();
            x.row_mut(n - 1).fill(f32::NAN);
            let plain: Vec<u32> = (0..n)
                .map(|i| {
                    let mut best = (f32::NEG_INFINITY, u32::MAX);
                    for j in 0..n {
                        let v = x.row(i).dot(&x.row(j));
                        if j / 2 != i / 2 && v > best.0 {
                            best = (v, j as u32);
                        }
                    }
                    best.1
                })
                .collect();
            assert_eq!(nearest_of_other_pair(&x), plain, "n = {n}");
            assert_eq!(plain[n - 1], u32::MAX, "a NaN row has no negative");
        }
        assert_eq!(first_max(&[f32::NEG_INFINITY; 40]), u32::MAX);
        assert_eq!(first_max(&[1.0, f32::NAN, 3.0, 3.0]), 2);
    }
}
