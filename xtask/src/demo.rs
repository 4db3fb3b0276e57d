//! `cargo xtask demo`: the main job on a fresh clone. Builds and signs the bundled plugins, then
//! runs `quiver demo`: a real MCP session (the official Rust SDK's client driving `quiver serve`
//! over stdio) on them, printing each step.

use anyhow::Result;

use crate::workspace::Workspace;

/// `cargo xtask demo`.
pub fn run(ws: &Workspace) -> Result<()> {
    crate::build_plugins::run(ws, &[])?;
    // Built first, with cargo's progress visible: a cold release build of the host takes minutes.
    eprintln!("\n==> building the quiver binary (release)");
    ws.run(ws.cargo().args(["build", "--release", "-p", "quiver"]).env_remove("CARGO_TERM_QUIET"))?;
    let quiver = ws.target_dir()?.join("release").join(format!("quiver{}", std::env::consts::EXE_SUFFIX));
    eprintln!("\n==> running the demo session");
    ws.run(std::process::Command::new(quiver).current_dir(&ws.root).arg("demo"))
}
