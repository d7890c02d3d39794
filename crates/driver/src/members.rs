//! Members that would break a gang: pods that name one of our groups but another `spec.schedulerName`.
//!
//! The queue holds only pods of this scheduler, so such a pod is invisible to quorum, and the other scheduler may
//! bind it outside the gang. Upstream's `validatePodGroup` (`pkg/scheduler/schedule_one_podgroup.go`) fails a group
//! whose members name different schedulers with SchedulerError; the driver does the same before the core runs, with
//! upstream's message ([`ValidationError::SchedulerNameMismatch`]), and names the pod in the quorum message of a group
//! still waiting for its pods.

use std::sync::Arc;

use phalanx_scheduler::resources::Resources;
use phalanx_scheduler::validation::ValidationError;
use phalanx_scheduler::{
    ConditionReason, ConditionType, Decision, EntityKey, FailureReason, GroupCondition, GroupKey, GroupKind,
    Outcome, PodFailure, QueuedEntity, Requeue, RequeueMode,
};
use phalanx_store::{PodRecord, Store};

/// The leaf PodGroups an entity schedules (its group, or every leaf of its tree).
pub(crate) fn entity_leaves(store: &Store, entity: &EntityKey) -> Vec<GroupKey> {
    match entity {
        EntityKey::Pod(_) => vec![],
        EntityKey::Group(g) if g.kind == GroupKind::CompositePodGroup => store
            .hierarchy()
            .subtree(g)
            .into_iter()
            .filter(|k| k.kind == GroupKind::PodGroup)
            .collect(),
        EntityKey::Group(g) => vec![g.clone()],
    }
}

/// Pending members of `leaves` that name another scheduler than `ours` (our `spec.schedulerName`), with one
/// pod of ours to compare against.
pub(crate) fn foreign_member(
    store: &Store,
    ours_name: &str,
    leaves: &[GroupKey],
) -> Option<(Arc<PodRecord>, Option<Arc<PodRecord>>)> {
    let mut ours = None;
    let mut foreign = None;
    for l in leaves {
        for p in store.group_members(l) {
            if p.is_terminal() {
                continue;
            }
            if p.scheduler_name() == ours_name {
                ours.get_or_insert(p);
            } else if p.node_name().is_none() {
                foreign.get_or_insert(p);
            }
        }
    }
    foreign.map(|f| (f, ours))
}

/// Upstream's message for a group whose members name different schedulers (`ours_name` is ours).
pub(crate) fn foreign_message(ours_name: &str, foreign: &PodRecord, ours: Option<&PodRecord>) -> String {
    let key = |p: &PodRecord| p.key().to_string();
    ValidationError::SchedulerNameMismatch {
        first_name: ours_name.to_owned(),
        first_pod: ours.map(key).unwrap_or_default(),
        name: foreign.scheduler_name().to_owned(),
        pod: key(foreign),
    }
    .to_string()
}

/// When the entity has a member of another scheduler: the SchedulerError decision for it (nothing binds, every
/// pending pod and the group say why, the entity backs off). `None` when every member is ours.
pub(crate) fn foreign_decision(store: &Store, ours_name: &str, entity: &QueuedEntity) -> Option<Decision> {
    let leaves = entity_leaves(store, &entity.key);
    let (foreign, ours) = foreign_member(store, ours_name, &leaves)?;
    let message = foreign_message(ours_name, &foreign, ours.as_deref());
    let mut d = Decision::empty(entity.key.clone(), Outcome::Error);
    for p in &entity.pods {
        d.failures.push(PodFailure {
            pod: p.key.clone(),
            uid: p.uid.clone(),
            reason: FailureReason::SchedulerError,
            message: message.clone(),
        });
    }
    if let EntityKey::Group(g) = &entity.key {
        let (type_, generation) = match (&entity.group, &entity.tree) {
            (Some(gi), _) => (ConditionType::PodGroupInitiallyScheduled, gi.generation),
            (None, Some(t)) => (
                ConditionType::CompositePodGroupInitiallyScheduled,
                t.root().generation,
            ),
            (None, None) => (ConditionType::PodGroupInitiallyScheduled, 0),
        };
        d.conditions.push(GroupCondition {
            group: g.clone(),
            type_,
            status: false,
            reason: ConditionReason::GroupError,
            message,
            observed_generation: generation,
        });
    }
    d.requeue = Some(Requeue {
        pods: entity.pods.iter().map(|p| p.key.clone()).collect(),
        mode: RequeueMode::Backoff,
        short_of: Resources::default(),
    });
    Some(d)
}
