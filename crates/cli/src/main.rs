//! `quiver`: the command line of the Quiver tool host. It wires the crates together: reads the
//! host configuration (`quiver.yaml`) into [`quiver_lifecycle::HostSettings`] ([`settings`]),
//! loads signed bundles through [`quiver_lifecycle::Host`], calls tools through
//! [`quiver_router::Router`], and signs and verifies bundles with [`quiver_manifest`].
//!
//! Commands: `serve` (the MCP server), `list`, `call`, `verify` (the host's checks on bundles,
//! then a load check only in sandboxed worker processes), `keygen`, `sign`, `replay`, `stats`, `search`, `eval search`, `config` (which
//! configuration file is used), `completions` and `man` (generated from the clap definition), and
//! the hidden `contract-test` behind `cargo xtask contract-test`. Each lives in its own module
//! under `commands/`.
//!
//! Configuration: `--config`, else `./quiver.yaml`, else `$XDG_CONFIG_HOME/quiver/quiver.yaml`
//! ([`config_file`]). The main options also read `QUIVER_*` environment variables
//! (`QUIVER_CONFIG`, `QUIVER_PLUGINS`, `QUIVER_JSON`; `serve`: `QUIVER_HTTP`, `QUIVER_PROFILE`,
//! `QUIVER_ALLOW_HOSTS`); a flag on the command line wins over its variable.
//!
//! Output contract: results go to stdout (human text, or one JSON document with `--json`); logs,
//! warnings and errors go to stderr only. Exit codes: 0 success, 1 failure, 2 usage error.
//!
//! What this binary does not do: decide policy (the router does), verify signatures itself (the
//! lifecycle and manifest crates do) or speak MCP (`quiver-mcp`).

mod bundle;
mod commands;
mod config_file;
mod settings;
mod telemetry;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

/// Serve native tool plugins to LLM agents; inspect, call, sign and verify them.
#[derive(Debug, Parser)]
#[command(name = "quiver", version, about, propagate_version = true)]
struct Cli {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

/// Flags every command accepts.
#[derive(Debug, Clone, Args)]
pub struct GlobalArgs {
    /// Plugins folder to scan (overrides `plugins_dir` of the config).
    #[arg(long, global = true, value_name = "DIR", env = "QUIVER_PLUGINS")]
    pub plugins: Option<PathBuf>,
    /// Host configuration file [default: ./quiver.yaml, else $XDG_CONFIG_HOME/quiver/quiver.yaml
    /// (~/.config/quiver/quiver.yaml), else built-in defaults].
    #[arg(long, global = true, value_name = "FILE", env = "QUIVER_CONFIG")]
    pub config: Option<PathBuf>,
    /// Machine-readable output: one JSON document on stdout (QUIVER_JSON: any value but
    /// 0/false/no/off/empty turns it on).
    #[arg(long, global = true, env = "QUIVER_JSON", value_parser = clap::builder::FalseyValueParser::new())]
    pub json: bool,
    /// More log output on stderr (-v info, -vv debug); RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Log lines on stderr as `text` or `json` (one object per line) [default: the
    /// configuration's telemetry.log_format, else text]. Never on stdout.
    #[arg(long, global = true, value_name = "FORMAT", env = "QUIVER_LOG_FORMAT",
          value_parser = clap::builder::PossibleValuesParser::new(["text", "json"]))]
    pub log_format: Option<String>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List the loaded tools with their plugin, version and lifecycle state.
    List(commands::list::ListArgs),
    /// Call one tool through the router and print its result.
    Call(commands::call::CallArgs),
    /// Verify bundles (signature, manifest, checksum), then load-check each in a sandboxed worker.
    Verify(commands::verify::VerifyArgs),
    /// Create a minisign key pair for signing bundles.
    Keygen(commands::keygen::KeygenArgs),
    /// Sign a bundle manifest (optionally pinning its library first).
    Sign(commands::sign::SignArgs),
    /// Roll a plugin back to a lower version on purpose (drops its rollback record; logged).
    Rollback(commands::rollback::RollbackArgs),
    /// Make a bearer token for the HTTP transport (prints the sha256 entry for quiver.yaml).
    Token(commands::token::TokenArgs),
    /// Re-run a call transcript against the plugins loaded now and compare the answers.
    Replay(commands::replay::ReplayArgs),
    /// Summarize a call transcript, or a running server's metrics (a http:// URL; --token).
    Stats(commands::stats::StatsArgs),
    /// Serve the tools to MCP clients: stdio by default, streamable HTTP with --http.
    Serve(commands::serve::ServeArgs),
    /// Run a scripted MCP session against `quiver serve` on the configured plugins.
    Demo(commands::demo::DemoArgs),
    /// Show a profile's first-turn surface: its tools, sizes, and the exact bytes clients get.
    Surface(commands::surface::SurfaceArgs),
    /// Search the catalog as an agent's `tool_search` does.
    Search(commands::search::SearchArgs),
    /// Measure search quality: recall@k, MRR and latency on labelled queries.
    Eval(commands::eval::EvalArgs),
    /// Show which configuration file is used and the settings it resolves to.
    Config(commands::config::ConfigArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) on stdout.
    Completions(commands::completions::CompletionsArgs),
    /// Print the man page on stdout, or write one page per command into a folder.
    Man(commands::completions::ManArgs),
    /// Run a plugin's contract-test fixtures through the real host and router (used by
    /// `cargo xtask contract-test`).
    #[command(hide = true)]
    ContractTest(commands::contract_test::ContractTestArgs),
    /// Serve one plugin in a sandboxed worker process for a host (internal: the host starts it
    /// and speaks the worker protocol over its stdin and stdout).
    #[command(hide = true)]
    Worker,
}

/// The clap definition of the whole command line (for completions and man pages).
pub fn command_definition() -> clap::Command {
    use clap::CommandFactory;
    Cli::command()
}

/// An error in how the command was invoked (exit code 2), as opposed to a failure (exit 1).
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// A command that ran and found a failure it already reported (exit code 1, no extra message).
#[derive(Debug)]
pub struct Reported;

impl std::fmt::Display for Reported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("failure already reported")
    }
}

impl std::error::Error for Reported {}

/// Sends logs to stderr (through `quiver_telemetry`, which never writes to stdout), as text or
/// JSON ([`telemetry`]), and for `serve` exports traces when an OTLP endpoint is configured.
/// Default level: warnings, minus the loader's reports of rejected bundles and catalog
/// warnings (target `quiver_lifecycle::reported`: the commands print those themselves, `serve`
/// for every rescan too); `-v` info, `-vv` debug; `RUST_LOG` overrides all of it.
fn init_logging(g: &GlobalArgs, command: &Command) -> Result<quiver_telemetry::TelemetryGuard, String> {
    let verbose = g.verbose;
    if std::env::var_os("RUST_LOG").is_none() {
        let filter = match verbose {
            // rmcp logs every JSON-RPC error response it sends as a warning: noise in a client's log.
            0 => "warn,quiver_lifecycle::reported=off,rmcp=error",
            1 => "info",
            _ => "debug",
        };
        // SAFETY: called first thing in `main`, before any other thread exists, so nothing reads
        // the environment concurrently.
        unsafe { std::env::set_var("RUST_LOG", filter) };
    }
    match command {
        Command::Serve(a) => telemetry::init(g, a.otlp.as_deref(), true),
        _ => telemetry::init(g, None, false),
    }
}

/// A closed stdout (`quiver list | head`) ends the process quietly, as it does for other Unix
/// tools, instead of a panic on the failed write (Rust ignores SIGPIPE by default).
fn default_sigpipe() {
    #[cfg(unix)]
    // SAFETY: called first thing in `main`, before any thread exists; restoring a signal's
    // default disposition has no other effect on the process.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() -> ExitCode {
    default_sigpipe();
    let cli = Cli::parse();
    if matches!(cli.command, Command::Worker) {
        // Before logging or anything else that could start a thread: the worker sandboxes itself
        // (Landlock applies to the threads created after it).
        return quiver_lifecycle::worker::run_child();
    }
    // Held to the end: dropping it sends the trace spans not yet exported.
    let _telemetry = match init_logging(&cli.global, &cli.command) {
        Ok(guard) => guard,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let g = &cli.global;
    let result = match cli.command {
        Command::List(a) => commands::list::run(g, &a),
        Command::Call(a) => commands::call::run(g, &a),
        Command::Verify(a) => commands::verify::run(g, &a),
        Command::Keygen(a) => commands::keygen::run(g, &a),
        Command::Sign(a) => commands::sign::run(g, &a),
        Command::Replay(a) => commands::replay::run(g, &a),
        Command::Rollback(a) => commands::rollback::run(g, &a),
        Command::Token(a) => commands::token::run(g, &a),
        Command::Stats(a) => commands::stats::run(g, &a),
        Command::Serve(a) => commands::serve::run(g, &a),
        Command::Search(a) => commands::search::run(g, &a),
        Command::Demo(a) => commands::demo::run(g, &a),
        Command::Surface(a) => commands::surface::run(g, &a),
        Command::Eval(a) => commands::eval::run(g, &a),
        Command::Config(a) => commands::config::run(g, &a),
        Command::Completions(a) => commands::completions::run_completions(&a),
        Command::Man(a) => commands::completions::run_man(&a),
        Command::ContractTest(a) => commands::contract_test::run(g, &a),
        Command::Worker => unreachable!("handled above"),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is::<Reported>() => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e:#}");
            if e.is::<UsageError>() { ExitCode::from(2) } else { ExitCode::FAILURE }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
