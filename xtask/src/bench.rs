//! `cargo xtask bench`: the measured figures of `docs/BENCHMARKS.md`. Downloads the BFCL dev set
//! (through `../shared/bench/bfcl_dev.py`, into `target/bfcl`, never committed), then runs the
//! search evaluation (BFCL dev set and the MCP reference servers' tools, each with its tuning and
//! check halves), search at scale (p50 at 1.4k and 10k tools, a no-match query at 50k, a 50k-tool
//! catalog build with its peak memory), the surface-size report, the router's criterion
//! benchmark, the worker round trip next to in-process (`cargo bench -p quiver --bench worker`),
//! a command adapter next to running its program directly (`--bench adapter`), and an upstream
//! MCP server's echo called directly next to the same call through `quiver serve` (`stdio_bench`,
//! interleaved rounds), and last the speed comparison of `crate::bench_speed` (Python SDK, bare
//! rmcp, Quiver; cold start; streamable HTTP), which rewrites its section of BENCHMARKS.md.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};

use crate::workspace::Workspace;

/// The cargo profile the compared servers (`quiver` and the bare rmcp `bare_echo`) are built
/// with: one profile for all of them, so their ratios compare like with like. The client
/// programs (`stdio_bench`, `http_bench`) and the plugin libraries stay `release`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile(String);

impl Profile {
    /// The default of `cargo xtask bench --profile`: `release`, the build the README tells users
    /// to make (`cargo build --release -p quiver`), so the figures are those of the executable
    /// a user runs; `--profile dist` measures the fat-LTO candidate (a cold build of ~35 min on
    /// 2 busy cores).
    pub const DEFAULT: &'static str = "release";

    /// A profile name as `cargo build --profile` takes it.
    pub fn parse(name: &str) -> Result<Self> {
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            bail!(
                "--profile {name:?} is not a cargo profile name (letters, digits, `-`, `_`): \
                 use `release`, `dist` or a `[profile.NAME]` of the root Cargo.toml"
            );
        }
        Ok(Self(name.to_owned()))
    }

    pub fn name(&self) -> &str {
        &self.0
    }

    /// The folder under `target/` cargo writes this profile's builds to.
    pub fn dir(&self) -> &str {
        match self.0.as_str() {
            "dev" | "test" => "debug",
            "bench" => "release",
            other => other,
        }
    }
}

impl std::str::FromStr for Profile {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        Self::parse(s)
    }
}

/// `cargo xtask bench [--quick] [--profile NAME]`.
pub fn run(ws: &Workspace, quick: bool, profile: &Profile) -> Result<()> {
    let target = ws.target_dir()?;
    let bfcl = target.join("bfcl");
    let tools = bfcl.join("tools.json");
    let queries = bfcl.join("dev.jsonl");
    if !tools.is_file() || !queries.is_file() {
        let script = ws.root.join("../shared/bench/bfcl_dev.py");
        if !script.is_file() {
            bail!(
                "{} is missing: the BFCL dev-set script lives in the steering repo's shared/ folder",
                script.display()
            );
        }
        let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_owned());
        ws.run(std::process::Command::new(python).arg(&script).arg(&bfcl))
            .context("downloading the BFCL dev set failed (needs python3, pip and the package registry)")?;
    }
    ws.run(
        ws.cargo()
            .args(["run", "--quiet", "--release", "-p", "quiver-catalog", "--example", "eval_search", "--"])
            .arg(&tools)
            .arg(&queries)
            .args(["--k", "1,5,10"]),
    )?;
    let data = ws.root.join("crates/catalog/data");
    ws.run(
        ws.cargo()
            .args(["run", "--quiet", "--release", "-p", "quiver-catalog", "--example", "eval_search", "--"])
            .arg(data.join("mcp_reference_tools.json"))
            .arg(data.join("mcp_reference_queries.jsonl"))
            .args(["--k", "1,5,10"]),
    )?;
    ws.run(
        ws.cargo()
            .args(["run", "--quiet", "--release", "-p", "quiver-catalog", "--example", "search_scale", "--"])
            .arg(&tools)
            .arg(&queries)
            .args(["--build", "50000", "--sizes", "1437,10000", "--no-match", "50000"]),
    )?;
    ws.run(
        ws.cargo()
            .args(["run", "--quiet", "--release", "-p", "quiver-catalog", "--example", "surface_bytes", "--"])
            .arg(&tools),
    )?;
    let mut criterion = ws.cargo();
    criterion.args(["bench", "-p", "quiver-router", "--bench", "pipeline"]);
    if quick {
        criterion.args(["--", "--quick"]);
    }
    ws.run(&mut criterion)?;
    // The same call in-process and in a worker process, on one harness.
    let mut worker = ws.cargo();
    worker.args(["bench", "-p", "quiver", "--bench", "worker"]);
    if quick {
        worker.args(["--", "--quick"]);
    }
    ws.run(&mut worker)?;
    // A command adapter (jq) next to running jq directly.
    let mut adapter = ws.cargo();
    adapter.args(["bench", "-p", "quiver", "--bench", "adapter"]);
    if quick {
        adapter.args(["--", "--quick"]);
    }
    ws.run(&mut adapter)?;
    upstream(ws, quick, profile)?;
    crate::bench_speed::run(ws, quick, profile)
}

/// What Quiver adds to a call of an upstream MCP server: `stdio_bench` against the bare rmcp
/// echo server, and against `quiver serve` with that server as its only source (no plugins),
/// calling the same tool. Rounds interleaved so both see the same machine; both servers built
/// with `profile`.
pub fn upstream(ws: &Workspace, quick: bool, profile: &Profile) -> Result<()> {
    let servers = build_servers(ws, profile, &["bare_echo"])?;
    let clients = build_clients(ws, &["stdio_bench"])?;
    let examples = servers.join("examples");
    let dir = ws.target_dir()?.join("bench-upstream");
    std::fs::create_dir_all(dir.join("plugins"))?;
    let config = dir.join("quiver.yaml");
    std::fs::write(
        &config,
        format!(
            "# Written by `cargo xtask bench`.\nconfig_version: 1\nplugins_dir: plugins\n\
             sources:\n  - name: up\n    prefix: \"\"\n    command: {}\n    tools:\n      echo: {{state: active, side_effects: read}}\n",
            examples.join("bare_echo").display()
        ),
    )?;
    let calls = if quick { "3000" } else { "20000" };
    for round in 1..=3 {
        println!("upstream round {round}:");
        ws.run(
            std::process::Command::new(clients.join("stdio_bench"))
                .args(["--tool", "echo", "--calls", calls, "--"])
                .arg(examples.join("bare_echo")),
        )?;
        ws.run(
            std::process::Command::new(clients.join("stdio_bench"))
                .args(["--tool", "echo", "--calls", calls, "--"])
                .arg(servers.join("quiver"))
                .arg("--config")
                .arg(&config)
                .arg("serve"),
        )?;
    }
    Ok(())
}

/// Builds `quiver` and the named `quiver-mcp` examples (the bare rmcp servers) with `profile`;
/// gives the folder they are in (`target/<profile dir>`, examples under `examples/`).
pub(crate) fn build_servers(ws: &Workspace, profile: &Profile, examples: &[&str]) -> Result<PathBuf> {
    ws.run(ws.cargo().args(["build", "--profile", profile.name(), "-p", "quiver"]))?;
    let mut build = ws.cargo();
    build.args(["build", "--profile", profile.name(), "-p", "quiver-mcp"]);
    for e in examples {
        build.args(["--example", e]);
    }
    ws.run(&mut build)?;
    Ok(ws.target_dir()?.join(profile.dir()))
}

/// Release builds of the named `quiver-mcp` example clients (`stdio_bench`, `http_bench`); gives
/// the folder they are in.
pub(crate) fn build_clients(ws: &Workspace, examples: &[&str]) -> Result<PathBuf> {
    let mut build = ws.cargo();
    build.args(["build", "--release", "-p", "quiver-mcp"]);
    for e in examples {
        build.args(["--example", e]);
    }
    ws.run(&mut build)?;
    Ok(ws.target_dir()?.join("release/examples"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profile_names_the_folder_cargo_builds_it_into() {
        assert_eq!(Profile::parse("dist").unwrap().dir(), "dist");
        assert_eq!(Profile::parse("release").unwrap().dir(), "release");
        assert_eq!(Profile::parse("bench").unwrap().dir(), "release");
        assert_eq!(Profile::parse("dev").unwrap().dir(), "debug");
        assert_eq!(Profile::parse("test").unwrap().dir(), "debug");
        assert_eq!(Profile::parse("dist-small").unwrap().dir(), "dist-small");
        assert_eq!(Profile::DEFAULT.parse::<Profile>().unwrap().name(), "release");
    }

    #[test]
    fn a_profile_name_that_is_not_one_is_refused_with_how_to_fix_it() {
        for bad in ["", "../release", "a b", "dist/x"] {
            let e = Profile::parse(bad).unwrap_err().to_string();
            assert!(e.contains("--profile") && e.contains("[profile.NAME]"), "{bad:?}: {e}");
        }
    }
}
