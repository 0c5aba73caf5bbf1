//! The coordinator as its pages see it (`/status`, `/metrics`): the phase
//! from the moment their port is bound, the job's shared state once there
//! is one.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use paraforge_rpc::proto as pb;

use crate::metrics::{JobView, Metrics, Snapshot};
use crate::phase::Phase;
use crate::shared::Shared;

/// The coordinator as its pages see it: the phase from the start, the
/// job's shared state once there is one. The event metrics live here, not
/// in the state, so that their series are on the page from the first
/// scrape.
pub struct Live {
    job_id: String,
    output: String,
    phase: Mutex<(Phase, Instant)>,
    shared: OnceLock<Arc<Shared>>,
    metrics: Arc<Metrics>,
}

impl Live {
    pub fn new(job_id: &str, output: &str, phase: Phase) -> Arc<Live> {
        tracing::info!(phase = phase.as_str(), job = job_id, "coordinator phase");
        Arc::new(Live {
            job_id: job_id.to_string(),
            output: output.to_string(),
            phase: Mutex::new((phase, Instant::now())),
            shared: OnceLock::new(),
            metrics: Arc::new(Metrics::new()),
        })
    }

    /// The pages of a job already serving (tests, tools).
    pub fn serving(shared: Arc<Shared>) -> Arc<Live> {
        let job_id = shared.state().job_id().to_string();
        let live = Live::new(&job_id, &shared.output, Phase::Serving);
        live.attach(shared);
        live
    }

    /// The event metrics, for the job's [`Shared`] to count into.
    pub fn event_metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }

    pub fn set_phase(&self, phase: Phase) {
        let mut p = self.phase.lock().unwrap_or_else(|p| p.into_inner());
        if p.0 != phase {
            tracing::info!(
                phase = phase.as_str(),
                after = ?p.0,
                seconds = p.1.elapsed().as_secs_f64(),
                "coordinator phase"
            );
            *p = (phase, Instant::now());
        }
    }

    /// The phase and how long it has lasted.
    pub fn phase(&self) -> (Phase, Duration) {
        let p = self.phase.lock().unwrap_or_else(|p| p.into_inner());
        (p.0, p.1.elapsed())
    }

    /// The job's state is open and its servers are about to take workers.
    pub fn attach(&self, shared: Arc<Shared>) {
        let _ = self.shared.set(shared);
        self.set_phase(Phase::Serving);
    }

    pub fn shared(&self) -> Option<&Arc<Shared>> {
        self.shared.get()
    }

    /// The job's status; before its state is open, nothing planned yet.
    pub fn status(&self) -> pb::JobStatusResponse {
        match self.shared.get() {
            Some(s) => s.status(),
            None => pb::JobStatusResponse {
                job_id: self.job_id.clone(),
                output_url: self.output.clone(),
                eta_seconds: -1.0,
                ..Default::default()
            },
        }
    }
}

impl JobView for Live {
    fn metrics(&self) -> &Metrics {
        // The same registry once `run` has handed it to the state.
        self.shared.get().map_or(&self.metrics, |s| &s.metrics)
    }

    fn snapshot(&self) -> Snapshot {
        let (phase, since) = self.phase();
        match self.shared.get() {
            Some(s) => {
                let status = s.status();
                let leases_expired = s.state().leases_expired();
                // `status` has just forgotten silent workers, so only live
                // ones (and those told `done`, until they expire) are shown.
                let workers = s.workers.figures();
                Snapshot {
                    phase,
                    phase_seconds: since.as_secs_f64(),
                    status,
                    leases_expired,
                    workers,
                }
            }
            None => Snapshot {
                phase,
                phase_seconds: since.as_secs_f64(),
                status: self.status(),
                leases_expired: 0,
                workers: Vec::new(),
            },
        }
    }
}
