//! `spec.recoveryPolicy` (Phalanx addition): what the PodGroup controller does when a placed gang
//! falls below its quorum, read from the live `PodGroupSatisfied` condition ([`crate::satisfied`]).
//!
//! Pure: [`decide`] turns the policy, the condition and the restart record into one [`Step`]; the
//! controller writes the status first (restart count and time, or `PodGroupFailed`) and only then
//! deletes pods, so a crash between the two can only skip a restart, never repeat one. The grace
//! period counts from the later of the loss (the condition's `lastTransitionTime`) and the last
//! restart, so a restarted gang gets the whole period to be placed again.
//!
//! `RestartGroup` deletes the members that are still bound (and not terminal): those are what a
//! partial gang holds. Members still pending hold nothing; a gang with none bound waits as it is.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use phalanx_api::conditions::{POD_GROUP_FAILED, reasons, status};
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

/// The members a `RestartGroup` deletes: not terminal and bound to a node.
pub fn bound_members(members: &[Arc<PodRecord>]) -> impl Iterator<Item = &Arc<PodRecord>> {
    members
        .iter()
        .filter(|p| !p.is_terminal() && p.node_name().is_some())
}

/// What the controller does about a group's recovery policy now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing: no policy or `None`, the gang is satisfied or completed, it already failed, or
    /// `RestartGroup` has no bound member to delete.
    Nothing,
    /// `RestartGroup` within its grace period: look again after this long. `fail`: `maxRestarts` is
    /// reached, so the end of the grace period fails the group instead of restarting it.
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
    /// `status.restarts` so far.
    pub restarts: i32,
    /// `status.lastRestartTime`.
    pub last_restart: Option<Timestamp>,
    /// Non-terminal members bound to a node.
    pub bound: i32,
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
    if f.failed || !lost {
        return Step::Nothing;
    }
    match policy.action_for(sat.reason == reasons::MEMBERS_DISRUPTED) {
        RecoveryAction::None => Step::Nothing,
        RecoveryAction::Fail => Step::Fail {
            reason: sat.reason.clone(),
            message: format!("recoveryPolicy Fail: {}", sat.message),
        },
        RecoveryAction::RestartGroup => {
            // A gang with nothing bound holds nothing: it waits whole, like a new one (also right after a
            // restart, while its owner recreates the pods).
            if f.bound == 0 {
                return Step::Nothing;
            }
            let exhausted = policy.max_restarts.filter(|max| f.restarts >= *max);
            let since = f
                .last_restart
                .map_or(sat.last_transition_time.0, |r| r.max(sat.last_transition_time.0));
            let grace = Duration::from_secs(u64::try_from(policy.grace_seconds()).unwrap_or(0));
            let elapsed = f.now.duration_since(since).try_into().unwrap_or(Duration::ZERO);
            match (grace.checked_sub(elapsed), exhausted) {
                (Some(left), _) if !left.is_zero() => Step::Wait {
                    left,
                    fail: exhausted.is_some(),
                },
                (_, Some(max)) => Step::Fail {
                    reason: reasons::MAX_RESTARTS_REACHED.to_string(),
                    message: format!(
                        "recoveryPolicy RestartGroup: restarted {} time(s) (maxRestarts {max}) and below minCount \
                         again for {} s: {}",
                        f.restarts,
                        grace.as_secs(),
                        sat.message
                    ),
                },
                (_, None) => Step::Restart {
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
            restarts: 0,
            last_restart: None,
            bound: 2,
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
    fn fail_is_at_once_and_terminal() {
        let p = policy(RecoveryAction::Fail, None);
        let c = lost("MembersDisrupted", at(0));
        let step = decide(facts(&p, &c, at(0)));
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
                ..facts(&p, &c, at(5))
            }),
            Step::Nothing
        );
        assert_eq!(failed_condition(Some(&cond), &Step::Nothing, Some(2)), Some(cond));
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
