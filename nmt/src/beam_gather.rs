//! The beam reorder of the self-attention cache, moved into the decoder
//! call: a rewrite of an Optimum export's `decoder_with_past` graph, applied
//! at load, and the one custom operator it needs.
//!
//! Each decoding step copies the whole self-attention cache twice as
//! exported: the graph appends the new key and value with
//! `present = Concat(past, new)`, and the engine then gathers `present`'s
//! rows by beam parent for the next call. CTranslate2 does the same two
//! copies. Here the graph takes the previous call's `present` as it came
//! out, with the parents as one more input, and builds the new cache in one
//! pass: `present[r] = concat(past[parents[r]], new[r])` along the time
//! axis (`GatherConcat`, domain `ai.paraforge`). The values are the same
//! bits, copied once instead of twice; rows of finished sentences are
//! simply not gathered.
//!
//! Per layer it needs the export's `Concat(past_key_values.L.decoder.X,
//! new, axis=-2)` producing `present.L.decoder.X`, and every other reader
//! of the past to be a `Shape` whose only use is the time length (dimension
//! 2), which the gather keeps; the past's first dimension is now the last
//! call's row count. Where any of that does not hold the graph is left
//! alone and the engine reorders as before.
//!
//! The parts: `rewrite.rs` changes the graph, `op.rs` is the operator as
//! ONNX Runtime calls it, `kernel_cpu.rs` the copy itself.

mod kernel_cpu;
mod op;
mod rewrite;

pub(crate) use kernel_cpu::{gather_concat_row, out_shape};
pub(crate) use op::GatherConcat;
pub(crate) use rewrite::in_graph;

/// The graph input carrying each row's parent (int64, one per row).
pub(crate) const PARENTS: &str = "paraforge_beam_parents";
/// The operator's name in the crate's domain (`ops.rs`).
pub(crate) const OP: &str = "GatherConcat";
