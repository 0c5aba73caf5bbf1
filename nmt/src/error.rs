use std::path::{Path, PathBuf};

/// Everything that can go wrong loading a model or translating with it.
/// Each variant names the file or input it is about, so that a message
/// shown to a user says where to look.
#[derive(Debug, thiserror::Error)]
pub enum NmtError {
    #[error("model directory {0}: not found or not a directory")]
    ModelDirMissing(PathBuf),

    #[error("model directory {dir}: missing {what}")]
    MissingFile { dir: PathBuf, what: String },

    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("{path}: invalid JSON: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },

    #[error("{path}: {reason}")]
    BadConfig { path: PathBuf, reason: String },

    #[error("{path}: not a usable SentencePiece model: {reason}")]
    BadTokenizer { path: PathBuf, reason: String },

    #[error("model directory {dir}: the vocabulary does not match the model: {reason}")]
    VocabMismatch { dir: PathBuf, reason: String },

    #[error("{path}: ONNX Runtime could not load it: {message}")]
    BadOnnx { path: PathBuf, message: String },

    #[error("{path}: SHA-256 {actual} does not match {expected} recorded in SHA256SUMS (the file is damaged or was replaced)")]
    ChecksumMismatch {
        path: PathBuf,
        expected: String,
        actual: String,
    },

    #[error("ONNX Runtime library: {0}")]
    Runtime(String),

    #[error("device {device}: {reason}")]
    Device { device: String, reason: String },

    #[error("invalid generation option {option}: {reason}")]
    BadOption {
        option: &'static str,
        reason: String,
    },

    #[error("num_beams {beam} is more than the {vocab} tokens of the vocabulary of model {dir}")]
    BeamExceedsVocabulary {
        dir: PathBuf,
        beam: usize,
        vocab: usize,
    },

    #[error("inference failed in {stage}: {message}")]
    Inference {
        stage: &'static str,
        message: String,
    },
}

impl NmtError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> NmtError {
        NmtError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    pub(crate) fn inference(stage: &'static str, e: impl std::fmt::Display) -> NmtError {
        NmtError::Inference {
            stage,
            message: e.to_string(),
        }
    }
}
