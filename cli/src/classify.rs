//! `paraforge train-classifier`: Wieting et al. (2017)'s reference/translation
//! classifier (docs/filters.md), whose P(reference) `paraforge rescore
//! --classifier` writes as the `reference_probability` column.

use std::path::PathBuf;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use paraforge_trainer::classifier::{
    self, ClassifierKind, ClassifierOptions, NegativeChoice, ReferenceClassifier,
};
use paraforge_trainer::data::PairSource;
use paraforge_trainer::nn_model;
use paraforge_trainer::train::word_vocab;
use paraforge_trainer::Kind;

#[derive(clap::Args)]
pub struct TrainClassifierArgs {
    /// A scored dataset (a job's output, a bin, a filtered set): its
    /// references are the positive examples, its translations (all
    /// `candidate_rank`s of a pair) the negative ones.
    #[arg(long)]
    data: PathBuf,
    /// avg (word averaging) or lstm (mean of the hidden states), each
    /// followed by a logistic layer.
    #[arg(long, default_value = "lstm")]
    model: ClassifierKind,
    /// Pairs to train on, to pick the epoch on, and to test on (Wieting et al., 2017:
    /// 40,000 / 5,000 / 5,000). A smaller dataset is split 80/10/10.
    #[arg(long, default_value_t = 40_000)]
    train_pairs: usize,
    #[arg(long, default_value_t = 5_000)]
    valid_pairs: usize,
    #[arg(long, default_value_t = 5_000)]
    test_pairs: usize,
    /// A pair's negative: random (one of its candidates) or hardest (the
    /// candidate the current model finds most reference-like).
    #[arg(long, default_value = "random")]
    negatives: NegativeChoice,
    /// L2 weight on the word table's distance from its start (Wieting et al. (2017)
    /// tunes it over 1e-5 ... 1e-8 and 0).
    #[arg(long, default_value_t = 0.0)]
    l2: f64,
    /// Passes over the training pairs (at most 10,000).
    #[arg(long, default_value_t = 10)]
    epochs: usize,
    /// Adam's learning rate (a finite number above 0).
    #[arg(long, default_value_t = 0.001)]
    lr: f64,
    /// Pairs per mini-batch (two sentences each; at most 1,000,000).
    #[arg(long, default_value_t = 50)]
    batch_pairs: usize,
    /// LSTM hidden size (default: the word dimension; at most 8192).
    #[arg(long)]
    hidden: Option<usize>,
    /// GloVe- or word2vec-format vectors that initialise known words.
    #[arg(long)]
    init_vectors: Option<PathBuf>,
    /// Words seen at least this often in the dataset form the vocabulary;
    /// every other word is UNK (the rule of every neural encoder).
    #[arg(long, default_value_t = 2)]
    min_word_count: u64,
    #[arg(long, default_value_t = 100_000)]
    max_words: usize,
    /// Word embedding size (default: the vectors' size, else 300; at most
    /// 8192).
    #[arg(long)]
    word_dim: Option<usize>,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// cpu, or cuda:N with the `cuda` build feature.
    #[arg(long, default_value = "cpu")]
    device: String,
    #[arg(long)]
    threads: Option<usize>,
    /// Output directory (model.safetensors + config.json), made beside
    /// this path and renamed here at the end.
    #[arg(long)]
    out: PathBuf,
    /// Replace an existing --out (a file, or a directory that holds
    /// something); one that is (or holds, or lies inside) --data or
    /// --init-vectors is refused even so.
    #[arg(long)]
    overwrite: bool,
}

/// The options' bounds, before anything is read or allocated.
fn check_args(a: &TrainClassifierArgs) -> Result<()> {
    use paraforge_trainer::limits::*;
    for (name, value) in [("--word-dim", a.word_dim), ("--hidden", a.hidden)] {
        if let Some(v) = value {
            at_most(name, v, MAX_DIM)?;
        }
    }
    at_most("--epochs", a.epochs, MAX_EPOCHS)?;
    at_most("--batch-pairs", a.batch_pairs, MAX_MEGABATCH_PAIRS)?;
    for (name, v) in [
        ("--train-pairs", a.train_pairs),
        ("--valid-pairs", a.valid_pairs),
        ("--test-pairs", a.test_pairs),
    ] {
        at_most(name, v, MAX_SHUFFLE_BUFFER)?;
    }
    anyhow::ensure!(
        a.lr.is_finite() && a.lr > 0.0,
        "--lr {}: the learning rate must be a finite number above 0",
        a.lr
    );
    anyhow::ensure!(
        a.l2.is_finite() && a.l2 >= 0.0,
        "--l2 {}: must be a finite number, 0 or more",
        a.l2
    );
    Ok(())
}

pub fn train(a: TrainClassifierArgs) -> Result<()> {
    check_args(&a)?;
    let mut inputs = vec![("--data", a.data.as_path())];
    if let Some(v) = &a.init_vectors {
        inputs.push(("--init-vectors", v.as_path()));
    }
    let out = crate::out::Out::claim("--out", &a.out, &inputs, a.overwrite)?;
    crate::threads(a.threads)?;
    let device = nn_model::device(&a.device)?;
    let source = PairSource::open(&a.data)?;
    let vectors = a
        .init_vectors
        .as_ref()
        .map(|p| paraforge_core::Vectors::load(p).map(|v| v.0))
        .transpose()?;
    let words = word_vocab(&source, a.min_word_count, a.max_words)?;
    anyhow::ensure!(
        !words.is_empty(),
        "{}: no word is seen {} times (lower --min-word-count)",
        a.data.display(),
        a.min_word_count
    );
    let dim = a
        .word_dim
        .unwrap_or_else(|| vectors.as_ref().map_or(300, |v| v.dim()));
    let (words, known) = paraforge_trainer::model::init_with_words(
        Kind::Word,
        words,
        dim,
        vectors.as_ref(),
        Vec::new(),
        0,
        a.seed,
    )?;
    eprintln!(
        "word vocabulary: {} words seen at least {} times, {known} initialised from --init-vectors",
        words.words().len(),
        a.min_word_count
    );
    let mut model =
        ReferenceClassifier::init(a.model, words, a.hidden.unwrap_or(dim), a.seed, &device)?;
    let want = a.train_pairs + a.valid_pairs + a.test_pairs;
    let examples = classifier::read_examples(&a.data, want)?;
    let o = ClassifierOptions {
        epochs: a.epochs,
        lr: a.lr,
        batch_pairs: a.batch_pairs,
        l2: a.l2,
        negatives: a.negatives,
        seed: a.seed,
        train: a.train_pairs,
        valid: a.valid_pairs,
        test: a.test_pairs,
    };
    let per_epoch = (examples.len() as u64).min(a.train_pairs as u64);
    let bar = ProgressBar::new(per_epoch.saturating_mul(a.epochs as u64)).with_style(
        ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {pos}/{len} pairs ({per_sec}, eta {eta}) {msg}",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    let report = classifier::train(
        &mut model,
        examples,
        &o,
        &device,
        &mut |epoch, done, loss| {
            bar.set_position((epoch as u64 - 1) * per_epoch + done as u64);
            bar.set_message(format!("epoch {epoch} loss {loss:.4}"));
        },
    )
    .with_context(|| format!("training on {}", a.data.display()))?;
    bar.finish_and_clear();
    for e in &report.epochs {
        println!(
            "epoch {:>2}  loss {:.4}  valid accuracy {:.1}  ({:.0} s)",
            e.epoch, e.loss, e.valid.all, e.seconds
        );
    }
    println!(
        "pairs: {} train, {} valid, {} test; best epoch {}",
        report.train_pairs, report.valid_pairs, report.test_pairs, report.best_epoch
    );
    println!(
        "test accuracy {:.1} (references {:.1}, translations {:.1})",
        report.test.all, report.test.reference, report.test.translation
    );
    model.notes = serde_json::json!({
        "data": a.data.display().to_string(),
        "options": {
            "negatives": a.negatives, "l2": a.l2, "epochs": a.epochs, "lr": a.lr,
            "batch_pairs": a.batch_pairs, "seed": a.seed,
            "init_vectors": a.init_vectors.as_ref().map(|p| p.display().to_string()),
            "min_word_count": a.min_word_count,
        },
        "report": report,
    });
    model.save(&out.path())?;
    out.commit()?;
    println!("written to {}", a.out.display());
    Ok(())
}

/// A saved classifier for `rescore --classifier` (the model alone, no
/// training code).
pub fn load(dir: &std::path::Path) -> Result<paraforge_encoders::classifier::ReferenceClassifier> {
    use paraforge_encoders::{classifier::ReferenceClassifier, nn_model};
    ReferenceClassifier::load(dir, &nn_model::cpu())
        .with_context(|| format!("--classifier {}", dir.display()))
}
