//! The process-wide `tracing` subscriber.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Installs the `tracing` subscriber: human-readable lines on **stderr** (never stdout, which the
/// MCP stdio transport owns), level from `RUST_LOG` (default `info`), colours only on a terminal.
/// Calling it again (or after another subscriber was installed) does nothing.
pub fn init_logging() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

#[cfg(test)]
mod tests {
    #[test]
    fn init_twice_is_harmless() {
        super::init_logging();
        super::init_logging();
        tracing::info!("logging works after two inits");
    }
}
