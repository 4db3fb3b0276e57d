//! A real host (signed bundles of the conformance and marker test plugins, loaded through the
//! lifecycle crate), the real router and the server; raw JSON-RPC clients over an in-memory
//! pipe and over HTTP, so tests see exactly the bytes a client would.

use std::sync::Arc;
use std::time::Duration;

use quiver_catalog::{Catalog, CatalogSource, ExposureMode, SurfacePolicy};
use quiver_lifecycle::{Host, HostSettings, VerifyPolicy};
use quiver_manifest::{PublicKey, TrustedKeys};
use quiver_mcp::{QuiverServer, ServerOptions, SessionProfile};
use quiver_router::{Router, RouterSettings};
use quiver_tests::{TestKey, plugin_library, write_bundle};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines, ReadHalf, WriteHalf};
use tokio::sync::watch;

pub const WAIT: Duration = Duration::from_secs(20);

/// A plugins folder with signed bundles of `conformance-tools` and `marker-plugin`, a host
/// that loaded them, a router and a server.
pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub key: TestKey,
    pub host: Arc<Host>,
    pub router: Arc<Router>,
    pub changes: watch::Sender<Arc<Catalog>>,
    pub server: QuiverServer,
}

/// Room for every test tool: caps are the catalog's business, tested there.
pub fn policy(mode: ExposureMode) -> SurfacePolicy {
    SurfacePolicy { mode, max_typed_tools: 64, byte_budget: 1 << 20, ..SurfacePolicy::default() }
}

impl Fixture {
    pub fn new(mode: ExposureMode, options: ServerOptions) -> Fixture {
        let key = TestKey::generate();
        let dir = tempfile::tempdir().expect("temp dir");
        for plugin in ["conformance-tools", "marker-plugin"] {
            write_bundle(&dir.path().join(plugin), plugin, &plugin_library(plugin, &[]), None, Some(&key));
        }
        let mut trusted = TrustedKeys::default();
        trusted.add("test", "test", PublicKey::parse(&key.public_text()).expect("key"));
        let host = Arc::new(
            Host::new(HostSettings {
                plugins_dir: dir.path().to_owned(),
                verify: VerifyPolicy {
                    trusted,
                    allow_unsigned: false,
                    max_library_bytes: 64 << 20,
                    ..VerifyPolicy::default()
                },
                cache_dir: None,
                conflicts: Default::default(),
                isolation: Default::default(),
            })
            .expect("host"),
        );
        let report = host.rescan();
        assert!(report.rejected.is_empty(), "bundles rejected: {:?}", report.rejected);
        assert_eq!(report.added.len(), 2, "{report:?}");
        let (changes, rx) = watch::channel(host.catalog());
        let tx = changes.clone();
        host.on_change(move |_, c| {
            tx.send_replace(c.clone());
        });
        let source: Arc<dyn CatalogSource> = host.clone();
        let router = Arc::new(Router::new(source.clone(), RouterSettings::default()));
        let profiles = Arc::new(move |who: &quiver_mcp::SessionIdentity<'_>| {
            let mut p = SessionProfile::unrestricted("test", policy(mode));
            // A client named "lazy-*" gets a lazy profile whatever the fixture's mode.
            if who.client_name.starts_with("lazy") {
                p.policy.mode = ExposureMode::Lazy;
            }
            p
        });
        let server = QuiverServer::with_options(source, router.clone(), profiles, rx, options);
        Fixture { dir, key, host, router, changes, server }
    }

    /// Adds a bundle of `plugin` and rescans.
    pub fn install(&self, plugin: &str) {
        write_bundle(&self.dir.path().join(plugin), plugin, &plugin_library(plugin, &[]), None, Some(&self.key));
        let report = self.host.rescan();
        assert!(report.rejected.is_empty(), "{report:?}");
    }

    pub fn remove(&self, plugin: &str) {
        std::fs::remove_dir_all(self.dir.path().join(plugin)).expect("remove bundle");
        let report = self.host.rescan();
        assert!(report.removed.iter().any(|p| p == plugin), "{report:?}");
    }
}

/// A client writing raw lines to the server and reading its lines back.
pub struct RawClient {
    pub write: WriteHalf<DuplexStream>,
    lines: Lines<BufReader<ReadHalf<DuplexStream>>>,
    /// Notifications received while waiting for responses, in order.
    pub notes: Vec<Value>,
    next_id: i64,
    pub server: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl RawClient {
    pub fn start(server: &QuiverServer) -> RawClient {
        let (client, served) = tokio::io::duplex(1 << 20);
        let (sr, sw) = tokio::io::split(served);
        let server = tokio::spawn(quiver_mcp::serve_io(server.clone(), sr, sw));
        let (r, w) = tokio::io::split(client);
        RawClient { write: w, lines: BufReader::new(r).lines(), notes: Vec::new(), next_id: 100, server }
    }

    pub async fn send_raw(&mut self, bytes: &[u8]) {
        self.write.write_all(bytes).await.expect("write");
        self.write.flush().await.expect("flush");
    }

    pub async fn send(&mut self, line: &str) {
        self.send_raw(format!("{line}\n").as_bytes()).await;
    }

    pub async fn send_json(&mut self, v: &Value) {
        self.send(&v.to_string()).await;
    }

    /// The next line from the server, or `None` once it closed its output.
    pub async fn next_or_end(&mut self) -> Option<Value> {
        let line =
            tokio::time::timeout(WAIT, self.lines.next_line()).await.expect("the server answered or ended in time");
        line.expect("read").map(|l| serde_json::from_str(&l).expect("a JSON line"))
    }

    /// The next line from the server.
    pub async fn recv(&mut self) -> Value {
        let line = tokio::time::timeout(WAIT, self.lines.next_line())
            .await
            .expect("the server answered in time")
            .expect("read")
            .expect("the server did not close the stream");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("the server wrote a line that is not JSON ({e}): {line}"))
    }

    /// True when the server writes nothing for `d`.
    pub async fn quiet_for(&mut self, d: Duration) -> Option<Value> {
        match tokio::time::timeout(d, self.lines.next_line()).await {
            Err(_) => None,
            Ok(line) => Some(serde_json::from_str(&line.expect("read").expect("open")).expect("json")),
        }
    }

    pub fn id(&mut self) -> i64 {
        self.next_id += 1;
        self.next_id
    }

    /// Sends a request and waits for its response; answers server requests with `answer`.
    pub async fn request_with(
        &mut self,
        method: &str,
        params: Value,
        mut answer: impl FnMut(&Value) -> Value,
    ) -> Value {
        let id = self.id();
        self.send_json(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params })).await;
        loop {
            let m = self.recv().await;
            if m.get("id") == Some(&json!(id)) && m.get("method").is_none() {
                return m;
            }
            if m.get("method").is_some() && m.get("id").is_some() {
                let result = answer(&m);
                let reply = json!({ "jsonrpc": "2.0", "id": m["id"], "result": result });
                self.send_json(&reply).await;
            } else {
                self.notes.push(m);
            }
        }
    }

    pub async fn request(&mut self, method: &str, params: Value) -> Value {
        self.request_with(method, params, |m| panic!("unexpected server request {m}")).await
    }

    pub async fn initialize(&mut self, client: &str, capabilities: Value) -> Value {
        let r = self
            .request(
                "initialize",
                json!({ "protocolVersion": "2025-11-25", "capabilities": capabilities, "clientInfo": { "name": client, "version": "1.0" } }),
            )
            .await;
        assert!(r.get("result").is_some(), "initialize failed: {r}");
        self.send_json(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" })).await;
        r
    }

    /// Names of the whole `tools/list`, following cursors.
    pub async fn list_all(&mut self) -> Vec<Value> {
        let mut tools = Vec::new();
        let mut cursor = None;
        loop {
            let params = match &cursor {
                Some(c) => json!({ "cursor": c }),
                None => json!({}),
            };
            let r = self.request("tools/list", params).await;
            let result = &r["result"];
            tools.extend(result["tools"].as_array().expect("tools").iter().cloned());
            match result.get("nextCursor").and_then(Value::as_str) {
                Some(c) => cursor = Some(c.to_owned()),
                None => return tools,
            }
        }
    }

    pub async fn call(&mut self, name: &str, arguments: Value) -> Value {
        self.request("tools/call", json!({ "name": name, "arguments": arguments })).await
    }
}

pub fn names(tools: &[Value]) -> Vec<String> {
    tools.iter().map(|t| t["name"].as_str().unwrap_or_default().to_owned()).collect()
}

/// One HTTP/1.1 exchange on a fresh connection; returns status, headers (lower-case names)
/// and the body with chunked transfer decoding undone.
pub async fn http(
    addr: std::net::SocketAddr,
    method: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    http_at(addr, "/mcp", method, headers, body).await
}

/// [`http`] on another path.
pub async fn http_at(
    addr: std::net::SocketAddr,
    path: &str,
    method: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: {addr}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    stream.write_all(req.as_bytes()).await.expect("write");
    stream.write_all(body).await.expect("write body");
    let mut raw = Vec::new();
    tokio::time::timeout(WAIT, stream.read_to_end(&mut raw)).await.expect("response in time").expect("read");
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("header end");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut rest = raw[split + 4..].to_vec();
    let mut lines = head.lines();
    let status: u16 = lines.next().and_then(|l| l.split(' ').nth(1)).and_then(|s| s.parse().ok()).expect("status");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':').map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned())))
        .collect();
    if headers.iter().any(|(k, v)| k == "transfer-encoding" && v.contains("chunked")) {
        let mut out = Vec::new();
        let mut i = 0;
        while let Some(nl) = rest[i..].windows(2).position(|w| w == b"\r\n") {
            let size = usize::from_str_radix(String::from_utf8_lossy(&rest[i..i + nl]).trim(), 16).unwrap_or(0);
            if size == 0 {
                break;
            }
            let start = i + nl + 2;
            out.extend_from_slice(&rest[start..(start + size).min(rest.len())]);
            i = start + size + 2;
            if i >= rest.len() {
                break;
            }
        }
        rest = out;
    }
    (status, headers, rest)
}

pub fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// The JSON-RPC messages of a response body: plain JSON, or the `data:` lines of an SSE stream.
pub fn messages(body: &[u8]) -> Vec<Value> {
    let text = String::from_utf8_lossy(body);
    if let Ok(v) = serde_json::from_str::<Value>(&text) {
        return vec![v];
    }
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect()
}
