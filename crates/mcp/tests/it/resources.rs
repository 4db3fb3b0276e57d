//! Results over their size limit, result handles and tool documentation as MCP resources.

use quiver_catalog::ExposureMode;
use quiver_mcp::ServerOptions;
use quiver_tests::{plugin_library, source_dir, workspace_root, write_bundle};
use serde_json::{Value, json};

use crate::support::{Fixture, RawClient};

const META: &str = "io.github.quiver/";

/// A fixture whose `marker_echo` has a result limit of `limit` bytes and `extra` manifest lines
/// (in the library's embedded manifest and the signed one alike).
fn small_results(limit: u64, extra: &str) -> Fixture {
    let f = Fixture::new(ExposureMode::Full, ServerOptions::default());
    let lines = format!("    policies: {{execution: inline, max_result_bytes: {limit}}}{extra}");
    let source = std::fs::read_to_string(workspace_root().join(source_dir("marker-plugin")).join("tool.yaml")).unwrap();
    let text = source.replacen(marker_plugin_echo_line(), &lines, 1);
    assert_ne!(text, source, "tool.yaml of marker-plugin changed: adjust this test");
    let library = plugin_library("marker-plugin", &[("QUIVER_MARKER_ECHO_LINES", &lines)]);
    write_bundle(&f.dir.path().join("marker-plugin"), "marker-plugin", &library, Some(&text), Some(&f.key));
    let report = f.host.rescan();
    assert!(report.rejected.is_empty() && report.replaced.len() == 1, "{report:?}");
    f
}

fn marker_plugin_echo_line() -> &'static str {
    "    policies: {execution: inline}"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_result_matches_its_output_schema_and_links_the_full_result() {
    let f = small_results(300, "");
    let mut c = RawClient::start(&f.server);
    let init = c.initialize("resources-test", json!({})).await;
    assert!(init["result"]["capabilities"]["resources"].is_object(), "{init}");
    let long: String = (0..2000).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
    let r = c.call("marker_echo", json!({ "text": long })).await;
    let result = &r["result"];
    assert_ne!(result["isError"], true, "{r}");
    // Same shape as the tool's output: `text` shortened with a marker, `version` intact.
    let structured = &result["structuredContent"];
    assert_eq!(structured["version"], "0.1.0", "{r}");
    let text = structured["text"].as_str().unwrap();
    assert!(text.len() < 300 && text.starts_with("abcdef"), "{text}");
    let t = &result["_meta"][format!("{META}truncation")];
    let uri = t["uri"].as_str().unwrap_or_else(|| panic!("no truncation in _meta: {r}"));
    assert!(uri.starts_with("quiver://results/"), "{uri}");
    assert!(text.contains(uri), "{text}");
    assert_eq!(t["structured"], true);
    assert_eq!(t["cuts"][0]["pointer"], "/text");
    // A resource_link block points at the full result.
    let link = result["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "resource_link")
        .unwrap_or_else(|| panic!("no resource_link: {r}"));
    assert_eq!(link["uri"], uri);
    assert_eq!(link["mimeType"], "application/json");

    // resources/read gives the whole result back.
    let read = c.request("resources/read", json!({ "uri": uri })).await;
    let contents = &read["result"]["contents"][0];
    assert_eq!(contents["uri"], uri, "{read}");
    let full: Value = serde_json::from_str(contents["text"].as_str().unwrap()).unwrap();
    assert_eq!(full["text"], long);
    // ... or a slice of it.
    let read = c.request("resources/read", json!({ "uri": format!("{uri}?offset=2&length=4") })).await;
    assert_eq!(read["result"]["contents"][0]["text"], "text", "{read}");
    // The generic lane serves it too.
    let handle = t["handle"].as_str().unwrap();
    let r = c
        .call("run_tool", json!({ "name": "quiver.read_result", "arguments": { "handle": handle, "length": 9 } }))
        .await;
    assert_eq!(r["result"]["structuredContent"]["text"], r#"{"text":""#, "{r}");
    // Nobody else reads it.
    let mut other = RawClient::start(&f.server);
    other.initialize("someone-else", json!({})).await;
    let read = other.request("resources/read", json!({ "uri": uri })).await;
    assert_eq!(read["error"]["code"], -32002, "{read}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_documentation_is_served_as_resources() {
    let f = Fixture::new(ExposureMode::Full, ServerOptions::default());
    let mut c = RawClient::start(&f.server);
    c.initialize("docs-test", json!({})).await;
    let list = c.request("resources/list", json!({})).await;
    let resources = list["result"]["resources"].as_array().unwrap_or_else(|| panic!("{list}"));
    let echo = resources
        .iter()
        .find(|r| r["uri"] == "quiver://tools/marker_echo")
        .unwrap_or_else(|| panic!("no doc of marker_echo: {list}"));
    assert_eq!(echo["mimeType"], "text/markdown");
    let templates = c.request("resources/templates/list", json!({})).await;
    let uris: Vec<&str> = templates["result"]["resourceTemplates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["uriTemplate"].as_str().unwrap())
        .collect();
    assert_eq!(uris, ["quiver://tools/{name}", "quiver://results/{handle}"]);
    let read = c.request("resources/read", json!({ "uri": "quiver://tools/marker_echo" })).await;
    let doc = read["result"]["contents"][0]["text"].as_str().unwrap_or_else(|| panic!("{read}"));
    assert!(doc.starts_with("# marker_echo"), "{doc}");
    assert!(doc.contains("Returns its input text"), "{doc}");
    assert!(doc.contains("\"text\""), "the input schema is in the doc: {doc}");
    let read = c.request("resources/read", json!({ "uri": "quiver://tools/no_such_tool" })).await;
    assert_eq!(read["error"]["code"], -32002, "{read}");
    assert!(read["error"]["message"].as_str().unwrap().contains("resources/list"), "{read}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_that_cannot_be_cut_to_its_schema_carries_no_structured_content() {
    // Only lower-case letters: a cut marker cannot match.
    let schema = "\n    output_schema:\n      type: object\n      properties:\n        text: {type: string, pattern: '^[a-z]*$'}\n        version: {type: string}\n      required: [text, version]";
    let f = small_results(256, schema);
    let mut c = RawClient::start(&f.server);
    c.initialize("resources-test", json!({})).await;
    let r = c.call("marker_echo", json!({ "text": "x".repeat(500) })).await;
    let result = &r["result"];
    // A tool with an output schema must send structured content unless the result is an
    // error: so it is one, saying why, with a preview and the link.
    assert!(result.get("structuredContent").is_none(), "{r}");
    assert_eq!(result["isError"], true, "{r}");
    let t = &result["_meta"][format!("{META}truncation")];
    assert_eq!(t["structured"], false, "{r}");
    assert!(t["reason"].as_str().unwrap().contains("pattern"), "{r}");
    let texts: Vec<&str> = result["content"].as_array().unwrap().iter().filter_map(|b| b["text"].as_str()).collect();
    assert!(texts.iter().any(|t| t.starts_with(r#"{"text":"xxx"#)), "{r}");
    assert!(result["content"].as_array().unwrap().iter().any(|b| b["type"] == "resource_link"), "{r}");
}
