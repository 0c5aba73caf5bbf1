//! Access to a coordinator: the shared-secret token, TLS, message size
//! limits, and a whole job over TLS with a token. Certificates are the
//! test-only ones in tests/data/tls (tools/dev/make_test_certs.sh).

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use paraforge_coordinator::run::{finalize, Running};
use paraforge_job::config::JobConfig;
use paraforge_job::storage::Storage;
use paraforge_rpc::access::ClientAccess;
use paraforge_rpc::proto as pb;
use paraforge_tests::{job_toml, repo_root, sample_lines};
use paraforge_worker::node::{run as run_worker, WorkerOptions};

fn tls(name: &str) -> PathBuf {
    repo_root().join("tests/data/tls").join(name)
}

fn config(dir: &Path, coordinator: &str) -> JobConfig {
    let input = dir.join("input.tsv");
    std::fs::write(&input, sample_lines(120).0.join("\n") + "\n").unwrap();
    let text = job_toml(
        "access",
        &input.display().to_string(),
        &dir.join("out").display().to_string(),
        "shard_pairs = 60",
        "beam = 2\nmax_new_tokens = 16",
        &format!("[coordinator]\n{coordinator}"),
    );
    JobConfig::parse(&text, Path::new("access.toml")).unwrap()
}

fn token_file(dir: &Path, token: &str) -> PathBuf {
    let p = dir.join(format!("token-{}", token.len()));
    std::fs::write(&p, format!("{token}\n")).unwrap();
    p
}

async fn serve(cfg: &JobConfig) -> Running {
    paraforge_tests::start_on_loopback(cfg).await.unwrap()
}

async fn start_err(cfg: &JobConfig) -> String {
    paraforge_tests::start_on_loopback(cfg)
        .await
        .err()
        .expect("start should fail")
        .to_string()
}

async fn status(access: &ClientAccess, url: &str) -> Result<pb::JobStatusResponse, String> {
    let mut c = access.connect(url).await.map_err(|e| e.to_string())?;
    c.job_status(pb::JobStatusRequest {})
        .await
        .map(|r| r.into_inner())
        .map_err(|s| format!("{:?}: {}", s.code(), s.message()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_without_the_right_token_are_unauthenticated() {
    let dir = tempfile::tempdir().unwrap();
    let tf = token_file(dir.path(), "correct-horse-battery-staple");
    let cfg = config(
        dir.path(),
        &format!("auth_token_file = \"{}\"", tf.display()),
    );
    let c = serve(&cfg).await;
    let url = format!("http://{}", c.grpc_addr);
    let none = ClientAccess::default();
    let e = status(&none, &url).await.unwrap_err();
    assert!(e.starts_with("Unauthenticated"), "{e}");
    let wrong = ClientAccess {
        token: Some("correct-horse-battery-stapler".into()),
        ..Default::default()
    };
    let e = status(&wrong, &url).await.unwrap_err();
    assert!(e.starts_with("Unauthenticated"), "{e}");
    // Every method is guarded, not just status.
    let mut raw = wrong.connect(&url).await.unwrap();
    let e = raw
        .register_worker(pb::RegisterWorkerRequest {
            version: env!("CARGO_PKG_VERSION").into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated);
    let right = ClientAccess {
        token: Some("correct-horse-battery-staple".into()),
        ..Default::default()
    };
    assert_eq!(status(&right, &url).await.unwrap().shards_total, 2);

    // A worker with the wrong token gives up with a clear error.
    let o = WorkerOptions {
        coordinator: url.clone(),
        name: "intruder".into(),
        connect_attempts: 2,
        access: wrong,
        device: None,
        model_dir: None,
    };
    let e = run_worker(o, Arc::new(AtomicBool::new(false)))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("token"), "{e}");
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_coordinator_refuses_plain_text_and_unknown_authorities() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        dir.path(),
        &format!(
            "tls_cert = \"{}\"\ntls_key = \"{}\"",
            tls("server.pem").display(),
            tls("server.key").display()
        ),
    );
    let c = serve(&cfg).await;
    let port = c.grpc_addr.port();
    let good = ClientAccess {
        ca_cert: Some(tls("ca.pem")),
        ..Default::default()
    };
    for host in ["127.0.0.1", "localhost"] {
        let s = status(&good, &format!("https://{host}:{port}"))
            .await
            .unwrap();
        assert_eq!(s.shards_total, 2, "{host}");
    }
    // Plain text to a TLS port fails, naming the mismatch (it was an
    // "h2 protocol error"), for a worker too, at once.
    let e = status(
        &ClientAccess::default(),
        &format!("http://127.0.0.1:{port}"),
    )
    .await
    .unwrap_err();
    assert!(
        e.contains(&format!(
            "the coordinator speaks TLS: use https://127.0.0.1:{port}"
        )) && e.contains("--ca-cert"),
        "{e}"
    );
    let o = WorkerOptions {
        coordinator: format!("http://localhost:{port}"),
        name: "plain".into(),
        connect_attempts: 5,
        access: ClientAccess::default(),
        device: None,
        model_dir: None,
    };
    let e = run_worker(o, Arc::new(AtomicBool::new(false)))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("speaks TLS: use https://localhost:"), "{e}");
    // A certificate from another authority is not trusted.
    let other = ClientAccess {
        ca_cert: Some(tls("other-ca.pem")),
        ..Default::default()
    };
    assert!(status(&other, &format!("https://127.0.0.1:{port}"))
        .await
        .is_err());
    // TLS on with an http:// URL is a configuration error, not a hang.
    let e = good
        .connect(&format!("http://127.0.0.1:{port}"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("https://"), "{e}");
    c.stop().await;

    // Missing or unreadable key material is an error naming the file.
    let bad = config(
        dir.path(),
        "tls_cert = \"/nonexistent/cert.pem\"\ntls_key = \"/nonexistent/key.pem\"",
    );
    let e = start_err(&bad).await;
    assert!(e.contains("/nonexistent/cert.pem"), "{e}");
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate").unwrap();
    let bad = config(
        dir.path(),
        &format!(
            "tls_cert = \"{}\"\ntls_key = \"{}\"",
            garbage.display(),
            garbage.display()
        ),
    );
    let e = start_err(&bad).await;
    assert!(e.contains("garbage.pem"), "{e}");
}

/// TLS on the client and not on the coordinator: named, not "corrupt message".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_client_of_a_plain_coordinator_is_told_to_use_http() {
    let dir = tempfile::tempdir().unwrap();
    let c = serve(&config(dir.path(), "")).await;
    let port = c.grpc_addr.port();
    let tls_client = ClientAccess {
        ca_cert: Some(tls("ca.pem")),
        ..Default::default()
    };
    let e = status(&tls_client, &format!("https://127.0.0.1:{port}"))
        .await
        .unwrap_err();
    assert!(
        e.contains(&format!(
            "does not speak TLS (it has no tls_cert): use http://127.0.0.1:{port}"
        )),
        "{e}"
    );
    // An https:// URL without a CA certificate to check the server by.
    let e = status(
        &ClientAccess::default(),
        &format!("https://127.0.0.1:{port}"),
    )
    .await
    .unwrap_err();
    assert!(
        e.contains("needs the CA certificate") && e.contains("--ca-cert"),
        "{e}"
    );
    c.stop().await;
}

/// A certificate made by `openssl req -x509`, which marks it a CA, used as
/// the coordinator's own and trusted as itself (the README's self-signed
/// setup): WebPKI refuses a CA as a server certificate
/// (`CaUsedAsEndEntity`); the client accepts exactly the certificate it was
/// given, for the names it holds, and nothing else it did not sign.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_self_signed_ca_certificate_is_trusted_as_itself() {
    let dir = tempfile::tempdir().unwrap();
    let make = |name: &str| -> Option<(PathBuf, PathBuf)> {
        let (cert, key) = (
            dir.path().join(format!("{name}.pem")),
            dir.path().join(format!("{name}.key")),
        );
        let out = std::process::Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
            ])
            .args(["-nodes", "-days", "2", "-subj", "/CN=localhost"])
            .args(["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
            .args(["-addext", "basicConstraints=critical,CA:TRUE"])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .output()
            .ok()?;
        assert!(
            out.status.success(),
            "openssl: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Some((cert, key))
    };
    let Some((cert, key)) = make("self") else {
        eprintln!("skipped: no openssl on PATH to make a self-signed certificate with");
        return;
    };
    let (other, _) = make("other").unwrap();
    let cfg = config(
        dir.path(),
        &format!(
            "tls_cert = \"{}\"\ntls_key = \"{}\"",
            cert.display(),
            key.display()
        ),
    );
    let c = serve(&cfg).await;
    let port = c.grpc_addr.port();
    let trusting = |ca: &Path, domain: Option<&str>| ClientAccess {
        ca_cert: Some(ca.to_path_buf()),
        domain: domain.map(str::to_string),
        ..Default::default()
    };
    for host in ["localhost", "127.0.0.1"] {
        let s = status(&trusting(&cert, None), &format!("https://{host}:{port}"))
            .await
            .unwrap_or_else(|e| panic!("{host}: {e}"));
        assert_eq!(s.shards_total, 2);
    }
    let url = format!("https://localhost:{port}");
    // Not for a name it does not hold, nor trusted by another certificate.
    let e = status(&trusting(&cert, Some("elsewhere.example")), &url)
        .await
        .unwrap_err();
    assert!(
        e.contains("elsewhere.example") || e.contains("NotValidForName"),
        "{e}"
    );
    let e = status(&trusting(&other, None), &url).await.unwrap_err();
    assert!(
        e.contains("marked a CA (basicConstraints CA:TRUE) and is not one of the certificates this client trusts"),
        "{e}"
    );
    c.stop().await;
}

/// With TLS on, the lines `paraforge coordinator` prints on start (the
/// pages' URL before planning, then the gRPC and metrics URLs) name the
/// URLs a worker and a scraper use: https, not grpc:// and http://.
#[test]
fn the_coordinators_start_line_names_the_schemes_it_serves() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let line = |coordinator: &str| -> String {
        let cfg = dir.path().join("job.toml");
        let input = dir.path().join("input.tsv");
        std::fs::write(&input, sample_lines(4).0.join("\n") + "\n").unwrap();
        let [grpc, pages] = paraforge_tests::procs::free_ports();
        let listen = format!("listen = \"127.0.0.1:{grpc}\"\nmetrics = \"127.0.0.1:{pages}\"\n");
        let text = job_toml(
            "start-line",
            &input.display().to_string(),
            &dir.path().join("out").display().to_string(),
            "",
            "",
            &format!("[coordinator]\n{listen}{coordinator}"),
        );
        std::fs::write(&cfg, text).unwrap();
        let _ = std::fs::remove_dir_all(dir.path().join("out"));
        let mut child = std::process::Command::new(paraforge_tests::paraforge_bin())
            .args(["coordinator", "--config"])
            .arg(&cfg)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // The pages' line (before planning), then the serving line.
        let mut line = String::new();
        let mut out = std::io::BufReader::new(child.stdout.as_mut().unwrap());
        out.read_line(&mut line).unwrap();
        out.read_line(&mut line).unwrap();
        let _ = child.kill();
        let _ = child.wait();
        line
    };
    let tls = line(&format!(
        "tls_cert = \"{}\"\ntls_key = \"{}\"\n",
        tls("server.pem").display(),
        tls("server.key").display()
    ));
    assert!(
        tls.contains(": planning (status https://127.0.0.1:")
            && tls.contains(" on https://127.0.0.1:")
            && tls.contains("(metrics https://127.0.0.1:"),
        "{tls}"
    );
    let plain = line("");
    assert!(
        plain.contains(": planning (status http://127.0.0.1:")
            && plain.contains(" on http://127.0.0.1:")
            && plain.contains("(metrics http://127.0.0.1:"),
        "{plain}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_messages_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "max_message_bytes = 4096");
    let c = serve(&cfg).await;
    let url = format!("http://{}", c.grpc_addr);
    let mut client = ClientAccess {
        max_message_bytes: Some(1 << 20),
        ..Default::default()
    }
    .connect(&url)
    .await
    .unwrap();
    let e = client
        .fail_shard(pb::FailShardRequest {
            worker_id: "w".into(),
            reason: "x".repeat(10_000),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(
        matches!(
            e.code(),
            tonic::Code::OutOfRange | tonic::Code::ResourceExhausted
        ),
        "{e:?}"
    );
    // Small messages still pass.
    client.job_status(pb::JobStatusRequest {}).await.unwrap();
    c.stop().await;
}

/// `[filters] dedup_sources` on a shard of 3,000 copies of one line under
/// a 4 KiB message limit: the dropped lines travel as one bit each, so the
/// lease passes the limit (as 3,000 varints it did not, and every lease was
/// refused) and the job ends with the copies dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_dropping_thousands_of_lines_passes_the_message_limit() {
    let dir = tempfile::tempdir().unwrap();
    let (lines, _) = sample_lines(3);
    let mut text: Vec<&str> = lines.iter().map(String::as_str).collect();
    text.extend(std::iter::repeat_n(lines[0].as_str(), 3000));
    let input = dir.path().join("input.tsv");
    std::fs::write(&input, text.join("\n") + "\n").unwrap();
    let toml = job_toml(
        "dedup",
        &input.display().to_string(),
        &dir.path().join("out").display().to_string(),
        "shard_pairs = 5000",
        "beam = 2\nmax_new_tokens = 16",
        "[filters]\ndedup_sources = true\n[coordinator]\nmax_message_bytes = 4096",
    );
    let cfg = JobConfig::parse(&toml, Path::new("dedup.toml")).unwrap();
    let c = serve(&cfg).await;
    let o = WorkerOptions {
        coordinator: format!("http://{}", c.grpc_addr),
        name: "w".into(),
        connect_attempts: 2,
        access: ClientAccess {
            max_message_bytes: Some(4096),
            ..Default::default()
        },
        device: None,
        model_dir: None,
    };
    let s = run_worker(o, Arc::new(AtomicBool::new(false)))
        .await
        .unwrap();
    assert_eq!((s.shards_committed, s.pairs), (1, 3));
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_job_runs_over_tls_with_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let tf = token_file(dir.path(), "s3cret");
    let cfg = config(
        dir.path(),
        &format!(
            "tls_cert = \"{}\"\ntls_key = \"{}\"\nauth_token_file = \"{}\"",
            tls("server.pem").display(),
            tls("server.key").display(),
            tf.display()
        ),
    );
    let c = serve(&cfg).await;
    let o = WorkerOptions {
        coordinator: format!("https://localhost:{}", c.grpc_addr.port()),
        name: "w".into(),
        connect_attempts: 5,
        access: ClientAccess {
            token: Some("s3cret".into()),
            ca_cert: Some(tls("ca.pem")),
            ..Default::default()
        },
        device: None,
        model_dir: None,
    };
    let s = run_worker(o, Arc::new(AtomicBool::new(false)))
        .await
        .unwrap();
    assert_eq!((s.shards_committed, s.pairs), (2, 120));
    let m = finalize(&c.shared, &Storage::open(&cfg.job.output).unwrap())
        .await
        .unwrap();
    assert_eq!(m.pairs, 120);
    c.stop().await;
}
