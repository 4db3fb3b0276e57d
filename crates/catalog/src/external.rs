//! A catalog made from tool definitions that are not Quiver plugins (MCP `Tool` objects or
//! OpenAI-style function definitions), for measuring search and surfaces on public tool sets.
//! Its tools cannot be called.

use std::collections::HashMap;
use std::sync::Arc;

use quiver_abi::PluginInfo;
use quiver_manifest::{LifecycleSpec, LifecycleState, Manifest, PolicySpec, SideEffects, ToolSpec};
use serde_json::{Value, json};

use crate::{CallSink, Catalog, ConflictPolicy, PluginEntry, Provenance, ToolBackend, ToolDef, compile_schema};

struct NotCallable;

impl ToolBackend for NotCallable {
    fn invoke(&self, tool: &str, _request: &str, _sink: Arc<dyn CallSink>) -> String {
        json!({"status": "error", "error": {"code": "tool_error", "message": format!("`{tool}` comes from an external tool list and cannot be called")}})
            .to_string()
    }
}

/// Builds a catalog of one pseudo-plugin `id` from a JSON array of tool definitions, every tool
/// in lifecycle state `state`. Errors name the array index and the field.
///
/// Linear in the number of tools: names are checked through one hash map, and no input validator
/// is compiled per tool. The tools cannot be called (their backend refuses every call), so all of
/// them share one permissive validator and a call gets the backend's clear refusal; their input
/// schemas are still kept whole for surfaces and search.
pub fn catalog_from_tool_list(id: &str, tools: Vec<Value>, state: LifecycleState) -> Result<Catalog, String> {
    let permissive_schema = Arc::new(json!({}));
    let permissive = Arc::new(compile_schema(&permissive_schema)?);
    let mut seen: HashMap<String, usize> = HashMap::with_capacity(tools.len());
    let mut defs = Vec::with_capacity(tools.len());
    for (i, mut t) in tools.into_iter().enumerate() {
        let mut f = match t.get_mut("function") {
            Some(inner) => inner.take(),
            None => t,
        };
        let name = f
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("tools[{i}].name: missing or not a string"))?
            .to_owned();
        if let Some(first) = seen.insert(name.clone(), i) {
            return Err(format!(
                "tools[{i}].name: `{name}` is already the name of tools[{first}]; tool names must be unique"
            ));
        }
        let description = f.get("description").and_then(Value::as_str).unwrap_or_default().to_owned();
        let title = f.get("title").and_then(Value::as_str).unwrap_or_default().to_owned();
        let input = f
            .as_object_mut()
            .and_then(|o| o.remove("inputSchema").or_else(|| o.remove("parameters")))
            .unwrap_or_else(|| json!({"type": "object"}));
        let spec = ToolSpec {
            name,
            title,
            description,
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
            secrets: Vec::new(),
            invoke: None,
        };
        defs.push(ToolDef {
            policies: spec.policies.effective(spec.side_effects),
            spec,
            input_schema: Arc::new(input),
            // Output schemas of external tools are unknown: do not advertise one.
            output_schema: None,
            input_validator: crate::ToolValidator::ready(permissive.clone(), permissive_schema.clone()),
            output_validator: None,
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
        adapter: None,
        sandbox: Default::default(),
        config_schema: None,
        // The tool specs live once, in the entry's tools; a pseudo-plugin has no signed manifest
        // to keep a second copy of.
        tools: Vec::new(),
        hooks: Default::default(),
    };
    let entry = PluginEntry {
        manifest,
        provenance: Provenance { sha256: String::new(), signer_key_id: None, manifest_path: String::new() },
        tools: defs,
        backend: Arc::new(NotCallable),
        info: Arc::new(PluginInfo {
            abi_version: quiver_abi::ABI_VERSION,
            sdk_version: String::new(),
            manifest: String::new(),
            tools: Vec::new(),
        }),
        source: "external".to_owned(),
    };
    Catalog::build(vec![Arc::new(entry)], ConflictPolicy::Error).map_err(|e| e.to_string())
}
