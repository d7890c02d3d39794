//! Wiring of kube watchers into the reflector stores, the indexes and the notification channel.
//!
//! Each kind runs `watcher(..).default_backoff().modify(clear managedFields).reflect(writer)` in its own task. The
//! stream is polled by that task before anyone awaits readiness (awaiting first deadlocks: `kube::runtime::reflector::Store::wait_until_ready` is fed only by the stream). The
//! per-event hook runs after the reflector applied the event, so at `InitDone` the reader already holds the full
//! relisted state and the indexes are rebuilt from it (a `Delete` may be missed across a relist: kube-rs's watcher
//! reports a relist as `Init`/`InitApply`/`InitDone`, not as deletes).

use std::{
    fmt::Debug,
    sync::{Arc, Mutex, RwLock},
};

use futures::StreamExt;
use k8s_openapi::api::{
    core::v1::{Node, Pod},
    policy::v1::PodDisruptionBudget,
    scheduling::v1::PriorityClass,
};
use kube::{
    Api, Client, Resource, ResourceExt,
    runtime::{
        WatchStreamExt,
        reflector::{self, Store as Reader},
        watcher,
    },
};
use phalanx_api::{
    v1alpha3::CompositePodGroup,
    v1beta1::{PodGroup, Workload},
};
use serde::de::DeserializeOwned;
use tokio::sync::{broadcast, watch};

use crate::{
    AssumeCache, ClusterIndex, GroupKey, GroupKind, GroupNode, Inner, PodKey, Shared, Store, StoreConfig,
    StoreEvent, pod_group_key, pod_node,
};

/// What one kind does with each watch event after the reflector applied it.
type Hook<K> = Box<dyn Fn(&watcher::Event<K>, &Reader<K>, &Shared) + Send + Sync>;

pub(crate) fn start(client: Client, config: StoreConfig) -> Store {
    let (events, _) = broadcast::channel(config.event_buffer.max(16));
    let shared = Arc::new(Shared {
        index: RwLock::new(ClusterIndex::default()),
        assumed: Mutex::new(AssumeCache::new()),
        events,
    });
    let (ready_tx, ready) = watch::channel(0usize);
    let wc = watcher::Config::default()
        .page_size(config.page_size)
        .any_semantic();
    let mut tasks = Vec::new();

    let nodes = spawn::<Node>(
        Api::all(client.clone()),
        wc.clone(),
        &shared,
        &ready_tx,
        &mut tasks,
        Box::new(node_hook),
    );
    let pods = spawn::<Pod>(
        Api::all(client.clone()),
        wc.clone(),
        &shared,
        &ready_tx,
        &mut tasks,
        Box::new(pod_hook),
    );
    let pod_groups = spawn::<PodGroup>(
        Api::all(client.clone()),
        wc.clone(),
        &shared,
        &ready_tx,
        &mut tasks,
        Box::new(|ev, r, s| {
            group_hook(ev, r, s, GroupKind::PodGroup, |g: &PodGroup| {
                g.spec.parent_composite_pod_group_name.clone()
            })
        }),
    );
    let composite_pod_groups = spawn::<CompositePodGroup>(
        Api::all(client.clone()),
        wc.clone(),
        &shared,
        &ready_tx,
        &mut tasks,
        Box::new(|ev, r, s| {
            group_hook(ev, r, s, GroupKind::CompositePodGroup, |g: &CompositePodGroup| {
                g.spec.parent_composite_pod_group_name.clone()
            })
        }),
    );
    let workloads = spawn::<Workload>(
        Api::all(client.clone()),
        wc.clone(),
        &shared,
        &ready_tx,
        &mut tasks,
        Box::new(other_hook),
    );
    let priority_classes = spawn::<PriorityClass>(
        Api::all(client.clone()),
        wc.clone(),
        &shared,
        &ready_tx,
        &mut tasks,
        Box::new(other_hook),
    );
    let pdbs = spawn::<PodDisruptionBudget>(
        Api::all(client),
        wc,
        &shared,
        &ready_tx,
        &mut tasks,
        Box::new(other_hook),
    );

    Store {
        inner: Arc::new(Inner {
            nodes,
            pods,
            pod_groups,
            composite_pod_groups,
            workloads,
            priority_classes,
            pdbs,
            shared,
            ready,
            tasks,
        }),
    }
}

fn spawn<K>(
    api: Api<K>,
    wc: watcher::Config,
    shared: &Arc<Shared>,
    ready_tx: &watch::Sender<usize>,
    tasks: &mut Vec<tokio::task::AbortHandle>,
    hook: Hook<K>,
) -> Reader<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store::<K>();
    let shared = shared.clone();
    let ready_tx = ready_tx.clone();
    let r = reader.clone();
    let kind = K::kind(&()).to_string();
    let task = tokio::spawn(async move {
        let mut counted = false;
        let stream = watcher(api, wc)
            .default_backoff()
            .modify(|o: &mut K| o.managed_fields_mut().clear())
            .reflect(writer);
        let mut stream = std::pin::pin!(stream);
        while let Some(item) = stream.next().await {
            match item {
                Ok(ev) => {
                    hook(&ev, &r, &shared);
                    if matches!(ev, watcher::Event::InitDone) && !counted {
                        counted = true;
                        ready_tx.send_modify(|n| *n += 1);
                        tracing::debug!(kind, objects = r.len(), "cache synced");
                    }
                }
                // Errors are stream items; the watcher retries with backoff and the stream continues.
                Err(e) => tracing::warn!(kind, error = %e, "watch error, retrying"),
            }
        }
    });
    tasks.push(task.abort_handle());
    reader
}

fn node_hook(ev: &watcher::Event<Node>, _: &Reader<Node>, s: &Shared) {
    match ev {
        watcher::Event::Apply(n) | watcher::Event::Delete(n) => s.publish(StoreEvent::Node(n.name_any())),
        watcher::Event::InitDone => s.publish(StoreEvent::Resync),
        _ => {}
    }
}

fn pod_hook(ev: &watcher::Event<Pod>, reader: &Reader<Pod>, s: &Shared) {
    match ev {
        watcher::Event::Apply(p) => {
            let Some(key) = PodKey::of(p) else { return };
            let old_group = s.index_mut().group_of(&key);
            s.index_mut().apply_pod(p);
            s.assumed().observe(&key, p);
            let group = pod_group_key(p).or(old_group);
            s.publish(StoreEvent::Pod {
                key,
                group,
                node: pod_node(p).map(str::to_owned),
                deleted: false,
            });
        }
        watcher::Event::Delete(p) => {
            let Some(key) = PodKey::of(p) else { return };
            s.index_mut().remove_pod(&key);
            s.assumed().observe_delete(&key);
            s.publish(StoreEvent::Pod {
                key,
                group: pod_group_key(p),
                node: pod_node(p).map(str::to_owned),
                deleted: true,
            });
        }
        watcher::Event::InitDone => {
            let pods = reader.state();
            s.index_mut().reset_pods(pods.iter().map(|p| p.as_ref()));
            // One map lookup per assumption (not a scan of every pod), and the map is built before the assumption
            // lock is taken, so a relist of many pods holds that lock only briefly.
            let by_key: std::collections::HashMap<PodKey, &Pod> = pods
                .iter()
                .filter_map(|p| PodKey::of(p).map(|k| (k, p.as_ref())))
                .collect();
            let mut assumed = s.assumed();
            for (key, _) in assumed.all() {
                match by_key.get(&key) {
                    Some(p) => assumed.observe(&key, p),
                    None => assumed.observe_delete(&key),
                }
            }
            drop(assumed);
            s.publish(StoreEvent::Resync);
        }
        watcher::Event::Init | watcher::Event::InitApply(_) => {}
    }
}

fn group_hook<K>(
    ev: &watcher::Event<K>,
    reader: &Reader<K>,
    s: &Shared,
    kind: GroupKind,
    parent: fn(&K) -> Option<String>,
) where
    K: Resource<DynamicType = ()> + Clone,
{
    let key_of = |o: &K| GroupKey {
        kind,
        namespace: o.namespace().unwrap_or_default().into(),
        name: o.name_any().into(),
    };
    match ev {
        watcher::Event::Apply(o) => {
            let key = key_of(o);
            s.index_mut().apply_group(key.clone(), parent(o).as_deref());
            s.publish(StoreEvent::Group(key));
        }
        watcher::Event::Delete(o) => {
            let key = key_of(o);
            s.index_mut().remove_group(&key);
            s.publish(StoreEvent::Group(key));
        }
        watcher::Event::InitDone => {
            let all: Vec<(GroupKey, Option<String>)> =
                reader.state().iter().map(|o| (key_of(o), parent(o))).collect();
            s.index_mut().reset_groups(kind, all);
            s.publish(StoreEvent::Resync);
        }
        watcher::Event::Init | watcher::Event::InitApply(_) => {}
    }
}

fn other_hook<K: Resource<DynamicType = ()> + Clone>(ev: &watcher::Event<K>, _: &Reader<K>, s: &Shared) {
    match ev {
        watcher::Event::Apply(_) | watcher::Event::Delete(_) => s.publish(StoreEvent::Other),
        watcher::Event::InitDone => s.publish(StoreEvent::Resync),
        _ => {}
    }
}

/// Hierarchy facts of a PodGroup.
pub(crate) fn pod_group_node(g: &PodGroup) -> GroupNode {
    GroupNode {
        key: GroupKey::pod_group(&g.namespace().unwrap_or_default(), &g.name_any()),
        parent: g.spec.parent_composite_pod_group_name.clone(),
        workload: g.spec.workload_ref.as_ref().map(|w| w.workload_name.clone()),
        gang: g.spec.scheduling_policy.gang.is_some(),
        disruption_all: g.spec.disruption_mode.as_ref().is_some_and(|d| d.all.is_some()),
    }
}

/// Hierarchy facts of a CompositePodGroup.
pub(crate) fn composite_node(g: &CompositePodGroup) -> GroupNode {
    GroupNode {
        key: GroupKey::composite(&g.namespace().unwrap_or_default(), &g.name_any()),
        parent: g.spec.parent_composite_pod_group_name.clone(),
        workload: Some(g.spec.workload_ref.workload_name.clone()),
        gang: g.spec.scheduling_policy.gang.is_some(),
        disruption_all: g.spec.disruption_mode.as_ref().is_some_and(|d| d.all.is_some()),
    }
}
