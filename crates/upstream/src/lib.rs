//! Upstream MCP servers as a Quiver tool source: each `sources` entry of `quiver.yaml` is a
//! server Quiver starts (stdio) or reaches (streamable HTTP) with rmcp's client. Its tools join
//! the one catalog under a name prefix, with the operator's overrides (lifecycle state, aliases,
//! scopes, risk, approval, descriptions), and every call goes through the same router as a
//! plugin's: the backend here only carries the call to the server and its answer back.
//!
//! - [`UpstreamSource`] implements `quiver_lifecycle::ToolSource`: a supervisor task connects,
//!   lists the tools, re-lists them on `tools/list_changed` (and asks the host to rescan), and
//!   restarts a server that exits or drops the connection, with backoff. Tools of a server that
//!   is down stay in the catalog (and in search); their calls get `plugin_unavailable` naming
//!   the server's state.
//! - The backend sends `tools/call` with a progress token, routes the server's progress to the
//!   calling session, forwards cancellation (`notifications/cancelled`) when the router aborts a
//!   call, and maps the result to the router's contract.
//!
//! What it does not do: validate arguments, check scopes or approval, apply deadlines, retries
//! or size limits (the router does, for every source alike); serve upstream resources or
//! prompts (tools only); multi-round-trip input requests of protocol 2026-07-28 (refused with
//! a clear error).

mod backend;
// Upstream servers still speak logging and sampling (MCP 2025-11-25 and earlier); rmcp marks
// them deprecated for the protocol after it.
#[allow(deprecated)]
mod connection;
mod convert;

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use quiver_catalog::PluginEntry;
use quiver_lifecycle::{BundleError, NameClaims, RescanSignal, ScanReport, Stage, ToolSource};
use quiver_manifest::UpstreamConfig;

use crate::backend::UpstreamBackend;
use crate::connection::Connection;

/// Error code of a call to a server that is down (shared with worker plugins).
pub use quiver_lifecycle::worker::PLUGIN_UNAVAILABLE;

/// The runtime every upstream connection runs on: two threads of its own, so connections work
/// the same under `serve` (which has its runtime) and one-shot commands (which have none).
fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        // HTTPS upstreams: rustls with the `ring` provider, certificates checked against the
        // system's trust store.
        quiver_lifecycle::install_tls_provider();
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("quiver-upstream")
            .enable_all()
            .build()
            .expect("cannot start the upstream runtime")
    })
}

/// One upstream server as a tool source.
pub struct UpstreamSource {
    conn: Arc<Connection>,
    current: Mutex<Option<Arc<PluginEntry>>>,
    /// The last problem reported (each reported once until it changes).
    last_error: Mutex<Option<String>>,
    first_refresh: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for UpstreamSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamSource").field("name", &self.conn.cfg.name).finish_non_exhaustive()
    }
}

impl UpstreamSource {
    /// Starts connecting to the server of `cfg` in the background; relative paths (`cwd`,
    /// secret files) resolve against `base_dir`. With a `state_dir`, the last tool list is kept
    /// there (`upstreams/<name>.json`): a server that is down at start still has its tools in
    /// the catalog, and their calls get `plugin_unavailable` with the reason.
    pub fn new(cfg: UpstreamConfig, base_dir: PathBuf, state_dir: Option<PathBuf>) -> UpstreamSource {
        let conn = Connection::new(cfg, base_dir, state_dir);
        runtime().spawn(conn.clone().supervise());
        UpstreamSource {
            conn,
            current: Mutex::new(None),
            last_error: Mutex::new(None),
            first_refresh: std::sync::atomic::AtomicBool::new(true),
        }
    }

    /// The source's name.
    pub fn name(&self) -> &str {
        &self.conn.cfg.name
    }

    /// The connection's state in one line (`connected (...)`, `down: ...`).
    pub fn status(&self) -> String {
        self.conn.status()
    }

    /// Adds `message` to `list` (the report's `rejected` or `warnings`) unless it is the last
    /// problem reported.
    fn report_once(&self, list: &mut Vec<BundleError>, message: String) {
        let mut last = self.last_error.lock().unwrap_or_else(|e| e.into_inner());
        if last.as_deref() != Some(message.as_str()) {
            list.push(BundleError {
                bundle: PathBuf::from(format!("sources[{}]", self.conn.cfg.name)),
                stage: Stage::Upstream,
                message: message.clone(),
            });
            *last = Some(message);
        }
    }
}

impl Drop for UpstreamSource {
    fn drop(&mut self) {
        self.conn.stop();
    }
}

impl ToolSource for UpstreamSource {
    fn describe(&self) -> String {
        format!("upstream MCP server `{}`", self.conn.cfg.name)
    }

    fn attach(&self, signal: RescanSignal) {
        self.conn.set_signal(signal);
    }

    fn refresh(&self, claims: &mut NameClaims<'_>) -> ScanReport {
        let mut report = ScanReport::default();
        if self.first_refresh.swap(false, std::sync::atomic::Ordering::AcqRel) {
            self.conn.wait_first(Duration::from_millis(self.conn.cfg.connect_timeout_ms));
        }
        let listing = {
            let mut l = self.conn.listing.lock().unwrap_or_else(|e| e.into_inner());
            if !l.1 {
                None
            } else {
                l.1 = false;
                l.0.clone()
            }
        };
        let status = self.conn.status();
        if status.starts_with("down") {
            let known = self.current.lock().unwrap_or_else(|e| e.into_inner()).is_some() || listing.is_some();
            let what = if known {
                "its tools stay in the catalog from the last connection and their calls fail until it answers"
            } else {
                "its tools join the catalog once it answers"
            };
            self.report_once(&mut report.rejected, format!("{status}; {what}"));
        }
        let Some(listing) = listing else {
            report.unchanged += 1;
            return report;
        };
        let conn = self.conn.clone();
        let built = convert::build_entry(
            &self.conn.cfg,
            &listing.server_version,
            &listing.server_title,
            &listing.tools,
            move |names| Arc::new(UpstreamBackend::new(conn, names)),
        );
        // The other tools serve: the source is not rejected for these.
        let not_served: Vec<&String> = listing.invalid.iter().chain(&built.skipped).collect();
        if !not_served.is_empty() {
            let lines: Vec<&str> = not_served.iter().map(|s| s.as_str()).collect();
            self.report_once(
                &mut report.warnings,
                format!("{} upstream tool(s) not served: {}", lines.len(), lines.join("; ")),
            );
        }
        let id = self.conn.cfg.name.clone();
        if let Some((name, owner)) = claims.clash(&id, &built.entry.manifest) {
            // Tried again at every rescan: the other plugin may go away.
            self.conn.listing.lock().unwrap_or_else(|e| e.into_inner()).1 = true;
            self.report_once(
                &mut report.rejected,
                format!(
                    "tool name `{name}` is already served by plugin `{owner}`; give this source another `prefix` or rename the tool under `tools`"
                ),
            );
            return report;
        }
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        let version = built.entry.manifest.version.to_string();
        if current.as_ref().is_some_and(|c| c.provenance.sha256 == built.entry.provenance.sha256) {
            report.unchanged += 1;
            return report;
        }
        claims.claim(&built.entry);
        match current.replace(Arc::new(built.entry)) {
            Some(old) => report.replaced.push((id, old.manifest.version.to_string(), version)),
            None => report.added.push((id, version)),
        }
        report
    }

    fn entries(&self) -> Vec<Arc<PluginEntry>> {
        self.current.lock().unwrap_or_else(|e| e.into_inner()).iter().cloned().collect()
    }
}
