//! ONNX Runtime sessions of a MarianMT export and the decoding loop that
//! drives them.
//!
//! Per batch: the encoder runs once; the first decoder call runs one row per
//! sentence (all beams are identical then) and yields the cross-attention
//! keys/values, which are expanded to `num_beams` rows once and reused
//! unchanged by every later step. Later steps feed only the last token and
//! the self-attention cache (never the whole prefix); the cache is
//! reordered by beam parent, a copy that is skipped when the order did not
//! change. A sentence that is done leaves the batch, shrinking every later
//! call.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use ort::memory::{AllocationDevice, AllocatorType, MemoryInfo, MemoryType};
use ort::session::builder::GraphOptimizationLevel;
use ort::session::{Session, SessionInputValue};
use ort::value::{DynValue, Tensor, TensorRef};
use rayon::prelude::*;

use crate::config::ModelConfig;
use crate::error::NmtError;
use crate::gather_graph;
use crate::search::{row_candidates, Beams, Finished, Greedy, Settings, StepScratch};

/// Where the model runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Device {
    #[default]
    Cpu,
    Cuda(i32),
}

impl std::str::FromStr for Device {
    type Err = String;
    fn from_str(s: &str) -> Result<Device, String> {
        match s {
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda(0)),
            _ => match s.strip_prefix("cuda:").map(str::parse::<i32>) {
                Some(Ok(n)) if n >= 0 => Ok(Device::Cuda(n)),
                _ => Err(format!("unknown device {s:?}: use cpu, cuda or cuda:N")),
            },
        }
    }
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Device::Cpu => write!(f, "cpu"),
            Device::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

/// Which decoder graphs to use when a directory has both layouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DecoderLayout {
    /// The split pair if present, else the merged graph.
    #[default]
    Auto,
    Split,
    Merged,
}

/// How to load a model.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    pub device: Device,
    /// Intra-op threads for ONNX Runtime on CPU (0 = one per core).
    pub threads: usize,
    /// Load `*_quantized.onnx` (ONNX Runtime dynamic int8) instead of fp32.
    pub quantized: bool,
    pub decoder: DecoderLayout,
    /// Keep the KV caches in the execution provider's memory between steps
    /// (I/O binding, reorder on the device). Always on for CUDA; on CPU it
    /// exercises the same path (the tests run it there).
    pub io_binding: bool,
}

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
    /// Reordering and shrinking the KV caches.
    pub cache_s: f64,
    pub decoder_calls: u64,
    pub decoder_rows: u64,
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
    device_io: Option<DeviceIo>,
    pub(crate) profile: Profile,
    /// Per-row candidates of the current step, reused across steps.
    row_cands: Vec<Vec<(f32, u32)>>,
    encoder: Session,
    decoder: Decoder,
    layers: usize,
    heads: usize,
    head_dim: usize,
    vocab: usize,
    pub(crate) files: Vec<PathBuf>,
}

fn onnx_error(path: &Path, e: impl std::fmt::Display) -> NmtError {
    NmtError::BadOnnx {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// Whether `device` can run here: the runtime loads and, for CUDA, its
/// library carries the CUDA execution provider. (A GPU index that does not
/// exist is found when a session is created, with the same error.)
pub fn check_device(device: Device) -> Result<(), NmtError> {
    environment()?;
    if let Device::Cuda(_) = device {
        use ort::ep::ExecutionProvider;
        let unavailable = |reason: String| NmtError::Device {
            device: device.to_string(),
            reason,
        };
        match ort::ep::CUDA::is_available() {
            Ok(true) => {}
            Ok(false) => {
                return Err(unavailable(
                    "this ONNX Runtime library has no CUDA execution provider (use the onnxruntime-gpu wheel's library: `make ort ORT_WHEEL=onnxruntime-gpu`)".into(),
                ))
            }
            Err(e) => return Err(unavailable(format!("cannot query the CUDA execution provider: {e}"))),
        }
    }
    Ok(())
}

fn environment() -> Result<&'static ort::environment::Environment, NmtError> {
    static ENV: std::sync::OnceLock<Result<ort::environment::Environment, String>> =
        std::sync::OnceLock::new();
    ENV.get_or_init(init_runtime)
        .as_ref()
        .map_err(|e| NmtError::Runtime(e.clone()))
}

/// Loads the ONNX Runtime shared library named by `ORT_DYLIB_PATH` (or the
/// system's `libonnxruntime.so`). ort panics on some load failures (a
/// library too old for API 31); those become errors here too.
fn init_runtime() -> Result<ort::environment::Environment, String> {
    let hint = "set ORT_DYLIB_PATH to libonnxruntime.so.1.31.1 from the onnxruntime wheel (`make ort` fetches it)";
    let path = match std::env::var("ORT_DYLIB_PATH") {
        Ok(p) if !p.is_empty() => {
            if !Path::new(&p).is_file() {
                return Err(format!("ORT_DYLIB_PATH={p}: no such file; {hint}"));
            }
            PathBuf::from(p)
        }
        _ => PathBuf::from(format!(
            "{}onnxruntime{}",
            std::env::consts::DLL_PREFIX,
            std::env::consts::DLL_SUFFIX
        )),
    };
    let shown = path.display().to_string();
    let attempt = std::panic::catch_unwind(move || {
        ort::init_from(&path)
            .map_err(|e| e.to_string())?
            .with_name("paraforge")
            .build()
            .map_err(|e| e.to_string())
    });
    match attempt {
        Ok(Ok(env)) => Ok(env),
        Ok(Err(e)) => Err(format!("{shown}: {e}; {hint}")),
        Err(_) => Err(format!(
            "{shown}: not a usable ONNX Runtime library (version 1.31 or later is needed); {hint}"
        )),
    }
}

fn builder(
    path: &Path,
    opts: &LoadOptions,
) -> Result<ort::session::builder::SessionBuilder, NmtError> {
    let env = environment()?;
    let map = |e: ort::Error<ort::session::builder::SessionBuilder>| onnx_error(path, e);
    let mut b = Session::builder(env)
        .map_err(|e| onnx_error(path, e))?
        .with_optimization_level(GraphOptimizationLevel::All)
        .map_err(map)?;
    if opts.threads > 0 {
        b = b.with_intra_threads(opts.threads).map_err(map)?;
    }
    // Between graph runs the search runs on rayon's threads; ONNX Runtime's
    // workers spinning for work would steal those cores.
    b = b
        .with_config_entry("session.intra_op.allow_spinning", "0")
        .map_err(map)?;
    // Weight-only int8 graphs (int8 initializers -> DequantizeLinear ->
    // MatMul, the bundled demo models) must have their weights folded to
    // fp32 once at load. By default ONNX Runtime keeps DequantizeLinear out
    // of constant folding and rewrites DQ -> MatMul into DynamicQuantizeMatMul,
    // which quantizes activations per tensor, i.e. over the whole batch:
    // output would again depend on batching, and run slower. Dynamic-int8
    // exports (DynamicQuantizeLinear + MatMulInteger) and fp32 graphs give
    // bit-identical output with or without this (checked on the int8 demo
    // graphs); only static QDQ graphs, which this engine does not target,
    // lose their int8 kernels.
    b = b
        .with_config_entry("session.disable_quant_qdq", "1")
        .map_err(map)?;
    if let Device::Cuda(id) = opts.device {
        let ep = ort::ep::CUDA::default()
            .with_device_id(id)
            .build()
            .error_on_failure();
        b = b.with_execution_providers([ep]).map_err(|e| NmtError::Device {
            device: opts.device.to_string(),
            reason: format!(
                "the CUDA execution provider is not available: {e} (use the onnxruntime-gpu wheel's library and check the driver)"
            ),
        })?;
    }
    Ok(b)
}

fn session(path: &Path, opts: &LoadOptions) -> Result<Session, NmtError> {
    builder(path, opts)?
        .commit_from_file(path)
        .map_err(|e| onnx_error(path, e))
}

/// The checksum file a model directory may carry: `sha256sum` output, one
/// `<hex digest>  <file name>` line per file.
pub const CHECKSUM_FILE: &str = "SHA256SUMS";

/// Checks every file listed in `dir/SHA256SUMS` (when there is one) against
/// its recorded SHA-256, so that a file damaged in a copy or on disk is
/// refused instead of loading and translating differently. Hashing the
/// 20 MB of a demo model takes tens of milliseconds (BENCHMARKS.md).
pub(crate) fn verify_checksums(dir: &Path) -> Result<(), NmtError> {
    use sha2::{Digest, Sha256};
    use std::io::Read;
    let sums = dir.join(CHECKSUM_FILE);
    if !sums.is_file() {
        return Ok(());
    }
    let text = std::fs::read_to_string(&sums).map_err(|e| NmtError::io(&sums, e))?;
    let bad = |line: usize, reason: String| NmtError::BadConfig {
        path: sums.clone(),
        reason: format!("line {line}: {reason}"),
    };
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let (digest, name) = line
            .split_once(char::is_whitespace)
            .ok_or_else(|| bad(i + 1, "expected `<sha256>  <file name>`".into()))?;
        // sha256sum marks binary mode with a leading '*'.
        let name = name.trim_start().trim_start_matches('*');
        let expected = digest.to_ascii_lowercase();
        if expected.len() != 64 || !expected.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad(i + 1, format!("{digest:?} is not a SHA-256 digest")));
        }
        // Only plain names: the list must not reach outside the model.
        if name.is_empty() || name.contains(['/', '\\']) || name == ".." {
            return Err(bad(
                i + 1,
                format!("{name:?} is not a file name in the model directory"),
            ));
        }
        let path = dir.join(name);
        if !path.is_file() {
            return Err(NmtError::MissingFile {
                dir: dir.to_path_buf(),
                what: format!("{name} (listed in {CHECKSUM_FILE})"),
            });
        }
        let mut f = std::fs::File::open(&path).map_err(|e| NmtError::io(&path, e))?;
        let mut h = Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = f.read(&mut buf).map_err(|e| NmtError::io(&path, e))?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
        }
        let actual = hex::encode(h.finalize());
        if actual != expected {
            return Err(NmtError::ChecksumMismatch {
                path,
                expected,
                actual,
            });
        }
    }
    Ok(())
}

impl Graphs {
    pub(crate) fn load(
        dir: &Path,
        cfg: &ModelConfig,
        opts: &LoadOptions,
    ) -> Result<Graphs, NmtError> {
        // A directory that ships only the int8 files (the bundled demo
        // models, to stay small) is loaded as int8 without being asked.
        // (Any fp32 graph present means a full model with a file missing:
        // that stays an error naming the file.)
        let only_int8 = [
            "encoder_model.onnx",
            "decoder_model.onnx",
            "decoder_with_past_model.onnx",
            "decoder_model_merged.onnx",
        ]
        .iter()
        .all(|f| !dir.join(f).is_file())
            && dir.join("encoder_model_quantized.onnx").is_file();
        if only_int8 && !opts.quantized {
            tracing::info!(dir = %dir.display(), "only int8 graphs present; loading those");
        }
        let suffix = if opts.quantized || only_int8 {
            "_quantized"
        } else {
            ""
        };
        let file = |stem: &str| dir.join(format!("{stem}{suffix}.onnx"));
        let missing = |what: String| NmtError::MissingFile {
            dir: dir.to_path_buf(),
            what,
        };
        let enc_path = file("encoder_model");
        if !enc_path.is_file() {
            return Err(missing(format!("encoder_model{suffix}.onnx")));
        }
        let (first_p, past_p, merged_p) = (
            file("decoder_model"),
            file("decoder_with_past_model"),
            file("decoder_model_merged"),
        );
        let mut files = vec![enc_path.clone()];
        let split = first_p.is_file() && past_p.is_file() && opts.decoder != DecoderLayout::Merged;
        let merged = merged_p.is_file() && opts.decoder != DecoderLayout::Split;
        let decoder = if split {
            files.extend([first_p.clone(), past_p.clone()]);
            Decoder::Split {
                first: session(&first_p, opts)?,
                with_past: session(&past_p, opts)?,
            }
        } else if merged {
            files.push(merged_p.clone());
            Decoder::Merged(session(&merged_p, opts)?)
        } else {
            let what = match opts.decoder {
                DecoderLayout::Auto => format!(
                    "decoder_model{suffix}.onnx + decoder_with_past_model{suffix}.onnx, or decoder_model_merged{suffix}.onnx"
                ),
                DecoderLayout::Split => format!("decoder_model{suffix}.onnx + decoder_with_past_model{suffix}.onnx"),
                DecoderLayout::Merged => format!("decoder_model_merged{suffix}.onnx"),
            };
            return Err(missing(what));
        };
        let encoder = session(&enc_path, opts)?;
        let device_io = if opts.io_binding || matches!(opts.device, Device::Cuda(_)) {
            let (alloc_dev, id) = match opts.device {
                Device::Cuda(id) => (AllocationDevice::CUDA, id),
                Device::Cpu => (AllocationDevice::CPU, 0),
            };
            let mem_err = |e: ort::Error| NmtError::Device {
                device: opts.device.to_string(),
                reason: format!("memory info: {e}"),
            };
            let gather_path = dir.join("<cache gather graph>");
            let gather = builder(&gather_path, opts)?
                .commit_from_memory(&crate::gather_graph::gather_model(2 * cfg.decoder_layers))
                .map_err(|e| onnx_error(&gather_path, e))?;
            Some(DeviceIo {
                cache_mem: MemoryInfo::new(
                    alloc_dev,
                    id,
                    AllocatorType::Device,
                    MemoryType::Default,
                )
                .map_err(mem_err)?,
                host_mem: MemoryInfo::new(
                    AllocationDevice::CPU,
                    0,
                    AllocatorType::Device,
                    MemoryType::Default,
                )
                .map_err(mem_err)?,
                gather,
            })
        } else {
            None
        };
        let g = Graphs {
            device_io,
            profile: Profile::default(),
            row_cands: Vec::new(),
            encoder,
            decoder,
            layers: cfg.decoder_layers,
            heads: cfg.decoder_attention_heads,
            head_dim: cfg.head_dim(),
            vocab: cfg.target_vocab_size(),
            files,
        };
        g.check_signature(dir)?;
        Ok(g)
    }

    /// Fails early, naming the file, when the graphs do not have the
    /// inputs and outputs this engine feeds (a different export, a
    /// different model than config.json describes).
    fn check_signature(&self, dir: &Path) -> Result<(), NmtError> {
        let mismatch = |reason: String| NmtError::VocabMismatch {
            dir: dir.to_path_buf(),
            reason,
        };
        let has_in = |s: &Session, n: &str| s.inputs().iter().any(|i| i.name() == n);
        let has_out = |s: &Session, n: &str| s.outputs().iter().any(|o| o.name() == n);
        for n in ["input_ids", "attention_mask"] {
            if !has_in(&self.encoder, n) {
                return Err(mismatch(format!("encoder has no input {n:?}")));
            }
        }
        let past = match &self.decoder {
            Decoder::Split { with_past, .. } => with_past,
            Decoder::Merged(m) => m,
        };
        for l in 0..self.layers {
            for part in [
                "decoder.key",
                "decoder.value",
                "encoder.key",
                "encoder.value",
            ] {
                let n = format!("past_key_values.{l}.{part}");
                if !has_in(past, &n) {
                    return Err(mismatch(format!(
                        "config.json says {} decoder layers but the decoder has no input {n:?}",
                        self.layers
                    )));
                }
            }
        }
        if !has_out(past, "logits") {
            return Err(mismatch("decoder has no output \"logits\"".into()));
        }
        Ok(())
    }

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

/// The self-attention cache fed to the next step: either the graph's
/// own `present` outputs (when beams kept their order) or copies
/// reordered by beam parent into buffers that are reused across steps, so
/// that the reorder does not allocate (and fault in) fresh memory.
enum Cache {
    Ort(Vec<DynValue>),
    Own {
        bufs: Vec<Vec<f32>>,
        dims: [usize; 4],
    },
    /// Tensors in the execution provider's memory (I/O binding path).
    Device(Vec<DynValue>),
}

impl Cache {
    fn input(&self, i: usize) -> Result<SessionInputValue<'_>, NmtError> {
        Ok(match self {
            Cache::Ort(v) | Cache::Device(v) => v[i].view().into(),
            Cache::Own { bufs, dims } => TensorRef::from_array_view((dims.to_vec(), &bufs[i][..]))
                .map_err(|e| NmtError::inference("cache", e))?
                .into(),
        })
    }

    fn take_bufs(&mut self) -> Vec<Vec<f32>> {
        match self {
            Cache::Own { bufs, .. } => std::mem::take(bufs),
            Cache::Ort(_) | Cache::Device(_) => Vec::new(),
        }
    }

    fn device_values(&self) -> Option<&[DynValue]> {
        match self {
            Cache::Device(v) => Some(v),
            _ => None,
        }
    }
}

impl Cache {
    /// The tensors' data and their common (rows, heads, length, dim) shape.
    fn slices(&self) -> Result<(Vec<&[f32]>, [usize; 4]), NmtError> {
        match self {
            Cache::Own { bufs, dims } => Ok((bufs.iter().map(Vec::as_slice).collect(), *dims)),
            Cache::Ort(values) | Cache::Device(values) => {
                let mut dims = [0usize; 4];
                let data = values
                    .iter()
                    .map(|v| {
                        let (shape, data) = v
                            .try_extract_tensor::<f32>()
                            .map_err(|e| NmtError::inference("cache", e))?;
                        if shape.len() != 4 {
                            return Err(NmtError::inference(
                                "cache",
                                format!("expected a 4-d cache tensor, got {shape:?}"),
                            ));
                        }
                        for (d, &x) in dims.iter_mut().zip(shape.iter()) {
                            *d = x as usize;
                        }
                        Ok(data)
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok((data, dims))
            }
        }
    }

    /// A cache holding `rows` of this one, in that order, built in `bufs`
    /// (one per tensor, capacity reused), copying tensors in parallel.
    fn gather(&self, rows: &[usize], mut bufs: Vec<Vec<f32>>) -> Result<Cache, NmtError> {
        let (src, mut dims) = self.slices()?;
        bufs.resize_with(src.len(), Vec::new);
        let row = dims[1] * dims[2] * dims[3];
        src.par_iter()
            .zip(bufs.par_iter_mut())
            .for_each(|(data, buf)| {
                buf.clear();
                for &r in rows {
                    buf.extend_from_slice(&data[r * row..(r + 1) * row]);
                }
            });
        dims[0] = rows.len();
        Ok(Cache::Own { bufs, dims })
    }
}

/// One batch being decoded: its sentences, their cache and search state.
struct Batch {
    /// Index into the batch's sentence list for each live sentence.
    live: Vec<usize>,
    /// Source length after padding.
    src_len: usize,
    /// Encoder attention mask per live sentence (unexpanded).
    masks: Vec<Vec<i64>>,
    /// Per layer: decoder self-attention key and value, (rows, h, t, d).
    self_kv: Cache,
    /// Per layer: cross-attention key and value, (rows, h, src, d).
    cross_kv: Cache,
    /// The cross-attention tensors as fed (expanded to the live rows).
    cross_rows: Vec<usize>,
    /// Last token of every row, fed to the next step.
    last: Vec<i64>,
    /// Buffers of the previous reordered cache, reused by the next reorder.
    spare: Vec<Vec<f32>>,
}

pub(crate) enum SearchState {
    Beam(Vec<Beams>),
    Greedy(Vec<Greedy>),
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

        let mut batch = Batch {
            live: (0..n).collect(),
            src_len,
            masks,
            self_kv: Cache::Ort(Vec::new()),
            cross_kv: Cache::Ort(Vec::new()),
            cross_rows: Vec::new(),
            last: vec![start_id as i64; n],
            spare: Vec::new(),
        };
        let mut state = if s.num_beams == 1 {
            SearchState::Greedy(vec![Greedy::default(); n])
        } else {
            SearchState::Beam(vec![Beams::new(); n])
        };
        let mut results: Vec<Vec<Finished>> = vec![Vec::new(); n];
        let mut scratch = StepScratch::default();
        let mut cur_len = 1;

        // First step: one row per sentence, from the encoder states.
        let logits = self.first_step(&mut batch, &hidden, flat_mask)?;
        drop(hidden);
        self.advance(
            &mut batch,
            &mut state,
            &logits,
            cur_len,
            s,
            &mut scratch,
            &mut results,
        )?;
        cur_len += 1;

        while !batch.live.is_empty() {
            let logits = self.next_step(&mut batch)?;
            self.advance(
                &mut batch,
                &mut state,
                &logits,
                cur_len,
                s,
                &mut scratch,
                &mut results,
            )?;
            cur_len += 1;
        }
        Ok(results)
    }

    fn first_step(
        &mut self,
        b: &mut Batch,
        hidden: &DynValue,
        mask: Vec<i64>,
    ) -> Result<DynValue, NmtError> {
        let t0 = std::time::Instant::now();
        let rows = b.live.len();
        let mut inputs: Vec<(Cow<'static, str>, SessionInputValue<'_>)> = vec![
            (
                "input_ids".into(),
                tensor_i64([rows, 1], b.last.clone())?.into(),
            ),
            (
                "encoder_attention_mask".into(),
                tensor_i64([rows, b.src_len], mask)?.into(),
            ),
            ("encoder_hidden_states".into(), hidden.view().into()),
        ];
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
        let logits = take_out(&mut out, "logits", "decoder")?;
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
        } else {
            b.self_kv = Cache::Ort(self_kv);
            b.cross_kv = Cache::Ort(cross_kv);
        }
        b.cross_rows = (0..rows).collect();
        self.profile.decoder_s += t0.elapsed().as_secs_f64();
        self.profile.decoder_calls += 1;
        self.profile.decoder_rows += rows as u64;
        Ok(logits)
    }

    fn next_step(&mut self, b: &mut Batch) -> Result<DynValue, NmtError> {
        let t0 = std::time::Instant::now();
        let rows = b.last.len();
        let mask: Vec<i64> = b
            .cross_rows
            .iter()
            .flat_map(|&r| b.masks[r].iter().copied())
            .collect();
        let mut inputs: Vec<(Cow<'static, str>, SessionInputValue<'_>)> = vec![
            (
                "input_ids".into(),
                tensor_i64([rows, 1], b.last.clone())?.into(),
            ),
            (
                "encoder_attention_mask".into(),
                tensor_i64([rows, b.src_len], mask)?.into(),
            ),
        ];
        for l in 0..self.layers {
            for (j, part) in ["key", "value"].iter().enumerate() {
                inputs.push((
                    format!("past_key_values.{l}.decoder.{part}").into(),
                    b.self_kv.input(2 * l + j)?,
                ));
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
        let logits = take_out(&mut out, "logits", "decoder")?;
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
        b.spare = b.self_kv.take_bufs();
        b.self_kv = if io.is_some() {
            Cache::Device(kv)
        } else {
            Cache::Ort(kv)
        };
        self.profile.decoder_s += t0.elapsed().as_secs_f64();
        self.profile.decoder_calls += 1;
        self.profile.decoder_rows += rows as u64;
        Ok(logits)
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
            gather_graph::INDICES.into(),
            Tensor::from_array(([rows.len()], idx))
                .map_err(|e| NmtError::inference("cache", e))?
                .into(),
        )];
        for (i, v) in values.iter().enumerate() {
            inputs.push((gather_graph::data_name(i).into(), v.view().into()));
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
            .map(|i| take_out(&mut out, &gather_graph::out_name(i), "cache"))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Cache::Device(moved))
    }

    /// Runs the search step on the logits, records finished sentences, and
    /// reorders or shrinks the caches for the next call.
    #[allow(clippy::too_many_arguments)]
    fn advance(
        &mut self,
        b: &mut Batch,
        state: &mut SearchState,
        logits: &DynValue,
        cur_len: usize,
        s: &Settings,
        scratch: &mut StepScratch,
        results: &mut [Vec<Finished>],
    ) -> Result<(), NmtError> {
        let t0 = std::time::Instant::now();
        let (shape, data) = logits
            .try_extract_tensor::<f32>()
            .map_err(|e| NmtError::inference("decoder", e))?;
        let v = *shape.last().unwrap_or(&0) as usize;
        if v != self.vocab {
            return Err(NmtError::inference(
                "decoder",
                format!(
                    "logits have {v} columns but config.json has a vocabulary of {}",
                    self.vocab
                ),
            ));
        }
        // Every row's best candidates, in parallel: this pass reads
        // rows x vocab logits and dominates the search time.
        let nrows = data.len() / v;
        let k = match state {
            SearchState::Beam(_) => 2 * s.num_beams,
            SearchState::Greedy(_) => 1,
        };
        let mask = s.step_mask(cur_len);
        self.row_cands.resize_with(nrows, Vec::new);
        self.row_cands[..nrows]
            .par_iter_mut()
            .enumerate()
            .for_each(|(r, out)| row_candidates(&data[r * v..(r + 1) * v], k, &mask, out));
        let cands = &self.row_cands;

        // Rows of the next call: (source row in this call, token), and the
        // live sentences they belong to.
        let mut parents: Vec<usize> = Vec::new();
        let mut tokens: Vec<i64> = Vec::new();
        let mut live = Vec::new();
        let mut sentence_rows = Vec::new();
        let mut r0 = 0;
        match state {
            SearchState::Beam(beams) => {
                for &sent in &b.live {
                    let bm = &mut beams[sent];
                    let nrows = bm.rows();
                    let rows: Vec<&[(f32, u32)]> =
                        cands[r0..r0 + nrows].iter().map(Vec::as_slice).collect();
                    let out = bm.step(s, &rows, cur_len, scratch);
                    if bm.is_done() {
                        results[sent] = std::mem::take(bm).into_finished(s.nbest);
                    } else {
                        live.push(sent);
                        sentence_rows.push(out.parents.len());
                        parents.extend(out.parents.iter().map(|p| r0 + p));
                        tokens.extend(out.tokens.iter().map(|&t| t as i64));
                    }
                    r0 += nrows;
                }
            }
            SearchState::Greedy(gs) => {
                for &sent in &b.live {
                    let g = &mut gs[sent];
                    let tok = g.step(s, &cands[r0], cur_len);
                    if g.is_done() {
                        results[sent] = vec![std::mem::take(g).into_finished(s)];
                    } else {
                        live.push(sent);
                        sentence_rows.push(1);
                        parents.push(r0);
                        tokens.push(tok as i64);
                    }
                    r0 += 1;
                }
            }
        }
        let t1 = std::time::Instant::now();
        self.profile.search_s += (t1 - t0).as_secs_f64();
        if live.is_empty() {
            b.live.clear();
            return Ok(());
        }
        // Self-attention cache: reorder only when rows moved.
        let identity = parents.len() == r0 && parents.iter().enumerate().all(|(i, &p)| i == p);
        if !identity {
            let spare = std::mem::take(&mut b.spare);
            b.self_kv = self.reorder(&b.self_kv, &parents, spare)?;
        }
        // Cross-attention: one row per beam of each live sentence. It only
        // changes when a sentence leaves or at the first expansion.
        let want: Vec<usize> = live
            .iter()
            .zip(&sentence_rows)
            .flat_map(|(&sent, &k)| std::iter::repeat_n(sent, k))
            .collect();
        if want != b.cross_rows {
            let index: Vec<usize> = want
                .iter()
                .map(|sent| {
                    // Any row of the sentence will do: all hold the same values.
                    b.cross_rows.iter().position(|r| r == sent).unwrap_or(0)
                })
                .collect();
            b.cross_kv = self.reorder(&b.cross_kv, &index, Vec::new())?;
            b.cross_rows = want;
        }
        b.live = live;
        b.last = tokens;
        self.profile.cache_s += t1.elapsed().as_secs_f64();
        Ok(())
    }
}
