//! `quiver surface`: what a session of a profile sees on its first turn — the exact bytes a
//! client receives as its tool list (minus per-tool `_meta`), with counts and sizes. The bytes
//! are deterministic: the same plugins and profile give the same bytes across runs and restarts.

use std::io::Write;

use anyhow::Result;
use clap::Args;
use quiver_catalog::{ExposureMode, Session, partitions};
use quiver_mcp::SessionProfile;
use serde_json::json;

use crate::GlobalArgs;
use crate::settings::Settings;

#[derive(Debug, Args)]
pub struct SurfaceArgs {
    /// The profile whose surface to show [default: the default profile].
    #[arg(long, env = "QUIVER_PROFILE")]
    pub profile: Option<String>,
    /// Override the profile's exposure mode (full, adaptive, hybrid, lazy).
    #[arg(long)]
    pub mode: Option<String>,
    /// Print only the serialized surface, byte for byte.
    #[arg(long, conflicts_with = "json")]
    pub bytes: bool,
}

pub fn run(g: &GlobalArgs, a: &SurfaceArgs) -> Result<()> {
    let settings = Settings::load(g)?;
    let (name, profile) = settings.profile(a.profile.as_deref())?;
    let host = settings.start_host()?;
    let catalog = host.catalog();
    let profile = SessionProfile::from_config(&name, &profile);
    let mut session = Session::new("surface", profile.policy, profile.access);
    if let Some(m) = &a.mode {
        session.policy.mode = match m.as_str() {
            "full" => ExposureMode::Full,
            "adaptive" => ExposureMode::Adaptive,
            "hybrid" => ExposureMode::Hybrid,
            "lazy" => ExposureMode::Lazy,
            other => {
                return Err(
                    crate::UsageError(format!("unknown mode `{other}`: use full, adaptive, hybrid or lazy")).into()
                );
            }
        };
    }
    let surface = session.surface(&catalog);
    if a.bytes {
        std::io::stdout().write_all(&surface.to_bytes())?;
        return Ok(());
    }
    let stats = surface.stats(session.policy.mode);
    // Where each typed tool comes from (plugin, adapter:command, adapter:http, upstream:NAME).
    let mut sources: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for (_, names) in partitions(&surface) {
        for n in names {
            if let Some(r) = catalog.resolve(n) {
                sources.entry(r.plugin.source.clone()).or_default().push(n.to_string());
            }
        }
    }
    if g.json {
        println!(
            "{:#}",
            json!({"profile": name, "stats": stats, "partitions": partitions(&surface), "sources": sources, "dropped": surface.dropped, "ignored_eager": surface.ignored_eager})
        );
        return Ok(());
    }
    println!(
        "profile `{name}`, mode {}: {} typed + {} meta tools, {} bytes of typed schemas (budget {}), {} bytes in all",
        session.policy.mode.as_str(),
        stats.n_typed,
        stats.n_meta,
        stats.typed_bytes,
        session.policy.byte_budget,
        stats.total_bytes
    );
    for (part, names) in partitions(&surface) {
        println!("  {part:<7} {}", names.join(", "));
    }
    for (source, names) in &sources {
        println!("  from {source}: {}", names.join(", "));
    }
    if !surface.dropped.is_empty() {
        println!("  left out by the caps (reachable by search and run_tool): {}", surface.dropped.join(", "));
    }
    if !surface.ignored_eager.is_empty() {
        println!("  eager names that are not visible tools (ignored): {}", surface.ignored_eager.join(", "));
    }
    Ok(())
}
