//! How a command writes a new dataset (`bin`, `filter`, `rescore`): staged,
//! claimed and published whole, so that a reader sees either the old
//! dataset or the new one, complete, and never a mix.
//!
//! The command writes into a staging directory beside the output
//! (`.<name>.staging`, hidden from readers of the parent, on the same file
//! system so that publishing is a rename). The staging directory is the
//! claim: whoever holds its lock (`flock`, which the kernel drops when the
//! process dies) is the one run writing that output. A second run is
//! refused while the first holds it; a run that was killed leaves it
//! unlocked, and the next run wipes and reuses it. Publishing writes
//! `_manifest.json`, then `_SUCCESS`, into the staging directory and renames
//! it into place; a dataset there before (only with `--overwrite`) is moved
//! aside first and deleted after. A run that fails deletes its staging
//! directory and leaves the output as it was.
//!
//! The output must not be any of the command's inputs, lie inside one or
//! hold one; an existing output is replaced only when it is a finished
//! dataset of a command (never a job's output, a model, or anything else)
//! and `--overwrite` was given.

use std::fs::File;
use std::path::{Path, PathBuf};

use paraforge_core::layout::{ManifestHead, ManifestKind, CLAIM_FILE, MANIFEST_FILE, SUCCESS_FILE};

#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error("{out}: the output must not be an input, lie inside one or hold one ({input})")]
    OverlapsInput { out: PathBuf, input: PathBuf },
    #[error("{0}: is a file; the output is a directory")]
    IsFile(PathBuf),
    #[error("{out}: holds files that are not a paraforge dataset ({example}); choose a new or empty directory")]
    NotADataset { out: PathBuf, example: String },
    #[error("{0}: holds a job's output, which no command writes over; choose another directory")]
    JobOutput(PathBuf),
    #[error("{out}: holds a finished {kind} dataset; choose a new directory, or give --overwrite to replace it")]
    Exists { out: PathBuf, kind: String },
    #[error("{out}: another paraforge run is writing it now ({who}); wait for it to end, or choose another directory")]
    Busy { out: PathBuf, who: String },
    #[error(transparent)]
    Rule(#[from] paraforge_core::outputs::OutputRuleError),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> OutputError + '_ {
    move |source| OutputError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Who holds a staging directory, for the message a second run gets.
const WRITER_FILE: &str = "_writer.json";

/// A new dataset being written: write its files under [`NewDataset::dir`],
/// then [`NewDataset::publish`]. Dropped unpublished, it deletes what it
/// wrote and leaves the output as it was.
#[derive(Debug)]
pub struct NewDataset {
    target: PathBuf,
    staging: PathBuf,
    /// Holds the staging directory's lock until the dataset is published
    /// or dropped.
    lock: Option<File>,
    /// The output held a finished dataset, which publishing replaces.
    replaces: bool,
}

impl NewDataset {
    /// Claims `target` for a new dataset read from `inputs` (files or
    /// directories the command reads; the output may overlap none of them).
    /// `command` names the writer in a concurrent run's refusal.
    pub fn create(
        target: &Path,
        inputs: &[&Path],
        overwrite: bool,
        command: &str,
    ) -> Result<NewDataset, OutputError> {
        // Where it is first: "inside a finished dataset" says more than
        // "is a file" about a part file of one.
        check_apart(target, inputs)?;
        paraforge_core::outputs::check_not_inside("the output", target)?;
        if target.is_file() {
            return Err(OutputError::IsFile(target.to_path_buf()));
        }
        let parent = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        std::fs::create_dir_all(&parent).map_err(io(&parent))?;
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| OutputError::IsFile(target.to_path_buf()))?;
        let staging = parent.join(format!(".{name}.staging"));
        let lock = claim(&staging, target, command)?;
        let mut new = NewDataset {
            target: target.to_path_buf(),
            staging,
            lock: Some(lock),
            replaces: false,
        };
        // Looked at under the lock: no other run can publish here now. A
        // refusal drops `new`, which removes the staging directory.
        new.replaces = match existing(target)? {
            Existing::Nothing => false,
            Existing::Dataset(kind) if overwrite => {
                tracing::info!(out = %target.display(), %kind, "replacing a finished dataset (--overwrite)");
                true
            }
            Existing::Dataset(kind) => {
                return Err(OutputError::Exists {
                    out: target.to_path_buf(),
                    kind,
                })
            }
        };
        Ok(new)
    }

    /// Where the command writes the dataset's files (relative paths as
    /// they will be under the output).
    pub fn dir(&self) -> &Path {
        &self.staging
    }

    /// The output the dataset will be published as.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// Writes `manifest` (the command's `_manifest.json`) and `_SUCCESS`,
    /// then puts the dataset in place of the output.
    pub fn publish(mut self, manifest: &[u8]) -> Result<(), OutputError> {
        let s = self.staging.clone();
        let m = s.join(MANIFEST_FILE);
        write_synced(&m, manifest)?;
        write_synced(&s.join(SUCCESS_FILE), b"")?;
        let w = s.join(WRITER_FILE);
        std::fs::remove_file(&w).map_err(io(&w))?;
        let old = self.replaces.then(|| {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            self.staging
                .with_extension(format!("old-{}-{nanos}", std::process::id()))
        });
        if let Some(old) = &old {
            // Readers see no dataset (an error), never a half-replaced one.
            std::fs::rename(&self.target, old).map_err(io(&self.target))?;
        } else if self.target.is_dir() {
            // An empty directory: rename(2) does not take a non-empty one,
            // and nothing may have appeared in it.
            std::fs::remove_dir(&self.target).map_err(io(&self.target))?;
        }
        std::fs::rename(&s, &self.target).map_err(io(&self.target))?;
        self.lock.take();
        if let Some(old) = old {
            std::fs::remove_dir_all(&old).map_err(io(&old))?;
        }
        Ok(())
    }
}

impl Drop for NewDataset {
    fn drop(&mut self) {
        // Unpublished: what this run wrote is part of no dataset.
        if self.lock.is_some() {
            let _ = std::fs::remove_dir_all(&self.staging);
        }
    }
}

/// Takes the staging directory's lock, creating the directory or taking
/// over one a killed run left (wiped first); refuses one a live run holds.
fn claim(staging: &Path, target: &Path, command: &str) -> Result<File, OutputError> {
    match std::fs::create_dir(staging) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io(staging)(e)),
    }
    let dir = File::open(staging).map_err(io(staging))?;
    match dir.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let who = std::fs::read_to_string(staging.join(WRITER_FILE))
                .unwrap_or_else(|_| "its staging directory is locked".into());
            return Err(OutputError::Busy {
                out: target.to_path_buf(),
                who: who.trim().to_string(),
            });
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(io(staging)(e)),
    }
    // A killed run's files: nobody holds them any more.
    for e in std::fs::read_dir(staging).map_err(io(staging))? {
        let p = e.map_err(io(staging))?.path();
        let r = if p.is_dir() {
            std::fs::remove_dir_all(&p)
        } else {
            std::fs::remove_file(&p)
        };
        r.map_err(io(&p))?;
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let who = format!(
        "paraforge {command}, pid {} on {}",
        std::process::id(),
        host.trim()
    );
    let w = staging.join(WRITER_FILE);
    std::fs::write(&w, who).map_err(io(&w))?;
    Ok(dir)
}

/// Refuses an output that is one of `inputs`, lies inside one or holds
/// one (symlinks resolved): writing it would replace or mix with what the
/// command reads.
pub fn check_apart(target: &Path, inputs: &[&Path]) -> Result<(), OutputError> {
    let out_abs = absolute(target).map_err(io(target))?;
    for input in inputs {
        let in_abs = absolute(input).map_err(io(input))?;
        if out_abs.starts_with(&in_abs) || in_abs.starts_with(&out_abs) {
            return Err(OutputError::OverlapsInput {
                out: target.to_path_buf(),
                input: input.to_path_buf(),
            });
        }
    }
    Ok(())
}

enum Existing {
    Nothing,
    /// A finished dataset of a command (its kind).
    Dataset(String),
}

/// What the output holds now.
fn existing(target: &Path) -> Result<Existing, OutputError> {
    if !target.exists() {
        return Ok(Existing::Nothing);
    }
    let mut entries = std::fs::read_dir(target).map_err(io(target))?;
    let Some(first) = entries.next() else {
        return Ok(Existing::Nothing);
    };
    if target.join(CLAIM_FILE).exists() {
        return Err(OutputError::JobOutput(target.to_path_buf()));
    }
    let not_dataset = || OutputError::NotADataset {
        out: target.to_path_buf(),
        example: first
            .as_ref()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .unwrap_or_default(),
    };
    let Ok(bytes) = std::fs::read(target.join(MANIFEST_FILE)) else {
        return Err(not_dataset());
    };
    let head = ManifestHead::parse(&bytes).map_err(|_| not_dataset())?;
    let kind = match head.kind {
        Some(ManifestKind::Job) => return Err(OutputError::JobOutput(target.to_path_buf())),
        Some(ManifestKind::Bins) | None if head.is_bins() => "bins",
        Some(ManifestKind::Filter) => "filter",
        Some(ManifestKind::Rescore) => "rescore",
        Some(ManifestKind::Lexicon) => "lexicon",
        _ => return Err(not_dataset()),
    };
    Ok(Existing::Dataset(kind.to_string()))
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), OutputError> {
    use std::io::Write;
    let mut f = File::create(path).map_err(io(path))?;
    f.write_all(bytes).map_err(io(path))?;
    f.sync_all().map_err(io(path))
}

/// `path` made absolute with symlinks resolved as far as it exists (a new
/// output's missing tail is appended as given).
fn absolute(path: &Path) -> std::io::Result<PathBuf> {
    let mut tail = Vec::new();
    let mut p = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()?.join(path)
    };
    loop {
        match std::fs::canonicalize(&p) {
            Ok(c) => {
                let mut c = c;
                for t in tail.iter().rev() {
                    c.push(t);
                }
                return Ok(c);
            }
            Err(_) => {
                let Some(name) = p.file_name().map(|n| n.to_os_string()) else {
                    return Ok(p);
                };
                tail.push(name);
                if !p.pop() {
                    return Ok(p);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finished(dir: &Path, kind: &str) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(
            dir.join(MANIFEST_FILE),
            format!(r#"{{"kind":"{kind}","files":[]}}"#),
        )
        .unwrap();
        std::fs::write(dir.join(SUCCESS_FILE), "").unwrap();
    }

    #[test]
    fn a_dataset_appears_whole_or_not_at_all() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("new");
        let w = NewDataset::create(&out, &[], false, "filter").unwrap();
        std::fs::write(w.dir().join("part.parquet"), "x").unwrap();
        assert!(!out.exists(), "nothing at the output before publishing");
        w.publish(br#"{"kind":"filter","files":[]}"#).unwrap();
        for f in ["part.parquet", MANIFEST_FILE, SUCCESS_FILE] {
            assert!(out.join(f).is_file(), "{f}");
        }
        assert!(!out.join(WRITER_FILE).exists());
        assert!(!d.path().join(".new.staging").exists());
        // A failed run (dropped unpublished) leaves the output as it was.
        let w = NewDataset::create(&out, &[], true, "filter").unwrap();
        std::fs::write(w.dir().join("other.parquet"), "y").unwrap();
        drop(w);
        assert!(out.join("part.parquet").is_file() && !out.join("other.parquet").exists());
        assert!(!d.path().join(".new.staging").exists());
    }

    #[test]
    fn a_second_run_is_refused_while_the_first_writes() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("o");
        let first = NewDataset::create(&out, &[], false, "rescore").unwrap();
        std::fs::write(first.dir().join("a.parquet"), "1").unwrap();
        let e = NewDataset::create(&out, &[], true, "rescore").unwrap_err();
        assert!(matches!(e, OutputError::Busy { .. }), "{e}");
        assert!(e.to_string().contains("paraforge rescore, pid"), "{e}");
        // The refused run touched nothing of the first one's.
        assert!(first.dir().join("a.parquet").is_file());
        first.publish(b"{}").unwrap();
        assert!(out.join("a.parquet").is_file());
    }

    #[test]
    fn a_killed_runs_staging_is_taken_over_and_wiped() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("o");
        // What a SIGKILLed run leaves: the staging directory, unlocked.
        let staging = d.path().join(".o.staging");
        std::fs::create_dir_all(staging.join("shard=1")).unwrap();
        std::fs::write(staging.join("shard=1/part.parquet"), "stale").unwrap();
        let w = NewDataset::create(&out, &[], false, "filter").unwrap();
        assert_eq!(
            std::fs::read_dir(w.dir()).unwrap().count(),
            1,
            "only the writer file"
        );
        w.publish(b"{}").unwrap();
        assert!(!out.join("shard=1").exists());
    }

    #[test]
    fn existing_outputs_inputs_and_foreign_directories_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let input = d.path().join("in");
        finished(&input, "job");
        std::fs::write(input.join(CLAIM_FILE), "{}").unwrap();
        for out in [input.clone(), input.join("x"), d.path().to_path_buf()] {
            let e = NewDataset::create(&out, &[&input], true, "bin").unwrap_err();
            assert!(
                matches!(e, OutputError::OverlapsInput { .. }),
                "{out:?}: {e}"
            );
        }
        let e = NewDataset::create(&input, &[], true, "bin").unwrap_err();
        assert!(matches!(e, OutputError::JobOutput(_)), "{e}");
        let model = d.path().join("model");
        std::fs::create_dir_all(&model).unwrap();
        std::fs::write(model.join("config.json"), "{}").unwrap();
        let e = NewDataset::create(&model, &[], true, "rescore").unwrap_err();
        assert!(matches!(e, OutputError::NotADataset { .. }), "{e}");
        let file = d.path().join("pairs.tsv");
        std::fs::write(&file, "a\tb\n").unwrap();
        let e = NewDataset::create(&file, &[], true, "rescore").unwrap_err();
        assert!(matches!(e, OutputError::IsFile(_)), "{e}");
        let done = d.path().join("done");
        finished(&done, "rescore");
        let e = NewDataset::create(&done, &[], false, "rescore").unwrap_err();
        assert!(
            e.to_string().contains("--overwrite") && matches!(e, OutputError::Exists { .. }),
            "{e}"
        );
        assert!(
            !d.path().join(".done.staging").exists(),
            "a refused run leaves no staging directory"
        );
        NewDataset::create(&done, &[], true, "rescore")
            .unwrap()
            .publish(br#"{"kind":"rescore","files":[]}"#)
            .unwrap();
        // An empty directory is new.
        let empty = d.path().join("empty");
        std::fs::create_dir_all(&empty).unwrap();
        NewDataset::create(&empty, &[], false, "filter")
            .unwrap()
            .publish(b"{}")
            .unwrap();
        assert!(empty.join(SUCCESS_FILE).is_file());
    }
}
