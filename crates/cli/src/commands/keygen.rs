//! `quiver keygen`: a minisign key pair for signing bundles.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use quiver_manifest::KeyPair;

use crate::GlobalArgs;
use crate::bundle::write_new;

#[derive(Debug, Args)]
pub struct KeygenArgs {
    /// Folder to write the key files into.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub out_dir: PathBuf,
    /// File stem of the key files: NAME.pub and NAME.key.
    #[arg(long, default_value = "quiver")]
    pub name: String,
}

pub fn run(g: &GlobalArgs, a: &KeygenArgs) -> Result<()> {
    if a.name.is_empty() || a.name.contains(['/', '\\']) || a.name.starts_with('.') {
        return Err(
            crate::UsageError(format!("--name `{}` must be a plain file stem such as `release`", a.name)).into()
        );
    }
    std::fs::create_dir_all(&a.out_dir).with_context(|| format!("cannot create {}", a.out_dir.display()))?;
    let public_path = a.out_dir.join(format!("{}.pub", a.name));
    let secret_path = a.out_dir.join(format!("{}.key", a.name));
    for p in [&public_path, &secret_path] {
        if p.exists() {
            anyhow::bail!(
                "{} already exists; refusing to overwrite a key (pick another --name or --out-dir)",
                p.display()
            );
        }
    }
    let pair = KeyPair::generate();
    write_new(&secret_path, pair.secret_key_text().as_bytes(), 0o600)?;
    write_new(&public_path, pair.public_key_text().as_bytes(), 0o644)?;
    let key_id = pair.key_id();
    let (config, entry_path) = trusted_key_path(g, &public_path);
    if g.json {
        let out = serde_json::json!({
            "key_id": key_id,
            "public_key": public_path,
            "secret_key": secret_path,
            "trusted_key": { "name": a.name, "path": entry_path },
        });
        println!("{out:#}");
    } else {
        println!("key id:     {key_id}");
        println!("public key: {}", public_path.display());
        println!("secret key: {} (mode 0600, unencrypted: keep it private)", secret_path.display());
        println!();
        match &config {
            Some(config) => println!("Trust it in {} (its paths start at its own folder):", config.display()),
            None => println!("Trust it in a quiver.yaml:"),
        }
        println!("trusted_keys:");
        println!("  - name: {}", a.name);
        println!("    path: {}", entry_path.display());
    }
    Ok(())
}

/// The configuration file the other commands would read (none when there is none, or when
/// `--config` names a missing file), and the public key's path as its `trusted_keys` entry
/// should say it: relative to that file's folder, where the configuration's relative paths
/// start, when the key lies inside it; else absolute.
fn trusted_key_path(g: &GlobalArgs, public_path: &Path) -> (Option<PathBuf>, PathBuf) {
    let Ok(cwd) = std::env::current_dir() else { return (None, public_path.to_path_buf()) };
    let key = std::fs::canonicalize(public_path).unwrap_or_else(|_| cwd.join(public_path));
    let config = crate::config_file::locate(g.config.as_deref(), &cwd).ok().flatten().map(|(p, _)| p);
    let base = config.as_ref().and_then(|c| std::fs::canonicalize(cwd.join(c)).ok()?.parent().map(Path::to_path_buf));
    let entry = match base.as_deref().and_then(|b| key.strip_prefix(b).ok()) {
        Some(rel) => rel.to_path_buf(),
        None => key.clone(),
    };
    (config, entry)
}
