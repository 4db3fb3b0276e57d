//! `cargo xtask bench --speed`: the speed comparison of issue 15 in one command, written into
//! `docs/BENCHMARKS.md` (between marker comments, so a re-run replaces it) and `docs/bench/*.svg`.
//!
//! Servers, all answering `tools/call echo {"text": <100 bytes>}` to the same raw client
//! (`stdio_bench`, release; the Rust servers, `quiver` and `bare_echo`, all built with one cargo
//! profile, `--profile NAME`, default `release`, named in the generated text): the Python SDK (`MCPServer`, installed in `target/py`), a bare rmcp
//! server over `stdio()` and over `stdio_pipes()` (`bare_echo`), and `quiver serve` with the
//! marker test plugin's `marker_echo` as an inline tool, as a thread tool (a build whose manifest
//! says `execution: thread`) and in a worker process. Client and server are pinned to one core
//! (`taskset -c 0`); rounds are interleaved (every server once per round); the server's CPU per
//! call comes from `/proc/PID/stat`, its peak RSS from `VmHWM`. Then: spawn → initialized,
//! spawn → first `tools/list` and peak RSS of `quiver serve` with the bundled plugins (`cargo xtask build-plugins`, the
//! repository's `quiver.yaml` with a state folder of the bench's own), both at a first start
//! (empty state folder) and at a warm start (the state the first start kept), eleven rounds of
//! each, median and range; cold start with 10, 100 and 300 signed bundles (generated copies
//! of the marker plugin under `target/bench-speed`); streamable HTTP at 1, 8 and 32 sessions,
//! bare rmcp against `quiver serve --http` (`http_bench`), each timed in one-second slices that
//! alternate between the two servers, with each server's CPU per call over its slices.
//!
//! Ratios are taken within a round and the median over rounds is reported: other builds share
//! these machines, so absolute figures move between runs while ratios within a round hold.
//! The generated text also says how many of the functions named in `crates/cli/link-order.txt`
//! the measured `quiver` defines: the memory figures depend on that list matching the build.
//! With the `release` profile, a list the build places under 99% of is recorded again
//! (`cargo xtask link-order`, which rewrites `crates/cli/link-order.txt`) before anything is
//! measured, so the figures are those of a current list and the new list is there to commit.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::bench::Profile;
use crate::workspace::Workspace;

/// Where the generated markdown goes in `docs/BENCHMARKS.md`.
const BEGIN: &str = "<!-- cargo xtask bench --speed: begin (generated; re-run to replace) -->";
const END: &str = "<!-- cargo xtask bench --speed: end -->";

/// The marker plugin's manifest line that the thread build replaces (see its `lib.rs`).
const INLINE_LINE: &str = "    policies: {execution: inline}";
const THREAD_LINE: &str = "    policies: {execution: thread}";

/// Built programs the comparison runs.
struct Programs {
    quiver: PathBuf,
    bare: PathBuf,
    stdio_bench: PathBuf,
    http_bench: PathBuf,
    python: PathBuf,
}

/// One stdio server of the comparison.
struct StdioServer {
    label: &'static str,
    command: Vec<String>,
    tool: &'static str,
    calls: usize,
}

/// The measured figures of one server: one JSON object per round.
type Rounds = Vec<Value>;

/// `cargo xtask bench --speed [--quick] [--profile NAME]`.
pub fn run(ws: &Workspace, quick: bool, profile: &Profile) -> Result<()> {
    let target = ws.target_dir()?;
    let dir = target.join("bench-speed");
    if dir.exists() {
        fs::remove_dir_all(&dir).with_context(|| format!("cannot clear {}", dir.display()))?;
    }
    fs::create_dir_all(&dir)?;
    let mut programs = build(ws, profile)?;
    if profile.name() == "release" && link_order_stale(ws, &programs.quiver) {
        // The peak RSS rows measure the committed link order only when it matches the build.
        // Code changes rename functions, and a changed dependency graph renames every instance
        // its crates make: record it again, then measure the build linked by it.
        crate::link_order::run(ws)?;
        programs = build(ws, profile)?;
    }
    let m = marker_setups(ws, &target, &dir)?;
    let (inline_cfg, thread_cfg, worker_cfg) = (&m.inline, &m.thread, &m.worker);

    let calls = if quick { 3_000 } else { 20_000 };
    let py_calls = if quick { 500 } else { 2_000 };
    let quiver = |cfg: &Path| vec![s(&programs.quiver), "--config".into(), s(cfg), "serve".into()];
    let servers = vec![
        StdioServer {
            label: "Python SDK `MCPServer`",
            command: vec![s(&programs.python), s(&ws.root.join("xtask/bench/python_echo.py"))],
            tool: "echo",
            calls: py_calls,
        },
        StdioServer {
            label: "bare rmcp `stdio()`",
            command: vec![s(&programs.bare), "--stdio".into()],
            tool: "echo",
            calls,
        },
        StdioServer { label: "bare rmcp `stdio_pipes()`", command: vec![s(&programs.bare)], tool: "echo", calls },
        StdioServer { label: "Quiver, inline tool", command: quiver(inline_cfg), tool: "marker_echo", calls },
        StdioServer { label: "Quiver, thread tool", command: quiver(thread_cfg), tool: "marker_echo", calls },
        StdioServer { label: "Quiver, worker process", command: quiver(worker_cfg), tool: "marker_echo", calls },
    ];
    let rounds = if quick { 2 } else { 3 };
    let mut stdio: Vec<Rounds> = vec![Vec::new(); servers.len()];
    for round in 1..=rounds {
        eprintln!("==> stdio round {round}/{rounds}");
        for (i, server) in servers.iter().enumerate() {
            let mut args =
                vec!["--tool".to_owned(), server.tool.to_owned(), "--calls".into(), server.calls.to_string()];
            args.push("--json".into());
            stdio[i].push(stdio_bench(&programs.stdio_bench, &args, &server.command)?);
        }
    }

    // The bundled plugins, as the repository's quiver.yaml serves them, with a state folder of
    // the bench's own: per round a first start (empty state) and then a warm start (the state
    // that first start kept: the rollback record and the plugins' load reports).
    bundle_shipped(ws, &target, &programs.quiver)?;
    let (bundled_cfg, bundled_state) = bundled_setup(ws, &dir.join("bundled"))?;
    let mut bundled: Rounds = Vec::new();
    let mut bundled_warm: Rounds = Vec::new();
    for _ in 0..start_rounds(quick) {
        let _ = fs::remove_dir_all(&bundled_state);
        bundled.push(stdio_bench(&programs.stdio_bench, &init_only(), &quiver(&bundled_cfg))?);
        bundled_warm.push(stdio_bench(&programs.stdio_bench, &init_only(), &quiver(&bundled_cfg))?);
    }

    // Cold start with many signed bundles (generated marker copies), rounds interleaved.
    let counts = [10usize, 100, 300];
    let mut cold_cfgs = Vec::new();
    for n in counts {
        cold_cfgs.push(quiver_setup(
            &dir.join(format!("cold-{n}")),
            &m.key,
            &m.public,
            &m.source,
            &m.inline_lib,
            n,
            "",
        )?);
    }
    let mut cold: Vec<Rounds> = vec![Vec::new(); counts.len()];
    for round in 1..=rounds {
        eprintln!("==> cold start round {round}/{rounds}");
        for (i, cfg) in cold_cfgs.iter().enumerate() {
            // A first start: no rollback record yet (it is written once by the scan).
            let state = cfg.parent().unwrap_or(Path::new(".")).join("state");
            let _ = fs::remove_dir_all(&state);
            cold[i].push(stdio_bench(&programs.stdio_bench, &init_only(), &quiver(cfg))?);
        }
    }

    // Streamable HTTP: bare rmcp next to quiver serve --http, 1/8/32 sessions.
    let sessions = [1usize, 8, 32];
    // Each server's share of a round is timed in one-second slices, the two servers alternating,
    // so that a change in the machine's speed within a round falls on both (three seconds each
    // in one piece gave per-round ratios of 0.89x-1.06x on a slow machine).
    let slices = if quick { 1 } else { 3 };
    let mut http: Vec<(Rounds, Rounds)> = vec![(Vec::new(), Vec::new()); sessions.len()];
    let bare_port = free_port()?;
    let quiver_port = free_port()?;
    let mut bare_server = pinned(&[s(&programs.bare), "--http".into(), bare_port.to_string()])
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start bare_echo --http")?;
    let mut quiver_server = pinned(&[
        s(&programs.quiver),
        "--config".into(),
        s(inline_cfg),
        "serve".into(),
        "--http".into(),
        format!("127.0.0.1:{quiver_port}"),
    ])
    .stderr(Stdio::null())
    .spawn()
    .context("cannot start quiver serve --http")?;
    let measured = (|| -> Result<()> {
        wait_for_port(bare_port)?;
        wait_for_port(quiver_port)?;
        for round in 1..=rounds {
            eprintln!("==> HTTP round {round}/{rounds}");
            for (i, n) in sessions.iter().enumerate() {
                // (calls, seconds) of bare rmcp and of quiver over this round's slices, and the
                // CPU ticks each server spent on them.
                let mut sums = [(0.0, 0.0); 2];
                let mut ticks = [0u64; 2];
                let servers = [(bare_port, "echo", bare_server.id()), (quiver_port, "marker_echo", quiver_server.id())];
                for _ in 0..slices {
                    for ((sum, ticks), (port, tool, pid)) in sums.iter_mut().zip(ticks.iter_mut()).zip(servers) {
                        let args = [
                            "--url".to_owned(),
                            format!("http://127.0.0.1:{port}/mcp"),
                            "--tool".into(),
                            tool.into(),
                            "--sessions".into(),
                            n.to_string(),
                            "--seconds".into(),
                            "1".into(),
                            "--json".into(),
                        ];
                        let before = cpu_ticks(pid);
                        let slice = json_line(pinned(&[s(&programs.http_bench)]).args(args))?;
                        *ticks += cpu_ticks(pid).saturating_sub(before);
                        *sum = add_slice(*sum, &slice);
                    }
                }
                let (bare, quiver) = &mut http[i];
                bare.push(with_cpu(slices_rate(*n, sums[0]), ticks[0]));
                quiver.push(with_cpu(slices_rate(*n, sums[1]), ticks[1]));
            }
        }
        Ok(())
    })();
    let _ = bare_server.kill();
    let _ = quiver_server.kill();
    let _ = bare_server.wait();
    let _ = quiver_server.wait();
    measured?;

    let load = fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let report = Report {
        servers: &servers,
        stdio: &stdio,
        bundled: &bundled,
        bundled_warm: &bundled_warm,
        counts: &counts,
        cold: &cold,
        sessions: &sessions,
        http: &http,
    };
    let load = load.split_whitespace().take(3).collect::<Vec<_>>().join(" ");
    let mut head = header(quick, profile, rounds, &load);
    head.push(' ');
    head.push_str(&link_order_note(ws, &programs.quiver));
    let markdown = report.markdown(&head);
    println!("{markdown}");
    let svg_dir = ws.root.join("docs/bench");
    fs::create_dir_all(&svg_dir)?;
    crate::bench_plot::write_all(&svg_dir, &report.plot_data())?;
    replace_section(&ws.root.join("docs/BENCHMARKS.md"), &markdown)?;
    eprintln!("wrote docs/BENCHMARKS.md (speed section) and docs/bench/*.svg");
    // The generated bundles take space (up to 300 library copies).
    let _ = fs::remove_dir_all(dir.join("cold-300"));
    Ok(())
}

pub(crate) fn s(p: &Path) -> String {
    p.display().to_string()
}

/// Rounds of the bundled plugins' first and warm start. A start takes tens of milliseconds, and
/// on a shared machine one start in three can take twice the others (stop 38: first starts of
/// 10.1-22.4 ms in eight rounds by hand), so a median of three moved by several milliseconds
/// from run to run; eleven rounds cost well under a second more.
fn start_rounds(quick: bool) -> usize {
    if quick { 3 } else { 11 }
}

fn init_only() -> Vec<String> {
    vec!["--init-only".into(), "--json".into()]
}

/// The generated section's first paragraph: how it was measured, with which build profile.
fn header(quick: bool, profile: &Profile, rounds: usize, load: &str) -> String {
    format!(
        "Measured by `cargo xtask bench --speed{}{}` ({rounds} interleaved rounds; medians; load average at the end: {load}; \
         on a shared machine other work may run alongside, so read the ratios, taken within each round). The Rust servers (`quiver`, \
         bare rmcp `bare_echo`) are built with the cargo profile `{}`; the clients (`stdio_bench`, `http_bench`) and \
         the plugin libraries with `release`.",
        if quick { " --quick" } else { "" },
        if profile.name() == Profile::DEFAULT { String::new() } else { format!(" --profile {}", profile.name()) },
        profile.name(),
    )
}

/// How many of the names in `crates/cli/link-order.txt` the measured `quiver` defines (read
/// with `nm`), as a sentence for the generated text. The peak RSS figures depend on it: the
/// names carry hashes of the whole dependency graph and build settings, so a list recorded from
/// another build places fewer functions and the code a session runs spreads over more pages
/// (a build with one more dependency in the lockfile placed 2,526 of 3,388 and peaked at
/// 15.1 MiB against 10.2 MiB).
fn link_order_note(ws: &Workspace, quiver: &Path) -> String {
    match link_order_coverage(ws, quiver) {
        Ok((found, total)) => {
            if found < total {
                eprintln!(
                    "warning: the measured quiver defines {found} of the {total} names in crates/cli/link-order.txt; \
                     run `cargo xtask link-order` (peak RSS depends on it)"
                );
            }
            format!(
                "The `quiver` measured defines {found} of the {total} functions named in `crates/cli/link-order.txt` \
                 (the order its code is linked in; `cargo xtask link-order` regenerates it)."
            )
        }
        Err(e) => format!("Whether the measured `quiver` matches `crates/cli/link-order.txt` was not checked ({e:#})."),
    }
}

/// Whether `quiver` places fewer than [`STALE_BELOW`] of the names in the committed link order
/// (said on stderr with the figures). A list `nm` cannot check against the build is left as it is.
fn link_order_stale(ws: &Workspace, quiver: &Path) -> bool {
    let Ok((found, total)) = link_order_coverage(ws, quiver) else { return false };
    let stale = stale_share(found, total);
    if stale {
        eprintln!(
            "the link order is stale: the built quiver defines {found} of the {total} names in {}; \
             recording it again (`cargo xtask link-order`) before measuring",
            crate::link_order::LIST
        );
    }
    stale
}

/// How many of the names in the committed link order `quiver` defines: (found, total).
fn link_order_coverage(ws: &Workspace, quiver: &Path) -> Result<(usize, usize)> {
    let list = fs::read_to_string(ws.root.join(crate::link_order::LIST)).unwrap_or_default();
    Ok(link_order_placed(&list, &crate::link_order::function_addresses(quiver)?))
}

/// The share of a link order's names a build must define for the list to count as current.
const STALE_BELOW: f64 = 0.99;

/// Whether `found` of `total` listed names is too few for the list to count as current
/// (an empty list is always stale).
fn stale_share(found: usize, total: usize) -> bool {
    total == 0 || (found as f64) < STALE_BELOW * total as f64
}

/// Of the names in a link-order list (`#` lines are comments), how many the executable defines
/// (its function symbols, [`crate::link_order::function_addresses`]): (found, total).
fn link_order_placed(list: &str, defined: &std::collections::BTreeMap<String, u64>) -> (usize, usize) {
    let names: Vec<&str> = list.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).collect();
    (names.iter().filter(|n| defined.contains_key(**n)).count(), names.len())
}

/// `quiver` and the bare rmcp server built with `profile`, the two clients with `release`; the
/// Python venv.
fn build(ws: &Workspace, profile: &Profile) -> Result<Programs> {
    let servers = crate::bench::build_servers(ws, profile, &["bare_echo"])?;
    let clients = crate::bench::build_clients(ws, &["stdio_bench", "http_bench"])?;
    Ok(Programs {
        quiver: servers.join("quiver"),
        bare: servers.join("examples/bare_echo"),
        stdio_bench: clients.join("stdio_bench"),
        http_bench: clients.join("http_bench"),
        python: crate::e2e::python(ws)?,
    })
}

/// The repository's `quiver.yaml` written into `dir` with its paths made absolute and its state
/// folder in `dir` (so the bench can empty it without touching the repository's own); gives the
/// file and that state folder.
pub(crate) fn bundled_setup(ws: &Workspace, dir: &Path) -> Result<(PathBuf, PathBuf)> {
    let mut text = fs::read_to_string(ws.root.join("quiver.yaml"))?;
    let state = dir.join("state");
    for (from, to) in [
        ("\nplugins_dir: plugins\n", format!("\nplugins_dir: {}\n", s(&ws.root.join("plugins")))),
        ("path: .quiver-dev/dev.pub\n", format!("path: {}\n", s(&ws.dev_key_dir().join("dev.pub")))),
        ("\nstate_dir: .quiver-state\n", format!("\nstate_dir: {}\n", s(&state))),
    ] {
        anyhow::ensure!(text.contains(from), "quiver.yaml no longer has `{}`: update bundled_setup", from.trim());
        text = text.replacen(from, &to, 1);
    }
    fs::create_dir_all(dir)?;
    let cfg = dir.join("quiver.yaml");
    fs::write(&cfg, text)?;
    Ok((cfg, state))
}

/// The shipped bundles of `plugins/`, as `cargo xtask build-plugins` makes them (stripped
/// release libraries, signed with the development key, each shipping its load report, made by
/// the `quiver` given), without its load check through a debug `quiver` (the benchmark's own
/// release `quiver` loads them next, with every check).
pub(crate) fn bundle_shipped(ws: &Workspace, target: &Path, quiver: &Path) -> Result<()> {
    use crate::build_plugins::{DevKey, bundle, bundle_adapter, load_report, strip_config};
    let key = DevKey::load_or_create(&ws.dev_key_dir())?;
    let (plugins, adapters) = ws.select_all(&[])?;
    for a in adapters.iter().filter(|a| a.shipped) {
        bundle_adapter(a, &key)?;
    }
    for p in &plugins {
        ws.run(ws.cargo().args(["build", "--release", "-p", &p.package]).args(strip_config(&p.package)))?;
        let library = target.join("release").join(p.library_file_name());
        let report = load_report(ws, quiver, p, &library)?;
        let built = bundle(p, &library, Some(&report), &key)?;
        let size = fs::metadata(&library).map(|m| m.len()).unwrap_or(0);
        eprintln!("  {} {}: {} KiB library", built.id, built.version, size / 1024);
    }
    Ok(())
}

/// The three Quiver set-ups over one signed marker bundle each (`marker_echo` inline, as a
/// thread tool, in a worker process), in `dir`, with what they were made from.
pub(crate) struct MarkerSetups {
    pub(crate) key: quiver_manifest::KeyPair,
    pub(crate) public: PathBuf,
    /// The marker plugin's `tool.yaml`.
    pub(crate) source: String,
    pub(crate) inline_lib: PathBuf,
    pub(crate) inline: PathBuf,
    pub(crate) thread: PathBuf,
    pub(crate) worker: PathBuf,
}

/// Builds the marker libraries and the [`MarkerSetups`] in `dir` (one new signing key).
pub(crate) fn marker_setups(ws: &Workspace, target: &Path, dir: &Path) -> Result<MarkerSetups> {
    let (inline_lib, thread_lib) = marker_libraries(ws, target, dir)?;
    let key = quiver_manifest::KeyPair::generate();
    let public = dir.join("bench.pub");
    fs::write(&public, key.public_key_text())?;
    let source = fs::read_to_string(ws.root.join("tests/plugins/marker-plugin/tool.yaml"))?;
    let thread_src = source.replacen(INLINE_LINE, THREAD_LINE, 1);
    let worker_extra = "isolation:\n  plugins:\n    marker-plugin: process\n";
    let inline = quiver_setup(&dir.join("inline"), &key, &public, &source, &inline_lib, 0, "")?;
    let thread = quiver_setup(&dir.join("thread"), &key, &public, &thread_src, &thread_lib, 0, "")?;
    let worker = quiver_setup(&dir.join("worker"), &key, &public, &source, &inline_lib, 0, worker_extra)?;
    Ok(MarkerSetups { key, public, source, inline_lib, inline, thread, worker })
}

/// Stripped release builds of the marker plugin: as written (`marker_echo` inline) and with
/// `marker_echo` declared `execution: thread`; copied into `dir`.
fn marker_libraries(ws: &Workspace, target: &Path, dir: &Path) -> Result<(PathBuf, PathBuf)> {
    let built = target.join("release/libmarker_plugin.so");
    let thread = dir.join("libmarker_plugin_thread.so");
    let mut cmd = ws.cargo();
    cmd.args(["build", "--release", "-p", "marker-plugin"])
        .args(crate::build_plugins::strip_config("marker-plugin"))
        .env("QUIVER_MARKER_ECHO_LINES", THREAD_LINE);
    ws.run(&mut cmd)?;
    fs::copy(&built, &thread).with_context(|| format!("cannot copy {}", built.display()))?;
    let inline = dir.join("libmarker_plugin.so");
    ws.run(
        ws.cargo()
            .args(["build", "--release", "-p", "marker-plugin"])
            .args(crate::build_plugins::strip_config("marker-plugin")),
    )?;
    fs::copy(&built, &inline).with_context(|| format!("cannot copy {}", built.display()))?;
    Ok((inline, thread))
}

/// Writes `root/quiver.yaml` and a plugins folder: one marker bundle (`copies == 0`), or
/// `copies` bundles whose plugin id and tool names are rewritten in the library bytes and the
/// manifest alike (same lengths: `marker-plugin` → `mk-00042-plug`, `marker_echo` →
/// `m00042_echo`), each signed with `key`. Returns the configuration file.
fn quiver_setup(
    root: &Path,
    key: &quiver_manifest::KeyPair,
    public: &Path,
    source: &str,
    library: &Path,
    copies: usize,
    extra: &str,
) -> Result<PathBuf> {
    let plugins = root.join("plugins");
    fs::create_dir_all(&plugins)?;
    let bytes = fs::read(library).with_context(|| format!("cannot read {}", library.display()))?;
    if copies == 0 {
        write_signed_bundle(&plugins.join("marker"), key, source, &bytes, "libmarker_plugin.so")?;
    }
    for i in 0..copies {
        let id = format!("mk-{i:05}-plug");
        let prefix = format!("m{i:05}_");
        let renames = [("marker-plugin", id.as_str()), ("marker_", prefix.as_str())];
        let mut lib = bytes.clone();
        let mut text = source.to_owned();
        for (from, to) in renames {
            debug_assert_eq!(from.len(), to.len());
            replace_all(&mut lib, from.as_bytes(), to.as_bytes());
            text = text.replace(from, to);
        }
        write_signed_bundle(&plugins.join(&id), key, &text, &lib, &format!("lib{}.so", id.replace('-', "_")))?;
    }
    let config = root.join("quiver.yaml");
    fs::write(
        &config,
        format!(
            "# Written by `cargo xtask bench --speed`.\nconfig_version: 1\nplugins_dir: plugins\nstate_dir: state\n\
             trusted_keys:\n  - name: bench\n    path: {}\n    plugins: [\"*\"]\n    first_party: true\n{extra}",
            public.display()
        ),
    )?;
    Ok(config)
}

fn replace_all(haystack: &mut [u8], from: &[u8], to: &[u8]) {
    let mut i = 0;
    while i + from.len() <= haystack.len() {
        if &haystack[i..i + from.len()] == from {
            haystack[i..i + from.len()].copy_from_slice(to);
            i += from.len();
        } else {
            i += 1;
        }
    }
}

fn write_signed_bundle(
    folder: &Path,
    key: &quiver_manifest::KeyPair,
    source: &str,
    library: &[u8],
    file: &str,
) -> Result<()> {
    fs::create_dir_all(folder)?;
    let manifest = quiver_manifest::Manifest::from_yaml(source, "bench manifest")?;
    let sha256 = quiver_manifest::sha256_hex(library);
    let text = crate::build_plugins::bundle_manifest_text(source, file, &sha256, None);
    fs::write(folder.join(file), library)?;
    let path = folder.join(format!("{}.tool.yaml", manifest.id));
    fs::write(&path, &text)?;
    let comment = quiver_manifest::bundle_comment(&manifest.id, &manifest.version.to_string(), &sha256);
    let sig = quiver_manifest::sign(key, text.as_bytes(), &comment);
    fs::write(crate::build_plugins::signature_path(&path), sig)?;
    Ok(())
}

/// `taskset -c 0 PROGRAM ARGS...` (unpinned when `taskset` is missing).
fn pinned(command: &[String]) -> Command {
    let has_taskset = Command::new("taskset").arg("-V").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok();
    if has_taskset {
        let mut c = Command::new("taskset");
        c.args(["-c", "0"]).args(command);
        c
    } else {
        let mut c = Command::new(&command[0]);
        c.args(&command[1..]);
        c
    }
}

fn stdio_bench(bench: &Path, args: &[String], server: &[String]) -> Result<Value> {
    let mut command = vec![s(bench)];
    command.extend(args.iter().cloned());
    command.push("--".into());
    command.extend(server.iter().cloned());
    json_line(&mut pinned(&command))
}

/// Runs a benchmark client; echoes its human line and returns its last line parsed as JSON.
fn json_line(cmd: &mut Command) -> Result<Value> {
    let out = cmd.stderr(Stdio::inherit()).output().with_context(|| format!("cannot run {cmd:?}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!("{cmd:?} failed ({}): {text}", out.status);
    }
    for line in text.lines().filter(|l| !l.starts_with('{')) {
        eprintln!("  {line}");
    }
    let last = text.lines().rev().find(|l| l.starts_with('{')).with_context(|| format!("no JSON from {cmd:?}"))?;
    serde_json::from_str(last).with_context(|| format!("bad JSON from {cmd:?}: {last}"))
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn wait_for_port(port: u16) -> Result<()> {
    for _ in 0..200 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    bail!("nothing listens on 127.0.0.1:{port} after 10 s")
}

/// `sum` (calls, seconds) with one `http_bench --json` slice added (its `calls` at its `per_s`).
fn add_slice(sum: (f64, f64), slice: &Value) -> (f64, f64) {
    let calls = field(slice, "calls");
    (sum.0 + calls, sum.1 + calls / field(slice, "per_s"))
}

/// One round's figure for a server from its slices' (calls, seconds), in `http_bench`'s form.
fn slices_rate(sessions: usize, (calls, seconds): (f64, f64)) -> Value {
    serde_json::json!({"sessions": sessions, "per_s": calls / seconds, "calls": calls})
}

/// utime + stime of a process, in clock ticks (`/proc/PID/stat` fields 14 and 15; 0 when it
/// cannot be read).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    cpu_ticks_of(&stat)
}

fn cpu_ticks_of(stat: &str) -> u64 {
    // The command name (field 2) may hold spaces and parentheses: count fields after its last
    // closing parenthesis, where field 3 is index 0, so utime (14) is 11 and stime (15) is 12.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    num(11) + num(12)
}

/// A round's figure with the server's CPU per call over its slices (the kernel's 100 Hz ticks,
/// as `stdio_bench` reads them).
fn with_cpu(mut round: Value, ticks: u64) -> Value {
    let calls = field(&round, "calls");
    round["cpu_us_per_call"] = serde_json::json!(ticks as f64 * 10_000.0 / calls);
    round
}

fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

/// The smallest and largest finite figure (NaN, NaN for none).
fn range(figures: impl Iterator<Item = f64>) -> (f64, f64) {
    figures.filter(|x| x.is_finite()).fold((f64::NAN, f64::NAN), |(low, high), x| (low.min(x), high.max(x)))
}

fn field(v: &Value, k: &str) -> f64 {
    v.get(k).and_then(Value::as_f64).unwrap_or(f64::NAN)
}

/// Everything measured, for the markdown and the plots.
struct Report<'a> {
    servers: &'a [StdioServer],
    stdio: &'a [Rounds],
    bundled: &'a Rounds,
    bundled_warm: &'a Rounds,
    counts: &'a [usize],
    cold: &'a [Rounds],
    sessions: &'a [usize],
    http: &'a [(Rounds, Rounds)],
}

/// Index of the bare `stdio_pipes()` server and of Quiver inline in `servers`.
const PIPES: usize = 2;
const PYTHON: usize = 0;
const INLINE: usize = 3;

impl Report<'_> {
    fn med(&self, server: usize, k: &str) -> f64 {
        median(self.stdio[server].iter().map(|r| field(r, k)).collect())
    }

    /// Median over rounds of `server`'s figure divided by `base`'s in the same round.
    fn ratio(&self, server: usize, base: usize, k: &str) -> f64 {
        median(self.stdio[server].iter().zip(&self.stdio[base]).map(|(a, b)| field(a, k) / field(b, k)).collect())
    }

    fn markdown(&self, header: &str) -> String {
        let mut m = String::new();
        let _ = writeln!(m, "{BEGIN}");
        let _ = writeln!(m, "{header}\n");
        let _ = writeln!(
            m,
            "| server | server CPU per call | vs pipes | sequential calls/s | vs pipes | 8 in flight calls/s | vs pipes | p50 | spawn → initialized | peak RSS |"
        );
        let _ = writeln!(m, "|---|---|---|---|---|---|---|---|---|---|");
        for (i, server) in self.servers.iter().enumerate() {
            let _ = writeln!(
                m,
                "| {} | {:.1} µs | {:.2}x | {:.0} | {:.2}x | {:.0} | {:.2}x | {:.0} µs | {:.1} ms | {:.1} MiB |",
                server.label,
                self.med(i, "cpu_us_per_call"),
                self.ratio(i, PIPES, "cpu_us_per_call"),
                self.med(i, "seq_per_s"),
                self.ratio(i, PIPES, "seq_per_s"),
                self.med(i, "inflight_per_s"),
                self.ratio(i, PIPES, "inflight_per_s"),
                self.med(i, "p50_us"),
                self.med(i, "init_ms"),
                self.med(i, "peak_rss_kib") / 1024.0,
            );
        }
        let _ = writeln!(
            m,
            "\nQuiver inline against the Python SDK: {:.1}x the sequential calls/s, {:.1}x with 8 in flight. \
             Server CPU is utime + stime of the server process over the sequential phase (10 ms ticks; \
             {} calls for the Rust servers, {} for Python). The worker row counts the host process only \
             (the worker's own CPU is not in it).\n",
            self.ratio(INLINE, PYTHON, "seq_per_s"),
            self.ratio(INLINE, PYTHON, "inflight_per_s"),
            self.servers[PIPES].calls,
            self.servers[PYTHON].calls,
        );
        let med = |rounds: &Rounds, k: &str| median(rounds.iter().map(|r| field(r, k)).collect());
        let _ = writeln!(
            m,
            "With the bundled plugins (`cargo xtask build-plugins`, the repository's `quiver.yaml` with a state folder of the \
             bench's own, fs-tools in a worker), median of {} rounds:\n",
            self.bundled.len()
        );
        let _ = writeln!(
            m,
            "| start | spawn → initialized | its range over the rounds | spawn → first complete `tools/list` | peak RSS of the host |"
        );
        let _ = writeln!(m, "|---|---|---|---|---|");
        for (label, rounds) in [
            ("first start (empty state folder)", self.bundled),
            ("warm start (state kept by the start before)", self.bundled_warm),
        ] {
            let (low, high) = range(rounds.iter().map(|r| field(r, "init_ms")));
            let _ = writeln!(
                m,
                "| {label} | **{:.1} ms** | {low:.1}-{high:.1} ms | {:.1} ms | **{:.1} MiB** |",
                med(rounds, "init_ms"),
                med(rounds, "list_ms"),
                med(rounds, "peak_rss_kib") / 1024.0
            );
        }
        let _ = writeln!(m);
        let _ = writeln!(m, "| signed bundles | spawn → initialized | per bundle | peak RSS |");
        let _ = writeln!(m, "|---|---|---|---|");
        for (i, n) in self.counts.iter().enumerate() {
            let init = median(self.cold[i].iter().map(|r| field(r, "init_ms")).collect());
            let rss = median(self.cold[i].iter().map(|r| field(r, "peak_rss_kib")).collect());
            let _ = writeln!(m, "| {n} | {init:.1} ms | {:.2} ms | {:.1} MiB |", init / *n as f64, rss / 1024.0);
        }
        let _ = writeln!(
            m,
            "\nCold start: generated copies of the stripped marker plugin (plugin id and tool names rewritten in the \
             library and the manifest, each bundle signed), first start (no rollback record yet).\n"
        );
        let _ = writeln!(
            m,
            "| HTTP sessions | bare rmcp calls/s | Quiver calls/s | Quiver / bare | bare rmcp server CPU per call | Quiver server CPU per call | Quiver / bare |"
        );
        let _ = writeln!(m, "|---|---|---|---|---|---|---|");
        for (i, n) in self.sessions.iter().enumerate() {
            let (bare, quiver) = &self.http[i];
            let ratio = |k: &str| median(bare.iter().zip(quiver).map(|(b, q)| field(q, k) / field(b, k)).collect());
            let _ = writeln!(
                m,
                "| {n} | {:.0} | {:.0} | {:.2}x | {:.1} µs | {:.1} µs | {:.2}x |",
                med(bare, "per_s"),
                med(quiver, "per_s"),
                ratio("per_s"),
                med(bare, "cpu_us_per_call"),
                med(quiver, "cpu_us_per_call"),
                ratio("cpu_us_per_call"),
            );
        }
        let _ = writeln!(
            m,
            "\nStreamable HTTP: one keep-alive connection and one client thread per session, calls back to back \
             (`http_bench`), server and client pinned to core 0; bare rmcp with its default configuration. Each round \
             times each server in one-second slices, the two alternating (three each, one with `--quick`). A \
             server's CPU per call is its utime + stime over its slices (10 ms ticks) divided by their calls: \
             client and server share one core, so calls/s are partly the client's, the CPU per call is the \
             server's own.\n"
        );
        let _ = writeln!(
            m,
            "![calls per second](bench/calls.svg) ![server CPU per call](bench/cpu.svg)\n\
             ![cold start](bench/cold-start.svg) ![streamable HTTP](bench/http.svg)"
        );
        let _ = write!(m, "{END}");
        m
    }

    fn plot_data(&self) -> crate::bench_plot::Data {
        crate::bench_plot::Data {
            servers: self.servers.iter().map(|s| s.label.replace('`', "")).collect(),
            sequential: (0..self.servers.len()).map(|i| self.med(i, "seq_per_s")).collect(),
            inflight: (0..self.servers.len()).map(|i| self.med(i, "inflight_per_s")).collect(),
            cpu_us: (0..self.servers.len()).map(|i| self.med(i, "cpu_us_per_call")).collect(),
            cold: self
                .counts
                .iter()
                .zip(self.cold)
                .map(|(n, r)| (*n as f64, median(r.iter().map(|x| field(x, "init_ms")).collect())))
                .collect(),
            http: self
                .sessions
                .iter()
                .zip(self.http)
                .map(|(n, (b, q))| {
                    (
                        *n,
                        median(b.iter().map(|x| field(x, "per_s")).collect()),
                        median(q.iter().map(|x| field(x, "per_s")).collect()),
                    )
                })
                .collect(),
        }
    }
}

/// Replaces the text between the markers (inclusive) in `file`, or inserts a new section
/// before "## What is left" (or at the end) when the markers are not there yet.
fn replace_section(file: &Path, generated: &str) -> Result<()> {
    let text = fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let new = match (text.find(BEGIN), text.find(END)) {
        (Some(b), Some(e)) if e > b => format!("{}{generated}{}", &text[..b], &text[e + END.len()..]),
        _ => {
            let section = format!(
                "## Speed: Quiver next to the Python SDK and bare rmcp (`cargo xtask bench --speed`)\n\n{generated}\n\n"
            );
            match text.find("## What is left") {
                Some(i) => format!("{}{section}{}", &text[..i], &text[i..]),
                None => format!("{text}\n{section}"),
            }
        }
    };
    fs::write(file, new).with_context(|| format!("cannot write {}", file.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generated_section_replaces_itself() {
        let dir = std::env::temp_dir().join(format!("xtask-bench-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let file = dir.join("B.md");
        fs::write(&file, "# T\n\n## A\ntext\n\n## What is left\n- x\n").unwrap();
        replace_section(&file, &format!("{BEGIN}\nfirst\n{END}")).unwrap();
        replace_section(&file, &format!("{BEGIN}\nsecond\n{END}")).unwrap();
        let text = fs::read_to_string(&file).unwrap();
        assert!(text.contains("second") && !text.contains("first"), "{text}");
        assert_eq!(text.matches(BEGIN).count(), 1, "{text}");
        assert!(text.find("second").unwrap() < text.find("## What is left").unwrap(), "{text}");
        fs::remove_dir_all(&dir).unwrap();
    }

    /// The bundled set-up is the repository's configuration with its three paths made absolute
    /// and its state folder the bench's own; the result is a valid configuration.
    #[test]
    fn the_bundled_setup_keeps_the_repository_configuration_with_its_own_state_folder() {
        let ws = Workspace { root: Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned() };
        let dir = std::env::temp_dir().join(format!("xtask-bundled-{}", std::process::id()));
        let (cfg, state) = bundled_setup(&ws, &dir).unwrap();
        assert_eq!(state, dir.join("state"));
        let text = fs::read_to_string(&cfg).unwrap();
        let config = quiver_manifest::HostConfig::from_yaml(&text, "quiver.yaml").unwrap();
        assert_eq!(config.plugins_dir, ws.root.join("plugins"));
        assert_eq!(config.state_dir, state);
        assert_eq!(config.trusted_keys[0].path, Some(ws.root.join(".quiver-dev/dev.pub")));
        let repo = fs::read_to_string(ws.root.join("quiver.yaml")).unwrap();
        let repo = quiver_manifest::HostConfig::from_yaml(&repo, "quiver.yaml").unwrap();
        assert_eq!(config.profiles, repo.profiles);
        assert_eq!(config.isolation, repo.isolation);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_generated_text_names_the_build_profile_of_the_servers() {
        let dist = header(false, &Profile::parse("dist").unwrap(), 3, "1.00 2.00 3.00");
        assert!(dist.starts_with("Measured by `cargo xtask bench --speed --profile dist` (3 interleaved"), "{dist}");
        assert!(dist.contains("built with the cargo profile `dist`"), "{dist}");
        let release = header(true, &Profile::parse("release").unwrap(), 2, "1.00 2.00 3.00");
        assert!(release.starts_with("Measured by `cargo xtask bench --speed --quick` (2 interleaved"), "{release}");
        assert!(release.contains("built with the cargo profile `release`"), "{release}");
    }

    #[test]
    fn link_order_coverage_counts_the_listed_names_the_executable_defines() {
        let list = "# a comment\nmain\n_RNvfoo\n\n_RNvgone\n";
        let defined: std::collections::BTreeMap<String, u64> =
            [("main", 0xb41180), ("_RNvfoo", 0xb411b0), ("_RNvother", 0xc00000)].map(|(n, a)| (n.to_owned(), a)).into();
        assert_eq!(link_order_placed(list, &defined), (2, 3));
        assert_eq!(link_order_placed("", &defined), (0, 0));
    }

    #[test]
    fn http_slices_add_up_to_one_rate_over_their_calls_and_time() {
        let one = serde_json::json!({"sessions": 8, "per_s": 1000.0, "calls": 1000});
        let two = serde_json::json!({"sessions": 8, "per_s": 3000.0, "calls": 6000});
        let sum = add_slice(add_slice((0.0, 0.0), &one), &two);
        assert_eq!(sum, (7000.0, 3.0));
        assert_eq!(field(&slices_rate(8, sum), "per_s"), 7000.0 / 3.0);
    }

    #[test]
    fn cpu_ticks_are_utime_and_stime_after_the_command_name() {
        // A command name with spaces and a parenthesis, then state, ppid, ... utime 1234, stime 56.
        let stat = "4242 (quiver (x) y) S 1 4242 4242 0 -1 4194560 900 0 0 0 1234 56 0 0 20 0 7 0 100";
        assert_eq!(cpu_ticks_of(stat), 1290);
        assert_eq!(cpu_ticks_of(""), 0);
        let round = with_cpu(slices_rate(8, (20_000.0, 2.0)), 50);
        assert_eq!(field(&round, "cpu_us_per_call"), 25.0);
    }

    #[test]
    fn a_range_is_the_smallest_and_largest_finite_figure() {
        assert_eq!(range([10.1, f64::NAN, 22.4, 14.0].into_iter()), (10.1, 22.4));
        assert_eq!(range([7.5].into_iter()), (7.5, 7.5));
        let (low, high) = range([f64::NAN].into_iter());
        assert!(low.is_nan() && high.is_nan());
        assert!(start_rounds(false) > start_rounds(true) && start_rounds(true) >= 3);
    }

    #[test]
    fn a_link_order_that_places_under_99_percent_is_stale() {
        assert!(!stale_share(3407, 3407));
        assert!(!stale_share(3380, 3407));
        // 3,315 of 3,407 (a change to the catalog's search code) cost a first start 1.4 MiB.
        assert!(stale_share(3315, 3407));
        assert!(stale_share(1701, 3394));
        assert!(stale_share(0, 0));
    }

    #[test]
    fn renaming_keeps_lengths_and_replaces_every_occurrence() {
        let mut b = b"id: marker-plugin; marker-plugin!".to_vec();
        replace_all(&mut b, b"marker-plugin", b"mk-00001-plug");
        assert_eq!(b, b"id: mk-00001-plug; mk-00001-plug!".to_vec());
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
