//! Finalizer names (upstream: `scheduling.k8s.io/podgroup-protection`, added by the PodGroupProtection
//! admission plugin and removed by the podgroup-protection controller; KEP-6012 extends it to CPGs).

/// Kept on a PodGroup while any non-terminal pod references it.
pub const POD_GROUP_PROTECTION: &str = "scheduling.phalanx.dev/podgroup-protection";

/// Kept on a CompositePodGroup while any child group references it.
pub const COMPOSITE_POD_GROUP_PROTECTION: &str = "scheduling.phalanx.dev/compositepodgroup-protection";
