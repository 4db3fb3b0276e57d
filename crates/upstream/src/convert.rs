//! From what an upstream server says (its tools, its results) to what Quiver's catalog and
//! router take (tool definitions, `ToolResponse` JSON), with the operator's overrides applied.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use quiver_abi::{ErrorCode, PluginInfo, ToolError};
use quiver_catalog::{PluginEntry, Provenance, ToolBackend, ToolDef, ToolValidator};
use quiver_manifest::{
    LifecycleSpec, MAX_NAME_LEN, Manifest, PolicySpec, SideEffects, ToolSpec, UpstreamConfig, sha256_hex,
};
use rmcp::model::{CallToolResult, Tool};
use serde_json::{Value, json};

/// A Quiver tool name from an upstream one: `getTinyImage` → `get_tiny_image`,
/// `read-file.v2` → `read_file_v2`, after `prefix`. `None` when nothing usable is left.
pub(crate) fn tool_name(prefix: &str, upstream: &str) -> Option<String> {
    let mut out = String::with_capacity(prefix.len() + upstream.len() + 4);
    let mut prev_lower = false;
    for c in upstream.chars() {
        if c.is_ascii_uppercase() {
            if prev_lower {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
            prev_lower = false;
        } else if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
            prev_lower = true;
        } else {
            if !out.ends_with('_') {
                out.push('_');
            }
            prev_lower = false;
        }
    }
    let body = out.trim_matches('_');
    if body.is_empty() {
        return None;
    }
    let mut name = format!("{prefix}{body}");
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        name.insert_str(0, "t_");
    }
    name.truncate(MAX_NAME_LEN);
    Some(name.trim_end_matches('_').to_owned())
}

/// Risk from the upstream's annotations, read as the MCP specification defines their defaults:
/// `readOnlyHint` → read; otherwise `destructiveHint` (default true) → destructive, else write.
/// They are hints from a server the operator may not control; an override wins.
fn side_effects(t: &Tool) -> SideEffects {
    let a = t.annotations.as_ref();
    if a.and_then(|a| a.read_only_hint) == Some(true) {
        SideEffects::Read
    } else if a.and_then(|a| a.destructive_hint).unwrap_or(true) {
        SideEffects::Destructive
    } else {
        SideEffects::Write
    }
}

/// The catalog entry of one upstream: its tools (those that convert) and what was skipped.
pub(crate) struct Built {
    pub entry: PluginEntry,
    /// One line per skipped tool: which and why.
    pub skipped: Vec<String>,
}

/// Builds the entry of `cfg` from the upstream's tool list. `backend` receives the name map.
pub(crate) fn build_entry(
    cfg: &UpstreamConfig,
    server_version: &str,
    server_title: &str,
    tools: &[Tool],
    backend: impl FnOnce(HashMap<String, String>) -> Arc<dyn ToolBackend>,
) -> Built {
    let prefix = cfg.effective_prefix();
    let mut defs = Vec::with_capacity(tools.len());
    let mut names: HashMap<String, String> = HashMap::with_capacity(tools.len());
    let mut taken: BTreeMap<String, String> = BTreeMap::new();
    let mut skipped = Vec::new();
    for t in tools {
        let upstream = t.name.as_ref();
        if cfg.excludes(upstream) {
            continue;
        }
        let o = cfg.tools.get(upstream).cloned().unwrap_or_default();
        let Some(name) = o.name.clone().or_else(|| tool_name(&prefix, upstream)) else {
            skipped
                .push(format!("`{upstream}`: its name has no letters or digits; name it with `tools.{upstream}.name`"));
            continue;
        };
        if quiver_manifest::is_reserved_tool_name(&name) {
            skipped.push(format!(
                "`{upstream}`: becomes `{name}`, the name of one of Quiver's own meta tools; name it with `tools.{upstream}.name` or set a `prefix`"
            ));
            continue;
        }
        if let Some(first) = taken.get(&name) {
            skipped.push(format!(
                "`{upstream}`: becomes `{name}`, which `{first}` already is; give one of them `tools.<upstream name>.name`"
            ));
            continue;
        }
        for a in &o.aliases {
            if let Some(first) = taken.get(&a.name) {
                skipped.push(format!("`{upstream}`: alias `{}` is already the name of `{first}`", a.name));
            }
        }
        let input = Arc::new(Value::Object(t.input_schema.as_ref().clone()));
        let input_validator = match ToolValidator::compile(input.clone()) {
            Ok(v) => v,
            Err(e) => {
                skipped.push(format!("`{upstream}`: its input schema does not compile ({e})"));
                continue;
            }
        };
        let (output_schema, output_validator) = match t.output_schema.as_ref() {
            None => (None, None),
            Some(s) => {
                let v = Arc::new(Value::Object(s.as_ref().clone()));
                match ToolValidator::compile(v.clone()) {
                    Ok(c) => (Some(v), Some(c)),
                    Err(e) => {
                        skipped.push(format!("`{upstream}`: its output schema does not compile ({e})"));
                        continue;
                    }
                }
            }
        };
        let side_effects = o.side_effects.unwrap_or_else(|| side_effects(t));
        let mut scopes = cfg.scopes.clone();
        scopes.extend(o.scopes.iter().cloned());
        let title = o
            .title
            .clone()
            .or_else(|| t.title.clone())
            .or_else(|| t.annotations.as_ref().and_then(|a| a.title.clone()))
            .unwrap_or_default();
        let description =
            o.description.clone().or_else(|| t.description.as_ref().map(|d| d.to_string())).unwrap_or_default();
        let spec = ToolSpec {
            name: name.clone(),
            title,
            description,
            // As the server wrote them: surfaces keep a `$schema` they declare.
            input_schema: Some(input.as_ref().clone()),
            output_schema: output_schema.as_deref().cloned(),
            domain: o.domain.clone().unwrap_or_default(),
            capabilities: o.capabilities.clone(),
            aliases: o.aliases.clone(),
            prompt_snippet: String::new(),
            side_effects,
            idempotent: t.annotations.as_ref().and_then(|a| a.idempotent_hint).unwrap_or(false),
            scopes,
            policies: PolicySpec {
                confirmation: o.confirmation,
                timeout_ms: Some(o.timeout_ms.unwrap_or(cfg.timeout_ms)),
                retries: o.retries,
                max_result_bytes: o.max_result_bytes,
                ..PolicySpec::default()
            },
            lifecycle: LifecycleSpec {
                state: o.state.unwrap_or(cfg.state),
                replacement: o.replacement.clone(),
                first_deprecated_version: o.first_deprecated_version.clone(),
                planned_removal_version: o.planned_removal_version.clone(),
                removed_in_version: o.removed_in_version.clone(),
                ..LifecycleSpec::default()
            },
            actions: Vec::new(),
            examples: o.examples.clone(),
            invoke: None,
            // An upstream gets its credentials through the source's env or headers.
            secrets: Vec::new(),
        };
        taken.insert(name.clone(), upstream.to_owned());
        for a in &o.aliases {
            taken.entry(a.name.clone()).or_insert_with(|| upstream.to_owned());
        }
        names.insert(name, upstream.to_owned());
        defs.push(ToolDef {
            policies: spec.policies.effective(spec.side_effects),
            spec,
            input_validator,
            input_schema: input,
            output_schema,
            output_validator,
        });
    }
    let version = lenient_version(server_version);
    let listing = serde_json::to_vec(tools).unwrap_or_default();
    let manifest = Manifest {
        manifest_version: 1,
        id: cfg.name.clone(),
        version,
        display_name: if server_title.is_empty() { cfg.name.clone() } else { server_title.to_owned() },
        description: format!("upstream MCP server `{}`", cfg.name),
        abi: quiver_abi::ABI_VERSION,
        artifact: None,
        sandbox: Default::default(),
        config_schema: None,
        adapter: None,
        tools: defs.iter().map(|d| d.spec.clone()).collect(),
        hooks: Default::default(),
    };
    let entry = PluginEntry {
        manifest,
        provenance: Provenance {
            // What the upstream listed: a changed list is a new entry, visible in `quiver list`.
            sha256: sha256_hex(&listing),
            signer_key_id: None,
            manifest_path: format!("upstream:{}", cfg.name),
        },
        tools: defs,
        backend: backend(names),
        source: format!("upstream:{}", cfg.name),
        info: Arc::new(PluginInfo {
            abi_version: quiver_abi::ABI_VERSION,
            sdk_version: String::new(),
            manifest: String::new(),
            tools: Vec::new(),
        }),
    };
    Built { entry, skipped }
}

/// Upstream servers report any version text; the catalog wants semver. `1.2` → `1.2.0`;
/// anything unreadable → `0.0.0`.
fn lenient_version(v: &str) -> semver::Version {
    let v = v.trim().trim_start_matches('v');
    if let Ok(s) = semver::Version::parse(v) {
        return s;
    }
    let mut parts = v.split(|c: char| !c.is_ascii_digit()).filter(|p| !p.is_empty()).map(|p| p.parse::<u64>());
    let mut next = || parts.next().and_then(Result::ok).unwrap_or(0);
    semver::Version::new(next(), next(), next())
}

/// The JSON of a `quiver_abi::ToolResponse` for an upstream's `tools/call` result.
pub(crate) fn response_json(r: CallToolResult) -> String {
    let content: Vec<Value> = r.content.iter().filter_map(|b| serde_json::to_value(b).ok()).collect();
    if r.is_error == Some(true) {
        let text: Vec<&str> = r.content.iter().filter_map(|b| b.as_text().map(|t| t.text.as_str())).collect();
        let message = if text.is_empty() { "the upstream tool reported an error".to_owned() } else { text.join("\n") };
        return json!({
            "status": "error",
            "error": {"code": ErrorCode::TOOL_ERROR, "message": message, "retryable": false},
        })
        .to_string();
    }
    let mut out = json!({"status": "ok", "outputs": r.structured_content.unwrap_or(Value::Null)});
    if !content.is_empty() {
        out["content"] = Value::Array(content);
    }
    out.to_string()
}

/// A host-side error for a call that did not get an upstream answer.
pub(crate) fn error(code: &str, message: impl Into<String>, retryable: bool) -> ToolError {
    ToolError { code: code.to_owned(), message: message.into(), retryable, details: Value::Null }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_quiver_names() {
        assert_eq!(tool_name("ev_", "getTinyImage").as_deref(), Some("ev_get_tiny_image"));
        assert_eq!(tool_name("", "read-file.v2").as_deref(), Some("read_file_v2"));
        assert_eq!(tool_name("gh_", "create_issue").as_deref(), Some("gh_create_issue"));
        assert_eq!(tool_name("", "2fa").as_deref(), Some("t_2fa"));
        assert_eq!(tool_name("x_", "--").as_deref(), None);
        assert_eq!(tool_name("", "HTTPGet").as_deref(), Some("httpget"));
        let long = tool_name("p_", &"a".repeat(100)).unwrap();
        assert_eq!(long.len(), MAX_NAME_LEN);
    }

    /// An upstream tool named like one of Quiver's meta tools is skipped with a reason, not
    /// served beside (and shadowed by) the meta tool.
    #[test]
    fn a_tool_named_like_a_meta_tool_is_skipped_and_named() {
        struct Nothing;
        impl ToolBackend for Nothing {
            fn invoke(&self, _tool: &str, _request: &str, _sink: Arc<dyn quiver_catalog::CallSink>) -> String {
                String::new()
            }
        }
        let cfg: UpstreamConfig =
            serde_json::from_value(serde_json::json!({"name": "fake", "command": "x", "prefix": ""})).unwrap();
        let schema = Arc::new(serde_json::json!({"type": "object"}).as_object().unwrap().clone());
        let tools = [Tool::new("run_tool", "d", schema.clone()), Tool::new("echo", "d", schema)];
        let built = build_entry(&cfg, "1.0.0", "Fake", &tools, |_| Arc::new(Nothing));
        let names: Vec<&str> = built.entry.tools.iter().map(|t| t.spec.name.as_str()).collect();
        assert_eq!(names, ["echo"]);
        assert_eq!(built.skipped.len(), 1, "{:?}", built.skipped);
        assert!(
            built.skipped[0].contains("`run_tool`") && built.skipped[0].contains("meta tools"),
            "{:?}",
            built.skipped
        );
    }

    #[test]
    fn versions_are_read_leniently() {
        assert_eq!(lenient_version("1.2.3"), semver::Version::new(1, 2, 3));
        assert_eq!(lenient_version("v2.1"), semver::Version::new(2, 1, 0));
        assert_eq!(lenient_version("unknown"), semver::Version::new(0, 0, 0));
    }

    #[test]
    fn annotations_follow_the_specification_defaults() {
        let mut t = Tool::new("x", "d", Arc::new(serde_json::Map::new()));
        assert_eq!(side_effects(&t), SideEffects::Destructive, "no annotations: may be destructive");
        t.annotations = Some(rmcp::model::ToolAnnotations::new().read_only(true));
        assert_eq!(side_effects(&t), SideEffects::Read);
        t.annotations = Some(rmcp::model::ToolAnnotations::new().destructive(false));
        assert_eq!(side_effects(&t), SideEffects::Write);
    }
}
