//! The MCP server of Quiver: serves the catalog to agent clients over the Model Context Protocol,
//! through the official Rust SDK (`rmcp`).
//!
//! - [`QuiverServer`] holds what every session shares: the catalog source, the router, how a
//!   client name picks a [`SessionProfile`], the catalog change feed and the [`ServerOptions`].
//!   Each MCP session gets a [`Connection`] (the `rmcp` handler) with its own
//!   `quiver_catalog::Session`: what it loaded with `tool_search`, its surface, its log level.
//! - Transports: [`serve_stdio`] (newline-delimited JSON on the process's pipes; stdout carries
//!   only protocol messages) and [`serve_http`] (streamable HTTP at `/mcp`, loopback `Host`s and
//!   `Origin`s only unless told otherwise; 403 for any other origin). Both answer malformed
//!   input with JSON-RPC errors (`-32700` for bytes that are not JSON, `-32600` for messages
//!   that are not requests or too large, such as one with both `method` and `result`, `-32602`
//!   for bad parameters, naming the field), never with a crash.
//!   On stdio, `tools/call` skips `rmcp`'s per-request dispatch: the transport runs the same
//!   handler itself and writes the response line when it is ready (see `stdio.rs`); over HTTP,
//!   a `tools/call` that needs nothing of `rmcp`'s session worker is run on the request's own
//!   task (see `http_sessions.rs`).
//! - `tools/list` is the session's surface (`Session::surface`) in its deterministic order,
//!   paged with opaque cursors (a cursor that is not a string, or invalid or stale, is
//!   `-32602`); each tool carries annotations from its manifest risk, its output schema, and
//!   `_meta` under [`META_PREFIX`] (plugin, version, lifecycle state, bundle sha256, signer key
//!   id, deprecated aliases).
//! - `tools/call` goes to the router, whose `CallOutcome` becomes `content`,
//!   `structuredContent`, `isError` and `_meta` (the call's metadata and any deprecation
//!   notice). The meta tools are served here: `tool_search` loads its confident matches into
//!   the session and sends `notifications/tools/list_changed`; `list_tools` lists everything
//!   `run_tool` (dispatched by the router like any call) can reach, for clients that never
//!   refresh. In adaptive and hybrid sessions a call by a name not in the session's list
//!   (through `run_tool` or an alias) adds the tool to it, announced the same way.
//! - Resources: each visible tool's documentation (`quiver://tools/<name>`, Markdown) and the
//!   full text of a result cut to its size limit (`quiver://results/<handle>`, for the session
//!   that made it; a cut result links it with a `resource_link` block).
//! - Host services reach the client through a per-call [`quiver_router::ClientBridge`]: plugin
//!   logs become `notifications/message` (filtered by `logging/setLevel`), progress becomes
//!   `notifications/progress` when the request carried a `progressToken`, elicitation and
//!   sampling become `elicitation/create` and `sampling/createMessage`, and
//!   `notifications/cancelled` cancels the call's token.
//! - Sessions resume ([`SessionStore`]: memory, files or Redis/Valkey): an HTTP session whose
//!   `Mcp-Session-Id` this instance does not know (a restart, another instance behind a load
//!   balancer) is rebuilt from the store by replaying its `initialize`, with its profile and
//!   loaded set, for the principal that opened it only; a stdio client resumes by a key it
//!   chooses (`quiver serve --resume KEY`, or [`SESSION_META_KEY`] in `initialize`'s `_meta`).
//! - A catalog change (rescan) reconciles every session and sends `list_changed` to the sessions
//!   whose surface changed.
//!
//! What this crate does not do: load or verify plugins (it takes a
//! [`quiver_catalog::CatalogSource`] and a change feed; the CLI wires in the lifecycle host),
//! decide policy (the router does), or read the configuration file (the CLI turns it into
//! [`SessionProfile`]s and [`ServerOptions`]). It serves tools and the resources above: no
//! prompts, completions or resource subscriptions. **Architecture Invariant:** this is the only crate that speaks MCP.

mod auth;
mod bridge;
mod connection;
mod dashboard;
mod hooks;
mod http;
mod http_sessions;
mod listing;
mod resources;
mod results;
mod server;
mod sessions;
mod stdio;
mod wire;

pub use auth::{AuthFailure, Authenticator, Principal};
pub use connection::Connection;
pub use dashboard::Dashboard;
pub use http::{
    FIRST_BYTE_TIMEOUT, HttpIdentity, HttpOptions, MCP_PATH, METRICS_PATH, PROMETHEUS_CONTENT_TYPE,
    RESOURCE_METADATA_PATH, serve_http, serve_http_on, serve_metrics_on,
};
pub use http_sessions::HttpSessionId;
#[doc(hidden)]
pub use http_sessions::http_in_place_calls;
pub use server::{Profiles, QuiverServer, ServerOptions, SessionIdentity, SessionProfile};
pub use sessions::{MAX_SESSION_KEY_LEN, SESSION_META_KEY, SessionStore, StoreError, StoredSession, valid_session_key};
#[doc(hidden)]
pub use stdio::{lane_calls, lane_lines};
pub use stdio::{serve_io, serve_stdio};
#[doc(hidden)]
pub use wire::fuzzing;

/// Prefix of every `_meta` key Quiver writes (reverse-DNS, as the MCP specification asks).
pub const META_PREFIX: &str = "io.github.quiver/";
