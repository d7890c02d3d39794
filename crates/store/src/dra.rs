//! The Dynamic Resource Allocation caches the DRA plugin reads (upstream: the DeviceClass, ResourceSlice and
//! ResourceClaim informers behind `NewDRAManager` in
//! `pkg/scheduler/framework/plugins/dynamicresources/dra_manager.go`, the claims through the assume cache that
//! `pkg/scheduler/scheduler.go` builds over the claim informer, the slices through
//! `staging/src/k8s.io/dynamic-resource-allocation/resourceslice/tracker`). ResourceClaimTemplates are cached too:
//! kube-scheduler watches none (the resourceclaim controller, `pkg/controller/resourceclaim/controller.go`, creates
//! a pod's claims from them), but a pod whose claim is not created yet names its template.
//!
//! The four kinds are `resource.k8s.io/v1` (GA since Kubernetes 1.34, KEP-4381). They are watched only when the API
//! server serves that version with all four kinds: one discovery request (`GET /apis/resource.k8s.io/v1`) when the
//! store starts, a failure other than 404 retried with [`crate::retry::backoff`] for up to [`DISCOVERY_PATIENCE`].
//! A server that does not serve it is logged once at `info` and nothing is watched: [`crate::Store::dra`] is `None`
//! and readiness counts no DRA kind. As for the storage kinds, a refused list (403) counts as ready and empty and
//! names the kind in [`crate::Store::unreadable_devices`]. Objects are kept whole without managed fields and the
//! `kubectl apply` copy ([`crate::slim::storage_object`]); every change is published as
//! [`crate::StoreEvent::Devices`].

use std::sync::{Arc, atomic::Ordering};

use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice};
use kube::{
    Api, Client, Resource,
    runtime::{
        reflector::{self, Store as Reader},
        watcher,
    },
};
use serde::de::DeserializeOwned;
use tokio::{sync::watch, task::JoinSet};

use crate::{
    Shared, StoreEvent,
    kind_watch::{Hook, Tolerate, reader, watch_kind},
    server::DRA_GROUP_VERSION,
};

/// Number of kinds in [`DraReaders`] (each counts once toward readiness, when watched).
pub(crate) const DRA_KINDS: usize = 4;

/// The plurals discovery must list under [`DRA_GROUP_VERSION`] for the caches to start.
const PLURALS: [&str; DRA_KINDS] = [
    "deviceclasses",
    "resourceslices",
    "resourceclaims",
    "resourceclaimtemplates",
];

/// How long a failing discovery request (other than 404) is retried before the store goes on without DRA: 30 s.
pub use crate::discovery::DISCOVERY_PATIENCE;

/// Readers of the DRA caches (`resource.k8s.io/v1`), see the module docs.
#[derive(Clone)]
pub struct DraReaders {
    /// DeviceClasses (cluster-scoped): the selectors and configuration a request's `deviceClassName` names.
    pub classes: Reader<DeviceClass>,
    /// ResourceSlices (cluster-scoped): the devices each driver publishes, per node or node selection and pool.
    pub slices: Reader<ResourceSlice>,
    /// ResourceClaims of every namespace, with their allocation and `reservedFor` in the status.
    pub claims: Reader<ResourceClaim>,
    /// ResourceClaimTemplates of every namespace.
    pub templates: Reader<ResourceClaimTemplate>,
}

/// The DRA objects of a [`crate::ClusterState`], one list per kind.
#[derive(Clone, Debug, Default)]
pub struct DraObjects {
    /// DeviceClasses.
    pub classes: Vec<DeviceClass>,
    /// ResourceSlices.
    pub slices: Vec<ResourceSlice>,
    /// ResourceClaims.
    pub claims: Vec<ResourceClaim>,
    /// ResourceClaimTemplates.
    pub templates: Vec<ResourceClaimTemplate>,
}

impl DraReaders {
    /// Readers holding exactly `objects`, as after a complete list ([`crate::Store::from_state`]).
    pub(crate) fn from_objects(objects: DraObjects) -> DraReaders {
        DraReaders {
            classes: reader(objects.classes),
            slices: reader(objects.slices),
            claims: reader(objects.claims),
            templates: reader(objects.templates),
        }
    }
}

/// Whether the server serves [`DRA_GROUP_VERSION`] with the four kinds ([`crate::discovery::discover`]).
pub(crate) async fn discover(client: &Client) -> Result<bool, kube::Error> {
    crate::discovery::discover(client, DRA_GROUP_VERSION, &PLURALS).await
}

/// [`discover`], retried for up to [`DISCOVERY_PATIENCE`] ([`crate::discovery::served`]).
async fn served(client: &Client) -> bool {
    crate::discovery::served(
        client,
        DRA_GROUP_VERSION,
        &PLURALS,
        "Dynamic Resource Allocation is off, and pods with resource claims are not scheduled",
    )
    .await
}

/// Starts the one task that discovers DRA and then runs the four watches (in a [`JoinSet`] it owns, so that aborting
/// it when the store is dropped stops them). It counts once toward readiness when discovery has decided, after
/// raising the readiness target by [`DRA_KINDS`] if the kinds are watched.
pub(crate) fn spawn(
    client: &Client,
    wc: &watcher::Config,
    shared: &Arc<Shared>,
    ready_tx: &watch::Sender<usize>,
    tasks: &mut Vec<tokio::task::AbortHandle>,
) -> DraReaders {
    let (classes, classes_w) = reflector::store();
    let (slices, slices_w) = reflector::store();
    let (claims, claims_w) = reflector::store();
    let (templates, templates_w) = reflector::store();
    let readers = DraReaders {
        classes: classes.clone(),
        slices: slices.clone(),
        claims: claims.clone(),
        templates: templates.clone(),
    };
    let (client, wc, shared, ready_tx) = (client.clone(), wc.clone(), shared.clone(), ready_tx.clone());
    let task = tokio::spawn(async move {
        if !served(&client).await {
            ready_tx.send_modify(|n| *n += 1);
            return;
        }
        // Target first, then the gate's count: readiness can never be reached without the four kinds.
        shared.ready_target.fetch_add(DRA_KINDS, Ordering::SeqCst);
        shared.dra_served.store(true, Ordering::SeqCst);
        ready_tx.send_modify(|n| *n += 1);
        let mut set = JoinSet::new();
        set.spawn(kind((classes, classes_w), &client, &wc, &shared, &ready_tx));
        set.spawn(kind((slices, slices_w), &client, &wc, &shared, &ready_tx));
        set.spawn(kind((claims, claims_w), &client, &wc, &shared, &ready_tx));
        set.spawn(kind((templates, templates_w), &client, &wc, &shared, &ready_tx));
        set.join_all().await;
    });
    tasks.push(task.abort_handle());
    readers
}

/// The watch of one DRA kind, cluster-wide, slimmed like the storage kinds; a refused list is tolerated.
fn kind<K>(
    store: (Reader<K>, reflector::store::Writer<K>),
    client: &Client,
    wc: &watcher::Config,
    shared: &Arc<Shared>,
    ready_tx: &watch::Sender<usize>,
) -> impl Future<Output = ()> + Send + 'static
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    watch_kind(
        store,
        Api::all(client.clone()),
        wc.clone(),
        shared.clone(),
        ready_tx.clone(),
        (
            Box::new(devices_hook) as Hook<K>,
            crate::slim::storage_object::<K>,
            Tolerate::Devices,
        ),
    )
}

fn devices_hook<K: Resource<DynamicType = ()> + Clone>(ev: &watcher::Event<K>, _: &Reader<K>, s: &Shared) {
    match ev {
        watcher::Event::Apply(_) | watcher::Event::Delete(_) => s.publish(StoreEvent::Devices),
        watcher::Event::InitDone => s.publish(StoreEvent::Resync),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ClusterState, Store};

    #[test]
    fn a_fixed_store_has_dra_caches_exactly_when_its_state_has_dra_objects() {
        let slice: ResourceSlice = serde_json::from_value(serde_json::json!({
            "metadata": { "name": "s" },
            "spec": { "driver": "gpu.example.com", "nodeName": "n",
                      "pool": { "name": "n", "generation": 1, "resourceSliceCount": 1 } },
        }))
        .unwrap();
        let with = Store::from_state(ClusterState {
            dra: Some(DraObjects {
                slices: vec![slice],
                ..DraObjects::default()
            }),
            ..ClusterState::default()
        });
        assert!(with.is_ready() && with.dra_served());
        let dra = with.dra().expect("DRA caches");
        assert_eq!((dra.slices.len(), dra.classes.len()), (1, 0));

        let without = Store::from_state(ClusterState::default());
        assert!(without.is_ready() && !without.dra_served() && without.dra().is_none());
        assert!(without.unreadable_devices().is_empty());
    }
}
