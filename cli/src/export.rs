//! `paraforge export`: a trained encoder in another library's format. The
//! sentence-transformers directory is the encoders crate's
//! (`st_export`); GloVe text is what `export-vectors` writes.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use paraforge_encoders::st_export::{self, Source};
use paraforge_encoders::NeuralModel;

/// `paraforge export --help`: what the sentence-transformers directory
/// computes and exactly where it differs from paraforge.
pub const LONG_ABOUT: &str = "\
Write a trained encoder in another library's format.

--format sentence-transformers writes a directory that the sentence-transformers \
library loads with SentenceTransformer(DIR): a WordEmbeddings module (its \
WhitespaceTokenizer, do_lower_case true, no stop words; the word table as \
model.safetensors) and a mean Pooling module. It takes a WORD model or word \
vectors; TRIGRAM, WORD,TRIGRAM, LSTM and the other networks are refused, \
naming the encoder (the paraforge Python package's Encoder has \
sentence-transformers' encode signature for them). The vocabulary holds the \
words paraforge's tokenizer can produce (others are left out and counted); \
row 0 is padding; a WORD model's unknown-word row is the token <unk>.

Its embeddings equal paraforge's (to float rounding) on text tokenized as \
paraforge tokenizes it, tokens joined by spaces (\"Don't stop!\" as \
\"don ' t stop !\"), and, for a WORD model, with every token not in the \
vocabulary replaced by <unk> (README.md, \"To sentence-transformers\", has \
a Python recipe for both). Where they differ:
  * raw text: the WhitespaceTokenizer splits at whitespace only and strips \
ASCII punctuation from a word's ends, so \"stop!\" is stop (paraforge: stop !) \
and \"don't\" one unknown word (paraforge: don ' t);
  * unknown words of a WORD model: paraforge averages the unknown-word row, \
the WhitespaceTokenizer drops them, and no setting of its makes it map them \
to a row: replace them by <unk> first;
  * word vectors: paraforge sums the known words' vectors, Pooling takes \
their mean; the directions, so every cosine, are equal;
  * a sentence with no known token: paraforge has no embedding (NaN from \
embed, null para_score), the library returns zeros;
  * U+000B and U+001C to U+001F split words in Python and are tokens of their own to \
paraforge; raw text may also lowercase differently where Python's Unicode \
tables and Rust's differ;
  * past 1,000,000 tokens the library cuts a sentence (max_seq_length).

--format glove writes a model's word table as GloVe text, as export-vectors \
does.";

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A sentence-transformers model directory: `WordEmbeddings` + mean
    /// `Pooling` (WORD models and word vectors only).
    #[value(name = "sentence-transformers")]
    SentenceTransformers,
    /// GloVe text of a model's word table, as `export-vectors` writes it.
    Glove,
}

#[derive(clap::Args)]
pub struct ExportArgs {
    #[arg(long, value_enum)]
    format: Format,
    /// A trained model: a WORD `.pfe` (or a directory holding `model.pfe`);
    /// with `--format glove` any model with a word table (WORD,TRIGRAM, a
    /// neural encoder's directory). TRIGRAM, WORD,TRIGRAM, LSTM and the
    /// other networks are refused for sentence-transformers.
    #[arg(long, conflicts_with = "vectors", required_unless_present = "vectors")]
    model: Option<PathBuf>,
    /// GloVe-format word vectors, averaged as `[scoring] vectors` averages
    /// them (sentence-transformers only).
    #[arg(long)]
    vectors: Option<PathBuf>,
    /// The directory (sentence-transformers) or file (glove) to write.
    #[arg(long)]
    out: PathBuf,
    /// Replace an existing --out; one that is (or holds, or lies inside)
    /// the input is refused even so.
    #[arg(long)]
    overwrite: bool,
}

pub fn export(a: ExportArgs) -> Result<()> {
    let (flag, input) = match (&a.model, &a.vectors) {
        (Some(m), _) => ("--model", m.as_path()),
        (_, Some(v)) => ("--vectors", v.as_path()),
        _ => unreachable!("clap requires one"),
    };
    let what = format!("{flag} {}", input.display());
    if a.format == Format::Glove && a.vectors.is_some() {
        bail!("{what}: --format glove writes a model's word table; word vectors are GloVe text already");
    }
    let writes = match a.format {
        Format::SentenceTransformers => crate::out::Artifact::Model,
        Format::Glove => crate::out::Artifact::Vectors,
    };
    let out = crate::out::Out::claim("--out", &a.out, writes, &[(flag, input)], a.overwrite)?;
    match a.format {
        Format::SentenceTransformers => {
            let loaded = load(a.model.as_deref(), a.vectors.as_deref(), &what)?;
            let source = match &loaded {
                Loaded::Model(m) => Source::Model(m),
                Loaded::Vectors(v) => Source::Vectors(v),
            };
            let w = st_export::write(source, &what, &origin(input)?, &out.path())?;
            out.commit()?;
            let unk = if w.unk {
                format!(", the unknown-word row as {:?}", st_export::UNK)
            } else {
                String::new()
            };
            println!(
                "sentence-transformers model (WordEmbeddings + mean Pooling) written to {}: {} words x {} dimensions{unk}",
                a.out.display(),
                w.words,
                w.dim
            );
            if w.left_out > 0 {
                println!(
                    "  {} words left out: paraforge's tokenizer never produces them, so it never looks them up (e.g. {})",
                    w.left_out,
                    w.left_out_examples
                        .iter()
                        .map(|s| format!("{s:?}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
            println!(
                "  its embeddings are paraforge's for text tokenized as paraforge does (tokens joined by spaces){}",
                if w.unk {
                    format!(", unknown words replaced by {:?}", st_export::UNK)
                } else {
                    "; they are the mean where paraforge sums word vectors".into()
                }
            );
        }
        Format::Glove => {
            crate::embed::write_word_vectors(input, out, &a.out).with_context(|| what.clone())?;
        }
    }
    Ok(())
}

enum Loaded {
    Model(paraforge_core::Model),
    Vectors(paraforge_core::Vectors),
}

/// The model or vectors to export; an encoder sentence-transformers cannot
/// express is refused here, naming it, before its weights are read.
fn load(model: Option<&Path>, vectors: Option<&Path>, what: &str) -> Result<Loaded> {
    if let Some(v) = vectors {
        let (v, _) = paraforge_core::Vectors::load(v).with_context(|| what.to_string())?;
        return Ok(Loaded::Vectors(v));
    }
    let m = model.expect("clap requires --model or --vectors");
    // A transformer scorer's directory may hold a config.json too.
    if paraforge_scorer::transformer::TransformerEncoder::is_one(m) {
        return Err(st_export::unsupported(what, "transformer").into());
    }
    if NeuralModel::is_one(m) {
        let name = st_export::neural_encoder_name(m).with_context(|| what.to_string())?;
        return Err(st_export::unsupported(what, &name).into());
    }
    Ok(Loaded::Model(
        paraforge_core::Model::load(m).with_context(|| what.to_string())?,
    ))
}

/// How the exported README names its source: the file and its SHA-256.
fn origin(input: &Path) -> Result<String> {
    let file = if input.is_dir() {
        input.join("model.pfe")
    } else {
        input.to_path_buf()
    };
    let sum = paraforge_core::layout::sha256_file(&file)
        .with_context(|| format!("{}: its SHA-256", file.display()))?;
    let name = file.file_name().map_or_else(
        || file.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    Ok(format!("`{name}` (SHA-256 {sum})"))
}
