//! The mega-batch (Wieting and Gimpel, 2018, section 4) both training
//! loops share: reading the next M x batch-size pairs, and each sentence's
//! negative, the nearest sentence of another pair of the mega-batch.

use ndarray::{s, Array2};
use rayon::prelude::*;

use crate::options::TrainOptions;
use crate::TrainError;

/// M when none is given. For a neural encoder, the largest M up to
/// [`crate::DEFAULT_MEGABATCH`] whose mega-batch is at most a twentieth of
/// the corpus, and at least 1; for the averages, the default. A mega-batch
/// that is a large share of a small corpus makes its "hardest negatives"
/// near-paraphrases, which a recurrent encoder does not survive: on the
/// demo's 4,068 pairs one LSTM epoch scores 50.4 / 50.8 / 44.3 / 20.7
/// Pearson on the STS Benchmark test at M = 1 / 2 / 5 / 20, where TRIGRAM
/// scores 68.2 / 68.8 / 68.9 / 68.9 and WORD 33.8 throughout
/// (docs/training.md, "Mega-batches and the corpus size").
pub fn auto(pairs: u64, batch_size: usize, neural: bool) -> usize {
    if !neural {
        return crate::DEFAULT_MEGABATCH;
    }
    let m = pairs / (20 * batch_size.max(1) as u64);
    m.clamp(1, crate::DEFAULT_MEGABATCH as u64) as usize
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
/// (docs/bench/HISTORY.md, "Training speed").
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

#[cfg(test)]
mod tests {

    /// A neural encoder's M from the corpus size: 1 below 4,000 pairs at
    /// batch 100, the paper's 20 from 40,000 on; the averages' always 20.
    #[test]
    fn the_megabatch_grows_with_the_corpus() {
        let neural = |pairs| super::auto(pairs, 100, true);
        assert_eq!(neural(0), 1);
        assert_eq!(neural(3_999), 1);
        assert_eq!(neural(4_068), 2);
        assert_eq!(neural(20_000), 10);
        assert_eq!(neural(84_612), 20);
        assert_eq!(neural(5_000_000), 20);
        assert_eq!(super::auto(4_068, 100, false), 20);
    }

    use super::*;

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
