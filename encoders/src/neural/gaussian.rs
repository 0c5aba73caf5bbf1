//! The Gaussian encoders' forward pass (Chen and Gimpel, 2020): a mean
//! and a variance per sentence, and the KL term of the prior.

use burn::tensor::{Int, Tensor};

use super::{Arch, Net};

impl Net {
    /// The Gaussian encoders (Chen and Gimpel, 2020): [mean, variance] of the sentence
    /// [n, 2k] and each sentence's KL term [n, 1], the sum of
    /// KL(N(mean, diag variance) || N(0, I)) over the distributions the
    /// prior constrains: for `gaussian` the one after each word's operator
    /// (z_1..z_n), for `lstm-gaussian` the sentence's one.
    pub(super) fn gaussian(
        &self,
        x: &Tensor<3>,
        ids: Tensor<1, Int>,
        mask: &Tensor<2>,
        lens: Tensor<2>,
    ) -> (Tensor<2>, Tensor<2>) {
        // 0.5 (var + mu^2 - 1 - log var), summed over the dimensions.
        let kl = |mu: Tensor<2>, lv: Tensor<2>| {
            ((lv.clone().exp() + mu.square() - lv - 1.0) * 0.5).sum_dim(1)
        };
        let [n, len, d] = x.dims();
        if self.shape.arch == Arch::LstmGaussian {
            let hbar = self.lstm(0, x, mask, false, true).0 / lens;
            let mu = hbar.clone().matmul(self.p(3)) + self.p(4);
            let lv = hbar.matmul(self.p(5)) + self.p(6);
            let k = kl(mu.clone(), lv.clone());
            return (Tensor::cat(vec![mu, lv.exp()], 1), k);
        }
        // z_t = A_t (z_{t-1} + B_t): mu_t = A_t (mu_{t-1} + B_t) and
        // var_t = A_t^2 var_{t-1}, carried as log var; padding is the
        // identity operator (A = 1, B = 0) and adds no KL.
        let scale = self.p(0).select(0, ids).reshape([n, len, d]);
        let z0 = Tensor::<2>::zeros([n, d], (&x.device(), x.dtype()));
        let mut klsum = Tensor::<2>::zeros([n, 1], (&x.device(), x.dtype()));
        let (mut mu, mut lv) = (z0.clone(), z0);
        for t in 0..len {
            let m = mask.clone().narrow(1, t, 1);
            let a = scale.clone().narrow(1, t, 1).reshape([n, d]) * m.clone() - m.clone() + 1.0;
            let b = x.clone().narrow(1, t, 1).reshape([n, d]) * m.clone();
            mu = a.clone() * (mu + b);
            lv = lv + (a.clone() * a).log();
            klsum = klsum + kl(mu.clone(), lv.clone()) * m;
        }
        (Tensor::cat(vec![mu, lv.exp()], 1), klsum)
    }
}
