//! A trained neural encoder on disk and in use: a directory holding
//! `model.safetensors` (the word table `emb`, unknown word last, and the
//! compositional parameters by name, all f32) and `config.json` (the
//! encoder, its sizes, the vocabulary and the tokenisation), which Python
//! opens with `safetensors` (numpy) and `json` alone (docs/encoders.md).

use std::collections::HashMap;
use std::path::Path;

use burn::module::Param;
use burn::tensor::{DType, Tensor};
use paraforge_core::encoder::{Coverage, Encoded, Kind, Scratch, SentenceEncoder};
use paraforge_core::{EncoderError, PartScale, Tokens};

use paraforge_core::Model;

use crate::neural::{expected_dims, Arch, Batch, Net, Shape, Spec};
use crate::ModelError;

pub const WEIGHTS: &str = "model.safetensors";
pub const CONFIG: &str = "config.json";
const FORMAT: &str = "paraforge-neural-encoder";

/// The config version that says how a model's parts are scaled: a reader
/// from before a scaling refuses the newer version instead of joining the
/// parts the old way.
fn version_of(parts: PartScale) -> u32 {
    match parts {
        PartScale::Raw => 1,
        PartScale::Unit => 2,
        PartScale::ByDimension => 3,
    }
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Config {
    pub format: String,
    pub version: u32,
    #[serde(flatten)]
    pub shape: Shape,
    /// How text becomes word ids: paraforge's score tokenizer (lowercased,
    /// words and punctuation apart), a word's id its index here, every
    /// other word the unknown row (`vocab - 1`).
    pub tokenization: String,
    pub words: Vec<String>,
    /// A combination's trigrams: row i of `trigram.emb` is `trigrams[i]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trigrams: Vec<String>,
    /// Names of the parameters after `emb`, in the order the network uses
    /// them.
    pub params: Vec<String>,
    #[serde(default)]
    pub notes: serde_json::Value,
}

#[derive(Debug)]
/// A neural encoder ready to embed text: the network on a plain (no
/// autodiff) device and a WORD model for tokenisation and word lookup.
pub struct NeuralModel {
    pub net: Net,
    pub words: Model,
    pub notes: serde_json::Value,
}

pub use burn::tensor::Device;

pub fn cpu() -> Device {
    Device::flex()
}

/// The net's word table as f32 rows.
pub fn table(t: Tensor<2>) -> Vec<f32> {
    t.into_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .expect("converted to f32")
}

impl NeuralModel {
    /// A fresh encoder: the word table of `words` (a WORD model from
    /// the trainer's `model::init` or `model::init_with_words`), the rest from
    /// `seed`.
    pub fn init(
        arch: Arch,
        words: Model,
        hidden: usize,
        layers: usize,
        seed: u64,
        dev: &Device,
    ) -> Result<NeuralModel, ModelError> {
        NeuralModel::init_spec(&Spec::single(arch), words, hidden, layers, seed, dev)
    }

    /// A fresh encoder or combination: as [`NeuralModel::init`]; a
    /// combination with a trigram part takes a WORD,TRIGRAM model, whose
    /// trigram vocabulary and dimension its trigram table gets.
    pub fn init_spec(
        spec: &Spec,
        words: Model,
        hidden: usize,
        layers: usize,
        seed: u64,
        dev: &Device,
    ) -> Result<NeuralModel, ModelError> {
        let want = if spec.has_trigrams() {
            Kind::WordTrigram
        } else {
            Kind::Word
        };
        if words.kind != want {
            return Err(ModelError::Invalid(format!(
                "{spec} reads a {} model's vocabulary, not a {} model's",
                want.name(),
                words.kind.name()
            )));
        }
        let shape = Shape {
            unit_parts: spec.arch.is_combination(),
            // A sum's parts share one size: by dimension is equal there.
            parts_by_dimension: spec.arch == Arch::Concat,
            arch: spec.arch,
            vocab: words.words().len() + 1,
            word_dim: words.word_dim,
            hidden,
            layers,
            parts: spec.parts.clone(),
            trigrams: words.trigrams().len(),
            trigram_dim: words.trigram_dim,
        };
        let net = Net::init(shape, &words.w, seed, dev)?;
        check_parser(spec.arch)?;
        Ok(NeuralModel {
            net,
            words,
            notes: serde_json::Value::Null,
        })
    }

    pub fn arch(&self) -> Arch {
        self.net.shape.arch
    }

    /// What `--model` names: the encoder, or the combination's parts.
    pub fn spec(&self) -> Spec {
        Spec {
            arch: self.net.shape.arch,
            parts: self.net.shape.parts.clone(),
        }
    }

    pub fn dim(&self) -> usize {
        self.net.shape.out_dim()
    }

    /// `texts` as the network reads them: at most `max_tokens` word rows
    /// (and six trigram rows a word), and for `tree-rnn` the tree over the
    /// words kept, the sentences parsed together.
    pub fn encode_texts(&self, texts: &[&str], max_tokens: usize) -> Vec<Encoded> {
        let toks: Vec<Tokens> = texts.iter().map(|t| paraforge_core::tokenize(t)).collect();
        let mut enc: Vec<Encoded> = toks
            .iter()
            .map(|t| {
                let mut e = Encoded::default();
                self.words.encode_tokens(t, &mut e);
                e.words.truncate(max_tokens);
                // A combination's trigrams: as many as the words' 6
                // characters each give, to bound a batch alike.
                e.trigrams.truncate(max_tokens.saturating_mul(6));
                e
            })
            .collect();
        self.add_trees(&toks, &mut enc);
        enc
    }

    /// For `tree-rnn`, each sentence's tree over the words `enc` kept of
    /// `toks` (right-branching where the parser has none).
    fn add_trees(&self, toks: &[Tokens], enc: &mut [Encoded]) {
        if self.arch() != Arch::TreeRnn {
            return;
        }
        // The parser was opened when the model was made or loaded.
        let Ok(parser) = crate::link_grammar::shared() else {
            return;
        };
        let sents: Vec<Vec<&str>> = toks
            .iter()
            .zip(enc.iter())
            .map(|(t, e)| t.iter().take(e.words.len()).map(|t| t.text).collect())
            .collect();
        if let Ok((trees, _)) = parser.trees(&sents) {
            for (e, t) in enc.iter_mut().zip(trees) {
                e.tree = t.merges;
            }
        }
    }

    /// Embeddings of `texts`, in order; a text with no token gets zeros.
    pub fn embed_many(&self, texts: &[&str]) -> Vec<Vec<f32>> {
        let enc = self.encode_texts(texts, usize::MAX);
        let refs: Vec<&Encoded> = enc.iter().collect();
        let dim = self.dim();
        embed_encoded(&burn::module::Module::valid(&self.net), &refs)
            .chunks(dim)
            .map(|r| r.to_vec())
            .collect()
    }

    /// The WORD model whose table is the net's current word table (for
    /// export-vectors and the scorer).
    pub fn word_model(&self) -> Result<Model, ModelError> {
        Ok(Model::from_tables(
            Kind::Word,
            self.words.words().to_vec(),
            self.net.shape.word_dim,
            table(self.net.emb.val()),
            Vec::new(),
            0,
            Vec::new(),
        )?)
    }

    /// Writes `dir/model.safetensors` and `dir/config.json` (each through a
    /// temporary file and a rename).
    pub fn save(&self, dir: &Path) -> Result<(), ModelError> {
        std::fs::create_dir_all(dir).map_err(|e| ModelError::io(dir, e))?;
        let names = self.net.comp_names();
        let mut tensors = vec![("emb".to_string(), self.net.emb.val())];
        tensors.extend(
            names
                .iter()
                .cloned()
                .zip(self.net.comp.iter().map(|p| p.val())),
        );
        let bytes = safetensors_bytes(tensors, FORMAT)
            .map_err(|e| ModelError::Invalid(format!("{}: {e}", dir.display())))?;
        write_atomic(&dir.join(WEIGHTS), &bytes)?;
        let config = Config {
            format: FORMAT.into(),
            version: version_of(self.net.shape.part_scale()),
            shape: self.net.shape.clone(),
            tokenization: TOKENIZATION.into(),
            words: self.words.words().to_vec(),
            trigrams: self.words.trigrams().to_vec(),
            params: names,
            notes: self.notes.clone(),
        };
        let json = serde_json::to_vec_pretty(&config).expect("config serializes");
        write_atomic(&dir.join(CONFIG), &json)
    }

    /// Is `path` a saved neural encoder (a directory with a config)?
    pub fn is_one(path: &Path) -> bool {
        path.join(CONFIG).is_file()
    }

    pub fn load(dir: &Path, dev: &Device) -> Result<NeuralModel, ModelError> {
        let cpath = dir.join(CONFIG);
        let bad = |p: &Path, m: String| ModelError::BadModel {
            path: p.to_path_buf(),
            reason: m,
        };
        let text = std::fs::read(&cpath).map_err(|e| ModelError::io(&cpath, e))?;
        let c: Config =
            serde_json::from_slice(&text).map_err(|e| bad(&cpath, format!("bad config: {e}")))?;
        if c.format != FORMAT || !(1..=3).contains(&c.version) {
            return Err(bad(
                &cpath,
                format!(
                    "format {:?} version {}, expected {FORMAT:?} version 1, 2 or 3",
                    c.format, c.version
                ),
            ));
        }
        if version_of(c.shape.part_scale()) != c.version {
            return Err(bad(
                &cpath,
                format!(
                    "version {} with unit_parts {} and parts_by_dimension {}: version 2 is exactly a combination with unit parts, 3 one with parts weighted by dimension",
                    c.version, c.shape.unit_parts, c.shape.parts_by_dimension
                ),
            ));
        }
        c.shape.validate().map_err(|e| bad(&cpath, e.to_string()))?;
        if c.words.len() + 1 != c.shape.vocab {
            return Err(bad(
                &cpath,
                format!(
                    "{} words for a vocabulary of {} rows (words + unknown)",
                    c.words.len(),
                    c.shape.vocab
                ),
            ));
        }
        if c.trigrams.len() != c.shape.trigrams {
            return Err(bad(
                &cpath,
                format!(
                    "{} trigrams for a trigram table of {} rows",
                    c.trigrams.len(),
                    c.shape.trigrams
                ),
            ));
        }
        let (emb, comp, mut words) = read_tables(dir, &c.shape, c.words, expected_dims(&c.shape))?;
        if c.shape.trigrams > 0 {
            // The trigram table is the first parameter; the WORD,TRIGRAM
            // model over both tables tokenises for the combination.
            let t = comp[0].0.iter().map(|&x| x as f32).collect();
            words = Model::from_tables(
                Kind::WordTrigram,
                words.words().to_vec(),
                c.shape.word_dim,
                words.w,
                c.trigrams,
                c.shape.trigram_dim,
                t,
            )?;
        }
        let net = Net::from_values(c.shape.clone(), &emb, &comp, dev, DType::F32);
        check_parser(c.shape.arch).map_err(|e| bad(dir, e.to_string()))?;
        Ok(NeuralModel {
            net,
            words,
            notes: c.notes,
        })
    }
}

/// `tree-rnn` reads parse trees: its model cannot be made or loaded
/// without the parser.
fn check_parser(arch: Arch) -> Result<(), ModelError> {
    if arch == Arch::TreeRnn {
        crate::link_grammar::shared().map_err(|e| ModelError::Invalid(format!("tree-rnn: {e}")))?;
    }
    Ok(())
}

/// Embeddings [sentences x out_dim] of encoded sentences, row-major, by
/// `net` as it is (give it a `valid()` net for no gradients); an empty
/// sentence gets zeros. Sentences of similar length share a batch, so that
/// little of a batch is padding. Read: the words, the trigrams for a
/// combination with a trigram part, the trees for `tree-rnn`.
pub fn embed_encoded(net: &Net, sents: &[&Encoded]) -> Vec<f32> {
    let words: Vec<&[u32]> = sents.iter().map(|e| e.words.as_slice()).collect();
    let tri: Vec<&[u32]> = sents.iter().map(|e| e.trigrams.as_slice()).collect();
    let trees: Vec<&[[u32; 2]]> = sents.iter().map(|e| e.tree.as_slice()).collect();
    embed_sentences(
        net,
        &words,
        (net.shape.trigrams > 0).then_some(&tri),
        (net.shape.arch == Arch::TreeRnn).then_some(&trees),
    )
}

fn embed_sentences(
    net: &Net,
    sents: &[&[u32]],
    trigrams: Option<&Vec<&[u32]>>,
    trees: Option<&Vec<&[[u32; 2]]>>,
) -> Vec<f32> {
    let dim = net.shape.out_dim();
    let mut out = vec![0f32; sents.len() * dim];
    let mut order: Vec<usize> = (0..sents.len()).filter(|&i| !sents[i].is_empty()).collect();
    order.sort_by_key(|&i| sents[i].len());
    for chunk in order.chunks(256) {
        let b: Vec<&[u32]> = chunk.iter().map(|&i| sents[i]).collect();
        let batch = match trigrams {
            Some(t) => {
                let tb: Vec<&[u32]> = chunk.iter().map(|&i| t[i]).collect();
                Batch::with_trigrams(&b, &tb)
            }
            None => Batch::new(&b),
        };
        let batch = match trees {
            Some(t) => batch.with_trees(chunk.iter().map(|&i| t[i].to_vec()).collect()),
            None => batch,
        };
        let g = table(net.forward(&batch));
        for (k, &i) in chunk.iter().enumerate() {
            out[i * dim..(i + 1) * dim].copy_from_slice(&g[k * dim..(k + 1) * dim]);
        }
    }
    out
}

/// A saved network's tables from `dir/model.safetensors`: the word table
/// ([vocab, word_dim]), each parameter `dims` names (checked against its
/// shape) and the WORD model of `words` over that table, which tokenises
/// for it.
#[allow(clippy::type_complexity)]
pub fn read_tables(
    dir: &Path,
    shape: &Shape,
    words: Vec<String>,
    dims: Vec<(String, [usize; 2])>,
) -> Result<(Vec<f64>, Vec<(Vec<f64>, usize, usize)>, Model), ModelError> {
    let wpath = dir.join(WEIGHTS);
    let bytes = std::fs::read(&wpath).map_err(|e| ModelError::io(&wpath, e))?;
    let file = TensorFile::parse(&bytes, &wpath)?;
    let emb = file.get("emb", [shape.vocab, shape.word_dim])?;
    let mut comp = Vec::new();
    for (name, [r, k]) in dims {
        comp.push((file.get(&name, [r, k])?, r, k));
    }
    let w: Vec<f32> = emb.iter().map(|&x| x as f32).collect();
    let words = Model::from_tables(
        Kind::Word,
        words,
        shape.word_dim,
        w,
        Vec::new(),
        0,
        Vec::new(),
    )?;
    Ok((emb, comp, words))
}

/// How every saved neural model turns text into word ids.
pub const TOKENIZATION: &str = "paraforge score tokenizer (lowercase; words and punctuation apart); id = index in words, else vocab - 1";

/// A safetensors file of named f32 rank-2 tensors, `format` in its metadata.
pub fn safetensors_bytes(
    tensors: Vec<(String, Tensor<2>)>,
    format: &str,
) -> Result<Vec<u8>, safetensors::SafeTensorError> {
    let raw: Vec<(String, Vec<u8>, Vec<usize>)> = tensors
        .into_iter()
        .map(|(n, t)| {
            let dims = t.dims().to_vec();
            (
                n,
                table(t).iter().flat_map(|x| x.to_le_bytes()).collect(),
                dims,
            )
        })
        .collect();
    let views: Vec<(String, safetensors::tensor::TensorView)> = raw
        .iter()
        .map(|(n, b, d)| {
            let v = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, d.clone(), b)
                .expect("shape matches data");
            (n.clone(), v)
        })
        .collect();
    let meta = HashMap::from([("format".to_string(), format.to_string())]);
    safetensors::serialize(views, Some(meta))
}

/// A safetensors file's bytes, read tensor by tensor with shape checks;
/// errors name the file.
pub struct TensorFile<'a> {
    st: safetensors::SafeTensors<'a>,
    path: &'a Path,
}

impl<'a> TensorFile<'a> {
    pub fn parse(bytes: &'a [u8], path: &'a Path) -> Result<TensorFile<'a>, ModelError> {
        let st =
            safetensors::SafeTensors::deserialize(bytes).map_err(|e| ModelError::BadModel {
                path: path.to_path_buf(),
                reason: format!("not safetensors: {e}"),
            })?;
        Ok(TensorFile { st, path })
    }

    /// The f32 tensor `name`, which must have shape `dims`, as f64s.
    pub fn get(&self, name: &str, dims: [usize; 2]) -> Result<Vec<f64>, ModelError> {
        let bad = |m: String| ModelError::BadModel {
            path: self.path.to_path_buf(),
            reason: m,
        };
        let t = self
            .st
            .tensor(name)
            .map_err(|_| bad(format!("no tensor {name:?}")))?;
        if t.dtype() != safetensors::Dtype::F32 || t.shape() != dims {
            return Err(bad(format!(
                "tensor {name:?} is {:?} {:?}, expected F32 {dims:?}",
                t.dtype(),
                t.shape()
            )));
        }
        let vals: Vec<f64> = t
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64)
            .collect();
        if let Some(i) = vals.iter().position(|x| !x.is_finite()) {
            return Err(bad(format!(
                "tensor {name:?} row {} holds {}; a model whose weights are not finite numbers cannot score",
                i / dims[1].max(1),
                vals[i]
            )));
        }
        Ok(vals)
    }
}

/// `net`'s parameters by the names the saved file gives them, word table
/// first.
pub fn named_params(net: &Net) -> Vec<(String, &Param<Tensor<2>>)> {
    std::iter::once(("emb".to_string(), &net.emb))
        .chain(net.comp_names().into_iter().zip(&net.comp))
        .collect()
}

/// Writes `bytes` to `path` through a temporary file and a rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ModelError> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    let w = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()
    };
    w().map_err(|e| ModelError::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| ModelError::io(path, e))
}

/// A neural encoder as para_score and `eval-sts` use it: on the CPU, one
/// sentence at a time or a batch at once.
pub struct NeuralEncoder {
    model: NeuralModel,
    /// The network without autodiff state, made once.
    net: Net,
    about: String,
}

impl NeuralEncoder {
    pub fn load(dir: &Path) -> Result<NeuralEncoder, EncoderError> {
        let model = NeuralModel::load(dir, &cpu()).map_err(|e| EncoderError::BadModel {
            path: dir.to_path_buf(),
            reason: e.to_string(),
        })?;
        let net = burn::module::Module::valid(&model.net);
        let mut about = format!(
            "{} neural encoder ({} words x {}, {} dimensions)",
            model.spec().name(),
            model.words.words().len(),
            model.net.shape.word_dim,
            model.dim()
        );
        // Its trees come from the parser, so the scorer's stamp (this line)
        // names the parser: scores made with another one do not mix.
        if model.arch() == Arch::TreeRnn {
            let parser = crate::link_grammar::shared().map_err(|e| EncoderError::Load {
                path: dir.to_path_buf(),
                reason: e.to_string(),
            })?;
            about.push_str(&format!(", trees by {}", parser.version()));
        }
        Ok(NeuralEncoder { model, net, about })
    }
}

impl SentenceEncoder for NeuralEncoder {
    fn dim(&self) -> usize {
        self.model.dim()
    }

    /// Unknown words are the model's unknown row, as in training and
    /// `eval-sts`; a sentence without tokens has no embedding.
    fn embed_tokens(&self, tokens: &Tokens, scratch: &mut Scratch, out: &mut [f32]) -> Coverage {
        let e: &mut Encoded = &mut scratch.encoded;
        let unknown = self.model.words.encode_tokens(tokens, e);
        self.model
            .add_trees(std::slice::from_ref(tokens), std::slice::from_mut(e));
        let known = (e.words.len() + e.trigrams.len()) as u32;
        if e.words.is_empty() {
            out.fill(0.0);
            return Coverage { known: 0, unknown };
        }
        out.copy_from_slice(&embed_encoded(&self.net, &[&*e]));
        Coverage { known, unknown }
    }

    fn describe(&self) -> String {
        self.about.clone()
    }

    fn short_name(&self) -> String {
        self.model.spec().name()
    }

    /// Sentences of similar length in one batch, as [`embed_encoded`] runs
    /// them.
    fn embed_batch(&self, sentences: &[Tokens], out: &mut [f32]) -> Vec<Coverage> {
        let mut enc = vec![Encoded::default(); sentences.len()];
        let coverage = sentences
            .iter()
            .zip(&mut enc)
            .map(|(t, e)| {
                let unknown = self.model.words.encode_tokens(t, e);
                let known = if e.words.is_empty() {
                    0
                } else {
                    (e.words.len() + e.trigrams.len()) as u32
                };
                Coverage { known, unknown }
            })
            .collect();
        self.model.add_trees(sentences, &mut enc);
        let refs: Vec<&Encoded> = enc.iter().collect();
        out.copy_from_slice(&embed_encoded(&self.net, &refs));
        coverage
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// A saved encoder holding a value that is not a finite number is
    /// refused at load, naming the file, the tensor and the row, instead of
    /// scoring NaN.
    #[test]
    fn weights_that_are_not_finite_are_refused_at_load() {
        let words: Vec<String> = ["a", "man", "plays"].map(String::from).to_vec();
        let wm = crate::testing::words_model(Kind::Word, words, 3, vec![], 0, 2);
        let dir = tempfile::tempdir().unwrap();

        let m = NeuralModel::init(Arch::Lstm, wm.clone(), 4, 1, 4, &cpu()).unwrap();
        let (emb, mut comp) = values(&m.net);
        let cols = comp[1].2;
        comp[1].0[2 * cols + 1] = f64::NAN;
        let bad = NeuralModel {
            net: Net::from_values(m.net.shape.clone(), &emb, &comp, &cpu(), DType::F32),
            words: wm.clone(),
            notes: serde_json::Value::Null,
        };
        let out = dir.path().join("lstm");
        bad.save(&out).unwrap();
        let e = NeuralModel::load(&out, &cpu()).unwrap_err().to_string();
        let name = &m.net.comp_names()[1];
        assert!(
            e.contains("model.safetensors") && e.contains(name.as_str()) && e.contains("row 2"),
            "{e}"
        );
    }

    /// A tree network's description, which a scorer's stamp in every
    /// Parquet footer carries, names the parser its trees come from (scores
    /// made under another Link Grammar would otherwise pass for the same
    /// model's); other encoders name none.
    #[test]
    fn a_tree_networks_description_names_its_parser() {
        let words: Vec<String> = ["a", "man", "plays"].map(String::from).to_vec();
        let wm = crate::testing::words_model(Kind::Word, words, 3, vec![], 0, 2);
        let dir = tempfile::tempdir().unwrap();
        for (arch, parser) in [(Arch::TreeRnn, true), (Arch::Lstm, false)] {
            let m = NeuralModel::init(arch, wm.clone(), 3, 1, 3, &cpu()).unwrap();
            let out = dir.path().join(format!("{arch:?}"));
            m.save(&out).unwrap();
            let about = NeuralEncoder::load(&out).unwrap().describe();
            let version = crate::link_grammar::shared()
                .expect("Link Grammar (make link-grammar)")
                .version()
                .to_string();
            assert_eq!(
                about.ends_with(&format!(", trees by {version}")),
                parser,
                "{about}"
            );
        }
    }

    /// A Gaussian encoder and a combination with a trigram part save and
    /// load back to the same embeddings (the config keeps the trigrams).
    #[test]
    fn gaussian_and_combination_round_trip() {
        let words: Vec<String> = ["a", "man", "plays", "guitar"].map(String::from).to_vec();
        let trigrams: Vec<String> = [" a ", "man", "gui"].map(String::from).to_vec();
        let dir = tempfile::tempdir().unwrap();
        let texts = ["A man plays a guitar.", "zzz", ""];
        for spec in [
            "gaussian",
            "lstm-gaussian",
            "word+trigram+lstm",
            "trigram,dan",
        ] {
            let spec: Spec = spec.parse().unwrap();
            let kind = if spec.has_trigrams() {
                Kind::WordTrigram
            } else {
                Kind::Word
            };
            let tri = if spec.has_trigrams() {
                trigrams.clone()
            } else {
                Vec::new()
            };
            let wm = crate::testing::words_model(kind, words.clone(), 3, tri, 3, 2);
            let m = NeuralModel::init_spec(&spec, wm, 3, 1, 4, &cpu()).unwrap();
            let out = dir.path().join(spec.name());
            m.save(&out).unwrap();
            let back = NeuralModel::load(&out, &cpu()).unwrap();
            assert_eq!(back.spec(), spec);
            assert_eq!(back.embed_many(&texts), m.embed_many(&texts), "{spec}");
            assert_eq!(back.words.trigrams(), m.words.trigrams());
            // A sum (unit parts) is version 2, a concatenation (parts by
            // dimension) 3, which a reader from before the flag refuses; a
            // version that disagrees is damage.
            let cpath = out.join(CONFIG);
            let mut c: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&cpath).unwrap()).unwrap();
            let combo = spec.arch.is_combination();
            let concat = spec.arch == Arch::Concat;
            let version = [1, 2, 3][usize::from(combo) + usize::from(concat)];
            assert_eq!(c["version"], version, "{spec}");
            assert_eq!(c["unit_parts"].as_bool().unwrap_or(false), combo);
            assert_eq!(c["parts_by_dimension"].as_bool().unwrap_or(false), concat);
            c["version"] = serde_json::json!(if version == 3 { 2 } else { version + 1 });
            std::fs::write(&cpath, serde_json::to_vec(&c).unwrap()).unwrap();
            let e = NeuralModel::load(&out, &cpu()).unwrap_err().to_string();
            assert!(e.contains("unit_parts"), "{spec}: {e}");
        }
        // A Gaussian's embedding is [mean, variance]: the variances are
        // positive.
        let wm = crate::testing::words_model(Kind::Word, words, 3, vec![], 0, 2);
        let m = NeuralModel::init(Arch::Gaussian, wm, 3, 1, 4, &cpu()).unwrap();
        let e = m.embed_many(&["a man"]);
        assert!(e[0][3..].iter().all(|&v| v > 0.0), "{e:?}");
    }
}
