//! A CUDA device's free memory, to size batches when none is given.
//!
//! Read through NVML (the driver's own library, present wherever the
//! driver is) rather than the CUDA runtime: NVML needs no context on the
//! calling thread and its soname does not change with the CUDA release.
//! NVML counts every GPU of the host in PCI order while CUDA counts only
//! `CUDA_VISIBLE_DEVICES`, so a CUDA id is first mapped through that list.
//! CUDA orders devices fastest first unless `CUDA_DEVICE_ORDER=PCI_BUS_ID`;
//! on a node of one GPU model (the case this serves) the two orders agree,
//! and on a mixed node the figure may be another GPU's: it only sizes
//! batches, never decides a result.

use nvml_wrapper::Nvml;

/// Free bytes on CUDA device `cuda_id` as the process sees it, or why
/// they could not be read.
pub(crate) fn free_bytes(cuda_id: i32) -> Result<u64, String> {
    let nvml = Nvml::init().map_err(|e| format!("NVML: {e}"))?;
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    let device = match nvml_target(visible.as_deref(), cuda_id)? {
        Target::Index(i) => nvml.device_by_index(i),
        Target::Uuid(u) => nvml.device_by_uuid(u.as_str()),
    }
    .map_err(|e| format!("NVML device for cuda:{cuda_id}: {e}"))?;
    let info = device
        .memory_info()
        .map_err(|e| format!("NVML memory of cuda:{cuda_id}: {e}"))?;
    Ok(info.free)
}

#[derive(Debug, PartialEq)]
enum Target {
    Index(u32),
    Uuid(String),
}

/// The NVML device behind CUDA id `cuda_id` given `CUDA_VISIBLE_DEVICES`.
fn nvml_target(visible: Option<&str>, cuda_id: i32) -> Result<Target, String> {
    let id = u32::try_from(cuda_id).map_err(|_| format!("cuda:{cuda_id}: not a device id"))?;
    let Some(list) = visible.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(Target::Index(id));
    };
    let entry = list
        .split(',')
        .map(str::trim)
        .nth(id as usize)
        .ok_or_else(|| {
            format!("cuda:{cuda_id}: CUDA_VISIBLE_DEVICES={list} lists fewer devices")
        })?;
    if let Ok(i) = entry.parse::<u32>() {
        Ok(Target::Index(i))
    } else if entry.starts_with("GPU-") && entry.len() == 40 {
        // A full UUID: "GPU-" and 36 characters.
        Ok(Target::Uuid(entry.to_string()))
    } else {
        // MIG instances and CUDA's shortened UUIDs: NVML would not find
        // the device, or would give the whole GPU's figure.
        Err(format!(
            "CUDA_VISIBLE_DEVICES entry {entry:?} is not a GPU index or full UUID"
        ))
    }
}

/// Padded source tokens per batch on a GPU with `free` bytes: half of them
/// over one source token's share of a batch at `beams` beams. Per token
/// and beam row: the cross-attention cache (one source position), the
/// self-attention cache for a translation up to twice the source, twice
/// (present and reordered), and the step's fp32 logits and candidates for
/// a sentence of four tokens or more. Within 1,024 and 65,536 tokens: past
/// that a batch is one launch's worth for any model this engine runs, and
/// the cap on sentences (`batch_size`) binds first.
pub(crate) fn token_budget(
    free: u64,
    beams: usize,
    layers: usize,
    d_model: usize,
    vocab: usize,
    elem_bytes: usize,
) -> usize {
    let kv = layers * 2 * d_model * elem_bytes;
    let per_row = kv * (1 + 2 * 2) + vocab * 4 * 2 / 4;
    let per_token = (beams.max(1) * per_row).max(1) as u64;
    ((free / 2) / per_token).clamp(1024, 65_536) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_ids_map_through_visible_devices() {
        assert_eq!(nvml_target(None, 1), Ok(Target::Index(1)));
        assert_eq!(nvml_target(Some(""), 0), Ok(Target::Index(0)));
        assert_eq!(nvml_target(Some("3,1"), 0), Ok(Target::Index(3)));
        assert_eq!(nvml_target(Some("3, 1"), 1), Ok(Target::Index(1)));
        let uuid = "GPU-0a3023a4-b6e3-1f27-c9ba-716a8eb7b58a";
        assert_eq!(
            nvml_target(Some(&format!("{uuid},2")), 0),
            Ok(Target::Uuid(uuid.into()))
        );
        assert!(
            nvml_target(Some("GPU-8f3e"), 0).is_err(),
            "a shortened UUID"
        );
        assert!(nvml_target(Some("0"), 1).unwrap_err().contains("fewer"));
        assert!(nvml_target(Some("MIG-1/2/3"), 0).is_err());
        assert!(nvml_target(None, -1).is_err());
    }

    #[test]
    fn budgets_grow_with_memory_and_shrink_with_beams_within_bounds() {
        // The demo model (3 layers, d_model 256, 8,001 tokens), fp32, beam 12.
        let demo = |free, beams| token_budget(free, beams, 3, 256, 8001, 4);
        let gib = 1u64 << 30;
        assert_eq!(demo(gib / 4, 12), 1024, "floor");
        assert_eq!(demo(140 * gib, 12), 65_536, "ceiling");
        let (a, b) = (demo(8 * gib, 12), demo(16 * gib, 12));
        assert!(a > 1024 && b > a && b < 65_536, "{a} {b}");
        assert!(demo(16 * gib, 4) > b);
        // fp16 caches leave room for more.
        assert!(token_budget(16 * gib, 12, 3, 256, 8001, 2) > b);
    }
}
