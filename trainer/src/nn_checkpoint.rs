//! `--resume` for the neural encoders: what a killed run needs to go on as
//! if it had not stopped, written after every epoch through
//! [`crate::checkpoint::write_dir`] (so a kill leaves a whole one).
//!
//! `state.json` holds the counters, the shuffle generator's position, the
//! report so far, the run's key, the parameters' ids and the SHA-256 of
//! every other file (checked at `--resume`); `model/` the
//! current network (the encoder directory format, f32 and exact); `best/`
//! the best epoch's when a dev set chooses; `adam.bpk` burn's Adam state
//! (burnpack), keyed by parameter id, which is why the ids are kept: the
//! network is rebuilt under them before the state is loaded.

use std::path::Path;

use burn::module::{Param, ParamId};
use burn::tensor::Device;
use serde::{Deserialize, Serialize};

use crate::checkpoint::{bad, digests, read_state, resolve, verify, write_dir, write_state, State};
use crate::neural::{Net, Sampling, Shape};
use crate::nn_model::NeuralModel;
use crate::TrainError;

/// Everything about a run that must match for it to resume.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NeuralKey {
    pub shape: Shape,
    pub megabatch: usize,
    pub batch_size: usize,
    pub margin: f32,
    pub lr: f32,
    pub seed: u64,
    pub shuffle_buffer: usize,
    pub max_pairs: u64,
    pub scramble: f64,
    pub sampling: Sampling,
    pub lambda_c: f64,
    pub lambda_w: f64,
    pub max_tokens: usize,
    /// The Gaussian encoders' KL weight (0 for the others).
    #[serde(default)]
    pub lambda_kl: f64,
    /// The training rows' count: a changed dataset does not resume.
    pub rows: u64,
    /// The training data by content ([`crate::data::PairSource::digest`]);
    /// empty in checkpoints written before, which do not resume.
    #[serde(default)]
    pub data_sha256: String,
    /// The SHA-256 of `--init-vectors`, where given.
    #[serde(default)]
    pub init_vectors_sha256: Option<String>,
}

/// The neural encoders' own part of the state: burn's Adam state is keyed
/// by parameter id, so the network is rebuilt under these ids before it is
/// loaded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParamIds {
    /// Ids of the word table and of each compositional parameter.
    pub param_ids: Vec<u64>,
}

/// The neural encoders' `state.json`.
pub type NeuralState = State<NeuralKey, ParamIds>;

/// The files of a checkpoint whose digests `state.json` records.
fn files(best: bool) -> Vec<&'static str> {
    let mut f = vec!["model/model.safetensors", "model/config.json", "adam.bpk"];
    if best {
        f.extend(["best/model.safetensors", "best/config.json"]);
    }
    f
}

/// The ids of `net`'s parameters, word table first.
pub fn param_ids(net: &Net) -> Vec<u64> {
    std::iter::once(&net.emb)
        .chain(&net.comp)
        .map(|p| p.id.val())
        .collect()
}

/// `net` with its parameters under `ids` (as [`param_ids`] lists them).
fn with_ids(net: Net, ids: &[u64]) -> Result<Net, String> {
    if ids.len() != 1 + net.comp.len() {
        return Err(format!(
            "{} parameter ids for {} parameters",
            ids.len(),
            1 + net.comp.len()
        ));
    }
    let re = |p: Param<burn::tensor::Tensor<2>>, id: u64| {
        let mut q = Param::from_tensor(p.val());
        q.id = ParamId::from(id);
        q
    };
    Ok(Net {
        emb: re(net.emb, ids[0]),
        comp: net
            .comp
            .into_iter()
            .zip(&ids[1..])
            .map(|(p, &id)| re(p, id))
            .collect(),
        shape: net.shape,
    })
}

/// Writes the checkpoint: `model` is the current network (with the words
/// it reads), `best` the best epoch's, `adam` the optimizer's state as
/// burnpack bytes.
pub fn save(
    dir: &Path,
    state: &NeuralState,
    model: &NeuralModel,
    best: Option<&NeuralModel>,
    adam: &[u8],
) -> Result<(), TrainError> {
    write_dir(dir, |tmp| {
        model.save(&tmp.join("model"))?;
        if let Some(b) = best {
            b.save(&tmp.join("best"))?;
        }
        let p = tmp.join("adam.bpk");
        std::fs::write(&p, adam).map_err(|e| TrainError::io(&p, e))?;
        let state = NeuralState {
            sha256: digests(tmp, &files(best.is_some()))?,
            ..state.clone()
        };
        write_state(tmp, &state)
    })
}

pub struct Loaded {
    pub state: NeuralState,
    /// The current network under its saved parameter ids.
    pub model: NeuralModel,
    pub best: Option<NeuralModel>,
    pub adam: Vec<u8>,
}

pub fn load(dir: &Path, dev: &Device) -> Result<Loaded, TrainError> {
    let dir = &resolve(dir);
    let state: NeuralState = read_state(dir, |s: &NeuralState| s.version)?;
    verify(dir, &state.sha256, &files(dir.join("best").exists()))?;
    let mut model = NeuralModel::load(&dir.join("model"), dev)?;
    model.net = with_ids(model.net, &state.extra.param_ids).map_err(|m| bad(dir, m))?;
    let best = if dir.join("best").exists() {
        Some(NeuralModel::load(&dir.join("best"), dev)?)
    } else {
        None
    };
    let p = dir.join("adam.bpk");
    let adam = std::fs::read(&p).map_err(|e| TrainError::io(&p, e))?;
    Ok(Loaded {
        state,
        model,
        best,
        adam,
    })
}
