//! What a killed training run needs to go on as if it had not stopped:
//! written after every epoch into one directory (a new directory renamed
//! over the old, so a kill leaves the previous epoch's checkpoint whole).
//!
//! `state.json` holds the counters, the random generator's position, the
//! report so far, the options the run was started with and the SHA-256 of
//! every other file; `model.pfe` the current tables (f32, exact);
//! `adam.f32` the Adam moments; `best.pfe` the best epoch's tables when a
//! dev set chooses. `--resume` checks the digests first: a flipped byte in
//! the weights is still a finite number, and would go on silently.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::data::ReadStats;
use crate::model::{Model, Precision};
use crate::options::EpochReport;
use crate::TrainError;

/// Checkpoints of version 1 carried no digests: they are not resumed.
pub const VERSION: u32 = 2;

/// Everything about a run that must match for it to resume.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunKey {
    pub kind: String,
    pub word_dim: usize,
    pub trigram_dim: usize,
    pub words: usize,
    pub trigrams: usize,
    pub megabatch: usize,
    pub batch_size: usize,
    pub margin: f32,
    pub lr: f32,
    pub seed: u64,
    pub shuffle_buffer: usize,
    pub max_pairs: u64,
    /// The training rows' count: a changed dataset does not resume.
    pub rows: u64,
    /// WORD,TRIGRAM with unit halves; absent (false) in checkpoints written
    /// before the flag, which trained raw halves and so do not resume.
    #[serde(default)]
    pub unit_parts: bool,
    /// Those halves weighted by dimension; absent (false) in checkpoints
    /// written before, which trained equal unit halves and so do not resume.
    #[serde(default)]
    pub parts_by_dimension: bool,
    /// The training data by content ([`crate::data::PairSource::digest`]);
    /// empty in checkpoints written before, which do not resume.
    #[serde(default)]
    pub data_sha256: String,
    /// The SHA-256 of `--init-vectors`, where given.
    #[serde(default)]
    pub init_vectors_sha256: Option<String>,
}

/// A checkpoint's `state.json`, of either trainer: `K` is what must match
/// for a run to resume ([`RunKey`], the neural encoders' `NeuralKey`), `E`
/// what only that trainer counts ([`Steps`], the neural encoders'
/// `ParamIds`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct State<K, E> {
    pub version: u32,
    pub key: K,
    /// Epochs finished.
    pub epoch: usize,
    #[serde(flatten)]
    pub extra: E,
    /// The shuffle generator's position (ChaCha8 word position), as text.
    pub rng_word_pos: String,
    pub read: ReadStats,
    pub skipped: u64,
    pub epochs: Vec<EpochReport>,
    /// (epoch, dev score) of the best epoch so far.
    pub best: Option<(usize, f64)>,
    /// SHA-256 of each other file, by its path in the directory (the
    /// trainer's `save` fills it in).
    #[serde(default)]
    pub sha256: BTreeMap<String, String>,
}

/// The averages' own counter: their lazy Adam's bias correction needs the
/// step count, which burn's Adam (the neural encoders') keeps in its state.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Steps {
    /// Adam steps taken.
    pub step: u64,
}

/// The averages' `state.json`.
pub type AverageState = State<RunKey, Steps>;

pub struct Checkpoint {
    pub state: AverageState,
    pub model: Model,
    /// Adam moments: m and v of the word table, then of the trigram table.
    pub adam: [Vec<f32>; 4],
    pub best: Option<Model>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> TrainError + '_ {
    move |e| TrainError::io(path, e)
}

pub(crate) fn bad(dir: &Path, reason: String) -> TrainError {
    TrainError::Invalid(format!("checkpoint {}: {reason}", dir.display()))
}

pub fn save(dir: &Path, c: &Checkpoint) -> Result<(), TrainError> {
    write_dir(dir, |tmp| {
        let mut files = vec!["model.pfe", "adam.f32"];
        c.model.save_as(&tmp.join("model.pfe"), Precision::F32)?;
        if let Some(b) = &c.best {
            b.save_as(&tmp.join("best.pfe"), Precision::F32)?;
            files.push("best.pfe");
        }
        let p = tmp.join("adam.f32");
        let mut f = std::io::BufWriter::new(std::fs::File::create(&p).map_err(io(&p))?);
        for v in &c.adam {
            for x in v {
                f.write_all(&x.to_le_bytes()).map_err(io(&p))?;
            }
        }
        f.into_inner()
            .map_err(|e| TrainError::io(&p, e.into_error()))?
            .sync_all()
            .map_err(io(&p))?;
        let state = AverageState {
            sha256: digests(tmp, &files)?,
            ..c.state.clone()
        };
        write_state(tmp, &state)
    })
}

/// The SHA-256 of each of `files` in `dir`, by name.
pub(crate) fn digests(dir: &Path, files: &[&str]) -> Result<BTreeMap<String, String>, TrainError> {
    files
        .iter()
        .map(|f| {
            let p = dir.join(f);
            let sum = paraforge_core::layout::sha256_file(&p).map_err(io(&p))?;
            Ok((f.to_string(), sum))
        })
        .collect()
}

/// Checks each of `files` in `dir` against the digest `recorded` for it:
/// a file changed since the checkpoint was written, or one it does not
/// list, is an error naming the file (and both digests).
pub(crate) fn verify(
    dir: &Path,
    recorded: &BTreeMap<String, String>,
    files: &[&str],
) -> Result<(), TrainError> {
    let listed = recorded.keys().map(|k| k.as_str());
    let mut all: Vec<&str> = files.iter().copied().chain(listed).collect();
    all.sort_unstable();
    all.dedup();
    for f in all {
        let p = dir.join(f);
        let Some(expected) = recorded.get(f) else {
            return Err(bad(dir, format!("state.json records no SHA-256 of {f}")));
        };
        let actual = paraforge_core::layout::sha256_file(&p).map_err(io(&p))?;
        if &actual != expected {
            return Err(TrainError::CheckpointDigest {
                path: p,
                expected: expected.clone(),
                actual,
            });
        }
    }
    Ok(())
}

/// `state` as `dir/state.json`.
pub(crate) fn write_state<S: Serialize>(dir: &Path, state: &S) -> Result<(), TrainError> {
    let p = dir.join("state.json");
    let json = serde_json::to_vec_pretty(state).map_err(|e| bad(dir, format!("state: {e}")))?;
    std::fs::write(&p, json).map_err(io(&p))
}

/// Writes a checkpoint directory through `write` into `dir.tmp`, then
/// swaps it in: the old checkpoint stays whole until the new one is
/// complete, so a kill at any point leaves one to resume from.
pub(crate) fn write_dir(
    dir: &Path,
    write: impl FnOnce(&Path) -> Result<(), TrainError>,
) -> Result<(), TrainError> {
    let tmp = PathBuf::from(format!("{}.tmp", dir.display()));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(io(&tmp))?;
    }
    std::fs::create_dir_all(&tmp).map_err(io(&tmp))?;
    write(&tmp)?;
    let old = PathBuf::from(format!("{}.old", dir.display()));
    if dir.exists() {
        if old.exists() {
            std::fs::remove_dir_all(&old).map_err(io(&old))?;
        }
        std::fs::rename(dir, &old).map_err(io(dir))?;
    }
    std::fs::rename(&tmp, dir).map_err(io(dir))?;
    if old.exists() {
        std::fs::remove_dir_all(&old).map_err(io(&old))?;
    }
    Ok(())
}

/// Whether there is a checkpoint to resume at `dir` (or the one a kill
/// left at `dir.old` between the two renames of [`write_dir`]).
pub(crate) fn exists(dir: &Path) -> bool {
    dir.exists() || PathBuf::from(format!("{}.old", dir.display())).exists()
}

/// The directory that holds the checkpoint of `dir` (see [`exists`]).
pub(crate) fn resolve(dir: &Path) -> PathBuf {
    let old = PathBuf::from(format!("{}.old", dir.display()));
    if !dir.exists() && old.exists() {
        old
    } else {
        dir.to_path_buf()
    }
}

/// The shuffle generator's position to go on from, after checking that
/// the checkpoint in `dir` is of this run (`saved` is its key, `key` this
/// run's).
pub(crate) fn resume_point<K: PartialEq + Serialize>(
    dir: &Path,
    saved: &K,
    key: &K,
    rng_word_pos: &str,
) -> Result<u128, TrainError> {
    if saved != key {
        return Err(TrainError::Invalid(format!(
            "checkpoint {} is of another run: {}; train afresh without --resume, or with another --checkpoint",
            dir.display(),
            key_differences(saved, key)
        )));
    }
    rng_word_pos
        .parse()
        .map_err(|_| TrainError::Invalid(format!("checkpoint {}: bad rng_word_pos", dir.display())))
}

/// What differs between a checkpoint's key and this run's, field by field
/// (`field: checkpoint X, this run Y`), naming the input a digest stands for.
fn key_differences<K: Serialize>(saved: &K, key: &K) -> String {
    let (a, b) = (
        serde_json::to_value(saved).unwrap_or_default(),
        serde_json::to_value(key).unwrap_or_default(),
    );
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return "its key differs".into();
    };
    let names = |k: &str| match k {
        "data_sha256" => "the training data (--data) differs by content".to_string(),
        "init_vectors_sha256" => "--init-vectors differs by content".to_string(),
        "rows" => "the training data (--data) has another row count".to_string(),
        other => format!("{other} differs"),
    };
    let null = serde_json::Value::Null;
    let mut diffs: Vec<String> = a
        .keys()
        .chain(b.keys().filter(|k| !a.contains_key(*k)))
        .filter(|k| a.get(*k).unwrap_or(&null) != b.get(*k).unwrap_or(&null))
        .map(|k| {
            format!(
                "{} (checkpoint {}, this run {})",
                names(k),
                short(a.get(k).unwrap_or(&null)),
                short(b.get(k).unwrap_or(&null))
            )
        })
        .collect();
    if diffs.is_empty() {
        diffs.push("its key differs".into());
    }
    diffs.join("; ")
}

/// A value as the message shows it: digests cut to 12 characters.
fn short(v: &serde_json::Value) -> String {
    match v.as_str() {
        Some(s) if s.len() == 64 => s[..12].to_string(),
        Some("") => "none".into(),
        _ => v.to_string(),
    }
}

/// `dir/state.json`, which must be of this build's version.
pub(crate) fn read_state<S: serde::de::DeserializeOwned>(
    dir: &Path,
    version: impl Fn(&S) -> u32,
) -> Result<S, TrainError> {
    let p = dir.join("state.json");
    let bytes = std::fs::read(&p).map_err(io(&p))?;
    let state: S =
        serde_json::from_slice(&bytes).map_err(|e| bad(dir, format!("state.json: {e}")))?;
    if version(&state) != VERSION {
        return Err(bad(
            dir,
            format!("version {} (this build reads {VERSION})", version(&state)),
        ));
    }
    Ok(state)
}

/// The checkpoint in `dir`, or the one a kill left at `dir.old` between
/// the two renames of [`save`].
pub fn load(dir: &Path) -> Result<Checkpoint, TrainError> {
    let dir = &resolve(dir);
    let state: AverageState = read_state(dir, |s: &AverageState| s.version)?;
    let mut files = vec!["model.pfe", "adam.f32"];
    if dir.join("best.pfe").exists() {
        files.push("best.pfe");
    }
    verify(dir, &state.sha256, &files)?;
    let model = Model::load(&dir.join("model.pfe"))?;
    let best = if dir.join("best.pfe").exists() {
        Some(Model::load(&dir.join("best.pfe"))?)
    } else {
        None
    };
    let p = dir.join("adam.f32");
    let mut bytes = Vec::new();
    std::fs::File::open(&p)
        .map_err(io(&p))?
        .read_to_end(&mut bytes)
        .map_err(io(&p))?;
    let (nw, nt) = (model.w.len(), model.t.len());
    if bytes.len() != 4 * 2 * (nw + nt) {
        return Err(bad(
            dir,
            format!(
                "adam.f32 holds {} bytes, expected {}",
                bytes.len(),
                8 * (nw + nt)
            ),
        ));
    }
    let mut vals = bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]));
    let mut take = |n: usize| -> Vec<f32> { vals.by_ref().take(n).collect() };
    let adam = [take(nw), take(nw), take(nt), take(nt)];
    Ok(Checkpoint {
        state,
        model,
        adam,
        best,
    })
}
