//! Scoring throughput: every score of every pair on all cores, then every
//! score but sentence BLEU (tokenization, unigram/bigram/trigram overlap and
//! para_score, what the Python peer computes). Used by `make bench-score`
//! (tools/bench/bench_score.py), which runs the Python peer on the same pairs.
//!
//! usage: bench_score PAIRS.tsv SCORER [MIN_PAIRS]
//! PAIRS.tsv holds `reference<TAB>translation` per line; the pairs are
//! repeated until at least MIN_PAIRS (default 2,000,000) are scored.
//! SCORER is anything `[scoring] model` takes (a `.pfe` model or a
//! directory holding one, such as models/scorer-trigram; a neural encoder's
//! directory; an exported transformer such as all-MiniLM-L6-v2) or
//! GloVe-format word vectors.

use std::path::Path;
use std::time::Instant;

use paraforge_core::{Scorer, SentenceEncoder};
use paraforge_scorer::load_encoder;
use rayon::prelude::*;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: bench_score PAIRS.tsv SCORER [MIN_PAIRS]");
        std::process::exit(2);
    }
    let text = std::fs::read_to_string(&args[1]).unwrap_or_else(|e| {
        eprintln!("{}: {e}", args[1]);
        std::process::exit(1)
    });
    let pairs: Vec<(&str, &str)> = text.lines().filter_map(|l| l.split_once('\t')).collect();
    if pairs.is_empty() {
        eprintln!("{}: no reference<TAB>translation line", args[1]);
        std::process::exit(1)
    }
    let min: usize = args
        .get(3)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2_000_000);
    let t = Instant::now();
    let path = Path::new(&args[2]);
    // The worker's own loader: a model or vectors, bf16 models packed.
    let is_model = path.is_dir() || args[2].ends_with(".pfe");
    let (model, vecs) = if is_model {
        (Some(path), None)
    } else {
        (None, Some(path))
    };
    let encoder: Box<dyn SentenceEncoder> = match load_encoder(model, vecs) {
        Ok(Some(e)) => e,
        Ok(None) => unreachable!("a path was given"),
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1)
        }
    };
    let vectors = &*encoder;
    let load_s = t.elapsed().as_secs_f64();
    // With BENCH_DUMP=FILE, also write every pair's scores once (for the
    // agreement check against the Python definitions).
    if let Some(dump) = std::env::var_os("BENCH_DUMP") {
        let mut scorer = Scorer::new(Some(vectors));
        let mut out = String::new();
        for (r, t) in &pairs {
            let s = scorer.score(r, t);
            let para = s.para_score.map_or("null".to_string(), |p| p.to_string());
            out.push_str(&format!(
                "{{\"para_score\":{para},\"unigram_overlap\":{},\"bigram_overlap\":{},\"trigram_overlap\":{},\"reference_len\":{},\"translation_len\":{}}}\n",
                s.unigram_overlap, s.bigram_overlap, s.trigram_overlap, s.reference_len, s.translation_len
            ));
        }
        std::fs::write(&dump, out).unwrap_or_else(|e| {
            eprintln!("{}: {e}", std::path::Path::new(&dump).display());
            std::process::exit(1)
        });
    }
    let rounds = min.div_ceil(pairs.len().max(1));
    // Every column, then all but sentence BLEU (the scores para_score's
    // speed target was set on: tokenization, overlaps, para_score), then
    // sentence BLEU alone (what that column costs by itself).
    #[derive(Clone, Copy, PartialEq)]
    enum Mode {
        All,
        WithoutBleu,
        BleuOnly,
    }
    let run = |mode: Mode| {
        let t = Instant::now();
        let checksum: f64 = (0..rounds)
            .into_par_iter()
            .map_init(
                || {
                    let s = Scorer::new(Some(vectors));
                    let s = if mode == Mode::WithoutBleu {
                        s.without_bleu()
                    } else {
                        s
                    };
                    (s, paraforge_core::bleu::Bleu::default())
                },
                |(scorer, bleu), _| {
                    pairs
                        .iter()
                        .map(|(r, t)| {
                            if mode == Mode::BleuOnly {
                                return bleu.score(t, r, Default::default());
                            }
                            let s = scorer.score(r, t);
                            s.trigram_overlap as f64
                                + s.para_score.unwrap_or(0.0) as f64
                                + s.sentence_bleu as f64
                        })
                        .sum::<f64>()
                },
            )
            .sum();
        (t.elapsed().as_secs_f64(), checksum)
    };
    let (secs, checksum) = run(Mode::All);
    let (secs_nb, checksum_nb) = run(Mode::WithoutBleu);
    let (secs_bleu, _) = run(Mode::BleuOnly);
    if encoder.failures() > 0 {
        eprintln!(
            "{}: the encoder failed on {} sentences",
            args[2],
            encoder.failures()
        );
        std::process::exit(1)
    }
    let n = rounds * pairs.len();
    println!(
        "{{\"pairs\":{n},\"seconds\":{secs:.4},\"pairs_per_second\":{:.0},\"pairs_per_second_without_bleu\":{:.0},\"pairs_per_second_bleu_only\":{:.0},\"threads\":{},\"scorer\":{:?},\"dim\":{},\"load_seconds\":{load_s:.3},\"checksum\":{checksum:.3},\"checksum_without_bleu\":{checksum_nb:.3}}}",
        n as f64 / secs,
        n as f64 / secs_nb,
        n as f64 / secs_bleu,
        rayon::current_num_threads(),
        vectors.describe(),
        vectors.dim()
    );
}
