//! `quiver contract-test PLUGIN_DIR --library LIB` (hidden; driven by `cargo xtask
//! contract-test`): proves a plugin works through the real host and router.
//!
//! 1. The source manifest `PLUGIN_DIR/tool.yaml` validates.
//! 2. A bundle is made in a temporary folder (library copy, manifest + `artifact`, signature by a
//!    throwaway key) and loaded through [`quiver_lifecycle::Host`] trusting only that key.
//! 3. Every case of `PLUGIN_DIR/fixtures/*.json` runs through [`quiver_router::Router::call`]
//!    (typed lane, all scopes, confirmed), and the response is checked against `expect`.
//! 4. Every `examples` entry of each visible tool finds that tool through the catalog search.
//!
//! Fixture format (one case object or an array of them):
//! `{"name", "tool", "arguments", "config"?, "expect": {"status", "outputs"?, "error_code"?}}`.
//! `outputs` is a subset match (objects recursively: every key given must be present and equal;
//! arrays and scalars compared whole). The text `${FIXTURE_DIR}` anywhere in a case becomes the
//! absolute path of a private copy of the fixtures folder, so cases can never change the sources.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::Args;
use quiver_abi::Status;
use quiver_abi::fixtures::{check_subset, substitute_fixture_dir};
use quiver_catalog::{Access, Catalog, SearchRequest, search_catalog};
use quiver_lifecycle::{Host, HostSettings, VerifyPolicy};
use quiver_manifest::{Artifact, KeyPair, Manifest, TrustedKeys};
use quiver_router::{Call, Caller, Router, RouterSettings};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::bundle::{set_artifact, write_atomic};
use crate::commands::list::print_table;
use crate::{GlobalArgs, Reported};

#[derive(Debug, Args)]
pub struct ContractTestArgs {
    /// The plugin's source folder (with tool.yaml and fixtures/).
    pub plugin_dir: PathBuf,
    /// The built plugin library.
    #[arg(long, value_name = "LIB")]
    pub library: PathBuf,
}

/// One fixture case.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    tool: String,
    #[serde(default = "empty_object")]
    arguments: Value,
    #[serde(default)]
    config: Option<Value>,
    expect: Expect,
}

fn empty_object() -> Value {
    json!({})
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Expect {
    status: Status,
    #[serde(default)]
    outputs: Option<Value>,
    #[serde(default)]
    error_code: Option<String>,
}

/// The result of one check.
struct Outcome {
    file: String,
    name: String,
    passed: bool,
    detail: String,
}

/// Reads `dir/*.json` (sorted): each file one case or an array of cases.
fn read_cases(dir: &Path) -> Result<Vec<(String, Case)>> {
    let mut files: Vec<PathBuf> = match fs::read_dir(dir) {
        Ok(rd) => rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "json") && p.is_file())
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => bail!("cannot read {}: {e}", dir.display()),
    };
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let name = f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let text = fs::read_to_string(&f).with_context(|| format!("cannot read {}", f.display()))?;
        let v: Value = serde_json::from_str(&text).with_context(|| format!("{} is not JSON", f.display()))?;
        let items = match v {
            Value::Array(a) => a,
            one => vec![one],
        };
        for (i, item) in items.into_iter().enumerate() {
            let case: Case = serde_json::from_value(item).with_context(|| {
                format!("{}: case {i} is not a fixture case (fields: name, tool, arguments, config?, expect{{status, outputs?, error_code?}})", f.display())
            })?;
            out.push((name.clone(), case));
        }
    }
    Ok(out)
}

/// Copies a folder tree (symbolic links are copied as links).
fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    fs::create_dir_all(to).with_context(|| format!("cannot create {}", to.display()))?;
    for e in fs::read_dir(from).with_context(|| format!("cannot read {}", from.display()))? {
        let e = e?;
        let (src, dst) = (e.path(), to.join(e.file_name()));
        let ft = e.file_type()?;
        if ft.is_dir() {
            copy_tree(&src, &dst)?;
        } else if ft.is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(&src)?, &dst)?;
        } else {
            fs::copy(&src, &dst).with_context(|| format!("cannot copy {}", src.display()))?;
        }
    }
    Ok(())
}

/// Makes a signed bundle of the plugin in `dir` and loads it; returns the host.
fn load_bundle(plugin_dir: &Path, library: &Path, dir: &Path) -> Result<Arc<Host>> {
    let source_path = plugin_dir.join("tool.yaml");
    let source = fs::read_to_string(&source_path).with_context(|| format!("cannot read {}", source_path.display()))?;
    let manifest = Manifest::from_yaml(&source, &source_path.display().to_string())?;
    let bytes = fs::read(library).with_context(|| format!("cannot read the library {}", library.display()))?;
    let file = library.file_name().and_then(|n| n.to_str()).context("library without a file name")?.to_owned();
    let bundle_dir = dir.join("plugins").join(&manifest.id);
    fs::create_dir_all(&bundle_dir)?;
    fs::write(bundle_dir.join(&file), &bytes)?;
    let artifact = Artifact { file, sha256: quiver_manifest::sha256_hex(&bytes) };
    let manifest_path = bundle_dir.join(format!("{}.tool.yaml", manifest.id));
    let text = set_artifact(&source, &artifact, &manifest_path.display().to_string())?;
    write_atomic(&manifest_path, text.as_bytes())?;
    let key = KeyPair::generate();
    let signature = quiver_manifest::sign_bundle(&key, &text, &manifest_path.display().to_string())?;
    write_atomic(&quiver_lifecycle::signature_path(&manifest_path), signature.as_bytes())?;

    let settings = HostSettings {
        plugins_dir: dir.join("plugins"),
        verify: VerifyPolicy {
            trusted: TrustedKeys::new().with("contract-test", "throwaway", key.public_key().clone()),
            allow_unsigned: false,
            max_library_bytes: 1 << 30,
            // A throwaway folder of our own making: permissions and rollback do not apply.
            strict: false,
            ..VerifyPolicy::default()
        },
        cache_dir: Some(dir.join("cache")),
        conflicts: Default::default(),
    };
    let host = Host::new(settings).context("cannot start the plugin host")?;
    let report = host.rescan();
    if let Some(e) = report.rejected.first() {
        bail!("the host rejected the bundle: {} check failed: {}", e.stage.as_str(), e.message);
    }
    Ok(Arc::new(host))
}

fn run_case(rt: &tokio::runtime::Runtime, router: &Router, case: &Case) -> Result<(), String> {
    let caller = Caller::new("contract-test", Access::unrestricted());
    let mut call = Call::new(&case.tool, case.arguments.clone(), caller).confirmed(true);
    call.config = case.config.clone().unwrap_or(Value::Null);
    let outcome = rt.block_on(router.call(call));
    let r = &outcome.response;
    let mut problems = Vec::new();
    if r.status != case.expect.status {
        let why = r.error.as_ref().map(|e| format!(" ({}: {})", e.code, e.message)).unwrap_or_default();
        problems.push(format!("status: expected {:?}, got {:?}{why}", case.expect.status, r.status));
    }
    if let Some(code) = &case.expect.error_code {
        match &r.error {
            Some(e) if &e.code == code => {}
            Some(e) => problems.push(format!("error_code: expected {code}, got {} ({})", e.code, e.message)),
            None => problems.push(format!("error_code: expected {code}, got no error")),
        }
    }
    if let Some(outputs) = &case.expect.outputs
        && let Err(e) = check_subset(outputs, &r.outputs, "outputs")
    {
        problems.push(e);
    }
    if problems.is_empty() { Ok(()) } else { Err(problems.join("; ")) }
}

/// Every example of every visible tool must find that tool through the catalog search.
fn check_examples(catalog: &Catalog) -> Vec<Outcome> {
    let access = Access::unrestricted();
    let mut out = Vec::new();
    for r in catalog.visible_tools() {
        for example in &catalog.def(r).spec.examples {
            let req = SearchRequest { query: example.clone(), limit: Some(5), ..SearchRequest::default() };
            let (passed, detail) = match search_catalog(catalog, &access, &req, 5) {
                Ok(res) => match res.tools.iter().position(|t| t.name == r.name) {
                    Some(rank) => (true, format!("rank {}", rank + 1)),
                    None => {
                        let got: Vec<&str> = res.tools.iter().map(|t| t.name.as_str()).collect();
                        (
                            false,
                            format!(
                                "not in the top 5 (got: {})",
                                if got.is_empty() { "nothing".into() } else { got.join(", ") }
                            ),
                        )
                    }
                },
                Err(e) => (false, format!("search failed: {e}")),
            };
            out.push(Outcome { file: format!("examples:{}", r.name), name: example.clone(), passed, detail });
        }
    }
    out
}

pub fn run(g: &GlobalArgs, a: &ContractTestArgs) -> Result<()> {
    let plugin_dir =
        fs::canonicalize(&a.plugin_dir).with_context(|| format!("no plugin folder {}", a.plugin_dir.display()))?;
    let temp = tempfile::Builder::new().prefix("quiver-contract-").tempdir()?;
    let fixture_dir = temp.path().join("fixtures");
    if plugin_dir.join("fixtures").is_dir() {
        copy_tree(&plugin_dir.join("fixtures"), &fixture_dir)?;
    }
    let fixture_dir_text = fixture_dir.display().to_string();
    let cases = read_cases(&fixture_dir)?;
    let host = load_bundle(&plugin_dir, &a.library, temp.path())?;
    let catalog = host.catalog();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let router = Router::new(host.clone(), RouterSettings::default());

    let mut results = Vec::new();
    for (file, mut case) in cases {
        for v in [Some(&mut case.arguments), case.config.as_mut(), case.expect.outputs.as_mut()].into_iter().flatten() {
            substitute_fixture_dir(v, &fixture_dir_text);
        }
        let outcome = run_case(&rt, &router, &case);
        results.push(Outcome {
            file,
            name: case.name.clone(),
            passed: outcome.is_ok(),
            detail: outcome.err().unwrap_or_default(),
        });
    }
    if results.is_empty() {
        results.push(Outcome {
            file: "fixtures/".into(),
            name: "at least one fixture case".into(),
            passed: false,
            detail: format!(
                "no cases in {}/fixtures/*.json; add some (see `cargo xtask new-tool`)",
                plugin_dir.display()
            ),
        });
    }
    results.extend(check_examples(&catalog));

    let n_failed = results.iter().filter(|r| !r.passed).count();
    if g.json {
        let cases: Vec<Value> = results
            .iter()
            .map(|r| json!({"file": r.file, "case": r.name, "passed": r.passed, "detail": r.detail}))
            .collect();
        println!(
            "{:#}",
            json!({"plugin": plugin_dir, "cases": cases, "n_passed": results.len() - n_failed, "n_failed": n_failed})
        );
    } else {
        let rows: Vec<Vec<String>> = results
            .iter()
            .map(|r| {
                vec![
                    if r.passed { "PASS" } else { "FAIL" }.to_owned(),
                    r.file.clone(),
                    r.name.clone(),
                    r.detail.clone(),
                ]
            })
            .collect();
        print_table(&["RESULT", "FILE", "CASE", "DETAIL"], &rows);
        println!("{} passed, {n_failed} failed", results.len() - n_failed);
    }
    if n_failed > 0 { Err(Reported.into()) } else { Ok(()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subset_matches_objects_recursively_and_arrays_whole() {
        let actual = json!({"a": 1, "b": {"c": [1, 2], "d": "x"}, "e": null});
        assert!(check_subset(&json!({}), &actual, "outputs").is_ok());
        assert!(check_subset(&json!({"b": {"d": "x"}}), &actual, "outputs").is_ok());
        assert!(check_subset(&json!({"e": null}), &actual, "outputs").is_ok());
        assert_eq!(check_subset(&json!({"b": {"z": 1}}), &actual, "outputs").unwrap_err(), "outputs.b.z is missing");
        assert!(
            check_subset(&json!({"b": {"c": [1]}}), &actual, "outputs")
                .unwrap_err()
                .starts_with("outputs.b.c: expected [1]")
        );
        assert!(check_subset(&json!({"a": "1"}), &actual, "outputs").is_err());
    }

    #[test]
    fn fixture_dir_is_substituted_everywhere() {
        let mut v = json!({"root": "${FIXTURE_DIR}/root", "list": ["${FIXTURE_DIR}"], "n": 1});
        substitute_fixture_dir(&mut v, "/tmp/f");
        assert_eq!(v, json!({"root": "/tmp/f/root", "list": ["/tmp/f"], "n": 1}));
    }

    #[test]
    fn cases_read_as_one_object_or_an_array() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("a.json"), r#"{"name": "one", "tool": "t", "expect": {"status": "ok"}}"#).unwrap();
        fs::write(dir.path().join("b.json"), r#"[{"name": "two", "tool": "t", "arguments": {"x": 1}, "expect": {"status": "error", "error_code": "e"}}]"#).unwrap();
        fs::write(dir.path().join("notes.txt"), "not a fixture").unwrap();
        let cases = read_cases(dir.path()).unwrap();
        assert_eq!(cases.len(), 2);
        assert_eq!(cases[0].1.arguments, json!({}));
        assert_eq!(cases[1].1.expect.error_code.as_deref(), Some("e"));
        fs::write(dir.path().join("c.json"), r#"{"name": "bad", "tool": "t", "expect": {"status": "fine"}}"#).unwrap();
        assert!(read_cases(dir.path()).is_err());
    }
}
