//! The owner line of an explanation (issue 38): which workload object a group was made for and by which rule, e.g.
//! `LeaderWorkerSet infer, replica group 1: leader infer-1 + 3 workers, all or nothing`. Read from the groups the
//! owner integration created (`crates/controllers/src/integrations`): their `scheduling.phalanx.dev/owner-uid`
//! label, controller reference and `scheduling.phalanx.dev/members` selector.

use phalanx_api::owners::{LabelMatch, MEMBERS, MemberSelector, OWNER_UID_LABEL};
use phalanx_controllers::integrations::kinds::lws;
use phalanx_scheduler::model::{GroupKey, GroupKind};
use phalanx_store::Store;

/// Describes the owner of the group tree under `root`, or `None` when the integration did not make it.
pub(super) fn describe(store: &Store, root: &GroupKey) -> Option<String> {
    let meta = match root.kind {
        GroupKind::PodGroup => store.pod_group_at(root)?.metadata.clone(),
        GroupKind::CompositePodGroup => store.composite_pod_group_at(root)?.metadata.clone(),
    };
    meta.labels.as_ref()?.get(OWNER_UID_LABEL)?;
    let owner = phalanx_store::owners::controller_of(&meta)?;
    let leaves: Vec<GroupKey> = store
        .hierarchy()
        .subtree(root)
        .into_iter()
        .filter(|g| g.kind == GroupKind::PodGroup)
        .collect();
    let mut parts = Vec::new();
    let mut replica_group = None;
    for leaf in &leaves {
        let Some(pg) = store.pod_group_at(leaf) else {
            continue;
        };
        let members = store.group_members(leaf);
        let selector = pg
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(MEMBERS))
            .and_then(|m| MemberSelector::parse(m).ok())
            .unwrap_or_default();
        let wanted = |label: &str| match selector.0.get(label) {
            Some(LabelMatch::Equals(v)) => Some(v.clone()),
            _ => None,
        };
        if let Some(i) = wanted(lws::GROUP_INDEX_LABEL) {
            replica_group = Some(i);
        }
        let gang = pg.spec.scheduling_policy.gang.as_ref().map(|g| g.min_count);
        // The part's name is its template's (a replicated job, `leader`, `workers`, a worker group, `launcher`).
        let part = pg.spec.workload_ref.as_ref().map(|r| r.template_name.as_str());
        let plural = |n: i32| if n == 1 { "" } else { "s" };
        parts.push(match (part, gang) {
            (Some("leader"), _) => match members.first() {
                Some(p) => format!("leader {}", p.name()),
                None => "leader (not created yet)".to_owned(),
            },
            (Some("workers"), Some(n)) => format!("{n} worker{}", plural(n)),
            (Some(r), Some(n)) => format!("{r} ({n} pod{})", plural(n)),
            (Some(r), None) => format!("{r} (pods one by one)"),
            (None, Some(n)) => format!("one gang of {n}"),
            (None, None) => "pods one by one".to_owned(),
        });
    }
    let whole = if root.kind == GroupKind::CompositePodGroup {
        ", all or nothing"
    } else if leaves.len() == 1 && parts.len() == 1 && owner.kind == "JobSet" {
        " (a stage of its own: its jobs start in order)"
    } else {
        ""
    };
    let at = replica_group
        .map(|i| format!(", replica group {i}"))
        .unwrap_or_default();
    // The unit's required topology: its composite's, else its (single) group's.
    let required = match root.kind {
        GroupKind::CompositePodGroup => store
            .composite_pod_group_at(root)
            .and_then(|c| c.spec.scheduling_constraints.clone())
            .and_then(|s| s.topology.first().map(|t| t.key.clone())),
        GroupKind::PodGroup => store
            .pod_group_at(root)
            .and_then(|g| g.spec.scheduling_constraints.clone())
            .and_then(|s| s.topology.first().map(|t| t.key.clone())),
    };
    let within = required.map(|k| format!(", in one {k}")).unwrap_or_default();
    Some(format!(
        "{} {}{at}: {}{whole}{within}",
        owner.kind,
        owner.name,
        parts.join(" + ")
    ))
}
