//! The router: one dispatch path for every tool call, whatever name or lane it came by.
//!
//! A call arrives by its canonical name, an alias, a consolidated action's alias, or through the
//! generic `run_tool` lane; [`Router::call`] and [`Router::run_tool`] send all of them through
//! the same pipeline, so the generic lane is no hole in the protections:
//!
//! 1. **resolve** the name in the current catalog snapshot (loaded once per call): canonical,
//!    alias (which may fill in `arguments.action`), or removed (an error naming the replacement
//!    and the removing version);
//! 2. **visibility and scopes**: a tool the caller may not see (scopes, profile gates:
//!    [`quiver_catalog::Access`]) is reported exactly like a name that does not exist, and the
//!    suggestions offered for unknown names only ever list tools the caller may see;
//! 3. **arguments** against the tool's input schema (compiled once), with errors that give a
//!    JSON pointer, what was expected, what was got and a hint (a schema with a shape,
//!    `quiver_catalog::shape`, first checks the arguments by walking them once; `jsonschema`
//!    decides whatever it does not accept);
//! 4. **approval** of calls that need a person's confirmation ([`Approval`]): asked through the
//!    client ([`ClientBridge::elicit`]) when it can, refused with how-to-confirm otherwise;
//! 5. **circuit breaker** per tool; 6. **concurrency** limits (per tool and host-wide);
//! 7. **invocation** under the tool's deadline, cancellable: inline on the calling task, or off
//!    it on a thread that may block (one of the router's pool of long-lived threads, `pool.rs`;
//!    the caller waits beside the deadline); 8. **retries**
//!    of retryable errors with exponential backoff and jitter;
//! 9. **output** against the output schema (for a [`Call`] with `outputs_as_text`, an output
//!    whose schema has a shape is checked on its JSON text and handed over as that text,
//!    [`CallOutcome::outputs_text`]; an output read as a `Value` is checked by the shape as the
//!    arguments are; `quiver_catalog::shape`); 10. **result size** (the largest strings and arrays
//!    cut with a marker until the output fits, checked against the output schema; status
//!    `partial`; the full text kept for the session under a handle, served by
//!    [`Router::read_result`], `run_tool` with [`READ_RESULT`] and, in `quiver-mcp`, as the
//!    resource `quiver://results/<handle>`); 11. the **notice** for
//!    deprecated or compatibility names in [`CallMeta`]; 12. **telemetry** and the
//!    **transcript** line. [`replay`] re-runs a transcript against the current catalog.
//!
//! Each step is a stage over one per-call context (`stages.rs`, `invoke.rs`), named stably
//! ([`policy::Stage`]) and recording its decision as a typed [`policy::Step`] in
//! [`CallMeta::policy`].
//!
//! Principal types: [`Router`], [`Call`] / [`CallOutcome`] / [`CallMeta`], [`Caller`],
//! [`ClientBridge`], [`RouterSettings`]; [`codes::Code`], the typed kinds of every error the host
//! makes (`quiver_abi::ErrorCode`'s and the router's own), shared with the MCP layer.
//!
//! What this crate does not do: load plugins (`quiver-lifecycle`), decide what a session's tool
//! list shows (`quiver-catalog`), or speak MCP (`quiver-mcp`, which implements
//! [`ClientBridge`] and maps [`CallMeta`] to `_meta`). It cannot stop a tool that overruns its
//! deadline: an in-process call cannot be killed, so the caller stops waiting, the tool is told
//! through `is_cancelled`, and its thread keeps its concurrency slot until it returns.

// Issue 15: the pipeline (`Router::pipeline_now`, `pipeline_rest`) and its helpers stay readable
// (threshold in the workspace `clippy.toml`; CI runs clippy with `-D warnings`).
#![warn(clippy::too_many_lines)]
#![deny(clippy::too_many_arguments)]

mod breaker;
mod call;
mod clock;
pub mod codes;
mod invoke;
mod limits;
mod memory;
pub mod policy;
mod pool;
mod replay;
mod results;
mod router;
mod settings;
mod sink;
mod stages;
mod suggest;
mod traced;
mod validate;

pub use call::{
    Approval, BoxFuture, Call, CallMeta, CallOutcome, Caller, ClientBridge, Lane, LogLevel, NullBridge, ToolNames,
};
pub use replay::{ReplayEntry, ReplayReport, ReplayVerdict, replay};
pub use results::{Cut, READ_RESULT, READ_RESULT_DEFAULT_LEN, RESULT_URI_PREFIX, Truncation};
pub use router::Router;
pub use settings::RouterSettings;
pub use tokio_util::sync::CancellationToken;
#[doc(hidden)]
pub use validate::fuzzing;
pub use validate::meta_arguments;
