//! The Phalanx operator as a library: what `phalanx run` does, callable in-process (the end-to-end tests start the
//! operator this way with a ServiceAccount token client, so the Helm chart's RBAC is what they exercise).
//!
//! - [`cli`] defines the command line (clap);
//! - [`config`] reads the configuration file (`config/phalanx.yaml`), with errors that name the key;
//! - [`options`] holds what `phalanx run` is told ([`RunOptions`]);
//! - [`operator`] wires store, controllers and scheduler with leader election, probes, metrics and shutdown;
//! - [`leader`] runs Lease-based leader election, fail-stop; [`lease_precondition`] gives its Lease writes the
//!   `resourceVersion` precondition client-go uses;
//! - [`rbac`] lists the API permissions the operator needs (the chart's ClusterRole must grant them);
//! - [`server`] serves `/healthz`, `/readyz` and `/metrics`;
//! - [`telemetry`] sets up logging;
//! - [`write_fence`] refuses, at the last moment, a write by a replica that is not the leader;
//! - [`entry`] is the command line's entry point, shared by the `phalanx` and `kubectl-phalanx` binaries;
//! - [`explain`], [`simulate`] and [`tools`] are the read-only tools (`phalanx explain`, `simulate`, `snapshot`).

pub mod cli;
pub mod config;
pub mod entry;
pub mod explain;
pub mod fenced_client;
pub mod leader;
pub mod lease_precondition;
pub mod operator;
pub mod options;
pub mod rbac;
pub mod server;
pub mod simulate;
pub mod telemetry;
pub mod tools;
mod wiring;
pub mod write_fence;

pub use operator::run;
pub use options::RunOptions;

/// The crate version (`phalanx version` prints it).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
