//! Upstream MCP servers (`sources:`) as `quiver list` and `quiver serve` report them, against a
//! tiny stdio server written in plain Python (no SDK) that lists the tools it is given.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::operations::serve_http;

/// An MCP server over stdio: answers `initialize` with the protocol version it is asked for,
/// `tools/list` with the tools in the JSON file named by its first argument, `ping` with `{}`.
const TINY_SERVER: &str = r#"
import json, sys
tools = json.load(open(sys.argv[1]))
for line in sys.stdin:
    if not line.strip():
        continue
    m = json.loads(line)
    if "id" not in m or "method" not in m:
        continue
    method = m["method"]
    if method == "initialize":
        result = {"protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "tiny", "version": "1.0.0"}}
    elif method == "tools/list":
        result = {"tools": tools}
    elif method == "ping":
        result = {}
    else:
        reply = {"jsonrpc": "2.0", "id": m["id"], "error": {"code": -32601, "message": "no " + method}}
        print(json.dumps(reply), flush=True)
        continue
    print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": result}), flush=True)
"#;

/// The Python 3 interpreter (the test suite needs one, like the e2e tests).
fn python() -> PathBuf {
    let out = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("these tests need python3 on PATH");
    assert!(out.status.success(), "python3 does not run: {}", String::from_utf8_lossy(&out.stderr));
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// A project in `dir` with an empty plugins folder and one source, `tiny`, listing `tools`;
/// returns its configuration file.
fn project(dir: &Path, tools: &Value) -> PathBuf {
    std::fs::create_dir_all(dir.join("plugins")).unwrap();
    std::fs::write(dir.join("server.py"), TINY_SERVER).unwrap();
    std::fs::write(dir.join("tools.json"), tools.to_string()).unwrap();
    let config = dir.join("quiver.yaml");
    std::fs::write(
        &config,
        format!(
            "plugins_dir: plugins\nrescan_interval_ms: 0\nsources:\n  - name: tiny\n    command: {}\n    args: [{}, {}]\n",
            json!(python().display().to_string()),
            json!(dir.join("server.py").display().to_string()),
            json!(dir.join("tools.json").display().to_string()),
        ),
    )
    .unwrap();
    config
}

fn quiver(dir: &Path, config: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_quiver"))
        .arg("--config")
        .arg(config)
        .args(args)
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .env("XDG_CONFIG_HOME", dir.join("xdg"))
        .output()
        .unwrap()
}

fn tool(name: &str, schema: Value) -> Value {
    json!({"name": name, "description": format!("The {name} tool."), "inputSchema": schema})
}

/// An upstream tool whose input schema does not compile is left out and reported as such: not
/// as a rejected bundle (there is none), and `list` still succeeds. `serve` tells the operator
/// the same and counts no bundle rejection.
#[test]
fn skipped_upstream_tools_are_reported_as_skipped_not_as_rejected_bundles() {
    let broken = tool("broken", json!({"type": "strin"}));
    let good = tool("echo", json!({"type": "object", "properties": {"text": {"type": "string"}}}));
    for (tools, served) in [(json!([broken]), &[][..]), (json!([good, broken]), &["tiny_echo"][..])] {
        let dir = tempfile::tempdir().unwrap();
        let config = project(dir.path(), &tools);
        let out = quiver(dir.path(), &config, &["--json", "list"]);
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.status.code(), Some(0), "{tools}\nstdout:\n{stdout}\nstderr:\n{stderr}");
        assert!(stderr.contains("1 upstream tool(s) not served: `broken`"), "{stderr}");
        assert!(!stderr.contains("rejected"), "{stderr}");
        let v: Value = serde_json::from_str(&stdout).unwrap();
        let names: Vec<&str> = v["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
        assert_eq!(names, served, "{v:#}");

        let server = serve_http(dir.path(), &config, &[]);
        let notice = |lines: &[String]| lines.iter().any(|l| l.contains("1 upstream tool(s) not served: `broken`"));
        let start = Instant::now();
        while !notice(&server.stderr.lock().unwrap()) && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(50));
        }
        let lines = server.stderr.lock().unwrap().clone();
        assert!(notice(&lines), "{lines:#?}");
        assert!(!lines.iter().any(|l| l.contains("rejected")), "{lines:#?}");
        let (status, _, body) = quiver_tests::http_get(&server.addr, "/metrics", &[]);
        let metrics = String::from_utf8_lossy(&body);
        assert_eq!(status, 200, "{metrics}");
        assert!(!metrics.contains("quiver_bundle_rejections_total{"), "{metrics}");
    }
}

/// A source that cannot serve at all (its command does not start) still makes `list` fail, and
/// the summary names it as a source, not as a bundle.
#[test]
fn an_upstream_that_cannot_start_fails_list_as_a_source_not_a_bundle() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("plugins")).unwrap();
    let config = dir.path().join("quiver.yaml");
    let missing = dir.path().join("no-such-server");
    std::fs::write(
        &config,
        format!(
            "plugins_dir: plugins\nsources:\n  - name: gone\n    command: {}\n",
            json!(missing.display().to_string())
        ),
    )
    .unwrap();
    let out = quiver(dir.path(), &config, &["list"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("upstream sources[gone]: down"), "{stderr}");
    assert!(stderr.contains("1 upstream source(s) not served (see above)"), "{stderr}");
    assert!(!stderr.contains("bundle(s) rejected"), "{stderr}");
}

/// One upstream tool that is not a valid MCP tool (no `inputSchema`) is left out and named with
/// what is missing; the server's other tools are served (the whole source used to go down with
/// "tools/list failed: Unexpected response type", naming nothing).
#[test]
fn an_upstream_tool_that_is_not_valid_mcp_is_left_out_and_named() {
    let good = tool("echo", json!({"type": "object", "properties": {"text": {"type": "string"}}}));
    let no_schema = json!({"name": "noSchema", "description": "none"});
    let dir = tempfile::tempdir().unwrap();
    let config = project(dir.path(), &json!([no_schema, good]));
    let out = quiver(dir.path(), &config, &["--json", "list"]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stderr.contains("`noSchema`") && stderr.contains("inputSchema"), "{stderr}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    let names: Vec<&str> = v["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, ["tiny_echo"], "{v:#}");
}
