//! The catalog: what tools exist, under which names, and what an agent sees of them.
//!
//! Principal types: [`PluginEntry`] (a loaded plugin with its tools' schemas compiled once),
//! [`Catalog`] (an immutable snapshot of every tool and every name — canonical, alias, removed —
//! that reaches one) and the [`ToolBackend`] / [`HostServices`] / [`CallSink`] traits through
//! which a tool runs and reaches the host.
//!
//! What this crate does not do: load or verify plugins (`quiver-lifecycle`), dispatch calls or
//! apply policies (`quiver-router`), or speak MCP (`quiver-mcp`). It does no I/O.

mod access;
mod actions;
mod backend;
mod catalog;
mod entry;
pub mod eval;
mod external;
pub mod hints;
mod meta_args;
pub mod search;
mod session;
pub mod shape;
mod surface;

pub use access::{Access, CatalogSource};
pub use actions::check_tool_actions;
pub use backend::{
    AbortReason, BackendFuture, CallSink, Dispatch, HostServices, LogLevel, NullSink, Placement, Question, RemoteCall,
    ToolBackend, not_safe_to_repeat,
};
pub use catalog::{Catalog, CatalogError, ConflictPolicy, Notice, Resolved, ToolRef};
pub use entry::{EntryError, PluginEntry, Provenance, ToolDef, ToolValidator, compile_schema};
pub use external::catalog_from_tool_list;
pub use meta_args::{
    Detail, ListToolsArgs, MetaSchema, QueryMode, RunToolArgs, ToolSearchArgs, list_tools_schema, meta_schema,
    run_tool_schema, tool_search_schema,
};
pub use session::{
    MAX_SEARCH_RESPONSE_BYTES, SearchEntry, SearchRecord, SearchRequest, SearchResponse, Session, SessionSnapshot,
    SurfaceStats, partitions, search_catalog,
};
pub use surface::{
    ExposureMode, LIST_TOOLS, META_TOOLS, Partition, RUN_TOOL, Surface, SurfaceEntry, SurfacePolicy, TOOL_SEARCH,
};

#[cfg(test)]
mod tests;
