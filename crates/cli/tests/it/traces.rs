//! Trace export and JSON logs (issue 13) against a real `quiver serve` over stdio with the real
//! conformance-tools plugin: spans exported over OTLP/HTTP to an in-process collector that
//! decodes the protobuf export requests, and a stdio session with JSON logs whose stdout stays
//! pure JSON-RPC.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message;
use quiver_tests::{TestKey, plugin_library, write_bundle};
use serde_json::{Value, json};

const CONFORMANCE: &str = "conformance-tools";
/// The client's span: trace id and span id of the `traceparent` the test sends.
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";
/// An argument value that must appear in no span.
const ARGUMENT: &str = "zz-argument-value-never-exported";

/// One exported span, flattened.
#[derive(Debug, Clone)]
struct Span {
    service: String,
    name: String,
    trace_id: String,
    span_id: String,
    parent: String,
    attributes: BTreeMap<String, String>,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn text(v: &Option<opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match v.as_ref().and_then(|v| v.value.as_ref()) {
        Some(AnyValue::StringValue(s)) => s.clone(),
        Some(AnyValue::IntValue(i)) => i.to_string(),
        Some(AnyValue::BoolValue(b)) => b.to_string(),
        Some(AnyValue::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

/// A minimal OTLP/HTTP collector: accepts POSTs (keep-alive included), decodes each body as an
/// `ExportTraceServiceRequest` and keeps the spans; answers 200 with an empty export response.
fn collector() -> (String, Arc<Mutex<Vec<Span>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let spans = Arc::new(Mutex::new(Vec::new()));
    let sink = spans.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            let sink = sink.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut conn = conn;
                loop {
                    let mut request_line = String::new();
                    if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
                        return;
                    }
                    assert!(request_line.starts_with("POST /v1/traces "), "{request_line}");
                    let mut length = 0usize;
                    let mut ctype = String::new();
                    loop {
                        let mut h = String::new();
                        reader.read_line(&mut h).unwrap();
                        let h = h.trim_end();
                        if h.is_empty() {
                            break;
                        }
                        let (k, v) = h.split_once(':').unwrap();
                        match k.to_ascii_lowercase().as_str() {
                            "content-length" => length = v.trim().parse().unwrap(),
                            "content-type" => ctype = v.trim().to_owned(),
                            _ => {}
                        }
                    }
                    assert_eq!(ctype, "application/x-protobuf", "OTLP/HTTP with protobuf bodies");
                    let mut body = vec![0; length];
                    reader.read_exact(&mut body).unwrap();
                    let req = ExportTraceServiceRequest::decode(body.as_slice()).expect("a protobuf export request");
                    let mut got = Vec::new();
                    for rs in req.resource_spans {
                        let service = rs
                            .resource
                            .iter()
                            .flat_map(|r| &r.attributes)
                            .find(|a| a.key == "service.name")
                            .map(|a| text(&a.value))
                            .unwrap_or_default();
                        for ss in rs.scope_spans {
                            for s in ss.spans {
                                got.push(Span {
                                    service: service.clone(),
                                    name: s.name,
                                    trace_id: hex(&s.trace_id),
                                    span_id: hex(&s.span_id),
                                    parent: hex(&s.parent_span_id),
                                    attributes: s.attributes.iter().map(|a| (a.key.clone(), text(&a.value))).collect(),
                                });
                            }
                        }
                    }
                    sink.lock().unwrap().extend(got);
                    let _ = conn.write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n",
                    );
                }
            });
        }
    });
    (format!("http://{addr}"), spans)
}

/// A project with the conformance-tools bundle; `extra` is appended to quiver.yaml.
fn project(dir: &Path, extra: &str) -> std::path::PathBuf {
    let key = TestKey::generate();
    let plugins = dir.join("plugins");
    write_bundle(&plugins.join("conformance"), CONFORMANCE, &plugin_library(CONFORMANCE, &[]), None, Some(&key));
    let key_line = key.public_text().lines().nth(1).unwrap().to_owned();
    let config = dir.join("quiver.yaml");
    std::fs::write(
        &config,
        format!(
            "plugins_dir: plugins\nrescan_interval_ms: 0\ntrusted_keys: [{{name: test, key: {key_line}}}]\n\
             profiles:\n  agent: {{mode: hybrid, approval: allow}}\n{extra}"
        ),
    )
    .unwrap();
    config
}

/// Runs a stdio session: sends `messages` (one JSON-RPC message per line), waits for the
/// response to each request, closes stdin and waits for the server to exit. Returns stdout
/// and stderr lines.
fn stdio_session(config: &Path, args: &[&str], env: &[(&str, &str)], messages: &[Value]) -> (Vec<String>, Vec<String>) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_quiver"));
    cmd.arg("--config")
        .arg(config)
        .args(args)
        .current_dir(config.parent().unwrap())
        .env_remove("RUST_LOG")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let mut stderr = child.stderr.take().unwrap();
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in stdout.lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut out = Vec::new();
    for m in messages {
        writeln!(stdin, "{m}").unwrap();
        stdin.flush().unwrap();
        if let Some(id) = m.get("id") {
            loop {
                let line = rx.recv_timeout(Duration::from_secs(60)).expect("the server answers");
                let done = serde_json::from_str::<Value>(&line).ok().is_some_and(|v| v.get("id") == Some(id));
                out.push(line);
                if done {
                    break;
                }
            }
        }
    }
    drop(stdin);
    let status = child.wait().unwrap();
    assert!(status.success(), "serve exits cleanly when stdin closes: {status}");
    out.extend(rx.try_iter());
    let err = err.join().unwrap();
    (out, err.lines().map(str::to_owned).collect())
}

fn init_messages() -> Vec<Value> {
    vec![
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "trace-test", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    ]
}

/// One call with the client's `traceparent` in `_meta`: the call span's parent is the client's
/// span in the client's trace, with one child per pipeline stage and one per host-service round
/// trip (progress); attributes name the tool, lane and status and never an argument value.
#[test]
fn a_call_exports_a_span_tree_under_the_clients_traceparent() {
    let (endpoint, spans) = collector();
    let dir = tempfile::tempdir().unwrap();
    let config =
        project(dir.path(), &format!("telemetry:\n  otlp: {{endpoint: '{endpoint}', service_name: quiver-test}}\n"));
    let traceparent = format!("00-{TRACE_ID}-{CLIENT_SPAN}-01");
    let mut messages = init_messages();
    messages.push(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "test_tool_with_progress", "arguments": {},
        "_meta": {"progressToken": "p-1", "traceparent": traceparent, "tracestate": "vendor=abc"}}}));
    // Through the generic lane, with an argument value, and without a traceparent.
    messages.push(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "run_tool", "arguments": {"name": "test_deferred_echo", "arguments": {"text": ARGUMENT}}}}));
    let (out, err) = stdio_session(&config, &["serve"], &[], &messages);
    assert!(out.iter().any(|l| l.contains(r#""id":2"#) && l.contains("result")), "{out:?}\n{err:?}");

    let spans = spans.lock().unwrap().clone();
    let calls: Vec<&Span> = spans.iter().filter(|s| s.name == "quiver.call").collect();
    assert_eq!(calls.len(), 2, "one span per call: {spans:#?}");
    let call = calls.iter().find(|s| s.attributes.get("tool").map(String::as_str) == Some("test_tool_with_progress"));
    let call = call.unwrap_or_else(|| panic!("the progress call's span: {spans:#?}"));
    assert_eq!(call.trace_id, TRACE_ID, "the client's trace continues");
    assert_eq!(call.parent, CLIENT_SPAN, "the call span's parent is the client's span");
    assert_eq!(call.service, "quiver-test");
    assert_eq!(call.attributes["lane"], "typed");
    assert_eq!(call.attributes["status"], "ok");
    assert!(!call.attributes.contains_key("error.code"), "{call:?}");

    let children: Vec<&Span> = spans.iter().filter(|s| s.parent == call.span_id).collect();
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    for c in &children {
        assert_eq!(c.trace_id, TRACE_ID, "{c:?}");
        *names.entry(c.name.as_str()).or_default() += 1;
    }
    for stage in ["resolve", "scopes", "validation", "rate_limit", "approval", "dispatch", "output"] {
        assert_eq!(names.get(stage), Some(&1), "one `{stage}` child of the call span: {names:?}");
    }
    assert_eq!(names.get("host.progress"), Some(&3), "a child per progress report: {names:?}");
    assert_eq!(children.len(), 10, "nothing else under the call: {names:?}");

    // The generic-lane call without a traceparent starts its own trace.
    let generic = calls.iter().find(|s| s.attributes.get("lane").map(String::as_str) == Some("generic")).unwrap();
    assert_eq!(generic.attributes["tool"], "test_deferred_echo");
    assert_ne!(generic.trace_id, TRACE_ID);
    assert!(generic.parent.is_empty(), "a root span: {generic:?}");
    let all = format!("{spans:?}");
    assert!(!all.contains(ARGUMENT), "no argument value in any span: {all}");
}

/// `--log-format json` in stdio mode: stdout carries only JSON-RPC messages and every stderr
/// line is a JSON object with a level and a message.
#[test]
fn json_logs_in_stdio_mode_keep_stdout_pure_json_rpc() {
    let dir = tempfile::tempdir().unwrap();
    let config = project(dir.path(), "");
    let mut messages = init_messages();
    messages.push(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}));
    messages.push(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "test_tool_with_logging", "arguments": {}}}));
    // An unknown tool: an error response, and a warning in the log.
    messages.push(json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {
        "name": "no_such_tool", "arguments": {}}}));
    let (out, err) = stdio_session(&config, &["-vv", "--log-format", "json", "serve"], &[], &messages);
    assert!(out.len() >= 4, "{out:?}");
    for line in &out {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line}"));
        assert_eq!(v["jsonrpc"], "2.0", "{line}");
    }
    assert!(err.len() > 3, "debug logging wrote lines: {err:?}");
    for line in err.iter().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("stderr line is not JSON ({e}): {line}"));
        assert!(v["level"].is_string() && v["message"].is_string(), "{line}");
    }
    assert!(err.iter().any(|l| l.contains("\"tool call\"")), "the call events are logged: {err:?}");

    // QUIVER_LOG_FORMAT and the configuration's telemetry.log_format do the same.
    let config = project(dir.path(), "telemetry:\n  log_format: json\n");
    let (_, err) = stdio_session(&config, &["-v", "serve"], &[], &init_messages());
    assert!(!err.is_empty() && err.iter().all(|l| serde_json::from_str::<Value>(l).is_ok()), "{err:?}");
    let config = project(dir.path(), "");
    let (_, err) = stdio_session(&config, &["-v", "serve"], &[("QUIVER_LOG_FORMAT", "json")], &init_messages());
    assert!(!err.is_empty() && err.iter().all(|l| serde_json::from_str::<Value>(l).is_ok()), "{err:?}");
}
