//! PreBind of the volume plugins (upstream VolumeBinding `PreBind` → `BindPodVolumes`, `volumebinding/binder.go`),
//! for a whole decision at once: the pods of a gang are bound only after every claim of every member is bound.
//!
//! The writes are upstream's `bindAPIUpdate`: a chosen volume gets the claim as its `claimRef` (with
//! `pv.kubernetes.io/bound-by-controller: "yes"`, under the volume's resourceVersion as the precondition), a claim
//! to provision gets `volume.kubernetes.io/selected-node`. Then the task waits, up to the configured timeout
//! (upstream `bindTimeoutSeconds`, 600 s), until kube-controller-manager's PV controller has fully bound each claim
//! (`spec.volumeName` and `pv.kubernetes.io/bind-completed`; upstream `checkBindings` and `isPVCFullyBound`). Any failure binds no pod: the loop forgets the assumed pods, requeues them with
//! backoff, and names the claim in the pods' and the group's conditions. When the volumes fail after the device
//! claims were written, those are unreserved first ([`super::devices::unreserve`]).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use phalanx_api::conditions::reasons;
use phalanx_scheduler::convert::{ANN_BIND_COMPLETED, ANN_SELECTED_NODE};
use phalanx_scheduler::volumes::{ClaimKey, VolumeAction};
use phalanx_store::Store;

use super::ApiDispatcher;
use super::jobs::{PreBindFailure, PreBindJob, PreBindResult};
use crate::names;

/// Upstream `pvutil.AnnBoundByController`.
const ANN_BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// How often the wait reads the store.
const POLL: Duration = Duration::from_millis(200);

impl ApiDispatcher {
    /// Starts PreBind for a decision; its result comes back as [`super::ApiResult::PreBind`]. The claims it writes
    /// are in flight until [`ApiDispatcher::finish_prebind`] (the caller tells the cache, whose catalogs apply
    /// them).
    pub(crate) fn start_prebind(&mut self, job: PreBindJob) {
        for a in &job.actions {
            self.volumes_in_flight.insert(a.claim().clone(), a.clone());
        }
        for j in &job.devices {
            self.devices_in_flight.insert(j.claim.clone(), j.clone());
        }
        // Say what the placed pods wait for: without it the group would keep its last condition (often
        // WaitingForQuorum) for up to the whole timeout. Device writes take one request each: no wait to tell.
        let message = format!(
            "placed; waiting up to {}s for {} to be bound before the pods are bound",
            self.opts.volume_bind_timeout.as_secs(),
            claim_list(job.actions.iter().map(VolumeAction::claim))
        );
        if !job.actions.is_empty() {
            for c in &job.conditions {
                self.spawn_group_condition(
                    c.group.clone(),
                    names::condition_type(c.type_),
                    false,
                    reasons::WAITING_FOR_VOLUME_BINDING,
                    message.clone(),
                );
            }
        }
        let (client, store, writer, tx, permits) = (
            self.client.clone(),
            self.store.clone(),
            self.writer.clone(),
            self.channels.prebind_tx.clone(),
            self.prebind_permits.clone(),
        );
        let timeout = self.opts.volume_bind_timeout;
        self.tasks.spawn(async move {
            let result = if !writer.is_leader() {
                Err("lost leadership before writing the claims".to_string())
            } else if let Err(e) = super::devices::bind_devices(&client, &store, &job.devices, &permits).await
            {
                Err(format!("running PreBind plugin \"DynamicResources\": {e}"))
            } else if job.actions.is_empty() {
                Ok(())
            } else {
                // In the task, before any volume write: the condition is on the pods before they can be bound, so
                // a late write cannot contradict the binding's PodScheduled=True.
                for b in &job.binds {
                    match writer
                        .pod_unschedulable(&b.pod, reasons::WAITING_FOR_VOLUME_BINDING, &message, None)
                        .await
                    {
                        Ok(true) => {
                            writer
                                .event_failed(&b.pod, reasons::WAITING_FOR_VOLUME_BINDING, &message)
                                .await
                        }
                        Ok(false) => {}
                        Err(e) => tracing::debug!(pod = %b.key, error = %e, "pod condition not written"),
                    }
                }
                let r = bind_volumes(&client, &store, &job.actions, timeout)
                    .await
                    .map_err(|m| format!("running PreBind plugin \"VolumeBinding\": {m}"));
                // Unreserve: the device claims are already written; free them before the pods are requeued.
                if r.is_err() && writer.is_leader() {
                    super::devices::unreserve_jobs(&client, &job.devices).await;
                }
                r
            };
            let _ = tx.send(PreBindResult { job, result });
        });
    }

    /// A PreBind ended: its claims are no longer in flight (the caller tells the cache). On success its binds
    /// queue and its group conditions are written; on failure nothing is bound and the failure is returned for the
    /// loop, which forgets and requeues the pods.
    pub(crate) fn finish_prebind(&mut self, r: PreBindResult) -> Option<PreBindFailure> {
        let PreBindResult { job, result } = r;
        for a in &job.actions {
            self.volumes_in_flight.remove(a.claim());
        }
        super::devices::forget(&mut self.devices_in_flight, &job.devices);
        let message = match result {
            Ok(()) => {
                self.pending_binds.extend(job.binds);
                for c in job.conditions {
                    let reason = names::condition_reason(c.reason, c.group.kind);
                    self.spawn_group_condition(
                        c.group,
                        names::condition_type(c.type_),
                        c.status,
                        reason,
                        c.message,
                    );
                }
                self.start_binds();
                return None;
            }
            Err(m) => m,
        };
        tracing::info!(
            message,
            pods = job.binds.len(),
            "PreBind failed; no pod of the decision is bound"
        );
        Some(PreBindFailure {
            binds: job.binds,
            conditions: job.conditions,
            message,
        })
    }
}

/// `claim ns/a`, `claims ns/a, ns/b`, or `claims ns/a, ns/b, ns/c and 4 more`.
fn claim_list<'a>(claims: impl Iterator<Item = &'a ClaimKey>) -> String {
    const SHOWN: usize = 3;
    let all: Vec<String> = claims.map(ToString::to_string).collect();
    match all.len() {
        1 => format!("claim {}", all[0]),
        n if n <= SHOWN => format!("claims {}", all.join(", ")),
        n => format!("claims {} and {} more", all[..SHOWN].join(", "), n - SHOWN),
    }
}

/// Writes the actions, then waits until every claim is bound; `Err` names the first claim that failed.
async fn bind_volumes(
    client: &kube::Client,
    store: &Store,
    actions: &[VolumeAction],
    timeout: Duration,
) -> Result<(), String> {
    let pp = PatchParams::default();
    for a in actions {
        match a {
            VolumeAction::Bind {
                claim,
                claim_uid,
                volume,
                resource_version,
            } => {
                let api: Api<PersistentVolume> = Api::all(client.clone());
                let patch = serde_json::json!({
                    "metadata": {
                        "resourceVersion": &**resource_version,
                        "annotations": { ANN_BOUND_BY_CONTROLLER: "yes" },
                    },
                    "spec": { "claimRef": {
                        "kind": "PersistentVolumeClaim",
                        "apiVersion": "v1",
                        "namespace": &*claim.namespace,
                        "name": &*claim.name,
                        "uid": &**claim_uid,
                    }},
                });
                api.patch(volume, &pp, &Patch::Merge(&patch))
                    .await
                    .map_err(|e| format!("binding volume {volume:?} to claim {claim}: {e}"))?;
            }
            VolumeAction::Provision { claim, node } => {
                let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &claim.namespace);
                let patch = serde_json::json!({
                    "metadata": { "annotations": { ANN_SELECTED_NODE: &**node } },
                });
                api.patch(&claim.name, &pp, &Patch::Merge(&patch))
                    .await
                    .map_err(|e| format!("selecting node {node:?} for claim {claim}: {e}"))?;
            }
        }
    }
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let mut waiting: BTreeMap<&ClaimKey, &'static str> = BTreeMap::new();
        for a in actions {
            let claim = a.claim();
            let obj = store
                .volumes()
                .claims
                .get(&ObjectRef::new(&claim.name).within(&claim.namespace));
            let Some(c) = obj else {
                return Err(format!(
                    "claim {claim} was deleted while its volume was being bound"
                ));
            };
            let spec_volume = c.spec.as_ref().and_then(|s| s.volume_name.as_deref());
            // Upstream `isPVCFullyBound`: the volume name and the PV controller's bind-completed annotation.
            let bound = c
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(ANN_BIND_COMPLETED));
            match a {
                VolumeAction::Bind { volume, .. } => {
                    if bound && spec_volume == Some(&**volume) {
                        continue;
                    }
                    if let Some(other) = spec_volume.filter(|v| *v != &**volume) {
                        return Err(format!(
                            "claim {claim} was bound to volume {other:?}, not {volume:?}"
                        ));
                    }
                    waiting.insert(claim, "the PV controller");
                }
                VolumeAction::Provision { .. } => {
                    if bound && spec_volume.is_some() {
                        continue;
                    }
                    waiting.insert(claim, "the provisioner");
                }
            }
        }
        let Some((_, what)) = waiting.iter().next() else {
            return Ok(());
        };
        if tokio::time::Instant::now() >= deadline {
            let one = waiting.len() == 1;
            return Err(format!(
                "{} {} not bound within {}s (waiting for {what})",
                claim_list(waiting.keys().copied()),
                if one { "was" } else { "were" },
                timeout.as_secs()
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}
