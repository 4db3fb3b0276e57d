//! `cargo xtask demo`: the main job on a fresh clone. Builds and signs the bundled plugins, then
//! runs `quiver demo`: a real MCP session (the official Rust SDK's client driving `quiver serve`
//! over stdio) on them, printing each step.

use anyhow::Result;

use crate::workspace::Workspace;

/// `cargo xtask demo`.
pub fn run(ws: &Workspace) -> Result<()> {
    crate::build_plugins::run(ws, &[])?;
    ws.run(ws.cargo().args(["run", "--quiet", "--release", "-p", "quiver", "--", "demo"]))
}
