//! Boundary tests of `quiver-manifest`: fixtures that must validate, bad manifests that must fail
//! at a named field, error-message snapshots, and the embedded-manifest comparison.

use std::path::{Path, PathBuf};

use expect_test::{Expect, expect};
use quiver_manifest::{
    HostConfig, LifecycleState, MANIFEST_VERSION, Manifest, ManifestError, QUIVER_CONFIG_SCHEMA, SideEffects,
    TOOL_MANIFEST_SCHEMA, sha256_hex,
};

fn test_data(sub: &str) -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("test_data").join(sub);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no fixtures in {}", dir.display());
    files
        .into_iter()
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read_to_string(&p).unwrap()))
        .collect()
}

fn repo_file(path: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::fs::read_to_string(root.join(path)).unwrap()
}

#[test]
fn shipped_schemas_are_the_embedded_ones() {
    assert_eq!(repo_file("schemas/tool-manifest.schema.json"), TOOL_MANIFEST_SCHEMA);
    assert_eq!(repo_file("schemas/quiver-config.schema.json"), QUIVER_CONFIG_SCHEMA);
}

#[test]
fn good_manifests_validate_and_roundtrip() {
    let mut fixtures = test_data("good");
    // Manifests of the workspace's own plugins must validate too.
    let marker = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/plugins/marker-plugin/tool.yaml");
    if let Ok(text) = std::fs::read_to_string(&marker) {
        fixtures.push(("marker-plugin/tool.yaml".into(), text));
    }
    for (name, text) in fixtures {
        let manifest = Manifest::from_yaml(&text, &name).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(manifest.manifest_version, MANIFEST_VERSION);
        manifest.validate(&name).unwrap();
        let again =
            Manifest::from_yaml(&manifest.to_yaml(), &name).unwrap_or_else(|e| panic!("{e}\n{}", manifest.to_yaml()));
        assert_eq!(again, manifest, "{name} does not survive to_yaml/from_yaml");
        manifest.agrees_with_embedded(&manifest.without_artifact()).unwrap();
    }
}

#[test]
fn full_fixture_reads_every_field() {
    let (_, text) = test_data("good").into_iter().find(|(n, _)| n == "full.tool.yaml").unwrap();
    let m = Manifest::from_yaml(&text, "full.tool.yaml").unwrap();
    assert_eq!(m.version.to_string(), "1.4.0-beta.2+build.7");
    assert_eq!(m.artifact.as_ref().unwrap().file, "libfs_tools.so");
    let files = m.tool("files").unwrap();
    assert_eq!(files.side_effects, SideEffects::Destructive);
    assert!(files.description.contains("* `read`"));
    assert_eq!(files.actions.len(), 3);
    assert_eq!(files.aliases[2].state, LifecycleState::Removed);
    assert!(!files.aliases[2].replay_supported);
    assert_eq!(files.policies.effective(files.side_effects).timeout_ms, 10_000);
    assert_eq!(m.tool("ls").unwrap().lifecycle.replacement.as_deref(), Some("list_dir"));
    assert!(m.tool("read_file").is_none(), "aliases are not canonical names");
}

#[test]
fn good_configs_validate() {
    for (name, text) in test_data("config") {
        let config = HostConfig::from_yaml(&text, &name).unwrap_or_else(|e| panic!("{e}"));
        config.validate(&name).unwrap();
        let yaml = serde_yaml::to_string(&config).unwrap();
        assert_eq!(HostConfig::from_yaml(&yaml, &name).unwrap(), config, "{name} does not survive a roundtrip");
    }
    let full =
        HostConfig::from_yaml(&test_data("config").into_iter().find(|(n, _)| n == "full.quiver.yaml").unwrap().1, "q")
            .unwrap();
    assert_eq!(full.profile_for("claude-code 2.1", None).0, "plan");
    assert_eq!(full.trusted_keys[1].inline_key().unwrap().unwrap().key_id(), "E7620F1842B4E81F");
    assert_eq!(full.search.embedding.as_deref(), Some(std::path::Path::new("models/potion-base-8M")));
}

const BASE: &str = "\
manifest_version: 1
id: demo-tools
version: 1.0.0
display_name: Demo
description: Demo tools.
abi: 1
tools:
  - name: act
    title: Act
    description: Does things.
    side_effects: write
    input_schema:
      type: object
      properties:
        action: {type: string, enum: [get, put]}
    actions:
      - {name: get, side_effects: read}
      - {name: put, side_effects: write}
    aliases:
      - {name: act_get, state: hidden-compatibility, action: get}
  - name: other
    title: Other
    description: Other things.
    side_effects: read
";

/// Replaces the one occurrence of `from` in [`BASE`].
fn edit(from: &str, to: &str) -> String {
    assert_eq!(BASE.matches(from).count(), 1, "`{from}` must occur once in BASE");
    BASE.replace(from, to)
}

fn error_of(text: &str) -> ManifestError {
    match Manifest::from_yaml(text, "demo.tool.yaml") {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e,
    }
}

#[test]
fn base_is_valid() {
    Manifest::from_yaml(BASE, "demo.tool.yaml").unwrap();
}

/// Whether a call may be made again after an outcome its caller did not see: reads and
/// idempotent tools may; a write may not, and an action has its own risk.
#[test]
fn a_call_is_safe_to_repeat_when_it_reads_or_its_tool_is_idempotent() {
    let m = Manifest::from_yaml(BASE, "demo.tool.yaml").unwrap();
    let (act, other) = (&m.tools[0], &m.tools[1]);
    assert!(other.repeat_safe(None));
    assert!(!act.repeat_safe(None) && !act.repeat_safe(Some("put")));
    assert_eq!(act.side_effects_of(Some("get")), SideEffects::Read);
    assert!(act.repeat_safe(Some("get")));
    // An unknown action has the tool's risk.
    assert_eq!(act.side_effects_of(Some("nope")), SideEffects::Write);
    let idem = Manifest::from_yaml(
        &edit("side_effects: write\n", "side_effects: write\n    idempotent: true\n"),
        "demo.tool.yaml",
    )
    .unwrap();
    assert!(idem.tools[0].repeat_safe(Some("put")));
}

/// A plugin's `config_schema` checks the operator's `plugin_config` entry: each problem at its
/// field under `plugin_config.<id>`, a misspelt key with a did-you-mean, a missing entry as `{}`.
#[test]
fn the_config_schema_names_each_bad_setting_under_plugin_config() {
    let schema = "config_schema:\n  type: object\n  additionalProperties: false\n  required: [root]\n  properties:\n    root: {type: string, minLength: 1, description: The folder the tools work in.}\n    depth: {type: integer, minimum: 1}\n";
    let m = Manifest::from_yaml(&edit("abi: 1\n", &format!("abi: 1\n{schema}")), "demo.tool.yaml").unwrap();
    assert!(m.config_issues(Some(&serde_json::json!({"root": "/srv", "depth": 2}))).is_empty());
    let issues = m.config_issues(Some(&serde_json::json!({"rot": "/srv", "depth": 0})));
    let got: Vec<(&str, &str)> = issues.iter().map(|i| (i.path.as_str(), i.message.as_str())).collect();
    assert!(got.contains(&("plugin_config.demo-tools.rot", "unknown field `rot`")), "{issues:?}");
    assert!(issues.iter().any(|i| i.path == "plugin_config.demo-tools.rot" && i.fix.contains("did you mean `root`")));
    assert!(
        issues
            .iter()
            .any(|i| i.path == "plugin_config.demo-tools.root" && i.fix.contains("The folder the tools work in"))
    );
    assert!(
        issues.iter().any(|i| i.path == "plugin_config.demo-tools.depth" && i.message.contains("below the minimum 1"))
    );
    let missing = m.config_issues(None);
    assert_eq!(missing.len(), 1, "{missing:?}");
    assert_eq!(missing[0].path, "plugin_config.demo-tools.root");
    let not_object = m.config_issues(Some(&serde_json::json!("/srv")));
    assert_eq!(not_object[0].path, "plugin_config.demo-tools", "{not_object:?}");
    // No schema: nothing to check.
    let plain = Manifest::from_yaml(BASE, "demo.tool.yaml").unwrap();
    assert!(plain.config_issues(Some(&serde_json::json!({"anything": 1}))).is_empty());
    // The schema itself must be an object schema that compiles.
    let err = error_of(&edit("abi: 1\n", "abi: 1\nconfig_schema: {type: string}\n"));
    assert!(err.has_path("config_schema"), "{err}");
    let err = error_of(&edit("abi: 1\n", "abi: 1\nconfig_schema: {type: object, properties: {a: {type: nope}}}\n"));
    assert!(err.has_path("config_schema") && err.to_string().contains("not a valid JSON Schema"), "{err}");
}

#[test]
fn bad_manifests_name_the_field() {
    // (what, manifest text, expected path, text expected in message or fix)
    let cases: Vec<(&str, String, &str, &str)> = vec![
        (
            "unknown field",
            edit("    title: Other\n", "    title: Other\n    colour: red\n"),
            "tools[1].colour",
            "remove `colour`",
        ),
        (
            "integer beyond u64",
            edit("    title: Other\n", "    title: Other\n    policies: {timeout_ms: 99999999999999999999999}\n"),
            "tools[1].policies.timeout_ms",
            "too large",
        ),
        (
            "a whole number written with an exponent",
            edit("    title: Other\n", "    title: Other\n    policies: {timeout_ms: 1.5e3}\n"),
            "tools[1].policies.timeout_ms",
            "whole number",
        ),
        ("unknown top field", edit("abi: 1\n", "abi: 1\nauthor: me\n"), "author", "remove `author`"),
        ("bad semver", edit("version: 1.0.0", "version: 1.0"), "version", "semantic version"),
        ("unquoted number version", edit("version: 1.0.0", "version: 2"), "version", "expected a string"),
        ("id not kebab-case", edit("id: demo-tools", "id: Demo_Tools"), "id", "kebab-case"),
        ("id trailing hyphen", edit("id: demo-tools", "id: demo-"), "id", "kebab-case"),
        ("id too long", edit("id: demo-tools", &format!("id: {}", "a".repeat(65))), "id", "64"),
        ("missing title", edit("    title: Other\n", ""), "tools[1].title", "add `title`"),
        ("a meta tool's name", edit("  - name: other\n", "  - name: list_tools\n"), "tools[1].name", "meta tool"),
        (
            "an alias with a meta tool's name",
            edit(
                "{name: act_get, state: hidden-compatibility, action: get}",
                "{name: run_tool, state: hidden-compatibility, action: get}",
            ),
            "tools[0].aliases[0].name",
            "meta tool",
        ),
        ("empty description", edit("description: Other things.", "description: \"\""), "tools[1].description", "empty"),
        (
            "blank description",
            edit("description: Other things.", "description: \"   \""),
            "tools[1].description",
            "empty",
        ),
        (
            "bad side effects",
            edit("side_effects: read\n", "side_effects: maybe\n"),
            "tools[1].side_effects",
            "read, write",
        ),
        ("manifest version", edit("manifest_version: 1", "manifest_version: 2"), "manifest_version", "version 1"),
        ("abi", edit("abi: 1", "abi: 7"), "abi", "ABI 1"),
        ("bad tool name", edit("name: other", "name: Other"), "tools[1].name", "lower-case"),
        ("duplicate tool", edit("name: other", "name: act"), "tools[1].name", "already used at tools[0].name"),
        (
            "duplicate alias",
            edit(
                "      - {name: act_get, state: hidden-compatibility, action: get}\n",
                "      - {name: act_get, state: hidden-compatibility, action: get}\n      - {name: act_get, state: deprecated}\n",
            ),
            "tools[0].aliases[1].name",
            "already used",
        ),
        (
            "alias equals tool",
            edit("name: act_get", "name: other"),
            "tools[1].name",
            "already used at tools[0].aliases[0].name",
        ),
        (
            "alias with state active",
            edit("state: hidden-compatibility", "state: active"),
            "tools[0].aliases[0].state",
            "hidden-compatibility",
        ),
        ("alias unknown action", edit("action: get}", "action: fetch}"), "tools[0].aliases[0].action", "not an action"),
        (
            "alias action without actions",
            edit(
                "    side_effects: read\n",
                "    side_effects: read\n    aliases: [{name: o2, state: deprecated, action: get}]\n",
            ),
            "tools[1].aliases[0].action",
            "has no actions",
        ),
        (
            "removed alias without version",
            edit("state: hidden-compatibility", "state: removed"),
            "tools[0].aliases[0].removed_in_version",
            "removed_in_version",
        ),
        (
            "action enum mismatch",
            edit("enum: [get, put]", "enum: [get, post]"),
            "tools[0].input_schema.properties.action.enum",
            "lacks put",
        ),
        (
            "action enum missing",
            edit("{type: string, enum: [get, put]}", "{type: string}"),
            "tools[0].input_schema.properties.action.enum",
            "enum: [get, put]",
        ),
        (
            "action property missing",
            edit("action: {type: string, enum: [get, put]}", "verb: {type: string}"),
            "tools[0].input_schema.properties.action",
            "add `action",
        ),
        (
            "action riskier than tool",
            edit("{name: put, side_effects: write}", "{name: put, side_effects: destructive}"),
            "tools[0].actions[1].side_effects",
            "riskier",
        ),
        (
            "duplicate action",
            edit("{name: put, side_effects: write}", "{name: get, side_effects: write}"),
            "tools[0].actions[1].name",
            "twice",
        ),
        (
            "input schema not object",
            edit("      type: object\n", "      type: array\n"),
            "tools[0].input_schema",
            "type: object",
        ),
        (
            "input schema does not compile",
            edit(
                "    input_schema:\n      type: object\n",
                "    input_schema:\n      type: object\n      minProperties: -1\n",
            ),
            "tools[0].input_schema",
            "not a valid JSON Schema",
        ),
        (
            "remote ref is not fetched",
            edit(
                "    input_schema:\n      type: object\n",
                "    input_schema:\n      type: object\n      $ref: \"https://example.com/s.json\"\n",
            ),
            "tools[0].input_schema",
            "not a valid JSON Schema",
        ),
        (
            "bad sha256",
            edit("abi: 1\n", "abi: 1\nartifact: {file: libdemo.so, sha256: ABC}\n"),
            "artifact.sha256",
            "sha256sum",
        ),
        (
            "artifact with ../",
            edit("abi: 1\n", &format!("abi: 1\nartifact: {{file: ../libdemo.so, sha256: {}}}\n", sha256_hex(b""))),
            "artifact.file",
            "no folders",
        ),
        (
            "hidden artifact",
            edit("abi: 1\n", &format!("abi: 1\nartifact: {{file: .libdemo.so, sha256: {}}}\n", sha256_hex(b""))),
            "artifact.file",
            "not hidden",
        ),
        (
            "artifact not a library",
            edit("abi: 1\n", &format!("abi: 1\nartifact: {{file: demo.exe, sha256: {}}}\n", sha256_hex(b""))),
            "artifact.file",
            ".so",
        ),
        (
            "report in a folder",
            edit(
                "abi: 1\n",
                &format!(
                    "abi: 1\nartifact: {{file: libdemo.so, sha256: {0}, report: {{file: ../r.json, sha256: {0}}}}}\n",
                    sha256_hex(b"")
                ),
            ),
            "artifact.report.file",
            "quiver sign --report",
        ),
        (
            "report not JSON",
            edit(
                "abi: 1\n",
                &format!(
                    "abi: 1\nartifact: {{file: libdemo.so, sha256: {0}, report: {{file: report.txt, sha256: {0}}}}}\n",
                    sha256_hex(b"")
                ),
            ),
            "artifact.report.file",
            ".json",
        ),
        (
            "bad report sha256",
            edit(
                "abi: 1\n",
                &format!(
                    "abi: 1\nartifact: {{file: libdemo.so, sha256: {}, report: {{file: d.report.json, sha256: x}}}}\n",
                    sha256_hex(b"")
                ),
            ),
            "artifact.report.sha256",
            "sha256sum",
        ),
        (
            "timeout range",
            edit("    title: Other\n", "    title: Other\n    policies: {timeout_ms: 0}\n"),
            "tools[1].policies.timeout_ms",
            "minimum 1",
        ),
        (
            "timeout too long",
            edit("    title: Other\n", "    title: Other\n    policies: {timeout_ms: 600001}\n"),
            "tools[1].policies.timeout_ms",
            "600000",
        ),
        (
            "retries",
            edit("    title: Other\n", "    title: Other\n    policies: {retries: 11}\n"),
            "tools[1].policies.retries",
            "10",
        ),
        (
            "result bytes",
            edit("    title: Other\n", "    title: Other\n    policies: {max_result_bytes: 100}\n"),
            "tools[1].policies.max_result_bytes",
            "256",
        ),
        (
            "concurrency",
            edit("    title: Other\n", "    title: Other\n    policies: {max_concurrency: 0}\n"),
            "tools[1].policies.max_concurrency",
            "1",
        ),
        (
            "bad scope",
            edit("    title: Other\n", "    title: Other\n    scopes: [\"FS read\"]\n"),
            "tools[1].scopes[0]",
            "fs:read",
        ),
        (
            "empty example",
            edit("    title: Other\n", "    title: Other\n    examples: [\"\"]\n"),
            "tools[1].examples[0]",
            "empty",
        ),
        (
            "deprecated without replacement",
            edit("    title: Other\n", "    title: Other\n    lifecycle: {state: deprecated}\n"),
            "tools[1].lifecycle.replacement",
            "replacement",
        ),
        (
            "removed without version",
            edit("    title: Other\n", "    title: Other\n    lifecycle: {state: removed, replacement: act}\n"),
            "tools[1].lifecycle.removed_in_version",
            "removed_in_version",
        ),
        (
            "removal before deprecation",
            edit(
                "    title: Other\n",
                "    title: Other\n    lifecycle: {state: deprecated, replacement: act, first_deprecated_version: 1.2.0, planned_removal_version: 1.1.0}\n",
            ),
            "tools[1].lifecycle.planned_removal_version",
            "not later",
        ),
        (
            "own replacement",
            edit("    title: Other\n", "    title: Other\n    lifecycle: {state: deprecated, replacement: other}\n"),
            "tools[1].lifecycle.replacement",
            "own replacement",
        ),
        ("no tools", format!("{}tools: []\n", &BASE[..BASE.find("tools:").unwrap()]), "tools", "at least one"),
        (
            "yaml alias",
            edit("description: Demo tools.", "description: &d Demo tools.\ndisplay: *d"),
            "(document)",
            "anchors",
        ),
        ("non-string key", edit("abi: 1\n", "abi: 1\n7: seven\n"), "(document)", "quote keys"),
        ("yaml syntax", edit("abi: 1\n", "abi: [1\n"), "(document)", "not valid YAML"),
        ("not a mapping", "- just\n- a list\n".to_owned(), "(document)", "expected an object"),
        (
            "hook naming a missing tool",
            edit("abi: 1\n", "abi: 1\nhooks: {session_start: nope}\n"),
            "hooks.session_start",
            "is not a tool of this plugin",
        ),
        (
            "hook needing confirmation",
            edit("abi: 1\n", "abi: 1\nhooks: {session_end: act}\n")
                .replace("side_effects: write\n    input", "side_effects: destructive\n    input"),
            "hooks.session_end",
            "confirmation: false",
        ),
        ("unknown hook", edit("abi: 1\n", "abi: 1\nhooks: {on_call: other}\n"), "hooks.on_call", "remove `on_call`"),
    ];
    let mut failures = Vec::new();
    for (what, text, path, needle) in &cases {
        let err = error_of(text);
        let hit = err.issues.iter().find(|i| i.path == *path);
        match hit {
            Some(issue) if issue.message.contains(needle) || issue.fix.contains(needle) => {}
            _ => failures.push(format!("{what}: expected an issue at `{path}` mentioning `{needle}`, got:\n{err}\n")),
        }
        // Every line names the file, a path and a fix.
        for line in err.to_string().lines() {
            assert!(line.starts_with("demo.tool.yaml: ") && line.contains(" (fix: "), "{what}: {line}");
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn all_issues_are_collected() {
    let text = edit("id: demo-tools", "id: Demo")
        .replace("side_effects: read\n", "side_effects: read\n    colour: red\n")
        .replace("version: 1.0.0", "version: one");
    let err = error_of(&text);
    assert!(err.has_path("id") && err.has_path("version") && err.has_path("tools[1].colour"), "{err}");

    // Semantic issues are collected together too.
    let text = edit("name: other", "name: act").replace("enum: [get, put]", "enum: [get]");
    let err = error_of(&text);
    assert!(err.has_path("tools[1].name") && err.has_path("tools[0].input_schema.properties.action.enum"), "{err}");
}

/// An issue inside a tool names the tool as well as its index (`tools[1] (tool `other`)`), at
/// each step: the schema, the typed model and the semantic rules; not where the name itself is
/// what is wrong.
#[test]
fn issues_inside_a_tool_name_the_tool() {
    let line = |text: &str, path: &str| {
        let err = error_of(text).to_string();
        err.lines().find(|l| l.contains(path)).unwrap_or_else(|| panic!("no issue at {path}:\n{err}")).to_owned()
    };
    // The schema step.
    let l = line(&edit("    title: Other\n", "    title: Other\n    colour: red\n"), "tools[1].colour");
    assert!(l.starts_with("demo.tool.yaml: tools[1].colour (tool `other`): unknown field"), "{l}");
    // The semantic step.
    let l = line(&edit("enum: [get, put]", "enum: [get]"), "tools[0].input_schema");
    assert!(l.contains("tools[0].input_schema.properties.action.enum (tool `act`): "), "{l}");
    // An alias's issue names the tool it belongs to.
    let l = line(&edit("state: hidden-compatibility", "state: removed"), "tools[0].aliases[0]");
    assert!(l.contains("tools[0].aliases[0].removed_in_version (tool `act`): "), "{l}");
    // The name itself is wrong: not repeated as if it named the tool.
    let l = line(&edit("name: other", "name: Other Thing"), "tools[1].name");
    assert!(!l.contains("(tool "), "{l}");
    // Paths stay as they were for callers that look issues up by field.
    assert!(error_of(&edit("    title: Other\n", "    title: Other\n    colour: red\n")).has_path("tools[1].colour"));
}

fn check(text: &str, expect: Expect) {
    expect.assert_eq(&error_of(text).to_string());
}

#[test]
fn error_snapshots() {
    check(
        &edit("    title: Other\n", "    title: Other\n    colour: red\n    policies: {timeout_ms: 0}\n"),
        expect![[r#"
            demo.tool.yaml: tools[1].colour (tool `other`): unknown field `colour` (fix: remove `colour`; the fields allowed here are: actions, aliases, capabilities, description, domain, examples, idempotent, input_schema, invoke, lifecycle, name, output_schema, policies, prompt_snippet, scopes, secrets, side_effects, title)
            demo.tool.yaml: tools[1].policies.timeout_ms (tool `other`): 0 is below the minimum 1 (fix: use 1 or more; Deadline of a call in milliseconds, 1 to 600000 (10 minutes). Default 30000.)"#]],
    );
    check(
        &edit("enum: [get, put]", "enum: [get, post]").replace("state: hidden-compatibility", "state: removed"),
        expect![[r#"
            demo.tool.yaml: tools[0].input_schema.properties.action.enum (tool `act`): the `action` enum does not match the actions: it lacks put and has post which is no action (fix: list exactly the action names: `enum: [get, put]`)
            demo.tool.yaml: tools[0].aliases[0].removed_in_version (tool `act`): a removed alias must say which version removed it (fix: add `removed_in_version: <plugin version>`)"#]],
    );
    check(
        &edit("version: 1.0.0", "version: \"1.0\""),
        expect![[
            r#"demo.tool.yaml: version: "1.0" does not have the required form (fix: Plugin version as a semantic version (`MAJOR.MINOR.PATCH`, e.g. `1.4.0`); the host never replaces a loaded plugin with a lower version.)"#
        ]],
    );
    check(
        &edit("version: 1.0.0", "version: 1.0"),
        expect![[
            r#"demo.tool.yaml: version: expected a string, found a number 1.0 (fix: quote the value so YAML reads it as text ("1.0"); Plugin version as a semantic version (`MAJOR.MINOR.PATCH`, e.g. `1.4.0`); the host never replaces a loaded plugin with a lower version.)"#
        ]],
    );
}

#[test]
fn size_cap() {
    let text = format!("{BASE}# {}\n", "x".repeat(quiver_manifest::MAX_YAML_BYTES));
    let err = error_of(&text);
    assert_eq!(err.issues[0].path, "(document)");
    assert!(err.to_string().contains("1 MiB"), "{err}");
}

#[test]
fn embedded_manifest_agreement() {
    let signed = Manifest::from_yaml(
        &edit("abi: 1\n", &format!("abi: 1\nartifact: {{file: libdemo.so, sha256: {}}}\n", sha256_hex(b"lib"))),
        "demo.tool.yaml",
    )
    .unwrap();
    let embedded = Manifest::from_yaml(BASE, "embedded").unwrap();
    signed.agrees_with_embedded(&embedded).unwrap();

    let changed = Manifest::from_yaml(&edit("description: Other things.", "description: Sneaky."), "embedded").unwrap();
    expect![[
        r#"tools[1].description differs: the signed manifest has "Other things.", the embedded one has "Sneaky.""#
    ]]
    .assert_eq(&signed.agrees_with_embedded(&changed).unwrap_err());

    let fewer = Manifest::from_yaml(&BASE[..BASE.find("  - name: other").unwrap()], "embedded").unwrap();
    let err = signed.agrees_with_embedded(&fewer).unwrap_err();
    assert!(err.starts_with("tools[1] differs"), "{err}");

    let schema = Manifest::from_yaml(&edit("enum: [get, put]", "enum: [put, get]"), "embedded").unwrap();
    let err = signed.agrees_with_embedded(&schema).unwrap_err();
    assert!(err.starts_with("tools[0].input_schema.properties.action.enum[0] differs"), "{err}");
}

#[test]
fn bad_configs_name_the_field() {
    let cases: &[(&str, &str, &str)] = &[
        ("colour: red\n", "colour", "remove `colour`"),
        ("config_version: 2\n", "config_version", "version 1"),
        ("trusted_keys: [{name: a}]\n", "trusted_keys[0]", "exactly one"),
        (
            "trusted_keys: [{path: a.pub, key: RWQf6LRCGA9i53mlYecO4IzT51TGPpvWucNSCh1CBM0QTaLn73Y7GFO3}]\n",
            "trusted_keys[0]",
            "exactly one",
        ),
        (
            "trusted_keys: [{key: RWAf6LRCGA9i53mlYecO4IzT51TGPpvWucNSCh1CBM0QTaLn73Y7GFO3}]\n",
            "trusted_keys[0].key",
            "public key",
        ),
        (
            "trusted_keys: [{key: RWQf6LRCGA9i53mlYecO4IzT51TGPpvWucNSCh1CBM0QTaLn73Y7GFO}]\n",
            "trusted_keys[0].key",
            "public key",
        ),
        ("trusted_keys: [{name: a, path: a.pub}, {name: a, path: b.pub}]\n", "trusted_keys[1].name", "already used"),
        ("name_conflicts: merge\n", "name_conflicts", "error, namespace"),
        ("default_profile: main\n", "default_profile", "not among the profiles"),
        ("profiles: {agent: {mode: eager}}\n", "profiles.agent.mode", "full, adaptive, hybrid, lazy"),
        ("profiles: {agent: {max_typed_tools: 65}}\n", "profiles.agent.max_typed_tools", "64"),
        ("profiles: {agent: {max_typed_tools: 0}}\n", "profiles.agent.max_typed_tools", "1"),
        ("profiles: {agent: {eager: [a], gated: [a]}}\n", "profiles.agent.eager[0]", "both eager and gated"),
        ("profiles: {agent: {eager: [Bad]}}\n", "profiles.agent.eager[0]", "tool name"),
        ("profiles: {agent: {approval: maybe}}\n", "profiles.agent.approval", "ask, deny, allow"),
        ("profiles: {agent: {speed: 3}}\n", "profiles.agent.speed", "remove `speed`"),
        ("router: {breaker_failures: 0}\n", "router.breaker_failures", "1"),
        ("server: {max_message_bytes: 10}\n", "server.max_message_bytes", "1024"),
        ("server: {allowed_origins: [\"http://x/path\"]}\n", "server.allowed_origins[0]", "scheme://host"),
        ("transcripts: {dir: 3}\n", "transcripts.dir", "expected"),
        ("plugins_dir: \"\"\n", "plugins_dir", "empty"),
        ("profiles: {Agent: {}}\n", "profiles.Agent", "lower-case letters"),
        ("sessions: {store: mysql://x}\n", "sessions.store", "redis://"),
        ("sessions: {ttl_ms: 5}\n", "sessions.ttl_ms", "1000"),
        ("search: {embeding: models/m}\n", "search.embeding", "remove `embeding`"),
        ("search: {embedding: \"\"}\n", "search.embedding", "empty"),
        ("rescan_interval_ms: 99999999999999999999999\n", "rescan_interval_ms", "too large"),
        ("router: {breaker_failures: -99999999999999999999999}\n", "router.breaker_failures", "too small"),
        ("rescan_interval_ms: 1.5e3\n", "rescan_interval_ms", "whole number"),
        ("sessions: {ttl_ms: 60000.0}\n", "sessions.ttl_ms", "whole number"),
    ];
    let mut failures = Vec::new();
    for (text, path, needle) in cases {
        match HostConfig::from_yaml(text, "quiver.yaml") {
            Ok(_) => failures.push(format!("accepted: {text}")),
            Err(err) => {
                if !err.issues.iter().any(|i| i.path == *path && (i.message.contains(needle) || i.fix.contains(needle)))
                {
                    failures
                        .push(format!("{text}: expected an issue at `{path}` mentioning `{needle}`, got:\n{err}\n"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `policies.rate_limit` is read into the effective policies, refused when malformed, and the
/// host configuration's `rate_limits` overrides it scope by scope.
#[test]
fn rate_limits_are_declared_in_policies_and_overridden_by_the_config() {
    let text = repo_file("tests/plugins/marker-plugin/tool.yaml");
    let first_tool = text.find("\n  - name: marker_panic").expect("marker_panic");
    let line_end = first_tool + 1 + text[first_tool + 1..].find('\n').unwrap();
    let with =
        |policy: &str| format!("{}\n    policies:\n      rate_limit: {policy}{}", &text[..line_end], &text[line_end..]);
    let m = Manifest::from_yaml(&with("{tool: {per_minute: 120, burst: 5}, session: {per_minute: 10}}"), "t.yaml")
        .unwrap_or_else(|e| panic!("{e}"));
    let tool = m.tool("marker_panic").unwrap();
    let limits = tool.policies.effective(tool.side_effects).rate_limit;
    assert_eq!(limits.tool.map(|l| (l.per_minute, l.burst())), Some((120, 5)));
    assert_eq!(limits.session.map(|l| l.burst()), Some(10), "burst defaults to per_minute");
    assert!(limits.principal.is_none());
    let err = Manifest::from_yaml(&with("{session: {per_minute: 0}}"), "t.yaml").unwrap_err().to_string();
    assert!(err.contains("rate_limit"), "{err}");
    let cfg =
        HostConfig::from_yaml("rate_limits:\n  marker_panic:\n    session: {per_minute: 3}\n", "quiver.yaml").unwrap();
    let merged = limits.overridden_by(&cfg.rate_limits["marker_panic"]);
    assert_eq!(merged.session.map(|l| l.per_minute), Some(3));
    assert_eq!(merged.tool.map(|l| l.per_minute), Some(120), "scopes the config leaves out keep the manifest's");
}

/// A manifest text recorded as checked before skips only the JSON Schema check: the YAML rules,
/// the typed model and the semantic checks still run.
#[test]
fn a_manifest_checked_before_skips_only_the_schema_check() {
    let good = repo_file("tests/plugins/marker-plugin/tool.yaml");
    assert_eq!(
        Manifest::from_yaml_with(&good, "m.tool.yaml", true).unwrap(),
        Manifest::from_yaml(&good, "m.tool.yaml").unwrap()
    );
    // A relative sandbox path fits the model (a string) but not the schema (`^/`).
    let relative =
        good.replacen("tools:\n", "sandbox:\n  filesystem:\n    - path: relative/dir\n      access: read\ntools:\n", 1);
    let schema = Manifest::from_yaml(&relative, "m.tool.yaml").unwrap_err().to_string();
    assert!(schema.contains("sandbox.filesystem[0].path"), "{schema}");
    assert_eq!(Manifest::from_yaml_with(&relative, "m.tool.yaml", false).unwrap_err().to_string(), schema);
    assert!(Manifest::from_yaml_with(&relative, "m.tool.yaml", true).is_ok());
    // The YAML rules (no anchors), the model and the semantic checks (unique tool names) run
    // whatever the record says.
    let anchors = format!("{good}\nx: &a 1\n");
    assert!(Manifest::from_yaml_with(&anchors, "m.tool.yaml", true).is_err());
    let model = good.replacen("version: 0.1.0", "version: [1]", 1);
    assert!(Manifest::from_yaml_with(&model, "m.tool.yaml", true).is_err());
    let mut twice = Manifest::from_yaml(&good, "m.tool.yaml").unwrap();
    twice.tools.push(twice.tools[0].clone());
    let semantic = Manifest::from_yaml_with(&twice.to_yaml(), "m.tool.yaml", true).unwrap_err().to_string();
    assert!(semantic.contains(&twice.tools[0].name), "{semantic}");
}
