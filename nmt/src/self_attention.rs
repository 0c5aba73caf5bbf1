//! The decoder's self-attention over its cache as one operator per layer:
//! rewrites of an Optimum export's `decoder_with_past` graph, applied at
//! load on the CPU, and the kernels they need.
//!
//! As exported, each layer attends with `MatMul(q, Mul(Transpose(present_k),
//! c)) -> Add(mask) -> Softmax -> MatMul(., present_v)`. With one query per
//! row, ONNX Runtime runs those two MatMuls as rows x heads separate
//! 1 x head_dim GEMMs of a few dozen columns each, and their per-call cost
//! dominates: in an ONNX Runtime profile of the int8 demo model they took
//! 16% of the decoder graph's time for under 1% of its multiply-adds
//! (BENCHMARKS.md). [`in_graph`] makes the six nodes one, `Attend(q,
//! present_k, present_v, mask)` (domain `ai.paraforge`); where the cache is
//! also reordered in the graph (`beam_gather.rs`), [`with_gather`] fuses the
//! two into `GatherAttend`, which attends to each row's new cache right
//! after writing it.
//!
//! The result is the same attention up to float rounding (the dot products
//! and sums run in another order than ONNX Runtime's, and the exponential
//! is `fastmath`'s), and it does not depend on the batch: each row's values
//! come from that row alone, in a fixed order, with the same bits on every
//! x86-64 CPU. fp32 output was identical to the export's on the 200
//! held-out benchmark sentences and on the parity tests.
//!
//! Per layer it needs: `present.L.decoder.key` read by one `Transpose(perm
//! 0,1,3,2)` (and otherwise only by `Shape`s), optionally scaled by a
//! scalar constant, as the second input of a `MatMul`; that product,
//! optionally plus a mask, into a last-axis `Softmax`; the probabilities as
//! the first input of a `MatMul` whose second is `present.L.decoder.value`,
//! its only reader. Each intermediate has that one reader and is no graph
//! output. Where any layer differs the graph is left alone.
//!
//! The parts: `rewrite.rs` changes the graphs, `op.rs` holds the three
//! operators as ONNX Runtime calls them, `kernel_cpu.rs` the attention
//! itself (scalar and AVX2 builds that give the same bits).

mod kernel_cpu;
mod op;
mod rewrite;

pub(crate) use op::{Attend, GatherAttend, HistoryAttend};
pub(crate) use rewrite::{history_input, in_graph, with_gather, with_history, SLOTS};

/// The operators' names in the crate's domain (`ops.rs`).
pub(crate) const OP: &str = "Attend";
pub(crate) const GATHER_OP: &str = "GatherAttend";
pub(crate) const HISTORY_OP: &str = "HistoryAttend";
