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
    let shutdown = CancellationToken::new();
    let opts = HttpOptions {
        allowed_origins: vec!["https://app.example.com".into()],
        shutdown: shutdown.clone(),
        ..HttpOptions::default()
    };
    (serve(f, opts).await.0, shutdown)
}

/// Serves `f` with `opts` on a free loopback port: the address, and the server's task.
async fn serve(f: &Fixture, opts: HttpOptions) -> (SocketAddr, tokio::task::JoinHandle<std::io::Result<()>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().unwrap();
    (addr, tokio::spawn(quiver_mcp::serve_http_on(f.server.clone(), listener, opts)))
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
        // An entry without a port names the scheme's default port (RFC 6454), not every port.
        ("https://app.example.com:443", 200),
        ("https://app.example.com:8443", 403),
        ("http://app.example.com", 403),
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

/// What rmcp refuses in plain text (no session id, an unknown session, a foreign Origin or
/// Host, a wrong method) is answered as a JSON-RPC error under the request's id, naming the
/// header and the fix; the status stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_and_origin_refusals_are_json_rpc_errors_that_say_what_to_do() {
    let f = Fixture::new(ExposureMode::Full, ServerOptions::default());
    let (addr, shutdown) = start(&f).await;
    let list = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list"}).to_string();
    // (method, headers, body, status, what the message says)
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, &'a [u8], u16, &'a str);
    let cases: [Case<'_>; 5] = [
        ("POST", vec![JSON, ACCEPT], list.as_bytes(), 400, "Mcp-Session-Id"),
        ("POST", vec![JSON, ACCEPT, ("Mcp-Session-Id", "nope")], list.as_bytes(), 404, "initialize"),
        ("GET", vec![ACCEPT, ("Mcp-Session-Id", "nope")], b"", 404, "initialize"),
        (
            "POST",
            vec![JSON, ACCEPT, ("Origin", "https://evil.example.com")],
            &initialize(1, "o"),
            403,
            "server.allowed_origins",
        ),
        ("POST", vec![JSON, ACCEPT, ("Host", "evil.example.com")], &initialize(1, "h"), 403, "--allow-host"),
    ];
    for (method, headers, body, status, hint) in cases {
        let (got, response_headers, answer) = http(addr, method, &headers, body).await;
        let text = String::from_utf8_lossy(&answer);
        assert_eq!(got, status, "{method} {headers:?}: {text}");
        assert_eq!(header(&response_headers, "content-type"), Some("application/json"), "{method} {headers:?}: {text}");
        let v: Value = serde_json::from_slice(&answer).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert!(v["error"]["message"].as_str().is_some_and(|m| m.contains(hint)), "{method} {headers:?}: {v}");
        if method == "POST" && body == list.as_bytes() {
            assert_eq!(v["id"], 5, "{v}");
        }
    }
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
        ("[{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"ping\"}]", 400, -32600),
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
        if body.starts_with('[') {
            // The advice fits the transport: over HTTP a message is a POST, not a line.
            let text = m["error"]["message"].as_str().unwrap();
            assert!(text.contains("batches are not supported; send one message per POST"), "{m}");
            assert!(!text.contains("line"), "{m}");
        }
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

/// Over HTTP as on stdio: a list request's `cursor` that is not a string is invalid params
/// naming the field (it used to answer the first page), and a message with `method` and
/// `result` or `error` is an invalid request (it used to be invalid params); both under the
/// request's id (`null` without one), with status 400, and the session goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_cursors_and_messages_with_method_and_result_are_refused_saying_what_is_wrong() {
    let f = Fixture::new(ExposureMode::Full, ServerOptions { page_size: 4, ..ServerOptions::default() });
    let (addr, shutdown) = start(&f).await;
    let session = open_session(addr, "refusals").await;
    let headers = [JSON, ACCEPT, ("Mcp-Session-Id", session.as_str())];
    let cursor = "`cursor` must be a string (the opaque `nextCursor` of a previous page; leave it out for the first page), not a number";
    let not_both = "(with `method`) or a response (with `result` or `error`), not both";
    for (body, id, code, says) in [
        (json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": {"cursor": 5}}), json!(5), -32602, cursor),
        (json!({"jsonrpc": "2.0", "id": 6, "method": "ping", "result": {}}), json!(6), -32600, not_both),
        (
            json!({"jsonrpc": "2.0", "id": "e", "method": "tools/list", "params": {}, "error": {"code": 1, "message": "m"}}),
            json!("e"),
            -32600,
            not_both,
        ),
        (json!({"jsonrpc": "2.0", "method": "notifications/initialized", "result": {}}), Value::Null, -32600, not_both),
    ] {
        let (status, h, reply) = http(addr, "POST", &headers, body.to_string().as_bytes()).await;
        let text = String::from_utf8_lossy(&reply);
        assert_eq!(status, 400, "{body} -> {text}");
        assert_eq!(header(&h, "content-type"), Some("application/json"), "{text}");
        let m: Value = serde_json::from_slice(&reply).expect("a JSON-RPC error body");
        assert_eq!((&m["error"]["code"], &m["id"]), (&json!(code), &id), "{body} -> {m}");
        assert!(m["error"]["message"].as_str().is_some_and(|t| t.contains(says)), "{body} -> {m}");
    }
    for params in [json!({}), json!({ "cursor": null })] {
        let r = rpc(addr, &session, 7, "tools/list", params.clone()).await;
        assert_eq!(r["result"]["tools"].as_array().map(Vec::len), Some(4), "{params} -> {r}");
    }
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

/// The event ids of an SSE body (`id:` lines).
fn event_ids(body: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(body).lines().filter_map(|l| l.strip_prefix("id:")).map(|i| i.trim().to_owned()).collect()
}

fn call_body(id: i64, name: &str, arguments: Value, meta: Option<Value>) -> Vec<u8> {
    let mut params = json!({ "name": name, "arguments": arguments });
    if let Some(meta) = meta {
        params["_meta"] = meta;
    }
    json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params }).to_string().into_bytes()
}

/// A `tools/call` is served beside rmcp's session worker (`http_sessions.rs`): the answer is
/// the same, and a ready one comes as the stream's one event, without an event id. A call
/// with a `progressToken` still goes through the worker, whose streams start with a priming
/// event (`N/0`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_are_served_in_place_with_the_answer_the_worker_gives() {
    let f = Fixture::new(ExposureMode::Full, ServerOptions::default());
    let (addr, shutdown) = start(&f).await;
    let session = open_session(addr, "in-place").await;
    let headers = [JSON, ACCEPT, ("Mcp-Session-Id", session.as_str())];
    let before = quiver_mcp::http_in_place_calls();
    let (status, _, in_place) =
        http(addr, "POST", &headers, &call_body(3, "marker_echo", json!({"text": "hi"}), None)).await;
    assert_eq!(status, 200);
    assert!(quiver_mcp::http_in_place_calls() > before, "the call was not served in place");
    assert!(event_ids(&in_place).is_empty(), "{}", String::from_utf8_lossy(&in_place));
    let (status, _, worker) = http(
        addr,
        "POST",
        &headers,
        &call_body(4, "marker_echo", json!({"text": "hi"}), Some(json!({"progressToken": 1}))),
    )
    .await;
    assert_eq!(status, 200);
    let ids = event_ids(&worker);
    assert!(ids.first().is_some_and(|i| i.ends_with("/0") && !i.starts_with('q')), "{ids:?}");
    let (a, b) = (&messages(&in_place)[0], &messages(&worker)[0]);
    assert_eq!((a["id"].clone(), b["id"].clone()), (json!(3), json!(4)));
    assert_eq!(a["result"]["isError"], false, "{a}");
    assert_eq!(a["result"]["content"], b["result"]["content"], "{a} / {b}");
    assert_eq!(a["result"]["structuredContent"], b["result"]["structuredContent"], "{a} / {b}");
    // Errors too: an unknown tool is a JSON-RPC error either way.
    let (_, _, unknown) = http(addr, "POST", &headers, &call_body(5, "no_such_tool", json!({}), None)).await;
    assert_eq!(messages(&unknown)[0]["error"]["code"], -32602, "{}", String::from_utf8_lossy(&unknown));
    shutdown.cancel();
}

/// Reads a response's head and body until `until` appears in what was read, then drops the
/// connection (a client losing it mid-stream).
async fn read_until_then_drop(addr: SocketAddr, headers: &[(&str, &str)], body: &[u8], until: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let mut req = format!("POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\n", body.len());
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    stream.write_all(req.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains(until) {
        let n = tokio::time::timeout(std::time::Duration::from_secs(20), stream.read(&mut buf))
            .await
            .expect("in time")
            .expect("read");
        assert!(n > 0, "closed before `{until}`: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&seen).into_owned()
}

/// An in-place call not ready at once keeps running when its connection drops, and a client
/// resuming with `Last-Event-ID` gets its answer; a cancelled one is never answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_in_place_call_resumes_and_a_cancelled_one_is_never_answered() {
    let f = Fixture::new(ExposureMode::Full, ServerOptions::default());
    let (addr, shutdown) = start(&f).await;
    let session = open_session(addr, "in-place-resume").await;
    let headers = [JSON, ACCEPT, ("Mcp-Session-Id", session.as_str())];
    let before = quiver_mcp::http_in_place_calls();
    let seen =
        read_until_then_drop(addr, &headers, &call_body(7, "marker_sleep", json!({"ms": 400}), None), "id: q").await;
    assert!(quiver_mcp::http_in_place_calls() > before, "the call was not served in place");
    let priming = event_ids(seen.split_once("\r\n\r\n").map_or(b"" as &[u8], |(_, b)| b.as_bytes()));
    let primed = priming.iter().find(|i| i.starts_with('q')).expect("a priming event id").clone();
    assert!(primed.ends_with("/0"), "{primed}");
    let (status, _, body) =
        http(addr, "GET", &[ACCEPT, ("Mcp-Session-Id", session.as_str()), ("Last-Event-ID", primed.as_str())], b"")
            .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let answer = messages(&body);
    assert_eq!(answer.len(), 1, "{answer:?}");
    assert_eq!(answer[0]["id"], 7);
    assert_eq!(answer[0]["result"]["isError"], false, "{answer:?}");
    assert!(
        event_ids(&body).iter().any(|i| i.starts_with('q') && i.ends_with("/1")),
        "{}",
        String::from_utf8_lossy(&body)
    );

    // Cancelled: the router records it, and its stream ends without an answer.
    let served = quiver_mcp::http_in_place_calls();
    let slow = {
        let session = session.clone();
        tokio::spawn(async move {
            let headers = [JSON, ACCEPT, ("Mcp-Session-Id", session.as_str())];
            http(addr, "POST", &headers, &call_body(8, "marker_sleep", json!({"ms": 20000}), None)).await
        })
    };
    let start = std::time::Instant::now();
    while quiver_mcp::http_in_place_calls() == served {
        assert!(start.elapsed() < std::time::Duration::from_secs(10), "the slow call did not start");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // (Counted as it starts: leave it a moment to be kept as running.)
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let cancel = json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":8,"reason":"test"}})
        .to_string();
    let (status, _, _) = http(addr, "POST", &headers, cancel.as_bytes()).await;
    assert_eq!(status, 202);
    let (status, _, body) = slow.await.unwrap();
    assert_eq!(status, 200);
    assert!(messages(&body).iter().all(|m| m.get("id") != Some(&json!(8))), "{}", String::from_utf8_lossy(&body));
    assert_eq!(f.router.telemetry().snapshot().errors.get("cancelled").copied(), Some(1));
    shutdown.cancel();
}

/// A graceful shutdown answers the calls still running before it ends the sessions (it used to
/// end their response streams at once, with no answer), and then returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_answers_the_calls_still_running() {
    let f = Fixture::new(ExposureMode::Full, ServerOptions::default());
    let shutdown = CancellationToken::new();
    let (addr, served) = serve(&f, HttpOptions { shutdown: shutdown.clone(), ..HttpOptions::default() }).await;
    let session = open_session(addr, "shutdown").await;
    let call = tokio::spawn(async move {
        let headers = [JSON, ACCEPT, ("Mcp-Session-Id", session.as_str())];
        http(addr, "POST", &headers, &call_body(3, "marker_sleep", json!({"ms": 800}), None)).await
    });
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    shutdown.cancel();
    let (status, _, body) = call.await.unwrap();
    let text = String::from_utf8_lossy(&body);
    assert_eq!(status, 200, "{text}");
    let answer = messages(&body).into_iter().find(|m| m["id"] == 3);
    assert!(answer.is_some_and(|m| m["result"]["isError"] == false), "no answer before the shutdown: {text}");
    let ended = tokio::time::timeout(std::time::Duration::from_secs(20), served).await;
    assert!(matches!(ended, Ok(Ok(Ok(())))), "the server did not end after its calls: {ended:?}");
}

/// Calls through the session's worker (here a `tools/call` with a `progressToken`) get the
/// same grace at shutdown as calls served in place: answered before the sessions end (their
/// streams used to end at once, with no answer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_answers_the_calls_through_the_session_worker_too() {
    let f = Fixture::new(ExposureMode::Full, ServerOptions::default());
    let shutdown = CancellationToken::new();
    let (addr, served) = serve(&f, HttpOptions { shutdown: shutdown.clone(), ..HttpOptions::default() }).await;
    let session = open_session(addr, "shutdown-worker").await;
    let call = tokio::spawn(async move {
        let headers = [JSON, ACCEPT, ("Mcp-Session-Id", session.as_str())];
        let body = call_body(3, "marker_sleep", json!({"ms": 800}), Some(json!({"progressToken": "p"})));
        http(addr, "POST", &headers, &body).await
    });
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    shutdown.cancel();
    let (status, _, body) = call.await.unwrap();
    let text = String::from_utf8_lossy(&body);
    assert_eq!(status, 200, "{text}");
    // The worker's stream (its event ids are rmcp's, not `q...`).
    assert!(event_ids(&body).first().is_some_and(|i| !i.starts_with('q')), "{text}");
    let answer = messages(&body).into_iter().find(|m| m["id"] == 3);
    assert!(answer.is_some_and(|m| m["result"]["isError"] == false), "no answer before the shutdown: {text}");
    let ended = tokio::time::timeout(std::time::Duration::from_secs(20), served).await;
    assert!(matches!(ended, Ok(Ok(Ok(())))), "the server did not end after its calls: {ended:?}");
}

/// The grace is a limit: a call through the worker still running when it is over does not
/// keep the server from ending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_waits_for_worker_calls_no_longer_than_the_grace() {
    let f = Fixture::new(ExposureMode::Full, ServerOptions::default());
    let shutdown = CancellationToken::new();
    let grace = std::time::Duration::from_millis(500);
    let opts = HttpOptions { shutdown: shutdown.clone(), shutdown_grace: grace, ..HttpOptions::default() };
    let (addr, served) = serve(&f, opts).await;
    let session = open_session(addr, "shutdown-worker-grace").await;
    let call = tokio::spawn(async move {
        let headers = [JSON, ACCEPT, ("Mcp-Session-Id", session.as_str())];
        let body = call_body(3, "marker_sleep", json!({"ms": 30000}), Some(json!({"progressToken": "p"})));
        http(addr, "POST", &headers, &body).await
    });
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let stopped = std::time::Instant::now();
    shutdown.cancel();
    let ended = tokio::time::timeout(std::time::Duration::from_secs(10), served).await;
    assert!(matches!(ended, Ok(Ok(Ok(())))), "the server did not end: {ended:?}");
    assert!(stopped.elapsed() >= grace, "the server ended before the grace: {:?}", stopped.elapsed());
    let (status, _, _) = tokio::time::timeout(std::time::Duration::from_secs(10), call).await.unwrap().unwrap();
    assert_eq!(status, 200);
}

/// A call served in place that is still running when the grace is over is answered with an
/// error saying so (its stream used to end with no answer, which clients wait on or report as
/// a dropped connection), and the tool is cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_still_running_after_the_grace_is_answered_with_an_error() {
    let f = Fixture::new(ExposureMode::Full, ServerOptions::default());
    let shutdown = CancellationToken::new();
    let grace = std::time::Duration::from_millis(500);
    let opts = HttpOptions { shutdown: shutdown.clone(), shutdown_grace: grace, ..HttpOptions::default() };
    let (addr, served) = serve(&f, opts).await;
    let session = open_session(addr, "shutdown-past-grace").await;
    let call = tokio::spawn(async move {
        let headers = [JSON, ACCEPT, ("Mcp-Session-Id", session.as_str())];
        http(addr, "POST", &headers, &call_body(3, "marker_sleep", json!({"ms": 30000}), None)).await
    });
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let stopped = std::time::Instant::now();
    shutdown.cancel();
    let (status, _, body) = tokio::time::timeout(std::time::Duration::from_secs(10), call).await.unwrap().unwrap();
    let text = String::from_utf8_lossy(&body);
    assert_eq!(status, 200, "{text}");
    assert!(stopped.elapsed() >= grace, "answered before the grace was over: {:?}", stopped.elapsed());
    let answer = messages(&body).into_iter().find(|m| m["id"] == 3).unwrap_or_else(|| panic!("no answer: {text}"));
    let message = answer["error"]["message"].as_str().unwrap_or_else(|| panic!("not an error: {answer}"));
    assert!(message.contains("shutting down") && message.contains("may have taken effect"), "{message}");
    assert_eq!(answer["error"]["data"]["code"], "cancelled", "{answer}");
    let ended = tokio::time::timeout(std::time::Duration::from_secs(10), served).await;
    assert!(matches!(ended, Ok(Ok(Ok(())))), "the server did not end: {ended:?}");
    // The router records the call as cancelled once it stops waiting for the tool (at once; a
    // loaded machine may take a moment), well before the tool's 30 s were over.
    let start = std::time::Instant::now();
    let mut errors = f.router.telemetry().snapshot().errors;
    while !errors.contains_key("cancelled") && start.elapsed() < std::time::Duration::from_secs(5) {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        errors = f.router.telemetry().snapshot().errors;
    }
    assert_eq!(errors.get("cancelled").copied(), Some(1), "the tool was not cancelled: {errors:?}");
}

/// A `tools/call` under the id of one still running in the same session is refused under that
/// id, as on stdio (both ran, and a cancellation of that id reached both).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_reusing_the_id_of_one_still_running_is_refused() {
    let f = Fixture::new(ExposureMode::Full, ServerOptions::default());
    let (addr, shutdown) = start(&f).await;
    let session = open_session(addr, "same-id").await;
    let first = {
        let session = session.clone();
        tokio::spawn(async move {
            let headers = [JSON, ACCEPT, ("Mcp-Session-Id", session.as_str())];
            http(addr, "POST", &headers, &call_body(9, "marker_sleep", json!({"ms": 600}), None)).await
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let headers = [JSON, ACCEPT, ("Mcp-Session-Id", session.as_str())];
    let (status, _, body) =
        http(addr, "POST", &headers, &call_body(9, "marker_echo", json!({"text": "x"}), None)).await;
    let text = String::from_utf8_lossy(&body);
    assert_eq!(status, 200, "{text}");
    let second = messages(&body).into_iter().find(|m| m["id"] == 9).expect("an answer under id 9");
    assert!(second["error"]["message"].as_str().is_some_and(|m| m.contains("still in progress")), "{second}");
    let (_, _, body) = first.await.unwrap();
    let answer = messages(&body).into_iter().find(|m| m["id"] == 9);
    assert!(answer.is_some_and(|m| m["result"]["isError"] == false), "{}", String::from_utf8_lossy(&body));
    shutdown.cancel();
}

/// A call that runs longer than the idle timeout is still answered: its open response stream
/// carries keep-alives often enough that the connection is never idle while it waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_longer_than_the_idle_timeout_is_answered() {
    let f = Fixture::new(ExposureMode::Full, ServerOptions::default());
    let shutdown = CancellationToken::new();
    let idle = std::time::Duration::from_millis(1000);
    let opts = HttpOptions { session_idle_timeout: idle, shutdown: shutdown.clone(), ..HttpOptions::default() };
    let (addr, _) = serve(&f, opts).await;
    let session = open_session(addr, "long-call").await;
    let headers = [JSON, ACCEPT, ("Mcp-Session-Id", session.as_str())];
    let (status, _, body) =
        http(addr, "POST", &headers, &call_body(5, "marker_sleep", json!({"ms": 2500}), None)).await;
    let text = String::from_utf8_lossy(&body);
    assert_eq!(status, 200, "{text}");
    let answer = messages(&body).into_iter().find(|m| m["id"] == 5);
    assert!(answer.is_some_and(|m| m["result"]["isError"] == false), "the call's answer did not arrive: {text}");
    shutdown.cancel();
}

/// Sessions used only by in-place calls stay open while used and still close when idle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_used_by_in_place_calls_stays_open_and_closes_when_idle() {
    let f = Fixture::new(ExposureMode::Full, ServerOptions::default());
    let shutdown = CancellationToken::new();
    let idle = std::time::Duration::from_millis(1500);
    let opts = HttpOptions { session_idle_timeout: idle, shutdown: shutdown.clone(), ..HttpOptions::default() };
    let (addr, _) = serve(&f, opts).await;
    let session = open_session(addr, "in-place-idle").await;
    let headers = [JSON, ACCEPT, ("Mcp-Session-Id", session.as_str())];
    let before = quiver_mcp::http_in_place_calls();
    let start = std::time::Instant::now();
    let mut id = 10;
    // Calls for twice the idle timeout: every one answered.
    while start.elapsed() < idle * 2 {
        id += 1;
        let (status, _, body) =
            http(addr, "POST", &headers, &call_body(id, "marker_echo", json!({"text": "x"}), None)).await;
        assert_eq!(status, 200, "call {id} after {:?}: {}", start.elapsed(), String::from_utf8_lossy(&body));
        assert_eq!(messages(&body)[0]["id"], id);
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(quiver_mcp::http_in_place_calls() > before, "no call was served in place");
    tokio::time::sleep(idle * 2).await;
    let (status, _, _) = http(addr, "POST", &headers, &call_body(99, "marker_echo", json!({"text": "x"}), None)).await;
    assert_eq!(status, 404, "the idle session is gone");
    shutdown.cancel();
}
