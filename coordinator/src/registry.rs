//! The workers the coordinator knows: registration (a bounded, printable
//! name and device; an id and a secret each), the secret checked on every
//! later call, workers silent for [`EXPIRE_AFTER_LEASES`] leases forgotten,
//! who has been answered `done`, and each worker's newest figures.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use paraforge_rpc::proto as pb;

use crate::bounded::truncate;
use crate::error::ServiceError;
use crate::metrics::{check_figures, WorkerFigures};

/// Longest worker name accepted at registration, in bytes.
pub const MAX_NAME_BYTES: usize = 128;
/// Longest device string accepted at registration, in bytes.
pub const MAX_DEVICE_BYTES: usize = 64;
/// A worker not heard from for this many leases is forgotten: it holds no
/// lease any more (a lease expires after one) and would otherwise stay in
/// every status answer for good.
pub const EXPIRE_AFTER_LEASES: u32 = 3;

/// A worker's secret; its `Debug` never shows it.
#[derive(Clone)]
struct Secret(String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Secret {
    /// 128 bits from the operating system's CSPRNG, as hex.
    fn generate() -> Result<Secret, ServiceError> {
        use rand::TryRngCore;
        let mut b = [0u8; 16];
        rand::rngs::OsRng
            .try_fill_bytes(&mut b)
            .map_err(|e| ServiceError::Entropy(e.to_string()))?;
        Ok(Secret(hex::encode(b)))
    }

    fn matches(&self, given: &str) -> bool {
        paraforge_rpc::access::ct_eq(given.as_bytes(), self.0.as_bytes())
    }
}

#[derive(Debug, Clone)]
pub struct WorkerInfo {
    pub id: String,
    pub name: String,
    pub device: String,
    pub last_seen_ms: u64,
    /// This worker has been answered `done` (it will stop on its own).
    pub told_done: bool,
    /// Its newest report of its own figures, for `/metrics`.
    pub figures: Option<pb::WorkerMetrics>,
    secret: Secret,
}

/// What a registration gives the worker.
#[derive(Debug)]
pub struct Registration {
    pub worker_id: String,
    /// The secret every later call of this worker must carry.
    pub worker_secret: String,
}

/// The registered workers by id.
#[derive(Debug)]
pub struct Registry {
    workers: Mutex<BTreeMap<String, WorkerInfo>>,
    registered: AtomicU64,
    lease: Duration,
}

impl Registry {
    /// Workers of a job whose leases last `lease`.
    pub fn new(lease: Duration) -> Registry {
        Registry {
            workers: Mutex::new(BTreeMap::new()),
            registered: AtomicU64::new(0),
            lease,
        }
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, WorkerInfo>> {
        self.workers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a worker of this coordinator's `version` at `now`; one
    /// that names no device is shown with `default_device`.
    pub fn register(
        &self,
        version: &str,
        name: &str,
        device: &str,
        default_device: &str,
        now: u64,
    ) -> Result<Registration, ServiceError> {
        let mine = env!("CARGO_PKG_VERSION");
        if version != mine {
            return Err(ServiceError::VersionMismatch {
                worker: truncate(version, 64),
                coordinator: mine.into(),
            });
        }
        check_label("worker name", name, MAX_NAME_BYTES)?;
        check_label("device", device, MAX_DEVICE_BYTES)?;
        let secret = Secret::generate()?;
        // The random part keeps ids apart across coordinator restarts, so a
        // worker registered before one never holds an id that a later
        // registration reuses.
        let salt = {
            use rand::TryRngCore;
            rand::rngs::OsRng
                .try_next_u32()
                .map_err(|e| ServiceError::Entropy(e.to_string()))?
        };
        let n = self.registered.fetch_add(1, Ordering::Relaxed) + 1;
        let id = format!("w{n}-{salt:08x}");
        {
            let mut ws = self.lock();
            self.expire(&mut ws, now);
            ws.insert(
                id.clone(),
                WorkerInfo {
                    id: id.clone(),
                    name: name.to_string(),
                    device: if device.is_empty() {
                        default_device.to_string()
                    } else {
                        device.to_string()
                    },
                    last_seen_ms: now,
                    told_done: false,
                    figures: None,
                    secret: secret.clone(),
                },
            );
        }
        tracing::info!(worker = %id, name = %name, "worker registered");
        Ok(Registration {
            worker_id: id,
            worker_secret: secret.0,
        })
    }

    /// The caller is `worker` only with its secret; a worker silent for too
    /// long is forgotten here too, not only when the status is asked.
    pub fn authenticate(&self, worker: &str, secret: &str, now: u64) -> Result<(), ServiceError> {
        let cutoff = self.expiry_cutoff(now);
        let mut ws = self.lock();
        match ws.get_mut(worker) {
            Some(w) if w.last_seen_ms < cutoff => {
                ws.remove(worker);
                tracing::info!(
                    worker,
                    "worker not heard from for {EXPIRE_AFTER_LEASES} leases; forgotten"
                );
                Err(ServiceError::UnknownWorker(worker.to_string()))
            }
            Some(w) if w.secret.matches(secret) => {
                w.last_seen_ms = now;
                Ok(())
            }
            Some(_) => {
                tracing::warn!(worker, "request refused: wrong worker secret");
                Err(ServiceError::WrongSecret(worker.to_string()))
            }
            None => Err(ServiceError::UnknownWorker(worker.to_string())),
        }
    }

    /// `worker` has been answered `done`.
    pub fn mark_told_done(&self, worker: &str) {
        if let Some(w) = self.lock().get_mut(worker) {
            w.told_done = true;
        }
    }

    /// Workers heard from within a lease before `now` that have not been
    /// told `done`.
    pub fn awaiting_done(&self, now: u64) -> usize {
        let cutoff = now.saturating_sub(self.lease.as_millis() as u64);
        self.lock()
            .values()
            .filter(|w| !w.told_done && w.last_seen_ms >= cutoff)
            .count()
    }

    /// Keeps `report` as `worker`'s figures if it is newer than the one
    /// held: a heartbeat and a completion can cross on the way.
    pub fn record_figures(&self, worker: &str, report: Option<pb::WorkerMetrics>) {
        let Some(report) = report else {
            return;
        };
        if let Err(e) = check_figures(&report) {
            tracing::warn!(worker, error = %e, "worker metrics ignored");
            return;
        }
        if let Some(w) = self.lock().get_mut(worker) {
            if w.figures
                .as_ref()
                .is_none_or(|old| old.uptime_ms <= report.uptime_ms)
            {
                w.figures = Some(report);
            }
        }
    }

    /// Forgets the silent workers, then lists the `max` heard from most
    /// recently (each with its leases, counted by `leases`), and how many
    /// there are in all.
    pub fn status(
        &self,
        now: u64,
        max: usize,
        leases: impl Fn(&str) -> u32,
    ) -> (Vec<pb::WorkerStatus>, u64) {
        let mut ws = self.lock();
        self.expire(&mut ws, now);
        let mut recent: Vec<&WorkerInfo> = ws.values().collect();
        recent.sort_by(|a, b| b.last_seen_ms.cmp(&a.last_seen_ms).then(a.id.cmp(&b.id)));
        let workers = recent
            .into_iter()
            .take(max)
            .map(|w| pb::WorkerStatus {
                worker_id: w.id.clone(),
                name: w.name.clone(),
                device: w.device.clone(),
                leases: leases(w.id.as_str()),
                last_heartbeat_unix_ms: w.last_seen_ms,
            })
            .collect();
        (workers, ws.len() as u64)
    }

    /// The newest figures of every worker not yet forgotten that sent any.
    pub fn figures(&self) -> Vec<WorkerFigures> {
        self.lock()
            .values()
            .filter_map(|w| {
                w.figures.as_ref().map(|r| WorkerFigures {
                    id: w.id.clone(),
                    device: w.device.clone(),
                    report: r.clone(),
                })
            })
            .collect()
    }

    /// Last contact before which a worker is forgotten.
    fn expiry_cutoff(&self, now: u64) -> u64 {
        now.saturating_sub(self.lease.as_millis() as u64 * EXPIRE_AFTER_LEASES as u64)
    }

    /// Forgets the workers not heard from for [`EXPIRE_AFTER_LEASES`] leases.
    fn expire(&self, ws: &mut BTreeMap<String, WorkerInfo>, now: u64) {
        let cutoff = self.expiry_cutoff(now);
        ws.retain(|id, w| {
            let keep = w.last_seen_ms >= cutoff;
            if !keep {
                tracing::info!(worker = %id, name = %w.name, "worker not heard from for {EXPIRE_AFTER_LEASES} leases; forgotten");
            }
            keep
        });
    }
}

/// A registration's name or device: bounded, and printable (it ends up in
/// logs and on terminals).
fn check_label(field: &'static str, value: &str, max: usize) -> Result<(), ServiceError> {
    if value.len() > max {
        return Err(ServiceError::TooLong {
            field,
            len: value.len(),
            max,
        });
    }
    if value.chars().any(char::is_control) {
        return Err(ServiceError::Invalid(format!(
            "{field} {value:?} has control characters"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_bounded_and_printable() {
        assert!(check_label("device", "cuda:0", MAX_DEVICE_BYTES).is_ok());
        assert!(check_label("device", "cuda\n0", MAX_DEVICE_BYTES).is_err());
    }
}
