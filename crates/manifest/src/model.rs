//! The typed model of a plugin manifest (`tool.yaml`). Serde only; no I/O, no validation beyond
//! what the types express (see [`Manifest::from_yaml`] for the rest).

use semver::Version;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The manifest format this crate reads.
pub const MANIFEST_VERSION: u32 = 1;

/// A plugin manifest: who the plugin is, which library it ships, and its tools.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Manifest format version; [`MANIFEST_VERSION`].
    pub manifest_version: u32,
    /// Plugin id, kebab-case (`fs-tools`).
    pub id: String,
    /// Plugin version (semver). The host refuses to replace a loaded plugin with a lower one.
    pub version: Version,
    /// Human name.
    pub display_name: String,
    /// What the plugin offers, one or two sentences.
    pub description: String,
    /// ABI generation the library was built for (`quiver_abi::ABI_VERSION`).
    pub abi: u32,
    /// The library this manifest vouches for. Absent in the source manifest a plugin embeds;
    /// present (and signed) in a bundle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact: Option<Artifact>,
    /// A declarative adapter: the bundle ships no library; each tool's `invoke` runs a command
    /// or makes an HTTP request (see [`crate::AdapterSpec`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter: Option<crate::AdapterSpec>,
    /// What the plugin's code may reach when it runs in a sandboxed worker process: nothing
    /// but what is declared here (plus the system libraries it links against).
    #[serde(default, skip_serializing_if = "SandboxSpec::is_default")]
    pub sandbox: SandboxSpec,
    /// The JSON Schema (2020-12, `type: object`) of the plugin's entry in the host's
    /// `plugin_config`: the host checks the operator's entry against it when it loads the
    /// bundle, and refuses the bundle, naming the field, when it does not fit (see
    /// [`Manifest::config_issues`]). Absent: the plugin checks its configuration itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_schema: Option<Value>,
    /// The tools, in the order the author lists them.
    pub tools: Vec<ToolSpec>,
    /// Tools of this plugin the host calls when an MCP session starts and ends.
    #[serde(default, skip_serializing_if = "SessionHooks::is_empty")]
    pub hooks: SessionHooks,
}

/// Session hooks: tools of the same plugin the host calls, through the router like any call,
/// when a session starts (also when it resumes) and when it ends, with the arguments
/// `{event, session_id, profile, client, resumed}`. A hook runs only for sessions whose profile
/// may see its tool, within [`SessionHooks::TIMEOUT_MS`] (or the tool's shorter deadline);
/// its result is not sent to anyone, and its failure is logged, never failing the session.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionHooks {
    /// Called once a session is initialized (or resumed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_start: Option<String>,
    /// Called when a session ends (the client disconnects, DELETE, idle timeout, shutdown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_end: Option<String>,
}

impl SessionHooks {
    /// Longest a hook may run before the host gives up on it.
    pub const TIMEOUT_MS: u64 = 5_000;

    /// No hooks.
    pub fn is_empty(&self) -> bool {
        self.session_start.is_none() && self.session_end.is_none()
    }
}

/// The resources a plugin declares it needs; a worker's sandbox grants exactly these.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxSpec {
    /// Folders and files the plugin reads or writes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub filesystem: Vec<PathGrant>,
    /// Outgoing and listening TCP connections (default: refused).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub network: bool,
}

impl SandboxSpec {
    /// Nothing declared.
    pub fn is_default(&self) -> bool {
        self == &SandboxSpec::default()
    }
}

/// One path a plugin may use. The path is fixed (`path`), or read from the operator's
/// `plugin_config` for the plugin (`config`: the name of a string setting), falling back to
/// `default` when the operator sets none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathGrant {
    /// An absolute path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The `plugin_config` setting that names the path (relative paths are resolved against
    /// the host's working folder).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
    /// When `config` is unset: `working_dir` (the host's working folder) or `none`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<PathDefault>,
    /// What the plugin may do there.
    pub access: PathAccess,
}

/// The fallback of a [`PathGrant`] whose `config` setting is unset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PathDefault {
    /// The host's working folder.
    WorkingDir,
    /// No access.
    None,
}

/// Access granted beneath a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PathAccess {
    /// Read files and list folders.
    Read,
    /// Also create, change, rename and delete.
    ReadWrite,
}

/// The library file of a bundle and its checksum.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Artifact {
    /// File name of the library, beside the manifest (no directories).
    pub file: String,
    /// Lower-case hex sha256 of the library bytes.
    pub sha256: String,
    /// The library's load report shipped in the bundle (`quiver sign --report`): what the
    /// library says about itself when loaded (its tools' schemas), so that a host with no kept
    /// report of its own lists the plugin without loading it first. Optional.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<ReportFile>,
}

/// A load report shipped in a bundle: a JSON file beside the manifest and its checksum. The
/// host reads it only when the signed sha256 matches, lists the plugin from it, and before any
/// call requires the library's own report to equal it byte for byte.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportFile {
    /// File name of the report, beside the manifest (no directories), ending in `.json`.
    pub file: String,
    /// Lower-case hex sha256 of the report's bytes.
    pub sha256: String,
}

/// One tool of a plugin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolSpec {
    /// Canonical name, unique across the host (`[a-z][a-z0-9_]*`, at most 64 chars).
    pub name: String,
    /// Short human title.
    pub title: String,
    /// What the tool does and when to use it; what a model reads.
    pub description: String,
    /// JSON Schema (2020-12) of the arguments; when absent, the schema derived from the tool's
    /// Rust input type (reported by the plugin) is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Value>,
    /// JSON Schema of the structured result; when absent, the derived one is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// Domain for routing and search filters (`filesystem`, `time`, `text`).
    #[serde(default)]
    pub domain: String,
    /// Capability keywords (`read`, `search`, `convert`).
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// Other names that reach this tool.
    #[serde(default)]
    pub aliases: Vec<AliasSpec>,
    /// A line of guidance shown with the tool when it is loaded into a session.
    #[serde(default)]
    pub prompt_snippet: String,
    /// Highest risk of the tool (of any of its actions).
    pub side_effects: SideEffects,
    /// True when repeating a call with the same arguments has no further effect (see
    /// [`ToolSpec::repeat_safe`]).
    #[serde(default)]
    pub idempotent: bool,
    /// Scopes a caller must hold to see or call the tool.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// Call policies.
    #[serde(default)]
    pub policies: PolicySpec,
    /// Lifecycle state of the canonical name.
    #[serde(default)]
    pub lifecycle: LifecycleSpec,
    /// For a consolidated multi-action tool: its actions. The input schema then has a string
    /// property `action` whose enum lists exactly these names.
    #[serde(default)]
    pub actions: Vec<ActionSpec>,
    /// User requests that should find this tool (search evaluation and contract tests).
    #[serde(default)]
    pub examples: Vec<String>,
    /// Names of the secrets the tool needs (names only, never values): the operator supplies
    /// each under `secrets.<plugin id>.<NAME>` in the host configuration, and the tool reads
    /// it from its request (`Context::secret`). A missing one refuses the bundle at load.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<String>,
    /// For a tool of an adapter bundle: how a call runs the command or makes the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invoke: Option<crate::InvokeSpec>,
}

impl ToolSpec {
    /// The risk of a call of `action` (the action's own when it names one of the tool's
    /// actions, else the tool's).
    #[inline]
    pub fn side_effects_of(&self, action: Option<&str>) -> SideEffects {
        action.and_then(|a| self.actions.iter().find(|x| x.name == a)).map_or(self.side_effects, |a| a.side_effects)
    }

    /// True when a call of `action` may be made again without thinking after an outcome the
    /// caller did not see (a timeout, a crash): it only reads, or the tool is idempotent.
    #[inline]
    pub fn repeat_safe(&self, action: Option<&str>) -> bool {
        self.idempotent || !self.side_effects_of(action).mutates()
    }
}

/// Risk class of a tool or action, ordered from least to most risky.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SideEffects {
    /// Reads only; no state changes.
    Read,
    /// Creates or changes state that can be changed back.
    Write,
    /// Deletes or overwrites irrecoverably.
    Destructive,
    /// Reaches outside the host (network, other systems).
    External,
}

impl SideEffects {
    /// True for anything but `read`.
    #[inline]
    pub fn mutates(self) -> bool {
        !matches!(self, SideEffects::Read)
    }
    /// The lower-case name used in manifests.
    pub fn as_str(self) -> &'static str {
        match self {
            SideEffects::Read => "read",
            SideEffects::Write => "write",
            SideEffects::Destructive => "destructive",
            SideEffects::External => "external",
        }
    }
}

/// Call policies as written in a manifest; unset fields take the host defaults
/// ([`PolicySpec::effective`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicySpec {
    /// A person must confirm each call. Default: true for destructive tools, else false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirmation: Option<bool>,
    /// Deadline of a call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Retries of retryable errors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<u32>,
    /// Result bytes kept before truncation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_result_bytes: Option<u64>,
    /// Calls of this tool running at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<u32>,
    /// Where calls run (default [`Execution::Thread`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution: Option<Execution>,
    /// Call rate limits (token buckets); default none. The host configuration's
    /// `rate_limits.<tool>` overrides them scope by scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimits>,
}

/// Rate limits of one tool, each a token bucket; an unset scope is unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimits {
    /// Across every caller of the tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<RateLimit>,
    /// Per MCP session (one client connection, one CLI run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<RateLimit>,
    /// Per authenticated principal (HTTP auth); callers without one share one bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<RateLimit>,
}

impl RateLimits {
    /// True when no scope is limited.
    pub fn is_empty(&self) -> bool {
        self.tool.is_none() && self.session.is_none() && self.principal.is_none()
    }
    /// These limits with every scope `over` sets replaced by its value.
    pub fn overridden_by(self, over: &RateLimits) -> RateLimits {
        RateLimits {
            tool: over.tool.or(self.tool),
            session: over.session.or(self.session),
            principal: over.principal.or(self.principal),
        }
    }
}

/// A token bucket: `per_minute` calls a minute on average, `burst` at once (default: the
/// per-minute figure, at least 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimit {
    /// Sustained calls per minute, at least 1.
    pub per_minute: u32,
    /// Calls allowed at once after an idle period, at least 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
}

impl RateLimit {
    /// The bucket size.
    pub fn burst(&self) -> u32 {
        self.burst.unwrap_or(self.per_minute).max(1)
    }
}

/// Where a tool's calls run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Execution {
    /// On a blocking thread: the caller gets its timeout at the deadline even if the tool hangs.
    #[default]
    Thread,
    /// On the calling task, saving the thread handoff; for tools that always answer within
    /// microseconds and never block. Their deadline is checked after they return.
    Inline,
}

/// Policies with every default applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policies {
    /// A person must confirm each call.
    pub confirmation: bool,
    /// Deadline of a call, milliseconds.
    pub timeout_ms: u64,
    /// Retries of retryable errors.
    pub retries: u32,
    /// Result bytes kept before truncation.
    pub max_result_bytes: u64,
    /// Calls of this tool running at once.
    pub max_concurrency: u32,
    /// Where calls run.
    pub execution: Execution,
    /// Rate limits from the manifest (the host may override them).
    pub rate_limit: RateLimits,
}

impl Policies {
    /// Default deadline.
    pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;
    /// Default result size cap.
    pub const DEFAULT_MAX_RESULT_BYTES: u64 = 64 * 1024;
    /// Default concurrency per tool.
    pub const DEFAULT_MAX_CONCURRENCY: u32 = 32;
}

impl PolicySpec {
    /// Applies the defaults for a tool of the given risk.
    pub fn effective(&self, side_effects: SideEffects) -> Policies {
        Policies {
            confirmation: self.confirmation.unwrap_or(side_effects == SideEffects::Destructive),
            timeout_ms: self.timeout_ms.unwrap_or(Policies::DEFAULT_TIMEOUT_MS),
            retries: self.retries.unwrap_or(0),
            max_result_bytes: self.max_result_bytes.unwrap_or(Policies::DEFAULT_MAX_RESULT_BYTES),
            max_concurrency: self.max_concurrency.unwrap_or(Policies::DEFAULT_MAX_CONCURRENCY),
            execution: self.execution.unwrap_or_default(),
            rate_limit: self.rate_limit.unwrap_or_default(),
        }
    }
}

/// The five lifecycle states of a tool name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LifecycleState {
    /// In the first-turn surface.
    #[default]
    Active,
    /// Registered and findable by search; loaded into a session on demand.
    Deferred,
    /// Dispatchable with identical behaviour; absent from the surface and from search; silent.
    HiddenCompatibility,
    /// Like hidden-compatibility, and each call's result metadata names the replacement.
    Deprecated,
    /// Not dispatchable; a call is an error naming the replacement and the removing version.
    Removed,
}

impl LifecycleState {
    /// The kebab-case name used in manifests.
    pub fn as_str(self) -> &'static str {
        match self {
            LifecycleState::Active => "active",
            LifecycleState::Deferred => "deferred",
            LifecycleState::HiddenCompatibility => "hidden-compatibility",
            LifecycleState::Deprecated => "deprecated",
            LifecycleState::Removed => "removed",
        }
    }
    /// Shown in surfaces and search (active, deferred).
    pub fn is_visible(self) -> bool {
        matches!(self, LifecycleState::Active | LifecycleState::Deferred)
    }
    /// Can be called (everything but removed).
    pub fn is_dispatchable(self) -> bool {
        !matches!(self, LifecycleState::Removed)
    }
}

/// Lifecycle of a canonical tool name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LifecycleSpec {
    /// Current state.
    #[serde(default)]
    pub state: LifecycleState,
    /// The tool to use instead (deprecated, hidden-compatibility or removed tools).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replacement: Option<String>,
    /// First plugin version in which the name was deprecated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_deprecated_version: Option<Version>,
    /// Plugin version planned to remove the name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned_removal_version: Option<Version>,
    /// Plugin version that removed the name (state `removed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removed_in_version: Option<Version>,
    /// Recorded transcripts that use the name still replay.
    #[serde(default = "yes")]
    pub replay_supported: bool,
}

fn yes() -> bool {
    true
}

impl Default for LifecycleSpec {
    fn default() -> Self {
        LifecycleSpec {
            state: LifecycleState::Active,
            replacement: None,
            first_deprecated_version: None,
            planned_removal_version: None,
            removed_in_version: None,
            replay_supported: true,
        }
    }
}

/// Another name for a tool (and, for a consolidated tool, one of its actions).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AliasSpec {
    /// The alias name (same rules as tool names).
    pub name: String,
    /// `hidden-compatibility`, `deprecated` or `removed`: aliases are never on the surface.
    pub state: LifecycleState,
    /// For a consolidated tool: the action the alias fills in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// First plugin version in which the alias was deprecated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_deprecated_version: Option<Version>,
    /// Plugin version planned to remove the alias.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned_removal_version: Option<Version>,
    /// Plugin version that removed the alias (state `removed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removed_in_version: Option<Version>,
    /// Recorded transcripts that use the alias still replay.
    #[serde(default = "yes")]
    pub replay_supported: bool,
}

/// One action of a consolidated multi-action tool, with its own risk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActionSpec {
    /// Action name, a value of the `action` enum.
    pub name: String,
    /// What the action does.
    #[serde(default)]
    pub description: String,
    /// Risk of this action (at most the tool's `side_effects`).
    pub side_effects: SideEffects,
    /// Extra scopes this action needs beyond the tool's.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// Overrides the tool's confirmation policy for this action.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirmation: Option<bool>,
}
