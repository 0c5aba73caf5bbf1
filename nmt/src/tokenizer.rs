//! `MarianTokenizer` of transformers, reimplemented: SentencePiece pieces
//! mapped through `vocab.json` (whose ids differ from the spm ids), special
//! tokens split out of the text first, `>>xx<<` language codes kept whole,
//! `</s>` appended; decoding skips special ids and joins pieces with the
//! target model.

use std::collections::HashMap;
use std::path::Path;

use serde::Deserialize;

use crate::config::read_json;
use crate::error::NmtError;
use crate::spm::SentencePiece;

#[derive(Debug, Default, Deserialize)]
struct TokenizerConfig {
    #[serde(default)]
    separate_vocabs: bool,
    #[serde(default)]
    clean_up_tokenization_spaces: bool,
    #[serde(default)]
    unk_token: Option<String>,
    #[serde(default)]
    eos_token: Option<String>,
    #[serde(default)]
    pad_token: Option<String>,
}

/// Encodes source text and decodes target ids exactly as `MarianTokenizer`.
#[derive(Debug, Clone)]
pub struct MarianTokenizer {
    source: SentencePiece,
    target: SentencePiece,
    encoder: HashMap<String, u32>,
    decoder: HashMap<u32, String>,
    unk_id: u32,
    eos_id: u32,
    special_tokens: Vec<(String, u32)>,
    special_ids: Vec<u32>,
    clean_up: bool,
}

impl MarianTokenizer {
    /// Loads `source.spm`, `target.spm`, `vocab.json` (and `target_vocab.json`
    /// with `separate_vocabs`) and the optional `tokenizer_config.json`.
    pub fn load(dir: &Path) -> Result<MarianTokenizer, NmtError> {
        let need = |name: &str| {
            let p = dir.join(name);
            if p.is_file() {
                Ok(p)
            } else {
                Err(NmtError::MissingFile {
                    dir: dir.to_path_buf(),
                    what: name.to_string(),
                })
            }
        };
        let cfg_path = dir.join("tokenizer_config.json");
        let cfg: TokenizerConfig = if cfg_path.is_file() {
            read_json(&cfg_path)?
        } else {
            TokenizerConfig::default()
        };
        let source = SentencePiece::from_file(&need("source.spm")?)?;
        let target = SentencePiece::from_file(&need("target.spm")?)?;
        let vocab_path = need("vocab.json")?;
        let encoder: HashMap<String, u32> = read_json(&vocab_path)?;
        let target_vocab: HashMap<String, u32> = if cfg.separate_vocabs {
            read_json(&need("target_vocab.json")?)?
        } else {
            encoder.clone()
        };
        let decoder = target_vocab.iter().map(|(k, &v)| (v, k.clone())).collect();

        let lookup = |name: &str, token: &str| {
            encoder
                .get(token)
                .copied()
                .ok_or_else(|| NmtError::VocabMismatch {
                    dir: dir.to_path_buf(),
                    reason: format!("vocab.json has no {name} token {token:?}"),
                })
        };
        let unk = cfg.unk_token.unwrap_or_else(|| "<unk>".into());
        let eos = cfg.eos_token.unwrap_or_else(|| "</s>".into());
        let pad = cfg.pad_token.unwrap_or_else(|| "<pad>".into());
        let unk_id = lookup("unk", &unk)?;
        let eos_id = lookup("eos", &eos)?;
        let pad_id = lookup("pad", &pad)?;
        let mut special_tokens = vec![(eos, eos_id), (unk, unk_id), (pad, pad_id)];
        // Longest first, so that a token that is a prefix of another loses.
        special_tokens.sort_by_key(|(t, _)| std::cmp::Reverse(t.len()));
        Ok(MarianTokenizer {
            source,
            target,
            encoder,
            decoder,
            unk_id,
            eos_id,
            special_ids: vec![eos_id, unk_id, pad_id],
            special_tokens,
            clean_up: cfg.clean_up_tokenization_spaces,
        })
    }

    /// Number of entries in the source vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.encoder.len()
    }

    pub fn max_id(&self) -> u32 {
        self.encoder.values().copied().max().unwrap_or(0)
    }

    pub fn eos_id(&self) -> u32 {
        self.eos_id
    }

    /// Source ids for one sentence, ending in `</s>`.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let mut ids = Vec::with_capacity(text.len() / 3 + 2);
        let mut rest = text;
        while !rest.is_empty() {
            let hit = self.find_special(rest);
            let (plain, special) = match hit {
                Some((at, len, id)) => (&rest[..at], Some((at + len, id))),
                None => (rest, None),
            };
            if !plain.is_empty() {
                self.encode_plain(plain, &mut ids);
            }
            match special {
                Some((end, id)) => {
                    ids.push(id);
                    rest = &rest[end..];
                }
                None => break,
            }
        }
        ids.push(self.eos_id);
        ids
    }

    fn find_special(&self, text: &str) -> Option<(usize, usize, u32)> {
        let bytes = text.as_bytes();
        (0..bytes.len()).find_map(|i| {
            if bytes[i] != b'<' {
                return None;
            }
            self.special_tokens
                .iter()
                .find(|(t, _)| text[i..].starts_with(t.as_str()))
                .map(|(t, id)| (i, t.len(), *id))
        })
    }

    fn encode_plain(&self, text: &str, ids: &mut Vec<u32>) {
        let mut text = text;
        if text.starts_with(">>") {
            if let Some(end) = text.find("<<") {
                let code = &text[..end + 2];
                ids.push(self.encoder.get(code).copied().unwrap_or(self.unk_id));
                text = &text[end + 2..];
            }
        }
        for piece in self.source.encode(text) {
            ids.push(self.encoder.get(&piece).copied().unwrap_or(self.unk_id));
        }
    }

    /// Target text for generated ids, special ids skipped, as
    /// `tokenizer.decode(ids, skip_special_tokens=True)`. Ids outside the
    /// vocabulary read as `<unk>`, which is special and so skipped too.
    pub fn decode(&self, ids: &[u32]) -> String {
        let pieces: Vec<&str> = ids
            .iter()
            .filter(|id| !self.special_ids.contains(id))
            .filter_map(|id| self.decoder.get(id).map(String::as_str))
            .filter(|p| !self.special_tokens.iter().any(|(t, _)| t == p))
            .collect();
        let out = self.target.decode_pieces(&pieces).replace('\u{2581}', " ");
        let out = out.trim();
        if self.clean_up {
            clean_up_tokenization(out)
        } else {
            out.to_string()
        }
    }
}

/// transformers' `clean_up_tokenization`, for tokenizers configured with it.
fn clean_up_tokenization(s: &str) -> String {
    s.replace(" .", ".")
        .replace(" ?", "?")
        .replace(" !", "!")
        .replace(" ,", ",")
        .replace(" ' ", "'")
        .replace(" n't", "n't")
        .replace(" 'm", "'m")
        .replace(" 's", "'s")
        .replace(" 've", "'ve")
        .replace(" 're", "'re")
}
