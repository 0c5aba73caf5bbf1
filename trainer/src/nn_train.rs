//! Training of the neural encoders: the loss, mega-batching and epoch loop
//! of [`crate::train`] (Wieting and Gimpel, 2018, section 4), with burn computing gradients
//! and Adam updating every parameter densely.

use std::time::Instant;

use burn::module::Module;
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::Device;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use crate::data::PairSource;
use crate::epochs::{check_finite, Epochs, Saved};
use crate::megabatch::{check_negatives, nearest_of_other_pair, next_megabatch};
use crate::model::Encoded;
use crate::neural::{objective, regulariser, Arch, Batch, Net, Sampling};
use crate::nn_checkpoint::{self, NeuralKey, ParamIds};
use crate::nn_model::{embed_encoded, first_non_finite, named_params, NeuralModel};
use crate::options::{check_options, EpochReport, Progress, TrainOptions, TrainReport};
use crate::{check_pairs, no_usable_pairs, TrainError};

#[derive(Debug, Clone)]
pub struct NeuralOptions {
    pub base: TrainOptions,
    /// Probability that a training sentence's words are shuffled.
    pub scramble: f64,
    pub sampling: Sampling,
    /// L2 weight on the compositional parameters (lambda_c of Wieting et al., 2016).
    pub lambda_c: f64,
    /// L2 weight on the word table's distance from its start (lambda_w).
    pub lambda_w: f64,
    /// Sentences are cut to this many tokens (bounds a batch's memory).
    pub max_tokens: usize,
    /// Weight of the Gaussian encoders' KL prior (the
    /// lambda of Chen and Gimpel, 2020, section 3.2); ignored by the others.
    pub lambda_kl: f64,
    /// tree-rnn: where the parser's trees are written as the run goes
    /// (after each epoch, and every [`PARSE_CACHE_EVERY`] while parsing), so
    /// that another run (a seed, a resume) need not parse them again.
    pub parse_cache: Option<std::path::PathBuf>,
}

/// How often a tree network's run writes its new trees mid-epoch: its first
/// epoch on a large corpus is mostly parsing (over an hour on 2 cores for
/// 84k pairs), which a kill would otherwise lose.
pub const PARSE_CACHE_EVERY: std::time::Duration = std::time::Duration::from_secs(300);

impl Default for NeuralOptions {
    fn default() -> Self {
        NeuralOptions {
            base: TrainOptions::default(),
            scramble: 0.0,
            sampling: Sampling::Max,
            lambda_c: 0.0,
            lambda_w: 0.0,
            max_tokens: 100,
            lambda_kl: DEFAULT_LAMBDA_KL,
            parse_cache: None,
        }
    }
}

/// The KL prior's weight unless told otherwise (Chen and Gimpel, 2020, tune it and
/// does not say the value; docs/encoders.md says how this one was chosen).
pub const DEFAULT_LAMBDA_KL: f64 = 0.01;

/// Scores a model on the dev set (higher is better).
pub type NeuralDevScore<'a> = &'a dyn Fn(&NeuralModel) -> f64;

/// For each sentence of the mega-batch (2p = pair p's first side, 2p+1 its
/// second) a sentence of another pair: the most similar, or with MIX half
/// the time a random one.
fn negatives(
    net: &Net,
    mb: &[(Encoded, Encoded)],
    sampling: Sampling,
    rng: &mut impl Rng,
) -> Vec<u32> {
    let sents: Vec<&Encoded> = mb.iter().flat_map(|(a, b)| [a, b]).collect();
    let n = sents.len();
    let mut x =
        ndarray::Array2::from_shape_vec((n, net.shape.out_dim()), embed_encoded(net, &sents))
            .expect("n x dim");
    let mut neg = if net.shape.arch.is_gaussian() {
        most_likely_of_other_pair(&x)
    } else {
        for mut row in x.rows_mut() {
            let norm = row.dot(&row).sqrt();
            if norm > 0.0 {
                row /= norm;
            }
        }
        nearest_of_other_pair(&x)
    };
    if sampling == Sampling::Mix {
        for (i, t) in neg.iter_mut().enumerate() {
            if rng.random_bool(0.5) {
                // Any sentence but the two of pair i / 2.
                let j = rng.random_range(0..n - 2);
                *t = if j >= (i / 2) * 2 { j + 2 } else { j } as u32;
            }
        }
    }
    neg
}

/// sum_c ln(v_c) + (a_c - b_c)^2 / v_c with v = a's + b's variances (rows
/// as [mean, variance]): minus twice the log expected likelihood, less its
/// constant. The logarithms of 16 variances are taken as one logarithm of
/// their product in f64 (one `ln` per 16 instead of one per dimension: the
/// search over a mega-batch's n^2 pairs spent most of a Gaussian epoch in
/// `ln`); a block whose product leaves f64's normal range is summed one by
/// one.
fn log_det_and_distance(a: &[f32], b: &[f32], k: usize) -> f64 {
    const BLOCK: usize = 16;
    let mut total = 0f64;
    for lo in (0..k).step_by(BLOCK) {
        let hi = (lo + BLOCK).min(k);
        let (mut prod, mut quad) = (1f64, 0f32);
        for c in lo..hi {
            let v = a[k + c] + b[k + c];
            let m = a[c] - b[c];
            prod *= v as f64;
            quad += m * m / v;
        }
        let logs = if prod.is_normal() {
            prod.ln()
        } else {
            (lo..hi).map(|c| ((a[k + c] + b[k + c]) as f64).ln()).sum()
        };
        total += logs + quad as f64;
    }
    total
}

/// For each row of `x` (Gaussians as [mean, variance]; rows 2p and 2p+1
/// are pair p) the row of another pair with the largest expected
/// likelihood ([`crate::neural::expected_likelihood`]).
fn most_likely_of_other_pair(x: &ndarray::Array2<f32>) -> Vec<u32> {
    use rayon::prelude::*;
    let (n, k) = (x.nrows(), x.ncols() / 2);
    (0..n)
        .into_par_iter()
        .map(|i| {
            let a = x.row(i);
            let mut best = (f64::NEG_INFINITY, u32::MAX);
            for j in (0..n).filter(|j| j / 2 != i / 2) {
                let b = x.row(j);
                let d = -log_det_and_distance(
                    &a.as_slice().expect("rows are contiguous")[..2 * k],
                    &b.as_slice().expect("rows are contiguous")[..2 * k],
                    k,
                );
                if d > best.0 || best.1 == u32::MAX {
                    best = (d, j as u32);
                }
            }
            best.1
        })
        .collect()
}

/// Trains `model` in place on `dev` (an autodiff device is made of it).
/// With `dev_score`, the best epoch's model is the one left in `model`.
pub fn train(
    model: &mut NeuralModel,
    source: &PairSource,
    o: &NeuralOptions,
    device: &Device,
    dev_score: Option<NeuralDevScore>,
    progress: &mut dyn FnMut(Progress),
) -> Result<TrainReport, TrainError> {
    let b = &o.base;
    check_options(b)?;
    check_pairs(source.rows(), b.max_pairs)?;
    if !(0.0..=1.0).contains(&o.scramble) {
        return Err(TrainError::Invalid(format!(
            "scramble rate {} is not a probability",
            o.scramble
        )));
    }
    let key = run_key(model, source, o);
    // The regulariser's start is the network as the run began, resumed or not.
    let initial = model.net.clone();
    let mut opt = AdamConfig::new().with_epsilon(1e-8).init();
    let mut run: Epochs<NeuralKey, Net> = Epochs::new(key, b.seed);
    let resumed = run.resume(b, |dir| {
        let c = nn_checkpoint::load(dir, device)?;
        Ok(Saved {
            state: c.state,
            best: c.best.map(|m| m.net),
            rest: (c.model.net, c.adam, dir.to_path_buf()),
        })
    })?;
    // Read once the checkpoint is known to be of this run.
    if let Some((_, (net, adam, dir))) = resumed {
        opt = opt
            .from_bytes(burn::tensor::Bytes::from_bytes_vec(adam))
            .map_err(|e| {
                TrainError::Invalid(format!("checkpoint {}: adam.bpk: {e}", dir.display()))
            })?;
        model.net = net;
    }
    let ad = device.clone().autodiff();
    let mut net = model.net.clone().fork(&ad).train();
    let start = (o.lambda_c > 0.0 || o.lambda_w > 0.0).then(|| initial.fork(&ad));
    let mut trees = match &o.parse_cache {
        Some(path) if model.net.shape.arch == Arch::TreeRnn => Some(TreeSaver::new(path)?),
        _ => None,
    };
    for epoch in run.remaining(b.epochs) {
        let started = Instant::now();
        let (mut pairs, mut loss_sum) = (0u64, 0f64);
        let last_dev = run.last_dev();
        let mut it = source.epoch(b.shuffle_buffer, &mut run.rng, &mut run.stats);
        let mut mrng = rand_chacha::ChaCha8Rng::seed_from_u64(b.seed ^ (epoch as u64) << 32);
        let (mut done, mut usable) = (false, 0);
        while !done {
            let mb = next_megabatch(&mut it, b, pairs, &mut run.skipped, &mut done, |x, y| {
                let mut e = model.encode_texts(&[x, y], o.max_tokens).into_iter();
                let (ea, eb) = (e.next()?, e.next()?);
                (!ea.words.is_empty() && !eb.words.is_empty()).then_some((ea, eb))
            })?;
            if mb.len() < 2 {
                usable = mb.len();
                break;
            }
            let neg = negatives(&net.valid(), &mb, o.sampling, &mut mrng);
            check_negatives(&neg, epoch, pairs)?;
            for lo in (0..mb.len()).step_by(b.batch_size) {
                let hi = (lo + b.batch_size).min(mb.len());
                let batch = minibatch(&mb, &neg, lo..hi, o.scramble, &net.shape, &mut mrng);
                let (stepped, value) =
                    update(net, &mut opt, &batch, hi - lo, o, start.as_ref(), epoch)?;
                net = stepped;
                loss_sum += value;
                // After every update, the last of an epoch included:
                // nothing later would see it before the model is written.
                if let Some(what) = first_non_finite(&named_params(&net.valid())) {
                    return Err(TrainError::Diverged {
                        epoch,
                        pairs: pairs + hi as u64,
                        what,
                        lr: b.lr.to_string(),
                    });
                }
            }
            pairs += mb.len() as u64;
            if let Some(t) = &mut trees {
                t.save(false);
            }
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
            return Err(no_usable_pairs(&run.stats, run.skipped, usable, "word"));
        }
        model.net = net.valid();
        let score = dev_score.map(|f| f(model));
        // The dev sets' trees included.
        if let Some(t) = &mut trees {
            t.save(true);
        }
        let row = EpochReport::logged(epoch, pairs, loss_sum, secs, score);
        run.end_epoch(row, || model.net.clone())?;
        if let Some(dir) = &b.checkpoint {
            save_checkpoint(dir, &run, epoch, model, &opt)?;
        }
    }
    let report = run.finish(|n| model.net = n);
    check_finite(&report, first_non_finite(&named_params(&model.net)), b.lr)?;
    Ok(report)
}

/// Everything about a run that must match for a checkpoint to resume it.
fn run_key(model: &NeuralModel, source: &PairSource, o: &NeuralOptions) -> NeuralKey {
    let b = &o.base;
    NeuralKey {
        shape: model.net.shape.clone(),
        megabatch: b.megabatch,
        batch_size: b.batch_size,
        margin: b.margin,
        lr: b.lr,
        seed: b.seed,
        shuffle_buffer: b.shuffle_buffer,
        max_pairs: b.max_pairs,
        scramble: o.scramble,
        sampling: o.sampling,
        lambda_c: o.lambda_c,
        lambda_w: o.lambda_w,
        max_tokens: o.max_tokens,
        lambda_kl: if model.net.shape.arch.is_gaussian() {
            o.lambda_kl
        } else {
            0.0
        },
        rows: source.rows(),
        data_sha256: source.digest().to_string(),
        init_vectors_sha256: b.init_vectors_sha256.clone(),
    }
}

/// The mini-batch `pairs` of the mega-batch as the network reads it:
/// s, s', t(s), t(s') for each pair (sentence i of the mega-batch is side
/// i % 2 of pair i / 2), words scrambled at rate `scramble`.
fn minibatch(
    mb: &[(Encoded, Encoded)],
    neg: &[u32],
    pairs: std::ops::Range<usize>,
    scramble: f64,
    shape: &crate::neural::Shape,
    rng: &mut rand_chacha::ChaCha8Rng,
) -> Batch {
    let sentence = |i: usize| {
        let p = &mb[i / 2];
        if i.is_multiple_of(2) {
            &p.0
        } else {
            &p.1
        }
    };
    let mut sents: Vec<Encoded> = Vec::with_capacity(4 * pairs.len());
    for part in 0..4 {
        for p in pairs.clone() {
            let i = match part {
                0 => 2 * p,
                1 => 2 * p + 1,
                2 => neg[2 * p] as usize,
                _ => neg[2 * p + 1] as usize,
            };
            let mut s = sentence(i).clone();
            if scramble > 0.0 && rng.random_bool(scramble) {
                s.words.shuffle(rng);
            }
            sents.push(s);
        }
    }
    let refs: Vec<&[u32]> = sents.iter().map(|s| s.words.as_slice()).collect();
    let mut batch = if shape.trigrams > 0 {
        let t: Vec<&[u32]> = sents.iter().map(|s| s.trigrams.as_slice()).collect();
        Batch::with_trigrams(&refs, &t)
    } else {
        Batch::new(&refs)
    };
    if shape.arch == Arch::TreeRnn {
        batch = batch.with_trees(sents.iter().map(|s| s.tree.clone()).collect());
    }
    batch
}

/// One update on a mini-batch of `n` pairs: the network after Adam's step,
/// and the loss summed over the pairs.
fn update(
    net: Net,
    opt: &mut burn::optim::ModuleOptimizer,
    batch: &Batch,
    n: usize,
    o: &NeuralOptions,
    start: Option<&Net>,
    epoch: usize,
) -> Result<(Net, f64), TrainError> {
    let b = &o.base;
    let (mut loss, prior) = objective(&net, batch, n, b.margin as f64, o.lambda_kl);
    let value: f64 = loss.clone().into_scalar::<f64>() * n as f64;
    if let Some(p) = prior {
        loss = loss + p;
    }
    if let Some(r) = start.and_then(|s| regulariser(&net, s, o.lambda_c, o.lambda_w)) {
        loss = loss + r;
    }
    if !value.is_finite() {
        return Err(TrainError::Invalid(format!(
            "epoch {epoch}: the loss became {value} (lower --lr?)"
        )));
    }
    let grads = GradientsParams::from_grads(loss.backward(), &net);
    Ok((opt.step(b.lr as f64, net, grads), value))
}

/// The checkpoint after `epoch`: the state, the model, the best one so far
/// and Adam's moments.
fn save_checkpoint(
    dir: &std::path::Path,
    run: &Epochs<NeuralKey, Net>,
    epoch: usize,
    model: &NeuralModel,
    opt: &burn::optim::ModuleOptimizer,
) -> Result<(), TrainError> {
    let ids = ParamIds {
        param_ids: nn_checkpoint::param_ids(&model.net),
    };
    let best_model = run.best().map(|net| NeuralModel {
        net: net.clone(),
        words: model.words.clone(),
        notes: serde_json::Value::Null,
    });
    let adam = opt
        .into_bytes()
        .map_err(|e| TrainError::Invalid(format!("checkpoint {}: adam: {e}", dir.display())))?;
    nn_checkpoint::save(
        dir,
        &run.state(epoch, ids),
        model,
        best_model.as_ref(),
        &adam,
    )
}

/// Writes the parser's trees to `--parse-cache` when it keeps more than at
/// the last write.
struct TreeSaver<'a> {
    path: &'a std::path::Path,
    parser: &'static paraforge_encoders::link_grammar::Parser,
    kept: usize,
    at: Instant,
    /// A write failed mid-run: said once, then no more tried.
    failed: bool,
}

impl<'a> TreeSaver<'a> {
    /// Fails now, not an epoch in, where the path cannot be written.
    fn new(path: &'a std::path::Path) -> Result<TreeSaver<'a>, TrainError> {
        let parser = paraforge_encoders::link_grammar::shared()
            .map_err(|e| TrainError::Invalid(e.to_string()))?;
        paraforge_encoders::parse_cache::writable(path)
            .map_err(|e| TrainError::Invalid(format!("--parse-cache: {e}")))?;
        Ok(TreeSaver {
            path,
            parser,
            kept: parser.kept_len(),
            at: Instant::now(),
            failed: false,
        })
    }

    /// Writes if more trees are kept, and (unless `now`) the last write is
    /// [`PARSE_CACHE_EVERY`] old. A failed write is a warning: the trees
    /// are a cache, and the training goes on without it.
    fn save(&mut self, now: bool) {
        let kept = self.parser.kept_len();
        if self.failed || kept == self.kept || (!now && self.at.elapsed() < PARSE_CACHE_EVERY) {
            return;
        }
        match paraforge_encoders::parse_cache::save(self.parser, self.path) {
            Ok(_) => (self.kept, self.at) = (kept, Instant::now()),
            Err(e) => {
                tracing::warn!("{e}; the run goes on without writing its trees");
                self.failed = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The blocked logarithm gives the per-dimension sum, for ordinary
    /// variances and for ones whose product leaves f64's range.
    #[test]
    fn blocked_log_det_equals_the_plain_sum() {
        let k = 50;
        for scale in [1.0f32, 1e-12, 1e12, 1e-20, 1e20] {
            let a: Vec<f32> = (0..2 * k)
                .map(|i| {
                    if i < k {
                        (i as f32).sin()
                    } else {
                        scale * (1.0 + (i as f32 * 0.37).cos().abs())
                    }
                })
                .collect();
            let b: Vec<f32> = (0..2 * k)
                .map(|i| {
                    if i < k {
                        (i as f32 * 0.5).cos()
                    } else {
                        scale * (0.5 + (i as f32 * 0.11).sin().abs())
                    }
                })
                .collect();
            let plain: f64 = (0..k)
                .map(|c| {
                    let v = (a[k + c] + b[k + c]) as f64;
                    let m = (a[c] - b[c]) as f64;
                    v.ln() + m * m / v
                })
                .sum();
            let got = log_det_and_distance(&a, &b, k);
            assert!(
                (got - plain).abs() <= 1e-4 * plain.abs().max(1.0),
                "{scale}: {got} vs {plain}"
            );
        }
    }
}
