//! InterPodAffinity (upstream `plugins/interpodaffinity`): required affinity and
//! anti-affinity of the incoming pod, the symmetric required anti-affinity of existing pods,
//! and the preferred terms of both sides for scoring. Pods assumed earlier in the same cycle
//! are in the snapshot, so they count.

use std::collections::HashMap;

use crate::framework::Code;
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

fn bump(counts: &mut TopoCounts, term: &AffinityTerm, node: &NodeInfo, by: i64) {
    if let Some(v) = node.node.labels.get(&term.topology_key) {
        *counts.entry((term.topology_key.clone(), v.clone())).or_insert(0) += by;
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
    let mut st = FilterState {
        self_matches_all: !a.required_affinity.is_empty()
            && a.required_affinity.iter().all(|t| t.matches(pod)),
        ..Default::default()
    };
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
