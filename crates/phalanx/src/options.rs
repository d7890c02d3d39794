//! What `phalanx run` is told: the options shared by the process plumbing ([`crate::operator`]) and the wiring of
//! store, controllers and scheduler (`wiring`). A module of its own so that neither of those two imports the other.

use std::net::SocketAddr;

use tokio::sync::oneshot;

use crate::config::PhalanxConfig;
use crate::leader::{LeaderConfig, OnLeaseLost};

/// Everything `phalanx run` needs besides the client.
pub struct RunOptions {
    /// Pods with this `spec.schedulerName` are ours.
    pub scheduler_name: String,
    /// Label selector restricting the nodes Phalanx places on ("" = all).
    pub node_selector: String,
    /// Maximum `pods/binding` calls in flight.
    pub bind_concurrency: u32,
    /// How long a gang still gathering its pods may see no new member before its `WaitingForMembers` Warning
    /// (`--members-wait-warning`; zero = never).
    pub members_wait_warning: std::time::Duration,
    /// Between the discovery rounds that end the process when the served optional APIs change
    /// (`--api-discovery-interval`; zero = never).
    pub api_discovery_interval: std::time::Duration,
    /// Address of /healthz, /readyz, /metrics (port 0 = any free port).
    pub metrics_addr: SocketAddr,
    /// The validated configuration file.
    pub config: PhalanxConfig,
    /// Leader election.
    pub leader: LeaderConfig,
    /// Reporting instance of events (the pod name in-cluster); `None` = the component's name.
    pub instance: Option<String>,
    /// What to do on Lease loss.
    pub on_lease_lost: OnLeaseLost,
    /// Receives the bound metrics address once the server listens (useful with port 0).
    pub bound_addr: Option<oneshot::Sender<SocketAddr>>,
    /// The write fence in the client's stack ([`crate::operator::fenced_client`]), given the leadership once
    /// election starts; `None` when the client has none (in-process tests).
    pub write_fence: Option<crate::write_fence::WriteFence>,
    /// The client of leader election when the main client is fenced ([`crate::operator::fenced_clients`]); `None`
    /// = the main client.
    pub lease_client: Option<kube::Client>,
}

impl std::fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The clients and channels have no useful `Debug`; the settings do.
        f.debug_struct("RunOptions")
            .field("scheduler_name", &self.scheduler_name)
            .field("node_selector", &self.node_selector)
            .field("bind_concurrency", &self.bind_concurrency)
            .field("members_wait_warning", &self.members_wait_warning)
            .field("api_discovery_interval", &self.api_discovery_interval)
            .field("metrics_addr", &self.metrics_addr)
            .field("config", &self.config)
            .field("leader", &self.leader)
            .field("instance", &self.instance)
            .field("on_lease_lost", &self.on_lease_lost)
            .field("write_fence", &self.write_fence.is_some())
            .field("lease_client", &self.lease_client.is_some())
            .finish_non_exhaustive()
    }
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            scheduler_name: phalanx_api::DEFAULT_SCHEDULER_NAME.into(),
            node_selector: String::new(),
            bind_concurrency: 16,
            members_wait_warning: std::time::Duration::from_secs(300),
            api_discovery_interval: std::time::Duration::from_secs(60),
            metrics_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            config: PhalanxConfig::default(),
            leader: LeaderConfig::default(),
            instance: None,
            on_lease_lost: OnLeaseLost::Cancel,
            bound_addr: None,
            write_fence: None,
            lease_client: None,
        }
    }
}
