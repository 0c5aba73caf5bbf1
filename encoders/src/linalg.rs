//! Matrix products on the `gemm` crate for the hand-written kernels: the
//! fused LSTM op's, and the trainer's negative search.

use ndarray::{ArrayView2, ArrayViewMut2, LinalgScalar};

/// c = alpha a b + beta c, beta 0 or 1 (ndarray's `general_mat_mul`) on
/// the `gemm` crate, which burn-flex links too. Measured: the fused LSTM
/// op's products (at most a few hundred rows by 4h = 200 columns) ran
/// faster than on ndarray's matrixmultiply, which packs both operands on
/// every call (docs/bench/HISTORY.md, "Training speed").
pub fn general_mat_mul<T: LinalgScalar + PartialEq>(
    alpha: T,
    a: &ArrayView2<T>,
    b: &ArrayView2<T>,
    beta: T,
    c: &mut ArrayViewMut2<T>,
) {
    let ((m, k), (k2, n)) = (a.dim(), b.dim());
    assert_eq!(k, k2, "lstm_scan: inner dimensions differ");
    assert_eq!(c.dim(), (m, n), "lstm_scan: product shape");
    assert!(beta == T::zero() || beta == T::one(), "beta is 0 or 1");
    if m == 0 || n == 0 {
        return;
    }
    let (cs, ast, bst) = (c.strides().to_vec(), a.strides(), b.strides());
    // Safety: the views guarantee that every element their dimensions and
    // strides reach is in bounds, and `c` is borrowed mutably, so it
    // overlaps neither input; the shapes agree (checked above).
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            cs[1],
            cs[0],
            beta == T::one(),
            a.as_ptr(),
            ast[1],
            ast[0],
            b.as_ptr(),
            bst[1],
            bst[0],
            T::one(),
            alpha,
            false,
            false,
            false,
            gemm::Parallelism::None,
        )
    }
}
