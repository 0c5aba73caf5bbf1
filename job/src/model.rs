//! `[model]`: the translation model, where and how it runs, and how it
//! decodes (beam, lengths, the repetition controls).

use serde::{Deserialize, Serialize};

use crate::limits::{
    check_streams, cores, max_threads, MAX_BATCH_SIZE, MAX_BATCH_TOKENS, MAX_BEAM, THREADS_PER_CORE,
};

/// `model.top_k_on` as written in the config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TopKOnName {
    #[default]
    Auto,
    Host,
    Graph,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Model {
    /// Model directory in Optimum's ONNX layout.
    pub dir: String,
    /// `cpu`, `cuda` or `cuda:N`.
    #[serde(default = "default_device")]
    pub device: String,
    /// ONNX Runtime threads per worker on CPU (0 = one per core); per
    /// stream when `streams` > 1 (0 then shares the cores out over them).
    #[serde(default)]
    pub threads: usize,
    /// Decoders per worker translating different batches at once, each
    /// with its own copy of the model (CTranslate2's `inter_threads`). The
    /// output does not depend on it: batches are cut the same way. By
    /// default 1 on the CPU and 4 on CUDA (`paraforge_nmt::default_streams`).
    #[serde(default)]
    pub streams: Option<usize>,
    /// Use `*_quantized.onnx`.
    #[serde(default)]
    pub quantized: bool,
    /// Where each step's log-softmax and row top-k run (`translate
    /// --top-k-on`): `auto` = on the host for the CPU, in the decoder graph
    /// for CUDA (only candidates leave the GPU); `host` or `graph`.
    #[serde(default)]
    pub top_k_on: TopKOnName,
    #[serde(default = "default_beam")]
    pub beam: usize,
    /// Hypotheses kept per pair, best first (Wieting et al., 2017, kept many of a
    /// beam's candidates); each is a row with its `candidate_rank`.
    #[serde(default = "default_beam_candidates")]
    pub beam_candidates: usize,
    /// Sentences per batch; by default 16 on the CPU and 64 on CUDA
    /// (`paraforge_nmt::default_batch_size`), where a token budget from
    /// the GPU's free memory also bounds a batch unless `batch_tokens`
    /// is given.
    #[serde(default)]
    pub batch_size: Option<usize>,
    /// Cut batches by padded source tokens instead of sentences (at most
    /// `batch_size` sentences still); what throughput on varied lengths
    /// wants (CTranslate2's `batch_type = "tokens"`).
    #[serde(default)]
    pub batch_tokens: Option<usize>,
    /// Longest translation in new tokens (default: the model's max_length).
    #[serde(default)]
    pub max_new_tokens: Option<usize>,
    /// transformers' `no_repeat_ngram_size`: no n-gram twice in a
    /// translation (unset or 0: off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_repeat_ngram_size: Option<usize>,
    /// transformers' `repetition_penalty` (unset or 1.0: off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repetition_penalty: Option<f32>,
    /// transformers' `length_penalty` (default: the model's generation config).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub length_penalty: Option<f32>,
}

impl Model {
    /// The `[model]` keys' checks: (key, what is wrong).
    pub(crate) fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.dir.trim().is_empty() {
            return Err(("model.dir", "must not be empty".into()));
        }
        let device_ok = self.device == "cpu"
            || self.device == "cuda"
            || self
                .device
                .strip_prefix("cuda:")
                .is_some_and(|n| n.parse::<u32>().is_ok());
        if !device_ok {
            return Err((
                "model.device",
                format!("{:?}: use cpu, cuda or cuda:N", self.device),
            ));
        }
        for (key, value, max) in [
            ("model.beam", self.beam, MAX_BEAM),
            (
                "model.batch_size",
                self.batch_size.unwrap_or(1),
                MAX_BATCH_SIZE,
            ),
        ] {
            if value == 0 {
                return Err((key, "must be at least 1".into()));
            }
            if value > max {
                return Err((key, format!("{value} is more than the limit of {max}")));
            }
        }
        if self.beam_candidates == 0 || self.beam_candidates > self.beam {
            return Err((
                "model.beam_candidates",
                format!(
                    "{} must be between 1 and model.beam ({}): a beam finishes at most that many hypotheses",
                    self.beam_candidates, self.beam
                ),
            ));
        }
        if let Some(t) = self.batch_tokens {
            if t == 0 || t > MAX_BATCH_TOKENS {
                return Err((
                    "model.batch_tokens",
                    format!("{t} must be between 1 and {MAX_BATCH_TOKENS}"),
                ));
            }
        }
        if self.threads > max_threads() {
            return Err((
                "model.threads",
                format!(
                    "{} is more than the limit of {} ({THREADS_PER_CORE} x the {} cores of this machine; 0 = one per core)",
                    self.threads,
                    max_threads(),
                    cores()
                ),
            ));
        }
        // Unset, the streams are the device's default (1 on the CPU, 4 on
        // CUDA: `paraforge_nmt::default_streams`); a worker whose --device
        // or --gpus puts the model elsewhere checks again with its own.
        let streams = self.streams.unwrap_or(if self.device.starts_with("cuda") {
            4
        } else {
            1
        });
        if let Err(reason) = check_streams(self.threads, streams) {
            return Err(("model.streams", reason));
        }
        if self.max_new_tokens == Some(0) {
            return Err(("model.max_new_tokens", "must be at least 1".into()));
        }
        self.check_controls()
    }

    /// The repetition controls: numbers that mean something, and the
    /// host top-k they need (a graph ending in TopK sees no history).
    fn check_controls(&self) -> Result<(), (&'static str, String)> {
        if let Some(p) = self
            .repetition_penalty
            .filter(|p| !(p.is_finite() && *p > 0.0))
        {
            return Err((
                "model.repetition_penalty",
                format!("{p}: must be a positive number (1.0: off)"),
            ));
        }
        if let Some(p) = self.length_penalty.filter(|p| !p.is_finite()) {
            return Err(("model.length_penalty", format!("{p}: must be a number")));
        }
        let on = self.no_repeat_ngram_size.unwrap_or(0) > 0
            || self.repetition_penalty.is_some_and(|p| p != 1.0);
        let graph = self.top_k_on == TopKOnName::Graph
            || (self.top_k_on == TopKOnName::Auto && self.device.starts_with("cuda"));
        if on && graph {
            return Err((
                "model.top_k_on",
                "no_repeat_ngram_size and repetition_penalty need the host top-k: set model.top_k_on = \"host\"".into(),
            ));
        }
        Ok(())
    }
}

fn default_device() -> String {
    "cpu".into()
}
fn default_beam() -> usize {
    12
}
fn default_beam_candidates() -> usize {
    1
}
