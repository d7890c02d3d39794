//! Unique, DNS-1123-valid object names for test namespaces.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Longest name a namespace may have (DNS-1123 label).
const MAX_NAME: usize = 63;

/// Returns `<prefix>-<suffix>` as a DNS-1123 label: the prefix lower-cased, characters outside `[a-z0-9-]` turned
/// into `-`, cut so the whole name fits in 63 characters; the 8-hex-digit suffix mixes the process id, the time and
/// a process-wide counter, so names differ across tests, test binaries and runs against a shared cluster.
pub(crate) fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    // splitmix64 finaliser: spreads the three inputs over all bits.
    let mut x = nanos ^ (u64::from(std::process::id()) << 32) ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    let suffix = format!("{:08x}", x as u32);

    let mut base: String = prefix
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .collect();
    base.truncate(MAX_NAME - suffix.len() - 1);
    let base = base.trim_matches('-');
    if base.is_empty() {
        format!("t-{suffix}")
    } else {
        format!("{base}-{suffix}")
    }
}

#[cfg(test)]
mod tests {
    use super::unique_name;

    fn is_dns1123_label(s: &str) -> bool {
        !s.is_empty()
            && s.len() <= 63
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !s.starts_with('-')
            && !s.ends_with('-')
    }

    #[test]
    fn names_are_valid_labels() {
        for prefix in ["gang", "Gang_Test.1", "", "---", &"x".repeat(100), "ünïcode"] {
            let n = unique_name(prefix);
            assert!(is_dns1123_label(&n), "{prefix:?} gave {n:?}");
        }
        assert!(unique_name("gang").starts_with("gang-"));
        assert!(unique_name("Gang_Test").starts_with("gang-test-"));
    }

    #[test]
    fn names_are_unique() {
        let names: std::collections::BTreeSet<_> = (0..1000).map(|_| unique_name("p")).collect();
        assert_eq!(names.len(), 1000);
    }
}
