//! `spec.recoveryPolicy` (Phalanx addition): what the PodGroup controller does when a placed gang
//! falls below its quorum, read from the live `PodGroupSatisfied` condition ([`crate::satisfied`]).
//!
//! Pure: [`decide`] turns the policy, the condition and the restart record into one [`Step`]; the
//! controller writes the status first (restart count and time, or `PodGroupFailed`) and only then
//! deletes pods, so a crash between the two can only skip a restart, never repeat one. The grace
//! period, for `RestartGroup` and `Fail` alike, counts from the later of the loss (the condition's
//! `lastTransitionTime`) and the last restart: a restarted gang gets the whole period to be placed
//! again, and the loss a restart makes itself (its deleted members, `MembersLost` while the owner
//! recreates them) is never a new failure, whichever action the other kind of loss names.
//!
//! `RestartGroup` deletes the members that are still bound, not terminal and not already being
//! deleted (a preemption victim keeps its `DisruptionTarget` reason, which the scheduler's
//! preemption tracker reads): those are what a partial gang holds. Members still pending hold
//! nothing; a gang with none bound waits as it is. A restart once counted is finished: members it
//! left bound (a delete refused by the API server, an admission policy, a lost lease) are deleted on
//! the next reconcile ([`Step::Finish`], [`left_over`]) without a new count.
//!
//! An invalid group (`Valid=False`, e.g. a member of another scheduler) gets no recovery action.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use phalanx_api::conditions::{DISRUPTION_TARGET, POD_GROUP_FAILED, reasons, status};
use phalanx_api::v1beta1::{
    CompositePodGroupTemplate, PodGroup, PodGroupTemplate, RecoveryAction, RecoveryPolicy, Workload,
    WorkloadSpec,
};
use phalanx_store::PodRecord;
use phalanx_store::Store;

/// The recovery policy that applies to `pg`: its own `spec.recoveryPolicy`, else that of the Workload template its
/// `spec.workloadRef` names (searched through the CompositePodGroup templates too), else none.
pub fn effective_policy(store: &Store, pg: &PodGroup) -> Option<RecoveryPolicy> {
    if let Some(p) = &pg.spec.recovery_policy {
        return Some(p.clone());
    }
    let r = pg.spec.workload_ref.as_ref()?;
    let ns = pg.namespace()?;
    let w = store
        .workloads()
        .get(&ObjectRef::<Workload>::new(&r.workload_name).within(&ns))?;
    template_policy(&w.spec, &r.template_name)
}

/// The `recoveryPolicy` of the PodGroupTemplate `name` anywhere in `spec`.
fn template_policy(spec: &WorkloadSpec, name: &str) -> Option<RecoveryPolicy> {
    fn in_pgs(list: Option<&Vec<PodGroupTemplate>>, name: &str) -> Option<Option<RecoveryPolicy>> {
        list?
            .iter()
            .find(|t| t.name == name)
            .map(|t| t.recovery_policy.clone())
    }
    fn in_cpgs(list: Option<&Vec<CompositePodGroupTemplate>>, name: &str) -> Option<Option<RecoveryPolicy>> {
        list?.iter().find_map(|c| {
            in_pgs(c.pod_group_templates.as_ref(), name)
                .or_else(|| in_cpgs(c.composite_pod_group_templates.as_ref(), name))
        })
    }
    in_pgs(spec.pod_group_templates.as_ref(), name)
        .or_else(|| in_cpgs(spec.composite_pod_group_templates.as_ref(), name))
        .flatten()
}

/// The members a `RestartGroup` deletes: not terminal, bound to a node and not being deleted
/// already (a terminating member is on its way out; marking it again would overwrite the reason
/// of its `DisruptionTarget`, e.g. `PreemptionByScheduler`).
pub fn bound_members(members: &[Arc<PodRecord>]) -> impl Iterator<Item = &Arc<PodRecord>> {
    members
        .iter()
        .filter(|p| !p.is_terminal() && p.node_name().is_some() && p.deletion_timestamp.is_none())
}

/// Whether `pod` carries `DisruptionTarget=True` with reason `RestartedByRecoveryPolicy`: the mark a
/// restart puts on the members it deletes.
pub fn marked_by_restart(pod: &PodRecord) -> bool {
    pod.condition(DISRUPTION_TARGET).is_some_and(|c| {
        c.status == status::TRUE && c.reason.as_deref() == Some(reasons::RESTARTED_BY_RECOVERY_POLICY)
    })
}

/// The members a counted restart left behind: among [`bound_members`], those marked by a restart
/// ([`marked_by_restart`]: the mark was written, the delete was not) or bound (`PodScheduled=True`,
/// whose `lastTransitionTime` the API server sets at the bind) strictly before `last_restart`, the
/// group's `status.lastRestartTime` (whole seconds, as the API stores it). A member bound after
/// the restart, or pending at it, is a new member and is not counted. Empty without a restart.
pub fn left_over(
    members: &[Arc<PodRecord>],
    last_restart: Option<Timestamp>,
) -> impl Iterator<Item = &Arc<PodRecord>> {
    bound_members(members).filter(move |p| {
        let Some(restart) = last_restart else {
            return false;
        };
        let bound_before = p
            .condition("PodScheduled")
            .filter(|c| c.status == status::TRUE)
            .and_then(|c| c.last_transition_time.as_ref())
            .is_some_and(|t| t.0 < restart);
        marked_by_restart(p) || bound_before
    })
}

/// What the controller does about a group's recovery policy now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing: no policy or `None`, the gang is satisfied or completed, it already failed, it is
    /// invalid, or `RestartGroup` has no bound member to delete.
    Nothing,
    /// Within the grace period: look again after this long. `fail`: the action is `Fail`, or
    /// `RestartGroup` has reached `maxRestarts`, so the end of the grace period fails the group.
    Wait {
        /// Time left of the grace period.
        left: Duration,
        /// What comes at its end: `PodGroupFailed` (true) or a restart.
        fail: bool,
    },
    /// `RestartGroup` now: delete the bound members. `number` is this restart's (1 for the first).
    Restart {
        /// The restart count once this one is made.
        number: i32,
    },
    /// Finish restart `number` (already counted): delete the members it left bound
    /// ([`left_over`]), with no new count and no new status.
    Finish {
        /// `status.restarts`, the restart being finished.
        number: i32,
    },
    /// Set `PodGroupFailed=True` with this reason and message.
    Fail {
        /// `MembersLost`, `MembersDisrupted` or `MaxRestartsReached`.
        reason: String,
        /// Names the policy and the loss.
        message: String,
    },
}

/// What [`decide`] looks at.
#[derive(Clone, Copy, Debug)]
pub struct Facts<'a> {
    /// `spec.recoveryPolicy`.
    pub policy: Option<&'a RecoveryPolicy>,
    /// The `PodGroupSatisfied` condition being written (`None` while not armed).
    pub satisfied: Option<&'a Condition>,
    /// `PodGroupFailed` is already True.
    pub failed: bool,
    /// The group is valid (`Valid=True` in the status being written); an invalid one gets no action.
    pub valid: bool,
    /// `status.restarts` so far.
    pub restarts: i32,
    /// `status.lastRestartTime`.
    pub last_restart: Option<Timestamp>,
    /// Non-terminal members bound to a node and not being deleted.
    pub bound: i32,
    /// Members the last restart left bound ([`left_over`]).
    pub left_over: i32,
    /// Now.
    pub now: Timestamp,
}

/// The step for a group; see the module documentation.
pub fn decide(f: Facts<'_>) -> Step {
    let (Some(policy), Some(sat)) = (f.policy, f.satisfied) else {
        return Step::Nothing;
    };
    let lost = sat.status == status::FALSE
        && (sat.reason == reasons::MEMBERS_LOST || sat.reason == reasons::MEMBERS_DISRUPTED);
    if f.failed || !f.valid || !lost {
        return Step::Nothing;
    }
    if f.left_over > 0 && f.restarts > 0 {
        return Step::Finish { number: f.restarts };
    }
    let action = policy.action_for(sat.reason == reasons::MEMBERS_DISRUPTED);
    let since = f
        .last_restart
        .map_or(sat.last_transition_time.0, |r| r.max(sat.last_transition_time.0));
    let grace = Duration::from_secs(u64::try_from(policy.grace_seconds()).unwrap_or(0));
    let elapsed = f.now.duration_since(since).try_into().unwrap_or(Duration::ZERO);
    let left = grace.checked_sub(elapsed).filter(|l| !l.is_zero());
    match action {
        RecoveryAction::None => Step::Nothing,
        RecoveryAction::Fail => match left {
            Some(left) => Step::Wait { left, fail: true },
            None => Step::Fail {
                reason: sat.reason.clone(),
                message: format!("recoveryPolicy Fail: {}", sat.message),
            },
        },
        RecoveryAction::RestartGroup => {
            // A gang with nothing bound holds nothing: it waits whole, like a new one (also right after a
            // restart, while its members terminate and its owner recreates them).
            if f.bound == 0 {
                return Step::Nothing;
            }
            let exhausted = policy.max_restarts.filter(|max| f.restarts >= *max);
            match (left, exhausted) {
                (Some(left), _) => Step::Wait {
                    left,
                    fail: exhausted.is_some(),
                },
                (None, Some(max)) => Step::Fail {
                    reason: reasons::MAX_RESTARTS_REACHED.to_string(),
                    message: format!(
                        "recoveryPolicy RestartGroup: restarted {} time(s) (maxRestarts {max}) and below minCount \
                         again for {} s: {}",
                        f.restarts,
                        grace.as_secs(),
                        sat.message
                    ),
                },
                (None, None) => Step::Restart {
                    number: f.restarts.saturating_add(1),
                },
            }
        }
    }
}

/// The `PodGroupFailed` condition to write: `existing` as it is once True (terminal), a new one for
/// a [`Step::Fail`], else none.
pub fn failed_condition(
    existing: Option<&Condition>,
    step: &Step,
    generation: Option<i64>,
) -> Option<Condition> {
    if let Some(c) = existing.filter(|c| c.status == status::TRUE) {
        return Some(c.clone());
    }
    let Step::Fail { reason, message } = step else {
        return None;
    };
    Some(Condition {
        type_: POD_GROUP_FAILED.to_string(),
        status: status::TRUE.to_string(),
        reason: reason.clone(),
        message: message.clone(),
        observed_generation: generation,
        last_transition_time: Time(Timestamp::now()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lost(reason: &str, at: Timestamp) -> Condition {
        Condition {
            type_: "PodGroupSatisfied".into(),
            status: "False".into(),
            reason: reason.into(),
            message: "2 of minCount 3 members bound or succeeded".into(),
            observed_generation: None,
            last_transition_time: Time(at),
        }
    }

    fn policy(action: RecoveryAction, max: Option<i32>) -> RecoveryPolicy {
        RecoveryPolicy {
            action: Some(action),
            grace_period_seconds: Some(60),
            max_restarts: max,
            ..Default::default()
        }
    }

    fn facts<'a>(p: &'a RecoveryPolicy, c: &'a Condition, now: Timestamp) -> Facts<'a> {
        Facts {
            policy: Some(p),
            satisfied: Some(c),
            failed: false,
            valid: true,
            restarts: 0,
            last_restart: None,
            bound: 2,
            left_over: 0,
            now,
        }
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).expect("time")
    }

    #[test]
    fn restart_after_the_grace_period_counted_from_the_loss_or_the_last_restart() {
        let p = policy(RecoveryAction::RestartGroup, Some(2));
        let c = lost("MembersLost", at(0));
        assert_eq!(
            decide(facts(&p, &c, at(20))),
            Step::Wait {
                left: Duration::from_secs(40),
                fail: false
            }
        );
        assert_eq!(decide(facts(&p, &c, at(60))), Step::Restart { number: 1 });
        let after_restart = Facts {
            restarts: 1,
            last_restart: Some(at(60)),
            ..facts(&p, &c, at(90))
        };
        assert_eq!(
            decide(after_restart),
            Step::Wait {
                left: Duration::from_secs(30),
                fail: false
            }
        );
        // Nothing bound: nothing to restart (the recreated gang waits whole).
        assert_eq!(
            decide(Facts {
                bound: 0,
                ..facts(&p, &c, at(200))
            }),
            Step::Nothing
        );
    }

    #[test]
    fn max_restarts_ends_in_failure_after_the_grace_period() {
        let p = policy(RecoveryAction::RestartGroup, Some(2));
        let c = lost("MembersLost", at(100));
        let exhausted = |now, last_restart, bound| Facts {
            restarts: 2,
            last_restart,
            bound,
            ..facts(&p, &c, now)
        };
        // Right after the last allowed restart the recreated gang waits whole: nothing to do.
        assert_eq!(decide(exhausted(at(101), Some(at(100)), 0)), Step::Nothing);
        // A loss with members bound gets the grace period too, then fails instead of restarting.
        assert_eq!(
            decide(exhausted(at(130), Some(at(50)), 2)),
            Step::Wait {
                left: Duration::from_secs(30),
                fail: true
            }
        );
        let Step::Fail { reason, message } = decide(exhausted(at(160), Some(at(50)), 2)) else {
            panic!("expected Fail");
        };
        assert_eq!(reason, "MaxRestartsReached");
        assert!(message.contains("maxRestarts 2"), "{message}");
    }

    #[test]
    fn fail_waits_the_grace_period_and_is_terminal() {
        // Issue 35 changed this: `Fail` had no grace period; it now has RestartGroup's.
        let p = policy(RecoveryAction::Fail, None);
        let c = lost("MembersDisrupted", at(0));
        assert_eq!(
            decide(facts(&p, &c, at(0))),
            Step::Wait {
                left: Duration::from_secs(60),
                fail: true
            }
        );
        let step = decide(facts(&p, &c, at(60)));
        assert!(matches!(&step, Step::Fail { reason, .. } if reason == "MembersDisrupted"));
        let cond = failed_condition(None, &step, Some(1)).expect("condition");
        assert_eq!(
            (cond.type_.as_str(), cond.status.as_str()),
            ("PodGroupFailed", "True")
        );
        // Once failed: nothing more, and the condition stays as written.
        assert_eq!(
            decide(Facts {
                failed: true,
                ..facts(&p, &c, at(65))
            }),
            Step::Nothing
        );
        assert_eq!(failed_condition(Some(&cond), &Step::Nothing, Some(2)), Some(cond));
        // A grace period of 0 fails at once.
        let now = RecoveryPolicy {
            grace_period_seconds: Some(0),
            ..p.clone()
        };
        assert!(matches!(decide(facts(&now, &c, at(0))), Step::Fail { .. }));
    }

    #[test]
    fn a_mixed_policy_does_not_fail_the_gang_for_its_own_restart() {
        // onDisruption RestartGroup, onFailure Fail: the restart deletes the members, and while the owner
        // recreates them the condition reads MembersLost (False since the disruption at 0).
        let p = RecoveryPolicy {
            on_disruption: Some(RecoveryAction::RestartGroup),
            on_failure: Some(RecoveryAction::Fail),
            grace_period_seconds: Some(60),
            ..Default::default()
        };
        let disrupted = lost("MembersDisrupted", at(0));
        assert_eq!(decide(facts(&p, &disrupted, at(60))), Step::Restart { number: 1 });
        let after = lost("MembersLost", at(0));
        let restarted = |now, bound| Facts {
            restarts: 1,
            last_restart: Some(at(60)),
            bound,
            ..facts(&p, &after, now)
        };
        assert_eq!(
            decide(restarted(at(61), 0)),
            Step::Wait {
                left: Duration::from_secs(59),
                fail: true
            }
        );
        // Not placed again within a whole grace period after the restart: now it is a failure.
        assert!(matches!(
            decide(restarted(at(120), 0)),
            Step::Fail { reason, .. } if reason == "MembersLost"
        ));
    }

    #[test]
    fn an_invalid_group_gets_no_action() {
        let p = policy(RecoveryAction::RestartGroup, None);
        let c = lost("MembersLost", at(0));
        assert_eq!(
            decide(Facts {
                valid: false,
                ..facts(&p, &c, at(100))
            }),
            Step::Nothing
        );
        let f = policy(RecoveryAction::Fail, None);
        assert_eq!(
            decide(Facts {
                valid: false,
                ..facts(&f, &c, at(100))
            }),
            Step::Nothing
        );
    }

    #[test]
    fn a_restart_cut_short_is_finished_without_a_new_count() {
        let p = policy(RecoveryAction::RestartGroup, Some(1));
        let c = lost("MembersLost", at(0));
        let cut_short = |left_over| Facts {
            restarts: 1,
            last_restart: Some(at(60)),
            left_over,
            ..facts(&p, &c, at(61))
        };
        assert_eq!(decide(cut_short(1)), Step::Finish { number: 1 });
        assert_eq!(
            decide(cut_short(0)),
            Step::Wait {
                left: Duration::from_secs(59),
                fail: true
            }
        );
        // Without a restart there is nothing to finish (left_over is empty then anyway).
        assert_eq!(
            decide(Facts {
                left_over: 2,
                ..facts(&p, &c, at(10))
            }),
            Step::Wait {
                left: Duration::from_secs(50),
                fail: false
            }
        );
    }

    fn member(name: &str, bound_at: Option<i64>, deleting: bool, marked: bool) -> Arc<PodRecord> {
        let mut conditions = vec![];
        if let Some(s) = bound_at {
            conditions.push(serde_json::json!({
                "type": "PodScheduled", "status": "True", "lastTransitionTime": Time(at(s)),
            }));
        }
        if marked {
            conditions.push(serde_json::json!({
                "type": "DisruptionTarget", "status": "True", "reason": "RestartedByRecoveryPolicy",
            }));
        }
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": name, "namespace": "ns",
                "deletionTimestamp": deleting.then(|| Time(at(70))),
            },
            "spec": { "nodeName": bound_at.map(|_| "n1"), "containers": [{ "name": "c" }] },
            "status": { "phase": "Running", "conditions": conditions },
        }))
        .expect("pod");
        Arc::new(PodRecord::from_pod(&pod))
    }

    #[test]
    fn left_over_members_are_those_bound_before_the_restart_or_marked_by_it() {
        let members = [
            member("old", Some(10), false, false),
            member("old-deleting", Some(10), true, true),
            member("marked", Some(61), false, true),
            member("new", Some(61), false, false),
            member("same-second", Some(60), false, false),
            member("pending", None, false, false),
        ];
        let names = |last| -> Vec<&str> { left_over(&members, last).map(|p| p.name()).collect() };
        assert_eq!(names(Some(at(60))), ["old", "marked"]);
        assert!(names(None).is_empty());
        // A terminating member is left alone: the restart does not mark or delete it again.
        let bound: Vec<&str> = bound_members(&members).map(|p| p.name()).collect();
        assert_eq!(bound, ["old", "marked", "new", "same-second"]);
    }

    #[test]
    fn none_satisfied_and_completed_do_nothing() {
        let none = policy(RecoveryAction::None, None);
        let c = lost("MembersLost", at(0));
        assert_eq!(decide(facts(&none, &c, at(100))), Step::Nothing);
        let p = policy(RecoveryAction::Fail, None);
        let done = lost("Completed", at(0));
        assert_eq!(decide(facts(&p, &done, at(100))), Step::Nothing);
        let ok = Condition {
            status: "True".into(),
            reason: "Satisfied".into(),
            ..c.clone()
        };
        assert_eq!(decide(facts(&p, &ok, at(100))), Step::Nothing);
        assert_eq!(
            decide(Facts {
                policy: None,
                ..facts(&p, &c, at(100))
            }),
            Step::Nothing
        );
    }

    #[test]
    fn a_template_policy_is_found_in_nested_composite_templates() {
        let spec: WorkloadSpec = serde_json::from_value(serde_json::json!({
            "podGroupTemplates": [{"name": "driver", "schedulingPolicy": {"basic": {}}}],
            "compositePodGroupTemplates": [{
                "name": "root", "schedulingPolicy": {"basic": {}},
                "compositePodGroupTemplates": [{
                    "name": "mid", "schedulingPolicy": {"basic": {}},
                    "podGroupTemplates": [{"name": "workers", "schedulingPolicy": {"gang": {"minCount": 2}},
                                           "recoveryPolicy": {"action": "Fail"}}],
                }],
            }],
        }))
        .expect("spec");
        assert_eq!(
            template_policy(&spec, "workers").and_then(|p| p.action),
            Some(RecoveryAction::Fail)
        );
        assert!(template_policy(&spec, "driver").is_none());
        assert!(template_policy(&spec, "nope").is_none());
    }

    #[test]
    fn disruption_and_failure_choose_apart() {
        let p = RecoveryPolicy {
            on_disruption: Some(RecoveryAction::RestartGroup),
            on_failure: Some(RecoveryAction::Fail),
            grace_period_seconds: Some(0),
            ..Default::default()
        };
        let d = lost("MembersDisrupted", at(0));
        assert_eq!(decide(facts(&p, &d, at(0))), Step::Restart { number: 1 });
        let l = lost("MembersLost", at(0));
        assert!(matches!(decide(facts(&p, &l, at(0))), Step::Fail { .. }));
    }
}
