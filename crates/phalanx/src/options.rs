//! What `phalanx run` is told: the options shared by the process plumbing ([`crate::operator`]) and the wiring of
//! store, controllers and scheduler (`wiring`). A module of its own so that neither of those two imports the other.

use std::net::SocketAddr;

use tokio::sync::oneshot;

use crate::config::PhalanxConfig;
use crate::leader::{LeaderConfig, OnLeaseLost};

/// Everything `phalanx run` needs besides the client.
#[derive(Debug)]
pub struct RunOptions {
    /// Pods with this `spec.schedulerName` are ours.
    pub scheduler_name: String,
    /// Label selector restricting the nodes Phalanx places on ("" = all).
    pub node_selector: String,
    /// Maximum `pods/binding` calls in flight.
    pub bind_concurrency: u32,
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
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            scheduler_name: phalanx_api::DEFAULT_SCHEDULER_NAME.into(),
            node_selector: String::new(),
            bind_concurrency: 16,
            metrics_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            config: PhalanxConfig::default(),
            leader: LeaderConfig::default(),
            instance: None,
            on_lease_lost: OnLeaseLost::Cancel,
            bound_addr: None,
            write_fence: None,
        }
    }
}
