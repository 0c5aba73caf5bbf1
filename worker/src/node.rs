//! A worker process: register with the coordinator, then lease shards,
//! heartbeat while processing them, store the output, and complete (or fail)
//! each shard. A lost coordinator is retried with backoff. A [`Stop`] either
//! drains (the current shard finishes, no more are leased) or stops now:
//! every retry and wait ends at once, and the shard in hand is given back
//! to the coordinator as a retryable failure when it answers within
//! [`GIVE_BACK_WITHIN`] (else its lease expires).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use paraforge_core::layout::OutputLayout;
use paraforge_job::config::{JobConfig, TopKOnName};
use paraforge_job::storage::Storage;
use paraforge_nmt::{Device, GenerateOptions, LoadOptions, TopKOn, Translator};
use paraforge_rpc::access::{AccessError, Client, ClientAccess};
use paraforge_rpc::proto::{self as pb, lease_shard_response};

use crate::metrics::Throughput;
use crate::shard::{process, Progress, Scorers, ShardInput, ShardOutput, Stages};

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// [`Stop::now`] was called before the coordinator said the job is done.
    #[error("stopped before the coordinator said the job is done")]
    Stopped,
    #[error("coordinator {url} unreachable after {attempts} attempts: {message}")]
    Unreachable {
        url: String,
        attempts: u32,
        message: String,
    },
    #[error("coordinator refused: {0}")]
    Refused(String),
    /// The coordinator does not know this worker (it restarted): register again.
    #[error("coordinator does not know this worker: {0}")]
    UnknownWorker(String),
    #[error("job configuration from the coordinator: {0}")]
    Config(String),
    #[error("loading the model: {0}")]
    Model(#[from] paraforge_nmt::NmtError),
    #[error("loading the para_score model: {0}")]
    Scorer(#[from] paraforge_core::EncoderError),
    #[error(transparent)]
    Storage(#[from] paraforge_job::storage::StorageError),
    #[error(transparent)]
    Access(#[from] AccessError),
    /// One corpus is translated by one model.
    #[error("model {dir}: its digest is {worker}, the job's model has {job}: start this worker with the job's model.dir, or --model-dir naming an exact copy of it")]
    ModelMismatch {
        dir: String,
        worker: String,
        job: String,
    },
}

#[derive(Debug, Clone)]
pub struct WorkerOptions {
    pub coordinator: String,
    pub name: String,
    /// Retries of an unreachable coordinator before giving up.
    pub connect_attempts: u32,
    /// Token and TLS settings.
    pub access: ClientAccess,
    /// Run the model here instead of the job's `model.device` (`cuda:N`).
    pub device: Option<Device>,
    /// Load the model from this directory instead of the job's `model.dir`
    /// (a local copy of the same model: its checksum is still reported).
    pub model_dir: Option<std::path::PathBuf>,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct WorkerSummary {
    pub shards_committed: u64,
    pub shards_refused: u64,
    pub shards_failed: u64,
    pub pairs: u64,
}

/// How long a worker stopped now waits for the coordinator to take back
/// the shard it held: well within the 10 s a process has after SIGTERM.
pub const GIVE_BACK_WITHIN: Duration = Duration::from_secs(3);

/// How a running worker is asked to stop. [`Stop::drain`] (also what the
/// `Arc<AtomicBool>` that [`run`] accepts means when set) lets the shard in
/// hand finish and leases no more; [`Stop::now`] (SIGTERM) ends every
/// retry, backoff and wait at once, abandons the shard in hand and gives its
/// lease back, so that the process can exit within a grace period even
/// while the coordinator is unreachable.
#[derive(Debug, Clone, Default)]
pub struct Stop {
    drain: Arc<AtomicBool>,
    // A watch rather than a flag: the waits select on it to end at once.
    now: Arc<tokio::sync::watch::Sender<bool>>,
}

impl Stop {
    pub fn new() -> Stop {
        Stop::default()
    }

    /// Finish the shard in hand, then lease no more.
    pub fn drain(&self) {
        self.drain.store(true, Ordering::Relaxed);
    }

    /// Stop now: give the shard in hand back and stop retrying.
    pub fn now(&self) {
        self.drain();
        self.now.send_replace(true);
    }

    fn draining(&self) -> bool {
        self.drain.load(Ordering::Relaxed)
    }

    fn is_now(&self) -> bool {
        *self.now.borrow()
    }

    /// Resolves once [`Stop::now`] has been called.
    async fn stopped(&self) {
        let mut rx = self.now.subscribe();
        // The sender lives as long as `self`: this only ends by a stop.
        let _ = rx.wait_for(|now| *now).await;
    }

    /// `f`, unless a stop-now comes first.
    async fn unless<T>(
        &self,
        f: impl Future<Output = Result<T, WorkerError>>,
    ) -> Result<T, WorkerError> {
        tokio::select! {
            biased;
            _ = self.stopped() => Err(WorkerError::Stopped),
            r = f => r,
        }
    }
}

impl From<Arc<AtomicBool>> for Stop {
    /// The flag drains: set, it lets the shard in hand finish.
    fn from(drain: Arc<AtomicBool>) -> Stop {
        Stop {
            drain,
            now: Arc::default(),
        }
    }
}

async fn connect(o: &WorkerOptions, stop: &Stop) -> Result<Client, WorkerError> {
    stop.unless(async {
        let mut delay = Duration::from_millis(200);
        let mut last = String::new();
        for _ in 0..o.connect_attempts.max(1) {
            match o.access.connect(&o.coordinator).await {
                Ok(c) => return Ok(c),
                // A bad URL, certificate or token file will not get better.
                Err(e @ (AccessError::Url { .. } | AccessError::File { .. })) => {
                    return Err(e.into())
                }
                Err(e) => {
                    last = e.to_string();
                    tracing::warn!(coordinator = %o.coordinator, error = %e, "coordinator unreachable; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(10));
                }
            }
        }
        Err(WorkerError::Unreachable {
            url: o.coordinator.clone(),
            attempts: o.connect_attempts,
            message: last,
        })
    })
    .await
}

/// Calls the coordinator, reconnecting with backoff on transport errors;
/// `Err(Stopped)` as soon as `$stop` says stop now, wherever the call is.
macro_rules! call {
    ($client:expr, $opts:expr, $stop:expr, $method:ident, $req:expr) => {{
        let stop: &Stop = $stop;
        stop.unless(async {
            let mut tries = 0u32;
            let req = $req;
            loop {
                match $client.$method(req.clone()).await {
                    Ok(r) => break Ok(r.into_inner()),
                    // Transport failures, and CANCELLED: what a coordinator
                    // stopping mid-call answers (it never sends it itself).
                    Err(s) if matches!(s.code(), tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled) && tries < $opts.connect_attempts => {
                        tries += 1;
                        tracing::warn!(error = %s, "coordinator call failed; reconnecting");
                        tokio::time::sleep(Duration::from_millis(200 * (1 << tries.min(5)))).await;
                        if let Ok(c) = connect($opts, stop).await {
                            $client = c;
                        }
                    }
                    Err(s) if s.code() == tonic::Code::Unauthenticated => {
                        break Err(WorkerError::Refused(format!("{} (check the access token)", s.message())))
                    }
                    // The service answers NOT_FOUND for an unknown worker only
                    // (an unknown shard is INVALID_ARGUMENT), so the code alone
                    // says "register again".
                    Err(s) if s.code() == tonic::Code::NotFound => {
                        break Err(WorkerError::UnknownWorker(s.message().to_string()))
                    }
                    Err(s) => break Err(WorkerError::Refused(s.message().to_string())),
                }
            }
        })
        .await
    }};
}

/// The connection and this worker's identity with the coordinator; a
/// coordinator that forgot the worker is registered with again.
struct Session {
    client: Client,
    opts: WorkerOptions,
    worker_id: String,
    secret: String,
    /// The digest of the model this worker loaded (sent with every lease
    /// request; empty until the model is loaded).
    model_sha256: String,
    stop: Stop,
}

impl Session {
    /// Connects and registers; returns the registration (job, config).
    async fn open(
        o: &WorkerOptions,
        stop: &Stop,
    ) -> Result<(Session, pb::RegisterWorkerResponse), WorkerError> {
        let mut client = connect(o, stop).await?;
        let reg = call!(client, o, stop, register_worker, register_request(o))?;
        tracing::info!(worker = %reg.worker_id, job = %reg.job_id, "registered");
        let s = Session {
            client,
            opts: o.clone(),
            worker_id: reg.worker_id.clone(),
            secret: reg.worker_secret.clone(),
            model_sha256: String::new(),
            stop: stop.clone(),
        };
        Ok((s, reg))
    }

    /// A restarted coordinator, or one that forgot this worker after a
    /// long silence: register again, same job.
    async fn register_again(&mut self) -> Result<(), WorkerError> {
        let again = call!(
            self.client,
            &self.opts,
            &self.stop,
            register_worker,
            register_request(&self.opts)
        )?;
        tracing::warn!(old = %self.worker_id, new = %again.worker_id, "the coordinator does not know this worker; registered again");
        self.worker_id = again.worker_id;
        self.secret = again.worker_secret;
        Ok(())
    }
}

/// Everything loaded once per worker for the job: the model, the scorers,
/// the filters, the output storage and what every file's footer says.
struct Job {
    cfg: JobConfig,
    storage: Storage,
    /// None for an input of pairs, translated already.
    translator: Option<Arc<std::sync::Mutex<Translator>>>,
    encoder: Option<Arc<dyn paraforge_core::SentenceEncoder>>,
    lm: Option<Arc<paraforge_core::ArpaModel>>,
    filters: Arc<paraforge_job::filters::PreFilter>,
    gen: GenerateOptions,
    metadata: Vec<(&'static str, String)>,
    /// `paraforge_core::model_digest` of the model loaded.
    model_sha256: String,
    throughput: Arc<Throughput>,
    heartbeat_every: Duration,
}

/// A worker with another model than the job's stops before loading it.
fn check_digest(
    reg: &pb::RegisterWorkerResponse,
    dir: &str,
    ours: &str,
) -> Result<(), WorkerError> {
    if !reg.model_sha256.is_empty() && !reg.model_sha256.eq_ignore_ascii_case(ours) {
        return Err(WorkerError::ModelMismatch {
            dir: dir.to_string(),
            worker: ours.to_string(),
            job: reg.model_sha256.clone(),
        });
    }
    Ok(())
}

/// The translation model on this worker's device, and its digest (checked
/// against the job's before the long load).
async fn load_model(
    o: &WorkerOptions,
    m: &paraforge_job::config::Model,
    reg: &pb::RegisterWorkerResponse,
) -> Result<(Translator, String), WorkerError> {
    let device: Device = match o.device {
        Some(d) => d,
        None => m.device.parse().map_err(WorkerError::Config)?,
    };
    let streams = m
        .streams
        .unwrap_or_else(|| paraforge_nmt::default_streams(&device));
    paraforge_job::config::check_streams(m.threads, streams).map_err(|reason| {
        WorkerError::Config(format!(
            "model.threads {} x {streams} streams on {device}: {reason}",
            m.threads
        ))
    })?;
    let load = LoadOptions {
        device,
        threads: m.threads,
        streams,
        quantized: m.quantized,
        top_k_on: match m.top_k_on {
            TopKOnName::Auto => TopKOn::Auto,
            TopKOnName::Host => TopKOn::Host,
            TopKOnName::Graph => TopKOn::Graph,
        },
        ..LoadOptions::default()
    };
    let model_dir = o
        .model_dir
        .clone()
        .unwrap_or_else(|| std::path::PathBuf::from(&m.dir));
    let dir = model_dir.clone();
    let sha = blocking(move || {
        paraforge_core::model_digest::model_digest(&dir).map_err(|e| {
            WorkerError::Config(format!("model {}: hashing its files: {e}", dir.display()))
        })
    })
    .await?;
    check_digest(reg, &model_dir.display().to_string(), &sha)?;
    let translator = blocking(move || Ok(Translator::load(&model_dir, &load)?)).await?;
    Ok((translator, sha))
}

/// Blocking work (model and table loads) off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, WorkerError> + Send + 'static,
) -> Result<T, WorkerError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| WorkerError::Config(e.to_string()))?
}

impl Job {
    async fn load(o: &WorkerOptions, reg: &pb::RegisterWorkerResponse) -> Result<Job, WorkerError> {
        let cfg = JobConfig::parse(&reg.config_toml, std::path::Path::new("<from coordinator>"))
            .map_err(|e| WorkerError::Config(e.to_string()))?;
        let (translator, model_sha, gen) = match &cfg.model {
            Some(m) => {
                let (translator, sha) = load_model(o, m, reg).await?;
                let gen = GenerateOptions {
                    num_beams: m.beam,
                    nbest: m.beam_candidates,
                    max_new_tokens: m.max_new_tokens,
                    batch_size: m
                        .batch_size
                        .unwrap_or_else(|| paraforge_nmt::default_batch_size(translator.device())),
                    batch_tokens: m.batch_tokens,
                    no_repeat_ngram_size: m.no_repeat_ngram_size,
                    repetition_penalty: m.repetition_penalty,
                    length_penalty: m.length_penalty,
                    ..GenerateOptions::default()
                };
                (Some(translator), sha, gen)
            }
            None => {
                if o.model_dir.is_some() || o.device.is_some() {
                    tracing::warn!("--model-dir and --device are ignored: the job's input holds its translations (input.format = \"pairs\")");
                }
                let sha = paraforge_core::model_digest::no_model_digest();
                check_digest(reg, "(none: the input holds its translations)", &sha)?;
                (None, sha, GenerateOptions::default())
            }
        };
        let scoring = cfg.scoring.clone();
        let encoder: Option<Arc<dyn paraforge_core::SentenceEncoder>> =
            blocking(move || Ok(crate::shard::load_para_encoder(&scoring)?))
                .await?
                .map(Arc::from);
        let scoring = cfg.scoring.clone();
        let lm = blocking(move || crate::shard::load_lm(&scoring).map_err(WorkerError::Config))
            .await?
            .map(Arc::new);
        let filters = Arc::new(
            paraforge_job::filters::PreFilter::new(&cfg.filters)
                .map_err(|e| WorkerError::Config(e.to_string()))?,
        );
        use paraforge_core::schema::meta;
        let mut metadata = vec![
            (meta::VERSION, env!("CARGO_PKG_VERSION").to_string()),
            (
                meta::MODEL,
                cfg.model
                    .as_ref()
                    .map_or_else(|| "none".to_string(), |m| m.dir.clone()),
            ),
            (meta::MODEL_SHA256, model_sha.clone()),
            (meta::CONFIG, reg.config_toml.clone()),
        ];
        // The para_score column's model, as rescore records it: the config
        // names only a path, whose content may change between jobs.
        if let (Some(e), Some(path)) = (
            encoder.clone(),
            cfg.scoring.model.clone().or(cfg.scoring.vectors.clone()),
        ) {
            // Word vectors can be gigabytes: hashed off the async threads.
            let stamp = blocking(move || {
                paraforge_scorer::ScorerStamp::of(std::path::Path::new(&path), e.as_ref()).map_err(
                    |e| {
                        WorkerError::Config(format!(
                            "scoring: {path}: hashing the para_score model: {e}"
                        ))
                    },
                )
            })
            .await?;
            metadata.extend(stamp.footer());
        }
        Ok(Job {
            storage: Storage::open(&cfg.job.output)?,
            cfg,
            translator: translator.map(|t| Arc::new(std::sync::Mutex::new(t))),
            encoder,
            lm,
            filters,
            gen,
            metadata,
            model_sha256: model_sha,
            throughput: Arc::new(Throughput::default()),
            heartbeat_every: Duration::from_millis(reg.heartbeat_interval_ms.max(100) as u64),
        })
    }

    /// What the worker reads for a leased shard; an error for a drop
    /// bitmap that marks lines outside the shard.
    fn input(&self, spec: &pb::ShardSpec, range: pb::Range) -> Result<ShardInput, String> {
        let idx = self
            .cfg
            .input
            .paths
            .iter()
            .position(|p| *p == spec.input_url)
            .unwrap_or(0);
        let drop_lines = pb::dropped_lines(&range, &spec.drop_bitmap)
            .map_err(|e| format!("shard {}: {e}", spec.shard_id))?;
        Ok(ShardInput {
            path: paraforge_job::storage::local_path(&spec.input_url)
                .map_or_else(|| spec.input_url.clone(), |p| p.display().to_string()),
            format: self.cfg.format(idx),
            range: Some(range.into()),
            max_chars: self.cfg.input.max_chars,
            drop_lines,
        })
    }
}

/// A granted lease and the shard it is for.
struct Leased {
    lease: pb::Lease,
    spec: pb::ShardSpec,
    range: pb::Range,
}

/// The next lease, or `None` when the coordinator says the job is done.
async fn lease(s: &mut Session) -> Result<Option<Leased>, WorkerError> {
    loop {
        let req = pb::LeaseShardRequest {
            worker_id: s.worker_id.clone(),
            worker_secret: s.secret.clone(),
            model_sha256: s.model_sha256.clone(),
        };
        let r = match call!(s.client, &s.opts, &s.stop, lease_shard, req) {
            Ok(r) => r,
            Err(WorkerError::UnknownWorker(_)) => {
                s.register_again().await?;
                continue;
            }
            Err(e) => return Err(e),
        };
        let lease = match r.result {
            Some(lease_shard_response::Result::Lease(l)) => l,
            Some(lease_shard_response::Result::RetryAfterMs(ms)) => {
                let wait = Duration::from_millis(ms.clamp(50, 5000) as u64);
                s.stop
                    .unless(async {
                        tokio::time::sleep(wait).await;
                        Ok(())
                    })
                    .await?;
                continue;
            }
            Some(lease_shard_response::Result::Done(_)) => return Ok(None),
            // Only `done` ends a worker's run: an empty reply is not one.
            None => return Err(WorkerError::Refused(
                "a lease reply with no lease, retry or done (a coordinator of another version?)"
                    .into(),
            )),
        };
        let Some(spec) = lease.shard.clone() else {
            return Err(WorkerError::Refused(format!(
                "lease {} names no shard (a coordinator of another version?)",
                lease.lease_token
            )));
        };
        let Some(range) = spec.range else {
            return Err(WorkerError::Refused(format!(
                "lease {} of shard {} names no range of its input (a coordinator of another version?)",
                lease.lease_token, spec.shard_id
            )));
        };
        if !lease.model_sha256.eq_ignore_ascii_case(&s.model_sha256) {
            return Err(WorkerError::ModelMismatch {
                dir: "loaded by this worker".into(),
                worker: s.model_sha256.clone(),
                job: lease.model_sha256.clone(),
            });
        }
        return Ok(Some(Leased { lease, spec, range }));
    }
}

/// Heartbeats beside the shard, four per lease; a revoked lease (or a
/// coordinator that forgot this worker, and its lease with it) sets
/// `revoked`, which cancels the shard.
fn heartbeat(
    s: &Session,
    job: &Job,
    l: &Leased,
    progress: Arc<Progress>,
    revoked: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    let (mut c, o, stop, wid, secret, throughput, every) = (
        s.client.clone(),
        s.opts.clone(),
        s.stop.clone(),
        s.worker_id.clone(),
        s.secret.clone(),
        job.throughput.clone(),
        job.heartbeat_every,
    );
    let (shard_id, token) = (l.spec.shard_id, l.lease.lease_token);
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            let req = pb::HeartbeatRequest {
                worker_id: wid.clone(),
                worker_secret: secret.clone(),
                leases: vec![pb::LeaseProgress {
                    shard_id,
                    lease_token: token,
                    progress: Some(pb::Progress {
                        pairs_written: progress.pairs.load(Ordering::Relaxed),
                        rejects: progress.rejects.load(Ordering::Relaxed),
                        ..Default::default()
                    }),
                }],
                metrics: Some(throughput.report()),
            };
            match call!(c, &o, &stop, heartbeat, req) {
                Ok(r) if r.revoked_tokens.contains(&token) => {
                    tracing::warn!(
                        shard = shard_id,
                        token,
                        "lease revoked; abandoning the shard"
                    );
                    revoked.store(true, Ordering::Relaxed);
                    return;
                }
                Ok(_) => {}
                Err(WorkerError::UnknownWorker(m)) => {
                    tracing::warn!(shard = shard_id, token, reason = %m, "the coordinator no longer knows this worker; abandoning the shard");
                    revoked.store(true, Ordering::Relaxed);
                    return;
                }
                Err(WorkerError::Stopped) => return,
                Err(e) => tracing::warn!(error = %e, "heartbeat failed"),
            }
        }
    })
}

/// How an attempt at a shard ended.
enum Attempt {
    Stored(Vec<pb::OutputFile>, Counts),
    /// The reason, and whether a retry could succeed.
    Failed(String, bool),
    /// Stopped now: the shard is given back, not failed.
    Stopped,
}

/// One attempt at a leased shard: read, translate, score and store its
/// files, heartbeating beside it.
async fn attempt(s: &Session, job: &Job, l: &Leased) -> Attempt {
    // A lease no retry can read differently.
    let input = match job.input(&l.spec, l.range) {
        Ok(i) => i,
        Err(e) => return Attempt::Failed(e, false),
    };
    tracing::info!(worker = %s.worker_id, shard = l.spec.shard_id, token = l.lease.lease_token, attempt = l.lease.attempt, "processing shard");
    let progress = Arc::new(Progress::default());
    let revoked = Arc::new(AtomicBool::new(false));
    let hb = heartbeat(s, job, l, progress.clone(), revoked.clone());
    let stop = s.stop.clone();
    let work = {
        let (t, enc, lm, gen, md, filters, throughput) = (
            job.translator.clone(),
            job.encoder.clone(),
            job.lm.clone(),
            job.gen.clone(),
            job.metadata.clone(),
            job.filters.clone(),
            job.throughput.clone(),
        );
        let stop = stop.clone();
        let bleu = job.cfg.scoring.bleu;
        tokio::task::spawn_blocking(move || {
            let mut t = t
                .as_ref()
                .map(|t| t.lock().unwrap_or_else(|p| p.into_inner()));
            let md: Vec<(&str, String)> = md.iter().map(|(k, v)| (*k, v.clone())).collect();
            process(
                &input,
                t.as_deref_mut(),
                &gen,
                Stages {
                    filters: &filters,
                    scorers: Scorers {
                        encoder: enc.as_deref(),
                        lm: lm.as_deref(),
                        bleu,
                    },
                    throughput: &throughput,
                },
                &md,
                &progress,
                &|| revoked.load(Ordering::Relaxed) || stop.is_now(),
            )
        })
    };
    // Stopped now, the model's batch in progress is not waited for: the
    // shard sees the stop at its next chunk and ends by itself.
    let result = tokio::select! {
        biased;
        _ = stop.stopped() => None,
        r = work => Some(r),
    };
    hb.abort();
    // A failed translation and a store that keeps failing (after the
    // storage layer's own retries) both fail this attempt, not the
    // worker: the shard goes back to the queue, nothing is committed.
    match result {
        None => Attempt::Stopped,
        Some(Ok(Ok(out))) => {
            let (shard, token) = (l.spec.shard_id, l.lease.lease_token);
            let stored = stop.unless(async { Ok(store(&job.storage, shard, token, out).await) });
            match stored.await {
                Ok(Ok((files, counts))) => Attempt::Stored(files, counts),
                Ok(Err(e)) => Attempt::Failed(format!("storing the output: {e}"), true),
                Err(_) => Attempt::Stopped,
            }
        }
        Some(Ok(Err(_))) if stop.is_now() => Attempt::Stopped,
        Some(Ok(Err(e))) => Attempt::Failed(e.to_string(), e.retryable()),
        Some(Err(join)) => Attempt::Failed(format!("worker task failed: {join}"), true),
    }
}

/// Tells the coordinator an attempt failed; it decides what becomes of the
/// shard. A report that does not arrive leaves the lease to expire.
async fn report_failure(s: &mut Session, l: &Leased, reason: String, retryable: bool) {
    tracing::warn!(shard = l.spec.shard_id, %reason, "shard attempt failed");
    let req = pb::FailShardRequest {
        worker_id: s.worker_id.clone(),
        worker_secret: s.secret.clone(),
        shard_id: l.spec.shard_id,
        lease_token: l.lease.lease_token,
        reason,
        retryable,
        given_back: false,
    };
    match call!(s.client, &s.opts, &s.stop, fail_shard, req) {
        Ok(r) => tracing::info!(
            shard = l.spec.shard_id,
            will_retry = r.will_retry,
            "failure reported"
        ),
        Err(e) => tracing::warn!(
            shard = l.spec.shard_id,
            error = %e,
            "could not report the failure; the lease will expire"
        ),
    }
}

/// Completes a stored attempt; `true` when the coordinator committed it.
/// A refused attempt's temporary files are removed.
async fn report_completion(
    s: &mut Session,
    job: &Job,
    l: &Leased,
    files: Vec<pb::OutputFile>,
    counts: &Counts,
) -> Result<bool, WorkerError> {
    let paths: Vec<String> = files.iter().map(|f| f.path.clone()).collect();
    let req = pb::CompleteShardRequest {
        worker_id: s.worker_id.clone(),
        worker_secret: s.secret.clone(),
        shard_id: l.spec.shard_id,
        lease_token: l.lease.lease_token,
        files,
        totals: Some(pb::Progress {
            pairs_written: counts.pairs,
            rejects: counts.rejects,
            lines_read: counts.lines,
        }),
        metrics: Some(job.throughput.report()),
    };
    let done = match call!(s.client, &s.opts, &s.stop, complete_shard, req) {
        Ok(d) => d,
        // The coordinator restarted while we worked: the lease is gone.
        Err(WorkerError::UnknownWorker(m)) => pb::CompleteShardResponse {
            accepted: false,
            reason: m,
        },
        Err(e) => return Err(e),
    };
    if !done.accepted {
        tracing::warn!(shard = l.spec.shard_id, reason = %done.reason, "completion refused; removing this attempt's files");
        for p in &paths {
            let _ = job.storage.delete(p).await;
        }
    }
    Ok(done.accepted)
}

/// Gives a shard back after a stop-now: one FailShard marked given back,
/// without reconnecting, for at most [`GIVE_BACK_WITHIN`]; otherwise the
/// lease expires. The coordinator does not count the attempt.
async fn give_back(s: &mut Session, l: &Leased) {
    let (shard, token) = (l.spec.shard_id, l.lease.lease_token);
    let req = pb::FailShardRequest {
        worker_id: s.worker_id.clone(),
        worker_secret: s.secret.clone(),
        shard_id: shard,
        lease_token: token,
        reason: "the worker was stopped before it finished the shard".into(),
        retryable: true,
        given_back: true,
    };
    match tokio::time::timeout(GIVE_BACK_WITHIN, s.client.fail_shard(req)).await {
        Ok(Ok(r)) => tracing::warn!(
            shard,
            token,
            will_retry = r.into_inner().will_retry,
            "stopped: the shard was given back to the coordinator"
        ),
        Ok(Err(e)) => tracing::warn!(shard, token, error = %e.message(), "stopped: could not give the shard back; its lease will expire"),
        Err(_) => tracing::warn!(shard, token, "stopped: the coordinator did not answer within {GIVE_BACK_WITHIN:?}; the shard's lease will expire"),
    }
}

/// Runs until the job is done or `stop` says stop: connect and register,
/// load the job, then lease, attempt and report, shard after shard. A drain
/// returns the summary so far; a stop-now `Err(Stopped)`, having given the
/// shard in hand back.
pub async fn run(o: WorkerOptions, stop: impl Into<Stop>) -> Result<WorkerSummary, WorkerError> {
    let stop: Stop = stop.into();
    let (mut session, reg) = Session::open(&o, &stop).await?;
    // Loading a large model takes a while: a stop does not wait for it.
    let job = stop.unless(Job::load(&o, &reg)).await?;
    session.model_sha256 = job.model_sha256.clone();
    let mut summary = WorkerSummary::default();
    loop {
        if stop.is_now() {
            return Err(WorkerError::Stopped);
        }
        if stop.draining() {
            break;
        }
        let Some(l) = lease(&mut session).await? else {
            break;
        };
        match attempt(&session, &job, &l).await {
            Attempt::Stopped => {
                give_back(&mut session, &l).await;
                return Err(WorkerError::Stopped);
            }
            Attempt::Failed(reason, retryable) => {
                summary.shards_failed += 1;
                report_failure(&mut session, &l, reason, retryable).await;
            }
            Attempt::Stored(files, counts) => {
                match report_completion(&mut session, &job, &l, files, &counts).await {
                    Ok(true) => {
                        summary.shards_committed += 1;
                        summary.pairs += counts.pairs;
                    }
                    Ok(false) => summary.shards_refused += 1,
                    // Whether the completion arrived is unknown: a give-back
                    // of a committed shard is refused as stale.
                    Err(WorkerError::Stopped) => {
                        give_back(&mut session, &l).await;
                        return Err(WorkerError::Stopped);
                    }
                    Err(e) => return Err(e),
                }
            }
        }
    }
    Ok(summary)
}

/// Writes an attempt's two files under the lease's temporary prefix (the
/// token in the path keeps attempts apart; the coordinator publishes them
/// under their final names when it commits) and describes them for the
/// completion. The output's counts are returned for the totals.
async fn store(
    storage: &Storage,
    shard_id: u64,
    token: u64,
    out: ShardOutput,
) -> Result<(Vec<pb::OutputFile>, Counts), paraforge_job::storage::StorageError> {
    let pq = OutputLayout::temp_part_path(shard_id, token);
    let rj = OutputLayout::temp_rejects_path(shard_id, token);
    let files = vec![
        pb::OutputFile {
            path: pq.clone(),
            rows: out.pairs,
            bytes: out.parquet.len() as u64,
            sha256: out.parquet_sha256.clone(),
        },
        pb::OutputFile {
            path: rj.clone(),
            rows: out.rejects,
            bytes: out.rejects_jsonl.len() as u64,
            sha256: hex_sha(&out.rejects_jsonl),
        },
    ];
    let counts = Counts {
        pairs: out.pairs,
        rejects: out.rejects,
        lines: out.lines,
    };
    storage.put(&pq, out.parquet.into()).await?;
    storage.put(&rj, out.rejects_jsonl.into()).await?;
    Ok((files, counts))
}

/// What a stored attempt holds, for the completion's totals.
struct Counts {
    pairs: u64,
    rejects: u64,
    /// Input lines read, for the coordinator's check against the plan.
    lines: u64,
}

fn register_request(o: &WorkerOptions) -> pb::RegisterWorkerRequest {
    pb::RegisterWorkerRequest {
        name: o.name.clone(),
        // Without an override the device comes from the job's config, which
        // the worker only learns from this call; the coordinator fills it in.
        device: o.device.map(|d| d.to_string()).unwrap_or_default(),
        version: env!("CARGO_PKG_VERSION").into(),
    }
}

fn hex_sha(b: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(b))
}
