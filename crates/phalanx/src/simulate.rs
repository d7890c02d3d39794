//! `phalanx simulate`: where the groups and pods of some manifests would land, against the live cluster or a
//! snapshot file, writing nothing. The manifests' objects are added to (or replace) the cluster's, fields the API
//! server or a controller would set are filled (uid, creation time, `spec.priority` from `priorityClassName` as the
//! Priority admission plugin does, `plugin/pkg/admission/priority`), and one dry run of the scheduler's cycles
//! ([`phalanx_driver::dry_run`]) decides.

use std::path::PathBuf;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use phalanx_scheduler::{EntityKey, GroupApi, GroupKey, GroupKind, Outcome, PodKey};
use phalanx_store::{ClusterState, MAX_TREE_DEPTH, Store};
use serde::Serialize;

use crate::explain::Placed;
use crate::tools::{self, ClusterSource};

/// The verdict for one group or group-less pod of the manifests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    /// `PodGroup`, `CompositePodGroup`, `PodGroup.scheduling.k8s.io`, `CompositePodGroup.scheduling.k8s.io` (upstream's
    /// own groups) or `Pod`.
    pub kind: String,
    /// `namespace/name`.
    pub name: String,
    /// `Scheduled` (it would land), `Unschedulable`, `SchedulerError`, `Preempting` (it would evict lower-priority
    /// pods first), or a gate reason (`WaitingForQuorum`, `WaitingForPodGroup`, `SchedulingGated`).
    pub result: String,
    /// Where each pod would be bound, when it would land.
    pub placement: Vec<Placed>,
    /// Why not (the core's message), when it would not.
    pub message: String,
}

/// Reads `files` (`-` = stdin; objects without a namespace go to `default`) and places their objects on the state of `source`. Errors: a file that does not read
/// or parse (named), a failed cluster read.
pub async fn simulate(
    files: &[PathBuf],
    source: &ClusterSource,
    view: &tools::View,
) -> anyhow::Result<Vec<Verdict>> {
    let mut manifests = ClusterState::default();
    for f in files {
        let (text, name) = tools::read_text(f)?;
        tools::objects::read_objects(&text, &name, &mut manifests)?;
    }
    let native = manifests
        .upstream
        .as_ref()
        .is_some_and(|u| !u.pod_groups.is_empty() || !u.composite_pod_groups.is_empty());
    if manifests.pods.is_empty()
        && manifests.pod_groups.is_empty()
        && manifests.composite_pod_groups.is_empty()
        && !native
    {
        anyhow::bail!("the manifests hold no Pod, PodGroup or CompositePodGroup to place");
    }
    let (client, mut state) = tools::read_cluster(source).await?;
    let targets = merge(&mut state, manifests);
    let store = Store::from_state(state);
    let dry = tools::run_dry(client, store.clone(), view)?;
    let mut out = Vec::new();
    for (kind, key) in targets {
        let entity = match &key {
            Subject::Group(g) => EntityKey::Group(store.hierarchy().root_of(g, MAX_TREE_DEPTH + 1)),
            Subject::Pod(p) => EntityKey::Pod(p.clone()),
        };
        let name = match &key {
            Subject::Group(g) => format!("{}/{}", g.namespace, g.name),
            Subject::Pod(p) => p.to_string(),
        };
        let mut v = Verdict {
            kind: kind.into(),
            name,
            result: String::new(),
            placement: vec![],
            message: String::new(),
        };
        if let Some(g) = dry.gate(&entity) {
            let kind = match &entity {
                EntityKey::Group(k) => k.kind,
                EntityKey::Pod(_) => GroupKind::PodGroup,
            };
            v.result = phalanx_driver::names::gate_group_reason(g.reason, kind).into();
            v.message = g.message.clone();
        } else if let Some(a) = dry.attempt(&entity) {
            let d = &a.decision;
            let own: Vec<PodKey> = match &key {
                Subject::Group(g) => store
                    .hierarchy()
                    .subtree(g)
                    .iter()
                    .chain(std::iter::once(g))
                    .flat_map(|l| store.hierarchy().members(l))
                    .collect(),
                Subject::Pod(p) => vec![p.clone()],
            };
            v.placement = d
                .bindings
                .iter()
                .filter(|b| own.contains(&b.pod))
                .map(|b| Placed {
                    pod: b.pod.name.to_string(),
                    node: b.node.to_string(),
                })
                .collect();
            v.result = match d.outcome {
                _ if d.preemption.as_ref().is_some_and(|p| p.success) => "Preempting",
                Outcome::Scheduled => "Scheduled",
                Outcome::Unschedulable => "Unschedulable",
                Outcome::Error => "SchedulerError",
                Outcome::Skipped => "Skipped",
            }
            .into();
            let cond = match &key {
                Subject::Group(g) => d
                    .conditions
                    .iter()
                    .find(|c| &c.group == g)
                    .map(|c| c.message.clone()),
                Subject::Pod(_) => None,
            };
            v.message = cond
                .filter(|m| !m.is_empty())
                .or_else(|| d.failures.first().map(|f| f.message.clone()))
                .unwrap_or_default();
        } else {
            v.result = "NothingPending".into();
            v.message = "no pod of this scheduler is pending for it".into();
        }
        out.push(v);
    }
    Ok(out)
}

enum Subject {
    Group(GroupKey),
    Pod(PodKey),
}

/// Adds `m` to `state` (an object with the same namespace and name replaces the cluster's) and returns what to
/// report: every PodGroup and CompositePodGroup of the manifests, every other PodGroup a manifest pod joins, and
/// every pod without a group.
fn merge(state: &mut ClusterState, m: ClusterState) -> Vec<(&'static str, Subject)> {
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let classes = state
        .priority_classes
        .iter()
        .chain(m.priority_classes.iter())
        .cloned()
        .collect::<Vec<_>>();
    let mut targets = Vec::new();
    fn fill(meta: &mut kube::api::ObjectMeta, kind: &str, now: &Time) {
        let ns = meta.namespace.get_or_insert_with(|| "default".into()).clone();
        let name = meta.name.clone().unwrap_or_default();
        meta.uid
            .get_or_insert_with(|| format!("simulated-{kind}-{ns}-{name}"));
        meta.creation_timestamp.get_or_insert_with(|| now.clone());
        meta.generation.get_or_insert(1);
    }
    fn replace<K: kube::Resource>(list: &mut Vec<K>, o: K) {
        list.retain(|x| !(x.name_any() == o.name_any() && x.namespace() == o.namespace()));
        list.push(o);
    }
    for mut g in m.pod_groups {
        fill(&mut g.metadata, "podgroup", &now);
        targets.push((
            "PodGroup",
            Subject::Group(GroupKey::pod_group(
                &g.namespace().unwrap_or_default(),
                &g.name_any(),
            )),
        ));
        replace(&mut state.pod_groups, g);
    }
    for mut g in m.composite_pod_groups {
        fill(&mut g.metadata, "compositepodgroup", &now);
        targets.push((
            "CompositePodGroup",
            Subject::Group(GroupKey::composite(
                &g.namespace().unwrap_or_default(),
                &g.name_any(),
            )),
        ));
        replace(&mut state.composite_pod_groups, g);
    }
    // Manifests with upstream's own groups simulate a cluster that serves them (`phalanx_store::upstream`).
    if let Some(mu) = m.upstream {
        let su = state.upstream.get_or_insert_with(Default::default);
        su.composites_served |= mu.composites_served;
        su.composites_v1beta1 |= mu.composites_v1beta1;
        let native = |key: GroupKey| GroupKey {
            api: GroupApi::Upstream,
            ..key
        };
        for mut g in mu.pod_groups {
            fill(&mut g.metadata, "podgroup.scheduling.k8s.io", &now);
            let key = GroupKey::pod_group(&g.namespace().unwrap_or_default(), &g.name_any());
            targets.push(("PodGroup.scheduling.k8s.io", Subject::Group(native(key))));
            replace(&mut su.pod_groups, g);
        }
        for mut g in mu.composite_pod_groups {
            fill(&mut g.metadata, "compositepodgroup.scheduling.k8s.io", &now);
            let key = GroupKey::composite(&g.namespace().unwrap_or_default(), &g.name_any());
            targets.push(("CompositePodGroup.scheduling.k8s.io", Subject::Group(native(key))));
            replace(&mut su.composite_pod_groups, g);
        }
    }
    let upstream_served = state.upstream.is_some();
    for mut p in m.pods {
        fill(&mut p.metadata, "pod", &now);
        if let Some(spec) = p.spec.as_mut() {
            spec.scheduler_name
                .get_or_insert_with(|| "default-scheduler".into());
            if spec.priority.is_none() {
                let class = match spec.priority_class_name.as_deref() {
                    Some(n) => classes.iter().find(|c| c.name_any() == n),
                    None => phalanx_store::priority::global_default(classes.iter()),
                };
                spec.priority = Some(class.and_then(|c| c.value).unwrap_or(0));
            }
        }
        let ns = p.namespace().unwrap_or_default();
        match phalanx_store::record::group_of(&p, upstream_served) {
            (None, ..) => targets.push(("Pod", Subject::Pod(PodKey::new(&ns, &p.name_any())))),
            // A pod joining a group the cluster already has: report that group once.
            (Some(g), api, _) => {
                let key = GroupKey {
                    api,
                    ..GroupKey::pod_group(&ns, g)
                };
                if !targets
                    .iter()
                    .any(|(_, t)| matches!(t, Subject::Group(k) if *k == key))
                {
                    let kind = match api {
                        GroupApi::Phalanx => "PodGroup",
                        GroupApi::Upstream => "PodGroup.scheduling.k8s.io",
                    };
                    targets.push((kind, Subject::Group(key)));
                }
            }
        }
        replace(&mut state.pods, p);
    }
    for x in m.nodes {
        replace(&mut state.nodes, x);
    }
    for x in m.workloads {
        replace(&mut state.workloads, x);
    }
    for x in m.priority_classes {
        replace(&mut state.priority_classes, x);
    }
    for x in m.pdbs {
        replace(&mut state.pdbs, x);
    }
    targets
}

/// The text `phalanx simulate` prints: one block per verdict.
pub fn render(verdicts: &[Verdict]) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    for v in verdicts {
        let _ = writeln!(s, "{} {}: {}", v.kind, v.name, v.result);
        for p in &v.placement {
            let _ = writeln!(s, "  {} -> {}", p.pod, p.node);
        }
        if !v.message.is_empty() && v.result != "Scheduled" {
            let _ = writeln!(s, "  {}", v.message);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_fills_what_the_api_would_and_reports_joined_groups() {
        let mut state = ClusterState::default();
        tools::objects::read_objects(
            "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: high}\nvalue: 1000\n---\n\
             apiVersion: v1\nkind: Pod\nmetadata: {name: old, namespace: ns}\nspec: {containers: []}\n",
            "cluster",
            &mut state,
        )
        .expect("cluster");
        let mut m = ClusterState::default();
        tools::objects::read_objects(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: a, labels: {scheduling.phalanx.dev/pod-group: g}}\n\
             spec: {priorityClassName: high, containers: []}\n---\n\
             apiVersion: v1\nkind: Pod\nmetadata: {name: b, labels: {scheduling.phalanx.dev/pod-group: g}}\n\
             spec: {containers: []}\n---\n\
             apiVersion: v1\nkind: Pod\nmetadata: {name: old, namespace: ns}\nspec: {containers: []}\n",
            "m.yaml",
            &mut m,
        )
        .expect("manifests");
        let targets = merge(&mut state, m);
        let names: Vec<String> = targets
            .iter()
            .map(|(k, t)| match t {
                Subject::Group(g) => format!("{k} {}/{}", g.namespace, g.name),
                Subject::Pod(p) => format!("{k} {p}"),
            })
            .collect();
        assert_eq!(names, vec!["PodGroup default/g", "Pod ns/old"]);
        assert_eq!(state.pods.len(), 3, "old is replaced, not doubled");
        let a = state.pods.iter().find(|p| p.name_any() == "a").expect("a");
        let spec = a.spec.as_ref().expect("spec");
        assert_eq!(spec.priority, Some(1000), "from priorityClassName");
        assert_eq!(spec.scheduler_name.as_deref(), Some("default-scheduler"));
        assert!(a.metadata.uid.is_some() && a.metadata.creation_timestamp.is_some());
        assert_eq!(a.namespace().as_deref(), Some("default"));
    }
}
