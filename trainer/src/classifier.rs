//! Training the reference/translation classifier of Wieting, Mallinson and
//! Gimpel (2017, section 5.6.1; docs/filters.md, "P(reference)"), whose
//! network and directory are `paraforge_encoders::classifier` (re-exported
//! here): a binary classifier of whether an English sentence is a human
//! reference (label 1) or a back-translation (label 0), trained by
//! cross-entropy with Adam. Its probability of "reference" scores
//! translations as a quality filter (`paraforge rescore --classifier`).
//!
//! Examples come from a paraforge output: each pair gives its reference and
//! one of its translations; with `model.beam_candidates = k` the k
//! candidates compete for the 0-labelled slot, chosen at random or as the
//! one the current model finds most reference-like (the paper tunes that
//! choice).

use std::path::{Path, PathBuf};

use arrow_array::{Array, Int32Array, StringArray};
use burn::module::Module;
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::{Device, Tensor, TensorData};
use paraforge_core::dataset::dataset_files;
use paraforge_core::schema::{col, column, PairReader};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

pub use paraforge_encoders::classifier::{
    probabilities_of, ClassifierKind, RefNet, ReferenceClassifier, CONFIG, MAX_TOKENS, WEIGHTS,
};

use crate::neural::{regulariser, Batch};
use crate::train::WordCounts;
use crate::TrainError;

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
    read_dataset(path, limit, None)
}

/// [`read_examples`], and with `counts` the tokens of both sides of every
/// row with no empty side (the rows a word vocabulary is counted on) in
/// the same pass, to the dataset's end.
fn read_dataset(
    path: &Path,
    limit: usize,
    mut counts: Option<&mut WordCounts>,
) -> Result<Vec<Example>, TrainError> {
    let mut out: Vec<Example> = Vec::new();
    let mut last_id: Option<String> = None;
    let mut full = false;
    let mut toks = paraforge_core::Tokens::default();
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
                if let Some(c) = counts.as_deref_mut() {
                    for text in [rf, tr] {
                        paraforge_core::tokenize::tokenize_into(text, &mut toks);
                        c.add(&toks);
                    }
                }
                if full {
                    continue;
                }
                let next_rank = rank.is_some_and(|a| a.value(i) > 1);
                let same = next_rank && last_id.as_deref() == Some(id.value(i));
                match out.last_mut() {
                    Some(e) if same => e.candidates.push(tr.to_string()),
                    _ => {
                        if out.len() == limit {
                            if counts.is_none() {
                                return Ok(out);
                            }
                            full = true;
                            continue;
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
        // Wieting et al. (2017) section 5.6.1: 40,000 / 5,000 / 5,000, ten epochs, Adam 0.001.
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
    let encoded = encode_examples(model, &examples);
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
            let negatives = pick_negatives(&train, chunk, o.negatives, &net, &mut rng);
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

/// Each example as token ids: its reference and its candidates with a
/// token (an example with neither is left out).
fn encode_examples(model: &ReferenceClassifier, examples: &[Example]) -> Vec<Encoded> {
    examples
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
        .collect()
}

/// Each pair's negative: one of its candidates at random, or the one the
/// classifier now finds most like a reference.
fn pick_negatives<'t>(
    train: &'t [Encoded],
    chunk: &[usize],
    choice: NegativeChoice,
    net: &RefNet,
    rng: &mut rand_chacha::ChaCha8Rng,
) -> Vec<&'t [u32]> {
    match choice {
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
                    let c: Vec<&[u32]> = train[i].candidates.iter().map(|c| c.as_slice()).collect();
                    let p = probabilities_of(&plain, &c);
                    let best = (0..c.len())
                        .max_by(|&a, &b| p[a].unwrap_or(0.0).total_cmp(&p[b].unwrap_or(0.0)))
                        .unwrap_or(0);
                    c[best]
                })
                .collect()
        }
    }
}

/// `paraforge train-classifier`: what to train on and how, each option
/// named in messages by its flag.
#[derive(Debug, Clone)]
pub struct ClassifierSpec {
    /// A scored dataset: references are the positive examples, their
    /// translations the negative ones.
    pub data: PathBuf,
    pub model: ClassifierKind,
    /// Pairs to train on, to pick the epoch on and to test on.
    pub train_pairs: usize,
    pub valid_pairs: usize,
    pub test_pairs: usize,
    pub negatives: NegativeChoice,
    pub l2: f64,
    pub epochs: usize,
    pub lr: f64,
    pub batch_pairs: usize,
    /// LSTM hidden size (default: the word dimension).
    pub hidden: Option<usize>,
    pub init_vectors: Option<PathBuf>,
    /// Words seen at least this often in the dataset form the vocabulary.
    pub min_word_count: u64,
    pub max_words: usize,
    /// Word embedding size (default: the vectors' size, else 300).
    pub word_dim: Option<usize>,
    pub seed: u64,
    /// cpu, cuda:N or wgpu[:N|:cpu] ([`crate::nn_model::device`]).
    pub device: String,
}

/// What a classifier run tells its caller as it goes.
#[derive(Debug, Clone)]
pub enum ClassifierEvent {
    /// A line for the person running it (the vocabulary's size).
    Note(String),
    /// Training starts: `epochs` of `pairs_per_epoch` pairs at most.
    Started { pairs_per_epoch: u64, epochs: usize },
    /// After each mini-batch: the epoch, its pairs so far, its mean loss.
    Progress {
        epoch: usize,
        pairs: usize,
        loss: f64,
    },
    /// Training is done (the model is written next).
    Trained(ClassifierReport),
}

impl ClassifierSpec {
    /// The options' bounds, before anything is read or allocated.
    pub fn check(&self) -> Result<(), TrainError> {
        use crate::limits::*;
        for (name, value) in [("--word-dim", self.word_dim), ("--hidden", self.hidden)] {
            if let Some(v) = value {
                at_most(name, v, MAX_DIM)?;
            }
        }
        at_most("--epochs", self.epochs, MAX_EPOCHS)?;
        at_most("--batch-pairs", self.batch_pairs, MAX_MEGABATCH_PAIRS)?;
        for (name, v) in [
            ("--train-pairs", self.train_pairs),
            ("--valid-pairs", self.valid_pairs),
            ("--test-pairs", self.test_pairs),
        ] {
            at_most(name, v, MAX_SHUFFLE_BUFFER)?;
        }
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return Err(TrainError::Invalid(format!(
                "--lr {}: the learning rate must be a finite number above 0",
                self.lr
            )));
        }
        if !(self.l2.is_finite() && self.l2 >= 0.0) {
            return Err(TrainError::Invalid(format!(
                "--l2 {}: must be a finite number, 0 or more",
                self.l2
            )));
        }
        Ok(())
    }

    /// What the run reads (flag, path), which its output may never be.
    pub fn inputs(&self) -> Vec<(&'static str, PathBuf)> {
        let mut v = vec![("--data", self.data.clone())];
        if let Some(p) = &self.init_vectors {
            v.push(("--init-vectors", p.clone()));
        }
        v
    }
}

/// Trains the classifier `spec` asks for, reading the dataset once (its
/// vocabulary and its examples), and writes it to `write_to` (the caller
/// moves it into place).
pub fn run(
    spec: &ClassifierSpec,
    write_to: &Path,
    events: &mut dyn FnMut(ClassifierEvent),
) -> Result<ClassifierReport, TrainError> {
    let s = spec;
    let device = crate::nn_model::device(&s.device)?;
    if dataset_files(&s.data)?.is_empty() {
        return Err(TrainError::Invalid(format!(
            "{}: no Parquet files to train on",
            s.data.display()
        )));
    }
    let vectors = s
        .init_vectors
        .as_ref()
        .map(|p| paraforge_core::Vectors::load(p).map(|v| v.0))
        .transpose()?;
    let mut counts = WordCounts::default();
    let want = s.train_pairs + s.valid_pairs + s.test_pairs;
    let examples = read_dataset(&s.data, want, Some(&mut counts))?;
    let words = counts.vocab(s.min_word_count, s.max_words);
    if words.is_empty() {
        return Err(TrainError::Invalid(format!(
            "{}: no word is seen {} times (lower --min-word-count)",
            s.data.display(),
            s.min_word_count
        )));
    }
    let dim = s
        .word_dim
        .unwrap_or_else(|| vectors.as_ref().map_or(300, |v| v.dim()));
    let (words, known) = crate::model::init_with_words(
        crate::Kind::Word,
        words,
        dim,
        vectors.as_ref(),
        Vec::new(),
        0,
        s.seed,
    )?;
    events(ClassifierEvent::Note(format!(
        "word vocabulary: {} words seen at least {} times, {known} initialised from --init-vectors",
        words.words().len(),
        s.min_word_count
    )));
    let mut model =
        ReferenceClassifier::init(s.model, words, s.hidden.unwrap_or(dim), s.seed, &device)?;
    let o = ClassifierOptions {
        epochs: s.epochs,
        lr: s.lr,
        batch_pairs: s.batch_pairs,
        l2: s.l2,
        negatives: s.negatives,
        seed: s.seed,
        train: s.train_pairs,
        valid: s.valid_pairs,
        test: s.test_pairs,
    };
    events(ClassifierEvent::Started {
        pairs_per_epoch: (examples.len() as u64).min(s.train_pairs as u64),
        epochs: s.epochs,
    });
    let report = train(
        &mut model,
        examples,
        &o,
        &device,
        &mut |epoch, pairs, loss| events(ClassifierEvent::Progress { epoch, pairs, loss }),
    )
    .map_err(|e| e.context(format!("training on {}", s.data.display())))?;
    events(ClassifierEvent::Trained(report.clone()));
    model.notes = serde_json::json!({
        "data": s.data.display().to_string(),
        "options": {
            "negatives": s.negatives, "l2": s.l2, "epochs": s.epochs, "lr": s.lr,
            "batch_pairs": s.batch_pairs, "seed": s.seed,
            "init_vectors": s.init_vectors.as_ref().map(|p| p.display().to_string()),
            "min_word_count": s.min_word_count,
        },
        "report": report,
    });
    model.save(write_to)?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::neural::{Net, Shape};
    use burn::tensor::DType;

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
                unit_parts: false,
                parts_by_dimension: false,
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
