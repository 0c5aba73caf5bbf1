//! The one digest that says which translation model made a corpus.
//!
//! A job fixes it when it is planned and every worker must have the same
//! (a worker pointed at another model directory, or a model replaced
//! between a kill and a resume, would otherwise give one corpus from two
//! models). It covers every file of the model directory that can change a
//! translation: the graphs and their external weights, the tokenizer
//! models and vocabularies, the configs. Documentation and records of how
//! the model was made (`*.md`, `*.log`, `eval.json`, `training.json`) and
//! hidden files are left out, so a copy of the directory with or without
//! its card has the same digest.

use std::path::{Path, PathBuf};

/// Files that describe a model without deciding its output.
fn is_documentation(name: &str) -> bool {
    name.starts_with('.')
        || name.ends_with(".md")
        || name.ends_with(".log")
        || name == "eval.json"
        || name == "training.json"
}

/// The digest of a job without a model (`input.format = "pairs"`, whose
/// translations exist already): a fixed SHA-256 that no model directory
/// can have, so that a worker loading a model for such a job, or a file
/// of a translating job, is told apart like any other model.
pub fn no_model_digest() -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(
        b"paraforge: no model; the input held the translations",
    ))
}

/// SHA-256 over each file's path relative to `dir` and its own SHA-256, in
/// path order (lowercase hex). An error names the file it could not read.
pub fn model_digest(dir: &Path) -> Result<String, std::io::Error> {
    use sha2::Digest;
    let mut files: Vec<(String, PathBuf)> = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let rd = std::fs::read_dir(&d).map_err(|e| named(&d, e))?;
        for e in rd {
            let e = e.map_err(|e| named(&d, e))?;
            let name = e.file_name().to_string_lossy().into_owned();
            if is_documentation(&name) {
                continue;
            }
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p
                    .strip_prefix(dir)
                    .unwrap_or(&p)
                    .to_string_lossy()
                    .replace('\\', "/");
                files.push((rel, p));
            }
        }
    }
    if files.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{}: no model files", dir.display()),
        ));
    }
    files.sort();
    let mut h = sha2::Sha256::new();
    for (rel, p) in &files {
        let file = crate::layout::sha256_file(p).map_err(|e| named(p, e))?;
        h.update(rel.as_bytes());
        h.update([0]);
        h.update(file.as_bytes());
        h.update([b'\n']);
    }
    Ok(hex::encode(h.finalize()))
}

fn named(path: &Path, e: std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_follows_the_files_that_decide_translations() {
        let d = tempfile::tempdir().unwrap();
        let m = d.path();
        std::fs::write(m.join("encoder_model.onnx"), "graph").unwrap();
        std::fs::write(m.join("source.spm"), "spm").unwrap();
        let a = model_digest(m).unwrap();
        // A card (the Hub's README.md, or any other Markdown), a log,
        // hidden files: same model.
        std::fs::write(m.join("README.md"), "---\nlibrary_name: paraforge\n---\n").unwrap();
        std::fs::write(m.join("MODEL_CARD.md"), "card").unwrap();
        std::fs::write(m.join("training.log"), "log").unwrap();
        std::fs::write(m.join(".DS_Store"), "x").unwrap();
        assert_eq!(model_digest(m).unwrap(), a);
        // A tokenizer or graph byte changed, a file renamed or added: another model.
        std::fs::write(m.join("source.spm"), "spM").unwrap();
        let b = model_digest(m).unwrap();
        assert_ne!(b, a);
        std::fs::rename(m.join("source.spm"), m.join("target.spm")).unwrap();
        assert_ne!(model_digest(m).unwrap(), b);
        std::fs::write(m.join("decoder_model.onnx_data"), "w").unwrap();
        let c = model_digest(m).unwrap();
        // A copy elsewhere has the same digest.
        let copy = tempfile::tempdir().unwrap();
        for e in std::fs::read_dir(m).unwrap() {
            let p = e.unwrap().path();
            std::fs::copy(&p, copy.path().join(p.file_name().unwrap())).unwrap();
        }
        assert_eq!(model_digest(copy.path()).unwrap(), c);
        let e = model_digest(&m.join("missing")).unwrap_err().to_string();
        assert!(e.contains("missing"), "{e}");
    }
}
