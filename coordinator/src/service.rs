//! The gRPC face of the coordinator (`paraforge.v1.Coordinator`): thin
//! handlers that authenticate the caller, call the worker registry
//! (`registry.rs`), the job state, the checks (`verify.rs`) and the commit
//! of a completion (`commit.rs`), and answer. Errors are one type
//! ([`ServiceError`]), mapped to gRPC status codes here and nowhere else:
//! which code a failure gets decides whether a worker retries, registers
//! again or gives up.
//!
//! Nothing a worker says is taken on trust: every call after registration
//! carries the secret the worker got then, and a completion counts only the
//! rows its files hold (read back and checked before they are published).

use std::sync::Arc;

use paraforge_rpc::proto::coordinator_server::Coordinator;
use paraforge_rpc::proto::{self as pb, lease_shard_response};
use tonic::{Request, Response, Status};

use crate::bounded::{truncate, MAX_REASON_BYTES};
use crate::commit::{self, Verdict};
use crate::error::ServiceError;
use crate::shared::{now_ms, Shared};
use crate::state::{FailOutcome, StateError};
use crate::verify::check_model;

/// How long an idle worker waits before asking for a shard again.
pub const RETRY_AFTER_MS: u32 = 1000;

impl From<ServiceError> for Status {
    fn from(e: ServiceError) -> Status {
        let msg = e.to_string();
        match e {
            // NOT_FOUND means this and nothing else: workers register again
            // on it, so an unknown shard must not share the code.
            ServiceError::UnknownWorker(_) => Status::not_found(msg),
            ServiceError::WrongSecret(_) => Status::permission_denied(msg),
            ServiceError::VersionMismatch { .. } | ServiceError::ModelMismatch { .. } => {
                Status::failed_precondition(msg)
            }
            ServiceError::Invalid(_) | ServiceError::TooLong { .. } => {
                Status::invalid_argument(msg)
            }
            ServiceError::State(StateError::UnknownShard(_)) => Status::invalid_argument(msg),
            // Transient: the worker retries the call.
            ServiceError::Storage { .. } => Status::unavailable(msg),
            ServiceError::Entropy(_) | ServiceError::State(_) => Status::internal(msg),
        }
    }
}

/// The tonic service.
#[derive(Clone)]
pub struct CoordinatorService {
    shared: Arc<Shared>,
}

impl CoordinatorService {
    pub fn new(shared: Arc<Shared>) -> CoordinatorService {
        CoordinatorService { shared }
    }

    /// The caller is `worker` only with its secret.
    fn authenticate(&self, worker: &str, secret: &str) -> Result<(), ServiceError> {
        self.shared.workers.authenticate(worker, secret, now_ms())
    }
}

#[tonic::async_trait]
impl Coordinator for CoordinatorService {
    async fn register_worker(
        &self,
        req: Request<pb::RegisterWorkerRequest>,
    ) -> Result<Response<pb::RegisterWorkerResponse>, Status> {
        let _t = self.shared.metrics.rpc("RegisterWorker");
        let r = req.into_inner();
        let reg = self.shared.workers.register(
            &r.version,
            &r.name,
            &r.device,
            &self.shared.device,
            now_ms(),
        )?;
        // One lock for both: a second guard in the same expression would
        // wait on the first.
        let (job_id, model_sha256) = {
            let st = self.shared.state();
            (
                st.job_id().to_string(),
                st.model_sha256().unwrap_or_default().to_string(),
            )
        };
        Ok(Response::new(pb::RegisterWorkerResponse {
            worker_id: reg.worker_id,
            job_id,
            config_toml: self.shared.config_toml.clone(),
            heartbeat_interval_ms: self.shared.heartbeat.as_millis() as u32,
            worker_secret: reg.worker_secret,
            model_sha256,
        }))
    }

    async fn lease_shard(
        &self,
        req: Request<pb::LeaseShardRequest>,
    ) -> Result<Response<pb::LeaseShardResponse>, Status> {
        let _t = self.shared.metrics.rpc("LeaseShard");
        let r = req.into_inner();
        self.authenticate(&r.worker_id, &r.worker_secret)?;
        let mut st = self.shared.state();
        let job_model = check_model(&mut st, &r.worker_id, &r.model_sha256)?;
        let lease = st
            .lease(&r.worker_id, now_ms(), self.shared.lease.as_millis() as u64)
            .map_err(ServiceError::from)?;
        let result = match lease {
            Some(l) => {
                tracing::info!(worker = %r.worker_id, shard = l.spec.shard_id, token = l.token, attempt = l.attempt, "shard leased");
                lease_shard_response::Result::Lease(pb::Lease {
                    shard: Some(crate::plan::wire_spec(&l.spec)),
                    lease_token: l.token,
                    attempt: l.attempt,
                    model_sha256: job_model,
                })
            }
            None if st.finished() => {
                drop(st);
                self.shared.workers.mark_told_done(&r.worker_id);
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
        let _t = self.shared.metrics.rpc("Heartbeat");
        let r = req.into_inner();
        self.authenticate(&r.worker_id, &r.worker_secret)?;
        self.shared.workers.record_figures(&r.worker_id, r.metrics);
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
        let (_extended, revoked) = self
            .shared
            .state()
            .heartbeat(&r.worker_id, &leases, now, lease_ms)
            .map_err(ServiceError::from)?;
        Ok(Response::new(pb::HeartbeatResponse {
            revoked_tokens: revoked,
        }))
    }

    async fn complete_shard(
        &self,
        req: Request<pb::CompleteShardRequest>,
    ) -> Result<Response<pb::CompleteShardResponse>, Status> {
        let _t = self.shared.metrics.rpc("CompleteShard");
        let mut r = req.into_inner();
        self.authenticate(&r.worker_id, &r.worker_secret)?;
        // The worker's figures count whatever becomes of the completion.
        self.shared
            .workers
            .record_figures(&r.worker_id, r.metrics.take());
        Ok(Response::new(
            match commit::complete(&self.shared, &r).await? {
                Verdict::Committed => pb::CompleteShardResponse {
                    accepted: true,
                    reason: String::new(),
                },
                Verdict::Refused(reason) => pb::CompleteShardResponse {
                    accepted: false,
                    reason,
                },
            },
        ))
    }

    async fn fail_shard(
        &self,
        req: Request<pb::FailShardRequest>,
    ) -> Result<Response<pb::FailShardResponse>, Status> {
        let _t = self.shared.metrics.rpc("FailShard");
        let r = req.into_inner();
        self.authenticate(&r.worker_id, &r.worker_secret)?;
        if r.reason.trim().is_empty() {
            return Err(ServiceError::Invalid("a failure needs a reason".into()).into());
        }
        let reason = truncate(&r.reason, MAX_REASON_BYTES);
        if r.given_back {
            // A worker giving its shard back is stopping: nothing to tell it.
            self.shared.workers.mark_told_done(&r.worker_id);
            let taken = self
                .shared
                .state()
                .give_back(r.shard_id, &r.worker_id, r.lease_token)
                .map_err(ServiceError::from)?;
            tracing::warn!(worker = %r.worker_id, shard = r.shard_id, token = r.lease_token, taken, "a stopping worker gave its shard back");
            return Ok(Response::new(pb::FailShardResponse { will_retry: taken }));
        }
        let outcome = self
            .shared
            .state()
            .fail(
                r.shard_id,
                &r.worker_id,
                r.lease_token,
                &reason,
                r.retryable,
            )
            .map_err(ServiceError::from)?;
        match outcome {
            FailOutcome::Retried => {
                tracing::warn!(worker = %r.worker_id, shard = r.shard_id, %reason, "shard attempt failed; it will be retried")
            }
            FailOutcome::Failed => {
                tracing::error!(worker = %r.worker_id, shard = r.shard_id, %reason, "shard failed for good")
            }
            FailOutcome::Stale => {
                tracing::info!(worker = %r.worker_id, shard = r.shard_id, token = r.lease_token, %reason, "failure of a lease no longer held; ignored")
            }
        }
        Ok(Response::new(pb::FailShardResponse {
            will_retry: outcome == FailOutcome::Retried,
        }))
    }

    async fn job_status(
        &self,
        _req: Request<pb::JobStatusRequest>,
    ) -> Result<Response<pb::JobStatusResponse>, Status> {
        let _t = self.shared.metrics.rpc("JobStatus");
        Ok(Response::new(self.shared.status()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::MAX_NAME_BYTES;
    use crate::state::{JobState, ShardSpec};
    use paraforge_core::layout::OutputLayout;
    use paraforge_rpc::proto::coordinator_client::CoordinatorClient;
    use paraforge_rpc::proto::coordinator_server::CoordinatorServer;
    use std::time::Duration;

    async fn serve(dir: &std::path::Path) -> (String, tokio::task::JoinHandle<()>, Arc<Shared>) {
        let state = JobState::open(&dir.join("s.redb"), "job", 3, || {
            (0..2)
                .map(|i| ShardSpec {
                    shard_id: i,
                    input: "in.tsv".into(),
                    file_index: 0,
                    range: paraforge_job::bitext::Range::bytes(i * 10, (i + 1) * 10, i * 5 + 1, 5),
                    drop_lines: Vec::new(),
                })
                .collect()
        })
        .unwrap();
        let shared = Arc::new(Shared::new(
            state,
            "[job]".into(),
            dir.join("out").display().to_string(),
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
        worker: &pb::RegisterWorkerResponse,
    ) -> Option<lease_shard_response::Result> {
        c.lease_shard(pb::LeaseShardRequest {
            worker_id: worker.worker_id.clone(),
            worker_secret: worker.worker_secret.clone(),
            model_sha256: "ab".repeat(32),
        })
        .await
        .unwrap()
        .into_inner()
        .result
    }

    /// Writes an attempt's two files (`pairs` rows, no rejects) where a
    /// worker would, and describes them truthfully.
    async fn attempt_files(
        shared: &Shared,
        shard: u64,
        token: u64,
        pairs: usize,
    ) -> Vec<pb::OutputFile> {
        use paraforge_core::{PairRow, RowsBuilder, Scorer};
        use sha2::Digest;
        let mut b = RowsBuilder::default();
        let mut scorer = Scorer::new(None);
        for i in 0..pairs {
            b.push(&PairRow {
                id: format!("p{i}"),
                source: "s".into(),
                reference: "a b".into(),
                translation: "a c".into(),
                candidate_rank: 1,
                translation_score: Some(-1.0),
                source_len: Some(1),
                truncated: false,
                scores: scorer.score("a b", "a c"),
            });
        }
        let mut pq = Vec::new();
        // Translated by the model the tests' leases name.
        let props = parquet::file::properties::WriterProperties::builder()
            .set_key_value_metadata(Some(vec![parquet::file::metadata::KeyValue::new(
                paraforge_core::schema::meta::MODEL_SHA256.to_string(),
                "ab".repeat(32),
            )]))
            .build();
        let mut w = parquet::arrow::ArrowWriter::try_new(
            &mut pq,
            paraforge_core::schema::schema(),
            Some(props),
        )
        .unwrap();
        w.write(&b.finish()).unwrap();
        w.close().unwrap();
        let storage = shared.storage().unwrap();
        let mut files = Vec::new();
        for (path, bytes, rows) in [
            (OutputLayout::temp_part_path(shard, token), pq, pairs as u64),
            (OutputLayout::temp_rejects_path(shard, token), Vec::new(), 0),
        ] {
            files.push(pb::OutputFile {
                path: path.clone(),
                rows,
                bytes: bytes.len() as u64,
                sha256: hex::encode(sha2::Sha256::digest(&bytes)),
            });
            storage.put(&path, bytes.into()).await.unwrap();
        }
        files
    }

    /// A worker's figures after `n` one-batch, ten-sentence steps.
    fn figures(n: u64) -> pb::WorkerMetrics {
        let mut batch_buckets = vec![0; paraforge_rpc::proto::BATCH_SECONDS_BOUNDS.len() + 1];
        batch_buckets[3] = n;
        pb::WorkerMetrics {
            uptime_ms: n,
            sentences: n * 10,
            source_tokens: n * 100,
            output_tokens: n * 120,
            batches: n,
            batch_seconds: n as f64 * 0.07,
            batch_buckets,
        }
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
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::NotFound);
        // A name past the limit is INVALID_ARGUMENT naming it.
        let e = c
            .register_worker(pb::RegisterWorkerRequest {
                name: "n".repeat(MAX_NAME_BYTES + 1),
                version: env!("CARGO_PKG_VERSION").into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(e.message().contains("128"), "{}", e.message());
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
                version: env!("CARGO_PKG_VERSION").into(),
            })
            .await
            .unwrap()
            .into_inner();
        let w = reg.worker_id.clone();
        let mut tokens = Vec::new();
        for _ in 0..2 {
            let r = lease(&mut c, &reg).await;
            let Some(lease_shard_response::Result::Lease(l)) = r else {
                panic!("{r:?}")
            };
            tokens.push((l.shard.unwrap().shard_id, l.lease_token));
        }
        // Both shards are out: the third request waits.
        let r = lease(&mut c, &reg).await;
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
                    worker_secret: reg.worker_secret.clone(),
                    shard_id: s0,
                    lease_token: t0,
                    files: vec![pb::OutputFile {
                        path: bad.into(),
                        ..Default::default()
                    }],
                    ..Default::default()
                })
                .await
                .unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument, "{bad}");
            assert!(e.message().contains(bad), "{}", e.message());
        }
        // Another worker, even with the right token, cannot complete or
        // heartbeat a shard it does not hold.
        let other_reg = c
            .register_worker(pb::RegisterWorkerRequest {
                name: "u".into(),
                version: env!("CARGO_PKG_VERSION").into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let other = other_reg.worker_id.clone();
        let r = c
            .complete_shard(pb::CompleteShardRequest {
                worker_id: other.clone(),
                worker_secret: other_reg.worker_secret.clone(),
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
                worker_secret: other_reg.worker_secret.clone(),
                leases: vec![pb::LeaseProgress {
                    shard_id: s0,
                    lease_token: t0,
                    ..Default::default()
                }],
                metrics: None,
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(hb.revoked_tokens, [t0]);
        for (shard, token) in &tokens {
            let ok = c
                .complete_shard(pb::CompleteShardRequest {
                    worker_id: w.clone(),
                    worker_secret: reg.worker_secret.clone(),
                    shard_id: *shard,
                    lease_token: *token,
                    files: attempt_files(&shared, *shard, *token, 5).await,
                    totals: Some(pb::Progress {
                        pairs_written: 5,
                        rejects: 0,
                        lines_read: 5,
                    }),
                    metrics: Some(figures(*token)),
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
                worker_secret: reg.worker_secret.clone(),
                shard_id: tokens[0].0,
                lease_token: tokens[0].1,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert!(!again.accepted && again.reason.contains("already committed"));
        // The page shows the newest figures this worker sent, under its id
        // and the job's device, beside the counts of what happened.
        let page = crate::metrics::render(&*crate::live::Live::serving(shared.clone())).unwrap();
        let last = tokens.iter().map(|t| t.1).max().unwrap();
        for want in [
            format!("paraforge_worker_sentences_total{{worker=\"{w}\",device=\"cpu\"}} {}", last * 10),
            format!("paraforge_worker_batch_duration_seconds_count{{worker=\"{w}\",device=\"cpu\"}} {last}"),
            "paraforge_shard_duration_seconds_count 2".to_string(),
            "paraforge_pairs_committed_total 10".to_string(),
            "paraforge_completions_refused_total{reason=\"already_committed\"} 1".to_string(),
            "paraforge_completions_refused_total{reason=\"not_holder\"} 1".to_string(),
            "paraforge_rpc_duration_seconds_count{method=\"CompleteShard\"}".to_string(),
        ] {
            assert!(page.contains(&want), "{want} missing:\n{page}");
        }
        assert!(page.ends_with("# EOF\n"));
        let r = lease(&mut c, &reg).await;
        assert!(matches!(r, Some(lease_shard_response::Result::Done(true))));
        // The other worker has not asked since: a coordinator must keep
        // serving until it has been told, too.
        assert_eq!(shared.awaiting_done(), 1);
        let r = lease(&mut c, &other_reg).await;
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
        // Published under final names, with the checked bytes.
        let storage = shared.storage().unwrap();
        for (shard, token) in &tokens {
            assert!(storage
                .exists(&OutputLayout::part_path(*shard, *token))
                .await
                .unwrap());
            assert!(!storage
                .exists(&OutputLayout::temp_part_path(*shard, *token))
                .await
                .unwrap());
        }
        server.abort();
    }
}
