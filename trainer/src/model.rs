//! The embedding models and their file format. A sentence is tokenized
//! exactly as the pipeline's scores tokenize it (`paraforge_core::tokenize`),
//! so that exported word vectors mean the same thing to `para_score`.
//!
//! File format (`.pfe`): the 7 bytes `PFEMB1\n`, a little-endian u64 header
//! length, a JSON header (kind, dimensions, word and trigram lists, notes),
//! then the word matrix and the trigram matrix as little-endian f32 rows.

use std::io::{Read, Write};
use std::path::Path;

use rand::{Rng, SeedableRng};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use crate::TrainError;

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

/// A tokenized sentence: word rows (unknown words -> the UNK row) and the
/// known character trigrams of its words.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Encoded {
    pub words: Vec<u32>,
    pub trigrams: Vec<u32>,
}

impl Encoded {
    pub fn is_empty(&self) -> bool {
        self.words.is_empty() && self.trigrams.is_empty()
    }
}

/// Calls `f` with each character trigram of a token, padded with a space
/// on each side as in Wieting et al.'s charagram models (" a", "ab", "b "
/// become trigrams of a one-letter word " a ").
pub fn for_each_trigram(token: &str, buf: &mut String, mut f: impl FnMut(&str)) {
    let chars: Vec<char> = std::iter::once(' ')
        .chain(token.chars())
        .chain(std::iter::once(' '))
        .collect();
    for w in chars.windows(3) {
        buf.clear();
        buf.extend(w);
        f(buf);
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Header {
    kind: Kind,
    word_dim: usize,
    trigram_dim: usize,
    words: Vec<String>,
    trigrams: Vec<String>,
    #[serde(default)]
    notes: serde_json::Value,
}

const MAGIC: &[u8; 7] = b"PFEMB1\n";

/// Embedding tables. Row `words.len()` of the word table is UNK.
#[derive(Debug, Clone)]
pub struct Model {
    pub kind: Kind,
    pub word_dim: usize,
    pub trigram_dim: usize,
    words: Vec<String>,
    word_index: FxHashMap<String, u32>,
    trigrams: Vec<String>,
    trigram_index: FxHashMap<String, u32>,
    /// (words + 1) x word_dim.
    pub w: Vec<f32>,
    /// trigrams x trigram_dim.
    pub t: Vec<f32>,
    /// Free-form training notes kept in the file (data, settings, losses).
    pub notes: serde_json::Value,
}

fn index(list: &[String]) -> FxHashMap<String, u32> {
    list.iter()
        .enumerate()
        .map(|(i, s)| (s.clone(), i as u32))
        .collect()
}

impl Model {
    /// A fresh model: words and their initial vectors from `init` (a GloVe
    /// file's vectors; needed when `kind` uses words), the UNK row at zero,
    /// trigram rows uniform in +-0.05 from `seed`.
    pub fn new(
        kind: Kind,
        init: Option<&paraforge_core::Vectors>,
        trigrams: Vec<String>,
        trigram_dim: usize,
        seed: u64,
    ) -> Result<Model, TrainError> {
        let (mut words, mut w, mut word_dim) = (Vec::new(), Vec::new(), 0);
        if kind.words() {
            let v = init.ok_or_else(|| {
                TrainError::Invalid(format!(
                    "model {} needs word vectors to start from (--init-vectors)",
                    kind.name()
                ))
            })?;
            word_dim = v.dim();
            words.reserve(v.len());
            w.reserve((v.len() + 1) * word_dim);
            for i in 0..v.len() {
                words.push(v.word(i).to_string());
                w.extend_from_slice(v.row(i));
            }
            w.extend(std::iter::repeat_n(0.0, word_dim));
        }
        let (mut tri, mut t, mut tdim) = (Vec::new(), Vec::new(), 0);
        if kind.trigrams() {
            if trigrams.is_empty() || trigram_dim == 0 {
                return Err(TrainError::Invalid(
                    "a trigram model needs a trigram vocabulary and a dimension".into(),
                ));
            }
            tdim = trigram_dim;
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            t = (0..trigrams.len() * tdim)
                .map(|_| rng.random_range(-0.05f32..0.05))
                .collect();
            tri = trigrams;
        }
        Ok(Model {
            kind,
            word_dim,
            trigram_dim: tdim,
            word_index: index(&words),
            words,
            trigram_index: index(&tri),
            trigrams: tri,
            w,
            t,
            notes: serde_json::Value::Null,
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

    pub fn encode(&self, text: &str) -> Encoded {
        let toks = paraforge_core::tokenize(text);
        let mut e = Encoded::default();
        let mut buf = String::new();
        for tok in toks.iter() {
            if self.kind.words() {
                e.words
                    .push(self.word_index.get(tok.text).copied().unwrap_or(self.unk()));
            }
            if self.kind.trigrams() {
                for_each_trigram(tok.text, &mut buf, |g| {
                    if let Some(&i) = self.trigram_index.get(g) {
                        e.trigrams.push(i);
                    }
                });
            }
        }
        e
    }

    /// The sentence embedding: the mean word row, then the mean trigram
    /// row (zeros for a part with no rows).
    pub fn embed_into(&self, e: &Encoded, out: &mut [f32]) {
        out.fill(0.0);
        let (wo, to) = out.split_at_mut(self.word_dim);
        mean_rows(&self.w, self.word_dim, &e.words, wo);
        mean_rows(&self.t, self.trigram_dim, &e.trigrams, to);
    }

    pub fn embed(&self, text: &str) -> Vec<f32> {
        let mut out = vec![0.0; self.dim()];
        self.embed_into(&self.encode(text), &mut out);
        out
    }

    pub fn save(&self, path: &Path) -> Result<(), TrainError> {
        let header = serde_json::to_vec(&Header {
            kind: self.kind,
            word_dim: self.word_dim,
            trigram_dim: self.trigram_dim,
            words: self.words.clone(),
            trigrams: self.trigrams.clone(),
            notes: self.notes.clone(),
        })
        .map_err(|e| TrainError::Invalid(e.to_string()))?;
        let tmp = path.with_extension("pfe.tmp");
        let write = || -> std::io::Result<()> {
            let mut f = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
            f.write_all(MAGIC)?;
            f.write_all(&(header.len() as u64).to_le_bytes())?;
            f.write_all(&header)?;
            for x in self.w.iter().chain(&self.t) {
                f.write_all(&x.to_le_bytes())?;
            }
            f.into_inner().map_err(|e| e.into_error())?.sync_all()
        };
        write().map_err(|e| TrainError::io(&tmp, e))?;
        // Rename so that a crash never leaves a half-written model.
        std::fs::rename(&tmp, path).map_err(|e| TrainError::io(path, e))
    }

    pub fn load(path: &Path) -> Result<Model, TrainError> {
        let bad = |reason: String| TrainError::BadModel {
            path: path.to_path_buf(),
            reason,
        };
        let mut f = std::io::BufReader::new(
            std::fs::File::open(path).map_err(|e| TrainError::io(path, e))?,
        );
        let mut magic = [0u8; 7];
        f.read_exact(&mut magic)
            .map_err(|_| bad("shorter than its header".into()))?;
        if &magic != MAGIC {
            return Err(bad("wrong magic bytes (expected a .pfe file)".into()));
        }
        let mut len = [0u8; 8];
        f.read_exact(&mut len)
            .map_err(|_| bad("truncated header".into()))?;
        let len = u64::from_le_bytes(len);
        let size = std::fs::metadata(path)
            .map_err(|e| TrainError::io(path, e))?
            .len();
        if len > size {
            return Err(bad(format!(
                "header length {len} exceeds the file size {size}"
            )));
        }
        let mut header = vec![0u8; len as usize];
        f.read_exact(&mut header)
            .map_err(|_| bad("truncated header".into()))?;
        let h: Header = serde_json::from_slice(&header).map_err(|e| bad(format!("header: {e}")))?;
        if h.kind.words() != (h.word_dim > 0) || h.kind.trigrams() != (h.trigram_dim > 0) {
            return Err(bad(format!(
                "kind {} does not match dimensions {}/{}",
                h.kind.name(),
                h.word_dim,
                h.trigram_dim
            )));
        }
        let nw = if h.kind.words() {
            (h.words.len() + 1) * h.word_dim
        } else {
            0
        };
        let nt = h.trigrams.len() * h.trigram_dim;
        let want = 15 + len + 4 * (nw + nt) as u64;
        if size != want {
            return Err(bad(format!(
                "{size} bytes, expected {want} for {} words x {} and {} trigrams x {}",
                h.words.len(),
                h.word_dim,
                h.trigrams.len(),
                h.trigram_dim
            )));
        }
        let mut read = |n: usize| -> Result<Vec<f32>, TrainError> {
            let mut bytes = vec![0u8; n * 4];
            f.read_exact(&mut bytes)
                .map_err(|e| TrainError::io(path, e))?;
            Ok(bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect())
        };
        let w = read(nw)?;
        let t = read(nt)?;
        if w.iter().chain(&t).any(|x| !x.is_finite()) {
            return Err(bad("non-finite values in the embeddings".into()));
        }
        Ok(Model {
            kind: h.kind,
            word_dim: h.word_dim,
            trigram_dim: h.trigram_dim,
            word_index: index(&h.words),
            words: h.words,
            trigram_index: index(&h.trigrams),
            trigrams: h.trigrams,
            w,
            t,
            notes: h.notes,
        })
    }

    /// The word embeddings (UNK left out) as GloVe-format text, which
    /// `paraforge_core::Vectors::load` and so `para_score` read.
    pub fn export_vectors(&self, path: &Path) -> Result<usize, TrainError> {
        if !self.kind.words() {
            return Err(TrainError::Invalid(format!(
                "model {} has no word embeddings to export",
                self.kind.name()
            )));
        }
        let d = self.word_dim;
        let v = paraforge_core::Vectors::from_pairs(
            d,
            self.words
                .iter()
                .enumerate()
                .map(|(i, w)| (w.as_str(), &self.w[i * d..(i + 1) * d])),
        );
        let tmp = path.with_extension("tmp");
        let write = || -> std::io::Result<()> {
            let mut f = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
            v.write(&mut f)?;
            f.into_inner().map_err(|e| e.into_error())?.sync_all()
        };
        write().map_err(|e| TrainError::io(&tmp, e))?;
        std::fs::rename(&tmp, path).map_err(|e| TrainError::io(path, e))?;
        Ok(v.len())
    }
}

fn mean_rows(table: &[f32], dim: usize, rows: &[u32], out: &mut [f32]) {
    if rows.is_empty() || dim == 0 {
        return;
    }
    for &r in rows {
        let row = &table[r as usize * dim..(r as usize + 1) * dim];
        for (o, x) in out.iter_mut().zip(row) {
            *o += x;
        }
    }
    let inv = 1.0 / rows.len() as f32;
    out.iter_mut().for_each(|o| *o *= inv);
}

/// The scorer's cosine, so that STS and para_score agree on it.
pub use paraforge_core::score::cosine;

#[cfg(test)]
mod tests {
    use super::*;

    fn glove() -> paraforge_core::Vectors {
        paraforge_core::Vectors::from_reader(
            "cat 1 0 0\ndog 0.9 0.1 0\ncar 0 0 1\n".as_bytes(),
            Path::new("mini.txt"),
        )
        .unwrap()
        .0
    }

    #[test]
    fn trigrams_pad_each_word() {
        let mut got = Vec::new();
        for_each_trigram("cat", &mut String::new(), |g| got.push(g.to_string()));
        assert_eq!(got, [" ca", "cat", "at "]);
        got.clear();
        for_each_trigram("a", &mut String::new(), |g| got.push(g.to_string()));
        assert_eq!(got, [" a "]);
        got.clear();
        for_each_trigram("žil", &mut String::new(), |g| got.push(g.to_string()));
        assert_eq!(got, [" ži", "žil", "il "]);
    }

    #[test]
    fn embeddings_average_rows_and_save_load_round_trips() {
        let v = glove();
        let m = Model::new(
            Kind::WordTrigram,
            Some(&v),
            vec![" ca".into(), "cat".into(), "at ".into()],
            2,
            7,
        )
        .unwrap();
        let e = m.encode("Cat, zebra!");
        // cat, ",", zebra, "!" -> cat and three UNKs; trigrams of "cat" only.
        assert_eq!(e.words, [0, 3, 3, 3]);
        assert_eq!(e.trigrams, [0, 1, 2]);
        let g = m.embed("Cat, zebra!");
        assert_eq!(g.len(), 5);
        assert!((g[0] - 0.25).abs() < 1e-6 && g[1] == 0.0 && g[2] == 0.0);
        let mean_t0 = (m.t[0] + m.t[2] + m.t[4]) / 3.0;
        assert!((g[3] - mean_t0).abs() < 1e-6);

        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("m.pfe");
        m.save(&p).unwrap();
        let back = Model::load(&p).unwrap();
        assert_eq!(back.embed("Cat, zebra!"), g);
        assert_eq!(back.words(), m.words());

        // Truncated, garbage and wrong-kind files are errors naming the file.
        let bytes = std::fs::read(&p).unwrap();
        std::fs::write(&p, &bytes[..bytes.len() - 3]).unwrap();
        let e = Model::load(&p).unwrap_err().to_string();
        assert!(e.contains("m.pfe") && e.contains("bytes"), "{e}");
        std::fs::write(&p, b"hello").unwrap();
        assert!(Model::load(&p).unwrap_err().to_string().contains("m.pfe"));
        assert!(Model::new(Kind::Word, None, vec![], 0, 1).is_err());
        assert!("lstm".parse::<Kind>().is_err());
        assert_eq!("WORD, TRIGRAM".parse::<Kind>().unwrap(), Kind::WordTrigram);
    }

    #[test]
    fn exported_vectors_load_as_glove() {
        let v = glove();
        let m = Model::new(Kind::Word, Some(&v), vec![], 0, 1).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("v.txt");
        assert_eq!(m.export_vectors(&p).unwrap(), 3);
        let (back, _) = paraforge_core::Vectors::load(&p).unwrap();
        assert_eq!(back.get("dog").unwrap(), &[0.9, 0.1, 0.0]);
        let t = Model::new(Kind::Trigram, None, vec!["abc".into()], 4, 1).unwrap();
        assert!(t.export_vectors(&p).is_err());
    }
}
