//! Declarative adapters end to end: signed adapter bundles loaded through the real host, called
//! through the real router, in the host and in real `quiver worker` processes (sandboxed).
//! The injection tests: an argument reaches the program as one literal argv element (no shell
//! ever sees it), and an argument cannot send an HTTP adapter's request to another host.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use quiver_abi::{Status, ToolResponse};
use quiver_catalog::{Access, CatalogSource, ConflictPolicy};
use quiver_lifecycle::worker::WorkerSettings;
use quiver_lifecycle::{Host, HostSettings, IsolationPolicy, Stage, VerifyPolicy};
use quiver_manifest::{Isolation, PublicKey, TrustedKeys};
use quiver_router::{Call, Caller, Router, RouterSettings};
use quiver_tests::TestKey;
use serde_json::{Value, json};

/// Writes `plugins/NAME/NAME.tool.yaml` and its signature by `key`.
fn write_adapter(plugins: &Path, name: &str, manifest: &str, key: &TestKey) -> PathBuf {
    let dir = plugins.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}.tool.yaml"));
    std::fs::write(&path, manifest).unwrap();
    let sig = quiver_manifest::sign_bundle(&key.pair, manifest, name).expect("a valid adapter manifest");
    std::fs::write(quiver_lifecycle::signature_path(&path), sig).unwrap();
    path
}

fn host(plugins: &Path, key: &TestKey, isolation: Isolation) -> Arc<Host> {
    let mut trusted = TrustedKeys::default();
    trusted.add("test", "test", PublicKey::parse(&key.public_text()).unwrap());
    let mut policy = IsolationPolicy { default: Some(isolation), ..IsolationPolicy::default() };
    policy.worker = Some(WorkerSettings::new(PathBuf::from(env!("CARGO_BIN_EXE_quiver"))));
    let host = Arc::new(
        Host::new(HostSettings {
            plugins_dir: plugins.to_owned(),
            verify: VerifyPolicy { trusted, ..VerifyPolicy::default() },
            cache_dir: None,
            conflicts: ConflictPolicy::Error,
            isolation: policy,
        })
        .unwrap(),
    );
    let report = host.rescan();
    assert!(report.rejected.is_empty(), "{:#?}", report.rejected);
    host
}

async fn call(router: &Router, tool: &str, args: Value) -> ToolResponse {
    router.call(Call::new(tool, args, Caller::new("s", Access::new(["*"], Vec::<&str>::new())))).await.response
}

/// jq prints its positional arguments as a JSON array: what argv the program really got.
const ARGV_ADAPTER: &str = r#"manifest_version: 1
id: argv-echo
version: 0.1.0
display_name: Argv echo
description: Shows the argv a program receives.
abi: 1
adapter:
  command:
    program: jq
tools:
  - name: argv_echo
    title: Argv echo
    description: Prints the arguments jq received.
    side_effects: read
    input_schema:
      type: object
      properties:
        text: {type: string}
        n: {type: integer}
      required: [text]
    invoke:
      args: ["-n", "-c", "--args", "$ARGS.positional", "{text}", "n={n}"]
  - name: json_read
    title: Read JSON
    description: Reads a JSON file.
    side_effects: read
    input_schema:
      type: object
      properties:
        path: {type: string}
      required: [path]
    invoke:
      args: ["-c", ".", "{path}"]
      errors: {"2": not_found}
  - name: json_filter
    title: Filter JSON
    description: Runs a jq filter on a document given on stdin.
    side_effects: read
    input_schema:
      type: object
      properties:
        filter: {type: string}
        document: {type: array}
      required: [filter, document]
    invoke:
      args: ["-c", "{filter}"]
      stdin: {argument: document}
      errors: {"3": invalid_arguments}
"#;

const INJECTIONS: &[&str] = &[
    "; touch {M}",
    "$(touch {M})",
    "`touch {M}`",
    "a\ntouch {M}",
    "x && touch {M} || touch {M}",
    "' ; touch {M} ; '",
    "\" ; touch {M} ; \"",
    "x -n --arg x $(touch {M})",
    "| touch {M}",
    "> {M}",
];

async fn no_argument_injects_a_command(isolation: Isolation) {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    let key = TestKey::generate();
    write_adapter(&plugins, "argv-echo", ARGV_ADAPTER, &key);
    let host = host(&plugins, &key, isolation);
    let entry = host.catalog().resolve("argv_echo").unwrap().plugin.clone();
    assert_eq!(entry.source, "adapter:command");
    assert_eq!(
        entry.backend.placement().isolation,
        if isolation == Isolation::Process { "process" } else { "in_process" }
    );
    let router = Router::new(host.clone() as Arc<dyn CatalogSource>, RouterSettings::default());
    // The marker lives in /tmp: writable by anyone, so only "nothing ran" can keep it absent.
    let marker = std::env::temp_dir().join(format!("quiver-adapter-injection-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    for pattern in INJECTIONS {
        let text = pattern.replace("{M}", &marker.display().to_string());
        let r = call(&router, "argv_echo", json!({"text": text})).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        // Exactly one element, byte for byte the argument; the absent `n` leaves its element out.
        assert_eq!(r.outputs["result"], json!([text]), "argument {text:?}");
        assert!(!marker.exists(), "argument {text:?} ran a command");
    }
    let r = call(&router, "argv_echo", json!({"text": "a b", "n": 3})).await;
    assert_eq!(r.outputs["result"], json!(["a b", "n=3"]), "{r:?}");

    // The program runs with the bundle's isolation: in a worker, inside its sandbox, which
    // grants no files here (the manifest declares none).
    let file = dir.path().join("data.json");
    std::fs::write(&file, r#"{"a": 1}"#).unwrap();
    let r = call(&router, "json_read", json!({"path": file.display().to_string()})).await;
    let detail = entry.backend.placement().detail;
    if isolation == Isolation::InProcess {
        assert_eq!(r.outputs["result"], json!({"a": 1}), "{r:?}");
    } else if detail.contains("landlock") {
        let e = r.error.unwrap_or_else(|| panic!("the sandboxed program read an undeclared file: {detail}"));
        assert!(e.code == "not_found" && e.message.contains("Permission denied"), "{e:?}");
    } else {
        eprintln!("no Landlock on this kernel ({detail}); the file sandbox of the program is not checked");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_argument_cannot_inject_a_command_in_process() {
    no_argument_injects_a_command(Isolation::InProcess).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_argument_cannot_inject_a_command_in_a_worker() {
    no_argument_injects_a_command(Isolation::Process).await;
}

/// A tiny HTTP/1.1 server: records each request line and Host header, answers with a JSON
/// echo (or the status a `/status/N` path asks for).
struct Server {
    addr: String,
    seen: Arc<Mutex<Vec<(String, String)>>>,
}

fn server() -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let seen: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            if reader.read_line(&mut line).is_err() {
                continue;
            }
            let (mut host, mut len) = (String::new(), 0usize);
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                    break;
                }
                let lower = h.to_ascii_lowercase();
                if let Some(v) = lower.strip_prefix("host:") {
                    host = v.trim().to_owned();
                }
                if let Some(v) = lower.strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; len];
            let _ = reader.read_exact(&mut body);
            let target = line.split(' ').nth(1).unwrap_or("").to_owned();
            log.lock().unwrap().push((target.clone(), host));
            let status = target.rsplit_once("/status/").and_then(|(_, s)| s.parse::<u16>().ok()).unwrap_or(200);
            let reply = json!({"target": target, "body": String::from_utf8_lossy(&body)}).to_string();
            let _ = write!(
                stream,
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{reply}",
                reply.len()
            );
        }
    });
    Server { addr, seen }
}

fn http_adapter(addr: &str) -> String {
    format!(
        r#"manifest_version: 1
id: http-echo
version: 0.1.0
display_name: HTTP echo
description: Talks to a test server.
abi: 1
sandbox:
  network: true
adapter:
  http:
    base_url: "http://{addr}/api"
tools:
  - name: http_get
    title: Get
    description: Gets an item.
    side_effects: read
    input_schema:
      type: object
      properties:
        name: {{type: string}}
        q: {{type: string}}
      required: [name]
    invoke:
      method: GET
      path: /items/{{name}}
      query: {{q: "{{q}}"}}
      errors: {{"404": not_found}}
  - name: http_post
    title: Post
    description: Posts the arguments.
    side_effects: write
    input_schema:
      type: object
      properties:
        name: {{type: string}}
    invoke:
      method: POST
      path: /status/{{name}}
      body: json
      errors: {{"404": not_found}}
"#
    )
}

async fn no_argument_redirects_the_request(isolation: Isolation) {
    let good = server();
    let evil = server();
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    let key = TestKey::generate();
    write_adapter(&plugins, "http-echo", &http_adapter(&good.addr), &key);
    let host = host(&plugins, &key, isolation);
    assert_eq!(host.catalog().resolve("http_get").unwrap().plugin.source, "adapter:http");
    let router = Router::new(host.clone() as Arc<dyn CatalogSource>, RouterSettings::default());

    let attempts = [
        format!("x/../../../{}", evil.addr),
        format!("@{}/x", evil.addr),
        format!("http://{}/x", evil.addr),
        format!("//{}/x", evil.addr),
        format!("{}#frag", evil.addr),
        "x?admin=1&q=2".to_owned(),
        "a\r\nHost: evil".to_owned(),
    ];
    for name in &attempts {
        let r = call(&router, "http_get", json!({"name": name, "q": format!("1&host={}", evil.addr)})).await;
        assert_eq!(r.status, Status::Ok, "{name:?}: {r:?}");
        let target = r.outputs["result"]["target"].as_str().unwrap().to_owned();
        // One path segment under the base path, the argument percent-encoded in it.
        let rest =
            target.strip_prefix("/api/items/").unwrap_or_else(|| panic!("{name:?} left the base path: {target}"));
        let segment = rest.split('?').next().unwrap();
        assert!(!segment.contains(['/', '?', '#', '@', ':']), "{name:?} -> {target}");
        assert!(target.ends_with(&format!("?q=1%26host%3D{}", evil.addr.replace(':', "%3A"))), "{target}");
    }
    // Whole `.` / `..` segments are refused before anything is sent.
    for name in ["..", "."] {
        let r = call(&router, "http_get", json!({"name": name})).await;
        assert_eq!(r.error.as_ref().map(|e| e.code.as_str()), Some("invalid_arguments"), "{r:?}");
    }
    assert!(evil.seen.lock().unwrap().is_empty(), "the other server was reached: {:?}", evil.seen.lock().unwrap());
    let seen = good.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), attempts.len(), "{seen:?}");
    assert!(seen.iter().all(|(_, h)| *h == good.addr), "{seen:?}");

    // The body is the arguments as JSON; statuses map to results and error codes.
    let r = call(&router, "http_post", json!({"name": "201"})).await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert_eq!(r.outputs["result"]["body"], json!({"name": "201"}).to_string());
    let r = call(&router, "http_post", json!({"name": "404"})).await;
    assert_eq!(r.error.as_ref().map(|e| e.code.as_str()), Some("not_found"), "{r:?}");
    let r = call(&router, "http_post", json!({"name": "503"})).await;
    let e = r.error.unwrap();
    assert!(e.code == "tool_error" && e.retryable && e.message.contains("HTTP 503"), "{e:?}");
    // A 500 or a gateway's 502 after a POST may come after the server acted: the write is not
    // idempotent, so it is not offered for a retry.
    for status in ["500", "502"] {
        let r = call(&router, "http_post", json!({"name": status})).await;
        let e = r.error.unwrap();
        assert!(!e.retryable && e.message.contains(&format!("HTTP {status}")), "{e:?}");
        assert!(e.message.contains("may have taken effect"), "{e:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_argument_cannot_redirect_an_http_adapter_in_process() {
    no_argument_redirects_the_request(Isolation::InProcess).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_argument_cannot_redirect_an_http_adapter_in_a_worker() {
    no_argument_redirects_the_request(Isolation::Process).await;
}

/// The signature covers the whole adapter: an edited template is refused before anything runs,
/// and a missing program is a clear load error naming the field.
#[test]
fn adapter_bundles_are_verified_like_plugin_bundles() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    let key = TestKey::generate();
    let path = write_adapter(&plugins, "argv-echo", ARGV_ADAPTER, &key);
    std::fs::write(&path, ARGV_ADAPTER.replace("\"{text}\"", "\"{text}\", \"--tampered\"")).unwrap();
    let mut trusted = TrustedKeys::default();
    trusted.add("test", "test", PublicKey::parse(&key.public_text()).unwrap());
    let verify = VerifyPolicy { trusted, ..VerifyPolicy::default() };
    let e = quiver_lifecycle::verify_bundle(&path, &verify).unwrap_err();
    assert_eq!(e.stage, Stage::Signature, "{e}");

    let missing = ARGV_ADAPTER.replace("program: jq", "program: quiver-no-such-program");
    write_adapter(&plugins, "argv-echo", &missing, &key);
    let host = Host::new(HostSettings {
        plugins_dir: plugins.clone(),
        verify,
        cache_dir: None,
        conflicts: ConflictPolicy::Error,
        isolation: IsolationPolicy::default(),
    })
    .unwrap();
    let report = host.rescan();
    assert_eq!(report.rejected.len(), 1, "{report:?}");
    let e = &report.rejected[0];
    assert_eq!(e.stage, Stage::Adapter);
    assert!(e.message.contains("adapter.command.program") && e.message.contains("quiver-no-such-program"), "{e}");
}

/// An HTTP adapter in a worker whose manifest does not declare the network is refused when the
/// manifest is read, naming the field.
#[test]
fn an_http_adapter_must_declare_the_network() {
    let text = http_adapter("127.0.0.1:9").replace("sandbox:\n  network: true\n", "");
    let e = quiver_manifest::Manifest::from_yaml(&text, "http-echo.tool.yaml").unwrap_err().to_string();
    assert!(e.contains("sandbox.network") && e.contains("network: true"), "{e}");
}

/// `quiver sign` signs an adapter manifest (no `--library`), and `verify`, `list`, `search` and
/// `surface` name each tool's source.
#[test]
fn the_cli_signs_adapters_and_shows_each_tools_source() {
    let p = super::Project::new();
    let dir = p.path("plugins/argv");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("argv.tool.yaml"), ARGV_ADAPTER).unwrap();
    p.quiver(&["sign", "plugins/argv/argv.tool.yaml", "--key", "keys/test.key"]).success();

    let v = p.quiver(&["verify", "--json"]).success().json();
    let sources: Vec<(&str, &str)> = v["bundles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["id"].as_str().unwrap(), b["source"].as_str().unwrap()))
        .collect();
    assert!(
        sources.contains(&("argv-echo", "adapter:command")) && sources.contains(&("marker-plugin", "plugin")),
        "{v:#}"
    );
    let human = p.quiver(&["verify"]).success().stdout();
    assert!(human.contains("argv-echo 0.1.0 (adapter:command)"), "{human}");

    let v = p.quiver(&["list", "--json"]).success().json();
    let of = |name: &str| {
        v["tools"].as_array().unwrap().iter().find(|t| t["name"] == name).map(|t| t["source"].clone()).unwrap()
    };
    assert_eq!(of("argv_echo"), "adapter:command");
    assert_eq!(of("marker_echo"), "plugin");
    let run = p.quiver(&["list"]).success();
    assert!(run.stdout().contains("SOURCE") && run.stdout().contains("adapter:command"), "{}", run.stdout());
    // Signed by a key that is not first-party: the adapter runs in a worker.
    assert!(run.stderr().contains("plugin argv-echo 0.1.0 (adapter:command): process"), "{}", run.stderr());
    // And it works there: the worker runs jq inside its sandbox.
    let v = p.quiver(&["--json", "call", "argv_echo", "--args", r#"{"text": "$(id)"}"#]).success().json();
    assert_eq!(v["response"]["outputs"]["result"], json!(["$(id)"]), "{v:#}");

    // A program that exits without reading its stdin (jq with a filter that does not compile)
    // while a large document is still being written: the host (whose SIGPIPE is the default, so
    // that `quiver list | head` ends quietly) must get EPIPE, not die of SIGPIPE.
    let big = serde_json::to_string(&json!({"filter": ".[", "document": vec!["x".repeat(100); 1000]})).unwrap();
    for iso in ["in_process", "process"] {
        std::fs::write(
            p.path("quiver.yaml"),
            format!("plugins_dir: plugins\ntrusted_keys:\n  - name: test\n    path: keys/test.pub\nisolation:\n  default: {iso}\n"),
        )
        .unwrap();
        let run = p.quiver(&["--json", "call", "json_filter", "--args", &big]).failure(1);
        assert_eq!(run.json()["response"]["error"]["code"], "invalid_arguments", "{iso}: {}", run.stderr());
    }

    let v = p.quiver(&["search", "--json", "arguments jq received"]).success().json();
    let hit = v["tools"].as_array().unwrap().iter().find(|t| t["name"] == "argv_echo").cloned();
    assert_eq!(hit.map(|t| t["source"].clone()), Some(json!("adapter:command")), "{v:#}");

    let v = p.quiver(&["surface", "--json"]).success().json();
    let listed = |src: &str| v["sources"][src].as_array().cloned().unwrap_or_default();
    assert!(listed("adapter:command").contains(&json!("argv_echo")), "{v:#}");
    assert!(listed("plugin").contains(&json!("marker_echo")), "{v:#}");
}

const SHELL_ADAPTER: &str = r#"manifest_version: 1
id: shell-jobs
version: 0.1.0
display_name: Shell jobs
description: Fixed shell scripts, arguments as positional parameters.
abi: 1
adapter:
  command:
    program: /bin/sh
tools:
  - name: leaves_a_job
    title: Leaves a job
    description: Starts a background job that holds stdout and prints its process group.
    side_effects: read
    input_schema: {type: object, properties: {}}
    invoke:
      args: ["-c", "sleep 30 & echo $$"]
  - name: sleeps
    title: Sleeps
    description: Sleeps for the given seconds.
    side_effects: read
    input_schema: {type: object, properties: {secs: {type: string}}, required: [secs]}
    policies: {timeout_ms: 300}
    invoke:
      args: ["-c", "sleep \"$1\"", "sh", "{secs}"]
"#;

/// Processes whose process group is `pgid`.
fn group_members(pgid: u64) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter(|stat| {
            // Fields after the command name: state, ppid, pgrp.
            let rest = stat.rsplit_once(") ").map(|(_, r)| r).unwrap_or("");
            let f: Vec<&str> = rest.split(' ').collect();
            f.len() > 2 && f[0] != "Z" && f[2].parse::<u64>().ok() == Some(pgid)
        })
        .count()
}

/// A program's leftover background job (holding its stdout open) is killed with its process
/// group when the program exits, and a program past the deadline is killed: the call answers
/// either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_and_its_jobs_end_with_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    let key = TestKey::generate();
    write_adapter(&plugins, "shell-jobs", SHELL_ADAPTER, &key);
    let host = host(&plugins, &key, Isolation::InProcess);
    let router = Router::new(host.clone() as Arc<dyn CatalogSource>, RouterSettings::default());
    let r = call(&router, "leaves_a_job", json!({})).await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    let pgid = r.outputs["result"].as_u64().expect("the shell printed its pid");
    // SIGKILL is delivered when the call answers; the killed job leaves /proc a moment later
    // (sooner or later depending on the machine's load), so wait for it, boundedly.
    let gone_by = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while group_members(pgid) > 0 && std::time::Instant::now() < gone_by {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(group_members(pgid), 0, "the background job of group {pgid} outlived the call");
    let r = call(&router, "sleeps", json!({"secs": "30"})).await;
    assert_eq!(r.error.as_ref().map(|e| e.code.as_str()), Some("timeout"), "{r:?}");
}

/// An adapter whose program is a script that leaves a process outside its process group
/// (`setsid`), holding the program's stdout, stderr and stdin open, and then exits. In a worker
/// its sandbox grants the shell, the programs the script runs and `/proc`.
fn escaping_adapter(program: &Path) -> String {
    format!(
        r#"manifest_version: 1
id: escapes
version: 0.1.0
display_name: Escapes
description: A program that leaves a process behind in a session of its own.
abi: 1
sandbox:
  filesystem:
    - {{path: /usr/bin, access: read}}
    - {{path: /bin, access: read}}
    - {{path: /proc, access: read}}
adapter:
  command:
    program: {program}
tools:
  - name: escapes
    title: Escapes
    description: Starts a process that escapes the process group, prints its pid and exits.
    side_effects: read
    input_schema: {{type: object, properties: {{}}}}
    policies: {{timeout_ms: 5000}}
    invoke:
      output: text
  - name: escapes_unread_stdin
    title: Escapes without reading stdin
    description: The same, given a document on stdin that nothing reads.
    side_effects: read
    input_schema: {{type: object, properties: {{text: {{type: string}}}}, required: [text]}}
    policies: {{timeout_ms: 5000}}
    invoke:
      stdin: {{argument: text}}
      output: text
"#,
        program = program.display()
    )
}

/// Whether `pid` runs (not a zombie) as the leader of a session of its own.
fn escaped_and_running(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    // Fields after the command name: state, ppid, pgrp, session.
    let f: Vec<&str> = stat.rsplit_once(") ").map(|(_, r)| r).unwrap_or("").split(' ').collect();
    f.len() > 3 && f[0] != "Z" && f[3].parse::<i32>().ok() == Some(pid)
}

/// The threads of this process that wait in a pipe read or write (by their `wchan`; where the
/// kernel does not show it, none are found).
fn threads_waiting_on_a_pipe() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .filter_map(|t| {
            let wchan = std::fs::read_to_string(t.path().join("wchan")).ok()?;
            let name = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            // A worker's reader thread always waits on its worker's pipe (one of another test
            // in this process, when the tests share one).
            let worker = name.starts_with("quiver-worker");
            (!worker && (wchan.contains("pipe_read") || wchan.contains("pipe_write")))
                .then(|| format!("{} ({wchan})", name.trim()))
        })
        .collect()
}

/// A program that exits while a process it started in another session (out of reach of the
/// group kill) still holds its pipes: the call answers with what the program printed once it
/// has exited, not at the deadline (5 s here, while the escaped process sleeps 60 s), and no
/// host thread is left reading or writing a pipe that process holds. The escaped process is
/// the program's business (it is still there when the call answers), so the test ends it.
async fn a_command_answers_when_it_exits_though_an_escaped_process_holds_its_pipes(isolation: Isolation) {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    let script = dir.path().join("escape.sh");
    // The sleeper keeps the script's stdin too (`0<&0`: a background job's stdin is otherwise
    // /dev/null). The script waits until the sleeper has its own session (else the group kill
    // at its exit could still reach it), then prints its pid.
    let body = "#!/bin/sh\nsetsid sleep 60 0<&0 &\n\
                while [ \"$(cut -d' ' -f6 /proc/$!/stat)\" != \"$!\" ]; do sleep 0.01; done\n\
                echo \"started $!\"\necho \"a note\" >&2\n";
    std::fs::write(&script, body).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let key = TestKey::generate();
    write_adapter(&plugins, "escapes", &escaping_adapter(&script), &key);
    let host = host(&plugins, &key, isolation);
    let router = Router::new(host.clone() as Arc<dyn CatalogSource>, RouterSettings::default());
    // More than a pipe holds, so a writer that waited for a reader would wait for ever.
    let big = "x".repeat(1 << 20);
    for (tool, args) in [("escapes", json!({})), ("escapes_unread_stdin", json!({"text": big}))] {
        let r = call(&router, tool, args).await;
        let text = r.outputs["text"].as_str().unwrap_or_default().to_owned();
        let sleeper = text.trim().strip_prefix("started ").and_then(|p| p.parse::<i32>().ok());
        let alive = sleeper.is_some_and(escaped_and_running);
        let stuck = if isolation == Isolation::InProcess { threads_waiting_on_a_pipe() } else { Vec::new() };
        if let Some(pid) = sleeper {
            // SAFETY: ends the sleeper the script started (it printed its pid).
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
        assert_eq!(r.status, Status::Ok, "{tool}: {r:?}");
        assert!(sleeper.is_some(), "{tool}: {r:?}");
        assert!(alive, "{tool}: the escaped process was gone when the call answered, so this proves nothing: {r:?}");
        assert!(stuck.is_empty(), "{tool}: host threads still wait on a pipe: {stuck:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_answers_when_it_exits_though_an_escaped_process_holds_its_pipes_in_process() {
    a_command_answers_when_it_exits_though_an_escaped_process_holds_its_pipes(Isolation::InProcess).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_answers_when_it_exits_though_an_escaped_process_holds_its_pipes_in_a_worker() {
    a_command_answers_when_it_exits_though_an_escaped_process_holds_its_pipes(Isolation::Process).await;
}

/// The processes named `comm` whose command line contains `marker` and that are not zombies.
fn running_with(comm: &str, marker: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let read = |f: &str| std::fs::read(format!("/proc/{pid}/{f}")).unwrap_or_default();
            let stat = String::from_utf8_lossy(&read("stat")).into_owned();
            let zombie = stat.rsplit_once(") ").is_none_or(|(_, r)| r.starts_with('Z'));
            !zombie
                && String::from_utf8_lossy(&read("comm")).trim() == comm
                && String::from_utf8_lossy(&read("cmdline")).contains(marker)
        })
        .collect()
}

/// A command adapter's program dies with the host: `quiver call` of the bundled `jq_query`
/// with a filter that runs for ever, killed (SIGKILL, so nothing of the host runs after it)
/// while jq runs, in the host and in a worker, leaves no jq behind.
#[test]
fn an_adapters_program_dies_with_the_host() {
    let p = super::Project::new();
    let dir = p.path("plugins/jq-tools");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(super::repo_root().join("plugins/jq-tools/tool.yaml"), dir.join("jq-tools.tool.yaml")).unwrap();
    p.quiver(&["sign", "plugins/jq-tools/jq-tools.tool.yaml", "--key", "keys/test.key"]).success();
    for iso in ["in_process", "process"] {
        std::fs::write(
            p.path("quiver.yaml"),
            format!("plugins_dir: plugins\ntrusted_keys:\n  - name: test\n    path: keys/test.pub\nisolation:\n  default: {iso}\n"),
        )
        .unwrap();
        let marker = format!("quiver-dies-with-the-host-{}-{iso}", std::process::id());
        let args = json!({"filter": format!("last(range(1e18)) | \"{marker}\""), "document": {}}).to_string();
        let mut host = p
            .quiver(&["call", "jq_query", "--args", &args])
            .cmd
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while running_with("jq", &marker).is_empty() && std::time::Instant::now() < until {
            assert!(host.try_wait().unwrap().is_none(), "{iso}: quiver ended before jq ran");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(!running_with("jq", &marker).is_empty(), "{iso}: jq never started");
        host.kill().unwrap();
        host.wait().unwrap();
        // The kernel ends jq when the host (or its worker, which ends when the host's pipe
        // closes) is gone; wait for that, boundedly (the call's own deadline is 30 s).
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !running_with("jq", &marker).is_empty() && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let left = running_with("jq", &marker);
        for pid in &left {
            // SAFETY: ends the jq this test started, which outlived its host.
            unsafe {
                libc::kill(*pid, libc::SIGKILL);
            }
        }
        assert!(left.is_empty(), "{iso}: jq {left:?} outlived the host");
    }
}

/// jq reads an argument that starts with `-` as an option, and jq 1.6 has no `--`: the bundled
/// jq tools refuse such a filter before jq runs (`-n` would ignore the document, `--slurp` wrap
/// it, `-h` print the help), naming the field and the fix; in parentheses it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bundled_jq_tools_refuse_a_filter_jq_would_read_as_an_option() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    let key = TestKey::generate();
    let manifest = std::fs::read_to_string(super::repo_root().join("plugins/jq-tools/tool.yaml")).unwrap();
    write_adapter(&plugins, "jq-tools", &manifest, &key);
    let host = host(&plugins, &key, Isolation::InProcess);
    let router = Router::new(host.clone() as Arc<dyn CatalogSource>, RouterSettings::default());
    for tool in ["jq_query", "jq_text"] {
        for filter in ["-n", "--slurp", "-h", " \t-n", "\n--arg"] {
            let r = call(&router, tool, json!({"filter": filter, "document": {"a": 3}})).await;
            let e = r.error.unwrap_or_else(|| panic!("{tool} ran {filter:?}: {:?}", r.outputs));
            assert_eq!(e.code, "invalid_arguments", "{tool} {filter:?}: {e:?}");
            assert!(e.message.contains("/filter") && e.message.contains("parentheses"), "{tool} {filter:?}: {e:?}");
        }
    }
    let r = call(&router, "jq_query", json!({"filter": "(-.a)", "document": {"a": 3}})).await;
    assert_eq!(r.outputs["result"], json!(-3), "{r:?}");
    let r = call(&router, "jq_query", json!({"filter": " .a - 1", "document": {"a": 3}})).await;
    assert_eq!(r.outputs["result"], json!(2), "{r:?}");
}
