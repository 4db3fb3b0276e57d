//! What running a plugin in a worker process costs, on one harness: `Router::call` of
//! `marker_echo` (release build of the marker plugin, signed bundle, real host) with the plugin
//! in-process and in a `quiver worker` process (the release `quiver` binary).
//!
//! Prints p50/p99 of sequential calls for both placements, the worker's added p50, and the
//! calls per second one worker sustains with 8 calls in flight. Run by `cargo xtask bench`
//! (`cargo bench -p quiver --bench worker`; `-- --quick` for shorter runs).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quiver_catalog::{Access, CatalogSource, ConflictPolicy};
use quiver_lifecycle::worker::WorkerSettings;
use quiver_lifecycle::{Host, HostSettings, IsolationPolicy, VerifyPolicy};
use quiver_manifest::{Isolation, PublicKey, TrustedKeys};
use quiver_router::{Call, Caller, Router, RouterSettings};
use quiver_tests::{TestKey, write_bundle};
use serde_json::json;

fn router(isolation: Isolation, library: &std::path::Path, key: &TestKey, dir: &std::path::Path) -> Arc<Router> {
    let plugins = dir.join(isolation.as_str());
    write_bundle(&plugins, "marker-plugin", library, None, Some(key));
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
            verify: VerifyPolicy { trusted, max_library_bytes: 256 << 20, ..VerifyPolicy::default() },
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

fn caller() -> Caller {
    Caller::new("bench", Access::new(["*"], Vec::<&str>::new()))
}

async fn one(router: &Router) {
    let out = router.call(Call::new("marker_echo", json!({"text": "hello"}), caller())).await;
    assert_eq!(out.response.status, quiver_abi::Status::Ok, "{:?}", out.response.error);
}

/// Sequential calls for `budget`; per-call latencies in ns, sorted.
fn latencies(rt: &tokio::runtime::Runtime, router: &Router, budget: Duration) -> Vec<u64> {
    rt.block_on(async {
        let mut out = Vec::new();
        let start = Instant::now();
        while start.elapsed() < budget {
            let t = Instant::now();
            one(router).await;
            out.push(t.elapsed().as_nanos() as u64);
        }
        out.sort_unstable();
        out
    })
}

fn pct(v: &[u64], p: f64) -> f64 {
    v[((v.len() - 1) as f64 * p) as usize] as f64 / 1000.0
}

/// Calls per second with `inflight` calls at once for `budget`.
fn throughput(rt: &tokio::runtime::Runtime, router: &Arc<Router>, inflight: usize, budget: Duration) -> f64 {
    rt.block_on(async {
        let start = Instant::now();
        let tasks: Vec<_> = (0..inflight)
            .map(|_| {
                let r = router.clone();
                tokio::spawn(async move {
                    let mut n = 0u64;
                    while start.elapsed() < budget {
                        one(&r).await;
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        let mut total = 0;
        for t in tasks {
            total += t.await.unwrap();
        }
        total as f64 / start.elapsed().as_secs_f64()
    })
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let quick = std::env::args().any(|a| a == "--quick");
    let budget = Duration::from_millis(if quick { 500 } else { 3000 });
    let library = quiver_tests::plugin_library_release("marker-plugin");
    let key = TestKey::generate();
    let dir = tempfile::tempdir().unwrap();
    let in_process = router(Isolation::InProcess, &library, &key, dir.path());
    let worker = router(Isolation::Process, &library, &key, dir.path());
    let rt1 = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    // Warm up, then interleave rounds (the machine is shared): best p50 of three rounds each.
    latencies(&rt1, &in_process, budget / 5);
    latencies(&rt1, &worker, budget / 5);
    let (mut ip, mut wk) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let a = latencies(&rt1, &in_process, budget / 3);
        let b = latencies(&rt1, &worker, budget / 3);
        if ip.is_empty() || pct(&a, 0.5) < pct(&ip, 0.5) {
            ip = a;
        }
        if wk.is_empty() || pct(&b, 0.5) < pct(&wk, 0.5) {
            wk = b;
        }
    }
    let tp_ip = throughput(&rt, &in_process, 8, budget);
    let tp_wk = throughput(&rt, &worker, 8, budget);
    let tp_wk1 = throughput(&rt, &worker, 1, budget);
    println!("worker isolation: Router::call of marker_echo (release plugin, release quiver worker)");
    println!("  placement     p50 µs   p99 µs   calls/s (1 in flight)   calls/s (8 in flight)");
    println!(
        "  in-process  {:>8.1} {:>8.1}   {:>21.0}   {:>21.0}",
        pct(&ip, 0.5),
        pct(&ip, 0.99),
        1e6 / pct(&ip, 0.5),
        tp_ip
    );
    println!("  worker      {:>8.1} {:>8.1}   {:>21.0}   {:>21.0}", pct(&wk, 0.5), pct(&wk, 0.99), tp_wk1, tp_wk);
    println!(
        "  worker adds {:.1} µs at p50 (aim: at most 25 µs); one worker: {tp_wk:.0} calls/s with 8 in flight (aim: at least 20,000)",
        pct(&wk, 0.5) - pct(&ip, 0.5)
    );
}
