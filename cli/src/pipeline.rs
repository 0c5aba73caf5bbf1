//! `paraforge run`, `coordinator`, `worker` and `status`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use paraforge_coordinator::run::{finalize, start, Running};
use paraforge_core::access::ClientAccess;
use paraforge_core::config::JobConfig;
use paraforge_core::proto::JobStatusRequest;
use paraforge_core::storage::Storage;
use paraforge_nmt::{check_device, Device};
use paraforge_worker::node::{run as run_worker, WorkerOptions};

#[derive(clap::Args)]
pub struct RunArgs {
    /// The job configuration (TOML).
    #[arg(long)]
    config: PathBuf,
    /// Local workers (default: [workers].local of the config).
    #[arg(long)]
    workers: Option<usize>,
    /// One local worker per GPU, each on its own device: `--gpus 0,1,2,3`
    /// runs workers on cuda:0 ... cuda:3 (instead of --workers).
    #[arg(long, value_delimiter = ',', conflicts_with = "workers")]
    gpus: Vec<u32>,
}

#[derive(clap::Args)]
pub struct CoordinatorArgs {
    #[arg(long)]
    config: PathBuf,
}

#[derive(clap::Args)]
pub struct WorkerArgs {
    /// The coordinator's gRPC URL, e.g. http://10.0.0.5:50051.
    #[arg(long, env = "PARAFORGE_COORDINATOR")]
    coordinator: String,
    /// This worker's name in the coordinator's status (default: host name).
    #[arg(long)]
    name: Option<String>,
    /// Attempts to reach the coordinator before giving up (with backoff).
    #[arg(long, default_value_t = 30)]
    connect_attempts: u32,
    /// Run the model on this device instead of the job's `model.device`
    /// (cpu, cuda or cuda:N; one worker per GPU).
    #[arg(long)]
    device: Option<String>,
    /// Load the model from this directory instead of the job's `model.dir`
    /// (a node-local copy of the same model).
    #[arg(long)]
    model_dir: Option<PathBuf>,
    #[command(flatten)]
    access: AccessArgs,
}

/// How to reach a coordinator that uses TLS or a token. The token itself
/// is never an argument: it comes from a file or `PARAFORGE_TOKEN`.
#[derive(clap::Args)]
pub struct AccessArgs {
    /// CA certificate (PEM) of the coordinator's TLS certificate; turns TLS
    /// on (use an https:// URL).
    #[arg(long, env = "PARAFORGE_CA_CERT")]
    ca_cert: Option<PathBuf>,
    /// Name to check the coordinator's certificate against (default: the
    /// URL's host).
    #[arg(long)]
    tls_domain: Option<String>,
    /// File whose first line is the access token (default: $PARAFORGE_TOKEN).
    #[arg(long, env = "PARAFORGE_TOKEN_FILE")]
    token_file: Option<PathBuf>,
}

impl AccessArgs {
    fn client(&self) -> Result<ClientAccess> {
        Ok(ClientAccess {
            token: paraforge_core::access::load_token(self.token_file.as_deref())?,
            ca_cert: self.ca_cert.clone(),
            domain: self.tls_domain.clone(),
            max_message_bytes: None,
        })
    }
}

#[derive(clap::Args)]
pub struct StatusArgs {
    #[arg(long, env = "PARAFORGE_COORDINATOR")]
    coordinator: String,
    #[command(flatten)]
    access: AccessArgs,
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

fn load(path: &std::path::Path) -> Result<JobConfig> {
    JobConfig::load(path).map_err(anyhow::Error::from)
}

/// Sets `stop` on Ctrl-C or SIGTERM.
fn stop_on_signal(stop: Arc<AtomicBool>) {
    tokio::spawn(async move {
        #[cfg(unix)]
        {
            let mut term =
                match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                    Ok(s) => s,
                    Err(_) => return,
                };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
        tracing::warn!("stop requested: finishing current shards, leasing no more");
        stop.store(true, Ordering::Relaxed);
    });
}

async fn wait_finished(c: &Running, bar: Option<&ProgressBar>, stop: &AtomicBool) {
    loop {
        let s = paraforge_coordinator::service::status(&c.shared);
        if let Some(b) = bar {
            b.set_length(s.shards_total);
            b.set_position(s.shards_committed + s.shards_failed);
            b.set_message(format!(
                "{} pairs, {:.1} pairs/s, eta {}",
                s.pairs_written,
                s.pairs_per_second,
                if s.eta_seconds >= 0.0 {
                    format!("{:.0}s", s.eta_seconds)
                } else {
                    "-".into()
                }
            ));
        }
        if s.finished || stop.load(Ordering::Relaxed) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn finish(cfg: &JobConfig, c: Running) -> Result<()> {
    let storage = Storage::open(&cfg.job.output)?;
    let m = finalize(&c.shared, &storage).await;
    c.stop().await;
    // An incomplete job is an error (exit status 1) with no success marker.
    let m = m?;
    println!(
        "job {}: {} of {} shards committed; {} pairs, {} rejected lines; output {}",
        m.job, m.shards_committed, m.shards_total, m.pairs, m.rejects, cfg.job.output
    );
    if !m.rejects_by_reason.is_empty() {
        println!("  rejected by reason: {}", by_reason(&m.rejects_by_reason));
    }
    if !m.removed_uncommitted.is_empty() {
        println!(
            "  removed {} files of uncommitted attempts",
            m.removed_uncommitted.len()
        );
    }
    // Summary and bins read the output as local Parquet; an object-store
    // output is staged (checksums verified) to a local temporary directory
    // first, and the bins are uploaded back next to it.
    let remote = is_remote(&cfg.job.output);
    let staged = match (remote, &cfg.bins) {
        (true, Some(_)) => Some(stage(&storage, &m).await?),
        _ => None,
    };
    let local_out = match &staged {
        Some(d) => Some(d.path().join("output")),
        None if !remote => Some(PathBuf::from(&cfg.job.output)),
        None => None,
    };
    if let Some(out) = &local_out {
        summarize(out).context("reading the output back")?;
    }
    if let (Some(b), Some(target), Some(input)) = (&cfg.bins, cfg.bins_output(), local_out) {
        // A remote target is staged locally; the scratch directory (if the
        // output was not staged already) is removed at the end of this block.
        let mut scratch = None;
        let local_bins = match &staged {
            Some(d) if is_remote(&target) => d.path().join("bins"),
            _ if is_remote(&target) => scratch
                .insert(tempfile::tempdir().context("creating a staging directory")?)
                .path()
                .join("bins"),
            _ => PathBuf::from(target.strip_prefix("file://").unwrap_or(&target)),
        };
        let mut o = paraforge_dataset::bins::BinOptions::new(input, local_bins.clone());
        o.deciles = b.deciles.clone();
        o.train_sample = b.train_sample;
        o.dedup = b.dedup;
        let bm = tokio::task::spawn_blocking(move || paraforge_dataset::bins::run(&o))
            .await?
            .context("binning the output")?;
        if is_remote(&target) {
            let n = upload_dir(&Storage::open(&target)?, &local_bins).await?;
            println!("  bins: uploaded {n} files");
        }
        println!(
            "  bins: {} pairs in {target} ({:?})",
            bm.kept_rows, bm.ranges
        );
    }
    Ok(())
}

fn is_remote(url: &str) -> bool {
    url.contains("://") && !url.starts_with("file://")
}

/// Downloads the committed files and `_manifest.json` to
/// `<tmp>/output`, checking each file's SHA-256 against the manifest.
async fn stage(
    storage: &Storage,
    m: &paraforge_coordinator::run::Manifest,
) -> Result<tempfile::TempDir> {
    use sha2::Digest;
    let dir = tempfile::tempdir().context("creating a staging directory")?;
    let root = dir.path().join("output");
    let bar = ProgressBar::new(m.files.len() as u64 + 1).with_message("staging the output");
    for (rel, sha) in m
        .files
        .iter()
        .map(|f| (f.path.as_str(), Some(f.sha256.as_str())))
        .chain([("_manifest.json", None)])
    {
        let bytes = storage.get(rel).await?;
        if let Some(sha) = sha {
            let got = hex::encode(sha2::Sha256::digest(&bytes));
            anyhow::ensure!(
                got == sha,
                "{}/{rel}: checksum {got} differs from the manifest's {sha}",
                storage.url()
            );
        }
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap_or(&root))?;
        std::fs::write(&p, &bytes).with_context(|| format!("writing {}", p.display()))?;
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(dir)
}

/// Uploads every file under `dir` to `storage`, keeping relative paths.
async fn upload_dir(storage: &Storage, dir: &std::path::Path) -> Result<usize> {
    let mut stack = vec![dir.to_path_buf()];
    let mut n = 0;
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let p = e?.path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let rel = p.strip_prefix(dir)?.to_string_lossy().replace('\\', "/");
            let bytes = std::fs::read(&p).with_context(|| format!("reading {}", p.display()))?;
            storage.put(&rel, bytes::Bytes::from(bytes)).await?;
            n += 1;
        }
    }
    Ok(n)
}

/// Mean scores over the output, how the pairs fall into the five
/// para_score ranges (seed 000, Table 3) and a few example rows.
fn summarize(out: &std::path::Path) -> Result<()> {
    use arrow_array::{Array, Float32Array, StringArray};
    use paraforge_core::schema::{col, column, dataset_files, PairReader};
    let (mut n, mut para, mut para_n, mut tri, mut ts) = (0u64, 0f64, 0u64, 0f64, 0f64);
    let mut examples = Vec::new();
    let mut ranges = paraforge_dataset::report::RangeTally::default();
    for f in dataset_files(out)? {
        for b in PairReader::open(
            &f,
            &[
                col::REFERENCE,
                col::TRANSLATION,
                col::PARA_SCORE,
                col::TRIGRAM_OVERLAP,
            ],
        )? {
            let b = b?;
            let r = column::<StringArray>(&b, col::REFERENCE, &f)?;
            let t = column::<StringArray>(&b, col::TRANSLATION, &f)?;
            let p = column::<Float32Array>(&b, col::PARA_SCORE, &f)?;
            let g = column::<Float32Array>(&b, col::TRIGRAM_OVERLAP, &f)?;
            let s = column::<Float32Array>(&b, col::TRANSLATION_SCORE, &f)?;
            for i in 0..b.num_rows() {
                n += 1;
                if !p.is_null(i) {
                    para += p.value(i) as f64;
                    para_n += 1;
                }
                tri += g.value(i) as f64;
                ts += s.value(i) as f64;
                ranges.add((!p.is_null(i)).then(|| p.value(i)), g.value(i));
                if examples.len() < 5 && i % 97 == 3 {
                    let ps = if p.is_null(i) {
                        "null".to_string()
                    } else {
                        format!("{:.3}", p.value(i))
                    };
                    examples.push(format!(
                        "  {}\n    -> {}   (para {ps}, trigram {:.2}, score {:.2})",
                        r.value(i),
                        t.value(i),
                        g.value(i),
                        s.value(i)
                    ));
                }
            }
        }
    }
    let n_f = n.max(1) as f64;
    println!(
        "  mean para_score {:.3}, mean trigram overlap {:.3}, mean translation score {:.3} over {n} pairs",
        para / para_n.max(1) as f64,
        tri / n_f,
        ts / n_f
    );
    for l in ranges.lines() {
        println!("  {l}");
    }
    println!("  examples (reference -> back-translation):");
    for e in examples {
        println!("{e}");
    }
    Ok(())
}

/// A device named on the command line, checked before anything starts.
fn parse_device(flag: &str, s: &str) -> Result<Device> {
    let d: Device = s
        .parse()
        .map_err(|e: String| anyhow::anyhow!("{flag} {s}: {e}"))?;
    check_device(d).with_context(|| format!("{flag} {s}"))?;
    Ok(d)
}

pub fn run(a: RunArgs) -> Result<()> {
    // Every GPU is checked before the job starts (or claims its output).
    let gpus: Vec<Device> = a
        .gpus
        .iter()
        .map(|g| parse_device("--gpus", &format!("cuda:{g}")))
        .collect::<Result<_>>()?;
    let cfg = load(&a.config)?;
    let n = if gpus.is_empty() {
        a.workers.unwrap_or(cfg.workers.local).max(1)
    } else {
        gpus.len()
    };
    runtime()?.block_on(async move {
        let c = start(&cfg, None, None)
            .await
            .context("starting the coordinator")?;
        // Local workers reach it over loopback with the job's own TLS and token.
        let cc = &cfg.coordinator;
        let access = ClientAccess {
            token: paraforge_core::access::load_token(
                cc.auth_token_file.as_deref().map(std::path::Path::new),
            )?,
            ca_cert: cc.tls_ca.clone().or(cc.tls_cert.clone()).map(PathBuf::from),
            domain: None,
            max_message_bytes: Some(cc.max_message_bytes),
        };
        let scheme = if access.ca_cert.is_some() {
            "https"
        } else {
            "http"
        };
        let url = format!("{scheme}://{}", c.grpc_addr);
        let stop = Arc::new(AtomicBool::new(false));
        stop_on_signal(stop.clone());
        let workers: Vec<_> = (0..n)
            .map(|i| {
                let device = gpus.get(i).copied();
                let o = WorkerOptions {
                    coordinator: url.clone(),
                    name: match device {
                        Some(d) => format!("local-{i}-{d}"),
                        None => format!("local-{i}"),
                    },
                    connect_attempts: 10,
                    access: access.clone(),
                    device,
                    model_dir: None,
                };
                tokio::spawn(run_worker(o, stop.clone()))
            })
            .collect();
        let bar = ProgressBar::new(0);
        bar.set_style(
            ProgressStyle::with_template("{bar:40} {pos}/{len} shards {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        let never = AtomicBool::new(false);
        // Either the job finishes (the workers then see `done` and end), or
        // every worker ends first: then nothing would ever finish the job.
        let results = {
            let watch = wait_finished(&c, Some(&bar), &never);
            let all = futures_join(workers);
            tokio::pin!(watch, all);
            tokio::select! {
                _ = &mut watch => all.await,
                r = &mut all => r,
            }
        };
        bar.finish_and_clear();
        let mut first_error = None;
        for r in results {
            let e = match r {
                Ok(Ok(_)) => continue,
                Ok(Err(e)) => e.to_string(),
                Err(e) => format!("worker task failed: {e}"),
            };
            eprintln!("paraforge: a worker stopped: {e}");
            first_error.get_or_insert(e);
        }
        let s = paraforge_coordinator::service::status(&c.shared);
        if !s.finished && !stop.load(Ordering::Relaxed) {
            c.stop().await;
            anyhow::bail!(
                "every local worker stopped before the job finished ({} of {} shards committed; the state is kept, run again to resume): {}",
                s.shards_committed,
                s.shards_total,
                first_error.unwrap_or_else(|| "no error reported".into())
            );
        }
        if stop.load(Ordering::Relaxed) {
            let s = paraforge_coordinator::service::status(&c.shared);
            c.stop().await;
            // Not a success: a script must not go on with a partial output.
            anyhow::bail!(
                "stopped before the job finished: {} of {} shards committed; run the same command to resume",
                s.shards_committed,
                s.shards_total
            );
        }
        finish(&cfg, c).await
    })
}

async fn futures_join<T>(
    hs: Vec<tokio::task::JoinHandle<T>>,
) -> Vec<Result<T, tokio::task::JoinError>> {
    let mut out = Vec::with_capacity(hs.len());
    for h in hs {
        out.push(h.await);
    }
    out
}

pub fn coordinator(a: CoordinatorArgs) -> Result<()> {
    let cfg = load(&a.config)?;
    runtime()?.block_on(async move {
        let c = start(&cfg, None, None)
            .await
            .context("starting the coordinator")?;
        println!(
            "coordinator for job {} on grpc://{} (metrics http://{}/metrics)",
            cfg.job.name, c.grpc_addr, c.http_addr
        );
        let stop = Arc::new(AtomicBool::new(false));
        stop_on_signal(stop.clone());
        wait_finished(&c, None, &stop).await;
        if stop.load(Ordering::Relaxed) {
            let s = paraforge_coordinator::service::status(&c.shared);
            c.stop().await;
            anyhow::bail!(
                "stopped before the job finished: {} of {} shards committed; the state is kept: start again to resume",
                s.shards_committed,
                s.shards_total
            );
        }
        // Serve until every worker still around has been told `done` (an
        // idle one asks again within a second; a busy one when its stale
        // attempt ends), for at most one lease: a worker silent that long
        // is gone or will find its lease expired anyway.
        let limit = std::time::Instant::now() + c.shared.lease;
        while c.shared.awaiting_done() > 0 && std::time::Instant::now() < limit {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let left = c.shared.awaiting_done();
        if left > 0 {
            tracing::warn!(
                workers = left,
                "stopping before every worker was told the job is done"
            );
        }
        finish(&cfg, c).await
    })
}

pub fn worker(a: WorkerArgs) -> Result<()> {
    let device = a
        .device
        .as_deref()
        .map(|d| parse_device("--device", d))
        .transpose()?;
    if let Some(dir) = &a.model_dir {
        anyhow::ensure!(
            dir.is_dir(),
            "--model-dir {}: not a directory",
            dir.display()
        );
    }
    let name = a
        .name
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "worker".into());
    runtime()?.block_on(async move {
        let stop = Arc::new(AtomicBool::new(false));
        stop_on_signal(stop.clone());
        let o = WorkerOptions {
            coordinator: a.coordinator.clone(),
            name,
            connect_attempts: a.connect_attempts,
            access: a.access.client()?,
            device,
            model_dir: a.model_dir.clone(),
        };
        let s = run_worker(o, stop)
            .await
            .with_context(|| format!("worker for {}", a.coordinator))?;
        println!(
            "worker done: {} shards committed, {} refused (stale), {} failed; {} pairs",
            s.shards_committed, s.shards_refused, s.shards_failed, s.pairs
        );
        Ok(())
    })
}

pub fn status(a: StatusArgs) -> Result<()> {
    runtime()?.block_on(async move {
        let mut c = a.access.client()?.connect(&a.coordinator).await?;
        let s = match c.job_status(JobStatusRequest {}).await {
            Ok(r) => r.into_inner(),
            Err(e) => {
                let hint = match e.code() {
                    tonic::Code::Unknown | tonic::Code::Unavailable
                        if a.coordinator.starts_with("http://") =>
                    {
                        " (if the coordinator uses TLS: an https:// URL and --ca-cert)"
                    }
                    tonic::Code::Unauthenticated => {
                        " (give the job's token: --token-file or PARAFORGE_TOKEN)"
                    }
                    _ => "",
                };
                anyhow::bail!(
                    "asking {} for the job status: {}{hint}",
                    a.coordinator,
                    e.message()
                );
            }
        };
        println!(
            "job {} ({})",
            s.job_id,
            if s.finished { "finished" } else { "running" }
        );
        println!(
            "shards: {} total, {} committed, {} leased, {} pending, {} failed",
            s.shards_total, s.shards_committed, s.shards_leased, s.shards_pending, s.shards_failed
        );
        println!(
            "pairs: {} written, {} rejected lines",
            s.pairs_written, s.rejects
        );
        if !s.rejects_by_reason.is_empty() {
            let by: std::collections::BTreeMap<String, u64> =
                s.rejects_by_reason.clone().into_iter().collect();
            println!("rejected by reason: {}", by_reason(&by));
        }
        let eta = if s.eta_seconds >= 0.0 {
            format!("{:.0} s", s.eta_seconds)
        } else {
            "unknown".into()
        };
        println!("throughput: {:.1} pairs/s, eta {eta}", s.pairs_per_second);
        println!("workers: {}", s.workers_total);
        for f in &s.failed {
            println!(
                "  shard {} failed after {} attempts: {}",
                f.shard_id, f.attempts, f.reason
            );
        }
        println!("output: {}", s.output_url);
        Ok(())
    })
}

/// `code n, code n, ...` with `[filters]` codes marked, largest first.
fn by_reason(by: &std::collections::BTreeMap<String, u64>) -> String {
    let mut v: Vec<(&String, &u64)> = by.iter().collect();
    v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    v.iter()
        .map(|(code, n)| {
            let kind = if paraforge_core::bitext::RejectReason::is_filter_code(code) {
                " (filter)"
            } else {
                ""
            };
            format!("{code}{kind} {n}")
        })
        .collect::<Vec<_>>()
        .join(", ")
}
