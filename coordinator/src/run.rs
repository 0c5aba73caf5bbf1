//! Running a job's coordinator: open (or resume) the state, serve gRPC and
//! HTTP, wait until every shard is committed or failed, then finalize the
//! output: delete files of attempts that were not committed, write
//! `_manifest.json` and, last, `_SUCCESS`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use paraforge_core::config::JobConfig;
use paraforge_core::proto::coordinator_server::CoordinatorServer;
use paraforge_core::storage::{Storage, StorageError};
use serde::Serialize;

use crate::plan::{plan, PlanError};
use crate::service::{CoordinatorService, Shared};
use crate::state::{JobState, StateError, Status};

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("{what} {addr}: {message}")]
    Bind {
        what: &'static str,
        addr: String,
        message: String,
    },
    #[error("coordinator.state must be set for an object-store output ({0})")]
    NoStatePath(String),
    #[error(transparent)]
    Access(#[from] paraforge_core::access::AccessError),
    #[error("TLS ({cert}, {key}): {message}")]
    Tls {
        cert: String,
        key: String,
        message: String,
    },
}

/// A running coordinator.
pub struct Running {
    pub shared: Arc<Shared>,
    pub grpc_addr: SocketAddr,
    pub http_addr: SocketAddr,
    stop: tokio::sync::watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Running {
    /// Stops serving (for a restart test or a shutdown).
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

/// The state file: `coordinator.state`, else `<output>/_coordinator.redb`
/// for a local output.
pub fn state_path(cfg: &JobConfig) -> Result<PathBuf, RunError> {
    match &cfg.coordinator.state {
        Some(p) => Ok(PathBuf::from(p)),
        None if cfg.job.output.contains("://") => {
            Err(RunError::NoStatePath(cfg.job.output.clone()))
        }
        None => Ok(PathBuf::from(&cfg.job.output).join("_coordinator.redb")),
    }
}

/// Starts serving the job; `listen`/`metrics` override the config's
/// addresses (port 0 picks a free port).
pub async fn start(
    cfg: &JobConfig,
    listen: Option<SocketAddr>,
    metrics: Option<SocketAddr>,
) -> Result<Running, RunError> {
    let path = state_path(cfg)?;
    let job_id = cfg.job.name.clone();
    let mut planned = None;
    if !path.exists() {
        // Planning reads every input once (blocking I/O, maybe remote).
        let c = cfg.clone();
        planned = Some(
            tokio::task::spawn_blocking(move || plan(&c))
                .await
                .map_err(|e| {
                    RunError::Plan(PlanError::Io {
                        path: PathBuf::from(&cfg.input.paths.join(", ")),
                        source: std::io::Error::other(e.to_string()),
                    })
                })??,
        );
    }
    let state = JobState::open(&path, &job_id, cfg.job.max_attempts, || {
        planned.take().unwrap_or_default()
    })?;
    let shared = Arc::new(Shared::new(
        state,
        cfg.to_toml(),
        cfg.job.output.clone(),
        cfg.model.device.clone(),
        Duration::from_secs(cfg.job.lease_seconds as u64),
    ));
    let parse = |what: &'static str, s: &str| {
        s.parse::<SocketAddr>().map_err(|e| RunError::Bind {
            what,
            addr: s.to_string(),
            message: e.to_string(),
        })
    };
    let grpc = match listen {
        Some(a) => a,
        None => parse("gRPC listen address", &cfg.coordinator.listen)?,
    };
    let http = match metrics {
        Some(a) => a,
        None => parse("metrics address", &cfg.coordinator.metrics)?,
    };
    let bind = |what: &'static str, addr: SocketAddr| async move {
        tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| RunError::Bind {
                what,
                addr: addr.to_string(),
                message: e.to_string(),
            })
    };
    let grpc_l = bind("gRPC listen address", grpc).await?;
    let http_l = bind("metrics address", http).await?;
    let (grpc_addr, http_addr) = (
        grpc_l.local_addr().unwrap_or(grpc),
        http_l.local_addr().unwrap_or(http),
    );
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let c = &cfg.coordinator;
    let token =
        paraforge_core::access::load_token(c.auth_token_file.as_deref().map(std::path::Path::new))?;
    if token.is_none() && !grpc_addr.ip().is_loopback() {
        tracing::warn!(addr = %grpc_addr, "the coordinator listens beyond loopback without an access token: set coordinator.auth_token_file or PARAFORGE_TOKEN");
    }
    let svc = tonic::service::interceptor::InterceptedService::new(
        CoordinatorServer::new(CoordinatorService::new(shared.clone()))
            .max_decoding_message_size(c.max_message_bytes)
            .max_encoding_message_size(c.max_message_bytes),
        paraforge_core::access::RequireToken::new(token),
    );
    let mut builder = tonic::transport::Server::builder();
    if let (Some(cert), Some(key)) = (&c.tls_cert, &c.tls_key) {
        paraforge_core::access::init_tls();
        let read = |p: &String| {
            std::fs::read(p).map_err(|e| paraforge_core::access::AccessError::File {
                path: PathBuf::from(p),
                message: e.to_string(),
            })
        };
        let identity = tonic::transport::Identity::from_pem(read(cert)?, read(key)?);
        builder = builder
            .tls_config(tonic::transport::ServerTlsConfig::new().identity(identity))
            .map_err(|e| RunError::Tls {
                cert: cert.clone(),
                key: key.clone(),
                message: e.to_string(),
            })?;
    }
    let mut s1 = stopped.clone();
    let t1 = tokio::spawn(async move {
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(grpc_l);
        let r = builder
            .add_service(svc)
            .serve_with_incoming_shutdown(incoming, async move {
                let _ = s1.wait_for(|s| *s).await;
            })
            .await;
        if let Err(e) = r {
            tracing::error!(error = %e, "gRPC server stopped");
        }
    });
    let router = crate::http::router(shared.clone());
    let mut s2 = stopped;
    let t2 = tokio::spawn(async move {
        let r = axum::serve(http_l, router)
            .with_graceful_shutdown(async move {
                let _ = s2.wait_for(|s| *s).await;
            })
            .await;
        if let Err(e) = r {
            tracing::error!(error = %e, "metrics server stopped");
        }
    });
    tracing::info!(%grpc_addr, %http_addr, job = %job_id, "coordinator serving");
    Ok(Running {
        shared,
        grpc_addr,
        http_addr,
        stop,
        tasks: vec![t1, t2],
    })
}

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
    pub job: String,
    pub paraforge_version: String,
    pub shards_total: u64,
    pub shards_committed: u64,
    pub shards_failed: Vec<(u64, String)>,
    pub pairs: u64,
    pub rejects: u64,
    pub files: Vec<ManifestFile>,
    pub rejects_files: Vec<ManifestFile>,
    pub removed_uncommitted: Vec<String>,
    pub config: String,
}

/// Deletes files of uncommitted attempts and writes the manifest and
/// `_SUCCESS`. Safe to run again: it recomputes everything from the state.
pub async fn finalize(shared: &Shared, storage: &Storage) -> Result<Manifest, RunError> {
    let (mut files, mut rejects_files, mut failed) = (Vec::new(), Vec::new(), Vec::new());
    let (counts, job) = {
        let st = shared.state.lock().unwrap_or_else(|p| p.into_inner());
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
                        if f.kind == "rejects" {
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
        (st.counts(), st.job_id().to_string())
    };
    let keep: std::collections::HashSet<&str> = files
        .iter()
        .chain(&rejects_files)
        .map(|f| f.path.as_str())
        .collect();
    let mut removed = Vec::new();
    for (path, _) in storage.list("").await? {
        let ours = path.starts_with("shard=")
            || path.starts_with("_rejects/")
            || path.starts_with("_tmp/");
        if ours && !keep.contains(path.as_str()) {
            storage.delete(&path).await?;
            removed.push(path);
        }
    }
    let manifest = Manifest {
        job,
        paraforge_version: env!("CARGO_PKG_VERSION").into(),
        shards_total: counts.total,
        shards_committed: counts.committed,
        shards_failed: failed,
        pairs: counts.pairs,
        rejects: counts.rejects,
        files,
        rejects_files,
        removed_uncommitted: removed,
        config: shared.config_toml.clone(),
    };
    let json = serde_json::to_vec_pretty(&manifest).unwrap_or_default();
    storage.put("_manifest.json", json.into()).await?;
    storage
        .put_if_absent("_SUCCESS", bytes::Bytes::new())
        .await?;
    Ok(manifest)
}
