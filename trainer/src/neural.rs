//! The objective of the encoders with compositional parameters
//! (docs/encoders.md), whose networks are `paraforge_encoders::neural`
//! (re-exported here): the margin loss over mega-batch negatives (Wieting
//! and Gimpel, 2018, section 4), the expected-likelihood loss and KL prior
//! of the Gaussian encoders (Chen and Gimpel, 2020), the regulariser of
//! Wieting et al. (2016), negative sampling, and the defaults of each
//! encoder's training. burn differentiates them; the word averaging
//! encoders train in [`crate::train`], hand-differentiated, because they run
//! several times faster that way (BENCHMARKS.md, bench-train).

use burn::tensor::activation::relu;
use burn::tensor::Tensor;

pub use paraforge_encoders::neural::{expected_dims, Arch, Batch, Net, Pull, Shape, Spec};

/// The margin delta unless told otherwise: 0.4 (Wieting and Gimpel, 2018),
/// 1 for the Gaussians (Chen and Gimpel, 2020, appendix A.1).
pub fn default_margin(spec: &Spec) -> f32 {
    if spec.arch.is_gaussian() {
        1.0
    } else {
        0.4
    }
}

/// The settings Wieting et al. (2016) trained their tanh RNN with (its
/// `ppdb-rnn` configuration): MIX negatives, lambda_c 1e-4 and lambda_w
/// 1e-6 on their half-squared norms (5e-5 and 5e-7 on this project's
/// squared norms), Adam at 0.0005. With MAX negatives the last state
/// collapses (the loss sits at twice the margin, every sentence ending
/// alike), whatever the rate and the weights (docs/encoders.md). The tree
/// network of Wieting et al. (2015) collapses the same way with MAX
/// negatives (loss 0.800, STS Benchmark dev -5.0 after 3 epochs of 20,000
/// pairs) and learns with these (50.0), so it takes them too.
fn has_rnn(spec: &Spec) -> bool {
    spec.arch == Arch::Rnn || spec.arch == Arch::TreeRnn || spec.parts.contains(&Arch::Rnn)
}

/// Negatives unless told otherwise: MAX, or MIX for an RNN (see [`has_rnn`]).
pub fn default_sampling(spec: &Spec) -> Sampling {
    if has_rnn(spec) {
        Sampling::Mix
    } else {
        Sampling::Max
    }
}

/// (lambda_c, lambda_w) unless told otherwise: 0, or the RNN's.
pub fn default_lambdas(spec: &Spec) -> (f64, f64) {
    if has_rnn(spec) {
        (5e-5, 5e-7)
    } else {
        (0.0, 0.0)
    }
}

/// Adam's rate unless told otherwise: 0.001, or the RNN's 0.0005.
pub fn default_lr(spec: &Spec) -> f32 {
    if has_rnn(spec) {
        0.0005
    } else {
        0.001
    }
}

/// Words are scrambled while training with this probability unless told
/// otherwise (Wieting and Gimpel, 2018, used 0.3 for their recurrent
/// encoders); a combination takes the largest default of its parts.
pub fn default_scramble(spec: &Spec) -> f64 {
    let of = |a: Arch| match a {
        Arch::Lstm | Arch::LstmNoO | Arch::Blstm | Arch::BlstmConcat | Arch::BlstmMax => 0.3,
        // Chen and Gimpel (2020), appendix A.1, scramble for LSTMGaussian
        // and WLO.
        Arch::Gaussian | Arch::LstmGaussian => 0.4,
        _ => 0.0,
    };
    if spec.parts.is_empty() {
        return of(spec.arch);
    }
    spec.parts.iter().map(|&p| of(p)).fold(0.0, f64::max)
}

/// Negative sampling (Wieting et al., 2016, section 3.1).
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

/// log of the expected inner product of two diagonal Gaussians given as
/// rows [mean, variance] (Chen and Gimpel, 2020, eq. 4): log N(0; mu1 - mu2, v1 + v2),
/// less its constant -k/2 log(2 pi), which cancels in the margin loss.
/// One value per row pair, [n, 1].
pub fn expected_likelihood(a: Tensor<2>, b: Tensor<2>) -> Tensor<2> {
    let k = a.dims()[1] / 2;
    let v = a.clone().narrow(1, k, k) + b.clone().narrow(1, k, k);
    let diff = a.narrow(1, 0, k) - b.narrow(1, 0, k);
    ((v.clone().log() + diff.square() / v) * -0.5).sum_dim(1)
}

/// The margin loss of [`margin_loss`] with the expected-likelihood
/// similarity of two Gaussians in place of the cosine (Chen and Gimpel, 2020, section 3).
pub fn gaussian_margin_loss(g: Tensor<2>, pairs: usize, margin: f64) -> Tensor<1> {
    let part = |k: usize| g.clone().narrow(0, k * pairs, pairs);
    let (s, s2, ns, ns2) = (part(0), part(1), part(2), part(3));
    let pos = expected_likelihood(s.clone(), s2.clone());
    let l1 = relu(expected_likelihood(s, ns) - pos.clone() + margin);
    let l2 = relu(expected_likelihood(s2, ns2) - pos + margin);
    (l1 + l2).sum() / pairs as f64
}

/// The training objective of `net` on `b` (4 x `pairs` sentences, as
/// [`margin_loss`] takes them): the margin loss, and for the Gaussian
/// encoders lambda_kl x the KL prior term of every sentence of the batch
/// (s, s' and both negatives), divided like the loss by the pairs.
pub fn objective(
    net: &Net,
    b: &Batch,
    pairs: usize,
    margin: f64,
    lambda_kl: f64,
) -> (Tensor<1>, Option<Tensor<1>>) {
    let (g, kl) = net.forward_kl(b);
    if !net.shape.arch.is_gaussian() {
        return (margin_loss(g, pairs, margin), None);
    }
    let prior = kl
        .filter(|_| lambda_kl > 0.0)
        .map(|k| k.sum() * (lambda_kl / pairs as f64));
    (gaussian_margin_loss(g, pairs, margin), prior)
}

/// lambda_c |W_c - W_c0|^2 + lambda_w |W_w - W_w0|^2 (Wieting et al., 2016, eq. 1; the
/// iRNN and the word operators' scales are pulled towards their start,
/// every other W_c towards 0; a trigram table is a W_w).
pub fn regulariser(net: &Net, start: &Net, lambda_c: f64, lambda_w: f64) -> Option<Tensor<1>> {
    let mut total: Option<Tensor<1>> = None;
    let mut add = |t: Tensor<1>| total = Some(total.take().map_or(t.clone(), |a| a + t));
    if lambda_w > 0.0 {
        add((net.emb.val() - start.emb.val().detach()).square().sum() * lambda_w);
    }
    for ((p, p0), pull) in net.comp.iter().zip(&start.comp).zip(net.shape.pulls()) {
        let (lambda, d) = match pull {
            Pull::Zero => (lambda_c, p.val()),
            Pull::Start => (lambda_c, p.val() - p0.val().detach()),
            Pull::Table => (lambda_w, p.val() - p0.val().detach()),
        };
        if lambda > 0.0 {
            add(d.square().sum() * lambda);
        }
    }
    total
}

/// A network's tables other than the embeddings: values, rows, columns.
#[cfg(test)]
pub(crate) type Tables = [(Vec<f64>, usize, usize)];

/// Central finite differences of `value` at (`emb`, `comp`) against the
/// `analytic` gradient (the embedding table's, then each table's of
/// `comp`): every entry within 1e-5 relative error, every table with some
/// gradient. Returns the entries checked and the worst relative error. The
/// gradient checks of the encoders and of the classifier share it.
#[cfg(test)]
pub(crate) fn compare_finite_differences(
    label: &str,
    emb: &[f64],
    comp: &Tables,
    analytic: &[Vec<f64>],
    value: &dyn Fn(&[f64], &Tables) -> f64,
) -> (usize, f64) {
    let h = 1e-6;
    let mut checked = 0;
    let mut worst = 0f64;
    for (k, an) in analytic.iter().enumerate() {
        assert!(
            an.iter().any(|g| g.abs() > 1e-6),
            "{label}: parameter {k} has no gradient"
        );
        for i in 0..an.len() {
            let (mut e1, mut c1) = (emb.to_vec(), comp.to_vec());
            let (mut e2, mut c2) = (emb.to_vec(), comp.to_vec());
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
                "{label}: parameter {k} entry {i}: finite differences {fd}, burn {}",
                an[i]
            );
            checked += 1;
        }
    }
    (checked, worst)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::{DType, Device, TensorData};
    use rand::{Rng, SeedableRng};

    fn f64s(t: Tensor<2>) -> Vec<f64> {
        t.into_data()
            .convert::<f64>()
            .try_into_vec::<f64>()
            .unwrap()
    }

    /// s, s', t(s), t(s') for two pairs; lengths differ so that padding
    /// and the backward direction's start are exercised.
    const SENTS: [&[u32]; 8] = [
        &[0, 1, 2],
        &[3, 4],
        &[1, 2, 5, 0],
        &[5],
        &[3, 4],
        &[2, 0, 1],
        &[5],
        &[1, 2, 5, 0],
    ];

    type Values = (Vec<f64>, Vec<(Vec<f64>, usize, usize)>);

    /// Random values in +-0.8 for `shape`'s parameters (6 words), from
    /// `seed`; `comp_range` overrides the range of a parameter by name.
    fn random_values(shape: &Shape, seed: u64, comp_range: &dyn Fn(&str) -> (f64, f64)) -> Values {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let emb = (0..shape.vocab * shape.word_dim)
            .map(|_| rng.random_range(-0.8..0.8))
            .collect();
        let comp = expected_dims(shape)
            .into_iter()
            .map(|(name, [r, c])| {
                let (lo, hi) = comp_range(&name);
                ((0..r * c).map(|_| rng.random_range(lo..hi)).collect(), r, c)
            })
            .collect();
        (emb, comp)
    }

    /// burn's gradient of `loss` (of a network built in f64 from the
    /// values) against central finite differences, for every entry of every
    /// parameter; every parameter must move the loss. Returns the entries
    /// checked and the worst relative error.
    fn check_gradients(
        shape: &Shape,
        values: &Values,
        loss: &dyn Fn(&Net) -> Tensor<1>,
    ) -> (usize, f64) {
        let dev = Device::flex().autodiff();
        let (emb, comp) = values;
        let loss_of = |emb: &[f64], comp: &[(Vec<f64>, usize, usize)]| {
            let net = Net::from_values(shape.clone(), emb, comp, &dev, DType::F64);
            let l = loss(&net);
            (net, l)
        };
        let (net, l) = loss_of(emb, comp);
        let grads = l.backward();
        let mut analytic = vec![f64s(net.emb.val().grad(&grads).unwrap())];
        for p in &net.comp {
            analytic.push(f64s(p.val().grad(&grads).unwrap()));
        }
        let value =
            |e: &[f64], c: &[(Vec<f64>, usize, usize)]| -> f64 { loss_of(e, c).1.into_scalar() };
        compare_finite_differences(&shape.arch.to_string(), emb, comp, &analytic, &value)
    }

    fn small_shape(arch: Arch) -> Shape {
        Shape {
            unit_parts: false,
            parts_by_dimension: false,
            arch,
            vocab: 6,
            word_dim: 3,
            hidden: 3,
            layers: 2,
            parts: Vec::new(),
            trigrams: 0,
            trigram_dim: 0,
        }
    }

    /// burn's gradients of the margin loss (plus both regularisers) equal
    /// central finite differences, in f64, for every parameter of every
    /// cosine encoder.
    #[test]
    fn gradients_match_finite_differences_for_every_encoder() {
        let dev = Device::flex().autodiff();
        let batch = Batch::new(&SENTS);
        // The recurrent encoders twice: through the fused kernel
        // (paraforge_encoders::lstm_scan) and through burn's operations.
        let runs = Arch::ALL
            .into_iter()
            .filter(|a| !a.is_gaussian())
            .flat_map(|a| [(a, false), (a, true)]);
        for (arch, burn_ops) in runs {
            let shape = small_shape(arch);
            let values = random_values(&shape, 7, &|_| (-0.8, 0.8));
            // The regulariser's start point differs from the values.
            let (emb0, _) = random_values(&shape, 8, &|_| (-0.8, 0.8));
            let start = Net::from_values(
                shape.clone(),
                &emb0,
                &values
                    .1
                    .iter()
                    .map(|(v, r, c)| (v.iter().map(|x| x * 0.5).collect(), *r, *c))
                    .collect::<Vec<_>>(),
                &dev,
                DType::F64,
            );
            let (checked, worst) = check_gradients(&shape, &values, &|net| {
                // A margin large enough that every hinge is active.
                let g = if burn_ops {
                    paraforge_encoders::lstm_scan::with_burn_ops(|| net.forward(&batch))
                } else {
                    net.forward(&batch)
                };
                margin_loss(g, 2, 3.0) + regulariser(net, &start, 0.01, 0.02).unwrap()
            });
            eprintln!(
                "{arch} (burn ops: {burn_ops}): {checked} entries, worst relative error {worst:.1e}"
            );
        }
    }

    /// The same for the Gaussian encoders' whole objective: the
    /// expected-likelihood margin loss, the KL prior and both regularisers.
    #[test]
    fn gaussian_gradients_match_finite_differences() {
        let dev = Device::flex().autodiff();
        let batch = Batch::new(&SENTS);
        for arch in [Arch::Gaussian, Arch::LstmGaussian] {
            let shape = small_shape(arch);
            // The operators' scales stay away from 0, where log A^2 is.
            let range = |name: &str| {
                if name == "wlo.scale" {
                    (0.5, 1.5)
                } else {
                    (-0.8, 0.8)
                }
            };
            let values = random_values(&shape, 7, &range);
            let (emb0, comp0) = random_values(&shape, 8, &range);
            let start = Net::from_values(shape.clone(), &emb0, &comp0, &dev, DType::F64);
            let (checked, worst) = check_gradients(&shape, &values, &|net| {
                // A margin large enough that every hinge is active.
                let (l, kl) = objective(net, &batch, 2, 50.0, 0.1);
                l + kl.unwrap() + regulariser(net, &start, 0.01, 0.02).unwrap()
            });
            eprintln!("{arch}: {checked} entries, worst relative error {worst:.1e}");
        }
    }

    /// The same for combinations, summed and concatenated, with a trigram
    /// part (one sentence has no known trigram) and both regularisers.
    #[test]
    fn combination_gradients_match_finite_differences() {
        let dev = Device::flex().autodiff();
        let tri: [&[u32]; 8] = [
            &[0, 1],
            &[2, 3, 4],
            &[4],
            &[],
            &[2, 3, 4],
            &[1, 0, 3],
            &[],
            &[4],
        ];
        let batch = Batch::with_trigrams(&SENTS, &tri);
        // With and without each part scaled to unit length (empty trigram
        // lists above give a zero part, the case the epsilon is for).
        // By dimension (parts of 3, 3 and 3 here) scales each unit part
        // by sqrt(1/3).
        for (spec, unit_parts, parts_by_dimension) in [
            ("word+trigram+lstm", true, false),
            ("word,trigram,gran", true, false),
            ("word,trigram,gran", true, true),
            ("trigram+dan", false, false),
            ("word,trigram,lstm", false, false),
        ] {
            let spec: Spec = spec.parse().unwrap();
            let shape = Shape {
                unit_parts,
                parts_by_dimension,
                arch: spec.arch,
                parts: spec.parts.clone(),
                trigrams: 5,
                trigram_dim: 3,
                ..small_shape(Arch::Lstm)
            };
            shape.validate().unwrap();
            let values = random_values(&shape, 7, &|_| (-0.8, 0.8));
            let (emb0, comp0) = random_values(&shape, 8, &|_| (-0.8, 0.8));
            let start = Net::from_values(shape.clone(), &emb0, &comp0, &dev, DType::F64);
            let (checked, worst) = check_gradients(&shape, &values, &|net| {
                margin_loss(net.forward(&batch), 2, 3.0)
                    + regulariser(net, &start, 0.01, 0.02).unwrap()
            });
            eprintln!("{spec}: {checked} entries, worst relative error {worst:.1e}");
        }
    }

    /// The Gaussians' similarity is log N(0; mu1 - mu2, v1 + v2) + k/2
    /// log(2 pi) (Chen and Gimpel, 2020, eq. 4), by hand.
    #[test]
    fn expected_likelihood_follows_its_definition() {
        let dev = Device::flex();
        let t = |v: &[f64]| {
            Tensor::<2>::from_data(TensorData::new(v.to_vec(), [1, 4]), (&dev, DType::F64))
        };
        let e = f64s(expected_likelihood(
            t(&[0.0, 1.0, 1.0, 2.0]),
            t(&[1.0, 1.0, 3.0, 2.0]),
        ))[0];
        let want = -0.5 * ((4f64).ln() + 1.0 / 4.0 + (4f64).ln());
        assert!((e - want).abs() < 1e-12, "{e} vs {want}");
    }
    #[test]
    fn defaults_follow_the_papers() {
        let spec: Spec = "word,trigram,lstm".parse().unwrap();
        assert_eq!((spec.arch, default_scramble(&spec)), (Arch::Concat, 0.3));
        assert_eq!(default_margin(&"gaussian".parse::<Spec>().unwrap()), 1.0);
    }
}
