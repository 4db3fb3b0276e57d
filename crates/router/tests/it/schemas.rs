//! The handwritten contract schemas (`schemas/tool-request.schema.json`,
//! `schemas/tool-response.schema.json`) against the Rust types of `quiver-abi` and against what
//! the router really sends and answers.

use std::sync::{Arc, Mutex};

use quiver_abi::{
    AgentContext, InvocationPolicies, Status, ToolError, ToolRequest, ToolResponse, contract::MemoryWrite,
};
use quiver_catalog::{CallSink, Catalog, ConflictPolicy, ToolBackend};
use quiver_router::{Router, RouterSettings};
use serde_json::{Map, Value, json};

use crate::{everyone, support};

fn schema(name: &str) -> (Value, jsonschema::Validator) {
    let path = support::repo_root().join("schemas").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let v: Value = serde_json::from_str(&text).unwrap();
    let compiled = quiver_catalog::compile_schema(&v).unwrap_or_else(|e| panic!("{name} does not compile: {e}"));
    (v, compiled)
}

#[track_caller]
fn accepts(v: &jsonschema::Validator, value: &Value) {
    let errors: Vec<String> = v.iter_errors(value).map(|e| format!("{}: {e}", e.instance_path())).collect();
    assert!(errors.is_empty(), "{value}\n{errors:#?}");
}

/// Every key a fully populated value serializes is described by the schema (no silent drift).
#[track_caller]
fn covers(schema: &Value, value: &Value, at: &str) {
    let (Some(props), Value::Object(m)) = (schema.get("properties").and_then(Value::as_object), value) else { return };
    for (k, v) in m {
        let s = props.get(k).unwrap_or_else(|| panic!("schema lacks {at}/{k}"));
        if at.is_empty() && k == "content" {
            // MCP content blocks are open-ended (text, image, audio, resource...): only `type` is described.
            continue;
        }
        covers(s, v, &format!("{at}/{k}"));
        if let (Some(items), Value::Array(a)) = (s.get("items"), v)
            && let Some(first) = a.first()
        {
            covers(items, first, &format!("{at}/{k}/0"));
        }
    }
}

fn full_request() -> ToolRequest {
    ToolRequest {
        request_id: "k3f9zq-1".into(),
        tool_id: "read_file".into(),
        tool_version: "1.2.3".into(),
        timestamp: 1_700_000_000_000,
        agent_context: AgentContext {
            session_id: "s".into(),
            client: "claude".into(),
            mode: "agent".into(),
            scopes: vec!["fs:read".into()],
        },
        inputs: json!({"path": "a.txt"}),
        invocation_policies: InvocationPolicies {
            timeout_ms: 30_000,
            max_result_bytes: 65_536,
            confirmed: true,
            action: Some("read".into()),
        },
        config: json!({"root": "/tmp"}),
        memory_snippet: Some("last file: b.txt".into()),
        secrets: quiver_abi::Secrets([("API_TOKEN".to_owned(), "v".to_owned())].into()),
    }
}

fn full_response() -> ToolResponse {
    let mut telemetry = Map::new();
    telemetry.insert("bytes_read".into(), json!(12));
    ToolResponse {
        status: Status::Ok,
        outputs: json!({"text": "hi"}),
        content: vec![json!({"type": "text", "text": "hi"})],
        observations: vec!["note".into()],
        memory_writes: vec![MemoryWrite { key: "k".into(), value: json!([1]) }],
        telemetry,
        error: None,
    }
}

#[test]
fn the_request_schema_accepts_the_rust_type_and_rejects_broken_requests() {
    let (s, v) = schema("tool-request.schema.json");
    let full = serde_json::to_value(full_request()).unwrap();
    accepts(&v, &full);
    covers(&s, &full, "");
    let minimal = ToolRequest {
        request_id: "r".into(),
        tool_id: "t".into(),
        tool_version: "0.1.0".into(),
        inputs: json!({}),
        ..ToolRequest::default()
    };
    accepts(&v, &serde_json::to_value(minimal).unwrap());
    for (what, broken) in [
        ("no request_id", json!({"tool_id": "t", "tool_version": "1", "timestamp": 1})),
        ("bad tool_id", json!({"request_id": "r", "tool_id": "Read File", "tool_version": "1", "timestamp": 1})),
        (
            "inputs not an object",
            json!({"request_id": "r", "tool_id": "t", "tool_version": "1", "timestamp": 1, "inputs": [1]}),
        ),
        ("negative timestamp", json!({"request_id": "r", "tool_id": "t", "tool_version": "1", "timestamp": -1})),
    ] {
        assert!(!v.is_valid(&broken), "{what} was accepted");
    }
}

#[test]
fn the_response_schema_accepts_the_rust_type_and_rejects_broken_responses() {
    let (s, v) = schema("tool-response.schema.json");
    let full = serde_json::to_value(full_response()).unwrap();
    accepts(&v, &full);
    covers(&s, &full, "");
    let err =
        ToolResponse::error(ToolError::invalid("bad").retryable().with_details(json!({"errors": [{"pointer": "/a"}]})));
    let err = serde_json::to_value(err).unwrap();
    accepts(&v, &err);
    covers(&s, &err, "");
    accepts(&v, &serde_json::to_value(ToolResponse { status: Status::Partial, ..full_response() }).unwrap());
    accepts(&v, &serde_json::to_value(ToolResponse::ok(Value::Null)).unwrap());
    for (what, broken) in [
        ("unknown status", json!({"status": "weird"})),
        ("error without error", json!({"status": "error"})),
        ("ok with error", json!({"status": "ok", "error": {"code": "x", "message": "m"}})),
        ("error without message", json!({"status": "error", "error": {"code": "x"}})),
        ("memory write without key", json!({"status": "ok", "memory_writes": [{"value": 1}]})),
        ("content block without type", json!({"status": "ok", "content": [{"text": "x"}]})),
    ] {
        assert!(!v.is_valid(&broken), "{what} was accepted");
    }
}

/// Wraps the real backend and keeps every request the router sends.
struct Capture {
    inner: Arc<dyn ToolBackend>,
    seen: Mutex<Vec<String>>,
}

impl ToolBackend for Capture {
    fn invoke(&self, tool: &str, request: &str, sink: Arc<dyn CallSink>) -> String {
        self.seen.lock().unwrap().push(request.to_owned());
        self.inner.invoke(tool, request, sink)
    }
}

/// A router over the marker plugin whose backend keeps every request it is sent.
fn capturing_router() -> (support::Plugins, Router, Arc<Capture>) {
    let (plugins, host) = support::marker_host();
    let plugin = host.catalog().plugins()[0].clone();
    let capture = Arc::new(Capture { inner: plugin.backend.clone(), seen: Mutex::new(Vec::new()) });
    let entry = support::entry_with(&plugin, plugin.manifest.clone(), capture.clone());
    let catalog = Arc::new(Catalog::build(vec![Arc::new(entry)], ConflictPolicy::Error).unwrap());
    (plugins, Router::new(Arc::new(catalog), RouterSettings::default()), capture)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_router_sends_and_answers_conforms_to_the_schemas() {
    let (_p, router, capture) = capturing_router();
    let (_, request_schema) = schema("tool-request.schema.json");
    let (_, response_schema) = schema("tool-response.schema.json");
    let calls = [
        ("marker_echo", json!({"text": "hi"})),
        ("marker_yell", json!({"text": "hi"})),
        ("marker_big", json!({"bytes": 4000})),
        ("marker_fail", json!({"fail": true})),
        ("marker_echo", json!({"text": 1})),
        ("marker_missing", json!({})),
        ("marker_panic", json!({"text": "x"})),
    ];
    for (name, args) in calls {
        let o = router.call(quiver_router::Call::new(name, args, everyone())).await;
        accepts(&response_schema, &serde_json::to_value(&o.response).unwrap());
    }
    let seen = capture.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 5, "five calls reached the plugin");
    for r in &seen {
        let v: Value = serde_json::from_str(r).unwrap();
        accepts(&request_schema, &v);
        let typed: ToolRequest = serde_json::from_value(v).unwrap();
        assert_eq!(typed.agent_context.session_id, "test-session");
    }
    let yell: ToolRequest = serde_json::from_str(&seen[1]).unwrap();
    assert_eq!((yell.tool_id.as_str(), yell.invocation_policies.action.as_deref()), ("marker_text", Some("shout")));
    assert_eq!(yell.inputs, json!({"text": "hi", "action": "shout"}));
    assert_eq!(yell.invocation_policies.timeout_ms, 30_000);
}

/// The router writes the request by hand (keys as literals, the tool's name and version escaped
/// once per tool): byte for byte what `ToolRequest`'s derived serialization writes, with and
/// without an action, for a caller whose strings need escaping.
#[tokio::test]
async fn the_request_the_router_writes_is_what_tool_request_serializes_to() {
    let (_p, router, capture) = capturing_router();
    let mut caller = everyone();
    caller.client = "a \"quoted\" client\n".into();
    caller.mode = "plan/ü".into();
    for (name, args) in [("marker_echo", json!({"text": "tab\there"})), ("marker_yell", json!({"text": "hi"}))] {
        let o = router.call(quiver_router::Call::new(name, args, caller.clone())).await;
        assert_eq!(o.response.status, Status::Ok, "{:?}", o.response.error);
    }
    let seen = capture.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    for r in &seen {
        let typed: ToolRequest = serde_json::from_str(r).unwrap();
        assert_eq!(typed.agent_context.client, "a \"quoted\" client\n");
        assert_eq!(&serde_json::to_string(&typed).unwrap(), r);
    }
}
