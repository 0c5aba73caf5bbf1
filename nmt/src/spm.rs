//! SentencePiece unigram models (`source.spm`, `target.spm`), read from the
//! model's protobuf and applied exactly as the C++ library does: the
//! precompiled normalization trie, whitespace handling, and Viterbi
//! segmentation with the library's tie-breaking. Exactness matters because
//! a different segmentation gives different ids and so a different
//! translation than `transformers` would produce.

use std::collections::HashMap;
use std::path::Path;

use prost::Message;

use crate::error::NmtError;

/// The parts of `sentencepiece_model.proto` this crate reads; field numbers
/// are those of the upstream schema.
mod proto {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ModelProto {
        #[prost(message, repeated, tag = "1")]
        pub pieces: Vec<SentencePiece>,
        #[prost(message, optional, tag = "2")]
        pub trainer_spec: Option<TrainerSpec>,
        #[prost(message, optional, tag = "3")]
        pub normalizer_spec: Option<NormalizerSpec>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct SentencePiece {
        #[prost(string, optional, tag = "1")]
        pub piece: Option<String>,
        #[prost(float, optional, tag = "2")]
        pub score: Option<f32>,
        #[prost(int32, optional, tag = "3")]
        pub r#type: Option<i32>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TrainerSpec {
        #[prost(int32, optional, tag = "3")]
        pub model_type: Option<i32>,
        #[prost(bool, optional, tag = "24")]
        pub treat_whitespace_as_suffix: Option<bool>,
        #[prost(bool, optional, tag = "35")]
        pub byte_fallback: Option<bool>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct NormalizerSpec {
        #[prost(string, optional, tag = "1")]
        pub name: Option<String>,
        #[prost(bytes = "vec", optional, tag = "2")]
        pub precompiled_charsmap: Option<Vec<u8>>,
        #[prost(bool, optional, tag = "3")]
        pub add_dummy_prefix: Option<bool>,
        #[prost(bool, optional, tag = "4")]
        pub remove_extra_whitespaces: Option<bool>,
        #[prost(bool, optional, tag = "5")]
        pub escape_whitespaces: Option<bool>,
    }
}

const SPACE_SYMBOL: &str = "\u{2581}";
/// Penalty the C++ library subtracts from the lowest piece score to score
/// an unknown character (`kUnkPenalty` in unigram_model.cc).
const UNK_PENALTY: f32 = 10.0;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PieceType {
    Normal,
    Unknown,
    Control,
    UserDefined,
    Unused,
    Byte,
}

impl PieceType {
    fn from_proto(v: Option<i32>) -> PieceType {
        match v.unwrap_or(1) {
            2 => PieceType::Unknown,
            3 => PieceType::Control,
            4 => PieceType::UserDefined,
            5 => PieceType::Unused,
            6 => PieceType::Byte,
            _ => PieceType::Normal,
        }
    }
}

/// The precompiled normalization rules: a darts-clone double array over
/// UTF-8 byte strings whose values index NUL-terminated replacements.
#[derive(Debug, Clone)]
struct CharsMap {
    units: Vec<u32>,
    normalized: Vec<u8>,
}

impl CharsMap {
    fn parse(blob: &[u8]) -> Option<CharsMap> {
        if blob.len() < 4 {
            return None;
        }
        let trie_size = u32::from_le_bytes(blob[..4].try_into().ok()?) as usize;
        let rest = &blob[4..];
        if trie_size > rest.len() || !trie_size.is_multiple_of(4) {
            return None;
        }
        let units = rest[..trie_size]
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        Some(CharsMap {
            units,
            normalized: rest[trie_size..].to_vec(),
        })
    }

    /// Longest rule whose key is a prefix of `key`: (replacement, key length).
    fn longest_prefix(&self, key: &[u8]) -> Option<(&[u8], usize)> {
        let unit = |pos: usize| self.units.get(pos).copied();
        let offset = |u: u32| ((u >> 10) << ((u & (1 << 9)) >> 6)) as usize;
        let has_leaf = |u: u32| (u >> 8) & 1 == 1;
        let label = |u: u32| u & ((1 << 31) | 0xFF);
        let value = |u: u32| (u & ((1 << 31) - 1)) as usize;

        let mut pos = offset(unit(0)?);
        let mut best = None;
        for (i, &b) in key.iter().enumerate() {
            pos ^= b as usize;
            let u = unit(pos)?;
            if label(u) != b as u32 {
                break;
            }
            pos ^= offset(u);
            if has_leaf(u) {
                best = Some((value(unit(pos)?), i + 1));
            }
        }
        let (start, len) = best?;
        let tail = self.normalized.get(start..)?;
        let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
        Some((&tail[..end], len))
    }
}

/// A loaded SentencePiece unigram model.
#[derive(Debug, Clone)]
pub struct SentencePiece {
    pieces: Vec<(String, f32, PieceType)>,
    index: HashMap<String, u32>,
    all_ids: HashMap<String, u32>,
    max_piece_bytes: usize,
    unk_id: u32,
    min_score: f32,
    max_score: f32,
    charsmap: Option<CharsMap>,
    add_dummy_prefix: bool,
    remove_extra_whitespaces: bool,
    escape_whitespaces: bool,
}

impl SentencePiece {
    pub fn from_file(path: &Path) -> Result<SentencePiece, NmtError> {
        let bytes = std::fs::read(path).map_err(|e| NmtError::io(path, e))?;
        SentencePiece::from_bytes(&bytes).map_err(|reason| NmtError::BadTokenizer {
            path: path.to_path_buf(),
            reason,
        })
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<SentencePiece, String> {
        let model = proto::ModelProto::decode(bytes)
            .map_err(|e| format!("not a SentencePiece model protobuf: {e}"))?;
        if model.pieces.is_empty() {
            return Err("the model has no pieces".into());
        }
        let trainer = model.trainer_spec.unwrap_or_default();
        match trainer.model_type.unwrap_or(1) {
            1 => {}
            t => return Err(format!("model_type {t} is not supported (only unigram, 1)")),
        }
        if trainer.treat_whitespace_as_suffix.unwrap_or(false) {
            return Err("treat_whitespace_as_suffix is not supported".into());
        }
        if trainer.byte_fallback.unwrap_or(false) {
            return Err("byte_fallback is not supported".into());
        }
        let norm = model.normalizer_spec.unwrap_or_default();
        let charsmap = match norm.precompiled_charsmap.as_deref() {
            None | Some([]) => None,
            Some(blob) => Some(
                CharsMap::parse(blob)
                    .ok_or("the precompiled_charsmap is truncated or malformed")?,
            ),
        };

        let mut pieces = Vec::with_capacity(model.pieces.len());
        let mut index = HashMap::with_capacity(model.pieces.len());
        let mut all_ids = HashMap::with_capacity(model.pieces.len());
        let (mut unk_id, mut min_score, mut max_score) = (None, f32::MAX, f32::MIN);
        for (id, p) in model.pieces.into_iter().enumerate() {
            let text = p.piece.unwrap_or_default();
            let score = p.score.unwrap_or(0.0);
            let ty = PieceType::from_proto(p.r#type);
            match ty {
                PieceType::Unknown => unk_id = Some(id as u32),
                PieceType::Normal => {
                    min_score = min_score.min(score);
                    max_score = max_score.max(score);
                }
                _ => {}
            }
            // Only these types take part in segmentation (model_interface.cc).
            if matches!(
                ty,
                PieceType::Normal | PieceType::UserDefined | PieceType::Unused
            ) {
                index.insert(text.clone(), id as u32);
            }
            all_ids.entry(text.clone()).or_insert(id as u32);
            pieces.push((text, score, ty));
        }
        let unk_id = unk_id.ok_or("the model has no unknown piece")?;
        let max_piece_bytes = index.keys().map(String::len).max().unwrap_or(1);
        Ok(SentencePiece {
            pieces,
            index,
            all_ids,
            max_piece_bytes,
            unk_id,
            min_score,
            max_score,
            charsmap,
            add_dummy_prefix: norm.add_dummy_prefix.unwrap_or(true),
            remove_extra_whitespaces: norm.remove_extra_whitespaces.unwrap_or(true),
            escape_whitespaces: norm.escape_whitespaces.unwrap_or(true),
        })
    }

    pub fn len(&self) -> usize {
        self.pieces.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pieces.is_empty()
    }

    /// One normalization step at the start of `input`: (replacement, bytes consumed).
    fn normalize_prefix<'a>(&'a self, input: &'a str) -> (&'a str, usize) {
        if let Some((rep, len)) = self
            .charsmap
            .as_ref()
            .and_then(|m| m.longest_prefix(input.as_bytes()))
        {
            // Rules are built from valid UTF-8, so the replacement is too;
            // a corrupt map falls back to the unnormalized character.
            if let Ok(rep) = std::str::from_utf8(rep) {
                if input.is_char_boundary(len) {
                    return (rep, len);
                }
            }
        }
        let len = input.chars().next().map_or(0, char::len_utf8);
        (&input[..len], len)
    }

    /// Normalizes as `normalizer.cc` does: rules, then leading, trailing and
    /// repeated spaces removed, a dummy prefix added, spaces escaped.
    pub fn normalize(&self, text: &str) -> String {
        let ws = if self.escape_whitespaces {
            SPACE_SYMBOL
        } else {
            " "
        };
        let mut input = text;
        if self.remove_extra_whitespaces {
            while !input.is_empty() {
                let (rep, used) = self.normalize_prefix(input);
                if rep != " " {
                    break;
                }
                input = &input[used..];
            }
        }
        let mut out = String::with_capacity(text.len() + 8);
        if input.is_empty() {
            return out;
        }
        if self.add_dummy_prefix {
            out.push_str(ws);
        }
        let mut prev_space = self.remove_extra_whitespaces;
        while !input.is_empty() {
            let (mut rep, used) = self.normalize_prefix(input);
            if prev_space && self.remove_extra_whitespaces {
                rep = rep.trim_start_matches(' ');
            }
            if !rep.is_empty() {
                for c in rep.chars() {
                    if c == ' ' && self.escape_whitespaces {
                        out.push_str(SPACE_SYMBOL);
                    } else {
                        out.push(c);
                    }
                }
                prev_space = rep.ends_with(' ');
            }
            input = &input[used..];
        }
        if self.remove_extra_whitespaces {
            while out.ends_with(ws) {
                out.truncate(out.len() - ws.len());
            }
        }
        out
    }

    /// Segments `text` into pieces as `SentencePieceProcessor.encode(text,
    /// out_type=str)` does. Unknown characters come back as their surface
    /// text, with consecutive unknowns merged into one piece.
    pub fn encode(&self, text: &str) -> Vec<String> {
        let normalized = self.normalize(text);
        self.segment(&normalized)
    }

    fn segment(&self, s: &str) -> Vec<String> {
        #[derive(Clone, Copy)]
        struct Node {
            id: u32,
            score: f32,
            start: usize,
            set: bool,
        }
        let n = s.len();
        let unk_score = self.min_score - UNK_PENALTY;
        let mut best = vec![
            Node {
                id: 0,
                score: 0.0,
                start: 0,
                set: false
            };
            n + 1
        ];
        let mut start = 0;
        while start < n {
            let here = best[start].score;
            let char_len = s[start..].chars().next().map_or(1, char::len_utf8);
            let mut has_single = false;
            let limit = n.min(start + self.max_piece_bytes);
            let mut end = start + char_len;
            while end <= limit {
                if s.is_char_boundary(end) {
                    if let Some(&id) = self.index.get(&s[start..end]) {
                        let (_, score, ty) = &self.pieces[id as usize];
                        if *ty != PieceType::Unused {
                            let len = end - start;
                            let score = if *ty == PieceType::UserDefined {
                                len as f32 * self.max_score - 0.1
                            } else {
                                *score
                            };
                            let cand = here + score;
                            let node = &mut best[end];
                            if !node.set || cand > node.score {
                                *node = Node {
                                    id,
                                    score: cand,
                                    start,
                                    set: true,
                                };
                            }
                            if len == char_len {
                                has_single = true;
                            }
                        }
                    }
                }
                end += 1;
            }
            if !has_single {
                let cand = here + unk_score;
                let node = &mut best[start + char_len];
                if !node.set || cand > node.score {
                    *node = Node {
                        id: self.unk_id,
                        score: cand,
                        start,
                        set: true,
                    };
                }
            }
            start += char_len;
        }
        let mut spans = Vec::new();
        let mut end = n;
        while end > 0 {
            let node = best[end];
            spans.push((node.start, end, node.id));
            end = node.start;
        }
        spans.reverse();
        let mut out: Vec<String> = Vec::with_capacity(spans.len());
        let mut prev_unk = false;
        for (a, b, id) in spans {
            let is_unk = id == self.unk_id;
            match out.last_mut() {
                Some(last) if is_unk && prev_unk => last.push_str(&s[a..b]),
                _ => out.push(s[a..b].to_string()),
            }
            prev_unk = is_unk;
        }
        out
    }

    /// Joins pieces back into text as `SentencePieceProcessor.decode_pieces`.
    pub fn decode_pieces<S: AsRef<str>>(&self, pieces: &[S]) -> String {
        let mut out = String::new();
        for p in pieces {
            let p = p.as_ref();
            let ty = self.all_ids.get(p).map(|&id| self.pieces[id as usize].2);
            match ty {
                Some(PieceType::Control) => {}
                Some(PieceType::Unknown) => out.push_str(" \u{2047} "),
                // A piece the model lacks decodes as the unknown id, whose
                // surface is the piece itself, unescaped (as upstream).
                None => out.push_str(p),
                _ => {
                    let mut piece = p;
                    if out.is_empty() && (self.add_dummy_prefix || self.remove_extra_whitespaces) {
                        piece = piece.strip_prefix(SPACE_SYMBOL).unwrap_or(piece);
                    }
                    out.push_str(&piece.replace(SPACE_SYMBOL, " "));
                }
            }
        }
        out
    }
}
