//! TaintToleration (upstream `plugins/tainttoleration`): NoSchedule and NoExecute taints
//! filter; untolerated PreferNoSchedule taints score (fewer is better, reverse-normalised).

use crate::framework::{Code, FilterPlugin, Plugin, PreFilterPlugin, ScoreColumn, ScorePlugin};
use crate::model::{NodeInfo, PodInfo};
use crate::plugins::{MAX_NODE_SCORE, Rejection, default_normalize};
use crate::selectors::{TaintEffect, tolerated};
use crate::snapshot::Snapshot;

/// Plugin name.
pub const NAME: &str = "TaintToleration";

/// Filter: the first untolerated NoSchedule/NoExecute taint rejects with
/// `node(s) had untolerated taint {key: value}`.
pub fn filter(pod: &PodInfo, node: &NodeInfo) -> Result<(), Rejection> {
    for t in &node.node.taints {
        if t.effect == TaintEffect::PreferNoSchedule {
            continue;
        }
        if !tolerated(&pod.spec.tolerations, t) {
            return Err(Rejection::new(
                NAME,
                Code::UnschedulableAndUnresolvable,
                format!("node(s) had untolerated taint {{{}: {}}}", t.key, t.value),
            ));
        }
    }
    Ok(())
}

/// Raw score: the number of PreferNoSchedule taints not tolerated by the pod's tolerations
/// with effect PreferNoSchedule or empty. Normalised with `default_normalize(100, true)`.
pub fn score(pod: &PodInfo, node: &NodeInfo) -> i64 {
    let mut n = 0;
    for t in &node.node.taints {
        if t.effect != TaintEffect::PreferNoSchedule {
            continue;
        }
        let tolerates = pod
            .spec
            .tolerations
            .iter()
            .filter(|tol| tol.effect.is_none() || tol.effect == Some(TaintEffect::PreferNoSchedule))
            .any(|tol| tol.tolerates(t));
        if !tolerates {
            n += 1;
        }
    }
    n
}

/// The plugin: Filter (NoSchedule, NoExecute) and Score (PreferNoSchedule, default weight 3).
/// Upstream's PreScore only pre-selects the PreferNoSchedule tolerations, which [`score`]
/// does inline, so there is no state.
#[derive(Debug, Clone, Copy, Default)]
pub struct TaintToleration;

impl Plugin for TaintToleration {
    fn name(&self) -> &'static str {
        NAME
    }
    fn node_local(&self, _: &PodInfo, _: &Snapshot) -> bool {
        true
    }
}

impl PreFilterPlugin for TaintToleration {
    type PreFilterState = ();
    fn pre_filter(&self, _: &PodInfo, _: &Snapshot) -> Option<()> {
        Some(())
    }
}

impl FilterPlugin for TaintToleration {
    fn filter(&self, _: &(), pod: &PodInfo, node: &NodeInfo) -> Result<(), Rejection> {
        filter(pod, node)
    }
}

impl ScorePlugin for TaintToleration {
    type PreScoreState = ();
    fn default_weight(&self) -> i64 {
        3
    }
    fn pre_score(&self, _: &PodInfo, _: &Snapshot, _: &[usize]) -> Option<()> {
        Some(())
    }
    fn score(&self, _: &(), pod: &PodInfo, node: &NodeInfo) -> i64 {
        score(pod, node)
    }
    /// `DefaultNormalizeScore(100, true)`. When no node has an untolerated PreferNoSchedule
    /// taint (the common case) every node would get 100: reported as uniform, not computed.
    fn normalize(&self, _: &(), _: &PodInfo, _: &Snapshot, _: &[usize], scores: &mut [i64]) -> ScoreColumn {
        if scores.iter().all(|&s| s == 0) {
            return ScoreColumn::Uniform;
        }
        default_normalize(MAX_NODE_SCORE, true, scores);
        ScoreColumn::Ranked
    }
}
