//! TaintToleration (upstream `plugins/tainttoleration`): NoSchedule and NoExecute taints
//! filter; untolerated PreferNoSchedule taints score (fewer is better, reverse-normalised).

use crate::framework::Code;
use crate::model::{NodeInfo, PodInfo};
use crate::plugins::Rejection;
use crate::selectors::{TaintEffect, tolerated};

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
