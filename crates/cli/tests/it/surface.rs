//! Golden test of the first-turn surface of the bundled plugins: the bytes a client receives are
//! pinned in `crates/cli/test_data/`, identical across process restarts, and shared by modes
//! with the same head. Refresh the golden files with `UPDATE_GOLDEN=1` after an intended change.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use super::{QUIVER, repo_root};

const PLUGINS: [&str; 3] = ["fs-tools", "text-tools", "time-tools"];

/// Debug builds of the bundled plugins (see `quiver_tests::plugin_library`).
fn bundled_libraries() -> &'static [PathBuf] {
    static LIBS: OnceLock<Vec<PathBuf>> = OnceLock::new();
    LIBS.get_or_init(|| PLUGINS.iter().map(|p| quiver_tests::plugin_library(p, &[])).collect())
}

/// A project with signed bundles of the three bundled plugins and the test profiles.
fn project() -> tempfile::TempDir {
    project_with(
        "profiles:\n  agent: {mode: hybrid, eager: [fs_read, fs_list]}\n  plan: {mode: lazy, eager: [fs_read, fs_list]}\n  tiny: {mode: lazy, eager: [fs_read, fs_search], max_typed_tools: 3}\n",
    )
}

/// A project with signed bundles of the three bundled plugins and `profiles` (YAML, appended
/// to the configuration; empty: the built-in default profile).
fn project_with(profiles: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let q = |args: &[&str]| {
        let out = Command::new(QUIVER).current_dir(dir.path()).args(args).env_remove("RUST_LOG").output().unwrap();
        assert!(out.status.success(), "quiver {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        out.stdout
    };
    q(&["keygen", "--out-dir", "keys", "--name", "test"]);
    std::fs::write(
        dir.path().join("quiver.yaml"),
        format!("plugins_dir: plugins\ntrusted_keys:\n  - path: keys/test.pub\n{profiles}"),
    )
    .unwrap();
    for (name, lib) in PLUGINS.iter().zip(bundled_libraries()) {
        let bundle = dir.path().join("plugins").join(name);
        std::fs::create_dir_all(&bundle).unwrap();
        let lib_copy = bundle.join(lib.file_name().unwrap());
        std::fs::copy(lib, &lib_copy).unwrap();
        std::fs::copy(
            repo_root().join("plugins").join(name).join("tool.yaml"),
            bundle.join(format!("{name}.tool.yaml")),
        )
        .unwrap();
        let manifest = format!("plugins/{name}/{name}.tool.yaml");
        q(&["sign", &manifest, "--key", "keys/test.key", "--library", lib_copy.to_str().unwrap()]);
    }
    dir
}

fn surface(dir: &Path, profile: &str) -> Vec<u8> {
    let out = Command::new(QUIVER)
        .current_dir(dir)
        .args(["surface", "--bytes", "--profile", profile])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

/// The `tools/list` responses of a real `quiver serve` session (stdio), exactly as the client
/// reads them, `_meta` included, one line per page; only what differs per build and test run
/// is replaced: library digests (`<sha256>`) and the throwaway signing key's id (`<signer>`).
fn wire_listing(dir: &Path, profile: &str) -> Vec<u8> {
    use std::io::{BufRead, BufReader, Write};
    let mut child = Command::new(QUIVER)
        .current_dir(dir)
        .args(["serve", "--profile", profile])
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut send = |v: serde_json::Value| writeln!(stdin, "{v}").unwrap();
    send(serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "golden", "version": "1"}}}));
    lines.next().unwrap().unwrap();
    send(serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    for id in 2.. {
        let params = match &cursor {
            Some(c) => serde_json::json!({ "cursor": c }),
            None => serde_json::json!({}),
        };
        send(serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/list", "params": params}));
        let mut line = lines.next().unwrap().unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        for t in v["result"]["tools"].as_array().unwrap() {
            for (k, placeholder) in [("io.github.quiver/sha256", "<sha256>"), ("io.github.quiver/signer", "<signer>")] {
                if let Some(x) = t["_meta"][k].as_str() {
                    line = line.replace(x, placeholder);
                }
            }
        }
        out.extend_from_slice(line.as_bytes());
        out.push(b'\n');
        cursor = v["result"]["nextCursor"].as_str().map(str::to_owned);
        if cursor.is_none() {
            break;
        }
    }
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
    out
}

fn check_golden(name: &str, bytes: &[u8]) {
    let path = repo_root().join("crates/cli/test_data").join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, bytes).unwrap();
        return;
    }
    let golden =
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}; create it with UPDATE_GOLDEN=1", path.display()));
    assert!(
        golden == bytes,
        "the surface differs from {}; if the change is intended, refresh it with UPDATE_GOLDEN=1\n  now: {}",
        path.display(),
        String::from_utf8_lossy(bytes)
    );
}

#[test]
fn the_first_turn_surface_is_byte_stable_and_pinned() {
    let dir = project();
    let hybrid = surface(dir.path(), "agent");
    let lazy = surface(dir.path(), "plan");
    // A restart (a new process loading the same bundles) gives the same bytes.
    assert_eq!(surface(dir.path(), "agent"), hybrid);
    assert_eq!(surface(dir.path(), "plan"), lazy);
    check_golden("surface-hybrid.json", &hybrid);
    check_golden("surface-lazy.json", &lazy);
    // And what a client receives on the wire, `_meta` included.
    let hybrid_wire = wire_listing(dir.path(), "agent");
    check_golden("surface-hybrid.wire.jsonl", &hybrid_wire);
    check_golden("surface-lazy.wire.jsonl", &wire_listing(dir.path(), "plan"));
    let wire_text = String::from_utf8_lossy(&hybrid_wire);
    assert!(!wire_text.contains("deprecations"), "deprecation notices leaked into tools/list: {wire_text}");

    // Modes that share a head serialize it identically, first.
    let parse = |b: &[u8]| serde_json::from_slice::<Vec<serde_json::Value>>(b).unwrap();
    let (h, l) = (parse(&hybrid), parse(&lazy));
    let head = |v: &[serde_json::Value]| {
        v.iter()
            .take_while(|t| !["tool_search", "list_tools", "run_tool"].contains(&t["name"].as_str().unwrap()))
            .count()
    };
    let n = head(&l);
    assert!(n >= 2, "the eager tools are in the head");
    assert_eq!(head(&h), n);
    assert_eq!(h[..n], l[..n]);
    let head_bytes = serde_json::to_vec(&l[..n]).unwrap();
    assert_eq!(hybrid[..head_bytes.len() - 1], head_bytes[..head_bytes.len() - 1]);

    // No hidden, deprecated or removed name, and no deprecation notice, in the catalog bytes.
    for bytes in [&hybrid, &lazy] {
        let text = String::from_utf8_lossy(bytes);
        for name in ["\"read_file\"", "\"cat\"", "\"write_file\"", "\"delete_file\""] {
            assert!(!text.contains(name), "{name} on the surface");
        }
        assert!(!text.contains("deprecated"), "a deprecation notice leaked into the catalog bytes");
    }
}

#[test]
fn a_tiny_profile_keeps_an_always_on_surface_of_at_most_three_tools() {
    let dir = project();
    let tools: Vec<serde_json::Value> = serde_json::from_slice(&surface(dir.path(), "tiny")).unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["fs_read", "fs_search", "tool_search"]);
}

/// A stdio session of `quiver serve` (the default profile) that sends each request
/// (`method`, `params`) in turn and waits for its answer: the responses, in request order
/// (notifications such as tools/list_changed are skipped).
fn stdio_session(dir: &Path, requests: &[(&str, serde_json::Value)]) -> Vec<serde_json::Value> {
    use std::io::{BufRead, BufReader, Write};
    let mut child = Command::new(QUIVER)
        .current_dir(dir)
        .args(["serve"])
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut send = |v: serde_json::Value| writeln!(stdin, "{v}").unwrap();
    send(serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "surface", "version": "1"}}}));
    lines.next().unwrap().unwrap();
    send(serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let mut answers = Vec::new();
    for (k, (method, params)) in requests.iter().enumerate() {
        let id = 2 + k as u64;
        send(serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        answers.push(loop {
            let v: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
            if v["id"] == id {
                break v;
            }
        });
    }
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
    answers
}

/// A stdio session that runs `tool_search` for each query, then lists its tools: the search
/// answers and the final tool list.
fn searches_then_listing(dir: &Path, queries: &[&str]) -> (Vec<serde_json::Value>, Vec<serde_json::Value>) {
    let mut requests: Vec<(&str, serde_json::Value)> = queries
        .iter()
        .map(|q| ("tools/call", serde_json::json!({"name": "tool_search", "arguments": {"query": q}})))
        .collect();
    requests.push(("tools/list", serde_json::json!({})));
    let mut answers = stdio_session(dir, &requests);
    let listing = answers.pop().unwrap();
    let answers = answers.into_iter().map(|a| a["result"]["structuredContent"].clone()).collect();
    (answers, listing["result"]["tools"].as_array().unwrap().clone())
}

/// The built-in default profile (no profiles configured) keeps its first turn at most 6 KiB
/// (typed and meta tools, the bytes `quiver surface --bytes` prints), and four typical
/// `tool_search` loads still fit in its 12 KiB budget: every loaded tool is in the tool list.
#[test]
fn the_default_profile_starts_small_and_four_typical_loads_fit() {
    let dir = project_with("");
    let first = surface_default(dir.path());
    assert!(first.len() <= 6144, "the default profile's first turn is {} bytes (at most 6144)", first.len());
    let queries = [
        "compare two texts line by line",
        "how many days between two dates",
        "find files containing a word",
        "pretty print json",
    ];
    let (answers, listing) = searches_then_listing(dir.path(), &queries);
    let listed: Vec<&str> = listing.iter().map(|t| t["name"].as_str().unwrap()).collect();
    let expected = ["text_diff", "date_diff", "fs_search", "json_format"];
    for ((q, a), want) in queries.iter().zip(&answers).zip(expected) {
        assert_eq!(a["tools"][0]["name"], want, "{q}: {a}");
        assert!(a.get("not_listed").is_none(), "{q}: loaded tools did not fit: {a}");
        assert!(listed.contains(&want), "{q}: {want} is not in the tool list {listed:?}");
        for n in a["loaded"].as_array().into_iter().flatten() {
            assert!(listed.contains(&n.as_str().unwrap()), "{q}: loaded {n} is not listed: {listed:?}");
        }
    }
    // The typed tools (everything but the meta tools), without `_meta`, within the budget.
    let typed: usize = listing
        .iter()
        .filter(|t| !["tool_search", "list_tools", "run_tool"].contains(&t["name"].as_str().unwrap()))
        .map(|t| {
            let mut t = t.clone();
            t.as_object_mut().unwrap().remove("_meta");
            serde_json::to_vec(&t).unwrap().len()
        })
        .sum();
    assert!(typed <= 12288, "{typed} bytes of typed tools after four loads");
}

fn surface_default(dir: &Path) -> Vec<u8> {
    let out =
        Command::new(QUIVER).current_dir(dir).args(["surface", "--bytes"]).env_remove("RUST_LOG").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

/// A stdio session that makes each call in turn: the `tools/call` responses.
fn session_calls(dir: &Path, calls: &[(&str, serde_json::Value)]) -> Vec<serde_json::Value> {
    let requests: Vec<(&str, serde_json::Value)> = calls
        .iter()
        .map(|(name, arguments)| ("tools/call", serde_json::json!({"name": name, "arguments": arguments})))
        .collect();
    stdio_session(dir, &requests)
}

/// The same malformed call repeated by an alias gets the hints of the tool the alias reaches
/// (its fields, an example, its schema), with the action an action's alias fills in; not "no
/// named fields" and an empty schema.
#[test]
fn repeated_malformed_calls_by_an_alias_get_the_hints_of_the_tool_it_reaches() {
    let dir = project_with("");
    let bad = serde_json::json!({"paht": "notes.txt"});
    let generic = serde_json::json!({"name": "read_file", "arguments": {"paht": "notes.txt"}});
    let calls = [
        ("write_file", bad.clone()),
        ("write_file", bad.clone()),
        ("write_file", bad.clone()),
        ("delete_file", bad.clone()),
        ("delete_file", bad.clone()),
        ("run_tool", generic.clone()),
    ];
    let answers = session_calls(dir.path(), &calls);
    let text = |a: &serde_json::Value| a["result"]["content"][0]["text"].as_str().unwrap_or_default().to_owned();
    let hint = |a: &serde_json::Value| a["result"]["_meta"]["io.github.quiver/error"]["details"]["hint"].clone();
    for a in &answers {
        assert_eq!(a["result"]["isError"], true, "{a}");
        assert!(!text(a).contains("no named fields"), "{}", text(a));
    }
    assert!(text(&answers[0]).contains("path (string, required)"), "{}", text(&answers[0]));
    assert!(text(&answers[5]).contains("path (string, required)"), "{}", text(&answers[5]));
    // The example of `delete_file` names its own action, which the alias accepts.
    assert_eq!(hint(&answers[4])["example"]["arguments"]["action"], "delete", "{}", answers[4]);
    assert!(hint(&answers[4])["example"]["arguments"]["path"].is_string(), "{}", answers[4]);
    // The whole schema is fs_edit's, with `write` as the only action.
    let schema = &hint(&answers[2])["input_schema"];
    assert!(schema["properties"]["path"].is_object(), "{}", answers[2]);
    assert_eq!(schema["properties"]["action"]["enum"], serde_json::json!(["write"]), "{}", answers[2]);
}

/// Entries naming an alias where a tool is meant are explained: a gated alias gates the whole
/// tool it reaches, a rate limit under an alias (or a misspelt name) limits nothing.
#[test]
fn configuration_entries_naming_an_alias_are_explained() {
    let dir = project_with(
        "default_profile: p\nprofiles:\n  p: {gated: [delete_file]}\nrate_limits:\n  write_file: {session: {per_minute: 1}}\n  fs_eidt: {session: {per_minute: 1}}\n",
    );
    let out = Command::new(QUIVER).current_dir(dir.path()).args(["list"]).env_remove("RUST_LOG").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    let line = |entry: &str| {
        err.lines().find(|l| l.contains(entry)).unwrap_or_else(|| panic!("{entry} not warned about:\n{err}")).to_owned()
    };
    let gated = line("profiles.p.gated");
    assert!(gated.contains("`delete_file`") && gated.contains("the whole tool `fs_edit` is gated"), "{gated}");
    let alias = line("rate_limits.write_file");
    assert!(alias.contains("no effect") && alias.contains("under `fs_edit`"), "{alias}");
    let typo = line("rate_limits.fs_eidt");
    assert!(typo.contains("no effect") && typo.contains("did you mean `fs_edit`"), "{typo}");
}
