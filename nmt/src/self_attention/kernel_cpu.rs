//! The attention itself, one row at a time: for each head and query the
//! softmax over the keys of `q . k * scale + mask`, times v, over a row's
//! own cache ([`attend_row`]) or over keys and values read by slot
//! ([`attend_history`]), and the sizes of a call checked against each
//! other. The dot products and sums run in eight fixed lanes, so the scalar
//! build and the AVX2 one (chosen at run time) give the same bits.

/// The checked sizes of a `HistoryAttend` call.
pub(super) struct History {
    pub(super) positions: usize,
}

impl History {
    pub(super) fn of(
        q: &[i64],
        nk: &[i64],
        nv: &[i64],
        slots_shape: &[i64],
        slots: &[i64],
        hk: &[i64],
        hv: &[i64],
    ) -> Result<History, String> {
        let (rows, heads, dim) = match q {
            [r, h, 1, d] => (*r, *h, *d),
            _ => {
                return Err(format!(
                    "HistoryAttend: query {q:?} is not [rows, heads, 1, dim]"
                ))
            }
        };
        let [sr, positions] = slots_shape else {
            return Err(format!("HistoryAttend: slots {slots_shape:?} are not 2-d"));
        };
        let total = match hk {
            [n, h, d] if (*h, *d) == (heads, dim) && hv == hk => *n,
            _ => {
                return Err(format!(
                    "HistoryAttend: history {hk:?} and {hv:?} for query {q:?}"
                ))
            }
        };
        if nk != q || nv != q || *sr != rows {
            return Err(format!(
                "HistoryAttend: query {q:?}, new key {nk:?}, new value {nv:?} and slots {slots_shape:?} do not fit together"
            ));
        }
        if let Some(s) = slots.iter().find(|&&s| !(0..total).contains(&s)) {
            return Err(format!(
                "HistoryAttend: slot {s} is not one of the {total} in the history"
            ));
        }
        Ok(History {
            positions: *positions as usize,
        })
    }
}

/// One row's keys and values: earlier positions from the history by slot,
/// the last one new.
pub(super) struct HistoryRow<'a> {
    pub(super) slots: &'a [i64],
    pub(super) hk: &'a [f32],
    pub(super) hv: &'a [f32],
    pub(super) new_k: &'a [f32],
    pub(super) new_v: &'a [f32],
}

/// [`attend_row`] over keys and values gathered by slot, in the same order
/// and with the same arithmetic, so the same bits.
pub(super) fn attend_history(
    s: &Shape,
    scale: f32,
    q: &[f32],
    at: HistoryRow<'_>,
    mask: Option<&[f32]>,
    out: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the features were detected on this CPU.
            return unsafe { attend_history_avx2(s, scale, q, at, mask, out) };
        }
    }
    attend_history_generic::<false>(s, scale, q, at, mask, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn attend_history_avx2(
    s: &Shape,
    scale: f32,
    q: &[f32],
    at: HistoryRow<'_>,
    mask: Option<&[f32]>,
    out: &mut [f32],
) {
    attend_history_generic::<true>(s, scale, q, at, mask, out)
}

/// Position by position, all heads at once: a slot's heads lie together
/// (`[slots, heads, dim]`), so each position is one contiguous read of
/// heads x dim values rather than one per head at different times.
#[inline(always)]
fn attend_history_generic<'a_, const AVX2: bool>(
    s: &Shape,
    scale: f32,
    q: &[f32],
    at: HistoryRow<'a_>,
    mask: Option<&[f32]>,
    out: &mut [f32],
) {
    let (d, n, heads) = (s.dim, s.keys, s.heads);
    let width = heads * d;
    let [_, mh, _, mk] = s.mask_strides;
    // Position j's keys or values, all heads: from its slot, or new.
    let at_pos = |hist: &'a_ [f32], new: &'a_ [f32], j: usize| -> &'a_ [f32] {
        match at.slots.get(j) {
            Some(&slot) => &hist[slot as usize * width..(slot as usize + 1) * width],
            None => new,
        }
    };
    let keys = |j| at_pos(at.hk, at.new_k, j);
    let values = |j| at_pos(at.hv, at.new_v, j);
    // p[h * n + j]: head h's score, then weight, of position j.
    let mut p = vec![0f32; heads * n];
    for j in 0..n {
        let k = keys(j);
        for h in 0..heads {
            p[h * n + j] = dot::<AVX2>(&q[h * d..(h + 1) * d], &k[h * d..(h + 1) * d]) * scale;
        }
    }
    for (h, ph) in p.chunks_exact_mut(n).enumerate() {
        if let Some(m) = mask {
            for (j, pj) in ph.iter_mut().enumerate() {
                *pj += m[h * mh + j * mk];
            }
        }
        let max = lanes(ph, f32::NEG_INFINITY, f32::max);
        for pj in ph.iter_mut() {
            *pj = crate::fastmath::exp(*pj - max);
        }
        let sum = lanes(ph, 0.0, |a, b| a + b);
        for pj in ph.iter_mut() {
            *pj /= sum;
        }
    }
    out.fill(0.0);
    for j in 0..n {
        let v = values(j);
        for h in 0..heads {
            let w = p[h * n + j];
            for (oj, vj) in out[h * d..(h + 1) * d]
                .iter_mut()
                .zip(&v[h * d..(h + 1) * d])
            {
                *oj += w * vj;
            }
        }
    }
}

/// The sizes of one call, checked against each other: q [rows, heads,
/// queries, dim], k and v [rows, heads, keys, dim], the mask broadcast to
/// [rows, heads, queries, keys] (each axis 1 or full; with `cut`, its last
/// axis may be longer and is cut to the keys).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Shape {
    pub(super) rows: usize,
    pub(super) heads: usize,
    pub(super) queries: usize,
    pub(super) keys: usize,
    pub(super) dim: usize,
    /// The mask's strides over [row, head, query, key] (0 where broadcast).
    pub(super) mask_strides: [usize; 4],
}

impl Shape {
    pub(super) fn of(
        q: &[i64],
        k: &[i64],
        v: &[i64],
        mask: Option<&[i64]>,
        cut: bool,
    ) -> Result<Shape, String> {
        let dims = |what: &str, s: &[i64]| -> Result<[usize; 4], String> {
            let v: Vec<usize> = s
                .iter()
                .map(|&d| usize::try_from(d).ok())
                .collect::<Option<_>>()
                .ok_or_else(|| format!("Attend: {what} {s:?}"))?;
            v.try_into()
                .map_err(|_| format!("Attend: {what} {s:?} is not 4-d"))
        };
        let [rows, heads, queries, dim] = dims("query", q)?;
        let kd = dims("key", k)?;
        let keys = kd[2];
        if kd != [rows, heads, keys, dim] || dims("value", v)? != kd || keys == 0 || dim == 0 {
            return Err(format!(
                "Attend: query {q:?}, key {k:?} and value {v:?} do not fit together"
            ));
        }
        let full = [rows, heads, queries, keys];
        let mut mask_strides = [0; 4];
        if let Some(m) = mask {
            if m.len() > 4 {
                return Err(format!("Attend: mask {m:?} has more than 4 axes"));
            }
            let mut md = [1usize; 4];
            for (i, &d) in m.iter().enumerate() {
                md[4 - m.len() + i] =
                    usize::try_from(d).map_err(|_| format!("Attend: mask {m:?}"))?;
            }
            let mut stride = 1;
            for a in (0..4).rev() {
                let fits = md[a] == full[a] || (cut && a == 3 && md[a] > full[a]);
                if md[a] != 1 && fits {
                    mask_strides[a] = stride;
                } else if md[a] != 1 {
                    return Err(format!("Attend: mask {m:?} does not broadcast to {full:?}"));
                }
                stride *= md[a];
            }
        }
        Ok(Shape {
            rows,
            heads,
            queries,
            keys,
            dim,
            mask_strides,
        })
    }

    /// The values per row of the query (and output), and of the key (and
    /// value).
    pub(super) fn row_lens(&self) -> (usize, usize) {
        (
            self.heads * self.queries * self.dim,
            self.heads * self.keys * self.dim,
        )
    }
}

/// One row's inputs; the mask from the row's first value on.
#[derive(Clone, Copy)]
pub(super) struct Row<'a> {
    pub(super) q: &'a [f32],
    pub(super) k: &'a [f32],
    pub(super) v: &'a [f32],
    pub(super) mask: Option<&'a [f32]>,
}

/// One row of the output: for each head and query, the softmax over the
/// keys of `q . k * scale + mask`, times v. On x86-64 with AVX2 and FMA the same
/// code is built for 256-bit registers: the lanes add in the same order
/// (Rust never contracts a multiply and an add into an FMA) and `mul_add`
/// rounds once on every build, so all builds give the same bits.
pub(super) fn attend_row(s: &Shape, scale: f32, row: Row<'_>, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the features were detected on this CPU.
            return unsafe { attend_row_avx2(s, scale, row, out) };
        }
    }
    attend_row_generic::<false>(s, scale, row, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn attend_row_avx2(s: &Shape, scale: f32, row: Row<'_>, out: &mut [f32]) {
    attend_row_generic::<true>(s, scale, row, out)
}

/// `AVX2` only where called from a function built with AVX2 enabled
/// (`dot`).
#[inline(always)]
fn attend_row_generic<const AVX2: bool>(s: &Shape, scale: f32, row: Row<'_>, out: &mut [f32]) {
    let (d, n) = (s.dim, s.keys);
    let [_, mh, mq, mk] = s.mask_strides;
    let mut p = vec![0f32; n];
    for h in 0..s.heads {
        let (kh, vh) = (
            &row.k[h * n * d..(h + 1) * n * d],
            &row.v[h * n * d..(h + 1) * n * d],
        );
        for i in 0..s.queries {
            let qo = (h * s.queries + i) * d;
            let qi = &row.q[qo..qo + d];
            for (pj, kj) in p.iter_mut().zip(kh.chunks_exact(d)) {
                *pj = dot::<AVX2>(qi, kj) * scale;
            }
            if let Some(m) = row.mask {
                for (j, pj) in p.iter_mut().enumerate() {
                    *pj += m[h * mh + i * mq + j * mk];
                }
            }
            // Each pass on its own so that it vectorizes (the maximum is
            // the same in any order; the sum is taken in fixed lanes).
            let max = lanes(&p, f32::NEG_INFINITY, f32::max);
            for pj in p.iter_mut() {
                *pj = crate::fastmath::exp(*pj - max);
            }
            let sum = lanes(&p, 0.0, |a, b| a + b);
            let o = &mut out[qo..qo + d];
            o.fill(0.0);
            for (&pj, vj) in p.iter().zip(vh.chunks_exact(d)) {
                let w = pj / sum;
                for (oj, v) in o.iter_mut().zip(vj) {
                    *oj += w * v;
                }
            }
        }
    }
}

/// `x` folded with `f` in eight lanes, then the lanes in a fixed order.
#[inline(always)]
fn lanes(x: &[f32], init: f32, f: impl Fn(f32, f32) -> f32) -> f32 {
    let mut acc = [init; 8];
    let mut chunks = x.chunks_exact(8);
    for c in &mut chunks {
        for l in 0..8 {
            acc[l] = f(acc[l], c[l]);
        }
    }
    for (l, &v) in chunks.remainder().iter().enumerate() {
        acc[l] = f(acc[l], v);
    }
    f(
        f(f(acc[0], acc[4]), f(acc[1], acc[5])),
        f(f(acc[2], acc[6]), f(acc[3], acc[7])),
    )
}

/// A dot product in eight lanes (one 256-bit register), then the lanes in
/// a fixed order: the same on every CPU and build. `AVX2` is true only in
/// the kernels built with AVX2 enabled (the `*_avx2` functions, called
/// after detection), where the lanes are one register: the compiler left
/// to itself split them into pairs and singles (perf: a third of the
/// self-attention kernel on a scalar add; 3x faster here, same bits).
#[inline(always)]
fn dot<const AVX2: bool>(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if AVX2 {
        // SAFETY: AVX2 is only true inside functions built with AVX2
        // enabled, which run only where it was detected.
        return unsafe { dot_avx2(a, b) };
    }
    dot_lanes(a, b)
}

#[inline(always)]
fn dot_lanes(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let mut xs = a.chunks_exact(8);
    let mut ys = b.chunks_exact(8);
    for (x, y) in (&mut xs).zip(&mut ys) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    for (l, (x, y)) in xs.remainder().iter().zip(ys.remainder()).enumerate() {
        acc[l] += x * y;
    }
    reduce_lanes(acc)
}

#[inline(always)]
fn reduce_lanes(acc: [f32; 8]) -> f32 {
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))
}

/// `dot_lanes` in one 256-bit register: a multiply, then an add, per lane
/// (no FMA, as Rust never contracts them), so the same bits.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    use std::arch::x86_64::{
        _mm256_add_ps, _mm256_loadu_ps, _mm256_mul_ps, _mm256_setzero_ps, _mm256_storeu_ps,
    };
    let n = a.len().min(b.len());
    let whole = n - n % 8;
    let mut acc = _mm256_setzero_ps();
    let mut i = 0;
    while i < whole {
        // SAFETY: i + 8 <= whole <= both lengths.
        let (x, y) = unsafe {
            (
                _mm256_loadu_ps(a.as_ptr().add(i)),
                _mm256_loadu_ps(b.as_ptr().add(i)),
            )
        };
        acc = _mm256_add_ps(acc, _mm256_mul_ps(x, y));
        i += 8;
    }
    let mut l = [0f32; 8];
    // SAFETY: l holds 8 floats.
    unsafe { _mm256_storeu_ps(l.as_mut_ptr(), acc) };
    for (j, (x, y)) in a[whole..n].iter().zip(&b[whole..n]).enumerate() {
        l[j] += x * y;
    }
    reduce_lanes(l)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The textbook attention, in f64.
    fn reference(s: &Shape, scale: f32, q: &[f32], k: &[f32], v: &[f32], mask: &[f32]) -> Vec<f64> {
        let (d, n) = (s.dim, s.keys);
        let mut out = Vec::new();
        for r in 0..s.rows {
            for h in 0..s.heads {
                for i in 0..s.queries {
                    let qo = ((r * s.heads + h) * s.queries + i) * d;
                    let kv = (r * s.heads + h) * n * d;
                    let x: Vec<f64> = (0..n)
                        .map(|j| {
                            let dot: f64 = (0..d)
                                .map(|c| q[qo + c] as f64 * k[kv + j * d + c] as f64)
                                .sum();
                            let [a, b, c, e] = s.mask_strides;
                            dot * scale as f64 + mask[r * a + h * b + i * c + j * e] as f64
                        })
                        .collect();
                    let max = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = x.iter().map(|x| (x - max).exp()).collect();
                    let sum: f64 = e.iter().sum();
                    for c in 0..d {
                        out.push((0..n).map(|j| e[j] / sum * v[kv + j * d + c] as f64).sum());
                    }
                }
            }
        }
        out
    }

    #[test]
    fn attention_with_a_broadcast_mask_is_the_textbook_one() {
        // 3 rows, 2 heads, 1 query, 5 keys, dim 11 (a tail past the lanes).
        let (rows, heads, keys, dim) = (3usize, 2usize, 5usize, 11usize);
        let val = |i: usize, m: f32| ((i * 7919 % 23) as f32 - 11.0) * m;
        let q: Vec<f32> = (0..rows * heads * dim).map(|i| val(i, 0.13)).collect();
        let k: Vec<f32> = (0..rows * heads * keys * dim)
            .map(|i| val(i + 5, 0.07))
            .collect();
        let v: Vec<f32> = (0..rows * heads * keys * dim)
            .map(|i| val(i + 9, 0.3))
            .collect();
        // One mask row for all rows and heads; the last key hidden.
        let mask = [0.0, 0.0, -1.5, 0.0, f32::MIN];
        let s = Shape::of(
            &[3, 2, 1, 11],
            &[3, 2, 5, 11],
            &[3, 2, 5, 11],
            Some(&[1, 1, 1, 5]),
            false,
        )
        .unwrap();
        assert_eq!(s.mask_strides, [0, 0, 0, 1]);
        let run = |v: &[f32]| {
            let mut out = vec![0f32; rows * heads * dim];
            let (q_len, kv_len) = s.row_lens();
            for (r, o) in out.chunks_mut(q_len).enumerate() {
                let row = Row {
                    q: &q[r * q_len..(r + 1) * q_len],
                    k: &k[r * kv_len..(r + 1) * kv_len],
                    v: &v[r * kv_len..(r + 1) * kv_len],
                    mask: Some(&mask),
                };
                attend_row(&s, 0.125, row, o);
            }
            out
        };
        let out = run(&v);
        let want = reference(&s, 0.125, &q, &k, &v, &mask);
        for (i, (a, b)) in out.iter().zip(&want).enumerate() {
            assert!((*a as f64 - b).abs() < 1e-5, "value {i}: {a} against {b}");
        }
        // The hidden key weighs next to nothing (exp clamps at -87, so
        // about 1e-38): a large change of its value is lost in rounding.
        let mut v2 = v.clone();
        for r in 0..rows * heads {
            v2[(r * keys + 4) * dim] += 100.0;
        }
        assert_eq!(out, run(&v2));
        // The generic build gives the bits the dispatched one does.
        let (q_len, kv_len) = s.row_lens();
        let mut generic = vec![0f32; q_len];
        let row = Row {
            q: &q[q_len..2 * q_len],
            k: &k[kv_len..2 * kv_len],
            v: &v[kv_len..2 * kv_len],
            mask: Some(&mask),
        };
        attend_row_generic::<false>(&s, 0.125, row, &mut generic);
        assert_eq!(generic, out[q_len..2 * q_len]);
    }

    #[test]
    fn the_avx2_dot_gives_the_bits_of_the_lanes_it_stands_for() {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            let x: Vec<f32> = (0..71)
                .map(|i| ((i * 7919) % 97) as f32 / 9.7 - 5.0)
                .collect();
            let y: Vec<f32> = (0..71)
                .map(|i| ((i * 104729) % 89) as f32 / 3.1 - 14.0)
                .collect();
            for n in 0..=71 {
                let want = dot_lanes(&x[..n], &y[..n]);
                // SAFETY: AVX2 was detected.
                let got = unsafe { dot_avx2(&x[..n], &y[..n]) };
                assert_eq!(got.to_bits(), want.to_bits(), "length {n}");
            }
        }
    }

    #[test]
    fn shapes_that_do_not_fit_are_errors() {
        let (q, kv) = ([2i64, 4, 1, 8], [2i64, 4, 6, 8]);
        assert!(Shape::of(&q, &kv, &kv, None, false).is_ok());
        assert!(Shape::of(&q, &kv, &kv, Some(&[2, 1, 1, 6]), false).is_ok());
        // A longer last axis only where the op cuts it to the keys.
        assert!(Shape::of(&q, &kv, &kv, Some(&[2, 1, 1, 9]), false).is_err());
        let cut = Shape::of(&q, &kv, &kv, Some(&[2, 1, 1, 9]), true).unwrap();
        assert_eq!(cut.mask_strides, [9, 0, 0, 1]);
        assert!(Shape::of(&q, &kv, &kv, Some(&[2, 1, 1, 5]), true).is_err());
        assert!(Shape::of(&q, &kv, &kv, Some(&[6]), false).is_ok());
        let e = Shape::of(&q, &kv, &kv, Some(&[3, 1, 1, 6]), false).unwrap_err();
        assert!(e.contains("does not broadcast"), "{e}");
        assert!(Shape::of(&q, &kv, &kv, Some(&[1, 1, 1, 5]), false).is_err());
        assert!(Shape::of(&q, &[2, 4, 6, 7], &kv, None, false).is_err());
        assert!(Shape::of(&q, &kv, &[2, 4, 5, 8], None, false).is_err());
        assert!(Shape::of(&q, &[3, 4, 6, 8], &[3, 4, 6, 8], None, false).is_err());
        assert!(Shape::of(&[2, 4, 8], &kv, &kv, None, false).is_err());
        assert!(Shape::of(&q, &[2, 4, 0, 8], &[2, 4, 0, 8], None, false).is_err());
    }

    #[test]
    fn attending_by_slot_gives_the_gathered_caches_bits() {
        // 2 rows, 3 heads, dim 10, 4 earlier positions in a history of 6
        // slots, plus the new one; rows share some slots, as beams do.
        let (heads, dim, t, total) = (3usize, 10usize, 4usize, 6usize);
        let width = heads * dim;
        let val = |i: usize, m: f32| ((i * 7919 % 29) as f32 - 14.0) * m;
        let hk: Vec<f32> = (0..total * width).map(|i| val(i, 0.05)).collect();
        let hv: Vec<f32> = (0..total * width).map(|i| val(i + 3, 0.2)).collect();
        let nk: Vec<f32> = (0..2 * width).map(|i| val(i + 11, 0.05)).collect();
        let nv: Vec<f32> = (0..2 * width).map(|i| val(i + 17, 0.2)).collect();
        let q: Vec<f32> = (0..2 * width).map(|i| val(i + 23, 0.1)).collect();
        let slots: [i64; 8] = [0, 2, 3, 5, 1, 2, 4, 5];
        let mask = [0.0, -0.5, 0.0, 0.0, 0.0, 0.0, 0.0];
        let s = Shape::of(
            &[2, 3, 1, 10],
            &[2, 3, 5, 10],
            &[2, 3, 5, 10],
            Some(&[1, 1, 1, 7]),
            true,
        )
        .unwrap();
        for r in 0..2 {
            // The row's cache as GatherConcat would have built it.
            let gather = |hist: &[f32], new: &[f32]| -> Vec<f32> {
                let mut c = Vec::new();
                for h in 0..heads {
                    for &slot in &slots[r * t..(r + 1) * t] {
                        let o = slot as usize * width + h * dim;
                        c.extend_from_slice(&hist[o..o + dim]);
                    }
                    c.extend_from_slice(&new[r * width + h * dim..r * width + (h + 1) * dim]);
                }
                c
            };
            let (k, v) = (gather(&hk, &nk), gather(&hv, &nv));
            let row = Row {
                q: &q[r * width..(r + 1) * width],
                k: &k,
                v: &v,
                mask: Some(&mask),
            };
            let mut want = vec![0f32; width];
            attend_row(&s, 0.3, row, &mut want);
            let at = HistoryRow {
                slots: &slots[r * t..(r + 1) * t],
                hk: &hk,
                hv: &hv,
                new_k: &nk[r * width..(r + 1) * width],
                new_v: &nv[r * width..(r + 1) * width],
            };
            let mut got = vec![0f32; width];
            attend_history(
                &s,
                0.3,
                &q[r * width..(r + 1) * width],
                at,
                Some(&mask),
                &mut got,
            );
            assert_eq!(got, want, "row {r}");
        }
        // A slot beyond the history, and sizes that do not fit.
        let q4 = [2i64, 3, 1, 10];
        let h = [6i64, 3, 10];
        let e = History::of(&q4, &q4, &q4, &[2, 4], &[0, 1, 2, 6, 0, 0, 0, 0], &h, &h)
            .err()
            .unwrap();
        assert!(e.contains("slot 6"), "{e}");
        assert!(History::of(&q4, &q4, &q4, &[2, 4], &slots, &h, &h).is_ok());
        assert!(History::of(&q4, &q4, &q4, &[3, 4], &slots, &h, &h).is_err());
        assert!(History::of(&q4, &q4, &q4, &[2, 4], &slots, &[6, 3, 9], &[6, 3, 9]).is_err());
        assert!(History::of(&[2, 3, 2, 10], &q4, &q4, &[2, 4], &slots, &h, &h).is_err());
    }
}
