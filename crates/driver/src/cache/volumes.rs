//! The storage facts the volume plugins read: the store's caches as one [`VolumeCatalog`], rebuilt only after a
//! storage event or a change of the volume bindings in flight, with those bindings applied (upstream's
//! `AssumeCache` holds assumed claims and volumes the same way until the informers catch up).

use std::sync::Arc;

use kube::ResourceExt;
use phalanx_scheduler::convert::csi_node_limits;
use phalanx_scheduler::volumes::{
    CapacityInfo, ClaimInfo, ClassInfo, VolumeAction, VolumeCatalog, VolumeInfo,
};

use super::Cache;

impl Cache {
    /// The catalog for the next cycle, with the volume bindings PreBind is writing (`in_flight`, one action per
    /// claim, [`crate::dispatcher::ApiDispatcher::volumes_in_flight`]) applied.
    pub(crate) fn volume_catalog<'a>(
        &mut self,
        in_flight: impl Iterator<Item = &'a VolumeAction>,
    ) -> Arc<VolumeCatalog> {
        if let Some(c) = &self.volume_catalog {
            return c.clone();
        }
        let r = self.store.volumes();
        let mut cat = VolumeCatalog {
            claims: r
                .claims
                .state()
                .iter()
                .map(|c| {
                    let info = ClaimInfo::from_api(c);
                    (info.key.clone(), Arc::new(info))
                })
                .collect(),
            volumes: r
                .volumes
                .state()
                .iter()
                .map(|v| {
                    let info = VolumeInfo::from_api(v);
                    (info.name.clone(), Arc::new(info))
                })
                .collect(),
            classes: r
                .classes
                .state()
                .iter()
                .map(|c| (c.name_any(), ClassInfo::from_api(c)))
                .collect(),
            csi_limits: r
                .csi_nodes
                .state()
                .iter()
                .map(|n| (n.name_any(), csi_node_limits(n)))
                .filter(|(_, l)| !l.is_empty())
                .collect(),
            capacity_drivers: r
                .csi_drivers
                .state()
                .iter()
                .filter(|d| d.spec.storage_capacity == Some(true))
                .map(|d| d.name_any())
                .collect(),
            capacities: r
                .capacities
                .state()
                .iter()
                .map(|c| CapacityInfo::from_api(c))
                .collect(),
            unreadable: self.store.unreadable_storage(),
        };
        // The bindings PreBind is writing hold until the caches show them: the volume is taken, the claim is bound
        // to it (or waits for its provisioner on the chosen node).
        for a in in_flight {
            let Some(claim) = cat.claims.get_mut(a.claim()) else {
                continue;
            };
            let c = Arc::make_mut(claim);
            match a {
                VolumeAction::Bind { volume, .. } => {
                    if c.volume_name.is_none() || !c.bound {
                        c.volume_name = Some(volume.clone());
                        c.bound = true;
                    }
                    if let Some(v) = cat.volumes.get_mut(volume) {
                        let v = Arc::make_mut(v);
                        if v.claim_ref.is_none() {
                            v.claim_ref = Some((c.key.clone(), c.uid.clone()));
                        }
                    }
                }
                VolumeAction::Provision { node, .. } => {
                    if !c.bound {
                        c.selected_node = Some(node.clone());
                    }
                }
            }
        }
        let cat = Arc::new(cat);
        self.volume_catalog = Some(cat.clone());
        cat
    }
}
