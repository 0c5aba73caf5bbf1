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

use ndarray::Array2;
use rand::SeedableRng;
use rayon::prelude::*;
use rustc_hash::FxHashMap;

use crate::checkpoint;
use crate::data::{PairSource, ReadStats};
use crate::epochs::{check_finite, Epochs, Saved};
use crate::megabatch::{check_negatives, nearest_of_other_pair, next_megabatch};
use crate::model::{cosine, for_each_trigram, trigram_text, Encoded, Model};
use crate::options::check_options;
pub use crate::options::{
    DevScore, EpochReport, Progress, TrainOptions, TrainReport, MAX_LR, MAX_MARGIN,
};
use crate::{check_pairs, no_usable_pairs, TrainError};
use paraforge_core::PartScale;

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
}
