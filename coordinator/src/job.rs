//! A job's whole life, the same for `paraforge run` and `paraforge
//! coordinator`: start (or resume) and serve, wait until every shard is
//! committed or failed, drain the workers, finalize (`_manifest.json`, then
//! `_SUCCESS`), then the steps that read the output back: staging an
//! object-store output, the summary and the bins. Callers only start
//! workers (or not) and print.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use paraforge_core::layout::{MANIFEST_FILE, SUCCESS_FILE};
use paraforge_dataset::bins::{BinError, BinManifest, BinOptions};
use paraforge_dataset::report::Summary;
use paraforge_job::config::JobConfig;
use paraforge_job::storage::{local_path, Storage, StorageError};
use paraforge_rpc::proto::JobStatusResponse;

use crate::bootstrap::{BootstrapRun, ScoreStep, Scored};
use crate::live::Live;
use crate::phase::Phase;
use crate::run::{bind, finalize, Manifest, RunError, Running, Starting};
use crate::shared::{status, Shared};

#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error(transparent)]
    Run(#[from] RunError),
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// Stopped on request: not a success, so a script does not go on with
    /// a partial output.
    #[error("stopped before the job finished: {committed} of {total} shards committed; the state is kept: run the same command again to resume")]
    Stopped { committed: u64, total: u64 },
    #[error("reading the output back: {0}")]
    Summary(#[source] paraforge_core::schema::DataError),
    #[error("binning the output: {0}")]
    Bins(#[source] BinError),
    /// `[scoring] bootstrap` failed: the translated output is finished,
    /// the scored one not written; a rerun of the job tries again.
    #[error("scoring.bootstrap into {out}: {message}; the translated output is finished and kept, the scored corpus was not written: run the job again to retry the bootstrap")]
    Bootstrap { out: String, message: String },
    #[error("{what}: {source}")]
    Local {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// A job being served.
pub struct Job {
    cfg: JobConfig,
    running: Running,
}

/// What the steps after finalizing produced.
pub struct Finished {
    pub manifest: Manifest,
    /// `None` for an object-store output without bins (nothing is staged
    /// only to be summarized).
    pub summary: Option<Summary>,
    pub bins: Option<BinsWritten>,
    /// `[scoring] bootstrap`'s scored corpus, which the summary and the
    /// bins read.
    pub scored: Option<Scored>,
}

pub struct BinsWritten {
    /// Where the bins are (`bins.output`, else `<output>-bins`).
    pub target: String,
    pub manifest: BinManifest,
    /// Files uploaded, for an object-store target.
    pub uploaded: Option<usize>,
}

/// A job whose pages (`/status`, `/metrics`) answer while it is planned
/// or resumed, which at CzEng's size takes minutes.
pub struct Binding {
    cfg: JobConfig,
    starting: Starting,
}

impl Binding {
    pub fn http_addr(&self) -> SocketAddr {
        self.starting.http_addr()
    }

    pub fn live(&self) -> &Arc<Live> {
        self.starting.live()
    }

    /// Plans (or resumes) the job and serves gRPC; `listen` overrides
    /// `coordinator.listen`.
    pub async fn start(self, listen: Option<SocketAddr>) -> Result<Job, JobError> {
        Ok(Job {
            running: self.starting.start(listen).await?,
            cfg: self.cfg,
        })
    }
}

impl Job {
    /// Serves the job's pages; `metrics` overrides `coordinator.metrics`.
    pub async fn bind(cfg: &JobConfig, metrics: Option<SocketAddr>) -> Result<Binding, JobError> {
        Ok(Binding {
            cfg: cfg.clone(),
            starting: bind(cfg, metrics).await?,
        })
    }

    /// Opens or resumes the job's state and serves gRPC and HTTP;
    /// `listen`/`metrics` override the config's addresses.
    pub async fn start(
        cfg: &JobConfig,
        listen: Option<SocketAddr>,
        metrics: Option<SocketAddr>,
    ) -> Result<Job, JobError> {
        Job::bind(cfg, metrics).await?.start(listen).await
    }

    /// The job's output URL or directory, as configured.
    pub fn output(&self) -> &str {
        &self.cfg.job.output
    }

    pub fn shared(&self) -> &Arc<Shared> {
        &self.running.shared
    }

    pub fn grpc_addr(&self) -> SocketAddr {
        self.running.grpc_addr
    }

    pub fn http_addr(&self) -> SocketAddr {
        self.running.http_addr
    }

    pub fn status(&self) -> JobStatusResponse {
        status(&self.running.shared)
    }

    /// Waits until every shard is committed or failed (true) or `stop` is
    /// set (false); `progress` sees the status four times a second.
    pub async fn wait(
        &self,
        stop: &AtomicBool,
        mut progress: impl FnMut(&JobStatusResponse),
    ) -> bool {
        loop {
            let s = self.status();
            progress(&s);
            if s.finished {
                return true;
            }
            if stop.load(Ordering::Relaxed) {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Serves until every worker still around has been told `done` (an
    /// idle one asks again within a second; a busy one when its stale
    /// attempt ends), for at most one lease: a worker silent that long is
    /// gone or will find its lease expired anyway.
    pub async fn drain(&self, stop: &AtomicBool) {
        let shared = &self.running.shared;
        let limit = std::time::Instant::now() + shared.lease;
        while shared.awaiting_done() > 0 && std::time::Instant::now() < limit {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let left = shared.awaiting_done();
        if left > 0 {
            tracing::warn!(
                workers = left,
                "stopping before every worker was told the job is done"
            );
        }
    }

    /// Stops serving a job that did not finish; the state is kept for a
    /// resume. Returns the status it ended with.
    pub async fn abandon(self) -> JobStatusResponse {
        let s = self.status();
        self.running.stop().await;
        s
    }

    /// Stops serving a job stopped on request, as the error to report.
    pub async fn stopped(self) -> JobError {
        let s = self.abandon().await;
        JobError::Stopped {
            committed: s.shards_committed,
            total: s.shards_total,
        }
    }

    /// Finalizes the output (an incomplete job is an error, with no success
    /// marker) and stops serving; `finalized` sees the manifest before the
    /// slower steps that read the output back. The pages answer until
    /// those are done.
    pub async fn finish(
        self,
        step: Option<Arc<dyn ScoreStep>>,
        finalized: impl FnOnce(&Manifest),
    ) -> Result<Finished, JobError> {
        let Job { cfg, running } = self;
        running.live().set_phase(Phase::Finalizing);
        let storage = match Storage::open(&cfg.job.output) {
            Ok(s) => s,
            Err(e) => {
                running.stop().await;
                return Err(e.into());
            }
        };
        let m = finalize(&running.shared, &storage).await;
        let pages = running.stop_grpc().await;
        let manifest = match m {
            Ok(m) => m,
            Err(e) => {
                pages.stop().await;
                return Err(e.into());
            }
        };
        // The phase of the steps that follow, as `finalized` sees it.
        pages.live.set_phase(match cfg.scoring.bootstrap {
            Some(_) => Phase::Bootstrapping,
            None => Phase::ReadingBack,
        });
        finalized(&manifest);
        let scored = match bootstrap(&cfg, step).await {
            Ok(s) => s,
            Err(e) => {
                pages.stop().await;
                return Err(e);
            }
        };
        pages.live.set_phase(Phase::ReadingBack);
        let r = read_back(&cfg, &storage, manifest, scored).await;
        pages.stop().await;
        r
    }
}

/// `[scoring] bootstrap`'s step on the finalized (local) output, where the
/// config asks for one.
async fn bootstrap(
    cfg: &JobConfig,
    step: Option<Arc<dyn ScoreStep>>,
) -> Result<Option<Scored>, JobError> {
    let (Some(kind), Some(out)) = (&cfg.scoring.bootstrap, cfg.bootstrap_output()) else {
        return Ok(None);
    };
    let fail = |message: String| JobError::Bootstrap {
        out: out.clone(),
        message,
    };
    let step = step.ok_or_else(|| fail("this program runs no bootstrap step".into()))?;
    let translated = local_path(&cfg.job.output)
        .ok_or_else(|| fail("job.output is not a local directory".into()))?;
    let run = BootstrapRun {
        translated: translated.to_path_buf(),
        out: PathBuf::from(&out),
        kind: kind.clone(),
        folds: cfg.scoring.folds(),
        epochs: cfg.scoring.bootstrap_epochs,
    };
    let scored = tokio::task::spawn_blocking(move || step.score(&run).map_err(|e| e.to_string()))
        .await
        .map_err(join_err)?
        .map_err(fail)?;
    Ok(Some(scored))
}

/// The steps after finalizing: the summary and the bins (of the scored
/// corpus where a bootstrap wrote one).
async fn read_back(
    cfg: &JobConfig,
    storage: &Storage,
    manifest: Manifest,
    scored: Option<Scored>,
) -> Result<Finished, JobError> {
    // The summary and the bins read the output as local Parquet: an
    // object-store output is staged (checksums verified) to a local
    // temporary directory first, and the bins uploaded back.
    let staged = match (local_path(&cfg.job.output), &cfg.bins) {
        (None, Some(_)) => Some(stage(storage, &manifest).await?),
        _ => None,
    };
    let local_out = match (&scored, &staged, local_path(&cfg.job.output)) {
        (Some(s), _, _) => Some(s.out.clone()),
        (None, Some(d), _) => Some(d.path().join("output")),
        (None, None, Some(p)) => Some(p.to_path_buf()),
        (None, None, None) => None,
    };
    let summary = match &local_out {
        Some(out) => {
            let out = out.clone();
            Some(
                tokio::task::spawn_blocking(move || Summary::read(&out))
                    .await
                    .map_err(join_err)?
                    .map_err(JobError::Summary)?,
            )
        }
        None => None,
    };
    let bins = match (&cfg.bins, cfg.bins_output(), local_out) {
        (Some(b), Some(target), Some(input)) => {
            // A remote target is written to a local scratch directory
            // (the staging one when there is one), then uploaded.
            let mut scratch = None;
            let local_bins = match (local_path(&target), &staged) {
                (Some(p), _) => p.to_path_buf(),
                (None, Some(d)) => d.path().join("bins"),
                (None, None) => scratch
                    .insert(tempfile::tempdir().map_err(|source| JobError::Local {
                        what: "creating a staging directory",
                        source,
                    })?)
                    .path()
                    .join("bins"),
            };
            let mut o = BinOptions::new(input, local_bins.clone());
            o.deciles = b.deciles.clone();
            o.train_sample = b.train_sample;
            o.dedup = b.dedup;
            // The job's own bins: a rerun of the job writes them again.
            o.overwrite = true;
            if staged.is_some() {
                // Not the temporary copy, gone when the bins are uploaded.
                o.input_name = Some(cfg.job.output.clone());
            }
            let manifest = tokio::task::spawn_blocking(move || paraforge_dataset::bins::run(&o))
                .await
                .map_err(join_err)?
                .map_err(JobError::Bins)?;
            let uploaded = match local_path(&target) {
                Some(_) => None,
                None => Some(replace_remote_bins(&target, &local_bins).await?),
            };
            Some(BinsWritten {
                target,
                manifest,
                uploaded,
            })
        }
        _ => None,
    };
    Ok(Finished {
        manifest,
        summary,
        bins,
        scored,
    })
}

fn join_err(e: tokio::task::JoinError) -> JobError {
    JobError::Local {
        what: "a blocking task ended abnormally",
        source: std::io::Error::other(e.to_string()),
    }
}

/// Downloads the committed files, `_manifest.json` and `_SUCCESS` to
/// `<tmp>/output`, checking each file's SHA-256 against the manifest: the
/// local copy is then read (and verified) as any finished dataset.
async fn stage(storage: &Storage, m: &Manifest) -> Result<tempfile::TempDir, JobError> {
    let dir = tempfile::tempdir().map_err(|source| JobError::Local {
        what: "creating a staging directory",
        source,
    })?;
    let files: Vec<(String, Option<String>)> = m
        .files
        .iter()
        .map(|f| (f.path.clone(), Some(f.sha256.clone())))
        .chain([
            (MANIFEST_FILE.to_string(), None),
            (SUCCESS_FILE.to_string(), None),
        ])
        .collect();
    let bar = indicatif::ProgressBar::new(files.len() as u64).with_message("staging the output");
    storage
        .download_checked(&files, &dir.path().join("output"), || bar.inc(1))
        .await?;
    bar.finish_and_clear();
    Ok(dir)
}

/// Uploads new bins to an object-store prefix. A prefix holding an earlier
/// bins output is replaced: its `_SUCCESS` and manifest go first (readers
/// then see no complete bins), then every object the new bins do not have,
/// then the new files, manifest and `_SUCCESS` last. A prefix holding
/// anything else is refused.
async fn replace_remote_bins(target: &str, local_bins: &Path) -> Result<usize, JobError> {
    let storage = Storage::open(target)?;
    let old = storage.list("").await?;
    if !old.is_empty() {
        let manifest = storage.get(MANIFEST_FILE).await.ok();
        if !manifest.is_some_and(|b| paraforge_dataset::bins::is_bins_manifest(&b)) {
            return Err(JobError::Bins(BinError::NotBins(PathBuf::from(target))));
        }
        if storage.exists(SUCCESS_FILE).await? {
            storage.delete(SUCCESS_FILE).await?;
        }
        storage.delete(MANIFEST_FILE).await?;
        let mut new = std::collections::BTreeSet::new();
        let mut stack = vec![local_bins.to_path_buf()];
        while let Some(d) = stack.pop() {
            let entries = std::fs::read_dir(&d).map_err(|source| JobError::Local {
                what: "listing the staged bins",
                source,
            })?;
            for e in entries {
                let p = e
                    .map_err(|source| JobError::Local {
                        what: "listing the staged bins",
                        source,
                    })?
                    .path();
                if p.is_dir() {
                    stack.push(p);
                } else if let Ok(rel) = p.strip_prefix(local_bins) {
                    new.insert(rel.to_string_lossy().replace('\\', "/"));
                }
            }
        }
        for (rel, _) in old {
            if rel != MANIFEST_FILE && rel != SUCCESS_FILE && !new.contains(&rel) {
                storage.delete(&rel).await?;
            }
        }
    }
    Ok(storage.upload_dir(local_bins).await?)
}
