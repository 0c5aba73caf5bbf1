//! A MarianMT export's ONNX graphs as the decoding loop's model
//! (`OnnxStep`, a `decode::StepDecoder`); the runtime and sessions are
//! `runtime.rs`, the rewrites the decoder graphs take at load
//! `rewrites.rs`, the caches and their buffers `cache.rs`, the loop
//! `decode.rs`.
//!
//! Per batch: the encoder runs once; the first decoder call runs one row per
//! sentence (all beams are identical then) and yields the cross-attention
//! keys/values, which every later step reuses unchanged: at one row per
//! sentence where the decoder-with-past graph was rewritten to attend once
//! per sentence (`cross_attention.rs`), else expanded once to `num_beams`
//! rows. Later steps feed only the last token and the self-attention cache
//! (never the whole prefix). The cache is reordered by beam parent inside
//! the next call where the graph was rewritten for it (`beam_gather.rs`: the
//! last call's `present` goes back in as it is, with each row's parent),
//! else here, a copy that is skipped when the order did not change. A
//! sentence that is done
//! leaves the batch (the last live sentence takes its place), shrinking
//! every later call.

use std::borrow::Cow;
use std::path::PathBuf;

use crate::cache::{BufferPool, Cache, SelfHistory};
use crate::decode::{decode, DecodeScratch, Rows, StepDecoder, StepOutput};
use crate::error::NmtError;
use crate::onnx_graph;
use crate::rewrites::Rewrites;
use crate::search::{Finished, Settings};
use ort::memory::MemoryInfo;
use ort::session::{Session, SessionInputValue};
use ort::value::{DynValue, Tensor};

mod load;

enum Decoder {
    /// `decoder_model.onnx` for the first step, `decoder_with_past_model.onnx` after.
    Split { first: Session, with_past: Session },
    /// `decoder_model_merged.onnx`, switching on `use_cache_branch`.
    Merged(Session),
}

/// Where decoding time goes, summed over calls (see `Translator::profile`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Profile {
    pub encoder_s: f64,
    pub decoder_s: f64,
    /// log-softmax, top-k and beam bookkeeping.
    pub search_s: f64,
    /// Reordering and shrinking the KV caches (both kinds) outside the
    /// decoder call; a self-attention reorder inside it (`beam_gather.rs`)
    /// counts in `decoder_s`.
    pub cache_s: f64,
    /// The part of `cache_s` spent on the cross-attention cache (expanding
    /// it to beams, dropping the rows of finished sentences).
    pub cross_cache_s: f64,
    pub decoder_calls: u64,
    pub decoder_rows: u64,
}

impl std::ops::AddAssign for Profile {
    fn add_assign(&mut self, o: Profile) {
        self.encoder_s += o.encoder_s;
        self.decoder_s += o.decoder_s;
        self.search_s += o.search_s;
        self.cache_s += o.cache_s;
        self.cross_cache_s += o.cross_cache_s;
        self.decoder_calls += o.decoder_calls;
        self.decoder_rows += o.decoder_rows;
    }
}

/// The device-resident path: where caches live, and the graph that
/// reorders them there.
struct DeviceIo {
    /// Memory the caches are bound to (the execution provider's device).
    cache_mem: MemoryInfo<'static>,
    /// Host memory for the logits, which the search reads.
    host_mem: MemoryInfo<'static>,
    gather: Session,
}

/// Loaded ONNX graphs plus the names and sizes needed to call them.
pub(crate) struct Graphs {
    /// The decoder keeps its cache in fp16 (an fp16 export for CUDA).
    pub(crate) cache_half: bool,
    device_io: Option<DeviceIo>,
    pub(crate) profile: Profile,
    /// The search's buffers, reused across batches.
    scratch: DecodeScratch,
    /// Cache buffers of finished batches, reused by the next one: fresh
    /// ones would be faulted in page by page at every batch.
    pool: BufferPool,
    /// What the decoder graphs were rewritten to do at load.
    pub(crate) rewrites: Rewrites,
    encoder: Session,
    decoder: Decoder,
    layers: usize,
    heads: usize,
    head_dim: usize,
    vocab: usize,
    pub(crate) files: Vec<PathBuf>,
}

impl Graphs {
    fn run<'s>(
        session: &'s mut Session,
        stage: &'static str,
        inputs: Vec<(Cow<'static, str>, SessionInputValue<'_>)>,
    ) -> Result<ort::session::SessionOutputs<'s>, NmtError> {
        session
            .run(inputs)
            .map_err(|e| NmtError::inference(stage, e))
    }
}

/// The element type of the decoder's cache: fp16 where an export keeps
/// the cache in half precision (`marian_model.py export --fp16`), so that
/// the on-device reorder gathers it as it is instead of casting each step.
fn cache_elem(decoder: &Decoder) -> onnx_graph::onnx::tensor_proto::DataType {
    use onnx_graph::onnx::tensor_proto::DataType;
    let past = match decoder {
        Decoder::Split { with_past, .. } => with_past,
        Decoder::Merged(m) => m,
    };
    let half = past
        .inputs()
        .iter()
        .find(|i| i.name() == "past_key_values.0.decoder.key")
        .and_then(|i| i.dtype().tensor_type())
        == Some(ort::value::TensorElementType::Float16);
    if half {
        DataType::Float16
    } else {
        DataType::Float
    }
}

/// Runs a graph and returns its outputs by name. With `io`, the run uses
/// I/O binding: outputs named in `on_device` stay in the device's memory,
/// the rest (the logits) come back to the host.
fn run_step(
    session: &mut Session,
    io: Option<(&MemoryInfo<'static>, &MemoryInfo<'static>)>,
    stage: &'static str,
    inputs: Vec<(Cow<'static, str>, SessionInputValue<'_>)>,
    on_device: &dyn Fn(&str) -> bool,
) -> Result<std::collections::HashMap<String, DynValue>, NmtError> {
    let names: Vec<String> = session
        .outputs()
        .iter()
        .map(|o| o.name().to_string())
        .collect();
    let err = |e: ort::Error| NmtError::inference(stage, e);
    let mut map = std::collections::HashMap::with_capacity(names.len());
    match io {
        None => {
            let mut out = Graphs::run(session, stage, inputs)?;
            for n in names {
                if let Some(v) = out.remove(&n) {
                    map.insert(n, v);
                }
            }
        }
        Some((cache_mem, host_mem)) => {
            let mut binding = session.create_binding().map_err(err)?;
            for (name, v) in &inputs {
                let value: &DynValue = match v {
                    SessionInputValue::View(v) => v,
                    SessionInputValue::ViewMut(v) => v,
                    SessionInputValue::Owned(v) => v,
                };
                binding.bind_input(name.as_ref(), value).map_err(err)?;
            }
            for n in &names {
                let mem = if on_device(n) { cache_mem } else { host_mem };
                binding
                    .bind_output_to_device(n.as_str(), mem)
                    .map_err(err)?;
            }
            let mut out = session.run_binding(&binding).map_err(err)?;
            for n in names {
                if let Some(v) = out.remove(&n) {
                    map.insert(n, v);
                }
            }
        }
    }
    Ok(map)
}

fn take_out(
    map: &mut std::collections::HashMap<String, DynValue>,
    name: &str,
    stage: &'static str,
) -> Result<DynValue, NmtError> {
    map.remove(name)
        .ok_or_else(|| NmtError::inference(stage, format!("the graph has no output {name:?}")))
}

fn is_present(name: &str) -> bool {
    name.starts_with("present.")
}

fn tensor_i64(shape: [usize; 2], data: Vec<i64>) -> Result<Tensor<i64>, NmtError> {
    Tensor::from_array((shape, data)).map_err(|e| NmtError::inference("input", e))
}

fn tensor_f32(shape: Vec<usize>, data: Vec<f32>) -> Result<Tensor<f32>, NmtError> {
    Tensor::from_array((shape, data)).map_err(|e| NmtError::inference("cache", e))
}

fn take(
    outputs: &mut ort::session::SessionOutputs<'_>,
    name: &str,
    stage: &'static str,
) -> Result<DynValue, NmtError> {
    outputs
        .remove(name)
        .ok_or_else(|| NmtError::inference(stage, format!("the graph has no output {name:?}")))
}

/// One batch being decoded: its sentences, their cache and search state.
struct Batch {
    /// Rows of the last decoder call.
    rows: usize,
    /// Source length after padding.
    src_len: usize,
    /// Encoder attention mask per live sentence (unexpanded).
    masks: Vec<Vec<i64>>,
    /// Per layer: decoder self-attention key and value, (rows, h, t, d).
    self_kv: Cache,
    /// Per layer: cross-attention key and value, (rows, h, src, d).
    cross_kv: Cache,
    /// The sentence of each row of the cross-attention tensors as fed.
    cross_rows: Vec<usize>,
    /// The sentence of each row of the next decoder call.
    row_sents: Vec<usize>,
    /// Each row's parent among the last call's rows, for a decoder that
    /// reorders the self-attention cache itself (`Rewrites::beam_gather`).
    parents: Vec<i64>,
    /// The self-attention cache as every step's new rows, for a decoder
    /// that reads it by slot (`Rewrites::history`).
    history: Option<SelfHistory>,
    /// Buffers of the previous reordered cache, reused by the next reorder.
    spare: Vec<Vec<f32>>,
    /// Buffers for the cross-attention cache's expansion to beams.
    cross_spare: Vec<Vec<f32>>,
    /// The encoder mask of the rows as fed, reused across steps.
    mask: Vec<i64>,
    /// Slots to reserve in a self-attention history's buffers.
    history_slots: usize,
    /// Candidates per row a graph ending in TopK returns: enough for the
    /// search's own plus every token a step may ban.
    top_k: i64,
}

impl Graphs {
    /// Decodes one batch of encoded sentences (ids end in eos; unpadded).
    /// Returns, per sentence, its finished hypotheses best first.
    pub(crate) fn generate(
        &mut self,
        sources: &[Vec<u32>],
        pad_id: u32,
        start_id: u32,
        s: &Settings,
    ) -> Result<Vec<Vec<Finished>>, NmtError> {
        let n = sources.len();
        let src_len = sources.iter().map(Vec::len).max().unwrap_or(1).max(1);
        let mut ids = Vec::with_capacity(n * src_len);
        let mut masks = Vec::with_capacity(n);
        for src in sources {
            let mut m = vec![0i64; src_len];
            for (i, &t) in src.iter().enumerate() {
                ids.push(t as i64);
                m[i] = 1;
            }
            ids.extend(std::iter::repeat_n(pad_id as i64, src_len - src.len()));
            masks.push(m);
        }
        let flat_mask: Vec<i64> = masks.iter().flatten().copied().collect();

        let t0 = std::time::Instant::now();
        let hidden = {
            let mut out = Graphs::run(
                &mut self.encoder,
                "encoder",
                vec![
                    ("input_ids".into(), tensor_i64([n, src_len], ids)?.into()),
                    (
                        "attention_mask".into(),
                        tensor_i64([n, src_len], flat_mask.clone())?.into(),
                    ),
                ],
            )?;
            take(&mut out, "last_hidden_state", "encoder")?
        };
        self.profile.encoder_s += t0.elapsed().as_secs_f64();

        let batch = Batch {
            rows: 0,
            src_len,
            masks,
            self_kv: Cache::Ort(Vec::new()),
            cross_kv: Cache::Ort(Vec::new()),
            cross_rows: Vec::new(),
            row_sents: Vec::new(),
            parents: Vec::new(),
            history: None,
            spare: BufferPool::take(&mut self.pool.self_cache, 2 * self.layers),
            cross_spare: BufferPool::take(&mut self.pool.cross_cache, 2 * self.layers),
            mask: Vec::new(),
            // Every row of every step keeps its slot: at most sentences x
            // beams rows a step, for about as many steps as the source has
            // tokens (0.67-1.15 x sentences x beams x source tokens over the
            // benchmark's 14 batches; all within 8 more steps). Outliers
            // grow the buffers.
            history_slots: n * s.num_beams.max(1) * (src_len + 8).min(s.max_length.max(1)),
            top_k: (s.candidates_per_row() + s.most_banned()).min(self.vocab) as i64,
        };
        let mut scratch = std::mem::take(&mut self.scratch);
        let vocab = self.vocab;
        let mut step = OnnxStep {
            graphs: self,
            batch,
            first: Some((hidden, flat_mask)),
        };
        let decoded = decode(&mut step, n, start_id, s, vocab, &mut scratch);
        let mut batch = step.batch;
        // Two sets of each cache's buffers circulate (the one in use and
        // the spare a reorder writes into).
        let keep = 4 * self.layers;
        let pool = &mut self.pool;
        let history = batch.history.take().map(|h| h.kv).unwrap_or_default();
        BufferPool::put(&mut pool.history, history, keep);
        BufferPool::put(&mut pool.self_cache, batch.self_kv.take_bufs(), keep);
        BufferPool::put(&mut pool.self_cache, batch.spare, keep);
        BufferPool::put(&mut pool.cross_cache, batch.cross_kv.take_bufs(), keep);
        BufferPool::put(&mut pool.cross_cache, batch.cross_spare, keep);
        self.scratch = scratch;
        let (results, search_s) = decoded?;
        self.profile.search_s += search_s;
        Ok(results)
    }

    fn first_step(
        &mut self,
        b: &mut Batch,
        last: &[i64],
        hidden: &DynValue,
        mask: Vec<i64>,
    ) -> Result<StepOut, NmtError> {
        let t0 = std::time::Instant::now();
        let rows = last.len();
        b.rows = rows;
        let mut inputs: Vec<(Cow<'static, str>, SessionInputValue<'_>)> = vec![
            (
                "input_ids".into(),
                tensor_i64([rows, 1], last.to_vec())?.into(),
            ),
            (
                "encoder_attention_mask".into(),
                tensor_i64([rows, b.src_len], mask)?.into(),
            ),
            ("encoder_hidden_states".into(), hidden.view().into()),
        ];
        if self.rewrites.top_k_first {
            inputs.push(top_k_input(b.top_k)?);
        }
        let session = match &mut self.decoder {
            Decoder::Split { first, .. } => first,
            Decoder::Merged(m) => {
                // The cache branch is off; the past inputs must still be fed.
                for l in 0..self.layers {
                    for part in [
                        "decoder.key",
                        "decoder.value",
                        "encoder.key",
                        "encoder.value",
                    ] {
                        let dummy = tensor_f32(
                            vec![rows, self.heads, 1, self.head_dim],
                            vec![0.0; rows * self.heads * self.head_dim],
                        )?;
                        inputs.push((format!("past_key_values.{l}.{part}").into(), dummy.into()));
                    }
                }
                let flag = Tensor::from_array(([1usize], vec![false]))
                    .map_err(|e| NmtError::inference("input", e))?;
                inputs.push(("use_cache_branch".into(), flag.into()));
                m
            }
        };
        let io = self.device_io.as_ref().map(|d| (&d.cache_mem, &d.host_mem));
        let mut out = run_step(session, io, "decoder", inputs, &is_present)?;
        let logits = StepOut::take(&mut out, self.rewrites.top_k_first)?;
        let (mut self_kv, mut cross_kv) = (Vec::new(), Vec::new());
        for l in 0..self.layers {
            for part in ["key", "value"] {
                self_kv.push(take_out(
                    &mut out,
                    &format!("present.{l}.decoder.{part}"),
                    "decoder",
                )?);
                cross_kv.push(take_out(
                    &mut out,
                    &format!("present.{l}.encoder.{part}"),
                    "decoder",
                )?);
            }
        }
        if io.is_some() {
            b.self_kv = Cache::Device(self_kv);
            b.cross_kv = Cache::Device(cross_kv);
        } else if self.rewrites.history {
            // Buffers from earlier batches where the pool has them.
            let mut kv = BufferPool::take(&mut self.pool.history, self_kv.len());
            kv.resize_with(self_kv.len(), Vec::new);
            let mut h = SelfHistory {
                kv,
                slots: 0,
                table: Vec::new(),
                fed: Vec::new(),
                spare: Vec::new(),
                positions: 0,
                width: self.heads * self.head_dim,
            };
            let need = b.history_slots * h.width;
            for buf in &mut h.kv {
                // A pooled buffer too small is dropped, not grown: growing
                // reallocates and copies its whole old capacity, faulting in
                // every page of the new one (perf: 8% of a two-stream run).
                // A fresh one is faulted in only as far as it is written.
                // A quarter more, so that a slightly longer batch later
                // still finds it large enough.
                if buf.capacity() < need {
                    *buf = Vec::with_capacity(need + need / 4);
                }
            }
            h.append(&self_kv, rows)?;
            b.history = Some(h);
            b.cross_kv = Cache::Ort(cross_kv);
        } else {
            b.self_kv = Cache::Ort(self_kv);
            b.cross_kv = Cache::Ort(cross_kv);
        }
        b.cross_rows = (0..rows).collect();
        b.row_sents = (0..rows).collect();
        self.profile.decoder_s += t0.elapsed().as_secs_f64();
        self.profile.decoder_calls += 1;
        self.profile.decoder_rows += rows as u64;
        Ok(logits)
    }

    fn next_step(&mut self, b: &mut Batch, last: &[i64]) -> Result<StepOut, NmtError> {
        let t0 = std::time::Instant::now();
        let rows = last.len();
        b.rows = rows;
        if self.rewrites.cross_per_sentence {
            check_grouped(b, rows)?;
        }
        // Per-step inputs go in from buffers the batch keeps: a fresh
        // allocation of this size every step came back from the allocator
        // as freshly faulted pages (perf: 2 MB huge pages zeroed per step).
        b.mask.clear();
        for &r in &b.row_sents {
            b.mask.extend_from_slice(&b.masks[r]);
        }
        // By reference on the host path. I/O binding clones each input it
        // binds, and ort 2.0.0-rc.15's clone of a borrowed tensor locks a
        // mutex it already holds (a hang, found by the I/O-binding tests):
        // that path gets its own copy.
        let mask: SessionInputValue<'_> = if self.device_io.is_some() {
            tensor_i64([rows, b.src_len], b.mask.clone())?.into()
        } else {
            ort::value::TensorRef::from_array_view(([rows, b.src_len], &b.mask[..]))
                .map_err(|e| NmtError::inference("input", e))?
                .into()
        };
        let mut inputs: Vec<(Cow<'static, str>, SessionInputValue<'_>)> = vec![
            (
                "input_ids".into(),
                tensor_i64([rows, 1], last.to_vec())?.into(),
            ),
            ("encoder_attention_mask".into(), mask),
        ];
        if self.rewrites.beam_gather {
            if b.parents.len() != rows {
                return Err(NmtError::inference(
                    "decoder",
                    format!("{} beam parents for {rows} rows", b.parents.len()),
                ));
            }
            if !self.rewrites.history {
                let parents = Tensor::from_array(([rows], b.parents.clone()))
                    .map_err(|e| NmtError::inference("input", e))?;
                inputs.push((crate::beam_gather::PARENTS.into(), parents.into()));
            }
        }
        // Each row's slots: its parent's.
        if let Some(h) = &mut b.history {
            h.feed(&b.parents)?;
        }
        if self.rewrites.top_k {
            inputs.push(top_k_input(b.top_k)?);
        }
        if let Some(h) = &b.history {
            self.history_inputs(h, rows, &mut inputs)?;
        }
        for l in 0..self.layers {
            for (j, part) in ["key", "value"].iter().enumerate() {
                if b.history.is_none() {
                    inputs.push((
                        format!("past_key_values.{l}.decoder.{part}").into(),
                        b.self_kv.input(2 * l + j)?,
                    ));
                }
                inputs.push((
                    format!("past_key_values.{l}.encoder.{part}").into(),
                    b.cross_kv.input(2 * l + j)?,
                ));
            }
        }
        let session = match &mut self.decoder {
            Decoder::Split { with_past, .. } => with_past,
            Decoder::Merged(m) => {
                let flag = Tensor::from_array(([1usize], vec![true]))
                    .map_err(|e| NmtError::inference("input", e))?;
                inputs.push(("use_cache_branch".into(), flag.into()));
                m
            }
        };
        let io = self.device_io.as_ref().map(|d| (&d.cache_mem, &d.host_mem));
        let mut out = run_step(session, io, "decoder", inputs, &is_present)?;
        let logits = StepOut::take(&mut out, self.rewrites.top_k)?;
        let mut kv = Vec::with_capacity(2 * self.layers);
        for l in 0..self.layers {
            for part in ["key", "value"] {
                kv.push(take_out(
                    &mut out,
                    &format!("present.{l}.decoder.{part}"),
                    "decoder",
                )?);
            }
        }
        drop(out);
        let on_device = io.is_some();
        self.keep_present(b, kv, rows, on_device)?;
        self.profile.decoder_s += t0.elapsed().as_secs_f64();
        self.profile.decoder_calls += 1;
        self.profile.decoder_rows += rows as u64;
        Ok(logits)
    }

    /// The self-attention history's inputs: each row's slots, each layer's
    /// keys and values, and the past placeholders read for their length.
    fn history_inputs<'h>(
        &self,
        h: &'h SelfHistory,
        rows: usize,
        inputs: &mut Vec<(Cow<'static, str>, SessionInputValue<'h>)>,
    ) -> Result<(), NmtError> {
        let t = h.positions;
        let slots = ort::value::TensorRef::from_array_view(([rows, t], &h.fed[..]))
            .map_err(|e| NmtError::inference("input", e))?;
        inputs.push((crate::self_attention::SLOTS.into(), slots.into()));
        for l in 0..self.layers {
            for (j, part) in ["key", "value"].iter().enumerate() {
                let dims = [h.slots, self.heads, self.head_dim];
                let view = ort::value::TensorRef::from_array_view((dims, &h.kv[2 * l + j][..]))
                    .map_err(|e| NmtError::inference("input", e))?;
                inputs.push((
                    crate::self_attention::history_input(l, part).into(),
                    view.into(),
                ));
                // Read for its time length only.
                let past = tensor_f32(vec![1, 1, t, 1], vec![0.0; t])?;
                inputs.push((
                    format!("past_key_values.{l}.decoder.{part}").into(),
                    past.into(),
                ));
            }
        }
        Ok(())
    }

    /// Keeps a step's `present` self-attention values: appended to the
    /// history, or as the next step's cache.
    fn keep_present(
        &mut self,
        b: &mut Batch,
        kv: Vec<DynValue>,
        rows: usize,
        on_device: bool,
    ) -> Result<(), NmtError> {
        if let Some(h) = &mut b.history {
            return h.append(&kv, rows);
        }
        // Buffers of the last engine reorder, for the next one; a cache the
        // graph reordered itself holds none, and the pooled ones are kept.
        let bufs = b.self_kv.take_bufs();
        if !bufs.is_empty() {
            b.spare = bufs;
        }
        b.self_kv = if on_device {
            Cache::Device(kv)
        } else {
            Cache::Ort(kv)
        };
        Ok(())
    }

    /// A cache holding `rows` of `cache`: on the device through the gather
    /// graph when the cache lives there, else by copying on the host.
    fn reorder(
        &mut self,
        cache: &Cache,
        rows: &[usize],
        spare: Vec<Vec<f32>>,
    ) -> Result<Cache, NmtError> {
        let (Some(values), Some(io)) = (cache.device_values(), self.device_io.as_mut()) else {
            return cache.gather(rows, spare);
        };
        let idx: Vec<i64> = rows.iter().map(|&r| r as i64).collect();
        let mut inputs: Vec<(Cow<'static, str>, SessionInputValue<'_>)> = vec![(
            onnx_graph::INDICES.into(),
            Tensor::from_array(([rows.len()], idx))
                .map_err(|e| NmtError::inference("cache", e))?
                .into(),
        )];
        for (i, v) in values.iter().enumerate() {
            inputs.push((onnx_graph::data_name(i).into(), v.view().into()));
        }
        let DeviceIo {
            gather,
            cache_mem,
            host_mem,
        } = io;
        let mut out = run_step(
            gather,
            Some((cache_mem, host_mem)),
            "cache",
            inputs,
            &|_| true,
        )?;
        let moved = (0..values.len())
            .map(|i| take_out(&mut out, &onnx_graph::out_name(i), "cache"))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Cache::Device(moved))
    }
}

/// The per-sentence graph groups rows by sentence with a reshape: every
/// live sentence must hold the same number of consecutive rows.
fn check_grouped(b: &Batch, rows: usize) -> Result<(), NmtError> {
    let per = rows / b.cross_rows.len().max(1);
    let grouped = per > 0
        && rows == per * b.cross_rows.len()
        && b.row_sents.len() == rows
        && b.row_sents
            .iter()
            .enumerate()
            .all(|(i, &s)| b.cross_rows[i / per] == s);
    if grouped {
        return Ok(());
    }
    Err(NmtError::inference(
        "decoder",
        format!(
            "{rows} rows are not {} sentences' equal, consecutive blocks",
            b.cross_rows.len()
        ),
    ))
}

fn top_k_input(k: i64) -> Result<(Cow<'static, str>, SessionInputValue<'static>), NmtError> {
    let t = Tensor::from_array(([1usize], vec![k])).map_err(|e| NmtError::inference("input", e))?;
    Ok((crate::top_k::TOP_K.into(), t.into()))
}

/// What an ONNX decoder call returns for the search.
enum StepOut {
    Logits(DynValue),
    /// Each row's best log-probabilities and their ids (`top_k.rs`).
    Top {
        logprobs: DynValue,
        ids: DynValue,
    },
}

impl StepOut {
    fn take(
        out: &mut std::collections::HashMap<String, DynValue>,
        top_k: bool,
    ) -> Result<StepOut, NmtError> {
        Ok(if top_k {
            StepOut::Top {
                logprobs: take_out(out, crate::top_k::TOP_LOGPROBS, "decoder")?,
                ids: take_out(out, crate::top_k::TOP_IDS, "decoder")?,
            }
        } else {
            StepOut::Logits(take_out(out, "logits", "decoder")?)
        })
    }
}

impl StepOutput for StepOut {
    fn rows(&self) -> Result<Rows<'_>, NmtError> {
        let err = |e: ort::Error| NmtError::inference("decoder", e);
        Ok(match self {
            StepOut::Logits(v) => {
                let (shape, data) = v.try_extract_tensor::<f32>().map_err(err)?;
                Rows::Logits {
                    data,
                    width: *shape.last().unwrap_or(&0) as usize,
                }
            }
            StepOut::Top { logprobs, ids } => {
                let (shape, logprobs) = logprobs.try_extract_tensor::<f32>().map_err(err)?;
                let (_, ids) = ids.try_extract_tensor::<i64>().map_err(err)?;
                Rows::Top {
                    logprobs,
                    ids,
                    width: *shape.last().unwrap_or(&0) as usize,
                }
            }
        })
    }
}

/// The ONNX graphs as the decoding loop's model for one batch: the first
/// call runs the first-step decoder from the encoder states, later calls
/// the decoder with past, and reorders keep the caches in step.
struct OnnxStep<'g> {
    graphs: &'g mut Graphs,
    batch: Batch,
    /// The encoder states and mask, until the first call uses them.
    first: Option<(DynValue, Vec<i64>)>,
}

impl StepDecoder for OnnxStep<'_> {
    type Output = StepOut;

    fn step(&mut self, last: &[i64]) -> Result<StepOut, NmtError> {
        match self.first.take() {
            Some((hidden, mask)) => self.graphs.first_step(&mut self.batch, last, &hidden, mask),
            None => self.graphs.next_step(&mut self.batch, last),
        }
    }

    fn reorder(&mut self, parents: &[usize], sentences: &[usize]) -> Result<(), NmtError> {
        let t0 = std::time::Instant::now();
        let (g, b) = (&mut *self.graphs, &mut self.batch);
        // Self-attention cache: the next call gathers it itself, or it is
        // reordered here when rows moved.
        if g.rewrites.beam_gather {
            b.parents.clear();
            b.parents.extend(parents.iter().map(|&p| p as i64));
        } else if parents.len() != b.rows || parents.iter().enumerate().any(|(i, &p)| i != p) {
            let spare = std::mem::take(&mut b.spare);
            b.self_kv = g.reorder(&b.self_kv, parents, spare)?;
        }
        b.row_sents.clear();
        b.row_sents.extend_from_slice(sentences);
        // Cross-attention: one row per live sentence, or per beam of each
        // live sentence. It only changes when a sentence leaves or at the
        // first expansion to beams.
        let per_sentence: Vec<usize>;
        let sentences = if g.rewrites.cross_per_sentence {
            per_sentence = {
                let mut v = sentences.to_vec();
                v.dedup();
                v
            };
            &per_sentence[..]
        } else {
            sentences
        };
        if sentences != b.cross_rows {
            let t1 = std::time::Instant::now();
            // Row j of a sentence's block takes row j of its old block
            // (all hold the same values; matching them lets the kept
            // blocks stay where they are), or its only row at the first
            // expansion to beams.
            let mut index = Vec::with_capacity(sentences.len());
            let mut j = 0;
            for (i, &sent) in sentences.iter().enumerate() {
                j = if i > 0 && sentences[i - 1] == sent {
                    j + 1
                } else {
                    0
                };
                let first = b.cross_rows.iter().position(|&r| r == sent).unwrap_or(0);
                let same = b.cross_rows.get(first + j) == Some(&sent);
                index.push(if same { first + j } else { first });
            }
            if !b.cross_kv.compact(&index) {
                let spare = std::mem::take(&mut b.cross_spare);
                let moved = g.reorder(&b.cross_kv, &index, spare)?;
                b.cross_spare = std::mem::replace(&mut b.cross_kv, moved).take_bufs();
            }
            b.cross_rows = sentences.to_vec();
            g.profile.cross_cache_s += t1.elapsed().as_secs_f64();
        }
        g.profile.cache_s += t0.elapsed().as_secs_f64();
        Ok(())
    }
}
