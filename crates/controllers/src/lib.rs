//! phalanx-controllers: the reconcilers of Phalanx's kinds. The scheduler's runtime lives in `phalanx-driver`.
//!
//! - One reconciler per kind: [`workload`], [`pod_group`], [`composite_pod_group`], and [`integrations`] for the
//!   owners (Jobs, StatefulSets, any custom resource) whose annotations ask for a gang. Each follows the pipeline
//!   validate -> build (pure) -> apply -> status, over the shared caches of phalanx-store, and writes only
//!   while this replica is the leader. Entry point: [`run_controllers`].
//!
//! What the controllers own (docs/controllers.md): cross-object validation beyond CEL (upstream's hand-written
//! Workload validation and the scheduler's runtime hierarchy checks), PriorityClass resolution (upstream's
//! Priority admission), the protection finalizers (upstream's PodGroupProtection admission + controller), the
//! `Valid` condition, status counters and events.

pub mod checks;
pub mod composite_pod_group;
pub mod context;
pub mod error;
pub mod group;
pub mod group_claims;
pub mod group_status;
pub mod integrations;
pub mod members_wait;
pub mod pod_group;
pub mod provisioning;
pub mod recovery;
pub mod satisfied;
pub mod scheduled;
pub mod status;
pub mod template_tree;
pub mod triggers;
pub mod workload;

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::channel::mpsc;
use kube::Client;
use kube::runtime::controller::{self, Action, applier};
use phalanx_store::Store;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use crate::context::{Context, Ctx, Metrics};
use crate::error::Error;

/// Options of the controllers.
#[derive(Clone, Debug)]
pub struct ControllerOptions {
    /// Reporting instance of events (usually the pod name); `None` = the controller name.
    pub instance: Option<String>,
    /// Minimum time between two status writes of one object, and before its first (batches counter updates, as the
    /// Job controller's `syncJobBatchPeriod` does). Default 1 s.
    pub min_status_interval: Duration,
    /// Safety re-check of every object even without a change. Default 5 min.
    pub resync: Duration,
    /// Parallel reconciles per controller. Default 16.
    pub concurrency: u16,
    /// Upper bound of the per-object error backoff. Default 2 min.
    pub max_backoff: Duration,
    /// The `spec.schedulerName`s the schedulers of this deployment answer to (an entry ending in `*` matches by
    /// prefix). A PodGroup with a pending member naming none of them is `Valid=False/PodsOfAnotherScheduler`
    /// ([`checks::foreign_members`]). Empty: no check. Default `["phalanx-scheduler"]`.
    pub scheduler_names: Vec<String>,
    /// Write `PodGroupInitiallyScheduled=True` of standalone PodGroups with the member counters, and let the first
    /// status of a group that only waits for its first schedule wait for it ([`scheduled`]). Set when the
    /// scheduler runs in the same process and leaves that condition to us; default false (the scheduler writes it).
    pub initially_scheduled: bool,
    /// How long a gang PodGroup still gathering its pods (fewer than `minCount` present, never scheduled) may see
    /// no new member before it gets one Warning event `WaitingForMembers` ([`members_wait`]). Zero: never.
    /// Default 5 min.
    pub members_wait_warning: Duration,
    /// Make Cluster Autoscaler ProvisioningRequests for the gangs that opt in ([`provisioning`];
    /// `autoscaling.provisioningRequests`). `None` (default): off, and ProvisioningRequests are not watched.
    pub provisioning: Option<provisioning::ProvisioningOptions>,
}

impl Default for ControllerOptions {
    fn default() -> Self {
        Self {
            instance: None,
            min_status_interval: Duration::from_secs(1),
            resync: Duration::from_secs(300),
            concurrency: 16,
            max_backoff: Duration::from_secs(120),
            scheduler_names: vec![phalanx_api::DEFAULT_SCHEDULER_NAME.to_string()],
            initially_scheduled: false,
            members_wait_warning: Duration::from_secs(300),
            provisioning: None,
        }
    }
}

/// Shared error policy: exponential backoff per object (`base * 2^(n-1)`, capped at `max_backoff`), so an
/// object that keeps failing is retried ever more slowly instead of in a hot loop.
pub(crate) fn error_action(controller: &str, uid: Option<&str>, err: &Error, ctx: &Context) -> Action {
    ctx.count_error(controller, err.kind().metric_label());
    let failures = uid.map_or(1, |u| ctx.note_failure(u));
    Action::requeue(error::backoff(
        err.kind().base_delay(),
        failures,
        ctx.opts.max_backoff,
    ))
}

/// Logs the outcome of one reconcile at a level that matches its cause: errors that heal on their own
/// (conflicts with our own stale cache, deleted objects, throttling) are debug/warn, anything else is error.
pub(crate) fn log_result<K: kube::Resource, QErr: std::error::Error>(
    controller: &'static str,
    res: Result<(kube::runtime::reflector::ObjectRef<K>, Action), controller::Error<Error, QErr>>,
) {
    match res {
        Ok(_) => {}
        // Triggered for an object deleted meanwhile: nothing to do.
        Err(controller::Error::ObjectNotFound(obj)) => {
            tracing::debug!(controller, %obj, "object gone before reconcile")
        }
        Err(controller::Error::ReconcilerFailed(e, obj)) if e.kind().is_transient() => {
            if e.kind().is_expected() {
                tracing::debug!(controller, %obj, error = %e, "reconcile retried");
            } else {
                tracing::warn!(controller, %obj, error = %e, "reconcile failed, retrying with backoff");
            }
        }
        Err(controller::Error::ReconcilerFailed(e, obj)) => {
            tracing::error!(controller, %obj, error = %e, "reconcile failed, retrying with backoff");
        }
        Err(e) => tracing::error!(controller, error = %e, "controller error"),
    }
}

/// Every 10 minutes, forgets the bookkeeping of objects that no longer exist.
async fn collect_garbage(ctx: Ctx, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_secs(600));
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let mut live = std::collections::HashSet::new();
        live.extend(
            ctx.store
                .pod_groups()
                .state()
                .iter()
                .filter_map(|o| o.metadata.uid.clone()),
        );
        live.extend(
            ctx.store
                .composite_pod_groups()
                .state()
                .iter()
                .filter_map(|o| o.metadata.uid.clone()),
        );
        live.extend(
            ctx.store
                .workloads()
                .state()
                .iter()
                .filter_map(|o| o.metadata.uid.clone()),
        );
        ctx.retain(&live);
    }
}

/// Runs the Workload, PodGroup and CompositePodGroup controllers and the owner integration until `shutdown` is cancelled.
///
/// Registers its metrics in `registry` synchronously (the returned future does not borrow it). Waits until
/// `leader` is true (nothing is written before) and the store is ready, then reconciles every object once and
/// afterwards whatever the store reports as changed (see [`triggers`]). Each controller runs at most
/// `opts.concurrency` reconciles at once and never two for the same object.
///
/// Errors: none in normal operation; reconcile failures are retried with backoff and logged, not returned.
pub fn run_controllers<L: Into<phalanx_store::Leader>>(
    client: Client,
    store: Store,
    opts: ControllerOptions,
    leader: L,
    shutdown: CancellationToken,
    registry: &mut Registry,
) -> impl Future<Output = anyhow::Result<()>> + Send + use<L> {
    let metrics = Metrics::register(registry);
    let leader: phalanx_store::Leader = leader.into();
    async move {
        let mut waiting = leader.receiver();
        tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            r = waiting.wait_for(|l| *l) => if r.is_err() { return Ok(()) },
        }
        tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            () = store.wait_ready() => {},
        }
        tracing::info!("controllers starting");
        let ctx: Ctx = Arc::new(Context::new(client, store.clone(), opts.clone(), leader, metrics));
        let (pg_tx, pg_rx) = mpsc::unbounded();
        let (cpg_tx, cpg_rx) = mpsc::unbounded();
        let (wl_tx, wl_rx) = mpsc::unbounded();
        let (prov_tx, prov_rx) = mpsc::unbounded();
        let queues = triggers::Queues {
            pod_groups: pg_tx,
            composites: cpg_tx,
            workloads: wl_tx,
            provisioning: opts.provisioning.is_some().then(|| prov_tx.clone()),
        };
        let provisioning_task = opts.provisioning.clone().map(|p| {
            tokio::spawn(provisioning::run(
                ctx.clone(),
                p,
                prov_rx,
                prov_tx,
                shutdown.clone(),
            ))
        });
        let trigger_task = tokio::spawn(triggers::run(store.clone(), queues, shutdown.clone()));
        let gc_task = tokio::spawn(collect_garbage(ctx.clone(), shutdown.clone()));
        let integration_task = tokio::spawn(integrations::run(ctx.clone(), shutdown.clone()));
        let cfg = controller::Config::default().concurrency(opts.concurrency);

        let pg = applier(
            |o, c| Box::pin(pod_group::reconcile(o, c)),
            pod_group::error_policy,
            ctx.clone(),
            store.pod_groups().clone(),
            pg_rx.map(Ok::<_, Infallible>),
            cfg.clone(),
        )
        .for_each(|r| async move { log_result(pod_group::CONTROLLER, r) });
        let cpg = applier(
            |o, c| Box::pin(composite_pod_group::reconcile(o, c)),
            composite_pod_group::error_policy,
            ctx.clone(),
            store.composite_pod_groups().clone(),
            cpg_rx.map(Ok::<_, Infallible>),
            cfg.clone(),
        )
        .for_each(|r| async move { log_result(composite_pod_group::CONTROLLER, r) });
        let wl = applier(
            |o, c| Box::pin(workload::reconcile(o, c)),
            workload::error_policy,
            ctx.clone(),
            store.workloads().clone(),
            wl_rx.map(Ok::<_, Infallible>),
            cfg,
        )
        .for_each(|r| async move { log_result(workload::CONTROLLER, r) });
        // When `shutdown` fires the trigger task returns and drops the queue senders; each applier then
        // finishes its running reconciles and ends.
        futures::join!(pg, cpg, wl);
        let _ = trigger_task.await;
        let _ = gc_task.await;
        let _ = integration_task.await;
        if let Some(t) = provisioning_task {
            let _ = t.await;
        }
        tracing::info!("controllers stopped");
        Ok(())
    }
}
