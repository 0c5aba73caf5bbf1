//! Evaluating sentence embeddings and word vectors: STS 2012-2016, STS
//! Benchmark and SICK-R (`sts`), SimLex-999 and WordSim-353 (`words`), the
//! SentEval transfer tasks with frozen embeddings (`transfer`) and an
//! averaging model trained on SICK itself (`sick_tune`). Training picks its
//! epochs with `sts`; the CLI's `eval-*` commands call these directly.

pub mod sick_tune;
pub mod sts;
pub mod transfer;
pub mod words;

/// What can go wrong evaluating.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
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
    BadSts {
        path: std::path::PathBuf,
        reason: String,
    },
    #[error("{context}: {source}")]
    Context {
        context: String,
        #[source]
        source: Box<EvalError>,
    },
}

impl EvalError {
    /// This error, said to have happened while doing `context`.
    pub fn context(self, context: impl Into<String>) -> EvalError {
        EvalError::Context {
            context: context.into(),
            source: Box::new(self),
        }
    }

    pub fn io(path: &std::path::Path, source: std::io::Error) -> EvalError {
        EvalError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}
