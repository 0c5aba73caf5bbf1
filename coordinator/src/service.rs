//! The gRPC face of the coordinator (`paraforge.v1.Coordinator`): a thin
//! layer that turns requests into [`JobState`] transitions. Errors are one
//! type, mapped to gRPC status codes in one place.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use paraforge_core::proto::coordinator_server::Coordinator;
use paraforge_core::proto::{self as pb, lease_shard_response};
use tonic::{Request, Response, Status};

use crate::state::{JobState, OutputFile, StateError};

/// Everything that can go wrong serving a request.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("unknown worker {0:?}: register first")]
    UnknownWorker(String),
    #[error("worker version {worker} does not match the coordinator's {coordinator}")]
    VersionMismatch { worker: String, coordinator: String },
    #[error("invalid request: {0}")]
    Invalid(String),
    #[error(transparent)]
    State(#[from] StateError),
}

impl From<ServiceError> for Status {
    fn from(e: ServiceError) -> Status {
        let msg = e.to_string();
        match e {
            ServiceError::UnknownWorker(_) => Status::not_found(msg),
            ServiceError::VersionMismatch { .. } => Status::failed_precondition(msg),
            ServiceError::Invalid(_) => Status::invalid_argument(msg),
            ServiceError::State(StateError::UnknownShard(_)) => Status::not_found(msg),
            ServiceError::State(_) => Status::internal(msg),
        }
    }
}

#[derive(Debug, Clone)]
pub struct WorkerInfo {
    pub id: String,
    pub name: String,
    pub device: String,
    pub last_seen_ms: u64,
    /// This worker has been answered `done` (it will stop on its own).
    pub told_done: bool,
}

/// Shared coordinator state behind the service and the status page.
pub struct Shared {
    pub state: Mutex<JobState>,
    pub workers: Mutex<Vec<WorkerInfo>>,
    pub config_toml: String,
    pub output: String,
    /// The job's `model.device`, shown for workers that do not name theirs.
    pub device: String,
    pub lease: Duration,
    /// `job.max_reject_rate`: a job that rejects more fails at its end.
    pub max_reject_rate: f64,
    pub heartbeat: Duration,
    pub started: std::time::Instant,
    storage: std::sync::OnceLock<paraforge_core::storage::Storage>,
}

impl Shared {
    fn mark_told_done(&self, worker: &str) {
        let mut ws = self.workers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(w) = ws.iter_mut().find(|w| w.id == worker) {
            w.told_done = true;
        }
    }

    /// Workers heard from within a lease that have not been told `done`:
    /// a coordinator that stops before they ask again leaves them retrying
    /// a closed port until their connect attempts run out.
    pub fn awaiting_done(&self) -> usize {
        let cutoff = now_ms().saturating_sub(self.lease.as_millis() as u64);
        let ws = self.workers.lock().unwrap_or_else(|p| p.into_inner());
        ws.iter()
            .filter(|w| !w.told_done && w.last_seen_ms >= cutoff)
            .count()
    }

    /// Heartbeats come four times per lease, so one lost heartbeat never
    /// costs a lease.
    pub fn new(
        state: JobState,
        config_toml: String,
        output: String,
        device: String,
        lease: Duration,
    ) -> Shared {
        Shared {
            state: Mutex::new(state),
            workers: Mutex::new(Vec::new()),
            config_toml,
            output,
            device,
            lease,
            max_reject_rate: 0.5,
            heartbeat: (lease / 4).max(Duration::from_millis(100)),
            started: std::time::Instant::now(),
            storage: std::sync::OnceLock::new(),
        }
    }

    /// The output storage, opened on first use.
    pub fn storage(
        &self,
    ) -> Result<&paraforge_core::storage::Storage, paraforge_core::storage::StorageError> {
        if let Some(s) = self.storage.get() {
            return Ok(s);
        }
        let s = paraforge_core::storage::Storage::open(&self.output)?;
        Ok(self.storage.get_or_init(|| s))
    }
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// How long an idle worker waits before asking for a shard again.
pub const RETRY_AFTER_MS: u32 = 1000;

/// The tonic service.
#[derive(Clone)]
pub struct CoordinatorService {
    shared: Arc<Shared>,
}

impl CoordinatorService {
    pub fn new(shared: Arc<Shared>) -> CoordinatorService {
        CoordinatorService { shared }
    }

    fn touch(&self, worker: &str) -> Result<(), ServiceError> {
        let mut ws = self
            .shared
            .workers
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        match ws.iter_mut().find(|w| w.id == worker) {
            Some(w) => {
                w.last_seen_ms = now_ms();
                Ok(())
            }
            None => Err(ServiceError::UnknownWorker(worker.to_string())),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, JobState> {
        self.shared.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[tonic::async_trait]
impl Coordinator for CoordinatorService {
    async fn register_worker(
        &self,
        req: Request<pb::RegisterWorkerRequest>,
    ) -> Result<Response<pb::RegisterWorkerResponse>, Status> {
        let r = req.into_inner();
        let mine = env!("CARGO_PKG_VERSION");
        if r.version != mine {
            return Err(ServiceError::VersionMismatch {
                worker: r.version,
                coordinator: mine.into(),
            }
            .into());
        }
        let id = {
            let mut ws = self
                .shared
                .workers
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let id = format!("w{}-{}", ws.len() + 1, now_ms() % 100_000);
            ws.push(WorkerInfo {
                id: id.clone(),
                name: r.name,
                device: if r.device.is_empty() {
                    self.shared.device.clone()
                } else {
                    r.device
                },
                last_seen_ms: now_ms(),
                told_done: false,
            });
            id
        };
        tracing::info!(worker = %id, "worker registered");
        Ok(Response::new(pb::RegisterWorkerResponse {
            worker_id: id,
            job_id: self.state().job_id().to_string(),
            config_toml: self.shared.config_toml.clone(),
            heartbeat_interval_ms: self.shared.heartbeat.as_millis() as u32,
            lease_ms: self.shared.lease.as_millis() as u32,
        }))
    }

    async fn lease_shard(
        &self,
        req: Request<pb::LeaseShardRequest>,
    ) -> Result<Response<pb::LeaseShardResponse>, Status> {
        let r = req.into_inner();
        self.touch(&r.worker_id)?;
        let mut st = self.state();
        let lease = st
            .lease(&r.worker_id, now_ms(), self.shared.lease.as_millis() as u64)
            .map_err(ServiceError::from)?;
        let result = match lease {
            Some(l) => {
                tracing::info!(worker = %r.worker_id, shard = l.spec.shard_id, token = l.token, attempt = l.attempt, "shard leased");
                lease_shard_response::Result::Lease(pb::Lease {
                    shard: Some(pb::ShardSpec {
                        shard_id: l.spec.shard_id,
                        input_url: l.spec.input.clone(),
                        byte_start: l.spec.byte_start,
                        byte_end: l.spec.byte_end,
                        first_line: l.spec.first_line,
                        skip_records: if l.spec.byte_end == 0 {
                            l.spec.first_line - 1
                        } else {
                            0
                        },
                        take_records: if l.spec.byte_end == 0 {
                            l.spec.lines
                        } else {
                            0
                        },
                    }),
                    lease_token: l.token,
                    deadline_unix_ms: l.deadline_ms,
                    attempt: l.attempt,
                    temp_prefix: paraforge_core::schema::temp_prefix(l.spec.shard_id, l.token),
                })
            }
            None if st.finished() => {
                drop(st);
                self.shared.mark_told_done(&r.worker_id);
                lease_shard_response::Result::Done(true)
            }
            None => lease_shard_response::Result::RetryAfterMs(RETRY_AFTER_MS),
        };
        Ok(Response::new(pb::LeaseShardResponse {
            result: Some(result),
        }))
    }

    async fn heartbeat(
        &self,
        req: Request<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatResponse>, Status> {
        let r = req.into_inner();
        self.touch(&r.worker_id)?;
        let leases: Vec<(u64, u64, u64)> = r
            .leases
            .iter()
            .map(|l| {
                (
                    l.shard_id,
                    l.lease_token,
                    l.progress.as_ref().map_or(0, |p| p.pairs_written),
                )
            })
            .collect();
        let lease_ms = self.shared.lease.as_millis() as u64;
        let now = now_ms();
        let (extended, revoked) = self
            .state()
            .heartbeat(&r.worker_id, &leases, now, lease_ms)
            .map_err(ServiceError::from)?;
        Ok(Response::new(pb::HeartbeatResponse {
            extended_tokens: extended,
            revoked_tokens: revoked,
            deadline_unix_ms: now + lease_ms,
            drain: false,
        }))
    }

    async fn complete_shard(
        &self,
        req: Request<pb::CompleteShardRequest>,
    ) -> Result<Response<pb::CompleteShardResponse>, Status> {
        let r = req.into_inner();
        self.touch(&r.worker_id)?;
        let totals = r.totals.unwrap_or_default();
        // A worker may only name this lease's own two temporary files:
        // nothing can point the manifest (or the clean-up) elsewhere.
        use paraforge_core::schema::{part_path, rejects_path, temp_part_path, temp_rejects_path};
        let allowed = [
            temp_part_path(r.shard_id, r.lease_token),
            temp_rejects_path(r.shard_id, r.lease_token),
        ];
        if let Some(f) = r.files.iter().find(|f| !allowed.contains(&f.path)) {
            tracing::warn!(worker = %r.worker_id, shard = r.shard_id, path = %f.path, "completion names a foreign output path");
            return Err(ServiceError::Invalid(format!(
                "output path {:?} is not this lease's (expected {} or {})",
                f.path, allowed[0], allowed[1]
            ))
            .into());
        }
        // Publish before recording the commit: the final names appear only
        // for a lease that holds now. Should the commit then be refused (the
        // lease expired during the copy) or the coordinator die first, the
        // copies are files of an uncommitted attempt, which the job's end
        // deletes.
        if let Err(refusal) = self
            .state()
            .check_holder(r.shard_id, &r.worker_id, r.lease_token)
        {
            tracing::warn!(worker = %r.worker_id, shard = r.shard_id, token = r.lease_token, %refusal, "completion refused");
            return Ok(Response::new(pb::CompleteShardResponse {
                accepted: false,
                reason: refusal.to_string(),
            }));
        }
        let storage = self
            .shared
            .storage()
            .map_err(|e| Status::unavailable(e.to_string()))?;
        let mut files = Vec::with_capacity(r.files.len());
        for f in r.files {
            let fin = if f.path == allowed[0] {
                part_path(r.shard_id, r.lease_token)
            } else {
                rejects_path(r.shard_id, r.lease_token)
            };
            // A store error is transient for the worker, which retries.
            storage
                .copy(&f.path, &fin)
                .await
                .map_err(|e| Status::unavailable(format!("publishing {}: {e}", f.path)))?;
            files.push(OutputFile {
                path: fin,
                rows: f.rows,
                bytes: f.bytes,
                sha256: f.sha256,
                kind: f.kind,
            });
        }
        let outcome = self
            .state()
            .complete(
                r.shard_id,
                &r.worker_id,
                r.lease_token,
                files,
                totals.pairs_written,
                totals.rejects,
            )
            .map_err(ServiceError::from)?;
        if outcome.is_ok() {
            for p in &allowed {
                if let Err(e) = storage.delete(p).await {
                    tracing::warn!(path = %p, error = %e, "could not remove a published temporary file");
                }
            }
        }
        Ok(Response::new(match outcome {
            Ok(()) => {
                tracing::info!(worker = %r.worker_id, shard = r.shard_id, token = r.lease_token, pairs = totals.pairs_written, "shard committed");
                pb::CompleteShardResponse {
                    accepted: true,
                    reason: String::new(),
                }
            }
            Err(refusal) => {
                tracing::warn!(worker = %r.worker_id, shard = r.shard_id, token = r.lease_token, %refusal, "completion refused");
                pb::CompleteShardResponse {
                    accepted: false,
                    reason: refusal.to_string(),
                }
            }
        }))
    }

    async fn fail_shard(
        &self,
        req: Request<pb::FailShardRequest>,
    ) -> Result<Response<pb::FailShardResponse>, Status> {
        let r = req.into_inner();
        self.touch(&r.worker_id)?;
        if r.reason.trim().is_empty() {
            return Err(ServiceError::Invalid("a failure needs a reason".into()).into());
        }
        let will_retry = self
            .state()
            .fail(
                r.shard_id,
                &r.worker_id,
                r.lease_token,
                &r.reason,
                r.retryable,
            )
            .map_err(ServiceError::from)?;
        tracing::warn!(worker = %r.worker_id, shard = r.shard_id, reason = %r.reason, will_retry, "shard failed");
        Ok(Response::new(pb::FailShardResponse { will_retry }))
    }

    async fn job_status(
        &self,
        _req: Request<pb::JobStatusRequest>,
    ) -> Result<Response<pb::JobStatusResponse>, Status> {
        Ok(Response::new(status(&self.shared)))
    }
}

/// The job's status, for the RPC, the CLI and the HTTP status page.
pub fn status(shared: &Shared) -> pb::JobStatusResponse {
    let st = shared.state.lock().unwrap_or_else(|p| p.into_inner());
    let c = st.counts();
    let elapsed = shared.started.elapsed().as_secs_f64().max(1e-3);
    let rate = c.pairs as f64 / elapsed;
    let left_lines = c.lines_total.saturating_sub(c.lines_done) as f64;
    let line_rate = c.lines_done as f64 / elapsed;
    let eta = if line_rate > 0.0 {
        left_lines / line_rate
    } else {
        -1.0
    };
    let failed = st
        .shards()
        .filter_map(|s| match &s.status {
            crate::state::Status::Failed { reason } => Some(pb::FailedShard {
                shard_id: s.spec.shard_id,
                reason: reason.clone(),
                attempts: s.attempts,
            }),
            _ => None,
        })
        .collect();
    let leases_of = |id: &str| {
        st.shards()
            .filter(|s| matches!(&s.status, crate::state::Status::Leased { worker, .. } if worker == id))
            .count() as u32
    };
    let workers = shared
        .workers
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|w| pb::WorkerStatus {
            worker_id: w.id.clone(),
            name: w.name.clone(),
            device: w.device.clone(),
            leases: leases_of(&w.id),
            last_heartbeat_unix_ms: w.last_seen_ms,
        })
        .collect();
    pb::JobStatusResponse {
        job_id: st.job_id().to_string(),
        shards_total: c.total,
        shards_committed: c.committed,
        shards_leased: c.leased,
        shards_pending: c.pending,
        shards_failed: c.failed,
        pairs_written: c.pairs,
        rejects: c.rejects,
        pairs_per_second: rate,
        eta_seconds: eta,
        finished: st.finished(),
        workers,
        failed,
        output_url: shared.output.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::ShardSpec;
    use paraforge_core::proto::coordinator_client::CoordinatorClient;
    use paraforge_core::proto::coordinator_server::CoordinatorServer;

    async fn serve(dir: &std::path::Path) -> (String, tokio::task::JoinHandle<()>, Arc<Shared>) {
        let state = JobState::open(&dir.join("s.redb"), "job", 3, || {
            (0..2)
                .map(|i| ShardSpec {
                    shard_id: i,
                    input: "in.tsv".into(),
                    file_index: 0,
                    byte_start: i * 10,
                    byte_end: (i + 1) * 10,
                    first_line: i * 5 + 1,
                    lines: 5,
                })
                .collect()
        })
        .unwrap();
        let shared = Arc::new(Shared::new(
            state,
            "[job]".into(),
            "out".into(),
            "cpu".into(),
            Duration::from_secs(30),
        ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let svc = CoordinatorServer::new(CoordinatorService::new(shared.clone()));
        let h = tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
                .await
                .unwrap();
        });
        (format!("http://{addr}"), h, shared)
    }

    /// One LeaseShard call's answer for `worker`.
    async fn lease(
        c: &mut CoordinatorClient<tonic::transport::Channel>,
        worker: &str,
    ) -> Option<lease_shard_response::Result> {
        c.lease_shard(pb::LeaseShardRequest {
            worker_id: worker.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .result
    }

    #[tokio::test]
    async fn leases_and_commits_over_loopback_grpc() {
        let dir = tempfile::tempdir().unwrap();
        let (url, server, shared) = serve(dir.path()).await;
        let mut c = CoordinatorClient::connect(url).await.unwrap();
        // An unregistered worker is refused with NOT_FOUND.
        let e = c
            .lease_shard(pb::LeaseShardRequest {
                worker_id: "nobody".into(),
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::NotFound);
        // A version mismatch is FAILED_PRECONDITION.
        let e = c
            .register_worker(pb::RegisterWorkerRequest {
                version: "0.0.0-other".into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::FailedPrecondition);
        let reg = c
            .register_worker(pb::RegisterWorkerRequest {
                name: "t".into(),
                device: String::new(),
                slots: 1,
                version: env!("CARGO_PKG_VERSION").into(),
            })
            .await
            .unwrap()
            .into_inner();
        let w = reg.worker_id;
        let mut tokens = Vec::new();
        for _ in 0..2 {
            let r = lease(&mut c, &w).await;
            let Some(lease_shard_response::Result::Lease(l)) = r else {
                panic!("{r:?}")
            };
            tokens.push((l.shard.unwrap().shard_id, l.lease_token));
        }
        // Both shards are out: the third request waits.
        let r = lease(&mut c, &w).await;
        assert!(matches!(
            r,
            Some(lease_shard_response::Result::RetryAfterMs(_))
        ));
        let s = c
            .job_status(pb::JobStatusRequest {})
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            (s.workers.len(), s.workers[0].leases),
            (1, 2),
            "both leases are this worker's"
        );
        assert_eq!(
            s.workers[0].device, "cpu",
            "the job's device fills in an unnamed one"
        );
        // Output paths outside this lease's two files are refused.
        let (s0, t0) = tokens[0];
        for bad in [
            "../../etc/passwd",
            "shard=000000/part-t99999999.parquet",
            "/abs.parquet",
        ] {
            let e = c
                .complete_shard(pb::CompleteShardRequest {
                    worker_id: w.clone(),
                    shard_id: s0,
                    lease_token: t0,
                    files: vec![pb::OutputFile {
                        path: bad.into(),
                        ..Default::default()
                    }],
                    totals: None,
                })
                .await
                .unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument, "{bad}");
            assert!(e.message().contains(bad), "{}", e.message());
        }
        // Another worker, even with the right token, cannot complete or
        // heartbeat a shard it does not hold.
        let other = c
            .register_worker(pb::RegisterWorkerRequest {
                name: "u".into(),
                version: env!("CARGO_PKG_VERSION").into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .worker_id;
        let r = c
            .complete_shard(pb::CompleteShardRequest {
                worker_id: other.clone(),
                shard_id: s0,
                lease_token: t0,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert!(
            !r.accepted && r.reason.contains("another worker"),
            "{}",
            r.reason
        );
        let hb = c
            .heartbeat(pb::HeartbeatRequest {
                worker_id: other.clone(),
                leases: vec![pb::LeaseProgress {
                    shard_id: s0,
                    lease_token: t0,
                    ..Default::default()
                }],
            })
            .await
            .unwrap()
            .into_inner();
        assert!(hb.extended_tokens.is_empty() && hb.revoked_tokens == [t0]);
        for (shard, token) in &tokens {
            let ok = c
                .complete_shard(pb::CompleteShardRequest {
                    worker_id: w.clone(),
                    shard_id: *shard,
                    lease_token: *token,
                    files: vec![],
                    totals: Some(pb::Progress {
                        records_read: 5,
                        pairs_written: 5,
                        rejects: 0,
                    }),
                })
                .await
                .unwrap()
                .into_inner();
            assert!(ok.accepted, "{}", ok.reason);
        }
        // A repeated completion is refused, with the reason.
        let again = c
            .complete_shard(pb::CompleteShardRequest {
                worker_id: w.clone(),
                shard_id: tokens[0].0,
                lease_token: tokens[0].1,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert!(!again.accepted && again.reason.contains("already committed"));
        let r = lease(&mut c, &w).await;
        assert!(matches!(r, Some(lease_shard_response::Result::Done(true))));
        // The other worker has not asked since: a coordinator must keep
        // serving until it has been told, too.
        assert_eq!(shared.awaiting_done(), 1);
        let r = lease(&mut c, &other).await;
        assert!(matches!(r, Some(lease_shard_response::Result::Done(true))));
        assert_eq!(shared.awaiting_done(), 0);
        let s = c
            .job_status(pb::JobStatusRequest {})
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            (s.shards_committed, s.pairs_written, s.finished),
            (2, 10, true)
        );
        server.abort();
    }
}
