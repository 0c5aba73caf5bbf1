//! `paraforge run`, `coordinator`, `worker` and `status`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use paraforge_coordinator::job::Job;
use paraforge_job::config::JobConfig;
use paraforge_nmt::{check_device, Device};
use paraforge_rpc::access::ClientAccess;
use paraforge_rpc::proto::JobStatusRequest;
use paraforge_worker::node::{run as run_worker, Stop as WorkerStop, WorkerError, WorkerOptions};

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
pub struct PlanArgs {
    /// The job configuration (TOML).
    #[arg(long)]
    config: PathBuf,
    /// Print the plan as one JSON object.
    #[arg(long)]
    json: bool,
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
            token: paraforge_rpc::access::load_token(self.token_file.as_deref())?,
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

/// Runs `f` on a fresh runtime and returns without waiting for blocking
/// work left behind: a stopped worker's model batch ends at its next chunk,
/// which may be later than a grace period allows.
fn block_on<T>(f: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    let rt = runtime()?;
    let r = rt.block_on(f);
    rt.shutdown_background();
    r
}

/// `paraforge plan`: the coordinator's own planning (the same function a
/// run calls), reported instead of served. Nothing is written: the spill
/// files of the dedup pass go to the temporary directory and are removed.
pub fn plan(a: PlanArgs) -> Result<()> {
    let cfg = load(&a.config)?;
    let started = std::time::Instant::now();
    let plan = paraforge_coordinator::plan::plan_job(&cfg).context("planning the job")?;
    let lines: u64 = plan.shards.iter().map(|s| s.range.lines).sum();
    let dropped: u64 = plan.shards.iter().map(|s| s.drop_lines.len() as u64).sum();
    let largest = plan.shards.iter().map(|s| s.range.lines).max().unwrap_or(0);
    let bytes: u64 = plan.inputs.iter().map(|f| f.size).sum();
    let summary = serde_json::json!({
        "job": cfg.job.name,
        "inputs": plan.inputs,
        "input_bytes": bytes,
        "lines": lines,
        "shards": plan.shards.len(),
        "largest_shard_lines": largest,
        "repeated_sources_dropped": cfg.filters.dedup_sources.then_some(dropped),
        "seconds": started.elapsed().as_secs_f64(),
    });
    if a.json {
        println!("{summary}");
        return Ok(());
    }
    println!(
        "{}: {} input file(s), {bytes} bytes, {lines} lines in {} shards (largest {largest} lines)",
        cfg.job.name,
        plan.inputs.len(),
        plan.shards.len()
    );
    for f in &plan.inputs {
        println!("  {} ({} bytes, xxh3 {})", f.input, f.size, f.xxh3);
    }
    if cfg.filters.dedup_sources {
        println!("  {dropped} lines repeat an earlier source and will be dropped");
    }
    Ok(())
}

fn load(path: &std::path::Path) -> Result<JobConfig> {
    JobConfig::load(path).map_err(anyhow::Error::from)
}

/// A process asked to stop has exited this long after the signal, whatever
/// it was doing: Kubernetes' default grace period is 30 s and Slurm's
/// KillWait 30 s, and the promise is 10 s.
const EXIT_WITHIN: Duration = Duration::from_secs(8);

/// On Ctrl-C or SIGTERM: calls `on_stop` (stop waiting, give leases back),
/// and exits non-zero [`EXIT_WITHIN`] later if the process has not ended by
/// then (a finishing step such as the bins can take minutes; a killed one
/// is redone by the next run, which resumes from the state).
fn stop_on_signal(on_stop: impl FnOnce() + Send + 'static) {
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
        tracing::warn!("stop requested: giving leased shards back and stopping");
        on_stop();
        std::thread::spawn(|| {
            std::thread::sleep(EXIT_WITHIN);
            eprintln!(
                "paraforge: still running {} s after the stop signal: exiting now; the job's state is kept, run the same command again to resume",
                EXIT_WITHIN.as_secs()
            );
            std::process::exit(1);
        });
    });
}

/// The progress bar's view of a job's status.
fn show(bar: &ProgressBar, s: &paraforge_rpc::proto::JobStatusResponse) {
    bar.set_length(s.shards_total);
    bar.set_position(s.shards_committed + s.shards_failed);
    bar.set_message(format!(
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

/// Finishes a job (finalize, summary, bins) and prints what it wrote.
async fn finish(job: Job) -> Result<()> {
    let output = job.output().to_string();
    let step: Arc<dyn paraforge_coordinator::bootstrap::ScoreStep> =
        Arc::new(crate::bootstrap::Step);
    let done = job
        .finish(Some(step), |m| {
            println!(
                "job {}: {} of {} shards committed; {} pairs, {} rejected lines; output {output}",
                m.job, m.shards_committed, m.shards_total, m.pairs, m.rejects
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
        })
        .await?;
    if let Some(s) = &done.scored {
        let mean = s.mean.map_or_else(|| "none".into(), |m| format!("{m:.3}"));
        println!(
            "  bootstrap: {} pairs scored by {} cross-fitted models (each fold by the model trained without it); mean para_score {mean}; written to {} (models in its _scorers/)",
            s.rows,
            s.models.len(),
            s.out.display()
        );
    }
    for l in done.summary.iter().flat_map(|s| s.lines()) {
        println!("{l}");
    }
    if let Some(b) = done.bins {
        if let Some(n) = b.uploaded {
            println!("  bins: uploaded {n} files");
        }
        println!(
            "  bins: {} pairs in {} ({:?})",
            b.manifest.kept_rows, b.target, b.manifest.ranges
        );
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
        // Every local worker runs on model.device: checked the same way, so
        // a GPU index the machine lacks stops here, not in each worker
        // after the coordinator has claimed the output.
        if let Some(m) = &cfg.model {
            parse_device("model.device", &m.device)?;
        }
        a.workers.unwrap_or(cfg.workers.local).max(1)
    } else {
        gpus.len()
    };
    block_on(async move {
        let job = Job::start(&cfg, None, None)
            .await
            .context("starting the coordinator")?;
        // Local workers reach it over loopback with the job's own TLS and token.
        let cc = &cfg.coordinator;
        let access = ClientAccess {
            token: paraforge_rpc::access::load_token(
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
        let url = format!("{scheme}://{}", job.grpc_addr());
        let stop = Arc::new(AtomicBool::new(false));
        let workers_stop = WorkerStop::new();
        stop_on_signal({
            let (stop, workers_stop) = (stop.clone(), workers_stop.clone());
            move || {
                stop.store(true, Ordering::Relaxed);
                workers_stop.now();
            }
        });
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
                tokio::spawn(run_worker(o, workers_stop.clone()))
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
            let watch = job.wait(&never, |s| show(&bar, s));
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
                Ok(Ok(_)) | Ok(Err(WorkerError::Stopped)) => continue,
                Ok(Err(e)) => e.to_string(),
                Err(e) => format!("worker task failed: {e}"),
            };
            eprintln!("paraforge: a worker stopped: {e}");
            first_error.get_or_insert(e);
        }
        if stop.load(Ordering::Relaxed) {
            return Err(job.stopped().await.into());
        }
        if !job.status().finished {
            let s = job.abandon().await;
            anyhow::bail!(
                "every local worker stopped before the job finished ({} of {} shards committed; the state is kept, run again to resume): {}",
                s.shards_committed,
                s.shards_total,
                first_error.unwrap_or_else(|| "no error reported".into())
            );
        }
        job.drain(&stop).await;
        finish(job).await
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
    block_on(async move {
        // The URLs a worker and a scraper use: both ports serve TLS with
        // the job's certificate when it has one.
        let scheme = if cfg.coordinator.tls_cert.is_some() {
            "https"
        } else {
            "http"
        };
        // The pages answer first: planning a big input takes minutes.
        let binding = Job::bind(&cfg, None)
            .await
            .context("starting the coordinator")?;
        println!(
            "job {}: {} (status {scheme}://{}/status)",
            cfg.job.name,
            binding.live().phase().0.as_str(),
            binding.http_addr()
        );
        let job = binding
            .start(None)
            .await
            .context("starting the coordinator")?;
        println!(
            "coordinator for job {} on {scheme}://{} (metrics {scheme}://{}/metrics)",
            cfg.job.name,
            job.grpc_addr(),
            job.http_addr()
        );
        let stop = Arc::new(AtomicBool::new(false));
        stop_on_signal({
            let stop = stop.clone();
            move || stop.store(true, Ordering::Relaxed)
        });
        if !job.wait(&stop, |_| {}).await {
            return Err(job.stopped().await.into());
        }
        job.drain(&stop).await;
        finish(job).await
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
    block_on(async move {
        let stop = WorkerStop::new();
        stop_on_signal({
            let stop = stop.clone();
            move || stop.now()
        });
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
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        for w in &s.workers {
            println!(
                "  {} ({}) on {}: {} lease(s), heard from {:.1} s ago",
                w.name,
                w.worker_id,
                w.device,
                w.leases,
                now.saturating_sub(w.last_heartbeat_unix_ms) as f64 / 1000.0
            );
        }
        if s.workers_total as usize > s.workers.len() {
            println!(
                "  ... and {} more",
                s.workers_total as usize - s.workers.len()
            );
        }
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
            let kind = if paraforge_job::bitext::RejectReason::is_filter_code(code) {
                " (filter)"
            } else {
                ""
            };
            format!("{code}{kind} {n}")
        })
        .collect::<Vec<_>>()
        .join(", ")
}
