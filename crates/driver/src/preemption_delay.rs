//! `preemptionDelaySeconds` (Phalanx; KAI-Scheduler's `preemption-delay`, KAI#1832): a root group that could
//! preempt waits this long after its first unschedulable attempt before it evicts anything, so that a cluster
//! autoscaler (which acts on `PodScheduled=False/Unschedulable` pods, `sigs.k8s.io/karpenter`
//! `pkg/utils/pod/scheduling.go`, Cluster Autoscaler's `filterOutSchedulable`) can add nodes instead of victims.
//!
//! The loop owns one [`PreemptionDelays`]: it records when a root group's first attempt ran, tells the cycle's
//! snapshot to hold the group's preemption while the delay runs (`Snapshot::delay_preemption`; the core drops the
//! victims and says why), and wakes the group when the delay ends, since no cluster event may come to retry it
//! (an autoscaler that adds nothing). The start is kept in memory: a restarted or new leader starts the delay
//! again, which can only delay a preemption, never hasten one. The deadline is written in the members' and the
//! group's condition message ([`message`]), where `phalanx explain` reads it back ([`until_in`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use phalanx_scheduler::{EntityKey, GroupKey, QueuedEntity};

/// The words before the deadline in [`message`].
const UNTIL: &str = "preemption is delayed until ";

/// The reader's words for a running delay: `preemption is delayed until 2026-12-07T00:01:00Z
/// (preemptionDelaySeconds 60), for a cluster autoscaler to add nodes first`. The deadline is RFC 3339, UTC, whole
/// seconds, so that the message does not change from one attempt to the next.
pub fn message(until: Timestamp, delay: Duration) -> String {
    let until = until.round(k8s_openapi::jiff::Unit::Second).unwrap_or(until);
    format!(
        "{UNTIL}{until} (preemptionDelaySeconds {}), for a cluster autoscaler to add nodes first",
        delay.as_secs()
    )
}

/// The deadline a condition message written by [`message`] names, if any. Never panics on any input.
pub fn until_in(message: &str) -> Option<Timestamp> {
    held_in(message).map(|(t, _)| t)
}

/// The deadline and the whole sentence of [`message`] inside a longer condition message, if any.
fn held_in(message: &str) -> Option<(Timestamp, &str)> {
    let at = message.find(UNTIL)?;
    let sentence = &message[at..];
    let until = sentence[UNTIL.len()..].split_whitespace().next()?.parse().ok()?;
    Some((until, sentence))
}

/// For a dry run (`phalanx explain`, `simulate`), which has no memory of earlier attempts: the hold that the running
/// scheduler wrote in the root group's `*InitiallyScheduled` condition, while its deadline is after `now`.
pub(crate) fn shown_hold(
    store: &phalanx_store::Store,
    entity: &QueuedEntity,
    now: Timestamp,
) -> Option<(GroupKey, String)> {
    use phalanx_api::conditions::{COMPOSITE_POD_GROUP_INITIALLY_SCHEDULED, POD_GROUP_INITIALLY_SCHEDULED};
    let (key, _, _) = root_of(entity)?;
    let condition = |cs: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition], t: &str| {
        cs.iter().find(|c| c.type_ == t).map(|c| c.message.clone())
    };
    let msg = match key.kind {
        phalanx_scheduler::GroupKind::PodGroup => {
            let pg = store.pod_group_at(key)?;
            condition(
                crate::convert::pod_group_conditions(&pg),
                POD_GROUP_INITIALLY_SCHEDULED,
            )?
        }
        phalanx_scheduler::GroupKind::CompositePodGroup => {
            let cpg = store.composite_pod_group_at(key)?;
            condition(
                crate::convert::composite_conditions(&cpg),
                COMPOSITE_POD_GROUP_INITIALLY_SCHEDULED,
            )?
        }
    };
    let (until, sentence) = held_in(&msg)?;
    (until > now).then(|| (key.clone(), sentence.to_owned()))
}

/// When a root group's delay started.
#[derive(Debug, Clone)]
struct Started {
    /// The group object's uid: a group deleted and created again under its name starts afresh.
    uid: Arc<str>,
    at: Instant,
    wall: Timestamp,
    /// The deadline of the last attempt (the delay may be changed in the spec in between).
    deadline: Instant,
    /// The group was woken at its deadline already.
    woken: bool,
}

/// The delays of the root groups that wait (see the module docs). Owned by the loop.
#[derive(Debug, Default)]
pub(crate) struct PreemptionDelays {
    started: HashMap<GroupKey, Started>,
}

/// The root group of `entity`, its uid and its own `preemptionDelaySeconds`; `None` for a standalone pod, whose
/// preemption is kube-scheduler's (no delay).
fn root_of(entity: &QueuedEntity) -> Option<(&GroupKey, &Arc<str>, Option<u32>)> {
    if let Some(t) = &entity.tree {
        let r = t.root();
        return Some((&r.key, &r.uid, r.preemption_delay_seconds));
    }
    let g = entity.group.as_ref()?;
    Some((&g.key, &g.uid, g.preemption_delay_seconds))
}

impl PreemptionDelays {
    /// Before `entity`'s cycle: the message to hold its preemption with (`Snapshot::delay_preemption`) while its
    /// delay runs, `None` when it has none (zero) or it is over. The first attempt of a root group starts its delay.
    /// `default` applies when the group's spec does not set one.
    pub(crate) fn before_cycle(
        &mut self,
        entity: &QueuedEntity,
        default: Duration,
        now: Instant,
    ) -> Option<(GroupKey, String)> {
        let (key, uid, own) = root_of(entity)?;
        let delay = own.map_or(default, |s| Duration::from_secs(u64::from(s)));
        if delay.is_zero() {
            self.started.remove(key);
            return None;
        }
        if self.started.get(key).is_none_or(|s| s.uid != *uid) {
            self.started.insert(
                key.clone(),
                Started {
                    uid: uid.clone(),
                    at: now,
                    wall: Timestamp::now(),
                    deadline: now + delay,
                    woken: false,
                },
            );
        }
        let s = self.started.get_mut(key)?;
        s.deadline = s.at + delay;
        if now >= s.deadline {
            return None;
        }
        let wall = s
            .wall
            .checked_add(SignedDuration::try_from(delay).unwrap_or(SignedDuration::MAX))
            .unwrap_or(Timestamp::MAX);
        Some((key.clone(), message(wall, delay)))
    }

    /// After a cycle: a scheduled root's delay is over (a later shortfall of the same group starts a new one).
    pub(crate) fn scheduled(&mut self, entity: &EntityKey) {
        if let EntityKey::Group(g) = entity {
            self.started.remove(g);
        }
    }

    /// The earliest deadline still to wake a group at.
    pub(crate) fn next_wakeup(&self) -> Option<Instant> {
        self.started
            .values()
            .filter(|s| !s.woken)
            .map(|s| s.deadline)
            .min()
    }

    /// The groups whose delay ended by `now` and that were not woken yet: the loop moves them to the active queue.
    pub(crate) fn take_due(&mut self, now: Instant) -> Vec<GroupKey> {
        let mut due = Vec::new();
        for (k, s) in &mut self.started {
            if !s.woken && now >= s.deadline {
                s.woken = true;
                due.push(k.clone());
            }
        }
        due
    }

    /// Forgets the groups `exists` no longer knows (deleted), so that the map follows the cluster.
    pub(crate) fn retain(&mut self, mut exists: impl FnMut(&GroupKey) -> bool) {
        self.started.retain(|k, _| exists(k));
    }

    /// How many root groups have a delay recorded (the loop's `tracked` gauge).
    pub(crate) fn len(&self) -> usize {
        self.started.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use phalanx_scheduler::{GroupInfo, GroupPolicy};

    fn entity(delay: Option<u32>, uid: &str) -> QueuedEntity {
        let mut g = GroupInfo::new("ns", "pg", GroupPolicy::Gang { min_count: 2 });
        g.preemption_delay_seconds = delay;
        g.uid = uid.into();
        QueuedEntity {
            key: EntityKey::Group(g.key.clone()),
            group: Some(Arc::new(g)),
            tree: None,
            pods: vec![],
            attempts: 0,
            timestamp: Instant::now(),
        }
    }

    #[test]
    fn the_deadline_survives_the_message() {
        let t: Timestamp = "2026-12-07T00:01:00Z".parse().unwrap();
        let m = message(t, Duration::from_secs(60));
        assert_eq!(
            m,
            "preemption is delayed until 2026-12-07T00:01:00Z (preemptionDelaySeconds 60), for a cluster \
             autoscaler to add nodes first"
        );
        assert_eq!(
            until_in(&format!(
                "0/3 nodes are available. pod group preemption: x, but {m}"
            )),
            Some(t)
        );
        assert_eq!(until_in("preemption is delayed until never"), None);
        assert_eq!(until_in(""), None);
    }

    #[test]
    fn a_delay_runs_from_the_first_attempt_and_wakes_the_group_once() {
        let mut d = PreemptionDelays::default();
        let t0 = Instant::now();
        let e = entity(None, "u1");
        let (k, m) = d.before_cycle(&e, Duration::from_secs(60), t0).expect("held");
        assert_eq!(k, GroupKey::pod_group("ns", "pg"));
        assert!(until_in(&m).is_some());
        // A later attempt within the delay keeps the same deadline (and message).
        let (_, m2) = d
            .before_cycle(&e, Duration::from_secs(60), t0 + Duration::from_secs(30))
            .unwrap();
        assert_eq!(m, m2);
        assert_eq!(d.next_wakeup(), Some(t0 + Duration::from_secs(60)));
        assert!(d.take_due(t0 + Duration::from_secs(59)).is_empty());
        assert_eq!(d.take_due(t0 + Duration::from_secs(60)), vec![k.clone()]);
        assert!(d.take_due(t0 + Duration::from_secs(61)).is_empty(), "woken once");
        assert_eq!(d.next_wakeup(), None);
        // Over: the attempt after the deadline preempts.
        assert!(
            d.before_cycle(&e, Duration::from_secs(60), t0 + Duration::from_secs(61))
                .is_none()
        );
        // Placed: the next shortfall starts a new delay.
        d.scheduled(&EntityKey::Group(k.clone()));
        assert_eq!(d.len(), 0);
        let later = t0 + Duration::from_secs(100);
        assert!(d.before_cycle(&e, Duration::from_secs(60), later).is_some());
        assert_eq!(d.next_wakeup(), Some(later + Duration::from_secs(60)));
    }

    #[test]
    fn the_spec_overrides_the_default_and_a_new_uid_starts_afresh() {
        let mut d = PreemptionDelays::default();
        let t0 = Instant::now();
        assert!(
            d.before_cycle(&entity(Some(0), "u1"), Duration::from_secs(60), t0)
                .is_none()
        );
        assert_eq!(d.len(), 0);
        assert!(d.before_cycle(&entity(None, "u1"), Duration::ZERO, t0).is_none());
        assert!(
            d.before_cycle(&entity(Some(10), "u1"), Duration::ZERO, t0)
                .is_some()
        );
        let t1 = t0 + Duration::from_secs(11);
        assert!(
            d.before_cycle(&entity(Some(10), "u1"), Duration::ZERO, t1)
                .is_none()
        );
        // The group deleted and created again: its delay starts again.
        assert!(
            d.before_cycle(&entity(Some(10), "u2"), Duration::ZERO, t1)
                .is_some()
        );
        d.retain(|_| false);
        assert_eq!(d.len(), 0);
    }
}
