//! The verdict of `phalanx explain` in words, from facts already gathered (pure: no cluster, no clock): what
//! keeps a group out, named before any number ([`cause`]); which resources the scheduler itself found
//! insufficient ([`insufficient`]); where a placed gang stands in its life ([`lifecycle`]); and the one-sentence
//! [`summary`].
//!
//! The node reasons come from the core's failure message, which follows kube-scheduler's `FitError.Error()`
//! (`0/8 nodes are available: 8 node(s) were unschedulable.`, upstream `pkg/scheduler/framework/types.go`): a
//! sorted list of `<count> <reason>` entries, one per filter reason, each node counted under the first filter it
//! failed. The reason strings are upstream's (`node(s) were unschedulable`, NodeUnschedulable, upstream
//! `pkg/scheduler/framework/plugins/nodeunschedulable`; `node(s) had untolerated taint {k: v}`, TaintToleration;
//! `Insufficient <resource>`, NodeResourcesFit).

use phalanx_scheduler::GroupKey;
use phalanx_scheduler::GroupKind;

use super::life::LifeFacts;
use super::{ConditionFacts, MemberFacts, PreemptionFacts, Quorum, Standing};

/// Upstream NodeUnschedulable's reason (`ErrReasonUnknownCondition`'s sibling `ErrReasonUnschedulable`).
const CORDONED: &str = "node(s) were unschedulable";
/// Upstream TaintToleration's reason prefix (`node(s) had untolerated taint {key: value}`).
const TAINTED: &str = "node(s) had untolerated taint";
/// Upstream NodeResourcesFit's reason prefix (`Insufficient cpu`).
const INSUFFICIENT: &str = "Insufficient ";

/// The `<count> <reason>` entries of the first `0/N nodes are available: …` list in `message`, in its order.
/// Empty when `message` has no such list (a topology verdict, a gate, an error). Never panics on any input.
pub fn node_reasons(message: &str) -> Vec<(usize, &str)> {
    const HEAD: &str = " nodes are available: ";
    let Some(at) = message.find(HEAD) else {
        return vec![];
    };
    let rest = &message[at + HEAD.len()..];
    // The list ends at its closing period: `. ` before a preemption note, or the end. Resource names contain dots
    // (`nvidia.com/gpu`) but never a dot followed by a space.
    let list = match rest.find(". ") {
        Some(end) => &rest[..end],
        None => rest.strip_suffix('.').unwrap_or(rest),
    };
    list.split(", ")
        .filter_map(|entry| {
            let (count, reason) = entry.split_once(' ')?;
            Some((count.parse().ok()?, reason))
        })
        .collect()
}

/// The resources the verdict names `Insufficient` (`["cpu"]` for `0/2 nodes are available: 2 Insufficient cpu.`);
/// `None` when `message` carries no node list, so no resource can be ruled out from it.
pub fn insufficient(message: &str) -> Option<Vec<String>> {
    let reasons = node_reasons(message);
    if reasons.is_empty() {
        return None;
    }
    Some(
        reasons
            .iter()
            .filter_map(|(_, r)| r.strip_prefix(INSUFFICIENT).map(str::to_owned))
            .collect(),
    )
}

/// What keeps the group out other than capacity, most fundamental first: the controllers' `Valid=False`
/// (`invalid`), then the verdict's node reasons other than `Insufficient …` (cordoned and tainted nodes named as
/// such, a missing claim as upstream words it, any other reason quoted). `None` when only capacity is short (the
/// `Short` section says by how much) or nothing is known.
pub fn cause(invalid: Option<&ConditionFacts>, reasons: Option<&str>) -> Option<String> {
    let mut parts: Vec<String> = Vec::new();
    if let Some(v) = invalid {
        parts.push(format!("the group is invalid ({}): {}", v.reason, v.message));
    }
    for (count, reason) in reasons.map(node_reasons).unwrap_or_default() {
        if reason.starts_with(INSUFFICIENT) {
            continue;
        }
        parts.push(if reason == CORDONED {
            format!("{count} node(s) cordoned (spec.unschedulable; `kubectl uncordon` opens them again)")
        } else if reason.starts_with(TAINTED) {
            format!("{count} {reason}: the pods do not tolerate it")
        } else if reason.starts_with("resourceclaim") && reason.ends_with("not found") {
            format!("a claim is missing: {reason}")
        } else {
            format!("{count} {reason}")
        });
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// Where the group stands once its life is taken into account: `base` is what the scheduler's dry run says of its
/// pending pods; `invalid` is the controllers' `Valid=False`; `placed` is `…InitiallyScheduled=True`. A terminal
/// `PodGroupFailed` is `Failed`; an invalid group `Invalid`; a placed gang that the controller restarts (within the
/// grace period, or now) `Restarting`; a placed gang with pending members `Running`. Otherwise `base`.
pub fn lifecycle(base: Standing, invalid: bool, placed: bool, life: Option<&LifeFacts>) -> Standing {
    if life.is_some_and(|l| l.failed.is_some()) {
        return Standing::Failed;
    }
    if invalid {
        return Standing::Invalid;
    }
    if placed && life.is_some_and(|l| l.restarting) {
        return Standing::Restarting;
    }
    match base {
        Standing::Unschedulable
        | Standing::Schedulable
        | Standing::Preempting
        | Standing::WaitingForQuorum
            if placed =>
        {
            Standing::Running
        }
        other => other,
    }
}

/// What the one-sentence summary is built from.
#[derive(Debug, Clone, Copy)]
pub struct SummaryFacts<'a> {
    /// The final standing ([`lifecycle`]).
    pub state: Standing,
    /// What the dry run said of the pending pods, before [`lifecycle`].
    pub base: Standing,
    /// The group, when there is one.
    pub group: Option<&'a GroupKey>,
    /// Quorum, for a PodGroup.
    pub quorum: Option<&'a Quorum>,
    /// The verdict's message.
    pub reasons: Option<&'a str>,
    /// The [`cause`].
    pub cause: Option<&'a str>,
    /// Preemption in the dry run.
    pub preemption: Option<&'a PreemptionFacts>,
    /// The non-terminal members.
    pub members: &'a [MemberFacts],
    /// The controllers' `Valid=False`.
    pub invalid: Option<&'a ConditionFacts>,
    /// The gang's life.
    pub life: Option<&'a LifeFacts>,
    /// For a missing group that is the name its pods wait under until Phalanx creates their owner's groups: the
    /// owner, `<Kind> <name>` (its events say why they are not there yet).
    pub awaited_owner: Option<&'a str>,
}

/// What the pending pods' dry run says, as the tail of a sentence about a placed gang.
fn pending_tail(f: &SummaryFacts<'_>, pending: usize) -> String {
    if pending == 0 {
        return String::new();
    }
    let why = match (f.base, f.cause) {
        (Standing::Unschedulable, Some(c)) => format!(": they do not fit now ({c})"),
        (Standing::Unschedulable, None) => ": they do not fit now".into(),
        (Standing::Schedulable, _) => ": they fit now".into(),
        (Standing::Preempting, _) => ": preempting lower-priority pods for them".into(),
        _ => String::new(),
    };
    format!("; {pending} pending{why}")
}

/// The one sentence under the headline.
pub fn summary(f: &SummaryFacts<'_>) -> String {
    let what = match f.group {
        Some(g) if g.kind == GroupKind::CompositePodGroup => format!("composite pod group {:?}", &*g.name),
        Some(g) => format!("pod group {:?}", &*g.name),
        None => "the pod".into(),
    };
    let pending = f.members.iter().filter(|m| m.node.is_none()).count();
    let bound = f.members.iter().filter(|m| m.node.is_some()).count();
    let min = f.quorum.map(|q| q.min_count);
    let bound_of_min = match min {
        Some(m) => format!("{bound} of minCount {m} bound"),
        None => format!("{bound} bound"),
    };
    match f.state {
        Standing::Failed => {
            let c = f.life.and_then(|l| l.failed.as_ref());
            format!(
                "Failed for good ({}): {}; the controller does nothing more for it (terminal), {bound_of_min}.",
                c.map_or("PodGroupFailed", |c| c.reason.as_str()),
                c.map_or("", |c| c.message.as_str())
            )
        }
        Standing::Invalid => {
            let (reason, message) = f.invalid.map_or(("Invalid", ""), |v| (&*v.reason, &*v.message));
            format!("Invalid ({reason}): {message}; fix the spec. {bound} bound, {pending} pending.")
        }
        Standing::Restarting => format!(
            "Restarting under its recoveryPolicy: {bound_of_min}, next: {}{}.",
            f.life.map_or("?", |l| l.next.as_str()),
            pending_tail(f, pending)
        ),
        Standing::Running => format!(
            "Running below its quorum: {bound_of_min}{}.",
            pending_tail(f, pending)
        ),
        Standing::WaitingForPodGroup => match f.awaited_owner {
            Some(owner) => format!(
                "Waiting for Phalanx to create the groups of {owner}: its {pending} pod(s) wait under {what} until \
                 then; if they do not come, the owner's events say why (kubectl describe {owner})."
            ),
            None => format!(
                "Waiting for its group object: {pending} pod(s) name {what}, which does not exist yet; create it."
            ),
        },
        Standing::WaitingForQuorum => match f.quorum {
            // A leaf whose own quorum is met waits for its CompositePodGroup tree: the gate's message says which.
            Some(q) if q.present < q.min_count as usize => format!(
                "Waiting for quorum: {} of {} pods present (minCount {}); {} more must be created.",
                q.present,
                q.min_count,
                q.min_count,
                (q.min_count as usize).saturating_sub(q.present)
            ),
            _ => format!(
                "Waiting for quorum: {}.",
                f.reasons.unwrap_or("too few child groups are ready")
            ),
        },
        Standing::WaitingForProvisioning => format!(
            "Waiting for capacity: {}; it is placed once its ProvisioningRequest is Provisioned.",
            f.reasons
                .unwrap_or("its ProvisioningRequest is not Provisioned yet")
        ),
        Standing::SchedulingGated => {
            "Held by spec.schedulingGates: the pods are not scheduled until the gates are removed.".into()
        }
        Standing::Unschedulable => match f.cause {
            Some(c) => format!(
                "Tried, and it does not fit now: {c}; none of its {pending} pending pod(s) is bound (all-or-nothing)."
            ),
            None => format!(
                "Tried, and it does not fit now: none of its {pending} pending pod(s) is bound (all-or-nothing)."
            ),
        },
        Standing::Preempting => match f.preemption {
            Some(p) if p.ongoing => format!(
                "Preempting, in flight: waiting for {} preempted pod(s) to terminate; it binds on its nominated \
                 node(s) when they are gone, and evicts nothing more.",
                p.terminating.len()
            ),
            Some(p) if p.success => format!(
                "Preempting: {} lower-priority pod(s) would be evicted to make room; it binds when they are gone.",
                p.victims.len()
            ),
            _ => "Preempting: lower-priority pods were preempted for it; it binds when they are gone.".into(),
        },
        Standing::SchedulerError => {
            format!("Cannot be scheduled: {}", f.reasons.unwrap_or("scheduler error"))
        }
        Standing::Schedulable => {
            format!("Fits now: {pending} pod(s) would be placed at the scheduler's next attempt.")
        }
        // Only bound members count: a pending one is never reported bound.
        Standing::Scheduled => format!("Scheduled: {bound} pod(s) bound."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cond(reason: &str, message: &str) -> ConditionFacts {
        ConditionFacts {
            type_: "Valid".into(),
            status: "False".into(),
            reason: reason.into(),
            message: message.into(),
            since: None,
        }
    }

    fn life(failed: bool, restarting: bool) -> LifeFacts {
        LifeFacts {
            satisfied: None,
            policy: None,
            restarts: 0,
            last_restart: None,
            failed: failed.then(|| cond("MembersLost", "lost")),
            restarting,
            next: "restart in 40 s unless the gang recovers".into(),
        }
    }

    #[test]
    fn cordoned_nodes_are_the_cause_and_no_resource_is_insufficient() {
        let m = "0/8 nodes are available: 8 node(s) were unschedulable.";
        assert_eq!(node_reasons(m), vec![(8, CORDONED)]);
        assert_eq!(insufficient(m), Some(vec![]));
        assert!(cause(None, Some(m)).unwrap().starts_with("8 node(s) cordoned"));
    }

    #[test]
    fn capacity_alone_is_no_cause_and_names_its_resources() {
        let m = "minCount (9) cannot be satisfied: 0 scheduled, 8 remaining; 0/8 nodes are available: 2 Insufficient \
                 cpu, 6 Insufficient nvidia.com/gpu. pod group preemption: No preemption victims found";
        assert_eq!(
            insufficient(m),
            Some(vec!["cpu".to_owned(), "nvidia.com/gpu".to_owned()])
        );
        assert_eq!(cause(None, Some(m)), None);
        assert_eq!(insufficient("no placements are available in \"rack\""), None);
    }

    #[test]
    fn taints_claims_and_invalid_groups_are_named_invalid_first() {
        let m = "0/3 nodes are available: 1 resourceclaim.resource.k8s.io \"v-fabric\" not found, 2 node(s) had \
                 untolerated taint {dedicated: infra}.";
        let invalid = cond("ResourceClaimTemplateNotFound", "template \"fabric\" not found");
        let c = cause(Some(&invalid), Some(m)).unwrap();
        assert!(
            c.starts_with("the group is invalid (ResourceClaimTemplateNotFound)"),
            "{c}"
        );
        assert!(c.contains("a claim is missing: resourceclaim"), "{c}");
        assert!(
            c.contains("2 node(s) had untolerated taint {dedicated: infra}: the pods do not tolerate it")
        );
    }

    #[test]
    fn odd_messages_never_panic() {
        for m in [
            "",
            ".",
            " nodes are available: ",
            "0/x nodes are available: x y, 3, . ",
            "é nodes are available: 1 é.",
        ] {
            let _ = (node_reasons(m), insufficient(m), cause(None, Some(m)));
        }
    }

    #[test]
    fn a_placed_gang_is_headed_by_its_life() {
        let l = life(false, false);
        assert_eq!(
            lifecycle(Standing::Unschedulable, false, true, Some(&l)),
            Standing::Running
        );
        assert_eq!(
            lifecycle(Standing::Unschedulable, false, false, Some(&l)),
            Standing::Unschedulable
        );
        assert_eq!(
            lifecycle(Standing::Schedulable, false, true, Some(&life(false, true))),
            Standing::Restarting
        );
        assert_eq!(
            lifecycle(Standing::Unschedulable, true, true, Some(&life(true, false))),
            Standing::Failed
        );
        assert_eq!(
            lifecycle(Standing::Scheduled, true, true, None),
            Standing::Invalid
        );
        assert_eq!(
            lifecycle(Standing::Scheduled, false, true, Some(&l)),
            Standing::Scheduled
        );
    }

    #[test]
    fn summaries_name_the_cause_and_the_life() {
        let members = vec![
            MemberFacts {
                name: "g-0".into(),
                node: Some("n1".into()),
                scheduler_name: "s".into(),
                priority: 0,
                reason: None,
            },
            MemberFacts {
                name: "g-1".into(),
                node: None,
                scheduler_name: "s".into(),
                priority: 0,
                reason: None,
            },
        ];
        let q = Quorum {
            min_count: 2,
            present: 2,
            members: vec![],
        };
        let l = life(true, false);
        let mut f = SummaryFacts {
            state: Standing::Unschedulable,
            base: Standing::Unschedulable,
            group: None,
            quorum: Some(&q),
            reasons: None,
            cause: Some("8 node(s) cordoned (x)"),
            preemption: None,
            members: &members,
            invalid: None,
            life: Some(&l),
            awaited_owner: None,
        };
        assert!(summary(&f).starts_with("Tried, and it does not fit now: 8 node(s) cordoned"));
        f.state = Standing::Running;
        assert_eq!(
            summary(&f),
            "Running below its quorum: 1 of minCount 2 bound; 1 pending: they do not fit now (8 node(s) cordoned \
             (x))."
        );
        f.state = Standing::Failed;
        let s = summary(&f);
        assert!(s.starts_with("Failed for good (MembersLost): lost;"), "{s}");
        assert!(!s.contains("does not fit"), "{s}");
    }

    /// Issue 38, from a new user's trial: pods of an annotated LeaderWorkerSet whose groups Phalanx has not made
    /// (a bad annotation) wait under the owner's name; explain must not tell the user to create that group.
    #[test]
    fn a_group_the_owner_integration_has_not_made_points_to_the_owner() {
        let members = vec![];
        let g = GroupKey::pod_group("ns", "infer-leaderworkerset");
        let mut f = SummaryFacts {
            state: Standing::WaitingForPodGroup,
            base: Standing::WaitingForPodGroup,
            group: Some(&g),
            quorum: None,
            reasons: None,
            cause: None,
            preemption: None,
            members: &members,
            invalid: None,
            life: None,
            awaited_owner: Some("LeaderWorkerSet infer"),
        };
        let s = summary(&f);
        assert!(
            s.starts_with("Waiting for Phalanx to create the groups of LeaderWorkerSet infer"),
            "{s}"
        );
        assert!(
            s.contains("kubectl describe LeaderWorkerSet infer") && !s.contains("create it"),
            "{s}"
        );
        f.awaited_owner = None;
        assert!(summary(&f).ends_with("create it."));
    }
}
