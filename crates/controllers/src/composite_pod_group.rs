//! CompositePodGroup controller: protection finalizer (held while child groups exist, KEP-6012), PriorityClass
//! resolution, workloadRef and hierarchy checks along the parent chain (cycles, depth, Workload, policy and
//! disruption rules), and child-group counts in status.
//!
//! Same pipeline as the PodGroup controller ([`crate::pod_group`]).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use phalanx_api::conditions::{
    COMPOSITE_POD_GROUP_INITIALLY_SCHEDULED, POD_GROUP_INITIALLY_SCHEDULED, is_condition_true,
};
use phalanx_api::finalizers::COMPOSITE_POD_GROUP_PROTECTION;
use phalanx_api::v1alpha3::CompositePodGroup;
use phalanx_store::{GroupKey, GroupKind, Store};
use serde_json::{Value, json};

use crate::checks;
use crate::context::Ctx;
use crate::error::{Error, Result};
use crate::group::{self, PrioritySpec};
use crate::status::Problem;
use crate::status::{self, VALID, WriteDecision};
use crate::workload::report_validity;

/// Controller name in metrics and logs.
pub const CONTROLLER: &str = "compositepodgroup";

/// Child-group counts of one CompositePodGroup.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChildCounts {
    /// Existing PodGroups and CompositePodGroups naming this group as parent.
    pub children: i32,
    /// Those whose `…InitiallyScheduled` condition is True.
    pub scheduled: i32,
}

/// Counts the existing children of `key` from the store.
pub fn child_counts(store: &Store, key: &GroupKey) -> ChildCounts {
    let children = store.hierarchy().children(key);
    let mut c = ChildCounts::default();
    for child in children {
        let scheduled = match child.kind {
            GroupKind::PodGroup => match store.pod_group(&child.namespace, &child.name) {
                Some(g) => g
                    .status
                    .as_ref()
                    .is_some_and(|s| is_condition_true(&s.conditions, POD_GROUP_INITIALLY_SCHEDULED)),
                None => continue,
            },
            GroupKind::CompositePodGroup => match store.composite_pod_group(&child.namespace, &child.name) {
                Some(g) => g.status.as_ref().is_some_and(|s| {
                    is_condition_true(&s.conditions, COMPOSITE_POD_GROUP_INITIALLY_SCHEDULED)
                }),
                None => continue,
            },
        };
        c.children += 1;
        if scheduled {
            c.scheduled += 1;
        }
    }
    c
}

/// Pure: the owned status subset.
pub fn desired_status(
    cpg: &CompositePodGroup,
    existing: Option<&Condition>,
    problem: Option<&Problem>,
    counts: ChildCounts,
) -> Value {
    let cond = status::valid_condition(
        existing,
        problem.map(|p| (p.reason.as_str(), p.message.as_str())),
        cpg.metadata.generation,
    );
    let mut st = json!({
        "conditions": [cond],
        "childGroups": counts.children,
        "scheduledChildGroups": counts.scheduled,
    });
    if let Some(kind) = cpg.spec.scheduling_policy.kind() {
        st["policy"] = json!(kind.as_str());
    }
    st
}

/// Reconciles one CompositePodGroup.
pub async fn reconcile(cpg: Arc<CompositePodGroup>, ctx: Ctx) -> Result<Action> {
    ctx.count_reconcile(CONTROLLER);
    let uid = cpg.uid().ok_or(Error::MissingField("metadata.uid"))?;
    let ns = cpg.namespace().ok_or(Error::MissingField("metadata.namespace"))?;
    if !ctx.is_leader() {
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    let key = GroupKey::composite(&ns, &cpg.name_any());
    let counts = child_counts(&ctx.store, &key);
    let reference = cpg.object_ref(&());

    if cpg.metadata.deletion_timestamp.is_some() {
        if counts.children == 0 {
            status::remove_finalizer(&ctx, cpg.as_ref(), COMPOSITE_POD_GROUP_PROTECTION).await?;
            ctx.forget(&uid);
            return Ok(Action::await_change());
        }
        if cpg
            .finalizers()
            .iter()
            .any(|f| f == COMPOSITE_POD_GROUP_PROTECTION)
            && ctx.transition(&uid, "deletion", "waiting", None).is_some()
        {
            let note = format!(
                "Deletion waits for {} child group(s) to be deleted",
                counts.children
            );
            ctx.publish(
                CONTROLLER,
                &reference,
                EventType::Normal,
                "WaitingForChildren",
                "Delete",
                note,
            )
            .await;
        }
    }

    let prio = PrioritySpec {
        class_name: cpg.spec.priority_class_name.as_deref(),
        priority: cpg.spec.priority,
        preemption_policy: cpg.spec.preemption_policy,
    };
    let mut problems = group::ensure_meta(
        &ctx,
        CONTROLLER,
        cpg.as_ref(),
        COMPOSITE_POD_GROUP_PROTECTION,
        &prio,
    )
    .await?;
    problems.extend(checks::workload_ref(
        &ctx.store,
        &ns,
        GroupKind::CompositePodGroup,
        cpg.spec.scheduling_policy.kind(),
        &cpg.spec.workload_ref,
    ));
    problems.extend(checks::hierarchy(&ctx.store, &key));
    let problem = checks::combine(&problems);

    let current = status::status_json(cpg.status.as_ref());
    let existing = status::existing_condition(&ctx, &uid, &current, VALID);
    let desired = desired_status(&cpg, existing.as_ref(), problem.as_ref(), counts);
    let decision = status::decide(&ctx, &uid, &desired, &current);
    if decision == WriteDecision::Write {
        status::apply_status(&ctx, CONTROLLER, cpg.as_ref(), &desired).await?;
    }
    // The verdict's event goes out with the status write it announces (see `report_validity`).
    if !matches!(decision, WriteDecision::Later(_)) {
        report_validity(
            &ctx,
            CONTROLLER,
            &uid,
            &reference,
            "CompositePodGroup",
            &current,
            problem.as_ref(),
        )
        .await;
    }
    ctx.note_success(&uid);
    Ok(status::after(&decision, ctx.opts.resync))
}

/// Error policy: exponential backoff per object (no hot loop), logged by the caller.
pub fn error_policy(cpg: Arc<CompositePodGroup>, err: &Error, ctx: Ctx) -> Action {
    crate::error_action(CONTROLLER, cpg.uid().as_deref(), err, &ctx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use phalanx_api::v1beta1::{CompositePodGroupSchedulingPolicy, WorkloadReference};

    #[test]
    fn status_has_child_counts() {
        let cpg = CompositePodGroup::new(
            "c",
            phalanx_api::v1alpha3::CompositePodGroupSpec {
                workload_ref: WorkloadReference {
                    workload_name: "w".into(),
                    template_name: "t".into(),
                },
                scheduling_policy: CompositePodGroupSchedulingPolicy::basic(),
                ..Default::default()
            },
        );
        let st = desired_status(
            &cpg,
            None,
            None,
            ChildCounts {
                children: 4,
                scheduled: 1,
            },
        );
        assert_eq!(st["childGroups"], 4);
        assert_eq!(st["scheduledChildGroups"], 1);
        assert_eq!(st["policy"], "Basic");
        assert_eq!(st["conditions"][0]["status"], "True");
    }
}
