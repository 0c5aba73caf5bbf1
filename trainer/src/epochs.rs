//! The bookkeeping around the epochs that both training loops share (the
//! averages' [`crate::train`], the neural encoders' [`crate::nn_train`]):
//! going on from a checkpoint, the report's rows, the dev score choosing
//! the best epoch, the state a checkpoint records and the report at the
//! end. What an epoch does, and what else a checkpoint holds (weights,
//! Adam), stays with each trainer.

use std::ops::RangeInclusive;
use std::path::Path;

use rand::SeedableRng;

use crate::checkpoint::{self, State};
use crate::data::ReadStats;
use crate::options::{EpochReport, TrainOptions, TrainReport};
use crate::{check_dev_score, TrainError};

/// A checkpoint as a trainer's `load` gives it back: its state, the best
/// epoch's model `B` (when a dev set chose one) and what else the trainer
/// saved, `X`.
pub(crate) struct Saved<K, E, B, X> {
    pub state: State<K, E>,
    pub best: Option<B>,
    pub rest: X,
}

/// One run's counters across epochs; `B` is the model kept as the best.
pub(crate) struct Epochs<K, B> {
    key: K,
    /// The shuffle generator: its position is what a resumed run goes on
    /// from.
    pub rng: rand_chacha::ChaCha8Rng,
    pub stats: ReadStats,
    /// Pairs with a side that has nothing to embed.
    pub skipped: u64,
    report: Vec<EpochReport>,
    best: Option<(usize, f64, B)>,
    first: usize,
    resumed_after: Option<usize>,
}

impl<K: Clone + PartialEq + serde::Serialize, B> Epochs<K, B> {
    /// A run from its first epoch; `key` is what a checkpoint must match.
    pub fn new(key: K, seed: u64) -> Self {
        Epochs {
            key,
            rng: rand_chacha::ChaCha8Rng::seed_from_u64(seed),
            stats: ReadStats::default(),
            skipped: 0,
            report: Vec::new(),
            best: None,
            first: 1,
            resumed_after: None,
        }
    }

    /// With `o.resume` and a checkpoint at `o.checkpoint`, goes on from it
    /// (read by `load`) after checking that it is of this run, and returns
    /// the trainer's own part of it (`E`, `X`) to restore; else None.
    pub fn resume<E, X>(
        &mut self,
        o: &TrainOptions,
        load: impl FnOnce(&Path) -> Result<Saved<K, E, B, X>, TrainError>,
    ) -> Result<Option<(E, X)>, TrainError> {
        let (Some(dir), true) = (&o.checkpoint, o.resume) else {
            return Ok(None);
        };
        if !checkpoint::exists(dir) {
            return Ok(None);
        }
        let c = load(dir)?;
        let s = c.state;
        self.rng.set_word_pos(checkpoint::resume_point(
            dir,
            &s.key,
            &self.key,
            &s.rng_word_pos,
        )?);
        self.stats = s.read;
        self.skipped = s.skipped;
        self.report = s.epochs;
        self.best = match (s.best, c.best) {
            (Some((e, d)), Some(m)) => Some((e, d, m)),
            _ => None,
        };
        self.first = s.epoch + 1;
        self.resumed_after = Some(s.epoch);
        tracing::info!(epoch = s.epoch, "resumed from {}", dir.display());
        Ok(Some((s.extra, c.rest)))
    }

    /// The epochs left to train.
    pub fn remaining(&self, epochs: usize) -> RangeInclusive<usize> {
        self.first..=epochs
    }

    /// The dev score after the last epoch finished (what progress shows).
    pub fn last_dev(&self) -> Option<f64> {
        self.report.last().and_then(|e| e.dev)
    }

    /// After an epoch: its row of the report, and with a dev `score` the
    /// check that it can choose and `snapshot()` kept when it is the best
    /// so far.
    pub fn end_epoch(
        &mut self,
        row: EpochReport,
        snapshot: impl FnOnce() -> B,
    ) -> Result<(), TrainError> {
        let (epoch, score) = (row.epoch, row.dev);
        self.report.push(row);
        if let Some(d) = score {
            check_dev_score(epoch, d)?;
            if self.best.as_ref().is_none_or(|b| d > b.1) {
                self.best = Some((epoch, d, snapshot()));
            }
        }
        Ok(())
    }

    /// What a checkpoint written after `epoch` records, with the trainer's
    /// own counters `extra` (its digests are filled in as it is written).
    pub fn state<E>(&self, epoch: usize, extra: E) -> State<K, E> {
        State {
            version: checkpoint::VERSION,
            key: self.key.clone(),
            epoch,
            extra,
            rng_word_pos: self.rng.get_word_pos().to_string(),
            read: self.stats,
            skipped: self.skipped,
            epochs: self.report.clone(),
            best: self.best.as_ref().map(|b| (b.0, b.1)),
            sha256: Default::default(),
        }
    }

    /// The best epoch's model so far, when a dev set chose one.
    pub fn best(&self) -> Option<&B> {
        self.best.as_ref().map(|b| &b.2)
    }

    /// The run's report; the best epoch's model goes to `keep` first (when
    /// a dev set chose one).
    pub fn finish(self, keep: impl FnOnce(B)) -> TrainReport {
        let best_epoch = self.best.map(|(e, _, m)| {
            keep(m);
            e
        });
        TrainReport {
            epochs: self.report,
            read: self.stats,
            skipped_unembeddable: self.skipped,
            best_epoch,
            resumed_after: self.resumed_after,
        }
    }
}

/// The last check before a model is written (a resumed run's weights came
/// from a file): `bad` names a weight that is not a finite number.
pub(crate) fn check_finite(
    report: &TrainReport,
    bad: Option<String>,
    lr: f32,
) -> Result<(), TrainError> {
    match bad {
        None => Ok(()),
        Some(what) => Err(TrainError::Diverged {
            epoch: report.epochs.last().map_or(0, |e| e.epoch),
            pairs: report.epochs.last().map_or(0, |e| e.pairs),
            what,
            lr: lr.to_string(),
        }),
    }
}
