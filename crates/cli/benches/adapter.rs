//! What a declarative command adapter adds over running its program directly: `Router::call` of
//! a jq adapter tool (signed adapter bundle, real host) in-process and in a `quiver worker`
//! process (the release `quiver` binary), next to spawning the same `jq` command line with
//! `std::process::Command`. Prints p50/p99 of sequential calls. Run by `cargo xtask bench`
//! (`cargo bench -p quiver --bench adapter`; `-- --quick` for shorter runs). Needs `jq`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quiver_catalog::{Access, CatalogSource, ConflictPolicy};
use quiver_lifecycle::worker::WorkerSettings;
use quiver_lifecycle::{Host, HostSettings, IsolationPolicy, VerifyPolicy};
use quiver_manifest::{Isolation, PublicKey, TrustedKeys};
use quiver_router::{Call, Caller, Router, RouterSettings};
use quiver_tests::TestKey;
use serde_json::json;

const MANIFEST: &str = r#"manifest_version: 1
id: jq-bench
version: 0.1.0
display_name: jq bench
description: jq positional arguments.
abi: 1
adapter:
  command:
    program: jq
tools:
  - name: jq_args
    title: jq args
    description: Prints its arguments.
    side_effects: read
    input_schema: {type: object, properties: {text: {type: string}}, required: [text]}
    invoke:
      args: ["-n", "-c", "--args", "$ARGS.positional", "{text}"]
"#;

fn router(isolation: Isolation, key: &TestKey, dir: &std::path::Path) -> Arc<Router> {
    let plugins = dir.join(isolation.as_str());
    let bundle = plugins.join("jq-bench");
    std::fs::create_dir_all(&bundle).unwrap();
    let path = bundle.join("jq-bench.tool.yaml");
    std::fs::write(&path, MANIFEST).unwrap();
    let sig = quiver_manifest::sign_bundle(&key.pair, MANIFEST, "jq-bench").unwrap();
    std::fs::write(quiver_lifecycle::signature_path(&path), sig).unwrap();
    let mut trusted = TrustedKeys::default();
    trusted.add("bench", "bench", PublicKey::parse(&key.public_text()).unwrap());
    let policy = IsolationPolicy {
        default: Some(isolation),
        worker: Some(WorkerSettings::new(PathBuf::from(env!("CARGO_BIN_EXE_quiver")))),
        ..IsolationPolicy::default()
    };
    let host = Arc::new(
        Host::new(HostSettings {
            plugins_dir: plugins,
            verify: VerifyPolicy { trusted, ..VerifyPolicy::default() },
            cache_dir: None,
            conflicts: ConflictPolicy::Error,
            isolation: policy,
        })
        .unwrap(),
    );
    let report = host.rescan();
    assert!(report.rejected.is_empty(), "{:?}", report.rejected);
    Arc::new(Router::new(host as Arc<dyn CatalogSource>, RouterSettings::default()))
}

/// Sequential runs of `f` for `budget`; latencies in ns, sorted.
fn latencies(budget: Duration, mut f: impl FnMut()) -> Vec<u64> {
    let mut out = Vec::new();
    let start = Instant::now();
    while start.elapsed() < budget {
        let t = Instant::now();
        f();
        out.push(t.elapsed().as_nanos() as u64);
    }
    out.sort_unstable();
    out
}

fn pct(v: &[u64], p: f64) -> f64 {
    v[((v.len() - 1) as f64 * p) as usize] as f64 / 1000.0
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let quick = std::env::args().any(|a| a == "--quick");
    let budget = Duration::from_millis(if quick { 1000 } else { 5000 });
    let key = TestKey::generate();
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let caller = || Caller::new("bench", Access::new(["*"], Vec::<&str>::new()));
    let via = |router: Arc<Router>| {
        let rt = &rt;
        move || {
            let out = rt.block_on(router.call(Call::new("jq_args", json!({"text": "hello"}), caller())));
            assert_eq!(out.response.outputs["result"], json!(["hello"]), "{:?}", out.response.error);
        }
    };
    let direct = || {
        let out = std::process::Command::new("jq")
            .args(["-n", "-c", "--args", "$ARGS.positional", "hello"])
            .output()
            .unwrap();
        assert_eq!(out.stdout, b"[\"hello\"]\n");
    };
    let mut in_process = via(router(Isolation::InProcess, &key, dir.path()));
    let mut worker = via(router(Isolation::Process, &key, dir.path()));
    let mut direct = direct;
    // Warm up, then interleave rounds (the machine is shared): best p50 of three rounds each.
    latencies(budget / 5, &mut direct);
    latencies(budget / 5, &mut in_process);
    latencies(budget / 5, &mut worker);
    let (mut d, mut ip, mut wk) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..3 {
        for (best, f) in [
            (&mut d, &mut direct as &mut dyn FnMut()),
            (&mut ip, &mut in_process as &mut dyn FnMut()),
            (&mut wk, &mut worker as &mut dyn FnMut()),
        ] {
            let v = latencies(budget / 3, f);
            if best.is_empty() || pct(&v, 0.5) < pct(best, 0.5) {
                *best = v;
            }
        }
    }
    println!("command adapter: jq -n -c --args '$ARGS.positional' hello, sequential");
    println!("  path                         p50 µs    p99 µs");
    for (name, v) in [("jq spawned directly", &d), ("adapter in-process", &ip), ("adapter in a worker", &wk)] {
        println!("  {name:<26} {:>8.0} {:>9.0}", pct(v, 0.5), pct(v, 0.99));
    }
    println!(
        "  adapter adds {:.0} µs at p50 in-process, {:.0} µs in a worker (sandboxed)",
        pct(&ip, 0.5) - pct(&d, 0.5),
        pct(&wk, 0.5) - pct(&d, 0.5)
    );
}
