//! The watch hooks of the group kinds and the hierarchy facts of a group object, shared by the watches of
//! Phalanx's groups (`crate::reflectors`) and of upstream's (`crate::upstream`): each event updates the group tree of
//! the index and is published as a [`StoreEvent`].

use kube::{
    Resource, ResourceExt,
    runtime::{reflector::Store as Reader, watcher},
};
use phalanx_api::{v1alpha3::CompositePodGroup, v1beta1::PodGroup};

use crate::{GroupApi, GroupKey, GroupKind, GroupNode, Shared, StoreEvent};

/// The hook of a PodGroup watch of the API group `api` (Phalanx's or upstream's, [`crate::upstream`]).
pub(crate) fn pod_group_hook(ev: &watcher::Event<PodGroup>, r: &Reader<PodGroup>, s: &Shared, api: GroupApi) {
    group_hook(ev, r, s, (GroupKind::PodGroup, api), |g: &PodGroup| {
        g.spec.parent_composite_pod_group_name.clone()
    });
}

/// The hook of a CompositePodGroup watch of the API group `api`.
pub(crate) fn composite_hook(
    ev: &watcher::Event<CompositePodGroup>,
    r: &Reader<CompositePodGroup>,
    s: &Shared,
    api: GroupApi,
) {
    group_hook(
        ev,
        r,
        s,
        (GroupKind::CompositePodGroup, api),
        |g: &CompositePodGroup| g.spec.parent_composite_pod_group_name.clone(),
    );
}

fn group_hook<K>(
    ev: &watcher::Event<K>,
    reader: &Reader<K>,
    s: &Shared,
    (kind, api): (GroupKind, GroupApi),
    parent: fn(&K) -> Option<String>,
) where
    K: Resource<DynamicType = ()> + Clone,
{
    let key_of = |o: &K| GroupKey {
        kind,
        api,
        namespace: o.namespace().unwrap_or_default().into(),
        name: o.name_any().into(),
    };
    // Only Phalanx's PodGroups take pods of owners, so only their owner label links pods of custom owners (see
    // crate::owners); upstream's groups are created by upstream's controllers, which name them in the pods.
    let owner_of = |o: &K| {
        (kind == GroupKind::PodGroup && api == GroupApi::Phalanx)
            .then(|| o.labels().get(phalanx_api::owners::OWNER_UID_LABEL).cloned())
            .flatten()
    };
    let members_of = |o: &K| o.annotations().get(phalanx_api::owners::MEMBERS).cloned();
    match ev {
        watcher::Event::Apply(o) => {
            let key = key_of(o);
            s.index_mut().apply_group(key.clone(), parent(o).as_deref());
            if let Some(uid) = owner_of(o) {
                s.index_mut()
                    .set_group_owner(&key, Some(&uid), members_of(o).as_deref());
                s.reresolve_owner(&uid);
            }
            s.publish(StoreEvent::Group(key));
        }
        watcher::Event::Delete(o) => {
            let key = key_of(o);
            s.index_mut().remove_group(&key);
            if let Some(uid) = owner_of(o) {
                s.index_mut().set_group_owner(&key, None, None);
                s.reresolve_owner(&uid);
            }
            s.publish(StoreEvent::Group(key));
        }
        watcher::Event::InitDone => {
            let all: Vec<(GroupKey, Option<String>)> =
                reader.state().iter().map(|o| (key_of(o), parent(o))).collect();
            s.index_mut().reset_groups((kind, api), all);
            if kind == GroupKind::PodGroup && api == GroupApi::Phalanx {
                let owned: Vec<(GroupKey, String, Option<String>)> = reader
                    .state()
                    .iter()
                    .filter_map(|o| owner_of(o).map(|u| (key_of(o), u, members_of(o))))
                    .collect();
                s.index_mut().reset_group_owners(owned);
                s.reresolve_all();
            }
            s.publish(StoreEvent::Resync);
        }
        watcher::Event::Init | watcher::Event::InitApply(_) => {}
    }
}

/// Hierarchy facts of a PodGroup.
pub(crate) fn pod_group_node(g: &PodGroup, api: GroupApi) -> GroupNode {
    GroupNode {
        key: GroupKey {
            api,
            ..GroupKey::pod_group(&g.namespace().unwrap_or_default(), &g.name_any())
        },
        parent: g.spec.parent_composite_pod_group_name.clone(),
        workload: g.spec.workload_ref.as_ref().map(|w| w.workload_name.clone()),
        gang: g.spec.scheduling_policy.gang.is_some(),
        disruption_all: g.spec.disruption_mode.as_ref().is_some_and(|d| d.all.is_some()),
    }
}

/// Hierarchy facts of a CompositePodGroup.
pub(crate) fn composite_node(g: &CompositePodGroup, api: GroupApi) -> GroupNode {
    GroupNode {
        key: GroupKey {
            api,
            ..GroupKey::composite(&g.namespace().unwrap_or_default(), &g.name_any())
        },
        parent: g.spec.parent_composite_pod_group_name.clone(),
        workload: Some(g.spec.workload_ref.workload_name.clone()),
        gang: g.spec.scheduling_policy.gang.is_some(),
        disruption_all: g.spec.disruption_mode.as_ref().is_some_and(|d| d.all.is_some()),
    }
}
