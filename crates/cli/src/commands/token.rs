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
    let principal = yaml_quoted(&a.principal);
    match &a.profile {
        Some(p) => println!("  - {{ principal: {principal}, sha256: {sha256}, profile: {} }}", yaml_quoted(p)),
        None => println!("  - {{ principal: {principal}, sha256: {sha256} }}"),
    }
    Ok(())
}

/// `text` as a YAML double-quoted scalar that reads back as exactly `text` wherever it is
/// pasted: `"` and `\` escaped, and every character YAML does not allow as it is or reads as a
/// line break (controls, NEL, U+2028, U+2029, the byte order mark) written as an escape.
fn yaml_quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            ' '..='~' => out.push(c),
            '\u{85}' | '\u{2028}' | '\u{2029}' | '\u{feff}' => out.push_str(&format!("\\u{:04X}", c as u32)),
            '\u{a0}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}' | '\u{10000}'.. => out.push(c),
            _ if (c as u32) <= 0xff => out.push_str(&format!("\\x{:02X}", c as u32)),
            _ => out.push_str(&format!("\\u{:04X}", c as u32)),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::yaml_quoted;

    #[test]
    fn yaml_quoting_escapes_what_yaml_would_read_otherwise() {
        assert_eq!(yaml_quoted("ci"), r#""ci""#);
        assert_eq!(yaml_quoted("a,b: #c"), r#""a,b: #c""#);
        assert_eq!(yaml_quoted("say \"hi\" \\ now"), r#""say \"hi\" \\ now""#);
        assert_eq!(yaml_quoted("two\nlines\ttab"), r#""two\nlines\ttab""#);
        assert_eq!(yaml_quoted("\u{7}\u{7f}\u{85}\u{2028}\u{feff}é中🦀"), r#""\x07\x7F\u0085\u2028\uFEFFé中🦀""#);
    }
}
