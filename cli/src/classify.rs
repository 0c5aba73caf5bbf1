//! `paraforge train-classifier`: Wieting et al. (2017)'s reference/translation
//! classifier (docs/filters.md), whose P(reference) `paraforge rescore
//! --classifier` writes as the `reference_probability` column.

use std::path::PathBuf;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use paraforge_trainer::classifier::{
    self, ClassifierEvent, ClassifierKind, ClassifierSpec, NegativeChoice,
};

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

impl TrainClassifierArgs {
    fn spec(self) -> ClassifierSpec {
        ClassifierSpec {
            data: self.data,
            model: self.model,
            train_pairs: self.train_pairs,
            valid_pairs: self.valid_pairs,
            test_pairs: self.test_pairs,
            negatives: self.negatives,
            l2: self.l2,
            epochs: self.epochs,
            lr: self.lr,
            batch_pairs: self.batch_pairs,
            hidden: self.hidden,
            init_vectors: self.init_vectors,
            min_word_count: self.min_word_count,
            max_words: self.max_words,
            word_dim: self.word_dim,
            seed: self.seed,
            device: self.device,
        }
    }
}

pub fn train(a: TrainClassifierArgs) -> Result<()> {
    let (target, overwrite, threads) = (a.out.clone(), a.overwrite, a.threads);
    let spec = a.spec();
    spec.check()?;
    let inputs = spec.inputs();
    let inputs: Vec<(&str, &std::path::Path)> =
        inputs.iter().map(|(n, p)| (*n, p.as_path())).collect();
    let out = crate::out::Out::claim(
        "--out",
        &target,
        crate::out::Artifact::Model,
        &inputs,
        overwrite,
    )?;
    crate::threads(threads)?;
    let mut bar: Option<(ProgressBar, u64)> = None;
    classifier::run(&spec, &out.path(), &mut |e| match e {
        ClassifierEvent::Note(n) => eprintln!("{n}"),
        ClassifierEvent::Started {
            pairs_per_epoch,
            epochs,
        } => {
            let b = ProgressBar::new(pairs_per_epoch.saturating_mul(epochs as u64)).with_style(
                ProgressStyle::with_template(
                    "{elapsed_precise} [{bar:30}] {pos}/{len} pairs ({per_sec}, eta {eta}) {msg}",
                )
                .expect("valid template")
                .progress_chars("=> "),
            );
            bar = Some((b, pairs_per_epoch));
        }
        ClassifierEvent::Progress { epoch, pairs, loss } => {
            if let Some((bar, per_epoch)) = &bar {
                bar.set_position((epoch as u64 - 1) * per_epoch + pairs as u64);
                bar.set_message(format!("epoch {epoch} loss {loss:.4}"));
            }
        }
        ClassifierEvent::Trained(report) => {
            if let Some((bar, _)) = &bar {
                bar.finish_and_clear();
            }
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
        }
    })?;
    out.commit()?;
    println!("written to {}", target.display());
    Ok(())
}

/// A saved classifier for `rescore --classifier` (the model alone, no
/// training code).
pub fn load(dir: &std::path::Path) -> Result<paraforge_encoders::classifier::ReferenceClassifier> {
    use paraforge_encoders::{classifier::ReferenceClassifier, nn_model};
    ReferenceClassifier::load(dir, &nn_model::cpu())
        .with_context(|| format!("--classifier {}", dir.display()))
}
