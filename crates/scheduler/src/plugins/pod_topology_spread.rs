//! PodTopologySpread (upstream `plugins/podtopologyspread`): hard constraints filter by skew
//! (`matchNum + selfMatch - minMatch > maxSkew`, honouring minDomains and the node
//! affinity/taints inclusion policies); soft constraints score (fewer matching pods in the
//! node's domain is better). Upstream's cluster-level default constraints (derived from
//! Services/ReplicaSets) are not applied: the core has no such listers.

use std::collections::{HashMap, HashSet};

use crate::framework::Code;
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

fn count_matching(pod: &PodInfo, c: &SpreadConstraint, node: &NodeInfo) -> i64 {
    node.pods
        .iter()
        .filter(|p| !p.deleting && p.key.namespace == pod.key.namespace && c.selector.matches(&p.labels))
        .count() as i64
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
        let mut min_match = counts.values().copied().min().unwrap_or(0);
        if let Some(md) = c.min_domains
            && (counts.len() as i64) < md as i64
        {
            min_match = 0;
        }
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
