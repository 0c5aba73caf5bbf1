//! Shared helpers for the end-to-end tests: where the bundled data and
//! models are, and reading the transformers reference files.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

/// The repository root (this crate lives in `tests/`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// A file or directory under `tests/data/`.
pub fn data(rel: &str) -> PathBuf {
    repo_root().join("tests/data").join(rel)
}

/// A bundled model directory under `models/`.
pub fn model(name: &str) -> PathBuf {
    repo_root().join("models").join(name)
}

/// Reads a JSON-lines file into typed rows.
pub fn read_jsonl<T: DeserializeOwned>(path: &Path) -> Vec<T> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("{}:{}: {e}", path.display(), i + 1))
        })
        .collect()
}
