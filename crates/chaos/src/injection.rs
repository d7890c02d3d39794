//! What the injection of every fault shares: the bound of a setup wait, what an injection measured, and the wait for
//! the standby's takeover. Its own module, below [`crate::faults`] (which dispatches to [`crate::member_kill`] and
//! [`crate::preempt_kill`]), so that those two use it without importing the dispatcher that calls them.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::context::Ctx;
use crate::invariants::Violation;

/// Bound of a harness step that only waits for the cluster or the replicas to do their work (a leader elected, the
/// setup's pods bound, a policy loaded, a write landed): generous, because a loaded 2-core machine is slow and such a
/// timeout is a harness failure, not a verdict. Invariant limits (I3's recovery, I8's slack) are not setup waits.
pub(crate) const SETUP_WAIT: Duration = Duration::from_secs(180);

/// What one injection measured.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Fault start -> first bind by the replica that took over (leader faults), or API back -> first bind.
    pub failover: Option<Duration>,
    /// Facts for the report (partial gangs at the kill, 410 confirmed, denied binds, ...).
    pub notes: Vec<String>,
    /// Violations only the fault can judge (`preempt-kill`: more victims than one plan needs, I7).
    pub violations: Vec<Violation>,
}

/// `ms` milliseconds (as [`millis`](crate::context::millis) returns them) as a duration; 0 when negative.
pub(crate) fn to_duration(ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// How long a takeover may take: three Lease durations plus 10 s.
pub(crate) fn lease_timeout(ctx: &Ctx) -> Duration {
    Duration::from_secs(3 * ctx.profile.lease_duration_secs + 10)
}

/// Waits (at most [`lease_timeout`]) until `other` holds a Lease version that started after `since`: a takeover.
/// Returns when that version started.
pub(crate) async fn wait_takeover(ctx: &Ctx, other: &str, since: Timestamp) -> Option<Timestamp> {
    ctx.wait_audit(lease_timeout(ctx), |_| {
        ctx.leases
            .lock()
            .ok()?
            .first_held_by_after(other, since)
            .map(|s| s.valid_from)
    })
    .await
}
