//! The stable plugin ABI of Quiver, and the SDK a plugin author writes against.
//!
//! This is the only crate a plugin depends on. It holds:
//! - [`PluginMod`], the `abi_stable` root module every plugin library exports. It is frozen as
//!   **ABI v1**: a host refuses a root module with fewer fields than its own, so the module never
//!   grows. Evolution happens through JSON (the [`contract`] types carry optional, defaulted
//!   fields) and through [`HostServices`], a prefix type the host hands to the plugin, which can
//!   gain fields at its end.
//! - [`contract`]: [`ToolRequest`] and [`ToolResponse`], the call contract that crosses the ABI as JSON.
//! - [`sdk`]: the [`Tool`] trait (a typed Rust function with serde types and `schemars`-derived
//!   schemas), the [`Context`] a tool uses to reach host services, and [`export_plugin!`], which
//!   builds the root module and catches every panic inside the plugin.
//! - [`actions`]: [`actions!`], which turns an enum of per-action argument structs into the input
//!   of a consolidated tool (a flat schema with a required `action`, one schema per action, side
//!   effects and aliases per action).
//!
//! What this crate does not do: load libraries, verify signatures, validate arguments or apply
//! policies. Those belong to the host (`quiver-lifecycle`, `quiver-router`); a plugin never
//! depends on host crates.

pub mod actions;
pub mod contract;
pub mod fixtures;
mod module;
pub mod sdk;

pub use contract::{
    AgentContext, ErrorCode, InvocationPolicies, Secrets, Status, ToolError, ToolRequest, ToolResponse,
};
pub use module::{
    ABI_VERSION, ActionSchema, CallHandle, HostServices, HostServicesRef, LogLevel, PluginInfo, PluginMod,
    PluginModRef, SDK_VERSION, ToolSchemas,
};
pub use sdk::{Context, Tool};

/// Re-exported so that [`export_plugin!`] can name it from a plugin that depends only on this crate.
#[doc(hidden)]
pub use abi_stable;
/// Re-exported so plugins derive schemas without a direct dependency.
pub use schemars;
/// Re-exported so plugins use the same `serde` as the SDK.
pub use serde;
/// Re-exported so plugins use the same `serde_json` as the SDK.
pub use serde_json;
