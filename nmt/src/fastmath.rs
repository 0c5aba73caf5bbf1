//! The two passes over each row of logits that run every decoding step:
//! log-sum-exp (for log_softmax) and top-k selection. A row is the whole
//! target vocabulary (62,509 for opus-mt-cs-en) and there are batch x beams
//! rows per step, so these loops are written to vectorize: a branch-free
//! exp and chunked maxima. On x86-64 an AVX2+FMA build of the same code is
//! chosen at run time.

const CHUNK: usize = 16;

/// ln(sum(exp(x))) of a non-empty row, computed as max + ln(sum(exp(x - max))).
pub fn log_sum_exp(x: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the features were detected on this CPU.
            return unsafe { log_sum_exp_avx2(x) };
        }
    }
    log_sum_exp_generic(x)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn log_sum_exp_avx2(x: &[f32]) -> f32 {
    log_sum_exp_generic(x)
}

#[inline(always)]
fn log_sum_exp_generic(x: &[f32]) -> f32 {
    let max = max_of(x);
    if !max.is_finite() {
        return max;
    }
    let mut acc = [0.0f32; CHUNK];
    let mut chunks = x.chunks_exact(CHUNK);
    for c in &mut chunks {
        for i in 0..CHUNK {
            acc[i] += exp(c[i] - max);
        }
    }
    let mut sum: f32 = chunks.remainder().iter().map(|&v| exp(v - max)).sum();
    // Pairwise reduction keeps the rounding error of 62k terms small.
    let mut w = CHUNK;
    while w > 1 {
        w /= 2;
        for i in 0..w {
            acc[i] += acc[i + w];
        }
    }
    sum += acc[0];
    max + sum.ln()
}

#[inline(always)]
fn max_of(x: &[f32]) -> f32 {
    let mut m = [f32::NEG_INFINITY; CHUNK];
    let mut chunks = x.chunks_exact(CHUNK);
    for c in &mut chunks {
        for i in 0..CHUNK {
            m[i] = if c[i] > m[i] { c[i] } else { m[i] };
        }
    }
    let mut best = chunks
        .remainder()
        .iter()
        .copied()
        .fold(f32::NEG_INFINITY, f32::max);
    for v in m {
        best = best.max(v);
    }
    best
}

/// exp(x) for x <= 0 to about 1 ulp (Cephes' expf polynomial), branch-free
/// so that loops over it vectorize. Underflows to 0 below -87.
#[inline(always)]
fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    let x = x.clamp(-87.0, 88.0);
    let n = (x * LOG2E).round();
    let r = x - n * LN2_HI - n * LN2_LO;
    let p = 1.987_569_1e-4f32;
    let p = p.mul_add(r, 1.398_199_9e-3);
    let p = p.mul_add(r, 8.333_452e-3);
    let p = p.mul_add(r, 4.166_579_6e-2);
    let p = p.mul_add(r, 1.666_666_5e-1);
    let p = p.mul_add(r, 5e-1);
    let p = (p * r).mul_add(r, r) + 1.0;
    let bits = ((n as i32 + 127) as u32) << 23;
    p * f32::from_bits(bits)
}

/// The `k` largest values of `x` with their indices, largest first, ties
/// to the lower index; indices in `banned` are skipped. `out` is replaced.
pub fn top_k(x: &[f32], k: usize, banned: &[u32], out: &mut Vec<(f32, u32)>) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the feature was detected on this CPU.
            return unsafe { top_k_avx2(x, k, banned, out) };
        }
    }
    top_k_generic(x, k, banned, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn top_k_avx2(x: &[f32], k: usize, banned: &[u32], out: &mut Vec<(f32, u32)>) {
    top_k_generic(x, k, banned, out)
}

#[inline(always)]
fn top_k_generic(x: &[f32], k: usize, banned: &[u32], out: &mut Vec<(f32, u32)>) {
    out.clear();
    if k == 0 {
        return;
    }
    let mut floor = f32::NEG_INFINITY;
    let offer = |v: f32, i: usize, out: &mut Vec<(f32, u32)>, floor: &mut f32| {
        // NaN never compares greater, so it is never selected.
        if !(v > *floor || (out.len() < k && v >= *floor)) || banned.contains(&(i as u32)) {
            return;
        }
        // Equal values keep index order: insert after them.
        let pos = out.partition_point(|&(w, _)| w >= v);
        if pos >= k {
            return;
        }
        out.insert(pos, (v, i as u32));
        if out.len() > k {
            out.pop();
        }
        if out.len() == k {
            *floor = out[k - 1].0;
        }
    };
    let mut base = 0;
    let mut chunks = x.chunks_exact(CHUNK);
    for c in &mut chunks {
        let m = max_of(c);
        if m > floor || out.len() < k {
            for (j, &v) in c.iter().enumerate() {
                offer(v, base + j, out, &mut floor);
            }
        }
        base += CHUNK;
    }
    for (j, &v) in chunks.remainder().iter().enumerate() {
        offer(v, base + j, out, &mut floor);
    }
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
        let got = log_sum_exp(&x) as f64;
        assert!((got - want).abs() < 1e-5, "{got} vs {want}");
        assert_eq!(log_sum_exp(&[f32::NEG_INFINITY; 3]), f32::NEG_INFINITY);
    }

    #[test]
    fn top_k_orders_values_breaks_ties_by_index_and_skips_banned() {
        let x = [1.0, 5.0, 3.0, 5.0, 9.0, -1.0, 3.0, f32::NAN, 7.0];
        let mut out = Vec::new();
        top_k(&x, 4, &[4], &mut out);
        assert_eq!(out, vec![(7.0, 8), (5.0, 1), (5.0, 3), (3.0, 2)]);
        top_k(&x, 20, &[], &mut out);
        assert_eq!(out.len(), 8, "all but the NaN");
        // A long row exercises the chunked path.
        let long: Vec<f32> = (0..1000).map(|i| ((i * 37) % 101) as f32).collect();
        top_k(&long, 3, &[], &mut out);
        assert_eq!(out.iter().map(|c| c.0).collect::<Vec<_>>(), vec![100.0; 3]);
        assert!(out[0].1 < out[1].1 && out[1].1 < out[2].1);
    }
}
