//! NodeAffinity (upstream `plugins/nodeaffinity`): `nodeSelector` and required terms filter
//! (every operator, `matchFields` on `metadata.name`); preferred terms score by weight.

use crate::framework::{Code, FilterPlugin, Plugin, PreFilterPlugin, ScoreColumn, ScorePlugin};
use crate::model::{NodeInfo, PodInfo};
use crate::plugins::{MAX_NODE_SCORE, Rejection, default_normalize};
use crate::snapshot::Snapshot;

/// Plugin name.
pub const NAME: &str = "NodeAffinity";
/// Upstream `ErrReasonPod`.
pub const ERR_REASON_POD: &str = "node(s) didn't match Pod's node affinity/selector";

/// Filter.
pub fn filter(pod: &PodInfo, node: &NodeInfo) -> Result<(), Rejection> {
    if pod.spec.node_affinity_matches(node.name(), &node.node.labels) {
        Ok(())
    } else {
        Err(Rejection::new(
            NAME,
            Code::UnschedulableAndUnresolvable,
            ERR_REASON_POD,
        ))
    }
}

/// Raw score: sum of the weights of matching preferred terms (normalised by the maximum).
pub fn score(pod: &PodInfo, node: &NodeInfo) -> i64 {
    pod.spec
        .preferred_node_affinity
        .iter()
        .filter(|(_, t)| t.matches(node.name(), &node.node.labels))
        .map(|(w, _)| *w as i64)
        .sum()
}

/// The plugin: Filter (node selector and required terms) and Score (preferred terms, default
/// weight 2). Neither needs state: the terms are parsed into [`crate::model::PodSpecInfo`].
#[derive(Debug, Clone, Copy, Default)]
pub struct NodeAffinity;

impl Plugin for NodeAffinity {
    fn name(&self) -> &'static str {
        NAME
    }
    fn node_local(&self, _: &PodInfo, _: &Snapshot) -> bool {
        true
    }
}

impl PreFilterPlugin for NodeAffinity {
    type PreFilterState = ();
    fn pre_filter(&self, _: &PodInfo, _: &Snapshot) -> Option<()> {
        Some(())
    }
}

impl FilterPlugin for NodeAffinity {
    fn filter(&self, _: &(), pod: &PodInfo, node: &NodeInfo) -> Result<(), Rejection> {
        filter(pod, node)
    }
}

impl ScorePlugin for NodeAffinity {
    type PreScoreState = ();
    fn default_weight(&self) -> i64 {
        2
    }
    /// Skip without preferred terms, as upstream's PreScore.
    fn pre_score(&self, pod: &PodInfo, _: &Snapshot, _: &[usize]) -> Option<()> {
        (!pod.spec.preferred_node_affinity.is_empty()).then_some(())
    }
    fn score(&self, _: &(), pod: &PodInfo, node: &NodeInfo) -> i64 {
        score(pod, node)
    }
    /// `DefaultNormalizeScore(100, false)`; all zero stays all zero.
    fn normalize(&self, _: &(), _: &PodInfo, _: &Snapshot, _: &[usize], scores: &mut [i64]) -> ScoreColumn {
        if scores.iter().all(|&s| s == 0) {
            return ScoreColumn::Uniform;
        }
        default_normalize(MAX_NODE_SCORE, false, scores);
        ScoreColumn::Ranked
    }
}
