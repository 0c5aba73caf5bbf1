//! Running a job's coordinator: open (or resume) the state, serve gRPC and
//! HTTP, wait until every shard is committed or failed, then finalize the
//! output: delete files of attempts that were not committed, write
//! `_manifest.json`, its card (`_README.md`) and, last, `_SUCCESS`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use paraforge_core::layout::card::{
    hub_language, JobFacts, Languages, ManifestInput, ManifestScorer,
};
use paraforge_core::layout::{FileKind, OutputLayout, JOB_CARD_FILE, MANIFEST_FILE, SUCCESS_FILE};
use paraforge_job::bitext::RejectReason;
use paraforge_job::config::JobConfig;
use paraforge_job::storage::{local_path, Storage, StorageError};
use paraforge_rpc::proto::coordinator_server::CoordinatorServer;
use serde::Serialize;

use tokio::net::TcpListener;

use crate::phase::{Live, Phase};
use crate::plan::{plan_job, PlanError};
use crate::service::CoordinatorService;
use crate::shared::Shared;
use crate::state::{JobState, StateError, Status};

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("{what} {addr}: {message}")]
    Bind {
        what: &'static str,
        addr: String,
        message: String,
    },
    #[error("coordinator.state must be set for an object-store output ({0})")]
    NoStatePath(String),
    #[error(transparent)]
    Access(#[from] paraforge_rpc::access::AccessError),
    #[error("TLS ({cert}, {key}): {message}")]
    Tls {
        cert: String,
        key: String,
        message: String,
    },
    #[error("job output {0} is a file, not a directory: choose a directory (it is created if missing) or an object-store URL")]
    OutputNotDirectory(String),
    #[error("input {input} changed since the job was planned: {why}. The planned shards no longer match it (pairs would be lost or duplicated): restore the input, or start a new job (new output and state file)")]
    InputChanged { input: String, why: String },
    #[error("job state {state}: `{key}` was {was} when the job was planned and is {now} now; a resumed job must keep what decides its output: restore it, or start a new job (new output and state file)")]
    ConfigChanged {
        state: String,
        key: String,
        was: String,
        now: String,
    },
    #[error("job output {output} {why}: another job's output is never written over; choose another output, or delete it if it is no longer needed")]
    OutputClaimed { output: String, why: String },
    #[error("model.dir {dir}: its files changed since the job was planned (model digest {was}, now {now}): one corpus is translated by one model. Restore the model, or start a new job (new output and state file)")]
    ModelChanged {
        dir: String,
        was: String,
        now: String,
    },
    #[error("model.dir {dir}: {source}")]
    ModelUnreadable {
        dir: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Incomplete(#[from] Incomplete),
}

/// A job that ended without all of its output: nothing is marked
/// successful, and running it again resumes it.
#[derive(Debug, thiserror::Error)]
#[error("job {job} is incomplete: {}; no _SUCCESS written. Run the same command again to retry what failed", .problems.join("; "))]
pub struct Incomplete {
    pub job: String,
    pub shards_total: u64,
    pub shards_committed: u64,
    pub problems: Vec<String>,
}

/// The claim a job puts in its output (`_job.json`), so that a second job
/// on the same output refuses to start instead of writing over the first.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct Claim {
    pub job: String,
    pub run_id: String,
    pub state: String,
}

pub use paraforge_core::layout::CLAIM_FILE as CLAIM;

/// What `output` holds that would make it another job's, if anything.
async fn foreign_files(storage: &Storage) -> Result<Option<String>, RunError> {
    for (path, _) in storage.list("").await? {
        if OutputLayout::is_job_file(&path) {
            return Ok(Some(path));
        }
    }
    Ok(None)
}

async fn read_claim(cfg: &JobConfig, storage: &Storage) -> Result<Claim, RunError> {
    let bytes = storage.get(CLAIM).await?;
    serde_json::from_slice(&bytes).map_err(|e| RunError::OutputClaimed {
        output: cfg.job.output.clone(),
        why: format!("has a {CLAIM} that is not a job claim ({e})"),
    })
}

/// Claims the output for this run of the job, or says whose it is.
async fn claim_output(cfg: &JobConfig, storage: &Storage, claim: &Claim) -> Result<(), RunError> {
    let claimed = |why: String| RunError::OutputClaimed {
        output: cfg.job.output.clone(),
        why,
    };
    let json = serde_json::to_vec_pretty(claim).unwrap_or_default();
    if storage.put_if_absent(CLAIM, json.into()).await? {
        return Ok(());
    }
    let theirs = read_claim(cfg, storage).await?;
    if theirs.run_id == claim.run_id {
        return Ok(());
    }
    Err(claimed(format!(
        "belongs to job {:?} (state {}, run {})",
        theirs.job, theirs.state, theirs.run_id
    )))
}

/// The committed files that are not in the output as they were committed:
/// (shard, path, what is wrong). Sizes come from one listing; every file of
/// the right size is hashed (streamed, a few at a time), because a
/// same-size change (a flipped byte, a file copied over another with the
/// same row count) shows only in its digest.
async fn damaged(
    storage: &Storage,
    committed: Vec<(u64, crate::state::OutputFile)>,
) -> Result<Vec<(u64, String, String)>, RunError> {
    use futures::StreamExt;
    if committed.is_empty() {
        return Ok(Vec::new());
    }
    let listing: std::collections::HashMap<String, u64> =
        storage.list("").await?.into_iter().collect();
    let checks = committed.into_iter().map(|(shard, f)| {
        let size = listing.get(&f.path).copied();
        async move {
            let why = match size {
                None => Some("missing".to_string()),
                Some(n) if n != f.bytes => Some(format!("{n} bytes, committed with {}", f.bytes)),
                Some(_) => {
                    let got = storage.sha256(&f.path).await?;
                    (got != f.sha256).then(|| format!("SHA-256 {got}, committed with {}", f.sha256))
                }
            };
            Ok::<_, RunError>(why.map(|w| (shard, f.path, w)))
        }
    });
    let mut out = Vec::new();
    let mut results = futures::stream::iter(checks).buffer_unordered(8);
    while let Some(r) = results.next().await {
        out.extend(r?);
    }
    out.sort();
    Ok(out)
}

fn committed_files(state: &JobState) -> Vec<(u64, crate::state::OutputFile)> {
    state
        .shards()
        .filter_map(|s| match &s.status {
            Status::Committed { files, .. } => Some((s.spec.shard_id, files.clone())),
            _ => None,
        })
        .flat_map(|(id, files)| files.into_iter().map(move |f| (id, f)))
        .collect()
}

/// Puts back in the queue every committed shard whose files are no longer
/// in the output as committed (deleted or damaged by hand, or by an older
/// paraforge's second job), so that a resumed job writes them again instead
/// of listing files that do not hold what was committed. An output that was
/// finished loses its `_SUCCESS`, manifest and card first: it is not
/// complete.
async fn reconcile(state: &mut JobState, storage: &Storage) -> Result<(), RunError> {
    let bad = damaged(storage, committed_files(state)).await?;
    if bad.is_empty() {
        return Ok(());
    }
    for f in [SUCCESS_FILE, MANIFEST_FILE, JOB_CARD_FILE] {
        if storage.exists(f).await? {
            storage.delete(f).await?;
        }
    }
    let mut shards: Vec<u64> = bad.iter().map(|(id, _, _)| *id).collect();
    shards.dedup();
    for (id, path, why) in &bad {
        tracing::warn!(
            shard = id,
            %path,
            %why,
            "a committed file is missing or changed in the output: its shard is written again"
        );
    }
    for id in shards {
        state.requeue(
            id,
            "its committed files went missing or changed in the output",
        )?;
    }
    Ok(())
}

/// Fixes the job's model digest when it is planned and checks it when the
/// job resumes, where the coordinator can read `model.dir`; where it cannot
/// (a cluster that mounts the model on workers only), the first worker to
/// lease fixes it and every later one must match (`service::check_model`).
async fn fix_model(cfg: &JobConfig, state: &mut JobState) -> Result<(), RunError> {
    let (dir, now) = match &cfg.model {
        // An input of pairs: the digest of no model, which a worker that
        // loaded one does not have.
        None => (
            "(none: the input holds its translations)".to_string(),
            paraforge_core::model_digest::no_model_digest(),
        ),
        Some(model) => {
            let path = PathBuf::from(&model.dir);
            if !path.exists() {
                tracing::warn!(dir = %path.display(), "model.dir is not readable by the coordinator: the first worker's model fixes the job's model digest");
                return Ok(());
            }
            let unreadable = |source| RunError::ModelUnreadable {
                dir: model.dir.clone(),
                source,
            };
            let now = tokio::task::spawn_blocking(move || {
                paraforge_core::model_digest::model_digest(&path)
            })
            .await
            .map_err(|e| unreadable(std::io::Error::other(e.to_string())))?
            .map_err(unreadable)?;
            (model.dir.clone(), now)
        }
    };
    match state.model_sha256() {
        Some(was) if !was.eq_ignore_ascii_case(&now) => Err(RunError::ModelChanged {
            dir,
            was: was.to_string(),
            now,
        }),
        Some(_) => Ok(()),
        None => Ok(state.set_model_sha256(&now)?),
    }
}

/// Checks a resumed job against its plan: the same output-deciding config
/// and the same inputs, byte for byte.
fn check_resume(cfg: &JobConfig, state: &JobState, path: &std::path::Path) -> Result<(), RunError> {
    let was: std::collections::BTreeMap<String, String> =
        serde_json::from_str(state.config_key()).unwrap_or_default();
    for (key, now) in cfg.output_keys() {
        let before = was.get(&key).cloned().unwrap_or_else(|| "unset".into());
        if before != now {
            return Err(RunError::ConfigChanged {
                state: path.display().to_string(),
                key,
                was: before,
                now,
            });
        }
    }
    for planned in state.inputs() {
        let now = crate::plan::fingerprint(&planned.input)?;
        if let Some(why) = planned.differs(&now) {
            return Err(RunError::InputChanged {
                input: planned.input.clone(),
                why,
            });
        }
        if planned.modified != now.modified || planned.e_tag != now.e_tag {
            tracing::warn!(input = %planned.input, "input has a new modification time or ETag but the same bytes: resuming");
        }
    }
    Ok(())
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

/// Opens the job's state: a new job is planned (its output must be new),
/// a resumed one checked against its plan.
async fn open(
    cfg: &JobConfig,
    path: &std::path::Path,
    storage: &Storage,
) -> Result<JobState, RunError> {
    let job_id = cfg.job.name.clone();
    let out = &cfg.job.output;
    let blocking_err = |e: tokio::task::JoinError| {
        RunError::Plan(PlanError::Io {
            path: PathBuf::from(&cfg.input.paths.join(", ")),
            source: std::io::Error::other(e.to_string()),
        })
    };
    let mut planned = None;
    if !path.exists() {
        // A new job: the output must be new too, which is cheap to check
        // before planning reads every input.
        if storage.exists(CLAIM).await? {
            let theirs = read_claim(cfg, storage).await?;
            return Err(RunError::OutputClaimed {
                output: out.clone(),
                why: format!(
                    "belongs to job {:?} (state {}, run {}), and this job's state {} is new",
                    theirs.job,
                    theirs.state,
                    theirs.run_id,
                    path.display()
                ),
            });
        }
        if let Some(f) = foreign_files(storage).await? {
            return Err(RunError::OutputClaimed {
                output: out.clone(),
                why: format!(
                    "already holds a job's files ({f}) and no claim this job's state can match"
                ),
            });
        }
        // Planning reads every input once (blocking I/O, maybe remote).
        let c = cfg.clone();
        planned = Some(
            tokio::task::spawn_blocking(move || plan_job(&c))
                .await
                .map_err(blocking_err)??,
        );
    }
    let keys = serde_json::to_string(&cfg.output_keys()).unwrap_or_default();
    let state = JobState::open_planned(path, &job_id, cfg.job.max_attempts, &keys, || {
        planned.take().unwrap_or_default()
    })?;
    if state.created() {
        return Ok(state);
    }
    // Fingerprinting reads every input again: blocking, maybe remote.
    let (c, p) = (cfg.clone(), path.to_path_buf());
    let (st, checked) = tokio::task::spawn_blocking(move || {
        let r = check_resume(&c, &state, &p);
        (state, r)
    })
    .await
    .map_err(blocking_err)?;
    checked?;
    if st.retried_failed() > 0 {
        tracing::warn!(
            shards = st.retried_failed(),
            "retrying shards that failed in an earlier run"
        );
    }
    Ok(st)
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

/// What the manifest records for each committed file.
#[derive(Debug, Clone, Serialize)]
pub struct ManifestFile {
    pub path: String,
    pub shard: u64,
    pub rows: u64,
    pub bytes: u64,
    pub sha256: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Manifest {
    /// Always `job`: what wrote this manifest (core::layout::ManifestHead).
    pub kind: paraforge_core::layout::ManifestKind,
    pub job: String,
    pub paraforge_version: String,
    pub shards_total: u64,
    pub shards_committed: u64,
    /// Rows in the pairs files: `beam_candidates` per kept input pair.
    pub pairs: u64,
    /// `model.beam_candidates`.
    pub beam_candidates: u64,
    /// The model that translated the corpus; null when none did (the
    /// input held its translations, `input.format = "pairs"`).
    pub model: Option<ManifestModel>,
    /// `[input]`'s format and files.
    pub input: ManifestInput,
    /// `[filters]` as set (every rule left out is off).
    pub filters: serde_json::Value,
    /// The para_score model(s) the pairs files' footers name, with how
    /// many files name each: one, unless nodes loaded different files.
    pub para_scorers: Vec<ManifestScorer>,
    /// Pairs files whose footer could not be read for its scorer: they
    /// may name another model, or none.
    #[serde(skip_serializing_if = "is_zero")]
    pub para_scorer_footers_unread: u64,
    /// The languages of the two sides, where the config or the model says.
    #[serde(skip_serializing_if = "Languages::is_empty")]
    pub languages: Languages,
    pub rejects: u64,
    /// Rejects by reason code: malformed lines and `[filters]` rules
    /// (`RejectReason::is_filter_code`); they sum to `rejects`.
    pub rejects_by_reason: std::collections::BTreeMap<String, u64>,
    pub files: Vec<ManifestFile>,
    pub rejects_files: Vec<ManifestFile>,
    pub removed_uncommitted: Vec<String>,
    pub config: String,
}

pub use paraforge_core::layout::ManifestModel;

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The para_score models that the footers of `files` name
/// (`paraforge.para_scorer*`), each with the files that name it, most
/// first, and how many footers could not be read (a file that names no
/// model is neither); read from each footer alone (two ranged reads a
/// file).
async fn footer_scorers(
    storage: &Storage,
    files: &[ManifestFile],
) -> Result<(Vec<ManifestScorer>, u64), RunError> {
    use futures::StreamExt;
    let reads = files.iter().map(|f| async move {
        if f.bytes < 12 {
            return Ok::<_, RunError>(Err(()));
        }
        let tail = storage.get_range(&f.path, f.bytes - 8, f.bytes).await?;
        let len = u64::from(u32::from_le_bytes(
            tail[..4].try_into().expect("8 bytes were read"),
        ));
        if len + 8 > f.bytes {
            return Ok(Err(()));
        }
        let footer = storage
            .get_range(&f.path, f.bytes - 8 - len, f.bytes)
            .await?;
        Ok(crate::verify::footer_scorer(&footer).map_err(|e| {
            tracing::warn!(path = %f.path, error = %e, "its footer does not parse; the card counts it as not known");
        }))
    });
    let mut found: std::collections::BTreeMap<(String, String, String), u64> = Default::default();
    let mut unread = 0;
    let mut results = futures::stream::iter(reads).buffer_unordered(8);
    while let Some(r) = results.next().await {
        match r? {
            Ok(Some(k)) => *found.entry(k).or_default() += 1,
            Ok(None) => {}
            Err(()) => unread += 1,
        }
    }
    let mut v: Vec<ManifestScorer> = found
        .into_iter()
        .map(|((file, kind, sha256), files)| ManifestScorer {
            file,
            kind,
            sha256,
            files,
        })
        .collect();
    v.sort_by_key(|s| std::cmp::Reverse(s.files));
    Ok((v, unread))
}

/// The languages of a job's sides, each from `[filters]`' `source_lang`
/// or `reference_lang` where set, else from the model's
/// `tokenizer_config.json` (`source_lang`, `target_lang`, as Marian exports
/// have them) where the coordinator can read it.
fn job_languages(shared: &Shared) -> Languages {
    let f = &shared.filters;
    let tokenizer = match (&f.source_lang, &f.reference_lang, &shared.model_dir) {
        (None, _, Some(dir)) | (_, None, Some(dir)) => {
            std::fs::read(std::path::Path::new(dir).join("tokenizer_config.json"))
                .ok()
                .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        }
        _ => None,
    };
    languages_from(f, tokenizer.as_ref())
}

/// [`job_languages`] from the filters and the tokenizer's config: each
/// side on its own, as the Hub's `language` wants the codes (ISO 639-1
/// where there is one; the filters name ISO 639-3).
fn languages_from(
    f: &paraforge_job::filters::Filters,
    tokenizer: Option<&serde_json::Value>,
) -> Languages {
    const FILTERS: &str = "[filters]";
    const TOKENIZER: &str = "the translation model's tokenizer_config.json";
    let from_tokenizer = |k: &str| {
        tokenizer
            .and_then(|c| c[k].as_str())
            .filter(|l| !l.trim().is_empty())
            .map(|l| (hub_language(l), TOKENIZER))
    };
    let source = f
        .source_lang
        .as_deref()
        .map(|l| (hub_language(l), FILTERS))
        .or_else(|| from_tokenizer("source_lang"));
    let reference = f
        .reference_lang
        .as_deref()
        .map(|l| (hub_language(l), FILTERS))
        .or_else(|| from_tokenizer("target_lang"));
    let from = match (&source, &reference) {
        (Some((_, a)), Some((_, b))) if a == b => a.to_string(),
        (Some((_, a)), Some((_, b))) => format!("source from {a}, reference from {b}"),
        (Some((_, a)), None) | (None, Some((_, a))) => a.to_string(),
        (None, None) => String::new(),
    };
    Languages {
        source: source.map(|(l, _)| l),
        reference: reference.map(|(l, _)| l),
        from,
    }
}

/// Ends a finished job. Deletes the files of attempts that were not
/// committed (only files this job wrote: paths that name a token it
/// issued), checks that every committed file is still there, and writes
/// `_manifest.json` and then `_SUCCESS` only when nothing is missing: every
/// shard committed, some pairs written, rejects within
/// `job.max_reject_rate`. Otherwise it returns [`Incomplete`], writes no
/// success marker, and puts shards whose files vanished back in the queue
/// so that running the job again redoes them. Safe to run again.
pub async fn finalize(shared: &Shared, storage: &Storage) -> Result<Manifest, RunError> {
    let (mut files, mut rejects_files, mut failed) = (Vec::new(), Vec::new(), Vec::new());
    let committed = {
        let st = shared.state.lock().unwrap_or_else(|p| p.into_inner());
        committed_files(&st)
    };
    let lost = damaged(storage, committed).await?;
    let listing: std::collections::HashMap<String, u64> =
        storage.list("").await?.into_iter().collect();
    let (counts, job, issued, model_sha256) = {
        let st = shared.state.lock().unwrap_or_else(|p| p.into_inner());
        for s in st.shards() {
            match &s.status {
                Status::Committed { files: fs, .. } => {
                    for f in fs {
                        let m = ManifestFile {
                            path: f.path.clone(),
                            shard: s.spec.shard_id,
                            rows: f.rows,
                            bytes: f.bytes,
                            sha256: f.sha256.clone(),
                        };
                        if f.kind == FileKind::Rejects {
                            rejects_files.push(m);
                        } else {
                            files.push(m);
                        }
                    }
                }
                Status::Failed { reason } => failed.push((s.spec.shard_id, reason.clone())),
                _ => {}
            }
        }
        let issued: Vec<(&String, bool)> = listing
            .keys()
            .map(|p| {
                let ours = OutputLayout::parse_attempt_path(p)
                    .is_some_and(|(shard, token)| st.issued(shard, token));
                (p, ours)
            })
            .collect();
        let model_sha256 = st.model_sha256().map(str::to_string);
        (st.counts(), st.job_id().to_string(), issued, model_sha256)
    };
    let keep: std::collections::HashSet<&str> = files
        .iter()
        .chain(&rejects_files)
        .map(|f| f.path.as_str())
        .collect();
    let mut removed = Vec::new();
    for (path, ours) in issued {
        if ours && !keep.contains(path.as_str()) {
            storage.delete(path).await?;
            removed.push(path.clone());
        } else if !ours && path.starts_with("shard=") {
            tracing::warn!(%path, "a file this job did not write sits in its output; left alone");
        }
    }
    // A worker killed mid-write leaves a local store's staging file,
    // which the listing above does not show.
    for (path, name) in storage.local_write_leftovers("") {
        let ours = OutputLayout::parse_attempt_path(&name).is_some_and(|(shard, token)| {
            let st = shared.state.lock().unwrap_or_else(|p| p.into_inner());
            st.issued(shard, token)
        });
        if ours {
            storage.remove_local_leftover(&path)?;
            removed.push(path);
        }
    }
    removed.sort();
    storage.remove_empty_dirs("_tmp").await;
    storage.remove_empty_dirs("_rejects").await;

    let mut problems: Vec<String> = failed
        .iter()
        .map(|(id, why)| format!("shard {id} failed: {why}"))
        .collect();
    if !lost.is_empty() {
        let mut st = shared.state.lock().unwrap_or_else(|p| p.into_inner());
        let mut shards: Vec<u64> = lost.iter().map(|(id, _, _)| *id).collect();
        shards.dedup();
        for id in shards {
            st.requeue(
                id,
                "its committed files went missing or changed in the output",
            )?;
        }
        problems.extend(lost.iter().map(|(id, p, why)| {
            format!("shard {id}'s committed file {p} is missing or changed in the output ({why}); it is written again when the job runs again")
        }));
    }
    let k = shared.beam_candidates.max(1);
    let lines = counts.pairs / k + counts.rejects;
    if counts.committed == counts.total && problems.is_empty() {
        // Rules that drop most of a corpus are more likely wrong (swapped
        // languages) than right, whether or not some pairs are left.
        let dropped = paraforge_job::filters::counted_drops(&counts.rejects_by_reason);
        let drops = paraforge_job::filters::check_drop_rate(dropped, lines, &shared.filters);
        if counts.pairs == 0 {
            problems.push(format!(
                "no pairs were written ({} lines read, {} rejected)",
                lines, counts.rejects
            ));
        } else {
            // Pairs `[filters]` dropped were dropped on purpose; the limit
            // is for lines the job could not read.
            let filtered: u64 = counts
                .rejects_by_reason
                .iter()
                .filter(|(code, _)| RejectReason::is_filter_code(code))
                .map(|(_, n)| n)
                .sum();
            let malformed = counts.rejects - filtered.min(counts.rejects);
            let rate = malformed as f64 / lines.max(1) as f64;
            let limit = shared.max_reject_rate;
            if rate > limit {
                problems.push(format!(
                    "{:.1}% of the input lines were rejected as malformed ({} of {}), more than job.max_reject_rate = {limit} allows: check input.format, the columns and the encoding (see _rejects/)",
                    100.0 * rate,
                    malformed,
                    lines
                ));
            }
        }
        problems.extend(drops.err());
    }
    if !problems.is_empty() || counts.committed < counts.total {
        if problems.is_empty() {
            problems.push(format!(
                "{} of {} shards are not committed",
                counts.total - counts.committed,
                counts.total
            ));
        }
        return Err(RunError::Incomplete(Incomplete {
            job,
            shards_total: counts.total,
            shards_committed: counts.committed,
            problems,
        }));
    }
    let (para_scorers, para_scorer_footers_unread) = footer_scorers(storage, &files).await?;
    let manifest = Manifest {
        kind: paraforge_core::layout::ManifestKind::Job,
        job,
        paraforge_version: env!("CARGO_PKG_VERSION").into(),
        shards_total: counts.total,
        shards_committed: counts.committed,
        pairs: counts.pairs,
        beam_candidates: k,
        model: shared.model_dir.clone().map(|dir| ManifestModel {
            dir,
            sha256: model_sha256.unwrap_or_default(),
        }),
        input: shared.input.clone(),
        filters: serde_json::to_value(&shared.filters).unwrap_or_else(|_| serde_json::json!({})),
        para_scorers,
        para_scorer_footers_unread,
        languages: job_languages(shared),
        rejects: counts.rejects,
        rejects_by_reason: counts.rejects_by_reason.clone(),
        files,
        rejects_files,
        removed_uncommitted: removed,
        config: shared.config_toml.clone(),
    };
    let json = serde_json::to_vec_pretty(&manifest).unwrap_or_default();
    // The card from the manifest's own bytes: it says what they record.
    let card = JobFacts::parse(&json)
        .map(|f| paraforge_core::layout::card::job_card(&f))
        .unwrap_or_default();
    storage.put(MANIFEST_FILE, json.into()).await?;
    storage.put(JOB_CARD_FILE, card.into()).await?;
    storage
        .put_if_absent(SUCCESS_FILE, bytes::Bytes::new())
        .await?;
    Ok(manifest)
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

    /// The card is made from the manifest's JSON: everything it shows
    /// comes back from what the manifest writes, and the scorer from a
    /// footer read alone.
    #[test]
    fn the_card_reads_what_the_manifest_records() {
        use paraforge_core::schema::{meta, schema, PairFileWriter};
        let dir = tempfile::tempdir().unwrap();
        let part = dir.path().join("part.parquet");
        let stamp = [
            (meta::PARA_SCORER, "scorer/model.pfe".to_string()),
            (meta::PARA_SCORER_KIND, "TRIGRAM".to_string()),
            (meta::PARA_SCORER_SHA256, "bb9c".to_string()),
        ];
        let mut w = PairFileWriter::create(&part, schema(), &stamp).unwrap();
        w.write(&paraforge_core::RowsBuilder::default().finish())
            .unwrap();
        w.close().unwrap();
        let bytes = std::fs::read(&part).unwrap();
        let n = bytes.len();
        let len = u32::from_le_bytes(bytes[n - 8..n - 4].try_into().unwrap()) as usize;
        let footer = bytes::Bytes::copy_from_slice(&bytes[n - 8 - len..]);
        let found = crate::verify::footer_scorer(&footer).unwrap().unwrap();
        assert_eq!(
            found,
            ("scorer/model.pfe".into(), "TRIGRAM".into(), "bb9c".into())
        );
        // A footer that does not parse is not one that names no model.
        assert!(crate::verify::footer_scorer(&footer.slice(1..)).is_err());

        let filters = paraforge_job::filters::Filters {
            min_tokens: Some(2),
            source_lang: Some("ces".into()),
            ..Default::default()
        };
        let m = Manifest {
            kind: paraforge_core::layout::ManifestKind::Job,
            job: "j".into(),
            paraforge_version: "0.1.0".into(),
            shards_total: 2,
            shards_committed: 2,
            pairs: 8,
            beam_candidates: 2,
            model: Some(ManifestModel {
                dir: "m".into(),
                sha256: "ab".into(),
            }),
            input: ManifestInput {
                format: "czeng16".into(),
                paths: vec!["in.tsv".into()],
                reference_paths: Vec::new(),
            },
            filters: serde_json::to_value(&filters).unwrap(),
            para_scorers: vec![ManifestScorer {
                file: found.0,
                kind: found.1,
                sha256: found.2,
                files: 2,
            }],
            para_scorer_footers_unread: 1,
            languages: Languages {
                source: Some("ces".into()),
                reference: None,
                from: "[filters]".into(),
            },
            rejects: 1,
            rejects_by_reason: [("columns".to_string(), 1)].into(),
            files: (0..4)
                .map(|i| ManifestFile {
                    path: format!("shard={i}/part.parquet"),
                    shard: i,
                    rows: 2,
                    bytes: 9,
                    sha256: String::new(),
                })
                .collect(),
            rejects_files: Vec::new(),
            removed_uncommitted: Vec::new(),
            config: String::new(),
        };
        let f = JobFacts::parse(&serde_json::to_vec(&m).unwrap()).unwrap();
        assert_eq!(
            (f.job.as_str(), f.pairs, f.beam_candidates, f.rejects),
            ("j", 8, 2, 1)
        );
        assert_eq!(f.model, m.model);
        assert_eq!(f.input.as_ref(), Some(&m.input));
        assert_eq!(f.para_scorers.as_ref(), Some(&m.para_scorers));
        assert_eq!(f.languages, m.languages);
        let rules = f.filters.clone().unwrap();
        assert_eq!(rules["min_tokens"], 2);
        assert_eq!(rules.len(), 2, "only the rules set: {rules:?}");
        assert_eq!(f.rejects_by_reason, m.rejects_by_reason);
        // One scorer named by 2 of the 4 files, one footer unread: not
        // "the cosine of" that scorer.
        let card = paraforge_core::layout::card::job_card(&f);
        for want in [
            "fingerprint `bb9c`: 2 of 4 files",
            "no model (the column is null): 1 of 4 files",
            "not known: 1 of 4 files",
        ] {
            assert!(card.contains(want), "{want} not in\n{card}");
        }
        assert!(!card.contains("the cosine of"), "{card}");
    }

    /// Each side from `[filters]` where set, else from the tokenizer, in
    /// the Hub's ISO 639-1.
    #[test]
    fn languages_fill_each_side_and_use_the_hubs_codes() {
        let tok = serde_json::json!({"source_lang": "cs", "target_lang": "eng"});
        let f = |s: Option<&str>, r: Option<&str>| paraforge_job::filters::Filters {
            source_lang: s.map(String::from),
            reference_lang: r.map(String::from),
            ..Default::default()
        };
        let l = languages_from(&f(Some("ces"), None), Some(&tok));
        assert_eq!(
            (l.source.as_deref(), l.reference.as_deref()),
            (Some("cs"), Some("en"))
        );
        assert!(
            l.from.contains("[filters]") && l.from.contains("tokenizer_config"),
            "{}",
            l.from
        );
        let l = languages_from(&f(None, Some("eng")), None);
        assert_eq!((l.source, l.reference.as_deref()), (None, Some("en")));
        // A language without an ISO 639-1 code keeps its ISO 639-3 one.
        let l = languages_from(&f(Some("hsb"), Some("deu")), Some(&tok));
        assert_eq!(
            (l.source.as_deref(), l.reference.as_deref()),
            (Some("hsb"), Some("de"))
        );
        assert_eq!(l.from, "[filters]");
        assert!(languages_from(&f(None, None), None).is_empty());
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
