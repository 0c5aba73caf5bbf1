//! Where a command writes what it makes (`train`, `train-classifier`,
//! `export`, `lm-train`, `embed`, every `--json` and `-o`): whether it may
//! write there at all is [`paraforge_core::outputs`]' one rule; this module
//! makes it never half written: the artifact is made under a temporary name
//! beside its place and renamed there at the end, so a killed run leaves
//! what was there before (and a hidden `.NAME.*.partial` directory, which
//! the next run writing there removes once no live run holds its lock),
//! not a partial artifact.

use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
pub use paraforge_core::outputs::Artifact;
use paraforge_core::outputs::{self, Target};

/// An output claimed for one run: see the module docs.
pub struct Out {
    target: PathBuf,
    /// Holds the artifact while it is made (under the target's own name)
    /// and, at the end, what it replaced; removed with its contents when
    /// dropped, so a failed run leaves nothing beside the target.
    staging: tempfile::TempDir,
    /// The staging directory's lock: held while this run lives, so that
    /// another run can tell a live run's directory from a killed one's.
    _lock: File,
    name: OsString,
    /// Suffixes of the companions that go beside a one-file artifact
    /// (`TARGET<suffix>`: its card).
    companions: Vec<&'static str>,
}

impl Out {
    /// Claims `target`, given as option `flag`, for `writes`, by a command
    /// that reads `inputs` (option, path): see [`paraforge_core::outputs`].
    pub fn claim(
        flag: &str,
        target: &Path,
        writes: Artifact,
        inputs: &[(&str, &Path)],
        overwrite: bool,
    ) -> Result<Out> {
        Self::claim_with(flag, target, writes, inputs, overwrite, &[])
    }

    /// [`Out::claim`] for an optional output (`--json`).
    pub fn claim_opt(
        flag: &str,
        target: Option<&Path>,
        writes: Artifact,
        inputs: &[(&str, &Path)],
        overwrite: bool,
    ) -> Result<Option<Out>> {
        target
            .map(|t| Self::claim(flag, t, writes, inputs, overwrite))
            .transpose()
    }

    /// [`Out::claim`] for an artifact with companions beside it
    /// (`TARGET<suffix>` for each of `companions`): an existing one is
    /// replaced, or removed, only with `overwrite`, as the target is.
    pub fn claim_with(
        flag: &str,
        target: &Path,
        writes: Artifact,
        inputs: &[(&str, &Path)],
        overwrite: bool,
        companions: &[&'static str],
    ) -> Result<Out> {
        outputs::check(
            Target {
                flag,
                path: target,
                writes,
            },
            inputs,
            overwrite,
        )?;
        for suffix in companions {
            let c = with_suffix(target, suffix);
            if c.symlink_metadata().is_ok() && !overwrite {
                bail!(
                    "{flag} {}: {} already exists; give --overwrite to replace it",
                    target.display(),
                    c.display()
                );
            }
        }
        let out = outputs::resolved(target);
        let (Some(parent), Some(name)) = (out.parent(), out.file_name()) else {
            bail!("{flag} {}: not a file or directory name", target.display());
        };
        std::fs::create_dir_all(parent).with_context(|| {
            format!("{flag} {}: creating {}", target.display(), parent.display())
        })?;
        let prefix = format!(".{}.", name.to_string_lossy());
        reclaim_stale(parent, &prefix);
        let staging = tempfile::Builder::new()
            .prefix(&prefix)
            .suffix(PARTIAL)
            .tempdir_in(parent)
            .with_context(|| {
                format!(
                    "{flag} {}: a temporary directory beside it",
                    target.display()
                )
            })?;
        let lock = File::open(staging.path())
            .and_then(|f| f.try_lock().map(|()| f).map_err(std::io::Error::other))
            .with_context(|| {
                format!(
                    "{flag} {}: locking {}",
                    target.display(),
                    staging.path().display()
                )
            })?;
        Ok(Out {
            target: target.to_path_buf(),
            staging,
            _lock: lock,
            name: name.to_os_string(),
            companions: companions.to_vec(),
        })
    }

    /// Where the artifact is written (a file or a directory), beside the
    /// target under its name.
    pub fn path(&self) -> PathBuf {
        self.staging.path().join(&self.name)
    }

    /// Writes `bytes` as the whole artifact and puts it in place.
    pub fn write_all(self, bytes: &[u8]) -> Result<()> {
        let p = self.path();
        std::fs::write(&p, bytes).with_context(|| format!("writing {}", self.target.display()))?;
        self.commit()
    }
    /// Puts the artifact in the target's place. A file replaces a file in
    /// one rename; anything else is first moved into the staging directory,
    /// removed with it. Then each companion made beside the artifact
    /// (`NAME<suffix>` in the staging directory: a one-file model's card)
    /// goes beside the target as `TARGET<suffix>`, replacing an earlier
    /// one; an earlier one with no new one is removed, as it describes what
    /// was replaced (a one-file model replaced by a directory, which holds
    /// its card).
    pub fn commit(self) -> Result<()> {
        let made = self.path();
        let old = self.target.symlink_metadata().ok();
        let both_files = old.as_ref().is_some_and(|m| !m.is_dir()) && made.is_file();
        if old.is_some() && !both_files {
            let mut aside = self.name.clone();
            aside.push(".replaced");
            std::fs::rename(&self.target, self.staging.path().join(aside))
                .with_context(|| format!("moving {} aside", self.target.display()))?;
        }
        std::fs::rename(&made, &self.target)
            .with_context(|| format!("renaming {} to {}", made.display(), self.target.display()))?;
        for suffix in &self.companions {
            let (from, to) = (
                with_suffix(&made, suffix),
                with_suffix(&self.target, suffix),
            );
            if from.is_file() {
                std::fs::rename(&from, &to)
                    .with_context(|| format!("renaming {} to {}", from.display(), to.display()))?;
            } else if to.symlink_metadata().is_ok() {
                std::fs::remove_file(&to)
                    .with_context(|| format!("removing the stale {}", to.display()))?;
            }
        }
        Ok(())
    }
}

const PARTIAL: &str = ".partial";

/// Removes the `PREFIX*.partial` directories in `parent` that no live run
/// holds (a killed run's; the kernel drops a dead process's lock). One
/// that cannot be removed is left, with a warning: it costs space, not
/// correctness.
fn reclaim_stale(parent: &Path, prefix: &str) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if !(name.starts_with(prefix) && name.ends_with(PARTIAL)) {
            continue;
        }
        let p = e.path();
        let Ok(f) = File::open(&p) else { continue };
        if f.try_lock().is_ok() {
            if let Err(err) = std::fs::remove_dir_all(&p) {
                tracing::warn!(path = %p.display(), %err, "could not remove a killed run's partial output");
            }
        }
    }
}

/// `p` with `suffix` appended to its name.
fn with_suffix(p: &Path, suffix: &str) -> PathBuf {
    let mut n = p.as_os_str().to_os_string();
    n.push(suffix);
    PathBuf::from(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_are_never_outputs_and_existing_outputs_need_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        std::fs::write(data.join("a.parquet"), "x").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&data, &link).unwrap();
        let inputs = [("--data", data.as_path())];
        for (out, relation) in [
            (data.clone(), " is "),
            (link.clone(), " is "),
            (dir.path().to_path_buf(), " holds "),
            (data.join("m.pfe"), " lies inside "),
            (link.join("sub/m.pfe"), " lies inside "),
        ] {
            let e = Out::claim("--out", &out, Artifact::Model, &inputs, true)
                .err()
                .unwrap();
            let e = e.to_string();
            assert!(e.contains(relation) && e.contains("--data"), "{e}");
        }
        let hard = dir.path().join("hard.parquet");
        std::fs::hard_link(data.join("a.parquet"), &hard).unwrap();
        let file_input = data.join("a.parquet");
        let e = Out::claim(
            "--out",
            &hard,
            Artifact::Model,
            &[("--data", &file_input)],
            true,
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains(" is "), "{e}");

        let file = dir.path().join("m.pfe");
        std::fs::write(&file, "PFEMB1\nold").unwrap();
        let e = Out::claim("--out", &file, Artifact::Model, &inputs, false)
            .err()
            .unwrap();
        assert!(e.to_string().contains("--overwrite"), "{e}");
        let out = Out::claim("--out", &file, Artifact::Model, &inputs, true).unwrap();
        std::fs::write(out.path(), "PFEMB1\nnew").unwrap();
        out.commit().unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "PFEMB1\nnew");

        // An empty directory is free; a directory artifact replaces it.
        let d = dir.path().join("model");
        std::fs::create_dir_all(&d).unwrap();
        let out = Out::claim("--out", &d, Artifact::Model, &inputs, false).unwrap();
        std::fs::create_dir_all(out.path()).unwrap();
        std::fs::write(out.path().join("config.json"), "{}").unwrap();
        out.commit().unwrap();
        assert!(d.join("config.json").is_file());
        // A run that fails before commit leaves nothing beside its target.
        let out = Out::claim(
            "--out",
            &dir.path().join("x.pfe"),
            Artifact::Model,
            &inputs,
            false,
        )
        .unwrap();
        std::fs::write(out.path(), "half").unwrap();
        drop(out);
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["data", "hard.parquet", "link", "m.pfe", "model"]);

        // A one-file model's card beside it counts as the output: replaced
        // only with --overwrite, and removed when a directory model (which
        // holds its own card) takes the model's place.
        let lone = dir.path().join("n.pfe");
        std::fs::write(dir.path().join("n.pfe.README.md"), "a card").unwrap();
        let e = Out::claim_with(
            "--out",
            &lone,
            Artifact::Model,
            &inputs,
            false,
            &[".README.md"],
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("n.pfe.README.md"), "{e}");
        let card = dir.path().join("m.pfe.README.md");
        std::fs::write(&card, "old card").unwrap();
        let out = Out::claim_with(
            "--out",
            &file,
            Artifact::Model,
            &inputs,
            true,
            &[".README.md"],
        )
        .unwrap();
        std::fs::create_dir_all(out.path()).unwrap();
        std::fs::write(out.path().join("README.md"), "new card").unwrap();
        out.commit().unwrap();
        assert!(file.join("README.md").is_file());
        assert!(!card.exists(), "the stale card stayed");
    }

    /// A killed run's `.NAME.*.partial` directory is removed by the next run
    /// writing NAME; a live run's is left alone.
    #[test]
    fn a_killed_runs_partial_directory_is_reclaimed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("m.pfe");
        // What a SIGKILLed run leaves: the directory, nobody holding it.
        let stale = dir.path().join(".m.pfe.abc123.partial");
        std::fs::create_dir_all(stale.join("m.pfe")).unwrap();
        std::fs::write(stale.join("m.pfe/x"), vec![0u8; 4096]).unwrap();
        let live = Out::claim("--out", &target, Artifact::Model, &[], false).unwrap();
        assert!(!stale.exists(), "the killed run's directory stayed");
        let live_dir = live.staging.path().to_path_buf();
        let second = Out::claim("--out", &target, Artifact::Model, &[], false).unwrap();
        assert!(live_dir.is_dir(), "a live run's directory was removed");
        drop(second);
        drop(live);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
