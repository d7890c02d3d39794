//! The owner integration: a Workload and a PodGroup for every annotated Job, StatefulSet, Deployment or custom
//! resource, so gangs need no hand-written PodGroup (issue 16).
//!
//! Pipeline per owner, as the other reconcilers: read (the owner through the dynamic API, any kind) -> validate
//! (the annotations, [`build::min_count`]) -> build ([`build::workload`], [`build::pod_group`], pure) -> apply
//! (server-side apply, field manager [`phalanx_api::field_managers::INTEGRATION`]) -> report (a Warning event
//! `InvalidGangAnnotation` on the owner for bad input, a Normal `GangGroupApplied` when minCount changes).
//! The pods are never touched: the store links them to the group through their owner chain
//! (`phalanx_store::owners`).
//!
//! Triggers: [`StoreEvent::Owner`] for the owners the store caches (the built-in kinds, and custom kinds from the
//! first pod that reaches one), pod events for pods whose top owner is a custom resource (also for kinds the store
//! cannot watch), and a resync every `min(opts.resync, 60 s)`. Upstream counterpart: the Job controller's
//! Workload/PodGroup management of KEP-5547 (`pkg/controller/job`, `WorkloadWithJob` gate) and, for other owners,
//! KAI-Scheduler's pod-grouper (which also walks a pod's top owner).
//!
//! Which owners get a group: exactly those the pods' owner walk ends with ([`phalanx_store::owners::is_group_owner`],
//! the same walk that links the pods). A ReplicaSet controlled by a Deployment never does, on any path (the
//! Deployment controller copies the Deployment's gang annotations onto it), nor does an annotated owner under
//! another annotated owner; a group the integration made earlier for such an owner is deleted.
//!
//! A cluster-scoped custom owner (allowed for a namespaced pod by the garbage collector) is read without a namespace;
//! its group lives in the namespace of its pods.
//!
//! Deletion is the garbage collector's: both objects carry a controller `ownerReference` to the owner. A
//! suspended Job gets its group when it is resumed (its pods are only created then); a group that exists is kept
//! while the Job is suspended (upstream deletes it; Phalanx keeps it so a resumed Job's pods never race it).

pub mod build;
mod events;
pub mod kinds;
mod per_kind;

pub use events::{CONTROLLER, GANG_GROUP_DELETED};

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::events::EventType;
use phalanx_api::conditions::reasons;
use phalanx_api::field_managers::INTEGRATION;
use phalanx_api::v1beta1::{PodGroup, Workload};
use phalanx_store::StoreEvent;
use phalanx_store::owners::{Lookup, OwnerRef, asks_for_gang, is_watched};
use tokio::sync::{Mutex, broadcast::error::RecvError, mpsc};
use tokio_util::sync::CancellationToken;

use crate::context::Ctx;

/// How often one custom owner is reconciled at most because of its pods' events.
const POD_TRIGGER_INTERVAL: Duration = Duration::from_secs(5);

/// Runs the owner integration until `shutdown` is cancelled. Call after the store is ready and while leader
/// (as [`crate::run_controllers`] does). Errors of one owner are logged and retried after a backoff (1 s doubling
/// to `opts.max_backoff`); nothing is returned.
pub async fn run(ctx: Ctx, shutdown: CancellationToken) {
    let (tx, mut rx) = mpsc::unbounded_channel::<OwnerRef>();
    let pending: Arc<std::sync::Mutex<HashSet<OwnerRef>>> = Arc::default();
    let enqueue = {
        let pending = pending.clone();
        move |o: OwnerRef| {
            if pending
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(o.clone())
            {
                let _ = tx.send(o);
            }
        }
    };
    let mut events = ctx.store.subscribe();
    let resources: Resources = Mutex::default();
    let memo = per_kind::Memo::default();
    let mut failures: HashMap<String, u32> = HashMap::new();
    let mut resync = tokio::time::interval(ctx.opts.resync.min(Duration::from_secs(60)));
    let (retry_tx, mut retry_rx) = mpsc::unbounded_channel::<OwnerRef>();
    // Per (namespace, owner uid): a cluster-scoped owner's pods in two namespaces are two groups.
    let mut recent: HashMap<(String, String), tokio::time::Instant> = HashMap::new();
    // The owners of `recent` with a reconcile due at the end of their interval.
    let mut deferred: HashSet<(String, String)> = HashSet::new();
    // Per owner uid: the signature of the last successful reconcile, so status-only updates and resyncs cost nothing
    // (the periodic resync trims it to the live built-in owners; custom ones are re-read after a trim).
    let mut applied: HashMap<String, Signature> = HashMap::new();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = resync.tick() => {
                let live: HashSet<String> = ctx.store.annotated_owners().into_iter().map(|o| o.uid).collect();
                applied.retain(|uid, _| live.contains(uid));
                everything(&ctx, &applied, &enqueue);
            }
            ev = events.recv() => match ev {
                Ok(StoreEvent::Owner(o)) => {
                    // Status updates (a Job's active count, a StatefulSet's ready replicas) do not change the group:
                    // skip owners whose generation and annotations were applied already and whose group exists.
                    if needs_reconcile(&ctx, &applied, &o) {
                        enqueue(o);
                    }
                }
                Ok(StoreEvent::Pod { key, deleted: false, .. }) => {
                    // Every pod event of a custom owner's pods would cost a GET of the owner: one per owner per
                    // POD_TRIGGER_INTERVAL is enough, plus one at the end of the interval when more events came
                    // in it (the pods of an LWS replica group or of a JobSet restart arrive over seconds, and the
                    // groups they need must not wait for the periodic resync).
                    if let Some(o) = ctx.store.pod(&key).and_then(|p| custom_top_owner(&ctx, &p)) {
                        let now = tokio::time::Instant::now();
                        recent.retain(|_, t| now.duration_since(*t) < POD_TRIGGER_INTERVAL);
                        deferred.retain(|k| recent.contains_key(k));
                        let key = (o.namespace.clone(), o.uid.clone());
                        match recent.entry(key.clone()) {
                            std::collections::hash_map::Entry::Vacant(e) => {
                                e.insert(now);
                                enqueue(o);
                            }
                            std::collections::hash_map::Entry::Occupied(e) => {
                                if deferred.insert(key) {
                                    let wait = POD_TRIGGER_INTERVAL.saturating_sub(now.duration_since(*e.get()));
                                    let retry = retry_tx.clone();
                                    tokio::spawn(async move {
                                        tokio::time::sleep(wait).await;
                                        let _ = retry.send(o);
                                    });
                                }
                            }
                        }
                    }
                }
                Ok(StoreEvent::Resync) | Err(RecvError::Lagged(_)) => everything(&ctx, &applied, &enqueue),
                Ok(_) => {}
                Err(RecvError::Closed) => return,
            },
            Some(o) = retry_rx.recv() => enqueue(o),
            Some(o) = rx.recv() => {
                pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&o);
                if !ctx.is_leader() {
                    continue;
                }
                // The signature is taken before the read, so a change that lands meanwhile is reconciled again.
                let sig = match ctx.store.owner_meta(&o) {
                    Lookup::Found(m) => Some(signature(&m)),
                    _ => None,
                };
                match reconcile(&ctx, &resources, &memo, &o).await {
                    Ok(()) => {
                        failures.remove(&o.uid);
                        match sig {
                            Some(sig) => { applied.insert(o.uid.clone(), sig); }
                            None => { applied.remove(&o.uid); }
                        }
                    }
                    Err(e) => {
                        let n = failures.entry(o.uid.clone()).or_default();
                        *n = n.saturating_add(1);
                        let delay = crate::error::backoff(Duration::from_secs(1), *n, ctx.opts.max_backoff);
                        ctx.count_error(CONTROLLER, "api");
                        tracing::warn!(owner = %o.name, kind = %o.kind, error = %e, ?delay, "owner integration failed, retrying");
                        let retry = retry_tx.clone();
                        tokio::spawn(async move {
                            tokio::time::sleep(delay).await;
                            let _ = retry.send(o);
                        });
                    }
                }
            }
        }
    }
}

/// What of an owner's metadata decides its group: `metadata.generation` (bumped by spec changes such as
/// `parallelism`, not by status) and the two annotations.
type Signature = (Option<i64>, Option<String>, Option<String>);

fn signature(m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Signature {
    let a = |k: &str| m.annotations.as_ref().and_then(|a| a.get(k).cloned());
    (
        m.generation,
        a(phalanx_api::owners::GANG),
        a(phalanx_api::owners::GANG_MIN_COUNT),
    )
}

/// The custom-resource top owner of a pod that names no group itself, if any. Any scheduler name counts (the
/// controllers do not know which names this process schedules).
fn custom_top_owner(ctx: &Ctx, p: &phalanx_store::PodRecord) -> Option<OwnerRef> {
    if p.group_name().is_some() {
        return None;
    }
    let top = ctx.store.resolve_owners(p).top?;
    // A Pod at the top (a pod controlled by a bare pod) is no workload: nothing to group.
    (!is_watched(&top.api_version, &top.kind) && !phalanx_store::owners::is_pod(&top.api_version, &top.kind))
        .then_some(top)
}

/// Whether a cached owner needs a reconcile: it is a group owner ([`phalanx_store::Store::is_group_owner`]) whose
/// generation or annotations changed since the last successful reconcile or whose PodGroup is gone; or it asks for a
/// gang without being the group owner (a ReplicaSet of a Deployment, an owner under another annotated owner) while a
/// group the integration made for it exists, to delete that group.
fn needs_reconcile(ctx: &Ctx, applied: &HashMap<String, Signature>, o: &OwnerRef) -> bool {
    let Lookup::Found(m) = ctx.store.owner_meta(o) else {
        return false;
    };
    if !phalanx_api::owners::wants_gang(m.annotations.as_ref()) {
        return false;
    }
    let name = phalanx_api::owners::owner_group_name(&o.kind, &o.name);
    let group = ctx.store.pod_group(&o.namespace, &name);
    if !ctx.store.is_group_owner(o) {
        return group.is_some_and(|g| made_for(g.metadata.labels.as_ref(), o));
    }
    applied.get(&o.uid) != Some(&signature(&m)) || group.is_none()
}

/// Whether an object with `labels` is one the integration made for `o` (labelled with its uid).
fn made_for(labels: Option<&std::collections::BTreeMap<String, String>>, o: &OwnerRef) -> bool {
    labels.and_then(|l| l.get(phalanx_api::owners::OWNER_UID_LABEL)) == Some(&o.uid)
}

/// Enqueues the annotated built-in owners that need a reconcile ([`needs_reconcile`]) and the custom top owners of
/// pods (those a kind the store cannot watch has are read again each time).
fn everything(ctx: &Ctx, applied: &HashMap<String, Signature>, enqueue: &impl Fn(OwnerRef)) {
    let mut seen = HashSet::new();
    for p in ctx.store.pods().state() {
        if let Some(o) = custom_top_owner(ctx, &p)
            && seen.insert(format!("{}/{}", o.namespace, o.uid))
            && (!matches!(ctx.store.owner_meta(&o), Lookup::Found(_)) || needs_reconcile(ctx, applied, &o))
        {
            enqueue(o);
        }
    }
    // Groups made earlier for owners that are not group owners (a ReplicaSet of a Deployment): found from the
    // groups, since such owners are not in `annotated_owners`.
    for g in ctx.store.pod_groups().state() {
        let Some(c) = phalanx_store::owners::controller_of(&g.metadata) else {
            continue;
        };
        let o = OwnerRef {
            api_version: c.api_version.clone(),
            kind: c.kind.clone(),
            namespace: g.metadata.namespace.clone().unwrap_or_default(),
            name: c.name.clone(),
            uid: c.uid.clone(),
        };
        if made_for(g.metadata.labels.as_ref(), &o)
            && !ctx.store.is_group_owner(&o)
            && seen.insert(format!("{}/{}", o.namespace, o.uid))
            && needs_reconcile(ctx, applied, &o)
        {
            enqueue(o);
        }
    }
    for o in ctx.store.annotated_owners() {
        if seen.insert(format!("{}/{}", o.namespace, o.uid)) && needs_reconcile(ctx, applied, &o) {
            enqueue(o);
        }
    }
}

/// Error of one reconcile (retried with backoff).
#[derive(Debug, thiserror::Error)]
enum ReconcileError {
    #[error("discovery of {0}: {1}")]
    Discovery(String, kube::Error),
    #[error(transparent)]
    Kube(#[from] kube::Error),
}

/// Discovered resources per `(apiVersion, kind)`: the resource, and whether it is namespaced.
type Resources = Mutex<HashMap<(String, String), (ApiResource, bool)>>;

async fn api_resource(
    ctx: &Ctx,
    cache: &Resources,
    o: &OwnerRef,
) -> Result<(ApiResource, bool), ReconcileError> {
    let key = (o.api_version.clone(), o.kind.clone());
    if let Some(found) = cache.lock().await.get(&key) {
        return Ok(found.clone());
    }
    let (group, version) = o
        .api_version
        .rsplit_once('/')
        .unwrap_or(("", o.api_version.as_str()));
    let gvk = GroupVersionKind::gvk(group, version, &o.kind);
    let (ar, caps) = kube::discovery::pinned_kind(&ctx.client, &gvk)
        .await
        .map_err(|e| ReconcileError::Discovery(format!("{}/{}", o.api_version, o.kind), e))?;
    let found = (ar, caps.scope == kube::discovery::Scope::Namespaced);
    cache.lock().await.insert(key, found.clone());
    Ok(found)
}

/// The object named like `o` of `kind` in its namespace that `o` controls (a TrainJob's JobSet), as JSON; `None`
/// when there is none, or its kind is not served.
async fn read_child(
    ctx: &Ctx,
    resources: &Resources,
    o: &OwnerRef,
    (api_version, kind): (&str, &str),
) -> Result<Option<serde_json::Value>, ReconcileError> {
    let child = OwnerRef {
        api_version: api_version.into(),
        kind: kind.into(),
        ..o.clone()
    };
    let (ar, _) = match api_resource(ctx, resources, &child).await {
        Ok(found) => found,
        Err(ReconcileError::Discovery(..)) => return Ok(None),
        Err(e) => return Err(e),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &o.namespace, &ar);
    let obj = api
        .get_opt(&o.name)
        .await?
        .filter(|c| phalanx_store::owners::controller_of(&c.metadata).is_some_and(|r| r.uid == o.uid));
    Ok(obj.map(|c| serde_json::to_value(&c).unwrap_or_default()))
}

/// Deletes the Workload and PodGroup the integration made for `o` (named for it and labelled with its uid), now that
/// `o` is not the owner its pods join; the pods are not touched (they already resolve elsewhere).
async fn delete_stale(ctx: &Ctx, o: &OwnerRef, reference: &ObjectReference) -> Result<(), ReconcileError> {
    let name = phalanx_api::owners::owner_group_name(&o.kind, &o.name);
    let mut deleted = false;
    if let Some(g) = ctx.store.pod_group(&o.namespace, &name)
        && made_for(g.metadata.labels.as_ref(), o)
    {
        let dp = DeleteParams::default().preconditions(Preconditions {
            uid: g.metadata.uid.clone(),
            resource_version: None,
        });
        let groups: Api<PodGroup> = Api::namespaced(ctx.client.clone(), &o.namespace);
        deleted |= ignore_gone(groups.delete(&name, &dp).await.map(|_| ()))?;
        let workloads: Api<Workload> = Api::namespaced(ctx.client.clone(), &o.namespace);
        if let Some(w) = workloads.get_opt(&name).await?
            && made_for(w.metadata.labels.as_ref(), o)
        {
            let dp = DeleteParams::default().preconditions(Preconditions {
                uid: w.metadata.uid.clone(),
                resource_version: None,
            });
            deleted |= ignore_gone(workloads.delete(&name, &dp).await.map(|_| ()))?;
        }
    }
    if deleted {
        tracing::info!(owner = %o.name, kind = %o.kind, namespace = %o.namespace, group = %name,
            "owner is not the one its pods join; its Workload and PodGroup deleted");
        ctx.publish(
            CONTROLLER,
            reference,
            EventType::Normal,
            GANG_GROUP_DELETED,
            "Delete",
            format!(
                "Workload and PodGroup {name} deleted: the pods of {} {} join the group of an owner above it",
                o.kind, o.name
            ),
        )
        .await;
    }
    Ok(())
}

/// `Ok(true)` for a delete that went through, `Ok(false)` for an object already gone (404) or replaced (409).
fn ignore_gone(r: Result<(), kube::Error>) -> Result<bool, ReconcileError> {
    match r {
        Ok(()) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

async fn reconcile(
    ctx: &Ctx,
    resources: &Resources,
    memo: &per_kind::Memo,
    o: &OwnerRef,
) -> Result<(), ReconcileError> {
    ctx.count_reconcile(CONTROLLER);
    tracing::debug!(owner = %o.name, kind = %o.kind, namespace = %o.namespace, "reconciling owner");
    let (ar, namespaced) = api_resource(ctx, resources, o).await?;
    let api: Api<DynamicObject> = if namespaced {
        Api::namespaced_with(ctx.client.clone(), &o.namespace, &ar)
    } else {
        Api::all_with(ctx.client.clone(), &ar)
    };
    let obj = api.get_opt(&o.name).await?;
    let Some(obj) = obj.filter(|obj| {
        obj.metadata.uid.as_deref() == Some(o.uid.as_str()) && obj.metadata.deletion_timestamp.is_none()
    }) else {
        // Gone or going: the garbage collector deletes its groups.
        memo.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&o.uid);
        return Ok(());
    };
    let json = serde_json::to_value(&obj).unwrap_or_default();
    let mut facts = build::OwnerFacts::from_json(&json);
    // DynamicObject carries its types only when the server sent them; the reference is authoritative.
    facts.api_version.clone_from(&o.api_version);
    facts.kind.clone_from(&o.kind);
    let reference = ObjectReference {
        api_version: Some(o.api_version.clone()),
        kind: Some(o.kind.clone()),
        name: Some(o.name.clone()),
        // A cluster-scoped owner's events carry no namespace.
        namespace: namespaced.then(|| o.namespace.clone()),
        uid: Some(o.uid.clone()),
        ..ObjectReference::default()
    };
    // The fresh object decides the Deployment rule, the caches the owners above it: either way no group for an
    // owner whose pods join another's.
    if phalanx_api::owners::wants_gang(obj.metadata.annotations.as_ref())
        && (!asks_for_gang(o, &obj.metadata) || !ctx.store.is_group_owner(o))
    {
        tracing::debug!(owner = %o.name, kind = %o.kind, "its pods join an owner above it; no group of its own");
        return delete_stale(ctx, o, &reference).await;
    }
    // A kind with its own rule decides its groups' sizes; the annotation only has to ask for a gang.
    let child = match kinds::child_of(&o.api_version, &o.kind) {
        Some(kind) => read_child(ctx, resources, o, kind).await?,
        None => None,
    };
    let plan = kinds::plan_for(&o.api_version, &o.kind, &json, child.as_ref());
    let asked = if plan.is_some() {
        phalanx_api::owners::gang_request(obj.metadata.annotations.as_ref())
            .map(|r| r.map(|_| 0))
            .map_err(build::IntentError::from)
    } else {
        build::min_count(obj.metadata.annotations.as_ref(), &facts)
    };
    let min = match asked {
        Ok(None) => {
            tracing::debug!(owner = %o.name, kind = %o.kind, "no gang annotation");
            return Ok(());
        }
        Ok(Some(n)) => n,
        Err(e) => {
            let note = e.to_string();
            if ctx.transition(&o.uid, "gang-intent", &note, None).is_some() {
                tracing::info!(owner = %o.name, kind = %o.kind, error = %note, "invalid gang annotation");
                ctx.publish(
                    CONTROLLER,
                    &reference,
                    EventType::Warning,
                    reasons::INVALID_GANG_ANNOTATION,
                    "Validate",
                    note,
                )
                .await;
            }
            return Ok(());
        }
    };
    if let Some(plan) = plan {
        return Ok(per_kind::apply(
            ctx,
            memo,
            o,
            (&facts, obj.metadata.annotations.as_ref()),
            &reference,
            plan,
        )
        .await?);
    }
    let name = phalanx_api::owners::owner_group_name(&o.kind, &o.name);
    let exists = ctx.store.pod_group(&o.namespace, &name).is_some();
    if facts.suspended && !exists {
        return Ok(());
    }
    let pp = PatchParams::apply(INTEGRATION).force();
    let workloads: Api<Workload> = Api::namespaced(ctx.client.clone(), &o.namespace);
    workloads
        .patch(&name, &pp, &Patch::Apply(build::workload(&facts, min)))
        .await?;
    let groups: Api<PodGroup> = Api::namespaced(ctx.client.clone(), &o.namespace);
    groups
        .patch(&name, &pp, &Patch::Apply(build::pod_group(&facts, min)))
        .await?;
    let state = format!("PodGroup {name} minCount {min}");
    if ctx.transition(&o.uid, "gang-intent", &state, None).is_some() {
        ctx.publish(
            CONTROLLER,
            &reference,
            EventType::Normal,
            reasons::GANG_GROUP_APPLIED,
            "Apply",
            format!("Workload and {state} applied for {} {}", o.kind, o.name),
        )
        .await;
    }
    Ok(())
}
