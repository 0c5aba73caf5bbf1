//! Where everything paraforge writes lives, and what each file is: the one
//! owner of output paths, partition names, file kinds and the marker,
//! claim, manifest and card files (the cards' text: [`card`]). Writers and
//! readers both ask here.

use serde::{Deserialize, Serialize};

/// The claim a job writes in its output when it starts (job, run, state):
/// another job finding it refuses to write there.
pub const CLAIM_FILE: &str = "_job.json";
/// Written last, when every shard is committed and checked.
pub const SUCCESS_FILE: &str = "_SUCCESS";

/// Every dataset paraforge writes (a job's output, bins, a filter's or a
/// rescore's output) lists its files here, written last: a reader that
/// finds it finds every file it lists.
pub const MANIFEST_FILE: &str = "_manifest.json";

/// Which command wrote a `_manifest.json`; every manifest says, so that a
/// reader knows what the directory holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ManifestKind {
    /// A job's output (`paraforge run`, `coordinator`).
    #[default]
    Job,
    /// `paraforge bin`: several datasets (ranges, folds, the training sample).
    Bins,
    /// `paraforge filter`.
    Filter,
    /// `paraforge rescore`.
    Rescore,
    /// `paraforge lexicon`: word pairs, not sentence pairs.
    Lexicon,
}

/// The SHA-256 of a file as every manifest and footer lists it (lowercase
/// hex), read in 1 MB blocks.
pub fn sha256_file(path: &std::path::Path) -> std::io::Result<String> {
    use sha2::Digest;
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            return Ok(hex::encode(h.finalize()));
        }
        h.update(&buf[..n]);
    }
}

/// A data file a manifest lists: its path relative to the manifest, its
/// rows and, where the writer hashed it, its SHA-256 (bins do not hash
/// their files; entries of old bins manifests carry none).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListedFile {
    pub path: String,
    pub rows: u64,
    /// Its size, where the writer lists it (a cheap first check).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// What every manifest holds and every reader reads, whatever wrote it:
/// each writer's manifest is this plus its own counts. Manifests written
/// before `kind` existed read with `kind` `None` (and bins' old
/// `"path (N rows)"` entries as files).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ManifestHead {
    #[serde(default)]
    pub kind: Option<ManifestKind>,
    #[serde(default, deserialize_with = "listed_files")]
    pub files: Vec<ListedFile>,
    /// A job's rejected lines by reason code (empty for other kinds).
    #[serde(default)]
    pub rejects_by_reason: std::collections::BTreeMap<String, u64>,
    /// Bins manifests, old ones included (no `kind`), list their ranges.
    #[serde(default)]
    ranges: Option<serde::de::IgnoredAny>,
    /// The rows the files hold in all, as each kind counts them: a job's
    /// `pairs`, a filter's `kept_rows`, a rescore's `rows`.
    #[serde(default)]
    pairs: Option<u64>,
    #[serde(default)]
    kept_rows: Option<u64>,
    #[serde(default)]
    rows: Option<u64>,
}

impl ManifestHead {
    /// Parses a manifest's bytes; the error says what is wrong.
    pub fn parse(bytes: &[u8]) -> Result<ManifestHead, String> {
        serde_json::from_slice(bytes).map_err(|e| format!("not a paraforge manifest: {e}"))
    }

    /// Where the manifest says how many rows its files hold in all (the
    /// field's name, and the count): the listed files' rows must sum to it.
    pub fn total_rows(&self) -> Option<(&'static str, u64)> {
        match self.kind {
            Some(ManifestKind::Job) => self.pairs.map(|n| ("pairs", n)),
            Some(ManifestKind::Filter) => self.kept_rows.map(|n| ("kept_rows", n)),
            Some(ManifestKind::Rescore) => self.rows.map(|n| ("rows", n)),
            _ => None,
        }
    }

    /// A file the manifest lists more than once, if any: every reader
    /// would read its rows twice.
    pub fn repeated_file(&self) -> Option<&str> {
        let mut seen = std::collections::HashSet::new();
        self.files
            .iter()
            .find(|f| !seen.insert(f.path.as_str()))
            .map(|f| f.path.as_str())
    }

    /// Whether `paraforge bin` wrote it: several datasets, which no reader
    /// may take as one (each pair would come back once per partition).
    pub fn is_bins(&self) -> bool {
        self.kind == Some(ManifestKind::Bins) || self.ranges.is_some()
    }
}

fn listed_files<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<ListedFile>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Entry {
        File(ListedFile),
        /// Bins manifests before the typed family: `"REL (N rows)"`.
        Legacy(String),
    }
    let entries = Vec::<Entry>::deserialize(d)?;
    Ok(entries
        .into_iter()
        .map(|e| match e {
            Entry::File(f) => f,
            Entry::Legacy(s) => {
                let (path, rest) = s.split_once(" (").unwrap_or((&s, ""));
                let rows = rest
                    .split_whitespace()
                    .next()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                ListedFile {
                    path: path.to_string(),
                    rows,
                    bytes: None,
                    sha256: None,
                }
            }
        })
        .collect())
}

/// The dataset card of a bins or lexicon directory (Hugging Face's
/// `README.md`): its `configs:` name each bin, so that
/// `datasets.load_dataset(dir, NAME)` loads one. Its text is
/// [`card`]'s.
pub const CARD_FILE: &str = "README.md";

/// The dataset card of a job's output: `README.md`'s text under a name
/// that Hive-style readers skip, since pyarrow and Spark read every other
/// file of the directory as data (a `README.md` there fails
/// `pyarrow.dataset.dataset(output)`). Written with the manifest, before
/// `_SUCCESS`.
pub const JOB_CARD_FILE: &str = "_README.md";

pub mod card;
pub use card::{dataset_card, CardMeta, ManifestModel};

/// What a committed file of a job holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileKind {
    /// The scored pairs (Parquet).
    Pairs,
    /// The rejected lines (JSON lines).
    Rejects,
}

impl FileKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FileKind::Pairs => "pairs",
            FileKind::Rejects => "rejects",
        }
    }
}

impl std::fmt::Display for FileKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The paths of a job's output and of its bins, relative to their roots.
pub struct OutputLayout;

impl OutputLayout {
    /// Where a committed shard's rows are published, relative to the output
    /// root. Only the coordinator writes here, when it commits an attempt, so a
    /// late writer (a worker paused past its lease) can never put a file where
    /// readers look; the token in the name keeps attempts apart. The shard
    /// number is not zero-padded: DuckDB reads a Hive value with leading
    /// zeros as a string where pyarrow and polars read an integer, and
    /// `shard=N` is an integer to all three (outputs written with padded
    /// names read and resume as before).
    pub fn part_path(shard_id: u64, token: u64) -> String {
        format!("shard={shard_id}/part-t{token:08}.parquet")
    }

    /// Where a committed shard's rejected lines (JSON lines) are published.
    pub fn rejects_path(shard_id: u64, token: u64) -> String {
        format!("_rejects/shard={shard_id}/rejects-t{token:08}.jsonl")
    }

    /// Where a lease's worker writes before completing: under `_tmp/`, which
    /// Hive-style readers skip and the job's end clears.
    pub fn temp_prefix(shard_id: u64, token: u64) -> String {
        format!("_tmp/shard={shard_id}/lease={token:08}/")
    }

    pub fn temp_part_path(shard_id: u64, token: u64) -> String {
        format!("{}part.parquet", Self::temp_prefix(shard_id, token))
    }

    pub fn temp_rejects_path(shard_id: u64, token: u64) -> String {
        format!("{}rejects.jsonl", Self::temp_prefix(shard_id, token))
    }

    /// The (shard, token) of a path that one of the functions above makes, or
    /// None: the job's clean-up deletes only files it can read back to a token
    /// it issued, never anything else that sits in the output.
    pub fn parse_attempt_path(path: &str) -> Option<(u64, u64)> {
        let num = |s: &str| -> Option<u64> {
            (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .then(|| s.parse().ok())
                .flatten()
        };
        let parts: Vec<&str> = path.split('/').collect();
        let shard = |p: &str| p.strip_prefix("shard=").and_then(num);
        match parts.as_slice() {
            [s, f] => Some((
                shard(s)?,
                num(f.strip_prefix("part-t")?.strip_suffix(".parquet")?)?,
            )),
            ["_rejects", s, f] => Some((
                shard(s)?,
                num(f.strip_prefix("rejects-t")?.strip_suffix(".jsonl")?)?,
            )),
            ["_tmp", s, l, f] if *f == "part.parquet" || *f == "rejects.jsonl" => {
                Some((shard(s)?, num(l.strip_prefix("lease=")?)?))
            }
            _ => None,
        }
    }

    /// Where an attempt's file of `kind` is published when committed.
    pub fn committed(kind: FileKind, shard_id: u64, token: u64) -> String {
        match kind {
            FileKind::Pairs => Self::part_path(shard_id, token),
            FileKind::Rejects => Self::rejects_path(shard_id, token),
        }
    }

    /// Where a lease's worker writes its file of `kind`.
    pub fn temp(kind: FileKind, shard_id: u64, token: u64) -> String {
        match kind {
            FileKind::Pairs => Self::temp_part_path(shard_id, token),
            FileKind::Rejects => Self::temp_rejects_path(shard_id, token),
        }
    }

    /// Whether a path is one a job writes (so an output holding it is a
    /// job's, and another job must not start there).
    pub fn is_job_file(path: &str) -> bool {
        path.starts_with("shard=")
            || path.starts_with("_rejects/")
            || path.starts_with("_tmp/")
            || path == MANIFEST_FILE
            || path == SUCCESS_FILE
            || path == JOB_CARD_FILE
    }

    /// A para_score range's bin (Wieting and Gimpel, 2018, Table 3).
    pub fn bin_range(label: &str) -> String {
        format!("ranges/para_range={label}/part-00000.parquet")
    }

    /// Fold `fold` (0 the lowest tenth) of a score's deciles.
    pub fn bin_fold(score: &str, fold: usize) -> String {
        format!("deciles/{score}/fold={fold}/part-00000.parquet")
    }

    /// The training sample drawn from the top two para_score folds.
    pub fn bin_train() -> String {
        "train/part-00000.parquet".into()
    }

    /// The dataset-card config of a bin's file: its name and its folder's
    /// glob (`range-LABEL`, `decile-SCORE-FOLD`, `train`).
    pub fn bin_config(rel: &str) -> (String, String) {
        let dir = rel.rsplit_once('/').map_or("", |d| d.0);
        let name = if let Some(label) = dir.strip_prefix("ranges/para_range=") {
            format!("range-{label}")
        } else if let Some(rest) = dir.strip_prefix("deciles/") {
            format!("decile-{}", rest.replace("/fold=", "-"))
        } else {
            dir.replace('/', "-")
        };
        (name, format!("{dir}/*.parquet"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every writer's manifest reads back through the one head: its kind,
    /// its files, a job's rejects by reason; old bins entries too.
    #[test]
    fn every_manifest_kind_reads_through_the_head() {
        let job = br#"{"kind":"job","job":"j","files":[{"path":"shard=000000/part-t1.parquet","shard":0,"rows":5,"bytes":9,"sha256":"ab"}],"rejects_files":[],"rejects_by_reason":{"columns":2}}"#;
        let h = ManifestHead::parse(job).unwrap();
        assert_eq!(h.kind, Some(ManifestKind::Job));
        assert_eq!(
            h.files,
            [ListedFile {
                path: "shard=000000/part-t1.parquet".into(),
                rows: 5,
                bytes: Some(9),
                sha256: Some("ab".into())
            }]
        );
        assert_eq!(h.rejects_by_reason["columns"], 2);
        let bins = br#"{"kind":"bins","files":[{"path":"train/part-00000.parquet","rows":3}]}"#;
        assert_eq!(
            ManifestHead::parse(bins).unwrap().kind,
            Some(ManifestKind::Bins)
        );
        assert!(ManifestHead::parse(bins).unwrap().is_bins());
        let old_bins = br#"{"input":"x","ranges":{},"files":["ranges/para_range=0.8-1.0/part-00000.parquet (12 rows)"]}"#;
        let h = ManifestHead::parse(old_bins).unwrap();
        assert_eq!((h.kind, h.files[0].rows), (None, 12));
        assert!(h.is_bins(), "an old bins manifest is still a bins manifest");
        assert_eq!(
            h.files[0].path,
            "ranges/para_range=0.8-1.0/part-00000.parquet"
        );
        let e = ManifestHead::parse(br#"{"files":[{"rows":1}]}"#).unwrap_err();
        assert!(e.contains("not a paraforge manifest"), "{e}");
    }
}
