//! Operations (issue 13) against a real `quiver serve --http` with the real fs-tools plugin:
//! `/metrics` after a scripted MCP session, behind the same authentication as `/mcp`.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use quiver_tests::{TestKey, http_get, http_post, mcp_messages, plugin_library, write_bundle};
use serde_json::{Value, json};

const FS: &str = "fs-tools";
const SECRET: &str = "secret-plugin";
const TOKEN: &str = "metrics-test-token-0123456789abcdef0123456789abcdef";
/// A principal that may use the tools but is not an operator.
const AGENT_TOKEN: &str = "agent-test-token-0123456789abcdef0123456789abcdef";
const JSON: (&str, &str) = ("Content-Type", "application/json");
const ACCEPT: (&str, &str) = ("Accept", "application/json, text/event-stream");

/// A running `quiver serve --http`, killed when dropped.
pub(crate) struct Server {
    child: Child,
    /// Where it listens (`127.0.0.1:PORT`).
    pub(crate) addr: String,
    /// Every line the server wrote on stderr so far.
    pub(crate) stderr: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A project with the fs-tools and secret-plugin bundles (in-process), a root folder for
/// fs-tools, bearer auth with [`TOKEN`], and a profile that allows confirmed tools; `extra` is
/// appended to quiver.yaml (secret-plugin is rejected unless it supplies `API_TOKEN`).
fn start(dir: &Path, extra: &str) -> Server {
    start_with_env(dir, extra, &[], "in_process")
}

fn start_with_env(dir: &Path, extra: &str, env: &[(&str, &str)], isolation: &str) -> Server {
    let plugins = dir.join("plugins");
    let key = TestKey::generate();
    write_bundle(&plugins.join("fs"), FS, &plugin_library(FS, &[]), None, Some(&key));
    write_bundle(&plugins.join("secret"), SECRET, &plugin_library(SECRET, &[]), None, Some(&key));
    let root = dir.join("root");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("notes.txt"), "hello\n").unwrap();
    let key_line = key.public_text().lines().nth(1).unwrap().to_owned();
    let config = dir.join("quiver.yaml");
    std::fs::write(
        &config,
        format!(
            "plugins_dir: plugins\n{rescan}trusted_keys: [{{name: test, key: {key_line}}}]\n\
             isolation: {{default: {isolation}}}\nplugin_config: {{fs-tools: {{root: {root}}}}}\n\
             profiles:\n  agent: {{mode: hybrid, approval: allow, eager: [fs_edit, fs_read]}}\n\
             server:\n  auth:\n    operators: [ops]\n    tokens: [{{principal: ops, sha256: {sha}}}, {{principal: agent, sha256: {agent}}}]\n{extra}",
            root = root.display(),
            rescan = if extra.contains("rescan_interval_ms") { "" } else { "rescan_interval_ms: 0\n" },
            sha = quiver_manifest::sha256_hex(TOKEN.as_bytes()),
            agent = quiver_manifest::sha256_hex(AGENT_TOKEN.as_bytes()),
        ),
    )
    .unwrap();
    serve_http(dir, &config, env)
}

/// `quiver --config CONFIG serve --http 127.0.0.1:0` in `dir` with `env` added, once it has
/// said where it listens.
pub(crate) fn serve_http(dir: &Path, config: &Path, env: &[(&str, &str)]) -> Server {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_quiver"));
    cmd.arg("--config")
        .arg(config)
        .args(["serve", "--http", "127.0.0.1:0"])
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    let seen = lines.clone();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(rest) = line.split("serving MCP at http://").nth(1) {
                let _ = tx.send(rest.trim_end_matches("/mcp").to_owned());
            }
            seen.lock().unwrap().push(line);
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("the server says where it listens: {:?}", lines.lock().unwrap()));
    Server { child, addr, stderr: lines }
}

fn bearer() -> String {
    format!("Bearer {TOKEN}")
}

/// An initialized MCP session; returns its id.
fn open(addr: &str) -> String {
    quiver_tests::open_http_session(addr, TOKEN, "ops-test")
}

fn request(addr: &str, session: &str, method: &str, params: Value) -> Value {
    let auth = bearer();
    let req = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
    let (status, _, body) = http_post(
        addr,
        &[JSON, ACCEPT, ("Mcp-Session-Id", session), ("Authorization", &auth)],
        req.to_string().as_bytes(),
    );
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let reply = mcp_messages(&body).into_iter().find(|m| m.get("id") == Some(&json!(7))).expect("a response");
    // A JSON-RPC error (an unknown tool is one) reads as a failed result here.
    if reply.get("error").is_some() {
        return json!({"isError": true, "error": reply["error"]});
    }
    reply["result"].clone()
}

fn call(addr: &str, session: &str, tool: &str, args: Value) -> Value {
    request(addr, session, "tools/call", json!({"name": tool, "arguments": args}))
}

fn scrape(addr: &str) -> String {
    let auth = bearer();
    let (status, headers, body) = http_get(addr, "/metrics", &[("Authorization", &auth)]);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let ctype = headers.iter().find(|(k, _)| k == "content-type").map(|(_, v)| v.as_str()).unwrap_or("");
    assert!(ctype.starts_with("text/plain; version=0.0.4"), "{ctype}");
    String::from_utf8(body).unwrap()
}

/// The value of one series (`name{labels}` exactly as rendered), or 0 when absent.
fn series(text: &str, name: &str) -> f64 {
    text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok()).unwrap_or(0.0)
}

#[test]
fn metrics_count_a_scripted_session_per_tool_action_lane_and_code() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), "");
    let addr = server.addr.clone();

    // Unauthenticated scrapes are refused, like /mcp.
    let (status, headers, _) = http_get(&addr, "/metrics", &[]);
    assert_eq!(status, 401);
    assert!(headers.iter().any(|(k, _)| k == "www-authenticate"), "{headers:?}");
    let (status, _, _) = http_get(&addr, "/metrics", &[("Authorization", "Bearer wrong")]);
    assert_eq!(status, 401);
    // An authenticated principal that is not an operator may not read them either (they name
    // every tool, whatever its scopes).
    let (status, _, body) = http_get(&addr, "/metrics", &[("Authorization", &format!("Bearer {AGENT_TOKEN}"))]);
    assert_eq!(status, 403);
    assert!(String::from_utf8_lossy(&body).contains("server.auth.operators"));

    let s = open(&addr);
    let listed = request(&addr, &s, "tools/list", json!({}));
    assert!(listed.to_string().contains("fs_edit"), "{listed}");
    let ok = |r: &Value| assert_ne!(r["isError"], json!(true), "{r}");
    // Typed: three writes and one append of fs_edit, one fs_read.
    for i in 0..3 {
        ok(&call(&addr, &s, "fs_edit", json!({"action": "write", "path": format!("w{i}.txt"), "content": "x"})));
    }
    ok(&call(&addr, &s, "fs_edit", json!({"action": "append", "path": "w0.txt", "content": "y"})));
    ok(&call(&addr, &s, "fs_read", json!({"path": "notes.txt"})));
    // Alias lane: write_file is fs_edit's action `write`.
    ok(&call(&addr, &s, "write_file", json!({"path": "alias.txt", "content": "z"})));
    // Generic lane: two calls through run_tool.
    ok(&call(&addr, &s, "run_tool", json!({"name": "fs_edit", "arguments": {"action": "delete", "path": "w2.txt"}})));
    ok(&call(&addr, &s, "run_tool", json!({"name": "fs_read", "arguments": {"path": "notes.txt"}})));
    // Failures: a bad argument (typed), an unknown tool (never a label), a run_tool envelope
    // without a name.
    let bad = call(&addr, &s, "fs_edit", json!({"action": "write", "content": "no path"}));
    assert_eq!(bad["isError"], json!(true), "{bad}");
    let unknown = call(&addr, &s, "zz_secret_probe_tool", json!({}));
    assert_eq!(unknown["isError"], json!(true), "{unknown}");
    let envelope = call(&addr, &s, "run_tool", json!({"arguments": {}}));
    assert_eq!(envelope["isError"], json!(true), "{envelope}");
    // Search: one with hits, one with none.
    ok(&call(&addr, &s, "tool_search", json!({"query": "read a text file"})));
    ok(&call(&addr, &s, "tool_search", json!({"query": "qqzzyyxx wwvvkk"})));

    let m = scrape(&addr);
    let v = |name: &str| series(&m, name);
    // Per tool and lane.
    assert_eq!(v(r#"quiver_tool_calls_total{tool="fs_edit",lane="typed",status="ok"}"#), 4.0, "{m}");
    assert_eq!(v(r#"quiver_tool_calls_total{tool="fs_edit",lane="typed",status="error"}"#), 1.0, "{m}");
    assert_eq!(v(r#"quiver_tool_calls_total{tool="fs_edit",lane="alias",status="ok"}"#), 1.0, "{m}");
    assert_eq!(v(r#"quiver_tool_calls_total{tool="fs_edit",lane="generic",status="ok"}"#), 1.0, "{m}");
    assert_eq!(v(r#"quiver_tool_calls_total{tool="fs_read",lane="typed",status="ok"}"#), 1.0, "{m}");
    assert_eq!(v(r#"quiver_tool_calls_total{tool="fs_read",lane="generic",status="ok"}"#), 1.0, "{m}");
    // Per effective action of the consolidated tool (the alias counts as `write`).
    assert_eq!(v(r#"quiver_tool_action_calls_total{tool="fs_edit",action="write",status="ok"}"#), 4.0, "{m}");
    assert_eq!(v(r#"quiver_tool_action_calls_total{tool="fs_edit",action="append",status="ok"}"#), 1.0, "{m}");
    assert_eq!(v(r#"quiver_tool_action_calls_total{tool="fs_edit",action="delete",status="ok"}"#), 1.0, "{m}");
    assert_eq!(v(r#"quiver_tool_action_duration_seconds_count{tool="fs_edit",action="write"}"#), 5.0, "{m}");
    // Latency histograms: every fs_edit call, the +Inf bucket equal to the count.
    assert_eq!(v(r#"quiver_tool_call_duration_seconds_count{tool="fs_edit"}"#), 7.0, "{m}");
    assert_eq!(v(r#"quiver_tool_call_duration_seconds_bucket{tool="fs_edit",le="+Inf"}"#), 7.0, "{m}");
    // Lanes overall: the unknown tool counts as typed, the bad envelope as generic.
    assert_eq!(v(r#"quiver_calls_total{lane="typed",status="ok"}"#), 5.0, "{m}");
    assert_eq!(v(r#"quiver_calls_total{lane="typed",status="error"}"#), 2.0, "{m}");
    assert_eq!(v(r#"quiver_calls_total{lane="alias",status="ok"}"#), 1.0, "{m}");
    assert_eq!(v(r#"quiver_calls_total{lane="generic",status="ok"}"#), 2.0, "{m}");
    assert_eq!(v(r#"quiver_calls_total{lane="generic",status="error"}"#), 1.0, "{m}");
    assert_eq!(v(r#"quiver_call_duration_seconds_count{lane="typed"}"#), 7.0, "{m}");
    // Errors by code and validation failures.
    assert_eq!(v(r#"quiver_call_errors_total{code="unknown_tool"}"#), 1.0, "{m}");
    assert_eq!(v(r#"quiver_call_errors_total{code="invalid_arguments"}"#), 2.0, "{m}");
    assert_eq!(v(r#"quiver_tool_errors_total{tool="fs_edit",code="invalid_arguments"}"#), 1.0, "{m}");
    assert_eq!(v(r#"quiver_validation_failures_total{lane="typed"}"#), 1.0, "{m}");
    assert_eq!(v(r#"quiver_validation_failures_total{lane="generic"}"#), 1.0, "{m}");
    // Meta tools and search.
    assert_eq!(v(r#"quiver_meta_calls_total{tool="run_tool"}"#), 3.0, "{m}");
    assert_eq!(v(r#"quiver_meta_calls_total{tool="tool_search"}"#), 2.0, "{m}");
    assert_eq!(v("quiver_tool_search_zero_results_total"), 1.0, "{m}");
    // Sessions, surfaces per profile, the catalog, breakers.
    assert_eq!(v("quiver_sessions_active"), 1.0, "{m}");
    assert_eq!(v("quiver_sessions_total"), 1.0, "{m}");
    assert!(v(r#"quiver_surface_bytes_count{profile="agent"}"#) >= 1.0, "{m}");
    assert!(v(r#"quiver_surface_bytes_sum{profile="agent"}"#) > 256.0, "{m}");
    assert_eq!(v("quiver_plugins_loaded"), 1.0, "{m}");
    // secret-plugin was refused: its secret is not configured.
    assert_eq!(v(r#"quiver_bundle_rejections_total{stage="secrets"}"#), 1.0, "{m}");
    assert!(v("quiver_tools_loaded") >= 5.0, "{m}");
    assert_eq!(v(r#"quiver_tool_breaker_state{tool="fs_edit"}"#), 0.0, "{m}");
    // Bounded labels: what a caller sends never becomes a label value.
    assert!(!m.contains("zz_secret_probe_tool") && !m.contains("qqzzyyxx"), "{m}");
    assert!(m.contains("# TYPE quiver_tool_call_duration_seconds histogram"), "{m}");
    assert!(m.contains("# HELP quiver_tool_calls_total"), "{m}");

    // `quiver stats URL` reads the same figures from the running server.
    let stats = |token: Option<&str>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_quiver"));
        cmd.args(["--json", "stats", &format!("http://{addr}/metrics")]).env_remove("QUIVER_TOKEN");
        if let Some(t) = token {
            cmd.args(["--token", t]);
        }
        cmd.output().unwrap()
    };
    let out = stats(Some(TOKEN));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["tools"]["fs_edit"]["calls"], json!(7.0), "{v}");
    assert_eq!(v["tools"]["fs_edit"]["errors"], json!(1.0), "{v}");
    assert_eq!(v["lanes"]["generic"]["calls"], json!(3.0), "{v}");
    assert_eq!(v["errors"]["unknown_tool"], json!(1.0), "{v}");
    let out = stats(None);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--token"), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Rate limits from the configuration: a burst over a session's limit is refused with
/// `rate_limited` and a retry hint; other tools and other sessions are unaffected; the refusal
/// is counted per tool and scope.
#[test]
fn a_burst_over_a_rate_limit_is_refused_with_a_retry_hint_and_nothing_else_is_affected() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), "rate_limits:\n  fs_read:\n    session: {per_minute: 60, burst: 3}\n");
    let addr = server.addr.clone();
    let s = open(&addr);
    let read = |session: &str| call(&addr, session, "fs_read", json!({"path": "notes.txt"}));
    for _ in 0..3 {
        let r = read(&s);
        assert_ne!(r["isError"], json!(true), "{r}");
    }
    let refused = read(&s);
    assert_eq!(refused["isError"], json!(true), "{refused}");
    let text = refused.to_string();
    assert!(text.contains("rate_limited") && text.contains("per session"), "{text}");
    let retry: u64 = text
        .split("retry_after_ms")
        .nth(1)
        .and_then(|rest| {
            rest.trim_start_matches(|c: char| !c.is_ascii_digit()).split(|c: char| !c.is_ascii_digit()).next()
        })
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no retry_after_ms in {text}"));
    assert!((1..=1000).contains(&retry), "one token a second: {retry} ms in {text}");
    // Another tool in the same session, and the same tool in another session, still run.
    let stat = call(&addr, &s, "fs_stat", json!({"path": "notes.txt"}));
    assert_ne!(stat["isError"], json!(true), "{stat}");
    let other = open(&addr);
    let r = read(&other);
    assert_ne!(r["isError"], json!(true), "{r}");
    let m = scrape(&addr);
    assert_eq!(series(&m, r#"quiver_rate_limited_total{tool="fs_read",scope="session"}"#), 1.0, "{m}");
    assert_eq!(series(&m, r#"quiver_call_errors_total{code="rate_limited"}"#), 1.0, "{m}");
}

/// FNV-1a as secret-plugin computes it.
fn fnv1a(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// A tool receives the secret its manifest declares, from the environment variable the
/// configuration names; the value appears in no response, log line (at trace level), transcript,
/// metric or error.
#[test]
fn a_declared_secret_reaches_its_tool_and_no_output_channel() {
    secret_reaches_its_tool_only("in_process");
}

/// The same through a sandboxed worker process (whose environment is empty: the secret travels
/// in the request).
#[test]
fn a_declared_secret_reaches_an_isolated_tool_and_no_output_channel() {
    secret_reaches_its_tool_only("process");
}

fn secret_reaches_its_tool_only(isolation: &str) {
    const VALUE: &str = "sk-live-7Q2x9ZpL4mW8vR3nT6yB1cD5";
    let dir = tempfile::tempdir().unwrap();
    let server = start_with_env(
        dir.path(),
        "secrets:\n  secret-plugin:\n    API_TOKEN: {env: QV_TEST_API_TOKEN}\ntranscripts:\n  dir: transcripts\n",
        &[("QV_TEST_API_TOKEN", VALUE), ("RUST_LOG", "trace")],
        isolation,
    );
    let addr = server.addr.clone();
    let s = open(&addr);
    let mut seen = Vec::new();
    seen.push(request(&addr, &s, "tools/list", json!({})).to_string());
    let r = call(&addr, &s, "secret_probe", json!({}));
    assert_eq!(r["structuredContent"]["received"], json!(true), "{r}");
    assert_eq!(r["structuredContent"]["length"], json!(VALUE.len()), "{r}");
    assert_eq!(r["structuredContent"]["fnv1a"], json!(fnv1a(VALUE.as_bytes())), "{r}");
    seen.push(r.to_string());
    // Error paths: bad arguments, through run_tool, a wrong tool name, and the resource.
    seen.push(call(&addr, &s, "secret_probe", json!({"unexpected": 1})).to_string());
    seen.push(call(&addr, &s, "run_tool", json!({"name": "secret_probe", "arguments": {}})).to_string());
    seen.push(call(&addr, &s, "secret_prob", json!({})).to_string());
    seen.push(request(&addr, &s, "resources/read", json!({"uri": "quiver://tools/secret_probe"})).to_string());
    seen.push(scrape(&addr));
    // Let the transcript writer and the log lines catch up, then stop the server.
    std::thread::sleep(Duration::from_millis(300));
    let log = server.stderr.lock().unwrap().join("\n");
    assert!(log.contains("secret_probe"), "trace logging ran: {log}");
    let mut transcripts = String::new();
    for e in std::fs::read_dir(dir.path().join("transcripts")).unwrap().flatten() {
        transcripts.push_str(&std::fs::read_to_string(e.path()).unwrap());
    }
    assert!(transcripts.contains("secret_probe"), "the calls were transcribed: {transcripts}");
    for (channel, text) in [("responses", seen.join("\n")), ("stderr log", log), ("transcripts", transcripts)] {
        assert!(!text.contains(VALUE), "the secret leaked into the {channel}");
        assert!(!text.contains(&VALUE[3..15]), "part of the secret leaked into the {channel}");
    }
    drop(server);
}

/// An operator rotating a secret file needs no restart: the next rescan reads it again and the
/// tool's next call carries the new value (and never the old one again).
#[test]
fn a_rotated_secret_file_reaches_the_tool_after_the_next_rescan() {
    const OLD: &str = "sk-old-0f3b8c1d9e2a7465";
    const NEW: &str = "sk-new-5a6b7c8d9e0f1234";
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("api-token");
    std::fs::write(&token, format!("{OLD}\n")).unwrap();
    let server =
        start(dir.path(), "rescan_interval_ms: 100\nsecrets:\n  secret-plugin:\n    API_TOKEN: {file: api-token}\n");
    let addr = server.addr.clone();
    let s = open(&addr);
    let r = call(&addr, &s, "secret_probe", json!({}));
    assert_eq!(r["structuredContent"]["fnv1a"], json!(fnv1a(OLD.as_bytes())), "{r}");
    // Rotate: write the new value next to the file and rename it over (as operators and secret
    // managers do), so no rescan reads a half-written file.
    let tmp = dir.path().join("api-token.tmp");
    std::fs::write(&tmp, format!("{NEW}\n")).unwrap();
    std::fs::rename(&tmp, &token).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut last = Value::Null;
    while std::time::Instant::now() < deadline {
        last = call(&addr, &s, "secret_probe", json!({}));
        if last["structuredContent"]["fnv1a"] == json!(fnv1a(NEW.as_bytes())) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(last["structuredContent"]["fnv1a"], json!(fnv1a(NEW.as_bytes())), "the rotated value arrives: {last}");
    assert_eq!(last["structuredContent"]["length"], json!(NEW.len()), "{last}");
    let log = server.stderr.lock().unwrap().join("\n");
    assert!(!log.contains(OLD) && !log.contains(NEW), "no secret in the log: {log}");
}

/// A bundle refused because its secret file did not exist yet loads once the operator creates
/// the file: the next rescan reads the secret again and checks the bundle again, no restart.
#[test]
fn a_bundle_refused_for_a_missing_secret_file_loads_once_the_file_is_there() {
    const VALUE: &str = "sk-late-3e4f5a6b7c8d9e0f";
    let dir = tempfile::tempdir().unwrap();
    let server =
        start(dir.path(), "rescan_interval_ms: 100\nsecrets:\n  secret-plugin:\n    API_TOKEN: {file: api-token}\n");
    let addr = server.addr.clone();
    let s = open(&addr);
    let first = call(&addr, &s, "secret_probe", json!({}));
    assert_eq!(first["isError"], json!(true), "refused while the file is missing: {first}");
    std::fs::write(dir.path().join("api-token"), format!("{VALUE}\n")).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut last = Value::Null;
    while std::time::Instant::now() < deadline {
        last = call(&addr, &open(&addr), "secret_probe", json!({}));
        if last["structuredContent"]["received"] == json!(true) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(last["structuredContent"]["fnv1a"], json!(fnv1a(VALUE.as_bytes())), "the plugin loads: {last}");
    let log = server.stderr.lock().unwrap().join("\n");
    assert!(!log.contains(VALUE), "no secret in the log: {log}");
}

/// A declared secret the configuration does not supply, or whose variable is unset, refuses the
/// bundle at load with a message naming the plugin, the secret and how to supply it.
#[test]
fn a_missing_secret_refuses_the_bundle_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let key = TestKey::generate();
    write_bundle(&dir.path().join("plugins/secret"), SECRET, &plugin_library(SECRET, &[]), None, Some(&key));
    let key_line = key.public_text().lines().nth(1).unwrap().to_owned();
    let base = format!("plugins_dir: plugins\ntrusted_keys: [{{name: test, key: {key_line}}}]\n");
    let list = |config: &str| {
        std::fs::write(dir.path().join("quiver.yaml"), config).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_quiver"))
            .args(["--config", "quiver.yaml", "list"])
            .current_dir(dir.path())
            .env_remove("QV_UNSET_TOKEN")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "a rejected bundle makes list fail");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = list(&base);
    assert!(
        err.contains("secret-plugin")
            && err.contains("`API_TOKEN`")
            && err.contains("secrets:")
            && err.contains("env:"),
        "{err}"
    );
    let err = list(&format!("{base}secrets:\n  secret-plugin:\n    API_TOKEN: {{env: QV_UNSET_TOKEN}}\n"));
    assert!(
        err.contains("secret-plugin") && err.contains("API_TOKEN") && err.contains("`QV_UNSET_TOKEN` is not set"),
        "{err}"
    );
    let err = list(&format!("{base}secrets:\n  secret-plugin:\n    API_TOKEN: {{file: missing/token}}\n"));
    assert!(err.contains("missing/token") && err.contains("cannot be read"), "{err}");
}

/// The `chromium` binary, when installed. CI installs it (`.ci/run`) and sets
/// `QUIVER_REQUIRE_CHROMIUM`, so the browser test cannot silently skip there.
fn chromium() -> Option<&'static str> {
    let ok = Command::new("chromium").arg("--version").output().is_ok_and(|o| o.status.success());
    if ok {
        return Some("chromium");
    }
    assert!(
        std::env::var_os("QUIVER_REQUIRE_CHROMIUM").is_none(),
        "QUIVER_REQUIRE_CHROMIUM is set but the `chromium` command is not installed (apt-get install chromium)"
    );
    eprintln!("note: `chromium` is not installed; skipping the dashboard browser test");
    None
}

/// Headless Chromium loading `url`: `--dump-dom` (returns the rendered DOM) or, with `shot`, a
/// screenshot written there.
fn browse(browser: &str, url: &str, shot: Option<&Path>) -> String {
    let profile = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(browser);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--virtual-time-budget=8000",
        "--window-size=1280,2200",
    ])
    .arg(format!("--user-data-dir={}", profile.path().display()));
    match shot {
        Some(p) => cmd.arg(format!("--screenshot={}", p.display())),
        None => cmd.arg("--dump-dom"),
    };
    let out = cmd.arg(url).stdin(Stdio::null()).output().expect("run chromium");
    assert!(out.status.success(), "chromium failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The operator dashboard in a real browser against a running server after a scripted session:
/// tool count, the session's row, the charts, the rejected bundle and a search with ranks and
/// scores; its data is refused without the bearer token, to the browser and to plain requests.
#[test]
fn the_dashboard_renders_in_headless_chromium_behind_the_same_auth() {
    let Some(browser) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), "");
    let addr = server.addr.clone();
    let s = open(&addr);
    for _ in 0..3 {
        call(&addr, &s, "fs_read", json!({"path": "notes.txt"}));
    }
    call(&addr, &s, "fs_edit", json!({"action": "write", "path": "ui.txt", "content": "x"}));
    call(&addr, &s, "fs_edit", json!({"action": "write"}));

    // Plain requests: the data needs the token; the page shell holds none.
    for path in ["/ui/api/state", "/ui/api/search?q=read&profile=agent"] {
        let (status, _, _) = http_get(&addr, path, &[]);
        assert_eq!(status, 401, "{path}");
        let (status, _, _) = http_get(&addr, path, &[("Authorization", &format!("Bearer {AGENT_TOKEN}"))]);
        assert_eq!(status, 403, "{path}: not an operator");
    }
    let (status, _, shell) = http_get(&addr, "/ui", &[]);
    assert_eq!(status, 200);
    let shell = String::from_utf8(shell).unwrap();
    assert!(!shell.contains("fs_read") && !shell.contains("ops-test"), "the shell carries no data");
    let auth = bearer();
    let (status, _, state) = http_get(&addr, "/ui/api/state", &[("Authorization", &auth)]);
    assert_eq!(status, 200);
    let state: Value = serde_json::from_slice(&state).unwrap();
    let n_tools = state["tools"].as_array().unwrap().len();
    assert_eq!(n_tools, 5, "fs-tools' five tools: {state}");

    // Without the token the browser shows the refusal and no data.
    let dom = browse(browser, &format!("http://{addr}/ui"), None);
    assert!(dom.contains("authentication required"), "{dom}");
    assert!(!dom.contains("ops-test"), "{dom}");

    // With it: the rendered page.
    let url = format!("http://{addr}/ui?q=read%20a%20file&profile=agent#token={TOKEN}");
    let dom = browse(browser, &url, None);
    assert!(dom.contains(&format!(r#"id="tool-count" class="figure">{n_tools}<"#)), "tool count:\n{dom}");
    assert!(dom.contains(r#"id="session-count" class="figure">1<"#), "{dom}");
    let session_row = dom.split(r#"<tr class="session">"#).nth(1).unwrap_or_else(|| panic!("no session row:\n{dom}"));
    let session_row = session_row.split("</tr>").next().unwrap();
    assert!(session_row.contains("ops-test") && session_row.contains("agent"), "{session_row}");
    let chart = dom.split(r#"<svg id="calls-chart""#).nth(1).unwrap_or_else(|| panic!("no calls chart:\n{dom}"));
    let chart = chart.split("</svg>").next().unwrap();
    assert!(chart.contains(r#"data-tool="fs_read""#) && chart.contains("3 calls"), "{chart}");
    assert!(chart.contains("<rect"), "{chart}");
    assert!(dom.contains(r#"<svg id="latency-chart""#), "{dom}");
    // The catalog: fs_edit's deprecated alias with its planned removal.
    assert!(dom.contains("write_file (deprecated, action write, removal planned in 1.0.0)"), "{dom}");
    // Provenance and the rejected bundle.
    assert!(dom.contains("in_process"), "{dom}");
    let rejected = dom.split(r#"<table id="rejections">"#).nth(1).unwrap().split("</table>").next().unwrap();
    assert!(rejected.contains("secrets") && rejected.contains("API_TOKEN"), "{rejected}");
    // The search playground: ranked hits with scores.
    let results = dom.split(r#"<table id="search-results">"#).nth(1).unwrap().split("</table>").next().unwrap();
    let first = results.split(r#"<tr class="hit">"#).nth(1).unwrap_or_else(|| panic!("no hits:\n{results}"));
    assert!(first.contains(">1<") && first.contains("fs_read"), "{first}");

    // Screenshots, kept for people to look at (target/ui-screenshots/).
    let shots = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/ui-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    for (name, url) in [("dashboard.png", url.as_str()), ("dashboard-no-token.png", &format!("http://{addr}/ui"))] {
        let path = shots.join(name);
        let _ = std::fs::remove_file(&path);
        browse(browser, url, Some(&path));
        let png = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(png.starts_with(b"\x89PNG") && png.len() > 10_000, "{} is not a real screenshot", path.display());
    }
}

/// SIGTERM, what service managers and container runtimes send to stop a process, stops the
/// server as Ctrl-C does: it says so, exits 0, and the call transcripts are flushed (it used to
/// end the process on the spot).
#[test]
fn sigterm_stops_the_http_server_gracefully() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = start(dir.path(), "transcripts:\n  dir: transcripts\n");
    let addr = server.addr.clone();
    let s = open(&addr);
    let r = call(&addr, &s, "fs_read", json!({"path": "notes.txt"}));
    assert_eq!(r["isError"], json!(false), "{r}");
    let pid = server.child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let stopped = std::time::Instant::now();
    let status = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        assert!(stopped.elapsed() < Duration::from_secs(30), "still running 30 s after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    let log = server.stderr.lock().unwrap().join("\n");
    assert!(status.success(), "{status:?}\n{log}");
    assert!(log.contains("SIGTERM: shutting down"), "{log}");
    let mut transcripts = String::new();
    for e in std::fs::read_dir(dir.path().join("transcripts")).unwrap().flatten() {
        transcripts.push_str(&std::fs::read_to_string(e.path()).unwrap());
    }
    assert!(transcripts.contains("fs_read"), "the call was transcribed before the exit: {transcripts}");
}

/// `quiver stats URL` with `args` added; returns (exit code, stdout, stderr).
fn stats_of(url: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_quiver"))
        .args(args)
        .args(["stats", url])
        .env_remove("QUIVER_TOKEN")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A fresh server has no rejection or rate-limit series at all: `stats` counts them 0, not -0
/// (the sum of no values).
#[test]
fn stats_of_a_fresh_server_count_absent_series_as_zero() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("plugins")).unwrap();
    let config = dir.path().join("quiver.yaml");
    std::fs::write(&config, "plugins_dir: plugins\nrescan_interval_ms: 0\n").unwrap();
    let server = serve_http(dir.path(), &config, &[]);
    let url = format!("http://{}/metrics", server.addr);
    let (code, out, err) = stats_of(&url, &[]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("0 plugins, 0 tools, 0 sessions open; 0 bundle rejections; 0 calls refused"), "{out}");
    assert!(!out.contains("-0"), "{out}");
    let (code, out, err) = stats_of(&url, &["--json"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(!out.contains("-0"), "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    for key in ["bundle_rejections", "rate_limited", "plugins_loaded", "sessions_active"] {
        assert_eq!(v[key].as_f64().map(f64::is_sign_negative), Some(false), "{key}: {v:#}");
    }
    assert_eq!(v["lanes"]["typed"], json!({"calls": 0.0, "errors": 0.0}), "{v:#}");
}

/// A URL that answers 200 with something other than Prometheus text (a JSON page here) is an
/// error naming the URL, what it answered, and where to point instead; not a page of zeros.
#[test]
fn stats_of_a_url_that_is_not_prometheus_text_fail_and_say_what_came_back() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().map_while(Result::ok) {
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let body = r#"{"status": "ok", "calls": 7}"#;
            let _ = write!(stream, "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{body}");
        }
    });
    let url = format!("http://{addr}/status");
    for args in [&[][..], &["--json"]] {
        let (code, out, err) = stats_of(&url, args);
        assert_eq!(code, Some(1), "{args:?}\nstdout:\n{out}\nstderr:\n{err}");
        assert!(out.is_empty(), "{out}");
        assert!(err.contains(&url) && err.contains("not Prometheus"), "{err}");
        assert!(err.contains("application/json") && err.contains(r#"{"status": "ok""#), "{err}");
        assert!(err.contains("/metrics"), "{err}");
    }
}

/// The server's address with a trailing slash means its metrics, as without one; a path the
/// server does not serve (404) is an error that says where the metrics are.
#[test]
fn stats_of_a_server_root_reads_its_metrics_and_a_wrong_path_names_the_right_one() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("plugins")).unwrap();
    let config = dir.path().join("quiver.yaml");
    std::fs::write(&config, "plugins_dir: plugins\nrescan_interval_ms: 0\n").unwrap();
    let server = serve_http(dir.path(), &config, &[]);
    let (code, out, err) = stats_of(&format!("http://{}/", server.addr), &[]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("0 plugins, 0 tools"), "{out}");
    let url = format!("http://{}/metric", server.addr);
    let (code, out, err) = stats_of(&url, &[]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(err.contains("404") && err.contains(&format!("http://{}/metrics", server.addr)), "{err}");
}

/// `stats` and `replay` of a folder (the transcripts folder itself, a natural first try) name
/// the transcripts in it to pass instead, and of a missing path say where transcripts are
/// written; not a bare "Is a directory".
#[test]
fn stats_and_replay_of_a_folder_name_the_transcripts_to_pass() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("plugins")).unwrap();
    std::fs::create_dir_all(dir.path().join("transcripts")).unwrap();
    std::fs::write(dir.path().join("quiver.yaml"), "plugins_dir: plugins\nrescan_interval_ms: 0\n").unwrap();
    std::fs::write(dir.path().join("transcripts/s-1.jsonl"), "").unwrap();
    std::fs::write(dir.path().join("transcripts/s-2.jsonl"), "").unwrap();
    std::fs::create_dir_all(dir.path().join("empty")).unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_quiver"))
            .current_dir(dir.path())
            .args(args)
            .env_remove("RUST_LOG")
            .output()
            .unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    for command in ["stats", "replay"] {
        let (code, err) = run(&[command, "transcripts"]);
        assert_ne!(code, Some(0), "{command}: {err}");
        assert!(err.contains("transcripts is a folder"), "{command}: {err}");
        assert!(err.contains("s-1.jsonl") && err.contains("s-2.jsonl"), "{command}: {err}");
        assert!(!err.contains("Is a directory"), "{command}: {err}");
        let (_, err) = run(&[command, "empty"]);
        assert!(err.contains("empty is a folder") && err.contains("no transcript"), "{command}: {err}");
        assert!(err.contains("transcripts.dir"), "{command}: {err}");
        let (_, err) = run(&[command, "missing.jsonl"]);
        assert!(err.contains("missing.jsonl") && err.contains("does not exist"), "{command}: {err}");
        assert!(err.contains("transcripts.dir"), "{command}: {err}");
    }
}
