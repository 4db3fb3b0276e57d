//! The process-wide `tracing` subscriber (logs on stderr, text or JSON), and, with the `otlp`
//! feature and an endpoint, the trace exporter of calls (`otlp.rs`).

use std::io::IsTerminal;

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

/// A layer of the process-wide subscriber.
type BoxedLayer = Box<dyn Layer<Registry> + Send + Sync>;

/// How log lines are written on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// Human-readable lines (colours only on a terminal).
    #[default]
    Text,
    /// One JSON object per line (`timestamp`, `level`, `target`, `message` and the event's
    /// fields at the top level), for log shippers.
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<LogFormat, String> {
        match s.to_ascii_lowercase().as_str() {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!("unknown log format `{other}`: use `text` or `json`")),
        }
    }
}

/// Where and how to export traces (OTLP over HTTP with protobuf bodies).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpSettings {
    /// The full URL export requests are POSTed to (e.g. `http://127.0.0.1:4318/v1/traces`).
    pub traces_url: String,
    /// The `service.name` resource attribute.
    pub service_name: String,
}

/// Keeps trace export running; dropping it exports the calls' traces not yet sent and stops
/// the exporter (drop it before the process exits).
#[derive(Default)]
pub struct TelemetryGuard {
    #[cfg(feature = "otlp")]
    _export: Option<crate::otlp::ExportThread>,
}

impl std::fmt::Debug for TelemetryGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TelemetryGuard").finish_non_exhaustive()
    }
}

/// Installs the `tracing` subscriber: text lines on **stderr** (never stdout, which the MCP
/// stdio transport owns), level from `RUST_LOG` (default `info`), colours only on a terminal
/// and never when `NO_COLOR` is set ([`use_color`]). Calling it again (or after another
/// subscriber was installed) does nothing.
pub fn init_logging() {
    let _ = init(LogFormat::Text, None);
}

/// Installs the `tracing` subscriber: logs on **stderr** in `format`, filtered by `RUST_LOG`
/// (default `info`), and, when `otlp` is given (and the crate is built with the `otlp`
/// feature), starts the trace exporter ([`crate::trace_export`] then hands out its queue for
/// the router). The subscriber is not replaced when one is installed already. An export that
/// cannot be set up is an error naming the endpoint.
pub fn init(format: LogFormat, otlp: Option<&OtlpSettings>) -> Result<TelemetryGuard, String> {
    let guard = start_export(otlp)?;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let color = use_color(std::io::stderr().is_terminal(), std::env::var_os("NO_COLOR").as_deref());
    let logs: BoxedLayer = match format {
        LogFormat::Text => {
            tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(color).with_filter(filter).boxed()
        }
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .with_writer(std::io::stderr)
            .with_filter(filter)
            .boxed(),
    };
    // Another subscriber may be installed already (tests): it is kept.
    let _ = tracing_subscriber::registry().with(logs).try_init();
    Ok(guard)
}

/// Starts the trace exporter when `otlp` is given, and makes it the process's
/// [`crate::trace_export`].
#[cfg(feature = "otlp")]
fn start_export(otlp: Option<&OtlpSettings>) -> Result<TelemetryGuard, String> {
    let Some(settings) = otlp else { return Ok(TelemetryGuard::default()) };
    let export = crate::otlp::start(settings)?;
    crate::trace::set_trace_export(export.export().clone());
    Ok(TelemetryGuard { _export: Some(export) })
}

/// Without the `otlp` feature, asking for trace export is an error.
#[cfg(not(feature = "otlp"))]
fn start_export(otlp: Option<&OtlpSettings>) -> Result<TelemetryGuard, String> {
    match otlp {
        None => Ok(TelemetryGuard::default()),
        Some(s) => Err(format!(
            "cannot export traces to {}: this build of quiver-telemetry has no `otlp` feature",
            s.traces_url
        )),
    }
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

    #[test]
    fn log_formats_parse_and_unknown_ones_say_which_exist() {
        assert_eq!("JSON".parse::<super::LogFormat>(), Ok(super::LogFormat::Json));
        assert_eq!("text".parse::<super::LogFormat>(), Ok(super::LogFormat::Text));
        let e = "yaml".parse::<super::LogFormat>().unwrap_err();
        assert!(e.contains("yaml") && e.contains("text") && e.contains("json"), "{e}");
    }
}
