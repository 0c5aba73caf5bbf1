//! Claiming a job's output and resuming it: a new job is planned and
//! claims a new output; a resumed one is checked against its plan (config,
//! inputs, model) and its committed files against the output, and shards
//! whose files are gone are queued again.

use std::path::PathBuf;

use paraforge_core::layout::{OutputLayout, JOB_CARD_FILE, MANIFEST_FILE, SUCCESS_FILE};
use paraforge_job::config::JobConfig;
use paraforge_job::storage::Storage;
use serde::Serialize;

use crate::error::RunError;
use crate::plan::{plan_job, PlanError};
use crate::state::{JobState, Status};

/// The claim a job puts in its output (`_job.json`), so that a second job
/// on the same output refuses to start instead of writing over the first.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct Claim {
    pub job: String,
    pub run_id: String,
    pub state: String,
}

pub use paraforge_core::layout::CLAIM_FILE as CLAIM;

/// What `output` holds that would make it another job's, if anything.
pub(crate) async fn foreign_files(storage: &Storage) -> Result<Option<String>, RunError> {
    for (path, _) in storage.list("").await? {
        if OutputLayout::is_job_file(&path) {
            return Ok(Some(path));
        }
    }
    Ok(None)
}

pub(crate) async fn read_claim(cfg: &JobConfig, storage: &Storage) -> Result<Claim, RunError> {
    let bytes = storage.get(CLAIM).await?;
    serde_json::from_slice(&bytes).map_err(|e| RunError::OutputClaimed {
        output: cfg.job.output.clone(),
        why: format!("has a {CLAIM} that is not a job claim ({e})"),
    })
}

/// Claims the output for this run of the job, or says whose it is.
pub(crate) async fn claim_output(
    cfg: &JobConfig,
    storage: &Storage,
    claim: &Claim,
) -> Result<(), RunError> {
    let claimed = |why: String| RunError::OutputClaimed {
        output: cfg.job.output.clone(),
        why,
    };
    let json = serde_json::to_vec_pretty(claim).unwrap_or_default();
    if storage.put_if_absent(CLAIM, json.into()).await? {
        return Ok(());
    }
    let theirs = read_claim(cfg, storage).await?;
    if theirs.run_id == claim.run_id {
        return Ok(());
    }
    Err(claimed(format!(
        "belongs to job {:?} (state {}, run {})",
        theirs.job, theirs.state, theirs.run_id
    )))
}

/// The committed files that are not in the output as they were committed:
/// (shard, path, what is wrong). Sizes come from one listing; every file of
/// the right size is hashed (streamed, a few at a time), because a
/// same-size change (a flipped byte, a file copied over another with the
/// same row count) shows only in its digest.
pub(crate) async fn damaged(
    storage: &Storage,
    committed: Vec<(u64, crate::state::OutputFile)>,
) -> Result<Vec<(u64, String, String)>, RunError> {
    use futures::StreamExt;
    if committed.is_empty() {
        return Ok(Vec::new());
    }
    let listing: std::collections::HashMap<String, u64> =
        storage.list("").await?.into_iter().collect();
    let checks = committed.into_iter().map(|(shard, f)| {
        let size = listing.get(&f.path).copied();
        async move {
            let why = match size {
                None => Some("missing".to_string()),
                Some(n) if n != f.bytes => Some(format!("{n} bytes, committed with {}", f.bytes)),
                Some(_) => {
                    let got = storage.sha256(&f.path).await?;
                    (got != f.sha256).then(|| format!("SHA-256 {got}, committed with {}", f.sha256))
                }
            };
            Ok::<_, RunError>(why.map(|w| (shard, f.path, w)))
        }
    });
    let mut out = Vec::new();
    let mut results = futures::stream::iter(checks).buffer_unordered(8);
    while let Some(r) = results.next().await {
        out.extend(r?);
    }
    out.sort();
    Ok(out)
}

pub(crate) fn committed_files(state: &JobState) -> Vec<(u64, crate::state::OutputFile)> {
    state
        .shards()
        .filter_map(|s| match &s.status {
            Status::Committed { files, .. } => Some((s.spec.shard_id, files.clone())),
            _ => None,
        })
        .flat_map(|(id, files)| files.into_iter().map(move |f| (id, f)))
        .collect()
}

/// Puts back in the queue every committed shard whose files are no longer
/// in the output as committed (deleted or damaged by hand, or by an older
/// paraforge's second job), so that a resumed job writes them again instead
/// of listing files that do not hold what was committed. An output that was
/// finished loses its `_SUCCESS`, manifest and card first: it is not
/// complete.
pub(crate) async fn reconcile(state: &mut JobState, storage: &Storage) -> Result<(), RunError> {
    let bad = damaged(storage, committed_files(state)).await?;
    if bad.is_empty() {
        return Ok(());
    }
    for f in [SUCCESS_FILE, MANIFEST_FILE, JOB_CARD_FILE] {
        if storage.exists(f).await? {
            storage.delete(f).await?;
        }
    }
    let mut shards: Vec<u64> = bad.iter().map(|(id, _, _)| *id).collect();
    shards.dedup();
    for (id, path, why) in &bad {
        tracing::warn!(
            shard = id,
            %path,
            %why,
            "a committed file is missing or changed in the output: its shard is written again"
        );
    }
    for id in shards {
        state.requeue(
            id,
            "its committed files went missing or changed in the output",
        )?;
    }
    Ok(())
}

/// Fixes the job's model digest when it is planned and checks it when the
/// job resumes, where the coordinator can read `model.dir`; where it cannot
/// (a cluster that mounts the model on workers only), the first worker to
/// lease fixes it and every later one must match (`service::check_model`).
pub(crate) async fn fix_model(cfg: &JobConfig, state: &mut JobState) -> Result<(), RunError> {
    let (dir, now) = match &cfg.model {
        // An input of pairs: the digest of no model, which a worker that
        // loaded one does not have.
        None => (
            "(none: the input holds its translations)".to_string(),
            paraforge_core::model_digest::no_model_digest(),
        ),
        Some(model) => {
            let path = PathBuf::from(&model.dir);
            if !path.exists() {
                tracing::warn!(dir = %path.display(), "model.dir is not readable by the coordinator: the first worker's model fixes the job's model digest");
                return Ok(());
            }
            let unreadable = |source| RunError::ModelUnreadable {
                dir: model.dir.clone(),
                source,
            };
            let now = tokio::task::spawn_blocking(move || {
                paraforge_core::model_digest::model_digest(&path)
            })
            .await
            .map_err(|e| unreadable(std::io::Error::other(e.to_string())))?
            .map_err(unreadable)?;
            (model.dir.clone(), now)
        }
    };
    match state.model_sha256() {
        Some(was) if !was.eq_ignore_ascii_case(&now) => Err(RunError::ModelChanged {
            dir,
            was: was.to_string(),
            now,
        }),
        Some(_) => Ok(()),
        None => Ok(state.set_model_sha256(&now)?),
    }
}

/// Checks a resumed job against its plan: the same output-deciding config
/// and the same inputs, byte for byte.
pub(crate) fn check_resume(
    cfg: &JobConfig,
    state: &JobState,
    path: &std::path::Path,
) -> Result<(), RunError> {
    let was: std::collections::BTreeMap<String, String> =
        serde_json::from_str(state.config_key()).unwrap_or_default();
    for (key, now) in cfg.output_keys() {
        let before = was.get(&key).cloned().unwrap_or_else(|| "unset".into());
        if before != now {
            return Err(RunError::ConfigChanged {
                state: path.display().to_string(),
                key,
                was: before,
                now,
            });
        }
    }
    for planned in state.inputs() {
        let now = crate::plan::fingerprint(&planned.input)?;
        if let Some(why) = planned.differs(&now) {
            return Err(RunError::InputChanged {
                input: planned.input.clone(),
                why,
            });
        }
        if planned.modified != now.modified || planned.e_tag != now.e_tag {
            tracing::warn!(input = %planned.input, "input has a new modification time or ETag but the same bytes: resuming");
        }
    }
    Ok(())
}

/// Opens the job's state: a new job is planned (its output must be new),
/// a resumed one checked against its plan.
pub(crate) async fn open(
    cfg: &JobConfig,
    path: &std::path::Path,
    storage: &Storage,
) -> Result<JobState, RunError> {
    let job_id = cfg.job.name.clone();
    let out = &cfg.job.output;
    let blocking_err = |e: tokio::task::JoinError| {
        RunError::Plan(PlanError::Io {
            path: PathBuf::from(&cfg.input.paths.join(", ")),
            source: std::io::Error::other(e.to_string()),
        })
    };
    let mut planned = None;
    if !path.exists() {
        // A new job: the output must be new too, which is cheap to check
        // before planning reads every input.
        if storage.exists(CLAIM).await? {
            let theirs = read_claim(cfg, storage).await?;
            return Err(RunError::OutputClaimed {
                output: out.clone(),
                why: format!(
                    "belongs to job {:?} (state {}, run {}), and this job's state {} is new",
                    theirs.job,
                    theirs.state,
                    theirs.run_id,
                    path.display()
                ),
            });
        }
        if let Some(f) = foreign_files(storage).await? {
            return Err(RunError::OutputClaimed {
                output: out.clone(),
                why: format!(
                    "already holds a job's files ({f}) and no claim this job's state can match"
                ),
            });
        }
        // Planning reads every input once (blocking I/O, maybe remote).
        let c = cfg.clone();
        planned = Some(
            tokio::task::spawn_blocking(move || plan_job(&c))
                .await
                .map_err(blocking_err)??,
        );
    }
    let keys = serde_json::to_string(&cfg.output_keys()).unwrap_or_default();
    let state = JobState::open_planned(path, &job_id, cfg.job.max_attempts, &keys, || {
        planned.take().unwrap_or_default()
    })?;
    if state.created() {
        return Ok(state);
    }
    // Fingerprinting reads every input again: blocking, maybe remote.
    let (c, p) = (cfg.clone(), path.to_path_buf());
    let (st, checked) = tokio::task::spawn_blocking(move || {
        let r = check_resume(&c, &state, &p);
        (state, r)
    })
    .await
    .map_err(blocking_err)?;
    checked?;
    if st.retried_failed() > 0 {
        tracing::warn!(
            shards = st.retried_failed(),
            "retrying shards that failed in an earlier run"
        );
    }
    Ok(st)
}
