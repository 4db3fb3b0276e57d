//! Worker-process isolation with real plugin libraries and real `quiver worker` processes: the
//! fault suite, hot swap under load, the sandbox against a hostile plugin, and cleanup.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use quiver_abi::{Status, ToolResponse};
use quiver_catalog::{Access, CatalogSource, ConflictPolicy};
use quiver_lifecycle::worker::{PLUGIN_CRASHED, WorkerSettings};
use quiver_lifecycle::{Host, HostSettings, IsolationPolicy, ScanReport, VerifyPolicy};
use quiver_manifest::{Isolation, PublicKey, TrustedKeys};
use quiver_router::{Call, CallOutcome, Caller, Router, RouterSettings};
use quiver_tests::{TestKey, plugin_library, write_bundle};
use serde_json::{Value, json};

const FAULT: &str = "fault-plugin";
const MARKER: &str = "marker-plugin";

struct Setup {
    _dir: tempfile::TempDir,
    plugins: PathBuf,
    root: PathBuf,
    key: TestKey,
    host: Arc<Host>,
    router: Router,
}

fn worker_settings() -> WorkerSettings {
    let mut w = WorkerSettings::new(PathBuf::from(env!("CARGO_BIN_EXE_quiver")));
    w.kill_grace = Duration::from_millis(100);
    // The fault suite crashes one worker more often than the default limit allows.
    w.max_crashes = 50;
    w
}

/// Both test plugins as signed bundles; the fault plugin always in a worker, the marker plugin
/// where `marker` says. The fault plugin's sandbox root is `<tmp>/root`.
fn setup(marker: Isolation) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let key = TestKey::generate();
    write_bundle(&plugins.join("fault"), FAULT, &plugin_library(FAULT, &[]), None, Some(&key));
    write_bundle(&plugins.join("marker"), MARKER, &plugin_library(MARKER, &[]), None, Some(&key));
    let host = host_over(&plugins, &root, &key, marker);
    let report = host.rescan();
    assert!(report.rejected.is_empty(), "{:#?}", report.rejected);
    let router = Router::new(host.clone() as Arc<dyn CatalogSource>, RouterSettings::default());
    Setup { _dir: dir, plugins, root, key, host, router }
}

fn host_over(plugins: &Path, root: &Path, key: &TestKey, marker: Isolation) -> Arc<Host> {
    let mut isolation = IsolationPolicy { default: Some(Isolation::Process), ..IsolationPolicy::default() };
    isolation.plugins.insert(MARKER.into(), marker);
    isolation.worker = Some(worker_settings());
    isolation.plugin_config.insert(FAULT.into(), json!({ "root": root.display().to_string() }));
    host_with(plugins, key, isolation)
}

/// A host over `plugins` trusting `key`, with the given isolation choices.
fn host_with(plugins: &Path, key: &TestKey, isolation: IsolationPolicy) -> Arc<Host> {
    let mut trusted = TrustedKeys::default();
    trusted.add("test", "test", PublicKey::parse(&key.public_text()).unwrap());
    Arc::new(
        Host::new(HostSettings {
            plugins_dir: plugins.to_owned(),
            verify: VerifyPolicy { trusted, max_library_bytes: 256 << 20, ..VerifyPolicy::default() },
            cache_dir: None,
            conflicts: ConflictPolicy::Error,
            isolation,
        })
        .unwrap(),
    )
}

async fn call(router: &Router, tool: &str, args: Value) -> CallOutcome {
    router.call(Call::new(tool, args, Caller::new("s", Access::new(["*"], Vec::<&str>::new())))).await
}

fn error_code(r: &ToolResponse) -> &str {
    r.error.as_ref().map(|e| e.code.as_str()).unwrap_or("")
}

async fn fault_pid(router: &Router) -> Option<u64> {
    let r = call(router, "fault_echo", json!({"text": "hi"})).await.response;
    (r.status == Status::Ok).then(|| r.outputs["value"]["pid"].as_u64()).flatten()
}

/// Waits (bounded) until the fault plugin's worker answers again; returns its pid.
async fn back(router: &Router) -> u64 {
    let start = Instant::now();
    loop {
        if let Some(pid) = fault_pid(router).await {
            return pid;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "the worker did not come back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn process_exists(pid: u64) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_fault_is_contained_and_the_worker_comes_back() {
    let s = setup(Isolation::InProcess);
    let listed = s.host.catalog();
    let fault = listed.resolve("fault_echo").unwrap().plugin.clone();
    assert_eq!(fault.backend.placement().isolation, "process");
    assert!(fault.backend.placement().detail.contains("worker pid"), "{:?}", fault.backend.placement());
    assert_eq!(listed.resolve("marker_echo").unwrap().plugin.backend.placement().isolation, "in_process");
    let host_pid = u64::from(std::process::id());
    let first = back(&s.router).await;
    assert_ne!(first, host_pid, "the fault plugin runs in another process");

    // (tool, arguments, expected error code, the worker process dies)
    let cases: &[(&str, Value, &str, bool)] = &[
        ("fault_panic", json!({"text": "boom"}), "panic", false),
        ("fault_abort", json!({}), PLUGIN_CRASHED, true),
        ("fault_segv", json!({}), PLUGIN_CRASHED, true),
        ("fault_spin", json!({}), "timeout", true),
        ("fault_sleep", json!({"n": 5000}), "timeout", true),
        ("fault_alloc", json!({"n": 10}), PLUGIN_CRASHED, true),
        ("fault_bad_json", json!({}), "protocol_error", false),
    ];
    for (tool, args, code, dies) in cases {
        let before = back(&s.router).await;
        let started = Instant::now();
        let out = call(&s.router, tool, args.clone()).await;
        let took = started.elapsed();
        assert_eq!(out.response.status, Status::Error, "{tool}: {:?}", out.response);
        assert_eq!(error_code(&out.response), *code, "{tool}: {:?}", out.response.error);
        if *code == "timeout" {
            // fault_spin and fault_sleep have a 300 ms deadline.
            assert!(took >= Duration::from_millis(300), "{tool} answered before its deadline: {took:?}");
            assert!(took <= Duration::from_millis(330 + 25), "{tool}: the deadline fired late: {took:?}");
            eprintln!("{tool}: deadline 300 ms, timeout reported after {took:?}");
        }
        if *code == PLUGIN_CRASHED {
            let e = out.response.error.as_ref().unwrap();
            assert!(e.message.contains("fault-plugin") && e.message.contains("signal"), "{e:?}");
            let signal = e.details["signal"].as_i64();
            let expected = if *tool == "fault_segv" { 11 } else { 6 };
            assert_eq!(signal, Some(expected), "{tool}: {e:?}");
        }
        // The host's other tools answer at once.
        let marker = call(&s.router, "marker_echo", json!({"text": "still here"})).await.response;
        assert_eq!(marker.status, Status::Ok, "after {tool}: {marker:?}");
        // The worker is back (a new process when the old one died).
        let after = back(&s.router).await;
        if *dies {
            assert_ne!(after, before, "{tool}: the worker should have been replaced");
            let start = Instant::now();
            while process_exists(before) && start.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(10));
            }
            assert!(!process_exists(before), "{tool}: the old worker {before} is still running");
        } else {
            assert_eq!(after, before, "{tool}: the worker should have survived");
        }
    }

    // A 20 MiB answer: delivered as a structured, cut result; the worker survives.
    let before = back(&s.router).await;
    let big = call(&s.router, "fault_big", json!({"n": 20})).await.response;
    assert!(big.status == Status::Partial || big.status == Status::Error, "{:?}", big.status);
    assert_eq!(back(&s.router).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_call_gives_its_slot_back_after_the_kill() {
    let s = setup(Isolation::InProcess);
    // Four spins in a row: each times out at its deadline and none waits for a slot held by
    // the previous one (the worker is killed after the grace period and the slot released).
    for n in 0..4 {
        let out = call(&s.router, "fault_spin", json!({})).await.response;
        let e = out.error.as_ref().unwrap();
        assert_eq!(e.code, "timeout", "spin {n}: {e:?}");
        assert!(!e.message.contains("did not start"), "spin {n} waited for a slot: {e:?}");
        back(&s.router).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_leaves_calls_in_other_workers_intact() {
    let s = setup(Isolation::Process);
    let marker = s.host.catalog().resolve("marker_echo").unwrap().plugin.backend.placement();
    assert_eq!(marker.isolation, "process");
    let router = Arc::new(s.router);
    let r2 = router.clone();
    let slow = tokio::spawn(async move { call(&r2, "marker_sleep", json!({"ms": 400})).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let crash = call(&router, "fault_segv", json!({})).await.response;
    assert_eq!(error_code(&crash), PLUGIN_CRASHED);
    let slow = slow.await.unwrap().response;
    assert_eq!(slow.status, Status::Ok, "{slow:?}");
    assert_eq!(slow.outputs["cancelled"], json!(false), "{slow:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_crashes_disable_the_plugin_with_a_clear_state() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    let key = TestKey::generate();
    write_bundle(&plugins.join("fault"), FAULT, &plugin_library(FAULT, &[]), None, Some(&key));
    let mut worker = worker_settings();
    worker.max_crashes = 2;
    let isolation = IsolationPolicy { default: Some(Isolation::Process), worker: Some(worker), ..Default::default() };
    let host = host_with(&plugins, &key, isolation);
    host.rescan();
    let router = Router::new(host.clone() as Arc<dyn CatalogSource>, RouterSettings::default());
    for _ in 0..2 {
        back(&router).await;
        assert_eq!(error_code(&call(&router, "fault_abort", json!({})).await.response), PLUGIN_CRASHED);
    }
    let out = call(&router, "fault_echo", json!({})).await.response;
    assert_eq!(error_code(&out), "plugin_unavailable", "{out:?}");
    assert!(out.error.as_ref().unwrap().message.contains("crashed 2 times"), "{out:?}");
    let placement = host.catalog().resolve("fault_echo").unwrap().plugin.backend.placement();
    assert!(placement.detail.contains("disabled"), "{placement:?}");
}

/// `0.2.13` -> (0, 2, 13).
fn version_key(v: &str) -> Vec<u64> {
    v.split('.').map(|p| p.parse().unwrap()).collect()
}

fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

fn worker_children(host_pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
        if fields.first() != Some(&"Z") && fields.get(1).and_then(|p| p.parse::<u32>().ok()) == Some(host_pid) {
            let cmd = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if cmd.contains("worker") {
                out.push(pid);
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_hot_swaps_under_calls_lose_nothing_and_leak_nothing() {
    let s = setup(Isolation::InProcess);
    let names: Vec<String> = (1..=20).map(|n| format!("0.2.{n}")).collect();
    let versions = quiver_tests::plugin_library_versions(FAULT, "QUIVER_FAULT_VERSION", &names);
    let router = Arc::new(s.router);
    back(&router).await;
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(AtomicUsize::new(0));
    let calls = Arc::new(AtomicUsize::new(0));
    let current = Arc::new(std::sync::Mutex::new(String::from("0.1.0")));
    let stale = Arc::new(AtomicUsize::new(0));
    let mut callers = Vec::new();
    for _ in 0..2 {
        let (router, stop, failures, calls, current, stale) =
            (router.clone(), stop.clone(), failures.clone(), calls.clone(), current.clone(), stale.clone());
        callers.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                // The version published before the call was made: the answer may not be older.
                let floor = current.lock().unwrap().clone();
                let r = call(&router, "fault_echo", json!({"text": "x"})).await.response;
                calls.fetch_add(1, Ordering::Relaxed);
                if r.status != Status::Ok {
                    failures.fetch_add(1, Ordering::Relaxed);
                    eprintln!("failed during swaps: {r:?}");
                    continue;
                }
                if version_key(r.outputs["value"]["version"].as_str().unwrap()) < version_key(&floor) {
                    stale.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    // RSS is compared under the same call load: measured after a warm-up, and again after the
    // swaps while the callers still run.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let rss_start = rss_kb(std::process::id());
    for (n, lib) in versions.iter().enumerate() {
        let v = format!("0.2.{}", n + 1);
        let manifest =
            std::fs::read_to_string(quiver_tests::workspace_root().join("tests/plugins/fault-plugin/tool.yaml"))
                .unwrap()
                .replacen("version: 0.1.0", &format!("version: {v}"), 1);
        write_bundle(&s.plugins.join("fault"), FAULT, lib, Some(&manifest), Some(&s.key));
        let report = s.host.rescan();
        assert_eq!(report.replaced.len(), 1, "swap {v}: {report:?}");
        *current.lock().unwrap() = v;
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_end = rss_kb(std::process::id());
    stop.store(true, Ordering::Relaxed);
    for c in callers {
        c.await.unwrap();
    }
    let total = calls.load(Ordering::Relaxed);
    assert!(total > 40, "too few calls during the swaps: {total}");
    assert_eq!(failures.load(Ordering::Relaxed), 0, "calls failed during hot swaps");
    assert_eq!(stale.load(Ordering::Relaxed), 0, "answers from an old version after its swap");
    // Old workers exit once their in-flight calls are done: one worker per plugin is left.
    let start = Instant::now();
    while worker_children(std::process::id()).len() > 2 && start.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let workers = worker_children(std::process::id());
    assert!(workers.len() <= 2, "old workers still running: {workers:?}");
    eprintln!("host RSS over 20 swaps: {rss_start} kB -> {rss_end} kB ({total} calls)");
    assert!(rss_end <= rss_start + rss_start / 10, "host RSS grew from {rss_start} to {rss_end} kB");
    // No private library copies anywhere: workers load from sealed memory files.
    let leftovers: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&format!("quiver-libs-{}-", std::process::id())))
        .flat_map(|e| std::fs::read_dir(e.path()).into_iter().flatten().flatten())
        .collect();
    assert!(leftovers.is_empty(), "private copies on disk: {leftovers:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_plugin_cannot_read_the_key_write_outside_or_open_a_socket() {
    let s = setup(Isolation::InProcess);
    let placement = s.host.catalog().resolve("hostile_read").unwrap().plugin.backend.placement();
    if placement.detail.contains("NOT SANDBOXED") || placement.detail.contains("partial") {
        eprintln!("SKIPPED: the worker sandbox is not fully enforced on this kernel: {}", placement.detail);
        return;
    }
    assert!(placement.detail.contains("landlock"), "{placement:?}");
    let outside = s._dir.path().join("dev.key");
    std::fs::write(&outside, "SECRET SIGNING KEY").unwrap();
    let inside = s.root.join("note.txt");
    std::fs::write(&inside, "hello").unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();

    let value = |r: ToolResponse| {
        assert_eq!(r.status, Status::Ok, "{r:?}");
        r.outputs["value"].clone()
    };
    // Inside its declared root: allowed (the control).
    let ok = value(call(&s.router, "hostile_read", json!({"target": inside})).await.response);
    assert_eq!(ok["ok"], json!(true), "{ok}");
    let ok = value(call(&s.router, "hostile_write", json!({"target": s.root.join("new.txt")})).await.response);
    assert_eq!(ok["ok"], json!(true), "{ok}");
    // The signing key beside it, outside the root: refused.
    let r = value(call(&s.router, "hostile_read", json!({"target": outside})).await.response);
    assert_eq!((r["ok"].clone(), r["permission_denied"].clone()), (json!(false), json!(true)), "{r}");
    let r = value(call(&s.router, "hostile_write", json!({"target": s._dir.path().join("planted")})).await.response);
    assert_eq!((r["ok"].clone(), r["permission_denied"].clone()), (json!(false), json!(true)), "{r}");
    assert!(!s._dir.path().join("planted").exists());
    let r = value(call(&s.router, "hostile_read", json!({"target": "/etc/passwd"})).await.response);
    assert_eq!(r["ok"], json!(false), "{r}");
    // A socket to a listener on this machine: refused.
    let r = value(call(&s.router, "hostile_connect", json!({"target": addr})).await.response);
    assert_eq!((r["ok"].clone(), r["permission_denied"].clone()), (json!(false), json!(true)), "{r}");
    // The same plugin in-process is not sandboxed: the control proving the refusals above come
    // from the worker's sandbox, not from the test.
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    write_bundle(&plugins.join("fault"), FAULT, &plugin_library(FAULT, &[]), None, Some(&s.key));
    let host = host_with(&plugins, &s.key, IsolationPolicy::default());
    host.rescan();
    let router = Router::new(host as Arc<dyn CatalogSource>, RouterSettings::default());
    let r = value(call(&router, "hostile_read", json!({"target": outside})).await.response);
    assert_eq!(r["ok"], json!(true), "in-process control: {r}");
}

#[test]
fn private_copy_folders_of_dead_hosts_are_removed_at_start() {
    let tmp = tempfile::tempdir().unwrap();
    // A folder of a host that is gone (pid far above pid_max) and one of a live process (ours).
    let dead = tmp.path().join("quiver-libs-999999999-abc");
    let live = tmp.path().join(format!("quiver-libs-{}-abc", std::process::id()));
    for d in [&dead, &live] {
        std::fs::create_dir_all(d).unwrap();
        std::fs::write(d.join("libx.so"), b"x").unwrap();
    }
    let plugins = tmp.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_quiver"))
        .args(["--plugins"])
        .arg(&plugins)
        .arg("list")
        .env("TMPDIR", tmp.path())
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!dead.exists(), "the dead host's copies were not removed");
    assert!(live.exists(), "a live host's copies must stay");
    // The command's own private folder is gone when it exits.
    let own: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("quiver-libs-") && !n.contains(&std::process::id().to_string()))
        .collect();
    assert!(own.is_empty(), "left behind: {own:?}");
}

/// Two MCP sessions over streamable HTTP against a real `quiver serve`: a segfault in one
/// session's call (fault-plugin's worker) leaves the other session's in-flight call (the marker
/// plugin's worker) intact.
#[test]
fn over_http_a_segfault_leaves_another_sessions_call_intact() {
    use quiver_tests::{http_post, mcp_messages};
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    let key = TestKey::generate();
    write_bundle(&plugins.join("fault"), FAULT, &plugin_library(FAULT, &[]), None, Some(&key));
    write_bundle(&plugins.join("marker"), MARKER, &plugin_library(MARKER, &[]), None, Some(&key));
    let key_line = key.public_text().lines().nth(1).unwrap().to_owned();
    let config = dir.path().join("quiver.yaml");
    std::fs::write(
        &config,
        format!(
            "plugins_dir: plugins\nrescan_interval_ms: 0\ntrusted_keys: [{{name: test, key: {key_line}}}]\nisolation: {{default: process}}\n"
        ),
    )
    .unwrap();
    let mut server = std::process::Command::new(env!("CARGO_BIN_EXE_quiver"))
        .arg("--config")
        .arg(&config)
        .args(["serve", "--http", "127.0.0.1:0"])
        .current_dir(dir.path())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let stderr = server.stderr.take().unwrap();
    let server = Kill(server);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(rest) = line.split("serving MCP at http://").nth(1) {
                let _ = tx.send(rest.trim_end_matches("/mcp").to_owned());
            }
        }
    });
    let addr = rx.recv_timeout(Duration::from_secs(60)).expect("the server says where it listens");
    const JSON: (&str, &str) = ("Content-Type", "application/json");
    const ACCEPT: (&str, &str) = ("Accept", "application/json, text/event-stream");
    let open = |client: &str| -> String {
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": client, "version": "1"}}});
        let (status, headers, body) = http_post(&addr, &[JSON, ACCEPT], init.to_string().as_bytes());
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        let session = headers.iter().find(|(k, _)| k == "mcp-session-id").unwrap().1.clone();
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
        let (status, _, _) = http_post(&addr, &[JSON, ACCEPT, ("Mcp-Session-Id", &session)], note.as_bytes());
        assert_eq!(status, 202);
        session
    };
    let call = |addr: &str, session: &str, tool: &str, args: Value| -> Value {
        let req =
            json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": tool, "arguments": args}});
        let (status, _, body) =
            http_post(addr, &[JSON, ACCEPT, ("Mcp-Session-Id", session)], req.to_string().as_bytes());
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        mcp_messages(&body).into_iter().find(|m| m.get("id") == Some(&json!(7))).expect("a response")["result"].clone()
    };
    let a = open("session-a");
    let b = open("session-b");
    let (addr2, a2) = (addr.clone(), a.clone());
    let slow = std::thread::spawn(move || call(&addr2, &a2, "marker_sleep", json!({"ms": 600})));
    std::thread::sleep(Duration::from_millis(150));
    let crashed = call(&addr, &b, "fault_segv", json!({}));
    assert_eq!(crashed["isError"], json!(true), "{crashed}");
    assert!(crashed.to_string().contains("plugin_crashed"), "{crashed}");
    let slow = slow.join().unwrap();
    assert_ne!(slow["isError"], json!(true), "{slow}");
    assert_eq!(slow["structuredContent"]["cancelled"], json!(false), "{slow}");
    // The crashed plugin is back, in the same server.
    let start = Instant::now();
    loop {
        let r = call(&addr, &b, "fault_echo", json!({"text": "again"}));
        if r["isError"] != json!(true) {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "fault-plugin did not come back: {r}");
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(server);
}

/// Records what a call's host services sent to the client, and answers its questions.
#[derive(Default)]
struct Recorder {
    seen: std::sync::Mutex<Vec<String>>,
}

impl quiver_router::ClientBridge for Recorder {
    fn log(&self, _level: quiver_router::LogLevel, message: &str) {
        self.seen.lock().unwrap().push(format!("log: {message}"));
    }
    fn progress(&self, progress: f64, total: Option<f64>, message: &str) {
        self.seen.lock().unwrap().push(format!("progress: {progress}/{total:?} {message}"));
    }
    fn can_elicit(&self) -> bool {
        true
    }
    fn elicit(&self, request: Value) -> quiver_router::BoxFuture<Result<Value, String>> {
        self.seen.lock().unwrap().push(format!("elicit: {}", request["message"]));
        Box::pin(async { Ok(json!({"action": "accept", "content": {"ok": true}})) })
    }
    fn can_sample(&self) -> bool {
        true
    }
    fn sample(&self, _request: Value) -> quiver_router::BoxFuture<Result<Value, String>> {
        Box::pin(async { Ok(json!({"role": "assistant", "content": {"type": "text", "text": "yes"}, "model": "m"})) })
    }
}

/// Logs, progress, elicitation, sampling, cancellation and plugin config cross the worker
/// boundary both ways, as they do in-process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_services_cross_the_worker_boundary() {
    let s = setup(Isolation::InProcess);
    let bridge = Arc::new(Recorder::default());
    let call = Call {
        config: json!({"root": "somewhere", "colour": "blue"}),
        ..Call::new(
            "fault_services",
            json!({"text": "hello"}),
            Caller::new("s", Access::new(["*"], Vec::<&str>::new())),
        )
    }
    .with_bridge(bridge.clone());
    let out = s.router.call(call).await.response;
    assert_eq!(out.status, Status::Ok, "{out:?}");
    let v = &out.outputs["value"];
    assert_eq!(v["elicited"]["Ok"]["content"]["ok"], json!(true), "{v}");
    assert_eq!(v["sampled"]["Ok"]["content"]["text"], json!("yes"), "{v}");
    assert_eq!(v["cancelled"], json!(false));
    assert_eq!(v["config"]["colour"], json!("blue"), "{v}");
    let seen = bridge.seen.lock().unwrap().clone();
    assert!(seen.iter().any(|l| l == "log: log from the worker: hello"), "{seen:?}");
    assert!(seen.iter().any(|l| l.starts_with("progress: 1/Some(2.0) half way")), "{seen:?}");
    assert!(seen.iter().any(|l| l.contains("Proceed?")), "{seen:?}");
}

/// The marker plugin's manifest under another plugin id (its library still embeds
/// `marker-plugin`, so loading it fails the embedded-manifest check; it claims the same names).
fn impostor_manifest() -> String {
    std::fs::read_to_string(quiver_tests::workspace_root().join("tests/plugins/marker-plugin/tool.yaml"))
        .unwrap()
        .replacen("id: marker-plugin", "id: impostor", 1)
}

/// Workers start in parallel with the rest of a scan, but the scan decides as if it had waited
/// for each in turn: a worker plugin that loads keeps the names it claimed first, and a newer
/// in-process bundle claiming one of them is refused naming it.
#[test]
fn a_newer_bundle_cannot_take_the_names_of_a_worker_still_starting() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    let key = TestKey::generate();
    let lib = plugin_library(MARKER, &[]);
    write_bundle(&plugins.join("marker"), MARKER, &lib, None, Some(&key));
    std::thread::sleep(Duration::from_millis(20));
    let manifest = impostor_manifest().replacen("id: impostor", "id: late", 1);
    write_bundle(&plugins.join("a-late"), MARKER, &lib, Some(&manifest), Some(&key));
    let mut isolation = IsolationPolicy { default: Some(Isolation::InProcess), ..IsolationPolicy::default() };
    isolation.plugins.insert(MARKER.into(), Isolation::Process);
    isolation.worker = Some(worker_settings());
    let host = host_with(&plugins, &key, isolation);
    let report = host.rescan();
    assert_eq!(report.added, vec![(MARKER.to_owned(), "0.1.0".to_owned())], "{report:#?}");
    assert_eq!(report.rejected.len(), 1, "{report:#?}");
    let e = &report.rejected[0];
    assert_eq!(e.stage.as_str(), "catalog");
    assert!(e.message.contains("`marker_echo` is already served by plugin `marker-plugin`"), "{}", e.message);
    let catalog = host.catalog();
    assert_eq!(catalog.resolve("marker_echo").map(|r| r.plugin.id().to_owned()).as_deref(), Some(MARKER));
    let served = catalog.resolve("marker_echo").unwrap().plugin;
    assert!(matches!(served.backend.dispatch(0), quiver_catalog::Dispatch::Remote), "not the worker's entry");
}

/// A worker that fails to load gives back the names it claimed while starting: a newer bundle
/// claiming them in the same scan loads, exactly as when the scan waited for the worker first.
#[test]
fn names_claimed_by_a_worker_that_fails_go_to_the_next_bundle_of_the_scan() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    let key = TestKey::generate();
    let lib = plugin_library(MARKER, &[]);
    write_bundle(&plugins.join("impostor"), MARKER, &lib, Some(&impostor_manifest()), Some(&key));
    std::thread::sleep(Duration::from_millis(20));
    write_bundle(&plugins.join("marker"), MARKER, &lib, None, Some(&key));
    let mut isolation = IsolationPolicy { default: Some(Isolation::InProcess), ..IsolationPolicy::default() };
    isolation.plugins.insert("impostor".into(), Isolation::Process);
    isolation.worker = Some(worker_settings());
    let host = host_with(&plugins, &key, isolation);
    let report = host.rescan();
    assert_eq!(report.added, vec![(MARKER.to_owned(), "0.1.0".to_owned())], "{report:#?}");
    assert_eq!(report.rejected.len(), 1, "{report:#?}");
    assert_eq!(report.rejected[0].stage.as_str(), "embedded-manifest", "{:#?}", report.rejected[0]);
    assert!(report.rejected[0].bundle.starts_with(plugins.join("impostor")), "{:#?}", report.rejected[0]);
    let catalog = host.catalog();
    assert_eq!(catalog.resolve("marker_echo").map(|r| r.plugin.id().to_owned()).as_deref(), Some(MARKER));
    // A rescan keeps the marker plugin serving.
    let again = host.rescan();
    assert!(!again.changed(), "{again:#?}");
    assert_eq!(host.catalog().resolve("marker_echo").map(|r| r.plugin.id().to_owned()).as_deref(), Some(MARKER));
}

/// A worker plugin listed at start from its kept load report (before its worker is up) whose
/// worker then fails to start: calls get a clear error, and the plugin is removed by the
/// next scan (which the failure asks for at once) with its bundle named.
#[test]
fn a_listed_worker_plugin_whose_worker_fails_to_start_is_removed_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    let key = TestKey::generate();
    write_bundle(&plugins.join("marker"), MARKER, &plugin_library(MARKER, &[]), None, Some(&key));
    let policy = |program: PathBuf| {
        let mut worker = worker_settings();
        worker.program = program;
        IsolationPolicy {
            default: Some(Isolation::Process),
            worker: Some(worker),
            start_cache: Some(dir.path().join("worker-info")),
            ..IsolationPolicy::default()
        }
    };
    // A first host waits for the worker and keeps its load report.
    let first = host_with(&plugins, &key, policy(PathBuf::from(env!("CARGO_BIN_EXE_quiver"))));
    assert_eq!(first.rescan().added.len(), 1);
    drop(first);
    // The next host lists the plugin at once; its "worker" exits without loading anything.
    let host = host_with(&plugins, &key, policy(PathBuf::from("/bin/false")));
    let listed = host.rescan();
    assert_eq!(listed.added, vec![(MARKER.to_owned(), "0.1.0".to_owned())], "{listed:#?}");
    assert!(host.catalog().resolve("marker_echo").is_some());
    let removal = Arc::new(std::sync::Mutex::new(None::<ScanReport>));
    let seen = removal.clone();
    host.on_change(move |report, _| {
        if report.removed.iter().any(|p| p == MARKER) {
            *seen.lock().unwrap() = Some(report.clone());
        }
    });
    let router = Router::new(host.clone() as Arc<dyn CatalogSource>, RouterSettings::default());
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let answer = rt.block_on(call(&router, "marker_echo", json!({"text": "hi"}))).response;
    assert_eq!(answer.status, Status::Error, "{answer:?}");
    let message = answer.error.as_ref().map(|e| e.message.clone()).unwrap_or_default();
    assert!(message.contains(MARKER) && message.contains("could not be started"), "{message}");
    let _rescanner = host.spawn_rescanner(Duration::ZERO);
    let start = Instant::now();
    let report = loop {
        if let Some(r) = removal.lock().unwrap().clone() {
            break r;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "the failed plugin was not removed");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(host.catalog().resolve("marker_echo").is_none(), "its tools are gone");
    assert_eq!(report.rejected.len(), 1, "{report:#?}");
    assert_eq!(report.rejected[0].stage.as_str(), "worker", "{report:#?}");
    assert!(report.rejected[0].bundle.starts_with(plugins.join("marker")), "{report:#?}");
    // The bundle stays refused (by name, at the worker stage) until its files change.
    let again = host.rescan();
    assert!(!again.changed() && again.rejected.is_empty(), "{again:#?}");
}
