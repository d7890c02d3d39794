//! PodTopologySpread (upstream `plugins/podtopologyspread`): hard constraints filter by skew
//! (`matchNum + selfMatch - minMatch > maxSkew`, honouring minDomains and the node
//! affinity/taints inclusion policies); soft constraints score (fewer matching pods in the
//! node's domain is better). Upstream's cluster-level default constraints (derived from
//! Services/ReplicaSets) are not applied: the core has no such listers. [`PodTopologySpread`]
//! is the plugin; its PreFilter extensions keep the counts up to date as pods are added or
//! removed (upstream `filtering.go` `AddPod`/`RemovePod`).

use std::collections::{HashMap, HashSet};

use crate::framework::{
    Code, FilterPlugin, Plugin, PreFilterExtensions, PreFilterPlugin, ScoreColumn, ScorePlugin, Status,
};
use crate::model::{NodeInfo, PodInfo, SpreadConstraint, WhenUnsatisfiable};
use crate::plugins::{MAX_NODE_SCORE, Rejection};
use crate::selectors::{TaintEffect, tolerated};
use crate::snapshot::Snapshot;

/// Plugin name.
pub const NAME: &str = "PodTopologySpread";
/// Upstream `ErrReasonConstraintsNotMatch`.
pub const ERR_REASON_CONSTRAINTS_NOT_MATCH: &str = "node(s) didn't match pod topology spread constraints";
/// Upstream `ErrReasonNodeLabelNotMatch`.
pub const ERR_REASON_NODE_LABEL_NOT_MATCH: &str =
    "node(s) didn't match pod topology spread constraints (missing required label)";

/// Per-constraint counts computed at PreFilter/PreScore.
#[derive(Debug, Clone)]
struct ConstraintCounts {
    constraint: SpreadConstraint,
    counts: HashMap<String, i64>,
    min_match: i64,
    self_match: i64,
}

/// PreFilter state: counts for every hard constraint.
#[derive(Debug, Clone)]
pub struct FilterState {
    constraints: Vec<ConstraintCounts>,
}

fn node_eligible(pod: &PodInfo, c: &SpreadConstraint, node: &NodeInfo, keys: &[&str]) -> bool {
    if !keys.iter().all(|k| node.node.labels.contains_key(*k)) {
        return false;
    }
    if c.honor_node_affinity && !pod.spec.node_affinity_matches(node.name(), &node.node.labels) {
        return false;
    }
    if c.honor_node_taints
        && node
            .node
            .taints
            .iter()
            .any(|t| t.effect != TaintEffect::PreferNoSchedule && !tolerated(&pod.spec.tolerations, t))
    {
        return false;
    }
    true
}

/// Whether `other` counts for `pod`'s constraint `c` (wherever it runs).
fn is_counted(pod: &PodInfo, c: &SpreadConstraint, other: &PodInfo) -> bool {
    !other.deleting && other.key.namespace == pod.key.namespace && c.selector.matches(&other.labels)
}

fn count_matching(pod: &PodInfo, c: &SpreadConstraint, node: &NodeInfo) -> i64 {
    node.pods.iter().filter(|p| is_counted(pod, c, p)).count() as i64
}

/// The global minimum of matching pods over the domains; 0 while fewer than minDomains
/// domains exist.
fn min_match(counts: &HashMap<String, i64>, c: &SpreadConstraint) -> i64 {
    if let Some(md) = c.min_domains
        && (counts.len() as i64) < md as i64
    {
        return 0;
    }
    counts.values().copied().min().unwrap_or(0)
}

fn build(pod: &PodInfo, snapshot: &Snapshot, when: WhenUnsatisfiable) -> Vec<ConstraintCounts> {
    let cs: Vec<&SpreadConstraint> = pod.spec.spread.iter().filter(|c| c.when == when).collect();
    let keys: Vec<&str> = cs.iter().map(|c| c.topology_key.as_str()).collect();
    let mut out = Vec::new();
    for c in cs {
        let mut counts: HashMap<String, i64> = HashMap::new();
        for node in snapshot.nodes() {
            if !node_eligible(pod, c, node, &keys) {
                continue;
            }
            let v = &node.node.labels[&c.topology_key];
            *counts.entry(v.clone()).or_insert(0) += count_matching(pod, c, node);
        }
        let min_match = min_match(&counts, c);
        let self_match = i64::from(c.selector.matches(&pod.labels));
        out.push(ConstraintCounts {
            constraint: c.clone(),
            counts,
            min_match,
            self_match,
        });
    }
    out
}

/// PreFilter; `None` (Skip) when the pod has no hard constraints.
pub fn pre_filter(pod: &PodInfo, snapshot: &Snapshot) -> Option<FilterState> {
    if !pod
        .spec
        .spread
        .iter()
        .any(|c| c.when == WhenUnsatisfiable::DoNotSchedule)
    {
        return None;
    }
    Some(FilterState {
        constraints: build(pod, snapshot, WhenUnsatisfiable::DoNotSchedule),
    })
}

/// Filter.
pub fn filter(state: &FilterState, node: &NodeInfo) -> Result<(), Rejection> {
    for cc in &state.constraints {
        let Some(v) = node.node.labels.get(&cc.constraint.topology_key) else {
            return Err(Rejection::new(
                NAME,
                Code::UnschedulableAndUnresolvable,
                ERR_REASON_NODE_LABEL_NOT_MATCH,
            ));
        };
        let matched = cc.counts.get(v).copied().unwrap_or(0);
        let skew = matched + cc.self_match - cc.min_match;
        if skew > cc.constraint.max_skew as i64 {
            return Err(Rejection::new(
                NAME,
                Code::Unschedulable,
                ERR_REASON_CONSTRAINTS_NOT_MATCH,
            ));
        }
    }
    Ok(())
}

/// PreScore state for soft constraints.
#[derive(Debug, Clone)]
pub struct ScoreState {
    constraints: Vec<(ConstraintCounts, f64)>,
}

/// PreScore over the feasible nodes; `None` (Skip) when the pod has no soft constraints.
pub fn pre_score(pod: &PodInfo, snapshot: &Snapshot, feasible: &[usize]) -> Option<ScoreState> {
    if !pod
        .spec
        .spread
        .iter()
        .any(|c| c.when == WhenUnsatisfiable::ScheduleAnyway)
    {
        return None;
    }
    let built = build(pod, snapshot, WhenUnsatisfiable::ScheduleAnyway);
    let constraints = built
        .into_iter()
        .map(|cc| {
            let domains: HashSet<&String> = feasible
                .iter()
                .filter_map(|&i| snapshot.node(i).node.labels.get(&cc.constraint.topology_key))
                .collect();
            let w = ((domains.len() + 2) as f64).ln();
            (cc, w)
        })
        .collect();
    Some(ScoreState { constraints })
}

/// Raw score, `None` when the node lacks a constraint's key (upstream "ignored" node).
pub fn score(state: &ScoreState, node: &NodeInfo) -> Option<i64> {
    let mut s = 0f64;
    for (cc, w) in &state.constraints {
        let v = node.node.labels.get(&cc.constraint.topology_key)?;
        let cnt = cc.counts.get(v).copied().unwrap_or(0);
        s += cnt as f64 * w + (cc.constraint.max_skew - 1) as f64;
    }
    Some(s.round() as i64)
}

/// NormalizeScore: `100 * (max + min - s) / max`; ignored nodes get 0.
pub fn normalize(scores: &mut [Option<i64>]) -> Vec<i64> {
    let present: Vec<i64> = scores.iter().flatten().copied().collect();
    let (min, max) = (
        present.iter().copied().min().unwrap_or(0),
        present.iter().copied().max().unwrap_or(0),
    );
    scores
        .iter()
        .map(|s| match s {
            None => 0,
            Some(_) if max == 0 => MAX_NODE_SCORE,
            Some(s) => MAX_NODE_SCORE * (max + min - s) / max,
        })
        .collect()
}

/// Upstream `updateWithPod`: counts `other` (`delta` = +1 added, -1 removed) in `node`'s domain
/// for every hard constraint that counts it at PreFilter (same eligibility of the node, same
/// namespace and selector), then recomputes the minimum. Domains never appear or vanish: they
/// come from the nodes, not the pods.
fn update_with_pod(state: &mut FilterState, pod: &PodInfo, other: &PodInfo, node: &NodeInfo, delta: i64) {
    let keys: Vec<&str> = pod
        .spec
        .spread
        .iter()
        .filter(|c| c.when == WhenUnsatisfiable::DoNotSchedule)
        .map(|c| c.topology_key.as_str())
        .collect();
    for cc in &mut state.constraints {
        let c = &cc.constraint;
        if !is_counted(pod, c, other) || !node_eligible(pod, c, node, &keys) {
            continue;
        }
        let v = &node.node.labels[&c.topology_key];
        *cc.counts.entry(v.clone()).or_insert(0) += delta;
        cc.min_match = min_match(&cc.counts, c);
    }
}

/// The plugin: Filter by hard constraints, Score by soft ones (default weight 2), with
/// PreFilter extensions.
#[derive(Debug, Clone, Copy, Default)]
pub struct PodTopologySpread;

impl Plugin for PodTopologySpread {
    fn name(&self) -> &'static str {
        NAME
    }
    /// Any constraint counts pods on other nodes.
    fn node_local(&self, pod: &PodInfo, _: &Snapshot) -> bool {
        pod.spec.spread.is_empty()
    }
}

impl PreFilterPlugin for PodTopologySpread {
    type PreFilterState = FilterState;
    /// [`pre_filter`]: Skip without hard constraints.
    fn pre_filter(&self, pod: &PodInfo, snapshot: &Snapshot) -> Option<FilterState> {
        pre_filter(pod, snapshot)
    }
    fn pre_filter_extensions(&self) -> Option<&dyn PreFilterExtensions<FilterState>> {
        Some(self)
    }
}

impl PreFilterExtensions<FilterState> for PodTopologySpread {
    /// A skipped state stays skipped: it depends on the pod's constraints only.
    fn add_pod(
        &self,
        state: &mut Option<FilterState>,
        pod: &PodInfo,
        other: &PodInfo,
        node: &NodeInfo,
    ) -> Result<(), Status> {
        if let Some(st) = state {
            update_with_pod(st, pod, other, node, 1);
        }
        Ok(())
    }
    fn remove_pod(
        &self,
        state: &mut Option<FilterState>,
        pod: &PodInfo,
        other: &PodInfo,
        node: &NodeInfo,
    ) -> Result<(), Status> {
        if let Some(st) = state {
            update_with_pod(st, pod, other, node, -1);
        }
        Ok(())
    }
}

impl FilterPlugin for PodTopologySpread {
    fn filter(&self, state: &FilterState, _: &PodInfo, node: &NodeInfo) -> Result<(), Rejection> {
        filter(state, node)
    }
}

/// Whether `node` lacks a soft constraint's key (upstream `IgnoredNodes`).
fn ignored(state: &ScoreState, node: &NodeInfo) -> bool {
    state
        .constraints
        .iter()
        .any(|(cc, _)| !node.node.labels.contains_key(&cc.constraint.topology_key))
}

impl ScorePlugin for PodTopologySpread {
    type PreScoreState = ScoreState;
    fn default_weight(&self) -> i64 {
        2
    }
    /// [`pre_score`]: Skip without soft constraints.
    fn pre_score(&self, pod: &PodInfo, snapshot: &Snapshot, nodes: &[usize]) -> Option<ScoreState> {
        pre_score(pod, snapshot, nodes)
    }
    /// [`score`], 0 for an ignored node (as upstream; NormalizeScore gives it 0 anyway).
    fn score(&self, state: &ScoreState, _: &PodInfo, node: &NodeInfo) -> i64 {
        score(state, node).unwrap_or(0)
    }
    /// [`normalize`], with ignored nodes told apart by their labels.
    fn normalize(
        &self,
        state: &ScoreState,
        _: &PodInfo,
        snapshot: &Snapshot,
        nodes: &[usize],
        scores: &mut [i64],
    ) -> ScoreColumn {
        let mut raw: Vec<Option<i64>> = nodes
            .iter()
            .zip(scores.iter())
            .map(|(&i, &s)| (!ignored(state, snapshot.node(i))).then_some(s))
            .collect();
        scores.copy_from_slice(&normalize(&mut raw));
        ScoreColumn::Ranked
    }
}
