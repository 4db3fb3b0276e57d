//! The process-wide `tracing` subscriber.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Installs the `tracing` subscriber: human-readable lines on **stderr** (never stdout, which the
/// MCP stdio transport owns), level from `RUST_LOG` (default `info`), colours only on a terminal
/// and never when `NO_COLOR` is set ([`use_color`]). Calling it again (or after another
/// subscriber was installed) does nothing.
pub fn init_logging() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let color = use_color(std::io::stderr().is_terminal(), std::env::var_os("NO_COLOR").as_deref());
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(color).try_init();
}

/// Colours in logs: only on a terminal, and not when `NO_COLOR` is set to a non-empty value
/// (<https://no-color.org>).
pub fn use_color(terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

#[cfg(test)]
mod tests {
    #[test]
    fn no_color_turns_colours_off() {
        use std::ffi::OsStr;
        assert!(super::use_color(true, None));
        assert!(!super::use_color(true, Some(OsStr::new("1"))));
        assert!(super::use_color(true, Some(OsStr::new(""))));
        assert!(!super::use_color(false, None));
    }

    #[test]
    fn init_twice_is_harmless() {
        super::init_logging();
        super::init_logging();
        tracing::info!("logging works after two inits");
    }
}
