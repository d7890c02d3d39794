//! phalanx-api: the Kubernetes API of Phalanx.
//!
//! - [`v1beta1`]: `Workload` and `PodGroup` in `scheduling.phalanx.dev/v1beta1`, and [`v1alpha3`]:
//!   `CompositePodGroup` in `scheduling.phalanx.dev/v1alpha3`. They mirror upstream `scheduling.k8s.io`
//!   (Kubernetes 1.37) field for field, with the same JSON names, defaults, limits and immutability,
//!   enforced by the generated CRD schemas (OpenAPI keywords and CEL rules).
//! - [`conditions`]: condition types, reasons and [`conditions::set_condition`].
//! - [`labels`], [`finalizers`], [`field_managers`]: well-known names.
//! - [`provisioning`]: which PodGroups wait for a Cluster Autoscaler ProvisioningRequest.
//! - [`owners`]: the owner annotations that give Jobs, StatefulSets and other owners a PodGroup automatically.
//! - [`crds`]: the generated CustomResourceDefinitions (`crds/phalanx.yaml`).
//! - [`native`]: upstream's own CompositePodGroup at `scheduling.k8s.io/v1alpha3` or `v1beta1`.
//!
//! This crate has no client and does no I/O.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod conditions;
pub mod crds;
pub mod field_managers;
pub mod finalizers;
pub mod labels;
pub mod native;
pub mod owner_policy;
pub mod owners;
mod pod;
pub mod provisioning;
pub mod schema;
pub mod v1alpha3;
pub mod v1beta1;

pub use pod::{GroupRef, pod_group_name, pod_group_ref};

/// The API group of every Phalanx kind.
pub const GROUP: &str = "scheduling.phalanx.dev";

/// The `spec.schedulerName` that pods use to be scheduled by Phalanx.
pub const DEFAULT_SCHEDULER_NAME: &str = "phalanx-scheduler";
