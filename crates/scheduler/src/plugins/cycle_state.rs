//! The per-pod state of one scheduling attempt (upstream `CycleState`), typed.
//!
//! Upstream stores each plugin's PreFilter/PreScore result in a map keyed by a string and
//! type-asserts it back in Filter/Score. Here every plugin of the profile has a slot that holds
//! the plugin together with its own `Option<State>` (`None` = skipped), behind an object-safe
//! trait: Filter receives its state by type, with no downcasting, and a [`CycleState`] can be
//! cloned for dry runs (upstream `CycleState.Clone`, used by preemption). Slots are allocated
//! once per [`crate::schedule_one::PodScheduler`] and overwritten pod after pod, so the
//! scheduling loop does not allocate for them.

use std::fmt;
use std::sync::Arc;

use crate::framework::{FilterPlugin, ScoreColumn, ScorePlugin, Status};
use crate::model::{NodeInfo, PodInfo};
use crate::plugins::Rejection;
use crate::snapshot::Snapshot;

/// A Filter plugin and its PreFilter state for the current pod.
pub(crate) trait FilterSlot: Send + Sync {
    fn name(&self) -> &'static str;
    fn pre_filter(&mut self, pod: &PodInfo, snapshot: &Snapshot);
    fn skipped(&self) -> bool;
    fn filter(&self, pod: &PodInfo, node: &NodeInfo) -> Result<(), Rejection>;
    /// PreFilterExtensions: `added` true for AddPod, false for RemovePod.
    fn update(&mut self, pod: &PodInfo, other: &PodInfo, node: &NodeInfo, added: bool) -> Result<(), Status>;
    fn boxed_clone(&self) -> Box<dyn FilterSlot>;
}

struct FilterEntry<P: FilterPlugin> {
    plugin: Arc<P>,
    state: Option<P::PreFilterState>,
}

/// A slot for `plugin` with nothing computed (skipped until PreFilter runs).
pub(crate) fn filter_slot<P: FilterPlugin>(plugin: Arc<P>) -> Box<dyn FilterSlot> {
    Box::new(FilterEntry { plugin, state: None })
}

impl<P: FilterPlugin> FilterSlot for FilterEntry<P> {
    fn name(&self) -> &'static str {
        self.plugin.name()
    }
    fn pre_filter(&mut self, pod: &PodInfo, snapshot: &Snapshot) {
        self.state = self.plugin.pre_filter(pod, snapshot);
    }
    fn skipped(&self) -> bool {
        self.state.is_none()
    }
    fn filter(&self, pod: &PodInfo, node: &NodeInfo) -> Result<(), Rejection> {
        match &self.state {
            Some(s) => self.plugin.filter(s, pod, node),
            None => Ok(()),
        }
    }
    fn update(&mut self, pod: &PodInfo, other: &PodInfo, node: &NodeInfo, added: bool) -> Result<(), Status> {
        let Some(ext) = self.plugin.pre_filter_extensions() else {
            return Ok(());
        };
        if added {
            ext.add_pod(&mut self.state, pod, other, node)
        } else {
            ext.remove_pod(&mut self.state, pod, other, node)
        }
    }
    fn boxed_clone(&self) -> Box<dyn FilterSlot> {
        Box::new(FilterEntry {
            plugin: self.plugin.clone(),
            state: self.state.clone(),
        })
    }
}

/// A Score plugin and its PreScore state for the current pod.
pub(crate) trait ScoreSlot: Send + Sync {
    fn name(&self) -> &'static str;
    /// PreScore; false when skipped.
    fn pre_score(&mut self, pod: &PodInfo, snapshot: &Snapshot, nodes: &[usize]) -> bool;
    /// Score; 0 when PreScore skipped (the framework does not ask then).
    fn score(&self, pod: &PodInfo, node: &NodeInfo) -> i64;
    fn normalize(
        &self,
        pod: &PodInfo,
        snapshot: &Snapshot,
        nodes: &[usize],
        scores: &mut [i64],
    ) -> ScoreColumn;
    fn boxed_clone(&self) -> Box<dyn ScoreSlot>;
}

struct ScoreEntry<P: ScorePlugin> {
    plugin: Arc<P>,
    state: Option<P::PreScoreState>,
}

/// A slot for `plugin` with nothing computed.
pub(crate) fn score_slot<P: ScorePlugin>(plugin: Arc<P>) -> Box<dyn ScoreSlot> {
    Box::new(ScoreEntry { plugin, state: None })
}

impl<P: ScorePlugin> ScoreSlot for ScoreEntry<P> {
    fn name(&self) -> &'static str {
        self.plugin.name()
    }
    fn pre_score(&mut self, pod: &PodInfo, snapshot: &Snapshot, nodes: &[usize]) -> bool {
        self.state = self.plugin.pre_score(pod, snapshot, nodes);
        self.state.is_some()
    }
    fn score(&self, pod: &PodInfo, node: &NodeInfo) -> i64 {
        self.state.as_ref().map_or(0, |s| self.plugin.score(s, pod, node))
    }
    fn normalize(
        &self,
        pod: &PodInfo,
        snapshot: &Snapshot,
        nodes: &[usize],
        scores: &mut [i64],
    ) -> ScoreColumn {
        match &self.state {
            Some(s) => self.plugin.normalize(s, pod, snapshot, nodes, scores),
            None => ScoreColumn::Uniform,
        }
    }
    fn boxed_clone(&self) -> Box<dyn ScoreSlot> {
        Box::new(ScoreEntry {
            plugin: self.plugin.clone(),
            state: self.state.clone(),
        })
    }
}

/// PreFilter and PreScore results of one pod, one slot per Filter and Score plugin of a
/// [`crate::plugins::registry::Profile`], in the profile's order (upstream `CycleState`).
///
/// Obtain one from [`crate::plugins::registry::Profile::pre_filter`] (or
/// [`crate::schedule_one::PodScheduler::pre_filter`]); then [`CycleState::filter`] tells
/// whether the pod fits a node, and [`CycleState::add_pod`] / [`CycleState::remove_pod`]
/// update it for pods added to or removed from the snapshot, as preemption needs.
pub struct CycleState {
    filters: Vec<Box<dyn FilterSlot>>,
    scores: Vec<Box<dyn ScoreSlot>>,
}

impl Clone for CycleState {
    fn clone(&self) -> CycleState {
        CycleState {
            filters: self.filters.iter().map(|s| s.boxed_clone()).collect(),
            scores: self.scores.iter().map(|s| s.boxed_clone()).collect(),
        }
    }
}

impl fmt::Debug for CycleState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let filters: Vec<(&str, bool)> = self.filters.iter().map(|s| (s.name(), s.skipped())).collect();
        let scores: Vec<&str> = self.scores.iter().map(|s| s.name()).collect();
        f.debug_struct("CycleState")
            .field("filters (name, skipped)", &filters)
            .field("scores", &scores)
            .finish()
    }
}

impl CycleState {
    /// A state with these slots, nothing computed yet.
    pub(crate) fn new(filters: Vec<Box<dyn FilterSlot>>, scores: Vec<Box<dyn ScoreSlot>>) -> CycleState {
        CycleState { filters, scores }
    }

    /// Runs PreFilter of every Filter plugin for `pod` (upstream `RunPreFilterPlugins`),
    /// replacing what the slots held. Must precede [`CycleState::filter`]: a slot without a
    /// PreFilter result behaves as skipped.
    pub fn pre_filter(&mut self, pod: &PodInfo, snapshot: &Snapshot) {
        for s in &mut self.filters {
            s.pre_filter(pod, snapshot);
        }
    }

    /// Runs Filter of every plugin whose PreFilter did not skip, in profile order; the first
    /// rejection is returned (upstream `RunFilterPlugins`).
    pub fn filter(&self, pod: &PodInfo, node: &NodeInfo) -> Result<(), Rejection> {
        for s in &self.filters {
            s.filter(pod, node)?;
        }
        Ok(())
    }

    /// [`CycleState::filter`] over part of the slots: those `per_pod` marks when `marked`, the others when not (a
    /// slot past the end of `per_pod` counts as unmarked). The batching cache keeps the unmarked part.
    pub(crate) fn filter_part(
        &self,
        pod: &PodInfo,
        node: &NodeInfo,
        per_pod: &[bool],
        marked: bool,
    ) -> Result<(), Rejection> {
        for (i, s) in self.filters.iter().enumerate() {
            if per_pod.get(i).copied().unwrap_or(false) == marked {
                s.filter(pod, node)?;
            }
        }
        Ok(())
    }

    /// Whether the Filter plugin named `plugin` was skipped by its PreFilter (upstream
    /// `SkipFilterPlugins`); `None` when the profile has no such Filter plugin.
    pub fn skipped(&self, plugin: &str) -> Option<bool> {
        self.filters
            .iter()
            .find(|s| s.name() == plugin)
            .map(|s| s.skipped())
    }

    /// Updates every PreFilter state as if `other` had been added to `node` (upstream
    /// `RunPreFilterExtensionAddPod`), so that [`CycleState::filter`] answers for the snapshot
    /// with `other` on `node`. Unlike upstream, a plugin that PreFilter skipped may become
    /// active (an added pod's anti-affinity can repel `pod`). The first error is returned.
    pub fn add_pod(&mut self, pod: &PodInfo, other: &PodInfo, node: &NodeInfo) -> Result<(), Status> {
        for s in &mut self.filters {
            s.update(pod, other, node, true)?;
        }
        Ok(())
    }

    /// Updates every PreFilter state as if `other` had been removed from `node` (upstream
    /// `RunPreFilterExtensionRemovePod`), e.g. a preemption victim.
    pub fn remove_pod(&mut self, pod: &PodInfo, other: &PodInfo, node: &NodeInfo) -> Result<(), Status> {
        for s in &mut self.filters {
            s.update(pod, other, node, false)?;
        }
        Ok(())
    }

    /// PreScore of score slot `j`; false when skipped.
    pub(crate) fn pre_score(
        &mut self,
        j: usize,
        pod: &PodInfo,
        snapshot: &Snapshot,
        nodes: &[usize],
    ) -> bool {
        self.scores[j].pre_score(pod, snapshot, nodes)
    }

    /// Raw score of slot `j` (after a PreScore that did not skip).
    pub(crate) fn score(&self, j: usize, pod: &PodInfo, node: &NodeInfo) -> i64 {
        self.scores[j].score(pod, node)
    }

    /// NormalizeScore of slot `j` over the feasible `nodes`.
    pub(crate) fn normalize(
        &self,
        j: usize,
        pod: &PodInfo,
        snapshot: &Snapshot,
        nodes: &[usize],
        scores: &mut [i64],
    ) -> ScoreColumn {
        self.scores[j].normalize(pod, snapshot, nodes, scores)
    }
}
