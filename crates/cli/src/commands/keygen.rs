//! `quiver keygen`: a minisign key pair for signing bundles.

use std::path::PathBuf;

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
    if g.json {
        let out = serde_json::json!({
            "key_id": key_id,
            "public_key": public_path,
            "secret_key": secret_path,
            "trusted_key": { "name": a.name, "path": public_path },
        });
        println!("{out:#}");
    } else {
        println!("key id:     {key_id}");
        println!("public key: {}", public_path.display());
        println!("secret key: {} (mode 0600, unencrypted: keep it private)", secret_path.display());
        println!();
        println!("Trust it in quiver.yaml (paths are relative to the config file's folder):");
        println!("trusted_keys:");
        println!("  - name: {}", a.name);
        println!("    path: {}", public_path.display());
    }
    Ok(())
}
