//! PodGroup controller: protection finalizer, PriorityClass resolution, workloadRef and hierarchy checks,
//! and the member-pod counters in status.
//!
//! Pipeline: meta (finalizer + priority, one guarded merge patch) -> validate (workloadRef, hierarchy, member
//! pods of another scheduler; pure functions over the store) -> build the desired status (pure) -> apply (server-side apply, throttled) ->
//! events on changes.
//!
//! Upstream equivalents: the PodGroupProtection admission plugin and podgroup-protection controller (finalizer
//! `scheduling.k8s.io/podgroup-protection`, removed only when every pod that references the group is terminal
//! or gone), the Priority admission plugin, and the scheduler's runtime hierarchy validation (KEP-6012).
//!
//! Counters: `pods` = non-terminal member pods, `scheduledPods` = those bound to a node, `runningPods` = those
//! in phase Running, `readyPods` = those with `Ready=True`; `succeededPods` and `failedPods` count the terminal
//! members by phase. A status write happens at most once per `min_status_interval` per group (default
//! 1 s), the first one too, so a 1,000-pod group being bound costs a handful of writes, not 1,000.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use phalanx_api::finalizers::POD_GROUP_PROTECTION;
use phalanx_api::v1beta1::PodGroup;
use phalanx_store::{GroupKey, GroupKind};
use serde_json::{Value, json};

use phalanx_scheduler::is_terminal;

use crate::checks;
use crate::context::Ctx;
use crate::error::{Error, Result};
use crate::group::{self, PrioritySpec};
use crate::status::Problem;
use crate::status::{self, WriteDecision};
use crate::workload::report_validity;

/// Controller name in metrics and logs.
pub const CONTROLLER: &str = "podgroup";

/// Member pod counts of one PodGroup.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Non-terminal member pods (these also hold the finalizer).
    pub pods: i32,
    /// Non-terminal member pods bound to a node.
    pub scheduled: i32,
    /// Member pods in phase Running.
    pub running: i32,
    /// Non-terminal member pods whose `Ready` condition is True.
    pub ready: i32,
    /// Member pods in phase Succeeded (they count toward the quorum; not in `pods`).
    pub succeeded: i32,
    /// Member pods in phase Failed.
    pub failed: i32,
}

/// Pure: counts member pods.
pub fn count<'a>(pods: impl IntoIterator<Item = &'a Pod>) -> Counts {
    let mut c = Counts::default();
    for p in pods {
        match p.status.as_ref().and_then(|s| s.phase.as_deref()) {
            Some("Succeeded") => c.succeeded += 1,
            Some("Failed") => c.failed += 1,
            _ => {}
        }
        if is_terminal(p) {
            continue;
        }
        c.pods += 1;
        let ready = p
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        if ready {
            c.ready += 1;
        }
        if p.spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty())
        {
            c.scheduled += 1;
        }
        if p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") {
            c.running += 1;
        }
    }
    c
}

/// Pure: the owned status subset.
pub fn desired_status(
    pg: &PodGroup,
    existing: Option<&Condition>,
    problem: Option<&Problem>,
    counts: Counts,
) -> Value {
    let cond = status::valid_condition(
        existing,
        problem.map(|p| (p.reason.as_str(), p.message.as_str())),
        pg.metadata.generation,
    );
    let mut st = json!({
        "conditions": [cond],
        "pods": counts.pods,
        "scheduledPods": counts.scheduled,
        "runningPods": counts.running,
        "readyPods": counts.ready,
        "succeededPods": counts.succeeded,
        "failedPods": counts.failed,
    });
    if let Some(kind) = pg.spec.scheduling_policy.kind() {
        st["policy"] = json!(kind.as_str());
    }
    st
}

/// Reconciles one PodGroup.
pub async fn reconcile(pg: Arc<PodGroup>, ctx: Ctx) -> Result<Action> {
    ctx.count_reconcile(CONTROLLER);
    let uid = pg.uid().ok_or(Error::MissingField("metadata.uid"))?;
    let ns = pg.namespace().ok_or(Error::MissingField("metadata.namespace"))?;
    if !ctx.is_leader() {
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    let key = GroupKey::pod_group(&ns, &pg.name_any());
    let members = ctx.store.group_members(&key);
    let counts = count(members.iter().map(AsRef::as_ref));
    let reference = pg.object_ref(&());

    if pg.metadata.deletion_timestamp.is_some() {
        if counts.pods == 0 {
            if status::remove_finalizer(&ctx, pg.as_ref(), POD_GROUP_PROTECTION).await? {
                tracing::debug!(podgroup = %key, "all member pods terminal or gone; finalizer removed");
            }
            ctx.forget(&uid);
            return Ok(Action::await_change());
        }
        if pg.finalizers().iter().any(|f| f == POD_GROUP_PROTECTION)
            && ctx.transition(&uid, "deletion", "waiting", None).is_some()
        {
            let note = format!(
                "Deletion waits for {} non-terminal member pod(s) to finish or be deleted",
                counts.pods
            );
            ctx.publish(
                CONTROLLER,
                &reference,
                EventType::Normal,
                "WaitingForPods",
                "Delete",
                note,
            )
            .await;
        }
    }

    let prio = PrioritySpec {
        class_name: pg.spec.priority_class_name.as_deref(),
        priority: pg.spec.priority,
        preemption_policy: pg.spec.preemption_policy,
    };
    let mut problems = group::ensure_meta(&ctx, CONTROLLER, pg.as_ref(), POD_GROUP_PROTECTION, &prio).await?;
    if let Some(r) = &pg.spec.workload_ref {
        problems.extend(checks::workload_ref(
            &ctx.store,
            &ns,
            GroupKind::PodGroup,
            pg.spec.scheduling_policy.kind(),
            r,
        ));
    }
    problems.extend(checks::hierarchy(&ctx.store, &key));
    problems.extend(checks::foreign_members(
        members.iter().map(AsRef::as_ref),
        &ctx.opts.scheduler_names,
    ));
    let problem = checks::combine(&problems);

    let current = status::status_json(pg.status.as_ref());
    let existing = status::existing_valid(&ctx, &uid, &current);
    let desired = desired_status(&pg, existing.as_ref(), problem.as_ref(), counts);
    let decision = status::decide(&ctx, &uid, &desired, &current);
    if decision == WriteDecision::Write {
        status::apply_status(&ctx, CONTROLLER, pg.as_ref(), &desired).await?;
    }
    // The verdict's event goes out with the status write it announces (see `report_validity`).
    if !matches!(decision, WriteDecision::Later(_)) {
        report_validity(
            &ctx,
            CONTROLLER,
            &uid,
            &reference,
            "PodGroup",
            &current,
            problem.as_ref(),
        )
        .await;
    }
    ctx.note_success(&uid);
    Ok(status::after(&decision, ctx.opts.resync))
}

/// Error policy: exponential backoff per object (no hot loop), logged by the caller.
pub fn error_policy(pg: Arc<PodGroup>, err: &Error, ctx: Ctx) -> Action {
    crate::error_action(CONTROLLER, pg.uid().as_deref(), err, &ctx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, PodStatus};

    fn pod(node: Option<&str>, phase: &str) -> Pod {
        // A Running pod is Ready here, as kwok's pod-ready stage makes it.
        let ready = (phase == "Running").then(|| {
            vec![k8s_openapi::api::core::v1::PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]
        });
        Pod {
            spec: Some(PodSpec {
                node_name: node.map(str::to_string),
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some(phase.into()),
                conditions: ready,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn counts_skip_terminal_pods() {
        let pods = [
            pod(None, "Pending"),
            pod(Some("n1"), "Pending"),
            pod(Some("n1"), "Running"),
            pod(Some("n2"), "Succeeded"),
            pod(Some("n2"), "Failed"),
        ];
        assert_eq!(
            count(pods.iter()),
            Counts {
                pods: 3,
                scheduled: 2,
                running: 1,
                ready: 1,
                succeeded: 1,
                failed: 1,
            }
        );
        assert_eq!(count([].iter()), Counts::default());
    }

    #[test]
    fn status_has_counters_policy_and_condition() {
        let pg = PodGroup::new(
            "g",
            phalanx_api::v1beta1::PodGroupSpec {
                scheduling_policy: phalanx_api::v1beta1::PodGroupSchedulingPolicy::gang(2),
                ..Default::default()
            },
        );
        let problem = Problem {
            reason: "ParentNotFound".into(),
            message: "missing".into(),
        };
        let st = desired_status(
            &pg,
            None,
            Some(&problem),
            Counts {
                pods: 3,
                scheduled: 2,
                running: 1,
                ready: 1,
                succeeded: 4,
                failed: 5,
            },
        );
        assert_eq!(st["pods"], 3);
        assert_eq!(st["scheduledPods"], 2);
        assert_eq!(st["runningPods"], 1);
        assert_eq!(st["readyPods"], 1);
        assert_eq!(st["succeededPods"], 4);
        assert_eq!(st["failedPods"], 5);
        assert_eq!(st["policy"], "Gang");
        assert_eq!(st["conditions"][0]["type"], "Valid");
        assert_eq!(st["conditions"][0]["status"], "False");
        assert_eq!(st["conditions"][0]["reason"], "ParentNotFound");
    }
}
