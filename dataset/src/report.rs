//! `paraforge report`: what a scored corpus looks like, in the terms of
//! Tables 1 and 3 of Wieting and Gimpel (2018), with histograms of every score and a scatter
//! of para_score against trigram overlap (SVG, drawn with plotters),
//! gathered in one Markdown page and one HTML page.
//!
//! Definitions used here:
//! * lengths are in scoring tokens (`reference_len`, `translation_len`);
//! * IDF of a word is ln(total / count) from a word-frequency list
//!   (`word count` per line; the bundled one is English Wikipedia); words not
//!   in the list get the IDF of the rarest listed word; a sentence's IDF is
//!   the mean over its tokens; the table reports the mean over references;
//! * vocabulary entropy is the entropy (nats) of the unigram distribution of
//!   the reference tokens.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use arrow_array::{Array, BooleanArray, Float32Array, Int32Array, StringArray};
use paraforge_core::dataset::dataset_files;
use paraforge_core::schema::{self, col, DataError, PairReader};
use paraforge_core::tokenize;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::bins::{para_range, PARA_RANGES};

mod figures;
mod page;

/// Example pairs kept per para_score range.
const EXAMPLES: u64 = 5;

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error(transparent)]
    Data(#[from] DataError),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}:{line}: expected `word count`")]
    BadFrequencyLine { path: PathBuf, line: usize },
    #[error("{0}: no word counts (`--freq none` leaves the IDF column out)")]
    EmptyFrequencies(PathBuf),
    #[error("drawing {path}: {reason}")]
    Plot { path: PathBuf, reason: String },
    #[error(transparent)]
    Output(#[from] crate::output::OutputError),
    #[error("{0}: holds files that are not a paraforge report (no report.json); choose a new or empty directory")]
    NotAReport(PathBuf),
    #[error("{0}: the dataset has no pairs to report on")]
    Empty(PathBuf),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ReportError + '_ {
    move |source| ReportError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Word IDFs from a frequency list.
pub struct Idf {
    idf: HashMap<String, f32>,
    unknown: f32,
}

impl Idf {
    pub fn load(path: &Path) -> Result<Idf, ReportError> {
        let text = std::fs::read_to_string(path).map_err(io(path))?;
        let mut counts = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let mut it = line.split_whitespace();
            let (Some(w), Some(c), None) = (it.next(), it.next(), it.next()) else {
                return Err(ReportError::BadFrequencyLine {
                    path: path.to_path_buf(),
                    line: i + 1,
                });
            };
            let c: f64 = c.parse().map_err(|_| ReportError::BadFrequencyLine {
                path: path.to_path_buf(),
                line: i + 1,
            })?;
            counts.push((w.to_lowercase(), c.max(1.0)));
        }
        if counts.is_empty() {
            return Err(ReportError::EmptyFrequencies(path.to_path_buf()));
        }
        let total: f64 = counts.iter().map(|(_, c)| c).sum();
        let min = counts.iter().map(|(_, c)| *c).fold(f64::INFINITY, f64::min);
        let mut idf = HashMap::with_capacity(counts.len());
        for (w, c) in counts {
            idf.entry(w).or_insert(((total / c).ln()) as f32);
        }
        Ok(Idf {
            idf,
            unknown: (total / min.max(1.0)).ln() as f32,
        })
    }

    pub fn get(&self, w: &str) -> f32 {
        self.idf.get(w).copied().unwrap_or(self.unknown)
    }
}

/// Running mean and standard deviation (Welford).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Moments {
    pub n: u64,
    pub mean: f64,
    m2: f64,
}

impl Moments {
    pub fn add(&mut self, x: f64) {
        self.n += 1;
        let d = x - self.mean;
        self.mean += d / self.n as f64;
        self.m2 += d * (x - self.mean);
    }
    pub fn std(&self) -> f64 {
        if self.n < 2 {
            0.0
        } else {
            (self.m2 / (self.n - 1) as f64).sqrt()
        }
    }
}

/// Pairs per para_score range with their mean trigram overlap (Wieting and Gimpel,
/// 2018, Table 3, in brief): what `make demo` and `paraforge report` print.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RangeTally {
    pub pairs: [u64; PARA_RANGES.len()],
    pub trigram_sum: [f64; PARA_RANGES.len()],
    /// Pairs without a para_score.
    pub none: u64,
}

impl RangeTally {
    pub fn add(&mut self, para: Option<f32>, trigram_overlap: f32) {
        match para_range(para) {
            Some(k) => {
                self.pairs[k] += 1;
                self.trigram_sum[k] += trigram_overlap as f64;
            }
            None => self.none += 1,
        }
    }

    /// The range's label as the paper writes it: "(-inf, 0.2]" ... "(0.8, 1.0]".
    pub fn label(k: usize) -> String {
        let (lo, hi, _) = PARA_RANGES[k];
        if lo.is_finite() {
            format!("({lo:.1}, {:.1}]", hi.min(1.0))
        } else {
            format!("(-inf, {hi:.1}]")
        }
    }

    /// One line per range: pairs, share of the scored pairs, mean trigram overlap.
    pub fn lines(&self) -> Vec<String> {
        let scored: u64 = self.pairs.iter().sum();
        let mut out = vec!["para_score range   pairs   share  mean trigram overlap".to_string()];
        for k in 0..PARA_RANGES.len() {
            let n = self.pairs[k];
            let mean = if n > 0 {
                format!("{:.3}", self.trigram_sum[k] / n as f64)
            } else {
                "-".into()
            };
            out.push(format!(
                "{:<16} {n:>7} {:>6.1}%  {mean}",
                Self::label(k),
                100.0 * n as f64 / scored.max(1) as f64
            ));
        }
        if self.none > 0 {
            out.push(format!("{:<16} {:>7}", "no para_score", self.none));
        }
        out
    }
}

/// What a finished job prints about its output: mean scores, the five
/// para_score ranges (Wieting and Gimpel, 2018, Table 3) and a few example rows.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub pairs: u64,
    /// None where no pair has a para_score (no scorer for the language).
    pub mean_para_score: Option<f64>,
    pub mean_trigram_overlap: f64,
    /// None where every translation_score is null (an input of pairs).
    pub mean_translation_score: Option<f64>,
    pub ranges: RangeTally,
    pub examples: Vec<Example>,
}

/// A pair the summary and the report show, with its scores.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Example {
    pub reference: String,
    pub translation: String,
    pub para_score: Option<f32>,
    pub trigram_overlap: f32,
    /// None where the input held the translation without a score.
    pub translation_score: Option<f32>,
}

impl Summary {
    /// Reads every pairs file of a local output directory.
    pub fn read(out: &Path) -> Result<Summary, DataError> {
        let (mut para, mut para_n, mut tri, mut ts, mut ts_n) = (0f64, 0u64, 0f64, 0f64, 0u64);
        let mut s = Summary::default();
        for f in dataset_files(out)? {
            for b in PairReader::open(
                &f,
                &[
                    col::REFERENCE,
                    col::TRANSLATION,
                    col::PARA_SCORE,
                    col::TRIGRAM_OVERLAP,
                ],
            )? {
                let b = b?;
                let r = schema::column::<StringArray>(&b, col::REFERENCE, &f)?;
                let t = schema::column::<StringArray>(&b, col::TRANSLATION, &f)?;
                let p = schema::column::<Float32Array>(&b, col::PARA_SCORE, &f)?;
                let g = schema::column::<Float32Array>(&b, col::TRIGRAM_OVERLAP, &f)?;
                let x = schema::column::<Float32Array>(&b, col::TRANSLATION_SCORE, &f)?;
                for i in 0..b.num_rows() {
                    s.pairs += 1;
                    let pi = (!p.is_null(i)).then(|| p.value(i));
                    if let Some(v) = pi {
                        para += v as f64;
                        para_n += 1;
                    }
                    tri += g.value(i) as f64;
                    // Null where the input held the translation without a score.
                    let xi = (!x.is_null(i)).then(|| x.value(i));
                    if let Some(v) = xi {
                        ts += v as f64;
                        ts_n += 1;
                    }
                    s.ranges.add(pi, g.value(i));
                    if s.examples.len() < 5 && i % 97 == 3 {
                        s.examples.push(Example {
                            reference: r.value(i).to_string(),
                            translation: t.value(i).to_string(),
                            para_score: pi,
                            trigram_overlap: g.value(i),
                            translation_score: xi,
                        });
                    }
                }
            }
        }
        s.mean_para_score = (para_n > 0).then(|| para / para_n as f64);
        s.mean_trigram_overlap = tri / s.pairs.max(1) as f64;
        s.mean_translation_score = (ts_n > 0).then(|| ts / ts_n as f64);
        Ok(s)
    }

    /// The summary as printed, one line each, indented.
    pub fn lines(&self) -> Vec<String> {
        let mean = |v: Option<f64>| v.map_or_else(|| "none".to_string(), |v| format!("{v:.3}"));
        let mut out = vec![format!(
            "  mean para_score {}, mean trigram overlap {:.3}, mean translation score {} over {} pairs",
            mean(self.mean_para_score),
            self.mean_trigram_overlap,
            mean(self.mean_translation_score),
            self.pairs
        )];
        if self.pairs > 0 && self.mean_para_score.is_none() {
            // A language without a scorer (docs/new-language.md).
            out.push(
                "  no pair has a para_score: the job has no scorer for its references' language; \
                 `paraforge rescore --data OUTPUT --bootstrap trigram --out NEW` learns one from the pairs"
                    .into(),
            );
        }
        out.extend(self.ranges.lines().into_iter().map(|l| format!("  {l}")));
        out.push("  examples (reference -> back-translation):".into());
        for e in &self.examples {
            let (r, t, p, g, x) = (
                &e.reference,
                &e.translation,
                e.para_score,
                e.trigram_overlap,
                e.translation_score,
            );
            let ps = p.map_or_else(|| "null".to_string(), |v| format!("{v:.3}"));
            let xs = x.map_or_else(|| "null".to_string(), |v| format!("{v:.2}"));
            out.push(format!(
                "  {r}\n    -> {t}   (para {ps}, trigram {g:.2}, score {xs})"
            ));
        }
        out
    }
}

impl Report {
    /// The report's ranges as a [`RangeTally`].
    pub fn range_tally(&self) -> RangeTally {
        let mut t = RangeTally {
            none: self.no_para_score,
            ..RangeTally::default()
        };
        for (k, row) in self.ranges.iter().enumerate().take(PARA_RANGES.len()) {
            t.pairs[k] = row.pairs;
            t.trigram_sum[k] = row.trigram_overlap.mean * row.pairs as f64;
        }
        t
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct RangeRow {
    pub label: String,
    pub pairs: u64,
    pub para_score: Moments,
    pub trigram_overlap: Moments,
    pub reference_len: Moments,
    pub translation_len: Moments,
    pub translation_score: Moments,
    /// A uniform sample of the range's pairs (at most [`EXAMPLES`]).
    pub examples: Vec<Example>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub input: String,
    pub pairs: u64,
    pub reference_len: Moments,
    pub translation_len: Moments,
    pub reference_idf: Moments,
    pub para_score: Moments,
    pub trigram_overlap: Moments,
    pub translation_score: Moments,
    pub vocab_entropy: f64,
    pub vocab_size: usize,
    pub no_para_score: u64,
    pub truncated: u64,
    pub ranges: Vec<RangeRow>,
    /// Input lines the job did not use, by reason code, from the job's
    /// `_manifest.json` (empty for a dataset without one).
    pub rejects_by_reason: std::collections::BTreeMap<String, u64>,
}

/// A fixed-range histogram; values outside are clamped to the end bins.
struct Hist {
    lo: f64,
    hi: f64,
    bins: Vec<u64>,
}

impl Hist {
    fn new(lo: f64, hi: f64, n: usize) -> Hist {
        Hist {
            lo,
            hi,
            bins: vec![0; n],
        }
    }
    fn add(&mut self, x: f64) {
        if x.is_nan() {
            return;
        }
        let n = self.bins.len();
        let i = ((x - self.lo) / (self.hi - self.lo) * n as f64).floor();
        self.bins[(i.max(0.0) as usize).min(n - 1)] += 1;
    }
}

const SCATTER_POINTS: usize = 4000;

/// Computes the report and writes `report.md`, `report.html`, `report.json`
/// and the SVG figures into `out`; without `freq`, the IDF column is left
/// out ("none").
pub fn run(input: &Path, freq: Option<&Path>, out: &Path) -> Result<Report, ReportError> {
    // The report's files are rewritten in place: only a new, empty or
    // earlier report's directory, apart from the dataset, takes them.
    crate::output::check_apart(out, &[input])?;
    if out.is_file() {
        return Err(crate::output::OutputError::IsFile(out.to_path_buf()).into());
    }
    if out.is_dir()
        && std::fs::read_dir(out).map_err(io(out))?.next().is_some()
        && !out.join("report.json").is_file()
    {
        return Err(ReportError::NotAReport(out.to_path_buf()));
    }
    let mut acc = Tally {
        idf: freq.map(Idf::load).transpose()?,
        r: Report {
            input: input.display().to_string(),
            ranges: PARA_RANGES
                .iter()
                .map(|&(_, _, l)| RangeRow {
                    label: l.to_string(),
                    ..Default::default()
                })
                .collect(),
            rejects_by_reason: manifest_rejects(input)?,
            ..Default::default()
        },
        hists: histograms(),
        vocab: HashMap::new(),
        scatter: Vec::with_capacity(SCATTER_POINTS),
        rng: rand_chacha::ChaCha8Rng::seed_from_u64(7),
    };
    let required = [
        col::REFERENCE,
        col::TRANSLATION,
        col::PARA_SCORE,
        col::TRIGRAM_OVERLAP,
        col::TRANSLATION_SCORE,
        col::REFERENCE_LEN,
        col::TRANSLATION_LEN,
    ];
    for path in &dataset_files(input)? {
        for batch in PairReader::open(path, &required)? {
            acc.add_batch(&batch?, path)?;
        }
    }
    if acc.r.pairs == 0 {
        return Err(ReportError::Empty(input.to_path_buf()));
    }
    let total: u64 = acc.vocab.values().sum();
    acc.r.vocab_size = acc.vocab.len();
    acc.r.vocab_entropy = acc
        .vocab
        .values()
        .map(|&c| {
            let p = c as f64 / total as f64;
            -p * p.ln()
        })
        .sum();
    write_report(out, input, &acc)?;
    Ok(acc.r)
}

/// The histograms drawn: (column, title, x axis with its unit, bins).
fn histograms() -> Vec<(&'static str, &'static str, &'static str, Hist)> {
    let overlap = "share of n-grams in common (0-1)";
    vec![
        (
            col::PARA_SCORE,
            "para_score",
            "para_score (cosine of the two embeddings)",
            Hist::new(-0.2, 1.0, 60),
        ),
        (
            col::TRIGRAM_OVERLAP,
            "trigram overlap",
            overlap,
            Hist::new(0.0, 1.0, 50),
        ),
        (
            col::BIGRAM_OVERLAP,
            "bigram overlap",
            overlap,
            Hist::new(0.0, 1.0, 50),
        ),
        (
            col::UNIGRAM_OVERLAP,
            "unigram overlap",
            overlap,
            Hist::new(0.0, 1.0, 50),
        ),
        (
            col::TRANSLATION_SCORE,
            "translation score",
            "translation score (log-probability per token)",
            // Fine bins over a wide span: the figure shows the occupied part.
            Hist::new(-20.0, 0.0, 2000),
        ),
        (
            col::REFERENCE_LEN,
            "reference length",
            "reference length (tokens)",
            Hist::new(0.0, 80.0, 80),
        ),
        (
            col::TRANSLATION_LEN,
            "translation length",
            "translation length (tokens)",
            Hist::new(0.0, 80.0, 80),
        ),
    ]
}

/// What the report counts as it reads the pairs.
struct Tally {
    idf: Option<Idf>,
    r: Report,
    hists: Vec<(&'static str, &'static str, &'static str, Hist)>,
    vocab: HashMap<String, u64>,
    /// A reservoir sample for the scatter plot.
    scatter: Vec<(f32, f32)>,
    rng: rand_chacha::ChaCha8Rng,
}

impl Tally {
    fn add_batch(&mut self, b: &arrow_array::RecordBatch, path: &Path) -> Result<(), ReportError> {
        let refs = schema::column::<StringArray>(b, col::REFERENCE, path)?;
        let hyps = schema::column::<StringArray>(b, col::TRANSLATION, path)?;
        let para = schema::column::<Float32Array>(b, col::PARA_SCORE, path)?;
        let tri = schema::column::<Float32Array>(b, col::TRIGRAM_OVERLAP, path)?;
        let ts = schema::column::<Float32Array>(b, col::TRANSLATION_SCORE, path)?;
        let rl = schema::column::<Int32Array>(b, col::REFERENCE_LEN, path)?;
        let tl = schema::column::<Int32Array>(b, col::TRANSLATION_LEN, path)?;
        let trunc = schema::column::<BooleanArray>(b, col::TRUNCATED, path).ok();
        for i in 0..b.num_rows() {
            let p = if para.is_null(i) || para.value(i).is_nan() {
                None
            } else {
                Some(para.value(i))
            };
            let score = (!ts.is_null(i) && ts.value(i).is_finite()).then(|| ts.value(i));
            let lens = (rl.value(i) as f64, tl.value(i) as f64);
            self.add_pair(
                p,
                tri.value(i),
                score,
                lens,
                trunc.is_some_and(|t| t.value(i)),
            );
            if let Some(slot) = self.example_slot(p) {
                slot(Example {
                    reference: refs.value(i).to_string(),
                    translation: hyps.value(i).to_string(),
                    para_score: p,
                    trigram_overlap: tri.value(i),
                    translation_score: score,
                });
            }
            self.add_reference(refs.value(i));
        }
        for (name, _, _, h) in self.hists.iter_mut() {
            if let Ok(c) = schema::column::<Float32Array>(b, name, path) {
                for i in 0..c.len() {
                    if !c.is_null(i) {
                        h.add(c.value(i) as f64);
                    }
                }
            } else if let Ok(c) = schema::column::<Int32Array>(b, name, path) {
                for i in 0..c.len() {
                    h.add(c.value(i) as f64);
                }
            }
        }
        Ok(())
    }

    /// One pair's scores and lengths, overall and in its para_score range.
    fn add_pair(
        &mut self,
        p: Option<f32>,
        tri: f32,
        score: Option<f32>,
        (rl, tl): (f64, f64),
        truncated: bool,
    ) {
        let r = &mut self.r;
        r.pairs += 1;
        r.reference_len.add(rl);
        r.translation_len.add(tl);
        r.trigram_overlap.add(tri as f64);
        if let Some(v) = score {
            r.translation_score.add(v as f64);
        }
        if truncated {
            r.truncated += 1;
        }
        match p {
            Some(v) => r.para_score.add(v as f64),
            None => r.no_para_score += 1,
        }
        if let Some(k) = para_range(p) {
            let row = &mut r.ranges[k];
            row.pairs += 1;
            if let Some(v) = p {
                row.para_score.add(v as f64);
            }
            row.trigram_overlap.add(tri as f64);
            row.reference_len.add(rl);
            row.translation_len.add(tl);
            if let Some(v) = score {
                row.translation_score.add(v as f64);
            }
        }
        if let Some(v) = p {
            let point = (tri, v);
            if self.scatter.len() < SCATTER_POINTS {
                self.scatter.push(point);
            } else {
                let j = self.rng.random_range(0..r.pairs) as usize;
                if j < SCATTER_POINTS {
                    self.scatter[j] = point;
                }
            }
        }
    }

    /// Where the pair just added goes in its range's sample of examples
    /// (reservoir sampling), or None: the strings are copied only then.
    fn example_slot(&mut self, p: Option<f32>) -> Option<impl FnOnce(Example) + '_> {
        let k = para_range(p)?;
        let n = self.r.ranges[k].pairs;
        let j = if n <= EXAMPLES {
            n - 1
        } else {
            self.rng.random_range(0..n)
        };
        let examples = &mut self.r.ranges[k].examples;
        (j < EXAMPLES).then_some(move |e: Example| {
            if (j as usize) < examples.len() {
                examples[j as usize] = e;
            } else {
                examples.push(e);
            }
        })
    }

    /// The reference's mean IDF and its words for the vocabulary.
    fn add_reference(&mut self, reference: &str) {
        let toks = tokenize(reference);
        if let Some(idf) = self.idf.as_ref().filter(|_| !toks.is_empty()) {
            let s: f32 = toks.iter().map(|t| idf.get(t.text)).sum();
            self.r.reference_idf.add((s / toks.len() as f32) as f64);
        }
        for t in toks.iter() {
            *self.vocab.entry(t.text.to_string()).or_insert(0) += 1;
        }
    }
}

/// The figures, `report.md`, `report.html` and `report.json` in `out`.
fn write_report(out: &Path, input: &Path, t: &Tally) -> Result<(), ReportError> {
    std::fs::create_dir_all(out).map_err(io(out))?;
    let mut figures = Vec::new();
    for (name, title, x_desc, h) in &t.hists {
        let file = format!("hist_{name}.svg");
        // Scores have a fixed range; a translation score's and a length's
        // axis spans the data.
        let trim = matches!(
            *name,
            col::TRANSLATION_SCORE | col::REFERENCE_LEN | col::TRANSLATION_LEN
        );
        figures::histogram(
            &out.join(&file),
            title,
            x_desc,
            h,
            trim,
            *name == col::PARA_SCORE,
        )?;
        figures.push((title.to_string(), file));
    }
    figures::scatter(
        &out.join("scatter_para_trigram.svg"),
        &t.scatter,
        &t.r.ranges,
    )?;
    figures.push((
        "para_score against trigram overlap (a sample, and each range's mean)".into(),
        "scatter_para_trigram.svg".into(),
    ));
    let provenance = paraforge_core::dataset::trace(input).markdown();
    let r = &t.r;
    let md_path = out.join("report.md");
    std::fs::write(&md_path, page::markdown(r, &provenance, &figures)).map_err(io(&md_path))?;
    let html_path = out.join("report.html");
    std::fs::write(&html_path, page::html(r, &provenance, &figures)).map_err(io(&html_path))?;
    let json_path = out.join("report.json");
    std::fs::write(
        &json_path,
        serde_json::to_string_pretty(r).unwrap_or_default(),
    )
    .map_err(io(&json_path))
}

/// `rejects_by_reason` of a job output's `_manifest.json` (bins and
/// rescores have none).
fn manifest_rejects(input: &Path) -> Result<std::collections::BTreeMap<String, u64>, ReportError> {
    let path = input.join(paraforge_core::layout::MANIFEST_FILE);
    if !input.is_dir() || !path.exists() {
        return Ok(Default::default());
    }
    let bytes = std::fs::read(&path).map_err(io(&path))?;
    let head =
        paraforge_core::layout::ManifestHead::parse(&bytes).map_err(|e| ReportError::Io {
            path: path.clone(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        })?;
    Ok(head.rejects_by_reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pairs without any para_score (a language without a scorer) print
    /// "none" and the way to a scorer, not a mean of 0.000 over them all.
    #[test]
    fn a_corpus_without_para_scores_says_so_and_how_to_score_it() {
        let mut s = Summary {
            pairs: 509,
            mean_trigram_overlap: 0.125,
            ..Summary::default()
        };
        let l = s.lines();
        assert!(l[0].starts_with("  mean para_score none,"), "{l:?}");
        assert!(l[1].contains("--bootstrap trigram"), "{l:?}");
        s.mean_para_score = Some(0.5);
        let l = s.lines();
        assert!(l[0].starts_with("  mean para_score 0.500,"), "{l:?}");
        assert!(!l.iter().any(|x| x.contains("--bootstrap")), "{l:?}");
    }
}
