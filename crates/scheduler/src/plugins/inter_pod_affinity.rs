//! InterPodAffinity (upstream `plugins/interpodaffinity`): required affinity and
//! anti-affinity of the incoming pod, the symmetric required anti-affinity of existing pods,
//! and the preferred terms of both sides for scoring. Pods assumed earlier in the same cycle
//! are in the snapshot, so they count. [`InterPodAffinity`] is the plugin; its PreFilter
//! extensions keep the counts up to date as pods are added or removed (upstream
//! `filtering.go` `AddPod`/`RemovePod`).

use std::collections::HashMap;

use crate::framework::{
    Code, FilterPlugin, Plugin, PreFilterExtensions, PreFilterPlugin, ScoreColumn, ScorePlugin, Status,
};
use crate::model::{AffinityTerm, NodeInfo, PodInfo};
use crate::plugins::{MAX_NODE_SCORE, Rejection};
use crate::snapshot::Snapshot;

/// Plugin name.
pub const NAME: &str = "InterPodAffinity";
/// Upstream `ErrReasonAffinityRulesNotMatch`.
pub const ERR_REASON_AFFINITY_RULES_NOT_MATCH: &str = "node(s) didn't match pod affinity rules";
/// Upstream `ErrReasonAntiAffinityRulesNotMatch`.
pub const ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH: &str = "node(s) didn't match pod anti-affinity rules";
/// Upstream `ErrReasonExistingAntiAffinityRulesNotMatch`.
pub const ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH: &str =
    "node(s) didn't satisfy existing pods anti-affinity rules";
/// Upstream default `hardPodAffinityWeight`.
pub const HARD_POD_AFFINITY_WEIGHT: i64 = 1;

type TopoCounts = HashMap<(String, String), i64>;

/// PreFilter state.
#[derive(Debug, Clone, Default)]
pub struct FilterState {
    existing_anti: TopoCounts,
    affinity: TopoCounts,
    anti: TopoCounts,
    self_matches_all: bool,
}

impl FilterState {
    /// An empty state for `pod` (no pod counted yet).
    fn for_pod(pod: &PodInfo) -> FilterState {
        let a = &pod.spec.affinity;
        FilterState {
            self_matches_all: !a.required_affinity.is_empty()
                && a.required_affinity.iter().all(|t| t.matches(pod)),
            ..Default::default()
        }
    }

    /// Whether Filter passes every node for `pod` (upstream PreFilter's Skip: no required
    /// terms of its own and no existing pod's required anti-affinity selects it).
    fn passes_all(&self, pod: &PodInfo) -> bool {
        let a = &pod.spec.affinity;
        a.required_affinity.is_empty() && a.required_anti_affinity.is_empty() && self.existing_anti.is_empty()
    }
}

fn bump(counts: &mut TopoCounts, term: &AffinityTerm, node: &NodeInfo, by: i64) {
    if let Some(v) = node.node.labels.get(&term.topology_key) {
        *counts.entry((term.topology_key.clone(), v.clone())).or_insert(0) += by;
    }
}

/// Upstream `topologyToMatchedTermCount.update`: like [`bump`] by `delta` (+1 or -1), but an
/// entry that drops to zero is removed, so that the state equals the one PreFilter would
/// build (Filter's bootstrap rule and shortcuts test for empty maps).
fn update(counts: &mut TopoCounts, term: &AffinityTerm, node: &NodeInfo, delta: i64) {
    let Some(v) = node.node.labels.get(&term.topology_key) else {
        return;
    };
    let key = (term.topology_key.clone(), v.clone());
    let c = counts.entry(key.clone()).or_insert(0);
    *c += delta;
    if *c == 0 {
        counts.remove(&key);
    }
}

/// Whether any existing pod's affinity term (required or preferred, affinity or anti-affinity)
/// selects `pod`. When it does not and the pod has no terms itself, InterPodAffinity passes
/// every node and scores them all equally, so it can be skipped.
pub fn existing_terms_match(pod: &PodInfo, snapshot: &Snapshot) -> bool {
    if snapshot.pods_with_affinity() == 0 {
        return false;
    }
    snapshot.affinity_pods().any(|(existing, _)| {
        let ea = &existing.spec.affinity;
        existing.key != pod.key
            && (ea.required_anti_affinity.iter().any(|t| t.matches(pod))
                || ea.required_affinity.iter().any(|t| t.matches(pod))
                || ea.preferred_affinity.iter().any(|(_, t)| t.matches(pod))
                || ea.preferred_anti_affinity.iter().any(|(_, t)| t.matches(pod)))
    })
}

/// PreFilter; `None` (Skip) when neither the pod nor any existing pod has affinity terms.
/// Existing pods' terms come from the snapshot's list of pods with affinity; the whole
/// cluster is scanned only for the incoming pod's own required terms.
pub fn pre_filter(pod: &PodInfo, snapshot: &Snapshot) -> Option<FilterState> {
    let a = &pod.spec.affinity;
    let own = !a.required_affinity.is_empty() || !a.required_anti_affinity.is_empty();
    if !own && snapshot.pods_with_affinity() == 0 {
        return None;
    }
    let mut st = FilterState::for_pod(pod);
    for (existing, node) in snapshot.affinity_pods() {
        if existing.key == pod.key {
            continue;
        }
        for t in &existing.spec.affinity.required_anti_affinity {
            if t.matches(pod) {
                bump(&mut st.existing_anti, t, node, 1);
            }
        }
    }
    if own {
        for node in snapshot.nodes() {
            for existing in &node.pods {
                if existing.key == pod.key {
                    continue;
                }
                if !a.required_affinity.is_empty() && a.required_affinity.iter().all(|t| t.matches(existing))
                {
                    for t in &a.required_affinity {
                        bump(&mut st.affinity, t, node, 1);
                    }
                }
                for t in &a.required_anti_affinity {
                    if t.matches(existing) {
                        bump(&mut st.anti, t, node, 1);
                    }
                }
            }
        }
    }
    Some(st)
}

fn count(counts: &TopoCounts, term: &AffinityTerm, node: &NodeInfo) -> Option<i64> {
    let v = node.node.labels.get(&term.topology_key)?;
    Some(
        counts
            .get(&(term.topology_key.clone(), v.clone()))
            .copied()
            .unwrap_or(0),
    )
}

/// Filter: pod affinity, then pod anti-affinity, then existing pods' anti-affinity.
pub fn filter(state: &FilterState, pod: &PodInfo, node: &NodeInfo) -> Result<(), Rejection> {
    let a = &pod.spec.affinity;
    if !a.required_affinity.is_empty() {
        let all = a
            .required_affinity
            .iter()
            .all(|t| count(&state.affinity, t, node).unwrap_or(0) > 0);
        // No matching pod anywhere: a pod matching its own terms may start the domain.
        let bootstrap = state.affinity.is_empty()
            && state.self_matches_all
            && a.required_affinity
                .iter()
                .all(|t| node.node.labels.contains_key(&t.topology_key));
        if !all && !bootstrap {
            return Err(Rejection::new(
                NAME,
                Code::UnschedulableAndUnresolvable,
                ERR_REASON_AFFINITY_RULES_NOT_MATCH,
            ));
        }
    }
    for t in &a.required_anti_affinity {
        if count(&state.anti, t, node).unwrap_or(0) > 0 {
            return Err(Rejection::new(
                NAME,
                Code::Unschedulable,
                ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH,
            ));
        }
    }
    if !state.existing_anti.is_empty() {
        for (k, v) in &node.node.labels {
            if state
                .existing_anti
                .get(&(k.clone(), v.clone()))
                .copied()
                .unwrap_or(0)
                > 0
            {
                return Err(Rejection::new(
                    NAME,
                    Code::Unschedulable,
                    ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH,
                ));
            }
        }
    }
    Ok(())
}

/// PreScore: topology-pair scores; `None` (Skip) when there is nothing to score.
pub fn pre_score(pod: &PodInfo, snapshot: &Snapshot) -> Option<TopoCounts> {
    let a = &pod.spec.affinity;
    let own = !a.preferred_affinity.is_empty() || !a.preferred_anti_affinity.is_empty();
    if !own && snapshot.pods_with_affinity() == 0 {
        return None;
    }
    let mut scores = TopoCounts::new();
    if own {
        for node in snapshot.nodes() {
            for existing in &node.pods {
                if existing.key == pod.key {
                    continue;
                }
                for (w, t) in &a.preferred_affinity {
                    if t.matches(existing) {
                        bump(&mut scores, t, node, *w as i64);
                    }
                }
                for (w, t) in &a.preferred_anti_affinity {
                    if t.matches(existing) {
                        bump(&mut scores, t, node, -(*w as i64));
                    }
                }
            }
        }
    }
    for (existing, node) in snapshot.affinity_pods() {
        if existing.key == pod.key {
            continue;
        }
        let ea = &existing.spec.affinity;
        for t in &ea.required_affinity {
            if t.matches(pod) {
                bump(&mut scores, t, node, HARD_POD_AFFINITY_WEIGHT);
            }
        }
        for (w, t) in &ea.preferred_affinity {
            if t.matches(pod) {
                bump(&mut scores, t, node, *w as i64);
            }
        }
        for (w, t) in &ea.preferred_anti_affinity {
            if t.matches(pod) {
                bump(&mut scores, t, node, -(*w as i64));
            }
        }
    }
    Some(scores)
}

/// Raw score: the sum of the topology-pair scores of the node's labels.
pub fn score(state: &TopoCounts, node: &NodeInfo) -> i64 {
    if state.is_empty() {
        return 0;
    }
    node.node
        .labels
        .iter()
        .map(|(k, v)| state.get(&(k.clone(), v.clone())).copied().unwrap_or(0))
        .sum()
}

/// NormalizeScore: min-max scaling to 0..=100 (all 0 when every score is equal).
pub fn normalize(scores: &mut [i64]) {
    let (Some(min), Some(max)) = (scores.iter().copied().min(), scores.iter().copied().max()) else {
        return;
    };
    let diff = max - min;
    for s in scores.iter_mut() {
        *s = if diff > 0 {
            ((MAX_NODE_SCORE as f64) * ((*s - min) as f64 / diff as f64)) as i64
        } else {
            0
        };
    }
}

/// Upstream `preFilterState.updateWithPod`: counts `other` on `node` (`delta` = +1 added, -1
/// removed) exactly where [`pre_filter`] would have: its required anti-affinity terms that
/// select `pod`, and `pod`'s own required affinity and anti-affinity terms that select it.
/// A skipped state (`None`: `pod` has no required terms and nothing repels it) becomes a
/// computed one when an added pod's anti-affinity selects `pod`; removing a pod from a
/// skipped state changes nothing, since nothing was counted.
fn update_with_pod(
    state: &mut Option<FilterState>,
    pod: &PodInfo,
    other: &PodInfo,
    node: &NodeInfo,
    delta: i64,
) {
    if other.key == pod.key {
        return;
    }
    let a = &pod.spec.affinity;
    let repels = other
        .spec
        .affinity
        .required_anti_affinity
        .iter()
        .any(|t| t.matches(pod));
    let own = !a.required_affinity.is_empty() || !a.required_anti_affinity.is_empty();
    if !repels && !own {
        return;
    }
    let st = match state {
        Some(st) => st,
        None if delta > 0 => state.insert(FilterState::for_pod(pod)),
        None => return,
    };
    for t in &other.spec.affinity.required_anti_affinity {
        if t.matches(pod) {
            update(&mut st.existing_anti, t, node, delta);
        }
    }
    if !a.required_affinity.is_empty() && a.required_affinity.iter().all(|t| t.matches(other)) {
        for t in &a.required_affinity {
            update(&mut st.affinity, t, node, delta);
        }
    }
    for t in &a.required_anti_affinity {
        if t.matches(other) {
            update(&mut st.anti, t, node, delta);
        }
    }
}

/// The plugin: Filter by required terms (both sides), Score by preferred terms and existing
/// pods' required affinity (default weight 2), with PreFilter extensions.
#[derive(Debug, Clone, Copy, Default)]
pub struct InterPodAffinity;

impl Plugin for InterPodAffinity {
    fn name(&self) -> &'static str {
        NAME
    }
    /// Terms of the pod, or of existing pods that select it, relate it to other pods.
    fn node_local(&self, pod: &PodInfo, snapshot: &Snapshot) -> bool {
        pod.spec.affinity.is_empty() && !existing_terms_match(pod, snapshot)
    }
}

impl PreFilterPlugin for InterPodAffinity {
    type PreFilterState = FilterState;
    /// [`pre_filter`], and Skip when its state passes every node (as upstream).
    fn pre_filter(&self, pod: &PodInfo, snapshot: &Snapshot) -> Option<FilterState> {
        pre_filter(pod, snapshot).filter(|st| !st.passes_all(pod))
    }
    fn pre_filter_extensions(&self) -> Option<&dyn PreFilterExtensions<FilterState>> {
        Some(self)
    }
}

impl PreFilterExtensions<FilterState> for InterPodAffinity {
    fn add_pod(
        &self,
        state: &mut Option<FilterState>,
        pod: &PodInfo,
        other: &PodInfo,
        node: &NodeInfo,
    ) -> Result<(), Status> {
        update_with_pod(state, pod, other, node, 1);
        Ok(())
    }
    fn remove_pod(
        &self,
        state: &mut Option<FilterState>,
        pod: &PodInfo,
        other: &PodInfo,
        node: &NodeInfo,
    ) -> Result<(), Status> {
        update_with_pod(state, pod, other, node, -1);
        Ok(())
    }
}

impl FilterPlugin for InterPodAffinity {
    fn filter(&self, state: &FilterState, pod: &PodInfo, node: &NodeInfo) -> Result<(), Rejection> {
        filter(state, pod, node)
    }
}

impl ScorePlugin for InterPodAffinity {
    type PreScoreState = TopoCounts;
    fn default_weight(&self) -> i64 {
        2
    }
    /// [`pre_score`], and Skip when no topology pair scores (every node would get 0).
    fn pre_score(&self, pod: &PodInfo, snapshot: &Snapshot, _: &[usize]) -> Option<TopoCounts> {
        pre_score(pod, snapshot).filter(|s| !s.is_empty())
    }
    fn score(&self, state: &TopoCounts, _: &PodInfo, node: &NodeInfo) -> i64 {
        score(state, node)
    }
    /// [`normalize`]; equal raw scores all become 0.
    fn normalize(
        &self,
        _: &TopoCounts,
        _: &PodInfo,
        _: &Snapshot,
        _: &[usize],
        scores: &mut [i64],
    ) -> ScoreColumn {
        let first = scores.first().copied();
        if scores.iter().all(|&s| Some(s) == first) {
            return ScoreColumn::Uniform;
        }
        normalize(scores);
        ScoreColumn::Ranked
    }
}
