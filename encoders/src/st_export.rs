//! Trained models and word vectors as sentence-transformers model
//! directories (`paraforge export --format sentence-transformers`), which
//! the library loads with `SentenceTransformer(dir)`.
//!
//! A `.pfe` model (WORD, TRIGRAM, WORD,TRIGRAM) is written by
//! [`write_module`]: the model file and a `modules.json` naming
//! [`MODULE_TYPE`], a module of the paraforge Python package that embeds
//! with paraforge's own code, so raw text gives paraforge's vectors (no
//! tokenizer to re-express; trigrams that cross word boundaries included).
//! Word vectors are written by [`write`] as the library's own modules:
//! a `WordEmbeddings` module (its `WhitespaceTokenizer` and the word table)
//! and a mean `Pooling` module, loadable without paraforge.
//!
//! The directory uses the module paths and keys that sentence-transformers
//! 3.x to 5.x write (`sentence_transformers.models.*`,
//! `pooling_mode_mean_tokens`), which 6.x maps to its own without a
//! warning; 5.x cannot read the paths 6.x writes. It loads in 3.0.1 and
//! later, the first release whose `WordEmbeddings` reads
//! `model.safetensors` (tested with 6.2.0).
//!
//! What the library computes is paraforge's embedding exactly when the
//! tokens agree (docs/encoders.md, "In sentence-transformers"): the tokenizer
//! is told to lowercase and to keep every word (no stop words), and the
//! vocabulary holds only words paraforge's tokenizer can produce, so that
//! text already split by paraforge (tokens joined by spaces) gives the same
//! rows; unknown words are dropped there as paraforge skips them in its
//! sum of word vectors.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use paraforge_core::Vectors;

/// Row 0, all zeros, which `WordEmbeddings` pads with (the name
/// sentence-transformers gives it); lowercased input never matches it.
const PADDING: &str = "PADDING_TOKEN";

const WEIGHTS: &str = "model.safetensors";
const POOLING_DIR: &str = "1_Pooling";

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// An encoder the library's modules cannot compute.
    #[error("{what}: this export cannot express the {encoder} encoder ({why}); `.pfe` models (WORD, TRIGRAM, WORD,TRIGRAM) and word vectors export to this format. The paraforge Python package's `Encoder.load(path).encode(sentences)` (sentence-transformers' `encode` signature) embeds with it instead")]
    Unsupported {
        what: String,
        encoder: String,
        why: String,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Invalid(String),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ExportError + '_ {
    move |source| ExportError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// What [`write`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// Words in the vocabulary (padding not counted).
    pub words: usize,
    pub dim: usize,
    /// Words left out because paraforge's tokenizer never produces them
    /// (e.g. "e.g." or "Paris"), or repeated.
    pub left_out: usize,
    /// The first few of them, for the summary.
    pub left_out_examples: Vec<String>,
}

/// The refusal for an encoder other than a word average: `what` names the
/// input (`--model DIR`), `encoder` the encoder.
pub fn unsupported(what: &str, encoder: &str) -> ExportError {
    let why = match encoder {
        "transformer" => "it is an ONNX graph; export the original Hugging Face model with sentence-transformers itself",
        _ => "its network is not a mean of word vectors",
    };
    ExportError::Unsupported {
        what: what.to_string(),
        encoder: encoder.to_string(),
        why: why.to_string(),
    }
}

/// The encoder a neural model directory holds, as `train --model` names it
/// (`lstm`, `word+trigram+lstm`), read from its `config.json` alone.
pub fn neural_encoder_name(dir: &Path) -> Result<String, ExportError> {
    let path = dir.join(crate::nn_model::CONFIG);
    let text = std::fs::read(&path).map_err(io(&path))?;
    let c: crate::nn_model::Config = serde_json::from_slice(&text)
        .map_err(|e| ExportError::Invalid(format!("{}: bad config: {e}", path.display())))?;
    Ok(crate::Spec {
        arch: c.shape.arch,
        parts: c.shape.parts,
    }
    .name())
}

/// One JSON file of an export directory, pretty-printed.
fn write_json(dir: &Path, name: &str, v: serde_json::Value) -> Result<(), ExportError> {
    let path = dir.join(name);
    let text = serde_json::to_string_pretty(&v).expect("JSON values serialize");
    std::fs::write(&path, text + "\n").map_err(io(&path))
}

/// `config_sentence_transformers.json` of both exports: para_score and
/// eval-sts compare embeddings by their cosine.
fn st_config() -> serde_json::Value {
    serde_json::json!({
        "model_type": "SentenceTransformer",
        "prompts": {},
        "default_prompt_name": null,
        "similarity_fn_name": "cosine",
    })
}

/// The module a `.pfe` export names: `paraforge_corpus.st.ParaforgeEncoder`
/// in the paraforge-corpus wheel (python/paraforge_corpus/st.py).
pub const MODULE_TYPE: &str = "paraforge_corpus.st.ParaforgeEncoder";

/// The file [`write_module`] copies the model to (the module's `load`
/// reads it).
pub const MODULE_MODEL_FILE: &str = "model.pfe";

/// Writes the sentence-transformers directory `dir` for the `.pfe` model
/// at `model` (`describe`: its kind and size, for the README): the model
/// file and the module that embeds with it. `dir` is made with its
/// parents and should be new.
pub fn write_module(
    model: &Path,
    describe: &str,
    origin: &str,
    dir: &Path,
) -> Result<(), ExportError> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let json = |name: &str, v: serde_json::Value| write_json(dir, name, v);
    json(
        "modules.json",
        serde_json::json!([{"idx": 0, "name": "0", "path": "", "type": MODULE_TYPE}]),
    )?;
    json("config_sentence_transformers.json", st_config())?;
    let target = dir.join(MODULE_MODEL_FILE);
    std::fs::copy(model, &target).map_err(io(&target))?;
    let path = dir.join("README.md");
    let text = format!(
        "---\nlibrary_name: sentence-transformers\npipeline_tag: sentence-similarity\ntags:\n- sentence-transformers\n- paraforge\n---\n\n\
         # A paraforge encoder for sentence-transformers\n\n\
         Exported by `paraforge export --format sentence-transformers` from {origin}: {describe}.\n\n\
         `modules.json` names `{MODULE_TYPE}`, a module of the paraforge Python package, which embeds \
         raw text with paraforge's own tokenizer and tables, so \
         `SentenceTransformer(DIR, trust_remote_code=True).encode(sentences)` returns what `paraforge embed` \
         writes (the library asks for that flag before it imports a module class from outside its own \
         package; this directory holds no code). Install the package's wheel first (`make wheel`, then \
         `pip install dist/paraforge_corpus-*.whl`; the name `paraforge` on the package index is another \
         project). Compare embeddings by cosine; a sentence with no word or trigram the model knows \
         gets a row of NaN.\n"
    );
    std::fs::write(&path, text).map_err(io(&path))
}

/// Writes the sentence-transformers directory `dir` for word vectors: made
/// with its parents, it should be new (files of the same names are
/// replaced). `origin` names the source in the directory's README.md;
/// `what` names it in errors.
pub fn write(
    vectors: &Vectors,
    what: &str,
    origin: &str,
    dir: &Path,
) -> Result<Written, ExportError> {
    let table = Table::of(vectors);
    if table.vocab.len() < 2 {
        return Err(ExportError::Invalid(format!(
            "{what}: no word that paraforge's tokenizer can produce; nothing to export"
        )));
    }
    std::fs::create_dir_all(dir.join(POOLING_DIR)).map_err(io(dir))?;
    let json = |name: &str, v: serde_json::Value| write_json(dir, name, v);
    json(
        "modules.json",
        serde_json::json!([
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.WordEmbeddings"},
            {"idx": 1, "name": "1", "path": POOLING_DIR, "type": "sentence_transformers.models.Pooling"},
        ]),
    )?;
    json("config_sentence_transformers.json", st_config())?;
    json(
        "wordembedding_config.json",
        serde_json::json!({
            "tokenizer_class": "sentence_transformers.models.tokenizer.WhitespaceTokenizer.WhitespaceTokenizer",
            "update_embeddings": false,
            "max_seq_length": 1_000_000,
        }),
    )?;
    // Without an explicit empty list the tokenizer drops English stop words
    // ("the", "a", "." ...), which paraforge averages like any word.
    json(
        "whitespacetokenizer_config.json",
        serde_json::json!({
            "vocab": table.vocab,
            "stop_words": [],
            "do_lower_case": true,
        }),
    )?;
    json(
        &format!("{POOLING_DIR}/config.json"),
        serde_json::json!({
            "word_embedding_dimension": table.dim,
            "pooling_mode_cls_token": false,
            "pooling_mode_mean_tokens": true,
            "pooling_mode_max_tokens": false,
            "pooling_mode_mean_sqrt_len_tokens": false,
        }),
    )?;
    let view = safetensors::tensor::TensorView::new(
        safetensors::Dtype::F32,
        vec![table.vocab.len(), table.dim],
        &table.bytes,
    )
    .map_err(|e| ExportError::Invalid(format!("{what}: the word table: {e}")))?;
    let bytes = safetensors::serialize([("emb_layer.weight", view)], None)
        .map_err(|e| ExportError::Invalid(format!("{what}: the word table: {e}")))?;
    let path = dir.join(WEIGHTS);
    std::fs::write(&path, bytes).map_err(io(&path))?;
    let written = Written {
        words: table.vocab.len() - 1,
        dim: table.dim,
        left_out: table.left_out.len(),
        left_out_examples: table.left_out.iter().take(5).cloned().collect(),
    };
    let path = dir.join("README.md");
    std::fs::write(&path, readme(origin, &written)).map_err(io(&path))?;
    Ok(written)
}

/// The exported table: vocabulary in row order and the rows as
/// little-endian f32 bytes.
struct Table {
    vocab: Vec<String>,
    bytes: Vec<u8>,
    dim: usize,
    left_out: Vec<String>,
    words: HashSet<String>,
}

impl Table {
    fn of(v: &Vectors) -> Table {
        let mut t = Table::start(v.dim(), v.len());
        for i in 0..v.len() {
            let w = v.word(i);
            t.push(w, v.get(w));
        }
        t
    }

    fn start(dim: usize, words: usize) -> Table {
        let mut t = Table {
            vocab: Vec::with_capacity(words + 2),
            bytes: Vec::with_capacity((words + 2) * dim * 4),
            dim,
            left_out: Vec::new(),
            words: HashSet::new(),
        };
        t.vocab.push(PADDING.to_string());
        t.bytes.resize(dim * 4, 0);
        t
    }

    /// Adds `word` with its row, unless paraforge can never look it up:
    /// its tokenizer does not produce it as one token, or it came before.
    fn push(&mut self, word: &str, row: Option<&[f32]>) {
        let toks = paraforge_core::tokenize(word);
        let producible = toks.len() == 1 && toks.get(0).text == word;
        match row {
            Some(row) if producible && self.first(word) => {
                self.vocab.push(word.to_string());
                self.extend(row);
            }
            _ => self.left_out.push(word.to_string()),
        }
    }

    /// Whether `word` is new to the vocabulary (and now in it).
    fn first(&mut self, word: &str) -> bool {
        self.words.insert(word.to_string())
    }

    fn extend(&mut self, row: &[f32]) {
        self.bytes.extend(row.iter().flat_map(|x| x.to_le_bytes()));
    }
}

fn readme(origin: &str, w: &Written) -> String {
    let unk = "Unknown words are left out, as paraforge leaves them out of its average of word vectors. paraforge sums the vectors and this model takes their mean: the two point the same way (every cosine is equal) and differ in length by the number of known words.\n\n";
    format!(
        "---\nlibrary_name: sentence-transformers\ntags:\n- sentence-transformers\n- feature-extraction\n- sentence-similarity\n---\n\n\
# paraforge word averaging\n\n\
Exported by `paraforge export --format sentence-transformers` from {origin}: \
{words} words of {dim} dimensions, averaged (`WordEmbeddings` + mean `Pooling`).\n\n\
```python\nfrom sentence_transformers import SentenceTransformer\nmodel = SentenceTransformer(\"path/to/this/directory\")\nembeddings = model.encode([\"a man is playing a guitar .\"])\n```\n\n\
The embeddings equal paraforge's when the text is given as paraforge tokenizes it: lowercased, \
words (runs of letters, digits and combining marks) and every other character apart, joined by spaces \
(\"Don't stop!\" as `don ' t stop !`). On raw text this tokenizer splits at spaces and strips ASCII \
punctuation from the ends of a word instead, so \"stop!\" is `stop` here and `stop !` to paraforge, \
and \"don't\" is one unknown word here.\n\n{unk}\
{left_out} words of the source are not in the vocabulary: paraforge's tokenizer never produces them, so it never looks them up.\n",
        words = w.words,
        dim = w.dim,
        left_out = w.left_out,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(dir: &Path, name: &str) -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(dir.join(name)).unwrap()).unwrap()
    }

    fn rows(dir: &Path) -> (Vec<usize>, Vec<f32>) {
        let bytes = std::fs::read(dir.join(WEIGHTS)).unwrap();
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let t = st.tensor("emb_layer.weight").unwrap();
        assert_eq!(t.dtype(), safetensors::Dtype::F32);
        let v = t
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        (t.shape().to_vec(), v)
    }

    #[test]
    fn word_vectors_have_no_unknown_row() {
        let (v, _) =
            Vectors::from_reader("the 1 2\ncat 3 4\nn't 5 6\n".as_bytes(), Path::new("v.txt"))
                .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("st");
        let got = write(&v, "--vectors v.txt", "`v.txt`", &out).unwrap();
        assert!(got.words == 2 && got.left_out == 1, "{got:?}");
        let modules = json(&out, "modules.json");
        assert_eq!(
            modules[0]["type"],
            "sentence_transformers.models.WordEmbeddings"
        );
        assert_eq!(modules[1]["path"], POOLING_DIR);
        assert!(std::fs::read_to_string(out.join("README.md"))
            .unwrap()
            .contains("`v.txt`"));
        let tok = json(&out, "whitespacetokenizer_config.json");
        assert_eq!(
            tok["vocab"],
            serde_json::json!(["PADDING_TOKEN", "the", "cat"])
        );
        assert_eq!(rows(&out).1, [0.0, 0.0, 1.0, 2.0, 3.0, 4.0]);
    }

    #[test]
    fn vectors_without_a_producible_word_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("st");
        let (v, _) = Vectors::from_reader("U.S. 1 0\n".as_bytes(), Path::new("v.txt")).unwrap();
        let e = write(&v, "--vectors v.txt", "", &out).unwrap_err();
        assert!(e.to_string().contains("nothing to export"), "{e}");
        assert!(!out.exists());
    }
}
