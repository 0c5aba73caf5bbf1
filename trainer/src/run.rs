//! A whole training run (`paraforge train`) as one call: from a
//! [`TrainSpec`] (what the command line asked for) to a written model. The
//! policy lives here, not in the command line: the vocabularies, which
//! encoder trains (an average or a neural one, whose word table starts as
//! a WORD model's), the defaults the papers give (margin, scramble rate),
//! the checkpoint beside the output, which dev set picks the epoch, and
//! the model card written with the model.

use std::path::{Path, PathBuf};

use crate::data::PairSource;
use crate::model::Precision;
use crate::neural::{Arch, Sampling, Spec};
use crate::nn_model::{self, NeuralModel};
use crate::nn_train::NeuralOptions;
use crate::options::{Progress, TrainOptions, TrainReport};
use crate::sts::{self, SetResult, StsSet};
use crate::{Kind, Model, TrainError};
use serde_json::Value;

/// The dev set scored after every epoch unless another is named: read
/// from the working directory where it exists there (a checkout), else
/// the copy bundled in the binary (`paraforge_eval::bundled`).
pub const DEFAULT_DEV: &str = paraforge_eval::bundled::STS_DEV;

/// The margin delta of the averages (Wieting and Gimpel, 2018).
pub const DEFAULT_MARGIN: f32 = 0.4;

/// Adam's learning rate (Wieting and Gimpel, 2018).
pub const DEFAULT_LR: f32 = 0.001;
/// Mini-batches per mega-batch: Wieting and Gimpel (2018), Table 6, train
/// with 20 and 40; 1 (no mega-batching) is their weakest setting.
pub const DEFAULT_MEGABATCH: usize = 20;
/// Words kept from the data with `min_word_count`, the most frequent.
pub const DEFAULT_MAX_WORDS: usize = 100_000;
/// Trigrams seen fewer times in the data are left out.
pub const DEFAULT_MIN_TRIGRAM_COUNT: u64 = 2;
pub const DEFAULT_MAX_TRIGRAMS: usize = 100_000;

/// Which encoder to train: one of the averages, or a neural encoder or
/// combination.
#[derive(Debug, Clone)]
pub enum Encoder {
    Average(Kind),
    Neural(Spec),
}

impl std::str::FromStr for Encoder {
    type Err = String;
    fn from_str(s: &str) -> Result<Encoder, String> {
        if let Ok(k) = s.parse::<Kind>() {
            return Ok(Encoder::Average(k));
        }
        if s.contains(['+', ',']) {
            // A combination: its error names the bad part.
            return s.parse::<Spec>().map(Encoder::Neural);
        }
        s.parse::<Spec>().map(Encoder::Neural).map_err(|_| {
            let names: Vec<&str> = Arch::ALL.iter().map(|a| a.name()).collect();
            format!(
                "unknown model {s:?} (word, trigram, word,trigram, {}, or parts joined by + or ,)",
                names.join(", ")
            )
        })
    }
}

impl Encoder {
    /// The model's name, as `--model` spells it.
    pub fn name(&self) -> String {
        match self {
            Encoder::Average(k) => k.name().to_string(),
            Encoder::Neural(s) => s.name(),
        }
    }
}

/// What to train, on what, and where the model goes; the options of
/// `paraforge train`, each named in messages by its flag.
#[derive(Debug, Clone)]
pub struct TrainSpec {
    /// Training pairs: a dataset directory or one Parquet file.
    pub data: PathBuf,
    /// Leave this fold's pairs out (a cross-fitted bootstrap scorer,
    /// [`paraforge_core::folds`]).
    pub without_fold: Option<paraforge_core::folds::Fold>,
    pub model: Encoder,
    /// A neural encoder's hidden size (default: the word dimension).
    pub hidden: Option<usize>,
    /// Layers of dan (default 1).
    pub layers: Option<usize>,
    /// Probability that a training sentence's words are shuffled (default:
    /// [`crate::neural::default_scramble`]).
    pub scramble: Option<f64>,
    /// A neural encoder's negatives (default max; mix for rnn).
    pub negatives: Option<Sampling>,
    /// L2 weights of a neural encoder (default 0) and the Gaussians' KL
    /// weight (default [`crate::nn_train::DEFAULT_LAMBDA_KL`]).
    pub lambda_c: Option<f64>,
    pub lambda_w: Option<f64>,
    pub lambda_kl: Option<f64>,
    /// Where a neural encoder trains: cpu (the default), cuda:N or wgpu[:N|:cpu]
    /// ([`crate::nn_model::device`]).
    pub device: Option<String>,
    /// Vectors that initialise the word embeddings (and, without
    /// `min_word_count`, fix the vocabulary).
    pub init_vectors: Option<PathBuf>,
    /// Take the word vocabulary from the data: words seen this often.
    pub min_word_count: Option<u64>,
    /// At most this many words from the data (default [`DEFAULT_MAX_WORDS`]).
    pub max_words: Option<usize>,
    /// Word embedding size with `min_word_count` (default: the vectors'
    /// size, else 300).
    pub word_dim: Option<usize>,
    /// Mini-batches per mega-batch; None: [`crate::megabatch::auto`] of the
    /// pairs trained on.
    pub megabatch: Option<usize>,
    pub batch_size: usize,
    /// The margin delta (default: [`DEFAULT_MARGIN`], or the neural
    /// encoder's [`crate::neural::default_margin`]).
    pub margin: Option<f32>,
    /// Adam's rate (default [`DEFAULT_LR`]; 0.0005 for rnn).
    pub lr: Option<f32>,
    /// Passes over the data; 0 writes the initial model.
    pub epochs: usize,
    pub seed: u64,
    /// Trigram embedding size (default: the vectors' size, else 300).
    pub trigram_dim: Option<usize>,
    /// Trigrams seen fewer times are left out (default 2), and at most
    /// [`DEFAULT_MAX_TRIGRAMS`] are kept.
    pub min_trigram_count: Option<u64>,
    pub max_trigrams: Option<usize>,
    pub shuffle_buffer: usize,
    /// Stop each epoch after this many pairs (0 = all).
    pub max_pairs: u64,
    /// Where the model ends up: names the default checkpoint and the
    /// messages (it is written where [`run`] is told).
    pub out: PathBuf,
    /// How an average's file stores its tables (default f32).
    pub precision: Option<Precision>,
    /// STS sets to evaluate the written model on ([`TrainOutcome::sts`],
    /// and the model card).
    pub sts: Option<PathBuf>,
    /// The dev set that picks the epoch, None to keep the last epoch; the
    /// default [`DEFAULT_DEV`] comes from the bundle where it is absent.
    pub dev: Option<PathBuf>,
    /// Checkpoint directory (default: OUT.ckpt).
    pub checkpoint: Option<PathBuf>,
    pub resume: bool,
    /// tree-rnn: a file of parse trees, read at the start (if it exists)
    /// and written as the run parses (`paraforge_encoders::parse_cache`).
    pub parse_cache: Option<PathBuf>,
    /// The command line that asked for this run, for the model card.
    pub command: Option<String>,
}

/// What a run tells its caller as it goes.
#[derive(Debug, Clone)]
pub enum Event {
    /// A line for the person running it (vocabulary sizes, skipped lines,
    /// the dev set's absence).
    Note(String),
    /// Training starts: `epochs` of at most `pairs_per_epoch` pairs.
    Started { pairs_per_epoch: u64, epochs: usize },
    /// After each mega-batch.
    Progress(Progress),
    /// Training is done; the model is written next.
    Trained,
}

/// The trained model, of either family.
pub enum Trained {
    Average(Model),
    Neural(Box<NeuralModel>),
}

/// A finished run: its report and the model written.
pub struct TrainOutcome {
    pub report: TrainReport,
    /// The model's name (as `--model` spells it) and embedding size.
    pub name: String,
    pub dim: usize,
    /// What a pair skipped as unembeddable had none of.
    pub units: &'static str,
    pub model: Trained,
    /// The written model on the `--sts` sets (empty without them), as
    /// `eval-sts` scores it: loaded from its file.
    pub sts: Vec<SetResult>,
}

// For `TrainError::Unfinished`, which holds one: the model is left out.
impl std::fmt::Debug for TrainOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrainOutcome")
            .field("name", &self.name)
            .field("dim", &self.dim)
            .field("report", &self.report)
            .field("sts", &self.sts)
            .finish_non_exhaustive()
    }
}

impl TrainSpec {
    /// The options' bounds, before anything is read or allocated: each
    /// limit is far above the papers' settings ([`crate::limits`]).
    pub fn check(&self) -> Result<(), TrainError> {
        use crate::limits::*;
        for (name, value) in [
            ("--word-dim", self.word_dim),
            ("--hidden", self.hidden),
            ("--trigram-dim", self.trigram_dim),
        ] {
            if let Some(v) = value {
                at_most(name, v, MAX_DIM)?;
            }
        }
        at_most("--layers", self.layers.unwrap_or(1), MAX_LAYERS)?;
        at_most("--epochs", self.epochs, MAX_EPOCHS)?;
        at_most("--batch-size", self.batch_size, MAX_MEGABATCH_PAIRS)?;
        at_most("--shuffle-buffer", self.shuffle_buffer, MAX_SHUFFLE_BUFFER)?;
        let m = self.megabatch.unwrap_or(1);
        if m.saturating_mul(self.batch_size) > MAX_MEGABATCH_PAIRS {
            return Err(TrainError::Invalid(format!(
                "--megabatch {m} x --batch-size {}: more than the limit of {MAX_MEGABATCH_PAIRS} pairs a mega-batch",
                self.batch_size
            )));
        }
        crate::options::check_margin_lr(self.margin(), self.lr())?;
        // NaN or a negative rate would train to NaN weights (or away from
        // the data) for a whole epoch before anything said so.
        let lr = self.lr();
        if !(lr.is_finite() && lr > 0.0) {
            return Err(TrainError::Invalid(format!(
                "--lr {lr}: the learning rate must be a finite number above 0"
            )));
        }
        for (name, v) in [
            ("--margin", self.margin.map(f64::from)),
            ("--lambda-c", self.lambda_c),
            ("--lambda-w", self.lambda_w),
            ("--lambda-kl", self.lambda_kl),
        ] {
            if let Some(v) = v {
                if !(v.is_finite() && v >= 0.0) {
                    return Err(TrainError::Invalid(format!(
                        "{name} {v}: must be a finite number, 0 or more"
                    )));
                }
            }
        }
        if let Some((flag, users)) = self.unused_option() {
            return Err(TrainError::Invalid(format!(
                "{flag} is not used by --model {}: only {users} read it; leave it out (a flag that changes nothing would make the run's record false)",
                self.model.name()
            )));
        }
        Ok(())
    }

    /// What the run reads (flag, path), which its output may never be.
    pub fn inputs(&self) -> Vec<(&'static str, PathBuf)> {
        let mut v = vec![
            ("--data", self.data.clone()),
            ("--checkpoint", self.checkpoint_dir()),
        ];
        if let Some(p) = &self.init_vectors {
            v.push(("--init-vectors", p.clone()));
        }
        if let Some(p) = self.dev.as_ref().filter(|p| p.exists()) {
            v.push(("--dev", p.clone()));
        }
        if let Some(p) = &self.sts {
            v.push(("--sts", p.clone()));
        }
        if let Some(p) = &self.parse_cache {
            v.push(("--parse-cache", p.clone()));
        }
        v
    }

    /// Where checkpoints go: `checkpoint`, else beside the output.
    pub fn checkpoint_dir(&self) -> PathBuf {
        self.checkpoint
            .clone()
            .unwrap_or_else(|| PathBuf::from(format!("{}.ckpt", self.out.display())))
    }

    fn margin(&self) -> f32 {
        self.margin.unwrap_or(match &self.model {
            Encoder::Neural(spec) => crate::neural::default_margin(spec),
            Encoder::Average(_) => DEFAULT_MARGIN,
        })
    }

    /// M, once [`run`] has chosen it where none was given.
    fn megabatch(&self) -> usize {
        self.megabatch.unwrap_or(crate::DEFAULT_MEGABATCH)
    }

    /// Adam's rate: `--lr`, else the encoder's default.
    fn lr(&self) -> f32 {
        self.lr.unwrap_or(match &self.model {
            Encoder::Neural(spec) => crate::neural::default_lr(spec),
            Encoder::Average(_) => DEFAULT_LR,
        })
    }

    fn options(&self) -> Result<TrainOptions, TrainError> {
        let init_vectors_sha256 =
            match &self.init_vectors {
                Some(p) => Some(paraforge_core::layout::sha256_file(p).map_err(|source| {
                    TrainError::Io {
                        path: p.clone(),
                        source,
                    }
                })?),
                None => None,
            };
        Ok(TrainOptions {
            megabatch: self.megabatch(),
            batch_size: self.batch_size,
            margin: self.margin(),
            lr: self.lr(),
            epochs: self.epochs,
            seed: self.seed,
            shuffle_buffer: self.shuffle_buffer,
            max_pairs: self.max_pairs,
            checkpoint: Some(self.checkpoint_dir()),
            resume: self.resume,
            init_vectors_sha256,
        })
    }

    /// The dev sets, or None (no dev set asked for, or the default file
    /// absent: said in a note).
    fn dev_sets(&self, events: &mut dyn FnMut(Event)) -> Result<Option<Vec<StsSet>>, TrainError> {
        let Some(dev) = &self.dev else {
            return Ok(None);
        };
        // English STS sets cannot pick the epoch of another language's model.
        let language = paraforge_core::dataset::trace(&self.data).reference_language();
        if let Some(l) = language.filter(|l| l != "en") {
            if dev == Path::new(DEFAULT_DEV) {
                events(Event::Note(format!(
                    "the data's references are {l:?} (its manifest) and the default dev set, STS Benchmark, is English: no dev set, the last epoch is kept; --dev names a {l:?} set"
                )));
                return Ok(None);
            }
            events(Event::Note(format!(
                "--dev {}: the data's references are {l:?}; the dev set should be {l:?} too",
                dev.display()
            )));
        }
        let dev = &paraforge_eval::bundled::locate(dev, "--dev")?;
        let sets = sts::load_dev(dev).map_err(|e| e.context(format!("--dev {}", dev.display())))?;
        Ok(Some(sets))
    }

    /// What a saved model records of its training: the options every
    /// encoder shares, `extra`, and the report.
    fn notes(&self, report: &TrainReport, extra: serde_json::Value) -> serde_json::Value {
        let mut n = serde_json::json!({
            "data": self.data.display().to_string(),
            "init_vectors": self.init_vectors.as_ref().map(|p| p.display().to_string()),
            "megabatch": self.megabatch(), "batch_size": self.batch_size, "margin": self.margin(),
            "lr": self.lr(), "epochs": self.epochs, "seed": self.seed,
            "report": report,
        });
        if let (Some(n), serde_json::Value::Object(extra)) = (n.as_object_mut(), extra) {
            n.extend(extra);
        }
        n
    }

    /// The bounds of a progress display: pairs an epoch, and epochs.
    fn started(&self, source: &PairSource) -> Event {
        let pairs_per_epoch = if self.max_pairs > 0 {
            self.max_pairs.min(source.rows())
        } else {
            source.rows()
        };
        Event::Started {
            pairs_per_epoch,
            epochs: self.epochs,
        }
    }
}

/// Trains what `spec` asks for and writes the model to `write_to` (the
/// caller moves it to `spec.out`); `events` hears of progress.
pub fn run(
    spec: TrainSpec,
    write_to: &Path,
    events: &mut dyn FnMut(Event),
) -> Result<TrainOutcome, TrainError> {
    let mut spec = spec;
    let source = PairSource::open_without(&spec.data, spec.without_fold)?;
    if spec.megabatch.is_none() {
        let neural = matches!(spec.model, Encoder::Neural(_));
        let m = crate::megabatch::auto(source.rows(), spec.batch_size, neural);
        tracing::info!(
            pairs = source.rows(),
            megabatch = m,
            "mega-batch size from the corpus size"
        );
        spec.megabatch = Some(m);
    }
    let s = &spec;
    // Read now: a bad --sts is better found before training than after.
    let sts_sets = match &s.sts {
        Some(dir) => {
            let dir = paraforge_eval::bundled::locate(dir, "--sts")?;
            Some(sts::load(&dir).map_err(|e| e.context(format!("--sts {}", dir.display())))?)
        }
        None => None,
    };
    if s.epochs > 0 {
        // Before the vocabularies, whose messages would be about them.
        crate::check_pairs(source.rows(), s.max_pairs)
            .map_err(|e| e.context(format!("--data {}", s.data.display())))?;
    }
    // A neural encoder reads words; its table starts as a WORD model's.
    let kind = match &s.model {
        Encoder::Average(k) => *k,
        Encoder::Neural(n) if n.has_trigrams() => Kind::WordTrigram,
        Encoder::Neural(_) => Kind::Word,
    };
    let init = match (&s.init_vectors, kind.words()) {
        (Some(p), true) => {
            let (v, rep) = paraforge_core::Vectors::load(p)?;
            let bad = rep.wrong_dimension + rep.unparsable + rep.duplicates;
            if bad > 0 {
                events(Event::Note(format!(
                    "{}: {bad} bad lines skipped (first at line {})",
                    p.display(),
                    rep.first_skipped_line.unwrap_or(0)
                )));
            }
            Some(v)
        }
        (None, true) if s.min_word_count.is_none() => {
            return Err(TrainError::Invalid(format!(
                "--model {} needs --init-vectors (a GloVe-format file) or --min-word-count (a vocabulary from the data)",
                s.model.name()
            )))
        }
        _ => None,
    };
    let tdim = s
        .trigram_dim
        .unwrap_or_else(|| init.as_ref().map_or(300, |v| v.dim()));
    let trigrams = if kind.trigrams() {
        let t = crate::train::trigram_vocab(
            &source,
            s.min_trigram_count.unwrap_or(DEFAULT_MIN_TRIGRAM_COUNT),
            s.max_trigrams.unwrap_or(DEFAULT_MAX_TRIGRAMS),
        )?;
        events(Event::Note(format!(
            "trigram vocabulary: {} trigrams",
            t.len()
        )));
        t
    } else {
        Vec::new()
    };
    let words = match (s.min_word_count, kind.words()) {
        (Some(min), true) => {
            let words =
                crate::train::word_vocab(&source, min, s.max_words.unwrap_or(DEFAULT_MAX_WORDS))?;
            let wdim = s
                .word_dim
                .unwrap_or_else(|| init.as_ref().map_or(300, |v| v.dim()));
            let (m, known) = crate::model::init_with_words(
                kind,
                words,
                wdim,
                init.as_ref(),
                trigrams,
                tdim,
                s.seed,
            )?;
            events(Event::Note(format!(
                "word vocabulary: {} words seen at least {min} times, {known} initialised from --init-vectors",
                m.words().len()
            )));
            m
        }
        _ => crate::model::init(kind, init.as_ref(), trigrams, tdim, s.seed)?,
    };
    drop(init);
    let mut outcome = match &s.model {
        Encoder::Average(_) => train_average(s, words, &source, write_to, events)?,
        Encoder::Neural(n) => train_neural(s, n, words, &source, write_to, events)?,
    };
    match finish(s, &outcome, source.rows(), write_to, sts_sets.as_deref()) {
        Ok(sts) => {
            outcome.sts = sts;
            Ok(outcome)
        }
        // The model is written: hours of training must not go with the
        // staging directory because scoring it failed.
        Err(e) => Err(TrainError::Unfinished {
            outcome: Box::new(outcome),
            error: Box::new(e),
        }),
    }
}

/// Loads the written model as `eval-sts` and para_score load it, scores it
/// on `sts_sets`, and writes its card ([`crate::card`]). When loading or
/// scoring fails, the card says so and why, and the failure is returned
/// after it is written.
fn finish(
    s: &TrainSpec,
    outcome: &TrainOutcome,
    rows: u64,
    write_to: &Path,
    sts_sets: Option<&[StsSet]>,
) -> Result<Vec<SetResult>, TrainError> {
    use crate::card::{self, ModelCard};
    let neural = matches!(outcome.model, Trained::Neural(_));
    let (describe, scored) = score_written(s, neural, write_to, sts_sets);
    let (results, failed) = match scored {
        Ok(r) => (r, None),
        Err(e) => (Vec::new(), Some(e)),
    };
    let r = &outcome.report;
    let parts: Vec<String> = match &s.model {
        Encoder::Average(Kind::WordTrigram) => vec!["word".into(), "trigram".into()],
        Encoder::Average(k) => vec![k.name().into()],
        Encoder::Neural(n) if n.parts.is_empty() => vec![n.arch.name().into()],
        Encoder::Neural(n) => n.parts.iter().map(|a| a.name().to_string()).collect(),
    };
    let settings = card_settings(s, outcome, describe);
    let dev = r.best_epoch.and(s.dev.as_deref());
    let out = s.out.display().to_string();
    let c = ModelCard {
        name: s
            .out
            .file_name()
            .map_or_else(|| out.clone(), |n| n.to_string_lossy().into_owned()),
        out: out.clone(),
        summary: format!(
            "A paraphrastic sentence encoder ({}) trained by `paraforge train` with the margin \
             loss and mega-batch negatives of Wieting and Gimpel (2018) on paraphrase pairs: \
             {}-dimensional sentence embeddings whose cosine says how close two sentences are \
             in meaning.",
            s.model.name(),
            outcome.dim
        ),
        tags: card::encoder_tags(&parts),
        pipeline_tag: Some("sentence-similarity"),
        command: s.command.clone(),
        settings,
        data: s.data.display().to_string(),
        data_rows: format!(
            "{rows} rows; over all epochs {} read, {} empty and {} null sides skipped, {} pairs without a known {} skipped",
            r.read.rows,
            r.read.skipped_empty,
            r.read.skipped_null,
            r.skipped_unembeddable,
            outcome.units
        ),
        provenance: paraforge_core::dataset::trace(&s.data),
        figures: {
            let mut f = card::figures(r, dev, &results);
            if let (Some(d), Some(Precision::Bf16)) = (f.first_mut(), s.precision) {
                if d.split == "dev" && d.spearman.is_none() {
                    d.note += " (on the f32 tables, before they were saved as bf16)";
                }
            }
            f
        },
        results_note: card::epochs_table(r),
        evaluate_with: format!("paraforge eval-sts --model {out}"),
        evaluation_failed: failed.as_ref().map(ToString::to_string),
        usage: card::encoder_usage(&out, neural),
    };
    let path = card::card_path(write_to);
    let written = std::fs::write(&path, c.text()).map_err(|e| TrainError::io(&path, e));
    match (failed, written) {
        (Some(e), Ok(())) => Err(e),
        (Some(e), Err(w)) => Err(TrainError::Invalid(format!(
            "{e} (and its card was not written: {w})"
        ))),
        (None, Err(w)) => Err(w),
        (None, Ok(())) => Ok(results),
    }
}

/// The model as written, loaded back: what it is, and its STS results
/// on `--sts` (none without it).
fn score_written(
    s: &TrainSpec,
    neural: bool,
    write_to: &Path,
    sts_sets: Option<&[StsSet]>,
) -> (String, Result<Vec<SetResult>, TrainError>) {
    let loaded: Result<Box<dyn paraforge_core::SentenceEncoder>, TrainError> = if neural {
        paraforge_encoders::nn_model::NeuralEncoder::load(write_to)
            .map(|e| Box::new(e) as Box<dyn paraforge_core::SentenceEncoder>)
            .map_err(TrainError::from)
    } else {
        paraforge_core::load_encoder(Some(write_to), None)
            .map_err(TrainError::from)
            .and_then(|e| {
                e.ok_or_else(|| {
                    TrainError::Invalid(format!("{}: no model written", write_to.display()))
                })
            })
    };
    match loaded {
        Ok(encoder) => {
            let scored = match sts_sets {
                Some(sets) => sts::evaluate_encoder(sets, encoder.as_ref()).map_err(|e| {
                    TrainError::from(e).context(format!(
                        "evaluating {} on --sts {}",
                        s.out.display(),
                        s.sts.as_deref().unwrap_or(Path::new("")).display()
                    ))
                }),
                None => Ok(Vec::new()),
            };
            (encoder.describe(), scored)
        }
        Err(e) => (
            "not known (the written model did not load)".to_string(),
            Err(e.context(format!("loading the written model {}", s.out.display()))),
        ),
    }
}

/// The card's settings: the encoder, the model file's training notes, and
/// the options that shaped the vocabulary and the run.
fn card_settings(s: &TrainSpec, outcome: &TrainOutcome, describe: String) -> Vec<(String, String)> {
    let r = &outcome.report;
    let mut settings = vec![
        ("encoder".to_string(), format!("`{}`", s.model.name())),
        ("model".to_string(), describe),
        ("dimensions".to_string(), outcome.dim.to_string()),
    ];
    // What the model file records of its training, and the options that
    // shaped the vocabulary.
    let notes = match &outcome.model {
        Trained::Average(m) => &m.notes,
        Trained::Neural(m) => &m.notes,
    };
    if let Some(n) = notes.as_object() {
        for (k, v) in n.iter().filter(|(k, _)| *k != "report" && *k != "data") {
            let v = match v {
                Value::Null => "none".to_string(),
                Value::String(x) => format!("`{x}`"),
                // The rates are f32s: shown as the f32 they are, not the
                // f64 digits JSON gave them (0.0010000000474974513).
                Value::Number(x) => match x.as_f64() {
                    Some(f) if x.is_f64() && f64::from(f as f32) == f => (f as f32).to_string(),
                    _ => x.to_string(),
                },
                other => other.to_string(),
            };
            settings.push((k.replace('_', " "), v));
        }
    }
    let given = [
        (
            "trained without",
            s.without_fold
                .map(|f| format!("{f} of the data's pairs (by a hash of the id)")),
        ),
        ("min word count", s.min_word_count.map(|v| v.to_string())),
        ("max words", s.max_words.map(|v| v.to_string())),
        (
            "min trigram count",
            s.min_trigram_count.map(|v| v.to_string()),
        ),
        ("max trigrams", s.max_trigrams.map(|v| v.to_string())),
        ("hidden", s.hidden.map(|v| v.to_string())),
        ("layers", s.layers.map(|v| v.to_string())),
        (
            "precision",
            s.precision
                .and_then(|p| serde_json::to_value(p).ok())
                .and_then(|v| v.as_str().map(str::to_string)),
        ),
        (
            "max pairs an epoch",
            (s.max_pairs > 0).then(|| s.max_pairs.to_string()),
        ),
        ("shuffle buffer", Some(s.shuffle_buffer.to_string())),
        (
            "dev set",
            Some(match (&s.dev, r.best_epoch) {
                (Some(d), Some(_)) => format!("`{}` (picks the epoch)", d.display()),
                (Some(d), None) => format!("`{}` (absent: the last epoch is kept)", d.display()),
                (None, _) => "none (`--no-dev`: the last epoch is kept)".into(),
            }),
        ),
    ];
    settings.extend(
        given
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k.to_string(), v))),
    );
    settings
}

fn train_average(
    s: &TrainSpec,
    mut model: Model,
    source: &PairSource,
    write_to: &Path,
    events: &mut dyn FnMut(Event),
) -> Result<TrainOutcome, TrainError> {
    let o = s.options()?;
    let dev_sets = s.dev_sets(events)?;
    let dev_fn =
        |m: &Model| sts::dev_score(dev_sets.as_deref().unwrap_or_default(), &|t| m.embed(t));
    events(s.started(source));
    let report = if s.epochs == 0 {
        TrainReport::default()
    } else {
        let dev = dev_sets
            .is_some()
            .then_some(&dev_fn as crate::options::DevScore);
        crate::train::train(&mut model, source, &o, dev, &mut |p| {
            events(Event::Progress(p))
        })?
    };
    events(Event::Trained);
    model.notes = s.notes(&report, serde_json::json!({}));
    model.save_as(write_to, s.precision.unwrap_or_default())?;
    Ok(TrainOutcome {
        report,
        name: model.kind.name().to_string(),
        dim: model.dim(),
        units: "word or trigram",
        model: Trained::Average(model),
        sts: Vec::new(),
    })
}

fn train_neural(
    s: &TrainSpec,
    spec: &Spec,
    words: Model,
    source: &PairSource,
    write_to: &Path,
    events: &mut dyn FnMut(Event),
) -> Result<TrainOutcome, TrainError> {
    let device = nn_model::device(s.device.as_deref().unwrap_or("cpu"))?;
    let hidden = s.hidden.unwrap_or(words.word_dim);
    let mut model =
        NeuralModel::init_spec(spec, words, hidden, s.layers.unwrap_or(1), s.seed, &device)
            .map_err(|e| TrainError::from(e).context(format!("--model {spec}")))?;
    let o = NeuralOptions {
        base: s.options()?,
        scramble: s.scramble.unwrap_or(crate::neural::default_scramble(spec)),
        sampling: s.negatives.unwrap_or(crate::neural::default_sampling(spec)),
        lambda_c: s.lambda_c.unwrap_or(crate::neural::default_lambdas(spec).0),
        lambda_w: s.lambda_w.unwrap_or(crate::neural::default_lambdas(spec).1),
        lambda_kl: s.lambda_kl.unwrap_or(crate::nn_train::DEFAULT_LAMBDA_KL),
        parse_cache: s.parse_cache.clone(),
        ..NeuralOptions::default()
    };
    if let Some(path) = &o.parse_cache {
        // The parser was opened when the model was made.
        let parser = paraforge_encoders::link_grammar::shared()
            .map_err(|e| TrainError::Invalid(e.to_string()))?;
        let n = paraforge_encoders::parse_cache::load(parser, path)
            .map_err(|e| TrainError::Invalid(e.to_string()))?;
        events(Event::Note(format!(
            "{n} parse trees read from {} (those sentences are not parsed again)",
            path.display()
        )));
    }
    let dev_sets = s.dev_sets(events)?;
    let dev_fn = |m: &NeuralModel| {
        let sets = dev_sets.as_deref().unwrap_or_default();
        let table = sts::embed_sets(sets, &|t| m.embed_many(t));
        sts::dev_score(sets, &|t| table[t].clone())
    };
    events(s.started(source));
    let report = if s.epochs == 0 {
        TrainReport::default()
    } else {
        let dev = dev_sets
            .is_some()
            .then_some(&dev_fn as crate::nn_train::NeuralDevScore);
        crate::nn_train::train(&mut model, source, &o, &device, dev, &mut |p| {
            events(Event::Progress(p))
        })?
    };
    events(Event::Trained);
    model.notes = s.notes(
        &report,
        serde_json::json!({
            "scramble": o.scramble, "negatives": o.sampling,
            "lambda_c": o.lambda_c, "lambda_w": o.lambda_w,
            "lambda_kl": spec.arch.is_gaussian().then_some(o.lambda_kl),
        }),
    );
    model.save(write_to)?;
    Ok(TrainOutcome {
        report,
        name: spec.name(),
        dim: model.dim(),
        units: "word",
        model: Trained::Neural(Box::new(model)),
        sts: Vec::new(),
    })
}
