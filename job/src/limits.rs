//! The bounds on what a job config or `translate` may ask for (beams,
//! sides, batches, streams and threads), checked before anything is
//! allocated for them; shared by the job config and the CLI.

/// Widest beam accepted (`model.beam`, `translate --beam`). Memory grows
/// with beam x batch size x vocabulary per decoding step; beams past a few
/// dozen do not improve translations, and 256 already needs gigabytes with
/// a full-size model. The engine also refuses a beam wider than the
/// model's vocabulary, which only it knows.
pub const MAX_BEAM: usize = 256;

/// Longest side accepted (`input.max_chars`). The readers hold a line of
/// up to 8 bytes per character of it (`bitext::max_line_bytes`); a million
/// characters is already far past any sentence a model translates.
pub const MAX_CHARS: usize = 1_000_000;

/// Most sentences per batch (`model.batch_size`, `translate --batch-size`);
/// larger batches only add padding and memory.
pub const MAX_BATCH_SIZE: usize = 1024;

/// Most padded source tokens per batch (`model.batch_tokens`,
/// `translate --batch-tokens`): a full batch of the longest inputs.
pub const MAX_BATCH_TOKENS: usize = MAX_BATCH_SIZE * 512;

/// ONNX Runtime threads are bounded by this many times the cores of the
/// machine that checks the config: more threads than cores never helps
/// (one per core is what 0 means), and a typo like 100000 would spend
/// minutes and gigabytes starting threads. The multiple leaves room for a
/// coordinator with fewer cores than its workers.
pub const THREADS_PER_CORE: usize = 4;

/// The cores of this machine (1 when they cannot be told).
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// Most decoder streams per worker (each holds a copy of the model).
pub const MAX_STREAMS: usize = 64;

/// Whether `streams` decoders of `threads` threads each (0 counting as
/// one) fit this machine: 1 to [`MAX_STREAMS`] streams, and threads in all
/// within [`max_threads`]. Shared by the job config and `translate`.
pub fn check_streams(threads: usize, streams: usize) -> Result<(), String> {
    if streams == 0 || streams > MAX_STREAMS {
        return Err(format!(
            "{streams} streams: must be between 1 and {MAX_STREAMS}"
        ));
    }
    let total = threads.max(1) * streams;
    if total > max_threads() {
        return Err(format!(
            "{streams} streams x {} threads is {total} threads, more than the limit of {} ({THREADS_PER_CORE} x the {} cores of this machine)",
            threads.max(1),
            max_threads(),
            cores()
        ));
    }
    Ok(())
}

/// Most threads accepted on this machine: [`THREADS_PER_CORE`] x [`cores`].
pub fn max_threads() -> usize {
    THREADS_PER_CORE * cores()
}
