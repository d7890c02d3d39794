//! The ProvisioningRequest controller (Phalanx addition, opt-in): Cluster Autoscaler's atomic scale-up for gangs.
//!
//! With `autoscaling.provisioningRequests: true`, a standalone gang PodGroup annotated
//! `scheduling.phalanx.dev/provisioning-request: "true"` gets, once its quorum of members exists, one
//! `autoscaling.x-k8s.io/v1` ProvisioningRequest (upstream `cluster-autoscaler/apis/provisioningrequest/
//! autoscaling.x-k8s.io/v1/types.go`) of the configured class, with one PodTemplate per member shape
//! ([`plan::templates`]); the request and its templates are owned by the PodGroup (controller reference), so
//! the garbage collector deletes them with it. The members are annotated
//! `autoscaling.x-k8s.io/consume-provisioning-request` and `autoscaling.x-k8s.io/provisioning-class-name`. The
//! request's state is mirrored into the PodGroup condition `CapacityProvisioned`, which the scheduler reads to
//! hold the gang (`phalanx_api::provisioning::waits_for_capacity`). A request that fails or whose booking expires
//! before the gang is placed is replaced by the next attempt (`<group>-<n>`) after a backoff ([`plan::backoff`]).
//!
//! Requests are watched only while the feature is on, and only those Phalanx made (label
//! `scheduling.phalanx.dev/provisioning-for`). When the CRD is missing, one error is logged, the gangs that opt in
//! get `CapacityProvisioned=False/ProvisioningRequestCRDMissing` and are scheduled as usual; the CRD is looked for
//! again every minute.

pub mod plan;
pub mod types;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use futures::channel::mpsc::{UnboundedReceiver, UnboundedSender};
use k8s_openapi::api::core::v1::{Pod, PodTemplate};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, applier};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use phalanx_api::conditions::{CAPACITY_PROVISIONED, capacity};
use phalanx_api::field_managers::PROVISIONING as FIELD_MANAGER;
use phalanx_api::labels::{
    CONSUME_PROVISIONING_REQUEST, PROVISIONING_ATTEMPT, PROVISIONING_CLASS_NAME, PROVISIONING_FOR,
};
use phalanx_api::provisioning::{opted_in, supported};
use phalanx_api::v1beta1::PodGroup;
use phalanx_store::GroupKey;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::context::Ctx;
use crate::error::{Error, Result};
use plan::{Outcome, Wanted};
use types::ProvisioningRequest;

/// Controller name (metrics, logs).
pub const CONTROLLER: &str = "provisioningrequest";

/// How often a missing ProvisioningRequest CRD is looked for again.
const CRD_RECHECK: Duration = Duration::from_secs(60);

/// Options of the ProvisioningRequest controller (`autoscaling` section of the configuration).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProvisioningOptions {
    /// `spec.provisioningClassName` of the requests, e.g. `best-effort-atomic-scale-up.autoscaling.x-k8s.io`.
    pub class_name: String,
}

const CRD_UNKNOWN: u8 = 0;
const CRD_PRESENT: u8 = 1;
const CRD_MISSING: u8 = 2;

/// The controller's state beside the shared [`crate::context::Context`].
pub struct Provisioner {
    ctx: Ctx,
    class: String,
    requests: reflector::Store<ProvisioningRequest>,
    crd: AtomicU8,
    synced: AtomicBool,
    /// Pod uid -> the request it was annotated with (saves a patch per member per reconcile).
    annotated: Mutex<HashMap<String, String>>,
}

/// Runs the controller until `shutdown`: the CRD probe and the watch of Phalanx's requests (which trigger the
/// owning PodGroup on `tx`), and the reconciles of the PodGroups arriving on `rx` (the store's triggers, see
/// [`crate::triggers::Queues::provisioning`]).
pub async fn run(
    ctx: Ctx,
    opts: ProvisioningOptions,
    rx: UnboundedReceiver<ObjectRef<PodGroup>>,
    tx: UnboundedSender<ObjectRef<PodGroup>>,
    shutdown: CancellationToken,
) {
    let (reader, writer) = reflector::store::<ProvisioningRequest>();
    let prov = Arc::new(Provisioner {
        ctx: ctx.clone(),
        class: opts.class_name,
        requests: reader,
        crd: AtomicU8::new(CRD_UNKNOWN),
        synced: AtomicBool::new(false),
        annotated: Mutex::new(HashMap::new()),
    });
    let watch = tokio::spawn(watch_requests(prov.clone(), writer, tx, shutdown.clone()));
    let cfg = kube::runtime::controller::Config::default().concurrency(ctx.opts.concurrency);
    applier(
        |pg, p: Arc<Provisioner>| Box::pin(async move { reconcile(pg, &p).await }),
        |pg, e, p: Arc<Provisioner>| crate::error_action(CONTROLLER, pg.uid().as_deref(), e, &p.ctx),
        prov,
        ctx.store.pod_groups().clone(),
        rx.map(Ok::<_, std::convert::Infallible>),
        cfg,
    )
    .for_each(|r| async move { crate::log_result(CONTROLLER, r) })
    .await;
    watch.abort();
}

/// Probes for the CRD (every [`CRD_RECHECK`] while missing), then watches the requests Phalanx made and triggers
/// their PodGroup on every change.
async fn watch_requests(
    prov: Arc<Provisioner>,
    writer: reflector::store::Writer<ProvisioningRequest>,
    tx: UnboundedSender<ObjectRef<PodGroup>>,
    shutdown: CancellationToken,
) {
    let api: Api<ProvisioningRequest> = Api::all(prov.ctx.client.clone());
    let mut told = false;
    loop {
        match api.list(&ListParams::default().limit(1)).await {
            Ok(_) => break,
            Err(kube::Error::Api(s)) if s.code == 404 => {
                if !told {
                    tracing::error!(
                        "autoscaling.provisioningRequests is on, but the ProvisioningRequest CRD \
                         (provisioningrequests.autoscaling.x-k8s.io, installed with Cluster Autoscaler) is missing: \
                         gangs that opt in get CapacityProvisioned=False/{} and are scheduled as usual; looking \
                         again every {} s",
                        capacity::CRD_MISSING,
                        CRD_RECHECK.as_secs()
                    );
                    told = true;
                }
                prov.crd.store(CRD_MISSING, Ordering::SeqCst);
                trigger_opted_in(&prov, &tx);
            }
            Err(e) => tracing::warn!(error = %e, "looking for the ProvisioningRequest CRD; retrying"),
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(if told { CRD_RECHECK } else { Duration::from_secs(5) }) => {}
        }
    }
    if told {
        tracing::info!("the ProvisioningRequest CRD is installed now: making requests");
    }
    prov.crd.store(CRD_PRESENT, Ordering::SeqCst);
    let cfg = watcher::Config::default().labels(PROVISIONING_FOR);
    let mut events = std::pin::pin!(watcher(api, cfg).default_backoff().reflect(writer));
    loop {
        let ev = tokio::select! {
            () = shutdown.cancelled() => return,
            ev = events.next() => ev,
        };
        match ev {
            None => return,
            Some(Ok(watcher::Event::InitDone)) => {
                prov.synced.store(true, Ordering::SeqCst);
                trigger_opted_in(&prov, &tx);
            }
            Some(Ok(watcher::Event::Apply(pr) | watcher::Event::Delete(pr))) => {
                if let Some(owner) = owning_group(&pr) {
                    let _ = tx.unbounded_send(owner);
                }
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => tracing::warn!(error = %e, "watching ProvisioningRequests; retrying"),
        }
    }
}

/// Triggers every PodGroup that opted in (the CRD state changed).
fn trigger_opted_in(prov: &Provisioner, tx: &UnboundedSender<ObjectRef<PodGroup>>) {
    for pg in prov.ctx.store.pod_groups().state() {
        if opted_in(&pg) {
            let _ = tx.unbounded_send(ObjectRef::from_obj(pg.as_ref()));
        }
    }
}

/// The PodGroup that controls `pr`.
fn owning_group(pr: &ProvisioningRequest) -> Option<ObjectRef<PodGroup>> {
    let o = pr
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true) && o.kind == "PodGroup")?;
    Some(ObjectRef::new(&o.name).within(&pr.namespace()?))
}

/// The attempt label of an object Phalanx made (0 when unreadable).
fn attempt_of(meta: &ObjectMeta) -> u32 {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(PROVISIONING_ATTEMPT))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// One reconcile of PodGroup `pg` (module docs).
async fn reconcile(pg: Arc<PodGroup>, prov: &Provisioner) -> Result<Action> {
    let ctx = &prov.ctx;
    ctx.count_reconcile(CONTROLLER);
    if !opted_in(&pg) || pg.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    if !ctx.is_leader() {
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    let uid = pg.uid().ok_or(Error::MissingField("metadata.uid"))?;
    let ns = pg.namespace().ok_or(Error::MissingField("metadata.namespace"))?;
    let name = pg.name_any();
    if !supported(&pg) {
        let message = "ProvisioningRequests are made for standalone gang PodGroups only (not basic groups, not \
                       groups of a CompositePodGroup tree): the group is scheduled as usual";
        let w = Wanted {
            status: "False",
            reason: capacity::NOT_SUPPORTED,
            message: message.into(),
        };
        set_condition(ctx, &pg, &w).await?;
        return Ok(Action::await_change());
    }
    match prov.crd.load(Ordering::SeqCst) {
        CRD_MISSING => {
            let message = "the ProvisioningRequest CRD (provisioningrequests.autoscaling.x-k8s.io) is not installed: \
                           no request was made, the gang is scheduled as usual";
            let w = Wanted {
                status: "False",
                reason: capacity::CRD_MISSING,
                message: message.into(),
            };
            set_condition(ctx, &pg, &w).await?;
            return Ok(Action::await_change());
        }
        CRD_UNKNOWN => return Ok(Action::requeue(Duration::from_secs(2))),
        _ if !prov.synced.load(Ordering::SeqCst) => return Ok(Action::requeue(Duration::from_secs(1))),
        _ => {}
    }
    if condition_is(
        &pg,
        phalanx_api::conditions::POD_GROUP_INITIALLY_SCHEDULED,
        "True",
    ) {
        // Placed: the request did its work; the garbage collector deletes it with the group.
        return Ok(Action::await_change());
    }
    let key = GroupKey::pod_group(&ns, &name);
    let mut members: Vec<_> = ctx
        .store
        .group_members(&key)
        .into_iter()
        .filter(|p| !p.is_terminal())
        .collect();
    members.sort_by(|a, b| a.name().cmp(b.name()));
    let min_count = pg
        .spec
        .scheduling_policy
        .gang
        .as_ref()
        .map_or(1, |g| g.min_count.max(1)) as usize;
    if members.len() < min_count {
        // The scheduler says WaitingForQuorum; a request for pods that do not exist could go unused.
        return Ok(Action::await_change());
    }
    let mut owned: Vec<Arc<ProvisioningRequest>> = prov.requests.state_filter(|r| {
        r.namespace().as_deref() == Some(ns.as_str())
            && r.owner_references()
                .iter()
                .any(|o| o.uid == uid && o.controller == Some(true))
    });
    owned.sort_by_key(|r| attempt_of(&r.metadata));
    let Some(current) = owned.last().cloned() else {
        create_attempt(prov, &pg, &members, min_count, 1).await?;
        return Ok(Action::await_change());
    };
    let attempt = attempt_of(&current.metadata).max(1);
    let api: Api<ProvisioningRequest> = Api::namespaced(ctx.client.clone(), &ns);
    for old in &owned[..owned.len() - 1] {
        delete_quietly(&api, &old.name_any()).await?;
    }
    let outcome = Outcome::of(&current);
    let shown = format!("{ns}/{}", current.name_any());
    if let Some(t) = outcome.condition_type() {
        let since = current
            .true_condition(t)
            .map_or_else(Timestamp::now, |c| c.last_transition_time.0);
        let elapsed = Timestamp::now().duration_since(since).unsigned_abs();
        let wait = plan::backoff(attempt).saturating_sub(elapsed);
        if !wait.is_zero() {
            set_condition(ctx, &pg, &Wanted::of(&shown, attempt, &outcome, wait)).await?;
            return Ok(Action::requeue(wait));
        }
        tracing::info!(podgroup = %key, request = %shown, "ProvisioningRequest over ({outcome:?}); making attempt {}", attempt + 1);
        create_attempt(prov, &pg, &members, min_count, attempt + 1).await?;
        delete_quietly(&api, &current.name_any()).await?;
        return Ok(Action::await_change());
    }
    annotate(prov, &members, &current.name_any()).await?;
    set_condition(ctx, &pg, &Wanted::of(&shown, attempt, &outcome, Duration::ZERO)).await?;
    Ok(Action::await_change())
}

/// Whether `pg` has condition `type_` with `status`.
fn condition_is(pg: &PodGroup, type_: &str, status: &str) -> bool {
    pg.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == type_ && c.status == status)
    })
}

/// The controller reference to `pg` (no `blockOwnerDeletion`: deleting the group need not wait for them).
fn owner_of(pg: &PodGroup, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: PodGroup::api_version(&()).into_owned(),
        kind: PodGroup::kind(&()).into_owned(),
        name: pg.name_any(),
        uid: uid.to_owned(),
        controller: Some(true),
        block_owner_deletion: None,
    }
}

/// Creates the PodTemplates and the request of `attempt` for `pg` (an existing one of the same name is taken as
/// made), annotates the members with it, deletes the templates of other attempts, and shows it on the group.
async fn create_attempt(
    prov: &Provisioner,
    pg: &PodGroup,
    members: &[Arc<phalanx_store::PodRecord>],
    min_count: usize,
    attempt: u32,
) -> Result<()> {
    let ctx = &prov.ctx;
    let uid = pg.uid().ok_or(Error::MissingField("metadata.uid"))?;
    let ns = pg.namespace().ok_or(Error::MissingField("metadata.namespace"))?;
    let request = plan::request_name(&pg.name_any(), attempt);
    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let mut pods = Vec::with_capacity(min_count);
    for m in members.iter().take(min_count) {
        pods.push(pods_api.get(m.name()).await?);
    }
    let labels = std::collections::BTreeMap::from([
        (PROVISIONING_FOR.to_string(), uid.clone()),
        (PROVISIONING_ATTEMPT.to_string(), attempt.to_string()),
    ]);
    let meta = |name: String| ObjectMeta {
        name: Some(name),
        namespace: Some(ns.clone()),
        labels: Some(labels.clone()),
        owner_references: Some(vec![owner_of(pg, &uid)]),
        ..ObjectMeta::default()
    };
    let post = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PostParams::default()
    };
    let templates_api: Api<PodTemplate> = Api::namespaced(ctx.client.clone(), &ns);
    let mut pod_sets = Vec::new();
    for (i, (template, count)) in plan::templates(&pods, min_count).into_iter().enumerate() {
        let name = plan::template_name(&request, i);
        let obj = PodTemplate {
            metadata: meta(name.clone()),
            template: Some(template),
        };
        create_quietly(&templates_api, &post, &obj).await?;
        pod_sets.push(types::PodSet {
            pod_template_ref: types::Reference { name },
            count,
        });
    }
    let pr = ProvisioningRequest::new(
        meta(request.clone()),
        types::ProvisioningRequestSpec {
            pod_sets,
            provisioning_class_name: prov.class.clone(),
            parameters: Default::default(),
        },
    );
    let api: Api<ProvisioningRequest> = Api::namespaced(ctx.client.clone(), &ns);
    create_quietly(&api, &post, &pr).await?;
    tracing::info!(podgroup = %format!("{ns}/{}", pg.name_any()), request = %request, attempt, "ProvisioningRequest created");
    annotate(prov, members, &request).await?;
    let others = ListParams::default().labels(&format!(
        "{PROVISIONING_FOR}={uid},{PROVISIONING_ATTEMPT}!={attempt}"
    ));
    for old in templates_api.list(&others).await? {
        match templates_api
            .delete(&old.name_any(), &DeleteParams::background())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    let shown = format!("{ns}/{request}");
    set_condition(
        ctx,
        pg,
        &Wanted::of(&shown, attempt, &Outcome::Pending(None), Duration::ZERO),
    )
    .await
}

/// Creates `obj`; one that already exists (a retried reconcile, a lagging cache) counts as created.
async fn create_quietly<K>(api: &Api<K>, post: &PostParams, obj: &K) -> Result<()>
where
    K: Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.create(post, obj).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Deletes request `name`; one already gone is fine.
async fn delete_quietly(api: &Api<ProvisioningRequest>, name: &str) -> Result<()> {
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Annotates every pending member with `request` and the class (Cluster Autoscaler's pod annotations), once per
/// pod and request.
async fn annotate(
    prov: &Provisioner,
    members: &[Arc<phalanx_store::PodRecord>],
    request: &str,
) -> Result<()> {
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    for m in members {
        if m.node_name().is_some() || m.is_terminal() {
            continue;
        }
        let done = prov
            .annotated
            .lock()
            .map(|a| a.get(m.uid()).is_some_and(|r| r == request))
            .unwrap_or(false);
        if done {
            continue;
        }
        let api: Api<Pod> = Api::namespaced(prov.ctx.client.clone(), m.namespace());
        let patch = json!({ "metadata": { "annotations": {
            CONSUME_PROVISIONING_REQUEST: request,
            PROVISIONING_CLASS_NAME: prov.class,
        }}});
        match api.patch(m.name(), &params, &Patch::Merge(&patch)).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => continue,
            Err(e) => return Err(e.into()),
        }
        if let Ok(mut a) = prov.annotated.lock() {
            a.insert(m.uid().to_owned(), request.to_owned());
        }
    }
    Ok(())
}

/// Applies `CapacityProvisioned` as `w` on `pg` (field manager `phalanx-provisioning`) unless it already says so.
/// While a request is over, only a change of status or reason is written (the message's countdown is not).
async fn set_condition(ctx: &crate::context::Context, pg: &PodGroup, w: &Wanted) -> Result<()> {
    let existing = pg
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == CAPACITY_PROVISIONED));
    let countdown = matches!(w.reason, capacity::FAILED | capacity::BOOKING_EXPIRED);
    if let Some(c) = existing
        && c.status == w.status
        && c.reason == w.reason
        && (countdown || c.message == w.message)
    {
        return Ok(());
    }
    let since = existing.filter(|c| c.status == w.status).map_or_else(
        || k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now()),
        |c| c.last_transition_time.clone(),
    );
    let body = json!({
        "apiVersion": PodGroup::api_version(&()),
        "kind": PodGroup::kind(&()),
        "status": { "conditions": [{
            "type": CAPACITY_PROVISIONED,
            "status": w.status,
            "reason": w.reason,
            "message": w.message,
            "lastTransitionTime": since,
            "observedGeneration": pg.metadata.generation,
        }]},
    });
    let api: Api<PodGroup> = Api::namespaced(ctx.client.clone(), &pg.namespace().unwrap_or_default());
    api.patch_status(
        &pg.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await?;
    ctx.count_status_write(CONTROLLER);
    Ok(())
}
