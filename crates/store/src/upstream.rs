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
    Api, Client, ResourceExt,
    runtime::reflector::{self, Store as Reader},
};
use phalanx_api::v1beta1::PodGroup;
use phalanx_scheduler::GroupApi;
use tokio::sync::watch;

use crate::Shared;
use crate::kind_watch::{Tolerate, watch_converted};

/// The group-version of upstream's PodGroups Phalanx schedules.
pub const UPSTREAM_GROUP_VERSION: &str = "scheduling.k8s.io/v1beta1";

/// Starts the task that discovers [`UPSTREAM_GROUP_VERSION`] and, when served, watches its PodGroups. Returns the
/// cache (empty when not served) and a receiver that turns `Some(served)` once discovery decided. Counts once
/// toward readiness when it decided, after raising the target by one for the watch when served.
pub(crate) fn spawn(
    client: &Client,
    wc: &kube::runtime::watcher::Config,
    shared: &Arc<Shared>,
    ready_tx: &watch::Sender<usize>,
    tasks: &mut Vec<tokio::task::AbortHandle>,
) -> (Reader<PodGroup>, watch::Receiver<Option<bool>>) {
    let (reader, writer) = reflector::store::<PodGroup>();
    let (decided_tx, decided) = watch::channel(None);
    let (client, wc, shared, ready_tx) = (client.clone(), wc.clone(), shared.clone(), ready_tx.clone());
    let cache = reader.clone();
    let task = tokio::spawn(async move {
        let served = crate::discovery::served(
            &client,
            UPSTREAM_GROUP_VERSION,
            &["podgroups"],
            "Phalanx schedules only its own scheduling.phalanx.dev groups, and a pod's spec.schedulingGroup names one \
             of those",
        )
        .await;
        if served {
            // Target first, then discovery's count: readiness can never be reached without the watch.
            shared.ready_target.fetch_add(1, Ordering::SeqCst);
            shared.upstream_groups.store(true, Ordering::SeqCst);
            tracing::info!("{UPSTREAM_GROUP_VERSION} is served: Phalanx also schedules its PodGroups");
        }
        decided_tx.send_replace(Some(served));
        ready_tx.send_modify(|n| *n += 1);
        if !served {
            return;
        }
        watch_converted::<native::PodGroup, PodGroup, _>(
            (cache, writer),
            Api::all(client),
            wc,
            shared,
            ready_tx,
            (
                Box::new(|ev, r, s| crate::reflectors::pod_group_hook(ev, r, s, GroupApi::Upstream)),
                |o, _| from_native(o),
                Tolerate::No,
            ),
        )
        .await;
    });
    tasks.push(task.abort_handle());
    (reader, decided)
}

/// An upstream PodGroup in Phalanx's type, without managed fields. The schemas agree field for field, so this
/// fails only on a server that adds a field of a different shape; then the object keeps its metadata and a gang
/// policy no group can meet (its pods wait, and the error is logged), rather than scheduling it under a policy
/// it did not ask for.
pub fn from_native(mut o: native::PodGroup) -> PodGroup {
    o.metadata.managed_fields = None;
    let name = o.name_any();
    let metadata = o.metadata.clone();
    match serde_json::to_value(&o).and_then(serde_json::from_value::<PodGroup>) {
        Ok(mut g) => {
            g.metadata = metadata;
            g
        }
        Err(e) => {
            tracing::error!(podgroup = %name, error = %e, "cannot read a {UPSTREAM_GROUP_VERSION} PodGroup");
            let mut g = PodGroup::new(&name, Default::default());
            g.metadata = metadata;
            g.spec.scheduling_policy.gang =
                Some(phalanx_api::v1beta1::GangSchedulingPolicy { min_count: i32::MAX });
            g
        }
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
        let g = from_native(o);
        assert_eq!(g.name_any(), "g");
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
