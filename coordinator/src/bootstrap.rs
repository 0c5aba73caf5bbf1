//! `[scoring] bootstrap`: after the translations are finalized, a scorer
//! is learned from the job's own pairs (cross-fitted, so no pair is scored
//! by a model that saw it) and the corpus is scored into a new dataset,
//! which the summary and the bins then read. The coordinator owns when the
//! step runs; what it does (training, rescoring) is given by the binary
//! that runs the job, so the coordinator links no training framework.

use std::path::PathBuf;

/// What the step is asked to do.
#[derive(Debug, Clone)]
pub struct BootstrapRun {
    /// The job's finished output (local), translated, para_score null.
    pub translated: PathBuf,
    /// The new dataset to write (local): `scoring.bootstrap_output`.
    pub out: PathBuf,
    /// "trigram", "word" or "word,trigram".
    pub kind: String,
    pub folds: u32,
    /// Epochs of each fold's model; `None`: the trainer's default.
    pub epochs: Option<usize>,
}

/// What the step wrote.
#[derive(Debug, Clone)]
pub struct Scored {
    pub out: PathBuf,
    pub rows: u64,
    /// Mean para_score over the rows (none when no row got one).
    pub mean: Option<f64>,
    /// Each fold's model, relative to `out`, and its SHA-256.
    pub models: Vec<(String, String)>,
}

/// The step itself (in `paraforge`: the trainer's fold models and
/// `paraforge rescore`'s writer). Runs on a blocking thread.
pub trait ScoreStep: Send + Sync {
    fn score(&self, run: &BootstrapRun)
        -> Result<Scored, Box<dyn std::error::Error + Send + Sync>>;
}
