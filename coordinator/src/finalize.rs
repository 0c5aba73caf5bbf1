//! Ending a finished job: deleting the files of attempts that were not
//! committed, checking every committed file, and writing `_manifest.json`,
//! its card (`_README.md`) and, last, `_SUCCESS`; or saying why the job is
//! incomplete.

use paraforge_core::layout::card::{JobFacts, Languages, ManifestInput, ManifestScorer};
use paraforge_core::layout::{FileKind, OutputLayout, JOB_CARD_FILE, MANIFEST_FILE, SUCCESS_FILE};
use paraforge_job::bitext::RejectReason;
use paraforge_job::storage::Storage;
use serde::Serialize;

use crate::error::{Incomplete, RunError};
use crate::resume::{committed_files, damaged};
use crate::shared::Shared;
use crate::state::Status;

/// What the manifest records for each committed file.
#[derive(Debug, Clone, Serialize)]
pub struct ManifestFile {
    pub path: String,
    pub shard: u64,
    pub rows: u64,
    pub bytes: u64,
    pub sha256: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Manifest {
    /// Always `job`: what wrote this manifest (core::layout::ManifestHead).
    pub kind: paraforge_core::layout::ManifestKind,
    pub job: String,
    pub paraforge_version: String,
    pub shards_total: u64,
    pub shards_committed: u64,
    /// Rows in the pairs files: `beam_candidates` per kept input pair.
    pub pairs: u64,
    /// `model.beam_candidates`.
    pub beam_candidates: u64,
    /// The model that translated the corpus; null when none did (the
    /// input held its translations, `input.format = "pairs"`).
    pub model: Option<ManifestModel>,
    /// `[input]`'s format and files.
    pub input: ManifestInput,
    /// `[filters]` as set (every rule left out is off).
    pub filters: serde_json::Value,
    /// The para_score model(s) the pairs files' footers name, with how
    /// many files name each: one, unless nodes loaded different files.
    pub para_scorers: Vec<ManifestScorer>,
    /// Pairs files whose footer could not be read for its scorer: they
    /// may name another model, or none.
    #[serde(skip_serializing_if = "is_zero")]
    pub para_scorer_footers_unread: u64,
    /// The languages of the two sides, where the config or the model says.
    #[serde(skip_serializing_if = "Languages::is_empty")]
    pub languages: Languages,
    pub rejects: u64,
    /// Rejects by reason code: malformed lines and `[filters]` rules
    /// (`RejectReason::is_filter_code`); they sum to `rejects`.
    pub rejects_by_reason: std::collections::BTreeMap<String, u64>,
    pub files: Vec<ManifestFile>,
    pub rejects_files: Vec<ManifestFile>,
    pub removed_uncommitted: Vec<String>,
    pub config: String,
}

pub use paraforge_core::layout::ManifestModel;

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The para_score models that the footers of `files` name
/// (`paraforge.para_scorer*`), each with the files that name it, most
/// first, and how many footers could not be read (a file that names no
/// model is neither); read from each footer alone (two ranged reads a
/// file).
async fn footer_scorers(
    storage: &Storage,
    files: &[ManifestFile],
) -> Result<(Vec<ManifestScorer>, u64), RunError> {
    use futures::StreamExt;
    let reads = files.iter().map(|f| async move {
        if f.bytes < 12 {
            return Ok::<_, RunError>(Err(()));
        }
        let tail = storage.get_range(&f.path, f.bytes - 8, f.bytes).await?;
        let len = u64::from(u32::from_le_bytes(
            tail[..4].try_into().expect("8 bytes were read"),
        ));
        if len + 8 > f.bytes {
            return Ok(Err(()));
        }
        let footer = storage
            .get_range(&f.path, f.bytes - 8 - len, f.bytes)
            .await?;
        Ok(crate::verify::footer_scorer(&footer).map_err(|e| {
            tracing::warn!(path = %f.path, error = %e, "its footer does not parse; the card counts it as not known");
        }))
    });
    let mut found: std::collections::BTreeMap<(String, String, String), u64> = Default::default();
    let mut unread = 0;
    let mut results = futures::stream::iter(reads).buffer_unordered(8);
    while let Some(r) = results.next().await {
        match r? {
            Ok(Some(k)) => *found.entry(k).or_default() += 1,
            Ok(None) => {}
            Err(()) => unread += 1,
        }
    }
    let mut v: Vec<ManifestScorer> = found
        .into_iter()
        .map(|((file, kind, sha256), files)| ManifestScorer {
            file,
            kind,
            sha256,
            files,
        })
        .collect();
    v.sort_by_key(|s| std::cmp::Reverse(s.files));
    Ok((v, unread))
}

/// Ends a finished job. Deletes the files of attempts that were not
/// committed (only files this job wrote: paths that name a token it
/// issued), checks that every committed file is still there, and writes
/// `_manifest.json` and then `_SUCCESS` only when nothing is missing: every
/// shard committed, some pairs written, rejects within
/// `job.max_reject_rate`. Otherwise it returns [`Incomplete`], writes no
/// success marker, and puts shards whose files vanished back in the queue
/// so that running the job again redoes them. Safe to run again.
pub async fn finalize(shared: &Shared, storage: &Storage) -> Result<Manifest, RunError> {
    let committed = {
        let st = shared.state.lock().unwrap_or_else(|p| p.into_inner());
        committed_files(&st)
    };
    let lost = damaged(storage, committed).await?;
    let listing: Vec<String> = storage
        .list("")
        .await?
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    let ledger = Ledger::read(shared, &listing);
    let removed = remove_uncommitted(shared, storage, &ledger).await?;
    let problems = problems(shared, &ledger, &lost)?;
    let counts = &ledger.counts;
    if !problems.is_empty() || counts.committed < counts.total {
        let mut problems = problems;
        if problems.is_empty() {
            problems.push(format!(
                "{} of {} shards are not committed",
                counts.total - counts.committed,
                counts.total
            ));
        }
        return Err(RunError::Incomplete(Incomplete {
            job: ledger.job,
            shards_total: counts.total,
            shards_committed: counts.committed,
            problems,
        }));
    }
    let manifest = manifest(shared, storage, ledger, removed).await?;
    let json = serde_json::to_vec_pretty(&manifest).unwrap_or_default();
    // The card from the manifest's own bytes: it says what they record.
    let card = JobFacts::parse(&json)
        .map(|f| paraforge_core::layout::card::job_card(&f))
        .unwrap_or_default();
    storage.put(MANIFEST_FILE, json.into()).await?;
    storage.put(JOB_CARD_FILE, card.into()).await?;
    storage
        .put_if_absent(SUCCESS_FILE, bytes::Bytes::new())
        .await?;
    Ok(manifest)
}

/// What the state says the job made, read under one lock: the committed
/// files, the failed shards, the counts, and which files of the output's
/// listing carry a token the job issued.
struct Ledger {
    files: Vec<ManifestFile>,
    rejects_files: Vec<ManifestFile>,
    failed: Vec<(u64, String)>,
    counts: crate::state::Counts,
    job: String,
    /// Each listed path, and whether this job wrote it.
    issued: Vec<(String, bool)>,
    model_sha256: Option<String>,
}

impl Ledger {
    fn read(shared: &Shared, listing: &[String]) -> Ledger {
        let st = shared.state.lock().unwrap_or_else(|p| p.into_inner());
        let (mut files, mut rejects_files, mut failed) = (Vec::new(), Vec::new(), Vec::new());
        for s in st.shards() {
            match &s.status {
                Status::Committed { files: fs, .. } => {
                    for f in fs {
                        let m = ManifestFile {
                            path: f.path.clone(),
                            shard: s.spec.shard_id,
                            rows: f.rows,
                            bytes: f.bytes,
                            sha256: f.sha256.clone(),
                        };
                        if f.kind == FileKind::Rejects {
                            rejects_files.push(m);
                        } else {
                            files.push(m);
                        }
                    }
                }
                Status::Failed { reason } => failed.push((s.spec.shard_id, reason.clone())),
                _ => {}
            }
        }
        let issued = listing
            .iter()
            .map(|p| {
                let ours = OutputLayout::parse_attempt_path(p)
                    .is_some_and(|(shard, token)| st.issued(shard, token));
                (p.clone(), ours)
            })
            .collect();
        Ledger {
            files,
            rejects_files,
            failed,
            counts: st.counts(),
            job: st.job_id().to_string(),
            issued,
            model_sha256: st.model_sha256().map(str::to_string),
        }
    }
}

/// Deletes the files of attempts that were not committed, only those
/// whose (shard, token) the job issued; returns their paths, sorted.
async fn remove_uncommitted(
    shared: &Shared,
    storage: &Storage,
    ledger: &Ledger,
) -> Result<Vec<String>, RunError> {
    let keep: std::collections::HashSet<&str> = ledger
        .files
        .iter()
        .chain(&ledger.rejects_files)
        .map(|f| f.path.as_str())
        .collect();
    let mut removed = Vec::new();
    for (path, ours) in &ledger.issued {
        if *ours && !keep.contains(path.as_str()) {
            storage.delete(path).await?;
            removed.push(path.clone());
        } else if !ours && path.starts_with("shard=") {
            tracing::warn!(%path, "a file this job did not write sits in its output; left alone");
        }
    }
    // A worker killed mid-write leaves a local store's staging file,
    // which the listing above does not show.
    for (path, name) in storage.local_write_leftovers("") {
        let ours = OutputLayout::parse_attempt_path(&name).is_some_and(|(shard, token)| {
            let st = shared.state.lock().unwrap_or_else(|p| p.into_inner());
            st.issued(shard, token)
        });
        if ours {
            storage.remove_local_leftover(&path)?;
            removed.push(path);
        }
    }
    removed.sort();
    storage.remove_empty_dirs("_tmp").await;
    storage.remove_empty_dirs("_rejects").await;
    Ok(removed)
}

/// Why the output is not complete, if it is not: failed shards, committed
/// files gone from the output (their shards queued again), no pairs, too
/// many malformed lines, `[filters]` dropping too much.
fn problems(
    shared: &Shared,
    ledger: &Ledger,
    lost: &[(u64, String, String)],
) -> Result<Vec<String>, RunError> {
    let mut problems: Vec<String> = ledger
        .failed
        .iter()
        .map(|(id, why)| format!("shard {id} failed: {why}"))
        .collect();
    if !lost.is_empty() {
        let mut st = shared.state.lock().unwrap_or_else(|p| p.into_inner());
        let mut shards: Vec<u64> = lost.iter().map(|(id, _, _)| *id).collect();
        shards.dedup();
        for id in shards {
            st.requeue(
                id,
                "its committed files went missing or changed in the output",
            )?;
        }
        problems.extend(lost.iter().map(|(id, p, why)| {
            format!("shard {id}'s committed file {p} is missing or changed in the output ({why}); it is written again when the job runs again")
        }));
    }
    let counts = &ledger.counts;
    if counts.committed != counts.total || !problems.is_empty() {
        return Ok(problems);
    }
    let k = shared.beam_candidates.max(1);
    let lines = counts.pairs / k + counts.rejects;
    // Rules that drop most of a corpus are more likely wrong (swapped
    // languages) than right, whether or not some pairs are left.
    let dropped = paraforge_job::filters::counted_drops(&counts.rejects_by_reason);
    let drops = paraforge_job::filters::check_drop_rate(dropped, lines, &shared.filters);
    if counts.pairs == 0 {
        problems.push(format!(
            "no pairs were written ({} lines read, {} rejected)",
            lines, counts.rejects
        ));
    } else {
        // Pairs `[filters]` dropped were dropped on purpose; the limit is
        // for lines the job could not read.
        let filtered: u64 = counts
            .rejects_by_reason
            .iter()
            .filter(|(code, _)| RejectReason::is_filter_code(code))
            .map(|(_, n)| n)
            .sum();
        let malformed = counts.rejects - filtered.min(counts.rejects);
        let rate = malformed as f64 / lines.max(1) as f64;
        let limit = shared.max_reject_rate;
        if rate > limit {
            problems.push(format!(
                "{:.1}% of the input lines were rejected as malformed ({} of {}), more than job.max_reject_rate = {limit} allows: check input.format, the columns and the encoding (see _rejects/)",
                100.0 * rate,
                malformed,
                lines
            ));
        }
    }
    problems.extend(drops.err());
    Ok(problems)
}

/// The manifest of a complete output.
async fn manifest(
    shared: &Shared,
    storage: &Storage,
    ledger: Ledger,
    removed: Vec<String>,
) -> Result<Manifest, RunError> {
    let (para_scorers, para_scorer_footers_unread) = footer_scorers(storage, &ledger.files).await?;
    let counts = ledger.counts;
    Ok(Manifest {
        kind: paraforge_core::layout::ManifestKind::Job,
        job: ledger.job,
        paraforge_version: env!("CARGO_PKG_VERSION").into(),
        shards_total: counts.total,
        shards_committed: counts.committed,
        pairs: counts.pairs,
        beam_candidates: shared.beam_candidates.max(1),
        model: shared.model_dir.clone().map(|dir| ManifestModel {
            dir,
            sha256: ledger.model_sha256.unwrap_or_default(),
        }),
        input: shared.input.clone(),
        filters: serde_json::to_value(&shared.filters).unwrap_or_else(|_| serde_json::json!({})),
        para_scorers,
        para_scorer_footers_unread,
        languages: crate::languages::of_job(&shared.filters, shared.model_dir.as_deref()),
        rejects: counts.rejects,
        rejects_by_reason: counts.rejects_by_reason,
        files: ledger.files,
        rejects_files: ledger.rejects_files,
        removed_uncommitted: removed,
        config: shared.config_toml.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The card is made from the manifest's JSON: everything it shows
    /// comes back from what the manifest writes, and the scorer from a
    /// footer read alone.
    #[test]
    fn the_card_reads_what_the_manifest_records() {
        use paraforge_core::schema::{meta, schema, PairFileWriter};
        let dir = tempfile::tempdir().unwrap();
        let part = dir.path().join("part.parquet");
        let stamp = [
            (meta::PARA_SCORER, "scorer/model.pfe".to_string()),
            (meta::PARA_SCORER_KIND, "TRIGRAM".to_string()),
            (meta::PARA_SCORER_SHA256, "bb9c".to_string()),
        ];
        let mut w = PairFileWriter::create(&part, schema(), &stamp).unwrap();
        w.write(&paraforge_core::RowsBuilder::default().finish())
            .unwrap();
        w.close().unwrap();
        let bytes = std::fs::read(&part).unwrap();
        let n = bytes.len();
        let len = u32::from_le_bytes(bytes[n - 8..n - 4].try_into().unwrap()) as usize;
        let footer = bytes::Bytes::copy_from_slice(&bytes[n - 8 - len..]);
        let found = crate::verify::footer_scorer(&footer).unwrap().unwrap();
        assert_eq!(
            found,
            ("scorer/model.pfe".into(), "TRIGRAM".into(), "bb9c".into())
        );
        // A footer that does not parse is not one that names no model.
        assert!(crate::verify::footer_scorer(&footer.slice(1..)).is_err());

        let filters = paraforge_job::filters::Filters {
            min_tokens: Some(2),
            source_lang: Some("ces".into()),
            ..Default::default()
        };
        let m = Manifest {
            kind: paraforge_core::layout::ManifestKind::Job,
            job: "j".into(),
            paraforge_version: "0.1.0".into(),
            shards_total: 2,
            shards_committed: 2,
            pairs: 8,
            beam_candidates: 2,
            model: Some(ManifestModel {
                dir: "m".into(),
                sha256: "ab".into(),
            }),
            input: ManifestInput {
                format: "czeng16".into(),
                paths: vec!["in.tsv".into()],
                reference_paths: Vec::new(),
            },
            filters: serde_json::to_value(&filters).unwrap(),
            para_scorers: vec![ManifestScorer {
                file: found.0,
                kind: found.1,
                sha256: found.2,
                files: 2,
            }],
            para_scorer_footers_unread: 1,
            languages: Languages {
                source: Some("ces".into()),
                reference: None,
                from: "[filters]".into(),
            },
            rejects: 1,
            rejects_by_reason: [("columns".to_string(), 1)].into(),
            files: (0..4)
                .map(|i| ManifestFile {
                    path: format!("shard={i}/part.parquet"),
                    shard: i,
                    rows: 2,
                    bytes: 9,
                    sha256: String::new(),
                })
                .collect(),
            rejects_files: Vec::new(),
            removed_uncommitted: Vec::new(),
            config: String::new(),
        };
        let f = JobFacts::parse(&serde_json::to_vec(&m).unwrap()).unwrap();
        assert_eq!(
            (f.job.as_str(), f.pairs, f.beam_candidates, f.rejects),
            ("j", 8, 2, 1)
        );
        assert_eq!(f.model, m.model);
        assert_eq!(f.input.as_ref(), Some(&m.input));
        assert_eq!(f.para_scorers.as_ref(), Some(&m.para_scorers));
        assert_eq!(f.languages, m.languages);
        let rules = f.filters.clone().unwrap();
        assert_eq!(rules["min_tokens"], 2);
        assert_eq!(rules.len(), 2, "only the rules set: {rules:?}");
        assert_eq!(f.rejects_by_reason, m.rejects_by_reason);
        // One scorer named by 2 of the 4 files, one footer unread: not
        // "the cosine of" that scorer.
        let card = paraforge_core::layout::card::job_card(&f);
        for want in [
            "fingerprint `bb9c`: 2 of 4 files",
            "no model (the column is null): 1 of 4 files",
            "not known: 1 of 4 files",
        ] {
            assert!(card.contains(want), "{want} not in\n{card}");
        }
        assert!(!card.contains("the cosine of"), "{card}");
    }
}
