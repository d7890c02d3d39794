//! What one evaluation of a CompositePodGroup tree takes ([`TreeInput`]) and gives ([`TreeResult`]). Their own
//! module, below the hierarchical algorithm ([`crate::composite`]) and the sibling search it calls
//! ([`crate::sibling_search`]), so that both use them and neither imports the other.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::algorithm::{GroupResult, PlacementResult};
use crate::framework::{Code, ProposedAssignment, Status};
use crate::hierarchy::GroupTree;
use crate::model::{GroupKey, PodInfo};

/// What the recursive algorithm needs besides the plugins: the tree, the pending pods per leaf
/// (in scheduling order) and the reorder-retry limits for leaves.
#[derive(Debug)]
pub struct TreeInput<'t> {
    /// The hierarchy.
    pub tree: &'t GroupTree,
    /// Pending pods by leaf PodGroup key.
    pub pods: HashMap<GroupKey, Vec<Arc<PodInfo>>>,
    /// Reorder-retry time budget per leaf (see `reorderBudgetMs`).
    pub budget: Duration,
    /// Reorder-retry attempts per leaf.
    pub max_attempts: u32,
    /// Time budget of the sibling search, shared by every CompositePodGroup of the tree
    /// (`siblingSearchBudgetMs`; zero disables the search).
    pub search_budget: Duration,
    /// When the tree's first sibling search started (set once; the budget counts from it).
    pub search_started: std::sync::OnceLock<std::time::Instant>,
}

/// Result of a (sub)tree evaluation.
#[derive(Debug, Clone, PartialEq)]
pub struct TreeResult {
    /// Status of the evaluated subtree's root: Success, Unschedulable or Error.
    pub status: Status,
    /// Every assignment of the subtree's leaves whose ancestors (up to this subtree's root)
    /// all succeeded; assumed in the snapshot on success, empty otherwise.
    pub assignments: Vec<ProposedAssignment>,
    /// Own status of every group evaluated in the reported attempt (leaves and composites).
    pub statuses: HashMap<GroupKey, Status>,
    /// Leaf results of the reported attempt (per-pod fit errors, tried counts).
    pub leaves: HashMap<GroupKey, GroupResult>,
    /// Chosen placement of the subtree's root, when it has a topology constraint.
    pub placement: Option<String>,
}

impl PlacementResult for TreeResult {
    fn status(&self) -> &Status {
        &self.status
    }
    fn set_status(&mut self, status: Status) {
        self.status = status;
    }
    fn unschedulable() -> Self {
        TreeResult::new(Status::new(Code::Unschedulable, ""))
    }
}

impl TreeResult {
    pub(crate) fn new(status: Status) -> TreeResult {
        TreeResult {
            status,
            assignments: Vec::new(),
            statuses: HashMap::new(),
            leaves: HashMap::new(),
            placement: None,
        }
    }

    pub(crate) fn merge(&mut self, child: TreeResult) {
        self.statuses.extend(child.statuses);
        self.leaves.extend(child.leaves);
    }
}
