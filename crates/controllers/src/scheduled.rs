//! One status write per gang at scheduling: the PodGroup controller writes `PodGroupInitiallyScheduled=True`
//! together with its member counters, and holds back the first status of a group that shows nothing yet and only
//! waits for its first schedule.
//!
//! Why: a gang's binds change the counters (`scheduledPods`, then `runningPods`) in the same second in which the
//! scheduler would write the condition. Written by two field managers, that is two applies per gang, and the
//! controller's first status (`Valid=True`, `pods: N`, `scheduledPods: 0`) a third, all while the API server's
//! writes are what limits the binds. kube-scheduler writes one condition per group and no counters
//! (`updatePodGroupCondition`, `pkg/scheduler/schedule_one_podgroup.go`). Both rules apply only while
//! [`crate::ControllerOptions::initially_scheduled`] is set, that is when the scheduler runs in the same process
//! and leaves the condition to us (`phalanx_driver::SchedulerOptions::initially_scheduled_by_controllers`).
//!
//! The condition is set by the same rule as the scheduler's repair of a lost write (`catch_up_conditions` in
//! `crates/driver/src/dispatcher/conditions.rs`): the bound members of this deployment's scheduler reach the quorum
//! (`minCount`, 1 for a basic group). Upstream sets it when the group's cycle succeeds, a moment before the binds
//! land; here it follows the binds, by at most the controller's `min_status_interval`. It is terminal once True
//! (upstream: never back to False), so a True condition, whoever wrote it, is carried on unchanged.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use phalanx_api::conditions::{POD_GROUP_INITIALLY_SCHEDULED, new_condition, reasons, status};
use phalanx_api::v1beta1::PodGroup;
use phalanx_store::PodRecord;

use crate::checks::scheduler_matches;
use crate::group_status::{Counts, LiveStatus};

/// Pure: the `PodGroupInitiallyScheduled` condition the controller writes for a standalone PodGroup, or `None`
/// when it leaves the condition alone (not placed yet: the scheduler's `False` entries stay the scheduler's).
///
/// `existing` is the condition as last written or cached: when True it is returned unchanged (terminal; omitting
/// an entry this manager owns from an apply would delete it). Otherwise True/`Scheduled` with an empty message,
/// as upstream's group success, once the members that were bound to a node reach `minCount` (1 for a basic group)
/// and a member names one of `scheduler_names`. Finished members count (a Failed or Succeeded pod keeps its
/// `spec.nodeName`): a gang that lost a member in the second between its binds and this write was placed all the
/// same, and its `PodGroupSatisfied` (and so its `recoveryPolicy`) depends on this condition.
pub fn condition(
    pg: &PodGroup,
    existing: Option<&Condition>,
    members: &[std::sync::Arc<PodRecord>],
    scheduler_names: &[String],
) -> Option<Condition> {
    if pg.spec.parent_composite_pod_group_name.is_some() {
        // A tree's groups follow the tree's cycle; the scheduler writes theirs.
        return None;
    }
    if let Some(c) = existing.filter(|c| c.status == status::TRUE) {
        return Some(c.clone());
    }
    let quorum = pg.spec.scheduling_policy.min_count().unwrap_or(1).max(1);
    let placed = members.iter().filter(|p| p.node_name().is_some()).count();
    let quorum = usize::try_from(quorum).unwrap_or(usize::MAX);
    let ours = members
        .iter()
        .any(|p| scheduler_matches(p.scheduler_name(), scheduler_names));
    (placed >= quorum && ours).then(|| {
        new_condition(
            POD_GROUP_INITIALLY_SCHEDULED,
            status::TRUE,
            reasons::SCHEDULED,
            "",
            pg.metadata.generation,
            Timestamp::now(),
        )
    })
}

/// Pure: whether the first status write of a group can wait for its first schedule. True when the group shows
/// nothing yet (`shown` false: no condition on the object, neither ours nor the scheduler's, and no recent write of
/// ours), it is valid (`problem` false) and not being deleted, its members are all waiting for a node (none bound,
/// none finished), and there is nothing else to say (`live` is empty). The write then comes with the binds. A group
/// the scheduler cannot place yet gets its counters as soon as the scheduler has said why it waits
/// (`Unschedulable`, `WaitingForQuorum`, ...): `kubectl get` then shows how many pods it has, at the cost of one
/// write more, only for a group that waits.
pub fn first_write_waits(
    shown: bool,
    problem: bool,
    deleting: bool,
    counts: Counts,
    live: &LiveStatus,
) -> bool {
    !shown
        && !problem
        && !deleting
        && counts.pods > 0
        && counts.scheduled == 0
        && counts.succeeded == 0
        && counts.failed == 0
        && *live == LiveStatus::default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use phalanx_store::PodRecord;
    use serde_json::json;
    use std::sync::Arc;

    fn group(min_count: Option<i32>, parent: Option<&str>) -> PodGroup {
        let policy = match min_count {
            Some(n) => json!({"gang": {"minCount": n}}),
            None => json!({"basic": {}}),
        };
        serde_json::from_value(json!({
            "apiVersion": "scheduling.phalanx.dev/v1beta1", "kind": "PodGroup",
            "metadata": {"name": "g", "namespace": "ns", "generation": 3},
            "spec": {"schedulingPolicy": policy, "parentCompositePodGroupName": parent},
        }))
        .unwrap()
    }

    fn member(scheduler: &str, node: Option<&str>, phase: &str) -> Arc<PodRecord> {
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"schedulerName": scheduler, "nodeName": node, "containers": [{"name": "c"}]},
            "status": {"phase": phase},
        }))
        .unwrap();
        Arc::new(PodRecord::from_pod(&pod))
    }

    /// `bound` members on a node (`Running`), `finished` bound ones that Failed, `waiting` without a node.
    fn members(scheduler: &str, bound: usize, finished: usize, waiting: usize) -> Vec<Arc<PodRecord>> {
        let mut v = Vec::new();
        v.extend((0..bound).map(|_| member(scheduler, Some("n1"), "Running")));
        v.extend((0..finished).map(|_| member(scheduler, Some("n1"), "Failed")));
        v.extend((0..waiting).map(|_| member(scheduler, None, "Pending")));
        v
    }

    fn names() -> Vec<String> {
        vec!["phalanx-scheduler".to_string()]
    }

    const OURS: &str = "phalanx-scheduler";

    #[test]
    fn true_once_the_quorum_was_bound() {
        let pg = group(Some(4), None);
        assert!(condition(&pg, None, &members(OURS, 3, 0, 1), &names()).is_none());
        let c = condition(&pg, None, &members(OURS, 4, 0, 0), &names()).expect("4 bound = minCount");
        assert_eq!(
            (
                c.type_.as_str(),
                c.status.as_str(),
                c.reason.as_str(),
                c.message.as_str()
            ),
            (POD_GROUP_INITIALLY_SCHEDULED, "True", "Scheduled", "")
        );
        assert_eq!(c.observed_generation, Some(3));
        // A member that failed after its bind was placed too (the chaos suite's member-kill: without it the gang
        // never armed PodGroupSatisfied, and its RestartGroup never ran).
        assert!(condition(&pg, None, &members(OURS, 3, 1, 1), &names()).is_some());
        // A basic group needs one.
        assert!(condition(&group(None, None), None, &members(OURS, 1, 0, 3), &names()).is_some());
    }

    #[test]
    fn left_alone_for_trees_other_schedulers_and_false_entries() {
        let placed = members(OURS, 4, 0, 0);
        assert!(condition(&group(Some(1), Some("root")), None, &placed, &names()).is_none());
        let theirs = members("default-scheduler", 4, 0, 0);
        assert!(condition(&group(Some(1), None), None, &theirs, &names()).is_none());
        // The scheduler's False stays its own until the quorum is bound.
        let unschedulable = new_condition(
            POD_GROUP_INITIALLY_SCHEDULED,
            "False",
            "Unschedulable",
            "0/5 nodes",
            Some(3),
            Timestamp::now(),
        );
        let waiting = members(OURS, 0, 0, 4);
        assert!(condition(&group(Some(4), None), Some(&unschedulable), &waiting, &names()).is_none());
    }

    #[test]
    fn true_is_kept_as_it_is() {
        let earlier = new_condition(
            POD_GROUP_INITIALLY_SCHEDULED,
            "True",
            "Scheduled",
            "",
            Some(1),
            "2026-01-01T00:00:00Z".parse().unwrap(),
        );
        // Even with every member gone: terminal once True.
        let c = condition(&group(Some(4), None), Some(&earlier), &[], &names());
        assert_eq!(c.as_ref(), Some(&earlier));
    }

    #[test]
    fn only_a_waiting_valid_group_that_shows_nothing_waits() {
        let waiting = Counts {
            pods: 8,
            ..Counts::default()
        };
        let none = LiveStatus::default();
        assert!(first_write_waits(false, false, false, waiting, &none));
        assert!(
            !first_write_waits(true, false, false, waiting, &none),
            "shows a condition (ours or the scheduler's)"
        );
        assert!(
            !first_write_waits(false, true, false, waiting, &none),
            "a problem is said at once"
        );
        assert!(
            !first_write_waits(false, false, true, waiting, &none),
            "being deleted"
        );
        assert!(
            !first_write_waits(false, false, false, Counts::default(), &none),
            "no member"
        );
        let bound = Counts {
            scheduled: 1,
            ..waiting
        };
        assert!(!first_write_waits(false, false, false, bound, &none));
        let done = Counts { failed: 1, ..waiting };
        assert!(!first_write_waits(false, false, false, done, &none));
        let restarted = LiveStatus {
            restarts: Some(1),
            ..LiveStatus::default()
        };
        assert!(!first_write_waits(false, false, false, waiting, &restarted));
    }
}
