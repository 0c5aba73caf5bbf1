//! The crate's own ONNX Runtime operators, in one domain (`ai.paraforge`),
//! registered here and nowhere else: `GatherConcat` (`beam_gather.rs`) and
//! `Attend`, `GatherAttend` and `HistoryAttend` (`self_attention.rs`), which
//! the rewritten decoder graphs call. Each operator's parts live beside its
//! rewrite: `op.rs` (the ONNX Runtime glue) and `kernel_cpu.rs` (the math).

use ort::operator::OperatorDomain;

/// The domain of every operator below.
pub(crate) const DOMAIN: &str = "ai.paraforge";

/// The custom-operator domain the rewritten graphs need.
pub(crate) fn operators() -> ort::Result<OperatorDomain> {
    OperatorDomain::new(DOMAIN)?
        .add(crate::beam_gather::GatherConcat)?
        .add(crate::self_attention::Attend)?
        .add(crate::self_attention::GatherAttend)?
        .add(crate::self_attention::HistoryAttend)
}

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
