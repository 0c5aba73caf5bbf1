//! Word vectors in GloVe text format (`word v1 ... vd`, one per line; plain
//! or gzip). PARAGRAM-PHRASE, PARAGRAM-SL999 and the vectors that
//! `paraforge export-vectors` writes use the same format. A word2vec-style
//! header line (`count dim`) is skipped.
//!
//! Loading parses blocks of lines in parallel and keeps one contiguous f32
//! matrix, so 400k x 300 vectors take about 480 MB and load in seconds.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use rustc_hash::FxHashMap;

use crate::tokenize::word_hash;

#[derive(Debug, thiserror::Error)]
pub enum VectorsError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: no vectors in the file")]
    Empty { path: PathBuf },
    /// Most lines are not vectors of the file's dimension (taken from its
    /// first vector line): a wrong or damaged file, whose few readable
    /// lines would score as if they were the vectors.
    #[error("{path}: {skipped} lines are not vectors of dimension {dim} and only {loaded} are (first bad line {first}); not a vectors file of one dimension")]
    MostlyUnreadable {
        path: PathBuf,
        dim: usize,
        loaded: usize,
        skipped: usize,
        first: u64,
    },
    #[error("{path}:{line}: {reason}")]
    BadLine {
        path: PathBuf,
        line: u64,
        reason: String,
    },
    /// A vector that is not numbers scores NaN, and skipped it would make
    /// its word unknown without a word said: the file is refused.
    #[error("{path}:{line}: the vector of {word:?} holds {value}; vectors that are not finite numbers cannot score")]
    NonFinite {
        path: PathBuf,
        line: u64,
        word: String,
        value: f32,
    },
}

/// What loading skipped, so that a user can tell a clean file from a damaged one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadReport {
    pub loaded: usize,
    /// Lines whose number of values differs from the file's dimension.
    pub wrong_dimension: usize,
    /// Lines with a value that is not a number.
    pub unparsable: usize,
    /// Words seen before (the first vector is kept).
    pub duplicates: usize,
    /// First skipped line (1-based), to look at.
    pub first_skipped_line: Option<u64>,
}

/// A loaded set of word vectors.
#[derive(Debug, Clone)]
pub struct Vectors {
    dim: usize,
    /// Used while loading (duplicates); emptied by `seal`.
    index: FxHashMap<Box<str>, u32>,
    /// Open addressing on `word_hash`: slot -> word index (u32::MAX = empty).
    slots: Vec<u32>,
    hashes: Vec<u64>,
    words: Vec<Box<str>>,
    data: Vec<f32>,
}

enum Parsed {
    Vector(Box<str>, Vec<f32>),
    /// Numbers, one of them NaN or infinite (or past f32's range).
    NonFinite(Box<str>, f32),
    WrongDim,
    Unparsable,
    Blank,
}

fn parse_line(line: &str, dim: usize) -> Parsed {
    let line = line.trim_end_matches(['\r', '\n']);
    let mut parts = line.split(' ').filter(|p| !p.is_empty());
    let Some(word) = parts.next() else {
        return Parsed::Blank;
    };
    let mut v = Vec::with_capacity(dim);
    for p in parts {
        match fast_float2::parse::<f32, _>(p) {
            Ok(x) => v.push(x),
            _ => return Parsed::Unparsable,
        }
    }
    if v.len() != dim {
        return Parsed::WrongDim;
    }
    if let Some(&x) = v.iter().find(|x| !x.is_finite()) {
        return Parsed::NonFinite(word.into(), x);
    }
    Parsed::Vector(word.into(), v)
}

/// A vectors file's lines, bounded: a file without line breaks is
/// refused at the bound, not read whole.
struct Lines<'p, R> {
    r: R,
    path: &'p Path,
    buf: Vec<u8>,
    /// The last line counted (1-based).
    line_no: u64,
}

impl<R: BufRead> Lines<'_, R> {
    /// Line `at`, `None` at the end; an invalid UTF-8 line reads as NUL.
    fn next(&mut self, at: u64) -> Result<Option<String>, VectorsError> {
        use crate::text::{read_line_limited, LineRead, LineTooLong, MAX_LINE_BYTES};
        let io = |source| VectorsError::Io {
            path: self.path.to_path_buf(),
            source,
        };
        match read_line_limited(&mut self.r, &mut self.buf, MAX_LINE_BYTES).map_err(io)? {
            LineRead::Eof => Ok(None),
            LineRead::TooLong { bytes } => Err(VectorsError::BadLine {
                path: self.path.to_path_buf(),
                line: at,
                reason: LineTooLong {
                    line: at,
                    bytes,
                    limit: MAX_LINE_BYTES,
                }
                .to_string(),
            }),
            LineRead::Line { .. } => Ok(Some(
                String::from_utf8(std::mem::take(&mut self.buf)).unwrap_or_else(|_| "\u{0}".into()),
            )),
        }
    }

    /// The first vector line and the dimension it gives (blank lines and a
    /// word2vec `COUNT DIM` header skipped).
    fn first_vector(&mut self) -> Result<(String, usize), VectorsError> {
        loop {
            let Some(first) = self.next(self.line_no + 1)? else {
                return Err(VectorsError::Empty {
                    path: self.path.to_path_buf(),
                });
            };
            self.line_no += 1;
            let fields: Vec<&str> = first.split_whitespace().collect();
            if fields.is_empty() {
                continue;
            }
            if fields.len() == 2 && fields.iter().all(|f| f.parse::<u64>().is_ok()) {
                continue; // word2vec header
            }
            if fields.len() < 2 {
                return Err(VectorsError::BadLine {
                    path: self.path.to_path_buf(),
                    line: self.line_no,
                    reason: "expected a word followed by numbers".into(),
                });
            }
            let dim = fields.len() - 1;
            return Ok((first, dim));
        }
    }
}

/// Adds one parsed line to `v`, counting what is skipped.
fn add_parsed(
    parsed: Parsed,
    line: u64,
    path: &Path,
    v: &mut Vectors,
    report: &mut LoadReport,
) -> Result<(), VectorsError> {
    match parsed {
        Parsed::NonFinite(word, value) => {
            return Err(VectorsError::NonFinite {
                path: path.to_path_buf(),
                line,
                word: word.into(),
                value,
            })
        }
        Parsed::Vector(word, values) => {
            if v.push(&word, &values) {
                report.loaded += 1;
            } else {
                report.duplicates += 1;
            }
        }
        Parsed::WrongDim => {
            report.wrong_dimension += 1;
            report.first_skipped_line.get_or_insert(line);
        }
        Parsed::Unparsable => {
            report.unparsable += 1;
            report.first_skipped_line.get_or_insert(line);
        }
        Parsed::Blank => {}
    }
    Ok(())
}

/// A file that gave no vector, or more skipped lines than vectors, is an
/// error; skipped lines and repeated words are said.
fn check_loaded(
    v: &Vectors,
    report: &LoadReport,
    path: &Path,
    dim: usize,
) -> Result<(), VectorsError> {
    if v.words.is_empty() {
        return Err(VectorsError::Empty {
            path: path.to_path_buf(),
        });
    }
    let skipped = report.wrong_dimension + report.unparsable;
    if skipped > report.loaded {
        return Err(VectorsError::MostlyUnreadable {
            path: path.to_path_buf(),
            dim,
            loaded: report.loaded,
            skipped,
            first: report.first_skipped_line.unwrap_or(0),
        });
    }
    if skipped + report.duplicates > 0 {
        // Said wherever vectors are read (scoring, training, evaluation,
        // export), not only where a caller looks at the report.
        tracing::warn!(
            path = %path.display(),
            wrong_dimension = report.wrong_dimension,
            unparsable = report.unparsable,
            repeated_words = report.duplicates,
            first_skipped_line = report.first_skipped_line.unwrap_or(0),
            "word vectors: lines skipped (rows of another width or with a non-number), and repeated words (the first vector kept)"
        );
    }
    Ok(())
}

const BLOCK_LINES: usize = 16_384;

impl Vectors {
    /// Loads a GloVe-format file (`.gz` and `.zst` are decompressed). Malformed lines are
    /// skipped and counted in the report; a file with no usable line is an error.
    pub fn load(path: &Path) -> Result<(Vectors, LoadReport), VectorsError> {
        let io = |source| VectorsError::Io {
            path: path.to_path_buf(),
            source,
        };
        Vectors::from_reader(crate::text::open_local(path).map_err(io)?, path)
    }

    /// As [`Vectors::load`], from any reader; `path` names it in messages.
    pub fn from_reader(
        r: impl BufRead,
        path: &Path,
    ) -> Result<(Vectors, LoadReport), VectorsError> {
        let mut l = Lines {
            r,
            path,
            buf: Vec::new(),
            line_no: 0,
        };
        let (first, dim) = l.first_vector()?;
        let mut v = Vectors::empty(dim);
        let mut report = LoadReport::default();
        let first_line = l.line_no;
        add_parsed(
            parse_line(&first, dim),
            first_line,
            path,
            &mut v,
            &mut report,
        )?;
        let mut block: Vec<String> = Vec::with_capacity(BLOCK_LINES);
        loop {
            block.clear();
            for _ in 0..BLOCK_LINES {
                // Invalid UTF-8 on a line reads as NUL: counted, and gone on.
                match l.next(l.line_no + block.len() as u64 + 1)? {
                    None => break,
                    Some(s) => block.push(s),
                }
            }
            if block.is_empty() {
                break;
            }
            let parsed: Vec<Parsed> = block
                .par_iter()
                .map(|s| {
                    if s == "\u{0}" {
                        Parsed::Unparsable
                    } else {
                        parse_line(s, dim)
                    }
                })
                .collect();
            for p in parsed {
                l.line_no += 1;
                add_parsed(p, l.line_no, path, &mut v, &mut report)?;
            }
        }
        check_loaded(&v, &report, path, dim)?;
        v.data.shrink_to_fit();
        v.seal();
        Ok((v, report))
    }

    /// Builds vectors from (word, values) pairs, e.g. a trained model's embeddings.
    pub fn from_pairs<'a>(
        dim: usize,
        pairs: impl IntoIterator<Item = (&'a str, &'a [f32])>,
    ) -> Vectors {
        let mut v = Vectors::empty(dim);
        for (w, x) in pairs {
            if x.len() == dim {
                v.push(w, x);
            }
        }
        v.seal();
        v
    }

    /// Builds the lookup table keyed by the tokens' own hash.
    fn seal(&mut self) {
        self.index = FxHashMap::default();
        let cap = (self.words.len() * 2).next_power_of_two().max(16);
        self.slots = vec![u32::MAX; cap];
        self.hashes = self.words.iter().map(|w| word_hash(w)).collect();
        for (i, &h) in self.hashes.iter().enumerate() {
            let mut s = h as usize & (cap - 1);
            while self.slots[s] != u32::MAX {
                s = (s + 1) & (cap - 1);
            }
            self.slots[s] = i as u32;
        }
    }

    /// Looks a word up by its `word_hash` (already computed by the tokenizer).
    pub fn get_hashed(&self, hash: u64, word: &str) -> Option<&[f32]> {
        self.find(hash, word).map(|i| self.row(i as usize))
    }

    fn find(&self, hash: u64, word: &str) -> Option<u32> {
        let mask = self.slots.len().checked_sub(1)?;
        let mut s = hash as usize & mask;
        loop {
            let i = self.slots[s];
            if i == u32::MAX {
                return None;
            }
            if self.hashes[i as usize] == hash && &*self.words[i as usize] == word {
                return Some(i);
            }
            s = (s + 1) & mask;
        }
    }

    fn empty(dim: usize) -> Vectors {
        Vectors {
            dim,
            index: FxHashMap::default(),
            slots: Vec::new(),
            hashes: Vec::new(),
            words: Vec::new(),
            data: Vec::new(),
        }
    }

    /// Adds a word unless it is already there; false for a duplicate.
    fn push(&mut self, word: &str, values: &[f32]) -> bool {
        if self.index.contains_key(word) {
            return false;
        }
        self.index.insert(word.into(), self.words.len() as u32);
        self.words.push(word.into());
        self.data.extend_from_slice(values);
        true
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    pub fn len(&self) -> usize {
        self.words.len()
    }

    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    pub fn get(&self, word: &str) -> Option<&[f32]> {
        self.get_hashed(word_hash(word), word)
    }

    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.dim..(i + 1) * self.dim]
    }

    pub fn word(&self, i: usize) -> &str {
        &self.words[i]
    }

    pub fn index_of(&self, word: &str) -> Option<u32> {
        self.find(word_hash(word), word)
    }

    /// Sums the vectors of the known words into `sum`; returns (known, unknown) counts.
    pub fn sum_into<'a>(
        &self,
        words: impl Iterator<Item = &'a str>,
        sum: &mut [f32],
    ) -> (u32, u32) {
        sum.fill(0.0);
        let (mut known, mut unknown) = (0, 0);
        for w in words {
            match self.get(w) {
                Some(row) => {
                    for (s, x) in sum.iter_mut().zip(row) {
                        *s += x;
                    }
                    known += 1;
                }
                None => unknown += 1,
            }
        }
        (known, unknown)
    }

    /// Writes the vectors in GloVe text format.
    pub fn write(&self, mut w: impl std::io::Write) -> std::io::Result<()> {
        for (i, word) in self.words.iter().enumerate() {
            w.write_all(word.as_bytes())?;
            for x in self.row(i) {
                write!(w, " {x}")?;
            }
            w.write_all(b"\n")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<(Vectors, LoadReport), VectorsError> {
        Vectors::from_reader(
            std::io::Cursor::new(text.as_bytes().to_vec()),
            Path::new("test.txt"),
        )
    }

    /// Files load by their extension as every other text input does:
    /// `.zst` as well as `.gz` (it was read as raw bytes before).
    #[test]
    fn compressed_files_load_by_extension() {
        let dir = std::env::temp_dir().join(format!("pf-vectors-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let text = b"a 1 0\nb 0 1\n";
        let zst = dir.join("v.txt.zst");
        std::fs::write(&zst, zstd::encode_all(&text[..], 3).unwrap()).unwrap();
        let (v, _) = Vectors::load(&zst).unwrap();
        std::fs::remove_dir_all(&dir).ok();
        assert_eq!((v.words.len(), v.dim), (2, 2));
    }

    #[test]
    fn loads_any_dimension_and_skips_bad_lines_with_counts() {
        let (v, r) =
            load("the 0.1 0.2 0.3\ncat 1 2 3\nbad 1 2\nnan x 2 3\ncat 9 9 9\n\ndog -1e-3 2.5 3\n")
                .unwrap();
        assert_eq!(v.dim(), 3);
        assert_eq!(v.len(), 3);
        assert_eq!(v.get("cat").unwrap(), &[1.0, 2.0, 3.0]);
        assert_eq!(v.get("dog").unwrap(), &[-1e-3, 2.5, 3.0]);
        assert_eq!(
            r,
            LoadReport {
                loaded: 3,
                wrong_dimension: 1,
                unparsable: 1,
                duplicates: 1,
                first_skipped_line: Some(3),
            }
        );
    }

    /// A file whose first vector line has another width than the rest (a
    /// stray header, a file of another dimension glued on) loads almost
    /// nothing: an error, not a handful of vectors that score a corpus.
    #[test]
    fn a_file_mostly_of_another_dimension_is_an_error() {
        let e = load(
            "x 1 2 3 4
a 1 0
b 0 1
c 1 1
",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("3 lines are not vectors of dimension 4") && e.contains("first bad line 2"),
            "{e}"
        );
    }

    #[test]
    fn skips_a_word2vec_header_and_rejects_empty_files() {
        let (v, _) = load("2 2\na 1 0\nb 0 1\n").unwrap();
        assert_eq!((v.len(), v.dim()), (2, 2));
        assert!(matches!(load(""), Err(VectorsError::Empty { .. })));
        assert!(matches!(load("\n\n"), Err(VectorsError::Empty { .. })));
        assert!(matches!(
            load("justaword\n"),
            Err(VectorsError::BadLine { line: 1, .. })
        ));
    }

    /// A value that is not a finite number (NaN, infinity, or one past
    /// f32's range) is an error naming the line and the word: skipping it
    /// would score the word as unknown, keeping it would score NaN.
    #[test]
    fn a_non_finite_value_is_an_error_naming_its_line() {
        for bad in ["nan", "inf", "-Infinity", "1e39"] {
            let e = load(&format!("a 1 0\nb 0 1\ncat 0.5 {bad}\nd 1 1\n"))
                .map(|_| ())
                .unwrap_err()
                .to_string();
            assert!(e.contains("test.txt:3") && e.contains("cat"), "{bad}: {e}");
        }
    }

    #[test]
    fn round_trips_through_the_text_format() {
        let (v, _) = load("a 0.5 -1.25\nb 3 4\n").unwrap();
        let mut buf = Vec::new();
        v.write(&mut buf).unwrap();
        let (w, _) = load(std::str::from_utf8(&buf).unwrap()).unwrap();
        assert_eq!(w.get("a"), v.get("a"));
        assert_eq!(w.get("b"), v.get("b"));
    }

    #[test]
    fn sums_known_words_and_counts_unknown_ones() {
        let (v, _) = load("a 1 0\nb 0 1\n").unwrap();
        let mut s = vec![0.0; 2];
        assert_eq!(
            v.sum_into(["a", "b", "zz", "a"].into_iter(), &mut s),
            (3, 1)
        );
        assert_eq!(s, [2.0, 1.0]);
    }
}
