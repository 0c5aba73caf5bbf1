//! The training stage (docs/DEFINITIONS.md section 6): sentence embeddings that
//! average word embeddings (WORD), character-trigram embeddings (TRIGRAM)
//! or concatenate the two (WORD,TRIGRAM), trained on paraphrase pairs with
//! the margin loss and mega-batch negatives of Wieting and Gimpel (2018) section 4, and
//! evaluated by Pearson's r on the STS tasks.
//!
//! Data flows one way: Parquet pairs -> [`data`] (streamed, shuffle buffer,
//! tokenized) -> [`train`] (negatives, gradients, Adam) -> [`model`] (saved
//! file, GloVe export) -> [`sts`] (evaluation).
//!
//! [`run()`] is a whole `paraforge train` (and [`classifier::run`] a whole
//! `train-classifier`): the command line only parses its options into a
//! [`TrainSpec`] and shows what the run reports.

pub mod bootstrap;
pub mod card;
// The evaluations live in their own crate; here under their old paths.
pub use paraforge_eval::{sick_tune, sts, transfer, words};
pub mod checkpoint;
pub mod classifier;
pub mod data;
mod epochs;
pub mod limits;
mod megabatch;
pub mod model;
pub mod neural;
pub mod nn_checkpoint;
pub mod nn_model;
pub mod nn_train;
pub mod options;
pub mod paragram;
pub mod paragram_run;
mod run;
pub mod train;
mod unused;

pub use model::{Kind, Model};
pub use run::{
    run, Encoder, Event, TrainOutcome, TrainSpec, Trained, DEFAULT_DEV, DEFAULT_MARGIN,
    DEFAULT_MEGABATCH,
};

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
    /// An update left a weight that is not a finite number: what is
    /// trained from there on, and any model written, would be NaN.
    #[error("epoch {epoch}, after {pairs} pairs: {what} is no longer a finite number after the update (training diverged at --lr {lr}; lower --lr)")]
    Diverged {
        epoch: usize,
        pairs: u64,
        /// The parameter and its row.
        what: String,
        lr: String,
    },
    /// A checkpoint file that is not the one written: resuming from it
    /// would go on from other weights than the run's.
    #[error("{path}: SHA-256 {actual}, but the checkpoint recorded {expected} (the file changed or was damaged after it was written; remove the checkpoint to start over)")]
    CheckpointDigest {
        path: std::path::PathBuf,
        expected: String,
        actual: String,
    },
    /// Training wrote the model, then scoring it on `--sts` or writing its
    /// card failed (the card, when written, says so). The caller keeps the
    /// model (`outcome`) and then reports `error`.
    #[error("{error}")]
    Unfinished {
        outcome: Box<crate::run::TrainOutcome>,
        error: Box<TrainError>,
    },
    /// `source` while doing what `context` says (the option being read).
    #[error("{context}: {source}")]
    Context {
        context: String,
        #[source]
        source: Box<TrainError>,
    },
}

/// A dev score that is not a number cannot pick an epoch (nothing is
/// greater than NaN, so the first epoch would be kept silently): every dev
/// similarity was the same, e.g. no dev sentence had a known word, or an
/// embedding was not finite.
pub(crate) fn check_dev_score(epoch: usize, score: f64) -> Result<(), TrainError> {
    if score.is_finite() {
        return Ok(());
    }
    Err(TrainError::Invalid(format!(
        "epoch {epoch}: the dev score is {score} (every dev similarity the same, e.g. no dev sentence has a known word or trigram, or a dev embedding is not a finite number); it cannot choose an epoch"
    )))
}

/// Training compares each pair with the other pairs of its mega-batch (a
/// sentence's negative comes from another pair), so it needs two of them.
pub fn check_pairs(rows: u64, max_pairs: u64) -> Result<(), TrainError> {
    if rows < 2 {
        return Err(TrainError::Invalid(format!(
            "the data holds {rows} pair(s); training needs at least two (a pair's negative is a sentence of another pair)"
        )));
    }
    if max_pairs == 1 {
        return Err(TrainError::Invalid(
            "--max-pairs 1: training needs at least two pairs an epoch (a pair's negative is a sentence of another pair)".into(),
        ));
    }
    Ok(())
}

/// An epoch that ended without one mega-batch of two pairs: what the rows
/// were, so that the message says which (empty, null, unknown words, or too
/// few).
pub(crate) fn no_usable_pairs(
    read: &data::ReadStats,
    unembeddable: u64,
    usable: usize,
    units: &str,
) -> TrainError {
    TrainError::Invalid(format!(
        "{usable} usable pair(s) of {} rows read ({} with an empty side, {} null, {unembeddable} without a known {units}); training needs at least two",
        read.rows, read.skipped_empty, read.skipped_null
    ))
}

/// The encoders crate's errors as the trainer's own, variant for variant.
impl From<paraforge_encoders::ModelError> for TrainError {
    fn from(e: paraforge_encoders::ModelError) -> TrainError {
        use paraforge_encoders::ModelError as M;
        match e {
            M::Io { path, source } => TrainError::Io { path, source },
            M::Model(e) => TrainError::Model(e),
            M::Invalid(m) => TrainError::Invalid(m),
            M::BadModel { path, reason } => TrainError::BadModel { path, reason },
        }
    }
}

impl From<paraforge_eval::EvalError> for TrainError {
    fn from(e: paraforge_eval::EvalError) -> TrainError {
        use paraforge_eval::EvalError as E;
        match e {
            E::Io { path, source } => TrainError::Io { path, source },
            E::Model(e) => TrainError::Model(e),
            E::Invalid(m) => TrainError::Invalid(m),
            E::BadSts { path, reason } => TrainError::BadSts { path, reason },
            E::Context { context, source } => TrainError::Context {
                context,
                source: Box::new(TrainError::from(*source)),
            },
            e @ (E::Missing { .. } | E::Bundle { .. }) => TrainError::Invalid(e.to_string()),
        }
    }
}

impl TrainError {
    /// This error, said to have happened while doing `context`.
    pub fn context(self, context: impl Into<String>) -> TrainError {
        TrainError::Context {
            context: context.into(),
            source: Box::new(self),
        }
    }

    pub fn io(path: &std::path::Path, source: std::io::Error) -> TrainError {
        TrainError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}
