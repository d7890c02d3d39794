//! PodDisruptionBudgets as preemption sees them, and the split of victim units into
//! PDB-violating and non-violating ones (upstream `filterVictimsWithPDBViolation` in
//! `pkg/scheduler/framework/plugins/defaultpreemption/default_preemption.go` and
//! `FilterVictimsWithPDBViolation` in `pkg/scheduler/framework/preemption/util.go`).

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::policy::v1 as policy;

use crate::model::PodInfo;
use crate::selectors::LabelSelector;

/// A PodDisruptionBudget: the part preemption reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pdb {
    /// metadata.namespace: only pods of this namespace count.
    pub namespace: Arc<str>,
    /// metadata.name (for messages).
    pub name: Arc<str>,
    /// spec.selector. A nil selector matches nothing; an empty one (`{}`) matches every pod of
    /// the namespace (upstream after k/k#141785).
    pub selector: LabelSelector,
    /// status.disruptionsAllowed: evicting more matching pods than this violates the budget.
    pub disruptions_allowed: i32,
    /// status.disruptedPods names: already being evicted, not counted again.
    pub disrupted_pods: BTreeSet<String>,
}

impl Pdb {
    /// Converts an API object. Errors: an invalid selector (upstream then treats the PDB as
    /// matching nothing; the caller may do the same by skipping it).
    pub fn from_api(pdb: &policy::PodDisruptionBudget) -> Result<Pdb, String> {
        let spec = pdb.spec.as_ref();
        let status = pdb.status.as_ref();
        Ok(Pdb {
            namespace: pdb.metadata.namespace.as_deref().unwrap_or("default").into(),
            name: pdb.metadata.name.as_deref().unwrap_or("").into(),
            selector: LabelSelector::from_api(spec.and_then(|s| s.selector.as_ref()))?,
            disruptions_allowed: status.and_then(|s| s.disruptions_allowed).unwrap_or(0),
            disrupted_pods: status
                .and_then(|s| s.disrupted_pods.as_ref())
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default(),
        })
    }

    fn selects(&self, pod: &PodInfo) -> bool {
        *self.namespace == *pod.key.namespace
            && self.selector.matches(&pod.labels)
            && !self.disrupted_pods.contains(&*pod.key.name)
    }
}

/// Budget bookkeeping for one preemption attempt: each PDB's remaining allowed disruptions,
/// decremented as matching pods are counted.
#[derive(Debug, Clone)]
pub(crate) struct Budgets<'a> {
    pdbs: &'a [Pdb],
    allowed: Vec<i64>,
}

impl<'a> Budgets<'a> {
    pub(crate) fn new(pdbs: &'a [Pdb]) -> Budgets<'a> {
        Budgets {
            pdbs,
            allowed: pdbs.iter().map(|p| i64::from(p.disruptions_allowed)).collect(),
        }
    }

    /// Counts the eviction of `pod` against every PDB selecting it; true when one of them goes
    /// below zero. Like upstream, the first exhausted budget stops the count for this pod.
    pub(crate) fn violates(&mut self, pod: &PodInfo) -> bool {
        if self.pdbs.is_empty() {
            return false;
        }
        for (i, pdb) in self.pdbs.iter().enumerate() {
            if !pdb.selects(pod) {
                continue;
            }
            self.allowed[i] -= 1;
            if self.allowed[i] < 0 {
                return true;
            }
        }
        false
    }
}

/// Splits `units` (each a list of pods, in importance order) into violating and non-violating
/// indices, both keeping the input order. A unit violates when any of its pods does; every pod
/// of the unit is counted against the budgets. Returns (violating as (index, how many of its
/// pods violate), non-violating).
pub(crate) fn split_by_violation<'p, I, P>(pdbs: &[Pdb], units: I) -> (Vec<(usize, usize)>, Vec<usize>)
where
    I: IntoIterator<Item = P>,
    P: IntoIterator<Item = &'p PodInfo>,
{
    let mut budgets = Budgets::new(pdbs);
    let mut violating = Vec::new();
    let mut ok = Vec::new();
    for (i, pods) in units.into_iter().enumerate() {
        let mut v = 0;
        for p in pods {
            v += usize::from(budgets.violates(p));
        }
        if v > 0 {
            violating.push((i, v));
        } else {
            ok.push(i);
        }
    }
    (violating, ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::selectors::{Requirement, SelectorOp};

    fn pdb(allowed: i32, app: Option<&str>) -> Pdb {
        Pdb {
            namespace: "ns".into(),
            name: "pdb".into(),
            selector: LabelSelector {
                requirements: app
                    .map(|a| Requirement {
                        key: "app".into(),
                        op: SelectorOp::In,
                        values: vec![a.into()],
                    })
                    .into_iter()
                    .collect(),
                nothing: false,
            },
            disruptions_allowed: allowed,
            disrupted_pods: BTreeSet::new(),
        }
    }

    fn pod(name: &str, app: Option<&str>) -> PodInfo {
        let mut p = PodInfo::simple("ns", name, 100);
        if let Some(a) = app {
            Arc::make_mut(&mut p.labels).insert("app".into(), a.into());
        }
        p
    }

    #[test]
    fn budget_is_consumed_in_order() {
        let pods = [pod("a", Some("foo")), pod("b", Some("foo")), pod("c", None)];
        let pdbs = [pdb(1, Some("foo"))];
        let (v, ok) = split_by_violation(&pdbs, pods.iter().map(std::iter::once));
        assert_eq!((v, ok), (vec![(1, 1)], vec![0, 2]));
    }

    #[test]
    fn empty_selector_matches_all_nil_matches_none_and_disrupted_pods_are_free() {
        let pods = [pod("a", None), pod("b", Some("x"))];
        let all = [pdb(0, None)];
        let (v, _) = split_by_violation(&all, pods.iter().map(std::iter::once));
        assert_eq!(v, vec![(0, 1), (1, 1)]);
        let mut none = pdb(0, None);
        none.selector.nothing = true;
        let (v, _) = split_by_violation(&[none], pods.iter().map(std::iter::once));
        assert!(v.is_empty());
        let mut disrupted = pdb(0, None);
        disrupted.disrupted_pods.insert("a".into());
        let (v, _) = split_by_violation(&[disrupted], pods.iter().map(std::iter::once));
        assert_eq!(v, vec![(1, 1)]);
    }
}
