//! Router configuration.

use std::path::PathBuf;
use std::time::Duration;

/// How the router protects tools and callers. Per-tool values (timeout, retries, result size,
/// concurrency, confirmation) come from each tool's manifest policies; these are host-wide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouterSettings {
    /// Consecutive failed calls of one tool that open its circuit breaker.
    pub breaker_failures: u32,
    /// How long an open breaker refuses calls before letting one probe through (half-open).
    pub breaker_cooldown: Duration,
    /// First retry delay; doubled per retry, with jitter (each delay is drawn from
    /// `[d/2, d]`).
    pub retry_base: Duration,
    /// How long the full text of a truncated result stays retrievable by its handle.
    pub result_handle_ttl: Duration,
    /// Calls running at once across all tools (each tool also has its own
    /// `policies.max_concurrency`).
    pub max_concurrency: usize,
    /// When set, every call is appended to `<dir>/<session id>.jsonl`.
    pub transcript_dir: Option<PathBuf>,
    /// Settings per plugin id (host config `plugin_config`), sent to the plugin's tools as
    /// `ToolRequest.config` unless a call brings its own.
    pub plugin_config: std::collections::BTreeMap<String, serde_json::Value>,
    /// Rate limits per canonical tool name (host config `rate_limits`), overriding each tool's
    /// manifest `policies.rate_limit` scope by scope.
    pub rate_limits: std::collections::BTreeMap<String, quiver_manifest::RateLimits>,
    /// Plugin secrets per plugin id and name (host config `secrets`, resolved). Each tool's
    /// requests carry the ones its manifest declares.
    pub secrets: std::collections::BTreeMap<String, std::collections::BTreeMap<String, quiver_manifest::Secret>>,
}

impl Default for RouterSettings {
    fn default() -> Self {
        RouterSettings {
            breaker_failures: 5,
            breaker_cooldown: Duration::from_secs(30),
            retry_base: Duration::from_millis(100),
            result_handle_ttl: Duration::from_secs(600),
            max_concurrency: 256,
            transcript_dir: None,
            plugin_config: Default::default(),
            rate_limits: Default::default(),
            secrets: Default::default(),
        }
    }
}
