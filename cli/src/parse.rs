//! `paraforge parse`: English sentences' constituent trees by Link Grammar,
//! as the tree encoder (`train --model tree-rnn`) reads them, or their
//! templates (the top levels without words) that syntactically controlled
//! paraphrasing conditions on.

use std::io::{BufRead, Write};
use std::path::PathBuf;

use anyhow::{Context, Result};
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

pub fn run(a: ParseArgs) -> Result<()> {
    let parser = link_grammar::shared()?;
    let reader: Box<dyn BufRead> = if a.input.as_os_str() == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        let f = std::fs::File::open(&a.input)
            .with_context(|| format!("cannot open {}", a.input.display()))?;
        Box::new(std::io::BufReader::new(f))
    };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut lines = reader.lines().enumerate();
    loop {
        let mut texts = Vec::with_capacity(CHUNK);
        for (i, l) in lines.by_ref().take(CHUNK) {
            texts.push(l.with_context(|| format!("{} line {}", a.input.display(), i + 1))?);
        }
        if texts.is_empty() {
            break;
        }
        for p in parser.parse_lines(&texts)? {
            // One line out for every line in; an empty one where the
            // parser found no linkage.
            let shown = match (p, a.template) {
                (Some(p), Some(levels)) => tree::template(&p, levels as usize).unwrap_or_default(),
                (Some(p), None) => p,
                (None, _) => String::new(),
            };
            writeln!(out, "{shown}")?;
        }
    }
    out.flush()?;
    Ok(())
}
