//! What the crate's own ONNX Runtime operators share: their domain
//! (`ai.paraforge`) and how their kernels write an output's rows side by
//! side on ONNX Runtime's threads. The operators are `GatherConcat`
//! (`beam_gather/`) and `Attend`, `GatherAttend` and `HistoryAttend`
//! (`self_attention/`), each beside its rewrite as `op.rs` (the ONNX Runtime
//! glue) and `kernel_cpu.rs` (the math); `rewrites.rs` registers them, in
//! one place, for the sessions of the graphs it rewrites.

/// The domain of every operator of the crate.
pub(crate) const DOMAIN: &str = "ai.paraforge";

/// The rows are cut into this many chunks for ONNX Runtime's pool (its
/// `num_batch`: at most this many run at once, whatever the thread count);
/// a row is a few tens of kilobytes.
pub(crate) const ROW_BATCHES: usize = 8;

/// The output's base pointer, shared with the pool's threads.
pub(crate) struct RowsOut(pub(crate) *mut f32);

impl RowsOut {
    /// A method rather than the field, so that closures capture the whole
    /// (Sync) wrapper.
    pub(crate) fn row(&self, offset: usize) -> *mut f32 {
        self.0.wrapping_add(offset)
    }
}

// SAFETY: the threads write disjoint rows (see the kernels).
unsafe impl Sync for RowsOut {}
