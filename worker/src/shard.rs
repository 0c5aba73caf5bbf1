//! Processing one shard: read -> translate -> score -> Parquet, as a
//! three-stage pipeline so that the model never waits. A reader thread
//! parses the bitext into chunks, the calling thread translates them, and a
//! scorer thread scores each translated chunk (rayon across cores) and
//! appends it to the Parquet writer, all joined by bounded channels: while
//! the model works on chunk k, chunk k+1 is being read and chunk k-1 scored
//! and encoded.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::time::Instant;

use paraforge_core::schema::{schema, writer_properties, PairRow, RowsBuilder};
use paraforge_core::{ArpaModel, EncoderError, Scorer, SentenceEncoder};
use paraforge_job::bitext::{
    BitextReader, Format, Range, ReadOptions, Record, Reject, RejectReason,
};
use paraforge_job::filters::PreFilter;
use paraforge_nmt::{Flag, GenerateOptions, Translator};
use parquet::arrow::ArrowWriter;
use rayon::prelude::*;
use sha2::{Digest, Sha256};

use crate::metrics::Throughput;

/// What to read.
#[derive(Debug, Clone)]
pub struct ShardInput {
    pub path: String,
    pub format: Format,
    /// `None` reads the whole file.
    pub range: Option<Range>,
    pub max_chars: usize,
    /// Lines (ascending) to drop as repeated sources (`[filters]
    /// dedup_sources`, decided by the coordinator when it planned the job).
    pub drop_lines: Vec<u64>,
}

/// Counters a heartbeat reports while the shard runs.
#[derive(Debug, Default)]
pub struct Progress {
    pub records: AtomicU64,
    pub pairs: AtomicU64,
    pub rejects: AtomicU64,
}

/// The shard's output, in memory until it is stored.
#[derive(Debug)]
pub struct ShardOutput {
    pub parquet: Vec<u8>,
    pub parquet_sha256: String,
    pub pairs: u64,
    /// One JSON object per rejected line: file, line, reason, text.
    pub rejects_jsonl: Vec<u8>,
    pub rejects: u64,
    /// Input lines the shard's range held, blank ones included: the
    /// coordinator checks them against the plan.
    pub lines: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    #[error("reading {path}: {message}")]
    Read { path: String, message: String },
    #[error(transparent)]
    Translate(#[from] paraforge_nmt::NmtError),
    #[error("writing Parquet: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),
    #[error("the shard was cancelled")]
    Cancelled,
    #[error("internal error: {0}")]
    Internal(String),
    /// A score that is not a number would be written as one (NaN sorts
    /// above every score, into the top bins and past the filters' bounds).
    #[error("pair {id} (line {line}, candidate {rank}): {column} is {value}, not a finite number ({hint}); the shard is not written")]
    NonFinite {
        id: String,
        line: u64,
        rank: i32,
        column: &'static str,
        value: f32,
        hint: &'static str,
    },
}

impl ShardError {
    /// Whether another attempt could succeed (a corrupt input will not,
    /// nor the same models on the same pair).
    pub fn retryable(&self) -> bool {
        !matches!(self, ShardError::Read { .. } | ShardError::NonFinite { .. })
    }
}

/// The first score of `row` that is not a finite number, as (column, value,
/// what to look at).
fn non_finite_score(row: &PairRow) -> Option<(&'static str, f32, &'static str)> {
    let s = &row.scores;
    let model = "the para_score model's weights or embeddings";
    [
        (
            "translation_score",
            row.translation_score,
            "the translation model",
        ),
        ("para_score", s.para_score, model),
        ("unigram_overlap", Some(s.unigram_overlap), "the scorer"),
        ("bigram_overlap", Some(s.bigram_overlap), "the scorer"),
        ("trigram_overlap", Some(s.trigram_overlap), "the scorer"),
        ("sentence_bleu", Some(s.sentence_bleu), "the scorer"),
        (
            "translation_perplexity",
            s.translation_perplexity,
            "the language model, e.g. one without <unk>",
        ),
        (
            "reference_probability",
            s.reference_probability,
            "the classifier",
        ),
    ]
    .into_iter()
    .find_map(|(column, v, hint)| v.filter(|x| !x.is_finite()).map(|x| (column, x, hint)))
}

/// Pairs per chunk passed between the stages.
const CHUNK: usize = 256;

/// One line of `_rejects/`: where, why (`code` is what the coordinator
/// counts by reason), and the text.
fn reject_json(r: &Reject) -> String {
    serde_json::json!({"file": r.file, "line": r.line, "code": r.reason.code(), "reason": r.reason.to_string(), "text": r.text}).to_string()
}

/// A pair `[filters]` dropped, as a reject: the text is the two sides
/// joined by a tab, at most 1 KB.
fn filtered(path: &str, p: &paraforge_job::bitext::Pair, reason: RejectReason) -> Reject {
    let mut text = format!("{}\t{}", p.source, p.reference);
    if text.len() > 1024 {
        let mut end = 1024;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    Reject {
        file: path.to_string(),
        line: p.line,
        reason,
        text,
    }
}

/// The para_score encoder `[scoring]` names (a trained model or word
/// vectors), loaded once per worker; `None` when it names neither.
pub fn load_para_encoder(
    s: &paraforge_job::config::Scoring,
) -> Result<Option<Box<dyn SentenceEncoder>>, EncoderError> {
    let e = paraforge_scorer::load_encoder(
        s.model.as_deref().map(Path::new),
        s.vectors.as_deref().map(Path::new),
    )?;
    if let Some(e) = &e {
        tracing::info!(scorer = %e.describe(), "para_score model loaded");
    }
    Ok(e)
}

/// The language model `[scoring] lm` names, loaded once per worker;
/// errors name the key.
pub fn load_lm(s: &paraforge_job::config::Scoring) -> Result<Option<ArpaModel>, String> {
    let Some(path) = &s.lm else {
        return Ok(None);
    };
    // Local or object store, as every input is read.
    let text = paraforge_job::bitext::open_text(Path::new(path))
        .map_err(|e| format!("scoring.lm: {e}"))?;
    let m = ArpaModel::read(text, Path::new(path)).map_err(|e| format!("scoring.lm: {e}"))?;
    tracing::info!(lm = %path, order = m.order(), "language model loaded");
    Ok(Some(m))
}

/// What scores a shard's pairs besides the n-gram overlaps: the para_score
/// encoder, the language model for translation_perplexity and which
/// sentence BLEU.
#[derive(Clone, Copy, Default)]
pub struct Scorers<'a> {
    pub encoder: Option<&'a dyn SentenceEncoder>,
    pub lm: Option<&'a ArpaModel>,
    pub bleu: paraforge_core::bleu::Smoothing,
}

/// What a worker holds for every shard it runs, built once: the
/// pre-translation filters, the scorers, and the running totals of the
/// model's work that the worker reports.
#[derive(Clone, Copy)]
pub struct Stages<'a> {
    pub filters: &'a PreFilter,
    pub scorers: Scorers<'a>,
    pub throughput: &'a Throughput,
}

/// What the translate stage hands the scorer for a chunk of pairs.
enum Translated {
    /// The model's, one per pair.
    ByModel(Vec<paraforge_nmt::Translation>),
    /// The input held them (`Pair::given`).
    Given,
}

type Pair = paraforge_job::bitext::Pair;
/// A chunk of the reader's records: pairs to translate, lines rejected.
type Chunk = (Vec<Pair>, Vec<Reject>);

/// Runs one shard. `translator` is none for an input of pairs translated
/// already. `cancel` is polled between chunks.
pub fn process(
    input: &ShardInput,
    translator: Option<&mut Translator>,
    opts: &GenerateOptions,
    stages: Stages<'_>,
    metadata: &[(&str, String)],
    progress: &Progress,
    cancel: &(dyn Fn() -> bool + Sync),
) -> Result<ShardOutput, ShardError> {
    let read_opts = ReadOptions {
        max_chars: input.max_chars,
        range: input.range,
    };
    let reader = BitextReader::open(Path::new(&input.path), input.format.clone(), read_opts)
        .map_err(|e| ShardError::Read {
            path: input.path.clone(),
            message: e.to_string(),
        })?;
    let (to_translate, from_reader) = sync_channel::<Result<Chunk, ShardError>>(2);
    let (to_score, from_translator) = sync_channel::<(Vec<Pair>, Translated)>(2);
    // An input of pairs holds one translation a pair.
    let k = if translator.is_some() {
        opts.nbest.max(1)
    } else {
        1
    };
    std::thread::scope(|scope| {
        let read = scope.spawn(|| {
            read_stage(
                reader,
                &input.path,
                &input.drop_lines,
                stages.filters,
                to_translate,
            )
        });
        let write = scope.spawn(|| score_stage(from_translator, stages.scorers, metadata, k));
        let translator = TranslateStage {
            translator,
            opts,
            throughput: stages.throughput,
            progress,
            cancel,
        };
        let (rejects_jsonl, rejects, failure) = translator.run(from_reader, to_score);
        let written = write
            .join()
            .unwrap_or_else(|_| Err(ShardError::Internal("the scoring thread panicked".into())));
        // A reader that panicked closed its channel as if the input had
        // ended: the shard would look complete with the rest of its lines lost.
        let lines = read
            .join()
            .map_err(|_| ShardError::Internal("the reading thread panicked".into()));
        if let Some(e) = failure {
            return Err(e);
        }
        let (parquet, pairs) = written?;
        let lines = lines?.ok_or_else(|| {
            ShardError::Internal("the reading thread stopped before the end of the shard".into())
        })?;
        let sha = hex::encode(Sha256::digest(&parquet));
        Ok(ShardOutput {
            parquet,
            parquet_sha256: sha,
            pairs,
            rejects_jsonl,
            rejects,
            lines,
        })
    })
}

/// Stage 1: reads the shard's records into chunks of pairs that pass the
/// pre-translation filters and the lines rejected. Returns the lines read,
/// or `None` when it stopped early (an error sent on, or nobody listening).
fn read_stage(
    mut reader: BitextReader,
    path: &str,
    drop_lines: &[u64],
    filters: &PreFilter,
    to_translate: SyncSender<Result<Chunk, ShardError>>,
) -> Option<u64> {
    let mut pairs = Vec::with_capacity(CHUNK);
    let mut rejects = Vec::new();
    // Ids should name one pair each; a repeated id usually means an input
    // concatenated twice or ids cut by a wrong column. Kept (the pair
    // itself may be fine) but said, once per id. Only within a shard: a
    // whole-job check would hold every id.
    let mut seen: std::collections::HashMap<String, u64> = Default::default();
    let mut repeated = 0u64;
    for rec in reader.by_ref() {
        match rec {
            Ok(Record::Pair(p)) => match drop_lines
                .binary_search(&p.line)
                .is_ok()
                .then_some(RejectReason::Duplicate)
                .or_else(|| filters.check(p.source_side(), &p.reference))
            {
                Some(reason) => rejects.push(filtered(path, &p, reason)),
                None => {
                    if !p.id.is_empty() {
                        if let Some(first) = seen.insert(p.id.clone(), p.line) {
                            repeated += 1;
                            if repeated <= 10 {
                                tracing::warn!(path = %path, id = %p.id, line = p.line, first_line = first, "a pair id appears twice in one shard");
                            }
                        }
                    }
                    pairs.push(p)
                }
            },
            Ok(Record::Reject(r)) => rejects.push(r),
            Err(e) => {
                let _ = to_translate.send(Err(ShardError::Read {
                    path: path.to_string(),
                    message: e.to_string(),
                }));
                return None;
            }
        }
        // Rejects flush too: a shard that is all junk stays bounded.
        if pairs.len() == CHUNK || rejects.len() == CHUNK {
            let chunk = (
                std::mem::replace(&mut pairs, Vec::with_capacity(CHUNK)),
                std::mem::take(&mut rejects),
            );
            if to_translate.send(Ok(chunk)).is_err() {
                return None;
            }
        }
    }
    if repeated > 10 {
        tracing::warn!(path = %path, repeated, "pair ids repeated in this shard (first 10 shown)");
    }
    let _ = to_translate.send(Ok((pairs, rejects)));
    Some(reader.lines_read())
}

/// Stage 2, on the calling thread: translates each chunk (or passes on the
/// translations an input of pairs holds) and counts the rejects.
struct TranslateStage<'a, 't> {
    translator: Option<&'t mut Translator>,
    opts: &'a GenerateOptions,
    throughput: &'a Throughput,
    progress: &'a Progress,
    cancel: &'a (dyn Fn() -> bool + Sync),
}

impl TranslateStage<'_, '_> {
    /// The rejects as JSON lines, their count, and why it stopped early.
    fn run(
        mut self,
        from_reader: Receiver<Result<Chunk, ShardError>>,
        to_score: SyncSender<(Vec<Pair>, Translated)>,
    ) -> (Vec<u8>, u64, Option<ShardError>) {
        let progress = self.progress;
        let mut rejects_jsonl = Vec::new();
        let mut rejects = 0u64;
        for chunk in from_reader {
            let (pairs, rej) = match chunk {
                Ok(c) => c,
                Err(e) => return (rejects_jsonl, rejects, Some(e)),
            };
            if (self.cancel)() {
                return (rejects_jsonl, rejects, Some(ShardError::Cancelled));
            }
            for r in &rej {
                rejects_jsonl.extend_from_slice(reject_json(r).as_bytes());
                rejects_jsonl.push(b'\n');
            }
            rejects += rej.len() as u64;
            progress
                .rejects
                .fetch_add(rej.len() as u64, Ordering::Relaxed);
            progress
                .records
                .fetch_add((pairs.len() + rej.len()) as u64, Ordering::Relaxed);
            if pairs.is_empty() {
                continue;
            }
            let translated = match self.translate(&pairs) {
                Ok(t) => t,
                Err(e) => return (rejects_jsonl, rejects, Some(e)),
            };
            progress
                .pairs
                .fetch_add(pairs.len() as u64, Ordering::Relaxed);
            if to_score.send((pairs, translated)).is_err() {
                break;
            }
        }
        (rejects_jsonl, rejects, None)
    }

    fn translate(&mut self, pairs: &[Pair]) -> Result<Translated, ShardError> {
        let Some(translator) = self.translator.as_deref_mut() else {
            // An input of pairs: every pair holds its translation.
            return Ok(Translated::Given);
        };
        let sources: Vec<&str> = pairs.iter().map(|p| p.source.as_str()).collect();
        // A batch's time runs from the one before it, so the first also
        // carries the chunk's tokenizing: small beside decoding, and what
        // the time between batches really is.
        let throughput = self.throughput;
        let mut last = Instant::now();
        let batch = |n: usize| {
            let now = Instant::now();
            throughput.batch(n, now - last);
            last = now;
        };
        let t = translator.translate_with_progress(&sources, self.opts, batch)?;
        let (src, out) = t.iter().fold((0u64, 0u64), |(s, o), t| {
            (s + t.source_tokens as u64, o + t.tokens.len() as u64)
        });
        throughput.tokens(src, out);
        Ok(Translated::ByModel(t))
    }
}

/// Stage 3: scores each translated chunk (rayon across cores), checks it
/// and appends it to the Parquet file. Returns the file's bytes and rows.
fn score_stage(
    from_translator: Receiver<(Vec<Pair>, Translated)>,
    scorers: Scorers<'_>,
    metadata: &[(&str, String)],
    k: usize,
) -> Result<(Vec<u8>, u64), ShardError> {
    let failed_before = scorers.encoder.map_or(0, |e| e.failures());
    let props = writer_properties(metadata);
    let mut w = ArrowWriter::try_new(Vec::new(), schema(), Some(props))?;
    let mut rows = 0u64;
    for (pairs, translations) in from_translator {
        let scored = score_chunk(&pairs, &translations, scorers, k);
        check_scored(&scored, &pairs, k, scorers, failed_before)?;
        let mut b = RowsBuilder::default();
        for r in &scored {
            b.push(r);
        }
        rows += scored.len() as u64;
        w.write(&b.finish())?;
    }
    Ok((w.into_inner()?, rows))
}

/// Each pair's rows: one per hypothesis kept (`k`), or its given translation.
fn score_chunk(
    pairs: &[Pair],
    translations: &Translated,
    scorers: Scorers<'_>,
    k: usize,
) -> Vec<PairRow> {
    let scorer = || {
        Scorer::new(scorers.encoder)
            .with_lm(scorers.lm)
            .with_bleu(scorers.bleu)
    };
    match translations {
        Translated::ByModel(ts) => pairs
            .par_iter()
            .zip(ts.par_iter())
            .map_init(scorer, |scorer, (p, t)| {
                candidates(t, k)
                    .enumerate()
                    .map(|(rank, (text, score))| PairRow {
                        id: p.id.clone(),
                        source: p.source.clone(),
                        reference: p.reference.clone(),
                        translation: text.to_string(),
                        candidate_rank: rank as i32 + 1,
                        translation_score: Some(score),
                        source_len: Some(t.source_tokens as i32),
                        truncated: matches!(t.flag, Some(Flag::Truncated { .. })),
                        scores: scorer.score(&p.reference, text),
                    })
                    .collect::<Vec<_>>()
            })
            .flatten()
            .collect(),
        Translated::Given => pairs
            .par_iter()
            .filter_map(|p| p.given.as_ref().map(|g| (p, g)))
            .map_init(scorer, |scorer, (p, g)| PairRow {
                id: p.id.clone(),
                source: p.source.clone(),
                reference: p.reference.clone(),
                translation: g.translation.clone(),
                candidate_rank: 1,
                translation_score: g.score,
                source_len: None,
                truncated: false,
                scores: scorer.score(&p.reference, &g.translation),
            })
            .collect(),
    }
}

/// A chunk's rows before they are written: one per pair and hypothesis,
/// every para_score computed, every score finite.
fn check_scored(
    scored: &[PairRow],
    pairs: &[Pair],
    k: usize,
    scorers: Scorers<'_>,
    failed_before: u64,
) -> Result<(), ShardError> {
    // The coordinator derives pairs from rows / k, so a pair with fewer
    // hypotheses would be miscounted, never skipped.
    if scored.len() != pairs.len() * k {
        return Err(ShardError::Internal(format!(
            "{} rows for {} pairs at {k} hypotheses a pair: the beam returned fewer than asked, or a pair lacks its translation",
            scored.len(),
            pairs.len()
        )));
    }
    // A para_score the encoder failed to compute is not a null score: the
    // shard fails (and is retried) instead.
    let failed = scorers.encoder.map_or(0, |e| e.failures()) - failed_before;
    if failed > 0 {
        return Err(ShardError::Internal(format!(
            "the para_score encoder failed on {failed} sentences (see the log)"
        )));
    }
    for (i, r) in scored.iter().enumerate() {
        if let Some((column, value, hint)) = non_finite_score(r) {
            return Err(ShardError::NonFinite {
                id: r.id.clone(),
                line: pairs[i / k].line,
                rank: r.candidate_rank,
                column,
                value,
                hint,
            });
        }
    }
    Ok(())
}

/// The `k` best hypotheses of a translation as (text, score), best first.
fn candidates(t: &paraforge_nmt::Translation, k: usize) -> impl Iterator<Item = (&str, f32)> {
    let best = std::iter::once((t.text.as_str(), t.score));
    // An empty input has no hypotheses; it keeps its one (empty) row.
    let ranked: Vec<(&str, f32)> = if t.nbest.is_empty() {
        best.collect()
    } else {
        t.nbest
            .iter()
            .take(k)
            .map(|h| (h.text.as_str(), h.score))
            .collect()
    };
    ranked.into_iter()
}

/// Shared cancellation flag for a shard.
pub type CancelFlag = Arc<std::sync::atomic::AtomicBool>;

#[cfg(test)]
mod tests {
    use std::path::Path;

    use paraforge_core::encoder::{Coverage, Scratch};
    use paraforge_core::Tokens;
    use paraforge_job::filters::{Filters, PreFilter};
    use paraforge_nmt::LoadOptions;

    use super::*;

    /// An encoder whose every embedding is NaN (weights that overflowed).
    struct NanEncoder;

    impl SentenceEncoder for NanEncoder {
        fn dim(&self) -> usize {
            2
        }
        fn embed_tokens(&self, _: &Tokens, _: &mut Scratch, out: &mut [f32]) -> Coverage {
            out.fill(f32::NAN);
            Coverage {
                known: 1,
                unknown: 0,
            }
        }
        fn describe(&self) -> String {
            "NaN".into()
        }
    }

    /// A para_score that is not a number fails the shard, naming the
    /// column and the pair, instead of being written.
    #[test]
    fn a_score_that_is_not_finite_fails_the_shard() {
        let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
        let dir = tempfile::tempdir().unwrap();
        let text =
            std::fs::read_to_string(root.join("data/sample/czeng16-heldout.cs-en.tsv")).unwrap();
        let input = dir.path().join("in.tsv");
        std::fs::write(&input, text.lines().take(3).collect::<Vec<_>>().join("\n")).unwrap();
        let mut t =
            Translator::load(&root.join("models/tiny-cs-en"), &LoadOptions::default()).unwrap();
        let shard = ShardInput {
            path: input.display().to_string(),
            format: Format::Czeng16,
            range: None,
            max_chars: 1000,
            drop_lines: Vec::new(),
        };
        let o = GenerateOptions {
            num_beams: 1,
            max_new_tokens: Some(8),
            ..GenerateOptions::default()
        };
        let e = process(
            &shard,
            Some(&mut t),
            &o,
            Stages {
                filters: &PreFilter::new(&Filters::default()).unwrap(),
                scorers: Scorers {
                    encoder: Some(&NanEncoder),
                    lm: None,
                    bleu: Default::default(),
                },
                throughput: &Throughput::default(),
            },
            &[],
            &Progress::default(),
            &|| false,
        )
        .map(|_| ())
        .unwrap_err();
        let id = text.lines().next().unwrap().split('\t').next().unwrap();
        let msg = e.to_string();
        assert!(msg.contains("para_score") && msg.contains(id), "{msg}");
        assert!(!e.retryable(), "the same model scores NaN again: {msg}");
    }
}
