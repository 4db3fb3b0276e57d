//! `quiver list`: the loaded tools, or the deprecation table of their manifests.

use anyhow::Result;
use clap::Args;
use quiver_catalog::Catalog;
use serde_json::{Value, json};

use crate::GlobalArgs;
use crate::settings::Settings;

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Print the deprecation table: every alias and hidden, deprecated or removed name with its
    /// replacement.
    #[arg(long)]
    pub deprecations: bool,
    /// Include hidden, deprecated and removed canonical names.
    #[arg(long)]
    pub all: bool,
}

pub fn run(g: &GlobalArgs, a: &ListArgs) -> Result<()> {
    let settings = Settings::load(g)?;
    let (host, rejected) = settings.start_host_counting()?;
    let catalog = host.catalog();
    if catalog.plugins().is_empty() {
        eprintln!(
            "no plugins loaded from {}; build the bundled ones with `cargo xtask build-plugins`, or sign your own with `quiver sign`",
            settings.host.plugins_dir.display()
        );
    }
    if a.deprecations {
        print_deprecations(g, &catalog);
    } else {
        print_tools(g, &catalog, a.all);
        // Where each plugin runs, and what its sandbox enforces (or that it has none).
        for p in catalog.plugins() {
            let at = p.backend.placement();
            eprintln!("plugin {} {} ({}): {}: {}", p.id(), p.manifest.version, p.source, at.isolation, at.detail);
        }
    }
    if !rejected.is_empty() {
        eprintln!("{rejected} (see above): the list is incomplete");
        return Err(crate::Reported.into());
    }
    Ok(())
}

fn print_tools(g: &GlobalArgs, catalog: &Catalog, all: bool) {
    let rows: Vec<Value> = catalog
        .tools()
        .iter()
        .filter(|r| all || catalog.def(r).spec.lifecycle.state.is_visible())
        .map(|r| {
            let def = catalog.def(r);
            let plugin = catalog.plugin_of(r);
            json!({
                "name": r.name,
                "plugin": plugin.id(),
                "version": plugin.manifest.version.to_string(),
                "state": def.spec.lifecycle.state.as_str(),
                "side_effects": def.spec.side_effects.as_str(),
                "title": def.spec.title,
                "source": plugin.source,
                "isolation": plugin.backend.placement().isolation,
            })
        })
        .collect();
    if g.json {
        println!("{:#}", json!({ "tools": rows }));
        return;
    }
    if rows.is_empty() {
        println!("no tools loaded");
        return;
    }
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            ["name", "plugin", "version", "source", "state", "side_effects", "isolation", "title"]
                .iter()
                .map(|k| text(&r[*k]))
                .collect()
        })
        .collect();
    print_table(&["TOOL", "PLUGIN", "VERSION", "SOURCE", "STATE", "EFFECTS", "RUNS", "TITLE"], &table);
}

/// One row per alias and per canonical name that is hidden, deprecated or removed.
fn deprecation_rows(catalog: &Catalog) -> Vec<Value> {
    let mut rows = Vec::new();
    for r in catalog.tools() {
        let def = catalog.def(r);
        let plugin = catalog.plugin_of(r).id();
        let l = &def.spec.lifecycle;
        if !l.state.is_visible() {
            rows.push(json!({
                "name": r.name,
                "kind": "tool",
                "plugin": plugin,
                "replacement": l.replacement,
                "action": Value::Null,
                "state": l.state.as_str(),
                "first_deprecated_version": l.first_deprecated_version.as_ref().map(ToString::to_string),
                "planned_removal_version": l.planned_removal_version.as_ref().map(ToString::to_string),
                "removed_in_version": l.removed_in_version.as_ref().map(ToString::to_string),
                "replay_supported": l.replay_supported,
            }));
        }
        for alias in &def.spec.aliases {
            rows.push(json!({
                "name": alias.name,
                "kind": "alias",
                "plugin": plugin,
                "replacement": r.name,
                "action": alias.action,
                "state": alias.state.as_str(),
                "first_deprecated_version": alias.first_deprecated_version.as_ref().map(ToString::to_string),
                "planned_removal_version": alias.planned_removal_version.as_ref().map(ToString::to_string),
                "removed_in_version": alias.removed_in_version.as_ref().map(ToString::to_string),
                "replay_supported": alias.replay_supported,
            }));
        }
    }
    rows.sort_by(|a, b| text(&a["name"]).cmp(&text(&b["name"])));
    rows
}

fn print_deprecations(g: &GlobalArgs, catalog: &Catalog) {
    let rows = deprecation_rows(catalog);
    if g.json {
        println!("{:#}", json!({ "deprecations": rows }));
        return;
    }
    if rows.is_empty() {
        println!("no aliases or deprecated names");
        return;
    }
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let replacement = match (text(&r["replacement"]), r["action"].as_str()) {
                (rep, Some(action)) => format!("{rep} (action {action})"),
                (rep, None) => rep,
            };
            vec![
                text(&r["name"]),
                replacement,
                text(&r["state"]),
                text(&r["first_deprecated_version"]),
                text(&r["planned_removal_version"]),
                text(&r["replay_supported"]),
            ]
        })
        .collect();
    print_table(&["NAME", "REPLACEMENT", "STATE", "DEPRECATED IN", "REMOVAL PLANNED", "REPLAY"], &table);
}

fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Prints left-aligned columns; the last column is not padded.
pub fn print_table(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let cells: Vec<&str> = cells.collect();
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}  ", w = widths[i]));
            }
        }
        println!("{}", s.trim_end());
    };
    line(&mut header.iter().copied());
    for r in rows {
        line(&mut r.iter().map(String::as_str));
    }
}
