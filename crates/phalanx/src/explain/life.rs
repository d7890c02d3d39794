//! A placed gang's life in `phalanx explain`: the live `PodGroupSatisfied` condition, `spec.recoveryPolicy`, and
//! what the PodGroup controller will do next (the same pure decision it takes, `phalanx_controllers::recovery`).

use std::fmt::Write as _;
use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;
use phalanx_api::conditions::{POD_GROUP_FAILED, POD_GROUP_SATISFIED};
use phalanx_api::v1beta1::{RecoveryAction, RecoveryPolicy};
use phalanx_controllers::recovery::{self, Step};
use phalanx_scheduler::{GroupKey, GroupKind};
use phalanx_store::Store;
use serde::Serialize;

use super::condition::{ConditionFacts, condition_facts};

/// The life facts of a PodGroup (`life` in `-o json`); `None` for a group that was never placed and has no policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LifeFacts {
    /// `PodGroupSatisfied`, once armed.
    pub satisfied: Option<ConditionFacts>,
    /// `spec.recoveryPolicy` in words, e.g. `onFailure RestartGroup, onDisruption RestartGroup, grace 60 s`.
    pub policy: Option<String>,
    /// `status.restarts`.
    pub restarts: i32,
    /// `status.lastRestartTime` (RFC 3339).
    pub last_restart: Option<String>,
    /// `PodGroupFailed`, once set.
    pub failed: Option<ConditionFacts>,
    /// The controller restarts the gang: within the grace period before a restart, or at it.
    pub restarting: bool,
    /// What the controller does next, e.g. `restart in 42 s`.
    pub next: String,
}

fn action(a: RecoveryAction) -> &'static str {
    match a {
        RecoveryAction::None => "None",
        RecoveryAction::RestartGroup => "RestartGroup",
        RecoveryAction::Fail => "Fail",
    }
}

/// `spec.recoveryPolicy` in words.
fn describe(p: &RecoveryPolicy) -> String {
    let mut s = format!(
        "onFailure {}, onDisruption {}",
        action(p.action_for(false)),
        action(p.action_for(true))
    );
    let restarts = [p.action_for(false), p.action_for(true)].contains(&RecoveryAction::RestartGroup);
    if restarts {
        let _ = write!(s, ", grace {} s", p.grace_seconds());
        match p.max_restarts {
            Some(m) => {
                let _ = write!(s, ", maxRestarts {m}");
            }
            None => s.push_str(", no restart limit"),
        }
    }
    s
}

/// Gathers the facts of the PodGroup `g` with its `members`.
pub fn gather(
    store: &Store,
    g: &GroupKey,
    members: &[Arc<phalanx_store::PodRecord>],
    now: Timestamp,
) -> Option<LifeFacts> {
    if g.kind != GroupKind::PodGroup {
        return None;
    }
    let pg = store.pod_group_at(g)?;
    let status = pg.status.clone().unwrap_or_default();
    let find = |t: &str| status.conditions.iter().find(|c| c.type_ == t);
    let satisfied = find(POD_GROUP_SATISFIED);
    let failed = find(POD_GROUP_FAILED).filter(|c| c.status == "True");
    let effective = recovery::effective_policy(store, &pg);
    let policy = effective.as_ref();
    if satisfied.is_none() && policy.is_none() {
        return None;
    }
    let bound = recovery::bound_members(members).count();
    let step = recovery::decide(recovery::Facts {
        policy,
        satisfied,
        failed: failed.is_some(),
        restarts: status.restarts.unwrap_or(0),
        last_restart: status.last_restart_time.as_ref().map(|t| t.0),
        // As the controller judges it: an invalid group gets no action, a cut-short restart is finished.
        valid: !status
            .conditions
            .iter()
            .any(|c| c.type_ == phalanx_controllers::status::VALID && c.status == "False"),
        bound: i32::try_from(bound).unwrap_or(i32::MAX),
        left_over: i32::try_from(
            recovery::left_over(members, status.last_restart_time.as_ref().map(|t| t.0)).count(),
        )
        .unwrap_or(i32::MAX),
        now,
    });
    let next = match (&step, failed, satisfied) {
        (_, Some(_), _) => "nothing: the group has failed (terminal)".to_string(),
        (_, _, None) => "nothing until the group is first scheduled".to_string(),
        (Step::Nothing, _, Some(c)) if c.status == "True" => "nothing: the gang holds its quorum".to_string(),
        (Step::Nothing, _, _) if policy.is_none() => "nothing: no recoveryPolicy (report only)".to_string(),
        (Step::Nothing, _, _) => "nothing to do now".to_string(),
        (Step::Wait { left, fail }, _, _) => format!(
            "{} in {} s unless the gang recovers",
            if *fail {
                "fail (maxRestarts reached)"
            } else {
                "restart"
            },
            left.as_secs().max(1)
        ),
        (Step::Restart { number }, _, _) => format!("restart {number} now"),
        (Step::Finish { number }, _, _) => {
            format!("finish restart {number}: delete the members it left bound")
        }
        (Step::Fail { reason, .. }, _, _) => format!("fail now ({reason})"),
    };
    let restarting = failed.is_none()
        && matches!(
            step,
            Step::Wait { fail: false, .. } | Step::Restart { .. } | Step::Finish { .. }
        );
    Some(LifeFacts {
        restarting,
        satisfied: satisfied.map(condition_facts),
        policy: policy.map(describe),
        restarts: status.restarts.unwrap_or(0),
        last_restart: status.last_restart_time.as_ref().map(|t| t.0.to_string()),
        failed: failed.map(condition_facts),
        next,
    })
}

/// The text lines of `l`.
pub fn render(s: &mut String, l: &LifeFacts) {
    if let Some(c) = &l.satisfied {
        let since = c
            .since
            .as_deref()
            .map(|t| format!(" since {t}"))
            .unwrap_or_default();
        let _ = writeln!(s, "  Live: {}={} ({}){since}", c.type_, c.status, c.reason);
        if !c.message.is_empty() {
            let _ = writeln!(s, "    {}", c.message);
        }
    }
    if let Some(c) = &l.failed {
        let _ = writeln!(s, "  Failed: {} ({}): {}", c.type_, c.reason, c.message);
    }
    let policy = l.policy.as_deref().unwrap_or("none (report only)");
    let mut line = format!("  Recovery: {policy}");
    if l.restarts > 0 {
        let _ = write!(line, "; restarts {}", l.restarts);
        if let Some(t) = &l.last_restart {
            let _ = write!(line, " (last {t})");
        }
    }
    let _ = writeln!(s, "{line}; next: {}", l.next);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_in_words() {
        let p = RecoveryPolicy {
            on_disruption: Some(RecoveryAction::RestartGroup),
            action: Some(RecoveryAction::Fail),
            max_restarts: Some(2),
            ..Default::default()
        };
        assert_eq!(
            describe(&p),
            "onFailure Fail, onDisruption RestartGroup, grace 60 s, maxRestarts 2"
        );
        assert_eq!(
            describe(&RecoveryPolicy::default()),
            "onFailure None, onDisruption None"
        );
    }
}
