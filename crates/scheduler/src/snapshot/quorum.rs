//! The members of a group that count toward its quorum (upstream's `ScheduledPodsCount` in
//! `pkg/scheduler/framework/plugins/gangscheduling`, fed by the scheduler cache's assigned and assumed pods).

use super::Snapshot;
use crate::model::GroupKey;

impl Snapshot {
    /// Number of scheduled (assigned or assumed) members of a group that are not being deleted, plus the
    /// Succeeded ones ([`Snapshot::set_completed`]): the quorum counts work done, not only work running. A member
    /// with a `deletionTimestamp` still holds its node's capacity, but no place in the gang: after a restart, or
    /// while a finalizer holds deleted members Terminating, a replacement waits for enough mates to run together
    /// instead of being bound alone beside pods on their way out.
    pub fn scheduled_count(&self, g: &GroupKey) -> usize {
        let Some(st) = self.groups.get(g) else {
            return self.completed_count(g);
        };
        let deleting = |k| self.pods.get(k).is_some_and(|l| l.pod.deleting);
        let live = st.scheduled.iter().filter(|(k, _)| !deleting(k)).count();
        live + self.completed_count(g)
    }

    /// Number of members of a group that have Succeeded, as last set by [`Snapshot::set_completed`].
    pub fn completed_count(&self, g: &GroupKey) -> usize {
        self.completed.get(g).copied().unwrap_or(0)
    }
}
