//! A condition as `explain` shows it. Its own module, below the answer ([`super::Explanation`]) and the parts that
//! fill it in ([`super::gather`], [`super::life`]), so that a part can show a condition without importing the
//! module that gathers it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde::Serialize;

/// A condition as read from the object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConditionFacts {
    /// Type, e.g. `PodGroupInitiallyScheduled` or `PodScheduled`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True` / `False`.
    pub status: String,
    /// Reason.
    pub reason: String,
    /// Message.
    pub message: String,
    /// `lastTransitionTime` (RFC 3339).
    pub since: Option<String>,
}

/// A condition as `explain` shows it.
pub(super) fn condition_facts(c: &Condition) -> ConditionFacts {
    ConditionFacts {
        type_: c.type_.clone(),
        status: c.status.clone(),
        reason: c.reason.clone(),
        message: c.message.clone(),
        since: Some(c.last_transition_time.0.to_string()),
    }
}
