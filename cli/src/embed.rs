//! `paraforge train`, `eval-sts` and `export-vectors`: the training stage.

use std::path::PathBuf;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use paraforge_trainer::data::PairSource;
use paraforge_trainer::neural::{Arch, Spec};
use paraforge_trainer::nn_model::{self, NeuralModel};
use paraforge_trainer::nn_train::NeuralOptions;
use paraforge_trainer::sts;
use paraforge_trainer::train::{
    train as run_training, trigram_vocab, word_vocab, TrainOptions, TrainReport,
};
use paraforge_trainer::{Kind, Model};

#[derive(clap::Args)]
pub struct TrainArgs {
    /// Training pairs: a directory of paraforge Parquet (a bin, a decile
    /// fold, the training sample or a whole output) or one file.
    #[arg(long)]
    data: PathBuf,
    /// word, trigram, word,trigram (averages), or a neural encoder: lstm,
    /// lstm-no-o, blstm, blstm-concat, gran, rnn, irnn, dan, proj,
    /// gaussian, lstm-gaussian.
    #[arg(long, default_value = "word")]
    model: Encoder,
    /// Hidden size of a neural encoder (default: the word dimension; at
    /// most 8192).
    #[arg(long)]
    hidden: Option<usize>,
    /// Layers of dan (at most 64).
    #[arg(long, default_value_t = 1)]
    layers: usize,
    /// Probability that a training sentence's words are shuffled (default
    /// 0.3 for the LSTMs, 0.4 for the Gaussians, 0 otherwise).
    #[arg(long)]
    scramble: Option<f64>,
    /// Negatives of a neural encoder: max (the most similar sentence of
    /// another pair) or mix (max half the time, else a random one).
    #[arg(long, default_value = "max")]
    negatives: paraforge_trainer::neural::Sampling,
    /// L2 weight on a neural encoder's compositional parameters (the iRNN's
    /// pull towards its start).
    #[arg(long, default_value_t = 0.0)]
    lambda_c: f64,
    /// L2 weight on the word table's distance from its start.
    #[arg(long, default_value_t = 0.0)]
    lambda_w: f64,
    /// Weight of the Gaussian encoders' KL prior to N(0, I) (Chen and Gimpel (2020)
    /// section 3.2).
    #[arg(long, default_value_t = paraforge_trainer::nn_train::DEFAULT_LAMBDA_KL)]
    lambda_kl: f64,
    /// Where a neural encoder trains: cpu, or cuda:N with the `cuda` build
    /// feature.
    #[arg(long, default_value = "cpu")]
    device: String,
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
    /// At most this many words from the data (the most frequent).
    #[arg(long, default_value_t = 100_000)]
    max_words: usize,
    /// Word embedding size with --min-word-count (default: the vectors'
    /// size, else 300; at most 8192).
    #[arg(long)]
    word_dim: Option<usize>,
    /// Mini-batches per mega-batch (M): negatives come from M x batch-size
    /// pairs (at most 1,000,000 pairs).
    #[arg(long, default_value_t = 1)]
    megabatch: usize,
    #[arg(long, default_value_t = 100)]
    batch_size: usize,
    /// The margin delta (default 0.4; 1 for the Gaussian encoders, as
    /// Chen and Gimpel (2020)).
    #[arg(long)]
    margin: Option<f32>,
    /// Adam's learning rate (a finite number above 0). A run whose weights
    /// stop being finite numbers ends in an error naming the epoch.
    #[arg(long, default_value_t = 0.001)]
    lr: f32,
    /// Passes over the data (at most 10,000); 0 writes the initial model
    /// (the word vectors as given, random trigram rows), the untrained
    /// baseline for eval-sts.
    #[arg(long, default_value_t = 5)]
    epochs: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Trigram embedding size (default: the word vectors' size, else 300;
    /// at most 8192).
    #[arg(long)]
    trigram_dim: Option<usize>,
    /// Trigrams seen fewer times in the data are left out.
    #[arg(long, default_value_t = 2)]
    min_trigram_count: u64,
    #[arg(long, default_value_t = 100_000)]
    max_trigrams: usize,
    /// Pairs held in the shuffle buffer while streaming (at most
    /// 10,000,000).
    #[arg(long, default_value_t = 100_000)]
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
    /// How the file stores the tables: f32, or bf16 (half the size; read
    /// back as f32).
    #[arg(long, default_value = "f32")]
    precision: paraforge_core::encoder::Precision,
    /// Evaluate on the STS sets under this directory after training.
    #[arg(long)]
    sts: Option<PathBuf>,
    /// Scored after every epoch; the best epoch's model is the one written.
    /// An STS Benchmark-layout file or an STS directory (mean Pearson).
    #[arg(long, default_value = "data/sts/stsbenchmark/sts-dev.csv")]
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
    #[arg(long, default_value = "data/sts")]
    sts: PathBuf,
    /// Also print every dataset, not only the yearly means.
    #[arg(long)]
    detail: bool,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
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

/// `--model`: one of the averages, or a neural encoder or combination.
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

/// The options' bounds, before anything is read or allocated: each limit
/// is far above the papers' settings ([`paraforge_trainer::limits`]).
fn check_train_args(a: &TrainArgs) -> Result<()> {
    use paraforge_trainer::limits::*;
    for (name, value) in [
        ("--word-dim", a.word_dim),
        ("--hidden", a.hidden),
        ("--trigram-dim", a.trigram_dim),
    ] {
        if let Some(v) = value {
            at_most(name, v, MAX_DIM)?;
        }
    }
    at_most("--layers", a.layers, MAX_LAYERS)?;
    at_most("--epochs", a.epochs, MAX_EPOCHS)?;
    at_most("--batch-size", a.batch_size, MAX_MEGABATCH_PAIRS)?;
    at_most("--shuffle-buffer", a.shuffle_buffer, MAX_SHUFFLE_BUFFER)?;
    anyhow::ensure!(
        a.megabatch.saturating_mul(a.batch_size) <= MAX_MEGABATCH_PAIRS,
        "--megabatch {} x --batch-size {}: more than the limit of {MAX_MEGABATCH_PAIRS} pairs a mega-batch",
        a.megabatch,
        a.batch_size
    );
    // NaN or a negative rate would train to NaN weights (or away from the
    // data) for a whole epoch before anything said so.
    anyhow::ensure!(
        a.lr.is_finite() && a.lr > 0.0,
        "--lr {}: the learning rate must be a finite number above 0",
        a.lr
    );
    for (name, v) in [
        ("--margin", a.margin.map(f64::from)),
        ("--lambda-c", Some(a.lambda_c)),
        ("--lambda-w", Some(a.lambda_w)),
        ("--lambda-kl", Some(a.lambda_kl)),
    ] {
        if let Some(v) = v {
            anyhow::ensure!(
                v.is_finite() && v >= 0.0,
                "{name} {v}: must be a finite number, 0 or more"
            );
        }
    }
    Ok(())
}

/// What `train` reads, which its --out may never be.
fn train_inputs(a: &TrainArgs) -> Vec<(&'static str, PathBuf)> {
    let mut v = vec![
        ("--data", a.data.clone()),
        (
            "--checkpoint",
            train_options(a).checkpoint.unwrap_or_default(),
        ),
    ];
    if let Some(p) = &a.init_vectors {
        v.push(("--init-vectors", p.clone()));
    }
    if !a.no_dev && a.dev.exists() {
        v.push(("--dev", a.dev.clone()));
    }
    if let Some(p) = &a.sts {
        v.push(("--sts", p.clone()));
    }
    v
}

pub fn train(a: TrainArgs) -> Result<()> {
    check_train_args(&a)?;
    let inputs = train_inputs(&a);
    let inputs: Vec<(&str, &std::path::Path)> =
        inputs.iter().map(|(n, p)| (*n, p.as_path())).collect();
    let out = crate::out::Out::claim("--out", &a.out, &inputs, a.overwrite)?;
    crate::threads(a.threads)?;
    let source = PairSource::open(&a.data)?;
    if a.epochs > 0 {
        // Before the vocabularies, whose messages would be about them.
        paraforge_trainer::check_pairs(source.rows(), a.max_pairs)
            .with_context(|| format!("--data {}", a.data.display()))?;
    }
    // A neural encoder reads words; its table starts as a WORD model's.
    let kind = match &a.model {
        Encoder::Average(k) => *k,
        Encoder::Neural(s) if s.has_trigrams() => Kind::WordTrigram,
        Encoder::Neural(_) => Kind::Word,
    };
    let name = match &a.model {
        Encoder::Average(k) => k.name().to_string(),
        Encoder::Neural(s) => s.name(),
    };
    let init = match (&a.init_vectors, kind.words()) {
        (Some(p), true) => {
            let (v, rep) = paraforge_core::Vectors::load(p)?;
            let bad = rep.wrong_dimension + rep.unparsable + rep.duplicates;
            if bad > 0 {
                eprintln!(
                    "{}: {bad} bad lines skipped (first at line {})",
                    p.display(),
                    rep.first_skipped_line.unwrap_or(0)
                );
            }
            Some(v)
        }
        (None, true) if a.min_word_count.is_none() => anyhow::bail!(
            "--model {name} needs --init-vectors (a GloVe-format file) or --min-word-count (a vocabulary from the data)"
        ),
        _ => None,
    };
    let tdim = a
        .trigram_dim
        .unwrap_or_else(|| init.as_ref().map_or(300, |v| v.dim()));
    let trigrams = if kind.trigrams() {
        let t = trigram_vocab(&source, a.min_trigram_count, a.max_trigrams)?;
        eprintln!("trigram vocabulary: {} trigrams", t.len());
        t
    } else {
        Vec::new()
    };
    let mut model = match (a.min_word_count, kind.words()) {
        (Some(min), true) => {
            let words = word_vocab(&source, min, a.max_words)?;
            let wdim = a
                .word_dim
                .unwrap_or_else(|| init.as_ref().map_or(300, |v| v.dim()));
            let (m, known) = paraforge_trainer::model::init_with_words(
                kind,
                words,
                wdim,
                init.as_ref(),
                trigrams,
                tdim,
                a.seed,
            )?;
            eprintln!(
                "word vocabulary: {} words seen at least {min} times, {known} initialised from --init-vectors",
                m.words().len()
            );
            m
        }
        _ => paraforge_trainer::model::init(kind, init.as_ref(), trigrams, tdim, a.seed)?,
    };
    drop(init);
    if let Encoder::Neural(spec) = a.model.clone() {
        return train_neural(a, spec, model, source, out);
    }
    let o = train_options(&a);
    let dev_sets = dev_sets(&a)?;
    let dev_fn =
        |m: &Model| sts::dev_score(dev_sets.as_deref().unwrap_or_default(), &|s| m.embed(s));
    let (bar, per_epoch) = progress_bar(&a, &source);
    let report = if a.epochs == 0 {
        TrainReport::default()
    } else {
        let dev = dev_sets
            .is_some()
            .then_some(&dev_fn as paraforge_trainer::train::DevScore);
        run_training(&mut model, &source, &o, dev, &mut |p| {
            show(&bar, per_epoch, p)
        })?
    };
    bar.finish_and_clear();
    model.notes = notes(&a, &report, serde_json::json!({}));
    model.save_as(&out.path(), a.precision)?;
    out.commit()?;
    finish(
        &a,
        &report,
        model.kind.name(),
        model.dim(),
        "word or trigram",
        |sets| sts::evaluate(sets, &|s| model.embed(s)),
    )
}

fn train_options(a: &TrainArgs) -> TrainOptions {
    TrainOptions {
        megabatch: a.megabatch,
        batch_size: a.batch_size,
        margin: a.margin.unwrap_or(match &a.model {
            Encoder::Neural(spec) => paraforge_trainer::neural::default_margin(spec),
            Encoder::Average(_) => 0.4,
        }),
        lr: a.lr,
        epochs: a.epochs,
        seed: a.seed,
        shuffle_buffer: a.shuffle_buffer,
        max_pairs: a.max_pairs,
        checkpoint: Some(
            a.checkpoint
                .clone()
                .unwrap_or_else(|| PathBuf::from(format!("{}.ckpt", a.out.display()))),
        ),
        resume: a.resume,
    }
}

/// The dev sets of `--dev`, or None (`--no-dev`, or the default file absent).
fn dev_sets(a: &TrainArgs) -> Result<Option<Vec<sts::StsSet>>> {
    let default_dev = a.dev == std::path::Path::new("data/sts/stsbenchmark/sts-dev.csv");
    if a.no_dev || (default_dev && !a.dev.exists()) {
        if !a.no_dev {
            eprintln!(
                "no dev set at {} (the default): the last epoch is kept; --dev names another",
                a.dev.display()
            );
        }
        return Ok(None);
    }
    Ok(Some(
        sts::load_dev(&a.dev).with_context(|| format!("--dev {}", a.dev.display()))?,
    ))
}

/// A bar over every epoch's pairs, and the pairs of one epoch.
fn progress_bar(a: &TrainArgs, source: &PairSource) -> (ProgressBar, u64) {
    let per_epoch = if a.max_pairs > 0 {
        a.max_pairs.min(source.rows())
    } else {
        source.rows()
    };
    let bar = ProgressBar::new(per_epoch.saturating_mul(a.epochs as u64));
    bar.set_style(
        ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {pos}/{len} pairs ({per_sec}, eta {eta}) {msg}",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    (bar, per_epoch)
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

fn train_neural(
    a: TrainArgs,
    spec: Spec,
    words: Model,
    source: PairSource,
    out: crate::out::Out,
) -> Result<()> {
    let device = nn_model::device(&a.device)?;
    let hidden = a.hidden.unwrap_or(words.word_dim);
    let mut model = NeuralModel::init_spec(&spec, words, hidden, a.layers, a.seed, &device)
        .with_context(|| format!("--model {spec}"))?;
    let arch = spec.arch;
    let o = NeuralOptions {
        base: train_options(&a),
        scramble: a
            .scramble
            .unwrap_or(paraforge_trainer::neural::default_scramble(&spec)),
        sampling: a.negatives,
        lambda_c: a.lambda_c,
        lambda_w: a.lambda_w,
        lambda_kl: a.lambda_kl,
        ..NeuralOptions::default()
    };
    let dev_sets = dev_sets(&a)?;
    let dev_fn = |m: &NeuralModel| {
        let sets = dev_sets.as_deref().unwrap_or_default();
        let table = sts::embed_sets(sets, &|t| m.embed_many(t));
        sts::dev_score(sets, &|s| table[s].clone())
    };
    let (bar, per_epoch) = progress_bar(&a, &source);
    let report = if a.epochs == 0 {
        TrainReport::default()
    } else {
        let dev = dev_sets
            .is_some()
            .then_some(&dev_fn as paraforge_trainer::nn_train::NeuralDevScore);
        paraforge_trainer::nn_train::train(&mut model, &source, &o, &device, dev, &mut |p| {
            show(&bar, per_epoch, p)
        })?
    };
    bar.finish_and_clear();
    model.notes = notes(
        &a,
        &report,
        serde_json::json!({
            "scramble": o.scramble, "negatives": o.sampling,
            "lambda_c": o.lambda_c, "lambda_w": o.lambda_w,
            "lambda_kl": arch.is_gaussian().then_some(o.lambda_kl),
        }),
    );
    model.save(&out.path())?;
    out.commit()?;
    finish(&a, &report, &spec.name(), model.dim(), "word", |sets| {
        let table = sts::embed_sets(sets, &|t| model.embed_many(t));
        sts::evaluate(sets, &|s| table[s].clone())
    })
}

/// What a saved model records of its training: the options every encoder
/// shares, `extra`, and the report.
fn notes(a: &TrainArgs, report: &TrainReport, extra: serde_json::Value) -> serde_json::Value {
    let mut n = serde_json::json!({
        "data": a.data.display().to_string(),
        "init_vectors": a.init_vectors.as_ref().map(|p| p.display().to_string()),
        "megabatch": a.megabatch, "batch_size": a.batch_size, "margin": train_options(a).margin,
        "lr": a.lr, "epochs": a.epochs, "seed": a.seed,
        "report": report,
    });
    if let (Some(n), serde_json::Value::Object(extra)) = (n.as_object_mut(), extra) {
        n.extend(extra);
    }
    n
}

/// The summary after a model is written, and its STS results with `--sts`.
fn finish(
    a: &TrainArgs,
    report: &TrainReport,
    name: &str,
    dim: usize,
    units: &str,
    evaluate: impl Fn(&[sts::StsSet]) -> Result<Vec<sts::SetResult>, paraforge_trainer::TrainError>,
) -> Result<()> {
    print_epochs(report);
    println!(
        "model {name} (dim {dim}) written to {}; {} rows read, {} empty and {} null sides skipped, {} pairs without a known {units} skipped",
        a.out.display(),
        report.read.rows,
        report.read.skipped_empty,
        report.read.skipped_null,
        report.skipped_unembeddable
    );
    if let Some(dir) = &a.sts {
        let r = evaluate(&sts::load(dir)?).with_context(|| {
            format!("evaluating {} on --sts {}", a.out.display(), dir.display())
        })?;
        for (g, p, s) in sts::by_group(&r) {
            println!("  {g:<8} pearson {p:5.1}  spearman {s:5.1}");
        }
    }
    Ok(())
}

pub fn eval_sts(a: EvalArgs) -> Result<()> {
    anyhow::ensure!(
        !a.model.is_empty() || !a.vectors.is_empty(),
        "give at least one --model or --vectors"
    );
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
        print!("| set |");
        for (n, _) in &columns {
            print!(" {n} |");
        }
        println!();
        print!("|---|");
        for _ in &columns {
            print!("---:|");
        }
        println!();
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
    if let Some(j) = &a.json {
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
        std::fs::write(j, serde_json::to_string_pretty(&v)?)
            .with_context(|| format!("writing {}", j.display()))?;
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
        &[("--model", a.model.as_path())],
        a.overwrite,
    )?;
    let m = if NeuralModel::is_one(&a.model) {
        NeuralModel::load(&a.model, &nn_model::cpu())?.word_model()?
    } else {
        Model::load(&a.model)?
    };
    let n = paraforge_trainer::model::export_vectors(&m, &out.path())?;
    out.commit()?;
    println!(
        "{n} word vectors ({} dimensions) written to {}",
        m.word_dim,
        a.out.display()
    );
    Ok(())
}
