//! What a reader may trust: the files of a finished dataset, each checked
//! against the manifest its writer wrote last.
//!
//! Every command that reads paraforge output (bin, report, filter, rescore,
//! train, train-classifier) reads through [`open`]. A directory is a dataset
//! only when it holds `_manifest.json` and `_SUCCESS` (or is one partition
//! of a bins output that does); the manifest's file list, not the directory
//! listing, says what the dataset holds, and each listed file must still
//! have its rows and SHA-256. A copied-over, truncated, flipped or missing
//! file is refused by name instead of being binned or trained on, and a
//! stray Parquet file (an uncommitted attempt, a killed run's partial) is
//! never read. The check costs one streamed pass over each file, in
//! parallel, before the reader's own passes.

use std::path::{Path, PathBuf};

use rayon::prelude::*;

use crate::layout::card::{JobFacts, ManifestScorer, Provenance, Step};
use crate::layout::{
    ListedFile, ManifestHead, ManifestKind, CLAIM_FILE, MANIFEST_FILE, SUCCESS_FILE,
};
use crate::schema::DataError;

/// A verified dataset: its root (where its manifest is) and its files in
/// manifest order.
#[derive(Debug, Clone)]
pub struct Dataset {
    pub root: PathBuf,
    /// What wrote it (`None` for a lone Parquet file outside any dataset).
    pub kind: Option<ManifestKind>,
    pub files: Vec<DatasetFile>,
}

/// One verified file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatasetFile {
    pub path: PathBuf,
    pub rows: u64,
}

impl Dataset {
    pub fn rows(&self) -> u64 {
        self.files.iter().map(|f| f.rows).sum()
    }

    pub fn paths(&self) -> Vec<PathBuf> {
        self.files.iter().map(|f| f.path.clone()).collect()
    }
}

/// The verified files of `root` (see [`open`]), as paths.
pub fn dataset_files(root: &Path) -> Result<Vec<PathBuf>, DataError> {
    Ok(open(root)?.paths())
}

/// How far above a file or partition its dataset's manifest may be:
/// `deciles/SCORE/fold=N/part.parquet` is three levels below the bins root.
const MAX_DEPTH: usize = 3;

/// Opens `root` for reading: a dataset directory (its manifest lists its
/// files), one partition of a bins output (e.g. `bins/train`), or one
/// Parquet file. Every file that a manifest lists is checked (present,
/// SHA-256, rows in its footer) before it is returned; a lone Parquet file
/// outside any dataset is read as it is.
pub fn open(root: &Path) -> Result<Dataset, DataError> {
    if root.is_file() {
        return open_file(root);
    }
    if !root.is_dir() {
        return Err(DataError::Invalid {
            path: root.to_path_buf(),
            reason: "no such file or directory".into(),
        });
    }
    if root.join(MANIFEST_FILE).is_file() || root.join(CLAIM_FILE).is_file() {
        let (head, _) = read_finished(root)?;
        // A bins output is several datasets; read as one, every pair would
        // come back once per partition that holds it.
        if head.is_bins() {
            return Err(DataError::Invalid {
                path: root.to_path_buf(),
                reason: format!(
                    "a bins output holds several datasets (ranges, folds, the training sample): \
                     read one of them, e.g. {}",
                    root.join("train").display()
                ),
            });
        }
        let files = verify(root, &head.files)?;
        if files.is_empty() {
            return Err(DataError::Invalid {
                path: root.join(MANIFEST_FILE),
                reason: "lists no files".into(),
            });
        }
        return Ok(Dataset {
            root: root.to_path_buf(),
            kind: head.kind,
            files,
        });
    }
    // One partition of a bins output: the bins' manifest, above, lists it.
    if let Some((bins_root, rel)) = enclosing_manifest(root) {
        let (head, _) = read_finished(&bins_root)?;
        if head.is_bins() {
            let prefix = format!("{rel}/");
            let listed: Vec<ListedFile> = head
                .files
                .iter()
                .filter(|f| f.path.starts_with(&prefix))
                .cloned()
                .collect();
            if listed.is_empty() {
                return Err(DataError::Invalid {
                    path: root.to_path_buf(),
                    reason: format!(
                        "{} lists no file under {rel}/",
                        bins_root.join(MANIFEST_FILE).display()
                    ),
                });
            }
            return Ok(Dataset {
                root: bins_root.clone(),
                kind: head.kind,
                files: verify(&bins_root, &listed)?,
            });
        }
    }
    Err(DataError::Invalid {
        path: root.to_path_buf(),
        reason: format!(
            "no {MANIFEST_FILE} here: not a finished paraforge dataset (every command writes its \
             manifest and {SUCCESS_FILE} last, so a run that was killed or is still going leaves \
             none). Run the command that writes it again, or name one Parquet file to read that \
             file alone"
        ),
    })
}

/// A file: verified against the dataset around it, if it is in one.
fn open_file(path: &Path) -> Result<Dataset, DataError> {
    if let Some((root, rel)) = enclosing_manifest(path) {
        let (head, _) = read_finished(&root)?;
        let Some(entry) = head.files.iter().find(|f| f.path == rel) else {
            return Err(DataError::Invalid {
                path: path.to_path_buf(),
                reason: format!(
                    "not one of the files {} lists (a file of an attempt that was not committed, \
                     or one put there by hand)",
                    root.join(MANIFEST_FILE).display()
                ),
            });
        };
        return Ok(Dataset {
            files: verify(&root, std::slice::from_ref(entry))?,
            root,
            kind: head.kind,
        });
    }
    let rows = crate::schema::PairReader::open(path, &[])?
        .num_rows()
        .max(0) as u64;
    Ok(Dataset {
        root: path.parent().unwrap_or(Path::new("")).to_path_buf(),
        kind: None,
        files: vec![DatasetFile {
            path: path.to_path_buf(),
            rows,
        }],
    })
}

/// The directory whose manifest covers `path`: a dataset directory itself,
/// else the nearest one above a partition or file (what [`open`] reads
/// through), else `None`.
pub fn manifest_root(path: &Path) -> Option<PathBuf> {
    if path.is_dir() && (path.join(MANIFEST_FILE).is_file() || path.join(CLAIM_FILE).is_file()) {
        return Some(path.to_path_buf());
    }
    enclosing_manifest(path).map(|(root, _)| root)
}

/// How many manifests [`trace`] follows before it gives up on a cycle.
const MAX_HOPS: usize = 8;

/// Follows the manifests from `path` (a dataset, one bins partition, or
/// one file inside a dataset) through the `input` each filter, rescore or
/// bins manifest names, to the job's. Inputs that are not local
/// directories with a manifest (an object store, a moved directory) end
/// the trace; what it found so far is returned.
pub fn trace(path: &Path) -> Provenance {
    let mut p = Provenance::default();
    let Some(mut dir) = manifest_root(path) else {
        return p;
    };
    for _ in 0..MAX_HOPS {
        let Ok(bytes) = std::fs::read(dir.join(MANIFEST_FILE)) else {
            break;
        };
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
            break;
        };
        // Manifests from before `kind`: a job's names its job, old bins'
        // their ranges.
        let kind = match serde_json::from_value::<ManifestKind>(v["kind"].clone()) {
            Ok(k) => Some(k),
            Err(_) if v.get("job").is_some() => Some(ManifestKind::Job),
            Err(_) if v.get("ranges").is_some() => Some(ManifestKind::Bins),
            Err(_) => None,
        };
        let here = dir.display().to_string();
        match kind {
            Some(ManifestKind::Job) => {
                p.job = JobFacts::parse(&bytes).ok();
                p.job_dir = Some(here);
                break;
            }
            Some(ManifestKind::Filter) => p.steps.push(Step::Filter { dir: here }),
            Some(ManifestKind::Rescore) => {
                let s = |k: &str| v[k].as_str().unwrap_or_default().to_string();
                p.steps.push(Step::Rescore {
                    dir: here,
                    scorer: ManifestScorer {
                        file: s("scorer"),
                        kind: s("scorer_kind"),
                        sha256: s("scorer_sha256"),
                        files: v["files"].as_array().map_or(0, |f| f.len() as u64),
                    },
                });
            }
            Some(ManifestKind::Bins) => p.steps.push(Step::Bins { dir: here }),
            Some(ManifestKind::Lexicon) => p.steps.push(Step::Lexicon { dir: here }),
            None => break,
        }
        match v["input"].as_str().map(PathBuf::from) {
            Some(next) if next.join(MANIFEST_FILE).is_file() => dir = next,
            _ => break,
        }
    }
    p
}

/// The nearest directory above `path` (at most [`MAX_DEPTH`] levels) that
/// holds a manifest, and `path` relative to it with `/` separators.
fn enclosing_manifest(path: &Path) -> Option<(PathBuf, String)> {
    let mut rel: Vec<String> = vec![path.file_name()?.to_string_lossy().into_owned()];
    let mut dir = path.parent()?;
    for _ in 0..MAX_DEPTH {
        if dir.as_os_str().is_empty() {
            dir = Path::new(".");
        }
        if dir.join(MANIFEST_FILE).is_file() || dir.join(CLAIM_FILE).is_file() {
            rel.reverse();
            return Some((dir.to_path_buf(), rel.join("/")));
        }
        rel.push(dir.file_name()?.to_string_lossy().into_owned());
        dir = dir.parent()?;
    }
    None
}

/// The manifest of a dataset whose writer finished: `_SUCCESS` beside it.
fn read_finished(root: &Path) -> Result<(ManifestHead, PathBuf), DataError> {
    let manifest = root.join(MANIFEST_FILE);
    if !root.join(SUCCESS_FILE).is_file() {
        let reason = if root.join(CLAIM_FILE).is_file() {
            format!("a paraforge job output without {SUCCESS_FILE}: the job is incomplete (run it again to finish it)")
        } else {
            format!(
                "{MANIFEST_FILE} without {SUCCESS_FILE}: the command that wrote this dataset did \
                 not finish (or an older paraforge wrote it): run it again"
            )
        };
        return Err(DataError::Invalid {
            path: root.to_path_buf(),
            reason,
        });
    }
    let bytes = std::fs::read(&manifest).map_err(|e| DataError::io(&manifest, e))?;
    let head = ManifestHead::parse(&bytes).map_err(|reason| DataError::Invalid {
        path: manifest.clone(),
        reason,
    })?;
    check_listing(&head).map_err(|reason| DataError::Invalid {
        path: manifest.clone(),
        reason,
    })?;
    Ok((head, manifest))
}

/// A manifest whose list cannot be the dataset it describes: a file listed
/// twice (its rows would be read twice, and a filter would certify the
/// duplicates as a new dataset), or rows that do not sum to its own total.
fn check_listing(head: &ManifestHead) -> Result<(), String> {
    if let Some(path) = head.repeated_file() {
        return Err(format!(
            "lists {path} more than once: the dataset is damaged (write it again)"
        ));
    }
    if let Some((field, total)) = head.total_rows() {
        let listed: u64 = head.files.iter().map(|f| f.rows).sum();
        if listed != total {
            return Err(format!(
                "its files hold {listed} rows, but its {field} says {total}: the dataset is damaged (write it again)"
            ));
        }
    }
    Ok(())
}

/// Checks each listed file (in parallel): present, its SHA-256 and the
/// rows in its footer as listed.
fn verify(root: &Path, listed: &[ListedFile]) -> Result<Vec<DatasetFile>, DataError> {
    listed
        .par_iter()
        .map(|f| verify_file(root, f))
        .collect::<Result<Vec<_>, _>>()
}

fn verify_file(root: &Path, f: &ListedFile) -> Result<DatasetFile, DataError> {
    let path = root.join(&f.path);
    let bad = |reason: String| DataError::Invalid {
        path: path.clone(),
        reason,
    };
    // A path that climbs out of the dataset is not one of its files.
    if f.path.split('/').any(|c| c == ".." || c.is_empty()) || Path::new(&f.path).is_absolute() {
        return Err(bad(format!(
            "{MANIFEST_FILE} lists a path outside the dataset"
        )));
    }
    let Some(want) = f.sha256.as_deref().filter(|s| !s.is_empty()) else {
        return Err(bad(format!(
            "{MANIFEST_FILE} lists no SHA-256 for it, so it cannot be verified (an older \
             paraforge wrote it): write the dataset again"
        )));
    };
    let meta = std::fs::metadata(&path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            bad(format!(
                "listed in {MANIFEST_FILE} but missing: the dataset is incomplete"
            ))
        } else {
            DataError::io(&path, e)
        }
    })?;
    if let Some(bytes) = f.bytes {
        if meta.len() != bytes {
            return Err(bad(format!(
                "{} bytes, but {MANIFEST_FILE} lists {bytes}: the file was changed or damaged \
                 after the dataset was written",
                meta.len()
            )));
        }
    }
    let got = crate::layout::sha256_file(&path).map_err(|e| DataError::io(&path, e))?;
    if got != want {
        return Err(bad(format!(
            "SHA-256 {got} does not match {want} in {MANIFEST_FILE}: the file was changed or \
             damaged after the dataset was written"
        )));
    }
    let rows = crate::schema::PairReader::open(&path, &[])?.num_rows();
    if rows < 0 || rows as u64 != f.rows {
        return Err(bad(format!(
            "{rows} rows, but {MANIFEST_FILE} lists {}",
            f.rows
        )));
    }
    Ok(DatasetFile { path, rows: f.rows })
}

/// For tests of the crates that read datasets, and for benchmark fixtures
/// (`dataset/examples/make_rows.rs`): turns a directory of
/// Parquet files written by hand into a finished dataset (a manifest of
/// `kind` listing every `*.parquet` below it, with rows and digests, and
/// `_SUCCESS`), as a command would have left it.
#[doc(hidden)]
pub mod testing {
    use super::*;

    pub fn seal(dir: &Path, kind: ManifestKind) {
        let mut files = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).expect("listing a test dataset") {
                let p = e.expect("listing a test dataset").path();
                let name = p
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned();
                if name.starts_with('_') || name.starts_with('.') {
                    continue;
                }
                if p.is_dir() {
                    stack.push(p);
                } else if name.ends_with(".parquet") {
                    files.push(p);
                }
            }
        }
        files.sort();
        let listed: Vec<serde_json::Value> = files
            .iter()
            .map(|p| {
                let rel = p.strip_prefix(dir).expect("below the dataset");
                serde_json::json!({
                    "path": rel.to_string_lossy().replace('\\', "/"),
                    "rows": crate::schema::PairReader::open(p, &[]).expect("a Parquet file").num_rows(),
                    "sha256": crate::layout::sha256_file(p).expect("readable"),
                })
            })
            .collect();
        let m = serde_json::json!({"kind": kind, "files": listed});
        std::fs::write(dir.join(MANIFEST_FILE), m.to_string()).expect("writing a manifest");
        std::fs::write(dir.join(SUCCESS_FILE), "").expect("writing _SUCCESS");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::sha256_file;
    use crate::schema::{PairFileWriter, RowsBuilder};

    fn write_part(path: &Path, n: usize, tag: &str) {
        let mut b = RowsBuilder::default();
        for i in 0..n {
            b.push(&crate::schema::PairRow {
                id: format!("{tag}{i}"),
                source: "s".into(),
                reference: "a b".into(),
                translation: "a c".into(),
                candidate_rank: 1,
                translation_score: Some(-0.5),
                source_len: Some(1),
                truncated: false,
                scores: crate::score::PairScores {
                    para_score: Some(0.5),
                    unigram_overlap: 0.5,
                    bigram_overlap: 0.0,
                    trigram_overlap: 0.0,
                    sentence_bleu: 1.0,
                    translation_perplexity: None,
                    reference_probability: None,
                    reference_len: 2,
                    translation_len: 2,
                    reference_oov: 0,
                    translation_oov: 0,
                },
            });
        }
        let mut w = PairFileWriter::create(path, crate::schema::schema(), &[]).unwrap();
        w.write(&b.finish()).unwrap();
        w.close().unwrap();
    }

    /// A dataset of two files with a manifest and `_SUCCESS`.
    fn dataset(dir: &Path) -> Vec<PathBuf> {
        let rels = [
            "shard=000000/part-t1.parquet",
            "shard=000001/part-t2.parquet",
        ];
        let mut files = Vec::new();
        let mut listed = Vec::new();
        for (i, rel) in rels.iter().enumerate() {
            let p = dir.join(rel);
            write_part(&p, 3, &format!("f{i}-"));
            listed.push(
                serde_json::json!({"path": rel, "rows": 3, "sha256": sha256_file(&p).unwrap()}),
            );
            files.push(p);
        }
        let m = serde_json::json!({"kind": "filter", "files": listed});
        std::fs::write(dir.join(MANIFEST_FILE), m.to_string()).unwrap();
        std::fs::write(dir.join(SUCCESS_FILE), "").unwrap();
        files
    }

    fn err(root: &Path) -> String {
        open(root).unwrap_err().to_string()
    }

    #[test]
    fn a_finished_dataset_reads_as_its_manifest_lists_it() {
        let d = tempfile::tempdir().unwrap();
        let files = dataset(d.path());
        let ds = open(d.path()).unwrap();
        assert_eq!(ds.paths(), files);
        assert_eq!(ds.rows(), 6);
        // One file of it, verified against the same manifest.
        assert_eq!(open(&files[1]).unwrap().rows(), 3);
    }

    #[test]
    fn a_file_copied_over_another_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let files = dataset(d.path());
        // Same row count, other pairs: only the digest can tell.
        std::fs::copy(&files[1], &files[0]).unwrap();
        let e = err(d.path());
        assert!(
            e.contains("part-t1.parquet") && e.contains("SHA-256"),
            "{e}"
        );
        // Fewer rows: refused as well.
        write_part(&files[0], 2, "f0-");
        let e = err(d.path());
        assert!(e.contains("part-t1.parquet"), "{e}");
    }

    #[test]
    fn a_same_size_byte_flip_is_refused_by_its_digest() {
        let d = tempfile::tempdir().unwrap();
        let files = dataset(d.path());
        let mut bytes = std::fs::read(&files[1]).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0x40;
        std::fs::write(&files[1], &bytes).unwrap();
        let e = err(d.path());
        assert!(
            e.contains("part-t2.parquet") && e.contains("SHA-256"),
            "{e}"
        );
        assert!(open(&files[1]).is_err(), "the file alone is checked too");
    }

    #[test]
    fn a_missing_file_stray_file_or_unfinished_dataset_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let files = dataset(d.path());
        // A stray Parquet file beside the listed ones is never read.
        let stray = d.path().join("shard=000002/part-t9.parquet");
        write_part(&stray, 5, "x");
        assert_eq!(open(d.path()).unwrap().rows(), 6);
        let e = open(&stray).unwrap_err().to_string();
        assert!(e.contains("not one of the files"), "{e}");
        std::fs::remove_file(&files[0]).unwrap();
        let e = err(d.path());
        assert!(e.contains("missing"), "{e}");
        // Without _SUCCESS the writer did not finish.
        let d = tempfile::tempdir().unwrap();
        dataset(d.path());
        std::fs::remove_file(d.path().join(SUCCESS_FILE)).unwrap();
        let e = err(d.path());
        assert!(e.contains("did not finish"), "{e}");
        // A killed writer's files without any manifest.
        std::fs::remove_file(d.path().join(MANIFEST_FILE)).unwrap();
        let e = err(d.path());
        assert!(e.contains("no _manifest.json"), "{e}");
    }

    #[test]
    fn a_manifest_without_digests_or_with_escaping_paths_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let files = dataset(d.path());
        let rel = files[0]
            .strip_prefix(d.path())
            .unwrap()
            .display()
            .to_string();
        let m = serde_json::json!({"kind": "filter", "files": [{"path": rel, "rows": 3}]});
        std::fs::write(d.path().join(MANIFEST_FILE), m.to_string()).unwrap();
        assert!(err(d.path()).contains("no SHA-256"));
        let m = serde_json::json!({"kind": "filter", "files": [{"path": "../x.parquet", "rows": 3, "sha256": "ab"}]});
        std::fs::write(d.path().join(MANIFEST_FILE), m.to_string()).unwrap();
        assert!(err(d.path()).contains("outside the dataset"));
    }

    /// A manifest listing a file twice read 2,300 rows for 2,000 pairs, and
    /// `filter` certified them as a new dataset.
    #[test]
    fn a_file_listed_twice_or_rows_off_the_total_are_refused() {
        let d = tempfile::tempdir().unwrap();
        dataset(d.path());
        let mut m: serde_json::Value =
            serde_json::from_slice(&std::fs::read(d.path().join(MANIFEST_FILE)).unwrap()).unwrap();
        let first = m["files"][0].clone();
        m["files"].as_array_mut().unwrap().push(first);
        std::fs::write(d.path().join(MANIFEST_FILE), m.to_string()).unwrap();
        let e = err(d.path());
        assert!(e.contains("more than once") && e.contains("part-t1"), "{e}");
        m["files"].as_array_mut().unwrap().pop();
        m["kept_rows"] = 7.into();
        std::fs::write(d.path().join(MANIFEST_FILE), m.to_string()).unwrap();
        let e = err(d.path());
        assert!(
            e.contains("hold 6 rows") && e.contains("kept_rows says 7"),
            "{e}"
        );
        m["kept_rows"] = 6.into();
        std::fs::write(d.path().join(MANIFEST_FILE), m.to_string()).unwrap();
        assert_eq!(open(d.path()).unwrap().rows(), 6);
    }

    #[test]
    fn a_bins_partition_reads_through_the_bins_manifest() {
        let d = tempfile::tempdir().unwrap();
        let train = d.path().join("train/part-00000.parquet");
        let fold = d
            .path()
            .join("deciles/para_score/fold=9/part-00000.parquet");
        write_part(&train, 2, "t");
        write_part(&fold, 4, "f");
        let m = serde_json::json!({"kind": "bins", "files": [
            {"path": "train/part-00000.parquet", "rows": 2, "sha256": sha256_file(&train).unwrap()},
            {"path": "deciles/para_score/fold=9/part-00000.parquet", "rows": 4, "sha256": sha256_file(&fold).unwrap()},
        ]});
        std::fs::write(d.path().join(MANIFEST_FILE), m.to_string()).unwrap();
        std::fs::write(d.path().join(SUCCESS_FILE), "").unwrap();
        assert_eq!(open(&d.path().join("train")).unwrap().rows(), 2);
        assert_eq!(
            open(&d.path().join("deciles/para_score/fold=9"))
                .unwrap()
                .rows(),
            4
        );
        assert!(err(d.path()).contains("several datasets"));
        write_part(&train, 3, "t");
        assert!(open(&d.path().join("train")).is_err());
    }
}
