//! A scorer learned from the data itself (`rescore --bootstrap`, a job's
//! `[scoring] bootstrap`): the output is claimed first, the fold models
//! are trained straight into its staging directory's `_scorers/` (so a
//! killed run leaves nothing the next run does not wipe), then every fold
//! is scored by the model trained without it and the dataset published.

use std::path::Path;

use paraforge_dataset::output::NewDataset;
use paraforge_trainer::bootstrap::{train_folds, BootstrapSpec};
use paraforge_trainer::{Event, Kind};

use crate::{
    fold_dir, write, Classifier, Progress, RescoreError, RescoreManifest, ScorerPath, Write,
    SCORERS_DIR,
};

/// What to train.
#[derive(Debug, Clone, Copy)]
pub struct Bootstrap {
    pub kind: Kind,
    pub folds: u32,
    pub epochs: usize,
    pub seed: u64,
}

/// Where the rows go and what else fills them.
pub struct Target<'a> {
    pub out: &'a Path,
    /// What the manifest records as the input (default: its path).
    pub input_name: Option<&'a str>,
    pub classifier: Option<Classifier<'a>>,
    pub overwrite: bool,
}

/// Trains and scores: `t.out` becomes a rescore dataset of `input` (a
/// local dataset) whose every para_score comes from the model that never
/// saw its row. `events` hears each fold's training, `progress` the rows.
pub fn score(
    input: &Path,
    b: &Bootstrap,
    t: Target<'_>,
    events: &mut dyn FnMut(paraforge_core::folds::Fold, Event),
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<RescoreManifest, RescoreError> {
    let dataset = paraforge_core::dataset::open(input)?;
    let mut inputs = vec![input];
    inputs.extend(t.classifier.map(|c| c.file));
    let staged = NewDataset::create(t.out, &inputs, t.overwrite, "rescore --bootstrap")?;
    let spec = BootstrapSpec {
        data: input.to_path_buf(),
        kind: b.kind,
        folds: b.folds,
        epochs: b.epochs,
        seed: b.seed,
    };
    let dir = staged.dir().join(SCORERS_DIR);
    std::fs::create_dir_all(&dir).map_err(crate::io(&dir))?;
    // Each card names its model where it will live.
    let named = |i: u32| t.out.join(fold_dir(i as usize));
    let models: Vec<_> = train_folds(&spec, &dir, &named, events)?
        .into_iter()
        .map(|m| m.dir)
        .collect();
    let o = Write {
        input,
        input_name: t.input_name,
        progress,
    };
    write(
        &dataset,
        staged,
        Some(ScorerPath::Folds(&models)),
        t.classifier,
        &o,
    )
}
