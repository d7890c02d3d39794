//! The device allocations made inside one cycle, with undo (upstream: the allocations DynamicResources keeps in
//! its `CycleState` and assumes in `Reserve`, undone in `Unreserve`).
//!
//! Allocation is per node and joint: when a pod is assumed on a node, the claims this cycle allocated there
//! (those used by one pod only) are allocated again together with the new pod's, so that a later member can make
//! an earlier one move to another device of the node (k/k#138765). A claim used by several pods keeps its first
//! allocation. Every change records what it replaced, and [`DeviceOverlay::revert_to`] restores it, exactly like
//! the pods' resources in the snapshot's undo log.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use super::{ClaimAllocation, DeviceId};
use crate::model::PodKey;
use crate::volumes::ClaimKey;

/// The claims allocated on one node in this cycle, in allocation order, with their devices.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeAllocations {
    /// `(claim, its devices)`.
    pub claims: Vec<(ClaimKey, ClaimAllocation)>,
}

#[derive(Debug, Clone)]
struct Entry {
    /// The snapshot's undo-log length when it was made.
    mark: usize,
    pod: PodKey,
    prev_pod: Option<Vec<ClaimKey>>,
    /// The node whose allocations changed, and what they were.
    node: Option<(Arc<str>, Option<NodeAllocations>)>,
}

/// Claims allocated in this cycle (by node), the devices they took, and the claims each assumed pod uses.
#[derive(Debug, Clone, Default)]
pub struct DeviceOverlay {
    nodes: HashMap<Arc<str>, NodeAllocations>,
    /// Claim → the node it was allocated on in this cycle.
    claim_node: HashMap<ClaimKey, Arc<str>>,
    /// Device → the claim that took it in this cycle (admin-access devices are not taken).
    taken: HashMap<DeviceId, ClaimKey>,
    /// Assumed pod → every claim it uses (allocated now or before), in the pod's order.
    by_pod: HashMap<PodKey, Vec<ClaimKey>>,
    /// How many assumed pods use each claim.
    users: HashMap<ClaimKey, usize>,
    log: Vec<Entry>,
    /// When this cycle first allocated devices (the start of its filter timeout); cleared by [`Self::commit`].
    allocation_started: OnceLock<Instant>,
}

impl PartialEq for DeviceOverlay {
    /// Compares the choices (the undo log is bookkeeping).
    fn eq(&self, other: &Self) -> bool {
        self.nodes == other.nodes && self.by_pod == other.by_pod
    }
}

impl DeviceOverlay {
    /// This cycle's allocation of a claim, with its node.
    pub fn allocation(&self, claim: &ClaimKey) -> Option<(&Arc<str>, &ClaimAllocation)> {
        let node = self.claim_node.get(claim)?;
        let a = self.nodes.get(node)?.claims.iter().find(|(c, _)| c == claim)?;
        Some((node, &a.1))
    }

    /// The claims allocated on `node` in this cycle.
    pub fn on_node(&self, node: &str) -> &[(ClaimKey, ClaimAllocation)] {
        self.nodes.get(node).map_or(&[], |n| n.claims.as_slice())
    }

    /// The claim that took `device` in this cycle.
    pub fn taken_by(&self, device: &DeviceId) -> Option<&ClaimKey> {
        self.taken.get(device)
    }

    /// The devices taken in this cycle, with the claim that took each.
    pub fn taken(&self) -> impl Iterator<Item = (&DeviceId, &ClaimKey)> {
        self.taken.iter()
    }

    /// The nodes with allocations in this cycle.
    pub fn nodes(&self) -> impl Iterator<Item = (&Arc<str>, &NodeAllocations)> {
        self.nodes.iter()
    }

    /// How many assumed pods use `claim`.
    pub fn users(&self, claim: &ClaimKey) -> usize {
        self.users.get(claim).copied().unwrap_or(0)
    }

    /// The claims an assumed pod uses (empty when it has none).
    pub fn claims_of(&self, pod: &PodKey) -> &[ClaimKey] {
        self.by_pod.get(pod).map_or(&[], Vec::as_slice)
    }

    /// Whether nothing was allocated or reserved.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty() && self.by_pod.is_empty()
    }

    /// Records that `pod` uses `claims` and, when it allocated, that `node`'s allocations are now `allocations`;
    /// `mark` is the snapshot's undo-log length before the pod's assumption.
    pub(crate) fn record(
        &mut self,
        mark: usize,
        pod: PodKey,
        claims: Vec<ClaimKey>,
        node: Option<(Arc<str>, NodeAllocations)>,
    ) {
        for c in &claims {
            *self.users.entry(c.clone()).or_default() += 1;
        }
        let prev_pod = self.by_pod.insert(pod.clone(), claims);
        if let Some(prev) = &prev_pod {
            self.drop_users(prev);
        }
        let node = node.map(|(name, now)| {
            let prev = self.set_node(&name, Some(now));
            (name, prev)
        });
        self.log.push(Entry {
            mark,
            pod,
            prev_pod,
            node,
        });
    }

    fn drop_users(&mut self, claims: &[ClaimKey]) {
        for c in claims {
            if let Some(n) = self.users.get_mut(c) {
                *n -= 1;
                if *n == 0 {
                    self.users.remove(c);
                }
            }
        }
    }

    /// Replaces `node`'s allocations, keeping the claim and device indexes in step; returns the old ones.
    fn set_node(&mut self, node: &Arc<str>, now: Option<NodeAllocations>) -> Option<NodeAllocations> {
        let prev = self.nodes.remove(node);
        for (c, a) in prev.iter().flat_map(|p| &p.claims) {
            self.claim_node.remove(c);
            for (_, d, _) in &a.devices {
                self.taken.remove(d);
            }
        }
        if let Some(now) = now {
            for (c, a) in &now.claims {
                self.claim_node.insert(c.clone(), node.clone());
                for (_, d, admin) in &a.devices {
                    if !admin {
                        self.taken.insert(d.clone(), c.clone());
                    }
                }
            }
            self.nodes.insert(node.clone(), now);
        }
        prev
    }

    /// Undoes the entries recorded at or after `mark`, newest first.
    pub(crate) fn revert_to(&mut self, mark: usize) {
        while self.log.last().is_some_and(|e| e.mark >= mark) {
            let Some(e) = self.log.pop() else { break };
            if let Some((name, prev)) = e.node {
                self.set_node(&name, prev);
            }
            if let Some(now) = self.by_pod.remove(&e.pod) {
                self.drop_users(&now);
            }
            if let Some(prev) = e.prev_pod {
                for c in &prev {
                    *self.users.entry(c.clone()).or_default() += 1;
                }
                self.by_pod.insert(e.pod, prev);
            }
        }
    }

    /// When this cycle's device allocation must stop: `timeout` after the first call in the cycle (which starts
    /// the clock); `None` for a zero timeout (no bound) or one too far to represent.
    pub fn allocation_deadline(&self, timeout: Duration) -> Option<Instant> {
        if timeout.is_zero() {
            return None;
        }
        self.allocation_started
            .get_or_init(Instant::now)
            .checked_add(timeout)
    }

    /// Keeps every choice (the snapshot committed: the cycle is over, and the next starts its own timeout).
    pub(crate) fn commit(&mut self) {
        self.log.clear();
        self.allocation_started = OnceLock::new();
    }
}
