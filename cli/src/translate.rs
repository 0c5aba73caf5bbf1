//! `paraforge translate`: sentences in, translations out, one line each.

use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::path::PathBuf;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use paraforge_nmt::{Device, Flag, GenerateOptions, LoadOptions, Translator};

#[derive(clap::Args)]
pub struct Args {
    /// Model directory in Optimum's ONNX export layout.
    #[arg(long)]
    model: PathBuf,
    /// Input file, one sentence per line (default: standard input).
    input: Option<PathBuf>,
    /// Output file (default: standard output).
    #[arg(long, short)]
    output: Option<PathBuf>,
    /// Beam size (1 = greedy).
    #[arg(long, default_value_t = 12)]
    beam: usize,
    /// Sentences per batch.
    #[arg(long, default_value_t = 16)]
    batch_size: usize,
    /// Print the translation score before each translation (tab-separated).
    #[arg(long)]
    scores: bool,
    /// Print the K best hypotheses per sentence as `line<TAB>rank<TAB>score<TAB>text`.
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
    /// cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    device: Device,
    /// ONNX Runtime intra-op threads (0 = one per core).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Use the int8 model (`*_quantized.onnx`).
    #[arg(long)]
    quantized: bool,
    /// Keep the KV caches in the execution provider's memory between steps
    /// (always on with --device cuda).
    #[arg(long)]
    io_binding: bool,
    /// Print `{"sentences":N,"seconds":S}` on stderr at the end, timing
    /// translation only (not model loading); used by `make bench-nmt`.
    #[arg(long, hide = true)]
    timing: bool,
}

/// Lines are read and translated in blocks of this many, so memory stays
/// bounded on inputs of any size.
const BLOCK: usize = 4096;

pub fn run(a: Args) -> Result<()> {
    let opts = GenerateOptions {
        num_beams: a.beam,
        max_length: a.max_length,
        max_new_tokens: a.max_new_tokens,
        min_length: a.min_length,
        min_new_tokens: a.min_new_tokens,
        length_penalty: a.length_penalty,
        early_stopping: None,
        nbest: a.nbest.unwrap_or(1),
        batch_size: a.batch_size,
    };
    let load = LoadOptions {
        device: a.device.clone(),
        threads: a.threads,
        quantized: a.quantized,
        decoder: Default::default(),
        io_binding: a.io_binding,
    };
    let mut model = Translator::load(&a.model, &load)
        .with_context(|| format!("loading model {}", a.model.display()))?;

    let (reader, total): (Box<dyn Read>, Option<u64>) = match &a.input {
        Some(p) => {
            let f = std::fs::File::open(p).with_context(|| format!("opening {}", p.display()))?;
            let lines = count_lines(p)?;
            (Box::new(f), Some(lines))
        }
        None => (Box::new(std::io::stdin().lock()), None),
    };
    let name = a
        .input
        .as_ref()
        .map_or("<stdin>".to_string(), |p| p.display().to_string());
    let mut reader = BufReader::new(reader);
    let mut out: Box<dyn Write> = match &a.output {
        Some(p) => Box::new(BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?,
        )),
        None => Box::new(BufWriter::new(std::io::stdout().lock())),
    };
    let bar = match total {
        Some(n) => {
            let b = ProgressBar::new(n);
            b.set_style(
                ProgressStyle::with_template("{bar:40} {pos}/{len} sentences {per_sec} eta {eta}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            b
        }
        None => ProgressBar::hidden(),
    };

    let mut line_no = 0usize;
    let mut flagged = 0usize;
    let mut busy = std::time::Duration::ZERO;
    let mut buf = Vec::new();
    loop {
        // A block of lines; invalid UTF-8 is flagged per line, not fatal.
        let mut texts = Vec::with_capacity(BLOCK);
        let mut bad = Vec::new();
        while texts.len() < BLOCK {
            buf.clear();
            let n = reader
                .read_until(b'\n', &mut buf)
                .with_context(|| format!("reading {name}"))?;
            if n == 0 {
                break;
            }
            while matches!(buf.last(), Some(b'\n' | b'\r')) {
                buf.pop();
            }
            match std::str::from_utf8(&buf) {
                Ok(s) => texts.push(s.to_string()),
                Err(e) => {
                    bad.push(texts.len());
                    eprintln!(
                        "{name}:{}: invalid UTF-8 ({e}); empty output line",
                        line_no + texts.len() + 1
                    );
                    texts.push(String::new());
                }
            }
        }
        if texts.is_empty() {
            break;
        }
        let started = std::time::Instant::now();
        let results = model.translate_with_progress(&texts, &opts, |n| bar.inc(n as u64))?;
        busy += started.elapsed();
        for (i, t) in results.iter().enumerate() {
            let n = line_no + i + 1;
            match t.flag {
                Some(Flag::Empty) if !bad.contains(&i) => {
                    flagged += 1;
                    eprintln!("{name}:{n}: empty line; empty output line");
                }
                Some(Flag::Truncated { tokens, kept }) => {
                    flagged += 1;
                    eprintln!("{name}:{n}: {tokens} tokens exceed the model's {kept} positions; translated the first {kept}");
                }
                _ => {}
            }
            if let Some(k) = a.nbest {
                for (rank, h) in t.nbest.iter().take(k).enumerate() {
                    writeln!(out, "{n}\t{rank}\t{:.6}\t{}", h.score, h.text)?;
                }
            } else if a.scores {
                writeln!(out, "{:.6}\t{}", t.score, t.text)?;
            } else {
                writeln!(out, "{}", t.text)?;
            }
        }
        flagged += bad.len();
        line_no += texts.len();
    }
    out.flush()?;
    bar.finish_and_clear();
    if flagged > 0 {
        eprintln!("paraforge translate: {line_no} lines, {flagged} flagged (see above)");
    }
    if a.timing {
        let p = model.profile();
        eprintln!(
            "{{\"sentences\":{line_no},\"seconds\":{:.6},\"encoder_s\":{:.3},\"decoder_s\":{:.3},\"search_s\":{:.3},\"cache_s\":{:.3},\"decoder_calls\":{},\"decoder_rows\":{}}}",
            busy.as_secs_f64(),
            p.encoder_s,
            p.decoder_s,
            p.search_s,
            p.cache_s,
            p.decoder_calls,
            p.decoder_rows
        );
    }
    Ok(())
}

fn count_lines(p: &PathBuf) -> Result<u64> {
    let mut f = std::fs::File::open(p).with_context(|| format!("opening {}", p.display()))?;
    let mut buf = vec![0u8; 1 << 16];
    let (mut lines, mut last) = (0u64, b'\n');
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        lines += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
        last = buf[n - 1];
    }
    Ok(lines + u64::from(last != b'\n'))
}
