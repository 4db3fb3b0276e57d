//! The router pipeline's overhead for a trivial tool (`marker_echo` of the real marker plugin,
//! release build, loaded through `quiver_lifecycle`), against calling the same Rust function
//! directly.
//!
//! Variants, cheapest first:
//! - `direct_fn`: `marker_plugin::Echo::call` with typed input (the Rust function itself);
//! - `direct_json`: the plugin's registry in-process with JSON in and out (no ABI, no host);
//! - `abi_invoke`: the loaded library through its `ToolBackend` (request JSON in, response JSON
//!   out, across the ABI), on the bench thread;
//! - `round_trip_*`: only what every pipeline call pays to run the plugin on a blocking thread
//!   under a deadline (spawn_blocking, a deadline timer and a cancellation token in a `select!`),
//!   measured in a loop inside one runtime task;
//! - `pipeline_*`: `Router::call` end to end in the same kind of loop (resolve, scopes,
//!   validation, approval, breaker, permits, deadline, blocking-thread invocation, response
//!   parsing, output validation, size check, telemetry); `pipeline_block_on_from_outside` calls
//!   it from a non-runtime thread, as the CLI does.
//!
//! `marker_echo` declares `policies.execution: inline`, so the pipeline runs it on the calling
//! task: the `round_trip_*` variants show what a tool with the default `thread` execution pays
//! on top.
//!
//! `pipeline_metrics_current_thread` is `pipeline_current_thread` through a router that also
//! feeds Prometheus metrics; the summary prints the difference (issue 13: at most 0.5 µs).
//! `pipeline_metrics_traced_current_thread` adds trace export exactly as `quiver serve --otlp`
//! runs it (`Router::with_traces` over the record queue, the exporter thread, the SDK's batch
//! processor; spans dropped by the exporter instead of POSTed:
//! `quiver_telemetry::discarding_export`); the summary prints the call-path cost of tracing on
//! vs off, the exporter threads' CPU per call (off the call path), records dropped and spans
//! exported per call. `QUIVER_BENCH_NO_TRACING=1`: no exporter is started at all.
//!
//! After the criterion groups a plain timing loop prints ns per call, the ratio to `direct_fn`,
//! and the router's own work (pipeline minus the ABI call, both best of the same interleaved
//! rounds); then the thread handoffs on the multi-thread runtime: `block_in_place` alone (the
//! floor of a caller running the tool itself, with nothing to answer it at the deadline) and a
//! task of its own running the tool inside `block_in_place` with the caller waiting beside the
//! deadline (what the router did before its thread pool), against `spawn_blocking` in the same
//! rounds.
//! `--profile-time` skips that summary (for `perf record`). The summary also prints
//! allocations per call (a counting global allocator: host code only) and the same plugin
//! through the router inline and with thread execution (`AsThread`), wall and process CPU time:
//! the difference is the thread handoff. Beside each handoff it prints the machine's floor for any
//! handoff (two plain threads passing a token through one atomic, both spinning: best of five
//! short rounds and one long round), so a run on a disturbed machine says so itself.
//! `QUIVER_BENCH_ALLOC_PROFILE=canned|inline|inline_text|inline_mt|inline_text_mt|thread|abi|abi_routed|direct`
//! (with `QUIVER_BENCH_CALLS`) runs only calls of that kind (`abi`: the bare ABI call,
//! `abi_loop`; `abi_routed`: the router's own ABI call on its request, `routed_loop`; `direct`: the plugin's registry on a request as the router writes it, `direct_loop`), for `heaptrack`, `perf record` or `valgrind --tool=callgrind`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::Criterion;
use quiver_abi::{Context, Tool, ToolRequest};
use quiver_catalog::{Access, NullSink, ToolBackend};
use quiver_router::{Call, Caller, Router, RouterSettings};
use serde_json::json;

#[path = "../tests/it/support.rs"]
mod support;

/// The system allocator, counting allocations (and reallocations) of the host's code: the
/// summary prints allocations per call. A plugin library has its own std and allocator, so
/// what the plugin allocates is not counted.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded as given.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded as given.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded as given.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as given.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations per run of `f`, over `n` runs.
fn allocations_per(n: u64, mut f: impl FnMut()) -> f64 {
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    for _ in 0..n {
        f();
    }
    (ALLOCATIONS.load(Ordering::Relaxed) - before) as f64 / n as f64
}

struct Setup {
    rt: tokio::runtime::Runtime,
    rt1: tokio::runtime::Runtime,
    router: Arc<Router>,
    /// The same router feeding Prometheus metrics (`quiver_telemetry::Metrics`).
    metered: Arc<Router>,
    /// `metered`, also exporting traces (when not `QUIVER_BENCH_NO_TRACING`), and its exporter.
    traced: Option<(Arc<Router>, quiver_telemetry::DiscardingExport)>,
    backend: Arc<dyn ToolBackend>,
    /// The same tools behind [`Canned`]: the router's own work, without the plugin.
    canned: Arc<Router>,
    /// The real plugin behind [`AsThread`]: `marker_echo` with thread execution.
    threaded: Arc<Router>,
    /// Shared by the calls, as a session's caller is in the MCP server.
    caller: Arc<Caller>,
    body: String,
    /// The plugin's answer to `body`.
    answer: String,
    /// The request exactly as the router writes it for the bench's call (the caller's session
    /// and scopes, a request id, a timestamp, the policies): the like-for-like ABI call.
    routed_body: String,
    _plugins: support::Plugins,
}

fn setup() -> Setup {
    let (plugins, host) = support::marker_host_from(support::marker_library_release());
    let backend = host.catalog().plugins()[0].backend.clone();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let rt1 = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let router = Arc::new(Router::new(host.clone(), RouterSettings::default()));
    let metered = Arc::new(
        Router::new(host.clone(), RouterSettings::default()).with_metrics(Arc::new(quiver_telemetry::Metrics::new())),
    );
    // Trace export as `quiver serve --otlp` runs it, spans dropped instead of sent.
    let traced = std::env::var_os("QUIVER_BENCH_NO_TRACING").is_none().then(|| {
        let exporter = quiver_telemetry::discarding_export();
        let router = Router::new(host.clone(), RouterSettings::default())
            .with_metrics(Arc::new(quiver_telemetry::Metrics::new()))
            .with_traces(exporter.export());
        (Arc::new(router), exporter)
    });
    let body = serde_json::to_string(&ToolRequest {
        request_id: "bench".into(),
        tool_id: "marker_echo".into(),
        tool_version: "0.1.0".into(),
        inputs: json!({"text": "hello"}),
        ..ToolRequest::default()
    })
    .expect("request");
    let plugin = host.catalog().plugins()[0].clone();
    let answer = backend.invoke("marker_echo", &body, Arc::new(NullSink));
    let entry = support::entry_with(&plugin, plugin.manifest.clone(), Arc::new(Canned { answer: answer.clone() }));
    let catalog =
        quiver_catalog::Catalog::build(vec![Arc::new(entry)], quiver_catalog::ConflictPolicy::Error).expect("catalog");
    let canned = Arc::new(Router::new(Arc::new(Arc::new(catalog)), RouterSettings::default()));
    let recording = Arc::new(Recording { inner: backend.clone(), last: std::sync::Mutex::new(String::new()) });
    let entry = support::entry_with(&plugin, plugin.manifest.clone(), recording.clone());
    let catalog =
        quiver_catalog::Catalog::build(vec![Arc::new(entry)], quiver_catalog::ConflictPolicy::Error).expect("catalog");
    let recorder = Router::new(Arc::new(Arc::new(catalog)), RouterSettings::default());
    let caller = Arc::new(Caller::new("bench", Access::unrestricted()));
    let call = Call::new("marker_echo", json!({"text": "hello"}), caller.clone()).with_outputs_as_text(true);
    let recorded = rt1.block_on(recorder.call(call));
    assert_eq!(recorded.response.status, quiver_abi::Status::Ok, "{:?}", recorded.response.error);
    let routed_body = std::mem::take(&mut *recording.last.lock().expect("recorded request"));
    assert!(routed_body.contains("\"session_id\":\"bench\""), "{routed_body}");
    let entry = support::entry_with(&plugin, plugin.manifest.clone(), Arc::new(AsThread(backend.clone())));
    let catalog =
        quiver_catalog::Catalog::build(vec![Arc::new(entry)], quiver_catalog::ConflictPolicy::Error).expect("catalog");
    let threaded = Arc::new(Router::new(Arc::new(Arc::new(catalog)), RouterSettings::default()));
    Setup {
        rt,
        rt1,
        router,
        metered,
        traced,
        backend,
        canned,
        threaded,
        caller,
        body,
        answer,
        routed_body,
        _plugins: plugins,
    }
}

/// A backend that answers every call, inline, with the plugin's own answer to `marker_echo`
/// (stored once): the pipeline through it is the router's work alone (request written, answer
/// read and checked, telemetry), with no plugin call.
struct Canned {
    answer: String,
}

impl ToolBackend for Canned {
    fn invoke(&self, _tool: &str, request: &str, _sink: Arc<dyn quiver_catalog::CallSink>) -> String {
        black_box(request);
        self.answer.clone()
    }
    fn invoke_borrowed(
        &self,
        _tool: &str,
        request: &str,
        _sink: &dyn quiver_catalog::CallSink,
        answer: &mut dyn FnMut(&str),
    ) -> bool {
        black_box(request);
        answer(&self.answer);
        true
    }
    fn dispatch(&self, _index: usize) -> quiver_catalog::Dispatch {
        quiver_catalog::Dispatch::Inline
    }
}

/// The loaded plugin, its calls run with thread execution (the manifest of `marker_echo` says
/// inline): the same plugin through the router both ways, so the difference is the handoff.
struct AsThread(Arc<dyn ToolBackend>);

impl ToolBackend for AsThread {
    fn invoke(&self, tool: &str, request: &str, sink: Arc<dyn quiver_catalog::CallSink>) -> String {
        self.0.invoke(tool, request, sink)
    }
    fn dispatch(&self, _index: usize) -> quiver_catalog::Dispatch {
        quiver_catalog::Dispatch::Thread
    }
}

/// The loaded plugin, keeping the last request the router wrote for it.
struct Recording {
    inner: Arc<dyn ToolBackend>,
    last: std::sync::Mutex<String>,
}

impl ToolBackend for Recording {
    fn invoke(&self, tool: &str, request: &str, sink: Arc<dyn quiver_catalog::CallSink>) -> String {
        request.clone_into(&mut self.last.lock().expect("recording"));
        self.inner.invoke(tool, request, sink)
    }
    fn invoke_borrowed(
        &self,
        tool: &str,
        request: &str,
        sink: &dyn quiver_catalog::CallSink,
        answer: &mut dyn FnMut(&str),
    ) -> bool {
        request.clone_into(&mut self.last.lock().expect("recording"));
        self.inner.invoke_borrowed(tool, request, sink, answer)
    }
    fn dispatch(&self, index: usize) -> quiver_catalog::Dispatch {
        self.inner.dispatch(index)
    }
}

/// The ABI call the router makes, alone: the plugin's `invoke` through the same borrowed
/// entry point, on the request the router wrote ([`Setup::routed_body`]).
fn invoke_routed(s: &Setup) {
    let answered = s.backend.invoke_borrowed("marker_echo", black_box(&s.routed_body), &NullSink, &mut |a| {
        black_box(a);
    });
    debug_assert!(answered);
}

/// `n` of [`invoke_routed`], one after another (for a profiler, as [`abi_loop`]).
#[inline(never)]
fn routed_loop(s: &Setup, n: u64) {
    for _ in 0..n {
        invoke_routed(s);
    }
}

fn direct_fn() -> String {
    let req = ToolRequest::default();
    let mut cx = Context::detached(&req);
    let out = marker_plugin::Echo
        .call(marker_plugin::EchoInput { text: black_box("hello").to_owned() }, &mut cx)
        .expect("echo");
    out.text
}

fn direct_json(body: &str) -> String {
    // What the exported `invoke` does, without the ABI.
    marker_plugin::__quiver_plugin::registry().call_text("marker_echo", body, quiver_abi::sdk::Host::Detached)
}

/// `n` calls of [`direct_json`] on `body`, one after another (for a profiler, as [`abi_loop`]).
#[inline(never)]
fn direct_loop(body: &str, n: u64) {
    for _ in 0..n {
        drop(black_box(direct_json(black_box(body))));
    }
}

/// `abi_invoke`: the loaded library through its `ToolBackend`.
fn invoke(s: &Setup) -> String {
    s.backend.invoke("marker_echo", black_box(&s.body), Arc::new(NullSink))
}

/// `n` bare ABI calls (`abi_invoke`), one after another: a function of its own, so that a
/// profiler can count it alone (`valgrind --tool=callgrind --toggle-collect='pipeline::abi_loop'`).
#[inline(never)]
fn abi_loop(s: &Setup, n: u64) {
    for _ in 0..n {
        drop(black_box(invoke(s)));
    }
}

fn pipeline(s: &Setup, rt: &tokio::runtime::Runtime) -> quiver_router::CallOutcome {
    let out = rt.block_on(s.router.call(Call::new("marker_echo", json!({"text": "hello"}), s.caller.clone())));
    debug_assert_eq!(out.response.status, quiver_abi::Status::Ok);
    out
}

/// Runs `iters` pipeline calls one after another inside one task on the runtime (as the MCP
/// server does: calls arrive on runtime tasks), returning the elapsed time.
fn pipeline_loop(s: &Setup, rt: &tokio::runtime::Runtime, iters: u64) -> Duration {
    router_loop(&s.router, s, rt, iters)
}

/// [`pipeline_loop`] through `router`.
fn router_loop(router: &Arc<Router>, s: &Setup, rt: &tokio::runtime::Runtime, iters: u64) -> Duration {
    router_loop_with(router, s, rt, iters, false)
}

/// [`router_loop`], the calls taking their output as text when `as_text` (as the MCP server's
/// calls do: `Call::outputs_as_text`).
fn router_loop_with(
    router: &Arc<Router>,
    s: &Setup,
    rt: &tokio::runtime::Runtime,
    iters: u64,
    as_text: bool,
) -> Duration {
    let router = router.clone();
    let caller = s.caller.clone();
    let task = async move {
        let start = Instant::now();
        for _ in 0..iters {
            let call = Call::new("marker_echo", json!({"text": "hello"}), caller.clone()).with_outputs_as_text(as_text);
            let out = router.call(call).await;
            black_box(out);
        }
        start.elapsed()
    };
    rt.block_on(rt.spawn(task)).expect("bench task")
}

/// [`router_loop`] in `chunks` consecutive chunks of `per` calls: the time of each chunk.
fn router_chunks(
    router: &Arc<Router>,
    s: &Setup,
    rt: &tokio::runtime::Runtime,
    chunks: usize,
    per: u64,
) -> Vec<Duration> {
    (0..chunks).map(|_| router_loop(router, s, rt, per)).collect()
}

/// The median of `times`, and how many are over three times it.
fn median_and_slow(times: &[Duration]) -> (Duration, usize) {
    let mut sorted = times.to_vec();
    sorted.sort();
    let median = sorted[sorted.len() / 2];
    (median, times.iter().filter(|t| **t > median * 3).count())
}

/// CPU time of the whole process and of the calling thread.
fn cpu_times() -> (Duration, Duration) {
    fn clock(id: libc::clockid_t) -> Duration {
        let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `t` is a valid timespec for the call to fill in.
        unsafe { libc::clock_gettime(id, &mut t) };
        Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
    }
    (clock(libc::CLOCK_PROCESS_CPUTIME_ID), clock(libc::CLOCK_THREAD_CPUTIME_ID))
}

/// Times the process's threads went to sleep so far (voluntary context switches, all threads).
fn sleeps() -> i64 {
    // SAFETY: `usage` is a valid rusage for the call to fill in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_SELF covers every thread of the process.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    usage.ru_nvcsw
}

/// The same loop with only the blocking-thread round trip (deadline timer and cancellation
/// token included) and no router work or plugin call.
fn round_trip_loop(rt: &tokio::runtime::Runtime, iters: u64) -> Duration {
    let task = async move {
        let start = Instant::now();
        for _ in 0..iters {
            let cancel = tokio_util::sync::CancellationToken::new();
            let child = cancel.child_token();
            let mut h = tokio::task::spawn_blocking(|| black_box(1));
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            tokio::select! {
                biased;
                r = &mut h => { r.expect("join"); }
                _ = child.cancelled() => {}
                _ = tokio::time::sleep_until(deadline) => {}
            }
        }
        start.elapsed()
    };
    rt.block_on(rt.spawn(task)).expect("bench task")
}

/// The floor of a design where the caller runs a thread tool itself (no handoff to another
/// thread): `block_in_place` per call on the multi-thread runtime, with nothing that could answer
/// the caller at the deadline if the tool hung (which is why the router does not do this).
fn in_place_loop(rt: &tokio::runtime::Runtime, iters: u64) -> Duration {
    let task = async move {
        let start = Instant::now();
        for _ in 0..iters {
            black_box(tokio::task::block_in_place(|| black_box(1)));
        }
        start.elapsed()
    };
    rt.block_on(rt.spawn(task)).expect("bench task")
}

/// A handoff that keeps the deadline guarantee without waking a pool thread: the tool runs in a
/// task of its own (spawned from a worker, it lands in that worker's next-task slot) inside
/// `block_in_place` (the worker's other tasks move to another thread while it blocks), and the
/// caller waits for its answer with the deadline and cancellation beside it (the router's
/// handoff before its thread pool, kept for comparison).
fn spawn_in_place_loop(rt: &tokio::runtime::Runtime, iters: u64) -> Duration {
    let task = async move {
        let start = Instant::now();
        for _ in 0..iters {
            let cancel = tokio_util::sync::CancellationToken::new();
            let (tx, rx) = tokio::sync::oneshot::channel();
            tokio::spawn(async move {
                let _ = tx.send(tokio::task::block_in_place(|| black_box(1)));
            });
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            tokio::select! {
                biased;
                r = rx => { r.expect("answer"); }
                _ = cancel.cancelled() => {}
                _ = tokio::time::sleep_until(deadline) => {}
            }
        }
        start.elapsed()
    };
    rt.block_on(rt.spawn(task)).expect("bench task")
}

/// The machine's own floor for any handoff: two plain threads passing a token back and forth
/// through one atomic, both spinning and never sleeping, so the round trip is only how soon each
/// side sees the other's store. No design that hands a call to another thread and waits for its
/// answer can beat it; when this machine's two virtual CPUs do not run at the same time, it is
/// what rises (`None` on a single CPU, where the spinners would only take turns per time slice).
/// The machine's floor for a handoff (ns per token round trip, [`token_floor_loop`]) over a
/// short round; `None` on a single CPU.
fn floor_now() -> Option<f64> {
    const ROUND: u64 = 2_000;
    token_floor_loop(ROUND).map(|d| per_call(d, ROUND))
}

/// Time the hypervisor ran something else while this machine's processors had work (the
/// `steal` column of `/proc/stat`, in clock ticks); `None` where it is not reported.
fn steal_ticks() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    stat.lines().next()?.split_whitespace().nth(8)?.parse().ok()
}

/// The floor under which a sustained handoff round counts as undisturbed (ns): the machine's
/// slow state measured 360-420 ns, its stalls 0.7-8 µs, its fast state 47-87 ns.
const UNDISTURBED: f64 = 1_000.0;

fn token_floor_loop(iters: u64) -> Option<Duration> {
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        return None;
    }
    const STOP: u64 = u64::MAX;
    let token = Arc::new(AtomicU64::new(0));
    let theirs = Arc::clone(&token);
    let partner = std::thread::spawn(move || {
        loop {
            let seen = theirs.load(Ordering::Acquire);
            if seen == STOP {
                break;
            }
            if seen % 2 == 1 {
                theirs.store(seen + 1, Ordering::Release);
            } else {
                std::hint::spin_loop();
            }
        }
    });
    let start = Instant::now();
    for i in 0..iters {
        token.store(2 * i + 1, Ordering::Release);
        while token.load(Ordering::Acquire) != 2 * i + 2 {
            std::hint::spin_loop();
        }
    }
    let took = start.elapsed();
    token.store(STOP, Ordering::Release);
    partner.join().expect("token partner");
    Some(took)
}

fn per_call(total: Duration, iters: u64) -> f64 {
    total.as_nanos() as f64 / iters as f64
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
    for rt in [&s.rt, &s.rt1] {
        let first = pipeline(&s, rt);
        assert_eq!(first.response.status, quiver_abi::Status::Ok, "{:?}", first.response.error);
    }

    // `QUIVER_BENCH_ALLOC_PROFILE=canned|inline|thread|abi`: only `QUIVER_BENCH_CALLS` (10,000)
    // calls of that kind, nothing else (to run under `heaptrack` or `perf record`).
    if let Ok(which) = std::env::var("QUIVER_BENCH_ALLOC_PROFILE") {
        let calls = std::env::var("QUIVER_BENCH_CALLS").ok().and_then(|n| n.parse().ok()).unwrap_or(10_000);
        if which == "abi" {
            abi_loop(&s, calls);
            return;
        }
        if which == "abi_routed" {
            routed_loop(&s, calls);
            return;
        }
        if which == "direct" {
            // The plugin's reading and answering alone, on a request as the router writes it.
            let body = serde_json::to_string(&ToolRequest {
                request_id: "k3f9zq-1a".into(),
                tool_id: "marker_echo".into(),
                tool_version: "0.1.0".into(),
                timestamp: 1_764_000_000_000,
                agent_context: quiver_abi::AgentContext {
                    session_id: "bench".into(),
                    scopes: vec!["*".into()],
                    ..Default::default()
                },
                inputs: json!({"text": "hello"}),
                ..ToolRequest::default()
            })
            .expect("request");
            direct_loop(&body, calls);
            return;
        }
        let (router, rt) = match which.as_str() {
            "inline" | "inline_text" => (&s.router, &s.rt1),
            // The same calls on the multi-thread runtime's worker thread (as `quiver serve`).
            "inline_mt" | "inline_text_mt" => (&s.router, &s.rt),
            "thread" => (&s.threaded, &s.rt),
            _ => (&s.canned, &s.rt1),
        };
        router_loop_with(router, &s, rt, calls, which.starts_with("inline_text"));
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    {
        let mut g = c.benchmark_group("marker_echo");
        g.bench_function("direct_fn", |b| b.iter(direct_fn));
        g.bench_function("direct_json", |b| b.iter(|| direct_json(black_box(&s.body))));
        g.bench_function("abi_invoke", |b| {
            b.iter(|| s.backend.invoke("marker_echo", black_box(&s.body), Arc::new(NullSink)))
        });
        g.bench_function("round_trip_current_thread", |b| b.iter_custom(|n| round_trip_loop(&s.rt1, n)));
        g.bench_function("pipeline_current_thread", |b| b.iter_custom(|n| pipeline_loop(&s, &s.rt1, n)));
        g.bench_function("pipeline_text_current_thread", |b| {
            b.iter_custom(|n| router_loop_with(&s.router, &s, &s.rt1, n, true))
        });
        g.bench_function("pipeline_metrics_current_thread", |b| {
            b.iter_custom(|n| router_loop(&s.metered, &s, &s.rt1, n))
        });
        if let Some((traced, _)) = &s.traced {
            g.bench_function("pipeline_metrics_traced_current_thread", |b| {
                b.iter_custom(|n| router_loop(traced, &s, &s.rt1, n))
            });
        }
        g.bench_function("round_trip_multi_thread", |b| b.iter_custom(|n| round_trip_loop(&s.rt, n)));
        g.bench_function("pipeline_multi_thread", |b| b.iter_custom(|n| pipeline_loop(&s, &s.rt, n)));
        g.bench_function("pipeline_block_on_from_outside", |b| b.iter(|| pipeline(&s, &s.rt)));
        g.finish();
    }
    c.final_summary();
    if std::env::args().any(|a| a == "--profile-time" || a == "--list") {
        return;
    }

    let budget = Duration::from_millis(if std::env::args().any(|a| a == "--quick") { 300 } else { 2000 });
    let direct = ns_per_call(|| drop(black_box(direct_fn())), budget);
    let json = ns_per_call(|| drop(black_box(direct_json(&s.body))), budget);
    let abi = ns_per_call(|| drop(black_box(invoke(&s))), budget);
    println!("\nsummary (plain timing loops, ns per call; marker_echo, release build of the plugin):");
    println!("  direct_fn (the Rust function)                {direct:>9.0}");
    println!("  direct_json (registry, JSON in/out, no ABI)  {json:>9.0}");
    println!("  abi_invoke (loaded library via ToolBackend)  {abi:>9.0}");
    // What reading the plugin's answer costs the router (its JSON into a `ToolResponse`).
    let parse =
        ns_per_call(|| drop(black_box(serde_json::from_str::<quiver_abi::ToolResponse>(black_box(&s.answer)))), budget);
    println!("  answer read alone ({} bytes into ToolResponse) {parse:>9.0}", s.answer.len());
    let n = if budget < Duration::from_secs(1) { 3000 } else { 20_000 };
    for (name, rt) in [("current_thread", &s.rt1), ("multi_thread", &s.rt)] {
        round_trip_loop(rt, 200);
        pipeline_loop(&s, rt, 200);
        // Interleaved, best of 5: the machine is shared, and the minimum is the least disturbed.
        let (mut handoff, mut full, mut text, mut abi) = (f64::MAX, f64::MAX, f64::MAX, abi);
        let (mut routed, mut own_call, mut abi_there) = (f64::MAX, f64::MAX, f64::MAX);
        let caller = &s.caller;
        for _ in 0..5 {
            handoff = handoff.min(per_call(round_trip_loop(rt, n / 5), n / 5));
            full = full.min(per_call(pipeline_loop(&s, rt, n / 5), n / 5));
            text = text.min(per_call(router_loop_with(&s.router, &s, rt, n / 5, true), n / 5));
            abi = abi.min(ns_per_call(|| drop(black_box(invoke(&s))), budget / 5));
            routed = routed.min(ns_per_call(|| invoke_routed(&s), budget / 5));
            // The same ABI call on a thread of the runtime the pipeline runs on (a multi-thread
            // runtime's worker): a figure off here is that thread's processor, not the router.
            let (backend, body) = (s.backend.clone(), s.body.clone());
            let there = move || {
                let call = || drop(black_box(backend.invoke("marker_echo", black_box(&body), Arc::new(NullSink))));
                ns_per_call(call, budget / 5)
            };
            abi_there = abi_there.min(rt.block_on(rt.spawn(async move { there() })).expect("bench task"));
            // The caller's own part of each pipeline call: the bench builds a `Call` (its
            // arguments a `Value`) that the router takes and drops; `abi_invoke` is handed a
            // request written once, before the loop.
            own_call = own_call.min(ns_per_call(
                || drop(black_box(Call::new("marker_echo", json!({"text": "hello"}), caller.clone()))),
                budget / 5,
            ));
        }
        println!("  [{name}] abi_invoke, best of the same rounds                {abi:>9.0}");
        println!("  [{name}] the router's own ABI call alone (its request, borrowed) {routed:>9.0}");
        let mut own = f64::MAX;
        for _ in 0..5 {
            own = own.min(per_call(router_loop(&s.canned, &s, rt, n / 5), n / 5));
        }
        println!("  [{name}] router alone (pipeline, backend with a stored answer) {own:>9.0}");
        println!("  [{name}] blocking-thread round trip (thread execution adds)  {handoff:>9.0}");
        println!("  [{name}] pipeline (Router::call, in a runtime task)         {full:>9.0}");
        println!("  [{name}] pipeline / direct_fn                               {:>9.1}x", full / direct);
        println!("  [{name}] overhead vs direct_fn                              {:>9.0} ns", full - direct);
        println!("  [{name}] router work (pipeline - abi_invoke)                {:>9.0} ns", full - abi);
        println!("  [{name}] pipeline, output passed on as text (MCP server)    {text:>9.0}");
        println!("  [{name}] router work, output as text (as the server calls)  {:>9.0} ns", text - abi);
        println!("  [{name}] router work as text, over the router's own ABI call   {:>9.0} ns", text - routed);
        println!("  [{name}] abi_invoke in a task of this runtime, same rounds       {abi_there:>9.0}");
        println!("  [{name}] the bench's Call built and dropped alone (caller's part) {own_call:>9.0}");
        println!("  [{name}] router work less the caller's Call, output as a Value  {:>9.0} ns", full - abi - own_call);
        println!("  [{name}] router work less the caller's Call, output as text     {:>9.0} ns", text - abi - own_call);
    }
    // Allocations per call (current-thread runtime, one task): the bench's own `Call` (built and
    // dropped without a call) and the calls through the router alone and the real plugin.
    let caller = s.caller.clone();
    let call_only = allocations_per(2000, || {
        black_box(Call::new("marker_echo", json!({"text": "hello"}), caller.clone()));
    });
    let (own_allocs, full_allocs) = (
        allocations_per(1, || {
            black_box(router_loop(&s.canned, &s, &s.rt1, 2000));
        }) / 2000.0,
        allocations_per(1, || {
            black_box(router_loop(&s.router, &s, &s.rt1, 2000));
        }) / 2000.0,
    );
    let thread_allocs = allocations_per(1, || {
        black_box(router_loop(&s.threaded, &s, &s.rt, 2000));
    }) / 2000.0;
    println!("  allocations: building and dropping the bench's Call alone          {call_only:>9.1}");
    // What a caller's task holds and moves for each call (bytes).
    let future = s.router.call(Call::new("marker_echo", json!({}), s.caller.clone()));
    println!(
        "  size of a Router::call future                                      {:>9}",
        std::mem::size_of_val(&future)
    );
    drop(future);
    println!(
        "  size of a CallOutcome                                              {:>9}",
        std::mem::size_of::<quiver_router::CallOutcome>()
    );
    println!("  allocations per call: router alone (incl. the Call)                {own_allocs:>9.1}");
    println!("  allocations per call: pipeline with the plugin, inline (host side) {full_allocs:>9.1}");
    println!("  allocations per call: pipeline with the plugin, thread (host side) {thread_allocs:>9.1}");
    // Thread execution against inline, the same plugin through the same pipeline: the
    // difference is the handoff. Wall time and process CPU time per call.
    for (name, rt) in [("current_thread", &s.rt1), ("multi_thread", &s.rt)] {
        router_loop(&s.threaded, &s, rt, 200);
        let (mut inline, mut thread, mut inline_cpu, mut thread_cpu) = (f64::MAX, f64::MAX, f64::MAX, f64::MAX);
        for _ in 0..5 {
            let c0 = cpu_times().0;
            inline = inline.min(per_call(router_loop(&s.router, &s, rt, n / 5), n / 5));
            let c1 = cpu_times().0;
            thread = thread.min(per_call(router_loop(&s.threaded, &s, rt, n / 5), n / 5));
            let c2 = cpu_times().0;
            inline_cpu = inline_cpu.min(per_call(c1 - c0, n / 5));
            thread_cpu = thread_cpu.min(per_call(c2 - c1, n / 5));
        }
        println!("  [{name}] pipeline, inline tool                       {inline:>9.0} (CPU {inline_cpu:>6.0})");
        println!("  [{name}] pipeline, same tool with thread execution   {thread:>9.0} (CPU {thread_cpu:>6.0})");
        println!(
            "  [{name}] thread handoff (thread - inline)             {:>9.0} (CPU {:>6.0})",
            thread - inline,
            thread_cpu - inline_cpu
        );
        // Sustained: one long round each, not the best of short ones (a thread that spins
        // between calls has its CPU time counted at the scheduler's ticks, so short rounds
        // undercount it; a long round's figure is within a few per cent). Each round is
        // bracketed by the machine's floor (a token passed between two spinning threads): a
        // round with a floor over `UNDISTURBED` on either side, with time stolen by the
        // hypervisor during it, or with a chunk of its calls three times slower than its
        // median chunk, ran while the machine itself stalled, which no handoff can beat. Every
        // round is printed; up to five are run, until one is undisturbed.
        const LONG: u64 = 20_000;
        // Each round is timed in chunks: a chunk over three times the round's median one was
        // hit by a stall inside the round, which the floor on its sides cannot see.
        const CHUNKS: usize = 20;
        let mut undisturbed = None;
        for attempt in 1..=5 {
            let before = floor_now();
            let stolen = steal_ticks();
            let c0 = cpu_times().0;
            let inline_chunks = router_chunks(&s.router, &s, rt, CHUNKS, LONG / CHUNKS as u64);
            let (c1, z1) = (cpu_times().0, sleeps());
            let thread_chunks = router_chunks(&s.threaded, &s, rt, CHUNKS, LONG / CHUNKS as u64);
            let (c2, z2) = (cpu_times().0, sleeps());
            let inline = per_call(inline_chunks.iter().sum(), LONG);
            let thread = per_call(thread_chunks.iter().sum(), LONG);
            let (inline_median, inline_slow) = median_and_slow(&inline_chunks);
            let (thread_median, thread_slow) = median_and_slow(&thread_chunks);
            let per_chunk = LONG / CHUNKS as u64;
            let stolen = steal_ticks().zip(stolen).map(|(b, a)| b.saturating_sub(a));
            let after = floor_now();
            let (inline_cpu, thread_cpu) = (per_call(c1 - c0, LONG), per_call(c2 - c1, LONG));
            println!(
                "  [{name}] thread handoff, one round of {LONG} calls each   {:>9.0} (CPU {:>6.0}; sleeps per call {:.2}; floor before/after {:.0}/{:.0}; steal {}; median chunk {:.0}; slow chunks {})",
                thread - inline,
                thread_cpu - inline_cpu,
                (z2 - z1) as f64 / LONG as f64,
                before.unwrap_or(f64::NAN),
                after.unwrap_or(f64::NAN),
                stolen.map_or_else(|| "n/a".to_owned(), |t| format!("{t} ticks")),
                per_call(thread_median, per_chunk) - per_call(inline_median, per_chunk),
                inline_slow + thread_slow,
            );
            let calm = match (before, after) {
                (Some(b), Some(a)) => b.max(a) <= UNDISTURBED,
                _ => true,
            } && stolen.unwrap_or(0) == 0
                && inline_slow + thread_slow == 0;
            if calm {
                undisturbed = Some((attempt, thread - inline));
                break;
            }
        }
        match undisturbed {
            Some((attempt, handoff)) => println!(
                "  [{name}] thread handoff, sustained, undisturbed round       {handoff:>9.0} (round {attempt} of at most 5)"
            ),
            None => println!(
                "  [{name}] thread handoff, sustained: no undisturbed round in 5 (the machine's floor stayed over {UNDISTURBED:.0} ns)"
            ),
        }
        // The machine's floor in the same minute: best of five short rounds, then one round
        // as long as the sustained handoff's.
        if let Some(long) = token_floor_loop(LONG) {
            let best =
                (0..5).filter_map(|_| token_floor_loop(n / 5)).map(|d| per_call(d, n / 5)).fold(f64::MAX, f64::min);
            println!(
                "  [{name}] machine floor: token round trip, two spinning threads {best:>9.0} (one round of {LONG}: {:.0})",
                per_call(long, LONG)
            );
        }
    }
    in_place_loop(&s.rt, 200);
    let mut in_place = f64::MAX;
    for _ in 0..5 {
        in_place = in_place.min(per_call(in_place_loop(&s.rt, n / 5), n / 5));
    }
    println!("  [multi_thread] block_in_place per call (caller runs it, no deadline) {in_place:>9.0}");
    spawn_in_place_loop(&s.rt, 200);
    let (mut spawned, mut blocking) = (f64::MAX, f64::MAX);
    for _ in 0..5 {
        spawned = spawned.min(per_call(spawn_in_place_loop(&s.rt, n / 5), n / 5));
        blocking = blocking.min(per_call(round_trip_loop(&s.rt, n / 5), n / 5));
    }
    println!("  [multi_thread] spawn + block_in_place + deadline select round trip {spawned:>9.0}");
    println!("  [multi_thread] spawn_blocking round trip, same rounds                {blocking:>9.0}");
    // Metrics on vs off: the same calls through a router feeding Prometheus handles; rounds
    // interleaved, best of 9 each.
    router_loop(&s.metered, &s, &s.rt1, 200);
    let (mut off, mut on) = (f64::MAX, f64::MAX);
    for _ in 0..9 {
        off = off.min(per_call(router_loop(&s.router, &s, &s.rt1, n / 5), n / 5));
        on = on.min(per_call(router_loop(&s.metered, &s, &s.rt1, n / 5), n / 5));
    }
    println!("  [current_thread] pipeline, metrics off                    {off:>9.0}");
    println!("  [current_thread] pipeline, metrics on                     {on:>9.0}");
    println!("  [current_thread] metrics cost per call                    {:>9.0} ns", on - off);
    // Trace export on vs off (with metrics on in both): same interleaving. With
    // QUIVER_BENCH_NO_TRACING set no exporter exists in the process.
    if let Some((traced, exporter)) = &s.traced {
        router_loop(traced, &s, &s.rt1, 200);
        // Wall time, and this thread's CPU time (the call path alone: on two shared cores the
        // exporter threads' work can take this thread's core, which wall time would charge).
        let (mut off, mut on, mut off_cpu, mut on_cpu) = (f64::MAX, f64::MAX, f64::MAX, f64::MAX);
        for _ in 0..9 {
            let t = cpu_times().1;
            off = off.min(per_call(router_loop(&s.metered, &s, &s.rt1, n / 5), n / 5));
            let t2 = cpu_times().1;
            on = on.min(per_call(router_loop(traced, &s, &s.rt1, n / 5), n / 5));
            let t3 = cpu_times().1;
            off_cpu = off_cpu.min(per_call(t2 - t, n / 5));
            on_cpu = on_cpu.min(per_call(t3 - t2, n / 5));
        }
        println!("  [current_thread] pipeline, metrics on, tracing off        {off:>9.0}");
        println!("  [current_thread] pipeline, metrics on, tracing on         {on:>9.0}");
        println!("  [current_thread] tracing cost per call (wall)             {:>9.0} ns", on - off);
        println!("  [current_thread] calling thread CPU, tracing off          {off_cpu:>9.0}");
        println!("  [current_thread] calling thread CPU, tracing on           {on_cpu:>9.0}");
        println!("  [current_thread] tracing cost per call (call path CPU)    {:>9.0} ns", on_cpu - off_cpu);
        // What the exporter threads (quiver's and the SDK's batch processor) spend per call:
        // the process's CPU time minus this thread's, across the calls and their export.
        exporter.flush();
        let (spans, dropped) = (quiver_telemetry::discarded_spans(), exporter.export().dropped());
        let (process, thread) = cpu_times();
        router_loop(traced, &s, &s.rt1, n);
        exporter.flush();
        let (process2, thread2) = cpu_times();
        let others = (process2 - process).saturating_sub(thread2 - thread);
        let dropped = exporter.export().dropped() - dropped;
        let spans = quiver_telemetry::discarded_spans() - spans;
        let exported = n - dropped;
        println!(
            "  [current_thread] exporter CPU per exported call          {:>9.0} ns",
            others.as_nanos() as f64 / exported.max(1) as f64
        );
        println!("  [current_thread] records dropped (queue full)            {dropped:>9} of {n}");
        println!(
            "  [current_thread] spans exported per exported call         {:>9.1}",
            spans as f64 / exported.max(1) as f64
        );
    }
}
