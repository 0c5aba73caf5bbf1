//! burn peer (0.22, autodiff over a CPU backend: DEVICE `flex`, burn's
//! pure-Rust CPU backend, or `ndarray`, the deprecated one): the same model,
//! data and loss as bench_candle.rs.
//!
//! IMPL `fused`: the cell written with burn ops (one [n, D] x [D, 4H] and
//! one [n, H] x [H, 4H] matmul per step), the form a custom recurrent encoder
//! would take. IMPL `lib`: burn::nn::Lstm / burn::nn::BiLstm.

use burn::module::{Module, Param};
use burn::nn::{BiLstm, BiLstmConfig, Lstm, LstmConfig};
use burn::optim::{AdamConfig, GradientsParams};
use burn::tensor::activation::{relu, sigmoid};
use burn::tensor::{DType, Device, Distribution, Int, Tensor, TensorData};
use fwbench::*;

#[derive(Module, Debug)]
struct Cell {
    w_ih: Param<Tensor<2>>, // [D, 4H], gates i, f, o, g
    w_hh: Param<Tensor<2>>, // [H, 4H]
    b: Param<Tensor<1>>,    // [4H]
}

impl Cell {
    fn new(d: usize, h: usize, dev: &Device) -> Self {
        let a = 1.0 / (h as f64).sqrt();
        let u = Distribution::Uniform(-a, a);
        Cell {
            w_ih: Param::from_tensor(Tensor::random([d, 4 * h], u, dev)),
            w_hh: Param::from_tensor(Tensor::random([h, 4 * h], u, dev)),
            b: Param::from_tensor(Tensor::random([4 * h], u, dev)),
        }
    }

    /// Sum over time of the masked hidden states. x: [n, len, D]; mask: [n, len].
    fn run(&self, x: &Tensor<3>, mask: &Tensor<2>, reverse: bool) -> Tensor<2> {
        let [n, len, _] = x.dims();
        let hd = self.w_hh.dims()[0];
        let dev = x.device();
        let (w_ih, w_hh, b) = (
            self.w_ih.val(),
            self.w_hh.val(),
            self.b.val().unsqueeze::<2>(),
        );
        let mut h = Tensor::<2>::zeros([n, hd], (&dev, x.dtype()));
        let mut c = h.clone();
        let mut sum = h.clone();
        for k in 0..len {
            let t = if reverse { len - 1 - k } else { k };
            let xt = x.clone().narrow(1, t, 1).reshape([n as i64, -1]);
            let z = xt.matmul(w_ih.clone()) + h.matmul(w_hh.clone()) + b.clone();
            let s = sigmoid(z.clone().narrow(1, 0, 3 * hd));
            let g = z.narrow(1, 3 * hd, hd).tanh();
            let (i, f, o) = (
                s.clone().narrow(1, 0, hd),
                s.clone().narrow(1, hd, hd),
                s.narrow(1, 2 * hd, hd),
            );
            c = f * c + i * g;
            h = o * c.clone().tanh();
            sum = sum + h.clone() * mask.clone().narrow(1, t, 1);
        }
        sum
    }
}

#[derive(Module, Debug)]
struct Net {
    emb: Param<Tensor<2>>,
    cells: Vec<Cell>,
    lstm: Option<Lstm>,
    bilstm: Option<BiLstm>,
}

impl Net {
    /// Masked mean of the hidden states (BLSTM: both directions averaged).
    fn pool(&self, x: Tensor<3>, mask: Tensor<2>, lens: Tensor<2>) -> Tensor<2> {
        let acc = if let Some(l) = &self.lstm {
            let (out, _) = l.forward(x, None);
            (out * mask.unsqueeze_dim::<3>(2))
                .sum_dim(1)
                .squeeze_dim::<2>(1)
        } else if let Some(l) = &self.bilstm {
            let (out, _) = l.forward(x, None);
            let hd = l.d_hidden;
            let avg = (out.clone().narrow(2, 0, hd) + out.narrow(2, hd, hd)) * 0.5;
            (avg * mask.unsqueeze_dim::<3>(2))
                .sum_dim(1)
                .squeeze_dim::<2>(1)
        } else {
            let mut acc = self.cells[0].run(&x, &mask, false);
            if self.cells.len() == 2 {
                acc = (acc + self.cells[1].run(&x, &mask, true)) * 0.5;
            }
            acc
        };
        acc / lens
    }
}

fn margin_loss(g: Tensor<2>, b: &Batch, dev: &Device) -> Tensor<1> {
    let n = b.n;
    let norm = g.clone() / (g.square().sum_dim(1) + 1e-8).sqrt();
    let partner = Tensor::<1, Int>::from_data(
        TensorData::new(b.partner.iter().map(|&v| v as i64).collect::<Vec<_>>(), [n]),
        dev,
    );
    let pos = (norm.clone() * norm.clone().select(0, partner)).sum_dim(1);
    let same = Tensor::<2>::from_data(TensorData::new(b.same_pair.clone(), [n, n]), dev);
    let neg = (norm.clone().matmul(norm.transpose()) + same).max_dim(1);
    relu(neg - pos + DELTA).sum() / (n / 2) as f32
}

#[allow(deprecated)]
fn device(name: &str) -> Device {
    match name {
        #[cfg(feature = "burn-ndarray")]
        "ndarray" => Device::ndarray(),
        "flex" | "cpu" => Device::flex(),
        other => panic!("unknown device {other} (flex, or ndarray with --features burn-ndarray)"),
    }
}

fn main() {
    let a = args();
    let dev = device(&a.device).autodiff();
    if a.mode == "gradcheck" {
        return gradcheck(&a, &dev);
    }
    let data = load(&a.data);
    let d = a.dim;
    let dirs = if a.model == "blstm" { 2 } else { 1 };
    let lib = a.imp == "lib";
    let mut net = Net {
        emb: Param::from_tensor(Tensor::random(
            [data.vocab_rows, d],
            Distribution::Uniform(-0.05, 0.05),
            &dev,
        )),
        cells: if lib {
            vec![]
        } else {
            (0..dirs).map(|_| Cell::new(d, d, &dev)).collect()
        },
        lstm: (lib && dirs == 1).then(|| LstmConfig::new(d, d, true).init(&dev)),
        bilstm: (lib && dirs == 2).then(|| BiLstmConfig::new(d, d, true).init(&dev)),
    };
    let mut opt = AdamConfig::new().init();
    let every = if a.steps >= 100 { 20 } else { 0 };
    let peer = format!("burn-{}", a.device.replace("cpu", "flex"));
    run(&peer, &a, every, |k| {
        let b = batch(&data, k, a.batch);
        let ids = Tensor::<1, Int>::from_data(
            TensorData::new(
                b.ids.iter().map(|&v| v as i64).collect::<Vec<_>>(),
                [b.n * b.len],
            ),
            &dev,
        );
        let x = net.emb.val().select(0, ids).reshape([b.n, b.len, d]);
        let mask = Tensor::<2>::from_data(TensorData::new(b.mask.clone(), [b.n, b.len]), &dev);
        let lens = Tensor::<2>::from_data(TensorData::new(b.lens.clone(), [b.n, 1]), &dev);
        let loss = margin_loss(net.pool(x, mask, lens), &b, &dev);
        let value: f32 = loss.clone().into_scalar();
        let grads = GradientsParams::from_grads(loss.backward(), &net);
        net = opt.step(LR, net.clone(), grads);
        value
    });
}

/// Finite differences against burn's autodiff for the fused LSTM (or
/// BLSTM): 2 sentences of 3 and 2 tokens, dim 4, f = sum(w * pooled), in f64
/// (the same code as training, whose tensors are f32) so that the central
/// differences are exact enough for a 1e-3 comparison of every entry.
fn gradcheck(a: &Args, dev: &Device) {
    let (n, len, d, hd) = (2usize, 3usize, 4usize, 4usize);
    let dirs = if a.model == "blstm" { 2 } else { 1 };
    let mut rng = Rng(0x9e3779b97f4a7c15);
    let xv = rng.vec64(n * len * d, 1.0);
    let wv = rng.vec64(n * hd, 1.0);
    let params: Vec<Vec<Vec<f64>>> = (0..dirs)
        .map(|_| {
            vec![
                rng.vec64(d * 4 * hd, 0.5),
                rng.vec64(hd * 4 * hd, 0.5),
                rng.vec64(4 * hd, 0.5),
            ]
        })
        .collect();
    let o = (dev, DType::F64);
    let mask = Tensor::<2>::from_data(TensorData::new(vec![1f64, 1., 1., 1., 1., 0.], [n, len]), o);
    let lens = Tensor::<2>::from_data(TensorData::new(vec![3f64, 2.], [n, 1]), o);
    let w = Tensor::<2>::from_data(TensorData::new(wv, [n, hd]), o);
    let f = |xv: &[f64], params: &[Vec<Vec<f64>>]| -> (Tensor<1>, Tensor<3>, Net) {
        let x = Tensor::<3>::from_data(TensorData::new(xv.to_vec(), [n, len, d]), o).require_grad();
        let cells = params
            .iter()
            .map(|q| Cell {
                w_ih: Param::from_tensor(Tensor::<2>::from_data(
                    TensorData::new(q[0].clone(), [d, 4 * hd]),
                    o,
                )),
                w_hh: Param::from_tensor(Tensor::<2>::from_data(
                    TensorData::new(q[1].clone(), [hd, 4 * hd]),
                    o,
                )),
                b: Param::from_tensor(Tensor::<1>::from_data(
                    TensorData::new(q[2].clone(), [4 * hd]),
                    o,
                )),
            })
            .collect();
        let net = Net {
            emb: Param::from_tensor(Tensor::zeros([1, 1], o)),
            cells,
            lstm: None,
            bilstm: None,
        };
        let y = (net.pool(x.clone(), mask.clone(), lens.clone()) * w.clone()).sum();
        (y, x, net)
    };
    let val = |y: Tensor<1>| y.into_scalar::<f64>();
    let flat = |t: burn::tensor::TensorData| t.convert::<f64>().try_into_vec::<f64>().unwrap();
    let (y, x, net) = f(&xv, &params);
    let grads = y.backward();
    let mut analytic = flat(x.grad(&grads).unwrap().into_data());
    let eps = 1e-5f64;
    let mut numeric = Vec::new();
    for i in 0..xv.len() {
        let (mut p, mut m) = (xv.clone(), xv.clone());
        p[i] += eps;
        m[i] -= eps;
        numeric.push((val(f(&p, &params).0) - val(f(&m, &params).0)) / (2.0 * eps));
    }
    for (k, c) in net.cells.iter().enumerate() {
        analytic.extend(flat(c.w_ih.val().grad(&grads).unwrap().into_data()));
        analytic.extend(flat(c.w_hh.val().grad(&grads).unwrap().into_data()));
        analytic.extend(flat(c.b.val().grad(&grads).unwrap().into_data()));
        for j in 0..3 {
            for i in 0..params[k][j].len() {
                let (mut p, mut m) = (params.clone(), params.clone());
                p[k][j][i] += eps;
                m[k][j][i] -= eps;
                numeric.push((val(f(&xv, &p).0) - val(f(&xv, &m).0)) / (2.0 * eps));
            }
        }
    }
    let r = compare(
        &format!(
            "burn-{} {} (input and all weights)",
            a.device.replace("cpu", "flex"),
            a.model
        ),
        &analytic,
        &numeric,
    );
    if r > 1e-3 {
        eprintln!("gradient check FAILED");
        std::process::exit(1);
    }
}
