//! The one exponential backoff of the workspace's retry loops (the store's discovery of custom owner kinds, the
//! controllers' per-object error policy): `base`, doubling per failure, capped. The shape of client-go's
//! `wait.Backoff` with `Factor: 2` and a `Cap` (`k8s.io/apimachinery/pkg/util/wait/backoff.go`), without jitter,
//! and which API errors are worth another try.

use std::time::Duration;

/// The wait after the `failures`-th consecutive failure (1 = the first): `base * 2^(failures-1)`, at most `max`.
/// `failures` 0 is read as 1; the exponent stops at 20, so no multiplication overflows.
pub fn backoff(base: Duration, failures: u32, max: Duration) -> Duration {
    let shift = failures.saturating_sub(1).min(20);
    base.saturating_mul(1u32 << shift).min(max)
}

/// True for an API call that failed because the API server could not answer it then: throttled (429), a server
/// error (5xx), or no answer at all (connection refused or reset, timeout, TLS). The same call may pass later. False
/// for what another try cannot change: an answer that refuses the request (other 4xx), or a request or response
/// that could not be built or read. The split of client-go's `IsServerTimeout`/`IsTooManyRequests`/
/// `IsInternalError` and its transport errors (`k8s.io/apimachinery/pkg/api/errors/errors.go`).
pub fn is_unavailable(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 429 || s.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => true,
        _ => false,
    }
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

    #[test]
    fn unavailable_is_throttling_server_errors_and_no_answer() {
        let status =
            |code: u16| kube::Error::Api(Box::new(kube::core::Status::failure("x", "y").with_code(code)));
        assert!(is_unavailable(&status(429)));
        assert!(is_unavailable(&status(503)));
        assert!(!is_unavailable(&status(409)));
        assert!(!is_unavailable(&status(422)));
        let refused = kube::Error::Service(Box::new(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused,
        )));
        assert!(is_unavailable(&refused));
        let bad_body = kube::Error::SerdeError(serde_json::from_str::<u8>("x").unwrap_err());
        assert!(!is_unavailable(&bad_body));
    }
}
