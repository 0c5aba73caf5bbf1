//! Where a command writes what it makes (`train`, `train-classifier`,
//! `export-vectors`, `lm-train`): never over one of its own inputs, nor into
//! one or around one, whatever it is told; over an existing file or a
//! directory that holds something only with `--overwrite`; and never half
//! written: the artifact is made under a temporary name beside its place
//! and renamed there at the end, so a killed run leaves what was there
//! before (and a hidden `.NAME.*.partial` directory), not a partial model.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// An output claimed for one run: see the module docs.
pub struct Out {
    target: PathBuf,
    /// Holds the artifact while it is made (under the target's own name)
    /// and, at the end, what it replaced; removed with its contents when
    /// dropped, so a failed run leaves nothing beside the target.
    staging: tempfile::TempDir,
    name: OsString,
    /// Suffixes of the companions that go beside a one-file artifact
    /// (`TARGET<suffix>`: its card).
    companions: Vec<&'static str>,
}

impl Out {
    /// Claims `target`, given as option `flag`, for a command that reads
    /// `inputs` (option, path). Refuses a target that is an input, holds
    /// one or lies inside one (even with `overwrite`), and an existing file
    /// or non-empty directory without `overwrite`.
    pub fn claim(
        flag: &str,
        target: &Path,
        inputs: &[(&str, &Path)],
        overwrite: bool,
    ) -> Result<Out> {
        Self::claim_with(flag, target, inputs, overwrite, &[])
    }

    /// [`Out::claim`] for an artifact with companions beside it
    /// (`TARGET<suffix>` for each of `companions`): an existing one is
    /// replaced, or removed, only with `overwrite`, as the target is.
    pub fn claim_with(
        flag: &str,
        target: &Path,
        inputs: &[(&str, &Path)],
        overwrite: bool,
        companions: &[&'static str],
    ) -> Result<Out> {
        let out = resolved(target);
        for (opt, input) in inputs {
            let inp = resolved(input);
            let relation = if out == inp || same_file(target, input) {
                "is"
            } else if inp.starts_with(&out) {
                "holds"
            } else if out.starts_with(&inp) {
                "lies inside"
            } else {
                continue;
            };
            bail!(
                "{flag} {} {relation} the input {opt} {}: choose another {flag} (refused even with --overwrite)",
                target.display(),
                input.display()
            );
        }
        if let Ok(meta) = target.symlink_metadata() {
            let holds_something = !meta.is_dir()
                || std::fs::read_dir(target)
                    .with_context(|| format!("{flag} {}", target.display()))?
                    .next()
                    .is_some();
            if holds_something && !overwrite {
                let what = if meta.is_dir() {
                    "a directory that is not empty"
                } else {
                    "a file"
                };
                bail!(
                    "{flag} {} already exists ({what}); give --overwrite to replace it",
                    target.display()
                );
            }
        }
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
        let (Some(parent), Some(name)) = (out.parent(), out.file_name()) else {
            bail!("{flag} {}: not a file or directory name", target.display());
        };
        std::fs::create_dir_all(parent).with_context(|| {
            format!("{flag} {}: creating {}", target.display(), parent.display())
        })?;
        let staging = tempfile::Builder::new()
            .prefix(&format!(".{}.", name.to_string_lossy()))
            .suffix(".partial")
            .tempdir_in(parent)
            .with_context(|| {
                format!(
                    "{flag} {}: a temporary directory beside it",
                    target.display()
                )
            })?;
        Ok(Out {
            target: target.to_path_buf(),
            staging,
            name: name.to_os_string(),
            companions: companions.to_vec(),
        })
    }

    /// Where the artifact is written (a file or a directory), beside the
    /// target under its name.
    pub fn path(&self) -> PathBuf {
        self.staging.path().join(&self.name)
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

/// `p` with `suffix` appended to its name.
fn with_suffix(p: &Path, suffix: &str) -> PathBuf {
    let mut n = p.as_os_str().to_os_string();
    n.push(suffix);
    PathBuf::from(n)
}

/// `p` absolute with its symbolic links resolved, also when it does not
/// exist yet (its nearest existing ancestor resolved, the rest appended).
fn resolved(p: &Path) -> PathBuf {
    let abs = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let mut rest: Vec<OsString> = Vec::new();
    let mut at = abs.as_path();
    loop {
        if let Ok(mut real) = at.canonicalize() {
            real.extend(rest.iter().rev());
            return real;
        }
        match (at.parent(), at.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                at = parent;
            }
            _ => return abs,
        }
    }
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
            let e = Out::claim("--out", &out, &inputs, true).err().unwrap();
            let e = e.to_string();
            assert!(e.contains(relation) && e.contains("--data"), "{e}");
        }
        let hard = dir.path().join("hard.parquet");
        std::fs::hard_link(data.join("a.parquet"), &hard).unwrap();
        let file_input = data.join("a.parquet");
        let e = Out::claim("--out", &hard, &[("--data", &file_input)], true)
            .err()
            .unwrap();
        assert!(e.to_string().contains(" is "), "{e}");

        let file = dir.path().join("m.pfe");
        std::fs::write(&file, "old").unwrap();
        let e = Out::claim("--out", &file, &inputs, false).err().unwrap();
        assert!(e.to_string().contains("--overwrite"), "{e}");
        let out = Out::claim("--out", &file, &inputs, true).unwrap();
        std::fs::write(out.path(), "new").unwrap();
        out.commit().unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "new");

        // An empty directory is free; a directory artifact replaces it.
        let d = dir.path().join("model");
        std::fs::create_dir_all(&d).unwrap();
        let out = Out::claim("--out", &d, &inputs, false).unwrap();
        std::fs::create_dir_all(out.path()).unwrap();
        std::fs::write(out.path().join("config.json"), "{}").unwrap();
        out.commit().unwrap();
        assert!(d.join("config.json").is_file());
        // A run that fails before commit leaves nothing beside its target.
        let out = Out::claim("--out", &dir.path().join("x.pfe"), &inputs, false).unwrap();
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
        let e = Out::claim_with("--out", &lone, &inputs, false, &[".README.md"])
            .err()
            .unwrap();
        assert!(e.to_string().contains("n.pfe.README.md"), "{e}");
        let card = dir.path().join("m.pfe.README.md");
        std::fs::write(&card, "old card").unwrap();
        let out = Out::claim_with("--out", &file, &inputs, true, &[".README.md"]).unwrap();
        std::fs::create_dir_all(out.path()).unwrap();
        std::fs::write(out.path().join("README.md"), "new card").unwrap();
        out.commit().unwrap();
        assert!(file.join("README.md").is_file());
        assert!(!card.exists(), "the stale card stayed");
    }
}
