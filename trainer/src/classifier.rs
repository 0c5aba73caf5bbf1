//! Seed 001 section 5.6.1 (docs/filters.md, "P(reference)"): a binary
//! classifier of whether an English sentence is a human reference (label 1)
//! or a back-translation (label 0), word averaging or an LSTM (mean of its
//! hidden states) followed by a logistic layer, trained by cross-entropy
//! with Adam. Its probability of "reference" scores translations as a
//! quality filter (`paraforge rescore --classifier`).
//!
//! Examples come from a paraforge output: each pair gives its reference and
//! one of its translations; with `model.beam_candidates = k` the k
//! candidates compete for the 0-labelled slot, chosen at random or as the
//! one the current model finds most reference-like (the paper tunes that
//! choice). A two-way softmax over (reference, translation) equals the
//! logistic of their logit difference, so one logit is kept.

use std::path::Path;

use arrow_array::{Array, Int32Array, StringArray};
use burn::module::{Module, Param};
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::{DType, Device, Tensor, TensorData};
use paraforge_core::encoder::Kind;
use paraforge_core::schema::{col, column, dataset_files, PairReader};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use crate::model::Model;
use crate::neural::{expected_dims, regulariser, Arch, Batch, Net, Shape};
use crate::TrainError;

pub const WEIGHTS: &str = "model.safetensors";
pub const CONFIG: &str = "config.json";
const FORMAT: &str = "paraforge-reference-classifier";

/// `paraforge train-classifier --model NAME`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClassifierKind {
    /// The word average, then the logistic layer.
    Avg,
    /// An LSTM, the mean of its hidden states, then the logistic layer.
    Lstm,
}

impl ClassifierKind {
    fn arch(self) -> Arch {
        match self {
            ClassifierKind::Avg => Arch::Avg,
            ClassifierKind::Lstm => Arch::Lstm,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ClassifierKind::Avg => "avg",
            ClassifierKind::Lstm => "lstm",
        }
    }
}

impl std::str::FromStr for ClassifierKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "avg" => Ok(ClassifierKind::Avg),
            "lstm" => Ok(ClassifierKind::Lstm),
            _ => Err(format!("unknown classifier {s:?} (avg or lstm)")),
        }
    }
}

/// Which translation of a pair is its negative example while training.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NegativeChoice {
    /// One of the pair's candidates at random.
    #[default]
    Random,
    /// The candidate the current model gives the highest P(reference).
    Hardest,
}

impl std::str::FromStr for NegativeChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "random" => Ok(NegativeChoice::Random),
            "hardest" => Ok(NegativeChoice::Hardest),
            _ => Err(format!("unknown negative choice {s:?} (random or hardest)")),
        }
    }
}

/// The encoder and the logistic layer: `head.w` [dim, 1], `head.b` [1, 1].
#[derive(Module, Debug)]
pub struct RefNet {
    pub enc: Net,
    pub head: Vec<Param<Tensor<2>>>,
}

impl RefNet {
    /// A network with the given values; `comp` holds the encoder's
    /// parameters and then `head.w` and `head.b`.
    pub fn from_values(
        shape: Shape,
        emb: &[f64],
        comp: &[(Vec<f64>, usize, usize)],
        dev: &Device,
        dtype: DType,
    ) -> RefNet {
        let at = comp.len() - 2;
        let enc = Net::from_values(shape, emb, &comp[..at], dev, dtype);
        let head = comp[at..]
            .iter()
            .map(|(v, r, c)| {
                Param::from_tensor(Tensor::<2>::from_data(
                    TensorData::new(v.clone(), [*r, *c]).convert_dtype(dtype),
                    (dev, dtype),
                ))
            })
            .collect();
        RefNet { enc, head }
    }

    /// (name, [rows, cols]) of every parameter after the word table.
    pub fn dims(shape: &Shape) -> Vec<(String, [usize; 2])> {
        let mut d = expected_dims(shape);
        d.push(("head.w".into(), [shape.out_dim(), 1]));
        d.push(("head.b".into(), [1, 1]));
        d
    }

    /// Every parameter by the name the saved file gives it.
    pub fn named_params(&self) -> Vec<(String, &Param<Tensor<2>>)> {
        let mut p = crate::nn_model::named_params(&self.enc);
        p.extend(
            ["head.w", "head.b"]
                .map(String::from)
                .into_iter()
                .zip(&self.head),
        );
        p
    }

    /// One logit per sentence: log P(reference) - log P(translation).
    pub fn logits(&self, b: &Batch) -> Tensor<1> {
        let g = self.enc.forward(b);
        (g.matmul(self.head[0].val()) + self.head[1].val()).reshape([b.n])
    }
}

/// Mean cross-entropy of logits `z` against `labels` (1 reference, 0
/// translation): softplus(z) - y z, with softplus(z) = max(z, 0) +
/// ln(1 + e^-|z|) so that no exponential overflows.
pub fn cross_entropy(z: Tensor<1>, labels: &[f32]) -> Tensor<1> {
    let (dev, dtype) = (z.device(), z.dtype());
    let y = Tensor::<1>::from_data(
        TensorData::new(labels.to_vec(), [labels.len()]).convert_dtype(dtype),
        (&dev, dtype),
    );
    let softplus = z.clone().clamp_min(0.0) + (z.clone().abs().neg().exp() + 1.0).log();
    (softplus - z * y).mean()
}

/// A trained classifier: the network on a plain device and a WORD model
/// for tokenisation (the same rule as every neural encoder: paraforge's
/// score tokenizer, unknown words to the last row).
#[derive(Debug)]
pub struct ReferenceClassifier {
    pub net: RefNet,
    pub words: Model,
    pub notes: serde_json::Value,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Config {
    format: String,
    version: u32,
    classifier: ClassifierKind,
    #[serde(flatten)]
    shape: Shape,
    tokenization: String,
    words: Vec<String>,
    params: Vec<String>,
    #[serde(default)]
    notes: serde_json::Value,
}

impl ReferenceClassifier {
    /// A fresh classifier over the word table of `words` (a WORD model).
    pub fn init(
        kind: ClassifierKind,
        words: Model,
        hidden: usize,
        seed: u64,
        dev: &Device,
    ) -> Result<ReferenceClassifier, TrainError> {
        if words.kind != Kind::Word {
            return Err(TrainError::Invalid(format!(
                "a classifier reads word vectors, not a {} model",
                words.kind.name()
            )));
        }
        let shape = Shape {
            arch: kind.arch(),
            vocab: words.words().len() + 1,
            word_dim: words.word_dim,
            hidden,
            layers: 0,
            parts: Vec::new(),
            trigrams: 0,
            trigram_dim: 0,
        };
        let enc = Net::init(shape.clone(), &words.w, seed, dev)?;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x4845_4144);
        let dim = shape.out_dim();
        let a = (6.0 / (dim + 1) as f64).sqrt();
        let w: Vec<f64> = (0..dim).map(|_| rng.random_range(-a..a)).collect();
        let t = |v: Vec<f64>, r: usize, c: usize| {
            Param::from_tensor(Tensor::<2>::from_data(
                TensorData::new(v, [r, c]).convert_dtype(DType::F32),
                (dev, DType::F32),
            ))
        };
        Ok(ReferenceClassifier {
            net: RefNet {
                enc,
                head: vec![t(w, dim, 1), t(vec![0.0], 1, 1)],
            },
            words,
            notes: serde_json::Value::Null,
        })
    }

    pub fn kind(&self) -> ClassifierKind {
        match self.net.enc.shape.arch {
            Arch::Avg => ClassifierKind::Avg,
            _ => ClassifierKind::Lstm,
        }
    }

    /// Word ids of `text`, cut to `max_tokens`.
    pub fn ids(&self, text: &str, max_tokens: usize) -> Vec<u32> {
        let mut w = self.words.encode(text).words;
        w.truncate(max_tokens);
        w
    }

    /// P(reference) of each text, in order; None for a text with no token.
    pub fn probabilities(&self, texts: &[&str]) -> Vec<Option<f32>> {
        let ids: Vec<Vec<u32>> = texts.iter().map(|t| self.ids(t, MAX_TOKENS)).collect();
        let refs: Vec<&[u32]> = ids.iter().map(|v| v.as_slice()).collect();
        probabilities_of(&self.net, &refs)
    }

    /// Writes `dir/model.safetensors` and `dir/config.json`.
    pub fn save(&self, dir: &Path) -> Result<(), TrainError> {
        std::fs::create_dir_all(dir).map_err(|e| TrainError::io(dir, e))?;
        let shape = self.net.enc.shape.clone();
        let names: Vec<String> = RefNet::dims(&shape).into_iter().map(|d| d.0).collect();
        let mut tensors = vec![("emb".to_string(), self.net.enc.emb.val())];
        let params = self.net.enc.comp.iter().chain(&self.net.head);
        tensors.extend(names.iter().cloned().zip(params.map(|p| p.val())));
        let bytes = crate::nn_model::safetensors_bytes(tensors, FORMAT)
            .map_err(|e| TrainError::Invalid(format!("{}: {e}", dir.display())))?;
        crate::nn_model::write_atomic(&dir.join(WEIGHTS), &bytes)?;
        let config = Config {
            format: FORMAT.into(),
            version: 1,
            classifier: self.kind(),
            shape,
            tokenization: crate::nn_model::TOKENIZATION.into(),
            words: self.words.words().to_vec(),
            params: names,
            notes: self.notes.clone(),
        };
        let json = serde_json::to_vec_pretty(&config).expect("config serializes");
        crate::nn_model::write_atomic(&dir.join(CONFIG), &json)
    }

    pub fn load(dir: &Path, dev: &Device) -> Result<ReferenceClassifier, TrainError> {
        let cpath = dir.join(CONFIG);
        let bad = |p: &Path, m: String| TrainError::BadModel {
            path: p.to_path_buf(),
            reason: m,
        };
        let text = std::fs::read(&cpath).map_err(|e| TrainError::io(&cpath, e))?;
        let c: Config = serde_json::from_slice(&text)
            .map_err(|e| bad(&cpath, format!("not a reference classifier's config: {e}")))?;
        if c.format != FORMAT || c.version != 1 {
            return Err(bad(
                &cpath,
                format!(
                    "format {:?} version {}, expected {FORMAT:?} version 1",
                    c.format, c.version
                ),
            ));
        }
        if c.shape.arch != c.classifier.arch() || c.words.len() + 1 != c.shape.vocab {
            return Err(bad(
                &cpath,
                format!(
                    "classifier {} with encoder {} and {} words for {} rows",
                    c.classifier.name(),
                    c.shape.arch,
                    c.words.len(),
                    c.shape.vocab
                ),
            ));
        }
        c.shape.validate().map_err(|e| bad(&cpath, e.to_string()))?;
        let (emb, comp, words) =
            crate::nn_model::read_tables(dir, &c.shape, c.words, RefNet::dims(&c.shape))?;
        let net = RefNet::from_values(c.shape.clone(), &emb, &comp, dev, DType::F32);
        Ok(ReferenceClassifier {
            net,
            words,
            notes: c.notes,
        })
    }
}

/// Sentences are cut at this many tokens (bounds a batch's memory).
pub const MAX_TOKENS: usize = 100;

/// P(reference) of word-id sentences by `net` as it is; None for an empty
/// one. Sentences of similar length share a batch.
fn probabilities_of(net: &RefNet, sents: &[&[u32]]) -> Vec<Option<f32>> {
    let mut out = vec![None; sents.len()];
    let mut order: Vec<usize> = (0..sents.len()).filter(|&i| !sents[i].is_empty()).collect();
    order.sort_by_key(|&i| sents[i].len());
    for chunk in order.chunks(256) {
        let b: Vec<&[u32]> = chunk.iter().map(|&i| sents[i]).collect();
        let z = net.logits(&Batch::new(&b));
        let p = burn::tensor::activation::sigmoid(z)
            .into_data()
            .convert::<f32>()
            .try_into_vec::<f32>()
            .expect("converted to f32");
        for (k, &i) in chunk.iter().enumerate() {
            out[i] = Some(p[k]);
        }
    }
    out
}

/// One pair's sentences: its reference and its translation candidates.
#[derive(Debug, Clone, PartialEq)]
pub struct Example {
    pub reference: String,
    pub candidates: Vec<String>,
}

/// The first `limit` pairs of a dataset (files in name order), each with
/// all its candidates (rows of one id with `candidate_rank` 1, 2, ... lie
/// together, as the worker writes them). Rows with an empty side are left
/// out.
pub fn read_examples(path: &Path, limit: usize) -> Result<Vec<Example>, TrainError> {
    let mut out: Vec<Example> = Vec::new();
    let mut last_id: Option<String> = None;
    for f in dataset_files(path)? {
        let reader = PairReader::open(&f, &[col::ID, col::REFERENCE, col::TRANSLATION])?;
        for b in reader {
            let b = b?;
            let id = column::<StringArray>(&b, col::ID, &f)?;
            let r = column::<StringArray>(&b, col::REFERENCE, &f)?;
            let t = column::<StringArray>(&b, col::TRANSLATION, &f)?;
            // Outputs from before k-best have one candidate per row.
            let rank = column::<Int32Array>(&b, col::CANDIDATE_RANK, &f).ok();
            for i in 0..b.num_rows() {
                if r.is_null(i) || t.is_null(i) {
                    continue;
                }
                let (rf, tr) = (r.value(i).trim(), t.value(i).trim());
                if rf.is_empty() || tr.is_empty() {
                    continue;
                }
                let next_rank = rank.is_some_and(|a| a.value(i) > 1);
                let same = next_rank && last_id.as_deref() == Some(id.value(i));
                match out.last_mut() {
                    Some(e) if same => e.candidates.push(tr.to_string()),
                    _ => {
                        if out.len() == limit {
                            return Ok(out);
                        }
                        out.push(Example {
                            reference: rf.to_string(),
                            candidates: vec![tr.to_string()],
                        });
                    }
                }
                last_id = Some(id.value(i).to_string());
            }
        }
    }
    Ok(out)
}

#[derive(Debug, Clone)]
pub struct ClassifierOptions {
    pub epochs: usize,
    pub lr: f64,
    /// Pairs per mini-batch (each gives two sentences).
    pub batch_pairs: usize,
    /// L2 weight on the word table's distance from its start.
    pub l2: f64,
    pub negatives: NegativeChoice,
    pub seed: u64,
    /// Pairs for training, validation (epoch selection) and test.
    pub train: usize,
    pub valid: usize,
    pub test: usize,
}

impl Default for ClassifierOptions {
    fn default() -> Self {
        // Seed 001 section 5.6.1: 40,000 / 5,000 / 5,000, ten epochs, Adam 0.001.
        ClassifierOptions {
            epochs: 10,
            lr: 0.001,
            batch_pairs: 50,
            l2: 0.0,
            negatives: NegativeChoice::Random,
            seed: 1,
            train: 40_000,
            valid: 5_000,
            test: 5_000,
        }
    }
}

/// Accuracy x 100 over both classes and over each (Table 8's columns).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Accuracy {
    pub all: f64,
    pub reference: f64,
    pub translation: f64,
}

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct ClassifierEpoch {
    pub epoch: usize,
    pub loss: f64,
    pub valid: Accuracy,
    pub seconds: f64,
}

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct ClassifierReport {
    /// Pairs in each split (fewer than asked when the dataset is small).
    pub train_pairs: usize,
    pub valid_pairs: usize,
    pub test_pairs: usize,
    pub epochs: Vec<ClassifierEpoch>,
    pub best_epoch: usize,
    pub valid: Accuracy,
    pub test: Accuracy,
}

/// Word ids of a pair: the reference and its candidates (those with a
/// token).
struct Encoded {
    reference: Vec<u32>,
    candidates: Vec<Vec<u32>>,
}

/// Splits `examples` (shuffled with the seed) into train, valid and test
/// as `o` asks, or 80/10/10 of what there is when there are fewer.
fn split(mut examples: Vec<Encoded>, o: &ClassifierOptions) -> [Vec<Encoded>; 3] {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(o.seed ^ 0x0053_504c_4954);
    examples.shuffle(&mut rng);
    let n = examples.len();
    let want = o.train + o.valid + o.test;
    let (nv, nt) = if n >= want {
        (o.valid, o.test)
    } else {
        (n / 10, n / 10)
    };
    let test = examples.split_off(n - nt);
    let valid = examples.split_off(n - nt - nv);
    examples.truncate(o.train.min(examples.len()));
    [examples, valid, test]
}

/// Each evaluation pair's negative, fixed once: evaluations compare epochs
/// on the same sentences.
fn eval_set(pairs: &[Encoded], seed: u64) -> (Vec<&[u32]>, Vec<f32>) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut sents = Vec::with_capacity(2 * pairs.len());
    let mut labels = Vec::with_capacity(2 * pairs.len());
    for p in pairs {
        sents.push(p.reference.as_slice());
        labels.push(1.0);
        let k = rng.random_range(0..p.candidates.len());
        sents.push(p.candidates[k].as_slice());
        labels.push(0.0);
    }
    (sents, labels)
}

fn accuracy(net: &RefNet, sents: &[&[u32]], labels: &[f32]) -> Accuracy {
    let p = probabilities_of(net, sents);
    let (mut right, mut n) = ([0u64; 2], [0u64; 2]);
    for (p, &y) in p.iter().zip(labels) {
        let class = usize::from(y > 0.5);
        n[class] += 1;
        let said = p.is_some_and(|p| p > 0.5);
        right[class] += u64::from(said == (class == 1));
    }
    let pct = |r: u64, n: u64| 100.0 * r as f64 / n.max(1) as f64;
    Accuracy {
        all: pct(right[0] + right[1], n[0] + n[1]),
        reference: pct(right[1], n[1]),
        translation: pct(right[0], n[0]),
    }
}

/// Trains `model` in place on `examples`; the epoch with the best
/// validation accuracy is the one kept, and test accuracy is of that one.
pub fn train(
    model: &mut ReferenceClassifier,
    examples: Vec<Example>,
    o: &ClassifierOptions,
    device: &Device,
    progress: &mut dyn FnMut(usize, usize, f64),
) -> Result<ClassifierReport, TrainError> {
    if o.epochs < 1 || o.batch_pairs < 1 {
        return Err(TrainError::Invalid(
            "epochs and pairs per batch must be at least 1".into(),
        ));
    }
    use crate::limits::{at_most, MAX_EPOCHS, MAX_MEGABATCH_PAIRS};
    at_most("--epochs", o.epochs, MAX_EPOCHS)?;
    at_most("--batch-pairs", o.batch_pairs, MAX_MEGABATCH_PAIRS)?;
    let encoded: Vec<Encoded> = examples
        .iter()
        .filter_map(|e| {
            let reference = model.ids(&e.reference, MAX_TOKENS);
            let candidates: Vec<Vec<u32>> = e
                .candidates
                .iter()
                .map(|c| model.ids(c, MAX_TOKENS))
                .filter(|c| !c.is_empty())
                .collect();
            (!reference.is_empty() && !candidates.is_empty()).then_some(Encoded {
                reference,
                candidates,
            })
        })
        .collect();
    let [train, valid, test] = split(encoded, o);
    if train.len() < 2 || valid.is_empty() || test.is_empty() {
        return Err(TrainError::Invalid(format!(
            "{} usable pairs: too few to train, validate and test a classifier (at least 20 with a token on both sides)",
            train.len() + valid.len() + test.len()
        )));
    }
    let (vs, vl) = eval_set(&valid, o.seed ^ 1);
    let (ts, tl) = eval_set(&test, o.seed ^ 2);

    let ad = device.clone().autodiff();
    let mut net = model.net.clone().fork(&ad).train();
    let start = (o.l2 > 0.0).then(|| net.enc.clone());
    let mut opt = AdamConfig::new().with_epsilon(1e-8).init();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(o.seed);
    let mut order: Vec<usize> = (0..train.len()).collect();
    let mut report = ClassifierReport {
        train_pairs: train.len(),
        valid_pairs: valid.len(),
        test_pairs: test.len(),
        ..Default::default()
    };
    let mut best: Option<(usize, Accuracy, RefNet)> = None;
    for epoch in 1..=o.epochs {
        let started = std::time::Instant::now();
        order.shuffle(&mut rng);
        let (mut loss_sum, mut done) = (0f64, 0usize);
        for chunk in order.chunks(o.batch_pairs) {
            let negatives: Vec<&[u32]> = match o.negatives {
                NegativeChoice::Random => chunk
                    .iter()
                    .map(|&i| {
                        let c = &train[i].candidates;
                        c[rng.random_range(0..c.len())].as_slice()
                    })
                    .collect(),
                NegativeChoice::Hardest => {
                    let plain = net.valid();
                    chunk
                        .iter()
                        .map(|&i| {
                            let c: Vec<&[u32]> =
                                train[i].candidates.iter().map(|c| c.as_slice()).collect();
                            let p = probabilities_of(&plain, &c);
                            let best = (0..c.len())
                                .max_by(|&a, &b| {
                                    p[a].unwrap_or(0.0).total_cmp(&p[b].unwrap_or(0.0))
                                })
                                .unwrap_or(0);
                            c[best]
                        })
                        .collect()
                }
            };
            let mut sents: Vec<&[u32]> = chunk
                .iter()
                .map(|&i| train[i].reference.as_slice())
                .collect();
            sents.extend(negatives);
            let labels: Vec<f32> = (0..sents.len())
                .map(|k| if k < chunk.len() { 1.0 } else { 0.0 })
                .collect();
            let mut loss = cross_entropy(net.logits(&Batch::new(&sents)), &labels);
            let value: f64 = loss.clone().into_scalar::<f64>();
            if !value.is_finite() {
                return Err(TrainError::Invalid(format!(
                    "epoch {epoch}: the loss became {value} (lower --lr?)"
                )));
            }
            if let Some(r) = start
                .as_ref()
                .and_then(|s| regulariser(&net.enc, s, 0.0, o.l2))
            {
                loss = loss + r;
            }
            loss_sum += value * chunk.len() as f64;
            done += chunk.len();
            let grads = GradientsParams::from_grads(loss.backward(), &net);
            net = opt.step(o.lr, net, grads);
            let plain = net.valid();
            if let Some(what) = crate::nn_model::first_non_finite(&plain.named_params()) {
                return Err(TrainError::Diverged {
                    epoch,
                    pairs: done as u64,
                    what,
                    lr: o.lr.to_string(),
                });
            }
            progress(epoch, done, loss_sum / done as f64);
        }
        let plain = net.valid();
        let acc = accuracy(&plain, &vs, &vl);
        let seconds = started.elapsed().as_secs_f64();
        let loss = loss_sum / done.max(1) as f64;
        tracing::info!(
            epoch,
            loss,
            valid = acc.all,
            seconds,
            "reference classifier epoch"
        );
        report.epochs.push(ClassifierEpoch {
            epoch,
            loss,
            valid: acc,
            seconds,
        });
        if best.as_ref().is_none_or(|b| acc.all > b.1.all) {
            best = Some((epoch, acc, plain));
        }
    }
    let (epoch, valid_acc, kept) = best.expect("at least one epoch");
    report.best_epoch = epoch;
    report.valid = valid_acc;
    report.test = accuracy(&kept, &ts, &tl);
    model.net = kept;
    Ok(report)
}

/// The scorer `paraforge rescore --classifier` hands to the dataset crate.
impl paraforge_core::TextScorer for ReferenceClassifier {
    fn score_texts(&self, texts: &[&str]) -> Vec<Option<f32>> {
        self.probabilities(texts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f64s(t: Tensor<2>) -> Vec<f64> {
        t.into_data()
            .convert::<f64>()
            .try_into_vec::<f64>()
            .unwrap()
    }

    /// burn's gradients of the cross-entropy (with the L2 term) equal
    /// central finite differences in f64, for every parameter of both
    /// classifiers.
    #[test]
    fn gradients_match_finite_differences() {
        let dev = Device::flex().autodiff();
        let sents: [&[u32]; 4] = [&[0, 1, 2], &[3, 4], &[1, 2, 5, 0], &[5]];
        let labels = [1.0, 1.0, 0.0, 0.0];
        let batch = Batch::new(&sents);
        for kind in [ClassifierKind::Avg, ClassifierKind::Lstm] {
            let shape = Shape {
                arch: kind.arch(),
                vocab: 6,
                word_dim: 3,
                hidden: 3,
                layers: 0,
                parts: Vec::new(),
                trigrams: 0,
                trigram_dim: 0,
            };
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
            let mut vals =
                |n: usize| -> Vec<f64> { (0..n).map(|_| rng.random_range(-0.8..0.8)).collect() };
            let emb = vals(18);
            let comp: Vec<(Vec<f64>, usize, usize)> = RefNet::dims(&shape)
                .into_iter()
                .map(|(_, [r, c])| (vals(r * c), r, c))
                .collect();
            let start = Net::from_values(shape.clone(), &vals(18), &[], &dev, DType::F64);
            let start = Net {
                comp: Vec::new(),
                ..start
            };
            let loss_of = |emb: &[f64], comp: &[(Vec<f64>, usize, usize)]| {
                let net = RefNet::from_values(shape.clone(), emb, comp, &dev, DType::F64);
                let l = cross_entropy(net.logits(&batch), &labels)
                    + regulariser(&net.enc, &start, 0.0, 0.02).unwrap();
                (net, l)
            };
            let (net, loss) = loss_of(&emb, &comp);
            let grads = loss.backward();
            let mut analytic = vec![f64s(net.enc.emb.val().grad(&grads).unwrap())];
            for p in net.enc.comp.iter().chain(&net.head) {
                analytic.push(f64s(p.val().grad(&grads).unwrap()));
            }
            let value = |e: &[f64], c: &[(Vec<f64>, usize, usize)]| -> f64 {
                loss_of(e, c).1.into_scalar()
            };
            crate::neural::compare_finite_differences(
                &format!("{kind:?}"),
                &emb,
                &comp,
                &analytic,
                &value,
            );
        }
    }

    #[test]
    fn cross_entropy_is_stable_for_large_logits() {
        let dev = Device::flex();
        let z = Tensor::<1>::from_data(TensorData::new(vec![500f32, -500.0], [2]), &dev);
        let l: f64 = cross_entropy(z, &[1.0, 0.0]).into_scalar::<f64>();
        assert!(l.is_finite() && l.abs() < 1e-6, "{l}");
        let z = Tensor::<1>::from_data(TensorData::new(vec![500f32, -500.0], [2]), &dev);
        let l: f64 = cross_entropy(z, &[0.0, 1.0]).into_scalar::<f64>();
        assert!((l - 500.0).abs() < 1e-3, "{l}");
    }
}
