//! `cargo xtask new-tool NAME`: scaffolds a plugin crate under `plugins/NAME` that builds, passes
//! its unit tests and passes `cargo xtask contract-test NAME` untouched.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::workspace::Workspace;

/// One file of the scaffold: path inside the plugin folder and its template.
const TEMPLATES: &[(&str, &str)] = &[
    ("Cargo.toml", include_str!("../templates/new-tool/Cargo.toml.tmpl")),
    ("tool.yaml", include_str!("../templates/new-tool/tool.yaml.tmpl")),
    ("src/lib.rs", include_str!("../templates/new-tool/lib.rs.tmpl")),
    ("fixtures/basic.json", include_str!("../templates/new-tool/basic.json.tmpl")),
    ("README.md", include_str!("../templates/new-tool/README.md.tmpl")),
    ("CHANGELOG.md", include_str!("../templates/new-tool/CHANGELOG.md.tmpl")),
];

/// The scaffold's one-line description (no `: `, so it stays a plain YAML scalar).
const SUMMARY: &str = "Echoes text and counts its characters; a scaffold to replace with what the plugin really does.";

/// The names a scaffold is rendered with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolNames {
    /// Plugin id, package and folder name (`demo-tool`).
    pub name: String,
    /// The tool's name (`demo_tool`).
    pub tool: String,
    /// The tool's Rust type (`DemoTool`).
    pub type_name: String,
    /// Human title (`Demo Tool`).
    pub title: String,
}

impl ToolNames {
    /// Checks NAME (kebab-case, a valid tool name once `-` becomes `_`, not a meta tool's) and
    /// derives the others.
    pub fn new(name: &str) -> Result<ToolNames> {
        let kebab = !name.is_empty()
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !name.ends_with('-')
            && !name.contains("--");
        if !kebab {
            bail!(
                "`{name}` is not a kebab-case name: use lower-case letters, digits and single dashes, starting with a letter (e.g. `word-count`)"
            );
        }
        if name.len() > 64 {
            bail!("`{name}` is {} characters long; tool names are at most 64", name.len());
        }
        let tool = name.replace('-', "_");
        if quiver_manifest::is_reserved_tool_name(&tool) {
            bail!(
                "`{name}` would make a tool named `{tool}`, one of Quiver's own meta tools ({}); pick another name (for example with a prefix: `my-{name}`)",
                quiver_manifest::RESERVED_TOOL_NAMES.join(", ")
            );
        }
        let words: Vec<&str> = name.split('-').collect();
        let capitalize = |w: &str| {
            let mut c = w.chars();
            c.next().map(|f| f.to_ascii_uppercase().to_string() + c.as_str()).unwrap_or_default()
        };
        Ok(ToolNames {
            name: name.to_owned(),
            tool,
            type_name: words.iter().map(|w| capitalize(w)).collect(),
            title: words.iter().map(|w| capitalize(w)).collect::<Vec<_>>().join(" "),
        })
    }

    fn render(&self, template: &str) -> String {
        template
            .replace("{{name}}", &self.name)
            .replace("{{tool}}", &self.tool)
            .replace("{{type}}", &self.type_name)
            .replace("{{title}}", &self.title)
            .replace("{{summary}}", SUMMARY)
    }
}

/// The scaffold's files, rendered: (path inside the plugin folder, contents).
pub fn render(names: &ToolNames) -> Vec<(&'static str, String)> {
    TEMPLATES.iter().map(|(path, t)| (*path, names.render(t))).collect()
}

/// The plugin (id and source manifest) under `plugins_dir` whose `tool.yaml` already names
/// `tool` as a tool or alias, and which of the two; manifests that do not parse are skipped.
fn served_by(plugins_dir: &Path, tool: &str) -> Option<(String, PathBuf, &'static str)> {
    let mut dirs: Vec<PathBuf> = fs::read_dir(plugins_dir).ok()?.flatten().map(|e| e.path()).collect();
    dirs.sort();
    dirs.into_iter().find_map(|dir| {
        let path = dir.join("tool.yaml");
        let text = fs::read_to_string(&path).ok()?;
        let m = quiver_manifest::Manifest::from_yaml(&text, &path.display().to_string()).ok()?;
        let kind = m.tools.iter().find_map(|t| {
            if t.name == tool { Some("tool") } else { t.aliases.iter().any(|a| a.name == tool).then_some("alias") }
        })?;
        Some((m.id, path, kind))
    })
}

/// Writes the scaffold into `plugins_dir/NAME`; refuses an existing folder and a tool name that
/// another plugin's `tool.yaml` already uses (the host would refuse one of the two bundles).
pub fn scaffold(plugins_dir: &Path, names: &ToolNames) -> Result<PathBuf> {
    let dir = plugins_dir.join(&names.name);
    if dir.exists() {
        bail!("{} already exists; pick another name or remove the folder", dir.display());
    }
    if let Some((id, path, kind)) = served_by(plugins_dir, &names.tool) {
        bail!(
            "`{}` would make a tool named `{}`, but plugin `{id}` already has a {kind} `{}` ({}), and a host serves each name once; pick another name",
            names.name,
            names.tool,
            names.tool,
            path.display()
        );
    }
    for (path, text) in render(names) {
        let file = dir.join(path);
        if let Some(parent) = file.parent() {
            fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
        }
        fs::write(&file, text).with_context(|| format!("cannot write {}", file.display()))?;
    }
    Ok(dir)
}

/// `cargo xtask new-tool NAME`.
pub fn run(ws: &Workspace, name: &str) -> Result<()> {
    let names = ToolNames::new(name)?;
    if let Some(p) = ws.plugins()?.iter().find(|p| p.package == names.name || p.crate_name == names.tool) {
        bail!("a plugin package named `{}` already exists in {}", p.package, p.dir.display());
    }
    let dir = scaffold(&ws.plugins_dir(), &names)?;
    println!("created {} with tool `{}`", dir.display(), names.tool);
    println!("next:");
    println!("  cargo test -p {}", names.name);
    println!("  cargo xtask build-plugins {}", names.name);
    println!("  cargo xtask contract-test {}", names.name);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_derived_from_kebab_case() {
        let n = ToolNames::new("word-count2").unwrap();
        assert_eq!(n.tool, "word_count2");
        assert_eq!(n.type_name, "WordCount2");
        assert_eq!(n.title, "Word Count2");
    }

    #[test]
    fn bad_names_are_refused() {
        for bad in ["", "Demo", "demo_tool", "-demo", "demo-", "de--mo", "1demo", "demo tool"] {
            assert!(ToolNames::new(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn names_of_the_meta_tools_are_refused() {
        for reserved in ["run-tool", "tool-search", "list-tools"] {
            let e = ToolNames::new(reserved).unwrap_err().to_string();
            assert!(e.contains("meta tools") && e.contains("pick another name"), "{reserved}: {e}");
        }
    }

    #[test]
    fn scaffold_refuses_a_tool_name_another_plugin_serves() {
        let dir = std::env::temp_dir().join(format!("xtask-new-tool-clash-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        scaffold(&dir, &ToolNames::new("demo-tool").unwrap()).unwrap();
        let other = dir.join("demo-tool/tool.yaml");
        let text = fs::read_to_string(&other).unwrap().replace("  - name: demo_tool\n", "  - name: word_count\n");
        fs::write(&other, text + "    aliases: [{name: count_words, state: deprecated}]\n").unwrap();
        for (name, taken) in [("word-count", "tool `word_count`"), ("count-words", "alias `count_words`")] {
            let e = scaffold(&dir, &ToolNames::new(name).unwrap()).unwrap_err().to_string();
            assert!(e.contains(taken) && e.contains("demo-tool") && e.contains("pick another name"), "{e}");
            assert!(!dir.join(name).exists(), "{name} was written");
        }
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn rendered_manifest_validates() {
        let names = ToolNames::new("demo-tool").unwrap();
        let files = render(&names);
        let yaml = &files.iter().find(|(p, _)| *p == "tool.yaml").unwrap().1;
        let manifest = quiver_manifest::Manifest::from_yaml(yaml, "tool.yaml").unwrap();
        assert_eq!(manifest.id, "demo-tool");
        assert_eq!(manifest.tools.len(), 1);
        assert_eq!(manifest.tools[0].name, "demo_tool");
        assert!(manifest.artifact.is_none());
    }

    #[test]
    fn rendered_files_have_no_placeholders_left() {
        let names = ToolNames::new("demo-tool").unwrap();
        for (path, text) in render(&names) {
            assert!(!text.contains("{{"), "{path} still has a placeholder");
        }
        let fixtures = &render(&names).into_iter().find(|(p, _)| *p == "fixtures/basic.json").unwrap().1;
        let cases: serde_json::Value = serde_json::from_str(fixtures).unwrap();
        assert!(cases.as_array().is_some_and(|a| a.iter().all(|c| c["tool"] == "demo_tool")));
    }

    #[test]
    fn scaffold_refuses_an_existing_folder() {
        let dir = std::env::temp_dir().join(format!("xtask-new-tool-{}", std::process::id()));
        let names = ToolNames::new("demo-tool").unwrap();
        let _ = fs::remove_dir_all(&dir);
        scaffold(&dir, &names).unwrap();
        assert!(dir.join("demo-tool/src/lib.rs").is_file());
        assert!(scaffold(&dir, &names).is_err());
        fs::remove_dir_all(&dir).unwrap();
    }
}
