//! Start-up with a worker plugin (the real fs-tools library in a sandboxed `quiver worker`):
//! `quiver serve` answers `initialize` without waiting for a worker it has started before, yet
//! its first `tools/list` is complete and a call right after `initialize` succeeds.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use super::QUIVER;

/// A project with the real fs-tools library, signed, run in a worker process.
fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let q = |args: &[&str]| {
        let out = Command::new(QUIVER).current_dir(dir.path()).args(args).env_remove("RUST_LOG").output().unwrap();
        assert!(out.status.success(), "quiver {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    };
    q(&["keygen", "--out-dir", "keys", "--name", "test"]);
    std::fs::write(
        dir.path().join("quiver.yaml"),
        "plugins_dir: plugins\nstate_dir: state\ntrusted_keys:\n  - path: keys/test.pub\nisolation:\n  plugins:\n    fs-tools: process\nprofiles:\n  all: {mode: full, scopes: [\"*\"]}\ndefault_profile: all\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("hello.txt"), "hello from the sandbox\n").unwrap();
    let lib = quiver_tests::plugin_library("fs-tools", &[]);
    let bundle = dir.path().join("plugins/fs-tools");
    std::fs::create_dir_all(&bundle).unwrap();
    let lib_copy = bundle.join(lib.file_name().unwrap());
    std::fs::copy(&lib, &lib_copy).unwrap();
    std::fs::copy(super::repo_root().join("plugins/fs-tools/tool.yaml"), bundle.join("fs-tools.tool.yaml")).unwrap();
    q(&[
        "sign",
        "plugins/fs-tools/fs-tools.tool.yaml",
        "--key",
        "keys/test.key",
        "--library",
        lib_copy.to_str().unwrap(),
    ]);
    dir
}

/// One stdio session: `initialize`, then at once `tools/list` and a call of `fs_read`. Returns
/// the listed tool names, the call's result and the host's log.
fn session(dir: &Path) -> (Vec<String>, Value, String) {
    let mut child = Command::new(QUIVER)
        .current_dir(dir)
        .args(["serve"])
        .env("RUST_LOG", "info")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut send = |v: Value| writeln!(stdin, "{v}").unwrap();
    send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "startup", "version": "1"}}}));
    let init: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert!(init["result"]["serverInfo"].is_object(), "{init}");
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}));
    send(
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "fs_read", "arguments": {"path": "hello.txt"}}}),
    );
    let mut reply = |id: u64| loop {
        let v: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        if v["id"] == id {
            break v;
        }
    };
    let list = reply(2);
    let call = reply(3);
    drop(stdin);
    let mut log = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut log).unwrap();
    child.wait().unwrap();
    let names = list["result"]["tools"]
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    (names, call, log)
}

#[test]
fn a_worker_plugin_started_before_is_listed_and_callable_right_after_initialize() {
    let dir = project();
    // The first start waits for the worker and keeps its load report.
    let (first, call, log) = session(dir.path());
    assert!(!log.contains("plugin listed; its worker process is starting"), "{log}");
    let reports: Vec<_> = std::fs::read_dir(dir.path().join("state/worker-info")).unwrap().flatten().collect();
    assert_eq!(reports.len(), 1, "one load report kept for the one worker plugin: {reports:?}");
    assert_eq!(call["result"]["isError"], json!(false), "{call}");
    // The second start lists fs-tools from its verified manifest and that report while the
    // worker starts: the first tools/list is the same, and the first call waits for the worker.
    let (second, call, log) = session(dir.path());
    assert!(log.contains("plugin listed; its worker process is starting"), "{log}");
    assert_eq!(second, first);
    for tool in ["fs_read", "fs_list", "fs_search", "fs_stat", "fs_edit"] {
        assert!(second.iter().any(|n| n == tool), "{tool} missing from {second:?}");
    }
    assert_eq!(call["result"]["isError"], json!(false), "{call}");
    assert!(call.to_string().contains("hello from the sandbox"), "{call}");
}
