//! PARAGRAM word vectors (Wieting et al., 2015, section 4, eq. 2): word
//! vectors tuned on word paraphrase pairs <x1, x2> so that each pair's dot
//! product beats, by a margin, the dot product of either word with its
//! nearest word from another pair of the mini-batch, while a penalty
//! lambda * ||W - W_init||^2 keeps the table near its start. AdaGrad, as
//! the paper trains it.
//!
//! Gradients are written out by hand, as for the averaging encoders
//! (docs/training-framework.md): the loss is a sum of hinges over dot
//! products of a few hundred rows a step, and the regulariser touches only
//! the rows that occur in training pairs (every other row keeps its start,
//! where the penalty's gradient is zero).

use std::collections::HashMap;
use std::path::Path;

use paraforge_core::Vectors;
use rand::seq::SliceRandom;
use rand::SeedableRng;

use crate::TrainError;

#[derive(Debug, Clone, serde::Serialize)]
pub struct ParagramOptions {
    pub epochs: usize,
    pub batch_size: usize,
    /// AdaGrad's learning rate (the paper: 0.5).
    pub lr: f32,
    /// delta (the paper: 1).
    pub margin: f32,
    /// lambda of the pull towards the initial vectors.
    pub lambda: f32,
    pub seed: u64,
}

impl Default for ParagramOptions {
    fn default() -> Self {
        ParagramOptions {
            epochs: 20,
            batch_size: 100,
            lr: 0.5,
            margin: 1.0,
            lambda: 1e-3,
            seed: 1,
        }
    }
}

/// What a run did, epoch by epoch.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ParagramReport {
    /// Training pairs given; kept (both words in the vectors, distinct,
    /// not repeated either way round); the words they hold.
    pub pairs_given: usize,
    pub pairs: usize,
    pub unknown: usize,
    pub repeated: usize,
    pub words: usize,
    /// The mean hinge loss over the pairs, before training and after each
    /// epoch (negatives chosen in the epoch's mini-batches).
    pub loss: Vec<f64>,
}

/// Reads word pairs from a PPDB file (`LHS ||| phrase ||| paraphrase |||
/// ...`, as PPDB 2.0 and its lexical packs are written); lines whose two
/// sides are not single words are skipped and counted. A line without the
/// separators is an error naming it.
pub fn read_ppdb(path: &Path) -> Result<(Vec<(String, String)>, usize), TrainError> {
    let io = |e| TrainError::Io {
        path: path.to_path_buf(),
        source: e,
    };
    let mut f = std::fs::File::open(path).map_err(io)?;
    let mut magic = [0u8; 4];
    let n = std::io::Read::read(&mut f, &mut magic).map_err(io)?;
    if n == 4 && &magic == b"PAR1" {
        return Err(TrainError::Invalid(format!(
            "{}: a Parquet file, not a PPDB text file: for a lexicon, give --data its directory (what `paraforge lexicon --out` wrote)",
            path.display()
        )));
    }
    std::io::Seek::rewind(&mut f).map_err(io)?;
    let mut pairs = Vec::new();
    let mut phrases = 0;
    for (i, line) in paraforge_core::text::bounded_lines(std::io::BufReader::new(f)).enumerate() {
        let line = line.map_err(io)?;
        if line.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split(" ||| ").collect();
        if fields.len() < 3 {
            return Err(TrainError::Invalid(format!(
                "{} line {}: expected `LHS ||| phrase ||| paraphrase ||| ...` (PPDB), found {:?}",
                path.display(),
                i + 1,
                line.chars().take(120).collect::<String>()
            )));
        }
        let (a, b) = (fields[1].trim(), fields[2].trim());
        if a.is_empty() || b.is_empty() || a.contains(' ') || b.contains(' ') {
            phrases += 1;
            continue;
        }
        pairs.push((a.to_lowercase(), b.to_lowercase()));
    }
    Ok((pairs, phrases))
}

/// The trainable rows: the words of the kept pairs, as indices into a
/// dense table, and the pairs as (row, row).
struct Table {
    rows: Vec<u32>,
    w: Vec<f32>,
    pairs: Vec<(u32, u32)>,
}

fn table(init: &Vectors, pairs: &[(String, String)], report: &mut ParagramReport) -> Table {
    let mut index: HashMap<u32, u32> = HashMap::new();
    let mut rows = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for (a, b) in pairs {
        let (Some(x), Some(y)) = (init.index_of(a), init.index_of(b)) else {
            report.unknown += 1;
            continue;
        };
        if x == y || !seen.insert((x.min(y), x.max(y))) {
            report.repeated += 1;
            continue;
        }
        let mut id = |v: u32| {
            *index.entry(v).or_insert_with(|| {
                rows.push(v);
                (rows.len() - 1) as u32
            })
        };
        out.push((id(x), id(y)));
    }
    let d = init.dim();
    let mut w = Vec::with_capacity(rows.len() * d);
    for &r in &rows {
        w.extend_from_slice(init.row(r as usize));
    }
    Table {
        rows,
        w,
        pairs: out,
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// For each word of the batch (x1 of pair i at 2i, x2 at 2i + 1) the
/// batch word of another pair with the largest dot product, leaving out
/// the pair's own two words wherever else they occur.
fn negatives(w: &[f32], d: usize, batch: &[(u32, u32)]) -> Vec<u32> {
    let words: Vec<u32> = batch.iter().flat_map(|&(a, b)| [a, b]).collect();
    let row = |r: u32| &w[r as usize * d..(r as usize + 1) * d];
    words
        .iter()
        .enumerate()
        .map(|(i, &x)| {
            let (a, b) = batch[i / 2];
            let mut best = (f32::NEG_INFINITY, x);
            for (j, &t) in words.iter().enumerate() {
                if j / 2 == i / 2 || t == a || t == b {
                    continue;
                }
                let s = dot(row(x), row(t));
                if s > best.0 {
                    best = (s, t);
                }
            }
            best.1
        })
        .collect()
}

/// The batch's summed hinge loss, and its gradient added to `grad` scaled
/// by `scale` (1 / batch size: the objective's mean).
fn batch_loss(
    w: &[f32],
    d: usize,
    batch: &[(u32, u32)],
    neg: &[u32],
    margin: f32,
    grad: Option<(&mut [f32], f32)>,
) -> f64 {
    let row = |r: u32| &w[r as usize * d..(r as usize + 1) * d];
    let mut loss = 0.0f64;
    let mut g = grad;
    for (i, &(a, b)) in batch.iter().enumerate() {
        let pos = dot(row(a), row(b));
        for (x, other, t) in [(a, b, neg[2 * i]), (b, a, neg[2 * i + 1])] {
            if t == x {
                continue; // no other word in the batch
            }
            let h = margin - pos + dot(row(x), row(t));
            if h <= 0.0 {
                continue;
            }
            loss += f64::from(h);
            if let Some((g, s)) = g.as_mut() {
                // d/dx = t - other, d/dother = -x, d/dt = x.
                for k in 0..d {
                    let (xv, ov, tv) = (row(x)[k], row(other)[k], row(t)[k]);
                    g[x as usize * d + k] += *s * (tv - ov);
                    g[other as usize * d + k] -= *s * xv;
                    g[t as usize * d + k] += *s * xv;
                }
            }
        }
    }
    loss
}

/// Trains on `pairs` from `init`; returns the vectors (every row of
/// `init`, the trained ones changed) and the report.
pub fn train(
    init: &Vectors,
    pairs: &[(String, String)],
    o: &ParagramOptions,
    progress: &mut dyn FnMut(usize, f64),
) -> Result<(Vectors, ParagramReport), TrainError> {
    if o.batch_size < 2 {
        return Err(TrainError::Invalid(format!(
            "--batch-size {}: negatives come from the other pairs of a batch: at least 2",
            o.batch_size
        )));
    }
    for (name, v) in [
        ("--lr", o.lr),
        ("--margin", o.margin),
        ("--lambda-w", o.lambda),
    ] {
        if !(v.is_finite() && v >= 0.0) || (name == "--lr" && v == 0.0) {
            return Err(TrainError::Invalid(format!(
                "{name} {v}: must be a finite number{}",
                if name == "--lr" {
                    " above 0"
                } else {
                    ", 0 or more"
                }
            )));
        }
    }
    use crate::options::{MAX_LR, MAX_MARGIN};
    if o.margin > MAX_MARGIN || o.lr > MAX_LR {
        return Err(TrainError::Invalid(format!(
            "--margin {} / --lr {}: the margin is at most {MAX_MARGIN} (between two cosines), the step size at most {MAX_LR}",
            o.margin, o.lr
        )));
    }
    let mut report = ParagramReport {
        pairs_given: pairs.len(),
        pairs: 0,
        unknown: 0,
        repeated: 0,
        words: 0,
        loss: Vec::new(),
    };
    let mut t = table(init, pairs, &mut report);
    report.pairs = t.pairs.len();
    report.words = t.rows.len();
    if t.pairs.len() < 2 {
        return Err(TrainError::Invalid(format!(
            "{} usable word pairs of {} ({} with a word the vectors lack, {} repeated or of one word): at least 2 are needed",
            t.pairs.len(),
            pairs.len(),
            report.unknown,
            report.repeated
        )));
    }
    let d = init.dim();
    let start = t.w.clone();
    let mut hist = vec![0f32; t.w.len()];
    let mut grad = vec![0f32; t.w.len()];
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(o.seed);
    let mut order = t.pairs.clone();
    let mean_loss = |w: &[f32], order: &[(u32, u32)]| {
        let mut sum = 0.0;
        for b in order.chunks(o.batch_size) {
            sum += batch_loss(w, d, b, &negatives(w, d, b), o.margin, None);
        }
        sum / order.len() as f64
    };
    report.loss.push(mean_loss(&t.w, &order));
    for epoch in 1..=o.epochs {
        order.shuffle(&mut rng);
        for b in order.chunks(o.batch_size) {
            grad.iter_mut().for_each(|g| *g = 0.0);
            let neg = negatives(&t.w, d, b);
            batch_loss(
                &t.w,
                d,
                b,
                &neg,
                o.margin,
                Some((&mut grad, 1.0 / b.len() as f32)),
            );
            for (i, g) in grad.iter_mut().enumerate() {
                *g += 2.0 * o.lambda * (t.w[i] - start[i]);
                if *g != 0.0 {
                    hist[i] += *g * *g;
                    t.w[i] -= o.lr * *g / (hist[i].sqrt() + 1e-8);
                }
            }
        }
        if let Some(x) = t.w.iter().find(|x| !x.is_finite()) {
            return Err(TrainError::Invalid(format!(
                "epoch {epoch}: a word vector holds {x}; lower --lr"
            )));
        }
        let l = mean_loss(&t.w, &order);
        report.loss.push(l);
        progress(epoch, l);
    }
    let trained: HashMap<u32, usize> = t.rows.iter().enumerate().map(|(i, &r)| (r, i)).collect();
    let words: Vec<(&str, &[f32])> = (0..init.len())
        .map(|r| {
            let v = match trained.get(&(r as u32)) {
                Some(&i) => &t.w[i * d..(i + 1) * d],
                None => init.row(r),
            };
            (init.word(r), v)
        })
        .collect();
    let out = Vectors::from_pairs(d, words);
    Ok((out, report))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vectors() -> Vectors {
        let rows: Vec<(String, Vec<f32>)> = (0..8)
            .map(|i| {
                let v = (0..4)
                    .map(|k| ((i * 7 + k * 3) % 11) as f32 / 10.0 - 0.4)
                    .collect();
                (format!("w{i}"), v)
            })
            .collect();
        Vectors::from_pairs(4, rows.iter().map(|(w, v)| (w.as_str(), v.as_slice())))
    }

    /// The hand-written gradient of the batch loss (negatives held fixed,
    /// as in training) equals finite differences.
    #[test]
    fn gradients_match_finite_differences() {
        let v = vectors();
        let pairs: Vec<(String, String)> = [("w0", "w1"), ("w2", "w3"), ("w4", "w5"), ("w6", "w0")]
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        let mut rep = ParagramReport {
            pairs_given: 0,
            pairs: 0,
            unknown: 0,
            repeated: 0,
            words: 0,
            loss: vec![],
        };
        let t = table(&v, &pairs, &mut rep);
        let d = 4;
        let neg = negatives(&t.w, d, &t.pairs);
        let mut g = vec![0f32; t.w.len()];
        let l0 = batch_loss(&t.w, d, &t.pairs, &neg, 2.0, Some((&mut g, 1.0)));
        assert!(l0 > 0.0);
        for i in 0..t.w.len() {
            let mut w = t.w.clone();
            let h = 1e-3;
            w[i] += h;
            let up = batch_loss(&w, d, &t.pairs, &neg, 2.0, None);
            w[i] -= 2.0 * h;
            let down = batch_loss(&w, d, &t.pairs, &neg, 2.0, None);
            let fd = (up - down) / (2.0 * h as f64);
            assert!((fd - f64::from(g[i])).abs() < 1e-2, "{i}: {fd} vs {}", g[i]);
        }
    }

    #[test]
    fn negatives_come_from_other_pairs_and_skip_the_pairs_words() {
        let w: Vec<f32> = vec![1.0, 0.0, 0.9, 0.1, 0.0, 1.0, 1.0, 0.0];
        // Pairs (0,1), (2,3): row 3 equals row 0 but belongs to the other
        // pair; row 1 is the own pair's and may not be taken.
        let neg = negatives(&w, 2, &[(0, 1), (2, 3)]);
        assert_eq!(neg[0], 3);
        assert!(neg[2] == 0 || neg[2] == 1);
        // A word of the own pair met again in another pair is skipped.
        let neg = negatives(&w, 2, &[(0, 1), (1, 2)]);
        assert_eq!(neg[0], 2);
    }

    #[test]
    fn ppdb_lines_are_parsed_and_phrases_counted() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ppdb.txt");
        std::fs::write(
            &p,
            "[JJ] ||| big ||| large ||| PPDB2.0Score=3.1 ||| 0-0 ||| Equivalence\n\
             [NP] ||| the car ||| the automobile ||| x ||| 0-0 1-1 ||| Equivalence\n\
             [VB] ||| Laugh ||| chuckle ||| x\n",
        )
        .unwrap();
        let (pairs, phrases) = read_ppdb(&p).unwrap();
        assert_eq!(
            pairs,
            vec![
                ("big".into(), "large".into()),
                ("laugh".into(), "chuckle".into())
            ]
        );
        assert_eq!(phrases, 1);
        std::fs::write(&p, "big\tlarge\n").unwrap();
        let e = read_ppdb(&p).unwrap_err().to_string();
        assert!(e.contains("line 1") && e.contains("PPDB"), "{e}");
    }
}
