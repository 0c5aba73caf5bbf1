//! A para_score model for a corpus's own language, learned from the corpus
//! (docs/new-language.md, "Scoring a language without a scorer").
//!
//! The bundled scorer knows English. For any other target language the
//! only paraphrases at hand are the corpus's own pairs, so the encoder is
//! trained on them, with cross-fitting: the pairs are split into k folds by
//! a hash of their id ([`paraforge_core::folds`]), model i is trained on
//! every fold but i, and fold i is scored by model i alone. No pair is
//! scored by a model that saw it, which would inflate its score.

use std::path::{Path, PathBuf};

use paraforge_core::folds::Fold;

use crate::{Encoder, Event, Kind, TrainError, TrainOutcome, TrainSpec};

pub use paraforge_core::folds::{DEFAULT_FOLDS, MIN_TRAIN_PAIRS as MIN_PAIRS};

/// A fold model's weights in its directory (which `load_encoder` opens).
pub const MODEL_FILE: &str = "model.pfe";

/// Epochs of each fold's model by default.
pub const DEFAULT_EPOCHS: usize = 5;

/// What to bootstrap, and how.
#[derive(Debug, Clone)]
pub struct BootstrapSpec {
    /// The corpus: a job's output or any dataset of pairs.
    pub data: PathBuf,
    /// An averaging encoder: trigram, word, or word,trigram.
    pub kind: Kind,
    pub folds: u32,
    pub epochs: usize,
    pub seed: u64,
}

/// One trained fold model.
#[derive(Debug, Clone)]
pub struct FoldModel {
    pub fold: Fold,
    /// The model's directory, as `paraforge train` writes one.
    pub dir: PathBuf,
    /// Pairs it was trained on (outside its fold).
    pub pairs: u64,
}

impl BootstrapSpec {
    /// The training run of fold `index`'s model: named `out` in its card
    /// (where it will live), checkpointed at `checkpoint`.
    pub fn fold_spec(&self, index: u32, out: &Path, checkpoint: &Path) -> TrainSpec {
        let o = crate::options::TrainOptions::default();
        TrainSpec {
            data: self.data.clone(),
            without_fold: Some(Fold {
                index,
                k: self.folds,
            }),
            model: Encoder::Average(self.kind),
            hidden: None,
            layers: None,
            scramble: None,
            negatives: None,
            lambda_c: None,
            lambda_w: None,
            lambda_kl: None,
            device: None,
            init_vectors: None,
            // Words seen twice: a word seen once has nothing to learn from.
            min_word_count: self.kind.words().then_some(2),
            max_words: None,
            word_dim: None,
            // The averages' default M (crate::megabatch::auto).
            megabatch: None,
            batch_size: o.batch_size,
            margin: None,
            lr: None,
            epochs: self.epochs,
            seed: self.seed + index as u64,
            trigram_dim: None,
            min_trigram_count: None,
            max_trigrams: None,
            shuffle_buffer: o.shuffle_buffer,
            max_pairs: 0,
            out: out.to_path_buf(),
            precision: None,
            sts: None,
            // The STS dev sets are English: they cannot pick a Czech
            // model's epoch, so the last epoch is kept.
            dev: None,
            checkpoint: Some(checkpoint.to_path_buf()),
            resume: false,
            parse_cache: None,
            command: Some(format!(
                "bootstrap scorer: --model {} without fold {index} of {}",
                self.kind.name(),
                self.folds
            )),
        }
    }

    /// Refuses what cannot train: a bad fold count, or a fold whose
    /// training set is under [`MIN_PAIRS`].
    pub fn check(&self) -> Result<Vec<u64>, TrainError> {
        if !(2..=10).contains(&self.folds) {
            return Err(TrainError::Invalid(format!(
                "--folds {}: cross-fitting needs 2 to 10 folds",
                self.folds
            )));
        }
        // Each fold's training set is every pair outside it: one pass
        // counts the pairs of each fold.
        let (in_fold, without_id) = fold_sizes(&self.data, self.folds)?;
        let total: u64 = in_fold.iter().sum::<u64>() + without_id;
        let mut pairs = Vec::new();
        for index in 0..self.folds {
            let fold = Fold {
                index,
                k: self.folds,
            };
            let n = total - in_fold[index as usize];
            if n < MIN_PAIRS {
                return Err(TrainError::Invalid(format!(
                    "{}: the bootstrap scorer without {fold} would train on {n} pairs; it needs at least {MIN_PAIRS} (a corpus of about {} pairs)",
                    self.data.display(),
                    paraforge_core::folds::min_corpus(self.folds)
                )));
            }
            pairs.push(n);
        }
        Ok(pairs)
    }
}

/// Rows of `data` in each of `k` folds, and rows without an id (in no
/// fold: they train every fold's model, as `PairSource::open_without`
/// keeps them).
fn fold_sizes(data: &Path, k: u32) -> Result<(Vec<u64>, u64), TrainError> {
    use arrow_array::{Array, StringArray};
    use paraforge_core::schema::{col, column, PairReader};
    let mut n = vec![0u64; k as usize];
    let mut without_id = 0;
    for f in paraforge_core::dataset::dataset_files(data)? {
        for b in PairReader::open(&f, &[col::ID])? {
            let b = b?;
            let ids = column::<StringArray>(&b, col::ID, &f)?;
            for i in 0..b.num_rows() {
                match ids.is_null(i) {
                    true => without_id += 1,
                    false => n[paraforge_core::folds::fold_of(ids.value(i), k) as usize] += 1,
                }
            }
        }
    }
    Ok((n, without_id))
}

/// Trains the k fold models into `dir/fold-i/` (`model.pfe` and its card
/// `README.md`, which names it `named(i)`: where the caller will move
/// it); `dir` must exist and be empty of them. `events` hears each run's
/// progress, tagged by fold.
pub fn train_folds(
    spec: &BootstrapSpec,
    dir: &Path,
    named: &dyn Fn(u32) -> PathBuf,
    events: &mut dyn FnMut(Fold, Event),
) -> Result<Vec<FoldModel>, TrainError> {
    let pairs = spec.check()?;
    let mut out = Vec::new();
    for (index, pairs) in (0..spec.folds).zip(pairs) {
        let fold = Fold {
            index,
            k: spec.folds,
        };
        let to = dir.join(format!("fold-{index}"));
        std::fs::create_dir(&to).map_err(|e| TrainError::io(&to, e))?;
        let ckpt = dir.join(format!("fold-{index}.ckpt"));
        let model = to.join(MODEL_FILE);
        let s = spec.fold_spec(index, &named(index), &ckpt);
        let _: TrainOutcome = crate::run(s, &model, &mut |e| events(fold, e))
            .map_err(|e| e.context(format!("bootstrap scorer, {fold}")))?;
        // A directory's card is its README.md, where the language checks
        // and the hub look.
        let card = crate::card::card_path(&model);
        let readme = to.join(paraforge_core::layout::CARD_FILE);
        std::fs::rename(&card, &readme).map_err(|e| TrainError::io(&card, e))?;
        // The checkpoint resumes an interrupted fold; a finished one needs
        // none.
        let _ = std::fs::remove_dir_all(&ckpt);
        out.push(FoldModel {
            fold,
            dir: to,
            pairs,
        });
    }
    Ok(out)
}
