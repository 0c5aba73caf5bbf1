//! The coordinator's HTTP side: Prometheus metrics at `/metrics` and the
//! job status as JSON at `/status` (what `paraforge status` prints, and the
//! coordinator's phase), plus `/healthz` for probes, which says nothing
//! about the job. They answer from the coordinator's first moment
//! (`live::Live`), before the job is planned and after its workers are
//! gone.
//!
//! The pages show the job, its output URL and failure reasons, so they are
//! guarded like gRPC: with the job's token they need `Authorization: Bearer
//! TOKEN` (checked in constant time), and with its certificate they are
//! served over TLS only. A job without a token keeps them open.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tokio::net::{TcpListener, TcpStream};

use crate::live::Live;

/// What can go wrong setting up the pages' TLS.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("{path}: {message}")]
    File { path: PathBuf, message: String },
    #[error("TLS ({cert}, {key}): {message}")]
    Tls {
        cert: PathBuf,
        key: PathBuf,
        message: String,
    },
}

/// Who may read the pages.
#[derive(Clone, Default)]
pub struct HttpAccess {
    /// The job's access token; `None` leaves the pages open.
    pub token: Option<Arc<str>>,
    /// The job's certificate; `None` serves plain HTTP.
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

/// A rustls server configuration from PEM files (the certificate chain and
/// its private key), the same files the gRPC side uses.
pub fn tls_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, HttpError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    paraforge_rpc::access::init_tls();
    let read = |p: &Path| {
        std::fs::read(p).map_err(|e| HttpError::File {
            path: p.to_path_buf(),
            message: e.to_string(),
        })
    };
    let tls_err = |message: String| HttpError::Tls {
        cert: cert.to_path_buf(),
        key: key.to_path_buf(),
        message,
    };
    let chain = CertificateDer::pem_slice_iter(&read(cert)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| tls_err(format!("reading the certificate chain: {e}")))?;
    if chain.is_empty() {
        return Err(tls_err("no certificate in the certificate file".into()));
    }
    let key_der = PrivateKeyDer::from_pem_slice(&read(key)?)
        .map_err(|e| tls_err(format!("reading the private key: {e}")))?;
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(chain, key_der)
        .map_err(|e| tls_err(e.to_string()))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

pub fn router(live: Arc<Live>, token: Option<Arc<str>>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/status", get(status_json))
        // Guards the routes above, not /healthz below.
        .route_layer(middleware::from_fn_with_state(token, require_token))
        .route("/healthz", get(|| async { "ok\n" }))
        .with_state(live)
}

/// Refuses a request without the right bearer token (401), when the job
/// has one.
async fn require_token(
    State(token): State<Option<Arc<str>>>,
    req: Request,
    next: Next,
) -> Response {
    let Some(want) = token else {
        return next.run(req).await;
    };
    let got = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if got.is_some_and(|g| paraforge_rpc::access::ct_eq(g.as_bytes(), want.as_bytes())) {
        return next.run(req).await;
    }
    tracing::warn!(
        path = %req.uri().path(),
        had_token = got.is_some(),
        "HTTP request refused: missing or wrong access token"
    );
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        "missing or wrong access token\n",
    )
        .into_response()
}

/// Serves the pages on `listener` until `shutdown` resolves, over TLS when
/// `access.tls` is set.
pub async fn serve(
    listener: TcpListener,
    live: Arc<Live>,
    access: HttpAccess,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = router(live, access.token);
    match access.tls {
        Some(tls) => {
            axum::serve(TlsListener::new(listener, tls)?, app)
                .with_graceful_shutdown(shutdown)
                .await
        }
        None => {
            axum::serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .await
        }
    }
}

/// How long a client has to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// TCP connections after their TLS handshake. Handshakes run in their own
/// tasks, so a client that connects and says nothing holds up no one else.
struct TlsListener {
    ready: tokio::sync::mpsc::Receiver<(tokio_rustls::server::TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
    acceptor: tokio::task::JoinHandle<()>,
}

impl TlsListener {
    fn new(listener: TcpListener, config: Arc<rustls::ServerConfig>) -> std::io::Result<Self> {
        let local = listener.local_addr()?;
        let tls = tokio_rustls::TlsAcceptor::from(config);
        let (tx, ready) = tokio::sync::mpsc::channel(64);
        let acceptor = tokio::spawn(async move {
            loop {
                let (tcp, peer) = match listener.accept().await {
                    Ok(c) => c,
                    Err(e) => {
                        // Out of file descriptors and the like: pass.
                        tracing::warn!(error = %e, "metrics port: accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let (tls, tx) = (tls.clone(), tx.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.accept(tcp)).await {
                        Ok(Ok(stream)) => {
                            let _ = tx.send((stream, peer)).await;
                        }
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "metrics port: TLS handshake failed")
                        }
                        Err(_) => tracing::debug!(%peer, "metrics port: TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(TlsListener {
            ready,
            local,
            acceptor,
        })
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.acceptor.abort();
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(c) => c,
            // The accepting task ended (it never does on its own): no more
            // connections.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

/// The OpenMetrics content type: counters' samples end in `_total` and the
/// page in `# EOF`, which the older Prometheus text format would misread.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

async fn metrics(State(live): State<Arc<Live>>) -> Response {
    match crate::metrics::render(&*live) {
        Ok(page) => ([(header::CONTENT_TYPE, OPENMETRICS)], page).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "metrics page failed");
            (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response()
        }
    }
}

async fn status_json(State(live): State<Arc<Live>>) -> impl IntoResponse {
    let s = live.status();
    let (phase, since) = live.phase();
    let body = serde_json::json!({
        "job_id": s.job_id,
        "phase": phase.as_str(),
        "phase_seconds": since.as_secs_f64(),
        "shards": {
            "total": s.shards_total,
            "committed": s.shards_committed,
            "leased": s.shards_leased,
            "pending": s.shards_pending,
            "failed": s.shards_failed,
        },
        "pairs_written": s.pairs_written,
        "rejects": s.rejects,
        "rejects_by_reason": s.rejects_by_reason,
        "pairs_per_second": s.pairs_per_second,
        "eta_seconds": s.eta_seconds,
        "finished": s.finished,
        "workers": s.workers_total,
        "worker_list": s.workers.iter().map(|w| serde_json::json!({"id": w.worker_id, "name": w.name, "device": w.device, "leases": w.leases, "last_heard_unix_ms": w.last_heartbeat_unix_ms})).collect::<Vec<_>>(),
        "output": s.output_url,
        "failed": s.failed.iter().map(|f| serde_json::json!({"shard": f.shard_id, "reason": f.reason, "attempts": f.attempts})).collect::<Vec<_>>(),
    });
    (
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::Shared;
    use crate::state::{JobState, ShardSpec};
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn get(addr: std::net::SocketAddr, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn metrics_and_status_are_served_over_http() {
        let dir = tempfile::tempdir().unwrap();
        let mut state = JobState::open(&dir.path().join("s.redb"), "job-x", 3, || {
            vec![ShardSpec {
                shard_id: 0,
                input: "in".into(),
                file_index: 0,
                range: paraforge_job::bitext::Range::bytes(0, 9, 1, 3),
                drop_lines: Vec::new(),
            }]
        })
        .unwrap();
        let l = state.lease("w", 0, 1000).unwrap().unwrap();
        state
            .complete(
                0,
                "w",
                l.token,
                vec![],
                crate::state::Tally {
                    pairs: 3,
                    rejects: 1,
                    rejects_by_reason: [("columns".to_string(), 1)].into(),
                },
            )
            .unwrap()
            .unwrap();
        let shared = Arc::new(Shared::new(
            state,
            String::new(),
            "out".into(),
            "cpu".into(),
            Duration::from_secs(30),
        ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let live = Live::serving(shared);
        let server =
            tokio::spawn(async move { axum::serve(listener, router(live, None)).await.unwrap() });
        let m = get(addr, "/metrics").await;
        assert!(m.contains("paraforge_shards_committed 1"), "{m}");
        assert!(
            m.contains("paraforge_pairs_written 3") && m.contains("paraforge_job_finished 1"),
            "{m}"
        );
        let s = get(addr, "/status").await;
        let body = &s[s.find("\r\n\r\n").unwrap() + 4..];
        let v: serde_json::Value =
            serde_json::from_str(body.trim()).unwrap_or_else(|e| panic!("{e}: {body}"));
        assert_eq!(v["job_id"], "job-x");
        assert_eq!(v["phase"], "serving");
        assert!(
            m.contains("paraforge_phase{phase=\"serving\"} 1")
                && m.contains("paraforge_phase{phase=\"planning\"} 0"),
            "{m}"
        );
        assert_eq!(v["rejects"], 1);
        assert_eq!(v["rejects_by_reason"]["columns"], 1);
        assert!(
            m.contains("paraforge_rejects_by_reason{reason=\"columns\"} 1"),
            "{m}"
        );
        server.abort();
    }
}
