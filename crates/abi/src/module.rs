//! The root module (frozen, ABI v1) and the host services prefix type (growable).

use std::ffi::c_void;

use abi_stable::{
    StableAbi, declare_root_module_statics,
    library::RootModule,
    package_version_strings,
    sabi_types::VersionStrings,
    std_types::{RResult, RStr, RString},
};
use serde::{Deserialize, Serialize};

/// The ABI generation this crate implements. A plugin reports it through
/// [`PluginMod::abi_version`]; a manifest declares it in its `abi` field; the host checks both.
pub const ABI_VERSION: u32 = 1;

/// Version of this crate (the SDK a plugin was built with; reported in [`PluginInfo`]).
pub const SDK_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The root module a plugin library exports (through [`crate::export_plugin!`]).
///
/// **Frozen.** Adding, removing or reordering a field breaks every plugin built before the
/// change: new capabilities travel as JSON fields or as new [`HostServices`] fields instead.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = PluginModRef)))]
#[sabi(missing_field(panic))]
pub struct PluginMod {
    /// The ABI generation the plugin was built for ([`ABI_VERSION`] of its SDK).
    pub abi_version: extern "C" fn() -> u32,
    /// JSON of [`PluginInfo`]: the embedded manifest and the schemas derived from the tool types.
    pub plugin_info: extern "C" fn() -> RString,
    /// Runs one call. `tool` is the plugin-local tool name, `request` the JSON of a
    /// [`crate::ToolRequest`]; the result is the JSON of a [`crate::ToolResponse`]. Never unwinds:
    /// the SDK turns panics into `status: error` responses.
    #[sabi(last_prefix_field)]
    pub invoke: extern "C" fn(tool: RStr<'_>, request: RStr<'_>, host: HostServicesRef, call: CallHandle) -> RString,
}

impl RootModule for PluginModRef {
    declare_root_module_statics! {PluginModRef}
    const BASE_NAME: &'static str = "quiver_plugin";
    const NAME: &'static str = "quiver_plugin";
    const VERSION_STRINGS: VersionStrings = package_version_strings!();
}

/// An opaque per-call handle the host passes to `invoke` and the plugin passes back to every
/// [`HostServices`] function. Only the host knows what it points to; it stays valid until
/// `invoke` returns, even when the host has stopped waiting (timeout or cancellation).
#[repr(C)]
#[derive(StableAbi, Clone, Copy, Debug)]
pub struct CallHandle {
    /// Host-owned pointer; never dereferenced by the plugin.
    pub ptr: *const c_void,
}

// SAFETY: the handle is an opaque token; the host's functions behind `HostServices` are
// thread-safe and the host keeps the pointee alive for the whole `invoke` call.
unsafe impl Send for CallHandle {}
// SAFETY: see above.
unsafe impl Sync for CallHandle {}

/// Severity of a plugin log line (maps to MCP logging levels and `tracing` levels).
#[repr(u8)]
#[derive(StableAbi, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// Fine-grained diagnostics.
    Debug = 0,
    /// Normal progress information.
    Info = 1,
    /// Something unexpected that the tool recovered from.
    Warning = 2,
    /// A failure.
    Error = 3,
}

impl LogLevel {
    /// Decodes the wire value; unknown values become `Info` so a newer plugin cannot break a host.
    pub fn from_u8(v: u8) -> LogLevel {
        match v {
            0 => LogLevel::Debug,
            2 => LogLevel::Warning,
            3 => LogLevel::Error,
            _ => LogLevel::Info,
        }
    }
}

/// Services the host offers a running tool. A prefix type: the host may append fields in later
/// versions (a plugin sees `None` for fields its host lacks, through the generated accessors).
///
/// `elicit` and `sample` block the calling plugin thread until the client answers; their
/// argument and result are JSON (see [`crate::sdk::Context::elicit`] and
/// [`crate::sdk::Context::sample`]); an `RErr` carries a human-readable reason.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = HostServicesRef)))]
pub struct HostServices {
    /// Emits a log line attributed to the call.
    pub log: extern "C" fn(call: CallHandle, level: u8, message: RStr<'_>),
    /// Reports progress; `total` is NaN when unknown.
    pub progress: extern "C" fn(call: CallHandle, progress: f64, total: f64, message: RStr<'_>),
    /// True once the caller cancelled the call or its deadline passed.
    pub is_cancelled: extern "C" fn(call: CallHandle) -> bool,
    /// Asks the user a question through the client (MCP `elicitation/create`).
    pub elicit: extern "C" fn(call: CallHandle, request: RStr<'_>) -> RResult<RString, RString>,
    /// Asks the client's model for a completion (MCP `sampling/createMessage`).
    #[sabi(last_prefix_field)]
    pub sample: extern "C" fn(call: CallHandle, request: RStr<'_>) -> RResult<RString, RString>,
}

/// What a plugin says about itself, as returned (JSON) by [`PluginMod::plugin_info`].
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PluginInfo {
    /// ABI generation of the SDK the plugin was built with.
    pub abi_version: u32,
    /// Version of the `quiver-abi` crate the plugin was built with.
    pub sdk_version: String,
    /// The plugin's `tool.yaml` as embedded at build time (without the `artifact` section).
    pub manifest: String,
    /// Input and output schemas derived from each tool's Rust types, in registration order.
    pub tools: Vec<ToolSchemas>,
}

/// Schemas derived from one tool's Rust types.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ToolSchemas {
    /// Plugin-local tool name.
    pub name: String,
    /// JSON Schema (2020-12) of the input.
    pub input_schema: serde_json::Value,
    /// JSON Schema (2020-12) of the output.
    pub output_schema: serde_json::Value,
    /// The actions of a consolidated tool (see [`crate::actions!`]); empty otherwise. Added
    /// after ABI v1 shipped: absent in older plugins' JSON.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<ActionSchema>,
}

/// One action of a consolidated tool, as its code declares it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ActionSchema {
    /// The action name (a value of the tool's `action` argument).
    pub name: String,
    /// What it does.
    #[serde(default)]
    pub description: String,
    /// `read`, `write`, `destructive` or `external`.
    pub side_effects: String,
    /// Whether a person must confirm it; `None` leaves it to the tool's policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirmation: Option<bool>,
    /// Tool-name aliases that call this action.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aliases: Vec<String>,
    /// JSON Schema of this action's arguments (with `action` as a `const`).
    pub input_schema: serde_json::Value,
}
