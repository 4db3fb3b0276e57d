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

use anyhow::{Context, Result, bail};

use crate::workspace::Workspace;

/// `cargo xtask bench [--quick]`.
pub fn run(ws: &Workspace, quick: bool) -> Result<()> {
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
    upstream(ws, quick)?;
    crate::bench_speed::run(ws, quick)
}

/// What Quiver adds to a call of an upstream MCP server: `stdio_bench` against the bare rmcp
/// echo server, and against `quiver serve` with that server as its only source (no plugins),
/// calling the same tool. Rounds interleaved so both see the same machine.
pub fn upstream(ws: &Workspace, quick: bool) -> Result<()> {
    build_release(ws, &["bare_echo", "stdio_bench"])?;
    let release = ws.target_dir()?.join("release");
    let examples = release.join("examples");
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
            std::process::Command::new(examples.join("stdio_bench"))
                .args(["--tool", "echo", "--calls", calls, "--"])
                .arg(examples.join("bare_echo")),
        )?;
        ws.run(
            std::process::Command::new(examples.join("stdio_bench"))
                .args(["--tool", "echo", "--calls", calls, "--"])
                .arg(release.join("quiver"))
                .arg("--config")
                .arg(&config)
                .arg("serve"),
        )?;
    }
    Ok(())
}

/// Release builds of `quiver` and of the named `quiver-mcp` examples (bare servers, clients).
pub(crate) fn build_release(ws: &Workspace, examples: &[&str]) -> Result<()> {
    ws.run(ws.cargo().args(["build", "--release", "-p", "quiver"]))?;
    let mut build = ws.cargo();
    build.args(["build", "--release", "-p", "quiver-mcp"]);
    for e in examples {
        build.args(["--example", e]);
    }
    ws.run(&mut build)
}
