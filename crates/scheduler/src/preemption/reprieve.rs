//! The reprieve loop shared by group and single-pod preemption (upstream `reprieveVictim` in
//! `podgrouppreemption.go` and `SelectVictimsOnNode` in `default_preemption.go`): with every
//! candidate evicted, put units back one at a time, PDB-violating units first, each list most
//! important first; a unit whose return breaks the preemptor is a confirmed victim.

use std::cmp::Reverse;

use crate::framework::PreemptionHandle;
use crate::preemption::cost::Cost;
use crate::preemption::pdb::split_by_violation;
use crate::preemption::units::{VictimUnit, importance};
use crate::snapshot::Snapshot;

/// Confirmed victims of one reprieve pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Reprieved {
    /// Indices into the unit list, most important first.
    pub(crate) victims: Vec<usize>,
    /// How many of their pods violate a PDB (upstream `NumPDBViolations`).
    pub(crate) pdb_violations: usize,
}

// Building a cost takes victim units, which read the snapshot; it is done here, beside the reprieve, so that
// `Cost` itself (crate::preemption::cost) stays below the snapshot that stores it.
impl Cost {
    /// Adds a victim unit, `violating` of whose pods violate a PDB.
    pub(crate) fn add(&mut self, unit: &VictimUnit, violating: usize) {
        let priority = i64::from(unit.priority);
        // Unknown start times count as now: later than any known one.
        let start = unit.earliest_start.unwrap_or(i64::MAX);
        if priority > self.highest {
            self.highest = priority;
            self.latest_start = Reverse(start);
        } else if priority == self.highest {
            self.latest_start = Reverse(self.latest_start.0.min(start));
        }
        let pods = unit.len();
        self.pdb_violations += violating;
        self.sum += (priority + i64::from(i32::MAX) + 1) * pods as i64;
        self.pods += pods;
    }

    /// The cost of a reprieve's victims.
    pub(crate) fn of(units: &[VictimUnit], r: &Reprieved) -> Cost {
        let mut c = Cost::NONE;
        for &i in &r.victims {
            c.add(&units[i], 0);
        }
        c.pdb_violations = r.pdb_violations;
        c
    }
}

/// Runs the reprieve over `removed` (indices into `units`, all evicted from `snapshot` by the
/// caller; with PDBs, the units a PDB selects most important first). `fits(snapshot, handle,
/// unit)` says whether the preemptor still fits with `unit` back (it must leave the snapshot as
/// it found it).
/// `independent(unit)` says that no check can depend on `unit` (node-local Filters, and the
/// unit touches no node the preemptor uses): such a unit is reprieved without being put back,
/// which is what keeps preemption among tens of thousands of candidates cheap. The snapshot is
/// restored before returning.
pub(crate) fn reprieve(
    snapshot: &mut Snapshot,
    handle: &mut dyn PreemptionHandle,
    units: &[VictimUnit],
    removed: &[usize],
    independent: &dyn Fn(&VictimUnit) -> bool,
    fits: &mut dyn FnMut(&mut Snapshot, &mut dyn PreemptionHandle, &VictimUnit) -> bool,
) -> Reprieved {
    let has_pdbs = !snapshot.preemption.pdbs().is_empty();
    // With PDBs the budgets are consumed in importance order, so the units a PDB selects must
    // come in that order in `removed` (`units::sort_for_budgets`); whatever the order, the
    // units actually checked are sorted here.
    let (violating, ok) = if !has_pdbs {
        (Vec::new(), (0..removed.len()).collect())
    } else {
        split_by_violation(
            snapshot.preemption.pdbs(),
            removed.iter().map(|&i| units[i].members().map(|m| &m.pdbs[..])),
        )
    };
    let ok = ok.into_iter().map(|pos| (pos, 0)).collect();
    let start = snapshot.mark();
    let mut out = Reprieved::default();
    for list in [violating, ok] {
        // (unit index, its violating pods)
        let mut checked: Vec<(usize, usize)> = list
            .into_iter()
            .filter_map(|(pos, v)| removed.get(pos).map(|&ui| (ui, v)))
            .filter(|&(ui, _)| !independent(&units[ui]))
            .collect();
        checked.sort_by(|&(a, _), &(b, _)| importance(&units[a], &units[b]));
        for (ui, violating) in checked {
            let unit = &units[ui];
            let m = snapshot.mark();
            for member in unit.members() {
                if let Some(n) = member.node {
                    snapshot.assume(member.pod.clone(), n);
                }
            }
            if !fits(snapshot, handle, unit) {
                snapshot.revert_to(m);
                out.victims.push(ui);
                out.pdb_violations += violating;
            }
        }
    }
    snapshot.revert_to(start);
    // Victims were found violating-first; report them most important first.
    out.victims.sort_by(|&a, &b| importance(&units[a], &units[b]));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DisruptionMode, GroupInfo, GroupPolicy, NodeStatic, PodInfo, PodKey};
    use crate::preemption::units;
    use std::sync::Arc;

    /// The units of `pods` (name, priority, group), all on one node.
    fn units_of(pods: &[(&str, i32, Option<&str>)], start: &[(&str, i64)]) -> Vec<VictimUnit> {
        let mut s = Snapshot::new([Arc::new(NodeStatic::simple("n", 1 << 20, 1 << 40, &[]))]);
        let mut g = GroupInfo::new("ns", "gang", GroupPolicy::Basic);
        g.priority = Some(5);
        g.disruption_mode = DisruptionMode::All;
        s.upsert_group_info(Arc::new(g));
        for (name, priority, group) in pods {
            let mut p = PodInfo::simple("ns", name, 1);
            p.priority = *priority;
            p.node_name = Some("n".into());
            p.group_name = group.map(Arc::from);
            s.add_pod(Arc::new(p));
        }
        for (name, t) in start {
            s.set_pod_start_time(&PodKey::new("ns", name), Some(*t));
        }
        units::collect(&s, 1000)
    }

    fn cost(units: &[VictimUnit], names: &[&str]) -> Cost {
        let victims = (0..units.len())
            .filter(|&i| units[i].members().any(|m| names.contains(&&*m.pod.key.name)))
            .collect();
        Cost::of(
            units,
            &Reprieved {
                victims,
                pdb_violations: 0,
            },
        )
    }

    #[test]
    fn a_whole_gang_costs_its_pods() {
        let mut pods: Vec<(String, i32, Option<&str>)> =
            (0..40).map(|i| (format!("g{i}"), 5, Some("gang"))).collect();
        pods.push(("a".into(), 5, None));
        pods.push(("b".into(), 5, None));
        let pods: Vec<(&str, i32, Option<&str>)> =
            pods.iter().map(|(n, p, g)| (n.as_str(), *p, *g)).collect();
        let u = units_of(&pods, &[]);
        let gang = cost(&u, &["g0"]);
        let two = cost(&u, &["a", "b"]);
        assert_eq!((gang.pods, two.pods), (40, 2));
        assert!(two < gang);
    }

    #[test]
    fn order_follows_upstream_pick_one_node() {
        let u = units_of(
            &[
                ("neg-1", -10, None),
                ("neg-2", -10, None),
                ("neg-3", -10, None),
                ("p7", 7, None),
                ("p8", 8, None),
                ("old", 9, None),
                ("young", 9, None),
                ("unknown", 9, None),
            ],
            &[("old", 1_000), ("young", 2_000)],
        );
        // Fewer negative-priority pods are cheaper: the offset keeps the sum growing per pod.
        assert!(cost(&u, &["neg-1"]) < cost(&u, &["neg-1", "neg-2"]));
        // The highest priority comes before the sum and the count.
        assert!(cost(&u, &["neg-1", "neg-2", "neg-3", "p7"]) < cost(&u, &["p8"]));
        // Equal otherwise: the later start of the highest-priority victims is cheaper, and an
        // unknown start counts as now.
        assert!(cost(&u, &["young"]) < cost(&u, &["old"]));
        assert!(cost(&u, &["unknown"]) < cost(&u, &["young"]));
        // PDB violations come first of all.
        let mut violating = cost(&u, &["neg-1"]);
        violating.pdb_violations = 1;
        assert!(cost(&u, &["p8", "old"]) < violating);
        assert!(Cost::NONE < cost(&u, &["neg-1"]));
    }
}
