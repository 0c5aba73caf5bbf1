//! `paraforge`: the one binary users run.

mod bootstrap;
mod classify;
mod dataset;
mod embed;
mod export;
mod lm;
mod out;
mod paraphrase;
mod parse;
mod pipeline;
mod specificity;
mod translate;
mod vectors;

#[cfg(test)]
mod output_rule_tests;

use anyhow::Result;
use clap::{Parser, Subcommand};

/// mimalloc rather than glibc's malloc: training allocates and frees
/// megabyte tensors every step (burn's dense embedding gradient, the LSTM
/// op's buffers), which glibc hands back to the kernel and faults in again.
/// Built with `no_thp`: mimalloc otherwise asks for transparent huge pages,
/// and each page it hands back and faults in again is then a 2 MiB clear,
/// which made LSTM training's speed depend on the host's memory state. The
/// measurements: docs/bench/HISTORY.md, "Training speed".
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "paraforge",
    version,
    about = "Build ParaNMT-style paraphrase corpora by back-translation"
)]
struct Cli {
    /// Log filter (tracing env-filter syntax), e.g. `info` or `paraforge=debug`.
    #[arg(long, global = true, env = "PARAFORGE_LOG", default_value = "warn")]
    log: String,
    /// Log as JSON lines instead of text.
    #[arg(long, global = true)]
    log_json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Translate sentences (one per line) with a MarianMT ONNX model.
    Translate(translate::Args),
    /// Run a whole job on this machine: a coordinator and local workers.
    Run(pipeline::RunArgs),
    /// Plan a job without running it: its inputs' fingerprints, shards and,
    /// with `[filters] dedup_sources`, the repeated sources (writes nothing).
    Plan(pipeline::PlanArgs),
    /// Serve a job's shards to workers (gRPC), with metrics over HTTP.
    Coordinator(pipeline::CoordinatorArgs),
    /// Lease shards from a coordinator and process them until the job is done.
    Worker(pipeline::WorkerArgs),
    /// Print a running job's progress.
    Status(pipeline::StatusArgs),
    /// Cut scored pairs into para_score ranges, deciles and the training sample.
    Bin(dataset::BinArgs),
    /// Keep the pairs within bounds on score columns and lengths, as a new dataset.
    Filter(dataset::FilterArgs),
    /// Statistics and figures of a scored corpus (Markdown, HTML, SVG).
    Report(dataset::ReportArgs),
    /// Train an n-gram language model (ARPA) for the translation_perplexity column.
    LmTrain(lm::LmTrainArgs),
    /// Recompute para_score and/or P(reference) of a dataset (no new translation).
    Rescore(dataset::RescoreArgs),
    /// Word paraphrases from a finished corpus: cross-sentence and adjusted PMI.
    Lexicon(dataset::LexiconArgs),
    /// Train a reference/translation classifier (Wieting et al., 2017) for `rescore --classifier`.
    TrainClassifier(classify::TrainClassifierArgs),
    /// Train paraphrastic sentence embeddings (WORD, TRIGRAM, WORD,TRIGRAM) on binned pairs.
    Train(Box<embed::TrainArgs>),
    /// Pearson and Spearman correlations on STS 2012-2016, STS Benchmark and SICK-R.
    EvalSts(embed::EvalArgs),
    /// Write a trained WORD model's embeddings as GloVe-format vectors for para_score.
    ExportVectors(embed::ExportArgs),
    /// Paraphrase English sentences with a paraphraser (models/paraphrase-en):
    /// `translate`'s engine and options on an English-to-English model.
    Paraphrase(translate::Args),
    /// A paraphraser on held-out corpus pairs against copying the input:
    /// BLEU against the reference paraphrase, overlap and para_score with the input.
    EvalParaphrase(paraphrase::EvalParaphraseArgs),
    /// Write a trained encoder in another library's format: a
    /// sentence-transformers model directory (`.pfe` models and word
    /// vectors) or GloVe text (a model's word table).
    #[command(long_about = export::LONG_ABOUT)]
    Export(export::ExportArgs),
    /// Spearman correlations of word vectors (or a model's word table) on
    /// SimLex-999 and WordSim-353.
    EvalWords(embed::EvalWordsArgs),
    /// Frozen embeddings as classifier features on the SentEval tasks
    /// whose files are at hand (SICK-E and SICK-R ship); with --fine-tune,
    /// an averaging model trained on SICK itself (Wieting et al., 2016).
    EvalTransfer(vectors::EvalTransferArgs),
    /// Sentence specificity (Chen and Gimpel, 2020, Table 2): a model's
    /// norms or a Gaussian encoder's entropies against human judgements,
    /// and the baselines that need no other model.
    EvalSpecificity(specificity::EvalSpecificityArgs),
    /// Sentence embeddings of a text file or a corpus column (.npy or Parquet)
    /// from a trained encoder, the transformer scorer or word vectors.
    Embed(vectors::EmbedArgs),
    /// English sentences' constituent trees (Link Grammar), as `tree-rnn`
    /// reads them, or their templates (`--template 2`).
    Parse(parse::ParseArgs),
}

/// The commands whose result is what they print end quietly when their
/// reader goes away (`paraforge eval-sts ... | head -1`), as other Unix
/// tools do, by the default SIGPIPE action: Rust's runtime sets it to
/// "ignore", which made a closed pipe a panic in `println!`. A command
/// killed so exits by signal, never with success. Every other command
/// keeps it ignored: a closed log pipe (`2>&1 | tee`) must not end a job,
/// a training run or a translation to a file, whose writes report their
/// own errors.
fn default_sigpipe(command: &Command) {
    let prints_result = matches!(
        command,
        Command::EvalSts(_)
            | Command::EvalWords(_)
            | Command::EvalTransfer(_)
            | Command::EvalSpecificity(_)
            | Command::EvalParaphrase(_)
            | Command::Plan(_)
            | Command::Status(_)
            | Command::Parse(_)
    );
    #[cfg(unix)]
    if prints_result {
        // SAFETY: setting a signal's disposition to its default, before any
        // thread is started, touches no memory of this process.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
}

fn main() {
    let cli = Cli::parse();
    default_sigpipe(&cli.command);
    init_logging(&cli.log, cli.log_json);
    if let Err(e) = dispatch(cli.command) {
        eprintln!("paraforge: error: {}", error_text(&e));
        std::process::exit(1);
    }
}

/// Runs one command.
fn dispatch(command: Command) -> Result<()> {
    match command {
        Command::Translate(a) => translate::run(a),
        Command::Run(a) => pipeline::run(a),
        Command::Plan(a) => pipeline::plan(a),
        Command::Coordinator(a) => pipeline::coordinator(a),
        Command::Worker(a) => pipeline::worker(a),
        Command::Status(a) => pipeline::status(a),
        Command::Bin(a) => dataset::bin(a),
        Command::Filter(a) => dataset::filter(a),
        Command::Report(a) => dataset::report(a),
        Command::Rescore(a) => dataset::rescore(a),
        Command::Lexicon(a) => dataset::lexicon(a),
        Command::TrainClassifier(a) => classify::train(a),
        Command::LmTrain(a) => lm::train(a),
        Command::Train(a) => embed::train(*a),
        Command::EvalSts(a) => embed::eval_sts(a),
        Command::ExportVectors(a) => embed::export_vectors(a),
        Command::Paraphrase(a) => translate::paraphrase(a),
        Command::EvalParaphrase(a) => paraphrase::eval(a),
        Command::Export(a) => export::export(a),
        Command::EvalWords(a) => embed::eval_words(a),
        Command::EvalTransfer(a) => vectors::eval_transfer(a),
        Command::EvalSpecificity(a) => specificity::eval_specificity(a),
        Command::Embed(a) => vectors::embed(a),
        Command::Parse(a) => parse::run(a),
    }
}

/// The error and its causes joined by ": ", leaving out a cause whose text
/// the message already ends with: the library errors name their path and
/// include their source (`{path}: {source}`), which `{:#}` would print twice.
fn error_text(e: &anyhow::Error) -> String {
    let mut text = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !text.ends_with(&c) {
            text = format!("{text}: {c}");
        }
    }
    text
}

/// Refuses `--threads` past [`paraforge_job::config::max_threads`] (a
/// small multiple of the cores), which only costs memory and start-up time.
fn check_threads(n: usize) -> Result<()> {
    use paraforge_job::config::{cores, max_threads, THREADS_PER_CORE};
    if n > max_threads() {
        anyhow::bail!(
            "--threads {n}: more than the limit of {} ({THREADS_PER_CORE} x the {} cores of this machine)",
            max_threads(),
            cores()
        );
    }
    Ok(())
}

/// Sizes rayon's global pool (training, rescoring); default: all cores.
fn threads(n: Option<usize>) -> Result<()> {
    match n {
        Some(_) => pool(n, None),
        None => Ok(()),
    }
}

/// The pool a training run works in: --threads workers (rayon's own
/// default without it), each with a main thread's 8 MiB stack, since the
/// run itself is moved onto one of them (`embed::train`).
fn training_threads(n: Option<usize>) -> Result<()> {
    pool(n, Some(8 << 20))
}

/// The global thread pool: `n` threads (rayon's default without it) with
/// `stack` bytes of stack each (rayon's default without it).
fn pool(n: Option<usize>, stack: Option<usize>) -> Result<()> {
    use anyhow::Context;
    let mut b = rayon::ThreadPoolBuilder::new();
    if let Some(n) = n {
        check_threads(n)?;
        b = b.num_threads(n.max(1));
    }
    if let Some(s) = stack {
        b = b.stack_size(s);
    }
    b.build_global().context("starting the thread pool")
}

fn init_logging(filter: &str, json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // Colour codes only for a person at a terminal, not in log files.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    if json {
        b.json().init();
    } else {
        b.init();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where the kernel gives huge pages only to memory that asks for them
    /// (`madvise`, the common default), the allocator's memory has none.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_allocator_asks_for_no_huge_pages() {
        let mode = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .unwrap_or_default();
        if !mode.contains("[madvise]") {
            eprintln!("transparent huge pages {mode:?}: the kernel's choice, not the allocator's");
            return;
        }
        // Written, so that every page of it is faulted in.
        let v = std::hint::black_box(vec![1u8; 64 << 20]);
        let at = v.as_ptr() as usize;
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        let mut huge_kb = None;
        for line in smaps.lines() {
            let first = line.split_whitespace().next().unwrap_or("");
            if let Some((a, b)) = first.split_once('-') {
                if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
                {
                    inside = (a..b).contains(&at);
                    continue;
                }
            }
            if inside {
                if let Some(kb) = line.strip_prefix("AnonHugePages:") {
                    huge_kb = kb.trim().trim_end_matches("kB").trim().parse::<u64>().ok();
                }
            }
        }
        assert_eq!(
            huge_kb,
            Some(0),
            "huge pages under the allocation at {at:#x}"
        );
        drop(v);
    }

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        let e =
            paraforge_core::Model::load(std::path::Path::new("/nonexistent/m.pfe")).unwrap_err();
        let e = anyhow::Error::new(e).context("evaluating");
        let text = error_text(&e);
        assert_eq!(text.matches("No such file").count(), 1, "{text}");
        assert!(
            text.starts_with("evaluating: /nonexistent/m.pfe: "),
            "{text}"
        );
        let plain = anyhow::anyhow!("inner").context("outer");
        assert_eq!(error_text(&plain), "outer: inner");
    }
}
