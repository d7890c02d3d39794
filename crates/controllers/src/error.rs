//! The error type of the reconcilers and how it is classified for logs, metrics and backoff.

use std::time::Duration;

/// Errors a reconcile can return. Invalid user objects are **not** errors: they become a `Valid=False`
/// condition and an event, so they never enter the error backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A call to the API server failed.
    #[error("kubernetes API call failed: {0}")]
    Kube(#[from] kube::Error),
    /// Building a patch body failed (a bug, not a cluster condition).
    #[error("serializing a patch failed: {0}")]
    Serialize(#[from] serde_json::Error),
    /// The object read from the cache lacks a field the API server always sets (name, namespace, uid).
    #[error("object is missing {0}")]
    MissingField(&'static str),
}

/// Result alias of the reconcilers.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Short label for the `phalanx_controller_reconcile_errors_total{error=...}` metric.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(kube::Error::Api(s)) if s.is_conflict() => "conflict",
            Error::Kube(kube::Error::Api(s)) if s.is_not_found() => "not_found",
            Error::Kube(kube::Error::Api(s)) if s.code == 429 => "throttled",
            Error::Kube(kube::Error::Api(s)) if s.code >= 500 => "server",
            Error::Kube(kube::Error::Api(_)) => "api",
            Error::Kube(_) => "transport",
            Error::Serialize(_) => "serialize",
            Error::MissingField(_) => "missing_field",
        }
    }

    /// True for errors that heal on their own and are expected in normal operation: optimistic-concurrency
    /// conflicts (our cache lagged a write), a deleted object, server throttling and transient server errors.
    /// These are logged at debug/warn level, never at error level.
    pub fn is_transient(&self) -> bool {
        matches!(
            self.metric_label(),
            "conflict" | "not_found" | "throttled" | "server" | "transport"
        )
    }

    /// First retry delay for this error; the error policy doubles it per consecutive failure.
    pub fn base_delay(&self) -> Duration {
        match self.metric_label() {
            "conflict" | "not_found" => Duration::from_millis(100),
            _ => Duration::from_millis(500),
        }
    }
}

/// Exponential backoff `base * 2^(failures-1)`, capped at `max`.
pub fn backoff(base: Duration, failures: u32, max: Duration) -> Duration {
    let shift = failures.saturating_sub(1).min(20);
    base.saturating_mul(1u32 << shift).min(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        let b = Duration::from_millis(100);
        let max = Duration::from_secs(60);
        assert_eq!(backoff(b, 1, max), Duration::from_millis(100));
        assert_eq!(backoff(b, 2, max), Duration::from_millis(200));
        assert_eq!(backoff(b, 4, max), Duration::from_millis(800));
        assert_eq!(backoff(b, 40, max), max);
        assert_eq!(backoff(b, 0, max), b);
    }

    #[test]
    fn classification() {
        let conflict = Error::Kube(kube::Error::Api(Box::new(kube::core::Status {
            code: 409,
            reason: "Conflict".into(),
            ..Default::default()
        })));
        assert_eq!(conflict.metric_label(), "conflict");
        assert!(conflict.is_transient());
        let invalid = Error::Kube(kube::Error::Api(Box::new(kube::core::Status {
            code: 422,
            reason: "Invalid".into(),
            ..Default::default()
        })));
        assert_eq!(invalid.metric_label(), "api");
        assert!(!invalid.is_transient());
        assert!(!Error::MissingField("metadata.uid").is_transient());
    }
}
