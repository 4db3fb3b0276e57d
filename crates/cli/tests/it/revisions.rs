//! Which MCP revisions `quiver serve` speaks, as a client that speaks both eras finds out: the
//! handshake revisions up to 2025-11-25, and a refusal of a 2026-07-28 (stateless) request that
//! tells such a client to fall back to `initialize` (README, "MCP revisions").

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use super::{Project, QUIVER};
use crate::operations::serve_http;

/// The revisions `initialize` negotiates, oldest first.
const HANDSHAKE_REVISIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// A request as a 2026-07-28 client sends it: no session, the revision and the client's
/// capabilities in `_meta`.
fn modern(id: u64, method: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "dual-era", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}}}})
}

/// Over HTTP a 2026-07-28 request is answered `400` with `UnsupportedProtocolVersionError`
/// (`-32022`), naming the revisions served and echoing the one asked for, under the request's id.
#[test]
fn over_http_a_stateless_request_is_told_the_revisions_served() {
    let p = Project::new();
    let server = serve_http(&p.path(""), &p.path("quiver.yaml"), &[]);
    let body = modern(7, "tools/list").to_string();
    let (status, _, answer) = quiver_tests::http_post(
        &server.addr,
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/list"),
        ],
        body.as_bytes(),
    );
    let answer: Value = serde_json::from_slice(&answer).expect("a JSON-RPC answer");
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["id"], 7, "{answer}");
    assert_eq!(answer["error"]["code"], -32022, "{answer}");
    assert_eq!(answer["error"]["data"]["requested"], "2026-07-28", "{answer}");
    assert_eq!(answer["error"]["data"]["supported"], json!(HANDSHAKE_REVISIONS), "{answer}");
}

/// A `quiver serve` child on stdio, spoken to a line at a time.
struct StdioServer {
    child: std::process::Child,
    input: std::process::ChildStdin,
    output: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

impl StdioServer {
    fn start(p: &Project) -> StdioServer {
        let mut child = Command::new(QUIVER)
            .current_dir(p.path(""))
            .args(["--config", "quiver.yaml", "serve"])
            .env_remove("RUST_LOG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let input = child.stdin.take().unwrap();
        let output = BufReader::new(child.stdout.take().unwrap()).lines();
        StdioServer { child, input, output }
    }

    fn send(&mut self, message: Value) {
        writeln!(self.input, "{message}").unwrap();
    }

    fn ask(&mut self, message: Value) -> Value {
        self.send(message);
        let line = self.output.next().expect("an answer line").unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }
}

impl Drop for StdioServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// On stdio the probe a dual-era client sends first (`server/discover`, 2026-07-28) gets an
/// error other than `-32022`, which the specification reads as "a server of the handshake era":
/// the client then starts the handshake, and `initialize` settles on 2025-11-25.
#[test]
fn on_stdio_the_discover_probe_leads_a_dual_era_client_to_initialize() {
    let p = Project::new();
    let mut s = StdioServer::start(&p);
    let probe = s.ask(modern(1, "server/discover"));
    assert_eq!(probe["id"], 1, "{probe}");
    let code = probe["error"]["code"].as_i64().unwrap_or_else(|| panic!("an error: {probe}"));
    assert_ne!(code, -32022, "-32022 would tell the client this server is of the stateless era: {probe}");

    // The client offers its newest revision; the server answers with its own newest.
    let init = s.ask(json!({"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {
        "protocolVersion": "2026-07-28", "capabilities": {}, "clientInfo": {"name": "dual-era", "version": "1"}}}));
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
    s.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let list = s.ask(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}));
    assert!(list["result"]["tools"].as_array().is_some_and(|t| !t.is_empty()), "{list}");
}
