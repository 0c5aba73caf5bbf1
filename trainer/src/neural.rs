//! The encoders with compositional parameters (docs/encoders.md): LSTM and
//! BLSTM (seed 000 section 4), GRAN (seed 001), RNN, iRNN, DAN and the
//! projection model (seed 002 section 3), on burn's autodiff. The word
//! averaging encoders stay in [`crate::train`], hand-differentiated, because
//! they run several times faster that way (BENCHMARKS.md, bench-train).
//!
//! Every parameter is a rank-2 tensor (biases are [1, n]) so that saving,
//! loading, regularising and the gradient checks walk one list.

use burn::module::{Module, Param};
use burn::tensor::activation::{relu, sigmoid};
use burn::tensor::{DType, Device, Int, Tensor, TensorData};
use rand::{Rng, SeedableRng};

use crate::TrainError;

/// An encoder architecture: `paraforge train --model NAME`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Arch {
    /// Mean of the hidden states (seed 000).
    Lstm,
    /// LSTM whose output gate is fixed at 1 (seed 002).
    LstmNoO,
    /// Forward and backward LSTMs, hidden states averaged, then their mean.
    Blstm,
    /// As `Blstm`, the two directions concatenated (seed 000 Table 10).
    BlstmConcat,
    /// Gated recurrent averaging network (seed 001, eq. 1).
    Gran,
    /// tanh RNN, the last hidden state (seed 002).
    Rnn,
    /// Identity-initialised RNN with identity activation, the last hidden
    /// state divided by the length: the word average before training.
    Irnn,
    /// Deep averaging network: the average, then tanh layers.
    Dan,
    /// The average, then one linear projection with bias.
    Proj,
    /// The plain word average, no parameters besides the word table: the
    /// encoder of seed 001's averaging reference classifier (`classifier.rs`;
    /// not a `train --model`, where `word` is the fast average).
    Avg,
}

impl Arch {
    pub const ALL: [Arch; 9] = [
        Arch::Lstm,
        Arch::LstmNoO,
        Arch::Blstm,
        Arch::BlstmConcat,
        Arch::Gran,
        Arch::Rnn,
        Arch::Irnn,
        Arch::Dan,
        Arch::Proj,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Arch::Lstm => "lstm",
            Arch::LstmNoO => "lstm-no-o",
            Arch::Blstm => "blstm",
            Arch::BlstmConcat => "blstm-concat",
            Arch::Gran => "gran",
            Arch::Rnn => "rnn",
            Arch::Irnn => "irnn",
            Arch::Dan => "dan",
            Arch::Proj => "proj",
            Arch::Avg => "avg",
        }
    }

    /// Words are scrambled while training with this probability unless
    /// told otherwise (seed 000 uses 0.3 for its recurrent encoders).
    pub fn default_scramble(self) -> f64 {
        match self {
            Arch::Lstm | Arch::LstmNoO | Arch::Blstm | Arch::BlstmConcat => 0.3,
            _ => 0.0,
        }
    }
}

impl std::fmt::Display for Arch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Arch {
    type Err = String;
    fn from_str(s: &str) -> Result<Arch, String> {
        let s = s.trim().to_ascii_lowercase();
        Arch::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Arch::ALL.iter().map(|a| a.name()).collect();
                format!("unknown encoder {s:?} (one of: {})", names.join(", "))
            })
    }
}

/// The shape of a network; saved as the model's `config.json` with its
/// vocabulary.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Shape {
    pub arch: Arch,
    /// Rows of the word table, the unknown word last.
    pub vocab: usize,
    pub word_dim: usize,
    /// Hidden size of the recurrent cells and of DAN/projection layers.
    pub hidden: usize,
    /// DAN layers.
    pub layers: usize,
}

impl Shape {
    pub fn validate(&self) -> Result<(), TrainError> {
        let bad = |m: String| Err(TrainError::Invalid(m));
        if self.vocab < 1 || self.word_dim < 1 || self.hidden < 1 {
            return bad(format!(
                "{}: the vocabulary, word dimension and hidden size must be at least 1",
                self.arch
            ));
        }
        if self.arch == Arch::Irnn && self.hidden != self.word_dim {
            return bad(format!(
                "irnn starts as the word average, so its hidden size must equal the word dimension ({}), not {}",
                self.word_dim, self.hidden
            ));
        }
        if self.arch == Arch::Dan && self.layers < 1 {
            return bad("dan needs at least one layer".into());
        }
        Ok(())
    }

    /// The sentence embedding's size.
    pub fn out_dim(&self) -> usize {
        match self.arch {
            Arch::BlstmConcat => 2 * self.hidden,
            Arch::Gran | Arch::Avg => self.word_dim,
            _ => self.hidden,
        }
    }

    /// (name, rows, cols, initialiser) of every parameter after the word
    /// table, in file order.
    fn params(&self) -> Vec<(String, usize, usize, Init)> {
        let (d, h) = (self.word_dim, self.hidden);
        let lstm = |p: &str| {
            let a = 1.0 / (h as f64).sqrt();
            vec![
                (format!("{p}.w_ih"), d, 4 * h, Init::Uniform(a)),
                (format!("{p}.w_hh"), h, 4 * h, Init::Uniform(a)),
                (format!("{p}.b"), 1, 4 * h, Init::Uniform(a)),
            ]
        };
        let glorot = |i: usize, o: usize| Init::Uniform((6.0 / (i + o) as f64).sqrt());
        match self.arch {
            Arch::Lstm | Arch::LstmNoO => lstm("fwd"),
            Arch::Blstm | Arch::BlstmConcat => [lstm("fwd"), lstm("bwd")].concat(),
            Arch::Gran => {
                let a = 1.0 / (d as f64).sqrt();
                let mut v = lstm("fwd");
                v.push(("gate.w_x".into(), d, d, Init::Uniform(a)));
                v.push(("gate.w_h".into(), h, d, Init::Uniform(a)));
                v.push(("gate.b".into(), 1, d, Init::Uniform(a)));
                v
            }
            Arch::Rnn => {
                let a = 1.0 / (h as f64).sqrt();
                vec![
                    ("rnn.w_x".into(), d, h, Init::Uniform(a)),
                    ("rnn.w_h".into(), h, h, Init::Uniform(a)),
                    ("rnn.b".into(), 1, h, Init::Uniform(a)),
                ]
            }
            Arch::Irnn => vec![
                ("rnn.w_x".into(), d, h, Init::Identity),
                ("rnn.w_h".into(), h, h, Init::Identity),
                ("rnn.b".into(), 1, h, Init::Zero),
            ],
            Arch::Avg => Vec::new(),
            Arch::Proj => vec![
                ("dense.0.w".into(), d, h, glorot(d, h)),
                ("dense.0.b".into(), 1, h, Init::Zero),
            ],
            Arch::Dan => (0..self.layers)
                .flat_map(|l| {
                    let i = if l == 0 { d } else { h };
                    [
                        (format!("dense.{l}.w"), i, h, glorot(i, h)),
                        (format!("dense.{l}.b"), 1, h, Init::Zero),
                    ]
                })
                .collect(),
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Init {
    Uniform(f64),
    Identity,
    Zero,
}

/// The network: the word table and the compositional parameters.
#[derive(Module, Debug)]
pub struct Net {
    /// [vocab, word_dim], the unknown word's row last.
    pub emb: Param<Tensor<2>>,
    /// The compositional parameters in [`Shape::params`] order.
    pub comp: Vec<Param<Tensor<2>>>,
    #[module(skip)]
    pub shape: Shape,
}

/// A batch of token-id sentences, right-padded.
pub struct Batch {
    pub n: usize,
    pub len: usize,
    pub(crate) ids: Vec<i64>,
    pub(crate) mask: Vec<f32>,
    pub(crate) lens: Vec<f32>,
}

impl Batch {
    /// `sentences` must each have at least one token.
    pub fn new(sentences: &[&[u32]]) -> Batch {
        let n = sentences.len();
        let len = sentences.iter().map(|s| s.len()).max().unwrap_or(0).max(1);
        let mut ids = vec![0i64; n * len];
        let mut mask = vec![0f32; n * len];
        for (i, s) in sentences.iter().enumerate() {
            for (t, &w) in s.iter().enumerate() {
                ids[i * len + t] = w as i64;
                mask[i * len + t] = 1.0;
            }
        }
        let lens = sentences.iter().map(|s| s.len().max(1) as f32).collect();
        Batch {
            n,
            len,
            ids,
            mask,
            lens,
        }
    }
}

impl Net {
    /// A fresh network: the word table from `emb` ([vocab, word_dim] row
    /// major), the rest initialised from `seed`.
    pub fn init(shape: Shape, emb: &[f32], seed: u64, dev: &Device) -> Result<Net, TrainError> {
        shape.validate()?;
        if emb.len() != shape.vocab * shape.word_dim {
            return Err(TrainError::Invalid(format!(
                "word table has {} values, {} x {} expected",
                emb.len(),
                shape.vocab,
                shape.word_dim
            )));
        }
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x4e45_5552_414c);
        let comp = shape
            .params()
            .into_iter()
            .map(|(_, r, c, init)| {
                let v: Vec<f64> = match init {
                    Init::Uniform(a) => (0..r * c).map(|_| rng.random_range(-a..a)).collect(),
                    Init::Zero => vec![0.0; r * c],
                    Init::Identity => (0..r * c)
                        .map(|k| if k / c == k % c { 1.0 } else { 0.0 })
                        .collect(),
                };
                (v, r, c)
            })
            .collect::<Vec<_>>();
        let emb: Vec<f64> = emb.iter().map(|&x| x as f64).collect();
        Ok(Net::from_values(shape, &emb, &comp, dev, DType::F32))
    }

    /// A network with the given values (the gradient checks build one in
    /// f64).
    pub fn from_values(
        shape: Shape,
        emb: &[f64],
        comp: &[(Vec<f64>, usize, usize)],
        dev: &Device,
        dtype: DType,
    ) -> Net {
        let t = |v: &[f64], r: usize, c: usize| {
            Param::from_tensor(Tensor::<2>::from_data(
                TensorData::new(v.to_vec(), [r, c]).convert_dtype(dtype),
                (dev, dtype),
            ))
        };
        Net {
            emb: t(emb, shape.vocab, shape.word_dim),
            comp: comp.iter().map(|(v, r, c)| t(v, *r, *c)).collect(),
            shape,
        }
    }

    /// Names of the compositional parameters, as in the saved file.
    pub fn comp_names(&self) -> Vec<String> {
        self.shape.params().into_iter().map(|p| p.0).collect()
    }

    fn p(&self, i: usize) -> Tensor<2> {
        self.comp[i].val()
    }

    /// Sentence embeddings [n, out_dim].
    pub fn forward(&self, b: &Batch) -> Tensor<2> {
        let emb = self.emb.val();
        let dev = emb.device();
        let dtype = emb.dtype();
        let (n, len, d) = (b.n, b.len, self.shape.word_dim);
        let ids = Tensor::<1, Int>::from_data(TensorData::new(b.ids.clone(), [n * len]), &dev);
        let x = emb.select(0, ids).reshape([n, len, d]);
        let f = |v: &[f32], shape: [usize; 2]| {
            Tensor::<2>::from_data(
                TensorData::new(v.to_vec(), shape).convert_dtype(dtype),
                (&dev, dtype),
            )
        };
        let mask = f(&b.mask, [n, len]);
        let lens = f(&b.lens, [n, 1]);
        match self.shape.arch {
            Arch::Lstm => self.lstm(0, &x, &mask, false, true).0 / lens,
            Arch::LstmNoO => self.lstm(0, &x, &mask, false, false).0 / lens,
            Arch::Blstm | Arch::BlstmConcat => {
                let fw = self.lstm(0, &x, &mask, false, true).0 / lens.clone();
                let bw = self.lstm(3, &x, &mask, true, true).0 / lens;
                if self.shape.arch == Arch::Blstm {
                    (fw + bw) * 0.5
                } else {
                    Tensor::cat(vec![fw, bw], 1)
                }
            }
            Arch::Gran => self.lstm(0, &x, &mask, false, true).1 / lens,
            Arch::Rnn | Arch::Irnn => {
                let h = self.rnn(&x, &mask);
                if self.shape.arch == Arch::Irnn {
                    h / lens
                } else {
                    h
                }
            }
            Arch::Dan | Arch::Proj | Arch::Avg => {
                let mut g = (x * mask.unsqueeze_dim::<3>(2))
                    .sum_dim(1)
                    .reshape([n as i64, -1])
                    / lens;
                for l in 0..self.comp.len() / 2 {
                    g = g.matmul(self.p(2 * l)) + self.p(2 * l + 1);
                    if self.shape.arch == Arch::Dan {
                        g = g.tanh();
                    }
                }
                g
            }
        }
    }

    /// Runs the LSTM whose parameters start at `comp[at]` over `x` [n, len,
    /// d]: (sum of its masked hidden states, and for GRAN the sum of the
    /// gated inputs a_t). The state is carried unchanged over padding, so a
    /// backward pass starts at each sentence's last token.
    fn lstm(
        &self,
        at: usize,
        x: &Tensor<3>,
        mask: &Tensor<2>,
        reverse: bool,
        out_gate: bool,
    ) -> (Tensor<2>, Tensor<2>) {
        // The fused kernel where it runs (crate::lstm_scan; issue 15).
        if let Some(out) = crate::lstm_scan::lstm(self, at, x, mask, reverse, out_gate) {
            return out;
        }
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
            sum = sum + h_new * m.clone();
            if let Some(xg) = &gran {
                let xt = x.clone().narrow(1, t, 1).reshape([n, d]);
                let gate = sigmoid(
                    xg.clone().narrow(1, t, 1).reshape([n, d]) + h.clone().matmul(self.p(at + 4)),
                );
                gsum = gsum + xt * gate * m;
            }
        }
        (sum, gsum)
    }

    /// The RNN's hidden state after each sentence's last token.
    fn rnn(&self, x: &Tensor<3>, mask: &Tensor<2>) -> Tensor<2> {
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

/// Negative sampling (seed 002 section 3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Sampling {
    /// The most similar sentence of another pair.
    #[default]
    Max,
    /// MAX with probability 0.5, else a random sentence of another pair.
    Mix,
}

impl std::str::FromStr for Sampling {
    type Err = String;
    fn from_str(s: &str) -> Result<Sampling, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "max" => Ok(Sampling::Max),
            "mix" => Ok(Sampling::Mix),
            o => Err(format!("unknown negative sampling {o:?} (max or mix)")),
        }
    }
}

/// The margin loss summed over both directions of each pair, divided by the
/// number of pairs. `g` holds 4B rows: the B anchors s, their B partners
/// s', the negatives of s, the negatives of s'.
pub fn margin_loss(g: Tensor<2>, pairs: usize, margin: f64) -> Tensor<1> {
    let norm = g.clone() / (g.square().sum_dim(1) + 1e-12).sqrt();
    let part = |k: usize| norm.clone().narrow(0, k * pairs, pairs);
    let (s, s2, ns, ns2) = (part(0), part(1), part(2), part(3));
    let pos = (s.clone() * s2.clone()).sum_dim(1);
    let l1 = relu((s * ns).sum_dim(1) - pos.clone() + margin);
    let l2 = relu((s2 * ns2).sum_dim(1) - pos + margin);
    (l1 + l2).sum() / pairs as f64
}

/// lambda_c |W_c - W_c0|^2 + lambda_w |W_w - W_w0|^2 (seed 002 eq. 1; the
/// iRNN is pulled towards its identity start, every other W_c towards 0).
pub fn regulariser(net: &Net, start: &Net, lambda_c: f64, lambda_w: f64) -> Option<Tensor<1>> {
    let mut total: Option<Tensor<1>> = None;
    let mut add = |t: Tensor<1>| total = Some(total.take().map_or(t.clone(), |a| a + t));
    if lambda_w > 0.0 {
        add((net.emb.val() - start.emb.val().detach()).square().sum() * lambda_w);
    }
    if lambda_c > 0.0 {
        for (p, p0) in net.comp.iter().zip(&start.comp) {
            let d = if net.shape.arch == Arch::Irnn {
                p.val() - p0.val().detach()
            } else {
                p.val()
            };
            add(d.square().sum() * lambda_c);
        }
    }
    total
}

/// Shape checks of the compositional parameters against `shape` (a loaded
/// file must match its config).
pub fn expected_dims(shape: &Shape) -> Vec<(String, [usize; 2])> {
    shape
        .params()
        .into_iter()
        .map(|(name, r, c, _)| (name, [r, c]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f64s(t: Tensor<2>) -> Vec<f64> {
        t.into_data()
            .convert::<f64>()
            .try_into_vec::<f64>()
            .unwrap()
    }

    /// burn's gradients of the margin loss (plus both regularisers) equal
    /// central finite differences, in f64, for every parameter of every
    /// encoder.
    #[test]
    fn gradients_match_finite_differences_for_every_encoder() {
        let dev = Device::flex().autodiff();
        // s, s', t(s), t(s') for two pairs; lengths differ so that padding
        // and the backward direction's start are exercised.
        let sents: [&[u32]; 8] = [
            &[0, 1, 2],
            &[3, 4],
            &[1, 2, 5, 0],
            &[5],
            &[3, 4],
            &[2, 0, 1],
            &[5],
            &[1, 2, 5, 0],
        ];
        let batch = Batch::new(&sents);
        // The recurrent encoders twice: through the fused kernel
        // (crate::lstm_scan) and through burn's operations.
        let runs = Arch::ALL.into_iter().flat_map(|a| [(a, false), (a, true)]);
        for (arch, burn_ops) in runs {
            let shape = Shape {
                arch,
                vocab: 6,
                word_dim: 3,
                hidden: 3,
                layers: 2,
            };
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
            let mut vals =
                |n: usize| -> Vec<f64> { (0..n).map(|_| rng.random_range(-0.8..0.8)).collect() };
            let emb = vals(6 * 3);
            let comp: Vec<(Vec<f64>, usize, usize)> = expected_dims(&shape)
                .into_iter()
                .map(|(_, [r, c])| (vals(r * c), r, c))
                .collect();
            // The regulariser's start point differs from the values.
            let start = Net::from_values(
                shape.clone(),
                &vals(6 * 3),
                &comp
                    .iter()
                    .map(|(v, r, c)| (v.iter().map(|x| x * 0.5).collect(), *r, *c))
                    .collect::<Vec<_>>(),
                &dev,
                DType::F64,
            );
            let loss_of = |emb: &[f64], comp: &[(Vec<f64>, usize, usize)]| {
                let net = Net::from_values(shape.clone(), emb, comp, &dev, DType::F64);
                // A margin large enough that every hinge is active.
                let g = if burn_ops {
                    crate::lstm_scan::with_burn_ops(|| net.forward(&batch))
                } else {
                    net.forward(&batch)
                };
                let l = margin_loss(g, 2, 3.0) + regulariser(&net, &start, 0.01, 0.02).unwrap();
                (net, l)
            };
            let (net, loss) = loss_of(&emb, &comp);
            let grads = loss.backward();
            let mut analytic = vec![f64s(net.emb.val().grad(&grads).unwrap())];
            for p in &net.comp {
                analytic.push(f64s(p.val().grad(&grads).unwrap()));
            }
            let value = |e: &[f64], c: &[(Vec<f64>, usize, usize)]| -> f64 {
                loss_of(e, c).1.into_scalar()
            };
            let h = 1e-6;
            let mut checked = 0;
            let mut worst = 0f64;
            for (k, an) in analytic.iter().enumerate() {
                for i in 0..an.len() {
                    let (mut e1, mut c1) = (emb.clone(), comp.clone());
                    let (mut e2, mut c2) = (emb.clone(), comp.clone());
                    if k == 0 {
                        e1[i] += h;
                        e2[i] -= h;
                    } else {
                        c1[k - 1].0[i] += h;
                        c2[k - 1].0[i] -= h;
                    }
                    let fd = (value(&e1, &c1) - value(&e2, &c2)) / (2.0 * h);
                    let err = (fd - an[i]).abs() / (1e-3 + an[i].abs().max(fd.abs()));
                    worst = worst.max(err);
                    assert!(
                        err < 1e-5,
                        "{arch}: parameter {k} entry {i}: finite differences {fd}, burn {}",
                        an[i]
                    );
                    checked += 1;
                }
            }
            // Every parameter moves the loss somewhere.
            for (k, an) in analytic.iter().enumerate() {
                assert!(
                    an.iter().any(|g| g.abs() > 1e-6),
                    "{arch}: parameter {k} has no gradient"
                );
            }
            eprintln!(
                "{arch} (burn ops: {burn_ops}): {checked} entries, worst relative error {worst:.1e}"
            );
        }
    }

    #[test]
    fn names_parse_and_shapes_are_checked() {
        for a in Arch::ALL {
            assert_eq!(a.name().parse::<Arch>().unwrap(), a);
        }
        let e = "lstmm".parse::<Arch>().unwrap_err();
        assert!(e.contains("lstmm") && e.contains("blstm"), "{e}");
        let s = Shape {
            arch: Arch::Irnn,
            vocab: 5,
            word_dim: 4,
            hidden: 3,
            layers: 1,
        };
        assert!(s
            .validate()
            .unwrap_err()
            .to_string()
            .contains("hidden size"));
        assert_eq!(
            Shape {
                arch: Arch::BlstmConcat,
                hidden: 3,
                ..s.clone()
            }
            .out_dim(),
            6
        );
        assert_eq!(
            Shape {
                arch: Arch::Gran,
                ..s
            }
            .out_dim(),
            4
        );
    }
}
