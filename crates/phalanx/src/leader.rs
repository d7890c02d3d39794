//! Leader election on a `coordination.k8s.io/v1` Lease (kube-lease-manager), fail-stop.
//!
//! One scheduler name, one leader: the Lease is named after the scheduler name (`--scheduler-name`) and lives in one
//! namespace shared by every installation ([`DEFAULT_LEASE_NAMESPACE`], `kube-system`), as kube-scheduler keys its
//! own (`leaderElection.resourceName`/`resourceNamespace` of `KubeSchedulerConfiguration`, default `kube-scheduler`
//! in `kube-system`, `pkg/scheduler/apis/config/v1/defaults.go`). Two Helm releases of one scheduler name therefore
//! contend for one Lease, whatever their release names and namespaces; were the Lease keyed by the release, each
//! would elect its own leader and both would bind the same pods.
//!
//! Every replica runs its watches and caches (warm standby); only the Lease holder schedules and writes. The
//! components receive a `watch::Receiver<bool>` that reads `true` only while this replica holds the Lease. When a
//! holder loses the Lease it does not try to drain: the receiver flips to `false` at once and the process exits
//! (kube-scheduler's `OnStoppedLeading` does the same, `cmd/kube-scheduler/app/server.go`), so two replicas never bind
//! at the same time. With leader election off the receiver is constant `true`.
//!
//! kube-lease-manager only learns of a loss at its next renewal, and not at all while the API server is unreachable,
//! so a guard re-reads the Lease every `grace / 2` seconds and declares it lost when another identity holds it, when
//! its term has ended, or when it could not be confirmed for `duration - grace` seconds (kube-scheduler's
//! renewDeadline). After a loss the lease manager is aborted rather than allowed to "release" a Lease that now
//! belongs to someone else.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::{Api, Client};
use kube_lease_manager::LeaseManagerBuilder;
use phalanx_store::{Leader, LeaderFence};
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Namespace of the Lease unless `--leader-elect-lease-namespace` says otherwise: one namespace that every
/// installation of a scheduler name shares, the one kube-scheduler keeps its Lease in.
pub const DEFAULT_LEASE_NAMESPACE: &str = "kube-system";

/// Leader election settings (from `phalanx run --leader-elect*`).
#[derive(Debug, Clone)]
pub struct LeaderConfig {
    /// Off: this process is always the leader (single replica, or the quick start).
    pub enabled: bool,
    /// Lease name; `None` = the scheduler name, so that every replica and every installation of one scheduler name
    /// elects one leader (see [`LeaderConfig::lease_for`]).
    pub lease_name: Option<String>,
    /// Lease namespace; `None` = [`DEFAULT_LEASE_NAMESPACE`].
    pub namespace: Option<String>,
    /// Holder identity; `None` = `$POD_NAME`, else host name and process id.
    pub identity: Option<String>,
    /// Seconds a holder keeps the Lease without renewing.
    pub lease_duration_secs: u64,
    /// Seconds before expiry at which the holder renews.
    pub grace_secs: u64,
}

impl Default for LeaderConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            lease_name: None,
            namespace: None,
            identity: None,
            lease_duration_secs: 15,
            grace_secs: 5,
        }
    }
}

impl LeaderConfig {
    /// The Lease this replica of scheduler `scheduler_name` contends for: (namespace, name). The name is
    /// `lease_name` when set, else the scheduler name (a DNS subdomain, as pod `spec.schedulerName` must be, so a
    /// valid object name); the namespace is `namespace` when set, else [`DEFAULT_LEASE_NAMESPACE`].
    pub fn lease_for(&self, scheduler_name: &str) -> (String, String) {
        (
            self.namespace
                .clone()
                .unwrap_or_else(|| DEFAULT_LEASE_NAMESPACE.to_owned()),
            self.lease_name
                .clone()
                .unwrap_or_else(|| scheduler_name.to_owned()),
        )
    }
}

/// What the caller does when the Lease is lost after having been held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnLeaseLost {
    /// Exit the process with status 1 right away (the binary).
    ExitProcess,
    /// Cancel the shutdown token and let [`Leadership::lost`] report it (in-process tests).
    Cancel,
}

/// A running election: the leadership handed to the components, and the background tasks.
pub struct Leadership {
    /// `true` while this replica holds the Lease (the flag; components should use [`Leadership::leader`]).
    pub receiver: watch::Receiver<bool>,
    /// The flag with its fencing deadline, for the components: writes are allowed only while it holds.
    pub leader: Leader,
    sender: Option<watch::Sender<bool>>,
    lost: watch::Receiver<bool>,
    lease_task: Option<JoinHandle<()>>,
    monitor: Option<JoinHandle<()>>,
}

impl Leadership {
    /// Whether the Lease was lost after being held (the operator then returns an error).
    pub fn lost(&self) -> bool {
        *self.lost.borrow()
    }

    /// Releases the Lease (if held), so a replica that starts next finds it free; a running standby takes it when
    /// the released term would have ended (kube-lease-manager sleeps until then). Call after every writer has
    /// stopped. Waits at most `timeout`. A Lease held by another identity is left alone.
    pub async fn release(mut self, timeout: Duration) {
        if let Some(m) = self.monitor.take() {
            m.abort();
        }
        // kube-lease-manager releases the Lease when every receiver of its channel is gone; the monitor held the
        // last one.
        drop(self.receiver);
        drop(self.sender.take());
        if let Some(task) = self.lease_task.take()
            && tokio::time::timeout(timeout, task).await.is_err()
        {
            tracing::warn!(
                "releasing the Lease took longer than {timeout:?}; a standby takes over at expiry"
            );
        }
    }
}

fn default_identity() -> String {
    if let Ok(pod) = std::env::var("POD_NAME")
        && !pod.is_empty()
    {
        return pod;
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "phalanx".into());
    format!("{host}-{}", std::process::id())
}

/// Starts leader election for scheduler `scheduler_name` on the Lease [`LeaderConfig::lease_for`] names (or a
/// constant `true` channel when disabled) and a monitor that applies `on_lost` when a held Lease is lost. `gauge`
/// is set to 1 while leading.
///
/// # Errors
/// The Lease could not be read or created (RBAC: `leases` get/create/patch in the Lease namespace).
pub async fn start(
    client: Client,
    config: &LeaderConfig,
    scheduler_name: &str,
    shutdown: CancellationToken,
    on_lost: OnLeaseLost,
    gauge: Gauge,
) -> anyhow::Result<Leadership> {
    let (lost_tx, lost_rx) = watch::channel(false);
    if !config.enabled {
        let (tx, rx) = watch::channel(true);
        gauge.set(1);
        // The sender stays in `Leadership` until `release`, so receivers never see a closed channel.
        return Ok(Leadership {
            leader: Leader::from(rx.clone()),
            receiver: rx,
            sender: Some(tx),
            lost: lost_rx,
            lease_task: None,
            monitor: None,
        });
    }

    let (namespace, lease_name) = config.lease_for(scheduler_name);
    let identity = config.identity.clone().unwrap_or_else(default_identity);
    if config.grace_secs >= config.lease_duration_secs {
        anyhow::bail!(
            "--leader-elect-renew-grace ({}) must be smaller than --leader-elect-lease-duration ({})",
            config.grace_secs,
            config.lease_duration_secs
        );
    }
    // Its writes carry the resourceVersion it last read, as client-go's do, and it renews a term only while half
    // the grace is left of it, where the write fence of the components ends too (see `lease_precondition`).
    let lease_client = crate::lease_precondition::client(
        client.clone(),
        &namespace,
        &lease_name,
        &identity,
        Duration::from_millis(config.grace_secs * 500),
    );
    let manager = LeaseManagerBuilder::new(lease_client, &lease_name)
        .with_namespace(&namespace)
        .with_identity(&identity)
        .with_duration(config.lease_duration_secs)
        .with_grace(config.grace_secs)
        .with_field_manager(format!("phalanx-leader-{identity}"))
        .build()
        .await
        .map_err(|e| anyhow::anyhow!("leader election: cannot use Lease {namespace}/{lease_name}: {e}"))?;
    tracing::info!(lease = %lease_name, %namespace, %identity, "leader election started; waiting for the Lease");
    let (mut rx, handle) = manager.watch().await;
    // After a loss the lease manager's view is stale: if it "released" the Lease it would clear the new holder's
    // record. So on loss it is aborted, never allowed to release.
    let manager_abort = handle.abort_handle();
    let lease_task = tokio::spawn(async move {
        match handle.await {
            Err(e) if e.is_cancelled() => {
                tracing::info!("leader election stopped without touching the lost Lease")
            }
            Ok(Ok(_)) => {
                tracing::info!("leader election stopped (the Lease was released if this replica held it)")
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "lease manager stopped"),
            Err(e) => tracing::warn!(error = %e, "lease manager task failed"),
        }
    });

    // Components read our own channel, not the lease manager's: the guard below can then force it to `false`
    // before the process stops, even when the lease manager still believes it holds the Lease.
    let (tx, receiver) = watch::channel(false);
    let (leader, fence) = Leader::fenced(receiver.clone());
    // Kept until `release`, so components never see a closed channel while they drain.
    let keep_sender = tx.clone();
    let guard = LeaseGuard {
        leases: Api::namespaced(client, &namespace),
        name: lease_name,
        identity,
        // kube-scheduler's renewDeadline plays this role (10 s with a 15 s lease): past it, another replica may
        // already have taken over, so this one must not write any more.
        deadline: Duration::from_secs(config.lease_duration_secs - config.grace_secs),
        interval: Duration::from_secs((config.grace_secs / 2).max(1)),
        // Writes stay allowed until the confirmed renewTime plus this, kept short of the term (renewTime +
        // leaseDurationSeconds, when another replica may take the Lease) by half the grace, for clock skew and
        // request latency. Renewals come every `duration - grace`, so consecutive windows overlap.
        valid_for: Duration::from_millis(config.lease_duration_secs * 1000 - config.grace_secs * 500),
        fence,
    };
    let monitor = tokio::spawn(async move {
        // Wait to become leader.
        loop {
            if *rx.borrow_and_update() {
                break;
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                changed = rx.changed() => if changed.is_err() { return },
            }
        }
        // Grant writes only once the Lease is read back as ours: the fence starts at its confirmed renewTime.
        let mut confirmed = Instant::now();
        loop {
            match guard.check().await {
                Ok(()) => break,
                Err(GuardError::Lost(why)) => {
                    tracing::warn!(reason = %why, "Lease not yet confirmed after acquiring it")
                }
                Err(GuardError::Unconfirmed(e)) => tracing::warn!(error = %e, "cannot confirm the Lease"),
            }
            if confirmed.elapsed() > guard.deadline {
                break;
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(guard.interval) => {}
            }
        }
        confirmed = Instant::now();
        gauge.set(1);
        let _ = tx.send(true);
        tracing::info!("acquired the Lease: this replica now schedules and writes");
        // Wait to lose it: the lease manager says so at its next renewal, or the guard sees another holder, an
        // expired Lease, or no confirmation within the deadline.
        let mut tick = tokio::time::interval(guard.interval);
        let why = loop {
            tokio::select! {
                _ = shutdown.cancelled() => {
                    guard.fence.revoke();
                    let _ = tx.send(false);
                    gauge.set(0);
                    // Keep the lease manager's receiver until `Leadership::release` aborts this task: dropping it
                    // now would release the Lease while binds and writes already sent are still in flight (the
                    // chaos suite saw a standby take over under them).
                    std::future::pending::<()>().await;
                }
                changed = rx.changed() => {
                    if changed.is_err() || !*rx.borrow_and_update() {
                        break "the lease manager reports it lost".to_owned();
                    }
                }
                _ = tick.tick() => match guard.check().await {
                    Ok(()) => confirmed = Instant::now(),
                    Err(GuardError::Lost(why)) => break why,
                    Err(GuardError::Unconfirmed(e)) => {
                        tracing::warn!(error = %e, "cannot confirm the Lease");
                        if confirmed.elapsed() > guard.deadline {
                            break format!("not confirmed for {:?} (last error: {e})", guard.deadline);
                        }
                    }
                },
            }
        };
        guard.fence.revoke();
        let _ = tx.send(false);
        gauge.set(0);
        manager_abort.abort();
        if shutdown.is_cancelled() {
            return;
        }
        tracing::error!(reason = %why, "lost the Lease: stopping at once (fail-stop) so that two replicas never bind together");
        let _ = lost_tx.send(true);
        match on_lost {
            OnLeaseLost::ExitProcess => std::process::exit(1),
            OnLeaseLost::Cancel => shutdown.cancel(),
        }
    });

    Ok(Leadership {
        receiver,
        leader,
        sender: Some(keep_sender),
        lost: lost_rx,
        lease_task: Some(lease_task),
        monitor: Some(monitor),
    })
}

/// Confirms, independently of the lease manager's cached state, that the Lease still names this replica and has
/// not expired.
struct LeaseGuard {
    leases: Api<Lease>,
    name: String,
    identity: String,
    deadline: Duration,
    interval: Duration,
    valid_for: Duration,
    fence: LeaderFence,
}

enum GuardError {
    /// The Lease names another holder or has expired.
    Lost(String),
    /// The Lease could not be read (API unreachable, throttled).
    Unconfirmed(String),
}

impl LeaseGuard {
    /// Reads the Lease (bounded by the check interval, so a hung API server cannot stall the guard) and, when it is
    /// still ours, moves the fence to its renewTime + `valid_for`, in this process's monotonic clock.
    async fn check(&self) -> Result<(), GuardError> {
        let lease = match tokio::time::timeout(self.interval, self.leases.get(&self.name)).await {
            Err(_) => {
                return Err(GuardError::Unconfirmed(format!(
                    "reading the Lease took over {:?}",
                    self.interval
                )));
            }
            Ok(r) => r.map_err(|e| GuardError::Unconfirmed(e.to_string()))?,
        };
        let now = Timestamp::now();
        held_by(&lease, &self.identity, now).map_err(GuardError::Lost)?;
        if let Some(renewed) = lease.spec.as_ref().and_then(|s| s.renew_time.as_ref()) {
            // Time left from now until renewTime + valid_for, by the wall clock that wrote renewTime (ours).
            let end_ms = renewed
                .0
                .as_millisecond()
                .saturating_add(self.valid_for.as_millis() as i64);
            let left_ms = end_ms.saturating_sub(now.as_millisecond()).max(0) as u64;
            self.fence
                .extend_until(Instant::now() + Duration::from_millis(left_ms));
        }
        Ok(())
    }
}

/// `Ok` when `lease` names `identity` and its term (renewTime + leaseDurationSeconds) has not ended at `now`;
/// otherwise why not.
fn held_by(lease: &Lease, identity: &str, now: Timestamp) -> Result<(), String> {
    let spec = lease.spec.as_ref().ok_or("the Lease has no spec")?;
    match spec.holder_identity.as_deref() {
        Some(h) if h == identity => {}
        Some(h) => return Err(format!("the Lease is now held by {h:?}")),
        None => return Err("the Lease has no holder".into()),
    }
    let (Some(renewed), Some(secs)) = (spec.renew_time.as_ref(), spec.lease_duration_seconds) else {
        return Err("the Lease has no renewTime or leaseDurationSeconds".into());
    };
    let expiry = renewed.0.as_second().saturating_add(i64::from(secs));
    if now.as_second() >= expiry {
        return Err(format!("the Lease expired {}s ago", now.as_second() - expiry));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    fn lease(holder: Option<&str>, renewed: i64, secs: i32) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_owned),
                renew_time: Some(MicroTime(Timestamp::from_second(renewed).expect("timestamp"))),
                lease_duration_seconds: Some(secs),
                ..LeaseSpec::default()
            }),
            ..Lease::default()
        }
    }

    #[test]
    fn guard_accepts_own_unexpired_lease_only() {
        let now = Timestamp::from_second(1_000).expect("timestamp");
        assert!(held_by(&lease(Some("me"), 990, 15), "me", now).is_ok());
        let other = held_by(&lease(Some("you"), 990, 15), "me", now).expect_err("another holder");
        assert!(other.contains("you"), "{other}");
        let expired = held_by(&lease(Some("me"), 980, 15), "me", now).expect_err("expired");
        assert!(expired.contains("expired 5s ago"), "{expired}");
        assert!(held_by(&lease(None, 990, 15), "me", now).is_err());
        assert!(held_by(&Lease::default(), "me", now).is_err());
    }

    #[test]
    fn lease_is_keyed_by_the_scheduler_name_not_by_the_installation() {
        // Two installations (any release, any namespace) of one scheduler name: one Lease.
        let config = LeaderConfig::default();
        assert_eq!(
            config.lease_for("phalanx-scheduler"),
            ("kube-system".to_owned(), "phalanx-scheduler".to_owned())
        );
        assert_eq!(
            config.lease_for("gpu-gang"),
            ("kube-system".to_owned(), "gpu-gang".to_owned())
        );
        // Explicit flags win (tests isolate their Leases per namespace).
        let explicit = LeaderConfig {
            lease_name: Some("l".into()),
            namespace: Some("ns".into()),
            ..LeaderConfig::default()
        };
        assert_eq!(
            explicit.lease_for("phalanx-scheduler"),
            ("ns".to_owned(), "l".to_owned())
        );
    }

    #[test]
    fn default_identity_is_not_empty_and_prefers_pod_name() {
        let id = default_identity();
        assert!(!id.is_empty());
        if std::env::var("POD_NAME").map(|p| p.is_empty()).unwrap_or(true) {
            assert!(id.ends_with(&format!("-{}", std::process::id())), "{id}");
        }
    }
}
