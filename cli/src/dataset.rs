//! `paraforge bin`, `paraforge report` and `paraforge rescore`.

use std::path::PathBuf;

use anyhow::{Context, Result};
use paraforge_dataset::bins::{self, BinOptions};

#[derive(clap::Args)]
pub struct BinArgs {
    /// A dataset: a directory of paraforge Parquet output (its `_manifest.json`
    /// lists the files; without one every `*.parquet` below it is read) or one file.
    #[arg(long)]
    data: PathBuf,
    /// Where to write the partitions and `_manifest.json`.
    #[arg(long)]
    out: PathBuf,
    /// Skip the five para_score ranges.
    #[arg(long)]
    no_ranges: bool,
    /// Scores to cut into deciles (comma-separated): para_score,
    /// trigram_overlap, translation_score, bigram_overlap, unigram_overlap.
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
        min_tokens: a.min_tokens,
        max_tokens: a.max_tokens,
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
pub struct ReportArgs {
    /// A dataset directory or Parquet file.
    #[arg(long)]
    data: PathBuf,
    /// Word frequencies (`word count` per line) for the IDF column.
    #[arg(long, default_value = "data/freq/enwiki_vocab_top50k.txt")]
    freq: PathBuf,
    /// Output directory for report.md, report.html, report.json and the SVG figures.
    #[arg(long)]
    out: PathBuf,
}

pub fn report(a: ReportArgs) -> Result<()> {
    let r = paraforge_dataset::report::run(&a.data, &a.freq, &a.out)
        .with_context(|| format!("reporting on {}", a.data.display()))?;
    println!(
        "{} pairs; mean para_score {:.3}, mean trigram overlap {:.3}; report in {}",
        r.pairs,
        r.para_score.mean,
        r.trigram_overlap.mean,
        a.out.join("report.md").display()
    );
    Ok(())
}

#[derive(clap::Args)]
pub struct RescoreArgs {
    /// A dataset directory or Parquet file.
    #[arg(long)]
    data: PathBuf,
    /// GloVe-format vectors, e.g. from `paraforge export-vectors`.
    #[arg(long)]
    vectors: PathBuf,
    /// A new directory for the rescored dataset (same layout, own `_manifest.json`).
    #[arg(long)]
    out: PathBuf,
    /// Worker threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
}

pub fn rescore(a: RescoreArgs) -> Result<()> {
    let files = paraforge_core::schema::dataset_files(&a.data)
        .with_context(|| format!("listing {}", a.data.display()))?;
    let total: u64 = files
        .iter()
        .filter_map(|f| paraforge_core::PairReader::open(f, &[]).ok())
        .map(|r| r.num_rows().max(0) as u64)
        .sum();
    let bar = indicatif::ProgressBar::new(total).with_style(
        indicatif::ProgressStyle::with_template(
            "rescoring {bar:30} {human_pos}/{human_len} pairs ({per_sec}, eta {eta})",
        )
        .expect("valid template"),
    );
    crate::threads(a.threads)?;
    let m = paraforge_dataset::rescore::run(&a.data, &a.vectors, &a.out, &|n| bar.inc(n))
        .with_context(|| {
            format!(
                "rescoring {} with {}",
                a.data.display(),
                a.vectors.display()
            )
        })?;
    bar.finish_and_clear();
    println!(
        "{} pairs in {} files rescored with {}; mean para_score {:.3} -> {:.3}",
        m.rows,
        m.files.len(),
        a.vectors.display(),
        m.mean_before,
        m.mean_after
    );
    println!("  para_range        before      after");
    let labels = bins::PARA_RANGES.iter().map(|r| r.2);
    for label in labels.chain(["none"]) {
        let before = m.ranges_before.get(label).copied().unwrap_or(0);
        let after = m.ranges_after.get(label).copied().unwrap_or(0);
        println!("  {label:<12} {before:>11} {after:>10}");
    }
    println!("written to {} (see _manifest.json)", a.out.display());
    Ok(())
}
