//! `config.json` and `generation_config.json` of a MarianMT export. Special
//! ids, sizes and decoding defaults come from here, never from constants,
//! so that any MarianMT model (opus-mt-cs-en, de-en, a demo model) loads.

use std::path::Path;

use serde::Deserialize;

use crate::error::NmtError;

#[derive(Debug, Clone, Deserialize)]
pub struct ModelConfig {
    pub model_type: Option<String>,
    pub d_model: usize,
    pub encoder_layers: usize,
    pub decoder_layers: usize,
    pub decoder_attention_heads: usize,
    pub vocab_size: usize,
    #[serde(default)]
    pub decoder_vocab_size: Option<usize>,
    pub max_position_embeddings: usize,
    pub pad_token_id: u32,
    pub eos_token_id: u32,
    pub decoder_start_token_id: u32,
    #[serde(default)]
    pub forced_eos_token_id: Option<u32>,
}

impl ModelConfig {
    pub fn load(path: &Path) -> Result<ModelConfig, NmtError> {
        let cfg: ModelConfig = read_json(path)?;
        if let Some(t) = &cfg.model_type {
            if t != "marian" {
                return Err(NmtError::BadConfig {
                    path: path.to_path_buf(),
                    reason: format!("model_type is {t:?}; only \"marian\" models are supported"),
                });
            }
        }
        let bad = |reason: String| NmtError::BadConfig {
            path: path.to_path_buf(),
            reason,
        };
        let vocab = cfg.target_vocab_size();
        for (key, id) in [
            ("pad_token_id", cfg.pad_token_id),
            ("eos_token_id", cfg.eos_token_id),
            ("decoder_start_token_id", cfg.decoder_start_token_id),
        ] {
            if id as usize >= vocab {
                return Err(bad(format!(
                    "{key} = {id} is outside the vocabulary of {vocab}"
                )));
            }
        }
        if cfg.decoder_attention_heads == 0
            || !cfg.d_model.is_multiple_of(cfg.decoder_attention_heads)
        {
            return Err(bad(format!(
                "d_model {} is not divisible by decoder_attention_heads {}",
                cfg.d_model, cfg.decoder_attention_heads
            )));
        }
        if cfg.max_position_embeddings < 2 {
            return Err(bad("max_position_embeddings must be at least 2".into()));
        }
        Ok(cfg)
    }

    pub fn target_vocab_size(&self) -> usize {
        self.decoder_vocab_size.unwrap_or(self.vocab_size)
    }

    pub fn head_dim(&self) -> usize {
        self.d_model / self.decoder_attention_heads
    }
}

/// The subset of `generation_config.json` that changes Marian decoding.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct GenerationDefaults {
    #[serde(default)]
    pub num_beams: Option<usize>,
    #[serde(default)]
    pub max_length: Option<usize>,
    #[serde(default)]
    pub min_length: Option<usize>,
    #[serde(default)]
    pub length_penalty: Option<f32>,
    #[serde(default)]
    early_stopping: Option<serde_json::Value>,
    #[serde(default)]
    pub bad_words_ids: Option<Vec<Vec<u32>>>,
    #[serde(default)]
    pub forced_eos_token_id: Option<u32>,
    #[serde(default)]
    pub forced_bos_token_id: Option<u32>,
    #[serde(default)]
    pub no_repeat_ngram_size: Option<usize>,
    #[serde(default)]
    pub repetition_penalty: Option<f32>,
    #[serde(default)]
    pub renormalize_logits: Option<bool>,
}

/// `early_stopping` as transformers reads it: true, false or "never".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EarlyStopping {
    /// Stop a sentence as soon as `num_beams` hypotheses are finished.
    True,
    /// Stop when no running beam can beat the worst finished one, judged
    /// at the current length (transformers' default).
    #[default]
    False,
    /// The same check, judged at the best reachable length.
    Never,
}

/// The command-line spelling, as in a generation config: `true`,
/// `false` or `never`.
impl std::str::FromStr for EarlyStopping {
    type Err = String;
    fn from_str(s: &str) -> Result<EarlyStopping, String> {
        match s {
            "true" => Ok(EarlyStopping::True),
            "false" => Ok(EarlyStopping::False),
            "never" => Ok(EarlyStopping::Never),
            _ => Err(format!("must be true, false or never, not {s:?}")),
        }
    }
}

impl EarlyStopping {
    fn from_json(v: &serde_json::Value) -> Option<EarlyStopping> {
        match v {
            serde_json::Value::Bool(true) => Some(EarlyStopping::True),
            serde_json::Value::Bool(false) => Some(EarlyStopping::False),
            serde_json::Value::String(s) if s == "never" => Some(EarlyStopping::Never),
            _ => None,
        }
    }
}

impl GenerationDefaults {
    pub fn load(path: &Path) -> Result<GenerationDefaults, NmtError> {
        let g: GenerationDefaults = read_json(path)?;
        let bad = |reason: String| NmtError::BadConfig {
            path: path.to_path_buf(),
            reason,
        };
        if g.repetition_penalty
            .is_some_and(|p| !(p.is_finite() && p > 0.0))
        {
            return Err(bad("repetition_penalty must be a positive number".into()));
        }
        if g.renormalize_logits == Some(true) {
            return Err(bad("renormalize_logits is not supported".into()));
        }
        if let Some(words) = &g.bad_words_ids {
            if words.iter().any(|w| w.len() != 1) {
                return Err(bad(
                    "bad_words_ids with sequences longer than one token are not supported".into(),
                ));
            }
        }
        if let Some(v) = &g.early_stopping {
            if EarlyStopping::from_json(v).is_none() {
                return Err(bad(format!(
                    "early_stopping must be true, false or \"never\", not {v}"
                )));
            }
        }
        Ok(g)
    }

    pub fn early_stopping(&self) -> EarlyStopping {
        self.early_stopping
            .as_ref()
            .and_then(EarlyStopping::from_json)
            .unwrap_or_default()
    }
}

pub(crate) fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, NmtError> {
    let text = std::fs::read_to_string(path).map_err(|e| NmtError::io(path, e))?;
    serde_json::from_str(&text).map_err(|source| NmtError::Json {
        path: path.to_path_buf(),
        source,
    })
}
