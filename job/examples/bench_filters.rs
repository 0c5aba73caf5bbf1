//! The language filter's accuracy and speed on a bitext: how many clean
//! pairs it drops, and how many pairs whose sides are swapped (each side in
//! the other's language, the junk it is for) it catches, with the rules
//! `[filters]` runs. docs/filters.md quotes its output.
//!
//! usage: bench_filters SOURCE_LANG REFERENCE_LANG FILE.tsv... [-- KEY=VALUE ...]
//! FILE.tsv in CzEng layout (id, score, source, reference); the settings
//! after `--` are `[filters]` keys (e.g. lang_min_confidence=0.5,
//! lang_candidates=ces,eng,slk).

use std::time::Instant;

use paraforge_job::filters::{Filters, PreFilter};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (files, settings) = match args.iter().position(|a| a == "--") {
        Some(i) => (&args[..i], &args[i + 1..]),
        None => (&args[..], &[][..]),
    };
    if files.len() < 3 {
        eprintln!("usage: bench_filters SOURCE_LANG REFERENCE_LANG FILE.tsv... [-- KEY=VALUE ...]");
        std::process::exit(2);
    }
    let mut cfg = Filters {
        source_lang: Some(files[0].clone()),
        reference_lang: Some(files[1].clone()),
        ..Filters::default()
    };
    for s in settings {
        match s.split_once('=') {
            Some(("lang_min_confidence", v)) => cfg.lang_min_confidence = v.parse().ok(),
            Some(("lang_candidates", v)) => {
                cfg.lang_candidates = v.split(',').map(String::from).collect()
            }
            _ => {
                eprintln!("unknown setting {s:?}");
                std::process::exit(2);
            }
        }
    }
    let filter = PreFilter::new(&cfg).unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(2)
    });
    let mut pairs = Vec::new();
    for f in &files[2..] {
        let text = std::fs::read_to_string(f).unwrap_or_else(|e| {
            eprintln!("{f}: {e}");
            std::process::exit(1)
        });
        for line in text.lines() {
            let c: Vec<&str> = line.split('\t').collect();
            if c.len() == 4 {
                pairs.push((c[2].to_string(), c[3].to_string()));
            }
        }
    }
    let t = Instant::now();
    let kept_clean = pairs
        .iter()
        .filter(|(s, r)| filter.check(s, r).is_none())
        .count();
    let secs = t.elapsed().as_secs_f64();
    let caught_swapped = pairs
        .iter()
        .filter(|(s, r)| filter.check(r, s).is_some())
        .count();
    let n = pairs.len().max(1) as f64;
    println!(
        "{{\"pairs\":{},\"settings\":{:?},\"clean_dropped_percent\":{:.3},\"swapped_caught_percent\":{:.3},\"pairs_per_second\":{:.0}}}",
        pairs.len(),
        settings.join(" "),
        100.0 * (pairs.len() - kept_clean) as f64 / n,
        100.0 * caught_swapped as f64 / n,
        n / secs
    );
}
