//! Extension points of the group cycle, as traits (upstream
//! `staging/src/k8s.io/kube-scheduler/framework/interface.go` and
//! `pkg/scheduler/framework/interface.go`): PlacementGenerate, PlacementFeasible, PlacementScore
//! and PodGroupPostFilter. The per-pod Filter/Score plugins are a fixed, config-weighted set run
//! by [`crate::schedule_one`]; the group-level points are open so that CompositePodGroups and
//! workload-aware preemption slot in without redesign.

use std::sync::Arc;

use crate::decision::{Nomination, Victim};
use crate::model::{CompositeGroupInfo, GroupInfo, GroupKey, PodInfo};
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

/// Output of a successful PodGroupPostFilter (preemption).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PostFilterResult {
    /// Nominated nodes of the preemptor pods.
    pub nominations: Vec<Nomination>,
    /// Pods to evict.
    pub victims: Vec<Victim>,
}

/// Re-runs the group algorithm on a (modified) snapshot; given to PodGroupPostFilter plugins
/// (upstream `PodGroupSchedulingFunc`). Returns the assignments on success.
pub type PodGroupSchedulingFn<'a> = dyn FnMut(&mut Snapshot) -> Result<PodGroupAssignments, Status> + 'a;

/// PodGroupPostFilter: runs when the root group is Unschedulable (workload-aware preemption).
pub trait PodGroupPostFilterPlugin: Send + Sync {
    /// Plugin name.
    fn name(&self) -> &'static str;
    /// May mutate the snapshot temporarily (it must restore it) and call `schedule` to
    /// simulate. Success means "wait for victims": nothing binds this cycle.
    fn post_filter(
        &self,
        snapshot: &mut Snapshot,
        group: &GroupInfo,
        pods: &[Arc<PodInfo>],
        schedule: &mut PodGroupSchedulingFn<'_>,
    ) -> Result<PostFilterResult, Status>;
}
