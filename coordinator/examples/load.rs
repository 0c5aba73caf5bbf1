//! Load benchmark: W simulated workers (each its own gRPC connection over
//! loopback) register, lease, heartbeat and complete S shards against a real
//! coordinator (`run::start`, redb state, one line per shard so the planner
//! cuts S shards). Each completion names real files (one row, checked by the
//! coordinator like any worker's). Prints RPCs/s and p50/p99 latency per
//! RPC, then checks the store: every shard committed exactly once, none lost.
//!
//! usage: load [WORKERS=1000] [SHARDS=100000]

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use paraforge_coordinator::run::start;
use paraforge_job::config::JobConfig;
use paraforge_rpc::access::ClientAccess;
use paraforge_rpc::proto::{self as pb, lease_shard_response};

#[derive(Default)]
struct Lat {
    lease: Vec<u32>,
    heartbeat: Vec<u32>,
    complete: Vec<u32>,
}

fn pct(v: &mut [u32], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_unstable();
    v[((v.len() - 1) as f64 * p).round() as usize] as f64 / 1000.0
}

/// A valid output file with one row.
fn one_row_parquet() -> bytes::Bytes {
    use paraforge_core::{PairRow, RowsBuilder, Scorer};
    let mut b = RowsBuilder::default();
    b.push(&PairRow {
        id: "id".into(),
        source: "cs".into(),
        reference: "en".into(),
        translation: "en".into(),
        candidate_rank: 1,
        translation_score: Some(-1.0),
        source_len: Some(1),
        truncated: false,
        scores: Scorer::new(None).score("en", "en"),
    });
    let mut out = Vec::new();
    let mut w =
        parquet::arrow::ArrowWriter::try_new(&mut out, paraforge_core::schema::schema(), None)
            .unwrap();
    w.write(&b.finish()).unwrap();
    w.close().unwrap();
    out.into()
}

/// Stores an attempt's two files as a worker would and describes them.
async fn put_files(
    storage: &paraforge_job::storage::Storage,
    shard: u64,
    token: u64,
    row: &bytes::Bytes,
) -> Vec<pb::OutputFile> {
    use paraforge_core::layout::OutputLayout;
    use sha2::Digest;
    let hex = |b: &[u8]| -> String { hex::encode(sha2::Sha256::digest(b)) };
    let (pq, rj) = (
        OutputLayout::temp_part_path(shard, token),
        OutputLayout::temp_rejects_path(shard, token),
    );
    storage.put(&pq, row.clone()).await.unwrap();
    storage.put(&rj, bytes::Bytes::new()).await.unwrap();
    vec![
        pb::OutputFile {
            path: pq,
            rows: 1,
            bytes: row.len() as u64,
            sha256: hex(row),
        },
        pb::OutputFile {
            path: rj,
            rows: 0,
            bytes: 0,
            sha256: hex(b""),
        },
    ]
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let a: Vec<String> = std::env::args().collect();
    let workers: usize = a.get(1).and_then(|s| s.parse().ok()).unwrap_or(1000);
    let shards: usize = a.get(2).and_then(|s| s.parse().ok()).unwrap_or(100_000);
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.tsv");
    let mut text = String::with_capacity(shards * 16);
    for i in 0..shards {
        text.push_str(&format!("id{i}\t1\tcs\ten\n"));
    }
    std::fs::write(&input, text).unwrap();
    let cfg = JobConfig::parse(
        &format!(
            "[job]\nname = \"load\"\noutput = \"{}\"\nshard_pairs = 1\nlease_seconds = 60\n[input]\npaths = [\"{}\"]\nformat = \"czeng16\"\n[model]\ndir = \"unused\"\n",
            dir.path().join("out").display(),
            input.display()
        ),
        Path::new("load.toml"),
    )
    .unwrap();
    let t = Instant::now();
    let c = start(
        &cfg,
        Some("127.0.0.1:0".parse().unwrap()),
        Some("127.0.0.1:0".parse().unwrap()),
    )
    .await
    .unwrap();
    eprintln!("planned and stored {shards} shards in {:.1?}", t.elapsed());
    let url = format!("http://{}", c.grpc_addr);
    let storage = paraforge_job::storage::Storage::open(&cfg.job.output).unwrap();
    let row = one_row_parquet();
    let accepted = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..workers)
        .map(|i| {
            let (url, accepted, refused) = (url.clone(), accepted.clone(), refused.clone());
            let (storage, row) = (storage.clone(), row.clone());
            tokio::spawn(async move {
                let mut lat = Lat::default();
                // A burst of 1,000 connects can overflow the listen backlog;
                // like real workers, retry with backoff.
                let mut delay = Duration::from_millis(20);
                let (mut cl, (id, secret)) = loop {
                    let r = async {
                        let mut cl = ClientAccess::default()
                            .connect(&url)
                            .await
                            .map_err(|e| e.to_string())?;
                        let id = cl
                            .register_worker(pb::RegisterWorkerRequest {
                                name: format!("sim-{i}"),
                                version: env!("CARGO_PKG_VERSION").into(),
                                ..Default::default()
                            })
                            .await
                            .map_err(|e| e.to_string())?
                            .into_inner();
                        Ok::<_, String>((cl, (id.worker_id, id.worker_secret)))
                    }
                    .await;
                    match r {
                        Ok(x) => break x,
                        Err(_) => {
                            tokio::time::sleep(delay).await;
                            delay = (delay * 2).min(Duration::from_secs(2));
                        }
                    }
                };
                loop {
                    let t = Instant::now();
                    let r = cl
                        .lease_shard(pb::LeaseShardRequest {
                            worker_id: id.clone(),
                            worker_secret: secret.clone(),
                            // No model here: the first lease fixes this one.
                            model_sha256: "ab".repeat(32),
                        })
                        .await
                        .unwrap()
                        .into_inner();
                    lat.lease.push(t.elapsed().as_micros() as u32);
                    let lease = match r.result {
                        Some(lease_shard_response::Result::Lease(l)) => l,
                        Some(lease_shard_response::Result::RetryAfterMs(ms)) => {
                            tokio::time::sleep(Duration::from_millis(ms.min(50) as u64)).await;
                            continue;
                        }
                        _ => break,
                    };
                    let shard_id = lease.shard.as_ref().unwrap().shard_id;
                    let t = Instant::now();
                    cl.heartbeat(pb::HeartbeatRequest {
                        worker_id: id.clone(),
                        worker_secret: secret.clone(),
                        leases: vec![pb::LeaseProgress {
                            shard_id,
                            lease_token: lease.lease_token,
                            progress: Some(pb::Progress {
                                pairs_written: 1,
                                rejects: 0,
                                lines_read: 0,
                            }),
                        }],
                        metrics: None,
                    })
                    .await
                    .unwrap();
                    lat.heartbeat.push(t.elapsed().as_micros() as u32);
                    let files = put_files(&storage, shard_id, lease.lease_token, &row).await;
                    let t = Instant::now();
                    let done = cl
                        .complete_shard(pb::CompleteShardRequest {
                            worker_id: id.clone(),
                            worker_secret: secret.clone(),
                            shard_id,
                            lease_token: lease.lease_token,
                            files,
                            totals: Some(pb::Progress {
                                pairs_written: 1,
                                rejects: 0,
                                lines_read: 1,
                            }),
                            metrics: None,
                        })
                        .await
                        .unwrap()
                        .into_inner();
                    lat.complete.push(t.elapsed().as_micros() as u32);
                    if done.accepted {
                        accepted.fetch_add(1, Ordering::Relaxed);
                    } else {
                        refused.fetch_add(1, Ordering::Relaxed);
                    }
                }
                lat
            })
        })
        .collect();
    let mut all = Lat::default();
    for t in tasks {
        let l = t.await.unwrap();
        all.lease.extend(l.lease);
        all.heartbeat.extend(l.heartbeat);
        all.complete.extend(l.complete);
    }
    let secs = started.elapsed().as_secs_f64();
    let rpcs = all.lease.len() + all.heartbeat.len() + all.complete.len();
    println!(
        "{workers} workers, {shards} shards: {rpcs} RPCs in {secs:.1} s = {:.0} RPCs/s",
        rpcs as f64 / secs
    );
    println!("| RPC | calls | p50 ms | p99 ms |\n|---|---:|---:|---:|");
    for (name, v) in [
        ("LeaseShard", &mut all.lease),
        ("Heartbeat", &mut all.heartbeat),
        ("CompleteShard", &mut all.complete),
    ] {
        let n = v.len();
        println!(
            "| {name} | {n} | {:.2} | {:.2} |",
            pct(v, 0.5),
            pct(v, 0.99)
        );
    }
    // The store afterwards: reopen the state file as a restarted coordinator would.
    let s = paraforge_coordinator::shared::status(&c.shared);
    let (acc, refd) = (
        accepted.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed),
    );
    c.stop().await;
    let st = paraforge_coordinator::state::JobState::open(
        &dir.path().join("out/_coordinator.redb"),
        "load",
        3,
        Vec::new,
    )
    .unwrap();
    let committed = st
        .shards()
        .filter(|s| {
            matches!(
                s.status,
                paraforge_coordinator::state::Status::Committed { .. }
            )
        })
        .count();
    println!(
        "store: {committed} of {shards} shards committed after reopening; {acc} completions accepted, {refd} refused; status said {} committed, {} failed",
        s.shards_committed, s.shards_failed
    );
    assert_eq!(committed, shards, "a shard was lost");
    assert_eq!(
        acc as usize, shards,
        "a shard was committed twice or not at all"
    );
    println!("ok: no shard lost or committed twice");
}
