//! The reprieve loop shared by group and single-pod preemption (upstream `reprieveVictim` in
//! `podgrouppreemption.go` and `SelectVictimsOnNode` in `default_preemption.go`): with every
//! candidate evicted, put units back one at a time, PDB-violating units first, each list most
//! important first; a unit whose return breaks the preemptor is a confirmed victim.

use crate::framework::PreemptionHandle;
use crate::preemption::pdb::split_by_violation;
use crate::preemption::units::{VictimUnit, importance};
use crate::snapshot::Snapshot;

/// Confirmed victims of one reprieve pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Reprieved {
    /// Indices into the unit list, most important first.
    pub(crate) victims: Vec<usize>,
    /// How many of them violate a PDB.
    pub(crate) pdb_violations: usize,
}

/// How much a set of victims disrupts, compared lexicographically (smaller is better): PDB
/// violations, victim units, highest victim priority, sum of victim priorities.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Cost {
    pub(crate) pdb_violations: usize,
    pub(crate) units: usize,
    pub(crate) highest: i64,
    pub(crate) sum: i64,
}

impl Cost {
    pub(crate) fn of(units: &[VictimUnit], r: &Reprieved) -> Cost {
        Cost {
            pdb_violations: r.pdb_violations,
            units: r.victims.len(),
            highest: r
                .victims
                .iter()
                .map(|&i| i64::from(units[i].priority))
                .max()
                .unwrap_or(i64::MIN),
            sum: r.victims.iter().map(|&i| i64::from(units[i].priority)).sum(),
        }
    }
}

/// Runs the reprieve over `removed` (indices into `units`, all evicted from `snapshot` by the
/// caller; sorted most important first when the snapshot has PDBs). `fits(snapshot, handle,
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
    let pdbs = snapshot.preemption.pdbs().to_vec();
    // With PDBs the budget is consumed in importance order, so `removed` must come sorted
    // that way (the callers sort fully then); without, only the units actually checked need
    // ordering, and they are sorted here.
    let (violating, ok) = if pdbs.is_empty() {
        (Vec::new(), (0..removed.len()).collect())
    } else {
        split_by_violation(
            &pdbs,
            removed.iter().map(|&i| units[i].members().map(|m| &*m.pod)),
        )
    };
    let start = snapshot.mark();
    let mut out = Reprieved::default();
    for (list, is_violating) in [(violating, true), (ok, false)] {
        let mut checked: Vec<usize> = list
            .into_iter()
            .filter_map(|pos| removed.get(pos).copied())
            .filter(|&ui| !independent(&units[ui]))
            .collect();
        if pdbs.is_empty() {
            checked.sort_by(|&a, &b| importance(&units[a], &units[b]));
        }
        for ui in checked {
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
                out.pdb_violations += usize::from(is_violating);
            }
        }
    }
    snapshot.revert_to(start);
    // Victims were found violating-first; report them most important first.
    out.victims.sort_by(|&a, &b| importance(&units[a], &units[b]));
    out
}
