//! The DRA facts DynamicResources reads: the store's DeviceClass, ResourceSlice and ResourceClaim caches as one
//! [`DeviceCatalog`], rebuilt only after a DRA event, the deletion of a pod with claims, or a change of the
//! allocations in flight, with those allocations applied (upstream's assume cache holds allocated claims the same
//! way until the informer catches up). A rebuild after which every DeviceClass and ResourceSlice is the same keeps
//! their devices and selectors ([`KeptDevices`]) and converts only the claims whose resourceVersion changed.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::resource::v1::{DeviceClass, ResourceSlice};
use phalanx_scheduler::convert::DeviceSide;
use phalanx_scheduler::dra::{Allocated, Consumer, DeviceCatalog};
use phalanx_scheduler::model::PodKey;
use phalanx_scheduler::selectors::NodeSelectorTerm;

use super::Cache;
use crate::dispatcher::devices::ClaimJob;

impl Cache {
    /// The catalog for the next cycle, with the claims PreBind is writing (`in_flight`,
    /// [`crate::dispatcher::ApiDispatcher::devices_in_flight`]) applied.
    pub(crate) fn device_catalog<'a>(
        &mut self,
        in_flight: impl Iterator<Item = &'a ClaimJob>,
    ) -> Arc<DeviceCatalog> {
        if let Some(c) = &self.device_catalog {
            return c.clone();
        }
        self.device_revision += 1;
        let mut cat = match self.store.dra() {
            None => DeviceCatalog::default(),
            Some(r) => {
                let (classes, slices, claims) = (r.classes.state(), r.slices.state(), r.claims.state());
                let kept = match self.kept_devices.take() {
                    Some(k) if k.same_objects(&classes, &slices) => k,
                    _ => KeptDevices::build(&classes, &slices),
                };
                let problems = kept.side.problems.clone();
                let store = &self.store;
                let kept = self.kept_devices.insert(kept);
                let cat = kept
                    .side
                    .catalog(claims.iter().map(|c| &**c), |key: &PodKey, uid: &str| {
                        let p = store.pod(key)?;
                        (Some(p.uid()) == Some(uid))
                            .then(|| p.node_name().map(Arc::from))
                            .flatten()
                    });
                for p in &problems {
                    if !self.device_problems.contains(p) {
                        tracing::warn!(problem = %p, "DRA object not usable for scheduling");
                    }
                }
                self.device_problems = problems;
                cat
            }
        };
        cat.revision = self.device_revision;
        cat.unreadable = self.store.unreadable_devices();
        for job in in_flight {
            apply_in_flight(&mut cat, job);
        }
        let cat = Arc::new(cat);
        self.device_catalog = Some(cat.clone());
        cat
    }
}

/// Applies a write PreBind is making: the claim is allocated and reserved for the job's pods.
fn apply_in_flight(cat: &mut DeviceCatalog, job: &ClaimJob) {
    let Some(info) = cat.claims.get_mut(&job.claim) else {
        return;
    };
    let info = Arc::make_mut(info);
    if info.allocation.is_none()
        && let Some(a) = &job.allocation
    {
        for (_, d, admin) in &a.devices {
            if !admin {
                cat.allocated.insert(d.clone(), job.claim.clone());
            }
        }
        info.allocation = Some(Allocated {
            devices: a.devices.clone(),
            node_selector: a.node.as_ref().map(|n| vec![NodeSelectorTerm::node_name(n)]),
        });
    }
    for (name, uid) in &job.pods {
        if !info.reserved_for_pod(uid) {
            info.reserved_for.push(Consumer {
                api_group: "".into(),
                resource: "pods".into(),
                name: name.clone(),
                uid: uid.clone(),
            });
        }
    }
    // The holders are unknown until the store shows the pods bound: the devices stay held.
    cat.holders.remove(&job.claim);
}

/// The device side of the last rebuild ([`DeviceSide`]) with the resourceVersion of each DeviceClass and
/// ResourceSlice it was built from: a rebuild whose classes and slices are the same objects at the same versions
/// keeps it, and converts only the claims.
#[derive(Debug)]
pub(crate) struct KeptDevices {
    side: DeviceSide,
    classes: HashMap<String, String>,
    slices: HashMap<String, String>,
}

impl KeptDevices {
    fn build(classes: &[Arc<DeviceClass>], slices: &[Arc<ResourceSlice>]) -> KeptDevices {
        KeptDevices {
            side: DeviceSide::build(classes.iter().map(|c| &**c), slices.iter().map(|s| &**s)),
            classes: versions(classes.iter().map(|c| &c.metadata)),
            slices: versions(slices.iter().map(|s| &s.metadata)),
        }
    }

    /// Whether `classes` and `slices` are the objects this was built from: the same names, each at the same
    /// resourceVersion (an object without one never is).
    fn same_objects(&self, classes: &[Arc<DeviceClass>], slices: &[Arc<ResourceSlice>]) -> bool {
        same(&self.classes, classes.iter().map(|c| &c.metadata))
            && same(&self.slices, slices.iter().map(|s| &s.metadata))
    }
}

/// Name -> resourceVersion of the objects that have both.
fn versions<'a>(
    metas: impl Iterator<Item = &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>,
) -> HashMap<String, String> {
    metas
        .filter_map(|m| Some((m.name.clone()?, m.resource_version.clone()?)))
        .collect()
}

fn same<'a>(
    kept: &HashMap<String, String>,
    metas: impl ExactSizeIterator<Item = &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>,
) -> bool {
    metas.len() == kept.len()
        && metas.into_iter().all(|m| {
            let (Some(n), Some(v)) = (m.name.as_deref(), m.resource_version.as_deref()) else {
                return false;
            };
            kept.get(n).is_some_and(|k| k == v)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn slice(name: &str, rv: Option<&str>) -> Arc<ResourceSlice> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "resourceVersion": rv},
                "spec": {"driver": "d", "nodeName": name, "pool": {"name": name, "generation": 1,
                         "resourceSliceCount": 1}, "devices": [{"name": "gpu-0"}]},
            }))
            .expect("a ResourceSlice"),
        )
    }

    #[test]
    fn the_devices_are_kept_only_for_the_same_objects_at_the_same_versions() {
        let slices = vec![slice("a", Some("1")), slice("b", Some("1"))];
        let kept = KeptDevices::build(&[], &slices);
        assert!(kept.same_objects(&[], &slices));
        assert!(
            kept.same_objects(&[], &[slices[1].clone(), slices[0].clone()]),
            "order does not matter"
        );
        assert!(
            !kept.same_objects(&[], &[slices[0].clone(), slice("b", Some("2"))]),
            "a new version"
        );
        assert!(!kept.same_objects(&[], &slices[..1]), "a slice gone");
        assert!(
            !kept.same_objects(&[], &[slices[0].clone(), slice("c", Some("1"))]),
            "another slice"
        );
        let unversioned = vec![slice("a", None)];
        let k = KeptDevices::build(&[], &unversioned);
        assert!(
            !k.same_objects(&[], &unversioned),
            "an object without a resourceVersion is never the same"
        );
    }
}
