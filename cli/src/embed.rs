//! `paraforge train`, `eval-sts` and `export-vectors`: the training stage.

use std::path::PathBuf;

use crate::out::Artifact;
use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use paraforge_eval::sts;
use paraforge_trainer::nn_model::{self, NeuralModel};
use paraforge_trainer::train::TrainReport;
use paraforge_trainer::{Encoder, Event, Model, TrainSpec};

#[derive(clap::Args)]
pub struct TrainArgs {
    /// Training pairs: a directory of paraforge Parquet (a bin, a decile
    /// fold, the training sample or a whole output) or one file.
    #[arg(long)]
    data: PathBuf,
    /// word, trigram, word,trigram (averages), or a neural encoder: lstm,
    /// lstm-no-o, blstm, blstm-concat, blstm-max, gran, rnn, irnn, dan, proj,
    /// gaussian, lstm-gaussian; or paragram-words: word vectors tuned on
    /// word pairs (--data a lexicon or a PPDB file, --out GloVe text).
    #[arg(long, default_value = "word")]
    model: ModelArg,
    /// Hidden size of a neural encoder (default: the word dimension; at
    /// most 8192).
    #[arg(long)]
    hidden: Option<usize>,
    /// Layers of dan (default 1; at most 64).
    #[arg(long)]
    layers: Option<usize>,
    /// Probability that a training sentence's words are shuffled (default
    /// 0.3 for the LSTMs, 0.4 for the Gaussians, 0 otherwise).
    #[arg(long)]
    scramble: Option<f64>,
    /// Negatives of a neural encoder: max (the most similar sentence of
    /// another pair; the default) or mix (max half the time, else a random
    /// one; the default for rnn, as Wieting et al. (2016) trained it, and tree-rnn).
    #[arg(long)]
    negatives: Option<paraforge_trainer::neural::Sampling>,
    /// L2 weight on a neural encoder's compositional parameters (the iRNN's
    /// pull towards its start; default 0, 5e-5 for rnn and tree-rnn).
    #[arg(long)]
    lambda_c: Option<f64>,
    /// L2 weight on a neural encoder's word table's distance from its
    /// start (default 0, 5e-7 for rnn and tree-rnn), or on paragram-words' (default 1e-3).
    #[arg(long)]
    lambda_w: Option<f64>,
    /// paragram-words from a lexicon: its pairs seen at least this often
    /// (default 5).
    #[arg(long)]
    lexicon_min_count: Option<u64>,
    /// paragram-words from a lexicon: its pairs with adjusted PMI at least
    /// this (default 0.5).
    #[arg(long)]
    lexicon_min_pmi: Option<f64>,
    /// Weight of the Gaussian encoders' KL prior to N(0, I) (Chen and
    /// Gimpel (2020) section 3.2; default 0.01).
    #[arg(long)]
    lambda_kl: Option<f64>,
    /// Where a neural encoder trains: cpu (the default); cuda:N with the
    /// `cuda` build feature; wgpu, wgpu:N (the N-th discrete GPU) or
    /// wgpu:cpu (a software Vulkan adapter) with the `wgpu` build feature.
    #[arg(long)]
    device: Option<String>,
    /// GloVe- or word2vec-format text vectors that initialise the word
    /// embeddings. Without --min-word-count they also fix the vocabulary.
    #[arg(long)]
    init_vectors: Option<PathBuf>,
    /// Take the word vocabulary from the training pairs: words seen at
    /// least this often (rows from --init-vectors where it knows the word,
    /// random otherwise; every other word is UNK, in training, evaluation
    /// and scoring alike).
    #[arg(long)]
    min_word_count: Option<u64>,
    /// At most this many words from the data (the most frequent; default
    /// 100,000).
    #[arg(long)]
    max_words: Option<usize>,
    /// Word embedding size with --min-word-count (default: the vectors'
    /// size, else 300; at most 8192).
    #[arg(long)]
    word_dim: Option<usize>,
    /// Mini-batches per mega-batch (M): negatives come from M x batch-size
    /// pairs (at most 1,000,000 pairs); 1 turns mega-batching off. Default:
    /// 20 (as Wieting and Gimpel (2018) train) for the averages; for a
    /// neural encoder the largest M up to 20 whose mega-batch is at most a
    /// twentieth of the pairs.
    #[arg(long)]
    megabatch: Option<usize>,
    #[arg(long, default_value_t = 100)]
    batch_size: usize,
    /// The margin delta (default 0.4; 1 for the Gaussian encoders, as
    /// Chen and Gimpel (2020), and for paragram-words, as Wieting et al. (2015)).
    #[arg(long)]
    margin: Option<f32>,
    /// Adam's learning rate (a finite number above 0; default 0.001, 0.0005
    /// for rnn and tree-rnn), or paragram-words' AdaGrad rate (default 0.5). A run whose weights stop
    /// being finite numbers ends in an error naming the epoch.
    #[arg(long)]
    lr: Option<f32>,
    /// Passes over the data (at most 10,000; default 5, 20 for
    /// paragram-words); 0 writes the initial model (the word vectors as
    /// given, random trigram rows), the untrained baseline for eval-sts.
    #[arg(long)]
    epochs: Option<usize>,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Trigram embedding size (default: the word vectors' size, else 300;
    /// at most 8192).
    #[arg(long)]
    trigram_dim: Option<usize>,
    /// Trigrams seen fewer times in the data are left out (default 2).
    #[arg(long)]
    min_trigram_count: Option<u64>,
    /// At most this many trigrams, the most frequent (default 100,000).
    #[arg(long)]
    max_trigrams: Option<usize>,
    /// Pairs held in the shuffle buffer while streaming (at most
    /// 10,000,000).
    #[arg(long, default_value_t = SHUFFLE_BUFFER)]
    shuffle_buffer: usize,
    /// Stop each epoch after this many pairs (0 = all).
    #[arg(long, default_value_t = 0)]
    max_pairs: u64,
    /// Threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Where to write the model: a .pfe file for the averages, a directory
    /// (model.safetensors + config.json) for a neural encoder. It is made
    /// beside this path and renamed here at the end.
    #[arg(long)]
    out: PathBuf,
    /// Replace an existing --out (a file, or a directory that holds
    /// something). An --out that is an input (--data, --init-vectors,
    /// --dev, --sts, --checkpoint), holds one or lies inside one is refused
    /// even so.
    #[arg(long)]
    overwrite: bool,
    /// How an average's file stores the tables: f32 (the default), or
    /// bf16 (half the size; read back as f32).
    #[arg(long)]
    precision: Option<paraforge_core::encoder::Precision>,
    /// Evaluate on the STS sets under this directory after training.
    #[arg(long)]
    sts: Option<PathBuf>,
    /// Scored after every epoch; the best epoch's model is the one written.
    /// An STS Benchmark-layout file or an STS directory (mean Pearson).
    #[arg(long, default_value = paraforge_trainer::DEFAULT_DEV)]
    dev: PathBuf,
    /// Keep the last epoch's model, scoring no dev set.
    #[arg(long)]
    no_dev: bool,
    /// Checkpoint directory, written after every epoch (default: OUT.ckpt).
    #[arg(long)]
    checkpoint: Option<PathBuf>,
    /// Go on from the checkpoint (a killed run ends with the model an
    /// uninterrupted one gives).
    #[arg(long)]
    resume: bool,
    /// tree-rnn: a file of parse trees, read at the start if it exists and
    /// written as the run parses (every 5 minutes and after each epoch), so
    /// that another seed or a resumed run does not parse its sentences again.
    /// Refused if made by another Link Grammar version, dictionary or limits.
    #[arg(long, value_name = "FILE")]
    parse_cache: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct EvalArgs {
    /// Trained models (.pfe); repeat to compare.
    #[arg(long)]
    model: Vec<PathBuf>,
    /// GloVe-format vectors evaluated by plain averaging (a baseline); repeatable.
    #[arg(long)]
    vectors: Vec<PathBuf>,
    /// STS data: semeval/STS20XX-test, stsbenchmark/sts-test.csv, sick2014/.
    #[arg(long, default_value = paraforge_eval::bundled::STS)]
    sts: PathBuf,
    /// Also print every dataset, not only the yearly means.
    #[arg(long)]
    detail: bool,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Replace an existing --json (a JSON result; anything else is refused
    /// even so).
    #[arg(long)]
    overwrite: bool,
}

#[derive(clap::Args)]
pub struct ExportArgs {
    #[arg(long)]
    model: PathBuf,
    /// GloVe-format text file to write (what `[scoring] vectors` loads).
    #[arg(long)]
    out: PathBuf,
    /// Replace an existing --out; one that is (or holds, or lies inside)
    /// --model is refused even so.
    #[arg(long)]
    overwrite: bool,
}

const SHUFFLE_BUFFER: usize = 100_000;

/// What `--model` names: an encoder, or PARAGRAM word vectors.
#[derive(Clone)]
pub enum ModelArg {
    Encoder(Encoder),
    ParagramWords,
}

const PARAGRAM_WORDS: &str = "paragram-words";

impl std::str::FromStr for ModelArg {
    type Err = String;
    fn from_str(s: &str) -> Result<ModelArg, String> {
        if s == PARAGRAM_WORDS {
            return Ok(ModelArg::ParagramWords);
        }
        s.parse::<Encoder>()
            .map(ModelArg::Encoder)
            .map_err(|e| format!("{e}; or {PARAGRAM_WORDS}"))
    }
}

impl TrainArgs {
    fn spec(self, model: Encoder) -> Result<TrainSpec> {
        for (flag, given) in [
            ("--lexicon-min-count", self.lexicon_min_count.is_some()),
            ("--lexicon-min-pmi", self.lexicon_min_pmi.is_some()),
        ] {
            anyhow::ensure!(
                !given,
                "{flag} is not used by --model {}: only {PARAGRAM_WORDS} reads it",
                model.name()
            );
        }
        Ok(TrainSpec {
            data: self.data,
            without_fold: None,
            model,
            hidden: self.hidden,
            layers: self.layers,
            scramble: self.scramble,
            negatives: self.negatives,
            lambda_c: self.lambda_c,
            lambda_w: self.lambda_w,
            lambda_kl: self.lambda_kl,
            device: self.device,
            init_vectors: self.init_vectors,
            min_word_count: self.min_word_count,
            max_words: self.max_words,
            word_dim: self.word_dim,
            megabatch: self.megabatch,
            batch_size: self.batch_size,
            margin: self.margin,
            lr: self.lr,
            epochs: self.epochs.unwrap_or(5),
            seed: self.seed,
            trigram_dim: self.trigram_dim,
            min_trigram_count: self.min_trigram_count,
            max_trigrams: self.max_trigrams,
            shuffle_buffer: self.shuffle_buffer,
            max_pairs: self.max_pairs,
            out: self.out,
            precision: self.precision,
            sts: self.sts,
            dev: (!self.no_dev).then_some(self.dev),
            checkpoint: self.checkpoint,
            resume: self.resume,
            parse_cache: self.parse_cache,
            command: Some(paraforge_trainer::card::command_line(std::env::args_os())),
        })
    }

    /// The options paragram-words does not read, given.
    fn unused_by_paragram(&self) -> Option<&'static str> {
        // Flags with a default value count as given when they differ from it.
        [
            ("--hidden", self.hidden.is_some()),
            ("--layers", self.layers.is_some()),
            ("--scramble", self.scramble.is_some()),
            ("--negatives", self.negatives.is_some()),
            ("--lambda-c", self.lambda_c.is_some()),
            ("--lambda-kl", self.lambda_kl.is_some()),
            ("--device", self.device.is_some()),
            ("--min-word-count", self.min_word_count.is_some()),
            ("--max-words", self.max_words.is_some()),
            ("--word-dim", self.word_dim.is_some()),
            ("--megabatch", self.megabatch.is_some()),
            ("--trigram-dim", self.trigram_dim.is_some()),
            ("--min-trigram-count", self.min_trigram_count.is_some()),
            ("--max-trigrams", self.max_trigrams.is_some()),
            ("--shuffle-buffer", self.shuffle_buffer != SHUFFLE_BUFFER),
            ("--max-pairs", self.max_pairs != 0),
            ("--precision", self.precision.is_some()),
            ("--sts", self.sts.is_some()),
            (
                "--dev",
                self.dev != std::path::Path::new(paraforge_trainer::DEFAULT_DEV),
            ),
            ("--no-dev", self.no_dev),
            ("--checkpoint", self.checkpoint.is_some()),
            ("--parse-cache", self.parse_cache.is_some()),
            ("--resume", self.resume),
        ]
        .into_iter()
        .find(|(_, given)| *given)
        .map(|(flag, _)| flag)
    }
}

/// `train --model paragram-words`: PARAGRAM word vectors (Wieting et al.,
/// 2015) tuned on the word pairs of a lexicon or a PPDB file, written as
/// GloVe text.
fn train_paragram(a: TrainArgs) -> Result<()> {
    use paraforge_trainer::paragram::ParagramOptions;
    use paraforge_trainer::paragram_run as paragram;
    if let Some(flag) = a.unused_by_paragram() {
        anyhow::bail!(
            "{flag} is not used by --model {PARAGRAM_WORDS}: it reads --data, --init-vectors, --epochs, --batch-size, --lr, --margin, --lambda-w, --seed, --lexicon-min-count and --lexicon-min-pmi"
        );
    }
    let init_path = a
        .init_vectors
        .as_deref()
        .context("--model paragram-words needs --init-vectors (the vectors it starts from and is pulled towards)")?;
    let out = crate::out::Out::claim_with(
        "--out",
        &a.out,
        crate::out::Artifact::Vectors,
        &[("--data", a.data.as_path()), ("--init-vectors", init_path)],
        a.overwrite,
        &[paraforge_trainer::card::CARD_SUFFIX],
    )?;
    anyhow::ensure!(
        a.data.is_dir() || (a.lexicon_min_count.is_none() && a.lexicon_min_pmi.is_none()),
        "--lexicon-min-count and --lexicon-min-pmi choose a lexicon's pairs; --data {} is a file (PPDB)",
        a.data.display()
    );
    let d = ParagramOptions::default();
    let spec = paragram::ParagramSpec {
        data: a.data.clone(),
        init_vectors: init_path.to_path_buf(),
        out: a.out.clone(),
        min_count: a.lexicon_min_count.unwrap_or(5),
        min_pmi: a.lexicon_min_pmi.unwrap_or(0.5),
        options: ParagramOptions {
            epochs: a.epochs.unwrap_or(d.epochs),
            batch_size: a.batch_size,
            lr: a.lr.unwrap_or(d.lr),
            margin: a.margin.unwrap_or(d.margin),
            lambda: a.lambda_w.map(|l| l as f32).unwrap_or(d.lambda),
            seed: a.seed,
        },
        command: Some(paraforge_trainer::card::command_line(std::env::args_os())),
    };
    crate::threads(a.threads)?;
    let bar = ProgressBar::new(spec.options.epochs as u64).with_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] epoch {pos}/{len} {msg}")
            .expect("valid template"),
    );
    let done = paragram::run(
        &spec,
        &out.path(),
        &mut |n| eprintln!("{n}"),
        &mut |_, loss| {
            bar.inc(1);
            bar.set_message(format!("loss {loss:.4}"));
        },
    )
    .with_context(|| format!("training {PARAGRAM_WORDS} on {}", a.data.display()))?;
    bar.finish_and_clear();
    out.commit()?;
    let (report, vectors) = (done.report, done.vectors);
    println!(
        "{} of {} word pairs trained ({} with a word the vectors lack, {} repeated), {} words moved; loss {:.4} -> {:.4}",
        report.pairs,
        report.pairs_given,
        report.unknown,
        report.repeated,
        report.words,
        report.loss.first().copied().unwrap_or(0.0),
        report.loss.last().copied().unwrap_or(0.0),
    );
    println!(
        "{} vectors ({} dimensions) written to {}; model card: {}",
        vectors.0,
        vectors.1,
        a.out.display(),
        paraforge_trainer::card::card_path(&a.out).display()
    );
    Ok(())
}

pub fn train(a: TrainArgs) -> Result<()> {
    let model = match a.model.clone() {
        ModelArg::ParagramWords => return train_paragram(a),
        ModelArg::Encoder(e) => e,
    };
    let (overwrite, threads) = (a.overwrite, a.threads);
    let spec = a.spec(model)?;
    spec.check()?;
    let inputs = spec.inputs();
    let inputs: Vec<(&str, &std::path::Path)> =
        inputs.iter().map(|(n, p)| (*n, p.as_path())).collect();
    // The two paths the run writes as it goes: each is also read (to
    // resume, to skip parsing), so the rule's "existing" is expected; any
    // other input, and anything sealed around them, is still refused.
    let checkpoint = spec.checkpoint_dir();
    let mut written = vec![("--checkpoint", checkpoint.as_path(), Artifact::Checkpoint)];
    if let Some(p) = &spec.parse_cache {
        written.push(("--parse-cache", p.as_path(), Artifact::ParseCache));
    }
    for (flag, path, writes) in written {
        let others: Vec<(&str, &std::path::Path)> =
            inputs.iter().copied().filter(|(f, _)| *f != flag).collect();
        let target = paraforge_core::outputs::Target { flag, path, writes };
        paraforge_core::outputs::check(target, &others, true)?;
    }
    let out = crate::out::Out::claim_with(
        "--out",
        &spec.out,
        crate::out::Artifact::Model,
        &inputs,
        overwrite,
        &[paraforge_trainer::card::CARD_SUFFIX],
    )?;
    crate::training_threads(threads)?;
    let target = spec.out.clone();
    let mut bar: Option<(ProgressBar, u64)> = None;
    let path = out.path();
    // The run goes onto a pool thread, so that its parallel steps (the
    // scan's sentence groups, twice a batch) start on a worker that takes
    // its share and wakes one sleeping worker, where the main thread would
    // queue them, sleep and be woken at the end; sleeping workers wake
    // slowly (docs/bench/HISTORY.md, "Training speed").
    let run = rayon::scope(|_| {
        paraforge_trainer::run(spec, &path, &mut |e| match e {
            Event::Note(n) => eprintln!("{n}"),
            Event::Started {
                pairs_per_epoch,
                epochs,
            } => bar = Some((progress_bar(pairs_per_epoch, epochs), pairs_per_epoch)),
            Event::Progress(p) => {
                if let Some((bar, per_epoch)) = &bar {
                    show(bar, *per_epoch, p);
                }
            }
            Event::Trained => {
                if let Some((bar, _)) = &bar {
                    bar.finish_and_clear();
                }
            }
        })
    });
    // A model that trained is kept even when scoring it or writing its
    // card failed after; the failure is reported once it is in place.
    let (outcome, unfinished) = match run {
        Ok(o) => (o, None),
        Err(paraforge_trainer::TrainError::Unfinished { outcome, error }) => {
            (*outcome, Some(error))
        }
        Err(e) => return Err(e.into()),
    };
    // A one-file model's card is made beside it and goes beside it.
    out.commit()?;
    print_epochs(&outcome.report);
    let r = &outcome.report;
    println!(
        "model {} (dim {}) written to {}; {} rows read, {} empty and {} null sides skipped, {} pairs without a known {} skipped",
        outcome.name,
        outcome.dim,
        target.display(),
        r.read.rows,
        r.read.skipped_empty,
        r.read.skipped_null,
        r.skipped_unembeddable,
        outcome.units
    );
    for (g, p, s) in sts::by_group(&outcome.sts) {
        println!("  {g:<8} pearson {p:5.1}  spearman {s:5.1}");
    }
    if outcome.name == "tree-rnn" {
        if let Ok(parser) = paraforge_encoders::link_grammar::shared() {
            let (parsed, fallbacks) = parser.counts();
            println!(
                "trees: {parsed} sentences parsed, {fallbacks} of them right-branching for want of a parse over their tokens"
            );
        }
    }
    println!(
        "model card: {}",
        paraforge_trainer::card::card_path(&target).display()
    );
    match unfinished {
        Some(e) => Err(anyhow::Error::new(*e).context(format!(
            "the model is written to {}, but what follows training failed",
            target.display()
        ))),
        None => Ok(()),
    }
}

/// A bar over every epoch's pairs.
fn progress_bar(per_epoch: u64, epochs: usize) -> ProgressBar {
    let bar = ProgressBar::new(per_epoch.saturating_mul(epochs as u64));
    bar.set_style(
        ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {pos}/{len} pairs ({per_sec}, eta {eta}) {msg}",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar
}

fn show(bar: &ProgressBar, per_epoch: u64, p: paraforge_trainer::train::Progress) {
    // Skipped rows make epochs a little shorter than `per_epoch`.
    bar.set_position((p.epoch as u64 - 1) * per_epoch + p.pairs);
    let dev = p.dev.map_or(String::new(), |d| format!(", dev {d:.1}"));
    bar.set_message(format!("epoch {} loss {:.4}{dev}", p.epoch, p.loss));
}

fn print_epochs(report: &TrainReport) {
    for e in &report.epochs {
        let dev = e.dev.map_or(String::new(), |d| format!(", dev {d:.2}"));
        println!(
            "epoch {}: {} pairs, mean loss {:.4}, {:.0} pairs/s{dev}",
            e.epoch, e.pairs, e.mean_loss, e.pairs_per_second
        );
    }
    if let Some(e) = report.resumed_after {
        println!("resumed after epoch {e} from the checkpoint");
    }
    if let Some(e) = report.best_epoch {
        println!("kept epoch {e} (best dev score)");
    }
}

pub fn eval_sts(mut a: EvalArgs) -> Result<()> {
    anyhow::ensure!(
        !a.model.is_empty() || !a.vectors.is_empty(),
        "give at least one --model or --vectors"
    );
    a.sts = paraforge_eval::bundled::locate(&a.sts, "--sts")?;
    let mut inputs = vec![("--sts", a.sts.as_path())];
    inputs.extend(a.model.iter().map(|p| ("--model", p.as_path())));
    inputs.extend(a.vectors.iter().map(|p| ("--vectors", p.as_path())));
    let json = crate::out::Out::claim_opt(
        "--json",
        a.json.as_deref(),
        crate::out::Artifact::Json,
        &inputs,
        a.overwrite,
    )?;
    let sets = sts::load(&a.sts)?;
    let mut columns: Vec<(String, Vec<sts::SetResult>)> = Vec::new();
    // Every encoder as para_score loads and embeds it: the scorer's
    // `load_encoder` picks the kind, the scorer's tokens go in.
    let given =
        (a.vectors.iter().map(|p| ("--vectors", p))).chain(a.model.iter().map(|p| ("--model", p)));
    for (flag, p) in given {
        let what = || format!("{flag} {}", p.display());
        let (model, vectors) = match flag {
            "--vectors" => (None, Some(p.as_path())),
            _ => (Some(p.as_path()), None),
        };
        let enc = paraforge_scorer::load_encoder(model, vectors)
            .with_context(what)?
            .expect("a model or vectors is given");
        let r = sts::evaluate_encoder(&sets, enc.as_ref()).with_context(what)?;
        columns.push((format!("{} ({})", file_name(p), enc.short_name()), r));
    }
    for (metric, pick) in [("Pearson's r x 100", 0usize), ("Spearman's rho x 100", 1)] {
        println!("\n{metric}\n");
        table_head(columns.iter().map(|(n, _)| n.as_str()));
        let groups: Vec<String> = sts::by_group(&columns[0].1)
            .into_iter()
            .map(|g| g.0)
            .collect();
        for (gi, g) in groups.iter().enumerate() {
            print!("| {g} |");
            for (_, r) in &columns {
                let v = &sts::by_group(r)[gi];
                print!(" {:.1} |", if pick == 0 { v.1 } else { v.2 });
            }
            println!();
            if a.detail {
                for (si, s) in columns[0]
                    .1
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| &s.group == g)
                {
                    print!("| &nbsp;&nbsp;{} ({}) |", s.name, s.pairs);
                    for (_, r) in &columns {
                        let x = &r[si];
                        print!(" {:.1} |", if pick == 0 { x.pearson } else { x.spearman });
                    }
                    println!();
                }
            }
        }
    }
    if let Some(j) = json {
        let v: Vec<serde_json::Value> = columns
            .iter()
            .map(|(n, r)| {
                serde_json::json!({
                    "model": n,
                    "sets": r,
                    "groups": sts::by_group(r).into_iter()
                        .map(|(g, p, s)| serde_json::json!({"group": g, "pearson": p, "spearman": s}))
                        .collect::<Vec<_>>(),
                })
            })
            .collect();
        j.write_all(serde_json::to_string_pretty(&v)?.as_bytes())?;
    }
    Ok(())
}

fn file_name(p: &std::path::Path) -> String {
    p.file_name().map_or_else(
        || p.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

pub fn export_vectors(a: ExportArgs) -> Result<()> {
    let out = crate::out::Out::claim(
        "--out",
        &a.out,
        crate::out::Artifact::Vectors,
        &[("--model", a.model.as_path())],
        a.overwrite,
    )?;
    write_word_vectors(&a.model, out, &a.out)
}

/// A model's word table as GloVe text at `out` (`export-vectors` and
/// `export --format glove`), committed.
pub(crate) fn write_word_vectors(
    model: &std::path::Path,
    out: crate::out::Out,
    target: &std::path::Path,
) -> Result<()> {
    let m = word_model(model)?;
    let n = paraforge_trainer::model::export_vectors(&m, &out.path())?;
    out.commit()?;
    println!(
        "{n} word vectors ({} dimensions) written to {}",
        m.word_dim,
        target.display()
    );
    Ok(())
}

#[derive(clap::Args)]
pub struct EvalWordsArgs {
    /// GloVe- or word2vec-format text vectors (what `export-vectors`
    /// writes); repeatable.
    #[arg(long)]
    vectors: Vec<PathBuf>,
    /// A trained model whose word table is evaluated (a `.pfe` with words,
    /// or a neural encoder's directory); repeatable.
    #[arg(long)]
    model: Vec<PathBuf>,
    /// A lexicon from `paraforge lexicon`, scored by cross-sentence and by
    /// adjusted PMI (two columns); repeatable.
    #[arg(long)]
    lexicon: Vec<PathBuf>,
    /// The word-similarity sets: simlex999.txt and wordsim353.tsv.
    #[arg(long, default_value = paraforge_eval::bundled::WORDS)]
    words: PathBuf,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Replace an existing --json (a JSON result; anything else is refused
    /// even so).
    #[arg(long)]
    overwrite: bool,
}

/// The averaging model holding a trained model's word table (a neural
/// encoder's, or the `.pfe` itself).
fn word_model(model: &std::path::Path) -> Result<Model> {
    // A transformer's directory may hold a config.json too; it has no word table.
    let neural = NeuralModel::is_one(model)
        && !paraforge_scorer::transformer::TransformerEncoder::is_one(model);
    Ok(if neural {
        NeuralModel::load(model, &nn_model::cpu())?.word_model()?
    } else {
        Model::load(model)?
    })
}

/// The head of a Markdown table: `set` and one column per name.
fn table_head<'a>(names: impl Iterator<Item = &'a str> + Clone) {
    print!("| set |");
    for n in names.clone() {
        print!(" {n} |");
    }
    println!();
    print!("|---|");
    for _ in names {
        print!("---:|");
    }
    println!();
}

pub fn eval_words(a: EvalWordsArgs) -> Result<()> {
    use paraforge_dataset::lexicon::{self, Score};
    use paraforge_eval::words;
    anyhow::ensure!(
        !a.model.is_empty() || !a.vectors.is_empty() || !a.lexicon.is_empty(),
        "give at least one --model, --vectors or --lexicon"
    );
    let words_dir = paraforge_eval::bundled::locate(&a.words, "--words")?;
    let mut inputs = vec![("--words", words_dir.as_path())];
    inputs.extend(a.model.iter().map(|p| ("--model", p.as_path())));
    inputs.extend(a.vectors.iter().map(|p| ("--vectors", p.as_path())));
    inputs.extend(a.lexicon.iter().map(|p| ("--lexicon", p.as_path())));
    let json = crate::out::Out::claim_opt(
        "--json",
        a.json.as_deref(),
        crate::out::Artifact::Json,
        &inputs,
        a.overwrite,
    )?;
    let sets = words::load(&words_dir)?;
    let mut columns: Vec<(String, Vec<words::WordResult>)> = Vec::new();
    let given =
        (a.vectors.iter().map(|p| ("--vectors", p))).chain(a.model.iter().map(|p| ("--model", p)));
    for (flag, p) in given {
        let what = || format!("{flag} {}", p.display());
        let table = match flag {
            "--vectors" => paraforge_core::Vectors::load(p).with_context(what)?.0,
            _ => paraforge_trainer::model::word_vectors(&word_model(p).with_context(what)?)
                .with_context(what)?,
        };
        let r = words::evaluate(&sets, &|x, y| words::cosine(&table, x, y)).with_context(what)?;
        columns.push((file_name(p), r));
    }
    // Only the rows both of whose words a set holds are read into memory.
    let wanted: std::collections::HashSet<String> = sets
        .iter()
        .flat_map(|s| s.pairs.iter())
        .flat_map(|(a, b, _)| [a.to_lowercase(), b.to_lowercase()])
        .collect();
    for p in &a.lexicon {
        let what = || format!("--lexicon {}", p.display());
        let scores = lexicon::read_scores(p, &wanted).with_context(what)?;
        for (which, label) in [
            (Score::Cross, "cross PMI"),
            (Score::Adjusted, "adjusted PMI"),
        ] {
            let r = words::evaluate(&sets, &|x, y| lexicon::lookup(&scores, x, y, which))
                .with_context(what)?;
            columns.push((format!("{} {label}", file_name(p)), r));
        }
    }
    println!("\nSpearman's rho x 100 (pairs with an unknown word scored 0; covered/all)\n");
    table_head(columns.iter().map(|(n, _)| n.as_str()));
    for (i, s) in sets.iter().enumerate() {
        print!("| {} |", s.name);
        for (_, r) in &columns {
            print!(" {:.1} ({}/{}) |", r[i].spearman, r[i].covered, r[i].pairs);
        }
        println!();
    }
    if let Some(j) = json {
        let v: Vec<serde_json::Value> = columns
            .iter()
            .map(|(n, r)| serde_json::json!({"table": n, "results": r}))
            .collect();
        j.write_all(serde_json::to_string_pretty(&v)?.as_bytes())?;
    }
    Ok(())
}
