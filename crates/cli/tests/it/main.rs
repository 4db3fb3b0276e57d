//! End-to-end tests of the `quiver` binary against real signed bundles of the marker test plugin.
//!
//! The plugin is built once per test run by `quiver_tests::plugin_library` (its own target
//! directory: the outer cargo may hold the lock of `target/`), then every test makes its own bundle in a temporary folder with
//! `quiver keygen` and `quiver sign --library`, exactly as a user would.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::Value;

const QUIVER: &str = env!("CARGO_BIN_EXE_quiver");

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).unwrap().to_path_buf()
}

/// The marker plugin's library, built once (see `quiver_tests::plugin_library`).
fn marker_library() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| quiver_tests::plugin_library("marker-plugin", &[]))
}

/// A finished `quiver` run.
struct Run {
    out: Output,
}

impl Run {
    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.out.stdout).into_owned()
    }
    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }
    fn code(&self) -> i32 {
        self.out.status.code().unwrap_or(-1)
    }
    /// stdout as one JSON document: nothing else may be on it.
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout()).unwrap_or_else(|e| {
            panic!("stdout is not one JSON document ({e}):\n{}\nstderr:\n{}", self.stdout(), self.stderr())
        })
    }
    #[track_caller]
    fn success(self) -> Run {
        assert_eq!(self.code(), 0, "quiver failed\nstdout:\n{}\nstderr:\n{}", self.stdout(), self.stderr());
        self
    }
    #[track_caller]
    fn failure(self, code: i32) -> Run {
        assert_eq!(self.code(), code, "unexpected exit code\nstdout:\n{}\nstderr:\n{}", self.stdout(), self.stderr());
        self
    }
}

/// A temporary project: a key pair, a config trusting it, and a plugins folder with one signed
/// marker bundle.
struct Project {
    dir: tempfile::TempDir,
}

impl Project {
    fn new() -> Project {
        let p = Project { dir: tempfile::tempdir().unwrap() };
        p.quiver(&["keygen", "--out-dir", "keys", "--name", "test"]).success();
        fs::write(
            p.path("quiver.yaml"),
            "plugins_dir: plugins\ntrusted_keys:\n  - name: test\n    path: keys/test.pub\n",
        )
        .unwrap();
        p.make_bundle("marker", "keys/test.key");
        p
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// Copies the marker library and manifest into `plugins/NAME/` and signs them.
    fn make_bundle(&self, name: &str, key: &str) {
        let dir = self.path(&format!("plugins/{name}"));
        fs::create_dir_all(&dir).unwrap();
        let lib = marker_library();
        let lib_copy = dir.join(lib.file_name().unwrap());
        fs::copy(lib, &lib_copy).unwrap();
        fs::copy(repo_root().join("tests/plugins/marker-plugin/tool.yaml"), dir.join("marker.tool.yaml")).unwrap();
        self.quiver(&["sign", &format!("plugins/{name}/marker.tool.yaml"), "--key", key, "--library"])
            .arg_path(&lib_copy)
            .success();
    }

    fn manifest(&self) -> PathBuf {
        self.path("plugins/marker/marker.tool.yaml")
    }

    fn quiver(&self, args: &[&str]) -> Pending {
        self.quiver_in(self.dir.path(), args)
    }

    /// `quiver` run in `cwd`, isolated from the caller's environment: no `QUIVER_*` variables,
    /// and an XDG config folder inside the project (`xdg/`) instead of the user's.
    fn quiver_in(&self, cwd: &Path, args: &[&str]) -> Pending {
        let mut cmd = Command::new(QUIVER);
        cmd.current_dir(cwd).args(args).env_remove("RUST_LOG").env("XDG_CONFIG_HOME", self.path("xdg"));
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("QUIVER_") {
                cmd.env_remove(k);
            }
        }
        Pending { cmd }
    }
}

/// A command not yet run (so tests can add arguments).
struct Pending {
    cmd: Command,
}

impl Pending {
    fn env(mut self, key: &str, value: impl AsRef<std::ffi::OsStr>) -> Pending {
        self.cmd.env(key, value);
        self
    }
    fn env_remove(mut self, key: &str) -> Pending {
        self.cmd.env_remove(key);
        self
    }
    fn arg_path(mut self, p: &Path) -> Run {
        self.cmd.arg(p);
        self.run()
    }
    fn run(mut self) -> Run {
        Run { out: self.cmd.output().expect("cannot run quiver") }
    }
    #[track_caller]
    fn success(self) -> Run {
        self.run().success()
    }
    #[track_caller]
    fn failure(self, code: i32) -> Run {
        self.run().failure(code)
    }
}

#[test]
fn list_shows_the_tools() {
    let p = Project::new();
    let run = p.quiver(&["list"]).success();
    let out = run.stdout();
    for tool in ["marker_echo", "marker_panic", "marker_sleep"] {
        assert!(out.contains(tool), "{tool} missing from:\n{out}");
    }
    assert!(out.contains("marker-plugin") && out.contains("0.1.0") && out.contains("active"), "{out}");

    let v = p.quiver(&["list", "--json"]).success().json();
    let names: Vec<&str> = v["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["marker_echo", "marker_panic", "marker_sleep"]);
    assert_eq!(v["tools"][0]["plugin"], "marker-plugin");

    let v = p.quiver(&["list", "--deprecations", "--json"]).success().json();
    assert_eq!(v["deprecations"], serde_json::json!([]));
}

#[test]
fn call_returns_the_echo() {
    let p = Project::new();
    let run = p.quiver(&["call", "marker_echo", "--args", r#"{"text": "hello there"}"#]).success();
    assert!(run.stdout().contains("hello there"), "{}", run.stdout());

    let v = p.quiver(&["--json", "call", "marker_echo", "--args", r#"{"text": "hi"}"#]).success().json();
    assert_eq!(v["response"]["status"], "ok", "{v:#}");
    assert_eq!(v["response"]["outputs"]["text"], "hi");
    assert_eq!(v["response"]["outputs"]["version"], "0.1.0");
}

#[test]
fn call_errors_exit_non_zero() {
    let p = Project::new();
    let run = p.quiver(&["call", "marker_panic", "--args", r#"{"text": "boom"}"#]).failure(1);
    assert!((run.stdout() + &run.stderr()).contains("panic"), "{}{}", run.stdout(), run.stderr());

    let v = p.quiver(&["call", "marker_echo", "--json", "--args", r#"{"txt": 1}"#]).failure(1).json();
    assert_eq!(v["response"]["status"], "error");

    let run = p.quiver(&["call", "no_such_tool", "--args", "{}"]).failure(1);
    assert!(run.stderr().contains("no_such_tool") || run.stdout().contains("no_such_tool"));

    // Not JSON: a usage error.
    p.quiver(&["call", "marker_echo", "--args", "{not json"]).failure(2);
    // A key given twice (which value was meant?): a usage error naming the key and where it is,
    // not the last value taken in silence.
    let run = p.quiver(&["call", "marker_echo", "--args", r#"{"text": "a", "text": "b"}"#]).failure(2);
    assert!(run.stderr().contains("`text` twice") && run.stderr().contains("column"), "{}", run.stderr());
    let run = p.quiver(&["call", "marker_echo", "--args", r#"{"text": "a", "o": {"k": 1, "k": 2}}"#]).failure(2);
    assert!(run.stderr().contains("`k` twice") && run.stderr().contains("/o"), "{}", run.stderr());
}

#[test]
fn verify_passes_on_a_good_bundle() {
    let p = Project::new();
    let run = p.quiver(&["verify"]).success();
    assert!(run.stdout().contains("OK") && run.stdout().contains("marker-plugin"), "{}", run.stdout());
    let v = p.quiver(&["verify", "--json", "plugins/marker/marker.tool.yaml"]).success().json();
    let b = &v["bundles"][0];
    assert_eq!(b["ok"], true);
    assert_eq!(b["id"], "marker-plugin");
    assert_eq!(b["sha256"].as_str().unwrap().len(), 64);
    assert!(b["signer_key_id"].is_string());
}

/// Runs `verify` on the (tampered) bundle and returns the failed stage.
#[track_caller]
fn failed_stage(p: &Project) -> String {
    let run = p.quiver(&["verify"]).failure(1);
    assert!(run.stdout().contains("FAILED"), "{}", run.stdout());
    let v = p.quiver(&["verify", "--json"]).failure(1).json();
    assert_eq!(v["n_failed"], 1, "{v:#}");
    let stage = v["bundles"][0]["stage"].as_str().unwrap().to_owned();
    assert!(run.stdout().contains(&format!("{stage} check")), "{}", run.stdout());
    stage
}

/// `quiver verify` checks an adapter bundle as the host will load it: a program that is not
/// installed, or a header variable that is not set, fails it at the adapter stage (it said OK,
/// and the host then refused the bundle).
#[test]
fn verify_resolves_adapter_bundles_as_the_host_does() {
    let p = Project::new();
    let adapter = |id: &str, spec: &str, extra: &str| {
        let dir = p.path(&format!("plugins/{id}"));
        fs::create_dir_all(&dir).unwrap();
        let manifest = format!(
            "manifest_version: 1\nid: {id}\nversion: 0.1.0\ndisplay_name: Probe\ndescription: A probe.\nabi: 1\n{extra}adapter:\n{spec}\ntools:\n  - name: {}_run\n    title: Run\n    description: Runs.\n    side_effects: read\n    input_schema: {{type: object}}\n    invoke: {{}}\n",
            id.replace('-', "_")
        );
        fs::write(dir.join(format!("{id}.tool.yaml")), manifest).unwrap();
        p.quiver(&["sign", &format!("plugins/{id}/{id}.tool.yaml"), "--key", "keys/test.key"]).success();
    };
    adapter("missing-prog", "  command: {program: quiver-no-such-program}", "");
    adapter(
        "http-probe",
        "  http: {base_url: \"http://127.0.0.1:9\", env_headers: {Authorization: QUIVER_PROBE_SECRET}}",
        "sandbox: {network: true}\n",
    );
    adapter("fine-prog", "  command: {program: jq}", "");
    let run = p.quiver(&["verify"]).env_remove("QUIVER_PROBE_SECRET").failure(1);
    let out = run.stdout();
    assert!(
        out.contains("missing-prog") && out.contains("adapter check") && out.contains("quiver-no-such-program"),
        "{out}"
    );
    assert!(out.contains("http-probe") && out.contains("QUIVER_PROBE_SECRET"), "{out}");
    assert!(out.contains("OK") && out.contains("fine-prog"), "{out}");
    assert!(out.contains("2 failed"), "{out}");
}

#[test]
fn verify_names_the_failed_check_of_a_tampered_library() {
    let p = Project::new();
    let lib = p.path(&format!("plugins/marker/{}", marker_library().file_name().unwrap().to_string_lossy()));
    let mut bytes = fs::read(&lib).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x01;
    fs::write(&lib, bytes).unwrap();
    assert_eq!(failed_stage(&p), "checksum");
}

#[test]
fn verify_names_the_failed_check_of_an_edited_manifest() {
    let p = Project::new();
    let text = fs::read_to_string(p.manifest()).unwrap();
    fs::write(p.manifest(), text.replace("Returns its input text.", "Returns its input text, honestly.")).unwrap();
    assert_eq!(failed_stage(&p), "signature");
}

#[test]
fn verify_names_the_failed_check_of_a_foreign_signature() {
    let p = Project::new();
    p.quiver(&["keygen", "--out-dir", "keys", "--name", "other"]).success();
    p.quiver(&["sign", "plugins/marker/marker.tool.yaml", "--key", "keys/other.key"]).success();
    assert_eq!(failed_stage(&p), "signature");
}

#[test]
fn verify_names_the_failed_check_of_a_missing_signature() {
    let p = Project::new();
    fs::remove_file(p.path("plugins/marker/marker.tool.yaml.minisig")).unwrap();
    assert_eq!(failed_stage(&p), "signature");
    // The tampered bundle is not loaded either, and `list` says so with exit code 1.
    let run = p.quiver(&["list"]).failure(1);
    assert!(run.stderr().contains("signature"), "{}", run.stderr());
    assert!(!run.stdout().contains("marker_echo"));
}

/// The marker manifest lines that declare a tool the library does not implement.
const GHOST_TOOL: &str = "    policies: {execution: inline}\n  - name: marker_ghost\n    title: Ghost\n    description: Declared in tool.yaml, never exported by the library.\n    domain: test\n    side_effects: read";

#[test]
fn verify_fails_on_a_manifest_naming_a_tool_the_library_lacks() {
    let p = Project::new();
    // A library whose embedded manifest (and so the signed one) declares `marker_ghost`, which
    // its `export_plugin!` does not implement: every signature and checksum check passes.
    let lib = quiver_tests::plugin_library("marker-plugin", &[("QUIVER_MARKER_ECHO_LINES", GHOST_TOOL)]);
    let dir = p.path("plugins/marker");
    let lib_copy = dir.join(lib.file_name().unwrap());
    fs::copy(&lib, &lib_copy).unwrap();
    let source = fs::read_to_string(repo_root().join("tests/plugins/marker-plugin/tool.yaml")).unwrap();
    fs::write(p.manifest(), source.replacen("    policies: {execution: inline}", GHOST_TOOL, 1)).unwrap();
    p.quiver(&["sign", "plugins/marker/marker.tool.yaml", "--key", "keys/test.key", "--library"])
        .arg_path(&lib_copy)
        .success();
    let run = p.quiver(&["verify"]).failure(1);
    let out = run.stdout();
    assert!(out.contains("FAILED") && out.contains("marker.tool.yaml"), "{out}");
    assert!(out.contains("`marker_ghost`") && out.contains("does not implement"), "{out}");
    assert!(out.contains("export_plugin!") && out.contains("tool.yaml"), "the fix is named: {out}");
    let v = p.quiver(&["verify", "--json"]).failure(1).json();
    assert_eq!(v["n_failed"], 1, "{v:#}");
    assert!(v["bundles"][0]["message"].as_str().unwrap().contains("marker_ghost"), "{v:#}");
    // `list` refuses it too, with exit code 1.
    let run = p.quiver(&["list"]).failure(1);
    assert!(run.stderr().contains("marker_ghost"), "{}", run.stderr());
}

#[test]
fn a_bare_library_in_the_plugins_folder_is_warned_about_with_the_fix() {
    let p = Project::new();
    fs::copy(marker_library(), p.path("plugins/stray.so")).unwrap();
    let run = p.quiver(&["list"]).success();
    let err = run.stderr();
    assert!(err.contains("stray.so") && err.contains("without a manifest"), "{err}");
    assert!(err.contains("NAME.tool.yaml") && err.contains("build-plugins"), "says how to fix it: {err}");
    // The real bundle beside it still serves.
    assert!(run.stdout().contains("marker_echo"), "{}", run.stdout());
}

#[test]
fn keygen_refuses_to_overwrite_and_protects_the_secret_key() {
    use std::os::unix::fs::PermissionsExt;
    let p = Project::new();
    let mode = fs::metadata(p.path("keys/test.key")).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let before = fs::read(p.path("keys/test.key")).unwrap();
    p.quiver(&["keygen", "--out-dir", "keys", "--name", "test"]).failure(1);
    assert_eq!(fs::read(p.path("keys/test.key")).unwrap(), before);
    let v = p.quiver(&["keygen", "--json", "--out-dir", "keys", "--name", "third"]).success().json();
    assert!(v["key_id"].is_string());
}

/// The `trusted_keys` entry `keygen` prints is one the configuration can use as written:
/// relative to the configuration file's folder (where its paths start), not to the folder
/// `keygen` ran in, and absolute when the key is outside that folder or there is no
/// configuration file.
#[test]
fn keygen_prints_a_trusted_key_path_the_configuration_resolves() {
    let p = Project::new();
    let path_line = |run: &Run| {
        let out = run.stdout();
        let line = out.lines().rfind(|l| l.trim_start().starts_with("path:")).map(str::to_owned);
        line.unwrap_or_else(|| panic!("no `path:` line:\n{out}"))
            .trim_start()
            .trim_start_matches("path:")
            .trim()
            .to_owned()
    };
    // Run inside `keys/`, writing there, with the project's quiver.yaml named by `--config`.
    let run = p.quiver_in(&p.path("keys"), &["--config", "../quiver.yaml", "keygen", "--name", "inner"]).success();
    assert_eq!(path_line(&run), "keys/inner.pub", "{}", run.stdout());
    assert!(run.stdout().contains("quiver.yaml"), "{}", run.stdout());
    // The JSON form says the same.
    let v = p
        .quiver_in(&p.path("keys"), &["--json", "--config", "../quiver.yaml", "keygen", "--name", "json"])
        .success()
        .json();
    assert_eq!(v["trusted_key"]["path"], "keys/json.pub", "{v}");
    // A key outside the configuration's folder: an absolute path.
    let outside = tempfile::tempdir().unwrap();
    let run = p.quiver(&["keygen", "--name", "away", "--out-dir"]).arg_path(outside.path()).success();
    let printed = path_line(&run);
    assert!(Path::new(&printed).is_absolute() && Path::new(&printed).is_file(), "{}", run.stdout());
    // No configuration file at all: absolute, since nothing says where paths start.
    let bare = tempfile::tempdir().unwrap();
    let run = p.quiver_in(bare.path(), &["keygen", "--name", "solo"]).success();
    let printed = path_line(&run);
    assert_eq!(Path::new(&printed), bare.path().join("solo.pub").canonicalize().unwrap(), "{}", run.stdout());
}

#[test]
fn sign_with_library_keeps_comments_and_replaces_the_artifact() {
    let p = Project::new();
    let text = fs::read_to_string(p.manifest()).unwrap();
    assert_eq!(text.matches("artifact:").count(), 1);
    let commented = format!("# my comment\n{text}");
    fs::write(p.manifest(), commented).unwrap();
    let lib = p.path(&format!("plugins/marker/{}", marker_library().file_name().unwrap().to_string_lossy()));
    p.quiver(&["sign", "plugins/marker/marker.tool.yaml", "--key", "keys/test.key", "--library"])
        .arg_path(&lib)
        .success();
    let text = fs::read_to_string(p.manifest()).unwrap();
    assert!(text.starts_with("# my comment\n"));
    assert_eq!(text.matches("artifact:").count(), 1);
    p.quiver(&["verify"]).success();
}

#[test]
fn json_runs_keep_stdout_clean_of_logs() {
    let p = Project::new();
    // Verbose logging must still go to stderr only.
    for args in [
        &["-vv", "--json", "list"][..],
        &["-vv", "--json", "list", "--all"],
        &["-vv", "--json", "verify"],
        &["-vv", "--json", "call", "marker_echo", "--args", r#"{"text": "x"}"#],
    ] {
        let run = p.quiver(args).success();
        run.json();
        assert!(!run.stderr().is_empty() || args.contains(&"verify"), "expected logs on stderr for {args:?}");
    }
}

#[test]
fn bad_config_names_the_file_and_the_fix() {
    let p = Project::new();
    let run = p.quiver(&["--config", "missing.yaml", "list"]).failure(1);
    assert!(run.stderr().contains("missing.yaml"), "{}", run.stderr());

    fs::write(p.path("quiver.yaml"), "plugins_dir: plugins\ntrusted_keys:\n  - name: gone\n    path: keys/gone.pub\n")
        .unwrap();
    let run = p.quiver(&["list"]).failure(1);
    assert!(run.stderr().contains("gone.pub"), "{}", run.stderr());

    fs::write(p.path("quiver.yaml"), "plugins_dir: [1, 2]\n").unwrap();
    let run = p.quiver(&["list"]).failure(1);
    assert!(run.stderr().contains("quiver.yaml"), "{}", run.stderr());
}

mod adapters;
mod approvals;
mod contract;
mod isolation;
mod operations;
mod revisions;
mod sessions;
mod setup;
mod startup;
mod surface;
mod traces;
mod upstreams;

/// `quiver list | head`: a closed stdout ends the command quietly, with no panic.
#[test]
fn a_closed_stdout_is_no_panic() {
    let p = Project::new();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(QUIVER)
        .current_dir(p.path(""))
        .args(["list"])
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!stderr.contains("Broken pipe"), "{stderr}");
}

/// `--http 0` picks a free port (as the README says) and prints the bound address.
#[test]
fn serve_http_port_zero_picks_a_free_port() {
    use std::io::{BufRead, BufReader};
    let p = Project::new();
    let mut child = Command::new(QUIVER)
        .current_dir(p.path(""))
        .args(["serve", "--http", "0"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    let bound = loop {
        let Some(Ok(line)) = lines.next() else { break None };
        if let Some(i) = line.find("http://127.0.0.1:") {
            break Some(line[i..].to_owned());
        }
        seen.push(line);
    };
    let _ = child.kill();
    let _ = child.wait();
    let bound = bound.unwrap_or_else(|| panic!("no bound address on stderr: {seen:?}"));
    assert!(!bound.starts_with("http://127.0.0.1:0/"), "{bound}");
}

/// `eval search --misses`: the help says what the flag lists.
#[test]
fn eval_misses_help_matches_what_is_listed() {
    let out = Command::new(QUIVER).args(["eval", "search", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    let line = help.lines().skip_while(|l| !l.contains("--misses")).take(3).collect::<Vec<_>>().join(" ");
    assert!(line.contains("smallest k"), "{line}");
}

/// `eval search --tools` ranks as the host would: it reads the `search:` section of the
/// configuration (and only that section: no state folder is made), so a configured model that
/// cannot be used is an error naming the setting, not a silently lexical measurement.
#[test]
fn eval_search_ranks_a_tool_list_with_the_configured_search_settings() {
    let dir = tempfile::tempdir().unwrap();
    let data = repo_root().join("crates/catalog/data");
    let tools = data.join("mcp_reference_tools.json");
    let queries = data.join("mcp_reference_queries.jsonl");
    let eval = |cwd: &Path| {
        Command::new(QUIVER)
            .current_dir(cwd)
            .args(["eval", "search", "--k", "1,5", "--tools"])
            .arg(&tools)
            .arg("--queries")
            .arg(&queries)
            .env("XDG_CONFIG_HOME", cwd.join("xdg"))
            .env_remove("QUIVER_CONFIG")
            .output()
            .unwrap()
    };
    // No configuration: lexical ranking, as before.
    let plain = eval(dir.path());
    assert!(plain.status.success(), "{}", String::from_utf8_lossy(&plain.stderr));
    assert!(String::from_utf8_lossy(&plain.stdout).contains("recall@5"));
    fs::write(dir.path().join("quiver.yaml"), "state_dir: state\nsearch: {embedding: models/none}\n").unwrap();
    let out = eval(dir.path());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("search.embedding") && err.contains("models/none"), "{err}");
    assert!(!dir.path().join("state").exists(), "only the search section was resolved");
}

/// A bundle the host rejects (its signed manifest names a tool the library lacks) makes
/// `quiver list` say so and exit 1, while the good bundles are still listed.
#[test]
fn list_exits_non_zero_when_a_bundle_was_rejected() {
    let p = Project::new();
    p.quiver(&["list"]).success();
    let dir = p.path("plugins/broken");
    fs::create_dir_all(&dir).unwrap();
    let lib = marker_library();
    let lib_copy = dir.join(lib.file_name().unwrap());
    fs::copy(lib, &lib_copy).unwrap();
    let source = fs::read_to_string(repo_root().join("tests/plugins/marker-plugin/tool.yaml")).unwrap();
    let text = source.replace("id: marker-plugin", "id: broken-plugin")
        + "  - name: marker_missing\n    title: Missing\n    description: Not in the library.\n    domain: test\n    side_effects: read\n";
    fs::write(dir.join("broken.tool.yaml"), text).unwrap();
    p.quiver(&["sign", "plugins/broken/broken.tool.yaml", "--key", "keys/test.key", "--library"])
        .arg_path(&lib_copy)
        .success();
    let run = p.quiver(&["list"]).failure(1);
    assert!(run.stdout().contains("marker_echo"), "{}", run.stdout());
    assert!(run.stderr().contains("rejected bundle"), "{}", run.stderr());
}

#[test]
fn serve_refuses_a_public_bind_without_auth() {
    let p = Project::new();
    let run = p.quiver(&["serve", "--http", "0.0.0.0:0"]).failure(1);
    let err = run.stderr();
    assert!(err.contains("without authentication") && err.contains("--insecure-no-auth"), "{err}");
    assert!(err.contains("quiver.yaml"), "names the configuration to fix: {err}");
}

/// `--metrics` on a public address without authentication is refused before anything listens,
/// and never announced as served.
#[test]
fn serve_refuses_public_metrics_without_auth_and_never_says_it_serves_them() {
    let p = Project::new();
    let run = p.quiver(&["serve", "--metrics", "0.0.0.0:0"]).failure(1);
    let err = run.stderr();
    assert!(err.contains("refusing to serve metrics") && err.contains("server.auth"), "{err}");
    assert!(!err.contains("serving metrics at"), "a refused endpoint is not announced: {err}");
}

#[test]
fn the_rollback_record_persists_and_rolling_back_is_explicit_and_logged() {
    let p = Project::new();
    // Inspecting commands check against the record but never raise it: `quiver list --plugins
    // STAGING` of a newer version must not lock the served one out.
    p.quiver(&["list"]).success();
    assert!(!p.path(".quiver-state/rollback.json").exists(), "`quiver list` wrote the rollback record");
    // `serve` raises it (its first scan runs before stdin is read; stdin is empty here).
    p.quiver(&["serve"]).success();
    let record = fs::read_to_string(p.path(".quiver-state/rollback.json")).unwrap();
    assert!(record.contains("marker-plugin") && record.contains("0.1.0"), "{record}");
    let run = p.quiver(&["rollback", "marker-plugin", "--reason", "bad release"]).success();
    assert!(run.stdout().contains("rollback allowed for marker-plugin"), "{}", run.stdout());
    let record = fs::read_to_string(p.path(".quiver-state/rollback.json")).unwrap();
    assert!(!record.contains("marker-plugin"), "{record}");
    let log = fs::read_to_string(p.path(".quiver-state/rollback.log")).unwrap();
    assert!(log.contains("bad release") && log.contains("marker-plugin"), "{log}");
    // A reason is required.
    p.quiver(&["rollback", "marker-plugin", "--reason", " "]).failure(2);
}

/// Runs `quiver serve` (rescans every 100 ms) in `p`, makes `change` once it is up, and returns
/// whether a stderr line `wanted` came within 20 s, with the lines seen.
fn serve_stderr_after(p: &Project, change: impl FnOnce(), wanted: impl Fn(&str) -> bool) -> (bool, Vec<String>) {
    fs::write(
        p.path("quiver.yaml"),
        "plugins_dir: plugins\nrescan_interval_ms: 100\ntrusted_keys:\n  - name: test\n    path: keys/test.pub\n",
    )
    .unwrap();
    let mut child = std::process::Command::new(QUIVER)
        .current_dir(p.dir.path())
        .arg("serve")
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stderr)).map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    std::thread::sleep(std::time::Duration::from_millis(500));
    change();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut seen = Vec::new();
    let found = loop {
        match rx.recv_timeout(std::time::Duration::from_millis(200)) {
            Ok(line) => {
                let hit = wanted(&line);
                seen.push(line);
                if hit {
                    break true;
                }
            }
            Err(_) if std::time::Instant::now() > deadline => break false,
            Err(_) => {}
        }
    };
    drop(child.stdin.take());
    let _ = child.wait();
    (found, seen)
}

#[test]
fn serve_reports_a_bundle_its_rescan_rejects_without_verbose_logging() {
    let p = Project::new();
    // The manifest edited after signing: the next rescan refuses it and keeps the last good
    // version serving; the operator must hear of it at the default log level.
    let (found, seen) = serve_stderr_after(
        &p,
        || {
            let mut text = fs::read_to_string(p.manifest()).unwrap();
            text.push_str("\n# edited after signing\n");
            fs::write(p.manifest(), text).unwrap();
        },
        |line| line.contains("rejected bundle") && line.contains("marker.tool.yaml") && line.contains("signature"),
    );
    assert!(found, "no notice of the rejected bundle on stderr:\n{}", seen.join("\n"));
    assert_eq!(seen.iter().filter(|l| l.contains("rejected bundle")).count(), 1, "{seen:?}");
}

/// Under `strict` (the default), a bundle file made writable by others while serving is
/// noticed at the next rescan (a permission change alone leaves size and mtime as they were):
/// refused and reported; the last good version, already loaded, keeps serving.
#[test]
fn serve_notices_a_bundle_file_made_writable_by_others() {
    use std::os::unix::fs::PermissionsExt;
    let p = Project::new();
    let (found, seen) = serve_stderr_after(
        &p,
        || fs::set_permissions(p.manifest(), fs::Permissions::from_mode(0o666)).unwrap(),
        |line| line.contains("rejected bundle") && line.contains("writable by every user"),
    );
    assert!(found, "the permission change was not noticed:\n{}", seen.join("\n"));
}

#[test]
fn a_configuration_entry_naming_no_loaded_plugin_is_warned_about() {
    let p = Project::new();
    fs::write(
        p.path("quiver.yaml"),
        "plugins_dir: plugins\ntrusted_keys:\n  - name: test\n    path: keys/test.pub\n\
         isolation:\n  plugins:\n    marker-plugn: process\nplugin_config:\n  markerplugin: {a: 1}\n",
    )
    .unwrap();
    let err = p.quiver(&["list"]).success().stderr();
    for entry in ["isolation.plugins.marker-plugn", "plugin_config.markerplugin"] {
        let line =
            err.lines().find(|l| l.contains(entry)).unwrap_or_else(|| panic!("{entry} not warned about:\n{err}"));
        assert!(line.contains("quiver.yaml") && line.contains("`marker-plugin`"), "{line}");
    }
    // A profile's tool names and scopes too (a misspelt eager tool is never typed up front, a
    // misspelt gated one is not gated).
    fs::write(
        p.path("quiver.yaml"),
        "plugins_dir: plugins\ntrusted_keys:\n  - name: test\n    path: keys/test.pub\n\
         default_profile: p\nprofiles:\n  p:\n    mode: hybrid\n    scopes: ['*', markr.read]\n    eager: [marker_ech, marker_echo]\n    gated: [marker_sleeep]\n",
    )
    .unwrap();
    let err = p.quiver(&["list"]).success().stderr();
    for (entry, close) in
        [("profiles.p.eager", "`marker_echo`"), ("profiles.p.gated", "`marker_sleep`"), ("profiles.p.scopes", "")]
    {
        let line =
            err.lines().find(|l| l.contains(entry)).unwrap_or_else(|| panic!("{entry} not warned about:\n{err}"));
        assert!(line.contains("quiver.yaml") && line.contains(close), "{line}");
    }
    assert_eq!(err.matches("profiles.p.eager").count(), 1, "only the misspelt name: {err}");
}

#[test]
fn paths_of_the_wrong_kind_and_non_utf8_configurations_are_named_as_such() {
    let p = Project::new();
    fs::create_dir(p.path("conf.d")).unwrap();
    let err = p.quiver(&["--config", "conf.d", "list"]).failure(1).stderr();
    assert!(err.contains("conf.d is a folder, not a file"), "{err}");
    fs::write(p.path("plugins.txt"), "x").unwrap();
    let err = p.quiver(&["--plugins", "plugins.txt", "list"]).failure(1).stderr();
    assert!(err.contains("plugins.txt is a file, not a folder") && !err.contains("build-plugins"), "{err}");
    let err = p
        .quiver(&["sign", "plugins/marker/marker.tool.yaml", "--key", "keys/test.key", "--library", "nope.so"])
        .failure(1)
        .stderr();
    assert!(err.contains("--library nope.so: no such file") && !err.contains("copy"), "{err}");
    fs::write(p.path("latin1.yaml"), b"plugins_dir: plugins\n# caf\xe9\n").unwrap();
    let err = p.quiver(&["--config", "latin1.yaml", "list"]).failure(1).stderr();
    assert!(err.contains("latin1.yaml: not UTF-8") && err.contains("line 2, column 6"), "{err}");
}

/// Bundle files are read as regular files only: a manifest that is a symbolic link is a
/// rejected bundle, named as such (not a library without a manifest, not a removed bundle),
/// and a linked bundle folder is reported instead of being passed over in silence.
#[test]
fn symbolic_links_in_the_plugins_folder_are_reported_not_passed_over() {
    let p = Project::new();
    let elsewhere = p.path("elsewhere.tool.yaml");
    fs::rename(p.manifest(), &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, p.manifest()).unwrap();
    let err = p.quiver(&["list"]).failure(1).stderr();
    assert!(err.contains("rejected bundle") && err.contains("marker.tool.yaml"), "{err}");
    assert!(!err.contains("without a manifest"), "{err}");
    fs::remove_file(p.manifest()).unwrap();
    fs::rename(&elsewhere, p.manifest()).unwrap();
    fs::rename(p.path("plugins/marker"), p.path("marker-bundle")).unwrap();
    std::os::unix::fs::symlink(p.path("marker-bundle"), p.path("plugins/marker")).unwrap();
    let err = p.quiver(&["list"]).run().stderr();
    let line = err.lines().find(|l| l.contains("symbolic link")).unwrap_or_else(|| panic!("not reported:\n{err}"));
    assert!(line.contains("plugins/marker") && line.contains("copy"), "{line}");
}

#[test]
fn token_prints_only_the_hash_for_the_configuration() {
    let p = Project::new();
    let v = p.quiver(&["--json", "token", "--principal", "ci", "--profile", "plan"]).success().json();
    let token = v["token"].as_str().unwrap();
    assert!(token.len() >= 64, "{token}");
    assert_eq!(v["sha256"].as_str().unwrap(), quiver_manifest::sha256_hex(token.as_bytes()));
}

/// The entry `quiver token` prints pastes into `server.auth.tokens` as it is, whatever the
/// principal and profile hold: YAML punctuation, words YAML reads as other types, quotes,
/// backslashes, line breaks and characters YAML does not allow unescaped.
#[test]
fn token_entries_paste_into_the_configuration_and_read_back_exactly() {
    let p = Project::new();
    let awkward = [
        "a,b",
        "ops: team",
        "#x",
        "null",
        "true",
        "012",
        "~",
        "it's",
        "say \"hi\"",
        "back\\slash",
        "[x] {y}",
        "*star",
        "&amp",
        "!tag",
        "- dash",
        "%percent",
        "@at",
        "tab\there",
        "two\nlines",
        "  padded  ",
        "é ünïcode 中文 🦀",
        "nel\u{85}ls\u{2028}ps\u{2029}",
        "del\u{7f}bom\u{feff}bell\u{7}",
    ];
    // Profile names are lower-case letters, digits, `_` and `-`, among the configuration's
    // profiles: these are declared there as JSON strings (which YAML reads alike), and each
    // unquoted would read as another type or not at all.
    let profiles = ["null", "true", "false", "yes", "off", "nan", "inf", "e3"];
    let mut declared: Vec<String> =
        profiles.iter().map(|p| format!("{}: {{mode: lazy}}", serde_json::to_string(p).unwrap())).collect();
    declared.push("agent: {mode: hybrid}".to_owned());
    for (n, principal) in awkward.iter().enumerate() {
        let profile = profiles[n % profiles.len()];
        for with_profile in [false, true] {
            // `--principal=VALUE`: a value starting with `-` is not taken for an option.
            let mut args = vec!["token".to_owned(), format!("--principal={principal}")];
            if with_profile {
                args.push(format!("--profile={profile}"));
            }
            let out = p.quiver(&args.iter().map(String::as_str).collect::<Vec<_>>()).success().stdout();
            let entry = out
                .lines()
                .skip_while(|l| !l.contains("under server.auth.tokens"))
                .nth(1)
                .unwrap_or_else(|| panic!("no entry printed for {principal:?}:\n{out}"));
            let config = format!(
                "plugins_dir: plugins\ntrusted_keys:\n  - name: test\n    path: keys/test.pub\nprofiles: {{{}}}\nserver:\n  auth:\n    tokens:\n    {entry}\n",
                declared.join(", ")
            );
            fs::write(p.path("pasted.yaml"), &config).unwrap();
            let run = p.quiver(&["--config", "pasted.yaml", "--json", "config"]).run();
            assert_eq!(run.code(), 0, "{principal:?}: the pasted entry does not read:\n{config}\n{}", run.stderr());
            let token = &run.json()["settings"]["server"]["auth"]["tokens"][0];
            assert_eq!(token["principal"], *principal, "{config}");
            let want = if with_profile { Value::from(profile) } else { Value::Null };
            assert_eq!(token["profile"], want, "{config}");
        }
    }
}

#[test]
fn sign_refuses_a_manifest_file_the_host_never_loads() {
    let p = Project::new();
    let dir = p.path("plugins/marker");
    // A newcomer signs the source manifest, `tool.yaml`, instead of a bundle's NAME.tool.yaml.
    fs::copy(repo_root().join("tests/plugins/marker-plugin/tool.yaml"), dir.join("tool.yaml")).unwrap();
    let before = fs::read_to_string(dir.join("tool.yaml")).unwrap();
    let lib = dir.join(marker_library().file_name().unwrap());
    let run = p
        .quiver(&["sign", "plugins/marker/tool.yaml", "--key", "keys/test.key", "--library"])
        .arg_path(&lib)
        .failure(2);
    assert!(
        run.stderr().contains("NAME.tool.yaml") && run.stderr().contains("marker-plugin.tool.yaml"),
        "{}",
        run.stderr()
    );
    assert_eq!(fs::read_to_string(dir.join("tool.yaml")).unwrap(), before, "the source manifest was rewritten");
    assert!(!dir.join("tool.yaml.minisig").exists());
}

/// `quiver sign` of a plugin manifest with no `artifact` section and no `--library` used to
/// warn, exit 0 and write a signature every host refuses; it now refuses and writes nothing.
#[test]
fn sign_refuses_a_plugin_manifest_that_pins_no_library() {
    let p = Project::new();
    let dir = p.path("plugins/bare");
    fs::create_dir_all(&dir).unwrap();
    fs::copy(repo_root().join("tests/plugins/marker-plugin/tool.yaml"), dir.join("marker.tool.yaml")).unwrap();
    let run = p.quiver(&["sign", "plugins/bare/marker.tool.yaml", "--key", "keys/test.key"]).failure(2);
    assert!(run.stderr().contains("no `artifact` section") && run.stderr().contains("--library"), "{}", run.stderr());
    assert!(!dir.join("marker.tool.yaml.minisig").exists(), "a signature no host accepts was written");
}
