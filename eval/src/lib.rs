//! Evaluating sentence embeddings and word vectors: STS 2012-2016, STS
//! Benchmark and SICK-R (`sts`), SimLex-999 and WordSim-353 (`words`), the
//! SentEval transfer tasks with frozen embeddings (`transfer`) and an
//! averaging model trained on SICK itself (`sick_tune`). Training picks its
//! epochs with `sts`; the CLI's `eval-*` commands call these directly.

pub mod bundled;
pub mod entailment;
pub mod sick_tune;
pub mod specificity;
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
    #[error("{flag} {}: not found (from the working directory {}); pass {flag} naming an existing one", path.display(), std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_default())]
    Missing {
        flag: String,
        path: std::path::PathBuf,
    },
    #[error("{flag}: the default's bundled copy could not be written under {}: {source}; pass {flag}, or set XDG_CACHE_HOME to a writable directory", dir.display())]
    Bundle {
        flag: String,
        dir: std::path::PathBuf,
        #[source]
        source: std::io::Error,
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
