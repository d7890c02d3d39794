//! The one exponential backoff of the workspace's retry loops (the store's discovery of custom owner kinds, the
//! controllers' per-object error policy): `base`, doubling per failure, capped. The shape of client-go's
//! `wait.Backoff` with `Factor: 2` and a `Cap` (`k8s.io/apimachinery/pkg/util/wait/backoff.go`), without jitter.

use std::time::Duration;

/// The wait after the `failures`-th consecutive failure (1 = the first): `base * 2^(failures-1)`, at most `max`.
/// `failures` 0 is read as 1; the exponent stops at 20, so no multiplication overflows.
pub fn backoff(base: Duration, failures: u32, max: Duration) -> Duration {
    let shift = failures.saturating_sub(1).min(20);
    base.saturating_mul(1u32 << shift).min(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_and_caps() {
        let b = Duration::from_secs(1);
        let max = Duration::from_secs(300);
        let waits: Vec<u64> = (0..=10).map(|n| backoff(b, n, max).as_secs()).collect();
        assert_eq!(waits, [1, 1, 2, 4, 8, 16, 32, 64, 128, 256, 300]);
        assert_eq!(backoff(b, u32::MAX, max), max);
    }
}
