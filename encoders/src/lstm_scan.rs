//! The LSTM over a whole batch as one autodiff operation: the
//! input projection, every time step and the backward pass through time in
//! one call, registered with burn's autodiff through a backend extension so
//! it stays inside the training graph.
//!
//! Why a hand-written backward: written with burn's tensor operations, one
//! step of the cell is about thirty operations on [n, 4h] tensors, each a
//! dispatch, an allocation and an autodiff node, forward and backward; at
//! 50 dimensions that bookkeeping, not arithmetic, kept training at 0.11x
//! PyTorch; with this op LSTM and BLSTM train faster than PyTorch per core
//! at 1 and 2 threads (docs/bench/HISTORY.md, "Training speed"). Here
//! each step is one matrix product into preallocated buffers and a loop
//! over the gates, and sentences are sorted by length so a step only
//! touches the sentences still running (the packed sequences of PyTorch's
//! LSTM), so the padding of a batch costs nothing. A batch is split into
//! groups of sentences that run side by side on the thread pool
//! (`GROUP_ROWS`): a recurrence's steps are too small to split.
//!
//! The cell is the one of [`crate::neural`] (gates i, f, o, g in that order
//! of the 4h columns, state carried over padding, a backward direction that
//! starts at each sentence's last token), which calls [`scan`] with its
//! weights: this file knows nothing of the model's parameter layout. The output is every step's hidden
//! state, [n, len, h], zero at padding. Gradients are checked against
//! finite differences in f64 and the outputs against the burn-op cell (the
//! tests below and neural.rs's gradient check).
//!
//! Only the Flex backend (CPU) has the kernel; on any other device (the
//! `cuda` feature) [`crate::neural`] keeps its burn-op cell.

use std::cell::Cell;
use std::fmt;
use std::sync::Arc;

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::flex::FlexTensor;
use burn::backend::tensor::FloatTensor;
use burn::backend::{backend_extension, Autodiff, Backend, Dispatch, DispatchTensorKind, Flex};
use burn::tensor::{DType, Shape, Tensor, TensorData};
use ndarray::{ArrayView2, ArrayViewMut2, LinalgScalar};

use crate::linalg::general_mat_mul;

/// The fused LSTM as a backend operation.
#[backend_extension(Flex, Autodiff)]
pub trait LstmScanBackend: Backend {
    /// `x` [n, len, d], `w_ih` [d, 4h], `b` [1, 4h], `w_hh` [h, 4h]; sentence
    /// i has `lens[i]` tokens (right-padded). Returns the hidden states [n,
    /// len, h], zero at padding.
    fn lstm_scan(
        x: FloatTensor<Self>,
        w_ih: FloatTensor<Self>,
        b: FloatTensor<Self>,
        w_hh: FloatTensor<Self>,
        lens: Vec<usize>,
        reverse: bool,
        out_gate: bool,
    ) -> FloatTensor<Self>;
}

impl LstmScanBackend for Flex {
    fn lstm_scan(
        x: FlexTensor,
        w_ih: FlexTensor,
        b: FlexTensor,
        w_hh: FlexTensor,
        lens: Vec<usize>,
        reverse: bool,
        out_gate: bool,
    ) -> FlexTensor {
        forward(
            &x, &w_ih, &b, &w_hh, lens, reverse, out_gate, false, GROUP_ROWS,
        )
        .0
    }
}

/// What the backward pass needs: the forward's buffers and the weights.
#[derive(Clone)]
struct State {
    saved: Arc<Saved>,
    w_ih: FlexTensor,
    w_hh: FlexTensor,
}

impl fmt::Debug for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LstmScanState")
            .field("plan", self.saved.plan())
            .finish()
    }
}

#[derive(Debug)]
struct ScanBackward;

impl Backward<Flex, 4> for ScanBackward {
    type State = State;

    fn backward(self, ops: Ops<State, 4>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [n_x, n_wih, n_b, n_whh] = ops.parents;
        let grad = grads.consume::<Flex>(&ops.node);
        let [dx, dwih, db, dwhh] = backward(&ops.state, grad);
        for (node, g) in [(n_x, dx), (n_wih, dwih), (n_b, db), (n_whh, dwhh)] {
            if let Some(node) = node {
                grads.register::<Flex>(node.id, g);
            }
        }
    }
}

impl<C: CheckpointStrategy> LstmScanBackend for Autodiff<Flex, C> {
    fn lstm_scan(
        x: FloatTensor<Self>,
        w_ih: FloatTensor<Self>,
        b: FloatTensor<Self>,
        w_hh: FloatTensor<Self>,
        lens: Vec<usize>,
        reverse: bool,
        out_gate: bool,
    ) -> FloatTensor<Self> {
        let prep = ScanBackward
            .prepare::<C>([x.node(), w_ih.node(), b.node(), w_hh.node()])
            .compute_bound()
            .stateful();
        let (xp, wi, bp, wh) = (
            x.primitive(),
            w_ih.primitive(),
            b.primitive(),
            w_hh.primitive(),
        );
        match prep {
            OpsKind::Tracked(prep) => {
                let (out, saved) =
                    forward(xp, wi, bp, wh, lens, reverse, out_gate, true, GROUP_ROWS);
                let state = State {
                    saved: Arc::new(saved.expect("kept")),
                    w_ih: wi.clone(),
                    w_hh: wh.clone(),
                };
                prep.finish(state, out)
            }
            OpsKind::UnTracked(prep) => {
                prep.finish(forward(xp, wi, bp, wh, lens, reverse, out_gate, false, GROUP_ROWS).0)
            }
        }
    }
}

thread_local! {
    static REFERENCE: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with the burn-op cell instead of this kernel (the equality
/// tests and benchmarks compare the two).
pub fn with_burn_ops<R>(f: impl FnOnce() -> R) -> R {
    let before = REFERENCE.with(|r| r.replace(true));
    let out = f();
    REFERENCE.with(|r| r.set(before));
    out
}

/// Whether [`scan`] runs for tensors like `t`: on the Flex backend, with or
/// without autodiff, in f32 or f64, unless inside [`with_burn_ops`].
pub fn available(t: &Tensor<2>) -> bool {
    if REFERENCE.with(|r| r.get()) || !matches!(t.dtype(), DType::F32 | DType::F64) {
        return false;
    }
    #[allow(unreachable_patterns)]
    match t.clone().into_dispatch().kind {
        DispatchTensorKind::Flex(_) => true,
        DispatchTensorKind::Autodiff(inner) => matches!(*inner, DispatchTensorKind::Flex(_)),
        _ => false,
    }
}

/// The hidden states [n, len, h] of the LSTM (`w_ih` [d, 4h], `b` [1, 4h],
/// `w_hh` [h, 4h]) over `x` [n, len, d], sentence i being its first
/// `lens[i]` steps; zero at padding. With `reverse` each sentence is read
/// from its last token; without `out_gate` the output gate is fixed at 1.
pub fn scan(
    x: Tensor<3>,
    w_ih: Tensor<2>,
    b: Tensor<2>,
    w_hh: Tensor<2>,
    lens: Vec<usize>,
    reverse: bool,
    out_gate: bool,
) -> Tensor<3> {
    Tensor::from_dispatch(<Dispatch as LstmScanBackend>::lstm_scan(
        x.into_dispatch(),
        w_ih.into_dispatch(),
        b.into_dispatch(),
        w_hh.into_dispatch(),
        lens,
        reverse,
        out_gate,
    ))
}

/// The order in which one group's tokens are processed: the group's
/// sentences sorted by decreasing length, step k running the first
/// `active[k]` of them, its rows stored at `off[k]..off[k] + active[k]` of
/// the group's packed buffers. `n`, `len` and `lens` are the whole batch's.
#[derive(Debug, Clone)]
struct Plan {
    n: usize,
    len: usize,
    d: usize,
    h: usize,
    lens: Vec<usize>,
    order: Vec<usize>,
    active: Vec<usize>,
    off: Vec<usize>,
    reverse: bool,
    out_gate: bool,
}

impl Plan {
    fn new(
        [n, len, d]: [usize; 3],
        h: usize,
        lens: Vec<usize>,
        mut order: Vec<usize>,
        reverse: bool,
        out_gate: bool,
    ) -> Plan {
        assert_eq!(lens.len(), n, "one length per sentence");
        assert!(lens.iter().all(|&l| l <= len), "a length exceeds the batch");
        // Stable, so equal lengths keep their batch order.
        order.sort_by_key(|&i| std::cmp::Reverse(lens[i]));
        let steps = order.first().map_or(0, |&i| lens[i]);
        let mut active = Vec::with_capacity(steps);
        let mut off = vec![0];
        let mut a = order.len();
        for k in 0..steps {
            while a > 0 && lens[order[a - 1]] <= k {
                a -= 1;
            }
            active.push(a);
            off.push(off[k] + a);
        }
        Plan {
            n,
            len,
            d,
            h,
            lens,
            order,
            active,
            off,
            reverse,
            out_gate,
        }
    }

    fn tokens(&self) -> usize {
        *self.off.last().unwrap()
    }

    /// (sentence, position) of row r of step k.
    #[inline]
    fn pos(&self, k: usize, r: usize) -> (usize, usize) {
        let i = self.order[r];
        (
            i,
            if self.reverse {
                self.lens[i] - 1 - k
            } else {
                k
            },
        )
    }
}

/// The forward pass's buffers of each group, packed rows in [`Plan`] order.
enum Saved {
    F32(Vec<Buffers<f32>>),
    F64(Vec<Buffers<f64>>),
}

impl Saved {
    fn plan(&self) -> &Plan {
        match self {
            Saved::F32(b) => &b[0].plan,
            Saved::F64(b) => &b[0].plan,
        }
    }
}

/// Sentences per group: a batch's sentences are split into groups of about
/// this many, each run through every time step on its own (on its own
/// thread when the pool has several), the weight gradients summed over the
/// groups in group order. A recurrence has nothing else to spread over
/// threads at 50 dimensions: one step's products are too small to split.
/// The split depends on the batch alone, never on the thread count, so a
/// run gives the same model on any number of threads.
const GROUP_ROWS: usize = 64;

/// The batch's sentences dealt into groups of about `rows`: sorted by
/// decreasing length and dealt round-robin, so every group gets a like mix
/// of long and short sentences and the groups' work is balanced.
fn groups(lens: &[usize], rows: usize) -> Vec<Vec<usize>> {
    let n = lens.len();
    let g = n.div_ceil(rows.max(1)).max(1);
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(lens[i]));
    let mut out = vec![Vec::with_capacity(n / g + 1); g];
    for (k, i) in order.into_iter().enumerate() {
        out[k % g].push(i);
    }
    out
}

/// `f` over `items`, on the thread pool when there is more than one.
fn map_groups<I: Sync, R: Send>(items: &[I], f: impl Fn(&I) -> R + Sync + Send) -> Vec<R> {
    use rayon::prelude::*;
    if items.len() > 1 && rayon::current_num_threads() > 1 {
        items.par_iter().map(f).collect()
    } else {
        items.iter().map(f).collect()
    }
}

struct Buffers<T> {
    plan: Plan,
    /// The inputs [tokens, d].
    x: Vec<T>,
    /// Gate activations [tokens, 4h]: sigmoid(i, f, o), tanh(g).
    acts: Vec<T>,
    /// Cell states and their tanh [tokens, h].
    c: Vec<T>,
    tc: Vec<T>,
    /// Hidden states [tokens, h].
    hs: Vec<T>,
}

fn dims<const D: usize>(t: &FlexTensor) -> [usize; D] {
    let s = t.layout().shape();
    assert_eq!(
        s.num_dims(),
        D,
        "lstm_scan: rank {} where {D} expected",
        s.num_dims()
    );
    std::array::from_fn(|i| s[i])
}

/// A contiguous view of `t`'s values, copied only if it is not contiguous.
fn values<T: Real>(t: &FlexTensor) -> std::borrow::Cow<'_, [T]> {
    if let Some(v) = T::slice(t) {
        std::borrow::Cow::Borrowed(v)
    } else {
        std::borrow::Cow::Owned(T::slice(&t.to_contiguous()).expect("contiguous").to_vec())
    }
}

fn tensor<T: Real>(v: Vec<T>, shape: Vec<usize>) -> FlexTensor {
    FlexTensor::from_data(TensorData::new(v, Shape::from(shape)))
}

#[allow(clippy::too_many_arguments)]
fn forward(
    x: &FlexTensor,
    w_ih: &FlexTensor,
    b: &FlexTensor,
    w_hh: &FlexTensor,
    lens: Vec<usize>,
    reverse: bool,
    out_gate: bool,
    keep: bool,
    rows: usize,
) -> (FlexTensor, Option<Saved>) {
    let xd = dims::<3>(x);
    let [h, h4] = dims::<2>(w_hh);
    assert_eq!(h4, 4 * h, "lstm_scan: w_hh must be [h, 4h]");
    assert_eq!(
        dims::<2>(w_ih),
        [xd[2], 4 * h],
        "lstm_scan: w_ih must be [d, 4h]"
    );
    assert_eq!(dims::<2>(b), [1, 4 * h], "lstm_scan: b must be [1, 4h]");
    let plans: Vec<Plan> = groups(&lens, rows)
        .into_iter()
        .map(|g| Plan::new(xd, h, lens.clone(), g, reverse, out_gate))
        .collect();
    let shape = vec![xd[0], xd[1], h];
    match x.dtype() {
        DType::F32 => {
            let (out, bufs) =
                forward_groups::<f32>(plans, &values(x), &values(w_ih), &values(b), &values(w_hh));
            (tensor(out, shape), keep.then_some(Saved::F32(bufs)))
        }
        DType::F64 => {
            let (out, bufs) =
                forward_groups::<f64>(plans, &values(x), &values(w_ih), &values(b), &values(w_hh));
            (tensor(out, shape), keep.then_some(Saved::F64(bufs)))
        }
        other => panic!("lstm_scan: {other:?} tensors are not supported"),
    }
}

/// Every group's forward pass, and the hidden states [n, len, h] unpacked
/// from them.
fn forward_groups<T: Real>(
    plans: Vec<Plan>,
    x: &[T],
    w_ih: &[T],
    b: &[T],
    w_hh: &[T],
) -> (Vec<T>, Vec<Buffers<T>>) {
    let bufs = map_groups(&plans, |p| forward_typed(p.clone(), x, w_ih, b, w_hh));
    let (n, len, h) = (plans[0].n, plans[0].len, plans[0].h);
    let mut out = vec![T::zero(); n * len * h];
    for buf in &bufs {
        let p = &buf.plan;
        for (k, &a) in p.active.iter().enumerate() {
            for r in 0..a {
                let (i, t) = p.pos(k, r);
                let row = p.off[k] + r;
                out[(i * len + t) * h..(i * len + t + 1) * h]
                    .copy_from_slice(&buf.hs[row * h..(row + 1) * h]);
            }
        }
    }
    (out, bufs)
}

fn backward(state: &State, grad: FlexTensor) -> [FlexTensor; 4] {
    let (p, wi, wh) = (state.saved.plan(), &state.w_ih, &state.w_hh);
    let shapes = [
        vec![p.n, p.len, p.d],
        vec![p.d, 4 * p.h],
        vec![1, 4 * p.h],
        vec![p.h, 4 * p.h],
    ];
    let out = match &*state.saved {
        Saved::F32(bufs) => backward_groups::<f32>(bufs, &values(wi), &values(wh), &values(&grad))
            .map(|v| (Some(v), None)),
        Saved::F64(bufs) => backward_groups::<f64>(bufs, &values(wi), &values(wh), &values(&grad))
            .map(|v| (None, Some(v))),
    };
    let mut k = 0;
    out.map(|(a, b)| {
        let s = shapes[k].clone();
        k += 1;
        match (a, b) {
            (Some(v), _) => tensor(v, s),
            (_, Some(v)) => tensor(v, s),
            _ => unreachable!(),
        }
    })
}

/// Gradients of (x, w_ih, b, w_hh) given the output's gradient `dout` [n,
/// len, h]: every group's, the weights' summed in group order.
fn backward_groups<T: Real>(
    bufs: &[Buffers<T>],
    w_ih: &[T],
    w_hh: &[T],
    dout: &[T],
) -> [Vec<T>; 4] {
    let parts = map_groups(bufs, |b| backward_typed(b, w_ih, w_hh, dout));
    let p = &bufs[0].plan;
    let (n, len, d, h4) = (p.n, p.len, p.d, 4 * p.h);
    let mut dx = vec![T::zero(); n * len * d];
    let mut dw_ih = vec![T::zero(); d * h4];
    let mut db = vec![T::zero(); h4];
    let mut dw_hh = vec![T::zero(); p.h * h4];
    for (buf, [dxs, wi, bb, wh]) in bufs.iter().zip(parts) {
        let p = &buf.plan;
        for (k, &a) in p.active.iter().enumerate() {
            for r in 0..a {
                let (i, t) = p.pos(k, r);
                let row = p.off[k] + r;
                dx[(i * len + t) * d..(i * len + t + 1) * d]
                    .copy_from_slice(&dxs[row * d..(row + 1) * d]);
            }
        }
        for (sum, part) in [(&mut dw_ih, wi), (&mut db, bb), (&mut dw_hh, wh)] {
            for (s, v) in sum.iter_mut().zip(part) {
                *s = *s + v;
            }
        }
    }
    [dx, dw_ih, db, dw_hh]
}

fn mat<T>(v: &[T], rows: usize, cols: usize) -> ArrayView2<'_, T> {
    ArrayView2::from_shape((rows, cols), v).expect("matrix shape")
}

fn mat_mut<T>(v: &mut [T], rows: usize, cols: usize) -> ArrayViewMut2<'_, T> {
    ArrayViewMut2::from_shape((rows, cols), v).expect("matrix shape")
}

fn forward_typed<T: Real>(plan: Plan, x: &[T], w_ih: &[T], b: &[T], w_hh: &[T]) -> Buffers<T> {
    let (d, h, len) = (plan.d, plan.h, plan.len);
    let (h4, tokens) = (4 * h, plan.tokens());
    // Pack the inputs; every row's pre-activation starts at the bias.
    let mut xs = vec![T::zero(); tokens * d];
    let mut acts = vec![T::zero(); tokens * h4];
    for (k, &a) in plan.active.iter().enumerate() {
        for r in 0..a {
            let (i, t) = plan.pos(k, r);
            let row = plan.off[k] + r;
            xs[row * d..(row + 1) * d]
                .copy_from_slice(&x[(i * len + t) * d..(i * len + t + 1) * d]);
            acts[row * h4..(row + 1) * h4].copy_from_slice(b);
        }
    }
    if tokens > 0 {
        general_mat_mul(
            T::one(),
            &mat(&xs, tokens, d),
            &mat(w_ih, d, h4),
            T::one(),
            &mut mat_mut(&mut acts, tokens, h4),
        );
    }
    let mut c = vec![T::zero(); tokens * h];
    let mut tc = vec![T::zero(); tokens * h];
    let mut hs = vec![T::zero(); tokens * h];
    let w = mat(w_hh, h, h4);
    for (k, &a) in plan.active.iter().enumerate() {
        let lo = plan.off[k];
        if k > 0 {
            let prev = plan.off[k - 1];
            general_mat_mul(
                T::one(),
                &mat(&hs[prev * h..(prev + a) * h], a, h),
                &w,
                T::one(),
                &mut mat_mut(&mut acts[lo * h4..(lo + a) * h4], a, h4),
            );
        }
        let z = &mut acts[lo * h4..(lo + a) * h4];
        for row in z.chunks_exact_mut(h4) {
            let (s, g) = row.split_at_mut(3 * h);
            T::sigmoid(s);
            T::tanh(g);
        }
        let (before, now) = c.split_at_mut(lo * h);
        let c_prev = (k > 0).then(|| &before[plan.off[k - 1] * h..]);
        let now = &mut now[..a * h];
        for r in 0..a {
            let gates = &z[r * h4..(r + 1) * h4];
            let (gi, rest) = gates.split_at(h);
            let (gf, rest) = rest.split_at(h);
            let (go, gg) = rest.split_at(h);
            let cr = &mut now[r * h..(r + 1) * h];
            match c_prev {
                Some(cp) => {
                    let cp = &cp[r * h..(r + 1) * h];
                    for j in 0..h {
                        cr[j] = gf[j] * cp[j] + gi[j] * gg[j];
                    }
                }
                None => {
                    for j in 0..h {
                        cr[j] = gi[j] * gg[j];
                    }
                }
            }
            let tr = &mut tc[(lo + r) * h..(lo + r + 1) * h];
            tr.copy_from_slice(cr);
            T::tanh(tr);
            let hr = &mut hs[(lo + r) * h..(lo + r + 1) * h];
            if plan.out_gate {
                for j in 0..h {
                    hr[j] = go[j] * tr[j];
                }
            } else {
                hr.copy_from_slice(tr);
            }
        }
    }
    Buffers {
        plan,
        x: xs,
        acts,
        c,
        tc,
        hs,
    }
}

/// One group's gradients of (x, w_ih, b, w_hh) given the output's gradient
/// `dout` [n, len, h]; x's as the group's packed rows [tokens, d].
fn backward_typed<T: Real>(buf: &Buffers<T>, w_ih: &[T], w_hh: &[T], dout: &[T]) -> [Vec<T>; 4] {
    let p = &buf.plan;
    let (len, d, h) = (p.len, p.d, p.h);
    let (h4, tokens) = (4 * h, p.tokens());
    let mut dz = vec![T::zero(); tokens * h4];
    // The gradients arriving from the next step, in sorted order.
    let mut dh_next = vec![T::zero(); p.order.len() * h];
    let mut dc = vec![T::zero(); p.order.len() * h];
    let w = mat(w_hh, h, h4);
    let one = T::one();
    for (k, &a) in p.active.iter().enumerate().rev() {
        let lo = p.off[k];
        for r in 0..a {
            let row = lo + r;
            let (i, t) = p.pos(k, r);
            let go_ = &dout[(i * len + t) * h..(i * len + t + 1) * h];
            let gates = &buf.acts[row * h4..(row + 1) * h4];
            let tc = &buf.tc[row * h..(row + 1) * h];
            let c_prev =
                (k > 0).then(|| &buf.c[(p.off[k - 1] + r) * h..(p.off[k - 1] + r + 1) * h]);
            let dzr = &mut dz[row * h4..(row + 1) * h4];
            let dhr = &dh_next[r * h..(r + 1) * h];
            let dcr = &mut dc[r * h..(r + 1) * h];
            for j in 0..h {
                let (gi, gf, go, gg) = (gates[j], gates[h + j], gates[2 * h + j], gates[3 * h + j]);
                let dh = go_[j] + dhr[j];
                let (o, dout_gate) = if p.out_gate {
                    (go, dh * tc[j] * go * (one - go))
                } else {
                    (one, T::zero())
                };
                let dct = dcr[j] + dh * o * (one - tc[j] * tc[j]);
                let cp = c_prev.map_or(T::zero(), |cp| cp[j]);
                dzr[j] = dct * gg * gi * (one - gi);
                dzr[h + j] = dct * cp * gf * (one - gf);
                dzr[2 * h + j] = dout_gate;
                dzr[3 * h + j] = dct * gi * (one - gg * gg);
                dcr[j] = dct * gf;
            }
        }
        if k > 0 {
            general_mat_mul(
                one,
                &mat(&dz[lo * h4..(lo + a) * h4], a, h4),
                &w.t(),
                T::zero(),
                &mut mat_mut(&mut dh_next[..a * h], a, h),
            );
        }
    }
    let mut dw_hh = vec![T::zero(); h * h4];
    let mut dw_ih = vec![T::zero(); d * h4];
    let mut db = vec![T::zero(); h4];
    let mut dxs = vec![T::zero(); tokens * d];
    if tokens > 0 {
        // Each step's rows against the previous step's hidden states.
        let first = p.off.get(1).copied().unwrap_or(tokens);
        let mut prev = vec![T::zero(); (tokens - first) * h];
        for k in 1..p.active.len() {
            let (a, lo, from) = (p.active[k], p.off[k] - first, p.off[k - 1]);
            prev[lo * h..(lo + a) * h].copy_from_slice(&buf.hs[from * h..(from + a) * h]);
        }
        if tokens > first {
            general_mat_mul(
                one,
                &mat(&prev, tokens - first, h).t(),
                &mat(&dz[first * h4..], tokens - first, h4),
                T::zero(),
                &mut mat_mut(&mut dw_hh, h, h4),
            );
        }
        general_mat_mul(
            one,
            &mat(&buf.x, tokens, d).t(),
            &mat(&dz, tokens, h4),
            T::zero(),
            &mut mat_mut(&mut dw_ih, d, h4),
        );
        for row in dz.chunks_exact(h4) {
            for (s, &v) in db.iter_mut().zip(row) {
                *s = *s + v;
            }
        }
        general_mat_mul(
            one,
            &mat(&dz, tokens, h4),
            &mat(w_ih, d, h4).t(),
            T::zero(),
            &mut mat_mut(&mut dxs, tokens, d),
        );
    }
    [dxs, dw_ih, db, dw_hh]
}

/// f32 or f64, with the cell's activations over slices.
pub(crate) trait Real:
    LinalgScalar + PartialOrd + Send + Sync + fmt::Debug + burn::tensor::Element
{
    fn slice(t: &FlexTensor) -> Option<&[Self]>;
    /// In place: 1 / (1 + e^-x).
    fn sigmoid(v: &mut [Self]);
    /// In place.
    fn tanh(v: &mut [Self]);
}

impl Real for f32 {
    fn slice(t: &FlexTensor) -> Option<&[f32]> {
        t.as_slice::<f32>()
    }
    fn sigmoid(v: &mut [f32]) {
        sigmoid_f32(v)
    }
    fn tanh(v: &mut [f32]) {
        tanh_f32(v)
    }
}

/// e^x for f32 without branches or calls, so that loops over it vectorise
/// (libm's expf and tanhf do not): Cephes' expf (range reduction by ln 2,
/// a degree-7 polynomial, the power of two built in the exponent bits),
/// within 2 ulp of the exact value over the range where the result is a
/// normal number; x is clamped to [-87, 88].
#[inline(always)]
fn exp_f32(x: f32) -> f32 {
    let x = x.clamp(-87.0, 88.0);
    // Rounded to the nearest integer by the 1.5 * 2^23 shift, which also
    // leaves that integer in the low mantissa bits.
    let shifted = x * std::f32::consts::LOG2_E + 12_582_912.0;
    let n = shifted - 12_582_912.0;
    let k = shifted.to_bits() as i32 - 0x4b40_0000;
    let r = x - n * 0.693_359_4 + n * 2.121_944_4e-4;
    let z = r * r;
    let mut y = 1.987_569_1e-4;
    y = y * r + 1.398_199_9e-3;
    y = y * r + 8.333_452e-3;
    y = y * r + 4.166_579_6e-2;
    y = y * r + 0.166_666_65;
    y = y * r + 0.5;
    y = y * z + r + 1.0;
    y * f32::from_bits(((k + 127) << 23) as u32)
}

#[multiversion::multiversion(targets("x86_64+avx2", "x86_64+sse4.1"))]
fn sigmoid_f32(v: &mut [f32]) {
    for x in v {
        *x = 1.0 / (1.0 + exp_f32(-*x));
    }
}

/// tanh x = sign(x) (1 - e^-2|x|) / (1 + e^-2|x|).
#[multiversion::multiversion(targets("x86_64+avx2", "x86_64+sse4.1"))]
fn tanh_f32(v: &mut [f32]) {
    for x in v {
        let e = exp_f32(-2.0 * x.abs());
        *x = ((1.0 - e) / (1.0 + e)).copysign(*x);
    }
}

impl Real for f64 {
    fn slice(t: &FlexTensor) -> Option<&[f64]> {
        t.as_slice::<f64>()
    }
    fn sigmoid(v: &mut [f64]) {
        for x in v {
            *x = 1.0 / (1.0 + (-*x).exp());
        }
    }
    fn tanh(v: &mut [f64]) {
        for x in v {
            *x = x.tanh();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::neural::{Arch, Batch, Net, Shape};
    use burn::tensor::Device;
    use rand::{Rng, SeedableRng};

    const LSTMS: [Arch; 6] = [
        Arch::Lstm,
        Arch::LstmNoO,
        Arch::Blstm,
        Arch::BlstmConcat,
        Arch::BlstmMax,
        Arch::Gran,
    ];

    fn f64s<const D: usize>(t: Tensor<D>) -> Vec<f64> {
        t.into_data().convert::<f64>().try_to_vec::<f64>().unwrap()
    }

    /// A random network of `arch` and a batch of `n` sentences of 1 to
    /// `max_len` tokens (one empty-free batch; lengths all differ somewhere).
    fn setup(
        arch: Arch,
        dim: usize,
        n: usize,
        max_len: usize,
        seed: u64,
        dev: &Device,
        dtype: DType,
    ) -> (Net, Vec<Vec<u32>>) {
        let vocab = 30;
        let shape = Shape {
            unit_parts: false,
            parts_by_dimension: false,
            arch,
            vocab,
            word_dim: dim,
            hidden: dim,
            layers: 1,
            parts: Vec::new(),
            trigrams: 0,
            trigram_dim: 0,
        };
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let mut vals =
            |k: usize| -> Vec<f64> { (0..k).map(|_| rng.random_range(-0.9..0.9)).collect() };
        let emb = vals(vocab * dim);
        let comp: Vec<(Vec<f64>, usize, usize)> = crate::neural::expected_dims(&shape)
            .into_iter()
            .map(|(_, [r, c])| (vals(r * c), r, c))
            .collect();
        let net = Net::from_values(shape, &emb, &comp, dev, dtype);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed + 1);
        let mut sents: Vec<Vec<u32>> = (0..n)
            .map(|_| {
                let l = rng.random_range(1..=max_len);
                (0..l).map(|_| rng.random_range(0..vocab as u32)).collect()
            })
            .collect();
        sents[0] = (0..max_len as u32).map(|w| w % vocab as u32).collect();
        (net, sents)
    }

    fn batch(sents: &[Vec<u32>]) -> Batch {
        let refs: Vec<&[u32]> = sents.iter().map(|s| s.as_slice()).collect();
        Batch::new(&refs)
    }

    /// The kernel's sentence embeddings equal the burn-op cell's, with and
    /// without autodiff, in f32 (to 1e-5) and f64 (to 1e-12), for every
    /// encoder built on the LSTM cell.
    #[test]
    fn forward_equals_the_burn_op_cell() {
        for (dtype, tol) in [(DType::F32, 1e-5), (DType::F64, 1e-12)] {
            for dev in [Device::flex(), Device::flex().autodiff()] {
                for arch in LSTMS {
                    for (dim, n, max_len) in [(3, 7, 5), (50, 40, 30)] {
                        let (net, sents) = setup(arch, dim, n, max_len, 3, &dev, dtype);
                        let b = batch(&sents);
                        assert!(available(&net.comp[0].val()));
                        let fused = f64s(net.forward(&b));
                        let reference = f64s(with_burn_ops(|| net.forward(&b)));
                        assert_eq!(fused.len(), reference.len());
                        let worst = fused
                            .iter()
                            .zip(&reference)
                            .map(|(a, b)| (a - b).abs())
                            .fold(0.0, f64::max);
                        assert!(
                            worst < tol,
                            "{arch} {dtype:?} dim {dim}: outputs differ by {worst:e}"
                        );
                    }
                }
            }
        }
    }

    /// A loss that weighs every output differently and not linearly (the
    /// trainer's margin loss is not the network's to use here).
    fn loss(g: Tensor<2>) -> Tensor<1> {
        let [n, d] = g.dims();
        let w: Vec<f64> = (0..n * d)
            .map(|k| ((k * 7 % 11) as f64 - 5.0) / 5.0)
            .collect();
        let w = Tensor::<2>::from_data(TensorData::new(w, [n, d]), (&g.device(), g.dtype()));
        (g.clone() * w).sum() + g.tanh().square().sum()
    }

    /// The kernel's gradients of a loss equal burn's through the burn-op
    /// cell (f64, to 1e-10 relative), for every parameter; the trainer's
    /// gradient check tests both against finite differences.
    #[test]
    fn gradients_equal_the_burn_op_cell() {
        let dev = Device::flex().autodiff();
        for arch in LSTMS {
            let (net, sents) = setup(arch, 6, 16, 9, 11, &dev, DType::F64);
            let b = batch(&sents);
            let grads_of = |burn_ops: bool| {
                let g = if burn_ops {
                    with_burn_ops(|| net.forward(&b))
                } else {
                    net.forward(&b)
                };
                let grads = loss(g).backward();
                let mut all = vec![f64s(net.emb.val().grad(&grads).unwrap())];
                for p in &net.comp {
                    all.push(f64s(p.val().grad(&grads).unwrap()));
                }
                all
            };
            let (fused, reference) = (grads_of(false), grads_of(true));
            for (k, (a, b)) in fused.iter().zip(&reference).enumerate() {
                for (x, y) in a.iter().zip(b) {
                    let err = (x - y).abs() / (1e-8 + x.abs().max(y.abs()));
                    assert!(
                        err < 1e-10,
                        "{arch}: parameter {k}: kernel {x}, burn ops {y}"
                    );
                }
            }
        }
    }

    /// The vectorisable f32 activations agree with std's to a few ulp.
    #[test]
    fn f32_activations_match_std() {
        let mut xs: Vec<f32> = (-4000..=4000).map(|i| i as f32 * 0.0037).collect();
        xs.extend([
            -1e4, -200.0, -88.5, -87.0, -1e-30, 0.0, 1e-30, 87.0, 88.5, 200.0, 1e4,
        ]);
        let (mut s, mut t) = (xs.clone(), xs.clone());
        <f32 as Real>::sigmoid(&mut s);
        <f32 as Real>::tanh(&mut t);
        for ((&x, &s), &t) in xs.iter().zip(&s).zip(&t) {
            let (es, et) = (1.0 / (1.0 + (-x as f64).exp()), (x as f64).tanh());
            if es < 1e-36 {
                assert!(s < 1e-36, "sigmoid({x}) = {s}, not {es}");
            } else {
                assert!(
                    (s as f64 - es).abs() <= 4e-7 * es,
                    "sigmoid({x}) = {s}, not {es}"
                );
            }
            assert!((t as f64 - et).abs() <= 1.2e-7, "tanh({x}) = {t}, not {et}");
            assert_eq!(
                t.is_sign_negative(),
                x.is_sign_negative(),
                "tanh({x}) = {t}"
            );
        }
    }

    /// A sentence's hidden states do not depend on the rest of the batch
    /// (padding and sorting change nothing).
    #[test]
    fn a_sentence_alone_gives_the_same_states() {
        let dev = Device::flex();
        let (net, sents) = setup(Arch::Blstm, 5, 9, 8, 5, &dev, DType::F64);
        let all = f64s(net.forward(&batch(&sents)));
        for (i, s) in sents.iter().enumerate() {
            let one = f64s(net.forward(&batch(std::slice::from_ref(s))));
            for (a, b) in one.iter().zip(&all[i * 5..(i + 1) * 5]) {
                assert!(
                    (a - b).abs() < 1e-12,
                    "sentence {i}: {a} alone, {b} in the batch"
                );
            }
        }
    }

    /// Splitting a batch into groups (run side by side on the thread pool)
    /// changes the hidden states and the gradients only in the last bits
    /// (the products' kernels differ with the number of rows, and the
    /// weights' gradients are summed per group); every sentence lands in
    /// exactly one group.
    #[test]
    fn groups_change_only_the_last_bits() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let (n, len, d, h) = (23, 9, 4, 3);
        let mut t = |shape: Vec<usize>| {
            let k = shape.iter().product();
            tensor::<f64>((0..k).map(|_| rng.random_range(-0.9..0.9)).collect(), shape)
        };
        let (x, w_ih, b, w_hh) = (
            t(vec![n, len, d]),
            t(vec![d, 4 * h]),
            t(vec![1, 4 * h]),
            t(vec![h, 4 * h]),
        );
        let dout = t(vec![n, len, h]);
        let lens: Vec<usize> = (0..n).map(|i| (i * 7) % (len + 1)).collect();
        let mut all: Vec<usize> = groups(&lens, 3).concat();
        all.sort();
        assert_eq!(all, (0..n).collect::<Vec<_>>());
        let v = |t: &FlexTensor| values::<f64>(t).to_vec();
        for (reverse, out_gate) in [(false, true), (true, true), (false, false)] {
            let run = |rows: usize| {
                let (out, saved) = forward(
                    &x,
                    &w_ih,
                    &b,
                    &w_hh,
                    lens.clone(),
                    reverse,
                    out_gate,
                    true,
                    rows,
                );
                let state = State {
                    saved: Arc::new(saved.unwrap()),
                    w_ih: w_ih.clone(),
                    w_hh: w_hh.clone(),
                };
                let grads = backward(&state, dout.clone());
                (v(&out), grads.map(|g| v(&g)))
            };
            let (out1, g1) = run(usize::MAX);
            let (out3, g3) = run(3);
            let close = |a: &[f64], b: &[f64], what: &str| {
                assert_eq!(a.len(), b.len());
                for (x, y) in a.iter().zip(b) {
                    assert!(
                        (x - y).abs() < 1e-12,
                        "{what}: {x} in one group, {y} in eight"
                    );
                }
            };
            close(&out1, &out3, "hidden states");
            for k in 0..4 {
                close(&g1[k], &g3[k], &format!("gradient {k}"));
            }
        }
    }
}
