//! Loading a MarianMT export: which files (fp32 or int8, split or merged
//! decoder), the rewrites the decoder graphs take, where the caches live,
//! and a check of the graphs' inputs and outputs against config.json.

use std::path::{Path, PathBuf};

use ort::memory::{AllocationDevice, AllocatorType, MemoryInfo, MemoryType};
use ort::session::Session;

use super::{cache_elem, Decoder, DeviceIo, Graphs, Profile};
use crate::cache::BufferPool;
use crate::config::ModelConfig;
use crate::decode::DecodeScratch;
use crate::error::NmtError;
use crate::onnx_graph;
use crate::rewrites::{top_k_session, with_past_session, Rewrites};
use crate::runtime::{builder, onnx_error, session, DecoderLayout, Device, LoadOptions};

impl Graphs {
    pub(crate) fn load(
        dir: &Path,
        cfg: &ModelConfig,
        opts: &LoadOptions,
    ) -> Result<Graphs, NmtError> {
        let suffix = graph_suffix(dir, opts);
        let enc_path = dir.join(format!("encoder_model{suffix}.onnx"));
        if !enc_path.is_file() {
            return Err(NmtError::MissingFile {
                dir: dir.to_path_buf(),
                what: format!("encoder_model{suffix}.onnx"),
            });
        }
        let mut files = vec![enc_path.clone()];
        let (decoder, rewrites) = load_decoder(dir, suffix, cfg, opts, &mut files)?;
        let encoder = session(&enc_path, opts)?;
        let on_device = opts.io_binding || matches!(opts.device, Device::Cuda(_));
        let elem = cache_elem(&decoder);
        let half = elem == onnx_graph::onnx::tensor_proto::DataType::Float16;
        check_half(half, on_device, &decoder, opts, &files, &enc_path)?;
        let device_io = if on_device {
            Some(device_io(dir, cfg, opts, elem)?)
        } else {
            None
        };
        let g = Graphs {
            cache_half: half,
            device_io,
            profile: Profile::default(),
            scratch: DecodeScratch::default(),
            pool: BufferPool::default(),
            rewrites,
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
        let logits = if self.rewrites.top_k {
            crate::top_k::TOP_LOGPROBS
        } else {
            "logits"
        };
        if !has_out(past, logits) {
            return Err(mismatch(format!("decoder has no output {logits:?}")));
        }
        Ok(())
    }
}

/// `_quantized` for int8 graphs, asked for or the only ones there: a
/// directory that ships only the int8 files (the bundled demo models, to
/// stay small) is loaded as int8 without being asked. (Any fp32 graph
/// present means a full model with a file missing: that stays an error
/// naming the file.)
fn graph_suffix(dir: &Path, opts: &LoadOptions) -> &'static str {
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
    if opts.quantized || only_int8 {
        "_quantized"
    } else {
        ""
    }
}

/// The decoder sessions (split or merged, as present and asked) and the
/// rewrites they took; their files are added to `files`.
fn load_decoder(
    dir: &Path,
    suffix: &str,
    cfg: &ModelConfig,
    opts: &LoadOptions,
    files: &mut Vec<PathBuf>,
) -> Result<(Decoder, Rewrites), NmtError> {
    let file = |stem: &str| dir.join(format!("{stem}{suffix}.onnx"));
    let (first_p, past_p, merged_p) = (
        file("decoder_model"),
        file("decoder_with_past_model"),
        file("decoder_model_merged"),
    );
    let split = first_p.is_file() && past_p.is_file() && opts.decoder != DecoderLayout::Merged;
    let merged = merged_p.is_file() && opts.decoder != DecoderLayout::Split;
    if split {
        files.extend([first_p.clone(), past_p.clone()]);
        let (with_past, done) = with_past_session(&past_p, cfg, opts)?;
        let (first, top_k_first) = top_k_session(&first_p, cfg, opts)?;
        let rewrites = Rewrites {
            top_k_first,
            ..done
        };
        return Ok((Decoder::Split { first, with_past }, rewrites));
    }
    if merged {
        files.push(merged_p.clone());
        let (m, top_k) = top_k_session(&merged_p, cfg, opts)?;
        let rewrites = Rewrites {
            top_k,
            top_k_first: top_k,
            ..Rewrites::default()
        };
        return Ok((Decoder::Merged(m), rewrites));
    }
    let what = match opts.decoder {
        DecoderLayout::Auto => format!(
            "decoder_model{suffix}.onnx + decoder_with_past_model{suffix}.onnx, or decoder_model_merged{suffix}.onnx"
        ),
        DecoderLayout::Split => format!("decoder_model{suffix}.onnx + decoder_with_past_model{suffix}.onnx"),
        DecoderLayout::Merged => format!("decoder_model_merged{suffix}.onnx"),
    };
    Err(NmtError::MissingFile {
        dir: dir.to_path_buf(),
        what,
    })
}

/// An fp16 cache needs a split decoder and the device path: the merged
/// graph's first step is fed f32 placeholders for its cache inputs, and
/// the host's search and cache code is f32 throughout.
fn check_half(
    half: bool,
    on_device: bool,
    decoder: &Decoder,
    opts: &LoadOptions,
    files: &[PathBuf],
    enc_path: &Path,
) -> Result<(), NmtError> {
    let last = files.last().map_or(enc_path, |p| p.as_path()).display();
    if half && matches!(decoder, Decoder::Merged(_)) {
        return Err(NmtError::Device {
            device: opts.device.to_string(),
            reason: format!(
                "{last} keeps its KV cache in fp16 in a merged decoder; export fp16 graphs split (tools/models/marian_model.py export --fp16)"
            ),
        });
    }
    if !on_device && half {
        return Err(NmtError::Device {
            device: opts.device.to_string(),
            reason: format!(
                "{last} keeps its KV cache in fp16 (an fp16 export for CUDA); run it with --device cuda, or --io-binding to keep the cache in ONNX Runtime's memory"
            ),
        });
    }
    Ok(())
}

/// The device path: the memory the caches are bound to, host memory for
/// the logits, and the graph that reorders the caches there.
fn device_io(
    dir: &Path,
    cfg: &ModelConfig,
    opts: &LoadOptions,
    elem: onnx_graph::onnx::tensor_proto::DataType,
) -> Result<DeviceIo, NmtError> {
    let (alloc_dev, id) = match opts.device {
        Device::Cuda(id) => (AllocationDevice::CUDA, id),
        Device::Cpu => (AllocationDevice::CPU, 0),
    };
    let mem_err = |e: ort::Error| NmtError::Device {
        device: opts.device.to_string(),
        reason: format!("memory info: {e}"),
    };
    let gather_path = dir.join("<cache gather graph>");
    let gather: Session = builder(&gather_path, opts)?
        .commit_from_memory(&crate::onnx_graph::gather_model(
            2 * cfg.decoder_layers,
            elem,
        ))
        .map_err(|e| onnx_error(&gather_path, e))?;
    Ok(DeviceIo {
        cache_mem: MemoryInfo::new(alloc_dev, id, AllocatorType::Device, MemoryType::Default)
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
}
