//! The work over each row of logits that runs every decoding step:
//! log-sum-exp (for log_softmax) and top-k selection. A row is the whole
//! target vocabulary (62,509 for opus-mt-cs-en) and there are batch x beams
//! rows per step, so these loops are written to vectorize: lane-wise
//! maxima, a branch-free exp, and two passes over the row (maximum and
//! top k, then the sum) instead of one with a running maximum (together
//! with the AVX-512 build: search time 0.78 -> 0.60 s on the demo export,
//! 200 sentences at 2 threads, same output). On x86-64 an AVX-512 or
//! AVX2+FMA build of the same code is chosen at run time.

const CHUNK: usize = 16;
/// Chunks per block of the top-k scan (at most 64: one bit each in a u64).
const BLOCK: usize = 32;

/// Returns ln(sum(exp(x))) of a row of logits and leaves in `out` the `k`
/// largest values with their indices, largest first, ties to the lower
/// index, skipping indices in `banned`.
pub fn log_sum_exp_top_k(x: &[f32], k: usize, banned: &[u32], out: &mut Vec<(f32, u32)>) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the feature was detected on this CPU.
            return unsafe { fused_avx512(x, k, banned, out) };
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the features were detected on this CPU.
            return unsafe { fused_avx2(x, k, banned, out) };
        }
    }
    fused_generic(x, k, banned, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn fused_avx512(x: &[f32], k: usize, banned: &[u32], out: &mut Vec<(f32, u32)>) -> f32 {
    fused_generic(x, k, banned, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn fused_avx2(x: &[f32], k: usize, banned: &[u32], out: &mut Vec<(f32, u32)>) -> f32 {
    fused_generic(x, k, banned, out)
}

#[inline(always)]
fn fused_generic(x: &[f32], k: usize, banned: &[u32], out: &mut Vec<(f32, u32)>) -> f32 {
    out.clear();
    let mut top = TopK {
        k,
        banned,
        floor: f32::NEG_INFINITY,
    };
    // Pass 1: the row's maximum, lane-wise (no per-chunk horizontal
    // reduction), and the top k. The maximum runs over a block of chunks
    // with nothing but compares in the loop, noting which chunks hold a
    // lane that beats the k-th best so far; only those are then looked at
    // element by element, in index order. With the offers inside the loop
    // the lane maxima lived on the stack around the call and every chunk
    // waited on a store and reload of them (perf: 40% of this function on
    // that reload; the demo export's search_s 0.69-0.77 -> 0.50-0.58 s,
    // 200 sentences, 2 streams, same output).
    let mut lanes = [f32::NEG_INFINITY; CHUNK];
    let chunks = x.len() / CHUNK;
    let mut c0 = 0;
    while c0 < chunks {
        // Short first blocks: until the floor is set every chunk is a hit.
        let c1 = chunks.min(c0 + if c0 < BLOCK { 8 } else { BLOCK });
        let floor = top.floor;
        let mut hits = 0u64;
        for (b, c) in x[c0 * CHUNK..c1 * CHUNK].chunks_exact(CHUNK).enumerate() {
            let mut beats = false;
            for i in 0..CHUNK {
                lanes[i] = if c[i] > lanes[i] { c[i] } else { lanes[i] };
                beats |= c[i] >= floor;
            }
            hits |= (beats as u64) << b;
        }
        if k > 0 {
            while hits != 0 {
                let at = (c0 + hits.trailing_zeros() as usize) * CHUNK;
                hits &= hits - 1;
                for (j, &v) in x[at..at + CHUNK].iter().enumerate() {
                    top.offer(v, at + j, out);
                }
            }
        }
        c0 = c1;
    }
    let base = chunks * CHUNK;
    for (j, &v) in x[base..].iter().enumerate() {
        lanes[j] = lanes[j].max(v);
        top.offer(v, base + j, out);
    }
    top.cut(out);
    let m = lanes.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if m == f32::NEG_INFINITY || m.is_nan() {
        return f32::NEG_INFINITY;
    }
    // Pass 2 (the row is still in cache): sum of exp(x - max) per lane.
    let mut acc = [0.0f32; CHUNK];
    let mut chunks = x.chunks_exact(CHUNK);
    for c in &mut chunks {
        for i in 0..CHUNK {
            acc[i] += exp(c[i] - m);
        }
    }
    for (j, &v) in chunks.remainder().iter().enumerate() {
        acc[j] += exp(v - m);
    }
    // Pairwise reduction keeps the rounding error of 62k terms small.
    let mut w = CHUNK;
    while w > 1 {
        w /= 2;
        for i in 0..w {
            acc[i] += acc[i + w];
        }
    }
    m + acc[0].ln()
}

/// Top-k selection with a rejection floor: values that beat the floor are
/// appended to `out` unsorted, and only when `out` holds 4k of them is it
/// cut back to the best k (which raises the floor). Sorted insertion of
/// every value that beat the floor was most of the search's time (0.68 ->
/// 0.54 s on the demo export at 1 thread): for values in random order,
/// about k ln(n/k) of them beat the floor, some 140 for k = 24 and an
/// 8k-word row.
struct TopK<'a> {
    k: usize,
    banned: &'a [u32],
    /// Once `out` has held k values: the k-th best so far. A later value
    /// equal to it has a higher index and loses the tie, so it is refused.
    floor: f32,
}

impl TopK<'_> {
    #[inline(always)]
    fn offer(&mut self, v: f32, i: usize, out: &mut Vec<(f32, u32)>) {
        // NaN never compares greater, so it is never selected.
        if !(v > self.floor || (self.floor == f32::NEG_INFINITY && v == self.floor))
            || self.banned.contains(&(i as u32))
        {
            return;
        }
        out.push((v, i as u32));
        if out.len() >= 4 * self.k.max(1) {
            self.cut(out);
        }
    }

    /// Keeps the best k, best first, ties to the lower index.
    fn cut(&mut self, out: &mut Vec<(f32, u32)>) {
        let by_rank = |a: &(f32, u32), b: &(f32, u32)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));
        if out.len() > self.k {
            out.select_nth_unstable_by(self.k, by_rank);
            out.truncate(self.k);
        }
        out.sort_unstable_by(by_rank);
        if out.len() == self.k {
            if let Some(&(v, _)) = out.last() {
                self.floor = v;
            }
        }
    }
}

/// exp(x) for x <= 0 to about 1 ulp (Cephes' expf polynomial), branch-free
/// so that loops over it vectorize. Underflows to 0 below -87.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // max/min, not clamp: same result for numbers, and it vectorizes.
    #[allow(clippy::manual_clamp)]
    let x = x.max(-87.0).min(88.0);
    // floor(y + 0.5), not round(): round-half-away has no SIMD instruction.
    let n = x.mul_add(LOG2E, 0.5).floor();
    let r = x - n * LN2_HI - n * LN2_LO;
    let p = 1.987_569_1e-4f32;
    let p = p.mul_add(r, 1.398_199_9e-3);
    let p = p.mul_add(r, 8.333_452e-3);
    let p = p.mul_add(r, 4.166_579_6e-2);
    let p = p.mul_add(r, 1.666_666_5e-1);
    let p = p.mul_add(r, 5e-1);
    let p = (p * r).mul_add(r, r) + 1.0;
    // 2^n from the bits of n + 1.5 * 2^23 (n sits in the low mantissa
    // bits): integer ops that vectorize, unlike a saturating float cast.
    let t = (n + 12_582_912.0f32).to_bits();
    let bits = t.wrapping_sub(0x4B40_0000).wrapping_add(127) << 23;
    p * f32::from_bits(bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_is_accurate_over_the_range_logits_take() {
        let mut worst = 0.0f64;
        let mut x = -80.0f32;
        while x <= 0.0 {
            let got = exp(x) as f64;
            let want = (x as f64).exp();
            worst = worst.max(((got - want) / want).abs());
            x += 0.001_3;
        }
        assert!(worst < 3e-7, "worst relative error {worst}");
    }

    #[test]
    fn log_sum_exp_matches_f64() {
        let x: Vec<f32> = (0..62_509)
            .map(|i| ((i * 7919) % 1000) as f32 / 37.0 - 13.0)
            .collect();
        let m = x.iter().copied().fold(f32::MIN, f32::max) as f64;
        let want = m + x.iter().map(|&v| (v as f64 - m).exp()).sum::<f64>().ln();
        let mut out = Vec::new();
        let got = log_sum_exp_top_k(&x, 3, &[], &mut out) as f64;
        assert!((got - want).abs() < 1e-5, "{got} vs {want}");
        // A maximum late in the row exercises the rescaling.
        let mut y = x.clone();
        y.reverse();
        let got = log_sum_exp_top_k(&y, 3, &[], &mut out) as f64;
        assert!((got - want).abs() < 1e-5, "{got} vs {want}");
        assert_eq!(
            log_sum_exp_top_k(&[f32::NEG_INFINITY; 3], 2, &[], &mut out),
            f32::NEG_INFINITY
        );
    }

    #[test]
    fn top_k_equals_a_full_sort_on_rows_full_of_ties() {
        let mut seed = 12345u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as u32
        };
        let mut out = Vec::new();
        for len in [7usize, 100, 8001] {
            for k in [1usize, 5, 24] {
                // Values from a small set: ties everywhere, also at the k-th place.
                let x: Vec<f32> = (0..len).map(|_| (next() % 40) as f32 / 4.0 - 5.0).collect();
                let banned = [3u32, 17, (len as u32) - 1];
                let mut want: Vec<(f32, u32)> = x
                    .iter()
                    .enumerate()
                    .map(|(i, &v)| (v, i as u32))
                    .filter(|(_, i)| !banned.contains(i))
                    .collect();
                want.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
                want.truncate(k);
                log_sum_exp_top_k(&x, k, &banned, &mut out);
                assert_eq!(out, want, "len {len}, k {k}");
            }
        }
    }

    #[test]
    fn top_k_orders_values_breaks_ties_by_index_and_skips_banned() {
        let x = [1.0, 5.0, 3.0, 5.0, 9.0, -1.0, 3.0, -2.0, 7.0];
        let mut out = Vec::new();
        log_sum_exp_top_k(&x, 4, &[4], &mut out);
        assert_eq!(out, vec![(7.0, 8), (5.0, 1), (5.0, 3), (3.0, 2)]);
        log_sum_exp_top_k(&x, 20, &[], &mut out);
        assert_eq!(out.len(), 9, "the whole row, padding left out");
        // A long row exercises the chunked path.
        let long: Vec<f32> = (0..1000).map(|i| ((i * 37) % 101) as f32).collect();
        log_sum_exp_top_k(&long, 3, &[], &mut out);
        assert_eq!(out.iter().map(|c| c.0).collect::<Vec<_>>(), vec![100.0; 3]);
        assert!(out[0].1 < out[1].1 && out[1].1 < out[2].1);
    }
}
