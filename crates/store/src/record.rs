//! The pod cache's compact record: what scheduling, the controllers and `explain` read of a pod, instead of the
//! decoded API object.
//!
//! A decoded `k8s_openapi` `Pod` is mostly inline space for fields nobody here sets or reads: a `Container` alone
//! is 2,336 bytes before any of its strings, and a slimmed pod of one container took 7.5 KB of heap
//! (`cargo bench -p phalanx-store --bench cache_bytes`, docs/benchmarks.md). A [`PodRecord`] keeps the scheduler's
//! model of the pod ([`PodInfo`]: requests summed per container once, affinity, spread, tolerations, ports,
//! claims; labels shared) built once when the watch delivers the object, plus the few metadata and status fields
//! the controllers and `explain` read. The driver hands the record's `PodInfo` to the core as it is, so a pod's
//! scheduling data exists once in the process. kube-scheduler keeps whole pods in its informer cache
//! (`pkg/scheduler/backend/cache`), and so did Phalanx before this record.
//!
//! Writes that need the whole object (none on the scheduling path: binds, evictions and status patches are built
//! from names and uids) read it from the API server.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::runtime::reflector::Lookup;
use phalanx_api::GroupRef;
use phalanx_scheduler::model::NodeStatic;
use phalanx_scheduler::{ConvertError, GroupApi, GroupKey, PodInfo, PodKey};

use crate::intern::Interner;

/// Pod condition types a record keeps: `PodScheduled` (the scheduler's own verdict, which the status writer
/// compares before it writes), `Ready` (the PodGroup controller's `readyPods`) and `DisruptionTarget` (set on a
/// preemption victim, read by the preemption tracker). kubelet's and kwok's `Initialized` and `ContainersReady`
/// are read by no one here.
pub const KEPT_CONDITIONS: [&str; 3] = [
    "PodScheduled",
    "Ready",
    phalanx_api::conditions::DISRUPTION_TARGET,
];

/// The API's condition statuses (`ConditionStatus`, `k8s.io/api/core/v1/types.go`); any other value is kept as
/// `Unknown`.
const CONDITION_STATUSES: [&str; 3] = ["True", "False", "Unknown"];

/// A pod condition of a [`KEPT_CONDITIONS`] type as a record keeps it: type and status point at static strings,
/// and `lastProbeTime` is dropped, so a `True` condition without reason or message (the API server's
/// `PodScheduled`, a kubelet's `Ready`) allocates nothing. About 80 bytes, against about 400 for a decoded
/// `PodCondition` and its strings.
#[derive(Clone, Debug, PartialEq)]
pub struct KeptCondition {
    /// `type`, one of [`KEPT_CONDITIONS`].
    pub type_: &'static str,
    /// `status`: `True`, `False` or `Unknown`.
    pub status: &'static str,
    /// `reason`.
    pub reason: Option<Box<str>>,
    /// `message`.
    pub message: Option<Box<str>>,
    /// `lastTransitionTime`.
    pub last_transition_time: Option<Time>,
}

impl KeptCondition {
    /// The kept form of `c`, or `None` when its type is not one of [`KEPT_CONDITIONS`].
    fn of(c: &PodCondition) -> Option<KeptCondition> {
        let type_ = KEPT_CONDITIONS.iter().copied().find(|t| *t == c.type_)?;
        Some(KeptCondition {
            type_,
            status: CONDITION_STATUSES
                .iter()
                .copied()
                .find(|s| *s == c.status)
                .unwrap_or("Unknown"),
            reason: c.reason.as_deref().map(Into::into),
            message: c.message.as_deref().map(Into::into),
            last_transition_time: c.last_transition_time.clone(),
        })
    }
}

/// One pod as the cache keeps it (see the module doc).
///
/// Built by [`PodRecord::from_pod`]; immutable once cached (the watch replaces the whole record). Cheap to clone
/// behind the cache's `Arc`.
#[derive(Clone, Debug, PartialEq)]
pub struct PodRecord {
    /// The scheduler's model. Its `group_name` is the pod's own group (the label, else
    /// `spec.schedulingGroup.podGroupName`); a group resolved through the owner chain is the index's
    /// ([`crate::Store::group_of_pod`]).
    pub info: Arc<PodInfo>,
    /// `metadata.resourceVersion`.
    pub resource_version: Option<String>,
    /// `metadata.annotations`, less `kubectl apply`'s copy of the object ([`crate::slim::LAST_APPLIED`]).
    pub annotations: BTreeMap<String, String>,
    /// `metadata.ownerReferences` (owner resolution, [`crate::owners`]).
    pub owner_references: Vec<OwnerReference>,
    /// `metadata.creationTimestamp`.
    pub creation_timestamp: Option<Time>,
    /// `metadata.deletionTimestamp`.
    pub deletion_timestamp: Option<Time>,
    /// `spec.priorityClassName`.
    pub priority_class_name: Option<String>,
    /// `status.phase`, one of the API's five values (`None` when unset or unknown to this version).
    pub phase: Option<&'static str>,
    /// `status.conditions` of the [`KEPT_CONDITIONS`] types, without `lastProbeTime`.
    pub conditions: Vec<KeptCondition>,
    /// `status.nominatedNodeName`.
    pub nominated_node_name: Option<String>,
    /// `status.startTime`.
    pub start_time: Option<Time>,
}

/// The API's pod phases (`PodPhase`, `k8s.io/api/core/v1/types.go`), so that a record points at one static copy.
const PHASES: [&str; 5] = ["Pending", "Running", "Succeeded", "Failed", "Unknown"];

/// The group `pod` names, the API group it lives in, and the message refusing the pod when its reference is
/// ambiguous. The rule: Phalanx's label names a `scheduling.phalanx.dev` PodGroup; `spec.schedulingGroup.podGroupName`
/// names a `scheduling.k8s.io` PodGroup where the server serves them (`upstream`), else a Phalanx one (as it did
/// before); where upstream's API is served, a pod setting both is ambiguous (upstream's controllers would count it in
/// one group and Phalanx in another) and is not scheduled (it stays in the label's group, which waits for it).
pub fn group_of(pod: &Pod, upstream: bool) -> (Option<&str>, GroupApi, Option<String>) {
    match phalanx_api::pod_group_ref(pod) {
        None => (None, GroupApi::Phalanx, None),
        Some(GroupRef::Label(n)) => (Some(n), GroupApi::Phalanx, None),
        Some(GroupRef::Field(n)) if upstream => (Some(n), GroupApi::Upstream, None),
        Some(GroupRef::Field(n)) => (Some(n), GroupApi::Phalanx, None),
        Some(GroupRef::Both { label, field }) if upstream => (
            Some(label),
            GroupApi::Phalanx,
            Some(format!(
                "the pod names two PodGroups: {label:?} of scheduling.phalanx.dev by the label {} and {field:?} of \
                 scheduling.k8s.io by spec.schedulingGroup.podGroupName; keep one of them",
                phalanx_api::labels::POD_GROUP
            )),
        ),
        Some(GroupRef::Both { label, .. }) => (Some(label), GroupApi::Phalanx, None),
    }
}

impl PodRecord {
    /// The record of an API pod: the scheduler's model ([`PodInfo::from_pod`], with the pod's own group) and the
    /// fields listed on the struct. Never fails: what the model cannot convert lands in `info.invalid`.
    pub fn from_pod(pod: &Pod) -> PodRecord {
        PodRecord::from_pod_shared(pod, &mut Interner::default(), false)
    }

    /// [`PodRecord::from_pod`] with the labels, namespace, scheduler name and group name shared through `interner`
    /// with the cache's other records ([`crate::intern`]).
    ///
    /// `upstream` says whether the server serves `scheduling.k8s.io` PodGroups: then `spec.schedulingGroup` names
    /// one of those, and a pod naming groups by both the label and the field is refused (see [`group_of`]).
    pub fn from_pod_shared(pod: &Pod, interner: &mut Interner, upstream: bool) -> PodRecord {
        let meta = &pod.metadata;
        let status = pod.status.as_ref();
        let mut annotations = meta.annotations.clone().unwrap_or_default();
        annotations.remove(crate::slim::LAST_APPLIED);
        let conditions = status
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .filter_map(KeptCondition::of)
            .collect();
        let (group, group_api, ambiguous) = group_of(pod, upstream);
        let mut info = PodInfo::from_pod(pod, group);
        info.group_api = group_api;
        if ambiguous.is_some() {
            info.invalid = ambiguous;
        }
        info.labels = interner.labels(&info.labels);
        info.key.namespace = interner.string(&info.key.namespace);
        info.scheduler_name = interner.string(&info.scheduler_name);
        info.group_name = info.group_name.as_ref().map(|g| interner.string(g));
        PodRecord {
            info: Arc::new(info),
            resource_version: meta.resource_version.clone(),
            annotations,
            owner_references: meta.owner_references.clone().unwrap_or_default(),
            creation_timestamp: meta.creation_timestamp.clone(),
            deletion_timestamp: meta.deletion_timestamp.clone(),
            priority_class_name: pod.spec.as_ref().and_then(|s| s.priority_class_name.clone()),
            phase: status
                .and_then(|s| s.phase.as_deref())
                .and_then(|p| PHASES.iter().copied().find(|k| *k == p)),
            conditions,
            nominated_node_name: status
                .and_then(|s| s.nominated_node_name.clone())
                .filter(|n| !n.is_empty()),
            start_time: status.and_then(|s| s.start_time.clone()),
        }
    }

    /// A record whose model is `previous`'s when the two models are equal, so that a status-only update (kwok's or
    /// a kubelet's of a bound pod) keeps the `Arc` that the snapshot and the queue already share.
    pub fn sharing_model_of(mut self, previous: &PodRecord) -> PodRecord {
        if !Arc::ptr_eq(&self.info, &previous.info) && *self.info == *previous.info {
            self.info = previous.info.clone();
        }
        self
    }

    /// `namespace/name`.
    pub fn key(&self) -> &PodKey {
        &self.info.key
    }
    /// `metadata.name`.
    pub fn name(&self) -> &str {
        &self.info.key.name
    }
    /// `metadata.namespace` (`default` when the object had none).
    pub fn namespace(&self) -> &str {
        &self.info.key.namespace
    }
    /// `metadata.uid` (empty when unset).
    pub fn uid(&self) -> &str {
        &self.info.uid
    }
    /// `metadata.labels`.
    pub fn labels(&self) -> &BTreeMap<String, String> {
        &self.info.labels
    }
    /// `spec.nodeName`, `None` when unset or empty.
    pub fn node_name(&self) -> Option<&str> {
        self.info.node_name.as_deref()
    }
    /// `spec.schedulerName` (`default-scheduler` when unset).
    pub fn scheduler_name(&self) -> &str {
        &self.info.scheduler_name
    }
    /// The pod's own PodGroup name (label, else `spec.schedulingGroup.podGroupName`).
    pub fn group_name(&self) -> Option<&str> {
        self.info.group_name.as_deref()
    }
    /// The pod's own PodGroup, in its namespace.
    pub fn group_key(&self) -> Option<GroupKey> {
        self.info.group_key()
    }
    /// Phase Succeeded or Failed (`phalanx_scheduler::is_terminal` on the object).
    pub fn is_terminal(&self) -> bool {
        matches!(self.phase, Some("Succeeded" | "Failed"))
    }
    /// Phase Succeeded (`phalanx_scheduler::is_succeeded` on the object).
    pub fn is_succeeded(&self) -> bool {
        self.phase == Some("Succeeded")
    }
    /// The condition of type `type_`, if kept ([`KEPT_CONDITIONS`]).
    pub fn condition(&self, type_: &str) -> Option<&KeptCondition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
    /// `status.startTime` in Unix milliseconds.
    pub fn start_millis(&self) -> Option<i64> {
        self.start_time.as_ref().map(|t| t.0.as_millisecond())
    }
    /// A reference to the pod for events (`kind: Pod`, `apiVersion: v1`, name, namespace, uid, resourceVersion).
    pub fn object_ref(&self) -> ObjectReference {
        ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(self.name().to_owned()),
            namespace: Some(self.namespace().to_owned()),
            uid: Some(self.uid().to_owned()).filter(|u| !u.is_empty()),
            resource_version: self.resource_version.clone(),
            field_path: None,
        }
    }
}

/// The reflector's store keys records by name and namespace only: the key's copies of uid and resourceVersion
/// (`ObjectRef::extra`) are left out, the record has both.
impl Lookup for PodRecord {
    type DynamicType = ();

    fn kind(_: &()) -> Cow<'_, str> {
        "Pod".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "pods".into()
    }
    fn name(&self) -> Option<Cow<'_, str>> {
        Some(Cow::Borrowed(self.name()))
    }
    fn namespace(&self) -> Option<Cow<'_, str>> {
        Some(Cow::Borrowed(PodRecord::namespace(self)))
    }
    fn resource_version(&self) -> Option<Cow<'_, str>> {
        None
    }
    fn uid(&self) -> Option<Cow<'_, str>> {
        None
    }
}

/// One node as the cache keeps it: the scheduler's model of it ([`NodeStatic`]: labels, taints, `unschedulable`,
/// allocatable, the pod count), built once per change, instead of the decoded `Node` (3.6 KB of heap per kwok node
/// after slimming, 1.1 KB for the model; `cargo bench -p phalanx-store --bench cache_bytes`).
#[derive(Clone, Debug, PartialEq)]
pub struct NodeRecord {
    /// `metadata.name`.
    pub name: Arc<str>,
    /// `metadata.resourceVersion`.
    pub resource_version: Option<String>,
    /// The model, or why the node cannot be converted (a bad quantity; the driver skips such a node and says so).
    pub model: Result<Arc<NodeStatic>, ConvertError>,
    /// `metadata.labels` of a node whose model failed (the model holds them otherwise); empty when it converted.
    unconverted_labels: BTreeMap<String, String>,
}

impl NodeRecord {
    /// The record of an API node ([`NodeStatic::from_node`]).
    pub fn from_node(node: &Node) -> NodeRecord {
        let model = NodeStatic::from_node(node).map(Arc::new);
        NodeRecord {
            name: node.metadata.name.as_deref().unwrap_or_default().into(),
            resource_version: node.metadata.resource_version.clone(),
            unconverted_labels: match &model {
                Ok(_) => BTreeMap::new(),
                Err(_) => node.metadata.labels.clone().unwrap_or_default(),
            },
            model,
        }
    }

    /// A record whose model is `previous`'s when the two are equal: a heartbeat keeps the `Arc` the snapshot holds.
    pub fn sharing_model_of(mut self, previous: &NodeRecord) -> NodeRecord {
        if let (Ok(new), Ok(old)) = (&self.model, &previous.model)
            && !Arc::ptr_eq(new, old)
            && **new == **old
        {
            self.model = Ok(old.clone());
        }
        self
    }

    /// `metadata.labels`.
    pub fn labels(&self) -> &BTreeMap<String, String> {
        match &self.model {
            Ok(m) => &m.labels,
            Err(_) => &self.unconverted_labels,
        }
    }
}

/// Keyed by name only, as [`PodRecord`]s are.
impl Lookup for NodeRecord {
    type DynamicType = ();

    fn kind(_: &()) -> Cow<'_, str> {
        "Node".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "nodes".into()
    }
    fn name(&self) -> Option<Cow<'_, str>> {
        Some(Cow::Borrowed(&self.name))
    }
    fn namespace(&self) -> Option<Cow<'_, str>> {
        None
    }
    fn resource_version(&self) -> Option<Cow<'_, str>> {
        None
    }
    fn uid(&self) -> Option<Cow<'_, str>> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                "labels": {"scheduling.phalanx.dev/pod-group": "g"},
                "annotations": {"a": "b", "kubectl.kubernetes.io/last-applied-configuration": "{}"},
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "ju",
                    "controller": true}]},
            "spec": {"schedulerName": "phalanx-scheduler", "nodeName": "n1", "priorityClassName": "high",
                "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]},
            "status": {"phase": "Running", "startTime": "2026-12-04T12:00:00Z", "conditions": [
                {"type": "Initialized", "status": "True"},
                {"type": "Ready", "status": "True", "lastProbeTime": "2026-12-04T12:00:00Z"},
                {"type": "PodScheduled", "status": "True"}]},
        }))
        .expect("valid Pod")
    }

    /// The record answers what readers asked of the object, and drops what no one reads.
    #[test]
    fn a_record_keeps_what_is_read_and_drops_the_rest() {
        let r = PodRecord::from_pod(&pod());
        assert_eq!((r.namespace(), r.name(), r.uid()), ("ns", "p", "u1"));
        assert_eq!(r.group_key(), Some(GroupKey::pod_group("ns", "g")));
        assert_eq!(r.node_name(), Some("n1"));
        assert_eq!(r.info.spec.requests.milli_cpu, 100);
        assert_eq!(r.phase, Some("Running"));
        assert!(!r.is_terminal());
        assert_eq!(r.annotations.len(), 1, "the last-applied copy is dropped");
        assert_eq!(r.owner_references[0].kind, "Job");
        let kept: Vec<_> = r.conditions.iter().map(|c| (c.type_, c.status)).collect();
        assert_eq!(kept, [("Ready", "True"), ("PodScheduled", "True")]);
        assert_eq!(r.start_millis(), Some(1_796_385_600_000));
        assert_eq!(r.object_ref().resource_version.as_deref(), Some("7"));
    }

    /// A kept condition has what the readers compare (status, reason, message, transition time); a status the
    /// API does not define reads as `Unknown`.
    #[test]
    fn kept_conditions_keep_what_is_compared() {
        let mut p = pod();
        p.status.as_mut().unwrap().conditions = Some(vec![
            PodCondition {
                type_: "PodScheduled".into(),
                status: "False".into(),
                reason: Some("Unschedulable".into()),
                message: Some("0/3 nodes are available".into()),
                last_transition_time: Some(Time("2026-12-04T12:00:00Z".parse().unwrap())),
                ..Default::default()
            },
            PodCondition {
                type_: "Ready".into(),
                status: "Maybe".into(),
                ..Default::default()
            },
        ]);
        let r = PodRecord::from_pod(&p);
        let c = r.condition("PodScheduled").unwrap();
        assert_eq!((c.status, c.reason.as_deref()), ("False", Some("Unschedulable")));
        assert_eq!(c.message.as_deref(), Some("0/3 nodes are available"));
        assert!(c.last_transition_time.is_some());
        assert_eq!(r.condition("Ready").unwrap().status, "Unknown");
    }

    /// A status-only change shares the model; a change of what the scheduler models does not.
    #[test]
    fn a_status_only_update_shares_the_model() {
        let first = PodRecord::from_pod(&pod());
        let mut p = pod();
        p.status.as_mut().unwrap().phase = Some("Succeeded".into());
        let second = PodRecord::from_pod(&p).sharing_model_of(&first);
        assert!(Arc::ptr_eq(&first.info, &second.info));
        assert!(second.is_terminal() && second.is_succeeded());
        p.spec.as_mut().unwrap().node_name = Some("n2".into());
        let third = PodRecord::from_pod(&p).sharing_model_of(&second);
        assert!(!Arc::ptr_eq(&second.info, &third.info));
    }

    /// A node's record holds its model; a heartbeat shares it, a change does not; a bad node keeps its labels.
    #[test]
    fn a_node_record_holds_the_model_and_shares_it_across_heartbeats() {
        let node = |rv: &str, cpu: &str| -> Node {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "n1", "resourceVersion": rv, "labels": {"rack": "r1"}},
                "status": {"allocatable": {"cpu": cpu, "memory": "1Gi", "pods": "110"}},
            }))
            .expect("valid Node")
        };
        let first = NodeRecord::from_node(&node("1", "4"));
        assert_eq!(first.model.as_ref().unwrap().allocatable.milli_cpu, 4000);
        assert_eq!(first.labels().get("rack").map(String::as_str), Some("r1"));
        let beat = NodeRecord::from_node(&node("2", "4")).sharing_model_of(&first);
        assert!(Arc::ptr_eq(
            beat.model.as_ref().unwrap(),
            first.model.as_ref().unwrap()
        ));
        let grown = NodeRecord::from_node(&node("3", "8")).sharing_model_of(&beat);
        assert!(!Arc::ptr_eq(
            grown.model.as_ref().unwrap(),
            beat.model.as_ref().unwrap()
        ));
        let bad = NodeRecord::from_node(&node("4", "lots"));
        assert!(bad.model.is_err());
        assert_eq!(bad.labels().get("rack").map(String::as_str), Some("r1"));
    }
}
