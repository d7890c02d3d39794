//! Upstream's own PodGroups, `scheduling.k8s.io/v1beta1` (KEP-4671, served with the `GenericWorkload` gate and
//! `--runtime-config=scheduling.k8s.io/v1beta1=true`), on the clusters that serve them: Phalanx schedules the
//! native groups whose pods name it, beside its own.
//!
//! One discovery request when the store starts ([`crate::discovery`]) decides. When served, the PodGroups are
//! watched cluster-wide and cached in Phalanx's own [`PodGroup`] type: Phalanx's schema is upstream's field for
//! field (its additions are optional), so a native object converts without loss, and everything downstream (the
//! driver's conversion to the core's `GroupInfo`, conditions, explain) reads one type. Their keys carry
//! [`GroupApi::Upstream`], so a native group is never confused with a Phalanx group of the same name. The pod
//! watch starts only after the decision: a pod's `spec.schedulingGroup` names a native group only where they are
//! served (`crate::record::group_of`).

use std::sync::{Arc, atomic::Ordering};

use k8s_openapi::api::scheduling::v1beta1 as native;
use kube::{
    Api, Client,
    runtime::reflector::{self, Store as Reader},
};
use phalanx_api::native::{CompositeVersion, NativeCompositePodGroup, V1alpha3, V1beta1};
use phalanx_api::{v1alpha3::CompositePodGroup, v1beta1::PodGroup};
use phalanx_scheduler::GroupApi;
use tokio::sync::watch;

use crate::Shared;
use crate::kind_watch::{Tolerate, watch_converted};

/// The group-version of upstream's PodGroups Phalanx schedules.
pub const UPSTREAM_GROUP_VERSION: &str = "scheduling.k8s.io/v1beta1";

/// The group-version of upstream's CompositePodGroups (KEP-6012) Phalanx watches where the server does not serve
/// them at [`UPSTREAM_GROUP_VERSION`]: `v1alpha3`, served by 1.37 (and by 1.38 beside `v1beta1`), with the
/// `CompositePodGroup` gate and `--runtime-config`. Where both are served, `v1beta1` is read.
pub const UPSTREAM_COMPOSITE_ALPHA_GROUP_VERSION: &str = "scheduling.k8s.io/v1alpha3";

/// The caches of upstream's objects, in Phalanx's types; empty where not served.
#[derive(Clone)]
pub(crate) struct UpstreamReaders {
    pub(crate) pod_groups: Reader<PodGroup>,
    pub(crate) composites: Reader<CompositePodGroup>,
}

/// Starts the task that discovers [`UPSTREAM_GROUP_VERSION`] (and, where it is served,
/// [`UPSTREAM_COMPOSITE_GROUP_VERSION`]) and watches what is served. Returns the caches (empty when not served) and
/// a receiver that turns `Some(served)` once discovery decided about the PodGroups. Counts once toward readiness
/// when it decided, after raising the target by one per watch it starts.
pub(crate) fn spawn(
    client: &Client,
    wc: &kube::runtime::watcher::Config,
    shared: &Arc<Shared>,
    ready_tx: &watch::Sender<usize>,
    tasks: &mut Vec<tokio::task::AbortHandle>,
) -> (UpstreamReaders, watch::Receiver<Option<bool>>) {
    let (pod_groups, pg_writer) = reflector::store::<PodGroup>();
    let (composites, cpg_writer) = reflector::store::<CompositePodGroup>();
    let readers = UpstreamReaders {
        pod_groups: pod_groups.clone(),
        composites: composites.clone(),
    };
    let (decided_tx, decided) = watch::channel(None);
    let (client, wc, shared, ready_tx) = (client.clone(), wc.clone(), shared.clone(), ready_tx.clone());
    let task = tokio::spawn(async move {
        let served = crate::discovery::served(
            &client,
            UPSTREAM_GROUP_VERSION,
            &["podgroups"],
            "Phalanx schedules only its own scheduling.phalanx.dev groups, and a pod's spec.schedulingGroup names one \
             of those",
        )
        .await;
        // 1.38 serves CompositePodGroups at v1beta1 beside the PodGroups (its beta API turned on alone serves no
        // v1alpha3); 1.37 only at v1alpha3.
        let beta = served
            && crate::discovery::discover(&client, UPSTREAM_GROUP_VERSION, &["compositepodgroups"])
                .await
                .unwrap_or(false);
        let alpha = served
            && !beta
            && crate::discovery::served(
                &client,
                UPSTREAM_COMPOSITE_ALPHA_GROUP_VERSION,
                &["compositepodgroups"],
                "upstream's PodGroups under a CompositePodGroup wait for their parent",
            )
            .await;
        let composites_served = beta || alpha;
        shared
            .upstream_composites
            .store(composites_served, Ordering::SeqCst);
        shared.upstream_composites_beta.store(beta, Ordering::SeqCst);
        if served {
            // Targets first, then discovery's count: readiness can never be reached without the watches.
            shared
                .ready_target
                .fetch_add(1 + usize::from(composites_served), Ordering::SeqCst);
            shared.upstream_groups.store(true, Ordering::SeqCst);
            tracing::info!(
                composites_served,
                "{UPSTREAM_GROUP_VERSION} is served: Phalanx also schedules its groups"
            );
        }
        decided_tx.send_replace(Some(served));
        ready_tx.send_modify(|n| *n += 1);
        if !served {
            return;
        }
        let pgs = watch_converted::<native::PodGroup, PodGroup, _>(
            (pod_groups, pg_writer),
            Api::all(client.clone()),
            wc.clone(),
            shared.clone(),
            ready_tx.clone(),
            (
                Box::new(|ev, r, s| crate::group_hooks::pod_group_hook(ev, r, s, GroupApi::Upstream)),
                |o, _| converted(o),
                Tolerate::No,
            ),
        );
        if !composites_served {
            return pgs.await;
        }
        if beta {
            tokio::join!(
                pgs,
                watch_composites::<V1beta1>((composites, cpg_writer), client, wc, shared, ready_tx)
            );
        } else {
            tokio::join!(
                pgs,
                watch_composites::<V1alpha3>((composites, cpg_writer), client, wc, shared, ready_tx)
            );
        }
    });
    tasks.push(task.abort_handle());
    (readers, decided)
}

/// The watch of upstream's CompositePodGroups at version `V`, cached in Phalanx's type.
async fn watch_composites<V: CompositeVersion>(
    cache: (
        Reader<CompositePodGroup>,
        reflector::store::Writer<CompositePodGroup>,
    ),
    client: Client,
    wc: kube::runtime::watcher::Config,
    shared: Arc<Shared>,
    ready_tx: watch::Sender<usize>,
) {
    watch_converted::<NativeCompositePodGroup<V>, CompositePodGroup, _>(
        cache,
        Api::all(client),
        wc,
        shared,
        ready_tx,
        (
            Box::new(|ev, r, s| crate::group_hooks::composite_hook(ev, r, s, GroupApi::Upstream)),
            |o, _| converted(o),
            Tolerate::No,
        ),
    )
    .await
}

/// An upstream object (`N`) in Phalanx's type of the same kind (`P`), without managed fields. The schemas agree
/// field for field, so this fails only on a server that adds a field of a different shape; then the error is
/// logged and the object keeps its metadata and a gang policy no group can meet ([`Unplaceable`]): its pods wait,
/// rather than being scheduled under a policy the object did not ask for.
pub fn converted<N, P>(mut o: N) -> P
where
    N: kube::Resource + serde::Serialize,
    P: kube::Resource + serde::de::DeserializeOwned + Unplaceable,
{
    o.meta_mut().managed_fields = None;
    let metadata = o.meta().clone();
    match serde_json::to_value(&o).and_then(serde_json::from_value::<P>) {
        Ok(mut g) => {
            *g.meta_mut() = metadata;
            g
        }
        Err(e) => {
            tracing::error!(
                name = metadata.name.as_deref().unwrap_or_default(),
                error = %e,
                "cannot read an upstream scheduling.k8s.io object"
            );
            let mut g = P::unplaceable();
            *g.meta_mut() = metadata;
            g
        }
    }
}

/// A group object whose gang policy no group can meet (`minCount`/`minGroupCount` of `i32::MAX`).
pub trait Unplaceable {
    /// The object, with default metadata.
    fn unplaceable() -> Self;
}

impl Unplaceable for PodGroup {
    fn unplaceable() -> Self {
        let mut g = PodGroup::default();
        g.spec.scheduling_policy.gang =
            Some(phalanx_api::v1beta1::GangSchedulingPolicy { min_count: i32::MAX });
        g
    }
}

impl Unplaceable for CompositePodGroup {
    fn unplaceable() -> Self {
        let mut g = CompositePodGroup::default();
        g.spec.scheduling_policy.gang = Some(phalanx_api::v1beta1::CompositeGangSchedulingPolicy {
            min_group_count: i32::MAX,
        });
        g
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_native_gang_reads_as_the_same_gang() {
        let o: native::PodGroup = serde_json::from_value(serde_json::json!({
            "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": { "name": "g", "namespace": "ns", "uid": "u1",
                          "managedFields": [{ "manager": "kubectl", "operation": "Apply" }] },
            "spec": {
                "schedulingPolicy": { "gang": { "minCount": 4 } },
                "schedulingConstraints": { "topology": [{ "key": "rack" }] },
                "priorityClassName": "high",
            },
            "status": { "conditions": [{ "type": "PodGroupInitiallyScheduled", "status": "False",
                                         "reason": "Unschedulable", "message": "m",
                                         "lastTransitionTime": "2026-12-07T00:00:00Z" }] },
        }))
        .unwrap();
        let g: PodGroup = converted(o);
        assert_eq!(kube::ResourceExt::name_any(&g), "g");
        assert_eq!(g.metadata.uid.as_deref(), Some("u1"));
        assert!(g.metadata.managed_fields.is_none());
        assert_eq!(
            g.spec.scheduling_policy.gang.as_ref().map(|g| g.min_count),
            Some(4)
        );
        assert_eq!(
            g.spec.scheduling_constraints.as_ref().unwrap().topology[0].key,
            "rack"
        );
        assert_eq!(g.spec.priority_class_name.as_deref(), Some("high"));
        let status = g.status.expect("status");
        assert_eq!(status.conditions[0].reason, "Unschedulable");
    }
}
