//! `spec.recoveryPolicy`: what Phalanx does when a gang that was placed falls below its quorum.
//! A Phalanx addition (upstream 1.37 has no such field; its `PodGroupInitiallyScheduled` is terminal
//! and nothing watches a gang after it starts). Omitted, nothing changes: the live `PodGroupSatisfied`
//! condition reports the loss and that is all.
//!
//! Peers for comparison: Volcano's `policies` (`PodEvicted → RestartJob`), Kueue's
//! `waitForPodsReady` (acts on the Job), KAI's stale-gang eviction, Grove's `terminationDelay`.

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Upper bound of `gracePeriodSeconds`: one day.
pub const MAX_RECOVERY_GRACE_SECONDS: i32 = 86_400;
/// Upper bound of `maxRestarts`.
pub const MAX_RESTARTS: i32 = 1_000;
/// `gracePeriodSeconds` when unset.
pub const DEFAULT_RECOVERY_GRACE_SECONDS: i32 = 60;

/// What to do about a gang below its quorum (`PodGroupSatisfied=False`, not `Completed`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum RecoveryAction {
    /// Report only (the `PodGroupSatisfied` condition and its events).
    #[default]
    None,
    /// Once the gang has been below `minCount` for `gracePeriodSeconds`, delete its members that
    /// are still bound, so that their owner recreates them and the gang is placed again whole.
    RestartGroup,
    /// Set the terminal `PodGroupFailed` condition at once, with a Warning event.
    Fail,
}

/// Recovery policy of a PodGroup (Phalanx addition). `action` applies to every loss;
/// `onDisruption` (a member or the group carries `DisruptionTarget=True`: preemption, eviction,
/// a taint) and `onFailure` (members failed, were deleted or are not replaced) override it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(
    "!has(self.maxRestarts) || (has(self.action) && self.action == 'RestartGroup') || \
     (has(self.onDisruption) && self.onDisruption == 'RestartGroup') || \
     (has(self.onFailure) && self.onFailure == 'RestartGroup')")
    .message("maxRestarts applies only to RestartGroup: set action, onDisruption or onFailure to RestartGroup")
    .field_path(".maxRestarts")
    .reason(Reason::FieldValueForbidden))]
pub struct RecoveryPolicy {
    /// action for any loss: `None` (default), `RestartGroup` or `Fail`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<RecoveryAction>,
    /// onDisruption overrides `action` when the loss comes with `DisruptionTarget=True`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_disruption: Option<RecoveryAction>,
    /// onFailure overrides `action` for any other loss (failed or deleted members).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_failure: Option<RecoveryAction>,
    /// gracePeriodSeconds a gang may stay below `minCount` before `RestartGroup` acts (default 60,
    /// 0 to 86400). Counted from the loss, or from the last restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_RECOVERY_GRACE_SECONDS))]
    pub grace_period_seconds: Option<i32>,
    /// maxRestarts caps `RestartGroup` (0 to 1000; unset means no cap): a loss after that many
    /// restarts ends in `PodGroupFailed` (reason `MaxRestartsReached`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_RESTARTS))]
    pub max_restarts: Option<i32>,
}

impl RecoveryPolicy {
    /// The action for a loss; `disrupted` when a member or the group carries `DisruptionTarget`.
    pub fn action_for(&self, disrupted: bool) -> RecoveryAction {
        let specific = if disrupted {
            self.on_disruption
        } else {
            self.on_failure
        };
        specific.or(self.action).unwrap_or_default()
    }

    /// `gracePeriodSeconds` with its default.
    pub fn grace_seconds(&self) -> i32 {
        self.grace_period_seconds
            .unwrap_or(DEFAULT_RECOVERY_GRACE_SECONDS)
            .clamp(0, MAX_RECOVERY_GRACE_SECONDS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specific_actions_override_the_general_one() {
        let p = RecoveryPolicy {
            action: Some(RecoveryAction::Fail),
            on_disruption: Some(RecoveryAction::RestartGroup),
            ..Default::default()
        };
        assert_eq!(p.action_for(true), RecoveryAction::RestartGroup);
        assert_eq!(p.action_for(false), RecoveryAction::Fail);
        assert_eq!(RecoveryPolicy::default().action_for(true), RecoveryAction::None);
        assert_eq!(p.grace_seconds(), 60);
    }
}
