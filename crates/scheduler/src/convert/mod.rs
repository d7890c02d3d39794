//! Conversion of API objects (core/v1 `Pod` and `Node`) into the model types of [`crate::model`].
//!
//! Everything the plugins need is derived once here, as upstream derives `framework.PodInfo`
//! and `framework.NodeInfo` once per object (`pkg/scheduler/framework/types.go`). The runtime
//! caches the results by resourceVersion.

mod dra;
mod node;
mod pod;
mod volumes;

pub use dra::{DeviceSide, device_catalog};
pub use volumes::{ANN_BIND_COMPLETED, ANN_SELECTED_NODE, csi_node_limits};

pub use pod::{is_succeeded, is_terminal};

/// Why an API object could not be converted: a bad quantity, label selector, taint effect or
/// enum value. The message names the part of the object (`container "app": ...`,
/// `node n1: ...`). A pod that fails conversion is still queued, with the message in
/// [`crate::model::PodInfo::invalid`], and its cycle reports it as a SchedulerError.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConvertError(pub String);

impl From<String> for ConvertError {
    fn from(message: String) -> Self {
        ConvertError(message)
    }
}
