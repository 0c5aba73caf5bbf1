//! The worker's own figures (sentences, tokens, model batch durations),
//! counted for the life of the process and sent whole with every heartbeat
//! and completion, so that a lost report costs nothing but a delay.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use paraforge_rpc::proto::{WorkerMetrics, BATCH_SECONDS_BOUNDS};

/// Running totals of the model's work in this worker. Shared by the shard
/// being translated and the tasks that report it.
#[derive(Debug)]
pub struct Throughput {
    started: Instant,
    sentences: AtomicU64,
    source_tokens: AtomicU64,
    output_tokens: AtomicU64,
    batches: AtomicU64,
    /// Nanoseconds, so that the total stays an atomic integer.
    batch_nanos: AtomicU64,
    /// One per bound of [`BATCH_SECONDS_BOUNDS`], and one for slower batches.
    buckets: [AtomicU64; BATCH_SECONDS_BOUNDS.len() + 1],
}

impl Default for Throughput {
    fn default() -> Self {
        Throughput {
            started: Instant::now(),
            sentences: AtomicU64::new(0),
            source_tokens: AtomicU64::new(0),
            output_tokens: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            batch_nanos: AtomicU64::new(0),
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

impl Throughput {
    /// One model batch of `sentences` that took `took`.
    pub fn batch(&self, sentences: usize, took: Duration) {
        self.sentences
            .fetch_add(sentences as u64, Ordering::Relaxed);
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.batch_nanos.fetch_add(
            u64::try_from(took.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        let secs = took.as_secs_f64();
        let i = BATCH_SECONDS_BOUNDS
            .iter()
            .position(|&b| secs <= b)
            .unwrap_or(BATCH_SECONDS_BOUNDS.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
    }

    /// Tokens read and generated (known once a chunk's translations are back).
    pub fn tokens(&self, source: u64, output: u64) {
        self.source_tokens.fetch_add(source, Ordering::Relaxed);
        self.output_tokens.fetch_add(output, Ordering::Relaxed);
    }

    /// The totals so far, as the protocol carries them.
    pub fn report(&self) -> WorkerMetrics {
        WorkerMetrics {
            uptime_ms: u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            sentences: self.sentences.load(Ordering::Relaxed),
            source_tokens: self.source_tokens.load(Ordering::Relaxed),
            output_tokens: self.output_tokens.load(Ordering::Relaxed),
            batches: self.batches.load(Ordering::Relaxed),
            batch_seconds: self.batch_nanos.load(Ordering::Relaxed) as f64 * 1e-9,
            batch_buckets: self
                .buckets
                .iter()
                .map(|b| b.load(Ordering::Relaxed))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_land_in_the_bucket_of_their_duration() {
        let t = Throughput::default();
        t.batch(16, Duration::from_millis(5));
        t.batch(16, Duration::from_millis(10));
        t.batch(3, Duration::from_millis(700));
        t.batch(1, Duration::from_secs(100));
        t.tokens(40, 50);
        let r = t.report();
        assert_eq!((r.sentences, r.batches), (36, 4));
        assert_eq!((r.source_tokens, r.output_tokens), (40, 50));
        assert_eq!(r.batch_buckets.len(), BATCH_SECONDS_BOUNDS.len() + 1);
        // 5 ms and 10 ms are both at most 0.01 s; 0.7 s is in (0.5, 1].
        assert_eq!(r.batch_buckets[0], 2);
        assert_eq!(r.batch_buckets[6], 1);
        assert_eq!(*r.batch_buckets.last().unwrap(), 1, "over the last bound");
        assert!(
            (r.batch_seconds - 100.715).abs() < 1e-6,
            "{}",
            r.batch_seconds
        );
    }
}
