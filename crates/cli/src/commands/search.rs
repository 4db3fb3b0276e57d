//! `quiver search`: query the catalog the way an agent's `tool_search` does, as a given profile.

use anyhow::Result;
use clap::Args;
use quiver_catalog::{Access, SearchRequest, search_catalog};
use serde_json::json;

use crate::GlobalArgs;
use crate::settings::Settings;

#[derive(Debug, Args)]
pub struct SearchArgs {
    /// What to look for, in plain words (or a regex with --regex).
    pub query: String,
    /// Treat the query as a case-insensitive regular expression over names and descriptions.
    #[arg(long)]
    pub regex: bool,
    /// Only tools of this domain.
    #[arg(long)]
    pub domain: Option<String>,
    /// Only tools that change something (true) or only read-only tools (false).
    #[arg(long)]
    pub mutating: Option<bool>,
    /// Results per page (1-50).
    #[arg(long, default_value_t = 10)]
    pub limit: usize,
    /// Skip this many results.
    #[arg(long, default_value_t = 0)]
    pub offset: usize,
    /// Include each tool's input schema.
    #[arg(long)]
    pub full: bool,
    /// Search as this profile sees the catalog (its scopes and gates) [default: the default profile].
    #[arg(long, env = "QUIVER_PROFILE")]
    pub profile: Option<String>,
}

pub fn run(g: &GlobalArgs, a: &SearchArgs) -> Result<()> {
    let settings = Settings::load(g)?;
    let (_, profile) = settings.profile(a.profile.as_deref())?;
    let host = settings.start_host()?;
    let catalog = host.catalog();
    let access = Access::new(profile.scopes.iter(), profile.gated.iter());
    let req = SearchRequest {
        query: a.query.clone(),
        mode: a.regex.then(|| "regex".to_owned()),
        domain: a.domain.clone(),
        mutating: a.mutating,
        limit: Some(a.limit),
        offset: Some(a.offset),
        detail: a.full.then(|| "full".to_owned()),
        ..SearchRequest::default()
    };
    let resp = search_catalog(&catalog, &access, &req, a.limit).map_err(|e| crate::UsageError(e.to_string()))?;
    // Where each tool comes from (plugin, adapter:command, adapter:http, upstream:NAME).
    let source_of = |name: &str| catalog.resolve(name).map(|r| r.plugin.source.clone()).unwrap_or_default();
    if g.json {
        let mut v = json!(resp);
        if let Some(tools) = v.get_mut("tools").and_then(|t| t.as_array_mut()) {
            for t in tools {
                let source = t.get("name").and_then(|n| n.as_str()).map(source_of).unwrap_or_default();
                t["source"] = json!(source);
            }
        }
        println!("{v:#}");
        return Ok(());
    }
    if resp.tools.is_empty() {
        println!("no tool matches {:?}", a.query);
        return Ok(());
    }
    for (i, t) in resp.tools.iter().enumerate() {
        let mutates = if t.mutates { " [changes things]" } else { "" };
        println!("{:>2}. {}{mutates}  ({})", a.offset + i + 1, t.name, source_of(&t.name));
        println!("    {}", t.summary);
        if !t.required.is_empty() {
            println!("    required: {}", t.required.join(", "));
        }
        if let Some(s) = &t.input_schema {
            println!("    input schema: {s}");
        }
    }
    if let Some(next) = resp.next_offset {
        println!("({} matches; next page: --offset {next})", resp.total);
    }
    Ok(())
}
