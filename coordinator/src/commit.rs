//! A completion, from claim to commit: a worker may name only its lease's
//! two temporary files and must hold the lease now; the files must back
//! the claim (`verify.rs`), or the attempt fails and nothing is committed.
//! Then exactly the checked bytes are written under their final names, the
//! commit is recorded in the job state, and the temporary files go.

use std::collections::BTreeMap;

use paraforge_core::layout::OutputLayout;
use paraforge_rpc::proto as pb;

use crate::bounded::truncate;
use crate::error::ServiceError;
use crate::shared::{now_ms, Shared};
use crate::state::{FailOutcome, OutputFile, Tally};
use crate::verify::{self, Checked};

/// What became of a completion that could be judged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Committed,
    /// Not committed, and why, for the worker.
    Refused(String),
}

/// Commits the shard `r` completes, if its worker holds the lease now and
/// its files back its claims. `Err(_)` is a request to refuse (a foreign
/// path) or a failure the worker should retry.
pub async fn complete(
    shared: &Shared,
    r: &pb::CompleteShardRequest,
) -> Result<Verdict, ServiceError> {
    let totals = r.totals.unwrap_or_default();
    // A worker may only name this lease's own two temporary files:
    // nothing can point the manifest (or the clean-up) elsewhere.
    let allowed = [
        OutputLayout::temp_part_path(r.shard_id, r.lease_token),
        OutputLayout::temp_rejects_path(r.shard_id, r.lease_token),
    ];
    if let Some(f) = r.files.iter().find(|f| !allowed.contains(&f.path)) {
        tracing::warn!(worker = %r.worker_id, shard = r.shard_id, path = %truncate(&f.path, 200), "completion names a foreign output path");
        return Err(ServiceError::Invalid(format!(
            "output path {:?} is not this lease's (expected {} or {})",
            truncate(&f.path, 200),
            allowed[0],
            allowed[1]
        )));
    }
    if let Err(refusal) = shared
        .state()
        .check_holder(r.shard_id, &r.worker_id, r.lease_token)
    {
        tracing::warn!(worker = %r.worker_id, shard = r.shard_id, token = r.lease_token, %refusal, "completion refused");
        shared.metrics.refused(refusal.code());
        return Ok(Verdict::Refused(refusal.to_string()));
    }
    // The files must hold what the completion claims, or the manifest
    // would count pairs that do not exist. A mismatch fails this
    // attempt (the shard is leased again) and commits nothing.
    let files = match verify::completion(shared, r).await? {
        Ok(files) => files,
        Err(mismatch) => {
            let reason = format!("output does not match the completion: {mismatch}");
            let will_retry =
                shared
                    .state()
                    .fail(r.shard_id, &r.worker_id, r.lease_token, &reason, true)?
                    == FailOutcome::Retried;
            tracing::warn!(worker = %r.worker_id, shard = r.shard_id, token = r.lease_token, %reason, will_retry, "completion refused; attempt failed");
            shared.metrics.refused("mismatch");
            return Ok(Verdict::Refused(format!(
                "{reason}; attempt failed{}",
                if will_retry {
                    ", shard will be retried"
                } else {
                    ""
                }
            )));
        }
    };
    let (committed, by_reason) = publish(shared, files).await?;
    let outcome = shared.state().complete(
        r.shard_id,
        &r.worker_id,
        r.lease_token,
        committed,
        Tally {
            pairs: totals.pairs_written,
            rejects: totals.rejects,
            rejects_by_reason: by_reason,
        },
    )?;
    if outcome.is_ok() {
        let storage = shared.output_storage()?;
        for p in &allowed {
            if let Err(e) = storage.delete(p).await {
                tracing::warn!(path = %p, error = %e, "could not remove a published temporary file");
            }
        }
    }
    Ok(match outcome {
        Ok(leased_ms) => {
            shared
                .metrics
                .committed(totals.pairs_written, leased_ms, now_ms());
            tracing::info!(worker = %r.worker_id, shard = r.shard_id, token = r.lease_token, pairs = totals.pairs_written, "shard committed");
            Verdict::Committed
        }
        Err(refusal) => {
            tracing::warn!(worker = %r.worker_id, shard = r.shard_id, token = r.lease_token, %refusal, "completion refused");
            shared.metrics.refused(refusal.code());
            Verdict::Refused(refusal.to_string())
        }
    })
}

/// Writes the checked files under their final names; returns them as the
/// state records them, and the rejects by reason code.
///
/// Publish before recording the commit: the final names appear only for a
/// lease that holds now. Should the commit then be refused (the lease
/// expired during the copy) or the coordinator die first, the copies are
/// files of an uncommitted attempt, which the job's end deletes. The bytes
/// published are the ones just checked, not a server-side copy of a
/// temporary file that may have changed since.
async fn publish(
    shared: &Shared,
    files: Vec<Checked>,
) -> Result<(Vec<OutputFile>, BTreeMap<String, u64>), ServiceError> {
    let storage = shared.output_storage()?;
    let mut committed = Vec::with_capacity(files.len());
    let mut by_reason = BTreeMap::new();
    for f in files {
        by_reason.extend(f.by_reason);
        let len = f.bytes.len() as u64;
        storage
            .put(&f.publish, f.bytes)
            .await
            .map_err(|e| ServiceError::Storage {
                path: f.publish.clone(),
                message: format!("publishing {}: {e}", f.temp),
            })?;
        committed.push(OutputFile {
            path: f.publish,
            rows: f.rows,
            bytes: len,
            sha256: f.sha256,
            kind: f.kind,
        });
    }
    Ok((committed, by_reason))
}
