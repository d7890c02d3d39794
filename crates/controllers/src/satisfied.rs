//! The live `PodGroupSatisfied` condition: whether a gang that has been placed still holds its
//! quorum (KEP-6413 proposes the name; upstream 1.37 has only the terminal
//! `PodGroupInitiallyScheduled`, which never goes back to False).
//!
//! Pure: [`condition`] builds it from the member [`Counts`] and the group's own conditions;
//! [`event`] names the event a change of it deserves. The PodGroup controller writes it with the
//! rest of its status subset and publishes the event once the write is made.
//!
//! Quorum: members bound to a node that are neither being deleted nor marked
//! `DisruptionTarget=True`, plus members that Succeeded, against `minCount` (1 for a basic
//! group). A member on its way out no longer counts, so the condition turns False when the
//! eviction starts, not when the kubelet has finished.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::EventType;
use phalanx_api::conditions::{
    DISRUPTION_TARGET, POD_GROUP_INITIALLY_SCHEDULED, POD_GROUP_SATISFIED, reasons, status,
};
use phalanx_api::v1beta1::PodGroup;

use crate::group_status::Counts;

/// Whether the group's condition `type_` is True.
fn is_true(pg: &PodGroup, type_: &str) -> bool {
    pg.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == type_ && c.status == status::TRUE)
    })
}

/// The `PodGroupSatisfied` condition to write, or `None` while it is not armed (the group has not
/// been `PodGroupInitiallyScheduled=True` and has no such condition yet). `existing` is the
/// condition as last written; its `lastTransitionTime` is kept while the status stays.
/// `scheduled_now`: the same write sets `PodGroupInitiallyScheduled=True` ([`crate::scheduled`]),
/// so the condition is armed in it rather than one write later.
///
/// Reasons: `Satisfied` (True); `Completed` (False: no member left that is not terminal, at
/// least `minCount` Succeeded); `MembersDisrupted` (False: below the quorum and a member or the
/// group carries `DisruptionTarget=True`); `MembersLost` (False: below the quorum otherwise:
/// failed, deleted or not yet replaced members). The message gives the counts.
pub fn condition(
    pg: &PodGroup,
    existing: Option<&Condition>,
    c: Counts,
    scheduled_now: bool,
) -> Option<Condition> {
    if existing.is_none() && !scheduled_now && !is_true(pg, POD_GROUP_INITIALLY_SCHEDULED) {
        return None;
    }
    let min = pg.spec.scheduling_policy.min_count().unwrap_or(1).max(1);
    let held = c.healthy.saturating_add(c.succeeded);
    let disrupted = c.disrupted > 0 || is_true(pg, DISRUPTION_TARGET);
    let (ok, reason, message) = if c.pods == 0 && c.succeeded >= min {
        (
            false,
            reasons::COMPLETED,
            format!(
                "all members finished: {} succeeded, {} failed",
                c.succeeded, c.failed
            ),
        )
    } else if held >= min {
        (
            true,
            reasons::SATISFIED,
            format!(
                "{held} of minCount {min} members bound or succeeded ({} running, {} succeeded)",
                c.running, c.succeeded
            ),
        )
    } else {
        let reason = if disrupted {
            reasons::MEMBERS_DISRUPTED
        } else {
            reasons::MEMBERS_LOST
        };
        // The parts add up to minCount: bound or succeeded, waiting, disrupted, and missing (deleted, terminating
        // (a member on its way out holds no place in the quorum), or not recreated yet). Failed pod objects a Job
        // keeps are counted apart: their slots may be refilled already.
        let waiting = c
            .pods
            .saturating_sub(c.scheduled)
            .saturating_sub(c.terminating)
            .max(0);
        let missing = min
            .saturating_sub(held)
            .saturating_sub(waiting)
            .saturating_sub(c.disrupted)
            .max(0);
        (
            false,
            reason,
            format!(
                "{held} of minCount {min} members bound or succeeded: {waiting} waiting for a node, {} disrupted, \
                 {missing} missing ({} Failed pod(s) kept)",
                c.disrupted, c.failed
            ),
        )
    };
    let status = if ok { status::TRUE } else { status::FALSE };
    let last_transition_time = match existing {
        Some(e) if e.status == status => e.last_transition_time.clone(),
        _ => Time(Timestamp::now()),
    };
    Some(Condition {
        type_: POD_GROUP_SATISFIED.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message,
        observed_generation: pg.metadata.generation,
        last_transition_time,
    })
}

/// The event announcing a change to `now` from the reason last reported (`None` at the first
/// arming: a gang that starts satisfied needs no event): Warning for a loss, Normal for a
/// recovery or a completion.
pub fn event(last: Option<&str>, now: &Condition) -> Option<EventType> {
    match (last, now.reason.as_str()) {
        (None, reasons::SATISFIED) => None,
        (_, reasons::MEMBERS_LOST | reasons::MEMBERS_DISRUPTED) => Some(EventType::Warning),
        _ => Some(EventType::Normal),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use phalanx_api::conditions::new_condition;
    use phalanx_api::v1beta1::{PodGroupSchedulingPolicy, PodGroupSpec, PodGroupStatus};

    fn gang(min: i32, scheduled: bool) -> PodGroup {
        let mut pg = PodGroup::new(
            "g",
            PodGroupSpec {
                scheduling_policy: PodGroupSchedulingPolicy::gang(min),
                ..Default::default()
            },
        );
        if scheduled {
            pg.status = Some(PodGroupStatus {
                conditions: vec![new_condition(
                    POD_GROUP_INITIALLY_SCHEDULED,
                    status::TRUE,
                    reasons::SCHEDULED,
                    "",
                    None,
                    Timestamp::now(),
                )],
                ..Default::default()
            });
        }
        pg
    }

    fn counts(pods: i32, healthy: i32, disrupted: i32, succeeded: i32, failed: i32) -> Counts {
        Counts {
            pods,
            scheduled: healthy + disrupted,
            running: healthy,
            healthy,
            disrupted,
            succeeded,
            failed,
            ..Default::default()
        }
    }

    #[test]
    fn not_armed_before_the_first_schedule() {
        assert!(condition(&gang(3, false), None, counts(3, 0, 0, 0, 0), false).is_none());
        // Armed in the write that sets PodGroupInitiallyScheduled=True.
        let c = condition(&gang(3, false), None, counts(3, 3, 0, 0, 0), true).expect("armed");
        assert_eq!(c.reason, reasons::SATISFIED);
    }

    #[test]
    fn reasons_follow_the_counts() {
        let pg = gang(3, true);
        let c = |n| condition(&pg, None, n, false).expect("armed");
        let ok = c(counts(3, 3, 0, 0, 0));
        assert_eq!((ok.status.as_str(), ok.reason.as_str()), ("True", "Satisfied"));
        assert_eq!(
            ok.message,
            "3 of minCount 3 members bound or succeeded (3 running, 0 succeeded)"
        );
        // Succeeded members hold the quorum too.
        assert_eq!(c(counts(1, 1, 0, 2, 0)).reason, "Satisfied");
        let lost = c(counts(3, 2, 0, 0, 1));
        assert_eq!(
            (lost.status.as_str(), lost.reason.as_str()),
            ("False", "MembersLost")
        );
        assert_eq!(
            lost.message,
            "2 of minCount 3 members bound or succeeded: 1 waiting for a node, 0 disrupted, 0 missing (1 Failed pod(s) kept)"
        );
        // After a restart, before the owner recreates the pods: they are missing.
        let gone = c(counts(0, 0, 0, 0, 1));
        assert_eq!(
            gone.message,
            "0 of minCount 3 members bound or succeeded: 0 waiting for a node, 0 disrupted, 3 missing (1 Failed pod(s) kept)"
        );
        assert_eq!(c(counts(3, 2, 1, 0, 0)).reason, "MembersDisrupted");
        let done = c(counts(0, 0, 0, 3, 1));
        assert_eq!(
            (done.status.as_str(), done.reason.as_str()),
            ("False", "Completed")
        );
        // Every member gone without enough successes is a loss, not a completion.
        assert_eq!(c(counts(0, 0, 0, 1, 2)).reason, "MembersLost");
    }

    #[test]
    fn a_group_disruption_target_names_the_loss() {
        let mut pg = gang(2, true);
        let st = pg.status.as_mut().expect("status");
        st.conditions.push(new_condition(
            DISRUPTION_TARGET,
            status::TRUE,
            reasons::PREEMPTION_BY_SCHEDULER,
            "",
            None,
            Timestamp::now(),
        ));
        let c = condition(&pg, None, counts(2, 1, 0, 0, 0), false).expect("armed");
        assert_eq!(c.reason, "MembersDisrupted");
    }

    #[test]
    fn the_transition_time_stays_while_the_status_does() {
        let pg = gang(2, true);
        let first = condition(&pg, None, counts(2, 1, 0, 0, 1), false).expect("armed");
        let old = Time(Timestamp::UNIX_EPOCH);
        let existing = Condition {
            last_transition_time: old.clone(),
            ..first.clone()
        };
        let again = condition(&pg, Some(&existing), counts(2, 0, 1, 0, 1), false).expect("armed");
        assert_eq!(again.reason, "MembersDisrupted");
        assert_eq!(again.last_transition_time, old);
        let back = condition(&pg, Some(&existing), counts(2, 2, 0, 0, 1), false).expect("armed");
        assert_ne!(back.last_transition_time, old);
        // Once written it stays armed.
        let unarmed = gang(2, false);
        assert!(condition(&unarmed, Some(&existing), counts(2, 2, 0, 0, 0), false).is_some());
    }

    #[test]
    fn events_warn_on_loss_only() {
        let pg = gang(2, true);
        let ok = condition(&pg, None, counts(2, 2, 0, 0, 0), false).expect("armed");
        let lost = condition(&pg, None, counts(2, 1, 0, 0, 1), false).expect("armed");
        assert!(event(None, &ok).is_none());
        assert!(matches!(
            event(Some("Satisfied"), &lost),
            Some(EventType::Warning)
        ));
        assert!(matches!(event(Some("MembersLost"), &ok), Some(EventType::Normal)));
    }
}
