//! candle + candle-nn peer: word embeddings -> LSTM or BLSTM (forward and
//! backward averaged) -> mean over the hidden states of the tokens (padding
//! masked) -> cosine; margin loss with the hardest in-batch negative (seed
//! 000 section 4); Adam (candle-nn's AdamW with weight decay 0).
//!
//! IMPL `fused`: the cell written with candle ops (input projection of all
//! tokens in one matmul, one [n, H] x [H, 4H] matmul per step), the form a
//! custom recurrent encoder would take. IMPL `lib`: candle_nn::rnn::LSTM.

use candle_core::{DType, Device, IndexOp, Result, Tensor, Var};
use candle_nn::rnn::{LSTMConfig, RNN};
use candle_nn::{AdamW, Optimizer, ParamsAdamW, VarBuilder, VarMap};
use fwbench::*;

struct Cell {
    w_ih: Var, // [D, 4H], gates i, f, o, g
    w_hh: Var, // [H, 4H]
    b: Var,    // [4H]
}

impl Cell {
    fn new(d: usize, h: usize, dev: &Device) -> Result<Self> {
        let a = 1.0 / (h as f32).sqrt();
        Ok(Cell {
            w_ih: Var::rand(-a, a, (d, 4 * h), dev)?,
            w_hh: Var::rand(-a, a, (h, 4 * h), dev)?,
            b: Var::rand(-a, a, 4 * h, dev)?,
        })
    }
    fn vars(&self) -> Vec<Var> {
        vec![self.w_ih.clone(), self.w_hh.clone(), self.b.clone()]
    }
}

/// Sum over time of the masked hidden states of one direction.
/// x: [n, len, D]; mask: [n, len].
fn run_cell(cell: &Cell, x: &Tensor, mask: &Tensor, reverse: bool) -> Result<Tensor> {
    let (n, len, d) = x.dims3()?;
    let h4 = cell.w_hh.dim(1)?;
    let hd = h4 / 4;
    // The input projection is done per step: candle's backward of a slice
    // (narrow) materialises a zero tensor of the sliced tensor's full size,
    // so slicing a precomputed [n, len, 4H] projection costs len x that size;
    // slicing x ([n, len, D]) costs 4 times less.
    let _ = d;
    let mut h = Tensor::zeros((n, hd), x.dtype(), x.device())?;
    let mut c = h.clone();
    let mut sum = h.clone();
    for k in 0..len {
        let t = if reverse { len - 1 - k } else { k };
        let xt = x.i((.., t, ..))?;
        let z = (xt
            .matmul(cell.w_ih.as_tensor())?
            .broadcast_add(cell.b.as_tensor())?
            + h.matmul(cell.w_hh.as_tensor())?)?;
        let s = candle_nn::ops::sigmoid(&z.narrow(1, 0, 3 * hd)?)?;
        let g = z.narrow(1, 3 * hd, hd)?.tanh()?;
        let (i, f, o) = (
            s.narrow(1, 0, hd)?,
            s.narrow(1, hd, hd)?,
            s.narrow(1, 2 * hd, hd)?,
        );
        c = ((f * &c)? + (i * g)?)?;
        h = (o * c.tanh()?)?;
        sum = (sum + h.broadcast_mul(&mask.i((.., t..t + 1))?)?)?;
    }
    Ok(sum)
}

/// Masked mean of the hidden states (BLSTM: the two directions averaged).
fn pool(cells: &[Cell], x: &Tensor, mask: &Tensor, lens: &Tensor) -> Result<Tensor> {
    let mut acc = run_cell(&cells[0], x, mask, false)?;
    if cells.len() == 2 {
        acc = ((acc + run_cell(&cells[1], x, mask, true)?)? * 0.5)?;
    }
    acc.broadcast_div(lens)
}

/// Same with candle_nn's LSTM (the backward direction runs on the reversed
/// sequence; the masked sum does not depend on the order).
fn pool_lib(lstms: &[candle_nn::LSTM], x: &Tensor, mask: &Tensor, lens: &Tensor) -> Result<Tensor> {
    let len = x.dim(1)?;
    let m3 = mask.unsqueeze(2)?;
    let run = |l: &candle_nn::LSTM, x: &Tensor, m3: &Tensor| -> Result<Tensor> {
        let states = l.seq(x)?;
        l.states_to_tensor(&states)?.broadcast_mul(m3)?.sum(1)
    };
    let mut acc = run(&lstms[0], x, &m3)?;
    if lstms.len() == 2 {
        let rev = Tensor::from_vec((0..len as u32).rev().collect::<Vec<_>>(), len, x.device())?;
        let xr = x.index_select(&rev, 1)?.contiguous()?;
        let mr = m3.index_select(&rev, 1)?;
        acc = ((acc + run(&lstms[1], &xr, &mr)?)? * 0.5)?;
    }
    acc.broadcast_div(lens)
}

/// Margin loss, hardest in-batch negative from another pair, both sides.
fn margin_loss(g: &Tensor, b: &Batch, dev: &Device) -> Result<Tensor> {
    let n = b.n;
    let norm = g.broadcast_div(&(g.sqr()?.sum_keepdim(1)? + 1e-8)?.sqrt()?)?;
    let partner = Tensor::from_vec(b.partner.clone(), n, dev)?;
    let pos = (&norm * norm.index_select(&partner, 0)?)?.sum(1)?;
    let same = Tensor::from_vec(b.same_pair.clone(), (n, n), dev)?;
    let neg = (norm.matmul(&norm.t()?)? + same)?.max(1)?;
    let l = ((neg - pos)? + DELTA as f64)?.relu()?.sum_all()?;
    l / (n / 2) as f64
}

fn main() -> Result<()> {
    let a = args();
    let dev = Device::Cpu;
    if a.mode == "gradcheck" {
        return gradcheck(&a, &dev);
    }
    let data = load(&a.data);
    let (d, hd) = (a.dim, a.dim);
    let emb = Var::rand(-0.05f32, 0.05, (data.vocab_rows, d), &dev)?;
    let dirs = if a.model == "blstm" { 2 } else { 1 };
    let mut vars = vec![emb.clone()];
    let cells: Vec<Cell> = (0..dirs)
        .map(|_| Cell::new(d, hd, &dev))
        .collect::<Result<_>>()?;
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &dev);
    let mut lstms = Vec::new();
    if a.imp == "lib" {
        for k in 0..dirs {
            let cfg = LSTMConfig {
                direction: if k == 0 {
                    candle_nn::rnn::Direction::Forward
                } else {
                    candle_nn::rnn::Direction::Backward
                },
                ..Default::default()
            };
            lstms.push(candle_nn::rnn::lstm(d, hd, cfg, vb.clone())?);
        }
        vars.extend(varmap.all_vars());
    } else {
        for c in &cells {
            vars.extend(c.vars());
        }
    }
    let mut opt = AdamW::new(
        vars,
        ParamsAdamW {
            lr: LR,
            weight_decay: 0.0,
            ..Default::default()
        },
    )?;
    let every = if a.steps >= 100 { 20 } else { 0 };
    run("candle", &a, every, |k| {
        let b = batch(&data, k, a.batch);
        let mut step = || -> Result<f32> {
            let ids = Tensor::from_vec(b.ids.clone(), b.n * b.len, &dev)?;
            let x = emb.embedding(&ids)?.reshape((b.n, b.len, d))?;
            let mask = Tensor::from_vec(b.mask.clone(), (b.n, b.len), &dev)?;
            let lens = Tensor::from_vec(b.lens.clone(), (b.n, 1), &dev)?;
            let g = if a.imp == "lib" {
                pool_lib(&lstms, &x, &mask, &lens)?
            } else {
                pool(&cells, &x, &mask, &lens)?
            };
            let loss = margin_loss(&g, &b, &dev)?;
            opt.backward_step(&loss)?;
            loss.to_scalar::<f32>()
        };
        step().expect("training step")
    });
    Ok(())
}

/// Finite differences against candle's autodiff for the fused LSTM (or
/// BLSTM): 2 sentences of 3 and 2 tokens, dim 4, f = sum(w * pooled), in f64
/// (the same code as training, whose tensors are f32) so that the central
/// differences are exact enough for a 1e-3 comparison of every entry.
fn gradcheck(a: &Args, dev: &Device) -> Result<()> {
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
    let mask = Tensor::from_vec(vec![1f64, 1., 1., 1., 1., 0.], (n, len), dev)?;
    let lens = Tensor::from_vec(vec![3f64, 2.], (n, 1), dev)?;
    let w = Tensor::from_vec(wv, (n, hd), dev)?;
    let f = |xv: &[f64], params: &[Vec<Vec<f64>>]| -> Result<(Tensor, Var, Vec<Cell>)> {
        let x = Var::from_vec(xv.to_vec(), (n, len, d), dev)?;
        let cells = params
            .iter()
            .map(|p| {
                Ok(Cell {
                    w_ih: Var::from_vec(p[0].clone(), (d, 4 * hd), dev)?,
                    w_hh: Var::from_vec(p[1].clone(), (hd, 4 * hd), dev)?,
                    b: Var::from_vec(p[2].clone(), 4 * hd, dev)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let y = (pool(&cells, x.as_tensor(), &mask, &lens)? * &w)?.sum_all()?;
        Ok((y, x, cells))
    };
    let (y, x, cells) = f(&xv, &params)?;
    let grads = y.backward()?;
    let eps = 1e-5f64;
    let mut analytic = grads
        .get(x.as_tensor())
        .unwrap()
        .flatten_all()?
        .to_vec1::<f64>()?;
    let mut numeric = Vec::new();
    for i in 0..xv.len() {
        let (mut p, mut m) = (xv.clone(), xv.clone());
        p[i] += eps;
        m[i] -= eps;
        let fp = f(&p, &params)?.0.to_scalar::<f64>()?;
        let fm = f(&m, &params)?.0.to_scalar::<f64>()?;
        numeric.push((fp - fm) / (2.0 * eps));
    }
    for (k, c) in cells.iter().enumerate() {
        for (j, v) in [&c.w_ih, &c.w_hh, &c.b].iter().enumerate() {
            analytic.extend(
                grads
                    .get(v.as_tensor())
                    .unwrap()
                    .flatten_all()?
                    .to_vec1::<f64>()?,
            );
            for i in 0..params[k][j].len() {
                let (mut p, mut m) = (params.clone(), params.clone());
                p[k][j][i] += eps;
                m[k][j][i] -= eps;
                let fp = f(&xv, &p)?.0.to_scalar::<f64>()?;
                let fm = f(&xv, &m)?.0.to_scalar::<f64>()?;
                numeric.push((fp - fm) / (2.0 * eps));
            }
        }
    }
    let r = compare(
        &format!("candle {} (input and all weights)", a.model),
        &analytic,
        &numeric,
    );
    if r > 1e-3 {
        eprintln!("gradient check FAILED");
        std::process::exit(1);
    }
    Ok(())
}
