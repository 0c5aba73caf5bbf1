//! `paraforge translate`: sentences in, translations out, one line each.

use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use paraforge_job::bitext::{
    looks_legacy_8bit, open_text, read_line_limited, LineRead, LEGACY_HINT,
};
use paraforge_job::config::{MAX_BATCH_SIZE, MAX_BATCH_TOKENS, MAX_BEAM};
use paraforge_nmt::{Device, Flag, GenerateOptions, LoadOptions, TopKOn, Translator};

#[derive(clap::Args)]
pub struct Args {
    /// Model directory in Optimum's ONNX export layout.
    #[arg(long)]
    model: PathBuf,
    /// Input file, one sentence per line, plain, `.gz` or `.zst` (default:
    /// standard input).
    input: Option<PathBuf>,
    /// Output file (default: standard output); written beside its place
    /// and renamed there when the run succeeds. Never an input, nor a path
    /// inside a model or a dataset.
    #[arg(long, short)]
    output: Option<PathBuf>,
    /// Replace an existing --output (a text file; anything else is refused
    /// even so).
    #[arg(long)]
    overwrite: bool,
    /// Beam size (1 = greedy; at most 256 and the model's vocabulary).
    #[arg(long, default_value_t = 12)]
    beam: usize,
    /// Sentences per batch (at most 1024; default 16 on the CPU, 64 on CUDA).
    #[arg(long)]
    batch_size: Option<usize>,
    /// Cut batches by tokens instead: as many length-sorted sentences as fit
    /// in this many padded source tokens (at most --batch-size sentences).
    /// On CUDA, when not given, a budget from the GPU's free memory.
    #[arg(long)]
    batch_tokens: Option<usize>,
    /// Print the translation score before each translation (tab-separated).
    #[arg(long)]
    scores: bool,
    /// Print the K best hypotheses per sentence as `line<TAB>rank<TAB>score<TAB>text`
    /// (K at most --beam).
    #[arg(long)]
    nbest: Option<usize>,
    #[arg(long)]
    max_length: Option<usize>,
    #[arg(long)]
    max_new_tokens: Option<usize>,
    #[arg(long)]
    min_length: Option<usize>,
    #[arg(long)]
    min_new_tokens: Option<usize>,
    #[arg(long)]
    length_penalty: Option<f32>,
    /// No n-gram of this size twice in a translation (transformers'
    /// `no_repeat_ngram_size`; 0: off). Default: the model's generation config.
    #[arg(long)]
    no_repeat_ngram_size: Option<usize>,
    /// A token already in the translation has its log-probability
    /// multiplied by this (transformers' `repetition_penalty`; 1.0: off).
    #[arg(long)]
    repetition_penalty: Option<f32>,
    /// When a sentence's search ends (transformers' `early_stopping`):
    /// `true` as soon as --beam hypotheses are finished (CTranslate2's rule
    /// too), `false` when no running beam can still win (transformers'
    /// default), `never` the same judged at the best reachable length.
    /// Default: the model's generation config.
    #[arg(long)]
    early_stopping: Option<paraforge_nmt::EarlyStopping>,
    /// cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    device: Device,
    /// Threads per stream: ONNX Runtime's intra-op threads and the
    /// search's (0 = the cores shared out over the streams; at most 4 per
    /// core in all).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Decoders translating different batches at once, each with its own
    /// copy of the model and --threads threads (CTranslate2's
    /// inter_threads). On CPU, one single-threaded stream per core is
    /// usually fastest for small models: --streams 2 --threads 1 on two cores.
    /// Default 1 on the CPU, 4 on CUDA.
    #[arg(long)]
    streams: Option<usize>,
    /// Use the int8 model (`*_quantized.onnx`).
    #[arg(long)]
    quantized: bool,
    /// Keep the KV caches in the execution provider's memory between steps
    /// (always on with --device cuda).
    #[arg(long)]
    io_binding: bool,
    /// Attend to the source once per beam, as the export does (by default
    /// the decoder graph is rewritten at load to attend once per sentence,
    /// which is faster and computes the same)
    #[arg(long)]
    cross_attention_per_beam: bool,
    /// Reorder the self-attention cache by beam parent in a copy of its own
    /// after each decoder call (by default the decoder graph is rewritten at
    /// load to do it while it appends the new step: one copy instead of
    /// two, the same values)
    #[arg(long)]
    reorder_in_engine: bool,
    /// Attend over the self-attention cache with the export's own
    /// MatMul/Softmax nodes (by default each layer's are rewritten at load
    /// into one operator, which is faster on the CPU and equal up to float
    /// rounding)
    #[arg(long)]
    unfused_self_attention: bool,
    /// Where each row's log-softmax and best candidates are computed:
    /// `auto` = on the host for the CPU (from the logits, exact with
    /// transformers), inside the decoder graph for CUDA (only the
    /// candidates are copied back, not rows x vocab logits); `host` or
    /// `graph` to choose
    #[arg(long, default_value = "auto")]
    top_k_on: TopKOn,
    /// Print `{"sentences":N,"seconds":S}` on stderr at the end, timing
    /// translation only (not model loading); used by `make bench-nmt`.
    #[arg(long, hide = true)]
    timing: bool,
    /// Translate the input's first N lines once before the timed run and
    /// discard them, as the benchmark warms its peers up (with --timing).
    #[arg(long, hide = true, default_value_t = 0)]
    warmup: usize,
    /// Longest input line in bytes; a longer one stops the run, naming its
    /// line (a model reads a few hundred tokens of a sentence; a line of
    /// gigabytes would otherwise be read whole into memory).
    #[arg(long, default_value_t = DEFAULT_MAX_LINE_BYTES)]
    max_line_bytes: usize,
    /// `paraphrase` only: paraphrase every line to this syntactic template,
    /// the top levels of a constituent tree without its words (as
    /// `paraforge parse --template 2` prints them, e.g. "(S (PP) (,) (NP)
    /// (VP) (.))"), with a paraphraser trained on templates
    /// (models/paraphrase-en, tools/models/scpn.sh): each input is read as
    /// `TEMPLATE || input`.
    #[arg(long)]
    template: Option<String>,
    /// Set by `paraphrase`, the one command that takes --template.
    #[arg(skip)]
    paraphrasing: bool,
}

/// `paraforge paraphrase`: `translate` on an English-to-English model.
pub fn paraphrase(mut a: Args) -> Result<()> {
    check_one_language(&a.model)?;
    a.paraphrasing = true;
    run(a)
}

/// A paraphraser reads and writes one language: a model whose
/// `tokenizer_config.json` names two (a translation model) is refused.
fn check_one_language(model: &Path) -> Result<()> {
    let Ok(bytes) = std::fs::read(model.join("tokenizer_config.json")) else {
        return Ok(());
    };
    let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
    let lang = |k: &str| v.get(k).and_then(|l| l.as_str()).map(str::to_lowercase);
    if let (Some(s), Some(t)) = (lang("source_lang"), lang("target_lang")) {
        if s != t {
            bail!(
                "--model {}: translates {s} to {t} (its tokenizer_config.json), not one language to itself: a paraphraser is a model such as models/paraphrase-en; translate with `paraforge translate`",
                model.display()
            );
        }
    }
    Ok(())
}

/// What tools/models/scpn.sh writes into a paraphraser it trained on templates;
/// another model would read `TEMPLATE || sentence` as text it never saw.
pub(crate) const TEMPLATES_FILE: &str = "templates.json";

/// Refuses a model that was not trained on templates.
pub(crate) fn check_template_model(model: &std::path::Path) -> Result<()> {
    if !model.join(TEMPLATES_FILE).is_file() {
        bail!(
            "{} was not trained on templates (no {TEMPLATES_FILE}; tools/models/scpn.sh trains one)",
            model.display()
        );
    }
    Ok(())
}

/// What a template-trained paraphraser reads: the template, ` || `, the
/// sentence (tools/models/scpn.sh trains on this form).
pub(crate) fn with_template(template: &str, line: &str) -> String {
    format!("{template} || {line}")
}

/// `--max-line-bytes`' default: ten times what a model with 512 positions
/// reads of a sentence, and small enough that a block of [`BLOCK`] lines
/// stays within a few hundred megabytes.
const DEFAULT_MAX_LINE_BYTES: usize = 64 << 10;

/// Lines are read and translated in blocks of this many, so memory stays
/// bounded on inputs of any size.
const BLOCK: usize = 4096;

/// Lines that are not UTF-8 are reported one by one up to this many; the
/// rest only in the count at the end, so a wrongly encoded file does not
/// bury the one message that says what is wrong.
const SHOWN: usize = 10;

pub fn run(a: Args) -> Result<()> {
    check_options(&a)?;
    check_template(&a)?;
    if let Some(output) = &a.output {
        check_output(output, &a.model, a.input.as_deref(), a.overwrite)?;
    }
    let opts = generate_options(&a);
    // The search and cache copies run on rayon's pool between graph runs:
    // held to the same count, so that `--threads 1` processes side by side
    // do not each take every core. (Several streams each get a pool of
    // their own, sized in the engine.)
    if a.threads > 0 {
        rayon::ThreadPoolBuilder::new()
            .num_threads(a.threads)
            .build_global()
            .context("starting the search's thread pool")?;
    }
    // The same reader as `run`'s, so .gz and .zst inputs are decompressed.
    let (mut reader, total): (Box<dyn BufRead>, Option<u64>) = match &a.input {
        Some(p) => (open_text(p)?, Some(count_lines(p, a.max_line_bytes)?)),
        None => (Box::new(BufReader::new(std::io::stdin().lock())), None),
    };
    let mut model = Translator::load(&a.model, &load_options(&a))
        .with_context(|| format!("loading model {}", a.model.display()))?;
    if opts.batch_tokens.is_none() {
        if let Some(t) = model.auto_batch_tokens(opts.num_beams) {
            tracing::info!(
                batch_tokens = t,
                batch_size = opts.batch_size,
                "batches cut by a token budget from the GPU's free memory"
            );
        }
    }
    let name = a
        .input
        .as_ref()
        .map_or("<stdin>".to_string(), |p| p.display().to_string());
    let warmed = warm_up(&mut model, &a, &opts, &name)?;
    let mut out = Output::create(a.output.as_deref())?;
    let bar = progress_bar(total);
    let mut c = Counts::default();
    let mut buf = Vec::new();
    loop {
        let (texts, bad) = read_block(&mut reader, &mut buf, &a, &name, &mut c)?;
        if texts.is_empty() {
            break;
        }
        let started = std::time::Instant::now();
        let results = model.translate_with_progress(&texts, &opts, |n| bar.inc(n as u64))?;
        c.busy += started.elapsed();
        write_results(
            &mut out,
            &results,
            &bad,
            &a,
            &name,
            c.line_no,
            &mut c.flagged,
        )?;
        c.flagged += bad.len();
        c.line_no += texts.len();
    }
    bar.finish_and_clear();
    c.finish(&name, out, &a, &model, warmed)
}

/// `--template`: `paraphrase`'s alone, a template, and a model trained on them.
fn check_template(a: &Args) -> Result<()> {
    let Some(t) = &a.template else {
        return Ok(());
    };
    if !a.paraphrasing {
        bail!("--template is `paraforge paraphrase`'s: a translation model reads no template");
    }
    if !paraforge_encoders::tree::is_template(t) {
        bail!(
            "--template {t:?} is not a template: bracketed labels without words, as `paraforge parse --template 2` prints them, e.g. \"(S (NP) (VP) (.))\""
        );
    }
    check_template_model(&a.model)
}

fn generate_options(a: &Args) -> GenerateOptions {
    GenerateOptions {
        num_beams: a.beam,
        max_length: a.max_length,
        max_new_tokens: a.max_new_tokens,
        min_length: a.min_length,
        min_new_tokens: a.min_new_tokens,
        length_penalty: a.length_penalty,
        no_repeat_ngram_size: a.no_repeat_ngram_size,
        repetition_penalty: a.repetition_penalty,
        early_stopping: a.early_stopping,
        nbest: a.nbest.unwrap_or(1),
        batch_size: a
            .batch_size
            .unwrap_or_else(|| paraforge_nmt::default_batch_size(&a.device)),
        batch_tokens: a.batch_tokens,
    }
}

fn load_options(a: &Args) -> LoadOptions {
    LoadOptions {
        device: a.device,
        threads: a.threads,
        streams: streams(a),
        quantized: a.quantized,
        decoder: Default::default(),
        io_binding: a.io_binding,
        cross_attention_per_beam: a.cross_attention_per_beam,
        reorder_in_engine: a.reorder_in_engine,
        unfused_self_attention: a.unfused_self_attention,
        top_k_on: a.top_k_on,
    }
}

/// `--warmup N`: the input's first N lines translated and discarded, the
/// profile cleared; returns how many.
fn warm_up(model: &mut Translator, a: &Args, opts: &GenerateOptions, name: &str) -> Result<usize> {
    let Some(p) = a.input.as_ref().filter(|_| a.warmup > 0) else {
        return Ok(0);
    };
    let mut r = open_text(p)?;
    let mut first = Vec::new();
    let mut buf = Vec::new();
    while first.len() < a.warmup
        && next_line(&mut r, &mut buf, a.max_line_bytes, name, first.len() + 1)?
    {
        first.push(String::from_utf8_lossy(&buf).trim_end().to_string());
    }
    model.translate(&first, opts)?;
    model.reset_profile();
    Ok(first.len())
}

fn progress_bar(total: Option<u64>) -> ProgressBar {
    let Some(n) = total else {
        return ProgressBar::hidden();
    };
    let b = ProgressBar::new(n);
    b.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} sentences {per_sec} eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    b
}

/// What a run counted, for its messages at the end.
#[derive(Default)]
struct Counts {
    line_no: usize,
    flagged: usize,
    not_utf8: usize,
    legacy: usize,
    translatable: usize,
    busy: std::time::Duration,
}

/// A block of lines, and which of them were not UTF-8 (each an empty
/// text, flagged per line, not fatal).
fn read_block(
    reader: &mut dyn BufRead,
    buf: &mut Vec<u8>,
    a: &Args,
    name: &str,
    c: &mut Counts,
) -> Result<(Vec<String>, Vec<usize>)> {
    let mut texts = Vec::with_capacity(BLOCK);
    let mut bad = Vec::new();
    while texts.len() < BLOCK {
        let at = c.line_no + texts.len() + 1;
        if !next_line(reader, buf, a.max_line_bytes, name, at)? {
            break;
        }
        match std::str::from_utf8(buf) {
            Ok(s) => {
                c.translatable += usize::from(!s.trim().is_empty());
                texts.push(match &a.template {
                    Some(t) if !s.trim().is_empty() => with_template(t.trim(), s),
                    _ => s.to_string(),
                });
            }
            Err(e) => {
                c.not_utf8 += 1;
                c.legacy += usize::from(looks_legacy_8bit(buf));
                if c.not_utf8 <= SHOWN {
                    eprintln!("{name}:{at}: invalid UTF-8 ({e}); empty output line");
                }
                bad.push(texts.len());
                texts.push(String::new());
            }
        }
    }
    Ok((texts, bad))
}

/// One output line per input line (or its `--nbest` rows), after the lines
/// before it (`line_no`); empty and truncated inputs are said.
fn write_results(
    out: &mut Output,
    results: &[paraforge_nmt::Translation],
    bad: &[usize],
    a: &Args,
    name: &str,
    line_no: usize,
    flagged: &mut usize,
) -> Result<()> {
    for (i, t) in results.iter().enumerate() {
        let n = line_no + i + 1;
        match t.flag {
            Some(Flag::Empty) if !bad.contains(&i) => {
                *flagged += 1;
                eprintln!("{name}:{n}: empty line; empty output line");
            }
            Some(Flag::Truncated { tokens, kept }) => {
                *flagged += 1;
                eprintln!("{name}:{n}: {tokens} tokens exceed the model's {kept} positions; translated the first {kept}");
            }
            _ => {}
        }
        if let Some(k) = a.nbest {
            // An empty or undecodable line has no hypotheses; it still gets
            // its one (empty) row, as it gets its empty line without
            // --nbest, so no input line goes missing.
            if t.nbest.is_empty() {
                writeln!(out, "{n}\t0\t{:.6}\t{}", t.score, t.text)?;
            }
            for (rank, h) in t.nbest.iter().take(k).enumerate() {
                writeln!(out, "{n}\t{rank}\t{:.6}\t{}", h.score, h.text)?;
            }
        } else if a.scores {
            writeln!(out, "{:.6}\t{}", t.score, t.text)?;
        } else {
            writeln!(out, "{}", t.text)?;
        }
    }
    Ok(())
}

impl Counts {
    /// Refuses an input with no UTF-8 text, puts the output in place, and
    /// says what was flagged (and, with `--timing`, the time).
    fn finish(
        self,
        name: &str,
        out: Output,
        a: &Args,
        model: &Translator,
        warmed: usize,
    ) -> Result<()> {
        let line_no = self.line_no;
        if self.not_utf8 > 0 {
            let hint = if 2 * self.legacy > self.not_utf8 {
                format!(" ({LEGACY_HINT})")
            } else {
                String::new()
            };
            // Nothing but empty lines would be a wrong output reported as a success.
            if self.translatable == 0 {
                bail!(
                    "{name}: none of its {line_no} lines is UTF-8 text, nothing was translated{hint}"
                );
            }
            eprintln!(
                "paraforge translate: {} of the {line_no} lines of {name} are not UTF-8{hint} (the first {} are listed above)",
                self.not_utf8,
                self.not_utf8.min(SHOWN)
            );
        }
        out.commit()?;
        if self.flagged > 0 {
            eprintln!(
                "paraforge translate: {line_no} lines, {} flagged (see above)",
                self.flagged
            );
        }
        if a.timing {
            let p = model.profile();
            eprintln!(
                "{{\"sentences\":{line_no},\"warmup_sentences\":{warmed},\"seconds\":{:.6},\"encoder_s\":{:.3},\"decoder_s\":{:.3},\"search_s\":{:.3},\"cache_s\":{:.3},\"cross_cache_s\":{:.3},\"decoder_calls\":{},\"decoder_rows\":{}}}",
                self.busy.as_secs_f64(),
                p.encoder_s,
                p.decoder_s,
                p.search_s,
                p.cache_s,
                p.cross_cache_s,
                p.decoder_calls,
                p.decoder_rows
            );
        }
        Ok(())
    }
}

/// Upper bounds, checked before the model loads: an unbounded beam, batch
/// or thread count runs the machine out of memory instead of failing.
fn check_options(a: &Args) -> Result<()> {
    for (flag, value, max) in [
        ("--beam", a.beam, MAX_BEAM),
        ("--batch-size", a.batch_size.unwrap_or(1), MAX_BATCH_SIZE),
    ] {
        if value == 0 {
            bail!("{flag} {value}: must be at least 1");
        }
        if value > max {
            bail!("{flag} {value}: more than the limit of {max}");
        }
    }
    if let Some(t) = a.batch_tokens {
        if t == 0 || t > MAX_BATCH_TOKENS {
            bail!("--batch-tokens {t}: must be between 1 and {MAX_BATCH_TOKENS}");
        }
    }
    if let Some(k) = a.nbest {
        if k == 0 || k > a.beam {
            bail!("--nbest {k}: must be between 1 and --beam ({})", a.beam);
        }
    }
    if a.max_line_bytes == 0 {
        bail!("--max-line-bytes 0: must be at least 1");
    }
    if a.warmup > 0 && a.input.is_none() {
        bail!(
            "--warmup {}: needs an input file (it reads the first lines twice)",
            a.warmup
        );
    }
    crate::check_threads(a.threads)?;
    paraforge_job::config::check_streams(a.threads, streams(a)).map_err(|reason| {
        anyhow::anyhow!(
            "--threads {} x --streams {}: {reason}",
            a.threads,
            streams(a)
        )
    })
}

/// `--streams`, or the device's default.
fn streams(a: &Args) -> usize {
    a.streams
        .unwrap_or_else(|| paraforge_nmt::default_streams(&a.device))
}

/// The output rule ([`paraforge_core::outputs`]) for `--output`, but for a
/// device or pipe (`/dev/null`, a FIFO), which is written in place.
fn check_output(output: &Path, model: &Path, input: Option<&Path>, overwrite: bool) -> Result<()> {
    if std::fs::metadata(output).is_ok_and(|m| !m.is_file() && !m.is_dir()) {
        return Ok(());
    }
    let mut inputs = vec![("--model", model)];
    if let Some(i) = input {
        inputs.push(("input", i));
    }
    paraforge_core::outputs::check(
        paraforge_core::outputs::Target {
            flag: "--output",
            path: output,
            writes: paraforge_core::outputs::Artifact::Text,
        },
        &inputs,
        overwrite,
    )?;
    Ok(())
}

/// Where the translations go. A file is written under a temporary name in
/// its directory and renamed into place by [`Output::commit`], so a failed
/// run leaves an earlier output as it was and no partial file (the
/// temporary file is removed when it is dropped).
enum Output {
    Stdout(BufWriter<std::io::StdoutLock<'static>>),
    /// A device or pipe (`/dev/null`, a FIFO): written in place, since
    /// renaming a file over it would replace the device itself.
    Special(BufWriter<std::fs::File>),
    File {
        tmp: BufWriter<tempfile::NamedTempFile>,
        target: PathBuf,
    },
}

impl Output {
    fn create(path: Option<&Path>) -> Result<Output> {
        let Some(p) = path else {
            return Ok(Output::Stdout(BufWriter::new(std::io::stdout().lock())));
        };
        // Through a symbolic link to the file it names, which stays a link.
        let target = std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        let existing = std::fs::metadata(&target).ok();
        if existing.as_ref().is_some_and(|m| m.is_dir()) {
            bail!("--output {}: is a directory", p.display());
        }
        if existing.as_ref().is_some_and(|m| !m.is_file()) {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&target)
                .with_context(|| format!("opening --output {}", p.display()))?;
            return Ok(Output::Special(BufWriter::new(f)));
        }
        let dir = match target.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let name = target
            .file_name()
            .with_context(|| format!("--output {}: names no file", p.display()))?;
        let prefix = format!(".{}.", name.to_string_lossy());
        let mut builder = tempfile::Builder::new();
        builder.prefix(&prefix).suffix(".partial");
        if existing.is_none() {
            // What File::create gives a new file: 0666 less the umask.
            builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
        }
        let tmp = builder.tempfile_in(dir).with_context(|| {
            format!(
                "creating a temporary file in {} for {}",
                dir.display(),
                p.display()
            )
        })?;
        if let Some(m) = existing {
            // A replaced output keeps its mode.
            tmp.as_file()
                .set_permissions(m.permissions())
                .with_context(|| format!("setting the mode of {}", tmp.path().display()))?;
        }
        Ok(Output::File {
            tmp: BufWriter::new(tmp),
            target,
        })
    }

    /// Flushes and, for a file, moves it to its name.
    fn commit(self) -> Result<()> {
        match self {
            Output::Stdout(mut w) => Ok(w.flush()?),
            Output::Special(mut w) => Ok(w.flush()?),
            Output::File { tmp, target } => {
                let tmp = tmp
                    .into_inner()
                    .map_err(|e| e.into_error())
                    .with_context(|| format!("writing {}", target.display()))?;
                tmp.as_file()
                    .sync_all()
                    .with_context(|| format!("writing {}", target.display()))?;
                tmp.persist(&target).map_err(|e| e.error).with_context(|| {
                    format!("renaming the output into place at {}", target.display())
                })?;
                Ok(())
            }
        }
    }
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Output::Stdout(w) => w.write(buf),
            Output::Special(w) => w.write(buf),
            Output::File { tmp, .. } => tmp.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Output::Stdout(w) => w.flush(),
            Output::Special(w) => w.flush(),
            Output::File { tmp, .. } => tmp.flush(),
        }
    }
}

/// Line `line` of `name` into `buf`, without its line ending; `false` at
/// the end of the input. A line longer than `max` bytes is an error naming
/// it, found without reading the line into memory.
fn next_line(
    r: &mut dyn BufRead,
    buf: &mut Vec<u8>,
    max: usize,
    name: &str,
    line: usize,
) -> Result<bool> {
    match read_line_limited(r, buf, max).with_context(|| format!("reading {name}"))? {
        LineRead::Eof => Ok(false),
        LineRead::TooLong { .. } => Err(too_long(name, line as u64, max)),
        LineRead::Line { .. } => {
            while matches!(buf.last(), Some(b'\n' | b'\r')) {
                buf.pop();
            }
            Ok(true)
        }
    }
}

fn too_long(name: &str, line: u64, max: usize) -> anyhow::Error {
    anyhow::anyhow!(
        "{name}:{line}: the line is longer than {max} bytes (--max-line-bytes): give one sentence per line, or raise the limit"
    )
}

/// Lines of `p` after decompression, for the progress bar (a last line
/// without a newline counts), read in blocks; the first line longer than
/// `max` bytes is an error here already, before the model loads.
fn count_lines(p: &Path, max: usize) -> Result<u64> {
    let mut r = open_text(p)?;
    let mut buf = vec![0u8; 1 << 16];
    // `len`: bytes of the current line so far, its newline left out.
    let (mut lines, mut len) = (0u64, 0usize);
    let name = p.display().to_string();
    loop {
        let n = r
            .read(&mut buf)
            .with_context(|| format!("reading {name}"))?;
        if n == 0 {
            break;
        }
        let mut rest = &buf[..n];
        while let Some(i) = rest.iter().position(|&b| b == b'\n') {
            len += i;
            if len > max {
                return Err(too_long(&name, lines + 1, max));
            }
            lines += 1;
            len = 0;
            rest = &rest[i + 1..];
        }
        len += rest.len();
        if len > max {
            return Err(too_long(&name, lines + 1, max));
        }
    }
    Ok(lines + u64::from(len > 0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    /// A line of megabytes stops the run with its file and line: from a
    /// file before the model loads (the model here does not exist), from
    /// standard input as it is read; never read whole.
    #[test]
    fn a_line_past_max_line_bytes_is_an_error_naming_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.txt");
        let mut text = b"Dobry den.\n".to_vec();
        text.extend(std::iter::repeat_n(b'x', 4 << 20));
        text.extend_from_slice(b"\nAhoj.\n");
        std::fs::write(&input, &text).unwrap();
        let run_with = |extra: &[&str]| {
            let mut argv = vec!["translate", "--model", "/nonexistent/model"];
            argv.extend_from_slice(extra);
            argv.push(input.to_str().unwrap());
            run(Cli::try_parse_from(argv).unwrap().args)
                .unwrap_err()
                .to_string()
        };
        let e = run_with(&[]);
        assert!(
            e.contains("in.txt:2: the line is longer than 65536 bytes (--max-line-bytes)"),
            "{e}"
        );
        // A last line without a newline is checked too.
        std::fs::write(&input, &text[..text.len() - 7]).unwrap();
        let e = run_with(&["--max-line-bytes", "100"]);
        assert!(
            e.contains("in.txt:2: the line is longer than 100 bytes"),
            "{e}"
        );
        // Within the limit, the run gets as far as the model.
        let e = run_with(&["--max-line-bytes", "5000000"]);
        assert!(e.contains("/nonexistent/model"), "{e}");

        let mut stdin = std::io::Cursor::new(text);
        let mut buf = Vec::new();
        assert!(next_line(&mut stdin, &mut buf, 100, "<stdin>", 1).unwrap());
        assert_eq!(buf, b"Dobry den.");
        let e = next_line(&mut stdin, &mut buf, 100, "<stdin>", 2).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("<stdin>:2: the line is longer than 100 bytes"),
            "{e}"
        );
        assert!(buf.capacity() < 1 << 20, "{} bytes held", buf.capacity());
    }
}
