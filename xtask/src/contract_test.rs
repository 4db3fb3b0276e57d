//! `cargo xtask contract-test [NAME...]`: every plugin's source manifest validates, and every
//! fixture in `plugins/NAME/fixtures/*.json` passes through the real host and router, failure
//! paths behave, every example finds its tool in the whole configured catalog (top `--k`), and
//! versioning rules hold (see `quiver contract-test`).
//!
//! This side validates the source manifests, builds the plugins and the `quiver` binary (dev
//! profile, one cargo invocation) and runs the hidden `quiver contract-test` once per plugin.
//! That command bundles the library in a temporary folder, signs it with a throwaway key, loads
//! it through `quiver_lifecycle::Host` and runs the fixtures through `quiver_router::Router`, so
//! xtask itself never links the host.

use std::fs;

use anyhow::{Context, Result, bail};
use quiver_manifest::Manifest;

use crate::workspace::Workspace;

/// `cargo xtask contract-test [NAME...]`.
pub fn run(ws: &Workspace, names: &[String], k: Option<usize>) -> Result<()> {
    let plugins = ws.select_plugins(names)?;
    if plugins.is_empty() {
        println!("no plugins under {}; nothing to test", ws.plugins_dir().display());
        return Ok(());
    }
    for p in &plugins {
        let path = p.source_manifest();
        let text = fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
        Manifest::from_yaml(&text, &path.display().to_string())?;
    }

    let mut cmd = ws.cargo();
    cmd.args(["build", "-p", "quiver"]);
    for p in &plugins {
        cmd.args(["-p", &p.package]);
    }
    ws.run(&mut cmd)?;
    let debug = ws.target_dir()?.join("debug");
    let quiver = debug.join(format!("quiver{}", std::env::consts::EXE_SUFFIX));

    let mut failed = Vec::new();
    for p in &plugins {
        println!("\n== {} ==", p.name);
        let status = std::process::Command::new(&quiver)
            .current_dir(&ws.root)
            .arg("contract-test")
            .arg(&p.dir)
            .arg("--library")
            .arg(debug.join(p.library_file_name()))
            .args(k.map(|k| format!("--k={k}")))
            .status()
            .with_context(|| format!("cannot run {}", quiver.display()))?;
        if !status.success() {
            failed.push(p.name.clone());
        }
    }
    println!();
    if !failed.is_empty() {
        bail!("contract tests failed for: {}", failed.join(", "));
    }
    println!("contract tests passed for {} plugin(s)", plugins.len());
    Ok(())
}
