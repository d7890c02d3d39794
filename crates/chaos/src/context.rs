//! What every fault and run works with: the cluster, the replicas, the observer, the audit log, and the profile
//! (sizes, timings and repetitions of a suite).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::Client;
use rand::rngs::StdRng;

use crate::audit::AuditLog;
use crate::checker::Checker;
use crate::fault_kind::Fault;
use crate::harness::Cluster;
use crate::lease::SharedLeases;
use crate::processes::Supervisor;
use crate::proxy::Proxy;
use crate::workload::LoadConfig;

/// Sizes, timings and repetitions of one suite.
#[derive(Debug, Clone)]
pub struct Profile {
    /// `smoke` or `full`.
    pub name: &'static str,
    /// Fake nodes.
    pub nodes: usize,
    /// CPUs per node.
    pub node_cpu: &'static str,
    /// Memory per node.
    pub node_memory: &'static str,
    /// `--leader-elect-lease-duration` of the replicas.
    pub lease_duration_secs: u64,
    /// `--leader-elect-renew-grace` of the replicas.
    pub renew_grace_secs: u64,
    /// Runs per fault, in execution order.
    pub runs: Vec<(Fault, usize)>,
    /// The load of every run.
    pub load: LoadConfig,
    /// How long the load runs before the fault is injected.
    pub warmup: Duration,
    /// How long a killed etcd or API server stays down.
    pub outage: Duration,
    /// How long the admission policy denies every second bind.
    pub deny_for: Duration,
    /// I3: how long gangs may take to become whole or empty after the fault.
    pub recovery_limit: Duration,
    /// I4: how long a pending pod may take to get its reason.
    pub settle: Duration,
    /// `preempt-kill`: how long the victims stay Terminating after the standby took the Lease.
    pub preempt_hold: Duration,
}

impl Profile {
    /// The faults of [`Profile::smoke`]: every fault, once.
    pub const SMOKE_FAULTS: [Fault; 10] = [
        Fault::LeaderKill,
        Fault::LeaderTerm,
        Fault::LeaderPause,
        Fault::ApiServerKill,
        Fault::EtcdKill,
        Fault::WatchExpiry,
        Fault::AdmissionDeny,
        Fault::Hostile,
        Fault::PreemptKill,
        Fault::MemberKill,
    ];

    /// One run of each fault, sized to finish in a few minutes on 2 cores (the `make test` subset), with 20 s of
    /// denied binds instead of 60.
    pub fn smoke() -> Self {
        Self {
            name: "smoke",
            runs: Self::SMOKE_FAULTS.iter().map(|f| (*f, 1)).collect(),
            deny_for: Duration::from_secs(20),
            ..Self::full()
        }
    }

    /// The full suite (`make chaos`): 20 leader kills, every other fault 3 times, the admission policy for a
    /// minute, hostile objects once.
    pub fn full() -> Self {
        Self {
            name: "full",
            nodes: 6,
            node_cpu: "8",
            node_memory: "32Gi",
            lease_duration_secs: 6,
            renew_grace_secs: 2,
            runs: vec![
                (Fault::LeaderKill, 20),
                (Fault::LeaderTerm, 3),
                (Fault::LeaderPause, 3),
                (Fault::ApiServerKill, 3),
                (Fault::EtcdKill, 3),
                (Fault::WatchExpiry, 3),
                (Fault::AdmissionDeny, 1),
                (Fault::Hostile, 1),
                (Fault::PreemptKill, 3),
                (Fault::MemberKill, 3),
            ],
            load: LoadConfig {
                initial_gangs: 16,
                arrival: Duration::from_millis(700),
                churn: Duration::from_millis(1500),
            },
            warmup: Duration::from_secs(2),
            outage: Duration::from_secs(3),
            deny_for: Duration::from_secs(60),
            recovery_limit: Duration::from_secs(60),
            settle: Duration::from_secs(30),
            preempt_hold: Duration::from_secs(5),
        }
    }

    /// Keeps only the faults named in `only` (all when empty) and overrides the run count with `runs`.
    pub fn select(mut self, only: &[Fault], runs: Option<usize>) -> Self {
        if !only.is_empty() {
            self.runs.retain(|(f, _)| only.contains(f));
        }
        if let Some(n) = runs {
            for r in &mut self.runs {
                r.1 = n;
            }
        }
        self
    }
}

/// Everything a run needs.
pub struct Ctx {
    /// The control plane.
    pub cluster: Cluster,
    /// Admin client (harness and checker only; never a replica's identity).
    pub client: Client,
    /// The independent observer.
    pub checker: Arc<Checker>,
    /// The audit log.
    pub audit: AuditLog,
    /// The leader Lease's history.
    pub leases: SharedLeases,
    /// The replicas.
    pub replicas: Supervisor,
    /// The proxy between replicas and API server.
    pub proxy: Proxy,
    /// The profile.
    pub profile: Profile,
    /// Namespace of the leader Lease.
    pub lease_namespace: String,
    /// Name of the leader Lease.
    pub lease_name: String,
    /// `spec.schedulerName` of the suite's pods.
    pub scheduler_name: String,
    /// Seeded randomness (reproducible loads).
    pub rng: Mutex<StdRng>,
}

impl Ctx {
    /// The running replica that holds an unexpired Lease now, if any.
    pub fn leader(&self) -> Option<String> {
        let latest = self.leases.lock().ok()?.latest().cloned()?;
        let fresh = latest.expiry().is_some_and(|e| e > Timestamp::now());
        let holder = latest.holder?;
        (fresh && self.replicas.running().contains(&holder)).then_some(holder)
    }

    /// Waits for a leader and, when `warm_standby`, for the other replica to be Ready (caches synced), so a
    /// failover measures the election and not a cold start.
    ///
    /// # Errors
    /// Nothing within `timeout`.
    pub async fn wait_leader(
        &self,
        warm_standby: bool,
        timeout: Duration,
    ) -> anyhow::Result<(String, Option<String>)> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(leader) = self.leader() {
                let other = self.replicas.other_running(&leader);
                let ready = match (&other, warm_standby) {
                    (_, false) => true,
                    (Some(o), true) => self.replicas.ready(o).await,
                    (None, true) => false,
                };
                if ready {
                    return Ok((leader, other));
                }
            }
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "no leader (with a ready standby: {warm_standby}) within {timeout:?}; running: {:?}",
                self.replicas.running()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Polls the audit log until `probe` returns `Some`, at most `timeout`.
    pub async fn wait_audit<T>(
        &self,
        timeout: Duration,
        mut probe: impl FnMut(&AuditLog) -> Option<T>,
    ) -> Option<T> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let _ = self.audit.poll();
            if let Some(v) = probe(&self.audit) {
                return Some(v);
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Milliseconds between two timestamps (negative when `to` is earlier).
pub fn millis(from: Timestamp, to: Timestamp) -> i64 {
    i64::try_from(to.duration_since(from).as_millis()).unwrap_or(i64::MAX)
}
