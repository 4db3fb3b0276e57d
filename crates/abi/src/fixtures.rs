//! Contract fixtures, run in-process: each plugin's `fixtures/*.json` through its own registry,
//! the same cases `cargo xtask contract-test` runs through the real host and router. Lets a
//! plugin's unit tests catch a broken fixture before it is bundled.
//!
//! A file holds one case or an array of cases: `{"name", "tool", "arguments", "config"?,
//! "expect": {"status", "outputs"? (subset match: objects recursively, everything else whole),
//! "error_code"?}}`; the string `${FIXTURE_DIR}` anywhere in a case becomes the absolute path of
//! a private copy of the fixtures folder (made once per run, removed after it), as in
//! `cargo xtask contract-test`, so a case that writes there never changes the sources.

use std::path::Path;

use serde_json::Value;

use crate::sdk::{Host, Registry};
use crate::{Status, ToolRequest};

/// What a fixture run found.
#[derive(Debug, Default)]
pub struct FixtureReport {
    /// Cases run.
    pub ran: usize,
    /// One line per failed case: file, case name, what differed.
    pub failures: Vec<String>,
}

impl std::fmt::Display for FixtureReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} of {} fixture cases failed", self.failures.len(), self.ran)?;
        for line in &self.failures {
            write!(f, "\n  {line}")?;
        }
        Ok(())
    }
}

/// Replaces `${FIXTURE_DIR}` in every string of `v` with `fixture_dir`.
pub fn substitute_fixture_dir(v: &mut Value, fixture_dir: &str) {
    match v {
        Value::String(s) if s.contains("${FIXTURE_DIR}") => *s = s.replace("${FIXTURE_DIR}", fixture_dir),
        Value::Array(a) => a.iter_mut().for_each(|x| substitute_fixture_dir(x, fixture_dir)),
        Value::Object(m) => m.values_mut().for_each(|x| substitute_fixture_dir(x, fixture_dir)),
        _ => {}
    }
}

/// Checks that `expected` is a subset of `actual`: every key of an object present with a
/// matching value (objects recursively), everything else equal as a whole. The error names the
/// first difference by its path below `path` (`outputs.b.c: expected [1], got [1,2]`).
pub fn check_subset(expected: &Value, actual: &Value, path: &str) -> Result<(), String> {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            for (k, ev) in e {
                let p = format!("{path}.{k}");
                match a.get(k) {
                    Some(av) => check_subset(ev, av, &p)?,
                    None => return Err(format!("{p} is missing")),
                }
            }
            Ok(())
        }
        _ if expected == actual => Ok(()),
        _ => Err(format!("{path}: expected {}, got {}", short(expected), short(actual))),
    }
}

/// `expected` is a subset of `actual`; see [`check_subset`].
pub fn is_subset(expected: &Value, actual: &Value) -> bool {
    check_subset(expected, actual, "").is_ok()
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 120 { format!("{}…", s.chars().take(120).collect::<String>()) } else { s }
}

fn check(registry: &Registry, case: &Value, dir: &str) -> Result<(), String> {
    let mut case = case.clone();
    substitute_fixture_dir(&mut case, dir);
    let tool = case["tool"].as_str().ok_or("the case has no `tool`")?;
    let request = ToolRequest {
        request_id: "fixture".into(),
        tool_id: tool.into(),
        inputs: case.get("arguments").cloned().unwrap_or_else(|| serde_json::json!({})),
        config: case.get("config").cloned().unwrap_or(Value::Null),
        ..ToolRequest::default()
    };
    let response = registry.call(tool, request, Host::Detached);
    let expect = &case["expect"];
    let want = match expect["status"].as_str() {
        Some("ok") => Status::Ok,
        Some("error") => Status::Error,
        Some("partial") => Status::Partial,
        other => return Err(format!("expect.status must be ok, error or partial, not {other:?}")),
    };
    // `partial` is the host's truncation; in-process the tool answers whole.
    if want != response.status && want != Status::Partial {
        return Err(format!("status {:?}, error {:?}, outputs {}", response.status, response.error, response.outputs));
    }
    if let Some(outputs) = expect.get("outputs") {
        check_subset(outputs, &response.outputs, "outputs")
            .map_err(|e| format!("outputs {} do not contain the expected values: {e}", response.outputs))?;
    }
    if let Some(code) = expect.get("error_code").and_then(Value::as_str) {
        let got = response.error.as_ref().map(|e| e.code.as_str());
        if got != Some(code) {
            return Err(format!("error code {got:?}, wanted {code} ({:?})", response.error));
        }
    }
    Ok(())
}

/// Copies the folder tree `from` into `to` (created; symbolic links are copied as links): the
/// private fixtures copy, here and in `quiver contract-test`.
pub fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let (src, dst) = (e.path(), to.join(e.file_name()));
        let kind = e.file_type()?;
        if kind.is_dir() {
            copy_tree(&src, &dst)?;
        } else if kind.is_symlink() {
            #[cfg(unix)]
            std::os::unix::fs::symlink(std::fs::read_link(&src)?, &dst)?;
        } else {
            std::fs::copy(&src, &dst)?;
        }
    }
    Ok(())
}

/// A private copy of a fixtures folder, removed when dropped.
struct PrivateCopy(std::path::PathBuf);

impl PrivateCopy {
    fn of(dir: &Path) -> std::io::Result<PrivateCopy> {
        static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let copy = PrivateCopy(std::env::temp_dir().join(format!("quiver-fixtures-{}-{n}", std::process::id())));
        let _ = std::fs::remove_dir_all(&copy.0);
        copy_tree(dir, &copy.0)?;
        Ok(copy)
    }
}

impl Drop for PrivateCopy {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs every case of every `*.json` file in `dir` (sorted) through `registry`, with
/// `${FIXTURE_DIR}` naming a private copy of `dir`.
pub fn run_fixtures(registry: &Registry, dir: &Path) -> FixtureReport {
    let mut report = FixtureReport::default();
    let mut files: Vec<_> = match std::fs::read_dir(dir) {
        Ok(rd) => {
            rd.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|x| x == "json")).collect()
        }
        Err(e) => {
            report.failures.push(format!("{}: cannot read the fixtures folder: {e}", dir.display()));
            return report;
        }
    };
    files.sort();
    let copy = match PrivateCopy::of(dir) {
        Ok(copy) => copy,
        Err(e) => {
            report.failures.push(format!("{}: cannot make a private copy of the fixtures folder: {e}", dir.display()));
            return report;
        }
    };
    let dir_text = copy.0.to_string_lossy().into_owned();
    for file in &files {
        let parsed: Value = match std::fs::read_to_string(file)
            .map_err(|e| e.to_string())
            .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
        {
            Ok(v) => v,
            Err(e) => {
                report.failures.push(format!("{}: {e}", file.display()));
                continue;
            }
        };
        let cases = match parsed {
            Value::Array(a) => a,
            one => vec![one],
        };
        for case in cases {
            report.ran += 1;
            if let Err(e) = check(registry, &case, &dir_text) {
                report.failures.push(format!("{} / {}: {e}", file.display(), case["name"]));
            }
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use schemars::JsonSchema;
    use serde::{Deserialize, Serialize};

    use super::*;
    use crate::ToolError;
    use crate::sdk::{Context, Tool, erase};

    #[derive(Deserialize, JsonSchema)]
    struct In {
        n: i64,
    }
    #[derive(Serialize, JsonSchema)]
    struct Out {
        double: i64,
    }
    struct Double;
    impl Tool for Double {
        const NAME: &'static str = "double";
        type Input = In;
        type Output = Out;
        fn call(&self, input: In, _cx: &mut Context<'_>) -> Result<Out, ToolError> {
            if input.n < 0 {
                Err(ToolError::invalid("n must not be negative"))
            } else {
                Ok(Out { double: input.n * 2 })
            }
        }
    }
    /// Writes `note.json` into the folder its config names (`${FIXTURE_DIR}` in a fixture).
    struct Touch;
    impl Tool for Touch {
        const NAME: &'static str = "touch";
        type Input = serde_json::Value;
        type Output = serde_json::Value;
        fn call(&self, _input: Value, cx: &mut Context<'_>) -> Result<Value, ToolError> {
            let dir = cx.config()["dir"].as_str().unwrap_or_default();
            std::fs::write(Path::new(dir).join("note.json"), "{}").map_err(|e| ToolError::tool(e.to_string()))?;
            Ok(serde_json::json!({"wrote": true}))
        }
    }

    #[test]
    fn cases_that_write_into_the_fixture_dir_leave_the_sources_alone() {
        let dir = std::env::temp_dir().join(format!("quiver-fixtures-writes-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("data")).unwrap();
        std::fs::write(dir.join("data/seed.txt"), "seed").unwrap();
        std::fs::write(
            dir.join("cases.json"),
            r#"{"name": "writes", "tool": "touch", "config": {"dir": "${FIXTURE_DIR}"}, "expect": {"status": "ok", "outputs": {"wrote": true}}}"#,
        )
        .unwrap();
        let registry = Registry::new("", vec![erase(Touch)]);
        let first = run_fixtures(&registry, &dir);
        let second = run_fixtures(&registry, &dir);
        let mut left: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        left.sort();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(first.failures.is_empty() && first.ran == 1, "{first}");
        // A note.json written into the sources would be read as a second (broken) fixture file.
        assert!(second.failures.is_empty() && second.ran == 1, "{second}");
        assert_eq!(left, ["cases.json", "data"]);
    }

    #[test]
    fn passing_and_failing_cases_are_told_apart() {
        let dir = std::env::temp_dir().join(format!("quiver-fixtures-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("cases.json"),
            r#"[
              {"name": "doubles", "tool": "double", "arguments": {"n": 2}, "expect": {"status": "ok", "outputs": {"double": 4}}},
              {"name": "refuses", "tool": "double", "arguments": {"n": -1}, "expect": {"status": "error", "error_code": "invalid_arguments"}},
              {"name": "wrong", "tool": "double", "arguments": {"n": 3}, "expect": {"status": "ok", "outputs": {"double": 7}}},
              {"name": "${FIXTURE_DIR}", "tool": "nope", "expect": {"status": "ok"}}
            ]"#,
        )
        .unwrap();
        std::fs::write(dir.join("broken.json"), "{not json").unwrap();
        let registry = Registry::new("", vec![erase(Double)]);
        let report = run_fixtures(&registry, &dir);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(report.ran, 4);
        assert_eq!(report.failures.len(), 3, "{report}");
        assert!(report.failures.iter().any(|f| f.contains("broken.json")));
        assert!(report.failures.iter().any(|f| f.contains("\"wrong\"") && f.contains("do not contain")));
        assert!(report.failures.iter().any(|f| f.contains("unknown_tool") || f.contains("status Error")));
        assert!(is_subset(&serde_json::json!({"a": {"b": 1}}), &serde_json::json!({"a": {"b": 1, "c": 2}, "d": 3})));
        assert!(!is_subset(&serde_json::json!({"a": [1]}), &serde_json::json!({"a": [1, 2]})));
    }
}
