//! `quiver completions SHELL` and `quiver man`: shell completion scripts (`clap_complete`) and
//! roff man pages (`clap_mangen`), both generated from the same clap definition the binary
//! parses with, so they never drift from the real flags.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use clap_complete::Shell;

/// Arguments of `quiver completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for. Install, e.g.: bash `quiver completions bash >
    /// ~/.local/share/bash-completion/completions/quiver`; zsh: into a folder on `$fpath` as
    /// `_quiver`; fish: `~/.config/fish/completions/quiver.fish`.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// Arguments of `quiver man`.
#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write `quiver.1` and one page per command (`quiver-serve.1`, ...) into this folder
    /// instead of printing the main page on stdout.
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
}

pub fn run_completions(a: &CompletionsArgs) -> Result<()> {
    let mut cmd = crate::command_definition();
    clap_complete::generate(a.shell, &mut cmd, "quiver", &mut std::io::stdout());
    Ok(())
}

pub fn run_man(a: &ManArgs) -> Result<()> {
    let cmd = crate::command_definition();
    match &a.out_dir {
        None => clap_mangen::Man::new(cmd).render(&mut std::io::stdout()).context("cannot write the man page"),
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
            clap_mangen::generate_to(cmd, dir)
                .with_context(|| format!("cannot write man pages into {}", dir.display()))?;
            eprintln!("man pages written to {} (view one with `man -l {}/quiver.1`)", dir.display(), dir.display());
            Ok(())
        }
    }
}
