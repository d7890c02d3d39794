//! Owner resolution: the PodGroup of a pod that names none, found through its `ownerReferences` chain.
//!
//! A pod without the `scheduling.phalanx.dev/pod-group` label and without `spec.schedulingGroup` belongs to the
//! group of its *top owner* when that owner carries a `scheduling.phalanx.dev/gang*` annotation
//! ([`phalanx_api::owners`]). The chain is walked through controller references only (as the garbage collector and
//! upstream's `metav1.GetControllerOf` do), over metadata-only caches of the built-in owners (Jobs, ReplicaSets,
//! Deployments, StatefulSets) and, for custom resources (JobSet, LeaderWorkerSet, PyTorchJob, ...), over caches
//! started on demand (`crate::custom_owners`). A custom kind the store cannot watch ends the walk: its pods join the
//! PodGroup labelled with the owner's uid ([`phalanx_api::owners::OWNER_UID_LABEL`]) once the integration created it.
//!
//! Upstream links Job pods to their PodGroup by writing `spec.schedulingGroup` at pod creation (KEP-5547); Phalanx
//! does not create the pods, so the link is computed here, before a pod reaches the queue.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::record::PodRecord;

/// The metadata of one pod owner (a metadata-only read, as the live store caches it; what a fixed state
/// ([`crate::ClusterState::owners`]) and the custom-owner caches hold).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OwnerObject {
    /// `apiVersion`, e.g. `apps/v1`.
    pub api_version: String,
    /// `kind`, e.g. `Deployment`.
    pub kind: String,
    /// Its metadata (annotations, uid, controller reference).
    pub metadata: ObjectMeta,
}

/// A custom owner kind, as discovery describes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OwnerKind {
    /// `apiVersion`, e.g. `jobset.x-k8s.io/v1alpha2`.
    pub api_version: String,
    /// `kind`, e.g. `JobSet`.
    pub kind: String,
    /// Its resource (plural), e.g. `jobsets`.
    pub plural: String,
    /// False for a cluster-scoped kind.
    pub namespaced: bool,
}

/// How many controller references are followed at most (pod -> ReplicaSet -> Deployment -> custom parent needs 3).
pub const MAX_OWNER_DEPTH: usize = 5;

/// The built-in owner kinds whose metadata the store watches, as `(apiVersion, kind)`.
pub const WATCHED_OWNERS: [(&str, &str); 4] = [
    ("batch/v1", "Job"),
    ("apps/v1", "ReplicaSet"),
    ("apps/v1", "Deployment"),
    ("apps/v1", "StatefulSet"),
];

/// What a cache knows of one owner reference.
#[derive(Clone, Debug)]
pub enum Lookup {
    /// The kind cannot be watched (not served, or not allowed by RBAC): the walk ends here.
    NotWatched,
    /// The kind is watched but the object (with that uid) is not cached yet, or is gone.
    Missing,
    /// The cached metadata.
    Found(Box<ObjectMeta>),
}

/// One owner in a pod's chain.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OwnerRef {
    /// `apiVersion` as in the owner reference (`batch/v1`, `jobset.x-k8s.io/v1alpha2`).
    pub api_version: String,
    /// `kind`.
    pub kind: String,
    /// Namespace: the pod's, where its group lives. Owner references name an owner in the dependent's namespace or
    /// a cluster-scoped one; for a cluster-scoped owner this is still the namespace of the pod whose chain reached
    /// it (its object is looked up without one).
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `metadata.uid`.
    pub uid: String,
}

/// The result of walking a pod's owners.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resolution {
    /// The PodGroup the pod belongs to (in its namespace), if any.
    pub group: Option<String>,
    /// The last owner reached: the annotated one, the topmost cached one, or the custom resource at the top.
    pub top: Option<OwnerRef>,
    /// The uids of every owner visited; a change to any of them (or to a group labelled with one) re-resolves the
    /// pod.
    pub chain: Vec<String>,
}

/// The controller reference of an object (upstream `metav1.GetControllerOf`).
pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .as_deref()?
        .iter()
        .find(|o| o.controller == Some(true))
}

fn owner_ref(namespace: &str, o: &OwnerReference) -> OwnerRef {
    OwnerRef {
        api_version: o.api_version.clone(),
        kind: o.kind.clone(),
        namespace: namespace.to_owned(),
        name: o.name.clone(),
        uid: o.uid.clone(),
    }
}

/// Whether an owner's gang annotations count ([`phalanx_api::owners::wants_gang`] on its `meta`). A ReplicaSet
/// controlled by a Deployment never counts: the Deployment controller copies the Deployment's annotations onto
/// every ReplicaSet it creates and leaves them there when they are removed from the Deployment
/// (`pkg/controller/deployment/util/deployment_util.go`, `copyDeploymentAnnotationsToReplicaSet`), so the gang is
/// the Deployment's alone, whatever its ReplicaSets carry.
pub fn asks_for_gang(owner: &OwnerRef, meta: &ObjectMeta) -> bool {
    phalanx_api::owners::wants_gang(meta.annotations.as_ref()) && !is_deployment_replica_set(owner, meta)
}

fn is_deployment_replica_set(owner: &OwnerRef, meta: &ObjectMeta) -> bool {
    owner.api_version == "apps/v1"
        && owner.kind == "ReplicaSet"
        && controller_of(meta).is_some_and(|c| c.api_version == "apps/v1" && c.kind == "Deployment")
}

/// Walks the controller references of a cached pod up to [`MAX_OWNER_DEPTH`] owners: [`resolve_from`]
/// its controller. This is the one answer to "which group does this pod join": the store's index, and through it
/// the scheduler, the controllers' counters and `phalanx explain` (over a store built from one read,
/// [`crate::Store::from_state`]), all take it from here.
pub fn resolve(
    pod: &PodRecord,
    lookup: impl Fn(&OwnerRef) -> Lookup,
    group_of_owner: impl Fn(&OwnerRef) -> Option<String>,
) -> Resolution {
    let namespace = pod.namespace();
    match pod.owner_references.iter().find(|o| o.controller == Some(true)) {
        Some(o) => resolve_from(owner_ref(namespace, o), lookup, group_of_owner),
        None => Resolution::default(),
    }
}

/// Walks a controller chain from `first` (a pod's controller, or any owner), `first` included.
///
/// `lookup` answers for one reference what the caches know; `group_of_owner` names the PodGroup in the owner's
/// `namespace` (the pod's) labelled with the owner's uid whose members the pod is (its `scheduling.phalanx.dev/members`
/// annotation, if any) ([`crate::index::ClusterIndex::group_of_owner`]; a label
/// in another namespace never counts). The group is the **topmost** owner that asks for a gang ([`asks_for_gang`],
/// valid value or not, named by [`phalanx_api::owners::owner_group_name`]): a Deployment's pods form the
/// Deployment's one gang, never one per ReplicaSet. Rules at each owner:
/// - an owner that asks is remembered and the walk goes on to its controller; a bad annotation still makes the pod
///   wait for that group (with the owner's Warning event) instead of being scheduled alone;
/// - a watched owner not cached yet ends the walk: with the annotated owner below it if there is one, else with its
///   own derived name, so a pod seen before its Job waits instead of being scheduled alone (the owner's arrival
///   re-resolves it);
/// - an owner of a kind that cannot be watched (`Lookup::NotWatched`) ends the walk with the group labelled with its
///   uid, else the annotated owner below it;
/// - an owner without a controller ends the walk with the annotated owner found, if any.
pub fn resolve_from(
    first: OwnerRef,
    lookup: impl Fn(&OwnerRef) -> Lookup,
    group_of_owner: impl Fn(&OwnerRef) -> Option<String>,
) -> Resolution {
    let mut out = Resolution::default();
    let mut cur = first;
    // The topmost annotated owner so far: its group, and the owner.
    let mut best: Option<(String, OwnerRef)> = None;
    let finish = |mut out: Resolution, best: Option<(String, OwnerRef)>, top: OwnerRef| {
        match best {
            Some((g, owner)) => {
                out.group = Some(g);
                out.top = Some(owner);
            }
            None => out.top = Some(top),
        }
        out
    };
    for _ in 0..MAX_OWNER_DEPTH {
        out.chain.push(cur.uid.clone());
        match lookup(&cur) {
            Lookup::NotWatched => {
                if let Some(g) = group_of_owner(&cur) {
                    out.group = Some(g);
                    out.top = Some(cur);
                    return out;
                }
                return finish(out, best, cur);
            }
            Lookup::Missing => {
                if best.is_none() {
                    out.group = Some(phalanx_api::owners::owner_group_name(&cur.kind, &cur.name));
                    out.top = Some(cur);
                    return out;
                }
                return finish(out, best, cur);
            }
            Lookup::Found(meta) => {
                if asks_for_gang(&cur, &meta) {
                    // The group labelled with its uid that takes this pod (an owner with groups per part, a
                    // JobSet's replicated jobs), else the one named after it (until that exists, the pod waits).
                    let group = group_of_owner(&cur)
                        .unwrap_or_else(|| phalanx_api::owners::owner_group_name(&cur.kind, &cur.name));
                    best = Some((group, cur.clone()));
                }
                // Owner references are namespace-local or name a cluster-scoped owner: the namespace that matters
                // for the group is always the pod's.
                let namespace = cur.namespace.clone();
                match controller_of(&meta) {
                    Some(next) => cur = owner_ref(&namespace, next),
                    None => return finish(out, best, cur),
                }
            }
        }
    }
    finish(out, best, cur)
}

/// Whether `owner` is the one whose group the pods it controls join, so the one the owner integration gives a
/// Workload and a PodGroup: it asks for a gang ([`asks_for_gang`]; an owner not cached counts as asking, the
/// integration reads it itself) and the walk from it ([`resolve_from`]) ends with it, not with an owner above it.
/// False for a ReplicaSet of a Deployment (whatever annotations it carries), for an owner under another annotated
/// owner, and for an owner under a custom resource whose group exists.
pub fn is_group_owner(
    owner: &OwnerRef,
    lookup: impl Fn(&OwnerRef) -> Lookup,
    group_of_owner: impl Fn(&OwnerRef) -> Option<String>,
) -> bool {
    if let Lookup::Found(meta) = lookup(owner)
        && !asks_for_gang(owner, &meta)
    {
        return false;
    }
    resolve_from(owner.clone(), lookup, group_of_owner)
        .top
        .is_none_or(|t| t.uid == owner.uid)
}

/// Whether `(api_version, kind)` is a Pod: an owner the store answers from its own pod cache (an LWS worker's chain
/// is Pod → StatefulSet → leader Pod → StatefulSet → LeaderWorkerSet, `pkg/controllers/pod_controller.go` of
/// `sigs.k8s.io/lws`), never through a watch of its own.
pub fn is_pod(api_version: &str, kind: &str) -> bool {
    api_version == "v1" && kind == "Pod"
}

/// Whether `(api_version, kind)` is one of [`WATCHED_OWNERS`].
pub fn is_watched(api_version: &str, kind: &str) -> bool {
    WATCHED_OWNERS
        .iter()
        .any(|(a, k)| *a == api_version && *k == kind)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn meta(
        name: &str,
        uid: &str,
        owner: Option<(&str, &str, &str, &str)>,
        ann: &[(&str, &str)],
    ) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            uid: Some(uid.into()),
            annotations: Some(ann.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect()),
            owner_references: owner.map(|(api, kind, n, u)| {
                vec![OwnerReference {
                    api_version: api.into(),
                    kind: kind.into(),
                    name: n.into(),
                    uid: u.into(),
                    controller: Some(true),
                    ..OwnerReference::default()
                }]
            }),
            ..ObjectMeta::default()
        }
    }

    fn run(pod: &ObjectMeta, objs: &HashMap<String, ObjectMeta>, groups: &[(&str, &str)]) -> Resolution {
        let pod = crate::PodRecord::from_pod(&k8s_openapi::api::core::v1::Pod {
            metadata: pod.clone(),
            ..Default::default()
        });
        resolve(
            &pod,
            |o| {
                if !is_watched(&o.api_version, &o.kind) {
                    return Lookup::NotWatched;
                }
                objs.get(&o.uid)
                    .cloned()
                    .map_or(Lookup::Missing, |m| Lookup::Found(Box::new(m)))
            },
            |o: &OwnerRef| {
                groups
                    .iter()
                    .find(|(u, _)| *u == o.uid)
                    .map(|(_, g)| (*g).to_string())
            },
        )
    }

    const GANG: (&str, &str) = (phalanx_api::owners::GANG, "true");

    #[test]
    fn job_pod_joins_the_annotated_job() {
        let job = meta("train", "j1", None, &[GANG]);
        let pod = meta("train-abc", "p1", Some(("batch/v1", "Job", "train", "j1")), &[]);
        let r = run(&pod, &HashMap::from([("j1".into(), job)]), &[]);
        assert_eq!(r.group.as_deref(), Some("train-job"));
        assert_eq!(r.chain, vec!["j1"]);
    }

    #[test]
    fn unannotated_owner_has_no_group_and_no_owner_no_walk() {
        let job = meta("plain", "j1", None, &[]);
        let pod = meta("plain-abc", "p1", Some(("batch/v1", "Job", "plain", "j1")), &[]);
        assert_eq!(run(&pod, &HashMap::from([("j1".into(), job)]), &[]).group, None);
        assert_eq!(
            run(&meta("solo", "p", None, &[]), &HashMap::new(), &[]),
            Resolution::default()
        );
    }

    #[test]
    fn deployment_through_replica_set() {
        let dep = meta("web", "d1", None, &[(phalanx_api::owners::GANG_MIN_COUNT, "3")]);
        let rs = meta("web-5f7", "r1", Some(("apps/v1", "Deployment", "web", "d1")), &[]);
        let pod = meta(
            "web-5f7-x",
            "p1",
            Some(("apps/v1", "ReplicaSet", "web-5f7", "r1")),
            &[],
        );
        let r = run(&pod, &HashMap::from([("r1".into(), rs), ("d1".into(), dep)]), &[]);
        assert_eq!(r.group.as_deref(), Some("web-deployment"));
        assert_eq!(r.chain, vec!["r1", "d1"]);
    }

    /// The Deployment controller copies a Deployment's annotations to its ReplicaSets: the pods still form the
    /// Deployment's one gang (the topmost annotated owner), not one per ReplicaSet (found by a new-user trial).
    #[test]
    fn annotations_copied_to_the_replica_set_still_make_the_deployments_gang() {
        let ann = [(phalanx_api::owners::GANG_MIN_COUNT, "2")];
        let dep = meta("web", "d1", None, &ann);
        let rs = meta(
            "web-5f7",
            "r1",
            Some(("apps/v1", "Deployment", "web", "d1")),
            &ann,
        );
        let pod = meta(
            "web-5f7-x",
            "p1",
            Some(("apps/v1", "ReplicaSet", "web-5f7", "r1")),
            &[],
        );
        let owners = HashMap::from([("r1".into(), rs), ("d1".into(), dep)]);
        let r = run(&pod, &owners, &[]);
        assert_eq!(r.group.as_deref(), Some("web-deployment"));
        assert_eq!(r.top.map(|t| t.kind).as_deref(), Some("Deployment"));
        // The Deployment not cached yet: the ReplicaSet's copied annotations do not count, the pod waits for the
        // Deployment's group (the Deployment's arrival re-resolves it).
        let only_rs = HashMap::from([(
            "r1".into(),
            meta(
                "web-5f7",
                "r1",
                Some(("apps/v1", "Deployment", "web", "d1")),
                &ann,
            ),
        )]);
        assert_eq!(run(&pod, &only_rs, &[]).group.as_deref(), Some("web-deployment"));
        // The annotation removed from the Deployment (the Deployment controller leaves it on the ReplicaSets): no
        // gang at all, not one per ReplicaSet.
        let plain = HashMap::from([
            ("r1".into(), owners["r1"].clone()),
            ("d1".into(), meta("web", "d1", None, &[])),
        ]);
        assert_eq!(run(&pod, &plain, &[]).group, None);
    }

    fn owner(api_version: &str, kind: &str, name: &str, uid: &str) -> OwnerRef {
        OwnerRef {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: "ns".into(),
            name: name.into(),
            uid: uid.into(),
        }
    }

    fn group_owner(o: &OwnerRef, objs: &HashMap<String, ObjectMeta>, groups: &[(&str, &str)]) -> bool {
        is_group_owner(
            o,
            |o| {
                if !is_watched(&o.api_version, &o.kind) {
                    return Lookup::NotWatched;
                }
                objs.get(&o.uid)
                    .cloned()
                    .map_or(Lookup::Missing, |m| Lookup::Found(Box::new(m)))
            },
            |o: &OwnerRef| {
                groups
                    .iter()
                    .find(|(u, _)| *u == o.uid)
                    .map(|(_, g)| (*g).to_string())
            },
        )
    }

    /// The owners that get a group are exactly those the pods' walk ends with: never a ReplicaSet of a Deployment
    /// (annotated by the Deployment controller's copy or not), never an annotated Job under an annotated custom
    /// parent whose group exists.
    #[test]
    fn only_the_owner_the_pods_join_is_a_group_owner() {
        let ann = [(phalanx_api::owners::GANG, "true")];
        let rs_ref = owner("apps/v1", "ReplicaSet", "web-5f7", "r1");
        let dep_ref = owner("apps/v1", "Deployment", "web", "d1");
        let rs = meta(
            "web-5f7",
            "r1",
            Some(("apps/v1", "Deployment", "web", "d1")),
            &ann,
        );
        let objs = HashMap::from([
            ("r1".into(), rs.clone()),
            ("d1".into(), meta("web", "d1", None, &ann)),
        ]);
        assert!(group_owner(&dep_ref, &objs, &[]));
        assert!(!group_owner(&rs_ref, &objs, &[]));
        // Deployment not cached, or not annotated: still not the ReplicaSet.
        assert!(!group_owner(
            &rs_ref,
            &HashMap::from([("r1".into(), rs.clone())]),
            &[]
        ));
        let plain = HashMap::from([("r1".into(), rs), ("d1".into(), meta("web", "d1", None, &[]))]);
        assert!(!group_owner(&rs_ref, &plain, &[]));
        assert!(!group_owner(&dep_ref, &plain, &[]), "asks for nothing");
        // A ReplicaSet of its own (no Deployment) is an owner like any other.
        let lone = HashMap::from([("r2".into(), meta("solo", "r2", None, &ann))]);
        assert!(group_owner(
            &owner("apps/v1", "ReplicaSet", "solo", "r2"),
            &lone,
            &[]
        ));
        // An annotated Job under a custom parent: its own group until the parent's exists.
        let job_ref = owner("batch/v1", "Job", "js-w-0", "j1");
        let job = meta(
            "js-w-0",
            "j1",
            Some(("jobset.x-k8s.io/v1alpha2", "JobSet", "js", "s1")),
            &ann,
        );
        let objs = HashMap::from([("j1".into(), job)]);
        assert!(group_owner(&job_ref, &objs, &[]));
        assert!(!group_owner(&job_ref, &objs, &[("s1", "js-jobset")]));
        // An owner the caches do not hold is left to the integration, which reads it.
        assert!(group_owner(
            &owner("batch/v1", "Job", "new", "j9"),
            &HashMap::new(),
            &[]
        ));
    }

    /// A pod seen before its Job waits for the Job's group instead of being scheduled alone.
    #[test]
    fn missing_watched_owner_holds_the_pod() {
        let pod = meta("train-abc", "p1", Some(("batch/v1", "Job", "train", "j1")), &[]);
        assert_eq!(
            run(&pod, &HashMap::new(), &[]).group.as_deref(),
            Some("train-job")
        );
    }

    #[test]
    fn custom_top_owner_uses_the_labelled_group() {
        let job = meta(
            "js-w-0",
            "j1",
            Some(("jobset.x-k8s.io/v1alpha2", "JobSet", "js", "s1")),
            &[],
        );
        let pod = meta("js-w-0-a", "p1", Some(("batch/v1", "Job", "js-w-0", "j1")), &[]);
        let objs = HashMap::from([("j1".into(), job)]);
        assert_eq!(run(&pod, &objs, &[]).group, None);
        let r = run(&pod, &objs, &[("s1", "js-jobset")]);
        assert_eq!(r.group.as_deref(), Some("js-jobset"));
        assert_eq!(r.top.map(|t| t.kind), Some("JobSet".to_string()));
        assert_eq!(r.chain, vec!["j1", "s1"]);
    }

    /// A cycle of controller references (impossible in a sane cluster, possible in a hostile one) ends.
    #[test]
    fn walk_is_bounded() {
        let a = meta("a", "a1", Some(("apps/v1", "ReplicaSet", "b", "b1")), &[]);
        let b = meta("b", "b1", Some(("apps/v1", "ReplicaSet", "a", "a1")), &[]);
        let pod = meta("p", "p1", Some(("apps/v1", "ReplicaSet", "a", "a1")), &[]);
        let r = run(&pod, &HashMap::from([("a1".into(), a), ("b1".into(), b)]), &[]);
        assert_eq!(r.group, None);
        assert_eq!(r.chain.len(), MAX_OWNER_DEPTH);
    }
}
