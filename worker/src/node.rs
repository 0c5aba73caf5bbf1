//! A worker process: register with the coordinator, then lease shards,
//! heartbeat while processing them, store the output, and complete (or fail)
//! each shard. A lost coordinator is retried with backoff; a stop request
//! lets the current shard finish and leases no more.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use paraforge_core::access::{AccessError, Client, ClientAccess};
use paraforge_core::config::JobConfig;
use paraforge_core::layout::OutputLayout;
use paraforge_core::proto::{self as pb, lease_shard_response};
use paraforge_core::storage::Storage;
use paraforge_nmt::{Device, GenerateOptions, LoadOptions, Translator};

use crate::metrics::Throughput;
use crate::shard::{process, Progress, Scorers, ShardInput, ShardOutput, Stages};

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("coordinator {url} unreachable after {attempts} attempts: {message}")]
    Unreachable {
        url: String,
        attempts: u32,
        message: String,
    },
    #[error("coordinator refused: {0}")]
    Refused(String),
    /// The coordinator does not know this worker (it restarted): register again.
    #[error("coordinator does not know this worker: {0}")]
    UnknownWorker(String),
    #[error("job configuration from the coordinator: {0}")]
    Config(String),
    #[error("loading the model: {0}")]
    Model(#[from] paraforge_nmt::NmtError),
    #[error("loading the para_score model: {0}")]
    Scorer(#[from] paraforge_core::EncoderError),
    #[error(transparent)]
    Storage(#[from] paraforge_core::storage::StorageError),
    #[error(transparent)]
    Access(#[from] AccessError),
}

#[derive(Debug, Clone)]
pub struct WorkerOptions {
    pub coordinator: String,
    pub name: String,
    /// Retries of an unreachable coordinator before giving up.
    pub connect_attempts: u32,
    /// Token and TLS settings.
    pub access: ClientAccess,
    /// Run the model here instead of the job's `model.device` (`cuda:N`).
    pub device: Option<Device>,
    /// Load the model from this directory instead of the job's `model.dir`
    /// (a local copy of the same model: its checksum is still reported).
    pub model_dir: Option<std::path::PathBuf>,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct WorkerSummary {
    pub shards_committed: u64,
    pub shards_refused: u64,
    pub shards_failed: u64,
    pub pairs: u64,
}

async fn connect(o: &WorkerOptions) -> Result<Client, WorkerError> {
    let mut delay = Duration::from_millis(200);
    let mut last = String::new();
    for _ in 0..o.connect_attempts.max(1) {
        match o.access.connect(&o.coordinator).await {
            Ok(c) => return Ok(c),
            // A bad URL, certificate or token file will not get better.
            Err(e @ (AccessError::Url { .. } | AccessError::File { .. })) => return Err(e.into()),
            Err(e) => {
                last = e.to_string();
                tracing::warn!(coordinator = %o.coordinator, error = %e, "coordinator unreachable; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(10));
            }
        }
    }
    Err(WorkerError::Unreachable {
        url: o.coordinator.clone(),
        attempts: o.connect_attempts,
        message: last,
    })
}

/// Calls the coordinator, reconnecting with backoff on transport errors.
macro_rules! call {
    ($client:expr, $opts:expr, $method:ident, $req:expr) => {{
        let mut tries = 0u32;
        let req = $req;
        loop {
            match $client.$method(req.clone()).await {
                Ok(r) => break Ok(r.into_inner()),
                // Transport failures, and CANCELLED: what a coordinator
                // stopping mid-call answers (it never sends it itself).
                Err(s) if matches!(s.code(), tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled) && tries < $opts.connect_attempts => {
                    tries += 1;
                    tracing::warn!(error = %s, "coordinator call failed; reconnecting");
                    tokio::time::sleep(Duration::from_millis(200 * (1 << tries.min(5)))).await;
                    if let Ok(c) = connect($opts).await {
                        $client = c;
                    }
                }
                Err(s) if s.code() == tonic::Code::Unauthenticated => {
                    break Err(WorkerError::Refused(format!("{} (check the access token)", s.message())))
                }
                // The service answers NOT_FOUND for an unknown worker only
                // (an unknown shard is INVALID_ARGUMENT), so the code alone
                // says "register again".
                Err(s) if s.code() == tonic::Code::NotFound => {
                    break Err(WorkerError::UnknownWorker(s.message().to_string()))
                }
                Err(s) => break Err(WorkerError::Refused(s.message().to_string())),
            }
        }
    }};
}

/// Runs until the job is done or `stop` is set.
pub async fn run(o: WorkerOptions, stop: Arc<AtomicBool>) -> Result<WorkerSummary, WorkerError> {
    let mut client = connect(&o).await?;
    let reg = call!(client, &o, register_worker, register_request(&o))?;
    let cfg = JobConfig::parse(&reg.config_toml, std::path::Path::new("<from coordinator>"))
        .map_err(|e| WorkerError::Config(e.to_string()))?;
    let mut worker_id = reg.worker_id.clone();
    let mut secret = reg.worker_secret.clone();
    tracing::info!(worker = %worker_id, job = %reg.job_id, "registered");

    let device: Device = match o.device {
        Some(d) => d,
        None => cfg.model.device.parse().map_err(WorkerError::Config)?,
    };
    let load = LoadOptions {
        device,
        threads: cfg.model.threads,
        quantized: cfg.model.quantized,
        ..LoadOptions::default()
    };
    let model_dir = o
        .model_dir
        .clone()
        .unwrap_or_else(|| std::path::PathBuf::from(&cfg.model.dir));
    let translator = tokio::task::spawn_blocking(move || Translator::load(&model_dir, &load))
        .await
        .map_err(|e| WorkerError::Config(e.to_string()))??;
    let model_sha = model_checksum(&translator)?;
    let scoring = cfg.scoring.clone();
    let vectors = tokio::task::spawn_blocking(move || crate::shard::load_para_encoder(&scoring))
        .await
        .map_err(|e| WorkerError::Config(e.to_string()))??
        .map(Arc::from);
    let scoring = cfg.scoring.clone();
    let lm = tokio::task::spawn_blocking(move || crate::shard::load_lm(&scoring))
        .await
        .map_err(|e| WorkerError::Config(e.to_string()))?
        .map_err(WorkerError::Config)?
        .map(Arc::new);
    let filters = Arc::new(
        paraforge_core::filters::PreFilter::new(&cfg.filters)
            .map_err(|e| WorkerError::Config(e.to_string()))?,
    );
    let storage = Storage::open(&cfg.job.output)?;
    let gen = GenerateOptions {
        num_beams: cfg.model.beam,
        nbest: cfg.model.beam_candidates,
        max_new_tokens: cfg.model.max_new_tokens,
        batch_size: cfg.model.batch_size,
        batch_tokens: cfg.model.batch_tokens,
        ..GenerateOptions::default()
    };
    let metadata: Vec<(&'static str, String)> = vec![
        (
            paraforge_core::schema::meta::VERSION,
            env!("CARGO_PKG_VERSION").to_string(),
        ),
        (paraforge_core::schema::meta::MODEL, cfg.model.dir.clone()),
        (paraforge_core::schema::meta::MODEL_SHA256, model_sha),
        (
            paraforge_core::schema::meta::CONFIG,
            reg.config_toml.clone(),
        ),
    ];
    let translator = Arc::new(std::sync::Mutex::new(translator));
    let throughput = Arc::new(Throughput::default());
    let heartbeat_every = Duration::from_millis(reg.heartbeat_interval_ms.max(100) as u64);
    let mut summary = WorkerSummary::default();

    while !stop.load(Ordering::Relaxed) {
        let r = match call!(
            client,
            &o,
            lease_shard,
            pb::LeaseShardRequest {
                worker_id: worker_id.clone(),
                worker_secret: secret.clone(),
            }
        ) {
            Ok(r) => r,
            Err(WorkerError::UnknownWorker(_)) => {
                // A restarted coordinator, or one that forgot this worker
                // after a long silence: register again, same job.
                let again = call!(client, &o, register_worker, register_request(&o))?;
                tracing::warn!(old = %worker_id, new = %again.worker_id, "the coordinator does not know this worker; registered again");
                worker_id = again.worker_id;
                secret = again.worker_secret;
                continue;
            }
            Err(e) => return Err(e),
        };
        let lease = match r.result {
            Some(lease_shard_response::Result::Lease(l)) => l,
            Some(lease_shard_response::Result::RetryAfterMs(ms)) => {
                tokio::time::sleep(Duration::from_millis(ms.clamp(50, 5000) as u64)).await;
                continue;
            }
            Some(lease_shard_response::Result::Done(_)) => break,
            // Only `done` ends a worker's run: an empty reply is not one.
            None => return Err(WorkerError::Refused(
                "a lease reply with no lease, retry or done (a coordinator of another version?)"
                    .into(),
            )),
        };
        let Some(spec) = lease.shard.clone() else {
            return Err(WorkerError::Refused(format!(
                "lease {} names no shard (a coordinator of another version?)",
                lease.lease_token
            )));
        };
        let Some(range) = spec.range else {
            return Err(WorkerError::Refused(format!(
                "lease {} of shard {} names no range of its input (a coordinator of another version?)",
                lease.lease_token, spec.shard_id
            )));
        };
        let idx = cfg
            .input
            .paths
            .iter()
            .position(|p| *p == spec.input_url)
            .unwrap_or(0);
        let input = ShardInput {
            path: paraforge_core::storage::local_path(&spec.input_url)
                .map_or_else(|| spec.input_url.clone(), |p| p.display().to_string()),
            format: cfg.format(idx),
            range: Some(range.into()),
            max_chars: cfg.input.max_chars,
            drop_lines: {
                let mut d = spec.drop_lines.clone();
                d.sort_unstable();
                d
            },
        };
        tracing::info!(worker = %worker_id, shard = spec.shard_id, token = lease.lease_token, attempt = lease.attempt, "processing shard");

        // Heartbeats run beside the shard; a revoked lease cancels it.
        let progress = Arc::new(Progress::default());
        let revoked = Arc::new(AtomicBool::new(false));
        let hb = {
            let (mut c, o2, wid, wsecret, progress, revoked, throughput) = (
                client.clone(),
                o.clone(),
                worker_id.clone(),
                secret.clone(),
                progress.clone(),
                revoked.clone(),
                throughput.clone(),
            );
            let (shard_id, token) = (spec.shard_id, lease.lease_token);
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(heartbeat_every).await;
                    let req = pb::HeartbeatRequest {
                        worker_id: wid.clone(),
                        worker_secret: wsecret.clone(),
                        leases: vec![pb::LeaseProgress {
                            shard_id,
                            lease_token: token,
                            progress: Some(pb::Progress {
                                pairs_written: progress.pairs.load(Ordering::Relaxed),
                                rejects: progress.rejects.load(Ordering::Relaxed),
                                ..Default::default()
                            }),
                        }],
                        metrics: Some(throughput.report()),
                    };
                    match call!(c, &o2, heartbeat, req) {
                        Ok(r) if r.revoked_tokens.contains(&token) => {
                            tracing::warn!(
                                shard = shard_id,
                                token,
                                "lease revoked; abandoning the shard"
                            );
                            revoked.store(true, Ordering::Relaxed);
                            return;
                        }
                        Ok(_) => {}
                        // Forgotten by the coordinator: the lease went with
                        // this worker, so the shard's work would be refused.
                        Err(WorkerError::UnknownWorker(m)) => {
                            tracing::warn!(shard = shard_id, token, reason = %m, "the coordinator no longer knows this worker; abandoning the shard");
                            revoked.store(true, Ordering::Relaxed);
                            return;
                        }
                        Err(e) => tracing::warn!(error = %e, "heartbeat failed"),
                    }
                }
            })
        };
        let result = {
            let (t, v, lm, gen, md, progress, revoked, filters, throughput) = (
                translator.clone(),
                vectors.clone(),
                lm.clone(),
                gen.clone(),
                metadata.clone(),
                progress.clone(),
                revoked.clone(),
                filters.clone(),
                throughput.clone(),
            );
            tokio::task::spawn_blocking(move || {
                let mut t = t.lock().unwrap_or_else(|p| p.into_inner());
                let md: Vec<(&str, String)> = md.iter().map(|(k, v)| (*k, v.clone())).collect();
                process(
                    &input,
                    &mut t,
                    &gen,
                    Stages {
                        filters: &filters,
                        scorers: Scorers {
                            encoder: v.as_deref(),
                            lm: lm.as_deref(),
                        },
                        throughput: &throughput,
                    },
                    &md,
                    &progress,
                    &|| revoked.load(Ordering::Relaxed),
                )
            })
            .await
        };
        hb.abort();
        // A failed translation and a store that keeps failing (after the
        // storage layer's own retries) both fail this attempt, not the
        // worker: the shard goes back to the queue, nothing is committed.
        let stored = match result {
            Ok(Ok(out)) => store(&storage, spec.shard_id, lease.lease_token, out)
                .await
                .map_err(|e| (format!("storing the output: {e}"), true)),
            Ok(Err(e)) => Err((e.to_string(), e.retryable())),
            Err(join) => Err((format!("worker task failed: {join}"), true)),
        };
        let (files, out) = match stored {
            Ok(stored) => stored,
            Err((reason, retryable)) => {
                tracing::warn!(shard = spec.shard_id, %reason, "shard attempt failed");
                summary.shards_failed += 1;
                // The coordinator decides what becomes of the shard; a
                // report that does not arrive leaves the lease to expire.
                match call!(
                    client,
                    &o,
                    fail_shard,
                    pb::FailShardRequest {
                        worker_id: worker_id.clone(),
                        worker_secret: secret.clone(),
                        shard_id: spec.shard_id,
                        lease_token: lease.lease_token,
                        reason,
                        retryable,
                    }
                ) {
                    Ok(r) => tracing::info!(
                        shard = spec.shard_id,
                        will_retry = r.will_retry,
                        "failure reported"
                    ),
                    Err(e) => tracing::warn!(
                        shard = spec.shard_id,
                        error = %e,
                        "could not report the failure; the lease will expire"
                    ),
                }
                continue;
            }
        };
        let paths: Vec<String> = files.iter().map(|f| f.path.clone()).collect();
        let done = match call!(
            client,
            &o,
            complete_shard,
            pb::CompleteShardRequest {
                worker_id: worker_id.clone(),
                worker_secret: secret.clone(),
                shard_id: spec.shard_id,
                lease_token: lease.lease_token,
                files,
                totals: Some(pb::Progress {
                    pairs_written: out.pairs,
                    rejects: out.rejects,
                    lines_read: out.lines,
                }),
                metrics: Some(throughput.report()),
            }
        ) {
            Ok(d) => d,
            // The coordinator restarted while we worked: the lease is gone.
            Err(WorkerError::UnknownWorker(m)) => pb::CompleteShardResponse {
                accepted: false,
                reason: m,
            },
            Err(e) => return Err(e),
        };
        if done.accepted {
            summary.shards_committed += 1;
            summary.pairs += out.pairs;
        } else {
            // A stale attempt: its temporary files are not needed.
            summary.shards_refused += 1;
            tracing::warn!(shard = spec.shard_id, reason = %done.reason, "completion refused; removing this attempt's files");
            for p in &paths {
                let _ = storage.delete(p).await;
            }
        }
    }
    Ok(summary)
}

/// Writes an attempt's two files under the lease's temporary prefix (the
/// token in the path keeps attempts apart; the coordinator publishes them
/// under their final names when it commits) and describes them for the
/// completion. The output's counts are returned for the totals.
async fn store(
    storage: &Storage,
    shard_id: u64,
    token: u64,
    out: ShardOutput,
) -> Result<(Vec<pb::OutputFile>, Counts), paraforge_core::storage::StorageError> {
    let pq = OutputLayout::temp_part_path(shard_id, token);
    let rj = OutputLayout::temp_rejects_path(shard_id, token);
    let files = vec![
        pb::OutputFile {
            path: pq.clone(),
            rows: out.pairs,
            bytes: out.parquet.len() as u64,
            sha256: out.parquet_sha256.clone(),
        },
        pb::OutputFile {
            path: rj.clone(),
            rows: out.rejects,
            bytes: out.rejects_jsonl.len() as u64,
            sha256: hex_sha(&out.rejects_jsonl),
        },
    ];
    let counts = Counts {
        pairs: out.pairs,
        rejects: out.rejects,
        lines: out.lines,
    };
    storage.put(&pq, out.parquet.into()).await?;
    storage.put(&rj, out.rejects_jsonl.into()).await?;
    Ok((files, counts))
}

/// What a stored attempt holds, for the completion's totals.
struct Counts {
    pairs: u64,
    rejects: u64,
    /// Input lines read, for the coordinator's check against the plan.
    lines: u64,
}

fn register_request(o: &WorkerOptions) -> pb::RegisterWorkerRequest {
    pb::RegisterWorkerRequest {
        name: o.name.clone(),
        // Without an override the device comes from the job's config, which
        // the worker only learns from this call; the coordinator fills it in.
        device: o.device.map(|d| d.to_string()).unwrap_or_default(),
        version: env!("CARGO_PKG_VERSION").into(),
    }
}

fn hex_sha(b: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(b))
}

/// sha256 over the model's ONNX files, for the Parquet metadata. A file
/// that cannot be read is an error: a checksum of the others would name a
/// model that was not the one run.
fn model_checksum(t: &Translator) -> Result<String, WorkerError> {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    for f in t.model_files() {
        let bytes = std::fs::read(f).map_err(|e| {
            WorkerError::Config(format!(
                "reading model file {} for its checksum: {e}",
                f.display()
            ))
        })?;
        h.update(&bytes);
    }
    Ok(hex::encode(h.finalize()))
}
