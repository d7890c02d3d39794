//! The volume choices made inside one cycle, with undo (upstream `AssumePodVolumes` and
//! `RevertAssumedPodVolumes` on the scheduler's assume cache, `volumebinding/binder.go`).

use std::collections::HashMap;
use std::sync::Arc;

use super::{ClaimKey, VolumeAction};
use crate::model::PodKey;

/// One assumption, for undo.
#[derive(Debug, Clone)]
struct Entry {
    /// The snapshot's undo-log length when it was made.
    mark: usize,
    pod: PodKey,
    /// The pod's previous actions (a pod assumed again in a simulation).
    prev: Option<Vec<VolumeAction>>,
    /// Claims this assumption chose first (shared claims keep the first pod's choice).
    claims: Vec<ClaimKey>,
}

/// Claims given a volume or a node in this cycle, the volumes they took, and each pod's PreBind actions.
#[derive(Debug, Clone, Default)]
pub struct VolumeOverlay {
    taken: HashMap<Arc<str>, ClaimKey>,
    claims: HashMap<ClaimKey, VolumeAction>,
    by_pod: HashMap<PodKey, Vec<VolumeAction>>,
    log: Vec<Entry>,
}

impl PartialEq for VolumeOverlay {
    /// Compares the choices (the undo log is bookkeeping).
    fn eq(&self, other: &Self) -> bool {
        self.taken == other.taken && self.claims == other.claims && self.by_pod == other.by_pod
    }
}

impl VolumeOverlay {
    /// Whether a volume was chosen for some claim in this cycle.
    pub fn is_taken(&self, volume: &str) -> bool {
        self.taken.contains_key(volume)
    }

    /// This cycle's choice for a claim.
    pub fn choice(&self, claim: &ClaimKey) -> Option<&VolumeAction> {
        self.claims.get(claim)
    }

    /// The PreBind actions of an assumed pod (empty when it has none).
    pub fn actions_of(&self, pod: &PodKey) -> &[VolumeAction] {
        self.by_pod.get(pod).map_or(&[], Vec::as_slice)
    }

    /// The volumes chosen for claims in this cycle, by claim (NodeVolumeLimits counts them).
    pub fn chosen_volumes(&self) -> impl Iterator<Item = (&ClaimKey, &Arc<str>)> {
        self.claims.iter().filter_map(|(c, a)| match a {
            VolumeAction::Bind { volume, .. } => Some((c, volume)),
            VolumeAction::Provision { .. } => None,
        })
    }

    /// Whether nothing was chosen.
    pub fn is_empty(&self) -> bool {
        self.claims.is_empty() && self.by_pod.is_empty()
    }

    /// Records `pod`'s actions; `mark` is the snapshot's undo-log length before the pod's assumption.
    pub(crate) fn record(&mut self, mark: usize, pod: PodKey, actions: Vec<VolumeAction>) {
        let mut claims = Vec::new();
        for a in &actions {
            if self.claims.contains_key(a.claim()) {
                continue;
            }
            if let VolumeAction::Bind { volume, .. } = a {
                self.taken.insert(volume.clone(), a.claim().clone());
            }
            self.claims.insert(a.claim().clone(), a.clone());
            claims.push(a.claim().clone());
        }
        let prev = self.by_pod.insert(pod.clone(), actions);
        self.log.push(Entry {
            mark,
            pod,
            prev,
            claims,
        });
    }

    /// Undoes the entries recorded at or after `mark`, newest first.
    pub(crate) fn revert_to(&mut self, mark: usize) {
        while self.log.last().is_some_and(|e| e.mark >= mark) {
            let Some(e) = self.log.pop() else { break };
            for c in e.claims {
                if let Some(VolumeAction::Bind { volume, .. }) = self.claims.remove(&c) {
                    self.taken.remove(&volume);
                }
            }
            match e.prev {
                Some(p) => {
                    self.by_pod.insert(e.pod, p);
                }
                None => {
                    self.by_pod.remove(&e.pod);
                }
            }
        }
    }

    /// Keeps every choice (the snapshot committed).
    pub(crate) fn commit(&mut self) {
        self.log.clear();
    }
}
