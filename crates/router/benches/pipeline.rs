//! The router pipeline's overhead for a trivial tool (`marker_echo` of the real marker plugin,
//! loaded through `quiver_lifecycle`), against calling the same Rust function directly.
//!
//! Variants, cheapest first:
//! - `direct_fn`: `marker_plugin::Echo::call` with typed input (the Rust function itself);
//! - `direct_json`: the plugin's registry in-process with JSON in and out (no ABI, no host);
//! - `abi_invoke`: the loaded library through its `ToolBackend` (request JSON in, response JSON
//!   out, across the ABI), on the bench thread;
//! - `block_on_spawn_blocking`: only the runtime round trip every pipeline call pays (hand the
//!   call to a blocking thread and wait for it);
//! - `pipeline`: `Router::call` end to end (resolve, scopes, validation, approval, breaker,
//!   permits, deadline, blocking-thread invocation, response parsing, output validation, size
//!   check, telemetry).
//!
//! After the criterion groups a plain timing loop prints ns per call and the ratios.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::Criterion;
use quiver_abi::{Context, Tool, ToolRequest};
use quiver_catalog::{Access, NullSink, ToolBackend};
use quiver_router::{Call, Caller, Router, RouterSettings};
use serde_json::json;

#[allow(dead_code)]
#[path = "../tests/it/support.rs"]
mod support;

struct Setup {
    rt: tokio::runtime::Runtime,
    router: Router,
    backend: Arc<dyn ToolBackend>,
    caller: Caller,
    body: String,
    _plugins: support::Plugins,
}

fn setup() -> Setup {
    let (plugins, host) = support::marker_host();
    let backend = host.catalog().plugins()[0].backend.clone();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let router = Router::new(host, RouterSettings::default());
    let body = serde_json::to_string(&ToolRequest {
        request_id: "bench".into(),
        tool_id: "marker_echo".into(),
        tool_version: "0.1.0".into(),
        inputs: json!({"text": "hello"}),
        ..ToolRequest::default()
    })
    .expect("request");
    Setup { rt, router, backend, caller: Caller::new("bench", Access::unrestricted()), body, _plugins: plugins }
}

fn direct_fn() -> String {
    let req = ToolRequest::default();
    let mut cx = Context::detached(&req);
    let out = marker_plugin::Echo.call(marker_plugin::EchoInput { text: black_box("hello").to_owned() }, &mut cx).expect("echo");
    out.text
}

fn direct_json(body: &str) -> String {
    let request: ToolRequest = serde_json::from_str(body).expect("request");
    let response = marker_plugin::__quiver_plugin::registry().call("marker_echo", request, quiver_abi::sdk::Host::Detached);
    serde_json::to_string(&response).expect("response")
}

fn pipeline(s: &Setup) -> quiver_router::CallOutcome {
    let out = s.rt.block_on(s.router.call(Call::new("marker_echo", json!({"text": "hello"}), s.caller.clone())));
    debug_assert_eq!(out.response.status, quiver_abi::Status::Ok);
    out
}

fn spawn_blocking_round_trip(s: &Setup) {
    s.rt.block_on(async { tokio::task::spawn_blocking(|| black_box(1)).await.expect("join") });
}

fn ns_per_call(mut f: impl FnMut(), budget: Duration) -> f64 {
    for _ in 0..200 {
        f();
    }
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < budget {
        for _ in 0..100 {
            f();
        }
        n += 100;
    }
    start.elapsed().as_nanos() as f64 / n as f64
}

fn main() {
    let s = setup();
    let first = pipeline(&s);
    assert_eq!(first.response.status, quiver_abi::Status::Ok, "{:?}", first.response.error);

    let mut c = Criterion::default().configure_from_args();
    {
        let mut g = c.benchmark_group("marker_echo");
        g.bench_function("direct_fn", |b| b.iter(direct_fn));
        g.bench_function("direct_json", |b| b.iter(|| direct_json(black_box(&s.body))));
        g.bench_function("abi_invoke", |b| b.iter(|| s.backend.invoke("marker_echo", black_box(&s.body), Arc::new(NullSink))));
        g.bench_function("block_on_spawn_blocking", |b| b.iter(|| spawn_blocking_round_trip(&s)));
        g.bench_function("pipeline", |b| b.iter(|| pipeline(&s)));
        g.finish();
    }
    c.final_summary();

    let budget = Duration::from_millis(if std::env::args().any(|a| a == "--quick") { 300 } else { 2000 });
    let direct = ns_per_call(|| drop(black_box(direct_fn())), budget);
    let json = ns_per_call(|| drop(black_box(direct_json(&s.body))), budget);
    let abi = ns_per_call(|| drop(black_box(s.backend.invoke("marker_echo", &s.body, Arc::new(NullSink)))), budget);
    let handoff = ns_per_call(|| spawn_blocking_round_trip(&s), budget);
    let full = ns_per_call(|| drop(black_box(pipeline(&s))), budget);
    println!("\nsummary (plain timing loop, ns per call):");
    println!("  direct_fn                {direct:>10.0}");
    println!("  direct_json              {json:>10.0}");
    println!("  abi_invoke               {abi:>10.0}");
    println!("  block_on_spawn_blocking  {handoff:>10.0}");
    println!("  pipeline                 {full:>10.0}");
    println!("  pipeline / direct_fn     {:>10.1}x", full / direct);
    println!("  overhead vs direct_fn    {:>10.0} ns", full - direct);
    println!("  overhead vs abi_invoke, excluding the blocking-thread round trip  {:>6.0} ns", full - abi - handoff);
}
