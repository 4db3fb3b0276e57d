//! `quiver token`: makes a random bearer token for the HTTP transport and prints the
//! configuration entry, which holds only the token's sha256 (the token is shown once).

use anyhow::{Context, Result};
use clap::Args;
use std::io::Read;

use crate::GlobalArgs;

#[derive(Debug, Args)]
pub struct TokenArgs {
    /// Who will hold the token (the principal that selects the profile).
    #[arg(long)]
    pub principal: String,
    /// The profile its sessions run under.
    #[arg(long)]
    pub profile: Option<String>,
}

pub fn run(g: &GlobalArgs, a: &TokenArgs) -> Result<()> {
    if a.principal.trim().is_empty() {
        return Err(crate::UsageError("--principal must name the token's holder".to_owned()).into());
    }
    let mut raw = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut raw))
        .context("cannot read random bytes from /dev/urandom")?;
    let token: String = format!("qvr_{}", raw.iter().map(|b| format!("{b:02x}")).collect::<String>());
    let sha256 = quiver_manifest::sha256_hex(token.as_bytes());
    if g.json {
        println!(
            "{:#}",
            serde_json::json!({"token": token, "principal": a.principal, "sha256": sha256, "profile": a.profile})
        );
        return Ok(());
    }
    println!("token (shown once; give it to {}): {token}", a.principal);
    println!("add to quiver.yaml under server.auth.tokens:");
    match &a.profile {
        Some(p) => println!("  - {{ principal: {}, sha256: {sha256}, profile: {p} }}", a.principal),
        None => println!("  - {{ principal: {}, sha256: {sha256} }}", a.principal),
    }
    Ok(())
}
