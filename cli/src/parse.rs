//! `paraforge parse`: English sentences' constituent trees by Link Grammar,
//! as the tree encoder (`train --model tree-rnn`) reads them, or their
//! templates (the top levels without words) that syntactically controlled
//! paraphrasing conditions on.

use std::io::{BufRead, Write};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use paraforge_encoders::{link_grammar, tree};

#[derive(clap::Args)]
pub struct ParseArgs {
    /// Sentences, one a line (`-` for standard input).
    input: PathBuf,
    /// Print each sentence's template, the tree's top N levels with the
    /// words dropped (`(S (NP) (VP) (.))` at 2), instead of the tree.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=8))]
    template: Option<u32>,
}

/// Sentences parsed together, across the threads.
const CHUNK: usize = 2_000;
/// The longest line read: far past what the parser takes
/// ([`link_grammar::MAX_PARSE_BYTES`]), so that a longer one is named as
/// such, and never a whole file without line breaks held in memory.
const MAX_LINE_BYTES: usize = 1 << 20;

pub fn run(a: ParseArgs) -> Result<()> {
    use paraforge_job::bitext::{read_line_limited, LineRead};
    let parser = link_grammar::shared()?;
    let mut reader: Box<dyn BufRead> = if a.input.as_os_str() == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        let f = std::fs::File::open(&a.input)
            .with_context(|| format!("cannot open {}", a.input.display()))?;
        Box::new(std::io::BufReader::new(f))
    };
    let name = a.input.display().to_string();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let (mut n, mut unparsed, mut buf) = (0u64, 0u64, Vec::new());
    loop {
        let mut texts = Vec::with_capacity(CHUNK);
        while texts.len() < CHUNK {
            let at = n + texts.len() as u64 + 1;
            match read_line_limited(&mut reader, &mut buf, MAX_LINE_BYTES)
                .with_context(|| format!("{name} line {at}"))?
            {
                LineRead::Eof => break,
                LineRead::TooLong { bytes } => bail!(
                    "{name} line {at}: {bytes} bytes, more than the {MAX_LINE_BYTES} a line may hold"
                ),
                LineRead::Line { .. } => {
                    let l = std::str::from_utf8(&buf)
                        .with_context(|| format!("{name} line {at}: not UTF-8"))?;
                    texts.push(l.trim_end_matches(['\n', '\r']).to_string());
                }
            }
        }
        if texts.is_empty() {
            break;
        }
        for (t, p) in texts.iter().zip(parser.parse_lines(&texts)?) {
            n += 1;
            // One line out for every line in; an empty one where nothing
            // was parsed, said on stderr unless the line was empty.
            let shown = match (p, a.template) {
                (Some(p), Some(levels)) => tree::template(&p, levels as usize).unwrap_or_default(),
                (Some(p), None) => p,
                (None, _) => {
                    if !t.trim().is_empty() {
                        unparsed += 1;
                        let why = link_grammar::refusal(&link_grammar::shown_line(t))
                            .unwrap_or_else(|| "no linkage found".into());
                        eprintln!("{name} line {n}: not parsed: {why}");
                    }
                    String::new()
                }
            };
            writeln!(out, "{shown}")?;
        }
    }
    out.flush()?;
    if unparsed > 0 {
        bail!(
            "{unparsed} of {n} lines not parsed (each named above; their output lines are empty)"
        );
    }
    Ok(())
}
