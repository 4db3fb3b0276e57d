//! The loader's security contract and hot swap, with the marker test plugin.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use quiver_abi::{Status, ToolRequest, ToolResponse};
use quiver_catalog::{Catalog, NullSink};
use quiver_lifecycle::{Host, HostSettings, Stage, VerifyPolicy};
use quiver_manifest::{PublicKey, TrustedKeys};
use quiver_tests::{TestKey, plugin_library, write_bundle};

const PLUGIN: &str = "marker-plugin";
const V2: &[(&str, &str)] = &[("QUIVER_MARKER_VERSION", "0.2.0")];

fn trusted(keys: &[&TestKey]) -> TrustedKeys {
    let mut t = TrustedKeys::default();
    for (i, k) in keys.iter().enumerate() {
        t.add(format!("test-{i}"), "test", PublicKey::parse(&k.public_text()).expect("public key parses"));
    }
    t
}

fn host(plugins: &Path, keys: &[&TestKey]) -> Arc<Host> {
    Arc::new(
        Host::new(HostSettings {
            plugins_dir: plugins.to_owned(),
            verify: VerifyPolicy {
                trusted: trusted(keys),
                allow_unsigned: false,
                max_library_bytes: 64 << 20,
                ..VerifyPolicy::default()
            },
            cache_dir: None,
            conflicts: Default::default(),
            isolation: Default::default(),
        })
        .expect("host"),
    )
}

/// Calls a tool straight through its backend (the router has its own tests).
fn call(catalog: &Catalog, tool: &str, inputs: serde_json::Value) -> ToolResponse {
    let resolved = catalog.resolve(tool).unwrap_or_else(|| panic!("tool {tool} is in the catalog"));
    let req = ToolRequest {
        request_id: "t".into(),
        tool_id: resolved.def.spec.name.clone(),
        tool_version: resolved.plugin.manifest.version.to_string(),
        inputs,
        ..ToolRequest::default()
    };
    let out = resolved.plugin.backend.invoke(
        &resolved.def.spec.name,
        &serde_json::to_string(&req).unwrap(),
        Arc::new(NullSink),
    );
    serde_json::from_str(&out).expect("response is a ToolResponse")
}

fn echo_version(catalog: &Catalog) -> String {
    let r = call(catalog, "marker_echo", serde_json::json!({"text": "hi"}));
    assert_eq!(r.status, Status::Ok, "{r:?}");
    r.outputs["version"].as_str().expect("version").to_owned()
}

fn source_manifest() -> String {
    std::fs::read_to_string(quiver_tests::workspace_root().join("tests/plugins/marker-plugin/tool.yaml")).unwrap()
}

#[test]
fn a_signed_bundle_loads_and_its_tools_answer() {
    let key = TestKey::generate();
    let dir = tempfile::tempdir().unwrap();
    write_bundle(dir.path(), PLUGIN, &plugin_library(PLUGIN, &[]), None, Some(&key));
    let host = host(dir.path(), &[&key]);
    let report = host.rescan();
    assert_eq!(report.added, vec![(PLUGIN.to_owned(), "0.1.0".to_owned())], "{report:?}");
    assert!(report.rejected.is_empty(), "{:?}", report.rejected);
    let catalog = host.catalog();
    assert_eq!(echo_version(&catalog), "0.1.0");
    let plugin = &catalog.plugins()[0];
    assert_eq!(plugin.provenance.signer_key_id.as_deref(), Some(key.pair.public_key().key_id().as_str()));
    // A second scan of an unchanged folder changes nothing.
    let again = host.rescan();
    assert!(!again.changed() && again.rejected.is_empty() && again.unchanged == 1, "{again:?}");
}

#[test]
fn a_panicking_tool_returns_a_structured_error_and_the_host_keeps_serving() {
    let key = TestKey::generate();
    let dir = tempfile::tempdir().unwrap();
    write_bundle(dir.path(), PLUGIN, &plugin_library(PLUGIN, &[]), None, Some(&key));
    let host = host(dir.path(), &[&key]);
    host.rescan();
    let catalog = host.catalog();
    let r = call(&catalog, "marker_panic", serde_json::json!({"text": "boom"}));
    assert_eq!(r.status, Status::Error);
    let err = r.error.expect("error present");
    assert_eq!(err.code, "panic");
    assert!(err.message.contains("boom"), "{}", err.message);
    assert_eq!(echo_version(&catalog), "0.1.0", "the host keeps serving after a panic");
}

/// Runs the rejection scenarios in a child process whose environment makes the marker plugin's
/// library constructor write a line to a marker file: a rejection must never produce a line
/// for the rejected build, which proves no code of it ran.
#[test]
fn rejected_bundles_never_run_plugin_code() {
    let marker_dir = tempfile::tempdir().unwrap();
    let marker = marker_dir.path().join("marker.txt");
    // Build both variants here, so the child only loads.
    plugin_library(PLUGIN, &[]);
    plugin_library(PLUGIN, V2);
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "loader::rejection_scenarios_child", "--nocapture", "--test-threads=1"])
        .env("QUIVER_TEST_MARKER", &marker)
        .env("QUIVER_REJECTION_CHILD", "1")
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "child failed:\n{text}");
    assert!(text.contains("1 passed"), "the child ran the scenarios:\n{text}");
}

fn marker_lines(marker: &Path) -> Vec<String> {
    std::fs::read_to_string(marker).map(|s| s.lines().map(str::to_owned).collect()).unwrap_or_default()
}

#[test]
fn rejection_scenarios_child() {
    let Some(marker) = std::env::var_os("QUIVER_TEST_MARKER").map(PathBuf::from) else {
        // Only meaningful inside the child process started by `rejected_bundles_never_run_plugin_code`.
        assert!(std::env::var_os("QUIVER_REJECTION_CHILD").is_none());
        return;
    };
    let key = TestKey::generate();
    let stranger = TestKey::generate();
    let v1 = plugin_library(PLUGIN, &[]);
    let v2 = plugin_library(PLUGIN, V2);

    let expect_rejected = |name: &str, dir: &Path, stage: Stage| {
        let host = host(dir, &[&key]);
        let report = host.rescan();
        assert!(report.added.is_empty(), "{name}: nothing may load: {report:?}");
        assert_eq!(report.rejected.len(), 1, "{name}: {report:?}");
        assert_eq!(report.rejected[0].stage, stage, "{name}: {}", report.rejected[0]);
        assert!(stage.before_load());
        assert!(host.catalog().tools().is_empty());
        assert!(marker_lines(&marker).is_empty(), "{name}: plugin code ran: {:?}", marker_lines(&marker));
        report.rejected[0].message.clone()
    };

    // One byte of the library changed after signing.
    let d = tempfile::tempdir().unwrap();
    let b = write_bundle(d.path(), PLUGIN, &v1, None, Some(&key));
    let mut bytes = std::fs::read(&b.library).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x01;
    std::fs::write(&b.library, bytes).unwrap();
    expect_rejected("flipped library byte", d.path(), Stage::Checksum);

    // The manifest edited after signing.
    let d = tempfile::tempdir().unwrap();
    let b = write_bundle(d.path(), PLUGIN, &v1, None, Some(&key));
    let text = std::fs::read_to_string(&b.manifest).unwrap().replace("Echo (marker test)", "Echo (edited)");
    std::fs::write(&b.manifest, text).unwrap();
    expect_rejected("edited manifest", d.path(), Stage::Signature);

    // Signed by a key the host does not trust.
    let d = tempfile::tempdir().unwrap();
    write_bundle(d.path(), PLUGIN, &v1, None, Some(&stranger));
    expect_rejected("untrusted key", d.path(), Stage::Signature);

    // No signature at all.
    let d = tempfile::tempdir().unwrap();
    write_bundle(d.path(), PLUGIN, &v1, None, None);
    let message = expect_rejected("missing signature", d.path(), Stage::Signature);
    // The command it suggests runs as written: `quiver sign` needs the key.
    assert!(message.contains("quiver sign") && message.contains(" --key "), "{message}");

    // An older version than the loaded one.
    let d = tempfile::tempdir().unwrap();
    let source_v2 = source_manifest().replacen("version: 0.1.0", "version: 0.2.0", 1);
    write_bundle(d.path(), PLUGIN, &v2, Some(&source_v2), Some(&key));
    let h = host(d.path(), &[&key]);
    assert_eq!(h.rescan().added.len(), 1);
    assert_eq!(echo_version(&h.catalog()), "0.2.0");
    assert_eq!(marker_lines(&marker), vec!["constructor ran: marker-plugin 0.2.0"]);
    std::thread::sleep(Duration::from_millis(20)); // a new mtime for the rewritten files
    write_bundle(d.path(), PLUGIN, &v1, None, Some(&key));
    let report = h.rescan();
    assert_eq!(report.rejected.len(), 1, "{report:?}");
    assert_eq!(report.rejected[0].stage, Stage::Downgrade);
    assert_eq!(echo_version(&h.catalog()), "0.2.0", "the last good version keeps serving");
    assert_eq!(marker_lines(&marker), vec!["constructor ran: marker-plugin 0.2.0"], "the 0.1.0 library never ran");
    // Reported once, not on every rescan.
    assert!(h.rescan().rejected.is_empty());

    // Control: the same 0.1.0 bundle accepted by a fresh host does run its constructor, so the
    // marker would have shown any of the rejections above.
    let fresh = host(d.path(), &[&key]);
    assert_eq!(fresh.rescan().added.len(), 1);
    assert_eq!(marker_lines(&marker).last().map(String::as_str), Some("constructor ran: marker-plugin 0.1.0"));
}

#[test]
fn a_replaced_bundle_is_hot_swapped_while_calls_keep_succeeding() {
    let key = TestKey::generate();
    let dir = tempfile::tempdir().unwrap();
    let v1 = plugin_library(PLUGIN, &[]);
    let v2 = plugin_library(PLUGIN, V2);
    write_bundle(dir.path(), PLUGIN, &v1, None, Some(&key));
    let host = host(dir.path(), &[&key]);
    host.rescan();
    assert_eq!(echo_version(&host.catalog()), "0.1.0");

    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicUsize::new(0));
    let seen_v2 = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (host, stop, calls, seen_v2) = (host.clone(), stop.clone(), calls.clone(), seen_v2.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let v = echo_version(&host.catalog()); // asserts status ok
                    if v == "0.2.0" {
                        seen_v2.store(true, Ordering::Relaxed);
                    }
                    calls.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(50));
    let source_v2 = source_manifest().replacen("version: 0.1.0", "version: 0.2.0", 1);
    write_bundle(dir.path(), PLUGIN, &v2, Some(&source_v2), Some(&key));
    let report = host.rescan();
    assert_eq!(report.replaced, vec![(PLUGIN.to_owned(), "0.1.0".to_owned(), "0.2.0".to_owned())], "{report:?}");
    std::thread::sleep(Duration::from_millis(100));
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().expect("no call failed during the swap");
    }
    assert!(calls.load(Ordering::Relaxed) > 10);
    assert!(seen_v2.load(Ordering::Relaxed), "calls after the swap reach the new version");
    assert_eq!(echo_version(&host.catalog()), "0.2.0");
}

#[test]
fn a_deleted_bundle_s_tools_disappear() {
    let key = TestKey::generate();
    let dir = tempfile::tempdir().unwrap();
    let b = write_bundle(&dir.path().join("marker"), PLUGIN, &plugin_library(PLUGIN, &[]), None, Some(&key));
    let host = host(dir.path(), &[&key]);
    host.rescan();
    assert!(host.catalog().resolve("marker_echo").is_some());
    std::fs::remove_file(&b.manifest).unwrap();
    let report = host.rescan();
    assert_eq!(report.removed, vec![PLUGIN.to_owned()]);
    assert!(host.catalog().resolve("marker_echo").is_none());
    assert!(host.catalog().tools().is_empty());
}

#[test]
fn a_failed_update_keeps_the_last_good_version() {
    let key = TestKey::generate();
    let dir = tempfile::tempdir().unwrap();
    let v1 = plugin_library(PLUGIN, &[]);
    let b = write_bundle(dir.path(), PLUGIN, &v1, None, Some(&key));
    let host = host(dir.path(), &[&key]);
    host.rescan();
    std::thread::sleep(Duration::from_millis(20));
    // A broken update: the manifest is replaced but its signature is stale.
    let edited = std::fs::read_to_string(&b.manifest).unwrap().replace("Echo (marker test)", "Echo v2");
    std::fs::write(&b.manifest, edited).unwrap();
    let report = host.rescan();
    assert_eq!(report.rejected.len(), 1);
    assert_eq!(report.rejected[0].stage, Stage::Signature);
    assert!(
        report.rejected[0].to_string().contains("marker-plugin.tool.yaml"),
        "names the file: {}",
        report.rejected[0]
    );
    assert_eq!(echo_version(&host.catalog()), "0.1.0", "the last good version keeps serving");
}
