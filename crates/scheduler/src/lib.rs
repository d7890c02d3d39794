//! phalanx-scheduler: the pure scheduling core of Phalanx.
//!
//! It reads a [`Snapshot`] and returns a [`Decision`] as data; it never talks to the API server.
//! Layout mirrors kube-scheduler's `pkg/scheduler`:
//! - [`model`]: `PodInfo`, `NodeInfo`, `GroupInfo` (upstream `framework/types.go`), and
//!   [`convert`]: building them from API objects;
//! - [`snapshot`]: the per-cycle snapshot with assume/revert (upstream `backend/cache`);
//! - [`queue`]: the entity queue with PreEnqueue gates (upstream `backend/queue`), and
//!   [`workload_forest`]: the hierarchy bookkeeping it keeps apart from its heaps;
//! - [`plugins`]: per-pod Filter/Score plugins and the group plugins (GangScheduling,
//!   TopologyPlacement, PodGroupPodsCount, NodeResourcesFit placement score);
//! - [`schedule_one`]: the per-pod Filter → Score → select pass (upstream `schedule_one.go`);
//! - [`algorithm`]: the PodGroup default and placement algorithms (upstream
//!   `podgroup_scheduling_algorithm`), plus the reorder retry;
//! - [`hierarchy`], [`composite`]: CompositePodGroup trees and the recursive algorithm
//!   (KEP-6012);
//! - [`validation`]: upstream `validatePodGroup`, typed;
//! - [`preemption`]: workload-aware and pod-by-pod preemption (upstream `DefaultPreemption`,
//!   KEP-4671 / KEP-5710), returned as victims and nominations;
//! - [`volumes`]: claims, volumes and the cycle's volume choices (upstream `volumebinding`'s assume cache);
//! - [`cycle`]: [`Scheduler::schedule`], the entity cycle (upstream `schedule_one_podgroup.go`).
//!
//! See `docs/scheduler.md` for the design and `docs/architecture.md` for where the core sits.

#![deny(missing_docs)]

pub mod algorithm;
pub mod composite;
pub mod config;
pub mod convert;
pub mod cycle;
pub mod decision;
pub mod dra;
pub mod framework;
pub mod fx;
pub mod hierarchy;
pub mod model;
pub mod placements;
pub mod plugins;
pub mod preemption;
pub mod queue;
pub mod resources;
pub mod schedule_one;
pub mod selectors;
pub mod sibling_search;
pub mod snapshot;
pub mod tree_eval;
pub mod validation;
pub mod volumes;
pub mod workload_forest;

pub use config::SchedulerConfig;
pub use convert::{ConvertError, is_succeeded, is_terminal};
pub use cycle::Scheduler;
pub use decision::{
    Binding, ConditionReason, ConditionType, Decision, FailureReason, GroupCondition, Nomination, Outcome,
    PodFailure, PreemptionReport, Requeue, RequeueMode, Victim,
};
pub use hierarchy::{GroupTree, HierarchyError, TreeNode};
pub use model::{
    CompositeGroupInfo, CompositePolicy, EntityKey, GroupApi, GroupInfo, GroupKey, GroupKind, GroupPolicy,
    NodeInfo, NodeStatic, PodInfo, PodKey,
};
pub use preemption::{DefaultPreemption, Pdb};
pub use queue::{ClusterEvent, Gate, GateReason, QueueCounts, QueuedEntity, SchedulingQueue};
pub use snapshot::Snapshot;
