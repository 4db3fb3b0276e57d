//! The call contract: what the host sends a tool and what it gets back, as JSON across the ABI.
//!
//! Every field beyond the essentials is optional and defaulted, so both sides can grow the
//! contract without breaking each other (unknown fields are ignored on read).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One call of one tool, as the plugin receives it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ToolRequest {
    /// Unique id of the call (also in logs, telemetry and transcripts).
    pub request_id: String,
    /// Plugin-local canonical tool name (aliases are resolved before the call).
    pub tool_id: String,
    /// Version of the plugin that serves the call.
    pub tool_version: String,
    /// Milliseconds since the Unix epoch when the host accepted the call.
    pub timestamp: u64,
    /// Who is calling.
    #[serde(default)]
    pub agent_context: AgentContext,
    /// The validated arguments.
    #[serde(default)]
    pub inputs: Value,
    /// Policies in force for this call.
    #[serde(default)]
    pub invocation_policies: InvocationPolicies,
    /// The plugin's settings from the host configuration (`plugin_config.<plugin id>`), or null.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub config: Value,
    /// Optional context the host remembered for this tool and session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_snippet: Option<String>,
    /// The secrets this tool declares in its manifest (`secrets:`), by name, with the values
    /// the operator supplied (`secrets.<plugin id>` in the host configuration). Empty when the
    /// tool declares none. Printed redacted by `Debug`.
    #[serde(default, skip_serializing_if = "Secrets::is_empty")]
    pub secrets: Secrets,
}

/// Secret values by name. `Debug` prints the names only; read a value with [`Secrets::get`].
#[derive(Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(transparent)]
pub struct Secrets(pub std::collections::BTreeMap<String, String>);

impl Secrets {
    /// The value of secret `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }
    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.0.keys().map(|k| (k, "<redacted>"))).finish()
    }
}

/// The caller of a request.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct AgentContext {
    /// Session identifier (one MCP connection, one CLI run).
    #[serde(default)]
    pub session_id: String,
    /// Client name as announced (e.g. MCP `clientInfo.name`).
    #[serde(default)]
    pub client: String,
    /// The profile mode of the session (e.g. `agent`, `plan`).
    #[serde(default)]
    pub mode: String,
    /// Scopes the session holds.
    #[serde(default)]
    pub scopes: Vec<String>,
}

/// Policies the host applies to the call, told to the plugin for information.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct InvocationPolicies {
    /// Deadline of the call in milliseconds (0: none).
    #[serde(default)]
    pub timeout_ms: u64,
    /// Result bytes the host keeps before truncating.
    #[serde(default)]
    pub max_result_bytes: u64,
    /// True when a person confirmed this call (approval policy).
    #[serde(default)]
    pub confirmed: bool,
    /// The consolidated-tool action being run, when the tool has actions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
}

/// Outcome class of a call.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// The tool did its job; `outputs` holds the result.
    #[default]
    Ok,
    /// The tool failed; `error` says why.
    Error,
    /// Part of the result is present (for example truncated to the size limit).
    Partial,
}

/// What a tool answered.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ToolResponse {
    /// Outcome class.
    pub status: Status,
    /// The structured result (conforms to the tool's output schema when `status` is ok).
    #[serde(default)]
    pub outputs: Value,
    /// Extra content blocks for the client, in MCP content-block shape (`{"type": "image",
    /// "data": ..., "mimeType": ...}`, `{"type": "text", "text": ...}`, ...). When present, the
    /// server sends them as the result's content, and `outputs` as its structured content.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub content: Vec<Value>,
    /// Free-text observations for the model (warnings, notes), in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub observations: Vec<String>,
    /// Facts the tool asks the host to remember for later calls of this session.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub memory_writes: Vec<MemoryWrite>,
    /// Tool-reported measurements (e.g. bytes read); merged into the host's telemetry.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub telemetry: Map<String, Value>,
    /// Present exactly when `status` is `error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ToolError>,
}

/// A key/value the tool wants remembered.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MemoryWrite {
    /// Key, scoped to the tool and session by the host.
    pub key: String,
    /// Value to remember.
    pub value: Value,
}

/// Machine-readable error codes shared by plugins and the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorCode;

impl ErrorCode {
    /// Arguments did not match the input schema or the tool rejected them.
    pub const INVALID_ARGUMENTS: &'static str = "invalid_arguments";
    /// The tool ran and failed.
    pub const TOOL_ERROR: &'static str = "tool_error";
    /// The tool panicked; the panic was caught inside the plugin.
    pub const PANIC: &'static str = "panic";
    /// No such tool (or not visible to the caller).
    pub const UNKNOWN_TOOL: &'static str = "unknown_tool";
    /// A resource the tool needs was not found.
    pub const NOT_FOUND: &'static str = "not_found";
    /// The tool refused the operation (e.g. path outside its root).
    pub const PERMISSION_DENIED: &'static str = "permission_denied";
    /// The deadline passed.
    pub const TIMEOUT: &'static str = "timeout";
    /// The caller cancelled the call.
    pub const CANCELLED: &'static str = "cancelled";
    /// The plugin's response could not be understood.
    pub const PROTOCOL: &'static str = "protocol_error";
    /// The process running the tool died during the call (set by the host for isolated
    /// plugins): the call may or may not have taken effect.
    pub const PLUGIN_CRASHED: &'static str = "plugin_crashed";
    /// The tool's plugin could not take the call (disabled after crashes, still starting, or
    /// its upstream is down): the call did not reach the tool.
    pub const PLUGIN_UNAVAILABLE: &'static str = "plugin_unavailable";
}

/// A structured error a model can read and act on.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ToolError {
    /// One of [`ErrorCode`]'s constants, or a tool-specific code.
    pub code: String,
    /// What went wrong and, where possible, how to fix it.
    pub message: String,
    /// True when trying the same call again may succeed.
    #[serde(default)]
    pub retryable: bool,
    /// Extra machine-readable detail (e.g. JSON pointers of invalid arguments).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub details: Value,
}

impl ToolError {
    /// An error with a code and message, not retryable, no details.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> ToolError {
        ToolError { code: code.into(), message: message.into(), retryable: false, details: Value::Null }
    }
    /// A `tool_error`.
    pub fn tool(message: impl Into<String>) -> ToolError {
        ToolError::new(ErrorCode::TOOL_ERROR, message)
    }
    /// An `invalid_arguments` error.
    pub fn invalid(message: impl Into<String>) -> ToolError {
        ToolError::new(ErrorCode::INVALID_ARGUMENTS, message)
    }
    /// A `not_found` error.
    pub fn not_found(message: impl Into<String>) -> ToolError {
        ToolError::new(ErrorCode::NOT_FOUND, message)
    }
    /// A `permission_denied` error.
    pub fn denied(message: impl Into<String>) -> ToolError {
        ToolError::new(ErrorCode::PERMISSION_DENIED, message)
    }
    /// Marks the error retryable.
    pub fn retryable(mut self) -> ToolError {
        self.retryable = true;
        self
    }
    /// Attaches machine-readable details.
    pub fn with_details(mut self, details: Value) -> ToolError {
        self.details = details;
        self
    }
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for ToolError {}

impl ToolResponse {
    /// A successful response.
    pub fn ok(outputs: Value) -> ToolResponse {
        ToolResponse { status: Status::Ok, outputs, ..ToolResponse::default() }
    }
    /// A failed response.
    pub fn error(error: ToolError) -> ToolResponse {
        ToolResponse { status: Status::Error, error: Some(error), ..ToolResponse::default() }
    }
}
