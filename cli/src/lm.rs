//! `paraforge lm-train`: an n-gram language model for the
//! `translation_perplexity` column (`[scoring] lm`).

use std::path::PathBuf;

use anyhow::{Context, Result};

#[derive(clap::Args)]
pub struct LmTrainArgs {
    /// Text files (plain or `.gz`), one sentence per line.
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
    /// Read this 0-based tab-separated column of each line instead of the
    /// whole line (3 = the English side of a CzEng 1.6 file).
    #[arg(long)]
    column: Option<usize>,
    /// n-gram order.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u8).range(1..=6))]
    order: u8,
    /// The ARPA file to write (made beside this path, renamed here at the
    /// end).
    #[arg(short = 'o', long)]
    out: PathBuf,
    /// Replace an existing --out; one that is (or holds, or lies inside)
    /// an input is refused even so.
    #[arg(long)]
    overwrite: bool,
}

pub fn train(a: LmTrainArgs) -> Result<()> {
    let inputs: Vec<(&str, &std::path::Path)> =
        a.inputs.iter().map(|p| ("file", p.as_path())).collect();
    let out = crate::out::Out::claim(
        "--out",
        &a.out,
        crate::out::Artifact::Arpa,
        &inputs,
        a.overwrite,
    )?;
    let (s, skipped) =
        paraforge_core::lm::train_files(&a.inputs, a.column, a.order as usize, &out.path())
            .with_context(|| format!("training a {}-gram model", a.order))?;
    out.commit()?;
    println!(
        "{} sentences, {} tokens{}; interpolated modified Kneser-Ney, {}-gram",
        s.sentences,
        s.tokens,
        if skipped > 0 {
            format!(
                " ({skipped} lines without column {} skipped)",
                a.column.unwrap_or(0)
            )
        } else {
            String::new()
        },
        s.order
    );
    for (n, (c, d)) in s.counts.iter().zip(&s.discounts).enumerate() {
        println!(
            "  {}-grams: {c} (discounts {:.3} {:.3} {:.3})",
            n + 1,
            d[0],
            d[1],
            d[2]
        );
    }
    println!("written to {}", a.out.display());
    Ok(())
}
