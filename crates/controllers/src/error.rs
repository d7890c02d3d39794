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

/// What kind of failure an [`Error`] is; decides the log level, the metric label and the retry delay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// 409: our cache lagged our own write (optimistic concurrency). Heals at once.
    Conflict,
    /// 404: the object was deleted meanwhile. Heals at once.
    NotFound,
    /// 429: the API server throttles us (API Priority and Fairness).
    Throttled,
    /// 5xx: a transient server error.
    Server,
    /// Any other API status (4xx): usually a bug in what we sent.
    Api,
    /// The connection failed (timeout, reset, TLS).
    Transport,
    /// A patch body could not be built (a bug).
    Serialize,
    /// An object lacks a field the API server always sets.
    MissingField,
}

impl ErrorKind {
    /// Label for the `phalanx_controller_reconcile_errors_total{error=...}` metric.
    pub fn metric_label(self) -> &'static str {
        match self {
            ErrorKind::Conflict => "conflict",
            ErrorKind::NotFound => "not_found",
            ErrorKind::Throttled => "throttled",
            ErrorKind::Server => "server",
            ErrorKind::Api => "api",
            ErrorKind::Transport => "transport",
            ErrorKind::Serialize => "serialize",
            ErrorKind::MissingField => "missing_field",
        }
    }

    /// True for failures that heal on their own and are expected in normal operation: conflicts with our own
    /// stale cache, a deleted object, throttling, transient server and transport errors. These are logged at
    /// debug/warn level, never at error level.
    pub fn is_transient(self) -> bool {
        matches!(
            self,
            ErrorKind::Conflict
                | ErrorKind::NotFound
                | ErrorKind::Throttled
                | ErrorKind::Server
                | ErrorKind::Transport
        )
    }

    /// True for failures expected as part of normal optimistic concurrency (logged at debug level).
    pub fn is_expected(self) -> bool {
        matches!(self, ErrorKind::Conflict | ErrorKind::NotFound)
    }

    /// First retry delay; the error policy doubles it per consecutive failure.
    pub fn base_delay(self) -> Duration {
        if self.is_expected() {
            Duration::from_millis(100)
        } else {
            Duration::from_millis(500)
        }
    }
}

impl Error {
    /// The kind of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Kube(kube::Error::Api(s)) if s.is_conflict() => ErrorKind::Conflict,
            Error::Kube(kube::Error::Api(s)) if s.is_not_found() => ErrorKind::NotFound,
            Error::Kube(kube::Error::Api(s)) if s.code == 429 => ErrorKind::Throttled,
            Error::Kube(kube::Error::Api(s)) if s.code >= 500 => ErrorKind::Server,
            Error::Kube(kube::Error::Api(_)) => ErrorKind::Api,
            Error::Kube(_) => ErrorKind::Transport,
            Error::Serialize(_) => ErrorKind::Serialize,
            Error::MissingField(_) => ErrorKind::MissingField,
        }
    }
}

/// Exponential backoff `base * 2^(failures-1)`, capped at `max` (defined once, in the store).
pub use phalanx_store::retry::backoff;

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
        assert_eq!(conflict.kind(), ErrorKind::Conflict);
        assert_eq!(conflict.kind().metric_label(), "conflict");
        assert!(conflict.kind().is_transient());
        let invalid = Error::Kube(kube::Error::Api(Box::new(kube::core::Status {
            code: 422,
            reason: "Invalid".into(),
            ..Default::default()
        })));
        assert_eq!(invalid.kind(), ErrorKind::Api);
        assert_eq!(invalid.kind().metric_label(), "api");
        assert!(!invalid.kind().is_transient());
        assert!(!Error::MissingField("metadata.uid").kind().is_transient());
    }
}
