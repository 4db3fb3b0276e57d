//! HTTP security (issue 10, holes 3 and 4): authentication, protected resource metadata,
//! refusal of unauthenticated non-loopback binds, session ownership, the session cap and idle
//! timeouts, and the principal (not the client name) choosing the profile.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use quiver_catalog::ExposureMode;
use quiver_manifest::{AuthConfig, BearerToken, HostConfig, sha256_hex};
use quiver_mcp::{Authenticator, HttpOptions, Principal, ServerOptions, SessionIdentity, SessionProfile};
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use tokio_util::sync::CancellationToken;

use crate::support::{Fixture, header, http, http_at};

const JSON: (&str, &str) = ("Content-Type", "application/json");
const ACCEPT: (&str, &str) = ("Accept", "application/json, text/event-stream");
const ALICE: &str = "alice-token-0123456789";
const BOB: &str = "bob-token-9876543210";

fn authenticator() -> Arc<Authenticator> {
    let cfg = AuthConfig {
        resource: Some("https://tools.example.com/mcp".into()),
        authorization_servers: vec!["https://auth.example.com".into()],
        tokens: vec![
            BearerToken { principal: "alice".into(), sha256: sha256_hex(ALICE.as_bytes()), profile: None },
            BearerToken { principal: "bob".into(), sha256: sha256_hex(BOB.as_bytes()), profile: None },
        ],
        ..AuthConfig::default()
    };
    Arc::new(Authenticator::new(&cfg, None).unwrap())
}

async fn start(f: &Fixture, opts: HttpOptions) -> (SocketAddr, CancellationToken) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().unwrap();
    let shutdown = opts.shutdown.clone();
    tokio::spawn(quiver_mcp::serve_http_on(f.server.clone(), listener, opts));
    (addr, shutdown)
}

fn initialize(client: &str) -> Vec<u8> {
    json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": { "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": client, "version": "1" } }
    })
    .to_string()
    .into_bytes()
}

fn list(id: i64) -> Vec<u8> {
    json!({ "jsonrpc": "2.0", "id": id, "method": "tools/list", "params": {} }).to_string().into_bytes()
}

async fn open(addr: SocketAddr, token: &str) -> String {
    let auth = format!("Bearer {token}");
    let (status, headers, body) = http(addr, "POST", &[JSON, ACCEPT, ("Authorization", &auth)], &initialize("c")).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let session = header(&headers, "mcp-session-id").expect("session id").to_owned();
    let note = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }).to_string();
    let (status, _, _) =
        http(addr, "POST", &[JSON, ACCEPT, ("Authorization", &auth), ("Mcp-Session-Id", &session)], note.as_bytes())
            .await;
    assert_eq!(status, 202);
    session
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_without_valid_credentials_get_401_with_the_resource_metadata() {
    let f = Fixture::new(ExposureMode::Full, ServerOptions::default());
    let (addr, shutdown) = start(&f, HttpOptions { auth: Some(authenticator()), ..HttpOptions::default() }).await;

    // No credentials: 401 and where to learn how to get some (MCP authorization spec).
    let (status, headers, _) = http(addr, "POST", &[JSON, ACCEPT], &initialize("c")).await;
    assert_eq!(status, 401);
    let challenge = header(&headers, "www-authenticate").expect("WWW-Authenticate");
    assert_eq!(
        challenge,
        "Bearer resource_metadata=\"https://tools.example.com/.well-known/oauth-protected-resource/mcp\""
    );
    // Wrong, hashed, or other-scheme credentials: 401 invalid_token.
    for bad in ["Bearer nope", &format!("Bearer {}", sha256_hex(ALICE.as_bytes())), &format!("Basic {ALICE}")] {
        let (status, headers, _) = http(addr, "POST", &[JSON, ACCEPT, ("Authorization", bad)], &initialize("c")).await;
        assert_eq!(status, 401, "{bad}");
        assert!(header(&headers, "www-authenticate").unwrap().contains("error=\"invalid_token\""), "{bad}");
    }
    // GET (the SSE stream) and DELETE are guarded too.
    for method in ["GET", "DELETE"] {
        let (status, _, _) = http(addr, method, &[ACCEPT], b"").await;
        assert_eq!(status, 401, "{method}");
    }

    // The metadata documents, at the path-suffixed and the root well-known URIs (RFC 9728).
    for path in ["/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"] {
        let (status, _, body) = http_at(addr, path, "GET", &[], b"").await;
        assert_eq!(status, 200, "{path}");
        let doc: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(doc["resource"], "https://tools.example.com/mcp");
        assert_eq!(doc["authorization_servers"], json!(["https://auth.example.com"]));
        assert_eq!(doc["bearer_methods_supported"], json!(["header"]));
    }

    // A valid token works; its session cannot be used by another principal or without a token.
    let session = open(addr, ALICE).await;
    let alice = format!("Bearer {ALICE}");
    let (status, _, _) =
        http(addr, "POST", &[JSON, ACCEPT, ("Authorization", &alice), ("Mcp-Session-Id", &session)], &list(2)).await;
    assert_eq!(status, 200);
    let bob = format!("Bearer {BOB}");
    let (status, _, _) =
        http(addr, "POST", &[JSON, ACCEPT, ("Authorization", &bob), ("Mcp-Session-Id", &session)], &list(3)).await;
    assert_eq!(status, 404, "bob cannot ride alice's session");
    let (status, _, _) = http(addr, "POST", &[JSON, ACCEPT, ("Mcp-Session-Id", &session)], &list(4)).await;
    assert_eq!(status, 401);
    shutdown.cancel();
}

/// Authentication comes before the body: a request without credentials is answered 401 while
/// its announced body has not been sent (a server reading the body first would wait for it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_without_credentials_is_refused_before_its_body_is_read() {
    use tokio::io::AsyncWriteExt;
    let f = Fixture::new(ExposureMode::Full, ServerOptions::default());
    let (addr, shutdown) = start(&f, HttpOptions { auth: Some(authenticator()), ..HttpOptions::default() }).await;
    for token in [None, Some("Bearer nope")] {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut head = format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 1000000\r\n",
            addr.port()
        );
        if let Some(t) = token {
            head.push_str(&format!("Authorization: {t}\r\n"));
        }
        head.push_str("\r\n");
        // Only the head and the first bytes of the body: the rest never comes.
        stream.write_all(head.as_bytes()).await.unwrap();
        stream.write_all(b"{\"jsonrpc\":\"2.0\",").await.unwrap();
        let mut buf = vec![0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
            .await
            .expect("answered without waiting for the body")
            .unwrap();
        let answer = String::from_utf8_lossy(&buf[..n]);
        assert!(answer.starts_with("HTTP/1.1 401"), "{token:?}: {answer}");
        assert!(answer.to_ascii_lowercase().contains("www-authenticate: bearer"), "{token:?}: {answer}");
    }
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_loopback_bind_without_auth_is_refused_unless_explicitly_insecure() {
    let f = Fixture::new(ExposureMode::Full, ServerOptions::default());
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.expect("bind");
    let err = quiver_mcp::serve_http_on(f.server.clone(), listener, HttpOptions::default()).await.unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied);
    assert!(err.to_string().contains("--insecure-no-auth"), "{err}");

    // With auth it serves; so it does, with a warning, when the operator insists.
    for opts in [
        HttpOptions { auth: Some(authenticator()), ..HttpOptions::default() },
        HttpOptions { insecure_no_auth: true, ..HttpOptions::default() },
    ] {
        let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.expect("bind");
        let port = listener.local_addr().unwrap().port();
        let shutdown = opts.shutdown.clone();
        let task = tokio::spawn(quiver_mcp::serve_http_on(f.server.clone(), listener, opts));
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let (status, _, _) = http_at(addr, "/.well-known/oauth-protected-resource", "GET", &[], b"").await;
        assert!(status == 200 || status == 404, "{status}");
        shutdown.cancel();
        task.await.unwrap().unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_capped_and_idle_ones_and_silent_connections_are_closed() {
    let f = Fixture::new(ExposureMode::Full, ServerOptions::default());
    let opts = HttpOptions {
        auth: Some(authenticator()),
        max_sessions: 2,
        session_idle_timeout: Duration::from_millis(1500),
        ..HttpOptions::default()
    };
    let (addr, shutdown) = start(&f, opts).await;
    let first = open(addr, ALICE).await;
    let _second = open(addr, ALICE).await;
    let auth = format!("Bearer {ALICE}");
    let (status, _, body) = http(addr, "POST", &[JSON, ACCEPT, ("Authorization", &auth)], &initialize("c")).await;
    assert_eq!(status, 503, "{}", String::from_utf8_lossy(&body));
    assert!(String::from_utf8_lossy(&body).contains("max_sessions"));

    // A connection that sends nothing is closed (no half-open connections piling up).
    let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut buf = [0u8; 16];
    let n = tokio::time::timeout(Duration::from_secs(10), silent.read(&mut buf)).await.expect("closed in time");
    assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");

    // Idle sessions end and their slots come back.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let (status, _, _) =
        http(addr, "POST", &[JSON, ACCEPT, ("Authorization", &auth), ("Mcp-Session-Id", &first)], &list(9)).await;
    assert_eq!(status, 404, "the idle session is gone");
    open(addr, ALICE).await;
    shutdown.cancel();
}

/// Connections that send a request's head slowly, a byte at a time (each byte restarting the
/// idle timer), are closed when the head has not arrived in time, so clients with no token cannot
/// hold every connection slot; and a refused request's connection is closed after its 401.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_request_heads_and_refused_requests_do_not_hold_connection_slots() {
    use tokio::io::AsyncWriteExt;
    let f = Fixture::new(ExposureMode::Full, ServerOptions::default());
    let opts = HttpOptions {
        auth: Some(authenticator()),
        // Four connection slots.
        max_sessions: 1,
        request_head_timeout: Duration::from_millis(400),
        ..HttpOptions::default()
    };
    let (addr, shutdown) = start(&f, opts).await;
    let mut drips = Vec::new();
    for _ in 0..4 {
        drips.push(tokio::net::TcpStream::connect(addr).await.unwrap());
    }
    let dripping = tokio::spawn(async move {
        let head = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
        let mut closed = 0;
        for i in 0..200 {
            for s in drips.iter_mut() {
                let byte = if i < head.len() { head[i] } else { b'a' };
                if s.write_all(&[byte]).await.is_err() {
                    closed += 1;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        closed
    });
    // A real client gets a slot while the slow ones drip.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let opened = tokio::time::timeout(Duration::from_secs(3), open(addr, ALICE)).await;
    assert!(opened.is_ok(), "no connection slot for a real client while four slow heads drip");
    assert!(dripping.await.unwrap() > 0, "the slow connections were closed");

    // A 401 closes its connection: the same connection cannot be used to wait around.
    let mut refused = tokio::net::TcpStream::connect(addr).await.unwrap();
    let body = initialize("c");
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    refused.write_all(request.as_bytes()).await.unwrap();
    refused.write_all(&body).await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(3), refused.read_to_end(&mut answer)).await;
    let text = String::from_utf8_lossy(&answer);
    assert!(read.is_ok(), "the connection stayed open after its 401: {text}");
    assert!(text.starts_with("HTTP/1.1 401") && text.to_ascii_lowercase().contains("connection: close"), "{text}");
    shutdown.cancel();
}

/// The principal picks the profile; the client's self-declared name counts only where it may
/// (stdio, loopback without auth).
#[test]
fn the_principal_not_the_client_name_selects_the_profile() {
    let config = HostConfig::from_yaml(
        "default_profile: plan\n\
         profiles:\n  plan: {mode: lazy, scopes: []}\n  agent: {mode: hybrid, clients: [\"claude-code*\"]}\n  ops: {mode: full}\n\
         server:\n  auth:\n    tokens:\n      - {principal: ci, sha256: \"0000000000000000000000000000000000000000000000000000000000000000\", profile: ops}\n    principals: {alice: agent}\n",
        "q.yaml",
    )
    .unwrap();
    let resolve = SessionProfile::resolver(&config, None);
    let who = |name: &str, principal: Option<&Principal>, hint: bool| {
        resolve(&SessionIdentity { client_name: name, principal, client_hint: hint }).name
    };
    let alice = Principal { name: "alice".into(), profile: None, method: "jwt" };
    let ci = Principal { name: "ci".into(), profile: Some("ops".into()), method: "token" };
    let mallory = Principal { name: "mallory".into(), profile: None, method: "jwt" };
    assert_eq!(who("anything", Some(&alice), false), "agent");
    assert_eq!(who("claude-code", Some(&ci), false), "ops");
    // An authenticated principal without a mapping gets the default, whatever it claims to be.
    assert_eq!(who("claude-code 2.0", Some(&mallory), false), "plan");
    // Without auth: the name is a hint on loopback/stdio only.
    assert_eq!(who("claude-code 2.0", None, true), "agent");
    assert_eq!(who("claude-code 2.0", None, false), "plan");
    // The operator's --profile wins.
    let forced = SessionProfile::resolver(&config, Some("ops".into()));
    assert_eq!(forced(&SessionIdentity { client_name: "x", principal: Some(&alice), client_hint: false }).name, "ops");
}
