//! A BERT-style sentence encoder on ONNX Runtime as the para_score model:
//! a directory holding `model.onnx` (input_ids,
//! attention_mask, token_type_ids -> last_hidden_state), the Hugging Face
//! `tokenizer.json` and `paraforge-encoder.json` (pooling, normalisation,
//! longest input), as `tools/models/export_sentence_encoder.py` writes it, e.g. for
//! sentence-transformers' all-MiniLM-L6-v2. The embedding is the mean of the
//! last hidden states over the sentence's tokens ([CLS] and [SEP]
//! included, as sentence-transformers pools), then L2-normalised.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use ort::session::Session;
use ort::value::Tensor;
use paraforge_core::encoder::{Coverage, Scratch, SentenceEncoder};
use paraforge_core::{EncoderError, Tokens};

/// The file that marks a transformer encoder's directory.
pub const CONFIG: &str = "paraforge-encoder.json";
const FORMAT: &str = "paraforge-transformer-encoder";

#[derive(Debug, serde::Deserialize)]
struct Config {
    format: String,
    version: u32,
    pooling: String,
    normalize: bool,
    max_length: usize,
    dim: usize,
    #[serde(default)]
    source: String,
}

pub struct TransformerEncoder {
    /// ONNX Runtime runs a session through `&mut`, so each of the scorer's
    /// threads gets a session of its own (one per core, see `load`) rather
    /// than all taking turns on one.
    sessions: Vec<Mutex<Session>>,
    next: AtomicU64,
    tokenizer: tokenizers::Tokenizer,
    cfg: Config,
    unk: Option<u32>,
    about: String,
    /// Sentences whose run failed (see [`SentenceEncoder::failures`]).
    failures: AtomicU64,
}

fn bad(path: &Path, reason: impl std::fmt::Display) -> EncoderError {
    EncoderError::BadModel {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    }
}

impl TransformerEncoder {
    pub fn is_one(dir: &Path) -> bool {
        dir.join(CONFIG).is_file()
    }

    pub fn load(dir: &Path) -> Result<TransformerEncoder, EncoderError> {
        let cpath = dir.join(CONFIG);
        let text = std::fs::read(&cpath).map_err(|e| bad(&cpath, e))?;
        let cfg: Config = serde_json::from_slice(&text).map_err(|e| bad(&cpath, e))?;
        if cfg.format != FORMAT || cfg.version != 1 {
            return Err(bad(
                &cpath,
                format!(
                    "format {:?} version {}, expected {FORMAT:?} version 1",
                    cfg.format, cfg.version
                ),
            ));
        }
        if cfg.pooling != "mean" {
            return Err(bad(
                &cpath,
                format!("pooling {:?}: only \"mean\" is supported", cfg.pooling),
            ));
        }
        // Below 3 the tokenizer's room for text after [CLS] and [SEP]
        // underflows (and truncation silently turns off).
        if cfg.max_length < 3 || cfg.dim == 0 {
            return Err(bad(
                &cpath,
                format!(
                    "max_length {} and dim {}: need max_length >= 3 and dim >= 1",
                    cfg.max_length, cfg.dim
                ),
            ));
        }
        let tpath = dir.join("tokenizer.json");
        let mut tokenizer = tokenizers::Tokenizer::from_file(&tpath).map_err(|e| bad(&tpath, e))?;
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(tokenizers::TruncationParams {
                max_length: cfg.max_length,
                ..Default::default()
            }))
            .map_err(|e| bad(&tpath, e))?;
        let unk = match tokenizer.get_model() {
            tokenizers::ModelWrapper::WordPiece(wp) => tokenizer.token_to_id(&wp.unk_token),
            _ => tokenizer.token_to_id("[UNK]"),
        };
        let mpath: PathBuf = dir.join("model.onnx");
        // One intra-op thread per session and a session per core: sentences
        // are short, and the scorer runs them from several threads already.
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
        let sessions = (0..cores)
            .map(|_| {
                paraforge_nmt::onnx_session(
                    &mpath,
                    &paraforge_nmt::LoadOptions {
                        threads: 1,
                        ..Default::default()
                    },
                )
                .map(Mutex::new)
                .map_err(|e| EncoderError::Load {
                    path: mpath.clone(),
                    reason: e.to_string(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let about = format!(
            "transformer sentence encoder ({} dimensions, mean pooling{}; {})",
            cfg.dim,
            if cfg.normalize { ", normalised" } else { "" },
            if cfg.source.is_empty() {
                "no source given"
            } else {
                &cfg.source
            }
        );
        let enc = TransformerEncoder {
            sessions,
            next: AtomicU64::new(0),
            tokenizer,
            cfg,
            unk,
            about,
            failures: AtomicU64::new(0),
        };
        // One run of the longest input the config allows: a graph with other
        // input or output names, another width, or fewer positions than
        // max_length fails here, once, rather than on every sentence of a job.
        let longest = vec!["a"; enc.cfg.max_length].join(" ");
        let mut probe = vec![0f32; enc.cfg.dim];
        enc.embed_text(&longest, &mut probe).map_err(|e| {
            bad(
                &mpath,
                format!("a probe of {} tokens: {e}", enc.cfg.max_length),
            )
        })?;
        Ok(enc)
    }

    /// A free session, else the next one in turn.
    fn session(&self) -> std::sync::MutexGuard<'_, Session> {
        for s in &self.sessions {
            if let Ok(g) = s.try_lock() {
                return g;
            }
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed) as usize % self.sessions.len();
        self.sessions[i].lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The embedding of `text` as given, and how many of its wordpieces
    /// (not counting [CLS], [SEP] and the like) the vocabulary has and how
    /// many became [UNK].
    pub fn embed_text(&self, text: &str, out: &mut [f32]) -> Result<Coverage, EncoderError> {
        let enc = self.tokenizer.encode(text, true).map_err(|e| {
            let head: String = text.chars().take(80).collect();
            EncoderError::Invalid(format!("tokenizing {head:?}...: {e}"))
        })?;
        let ids: Vec<i64> = enc.get_ids().iter().map(|&i| i as i64).collect();
        let mut cov = Coverage::default();
        for (&id, &special) in enc.get_ids().iter().zip(enc.get_special_tokens_mask()) {
            if special == 1 {
                continue;
            }
            if Some(id) == self.unk {
                cov.unknown += 1;
            } else {
                cov.known += 1;
            }
        }
        let n = ids.len();
        let tensor = |v: Vec<i64>| {
            Tensor::from_array(([1usize, n], v))
                .map_err(|e| EncoderError::Invalid(format!("input tensor: {e}")))
        };
        let inputs = ort::inputs![
            "input_ids" => tensor(ids)?,
            "attention_mask" => tensor(vec![1; n])?,
            "token_type_ids" => tensor(vec![0; n])?,
        ];
        let mut session = self.session();
        let outputs = session
            .run(inputs)
            .map_err(|e| EncoderError::Invalid(format!("running the sentence encoder: {e}")))?;
        let (shape, h) = outputs
            .get("last_hidden_state")
            .ok_or_else(|| {
                EncoderError::Invalid("the graph has no output last_hidden_state".into())
            })?
            .try_extract_tensor::<f32>()
            .map_err(|e| EncoderError::Invalid(format!("sentence encoder output: {e}")))?;
        let dim = self.cfg.dim;
        if shape.len() != 3 || shape[1] as usize != n || shape[2] as usize != dim {
            return Err(EncoderError::Invalid(format!(
                "sentence encoder output of shape {shape:?}, expected [1, {n}, {dim}]"
            )));
        }
        out.fill(0.0);
        for t in 0..n {
            for (o, x) in out.iter_mut().zip(&h[t * dim..(t + 1) * dim]) {
                *o += x;
            }
        }
        let inv = 1.0 / n.max(1) as f32;
        out.iter_mut().for_each(|x| *x *= inv);
        if self.cfg.normalize {
            let norm = out.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
            out.iter_mut().for_each(|x| *x /= norm);
        }
        Ok(cov)
    }
}

impl SentenceEncoder for TransformerEncoder {
    fn dim(&self) -> usize {
        self.cfg.dim
    }

    /// The scorer's tokens joined by single spaces (as TRIGRAM reads them):
    /// lowercased, words and punctuation apart, which an uncased BERT
    /// tokenizer splits the same way; only the first max_length tokens, as
    /// the model reads no more wordpieces than that. Coverage counts
    /// wordpieces: a sentence none of whose wordpieces the vocabulary has
    /// (emoji, an unknown script; [CLS] and [SEP] alone) has no embedding,
    /// so two such lines do not score as paraphrases. A failed run has none
    /// either, and is counted: callers check [`SentenceEncoder::failures`]
    /// and fail their shard or output.
    fn embed_tokens(&self, tokens: &Tokens, _: &mut Scratch, out: &mut [f32]) -> Coverage {
        let text = tokens
            .iter()
            .take(self.cfg.max_length)
            .map(|t| t.text)
            .collect::<Vec<_>>()
            .join(" ");
        match self.embed_text(&text, out) {
            Ok(c) if c.known > 0 => c,
            Ok(c) => {
                out.fill(0.0);
                c
            }
            Err(e) => {
                // The first failure is logged; the count says how many.
                if self.failures.fetch_add(1, Ordering::Relaxed) == 0 {
                    tracing::error!(error = %e, "sentence encoder failed");
                }
                out.fill(0.0);
                Coverage::default()
            }
        }
    }

    fn describe(&self) -> String {
        self.about.clone()
    }

    fn short_name(&self) -> String {
        "transformer".into()
    }

    fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    struct Reference {
        text: String,
        ids: Vec<u32>,
        embedding: Vec<f32>,
    }

    fn fixture() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/tiny-sentence-encoder")
    }

    /// A real ONNX BERT (tiny, random, exported by
    /// tools/models/export_sentence_encoder.py with PyTorch's own embeddings):
    /// the same wordpieces as Hugging Face's tokenizer, the same pooled and
    /// normalised embedding to 1e-5, empty and truncated inputs included.
    #[test]
    fn the_tiny_encoder_reproduces_pytorch() {
        reproduces_pytorch(&fixture());
    }

    /// The same for all-MiniLM-L6-v2, which is not in the repository (91
    /// MB): `tools/models/export_sentence_encoder.py minilm --out
    /// .cache/all-minilm-l6-v2`, then `cargo test -p paraforge-scorer --
    /// --ignored`.
    #[test]
    #[ignore = "needs .cache/all-minilm-l6-v2 (tools/models/export_sentence_encoder.py minilm)"]
    fn minilm_reproduces_pytorch() {
        reproduces_pytorch(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("../.cache/all-minilm-l6-v2"),
        );
    }

    fn reproduces_pytorch(dir: &Path) {
        let enc = TransformerEncoder::load(dir).unwrap();
        let refs: Vec<Reference> =
            serde_json::from_slice(&std::fs::read(dir.join("reference.json")).unwrap()).unwrap();
        assert!(refs.len() >= 8);
        let mut out = vec![0f32; enc.dim()];
        for r in &refs {
            let ids = enc.tokenizer.encode(r.text.as_str(), true).unwrap();
            assert_eq!(ids.get_ids(), &r.ids[..], "{:?}", r.text);
            enc.embed_text(&r.text, &mut out).unwrap();
            let worst = out
                .iter()
                .zip(&r.embedding)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(worst <= 1e-5, "{:?}: off by {worst}", r.text);
        }
        assert_eq!(enc.failures(), 0);
    }

    /// Loaded as `[scoring] model`: para_score is the cosine of the
    /// encoder's embeddings of the two sentences' tokens.
    #[test]
    fn para_score_is_the_encoders_cosine() {
        let enc = crate::load_encoder(Some(&fixture()), None)
            .unwrap()
            .unwrap();
        assert!(
            enc.describe().starts_with("transformer sentence encoder"),
            "{}",
            enc.describe()
        );
        let t = TransformerEncoder::load(&fixture()).unwrap();
        let mut s = paraforge_core::Scorer::new(Some(&*enc));
        let (a, b) = (
            "A man is playing a guitar.",
            "The dogs are running on the mat!",
        );
        let p = s.score(a, b).para_score.unwrap();
        let (mut ea, mut eb) = (vec![0f32; t.dim()], vec![0f32; t.dim()]);
        t.embed_text("a man is playing a guitar .", &mut ea)
            .unwrap();
        t.embed_text("the dogs are running on the mat !", &mut eb)
            .unwrap();
        let want = paraforge_core::score::cosine(&ea, &eb);
        assert!((p - want).abs() <= 1e-6, "{p} vs {want}");
        assert_eq!(s.score("", b).para_score, None);
    }

    /// A directory that says it is a transformer encoder but whose graph
    /// ONNX Runtime cannot load is an error naming that file, not "no
    /// model" and not a scorer that gives every pair null.
    #[test]
    fn a_corrupt_graph_is_an_error_naming_it() {
        let dir = std::env::temp_dir().join(format!("pf-bad-encoder-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for f in [CONFIG, "tokenizer.json"] {
            std::fs::copy(fixture().join(f), dir.join(f)).unwrap();
        }
        std::fs::write(dir.join("model.onnx"), b"not a graph").unwrap();
        let e = match crate::load_encoder(Some(&dir), None) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("a corrupt model.onnx loaded"),
        };
        std::fs::remove_dir_all(&dir).ok();
        assert!(e.contains("model.onnx: cannot load"), "{e}");
    }

    /// A line the vocabulary has no wordpiece of (emoji: [UNK] only) has
    /// no embedding, so two such lines get no para_score rather than a
    /// cosine near 1 between two [UNK] sentences.
    #[test]
    fn a_sentence_of_unknown_wordpieces_has_no_para_score() {
        let enc = TransformerEncoder::load(&fixture()).unwrap();
        let mut s = paraforge_core::Scorer::new(Some(&enc as &dyn SentenceEncoder));
        assert_eq!(s.score("\u{1F600} \u{1F389}", "\u{1F389}").para_score, None);
        assert!(s
            .score("a man is playing", "a man plays")
            .para_score
            .is_some());
        assert_eq!(enc.failures(), 0);
    }

    /// A graph that fails on some sentences only (its embedding table is
    /// shorter than the tokenizer's vocabulary, as when a model and a
    /// tokenizer of different checkpoints are put together) passes the load
    /// probe; each sentence it cannot run is counted, so the worker's shard
    /// and rescore fail rather than write a null para_score as if scored.
    #[test]
    fn a_sentence_the_graph_cannot_run_is_counted_as_a_failure() {
        let dir = fixture().join("../mismatched-sentence-encoder");
        let enc = TransformerEncoder::load(&dir).unwrap();
        let mut s = paraforge_core::Scorer::new(Some(&enc as &dyn SentenceEncoder));
        // Wordpieces 2..=53: inside the 60-row table.
        let a = "A man is playing a guitar.";
        assert!(s.score(a, a).para_score.is_some());
        assert_eq!(enc.failures(), 0);
        // '##w', '##o', '##n' are rows 71-79: outside it.
        assert_eq!(s.score(a, "Two dogs run in the snow.").para_score, None);
        assert_eq!(enc.failures(), 1);
    }

    /// A config that disagrees with its graph (another width) fails at
    /// load, naming the graph, not on every sentence of a job.
    #[test]
    fn a_config_that_disagrees_with_its_graph_fails_at_load() {
        let dir = std::env::temp_dir().join(format!("pf-wrong-dim-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for f in ["model.onnx", "tokenizer.json"] {
            std::fs::copy(fixture().join(f), dir.join(f)).unwrap();
        }
        let cfg = std::fs::read_to_string(fixture().join(CONFIG)).unwrap();
        let mut v: serde_json::Value = serde_json::from_str(&cfg).unwrap();
        v["dim"] = serde_json::json!(v["dim"].as_u64().unwrap() + 1);
        std::fs::write(dir.join(CONFIG), v.to_string()).unwrap();
        let e = match TransformerEncoder::load(&dir) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("a config of the wrong width loaded"),
        };
        std::fs::remove_dir_all(&dir).ok();
        assert!(e.contains("model.onnx") && e.contains("probe"), "{e}");
    }
}
