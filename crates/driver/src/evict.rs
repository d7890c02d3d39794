//! Acting on a preemption decision: mark and delete the victims. (Nominating the preemptors is a status write, done
//! by [`crate::StatusWriter::nominate`] before any victim is touched; see `crate::dispatcher::preempt`.)
//!
//! Follows upstream's preemption actuation (`pkg/scheduler/framework/preemption/preemption.go`
//! `prepareCandidate`, and the pod group variant `actuatePodGroupPreemption`): each victim first gets the pod
//! condition `DisruptionTarget=True` with reason `PreemptionByScheduler` (so its controller and `kubectl describe` can
//! tell why it goes), then it is deleted with its own grace period (graceful termination is honoured, and the delete
//! carries the victim's UID as a precondition so a pod recreated under the same name is never touched), then a
//! `Preempted` event names the preemptor by UID, as upstream's "Preempted by pod <uid> on node <node>" does, so no name
//! from another namespace reaches the victim's namespace.
//!
//! Every call is bounded by a timeout (kube's default retry is off for the scheduler's client, see
//! `scheduler_client`), and every write checks leadership at the moment it is sent.

use std::time::Duration;

use k8s_openapi::{
    api::core::v1::{Pod, PodCondition},
    apimachinery::pkg::apis::meta::v1::Time,
    jiff::Timestamp,
};
use kube::{
    Api, Client,
    api::{DeleteParams, Patch, PatchParams, Preconditions},
};
use phalanx_api::conditions::{DISRUPTION_TARGET, reasons};
use serde_json::json;

use crate::StatusWriter;
use phalanx_store::PodRecord;

/// What happened to one victim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EvictOutcome {
    /// Marked and deleted (it may still be terminating).
    Deleted,
    /// The pod was already gone, or was recreated under the same name (UID precondition failed).
    Gone,
    /// This replica is not the leader: nothing was written.
    NotLeader,
    /// A call failed or timed out; the message is for logs and events.
    Failed(String),
}

/// Evicts preemption victims.
#[derive(Clone)]
pub struct Evictor {
    client: Client,
    writer: StatusWriter,
    timeout: Duration,
}

/// The `DisruptionTarget` message upstream writes on a victim: `<schedulerName>: preempting to accommodate a higher
/// priority pod` (`pkg/scheduler/framework/preemption/preemption.go`).
pub fn disruption_message(scheduler_name: &str) -> String {
    format!("{scheduler_name}: preempting to accommodate a higher priority pod")
}

impl Evictor {
    /// An evictor over `client`; `writer` publishes the events and holds the leader flag; `timeout` bounds each call.
    pub fn new(client: Client, writer: StatusWriter, timeout: Duration) -> Self {
        Self {
            client,
            writer,
            timeout,
        }
    }

    /// Marks `victim` `DisruptionTarget=True/PreemptionByScheduler`, deletes it (UID precondition, the pod's own
    /// grace period) and emits `Preempted` naming `preemptor` (`pod <uid>` or `pod group <uid>`) and `node`.
    pub async fn preempt(
        &self,
        victim: &PodRecord,
        scheduler_name: &str,
        preemptor: &str,
        node: &str,
    ) -> EvictOutcome {
        let (ns, name) = (victim.namespace(), victim.name());
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        if !self.writer.is_leader() {
            return EvictOutcome::NotLeader;
        }
        let cond = PodCondition {
            type_: DISRUPTION_TARGET.into(),
            status: "True".into(),
            reason: Some(reasons::PREEMPTION_BY_SCHEDULER.into()),
            message: Some(disruption_message(scheduler_name)),
            last_transition_time: Some(Time(Timestamp::now())),
            ..Default::default()
        };
        let (pp, patch) = (
            PatchParams::default(),
            Patch::Strategic(json!({ "status": { "conditions": [cond] } })),
        );
        let marked = api.patch_status(name, &pp, &patch);
        match tokio::time::timeout(self.timeout, marked).await {
            Err(_) => return EvictOutcome::Failed(format!("marking {ns}/{name} timed out")),
            Ok(Err(kube::Error::Api(s))) if s.is_not_found() => return EvictOutcome::Gone,
            Ok(Err(e)) => return EvictOutcome::Failed(format!("marking {ns}/{name}: {e}")),
            Ok(Ok(_)) => {}
        }
        if !self.writer.is_leader() {
            return EvictOutcome::NotLeader;
        }
        let dp = DeleteParams {
            preconditions: Some(victim.uid())
                .filter(|u| !u.is_empty())
                .map(|uid| Preconditions {
                    uid: Some(uid.to_owned()),
                    resource_version: None,
                }),
            ..DeleteParams::default()
        };
        let outcome = match tokio::time::timeout(self.timeout, api.delete(name, &dp)).await {
            Err(_) => return EvictOutcome::Failed(format!("deleting {ns}/{name} timed out")),
            Ok(Err(kube::Error::Api(s))) if s.is_not_found() || s.is_conflict() => EvictOutcome::Gone,
            Ok(Err(e)) => return EvictOutcome::Failed(format!("deleting {ns}/{name}: {e}")),
            Ok(Ok(_)) => EvictOutcome::Deleted,
        };
        self.writer
            .event_preempted(victim, format!("Preempted by {preemptor} on node {node}"))
            .await;
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disruption_message_matches_upstream() {
        assert_eq!(
            disruption_message("phalanx-scheduler"),
            "phalanx-scheduler: preempting to accommodate a higher priority pod"
        );
    }
}
