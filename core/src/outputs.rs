//! The one rule every path a command writes goes through, whatever the
//! flag (`--out`, `-o`, `--json`, `--checkpoint`, `job.output`, `[bins]
//! output`):
//!
//! 1. it is none of the command's inputs, holds none and lies inside none
//!    (paths compared resolved: symlinks, `..` and hard links seen
//!    through), even with `--overwrite`;
//! 2. it does not lie inside something paraforge made and never writes
//!    into from outside: a finished or running dataset, a job's output, a
//!    model directory, a training checkpoint or a report;
//! 3. an existing file or non-empty directory is replaced only with
//!    `--overwrite`, and even then only when it is the same kind of thing
//!    the command writes (a JSON result over a JSON result, a model over a
//!    model), so that no flag can turn one artifact into another.
//!
//! How the new artifact is then put in place (a temporary sibling renamed
//! at the end) belongs to the writers; this module decides only whether a
//! path may be written at all, so that `plan` can ask it too.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::layout::{ManifestHead, ManifestKind, CLAIM_FILE, MANIFEST_FILE, SUCCESS_FILE};

/// What a command writes at a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Artifact {
    /// A JSON result (`--json`).
    Json,
    /// Lines of text: translations, paraphrases (`-o`).
    Text,
    /// A trained model: a `.pfe` file or a model directory.
    Model,
    /// Word vectors as GloVe text.
    Vectors,
    /// An n-gram language model (ARPA text).
    Arpa,
    /// Sentence embeddings (`.npy` or Parquet).
    Embeddings,
    /// A report directory (`report.md`, `report.html`, figures).
    Report,
    /// A dataset of a command (`filter`, `rescore`, `bin`, `lexicon`).
    Dataset,
    /// A job's output (`job.output`).
    JobOutput,
    /// A training checkpoint directory.
    Checkpoint,
    /// A tree-rnn parse cache (read and written by the same run).
    ParseCache,
}

impl Artifact {
    /// Always one file (a model may be a file or a directory).
    fn is_file(self) -> bool {
        matches!(
            self,
            Artifact::Json
                | Artifact::Text
                | Artifact::Vectors
                | Artifact::Arpa
                | Artifact::Embeddings
                | Artifact::ParseCache
        )
    }

    fn describe(self) -> &'static str {
        match self {
            Artifact::Json => "a JSON result",
            Artifact::Text => "a text file",
            Artifact::Model => "a model",
            Artifact::Vectors => "a word vectors file",
            Artifact::Arpa => "an ARPA language model",
            Artifact::Embeddings => "an embeddings file",
            Artifact::Report => "a report directory",
            Artifact::Dataset => "a dataset",
            Artifact::JobOutput => "a job's output",
            Artifact::Checkpoint => "a training checkpoint",
            Artifact::ParseCache => "a parse cache",
        }
    }
}

/// What is at a path now, as far as the rule cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// Nothing, or an empty directory.
    Nothing,
    /// A command's dataset (finished or being written), by manifest kind.
    Dataset(String),
    /// A job's output (claimed by a job, finished or not).
    JobOutput,
    /// A model: a `.pfe` file, or a directory holding a model's weights.
    Model,
    /// A training checkpoint directory.
    Checkpoint,
    /// A report directory.
    Report,
    /// A file of a kind the rule knows.
    File(Artifact),
    /// Another file.
    OtherFile,
    /// A directory holding something else.
    OtherDir,
}

impl Found {
    /// Things that are never written into from outside.
    fn is_sealed(&self) -> bool {
        matches!(
            self,
            Found::Dataset(_) | Found::JobOutput | Found::Model | Found::Checkpoint | Found::Report
        )
    }

    fn describe(&self) -> String {
        match self {
            Found::Nothing => "nothing".into(),
            Found::Dataset(kind) => format!("a {kind} dataset"),
            Found::JobOutput => "a job's output".into(),
            Found::Model => "a model".into(),
            Found::Checkpoint => "a training checkpoint".into(),
            Found::Report => "a report".into(),
            Found::File(a) => a.describe().into(),
            Found::OtherFile => "a file".into(),
            Found::OtherDir => "a directory that is not empty".into(),
        }
    }

    /// Whether `--overwrite` may replace it with `a`.
    fn replaceable_by(&self, a: Artifact) -> bool {
        match (self, a) {
            (Found::Nothing, _) => true,
            (Found::Dataset(_), Artifact::Dataset) => true,
            (Found::JobOutput, Artifact::JobOutput) => true,
            (Found::Model, Artifact::Model) => true,
            (Found::Checkpoint, Artifact::Checkpoint) => true,
            (Found::Report, Artifact::Report) => true,
            (Found::File(f), a) => *f == a,
            _ => false,
        }
    }
}

/// Why a path may not be written.
#[derive(Debug, thiserror::Error)]
pub enum OutputRuleError {
    #[error("{flag} {target} {relation} the input {input_flag} {input}: choose another {flag} (refused even with --overwrite)")]
    Input {
        flag: String,
        target: PathBuf,
        relation: &'static str,
        input_flag: String,
        input: PathBuf,
    },
    #[error("{flag} {target} lies inside {what} at {at}, which no command writes into: choose a path outside it (refused even with --overwrite)")]
    Inside {
        flag: String,
        target: PathBuf,
        what: String,
        at: PathBuf,
    },
    #[error("{flag} {target} already exists ({what}); give --overwrite to replace it")]
    Exists {
        flag: String,
        target: PathBuf,
        what: String,
    },
    #[error("{flag} {target} is {what}, not {writes}: --overwrite replaces only {writes} (choose another {flag})")]
    OtherKind {
        flag: String,
        target: PathBuf,
        what: String,
        writes: &'static str,
    },
    #[error("{flag} {target}: {source}")]
    Io {
        flag: String,
        target: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A path a command writes, checked against the rule.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// The option that named it, as the user typed it (`--json`).
    pub flag: &'a str,
    pub path: &'a Path,
    pub writes: Artifact,
}

/// Checks `target` against the rule for a command that reads `inputs`
/// (option, path) and was given `overwrite`. Returns what is there now.
pub fn check(
    target: Target<'_>,
    inputs: &[(&str, &Path)],
    overwrite: bool,
) -> Result<Found, OutputRuleError> {
    let Target { flag, path, writes } = target;
    let out = resolved(path);
    for (input_flag, input) in inputs {
        let inp = resolved(input);
        let relation = if out == inp || same_file(path, input) {
            "is"
        } else if inp.starts_with(&out) {
            "holds"
        } else if out.starts_with(&inp) {
            "lies inside"
        } else {
            continue;
        };
        return Err(OutputRuleError::Input {
            flag: flag.into(),
            target: path.to_path_buf(),
            relation,
            input_flag: (*input_flag).into(),
            input: input.to_path_buf(),
        });
    }
    check_not_inside(flag, path)?;
    let now = found(path);
    if writes.is_file() && std::fs::metadata(path).is_ok_and(|m| m.is_dir()) {
        // Even an empty one: the user meant a file to go into it, or
        // another path; replacing the directory with a file is neither.
        let what = match now {
            Found::Nothing => "a directory".to_string(),
            ref f => f.describe(),
        };
        return Err(OutputRuleError::OtherKind {
            flag: flag.into(),
            target: path.to_path_buf(),
            what,
            writes: writes.describe(),
        });
    }
    if now == Found::Nothing {
        return Ok(now);
    }
    if !now.replaceable_by(writes) {
        return Err(OutputRuleError::OtherKind {
            flag: flag.into(),
            target: path.to_path_buf(),
            what: now.describe(),
            writes: writes.describe(),
        });
    }
    if !overwrite {
        return Err(OutputRuleError::Exists {
            flag: flag.into(),
            target: path.to_path_buf(),
            what: now.describe(),
        });
    }
    Ok(now)
}

/// Rule 2 alone, for writers that judge the target itself their own way
/// (the dataset writers): `path` lies inside nothing sealed.
pub fn check_not_inside(flag: &str, path: &Path) -> Result<(), OutputRuleError> {
    let out = resolved(path);
    for at in out.ancestors().skip(1) {
        let found = found(at);
        if found.is_sealed() {
            return Err(OutputRuleError::Inside {
                flag: flag.into(),
                target: path.to_path_buf(),
                what: found.describe(),
                at: at.to_path_buf(),
            });
        }
    }
    Ok(())
}

/// What is at `path` now (symlinks followed).
pub fn found(path: &Path) -> Found {
    let Ok(meta) = std::fs::metadata(path) else {
        return Found::Nothing;
    };
    if meta.is_dir() {
        found_dir(path)
    } else {
        found_file(path)
    }
}

fn found_dir(dir: &Path) -> Found {
    let Ok(mut entries) = std::fs::read_dir(dir) else {
        return Found::OtherDir;
    };
    if entries.next().is_none() {
        return Found::Nothing;
    }
    let has = |name: &str| dir.join(name).exists();
    // A job's claim, or its state (`<output>/_coordinator.redb`) before it.
    if has(CLAIM_FILE) || has("_coordinator.redb") {
        return Found::JobOutput;
    }
    if has(MANIFEST_FILE) || has(SUCCESS_FILE) {
        let kind = std::fs::read(dir.join(MANIFEST_FILE))
            .ok()
            .and_then(|b| ManifestHead::parse(&b).ok());
        return match kind {
            Some(h) if h.kind == Some(ManifestKind::Job) => Found::JobOutput,
            Some(h) if h.is_bins() => Found::Dataset("bins".into()),
            Some(ManifestHead { kind: Some(k), .. }) => {
                Found::Dataset(format!("{k:?}").to_lowercase())
            }
            _ => Found::Dataset("paraforge".into()),
        };
    }
    // A command's dataset while it is written (`.NAME.staging`).
    if has("_writer.json") {
        return Found::Dataset("unfinished".into());
    }
    if has("state.json") && (has("model.pfe") || has("model.safetensors") || has("adam.f32")) {
        return Found::Checkpoint;
    }
    if has("model.pfe")
        || has("model.safetensors")
        || has("modules.json")
        || has("classifier.json")
        || any_child_with_extension(dir, "onnx")
    {
        return Found::Model;
    }
    if has("report.md") && has("report.json") {
        return Found::Report;
    }
    Found::OtherDir
}

fn any_child_with_extension(dir: &Path, ext: &str) -> bool {
    std::fs::read_dir(dir).is_ok_and(|rd| {
        rd.flatten()
            .any(|e| e.path().extension().is_some_and(|x| x == ext))
    })
}

/// Recognises a file by its first bytes.
fn found_file(path: &Path) -> Found {
    // An empty file holds nothing (what `mktemp` leaves for a command to fill).
    if std::fs::metadata(path).is_ok_and(|m| m.len() == 0) {
        return Found::Nothing;
    }
    let Ok(mut f) = std::fs::File::open(path) else {
        return Found::OtherFile;
    };
    let mut head = Vec::with_capacity(HEAD);
    if f.by_ref().take(HEAD as u64).read_to_end(&mut head).is_err() {
        return Found::OtherFile;
    }
    if head.starts_with(b"PFEMB") {
        return Found::Model;
    }
    if head.starts_with(b"\x93NUMPY") || head.starts_with(b"PAR1") {
        return Found::File(Artifact::Embeddings);
    }
    // Text from here on: a torn character at the cut is fine.
    let text = match std::str::from_utf8(&head) {
        Ok(t) => t,
        Err(e) if e.error_len().is_none() => {
            std::str::from_utf8(&head[..e.valid_up_to()]).expect("valid up to here")
        }
        Err(_) => return Found::OtherFile,
    };
    if text.contains('\0') {
        return Found::OtherFile;
    }
    let trimmed = text.trim_start();
    if trimmed.starts_with("\\data\\") {
        return Found::File(Artifact::Arpa);
    }
    if trimmed
        .lines()
        .next()
        .is_some_and(|l| l.contains("paraforge-parse-cache"))
    {
        return Found::File(Artifact::ParseCache);
    }
    if (trimmed.starts_with('{') || trimmed.starts_with('[')) && is_json(path) {
        return Found::File(Artifact::Json);
    }
    if looks_like_vectors(text) {
        return Found::File(Artifact::Vectors);
    }
    Found::File(Artifact::Text)
}

/// How much of a file is read to tell what it is.
const HEAD: usize = 64 << 10;
/// A JSON result is small; a larger file is not taken for one.
const MAX_JSON: u64 = 64 << 20;

fn is_json(path: &Path) -> bool {
    let Ok(meta) = std::fs::metadata(path) else {
        return false;
    };
    meta.len() <= MAX_JSON
        && std::fs::read(path)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .is_some_and(|v| v.is_object() || v.is_array())
}

/// GloVe text (`word f f f ...`, at least two numbers), or word2vec text's
/// `COUNT DIM` header line followed by such a line.
fn looks_like_vectors(text: &str) -> bool {
    let mut lines = text.lines();
    let row = |l: &str| {
        let mut f = l.split(' ').filter(|s| !s.is_empty());
        f.next().is_some() && {
            let nums: Vec<&str> = f.collect();
            nums.len() >= 2 && nums.iter().all(|n| n.parse::<f32>().is_ok())
        }
    };
    match lines.next() {
        Some(first) if row(first) => true,
        Some(first) => {
            let header: Vec<&str> = first.split_whitespace().collect();
            header.len() == 2
                && header.iter().all(|n| n.parse::<u64>().is_ok())
                && lines.next().is_some_and(row)
        }
        None => false,
    }
}

/// `p` absolute with its symbolic links and `..` resolved, also when it
/// does not exist yet: walked from the root, each existing prefix resolved
/// before the next component, so a `..` after a symbolic link climbs from
/// where the link points, as the kernel would; components that do not
/// exist are taken as written.
pub fn resolved(p: &Path) -> PathBuf {
    use std::path::Component;
    let abs = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let mut out = PathBuf::new();
    for c in abs.components() {
        match c {
            Component::Prefix(_) | Component::RootDir => out.push(c),
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(name) => {
                out.push(name);
                if let Ok(real) = out.canonicalize() {
                    out = real;
                }
            }
        }
    }
    out
}

/// Whether `a` and `b` are one file under two names (a hard link).
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t<'a>(flag: &'a str, path: &'a Path, writes: Artifact) -> Target<'a> {
        Target { flag, path, writes }
    }

    #[test]
    fn inputs_are_never_written_whatever_the_path_says() {
        let d = tempfile::tempdir().unwrap();
        let model = d.path().join("m");
        std::fs::create_dir(&model).unwrap();
        std::fs::write(model.join("model.pfe"), b"PFEMB1\n").unwrap();
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&model, &link).unwrap();
        let hard = d.path().join("hard.pfe");
        std::fs::hard_link(model.join("model.pfe"), &hard).unwrap();
        let dotdot = d.path().join("x/../m/model.pfe");
        for (target, relation) in [
            (model.join("model.pfe"), "lies inside"),
            (link.join("model.pfe"), "lies inside"),
            (dotdot.clone(), "lies inside"),
            (model.clone(), "is"),
            (d.path().to_path_buf(), "holds"),
            (hard.clone(), "is"),
        ] {
            let inputs: &[(&str, &Path)] = if target == hard {
                &[("--model", &model.join("model.pfe"))]
            } else {
                &[("--model", &model)]
            };
            let e = check(t("--json", &target, Artifact::Json), inputs, true)
                .err()
                .unwrap_or_else(|| panic!("{target:?} was allowed"));
            assert!(
                matches!(&e, OutputRuleError::Input { relation: r, .. } if *r == relation),
                "{target:?}: {e}"
            );
            assert!(e.to_string().contains("--json") && e.to_string().contains("--model"));
        }
    }

    #[test]
    fn sealed_things_are_not_written_into_and_kinds_are_kept() {
        let d = tempfile::tempdir().unwrap();
        let ds = d.path().join("out");
        std::fs::create_dir(&ds).unwrap();
        std::fs::write(ds.join(MANIFEST_FILE), r#"{"kind":"filter","files":[]}"#).unwrap();
        std::fs::write(ds.join(SUCCESS_FILE), "").unwrap();
        std::fs::create_dir(ds.join("shard=000000")).unwrap();
        let e = check(
            t("--json", &ds.join("shard=000000/x.json"), Artifact::Json),
            &[],
            true,
        )
        .unwrap_err();
        assert!(matches!(e, OutputRuleError::Inside { .. }), "{e}");
        assert!(e.to_string().contains("filter dataset"), "{e}");
        // The dataset itself: only a dataset writer replaces it.
        let e = check(t("--out", &ds, Artifact::Model), &[], true).unwrap_err();
        assert!(matches!(e, OutputRuleError::OtherKind { .. }), "{e}");
        check(t("--out", &ds, Artifact::Dataset), &[], true).unwrap();
        // A JSON result over a JSON result, with --overwrite only.
        let j = d.path().join("r.json");
        std::fs::write(&j, "{\"a\": 1}").unwrap();
        let e = check(t("--json", &j, Artifact::Json), &[], false).unwrap_err();
        assert!(matches!(e, OutputRuleError::Exists { .. }), "{e}");
        assert_eq!(
            check(t("--json", &j, Artifact::Json), &[], true).unwrap(),
            Found::File(Artifact::Json)
        );
        let e = check(t("-o", &j, Artifact::Text), &[], true).unwrap_err();
        assert!(matches!(e, OutputRuleError::OtherKind { .. }), "{e}");
        // A model file is never a JSON result.
        let pfe = d.path().join("m.pfe");
        std::fs::write(&pfe, b"PFEMB1\n\x00\x01").unwrap();
        let e = check(t("--json", &pfe, Artifact::Json), &[], true).unwrap_err();
        assert!(
            e.to_string().contains("is a model, not a JSON result"),
            "{e}"
        );
        // A directory of other things is not replaced by anything.
        let other = d.path().join("stuff");
        std::fs::create_dir(&other).unwrap();
        std::fs::write(other.join("notes.txt"), "x").unwrap();
        let e = check(t("--out", &other, Artifact::Report), &[], true).unwrap_err();
        assert!(matches!(e, OutputRuleError::OtherKind { .. }), "{e}");
        // Nothing there, or an empty directory: free.
        let empty = d.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        check(t("--out", &empty, Artifact::Report), &[], false).unwrap();
        // A file never takes a directory's place, even an empty one's.
        let e = check(t("--out", &empty, Artifact::Vectors), &[], true).unwrap_err();
        assert!(
            e.to_string()
                .contains("is a directory, not a word vectors file"),
            "{e}"
        );
        check(
            t("--out", &d.path().join("new"), Artifact::Model),
            &[],
            false,
        )
        .unwrap();
    }

    #[test]
    fn files_are_told_apart_by_their_first_bytes() {
        let d = tempfile::tempdir().unwrap();
        let w = |name: &str, body: &[u8]| {
            let p = d.path().join(name);
            std::fs::write(&p, body).unwrap();
            found(&p)
        };
        assert_eq!(
            w("a.txt", b"the 0.1 0.2 0.3\n"),
            Found::File(Artifact::Vectors)
        );
        assert_eq!(
            w("b.txt", b"2 3\nthe 0.1 0.2 0.3\n"),
            Found::File(Artifact::Vectors)
        );
        assert_eq!(
            w("c.arpa", b"\n\\data\\\nngram 1=3\n"),
            Found::File(Artifact::Arpa)
        );
        assert_eq!(w("d.txt", b"Hello there.\n"), Found::File(Artifact::Text));
        assert_eq!(w("e.json", b"[1, 2]"), Found::File(Artifact::Json));
        assert_eq!(
            w("f.npy", b"\x93NUMPY\x01\x00"),
            Found::File(Artifact::Embeddings)
        );
        assert_eq!(w("g.bin", b"\x00\x01\x02"), Found::OtherFile);
        assert_eq!(w("h.pfe", b"PFEMB3\n"), Found::Model);
    }
}
