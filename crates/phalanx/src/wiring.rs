//! The calls into the other Phalanx crates, in one place: the store, the scheduling driver and the controllers.
//!
//! Kept apart from [`crate::operator`] so that the process plumbing (leases, probes, shutdown) does not change when
//! a component's options grow.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use kube::Client;
use phalanx_store::{Store, StoreConfig};
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use crate::options::RunOptions;

/// A component's main loop, ready to spawn.
pub type Task = Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send + 'static>>;

/// Checks options that the components would only reject after startup, so `phalanx run` fails before it touches
/// the cluster.
///
/// # Errors
/// `--node-selector` is not a label selector (the driver's `NodeFilter` grammar, kubectl `-l` syntax).
pub fn validate(opts: &RunOptions) -> anyhow::Result<()> {
    phalanx_driver::NodeFilter::parse(&opts.node_selector)
        .map_err(|e| anyhow::anyhow!("--node-selector: {e}"))?;
    Ok(())
}

/// Starts the reflector-fed caches (nodes, pods, groups, priority classes, PDBs).
pub fn start_store(client: &Client) -> Store {
    Store::start(client.clone(), StoreConfig::default())
}

/// Waits until every cache has synced.
pub async fn store_ready(store: &Store) {
    store.wait_ready().await;
}

/// The scheduling driver (queue, cycles, binder, status writer). Registers its metrics in `registry` before
/// returning.
pub fn scheduler(
    client: &Client,
    store: &Store,
    opts: &RunOptions,
    leader: phalanx_store::Leader,
    progress: phalanx_driver::Progress,
    shutdown: CancellationToken,
    registry: &mut Registry,
) -> anyhow::Result<Task> {
    let binder = &opts.config.binder;
    let sched_opts = phalanx_driver::SchedulerOptions {
        scheduler_name: opts.scheduler_name.clone(),
        bind_concurrency: opts.bind_concurrency as usize,
        bind_timeout: Duration::from_secs(binder.timeout_seconds),
        volume_bind_timeout: Duration::from_secs(binder.volume_bind_timeout_seconds),
        status_concurrency: binder.status_concurrency as usize,
        scheduled_events: binder.scheduled_events,
        node_selector: (!opts.node_selector.trim().is_empty()).then(|| opts.node_selector.clone()),
        instance: opts.instance.clone(),
        config: opts.config.scheduler.clone(),
        progress,
        // The controllers below run in this process and write it with their counters.
        initially_scheduled_by_controllers: true,
        preemption_delay: Duration::from_secs(u64::from(opts.config.autoscaling.preemption_delay_seconds)),
        provisioning_requests: opts.config.autoscaling.provisioning_requests,
        ..phalanx_driver::SchedulerOptions::default()
    };
    let fut = phalanx_driver::run(
        client.clone(),
        store.clone(),
        sched_opts,
        leader,
        shutdown,
        registry,
    );
    Ok(Box::pin(fut))
}

/// The reconcilers for Workload, PodGroup and CompositePodGroup. Registers their metrics in `registry`.
pub fn controllers(
    client: &Client,
    store: &Store,
    opts: &RunOptions,
    leader: phalanx_store::Leader,
    shutdown: CancellationToken,
    registry: &mut Registry,
) -> anyhow::Result<Task> {
    let c = &opts.config.controllers;
    let controller_opts = phalanx_controllers::ControllerOptions {
        instance: opts.instance.clone(),
        min_status_interval: Duration::from_millis(c.min_status_interval_ms),
        resync: Duration::from_secs(c.resync_seconds),
        concurrency: c.concurrency,
        max_backoff: Duration::from_secs(c.max_backoff_seconds),
        scheduler_names: vec![opts.scheduler_name.clone()],
        // The scheduler above runs in this process and leaves the condition to the PodGroup controller.
        initially_scheduled: true,
        members_wait_warning: opts.members_wait_warning,
        provisioning: opts.config.autoscaling.provisioning_requests.then(|| {
            phalanx_controllers::provisioning::ProvisioningOptions {
                class_name: opts.config.autoscaling.provisioning_class_name.clone(),
            }
        }),
    };
    let fut = phalanx_controllers::run_controllers(
        client.clone(),
        store.clone(),
        controller_opts,
        leader,
        shutdown,
        registry,
    );
    Ok(Box::pin(fut))
}

#[cfg(test)]
mod tests {
    use crate::config::PhalanxConfig;

    #[test]
    fn file_defaults_equal_component_defaults() {
        // The documented defaults in config/phalanx.yaml must be what the components would use without a file.
        let config = PhalanxConfig::default();
        let sched = phalanx_driver::SchedulerOptions::default();
        assert_eq!(config.binder.timeout_seconds, sched.bind_timeout.as_secs());
        assert_eq!(
            config.binder.status_concurrency as usize,
            sched.status_concurrency
        );
        assert_eq!(config.binder.scheduled_events, sched.scheduled_events);
        let ctrl = phalanx_controllers::ControllerOptions::default();
        assert_eq!(config.controllers.concurrency, ctrl.concurrency);
        assert_eq!(config.controllers.resync_seconds, ctrl.resync.as_secs());
        assert_eq!(config.controllers.max_backoff_seconds, ctrl.max_backoff.as_secs());
        assert_eq!(
            u128::from(config.controllers.min_status_interval_ms),
            ctrl.min_status_interval.as_millis()
        );
        // The flag's default (`--members-wait-warning`, cli.rs) is the controllers' too.
        let run = crate::options::RunOptions::default();
        assert_eq!(run.members_wait_warning, ctrl.members_wait_warning);
    }
}
