//! DynamicResources' writes: its PreBind and its Unreserve. (The catalog its Filter reads is the cache's,
//! `crate::cache::devices`, with the claims written here applied while they are in flight.)
//!
//! PreBind is upstream's `bindClaim` (`pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go`):
//! a claim this cycle allocated first gets the `resource.kubernetes.io/delete-protection` finalizer, then one
//! status write sets `status.allocation` and adds the pods to `status.reservedFor`, both under the claim's
//! resourceVersion, so a claim that changed meanwhile fails the write instead of being overwritten. Every claim
//! of every pod of the decision is written before any pod is bound; a failed write reverts the claims already
//! written and binds nothing.
//!
//! Unreserve ([`unreserve`], upstream DynamicResources `Unreserve`): when a pod is not bound after PreBind wrote
//! its claims (its bind fails, or the volumes of its decision are not bound in time), the pod leaves each claim's
//! `reservedFor`, and a claim that no one else reserves is deallocated (`status.allocation` cleared, the
//! finalizer dropped), before the pod goes back to the queue. Without it kube-controller-manager never frees the
//! claim (the pod still exists and is not finished), and a gang whose node is gone stays pinned to it.
//!
//! Who clears the rest: kube-controller-manager's resourceclaim controller removes a pod from `reservedFor` once
//! the pod is gone or finished, clears the allocation of a claim that nobody reserves any more (and drops the
//! finalizer), and deletes the claims it generated from templates when their pod is deleted.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use phalanx_scheduler::dra::{ClaimWrite, DeviceAllocation};
use phalanx_scheduler::volumes::ClaimKey;
use phalanx_store::Store;
use serde_json::{Value, json};

/// Upstream `resourceapi.Finalizer`: keeps an allocated claim until it is deallocated.
const FINALIZER: &str = "resource.kubernetes.io/delete-protection";
/// How long PreBind waits for the store to show the claims it wrote (the pods are bound after it either way).
const SEEN_WAIT: Duration = Duration::from_secs(10);
/// How often the wait reads the store.
const POLL: Duration = Duration::from_millis(100);

/// What PreBind writes to one claim for a whole decision: the allocation when the cycle made it, and every pod
/// of the decision that uses it.
#[derive(Debug, Clone)]
pub(crate) struct ClaimJob {
    pub(crate) claim: ClaimKey,
    pub(crate) resource_version: Arc<str>,
    pub(crate) allocation: Option<DeviceAllocation>,
    /// `(pod name, pod uid)`.
    pub(crate) pods: Vec<(Arc<str>, Arc<str>)>,
}

impl ClaimJob {
    /// Adds one binding's write for `pod` (name, uid): the first write carries the allocation, later ones add
    /// their pod.
    pub(crate) fn merge(jobs: &mut Vec<ClaimJob>, w: &ClaimWrite, pod: (Arc<str>, Arc<str>)) {
        match jobs.iter_mut().find(|j| j.claim == w.claim) {
            Some(j) => {
                if j.allocation.is_none() {
                    j.allocation = w.allocation.clone();
                }
                if !j.pods.contains(&pod) {
                    j.pods.push(pod);
                }
            }
            None => jobs.push(ClaimJob {
                claim: w.claim.clone(),
                resource_version: w.resource_version.clone(),
                allocation: w.allocation.clone(),
                pods: vec![pod],
            }),
        }
    }
}

fn allocation_json(a: &DeviceAllocation) -> Value {
    let results: Vec<Value> = a
        .devices
        .iter()
        .map(|(request, d, admin)| {
            let mut r = json!({
                "request": &**request,
                "driver": &*d.driver,
                "pool": &*d.pool,
                "device": &*d.device,
            });
            if *admin {
                r["adminAccess"] = json!(true);
            }
            r
        })
        .collect();
    let mut out = json!({ "devices": { "results": results } });
    if let Some(n) = &a.node {
        out["nodeSelector"] = json!({ "nodeSelectorTerms": [{
            "matchFields": [{ "key": "metadata.name", "operator": "In", "values": [&**n] }]
        }]});
    }
    out
}

/// The server's own message for an API error (`Display` of `kube::Error::Api` carries the whole `Status`, a
/// kilobyte or two, too long for a condition message), else the error's text.
fn reason(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({})", s.message, s.code),
        other => other.to_string(),
    }
}

fn consumer_json(name: &str, uid: &str) -> Value {
    json!({ "resource": "pods", "name": name, "uid": uid })
}

/// What a written claim was before PreBind, to undo it.
struct Written {
    claim: ClaimKey,
    allocated: bool,
    finalizer_added: bool,
    pods: Vec<Arc<str>>,
}

/// Writes every claim of the decision, side by side, then waits (briefly) until the store shows them; `Err`
/// names the first claim that failed, after the claims written were reverted. The writes wait for a permit of
/// `permits` (FIFO), held until they are done: a loop that decides hundreds of device gangs in its first second
/// would otherwise start all their claim writes at once, and the first gang's, sharing the API server with all
/// the others, would end last (the first bind came 3-5 s after the start on 500 nodes with 2,000 claims).
pub(crate) async fn bind_devices(
    client: &kube::Client,
    store: &Store,
    jobs: &[ClaimJob],
    permits: &tokio::sync::Semaphore,
) -> Result<(), String> {
    let Ok(permit) = permits.acquire().await else {
        return Err("the scheduler is stopping".into());
    };
    // The claims of one decision are written side by side (each is its own object), so that the permits bound
    // the decisions in flight, not the API server's concurrency.
    let results = futures::future::join_all(jobs.iter().map(|j| write_claim(client, store, j))).await;
    let mut written = Vec::new();
    let mut failed = None;
    for r in results {
        match r {
            Ok(w) => written.push(w),
            Err(e) => {
                failed.get_or_insert(e);
            }
        }
    }
    if let Some(e) = failed {
        for w in written.iter().rev() {
            if let Err(u) = undo(client, w).await {
                tracing::warn!(claim = %w.claim, error = %u, "could not revert a claim PreBind wrote");
            }
        }
        return Err(e);
    }
    drop(permit);
    let deadline = tokio::time::Instant::now() + SEEN_WAIT;
    while tokio::time::Instant::now() < deadline {
        let seen = jobs.iter().all(|j| {
            claim(store, &j.claim).is_some_and(|c| {
                let st = c.status.as_ref();
                let reserved = st.and_then(|s| s.reserved_for.as_ref());
                st.is_some_and(|s| s.allocation.is_some())
                    && j.pods
                        .iter()
                        .all(|(_, uid)| reserved.into_iter().flatten().any(|r| *r.uid == **uid))
            })
        });
        if seen {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    Ok(())
}

fn claim(store: &Store, key: &ClaimKey) -> Option<Arc<ResourceClaim>> {
    store
        .dra()?
        .claims
        .get(&ObjectRef::new(&key.name).within(&key.namespace))
}

async fn write_claim(client: &kube::Client, store: &Store, j: &ClaimJob) -> Result<Written, String> {
    let key = &j.claim;
    let api: Api<ResourceClaim> = Api::namespaced(client.clone(), &key.namespace);
    let Some(mut current) = claim(store, key) else {
        return Err(format!("claim {key} was deleted before it could be allocated"));
    };
    let rv = current.metadata.resource_version.clone().unwrap_or_default();
    if *rv != *j.resource_version {
        return Err(format!(
            "claim {key} changed since the cycle read it (resourceVersion {} → {rv})",
            j.resource_version
        ));
    }
    let pp = PatchParams::default();
    let mut finalizer_added = false;
    if j.allocation.is_some() {
        let mut finalizers = current.metadata.finalizers.clone().unwrap_or_default();
        if !finalizers.iter().any(|f| f == FINALIZER) {
            finalizers.push(FINALIZER.to_string());
            let patch = json!({ "metadata": { "resourceVersion": rv, "finalizers": finalizers } });
            current = Arc::new(
                api.patch(&key.name, &pp, &Patch::Merge(&patch))
                    .await
                    .map_err(|e| format!("adding the finalizer to claim {key}: {}", reason(&e)))?,
            );
            finalizer_added = true;
        }
    }
    let rv = current.metadata.resource_version.clone().unwrap_or_default();
    let status = current.status.as_ref();
    let mut reserved: Vec<Value> = status
        .and_then(|s| s.reserved_for.as_ref())
        .into_iter()
        .flatten()
        .map(|r| serde_json::to_value(r).unwrap_or(Value::Null))
        .collect();
    let mut pods = Vec::new();
    for (name, uid) in &j.pods {
        let has = status
            .and_then(|s| s.reserved_for.as_ref())
            .into_iter()
            .flatten()
            .any(|r| *r.uid == **uid);
        if !has {
            reserved.push(consumer_json(name, uid));
            pods.push(uid.clone());
        }
    }
    let mut st = json!({ "reservedFor": reserved });
    let allocated = j.allocation.is_some() && status.and_then(|s| s.allocation.as_ref()).is_none();
    if let (true, Some(a)) = (allocated, &j.allocation) {
        st["allocation"] = allocation_json(a);
    }
    let patch = json!({ "metadata": { "resourceVersion": rv }, "status": st });
    if let Err(e) = api.patch_status(&key.name, &pp, &Patch::Merge(&patch)).await {
        // Nothing of this claim is written but the finalizer: take it back too.
        if finalizer_added && let Err(u) = remove_finalizer(&api, (*current).clone()).await {
            tracing::warn!(claim = %key, error = %u, "could not remove the finalizer PreBind added");
        }
        return Err(format!("writing the allocation of claim {key}: {}", reason(&e)));
    }
    Ok(Written {
        claim: key.clone(),
        allocated,
        finalizer_added,
        pods,
    })
}

/// Takes back what [`write_claim`] wrote: the pods' reservations, the allocation and the finalizer it added.
async fn undo(client: &kube::Client, w: &Written) -> Result<(), kube::Error> {
    let api: Api<ResourceClaim> = Api::namespaced(client.clone(), &w.claim.namespace);
    let current = api.get_status(&w.claim.name).await?;
    let status = current.status.as_ref();
    let kept: Vec<Value> = status
        .and_then(|s| s.reserved_for.as_ref())
        .into_iter()
        .flatten()
        .filter(|r| !w.pods.iter().any(|u| **u == *r.uid))
        .map(|r| serde_json::to_value(r).unwrap_or(Value::Null))
        .collect();
    let mut st =
        json!({ "reservedFor": if kept.is_empty() { Value::Null } else { Value::Array(kept.clone()) } });
    if w.allocated && kept.is_empty() {
        st["allocation"] = Value::Null;
    }
    let pp = PatchParams::default();
    let patch = json!({ "metadata": { "resourceVersion": current.metadata.resource_version }, "status": st });
    let current = api
        .patch_status(&w.claim.name, &pp, &Patch::Merge(&patch))
        .await?;
    if w.finalizer_added && w.allocated && kept.is_empty() {
        remove_finalizer(&api, current).await?;
    }
    Ok(())
}

/// Removes the finalizer PreBind added to a claim it could not allocate.
async fn remove_finalizer(api: &Api<ResourceClaim>, current: ResourceClaim) -> Result<(), kube::Error> {
    let name = current.metadata.name.clone().unwrap_or_default();
    let finalizers: Vec<String> = current
        .metadata
        .finalizers
        .unwrap_or_default()
        .into_iter()
        .filter(|f| f != FINALIZER)
        .collect();
    let patch = json!({ "metadata": { "resourceVersion": current.metadata.resource_version, "finalizers": finalizers } });
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// How many times [`unreserve`] retries a claim whose write conflicted (someone else wrote it meanwhile).
const UNRESERVE_TRIES: usize = 5;

/// DynamicResources `Unreserve` (upstream `pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go`)
/// for one claim: takes the pods with these uids out of `status.reservedFor` and, when that leaves no one,
/// deallocates the claim (clears `status.allocation` and `status.devices`, then drops the
/// `resource.kubernetes.io/delete-protection` finalizer, as kube-controller-manager's resourceclaim controller does
/// when a claim's last consumer goes). Each write carries the resourceVersion it read; a conflict is retried up to
/// 5 times. A claim that is gone, or reserves none of the pods, is left alone. Errors are logged, not returned: the
/// pod is requeued either way, and a claim left reserved only pins the pod's next attempt to its node.
pub(crate) async fn unreserve(client: &kube::Client, claim: &ClaimKey, pods: &[Arc<str>]) {
    let api: Api<ResourceClaim> = Api::namespaced(client.clone(), &claim.namespace);
    for attempt in 1..=UNRESERVE_TRIES {
        match release(&api, &claim.name, pods).await {
            Ok(()) => return,
            Err(kube::Error::Api(s)) if s.code == 404 => return,
            Err(kube::Error::Api(s)) if s.code == 409 && attempt < UNRESERVE_TRIES => {}
            Err(e) => {
                tracing::warn!(%claim, error = %reason(&e), "could not unreserve a claim");
                return;
            }
        }
    }
}

/// [`unreserve`] for every claim of a PreBind job and the pods it reserved them for.
pub(crate) async fn unreserve_jobs(client: &kube::Client, jobs: &[ClaimJob]) {
    for j in jobs {
        let uids: Vec<Arc<str>> = j.pods.iter().map(|(_, uid)| uid.clone()).collect();
        unreserve(client, &j.claim, &uids).await;
    }
}

/// One attempt of [`unreserve`].
async fn release(api: &Api<ResourceClaim>, name: &str, pods: &[Arc<str>]) -> Result<(), kube::Error> {
    let current = api.get_status(name).await?;
    let status = current.status.as_ref();
    let reserved: Vec<_> = status
        .and_then(|s| s.reserved_for.as_ref())
        .into_iter()
        .flatten()
        .collect();
    let kept: Vec<Value> = reserved
        .iter()
        .filter(|r| !pods.iter().any(|u| **u == *r.uid))
        .map(|r| serde_json::to_value(r).unwrap_or(Value::Null))
        .collect();
    if kept.len() == reserved.len() {
        return Ok(());
    }
    let deallocate = kept.is_empty() && status.is_some_and(|s| s.allocation.is_some());
    let mut st = json!({ "reservedFor": if kept.is_empty() { Value::Null } else { Value::Array(kept) } });
    if deallocate {
        st["allocation"] = Value::Null;
        st["devices"] = Value::Null;
    }
    let patch = json!({ "metadata": { "resourceVersion": current.metadata.resource_version }, "status": st });
    let current = api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let has_finalizer = current
        .metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == FINALIZER));
    if deallocate && has_finalizer {
        remove_finalizer(api, current).await?;
    }
    Ok(())
}

/// The in-flight table after a PreBind ends.
pub(crate) fn forget(in_flight: &mut HashMap<ClaimKey, ClaimJob>, jobs: &[ClaimJob]) {
    for j in jobs {
        in_flight.remove(&j.claim);
    }
}
