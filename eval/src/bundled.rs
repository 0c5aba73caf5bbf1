//! The data files commands read by default: the English word frequencies
//! (`report --freq`), the STS sets (`eval-sts --sts`, `train --dev`), SICK
//! (`eval-transfer --tasks`) and the word-similarity sets (`eval-words
//! --words`), compiled into the binary so that these commands run outside
//! a checkout of the repository. A default path that exists from the
//! working directory is read as before; otherwise the bundled copy is
//! written once under the user's cache directory and read from there,
//! through the same loaders. The files' sources and licenses are in
//! `data/README.md`, which the bundle carries beside them.

use std::path::{Path, PathBuf};

use crate::EvalError;

/// `report --freq`'s default.
pub const FREQ: &str = "data/freq/enwiki_vocab_top50k.txt";
/// `eval-sts --sts`'s default.
pub const STS: &str = "data/sts";
/// `train --dev`'s default: STS Benchmark's dev set.
pub const STS_DEV: &str = "data/sts/stsbenchmark/sts-dev.csv";
/// `eval-transfer --tasks`'s default (SICK only).
pub const SICK: &str = "data/sts/sick2014";
/// `eval-words --words`'s default.
pub const WORDS: &str = "data/words";

macro_rules! file {
    ($p:literal) => {
        ($p, include_bytes!(concat!("../../", $p)) as &[u8])
    };
}

/// Every bundled file by its path in the repository.
static FILES: &[(&str, &[u8])] = &[
    file!("data/README.md"),
    file!("data/freq/enwiki_vocab_top50k.txt"),
    file!("data/sts/semeval/STS2012-test/00-readme.txt"),
    file!("data/sts/semeval/STS2012-test/STS.gs.MSRpar.txt"),
    file!("data/sts/semeval/STS2012-test/STS.gs.MSRvid.txt"),
    file!("data/sts/semeval/STS2012-test/STS.gs.SMTeuroparl.txt"),
    file!("data/sts/semeval/STS2012-test/STS.gs.surprise.OnWN.txt"),
    file!("data/sts/semeval/STS2012-test/STS.gs.surprise.SMTnews.txt"),
    file!("data/sts/semeval/STS2012-test/STS.input.MSRpar.txt"),
    file!("data/sts/semeval/STS2012-test/STS.input.MSRvid.txt"),
    file!("data/sts/semeval/STS2012-test/STS.input.SMTeuroparl.txt"),
    file!("data/sts/semeval/STS2012-test/STS.input.surprise.OnWN.txt"),
    file!("data/sts/semeval/STS2012-test/STS.input.surprise.SMTnews.txt"),
    file!("data/sts/semeval/STS2013-test/00-readme.txt"),
    file!("data/sts/semeval/STS2013-test/STS.gs.FNWN.txt"),
    file!("data/sts/semeval/STS2013-test/STS.gs.OnWN.txt"),
    file!("data/sts/semeval/STS2013-test/STS.gs.headlines.txt"),
    file!("data/sts/semeval/STS2013-test/STS.input.FNWN.txt"),
    file!("data/sts/semeval/STS2013-test/STS.input.OnWN.txt"),
    file!("data/sts/semeval/STS2013-test/STS.input.headlines.txt"),
    file!("data/sts/semeval/STS2014-test/00-readme.txt"),
    file!("data/sts/semeval/STS2014-test/STS.gs.OnWN.txt"),
    file!("data/sts/semeval/STS2014-test/STS.gs.deft-forum.txt"),
    file!("data/sts/semeval/STS2014-test/STS.gs.deft-news.txt"),
    file!("data/sts/semeval/STS2014-test/STS.gs.headlines.txt"),
    file!("data/sts/semeval/STS2014-test/STS.gs.images.txt"),
    file!("data/sts/semeval/STS2014-test/STS.gs.tweet-news.txt"),
    file!("data/sts/semeval/STS2014-test/STS.input.OnWN.txt"),
    file!("data/sts/semeval/STS2014-test/STS.input.deft-forum.txt"),
    file!("data/sts/semeval/STS2014-test/STS.input.deft-news.txt"),
    file!("data/sts/semeval/STS2014-test/STS.input.headlines.txt"),
    file!("data/sts/semeval/STS2014-test/STS.input.images.txt"),
    file!("data/sts/semeval/STS2014-test/STS.input.tweet-news.txt"),
    file!("data/sts/semeval/STS2015-test/00-readme.txt"),
    file!("data/sts/semeval/STS2015-test/STS.gs.answers-forums.txt"),
    file!("data/sts/semeval/STS2015-test/STS.gs.answers-students.txt"),
    file!("data/sts/semeval/STS2015-test/STS.gs.belief.txt"),
    file!("data/sts/semeval/STS2015-test/STS.gs.headlines.txt"),
    file!("data/sts/semeval/STS2015-test/STS.gs.images.txt"),
    file!("data/sts/semeval/STS2015-test/STS.input.answers-forums.LICENSE"),
    file!("data/sts/semeval/STS2015-test/STS.input.answers-forums.txt"),
    file!("data/sts/semeval/STS2015-test/STS.input.answers-students.txt"),
    file!("data/sts/semeval/STS2015-test/STS.input.belief.txt"),
    file!("data/sts/semeval/STS2015-test/STS.input.headlines.txt"),
    file!("data/sts/semeval/STS2015-test/STS.input.images.txt"),
    file!("data/sts/semeval/STS2016-test/LICENSE.txt"),
    file!("data/sts/semeval/STS2016-test/README.txt"),
    file!("data/sts/semeval/STS2016-test/STS2016.gs.answer-answer.txt"),
    file!("data/sts/semeval/STS2016-test/STS2016.gs.headlines.txt"),
    file!("data/sts/semeval/STS2016-test/STS2016.gs.plagiarism.txt"),
    file!("data/sts/semeval/STS2016-test/STS2016.gs.postediting.txt"),
    file!("data/sts/semeval/STS2016-test/STS2016.gs.question-question.txt"),
    file!("data/sts/semeval/STS2016-test/STS2016.input.answer-answer.txt"),
    file!("data/sts/semeval/STS2016-test/STS2016.input.headlines.txt"),
    file!("data/sts/semeval/STS2016-test/STS2016.input.plagiarism.txt"),
    file!("data/sts/semeval/STS2016-test/STS2016.input.postediting.txt"),
    file!("data/sts/semeval/STS2016-test/STS2016.input.question-question.txt"),
    file!("data/sts/sick2014/SICK_test_annotated.txt"),
    file!("data/sts/sick2014/SICK_train.txt"),
    file!("data/sts/sick2014/SICK_trial.txt"),
    file!("data/sts/sick2014/readme.txt"),
    file!("data/sts/stsbenchmark/LICENSE.txt"),
    file!("data/sts/stsbenchmark/readme.txt"),
    file!("data/sts/stsbenchmark/sts-dev.csv"),
    file!("data/sts/stsbenchmark/sts-test.csv"),
    file!("data/words/simlex999.txt"),
    file!("data/words/wordsim353.tsv"),
];

/// `path` if it exists from the working directory; the bundled copy if
/// `path` is a bundled file or directory (as `data/...`); otherwise an
/// error naming `flag`. The copy lives under `$XDG_CACHE_HOME/paraforge`
/// (else `~/.cache/paraforge`, else the temporary directory's).
pub fn locate(path: &Path, flag: &str) -> Result<PathBuf, EvalError> {
    locate_in(path, flag, &cache_root())
}

/// [`locate`] with the bundle's copy under `cache`.
pub fn locate_in(path: &Path, flag: &str, cache: &Path) -> Result<PathBuf, EvalError> {
    if path.exists() {
        return Ok(path.to_path_buf());
    }
    let rel = path
        .to_str()
        .map(|s| s.trim_start_matches("./").trim_end_matches('/'))
        .filter(|rel| is_bundled(rel));
    let Some(rel) = rel else {
        return Err(EvalError::Missing {
            flag: flag.to_string(),
            path: path.to_path_buf(),
        });
    };
    let root = unpack(cache).map_err(|source| EvalError::Bundle {
        flag: flag.to_string(),
        dir: cache.to_path_buf(),
        source,
    })?;
    Ok(root.join(rel))
}

/// Whether `rel` is a bundled file or a directory holding some.
fn is_bundled(rel: &str) -> bool {
    !rel.is_empty()
        && FILES.iter().any(|(name, _)| {
            *name == rel
                || name
                    .strip_prefix(rel)
                    .is_some_and(|rest| rest.starts_with('/'))
        })
}

fn cache_root() -> PathBuf {
    let non_empty = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    non_empty("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| non_empty("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("paraforge")
}

/// The bundle's directory under `cache`, written on first use. Its name is
/// the digest of the files, so a binary with other data gets another one;
/// it is written beside and renamed into place, so a reader never sees
/// half of it, and a copy that no longer matches is refused.
fn unpack(cache: &Path) -> std::io::Result<PathBuf> {
    let mut h = twox_hash::XxHash3_128::new();
    for (name, bytes) in FILES {
        h.write(name.as_bytes());
        h.write(&(bytes.len() as u64).to_le_bytes());
        h.write(bytes);
    }
    let dir = cache.join(format!("data-{:032x}", h.finish_128()));
    if !dir.is_dir() {
        std::fs::create_dir_all(cache)?;
        let tmp = tempfile::Builder::new()
            .prefix(".data-")
            .tempdir_in(cache)?;
        for (name, bytes) in FILES {
            let p = tmp.path().join(name);
            std::fs::create_dir_all(p.parent().expect("a bundled file is under data/"))?;
            std::fs::write(&p, bytes)?;
        }
        // Another process may have put its copy there first: it is the same.
        if let Err(e) = std::fs::rename(tmp.path(), &dir) {
            if !dir.is_dir() {
                return Err(e);
            }
        }
    }
    for (name, bytes) in FILES {
        let p = dir.join(name);
        if std::fs::read(&p)? != *bytes {
            return Err(std::io::Error::other(format!(
                "{} is not the bundled file any more; delete {}",
                p.display(),
                dir.display()
            )));
        }
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
    }

    /// Every file under the bundled directories is in the bundle (a file
    /// added to data/ without its line here fails), byte for byte.
    #[test]
    fn the_bundle_holds_every_default_data_file() {
        let mut on_disk = Vec::new();
        let mut stack: Vec<PathBuf> = ["data/freq", "data/sts", "data/words"]
            .iter()
            .map(|d| repo().join(d))
            .collect();
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    let rel = p.strip_prefix(repo()).unwrap();
                    on_disk.push(rel.to_str().unwrap().to_string());
                }
            }
        }
        on_disk.sort();
        let mut bundled: Vec<String> = FILES
            .iter()
            .map(|(n, _)| n.to_string())
            .filter(|n| n != "data/README.md")
            .collect();
        bundled.sort();
        assert_eq!(bundled, on_disk);
    }

    /// Outside a checkout the defaults come from the bundle and load as the
    /// repository's files do; the copy is written once and checked; a
    /// missing path that is not bundled names its flag.
    #[test]
    fn absent_defaults_come_from_the_bundle() {
        let cache = tempfile::tempdir().unwrap();
        // The unit tests run in eval/, where data/ does not exist.
        assert!(!Path::new(STS).exists());
        let sts = locate_in(Path::new(STS), "--sts", cache.path()).unwrap();
        assert!(sts.starts_with(cache.path()), "{}", sts.display());
        let here = crate::sts::load(&sts).unwrap();
        let there = crate::sts::load(&repo().join(STS)).unwrap();
        assert_eq!(here.len(), there.len());
        assert!(here.len() >= 20, "{}", here.len());
        for (a, b) in here.iter().zip(&there) {
            assert_eq!((&a.name, &a.pairs), (&b.name, &b.pairs));
        }
        let dev = locate_in(
            Path::new("./data/sts/stsbenchmark/sts-dev.csv"),
            "--dev",
            cache.path(),
        )
        .unwrap();
        assert_eq!(crate::sts::load_dev(&dev).unwrap()[0].pairs.len(), 1500);
        for default in [FREQ, SICK, WORDS] {
            let p = locate_in(Path::new(default), "--x", cache.path()).unwrap();
            assert!(p.exists(), "{}", p.display());
        }
        // One copy, reused.
        let dirs: Vec<_> = std::fs::read_dir(cache.path()).unwrap().collect();
        assert_eq!(dirs.len(), 1);

        // An existing path is read where it is.
        let mine = cache.path().join("mine.csv");
        std::fs::write(&mine, "x").unwrap();
        assert_eq!(locate_in(&mine, "--dev", cache.path()).unwrap(), mine);

        for (path, flag) in [
            ("data/stsx", "--sts"),
            ("data/sts/stsbenchmark/none.csv", "--dev"),
            ("nowhere/f.txt", "--freq"),
        ] {
            let e = locate_in(Path::new(path), flag, cache.path())
                .unwrap_err()
                .to_string();
            assert!(e.contains(flag) && e.contains(path), "{e}");
        }

        // An altered copy is refused, naming the file.
        let freq = locate_in(Path::new(FREQ), "--freq", cache.path()).unwrap();
        std::fs::write(&freq, "the 1\n").unwrap();
        let e = locate_in(Path::new(FREQ), "--freq", cache.path())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("enwiki_vocab_top50k.txt") && e.contains("--freq"),
            "{e}"
        );
    }
}
