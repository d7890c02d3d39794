//! TopologyPlacement's PlacementGenerate (upstream `plugins/topologyaware`): one placement per
//! value of the group's topology key; nodes without the label are skipped; once members run
//! in a domain, only that domain is generated. Placements come out sorted by domain value.

use std::collections::BTreeMap;

use crate::framework::{Code, Placement, PlacementGeneratePlugin, Status};
use crate::model::{CompositeGroupInfo, GroupInfo, GroupKey};
use crate::snapshot::Snapshot;

/// Plugin name (upstream `names.TopologyPlacementGenerator`).
pub const NAME: &str = "TopologyPlacement";

/// The PlacementGenerate plugin.
#[derive(Debug, Clone, Copy, Default)]
pub struct TopologyPlacement;

impl PlacementGeneratePlugin for TopologyPlacement {
    fn name(&self) -> &'static str {
        NAME
    }

    fn generate(
        &self,
        snapshot: &Snapshot,
        group: &GroupInfo,
        parent: &Placement,
    ) -> Result<Vec<Placement>, Status> {
        let Some(key) = &group.topology_key else {
            return Ok(vec![parent.clone()]);
        };
        domains_for(snapshot, key, std::slice::from_ref(&group.key), parent)
    }

    fn generate_composite(
        &self,
        snapshot: &Snapshot,
        group: &CompositeGroupInfo,
        leaves: &[GroupKey],
        parent: &Placement,
    ) -> Result<Vec<Placement>, Status> {
        let Some(key) = &group.topology_key else {
            return Ok(vec![parent.clone()]);
        };
        // Members already running anywhere in the subtree pin its domain.
        domains_for(snapshot, key, leaves, parent)
    }
}

/// One placement per value of `key` among `parent`'s nodes, restricted to the single domain of
/// the already scheduled members of `groups` (errors when they span domains).
pub(crate) fn domains_for(
    snapshot: &Snapshot,
    key: &str,
    groups: &[GroupKey],
    parent: &Placement,
) -> Result<Vec<Placement>, Status> {
    let mut required: Vec<&str> = Vec::new();
    for st in groups.iter().filter_map(|g| snapshot.group_state(g)) {
        for (pod, node) in &st.scheduled {
            let value = snapshot
                .node_index(node)
                .and_then(|i| snapshot.node(i).node.labels.get(key));
            let Some(v) = value else {
                return Err(Status::new(
                    Code::Error,
                    format!(
                        "cannot determine domain for already scheduled pods: no topology domain found for pod {pod}"
                    ),
                ));
            };
            if !required.contains(&v.as_str()) {
                required.push(v);
            }
        }
    }
    if required.len() > 1 {
        required.sort();
        return Err(Status::new(
            Code::Error,
            format!(
                "cannot determine domain for already scheduled pods: more than 1 domain found for pod group: {}",
                required.join(", ")
            ),
        ));
    }
    if parent.nodes.len() == snapshot.len() {
        // The parent is the whole cluster: use the snapshot's cached partition.
        return Ok(snapshot
            .domains(key)
            .iter()
            .filter(|(v, _)| required.first().is_none_or(|r| *r == v.as_str()))
            .map(|(v, nodes)| Placement {
                name: v.clone(),
                nodes: nodes.clone(),
            })
            .collect());
    }
    let mut domains: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for &i in &parent.nodes {
        if let Some(v) = snapshot.node(i).node.labels.get(key) {
            if required.first().is_some_and(|r| *r != v) {
                continue;
            }
            domains.entry(v.as_str()).or_default().push(i);
        }
    }
    Ok(domains
        .into_iter()
        .map(|(name, nodes)| Placement {
            name: name.to_string(),
            nodes,
        })
        .collect())
}
