//! The one dispatch pipeline.

use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use quiver_abi::{Secrets, Status, ToolError, ToolResponse};
use quiver_catalog::{Access, Catalog, CatalogSource, META_TOOLS, Notice, RUN_TOOL, TOOL_SEARCH, ToolDef};
use quiver_telemetry::{
    CallEvent, Counters, Lane, Metrics, ToolCounters, TraceExport, TranscriptEvent, TranscriptRecord, TranscriptWriter,
};
use serde_json::{Map, Value, json};
use tokio::sync::Semaphore;
use tokio_util::either::Either;

use crate::breaker::Breaker;
use crate::codes::Code;
use crate::limits::Limits;
use crate::policy::{Joined, Step};
use crate::results::{Cut, READ_RESULT, READ_RESULT_DEFAULT_LEN, RESULT_URI_PREFIX, ResultStore, Truncation, fit};
use crate::stages::{CallContext, Ran, Rest, Target};
use crate::{Call, CallMeta, CallOutcome, Caller, RouterSettings, ToolNames, suggest};

/// Per-tool state that outlives catalog snapshots: keyed by (library sha256, plugin-local tool
/// name), so a hot swap to new bytes starts fresh (breaker, slots) while unrelated swaps keep
/// it; rate-limit buckets are carried over by exposed name even to new bytes ([`ToolState::limits`]).
pub(crate) struct ToolState {
    key: (String, String),
    /// The plugin's version, formatted once.
    pub(crate) version: String,
    /// `"tool_id":"<name>","tool_version":"<version>"`, escaped once for every request.
    pub(crate) request_tool: String,
    pub(crate) semaphore: Arc<Semaphore>,
    pub(crate) breaker: Breaker,
    pub(crate) counters: Arc<ToolCounters>,
    /// Rate-limit buckets; `None` when the tool is not limited. Shared with the state of the
    /// same exposed tool in the snapshot before, when a swap changed its bytes but not its
    /// limits: the buckets guard the service behind the tool, which a new release does not
    /// change, so a swap never hands a caller a fresh allowance.
    pub(crate) limits: Option<Arc<Limits>>,
    /// The limits `limits` was made for (the manifest's, overridden by the configuration).
    rate_config: quiver_manifest::RateLimits,
    /// The secrets the tool declares, with their values (empty for most tools); replaced when
    /// the operator's values change ([`Router::set_secrets`]).
    pub(crate) secrets: ArcSwap<Secrets>,
    /// Whether the tool's thread calls answer fast enough for callers to spin for the answer.
    pub(crate) spin: crate::pool::SpinHint,
}

/// The future of [`Router::call`] for a catalog tool: its first poll runs the call as far as it
/// goes without waiting ([`Router::pipeline_now`]), so an inline tool's call completes in that
/// poll and the future holds only the [`Call`]; a call that waits goes on in a boxed future.
struct Calling<'r> {
    router: &'r Router,
    /// The call, until the first poll.
    call: Option<Call>,
    /// The rest of a call that waits.
    waiting: Option<Waiting<'r>>,
}

/// A call that waits, going on from where [`Router::pipeline_now`] stopped.
type Waiting<'r> = std::pin::Pin<Box<dyn Future<Output = CallOutcome> + Send + 'r>>;

impl Future for Calling<'_> {
    type Output = CallOutcome;

    fn poll(self: std::pin::Pin<&mut Self>, task: &mut std::task::Context<'_>) -> std::task::Poll<CallOutcome> {
        let this = self.get_mut();
        if let Some(call) = this.call.take() {
            // The context stays in this frame: an inline call's outcome is taken out of it
            // (`Router::end` borrows it), not moved with it.
            let mut cx = this.router.context(call);
            match this.router.pipeline_now(&mut cx) {
                Ran::Done(result) => {
                    return std::task::Poll::Ready(
                        this.router.end(&mut cx, result.unwrap_or_else(ToolResponse::error)),
                    );
                }
                Ran::Wait(rest) => this.waiting = Some(this.router.resume(cx, rest)),
            }
        }
        let Some(rest) = &mut this.waiting else { panic!("a call's future was polled after it completed") };
        let outcome = std::task::ready!(rest.as_mut().poll(task));
        this.waiting = None;
        std::task::Poll::Ready(outcome)
    }
}

/// Plugin secrets per plugin id and name.
type PluginSecrets = std::collections::BTreeMap<String, std::collections::BTreeMap<String, quiver_manifest::Secret>>;

/// The values of the secrets `names` (those a tool declares) of plugin `plugin` in `all`.
fn secrets_of(all: &PluginSecrets, plugin: &str, names: &[String]) -> Secrets {
    let supplied = all.get(plugin);
    Secrets(names.iter().filter_map(|n| Some((n.clone(), supplied?.get(n)?.expose().to_owned()))).collect())
}

/// Tool states in the order of one catalog snapshot's tools.
struct ToolStates {
    catalog: Option<Arc<Catalog>>,
    by_tool: Vec<Arc<ToolState>>,
    /// Parallel to `by_tool`.
    names: Vec<Arc<ToolNames>>,
}

/// The router: every call, by any name and through any lane, takes [`Router::call`]'s pipeline.
/// `Send + Sync`; share it as `Arc<Router>`.
pub struct Router {
    source: Arc<dyn CatalogSource>,
    pub(crate) settings: RouterSettings,
    states: ArcSwap<ToolStates>,
    rebuild: Mutex<()>,
    pub(crate) global: Arc<Semaphore>,
    /// The threads that run thread-execution calls (as many as the host-wide slots).
    pub(crate) pool: crate::pool::Pool,
    pub(crate) counters: Counters,
    pub(crate) results: ResultStore,
    pub(crate) memory: crate::memory::MemoryStore,
    transcript: Option<TranscriptWriter>,
    /// Plugin secrets in force (starts as `settings.secrets`; [`Router::set_secrets`]).
    secrets: ArcSwap<PluginSecrets>,
    /// The monotonic clock's start (breaker times) and the wall-clock time of calls' starts.
    pub(crate) clock: crate::clock::WallClock,
    jitter: AtomicU64,
    /// Where calls' trace records go (`None`: traces are not exported).
    traces: Option<TraceExport>,
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Router").field("settings", &self.settings).finish_non_exhaustive()
    }
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

pub(crate) fn cancelled(tool: &str) -> ToolError {
    Code::Cancelled.error(format!("the call of `{tool}` was cancelled by the caller"))
}

fn invalid_at(pointer: &str, expected: &str, got: &str, hint: &str, message: String) -> ToolError {
    ToolError::invalid(message).with_details(json!({
        "errors": [{ "pointer": pointer, "keyword": "run_tool", "expected": expected, "got": got, "hint": hint }]
    }))
}

/// Splits `run_tool`'s arguments into the target name and its arguments; refuses meta tools.
fn envelope(args: Value) -> Result<(String, Value), ToolError> {
    let usage = "`run_tool` takes {\"name\": \"<tool name>\", \"arguments\": {...}}";
    let Value::Object(mut m) = args else {
        return Err(invalid_at(
            "",
            "an object",
            "another JSON value",
            "pass {\"name\": ..., \"arguments\": {...}}",
            format!("{usage}."),
        ));
    };
    let name = match m.remove("name") {
        Some(Value::String(s)) => s,
        Some(_) => {
            return Err(invalid_at(
                "/name",
                "string",
                "another JSON value",
                "put the tool's name in `name`",
                format!("{usage}; `name` must be a string."),
            ));
        }
        None => {
            return Err(invalid_at(
                "/name",
                "required property `name` (string)",
                "nothing (missing)",
                "add `name`",
                format!("{usage}; `name` is missing."),
            ));
        }
    };
    if META_TOOLS.contains(&name.as_str()) {
        return Err(invalid_at(
            "/name",
            "the name of a catalog tool",
            &format!("`{name}`"),
            &format!("call `{name}` directly"),
            format!(
                "`run_tool` runs catalog tools; it does not dispatch the meta tools (`run_tool`, `list_tools`, `tool_search`). Call `{name}` directly."
            ),
        ));
    }
    let arguments = match m.remove("arguments") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(v @ Value::Object(_)) => v,
        Some(_) => {
            return Err(invalid_at(
                "/arguments",
                "object",
                "another JSON value",
                "pass the tool's arguments as an object",
                format!("{usage}; `arguments` must be an object."),
            ));
        }
    };
    if let Some(k) = m.keys().next() {
        return Err(invalid_at(
            &format!("/{k}"),
            "only the properties `name`, `arguments`",
            &format!("unexpected property `{k}`"),
            &format!("remove `{k}` (put the tool's own arguments inside `arguments`)"),
            format!("{usage}; unexpected property `{k}`."),
        ));
    }
    Ok((name, arguments))
}

impl Router {
    /// A router over the catalogs `source` hands out. With `transcript_dir` set, a folder that
    /// cannot be created disables transcripts (logged as an error) rather than failing.
    pub fn new(source: Arc<dyn CatalogSource>, config: RouterSettings) -> Router {
        let transcript = config.transcript_dir.as_deref().and_then(|d| match TranscriptWriter::open(d) {
            Ok(w) => Some(w),
            Err(e) => {
                tracing::error!(dir = %d.display(), error = %e, "cannot open the transcript folder; calls will not be recorded");
                None
            }
        });
        let seed = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1);
        Router {
            source,
            global: Arc::new(Semaphore::new(config.max_concurrency.clamp(1, Semaphore::MAX_PERMITS))),
            pool: crate::pool::Pool::new(config.max_concurrency.clamp(1, Semaphore::MAX_PERMITS)),
            results: ResultStore::new(config.result_handle_ttl),
            memory: crate::memory::MemoryStore::default(),
            secrets: ArcSwap::from_pointee(config.secrets.clone()),
            settings: config,
            states: ArcSwap::from_pointee(ToolStates { catalog: None, by_tool: Vec::new(), names: Vec::new() }),
            rebuild: Mutex::new(()),
            counters: Counters::new(),
            transcript,
            clock: crate::clock::WallClock::new(),
            jitter: AtomicU64::new(seed),
            traces: None,
        }
    }

    /// The same router, with each call's trace (a span per call, a child per stage and per
    /// host-service round trip) handed to `export` (call before the first call).
    pub fn with_traces(mut self, export: TraceExport) -> Router {
        self.traces = Some(export);
        self
    }

    /// True when calls' traces are exported ([`Router::with_traces`]): only then is a client's
    /// `traceparent` worth passing in [`Call::trace_parent`].
    pub fn exports_traces(&self) -> bool {
        self.traces.is_some()
    }

    /// The same router, also feeding `metrics` (call before the first call).
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Router {
        self.counters = Counters::with_metrics(metrics);
        self
    }

    /// Replaces the plugin secrets (the operator rotated one: `quiver serve` reads them again on
    /// every rescan). Tools already in use get the new values from their next call on; nothing
    /// else about them (breaker, limits, counters) changes.
    pub fn set_secrets(&self, secrets: PluginSecrets) {
        let _lock = self.rebuild.lock().unwrap_or_else(|e| e.into_inner());
        self.secrets.store(Arc::new(secrets));
        let all = self.secrets.load();
        let states = self.states.load();
        if let Some(catalog) = &states.catalog {
            for (r, state) in catalog.tools().iter().zip(&states.by_tool) {
                let fresh = secrets_of(&all, &catalog.plugin_of(r).manifest.id, &catalog.def(r).spec.secrets);
                if **state.secrets.load() != fresh {
                    state.secrets.store(Arc::new(fresh));
                }
            }
        }
    }

    /// The Prometheus metrics this router feeds, when on.
    pub fn metrics(&self) -> Option<&Arc<Metrics>> {
        self.counters.metrics()
    }

    /// The settings in force.
    pub fn settings(&self) -> &RouterSettings {
        &self.settings
    }

    /// The router's counters.
    pub fn telemetry(&self) -> &Counters {
        &self.counters
    }

    /// Bytes `[offset, offset + len)` of a truncated result's full JSON text (ends moved back to
    /// character boundaries); `None` when the handle is unknown or expired.
    pub fn fetch_result(&self, handle: &str, offset: usize, len: usize) -> Option<String> {
        self.results.get(handle, offset, len)
    }

    /// A slice of a truncated result for the session that made it: its text (bytes
    /// `[offset, offset + len)`, ends moved back to character boundaries) and the full text's
    /// length; `None` when the handle is unknown, expired or another session's.
    pub fn read_result(&self, handle: &str, session_id: &str, offset: usize, len: usize) -> Option<(String, usize)> {
        self.results.get_for(handle, Some(session_id), offset, len)
    }

    /// `run_tool {"name": "quiver.read_result", "arguments": {"handle", "offset", "length"}}`.
    fn read_result_call(&self, caller: &Caller, arguments: &Value) -> Result<ToolResponse, ToolError> {
        let usage = "`quiver.read_result` takes {\"handle\": \"res-...\", \"offset\": 0, \"length\": 65536}";
        let Some(m) = arguments.as_object() else {
            return Err(invalid_at(
                "/arguments",
                "object",
                "another JSON value",
                "pass an object",
                format!("{usage}."),
            ));
        };
        if let Some(k) = m.keys().find(|k| !matches!(k.as_str(), "handle" | "offset" | "length")) {
            return Err(invalid_at(
                &format!("/arguments/{k}"),
                "only `handle`, `offset`, `length`",
                &format!("unexpected property `{k}`"),
                &format!("remove `{k}`"),
                format!("{usage}; unexpected property `{k}`."),
            ));
        }
        let handle = match m.get("handle") {
            Some(Value::String(h)) => h.as_str(),
            Some(_) => {
                return Err(invalid_at(
                    "/arguments/handle",
                    "string",
                    "another JSON value",
                    "pass the handle as a string",
                    format!("{usage}."),
                ));
            }
            None => {
                return Err(invalid_at(
                    "/arguments/handle",
                    "required property `handle` (string)",
                    "nothing (missing)",
                    "add `handle`",
                    format!("{usage}; `handle` is missing."),
                ));
            }
        };
        let number = |key: &str, default: usize, min: u64, max: u64| -> Result<usize, ToolError> {
            match m.get(key) {
                None | Some(Value::Null) => Ok(default),
                Some(v) => match v.as_u64().filter(|n| (min..=max).contains(n)) {
                    Some(n) => Ok(n as usize),
                    None => Err(invalid_at(
                        &format!("/arguments/{key}"),
                        &format!("an integer from {min} to {max}"),
                        &v.to_string().chars().take(40).collect::<String>(),
                        &format!("pass `{key}` between {min} and {max}"),
                        format!("{usage}; `{key}` must be an integer from {min} to {max}."),
                    )),
                },
            }
        };
        let offset = number("offset", 0, 0, u64::MAX >> 1)?;
        let length = number("length", READ_RESULT_DEFAULT_LEN, 1, READ_RESULT_DEFAULT_LEN as u64)?;
        let Some((text, total)) = self.read_result(handle, &caller.session_id, offset, length) else {
            return Err(invalid_at(
                "/arguments/handle",
                "the handle of a result of this session that has not expired",
                &format!("`{}`", handle.chars().take(64).collect::<String>()),
                "call the tool again for a fresh result",
                "unknown or expired result handle; results are kept for a limited time and only for the session that made them. Call the tool again.".to_owned(),
            ));
        };
        let start = offset.min(total);
        let end = start + text.len();
        let next = if end < total { json!(end) } else { Value::Null };
        Ok(ToolResponse::ok(json!({
            "handle": handle,
            "offset": start,
            "length": text.len(),
            "total_bytes": total,
            "next_offset": next,
            "text": text,
        })))
    }

    /// A surface was sent to a client (`tools/list`): counted, and written to the session's
    /// transcript when transcripts are on.
    pub fn record_surface(&self, caller: &Caller, n_typed: usize, n_total: usize, bytes: usize) {
        self.counters.record_surface(n_typed, n_total);
        if let Some(m) = self.counters.metrics() {
            // `mode` is the session's profile name, from the configuration (bounded).
            m.surface(&caller.mode, bytes);
        }
        if let Some(w) = &self.transcript {
            w.event(TranscriptEvent {
                format: quiver_telemetry::TRANSCRIPT_FORMAT,
                event: "surface".into(),
                at_ms: now_ms(),
                session_id: caller.session_id.clone(),
                client: caller.client.clone(),
                tool: None,
                ok: None,
                typed: Some(n_typed as u64),
                total: Some(n_total as u64),
                bytes: Some(bytes as u64),
            });
        }
    }

    /// A meta tool the MCP layer serves itself (`tool_search`, `list_tools`) was called:
    /// counted, and written to the session's transcript when transcripts are on.
    pub fn record_meta_call(&self, caller: &Caller, tool: &str, ok: bool) {
        match tool {
            TOOL_SEARCH => self.counters.record_tool_search(ok),
            _ => self.counters.record_list_tools(),
        }
        if let Some(w) = &self.transcript {
            w.event(TranscriptEvent {
                format: quiver_telemetry::TRANSCRIPT_FORMAT,
                event: "meta_call".into(),
                at_ms: now_ms(),
                session_id: caller.session_id.clone(),
                client: caller.client.clone(),
                tool: Some(tool.to_owned()),
                ok: Some(ok),
                typed: None,
                total: None,
                bytes: None,
            });
        }
    }

    /// The transcript file of a session, when transcripts are on.
    pub fn transcript_path(&self, session_id: &str) -> Option<PathBuf> {
        self.transcript.as_ref().map(|w| w.path_for(session_id))
    }

    /// Waits until every call finished so far is written to its transcript.
    pub fn flush_transcripts(&self) {
        if let Some(w) = &self.transcript {
            w.flush();
        }
    }

    /// The catalog snapshot calls resolve against now.
    pub(crate) fn catalog_now(&self) -> Arc<Catalog> {
        self.source.catalog()
    }

    /// Runs one call through the pipeline: resolve → visibility and scopes → argument
    /// validation → approval → circuit breaker → concurrency limits → invocation with a deadline
    /// (retrying retryable errors) → output validation → result-size limit → notice →
    /// telemetry and transcript. A call named `run_tool` is handed to [`Router::run_tool`].
    /// Nothing runs before the future is first polled; a call that needs no wait ends in that
    /// poll.
    pub fn call(&self, call: Call) -> impl Future<Output = CallOutcome> + Send + '_ {
        if call.name == RUN_TOOL {
            return Either::Left(Box::pin(self.run_tool(call)));
        }
        Either::Right(Calling { router: self, call: Some(call), waiting: None })
    }

    /// The generic lane: `arguments` is `{"name": ..., "arguments": {...}}`. Refuses to
    /// dispatch `run_tool`, `list_tools` or `tool_search`, then runs the named tool through the
    /// same pipeline as [`Router::call`], with lane `Generic`.
    pub async fn run_tool(&self, mut call: Call) -> CallOutcome {
        self.counters.record_run_tool();
        let recorded = self.transcript.is_some().then(|| call.arguments.clone());
        call.lane = Lane::Generic;
        match envelope(std::mem::take(&mut call.arguments)) {
            Ok((name, arguments)) if name == READ_RESULT => {
                call.name = name;
                // Recorded as every generic call is: the name passed and its arguments (what
                // `quiver replay` sends through `run_tool` again), not the envelope.
                let recorded = recorded.map(|_| arguments.clone());
                let mut cx = CallContext::new(call, recorded, &self.clock);
                cx.step(Step::RunToolReadResult);
                let response = self.read_result_call(&cx.caller, &arguments).unwrap_or_else(ToolResponse::error);
                self.finish(&mut cx, response)
            }
            Ok((name, arguments)) => {
                call.name = name;
                call.arguments = arguments;
                let cx = self.context(call);
                self.run(cx).await
            }
            Err(e) => {
                self.counters.record_run_tool_invalid();
                call.name = RUN_TOOL.to_owned();
                let mut cx = CallContext::new(call, recorded, &self.clock);
                cx.step(Step::RunToolRefused);
                self.finish(&mut cx, ToolResponse::error(e))
            }
        }
    }

    /// The context of a call through the pipeline, with its trace record when traces
    /// are exported.
    #[inline]
    fn context(&self, mut call: Call) -> CallContext {
        let recorded = self.transcript.is_some().then(|| call.arguments.clone());
        let parent = call.trace_parent.take();
        let mut cx = CallContext::new(call, recorded, &self.clock);
        // Trace export: the call's record (`traced.rs`; none when traces are off).
        if self.traces.is_some() {
            crate::traced::start(&mut cx, parent);
        }
        cx
    }

    /// The rest of a call that waits, from where [`Router::pipeline_now`] stopped, then
    /// telemetry and the transcript.
    fn resume(&self, mut cx: CallContext, rest: Rest) -> Waiting<'_> {
        Box::pin(async move {
            let result = self.pipeline_rest(&mut cx, rest).await;
            self.end(&mut cx, result.unwrap_or_else(ToolResponse::error))
        })
    }

    /// One call through the pipeline, then telemetry and the transcript, waiting when the
    /// call waits.
    async fn run(&self, mut cx: CallContext) -> CallOutcome {
        match self.pipeline_now(&mut cx) {
            Ran::Done(result) => self.end(&mut cx, result.unwrap_or_else(ToolResponse::error)),
            Ran::Wait(rest) => self.resume(cx, rest).await,
        }
    }

    /// The end of a call through the pipeline: its trace, telemetry and transcript. The
    /// outcome's parts are taken out of `cx`.
    fn end(&self, cx: &mut CallContext, response: ToolResponse) -> CallOutcome {
        if let (Some(export), Some(trace)) = (&self.traces, cx.trace.take()) {
            crate::traced::finish(export, *trace, cx, &response);
        }
        self.finish(cx, response)
    }

    /// Telemetry and the transcript line of a finished call; the outcome's parts are taken
    /// out of `cx`.
    fn finish(&self, cx: &mut CallContext, response: ToolResponse) -> CallOutcome {
        let meta = &mut cx.meta;
        let (caller, confirmed, started_at_ms) = (&cx.caller, cx.confirmed, cx.started_at_ms);
        let tool_counters = &cx.tool_counters;
        meta.duration = match cx.answered {
            Some(at) => at.saturating_duration_since(cx.started),
            None => cx.started.elapsed(),
        };
        self.counters.record_call(&CallEvent {
            request_id: &meta.request_id,
            called_name: &meta.called_name,
            tool: meta.tool(),
            plugin: meta.plugin(),
            version: meta.plugin_version(),
            lane: meta.lane,
            status: response.status,
            error_code: response.error.as_ref().map(|e| e.code.as_str()),
            duration: meta.duration,
            retries: meta.retries,
            policy: &Joined(&meta.policy),
            tool_counters: tool_counters.as_deref(),
            action: meta.action.as_deref(),
        });
        if let (Some(w), Some(arguments)) = (&self.transcript, cx.recorded.take()) {
            w.record(TranscriptRecord {
                format: quiver_telemetry::TRANSCRIPT_FORMAT,
                request_id: meta.request_id.clone(),
                started_at_ms,
                duration_us: meta.duration.as_micros() as u64,
                session_id: caller.session_id.clone(),
                client: caller.client.clone(),
                lane: meta.lane,
                called_name: meta.called_name.clone(),
                arguments,
                confirmed,
                tool: meta.tool().map(str::to_owned),
                action: meta.action.clone(),
                plugin: meta.plugin().map(str::to_owned),
                plugin_version: meta.plugin_version().map(str::to_owned),
                sha256: meta.sha256().map(str::to_owned),
                lifecycle_state: meta.lifecycle_state.map(|s| s.as_str().to_owned()),
                notice: meta.notice.as_ref().and_then(|n| serde_json::to_value(n).ok()),
                policy: meta.policy.iter().map(|p| p.to_string()).collect(),
                retries: meta.retries,
                result_handle: meta.result_handle.clone(),
                response: response.clone(),
            });
        }
        let meta = std::mem::replace(meta, CallMeta::new(String::new(), String::new(), meta.lane));
        CallOutcome { response, meta, outputs_text: cx.outputs_text.take() }
    }

    pub(crate) fn now_ns(&self) -> u64 {
        self.clock.epoch().elapsed().as_nanos() as u64
    }

    /// A uniform number in `[0, 1)` (splitmix64 over an atomic counter; jitter only).
    fn random(&self) -> f64 {
        let mut x = self.jitter.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed);
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        x ^= x >> 31;
        (x >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Delay before retry `n` (0-based): `retry_base * 2^n`, drawn from `[d/2, d]`.
    pub(crate) fn backoff(&self, n: u32) -> Duration {
        let d = self.settings.retry_base.saturating_mul(1u32 << n.min(16)).min(Duration::from_secs(60));
        d / 2 + d.mul_f64(0.5 * self.random())
    }

    /// The state of tool `index` of `catalog`, rebuilding the per-tool map when the snapshot
    /// changed (under a lock taken only then).
    pub(crate) fn tool_state(&self, catalog: &Arc<Catalog>, index: usize) -> (Arc<ToolState>, Arc<ToolNames>) {
        {
            let g = self.states.load();
            if g.catalog.as_ref().is_some_and(|c| Arc::ptr_eq(c, catalog)) {
                return (g.by_tool[index].clone(), g.names[index].clone());
            }
        }
        let _lock = self.rebuild.lock().unwrap_or_else(|e| e.into_inner());
        let old = self.states.load_full();
        if old.catalog.as_ref().is_some_and(|c| Arc::ptr_eq(c, catalog)) {
            return (old.by_tool[index].clone(), old.names[index].clone());
        }
        let by_tool: Vec<Arc<ToolState>> = catalog
            .tools()
            .iter()
            .map(|r| {
                let plugin = catalog.plugin_of(r);
                let def = catalog.def(r);
                let key = (plugin.provenance.sha256.clone(), def.spec.name.clone());
                old.by_tool.iter().find(|s| s.key == key).cloned().unwrap_or_else(|| {
                    let manifest = def.policies.rate_limit;
                    let rate_config = match self.settings.rate_limits.get(&r.name) {
                        Some(over) => manifest.overridden_by(over),
                        None => manifest,
                    };
                    // The buckets of the same exposed tool before the swap, if its limits held.
                    let kept = old
                        .names
                        .iter()
                        .zip(&old.by_tool)
                        .find(|(n, s)| *n.tool == *r.name && s.rate_config == rate_config)
                        .and_then(|(_, s)| s.limits.clone());
                    let version = plugin.manifest.version.to_string();
                    let request_tool = format!(
                        "\"tool_id\":{},\"tool_version\":{}",
                        Value::from(def.spec.name.as_str()),
                        Value::from(version.as_str())
                    );
                    Arc::new(ToolState {
                        key,
                        version,
                        request_tool,
                        semaphore: Arc::new(Semaphore::new(tool_slots(
                            def.policies.max_concurrency,
                            self.settings.max_concurrency,
                        ))),
                        breaker: Breaker::default(),
                        spin: crate::pool::SpinHint::default(),
                        secrets: ArcSwap::from_pointee(secrets_of(
                            &self.secrets.load(),
                            &plugin.manifest.id,
                            &def.spec.secrets,
                        )),
                        limits: kept.or_else(|| Limits::new(&rate_config).map(Arc::new)),
                        rate_config,
                        counters: {
                            let actions: Vec<&str> = def.spec.actions.iter().map(|a| a.name.as_str()).collect();
                            self.counters.tool(&r.name, &actions)
                        },
                    })
                })
            })
            .collect();
        let names: Vec<Arc<ToolNames>> = catalog
            .tools()
            .iter()
            .zip(&by_tool)
            .map(|(r, state)| {
                let plugin = catalog.plugin_of(r);
                Arc::new(ToolNames {
                    tool: Arc::from(r.name.as_str()),
                    plugin: Arc::from(plugin.manifest.id.as_str()),
                    plugin_version: Arc::from(state.version.as_str()),
                    signer_key_id: plugin.provenance.signer_key_id.as_deref().map(Arc::from),
                    sha256: Arc::from(plugin.provenance.sha256.as_str()),
                })
            })
            .collect();
        let state = (by_tool[index].clone(), names[index].clone());
        self.states.store(Arc::new(ToolStates { catalog: Some(catalog.clone()), by_tool, names }));
        state
    }

    /// `searches`: the session offers `tool_search` (else the message says its tool list is
    /// complete instead of pointing at a tool it does not have).
    pub(crate) fn unknown_tool(catalog: &Catalog, access: &Access, name: &str, searches: bool) -> ToolError {
        // A name is echoed back at most 64 characters long (a client may send megabytes), and
        // one that long is like no tool name (they are short): no suggestions to compute.
        const ECHO: usize = 64;
        let suggestions = if name.len() <= 4 * ECHO { suggest::closest(catalog, access, name, 3) } else { Vec::new() };
        let shown = if name.chars().count() <= ECHO {
            name.to_owned()
        } else {
            format!("{}... ({} bytes)", name.chars().take(ECHO).collect::<String>(), name.len())
        };
        let mut message = format!("no tool named `{shown}` is available");
        if !suggestions.is_empty() {
            let list: Vec<String> = suggestions.iter().map(|s| format!("`{s}`")).collect();
            message.push_str(&format!("; did you mean {}?", list.join(", ")));
        } else {
            message.push('.');
        }
        if !searches {
            message.push_str(" This session's tool list shows every tool it may call.");
            return Code::UnknownTool.error(message).with_details(json!({ "suggestions": suggestions }));
        }
        message.push_str(&format!(" Use `{TOOL_SEARCH}` with a few words about the task to find the right tool."));
        Code::UnknownTool.error(message).with_details(json!({ "suggestions": suggestions, "search_tool": TOOL_SEARCH }))
    }

    /// Drops a notice's replacement (and its action) when the caller may not see it or it
    /// cannot be called: a notice never names a tool outside the caller's scopes or gates.
    pub(crate) fn hide_unseen_replacement(catalog: &Catalog, access: &Access, n: &mut Notice) {
        if let Some(rep) = &n.replacement
            && !catalog.resolve(rep).is_some_and(|r| access.may_see(&r.tool.name, r.def) && r.state.is_dispatchable())
        {
            n.replacement = None;
            n.action = None;
        }
    }

    pub(crate) fn removed(catalog: &Catalog, access: &Access, notice: &Notice) -> ToolError {
        let mut n = notice.clone();
        Self::hide_unseen_replacement(catalog, access, &mut n);
        Code::ToolRemoved.error(n.message()).with_details(json!({
            "replacement": n.replacement,
            "action": n.action,
            "removed_in_version": n.removed_in_version.as_ref().map(|v| v.to_string()),
            "search_tool": TOOL_SEARCH,
        }))
    }

    /// Cuts a result over `max` bytes down to fit, keeping the tool's shape: the largest string
    /// and array values of `outputs` are shortened (strings end with a marker naming the handle)
    /// until the JSON fits, and the cut output is checked against the output schema. When no cut
    /// fits or matches the schema, no structured output is sent: `outputs` becomes null and a
    /// text preview of the JSON goes in `content`. Either way the status is `partial`, the full
    /// text is kept under a handle for `result_handle_ttl` (for this session only), and
    /// [`CallMeta::truncation`] says what was done.
    pub(crate) fn limit_size(
        &self,
        cx: &mut CallContext,
        target: &Target<'_>,
        response: &mut ToolResponse,
        raw_len: usize,
    ) {
        let def = target.def();
        let max = def.policies.max_result_bytes;
        if max == 0 || response.status == Status::Error || raw_len as u64 <= max {
            return;
        }
        let Ok(text) = serde_json::to_string(&response.outputs) else { return };
        if text.len() as u64 <= max {
            return;
        }
        let max = max as usize;
        let handle = format!("res-{}", cx.meta.request_id);
        let uri = format!("{RESULT_URI_PREFIX}{handle}");
        let total = text.len();
        let mut cut = response.outputs.clone();
        let has_output_schema =
            def.output_schema.as_deref().is_some_and(|s| s.get("type").and_then(Value::as_str) == Some("object"));
        let (structured, reason, cuts) = shorten(&mut cut, def, max, &uri);
        let shown;
        if structured {
            shown = serde_json::to_vec(&cut).map(|b| b.len()).unwrap_or(0);
            response.outputs = cut;
            response.observations.push(format!(
                "The result is {total} bytes, over this tool's limit of {max}; its longest values were shortened (each ends with a note saying how much was cut). Read the full result as resource {uri}, or with run_tool {{\"name\": \"{READ_RESULT}\", \"arguments\": {{\"handle\": \"{handle}\", \"offset\": 0, \"length\": {max}}}}}, for a limited time."
            ));
        } else {
            let mut end = max.min(total);
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            shown = end;
            response.outputs = Value::Null;
            response.content.push(json!({ "type": "text", "text": &text[..end] }));
            response.observations.push(format!(
                "The result is {total} bytes, over this tool's limit of {max}, and could not be shortened to fit its output schema; above are its first {end} bytes of JSON. Read the full result as resource {uri}, or with run_tool {{\"name\": \"{READ_RESULT}\", \"arguments\": {{\"handle\": \"{handle}\", \"offset\": {end}, \"length\": {max}}}}}, for a limited time."
            ));
        }
        response.status = Status::Partial;
        self.results.insert(handle.clone(), &cx.caller.session_id, text);
        cx.meta.truncation = Some(Box::new(Truncation {
            handle: handle.clone(),
            uri,
            total_bytes: total,
            shown_bytes: shown,
            limit_bytes: max,
            structured,
            reason,
            has_output_schema,
            cuts,
        }));
        cx.meta.result_handle = Some(handle);
        cx.step(Step::ResultTruncated);
        if !structured {
            cx.step(Step::ResultUnstructured);
        }
    }
}

/// Shortens `cut` (a copy of the outputs) to fit `max` bytes: whether the cut output can be sent
/// as structured output, why not, and what was cut.
fn shorten(cut: &mut Value, def: &ToolDef, max: usize, uri: &str) -> (bool, Option<String>, Vec<Cut>) {
    let marker = |n: usize| format!("… [{n} more bytes cut; the full result is at {uri}]");
    let Some(cuts) = fit(cut, max, &marker) else {
        return (
            false,
            Some(format!("no shortening of its strings and arrays brings the output under {max} bytes")),
            Vec::new(),
        );
    };
    match def.output_validator.as_ref().map(|v| v.get()) {
        Some(Err(e)) => (false, Some(format!("the output schema does not compile ({e})")), Vec::new()),
        Some(Ok(v)) if !v.is_valid(cut) => {
            let why = v
                .iter_errors(cut)
                .next()
                .map(|e| format!("`{}` at `{}`", e.kind().keyword(), e.instance_path().as_str()))
                .unwrap_or_default();
            (false, Some(format!("the shortened output no longer matches the output schema ({why})")), Vec::new())
        }
        _ => (true, None, cuts),
    }
}

/// A tool's concurrency slots: what its manifest asks for, but never more than three quarters of
/// the host's slots, so one slow tool cannot take every slot.
fn tool_slots(requested: u32, host: usize) -> usize {
    let host = host.clamp(1, Semaphore::MAX_PERMITS);
    let cap = (host - host / 4).max(1);
    (requested as usize).clamp(1, cap)
}

#[cfg(test)]
mod tests {
    use quiver_abi::ErrorCode;

    use super::*;

    /// The metrics' fixed meta-tool labels are the catalog's meta tools (telemetry does not
    /// depend on the catalog, so the list is written twice).
    #[test]
    fn telemetry_labels_the_catalogs_meta_tools() {
        assert_eq!(quiver_telemetry::META_TOOLS, META_TOOLS);
    }

    #[test]
    fn envelope_accepts_name_and_arguments_and_guards_meta_tools() {
        let (n, a) = envelope(json!({"name": "echo", "arguments": {"text": "x"}})).unwrap();
        assert_eq!((n.as_str(), a), ("echo", json!({"text": "x"})));
        let (_, a) = envelope(json!({"name": "echo"})).unwrap();
        assert_eq!(a, json!({}));
        for meta in META_TOOLS {
            let e = envelope(json!({"name": meta, "arguments": {}})).unwrap_err();
            assert_eq!(e.code, ErrorCode::INVALID_ARGUMENTS);
            assert_eq!(e.details["errors"][0]["pointer"], "/name");
            assert!(e.message.contains("does not dispatch"), "{}", e.message);
        }
        assert_eq!(envelope(json!({"arguments": {}})).unwrap_err().details["errors"][0]["pointer"], "/name");
        assert_eq!(
            envelope(json!({"name": "x", "arguments": 3})).unwrap_err().details["errors"][0]["pointer"],
            "/arguments"
        );
        assert_eq!(envelope(json!({"name": "x", "text": "y"})).unwrap_err().details["errors"][0]["pointer"], "/text");
        assert_eq!(envelope(json!([1])).unwrap_err().details["errors"][0]["pointer"], "");
    }

    #[test]
    fn backoff_doubles_with_jitter() {
        let r = Router::new(
            Arc::new(Arc::new(Catalog::empty())),
            RouterSettings { retry_base: Duration::from_millis(100), ..Default::default() },
        );
        for n in 0..4u32 {
            let full = Duration::from_millis(100 * (1 << n));
            for _ in 0..50 {
                let d = r.backoff(n);
                assert!(d >= full / 2 && d <= full, "retry {n}: {d:?}");
            }
        }
    }
}
