//! Every para_score encoder: any model `paraforge train` writes (`.pfe`
//! averaging models and word vectors through core's loader, and the neural
//! encoders, a directory with `config.json` and `model.safetensors`,
//! through [`NeuralEncoder`]), and a transformer sentence encoder on ONNX
//! Runtime ([`transformer::TransformerEncoder`]). para_score is then exactly the cosine of the
//! model's two sentence embeddings, with the model's own tokenisation and
//! unknown-word rule (docs/DEFINITIONS.md section 3).

pub mod transformer;

use std::path::{Path, PathBuf};

use paraforge_core::encoder::{Coverage, Encoded, Scratch, SentenceEncoder};
use paraforge_core::EncoderError;
use paraforge_core::Tokens;
use paraforge_trainer::neural::Net;
use paraforge_trainer::nn_model::{cpu, embed_encoded, NeuralModel};

use crate::transformer::TransformerEncoder;

/// A neural encoder embedding one sentence at a time on the CPU.
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
        let about = format!(
            "{} neural encoder ({} words x {}, {} dimensions)",
            model.spec().name(),
            model.words.words().len(),
            model.net.shape.word_dim,
            model.dim()
        );
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
}

/// The para_score encoder of `[scoring]` or `rescore`: a neural model's or
/// a transformer encoder's directory, else what core loads (`.pfe` model
/// or word vectors).
pub fn load_encoder(
    model: Option<&Path>,
    vectors: Option<&Path>,
) -> Result<Option<Box<dyn SentenceEncoder>>, EncoderError> {
    match (model, vectors) {
        // A transformer's directory may also hold a Hugging Face config.json.
        (Some(m), None) if TransformerEncoder::is_one(m) => Ok(Some(Box::new(
            TransformerEncoder::load(m)?,
        )
            as Box<dyn SentenceEncoder>)),
        (Some(m), None) if NeuralModel::is_one(m) => Ok(Some(
            Box::new(NeuralEncoder::load(m)?) as Box<dyn SentenceEncoder>
        )),
        _ => paraforge_core::load_encoder(model, vectors),
    }
}

/// The file that identifies a model's weights, hashed into footers and
/// manifests: a neural encoder's `model.safetensors`, a transformer's
/// `model.onnx`, a directory's `model.pfe`, else the path itself.
pub fn weights_file(model: &Path) -> PathBuf {
    if TransformerEncoder::is_one(model) {
        model.join("model.onnx")
    } else if NeuralModel::is_one(model) {
        model.join(paraforge_trainer::nn_model::WEIGHTS)
    } else if model.is_dir() {
        model.join("model.pfe")
    } else {
        model.to_path_buf()
    }
}
