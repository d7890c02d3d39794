//! Shared state of the three reconcilers: client, store, the event recorders (one per note), metrics, leader flag and the
//! bookkeeping that keeps status writes rare (last written status per object, write throttle, error backoff).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Reporter};
use phalanx_store::NoteRecorders;
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
    /// When a status write of this UID was first wanted since its last write (see [`Context::write_delay`]);
    /// removed by a write or when nothing is wanted any more.
    first_wanted: HashMap<String, Instant>,
    failures: HashMap<String, u32>,
    /// Last user-visible state reported by an event, per UID and topic (so each change is reported once).
    reported: HashMap<(String, &'static str), String>,
}

impl Bookkeeping {
    /// Records that `status` was applied to `uid` at `now`; the next change starts a new batch.
    fn written_at(&mut self, uid: &str, status: serde_json::Value, now: Instant) {
        self.first_wanted.remove(uid);
        self.written.insert(uid.to_string(), Written { status, at: now });
    }

    /// The wait before the write `uid` wants at `now`: `interval` after the first time a write was wanted since
    /// the previous write (or since the start, before the first). A change thus waits one interval for the
    /// changes that follow it, as the Job controller batches the syncs of pod events (`syncJobBatchPeriod`, 1 s,
    /// `pkg/controller/job/job_controller.go`), and two writes of one object are at least one interval apart.
    /// Counting from the last write instead would write a group's `scheduledPods` at once and its `runningPods` a
    /// moment later: two writes for one start.
    fn write_delay(&mut self, uid: &str, interval: Duration, now: Instant) -> Duration {
        let since = *self.first_wanted.entry(uid.to_string()).or_insert(now);
        interval.saturating_sub(now.saturating_duration_since(since))
    }
}

/// Context handed to every reconcile.
pub struct Context {
    /// API client (used only while leader).
    pub client: Client,
    /// Shared caches.
    pub store: Store,
    /// Event recorders keyed by note (a repeated note aggregates into a series; a new note is a new event, as
    /// client-go's recorder does).
    pub recorders: NoteRecorders,
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
        let recorders = NoteRecorders::new(client.clone(), reporter);
        Self {
            client,
            store,
            recorders,
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
        self.book().written_at(uid, status, Instant::now());
    }

    /// How long to wait before the status write `uid` now wants is allowed (zero = now); see
    /// [`Bookkeeping::write_delay`].
    pub fn write_delay(&self, uid: &str) -> Duration {
        self.book()
            .write_delay(uid, self.opts.min_status_interval, Instant::now())
    }

    /// Notes that `uid` wants no write (the object shows the desired status): a later change starts a new batch.
    pub fn nothing_wanted(&self, uid: &str) {
        self.book().first_wanted.remove(uid);
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

    /// Publishes an event through the recorder of its note. A failure is logged at warn level and otherwise
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
        let recorder = self
            .recorders
            .for_event(reference, ev.note.as_deref().unwrap_or_default());
        if let Err(e) = recorder.publish(&ev, reference).await {
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
    use super::{Bookkeeping, truncate};
    use std::time::{Duration, Instant};

    #[test]
    fn a_change_waits_one_interval_from_when_it_was_first_wanted() {
        let second = Duration::from_secs(1);
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut b = Bookkeeping::default();
        // First write: batched from the first time it is wanted.
        assert_eq!(b.write_delay("u", second, at(0)), second);
        assert_eq!(b.write_delay("u", second, at(400)), Duration::from_millis(600));
        assert_eq!(b.write_delay("u", second, at(1000)), Duration::ZERO);
        b.written_at("u", serde_json::json!({}), at(1000));
        // A change 5 s after the write still waits a full interval (the old rule wrote it at once) ...
        assert_eq!(b.write_delay("u", second, at(6000)), second);
        assert_eq!(b.write_delay("u", second, at(6900)), Duration::from_millis(100));
        // ... and an object that wants nothing any more starts afresh.
        b.first_wanted.remove("u");
        assert_eq!(b.write_delay("u", second, at(7000)), second);
        // Other objects have their own batch.
        assert_eq!(b.write_delay("v", second, at(7500)), second);
        assert_eq!(b.write_delay("u", second, at(7500)), Duration::from_millis(500));
    }

    #[test]
    fn truncate_respects_char_boundaries() {
        assert_eq!(truncate("héllo".into(), 2), "h");
        assert_eq!(truncate("abc".into(), 5), "abc");
    }
}
