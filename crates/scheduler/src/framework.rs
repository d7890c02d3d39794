//! Extension points, as traits (upstream
//! `staging/src/k8s.io/kube-scheduler/framework/interface.go` and
//! `pkg/scheduler/framework/interface.go`).
//!
//! - Per pod: [`PreFilterPlugin`] (with [`PreFilterExtensions`]), [`FilterPlugin`] and
//!   [`ScorePlugin`] (PreScore, Score and NormalizeScore), on the common base [`Plugin`]. They
//!   are registered by upstream name in a [`crate::plugins::registry::Registry`], assembled with
//!   their configured weights into a [`crate::plugins::registry::Profile`], and run by
//!   [`crate::schedule_one`]; their per-pod state lives in a
//!   [`crate::plugins::registry::CycleState`].
//! - Per group: PlacementGenerate, PlacementFeasible, PlacementScore and PodGroupPostFilter,
//!   open so that CompositePodGroups and workload-aware preemption slot in without redesign.

use std::borrow::Cow;
use std::fmt::Debug;
use std::sync::Arc;

use crate::decision::{Nomination, Victim};
use crate::model::{
    CompositeGroupInfo, EntityKey, GroupInfo, GroupKey, NodeInfo, PodInfo, PodKey, PreemptionPolicy,
};
use crate::snapshot::Snapshot;

/// Status code (upstream `fwk.Code`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// OK.
    Success,
    /// Internal error: retried with backoff.
    Error,
    /// Does not fit now; may after cluster changes or preemption.
    Unschedulable,
    /// Does not fit and preemption cannot help.
    UnschedulableAndUnresolvable,
    /// PlacementFeasible: not yet satisfied, keep going.
    Wait,
    /// Plugin not relevant.
    Skip,
}

/// Why a Filter plugin rejected a node ([`FilterPlugin::filter`]'s error; the plugins name it as
/// `crate::plugins::Rejection`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// Plugin name.
    pub plugin: &'static str,
    /// Unschedulable or UnschedulableAndUnresolvable.
    pub code: Code,
    /// Reasons (upstream `Status.Reasons()`); each counts once in the FitError histogram.
    pub reasons: Vec<Cow<'static, str>>,
}

impl Rejection {
    /// A rejection with one reason.
    pub fn new(plugin: &'static str, code: Code, reason: impl Into<Cow<'static, str>>) -> Rejection {
        Rejection {
            plugin,
            code,
            reasons: vec![reason.into()],
        }
    }
}

/// Status with a message (upstream `fwk.Status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// Code.
    pub code: Code,
    /// Message (may be empty).
    pub message: String,
}

impl Status {
    /// Success with no message.
    pub fn success() -> Status {
        Status {
            code: Code::Success,
            message: String::new(),
        }
    }
    /// A status with a message.
    pub fn new(code: Code, message: impl Into<String>) -> Status {
        Status {
            code,
            message: message.into(),
        }
    }
    /// Whether the code is Success.
    pub fn is_success(&self) -> bool {
        self.code == Code::Success
    }
    /// Whether the code is Unschedulable or UnschedulableAndUnresolvable.
    pub fn is_rejected(&self) -> bool {
        matches!(
            self.code,
            Code::Unschedulable | Code::UnschedulableAndUnresolvable
        )
    }
}

/// A set of nodes a group may be placed on (upstream `fwk.Placement`). Nodes are indices into
/// the cycle's [`Snapshot`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// Domain value (e.g. the rack name), or `""` for the whole cluster.
    pub name: String,
    /// Node indices, ascending.
    pub nodes: Vec<usize>,
}

/// Progress of a group simulation (upstream `PlacementProgress`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlacementProgress {
    /// Members scheduled (already assigned + assumed in this cycle).
    pub scheduled: usize,
    /// Members not tried yet.
    pub remaining: usize,
}

/// One pod proposed onto one node.
#[derive(Debug, Clone, PartialEq)]
pub struct ProposedAssignment {
    /// Pod.
    pub pod: Arc<PodInfo>,
    /// Node index.
    pub node: usize,
}

/// The result of simulating a group in one placement (upstream `PodGroupAssignments`).
#[derive(Debug, Clone, PartialEq)]
pub struct PodGroupAssignments {
    /// The placement.
    pub placement: Placement,
    /// Successful assignments in scheduling order.
    pub proposed: Vec<ProposedAssignment>,
}

/// PlacementGenerate: splits the parent placement into candidate placements.
pub trait PlacementGeneratePlugin: Send + Sync {
    /// Plugin name.
    fn name(&self) -> &'static str;
    /// Candidate placements for `group` within `parent` (may overlap). An empty list means no
    /// placement is possible. Errors become a SchedulerError.
    fn generate(
        &self,
        snapshot: &Snapshot,
        group: &GroupInfo,
        parent: &Placement,
    ) -> Result<Vec<Placement>, Status>;

    /// Candidate placements for a CompositePodGroup within its parent's placement (KEP-6012).
    /// `leaves` are the leaf PodGroups of its subtree (their scheduled members may pin a
    /// domain). Default: [`PlacementGeneratePlugin::generate`] on
    /// [`CompositeGroupInfo::as_group_info`].
    fn generate_composite(
        &self,
        snapshot: &Snapshot,
        group: &CompositeGroupInfo,
        leaves: &[GroupKey],
        parent: &Placement,
    ) -> Result<Vec<Placement>, Status> {
        let _ = leaves;
        self.generate(snapshot, &group.as_group_info(), parent)
    }
}

/// PlacementFeasible: decides from progress whether the group can still, or already does, meet
/// its minimum. Returns Success, Wait or Unschedulable (upstream GangScheduling).
pub trait PlacementFeasiblePlugin: Send + Sync {
    /// Plugin name.
    fn name(&self) -> &'static str;
    /// Evaluates progress.
    fn feasible(&self, group: &GroupInfo, progress: PlacementProgress) -> Status;

    /// Evaluates a CompositePodGroup's progress over its children (`scheduled` = children that
    /// succeeded, `remaining` = children not tried yet) against `minGroupCount` (1 for basic).
    /// Default: [`PlacementFeasiblePlugin::feasible`] on
    /// [`CompositeGroupInfo::as_group_info`] (so GangScheduling's arithmetic and messages).
    fn feasible_composite(&self, group: &CompositeGroupInfo, progress: PlacementProgress) -> Status {
        self.feasible(&group.as_group_info(), progress)
    }
}

/// PlacementScore: scores a successful simulation; higher is better.
pub trait PlacementScorePlugin: Send + Sync {
    /// Plugin name.
    fn name(&self) -> &'static str;
    /// Raw score of one placement result.
    fn score(
        &self,
        snapshot: &Snapshot,
        group: &GroupInfo,
        assignments: &PodGroupAssignments,
    ) -> Result<i64, Status>;
    /// Normalises the raw scores of every successful placement in place (to 0..=100).
    fn normalize(&self, _scores: &mut [i64]) -> Result<(), Status> {
        Ok(())
    }

    /// Raw score of one CompositePodGroup placement result; `assignments.proposed` holds every
    /// descendant leaf assignment and `leaves` the subtree's leaf PodGroups. Default:
    /// [`PlacementScorePlugin::score`] on [`CompositeGroupInfo::as_group_info`].
    fn score_composite(
        &self,
        snapshot: &Snapshot,
        group: &CompositeGroupInfo,
        leaves: &[GroupKey],
        assignments: &PodGroupAssignments,
    ) -> Result<i64, Status> {
        let _ = leaves;
        self.score(snapshot, &group.as_group_info(), assignments)
    }

    /// Whether `score` reads `ProposedAssignment::node`. When every scorer returns false, the
    /// placement algorithm may score placements of a homogeneous group from counts alone
    /// (proposed nodes are then [`UNSPECIFIED_NODE`]).
    fn needs_nodes(&self) -> bool {
        true
    }
}

/// Node index of a proposed assignment whose node was not computed (see
/// [`PlacementScorePlugin::needs_nodes`]).
pub const UNSPECIFIED_NODE: usize = usize::MAX;

/// Output of a successful PodGroupPostFilter / PostFilter (preemption; upstream
/// `PodGroupPostFilterResult` and `PostFilterResult`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PostFilterResult {
    /// Nominated nodes of the preemptor pods (upstream `NominatingInfos`, mode Override).
    pub nominations: Vec<Nomination>,
    /// Pods to evict, most important unit first.
    pub victims: Vec<Victim>,
    /// Pending pods nominated to the victims' nodes with a lower priority than the preemptor,
    /// whose nomination the runtime clears (upstream `getLowerPriorityNominatedPods`); empty
    /// unless new victims were chosen.
    pub cleared_nominations: Vec<PodKey>,
    /// Message appended to the group condition and pod failures (may be empty).
    pub message: String,
    /// A preemption for this entity was already in flight: `nominations` are the current ones
    /// and nothing new is evicted (k/k#140641).
    pub ongoing: bool,
}

/// The entity that asks for room (upstream `podGroupPreemptor` / the preemptor pod).
#[derive(Debug, Clone, Copy)]
pub struct Preemptor<'a> {
    /// The entity (a root group or a standalone pod).
    pub key: &'a EntityKey,
    /// Pending pods, in scheduling order.
    pub pods: &'a [Arc<PodInfo>],
    /// Priority of the root group (its `priority`, else its pods').
    pub priority: i32,
    /// Preemption policy of the root group (its `preemptionPolicy`, else its pods').
    pub preemption_policy: PreemptionPolicy,
    /// Whether the root has a topology constraint (several candidate placements).
    pub topology_constrained: bool,
}

impl<'a> Preemptor<'a> {
    /// A root PodGroup or CompositePodGroup with these settings; `None` fields fall back to
    /// the first pending pod's (`pods` must not be empty for that to matter).
    pub fn group(
        key: &'a EntityKey,
        pods: &'a [Arc<PodInfo>],
        priority: Option<i32>,
        preemption_policy: Option<PreemptionPolicy>,
        topology_constrained: bool,
    ) -> Preemptor<'a> {
        let first = pods.first();
        Preemptor {
            key,
            pods,
            priority: priority.or(first.map(|p| p.priority)).unwrap_or(0),
            preemption_policy: preemption_policy
                .or(first.map(|p| p.preemption_policy))
                .unwrap_or_default(),
            topology_constrained,
        }
    }
}

/// What preemption may ask of the scheduler while it simulates (upstream `fwk.Handle` +
/// `PodGroupSchedulingFunc`). Implementations must leave the snapshot as they found it.
pub trait PreemptionHandle {
    /// Re-runs the root's whole scheduling algorithm (placement and topology included, no
    /// PostFilter) on the snapshot as it is now, and returns up to `k` (at least 1) feasible
    /// results, best-scored first; more than one only for a root with a topology constraint.
    /// Errors: the algorithm's status (Unschedulable when it does not fit). For a standalone
    /// pod there is no group algorithm: always an error.
    fn schedule(&mut self, snapshot: &mut Snapshot, k: usize) -> Result<Vec<PodGroupAssignments>, Status>;
    /// Runs the Filter plugins for `pod` on node `node`, counting the requests of pods
    /// nominated there with equal or higher priority (upstream
    /// `RunFilterPluginsWithNominatedPods`).
    fn filter(&mut self, snapshot: &Snapshot, pod: &PodInfo, node: usize) -> Status;
    /// Whether `pod`'s Filter result on a node depends only on that node's state (no inter-pod
    /// constraints in play), so that a change elsewhere cannot change it.
    fn node_local(&self, snapshot: &Snapshot, pod: &PodInfo) -> bool;
}

/// PodGroupPostFilter: runs when the root group is Unschedulable (workload-aware preemption,
/// upstream `PodGroupPostFilterPlugin`, KEP-4671 / KEP-5710).
pub trait PodGroupPostFilterPlugin: Send + Sync {
    /// Plugin name.
    fn name(&self) -> &'static str;
    /// May mutate the snapshot temporarily (it must restore it) and simulate through `handle`.
    /// `Ok` means "wait for victims": nothing binds this cycle. `Err` with code Unschedulable /
    /// UnschedulableAndUnresolvable lets the next plugin try; code Error stops the chain.
    fn post_filter(
        &self,
        snapshot: &mut Snapshot,
        preemptor: &Preemptor<'_>,
        handle: &mut dyn PreemptionHandle,
    ) -> Result<PostFilterResult, Status>;
}

/// PostFilter for a standalone pod that did not fit (upstream `PostFilterPlugin`, classic
/// pod-by-pod preemption). Same contract as [`PodGroupPostFilterPlugin`].
pub trait PostFilterPlugin: Send + Sync {
    /// Plugin name.
    fn name(&self) -> &'static str;
    /// Finds room for `preemptor` (one pod) or explains why not.
    fn post_filter(
        &self,
        snapshot: &mut Snapshot,
        preemptor: &Preemptor<'_>,
        handle: &mut dyn PreemptionHandle,
    ) -> Result<PostFilterResult, Status>;
}

/// Base of every per-pod plugin (upstream `fwk.Plugin`), plus the declaration the exact
/// batching cache relies on.
pub trait Plugin: Send + Sync + 'static {
    /// Upstream plugin name, e.g. `"NodeResourcesFit"`: the key it is registered under and the
    /// `plugin` of its rejections.
    fn name(&self) -> &'static str;

    /// Whether this plugin's Filter outcome and raw Score for `pod` on any node depend only on
    /// the pod's spec ([`PodInfo::spec`]) and that node's own [`NodeInfo`] — not on other
    /// nodes, other pods' terms, or the set of feasible nodes.
    ///
    /// When every plugin of the profile says so, the pod is batched (upstream
    /// OpportunisticBatching, KEP-5598, made exact): its Filter results and raw scores are
    /// cached per node generation and reused by later pods with an equal spec. A score plugin
    /// that says so is also PreScored before Filter, without nodes (see
    /// [`ScorePlugin::pre_score`]). Answering `false` is always correct; it only costs speed.
    fn node_local(&self, pod: &PodInfo, snapshot: &Snapshot) -> bool;

    /// For a Filter-only plugin that is not [`Plugin::node_local`] for `pod`: whether the batching cache may still
    /// serve the other plugins' results, with this plugin's Filter run for each pod on each node they admit (never
    /// cached). True when its verdict for `pod` on a node may depend on more than the spec and that node (the
    /// cycle's other allocations, say) but it rejects or admits the node by itself: DynamicResources, whose pods
    /// differ only in their claims (one claim per pod from a ResourceClaimTemplate). Used only when such plugins run
    /// after every other Filter plugin, so that the first rejection, and so the fit error, is the one an unbatched
    /// pass reports. Default `false`.
    fn filter_per_pod(&self, _pod: &PodInfo) -> bool {
        false
    }
}

/// PreFilter (upstream `PreFilterPlugin`): computes, once per pod and cycle, the state its
/// Filter reads.
pub trait PreFilterPlugin: Plugin {
    /// What PreFilter computes (upstream: the value the plugin writes to `CycleState`); `()`
    /// for plugins whose Filter needs only the pod and the node.
    type PreFilterState: Clone + Debug + Send + Sync + 'static;

    /// PreFilter for `pod` on `snapshot`. `None` is upstream's `Skip`: the plugin's Filter does
    /// not run for this pod (it passes every node). Upstream's `PreFilterResult` (narrowing the
    /// candidate nodes by name) is not modelled: every plugin here considers all nodes.
    fn pre_filter(&self, pod: &PodInfo, snapshot: &Snapshot) -> Option<Self::PreFilterState>;

    /// Upstream `PreFilterExtensions()`: how the state follows pods added to or removed from a
    /// node. `None` (the default) when the state does not depend on other pods; their usage is
    /// then read by Filter from the [`NodeInfo`] itself.
    fn pre_filter_extensions(&self) -> Option<&dyn PreFilterExtensions<Self::PreFilterState>> {
        None
    }
}

/// Upstream `PreFilterExtensions`: updates a PreFilter state in place so that preemption can
/// evaluate "what if these pods were (not) there" without re-running PreFilter on the whole
/// snapshot (upstream `SelectVictimsOnNode`, and its nominated-pod dry runs).
///
/// Contract: after `add_pod` (resp. `remove_pod`), Filter with the updated state gives, on
/// every node, the same outcome as Filter with the state PreFilter computes on the snapshot
/// with `other` added to (resp. removed from) `node`. A skipped state (`None`) may become a
/// computed one when `other` makes the plugin relevant.
pub trait PreFilterExtensions<S>: Send + Sync {
    /// `other` was added to `node` (upstream `AddPod`). `node` is the node `other` runs on; its
    /// own attributes (labels, taints) are read, not its pod list, so it may be given before or
    /// after the change. Errors are upstream's error statuses (no in-tree plugin fails).
    fn add_pod(
        &self,
        state: &mut Option<S>,
        pod: &PodInfo,
        other: &PodInfo,
        node: &NodeInfo,
    ) -> Result<(), Status>;

    /// `other` was removed from `node` (upstream `RemovePod`); as [`PreFilterExtensions::add_pod`].
    fn remove_pod(
        &self,
        state: &mut Option<S>,
        pod: &PodInfo,
        other: &PodInfo,
        node: &NodeInfo,
    ) -> Result<(), Status>;
}

/// Filter (upstream `FilterPlugin`): whether the pod fits a node. The state type is the
/// plugin's [`PreFilterPlugin::PreFilterState`].
pub trait FilterPlugin: PreFilterPlugin {
    /// `Ok` when `pod` fits `node` (whose pod list includes pods assumed earlier in the cycle),
    /// else the rejection with upstream's reason strings and code (Unschedulable, or
    /// UnschedulableAndUnresolvable when preemption cannot help). Runs only when PreFilter did
    /// not skip.
    fn filter(&self, state: &Self::PreFilterState, pod: &PodInfo, node: &NodeInfo) -> Result<(), Rejection>;
}

/// What a NormalizeScore left in its score column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScoreColumn {
    /// Normalised scores that may differ between nodes: weighted and added to the totals.
    Ranked,
    /// Every node gets the same normalised score, which cannot change the choice (ties go to
    /// the lowest node index either way): the column is not added and its contents are not
    /// read. A shortcut, never a change of result.
    Uniform,
}

/// PreScore, Score and NormalizeScore of one plugin (upstream `PreScorePlugin`, `ScorePlugin`
/// and `ScoreExtensions`). The framework multiplies the normalised score (0..=100,
/// [`crate::plugins::MAX_NODE_SCORE`]) by the plugin's weight and sums over plugins.
pub trait ScorePlugin: Plugin {
    /// What PreScore computes for Score and NormalizeScore; `()` when nothing is needed.
    type PreScoreState: Clone + Debug + Send + Sync + 'static;

    /// Weight in upstream's default profile (`pkg/scheduler/apis/config/v1/default_plugins.go`),
    /// used when [`crate::config::PluginWeights`] has no key for this plugin.
    fn default_weight(&self) -> i64;

    /// PreScore. `None` is upstream's `Skip`: the plugin adds nothing for this pod (as when
    /// every node would get the same score). `nodes` are the feasible nodes (indices into
    /// `snapshot`), in the order their scores are later given to
    /// [`ScorePlugin::normalize`] — except when [`Plugin::node_local`] returned true for the
    /// pod: PreScore then runs before Filter with `nodes` empty, so that raw scores can be
    /// computed during Filter and cached, and its result must depend on the pod's spec only.
    fn pre_score(&self, pod: &PodInfo, snapshot: &Snapshot, nodes: &[usize]) -> Option<Self::PreScoreState>;

    /// Raw score of `pod` on a feasible `node` (any range; NormalizeScore scales it).
    fn score(&self, state: &Self::PreScoreState, pod: &PodInfo, node: &NodeInfo) -> i64;

    /// NormalizeScore over the raw scores of the feasible nodes, in place; `scores[i]` belongs
    /// to `snapshot.node(nodes[i])`. Returns [`ScoreColumn::Uniform`] when every node ends
    /// with the same score (the column may then be left as it is). The default leaves the
    /// scores as they are and returns [`ScoreColumn::Ranked`] (plugins whose raw score is
    /// already 0..=100).
    fn normalize(
        &self,
        state: &Self::PreScoreState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        nodes: &[usize],
        scores: &mut [i64],
    ) -> ScoreColumn {
        let _ = (state, pod, snapshot, nodes, scores);
        ScoreColumn::Ranked
    }
}
