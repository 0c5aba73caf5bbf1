//! The coordinator's Prometheus metrics, served at `/metrics` in the
//! OpenMetrics text format by the prometheus-client crate.
//!
//! Two kinds: events counted as they happen ([`Metrics`]: RPC latency,
//! shard durations, refused completions, committed pairs), and figures read
//! at scrape time from the job state and the workers' latest reports, so
//! that they can never drift from what `/status` says. The page reads the
//! coordinator through one interface, [`JobView`].

use std::sync::Mutex;
use std::time::Instant;

use paraforge_rpc::proto::{self as pb, BATCH_SECONDS_BOUNDS};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, EncodeLabelSet, EncodeMetric,
    NoLabelSet,
};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

/// Every metric's name starts with this and an underscore.
const PREFIX: &str = "paraforge";

/// The gRPC methods, as the RPC latency's `method` label names them.
pub const RPC_METHODS: [&str; 6] = [
    "RegisterWorker",
    "LeaseShard",
    "Heartbeat",
    "CompleteShard",
    "FailShard",
    "JobStatus",
];

/// Upper bounds of the shard-duration buckets, in seconds: a shard takes
/// seconds on a GPU and up to hours on a few CPU cores.
const SHARD_SECONDS_BOUNDS: [f64; 14] = [
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0, 14400.0,
];

/// What can go wrong producing the metrics page.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("encoding the metrics: {0}")]
    Encode(#[from] std::fmt::Error),
}

/// Why a worker's report is not shown. The coordinator keeps the previous
/// one then: figures are advisory and must not cost the worker its lease.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FiguresError {
    #[error("{got} batch buckets; the protocol has {want}")]
    Buckets { got: usize, want: usize },
    #[error("batch_seconds {0} is not a finite number of seconds")]
    Seconds(f64),
    #[error("the batch buckets add up to {sum}, not to the {batches} batches reported")]
    Count { sum: u64, batches: u64 },
}

/// Checks a worker's report before its numbers become series.
pub fn check_figures(m: &pb::WorkerMetrics) -> Result<(), FiguresError> {
    let want = BATCH_SECONDS_BOUNDS.len() + 1;
    if m.batch_buckets.len() != want {
        return Err(FiguresError::Buckets {
            got: m.batch_buckets.len(),
            want,
        });
    }
    if !m.batch_seconds.is_finite() || m.batch_seconds < 0.0 {
        return Err(FiguresError::Seconds(m.batch_seconds));
    }
    let sum = m
        .batch_buckets
        .iter()
        .fold(0u64, |s, &n| s.saturating_add(n));
    if sum != m.batches {
        return Err(FiguresError::Count {
            sum,
            batches: m.batches,
        });
    }
    Ok(())
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MethodLabels {
    method: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

/// The event metrics, in one registry.
pub struct Metrics {
    registry: Registry,
    rpc_seconds: Family<MethodLabels, Histogram, fn() -> Histogram>,
    shard_seconds: Histogram,
    refused: Family<ReasonLabels, Counter>,
    pairs_committed: Counter,
    /// One scrape at a time: the page is a snapshot, not a blend of two.
    scrape: Mutex<()>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

fn rpc_histogram() -> Histogram {
    // 0.5 ms to about 12 s: a lease is microseconds, a completion reads
    // two files back from an object store.
    Histogram::new(exponential_buckets(0.0005, 2.5, 12))
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix(PREFIX);
        let rpc_seconds: Family<MethodLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(rpc_histogram);
        // Every method shows from the start, at zero, so a dashboard has
        // its series before the first call.
        for method in RPC_METHODS {
            let _ = rpc_seconds.get_or_create(&MethodLabels { method });
        }
        registry.register(
            "rpc_duration_seconds",
            "Seconds the coordinator took to answer a gRPC call, by method (errors included)",
            rpc_seconds.clone(),
        );
        let shard_seconds = Histogram::new(SHARD_SECONDS_BOUNDS);
        registry.register(
            "shard_duration_seconds",
            "Seconds from a shard's lease to its accepted completion",
            shard_seconds.clone(),
        );
        let refused = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "completions_refused",
            "Completions refused, by reason: superseded, not_leased, not_holder, already_committed, unknown_shard, or mismatch (its files do not back its claims)",
            refused.clone(),
        );
        let pairs_committed = Counter::default();
        registry.register(
            "pairs_committed",
            "Output rows in shards committed since this coordinator started",
            pairs_committed.clone(),
        );
        Metrics {
            registry,
            rpc_seconds,
            shard_seconds,
            refused,
            pairs_committed,
            scrape: Mutex::new(()),
        }
    }

    /// Times one gRPC call until the guard is dropped.
    pub fn rpc(&self, method: &'static str) -> RpcTimer<'_> {
        RpcTimer {
            metrics: self,
            method,
            start: Instant::now(),
        }
    }

    /// An accepted completion of `pairs` rows whose lease began at
    /// `leased_ms` (0: not known).
    pub fn committed(&self, pairs: u64, leased_ms: u64, now_ms: u64) {
        self.pairs_committed.inc_by(pairs);
        if leased_ms > 0 {
            self.shard_seconds
                .observe(now_ms.saturating_sub(leased_ms) as f64 / 1000.0);
        }
    }

    /// A refused completion; `reason` is a fixed code.
    pub fn refused(&self, reason: &'static str) {
        self.refused.get_or_create(&ReasonLabels { reason }).inc();
    }
}

/// Observes a call's latency when dropped, so every return path counts.
pub struct RpcTimer<'a> {
    metrics: &'a Metrics,
    method: &'static str,
    start: Instant,
}

impl Drop for RpcTimer<'_> {
    fn drop(&mut self) {
        self.metrics
            .rpc_seconds
            .get_or_create(&MethodLabels {
                method: self.method,
            })
            .observe(self.start.elapsed().as_secs_f64());
    }
}

/// A worker's latest report, as the page shows it.
#[derive(Debug, Clone)]
pub struct WorkerFigures {
    pub id: String,
    pub device: String,
    pub report: pb::WorkerMetrics,
}

/// What the job state and the workers say at one scrape.
#[derive(Debug)]
pub struct Snapshot {
    /// Where the coordinator is in the job's life, and for how long.
    pub phase: crate::phase::Phase,
    pub phase_seconds: f64,
    /// The job's status, as `/status` and `JobStatus` answer it.
    pub status: pb::JobStatusResponse,
    /// Leases that ran out since the coordinator started.
    pub leases_expired: u64,
    /// The newest figures of each live worker that sent any.
    pub workers: Vec<WorkerFigures>,
}

/// What the page reads of the coordinator: its event metrics, and the job
/// and workers as they are at the scrape.
pub trait JobView {
    fn metrics(&self) -> &Metrics;
    fn snapshot(&self) -> Snapshot;
}

fn gauge(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    v: impl EncodeGaugeValue,
) -> std::fmt::Result {
    let g = ConstGauge::new(v);
    g.encode(enc.encode_descriptor(name, help, None, g.metric_type())?)
}

/// One series per worker of a worker-labelled counter or gauge.
fn per_worker<V>(
    enc: &mut DescriptorEncoder,
    workers: &[WorkerFigures],
    name: &str,
    help: &str,
    kind: MetricType,
    value: impl Fn(&pb::WorkerMetrics) -> V,
) -> std::fmt::Result
where
    V: EncodeCounterValue + EncodeGaugeValue,
{
    if workers.is_empty() {
        return Ok(());
    }
    let mut m = enc.encode_descriptor(name, help, None, kind)?;
    for w in workers {
        let labels = [("worker", w.id.as_str()), ("device", w.device.as_str())];
        let v = value(&w.report);
        match kind {
            MetricType::Counter => ConstCounter::new(v).encode(m.encode_family(&labels)?)?,
            _ => ConstGauge::new(v).encode(m.encode_family(&labels)?)?,
        }
    }
    Ok(())
}

impl Collector for Snapshot {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        // Every phase has its series, 1 for the current one, so an alert
        // can say "planning for over an hour" without knowing the others.
        let mut m = enc.encode_descriptor(
            "phase",
            "1 for the coordinator's phase now: planning, resuming, serving, finalizing, reading_back.",
            None,
            MetricType::Gauge,
        )?;
        for p in crate::phase::Phase::ALL {
            ConstGauge::new(u64::from(p == self.phase))
                .encode(m.encode_family(&[("phase", p.as_str())])?)?;
        }
        gauge(
            &mut enc,
            "phase_seconds",
            "Seconds since the coordinator entered its phase now.",
            self.phase_seconds,
        )?;
        let s = &self.status;
        gauge(
            &mut enc,
            "shards_total",
            "Shards planned for the job.",
            s.shards_total,
        )?;
        gauge(
            &mut enc,
            "shards_committed",
            "Shards whose output is committed.",
            s.shards_committed,
        )?;
        gauge(
            &mut enc,
            "shards_leased",
            "Shards leased to a worker now.",
            s.shards_leased,
        )?;
        gauge(
            &mut enc,
            "shards_pending",
            "Shards waiting for a worker.",
            s.shards_pending,
        )?;
        gauge(
            &mut enc,
            "shards_failed",
            "Shards that ran out of attempts.",
            s.shards_failed,
        )?;
        gauge(
            &mut enc,
            "pairs_written",
            "Pairs in committed shards plus progress of leased ones.",
            s.pairs_written,
        )?;
        gauge(
            &mut enc,
            "rejects",
            "Input lines rejected in committed shards.",
            s.rejects,
        )?;
        gauge(
            &mut enc,
            "pairs_per_second",
            "Pairs per second since the coordinator started.",
            s.pairs_per_second,
        )?;
        gauge(
            &mut enc,
            "eta_seconds",
            "Estimated seconds to finish (-1 before the first commit).",
            s.eta_seconds,
        )?;
        gauge(
            &mut enc,
            "workers",
            "Registered workers (not yet forgotten).",
            s.workers_total,
        )?;
        gauge(
            &mut enc,
            "job_finished",
            "1 when every shard is committed or failed.",
            u64::from(s.finished),
        )?;
        // A gauge, not a counter: a committed shard whose files vanished is
        // taken back, and its rejects with it.
        let mut m = enc.encode_descriptor(
            "rejects_by_reason",
            "Input lines rejected in committed shards, by reason code (malformed lines and [filters] rules).",
            None,
            MetricType::Gauge,
        )?;
        let mut by: Vec<_> = s.rejects_by_reason.iter().collect();
        by.sort();
        for (code, n) in by {
            ConstGauge::new(*n).encode(m.encode_family(&[("reason", code.as_str())])?)?;
        }
        let c = ConstCounter::new(self.leases_expired);
        c.encode(enc.encode_descriptor(
            "lease_expiries",
            "Leases that ran out before their holder completed or failed the shard, since this coordinator started.",
            None,
            c.metric_type(),
        )?)?;
        self.encode_workers(&mut enc)
    }
}

impl Snapshot {
    /// The workers' own figures, labelled by worker id and device: running
    /// totals since each worker started (a worker that registers again
    /// starts new series under its new id).
    fn encode_workers(&self, enc: &mut DescriptorEncoder) -> std::fmt::Result {
        let w = &self.workers;
        per_worker(
            enc,
            w,
            "worker_sentences",
            "Source sentences the worker's model translated.",
            MetricType::Counter,
            |r| r.sentences,
        )?;
        per_worker(
            enc,
            w,
            "worker_source_tokens",
            "Source tokens the worker's model read.",
            MetricType::Counter,
            |r| r.source_tokens,
        )?;
        per_worker(
            enc,
            w,
            "worker_output_tokens",
            "Tokens of the best hypotheses the worker's model generated.",
            MetricType::Counter,
            |r| r.output_tokens,
        )?;
        let busy = |r: &pb::WorkerMetrics, n: u64| {
            if r.batch_seconds > 0.0 {
                n as f64 / r.batch_seconds
            } else {
                0.0
            }
        };
        per_worker(
            enc,
            w,
            "worker_sentences_per_second",
            "Sentences per second of model time since the worker started (rate() of worker_sentences_total gives the current rate).",
            MetricType::Gauge,
            |r| busy(r, r.sentences),
        )?;
        per_worker(
            enc,
            w,
            "worker_tokens_per_second",
            "Generated tokens per second of model time since the worker started.",
            MetricType::Gauge,
            |r| busy(r, r.output_tokens),
        )?;
        if w.is_empty() {
            return Ok(());
        }
        let mut m = enc.encode_descriptor(
            "worker_batch_duration_seconds",
            "Seconds per model batch on the worker.",
            None,
            MetricType::Histogram,
        )?;
        let bounds = BATCH_SECONDS_BOUNDS
            .iter()
            .copied()
            .chain(std::iter::once(f64::INFINITY));
        for f in w {
            let labels = [("worker", f.id.as_str()), ("device", f.device.as_str())];
            let buckets: Vec<(f64, u64)> = bounds
                .clone()
                .zip(f.report.batch_buckets.iter().copied())
                .collect();
            m.encode_family(&labels)?.encode_histogram::<NoLabelSet>(
                f.report.batch_seconds,
                f.report.batches,
                &buckets,
                None,
            )?;
        }
        Ok(())
    }
}

/// The page: the job and the workers as they are now, then the events.
pub fn render(job: &dyn JobView) -> Result<String, MetricsError> {
    let metrics = job.metrics();
    let _one = metrics.scrape.lock().unwrap_or_else(|p| p.into_inner());
    let mut now = Registry::with_prefix(PREFIX);
    now.register_collector(Box::new(job.snapshot()));
    let mut out = String::new();
    encode_registry(&mut out, &now)?;
    encode_registry(&mut out, &metrics.registry)?;
    encode_eof(&mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(buckets: Vec<u64>, batches: u64, secs: f64) -> pb::WorkerMetrics {
        pb::WorkerMetrics {
            batch_buckets: buckets,
            batches,
            batch_seconds: secs,
            ..Default::default()
        }
    }

    #[test]
    fn reports_that_cannot_be_histograms_are_refused() {
        let n = BATCH_SECONDS_BOUNDS.len() + 1;
        let mut b = vec![0; n];
        b[2] = 3;
        assert_eq!(check_figures(&report(b.clone(), 3, 0.1)), Ok(()));
        assert!(matches!(
            check_figures(&report(vec![1; n + 5], n as u64 + 5, 1.0)),
            Err(FiguresError::Buckets { .. })
        ));
        assert!(matches!(
            check_figures(&report(b.clone(), 4, 1.0)),
            Err(FiguresError::Count { sum: 3, batches: 4 })
        ));
        assert!(matches!(
            check_figures(&report(b, 3, f64::NAN)),
            Err(FiguresError::Seconds(_))
        ));
    }

    #[test]
    fn rpc_timers_and_commits_are_counted() {
        let m = Metrics::new();
        drop(m.rpc("LeaseShard"));
        m.committed(7, 1_000, 4_000);
        m.refused("superseded");
        let mut out = String::new();
        encode_registry(&mut out, &m.registry).unwrap();
        assert!(
            out.contains("paraforge_rpc_duration_seconds_count{method=\"LeaseShard\"} 1"),
            "{out}"
        );
        assert!(
            out.contains("paraforge_rpc_duration_seconds_count{method=\"Heartbeat\"} 0"),
            "{out}"
        );
        assert!(
            out.contains("paraforge_shard_duration_seconds_sum 3.0"),
            "{out}"
        );
        assert!(
            out.contains("paraforge_shard_duration_seconds_bucket{le=\"5.0\"} 1"),
            "{out}"
        );
        assert!(
            out.contains("paraforge_completions_refused_total{reason=\"superseded\"} 1"),
            "{out}"
        );
        assert!(out.contains("paraforge_pairs_committed_total 7"), "{out}");
    }
}
