//! What the coordinator verifies of a worker's claims before it believes
//! them: the model a lease names (one corpus, one model), and a
//! completion's two files, read back from the lease's temporary prefix and
//! checked against the claim (size, SHA-256, the Parquet footer's rows,
//! columns and model digest, the rejects' lines and reason codes, lines
//! read against the plan, pairs and rejects against lines read). A file
//! that does not back its claim is a [`Mismatch`]; a storage failure is an
//! error the worker retries.

use std::collections::BTreeMap;

use paraforge_core::layout::{FileKind, OutputLayout};
use paraforge_job::bitext::RejectReason;
use paraforge_rpc::proto as pb;

use crate::bounded::truncate;
use crate::error::ServiceError;
use crate::shared::Shared;
use crate::state::JobState;

/// Why a completion's files do not back what it claims.
#[derive(Debug, thiserror::Error)]
pub enum Mismatch {
    #[error("the completion names no {kind} file (expected {path})")]
    Missing { kind: FileKind, path: String },
    #[error("the completion names {path} twice")]
    Twice { path: String },
    #[error("{kind} file {path} is not in the output storage: {message}")]
    Absent {
        kind: FileKind,
        path: String,
        message: String,
    },
    #[error("{kind} file {path} has {actual} bytes, the completion claims {claimed}")]
    Bytes {
        kind: FileKind,
        path: String,
        actual: u64,
        claimed: u64,
    },
    #[error("{kind} file {path} has SHA-256 {actual}, the completion claims {claimed:?}")]
    Sha {
        kind: FileKind,
        path: String,
        actual: String,
        claimed: String,
    },
    #[error("pairs file {path} is not a readable Parquet file: {message}")]
    Parquet { path: String, message: String },
    #[error("pairs file {path} has columns {found:?}, a paraforge output file has {expected:?}")]
    Columns {
        path: String,
        found: Vec<String>,
        expected: Vec<String>,
    },
    #[error("pairs file {path} has {actual} rows in its Parquet footer, the completion claims {claimed}")]
    Rows {
        path: String,
        actual: u64,
        claimed: u64,
    },
    #[error("rejects file {path} has {actual} lines, the completion claims {claimed}")]
    Rejects {
        path: String,
        actual: u64,
        claimed: u64,
    },
    #[error("rejects file {path} line {line}: {message}")]
    RejectLine {
        path: String,
        line: u64,
        message: String,
    },
    #[error("pairs file {path} was translated by model {found:?} (its footer's paraforge.model_sha256), the job's model is {job}")]
    Model {
        path: String,
        found: String,
        job: String,
    },
    #[error("pairs file {path} has {rows} rows, not a multiple of model.beam_candidates = {k} (every kept pair has that many)")]
    Candidates { path: String, rows: u64, k: u64 },
    #[error("the shard was planned as {planned} input lines from line {first_line}, the completion read {read}")]
    Lines {
        first_line: u64,
        planned: u64,
        read: u64,
    },
    #[error("the shard read {lines} input lines but its files account for {accounted} ({pairs} pairs and {rejects} rejects)")]
    Unaccounted {
        lines: u64,
        accounted: u64,
        pairs: u64,
        rejects: u64,
    },
    #[error("the completion's totals claim {pairs} pairs and {rejects} rejects, its files hold {rows} pairs and {lines} rejects")]
    Totals {
        pairs: u64,
        rejects: u64,
        rows: u64,
        lines: u64,
    },
}

/// One output file of a completion, read back from the temporary prefix.
pub struct Checked {
    /// Where the worker wrote it.
    pub temp: String,
    /// Its final name, once committed.
    pub publish: String,
    pub kind: FileKind,
    /// The bytes checked, which are the ones published.
    pub bytes: bytes::Bytes,
    pub rows: u64,
    pub sha256: String,
    /// Rejects files: lines by reason code.
    pub by_reason: BTreeMap<String, u64>,
}

/// Counts a rejects file's lines by their `code`, which must be one a
/// worker writes ([`RejectReason::known_code`]): the counts become metric
/// labels, so no worker can invent them.
fn count_reasons(path: &str, bytes: &[u8]) -> Result<BTreeMap<String, u64>, Mismatch> {
    let mut by = BTreeMap::new();
    if bytes.is_empty() {
        return Ok(by);
    }
    let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    for (i, line) in body.split(|&b| b == b'\n').enumerate() {
        let bad = |message: String| Mismatch::RejectLine {
            path: path.to_string(),
            line: i as u64 + 1,
            message,
        };
        let v: serde_json::Value =
            serde_json::from_slice(line).map_err(|e| bad(format!("not JSON: {e}")))?;
        let code = v["code"]
            .as_str()
            .ok_or_else(|| bad("no \"code\"".into()))?;
        let known = RejectReason::known_code(code)
            .ok_or_else(|| bad(format!("unknown reason code {:?}", truncate(code, 40))))?;
        *by.entry(known.to_string()).or_default() += 1;
    }
    Ok(by)
}

/// Rows of a pairs file by its Parquet footer, which must describe a
/// paraforge output file, and the model digest the footer names.
fn parquet_rows(path: &str, bytes: &bytes::Bytes) -> Result<(u64, Option<String>), Mismatch> {
    let md = parquet::file::metadata::ParquetMetaDataReader::new()
        .parse_and_finish(bytes)
        .map_err(|e| Mismatch::Parquet {
            path: path.into(),
            message: e.to_string(),
        })?;
    let found: Vec<String> = md
        .file_metadata()
        .schema_descr()
        .root_schema()
        .get_fields()
        .iter()
        .map(|f| f.name().to_string())
        .collect();
    let expected: Vec<String> = paraforge_core::schema::schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    if found != expected {
        return Err(Mismatch::Columns {
            path: path.into(),
            found,
            expected,
        });
    }
    let total = md.file_metadata().num_rows();
    let in_groups: i64 = md.row_groups().iter().map(|g| g.num_rows()).sum();
    if total < 0 || total != in_groups {
        return Err(Mismatch::Parquet {
            path: path.into(),
            message: format!("the footer says {total} rows, its row groups {in_groups}"),
        });
    }
    let model = md.file_metadata().key_value_metadata().and_then(|kv| {
        kv.iter()
            .find(|k| k.key == paraforge_core::schema::meta::MODEL_SHA256)
            .and_then(|k| k.value.clone())
    });
    Ok((total as u64, model))
}

/// The para_score model a pairs file's footer names (file, kind,
/// fingerprint), from the footer's bytes (the metadata, its length and the
/// magic); `None` without one, an error when the bytes are not a footer
/// (a file not known to name no model).
pub fn footer_scorer(footer: &bytes::Bytes) -> Result<Option<(String, String, String)>, String> {
    use paraforge_core::schema::meta;
    let md = parquet::file::metadata::ParquetMetaDataReader::new()
        .parse_and_finish(footer)
        .map_err(|e| e.to_string())?;
    let Some(kv) = md.file_metadata().key_value_metadata() else {
        return Ok(None);
    };
    let get = |key: &str| {
        kv.iter()
            .find(|k| k.key == key)
            .and_then(|k| k.value.clone())
    };
    Ok(get(meta::PARA_SCORER).map(|file| {
        (
            file,
            get(meta::PARA_SCORER_KIND).unwrap_or_default(),
            get(meta::PARA_SCORER_SHA256).unwrap_or_default(),
        )
    }))
}

/// Lines of a JSON-lines file (a last line without its newline counts).
fn line_count(b: &[u8]) -> u64 {
    let n = b.iter().filter(|&&c| c == b'\n').count() as u64;
    n + u64::from(b.last().is_some_and(|&c| c != b'\n'))
}

/// Checks one file's bytes against what the worker claims for it.
fn check_file(
    claimed: &pb::OutputFile,
    kind: FileKind,
    bytes: &bytes::Bytes,
    job_model: Option<&str>,
) -> Result<(u64, String, BTreeMap<String, u64>), Mismatch> {
    use sha2::Digest;
    let path = claimed.path.clone();
    if bytes.len() as u64 != claimed.bytes {
        return Err(Mismatch::Bytes {
            kind,
            path,
            actual: bytes.len() as u64,
            claimed: claimed.bytes,
        });
    }
    let sha = hex::encode(sha2::Sha256::digest(bytes));
    if !sha.eq_ignore_ascii_case(&claimed.sha256) {
        return Err(Mismatch::Sha {
            kind,
            path,
            actual: sha,
            claimed: truncate(&claimed.sha256, 80),
        });
    }
    let rows = if kind == FileKind::Pairs {
        let (rows, model) = parquet_rows(&path, bytes)?;
        if let Some(job) = job_model {
            if model.as_deref() != Some(job) {
                return Err(Mismatch::Model {
                    path,
                    found: truncate(model.as_deref().unwrap_or("none"), 80),
                    job: job.to_string(),
                });
            }
        }
        rows
    } else {
        line_count(bytes)
    };
    if rows != claimed.rows {
        return Err(if kind == FileKind::Pairs {
            Mismatch::Rows {
                path,
                actual: rows,
                claimed: claimed.rows,
            }
        } else {
            Mismatch::Rejects {
                path,
                actual: rows,
                claimed: claimed.rows,
            }
        });
    }
    let by_reason = if kind == FileKind::Rejects {
        count_reasons(&path, bytes)?
    } else {
        BTreeMap::new()
    };
    Ok((rows, sha, by_reason))
}

/// The job's model digest, which `worker`'s must equal: fixed by the
/// first worker to ask when planning could not read the model.
pub fn check_model(st: &mut JobState, worker: &str, theirs: &str) -> Result<String, ServiceError> {
    if theirs.len() != 64 || !theirs.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ServiceError::Invalid(format!(
            "model_sha256 {:?} is not a SHA-256 digest (a worker of another version?)",
            truncate(theirs, 80)
        )));
    }
    match st.model_sha256() {
        Some(job) if job.eq_ignore_ascii_case(theirs) => Ok(job.to_string()),
        Some(job) => {
            tracing::warn!(worker, worker_model = %theirs, job_model = %job, "lease refused: the worker has another model");
            Err(ServiceError::ModelMismatch {
                worker: worker.to_string(),
                worker_model: theirs.to_string(),
                job_model: job.to_string(),
            })
        }
        None => {
            tracing::info!(worker, model = %theirs, "the job's model digest is fixed by the first worker (the coordinator could not read model.dir)");
            st.set_model_sha256(theirs)?;
            Ok(theirs.to_string())
        }
    }
}

/// Reads a completion's two files back and checks them against its
/// claims. `Ok(Err(_))` is a completion its files do not back;
/// `Err(_)` a storage failure the worker should retry.
pub async fn completion(
    shared: &Shared,
    r: &pb::CompleteShardRequest,
) -> Result<Result<Vec<Checked>, Mismatch>, ServiceError> {
    let storage = shared.output_storage()?;
    let wanted = [FileKind::Pairs, FileKind::Rejects].map(|kind| {
        (
            kind,
            OutputLayout::temp(kind, r.shard_id, r.lease_token),
            OutputLayout::committed(kind, r.shard_id, r.lease_token),
        )
    });
    let mut checked = Vec::with_capacity(2);
    for (kind, temp, publish) in wanted {
        let mut named = r.files.iter().filter(|f| f.path == temp);
        let Some(claimed) = named.next() else {
            return Ok(Err(Mismatch::Missing { kind, path: temp }));
        };
        if named.next().is_some() {
            return Ok(Err(Mismatch::Twice { path: temp }));
        }
        let bytes = match storage.get(&temp).await {
            Ok(b) => b,
            Err(e) if storage_not_found(&e) => {
                return Ok(Err(Mismatch::Absent {
                    kind,
                    path: temp,
                    message: e.to_string(),
                }))
            }
            Err(e) => {
                return Err(ServiceError::Storage {
                    path: temp,
                    message: e.to_string(),
                })
            }
        };
        // Hashing and parsing a shard's file is CPU work.
        let (claimed, b) = (claimed.clone(), bytes.clone());
        let job_model = shared.state().model_sha256().map(str::to_string);
        let verdict = tokio::task::spawn_blocking(move || {
            check_file(&claimed, kind, &b, job_model.as_deref())
        })
        .await
        .map_err(|e| ServiceError::Invalid(format!("checking {temp}: {e}")))?;
        let (rows, sha256, by_reason) = match verdict {
            Ok(v) => v,
            Err(m) => return Ok(Err(m)),
        };
        checked.push(Checked {
            temp,
            publish,
            kind,
            bytes,
            rows,
            sha256,
            by_reason,
        });
    }
    let totals = r.totals.unwrap_or_default();
    let (rows, lines) = (checked[0].rows, checked[1].rows);
    if totals.pairs_written != rows || totals.rejects != lines {
        return Ok(Err(Mismatch::Totals {
            pairs: totals.pairs_written,
            rejects: totals.rejects,
            rows,
            lines,
        }));
    }
    let k = shared.beam_candidates.max(1);
    if rows % k != 0 {
        return Ok(Err(Mismatch::Candidates {
            path: checked[0].temp.clone(),
            rows,
            k,
        }));
    }
    // Every planned line must have been read and be a pair or a reject:
    // an input that shrank under the job, or a reader that stopped
    // early, must not commit a short shard.
    let planned = shared
        .state()
        .shards()
        .find(|s| s.spec.shard_id == r.shard_id)
        .map(|s| s.spec.range);
    if let Some(range) = planned {
        if totals.lines_read != range.lines {
            return Ok(Err(Mismatch::Lines {
                first_line: range.first_line,
                planned: range.lines,
                read: totals.lines_read,
            }));
        }
        let accounted = rows / k + lines;
        let short = if shared.skips_blank_lines {
            accounted > totals.lines_read
        } else {
            accounted != totals.lines_read
        };
        if short {
            return Ok(Err(Mismatch::Unaccounted {
                lines: totals.lines_read,
                accounted,
                pairs: rows / k,
                rejects: lines,
            }));
        }
    }
    Ok(Ok(checked))
}

fn storage_not_found(e: &paraforge_job::storage::StorageError) -> bool {
    matches!(e, paraforge_job::storage::StorageError::Op { source, .. }
        if matches!(**source, object_store::Error::NotFound { .. }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_counted_with_or_without_a_last_newline() {
        assert_eq!(
            (line_count(b""), line_count(b"a\n"), line_count(b"a\nb")),
            (0, 1, 2)
        );
    }
}
