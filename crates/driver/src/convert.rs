//! Conversion of cached API objects into the core's model, with per-object caches keyed by `resourceVersion` so a
//! cycle does not re-parse unchanged nodes and pods (upstream keeps `NodeInfo`s in its cache for the same reason,
//! `pkg/scheduler/backend/cache/snapshot.go`).

use std::{collections::HashMap, sync::Arc};

use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::ResourceExt;
use phalanx_api::{v1alpha3::CompositePodGroup, v1beta1::PodGroup};
use phalanx_scheduler::model::{DisruptionMode, GroupPolicy, PreemptionPolicy};
use phalanx_scheduler::{CompositeGroupInfo, CompositePolicy, GroupInfo, PodInfo, PodKey};
use phalanx_store::PodRecord;

/// Priority and preemption policy of a group from its PriorityClass (`phalanx_store::priority::resolve`), never from
/// `spec.priority`: a tenant can write that field before the controller fills it, and would jump the queue. A class
/// that does not exist gives priority 0 (the controller reports the group `Valid=False`).
///
/// `spec.preemptionPolicy: Never` (`never`) is honoured whatever the class says: a tenant may always restrict
/// itself. The other way round, `PreemptLowerPriority` under a class that says `Never`, is an escalation: the class
/// wins and the controller reports the group `Valid=False/PreemptionPolicyIgnored`.
///
/// `None` while nothing is resolved yet (no class named and `spec.priority` not filled): the pods are then compared
/// among themselves, as upstream does for a group without a priority.
fn resolved(
    class_name: Option<&str>,
    filled: bool,
    never: bool,
    classes: &[Arc<PriorityClass>],
) -> (Option<i32>, Option<PreemptionPolicy>) {
    let restrict = |policy: Option<PreemptionPolicy>| {
        if never {
            Some(PreemptionPolicy::Never)
        } else {
            policy
        }
    };
    if class_name.is_none_or(str::is_empty) && !filled {
        return (None, restrict(None));
    }
    match phalanx_store::priority::resolve(class_name, classes.iter().map(AsRef::as_ref)) {
        Ok(r) if r.preemption_policy == "Never" => (Some(r.priority), Some(PreemptionPolicy::Never)),
        Ok(r) => (
            Some(r.priority),
            restrict(Some(PreemptionPolicy::PreemptLowerPriority)),
        ),
        Err(_) => (Some(0), restrict(Some(PreemptionPolicy::PreemptLowerPriority))),
    }
}

/// Whether a group's spec says `preemptionPolicy: Never`.
fn says_never(policy: Option<phalanx_api::v1beta1::PreemptionPolicy>) -> bool {
    policy == Some(phalanx_api::v1beta1::PreemptionPolicy::Never)
}

/// A PodGroup as the core sees it. `parent` is set from `spec.parentCompositePodGroupName`; priority and preemption
/// policy come from the PriorityClass (`classes`), or `Never` from the spec (see [`resolved`]). A Phalanx PodGroup;
/// [`group_info_in`] for either API group.
pub fn group_info(g: &PodGroup, classes: &[Arc<PriorityClass>]) -> GroupInfo {
    group_info_in(phalanx_scheduler::GroupApi::Phalanx, g, classes)
}

/// [`group_info`] of a PodGroup of the API group `api`: an upstream `scheduling.k8s.io` PodGroup is cached in
/// Phalanx's type (the fields are upstream's, see `phalanx_store::upstream`), and its key and its parent's key
/// carry `api`, so that it is never confused with a Phalanx group of the same name.
pub fn group_info_in(
    api: phalanx_scheduler::GroupApi,
    g: &PodGroup,
    classes: &[Arc<PriorityClass>],
) -> GroupInfo {
    let (priority, preemption_policy) = resolved(
        g.spec.priority_class_name.as_deref(),
        g.spec.priority.is_some(),
        says_never(g.spec.preemption_policy),
        classes,
    );
    let ns = g.namespace().unwrap_or_default();
    let name = g.name_any();
    let policy = match &g.spec.scheduling_policy.gang {
        Some(gang) => GroupPolicy::Gang {
            min_count: u32::try_from(gang.min_count).unwrap_or(1).max(1),
        },
        None => GroupPolicy::Basic,
    };
    GroupInfo {
        key: phalanx_scheduler::GroupKey {
            api,
            ..phalanx_scheduler::GroupKey::pod_group(&ns, &name)
        },
        uid: g.metadata.uid.as_deref().unwrap_or_default().into(),
        generation: g.metadata.generation.unwrap_or(0),
        policy,
        topology_key: g
            .spec
            .scheduling_constraints
            .as_ref()
            .and_then(|c| c.topology.first())
            .map(|t| t.key.clone()),
        preferred_topology: g
            .spec
            .scheduling_constraints
            .as_ref()
            .map(|c| level_keys(&c.preferred_topology))
            .unwrap_or_default(),
        priority,
        preemption_policy,
        parent: g
            .spec
            .parent_composite_pod_group_name
            .as_deref()
            .filter(|p| !p.is_empty())
            .map(|p| phalanx_scheduler::GroupKey {
                api,
                ..phalanx_scheduler::GroupKey::composite(&ns, p)
            }),
        disruption_mode: if g.spec.disruption_mode.as_ref().is_some_and(|d| d.all.is_some()) {
            DisruptionMode::All
        } else {
            DisruptionMode::Single
        },
        workload: g
            .spec
            .workload_ref
            .as_ref()
            .map(|w| w.workload_name.as_str().into()),
        resizing: None,
        preemption_delay_seconds: delay_seconds(g.spec.preemption_delay_seconds),
        provisioning: None,
    }
}

/// A CompositePodGroup as the core sees it (KEP-6012): `parent` from `spec.parentCompositePodGroupName`,
/// `minGroupCount` from the gang policy (values below 1 are read as 1; the CRD schema already rejects them), priority
/// and preemption policy from the PriorityClass as for a PodGroup.
pub fn composite_info(g: &CompositePodGroup, classes: &[Arc<PriorityClass>]) -> CompositeGroupInfo {
    composite_info_in(phalanx_scheduler::GroupApi::Phalanx, g, classes)
}

/// [`composite_info`] of a CompositePodGroup of the API group `api` (see [`group_info_in`]).
pub fn composite_info_in(
    api: phalanx_scheduler::GroupApi,
    g: &CompositePodGroup,
    classes: &[Arc<PriorityClass>],
) -> CompositeGroupInfo {
    let (priority, preemption_policy) = resolved(
        g.spec.priority_class_name.as_deref(),
        g.spec.priority.is_some(),
        says_never(g.spec.preemption_policy),
        classes,
    );
    let ns = g.namespace().unwrap_or_default();
    let name = g.name_any();
    let policy = match &g.spec.scheduling_policy.gang {
        Some(gang) => CompositePolicy::Gang {
            min_group_count: u32::try_from(gang.min_group_count).unwrap_or(1).max(1),
        },
        None => CompositePolicy::Basic,
    };
    CompositeGroupInfo {
        key: phalanx_scheduler::GroupKey {
            api,
            ..phalanx_scheduler::GroupKey::composite(&ns, &name)
        },
        uid: g.metadata.uid.as_deref().unwrap_or_default().into(),
        generation: g.metadata.generation.unwrap_or(0),
        policy,
        topology_key: g
            .spec
            .scheduling_constraints
            .as_ref()
            .and_then(|c| c.topology.first())
            .map(|t| t.key.clone()),
        preferred_topology: g
            .spec
            .scheduling_constraints
            .as_ref()
            .map(|c| level_keys(&c.preferred_topology))
            .unwrap_or_default(),
        priority,
        preemption_policy,
        parent: g
            .spec
            .parent_composite_pod_group_name
            .as_deref()
            .filter(|p| !p.is_empty())
            .map(|p| phalanx_scheduler::GroupKey {
                api,
                ..phalanx_scheduler::GroupKey::composite(&ns, p)
            }),
        disruption_mode: if g.spec.disruption_mode.as_ref().is_some_and(|d| d.all.is_some()) {
            DisruptionMode::All
        } else {
            DisruptionMode::Single
        },
        workload: Some(g.spec.workload_ref.workload_name.as_str().into()),
        preemption_delay_seconds: delay_seconds(g.spec.preemption_delay_seconds),
    }
}

/// `spec.preemptionDelaySeconds` as the core takes it: a negative value (the CRD schema rejects one) reads as 0.
fn delay_seconds(v: Option<i32>) -> Option<u32> {
    v.map(|s| u32::try_from(s).unwrap_or(0))
}

/// Conditions and generation of a cached group object.
pub fn pod_group_conditions(g: &PodGroup) -> &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition] {
    g.status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default()
}

/// The part of a cached upstream PodGroup (held in Phalanx's type, `phalanx_store::upstream`) that a status write
/// of `scheduling.k8s.io/v1beta1` needs: its metadata (name, uid, generation, resourceVersion) and conditions. The
/// spec is left empty: the write sends only `status.conditions`, and Phalanx never writes an upstream spec.
pub fn native_view(g: &PodGroup) -> k8s_openapi::api::scheduling::v1beta1::PodGroup {
    k8s_openapi::api::scheduling::v1beta1::PodGroup {
        metadata: g.metadata.clone(),
        spec: Default::default(),
        status: Some(k8s_openapi::api::scheduling::v1beta1::PodGroupStatus {
            conditions: Some(pod_group_conditions(g).to_vec()),
            ..Default::default()
        }),
    }
}

/// Conditions of an upstream PodGroup.
pub fn native_conditions(
    g: &k8s_openapi::api::scheduling::v1beta1::PodGroup,
) -> &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition] {
    g.status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
}

/// [`native_view`] of a cached upstream CompositePodGroup, at the version `V` the store watches it
/// (`phalanx_store::Store::upstream_composite_group_version`).
pub fn native_composite_view<V: phalanx_api::native::CompositeVersion>(
    g: &CompositePodGroup,
) -> phalanx_api::native::NativeCompositePodGroup<V> {
    phalanx_api::native::NativeCompositePodGroup::status_view(
        g.metadata.clone(),
        composite_conditions(g).to_vec(),
    )
}

/// Conditions of a cached CompositePodGroup.
pub fn composite_conditions(
    g: &CompositePodGroup,
) -> &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition] {
    g.status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default()
}

/// The models of pods whose group came from their owner chain (the store's records hold every node's and every
/// other pod's model).
#[derive(Default)]
pub struct ModelCache {
    /// Per pod: the record's model it was derived from, the group, and the model with that group.
    pods: HashMap<PodKey, (Arc<PodInfo>, phalanx_scheduler::GroupKey, Arc<PodInfo>)>,
}

impl ModelCache {
    /// The pod's model with `group`, its PodGroup as the store resolved it (`Store::group_of_pod`: its own label or
    /// field, else its owner's). For a pod in its own group or none, that is the record's model itself (the store
    /// built it once, and keeps it across status-only updates); a pod that joins its owner's group gets a copy
    /// with that group, cached while the record's model and the group stay the same. The copy shares the labels
    /// and the scheduling data (`Arc`s) with the record.
    pub fn pod(&mut self, p: &PodRecord, group: Option<phalanx_scheduler::GroupKey>) -> Arc<PodInfo> {
        let Some(group) =
            group.filter(|g| p.info.group_name.as_deref() != Some(&*g.name) || p.info.group_api != g.api)
        else {
            self.pods.remove(p.key());
            return p.info.clone();
        };
        if let Some((source, cg, c)) = self.pods.get(p.key())
            && Arc::ptr_eq(source, &p.info)
            && *cg == group
        {
            return c.clone();
        }
        let c = Arc::new(PodInfo {
            group_name: Some(group.name.clone()),
            group_api: group.api,
            ..(*p.info).clone()
        });
        self.pods
            .insert(p.key().clone(), (p.info.clone(), group, c.clone()));
        c
    }

    /// Drops a pod from the cache.
    pub fn remove_pod(&mut self, key: &PodKey) {
        self.pods.remove(key);
    }

    /// Keeps only the pods the predicate accepts: a resync drops what a delete missed across a relist left behind.
    pub fn retain(&mut self, keep_pod: impl Fn(&PodKey) -> bool) {
        self.pods.retain(|k, _| keep_pod(k));
    }
}

/// The keys of `preferredTopology` levels, in order (narrowest first).
fn level_keys(levels: &[phalanx_api::v1beta1::TopologyPreference]) -> Vec<String> {
    levels.iter().map(|t| t.key.clone()).collect()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn pg(class: Option<&str>, priority: Option<i32>) -> PodGroup {
        pg_with(class, priority, None)
    }

    fn pg_with(class: Option<&str>, priority: Option<i32>, policy: Option<&str>) -> PodGroup {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "scheduling.phalanx.dev/v1beta1",
            "kind": "PodGroup",
            "metadata": { "name": "g", "namespace": "ns" },
            "spec": {
                "schedulingPolicy": { "gang": { "minCount": 1 } },
                "priorityClassName": class,
                "priority": priority,
                "preemptionPolicy": policy,
            }
        }))
        .expect("valid PodGroup")
    }

    fn class(name: &str, value: i32) -> Arc<PriorityClass> {
        class_with(name, value, "Never")
    }

    fn class_with(name: &str, value: i32, policy: &str) -> Arc<PriorityClass> {
        Arc::new(PriorityClass {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            value: Some(value),
            preemption_policy: Some(policy.into()),
            ..Default::default()
        })
    }

    /// A tenant's own `preemptionPolicy: Never` is honoured under a class that may preempt (restricting is always
    /// safe); `PreemptLowerPriority` under a `Never` class is not (the class wins).
    #[test]
    fn a_written_never_restricts_and_a_written_preempt_does_not_escalate() {
        let classes = [
            class_with("may", 100, "PreemptLowerPriority"),
            class("never", 100),
        ];
        let g = group_info(&pg_with(Some("may"), Some(100), Some("Never")), &classes);
        assert_eq!(g.preemption_policy, Some(PreemptionPolicy::Never));
        assert_eq!(g.priority, Some(100));
        let g = group_info(&pg_with(Some("may"), Some(100), None), &classes);
        assert_eq!(g.preemption_policy, Some(PreemptionPolicy::PreemptLowerPriority));
        let g = group_info(
            &pg_with(Some("never"), Some(100), Some("PreemptLowerPriority")),
            &classes,
        );
        assert_eq!(g.preemption_policy, Some(PreemptionPolicy::Never));
        // Before the controller filled anything, and with a class that does not exist: still Never.
        assert_eq!(
            group_info(&pg_with(None, None, Some("Never")), &classes).preemption_policy,
            Some(PreemptionPolicy::Never)
        );
        assert_eq!(
            group_info(&pg_with(Some("gone"), None, Some("Never")), &classes).preemption_policy,
            Some(PreemptionPolicy::Never)
        );
    }

    /// A tenant who writes `spec.priority` before the controller does must not jump the queue: the value comes
    /// from the PriorityClass.
    #[test]
    fn user_set_priority_is_ignored_for_the_class_value() {
        let classes = [class("low", 10)];
        let g = group_info(&pg(Some("low"), Some(1_000_000_000)), &classes);
        assert_eq!(g.priority, Some(10));
        assert_eq!(g.preemption_policy, Some(PreemptionPolicy::Never));
        // Filled without a class: the global default, else 0, never the written number.
        let g = group_info(&pg(None, Some(1_000_000_000)), &classes);
        assert_eq!(g.priority, Some(0));
        // Nothing named, nothing filled: not resolved yet.
        assert_eq!(group_info(&pg(None, None), &classes).priority, None);
        // A class that does not exist: the lowest priority, not the written one.
        assert_eq!(group_info(&pg(Some("gone"), Some(5)), &classes).priority, Some(0));
    }

    fn pod(rv: &str, phase: &str, node: Option<&str>) -> k8s_openapi::api::core::v1::Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "resourceVersion": rv, "labels": {"app": "a"}},
            "spec": {"schedulerName": "phalanx-scheduler", "nodeName": node, "containers": [{"name": "c"}]},
            "status": {"phase": phase},
        }))
        .expect("valid Pod")
    }

    /// A pod in its own group or none gets the record's model itself; a pod that joins its owner's group gets one
    /// copy with that group, kept while the record's model (shared across status-only updates) stays the same.
    #[test]
    fn the_records_model_is_handed_out_and_an_owners_group_is_copied_once() {
        let mut cache = ModelCache::default();
        let bound = PodRecord::from_pod(&pod("1", "Pending", Some("n1")));
        assert!(Arc::ptr_eq(&cache.pod(&bound, None), &bound.info));
        let running = PodRecord::from_pod(&pod("2", "Running", Some("n1"))).sharing_model_of(&bound);
        let g = phalanx_scheduler::GroupKey::pod_group("ns", "g");
        let grouped = cache.pod(&running, Some(g.clone()));
        assert_eq!(grouped.group_name.as_deref(), Some("g"));
        assert!(
            Arc::ptr_eq(&grouped.spec, &bound.info.spec),
            "the copy shares the scheduling data"
        );
        let again = PodRecord::from_pod(&pod("3", "Running", Some("n1"))).sharing_model_of(&running);
        assert!(Arc::ptr_eq(&cache.pod(&again, Some(g.clone())), &grouped));
        let moved = PodRecord::from_pod(&pod("4", "Running", Some("n2"))).sharing_model_of(&again);
        let regrouped = cache.pod(&moved, Some(g));
        assert!(!Arc::ptr_eq(&regrouped, &grouped));
        assert_eq!(regrouped.node_name.as_deref(), Some("n2"));
    }
}
