//! `paraforge bin`, `paraforge report` and `paraforge rescore`.

use std::path::PathBuf;

use anyhow::{Context, Result};
use paraforge_dataset::bins::{self, BinOptions};

#[derive(clap::Args)]
pub struct BinArgs {
    /// A finished dataset: a directory of paraforge Parquet output (its
    /// `_manifest.json` lists the files, each checked against its rows and
    /// SHA-256 before it is read), one bins partition, or one Parquet file.
    #[arg(long)]
    data: PathBuf,
    /// A new or empty directory for the partitions and `_manifest.json`
    /// (they appear there only when complete).
    #[arg(long)]
    out: PathBuf,
    /// Replace the finished dataset at --out (never a job output, a model
    /// or an input).
    #[arg(long)]
    overwrite: bool,
    /// Skip the five para_score ranges.
    #[arg(long)]
    no_ranges: bool,
    /// Scores to cut into deciles (comma-separated): para_score,
    /// trigram_overlap, translation_score, bigram_overlap, unigram_overlap,
    /// sentence_bleu, translation_perplexity.
    #[arg(long, value_delimiter = ',', default_value = "para_score")]
    deciles: Vec<String>,
    /// Also write the paper's training set: N pairs sampled from the top two
    /// para_score deciles with both sides at most --train-max-tokens tokens.
    #[arg(long)]
    train_sample: Option<usize>,
    #[arg(long, default_value_t = 30)]
    train_max_tokens: i32,
    /// Seed of the training sample.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Drop exact duplicate (reference, translation) pairs, keeping the first.
    #[arg(long)]
    dedup: bool,
    /// Memory --dedup may take, in MiB; past it the pairs' keys are spilled
    /// to disk (TMPDIR) and sorted in partitions.
    #[arg(long, default_value_t = 2048, value_parser = clap::value_parser!(u64).range(1..))]
    dedup_memory_mb: u64,
    /// Keep only pairs whose two sides have at least this many tokens.
    #[arg(long)]
    min_tokens: Option<i32>,
    /// Keep only pairs whose two sides have at most this many tokens.
    #[arg(long)]
    max_tokens: Option<i32>,
}

pub fn bin(a: BinArgs) -> Result<()> {
    let o = BinOptions {
        ranges: !a.no_ranges,
        deciles: a.deciles.into_iter().filter(|d| !d.is_empty()).collect(),
        train_sample: a.train_sample,
        train_max_tokens: a.train_max_tokens,
        seed: a.seed,
        dedup: a.dedup,
        dedup_memory: a.dedup_memory_mb << 20,
        min_tokens: a.min_tokens,
        max_tokens: a.max_tokens,
        overwrite: a.overwrite,
        ..BinOptions::new(a.data.clone(), a.out.clone())
    };
    let m = bins::run(&o).with_context(|| format!("binning {}", a.data.display()))?;
    println!(
        "{} rows read, {} kept ({} duplicates, {} outside the length limits dropped)",
        m.input_rows, m.kept_rows, m.dropped_duplicates, m.dropped_length
    );
    // In score order, not the map's alphabetical one.
    let labels = bins::PARA_RANGES.iter().map(|r| r.2);
    for label in labels.chain(["none"]) {
        if let Some(n) = m.ranges.get(label) {
            println!("  para_range={label}: {n}");
        }
    }
    for (score, d) in &m.deciles {
        let b: Vec<String> = d.boundaries.iter().map(|x| format!("{x:.4}")).collect();
        println!(
            "  deciles of {score}: {} ranked, {} unranked; boundaries {}",
            d.ranked,
            d.unranked,
            b.join(" ")
        );
    }
    if let Some(t) = &m.train {
        println!(
            "  training sample: {} of {} eligible pairs (seed {})",
            t.sampled, t.eligible, t.seed
        );
    }
    println!("written to {} (see _manifest.json)", a.out.display());
    Ok(())
}

#[derive(clap::Args)]
pub struct FilterArgs {
    /// A dataset: a directory of paraforge Parquet output or one file
    /// (a job output without `_SUCCESS` is refused).
    #[arg(long)]
    data: PathBuf,
    /// A new or empty directory for the filtered dataset (same file layout,
    /// its own `_manifest.json`; it appears only when complete); the input
    /// is only read.
    #[arg(long)]
    out: PathBuf,
    /// Replace the finished dataset at --out (never a job output, a model
    /// or an input).
    #[arg(long)]
    overwrite: bool,
    /// Keep rows with COLUMN >= VALUE (any numeric column, e.g.
    /// sentence_bleu=10); repeatable.
    #[arg(long = "min", value_name = "COLUMN=VALUE")]
    min: Vec<String>,
    /// Keep rows with COLUMN <= VALUE (e.g. trigram_overlap=0.7); repeatable.
    #[arg(long = "max", value_name = "COLUMN=VALUE")]
    max: Vec<String>,
    /// Keep pairs whose reference and translation both have at least this
    /// many tokens (reference_len, translation_len).
    #[arg(long)]
    min_tokens: Option<i32>,
    /// Keep pairs whose reference and translation both have at most this many tokens.
    #[arg(long)]
    max_tokens: Option<i32>,
}

pub fn filter(a: FilterArgs) -> Result<()> {
    use paraforge_core::schema::col;
    use paraforge_dataset::filter::{self, Rule, Side};
    let mut rules = Vec::new();
    for (side, list) in [(Side::Min, &a.min), (Side::Max, &a.max)] {
        for text in list {
            rules.push(Rule::parse(side, text)?);
        }
    }
    for (side, n) in [(Side::Min, a.min_tokens), (Side::Max, a.max_tokens)] {
        if let Some(n) = n {
            for c in [col::REFERENCE_LEN, col::TRANSLATION_LEN] {
                rules.push(Rule {
                    bound: side,
                    column: c.to_string(),
                    value: n as f64,
                });
            }
        }
    }
    let m = filter::run(&a.data, &rules, &a.out, a.overwrite)
        .with_context(|| format!("filtering {}", a.data.display()))?;
    println!(
        "{} rows read, {} kept, {} dropped",
        m.input_rows, m.kept_rows, m.dropped_rows
    );
    for r in &m.rules {
        println!(
            "  {:<32} dropped {:>9} (fails {})",
            r.rule, r.dropped, r.failed
        );
    }
    println!("written to {} (see _manifest.json)", a.out.display());
    Ok(())
}

#[derive(clap::Args)]
pub struct ReportArgs {
    /// A dataset directory or Parquet file.
    #[arg(long)]
    data: PathBuf,
    /// Word frequencies (`word count` per line) for the IDF column; `none`
    /// leaves the column out. The default, English Wikipedia's, is bundled
    /// in the binary.
    #[arg(long, default_value = paraforge_eval::bundled::FREQ)]
    freq: PathBuf,
    /// Output directory for report.md, report.html, report.json and the SVG
    /// figures (made beside it and renamed there at the end).
    #[arg(long)]
    out: PathBuf,
    /// Replace an existing report at --out (nothing else is replaced).
    #[arg(long)]
    overwrite: bool,
}

pub fn report(a: ReportArgs) -> Result<()> {
    let freq = match a.freq.to_str() {
        Some("none") => None,
        _ => Some(paraforge_eval::bundled::locate(&a.freq, "--freq")?),
    };
    // The IDF column of another language's words from an English list
    // would rank them all as rare.
    let language = paraforge_core::dataset::trace(&a.data).reference_language();
    if let Some(l) = language.filter(|l| l != "en") {
        if a.freq == std::path::Path::new(paraforge_eval::bundled::FREQ) {
            eprintln!(
                "note: the data's references are {l:?} (its manifest) but --freq is the default English list: the IDF column measures nothing; --freq names a {l:?} word list, or --freq none leaves it out"
            );
        }
    }
    let mut inputs = vec![("--data", a.data.as_path())];
    inputs.extend(freq.as_deref().map(|f| ("--freq", f)));
    let out = crate::out::Out::claim(
        "--out",
        &a.out,
        crate::out::Artifact::Report,
        &inputs,
        a.overwrite,
    )?;
    let r = paraforge_dataset::report::run(&a.data, freq.as_deref(), &out.path())
        .with_context(|| format!("reporting on {}", a.data.display()))?;
    out.commit()?;
    println!(
        "{} pairs; mean para_score {:.3}, mean trigram overlap {:.3}; report in {}",
        r.pairs,
        r.para_score.mean,
        r.trigram_overlap.mean,
        a.out.join("report.md").display()
    );
    for l in r.range_tally().lines() {
        println!("  {l}");
    }
    Ok(())
}

#[derive(clap::Args)]
pub struct RescoreArgs {
    /// A dataset: a local directory or Parquet file, or an object-store URL
    /// (`s3://`, `gs://`) of a job's output or an earlier rescore.
    #[arg(long)]
    data: String,
    /// Any model from `paraforge train` (`.pfe`, a directory holding
    /// `model.pfe` such as models/scorer-trigram, or a neural encoder's
    /// directory such as an LSTM's): para_score becomes the cosine of its
    /// two sentence embeddings.
    #[arg(long, conflicts_with_all = ["vectors", "bootstrap"])]
    model: Option<PathBuf>,
    /// GloVe-format word vectors instead (averaged).
    #[arg(long, conflicts_with = "bootstrap")]
    vectors: Option<PathBuf>,
    /// Learn the scorer from the data itself, for a language without one:
    /// trigram, word or word,trigram, trained with cross-fitting (each
    /// fold scored by a model trained on the other folds; the models are
    /// kept in the output's `_scorers/`).
    #[arg(long, value_parser = parse_bootstrap)]
    bootstrap: Option<paraforge_trainer::Kind>,
    /// Folds of --bootstrap (2 to 10).
    #[arg(long, default_value_t = paraforge_trainer::bootstrap::DEFAULT_FOLDS, requires = "bootstrap")]
    folds: u32,
    /// Epochs of each --bootstrap model.
    #[arg(long, default_value_t = paraforge_trainer::bootstrap::DEFAULT_EPOCHS, requires = "bootstrap")]
    bootstrap_epochs: usize,
    /// A classifier from `paraforge train-classifier`: `reference_probability`
    /// becomes its P(reference) of each translation (the quality
    /// filter of Wieting et al., 2017). With neither --model nor --vectors, para_score is kept.
    #[arg(long, required_unless_present_any = ["model", "vectors", "bootstrap"])]
    classifier: Option<PathBuf>,
    /// A new, empty directory or object-store prefix for the rescored
    /// dataset (same layout, own `_manifest.json`; it appears only when
    /// complete); the input is only read.
    #[arg(long)]
    out: String,
    /// Replace the finished dataset at --out (never a job output, a model
    /// or an input); on an object store also one a killed rescore left.
    #[arg(long)]
    overwrite: bool,
    /// Worker threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
}

fn is_remote(url: &str) -> bool {
    paraforge_job::storage::local_path(url).is_none()
}

fn local_path(url: &str) -> PathBuf {
    paraforge_job::storage::local_path(url)
        .unwrap_or(std::path::Path::new(url))
        .to_path_buf()
}

fn parse_bootstrap(s: &str) -> Result<paraforge_trainer::Kind, String> {
    s.parse::<paraforge_trainer::Kind>()
        .map_err(|_| format!("{s:?}: trigram, word or word,trigram"))
}

/// Says when each fold's model starts training.
pub(crate) fn announce(f: paraforge_core::folds::Fold, e: paraforge_trainer::Event) {
    if let paraforge_trainer::Event::Started {
        pairs_per_epoch,
        epochs,
    } = e
    {
        eprintln!("bootstrap scorer, {f}: {epochs} epochs on {pairs_per_epoch} pairs");
    }
}

pub fn rescore(a: RescoreArgs) -> Result<()> {
    use paraforge_rescore::{self as rescore, ScorerPath};
    let staged = Staging::new(&a.data, &a.out, a.overwrite, "rescore")?;
    crate::threads(a.threads)?;
    if let Some(m) = &a.model {
        let language = paraforge_core::dataset::trace(&staged.input).reference_language();
        paraforge_core::layout::card::check_language(
            m,
            language.as_deref(),
            "its manifest's languages",
        )
        .map_err(anyhow::Error::msg)?;
    }
    let scorer = match (&a.model, &a.vectors) {
        (Some(m), None) => Some(ScorerPath::Model(m)),
        (None, Some(v)) => Some(ScorerPath::Vectors(v)),
        (None, None) if a.classifier.is_some() || a.bootstrap.is_some() => None,
        _ => anyhow::bail!("give --model, --vectors or --bootstrap, and/or --classifier"),
    };
    let classifier = a
        .classifier
        .as_deref()
        .map(crate::classify::load)
        .transpose()?;
    let class_file = a
        .classifier
        .as_ref()
        .map(|d| d.join(paraforge_encoders::classifier::WEIGHTS));
    let bar = indicatif::ProgressBar::new(0).with_style(
        indicatif::ProgressStyle::with_template(
            "rescoring {bar:30} {human_pos}/{human_len} pairs ({per_sec}, eta {eta})",
        )
        .expect("valid template"),
    );
    let name = scorer
        .map(|s| s.file().display().to_string())
        .into_iter()
        .chain(
            a.bootstrap
                .map(|_| format!("{} cross-fitted models", a.folds)),
        )
        .chain(a.classifier.as_ref().map(|c| c.display().to_string()))
        .collect::<Vec<_>>()
        .join(" and ");
    let class = classifier
        .as_ref()
        .zip(class_file.as_deref())
        .map(|(c, file)| rescore::Classifier { scorer: c, file });
    let progress = |p| match p {
        rescore::Progress::Total(n) => bar.set_length(n),
        rescore::Progress::Done(n) => bar.inc(n),
    };
    let input_name = staged.remote_in.then_some(a.data.as_str());
    let m = match a.bootstrap {
        Some(kind) => {
            let b = rescore::bootstrap::Bootstrap {
                kind,
                folds: a.folds,
                epochs: a.bootstrap_epochs,
                seed: 1,
            };
            let t = rescore::bootstrap::Target {
                out: &staged.out,
                input_name,
                classifier: class,
                overwrite: a.overwrite,
            };
            rescore::bootstrap::score(&staged.input, &b, t, &mut announce, &progress)
        }
        None => rescore::run(
            &staged.input,
            scorer,
            class,
            &staged.out,
            input_name,
            a.overwrite,
            &progress,
        ),
    }
    .with_context(|| format!("rescoring {} with {name}", a.data))?;
    bar.finish_and_clear();
    staged.upload(&a.out)?;
    // A mean over no scores is none, not 0.000 (a language without a
    // scorer had only nulls).
    let mean = |v: Option<f64>| v.map_or_else(|| "none".to_string(), |v| format!("{v:.3}"));
    println!(
        "{} pairs in {} files rescored with {name}; mean para_score {} -> {}",
        m.rows,
        m.files.len(),
        mean(m.mean_before),
        mean(m.mean_after)
    );
    if let Some(p) = m.mean_reference_probability {
        println!("  mean reference_probability {p:.3}");
    }
    println!("  para_range        before      after");
    let labels = bins::PARA_RANGES.iter().map(|r| r.2);
    for label in labels.chain(["none"]) {
        let before = m.ranges_before.get(label).copied().unwrap_or(0);
        let after = m.ranges_after.get(label).copied().unwrap_or(0);
        println!("  {label:<12} {before:>11} {after:>10}");
    }
    println!("written to {} (see _manifest.json)", a.out);
    Ok(())
}

#[derive(clap::Args)]
pub struct LexiconArgs {
    /// A finished corpus: a local directory or an object-store URL (`s3://`,
    /// `gs://`) of a job's output, a filter, a rescore or one bin.
    #[arg(long)]
    data: String,
    /// A new directory or object-store prefix for the lexicon
    /// (lexicon.parquet, README.md, _manifest.json; it appears only when complete).
    #[arg(long)]
    out: String,
    /// Leave out pairs below this para_score (Wieting and Gimpel, 2018: 0.35).
    #[arg(long, default_value_t = 0.35)]
    min_para_score: f32,
    /// Leave out pairs with a side longer than this many tokens.
    #[arg(long, default_value_t = 30)]
    max_tokens: usize,
    /// Write only word pairs seen at least this many times across sentences
    /// (pairs seen once or twice are mostly chance: docs/replication.md).
    #[arg(long, default_value_t = 3)]
    min_count: u64,
    /// Words in fewer sentences take no part in pairs.
    #[arg(long, default_value_t = 1)]
    min_word_sentences: u64,
    /// Pseudo-count added to within-sentence co-occurrences.
    #[arg(long, default_value_t = 1.0)]
    smoothing: f64,
    /// Memory the pair counts may take before they spill to disk (TMPDIR).
    #[arg(long, default_value_t = 2048, value_parser = clap::value_parser!(u64).range(16..=1 << 24))]
    memory_mb: u64,
    /// Replace a finished lexicon at --out.
    #[arg(long)]
    overwrite: bool,
}

pub fn lexicon(a: LexiconArgs) -> Result<()> {
    use paraforge_dataset::lexicon::{self, LexiconOptions, Progress};
    let mut o = LexiconOptions {
        min_para_score: a.min_para_score,
        max_tokens: a.max_tokens,
        min_count: a.min_count,
        min_word_sentences: a.min_word_sentences,
        smoothing: a.smoothing,
        memory: a.memory_mb << 20,
        overwrite: a.overwrite,
        ..LexiconOptions::new(PathBuf::new(), PathBuf::new())
    };
    // Checked before a remote input is downloaded or an output claimed.
    o.check()?;
    let staged = Staging::new(&a.data, &a.out, a.overwrite, "lexicon")?;
    (o.input, o.output) = (staged.input.clone(), staged.out.clone());
    let style = |pass: &str| {
        indicatif::ProgressStyle::with_template(&format!(
            "{pass} {{bar:30}} {{human_pos}}/{{human_len}} pairs ({{per_sec}}, eta {{eta}})"
        ))
        .expect("valid template")
    };
    let bar = indicatif::ProgressBar::new(0).with_style(style("words "));
    let m = lexicon::run(&o, &|p| match p {
        Progress::Total(n) => bar.set_length(n),
        Progress::Done(n) => bar.inc(n),
        Progress::Counting => {
            bar.set_position(0);
            bar.set_style(style("pairs "));
        }
    })
    .with_context(|| format!("building a lexicon from {}", a.data))?;
    bar.finish_and_clear();
    staged.upload(&a.out)?;
    println!(
        "{} of {} pairs counted ({} below para_score {}, {} outside 1 to {} tokens)",
        m.kept_rows,
        m.input_rows,
        m.dropped_score,
        a.min_para_score,
        m.dropped_length,
        a.max_tokens
    );
    println!(
        "{} words; {} word pairs, {} written (count >= {}); {} spills",
        m.words, m.word_pairs, m.written, a.min_count, m.spills
    );
    println!("written to {} (see README.md)", a.out);
    Ok(())
}

/// A command's input and output, either of which may be on an object
/// store: a remote input is downloaded to a staging directory (checksums
/// checked against its manifest) and read there; a remote output is claimed
/// first, written locally and uploaded with its manifest last
/// ([`Staging::upload`]).
struct Staging {
    _dir: Option<tempfile::TempDir>,
    rt: Option<tokio::runtime::Runtime>,
    /// Where the command reads and writes.
    input: PathBuf,
    out: PathBuf,
    remote_in: bool,
    remote_out: bool,
}

impl Staging {
    fn new(data: &str, out: &str, overwrite: bool, command: &str) -> Result<Staging> {
        let (remote_in, remote_out) = (is_remote(data), is_remote(out));
        if remote_in && remote_out {
            let (d, o) = (data.trim_end_matches('/'), out.trim_end_matches('/'));
            anyhow::ensure!(
                o != d && !o.starts_with(&format!("{d}/")),
                "{out}: the output must not be the input or lie inside it ({data})"
            );
        }
        let dir = (remote_in || remote_out)
            .then(tempfile::tempdir)
            .transpose()
            .context("creating a staging directory")?;
        let rt = (remote_in || remote_out)
            .then(|| {
                tokio::runtime::Builder::new_multi_thread()
                    .enable_all()
                    .build()
            })
            .transpose()
            .context("starting the async runtime")?;
        let input = match (&dir, &rt) {
            (Some(dir), Some(rt)) if remote_in => {
                let local = dir.path().join("input");
                let n = rt.block_on(stage_dataset(data, &local))?;
                eprintln!("staged {n} files of {data}");
                local
            }
            _ => local_path(data),
        };
        let out = match (&dir, &rt) {
            (Some(dir), Some(rt)) if remote_out => {
                rt.block_on(claim_remote(out, overwrite, command))?;
                dir.path().join("output")
            }
            _ => local_path(out),
        };
        Ok(Staging {
            _dir: dir,
            rt,
            input,
            out,
            remote_in,
            remote_out,
        })
    }

    /// Uploads the finished output to `url` where it is remote.
    fn upload(&self, url: &str) -> Result<()> {
        if let (true, Some(rt)) = (self.remote_out, &self.rt) {
            let n = rt.block_on(upload_dataset(&self.out, url))?;
            eprintln!("uploaded {n} files to {url}");
        }
        Ok(())
    }
}

/// Downloads a finished dataset on an object store to `local`: the files
/// its `_manifest.json` lists (each checked against the manifest's
/// SHA-256), the manifest and `_SUCCESS`, so that the local copy is read
/// and verified as any local dataset is. A prefix without both (a job or
/// command that did not finish, or no dataset) is refused.
async fn stage_dataset(url: &str, local: &std::path::Path) -> Result<usize> {
    use paraforge_core::layout::{ManifestHead, CLAIM_FILE, MANIFEST_FILE, SUCCESS_FILE};
    let store = paraforge_job::storage::Storage::open(url)?;
    let listed: Vec<String> = store
        .list("")
        .await
        .with_context(|| format!("listing {url}"))?
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    anyhow::ensure!(!listed.is_empty(), "{url}: no objects (not a dataset)");
    let has = |f: &str| listed.iter().any(|p| p == f);
    anyhow::ensure!(
        has(SUCCESS_FILE) || !has(CLAIM_FILE),
        "{url}: a paraforge job output without {SUCCESS_FILE}: the job is incomplete"
    );
    anyhow::ensure!(
        has(MANIFEST_FILE) && has(SUCCESS_FILE),
        "{url}: no {MANIFEST_FILE} and {SUCCESS_FILE}: not a finished paraforge dataset (every command writes them last)"
    );
    let bytes = store.get(MANIFEST_FILE).await?;
    let head =
        ManifestHead::parse(&bytes).map_err(|e| anyhow::anyhow!("{url}/{MANIFEST_FILE}: {e}"))?;
    anyhow::ensure!(
        !head.is_bins(),
        "{url}: a bins output holds several datasets: name one of them (e.g. {url}/train)"
    );
    let mut want: Vec<(String, Option<String>)> = Vec::new();
    for f in head.files {
        let sha = f.sha256.filter(|s| !s.is_empty());
        anyhow::ensure!(
            sha.is_some(),
            "{url}/{MANIFEST_FILE}: lists no SHA-256 for {}: it cannot be verified",
            f.path
        );
        want.push((f.path, sha));
    }
    want.push((MANIFEST_FILE.into(), None));
    want.push((SUCCESS_FILE.into(), None));
    Ok(store.download_checked(&want, local, || {}).await?)
}

/// Claims an object-store prefix for a new dataset: `_writer.json` put if
/// absent, so that a second rescore into it is refused. A prefix holding a
/// finished command dataset, or what a killed rescore left (its claim and
/// no `_SUCCESS`), is cleared first with `--overwrite` (`_SUCCESS` and the
/// manifest first, so no reader takes it as finished meanwhile); anything
/// else is refused.
async fn claim_remote(url: &str, overwrite: bool, command: &str) -> Result<()> {
    use paraforge_core::layout::{
        ManifestHead, ManifestKind, CLAIM_FILE, MANIFEST_FILE, SUCCESS_FILE,
    };
    const WRITER: &str = "_writer.json";
    let store = paraforge_job::storage::Storage::open(url)?;
    let listed = store
        .list("")
        .await
        .with_context(|| format!("listing {url}"))?;
    if !listed.is_empty() {
        let has = |f: &str| listed.iter().any(|(p, _)| p == f);
        anyhow::ensure!(
            !has(CLAIM_FILE),
            "{url}: holds a job's output, which no command writes over; choose another prefix"
        );
        let finished = has(SUCCESS_FILE)
            && match store.get(MANIFEST_FILE).await {
                Ok(b) => ManifestHead::parse(&b)
                    .is_ok_and(|h| h.kind.is_some_and(|k| k != ManifestKind::Job) || h.is_bins()),
                Err(_) => false,
            };
        let what = if finished {
            "a finished dataset"
        } else if has(WRITER) {
            "what a command that did not finish wrote (or one running now)"
        } else {
            anyhow::bail!(
                "{url}: holds {} objects that are not a paraforge dataset; choose a new prefix",
                listed.len()
            )
        };
        anyhow::ensure!(
            overwrite,
            "{url}: holds {what}; choose a new prefix, or give --overwrite to replace it"
        );
        for f in [SUCCESS_FILE, MANIFEST_FILE] {
            if has(f) {
                store.delete(f).await?;
            }
        }
        for (p, _) in &listed {
            if p != SUCCESS_FILE && p != MANIFEST_FILE {
                store.delete(p).await?;
            }
        }
    }
    let who = format!("paraforge {command}, pid {}", std::process::id());
    anyhow::ensure!(
        store.put_if_absent(WRITER, who.into()).await?,
        "{url}: another paraforge run claimed it just now; choose another prefix"
    );
    Ok(())
}

/// Uploads a rescored dataset, `_manifest.json` and `_SUCCESS` last (a
/// reader that finds them finds every file listed), then drops the claim.
async fn upload_dataset(dir: &std::path::Path, url: &str) -> Result<usize> {
    let store = paraforge_job::storage::Storage::open(url)?;
    let n = store.upload_dir(dir).await?;
    store.delete("_writer.json").await?;
    Ok(n)
}
