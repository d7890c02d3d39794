//! Polling helper for "eventually" assertions against the API.

use std::future::Future;
use std::time::Duration;

use anyhow::{Context as _, bail};

/// Interval between two polls.
const POLL: Duration = Duration::from_millis(100);

/// Polls `probe` every 100 ms until it returns `Ok(Some(value))`, and returns that value.
///
/// `Ok(None)` means "not yet"; an `Err` also counts as "not yet" (API errors are often transient while objects
/// settle) and is kept for the message. After `timeout` the error names `what` and the last probe error, so a test
/// failure says what was awaited. `timeout` is wall-clock time.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last_err: Option<anyhow::Error> = None;
    loop {
        match probe().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last_err = Some(e),
        }
        if tokio::time::Instant::now() >= deadline {
            return match last_err {
                Some(e) => Err(e).with_context(|| format!("timed out after {timeout:?} waiting for {what}")),
                None => bail!("timed out after {timeout:?} waiting for {what}"),
            };
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test]
    async fn returns_first_ready_value() {
        let calls = AtomicU32::new(0);
        let v = wait_for("third call", Duration::from_secs(5), || async {
            let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
            if n == 2 {
                anyhow::bail!("transient")
            }
            Ok((n >= 3).then_some(n))
        })
        .await
        .unwrap();
        assert_eq!(v, 3);
    }

    #[tokio::test]
    async fn timeout_names_what_and_last_error() {
        let err = wait_for::<(), _, _>("the impossible", Duration::from_millis(250), || async {
            anyhow::bail!("still broken")
        })
        .await
        .unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains("the impossible"), "{msg}");
        assert!(msg.contains("still broken"), "{msg}");
    }
}
