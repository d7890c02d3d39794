//! Gathering an [`Explanation`]: the target's objects from the cluster read, the scheduler's verdict from one dry
//! run, and the capacity facts of that verdict's snapshot.

use std::sync::Arc;

use anyhow::bail;
use k8s_openapi::api::core::v1::Event;
use kube::{Api, api::ListParams};
use phalanx_api::conditions::{self, reasons};
use phalanx_scheduler::{EntityKey, GateReason, GroupKey, GroupKind, Outcome, PodKey};
use phalanx_store::{ClusterState, MAX_TREE_DEPTH, PodRecord, Store};

use super::condition::condition_facts;
use super::{
    ConditionFacts, DeletionFacts, EventFacts, Explanation, MemberFacts, PreemptionFacts, Quorum, Standing,
    facts,
};
use crate::tools;

/// What to explain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Target {
    /// A PodGroup (`scheduling.phalanx.dev/v1beta1`).
    #[value(alias = "podgroups", alias = "ppg")]
    Podgroup,
    /// A CompositePodGroup (`scheduling.phalanx.dev/v1alpha3`).
    #[value(alias = "compositepodgroups", alias = "pcpg")]
    Compositepodgroup,
    /// A pod (its group is explained when it names one).
    #[value(alias = "pods", alias = "po")]
    Pod,
    /// Upstream's PodGroup (`scheduling.k8s.io/v1beta1`), where the server serves it; named as kubectl
    /// disambiguates a resource by its API group.
    #[value(name = "podgroup.scheduling.k8s.io", alias = "podgroups.scheduling.k8s.io")]
    UpstreamPodgroup,
    /// Upstream's CompositePodGroup (`scheduling.k8s.io/v1alpha3`), where the server serves it.
    #[value(
        name = "compositepodgroup.scheduling.k8s.io",
        alias = "compositepodgroups.scheduling.k8s.io"
    )]
    UpstreamCompositepodgroup,
}

/// Most events shown.
const EVENTS: usize = 8;
/// Most capacity holders shown.
pub(super) const HOLDERS: usize = 10;

/// Explains `target` `namespace/name` over `state` (read from the cluster `client` talks to; `client` is also used
/// to read the events, verb `list` on `events`). Errors: the target does not exist and nothing refers to it
/// (`podgroup ns/x not found`), a pod without a group that another scheduler places, a failed events LIST, an
/// invalid node selector.
pub async fn explain(
    client: &kube::Client,
    state: ClusterState,
    target: Target,
    namespace: &str,
    name: &str,
    view: &tools::View,
) -> anyhow::Result<Explanation> {
    let scheduler_name = view.scheduler_name.as_str();
    let store = Store::from_state(state);
    let (kind, group, pod) = match target {
        Target::Pod => {
            let Some(pod) = store.pod(&PodKey::new(namespace, name)) else {
                bail!("pod {namespace}/{name} not found")
            };
            // Its own label, else its owner's group (a Job's or StatefulSet's pods carry no label).
            let group = store.group_of_pod(&pod);
            if group.is_none() && !tools::is_ours(&pod, &view.scheduler_name) {
                let theirs = pod.scheduler_name();
                bail!(
                    "pod {namespace}/{name} names schedulerName {theirs:?}, not {:?}: this scheduler does not place it \
                     (--scheduler-name takes another instance's view)",
                    view.scheduler_name
                )
            }
            ("Pod", group, Some(pod))
        }
        Target::Podgroup => ("PodGroup", Some(GroupKey::pod_group(namespace, name)), None),
        Target::Compositepodgroup => (
            "CompositePodGroup",
            Some(GroupKey::composite(namespace, name)),
            None,
        ),
        Target::UpstreamPodgroup => (
            "PodGroup.scheduling.k8s.io",
            Some(GroupKey::upstream_pod_group(namespace, name)),
            None,
        ),
        Target::UpstreamCompositepodgroup => (
            "CompositePodGroup.scheduling.k8s.io",
            Some(GroupKey {
                api: phalanx_scheduler::GroupApi::Upstream,
                ..GroupKey::composite(namespace, name)
            }),
            None,
        ),
    };
    let leaves = group.as_ref().map(|g| leaves_of(&store, g)).unwrap_or_default();
    let members: Vec<Arc<PodRecord>> = match (&group, &pod) {
        (Some(_), _) => leaves.iter().flat_map(|l| store.group_members(l)).collect(),
        (None, Some(p)) => vec![p.clone()],
        (None, None) => vec![],
    };
    let object_exists = group.as_ref().is_none_or(|g| store.group_node(g).is_some());
    if !object_exists && members.is_empty() && !has_children(&store, group.as_ref()) {
        bail!(
            "{} {namespace}/{name} not found, and no pod or group names it",
            kind.to_lowercase()
        );
    }
    let entity = match (&group, &pod) {
        (Some(g), _) => EntityKey::Group(store.hierarchy().root_of(g, MAX_TREE_DEPTH + 1)),
        (None, Some(p)) => EntityKey::Pod(p.key().clone()),
        (None, None) => bail!("{} {namespace}/{name}: nothing to explain", kind.to_lowercase()),
    };
    let dry = tools::run_dry(client.clone(), store.clone(), view)?;
    let gate = dry.gate(&entity);
    let attempt = dry.attempt(&entity);
    let condition = group
        .as_ref()
        .and_then(|g| group_condition(&store, g))
        .or_else(|| pod.as_deref().and_then(pod_condition));
    // The controllers' verdict when the scheduler's condition took the first line (a group claim whose template
    // is missing is pending for that reason, whatever the scheduler last said).
    let valid_false = group.as_ref().and_then(|g| invalid_condition(&store, g));
    let invalid = valid_false
        .clone()
        .filter(|v| condition.as_ref().is_none_or(|c| c.type_ != v.type_));
    let ours: Vec<&Arc<PodRecord>> = members
        .iter()
        .filter(|p| !p.is_terminal() && tools::is_ours(p, scheduler_name))
        .collect();
    let quorum = match (&group, group.as_ref().and_then(|g| store.pod_group_at(g))) {
        (Some(g), Some(pg)) if g.kind == GroupKind::PodGroup => Some(Quorum {
            min_count: pg
                .spec
                .scheduling_policy
                .gang
                .as_ref()
                .map_or(1, |gang| u32::try_from(gang.min_count).unwrap_or(1)),
            present: ours.len(),
            members: ours.iter().map(|p| p.name().to_owned()).collect(),
        }),
        _ => None,
    };
    // Pending members of another scheduler, in the words of the group's condition (one definition, the
    // controllers').
    let foreign = group.as_ref().and_then(|_| {
        let theirs: Vec<(String, String)> = members
            .iter()
            .filter(|p| !p.is_terminal() && p.node_name().is_none() && !tools::is_ours(p, scheduler_name))
            .map(|p| (p.name().to_owned(), p.scheduler_name().to_owned()))
            .collect();
        phalanx_controllers::checks::foreign_scheduler_message(&theirs, &[scheduler_name.to_owned()])
    });
    let pending = |p: &&&Arc<PodRecord>| p.node_name().is_none();
    let preempting_live = ours
        .iter()
        .filter(pending)
        .any(|p| pod_condition(p).is_some_and(|c| c.reason == reasons::WAITING_FOR_PREEMPTION));
    let decision = attempt.map(|a| &a.decision);
    let standing = if !object_exists {
        Standing::WaitingForPodGroup
    } else if let Some(g) = gate {
        match g.reason {
            GateReason::WaitingForPodGroup => Standing::WaitingForPodGroup,
            GateReason::WaitingForQuorum => Standing::WaitingForQuorum,
            GateReason::SchedulingGated => Standing::SchedulingGated,
            GateReason::WaitingForProvisioning => Standing::WaitingForProvisioning,
            GateReason::InvalidHierarchy => Standing::SchedulerError,
            // The claim is kube-controller-manager's to create; the group cannot be tried before it exists.
            GateReason::WaitingForResourceClaim => Standing::Unschedulable,
        }
    } else if preempting_live
        || decision
            .and_then(|d| d.preemption.as_ref())
            .is_some_and(|p| p.success)
    {
        Standing::Preempting
    } else if let Some(d) = decision {
        match d.outcome {
            Outcome::Scheduled => Standing::Schedulable,
            Outcome::Unschedulable => Standing::Unschedulable,
            Outcome::Error => Standing::SchedulerError,
            Outcome::Skipped => Standing::Scheduled,
        }
    } else if ours.iter().any(|p| p.node_name().is_none()) {
        // Pending members that the queue did not hand out: held for their group's sake (e.g. its CompositePodGroup
        // is missing) without a gate of their own.
        Standing::WaitingForPodGroup
    } else if foreign.is_some() {
        // Pending members no scheduler of ours places: never "Scheduled", whatever else is bound.
        Standing::SchedulerError
    } else {
        Standing::Scheduled
    };
    let reasons_text = gate
        .map(|g| g.message.clone())
        .or_else(|| {
            let d = decision?;
            let own = group
                .as_ref()
                .and_then(|g| d.conditions.iter().find(|c| &c.group == g));
            own.map(|c| c.message.clone())
                .filter(|m| !m.is_empty())
                .or_else(|| d.failures.first().map(|f| f.message.clone()))
        })
        .or_else(|| foreign.clone().filter(|_| standing == Standing::SchedulerError));
    let failing = matches!(standing, Standing::Unschedulable | Standing::Preempting);
    // The resources the verdict itself names insufficient: a node list without any (every node cordoned, say)
    // means capacity is not what keeps the group out, however little room the filtered nodes show.
    let named = reasons_text.as_deref().and_then(super::verdict::insufficient);
    let (shortfall, domains, holders, volumes, devices) = match attempt {
        Some(a) if failing && !a.nodes.is_empty() => {
            let key = a
                .entity
                .group
                .as_ref()
                .and_then(|g| g.topology_key.clone())
                .or_else(|| a.entity.tree.as_ref().and_then(|t| t.root().topology_key.clone()));
            let domains = key
                .as_deref()
                .map(|k| facts::domain_fits(&a.nodes, &a.entity.pods, k, &a.volumes, &a.devices))
                .unwrap_or_default();
            // Who holds the room: on the closest domain's nodes when there is a topology, else on every node.
            let on: Option<Vec<String>> = domains.first().map(|d| {
                a.nodes
                    .iter()
                    .filter(|n| n.node.labels.get(&d.key) == Some(&d.value))
                    .map(|n| n.name().to_owned())
                    .collect()
            });
            let mut shortfall = facts::shortfall(&a.nodes, &a.entity.pods);
            if let Some(named) = &named {
                shortfall.retain(|x| named.contains(&x.resource));
            }
            // Holders hold what the group lacks: the short resources, else what the closest domain lacks.
            let mut short: Vec<String> = shortfall.iter().map(|x| x.resource.clone()).collect();
            if short.is_empty()
                && let Some(d) = domains.first()
            {
                short.extend(
                    d.more_needed
                        .keys()
                        .filter(|r| named.as_ref().is_none_or(|n| n.contains(r)))
                        .cloned(),
                );
            }
            let volumes = facts::volume_blocker(&a.volumes, &a.entity.pods, a.nodes.iter());
            let devices = phalanx_scheduler::dra::scheduling::domain_shortfall(
                &a.devices,
                &a.entity.pods,
                a.nodes.iter(),
            );
            // When volumes or devices keep the group out and no resource is short, the pods on the nodes hold no
            // room it needs (preemption counts a device holder's devices; this list is about CPU and memory).
            let holders = if (volumes.is_some() || devices.is_some()) && shortfall.is_empty() {
                vec![]
            } else {
                facts::holders(&a.nodes, &a.entity.pods, on.as_deref(), &short, HOLDERS)
            };
            (shortfall, domains, holders, volumes, devices)
        }
        // A group that fits may still wait for a provisioner: say so.
        Some(a) => (
            vec![],
            vec![],
            vec![],
            facts::provisioning_waits(&a.volumes, &a.entity.pods),
            None,
        ),
        _ => (vec![], vec![], vec![], None, None),
    };
    let preemption = decision.and_then(|d| {
        let p = d.preemption.as_ref()?;
        // A preemption in flight evicts nothing new: name the pods it still waits for, those terminating on the
        // nodes its pods are nominated to, not a fresh victim list.
        let terminating = match attempt {
            Some(a) if p.ongoing => {
                let nominated: std::collections::HashSet<&str> =
                    d.nominations.iter().map(|n| &*n.node).collect();
                a.nodes
                    .iter()
                    .filter(|n| nominated.contains(&*n.node.name))
                    .flat_map(|n| {
                        n.pods
                            .iter()
                            .filter(|q| q.deleting)
                            .map(move |q| format!("{} on {}", q.key, n.node.name))
                    })
                    .collect()
            }
            _ => vec![],
        };
        let until = phalanx_driver::preemption_delay::until_in(&p.message);
        Some(PreemptionFacts {
            delayed_until: until.map(|t| t.to_string()),
            delay_seconds_left: until
                .map(|t| t.duration_since(k8s_openapi::jiff::Timestamp::now()).as_secs()),
            success: p.success,
            ongoing: p.ongoing,
            terminating,
            message: p.message.clone(),
            victims: d
                .victims
                .iter()
                .map(|v| {
                    let g = v
                        .group
                        .as_ref()
                        .map(|g| format!("group {}, ", g.name))
                        .unwrap_or_default();
                    format!("{} on {} ({g}priority {})", v.pod, v.node, v.priority)
                })
                .collect(),
        })
    });
    let placement = match decision {
        Some(d) if standing == Standing::Schedulable => d
            .bindings
            .iter()
            .map(|b| super::Placed {
                pod: b.pod.name.to_string(),
                node: b.node.to_string(),
            })
            .collect(),
        _ => vec![],
    };
    let member_facts: Vec<MemberFacts> = members
        .iter()
        .filter(|p| !p.is_terminal())
        .map(|p| member(p))
        .collect();
    let gang_breakers = gang_breakers(&member_facts, scheduler_name, group.is_some());
    let deletion = group
        .as_ref()
        .filter(|_| target != Target::Pod)
        .and_then(|g| deletion(&store, g, &members));
    let life = group
        .as_ref()
        .filter(|_| target != Target::Pod)
        .and_then(|g| super::life::gather(&store, g, &members, k8s_openapi::jiff::Timestamp::now()));
    // The dry run speaks of the pending pods; the group's life and the controllers' verdict head the answer.
    let placed = condition
        .as_ref()
        .is_some_and(|c| c.type_.ends_with("InitiallyScheduled") && c.status == conditions::status::TRUE);
    let base = standing;
    let standing = super::verdict::lifecycle(base, valid_false.is_some(), placed, life.as_ref());
    let cause = super::verdict::cause(valid_false.as_ref(), reasons_text.as_deref());
    // A missing group named after the pods' annotated owner: the owner integration has not made its groups (yet).
    let awaited_owner = group
        .as_ref()
        .filter(|g| store.group_node(g).is_none())
        .and_then(|g| {
            let top = members.first().and_then(|p| store.resolve_owners(p).top)?;
            (*g.name == *phalanx_api::owners::owner_group_name(&top.kind, &top.name))
                .then(|| format!("{} {}", top.kind, top.name))
        });
    let summary = super::verdict::summary(&super::verdict::SummaryFacts {
        state: standing,
        base,
        group: group.as_ref(),
        quorum: quorum.as_ref(),
        reasons: reasons_text.as_deref(),
        cause: cause.as_deref(),
        preemption: preemption.as_ref(),
        members: &member_facts,
        invalid: valid_false.as_ref(),
        life: life.as_ref(),
        awaited_owner: awaited_owner.as_deref(),
    });
    let events = events(client, &store, namespace, kind, name, &group, &members).await?;
    Ok(Explanation {
        kind: kind.into(),
        namespace: namespace.into(),
        name: name.into(),
        pod_group: match target {
            Target::Pod => group.as_ref().map(|g| g.name.to_string()),
            _ => None,
        },
        owner: match &entity {
            EntityKey::Group(root) => super::owner::describe(&store, root),
            EntityKey::Pod(_) => None,
        },
        state: standing,
        summary,
        cause,
        condition,
        invalid,
        quorum,
        members: member_facts,
        gang_breakers,
        reasons: reasons_text,
        shortfall,
        volumes,
        devices,
        domains,
        holders,
        preemption,
        placement,
        events,
        deletion,
        life,
    })
}

/// The leaf PodGroups under `g` (itself for a PodGroup).
fn leaves_of(store: &Store, g: &GroupKey) -> Vec<GroupKey> {
    match g.kind {
        GroupKind::PodGroup => vec![g.clone()],
        GroupKind::CompositePodGroup => store
            .hierarchy()
            .subtree(g)
            .into_iter()
            .filter(|k| k.kind == GroupKind::PodGroup)
            .collect(),
    }
}

fn has_children(store: &Store, g: Option<&GroupKey>) -> bool {
    g.is_some_and(|g| !store.hierarchy().children(g).is_empty())
}

/// What a group being deleted waits for: its non-terminal member pods (a PodGroup) or its child groups (a
/// CompositePodGroup). `None` when the group is not being deleted.
fn deletion(store: &Store, g: &GroupKey, members: &[Arc<PodRecord>]) -> Option<DeletionFacts> {
    let (meta, waiting_for) = match g.kind {
        GroupKind::PodGroup => {
            let pg = store.pod_group_at(g)?;
            let pods = members
                .iter()
                .filter(|p| !p.is_terminal())
                .map(|p| p.name().to_owned())
                .collect();
            (pg.metadata.clone(), pods)
        }
        GroupKind::CompositePodGroup => {
            let cpg = store.composite_pod_group_at(g)?;
            let kids = store
                .hierarchy()
                .children(g)
                .into_iter()
                .map(|k| format!("{:?} {}", k.kind, k.name))
                .collect();
            (cpg.metadata.clone(), kids)
        }
    };
    let since = meta.deletion_timestamp?;
    Some(DeletionFacts {
        since: since.0.to_string(),
        finalizers: meta.finalizers.unwrap_or_default(),
        waiting_for,
    })
}

/// The group's `Valid` condition when it is False.
fn invalid_condition(store: &Store, g: &GroupKey) -> Option<ConditionFacts> {
    let list = match g.kind {
        GroupKind::PodGroup => store.pod_group_at(g)?.status.as_ref()?.conditions.clone(),
        GroupKind::CompositePodGroup => store
            .composite_pod_group_at(g)?
            .status
            .as_ref()?
            .conditions
            .clone(),
    };
    list.iter()
        .find(|c| c.type_ == phalanx_controllers::status::VALID && c.status == conditions::status::FALSE)
        .map(condition_facts)
}

fn group_condition(store: &Store, g: &GroupKey) -> Option<ConditionFacts> {
    let (list, type_) = match g.kind {
        GroupKind::PodGroup => (
            store.pod_group_at(g)?.status.as_ref()?.conditions.clone(),
            conditions::POD_GROUP_INITIALLY_SCHEDULED,
        ),
        GroupKind::CompositePodGroup => (
            store
                .composite_pod_group_at(g)?
                .status
                .as_ref()?
                .conditions
                .clone(),
            conditions::COMPOSITE_POD_GROUP_INITIALLY_SCHEDULED,
        ),
    };
    // The scheduler's condition; before it wrote one, the controllers' `Valid=False` says why nothing happens.
    list.iter()
        .find(|c| c.type_ == type_)
        .or_else(|| {
            list.iter().find(|c| {
                c.type_ == phalanx_controllers::status::VALID && c.status == conditions::status::FALSE
            })
        })
        .map(condition_facts)
}

fn pod_condition(p: &PodRecord) -> Option<ConditionFacts> {
    let c = p.condition("PodScheduled")?;
    Some(ConditionFacts {
        type_: c.type_.to_owned(),
        status: c.status.to_owned(),
        reason: c.reason.as_deref().unwrap_or_default().to_owned(),
        message: c.message.as_deref().unwrap_or_default().to_owned(),
        since: c.last_transition_time.as_ref().map(|t| t.0.to_string()),
    })
}

fn member(p: &PodRecord) -> MemberFacts {
    MemberFacts {
        name: p.name().to_owned(),
        node: p.node_name().map(str::to_owned),
        scheduler_name: p.scheduler_name().to_owned(),
        priority: p.info.priority,
        reason: pod_condition(p).map(|c| c.reason).filter(|r| !r.is_empty()),
    }
}

/// Members that break the gang: a pending member of another scheduler is not counted and may be bound outside the
/// gang (upstream `validatePodGroup` fails the group, `schedule_one_podgroup.go`); a member whose priority differs
/// from the group's most common one is preempted and ordered apart from its siblings.
fn gang_breakers(members: &[MemberFacts], scheduler_name: &str, grouped: bool) -> Vec<String> {
    if !grouped {
        return vec![];
    }
    let mut out = Vec::new();
    for m in members {
        if m.scheduler_name != scheduler_name && m.node.is_none() {
            out.push(format!(
                "pod {} names schedulerName {:?}, not {scheduler_name:?}: it is not counted, and another scheduler \
                 may bind it outside the gang",
                m.name, m.scheduler_name
            ));
        }
    }
    let mut counts: Vec<(i32, usize)> = Vec::new();
    for m in members {
        match counts.iter_mut().find(|(p, _)| *p == m.priority) {
            Some(c) => c.1 += 1,
            None => counts.push((m.priority, 1)),
        }
    }
    if counts.len() > 1 {
        let common = counts.iter().max_by_key(|(p, n)| (*n, -p)).map_or(0, |(p, _)| *p);
        for m in members.iter().filter(|m| m.priority != common) {
            out.push(format!(
                "pod {} has priority {}, the rest of the gang {common}: members of one gang should share one \
                 priority (set it on the PodGroup with priorityClassName)",
                m.name, m.priority
            ));
        }
    }
    out
}

/// The last events of the target and of up to three member pods (core/v1 Events, which include events.k8s.io
/// ones), oldest first, at most [`EVENTS`].
async fn events(
    client: &kube::Client,
    store: &Store,
    namespace: &str,
    kind: &str,
    name: &str,
    group: &Option<GroupKey>,
    members: &[Arc<PodRecord>],
) -> anyhow::Result<Vec<EventFacts>> {
    let api: Api<Event> = Api::namespaced(client.clone(), namespace);
    // Events name their object by uid too: an earlier object of the same name (a Job's pod recreated, a group
    // deleted and created again) keeps its events for an hour, and they are not this object's.
    let group_uid = |g: &GroupKey| match g.kind {
        GroupKind::PodGroup => store.pod_group_at(g).and_then(|o| o.metadata.uid.clone()),
        GroupKind::CompositePodGroup => store
            .composite_pod_group_at(g)
            .and_then(|o| o.metadata.uid.clone()),
    };
    let target_uid = match kind {
        "Pod" => store
            .pod(&PodKey::new(namespace, name))
            .map(|p| p.uid().to_owned()),
        _ => group.as_ref().and_then(group_uid),
    };
    let mut objects: Vec<(String, String, Option<String>)> =
        vec![(kind.to_owned(), name.to_owned(), target_uid)];
    if let Some(g) = group
        && kind == "Pod"
    {
        let k = if g.kind == GroupKind::PodGroup {
            "PodGroup"
        } else {
            "CompositePodGroup"
        };
        objects.push((k.into(), g.name.to_string(), group_uid(g)));
    }
    for p in members.iter().filter(|p| p.node_name().is_none()).take(3) {
        if p.name() != name {
            objects.push(("Pod".into(), p.name().to_owned(), Some(p.uid().to_owned())));
        }
    }
    let mut out = Vec::new();
    for (k, n, uid) in objects {
        let mut selector = format!("involvedObject.kind={k},involvedObject.name={n}");
        if let Some(uid) = uid.filter(|u| !u.is_empty()) {
            selector.push_str(&format!(",involvedObject.uid={uid}"));
        }
        let lp = ListParams::default().fields(&selector);
        let list = api.list(&lp).await.map_err(|e| {
            anyhow::anyhow!("listing events of {k} {namespace}/{n} failed (needs list on events): {e}")
        })?;
        for e in list.items {
            let time = e
                .series
                .as_ref()
                .and_then(|s| s.last_observed_time.as_ref().map(|t| t.0.to_string()))
                .or_else(|| e.last_timestamp.as_ref().map(|t| t.0.to_string()))
                .or_else(|| e.event_time.as_ref().map(|t| t.0.to_string()));
            out.push(EventFacts {
                object: format!("{}/{n}", k.to_lowercase()),
                type_: e.type_.unwrap_or_default(),
                reason: e.reason.unwrap_or_default(),
                message: e.message.unwrap_or_default(),
                time,
                count: e.series.as_ref().and_then(|s| s.count).or(e.count).unwrap_or(1),
            });
        }
    }
    out.sort_by(|a, b| a.time.cmp(&b.time));
    let skip = out.len().saturating_sub(EVENTS);
    Ok(out.split_off(skip))
}
