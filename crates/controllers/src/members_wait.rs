//! The `WaitingForMembers` Warning event: a gang PodGroup that is still gathering its pods (fewer than `minCount`
//! present, never scheduled) and has seen no new member for longer than a threshold
//! ([`crate::ControllerOptions::members_wait_warning`], default 5 min) gets one Warning event, e.g.
//! `2 of 3 pods present (minCount 3); no new member for 5m0s`.
//!
//! Why: upstream 1.37's GangScheduling PreEnqueue (`pkg/scheduler/framework/plugins/gangscheduling`) holds such pods
//! silently, with the same generic message on every member, so a gang whose owner never creates its last pods (a
//! quota, a typo in `parallelism`, a crashed operator) looks like any gang that waits for room. The counts are the
//! scheduler's quorum gate's (`crates/scheduler/src/queue/gate.rs`): pending and bound members that are not being
//! deleted, plus the Succeeded ones.
//!
//! Once per wait: the wait is identified by the time of its last new member, the latest `creationTimestamp` of
//! the group and of its member pods (at one-second precision, as the API server writes it). A new member starts a
//! new wait and a new clock. The decision ([`decide`]) is pure and takes the clock as input; [`report`] publishes.
//! The memory of what was reported is the controller's (per UID, [`crate::context::Context::transition`]), so a
//! new leader reports a wait that is still on once more.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::EventType;
use phalanx_api::v1beta1::PodGroup;
use phalanx_store::PodRecord;

use crate::context::Ctx;
use crate::group_status::Counts;

/// Event reason of the warning.
pub const WAITING_FOR_MEMBERS: &str = "WaitingForMembers";

/// What [`decide`] reads about one PodGroup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Facts {
    /// `spec.schedulingPolicy.gang.minCount`; `None` for a basic group (never warned about).
    pub min_count: Option<i32>,
    /// Members present for the quorum ([`present`]).
    pub present: i32,
    /// When the last member (or the group itself) appeared ([`last_arrival`]); `None` when unknown.
    pub last_arrival: Option<Timestamp>,
    /// The group still gathers: valid, not being deleted, not failed, and `PodGroupInitiallyScheduled` is not True
    /// (after that, a missing member is `PodGroupSatisfied=False/MembersLost`, with its own Warning).
    pub gathering: bool,
    /// The threshold; zero disables the warning.
    pub threshold: Duration,
    /// Now.
    pub now: Timestamp,
}

impl Facts {
    /// The facts of `pg` with its `members` and their `counts`, at `now`.
    pub fn of(
        pg: &PodGroup,
        members: &[Arc<PodRecord>],
        counts: Counts,
        gathering: bool,
        threshold: Duration,
        now: Timestamp,
    ) -> Facts {
        Facts {
            min_count: pg.spec.scheduling_policy.min_count(),
            present: present(counts),
            last_arrival: last_arrival(pg, members.iter().map(AsRef::as_ref)),
            gathering,
            threshold,
            now,
        }
    }
}

/// The decision for one PodGroup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing to report and nothing to wait for.
    Quiet,
    /// Below `minCount` since less than the threshold: decide again after this long.
    Later(Duration),
    /// Below `minCount` with no new member for at least the threshold: the wait that began at `since` gets one
    /// Warning event with `note`.
    Warn {
        /// The wait's start (the last new member).
        since: Timestamp,
        /// The event's note, e.g. `2 of 3 pods present (minCount 3); no new member for 5m0s`.
        note: String,
    },
}

/// Pure: members that count toward the quorum, as the scheduler's gate counts them: non-terminal members not being
/// deleted, plus the Succeeded ones.
pub fn present(c: Counts) -> i32 {
    c.pods.saturating_sub(c.terminating).saturating_add(c.succeeded)
}

/// Pure: the latest `creationTimestamp` of the group and its member pods (any phase: a replacement that failed at
/// once still arrived); `None` when none has one.
pub fn last_arrival<'a>(
    pg: &PodGroup,
    members: impl IntoIterator<Item = &'a PodRecord>,
) -> Option<Timestamp> {
    let group = pg.metadata.creation_timestamp.as_ref().map(|t| t.0);
    members
        .into_iter()
        .filter_map(|p| p.creation_timestamp.as_ref().map(|t| t.0))
        .chain(group)
        .max()
}

/// Pure: the decision; see the module documentation. A `last_arrival` in the future (clock skew between the API
/// server and this process) counts as now.
pub fn decide(f: &Facts) -> Verdict {
    let (Some(min), Some(since)) = (f.min_count, f.last_arrival) else {
        return Verdict::Quiet;
    };
    if !f.gathering || f.threshold.is_zero() || f.present >= min {
        return Verdict::Quiet;
    }
    let waited: Duration = f.now.duration_since(since).try_into().unwrap_or(Duration::ZERO);
    match f.threshold.checked_sub(waited).filter(|left| !left.is_zero()) {
        Some(left) => Verdict::Later(left),
        None => Verdict::Warn {
            since,
            note: format!(
                "{} of {min} pods present (minCount {min}); no new member for {}",
                f.present.max(0),
                go_duration(waited)
            ),
        },
    }
}

/// Pure: `d` in whole seconds, written as Go's `time.Duration.String` writes it (`2s`, `5m0s`, `1h2m3s`), the form
/// kube-controller-manager's and kube-scheduler's messages use.
pub fn go_duration(d: Duration) -> String {
    let s = d.as_secs();
    let (h, m, s) = (s / 3600, s / 60 % 60, s % 60);
    if h > 0 {
        format!("{h}h{m}m{s}s")
    } else if m > 0 {
        format!("{m}m{s}s")
    } else {
        format!("{s}s")
    }
}

/// Publishes the warning of `verdict` once per wait (keyed by its start) on the PodGroup `reference`, as
/// `controller` (the PodGroup controller's name, passed in so this module does not import that controller), and
/// returns when to decide again (`Some` while the threshold is still ahead). Events are never worth failing a
/// reconcile for; a failed publish is logged by [`crate::context::Context::publish`].
pub async fn report(
    ctx: &Ctx,
    controller: &str,
    uid: &str,
    reference: &ObjectReference,
    verdict: Verdict,
) -> Option<Duration> {
    match verdict {
        Verdict::Quiet => None,
        Verdict::Later(left) => Some(left),
        Verdict::Warn { since, note } => {
            if ctx
                .transition(uid, "members-wait", &since.to_string(), None)
                .is_some()
            {
                ctx.publish(
                    controller,
                    reference,
                    EventType::Warning,
                    WAITING_FOR_MEMBERS,
                    "Wait",
                    note,
                )
                .await;
            }
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).expect("valid time")
    }

    fn facts(present: i32, since: i64, now: i64) -> Facts {
        Facts {
            min_count: Some(3),
            present,
            last_arrival: Some(at(since)),
            gathering: true,
            threshold: Duration::from_secs(300),
            now: at(now),
        }
    }

    #[test]
    fn a_gang_short_of_members_is_warned_about_once_the_threshold_passed() {
        assert_eq!(
            decide(&facts(2, 0, 100)),
            Verdict::Later(Duration::from_secs(200))
        );
        assert_eq!(
            decide(&facts(2, 0, 300)),
            Verdict::Warn {
                since: at(0),
                note: "2 of 3 pods present (minCount 3); no new member for 5m0s".into(),
            }
        );
        // Late (a resync, a new leader): the note says how long it really was.
        let Verdict::Warn { note, .. } = decide(&facts(0, 0, 3723)) else {
            panic!("expected a warning");
        };
        assert_eq!(note, "0 of 3 pods present (minCount 3); no new member for 1h2m3s");
        // A new member restarts the clock: a new wait, identified by its own start.
        assert_eq!(
            decide(&facts(2, 250, 300)),
            Verdict::Later(Duration::from_secs(250))
        );
        let Verdict::Warn { since, .. } = decide(&facts(2, 250, 560)) else {
            panic!("expected a warning");
        };
        assert_eq!(since, at(250));
    }

    #[test]
    fn no_warning_for_a_full_quorum_a_basic_group_a_scheduled_gang_or_a_zero_threshold() {
        assert_eq!(decide(&facts(3, 0, 1000)), Verdict::Quiet);
        assert_eq!(decide(&facts(4, 0, 1000)), Verdict::Quiet);
        let basic = Facts {
            min_count: None,
            ..facts(0, 0, 1000)
        };
        assert_eq!(decide(&basic), Verdict::Quiet);
        let scheduled = Facts {
            gathering: false,
            ..facts(2, 0, 1000)
        };
        assert_eq!(decide(&scheduled), Verdict::Quiet);
        let off = Facts {
            threshold: Duration::ZERO,
            ..facts(2, 0, 1000)
        };
        assert_eq!(decide(&off), Verdict::Quiet);
        let unknown = Facts {
            last_arrival: None,
            ..facts(2, 0, 1000)
        };
        assert_eq!(decide(&unknown), Verdict::Quiet);
    }

    #[test]
    fn a_member_from_the_future_counts_as_now() {
        assert_eq!(decide(&facts(1, 50, 0)), Verdict::Later(Duration::from_secs(300)));
    }

    #[test]
    fn present_counts_as_the_gate_does_and_the_last_arrival_is_the_newest() {
        let c = Counts {
            pods: 4,
            terminating: 1,
            succeeded: 2,
            ..Counts::default()
        };
        assert_eq!(present(c), 5);
        let pod = |secs: Option<i64>| {
            let mut p = Pod::default();
            p.metadata.creation_timestamp = secs.map(|s| Time(at(s)));
            PodRecord::from_pod(&p)
        };
        let mut pg = PodGroup::new("g", phalanx_api::v1beta1::PodGroupSpec::default());
        pg.metadata.creation_timestamp = Some(Time(at(10)));
        let pods = [pod(Some(5)), pod(None), pod(Some(42))];
        assert_eq!(last_arrival(&pg, pods.iter()), Some(at(42)));
        assert_eq!(last_arrival(&pg, pods[..2].iter()), Some(at(10)));
        pg.metadata.creation_timestamp = None;
        assert_eq!(last_arrival(&pg, pods[1..2].iter()), None);
    }

    #[test]
    fn durations_read_as_go_writes_them() {
        assert_eq!(go_duration(Duration::from_millis(2900)), "2s");
        assert_eq!(go_duration(Duration::from_secs(300)), "5m0s");
        assert_eq!(go_duration(Duration::from_secs(3600)), "1h0m0s");
        assert_eq!(go_duration(Duration::ZERO), "0s");
    }
}
