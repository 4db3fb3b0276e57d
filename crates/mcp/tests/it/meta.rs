//! The meta tools' arguments: schemas derived from their Rust types, checked by the same
//! validator as plugin tools, with the same repairable errors.

use quiver_catalog::ExposureMode;
use quiver_mcp::ServerOptions;
use serde_json::{Value, json};

use crate::support::{Fixture, RawClient};

fn first_error(r: &Value) -> &Value {
    assert_eq!(r["result"]["isError"], true, "{r}");
    &r["result"]["_meta"]["io.github.quiver/error"]["details"]["errors"][0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn meta_tool_arguments_are_validated_against_their_advertised_schemas() {
    let f = Fixture::new(ExposureMode::Hybrid, ServerOptions::default());
    let mut c = RawClient::start(&f.server);
    c.initialize("meta-test", json!({})).await;
    let tools = c.list_all().await;
    let schema_of = |name: &str| tools.iter().find(|t| t["name"] == name).unwrap()["inputSchema"].clone();
    let search = schema_of("tool_search");
    assert_eq!(search["required"], json!(["query"]), "{search}");
    assert_eq!(search["properties"]["limit"]["maximum"], 50, "{search}");
    let list = schema_of("list_tools");
    assert!(list["properties"]["mutating"].is_object(), "list_tools advertises its filters: {list}");
    assert!(list["properties"].get("scopes").is_none(), "{list}");

    let cases = [
        ("tool_search", json!({}), "/query", "add `query`"),
        ("tool_search", json!({"query": "x", "limit": 0}), "/limit", ""),
        ("tool_search", json!({"query": "x", "limit": 500}), "/limit", ""),
        ("tool_search", json!({"query": "x", "limit": 1000}), "/limit", ""),
        ("tool_search", json!({"query": "x", "detail": "huge"}), "/detail", ""),
        ("tool_search", json!({"query": 5}), "/query", "pass a string here"),
        ("list_tools", json!({"scopes": ["a"]}), "/scopes", ""),
        ("list_tools", json!({"limit": 51}), "/limit", ""),
        ("list_tools", json!({"load": true}), "/load", ""),
    ];
    for (tool, args, pointer, hint) in cases {
        let r = c.call(tool, args.clone()).await;
        let e = first_error(&r);
        assert_eq!(e["pointer"], pointer, "{tool} {args}: {r}");
        assert!(e["expected"].is_string() && e["got"].is_string(), "{tool} {args}: {r}");
        if !hint.is_empty() {
            assert_eq!(e["hint"], hint, "{tool} {args}: {r}");
        }
    }
    // Nothing was loaded by the refused searches.
    assert_eq!(c.list_all().await.len(), tools.len());
    // Valid calls work, filters included.
    let r = c.call("list_tools", json!({"mutating": false, "limit": 50})).await;
    assert_ne!(r["result"]["isError"], true, "{r}");
    let r = c.call("tool_search", json!({"query": "echo text", "limit": 1, "detail": "full"})).await;
    assert_ne!(r["result"]["isError"], true, "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn surfaces_list_tools_and_tool_search_are_counted() {
    let f = Fixture::new(ExposureMode::Hybrid, ServerOptions::default());
    let mut c = RawClient::start(&f.server);
    c.initialize("counting-test", json!({})).await;
    let tools = c.list_all().await;
    c.call("list_tools", json!({})).await;
    c.call("tool_search", json!({"query": "echo text"})).await;
    c.call("tool_search", json!({"limit": 0})).await;
    let s = f.router.telemetry().snapshot();
    assert!(s.surfaces.n_surfaces >= 1, "{:?}", s.surfaces);
    assert_eq!(s.surfaces.last_total as usize, tools.len(), "{:?}", s.surfaces);
    assert_eq!(s.generic.list_calls, 1);
    assert_eq!(s.generic.search_calls, 2);
    assert_eq!(s.generic.search_failures, 1);
}
