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

/// Indices (into `pdbs`) of the PDBs selecting `pod`, in order: computed once per victim pod
/// and attempt, so that budget counting does not match selectors again.
pub(crate) fn matching(pdbs: &[Pdb], pod: &PodInfo) -> Vec<u32> {
    (0..pdbs.len() as u32)
        .filter(|&i| pdbs[i as usize].selects(pod))
        .collect()
}

/// Budget bookkeeping for one preemption attempt: each PDB's remaining allowed disruptions,
/// decremented as matching pods are counted.
#[derive(Debug, Clone)]
pub(crate) struct Budgets<'a> {
    pdbs: &'a [Pdb],
    allowed: Vec<i64>,
    /// PDBs decremented since the last [`Budgets::restore`].
    touched: Vec<u32>,
}

impl<'a> Budgets<'a> {
    pub(crate) fn new(pdbs: &'a [Pdb]) -> Budgets<'a> {
        Budgets {
            pdbs,
            allowed: pdbs.iter().map(|p| i64::from(p.disruptions_allowed)).collect(),
            touched: Vec::new(),
        }
    }

    /// Counts the eviction of a pod selected by the PDBs `matching` (see [`matching`]; indices
    /// into this bookkeeping's PDBs); true when one of them goes below zero. Like upstream, the
    /// first exhausted budget stops the count for this pod.
    pub(crate) fn violates(&mut self, matching: &[u32]) -> bool {
        for &i in matching {
            let Some(allowed) = self.allowed.get_mut(i as usize) else {
                continue;
            };
            self.touched.push(i);
            *allowed -= 1;
            if *allowed < 0 {
                return true;
            }
        }
        false
    }

    /// Every budget back to its PDB's `disruptionsAllowed` (cost: the decrements since the last
    /// restore), so one bookkeeping serves many independent counts.
    pub(crate) fn restore(&mut self) {
        for i in self.touched.drain(..) {
            let i = i as usize;
            self.allowed[i] = i64::from(self.pdbs[i].disruptions_allowed);
        }
    }
}

/// Splits `units` (each the [`matching`] PDB lists of its pods, units in importance order) into
/// violating and non-violating indices, both keeping the input order. A unit violates when any
/// of its pods does; every pod of the unit is counted against the budgets. Returns (violating
/// as (index, how many of its pods violate), non-violating).
pub(crate) fn split_by_violation<'p, I, P>(pdbs: &[Pdb], units: I) -> (Vec<(usize, usize)>, Vec<usize>)
where
    I: IntoIterator<Item = P>,
    P: IntoIterator<Item = &'p [u32]>,
{
    let mut budgets = Budgets::new(pdbs);
    let mut violating = Vec::new();
    let mut ok = Vec::new();
    for (i, pods) in units.into_iter().enumerate() {
        let mut v = 0;
        for m in pods {
            v += usize::from(budgets.violates(m));
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

    /// Splits units of single pods.
    fn split(pdbs: &[Pdb], pods: &[PodInfo]) -> (Vec<(usize, usize)>, Vec<usize>) {
        let m: Vec<Vec<u32>> = pods.iter().map(|p| matching(pdbs, p)).collect();
        split_by_violation(pdbs, m.iter().map(|v| std::iter::once(&v[..])))
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
        let (v, ok) = split(&pdbs, &pods);
        assert_eq!((v, ok), (vec![(1, 1)], vec![0, 2]));
    }

    #[test]
    fn a_unit_counts_each_of_its_violating_pods() {
        let gang = [
            pod("a", Some("foo")),
            pod("b", Some("foo")),
            pod("c", Some("foo")),
        ];
        let lone = [pod("d", None)];
        let pdbs = [pdb(1, Some("foo"))];
        let m = |pods: &[PodInfo]| pods.iter().map(|p| matching(&pdbs, p)).collect::<Vec<_>>();
        let (g, l) = (m(&gang), m(&lone));
        let g: Vec<&[u32]> = g.iter().map(|m| &m[..]).collect();
        let l: Vec<&[u32]> = l.iter().map(|m| &m[..]).collect();
        let (v, ok) = split_by_violation(&pdbs, [g, l]);
        // The budget covers one of the gang's three pods: two violate.
        assert_eq!((v, ok), (vec![(0, 2)], vec![1]));
    }

    #[test]
    fn empty_selector_matches_all_nil_matches_none_and_disrupted_pods_are_free() {
        let pods = [pod("a", None), pod("b", Some("x"))];
        let all = [pdb(0, None)];
        let (v, _) = split(&all, &pods);
        assert_eq!(v, vec![(0, 1), (1, 1)]);
        let mut none = pdb(0, None);
        none.selector.nothing = true;
        let (v, _) = split(&[none], &pods);
        assert!(v.is_empty());
        let mut disrupted = pdb(0, None);
        disrupted.disrupted_pods.insert("a".into());
        let (v, _) = split(&[disrupted], &pods);
        assert_eq!(v, vec![(1, 1)]);
    }
}
