//! The encoders with compositional parameters (docs/encoders.md) as
//! networks: LSTM and BLSTM (Wieting and Gimpel, 2018, section 4), GRAN
//! (Wieting, Mallinson and Gimpel, 2017), RNN, iRNN, DAN and the projection
//! model (Wieting et al., 2016, section 3), the Gaussian encoders (Chen and
//! Gimpel, 2020) and sums or concatenations of parts, on burn (with
//! autodiff when training: the trainer's loss and updates run on these
//! same forward passes). The word averaging encoders are core's `.pfe`
//! model, trained by hand-written gradients in the trainer.
//!
//! Every parameter is a rank-2 tensor (biases are [1, n]) so that saving,
//! loading, regularising and the gradient checks walk one list.

use burn::module::{Module, Param};
use burn::tensor::{DType, Device, Int, Tensor, TensorData};
use rand::{Rng, SeedableRng};

use paraforge_core::PartScale;

use crate::ModelError;

mod gaussian;
mod recurrent;
mod tree;

/// An encoder architecture: `paraforge train --model NAME`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Arch {
    /// Mean of the hidden states (Wieting and Gimpel, 2018).
    Lstm,
    /// LSTM whose output gate is fixed at 1 (Wieting et al., 2016).
    LstmNoO,
    /// Forward and backward LSTMs, hidden states averaged, then their mean.
    Blstm,
    /// As `Blstm`, the two directions concatenated (Wieting and Gimpel, 2018, Table 14).
    BlstmConcat,
    /// Forward and backward LSTMs, each hidden dimension's maximum over the
    /// sentence, the two directions concatenated ("BLSTM (Max,
    /// concatenation)", Wieting and Gimpel, 2018, Table 14).
    BlstmMax,
    /// Gated recurrent averaging network (Wieting et al., 2017, eq. 1).
    Gran,
    /// tanh RNN, the last hidden state (Wieting et al., 2016).
    Rnn,
    /// Identity-initialised RNN with identity activation, the last hidden
    /// state divided by the length: the word average before training.
    Irnn,
    /// Recursive network over the sentence's binarized constituent tree
    /// (Wieting et al., 2015, section 4): each node is tanh(W [left;
    /// right] + b) of its children, the words are the leaves, the root is
    /// the sentence. W starts near [I/2; I/2], so that a fresh network
    /// averages (then squashes) its children.
    TreeRnn,
    /// Deep averaging network: the average, then tanh layers.
    Dan,
    /// The average, then one linear projection with bias.
    Proj,
    /// The plain word average, no parameters besides the word table: the
    /// encoder of Wieting et al. (2017)'s averaging reference classifier (`classifier.rs`;
    /// not a `train --model`, where `word` is the fast average).
    Avg,
    /// Word linear operators (Chen and Gimpel, 2020, section 2): each word scales and
    /// translates a Gaussian that starts as N(0, I); the embedding is the
    /// final mean and diagonal variance, concatenated.
    Gaussian,
    /// The LSTM's averaged hidden states, then two linear maps: the mean
    /// and the log variance of a Gaussian (Chen and Gimpel, 2020, section 4.1).
    LstmGaussian,
    /// Mean of the character-trigram vectors: only a part of a
    /// combination (alone, `trigram` is the fast average).
    Trigram,
    /// The sum of its parts' embeddings (Wieting and Gimpel, 2018, Tables 8-9, "addition").
    Sum,
    /// Its parts' embeddings concatenated (Wieting and Gimpel, 2018, "concatenation").
    Concat,
}

impl Arch {
    pub const ALL: [Arch; 13] = [
        Arch::Lstm,
        Arch::LstmNoO,
        Arch::Blstm,
        Arch::BlstmConcat,
        Arch::BlstmMax,
        Arch::Gran,
        Arch::Rnn,
        Arch::Irnn,
        Arch::TreeRnn,
        Arch::Dan,
        Arch::Proj,
        Arch::Gaussian,
        Arch::LstmGaussian,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Arch::Lstm => "lstm",
            Arch::LstmNoO => "lstm-no-o",
            Arch::Blstm => "blstm",
            Arch::BlstmConcat => "blstm-concat",
            Arch::BlstmMax => "blstm-max",
            Arch::Gran => "gran",
            Arch::Rnn => "rnn",
            Arch::Irnn => "irnn",
            Arch::TreeRnn => "tree-rnn",
            Arch::Dan => "dan",
            Arch::Proj => "proj",
            Arch::Avg => "avg",
            Arch::Gaussian => "gaussian",
            Arch::LstmGaussian => "lstm-gaussian",
            Arch::Trigram => "trigram",
            Arch::Sum => "sum",
            Arch::Concat => "concat",
        }
    }

    /// Does it embed a sentence as a Gaussian (mean, variance), trained
    /// with the expected-likelihood similarity and the KL prior of Chen and Gimpel (2020)?
    pub fn is_gaussian(self) -> bool {
        matches!(self, Arch::Gaussian | Arch::LstmGaussian)
    }

    pub fn is_combination(self) -> bool {
        matches!(self, Arch::Sum | Arch::Concat)
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

/// What `--model` names for the neural trainer: one encoder, or a
/// combination of parts joined by `+` (their embeddings summed) or `,`
/// (concatenated), as `word+trigram+lstm` or `word,trigram,lstm`. A part is
/// `word` (the word average), `trigram` or a neural encoder other than the
/// Gaussians.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    pub arch: Arch,
    /// A combination's parts (`word` is [`Arch::Avg`]), else empty.
    pub parts: Vec<Arch>,
}

impl Spec {
    pub fn single(arch: Arch) -> Spec {
        Spec {
            arch,
            parts: Vec::new(),
        }
    }

    pub fn has_trigrams(&self) -> bool {
        self.parts.contains(&Arch::Trigram)
    }

    /// The spec as written: the encoder's name, or the parts joined.
    pub fn name(&self) -> String {
        if self.parts.is_empty() {
            return self.arch.name().into();
        }
        let sep = if self.arch == Arch::Sum { "+" } else { "," };
        self.parts
            .iter()
            .map(|&p| if p == Arch::Avg { "word" } else { p.name() })
            .collect::<Vec<_>>()
            .join(sep)
    }
}

impl std::fmt::Display for Spec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

impl std::str::FromStr for Spec {
    type Err = String;
    fn from_str(spec: &str) -> Result<Spec, String> {
        let s = spec.trim().to_ascii_lowercase();
        let (sum, cat) = (s.contains('+'), s.contains(','));
        if sum && cat {
            return Err(format!(
                "{spec:?} mixes + (sum) and , (concatenation); a combination uses one"
            ));
        }
        if !sum && !cat {
            return s.parse::<Arch>().map(Spec::single);
        }
        let (arch, sep) = if sum {
            (Arch::Sum, '+')
        } else {
            (Arch::Concat, ',')
        };
        let mut parts = Vec::new();
        for p in s.split(sep).map(str::trim) {
            let part = match p {
                "" => return Err(format!("{spec:?} has an empty part")),
                "word" => Arch::Avg,
                "trigram" => Arch::Trigram,
                p => p
                    .parse::<Arch>()
                    .map_err(|e| format!("part of {spec:?}: {e}"))?,
            };
            if part.is_gaussian() {
                return Err(format!(
                    "part {p:?} of {spec:?}: a Gaussian encoder does not combine (its embedding is a distribution, trained with its own similarity)"
                ));
            }
            if parts.contains(&part) {
                return Err(format!("part {p:?} of {spec:?} is there twice"));
            }
            parts.push(part);
        }
        Ok(Spec { arch, parts })
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
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
    /// A combination's parts, in order (`avg` is the word average).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<Arch>,
    /// Rows of a combination's trigram table (`trigram.emb`); 0 without a
    /// `trigram` part. Saved as `trigram_rows`: the model's config lists
    /// the trigrams themselves as `trigrams`.
    #[serde(default, skip_serializing_if = "is_zero", rename = "trigram_rows")]
    pub trigrams: usize,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub trigram_dim: usize,
    /// A combination scales each part's embedding to unit length before
    /// adding or concatenating them, so that no part outweighs the others in
    /// the cosine by its scale alone (docs/encoders.md, combinations).
    /// Absent (false) in models saved before.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unit_parts: bool,
    /// A concatenation then weights its unit parts by their dimensions
    /// ([`PartScale::ByDimension`]), so that a 50-d part does not weigh as
    /// much as a 300-d one in the cosine. Absent (false) in models saved
    /// before.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub parts_by_dimension: bool,
}

impl Shape {
    /// How the parts are scaled before they are joined.
    pub fn part_scale(&self) -> PartScale {
        match (self.unit_parts, self.parts_by_dimension) {
            (false, _) => PartScale::Raw,
            (true, false) => PartScale::Unit,
            (true, true) => PartScale::ByDimension,
        }
    }

    pub fn validate(&self) -> Result<(), ModelError> {
        let bad = |m: String| Err(ModelError::Invalid(m));
        if self.parts_by_dimension && !(self.unit_parts && self.arch == Arch::Concat) {
            return bad(format!(
                "{}: parts_by_dimension is for a concatenation with unit_parts",
                self.arch
            ));
        }
        if self.vocab < 1 || self.word_dim < 1 || self.hidden < 1 {
            return bad(format!(
                "{}: the vocabulary, word dimension and hidden size must be at least 1",
                self.arch
            ));
        }
        for (what, n, max) in [
            ("word dimension", self.word_dim, crate::limits::MAX_DIM),
            ("hidden size", self.hidden, crate::limits::MAX_DIM),
            (
                "trigram dimension",
                self.trigram_dim,
                crate::limits::MAX_DIM,
            ),
            ("layers", self.layers, crate::limits::MAX_LAYERS),
        ] {
            if n > max {
                return bad(format!(
                    "{}: {what} {n} is more than the limit of {max}",
                    self.arch
                ));
            }
        }
        if self.arch == Arch::Irnn && self.hidden != self.word_dim {
            return bad(format!(
                "irnn starts as the word average, so its hidden size must equal the word dimension ({}), not {}",
                self.word_dim, self.hidden
            ));
        }
        if self.arch == Arch::TreeRnn && self.hidden != self.word_dim {
            return bad(format!(
                "tree-rnn's nodes and words share one space, so its hidden size must equal the word dimension ({}), not {}",
                self.word_dim, self.hidden
            ));
        }
        if self.arch == Arch::Gaussian && self.hidden != self.word_dim {
            return bad(format!(
                "gaussian's operators act in the word dimension ({}), so its hidden size must equal it, not {}",
                self.word_dim, self.hidden
            ));
        }
        if self.arch == Arch::Dan && self.layers < 1 {
            return bad("dan needs at least one layer".into());
        }
        if self.arch.is_combination() {
            return self.validate_combination();
        }
        if self.arch == Arch::Trigram || !self.parts.is_empty() || self.trigrams > 0 {
            return bad(format!(
                "{}: not a combination, so no parts or trigram table",
                self.arch
            ));
        }
        Ok(())
    }

    fn validate_combination(&self) -> Result<(), ModelError> {
        let bad = |m: String| Err(ModelError::Invalid(m));
        let spec = Spec {
            arch: self.arch,
            parts: self.parts.clone(),
        };
        if self.parts.len() < 2 {
            return bad(format!(
                "{}: a combination needs two parts or more",
                self.arch
            ));
        }
        for &p in &self.parts {
            if p.is_combination() || p.is_gaussian() || p == Arch::TreeRnn {
                return bad(format!("{spec}: {p} cannot be a part"));
            }
        }
        if spec.has_trigrams() != (self.trigrams > 0 && self.trigram_dim > 0) {
            return bad(format!(
                "{spec}: a trigram table ({} x {}) exactly when there is a trigram part",
                self.trigrams, self.trigram_dim
            ));
        }
        for &p in &self.parts {
            self.part_shape(p).validate()?;
        }
        let dims: Vec<usize> = self
            .parts
            .iter()
            .map(|&p| self.part_shape(p).out_dim())
            .collect();
        if self.arch == Arch::Sum && dims.iter().any(|&d| d != dims[0]) {
            return bad(format!(
                "{spec}: a sum needs parts of one size, not {dims:?} (set --hidden, --trigram-dim)"
            ));
        }
        Ok(())
    }

    /// A part of a combination as a network of its own: a word-reading
    /// part shares the word table; the trigram part's table is the
    /// trigram table (read as an average).
    fn part_shape(&self, p: Arch) -> Shape {
        if p == Arch::Trigram {
            Shape {
                unit_parts: false,
                parts_by_dimension: false,
                arch: Arch::Avg,
                vocab: self.trigrams,
                word_dim: self.trigram_dim,
                hidden: self.trigram_dim,
                layers: 0,
                parts: Vec::new(),
                trigrams: 0,
                trigram_dim: 0,
            }
        } else {
            Shape {
                unit_parts: false,
                parts_by_dimension: false,
                arch: p,
                parts: Vec::new(),
                trigrams: 0,
                trigram_dim: 0,
                ..self.clone()
            }
        }
    }

    /// The sentence embedding's size.
    pub fn out_dim(&self) -> usize {
        match self.arch {
            Arch::BlstmConcat | Arch::BlstmMax | Arch::LstmGaussian => 2 * self.hidden,
            Arch::Gaussian => 2 * self.word_dim,
            Arch::Gran | Arch::Avg => self.word_dim,
            Arch::Trigram => self.trigram_dim,
            Arch::Sum => self.part_shape(self.parts[0]).out_dim(),
            Arch::Concat => self
                .parts
                .iter()
                .map(|&p| self.part_shape(p).out_dim())
                .sum(),
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
            Arch::Blstm | Arch::BlstmConcat | Arch::BlstmMax => [lstm("fwd"), lstm("bwd")].concat(),
            Arch::Gran => {
                let a = 1.0 / (d as f64).sqrt();
                let mut v = lstm("fwd");
                v.push(("gate.w_x".into(), d, d, Init::Uniform(a)));
                v.push(("gate.w_h".into(), h, d, Init::Uniform(a)));
                v.push(("gate.b".into(), 1, d, Init::Uniform(a)));
                v
            }
            Arch::Rnn => {
                // W_h starts at the identity: at +-1/sqrt(h) its spectral
                // radius is about 0.58, so the last state kept only the last
                // few tokens and the RNN trailed the word average
                // (docs/encoders.md, "Why rnn trailed").
                let a = 1.0 / (h as f64).sqrt();
                vec![
                    ("rnn.w_x".into(), d, h, Init::Uniform(a)),
                    ("rnn.w_h".into(), h, h, Init::Identity),
                    ("rnn.b".into(), 1, h, Init::Zero),
                ]
            }
            Arch::Irnn => vec![
                ("rnn.w_x".into(), d, h, Init::Identity),
                ("rnn.w_h".into(), h, h, Init::Identity),
                ("rnn.b".into(), 1, h, Init::Zero),
            ],
            Arch::TreeRnn => vec![
                ("tree.w".into(), 2 * d, d, Init::HalfIdentities),
                ("tree.b".into(), 1, d, Init::Zero),
            ],
            Arch::Avg | Arch::Trigram => Vec::new(),
            // The trigram table first, then each part's parameters under
            // `part<i>.`.
            Arch::Sum | Arch::Concat => {
                let mut v = Vec::new();
                if self.trigrams > 0 {
                    v.push((
                        "trigram.emb".into(),
                        self.trigrams,
                        self.trigram_dim,
                        Init::Uniform(0.05),
                    ));
                }
                for (i, &p) in self.parts.iter().enumerate() {
                    if p != Arch::Trigram {
                        for (name, r, c, init) in self.part_shape(p).params() {
                            v.push((format!("part{i}.{name}"), r, c, init));
                        }
                    }
                }
                v
            }
            // The translations B are the word table; the scales A start
            // near 1 (the identity operator).
            Arch::Gaussian => vec![("wlo.scale".into(), self.vocab, d, Init::AroundOne(0.05))],
            Arch::LstmGaussian => {
                let mut v = lstm("fwd");
                for m in ["mu", "lv"] {
                    v.push((format!("gauss.w_{m}"), h, h, glorot(h, h)));
                    v.push((format!("gauss.b_{m}"), 1, h, Init::Zero));
                }
                v
            }
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

/// Each row scaled to unit length, as a combination scales its parts; a
/// zero row (a part with nothing to embed) stays zero, and the epsilon
/// keeps sqrt's gradient finite there.
pub fn unit_rows(g: Tensor<2>) -> Tensor<2> {
    let norm = (g.clone().powi_scalar(2).sum_dim(1) + 1e-24).sqrt();
    g / norm
}

/// Where the L2 regulariser pulls a compositional parameter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pull {
    /// Towards 0, weight lambda_c.
    Zero,
    /// Towards its value at the start, lambda_c (the iRNN's identity, the
    /// word operators' scales).
    Start,
    /// A table of rows: towards the start, lambda_w (the trigram table).
    Table,
}

impl Shape {
    /// Where the regulariser pulls each compositional parameter, in
    /// [`Net::comp`] order.
    pub fn pulls(&self) -> Vec<Pull> {
        match self.arch {
            Arch::Sum | Arch::Concat => {
                let mut v = Vec::new();
                if self.trigrams > 0 {
                    v.push(Pull::Table);
                }
                for &p in self.parts.iter().filter(|&&p| p != Arch::Trigram) {
                    v.extend(self.part_shape(p).pulls());
                }
                v
            }
            Arch::Irnn | Arch::Gaussian => vec![Pull::Start; self.params().len()],
            _ => vec![Pull::Zero; self.params().len()],
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Init {
    Uniform(f64),
    /// Uniform in 1 +- a.
    AroundOne(f64),
    Identity,
    /// [I/2; I/2] for a [2d, d] matrix, plus uniform noise in +-0.01 so
    /// that left and right children differ.
    HalfIdentities,
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
    /// The sentences' trigram ids, for a combination with a trigram part.
    pub(crate) trigrams: Option<Box<Batch>>,
    /// Each sentence's binary tree, for `tree-rnn`; without them (or for
    /// a sentence whose tree is empty) the tree is right-branching.
    pub(crate) trees: Option<Vec<Vec<[u32; 2]>>>,
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
            trigrams: None,
            trees: None,
        }
    }

    /// The same batch with each sentence's tree (`tree-rnn`): the merges
    /// of a [`crate::tree::Tree`] over its tokens, or none.
    pub fn with_trees(self, trees: Vec<Vec<[u32; 2]>>) -> Batch {
        Batch {
            trees: Some(trees),
            ..self
        }
    }

    /// Sentences as word ids and as trigram ids (which may be empty).
    pub fn with_trigrams(words: &[&[u32]], trigrams: &[&[u32]]) -> Batch {
        Batch {
            trigrams: Some(Box::new(Batch::new(trigrams))),
            ..Batch::new(words)
        }
    }
}

impl Net {
    /// A fresh network: the word table from `emb` ([vocab, word_dim] row
    /// major), the rest initialised from `seed`.
    pub fn init(shape: Shape, emb: &[f32], seed: u64, dev: &Device) -> Result<Net, ModelError> {
        shape.validate()?;
        if emb.len() != shape.vocab * shape.word_dim {
            return Err(ModelError::Invalid(format!(
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
                    Init::AroundOne(a) => {
                        (0..r * c).map(|_| 1.0 + rng.random_range(-a..a)).collect()
                    }
                    Init::Zero => vec![0.0; r * c],
                    Init::Identity => (0..r * c)
                        .map(|k| if k / c == k % c { 1.0 } else { 0.0 })
                        .collect(),
                    Init::HalfIdentities => (0..r * c)
                        .map(|k| {
                            let noise = rng.random_range(-0.01..0.01);
                            if (k / c) % c == k % c {
                                0.5 + noise
                            } else {
                                noise
                            }
                        })
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
        self.forward_kl(b).0
    }

    /// Sentence embeddings [n, out_dim] and, for the Gaussian encoders,
    /// each sentence's KL term [n, 1] (see [`Net::gaussian`]).
    pub fn forward_kl(&self, b: &Batch) -> (Tensor<2>, Option<Tensor<2>>) {
        if self.shape.arch.is_combination() {
            let outs: Vec<Tensor<2>> = self
                .part_nets()
                .into_iter()
                .map(|(net, tri)| match tri {
                    true => net.forward(b.trigrams.as_deref().expect("a trigram part's ids")),
                    false => net.forward(b),
                })
                .collect();
            let total: usize = outs.iter().map(|g| g.dims()[1]).sum();
            let scale = self.shape.part_scale();
            let outs: Vec<Tensor<2>> = outs
                .into_iter()
                .map(|g| match scale.length(g.dims()[1], total) {
                    None => g,
                    Some(len) => unit_rows(g) * len,
                })
                .collect();
            let g = match self.shape.arch {
                Arch::Sum => outs.into_iter().reduce(|a, b| a + b).expect("parts"),
                _ => Tensor::cat(outs, 1),
            };
            return (g, None);
        }
        let emb = self.emb.val();
        let dev = emb.device();
        let dtype = emb.dtype();
        let (n, len, d) = (b.n, b.len, self.shape.word_dim);
        let ids = Tensor::<1, Int>::from_data(TensorData::new(b.ids.clone(), [n * len]), &dev);
        let x = emb.select(0, ids.clone()).reshape([n, len, d]);
        let f = |v: &[f32], shape: [usize; 2]| {
            Tensor::<2>::from_data(
                TensorData::new(v.to_vec(), shape).convert_dtype(dtype),
                (&dev, dtype),
            )
        };
        let mask = f(&b.mask, [n, len]);
        let lens = f(&b.lens, [n, 1]);
        if self.shape.arch.is_gaussian() {
            let (g, kl) = self.gaussian(&x, ids, &mask, lens);
            return (g, Some(kl));
        }
        let g = match self.shape.arch {
            Arch::Gaussian | Arch::LstmGaussian | Arch::Sum | Arch::Concat => {
                unreachable!("handled above")
            }
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
            Arch::BlstmMax => {
                // Hidden states lie in (-1, 1): 4 below a padded step's
                // zero keeps it from ever being the maximum.
                let pad = (mask.clone().unsqueeze_dim::<3>(2) - 1.0) * 4.0;
                let h = self.shape.hidden;
                let pool = |hs: Tensor<3>| (hs + pad.clone()).max_dim(1).reshape([n, h]);
                let fw = pool(self.lstm_states(0, &x, &mask, false));
                let bw = pool(self.lstm_states(3, &x, &mask, true));
                Tensor::cat(vec![fw, bw], 1)
            }
            Arch::Gran => self.lstm(0, &x, &mask, false, true).1 / lens,
            Arch::TreeRnn => self.tree_rnn(x, b),
            Arch::Rnn | Arch::Irnn => {
                let h = self.rnn(&x, &mask);
                if self.shape.arch == Arch::Irnn {
                    h / lens
                } else {
                    h
                }
            }
            Arch::Dan | Arch::Proj | Arch::Avg | Arch::Trigram => {
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
        };
        (g, None)
    }

    /// A combination's parts as networks of their own over this one's
    /// parameters (shared, so gradients reach them), each with whether it
    /// reads trigrams.
    fn part_nets(&self) -> Vec<(Net, bool)> {
        let tri = usize::from(self.shape.trigrams > 0);
        let mut at = tri;
        self.shape
            .parts
            .iter()
            .map(|&p| {
                let shape = self.shape.part_shape(p);
                if p == Arch::Trigram {
                    let emb = self.comp[0].clone();
                    return (
                        Net {
                            emb,
                            comp: Vec::new(),
                            shape,
                        },
                        true,
                    );
                }
                let k = shape.params().len();
                let comp = self.comp[at..at + k].to_vec();
                at += k;
                let emb = self.emb.clone();
                (Net { emb, comp, shape }, false)
            })
            .collect()
    }
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

    /// Each part's own embedding of `batch`, before it is combined.
    fn part_embeddings(net: &Net, batch: &Batch) -> Vec<Vec<f64>> {
        net.part_nets()
            .into_iter()
            .map(|(p, t)| {
                f64s(p.forward(if t {
                    batch.trigrams.as_deref().unwrap()
                } else {
                    batch
                }))
            })
            .collect()
    }

    /// With unit parts, each part of a concatenation has length 1 (an
    /// empty trigram list stays zero) and a sum is the sum of the unit
    /// parts; weighted by dimension, a concatenation's part of d_i of D
    /// dimensions has length sqrt(d_i / D); a config saved before a flag
    /// reads as what was saved then.
    #[test]
    fn parts_are_scaled_as_the_shape_says_and_old_configs_read_as_before() {
        let dev = Device::flex();
        let tri: [&[u32]; 2] = [&[0, 1], &[]];
        let batch = Batch::with_trigrams(&SENTS[..2], &tri);
        for (spec, by_dimension) in [
            ("word,trigram,lstm", false),
            ("word,trigram,lstm", true),
            ("word+trigram+lstm", false),
        ] {
            let spec: Spec = spec.parse().unwrap();
            let concat = spec.arch == Arch::Concat;
            let shape = Shape {
                unit_parts: true,
                parts_by_dimension: by_dimension,
                arch: spec.arch,
                parts: spec.parts.clone(),
                trigrams: 2,
                // Parts of 3, 5 and 3 dimensions where they may differ.
                trigram_dim: if concat { 5 } else { 3 },
                ..small_shape(Arch::Lstm)
            };
            shape.validate().unwrap();
            let (emb, comp) = random_values(&shape, 3, &|_| (-0.8, 0.8));
            let net = Net::from_values(shape.clone(), &emb, &comp, &dev, DType::F64);
            let g = f64s(net.forward(&batch));
            let parts = part_embeddings(&net, &batch);
            let dims: Vec<usize> = parts.iter().map(|p| p.len() / 2).collect();
            let total: usize = dims.iter().sum();
            for row in 0..2 {
                let scaled: Vec<Vec<f64>> = parts
                    .iter()
                    .zip(&dims)
                    .map(|(p, &d)| {
                        let p = &p[row * d..(row + 1) * d];
                        let n = (p.iter().map(|x| x * x).sum::<f64>() + 1e-24).sqrt();
                        let len = match by_dimension {
                            true => (d as f64 / total as f64).sqrt(),
                            false => 1.0,
                        };
                        p.iter().map(|x| x / n * len).collect()
                    })
                    .collect();
                let want: Vec<f64> = if concat {
                    scaled.concat()
                } else {
                    (0..dims[0])
                        .map(|k| scaled.iter().map(|u| u[k]).sum())
                        .collect()
                };
                let got = &g[row * want.len()..(row + 1) * want.len()];
                for (a, b) in got.iter().zip(&want) {
                    assert!((a - b).abs() < 1e-9, "{spec}: {got:?} vs {want:?}");
                }
            }
            // Row 1 has no trigram: its trigram part is zero, not NaN.
            assert!(g.iter().all(|x| x.is_finite()));
            let mut v = serde_json::to_value(&shape).unwrap();
            assert_eq!(v["unit_parts"], true);
            assert_eq!(v.get("parts_by_dimension").is_some(), by_dimension);
            v.as_object_mut().unwrap().remove("parts_by_dimension");
            let unit: Shape = serde_json::from_value(v.clone()).unwrap();
            assert_eq!(unit.part_scale(), PartScale::Unit);
            v.as_object_mut().unwrap().remove("unit_parts");
            let old: Shape = serde_json::from_value(v).unwrap();
            assert_eq!(old.part_scale(), PartScale::Raw);
        }
        // By dimension is for a concatenation of unit parts only.
        let sum: Spec = "word+trigram".parse().unwrap();
        let e = Shape {
            unit_parts: true,
            parts_by_dimension: true,
            arch: sum.arch,
            parts: sum.parts,
            trigrams: 2,
            trigram_dim: 3,
            ..small_shape(Arch::Lstm)
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(e.contains("parts_by_dimension"), "{e}");
    }

    /// A combination's embedding is its parts' own, summed or concatenated.
    #[test]
    fn combinations_sum_or_concatenate_their_parts() {
        let dev = Device::flex();
        let tri: [&[u32]; 2] = [&[0, 1], &[]];
        let batch = Batch::with_trigrams(&SENTS[..2], &tri);
        let embed = |spec: &str| {
            let spec: Spec = spec.parse().unwrap();
            let shape = Shape {
                arch: spec.arch,
                parts: spec.parts.clone(),
                trigrams: 2,
                trigram_dim: 3,
                ..small_shape(Arch::Lstm)
            };
            let (emb, comp) = random_values(&shape, 3, &|_| (-0.8, 0.8));
            let net = Net::from_values(shape, &emb, &comp, &dev, DType::F64);
            let parts = part_embeddings(&net, &batch);
            (f64s(net.forward(&batch)), parts, emb)
        };
        let (sum, parts, emb) = embed("word+trigram+lstm");
        for k in 0..6 {
            let want: f64 = parts.iter().map(|p| p[k]).sum();
            assert!((sum[k] - want).abs() < 1e-12);
        }
        // The word part is the mean of the rows; an empty trigram list, 0.
        assert!((parts[0][0] - (emb[0] + emb[3] + emb[6]) / 3.0).abs() < 1e-12);
        assert_eq!(&parts[1][3..], &[0.0, 0.0, 0.0]);
        let (cat, parts, _) = embed("word,trigram,lstm");
        assert_eq!(cat.len(), 2 * 9);
        assert_eq!(&cat[..3], &parts[0][..3]);
        assert_eq!(&cat[3..6], &parts[1][..3]);
        assert_eq!(&cat[6..9], &parts[2][..3]);
    }

    /// The Gaussian encoders compute what Chen and Gimpel (2020) define, by
    /// hand: the word operators' mean and variance and the KL terms.
    #[test]
    fn gaussian_encoder_follows_its_definition() {
        let dev = Device::flex();
        let shape = Shape {
            vocab: 3,
            word_dim: 2,
            hidden: 2,
            ..small_shape(Arch::Gaussian)
        };
        let (a, b) = (
            [0.5, 2.0, -1.0, 1.5, 1.0, 1.0],
            [0.1, 0.2, -0.3, 0.4, 0.0, 0.0],
        );
        let net = Net::from_values(shape, &b, &[(a.to_vec(), 3, 2)], &dev, DType::F64);
        let (g, kl) = net.forward_kl(&Batch::new(&[&[0, 1], &[1]]));
        let (g, kl) = (f64s(g), f64s(kl.unwrap()));
        // Sentence [0, 1]: z1 = A0 (z0 + B0), z2 = A1 (z1 + B1).
        let mu1 = [0.5 * 0.1, 2.0 * 0.2];
        let v1 = [0.25, 4.0];
        let mu2 = [-(mu1[0] - 0.3), 1.5 * (mu1[1] + 0.4)];
        let v2 = [0.25, 9.0];
        let klf = |m: [f64; 2], v: [f64; 2]| -> f64 {
            (0..2)
                .map(|k| 0.5 * (v[k] + m[k] * m[k] - 1.0 - v[k].ln()))
                .sum()
        };
        let want = [mu2[0], mu2[1], v2[0], v2[1]];
        for k in 0..4 {
            assert!((g[k] - want[k]).abs() < 1e-12, "{g:?} vs {want:?}");
        }
        assert!((kl[0] - klf(mu1, v1) - klf(mu2, v2)).abs() < 1e-12);
        // Sentence [1] (padded): one operator, then nothing.
        let mu = [0.3, 1.5 * 0.4];
        assert!((g[4] - mu[0]).abs() < 1e-12 && (g[7] - 2.25).abs() < 1e-12);
        assert!((kl[1] - klf(mu, [1.0, 2.25])).abs() < 1e-12);
    }

    /// The untrained rnn's last state still depends on a sentence's first
    /// word: changing it moves the embedding (1 - cosine) at least a
    /// fiftieth as far as changing the last word (measured: 0.094 of it).
    /// With W_h uniform in +-1/sqrt(h) the first of 12 words moved it
    /// 2.4e-6 as far, and the RNN trained to below the word average
    /// (docs/encoders.md).
    #[test]
    fn the_untrained_rnn_remembers_the_first_word() {
        let dev = Device::flex();
        let d = 50;
        let shape = Shape {
            vocab: 20,
            word_dim: d,
            hidden: d,
            ..small_shape(Arch::Rnn)
        };
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        // GloVe-sized rows (50-d GloVe entries are mostly within +-1).
        let emb: Vec<f32> = (0..20 * d).map(|_| rng.random_range(-0.6..0.6)).collect();
        let net = Net::init(shape, &emb, 1, &dev).unwrap();
        let s: Vec<u32> = (1..13).collect();
        let mut first = s.clone();
        first[0] = 15;
        let mut last = s.clone();
        last[11] = 15;
        let e = f64s(net.forward(&Batch::new(&[&s[..], &first[..], &last[..]])));
        let cos = |a: &[f64], b: &[f64]| {
            let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
            let n = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
            dot / (n(a) * n(b))
        };
        let (s, first, last) = (&e[..d], &e[d..2 * d], &e[2 * d..]);
        let moved_first = 1.0 - cos(s, first);
        let moved_last = 1.0 - cos(s, last);
        assert!(
            moved_first > 0.02 * moved_last,
            "first word moves the embedding {moved_first:e}, last word {moved_last:e}"
        );
    }

    #[test]
    fn names_parse_and_shapes_are_checked() {
        for a in Arch::ALL {
            assert_eq!(a.name().parse::<Arch>().unwrap(), a);
        }
        let e = "lstmm".parse::<Arch>().unwrap_err();
        assert!(e.contains("lstmm") && e.contains("blstm"), "{e}");
        let spec: Spec = "Word + trigram+LSTM".parse().unwrap();
        assert_eq!(
            (spec.arch, spec.name()),
            (Arch::Sum, "word+trigram+lstm".into())
        );
        assert_eq!(spec.parts, [Arch::Avg, Arch::Trigram, Arch::Lstm]);
        let spec: Spec = "word,trigram,lstm".parse().unwrap();
        assert_eq!(spec.arch, Arch::Concat);
        for (bad, says) in [
            ("word+trigram,lstm", "mixes"),
            ("word++lstm", "empty part"),
            ("word+lstmm", "\"lstmm\""),
            ("word+gaussian", "does not combine"),
            ("word,lstm,word", "twice"),
            ("sum", "unknown encoder"),
        ] {
            let e = bad.parse::<Spec>().unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
        let sum = Shape {
            arch: Arch::Sum,
            parts: vec![Arch::Avg, Arch::Lstm],
            hidden: 5,
            word_dim: 4,
            ..small_shape(Arch::Lstm)
        };
        let e = sum.validate().unwrap_err().to_string();
        assert!(e.contains("one size") && e.contains("[4, 5]"), "{e}");
        let cat = Shape {
            arch: Arch::Concat,
            ..sum.clone()
        };
        assert_eq!(cat.out_dim(), 9);
        let e = Shape {
            parts: vec![Arch::Avg, Arch::Trigram],
            ..cat
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(e.contains("trigram table"), "{e}");
        let s = Shape {
            unit_parts: false,
            parts_by_dimension: false,
            arch: Arch::Irnn,
            vocab: 5,
            word_dim: 4,
            hidden: 3,
            layers: 1,
            parts: Vec::new(),
            trigrams: 0,
            trigram_dim: 0,
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
