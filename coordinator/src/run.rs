//! Running a job's coordinator: serve its pages from the start, open (or
//! resume, `resume.rs`) the state, serve gRPC until every shard is
//! committed or failed; `finalize.rs` then ends the job.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use paraforge_job::config::JobConfig;
use paraforge_job::storage::{local_path, Storage};
use paraforge_rpc::proto::coordinator_server::CoordinatorServer;
use tokio::net::TcpListener;

use crate::live::Live;
use crate::phase::Phase;
use crate::resume::{claim_output, fix_model, open, reconcile};
use crate::service::CoordinatorService;
use crate::shared::Shared;
use crate::state::JobState;

pub use crate::error::{Incomplete, RunError};
pub use crate::finalize::{finalize, Manifest, ManifestFile, ManifestModel};
pub use crate::resume::{Claim, CLAIM};

/// The pages' own errors, as the job reports them.
impl From<crate::http::HttpError> for RunError {
    fn from(e: crate::http::HttpError) -> Self {
        match e {
            crate::http::HttpError::File { path, message } => {
                paraforge_rpc::access::AccessError::File { path, message }.into()
            }
            crate::http::HttpError::Tls { cert, key, message } => RunError::Tls {
                cert: cert.display().to_string(),
                key: key.display().to_string(),
                message,
            },
        }
    }
}

/// One of the coordinator's two servers, until it is stopped.
struct Server {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// The HTTP pages (`/status`, `/metrics`, `/healthz`), served from before
/// the job is planned until after its output is read back.
pub struct Pages {
    pub live: Arc<Live>,
    pub addr: SocketAddr,
    server: Server,
}

impl Pages {
    pub async fn stop(self) {
        self.server.stop().await;
    }
}

/// A running coordinator.
pub struct Running {
    pub shared: Arc<Shared>,
    pub grpc_addr: SocketAddr,
    pub http_addr: SocketAddr,
    grpc: Server,
    pages: Pages,
}

impl Running {
    /// Stops serving (for a restart test or a shutdown).
    pub async fn stop(self) {
        self.grpc.stop().await;
        self.pages.stop().await;
    }

    /// Stops taking workers; the pages go on answering while the output is
    /// finalized and read back.
    pub async fn stop_grpc(self) -> Pages {
        self.grpc.stop().await;
        self.pages
    }

    pub fn live(&self) -> &Arc<Live> {
        &self.pages.live
    }
}

/// The state file: `coordinator.state`, else `<output>/_coordinator.redb`
/// for a local output.
pub fn state_path(cfg: &JobConfig) -> Result<PathBuf, RunError> {
    match (&cfg.coordinator.state, local_path(&cfg.job.output)) {
        (Some(p), _) => Ok(PathBuf::from(p)),
        (None, Some(out)) => Ok(out.join("_coordinator.redb")),
        (None, None) => Err(RunError::NoStatePath(cfg.job.output.clone())),
    }
}

fn parse_addr(what: &'static str, s: &str) -> Result<SocketAddr, RunError> {
    s.parse::<SocketAddr>().map_err(|e| RunError::Bind {
        what,
        addr: s.to_string(),
        message: e.to_string(),
    })
}

async fn bind_addr(what: &'static str, addr: SocketAddr) -> Result<TcpListener, RunError> {
    TcpListener::bind(addr).await.map_err(|e| RunError::Bind {
        what,
        addr: addr.to_string(),
        message: e.to_string(),
    })
}

/// A coordinator whose pages answer and whose job is not yet planned (or
/// resumed): [`Starting::start`] does that, which may take minutes.
pub struct Starting {
    cfg: JobConfig,
    path: PathBuf,
    storage: Storage,
    token: Option<String>,
    pages: Pages,
}

/// Serves the pages of the job in `cfg` (`metrics` overrides
/// `coordinator.metrics`; port 0 picks a free port), before anything slow.
pub async fn bind(cfg: &JobConfig, metrics: Option<SocketAddr>) -> Result<Starting, RunError> {
    let path = state_path(cfg)?;
    let out = &cfg.job.output;
    if local_path(out).is_some_and(|p| p.is_file()) {
        return Err(RunError::OutputNotDirectory(out.clone()));
    }
    let storage = Storage::open(out)?;
    let c = &cfg.coordinator;
    let token =
        paraforge_rpc::access::load_token(c.auth_token_file.as_deref().map(std::path::Path::new))?;
    // The pages show the job and its failures: the same token and
    // certificate guard them as the gRPC side.
    let access = crate::http::HttpAccess {
        token: token.clone().map(Arc::from),
        tls: match (&c.tls_cert, &c.tls_key) {
            (Some(cert), Some(key)) => Some(crate::http::tls_config(cert.as_ref(), key.as_ref())?),
            _ => None,
        },
    };
    let addr = match metrics {
        Some(a) => a,
        None => parse_addr("metrics address", &c.metrics)?,
    };
    let listener = bind_addr("metrics address", addr).await?;
    let addr = listener.local_addr().unwrap_or(addr);
    let phase = if path.exists() {
        Phase::Resuming
    } else {
        Phase::Planning
    };
    let live = Live::new(&cfg.job.name, out, phase);
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let l = live.clone();
    let task = tokio::spawn(async move {
        let r = crate::http::serve(listener, l, access, async move {
            let _ = stopped.wait_for(|s| *s).await;
        })
        .await;
        if let Err(e) = r {
            tracing::error!(error = %e, "metrics server stopped");
        }
    });
    tracing::info!(%addr, job = %cfg.job.name, phase = phase.as_str(), "coordinator pages up");
    Ok(Starting {
        cfg: cfg.clone(),
        path,
        storage,
        token,
        pages: Pages {
            live,
            addr,
            server: Server { stop, task },
        },
    })
}

/// Starts serving the job; `listen`/`metrics` override the config's
/// addresses (port 0 picks a free port).
pub async fn start(
    cfg: &JobConfig,
    listen: Option<SocketAddr>,
    metrics: Option<SocketAddr>,
) -> Result<Running, RunError> {
    bind(cfg, metrics).await?.start(listen).await
}

impl Starting {
    pub fn http_addr(&self) -> SocketAddr {
        self.pages.addr
    }

    pub fn live(&self) -> &Arc<Live> {
        &self.pages.live
    }

    /// Plans the job (or checks a resumed one against its plan), claims
    /// its output and serves gRPC; `listen` overrides `coordinator.listen`.
    /// On an error the pages stop too.
    pub async fn start(self, listen: Option<SocketAddr>) -> Result<Running, RunError> {
        let Starting {
            cfg,
            path,
            storage,
            token,
            pages,
        } = self;
        match open(&cfg, &path, &storage).await {
            Ok(state) => {
                match serve(&cfg, state, path, storage, token, &pages.live, listen).await {
                    Ok((shared, grpc_addr, grpc)) => Ok(Running {
                        shared,
                        grpc_addr,
                        http_addr: pages.addr,
                        grpc,
                        pages,
                    }),
                    Err(e) => {
                        pages.stop().await;
                        Err(e)
                    }
                }
            }
            Err(e) => {
                pages.stop().await;
                Err(e)
            }
        }
    }
}

/// Claims the output, checks the model and the committed files, and serves
/// gRPC on the opened state.
async fn serve(
    cfg: &JobConfig,
    state: JobState,
    path: PathBuf,
    storage: Storage,
    token: Option<String>,
    live: &Arc<Live>,
    listen: Option<SocketAddr>,
) -> Result<(Arc<Shared>, SocketAddr, Server), RunError> {
    let job_id = cfg.job.name.clone();
    let claim = Claim {
        job: job_id.clone(),
        run_id: state.run_id().to_string(),
        state: path.display().to_string(),
    };
    if let Err(e) = claim_output(cfg, &storage, &claim).await {
        // A state made just now for a job that may not run is no use later.
        if state.created() {
            drop(state);
            let _ = std::fs::remove_file(&path);
        }
        return Err(e);
    }
    let mut state = state;
    fix_model(cfg, &mut state).await?;
    reconcile(&mut state, &storage).await?;
    let mut shared = Shared::new(
        state,
        cfg.to_toml(),
        cfg.job.output.clone(),
        cfg.model
            .as_ref()
            .map_or_else(|| "none".to_string(), |m| m.device.clone()),
        Duration::from_secs(cfg.job.lease_seconds as u64),
    );
    shared.metrics = live.event_metrics();
    shared.max_reject_rate = cfg.job.max_reject_rate;
    shared.filters = cfg.filters.clone();
    shared.beam_candidates = cfg.beam_candidates() as u64;
    shared.model_dir = cfg.model.as_ref().map(|m| m.dir.clone());
    shared.input = paraforge_core::layout::card::ManifestInput {
        format: serde_json::to_value(cfg.input.format)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
        paths: cfg.input.paths.clone(),
        reference_paths: cfg.input.reference_paths.clone(),
    };
    shared.skips_blank_lines = cfg.input.format == paraforge_job::config::FormatName::Czeng20;
    let shared = Arc::new(shared);
    let grpc = match listen {
        Some(a) => a,
        None => parse_addr("gRPC listen address", &cfg.coordinator.listen)?,
    };
    let grpc_l = bind_addr("gRPC listen address", grpc).await?;
    let grpc_addr = grpc_l.local_addr().unwrap_or(grpc);
    let c = &cfg.coordinator;
    if token.is_none() && !grpc_addr.ip().is_loopback() {
        tracing::warn!(addr = %grpc_addr, "the coordinator listens beyond loopback without an access token: set coordinator.auth_token_file or PARAFORGE_TOKEN");
    }
    let svc = tonic::service::interceptor::InterceptedService::new(
        CoordinatorServer::new(CoordinatorService::new(shared.clone()))
            .max_decoding_message_size(c.max_message_bytes)
            .max_encoding_message_size(c.max_message_bytes),
        paraforge_rpc::access::RequireToken::new(token),
    );
    let mut builder = tonic::transport::Server::builder();
    if let (Some(cert), Some(key)) = (&c.tls_cert, &c.tls_key) {
        paraforge_rpc::access::init_tls();
        let read = |p: &String| {
            std::fs::read(p).map_err(|e| paraforge_rpc::access::AccessError::File {
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
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(async move {
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(grpc_l);
        let r = builder
            .add_service(svc)
            .serve_with_incoming_shutdown(incoming, async move {
                let _ = stopped.wait_for(|s| *s).await;
            })
            .await;
        if let Err(e) = r {
            tracing::error!(error = %e, "gRPC server stopped");
        }
    });
    live.attach(shared.clone());
    tracing::info!(%grpc_addr, job = %job_id, "coordinator serving");
    Ok((shared, grpc_addr, Server { stop, task }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(output: &str) -> JobConfig {
        let text = format!(
            "[job]\nname = \"t\"\noutput = \"{output}\"\n[input]\npaths = [\"in.tsv\"]\nformat = \"czeng16\"\n[model]\ndir = \"m\"\n"
        );
        JobConfig::parse(&text, std::path::Path::new("t.toml")).unwrap()
    }

    #[test]
    fn a_file_url_output_keeps_its_state_beside_the_output() {
        // `file://` is a local directory everywhere else; the state path
        // used to refuse it as an object store.
        let p = state_path(&cfg("file:///data/out")).unwrap();
        assert_eq!(p, PathBuf::from("/data/out/_coordinator.redb"));
        assert_eq!(
            state_path(&cfg("out")).unwrap(),
            PathBuf::from("out/_coordinator.redb")
        );
        assert!(matches!(
            state_path(&cfg("s3://bucket/out")),
            Err(RunError::NoStatePath(_))
        ));
    }
}
