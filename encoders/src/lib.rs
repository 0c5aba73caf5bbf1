//! paraforge's sentence encoders as models, for scoring and training alike:
//! the networks of the neural encoders and their forward passes
//! ([`neural`], with the fused LSTM op of [`lstm_scan`]), their directory
//! on disk (`model.safetensors` + `config.json`, [`nn_model`]) and the
//! reference/translation classifier's ([`classifier`]); a WORD model or
//! word vectors as a sentence-transformers directory ([`st_export`]). The averaging
//! encoders (`.pfe`) and word vectors are core's (`paraforge_core::encoder`).
//!
//! Inference never depends on training: the scorer, `rescore` and
//! `eval-sts` read models through this crate; the trainer trains these same
//! networks (its loss, negatives and updates are its own).

pub mod classifier;
pub mod limits;
pub mod linalg;
pub mod link_grammar;
pub mod lstm_scan;
pub mod neural;
pub mod nn_model;
pub mod parse_cache;
pub mod st_export;
pub mod tree;

pub use neural::{Arch, Net, Shape, Spec};
pub use nn_model::NeuralModel;

/// What reading, writing or building a model can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("{path}: {source}")]
    Io {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Model(#[from] paraforge_core::EncoderError),
    #[error("{0}")]
    Invalid(String),
    #[error("{path}: {reason}")]
    BadModel {
        path: std::path::PathBuf,
        reason: String,
    },
}

impl ModelError {
    pub fn io(path: &std::path::Path, source: std::io::Error) -> ModelError {
        ModelError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

#[cfg(test)]
pub(crate) mod testing {
    use paraforge_core::encoder::Kind;
    use paraforge_core::Model;
    use rand::{Rng, SeedableRng};

    /// A WORD (or WORD,TRIGRAM) model over `words` (and `trigrams`), rows
    /// uniform in +-0.05 from `seed` and the UNK row at zero, as the
    /// trainer starts one.
    pub(crate) fn words_model(
        kind: Kind,
        words: Vec<String>,
        dim: usize,
        trigrams: Vec<String>,
        trigram_dim: usize,
        seed: u64,
    ) -> Model {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let mut row =
            |n: usize| -> Vec<f32> { (0..n).map(|_| rng.random_range(-0.05..0.05)).collect() };
        let mut w = row(words.len() * dim);
        w.extend(std::iter::repeat_n(0.0, dim));
        let tdim = if kind.trigrams() { trigram_dim } else { 0 };
        let t = row(trigrams.len() * tdim);
        Model::from_tables(kind, words, dim, w, trigrams, tdim, t).expect("a valid model")
    }
}
