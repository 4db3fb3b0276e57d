//! Logging and trace-export setup of the `quiver` process: which log format (`--log-format`,
//! `QUIVER_LOG_FORMAT`, the configuration's `telemetry.log_format`, else text) and, for `serve`,
//! where trace spans go (`serve --otlp URL`, the configuration's `telemetry.otlp`, else the
//! standard `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `OTEL_EXPORTER_OTLP_ENDPOINT`, else off).
//! Everything is written on stderr; stdout stays the command's output (in stdio mode, only
//! JSON-RPC messages).

use std::sync::OnceLock;

use quiver_manifest::{HostConfig, LogFormatConfig};
use quiver_telemetry::{LogFormat, OtlpSettings};

/// The log format in force (set once by [`init`]).
static FORMAT: OnceLock<LogFormat> = OnceLock::new();

/// The configuration file the command will read, when there is one and it parses; errors are
/// left to [`crate::settings::Settings::load`], which reports them properly.
fn peek_config(g: &crate::GlobalArgs) -> Option<HostConfig> {
    let cwd = std::env::current_dir().ok()?;
    let (path, _) = crate::config_file::locate(g.config.as_deref(), &cwd).ok()??;
    let path = cwd.join(path);
    let text = std::fs::read_to_string(&path).ok()?;
    crate::config_file::parse(&path, &text, &path.display().to_string()).ok()
}

/// The OTLP/HTTP traces URL for a collector base URL (`/v1/traces` appended unless present).
pub fn traces_url(base: &str) -> String {
    let base = base.trim_end_matches('/');
    if base.ends_with("/v1/traces") { base.to_owned() } else { format!("{base}/v1/traces") }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Where `serve` exports traces: `--otlp`, then `telemetry.otlp`, then the standard variables.
pub fn otlp_settings(flag: Option<&str>, config: Option<&HostConfig>) -> Option<OtlpSettings> {
    let configured = config.and_then(|c| c.telemetry.otlp.as_ref());
    let service_name = configured
        .map(|o| o.service_name.clone())
        .or_else(|| env("OTEL_SERVICE_NAME"))
        .unwrap_or_else(|| "quiver".to_owned());
    let traces_url = match (flag, configured) {
        (Some(url), _) => traces_url(url),
        (None, Some(o)) => traces_url(&o.endpoint),
        (None, None) => match env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
            // The per-signal variable is the full URL, as the OTLP specification says.
            Some(url) => url,
            None => traces_url(&env("OTEL_EXPORTER_OTLP_ENDPOINT")?),
        },
    };
    Some(OtlpSettings { traces_url, service_name })
}

/// Installs logging (and, for `serve` with an endpoint, trace export). Keep the guard until
/// the command ends: dropping it sends the spans not yet exported.
pub fn init(
    g: &crate::GlobalArgs,
    otlp_flag: Option<&str>,
    serving: bool,
) -> Result<quiver_telemetry::TelemetryGuard, String> {
    let needs_config = g.log_format.is_none() || (serving && otlp_flag.is_none());
    let config = if needs_config { peek_config(g) } else { None };
    let format = match (&g.log_format, config.as_ref().and_then(|c| c.telemetry.log_format)) {
        (Some(f), _) => f.parse()?,
        (None, Some(LogFormatConfig::Json)) => LogFormat::Json,
        (None, _) => LogFormat::Text,
    };
    let _ = FORMAT.set(format);
    let otlp = if serving { otlp_settings(otlp_flag, config.as_ref()) } else { None };
    if otlp.is_some() {
        // https collectors: reqwest's rustls needs the process-wide crypto provider.
        quiver_lifecycle::install_tls_provider();
    }
    quiver_telemetry::init(format, otlp.as_ref())
}

/// A notice for the operator on stderr (a bound address, a rejected bundle): a plain line, or
/// in JSON log mode a JSON object like the log lines (`level`, `target`, `message`).
pub fn notice(level: &str, message: &str) {
    if FORMAT.get() == Some(&LogFormat::Json) {
        eprintln!("{}", serde_json::json!({ "level": level, "target": "quiver", "message": message }));
    } else {
        eprintln!("{message}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_get_the_traces_path_once() {
        assert_eq!(traces_url("http://127.0.0.1:4318"), "http://127.0.0.1:4318/v1/traces");
        assert_eq!(traces_url("http://c:4318/"), "http://c:4318/v1/traces");
        assert_eq!(traces_url("https://c/otlp/v1/traces"), "https://c/otlp/v1/traces");
    }

    #[test]
    fn the_flag_wins_over_the_configuration() {
        let config = HostConfig::from_yaml(
            "telemetry:\n  otlp: {endpoint: 'http://from-config:4318', service_name: svc}\n",
            "quiver.yaml",
        )
        .unwrap();
        let s = otlp_settings(Some("http://flag:4318"), Some(&config)).unwrap();
        assert_eq!(s.traces_url, "http://flag:4318/v1/traces");
        assert_eq!(s.service_name, "svc");
        let s = otlp_settings(None, Some(&config)).unwrap();
        assert_eq!(s.traces_url, "http://from-config:4318/v1/traces");
    }

    #[test]
    fn a_bad_telemetry_section_is_refused_naming_the_field() {
        let e = HostConfig::from_yaml("telemetry:\n  log_format: yaml\n", "quiver.yaml").unwrap_err().to_string();
        assert!(e.contains("log_format"), "{e}");
        let e =
            HostConfig::from_yaml("telemetry:\n  otlp: {service_name: x}\n", "quiver.yaml").unwrap_err().to_string();
        assert!(e.contains("endpoint"), "{e}");
    }
}
