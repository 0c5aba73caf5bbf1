//! Shared by both framework binaries: the pairs, the vocabulary, the
//! mini-batches, the command line and the report line, so that burn and
//! candle see exactly the same data (bench_torch.py does the same in Python).
//!
//! Data: a TSV of `reference \t translation` (run.sh writes it once from the
//! scorer corpus). Tokens: lowercased, split on whitespace, at most 30 per
//! sentence. Vocabulary: the 20,000 most frequent words (ties by word), id 0 is
//! padding, id 1 unknown, words from 2.

use std::collections::HashMap;
use std::time::Instant;

pub const MAX_TOKENS: usize = 30;
pub const VOCAB: usize = 20_000;
pub const PAD: u32 = 0;
pub const UNK: u32 = 1;
pub const DELTA: f32 = 0.4;
pub const LR: f64 = 0.001;

pub fn tokens(s: &str) -> Vec<String> {
    s.split_whitespace()
        .take(MAX_TOKENS)
        .map(|w| w.to_lowercase())
        .collect()
}

pub struct Data {
    /// Token ids of (reference, translation).
    pub pairs: Vec<(Vec<u32>, Vec<u32>)>,
    /// Rows of the embedding table (VOCAB + 2 at most).
    pub vocab_rows: usize,
}

pub fn load(path: &str) -> Data {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let raw: Vec<(Vec<String>, Vec<String>)> = text
        .lines()
        .filter_map(|l| {
            let mut it = l.split('\t');
            Some((tokens(it.next()?), tokens(it.next()?)))
        })
        .collect();
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for (a, b) in &raw {
        for w in a.iter().chain(b) {
            *counts.entry(w).or_default() += 1;
        }
    }
    let mut words: Vec<(&str, usize)> = counts.into_iter().collect();
    words.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(y.0)));
    words.truncate(VOCAB);
    let ids: HashMap<&str, u32> = words
        .iter()
        .enumerate()
        .map(|(i, w)| (w.0, i as u32 + 2))
        .collect();
    let enc = |s: &Vec<String>| -> Vec<u32> {
        let v: Vec<u32> = s
            .iter()
            .map(|w| *ids.get(w.as_str()).unwrap_or(&UNK))
            .collect();
        if v.is_empty() {
            vec![UNK]
        } else {
            v
        }
    };
    let pairs = raw.iter().map(|(a, b)| (enc(a), enc(b))).collect();
    Data {
        pairs,
        vocab_rows: words.len() + 2,
    }
}

/// One mini-batch: the 2B sentences (row 2p = pair p's reference, 2p+1 its
/// translation), padded to the longest.
pub struct Batch {
    pub n: usize,
    pub len: usize,
    /// n x len token ids, row-major.
    pub ids: Vec<u32>,
    /// n x len, 1 for a token, 0 for padding.
    pub mask: Vec<f32>,
    /// n: number of tokens of each sentence.
    pub lens: Vec<f32>,
    /// n x n: -4 where row and column belong to the same pair (never a
    /// negative: a cosine is at least -1), 0 elsewhere.
    pub same_pair: Vec<f32>,
    /// n: the index of each sentence's partner (2p <-> 2p+1).
    pub partner: Vec<u32>,
}

pub fn batch(data: &Data, step: usize, b: usize) -> Batch {
    let np = data.pairs.len();
    let sents: Vec<&Vec<u32>> = (0..b)
        .flat_map(|i| {
            let p = &data.pairs[(step * b + i) % np];
            [&p.0, &p.1]
        })
        .collect();
    let n = sents.len();
    let len = sents.iter().map(|s| s.len()).max().unwrap_or(1);
    let mut ids = vec![PAD; n * len];
    let mut mask = vec![0f32; n * len];
    for (r, s) in sents.iter().enumerate() {
        for (t, &w) in s.iter().enumerate() {
            ids[r * len + t] = w;
            mask[r * len + t] = 1.0;
        }
    }
    let lens = sents.iter().map(|s| s.len() as f32).collect();
    let mut same_pair = vec![0f32; n * n];
    for i in 0..n {
        for j in 0..n {
            if i / 2 == j / 2 {
                same_pair[i * n + j] = -4.0;
            }
        }
    }
    let partner = (0..n as u32).map(|i| i ^ 1).collect();
    Batch {
        n,
        len,
        ids,
        mask,
        lens,
        same_pair,
        partner,
    }
}

/// Command line shared by both binaries:
/// `MODE DATA MODEL IMPL STEPS WARMUP BATCH DIM [DEVICE]`
/// MODE: bench | gradcheck; MODEL: lstm | blstm; IMPL: fused | lib.
pub struct Args {
    pub mode: String,
    pub data: String,
    pub model: String,
    pub imp: String,
    pub steps: usize,
    pub warmup: usize,
    pub batch: usize,
    pub dim: usize,
    pub device: String,
}

pub fn args() -> Args {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let get = |i: usize, d: &str| a.get(i).cloned().unwrap_or_else(|| d.to_string());
    Args {
        mode: get(0, "bench"),
        data: get(1, "/work/fwbench-target/pairs.tsv"),
        model: get(2, "lstm"),
        imp: get(3, "fused"),
        steps: get(4, "20").parse().expect("STEPS"),
        warmup: get(5, "3").parse().expect("WARMUP"),
        batch: get(6, "100").parse().expect("BATCH"),
        dim: get(7, "300").parse().expect("DIM"),
        device: get(8, "cpu"),
    }
}

pub fn threads() -> usize {
    std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Runs `warmup` untimed steps then `steps` timed ones; `step(k)` trains on
/// mini-batch k and returns its loss. Prints the loss every `every` steps
/// (0: never) and one JSON line at the end.
pub fn run(peer: &str, a: &Args, every: usize, mut step: impl FnMut(usize) -> f32) {
    let mut first = f32::NAN;
    for k in 0..a.warmup {
        let l = step(k);
        if k == 0 {
            first = l;
        }
    }
    let t0 = Instant::now();
    let mut last = f32::NAN;
    let mut window = Vec::new();
    for k in a.warmup..a.warmup + a.steps {
        let l = step(k);
        if k == 0 {
            first = l;
        }
        assert!(l.is_finite(), "loss is not finite at step {k}");
        window.push(l);
        if every > 0 && (k + 1) % every == 0 {
            let m = window.iter().sum::<f32>() / window.len() as f32;
            eprintln!(
                "{peer} {} step {:>4} mean loss of last {} steps {m:.4}",
                a.model,
                k + 1,
                window.len()
            );
            window.clear();
        }
        last = l;
    }
    let secs = t0.elapsed().as_secs_f64();
    let pps = (a.steps * a.batch) as f64 / secs;
    println!(
        "{{\"peer\": \"{peer}\", \"impl\": \"{}\", \"model\": \"{}\", \"threads\": {}, \"batch\": {}, \"dim\": {}, \"steps\": {}, \"seconds\": {secs:.3}, \"pairs_per_second\": {pps:.1}, \"loss_first\": {first:.4}, \"loss_last\": {last:.4}}}",
        a.imp, a.model, threads(), a.batch, a.dim, a.steps
    );
}

/// Gradient-check report: analytic vs central finite differences.
pub fn compare(name: &str, analytic: &[f64], numeric: &[f64]) -> f64 {
    let mut worst = 0f64;
    for (&x, &y) in analytic.iter().zip(numeric) {
        let scale = x.abs().max(y.abs());
        if scale > 1e-3 {
            worst = worst.max((x - y).abs() / scale);
        }
    }
    let diff: f64 = analytic
        .iter()
        .zip(numeric)
        .map(|(x, y)| (x - y) * (x - y))
        .sum::<f64>()
        .sqrt();
    let norm: f64 = analytic.iter().map(|x| x * x).sum::<f64>().sqrt();
    println!(
        "gradcheck {name}: {} entries, |a - n| / |a| = {:.2e}, worst entry relative error (entries above 1e-3) = {worst:.2e}",
        analytic.len(),
        diff / norm.max(1e-12)
    );
    worst.max(diff / norm.max(1e-12))
}

/// A small deterministic generator (xorshift) for gradient-check inputs.
pub struct Rng(pub u64);
impl Rng {
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        lo + (hi - lo) * ((self.0 >> 40) as f32 / (1u64 << 24) as f32)
    }
    pub fn vec64(&mut self, n: usize, a: f32) -> Vec<f64> {
        (0..n).map(|_| self.uniform(-a, a) as f64).collect()
    }
}
