//! The streamable HTTP transport: origins, malformed bodies, and sessions that do not disturb
//! each other.

use std::net::SocketAddr;

use quiver_catalog::ExposureMode;
use quiver_mcp::{HttpOptions, ServerOptions};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::support::{Fixture, header, http, messages};

const JSON: (&str, &str) = ("Content-Type", "application/json");
const ACCEPT: (&str, &str) = ("Accept", "application/json, text/event-stream");

async fn start(f: &Fixture) -> (SocketAddr, CancellationToken) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let opts = HttpOptions {
        allowed_origins: vec!["https://app.example.com".into()],
        shutdown: shutdown.clone(),
        ..HttpOptions::default()
    };
    tokio::spawn(quiver_mcp::serve_http_on(f.server.clone(), listener, opts));
    (addr, shutdown)
}

fn initialize(id: i64, client: &str) -> Vec<u8> {
    json!({
        "jsonrpc": "2.0", "id": id, "method": "initialize",
        "params": { "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": client, "version": "1" } }
    })
    .to_string()
    .into_bytes()
}

/// Initializes a session; returns its id.
async fn open_session(addr: SocketAddr, client: &str) -> String {
    let (status, headers, body) = http(addr, "POST", &[JSON, ACCEPT], &initialize(1, client)).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let session = header(&headers, "mcp-session-id").expect("session id").to_owned();
    let initialized = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }).to_string();
    let (status, _, _) =
        http(addr, "POST", &[JSON, ACCEPT, ("Mcp-Session-Id", &session)], initialized.as_bytes()).await;
    assert_eq!(status, 202);
    session
}

/// One request in a session; returns the JSON-RPC response (skipping notifications).
async fn rpc(addr: SocketAddr, session: &str, id: i64, method: &str, params: Value) -> Value {
    let body = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }).to_string();
    let (status, _, body) = http(addr, "POST", &[JSON, ACCEPT, ("Mcp-Session-Id", session)], body.as_bytes()).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    messages(&body).into_iter().find(|m| m.get("id") == Some(&json!(id))).expect("a response")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origins_and_hosts_are_checked() {
    let f = Fixture::new(ExposureMode::Full, ServerOptions::default());
    let (addr, shutdown) = start(&f).await;
    let port = addr.port();
    for (origin, expected) in [
        ("https://evil.example.com", 403),
        ("http://localhost.evil.com", 403),
        ("null", 403),
        (&*format!("http://127.0.0.1:{port}"), 200),
        (&*format!("http://localhost:{port}"), 200),
        ("https://app.example.com", 200),
    ] {
        let (status, _, body) =
            http(addr, "POST", &[JSON, ACCEPT, ("Origin", origin)], &initialize(1, "origin-test")).await;
        assert_eq!(status, expected, "Origin {origin}: {}", String::from_utf8_lossy(&body));
    }
    // DNS rebinding: a foreign Host name is refused too.
    let (status, _, _) =
        http(addr, "POST", &[JSON, ACCEPT, ("Host", "evil.example.com")], &initialize(1, "host-test")).await;
    assert_eq!(status, 403);
    // No Origin at all (a non-browser client) is fine.
    let (status, _, _) = http(addr, "POST", &[JSON, ACCEPT], &initialize(1, "no-origin")).await;
    assert_eq!(status, 200);
    shutdown.cancel();
}

/// Bodies are parsed once, by rmcp; the errors of the ones it refuses keep their JSON-RPC form
/// whichever path refused them: no session yet, an unknown session, or a live one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_rmcp_refuses_still_get_json_rpc_errors() {
    let f = Fixture::new(ExposureMode::Full, ServerOptions::default());
    let (addr, shutdown) = start(&f).await;
    let live = open_session(addr, "live").await;
    let bad_initialize = br#"{"jsonrpc":"2.0","id":5,"method":"initialize","params":{}}"#;
    let bad_call = br#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":{}}}"#;
    for (session, body, id) in [
        (None, &bad_initialize[..], 5),
        (Some("no-such-session"), &bad_call[..], 6),
        (Some(live.as_str()), &bad_call[..], 6),
        (None, &b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":"[..], -1),
    ] {
        let mut headers = vec![JSON, ACCEPT];
        if let Some(s) = session {
            headers.push(("Mcp-Session-Id", s));
        }
        let (status, h, reply) = http(addr, "POST", &headers, body).await;
        let text = String::from_utf8_lossy(&reply);
        assert_eq!(status, 400, "{session:?} {text}");
        assert_eq!(header(&h, "content-type"), Some("application/json"), "{text}");
        let m: Value = serde_json::from_slice(&reply).expect("a JSON-RPC error body");
        let (code, want_id) = if id < 0 { (-32700, Value::Null) } else { (-32602, json!(id)) };
        assert_eq!(m["error"]["code"], code, "{m}");
        assert_eq!(m["id"], want_id, "{m}");
    }
    // The live session never saw the refused call and still answers.
    let r = rpc(addr, &live, 8, "tools/list", json!({})).await;
    assert!(r["result"]["tools"].as_array().is_some_and(|t| !t.is_empty()), "{r}");
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_bodies_get_json_rpc_errors_and_other_sessions_are_unaffected() {
    let options = ServerOptions { max_message_bytes: 2048, ..ServerOptions::default() };
    let f = Fixture::new(ExposureMode::Full, options);
    let (addr, shutdown) = start(&f).await;
    let good = open_session(addr, "well-behaved").await;
    let bad = open_session(addr, "misbehaving").await;

    let too_big = format!(r#"{{"jsonrpc":"2.0","id":9,"method":"ping","params":{{"pad":"{}"}}}}"#, "x".repeat(4000));
    for (body, status, code) in [
        ("{\"jsonrpc\":", 400, -32700),
        ("not json at all", 400, -32700),
        ("[]", 400, -32600),
        ("{\"jsonrpc\":\"2.0\",\"id\":3}", 400, -32600),
        ("{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":{\"name\":[]}}", 400, -32602),
        (too_big.as_str(), 413, -32600),
    ] {
        let (got, headers, reply) =
            http(addr, "POST", &[JSON, ACCEPT, ("Mcp-Session-Id", &bad)], body.as_bytes()).await;
        assert_eq!(got, status, "{body:.60} -> {}", String::from_utf8_lossy(&reply));
        assert_eq!(header(&headers, "content-type"), Some("application/json"));
        let m: Value = serde_json::from_slice(&reply).expect("a JSON-RPC error body");
        assert_eq!(m["error"]["code"], code, "{m}");
        assert!(m.get("id").is_some(), "an error reply always has an id (null when unreadable): {m}");
        if status == 413 {
            // The unread rest of the body must not be taken for the next request.
            assert_eq!(header(&headers, "connection"), Some("close"), "{headers:?}");
        }
        // Interleaved: the other session is served normally.
        let r = rpc(addr, &good, 10, "tools/call", json!({ "name": "test_simple_text", "arguments": {} })).await;
        assert_eq!(r["result"]["content"][0]["text"], "This is a simple text response for testing.", "{r}");
    }
    // Protocol-level errors inside the misbehaving session, which keeps working.
    let r = rpc(addr, &bad, 11, "no/such/method", json!({})).await;
    assert_eq!(r["error"]["code"], -32601, "{r}");
    let r = rpc(addr, &bad, 12, "tools/list", json!({ "cursor": "garbage" })).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let r = rpc(addr, &bad, 13, "tools/list", json!({})).await;
    assert!(r["result"]["tools"].as_array().is_some_and(|t| !t.is_empty()), "{r}");
    // An unknown session id is 404; a request without one that is not initialize is refused.
    let (status, _, _) = http(
        addr,
        "POST",
        &[JSON, ACCEPT, ("Mcp-Session-Id", "no-such-session")],
        br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
    )
    .await;
    assert_eq!(status, 404);
    let (status, _, _) =
        http(addr, "POST", &[JSON, ACCEPT], br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#).await;
    assert!((400..500).contains(&status), "{status}");
    // DELETE ends a session once; an unknown or already deleted one is 404.
    let (status, _, _) = http(addr, "DELETE", &[("Mcp-Session-Id", &bad)], b"").await;
    assert!((200..300).contains(&status), "{status}");
    let (status, _, _) = http(addr, "DELETE", &[("Mcp-Session-Id", &bad)], b"").await;
    assert_eq!(status, 404);
    let (status, _, _) = http(addr, "DELETE", &[("Mcp-Session-Id", "no-such-session")], b"").await;
    assert_eq!(status, 404);
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_and_logs_travel_with_the_call() {
    let f = Fixture::new(ExposureMode::Full, ServerOptions::default());
    let (addr, shutdown) = start(&f).await;
    let session = open_session(addr, "progress-over-http").await;
    let body = json!({
        "jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": { "name": "test_tool_with_progress", "arguments": {}, "_meta": { "progressToken": 7 } }
    })
    .to_string();
    let (status, _, body) = http(addr, "POST", &[JSON, ACCEPT, ("Mcp-Session-Id", &session)], body.as_bytes()).await;
    assert_eq!(status, 200);
    let all = messages(&body);
    let progress: Vec<f64> = all
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .map(|m| m["params"]["progress"].as_f64().unwrap())
        .collect();
    assert_eq!(progress, [0.0, 50.0, 100.0], "{all:?}");
    // The response comes last on the call's stream.
    assert_eq!(all.last().unwrap()["id"], 5, "{all:?}");
    shutdown.cancel();
}
