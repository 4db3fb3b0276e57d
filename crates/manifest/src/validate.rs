//! Reading and checking a manifest: YAML text → JSON value → JSON Schema → typed model →
//! semantic checks (the rules a schema cannot express). No I/O.

use std::collections::{BTreeSet, HashMap};

use semver::Version;
use serde_json::Value;

use crate::checksum::is_sha256_hex;
use crate::error::{DOCUMENT, Issue, ManifestError, excerpt, excerpt_n, field, index, quote_value};
use crate::model::{AliasSpec, LifecycleState, MANIFEST_VERSION, Manifest, PolicySpec, ToolSpec};
use crate::schema::{DocumentSchema, ManifestSchemaCode, SchemaCheck, TOOL_MANIFEST_SCHEMA, compile_2020_12};
use crate::yaml;

/// The plugin ABI generation whose manifests this crate accepts (`abi:`); the same number as
/// `quiver_abi::ABI_VERSION`, which the loader checks against the library itself.
pub const SUPPORTED_ABI: u32 = 1;

/// The names of the host's own meta tools, which every session may be offered: no plugin tool,
/// alias or upstream tool may take one (a call of that name reaches the meta tool).
pub const RESERVED_TOOL_NAMES: [&str; 3] = ["tool_search", "list_tools", "run_tool"];

/// True for a name in [`RESERVED_TOOL_NAMES`].
pub fn is_reserved_tool_name(name: &str) -> bool {
    RESERVED_TOOL_NAMES.contains(&name)
}

/// What an issue says of a tool or alias name that is one of [`RESERVED_TOOL_NAMES`].
pub(crate) fn reserved_name_message(name: &str) -> String {
    format!("`{name}` is the name of one of Quiver's own meta tools ({})", RESERVED_TOOL_NAMES.join(", "))
}

/// Longest plugin id, tool, alias or action name.
pub const MAX_NAME_LEN: usize = 64;

const SCHEMA_FILE: &str = "schemas/tool-manifest.schema.json";

pub(crate) fn manifest_schema() -> &'static SchemaCheck {
    static SCHEMA: SchemaCheck = SchemaCheck::new(SCHEMA_FILE, TOOL_MANIFEST_SCHEMA, ManifestSchemaCode::is_valid);
    &SCHEMA
}

impl Manifest {
    /// The problems of the operator's `plugin_config` entry for this plugin (`config`; `None`
    /// when there is none, checked as `{}`) against the plugin's `config_schema`, each at its
    /// field under `plugin_config.<id>`; none when the plugin declares no schema. The schema
    /// compiled when the manifest was checked; it is compiled again here, once per load.
    pub fn config_issues(&self, config: Option<&Value>) -> Vec<Issue> {
        let Some(schema) = &self.config_schema else { return Vec::new() };
        let at = field("plugin_config", &self.id);
        let about = format!("the config_schema of plugin `{}`", self.id);
        let compiled = match DocumentSchema::of(about, schema) {
            Ok(compiled) => compiled,
            Err(e) => {
                return vec![Issue::new(
                    at,
                    format!("cannot be checked: the plugin's config_schema does not compile ({})", excerpt_n(&e, 300)),
                    "ask the plugin's author for a corrected bundle",
                )];
            }
        };
        let empty = Value::Object(serde_json::Map::new());
        let mut issues = compiled.check(config.unwrap_or(&empty));
        for issue in &mut issues {
            issue.path = if issue.path == DOCUMENT { at.clone() } else { prefixed(&at, &issue.path) };
        }
        issues
    }

    /// Reads and checks a manifest. `origin` names the file in messages (`fs-tools.tool.yaml`).
    ///
    /// Steps: size cap ([`crate::MAX_YAML_BYTES`]), YAML (no anchors, aliases, tags, merge or
    /// non-string keys), the JSON Schema `schemas/tool-manifest.schema.json`, the typed model,
    /// then the semantic checks of [`Manifest::validate`]. Reports every problem found in the
    /// first failing step.
    pub fn from_yaml(text: &str, origin: &str) -> Result<Manifest, ManifestError> {
        Self::from_yaml_with(text, origin, false)
    }

    /// [`Manifest::from_yaml`] for a caller that records which manifest texts passed it: with
    /// `checked_before` (exactly this text passed it before, in this host build) the JSON Schema
    /// check (and compiling the manifest schema) is skipped; the YAML rules, the typed model and
    /// the semantic checks always run.
    pub fn from_yaml_with(text: &str, origin: &str, checked_before: bool) -> Result<Manifest, ManifestError> {
        let value = yaml::parse(text).map_err(|issues| ManifestError::new(origin, issues))?;
        let fail = |mut issues: Vec<Issue>| {
            crate::error::name_tools(&mut issues, &value);
            ManifestError::new(origin, issues)
        };
        let issues = if checked_before { Vec::new() } else { manifest_schema().check(&value) };
        if !issues.is_empty() {
            return Err(fail(issues));
        }
        let manifest: Manifest = serde_path_to_error::deserialize(&value)
            .map_err(|e| fail(vec![crate::error::model_issue(e, "manifest", SCHEMA_FILE)]))?;
        let issues = semantic_issues(&manifest);
        if issues.is_empty() { Ok(manifest) } else { Err(fail(issues)) }
    }

    /// Checks a manifest built in code (e.g. by a bundle builder) exactly as [`Manifest::from_yaml`]
    /// checks a parsed one: the schema, then the semantic rules (unique names across tools and
    /// aliases, lifecycle, actions, schemas, artifact, policy ranges).
    pub fn validate(&self, origin: &str) -> Result<(), ManifestError> {
        let value = serde_json::to_value(self).map_err(|e| {
            ManifestError::single(
                origin,
                Issue::new(DOCUMENT, format!("cannot be serialized: {e}"), "report this as a bug"),
            )
        })?;
        let mut issues = manifest_schema().check(&value);
        if issues.is_empty() {
            issues = semantic_issues(self);
        }
        crate::error::name_tools(&mut issues, &value);
        if issues.is_empty() { Ok(()) } else { Err(ManifestError::new(origin, issues)) }
    }

    /// The manifest as YAML text that [`Manifest::from_yaml`] reads back to an equal manifest.
    pub fn to_yaml(&self) -> String {
        serde_yaml::to_string(self).expect("a manifest always serializes (string keys only)")
    }

    /// A copy without `artifact`: what the plugin itself embeds.
    pub fn without_artifact(&self) -> Manifest {
        Manifest { artifact: None, ..self.clone() }
    }

    /// The tool with this canonical name (aliases are not looked up).
    pub fn tool(&self, name: &str) -> Option<&ToolSpec> {
        self.tools.iter().find(|t| t.name == name)
    }

    /// Checks that this (signed bundle) manifest, minus `artifact`, equals the manifest embedded
    /// in the plugin library (whose own `artifact`, if any, is ignored too). The error names the
    /// first differing field and both values.
    pub fn agrees_with_embedded(&self, embedded: &Manifest) -> Result<(), String> {
        let signed = serde_json::to_value(self.without_artifact()).map_err(|e| e.to_string())?;
        let embedded = serde_json::to_value(embedded.without_artifact()).map_err(|e| e.to_string())?;
        match first_difference(&signed, &embedded, "") {
            None => Ok(()),
            Some((path, a, b)) => {
                let show = |v: Option<&Value>| v.map(quote_value).unwrap_or_else(|| "nothing".to_owned());
                let path = if path.is_empty() { DOCUMENT.to_owned() } else { path };
                Err(format!("{path} differs: the signed manifest has {}, the embedded one has {}", show(a), show(b)))
            }
        }
    }
}

type Difference<'a> = (String, Option<&'a Value>, Option<&'a Value>);

fn first_difference<'a>(a: &'a Value, b: &'a Value, path: &str) -> Option<Difference<'a>> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            // Keep the model's field order where the map has it; else alphabetical.
            let mut ordered: Vec<&String> = x.keys().filter(|k| keys.contains(k)).collect();
            ordered.extend(y.keys().filter(|k| !x.contains_key(*k)));
            for key in ordered {
                let p = field(path, key);
                match (x.get(key), y.get(key)) {
                    (Some(va), Some(vb)) => {
                        if let Some(d) = first_difference(va, vb, &p) {
                            return Some(d);
                        }
                    }
                    (va, vb) => return Some((p, va, vb)),
                }
            }
            None
        }
        (Value::Array(x), Value::Array(y)) => {
            for n in 0..x.len().max(y.len()) {
                let p = index(path, n);
                match (x.get(n), y.get(n)) {
                    (Some(va), Some(vb)) => {
                        if let Some(d) = first_difference(va, vb, &p) {
                            return Some(d);
                        }
                    }
                    (va, vb) => return Some((p, va, vb)),
                }
            }
            None
        }
        _ if a == b => None,
        _ => Some((path.to_owned(), Some(a), Some(b))),
    }
}

/// `^[a-z][a-z0-9]*(-[a-z0-9]+)*$`, at most 64 characters.
pub(crate) fn is_kebab_id(s: &str) -> bool {
    s.len() <= MAX_NAME_LEN
        && s.starts_with(|c: char| c.is_ascii_lowercase())
        && !s.ends_with('-')
        && !s.contains("--")
        && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// `^[a-z][a-z0-9_]*$`, at most 64 characters.
pub(crate) fn is_tool_name(s: &str) -> bool {
    s.len() <= MAX_NAME_LEN
        && s.starts_with(|c: char| c.is_ascii_lowercase())
        && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// `^[a-z][a-z0-9_.:-]*$`.
pub(crate) fn is_scope(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_lowercase())
        && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '.' | ':' | '-'))
}

pub(crate) const TOOL_NAME_FIX: &str =
    "use a lower-case letter, then lower-case letters, digits or `_` (at most 64 characters), e.g. `read_file`";

pub(crate) const SCOPE_FIX: &str =
    "use a lower-case letter, then lower-case letters, digits, `_`, `.`, `:` or `-`, e.g. `fs:read`";

/// The field path `path` (relative, as an issue names it) under `parent`.
fn prefixed(parent: &str, path: &str) -> String {
    if path.starts_with('[') { format!("{parent}{path}") } else { format!("{parent}.{path}") }
}

struct Checks {
    issues: Vec<Issue>,
}

impl Checks {
    fn push(&mut self, path: impl Into<String>, message: impl Into<String>, fix: impl Into<String>) {
        self.issues.push(Issue::new(path, message, fix));
    }

    fn non_empty(&mut self, path: &str, text: &str, what: &str) {
        if text.trim().is_empty() {
            self.push(path, format!("{what} must not be empty"), format!("write {what}"));
        }
    }

    fn name(&mut self, path: &str, name: &str, what: &str) {
        if !is_tool_name(name) {
            self.push(path, format!("{what} `{}` is not a valid name", excerpt(name)), TOOL_NAME_FIX);
        }
    }

    /// A name a caller calls (a tool's or an alias's): valid, and not one of the host's own.
    fn callable_name(&mut self, path: &str, name: &str, what: &str) {
        self.name(path, name, what);
        if is_reserved_tool_name(name) {
            self.push(
                path,
                reserved_name_message(name),
                "rename it (for example with the plugin's prefix); a call of that name always reaches the meta tool",
            );
        }
    }

    fn scopes(&mut self, path: &str, scopes: &[String]) {
        for (n, scope) in scopes.iter().enumerate() {
            if !is_scope(scope) {
                self.push(index(path, n), format!("`{}` is not a valid scope", excerpt(scope)), SCOPE_FIX);
            }
        }
    }

    fn version_order(&mut self, path: &str, first: Option<&Version>, planned: Option<&Version>) {
        if let (Some(first), Some(planned)) = (first, planned)
            && planned <= first
        {
            self.push(
                field(path, "planned_removal_version"),
                format!("planned_removal_version {planned} is not later than first_deprecated_version {first}"),
                "plan the removal for a version after the first deprecation",
            );
        }
    }
}

/// The rules beyond the schema. Also re-checks what the schema checks, so manifests built in code
/// get the same guarantees.
fn semantic_issues(m: &Manifest) -> Vec<Issue> {
    let mut c = Checks { issues: Vec::new() };
    if m.manifest_version != MANIFEST_VERSION {
        c.push(
            "manifest_version",
            format!(
                "manifest format version {} is not supported; this host reads version {MANIFEST_VERSION}",
                m.manifest_version
            ),
            format!("write `manifest_version: {MANIFEST_VERSION}` and follow that format"),
        );
    }
    if !is_kebab_id(&m.id) {
        c.push(
            "id",
            format!("plugin id `{}` is not kebab-case", excerpt(&m.id)),
            "use lower-case letters and digits in words joined by single hyphens, starting with a letter (at most 64 characters), e.g. `fs-tools`",
        );
    }
    c.non_empty("display_name", &m.display_name, "a display name");
    c.non_empty("description", &m.description, "a description");
    if m.abi != SUPPORTED_ABI {
        c.push(
            "abi",
            format!("ABI {} is not supported; this host speaks ABI {SUPPORTED_ABI}", m.abi),
            format!("rebuild the plugin against quiver-abi for ABI {SUPPORTED_ABI} and write `abi: {SUPPORTED_ABI}`"),
        );
    }
    if let Some(schema) = &m.config_schema {
        check_object_schema(&mut c, "config_schema", schema);
    }
    if let Some(artifact) = &m.artifact {
        let file = &artifact.file;
        if !is_plain_file_name(file) {
            c.push(
                "artifact.file",
                format!("`{}` is not a plain file name", excerpt(file)),
                "name a file beside the manifest: no folders (`/`, `\\`), no `..`, not hidden (no leading `.`)",
            );
        }
        if ![".so", ".dylib", ".dll"].iter().any(|ext| file.len() > ext.len() && file.ends_with(ext)) {
            c.push(
                "artifact.file",
                format!("`{}` is not a library file name", excerpt(file)),
                "name the plugin library, ending in `.so`, `.dylib` or `.dll`",
            );
        }
        if !is_sha256_hex(&artifact.sha256) {
            c.push(
                "artifact.sha256",
                format!("`{}` is not a sha256 in lower-case hex", excerpt(&artifact.sha256)),
                "write the 64 lower-case hex digits that `sha256sum` prints for the library",
            );
        }
        if let Some(report) = &artifact.report {
            if !is_plain_file_name(&report.file) || !report.file.ends_with(".json") || report.file.len() <= 5 {
                c.push(
                    "artifact.report.file",
                    format!("`{}` is not a plain `.json` file name", excerpt(&report.file)),
                    "name the load report beside the manifest, ending in `.json` (no folders, not hidden); `quiver sign --report` writes it",
                );
            }
            if !is_sha256_hex(&report.sha256) {
                c.push(
                    "artifact.report.sha256",
                    format!("`{}` is not a sha256 in lower-case hex", excerpt(&report.sha256)),
                    "write the 64 lower-case hex digits that `sha256sum` prints for the report, or sign again with `quiver sign --report`",
                );
            }
        }
    }
    if m.tools.is_empty() {
        c.push("tools", "a plugin needs at least one tool", "add a tool under `tools:`");
    }

    for (n, tool) in m.tools.iter().enumerate() {
        check_tool(&mut c, tool, &index("tools", n));
    }
    check_unique_names(&mut c, m);
    check_hooks(&mut c, m);
    let tools: Vec<_> = m.tools.iter().map(|t| (t.name.clone(), t.invoke.as_ref(), t.input_schema.as_ref())).collect();
    c.issues.extend(crate::adapter::adapter_issues(
        m.adapter.as_ref(),
        m.artifact.is_some(),
        m.sandbox.network,
        &tools,
    ));
    c.issues
}

/// A file name beside the manifest: no folders, no `..`, not hidden, no control characters.
fn is_plain_file_name(file: &str) -> bool {
    !file.is_empty()
        && !file.contains(['/', '\\', ':', '\0'])
        && !file.contains("..")
        && !file.starts_with('.')
        && !file.chars().any(char::is_control)
}

/// A hook names a tool of this manifest that runs without a person's confirmation (nobody is
/// there to confirm a session event).
fn check_hooks(c: &mut Checks, m: &Manifest) {
    for (field, name) in [("hooks.session_start", &m.hooks.session_start), ("hooks.session_end", &m.hooks.session_end)]
    {
        let Some(name) = name else { continue };
        match m.tools.iter().find(|t| t.name == *name) {
            None => c.push(
                field,
                format!("`{}` is not a tool of this plugin", excerpt(name)),
                "name one of the tools listed under `tools:` (a hook calls a tool of its own plugin)",
            ),
            Some(t) if t.policies.effective(t.side_effects).confirmation => c.push(
                field,
                format!("hook tool `{name}` needs a person's confirmation, and nobody can confirm a session event"),
                "set `policies: {confirmation: false}` on it, or use a tool that is not destructive",
            ),
            Some(_) => {}
        }
    }
}

/// Tool and alias names share one namespace within the manifest.
fn check_unique_names(c: &mut Checks, m: &Manifest) {
    let mut seen: HashMap<&str, String> = HashMap::new();
    for (n, tool) in m.tools.iter().enumerate() {
        let tool_path = index("tools", n);
        let entries = std::iter::once((tool.name.as_str(), field(&tool_path, "name"))).chain(
            tool.aliases
                .iter()
                .enumerate()
                .map(|(k, a)| (a.name.as_str(), field(&index(&field(&tool_path, "aliases"), k), "name"))),
        );
        for (name, path) in entries {
            if let Some(first) = seen.get(name) {
                c.push(
                    path,
                    format!("name `{name}` is already used at {first} (tool and alias names must be unique within the manifest)"),
                    "rename one of them",
                );
            } else {
                seen.insert(name, path);
            }
        }
    }
}

fn check_tool(c: &mut Checks, tool: &ToolSpec, at: &str) {
    c.callable_name(&field(at, "name"), &tool.name, "tool name");
    c.non_empty(&field(at, "title"), &tool.title, "a title");
    c.non_empty(&field(at, "description"), &tool.description, "a description");
    for (key, schema) in [("input_schema", &tool.input_schema), ("output_schema", &tool.output_schema)] {
        if let Some(schema) = schema {
            check_object_schema(c, &field(at, key), schema);
        }
    }
    c.scopes(&field(at, "scopes"), &tool.scopes);
    for (n, example) in tool.examples.iter().enumerate() {
        c.non_empty(&index(&field(at, "examples"), n), example, "an example request");
    }
    check_policies(c, &field(at, "policies"), &tool.policies);
    check_lifecycle(c, tool, &field(at, "lifecycle"));
    check_actions(c, tool, at);
    for (n, alias) in tool.aliases.iter().enumerate() {
        check_alias(c, tool, alias, &index(&field(at, "aliases"), n));
    }
}

/// An argument or result schema: an object schema that compiles as draft 2020-12.
fn check_object_schema(c: &mut Checks, at: &str, schema: &Value) {
    if schema.get("type") != Some(&Value::String("object".into())) {
        c.push(
            at,
            "the schema does not describe an object (`type: object` is missing)",
            "add `type: object` at the top of the schema; tool arguments, results and plugin configurations are JSON objects",
        );
    }
    if let Err(e) = compile_2020_12(schema) {
        let path = e.instance_path().as_str().to_owned();
        let inner = if path.is_empty() { String::new() } else { format!(" at {path}") };
        c.push(
            at,
            format!("not a valid JSON Schema (draft 2020-12){inner}: {}", excerpt_n(&e.to_string(), 300)),
            "correct the schema; remote `$ref`s are never fetched, so keep definitions in `$defs`",
        );
    }
}

fn check_policies(c: &mut Checks, at: &str, p: &PolicySpec) {
    if let Some(t) = p.timeout_ms
        && !(1..=600_000).contains(&t)
    {
        c.push(field(at, "timeout_ms"), format!("timeout {t} ms is out of range"), "use 1 to 600000 (10 minutes)");
    }
    if let Some(r) = p.retries
        && r > 10
    {
        c.push(field(at, "retries"), format!("{r} retries is too many"), "use at most 10 retries");
    }
    if let Some(b) = p.max_result_bytes
        && b < 256
    {
        c.push(field(at, "max_result_bytes"), format!("{b} bytes is too small a result cap"), "use at least 256");
    }
    if p.max_concurrency == Some(0) {
        c.push(field(at, "max_concurrency"), "a concurrency of 0 would block every call", "use at least 1");
    }
}

fn check_lifecycle(c: &mut Checks, tool: &ToolSpec, at: &str) {
    let l = &tool.lifecycle;
    let state = l.state;
    if matches!(state, LifecycleState::Deprecated | LifecycleState::Removed) && l.replacement.is_none() {
        c.push(
            field(at, "replacement"),
            format!("a {} tool must name its replacement", state.as_str()),
            "add `replacement: <tool name>` naming the tool callers should use instead",
        );
    }
    if let Some(r) = &l.replacement {
        c.name(&field(at, "replacement"), r, "replacement");
        if *r == tool.name {
            c.push(field(at, "replacement"), "a tool cannot be its own replacement", "name a different tool");
        }
    }
    if state == LifecycleState::Removed && l.removed_in_version.is_none() {
        c.push(
            field(at, "removed_in_version"),
            "a removed tool must say which version removed it",
            "add `removed_in_version: <plugin version>`",
        );
    }
    c.version_order(at, l.first_deprecated_version.as_ref(), l.planned_removal_version.as_ref());
}

fn check_actions(c: &mut Checks, tool: &ToolSpec, at: &str) {
    let actions_at = field(at, "actions");
    let mut seen = BTreeSet::new();
    for (n, action) in tool.actions.iter().enumerate() {
        let a_at = index(&actions_at, n);
        c.name(&field(&a_at, "name"), &action.name, "action name");
        if !seen.insert(action.name.as_str()) {
            c.push(
                field(&a_at, "name"),
                format!("action `{}` is listed twice", action.name),
                "remove or rename one of them",
            );
        }
        if action.side_effects > tool.side_effects {
            c.push(
                field(&a_at, "side_effects"),
                format!(
                    "action `{}` is `{}`, riskier than its tool's `{}`",
                    action.name,
                    action.side_effects.as_str(),
                    tool.side_effects.as_str()
                ),
                format!(
                    "raise the tool's `side_effects` to `{}` (a tool declares its riskiest action) or lower the action's",
                    action.side_effects.as_str()
                ),
            );
        }
        c.scopes(&field(&a_at, "scopes"), &action.scopes);
    }
    if tool.actions.is_empty() {
        return;
    }
    let Some(schema) = &tool.input_schema else { return };
    let names: BTreeSet<&str> = tool.actions.iter().map(|a| a.name.as_str()).collect();
    let listed = names.iter().copied().collect::<Vec<_>>().join(", ");
    let property_at = field(&field(&field(at, "input_schema"), "properties"), "action");
    let Some(property) = schema.get("properties").and_then(|p| p.get("action")) else {
        c.push(
            property_at,
            "a tool with actions needs a string property `action` in its input schema",
            format!("add `action: {{type: string, enum: [{listed}]}}` under `properties`"),
        );
        return;
    };
    if property.get("type") != Some(&Value::String("string".into())) {
        c.push(field(&property_at, "type"), "the `action` property must be a string", "write `type: string`");
    }
    let enumerated: Option<Vec<&str>> =
        property.get("enum").and_then(Value::as_array).and_then(|values| values.iter().map(Value::as_str).collect());
    match enumerated {
        None => c.push(
            field(&property_at, "enum"),
            "the `action` property must list the action names in `enum`",
            format!("write `enum: [{listed}]`"),
        ),
        Some(values) => {
            let in_enum: BTreeSet<&str> = values.iter().copied().collect();
            if in_enum != names || values.len() != in_enum.len() {
                let missing: Vec<&str> = names.difference(&in_enum).copied().collect();
                let extra: Vec<&str> = in_enum.difference(&names).copied().collect();
                let mut problems = Vec::new();
                if !missing.is_empty() {
                    problems.push(format!("lacks {}", missing.join(", ")));
                }
                if !extra.is_empty() {
                    problems.push(format!(
                        "has {} which {} no action",
                        extra.join(", "),
                        if extra.len() == 1 { "is" } else { "are" }
                    ));
                }
                if problems.is_empty() {
                    problems.push("repeats a name".to_owned());
                }
                c.push(
                    field(&property_at, "enum"),
                    format!("the `action` enum does not match the actions: it {}", problems.join(" and ")),
                    format!("list exactly the action names: `enum: [{listed}]`"),
                );
            }
        }
    }
}

fn check_alias(c: &mut Checks, tool: &ToolSpec, alias: &AliasSpec, at: &str) {
    c.callable_name(&field(at, "name"), &alias.name, "alias name");
    if !matches!(
        alias.state,
        LifecycleState::HiddenCompatibility | LifecycleState::Deprecated | LifecycleState::Removed
    ) {
        c.push(
            field(at, "state"),
            format!("an alias cannot be `{}`: aliases are never on the surface", alias.state.as_str()),
            "use `hidden-compatibility`, `deprecated` or `removed`",
        );
    }
    if alias.state == LifecycleState::Removed && alias.removed_in_version.is_none() {
        c.push(
            field(at, "removed_in_version"),
            "a removed alias must say which version removed it",
            "add `removed_in_version: <plugin version>`",
        );
    }
    c.version_order(at, alias.first_deprecated_version.as_ref(), alias.planned_removal_version.as_ref());
    if let Some(action) = &alias.action {
        if tool.actions.is_empty() {
            c.push(
                field(at, "action"),
                format!("alias `{}` names action `{action}` but tool `{}` has no actions", alias.name, tool.name),
                "remove `action`, or give the tool its `actions`",
            );
        } else if !tool.actions.iter().any(|a| a.name == *action) {
            let listed = tool.actions.iter().map(|a| a.name.as_str()).collect::<Vec<_>>().join(", ");
            c.push(
                field(at, "action"),
                format!("`{action}` is not an action of tool `{}`", tool.name),
                format!("use one of: {listed}"),
            );
        }
    }
}
