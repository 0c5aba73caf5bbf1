//! Supervised SICK training of an averaging encoder (Wieting et al.,
//! 2016, section 4.4.1, Table 5): the encoder's own tables are trained
//! with the task, not frozen as in [`crate::transfer`].
//!
//! Both sentences are averaged (word rows, then trigram rows, each half
//! scaled as the model's are, as `core::encoder::Model` embeds), h_x = h_L * h_R and h_+ = |h_L - h_R|
//! feed a sigmoid layer, h_s = sigmoid(W_x h_x + W_+ h_+ + b), and a softmax
//! over the classes. SICK-R (relatedness 1..5) minimizes KL(p || p_hat)
//! with p the sparse distribution of Tai et al. (2015) and predicts
//! r^T p_hat; SICK-E (3 labels) minimizes the labels' negative
//! log-likelihood. The layer weights take an L2 penalty, the tables one
//! toward their starting values (the paper regularizes word embeddings
//! "back to their initial values"). Adam at 0.001, batches of 25 pairs,
//! 10 epochs; the epoch kept is the best on SICK's trial split, and its
//! test score is the one reported. The paper tunes the batch, the hidden
//! size and both penalties on the trial split; here the hidden size is the
//! embedding's and the penalties are options.

use burn::module::{Module, Param};
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::{activation, Device, Int, Tensor, TensorData};
use rand::seq::SliceRandom;
use rand::SeedableRng;

use paraforge_core::encoder::{Encoded, Model};

use crate::transfer::{prediction, relatedness_target, Example, Task};
use crate::EvalError;
use paraforge_encoders::neural::unit_rows;

/// Settings of a supervised run.
#[derive(Debug, Clone)]
pub struct TuneOptions {
    pub epochs: usize,
    pub batch_size: usize,
    pub lr: f64,
    /// L2 weight on the layers' weights (lambda_c).
    pub l2_layers: f64,
    /// L2 weight pulling the tables toward their starting values (lambda_w).
    pub l2_tables: f64,
    /// Train the classifier alone, the tables frozen (the comparison that
    /// shows what training the encoder adds).
    pub freeze_tables: bool,
    pub seed: u64,
}

impl Default for TuneOptions {
    fn default() -> Self {
        TuneOptions {
            epochs: 10,
            batch_size: 25,
            lr: 1e-3,
            l2_layers: 1e-5,
            l2_tables: 1e-6,
            freeze_tables: false,
            seed: 1,
        }
    }
}

/// The outcome on one task.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TuneResult {
    pub task: String,
    /// "pearson" (x 100) or "accuracy" (x 100).
    pub metric: &'static str,
    /// The kept epoch (1-based) and its trial-split score.
    pub best_epoch: usize,
    pub dev: f64,
    pub test: f64,
    pub frozen_tables: bool,
    pub train_pairs: usize,
}

#[derive(Module, Debug)]
struct Net {
    words: Option<Param<Tensor<2>>>,
    trigrams: Option<Param<Tensor<2>>>,
    /// The length each half is scaled to, as the model embeds
    /// ([`paraforge_core::Model::part_lengths`]); None: raw halves.
    #[module(skip)]
    part_lengths: Option<[f32; 2]>,
    w_mul: Param<Tensor<2>>,
    w_abs: Param<Tensor<2>>,
    b_hidden: Param<Tensor<2>>,
    w_out: Param<Tensor<2>>,
    b_out: Param<Tensor<2>>,
}

/// One side's rows for a batch: the rows to gather and the averaging
/// matrix (sentences x rows gathered, 1/count per sentence's rows).
struct Gather {
    ids: Vec<i64>,
    avg: Vec<f32>,
}

fn gather(sentences: &[&Encoded], part: impl Fn(&Encoded) -> &[u32]) -> Gather {
    let total: usize = sentences.iter().map(|e| part(e).len()).sum();
    let mut ids = Vec::with_capacity(total);
    let mut avg = vec![0f32; sentences.len() * total.max(1)];
    let width = total.max(1);
    for (s, e) in sentences.iter().enumerate() {
        let rows = part(e);
        for &r in rows {
            avg[s * width + ids.len()] = 1.0 / rows.len() as f32;
            ids.push(i64::from(r));
        }
    }
    Gather { ids, avg }
}

fn t2(v: Vec<f32>, shape: [usize; 2], dev: &Device) -> Tensor<2> {
    Tensor::<2>::from_data(TensorData::new(v, shape), dev)
}

impl Net {
    /// The mean rows of `table` for each sentence (zeros where none).
    fn mean(table: &Param<Tensor<2>>, g: &Gather, n: usize, dev: &Device) -> Tensor<2> {
        let t = table.val();
        let dim = t.dims()[1];
        if g.ids.is_empty() {
            return Tensor::<2>::zeros([n, dim], dev);
        }
        let ids = Tensor::<1, Int>::from_data(TensorData::new(g.ids.clone(), [g.ids.len()]), dev);
        t2(g.avg.clone(), [n, g.ids.len()], dev).matmul(t.select(0, ids))
    }

    /// Sentence embeddings of `sents`, as the averaging model computes them.
    fn embed(&self, sents: &[&Encoded], dev: &Device) -> Tensor<2> {
        let n = sents.len();
        let mut parts = Vec::new();
        if let Some(w) = &self.words {
            parts.push(Self::mean(w, &gather(sents, |e| &e.words), n, dev));
        }
        if let Some(t) = &self.trigrams {
            parts.push(Self::mean(t, &gather(sents, |e| &e.trigrams), n, dev));
        }
        if let Some(lengths) = self.part_lengths {
            parts = parts
                .into_iter()
                .zip(lengths)
                .map(|(p, len)| unit_rows(p) * len)
                .collect();
        }
        Tensor::cat(parts, 1)
    }

    /// Log-probabilities of the classes for pairs (left[i], right[i]).
    fn forward(&self, left: &[&Encoded], right: &[&Encoded], dev: &Device) -> Tensor<2> {
        let (l, r) = (self.embed(left, dev), self.embed(right, dev));
        let mul = l.clone() * r.clone();
        let abs = (l - r).abs();
        let h = activation::sigmoid(
            mul.matmul(self.w_mul.val()) + abs.matmul(self.w_abs.val()) + self.b_hidden.val(),
        );
        activation::log_softmax(h.matmul(self.w_out.val()) + self.b_out.val(), 1)
    }
}

struct Pairs {
    left: Vec<Encoded>,
    right: Vec<Encoded>,
    y: Vec<f32>,
    gold: Vec<f32>,
}

fn pairs(
    model: &Model,
    ex: &[Example],
    k: usize,
    split: &str,
    task: &str,
) -> Result<Pairs, EvalError> {
    let mut p = Pairs {
        left: Vec::new(),
        right: Vec::new(),
        y: Vec::new(),
        gold: Vec::new(),
    };
    for (i, e) in ex.iter().enumerate() {
        let (Example::Two(a, b, _) | Example::Scored(a, b, _)) = e else {
            return Err(EvalError::Invalid(format!(
                "{task} {split}: example {} is one sentence; supervised training takes pairs",
                i + 1
            )));
        };
        let (t, g) = match e {
            Example::Scored(_, _, s) => (relatedness_target(*s, k), *s),
            Example::Two(_, _, c) => {
                let mut t = vec![0f32; k];
                t[*c] = 1.0;
                (t, *c as f32)
            }
            Example::One(..) => unreachable!("refused above"),
        };
        p.left.push(model.encode(a));
        p.right.push(model.encode(b));
        p.y.extend(t);
        p.gold.push(g);
    }
    Ok(p)
}

fn predict(net: &Net, p: &Pairs, k: usize, scored: bool, dev: &Device) -> Vec<f32> {
    let mut out = Vec::with_capacity(p.gold.len());
    let idx: Vec<usize> = (0..p.gold.len()).collect();
    for chunk in idx.chunks(256) {
        let l: Vec<&Encoded> = chunk.iter().map(|&i| &p.left[i]).collect();
        let r: Vec<&Encoded> = chunk.iter().map(|&i| &p.right[i]).collect();
        let probs: Vec<f32> = net
            .forward(&l, &r, dev)
            .exp()
            .into_data()
            .try_to_vec::<f32>()
            .expect("f32 probabilities");
        out.extend(probs.chunks(k).map(|row| prediction(row, scored)));
    }
    out
}

/// The task's metric x 100.
fn score(pred: &[f32], gold: &[f32], scored: bool) -> f64 {
    100.0 * crate::transfer::score(pred, gold, scored)
}

/// The network at its start: the model's tables, and Glorot-uniform
/// layers as a freshly initialized dense layer has (drawn from `rng`).
fn init_net(model: &Model, k: usize, rng: &mut rand_chacha::ChaCha8Rng, cpu: &Device) -> Net {
    let dim = model.dim();
    let hidden = dim;
    // Glorot-uniform layers, as a freshly initialized dense layer.
    let mut glorot = |rows: usize, cols: usize| {
        use rand::Rng;
        let a = (6.0 / (rows + cols) as f64).sqrt() as f32;
        let v: Vec<f32> = (0..rows * cols).map(|_| rng.random_range(-a..a)).collect();
        Param::from_tensor(t2(v, [rows, cols], cpu))
    };
    let table = |v: &[f32], rows: usize, cols: usize| -> Option<Param<Tensor<2>>> {
        (rows > 0 && cols > 0).then(|| Param::from_tensor(t2(v.to_vec(), [rows, cols], cpu)))
    };
    let word_rows = if model.word_dim > 0 {
        model.words().len() + 1
    } else {
        0
    };
    Net {
        words: table(&model.w, word_rows, model.word_dim),
        trigrams: table(&model.t, model.trigrams().len(), model.trigram_dim),
        part_lengths: model.part_lengths(),
        w_mul: glorot(dim, hidden),
        w_abs: glorot(dim, hidden),
        b_hidden: Param::from_tensor(Tensor::<2>::zeros([1, hidden], cpu)),
        w_out: glorot(hidden, k),
        b_out: Param::from_tensor(Tensor::<2>::zeros([1, k], cpu)),
    }
}

/// Trains `model`'s tables and a classifier on `task` (SICK-R or SICK-E:
/// `transfer::load`'s tasks with pairs), keeps the best epoch on its dev
/// split and scores it on its test split.
pub fn tune(model: &Model, task: &Task, o: &TuneOptions) -> Result<TuneResult, EvalError> {
    let scored = match task.name {
        "SICK-R" => true,
        "SICK-E" => false,
        other => {
            return Err(EvalError::Invalid(format!(
                "supervised training is for SICK-R and SICK-E, not {other}"
            )))
        }
    };
    if o.epochs == 0 || o.batch_size == 0 {
        return Err(EvalError::Invalid(
            "supervised training needs at least one epoch and a batch of one".into(),
        ));
    }
    let k = task.classes;
    let (train, dev_split, test) = (
        pairs(model, &task.train, k, "train", task.name)?,
        pairs(model, &task.dev, k, "dev", task.name)?,
        pairs(model, &task.test, k, "test", task.name)?,
    );
    if train.gold.is_empty() || dev_split.gold.is_empty() || test.gold.is_empty() {
        return Err(EvalError::Invalid(format!(
            "{}: a split is empty (train {}, dev {}, test {})",
            task.name,
            train.gold.len(),
            dev_split.gold.len(),
            test.gold.len()
        )));
    }
    let cpu = paraforge_encoders::nn_model::cpu();
    let ad = cpu.clone().autodiff();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(o.seed);
    let net = init_net(model, k, &mut rng, &cpu);
    let start_words = net.words.as_ref().map(|p| p.val().fork(&ad));
    let start_trigrams = net.trigrams.as_ref().map(|p| p.val().fork(&ad));
    let mut net = net.fork(&ad).train();
    let mut opt = AdamConfig::new().init();
    let mut order: Vec<usize> = (0..train.gold.len()).collect();
    let mut best: Option<(usize, f64, f64)> = None;
    for epoch in 1..=o.epochs {
        order.shuffle(&mut rng);
        for chunk in order.chunks(o.batch_size) {
            let n = chunk.len();
            let l: Vec<&Encoded> = chunk.iter().map(|&i| &train.left[i]).collect();
            let r: Vec<&Encoded> = chunk.iter().map(|&i| &train.right[i]).collect();
            let y: Vec<f32> = chunk
                .iter()
                .flat_map(|&i| train.y[i * k..(i + 1) * k].iter().copied())
                .collect();
            let logp = net.forward(&l, &r, &ad);
            // KL(p || p_hat) up to the entropy of p, which has no gradient;
            // for one-hot p it is the negative log-likelihood.
            let fit = (logp * t2(y, [n, k], &ad)).sum().neg() / n as f64;
            let layers = net.w_mul.val().square().sum()
                + net.w_abs.val().square().sum()
                + net.w_out.val().square().sum();
            let mut loss = fit + layers * o.l2_layers;
            if !o.freeze_tables {
                if let (Some(w), Some(w0)) = (&net.words, &start_words) {
                    loss = loss + (w.val() - w0.clone()).square().sum() * o.l2_tables;
                }
                if let (Some(t), Some(t0)) = (&net.trigrams, &start_trigrams) {
                    loss = loss + (t.val() - t0.clone()).square().sum() * o.l2_tables;
                }
            }
            let mut grads = GradientsParams::from_grads(loss.backward(), &net);
            if o.freeze_tables {
                for p in [&net.words, &net.trigrams].into_iter().flatten() {
                    let _ = grads.remove::<2>(p.id);
                }
            }
            net = opt.step(o.lr, net, grads);
        }
        let plain = net.valid();
        let d = score(
            &predict(&plain, &dev_split, k, scored, &cpu),
            &dev_split.gold,
            scored,
        );
        if !d.is_finite() {
            return Err(EvalError::Invalid(format!(
                "{}: the trial-split score is not finite after epoch {epoch} (a diverged run, or predictions that do not vary over the split)",
                task.name
            )));
        }
        if best.is_none_or(|(_, b, _)| d > b) {
            let t = score(&predict(&plain, &test, k, scored, &cpu), &test.gold, scored);
            best = Some((epoch, d, t));
        }
    }
    let (best_epoch, dev_score, test_score) = best.expect("at least one epoch");
    Ok(TuneResult {
        task: task.name.to_string(),
        metric: if scored { "pearson" } else { "accuracy" },
        best_epoch,
        dev: dev_score,
        test: test_score,
        frozen_tables: o.freeze_tables,
        train_pairs: train.gold.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use paraforge_core::encoder::Kind;

    /// The task's embedding is the model's own, scaled halves included, so
    /// that fine-tuning starts from what the encoder scores with.
    #[test]
    fn the_task_embeds_sentences_as_the_model_does() {
        let model = Model::from_tables(
            Kind::WordTrigram,
            vec!["cat".into(), "dog".into()],
            2,
            vec![3.0, 1.0, -2.0, 4.0, 0.0, 0.0],
            vec![" ca".into(), "cat".into(), "at ".into()],
            3,
            vec![0.1, 0.2, 0.3, -0.4, 0.5, 0.6, 0.7, 0.8, -0.9],
        )
        .unwrap();
        assert_eq!(model.parts, paraforge_core::PartScale::ByDimension);
        let cpu = paraforge_encoders::nn_model::cpu();
        let p = |v: &[f32], r, c| Some(Param::from_tensor(t2(v.to_vec(), [r, c], &cpu)));
        let zero = || Param::from_tensor(Tensor::<2>::zeros([1, 1], &cpu));
        let net = Net {
            words: p(&model.w, 3, 2),
            trigrams: p(&model.t, 3, 3),
            part_lengths: model.part_lengths(),
            w_mul: zero(),
            w_abs: zero(),
            b_hidden: zero(),
            w_out: zero(),
            b_out: zero(),
        };
        let sents: Vec<Encoded> = ["the cat", "dog cat", "zebra"]
            .iter()
            .map(|s| model.encode(s))
            .collect();
        let refs: Vec<&Encoded> = sents.iter().collect();
        let got: Vec<f32> = net
            .embed(&refs, &cpu)
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        for (i, e) in sents.iter().enumerate() {
            let mut want = vec![0.0; 5];
            model.embed_into(e, &mut want);
            for (a, b) in got[i * 5..(i + 1) * 5].iter().zip(&want) {
                assert!((a - b).abs() < 1e-6, "{i}: {got:?} vs {want:?}");
            }
        }
    }
}
