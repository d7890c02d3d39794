//! Scheduler metrics, registered into the process registry (prefix given by the caller, `phalanx` in the binary).
//!
//! Names follow kube-scheduler's (`pkg/scheduler/metrics/metrics.go`): `scheduler_schedule_attempts_total{result}`,
//! `scheduler_scheduling_attempt_duration_seconds`, `scheduler_pending_entities{queue}` (upstream
//! `scheduler_pending_pods{queue}`, but Phalanx queues entities: pods and groups), `scheduler_binds_total{result}` and
//! `scheduler_binding_duration_seconds`, with `scheduler_` kept so dashboards read alike.

use prometheus_client::{
    metrics::{
        counter::Counter,
        family::Family,
        gauge::Gauge,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};

type Labels = Vec<(&'static str, String)>;

/// Handles to the scheduler's metrics. Cloning shares the same series.
#[derive(Clone)]
pub struct Metrics {
    attempts: Family<Labels, Counter>,
    cycle: Family<Labels, Histogram>,
    pending: Family<Labels, Gauge>,
    binds: Family<Labels, Counter>,
    bind_latency: Histogram,
    preemption_attempts: Family<Labels, Counter>,
    preemption_victims: Family<Labels, Counter>,
    preemption_latency: Histogram,
    snapshot_latency: Family<Labels, Histogram>,
    snapshot_mismatches: Counter,
    tracked: Family<Labels, Gauge>,
}

impl Metrics {
    /// Creates the metrics and registers them in `registry` (synchronously; nothing borrows the registry later).
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self {
            attempts: Family::default(),
            cycle: Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.0005, 2.0, 16))),
            pending: Family::default(),
            binds: Family::default(),
            bind_latency: Histogram::new(exponential_buckets(0.001, 2.0, 15)),
            preemption_attempts: Family::default(),
            preemption_victims: Family::default(),
            preemption_latency: Histogram::new(exponential_buckets(0.0005, 2.0, 16)),
            snapshot_latency: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.00001, 2.0, 20))
            }),
            snapshot_mismatches: Counter::default(),
            tracked: Family::default(),
        };
        registry.register(
            "scheduler_tracked_objects",
            "Objects the scheduling loop keeps state for, by kind (pods, nodes, groups, group_conditions, nominated, \
             preemptions_in_flight; binds_waiting: binds decided and waiting for a bind permit; tasks: background \
             binds and writes running); each falls back when its objects are deleted or its work is done",
            m.tracked.clone(),
        );
        registry.register(
            "scheduler_snapshot_duration_seconds",
            "Time to bring a cycle's snapshot up to date, by mode: incremental (only what changed since the last \
             cycle) or full (built from scratch: the first cycle, after a resync, or to verify)",
            m.snapshot_latency.clone(),
        );
        registry.register(
            "scheduler_snapshot_mismatches",
            "Cycles whose snapshot kept between cycles differed from one built from scratch (verification on)",
            m.snapshot_mismatches.clone(),
        );
        registry.register(
            "scheduler_schedule_attempts",
            "Scheduling attempts of entities (pods or pod groups) by result: scheduled, unschedulable, error, skipped",
            m.attempts.clone(),
        );
        registry.register(
            "scheduler_scheduling_attempt_duration_seconds",
            "Duration of one scheduling cycle (snapshot, algorithm, decision) by entity kind and result",
            m.cycle.clone(),
        );
        registry.register(
            "scheduler_pending_entities",
            "Entities waiting in the scheduling queue, by queue (active, backoff, unschedulable, gated)",
            m.pending.clone(),
        );
        registry.register("scheduler_binds", "pods/binding calls by result", m.binds.clone());
        registry.register(
            "scheduler_binding_duration_seconds",
            "Latency of one pods/binding call, including the wait for a concurrency permit",
            m.bind_latency.clone(),
        );
        registry.register(
            "scheduler_preemption_attempts",
            "PostFilter (preemption) attempts by result: success, ongoing (already in flight), delayed (would \
             evict, held by preemptionDelaySeconds), failed (upstream WorkloadPreemptionAttempts)",
            m.preemption_attempts.clone(),
        );
        registry.register(
            "scheduler_preemption_victims",
            "Pods evicted by preemption, by the victim unit's disruptionMode (all, single)",
            m.preemption_victims.clone(),
        );
        registry.register(
            "scheduler_preemption_attempt_duration_seconds",
            "Time spent in the PostFilter chain of one cycle",
            m.preemption_latency.clone(),
        );
        m
    }

    /// Records one PostFilter run with `result` (`success`, `ongoing`, `failed`) and its duration.
    pub fn preemption(&self, result: &'static str, seconds: f64) {
        self.preemption_attempts
            .get_or_create(&vec![("result", result.to_owned())])
            .inc();
        self.preemption_latency.observe(seconds);
    }

    /// Counts one victim pod by the `disruptionMode` of its unit (`all`, `single`).
    pub fn victim(&self, mode: &'static str) {
        self.preemption_victims
            .get_or_create(&vec![("mode", mode.to_owned())])
            .inc();
    }

    /// Counts one attempt with `result` (`scheduled`, `unschedulable`, `error`, `skipped`) and its duration.
    pub fn attempt(&self, kind: &'static str, result: &'static str, seconds: f64) {
        self.attempts
            .get_or_create(&vec![("result", result.to_owned())])
            .inc();
        self.cycle
            .get_or_create(&vec![("kind", kind.to_owned()), ("result", result.to_owned())])
            .observe(seconds);
    }

    /// Records how long a snapshot update took; `mode` is `incremental` or `full`.
    pub fn snapshot(&self, mode: &'static str, seconds: f64) {
        self.snapshot_latency
            .get_or_create(&vec![("mode", mode.to_owned())])
            .observe(seconds);
    }

    /// Counts one snapshot that differed from a fresh build.
    pub fn snapshot_mismatch(&self) {
        self.snapshot_mismatches.inc();
    }

    /// Sets the number of pending entities in `queue`.
    pub fn pending(&self, queue: &'static str, n: usize) {
        self.pending
            .get_or_create(&vec![("queue", queue.to_owned())])
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Sets the number of objects of `kind` the loop keeps state for.
    pub fn tracked(&self, kind: &'static str, n: usize) {
        self.tracked
            .get_or_create(&vec![("kind", kind.to_owned())])
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Records one bind call.
    pub fn bind(&self, result: &'static str, seconds: f64) {
        self.binds
            .get_or_create(&vec![("result", result.to_owned())])
            .inc();
        self.bind_latency.observe(seconds);
    }
}
