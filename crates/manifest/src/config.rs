//! The host configuration (`quiver.yaml`): where plugins live, which keys are trusted, and the
//! exposure profiles sessions run under. Read like a manifest: YAML → JSON Schema
//! (`schemas/quiver-config.schema.json`) → typed model → semantic checks. No I/O: paths are kept
//! as written (relative ones are resolved by the caller against the config file's folder) and
//! key files are read by the caller.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use crate::error::{Issue, ManifestError, excerpt, field, index};
use crate::model::RateLimits;
use crate::schema::{ConfigSchemaCode, QUIVER_CONFIG_SCHEMA, SchemaCheck};
use crate::secret::SecretRef;
use crate::signature::PublicKey;
use crate::validate::{SCOPE_FIX, TOOL_NAME_FIX, is_scope, is_tool_name};
use crate::yaml;

/// The configuration format this crate reads (`config_version`).
pub const CONFIG_VERSION: u32 = 1;

const SCHEMA_FILE: &str = "schemas/quiver-config.schema.json";

pub(crate) fn config_schema() -> &'static SchemaCheck {
    static SCHEMA: SchemaCheck = SchemaCheck::new(SCHEMA_FILE, QUIVER_CONFIG_SCHEMA, ConfigSchemaCode::is_valid);
    &SCHEMA
}

/// The host configuration. Every field is optional in the file; missing ones take the values of
/// [`HostConfig::default`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HostConfig {
    /// Configuration format version; [`CONFIG_VERSION`]. Default 1.
    pub config_version: u32,
    /// Folder scanned for bundles, relative to the configuration file's folder (the caller
    /// resolves it). Default `plugins`.
    pub plugins_dir: PathBuf,
    /// Milliseconds between rescans of `plugins_dir`; 0 disables rescans. Default 3000.
    pub rescan_interval_ms: u64,
    /// Public keys whose signatures are accepted. Default none (so nothing loads unless
    /// `allow_unsigned` is on).
    pub trusted_keys: Vec<KeySource>,
    /// DEVELOPMENT ONLY: load bundles that have no signature file (a bad signature is still
    /// refused). Default false.
    pub allow_unsigned: bool,
    /// Production hardening, default true: group/world-writable bundle files and folders are
    /// refused (else warned about), and a bundle re-signed with the same version but other
    /// bytes is refused.
    pub strict: bool,
    /// State kept across restarts (the rollback record), relative to the configuration file's
    /// folder. Default `.quiver-state`.
    pub state_dir: PathBuf,
    /// Revoked signing keys and sha256s. Default none.
    pub revoked: Revocations,
    /// Where verified libraries are copied before loading; `None`: a private temporary folder.
    /// Default `None`.
    pub cache_dir: Option<PathBuf>,
    /// Largest plugin library accepted, in bytes. Default 64 MiB.
    pub max_library_bytes: u64,
    /// What happens when two plugins claim one tool name. Default [`NameConflicts::Error`].
    pub name_conflicts: NameConflicts,
    /// Profile used when a session neither requests one nor matches any profile's `clients`.
    /// Default `agent`.
    pub default_profile: String,
    /// Exposure profiles by name. Giving `profiles` replaces the defaults entirely. Default: `agent`
    /// (mode hybrid, all scopes) and `plan` (mode lazy, all scopes; callers wanting a read-only
    /// planning profile narrow its `scopes`).
    pub profiles: BTreeMap<String, Profile>,
    /// Call transcripts.
    pub transcripts: TranscriptConfig,
    /// Log format and trace export.
    pub telemetry: TelemetryConfig,
    /// Router tuning.
    pub router: RouterConfig,
    /// MCP server limits.
    pub server: ServerConfig,
    /// Settings per plugin id, passed to that plugin's tools with every call
    /// (`ToolRequest.config`). Default none.
    pub plugin_config: BTreeMap<String, serde_json::Value>,
    /// Secrets per plugin id, then per secret name (as the plugin's manifest declares it under
    /// `secrets`): where each value comes from (`{ env: VAR }` or `{ file: PATH }`). Resolved
    /// when the plugin loads; a declared secret with no source here refuses the load.
    /// Default none.
    pub secrets: BTreeMap<String, BTreeMap<String, SecretRef>>,
    /// Rate limits per tool name (canonical), overriding the manifest's `policies.rate_limit`
    /// scope by scope. Default none.
    pub rate_limits: BTreeMap<String, RateLimits>,
    /// Where plugins run: in the host process or in sandboxed worker processes.
    pub isolation: IsolationConfig,
    /// Upstream MCP servers whose tools join the catalog. Default none.
    pub sources: Vec<crate::sources::UpstreamConfig>,
    /// Where sessions are kept so they can resume (a reconnect, a restart, another instance).
    pub sessions: SessionsConfig,
    /// Tool search: an optional local embedding model fused with the lexical ranking.
    pub search: SearchSettings,
}

/// The `search` section: tool search.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SearchSettings {
    /// A local static-embedding model in the model2vec format (a folder holding
    /// `model.safetensors` and `tokenizer.json`), relative to quiver.yaml's folder. Text search
    /// then fuses the lexical ranking with the model's (reciprocal rank fusion). Needs a `quiver`
    /// built with the `semantic` feature; never downloaded. Default none: lexical ranking only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embedding: Option<PathBuf>,
    /// The model's vote in the fusion, the lexical ranking's being 1 (0 to 10). Only with
    /// `embedding`. Default 0.2, chosen on the tuning half of a tool-search benchmark
    /// (docs/BENCHMARKS.md); measure another with `quiver eval search`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub semantic_weight: Option<f64>,
}

/// The `sessions` section: the session store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SessionsConfig {
    /// `memory` (this process only; the default), `file` (`<state_dir>/sessions`: survives a
    /// restart of one instance), or `redis://[:PASSWORD@]HOST[:PORT][/DB]` (also `valkey://`):
    /// shared by every `quiver serve --http` instance behind a load balancer.
    pub store: String,
    /// A stored session nobody used for this many milliseconds is forgotten, at least 1000.
    /// Default 86400000 (one day).
    pub ttl_ms: u64,
}

impl Default for SessionsConfig {
    fn default() -> SessionsConfig {
        SessionsConfig { store: "memory".to_owned(), ttl_ms: 86_400_000 }
    }
}

/// Where a plugin's code runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// Loaded into the host process: the fastest calls, and the host's full privileges.
    InProcess,
    /// In a worker process of its own, sandboxed to what its manifest declares; a crash or a
    /// hung call takes down only that worker.
    Process,
}

impl Isolation {
    /// The snake-case name used in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Isolation::InProcess => "in_process",
            Isolation::Process => "process",
        }
    }
}

/// The `isolation` section: which plugins run where, and the limits of worker processes.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IsolationConfig {
    /// For bundles no entry below names. Default (unset): follows trust: bundles signed by a
    /// `first_party` key run in-process, all others (other keys, unsigned) in a worker.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default: Option<Isolation>,
    /// Per plugin id; wins over `keys` and `default`.
    pub plugins: BTreeMap<String, Isolation>,
    /// Per trusted key name (`trusted_keys[].name`); wins over `default`.
    pub keys: BTreeMap<String, Isolation>,
    /// Limits of each worker process.
    pub worker: WorkerConfig,
}

/// Limits and behaviour of worker processes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkerConfig {
    /// Address-space limit of a worker, in MiB (`RLIMIT_AS`); 0: none. Default 4096.
    pub max_memory_mb: u64,
    /// CPU time a worker may use over its life, in seconds (`RLIMIT_CPU`); 0: none. Default 0.
    pub max_cpu_seconds: u64,
    /// After a call's deadline, how long the worker has to stop the call before it is killed
    /// and restarted, in milliseconds. Default 200.
    pub kill_grace_ms: u64,
    /// Crashes within `crash_window_ms` after which a worker is not restarted again (until its
    /// bundle changes or the host restarts). Default 5.
    pub max_crashes: u32,
    /// The window for `max_crashes`, in milliseconds. Default 60000.
    pub crash_window_ms: u64,
    /// Environment variables passed to workers (their environment is otherwise empty but for
    /// `PATH` and `LANG`). Default none.
    pub env: Vec<String>,
}

impl Default for WorkerConfig {
    fn default() -> WorkerConfig {
        WorkerConfig {
            max_memory_mb: 4096,
            max_cpu_seconds: 0,
            kill_grace_ms: 200,
            max_crashes: 5,
            crash_window_ms: 60_000,
            env: Vec::new(),
        }
    }
}

/// One trusted public key: exactly one of `path` (a minisign `.pub` file, relative to the
/// configuration file's folder) or `key` (the base64 key line), and an optional name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeySource {
    /// A human name shown in logs (`local-dev`); default: the key id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A minisign `.pub` file, read by the caller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    /// The base64 public key line, inline (`RWQ...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The operator's own key (or one it trusts as much): bundles it signs may run inside the
    /// host process, the fast path. Default false: they run in sandboxed worker processes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub first_party: bool,
    /// Plugin id globs this key may sign; `None`: any id (a warning is logged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugins: Option<Vec<String>>,
}

/// Revoked signing keys and sha256s (of libraries or bundle manifests).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Revocations {
    /// Key ids: hex, with or without leading zeros (`minisign` prints them without).
    pub keys: Vec<String>,
    /// sha256s (64 lower-case hex digits).
    pub sha256: Vec<String>,
}

impl Revocations {
    /// True when the key id is revoked. Ids compare as numbers: any case, any leading zeros.
    pub fn key_revoked(&self, key_id: &str) -> bool {
        let Some(id) = parse_key_id(key_id) else { return false };
        self.keys.iter().any(|k| parse_key_id(k) == Some(id))
    }
    /// True when the sha256 is revoked.
    pub fn sha256_revoked(&self, sha256: &str) -> bool {
        self.sha256.iter().any(|s| s.eq_ignore_ascii_case(sha256))
    }
}

impl KeySource {
    /// The inline key parsed, when `key` is given.
    pub fn inline_key(&self) -> Option<Result<PublicKey, crate::KeyError>> {
        self.key.as_deref().map(PublicKey::parse)
    }
}

/// How tools are exposed to a session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExposureMode {
    /// Every visible tool is typed on the first turn.
    Full,
    /// The typed set follows what the session uses, within the budgets.
    Adaptive,
    /// The `eager` core is typed up front; the rest is found by search and loaded on demand.
    #[default]
    Hybrid,
    /// Only the search/load meta-tools up front; everything else on demand.
    Lazy,
}

/// What to do with a call that needs a person's confirmation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalMode {
    /// Ask the client's user; refuse when the client cannot be asked.
    #[default]
    Ask,
    /// Refuse such calls.
    Deny,
    /// Run them without asking (trusted automation only).
    Allow,
}

/// What happens when two plugins claim the same tool name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NameConflicts {
    /// The later plugin is refused.
    #[default]
    Error,
    /// Both are kept, each name prefixed by its plugin id.
    Namespace,
}

/// An exposure profile: which tools a session sees, how, and under which scopes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Profile {
    /// How tools are exposed. Default [`ExposureMode::Hybrid`].
    pub mode: ExposureMode,
    /// Tool names always typed on the first-turn surface (the core). Default none.
    pub eager: Vec<String>,
    /// Tool names neither visible nor callable in this profile. Default none.
    pub gated: Vec<String>,
    /// Scopes the session holds; `*` means all. Default `["*"]`.
    pub scopes: Vec<String>,
    /// Client-name globs (`*` matches any run of characters, case-insensitive) that select this
    /// profile, e.g. `claude-code*`. Default none.
    pub clients: Vec<String>,
    /// Most tools typed at once, 1 to 64. Default 16.
    pub max_typed_tools: u32,
    /// Bytes of serialized typed schemas per turn, at least 256. Default 12288.
    pub byte_budget: u64,
    /// What to do with tools needing confirmation. Default [`ApprovalMode::Ask`].
    pub approval: ApprovalMode,
    /// Whether a result with structured content also carries it as JSON text (for clients that
    /// do not read `structuredContent`). Default true.
    pub structured_text: bool,
}

impl Default for Profile {
    fn default() -> Profile {
        Profile {
            mode: ExposureMode::Hybrid,
            eager: Vec::new(),
            gated: Vec::new(),
            scopes: vec!["*".to_owned()],
            clients: Vec::new(),
            max_typed_tools: 16,
            byte_budget: 12_288,
            approval: ApprovalMode::Ask,
            structured_text: true,
        }
    }
}

impl Profile {
    /// True when `client_name` matches one of [`Profile::clients`].
    pub fn matches_client(&self, client_name: &str) -> bool {
        self.clients.iter().any(|glob| glob_matches(glob, client_name))
    }
}

/// Call transcripts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TranscriptConfig {
    /// When set, every call is recorded there as JSON lines (relative to the configuration
    /// file's folder). Default `None` (no transcripts).
    pub dir: Option<PathBuf>,
}

/// Log format and trace export (`telemetry:`). Command-line flags and environment variables
/// (`--log-format`/`QUIVER_LOG_FORMAT`, `serve --otlp`/`OTEL_EXPORTER_OTLP_*`) win over these.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// `text` (default) or `json`: how log lines are written on stderr.
    pub log_format: Option<LogFormatConfig>,
    /// Export trace spans over OTLP/HTTP (protobuf) while serving. Default `None` (off).
    pub otlp: Option<OtlpConfig>,
}

/// How log lines are written on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormatConfig {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Where `quiver serve` exports trace spans.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OtlpConfig {
    /// The collector's OTLP/HTTP base URL (`http://127.0.0.1:4318`); `/v1/traces` is appended
    /// unless the URL already ends with it.
    pub endpoint: String,
    /// The `service.name` of the exported spans. Default `quiver`.
    #[serde(default = "default_service_name")]
    pub service_name: String,
}

fn default_service_name() -> String {
    "quiver".to_owned()
}

/// Router tuning.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RouterConfig {
    /// Consecutive failures that open a tool's circuit breaker, at least 1. Default 5.
    pub breaker_failures: u32,
    /// How long an open breaker refuses calls, in milliseconds. Default 30000.
    pub breaker_cooldown_ms: u64,
    /// Base delay of retry backoff, in milliseconds. Default 50.
    pub retry_base_ms: u64,
    /// How long a truncated result stays retrievable by handle, in milliseconds, at least 1.
    /// Default 300000.
    pub result_handle_ttl_ms: u64,
    /// Calls running at once across all tools, at least 1. Default 256.
    pub max_concurrency: u32,
}

impl Default for RouterConfig {
    fn default() -> RouterConfig {
        RouterConfig {
            breaker_failures: 5,
            breaker_cooldown_ms: 30_000,
            retry_base_ms: 50,
            result_handle_ttl_ms: 300_000,
            max_concurrency: 256,
        }
    }
}

/// MCP server limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Largest incoming message, in bytes, at least 1024. Default 4 MiB.
    pub max_message_bytes: u64,
    /// Browser origins (`scheme://host[:port]`) allowed to reach the HTTP transport. Default none.
    pub allowed_origins: Vec<String>,
    /// HTTP authentication; `None`: none (only a loopback bind is allowed then).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth: Option<AuthConfig>,
    /// Most HTTP sessions at once, at least 1. Default 256.
    pub max_sessions: u32,
    /// Idle HTTP sessions are closed after this many milliseconds, at least 1000. Default 600000.
    pub session_idle_timeout_ms: u64,
    /// Most requests in flight per HTTP session, at least 1. Default 64.
    pub max_requests_per_session: u32,
}

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            max_message_bytes: 4 * 1024 * 1024,
            allowed_origins: Vec::new(),
            auth: None,
            max_sessions: 256,
            session_idle_timeout_ms: 600_000,
            max_requests_per_session: 64,
        }
    }
}

/// HTTP authentication (the server is an OAuth 2.1 protected resource, as the MCP authorization
/// spec describes).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// This server's canonical URI, advertised in the protected resource metadata.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    /// Authorization servers' issuer URLs, advertised in the protected resource metadata.
    pub authorization_servers: Vec<String>,
    /// Static bearer tokens, stored as sha256 hashes.
    pub tokens: Vec<BearerToken>,
    /// JWT validation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jwt: Option<JwtConfig>,
    /// Profile per principal (token principal or JWT `sub`).
    pub principals: BTreeMap<String, String>,
    /// Principals allowed to read the operator endpoints (`/metrics`, the dashboard's data),
    /// which show every tool whatever the principal's scopes. Default none.
    pub operators: Vec<String>,
}

/// A static bearer token, stored as the sha256 of its text.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BearerToken {
    /// Who holds it.
    pub principal: String,
    /// sha256 (hex) of the token text.
    pub sha256: String,
    /// Profile for its sessions (overrides `principals`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
}

/// JWT validation settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JwtConfig {
    /// Required `iss`.
    pub issuer: String,
    /// Required `aud`.
    pub audience: String,
    /// JWKS file, relative to the configuration file's folder (read by the caller).
    pub jwks_file: PathBuf,
    /// Allowed clock skew in seconds. Default 30.
    #[serde(default = "default_leeway")]
    pub leeway_s: u64,
}

fn default_leeway() -> u64 {
    30
}

impl Default for HostConfig {
    /// The configuration of an empty `quiver.yaml`: see each field's documentation.
    fn default() -> HostConfig {
        let profiles = BTreeMap::from([
            ("agent".to_owned(), Profile::default()),
            ("plan".to_owned(), Profile { mode: ExposureMode::Lazy, ..Profile::default() }),
        ]);
        HostConfig {
            config_version: CONFIG_VERSION,
            plugins_dir: PathBuf::from("plugins"),
            rescan_interval_ms: 3000,
            trusted_keys: Vec::new(),
            allow_unsigned: false,
            strict: true,
            state_dir: PathBuf::from(".quiver-state"),
            revoked: Revocations::default(),
            cache_dir: None,
            max_library_bytes: 64 * 1024 * 1024,
            name_conflicts: NameConflicts::Error,
            default_profile: "agent".to_owned(),
            profiles,
            transcripts: TranscriptConfig::default(),
            telemetry: TelemetryConfig::default(),
            router: RouterConfig::default(),
            server: ServerConfig::default(),
            plugin_config: BTreeMap::new(),
            secrets: BTreeMap::new(),
            rate_limits: BTreeMap::new(),
            isolation: IsolationConfig::default(),
            sources: Vec::new(),
            sessions: SessionsConfig::default(),
            search: SearchSettings::default(),
        }
    }
}

impl HostConfig {
    /// Reads and checks a configuration. `origin` names the file in messages (`quiver.yaml`).
    /// An empty file gives [`HostConfig::default`].
    pub fn from_yaml(text: &str, origin: &str) -> Result<HostConfig, ManifestError> {
        Self::from_yaml_with(text, origin, |_| false).map(|(config, _)| config)
    }

    /// [`HostConfig::from_yaml`] for a caller that records which texts passed the JSON Schema
    /// check: `checked_before` is asked, with the configuration read from the text, whether
    /// exactly this text passed it before (in this host build); if so the schema check (and
    /// compiling the configuration schema) is skipped. The configuration model and the semantic
    /// checks always run. Also says whether the schema check ran now (and passed).
    pub fn from_yaml_with(
        text: &str,
        origin: &str,
        checked_before: impl FnOnce(&HostConfig) -> bool,
    ) -> Result<(HostConfig, bool), ManifestError> {
        let mut value = yaml::parse(text).map_err(|issues| ManifestError::new(origin, issues))?;
        if value.is_null() {
            value = serde_json::Value::Object(serde_json::Map::new());
        }
        let read: Result<HostConfig, _> = serde_path_to_error::deserialize(&value);
        let model_error = |e: serde_path_to_error::Error<serde_json::Error>| {
            ManifestError::single(origin, crate::error::model_issue(e, "configuration", SCHEMA_FILE))
        };
        if read.as_ref().is_ok_and(checked_before) {
            let config = read.map_err(model_error)?;
            config.validate(origin)?;
            return Ok((config, false));
        }
        let issues = config_schema().check(&value);
        if !issues.is_empty() {
            return Err(ManifestError::new(origin, issues));
        }
        let config = read.map_err(model_error)?;
        config.validate(origin)?;
        Ok((config, true))
    }

    /// The semantic checks (also run by [`HostConfig::from_yaml`]), for configurations built in
    /// code.
    pub fn validate(&self, origin: &str) -> Result<(), ManifestError> {
        let issues = semantic_issues(self);
        if issues.is_empty() { Ok(()) } else { Err(ManifestError::new(origin, issues)) }
    }

    /// The profile named `name`.
    pub fn profile(&self, name: &str) -> Option<&Profile> {
        self.profiles.get(name)
    }

    /// The profile for a session: the `requested` one when it exists; else the first profile (in
    /// name order) with a `clients` glob matching `client_name`; else the default profile. An
    /// unknown `requested` name falls through (callers that must refuse it check
    /// [`HostConfig::profile`] first). With no profiles at all, returns the default profile's
    /// name and [`Profile::default`].
    pub fn profile_for(&self, client_name: &str, requested: Option<&str>) -> (&str, &Profile) {
        if let Some((name, profile)) = requested.and_then(|r| self.profiles.get_key_value(r)) {
            return (name, profile);
        }
        if let Some((name, profile)) = self.profiles.iter().find(|(_, p)| p.matches_client(client_name)) {
            return (name, profile);
        }
        if let Some((name, profile)) = self.profiles.get_key_value(&self.default_profile) {
            return (name, profile);
        }
        static FALLBACK: OnceLock<Profile> = OnceLock::new();
        (&self.default_profile, FALLBACK.get_or_init(Profile::default))
    }
}

/// `*` matches any run of characters; everything else matches itself, ignoring ASCII case.
/// Used for profile `clients` and trusted keys' `plugins`.
pub fn glob_matches(glob: &str, text: &str) -> bool {
    let glob = glob.to_ascii_lowercase();
    let text = text.to_ascii_lowercase();
    let mut parts = glob.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = text.strip_prefix(first) else { return false };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty(); // no `*`: exact match
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// A key id as minisign prints it (hex, up to 16 digits, leading zeros optional).
fn parse_key_id(s: &str) -> Option<u64> {
    let s = s.trim();
    if s.is_empty() || s.len() > 16 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(s, 16).ok()
}

fn is_profile_name(s: &str) -> bool {
    s.len() <= 64
        && s.starts_with(|c: char| c.is_ascii_lowercase())
        && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

fn is_origin(s: &str) -> bool {
    let Some((scheme, host)) = s.split_once("://") else { return false };
    scheme.starts_with(|c: char| c.is_ascii_lowercase())
        && scheme.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '+' | '.' | '-'))
        && !host.is_empty()
        && !host.contains(['/', '?', '#', '*'])
        && !host.chars().any(char::is_whitespace)
}

fn semantic_issues(cfg: &HostConfig) -> Vec<Issue> {
    let mut issues = Vec::new();
    let mut push = |path: String, message: String, fix: &str| issues.push(Issue::new(path, message, fix));
    if cfg.config_version != CONFIG_VERSION {
        push(
            "config_version".into(),
            format!(
                "configuration version {} is not supported; this host reads version {CONFIG_VERSION}",
                cfg.config_version
            ),
            "write `config_version: 1`",
        );
    }
    if cfg.plugins_dir.as_os_str().is_empty() {
        push("plugins_dir".into(), "the plugins folder must not be empty".into(), "name a folder, e.g. `plugins`");
    }
    if let Some(weight) = cfg.search.semantic_weight {
        if cfg.search.embedding.is_none() {
            push(
                "search.semantic_weight".into(),
                "a fusion weight is set but no embedding model: it would weigh nothing".into(),
                "set `search.embedding` to a model2vec model folder, or remove `semantic_weight`",
            );
        } else if !(0.0..=10.0).contains(&weight) {
            push(
                "search.semantic_weight".into(),
                format!("the fusion weight {weight} is outside 0 to 10"),
                "write a number from 0 (the model ranks nothing) to 10; the default is 0.2",
            );
        }
    }
    let mut key_names = BTreeMap::new();
    for (n, source) in cfg.trusted_keys.iter().enumerate() {
        let at = index("trusted_keys", n);
        match (&source.path, &source.key) {
            (Some(_), Some(_)) | (None, None) => push(
                at.clone(),
                "a trusted key needs exactly one of `path` and `key`".into(),
                "give `path` (a minisign .pub file) or `key` (its base64 key line), not both",
            ),
            (Some(path), None) if path.as_os_str().is_empty() => {
                push(field(&at, "path"), "the key file path is empty".into(), "name the minisign .pub file")
            }
            _ => {}
        }
        if let Some(Err(e)) = source.inline_key() {
            push(
                field(&at, "key"),
                e.to_string(),
                "paste the second line of the minisign .pub file (it starts with `RW`)",
            );
        }
        if let Some(name) = &source.name {
            if name.trim().is_empty() {
                push(
                    field(&at, "name"),
                    "the key name is empty".into(),
                    "name the key (e.g. `local-dev`) or remove `name`",
                );
            } else if let Some(first) = key_names.insert(name.clone(), n) {
                push(
                    field(&at, "name"),
                    format!("key name `{name}` is already used by trusted_keys[{first}]"),
                    "give each trusted key its own name",
                );
            }
        }
    }
    for name in cfg.isolation.keys.keys() {
        if !cfg.trusted_keys.iter().any(|k| k.name.as_deref() == Some(name.as_str())) {
            push(
                format!("isolation.keys.{name}"),
                format!("no trusted key is named `{}`", excerpt(name)),
                "use the `name` of an entry of trusted_keys",
            );
        }
    }
    if cfg.max_library_bytes == 0 {
        push(
            "max_library_bytes".into(),
            "a library size limit of 0 refuses every plugin".into(),
            "use a positive size, e.g. 67108864",
        );
    }
    if !cfg.profiles.is_empty() && !cfg.profiles.contains_key(&cfg.default_profile) {
        let names = cfg.profiles.keys().map(String::as_str).collect::<Vec<_>>().join(", ");
        push(
            "default_profile".into(),
            format!("default profile `{}` is not among the profiles ({names})", excerpt(&cfg.default_profile)),
            "name one of the profiles, or add a profile with that name",
        );
    }
    for (name, profile) in &cfg.profiles {
        let at = field("profiles", name);
        if !is_profile_name(name) {
            push(
                at.clone(),
                format!("profile name `{}` is not valid", excerpt(name)),
                "use a lower-case letter, then lower-case letters, digits, `_` or `-` (at most 64 characters)",
            );
        }
        for (list, names) in [("eager", &profile.eager), ("gated", &profile.gated)] {
            for (n, tool) in names.iter().enumerate() {
                if !is_tool_name(tool) {
                    push(
                        index(&field(&at, list), n),
                        format!("`{}` is not a valid tool name", excerpt(tool)),
                        TOOL_NAME_FIX,
                    );
                }
            }
        }
        for (n, tool) in profile.eager.iter().enumerate() {
            if profile.gated.contains(tool) {
                push(
                    index(&field(&at, "eager"), n),
                    format!("`{tool}` is both eager and gated"),
                    "remove it from one of the two lists (gated tools are never visible)",
                );
            }
        }
        for (n, scope) in profile.scopes.iter().enumerate() {
            if scope != "*" && !is_scope(scope) {
                push(index(&field(&at, "scopes"), n), format!("`{}` is not a valid scope", excerpt(scope)), SCOPE_FIX);
            }
        }
        for (n, glob) in profile.clients.iter().enumerate() {
            if glob.trim().is_empty() {
                push(
                    index(&field(&at, "clients"), n),
                    "the client glob is empty".into(),
                    "write a client name or glob, e.g. `claude-code*`",
                );
            }
        }
        if !(1..=64).contains(&profile.max_typed_tools) {
            push(
                field(&at, "max_typed_tools"),
                format!("{} typed tools is out of range", profile.max_typed_tools),
                "use 1 to 64",
            );
        }
        if profile.byte_budget < 256 {
            push(
                field(&at, "byte_budget"),
                format!("a budget of {} bytes is too small", profile.byte_budget),
                "use at least 256",
            );
        }
    }
    if cfg.router.breaker_failures == 0 {
        push("router.breaker_failures".into(), "0 failures would keep every breaker open".into(), "use at least 1");
    }
    if cfg.router.result_handle_ttl_ms == 0 {
        push("router.result_handle_ttl_ms".into(), "result handles would expire at once".into(), "use at least 1");
    }
    if cfg.router.max_concurrency == 0 {
        push("router.max_concurrency".into(), "a concurrency of 0 would block every call".into(), "use at least 1");
    }
    if cfg.server.max_message_bytes < 1024 {
        push(
            "server.max_message_bytes".into(),
            format!("{} bytes is too small for MCP messages", cfg.server.max_message_bytes),
            "use at least 1024",
        );
    }
    if let Some(auth) = &cfg.server.auth {
        let known = |p: &str| cfg.profiles.is_empty() || cfg.profiles.contains_key(p);
        for (n, t) in auth.tokens.iter().enumerate() {
            if let Some(p) = &t.profile
                && !known(p)
            {
                push(
                    field(&index("server.auth.tokens", n), "profile"),
                    format!("profile `{}` is not among the profiles", excerpt(p)),
                    "name one of the profiles",
                );
            }
            if t.sha256.len() != 64 || !t.sha256.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
                push(
                    field(&index("server.auth.tokens", n), "sha256"),
                    "a token is stored as its sha256: 64 lower-case hex digits".into(),
                    "run `quiver token --principal NAME` and paste the sha256 it prints",
                );
            }
        }
        for (principal, p) in &auth.principals {
            if !known(p) {
                push(
                    field("server.auth.principals", principal),
                    format!("profile `{}` is not among the profiles", excerpt(p)),
                    "name one of the profiles",
                );
            }
        }
        if auth.tokens.is_empty() && auth.jwt.is_none() {
            push(
                "server.auth".into(),
                "authentication is configured without any `tokens` or `jwt`, so nobody could connect".into(),
                "add a bearer token (`quiver token`) or a `jwt` section",
            );
        }
    }
    if cfg.server.max_sessions == 0 {
        push("server.max_sessions".into(), "0 sessions would refuse every client".into(), "use at least 1");
    }
    if cfg.server.session_idle_timeout_ms < 1000 {
        push("server.session_idle_timeout_ms".into(), "an idle timeout under 1 s".into(), "use at least 1000");
    }
    if cfg.server.max_requests_per_session == 0 {
        push("server.max_requests_per_session".into(), "0 requests per session".into(), "use at least 1");
    }
    let store = cfg.sessions.store.as_str();
    if !(store == "memory"
        || store == "file"
        || store.starts_with("redis://")
        || store.starts_with("valkey://")
        || store.starts_with("redis+unix://"))
    {
        push(
            "sessions.store".into(),
            format!("`{store}` is not a session store"),
            "use `memory`, `file`, or a Redis/Valkey URL such as redis://127.0.0.1:6379/0",
        );
    }
    if cfg.sessions.ttl_ms < 1000 {
        push("sessions.ttl_ms".into(), "a session lifetime under 1 s".into(), "use at least 1000");
    }
    crate::sources::source_issues(&cfg.sources, &mut push);
    for (n, key) in cfg.revoked.keys.iter().enumerate() {
        if parse_key_id(key).is_none() {
            push(
                index("revoked.keys", n),
                format!("`{}` is not a key id, so this revocation would match nothing", excerpt(key)),
                "write the key id as `quiver verify` or `minisign` prints it: up to 16 hex digits",
            );
        }
    }
    for (n, sha) in cfg.revoked.sha256.iter().enumerate() {
        if sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
            push(
                index("revoked.sha256", n),
                format!("`{}` is not a sha256, so this revocation would match nothing", excerpt(sha)),
                "write the 64 hex digits `sha256sum` or `quiver verify --json` prints",
            );
        }
    }
    for (n, origin) in cfg.server.allowed_origins.iter().enumerate() {
        if !is_origin(origin) {
            push(
                index("server.allowed_origins", n),
                format!("`{}` is not an origin", excerpt(origin)),
                "write `scheme://host[:port]` with no path or wildcard, e.g. `http://localhost:3000`",
            );
        }
    }
    issues
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_revoked_key_id_matches_as_a_number_whatever_its_padding_or_case() {
        // minisign prints key ids without leading zeros (`minisign public key 9A2…`), we print 16 digits.
        let revoked = Revocations { keys: vec!["9a2b3c4d5e6f708".into()], sha256: vec![] };
        assert!(revoked.key_revoked("09A2B3C4D5E6F708"));
        assert!(!revoked.key_revoked("19A2B3C4D5E6F708"));
        let padded = Revocations { keys: vec!["09A2B3C4D5E6F708".into()], sha256: vec![] };
        assert!(padded.key_revoked("9A2B3C4D5E6F708"));
        assert!(!Revocations { keys: vec!["not hex".into()], sha256: vec![] }.key_revoked("0"));
    }

    #[test]
    fn a_revocation_that_could_match_nothing_is_refused_by_name() {
        let mut cfg = HostConfig::default();
        cfg.revoked.keys = vec!["E7620F1842B4E81F".into(), "E7620F18-42B4".into()];
        cfg.revoked.sha256 = vec!["ab".repeat(32), "abc".into()];
        let err = cfg.validate("quiver.yaml").unwrap_err().to_string();
        assert!(err.contains("revoked.keys[1]") && err.contains("not a key id"), "{err}");
        assert!(err.contains("revoked.sha256[1]") && err.contains("not a sha256"), "{err}");
        assert!(!err.contains("revoked.keys[0]") && !err.contains("revoked.sha256[0]"), "{err}");
    }

    #[test]
    fn a_fusion_weight_needs_a_model_and_a_sensible_number() {
        let ok = HostConfig::from_yaml("search: {embedding: models/m, semantic_weight: 0.5}\n", "q.yaml").unwrap();
        assert_eq!(ok.search.semantic_weight, Some(0.5));
        let alone = HostConfig::from_yaml("search: {semantic_weight: 0.5}\n", "q.yaml").unwrap_err().to_string();
        assert!(alone.contains("search.semantic_weight") && alone.contains("search.embedding"), "{alone}");
        let big =
            HostConfig::from_yaml("search: {embedding: m, semantic_weight: 11}\n", "q.yaml").unwrap_err().to_string();
        assert!(big.contains("search.semantic_weight"), "{big}");
        // Built in code, the schema is not there to stop it: the semantic check is.
        let mut cfg = HostConfig::default();
        cfg.search.embedding = Some("m".into());
        cfg.search.semantic_weight = Some(-1.0);
        let err = cfg.validate("q.yaml").unwrap_err().to_string();
        assert!(err.contains("search.semantic_weight") && err.contains("outside 0 to 10"), "{err}");
    }

    /// A text recorded as checked before skips only the JSON Schema check: the configuration
    /// model and the semantic checks still run; any other answer checks the schema as before.
    #[test]
    fn a_text_checked_before_skips_only_the_schema_check() {
        // A plugin id that is not one fits the model (a map key) but not the schema's pattern.
        let text = "rescan_interval_ms: 7\nisolation:\n  plugins:\n    Not_An_Id: process\n";
        let schema = HostConfig::from_yaml(text, "quiver.yaml").unwrap_err().to_string();
        assert!(schema.contains("isolation.plugins"), "{schema}");
        let mut seen = None;
        let err = HostConfig::from_yaml_with(text, "quiver.yaml", |c| {
            seen = Some(c.rescan_interval_ms);
            false
        })
        .unwrap_err();
        assert_eq!(err.to_string(), schema);
        assert_eq!(seen, Some(7), "asked with the configuration read from the text");
        let (config, checked_now) = HostConfig::from_yaml_with(text, "quiver.yaml", |_| true).unwrap();
        assert!(!checked_now);
        assert_eq!(config.rescan_interval_ms, 7);
        let (_, checked_now) = HostConfig::from_yaml_with("rescan_interval_ms: 7\n", "quiver.yaml", |_| false).unwrap();
        assert!(checked_now);
        // The model and the semantic checks run whatever the record says.
        let model = HostConfig::from_yaml_with("rescan_interval_ms: soon\n", "quiver.yaml", |_| true).unwrap_err();
        assert!(model.to_string().contains("rescan_interval_ms"), "{model}");
        let semantic = "revoked:\n  keys: [\"E7620F18-42B4\"]\n";
        let semantic = HostConfig::from_yaml_with(semantic, "quiver.yaml", |_| true).unwrap_err().to_string();
        assert!(semantic.contains("revoked.keys[0]") && semantic.contains("not a key id"), "{semantic}");
    }

    #[test]
    fn globs() {
        assert!(glob_matches("claude-code*", "claude-code"));
        assert!(glob_matches("claude-code*", "Claude-Code 1.2"));
        assert!(glob_matches("*", ""));
        assert!(glob_matches("*cursor*", "my-cursor-client"));
        assert!(glob_matches("a*b*c", "aXbYc"));
        assert!(!glob_matches("a*b*c", "aXcYb"));
        assert!(!glob_matches("exact", "exactly"));
        assert!(glob_matches("exact", "EXACT"));
        assert!(!glob_matches("ab*ba", "aba"));
    }

    #[test]
    fn defaults() {
        let cfg = HostConfig::default();
        assert_eq!(HostConfig::from_yaml("", "quiver.yaml").unwrap(), cfg);
        assert_eq!(HostConfig::from_yaml("{}\n", "quiver.yaml").unwrap(), cfg);
        assert_eq!(cfg.profiles["agent"].mode, ExposureMode::Hybrid);
        assert_eq!(cfg.profiles["plan"].mode, ExposureMode::Lazy);
        assert_eq!(cfg.profile_for("anything", None).0, "agent");
        assert_eq!(cfg.profile_for("anything", Some("plan")).0, "plan");
        assert_eq!(cfg.profile_for("anything", Some("nope")).0, "agent");
        assert!(cfg.validate("x").is_ok());
    }

    #[test]
    fn profile_selection_by_client() {
        let cfg = HostConfig::from_yaml(
            "default_profile: main\nprofiles:\n  main: {}\n  ide: {clients: [\"cursor*\", \"*vscode*\"], mode: full}\n",
            "q.yaml",
        )
        .unwrap();
        assert_eq!(cfg.profile_for("Cursor 0.4", None).0, "ide");
        assert_eq!(cfg.profile_for("github-vscode-chat", None).1.mode, ExposureMode::Full);
        assert_eq!(cfg.profile_for("claude", None).0, "main");
        assert_eq!(cfg.profile_for("cursor", Some("main")).0, "main");
        let empty = HostConfig { profiles: BTreeMap::new(), ..HostConfig::default() };
        assert_eq!(empty.profile_for("x", None), ("agent", &Profile::default()));
    }
}
