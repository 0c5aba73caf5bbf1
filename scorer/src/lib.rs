//! Every para_score encoder: any model `paraforge train` writes (`.pfe`
//! averaging models and word vectors through core's loader, and the neural
//! encoders, a directory with `config.json` and `model.safetensors`,
//! through the encoders crate's [`NeuralEncoder`]), and a transformer
//! sentence encoder on ONNX
//! Runtime ([`transformer::TransformerEncoder`]). para_score is then exactly the cosine of the
//! model's two sentence embeddings, with the model's own tokenisation and
//! unknown-word rule (docs/DEFINITIONS.md section 3).

pub mod transformer;

use std::path::{Path, PathBuf};

use sha2::Digest;

use paraforge_core::encoder::SentenceEncoder;
use paraforge_core::EncoderError;
pub use paraforge_encoders::nn_model::NeuralEncoder;
use paraforge_encoders::nn_model::NeuralModel;

use crate::transformer::TransformerEncoder;

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

/// The file that identifies a model's weights, named in footers and
/// manifests: a neural encoder's `model.safetensors`, a transformer's
/// `model.onnx`, a directory's `model.pfe`, else the path itself.
pub fn weights_file(model: &Path) -> PathBuf {
    defining_files(model).swap_remove(0)
}

/// Every file whose content decides a model's embeddings, weights first: a
/// transformer's graph, tokenizer and config, a neural encoder's weights and
/// its config (vocabulary, tokenisation), a directory's `model.pfe`, else
/// the path itself (a `.pfe` or word-vectors file).
pub fn defining_files(model: &Path) -> Vec<PathBuf> {
    if TransformerEncoder::is_one(model) {
        ["model.onnx", "tokenizer.json", transformer::CONFIG]
            .map(|f| model.join(f))
            .to_vec()
    } else if NeuralModel::is_one(model) {
        use paraforge_encoders::nn_model::{CONFIG, WEIGHTS};
        vec![model.join(WEIGHTS), model.join(CONFIG)]
    } else if model.is_dir() {
        vec![model.join("model.pfe")]
    } else {
        vec![model.to_path_buf()]
    }
}

/// The SHA-256 that identifies a para_score model in footers and
/// manifests: of its one file, or for a model of several files, of their
/// `sha256sum` lines (`<hex>  <file name>\n`, in [`defining_files`] order),
/// so that a changed tokenizer or vocabulary changes it too, not only
/// changed weights.
pub fn fingerprint(model: &Path) -> std::io::Result<String> {
    let files = defining_files(model);
    let sums = files
        .iter()
        .map(|f| {
            paraforge_core::layout::sha256_file(f)
                .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", f.display())))
        })
        .collect::<std::io::Result<Vec<_>>>()?;
    if let [one] = &sums[..] {
        return Ok(one.clone());
    }
    let mut lines = String::new();
    for (f, sum) in files.iter().zip(&sums) {
        let name = f
            .file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default();
        lines.push_str(&format!("{sum}  {name}\n"));
    }
    Ok(hex::encode(sha2::Sha256::digest(lines.as_bytes())))
}

/// What names the model behind a para_score column, written into every
/// Parquet footer of that column wherever it was computed (the worker,
/// `paraforge rescore`): the weights file, what the encoder is, and the
/// model's [`fingerprint`].
#[derive(Debug, Clone)]
pub struct ScorerStamp {
    pub file: String,
    pub kind: String,
    pub sha256: String,
}

impl ScorerStamp {
    /// The stamp of the model or vectors at `model`, loaded as `encoder`.
    pub fn of(model: &Path, encoder: &dyn SentenceEncoder) -> std::io::Result<ScorerStamp> {
        Ok(ScorerStamp {
            file: weights_file(model).display().to_string(),
            kind: encoder.describe(),
            sha256: fingerprint(model)?,
        })
    }

    /// Its footer entries.
    pub fn footer(&self) -> [(&'static str, String); 3] {
        use paraforge_core::schema::meta;
        [
            (meta::PARA_SCORER, self.file.clone()),
            (meta::PARA_SCORER_KIND, self.kind.clone()),
            (meta::PARA_SCORER_SHA256, self.sha256.clone()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A neural encoder's fingerprint is its weights' and config's: the
    /// model card `paraforge train` writes into its directory changes no
    /// footer's scorer stamp.
    #[test]
    fn a_card_in_a_model_directory_is_no_part_of_its_fingerprint() {
        use paraforge_encoders::nn_model::{CONFIG, WEIGHTS};
        let dir = std::env::temp_dir().join(format!("pf-card-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(WEIGHTS), "weights").unwrap();
        std::fs::write(dir.join(CONFIG), "{}").unwrap();
        let before = fingerprint(&dir).unwrap();
        std::fs::write(dir.join("README.md"), "---\nlibrary_name: paraforge\n---\n").unwrap();
        let with_card = fingerprint(&dir).unwrap();
        std::fs::write(dir.join(CONFIG), "{ }").unwrap();
        let config_changed = fingerprint(&dir).unwrap();
        std::fs::remove_dir_all(&dir).ok();
        assert_eq!(before, with_card);
        assert_ne!(before, config_changed);
    }

    /// One file's fingerprint is its plain SHA-256 (as manifests recorded
    /// before); a transformer's covers its tokenizer and config too, so a
    /// tokenizer swapped under the same graph is a different scorer.
    #[test]
    fn a_fingerprint_covers_every_file_that_decides_the_embeddings() {
        let fixture =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/tiny-sentence-encoder");
        let graph = fixture.join("model.onnx");
        assert_eq!(
            fingerprint(&graph).unwrap(),
            paraforge_core::layout::sha256_file(&graph).unwrap()
        );
        let dir = std::env::temp_dir().join(format!("pf-fingerprint-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for f in ["model.onnx", "tokenizer.json", transformer::CONFIG] {
            std::fs::copy(fixture.join(f), dir.join(f)).unwrap();
        }
        let before = fingerprint(&dir).unwrap();
        assert_eq!(before, fingerprint(&fixture).unwrap());
        assert_ne!(before, fingerprint(&graph).unwrap());
        let tok = std::fs::read_to_string(dir.join("tokenizer.json")).unwrap();
        std::fs::write(
            dir.join("tokenizer.json"),
            tok.replace("\"man\"", "\"men\""),
        )
        .unwrap();
        let after = fingerprint(&dir);
        std::fs::remove_file(dir.join("tokenizer.json")).unwrap();
        let missing = fingerprint(&dir).unwrap_err().to_string();
        std::fs::remove_dir_all(&dir).ok();
        assert_ne!(before, after.unwrap());
        assert!(missing.contains("tokenizer.json"), "{missing}");
    }
}
