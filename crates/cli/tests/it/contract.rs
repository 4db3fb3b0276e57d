//! `quiver contract-test` with real plugin libraries: a plugin whose fixtures touch files its
//! `sandbox:` does not grant must fail the contract test (a host that does not trust it runs it
//! in a sandboxed worker, where those calls fail), naming the case, the tool and the fix; the
//! bundled fs-tools, whose `sandbox:` grants its `root`, passes in-process and in the worker.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

use super::{QUIVER, repo_root};

fn fs_tools_library() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| quiver_tests::plugin_library("fs-tools", &[]))
}

fn fault_library() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| quiver_tests::plugin_library("fault-plugin", &[]))
}

fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap().flatten() {
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if e.file_type().unwrap().is_dir() {
            copy_tree(&src, &dst);
        } else {
            fs::copy(&src, &dst).unwrap();
        }
    }
}

/// Runs `quiver --json contract-test src/PLUGIN --library LIB` in `dir` (a project with an
/// empty plugins folder); gives the exit code and the report.
fn contract_test(dir: &Path, plugin: &str, library: &Path) -> (i32, Value) {
    fs::create_dir_all(dir.join("plugins")).unwrap();
    fs::write(dir.join("quiver.yaml"), "plugins_dir: plugins\n").unwrap();
    let mut cmd = Command::new(QUIVER);
    cmd.current_dir(dir)
        .env_remove("RUST_LOG")
        .env("XDG_CONFIG_HOME", dir.join("xdg"))
        .args(["--json", "contract-test", &format!("src/{plugin}"), "--library"])
        .arg(library);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("QUIVER_") {
            cmd.env_remove(k);
        }
    }
    let out = cmd.output().expect("cannot run quiver");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!("stdout is not one JSON document ({e}):\n{stdout}\nstderr:\n{}", String::from_utf8_lossy(&out.stderr))
    });
    (out.status.code().unwrap_or(-1), report)
}

fn rows(report: &Value) -> &Vec<Value> {
    report["cases"].as_array().expect("a `cases` array")
}

fn is_worker(row: &Value) -> bool {
    row["file"].as_str().is_some_and(|f| f.starts_with("worker"))
}

/// Whether the worker pass was skipped (no Landlock here: then one row says so and why, and
/// it is not counted as passed).
fn worker_pass_skipped(report: &Value) -> bool {
    let Some(skip) = rows(report).iter().find(|r| is_worker(r) && r["skipped"] == Value::Bool(true)) else {
        return false;
    };
    let why = skip["detail"].as_str().unwrap_or_default();
    assert!(why.starts_with("SKIPPED") && why.contains("not sandboxed"), "a skip says why: {why}");
    assert_eq!(report["n_skipped"], 1, "{report:#}");
    eprintln!("SKIPPED: the worker pass did not run here: {why}");
    true
}

/// The worker pass's rows, or `None` when it was skipped.
fn worker_rows(report: &Value) -> Option<Vec<&Value>> {
    if worker_pass_skipped(report) {
        return None;
    }
    let worker: Vec<&Value> = rows(report).iter().filter(|r| is_worker(r)).collect();
    assert!(!worker.is_empty(), "contract-test must report its worker pass: {report:#}");
    Some(worker)
}

fn row<'a>(rows: &[&'a Value], file: &str, case: &str) -> &'a Value {
    rows.iter()
        .copied()
        .find(|r| r["file"] == file && r["case"] == case)
        .unwrap_or_else(|| panic!("no row {file} / {case} in {rows:#?}"))
}

#[test]
fn contract_test_fails_a_plugin_whose_fixtures_touch_files_its_sandbox_does_not_grant() {
    // The fault plugin's sandbox grants one folder, named by its `root` setting. The first case
    // reads a file of the fixtures through a setting no grant names: in-process it passes, in a
    // worker nothing grants that folder. The second writes under `root`: granted, so it passes
    // in both (the `${FIXTURE_DIR}` grant works).
    let dir = tempfile::tempdir().unwrap();
    let plugin = dir.path().join("src/fault-plugin");
    fs::create_dir_all(plugin.join("fixtures/data")).unwrap();
    fs::copy(repo_root().join("tests/plugins/fault-plugin/tool.yaml"), plugin.join("tool.yaml")).unwrap();
    fs::write(plugin.join("CHANGELOG.md"), "## 0.1.0\n- first\n").unwrap();
    fs::write(plugin.join("fixtures/data/note.txt"), "a note\n").unwrap();
    let cases = serde_json::json!([
        {"name": "reads a note", "tool": "hostile_read",
         "arguments": {"target": "${FIXTURE_DIR}/data/note.txt"},
         "config": {"notes": "${FIXTURE_DIR}/data"},
         "expect": {"status": "ok", "outputs": {"value": {"ok": true}}}},
        {"name": "writes a note under its root", "tool": "hostile_write",
         "arguments": {"target": "${FIXTURE_DIR}/data/new.txt"},
         "config": {"root": "${FIXTURE_DIR}/data"},
         "expect": {"status": "ok", "outputs": {"value": {"ok": true}}}}
    ]);
    fs::write(plugin.join("fixtures/cases.json"), cases.to_string()).unwrap();

    let (code, report) = contract_test(dir.path(), "fault-plugin", fault_library());
    let in_process: Vec<&Value> = rows(&report).iter().filter(|r| !is_worker(r)).collect();
    for case in ["reads a note", "writes a note under its root"] {
        assert_eq!(row(&in_process, "cases.json", case)["passed"], true, "passes in-process as before: {report:#}");
    }
    if worker_pass_skipped(&report) {
        return;
    }
    assert_eq!(code, 1, "a plugin whose fixtures would fail in a sandboxed worker fails the contract test: {report:#}");
    let Some(worker) = worker_rows(&report) else { return };
    let read = row(&worker, "worker:cases.json", "reads a note");
    assert_eq!(read["passed"], false, "{report:#}");
    let detail = read["detail"].as_str().unwrap();
    for wanted in [
        "passes in-process but fails in a sandboxed worker",
        "tool `hostile_read`",
        "declare it under `sandbox.filesystem` in tool.yaml",
        "`- {config: notes, access: read}`",
    ] {
        assert!(detail.contains(wanted), "the failure says {wanted:?}: {detail}");
    }
    let write = row(&worker, "worker:cases.json", "writes a note under its root");
    assert_eq!(write["passed"], true, "a grant through `config: root` covers the private fixtures copy: {report:#}");
    assert_eq!(report["n_failed"], 1, "only the ungranted read fails: {report:#}");
}

#[test]
fn contract_test_passes_fs_tools_in_process_and_in_its_sandboxed_worker() {
    let dir = tempfile::tempdir().unwrap();
    let src = repo_root().join("plugins/fs-tools");
    let plugin = dir.path().join("src/fs-tools");
    copy_tree(&src.join("fixtures"), &plugin.join("fixtures"));
    for file in ["tool.yaml", "CHANGELOG.md"] {
        fs::copy(src.join(file), plugin.join(file)).unwrap();
    }
    let (code, report) = contract_test(dir.path(), "fs-tools", fs_tools_library());
    assert_eq!(code, 0, "{report:#}");
    if let Some(worker) = worker_rows(&report) {
        let n_cases = rows(&report).iter().filter(|r| r["file"].as_str().is_some_and(|f| f.ends_with(".json"))).count();
        let n_worker_cases = worker.iter().filter(|r| r["file"].as_str().is_some_and(|f| f.ends_with(".json"))).count();
        assert!(
            n_worker_cases > 10 && n_cases == 2 * n_worker_cases,
            "every fixture case runs in the worker too: {report:#}"
        );
        assert!(worker.iter().all(|r| r["passed"] == true), "{report:#}");
    }
}
