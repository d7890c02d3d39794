//! Log setup: `tracing` with an `EnvFilter` (`RUST_LOG`, default `info`) and a JSON or text formatter.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::cli::LogFormat;

/// Installs the global tracing subscriber, writing to stderr (colours only on a terminal). Calling it twice (e.g. from tests that start several operators in one
/// process) is harmless: the second call keeps the first subscriber.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(true)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    // `try_init` fails only if a subscriber is already set; that is fine.
    let _ = match format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init(),
        LogFormat::Text => builder.try_init(),
    };
}
