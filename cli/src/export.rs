//! `paraforge export`: a trained encoder in another library's format. The
//! sentence-transformers directory is the encoders crate's
//! (`st_export`); GloVe text is what `export-vectors` writes.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use paraforge_encoders::st_export;
use paraforge_encoders::NeuralModel;

/// `paraforge export --help`: what the sentence-transformers directory
/// computes and exactly where it differs from paraforge.
pub const LONG_ABOUT: &str = "\
Write a trained encoder in another library's format.

--format sentence-transformers writes a directory that the sentence-transformers \
library loads with SentenceTransformer(DIR) (for a .pfe model, \
SentenceTransformer(DIR, trust_remote_code=True): the library asks for it \
before importing a module class from another package). For a .pfe model (WORD, TRIGRAM, \
WORD,TRIGRAM) it holds the model and a modules.json naming \
paraforge_corpus.st.ParaforgeEncoder, a module of the paraforge Python package \
(install its wheel, paraforge-corpus, where the model is loaded): it embeds raw \
text with paraforge's own tokenizer and tables, so the library returns what \
paraforge embed writes, NaN rows included for sentences with nothing the model \
knows. For --vectors it holds the library's own modules (a WordEmbeddings \
module with its WhitespaceTokenizer, do_lower_case true, no stop words, and a \
mean Pooling module), loadable without paraforge; their embeddings equal \
paraforge's (to float rounding, as the mean where paraforge sums) on text \
tokenized as paraforge tokenizes it, tokens joined by spaces, and differ on raw \
text where the WhitespaceTokenizer splits otherwise (\"stop!\" is stop, \
\"don't\" one word). Neural encoders and the transformer scorer are refused, \
naming the encoder (the Python package's Encoder has sentence-transformers' \
encode signature for them).

--format glove writes a model's word table as GloVe text, as export-vectors \
does.";

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A sentence-transformers model directory: the paraforge module for a
    /// `.pfe` model, `WordEmbeddings` + mean `Pooling` for word vectors.
    #[value(name = "sentence-transformers")]
    SentenceTransformers,
    /// GloVe text of a model's word table, as `export-vectors` writes it.
    Glove,
}

#[derive(clap::Args)]
pub struct ExportArgs {
    #[arg(long, value_enum)]
    format: Format,
    /// A trained model: a `.pfe` (or a directory holding `model.pfe`);
    /// with `--format glove` any model with a word table (WORD,TRIGRAM, a
    /// neural encoder's directory). LSTM and the other networks are refused
    /// for sentence-transformers.
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
            let vectors = match &loaded {
                Loaded::Model(m) => {
                    let describe = paraforge_core::SentenceEncoder::describe(m);
                    st_export::write_module(
                        &model_file(input),
                        &describe,
                        &origin(input)?,
                        &out.path(),
                    )?;
                    out.commit()?;
                    println!(
                        "sentence-transformers model ({}) written to {}: {describe}",
                        st_export::MODULE_TYPE,
                        a.out.display()
                    );
                    println!("  it embeds raw text as paraforge does; load it where the paraforge-corpus wheel is installed");
                    return Ok(());
                }
                Loaded::Vectors(v) => v,
            };
            let w = st_export::write(vectors, &what, &origin(input)?, &out.path())?;
            out.commit()?;
            println!(
                "sentence-transformers model (WordEmbeddings + mean Pooling) written to {}: {} words x {} dimensions",
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
                "  its embeddings point where paraforge's do for text tokenized as paraforge does (tokens joined by spaces): the mean where paraforge sums word vectors"
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

/// The `.pfe` file of a model given as the file or its directory.
fn model_file(input: &Path) -> PathBuf {
    if input.is_dir() {
        input.join("model.pfe")
    } else {
        input.to_path_buf()
    }
}

/// How the exported README names its source: the file and its SHA-256.
fn origin(input: &Path) -> Result<String> {
    let file = model_file(input);
    let sum = paraforge_core::layout::sha256_file(&file)
        .with_context(|| format!("{}: its SHA-256", file.display()))?;
    let name = file.file_name().map_or_else(
        || file.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    Ok(format!("`{name}` (SHA-256 {sum})"))
}
