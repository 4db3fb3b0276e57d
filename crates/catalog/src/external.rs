//! A catalog made from tool definitions that are not Quiver plugins (MCP `Tool` objects or
//! OpenAI-style function definitions), for measuring search and surfaces on public tool sets.
//! Its tools cannot be called.

use std::sync::Arc;

use quiver_abi::{PluginInfo, ToolSchemas};
use quiver_manifest::{LifecycleSpec, LifecycleState, Manifest, PolicySpec, SideEffects, ToolSpec};
use serde_json::{Value, json};

use crate::{CallSink, Catalog, ConflictPolicy, PluginEntry, Provenance, ToolBackend};

struct NotCallable;

impl ToolBackend for NotCallable {
    fn invoke(&self, tool: &str, _request: &str, _sink: Arc<dyn CallSink>) -> String {
        json!({"status": "error", "error": {"code": "tool_error", "message": format!("`{tool}` comes from an external tool list and cannot be called")}})
            .to_string()
    }
}

/// Builds a catalog of one pseudo-plugin `id` from a JSON array of tool definitions, every tool
/// in lifecycle state `state`. Errors name the array index and the field.
pub fn catalog_from_tool_list(id: &str, tools: &[Value], state: LifecycleState) -> Result<Catalog, String> {
    let mut specs = Vec::with_capacity(tools.len());
    let mut schemas = Vec::with_capacity(tools.len());
    for (i, t) in tools.iter().enumerate() {
        let f = t.get("function").unwrap_or(t);
        let name =
            f.get("name").and_then(Value::as_str).ok_or_else(|| format!("tools[{i}].name: missing or not a string"))?;
        let description = f.get("description").and_then(Value::as_str).unwrap_or_default();
        let input =
            f.get("inputSchema").or_else(|| f.get("parameters")).cloned().unwrap_or_else(|| json!({"type": "object"}));
        specs.push(ToolSpec {
            name: name.to_owned(),
            title: f.get("title").and_then(Value::as_str).unwrap_or_default().to_owned(),
            description: description.to_owned(),
            input_schema: None,
            output_schema: None,
            domain: String::new(),
            capabilities: Vec::new(),
            aliases: Vec::new(),
            prompt_snippet: String::new(),
            side_effects: SideEffects::Read,
            idempotent: false,
            scopes: Vec::new(),
            policies: PolicySpec::default(),
            lifecycle: LifecycleSpec { state, ..LifecycleSpec::default() },
            actions: Vec::new(),
            examples: Vec::new(),
        });
        schemas.push(ToolSchemas {
            name: name.to_owned(),
            input_schema: input,
            output_schema: json!({"type": "object"}),
            actions: Vec::new(),
        });
    }
    let manifest = Manifest {
        manifest_version: 1,
        id: id.to_owned(),
        version: semver::Version::new(0, 0, 0),
        display_name: id.to_owned(),
        description: "external tool list".to_owned(),
        abi: quiver_abi::ABI_VERSION,
        artifact: None,
        sandbox: Default::default(),
        tools: specs,
    };
    let info = PluginInfo {
        abi_version: quiver_abi::ABI_VERSION,
        sdk_version: String::new(),
        manifest: String::new(),
        tools: schemas,
    };
    let mut entry = PluginEntry::new(
        manifest,
        &info,
        Provenance { sha256: String::new(), signer_key_id: None, manifest_path: String::new() },
        Arc::new(NotCallable),
    )
    .map_err(|e| e.to_string())?;
    // Output schemas of external tools are unknown: do not advertise one.
    for t in &mut entry.tools {
        t.output_schema = None;
        t.output_validator = None;
    }
    Catalog::build(vec![Arc::new(entry)], ConflictPolicy::Error).map_err(|e| e.to_string())
}
