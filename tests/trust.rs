//! What the coordinator believes: a worker is who it says only
//! with the secret it got at registration; a completion counts only the rows
//! its files hold; `/metrics` and `/status` are guarded like gRPC; names are
//! bounded, silent workers expire and the status answer stays small. Each
//! test runs the real coordinator over loopback.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use paraforge_coordinator::run::{finalize, Running};
use paraforge_core::layout::OutputLayout;
use paraforge_job::config::JobConfig;
use paraforge_job::storage::Storage;
use paraforge_rpc::access::{Client, ClientAccess};
use paraforge_rpc::proto::{self as pb, lease_shard_response};
use paraforge_tests::{get_plain, http_get, job_toml, repo_root, sample_lines};
use paraforge_worker::node::{run as run_worker, WorkerOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const VERSION: &str = env!("CARGO_PKG_VERSION");

fn tls(name: &str) -> PathBuf {
    repo_root().join("tests/data/tls").join(name)
}

/// A job over the first `lines` sample lines, `shard_pairs` per shard.
fn config(dir: &Path, lines: usize, job: &str, coordinator: &str) -> JobConfig {
    let input = dir.join("input.tsv");
    std::fs::write(&input, sample_lines(lines).0.join("\n") + "\n").unwrap();
    let text = job_toml(
        "trust",
        &input.display().to_string(),
        &dir.join("out").display().to_string(),
        job,
        "beam = 2\nmax_new_tokens = 16",
        &format!("[coordinator]\n{coordinator}"),
    );
    JobConfig::parse(&text, Path::new("trust.toml")).unwrap()
}

fn token_file(dir: &Path, token: &str) -> String {
    let p = dir.join("token");
    std::fs::write(&p, format!("{token}\n")).unwrap();
    p.display().to_string()
}

/// The `[coordinator]` line that makes the job require the token in `file`.
fn token_key(file: &str) -> String {
    format!("auth_token_file = \"{file}\"")
}

async fn serve(cfg: &JobConfig) -> Running {
    paraforge_tests::start_on_loopback(cfg).await.unwrap()
}

async fn client(c: &Running, token: Option<&str>) -> Client {
    ClientAccess {
        token: token.map(String::from),
        ..Default::default()
    }
    .connect(&format!("http://{}", c.grpc_addr))
    .await
    .unwrap()
}

async fn register(c: &mut Client, name: &str) -> pb::RegisterWorkerResponse {
    c.register_worker(pb::RegisterWorkerRequest {
        name: name.into(),
        version: VERSION.into(),
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
}

async fn lease(c: &mut Client, w: &pb::RegisterWorkerResponse) -> pb::Lease {
    let r = c
        .lease_shard(pb::LeaseShardRequest {
            worker_id: w.worker_id.clone(),
            worker_secret: w.worker_secret.clone(),
            model_sha256: w.model_sha256.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .result;
    match r {
        Some(lease_shard_response::Result::Lease(l)) => l,
        other => panic!("no lease: {other:?}"),
    }
}

async fn status(c: &mut Client) -> pb::JobStatusResponse {
    c.job_status(pb::JobStatusRequest {})
        .await
        .unwrap()
        .into_inner()
}

fn sha(b: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(b))
}

/// A well-formed output Parquet file with `n` rows, as bytes.
fn parquet_rows(n: usize) -> Vec<u8> {
    let job_model =
        paraforge_core::model_digest::model_digest(&paraforge_tests::model("tiny-cs-en")).unwrap();
    parquet_rows_of(n, &job_model)
}

/// `n` rows whose footer says model `model` translated them.
fn parquet_rows_of(n: usize, model: &str) -> Vec<u8> {
    use paraforge_core::schema::{meta, schema, writer_properties};
    use paraforge_core::{PairRow, RowsBuilder, Scorer};
    let mut b = RowsBuilder::default();
    let mut scorer = Scorer::new(None);
    for i in 0..n {
        b.push(&PairRow {
            id: format!("fake-{i}"),
            source: "zdroj".into(),
            reference: "a reference".into(),
            translation: "a translation".into(),
            candidate_rank: 1,
            translation_score: Some(-1.0),
            source_len: Some(2),
            truncated: false,
            scores: scorer.score("a reference", "a translation"),
        });
    }
    let mut out = Vec::new();
    let props = writer_properties(&[(meta::MODEL_SHA256, model.to_string())]);
    let mut w = parquet::arrow::ArrowWriter::try_new(&mut out, schema(), Some(props)).unwrap();
    w.write(&b.finish()).unwrap();
    w.close().unwrap();
    out
}

/// Writes an attempt's two files where a worker would and describes them
/// as the worker claims them.
async fn put_attempt(
    storage: &Storage,
    lease: &pb::Lease,
    parquet: &[u8],
    rejects: &[u8],
) -> Vec<pb::OutputFile> {
    let shard = lease.shard.as_ref().unwrap().shard_id;
    let (pq, rj) = (
        OutputLayout::temp_part_path(shard, lease.lease_token),
        OutputLayout::temp_rejects_path(shard, lease.lease_token),
    );
    storage.put(&pq, parquet.to_vec().into()).await.unwrap();
    storage.put(&rj, rejects.to_vec().into()).await.unwrap();
    let rejects_rows = rejects.iter().filter(|&&b| b == b'\n').count() as u64;
    vec![
        pb::OutputFile {
            path: pq,
            rows: 0,
            bytes: parquet.len() as u64,
            sha256: sha(parquet),
        },
        pb::OutputFile {
            path: rj,
            rows: rejects_rows,
            bytes: rejects.len() as u64,
            sha256: sha(rejects),
        },
    ]
}

async fn complete(
    c: &mut Client,
    w: &pb::RegisterWorkerResponse,
    lease: &pb::Lease,
    files: Vec<pb::OutputFile>,
    pairs: u64,
    rejects: u64,
) -> pb::CompleteShardResponse {
    complete_lines(c, w, lease, files, pairs, rejects, pairs + rejects).await
}

/// A completion that claims to have read `lines` input lines.
async fn complete_lines(
    c: &mut Client,
    w: &pb::RegisterWorkerResponse,
    lease: &pb::Lease,
    files: Vec<pb::OutputFile>,
    pairs: u64,
    rejects: u64,
    lines: u64,
) -> pb::CompleteShardResponse {
    c.complete_shard(pb::CompleteShardRequest {
        worker_id: w.worker_id.clone(),
        worker_secret: w.worker_secret.clone(),
        shard_id: lease.shard.as_ref().unwrap().shard_id,
        lease_token: lease.lease_token,
        files,
        totals: Some(pb::Progress {
            pairs_written: pairs,
            rejects,
            lines_read: lines,
        }),
        metrics: None,
    })
    .await
    .unwrap()
    .into_inner()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_completion_under_another_workers_id_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let tf = token_file(dir.path(), "shared-token");
    let cfg = config(dir.path(), 120, "shard_pairs = 60", &token_key(&tf));
    let c = serve(&cfg).await;
    let mut honest = client(&c, Some("shared-token")).await;
    let w = register(&mut honest, "honest").await;
    assert!(
        w.worker_secret.len() >= 32,
        "a secret of at least 128 bits, hex: {:?}",
        w.worker_secret
    );
    let other = register(&mut honest, "other").await;
    assert_ne!(w.worker_secret, other.worker_secret);
    let l = lease(&mut honest, &w).await;

    // The attacker has the job's token and reads the worker ids from the
    // status, which never shows a secret.
    let mut attacker = client(&c, Some("shared-token")).await;
    let s = status(&mut attacker).await;
    let listed = format!("{s:?}");
    assert!(listed.contains(&w.worker_id), "{listed}");
    assert!(!listed.contains(&w.worker_secret), "{listed}");
    for secret in [String::new(), "0".repeat(32), other.worker_secret.clone()] {
        let e = attacker
            .complete_shard(pb::CompleteShardRequest {
                worker_id: w.worker_id.clone(),
                worker_secret: secret.clone(),
                shard_id: l.shard.as_ref().unwrap().shard_id,
                lease_token: l.lease_token,
                files: vec![],
                totals: Some(pb::Progress {
                    pairs_written: 100,
                    rejects: 0,
                    lines_read: 100,
                }),
                metrics: None,
            })
            .await
            .map(|r| r.into_inner());
        let e = e.expect_err("a forged completion is refused");
        assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
        assert!(e.message().contains("secret"), "{}", e.message());
        // Every other call in the worker's name is refused the same way.
        let e = attacker
            .lease_shard(pb::LeaseShardRequest {
                worker_id: w.worker_id.clone(),
                worker_secret: secret.clone(),
                model_sha256: w.model_sha256.clone(),
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
        let e = attacker
            .heartbeat(pb::HeartbeatRequest {
                worker_id: w.worker_id.clone(),
                worker_secret: secret.clone(),
                leases: vec![],
                metrics: None,
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
        let e = attacker
            .fail_shard(pb::FailShardRequest {
                worker_id: w.worker_id.clone(),
                worker_secret: secret,
                shard_id: l.shard.as_ref().unwrap().shard_id,
                lease_token: l.lease_token,
                reason: "sabotage".into(),
                retryable: false,
                given_back: false,
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    }
    let s = status(&mut attacker).await;
    assert_eq!(
        (s.shards_committed, s.shards_failed, s.shards_leased),
        (0, 0, 1),
        "the honest worker still holds its lease"
    );
    // An unknown worker and an unknown shard are told apart by code, not text.
    let e = attacker
        .lease_shard(pb::LeaseShardRequest {
            worker_id: "w999-nobody".into(),
            worker_secret: "x".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound, "{e:?}");
    let e = honest
        .fail_shard(pb::FailShardRequest {
            worker_id: w.worker_id.clone(),
            worker_secret: w.worker_secret.clone(),
            shard_id: 999,
            lease_token: 1,
            reason: "no such shard".into(),
            retryable: true,
            given_back: false,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_their_files_do_not_back_are_refused_and_the_shard_is_redone() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), 60, "shard_pairs = 60\nmax_attempts = 12", "");
    // Two rows per pair: a pairs file of three rows cannot be whole pairs.
    cfg.model.as_mut().unwrap().beam_candidates = 2;
    let c = serve(&cfg).await;
    let storage = Storage::open(&cfg.job.output).unwrap();
    let mut cl = client(&c, None).await;
    let w = register(&mut cl, "liar").await;
    let three = parquet_rows(3);

    // Each lie fails its attempt (the shard goes back to the queue) and
    // commits nothing.
    let mut lies: Vec<(&str, pb::CompleteShardResponse)> = Vec::new();
    let l = lease(&mut cl, &w).await;
    lies.push((
        "no pairs file",
        complete(&mut cl, &w, &l, vec![], 100, 0).await,
    ));
    let l = lease(&mut cl, &w).await;
    let mut files = put_attempt(&storage, &l, &three, b"").await;
    files[0].rows = 5;
    lies.push(("rows", complete(&mut cl, &w, &l, files, 5, 0).await));
    let l = lease(&mut cl, &w).await;
    let mut files = put_attempt(&storage, &l, &three, b"").await;
    files[0].rows = 3;
    lies.push(("totals", complete(&mut cl, &w, &l, files, 60, 0).await));
    let l = lease(&mut cl, &w).await;
    let mut files = put_attempt(&storage, &l, &three, b"").await;
    files[0].rows = 3;
    files[0].sha256 = sha(b"something else");
    lies.push(("SHA-256", complete(&mut cl, &w, &l, files, 3, 0).await));
    let l = lease(&mut cl, &w).await;
    let mut files = put_attempt(&storage, &l, &three, b"{}\n").await;
    files[0].rows = 3;
    files[1].rows = 2;
    lies.push(("rejects", complete(&mut cl, &w, &l, files, 3, 2).await));
    // Reasons become metric labels: a worker cannot invent one.
    let l = lease(&mut cl, &w).await;
    let mut files = put_attempt(&storage, &l, &three, b"{\"code\":\"made_up\"}\n").await;
    files[0].rows = 3;
    lies.push(("reason code", complete(&mut cl, &w, &l, files, 3, 1).await));
    let l = lease(&mut cl, &w).await;
    let mut files = put_attempt(&storage, &l, b"not parquet at all", b"").await;
    files[0].rows = 3;
    lies.push(("Parquet", complete(&mut cl, &w, &l, files, 3, 0).await));
    let l = lease(&mut cl, &w).await;
    let mut files = put_attempt(&storage, &l, &three, b"").await;
    files[0].rows = 3;
    lies.push((
        "model.beam_candidates",
        complete(&mut cl, &w, &l, files, 3, 0).await,
    ));
    // Rows from another model, under the job's lease.
    let other = parquet_rows_of(4, &"0".repeat(64));
    let l = lease(&mut cl, &w).await;
    let mut files = put_attempt(&storage, &l, &other, b"").await;
    files[0].rows = 4;
    lies.push((
        "translated by model",
        complete(&mut cl, &w, &l, files, 4, 0).await,
    ));
    // Files and totals agree, but not with the 60 lines the shard was
    // planned with: an input that shrank under the job, or a reader that
    // stopped early, must not commit a short shard.
    let four = parquet_rows(4);
    let l = lease(&mut cl, &w).await;
    let mut files = put_attempt(&storage, &l, &four, b"").await;
    files[0].rows = 4;
    lies.push((
        "planned as 60 input lines",
        complete_lines(&mut cl, &w, &l, files, 4, 0, 2).await,
    ));
    let l = lease(&mut cl, &w).await;
    let mut files = put_attempt(&storage, &l, &four, b"").await;
    files[0].rows = 4;
    lies.push((
        "account for 2",
        complete_lines(&mut cl, &w, &l, files, 4, 0, 60).await,
    ));
    for (what, r) in &lies {
        assert!(!r.accepted, "{what}: a lie was accepted");
        assert!(r.reason.contains(what), "{what}: {}", r.reason);
    }
    let s = status(&mut cl).await;
    assert_eq!(
        (s.shards_committed, s.shards_pending, s.pairs_written),
        (0, 1, 0),
        "nothing counted, the shard back in the queue"
    );

    // A real worker then does the shard properly.
    let o = WorkerOptions {
        coordinator: format!("http://{}", c.grpc_addr),
        name: "honest".into(),
        connect_attempts: 5,
        access: Default::default(),
        device: None,
        model_dir: None,
    };
    let summary = tokio::time::timeout(
        Duration::from_secs(120),
        run_worker(o, Arc::new(AtomicBool::new(false))),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(summary.shards_committed, 1);
    let m = finalize(&c.shared, &storage).await.unwrap();
    c.stop().await;
    assert_eq!((m.pairs, m.beam_candidates), (120, 2));
    let rows: u64 = m.files.iter().map(|f| f.rows).sum();
    assert_eq!((m.files.len(), rows), (1, 120), "{:?}", m.files);
    let on_disk = std::fs::read(Path::new(&cfg.job.output).join(&m.files[0].path)).unwrap();
    assert_eq!(sha(&on_disk), m.files[0].sha256);
}

async fn get_tls(addr: std::net::SocketAddr, path: &str, token: Option<&str>) -> (u16, String) {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    paraforge_rpc::access::init_tls();
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(&std::fs::read(tls("ca.pem")).unwrap()) {
        roots.add(c.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let io = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .expect("a TLS handshake with the job's certificate");
    http_get(io, path, token).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_status_need_the_token_and_use_the_jobs_tls() {
    let dir = tempfile::tempdir().unwrap();
    let tf = token_file(dir.path(), "metrics-token");
    let cfg = config(
        dir.path(),
        120,
        "shard_pairs = 60",
        &format!(
            "tls_cert = \"{}\"\ntls_key = \"{}\"\nauth_token_file = \"{tf}\"",
            tls("server.pem").display(),
            tls("server.key").display()
        ),
    );
    let c = serve(&cfg).await;
    let a = c.http_addr;
    for path in ["/metrics", "/status"] {
        assert_eq!(
            get_tls(a, path, None).await.0,
            401,
            "{path} without a token"
        );
        assert_eq!(
            get_tls(a, path, Some("metrics-token!")).await.0,
            401,
            "{path} with a wrong token"
        );
        let (code, body) = get_tls(a, path, Some("metrics-token")).await;
        assert_eq!(code, 200, "{path}: {body}");
        assert!(
            body.contains("paraforge_shards_total 2") || body.contains("\"total\":2"),
            "{path}: {body}"
        );
    }
    // Plain text to the TLS port gets no page.
    let mut tcp = tokio::net::TcpStream::connect(a).await.unwrap();
    tcp.write_all(b"GET /status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut out)).await;
    assert!(!String::from_utf8_lossy(&out).contains("shards"), "{out:?}");
    // The liveness page says nothing about the job and needs no token.
    let (code, body) = get_tls(a, "/healthz", None).await;
    assert_eq!((code, body.trim()), (200, "ok"));
    c.stop().await;

    // A token without TLS: plain HTTP, still guarded.
    let dir = tempfile::tempdir().unwrap();
    let tf = token_file(dir.path(), "plain-token");
    let cfg = config(dir.path(), 120, "shard_pairs = 60", &token_key(&tf));
    let c = serve(&cfg).await;
    assert_eq!(get_plain(c.http_addr, "/status", None).await.0, 401);
    assert_eq!(
        get_plain(c.http_addr, "/metrics", Some("plain-token"))
            .await
            .0,
        200
    );
    c.stop().await;

    // No token: open, as before.
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 120, "shard_pairs = 60", "");
    let c = serve(&cfg).await;
    assert_eq!(get_plain(c.http_addr, "/status", None).await.0, 200);
    assert_eq!(get_plain(c.http_addr, "/metrics", None).await.0, 200);
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_names_are_refused_and_the_status_stays_small() {
    let dir = tempfile::tempdir().unwrap();
    // One line per shard: 120 shards, enough to fail more than the list shows.
    let cfg = config(dir.path(), 120, "shard_pairs = 1", "");
    let c = serve(&cfg).await;
    let mut cl = client(&c, None).await;
    for _ in 0..5 {
        let e = cl
            .register_worker(pb::RegisterWorkerRequest {
                name: "n".repeat(1 << 20),
                version: VERSION.into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        assert!(
            e.message().contains("name") && e.message().contains("128"),
            "{}",
            e.message()
        );
    }
    let e = cl
        .register_worker(pb::RegisterWorkerRequest {
            name: "ok".into(),
            device: "cuda:0".repeat(100),
            version: VERSION.into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("device"), "{}", e.message());
    let e = cl
        .register_worker(pb::RegisterWorkerRequest {
            name: "bell\u{7}".into(),
            version: VERSION.into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");

    // Many workers and many failed shards with long reasons: the status
    // lists a bounded number and counts them all.
    let mut ws = Vec::new();
    for i in 0..150 {
        ws.push(register(&mut cl, &format!("worker-{i}-{}", "x".repeat(100))).await);
    }
    let w = &ws[0];
    for _ in 0..120 {
        let l = lease(&mut cl, w).await;
        cl.fail_shard(pb::FailShardRequest {
            worker_id: w.worker_id.clone(),
            worker_secret: w.worker_secret.clone(),
            shard_id: l.shard.unwrap().shard_id,
            lease_token: l.lease_token,
            reason: "é".repeat(50_000),
            retryable: false,
            given_back: false,
        })
        .await
        .unwrap();
    }
    let s = status(&mut cl).await;
    assert_eq!((s.workers_total, s.shards_failed), (150, 120));
    assert_eq!((s.workers.len(), s.failed.len()), (100, 100));
    let size = prost::Message::encoded_len(&s);
    assert!(size < 256 * 1024, "status is {size} bytes");
    assert!(s.failed.iter().all(|f| f.reason.len() <= 1024 + 64));
    // The answer still fits the CLI's 4 MiB limit however long the job runs.
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_worker_expires_and_must_register_again() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), 120, "shard_pairs = 60", "");
    // One-second leases keep the test short (the config's floor is 5 s).
    cfg.job.lease_seconds = 1;
    let c = serve(&cfg).await;
    let mut cl = client(&c, None).await;
    let silent = register(&mut cl, "silent").await;
    let chatty = register(&mut cl, "chatty").await;
    let deadline = std::time::Instant::now() + Duration::from_millis(3600);
    while std::time::Instant::now() < deadline {
        cl.heartbeat(pb::HeartbeatRequest {
            worker_id: chatty.worker_id.clone(),
            worker_secret: chatty.worker_secret.clone(),
            leases: vec![],
            metrics: None,
        })
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let s = status(&mut cl).await;
    let names: Vec<&str> = s.workers.iter().map(|w| w.name.as_str()).collect();
    assert_eq!((names, s.workers_total), (vec!["chatty"], 1));
    let e = cl
        .lease_shard(pb::LeaseShardRequest {
            worker_id: silent.worker_id.clone(),
            worker_secret: silent.worker_secret.clone(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound, "{e:?}");
    // Registering again gives a new identity that works.
    let again = register(&mut cl, "silent").await;
    assert_ne!(again.worker_id, silent.worker_id);
    lease(&mut cl, &again).await;
    c.stop().await;
}
