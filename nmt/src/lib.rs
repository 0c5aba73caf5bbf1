//! The back-translation engine of paraforge: a MarianMT model in the layout
//! of Hugging Face Optimum's ONNX export, run with ONNX Runtime, decoded
//! with beam search that reproduces transformers' `generate`.
//!
//! ```no_run
//! use paraforge_nmt::{GenerateOptions, LoadOptions, Translator};
//! let mut t = Translator::load("models/demo-cs-en".as_ref(), &LoadOptions::default())?;
//! let out = t.translate(&["Dobrý den."], &GenerateOptions::default())?;
//! println!("{} ({})", out[0].text, out[0].score);
//! # Ok::<(), paraforge_nmt::NmtError>(())
//! ```

mod beam_gather;
mod cache;
mod config;
mod cross_attention;
mod decode;
mod engine;
mod error;
mod fastmath;
mod gpu_memory;
mod onnx_graph;
mod ops;
mod processors;
mod rewrites;
mod runtime;
mod search;
mod self_attention;
mod spm;
mod streams;
mod tokenizer;
mod top_k;

use std::path::{Path, PathBuf};

pub use config::{EarlyStopping, GenerationDefaults, ModelConfig};
pub use engine::Profile;
pub use error::NmtError;
pub use runtime::{
    check_device, session as onnx_session, DecoderLayout, Device, LoadOptions, TopKOn,
    CHECKSUM_FILE,
};
pub use spm::SentencePiece;
pub use tokenizer::MarianTokenizer;

use engine::Graphs;
use search::Settings;

/// Decoding options; `None` takes the model's `generation_config.json`
/// value (and transformers' default where that has none).
#[derive(Debug, Clone)]
pub struct GenerateOptions {
    pub num_beams: usize,
    /// Maximum decoder length, counting the start token (transformers' `max_length`).
    pub max_length: Option<usize>,
    /// Maximum number of generated tokens; overrides `max_length`.
    pub max_new_tokens: Option<usize>,
    pub min_length: Option<usize>,
    pub min_new_tokens: Option<usize>,
    pub length_penalty: Option<f32>,
    /// transformers' `no_repeat_ngram_size`: no n-gram of this size twice
    /// in a hypothesis (0: off).
    pub no_repeat_ngram_size: Option<usize>,
    /// transformers' `repetition_penalty`: a token already in the
    /// hypothesis has its score multiplied (if negative) or divided (if
    /// positive) by this (1.0: off).
    pub repetition_penalty: Option<f32>,
    pub early_stopping: Option<EarlyStopping>,
    /// How many finished hypotheses to return per sentence (at most num_beams).
    pub nbest: usize,
    /// Sentences per batch (batches are cut from length-sorted input).
    pub batch_size: usize,
    /// With `Some(t)`, batches are cut by tokens instead (CTranslate2's
    /// `batch_type = "tokens"`, Marian's mini-batch-words): a batch holds
    /// as many length-sorted sentences as fit in t padded source tokens
    /// (sentences x the longest one), at least one and at most
    /// `batch_size`. Short sentences then travel in large batches and long
    /// ones in small, so a batch's memory is bounded by t, not by its
    /// longest sentence.
    pub batch_tokens: Option<usize>,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            num_beams: 12,
            max_length: None,
            max_new_tokens: None,
            min_length: None,
            min_new_tokens: None,
            length_penalty: None,
            no_repeat_ngram_size: None,
            repetition_penalty: None,
            early_stopping: None,
            nbest: 1,
            batch_size: 16,
            batch_tokens: None,
        }
    }
}

/// One hypothesis: detokenized text, generated ids (eos included when it
/// was generated) and the translation score (sum of token log-probabilities
/// over length^length_penalty, transformers' `sequences_scores`).
#[derive(Debug, Clone, PartialEq)]
pub struct Hypothesis {
    pub text: String,
    pub tokens: Vec<u32>,
    pub score: f32,
}

/// Why a sentence's output needs a second look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flag {
    /// The input was empty or whitespace only; nothing was translated.
    Empty,
    /// The input had more tokens than the model's positions; the tail was cut.
    Truncated { tokens: usize, kept: usize },
}

/// The result for one input sentence.
#[derive(Debug, Clone, PartialEq)]
pub struct Translation {
    pub text: String,
    pub tokens: Vec<u32>,
    pub score: f32,
    /// The `nbest` best hypotheses, best first (the first equals the fields above).
    pub nbest: Vec<Hypothesis>,
    pub source_tokens: usize,
    pub flag: Option<Flag>,
}

/// Sentences per batch when none is given: 16 on the CPU, 64 on CUDA.
/// On a GPU each decoder step costs about the same launches whatever its
/// rows, so rows pay, but one large batch leaves the GPU idle while the
/// host searches; several streams of batch 64 overlap the two, which was
/// the fastest of the batch sizes measured (docs/bench/HISTORY.md, "GPU").
/// Batches of long sentences are also bounded by the token budget from the
/// device's memory ([`Translator::auto_batch_tokens`]).
pub fn default_batch_size(device: &Device) -> usize {
    match device {
        Device::Cpu => 16,
        Device::Cuda(_) => 64,
    }
}

/// Decoder streams when none is given: 1 on the CPU (where `--streams` is
/// a trade of threads that depends on the machine), 4 on CUDA, where the
/// streams overlap one batch's host-side search with another's kernels
/// (four beat one, six and eight: docs/bench/HISTORY.md, "GPU"). Each
/// stream holds its own copy of the model on the device.
pub fn default_streams(device: &Device) -> usize {
    match device {
        Device::Cpu => 1,
        Device::Cuda(_) => 4,
    }
}

/// Index ranges of the batches of length-sorted sentences: `batch_size`
/// sentences each, or with a token budget as many as keep sentences x the
/// longest within it (at least one, at most `batch_size`).
pub fn batches(
    sorted_lens: &[usize],
    batch_size: usize,
    batch_tokens: Option<usize>,
) -> Vec<std::ops::Range<usize>> {
    let bs = batch_size.max(1);
    let mut out = Vec::new();
    let mut start = 0;
    while start < sorted_lens.len() {
        let mut end = (start + bs).min(sorted_lens.len());
        if let Some(budget) = batch_tokens {
            // Ascending lengths: the last sentence is the longest.
            let mut n = 1;
            while start + n < end && (n + 1) * sorted_lens[start + n] <= budget {
                n += 1;
            }
            end = start + n;
        }
        out.push(start..end);
        start = end;
    }
    out
}

/// A loaded model: tokenizer, configuration and ONNX sessions.
pub struct Translator {
    dir: PathBuf,
    tokenizer: MarianTokenizer,
    config: ModelConfig,
    defaults: GenerationDefaults,
    /// One per stream (`LoadOptions::streams`), never empty.
    graphs: Vec<Graphs>,
    /// With several streams, each one's own thread pool for the search
    /// and cache copies: on a shared pool one stream's search waits behind
    /// another's (measured with two streams: 59 sentences/s shared, 64
    /// with a pool each).
    pools: Vec<rayon::ThreadPool>,
    options: LoadOptions,
    /// On CUDA, the device's free bytes when the model had been loaded:
    /// what sizes batches when no token budget is given.
    gpu_free: Option<u64>,
}

impl std::fmt::Debug for Translator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Translator")
            .field("dir", &self.dir)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Translator {
    /// Loads a model directory in Optimum's export layout.
    pub fn load(dir: &Path, options: &LoadOptions) -> Result<Translator, NmtError> {
        if !dir.is_dir() {
            return Err(NmtError::ModelDirMissing(dir.to_path_buf()));
        }
        runtime::verify_checksums(dir)?;
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
        let config = ModelConfig::load(&need("config.json")?)?;
        let gen_path = dir.join("generation_config.json");
        let defaults = if gen_path.is_file() {
            GenerationDefaults::load(&gen_path)?
        } else {
            GenerationDefaults::default()
        };
        let tokenizer = MarianTokenizer::load(dir)?;
        let vocab = config.target_vocab_size();
        if tokenizer.max_id() as usize >= config.vocab_size {
            return Err(NmtError::VocabMismatch {
                dir: dir.to_path_buf(),
                reason: format!(
                    "vocab.json has ids up to {} but config.json has vocab_size {}",
                    tokenizer.max_id(),
                    config.vocab_size
                ),
            });
        }
        if tokenizer.eos_id() != config.eos_token_id {
            return Err(NmtError::VocabMismatch {
                dir: dir.to_path_buf(),
                reason: format!(
                    "vocab.json maps </s> to {} but config.json has eos_token_id {}",
                    tokenizer.eos_id(),
                    config.eos_token_id
                ),
            });
        }
        let streams = options.streams.max(1);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let per_stream = LoadOptions {
            threads: runtime::threads_per_stream(options.threads, streams, cores),
            ..options.clone()
        };
        let graphs = (0..streams)
            .map(|_| Graphs::load(dir, &config, &per_stream))
            .collect::<Result<Vec<_>, _>>()?;
        let pools = if graphs.len() > 1 {
            (0..graphs.len())
                .map(|i| {
                    rayon::ThreadPoolBuilder::new()
                        .num_threads(per_stream.threads.max(1))
                        .thread_name(move |t| format!("paraforge-stream-{i}.{t}"))
                        .build()
                        .map_err(|e| {
                            NmtError::inference(
                                "streams",
                                format!("starting stream {i}'s threads: {e}"),
                            )
                        })
                })
                .collect::<Result<Vec<_>, _>>()?
        } else {
            Vec::new()
        };
        // Read after the sessions took their weights, so it is what the
        // batches can have.
        let gpu_free = match options.device {
            Device::Cuda(id) => match gpu_memory::free_bytes(id) {
                Ok(b) => Some(b),
                Err(e) => {
                    tracing::warn!(device = %options.device, "free memory unknown ({e}); batches without a token budget are cut by sentences only");
                    None
                }
            },
            Device::Cpu => None,
        };
        tracing::debug!(dir = %dir.display(), vocab, device = %options.device, streams = graphs.len(), "model loaded");
        Ok(Translator {
            dir: dir.to_path_buf(),
            tokenizer,
            config,
            defaults,
            graphs,
            pools,
            options: options.clone(),
            gpu_free,
        })
    }

    /// The token budget a batch gets on CUDA when `batch_tokens` is not
    /// given: from the device's free memory at load, shared by the streams
    /// (each decodes its own batch). `None` on the CPU, where batches are
    /// cut by `batch_size` alone unless a budget is given.
    pub fn auto_batch_tokens(&self, num_beams: usize) -> Option<usize> {
        let free = self.gpu_free? / self.graphs.len().max(1) as u64;
        let elem = if self.graphs[0].cache_half { 2 } else { 4 };
        Some(gpu_memory::token_budget(
            free,
            num_beams,
            self.config.decoder_layers,
            self.config.d_model,
            self.config.target_vocab_size(),
            elem,
        ))
    }

    /// The device the model runs on.
    pub fn device(&self) -> &Device {
        &self.options.device
    }

    pub fn tokenizer(&self) -> &MarianTokenizer {
        &self.tokenizer
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Time spent per decoding stage since the model was loaded or
    /// [`Translator::reset_profile`] (summed over streams, so with several
    /// it exceeds the wall time).
    pub fn profile(&self) -> Profile {
        let mut p = Profile::default();
        for g in &self.graphs {
            p += g.profile;
        }
        p
    }

    /// Starts `profile` from zero again (after a warm-up run, say).
    pub fn reset_profile(&mut self) {
        for g in &mut self.graphs {
            g.profile = Profile::default();
        }
    }

    /// Whether the decoder attends to the source once per sentence (its
    /// graph was rewritten at load; see `LoadOptions::cross_attention_per_beam`).
    pub fn cross_attention_per_sentence(&self) -> bool {
        self.graphs[0].rewrites.cross_per_sentence
    }

    /// Whether the decoder call reorders the self-attention cache by beam
    /// parent itself (its graph was rewritten at load; see
    /// `LoadOptions::reorder_in_engine`).
    pub fn reorders_in_graph(&self) -> bool {
        self.graphs[0].rewrites.beam_gather
    }

    /// How the decoder attends over its own cache: `(one operator per
    /// layer, fused with the reorder)` (see
    /// `LoadOptions::unfused_self_attention`).
    pub fn self_attention_ops(&self) -> (bool, bool) {
        let r = self.graphs[0].rewrites;
        (r.attend, r.gather_attend)
    }

    /// Whether the self-attention cache is never copied: each step's new
    /// rows stay where they were written and the decoder reads each row's
    /// by slot (`self_attention::with_history`).
    pub fn reads_cache_in_place(&self) -> bool {
        self.graphs[0].rewrites.history
    }

    /// Whether the decoder graphs return each row's best candidates
    /// instead of its logits (see `LoadOptions::top_k_on`): true only where
    /// every decoder graph in use took the rewrite.
    pub fn top_k_in_graph(&self) -> bool {
        let r = self.graphs[0].rewrites;
        r.top_k_first && r.top_k
    }

    /// The ONNX files in use, for checksums and provenance.
    pub fn model_files(&self) -> &[PathBuf] {
        &self.graphs[0].files
    }

    /// Longest source (in tokens, eos included) the encoder accepts.
    pub fn max_source_tokens(&self) -> usize {
        self.config.max_position_embeddings
    }

    fn settings(&self, o: &GenerateOptions) -> Result<Settings, NmtError> {
        let d = &self.defaults;
        if o.num_beams == 0 {
            return Err(NmtError::BadOption {
                option: "num_beams",
                reason: "must be at least 1".into(),
            });
        }
        // Past the vocabulary the first step has fewer tokens than beams to fill.
        let vocab = self.config.target_vocab_size();
        if o.num_beams > vocab {
            return Err(NmtError::BeamExceedsVocabulary {
                dir: self.dir.clone(),
                beam: o.num_beams,
                vocab,
            });
        }
        if o.nbest == 0 || o.nbest > o.num_beams {
            return Err(NmtError::BadOption {
                option: "nbest",
                reason: format!("must be between 1 and num_beams ({})", o.num_beams),
            });
        }
        let positions = self.config.max_position_embeddings;
        let mut max_length = match (o.max_new_tokens, o.max_length) {
            (Some(n), _) => n + 1,
            (None, Some(m)) => m,
            (None, None) => d.max_length.unwrap_or(20),
        };
        if max_length < 2 {
            return Err(NmtError::BadOption {
                option: "max_length",
                reason: "must allow at least one generated token".into(),
            });
        }
        if max_length > positions {
            tracing::warn!(
                max_length,
                positions,
                "max_length exceeds the model's positions; clamped"
            );
            max_length = positions;
        }
        let min_length = match (o.min_new_tokens, o.min_length) {
            (Some(n), _) => n + 1,
            (None, Some(m)) => m,
            (None, None) => d.min_length.unwrap_or(0),
        };
        let repetition_penalty = o.repetition_penalty.or(d.repetition_penalty).unwrap_or(1.0);
        if !(repetition_penalty.is_finite() && repetition_penalty > 0.0) {
            return Err(NmtError::BadOption {
                option: "repetition_penalty",
                reason: format!("{repetition_penalty}: must be a positive number (1.0: off)"),
            });
        }
        let banned = d
            .bad_words_ids
            .iter()
            .flatten()
            .map(|w| w[0])
            .filter(|&id| (id as usize) < self.config.target_vocab_size())
            .collect();
        Ok(Settings {
            num_beams: o.num_beams,
            max_length,
            min_length,
            length_penalty: o.length_penalty.or(d.length_penalty).unwrap_or(1.0),
            no_repeat_ngram_size: o
                .no_repeat_ngram_size
                .or(d.no_repeat_ngram_size)
                .unwrap_or(0),
            repetition_penalty,
            early_stopping: o.early_stopping.unwrap_or_else(|| d.early_stopping()),
            eos_id: self.config.eos_token_id,
            banned_ids: banned,
            forced_bos_id: d.forced_bos_token_id,
            forced_eos_id: d.forced_eos_token_id.or(self.config.forced_eos_token_id),
            nbest: o.nbest,
        })
    }

    /// Translates sentences; results come back in input order. Batches are
    /// cut from the inputs sorted by token length so that little padding
    /// is computed.
    pub fn translate<S: AsRef<str>>(
        &mut self,
        sentences: &[S],
        o: &GenerateOptions,
    ) -> Result<Vec<Translation>, NmtError> {
        self.translate_with_progress(sentences, o, |_| {})
    }

    /// As [`Translator::translate`], calling `progress(n)` after each batch
    /// of `n` sentences.
    pub fn translate_with_progress<S: AsRef<str>>(
        &mut self,
        sentences: &[S],
        o: &GenerateOptions,
        mut progress: impl FnMut(usize),
    ) -> Result<Vec<Translation>, NmtError> {
        let settings = self.settings(o)?;
        let max_src = self.max_source_tokens();
        let mut out: Vec<Option<Translation>> = vec![None; sentences.len()];
        let mut encoded: Vec<(usize, Vec<u32>, Option<Flag>)> = Vec::with_capacity(sentences.len());
        for (i, s) in sentences.iter().enumerate() {
            let s = s.as_ref();
            if s.trim().is_empty() {
                out[i] = Some(Translation {
                    text: String::new(),
                    tokens: Vec::new(),
                    score: f32::NAN,
                    nbest: Vec::new(),
                    source_tokens: 0,
                    flag: Some(Flag::Empty),
                });
                continue;
            }
            let mut ids = self.tokenizer.encode(s);
            let mut flag = None;
            if ids.len() > max_src {
                // As transformers' truncation: keep the head, end with eos.
                flag = Some(Flag::Truncated {
                    tokens: ids.len(),
                    kept: max_src,
                });
                ids.truncate(max_src - 1);
                ids.push(self.tokenizer.eos_id());
            }
            encoded.push((i, ids, flag));
        }
        encoded.sort_by_key(|(i, ids, _)| (ids.len(), *i));
        let lens: Vec<usize> = encoded.iter().map(|(_, ids, _)| ids.len()).collect();
        let budget = o
            .batch_tokens
            .or_else(|| self.auto_batch_tokens(o.num_beams));
        let ranges = batches(&lens, o.batch_size, budget);
        let Translator {
            tokenizer,
            config,
            graphs,
            pools,
            ..
        } = self;
        let emit = |range: &std::ops::Range<usize>, finished: Vec<Vec<search::Finished>>| {
            let chunk = &encoded[range.clone()];
            for ((i, ids, flag), hyps) in chunk.iter().zip(finished) {
                let nbest: Vec<Hypothesis> = hyps
                    .into_iter()
                    .map(|h| Hypothesis {
                        text: tokenizer.decode(&h.tokens),
                        tokens: h.tokens,
                        score: h.score,
                    })
                    .collect();
                let best = nbest.first().cloned().unwrap_or(Hypothesis {
                    text: String::new(),
                    tokens: Vec::new(),
                    score: f32::NEG_INFINITY,
                });
                out[*i] = Some(Translation {
                    text: best.text,
                    tokens: best.tokens,
                    score: best.score,
                    nbest,
                    source_tokens: ids.len(),
                    flag: *flag,
                });
            }
            progress(chunk.len());
        };
        let run = |g: &mut Graphs, range: &std::ops::Range<usize>| {
            let sources: Vec<Vec<u32>> = encoded[range.clone()]
                .iter()
                .map(|(_, ids, _)| ids.clone())
                .collect();
            g.generate(
                &sources,
                config.pad_token_id,
                config.decoder_start_token_id,
                &settings,
            )
        };
        // One stream runs on this thread and the global pool; several each
        // on a thread of their own and in their own pool.
        let mut workers: Vec<_> = graphs
            .iter_mut()
            .enumerate()
            .map(|(i, g)| (g, pools.get(i)))
            .collect();
        streams::run(
            &mut workers,
            &ranges,
            |(g, pool), range| match pool {
                Some(pool) => pool.install(|| run(g, range)),
                None => run(g, range),
            },
            emit,
        )?;
        Ok(out
            .into_iter()
            .map(|t| t.expect("every input gets a result"))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::batches;

    #[test]
    fn batches_keep_to_the_budget_and_the_size() {
        let lens = [2, 3, 3, 5, 8, 8, 20, 40];
        assert_eq!(batches(&lens, 3, None), vec![0..3, 3..6, 6..8]);
        // 16 tokens: 2,3,3 padded to 3x3 = 9 (a 5 would make 4x5 = 20),
        // then 5,8 = 2x8, then 8, 20 and 40 alone (a sentence over the
        // budget still gets a batch).
        assert_eq!(
            batches(&lens, 64, Some(16)),
            vec![0..3, 3..5, 5..6, 6..7, 7..8]
        );
        assert_eq!(batches(&lens, 2, Some(1000)), vec![0..2, 2..4, 4..6, 6..8]);
        assert_eq!(batches(&lens, 64, Some(1)).len(), lens.len());
        assert!(batches(&[], 4, Some(8)).is_empty());
    }
}
