//! Helpers shared by the driver's real-cluster test binaries.

use prometheus_client::registry::Registry;

/// Prints how many cycles found the snapshot kept between cycles different from a fresh build (verification is on
/// in debug builds). Not asserted: a watch event not yet handled by the loop shows in the fresh build only.
pub fn report_snapshot_mismatches(registry: &Registry) {
    let mut s = String::new();
    prometheus_client::encoding::text::encode(&mut s, registry).unwrap_or_default();
    if let Some(line) = s
        .lines()
        .find(|l| l.starts_with("phalanx_scheduler_snapshot_mismatches_total") && !l.ends_with(" 0"))
    {
        eprintln!("snapshot verification: {line}");
    }
}

#[allow(dead_code)]
pub mod cluster;
#[allow(dead_code)]
pub mod devices;
#[allow(dead_code)]
pub mod volumes;
