//! What both training loops (the averages' `train`, the networks'
//! `nn_train`) and their checkpoints share: the options a run is given,
//! what it reports as it goes and at the end, and the bounds on its
//! options.

use crate::data::ReadStats;
use crate::model::Model;
use crate::{limits, TrainError};

#[derive(Debug, Clone)]
pub struct TrainOptions {
    /// Mini-batches per mega-batch (M).
    pub megabatch: usize,
    /// Pairs per mini-batch.
    pub batch_size: usize,
    pub margin: f32,
    pub lr: f32,
    pub epochs: usize,
    pub seed: u64,
    /// Pairs held in the shuffle buffer.
    pub shuffle_buffer: usize,
    /// Stop each epoch after this many pairs (0 = all).
    pub max_pairs: u64,
    /// Where to write a checkpoint after every epoch.
    pub checkpoint: Option<std::path::PathBuf>,
    /// Go on from the checkpoint there, if there is one.
    pub resume: bool,
    /// The SHA-256 of the vectors the word table started from, where any:
    /// a checkpoint resumes only from the same.
    pub init_vectors_sha256: Option<String>,
}

impl Default for TrainOptions {
    fn default() -> Self {
        TrainOptions {
            megabatch: crate::DEFAULT_MEGABATCH,
            batch_size: 100,
            margin: 0.4,
            lr: 0.001,
            epochs: 5,
            seed: 1,
            shuffle_buffer: 100_000,
            max_pairs: 0,
            checkpoint: None,
            resume: false,
            init_vectors_sha256: None,
        }
    }
}

/// Progress after each mega-batch.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    pub epoch: usize,
    pub pairs: u64,
    /// Mean loss over the epoch so far.
    pub loss: f64,
    /// The dev score after the previous epoch.
    pub dev: Option<f64>,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct EpochReport {
    pub epoch: usize,
    pub pairs: u64,
    pub mean_loss: f64,
    pub seconds: f64,
    pub pairs_per_second: f64,
    /// The dev set's score after this epoch, when one was given.
    #[serde(default)]
    pub dev: Option<f64>,
}

impl EpochReport {
    /// An epoch's row from its totals, logged as it is made (both trainers).
    pub fn logged(
        epoch: usize,
        pairs: u64,
        loss_sum: f64,
        secs: f64,
        dev: Option<f64>,
    ) -> EpochReport {
        let mean_loss = loss_sum / pairs.max(1) as f64;
        tracing::info!(epoch, pairs, loss = mean_loss, secs, dev, "epoch done");
        EpochReport {
            epoch,
            pairs,
            mean_loss,
            seconds: secs,
            pairs_per_second: pairs as f64 / secs.max(1e-9),
            dev,
        }
    }
}

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct TrainReport {
    pub epochs: Vec<EpochReport>,
    pub read: ReadStats,
    /// Pairs with a side that has no known word or trigram.
    pub skipped_unembeddable: u64,
    /// The epoch whose model was kept (best dev score), when a dev set chose.
    pub best_epoch: Option<usize>,
    /// Epochs a checkpoint had finished when this run resumed.
    pub resumed_after: Option<usize>,
}

/// Scores a model on the dev set (higher is better).
pub type DevScore<'a> = &'a (dyn Fn(&Model) -> f64 + Sync);

/// The options' bounds, before anything is allocated for them.
pub(crate) fn check_options(o: &TrainOptions) -> Result<(), TrainError> {
    if o.batch_size < 1 || o.megabatch < 1 || o.epochs < 1 {
        return Err(TrainError::Invalid(
            "batch size, mega-batch size and epochs must be at least 1".into(),
        ));
    }
    limits::at_most("--epochs", o.epochs, limits::MAX_EPOCHS)?;
    limits::at_most("--batch-size", o.batch_size, limits::MAX_MEGABATCH_PAIRS)?;
    let mega = o.megabatch.saturating_mul(o.batch_size);
    if mega > limits::MAX_MEGABATCH_PAIRS {
        return Err(TrainError::Invalid(format!(
            "--megabatch {} x --batch-size {}: more than the limit of {} pairs a mega-batch",
            o.megabatch,
            o.batch_size,
            limits::MAX_MEGABATCH_PAIRS
        )));
    }
    limits::at_most(
        "--shuffle-buffer",
        o.shuffle_buffer,
        limits::MAX_SHUFFLE_BUFFER,
    )
}

/// The margin is between two cosines, whose difference lies in [-2, 2]: a
/// larger one never lets the loss reach zero. An Adam step size past 1
/// moves unit-scale embeddings by more than their length each step. Either
/// gave a finite but meaningless model before.
pub(crate) fn check_margin_lr(margin: f32, lr: f32) -> Result<(), TrainError> {
    if !(margin.is_finite() && margin > 0.0 && margin <= MAX_MARGIN) {
        return Err(TrainError::Invalid(format!(
            "--margin {margin}: must be above 0 and at most {MAX_MARGIN} (a margin between two cosines)"
        )));
    }
    if !(lr.is_finite() && lr > 0.0 && lr <= MAX_LR) {
        return Err(TrainError::Invalid(format!(
            "--lr {lr}: must be above 0 and at most {MAX_LR}"
        )));
    }
    Ok(())
}

/// See [`check_margin_lr`].
pub const MAX_MARGIN: f32 = 2.0;
/// See [`check_margin_lr`].
pub const MAX_LR: f32 = 1.0;
