//! The recurrent forward passes: the LSTM (the fused scan of
//! `lstm_scan.rs`, or step by step for autodiff), BLSTM states, GRAN's gate,
//! RNN and iRNN.

use burn::tensor::activation::sigmoid;
use burn::tensor::Tensor;

use super::{Arch, Net};

impl Net {
    /// The fused kernel's hidden states ([`crate::lstm_scan::scan`]) of
    /// the LSTM whose parameters start at `comp[at]` over `x` [n, len, d]
    /// with `mask` [n, len]: [n, len, h], zero at padding. `None` where the
    /// kernel is not available (`lstm_scan::available`).
    pub(super) fn fused_states(
        &self,
        at: usize,
        x: &Tensor<3>,
        mask: &Tensor<2>,
        reverse: bool,
        out_gate: bool,
    ) -> Option<Tensor<3>> {
        let p = |i: usize| self.comp[i].val();
        if !crate::lstm_scan::available(&p(at)) {
            return None;
        }
        let len = x.dims()[1];
        // Right-padded: each sentence's length is its mask's sum.
        let m = mask.to_data().convert::<f32>();
        let lens = m
            .as_slice::<f32>()
            .expect("f32 mask")
            .chunks(len)
            .map(|row| row.iter().filter(|&&v| v > 0.0).count())
            .collect();
        Some(crate::lstm_scan::scan(
            x.clone(),
            p(at),
            p(at + 2),
            p(at + 1),
            lens,
            reverse,
            out_gate,
        ))
    }

    /// The LSTM through the fused kernel: (sum of its hidden states, and
    /// for GRAN the sum of the gated inputs); `None` where the kernel is
    /// not available.
    pub(super) fn fused_lstm(
        &self,
        at: usize,
        x: &Tensor<3>,
        mask: &Tensor<2>,
        reverse: bool,
        out_gate: bool,
    ) -> Option<(Tensor<2>, Tensor<2>)> {
        let p = |i: usize| self.comp[i].val();
        let hs = self.fused_states(at, x, mask, reverse, out_gate)?;
        let [n, len, d] = x.dims();
        let h = self.shape.hidden;
        let sum = hs.clone().sum_dim(1).reshape([n, h]);
        let gsum = if self.shape.arch == Arch::Gran {
            // a_t = x_t * sigmoid(x_t W_x + h_t W_h + b), over the real tokens.
            let xg = x.clone().reshape([n * len, d]).matmul(p(at + 3)) + p(at + 5);
            let gate =
                sigmoid(xg + hs.reshape([n * len, h]).matmul(p(at + 4))).reshape([n, len, d]);
            (x.clone() * gate * mask.clone().unsqueeze_dim::<3>(2))
                .sum_dim(1)
                .reshape([n, d])
        } else {
            Tensor::<2>::zeros([n, d], (&x.device(), x.dtype()))
        };
        Some((sum, gsum))
    }

    /// Runs the LSTM whose parameters start at `comp[at]` over `x` [n, len,
    /// d]: (sum of its masked hidden states, and for GRAN the sum of the
    /// gated inputs a_t). The state is carried unchanged over padding, so a
    /// backward pass starts at each sentence's last token.
    pub(super) fn lstm(
        &self,
        at: usize,
        x: &Tensor<3>,
        mask: &Tensor<2>,
        reverse: bool,
        out_gate: bool,
    ) -> (Tensor<2>, Tensor<2>) {
        // The fused kernel where it runs (crate::lstm_scan).
        if let Some(out) = self.fused_lstm(at, x, mask, reverse, out_gate) {
            return out;
        }
        let (sum, gsum, _) = self.lstm_steps(at, x, mask, reverse, out_gate, false);
        (sum, gsum)
    }

    /// The LSTM's hidden states [n, len, h], zero at padding (for max
    /// pooling), through the fused kernel where it runs.
    pub(super) fn lstm_states(
        &self,
        at: usize,
        x: &Tensor<3>,
        mask: &Tensor<2>,
        reverse: bool,
    ) -> Tensor<3> {
        if let Some(hs) = self.fused_states(at, x, mask, reverse, true) {
            return hs;
        }
        let (_, _, steps) = self.lstm_steps(at, x, mask, reverse, true, true);
        Tensor::stack(steps, 1)
    }

    /// The LSTM in ordinary burn ops: (sum of the masked hidden states, the
    /// GRAN gated sum, and with `collect` each time step's masked state in
    /// time order).
    pub(super) fn lstm_steps(
        &self,
        at: usize,
        x: &Tensor<3>,
        mask: &Tensor<2>,
        reverse: bool,
        out_gate: bool,
        collect: bool,
    ) -> (Tensor<2>, Tensor<2>, Vec<Tensor<2>>) {
        let [n, len, d] = x.dims();
        let h_dim = self.shape.hidden;
        let (w_hh, b) = (self.p(at + 1), self.p(at + 2));
        // One [n * len, d] x [d, 4h] product for every step's input part.
        let xw =
            (x.clone().reshape([n * len, d]).matmul(self.p(at)) + b).reshape([n, len, 4 * h_dim]);
        let gran = (self.shape.arch == Arch::Gran).then(|| {
            let xg = x.clone().reshape([n * len, d]).matmul(self.p(at + 3)) + self.p(at + 5);
            xg.reshape([n, len, d])
        });
        let z0 = Tensor::<2>::zeros([n, h_dim], (&x.device(), x.dtype()));
        let (mut h, mut c, mut sum) = (z0.clone(), z0.clone(), z0);
        let mut gsum = Tensor::<2>::zeros([n, d], (&x.device(), x.dtype()));
        let mut steps: Vec<Option<Tensor<2>>> = vec![None; if collect { len } else { 0 }];
        for k in 0..len {
            let t = if reverse { len - 1 - k } else { k };
            let m = mask.clone().narrow(1, t, 1);
            let z =
                xw.clone().narrow(1, t, 1).reshape([n, 4 * h_dim]) + h.clone().matmul(w_hh.clone());
            let s = sigmoid(z.clone().narrow(1, 0, 3 * h_dim));
            let g = z.narrow(1, 3 * h_dim, h_dim).tanh();
            let (i, f) = (
                s.clone().narrow(1, 0, h_dim),
                s.clone().narrow(1, h_dim, h_dim),
            );
            let c_new = f * c.clone() + i * g;
            let h_new = if out_gate {
                s.narrow(1, 2 * h_dim, h_dim) * c_new.clone().tanh()
            } else {
                c_new.clone().tanh()
            };
            let keep = m.clone().neg() + 1.0;
            c = c_new * m.clone() + c * keep.clone();
            h = h_new.clone() * m.clone() + h * keep;
            let masked = h_new * m.clone();
            if collect {
                steps[t] = Some(masked.clone());
            }
            sum = sum + masked;
            if let Some(xg) = &gran {
                let xt = x.clone().narrow(1, t, 1).reshape([n, d]);
                let gate = sigmoid(
                    xg.clone().narrow(1, t, 1).reshape([n, d]) + h.clone().matmul(self.p(at + 4)),
                );
                gsum = gsum + xt * gate * m;
            }
        }
        let steps = steps
            .into_iter()
            .map(|s| s.expect("every step ran"))
            .collect();
        (sum, gsum, steps)
    }

    /// The RNN's hidden state after each sentence's last token.
    pub(super) fn rnn(&self, x: &Tensor<3>, mask: &Tensor<2>) -> Tensor<2> {
        let [n, len, d] = x.dims();
        let h_dim = self.shape.hidden;
        let xw = (x.clone().reshape([n * len, d]).matmul(self.p(0)) + self.p(2))
            .reshape([n, len, h_dim]);
        let w_h = self.p(1);
        let mut h = Tensor::<2>::zeros([n, h_dim], (&x.device(), x.dtype()));
        for t in 0..len {
            let m = mask.clone().narrow(1, t, 1);
            let z = xw.clone().narrow(1, t, 1).reshape([n, h_dim]) + h.clone().matmul(w_h.clone());
            let h_new = if self.shape.arch == Arch::Irnn {
                z
            } else {
                z.tanh()
            };
            h = h_new * m.clone() + h * (m.neg() + 1.0);
        }
        h
    }
}
