//! What the checker tells about a namespace for evidence and setup steps: pending pods and their reasons, bound
//! counts, free capacity per node.

use super::Checker;
use crate::quantity::Requests;

impl Checker {
    /// I4: our pods in `ns` that are pending (unbound, not terminating) without a `PodScheduled` condition that
    /// has a reason, described for evidence.
    pub fn pending_without_reason(&self, ns: &str) -> Vec<(String, String)> {
        let s = self.lock();
        let mut out: Vec<(String, String)> = s
            .pods
            .values()
            .filter(|p| p.namespace == ns && p.ours && p.node.is_none() && !p.deleting && !p.terminal)
            .filter(|p| {
                p.scheduled
                    .as_ref()
                    .is_none_or(|(_, reason, _)| reason.is_empty())
            })
            .map(|p| {
                let text = match &p.scheduled {
                    None => format!("{}/{} (no PodScheduled condition)", p.namespace, p.name),
                    Some((st, _, _)) => {
                        format!("{}/{} (PodScheduled={st} without a reason)", p.namespace, p.name)
                    }
                };
                (p.name.clone(), text)
            })
            .collect();
        out.sort();
        out
    }

    /// The unbound, live pods of `ns`, each with its `PodScheduled` condition, for evidence when a setup step waits
    /// in vain (`"a PodScheduled=False/Unschedulable: 0/6 nodes are available: ..."`).
    pub fn unbound_pods(&self, ns: &str) -> Vec<String> {
        let s = self.lock();
        let mut out: Vec<String> = s
            .pods
            .values()
            .filter(|p| p.namespace == ns && p.node.is_none() && !p.deleting && !p.terminal)
            .map(|p| match &p.scheduled {
                Some((st, reason, msg)) => format!("{} PodScheduled={st}/{reason}: {msg}", p.name),
                None => format!("{} without PodScheduled", p.name),
            })
            .collect();
        out.sort();
        out
    }

    /// Pods of `ns` ever seen bound.
    pub fn bound_count(&self, ns: &str) -> usize {
        let prefix = format!("{ns}/");
        self.lock()
            .bound
            .values()
            .filter(|(key, _, _)| key.starts_with(&prefix))
            .count()
    }

    /// Free CPU and memory per node (allocatable minus the requests of the non-terminal pods bound there), for
    /// evidence: whether a partly bound gang could still have been completed.
    pub fn free_capacity(&self) -> String {
        let s = self.lock();
        let mut nodes: Vec<(&String, &Requests)> = s.nodes.iter().collect();
        nodes.sort();
        nodes
            .into_iter()
            .map(|(name, alloc)| {
                let used = |res: &str| -> i128 {
                    s.pods
                        .values()
                        .filter(|p| p.node.as_deref() == Some(name.as_str()) && !p.terminal)
                        .map(|p| p.requests.get(res).copied().unwrap_or(0))
                        .sum()
                };
                let free = |res: &str| alloc.get(res).copied().unwrap_or(0) - used(res);
                format!(
                    "{name} cpu {}m mem {}Mi",
                    free("cpu"),
                    free("memory") / 1000 / (1 << 20)
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// What holds the room on every node the checker watches, for a setup step that waits in vain: per node its
    /// allocatable CPU and each non-terminal pod bound there as `ns/name cpu=<milli>m` (with ` Terminating` when it
    /// has a deletionTimestamp), e.g. `chaos-n0 (cpu 8000m): a/low-0 cpu=4000m, b/x cpu=4000m Terminating`.
    /// Pods of every namespace count, so room held by another run's leftovers shows too.
    pub fn node_allocations(&self) -> String {
        let s = self.lock();
        let mut nodes: Vec<(&String, &Requests)> = s.nodes.iter().collect();
        nodes.sort();
        nodes
            .into_iter()
            .map(|(name, alloc)| {
                let mut pods: Vec<String> = s
                    .pods
                    .values()
                    .filter(|p| p.node.as_deref() == Some(name.as_str()) && !p.terminal)
                    .map(|p| {
                        format!(
                            "{}/{} cpu={}m{}",
                            p.namespace,
                            p.name,
                            p.requests.get("cpu").copied().unwrap_or(0),
                            if p.deleting { " Terminating" } else { "" }
                        )
                    })
                    .collect();
                pods.sort();
                let list = if pods.is_empty() {
                    "no pods".to_owned()
                } else {
                    pods.join(", ")
                };
                format!("{name} (cpu {}m): {list}", alloc.get("cpu").copied().unwrap_or(0))
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}
