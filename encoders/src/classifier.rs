//! The reference/translation classifier of Wieting, Mallinson and Gimpel
//! (2017, section 5.6.1; docs/filters.md, "P(reference)") as a model: word
//! averaging or an LSTM (mean of its hidden states) followed by a logistic
//! layer, its directory (`model.safetensors` + `config.json`) and its
//! P(reference) of a sentence, which `paraforge rescore --classifier`
//! writes as `reference_probability`. The trainer trains it
//! (`paraforge_trainer::classifier`). A two-way softmax over (reference,
//! translation) equals the logistic of their logit difference, so one
//! logit is kept.

use std::path::Path;

use burn::module::{Module, Param};
use burn::tensor::{DType, Device, Tensor, TensorData};
use paraforge_core::encoder::Kind;
use paraforge_core::Model;
use rand::{Rng, SeedableRng};

use crate::neural::{expected_dims, Arch, Batch, Net, Shape};
use crate::ModelError;

pub const WEIGHTS: &str = "model.safetensors";
pub const CONFIG: &str = "config.json";
const FORMAT: &str = "paraforge-reference-classifier";

/// `paraforge train-classifier --model NAME`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClassifierKind {
    /// The word average, then the logistic layer.
    Avg,
    /// An LSTM, the mean of its hidden states, then the logistic layer.
    Lstm,
}

impl ClassifierKind {
    /// The encoder under the logistic layer.
    pub fn arch(self) -> Arch {
        match self {
            ClassifierKind::Avg => Arch::Avg,
            ClassifierKind::Lstm => Arch::Lstm,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ClassifierKind::Avg => "avg",
            ClassifierKind::Lstm => "lstm",
        }
    }
}

impl std::str::FromStr for ClassifierKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "avg" => Ok(ClassifierKind::Avg),
            "lstm" => Ok(ClassifierKind::Lstm),
            _ => Err(format!("unknown classifier {s:?} (avg or lstm)")),
        }
    }
}

/// The encoder and the logistic layer: `head.w` [dim, 1], `head.b` [1, 1].
#[derive(Module, Debug)]
pub struct RefNet {
    pub enc: Net,
    pub head: Vec<Param<Tensor<2>>>,
}

impl RefNet {
    /// A network with the given values; `comp` holds the encoder's
    /// parameters and then `head.w` and `head.b`.
    pub fn from_values(
        shape: Shape,
        emb: &[f64],
        comp: &[(Vec<f64>, usize, usize)],
        dev: &Device,
        dtype: DType,
    ) -> RefNet {
        let at = comp.len() - 2;
        let enc = Net::from_values(shape, emb, &comp[..at], dev, dtype);
        let head = comp[at..]
            .iter()
            .map(|(v, r, c)| {
                Param::from_tensor(Tensor::<2>::from_data(
                    TensorData::new(v.clone(), [*r, *c]).convert_dtype(dtype),
                    (dev, dtype),
                ))
            })
            .collect();
        RefNet { enc, head }
    }

    /// (name, [rows, cols]) of every parameter after the word table.
    pub fn dims(shape: &Shape) -> Vec<(String, [usize; 2])> {
        let mut d = expected_dims(shape);
        d.push(("head.w".into(), [shape.out_dim(), 1]));
        d.push(("head.b".into(), [1, 1]));
        d
    }

    /// Every parameter by the name the saved file gives it.
    pub fn named_params(&self) -> Vec<(String, &Param<Tensor<2>>)> {
        let mut p = crate::nn_model::named_params(&self.enc);
        p.extend(
            ["head.w", "head.b"]
                .map(String::from)
                .into_iter()
                .zip(&self.head),
        );
        p
    }

    /// One logit per sentence: log P(reference) - log P(translation).
    pub fn logits(&self, b: &Batch) -> Tensor<1> {
        let g = self.enc.forward(b);
        (g.matmul(self.head[0].val()) + self.head[1].val()).reshape([b.n])
    }
}

/// A trained classifier: the network on a plain device and a WORD model
/// for tokenisation (the same rule as every neural encoder: paraforge's
/// score tokenizer, unknown words to the last row).
#[derive(Debug)]
pub struct ReferenceClassifier {
    pub net: RefNet,
    pub words: Model,
    pub notes: serde_json::Value,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Config {
    format: String,
    version: u32,
    classifier: ClassifierKind,
    #[serde(flatten)]
    shape: Shape,
    tokenization: String,
    words: Vec<String>,
    params: Vec<String>,
    #[serde(default)]
    notes: serde_json::Value,
}

impl ReferenceClassifier {
    /// A fresh classifier over the word table of `words` (a WORD model).
    pub fn init(
        kind: ClassifierKind,
        words: Model,
        hidden: usize,
        seed: u64,
        dev: &Device,
    ) -> Result<ReferenceClassifier, ModelError> {
        if words.kind != Kind::Word {
            return Err(ModelError::Invalid(format!(
                "a classifier reads word vectors, not a {} model",
                words.kind.name()
            )));
        }
        let shape = Shape {
            unit_parts: false,
            parts_by_dimension: false,
            arch: kind.arch(),
            vocab: words.words().len() + 1,
            word_dim: words.word_dim,
            hidden,
            layers: 0,
            parts: Vec::new(),
            trigrams: 0,
            trigram_dim: 0,
        };
        let enc = Net::init(shape.clone(), &words.w, seed, dev)?;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x4845_4144);
        let dim = shape.out_dim();
        let a = (6.0 / (dim + 1) as f64).sqrt();
        let w: Vec<f64> = (0..dim).map(|_| rng.random_range(-a..a)).collect();
        let t = |v: Vec<f64>, r: usize, c: usize| {
            Param::from_tensor(Tensor::<2>::from_data(
                TensorData::new(v, [r, c]).convert_dtype(DType::F32),
                (dev, DType::F32),
            ))
        };
        Ok(ReferenceClassifier {
            net: RefNet {
                enc,
                head: vec![t(w, dim, 1), t(vec![0.0], 1, 1)],
            },
            words,
            notes: serde_json::Value::Null,
        })
    }

    pub fn kind(&self) -> ClassifierKind {
        match self.net.enc.shape.arch {
            Arch::Avg => ClassifierKind::Avg,
            _ => ClassifierKind::Lstm,
        }
    }

    /// Word ids of `text`, cut to `max_tokens`.
    pub fn ids(&self, text: &str, max_tokens: usize) -> Vec<u32> {
        let mut w = self.words.encode(text).words;
        w.truncate(max_tokens);
        w
    }

    /// P(reference) of each text, in order; None for a text with no token.
    pub fn probabilities(&self, texts: &[&str]) -> Vec<Option<f32>> {
        let ids: Vec<Vec<u32>> = texts.iter().map(|t| self.ids(t, MAX_TOKENS)).collect();
        let refs: Vec<&[u32]> = ids.iter().map(|v| v.as_slice()).collect();
        probabilities_of(&self.net, &refs)
    }

    /// Writes `dir/model.safetensors` and `dir/config.json`.
    pub fn save(&self, dir: &Path) -> Result<(), ModelError> {
        std::fs::create_dir_all(dir).map_err(|e| ModelError::io(dir, e))?;
        let shape = self.net.enc.shape.clone();
        let names: Vec<String> = RefNet::dims(&shape).into_iter().map(|d| d.0).collect();
        let mut tensors = vec![("emb".to_string(), self.net.enc.emb.val())];
        let params = self.net.enc.comp.iter().chain(&self.net.head);
        tensors.extend(names.iter().cloned().zip(params.map(|p| p.val())));
        let bytes = crate::nn_model::safetensors_bytes(tensors, FORMAT)
            .map_err(|e| ModelError::Invalid(format!("{}: {e}", dir.display())))?;
        crate::nn_model::write_atomic(&dir.join(WEIGHTS), &bytes)?;
        let config = Config {
            format: FORMAT.into(),
            version: 1,
            classifier: self.kind(),
            shape,
            tokenization: crate::nn_model::TOKENIZATION.into(),
            words: self.words.words().to_vec(),
            params: names,
            notes: self.notes.clone(),
        };
        let json = serde_json::to_vec_pretty(&config).expect("config serializes");
        crate::nn_model::write_atomic(&dir.join(CONFIG), &json)
    }

    pub fn load(dir: &Path, dev: &Device) -> Result<ReferenceClassifier, ModelError> {
        let cpath = dir.join(CONFIG);
        let bad = |p: &Path, m: String| ModelError::BadModel {
            path: p.to_path_buf(),
            reason: m,
        };
        let text = std::fs::read(&cpath).map_err(|e| ModelError::io(&cpath, e))?;
        let c: Config = serde_json::from_slice(&text)
            .map_err(|e| bad(&cpath, format!("not a reference classifier's config: {e}")))?;
        if c.format != FORMAT || c.version != 1 {
            return Err(bad(
                &cpath,
                format!(
                    "format {:?} version {}, expected {FORMAT:?} version 1",
                    c.format, c.version
                ),
            ));
        }
        if c.shape.arch != c.classifier.arch() || c.words.len() + 1 != c.shape.vocab {
            return Err(bad(
                &cpath,
                format!(
                    "classifier {} with encoder {} and {} words for {} rows",
                    c.classifier.name(),
                    c.shape.arch,
                    c.words.len(),
                    c.shape.vocab
                ),
            ));
        }
        c.shape.validate().map_err(|e| bad(&cpath, e.to_string()))?;
        let (emb, comp, words) =
            crate::nn_model::read_tables(dir, &c.shape, c.words, RefNet::dims(&c.shape))?;
        let net = RefNet::from_values(c.shape.clone(), &emb, &comp, dev, DType::F32);
        Ok(ReferenceClassifier {
            net,
            words,
            notes: c.notes,
        })
    }
}

/// Sentences are cut at this many tokens (bounds a batch's memory).
pub const MAX_TOKENS: usize = 100;

/// P(reference) of word-id sentences by `net` as it is; None for an empty
/// one. Sentences of similar length share a batch.
pub fn probabilities_of(net: &RefNet, sents: &[&[u32]]) -> Vec<Option<f32>> {
    let mut out = vec![None; sents.len()];
    let mut order: Vec<usize> = (0..sents.len()).filter(|&i| !sents[i].is_empty()).collect();
    order.sort_by_key(|&i| sents[i].len());
    for chunk in order.chunks(256) {
        let b: Vec<&[u32]> = chunk.iter().map(|&i| sents[i]).collect();
        let z = net.logits(&Batch::new(&b));
        let p = burn::tensor::activation::sigmoid(z)
            .into_data()
            .convert::<f32>()
            .try_into_vec::<f32>()
            .expect("converted to f32");
        for (k, &i) in chunk.iter().enumerate() {
            out[i] = Some(p[k]);
        }
    }
    out
}

/// The scorer `paraforge rescore --classifier` hands to the dataset crate.
impl paraforge_core::TextScorer for ReferenceClassifier {
    fn score_texts(&self, texts: &[&str]) -> Vec<Option<f32>> {
        self.probabilities(texts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn_model::{cpu, table};

    /// A parameter's values, rows and columns.
    type Values = (Vec<f64>, usize, usize);

    /// A network's parameters as `Net::from_values` takes them.
    fn values(net: &Net) -> (Vec<f64>, Vec<Values>) {
        let f64s = |t: Tensor<2>| table(t).into_iter().map(f64::from).collect::<Vec<f64>>();
        let comp = net
            .comp
            .iter()
            .map(|p| {
                let [r, c] = p.val().dims();
                (f64s(p.val()), r, c)
            })
            .collect();
        (f64s(net.emb.val()), comp)
    }

    /// A classifier holding a weight that is not a finite number, which
    /// would give NaN for every P(reference), is refused at load, naming
    /// the file, the tensor and the row.
    #[test]
    fn a_classifier_with_weights_that_are_not_finite_is_refused_at_load() {
        let words: Vec<String> = ["a", "man", "plays"].map(String::from).to_vec();
        let wm = crate::testing::words_model(Kind::Word, words, 3, vec![], 0, 2);
        let dir = tempfile::tempdir().unwrap();
        let c = ReferenceClassifier::init(ClassifierKind::Avg, wm.clone(), 3, 1, &cpu()).unwrap();
        let (emb, mut comp) = values(&c.net.enc);
        for p in &c.net.head {
            let [r, k] = p.val().dims();
            comp.push((table(p.val()).into_iter().map(f64::from).collect(), r, k));
        }
        let at = comp.len() - 2;
        comp[at].0[1] = f64::INFINITY;
        let bad = ReferenceClassifier {
            net: RefNet::from_values(c.net.enc.shape.clone(), &emb, &comp, &cpu(), DType::F32),
            words: wm,
            notes: serde_json::Value::Null,
        };
        let out = dir.path().join("classifier");
        bad.save(&out).unwrap();
        let e = ReferenceClassifier::load(&out, &cpu())
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("model.safetensors") && e.contains("head.w") && e.contains("row 1"),
            "{e}"
        );
    }
}
