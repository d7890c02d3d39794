//! The device side of the device catalog kept between rebuilds ([`KeptDevices`]): a rebuild after which every
//! DeviceClass and ResourceSlice is the same object at the same resourceVersion converts only the claims
//! ([`phalanx_scheduler::convert::DeviceSide`]), so the devices keep their identity, and with it the device
//! summary's per-node index and the selectors' results per device.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::resource::v1::{DeviceClass, ResourceSlice};
use phalanx_scheduler::convert::DeviceSide;

/// The device side of the last rebuild ([`DeviceSide`]) with the resourceVersion of each DeviceClass and
/// ResourceSlice it was built from: a rebuild whose classes and slices are the same objects at the same versions
/// keeps it, and converts only the claims.
#[derive(Debug)]
pub(crate) struct KeptDevices {
    /// The classes' selectors, the devices and the claims converted against them.
    pub(crate) side: DeviceSide,
    classes: HashMap<String, String>,
    slices: HashMap<String, String>,
}

impl KeptDevices {
    /// Built from these classes and slices.
    pub(crate) fn build(classes: &[Arc<DeviceClass>], slices: &[Arc<ResourceSlice>]) -> KeptDevices {
        KeptDevices {
            side: DeviceSide::build(classes.iter().map(|c| &**c), slices.iter().map(|s| &**s)),
            classes: versions(classes.iter().map(|c| &c.metadata)),
            slices: versions(slices.iter().map(|s| &s.metadata)),
        }
    }

    /// Whether `classes` and `slices` are the objects this was built from: the same names, each at the same
    /// resourceVersion (an object without one never is).
    pub(crate) fn same_objects(&self, classes: &[Arc<DeviceClass>], slices: &[Arc<ResourceSlice>]) -> bool {
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
