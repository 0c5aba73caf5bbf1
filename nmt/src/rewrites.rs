//! Which rewrites the decoder graphs take at load, and their sessions: each
//! rewrite (`cross_attention.rs`, `beam_gather.rs`, `self_attention.rs`,
//! `top_k.rs`) applies where the graph has the export's pattern; the
//! crate's own operators are registered here ([`operators`]), and a graph
//! calling them that ONNX Runtime refuses is loaded again without them:
//! slower, not wrong.

use std::path::Path;

use ort::operator::OperatorDomain;
use ort::session::Session;
use prost::Message;

use crate::config::ModelConfig;
use crate::error::NmtError;
use crate::onnx_graph;
use crate::onnx_graph::onnx::ModelProto;
use crate::runtime::{builder, onnx_error, session, Device, LoadOptions};

/// What the decoder graphs were rewritten to do at load.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Rewrites {
    /// Attend to the encoder once per sentence (`cross_attention.rs`): the
    /// cross-attention cache has one row per sentence, not one per beam.
    pub(crate) cross_per_sentence: bool,
    /// Reorder the self-attention cache inside the call (`beam_gather.rs`).
    pub(crate) beam_gather: bool,
    /// Attend over the self-attention cache with one op per layer
    /// (`self_attention.rs`), fused with the reorder where both apply.
    pub(crate) attend: bool,
    pub(crate) gather_attend: bool,
    /// Never copy the self-attention cache: keep each step's new rows and
    /// feed each row's slots (`self_attention::with_history`).
    pub(crate) history: bool,
    /// Return each row's best candidates instead of its logits
    /// (`top_k.rs`), the decoder with past and the first-step decoder
    /// each (one graph where the decoder is merged).
    pub(crate) top_k: bool,
    pub(crate) top_k_first: bool,
}

/// The decoder-with-past session, from its graph rewritten where it has
/// the export's patterns (each rewrite on its own), else from the file as
/// it is. Should ONNX Runtime refuse the graph with the custom op, it is
/// loaded again without that rewrite: slower, not wrong.
pub(crate) fn with_past_session(
    path: &Path,
    cfg: &ModelConfig,
    opts: &LoadOptions,
) -> Result<(Session, Rewrites), NmtError> {
    let layers = cfg.decoder_layers;
    let want_cross = !opts.cross_attention_per_beam;
    // Caches kept on the device are reordered there (`DeviceIo`).
    let want_gather = !opts.reorder_in_engine && opts.device == Device::Cpu && !opts.io_binding;
    let want_top_k = opts.top_k_in_graph();
    // A host kernel: on CUDA it would move the caches to the host and back.
    let want_attend = !opts.unfused_self_attention && opts.device == Device::Cpu;
    let bytes = (want_cross || want_gather || want_top_k || want_attend)
        .then(|| std::fs::read(path).ok())
        .flatten();
    let rewrite = |gather: bool, attend: bool| -> Option<(ModelProto, Rewrites)> {
        let mut m = onnx_graph::in_memory(bytes.as_deref()?)?;
        let done = Rewrites {
            cross_per_sentence: want_cross && crate::cross_attention::per_sentence(&mut m, layers),
            beam_gather: gather && crate::beam_gather::in_graph(&mut m, layers),
            attend: attend && crate::self_attention::in_graph(&mut m, layers),
            gather_attend: false,
            history: false,
            top_k: want_top_k && crate::top_k::in_graph(&mut m, cfg.target_vocab_size()),
            top_k_first: false,
        };
        let gather_attend =
            done.beam_gather && done.attend && crate::self_attention::with_gather(&mut m, layers);
        let done = Rewrites {
            gather_attend,
            history: gather_attend && crate::self_attention::with_history(&mut m, layers),
            ..done
        };
        (done.cross_per_sentence || done.beam_gather || done.attend || done.top_k)
            .then_some((m, done))
    };
    let commit = |m: &ModelProto, done: Rewrites| -> Result<Session, NmtError> {
        let mut b = builder(path, opts)?;
        if done.beam_gather || done.attend {
            let ops = operators().map_err(|e| onnx_error(path, e))?;
            b = b.with_operators(ops).map_err(|e| onnx_error(path, e))?;
        }
        b.commit_from_memory(&m.encode_to_vec())
            .map_err(|e| onnx_error(path, e))
    };
    let rewritten = rewrite(want_gather, want_attend);
    if want_top_k && !rewritten.as_ref().is_some_and(|(_, done)| done.top_k) {
        refused_top_k(path);
    }
    let Some((m, done)) = rewritten else {
        return Ok((session(path, opts)?, Rewrites::default()));
    };
    match commit(&m, done) {
        Ok(s) => {
            tracing::debug!(path = %path.display(), ?done, "decoder graph rewritten");
            Ok((s, done))
        }
        Err(e) if done.beam_gather || done.attend => {
            tracing::warn!(path = %path.display(), error = %e,
                "the graph with paraforge's own operators did not load; loading it without them");
            match rewrite(false, false) {
                Some((m, done)) => Ok((commit(&m, done)?, done)),
                None => Ok((session(path, opts)?, Rewrites::default())),
            }
        }
        Err(e) => Err(e),
    }
}

/// Says so when a graph that was to end in TopK does not (its logits are
/// then copied back every step): slower, not wrong.
fn refused_top_k(path: &Path) {
    tracing::warn!(path = %path.display(),
        "the decoder graph does not end in a float logits output of this vocabulary that TopK can follow; \
         each step's logits come back to the host");
}

/// A decoder session that returns each row's best candidates where asked
/// and the graph takes the rewrite (`top_k.rs`), else the file as it is;
/// and whether it does.
pub(crate) fn top_k_session(
    path: &Path,
    cfg: &ModelConfig,
    opts: &LoadOptions,
) -> Result<(Session, bool), NmtError> {
    let want = opts.top_k_in_graph();
    let rewritten = want
        .then(|| std::fs::read(path).ok())
        .flatten()
        .and_then(|b| onnx_graph::in_memory(&b))
        .and_then(|mut m| crate::top_k::in_graph(&mut m, cfg.target_vocab_size()).then_some(m));
    let Some(m) = rewritten else {
        if want {
            refused_top_k(path);
        }
        return Ok((session(path, opts)?, false));
    };
    match builder(path, opts)?.commit_from_memory(&m.encode_to_vec()) {
        Ok(s) => Ok((s, true)),
        // The file as it is, by path (weights in side files of a subgraph
        // load only so): slower on a GPU, not wrong.
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e,
                "the decoder graph ending in TopK did not load; loading it as it is");
            Ok((session(path, opts)?, false))
        }
    }
}

/// The crate's custom operators (`ops.rs`), registered here and nowhere
/// else, for a session of a graph [`with_past_session`] rewrote to call
/// them.
pub(crate) fn operators() -> ort::Result<OperatorDomain> {
    OperatorDomain::new(crate::ops::DOMAIN)?
        .add(crate::beam_gather::GatherConcat)?
        .add(crate::self_attention::Attend)?
        .add(crate::self_attention::GatherAttend)?
        .add(crate::self_attention::HistoryAttend)
}
