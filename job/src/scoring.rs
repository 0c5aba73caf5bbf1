//! `[scoring]`: what fills para_score and the other model scores, and the
//! bootstrap that learns para_score's model from the job's own pairs.

use std::path::Path;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scoring {
    /// A trained embedding model for para_score (any model `paraforge
    /// train` writes: a `.pfe` file, a directory holding `model.pfe` such
    /// as `models/scorer-trigram`, or a neural encoder's directory with
    /// `config.json`): para_score is the cosine of its two
    /// sentence embeddings.
    #[serde(default)]
    pub model: Option<String>,
    /// GloVe-format word vectors for para_score instead (averaged; unknown
    /// words left out). Neither key: para_score is null.
    #[serde(default)]
    pub vectors: Option<String>,
    /// An n-gram language model in ARPA format (KenLM's, or `paraforge
    /// lm-train`'s): `translation_perplexity` is the translation's
    /// perplexity under it. Without it that column is null.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lm: Option<String>,
    /// Which sentence BLEU fills `sentence_bleu`: "sacrebleu" (its
    /// `sentence_bleu` defaults; the default) or "nakov" (BLEU+1 of Nakov
    /// et al. (2012), as Wieting et al. (2017) filter with).
    #[serde(default, skip_serializing_if = "is_sacrebleu")]
    pub bleu: paraforge_core::bleu::Smoothing,
    /// Learn para_score's model from the job's own pairs, for a language
    /// no scorer reads: "trigram", "word" or "word,trigram". After the
    /// translations are finalized, `bootstrap_folds` models are trained,
    /// each without one fold of the pairs, and each fold is scored by the
    /// model that never saw it, into `bootstrap_output`
    /// (docs/new-language.md). Instead of `model` and `vectors`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap: Option<String>,
    /// Folds of the bootstrap (2 to 10; default 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_folds: Option<u32>,
    /// Epochs of each fold's model (default 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_epochs: Option<usize>,
    /// Where the scored corpus goes: a local directory, default
    /// `<output>-scored` next to the job's output (which keeps the
    /// translations as translated, para_score null).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_output: Option<String>,
}

/// The encoders a bootstrap can train (`[scoring] bootstrap`).
pub const BOOTSTRAP_KINDS: [&str; 3] = ["trigram", "word", "word,trigram"];

impl Scoring {
    /// Whether para_score will have a model: a scorer, vectors, or a
    /// bootstrap.
    pub fn scores(&self) -> bool {
        self.model.is_some() || self.vectors.is_some() || self.bootstrap.is_some()
    }

    /// The bootstrap's folds, as configured or the default.
    pub fn folds(&self) -> u32 {
        self.bootstrap_folds
            .unwrap_or(paraforge_core::folds::DEFAULT_FOLDS)
    }

    /// What decides the translated output: the bootstrap scores after it,
    /// into another directory, so adding one to a finished job resumes it.
    pub(crate) fn output_keys(&self) -> Scoring {
        Scoring {
            bootstrap: None,
            bootstrap_folds: None,
            bootstrap_epochs: None,
            bootstrap_output: None,
            ..self.clone()
        }
    }
}

fn is_sacrebleu(s: &paraforge_core::bleu::Smoothing) -> bool {
    *s == paraforge_core::bleu::Smoothing::Sacrebleu
}

/// `[scoring] bootstrap` and its keys, given the job's output and where
/// the scored corpus would go.
pub(crate) fn check_bootstrap(
    s: &Scoring,
    job_output: &str,
    bootstrap_output: Option<String>,
) -> Result<(), (&'static str, String)> {
    let Some(kind) = &s.bootstrap else {
        for (key, set) in [
            ("scoring.bootstrap_folds", s.bootstrap_folds.is_some()),
            ("scoring.bootstrap_epochs", s.bootstrap_epochs.is_some()),
            ("scoring.bootstrap_output", s.bootstrap_output.is_some()),
        ] {
            if set {
                return bad(key, "is read only with scoring.bootstrap".into());
            }
        }
        return Ok(());
    };
    if !BOOTSTRAP_KINDS.contains(&kind.as_str()) {
        return bad(
            "scoring.bootstrap",
            format!("{kind:?}: the bootstrap trains \"trigram\", \"word\" or \"word,trigram\""),
        );
    }
    if s.model.is_some() || s.vectors.is_some() {
        return bad(
            "scoring.bootstrap",
            "learns para_score's model from the job's pairs: leave out scoring.model and scoring.vectors".into(),
        );
    }
    if !(2..=10).contains(&s.folds()) {
        return bad(
            "scoring.bootstrap_folds",
            "cross-fitting needs 2 to 10 folds".into(),
        );
    }
    if s.bootstrap_epochs == Some(0) {
        return bad("scoring.bootstrap_epochs", "must be at least 1".into());
    }
    if job_output.contains("://") {
        return bad(
            "scoring.bootstrap",
            "trains on a local job.output; for an object-store output, run the job, then `paraforge rescore --bootstrap` (it stages the data)".into(),
        );
    }
    let out = bootstrap_output.unwrap_or_default();
    if out.trim().is_empty() || out.contains("://") {
        return bad(
            "scoring.bootstrap_output",
            format!("{out:?}: must be a local directory"),
        );
    }
    let (job, scored) = (Path::new(&job_output), Path::new(&out));
    if scored.starts_with(job) || job.starts_with(scored) {
        return bad(
            "scoring.bootstrap_output",
            format!(
                "{out:?} must not be job.output ({:?}), lie inside it or hold it",
                job_output
            ),
        );
    }
    Ok(())
}

fn bad(key: &'static str, message: String) -> Result<(), (&'static str, String)> {
    Err((key, message))
}
