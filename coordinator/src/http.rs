//! The coordinator's HTTP side: Prometheus metrics at `/metrics` and the
//! job status as JSON at `/status` (what `paraforge status` prints).

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use crate::service::{status, Shared};

pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/status", get(status_json))
        .with_state(shared)
}

/// Metrics in the Prometheus text exposition format.
pub fn render_metrics(shared: &Shared) -> String {
    let s = status(shared);
    let mut out = String::new();
    let mut gauge = |name: &str, help: &str, v: f64| {
        let _ = writeln!(
            out,
            "# HELP paraforge_{name} {help}\n# TYPE paraforge_{name} gauge\nparaforge_{name} {v}"
        );
    };
    gauge(
        "shards_total",
        "Shards planned for the job.",
        s.shards_total as f64,
    );
    gauge(
        "shards_committed",
        "Shards whose output is committed.",
        s.shards_committed as f64,
    );
    gauge(
        "shards_leased",
        "Shards leased to a worker now.",
        s.shards_leased as f64,
    );
    gauge(
        "shards_pending",
        "Shards waiting for a worker.",
        s.shards_pending as f64,
    );
    gauge(
        "shards_failed",
        "Shards that ran out of attempts.",
        s.shards_failed as f64,
    );
    gauge(
        "pairs_written",
        "Pairs in committed shards plus progress of leased ones.",
        s.pairs_written as f64,
    );
    gauge(
        "rejects",
        "Input lines rejected in committed shards.",
        s.rejects as f64,
    );
    gauge(
        "pairs_per_second",
        "Pairs per second since the coordinator started.",
        s.pairs_per_second,
    );
    gauge(
        "eta_seconds",
        "Estimated seconds to finish (-1 before the first commit).",
        s.eta_seconds,
    );
    gauge("workers", "Registered workers.", s.workers.len() as f64);
    gauge(
        "job_finished",
        "1 when every shard is committed or failed.",
        if s.finished { 1.0 } else { 0.0 },
    );
    out
}

async fn metrics(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        render_metrics(&shared),
    )
}

async fn status_json(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    let s = status(&shared);
    let body = serde_json::json!({
        "job_id": s.job_id,
        "shards": {
            "total": s.shards_total,
            "committed": s.shards_committed,
            "leased": s.shards_leased,
            "pending": s.shards_pending,
            "failed": s.shards_failed,
        },
        "pairs_written": s.pairs_written,
        "rejects": s.rejects,
        "pairs_per_second": s.pairs_per_second,
        "eta_seconds": s.eta_seconds,
        "finished": s.finished,
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
                byte_start: 0,
                byte_end: 9,
                first_line: 1,
                lines: 3,
            }]
        })
        .unwrap();
        let l = state.lease("w", 0, 1000).unwrap().unwrap();
        state
            .complete(0, "w", l.token, vec![], 3, 1)
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
        let server =
            tokio::spawn(async move { axum::serve(listener, router(shared)).await.unwrap() });
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
        assert_eq!(v["rejects"], 1);
        server.abort();
    }
}
