//! Worker processes: plugins that run outside the host, behind the same [`ToolBackend`] contract.
//!
//! One worker serves one bundle (not one publisher's bundles): a crash, a hung call or a leak
//! then takes down exactly one plugin, a hot swap replaces exactly one process, and the sandbox
//! grants exactly what that plugin's manifest declares. The cost is one process per isolated
//! plugin (a few MB each).
//!
//! - [`protocol`]: the frames host and worker exchange (handshake, calls, host services).
//! - [`WorkerBackend`]: the host side (spawn, forward, crash detection, restart with backoff).
//! - [`run_child`]: the worker side, the body of the hidden `quiver worker` command.
//! - `sandbox`: what the worker does to itself before it loads plugin code.
//!
//! [`ToolBackend`]: quiver_catalog::ToolBackend

mod backend;
mod child;
pub mod protocol;
mod sandbox;

pub use backend::{
    AdapterLoad, LibraryRead, PLUGIN_CRASHED, PLUGIN_UNAVAILABLE, WorkerBackend, WorkerLibrary, WorkerSettings,
    WorkerSpec,
};
pub use child::run as run_child;
