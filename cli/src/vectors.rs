//! `paraforge embed`: a trained encoder (any `train` writes, the
//! transformer scorer, or averaged word vectors) over a text file or a
//! corpus column, to embeddings in `.npy` or Parquet. The vectors are the
//! ones para_score and `eval-sts` compute (the same loader, tokens and
//! batch call), streamed in batches so memory stays bounded whatever the
//! input's size.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use arrow_array::builder::{FixedSizeListBuilder, Float32Builder, StringBuilder};
use arrow_array::{Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use paraforge_core::encoder::{Model, SentenceEncoder};
use paraforge_core::schema::{col, column, PairReader};

#[derive(clap::Args)]
pub struct EmbedArgs {
    /// A trained model: a `.pfe` file, a neural encoder's or a transformer
    /// scorer's directory (what `[scoring] model` takes).
    #[arg(long, conflicts_with = "vectors", required_unless_present = "vectors")]
    model: Option<PathBuf>,
    /// GloVe-format word vectors, averaged (what `[scoring] vectors` takes).
    #[arg(long)]
    vectors: Option<PathBuf>,
    /// Sentences, one per line (UTF-8).
    #[arg(long, conflicts_with = "data", required_unless_present = "data")]
    input: Option<PathBuf>,
    /// A finished paraforge dataset (a job output, a bin, a filter's or
    /// rescore's output), read through its manifest.
    #[arg(long)]
    data: Option<PathBuf>,
    /// The dataset's text column to embed: reference or translation.
    #[arg(long, default_value = "reference", requires = "data")]
    column: String,
    /// Where to write: a `.npy` file (float32, one row per sentence) or a
    /// `.parquet` file (text, and for a dataset id and candidate_rank,
    /// beside an `embedding` list column).
    #[arg(long)]
    out: PathBuf,
    /// Sentences embedded at a time (memory grows with it, not with the input).
    #[arg(long, default_value_t = 4096)]
    batch_size: usize,
    /// Replace an existing --out.
    #[arg(long)]
    overwrite: bool,
    /// Threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
}

/// The largest batch accepted: 1M sentences of a 4,096-d encoder is 16 GiB.
const MAX_BATCH: usize = 1_000_000;
/// The longest line read (a file with no line breaks is not held whole).
const MAX_LINE_BYTES: usize = 1 << 20;
/// A batch is embedded early once its text reaches this much (Arrow's
/// string offsets are i32, and memory follows the text too).
const MAX_BATCH_TEXT: usize = 256 << 20;

#[derive(Clone, Copy, PartialEq)]
enum Format {
    Npy,
    Parquet,
}

/// One sentence and, from a dataset, the row it came from.
struct Item {
    text: String,
    id: Option<String>,
    rank: Option<i32>,
}

pub fn embed(a: EmbedArgs) -> Result<()> {
    let format = match a.out.extension().and_then(|e| e.to_str()) {
        Some("npy") => Format::Npy,
        Some("parquet") => Format::Parquet,
        _ => bail!(
            "--out {}: name a .npy or a .parquet file (the name says the format)",
            a.out.display()
        ),
    };
    if a.batch_size == 0 || a.batch_size > MAX_BATCH {
        bail!("--batch-size {}: from 1 to {MAX_BATCH}", a.batch_size);
    }
    let column = match a.column.as_str() {
        "reference" => col::REFERENCE,
        "translation" => col::TRANSLATION,
        other => bail!("--column {other:?}: reference or translation"),
    };
    let mut inputs: Vec<(&str, &Path)> = Vec::new();
    for (flag, p) in [
        ("--model", &a.model),
        ("--vectors", &a.vectors),
        ("--input", &a.input),
        ("--data", &a.data),
    ] {
        if let Some(p) = p {
            inputs.push((flag, p.as_path()));
        }
    }
    let out = crate::out::Out::claim(
        "--out",
        &a.out,
        crate::out::Artifact::Embeddings,
        &inputs,
        a.overwrite,
    )?;
    crate::threads(a.threads)?;
    let (what, encoder) = encoder_of(a.model.as_deref(), a.vectors.as_deref())?;
    let (source, total) = match (&a.input, &a.data) {
        (Some(p), _) => (Source::text(p)?, count_lines(p)?),
        (_, Some(d)) => {
            let ds = paraforge_core::dataset::open(d)
                .with_context(|| format!("--data {}", d.display()))?;
            (Source::Data(ds.paths(), column), ds.rows())
        }
        _ => unreachable!("clap requires one"),
    };
    if total == 0 {
        bail!("nothing to embed: the input has no sentence");
    }
    let bar = indicatif::ProgressBar::new(total).with_style(
        indicatif::ProgressStyle::with_template(
            "{bar:40} {pos}/{len} sentences {per_sec} eta {eta}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let target = out.path();
    let d = encoder.dim();
    let mut sink = match format {
        Format::Npy => Sink::Npy(npy_writer(&target, total, d)?),
        Format::Parquet => parquet_writer(&target, d, a.data.is_some(), a.batch_size)?,
    };
    let (mut written, mut empty) = (0u64, 0u64);
    let failed_before = encoder.failures();
    let mut embed_batch = |items: Vec<Item>, sink: &mut Sink| -> Result<()> {
        let (vecs, known) = embed_items(encoder.as_ref(), &items);
        empty += known.iter().filter(|k| !**k).count() as u64;
        sink.write(&items, &vecs, &known, d)
            .with_context(|| format!("writing {}", a.out.display()))?;
        written += items.len() as u64;
        bar.inc(items.len() as u64);
        Ok(())
    };
    source.each_batch(a.batch_size, &mut |items| embed_batch(items, &mut sink))?;
    let failed = encoder.failures().saturating_sub(failed_before);
    if failed > 0 {
        bail!("{what}: the encoder failed on {failed} sentences (see the log); nothing written");
    }
    if written != total {
        bail!(
            "read {written} sentences where {total} were counted: the input changed while it was read; nothing written"
        );
    }
    sink.finish()
        .with_context(|| format!("writing {}", a.out.display()))?;
    out.commit()?;
    bar.finish_and_clear();
    println!(
        "{written} sentences embedded ({d} dimensions, {}) into {}{}",
        encoder.short_name(),
        a.out.display(),
        if empty > 0 {
            format!(
                "; {empty} had no token the encoder knows: {}",
                match format {
                    Format::Npy => "their rows are NaN",
                    Format::Parquet => "their embeddings are null",
                }
            )
        } else {
            String::new()
        }
    );
    Ok(())
}

/// The encoder `--model` or `--vectors` names (clap requires one), and how
/// messages name it.
fn encoder_of(
    model: Option<&Path>,
    vectors: Option<&Path>,
) -> Result<(String, Box<dyn SentenceEncoder>)> {
    let what = match (model, vectors) {
        (Some(m), _) => format!("--model {}", m.display()),
        (_, Some(v)) => format!("--vectors {}", v.display()),
        _ => unreachable!("clap requires one"),
    };
    let encoder = paraforge_scorer::load_encoder(model, vectors)
        .with_context(|| what.clone())?
        .expect("a model or vectors is given");
    Ok((what, encoder))
}

/// The embeddings of `items` (`dim` values each) and whether each had one
/// (a sentence with no token the encoder knows has none, as para_score is
/// then null).
fn embed_items(encoder: &dyn SentenceEncoder, items: &[Item]) -> (Vec<f32>, Vec<bool>) {
    let texts: Vec<&str> = items.iter().map(|i| i.text.as_str()).collect();
    paraforge_core::encoder::embed_texts(encoder, &texts)
}

enum Source {
    Text(PathBuf),
    Data(Vec<PathBuf>, &'static str),
}

impl Source {
    fn text(p: &Path) -> Result<Source> {
        if !p.is_file() {
            bail!("--input {}: not a file", p.display());
        }
        Ok(Source::Text(p.to_path_buf()))
    }

    /// Calls `f` with at most `n` items at a time, in input order.
    fn each_batch(&self, n: usize, f: &mut dyn FnMut(Vec<Item>) -> Result<()>) -> Result<()> {
        let mut batch = Vec::with_capacity(n);
        let mut text_bytes = 0usize;
        match self {
            Source::Text(p) => {
                let mut r = BufReader::new(
                    File::open(p).with_context(|| format!("--input {}", p.display()))?,
                );
                let mut i = 0;
                while let Some(bytes) = read_line(&mut r, p, i + 1)? {
                    i += 1;
                    let mut text = String::from_utf8(bytes).map_err(|_| {
                        anyhow::anyhow!("--input {} line {i}: not UTF-8 text", p.display())
                    })?;
                    if text.ends_with('\r') {
                        text.pop();
                    }
                    text_bytes += text.len();
                    batch.push(Item {
                        text,
                        id: None,
                        rank: None,
                    });
                    if batch.len() == n || text_bytes >= MAX_BATCH_TEXT {
                        f(std::mem::replace(&mut batch, Vec::with_capacity(n)))?;
                        text_bytes = 0;
                    }
                }
            }
            Source::Data(files, text_column) => {
                for path in files {
                    let reader =
                        PairReader::open(path, &[col::ID, col::CANDIDATE_RANK, text_column])?;
                    for b in reader {
                        let b = b?;
                        let ids = column::<StringArray>(&b, col::ID, path)?;
                        let ranks =
                            column::<arrow_array::Int32Array>(&b, col::CANDIDATE_RANK, path)?;
                        let texts = column::<StringArray>(&b, text_column, path)?;
                        for i in 0..b.num_rows() {
                            text_bytes += texts.value(i).len();
                            batch.push(Item {
                                text: texts.value(i).to_string(),
                                id: Some(ids.value(i).to_string()),
                                rank: Some(ranks.value(i)),
                            });
                            if batch.len() == n || text_bytes >= MAX_BATCH_TEXT {
                                f(std::mem::replace(&mut batch, Vec::with_capacity(n)))?;
                                text_bytes = 0;
                            }
                        }
                    }
                }
            }
        }
        if !batch.is_empty() {
            f(batch)?;
        }
        Ok(())
    }
}

/// One line without its `\n`, at most [`MAX_LINE_BYTES`]; None at the end.
fn read_line(r: &mut impl BufRead, p: &Path, number: u64) -> Result<Option<Vec<u8>>> {
    let mut buf = Vec::new();
    let got = std::io::Read::take(&mut *r, MAX_LINE_BYTES as u64 + 1)
        .read_until(b'\n', &mut buf)
        .with_context(|| format!("--input {}", p.display()))?;
    if got == 0 {
        return Ok(None);
    }
    if buf.last() == Some(&b'\n') {
        buf.pop();
    } else if buf.len() > MAX_LINE_BYTES {
        bail!(
            "--input {} line {number}: longer than {MAX_LINE_BYTES} bytes (one sentence per line)",
            p.display()
        );
    }
    Ok(Some(buf))
}

fn count_lines(p: &Path) -> Result<u64> {
    let mut r = BufReader::new(File::open(p).with_context(|| format!("--input {}", p.display()))?);
    let mut n = 0u64;
    while read_line(&mut r, p, n + 1)?.is_some() {
        n += 1;
    }
    Ok(n)
}

enum Sink {
    Npy(npyz::NpyWriter<f32, BufWriter<File>>),
    /// The writer, its schema, and whether rows carry `id` and
    /// `candidate_rank` (a dataset's).
    Parquet(Box<parquet::arrow::ArrowWriter<File>>, Arc<Schema>, bool),
}

fn npy_writer(path: &Path, rows: u64, d: usize) -> Result<npyz::NpyWriter<f32, BufWriter<File>>> {
    use npyz::WriterBuilder;
    let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    Ok(npyz::WriteOptions::new()
        .default_dtype()
        .shape(&[rows, d as u64])
        .writer(BufWriter::new(file))
        .begin_nd()?)
}

fn parquet_writer(path: &Path, d: usize, rows_of_a_dataset: bool, batch: usize) -> Result<Sink> {
    let mut fields = Vec::new();
    if rows_of_a_dataset {
        fields.push(Field::new(col::ID, DataType::Utf8, false));
        fields.push(Field::new(col::CANDIDATE_RANK, DataType::Int32, false));
    }
    fields.push(Field::new("text", DataType::Utf8, false));
    fields.push(Field::new(
        "embedding",
        DataType::FixedSizeList(
            Arc::new(Field::new("item", DataType::Float32, false)),
            d as i32,
        ),
        true,
    ));
    let schema = Arc::new(Schema::new(fields));
    let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    // Row groups of at most 128 MiB: the writer holds one, not a million
    // rows of vectors (its default), and a long input does not make a
    // footer of countless small ones.
    let props = parquet::file::properties::WriterProperties::builder()
        .set_compression(parquet::basic::Compression::ZSTD(Default::default()))
        .set_max_row_group_row_count(Some(batch.max(65_536)))
        .set_max_row_group_bytes(Some(128 << 20))
        .build();
    let w = parquet::arrow::ArrowWriter::try_new(file, schema.clone(), Some(props))?;
    Ok(Sink::Parquet(Box::new(w), schema, rows_of_a_dataset))
}

impl Sink {
    fn write(&mut self, items: &[Item], vecs: &[f32], known: &[bool], d: usize) -> Result<()> {
        match self {
            Sink::Npy(w) => {
                for v in vecs {
                    w.push(v)?;
                }
                Ok(())
            }
            Sink::Parquet(w, schema, with_rows) => {
                let mut cols: Vec<Arc<dyn Array>> = Vec::new();
                if *with_rows {
                    let mut ids = StringBuilder::new();
                    let mut ranks = arrow_array::builder::Int32Builder::new();
                    for i in items {
                        ids.append_value(i.id.as_deref().unwrap_or_default());
                        ranks.append_value(i.rank.unwrap_or_default());
                    }
                    cols.push(Arc::new(ids.finish()));
                    cols.push(Arc::new(ranks.finish()));
                }
                let mut texts = StringBuilder::new();
                for i in items {
                    texts.append_value(&i.text);
                }
                cols.push(Arc::new(texts.finish()));
                let mut list = FixedSizeListBuilder::new(Float32Builder::new(), d as i32)
                    .with_field(Arc::new(Field::new("item", DataType::Float32, false)));
                for (k, v) in known.iter().zip(vecs.chunks(d.max(1))) {
                    list.values().append_slice(v);
                    list.append(*k);
                }
                cols.push(Arc::new(list.finish()));
                w.write(&RecordBatch::try_new(schema.clone(), cols)?)?;
                Ok(())
            }
        }
    }

    fn finish(self) -> Result<()> {
        match self {
            // Checks that as many rows came as the header promised.
            Sink::Npy(w) => w.finish()?,
            Sink::Parquet(w, _, _) => {
                w.close()?;
            }
        }
        Ok(())
    }
}

#[derive(clap::Args)]
pub struct EvalTransferArgs {
    /// A trained model: a `.pfe` file, a neural encoder's or a transformer
    /// scorer's directory.
    #[arg(long, conflicts_with = "vectors", required_unless_present = "vectors")]
    model: Option<PathBuf>,
    /// GloVe-format word vectors, averaged.
    #[arg(long)]
    vectors: Option<PathBuf>,
    /// A directory holding the tasks' files (any subset): rt-polarity.all,
    /// custrev.all, subj.all, mpqa.all, stsa.binary.{train,dev,test},
    /// TREC.{train,test}.all, msr_paraphrase_{train,test}.txt,
    /// SICK_{train,trial,test_annotated}.txt. SICK ships in data/sts/sick2014.
    #[arg(long, default_value = paraforge_eval::bundled::SICK)]
    tasks: PathBuf,
    /// Folds of the cross-validated tasks (MR, CR, SUBJ, MPQA).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(2..=100))]
    folds: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Write the results as JSON here (with --fine-tune, an object of
    /// "logistic_regression" and "supervised" results).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Replace an existing --json (a JSON result; anything else is refused
    /// even so).
    #[arg(long)]
    overwrite: bool,
    /// Also train the encoder itself on SICK-R and SICK-E, as Wieting et
    /// al. (2016) do (Table 5): an averaging model's tables (a `.pfe` or
    /// --vectors) with a sigmoid layer over [u * v, |u - v|], the best
    /// epoch on SICK's trial split, against the same network with the
    /// tables frozen.
    #[arg(long)]
    fine_tune: bool,
    /// Epochs of --fine-tune.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=200))]
    fine_tune_epochs: u64,
}

/// The averaging model `--fine-tune --model` trains: a `.pfe`.
fn averaging_model(model: &Path) -> Result<Model> {
    Model::load(model).with_context(|| {
        format!(
            "--fine-tune trains averaging models (a .pfe file or --vectors); --model {} is not one",
            model.display()
        )
    })
}

/// `--vectors` as the WORD model `--fine-tune` trains: their words and a
/// zero row for unknown words.
fn word_model(vec: &paraforge_core::Vectors) -> Result<Model> {
    let dim = vec.dim();
    let words: Vec<String> = (0..vec.len()).map(|i| vec.word(i).to_string()).collect();
    let mut w = Vec::with_capacity((words.len() + 1) * dim);
    for i in 0..vec.len() {
        w.extend_from_slice(vec.row(i));
    }
    w.extend(std::iter::repeat_n(0.0, dim));
    Ok(Model::from_tables(
        paraforge_core::encoder::Kind::Word,
        words,
        dim,
        w,
        Vec::new(),
        0,
        Vec::new(),
    )?)
}

/// `paraforge eval-transfer`: frozen embeddings as the features of a
/// classifier per task (paraforge_eval::transfer).
pub fn eval_transfer(mut a: EvalTransferArgs) -> Result<()> {
    use paraforge_eval::transfer::{self, TransferOptions};
    a.tasks = paraforge_eval::bundled::locate(&a.tasks, "--tasks")?;
    let mut inputs = vec![("--tasks", a.tasks.as_path())];
    inputs.extend(a.model.iter().map(|p| ("--model", p.as_path())));
    inputs.extend(a.vectors.iter().map(|p| ("--vectors", p.as_path())));
    let json = crate::out::Out::claim_opt(
        "--json",
        a.json.as_deref(),
        crate::out::Artifact::Json,
        &inputs,
        a.overwrite,
    )?;
    crate::threads(a.threads)?;
    let (tasks, absent) =
        transfer::load(&a.tasks).with_context(|| format!("--tasks {}", a.tasks.display()))?;
    if tasks.is_empty() {
        bail!(
            "--tasks {}: no task's files are there (see --help for their names)",
            a.tasks.display()
        );
    }
    // --fine-tune's inputs are checked before the frozen runs take their time.
    if a.fine_tune
        && !tasks
            .iter()
            .any(|t| t.name == "SICK-R" || t.name == "SICK-E")
    {
        bail!(
            "--fine-tune: no SICK task under --tasks {} (SICK_train.txt, SICK_trial.txt, SICK_test_annotated.txt)",
            a.tasks.display()
        );
    }
    // Vectors are read once, for the frozen runs and the model --fine-tune
    // trains alike (GloVe 840B is 5.6 GB of text).
    let (what, encoder, fine_model) = match (a.fine_tune, a.model.as_deref(), a.vectors.as_deref())
    {
        (true, None, Some(v)) => {
            let what = format!("--vectors {}", v.display());
            let (vec, _) = paraforge_core::Vectors::load(v).with_context(|| what.clone())?;
            let model = word_model(&vec)?;
            (what, Box::new(vec) as Box<dyn SentenceEncoder>, Some(model))
        }
        (fine, model, vectors) => {
            let (what, encoder) = encoder_of(model, vectors)?;
            let fine_model = match (fine, model) {
                (true, Some(m)) => Some(averaging_model(m)?),
                _ => None,
            };
            (what, encoder, fine_model)
        }
    };
    let o = TransferOptions {
        folds: a.folds as usize,
        seed: a.seed,
        ..TransferOptions::default()
    };
    let failed_before = encoder.failures();
    let embed = |sentences: &[&str]| -> Vec<Option<Vec<f32>>> {
        let items: Vec<Item> = sentences
            .iter()
            .map(|s| Item {
                text: s.to_string(),
                id: None,
                rank: None,
            })
            .collect();
        let (flat, known) = embed_items(encoder.as_ref(), &items);
        let d = encoder.dim();
        known
            .iter()
            .enumerate()
            .map(|(i, k)| k.then(|| flat[i * d..(i + 1) * d].to_vec()))
            .collect()
    };
    let bar = indicatif::ProgressBar::new(tasks.len() as u64).with_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} tasks {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut results = Vec::new();
    for t in &tasks {
        bar.set_message(t.name);
        let r = transfer::evaluate(t, &embed, &o).with_context(|| what.clone())?;
        bar.inc(1);
        results.push(r);
    }
    bar.finish_and_clear();
    let failed = encoder.failures().saturating_sub(failed_before);
    if failed > 0 {
        bail!("{what}: the encoder failed on {failed} sentences (see the log)");
    }
    print_frozen(&what, encoder.short_name(), &results);
    if !absent.is_empty() {
        println!("\nnot under {}: {}", a.tasks.display(), absent.join(", "));
    }
    let supervised = match (a.fine_tune, fine_model.as_ref()) {
        (true, Some(model)) => fine_tune(&a, model, &tasks, &what)?,
        _ => Vec::new(),
    };
    if let Some(j) = json {
        let out = if a.fine_tune {
            serde_json::json!({"logistic_regression": results, "supervised": supervised})
        } else {
            serde_json::to_value(&results)?
        };
        j.write_all(serde_json::to_string_pretty(&out)?.as_bytes())?;
    }
    Ok(())
}

/// The frozen embeddings' results as a Markdown table.
fn print_frozen(what: &str, short_name: String, results: &[paraforge_eval::transfer::TaskResult]) {
    use paraforge_eval::transfer;
    println!("\n{what} ({short_name}), frozen embeddings, logistic regression\n");
    println!("| task | metric | score | train | test | unembedded |");
    println!("|---|---|---:|---:|---:|---:|");
    for r in results {
        let score = match r.f1 {
            Some(f1) => format!("{:.1} / {f1:.1}", r.score),
            None => format!("{:.1}", r.score),
        };
        let metric = match r.metric {
            transfer::Metric::Accuracy => "accuracy",
            transfer::Metric::AccuracyF1 => "accuracy / F1",
            transfer::Metric::Pearson => "Pearson",
        };
        println!(
            "| {} | {metric} | {score} | {} | {} | {} |",
            r.task, r.train, r.test, r.unembedded
        );
    }
}

/// `--fine-tune`: the averaging model trained on SICK-R and SICK-E, and the
/// same network with its tables frozen.
fn fine_tune(
    a: &EvalTransferArgs,
    model: &paraforge_core::Model,
    tasks: &[paraforge_eval::transfer::Task],
    what: &str,
) -> Result<Vec<paraforge_eval::sick_tune::TuneResult>> {
    use paraforge_eval::sick_tune::{self, TuneOptions};
    let mut supervised = Vec::new();
    {
        let sick: Vec<_> = tasks
            .iter()
            .filter(|t| t.name == "SICK-R" || t.name == "SICK-E")
            .collect();
        let bar = indicatif::ProgressBar::new(2 * sick.len() as u64).with_style(
            indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} supervised runs {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        for t in sick {
            for freeze in [false, true] {
                bar.set_message(format!(
                    "{}{}",
                    t.name,
                    if freeze { ", frozen" } else { "" }
                ));
                let o = TuneOptions {
                    epochs: a.fine_tune_epochs as usize,
                    freeze_tables: freeze,
                    seed: a.seed,
                    ..TuneOptions::default()
                };
                supervised.push(sick_tune::tune(model, t, &o).with_context(|| what.to_string())?);
                bar.inc(1);
            }
        }
        bar.finish_and_clear();
        println!(
            "\nsupervised (Wieting et al., 2016, Table 5): sigmoid layer over [u * v, |u - v|], {} epochs, best on the trial split\n",
            a.fine_tune_epochs
        );
        println!("| task | metric | tables | test | trial | epoch |");
        println!("|---|---|---|---:|---:|---:|");
        for r in &supervised {
            println!(
                "| {} | {} | {} | {:.1} | {:.1} | {} |",
                r.task,
                r.metric,
                if r.frozen_tables { "frozen" } else { "trained" },
                r.test,
                r.dev,
                r.best_epoch
            );
        }
    }
    Ok(supervised)
}
