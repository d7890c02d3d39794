//! Scheduling cycles that write nothing: what `phalanx explain` and `phalanx simulate` run.
//!
//! A dry run builds the same [`Driver`] the scheduler runs, over a [`Store`] (usually
//! [`Store::from_state`](phalanx_store::Store::from_state), a fixed list of the cluster's objects), with leadership
//! held false, so no bind, eviction, condition or event can be written (every write checks leadership first). It
//! feeds the queue from the store exactly as a scheduler does at start (`resync`), then pops every ready entity in
//! queue order and runs the same cycle as `Driver::cycle` (members of another scheduler first, then snapshot and
//! `Scheduler::schedule`). Each placement is assumed in the store, so later entities see it, as after a real bind;
//! preemption victims are reported, not evicted, so later entities still see them.

use phalanx_scheduler::{Decision, EntityKey, Gate, NodeInfo, QueuedEntity};
use phalanx_store::{Leader, Store};
use prometheus_client::registry::Registry;

use crate::{NodeFilter, SchedulerOptions, SchedulingError, metrics::Metrics, runtime::Driver};

/// One cycle of a dry run.
#[derive(Debug, Clone)]
pub struct Attempt {
    /// The entity as the queue handed it out (its group or tree, and its pending pods in queue order).
    pub entity: QueuedEntity,
    /// What the core decided (bindings are the placement; nothing was written).
    pub decision: Decision,
    /// The considered nodes as the cycle's snapshot held them before the core ran (allocatable, requested, the pods
    /// on each); empty when the driver decided without the core (a member of another scheduler).
    pub nodes: Vec<NodeInfo>,
    /// The claims, volumes and classes the cycle's volume plugins read.
    pub volumes: std::sync::Arc<phalanx_scheduler::volumes::VolumeCatalog>,
    /// The devices, classes and resource claims DynamicResources read.
    pub devices: std::sync::Arc<phalanx_scheduler::dra::DeviceCatalog>,
}

/// Everything a dry run found.
#[derive(Debug, Clone, Default)]
pub struct DryRun {
    /// Cycles in the order they ran.
    pub attempts: Vec<Attempt>,
    /// Entities the queue holds before scheduling (PreEnqueue gates: waiting for the group object, for quorum, ...),
    /// with the gate's messages.
    pub gated: Vec<(EntityKey, Gate)>,
}

impl DryRun {
    /// The attempt of `entity`, if it ran.
    pub fn attempt(&self, entity: &EntityKey) -> Option<&Attempt> {
        self.attempts.iter().find(|a| a.decision.entity == *entity)
    }

    /// The gate holding `entity`, if any.
    pub fn gate(&self, entity: &EntityKey) -> Option<&Gate> {
        self.gated.iter().find(|(k, _)| k == entity).map(|(_, g)| g)
    }
}

/// Upper bound on cycles per dry run: every entity runs once; this guards against an entity that requeues itself
/// at once for ever.
const MAX_CYCLES: usize = 100_000;

/// Runs one cycle per ready entity of `store` with the scheduler's options `opts` and writes nothing.
///
/// `client` is only held, never called (leadership is false); a dry run over a file can pass a client for an
/// unreachable server. `progress` is called after each cycle with (cycles done, entities ready at start).
/// Must run inside a tokio runtime (the driver owns a task set). Errors: an invalid `node_selector` or configuration,
/// as [`crate::run`].
pub fn dry_run(
    client: kube::Client,
    store: Store,
    opts: SchedulerOptions,
    progress: impl FnMut(usize, usize),
) -> Result<DryRun, SchedulingError> {
    let filter = NodeFilter::parse(opts.node_selector.as_deref().unwrap_or_default())?;
    opts.config
        .validate()
        .map_err(|e| SchedulingError::Config(e.to_string()))?;
    let (_never, rx) = tokio::sync::watch::channel(false);
    let metrics = Metrics::register(&mut Registry::default());
    let d = Driver::new(client, store, opts, filter, Leader::from(rx), metrics);
    Ok(d.dry_run(MAX_CYCLES, progress))
}
