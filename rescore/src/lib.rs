//! `paraforge rescore`: recompute para_score of an existing dataset with
//! another encoder (a model from `paraforge train`, or word vectors),
//! and/or fill `reference_probability` with a reference/translation
//! classifier (`paraforge train-classifier`, Wieting et al. (2017) section 5.6.1),
//! without translating again.
//!
//! Translation is the expensive stage (hours of GPU per million pairs);
//! para_score is a cosine of two sentence embeddings (microseconds). Seed
//! 000 scores with a model trained on paraphrases, so the natural loop is
//! translate once, train, rescore, bin again. Only para_score depends on
//! the encoder; every other column and the file layout are kept, each
//! file's footer records what produced the new column, and the input is
//! only read. (An object-store dataset is staged to and from a local
//! directory by the caller: `paraforge rescore`.)

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, Float32Array, RecordBatch, StringArray};
use paraforge_core::layout::ListedFile;
use paraforge_core::schema::{self, col, meta, DataError};
use paraforge_core::{EncoderError, Scorer, SentenceEncoder, TextScorer};
use paraforge_scorer::ScorerStamp;
use serde::Serialize;

use paraforge_dataset::bins::{para_range, PARA_RANGES};

pub mod bootstrap;
use paraforge_dataset::output::{NewDataset, OutputError};
use paraforge_dataset::rewrite::{rewrite, At, Rewrite};

#[derive(Debug, thiserror::Error)]
pub enum RescoreError {
    #[error(transparent)]
    Data(#[from] DataError),
    #[error(transparent)]
    Encoder(#[from] EncoderError),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Output(#[from] OutputError),
    /// A score that is not a number would sort, bin and train as garbage.
    #[error("{path}: row {row}: the new {column} is {value} (not finite): the model gives no usable score (non-finite weights?); nothing was written")]
    NonFinite {
        path: PathBuf,
        row: u64,
        column: &'static str,
        value: f32,
    },
    /// The bootstrap's fold models could not be trained.
    #[error(transparent)]
    Train(#[from] paraforge_trainer::TrainError),
    #[error("nothing to rescore with: give a para_score model or vectors, or a classifier")]
    NothingToDo,
    /// The encoder failed to run on some sentences (the first failure is
    /// logged).
    #[error("the para_score encoder failed on {failed} sentences (see the log); the new dataset has no manifest and is not complete")]
    EncoderFailed { failed: u64 },
    /// Every para_score came out null: the scorer knows none of the data's
    /// words or trigrams (another language, the wrong vectors file).
    #[error("{scorer}: gave a para_score to none of the {rows} rows (does it know the data's language?); the new dataset has no manifest and is not complete")]
    NothingScored { scorer: String, rows: u64 },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RescoreError + '_ {
    move |source| RescoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Rows per para_score range before and after, and the summary of the change.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct RescoreManifest {
    /// Always `rescore` (core::layout::ManifestHead).
    pub kind: paraforge_core::layout::ManifestKind,
    pub input: String,
    /// The model or vectors file, what it is, and its SHA-256.
    pub scorer: String,
    pub scorer_kind: String,
    pub scorer_sha256: String,
    /// A cross-fitted scorer's models, one per fold (empty otherwise).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub folds: Vec<FoldScorer>,
    /// The reference classifier that filled `reference_probability`, its
    /// weights' SHA-256, and the mean it gave (empty without one).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub classifier: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub classifier_sha256: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mean_reference_probability: Option<f64>,
    pub rows: u64,
    /// Range label (and `none` for rows without a score) -> rows.
    pub ranges_before: BTreeMap<String, u64>,
    pub ranges_after: BTreeMap<String, u64>,
    /// The mean para_score before and after, absent where no row had one
    /// (a language without a scorer has only nulls before).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mean_before: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mean_after: Option<f64>,
    /// Relative to the output directory, the same paths as in the input.
    pub files: Vec<ListedFile>,
}

#[derive(Default)]
struct Tally {
    before: [u64; PARA_RANGES.len() + 1],
    after: [u64; PARA_RANGES.len() + 1],
    sum_before: f64,
    n_before: u64,
    sum_after: f64,
    n_after: u64,
    sum_prob: f64,
    n_prob: u64,
}

impl Tally {
    fn add(&mut self, before: Option<f32>, after: Option<f32>) {
        let slot = |s: Option<f32>| para_range(s).unwrap_or(PARA_RANGES.len());
        self.before[slot(before)] += 1;
        self.after[slot(after)] += 1;
        if let Some(b) = before.filter(|b| !b.is_nan()) {
            self.sum_before += b as f64;
            self.n_before += 1;
        }
        if let Some(a) = after {
            self.sum_after += a as f64;
            self.n_after += 1;
        }
    }

    fn merge(mut self, o: Tally) -> Tally {
        for i in 0..self.before.len() {
            self.before[i] += o.before[i];
            self.after[i] += o.after[i];
        }
        self.sum_before += o.sum_before;
        self.n_before += o.n_before;
        self.sum_after += o.sum_after;
        self.n_after += o.n_after;
        self.sum_prob += o.sum_prob;
        self.n_prob += o.n_prob;
        self
    }
}

fn label(i: usize) -> String {
    PARA_RANGES.get(i).map_or("none", |r| r.2).to_string()
}

/// What para_score is recomputed with.
#[derive(Debug, Clone, Copy)]
pub enum ScorerPath<'a> {
    /// Any model `paraforge train` writes: a `.pfe` file (or a directory
    /// holding `model.pfe`), or a neural encoder's directory.
    Model(&'a Path),
    /// GloVe-format word vectors.
    Vectors(&'a Path),
    /// Cross-fitted models (`paraforge_trainer::bootstrap`): `models[i]`
    /// was trained without fold i of `models.len()` and scores that fold's
    /// rows. The directories move into the new dataset's `_scorers/` (a
    /// bootstrap trains them there).
    Folds(&'a [PathBuf]),
}

impl<'a> ScorerPath<'a> {
    /// The file itself (a model directory's `model.pfe`, or a neural
    /// encoder's `model.safetensors`).
    pub fn file(&self) -> PathBuf {
        match self {
            ScorerPath::Model(p) => paraforge_scorer::weights_file(p),
            ScorerPath::Vectors(p) => p.to_path_buf(),
            ScorerPath::Folds(ms) => PathBuf::from(format!("{} cross-fitted models", ms.len())),
        }
    }

    /// The model directories or files, or the vectors file, as given.
    pub fn paths(&self) -> Vec<&'a Path> {
        match *self {
            ScorerPath::Model(p) | ScorerPath::Vectors(p) => vec![p],
            ScorerPath::Folds(ms) => ms.iter().map(PathBuf::as_path).collect(),
        }
    }

    /// One encoder, or one per fold.
    pub fn load(&self) -> Result<Vec<Box<dyn SentenceEncoder>>, EncoderError> {
        let one = |m: Option<&Path>, v: Option<&Path>| {
            Ok(paraforge_scorer::load_encoder(m, v)?.expect("one of the two is given"))
        };
        match *self {
            ScorerPath::Model(p) => Ok(vec![one(Some(p), None)?]),
            ScorerPath::Vectors(p) => Ok(vec![one(None, Some(p))?]),
            ScorerPath::Folds(ms) => ms.iter().map(|m| one(Some(m), None)).collect(),
        }
    }
}

/// Where a cross-fitted rescore keeps fold i's model, relative to its output.
pub fn fold_dir(i: usize) -> PathBuf {
    Path::new(SCORERS_DIR).join(format!("fold-{i}"))
}

/// The new dataset's directory of cross-fitted models (not data: readers
/// skip names starting with `_`, and the manifest lists only Parquet).
pub const SCORERS_DIR: &str = "_scorers";

/// One cross-fitted model, as the manifest records it.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct FoldScorer {
    /// The fold it scored (and was trained without), of `k`.
    pub fold: u32,
    pub k: u32,
    /// Relative to the output directory.
    pub model: String,
    pub sha256: String,
}

/// A reference classifier and what the footers and manifest say of it.
#[derive(Clone, Copy)]
pub struct Classifier<'a> {
    pub scorer: &'a (dyn TextScorer + Sync),
    /// The file that identifies it (its weights), hashed for the record.
    pub file: &'a Path,
}

/// Rescores every file of `input` (a local dataset) into `out` (a new
/// local directory), files in parallel: para_score with `scorer`, and
/// `reference_probability` with `classifier`; at least one is needed. `input_name` is what the manifest
/// records as the input (default: its path; the URL of a staged dataset).
/// `progress` is called once with the rows to do (after the input is
/// verified), then with rows done.
pub fn run(
    input: &Path,
    scorer: Option<ScorerPath<'_>>,
    classifier: Option<Classifier<'_>>,
    out: &Path,
    input_name: Option<&str>,
    overwrite: bool,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<RescoreManifest, RescoreError> {
    if scorer.is_none() && classifier.is_none() {
        return Err(RescoreError::NothingToDo);
    }
    let dataset = paraforge_core::dataset::open(input)?;
    let mut inputs: Vec<&Path> = vec![input];
    inputs.extend(scorer.map(|s| s.paths()).unwrap_or_default());
    inputs.extend(classifier.map(|c| c.file));
    let staged = NewDataset::create(out, &inputs, overwrite, "rescore")?;
    let o = Write {
        input,
        input_name,
        progress,
    };
    write(&dataset, staged, scorer, classifier, &o)
}

/// What [`write`] records and reports, besides the scorers.
pub(crate) struct Write<'a> {
    pub input: &'a Path,
    pub input_name: Option<&'a str>,
    pub progress: &'a (dyn Fn(Progress) + Sync),
}

/// Rescores `dataset` into the claimed output `staged` and publishes it.
pub(crate) fn write(
    dataset: &paraforge_core::dataset::Dataset,
    staged: NewDataset,
    scorer: Option<ScorerPath<'_>>,
    classifier: Option<Classifier<'_>>,
    o: &Write<'_>,
) -> Result<RescoreManifest, RescoreError> {
    let (input, input_name, progress) = (o.input, o.input_name, o.progress);
    progress(Progress::Total(dataset.rows()));
    let encoders = scorer.map(|s| s.load()).transpose()?.unwrap_or_default();
    let fold_models: &[PathBuf] = match scorer {
        Some(ScorerPath::Folds(ms)) => ms,
        _ => &[],
    };
    let folds = fold_models.len() as u32;
    let mut stamps = Vec::new();
    if let Some(s) = scorer {
        for (p, e) in s.paths().into_iter().zip(&encoders) {
            stamps.push(ScorerStamp::of(p, e.as_ref()).map_err(io(p))?);
        }
    }
    let stamp = combined(&stamps, folds);
    let class_stamp = classifier
        .map(|c| -> Result<ClassifierStamp, RescoreError> {
            Ok(ClassifierStamp {
                file: c.file.display().to_string(),
                sha256: file_sha256(c.file)?,
            })
        })
        .transpose()?;
    let (mut replaced, mut added) = footer(stamp.as_ref(), class_stamp.as_ref());
    if stamp.is_some() {
        replaced.push(meta::PARA_SCORER_FOLDS);
        if folds > 0 {
            added.push((meta::PARA_SCORER_FOLDS.into(), folds.to_string()));
        }
    }
    let how = Rewrite {
        columns: if folds > 0 {
            &[col::ID, col::REFERENCE, col::TRANSLATION, col::PARA_SCORE]
        } else {
            &[col::REFERENCE, col::TRANSLATION, col::PARA_SCORE]
        },
        replaced: &replaced,
        added,
        parallel: true,
    };
    let class = classifier.map(|c| c.scorer);
    let transform = || {
        let mut scorers: Vec<Scorer<'_>> = encoders
            .iter()
            .map(|e| Scorer::new(Some(e.as_ref())))
            .collect();
        move |batch: RecordBatch, at: At<'_>, tally: &mut Tally| {
            rescore_batch(&mut scorers, class, batch, at, tally)
        }
    };
    let failures = || encoders.iter().map(|e| e.failures()).sum::<u64>();
    let failed_before = failures();
    let files = rewrite(dataset, &staged, &how, transform, &|n| {
        progress(Progress::Done(n))
    })?;
    let failed = failures() - failed_before;
    if failed > 0 {
        return Err(RescoreError::EncoderFailed { failed });
    }

    let (scorer, scorer_kind, scorer_sha256) =
        stamp.map_or_else(Default::default, |s| (s.file, s.kind, s.sha256));
    let (classifier, classifier_sha256) =
        class_stamp.map_or_else(Default::default, |s| (s.file, s.sha256));
    let mut m = RescoreManifest {
        kind: paraforge_core::layout::ManifestKind::Rescore,
        input: input_name.map_or_else(|| input.display().to_string(), String::from),
        scorer,
        scorer_kind,
        scorer_sha256,
        classifier,
        classifier_sha256,
        ..Default::default()
    };
    m.folds = move_fold_models(fold_models, &stamps, staged.dir())?;
    let total = list_files(&mut m, files);
    for i in 0..=PARA_RANGES.len() {
        m.ranges_before.insert(label(i), total.before[i]);
        m.ranges_after.insert(label(i), total.after[i]);
    }
    if !m.scorer.is_empty() && m.rows > 0 && total.n_after == 0 {
        return Err(RescoreError::NothingScored {
            scorer: m.scorer.clone(),
            rows: m.rows,
        });
    }
    m.mean_before = (total.n_before > 0).then(|| total.sum_before / total.n_before as f64);
    m.mean_after = (total.n_after > 0).then(|| total.sum_after / total.n_after as f64);
    if !m.classifier.is_empty() {
        m.mean_reference_probability = Some(total.sum_prob / total.n_prob.max(1) as f64);
    }
    let text = serde_json::to_string_pretty(&m).expect("manifest serializes");
    staged.publish(text.as_bytes())?;
    Ok(m)
}

/// Moves the cross-fitted models into the staged output's `_scorers/`: the
/// models go with the scores they gave (a rename: they were trained beside
/// the output, on its filesystem).
fn move_fold_models(
    models: &[PathBuf],
    stamps: &[ScorerStamp],
    staged: &Path,
) -> Result<Vec<FoldScorer>, RescoreError> {
    let mut out = Vec::new();
    for (i, (from, st)) in models.iter().zip(stamps).enumerate() {
        let to = staged.join(fold_dir(i));
        // A bootstrap trains them in place.
        if *from != to {
            std::fs::create_dir_all(to.parent().expect("has a parent")).map_err(io(&to))?;
            std::fs::rename(from, &to).map_err(io(from))?;
        }
        out.push(FoldScorer {
            fold: i as u32,
            k: models.len() as u32,
            model: fold_dir(i).display().to_string(),
            sha256: st.sha256.clone(),
        });
    }
    Ok(out)
}

/// Lists the written files in the manifest; their tallies, summed.
fn list_files(
    m: &mut RescoreManifest,
    files: Vec<paraforge_dataset::rewrite::RewrittenFile<Tally>>,
) -> Tally {
    let mut total = Tally::default();
    for f in files {
        m.rows += f.rows;
        m.files.push(ListedFile {
            path: f.path,
            rows: f.rows,
            bytes: Some(f.bytes),
            sha256: Some(f.sha256),
        });
        total = total.merge(f.counts);
    }
    total
}

/// The stamp the footers and manifest carry: the scorer's own, or for
/// cross-fitted models one naming them all (their files and SHA-256s in
/// fold order).
fn combined(stamps: &[ScorerStamp], folds: u32) -> Option<ScorerStamp> {
    if folds == 0 {
        return stamps.first().cloned();
    }
    let kind = stamps.first().map_or_else(String::new, |s| s.kind.clone());
    Some(ScorerStamp {
        file: (0..stamps.len())
            .map(|i| fold_dir(i).display().to_string())
            .collect::<Vec<_>>()
            .join(","),
        kind: format!(
            "{kind}, cross-fitted over {folds} folds: each row scored by the model trained without its fold"
        ),
        sha256: stamps
            .iter()
            .map(|s| s.sha256.as_str())
            .collect::<Vec<_>>()
            .join(","),
    })
}

/// What `run` reports as it goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// Rows in the (verified) input.
    Total(u64),
    /// Rows just rescored.
    Done(u64),
}

/// What every rewritten file's footer records about the classifier.
struct ClassifierStamp {
    file: String,
    sha256: String,
}

/// The footer keys a rescore writes anew (those of each column it
/// rewrites, whatever the input said), and what it writes under them.
fn footer(
    para: Option<&ScorerStamp>,
    class: Option<&ClassifierStamp>,
) -> (Vec<&'static str>, Vec<(String, String)>) {
    let (mut replaced, mut added) = (Vec::new(), Vec::new());
    if let Some(stamp) = para {
        replaced.extend([
            meta::PARA_SCORER,
            meta::PARA_SCORER_KIND,
            meta::PARA_SCORER_SHA256,
            meta::PARA_VECTORS,
            meta::PARA_VECTORS_SHA256,
        ]);
        added.extend(stamp.footer().map(|(k, v)| (k.to_string(), v)));
    }
    if let Some(stamp) = class {
        replaced.extend([
            meta::REFERENCE_CLASSIFIER,
            meta::REFERENCE_CLASSIFIER_SHA256,
        ]);
        added.push((meta::REFERENCE_CLASSIFIER.into(), stamp.file.clone()));
        added.push((
            meta::REFERENCE_CLASSIFIER_SHA256.into(),
            stamp.sha256.clone(),
        ));
    }
    (replaced, added)
}

/// `batch` with para_score from `scorers` (none: kept; one: every row;
/// k: each row by the scorer of its fold) and `reference_probability`
/// from `class`, tallied into `tally`.
fn rescore_batch(
    scorers: &mut [Scorer<'_>],
    class: Option<&(dyn TextScorer + Sync)>,
    batch: RecordBatch,
    at: At<'_>,
    tally: &mut Tally,
) -> Result<RecordBatch, RescoreError> {
    let path = at.path;
    let refs = schema::column::<StringArray>(&batch, col::REFERENCE, path)?;
    let trans = schema::column::<StringArray>(&batch, col::TRANSLATION, path)?;
    let old = schema::column::<Float32Array>(&batch, col::PARA_SCORE, path)?;
    let ids = match scorers.len() {
        0 | 1 => None,
        _ => Some(schema::column::<StringArray>(&batch, col::ID, path)?),
    };
    let mut cols: Vec<ArrayRef> = batch.columns().to_vec();
    if !scorers.is_empty() {
        let k = scorers.len() as u32;
        let mut new = Vec::with_capacity(batch.num_rows());
        for r in 0..batch.num_rows() {
            let which = match ids {
                Some(ids) if ids.is_null(r) => {
                    return Err(RescoreError::Data(DataError::Invalid {
                        path: path.to_path_buf(),
                        reason: format!(
                            "row {}: no id, so no fold: a cross-fitted scorer cannot tell which model may score it",
                            at.row + r as u64
                        ),
                    }))
                }
                Some(ids) => paraforge_core::folds::fold_of(ids.value(r), k) as usize,
                None => 0,
            };
            let s = scorers[which]
                .score(refs.value(r), trans.value(r))
                .para_score;
            if let Some(v) = s.filter(|v| !v.is_finite()) {
                return Err(RescoreError::NonFinite {
                    path: path.to_path_buf(),
                    row: at.row + r as u64,
                    column: col::PARA_SCORE,
                    value: v,
                });
            }
            let before = (!old.is_null(r)).then(|| old.value(r));
            tally.add(before, s);
            new.push(s);
        }
        let new = Float32Array::from(new);
        let idx = batch
            .schema()
            .index_of(col::PARA_SCORE)
            .expect("checked by PairReader::open");
        cols[idx] = Arc::new(new);
    } else {
        for r in 0..batch.num_rows() {
            let s = (!old.is_null(r)).then(|| old.value(r));
            tally.add(s, s);
        }
    }
    let mut fields: Vec<arrow_schema::FieldRef> = batch.schema().fields().iter().cloned().collect();
    if let Some(c) = class {
        let texts: Vec<&str> = (0..batch.num_rows()).map(|r| trans.value(r)).collect();
        let p = c.score_texts(&texts);
        if let Some((r, v)) = p
            .iter()
            .enumerate()
            .find_map(|(r, v)| v.filter(|v| !v.is_finite()).map(|v| (r, v)))
        {
            return Err(RescoreError::NonFinite {
                path: path.to_path_buf(),
                row: at.row + r as u64,
                column: col::REFERENCE_PROBABILITY,
                value: v,
            });
        }
        for v in p.iter().flatten() {
            tally.sum_prob += *v as f64;
            tally.n_prob += 1;
        }
        let p: ArrayRef = Arc::new(Float32Array::from(p));
        match batch.schema().index_of(col::REFERENCE_PROBABILITY) {
            Ok(idx) => cols[idx] = p,
            // Outputs from before the column: it goes last.
            Err(_) => {
                cols.push(p);
                fields.push(Arc::new(arrow_schema::Field::new(
                    col::REFERENCE_PROBABILITY,
                    arrow_schema::DataType::Float32,
                    true,
                )));
            }
        }
    }
    let schema = Arc::new(arrow_schema::Schema::new_with_metadata(
        fields,
        batch.schema().metadata().clone(),
    ));
    let batch = RecordBatch::try_new(schema, cols).map_err(|source| DataError::Arrow {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(batch)
}

fn file_sha256(path: &Path) -> Result<String, RescoreError> {
    paraforge_core::layout::sha256_file(path).map_err(io(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use paraforge_core::schema::{PairFileWriter, PairReader, PairRow, RowsBuilder};
    use paraforge_core::PairScores;

    fn row(id: &str, reference: &str, translation: &str, para: Option<f32>) -> PairRow {
        PairRow {
            id: id.into(),
            source: "zdroj".into(),
            reference: reference.into(),
            translation: translation.into(),
            candidate_rank: 1,
            translation_score: Some(-0.5),
            source_len: Some(1),
            truncated: false,
            scores: PairScores {
                para_score: para,
                unigram_overlap: 0.25,
                bigram_overlap: 0.125,
                trigram_overlap: 0.0625,
                sentence_bleu: 12.5,
                translation_perplexity: None,
                reference_probability: None,
                reference_len: 3,
                translation_len: 3,
                reference_oov: 0,
                translation_oov: 0,
            },
        }
    }

    /// Writes `rows` as one file of the dataset at `path`'s parent, and
    /// seals that dataset (manifest and `_SUCCESS`).
    fn write(path: &Path, rows: &[PairRow]) {
        write_unsealed(path, rows);
        let root = path
            .ancestors()
            .find(|a| a.file_name().is_some_and(|n| n == "data"))
            .unwrap_or(path.parent().unwrap());
        paraforge_core::dataset::testing::seal(root, paraforge_core::layout::ManifestKind::Job);
    }

    fn write_unsealed(path: &Path, rows: &[PairRow]) {
        let mut b = RowsBuilder::default();
        for r in rows {
            b.push(r);
        }
        let mut w = PairFileWriter::create(
            path,
            schema::schema(),
            &[(meta::MODEL, "models/x".to_string())],
        )
        .unwrap();
        w.write(&b.finish()).unwrap();
        w.close().unwrap();
    }

    /// (id, para_score, trigram_overlap) per row, and the footer metadata.
    type Rows = Vec<(String, Option<f32>, f32)>;

    fn read(path: &Path) -> (Rows, std::collections::HashMap<String, String>) {
        let r = PairReader::open(path, &[]).unwrap();
        let md = r.metadata().clone();
        let mut out = Vec::new();
        for b in r {
            let b = b.unwrap();
            let id = schema::column::<StringArray>(&b, col::ID, path).unwrap();
            let p = schema::column::<Float32Array>(&b, col::PARA_SCORE, path).unwrap();
            let t = schema::column::<Float32Array>(&b, col::TRIGRAM_OVERLAP, path).unwrap();
            for i in 0..b.num_rows() {
                out.push((
                    id.value(i).to_string(),
                    (!p.is_null(i)).then(|| p.value(i)),
                    t.value(i),
                ));
            }
        }
        (out, md)
    }

    #[test]
    fn rescoring_replaces_para_score_and_keeps_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        write(
            &data.join("shard=000000/part-t1.parquet"),
            &[
                row("a", "the cat sat", "a cat sat", Some(0.9)),
                row("b", "the cat sat", "dog runs far", Some(0.95)),
            ],
        );
        write(
            &data.join("shard=000001/part-t2.parquet"),
            &[row("c", "unknown words", "zzz qqq", Some(0.5))],
        );
        // cat and dog point different ways; "the"/"a"/"sat" are shared.
        let vec_path = dir.path().join("v.txt");
        std::fs::write(
            &vec_path,
            "the 1 0 0\na 1 0 0\ncat 0 1 0\nsat 0 0 1\ndog 0 -1 0\nruns 0 0 -1\nfar 1 0 0\nunknown 1 1 1\n",
        )
        .unwrap();
        let out = dir.path().join("rescored");
        let done = std::sync::atomic::AtomicU64::new(0);
        let m = run(
            &data,
            Some(ScorerPath::Vectors(&vec_path)),
            None,
            &out,
            None,
            false,
            &|p| {
                if let Progress::Done(n) = p {
                    done.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
                }
            },
        )
        .unwrap();
        assert_eq!(m.rows, 3);
        assert_eq!(done.into_inner(), 3);
        assert_eq!(m.files.len(), 2);

        let (rows, md) = read(&out.join("shard=000000/part-t1.parquet"));
        assert_eq!(rows[0].0, "a");
        assert!((rows[0].1.unwrap() - 1.0).abs() < 1e-6, "{rows:?}");
        // the+cat+sat = (1,1,1), dog+runs+far = (1,-1,-1): cosine -1/3.
        assert!((rows[1].1.unwrap() + 1.0 / 3.0).abs() < 1e-6, "{rows:?}");
        assert_eq!(rows[1].2, 0.0625, "other columns are kept");
        assert_eq!(md.get(meta::MODEL).map(String::as_str), Some("models/x"));
        assert_eq!(
            md.get(meta::PARA_SCORER_SHA256),
            Some(&m.scorer_sha256),
            "the footer names the vectors"
        );
        assert!(md[meta::PARA_SCORER_KIND].starts_with("word vectors"));
        // No known token on one side: no score, as in the pipeline.
        let (rows, _) = read(&out.join("shard=000001/part-t2.parquet"));
        assert_eq!(rows[0].1, None);

        assert_eq!(m.ranges_before["0.8-1.0"], 2);
        assert!((m.mean_before.unwrap() - 2.35 / 3.0).abs() < 1e-6, "{m:?}");
        assert_eq!(m.ranges_after["0.8-1.0"], 1);
        assert_eq!(m.ranges_after["min-0.2"], 1);
        assert_eq!(m.ranges_after["none"], 1);
        // The output is a dataset the other stages read through its manifest.
        let listed = paraforge_core::dataset::dataset_files(&out).unwrap();
        assert_eq!(listed.len(), 2);
        assert!(listed.iter().all(|p| p.is_file()));
    }

    /// Data without any para_score (a language without a scorer) has no
    /// mean before: the manifest leaves it out rather than writing 0.
    #[test]
    fn a_mean_over_no_scores_is_absent() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        write(
            &data.join("shard=0/part-t1.parquet"),
            &[row("a", "the cat sat", "a cat sat", None)],
        );
        let vec_path = dir.path().join("v.txt");
        std::fs::write(&vec_path, "the 1 0\na 1 0\ncat 0 1\nsat 1 1\n").unwrap();
        let out = dir.path().join("rescored");
        let m = run(
            &data,
            Some(ScorerPath::Vectors(&vec_path)),
            None,
            &out,
            None,
            false,
            &|_| {},
        )
        .unwrap();
        assert_eq!(m.mean_before, None);
        assert!(m.mean_after.is_some());
        let text = std::fs::read_to_string(out.join("_manifest.json")).unwrap();
        assert!(
            !text.contains("mean_before") && text.contains("mean_after"),
            "{text}"
        );
    }

    /// Vectors of another language score nothing: an error, and no
    /// manifest, so no stage reads the new dataset as complete.
    #[test]
    fn a_scorer_that_scores_no_row_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let vec_path = dir.path().join("v.txt");
        std::fs::write(&vec_path, "kočka 1 0\npes 0 1\n").unwrap();
        let e = failed_rescore(
            &[
                row("a", "the cat", "a cat", Some(0.9)),
                row("b", "x y", "y x", None),
            ],
            ScorerPath::Vectors(&vec_path),
        );
        assert!(
            matches!(e, RescoreError::NothingScored { rows: 2, .. }),
            "{e}"
        );
    }

    /// An encoder that fails on some sentences at run time (a transformer
    /// whose embedding table is shorter than its tokenizer's vocabulary)
    /// fails the rescore, and nothing is left that reads as a dataset.
    #[test]
    fn an_encoder_that_fails_on_a_sentence_fails_the_rescore() {
        let model =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/mismatched-sentence-encoder");
        let e = failed_rescore(
            &[
                row("a", "A man is playing a guitar.", "a man is playing", None),
                row("b", "Two dogs run in the snow.", "dogs run", Some(0.5)),
            ],
            ScorerPath::Model(&model),
        );
        assert!(
            matches!(e, RescoreError::EncoderFailed { failed: 1 }),
            "{e}"
        );
    }

    /// Rescores `rows` with `scorer` into a new directory, expecting an
    /// error, and checks that what was written is removed, not left as a
    /// dataset.
    fn failed_rescore(rows: &[PairRow], scorer: ScorerPath<'_>) -> RescoreError {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        write(&data.join("part.parquet"), rows);
        let out = dir.path().join("rescored");
        let e = run(&data, Some(scorer), None, &out, None, false, &|_| {}).unwrap_err();
        assert!(!out.exists(), "a failed rescore left {}", out.display());
        e
    }

    #[test]
    fn refuses_outputs_that_would_mix_with_data() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        write(&data.join("part.parquet"), &[row("a", "x", "y", None)]);
        let vec_path = dir.path().join("v.txt");
        std::fs::write(&vec_path, "x 1 0\n").unwrap();
        let v = ScorerPath::Vectors(&vec_path);
        let inside =
            |e: &RescoreError| matches!(e, RescoreError::Output(OutputError::OverlapsInput { .. }));
        for out in [data.join("rescored"), data.clone(), vec_path.clone()] {
            let e = run(&data, Some(v), None, &out, None, true, &|_| {}).unwrap_err();
            assert!(inside(&e) || e.to_string().contains("is a file"), "{e}");
        }
        let busy = dir.path().join("busy");
        std::fs::create_dir_all(&busy).unwrap();
        std::fs::write(busy.join("x"), "").unwrap();
        let e = run(&data, Some(v), None, &busy, None, true, &|_| {}).unwrap_err();
        assert!(e.to_string().contains("not a paraforge dataset"), "{e}");
        for missing in [
            ScorerPath::Vectors(&dir.path().join("missing.txt")),
            ScorerPath::Model(&dir.path().join("missing.pfe")),
        ] {
            let e = run(
                &data,
                Some(missing),
                None,
                &dir.path().join("o"),
                None,
                false,
                &|_| {},
            )
            .unwrap_err();
            assert!(e.to_string().contains("missing."), "{e}");
        }
    }
}
