//! Sentence encoders for para_score, and the embedding models `paraforge
//! train` writes (`.pfe`: WORD, TRIGRAM, WORD,TRIGRAM).
//!
//! The scorer asks a [`SentenceEncoder`] for the embeddings of the two
//! sides of a pair and takes their cosine. The trainer trains [`Model`]
//! through this same type (tokenization, feature lookup, unknown-word rule,
//! averaging), so a trained model means the same thing to `para_score` as
//! to training and `eval-sts`. Word vectors (GloVe text) are an encoder too.
//! An encoder that is not an average (a recurrent one) implements the trait
//! on the tokens it is given.
//!
//! File format (`.pfe`): the 7 bytes `PFEMB1\n`, a little-endian u64 header
//! length, a JSON header (kind, dimensions, word and trigram lists, storage
//! precision, notes), then the word matrix and the trigram matrix as
//! little-endian rows of f32 (or bfloat16 when the header says so).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::tokenize::{word_hash, Tokens};
use crate::vectors::Vectors;

#[derive(Debug, thiserror::Error)]
pub enum EncoderError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not a paraforge embedding model: {reason}")]
    BadModel { path: PathBuf, reason: String },
    /// Weights that are not numbers (a diverged run, a damaged file) score
    /// NaN or pass for scores: refused at load.
    #[error("{path}: {at}; a model whose weights are not finite numbers cannot score")]
    NonFinite { path: PathBuf, at: NonFinite },
    /// A well-formed model that its runtime could not load (e.g. ONNX
    /// Runtime's library missing), as opposed to a file that is no model.
    #[error("{path}: cannot load: {reason}")]
    Load { path: PathBuf, reason: String },
    #[error("{0}")]
    Invalid(String),
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> EncoderError + '_ {
    move |source| EncoderError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// How much of a sentence an encoder had rows for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Coverage {
    /// Features that contributed a row (for trained models, unknown words
    /// contribute the UNK row and count here).
    pub known: u32,
    /// Tokens without a row of their own.
    pub unknown: u32,
}

/// Reusable buffers for [`SentenceEncoder::embed_tokens`].
#[derive(Debug, Default)]
pub struct Scratch {
    pub encoded: Encoded,
}

/// Scores sentences one number each, in batches (a trained classifier's
/// P(reference)); `None` for a sentence it cannot score (no token).
pub trait TextScorer {
    fn score_texts(&self, texts: &[&str]) -> Vec<Option<f32>>;
}

/// Embeds a tokenized sentence (the tokens of [`crate::tokenize`]).
pub trait SentenceEncoder: Send + Sync {
    /// Embedding size.
    fn dim(&self) -> usize;
    /// Writes the sentence's embedding into `out` (`dim()` values). A
    /// sentence with `known == 0` has no embedding: para_score is then null.
    /// Averaging encoders may leave `out` as a positive multiple of the
    /// mean; the cosine does not change.
    fn embed_tokens(&self, tokens: &Tokens, scratch: &mut Scratch, out: &mut [f32]) -> Coverage;
    /// One line for logs, footers and manifests.
    fn describe(&self) -> String;
    /// Sentences the encoder failed to embed so far (a model run that
    /// errored; not a sentence without known features). Callers compare it
    /// before and after their work and fail it when it grew: a score left
    /// null by a failure must not pass for a score.
    fn failures(&self) -> u64 {
        0
    }
    /// What the encoder is, in a word or two, as `eval-sts` heads its column
    /// after the file name: the model's kind (`trigram`, `lstm`,
    /// `word+trigram+lstm`, `transformer`), `averaged` for word vectors.
    fn short_name(&self) -> String {
        self.describe()
    }
    /// The embeddings of many sentences into `out` (`dim()` values each, in
    /// order) and each one's coverage, as [`SentenceEncoder::embed_tokens`]
    /// gives them. Here one at a time on the thread pool; an encoder that
    /// runs sentences together (a neural network) does it in batches.
    fn embed_batch(&self, sentences: &[Tokens], out: &mut [f32]) -> Vec<Coverage> {
        use rayon::prelude::*;
        let d = self.dim();
        if d == 0 {
            let mut scratch = Scratch::default();
            return sentences
                .iter()
                .map(|t| self.embed_tokens(t, &mut scratch, &mut []))
                .collect();
        }
        out.par_chunks_mut(d)
            .zip(sentences)
            .map_init(Scratch::default, |scratch, (o, t)| {
                self.embed_tokens(t, scratch, o)
            })
            .collect()
    }
}

impl SentenceEncoder for Vectors {
    fn dim(&self) -> usize {
        Vectors::dim(self)
    }

    // Word vectors skip unknown words (as every GloVe-averaging baseline does).
    fn embed_tokens(&self, tokens: &Tokens, _: &mut Scratch, out: &mut [f32]) -> Coverage {
        out.fill(0.0);
        let mut c = Coverage::default();
        for t in tokens.iter() {
            match self.get_hashed(t.hash(), t.text) {
                Some(row) => {
                    add_row(out, row);
                    c.known += 1;
                }
                None => c.unknown += 1,
            }
        }
        c
    }

    fn describe(&self) -> String {
        format!(
            "word vectors ({} words, {} dimensions)",
            self.len(),
            self.dim()
        )
    }
    fn short_name(&self) -> String {
        "averaged".into()
    }
}

#[inline]
fn add_row(out: &mut [f32], row: &[f32]) {
    out.iter_mut().zip(row).for_each(|(o, x)| *o += x);
}

/// The embeddings of `texts` (`encoder.dim()` values each, in order), tokenized
/// as para_score tokenizes them, and whether each had one: a sentence with no
/// token the encoder knows gets a row of NaN, as its para_score is null.
/// `paraforge embed` and the Python package both call this.
pub fn embed_texts<S: AsRef<str> + Sync>(
    encoder: &dyn SentenceEncoder,
    texts: &[S],
) -> (Vec<f32>, Vec<bool>) {
    use rayon::prelude::*;
    let tokens: Vec<Tokens> = texts
        .par_iter()
        .map(|t| crate::tokenize(t.as_ref()))
        .collect();
    let d = encoder.dim();
    let mut flat = vec![0f32; texts.len() * d];
    let known: Vec<bool> = encoder
        .embed_batch(&tokens, &mut flat)
        .iter()
        .map(|c| c.known > 0)
        .collect();
    for (i, k) in known.iter().enumerate() {
        if !k {
            flat[i * d..(i + 1) * d].fill(f32::NAN);
        }
    }
    (flat, known)
}

/// Which embeddings a sentence averages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Kind {
    #[serde(rename = "word")]
    Word,
    #[serde(rename = "trigram")]
    Trigram,
    #[serde(rename = "word,trigram")]
    WordTrigram,
}

impl Kind {
    pub fn words(self) -> bool {
        matches!(self, Kind::Word | Kind::WordTrigram)
    }
    pub fn trigrams(self) -> bool {
        matches!(self, Kind::Trigram | Kind::WordTrigram)
    }
    pub fn name(self) -> &'static str {
        match self {
            Kind::Word => "word",
            Kind::Trigram => "trigram",
            Kind::WordTrigram => "word,trigram",
        }
    }
}

impl std::str::FromStr for Kind {
    type Err = String;
    fn from_str(s: &str) -> Result<Kind, String> {
        match s.to_ascii_lowercase().replace(' ', "").as_str() {
            "word" => Ok(Kind::Word),
            "trigram" => Ok(Kind::Trigram),
            "word,trigram" | "trigram,word" => Ok(Kind::WordTrigram),
            _ => Err(format!(
                "unknown model {s:?} (use word, trigram or word,trigram)"
            )),
        }
    }
}

/// How a `.pfe` file stores its tables. bfloat16 halves the file (the
/// shipped scorer) and is widened to f32 on load, so every reader computes
/// with the same f32 values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Precision {
    #[default]
    #[serde(rename = "f32")]
    F32,
    #[serde(rename = "bf16")]
    Bf16,
}

impl std::str::FromStr for Precision {
    type Err = String;
    fn from_str(s: &str) -> Result<Precision, String> {
        match s {
            "f32" => Ok(Precision::F32),
            "bf16" => Ok(Precision::Bf16),
            _ => Err(format!("unknown precision {s:?} (use f32 or bf16)")),
        }
    }
}

mod bf16;
mod pfe;
mod trigram;

use bf16::means_of;
pub use bf16::Bf16Model;
#[cfg(test)]
use bf16::{from_bf16, to_bf16};
#[cfg(test)]
use pfe::{MAGIC, MAGIC_PARTS_BY_DIMENSION, MAGIC_UNIT_PARTS};
pub use trigram::{for_each_trigram, trigram_key, trigram_text};

/// Open addressing from 64-bit keys to row ids; the caller confirms a hit
/// when keys can collide (word hashes), trigram keys are exact. Each slot
/// holds its key beside the row, so a probe touches one cache line (no
/// measurable change in `make bench-score` against two arrays; kept as the
/// simpler layout).
#[derive(Debug, Clone, Default)]
struct Index {
    slots: Vec<(u64, u32)>,
}

const EMPTY: u32 = u32::MAX;

impl Index {
    fn build(keys: Vec<u64>) -> Index {
        let cap = (keys.len() * 2).next_power_of_two().max(16);
        let mut slots = vec![(0, EMPTY); cap];
        for (i, &k) in keys.iter().enumerate() {
            let mut s = spread(k) & (cap - 1);
            while slots[s].1 != EMPTY {
                s = (s + 1) & (cap - 1);
            }
            slots[s] = (k, i as u32);
        }
        Index { slots }
    }

    #[inline]
    fn find(&self, key: u64, confirm: impl Fn(u32) -> bool) -> Option<u32> {
        let mask = self.slots.len().checked_sub(1)?;
        let mut s = spread(key) & mask;
        loop {
            let (k, i) = self.slots[s];
            if i == EMPTY {
                return None;
            }
            if k == key && confirm(i) {
                return Some(i);
            }
            s = (s + 1) & mask;
        }
    }
}

#[inline]
fn spread(k: u64) -> usize {
    (k.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize
}

/// A tokenized sentence as model rows: word rows (unknown words -> the
/// UNK row) and the rows of its known character trigrams; for the tree
/// encoder, also its binary tree over the words (merges: merge `k` joins
/// two nodes into node `words.len() + k`, nodes below that being words),
/// which the encoders crate fills (empty otherwise).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Encoded {
    pub words: Vec<u32>,
    pub trigrams: Vec<u32>,
    pub tree: Vec<[u32; 2]>,
}

impl Encoded {
    pub fn is_empty(&self) -> bool {
        self.words.is_empty() && self.trigrams.is_empty()
    }
}

/// How a combination scales its parts' embeddings before joining them;
/// the cosine of two joined embeddings is then a weighted mean of the
/// parts' cosines (docs/encoders.md, combinations).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PartScale {
    /// The parts as they come: the one with the largest norms decides the
    /// cosine. Only files written before part scaling read this way.
    #[default]
    Raw,
    /// Each part at unit length: the cosine is the plain mean of the
    /// parts' cosines, a 50-d part weighing as much as a 300-d one.
    Unit,
    /// Each part at length sqrt(d_i / D), D the sum of the parts'
    /// dimensions: the joined embedding is at unit length and each part's
    /// cosine weighs d_i / D, as if every dimension weighed alike. Equal to
    /// `Unit` where the parts are the same size (every part of Wieting and
    /// Gimpel (2018) is 300-d); here the parts' sizes can differ sixfold.
    ByDimension,
}

impl PartScale {
    /// The length a part of `dim` of the joined `total` dimensions is
    /// scaled to (None: the parts stay raw). A zero part stays zero
    /// whatever its length. No allocation: it runs once per embedding.
    pub fn length(self, dim: usize, total: usize) -> Option<f64> {
        match self {
            PartScale::Raw => None,
            PartScale::Unit => Some(1.0),
            PartScale::ByDimension => Some((dim as f64 / total.max(1) as f64).sqrt()),
        }
    }
}

/// An averaging embedding model. Row `words().len()` of the word table is UNK.
#[derive(Debug, Clone)]
pub struct Model {
    pub kind: Kind,
    pub word_dim: usize,
    pub trigram_dim: usize,
    words: Vec<String>,
    word_index: Index,
    trigrams: Vec<String>,
    trigram_index: Index,
    /// (words + 1) x word_dim.
    pub w: Vec<f32>,
    /// trigrams x trigram_dim.
    pub t: Vec<f32>,
    /// Free-form training notes kept in the file (data, settings, losses).
    pub notes: serde_json::Value,
    /// WORD,TRIGRAM: how each half of the embedding is scaled.
    /// Raw halves let the GloVe-started word half (norms of several units)
    /// outweigh the trigram half (rows of +-0.05, norms near 0.1), and the
    /// concatenation scored as WORD alone; unit halves let the 50-d word
    /// half weigh as much as the 300-d trigram half (docs/encoders.md,
    /// combinations). `ByDimension` for every WORD,TRIGRAM model built
    /// now, `Raw` for every other kind; older files keep what they were
    /// trained with.
    pub parts: PartScale,
}

impl Model {
    /// A model from its tables: `w` holds `words.len() + 1` rows (the last
    /// is UNK) of `word_dim`, `t` one row of `trigram_dim` per trigram
    /// (three characters each, as [`trigram_text`] writes them).
    pub fn from_tables(
        kind: Kind,
        words: Vec<String>,
        word_dim: usize,
        w: Vec<f32>,
        trigrams: Vec<String>,
        trigram_dim: usize,
        t: Vec<f32>,
    ) -> Result<Model, EncoderError> {
        let invalid = |m: String| Err(EncoderError::Invalid(m));
        if kind.words() != (word_dim > 0) || kind.trigrams() != (trigram_dim > 0) {
            return invalid(format!(
                "kind {} does not match dimensions {word_dim}/{trigram_dim}",
                kind.name()
            ));
        }
        let nw = if kind.words() { words.len() + 1 } else { 0 };
        if w.len() != nw * word_dim || t.len() != trigrams.len() * trigram_dim {
            return invalid(format!(
                "tables of {} and {} values do not fit {} words x {word_dim} (+ UNK) and {} trigrams x {trigram_dim}",
                w.len(),
                t.len(),
                words.len(),
                trigrams.len()
            ));
        }
        let mut tkeys = Vec::with_capacity(trigrams.len());
        for g in &trigrams {
            match trigram_key(g) {
                Some(k) => tkeys.push(k),
                None => return invalid(format!("trigram {g:?} is not three characters")),
            }
        }
        Ok(Model {
            kind,
            word_dim,
            trigram_dim,
            word_index: Index::build(words.iter().map(|w| word_hash(w)).collect()),
            words,
            trigram_index: Index::build(tkeys),
            trigrams,
            w,
            t,
            notes: serde_json::Value::Null,
            parts: if kind == Kind::WordTrigram {
                PartScale::ByDimension
            } else {
                PartScale::Raw
            },
        })
    }

    /// Sentence embedding size.
    pub fn dim(&self) -> usize {
        self.word_dim + self.trigram_dim
    }

    pub fn unk(&self) -> u32 {
        self.words.len() as u32
    }

    pub fn words(&self) -> &[String] {
        &self.words
    }

    pub fn trigrams(&self) -> &[String] {
        &self.trigrams
    }

    /// The row of a word, `None` for an unknown one.
    pub fn word_id(&self, hash: u64, word: &str) -> Option<u32> {
        self.word_index
            .find(hash, |i| self.words[i as usize] == word)
    }

    /// The row of a trigram key, `None` for an unknown one.
    pub fn trigram_id(&self, key: u64) -> Option<u32> {
        self.trigram_index.find(key, |_| true)
    }

    /// The rows of a tokenized sentence into `e`; returns the tokens that
    /// have no word row (0 for a model without words).
    pub fn encode_tokens(&self, toks: &Tokens, e: &mut Encoded) -> u32 {
        e.words.clear();
        e.trigrams.clear();
        e.tree.clear();
        let mut unknown = 0;
        if self.kind.words() {
            for tok in toks.iter() {
                e.words
                    .push(self.word_id(tok.hash(), tok.text).unwrap_or_else(|| {
                        unknown += 1;
                        self.unk()
                    }));
            }
        }
        if self.kind.trigrams() {
            for_each_trigram(toks, |k| {
                if let Some(i) = self.trigram_id(k) {
                    e.trigrams.push(i);
                }
            });
        }
        unknown
    }

    pub fn encode(&self, text: &str) -> Encoded {
        let mut e = Encoded::default();
        self.encode_tokens(&crate::tokenize(text), &mut e);
        e
    }

    /// The sentence embedding: the mean word row, then the mean trigram
    /// row (zeros for a part with no rows), each scaled as [`Model::parts`]
    /// says.
    pub fn embed_into(&self, e: &Encoded, out: &mut [f32]) {
        self.means_into(e, out);
        self.scale_parts(out);
    }

    /// The embedding before [`Model::scale_parts`]: the two means.
    pub fn means_into(&self, e: &Encoded, out: &mut [f32]) {
        means_of(&self.w, &self.t, self, e, out);
    }

    /// The length [`Model::scale_parts`] gives each half (word, trigram);
    /// None where the halves stay raw.
    pub fn part_lengths(&self) -> Option<[f32; 2]> {
        let total = self.dim();
        let l = |d| self.parts.length(d, total).map(|l| l as f32);
        Some([l(self.word_dim)?, l(self.trigram_dim)?])
    }

    /// Scales each half of `out` to its [`Model::part_lengths`] (a zero
    /// half stays zero); returns the halves' lengths before (1 where
    /// nothing was scaled), which training's backward pass divides by.
    pub fn scale_parts(&self, out: &mut [f32]) -> [f32; 2] {
        let mut norms = [1.0f32; 2];
        if let Some(lengths) = self.part_lengths() {
            let (wo, to) = out.split_at_mut(self.word_dim);
            for ((n, half), len) in norms.iter_mut().zip([wo, to]).zip(lengths) {
                *n = half.iter().map(|x| x * x).sum::<f32>().sqrt();
                if *n > 0.0 {
                    let k = len / *n;
                    half.iter_mut().for_each(|x| *x *= k);
                }
            }
        }
        norms
    }

    pub fn embed(&self, text: &str) -> Vec<f32> {
        let mut out = vec![0.0; self.dim()];
        self.embed_into(&self.encode(text), &mut out);
        out
    }

    /// The first value of the tables that is not a finite number, if any:
    /// one pass over the weights, cheap beside reading them.
    pub fn first_non_finite(&self) -> Option<NonFinite> {
        let find = |v: &[f32], dim: usize| {
            let i = v.iter().position(|x| !x.is_finite())?;
            Some((i / dim.max(1), v[i]))
        };
        if let Some((row, value)) = find(&self.w, self.word_dim) {
            let name = self.words.get(row).map_or("UNK", |w| w.as_str());
            return Some(NonFinite {
                table: "word",
                row,
                name: name.to_string(),
                value,
            });
        }
        find(&self.t, self.trigram_dim).map(|(row, value)| NonFinite {
            table: "trigram",
            row,
            name: self.trigrams[row].clone(),
            value,
        })
    }
}

/// Where a model holds a value that is not a finite number.
#[derive(Debug, Clone, PartialEq)]
pub struct NonFinite {
    /// "word" or "trigram".
    pub table: &'static str,
    pub row: usize,
    /// The row's word or trigram ("UNK" for the unknown-word row).
    pub name: String,
    pub value: f32,
}

impl std::fmt::Display for NonFinite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the {} table's row {} ({:?}) holds {}",
            self.table, self.row, self.name, self.value
        )
    }
}

impl SentenceEncoder for Model {
    fn dim(&self) -> usize {
        Model::dim(self)
    }

    fn embed_tokens(&self, tokens: &Tokens, scratch: &mut Scratch, out: &mut [f32]) -> Coverage {
        let unknown = self.encode_tokens(tokens, &mut scratch.encoded);
        let e = &scratch.encoded;
        self.embed_into(e, out);
        Coverage {
            known: (e.words.len() + e.trigrams.len()) as u32,
            unknown,
        }
    }

    fn describe(&self) -> String {
        format!(
            "{} model ({} words x {}, {} trigrams x {})",
            self.kind.name(),
            self.words.len(),
            self.word_dim,
            self.trigrams.len(),
            self.trigram_dim
        )
    }
    fn short_name(&self) -> String {
        self.kind.name().into()
    }
}

/// The para_score model a `[scoring]` section or a command line names:
/// a `.pfe` model (or a directory holding `model.pfe`) or GloVe-format
/// word vectors.
pub fn load_encoder(
    model: Option<&Path>,
    vectors: Option<&Path>,
) -> Result<Option<Box<dyn SentenceEncoder>>, EncoderError> {
    Ok(match (model, vectors) {
        (Some(_), Some(_)) => {
            return Err(EncoderError::Invalid(
                "give a model or word vectors for para_score, not both".into(),
            ))
        }
        (Some(m), None) => {
            let model = Model::load(m)?;
            if Bf16Model::exact(&model) {
                Bf16Model::new(model).map(|p| Box::new(p) as Box<dyn SentenceEncoder>)
            } else {
                Some(Box::new(model))
            }
        }
        (None, Some(v)) => {
            let (v, _) = Vectors::load(v).map_err(|e| EncoderError::Invalid(e.to_string()))?;
            Some(Box::new(v))
        }
        (None, None) => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenize;

    fn trigrams(s: &str) -> Vec<String> {
        let mut v = Vec::new();
        for_each_trigram(&tokenize(s), |k| v.push(trigram_text(k)));
        v
    }

    #[test]
    fn trigrams_cover_the_sentence_padded_once() {
        assert_eq!(trigrams("Cat"), [" ca", "cat", "at "]);
        assert_eq!(trigrams("a"), [" a "]);
        assert_eq!(
            trigrams("The cat!"),
            [" th", "the", "he ", "e c", " ca", "cat", "at ", "t !", " ! "]
        );
        assert_eq!(trigrams("žil"), [" ži", "žil", "il "]);
        assert!(trigrams("  ").is_empty());
        assert_eq!(trigram_key("abc").map(trigram_text).as_deref(), Some("abc"));
        assert_eq!(trigram_key("ab"), None);
        assert_eq!(trigram_key("abcd"), None);
    }

    fn model() -> Model {
        // Words cat, dog (+ UNK); trigrams " ca", "cat", "at ".
        Model::from_tables(
            Kind::WordTrigram,
            vec!["cat".into(), "dog".into()],
            2,
            vec![1.0, 0.0, 0.0, 1.0, 0.5, 0.5],
            vec![" ca".into(), "cat".into(), "at ".into()],
            1,
            vec![1.0, 2.0, 3.0],
        )
        .unwrap()
    }

    #[test]
    fn unknown_words_take_the_unk_row_and_unknown_trigrams_are_left_out() {
        let mut m = model();
        // The raw means (unit halves: the next test).
        m.parts = PartScale::Raw;
        let e = m.encode("Cat zebra");
        assert_eq!(e.words, [0, 2]);
        // " ca", "cat", "at " known; "t z", " ze", ... not.
        assert_eq!(e.trigrams, [0, 1, 2]);
        let g = m.embed("Cat zebra");
        assert_eq!(g, [0.75, 0.25, 2.0]);
        let mut s = Scratch::default();
        let mut out = vec![0.0; 3];
        let c = m.embed_tokens(&tokenize("Cat zebra"), &mut s, &mut out);
        assert_eq!(out, g);
        assert_eq!(
            c,
            Coverage {
                known: 5,
                unknown: 1
            }
        );
    }

    /// Writes a `.pfe` of `magic`, `header` and the tables' bytes `tables`.
    fn write_with_header(p: &Path, magic: &[u8; 7], header: &serde_json::Value, tables: &[u8]) {
        let h = serde_json::to_vec(header).unwrap();
        let mut b = magic.to_vec();
        b.extend((h.len() as u64).to_le_bytes());
        b.extend(&h);
        b.extend(tables);
        std::fs::write(p, b).unwrap();
    }

    /// A WORD,TRIGRAM model built now scales each half to length
    /// sqrt(d_i / D), keeps saying so through a save, and a file written
    /// before (unit halves, or raw ones before that) scores as it was
    /// trained.
    #[test]
    fn word_trigram_halves_are_weighted_by_dimension_unless_the_file_predates_it() {
        let m = model();
        assert_eq!(m.parts, PartScale::ByDimension);
        let g = m.embed("Cat zebra");
        let n = (0.75f32 * 0.75 + 0.25 * 0.25).sqrt();
        // word_dim 2 and trigram_dim 1: lengths sqrt(2/3) and sqrt(1/3).
        let (lw, lt) = ((2.0f32 / 3.0).sqrt(), (1.0f32 / 3.0).sqrt());
        for (got, want) in g.iter().zip([0.75 / n * lw, 0.25 / n * lw, lt]) {
            assert!((got - want).abs() < 1e-6, "{g:?}");
        }
        assert!((g.iter().map(|x| x * x).sum::<f32>() - 1.0).abs() < 1e-6);
        let (mut s, mut out) = (Scratch::default(), vec![0.0; 3]);
        m.embed_tokens(&tokenize("Cat zebra"), &mut s, &mut out);
        assert_eq!(out, g);
        // A sentence without a known trigram keeps a zero half.
        assert_eq!(&m.embed("dog")[2..], &[0.0]);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.pfe");
        m.save(&p).unwrap();
        assert_eq!(Model::load(&p).unwrap().embed("Cat zebra"), g);
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(&bytes[..7], MAGIC_PARTS_BY_DIMENSION);
        let len = u64::from_le_bytes(bytes[7..15].try_into().unwrap()) as usize;
        let h: serde_json::Value = serde_json::from_slice(&bytes[15..15 + len]).unwrap();
        assert_eq!(
            (&h["unit_parts"], &h["parts_by_dimension"]),
            (&true.into(), &true.into())
        );
        // The file as each earlier writer wrote it: its magic, its header.
        let rewrite = |magic: &[u8; 7], drop: &[&str]| {
            let mut h = h.clone();
            for k in drop {
                h.as_object_mut().unwrap().remove(*k);
            }
            write_with_header(&p, magic, &h, &bytes[15 + len..]);
        };
        // Unit halves (PFEMB2): the plain mean of the halves' cosines.
        rewrite(MAGIC_UNIT_PARTS, &["parts_by_dimension"]);
        let unit = Model::load(&p).unwrap();
        assert_eq!(unit.parts, PartScale::Unit);
        for (got, want) in unit
            .embed("Cat zebra")
            .iter()
            .zip([0.75 / n, 0.25 / n, 1.0])
        {
            assert!((got - want).abs() < 1e-6);
        }
        // Raw halves (PFEMB1, no flags).
        rewrite(MAGIC, &["parts_by_dimension", "unit_parts"]);
        let legacy = Model::load(&p).unwrap();
        assert_eq!(legacy.parts, PartScale::Raw);
        assert_eq!(legacy.embed("Cat zebra"), [0.75, 0.25, 2.0]);
        // Magic and flags disagreeing is damage: a reader from before a
        // flag knew only the older magic, so it refuses the newer file
        // instead of scoring its halves the old way.
        for (magic, drop) in [
            (MAGIC_UNIT_PARTS, &[][..]),
            (MAGIC_PARTS_BY_DIMENSION, &["parts_by_dimension"][..]),
            (MAGIC, &["parts_by_dimension"][..]),
        ] {
            rewrite(magic, drop);
            let e = Model::load(&p).unwrap_err().to_string();
            assert!(e.contains("unit_parts") && e.contains("under magic"), "{e}");
        }
        rewrite(MAGIC_PARTS_BY_DIMENSION, &["unit_parts"]);
        let e = Model::load(&p).unwrap_err().to_string();
        assert!(e.contains("parts_by_dimension without unit_parts"), "{e}");
        // A single table has nothing to balance, and a file that says
        // otherwise is damaged.
        let mut t = m.clone();
        t.kind = Kind::Trigram;
        t.word_dim = 0;
        t.w.clear();
        t.words.clear();
        t.parts = PartScale::Raw;
        t.save(&p).unwrap();
        assert_eq!(Model::load(&p).unwrap().parts, PartScale::Raw);
        let bytes = std::fs::read(&p).unwrap();
        let len = u64::from_le_bytes(bytes[7..15].try_into().unwrap()) as usize;
        let mut h: serde_json::Value = serde_json::from_slice(&bytes[15..15 + len]).unwrap();
        h["unit_parts"] = true.into();
        write_with_header(&p, MAGIC_UNIT_PARTS, &h, &bytes[15 + len..]);
        let e = Model::load(&p).unwrap_err().to_string();
        assert!(e.contains("one table"), "{e}");
        let w = Model::from_tables(
            Kind::Word,
            vec!["cat".into()],
            1,
            vec![2.0, 0.0],
            vec![],
            0,
            vec![],
        )
        .unwrap();
        assert_eq!(w.parts, PartScale::Raw);
    }

    /// A model whose dimensions cover every path of the summing kernel
    /// (blocks of 64 and 8 and a tail), values on the bfloat16 grid.
    fn wide_model() -> Model {
        let text = "the cat sat on a mat while dogs ran past the old barn";
        let mut trigrams = Vec::new();
        for_each_trigram(&tokenize(text), |k| {
            let t = trigram_text(k);
            if !trigrams.contains(&t) {
                trigrams.push(t);
            }
        });
        let words: Vec<String> = text.split(' ').map(String::from).collect();
        let mut seed = 7u64;
        let mut value = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            from_bf16(to_bf16((seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5))
        };
        let (wd, td) = (75, 137);
        let w = (0..(words.len() + 1) * wd).map(|_| value()).collect();
        let t = (0..trigrams.len() * td).map(|_| value()).collect();
        Model::from_tables(Kind::WordTrigram, words, wd, w, trigrams, td, t).unwrap()
    }

    #[test]
    fn the_blocked_sums_equal_a_plain_loop_and_bf16_rows_give_the_same_bits() {
        let m = wide_model();
        for text in [
            "the cat sat",
            "dogs ran past the old barn on a mat",
            "zebra",
        ] {
            let e = m.encode(text);
            let mut want = vec![0f32; m.dim()];
            let (ww, wt) = want.split_at_mut(m.word_dim);
            for (rows, table, dim, out) in [
                (&e.words, &m.w, m.word_dim, ww),
                (&e.trigrams, &m.t, m.trigram_dim, wt),
            ] {
                for &r in rows.iter() {
                    for (o, x) in out.iter_mut().zip(&table[r as usize * dim..][..dim]) {
                        *o += x;
                    }
                }
                let inv = 1.0 / rows.len().max(1) as f32;
                out.iter_mut().for_each(|o| *o *= inv);
            }
            m.scale_parts(&mut want);
            assert_eq!(m.embed(text), want, "{text}");
            let packed = Bf16Model::new(m.clone()).expect("every value is a bfloat16");
            let (mut scratch, mut out) = (Scratch::default(), vec![0f32; m.dim()]);
            packed.embed_tokens(&tokenize(text), &mut scratch, &mut out);
            assert_eq!(out, want, "{text}");
        }
        let mut off_grid = m.clone();
        off_grid.t[3] += 1e-6;
        assert!(Bf16Model::new(off_grid).is_none());
    }

    #[test]
    fn a_bf16_model_is_scored_from_its_packed_rows() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.pfe");
        wide_model().save_as(&p, Precision::Bf16).unwrap();
        let e = load_encoder(Some(&p), None).unwrap().unwrap();
        assert!(e.describe().ends_with("(bf16)"), "{}", e.describe());
        wide_model().save_as(&p, Precision::F32).unwrap();
        // An f32 file whose values happen to be bfloat16 is packed too.
        let e = load_encoder(Some(&p), None).unwrap().unwrap();
        assert!(e.describe().ends_with("(bf16)"), "{}", e.describe());
        model_f32_off_grid().save(&p).unwrap();
        let e = load_encoder(Some(&p), None).unwrap().unwrap();
        assert!(!e.describe().contains("bf16"), "{}", e.describe());
    }

    fn model_f32_off_grid() -> Model {
        let mut m = model();
        m.t[0] = 0.1;
        m
    }

    /// A model holding a value that is not a finite number (a diverged run,
    /// a damaged file) is refused at load, naming the file, the table and
    /// the row, so that it never scores.
    #[test]
    fn a_model_with_a_non_finite_value_is_refused_naming_its_row() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.pfe");
        let mut m = model();
        m.w[3] = f32::NAN; // "dog"
        m.save(&p).unwrap();
        let e = Model::load(&p).unwrap_err().to_string();
        assert!(
            e.contains("m.pfe") && e.contains("word") && e.contains("row 1") && e.contains("dog"),
            "{e}"
        );
        let mut m = model();
        m.t[2] = f32::INFINITY;
        m.save(&p).unwrap();
        let e = load_encoder(Some(&p), None)
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("m.pfe") && e.contains("trigram") && e.contains("row 2"),
            "{e}"
        );
    }

    #[test]
    fn save_load_round_trips_in_both_precisions() {
        let m = model();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.pfe");
        m.save(&p).unwrap();
        assert_eq!(
            Model::load(&p).unwrap().embed("dog cat"),
            m.embed("dog cat")
        );
        m.save_as(&p, Precision::Bf16).unwrap();
        // 1.0, 0.5, 2.0 ... are exact in bfloat16.
        let back = Model::load(dir.path()).unwrap_err().to_string();
        assert!(back.contains("model.pfe"), "{back}");
        assert_eq!(
            Model::load(&p).unwrap().embed("dog cat"),
            m.embed("dog cat")
        );
        assert_eq!(from_bf16(to_bf16(0.1)), 0.100_097_656);
        assert_eq!(from_bf16(to_bf16(-3.0)), -3.0);
        let bytes = std::fs::read(&p).unwrap();
        std::fs::write(&p, &bytes[..bytes.len() - 1]).unwrap();
        let e = Model::load(&p).unwrap_err().to_string();
        assert!(e.contains("m.pfe") && e.contains("bytes"), "{e}");
    }
}
