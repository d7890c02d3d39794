//! Shared state of the three reconcilers: client, store, the one event Recorder, metrics, leader flag and the
//! bookkeeping that keeps status writes rare (last written status per object, write throttle, error backoff).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use phalanx_store::Store;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use crate::ControllerOptions;

/// Field manager of every write the controllers make (the scheduler uses `phalanx_api::field_managers::SCHEDULER`).
pub use phalanx_api::field_managers::CONTROLLER as FIELD_MANAGER;

type Labels = Vec<(String, String)>;

/// Prometheus metrics of the controllers (registered under the caller's registry prefix).
#[derive(Clone, Default)]
pub struct Metrics {
    /// `controller_reconciles_total{controller}`.
    pub reconciles: Family<Labels, Counter>,
    /// `controller_reconcile_errors_total{controller, error}`.
    pub errors: Family<Labels, Counter>,
    /// `controller_status_writes_total{controller}`: status patches actually sent.
    pub status_writes: Family<Labels, Counter>,
    /// `controller_events_total{controller, reason}`: events published.
    pub events: Family<Labels, Counter>,
}

impl Metrics {
    /// Creates the metrics and registers them (synchronously; the registry is not kept).
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "controller_reconciles",
            "Reconciles run, per controller",
            m.reconciles.clone(),
        );
        registry.register(
            "controller_reconcile_errors",
            "Failed reconciles, per controller and error class",
            m.errors.clone(),
        );
        registry.register(
            "controller_status_writes",
            "Status patches sent, per controller",
            m.status_writes.clone(),
        );
        registry.register(
            "controller_events",
            "Events published, per controller and reason",
            m.events.clone(),
        );
        m
    }
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect()
}

/// What we last wrote for one object, so that a cache that lags our own write does not cause a second
/// identical write or a duplicate event.
#[derive(Clone, Debug)]
pub struct Written {
    /// The status body last applied.
    pub status: serde_json::Value,
    /// When it was applied.
    pub at: Instant,
}

/// Per-object bookkeeping, keyed by object UID.
#[derive(Default)]
pub struct Bookkeeping {
    written: HashMap<String, Written>,
    /// When a status write of this UID was first wanted, for objects not written yet by this process: the first
    /// write waits one interval too, so the member pods created right after a group share its first write.
    first_wanted: HashMap<String, Instant>,
    failures: HashMap<String, u32>,
    /// Last user-visible state reported by an event, per UID and topic (so each change is reported once).
    reported: HashMap<(String, &'static str), String>,
}

/// Context handed to every reconcile.
pub struct Context {
    /// API client (used only while leader).
    pub client: Client,
    /// Shared caches.
    pub store: Store,
    /// The one Recorder of the process (its series cache aggregates repeated events).
    pub recorder: Recorder,
    /// Metrics handles.
    pub metrics: Metrics,
    /// True while this replica holds the Lease.
    pub leader: phalanx_store::Leader,
    /// Options.
    pub opts: ControllerOptions,
    book: Mutex<Bookkeeping>,
}

impl Context {
    /// Builds the context.
    pub fn new(
        client: Client,
        store: Store,
        opts: ControllerOptions,
        leader: phalanx_store::Leader,
        metrics: Metrics,
    ) -> Self {
        let reporter = Reporter {
            controller: FIELD_MANAGER.into(),
            instance: opts.instance.clone(),
        };
        let recorder = Recorder::new(client.clone(), reporter);
        Self {
            client,
            store,
            recorder,
            metrics,
            leader,
            opts,
            book: Mutex::new(Bookkeeping::default()),
        }
    }

    /// True while writes are allowed.
    pub fn is_leader(&self) -> bool {
        self.leader.is_leader()
    }

    fn book(&self) -> MutexGuard<'_, Bookkeeping> {
        self.book.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The status body last applied to `uid`, if any.
    pub fn last_written(&self, uid: &str) -> Option<Written> {
        self.book().written.get(uid).cloned()
    }

    /// Records an applied status.
    pub fn record_written(&self, uid: &str, status: serde_json::Value) {
        let mut b = self.book();
        b.first_wanted.remove(uid);
        b.written.insert(
            uid.to_string(),
            Written {
                status,
                at: Instant::now(),
            },
        );
    }

    /// How long to wait before the next status write of `uid` is allowed (zero = now): one
    /// `min_status_interval` after the previous write, or, before the first, after the first time a write was
    /// wanted. This batches the status writes of pod events as the Job controller batches its syncs
    /// (`syncJobBatchPeriod`, 1 s, `pkg/controller/job/job_controller.go`).
    pub fn write_delay(&self, uid: &str) -> Duration {
        let interval = self.opts.min_status_interval;
        let mut b = self.book();
        if let Some(w) = b.written.get(uid) {
            return interval.saturating_sub(w.at.elapsed());
        }
        let since = *b.first_wanted.entry(uid.to_string()).or_insert_with(Instant::now);
        interval.saturating_sub(since.elapsed())
    }

    /// Counts one failure of `uid` and returns the number of consecutive failures.
    pub fn note_failure(&self, uid: &str) -> u32 {
        let mut b = self.book();
        let n = b.failures.entry(uid.to_string()).or_insert(0);
        *n = n.saturating_add(1);
        *n
    }

    /// Resets the failure count of `uid` after a successful reconcile.
    pub fn note_success(&self, uid: &str) {
        self.book().failures.remove(uid);
    }

    /// Forgets everything about a deleted object.
    pub fn forget(&self, uid: &str) {
        let mut b = self.book();
        b.written.remove(uid);
        b.first_wanted.remove(uid);
        b.failures.remove(uid);
        b.reported.retain(|(u, _), _| u != uid);
    }

    /// Drops the bookkeeping of every object whose UID is not in `live` (objects deleted without passing
    /// through a finalizer path, e.g. Workloads).
    pub fn retain(&self, live: &std::collections::HashSet<String>) {
        let mut b = self.book();
        b.written.retain(|u, _| live.contains(u));
        b.first_wanted.retain(|u, _| live.contains(u));
        b.failures.retain(|u, _| live.contains(u));
        b.reported.retain(|(u, _), _| live.contains(u));
    }

    /// Records `state` as the last reported state of this UID and topic and returns `Some(previous)` if it
    /// differs from the previous one (`previous` is `None` the first time). `seed` initialises the memory from
    /// the object (e.g. its current condition), so a restart does not repeat events for visible states.
    pub fn transition(
        &self,
        uid: &str,
        topic: &'static str,
        state: &str,
        seed: Option<&str>,
    ) -> Option<Option<String>> {
        let mut b = self.book();
        let key = (uid.to_string(), topic);
        let last = b.reported.get(&key).cloned().or_else(|| seed.map(str::to_string));
        b.reported.insert(key, state.to_string());
        if last.as_deref() == Some(state) {
            None
        } else {
            Some(last)
        }
    }

    /// Publishes an event through the shared Recorder. A failure is logged at warn level and otherwise
    /// ignored: an event is never worth failing a reconcile for.
    pub async fn publish(
        &self,
        controller: &str,
        reference: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        if !self.is_leader() {
            return;
        }
        // events.k8s.io limits the note to 1 kB.
        let note = truncate(note, 1000);
        let ev = Event {
            type_,
            reason: reason.to_string(),
            note: Some(note),
            action: action.to_string(),
            secondary: None,
        };
        self.metrics
            .events
            .get_or_create(&labels(&[("controller", controller), ("reason", reason)]))
            .inc();
        if let Err(e) = self.recorder.publish(&ev, reference).await {
            tracing::warn!(reason, object = ?reference.name, error = %e, "publishing event failed");
        }
    }

    /// Counts a reconcile.
    pub fn count_reconcile(&self, controller: &str) {
        self.metrics
            .reconciles
            .get_or_create(&labels(&[("controller", controller)]))
            .inc();
    }

    /// Counts a failed reconcile.
    pub fn count_error(&self, controller: &str, error: &str) {
        self.metrics
            .errors
            .get_or_create(&labels(&[("controller", controller), ("error", error)]))
            .inc();
    }

    /// Counts a status write.
    pub fn count_status_write(&self, controller: &str) {
        self.metrics
            .status_writes
            .get_or_create(&labels(&[("controller", controller)]))
            .inc();
    }
}

/// Cuts `s` to at most `max` bytes on a character boundary.
pub fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

/// Shared handle.
pub type Ctx = Arc<Context>;

#[cfg(test)]
mod tests {
    use super::truncate;

    #[test]
    fn truncate_respects_char_boundaries() {
        assert_eq!(truncate("héllo".into(), 2), "h");
        assert_eq!(truncate("abc".into(), 5), "abc");
    }
}
