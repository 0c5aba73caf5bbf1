//! `paraforge lexicon`: word paraphrases induced from a corpus output by
//! cross-sentence and adjusted PMI (Wieting and Gimpel, 2018, appendix A.1;
//! docs/DEFINITIONS.md section 6).
//!
//! Two passes over the verified dataset. The first counts, for every word,
//! the references and the translations it appears in, and fixes word ids
//! as ranks in the sorted vocabulary, so that the output's row order (word1,
//! word2 ascending) does not depend on how the corpus was sharded. The
//! second counts three things per unordered word pair: cross-sentence
//! co-occurrences (one word in the reference, the other in its
//! translation) and within-sentence co-occurrences in the references and in
//! the translations. Those counts live in a hash map up to a memory budget;
//! past it the map is sorted and spilled to a run file and the runs are
//! merged at the end, so memory is bounded by the budget and the
//! vocabulary, not by the corpus.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{Array, Float32Array, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use paraforge_core::layout::{self, ManifestKind};
use paraforge_core::schema::{self, col, DataError, PairFileWriter, PairReader};
use paraforge_core::tokenize::{tokenize_into, Tokens};
use serde::Serialize;

use crate::output::{NewDataset, OutputError};

/// The lexicon's one data file under its directory.
pub const FILE: &str = "lexicon.parquet";

/// Output columns.
pub mod lcol {
    pub const WORD1: &str = "word1";
    pub const WORD2: &str = "word2";
    /// Cross-sentence co-occurrences, both directions.
    pub const COUNT: &str = "count";
    /// Sentences (references and translations) holding each word.
    pub const WORD1_SENTENCES: &str = "word1_sentences";
    pub const WORD2_SENTENCES: &str = "word2_sentences";
    pub const REFERENCE_COOCCURRENCES: &str = "reference_cooccurrences";
    pub const TRANSLATION_COOCCURRENCES: &str = "translation_cooccurrences";
    pub const PMI_CROSS: &str = "pmi_cross";
    pub const PMI_ORDINARY: &str = "pmi_ordinary";
    pub const PMI_ADJUSTED: &str = "pmi_adjusted";
}

pub fn lexicon_schema() -> SchemaRef {
    use lcol::*;
    let int = |n: &str| Field::new(n, DataType::Int64, false);
    let float = |n: &str| Field::new(n, DataType::Float64, false);
    Arc::new(Schema::new(vec![
        Field::new(WORD1, DataType::Utf8, false),
        Field::new(WORD2, DataType::Utf8, false),
        int(COUNT),
        int(WORD1_SENTENCES),
        int(WORD2_SENTENCES),
        int(REFERENCE_COOCCURRENCES),
        int(TRANSLATION_COOCCURRENCES),
        float(PMI_CROSS),
        float(PMI_ORDINARY),
        float(PMI_ADJUSTED),
    ]))
}

#[derive(Debug, thiserror::Error)]
pub enum LexiconError {
    #[error(transparent)]
    Data(#[from] DataError),
    #[error(transparent)]
    Output(#[from] OutputError),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Option(String),
    #[error("{input}: no pair has para_score >= {min_para_score} and both sides of 1 to {max_tokens} tokens: nothing to count")]
    Empty {
        input: PathBuf,
        min_para_score: f32,
        max_tokens: usize,
    },
    #[error("{path}: not a paraforge lexicon ({reason})")]
    NotLexicon { path: PathBuf, reason: String },
}

#[derive(Debug, Clone, Serialize)]
pub struct LexiconOptions {
    #[serde(skip)]
    pub input: PathBuf,
    #[serde(skip)]
    pub output: PathBuf,
    /// Pairs below this para_score are left out (the paper's 0.35).
    pub min_para_score: f32,
    /// Pairs with a side longer than this many tokens are left out (30).
    pub max_tokens: usize,
    /// Word pairs seen fewer times across sentences are not written.
    pub min_count: u64,
    /// Words in fewer sentences than this take no part in pairs.
    pub min_word_sentences: u64,
    /// The pseudo-count added to the within-sentence co-occurrences, so
    /// that words never seen in one sentence get a finite ordinary PMI.
    pub smoothing: f64,
    /// Bytes the pair counts may take before they are spilled to disk.
    #[serde(skip)]
    pub memory: u64,
    #[serde(skip)]
    pub overwrite: bool,
}

impl LexiconOptions {
    pub fn new(input: PathBuf, output: PathBuf) -> LexiconOptions {
        LexiconOptions {
            input,
            output,
            min_para_score: 0.35,
            max_tokens: 30,
            min_count: 3,
            min_word_sentences: 1,
            smoothing: 1.0,
            memory: paraforge_core::repeats::DEFAULT_BUDGET,
            overwrite: false,
        }
    }

    /// The options' bounds, before anything is read or claimed.
    pub fn check(&self) -> Result<(), LexiconError> {
        let bad = |s: String| Err(LexiconError::Option(s));
        if !self.min_para_score.is_finite() {
            return bad(format!(
                "--min-para-score {}: not a number",
                self.min_para_score
            ));
        }
        if self.max_tokens == 0 {
            return bad("--max-tokens 0: every pair would be left out".into());
        }
        if self.min_count == 0 || self.min_word_sentences == 0 {
            return bad("--min-count and --min-word-sentences are at least 1".into());
        }
        if !(self.smoothing.is_finite() && self.smoothing > 0.0) {
            return bad(format!(
                "--smoothing {}: a positive pseudo-count (ordinary PMI is -inf for words never in one sentence without it)",
                self.smoothing
            ));
        }
        if self.memory < MIN_MEMORY {
            return bad(format!("--memory-mb: at least {} MiB", MIN_MEMORY >> 20));
        }
        Ok(())
    }
}

const MIN_MEMORY: u64 = 16 << 20;

/// `_manifest.json` of a lexicon.
#[derive(Debug, Clone, Serialize)]
pub struct LexiconManifest {
    /// Always `lexicon` (core::layout::ManifestHead).
    pub kind: ManifestKind,
    pub input: String,
    pub command: &'static str,
    pub options: LexiconOptions,
    pub input_rows: u64,
    /// Pairs counted: para_score and length within the options.
    pub kept_rows: u64,
    pub dropped_score: u64,
    pub dropped_length: u64,
    /// Distinct words in the kept pairs; those that take part in pairs.
    pub words: u64,
    pub pair_words: u64,
    /// Word pairs seen across sentences; those written (`min_count`).
    pub word_pairs: u64,
    pub written: u64,
    /// Run files the counts spilled to (0: they fit the memory budget).
    pub spills: u64,
    pub files: Vec<layout::ListedFile>,
}

/// Progress of a lexicon build.
pub enum Progress {
    /// Rows each pass reads.
    Total(u64),
    /// Rows read since the last call.
    Done(u64),
    /// The second pass began.
    Counting,
}

/// A kept pair's distinct words on each side, as vocabulary ids.
struct Sides {
    r: Vec<u32>,
    t: Vec<u32>,
}

/// Reads every pair of `paths` that passes the options, calling `each`
/// with its two tokenized sides; returns (rows, kept, dropped for score,
/// dropped for length).
fn for_each_pair(
    paths: &[PathBuf],
    o: &LexiconOptions,
    progress: &dyn Fn(Progress),
    mut each: impl FnMut(&Tokens, &Tokens),
) -> Result<[u64; 4], LexiconError> {
    let mut n = [0u64; 4];
    let (mut r, mut t) = (Tokens::default(), Tokens::default());
    for path in paths {
        let reader = PairReader::open(path, &[col::REFERENCE, col::TRANSLATION, col::PARA_SCORE])?;
        for batch in reader {
            let batch = batch?;
            let refs = schema::column::<StringArray>(&batch, col::REFERENCE, path)?;
            let trans = schema::column::<StringArray>(&batch, col::TRANSLATION, path)?;
            let score = schema::column::<Float32Array>(&batch, col::PARA_SCORE, path)?;
            for i in 0..batch.num_rows() {
                n[0] += 1;
                let s = (!score.is_null(i)).then(|| score.value(i));
                if !s.is_some_and(|s| s >= o.min_para_score) {
                    n[2] += 1;
                    continue;
                }
                if refs.is_null(i) || trans.is_null(i) {
                    n[3] += 1;
                    continue;
                }
                tokenize_into(refs.value(i), &mut r);
                tokenize_into(trans.value(i), &mut t);
                let fits = |x: &Tokens| !x.is_empty() && x.len() <= o.max_tokens;
                if !(fits(&r) && fits(&t)) {
                    n[3] += 1;
                    continue;
                }
                n[1] += 1;
                each(&r, &t);
            }
            progress(Progress::Done(batch.num_rows() as u64));
        }
    }
    Ok(n)
}

/// Builds the lexicon of `o.input` into `o.output`.
pub fn run(
    o: &LexiconOptions,
    progress: &dyn Fn(Progress),
) -> Result<LexiconManifest, LexiconError> {
    o.check()?;
    let dataset = paraforge_core::dataset::open(&o.input)?;
    if dataset.kind == Some(ManifestKind::Lexicon) {
        return Err(LexiconError::Option(format!(
            "{}: a lexicon, not a corpus of sentence pairs",
            o.input.display()
        )));
    }
    let staged = NewDataset::create(&o.output, &[&o.input], o.overwrite, "lexicon")?;
    let paths = dataset.paths();
    progress(Progress::Total(dataset.rows()));

    let (vocab, counted) = count_words(&paths, o, progress)?;
    let [input_rows, kept_rows, dropped_score, dropped_length] = counted;
    if kept_rows == 0 {
        return Err(LexiconError::Empty {
            input: o.input.clone(),
            min_para_score: o.min_para_score,
            max_tokens: o.max_tokens,
        });
    }
    let words = vocab.len() as u64;
    let mut sorted: Vec<(String, [u64; 2])> = vocab
        .into_iter()
        .filter(|(_, c)| c[0] + c[1] >= o.min_word_sentences)
        .collect();
    sorted.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let mut totals = Totals {
        cross: 0,
        within: [0; 2],
        marginals: sorted.iter().map(|(_, c)| *c).collect(),
    };

    let counts = count_pairs(&paths, o, progress, &sorted, &mut totals)?;
    let path = staged.dir().join(FILE);
    let spills = counts.spills();
    let w = write_pairs(&path, o, counts, &sorted, &totals)?;
    let (rows, word_pairs, written) = (w.rows, w.word_pairs, w.written);
    let sha256 = layout::sha256_file(&path).map_err(|e| LexiconError::Io {
        path: path.clone(),
        source: e,
    })?;
    let m = LexiconManifest {
        kind: ManifestKind::Lexicon,
        input: o.input.display().to_string(),
        command: "paraforge lexicon",
        options: o.clone(),
        input_rows,
        kept_rows,
        dropped_score,
        dropped_length,
        words,
        pair_words: sorted.len() as u64,
        word_pairs,
        written,
        spills,
        files: vec![layout::ListedFile {
            path: FILE.into(),
            rows,
            bytes: std::fs::metadata(&path).ok().map(|m| m.len()),
            sha256: Some(sha256),
        }],
    };
    let card = staged.dir().join(layout::CARD_FILE);
    // Word pairs of the references and translations: their language, not
    // the source's.
    let languages: Vec<String> = paraforge_core::dataset::trace(&o.input)
        .reference_language()
        .into_iter()
        .collect();
    std::fs::write(&card, card_text(&m, languages)).map_err(|e| LexiconError::Io {
        path: card.clone(),
        source: e,
    })?;
    let text = serde_json::to_string_pretty(&m).expect("manifest serializes");
    staged.publish(text.as_bytes())?;
    Ok(m)
}

/// Each word's sentence counts: [references, translations].
type WordCounts = HashMap<String, [u64; 2]>;

/// Pass 1: the vocabulary and each word's sentence counts per side, and
/// the rows read, kept and dropped.
fn count_words(
    paths: &[std::path::PathBuf],
    o: &LexiconOptions,
    progress: &dyn Fn(Progress),
) -> Result<(WordCounts, [u64; 4]), LexiconError> {
    let mut vocab: HashMap<String, [u64; 2]> = HashMap::new();
    let counted = for_each_pair(paths, o, progress, |r, t| {
        for (side, toks) in [r, t].into_iter().enumerate() {
            let mut types = toks.texts();
            types.sort_unstable();
            types.dedup();
            for w in &types {
                match vocab.get_mut(*w) {
                    Some(c) => c[side] += 1,
                    None => {
                        let mut c = [0; 2];
                        c[side] = 1;
                        vocab.insert(w.to_string(), c);
                    }
                }
            }
        }
    })?;
    Ok((vocab, counted))
}

/// Pass 2: the pair counts of the words in `sorted`. Totals are over every
/// event, written or not.
fn count_pairs(
    paths: &[std::path::PathBuf],
    o: &LexiconOptions,
    progress: &dyn Fn(Progress),
    sorted: &[(String, [u64; 2])],
    totals: &mut Totals,
) -> Result<PairCounts, LexiconError> {
    let ids: HashMap<&str, u32> = sorted
        .iter()
        .enumerate()
        .map(|(i, (w, _))| (w.as_str(), i as u32))
        .collect();
    progress(Progress::Counting);
    let mut counts = PairCounts::new(o.memory);
    let mut sides = Sides {
        r: Vec::new(),
        t: Vec::new(),
    };
    let mut failed: Option<std::io::Error> = None;
    for_each_pair(paths, o, progress, |r, t| {
        if failed.is_some() {
            return;
        }
        for (toks, out) in [(r, &mut sides.r), (t, &mut sides.t)] {
            out.clear();
            out.extend(toks.texts().iter().filter_map(|w| ids.get(w).copied()));
            out.sort_unstable();
            out.dedup();
        }
        if let Err(e) = counts.add_pair(&sides, totals) {
            failed = Some(e);
        }
    })?;
    if let Some(source) = failed {
        return Err(LexiconError::Io {
            path: counts.dir(),
            source,
        });
    }
    Ok(counts)
}

/// What writing the pairs file counted.
struct Written {
    rows: u64,
    /// Word pairs seen across sentences; those written (`min_count`).
    word_pairs: u64,
    written: u64,
}

/// Merges the counts and writes the pairs at `min_count` or more, in key
/// order (word1 < word2, both ascending), with their PMIs.
fn write_pairs(
    path: &Path,
    o: &LexiconOptions,
    counts: PairCounts,
    sorted: &[(String, [u64; 2])],
    totals: &Totals,
) -> Result<Written, LexiconError> {
    let mut writer = PairFileWriter::create(
        path,
        lexicon_schema(),
        &[(
            "paraforge.lexicon",
            serde_json::to_string(o).unwrap_or_default(),
        )],
    )?;
    let mut batch = Batch::default();
    let (mut word_pairs, mut written) = (0u64, 0u64);
    let mut write_err: Option<DataError> = None;
    let dir = counts.dir();
    counts
        .drain_sorted(|key, c| {
            word_pairs += u64::from(c[0] > 0);
            if u64::from(c[0]) < o.min_count || write_err.is_some() {
                return;
            }
            let (u, v) = ((key >> 32) as usize, (key & 0xffff_ffff) as usize);
            let pmi = pmis(u, v, &c, totals, o.smoothing);
            batch.push(&sorted[u], &sorted[v], c, pmi);
            written += 1;
            if batch.len() == BATCH_ROWS {
                if let Err(e) = writer.write(&batch.finish()) {
                    write_err = Some(e);
                }
            }
        })
        .map_err(|source| LexiconError::Io { path: dir, source })?;
    if let Some(e) = write_err {
        return Err(e.into());
    }
    if batch.len() > 0 {
        writer.write(&batch.finish())?;
    }
    Ok(Written {
        rows: writer.close()?,
        word_pairs,
        written,
    })
}

/// Event totals and word marginals the PMIs divide by.
#[derive(Debug)]
struct Totals {
    /// Ordered cross-sentence events (u in the reference, v in the
    /// translation, u != v).
    cross: u64,
    /// Unordered within-sentence events: [references, translations].
    within: [u64; 2],
    /// Sentences holding each word, by id: [references, translations].
    marginals: Vec<[u64; 2]>,
}

/// The three PMIs of a word pair, [cross, ordinary, adjusted], from its
/// counts [cross, within references, within translations] (DEFINITIONS
/// section 7): the paper's `log(#(u,v) #(.,.) / (#(u) #(v)))` with raw
/// counts, natural logarithms. Its scale matters: a pair a lexicon lacks
/// scores 0 in evaluation, and raw counts put most seen pairs above that.
fn pmis(u: usize, v: usize, c: &[u32; 3], t: &Totals, k: f64) -> [f64; 3] {
    let ln = |x: f64| x.ln();
    let m = &t.marginals;
    let both = |id: usize| ln((m[id][0] + m[id][1]) as f64);
    let cross = ln(c[0] as f64) + ln(t.cross as f64) - both(u) - both(v);
    let side = |s: usize| {
        // A word absent from one side's sentences has no marginal there:
        // the pseudo-count stands in for it as for the co-occurrence.
        let one = |id: usize| match m[id][s] {
            0 => ln(k),
            n => ln(n as f64),
        };
        ln(c[1 + s] as f64 + k) + ln(t.within[s].max(1) as f64) - one(u) - one(v)
    };
    let ordinary = 0.5 * (side(0) + side(1));
    [cross, ordinary, cross - ordinary]
}

mod counts;
use counts::PairCounts;
#[cfg(test)]
use counts::PAIR_BYTES;

const BATCH_ROWS: usize = 8192;

#[derive(Default)]
struct Batch {
    w1: Vec<String>,
    w2: Vec<String>,
    ints: [Vec<i64>; 5],
    floats: [Vec<f64>; 3],
}

impl Batch {
    fn len(&self) -> usize {
        self.w1.len()
    }

    fn push(&mut self, u: &(String, [u64; 2]), v: &(String, [u64; 2]), c: [u32; 3], pmi: [f64; 3]) {
        self.w1.push(u.0.clone());
        self.w2.push(v.0.clone());
        let ints = [
            i64::from(c[0]),
            (u.1[0] + u.1[1]) as i64,
            (v.1[0] + v.1[1]) as i64,
            i64::from(c[1]),
            i64::from(c[2]),
        ];
        for (col, x) in self.ints.iter_mut().zip(ints) {
            col.push(x);
        }
        for (col, x) in self.floats.iter_mut().zip(pmi) {
            col.push(x);
        }
    }

    fn finish(&mut self) -> RecordBatch {
        let s =
            |v: &mut Vec<String>| Arc::new(StringArray::from(std::mem::take(v))) as Arc<dyn Array>;
        let i = |v: &mut Vec<i64>| Arc::new(Int64Array::from(std::mem::take(v))) as Arc<dyn Array>;
        let f =
            |v: &mut Vec<f64>| Arc::new(Float64Array::from(std::mem::take(v))) as Arc<dyn Array>;
        let [a, b, c, d, e] = &mut self.ints;
        let [x, y, z] = &mut self.floats;
        let cols = vec![
            s(&mut self.w1),
            s(&mut self.w2),
            i(a),
            i(b),
            i(c),
            i(d),
            i(e),
            f(x),
            f(y),
            f(z),
        ];
        RecordBatch::try_new(lexicon_schema(), cols).expect("columns match the schema")
    }
}

/// The lexicon's dataset card: what it is, from what, and how to query it;
/// `languages` those of the pairs it counted, where known.
fn card_text(m: &LexiconManifest, languages: Vec<String>) -> String {
    let o = &m.options;
    let about = format!(
        "# Paraphrase lexicon\n\n\
         Word pairs induced by `paraforge lexicon` from `{input}` with cross-sentence \
         and adjusted PMI, as Wieting and Gimpel (2018, appendix A.1) induce theirs \
         from ParaNMT-50M.\n\n\
         - pairs counted: {kept} of {rows} (para_score >= {ps}, both sides of 1 to {mt} tokens; \
         {ds} dropped for the score, {dl} for the length)\n\
         - words: {words} ({pw} in at least {mws} sentences take part in pairs)\n\
         - word pairs seen across sentences: {wp}; written (count >= {mc}): {written}\n\n\
         One row per unordered pair, `word1 < word2`. `count` is how often one word \
         was in a reference and the other in its translation (both directions); \
         `pmi_cross` is the cross-sentence PMI, `pmi_ordinary` the mean of the \
         within-sentence PMIs over references and over translations (pseudo-count \
         {k}), `pmi_adjusted` their difference: `log(#(u,v) #(.,.) / (#(u) #(v)))` \
         with raw counts as the paper writes it, natural logarithms.\n\n\
         A word's paraphrases, best first (DuckDB):\n\n\
         ```sql\n\
         SELECT CASE WHEN word1 = 'laughed' THEN word2 ELSE word1 END AS paraphrase, count, pmi_adjusted\n\
         FROM '{file}' WHERE 'laughed' IN (word1, word2) AND count >= 10\n\
         ORDER BY pmi_adjusted DESC LIMIT 20;\n\
         ```\n",
        input = m.input,
        kept = m.kept_rows,
        rows = m.input_rows,
        ps = o.min_para_score,
        mt = o.max_tokens,
        ds = m.dropped_score,
        dl = m.dropped_length,
        words = m.words,
        pw = m.pair_words,
        mws = o.min_word_sentences,
        wp = m.word_pairs,
        mc = o.min_count,
        written = m.written,
        k = o.smoothing,
        file = FILE,
    );
    let meta = layout::CardMeta {
        pretty_name: format!("Paraphrase lexicon of {}", m.input),
        task_categories: Vec::new(),
        // The words are the references' and translations'.
        languages: languages.into_iter().take(1).collect(),
        tags: vec!["paraphrase".into(), "lexicon".into(), "paraforge".into()],
        rows: m.written,
    };
    layout::dataset_card(&meta, &[("lexicon".into(), vec![FILE.into()])], &about)
}

/// Which PMI a lookup scores with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Score {
    Cross,
    Adjusted,
}

/// One row of a lexicon, as [`for_each_row`] reads it.
struct Row<'a> {
    word1: &'a str,
    word2: &'a str,
    count: i64,
    pmi_cross: f64,
    pmi_adjusted: f64,
}

/// Calls `f` with every row of the finished lexicon at `dir`; anything
/// else (a corpus, an unfinished output) is refused.
fn for_each_row(dir: &Path, mut f: impl FnMut(Row<'_>)) -> Result<(), LexiconError> {
    let dataset = paraforge_core::dataset::open(dir)?;
    if dataset.kind != Some(ManifestKind::Lexicon) {
        return Err(LexiconError::NotLexicon {
            path: dir.to_path_buf(),
            reason: "its manifest was not written by `paraforge lexicon`".into(),
        });
    }
    use lcol::*;
    for path in dataset.paths() {
        for batch in PairReader::open(&path, &[WORD1, WORD2, COUNT, PMI_CROSS, PMI_ADJUSTED])? {
            let batch = batch?;
            let w1 = schema::column::<StringArray>(&batch, WORD1, &path)?;
            let w2 = schema::column::<StringArray>(&batch, WORD2, &path)?;
            let count = schema::column::<Int64Array>(&batch, COUNT, &path)?;
            let cross = schema::column::<Float64Array>(&batch, PMI_CROSS, &path)?;
            let adj = schema::column::<Float64Array>(&batch, PMI_ADJUSTED, &path)?;
            for i in 0..batch.num_rows() {
                f(Row {
                    word1: w1.value(i),
                    word2: w2.value(i),
                    count: count.value(i),
                    pmi_cross: cross.value(i),
                    pmi_adjusted: adj.value(i),
                });
            }
        }
    }
    Ok(())
}

/// The scores of the rows of the lexicon at `dir` whose two words are both
/// in `wanted`, keyed by (word1, word2) with word1 < word2: [cross,
/// adjusted].
pub fn read_scores(
    dir: &Path,
    wanted: &HashSet<String>,
) -> Result<HashMap<(String, String), [f64; 2]>, LexiconError> {
    let mut out = HashMap::new();
    for_each_row(dir, |r| {
        if wanted.contains(r.word1) && wanted.contains(r.word2) {
            out.insert(
                (r.word1.to_string(), r.word2.to_string()),
                [r.pmi_cross, r.pmi_adjusted],
            );
        }
    })?;
    Ok(out)
}

/// Word pairs to train on (PARAGRAM word vectors): the rows of the
/// lexicon at `dir` seen at least `min_count` times across sentences with
/// adjusted PMI at least `min_pmi`, in file order.
pub fn training_pairs(
    dir: &Path,
    min_count: u64,
    min_pmi: f64,
) -> Result<Vec<(String, String)>, LexiconError> {
    let min_count = i64::try_from(min_count).unwrap_or(i64::MAX);
    let mut out = Vec::new();
    for_each_row(dir, |r| {
        if r.count >= min_count && r.pmi_adjusted >= min_pmi {
            out.push((r.word1.to_string(), r.word2.to_string()));
        }
    })?;
    Ok(out)
}

/// A word pair's score in what [`read_scores`] returned, either order,
/// lowercased as the lexicon's tokens are.
pub fn lookup(
    scores: &HashMap<(String, String), [f64; 2]>,
    a: &str,
    b: &str,
    which: Score,
) -> Option<f64> {
    let (a, b) = (a.to_lowercase(), b.to_lowercase());
    let k = if a <= b { (a, b) } else { (b, a) };
    scores.get(&k).map(|s| match which {
        Score::Cross => s[0],
        Score::Adjusted => s[1],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drained(c: PairCounts) -> Vec<(u64, [u32; 3])> {
        let mut out = Vec::new();
        c.drain_sorted(|k, v| out.push((k, v))).unwrap();
        out
    }

    /// Counts spilled to many sorted runs and merged come out as the
    /// in-memory map's, in key order, with the same totals.
    #[test]
    fn spilled_counts_merge_to_the_in_memory_counts() {
        let pairs: Vec<Sides> = (0..300u32)
            .map(|i| Sides {
                r: (0..(i % 7 + 2)).map(|j| (i * 31 + j * 17) % 97).collect(),
                t: (0..(i % 5 + 1)).map(|j| (i * 13 + j * 7) % 89).collect(),
            })
            .map(|mut s| {
                for v in [&mut s.r, &mut s.t] {
                    v.sort_unstable();
                    v.dedup();
                }
                s
            })
            .collect();
        let totals = || Totals {
            cross: 0,
            within: [0; 2],
            marginals: Vec::new(),
        };
        let count = |memory: u64| {
            let mut c = PairCounts::new(memory);
            let mut t = totals();
            for s in &pairs {
                c.add_pair(s, &mut t).unwrap();
            }
            (c, t.cross, t.within)
        };
        let (big, cross, within) = count(1 << 30);
        assert_eq!(big.spills(), 0);
        let want = drained(big);
        assert!(want.windows(2).all(|w| w[0].0 < w[1].0));
        let (small, cross2, within2) = count(PAIR_BYTES * 50);
        assert!(small.spills() > 10, "{}", small.spills());
        assert_eq!((cross, within), (cross2, within2));
        assert_eq!(drained(small), want);
        // Past the fan-in the runs are merged into one as they come.
        let (mut c, mut t) = (PairCounts::new(PAIR_BYTES * 50), totals());
        c.fan_in = 4;
        for s in &pairs {
            c.add_pair(s, &mut t).unwrap();
            assert!(c.runs.len() < 4);
        }
        assert!(c.spills() > 10);
        assert_eq!(drained(c), want);
    }

    #[test]
    fn lookups_take_either_order_and_case() {
        let mut m = HashMap::new();
        m.insert(("big".to_string(), "large".to_string()), [1.5, 2.5]);
        assert_eq!(lookup(&m, "Large", "big", Score::Adjusted), Some(2.5));
        assert_eq!(lookup(&m, "big", "LARGE", Score::Cross), Some(1.5));
        assert_eq!(lookup(&m, "big", "small", Score::Cross), None);
    }
}
