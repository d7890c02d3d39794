//! Pod and group conditions and events: `PodScheduled=False` with the reason of the last attempt or gate,
//! `*InitiallyScheduled` on groups, and their events (upstream `FailureHandler`, `updatePodGroupCondition`).
//!
//! Writes are serialised per object ([`crate::writes::Serializer`]): the latest wanted state wins, and a True
//! group condition is never replaced by False (upstream: no regression from True).

use std::sync::Arc;

use phalanx_api::conditions::reasons;
use phalanx_api::native::{NativeCompositePodGroup, V1alpha3, V1beta1};
use phalanx_scheduler::{EntityKey, Gate, GateReason, GroupKey, GroupKind, GroupPolicy, PodKey};
use phalanx_store::PodRecord;

use super::ApiDispatcher;
use super::jobs::WriteKey;
use crate::{convert, members, names, status::WantedCondition};

/// Tries of one group condition write that meets a conflict (the object changed after the store's copy was read);
/// with 50 ms more wait each time, about 1.5 s in all, ample for the watch to deliver the newer object.
const GROUP_WRITE_ATTEMPTS: u32 = 8;

/// Tries of one pod condition write that meets a conflict; each try after a conflict reads the pod from the API
/// server first, so a second conflict needs another change in between.
const POD_WRITE_CONFLICTS: u32 = 4;

/// Tries of a pod or group condition write while the API server does not answer (see
/// [`phalanx_store::retry::is_unavailable`]): waits of 0.25, 0.5, 1, 2 and then 4 s, about 35 s in all, longer
/// than an API server restart.
const UNAVAILABLE_TRIES: u32 = 12;

/// The wait after the `failures`-th unanswered try of a condition write.
fn unavailable_backoff(failures: u32) -> std::time::Duration {
    use std::time::Duration;
    phalanx_store::retry::backoff(Duration::from_millis(250), failures, Duration::from_secs(4))
}

impl ApiDispatcher {
    /// Writes `PodGroupInitiallyScheduled=True` for standalone PodGroups of ours whose bound members already
    /// reach the quorum (`minCount`, 1 for basic) but whose condition is not True.
    ///
    /// Why: binds and the condition write are separate API calls. A scheduler killed between them (or a write
    /// lost while leadership changed hands) leaves a placed group whose pods are all bound, so no cycle ever
    /// runs for it again and nothing else would set the condition. Runs at every resync and when this replica
    /// becomes leader. Groups under a CompositePodGroup are left to their tree's cycle.
    pub(crate) fn catch_up_conditions(&mut self) {
        use phalanx_api::conditions::{POD_GROUP_INITIALLY_SCHEDULED, is_condition_true};
        if self.opts.initially_scheduled_by_controllers {
            // The PodGroup controller sets it from the bound members (see `SchedulerOptions`).
            self.catch_up_delegated();
            self.catch_up_trees();
            return;
        }
        for (key, pg) in self.store.all_pod_groups() {
            if pg.spec.parent_composite_pod_group_name.is_some()
                || is_condition_true(convert::pod_group_conditions(&pg), POD_GROUP_INITIALLY_SCHEDULED)
            {
                continue;
            }
            let members = self.store.group_members(&key);
            if !members.iter().any(|p| self.ours(p)) {
                continue;
            }
            let bound = members
                .iter()
                .filter(|p| p.node_name().is_some() && !p.is_terminal())
                .count();
            let quorum = match convert::group_info(&pg, &self.store.priority_classes().state()).policy {
                GroupPolicy::Gang { min_count } => min_count as usize,
                GroupPolicy::Basic => 1,
            };
            if bound >= quorum.max(1) {
                self.spawn_group_condition(
                    key,
                    POD_GROUP_INITIALLY_SCHEDULED,
                    true,
                    reasons::SCHEDULED,
                    String::new(),
                );
            }
        }
        self.catch_up_trees();
    }

    /// Writes the `PodGroupInitiallyScheduled=True` this driver decided and left to the PodGroup controller
    /// (`SchedulerOptions::initially_scheduled_by_controllers`) where the object still does not show it one catch-up
    /// interval after the decision. The controller sets it from the members that were bound; a gang that lost a
    /// member to a deletion in the second between its binds and the controller's write no longer shows the quorum,
    /// and without the condition its `PodGroupSatisfied` and `recoveryPolicy` never arm. One write more, only then.
    fn catch_up_delegated(&mut self) {
        use phalanx_api::conditions::{POD_GROUP_INITIALLY_SCHEDULED, is_condition_true};
        let grace = self.opts.condition_catch_up;
        let due: Vec<GroupKey> = self
            .group_wanted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .filter(|(g, m)| {
                g.kind == GroupKind::PodGroup
                    && m.get(POD_GROUP_INITIALLY_SCHEDULED)
                        .is_some_and(|w| w.status && w.at.elapsed() >= grace)
            })
            .map(|(g, _)| g.clone())
            .collect();
        for g in due {
            let shown = self.store.pod_group_at(&g).is_none_or(|pg| {
                is_condition_true(convert::pod_group_conditions(&pg), POD_GROUP_INITIALLY_SCHEDULED)
            });
            if !shown {
                self.spawn_group_write(g);
            }
        }
    }

    /// The same catch-up for CompositePodGroup trees: a root whose tree is placed by its bound pods (every level
    /// meets `minGroupCount` with children that are placed, a leaf meets `minCount` with bound members) gets True,
    /// and so does every group of it that is placed, leaves and inner groups alike (a root's cycle would have
    /// written the same). Walks at most [`phalanx_scheduler::hierarchy::MAX_TREE_DEPTH`] levels.
    fn catch_up_trees(&mut self) {
        use phalanx_api::conditions::{
            COMPOSITE_POD_GROUP_INITIALLY_SCHEDULED, POD_GROUP_INITIALLY_SCHEDULED,
        };
        let classes = self.store.priority_classes().state();
        for (key, root) in self.store.all_composite_pod_groups() {
            if root.spec.parent_composite_pod_group_name.is_some() {
                continue;
            }
            let root_done = phalanx_api::conditions::is_condition_true(
                convert::composite_conditions(&root),
                COMPOSITE_POD_GROUP_INITIALLY_SCHEDULED,
            );
            let mut placed = Vec::new();
            let mut ours = false;
            if !self.tree_placed(&key, 1, &classes, &mut placed, &mut ours) || !ours || root_done {
                continue;
            }
            for g in placed {
                let type_ = match g.kind {
                    GroupKind::PodGroup => POD_GROUP_INITIALLY_SCHEDULED,
                    GroupKind::CompositePodGroup => COMPOSITE_POD_GROUP_INITIALLY_SCHEDULED,
                };
                self.spawn_group_condition(g, type_, true, reasons::SCHEDULED, String::new());
            }
        }
    }

    /// Whether the group `key` is placed by its bound pods; pushes every placed group of its subtree to `placed`
    /// and sets `ours` when a member is this scheduler's.
    fn tree_placed(
        &self,
        key: &GroupKey,
        depth: usize,
        classes: &[Arc<k8s_openapi::api::scheduling::v1::PriorityClass>],
        placed: &mut Vec<GroupKey>,
        ours: &mut bool,
    ) -> bool {
        if depth > phalanx_scheduler::hierarchy::MAX_TREE_DEPTH {
            return false;
        }
        let ok = match key.kind {
            GroupKind::PodGroup => {
                let Some(pg) = self.store.pod_group_at(key) else {
                    return false;
                };
                let members = self.store.group_members(key);
                *ours |= members.iter().any(|p| self.ours(p));
                let bound = members
                    .iter()
                    .filter(|p| p.node_name().is_some() && !p.is_terminal())
                    .count();
                bound >= convert::group_info(&pg, classes).policy.min_count().max(1) as usize
            }
            GroupKind::CompositePodGroup => {
                let Some(cpg) = self.store.composite_pod_group_at(key) else {
                    return false;
                };
                let children = self.store.hierarchy().children(key);
                let ready = children
                    .iter()
                    .filter(|c| self.tree_placed(c, depth + 1, classes, placed, ours))
                    .count();
                ready >= convert::composite_info(&cpg, classes).policy.min_group_count() as usize
            }
        };
        if ok {
            placed.push(key.clone());
        }
        ok
    }

    /// Queues `PodScheduled=False` for a pod, checked when it runs: skipped if the pod is gone, recreated, bound
    /// or assumed, or already says exactly this. `always_event` emits `FailedScheduling` on every attempt (as
    /// kube-scheduler does); otherwise only when the condition changed.
    pub(crate) fn submit_pod_condition(
        &mut self,
        key: PodKey,
        uid: Option<String>,
        reason: &'static str,
        message: String,
        always_event: bool,
        keep: Option<SameWait>,
    ) {
        let (store, writer, permits) = (
            self.store.clone(),
            self.writer.clone(),
            self.write_permits.clone(),
        );
        let k = key.clone();
        let job = async move {
            // A write the API server could not answer (restarting, throttling) is tried again: an unschedulable
            // pod may not be attempted again for minutes, and until then it would have no reason at all.
            // The write carries the resourceVersion it decided on: a binding that lands between the checks below
            // and the write (the pod assumed and bound by a later cycle while this write was in flight) makes it
            // fail with 409 instead of turning the binding's `PodScheduled=True` back to False. After a conflict
            // the pod is read afresh from the API server and the decision made again on it, as for groups.
            let (mut unavailable, mut conflicts) = (0u32, 0u32);
            loop {
                let Ok(permit) = permits.acquire().await else {
                    return;
                };
                let Some(pod) = store.pod(&k) else { return };
                if uid.as_deref().is_some_and(|u| u != pod.uid()) {
                    return;
                }
                if pod.node_name().is_some() || store.assumed_node(&k).is_some() {
                    return;
                }
                // Our own earlier writes count even before the watch brings them back (`crate::written`).
                let current = writer.unschedulable(&pod);
                if let (Some(w), Some(c)) = (&keep, &current)
                    && w.holds(reason, c)
                {
                    return;
                }
                let at = if conflicts == 0 {
                    Ok(pod.resource_version.clone())
                } else {
                    writer.pod_still_pending(&pod).await
                };
                let result = match at {
                    Ok(None) if conflicts > 0 => return,
                    Ok(at) => {
                        writer
                            .pod_unschedulable(&pod, reason, &message, at.as_deref())
                            .await
                    }
                    Err(e) => Err(e),
                };
                // A wait is announced once per reason: a later message for the same wait (a count that moved, a
                // foreign member noted) updates the condition without another event.
                let reason_changed = current.is_none_or(|c| c.reason != reason);
                let changed = match result {
                    Ok(c) => c,
                    Err(kube::Error::Api(s)) if s.code == 409 && conflicts + 1 < POD_WRITE_CONFLICTS => {
                        conflicts += 1;
                        tracing::debug!(pod = %k, conflicts, "pod changed before its condition was written; reading it again");
                        continue;
                    }
                    Err(e)
                        if phalanx_store::retry::is_unavailable(&e)
                            && unavailable + 1 < UNAVAILABLE_TRIES =>
                    {
                        drop(permit);
                        unavailable += 1;
                        tracing::debug!(pod = %k, failures = unavailable, error = %e, "pod condition not written yet; retrying");
                        tokio::time::sleep(unavailable_backoff(unavailable)).await;
                        continue;
                    }
                    Err(e) => {
                        if phalanx_store::retry::is_unavailable(&e) {
                            tracing::warn!(pod = %k, failures = unavailable, error = %e, "pod condition not written");
                        } else {
                            tracing::debug!(pod = %k, error = %e, "pod condition not written");
                        }
                        false
                    }
                };
                if always_event || (changed && reason_changed) {
                    writer.event_failed(&pod, reason, &message).await;
                }
                return;
            }
        };
        self.writes.submit(&mut self.tasks, WriteKey::Pod(key), job);
    }

    /// Queues a group condition write. The wanted condition is recorded per group first, and a True condition is
    /// never replaced by a False one for the same object (upstream: no regression from True), even before the
    /// watch shows it; the write job then sends whatever is wanted when it runs.
    pub(crate) fn spawn_group_condition(
        &mut self,
        g: GroupKey,
        type_: &'static str,
        status: bool,
        reason: &'static str,
        message: String,
    ) {
        // An upstream group is Phalanx's only while one of its members names this scheduler: upstream's groups of
        // kube-scheduler (or of no pod yet) are never written.
        if g.is_upstream()
            && !members::entity_leaves(&self.store, &EntityKey::Group(g.clone()))
                .iter()
                .any(|l| self.store.group_members(l).iter().any(|p| self.ours(p)))
        {
            return;
        }
        let mut by_controllers = false;
        let uid = match g.kind {
            GroupKind::PodGroup => self.store.pod_group_at(&g).and_then(|o| {
                // Phalanx's controllers never reconcile upstream's objects: the driver writes their condition.
                by_controllers = status
                    && !g.is_upstream()
                    && self.opts.initially_scheduled_by_controllers
                    && type_ == phalanx_api::conditions::POD_GROUP_INITIALLY_SCHEDULED
                    && o.spec.parent_composite_pod_group_name.is_none();
                o.metadata.uid.clone()
            }),
            GroupKind::CompositePodGroup => self
                .store
                .composite_pod_group_at(&g)
                .and_then(|o| o.metadata.uid.clone()),
        };
        let Some(uid) = uid else { return };
        {
            let mut wanted = self
                .group_wanted
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let of_group = wanted.entry(g.clone()).or_default();
            if let Some(w) = of_group.get(type_)
                && w.uid == uid
                && w.status
                && !status
            {
                return;
            }
            // A recreated object (new uid) starts afresh.
            of_group.retain(|_, w| w.uid == uid);
            of_group.insert(
                type_,
                WantedCondition {
                    uid,
                    type_,
                    status,
                    reason,
                    message,
                    at: std::time::Instant::now(),
                    delegated: by_controllers,
                },
            );
        }
        if by_controllers {
            // Recorded above, so that no False replaces it; the PodGroup controller writes it with its counters.
            return;
        }
        self.spawn_group_write(g);
    }

    /// Queues the write of every condition the driver wants on group `g` (serialised per group: the latest wanted
    /// state wins).
    fn spawn_group_write(&mut self, g: GroupKey) {
        let (store, writer, permits, wanted) = (
            self.store.clone(),
            self.writer.clone(),
            self.write_permits.clone(),
            self.group_wanted.clone(),
        );
        let grace = self.opts.condition_catch_up;
        let key = g.clone();
        let job = async move {
            let Ok(_p) = permits.acquire().await else { return };
            // Every condition type the scheduler wants on this group goes into the one apply: server-side apply
            // drops the entries of our field manager that a body leaves out.
            let ws: Vec<WantedCondition> = wanted
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get(&g)
                .map(|m| m.values().cloned().collect())
                .unwrap_or_default();
            let Some(uid) = ws.first().map(|w| w.uid.clone()) else {
                return;
            };
            // A write queued before the True was decided (the False of a gang that waited for its last member)
            // would send the True the controller is about to write with its counters: a second group write. With
            // nothing else wanted on the group it is left out; `catch_up_delegated` sends it if still not shown.
            if let [w] = ws.as_slice()
                && w.delegated
                && w.at.elapsed() < grace
            {
                return;
            }
            // The write carries the version it read (see `StatusWriter::group_conditions`). The first try decides on
            // the store's copy; after a conflict (the controllers' status write landed in between) each try reads
            // the object fresh from the API server and decides again on it, as client-go's `RetryOnConflict` does.
            // Waiting for the watch instead failed on a loaded API server: the cache lagged longer than the retries
            // and the placed group was left without its condition. A try the API server did not answer is counted
            // apart from the conflicts ([`UNAVAILABLE_TRIES`]), and the try after it reads the object afresh too.
            let (mut conflicts, mut unavailable) = (0u32, 0u32);
            loop {
                let fresh = conflicts + unavailable > 0;
                // The four kinds of object differ in type and in where their conditions sit, nothing else.
                macro_rules! write_as {
                    ($cached:expr, $conditions:expr) => {
                        write_conditions(&writer, &g, fresh, $cached, &uid, &ws, $conditions).await
                    };
                }
                let res = match g.kind {
                    // Upstream's objects: the same conditions, written to their own API group's status.
                    GroupKind::PodGroup if g.is_upstream() => write_as!(
                        || store
                            .pod_group_at(&g)
                            .map(|pg| Arc::new(convert::native_view(&pg))),
                        convert::native_conditions
                    ),
                    GroupKind::PodGroup => write_as!(
                        || store.pod_group(&g.namespace, &g.name),
                        convert::pod_group_conditions
                    ),
                    GroupKind::CompositePodGroup
                        if g.is_upstream() && store.upstream_composites_v1beta1() =>
                    {
                        write_as!(
                            || store
                                .composite_pod_group_at(&g)
                                .map(|c| Arc::new(convert::native_composite_view::<V1beta1>(&c))),
                            NativeCompositePodGroup::<V1beta1>::conditions
                        )
                    }
                    GroupKind::CompositePodGroup if g.is_upstream() => write_as!(
                        || store
                            .composite_pod_group_at(&g)
                            .map(|c| Arc::new(convert::native_composite_view::<V1alpha3>(&c))),
                        NativeCompositePodGroup::<V1alpha3>::conditions
                    ),
                    GroupKind::CompositePodGroup => write_as!(
                        || store.composite_pod_group(&g.namespace, &g.name),
                        convert::composite_conditions
                    ),
                };
                match res {
                    Err(kube::Error::Api(s)) if s.code == 409 && conflicts + 1 < GROUP_WRITE_ATTEMPTS => {
                        conflicts += 1;
                        tokio::time::sleep(std::time::Duration::from_millis(50 * u64::from(conflicts))).await;
                    }
                    Err(e)
                        if phalanx_store::retry::is_unavailable(&e)
                            && unavailable + 1 < UNAVAILABLE_TRIES =>
                    {
                        unavailable += 1;
                        tracing::debug!(group = %g, failures = unavailable, error = %e, "group condition not written yet; retrying");
                        tokio::time::sleep(unavailable_backoff(unavailable)).await;
                    }
                    Err(e) => {
                        tracing::warn!(group = %g, conflicts, unavailable, error = %e, "group condition not written");
                        return;
                    }
                    Ok(()) => return,
                }
            }
        };
        self.writes.submit(&mut self.tasks, WriteKey::Group(key), job);
    }

    /// Writes a PreEnqueue gate as `PodScheduled=False` on the entity's pending pods and on its PodGroup.
    pub(crate) fn announce_gate(&mut self, k: &EntityKey, gate: &Gate) {
        if gate.reason == GateReason::SchedulingGated || !self.is_leader() {
            // The API server already reports `SchedulingGated` for pods with scheduling gates.
            return;
        }
        // A member of another scheduler is not counted, and that scheduler may bind it outside the gang: say so.
        let mut message = gate.message.clone();
        let mut pod_message = gate.pod_message.clone();
        // What a member's message must start with to need no new write: upstream's words, before any count.
        let mut stem = gate.pod_message.clone();
        let counted = match quorum_counts(k, gate) {
            Some(counts) => {
                pod_message = counts;
                true
            }
            None => false,
        };
        let mut note = String::new();
        if let Some((foreign, _)) = members::foreign_member(
            &self.store,
            &self.opts.scheduler_name,
            &members::entity_leaves(&self.store, k),
        ) {
            let name = foreign.scheduler_name();
            note = format!(
                "; pod {}/{} names schedulerName {name:?}, not {:?}: it is not counted, and another scheduler may \
                 bind it outside the gang",
                foreign.namespace(),
                foreign.name(),
                self.opts.scheduler_name
            );
            message.push_str(&note);
            pod_message.push_str(&note);
        }
        let reason = names::gate_reason(gate.reason);
        let pods: Vec<Arc<PodRecord>> = match k {
            EntityKey::Pod(p) => self.store.pod(&p.clone()).into_iter().collect(),
            EntityKey::Group(g) if g.kind == GroupKind::CompositePodGroup => {
                // A root CompositePodGroup's entity holds the pods of every leaf below it.
                let leaves: Vec<GroupKey> = self
                    .store
                    .hierarchy()
                    .subtree(&g.clone())
                    .into_iter()
                    .filter(|k| k.kind == GroupKind::PodGroup)
                    .collect();
                leaves.iter().flat_map(|l| self.store.group_members(l)).collect()
            }
            EntityKey::Group(g) => self.store.group_members(&g.clone()),
        };
        if gate.reason == GateReason::WaitingForResourceClaim
            && let Some(m) = missing_template_message(&self.store, &pods)
        {
            // The queue does not know the templates; the store does. No claim ever comes from a missing one.
            message.clone_from(&m);
            stem.clone_from(&m);
            pod_message = m;
        }
        for pod in pods {
            if !self.ours(&pod) || pod.node_name().is_some() || pod.is_terminal() {
                continue;
            }
            // The gate changes with every arrival (its group message carries the count): a member that already
            // waits for the same thing keeps the count of its own last write, so a gang of N arriving one by one
            // costs N pod writes, not N²/2 (the PodGroup's condition has the current count).
            let keep = SameWait {
                stem: stem.clone(),
                counted,
                note: note.clone(),
            };
            if self
                .writer
                .unschedulable(&pod)
                .is_some_and(|c| keep.holds(reason, &c))
            {
                continue;
            }
            let uid = Some(pod.uid().to_owned()).filter(|u| !u.is_empty());
            self.submit_pod_condition(
                pod.key().clone(),
                uid,
                reason,
                pod_message.clone(),
                false,
                Some(keep),
            );
        }
        if let EntityKey::Group(g) = k {
            let sg = g.clone();
            let type_ = match g.kind {
                GroupKind::PodGroup => phalanx_api::conditions::POD_GROUP_INITIALLY_SCHEDULED,
                GroupKind::CompositePodGroup => {
                    phalanx_api::conditions::COMPOSITE_POD_GROUP_INITIALLY_SCHEDULED
                }
            };
            self.spawn_group_condition(
                sg,
                type_,
                false,
                names::gate_group_reason(gate.reason, g.kind),
                message,
            );
        }
    }
}

/// The message of a member waiting for a claim whose ResourceClaimTemplate does not exist, naming the entry and the
/// template (`pod "ns/p": ResourceClaim not created yet: resourceClaims "gpu": ResourceClaimTemplate "one" not
/// found`, [`phalanx_scheduler::dra::scheduling::claim_not_created`]), for the first of `pods` with one. `None` when
/// every template exists, or when templates cannot be read (`resource.k8s.io/v1` not served, or their list refused):
/// a template not seen is then not known to be missing.
fn missing_template_message(store: &phalanx_store::Store, pods: &[Arc<PodRecord>]) -> Option<String> {
    use phalanx_scheduler::dra::scheduling::{claim_not_created, missing_template};
    let dra = store.dra()?;
    if store
        .unreadable_devices()
        .iter()
        .any(|k| k == "resourceclaimtemplates")
    {
        return None;
    }
    pods.iter().find_map(|p| {
        let exists = |t: &str| {
            dra.templates
                .get(&kube::runtime::reflector::ObjectRef::new(t).within(p.namespace()))
                .is_some()
        };
        missing_template(&p.info, exists)?;
        claim_not_created(&p.info, exists)
    })
}

/// A member's failure `message` with, when it says that the claim generated for an entry of its PodGroup's
/// `spec.resourceClaims` does not exist and that entry's ResourceClaimTemplate is missing, the entry and template
/// added where the claim is named: `... resourceclaim.resource.k8s.io "train-gpu" not found (PodGroup "train"
/// resourceClaims "gpu": ResourceClaimTemplate "one" not found) ...` (the claim never comes until the template
/// does). Otherwise `message` unchanged; also when the templates cannot be read.
pub(crate) fn name_group_claim_template(
    store: &phalanx_store::Store,
    pod: &PodKey,
    message: String,
) -> String {
    let found = || -> Option<String> {
        let p = store.pod(pod)?;
        let g = store.group_of_pod(&p)?;
        if g.kind != GroupKind::PodGroup || !message.contains("\" not found") {
            return None;
        }
        let dra = store.dra()?;
        if store
            .unreadable_devices()
            .iter()
            .any(|k| k == "resourceclaimtemplates")
        {
            return None;
        }
        let group = store.pod_group_at(&g)?;
        group.spec.resource_claims.iter().flatten().find_map(|entry| {
            let t = entry.resource_claim_template_name.as_deref()?;
            let exists = dra
                .templates
                .get(&kube::runtime::reflector::ObjectRef::new(t).within(&g.namespace))
                .is_some();
            let claim = phalanx_api::v1beta1::generated_claim_name(&g.name, &entry.name);
            let said = format!("\"{claim}\" not found");
            (!exists && message.contains(&said)).then(|| {
                let why = format!(
                    "{said} (PodGroup {:?} resourceClaims {:?}: ResourceClaimTemplate {t:?} not found)",
                    &*g.name, entry.name
                );
                message.replacen(&said, &why, 1)
            })
        })
    };
    found().unwrap_or(message)
}

/// The member pods' message of a PodGroup waiting for its quorum, with the counts of the moment (upstream's words,
/// then the group's message): `waiting for minCount pods from a gang to appear in scheduling queue: 2 of 3 pods
/// present (minCount 3) when this pod was last updated`. `None` for any other gate (a CompositePodGroup tree's
/// members name their root instead). The count is the group's gate message (`phalanx_scheduler` queue gate,
/// upstream GangScheduling `PreEnqueue`, `pkg/scheduler/framework/plugins/gangscheduling`).
fn quorum_counts(k: &EntityKey, gate: &Gate) -> Option<String> {
    let EntityKey::Group(g) = k else { return None };
    (gate.reason == GateReason::WaitingForQuorum
        && g.kind == GroupKind::PodGroup
        && gate.message != gate.pod_message)
        .then(|| format!("{}: {}{COUNTED_TAIL}", gate.pod_message, gate.message))
}

/// A wait a member needs no new write for while its condition already says it (`reason`, then the words `stem`,
/// the counts when `counted`, and `note`), whatever count it carries ([`same_wait`]).
pub(crate) struct SameWait {
    stem: String,
    counted: bool,
    note: String,
}

impl SameWait {
    fn holds(&self, reason: &str, c: &crate::written::Unschedulable) -> bool {
        c.reason == reason && same_wait(&c.message, &self.stem, self.counted, &self.note)
    }
}

/// The tail of a member's counted message ([`quorum_counts`]).
const COUNTED_TAIL: &str = " when this pod was last updated";

/// Whether a member's message `m` already says the wait `stem` (+ counts when `counted`) + `note`, whatever count
/// it carries: such a member needs no new write. Byte-safe on any `m`.
fn same_wait(m: &str, stem: &str, counted: bool, note: &str) -> bool {
    let Some(middle) = m.strip_prefix(stem).and_then(|r| r.strip_suffix(note)) else {
        return false;
    };
    if counted {
        middle.starts_with(": ") && middle.ends_with(COUNTED_TAIL) && !middle.contains("; pod ")
    } else {
        middle.is_empty()
    }
}

/// One try of a group condition write on group `g`: on the store's copy (`cached`), or with `fresh` on the object read
/// from the API server. Nothing when the object is gone or was recreated (another uid), else
/// [`crate::status::StatusWriter::group_conditions`] on its conditions. Errors: the read's or the write's.
async fn write_conditions<K>(
    writer: &crate::status::StatusWriter,
    g: &GroupKey,
    fresh: bool,
    cached: impl FnOnce() -> Option<Arc<K>>,
    uid: &str,
    wanted: &[WantedCondition],
    conditions: fn(&K) -> &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
) -> Result<(), kube::Error>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let obj = if fresh {
        writer.read::<K>(&g.namespace, &g.name).await?
    } else {
        cached()
    };
    let Some(obj) = obj else { return Ok(()) };
    if obj.meta().uid.as_deref() != Some(uid) {
        return Ok(());
    }
    writer
        .group_conditions::<K>(&obj, conditions(&obj), wanted)
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    const STEM: &str = "waiting for minCount pods from a gang to appear in scheduling queue";

    fn quorum_gate(present: u32) -> Gate {
        Gate {
            reason: GateReason::WaitingForQuorum,
            message: format!("{present} of 3 pods present (minCount 3)"),
            pod_message: STEM.to_owned(),
        }
    }

    #[test]
    fn a_member_waiting_for_quorum_says_the_counts() {
        let k = EntityKey::Group(GroupKey::pod_group("ns", "pg1"));
        let m = quorum_counts(&k, &quorum_gate(2)).unwrap();
        assert_eq!(
            m,
            format!("{STEM}: 2 of 3 pods present (minCount 3) when this pod was last updated")
        );
        // Another count is the same wait: no second write of that member.
        assert!(same_wait(&m, STEM, true, ""));
        let later = quorum_counts(&k, &quorum_gate(1)).unwrap();
        assert!(same_wait(&later, STEM, true, ""));
        // A foreign-member note that appears or goes away is a change.
        let note = "; pod ns/x names schedulerName \"other\"";
        assert!(!same_wait(&m, STEM, true, note));
        assert!(!same_wait(&format!("{m}{note}"), STEM, true, ""));
        assert!(same_wait(&format!("{m}{note}"), STEM, true, note));
        // The uncounted words (a CompositePodGroup's member, an older scheduler's write) are not the counted wait.
        assert!(!same_wait(STEM, STEM, true, ""));
        assert!(same_wait(STEM, STEM, false, ""));
        assert!(!same_wait("", STEM, false, ""));
        let tree = EntityKey::Group(GroupKey::composite("ns", "root"));
        assert_eq!(quorum_counts(&tree, &quorum_gate(2)), None);
    }
}
