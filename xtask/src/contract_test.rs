//! `cargo xtask contract-test [NAME...]`: every plugin's source manifest validates, and every
//! fixture in `plugins/NAME/fixtures/*.json` passes through the real host and router, failure
//! paths behave, every example finds its tool in the whole configured catalog (top `--k`), and
//! versioning rules hold (see `quiver contract-test`). The fixtures run in-process and again in
//! a sandboxed worker process, as a host runs a bundle it does not trust, so a case touching a
//! path the manifest's `sandbox:` does not grant fails here, not in production.
//!
//! This side validates the source manifests, builds the plugins and the `quiver` binary (dev
//! profile, one cargo invocation) and runs the hidden `quiver contract-test` once per plugin.
//! That command bundles the library in a temporary folder, signs it with a throwaway key, loads
//! it through `quiver_lifecycle::Host` and runs the fixtures through `quiver_router::Router`, so
//! xtask itself never links the host.
//!
//! Declarative adapter bundles (`plugins/*` and `tests/adapters/*` folders with an `adapter:`
//! manifest and no Cargo package) go through the same command without a library; for HTTP
//! adapters this side starts the local test endpoint (`test_endpoint.rs`) and passes its URL as
//! `QUIVER_TEST_ENDPOINT` (fixtures write `${TEST_ENDPOINT}`).

use std::fs;

use anyhow::{Context, Result, bail};
use quiver_manifest::Manifest;

use crate::workspace::Workspace;

/// `cargo xtask contract-test [NAME...]`.
pub fn run(ws: &Workspace, names: &[String], k: Option<usize>) -> Result<()> {
    let (plugins, adapters) = ws.select_all(names)?;
    if plugins.is_empty() && adapters.is_empty() {
        println!("no plugins under {}; nothing to test", ws.plugins_dir().display());
        return Ok(());
    }
    for path in plugins.iter().map(|p| p.source_manifest()).chain(adapters.iter().map(|a| a.source_manifest())) {
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
    let endpoint = if adapters.is_empty() { None } else { Some(crate::test_endpoint::start()?) };

    let mut failed = Vec::new();
    let runs = plugins
        .iter()
        .map(|p| (p.name.clone(), p.dir.clone(), Some(debug.join(p.library_file_name()))))
        .chain(adapters.iter().map(|a| (a.name.clone(), a.dir.clone(), None)));
    let mut n = 0;
    for (name, dir, library) in runs {
        n += 1;
        println!("\n== {name}{} ==", if library.is_none() { " (adapter)" } else { "" });
        let mut cmd = std::process::Command::new(&quiver);
        cmd.current_dir(&ws.root).arg("contract-test").arg(&dir);
        if let Some(lib) = library {
            cmd.arg("--library").arg(lib);
        }
        if let Some(url) = &endpoint {
            cmd.env("QUIVER_TEST_ENDPOINT", url);
        }
        let status = cmd
            .args(k.map(|k| format!("--k={k}")))
            .status()
            .with_context(|| format!("cannot run {}", quiver.display()))?;
        if !status.success() {
            failed.push(name);
        }
    }
    println!();
    if !failed.is_empty() {
        bail!("contract tests failed for: {}", failed.join(", "));
    }
    println!("contract tests passed for {n} plugin(s) and adapter(s)");
    Ok(())
}
