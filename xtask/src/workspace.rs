//! The repository as xtask sees it: its root, the cargo to call, and the plugin packages under
//! `plugins/`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::Value;

/// The repository checkout xtask works on.
#[derive(Debug, Clone)]
pub struct Workspace {
    /// Repository root (the folder of the virtual `Cargo.toml`).
    pub root: PathBuf,
}

/// A plugin package under `plugins/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginSource {
    /// Folder name under `plugins/`; also the bundle's file stem (`<name>.tool.yaml`).
    pub name: String,
    /// The plugin's folder.
    pub dir: PathBuf,
    /// Cargo package name (for `-p`).
    pub package: String,
    /// Library crate name (`lib<crate_name>.so`).
    pub crate_name: String,
}

impl PluginSource {
    /// File name of the built library (`lib<crate>.so` on Linux).
    pub fn library_file_name(&self) -> String {
        format!("{}{}{}", std::env::consts::DLL_PREFIX, self.crate_name, std::env::consts::DLL_SUFFIX)
    }

    /// The source manifest every plugin keeps beside its `Cargo.toml`.
    pub fn source_manifest(&self) -> PathBuf {
        self.dir.join("tool.yaml")
    }

    /// The bundle manifest `build-plugins` writes.
    pub fn bundle_manifest(&self) -> PathBuf {
        self.dir.join(format!("{}.tool.yaml", self.name))
    }

    /// File name of the load report the bundle ships (what `quiver sign --report` names it
    /// beside `NAME.tool.yaml`).
    pub fn report_file_name(&self) -> String {
        format!("{}.report.json", self.name)
    }
}

/// A declarative adapter bundle: a folder with a `tool.yaml` declaring `adapter:` and no
/// `Cargo.toml`, under `plugins/` (shipped, signed by `build-plugins`) or `tests/adapters/`
/// (test-only: contract-tested, never bundled).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdapterSource {
    /// Folder name; also the bundle's file stem.
    pub name: String,
    /// The folder.
    pub dir: PathBuf,
    /// True under `plugins/`.
    pub shipped: bool,
}

impl AdapterSource {
    /// The source manifest.
    pub fn source_manifest(&self) -> PathBuf {
        self.dir.join("tool.yaml")
    }

    /// The bundle manifest `build-plugins` writes (a copy of the source manifest).
    pub fn bundle_manifest(&self) -> PathBuf {
        self.dir.join(format!("{}.tool.yaml", self.name))
    }
}

impl Workspace {
    /// Adapter bundles under `plugins/` and `tests/adapters/`, sorted by folder name.
    pub fn adapters(&self) -> Result<Vec<AdapterSource>> {
        let mut out = Vec::new();
        for (root, shipped) in [(self.plugins_dir(), true), (self.root.join("tests/adapters"), false)] {
            let Ok(rd) = std::fs::read_dir(&root) else { continue };
            for e in rd.flatten() {
                let dir = e.path();
                if !dir.join("tool.yaml").is_file() || dir.join("Cargo.toml").exists() {
                    continue;
                }
                let text = std::fs::read_to_string(dir.join("tool.yaml"))
                    .with_context(|| format!("cannot read {}", dir.join("tool.yaml").display()))?;
                let m = quiver_manifest::Manifest::from_yaml(&text, &dir.join("tool.yaml").display().to_string())?;
                if m.adapter.is_none() {
                    bail!(
                        "{}: a plugin folder without Cargo.toml must be an adapter bundle (`adapter:` in tool.yaml), or add the plugin's Cargo.toml",
                        dir.display()
                    );
                }
                let name = e.file_name().to_string_lossy().into_owned();
                out.push(AdapterSource { name, dir, shipped });
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Plugins and adapters named on the command line (all of each when `names` is empty).
    pub fn select_all(&self, names: &[String]) -> Result<(Vec<PluginSource>, Vec<AdapterSource>)> {
        let adapters = self.adapters()?;
        if names.is_empty() {
            return Ok((self.select_plugins(&[])?, adapters));
        }
        let (picked, rest): (Vec<String>, Vec<String>) =
            names.iter().cloned().partition(|n| adapters.iter().any(|a| &a.name == n));
        let plugins = if rest.is_empty() { Vec::new() } else { self.select_plugins(&rest)? };
        Ok((plugins, adapters.into_iter().filter(|a| picked.contains(&a.name)).collect()))
    }

    /// The workspace this xtask binary was built from.
    pub fn current() -> Workspace {
        let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
        let root = manifest_dir.parent().unwrap_or(manifest_dir).to_path_buf();
        Workspace { root }
    }

    /// The folder of the bundled plugins.
    pub fn plugins_dir(&self) -> PathBuf {
        self.root.join("plugins")
    }

    /// The local development key folder (git-ignored).
    pub fn dev_key_dir(&self) -> PathBuf {
        self.root.join(".quiver-dev")
    }

    /// A cargo command run from the repository root, through `$CARGO` when cargo started us.
    /// Without the `CARGO_MANIFEST_DIR` that `cargo run` (the `xtask` alias) sets for us:
    /// `ring`'s build script reruns when it changes, so passing it on rebuilt `ring` and
    /// everything above it (rustls, reqwest, rmcp, the Quiver crates) whenever a build from a
    /// shell and one from xtask alternated. The same for the `CARGO_PKG_*` variables (`ring`'s
    /// build script also reruns when `CARGO_PKG_NAME` or `CARGO_PKG_VERSION_*` change) and
    /// `CARGO_MANIFEST_PATH`.
    pub fn cargo(&self) -> Command {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.current_dir(&self.root).env_remove("CARGO_MANIFEST_DIR").env_remove("CARGO_MANIFEST_PATH");
        for (name, _) in std::env::vars_os() {
            if name.to_str().is_some_and(|n| n.starts_with("CARGO_PKG_")) {
                cmd.env_remove(name);
            }
        }
        cmd
    }

    /// Runs a command to completion, echoing it first; fails on a non-zero exit.
    pub fn run(&self, cmd: &mut Command) -> Result<()> {
        eprintln!("$ {}", display_command(cmd));
        let status = cmd.status().with_context(|| format!("cannot start `{}`", display_command(cmd)))?;
        if !status.success() {
            bail!("`{}` failed ({status})", display_command(cmd));
        }
        Ok(())
    }

    fn metadata(&self) -> Result<Value> {
        let out = self
            .cargo()
            .args(["metadata", "--no-deps", "--format-version", "1"])
            .output()
            .context("cannot run `cargo metadata`")?;
        if !out.status.success() {
            bail!("`cargo metadata` failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        serde_json::from_slice(&out.stdout).context("`cargo metadata` printed something that is not JSON")
    }

    /// The cargo target directory (honours `CARGO_TARGET_DIR` and `.cargo/config.toml`).
    pub fn target_dir(&self) -> Result<PathBuf> {
        let meta = self.metadata()?;
        meta["target_directory"]
            .as_str()
            .map(PathBuf::from)
            .context("`cargo metadata` did not name the target directory")
    }

    /// Every workspace package under `plugins/`, sorted by folder name.
    pub fn plugins(&self) -> Result<Vec<PluginSource>> {
        let meta = self.metadata()?;
        let plugins_dir = self.plugins_dir();
        let mut out = Vec::new();
        for pkg in meta["packages"].as_array().into_iter().flatten() {
            let Some(manifest_path) = pkg["manifest_path"].as_str().map(PathBuf::from) else { continue };
            let Some(dir) = manifest_path.parent() else { continue };
            if dir.parent() != Some(plugins_dir.as_path()) {
                continue;
            }
            let package = pkg["name"].as_str().unwrap_or_default().to_owned();
            let lib = pkg["targets"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|t| t["kind"].as_array().is_some_and(|k| k.iter().any(|k| k == "cdylib")));
            let Some(lib) = lib else {
                bail!(
                    "{}: plugin package `{package}` builds no `cdylib`; add `[lib] crate-type = [\"cdylib\", \"rlib\"]`",
                    manifest_path.display()
                );
            };
            let crate_name = lib["name"].as_str().unwrap_or(&package).replace('-', "_");
            let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            out.push(PluginSource { name, dir: dir.to_path_buf(), package, crate_name });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// The plugins named on the command line (by folder or package name), or all of them.
    pub fn select_plugins(&self, names: &[String]) -> Result<Vec<PluginSource>> {
        let all = self.plugins()?;
        if all.is_empty() {
            self.check_plugins_are_members()?;
        }
        if names.is_empty() {
            return Ok(all);
        }
        let mut out = Vec::new();
        for n in names {
            match all.iter().find(|p| &p.name == n || &p.package == n) {
                Some(p) => out.push(p.clone()),
                None => {
                    let known: Vec<&str> = all.iter().map(|p| p.name.as_str()).collect();
                    bail!(
                        "no plugin `{n}` under plugins/ (known: {}); create one with `cargo xtask new-tool {n}`",
                        if known.is_empty() { "none".to_owned() } else { known.join(", ") }
                    );
                }
            }
        }
        Ok(out)
    }

    /// Folders under `plugins/` with a `Cargo.toml` that cargo does not know are not workspace
    /// members: say so instead of silently building nothing.
    fn check_plugins_are_members(&self) -> Result<()> {
        let Ok(rd) = std::fs::read_dir(self.plugins_dir()) else { return Ok(()) };
        for e in rd.flatten() {
            if e.path().join("Cargo.toml").is_file() {
                bail!(
                    "{} is not a member of the cargo workspace; add \"plugins/*\" to `members` in the root Cargo.toml",
                    e.path().display()
                );
            }
        }
        Ok(())
    }
}

/// A command as a shell line, for messages.
pub fn display_command(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    if let Some(name) = Path::new(&s).file_name() {
        s = name.to_string_lossy().into_owned();
    }
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cargo_runs_without_the_manifest_dir_cargo_run_gave_xtask() {
        let ws = Workspace { root: Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned() };
        let cmd = ws.cargo();
        let removed = cmd.get_envs().any(|(k, v)| k == "CARGO_MANIFEST_DIR" && v.is_none());
        assert!(removed, "{cmd:?}");
        assert_eq!(cmd.get_current_dir(), Some(ws.root.as_path()));
    }
}
