//! Sessions shared by several `quiver serve --http` instances through a real Redis server
//! (Debian's `redis-server`, started here on a free port in a temporary folder): a session
//! opened on one instance continues on another (and on a restarted one) with its profile and
//! loaded tools, for its principal only.

use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use quiver_tests::{TestKey, http_post, mcp_messages, plugin_library, write_bundle};
use serde_json::{Value, json};

const ALICE: &str = "alice-test-token-0123456789abcdef0123456789abcdef";
const BOB: &str = "bob-test-token-0123456789abcdef0123456789abcdef01";
const JSON: (&str, &str) = ("Content-Type", "application/json");
const ACCEPT: (&str, &str) = ("Accept", "application/json, text/event-stream");

/// A child process killed when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `redis-server`, when installed. CI installs it (`.ci/run`) and sets `QUIVER_REQUIRE_REDIS`,
/// so the test cannot silently skip there.
fn redis_server() -> Option<&'static str> {
    if Command::new("redis-server").arg("--version").output().is_ok_and(|o| o.status.success()) {
        return Some("redis-server");
    }
    assert!(
        std::env::var_os("QUIVER_REQUIRE_REDIS").is_none(),
        "QUIVER_REQUIRE_REDIS is set but `redis-server` is not installed (apt-get install redis-server)"
    );
    eprintln!("note: `redis-server` is not installed; skipping the shared session store test");
    None
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A Redis server on a free loopback port, its files in `dir`, no persistence.
fn start_redis(bin: &str, dir: &Path) -> (Proc, u16) {
    let port = free_port();
    let child = Command::new(bin)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let proc = Proc(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        use std::io::{Read, Write};
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
            let mut buf = [0u8; 16];
            if s.write_all(b"PING\r\n").is_ok() && s.read(&mut buf).is_ok_and(|n| buf[..n].starts_with(b"+PONG")) {
                return (proc, port);
            }
        }
        assert!(Instant::now() < deadline, "redis-server did not answer on port {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The project: fs-tools signed, a lazy profile showing fs_read (fs_stat and fs_search are
/// deferred: only a load puts them in a session's list), two bearer principals, and the
/// session store at `store`.
fn project(dir: &Path, store: &str) {
    let plugins = dir.join("plugins");
    let key = TestKey::generate();
    write_bundle(&plugins.join("fs"), "fs-tools", &plugin_library("fs-tools", &[]), None, Some(&key));
    let root = dir.join("root");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("notes.txt"), "hello\n").unwrap();
    let key_line = key.public_text().lines().nth(1).unwrap().to_owned();
    std::fs::write(
        dir.join("quiver.yaml"),
        format!(
            "plugins_dir: plugins\nrescan_interval_ms: 0\ntrusted_keys: [{{name: test, key: {key_line}}}]\n\
             isolation: {{default: in_process}}\nplugin_config: {{fs-tools: {{root: {root}}}}}\n\
             default_profile: lazy\nprofiles:\n  lazy: {{mode: lazy, approval: allow, eager: [fs_read]}}\n\
             sessions: {{store: \"{store}\"}}\n\
             server:\n  auth:\n    tokens: [{{principal: alice, sha256: {alice}}}, {{principal: bob, sha256: {bob}}}]\n",
            root = root.display(),
            alice = quiver_manifest::sha256_hex(ALICE.as_bytes()),
            bob = quiver_manifest::sha256_hex(BOB.as_bytes()),
        ),
    )
    .unwrap();
}

/// `quiver serve --http 127.0.0.1:0` in `dir`; returns the process and its address.
fn serve(dir: &Path) -> (Proc, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_quiver"))
        .arg("--config")
        .arg(dir.join("quiver.yaml"))
        .args(["serve", "--http", "127.0.0.1:0"])
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .env_remove("QUIVER_CONFIG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        let mut seen = Vec::new();
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(rest) = line.split("serving MCP at http://").nth(1) {
                let _ = tx.send(Ok(rest.trim_end_matches("/mcp").to_owned()));
            }
            seen.push(line);
        }
        let _ = tx.send(Err(seen));
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(Ok(addr)) => (Proc(child), addr),
        other => panic!("the server did not start: {other:?}"),
    }
}

/// An initialized session opened by `token`; returns its id.
fn open(addr: &str, token: &str) -> String {
    quiver_tests::open_http_session(addr, token, "lb-test")
}

/// A request in `session` on `addr`: the HTTP status and the result (or error) object.
fn request(addr: &str, token: &str, session: &str, method: &str, params: Value) -> (u16, Value) {
    let auth = format!("Bearer {token}");
    let req = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
    let (status, _, body) = http_post(
        addr,
        &[JSON, ACCEPT, ("Mcp-Session-Id", session), ("Authorization", &auth), ("Mcp-Protocol-Version", "2025-11-25")],
        req.to_string().as_bytes(),
    );
    if status != 200 {
        return (status, json!({"body": String::from_utf8_lossy(&body)}));
    }
    let reply = mcp_messages(&body).into_iter().find(|m| m.get("id") == Some(&json!(7))).expect("a response");
    (status, reply.get("result").cloned().unwrap_or_else(|| json!({"error": reply["error"]})))
}

/// The names of `session`'s tools as `addr` lists them (alice's session).
#[track_caller]
fn tool_names(addr: &str, session: &str) -> Vec<String> {
    let (status, result) = request(addr, ALICE, session, "tools/list", json!({}));
    assert_eq!(status, 200, "{result}");
    let tools = result["tools"].as_array().unwrap_or_else(|| panic!("no tools: {result}"));
    tools.iter().map(|t| t["name"].as_str().unwrap().to_owned()).collect()
}

#[track_caller]
fn tool_search(addr: &str, session: &str, args: Value) -> Value {
    let (status, result) =
        request(addr, ALICE, session, "tools/call", json!({"name": "tool_search", "arguments": args}));
    assert_eq!(status, 200, "{result}");
    assert_ne!(result["isError"], true, "{result}");
    result["structuredContent"].clone()
}

/// `DELETE /mcp` of `session`; returns the HTTP status.
fn delete(addr: &str, token: &str, session: &str) -> u16 {
    use std::io::{Read, Write};
    let mut stream = TcpStream::connect(addr).unwrap();
    let req = format!(
        "DELETE /mcp HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nMcp-Session-Id: {session}\r\n\
         Authorization: Bearer {token}\r\nMcp-Protocol-Version: 2025-11-25\r\n\r\n"
    );
    stream.write_all(req.as_bytes()).unwrap();
    let mut raw = String::new();
    let _ = stream.read_to_string(&mut raw);
    raw.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
}

#[test]
fn a_session_started_on_one_instance_continues_on_another_through_redis() {
    let Some(bin) = redis_server() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (_redis, port) = start_redis(bin, dir.path());
    project(dir.path(), &format!("redis://127.0.0.1:{port}/0"));
    let (_a, a) = serve(dir.path());
    let (b_proc, b) = serve(dir.path());

    // Started on A: a search loads fs_stat into alice's lazy session.
    let session = open(&a, ALICE);
    assert!(!tool_names(&a, &session).contains(&"fs_stat".to_owned()), "deferred until loaded");
    let found = tool_search(&a, &session, json!({"query": "file size and modification time metadata"}));
    assert!(found["loaded"].as_array().is_some_and(|l| l.contains(&json!("fs_stat"))), "{found}");

    // Its next requests go to B, which never saw it: same profile (lazy: fs_read and
    // tool_search), the loaded tool listed and callable.
    let on_b = tool_names(&b, &session);
    assert!(on_b.contains(&"fs_stat".to_owned()) && on_b.contains(&"fs_read".to_owned()), "{on_b:?}");
    assert!(on_b.contains(&"tool_search".to_owned()) && !on_b.contains(&"run_tool".to_owned()), "{on_b:?}");
    let (status, stat) =
        request(&b, ALICE, &session, "tools/call", json!({"name": "fs_stat", "arguments": {"path": "notes.txt"}}));
    assert_eq!(status, 200);
    assert_ne!(stat["isError"], true, "{stat}");
    assert!(stat.to_string().contains('6'), "the size of notes.txt: {stat}");

    // Another principal holding the id is told there is no such session, on either instance.
    for addr in [&a, &b] {
        let (status, _) = request(addr, BOB, &session, "tools/list", json!({}));
        assert_eq!(status, 404);
    }

    // An unload on B is seen by A (the record's revision moved on).
    let dropped = tool_search(&b, &session, json!({"query": "", "unload": ["fs_stat"]}));
    assert_eq!(dropped["unloaded"], json!(["fs_stat"]), "{dropped}");
    assert!(!tool_names(&a, &session).contains(&"fs_stat".to_owned()));

    // Loaded again on A, then B restarts: the new process continues the session too.
    tool_search(&a, &session, json!({"query": "file size and modification time metadata"}));
    drop(b_proc);
    let (_c, c) = serve(dir.path());
    assert!(tool_names(&c, &session).contains(&"fs_stat".to_owned()));

    // DELETE ends it everywhere: the store forgets it.
    let status = delete(&c, ALICE, &session);
    assert!(status == 200 || status == 202, "{status}");
    let (status, _) = request(&a, ALICE, &session, "tools/list", json!({}));
    assert_eq!(status, 404, "a deleted session is not restored");
}

/// A store that cannot be read is not a session that ended: an instance that does not hold
/// the session answers 503 naming `sessions.store` (the client keeps its session id and
/// retries), not 404 (which tells a client to start over and lose its loaded tools).
#[test]
fn a_session_store_that_cannot_be_read_is_a_503_naming_the_store_not_a_404() {
    let Some(bin) = redis_server() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (redis, port) = start_redis(bin, dir.path());
    project(dir.path(), &format!("redis://127.0.0.1:{port}/0"));
    let (_a, a) = serve(dir.path());
    let (_b, b) = serve(dir.path());
    let session = open(&a, ALICE);
    assert!(tool_names(&b, &session).contains(&"fs_read".to_owned()), "B continues the session");
    let (_c, c) = serve(dir.path());

    drop(redis);
    let (status, body) = request(&c, ALICE, &session, "tools/list", json!({}));
    assert_eq!(status, 503, "{body}");
    let text = body["body"].as_str().unwrap_or_default();
    assert!(text.contains("sessions.store") && text.contains("retry"), "{text}");
    assert!(text.contains(&format!("127.0.0.1:{port}")), "names the store: {text}");
    // DELETE on an instance that does not hold it cannot say the session is unknown either.
    assert_eq!(delete(&c, ALICE, &session), 503);
    // A's own session still answers from its memory.
    assert!(tool_names(&a, &session).contains(&"fs_read".to_owned()));
}
