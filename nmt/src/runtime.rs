//! Loading ONNX Runtime and the model's sessions: the runtime library
//! (load-dynamic, from `ORT_DYLIB_PATH`), the execution provider a device
//! needs, session options, and the checksums a model directory may carry.

use std::path::{Path, PathBuf};

use ort::session::builder::GraphOptimizationLevel;
use ort::session::Session;

use crate::error::NmtError;

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

/// Where each row's log-softmax and best candidates are computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TopKOn {
    /// On the host for the CPU, in the decoder graph for CUDA.
    #[default]
    Auto,
    /// On the host from the full logits (the CPU's way, exact with
    /// transformers; on a GPU every step copies rows x vocab floats back).
    Host,
    /// In the decoder graph (`top_k.rs`): only the candidates come back.
    Graph,
}

impl std::str::FromStr for TopKOn {
    type Err = String;
    fn from_str(s: &str) -> Result<TopKOn, String> {
        match s {
            "auto" => Ok(TopKOn::Auto),
            "host" => Ok(TopKOn::Host),
            "graph" => Ok(TopKOn::Graph),
            _ => Err(format!("unknown place {s:?}: use auto, host or graph")),
        }
    }
}

/// How to load a model.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    pub device: Device,
    /// Intra-op threads for ONNX Runtime on CPU, per stream (0 = one per
    /// core, shared out over the streams when there are several).
    pub threads: usize,
    /// Load `*_quantized.onnx` (ONNX Runtime dynamic int8) instead of fp32.
    pub quantized: bool,
    pub decoder: DecoderLayout,
    /// Keep the KV caches in the execution provider's memory between steps
    /// (I/O binding, reorder on the device). Always on for CUDA; on CPU it
    /// exercises the same path (the tests run it there).
    pub io_binding: bool,
    /// Attend to the encoder once per beam, as the export does, instead of
    /// rewriting the decoder-with-past graph to attend once per sentence
    /// (`cross_attention.rs`); for comparison and as a way out.
    pub cross_attention_per_beam: bool,
    /// Reorder the self-attention cache by beam parent in the engine, a
    /// copy of its own, instead of inside the decoder call
    /// (`beam_gather.rs`; host caches only); for comparison and as a way out.
    pub reorder_in_engine: bool,
    /// Attend over the self-attention cache with the export's own
    /// MatMul/Softmax nodes instead of one op per layer
    /// (`self_attention.rs`; CPU only); for comparison and as a way out.
    pub unfused_self_attention: bool,
    /// Decoders working on different batches at once (CTranslate2's
    /// `inter_threads`), each with its own sessions and `threads` intra-op
    /// threads; 0 or 1 = one. A small model's decoder call does too little
    /// work to keep two cores busy, so one single-threaded stream per core
    /// is the faster way to use them (BENCHMARKS.md); each stream holds its
    /// own copy of the model.
    pub streams: usize,
    /// Where each step's log-softmax and row top-k run: the host for the
    /// CPU, the decoder graph for CUDA by default (`top_k.rs`).
    pub top_k_on: TopKOn,
}

impl LoadOptions {
    /// Whether the decoder graphs are to end in LogSoftmax and TopK.
    pub(crate) fn top_k_in_graph(&self) -> bool {
        match self.top_k_on {
            TopKOn::Auto => matches!(self.device, Device::Cuda(_)),
            TopKOn::Host => false,
            TopKOn::Graph => true,
        }
    }
}

/// Intra-op threads for each of `streams` streams: `threads` as given, or
/// for 0 ("one per core") with several streams, the cores shared out over
/// them, so that streams x threads stays at the core count instead of each
/// stream's sessions taking every core.
pub(crate) fn threads_per_stream(threads: usize, streams: usize, cores: usize) -> usize {
    if threads == 0 && streams > 1 {
        (cores / streams).max(1)
    } else {
        threads
    }
}

pub(crate) fn onnx_error(path: &Path, e: impl std::fmt::Display) -> NmtError {
    NmtError::BadOnnx {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// Whether `device` can run here: the runtime loads and, for CUDA, its
/// library carries the CUDA execution provider and the provider accepts the
/// GPU index (a session builder registers it; no graph is loaded). Before,
/// an index the machine lacks passed here and failed only in the worker's
/// model load, after `run --gpus` had started the job: the job then ran on
/// the other GPUs and reported success.
pub fn check_device(device: Device) -> Result<(), NmtError> {
    let env = environment()?;
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
        let b = Session::builder(env).map_err(|e| unavailable(e.to_string()))?;
        on_device(b, device)?;
    }
    Ok(())
}

pub(crate) fn environment() -> Result<&'static ort::environment::Environment, NmtError> {
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

pub(crate) fn builder(
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
    // A diagnostic, not a setting: ONNX Runtime's per-node profile of each
    // session, for finding where the decoder graph's time goes
    // (BENCHMARKS.md, "Where the time goes").
    if let Some(prefix) = std::env::var_os("PARAFORGE_ORT_PROFILE") {
        let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
        let file = format!("{}-{}", prefix.to_string_lossy(), stem.unwrap_or_default());
        b = b.with_profiling(file).map_err(map)?;
    }
    on_device(b, opts.device)
}

/// Registers `device`'s execution provider on a session builder. The CUDA
/// provider checks the GPU index here (ONNX Runtime: "Invalid device ID: 1,
/// must be between 0 (inclusive) and 1 (exclusive)"), so check_device and
/// every session share this one place.
fn on_device(
    b: ort::session::builder::SessionBuilder,
    device: Device,
) -> Result<ort::session::builder::SessionBuilder, NmtError> {
    let Device::Cuda(id) = device else {
        return Ok(b);
    };
    let ep = ort::ep::CUDA::default()
        .with_device_id(id)
        .build()
        .error_on_failure();
    b.with_execution_providers([ep])
        .map_err(|e| NmtError::Device {
            device: device.to_string(),
            reason: format!(
                "the CUDA execution provider cannot run on it: {e} (use the onnxruntime-gpu wheel's library and check the driver and the GPU index)"
            ),
        })
}

/// A session of any ONNX graph with the runtime and options the engine
/// uses (the transformer sentence encoder shares them).
pub fn session(path: &Path, opts: &LoadOptions) -> Result<Session, NmtError> {
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

#[cfg(test)]
mod tests {
    use super::threads_per_stream;

    #[test]
    fn zero_threads_are_shared_out_over_the_streams() {
        // One stream: 0 stays "one per core" for ONNX Runtime to decide.
        assert_eq!(threads_per_stream(0, 1, 16), 0);
        assert_eq!(threads_per_stream(0, 4, 16), 4);
        assert_eq!(threads_per_stream(0, 3, 16), 5);
        // More streams than cores: one each, never zero.
        assert_eq!(threads_per_stream(0, 64, 16), 1);
        // Given threads are kept.
        assert_eq!(threads_per_stream(2, 4, 16), 2);
    }
}
