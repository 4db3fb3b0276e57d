//! MCP resources: each tool's documentation (`quiver://tools/<name>`, Markdown) for the tools a
//! session may see, and the full texts of cut results (`quiver://results/<handle>`, JSON, with
//! optional `?offset=&length=` to read a slice), readable only by the session that made them.

use quiver_catalog::{Access, Catalog, ToolDef};
use quiver_router::{READ_RESULT, RESULT_URI_PREFIX, Router};
use rmcp::model::{
    ErrorCode, ErrorData, ListResourceTemplatesResult, ListResourcesResult, ReadResourceResult, Resource,
    ResourceContents, ResourceTemplate,
};
use serde_json::{Value, json};

/// Prefix of tool documentation URIs.
pub(crate) const TOOL_URI_PREFIX: &str = "quiver://tools/";

/// JSON-RPC code the MCP specification gives "resource not found".
const RESOURCE_NOT_FOUND: i32 = -32002;

fn not_found(uri: &str, why: &str) -> ErrorData {
    let shown: String = uri.chars().take(120).collect();
    ErrorData::new(
        ErrorCode(RESOURCE_NOT_FOUND),
        format!("Resource not found: `{shown}`: {why}"),
        Some(json!({ "uri": shown })),
    )
}

fn from_json<T: serde::de::DeserializeOwned>(v: Value) -> Result<T, ErrorData> {
    serde_json::from_value(v).map_err(|e| ErrorData::internal_error(format!("cannot build a resource: {e}"), None))
}

/// `resources/list`: the documentation of every tool the session may see, in catalog order.
pub(crate) fn list(catalog: &Catalog, access: &Access) -> Result<ListResourcesResult, ErrorData> {
    let resources: Vec<Resource> = catalog
        .visible_tools()
        .filter(|r| access.may_see(&r.name, catalog.def(r)))
        .map(|r| {
            let def = catalog.def(r);
            from_json(json!({
                "uri": format!("{TOOL_URI_PREFIX}{}", r.name),
                "name": r.name,
                "title": format!("{} (documentation)", def.spec.title),
                "description": format!("How to use the tool `{}`.", r.name),
                "mimeType": "text/markdown",
            }))
        })
        .collect::<Result<_, _>>()?;
    Ok(ListResourcesResult::with_all_items(resources))
}

/// `resources/templates/list`: tool documentation by name, results by handle.
pub(crate) fn templates() -> Result<ListResourceTemplatesResult, ErrorData> {
    let templates: Vec<ResourceTemplate> = vec![
        from_json(json!({
            "uriTemplate": format!("{TOOL_URI_PREFIX}{{name}}"),
            "name": "tool-documentation",
            "title": "Tool documentation",
            "description": "What a tool does, when to use it, its arguments and output, as Markdown.",
            "mimeType": "text/markdown",
        }))?,
        from_json(json!({
            "uriTemplate": format!("{RESULT_URI_PREFIX}{{handle}}"),
            "name": "tool-result",
            "title": "Full tool result",
            "description": "The full JSON of a tool result that was cut to its size limit (the handle is in the cut result). Add ?offset=N&length=M to read a slice.",
            "mimeType": "application/json",
        }))?,
    ];
    Ok(ListResourceTemplatesResult::with_all_items(templates))
}

/// `resources/read`.
pub(crate) fn read(
    uri: &str,
    catalog: &Catalog,
    access: &Access,
    router: &Router,
    session_id: &str,
) -> Result<ReadResourceResult, ErrorData> {
    if let Some(name) = uri.strip_prefix(TOOL_URI_PREFIX) {
        let doc = catalog
            .resolve(name)
            .filter(|r| r.is_canonical() && r.state.is_dispatchable() && access.may_see(&r.tool.name, r.def))
            .map(|r| documentation(&r.tool.name, r.def))
            .ok_or_else(|| not_found(uri, "no such tool; resources/list lists the tools documented"))?;
        let contents = ResourceContents::TextResourceContents {
            uri: uri.to_owned(),
            mime_type: Some("text/markdown".into()),
            text: doc,
            meta: None,
        };
        return Ok(ReadResourceResult::new(vec![contents]));
    }
    if let Some(rest) = uri.strip_prefix(RESULT_URI_PREFIX) {
        let (handle, query) = rest.split_once('?').unwrap_or((rest, ""));
        let mut offset = 0usize;
        let mut length = usize::MAX;
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let n: usize = v.parse().map_err(|_| {
                ErrorData::invalid_params(format!("`{k}` in a result URI must be a non-negative integer"), None)
            })?;
            match k {
                "offset" => offset = n,
                "length" => length = n,
                _ => {
                    return Err(ErrorData::invalid_params(
                        format!(
                            "a result URI takes only `offset` and `length` (got `{}`)",
                            k.chars().take(40).collect::<String>()
                        ),
                        None,
                    ));
                }
            }
        }
        let (text, total) = router.read_result(handle, session_id, offset, length).ok_or_else(|| {
            not_found(
                uri,
                "unknown or expired result handle (results are kept for a limited time, for the session that made them); call the tool again",
            )
        })?;
        let whole = text.len() == total;
        let contents = ResourceContents::TextResourceContents {
            uri: uri.to_owned(),
            // A slice of JSON is not JSON.
            mime_type: Some(if whole { "application/json" } else { "text/plain" }.into()),
            text,
            meta: None,
        };
        return Ok(ReadResourceResult::new(vec![contents]));
    }
    Err(not_found(uri, "this server serves quiver://tools/<name> and quiver://results/<handle>"))
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

/// A tool's documentation as Markdown: what it does and when to use it, its risk and limits,
/// actions, arguments, output and example requests.
pub(crate) fn documentation(name: &str, def: &ToolDef) -> String {
    let s = &def.spec;
    let p = &def.policies;
    let mut out = format!("# {name}\n\n**{}**\n\n{}\n", s.title, s.description.trim());
    if !s.prompt_snippet.trim().is_empty() {
        out.push_str(&format!("\n## When to use it\n\n{}\n", s.prompt_snippet.trim()));
    }
    out.push_str(&format!(
        "\n## Facts\n\n- domain: {}\n- side effects: {}\n- needs confirmation: {}\n- timeout: {}\n- result limit: {} bytes (larger results are cut; the full result is then a resource, or `run_tool` with `{READ_RESULT}`)\n",
        s.domain,
        s.side_effects.as_str(),
        if p.confirmation { "yes" } else { "no" },
        if p.timeout_ms == 0 { "none".to_owned() } else { format!("{} ms", p.timeout_ms) },
        p.max_result_bytes,
    ));
    if !s.scopes.is_empty() {
        out.push_str(&format!("- scopes: {}\n", s.scopes.join(", ")));
    }
    if !s.actions.is_empty() {
        out.push_str("\n## Actions\n\n");
        for a in &s.actions {
            out.push_str(&format!("- `{}` ({}): {}\n", a.name, a.side_effects.as_str(), a.description.trim()));
        }
    }
    out.push_str(&format!("\n## Arguments\n\n```json\n{}\n```\n", pretty(&def.input_schema)));
    if let Some(o) = &def.output_schema {
        out.push_str(&format!("\n## Output\n\n```json\n{}\n```\n", pretty(o)));
    }
    if !s.examples.is_empty() {
        out.push_str("\n## Example requests\n\n");
        for e in &s.examples {
            out.push_str(&format!("- {e}\n"));
        }
    }
    out
}
