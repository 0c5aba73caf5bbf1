//! An in-process cluster: a coordinator and three workers talking gRPC over
//! loopback, on 2,100 real pairs (plus dirty lines), through the public
//! coordinator and worker APIs. The output must hold exactly one row per
//! valid input line, ids preserved, rejects counted, files as the manifest says.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use paraforge_coordinator::run::{finalize, start};
use paraforge_job::config::JobConfig;
use paraforge_job::storage::Storage;
use paraforge_tests::{
    get_plain, job_toml, metric, output_rows, sample_lines, scoring_section, start_on_loopback,
};
use paraforge_worker::node::{run as run_worker, WorkerOptions};

fn job(dir: &Path, lines: usize) -> (JobConfig, Vec<String>, usize) {
    let (mut rows, valid_ids) = sample_lines(lines);
    // Dirty lines: wrong column count, empty side, invalid UTF-8 (below).
    rows.insert(10, "bad line without tabs".into());
    rows.insert(500, "dirty-2\t1.0\t\tno source".into());
    let mut bytes = rows.join("\n").into_bytes();
    bytes.extend_from_slice(b"\ndirty-3\t1.0\t\xff\xfe\tbroken\n");
    let input = dir.join("input.tsv");
    std::fs::write(&input, bytes).unwrap();
    let text = job_toml(
        "cluster-test",
        &input.display().to_string(),
        &dir.join("out").display().to_string(),
        "shard_pairs = 300\nlease_seconds = 30",
        "beam = 4\nbatch_size = 16\nmax_new_tokens = 32",
        &scoring_section(),
    );
    (
        JobConfig::parse(&text, Path::new("cluster.toml")).unwrap(),
        valid_ids,
        3,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_workers_write_each_valid_pair_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, valid_ids, rejects) = job(dir.path(), 2100);
    let coord = start(
        &cfg,
        Some("127.0.0.1:0".parse().unwrap()),
        Some("127.0.0.1:0".parse().unwrap()),
    )
    .await
    .unwrap();
    let url = format!("http://{}", coord.grpc_addr);
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..3)
        .map(|i| {
            let o = WorkerOptions {
                coordinator: url.clone(),
                name: format!("w{i}"),
                connect_attempts: 5,
                access: Default::default(),
                device: None,
                model_dir: None,
            };
            tokio::spawn(run_worker(o, stop.clone()))
        })
        .collect();
    let mut summaries = Vec::new();
    for w in workers {
        summaries.push(
            tokio::time::timeout(Duration::from_secs(600), w)
                .await
                .unwrap()
                .unwrap()
                .unwrap(),
        );
    }
    let storage = Storage::open(&cfg.job.output).unwrap();
    let manifest = finalize(&coord.shared, &storage).await.unwrap();
    coord.stop().await;

    assert_eq!(manifest.shards_committed, manifest.shards_total);
    assert_eq!(manifest.pairs, valid_ids.len() as u64);
    assert_eq!(manifest.rejects, rejects as u64);
    assert!(
        summaries.iter().filter(|s| s.shards_committed > 0).count() >= 2,
        "work was shared: {summaries:?}"
    );
    let out = Path::new(&cfg.job.output);
    assert!(out.join("_SUCCESS").is_file());
    let rows = output_rows(out);
    let mut seen = BTreeMap::new();
    for (id, _) in &rows {
        *seen.entry(id.clone()).or_insert(0) += 1;
    }
    assert!(seen.values().all(|&n| n == 1), "duplicates in the output");
    let mut want = valid_ids.clone();
    want.sort();
    assert_eq!(
        seen.keys().cloned().collect::<Vec<_>>(),
        want.iter()
            .cloned()
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect::<Vec<_>>()
    );
    assert_eq!(rows.len(), valid_ids.len());
    // Every file names the para_score model and its fingerprint.
    let vectors = paraforge_tests::repo_root().join("data/vectors/glove.6B.50d.top25k.txt.gz");
    let want_sha = paraforge_core::layout::sha256_file(&vectors).unwrap();
    for f in &manifest.files {
        let r = paraforge_core::PairReader::open(&out.join(&f.path), &[]).unwrap();
        let get = |k: &str| r.metadata().get(k).cloned();
        use paraforge_core::schema::meta;
        assert_eq!(
            get(meta::PARA_SCORER_SHA256).as_deref(),
            Some(&*want_sha),
            "{}",
            f.path
        );
        assert!(get(meta::PARA_SCORER)
            .unwrap()
            .ends_with("glove.6B.50d.top25k.txt.gz"));
        assert!(get(meta::PARA_SCORER_KIND).is_some());
    }
    // The manifest names that scorer as the footers do, and the corpus card
    // (beside the manifest, under a name Hive-style readers skip) says
    // what the manifest records.
    let [scorer] = &manifest.para_scorers[..] else {
        panic!("{:?}", manifest.para_scorers)
    };
    assert_eq!(
        (scorer.sha256.as_str(), scorer.files),
        (want_sha.as_str(), manifest.files.len() as u64)
    );
    assert!(
        !out.join("README.md").exists(),
        "pyarrow would read it as data"
    );
    let (card, body) = paraforge_tests::read_card(&out.join("_README.md"));
    assert_eq!(card["language"], serde_json::json!(["en", "cs"]));
    assert_eq!(card["size_categories"], serde_json::json!(["1K<n<10K"]));
    assert_eq!(card["license"], "other");
    let listed: Vec<&str> = manifest.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(
        card["configs"][0]["data_files"][0]["path"],
        serde_json::json!(listed)
    );
    let model = manifest.model.as_ref().unwrap();
    for want in [
        cfg.input.paths[0].clone(),
        format!("`{}`, model digest `{}`", model.dir, model.sha256),
        format!("fingerprint `{want_sha}`"),
        format!(
            "| pairs (config `default`, split `train`) | {} |",
            manifest.pairs
        ),
        format!("| input lines rejected (`_rejects/`) | {rejects} ("),
    ] {
        assert!(body.contains(&want), "{want} not in\n{body}");
    }
    // The rejects files name the dirty lines.
    let rej: usize = manifest.rejects_files.iter().map(|f| f.rows as usize).sum();
    assert_eq!(rej, rejects);
}

/// The coordinator's gRPC and pages addresses, both fixed
/// (`procs::free_ports`): pages at port 0 could be handed the gRPC port.
fn free_addrs() -> (std::net::SocketAddr, std::net::SocketAddr) {
    let [grpc, pages] = paraforge_tests::procs::free_ports();
    (
        ([127, 0, 0, 1], grpc).into(),
        ([127, 0, 0, 1], pages).into(),
    )
}

/// A worker that dies holding a lease (it never heartbeats nor completes),
/// and a coordinator stopped and restarted mid-job on the same state file:
/// the job still ends with every valid pair exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dead_worker_and_a_coordinator_restart_lose_and_duplicate_nothing() {
    use paraforge_rpc::proto::coordinator_client::CoordinatorClient;
    use paraforge_rpc::proto::{lease_shard_response, LeaseShardRequest, RegisterWorkerRequest};

    let dir = tempfile::tempdir().unwrap();
    let (mut cfg, valid_ids, _) = job(dir.path(), 2000);
    cfg.job.lease_seconds = 5;
    let (grpc, pages) = free_addrs();
    let url = format!("http://{grpc}");
    let coord = start(&cfg, Some(grpc), Some(pages)).await.unwrap();

    // The doomed worker leases shard 0 and vanishes.
    let mut c = CoordinatorClient::connect(url.clone()).await.unwrap();
    let reg = c
        .register_worker(RegisterWorkerRequest {
            name: "doomed".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let r = c
        .lease_shard(LeaseShardRequest {
            worker_id: reg.worker_id,
            worker_secret: reg.worker_secret,
            model_sha256: reg.model_sha256,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(matches!(
        r.result,
        Some(lease_shard_response::Result::Lease(_))
    ));
    drop(c);

    // A real worker starts; after two committed shards the coordinator stops.
    let stop = Arc::new(AtomicBool::new(false));
    let opts = |name: &str| WorkerOptions {
        coordinator: url.clone(),
        name: name.into(),
        connect_attempts: 20,
        access: Default::default(),
        device: None,
        model_dir: None,
    };
    let w1 = tokio::spawn(run_worker(opts("w1"), stop.clone()));
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "no shard committed in 300 s"
        );
        let s = paraforge_coordinator::shared::status(&coord.shared);
        if s.shards_committed >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before = paraforge_coordinator::shared::status(&coord.shared).shards_committed;
    coord.stop().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let coord = start(&cfg, Some(grpc), Some(pages)).await.unwrap();
    let after = paraforge_coordinator::shared::status(&coord.shared);
    assert!(
        after.shards_committed >= before,
        "committed shards survive the restart"
    );
    let w2 = tokio::spawn(run_worker(opts("w2"), stop.clone()));
    for w in [w1, w2] {
        tokio::time::timeout(Duration::from_secs(600), w)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }
    let storage = Storage::open(&cfg.job.output).unwrap();
    let manifest = finalize(&coord.shared, &storage).await.unwrap();
    coord.stop().await;
    assert_eq!(manifest.shards_committed, manifest.shards_total);
    let rows = output_rows(Path::new(&cfg.job.output));
    let mut ids: Vec<String> = rows.into_iter().map(|r| r.0).collect();
    ids.sort();
    let mut want = valid_ids;
    want.sort();
    assert_eq!(ids, want, "every valid pair exactly once");
}

/// A stop request (what SIGTERM sets) lets a worker finish the shard it holds
/// and lease no more: nothing stays leased, and another worker finishes the job.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stopped_worker_finishes_its_shard_and_leases_no_more() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, valid_ids, _) = job(dir.path(), 1500);
    let coord = start(
        &cfg,
        Some("127.0.0.1:0".parse().unwrap()),
        Some("127.0.0.1:0".parse().unwrap()),
    )
    .await
    .unwrap();
    let url = format!("http://{}", coord.grpc_addr);
    let opts = |name: &str| WorkerOptions {
        coordinator: url.clone(),
        name: name.into(),
        connect_attempts: 5,
        access: Default::default(),
        device: None,
        model_dir: None,
    };
    let stop1 = Arc::new(AtomicBool::new(false));
    let w1 = tokio::spawn(run_worker(opts("w1"), stop1.clone()));
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    while paraforge_coordinator::shared::status(&coord.shared).shards_leased == 0 {
        assert!(std::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop1.store(true, std::sync::atomic::Ordering::Relaxed);
    let s1 = tokio::time::timeout(Duration::from_secs(300), w1)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let mid = paraforge_coordinator::shared::status(&coord.shared);
    assert_eq!(
        mid.shards_leased, 0,
        "the stopped worker left nothing leased"
    );
    assert!(s1.shards_committed >= 1, "it finished the shard it held");
    assert!(mid.shards_pending > 0, "and leased no more");
    let w2 = tokio::spawn(run_worker(opts("w2"), Arc::new(AtomicBool::new(false))));
    tokio::time::timeout(Duration::from_secs(300), w2)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let m = finalize(&coord.shared, &Storage::open(&cfg.job.output).unwrap())
        .await
        .unwrap();
    coord.stop().await;
    assert_eq!(m.pairs, valid_ids.len() as u64);
    assert_eq!(
        output_rows(Path::new(&cfg.job.output)).len(),
        valid_ids.len()
    );
}

/// While a worker runs, the coordinator's `/metrics` shows the worker's own
/// figures under its id and device; at the end they add up to the job, and
/// the coordinator's histograms count its shards and calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn metrics_show_a_running_workers_figures_and_the_jobs_histograms() {
    let dir = tempfile::tempdir().unwrap();
    let (cfg, valid_ids, _) = job(dir.path(), 900);
    let coord = start_on_loopback(&cfg).await.unwrap();
    let o = WorkerOptions {
        coordinator: format!("http://{}", coord.grpc_addr),
        name: "measured".into(),
        connect_attempts: 5,
        access: Default::default(),
        device: None,
        model_dir: None,
    };
    let worker = tokio::spawn(run_worker(o, Arc::new(AtomicBool::new(false))));
    let http = coord.http_addr;
    let page = move || get_plain(http, "/metrics", None);

    // The worker's figures arrive with its heartbeats and completions:
    // watch for them before it is done.
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    let (id, device, seen) = loop {
        assert!(
            std::time::Instant::now() < deadline,
            "no worker figures on /metrics in 300 s"
        );
        assert!(
            !worker.is_finished(),
            "the worker finished before /metrics showed its figures:\n{}",
            page().await.1
        );
        let s = paraforge_coordinator::shared::status(&coord.shared);
        if let Some(w) = s.workers.first() {
            let (code, body) = page().await;
            assert_eq!(code, 200, "{body}");
            let series = format!(
                "paraforge_worker_sentences_total{{worker=\"{}\",device=\"{}\"}}",
                w.worker_id, w.device
            );
            if let Some(n) = metric(&body, &series).filter(|&n| n > 0.0) {
                break (w.worker_id.clone(), w.device.clone(), n);
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        device, "cpu",
        "the job's device labels a worker that names none"
    );

    let summary = tokio::time::timeout(Duration::from_secs(600), worker)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let (_, body) = page().await;
    let labels = format!("{{worker=\"{id}\",device=\"{device}\"}}");
    let get = |name: &str, labels: &str| {
        metric(&body, &format!("{name}{labels}"))
            .unwrap_or_else(|| panic!("no {name}{labels} on the page:\n{body}"))
    };
    let sentences = get("paraforge_worker_sentences_total", &labels);
    assert!(sentences >= seen, "a counter never goes back");
    // One worker, no lease lost: every valid pair was translated once.
    assert_eq!(get("paraforge_lease_expiries_total", ""), 0.0, "{body}");
    assert_eq!(sentences, valid_ids.len() as f64, "{body}");
    assert!(get("paraforge_worker_output_tokens_total", &labels) > 0.0);
    assert!(get("paraforge_worker_tokens_per_second", &labels) > 0.0);
    let batches = get("paraforge_worker_batch_duration_seconds_count", &labels);
    assert!(batches >= sentences / 16.0, "batch_size = 16: {body}");
    assert_eq!(
        get(
            "paraforge_worker_batch_duration_seconds_bucket",
            &format!("{{le=\"+Inf\",worker=\"{id}\",device=\"{device}\"}}")
        ),
        batches
    );
    // The coordinator's own: one shard duration per committed shard, a
    // CompleteShard latency for each, and the pairs committed.
    let shards = summary.shards_committed as f64;
    assert!(shards >= 3.0, "{summary:?}");
    assert_eq!(get("paraforge_shard_duration_seconds_count", ""), shards);
    assert!(
        get(
            "paraforge_rpc_duration_seconds_count",
            "{method=\"CompleteShard\"}"
        ) >= shards
    );
    assert_eq!(
        get("paraforge_pairs_committed_total", ""),
        valid_ids.len() as f64
    );
    assert_eq!(get("paraforge_shards_committed", ""), shards);
    assert!(body.ends_with("# EOF\n"), "{body}");
    coord.stop().await;
}

/// One GET with the standard library, for a test blocked outside the
/// runtime; (status code, body), or the connection error.
fn blocking_get(addr: std::net::SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    s.set_read_timeout(Some(Duration::from_secs(1)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let code = text.split_whitespace().nth(1).and_then(|c| c.parse().ok());
    let body = text.find("\r\n\r\n").map_or("", |i| &text[i + 4..]);
    Ok((code.unwrap_or(0), body.to_string()))
}

fn phase_of(body: &str) -> String {
    let v: serde_json::Value =
        serde_json::from_str(body.trim()).unwrap_or_else(|e| panic!("{e}: {body}"));
    v["phase"].as_str().unwrap_or_default().to_string()
}

/// `/status` and `/metrics` answer from the coordinator's first moment to
/// its last, saying what it does: planning before any state exists
/// (minutes at CzEng's size, when they used to be silent), serving, then
/// reading the output back after the workers are gone; resuming when the
/// state exists. A prober fetching throughout gets every answer within a
/// second, its phases in the job's order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_pages_answer_through_planning_serving_and_the_end() {
    use paraforge_coordinator::job::Job;
    use paraforge_coordinator::phase::Phase;

    let dir = tempfile::tempdir().unwrap();
    let input = paraforge_tests::repo_root().join("data/sample/czeng16-heldout.cs-en.tsv");
    let text = format!(
        "[job]\nname = \"pages\"\noutput = \"{}\"\nshard_pairs = 1000\n\n[input]\npaths = [\"{}\"]\nformat = \"pairs\"\nid_column = 0\ntranslation_score_column = 1\ntranslation_column = 2\nreference_column = 3\n\n{}",
        dir.path().join("out").display(),
        input.display(),
        scoring_section()
    );
    let cfg = JobConfig::parse(&text, Path::new("pages.toml")).unwrap();
    let any: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
    let binding = Job::bind(&cfg, Some(any)).await.unwrap();
    let http = binding.http_addr();

    // Before planning has begun: nothing planned, and the page says why.
    let (code, body) = get_plain(http, "/status", None).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(phase_of(&body), "planning");
    let (_, page) = get_plain(http, "/metrics", None).await;
    assert_eq!(
        metric(&page, "paraforge_phase{phase=\"planning\"}"),
        Some(1.0),
        "{page}"
    );
    assert_eq!(metric(&page, "paraforge_shards_total"), Some(0.0), "{page}");

    let done = Arc::new(AtomicBool::new(false));
    let prober = {
        let done = done.clone();
        tokio::task::spawn_blocking(move || {
            let mut seen: Vec<(String, f64)> = Vec::new();
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                for path in ["/status", "/metrics"] {
                    let t = std::time::Instant::now();
                    let (code, body) = match blocking_get(http, path) {
                        Ok(r) => r,
                        // The pages end with the job, after `done`.
                        Err(_) if done.load(std::sync::atomic::Ordering::Relaxed) => break,
                        Err(e) => panic!("{path} unanswered after {:?}: {e}", seen.last()),
                    };
                    assert_eq!(code, 200, "{path}: {body}");
                    if path == "/status" {
                        seen.push((phase_of(&body), t.elapsed().as_secs_f64()));
                    }
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            seen
        })
    };

    let job = binding.start(Some(any)).await.unwrap();
    let (_, body) = get_plain(http, "/status", None).await;
    assert_eq!(phase_of(&body), "serving");
    let o = WorkerOptions {
        coordinator: format!("http://{}", job.grpc_addr()),
        name: "w".into(),
        connect_attempts: 5,
        access: Default::default(),
        device: None,
        model_dir: None,
    };
    let worker = tokio::spawn(run_worker(o, Arc::new(AtomicBool::new(false))));
    let never = AtomicBool::new(false);
    assert!(job.wait(&never, |_| {}).await);
    job.drain(&never).await;
    // The workers are gone and the output is final: what the pages say
    // while the summary reads it back (a blocking call: the runtime's
    // other threads serve it).
    let mut during = None;
    let finished = job
        .finish(None, |_| {
            during = Some(blocking_get(http, "/status"));
            done.store(true, std::sync::atomic::Ordering::Relaxed);
        })
        .await
        .unwrap();
    worker.await.unwrap().unwrap();
    let (code, body) = during.unwrap().expect("the pages answer after finalizing");
    assert_eq!(code, 200, "{body}");
    assert_eq!(phase_of(&body), "reading_back");
    assert!(body.contains("\"finished\":true"), "{body}");
    assert_eq!(finished.manifest.shards_committed, 5);
    let seen = match prober.await {
        Ok(seen) => seen,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    };
    let order: Vec<&str> = Phase::ALL.iter().map(|p| p.as_str()).collect();
    let ranks: Vec<usize> = seen
        .iter()
        .map(|(p, _)| order.iter().position(|o| o == p).expect("a known phase"))
        .collect();
    assert!(ranks.windows(2).all(|w| w[0] <= w[1]), "{seen:?}");
    assert!(seen.iter().any(|(p, _)| p == "serving"), "{seen:?}");
    let slowest = seen.iter().map(|s| s.1).fold(0.0, f64::max);
    assert!(slowest < 1.0, "a page took {slowest} s");
    // The process is done: the pages with it.
    assert!(blocking_get(http, "/status").is_err());

    // Started again on its state, the job resumes, and says so first.
    let again = Job::bind(&cfg, Some(any)).await.unwrap();
    let (_, body) = get_plain(again.http_addr(), "/status", None).await;
    assert_eq!(phase_of(&body), "resuming");
}
