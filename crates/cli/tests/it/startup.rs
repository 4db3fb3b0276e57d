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
    let dir = signed_project("fs-tools", "process", &super::repo_root().join("plugins/fs-tools/tool.yaml"));
    std::fs::write(dir.path().join("hello.txt"), "hello from the sandbox\n").unwrap();
    dir
}

/// One stdio session: `initialize`, then at once `tools/list` and a call of `fs_read`. Returns
/// the listed tool names, the call's result and the host's log. A host that stops answering
/// for 60 s is killed and the test fails with what it answered and logged (rather than hanging
/// the suite).
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
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen: Vec<String> = Vec::new();
    let mut next = |child: &mut std::process::Child| -> Value {
        match rx.recv_timeout(std::time::Duration::from_secs(60)) {
            Ok(line) => {
                seen.push(line.clone());
                serde_json::from_str(&line).unwrap()
            }
            Err(e) => {
                let _ = child.kill();
                let mut log = String::new();
                let _ = std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut log);
                panic!("quiver serve gave no answer ({e}); it answered:\n{}\nits log:\n{log}", seen.join("\n"));
            }
        }
    };
    let mut send = |v: Value| writeln!(stdin, "{v}").unwrap();
    send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "startup", "version": "1"}}}));
    let init = next(&mut child);
    assert!(init["result"]["serverInfo"].is_object(), "{init}");
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}));
    send(
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "fs_read", "arguments": {"path": "hello.txt"}}}),
    );
    // Answers by id, in whatever order they come: JSON-RPC lets a server answer pipelined
    // requests out of order, and under load the call's answer can come before the list's.
    let (mut list, mut call) = (None, None);
    while list.is_none() || call.is_none() {
        let v = next(&mut child);
        match v["id"].as_u64() {
            Some(2) => list = Some(v),
            Some(3) => call = Some(v),
            _ => {}
        }
    }
    let (list, call) = (list.unwrap(), call.unwrap());
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

/// A project with the real library of `package` (plugin id the same), signed by a key that is
/// not first-party and run in-process by the operator's choice.
fn in_process_project(package: &str, manifest: &Path) -> tempfile::TempDir {
    signed_project(package, "in_process", manifest)
}

/// A project with the real library of `package` and `manifest`, signed by a key that is not
/// first-party, run as `isolation` says (`process` or `in_process`).
fn signed_project(package: &str, isolation: &str, manifest: &Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let q = |args: &[&str]| {
        let out = Command::new(QUIVER).current_dir(dir.path()).args(args).env_remove("RUST_LOG").output().unwrap();
        assert!(out.status.success(), "quiver {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    };
    q(&["keygen", "--out-dir", "keys", "--name", "test"]);
    std::fs::write(
        dir.path().join("quiver.yaml"),
        format!("plugins_dir: plugins\nstate_dir: state\ntrusted_keys:\n  - path: keys/test.pub\nisolation:\n  plugins:\n    {package}: {isolation}\nprofiles:\n  all: {{mode: full, scopes: [\"*\"]}}\ndefault_profile: all\n"),
    )
    .unwrap();
    let lib = quiver_tests::plugin_library(package, &[]);
    let bundle = dir.path().join("plugins").join(package);
    std::fs::create_dir_all(&bundle).unwrap();
    let lib_copy = bundle.join(lib.file_name().unwrap());
    std::fs::copy(&lib, &lib_copy).unwrap();
    let manifest_copy = bundle.join(format!("{package}.tool.yaml"));
    std::fs::copy(manifest, &manifest_copy).unwrap();
    q(&["sign", manifest_copy.to_str().unwrap(), "--key", "keys/test.key", "--library", lib_copy.to_str().unwrap()]);
    dir
}

/// A stdio session of `quiver serve` over `dir` (with `env`), for a test to drive line by line.
struct Serve {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
    /// Messages [`Serve::until`] passed over (notifications, mostly).
    skipped: Vec<Value>,
}

impl Serve {
    fn start(dir: &Path, env: &[(&str, &str)]) -> Serve {
        let mut child = Command::new(QUIVER)
            .current_dir(dir)
            .args(["serve"])
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut s = Serve { child, stdin, lines, skipped: Vec::new() };
        s.send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "startup", "version": "1"}}}));
        let init = s.next();
        assert!(init["result"]["serverInfo"].is_object(), "{init}");
        s.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        s
    }

    fn send(&mut self, v: Value) {
        writeln!(self.stdin, "{v}").unwrap();
    }

    fn next(&mut self) -> Value {
        serde_json::from_str(&self.lines.next().unwrap().unwrap()).unwrap()
    }

    /// The next message for which `pick` is true (others are skipped).
    fn until(&mut self, pick: impl Fn(&Value) -> bool) -> Value {
        loop {
            let v = self.next();
            if pick(&v) {
                break v;
            }
            self.skipped.push(v);
        }
    }

    fn reply(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.until(|v| v["id"] == id)
    }

    fn tool_names(&mut self, id: u64) -> Vec<String> {
        let list = self.reply(id, "tools/list", json!({}));
        list["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_owned()).collect()
    }

    /// Ends the session; the host's log.
    fn finish(self) -> String {
        let Serve { mut child, stdin, .. } = self;
        drop(stdin);
        let mut log = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut log).unwrap();
        child.wait().unwrap();
        log
    }
}

#[test]
fn an_in_process_plugin_loaded_before_is_listed_at_once_and_loaded_on_its_first_call() {
    let dir = in_process_project("text-tools", &super::repo_root().join("plugins/text-tools/tool.yaml"));
    let stats = json!({"name": "text_stats", "arguments": {"text": "one two three"}});
    // The first start loads the library and keeps its load report.
    let mut s = Serve::start(dir.path(), &[]);
    let first = s.tool_names(2);
    let call = s.reply(3, "tools/call", stats.clone());
    let log = s.finish();
    assert!(!log.contains("its library is loaded on first use"), "{log}");
    assert_eq!(call["result"]["isError"], json!(false), "{call}");
    let reports: Vec<_> = std::fs::read_dir(dir.path().join("state/worker-info")).unwrap().flatten().collect();
    assert_eq!(reports.len(), 1, "one load report kept for the one plugin library: {reports:?}");
    // The second start lists every tool right after `initialize` without loading the library;
    // the first call loads it and succeeds.
    let tmp = dir.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let mut s = Serve::start(dir.path(), &[("TMPDIR", tmp.to_str().unwrap())]);
    let second = s.tool_names(2);
    let call = s.reply(3, "tools/call", stats);
    // The library went into a sealed memory file: no private folder was made for it.
    let private: Vec<_> = std::fs::read_dir(&tmp).unwrap().flatten().map(|e| e.file_name()).collect();
    let log = s.finish();
    assert!(private.is_empty(), "{private:?}");
    assert!(log.contains("plugin listed; its library is loaded on first use"), "{log}");
    assert!(log.contains("plugin library loaded on first use"), "{log}");
    assert_eq!(second, first);
    for tool in ["json_query", "json_format", "text_stats", "text_diff", "text_transform"] {
        assert!(second.iter().any(|n| n == tool), "{tool} missing from {second:?}");
    }
    assert_eq!(call["result"]["isError"], json!(false), "{call}");
    assert_eq!(call["result"]["structuredContent"]["words"], json!(3), "{call}");
}

#[test]
fn a_listed_in_process_library_changed_on_disk_is_refused_by_name_never_loaded_and_removed() {
    let manifest = quiver_tests::workspace_root().join("tests/plugins/marker-plugin/tool.yaml");
    let dir = in_process_project("marker-plugin", &manifest);
    let (echo, reports) = keep_a_report_then_change_the_library(dir.path());
    let marker = dir.path().join("constructor-ran");
    let mut s = Serve::start(dir.path(), &[("QUIVER_TEST_MARKER", marker.to_str().unwrap())]);
    assert!(s.tool_names(2).iter().any(|n| n == "marker_echo"), "listed from its verified manifest");
    let call = s.reply(3, "tools/call", echo);
    assert_eq!(call["result"]["isError"], json!(true), "{call}");
    let text = call.to_string();
    assert!(
        text.contains("plugin_unavailable") && text.contains("marker-plugin") && text.contains("checksum"),
        "{call}"
    );
    assert_removed_after_list_changed(&mut s);
    let log = s.finish();
    assert!(!marker.exists(), "no code of the changed library ran");
    assert!(
        log.contains("the library of a listed plugin failed to load") && log.contains("marker-plugin.tool.yaml"),
        "{log}"
    );
    assert_eq!(std::fs::read_dir(&reports).unwrap().count(), 0, "its kept report is deleted");
}

#[test]
fn a_listed_worker_library_changed_on_disk_is_refused_by_the_host_never_sent_and_removed() {
    let manifest = quiver_tests::workspace_root().join("tests/plugins/marker-plugin/tool.yaml");
    let dir = signed_project("marker-plugin", "process", &manifest);
    let (echo, reports) = keep_a_report_then_change_the_library(dir.path());
    // Listed from its verified manifest and the kept report, its library not read at the scan;
    // the worker's start reads it and the host refuses it before any byte goes to a worker.
    let mut s = Serve::start(dir.path(), &[]);
    assert!(s.tool_names(2).iter().any(|n| n == "marker_echo"), "listed from its verified manifest");
    let call = s.reply(3, "tools/call", echo);
    assert_eq!(call["result"]["isError"], json!(true), "{call}");
    let text = call.to_string();
    assert!(
        text.contains("plugin_unavailable") && text.contains("marker-plugin") && text.contains("changed after signing"),
        "the host's checksum check names the library: {call}"
    );
    assert!(!text.contains("the host verified"), "refused by the host, not by a worker it was sent to: {call}");
    assert_removed_after_list_changed(&mut s);
    let log = s.finish();
    assert!(
        log.contains("the worker of a listed plugin failed to start")
            && log.contains("checksum")
            && log.contains("marker-plugin.tool.yaml"),
        "{log}"
    );
    assert!(!log.contains("plugin runs in a worker process"), "no worker loaded it: {log}");
    assert_eq!(std::fs::read_dir(&reports).unwrap().count(), 0, "its kept report is deleted");
}

/// A first start of the marker plugin's project at `dir` whose call succeeds and keeps its load
/// report; then its library changes on disk, so the signed manifest no longer matches it.
/// Gives the echo call and the kept reports' folder.
fn keep_a_report_then_change_the_library(dir: &std::path::Path) -> (Value, std::path::PathBuf) {
    let echo = json!({"name": "marker_echo", "arguments": {"text": "hi"}});
    let mut s = Serve::start(dir, &[]);
    let call = s.reply(2, "tools/call", echo.clone());
    s.finish();
    assert_eq!(call["result"]["isError"], json!(false), "{call}");
    let reports = dir.join("state/worker-info");
    assert_eq!(std::fs::read_dir(&reports).unwrap().count(), 1);
    let lib = std::fs::read_dir(dir.join("plugins/marker-plugin"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "so"))
        .unwrap();
    let mut bytes = std::fs::read(&lib).unwrap();
    bytes.extend_from_slice(b"changed after signing");
    std::fs::write(&lib, bytes).unwrap();
    (echo, reports)
}

/// Waits for `tools/list_changed` (unless it came already) and checks `marker_echo` is gone.
fn assert_removed_after_list_changed(s: &mut Serve) {
    let list_changed = |v: &Value| v["method"] == "notifications/tools/list_changed";
    if !s.skipped.iter().any(list_changed) {
        s.until(list_changed);
    }
    let after = s.tool_names(4);
    assert!(!after.iter().any(|n| n == "marker_echo"), "{after:?}");
}

/// Signs the bundle of `package` in the project at `dir` again, with `quiver sign --report`:
/// its load report ships beside the manifest. Gives the report's path.
fn sign_with_report(dir: &Path, package: &str) -> std::path::PathBuf {
    let bundle = dir.join("plugins").join(package);
    let lib = std::fs::read_dir(&bundle)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.ends_with(".so"))
        .unwrap();
    let manifest = format!("plugins/{package}/{package}.tool.yaml");
    let lib_path = format!("plugins/{package}/{lib}");
    let out = Command::new(QUIVER)
        .current_dir(dir)
        .args(["sign", &manifest, "--key", "keys/test.key", "--library", &lib_path, "--report"])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(out.status.success(), "quiver sign --report failed: {}", String::from_utf8_lossy(&out.stderr));
    let report = bundle.join(format!("{package}.report.json"));
    let text = std::fs::read_to_string(&report).expect("quiver sign --report writes the report beside the manifest");
    let signed = std::fs::read_to_string(bundle.join(format!("{package}.tool.yaml"))).unwrap();
    let sha256 = quiver_manifest::sha256_hex(text.as_bytes());
    assert!(
        signed.contains(&format!("  report:\n    file: {package}.report.json\n    sha256: {sha256}\n")),
        "{signed}"
    );
    report
}

#[test]
fn a_worker_bundle_signed_with_its_load_report_is_listed_on_its_first_start_before_its_worker_is_up() {
    let dir = project();
    sign_with_report(dir.path(), "fs-tools");
    assert!(!dir.path().join("state").exists(), "a first start: nothing kept");
    let (names, call, log) = session(dir.path());
    assert!(log.contains("plugin listed; its worker process is starting"), "{log}");
    for tool in ["fs_read", "fs_list", "fs_search", "fs_stat", "fs_edit"] {
        assert!(names.iter().any(|n| n == tool), "{tool} missing from {names:?}");
    }
    assert_eq!(call["result"]["isError"], json!(false), "{call}");
    assert!(call.to_string().contains("hello from the sandbox"), "{call}");
}

#[test]
fn an_in_process_bundle_signed_with_its_load_report_runs_no_code_before_its_first_call() {
    let manifest = quiver_tests::workspace_root().join("tests/plugins/marker-plugin/tool.yaml");
    let dir = in_process_project("marker-plugin", &manifest);
    let report = sign_with_report(dir.path(), "marker-plugin");
    let verify =
        |dir: &Path| Command::new(QUIVER).current_dir(dir).args(["verify"]).env_remove("RUST_LOG").output().unwrap();
    let out = verify(dir.path());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));

    // A first start (no state kept): listed from the shipped report; the library's constructor
    // runs at the first call, not before.
    let marker = dir.path().join("constructor-ran");
    let mut s = Serve::start(dir.path(), &[("QUIVER_TEST_MARKER", marker.to_str().unwrap())]);
    assert!(s.tool_names(2).iter().any(|n| n == "marker_echo"), "listed from the shipped report");
    assert!(!marker.exists(), "no code of the plugin ran before its first call");
    let call = s.reply(3, "tools/call", json!({"name": "marker_echo", "arguments": {"text": "hi"}}));
    assert_eq!(call["result"]["isError"], json!(false), "{call}");
    let log = s.finish();
    assert!(log.contains("plugin listed; its library is loaded on first use"), "{log}");
    assert!(marker.exists(), "the first call loaded the library");

    // The report changed after signing: refused by name, at the checksum check.
    let text = std::fs::read_to_string(&report).unwrap();
    let changed = text.replacen("\"description\":\"", "\"description\":\"Changed. ", 1);
    assert_ne!(changed, text);
    std::fs::write(&report, &changed).unwrap();
    let out = verify(dir.path());
    assert!(!out.status.success());
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        printed.contains("checksum check")
            && printed.contains("marker-plugin.report.json")
            && printed.contains("quiver sign --report"),
        "{printed}"
    );
    // The changed report signed as it is: the load check in the worker finds that it is not
    // the library's own.
    let manifest = dir.path().join("plugins/marker-plugin/marker-plugin.tool.yaml");
    let signed = std::fs::read_to_string(&manifest).unwrap();
    let old_sha = quiver_manifest::sha256_hex(text.as_bytes());
    let new_sha = quiver_manifest::sha256_hex(changed.as_bytes());
    std::fs::write(&manifest, signed.replace(&old_sha, &new_sha)).unwrap();
    let out = Command::new(QUIVER)
        .current_dir(dir.path())
        .args(["sign", "plugins/marker-plugin/marker-plugin.tool.yaml", "--key", "keys/test.key"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = verify(dir.path());
    assert!(!out.status.success());
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(printed.contains("embedded-manifest check") && printed.contains("artifact.report"), "{printed}");
}

/// fs-tools declares the shape of its `plugin_config` entry: a misspelt or mistyped setting
/// refuses the bundle at load, naming the field (a misspelt `root` used to fall back to the
/// working folder in silence, widening what the tools can reach), and a corrected one loads.
#[test]
fn a_plugin_config_entry_that_does_not_fit_the_plugins_config_schema_refuses_the_bundle_by_field() {
    let dir = in_process_project("fs-tools", &super::repo_root().join("plugins/fs-tools/tool.yaml"));
    let config = dir.path().join("quiver.yaml");
    let base = std::fs::read_to_string(&config).unwrap();
    let list = |entry: &str| {
        std::fs::write(&config, format!("{base}plugin_config:\n  fs-tools: {entry}\n")).unwrap();
        let out = Command::new(QUIVER).current_dir(dir.path()).args(["list"]).env_remove("RUST_LOG").output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr))
    };
    let (code, text) = list("{rot: work, allow_hard_links: \"yes\"}");
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("config check failed") && text.contains("config_schema"), "{text}");
    assert!(
        text.contains("plugin_config.fs-tools.rot: unknown field `rot`") && text.contains("did you mean `root`"),
        "{text}"
    );
    assert!(text.contains("plugin_config.fs-tools.allow_hard_links: expected a boolean"), "{text}");
    assert!(!text.contains("fs_read"), "no tool of the refused bundle is listed: {text}");

    std::fs::create_dir_all(dir.path().join("work")).unwrap();
    let (code, text) = list("{root: work, allow_hard_links: false}");
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("fs_read"), "{text}");
}

/// A client's own mistake (an unknown tool, bad parameters) is answered, not logged as a warning:
/// any client could otherwise fill the operator's log with them.
#[test]
fn a_clients_unknown_tool_is_answered_without_a_warning_in_the_log() {
    let dir = in_process_project("text-tools", &super::repo_root().join("plugins/text-tools/tool.yaml"));
    let mut s = Serve::start(dir.path(), &[]);
    let answer = s.reply(2, "tools/call", json!({"name": "no_such_tool", "arguments": {}}));
    assert!(answer["error"]["message"].as_str().is_some_and(|m| m.contains("no_such_tool")), "{answer}");
    let log = s.finish();
    assert!(!log.lines().any(|l| l.contains("WARN") && l.contains("no_such_tool")), "{log}");
}
