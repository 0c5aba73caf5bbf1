//! The training stage (docs/DEFINITIONS.md section 6): sentence embeddings that
//! average word embeddings (WORD), character-trigram embeddings (TRIGRAM)
//! or concatenate the two (WORD,TRIGRAM), trained on paraphrase pairs with
//! the margin loss and mega-batch negatives of seed 000 section 4, and
//! evaluated by Pearson's r on the STS tasks.
//!
//! Data flows one way: Parquet pairs -> [`data`] (streamed, shuffle buffer,
//! tokenized) -> [`train`] (negatives, gradients, Adam) -> [`model`] (saved
//! file, GloVe export) -> [`sts`] (evaluation).

pub mod checkpoint;
pub mod classifier;
pub mod data;
mod linalg;
pub mod lstm_scan;
pub mod model;
pub mod neural;
pub mod nn_checkpoint;
pub mod nn_model;
pub mod nn_train;
pub mod sts;
pub mod train;

pub use model::{Kind, Model};

#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error("{path}: {source}")]
    Io {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Data(#[from] paraforge_core::DataError),
    #[error(transparent)]
    Vectors(#[from] paraforge_core::VectorsError),
    #[error(transparent)]
    Model(#[from] paraforge_core::EncoderError),
    #[error("{0}")]
    Invalid(String),
    #[error("{path}: {reason}")]
    BadModel {
        path: std::path::PathBuf,
        reason: String,
    },
    #[error("{path}: {reason}")]
    BadSts {
        path: std::path::PathBuf,
        reason: String,
    },
}

/// A dev score that is not a number cannot pick an epoch (nothing is
/// greater than NaN, so the first epoch would be kept silently): every dev
/// similarity was the same, e.g. no dev sentence had a known word.
pub(crate) fn check_dev_score(epoch: usize, score: f64) -> Result<(), TrainError> {
    if score.is_finite() {
        return Ok(());
    }
    Err(TrainError::Invalid(format!(
        "epoch {epoch}: the dev score is {score} (every dev similarity the same, e.g. no dev sentence has a known word or trigram); it cannot choose an epoch"
    )))
}

impl TrainError {
    pub fn io(path: &std::path::Path, source: std::io::Error) -> TrainError {
        TrainError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}
