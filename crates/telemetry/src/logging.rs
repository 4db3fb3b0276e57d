//! The process-wide `tracing` subscriber: logs on stderr (text or JSON), and, with the `otlp`
//! feature and an endpoint, the trace spans of calls exported over OTLP.

use std::io::IsTerminal;

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

/// The `tracing` target of the spans meant for trace export (a call, its pipeline stages and
/// host-service round trips, and the carrier of a client's `traceparent`). Logs never show
/// them; without trace export no layer wants them, so creating one costs an atomic load.
pub const TRACE_TARGET: &str = "quiver::trace";

/// The name of the span that carries a client's W3C trace context ([`remote_parent_span`]).
pub const REMOTE_PARENT_SPAN: &str = "remote_parent";

/// A layer of the process-wide subscriber.
pub(crate) type BoxedLayer = Box<dyn Layer<Registry> + Send + Sync>;

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

/// Keeps trace export running; dropping it flushes the spans not yet sent and stops the
/// exporter (drop it before the process exits).
#[derive(Default)]
pub struct TelemetryGuard {
    #[cfg(feature = "otlp")]
    provider: Option<opentelemetry_sdk::trace::SdkTracerProvider>,
}

impl std::fmt::Debug for TelemetryGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TelemetryGuard").finish_non_exhaustive()
    }
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        #[cfg(feature = "otlp")]
        if let Some(p) = self.provider.take()
            && let Err(e) = p.shutdown()
        {
            eprintln!("quiver: trace export: cannot flush the last spans: {e}");
        }
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
/// feature), the spans of [`TRACE_TARGET`] exported over OTLP/HTTP. Does nothing when a
/// subscriber is already installed. An export that cannot be set up is an error naming the
/// endpoint; logs are not affected by it.
pub fn init(format: LogFormat, otlp: Option<&OtlpSettings>) -> Result<TelemetryGuard, String> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // Trace spans are for the exporter only.
    let filter = match format!("{TRACE_TARGET}=off").parse() {
        Ok(d) => filter.add_directive(d),
        Err(_) => filter,
    };
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
    let (layers, guard) = with_export(vec![logs], otlp)?;
    match tracing_subscriber::registry().with(layers).try_init() {
        Ok(()) => Ok(guard),
        // Another subscriber is installed already (tests): keep it, export nothing.
        Err(_) => Ok(TelemetryGuard::default()),
    }
}

/// Adds the trace-export layers to `layers` when `otlp` is given.
#[cfg(feature = "otlp")]
fn with_export(
    mut layers: Vec<BoxedLayer>,
    otlp: Option<&OtlpSettings>,
) -> Result<(Vec<BoxedLayer>, TelemetryGuard), String> {
    let Some(settings) = otlp else { return Ok((layers, TelemetryGuard::default())) };
    let (provider, trace_layers) = crate::otlp::layers(settings)?;
    layers.extend(trace_layers);
    Ok((layers, TelemetryGuard { provider: Some(provider) }))
}

/// Without the `otlp` feature, asking for trace export is an error.
#[cfg(not(feature = "otlp"))]
fn with_export(
    layers: Vec<BoxedLayer>,
    otlp: Option<&OtlpSettings>,
) -> Result<(Vec<BoxedLayer>, TelemetryGuard), String> {
    match otlp {
        None => Ok((layers, TelemetryGuard::default())),
        Some(s) => Err(format!(
            "cannot export traces to {}: this build of quiver-telemetry has no `otlp` feature",
            s.traces_url
        )),
    }
}

/// The span that makes a client's span the parent of what runs inside it: instrument the
/// router's call with it, and the call span's parent is the span `traceparent` names (W3C
/// Trace Context; `tracestate` is kept). The span itself is not exported. Disabled (free) when
/// no trace context was sent or traces are not exported.
pub fn remote_parent_span(traceparent: Option<&str>, tracestate: Option<&str>) -> tracing::Span {
    match traceparent {
        Some(tp) => tracing::info_span!(
            target: "quiver::trace",
            "remote_parent",
            traceparent = tp,
            tracestate = tracestate.unwrap_or("")
        ),
        None => tracing::Span::none(),
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
