//! phalanx-driver: the scheduler's runtime. It runs the pure core (`phalanx-scheduler`) against the cluster.
//!
//! Data path (one way): store watch events -> event handlers (`ingest`) -> the `Cache` and the
//! [`SchedulingQueue`](phalanx_scheduler::SchedulingQueue) -> pop an entity -> the cache's snapshot ->
//! `Scheduler::schedule` -> [`Decision`] -> the `ApiDispatcher`: binds in the background ([`binder`]), PreBind's
//! claim and volume writes, evictions, nominations, pod and group conditions and events ([`status`]) -> the API
//! server -> the store. This mirrors kube-scheduler's backend (`pkg/scheduler/backend/{cache,queue,api_dispatcher}`)
//! and `scheduleOne` / `scheduleOnePodGroup` (`pkg/scheduler/schedule_one*.go`) with the binding cycle run
//! asynchronously, and adds Phalanx's "no silent Pending": pods held before the queue get `PodScheduled=False` with
//! reason `WaitingForPodGroup` or `WaitingForQuorum`, and their PodGroup says the same.
//!
//! Only pods whose `spec.schedulerName` equals [`SchedulerOptions::scheduler_name`] are scheduled; every other pod on
//! a considered node only counts as usage. [`SchedulerOptions::node_selector`] restricts the nodes considered.
//! Nothing is written unless `leader` is true.
//!
//! Components, each the one owner of its state (docs/driver.md, "Components"): `cache` (the model of the cluster a
//! cycle reads), the core's queue, `preemption_tracker`, `dispatcher` (every API call), `ingest` (the event
//! handlers) and [`runtime`] (the loop that wires them, and the cycle). Beside them: [`dry_run`] (the same cycles
//! writing nothing, for explain/simulate), [`binder`] (`pods/binding` calls), [`evict`] (preemption victims),
//! [`status`] (the status writer), `writes` (per-object write serialisation), [`names`] (the core's enums as API
//! strings), [`convert`] (PodGroups and CompositePodGroups into the core's model), [`metrics`], [`node_filter`].
//!
//! [`Decision`]: phalanx_scheduler::Decision

pub mod binder;
mod cache;
pub mod convert;
mod dispatcher;
pub mod dry_run;
pub mod evict;
mod ingest;
mod members;
pub mod metrics;
pub mod names;
pub mod node_filter;
pub mod preemption_delay;
mod preemption_tracker;
pub mod progress;
mod resize;
pub mod runtime;
mod snapshot;
pub mod status;
mod writes;
mod written;

use std::{future::Future, time::Duration};

use phalanx_scheduler::SchedulerConfig;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

pub use binder::{BindOutcome, Binder};
pub use dry_run::{Attempt, DryRun, dry_run};
pub use evict::{EvictOutcome, Evictor};
pub use metrics::Metrics;
pub use node_filter::{NodeFilter, NodeFilterError};
pub use progress::Progress;
pub use status::{FIELD_MANAGER, StatusWriter};

/// Options of one scheduler instance.
#[derive(Clone, Debug)]
pub struct SchedulerOptions {
    /// `spec.schedulerName` this instance schedules (default `phalanx-scheduler`).
    pub scheduler_name: String,
    /// Maximum `pods/binding` calls in flight, and decisions whose PreBind writes device claims at once (default
    /// 16). kube-rs has no client-side rate limiter.
    pub bind_concurrency: usize,
    /// Timeout of one bind call (default 10 s); a timed-out bind is forgotten and the pod requeued.
    pub bind_timeout: Duration,
    /// How long PreBind waits for a gang's claims to be bound before it gives up and binds no pod of it
    /// (default 600 s, upstream VolumeBinding's `bindTimeoutSeconds`).
    pub volume_bind_timeout: Duration,
    /// Maximum status patches and events in flight (default 16).
    pub status_concurrency: usize,
    /// Emit a `Scheduled` event for every bound pod, as kube-scheduler does (default true).
    pub scheduled_events: bool,
    /// Label selector (kubectl `-l` syntax) restricting the nodes this instance considers; empty = all nodes.
    /// Partitions a cluster between scheduler instances.
    pub node_selector: Option<String>,
    /// Reporting instance for events (usually the pod name); defaults to the scheduler name.
    pub instance: Option<String>,
    /// Core configuration (plugin weights, backoff, flush interval, ...).
    pub config: SchedulerConfig,
    /// Beaten by the scheduling loop on every iteration (the liveness probe reads it).
    pub progress: Progress,
    /// Also build every cycle's snapshot from scratch and compare it with the one kept between cycles; a
    /// difference is logged, counted (`phalanx_scheduler_snapshot_mismatches_total`) and the fresh one is used.
    /// Costs a full build per cycle: on in debug builds (tests, the chaos suite), off in release builds.
    pub verify_snapshot: bool,
    /// How often the leader re-checks that every placed group shows `*InitiallyScheduled=True` and writes what is
    /// missing (default 30 s): the repair for a condition write that failed for good. Not in the configuration
    /// file; tests shorten it.
    pub condition_catch_up: Duration,
    /// Leave `PodGroupInitiallyScheduled=True` of standalone PodGroups to the PodGroup controller, which writes it
    /// with the member counters in one status apply once the quorum is bound (default false). `phalanx run` sets
    /// it, since its controllers run in the same process; the condition is still recorded here, so that no later
    /// False replaces it. Saves one group write per gang (kube-scheduler writes the condition alone; our status
    /// also carries counters, which change at the same binds). Groups in a CompositePodGroup tree keep the
    /// scheduler's write: their condition follows the tree's cycle, not their own members.
    pub initially_scheduled_by_controllers: bool,
    /// How long a root group that could preempt waits after its first unschedulable attempt before it evicts
    /// anything, when its spec does not say (`autoscaling.preemptionDelaySeconds` in the configuration file; default
    /// zero: at once, kube-scheduler's behaviour). See [`preemption_delay`].
    pub preemption_delay: Duration,
    /// Hold the gangs that opted in to a Cluster Autoscaler ProvisioningRequest until their PodGroup's
    /// `CapacityProvisioned` condition is True (`phalanx_api::provisioning::waits_for_capacity`; default false).
    /// Set from `autoscaling.provisioningRequests`; the controllers make the requests and write the condition.
    pub provisioning_requests: bool,
}

impl Default for SchedulerOptions {
    fn default() -> Self {
        Self {
            scheduler_name: phalanx_api::DEFAULT_SCHEDULER_NAME.to_owned(),
            bind_concurrency: 16,
            bind_timeout: Duration::from_secs(10),
            volume_bind_timeout: Duration::from_secs(600),
            status_concurrency: 16,
            scheduled_events: true,
            node_selector: None,
            instance: None,
            config: SchedulerConfig::default(),
            progress: Progress::default(),
            verify_snapshot: cfg!(debug_assertions),
            condition_catch_up: runtime::CONDITION_CATCH_UP,
            initially_scheduled_by_controllers: false,
            preemption_delay: Duration::ZERO,
            provisioning_requests: false,
        }
    }
}

/// Errors that stop the driver before it starts.
#[derive(Debug, thiserror::Error)]
pub enum SchedulingError {
    /// `node_selector` does not parse.
    #[error(transparent)]
    NodeSelector(#[from] NodeFilterError),
    /// The core configuration is invalid.
    #[error("invalid scheduler configuration: {0}")]
    Config(String),
}

/// Runs the scheduler until `shutdown` is cancelled.
///
/// Metrics are registered into `registry` synchronously, before the returned future starts, so the future is
/// `Send + 'static` and does not borrow the registry. The future waits for `store` to be ready, then keeps the queue
/// warm at all times but pops, binds and writes only while `leader` reads true. Errors: an invalid
/// `node_selector` or configuration (returned at once by the future).
pub fn run<L: Into<phalanx_store::Leader>>(
    client: kube::Client,
    store: phalanx_store::Store,
    opts: SchedulerOptions,
    leader: L,
    shutdown: CancellationToken,
    registry: &mut Registry,
) -> impl Future<Output = anyhow::Result<()>> + Send + use<L> {
    let metrics = Metrics::register(registry);
    let leader = leader.into();
    async move {
        let filter = NodeFilter::parse(opts.node_selector.as_deref().unwrap_or_default())
            .map_err(SchedulingError::from)?;
        opts.config
            .validate()
            .map_err(|e| SchedulingError::Config(e.to_string()))?;
        runtime::Driver::new(client, store, opts, filter, leader, metrics)
            .run(shutdown)
            .await
    }
}

/// Builds a client for the scheduler from `config` with kube's default retry policy off: that policy retries a
/// POST on 429/503/504 with up to 1000 s backoff (`kube::client::retry`), which would stall binds for minutes. The
/// driver bounds every call with its own timeout instead.
pub fn scheduler_client(mut config: kube::Config) -> Result<kube::Client, kube::Error> {
    config.default_retry = false;
    kube::Client::try_from(config)
}
