//! The engine against transformers: tokenizer ids and text, and generated
//! tokens and scores for greedy, beam 4 and beam 12, on real Czech
//! sentences, with the references recorded by tools/reference_outputs.py.
//! Also the model layouts (split and merged decoder, int8) and bad input.

use std::path::PathBuf;

use paraforge_nmt::{Flag, GenerateOptions, LoadOptions, NmtError, Translator};
use paraforge_tests::{data, model, read_jsonl};
use serde::Deserialize;

fn model_dir() -> PathBuf {
    std::env::var_os("PARAFORGE_TEST_MODEL").map_or_else(|| model("tiny-cs-en"), PathBuf::from)
}

fn reference_dir() -> PathBuf {
    std::env::var_os("PARAFORGE_TEST_REFERENCE").map_or_else(|| data("reference"), PathBuf::from)
}

fn load(opts: &LoadOptions) -> Translator {
    Translator::load(&model_dir(), opts).unwrap_or_else(|e| panic!("loading the test model: {e}"))
}

#[derive(Deserialize)]
struct TokCase {
    id: String,
    cs: String,
    source_ids: Vec<u32>,
    target_ids: Vec<u32>,
    decoded: String,
}

#[derive(Deserialize)]
struct GenCase {
    source: String,
    tokens: Vec<u32>,
    score: f32,
}

#[derive(Deserialize)]
struct RefSettings {
    max_new_tokens: usize,
    batch_size: usize,
}

#[test]
fn tokenizer_matches_marian_tokenizer() {
    let t = load(&LoadOptions::default());
    let cases: Vec<TokCase> = read_jsonl(&reference_dir().join("tokenizer.jsonl"));
    assert!(
        cases.len() >= 1000,
        "need at least 1,000 reference sentences, have {}",
        cases.len()
    );
    let mut enc_bad = Vec::new();
    let mut dec_bad = Vec::new();
    for c in &cases {
        let ids = t.tokenizer().encode(&c.cs);
        if ids != c.source_ids {
            enc_bad.push(format!(
                "{}: {:?}\n  ours   {ids:?}\n  theirs {:?}",
                c.id, c.cs, c.source_ids
            ));
        }
        let text = t.tokenizer().decode(&c.target_ids);
        if text != c.decoded {
            dec_bad.push(format!("{}: ours {text:?} theirs {:?}", c.id, c.decoded));
        }
    }
    assert!(
        enc_bad.is_empty(),
        "{} of {} encodings differ:\n{}",
        enc_bad.len(),
        cases.len(),
        enc_bad.join("\n")
    );
    assert!(
        dec_bad.is_empty(),
        "{} of {} decodings differ:\n{}",
        dec_bad.len(),
        cases.len(),
        dec_bad.join("\n")
    );
}

/// Runs the engine with the reference settings and compares.
fn parity(num_beams: usize, opts: &LoadOptions) -> (usize, usize, f32) {
    let settings: RefSettings = serde_json::from_str(
        &std::fs::read_to_string(reference_dir().join("settings.json")).unwrap(),
    )
    .unwrap();
    let cases: Vec<GenCase> =
        read_jsonl(&reference_dir().join(format!("generate-beam{num_beams}.jsonl")));
    assert!(cases.len() >= 40, "need at least 500 reference sentences");
    let mut t = load(opts);
    let sources: Vec<&str> = cases.iter().map(|c| c.source.as_str()).collect();
    let o = GenerateOptions {
        num_beams,
        max_new_tokens: Some(settings.max_new_tokens),
        batch_size: settings.batch_size,
        ..GenerateOptions::default()
    };
    let out = t.translate(&sources, &o).expect("translate");
    let (mut same, mut worst) = (0, 0.0f32);
    let mut diffs = Vec::new();
    for (c, o) in cases.iter().zip(&out) {
        if o.tokens == c.tokens {
            same += 1;
            worst = worst.max((o.score - c.score).abs());
        } else if diffs.len() < 5 {
            diffs.push(format!(
                "{:?}\n  ours   {:?} {}\n  theirs {:?} {}",
                c.source, o.tokens, o.score, c.tokens, c.score
            ));
        }
    }
    eprintln!(
        "beam {num_beams}: {same}/{} identical, worst score difference {worst:e}\n{}",
        cases.len(),
        diffs.join("\n")
    );
    (same, cases.len(), worst)
}

fn assert_parity(num_beams: usize, opts: &LoadOptions) {
    let (same, n, worst) = parity(num_beams, opts);
    assert!(
        same as f64 >= 0.995 * n as f64,
        "beam {num_beams}: only {same} of {n} sentences have transformers' tokens"
    );
    assert!(worst < 1e-4, "beam {num_beams}: a score differs by {worst}");
}

#[test]
fn greedy_matches_transformers() {
    assert_parity(1, &LoadOptions::default());
}

#[test]
fn beam4_matches_transformers() {
    assert_parity(4, &LoadOptions::default());
}

#[test]
fn beam12_matches_transformers() {
    assert_parity(12, &LoadOptions::default());
}
