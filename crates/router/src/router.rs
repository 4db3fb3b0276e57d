//! The one dispatch pipeline.

use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use quiver_abi::{ErrorCode, Secrets, Status, ToolError, ToolResponse};
use quiver_catalog::{
    AbortReason, Access, Catalog, CatalogSource, Dispatch, META_TOOLS, Notice, PluginEntry, RUN_TOOL, RemoteCall,
    TOOL_SEARCH, ToolDef,
};
use quiver_telemetry::{
    BreakerState, CallEvent, Counters, Lane, Metrics, ToolCounters, TranscriptEvent, TranscriptRecord,
    TranscriptWriter, next_request_id,
};
use serde::Serialize;
use serde_json::{Map, Value, json};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::breaker::{Admission, Breaker, Verdict};
use crate::limits::{self, Limits};
use crate::results::{READ_RESULT, READ_RESULT_DEFAULT_LEN, RESULT_URI_PREFIX, ResultStore, Truncation, fit};
use crate::sink::{AbandonOnDrop, RouterSink};
use crate::{Approval, Call, CallMeta, CallOutcome, Caller, ClientBridge, RouterSettings, codes, suggest, validate};

/// The JSON of a [`quiver_abi::ToolRequest`], written from borrowed parts (no copies of the
/// arguments or the caller's strings on the call path). Field for field the same wire format;
/// the integration tests parse what the router sends back into `ToolRequest` and check it
/// against `schemas/tool-request.schema.json`.
#[derive(Serialize)]
struct RequestView<'a> {
    request_id: &'a str,
    tool_id: &'a str,
    tool_version: &'a str,
    timestamp: u64,
    agent_context: AgentView<'a>,
    inputs: &'a Value,
    invocation_policies: PoliciesView<'a>,
    #[serde(skip_serializing_if = "Value::is_null")]
    config: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    memory_snippet: Option<String>,
    #[serde(skip_serializing_if = "Secrets::is_empty")]
    secrets: &'a Secrets,
}

#[derive(Serialize)]
struct AgentView<'a> {
    session_id: &'a str,
    client: &'a str,
    mode: &'a str,
    scopes: &'a [String],
}

#[derive(Serialize)]
struct PoliciesView<'a> {
    timeout_ms: u64,
    max_result_bytes: u64,
    confirmed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    action: Option<&'a str>,
}

/// Per-tool state that outlives catalog snapshots: keyed by (library sha256, plugin-local tool
/// name), so a hot swap to new bytes starts fresh while unrelated swaps keep breakers and limits.
pub(crate) struct ToolState {
    key: (String, String),
    /// The plugin's version, formatted once.
    version: String,
    semaphore: Arc<Semaphore>,
    breaker: Breaker,
    counters: Arc<ToolCounters>,
    /// Rate-limit buckets; `None` when the tool is not limited.
    limits: Option<Limits>,
    /// The secrets the tool declares, with their values (empty for most tools); replaced when
    /// the operator's values change ([`Router::set_secrets`]).
    secrets: ArcSwap<Secrets>,
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
}

/// The router: every call, by any name and through any lane, takes [`Router::call`]'s pipeline.
/// `Send + Sync`; share it as `Arc<Router>`.
pub struct Router {
    source: Arc<dyn CatalogSource>,
    settings: RouterSettings,
    states: ArcSwap<ToolStates>,
    rebuild: Mutex<()>,
    global: Arc<Semaphore>,
    counters: Counters,
    results: ResultStore,
    memory: crate::memory::MemoryStore,
    transcript: Option<TranscriptWriter>,
    /// Plugin secrets in force (starts as `settings.secrets`; [`Router::set_secrets`]).
    secrets: ArcSwap<PluginSecrets>,
    epoch: Instant,
    jitter: AtomicU64,
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Router").field("settings", &self.settings).finish_non_exhaustive()
    }
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

fn cancelled(tool: &str) -> ToolError {
    ToolError::new(ErrorCode::CANCELLED, format!("the call of `{tool}` was cancelled by the caller"))
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
                "`run_tool` runs catalog tools; it does not dispatch `{name}` (nor `run_tool`, `list_tools` or `tool_search`). Call `{name}` directly."
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

/// Releases a half-open breaker's probe slot without a verdict when dropped armed.
struct ProbeRelease<'a> {
    breaker: &'a Breaker,
    armed: bool,
}

impl Drop for ProbeRelease<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.breaker.record(Admission::Probe, Verdict::Neutral, || 0, 0);
        }
    }
}

/// A cheap guess of the serialized size of the arguments (to size the request buffer once).
fn args_len_hint(args: &Value) -> usize {
    match args {
        Value::Object(m) => m.len() * 32,
        _ => 16,
    }
}

fn verdict(result: &Result<(ToolResponse, usize), ToolError>) -> Verdict {
    let code = match result {
        Ok((r, _)) if r.status != Status::Error => return Verdict::Success,
        Ok((r, _)) => r.error.as_ref().map(|e| e.code.as_str()).unwrap_or(ErrorCode::TOOL_ERROR),
        Err(e) => e.code.as_str(),
    };
    match code {
        ErrorCode::CANCELLED => Verdict::Neutral,
        // The tool worked; the request was wrong.
        ErrorCode::INVALID_ARGUMENTS | ErrorCode::NOT_FOUND | ErrorCode::PERMISSION_DENIED => Verdict::Success,
        _ => Verdict::Failure,
    }
}

async fn acquire(
    sem: &Arc<Semaphore>,
    deadline: Instant,
    cancel: &CancellationToken,
    tool: &str,
    what: &str,
) -> Result<OwnedSemaphorePermit, ToolError> {
    if let Ok(p) = sem.clone().try_acquire_owned() {
        return Ok(p);
    }
    tokio::select! {
        biased;
        _ = cancel.cancelled() => Err(cancelled(tool)),
        p = sem.clone().acquire_owned() => p.map_err(|_| ToolError::new(ErrorCode::PROTOCOL, "the router is shutting down")),
        _ = tokio::time::sleep_until(deadline.into()) => Err(ToolError::new(
            ErrorCode::TIMEOUT,
            format!("`{tool}` did not start before its deadline: {what} stayed busy. Try again later."),
        ).retryable()),
    }
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
            results: ResultStore::new(config.result_handle_ttl),
            memory: crate::memory::MemoryStore::default(),
            secrets: ArcSwap::from_pointee(config.secrets.clone()),
            settings: config,
            states: ArcSwap::from_pointee(ToolStates { catalog: None, by_tool: Vec::new() }),
            rebuild: Mutex::new(()),
            counters: Counters::new(),
            transcript,
            epoch: Instant::now(),
            jitter: AtomicU64::new(seed),
        }
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

    /// Runs one call through the pipeline: resolve → visibility and scopes → argument
    /// validation → approval → circuit breaker → concurrency limits → invocation with a deadline
    /// (retrying retryable errors) → output validation → result-size limit → notice →
    /// telemetry and transcript. A call named `run_tool` is handed to [`Router::run_tool`].
    /// The catalog snapshot calls resolve against now.
    pub(crate) fn catalog_now(&self) -> Arc<Catalog> {
        self.source.catalog()
    }

    pub async fn call(&self, call: Call) -> CallOutcome {
        // Boxed: the pipeline's state is large, and an unboxed future would be copied whole
        // each time a caller's task is spawned or moved.
        if call.name == RUN_TOOL {
            return Box::pin(self.run_tool(call)).await;
        }
        Box::pin(self.dispatch(call)).await
    }

    /// The generic lane: `arguments` is `{"name": ..., "arguments": {...}}`. Refuses to
    /// dispatch `run_tool`, `list_tools` or `tool_search`, then runs the named tool through the
    /// same pipeline as [`Router::call`], with lane `Generic`.
    pub async fn run_tool(&self, call: Call) -> CallOutcome {
        self.counters.record_run_tool();
        let Call { arguments, caller, request_id, confirmed, cancel, bridge, config, .. } = call;
        let recorded = self.transcript.is_some().then(|| arguments.clone());
        match envelope(arguments) {
            Ok((name, arguments)) if name == READ_RESULT => {
                let started = Instant::now();
                let mut meta = CallMeta::new(request_id.unwrap_or_else(next_request_id), name, Lane::Generic);
                meta.policy.push(Cow::Borrowed("run_tool:read_result"));
                let response = self.read_result_call(&caller, &arguments).unwrap_or_else(ToolResponse::error);
                self.finish(meta, response, started, now_ms(), None, &caller, confirmed, recorded)
            }
            Ok((name, arguments)) => {
                self.dispatch(Call {
                    name,
                    arguments,
                    lane: Lane::Generic,
                    caller,
                    request_id,
                    confirmed,
                    cancel,
                    bridge,
                    config,
                })
                .await
            }
            Err(e) => {
                self.counters.record_run_tool_invalid();
                let started = Instant::now();
                let mut meta =
                    CallMeta::new(request_id.unwrap_or_else(next_request_id), RUN_TOOL.to_owned(), Lane::Generic);
                meta.policy.push(Cow::Borrowed("run_tool:refused"));
                self.finish(meta, ToolResponse::error(e), started, now_ms(), None, &caller, confirmed, recorded)
            }
        }
    }

    async fn dispatch(&self, call: Call) -> CallOutcome {
        let started = Instant::now();
        let started_at_ms = now_ms();
        let Call { name, arguments, lane, caller, request_id, confirmed, cancel, bridge, config } = call;
        let recorded = self.transcript.is_some().then(|| arguments.clone());
        let mut meta = CallMeta::new(request_id.unwrap_or_else(next_request_id), name, lane);
        let mut tool_counters = None;
        // Trace export: the call's span (free when traces are off); attributes never hold
        // argument values or secrets.
        let span = crate::traced::call_span(lane);
        let bridge = crate::traced::bridge(bridge, &span);
        let result = self
            .pipeline(
                &mut meta,
                &mut tool_counters,
                arguments,
                config,
                &caller,
                confirmed,
                &cancel,
                &bridge,
                started_at_ms,
            )
            .instrument(span.clone())
            .await;
        let response = result.unwrap_or_else(ToolResponse::error);
        crate::traced::record_outcome(&span, &meta, &response);
        self.finish(meta, response, started, started_at_ms, tool_counters.as_deref(), &caller, confirmed, recorded)
    }

    #[allow(clippy::too_many_arguments)]
    fn finish(
        &self,
        mut meta: CallMeta,
        response: ToolResponse,
        started: Instant,
        started_at_ms: u64,
        tool_counters: Option<&ToolCounters>,
        caller: &Caller,
        confirmed: bool,
        recorded: Option<Value>,
    ) -> CallOutcome {
        meta.duration = started.elapsed();
        self.counters.record_call(&CallEvent {
            request_id: &meta.request_id,
            called_name: &meta.called_name,
            tool: meta.tool.as_deref(),
            plugin: meta.plugin.as_deref(),
            version: meta.plugin_version.as_deref(),
            lane: meta.lane,
            status: response.status,
            error_code: response.error.as_ref().map(|e| e.code.as_str()),
            duration: meta.duration,
            retries: meta.retries,
            policy: &meta.policy,
            tool_counters,
            action: meta.action.as_deref(),
        });
        if let (Some(w), Some(arguments)) = (&self.transcript, recorded) {
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
                tool: meta.tool.clone(),
                action: meta.action.clone(),
                plugin: meta.plugin.clone(),
                plugin_version: meta.plugin_version.clone(),
                sha256: meta.sha256.clone(),
                lifecycle_state: meta.lifecycle_state.map(|s| s.as_str().to_owned()),
                notice: meta.notice.as_ref().and_then(|n| serde_json::to_value(n).ok()),
                policy: meta.policy.iter().map(|p| p.to_string()).collect(),
                retries: meta.retries,
                result_handle: meta.result_handle.clone(),
                response: response.clone(),
            });
        }
        CallOutcome { response, meta }
    }

    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
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
    fn backoff(&self, n: u32) -> Duration {
        let d = self.settings.retry_base.saturating_mul(1u32 << n.min(16)).min(Duration::from_secs(60));
        d / 2 + d.mul_f64(0.5 * self.random())
    }

    /// The state of tool `index` of `catalog`, rebuilding the per-tool map when the snapshot
    /// changed (under a lock taken only then).
    fn tool_state(&self, catalog: &Arc<Catalog>, index: usize) -> Arc<ToolState> {
        {
            let g = self.states.load();
            if g.catalog.as_ref().is_some_and(|c| Arc::ptr_eq(c, catalog)) {
                return g.by_tool[index].clone();
            }
        }
        let _lock = self.rebuild.lock().unwrap_or_else(|e| e.into_inner());
        let old = self.states.load_full();
        if old.catalog.as_ref().is_some_and(|c| Arc::ptr_eq(c, catalog)) {
            return old.by_tool[index].clone();
        }
        let by_tool: Vec<Arc<ToolState>> = catalog
            .tools()
            .iter()
            .map(|r| {
                let plugin = catalog.plugin_of(r);
                let def = catalog.def(r);
                let key = (plugin.provenance.sha256.clone(), def.spec.name.clone());
                old.by_tool.iter().find(|s| s.key == key).cloned().unwrap_or_else(|| {
                    Arc::new(ToolState {
                        key,
                        version: plugin.manifest.version.to_string(),
                        semaphore: Arc::new(Semaphore::new(tool_slots(
                            def.policies.max_concurrency,
                            self.settings.max_concurrency,
                        ))),
                        breaker: Breaker::default(),
                        secrets: ArcSwap::from_pointee(secrets_of(
                            &self.secrets.load(),
                            &plugin.manifest.id,
                            &def.spec.secrets,
                        )),
                        limits: {
                            let manifest = def.policies.rate_limit;
                            let limits = match self.settings.rate_limits.get(&r.name) {
                                Some(over) => manifest.overridden_by(over),
                                None => manifest,
                            };
                            Limits::new(&limits)
                        },
                        counters: {
                            let actions: Vec<&str> = def.spec.actions.iter().map(|a| a.name.as_str()).collect();
                            self.counters.tool(&r.name, &actions)
                        },
                    })
                })
            })
            .collect();
        let state = by_tool[index].clone();
        self.states.store(Arc::new(ToolStates { catalog: Some(catalog.clone()), by_tool }));
        state
    }

    fn unknown_tool(catalog: &Catalog, access: &Access, name: &str) -> ToolError {
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
        message.push_str(&format!(" Use `{TOOL_SEARCH}` with a few words about the task to find the right tool."));
        ToolError::new(ErrorCode::UNKNOWN_TOOL, message)
            .with_details(json!({ "suggestions": suggestions, "search_tool": TOOL_SEARCH }))
    }

    fn removed(catalog: &Catalog, access: &Access, notice: &Notice) -> ToolError {
        let mut n = notice.clone();
        // Never name a replacement the caller may not see.
        if let Some(rep) = &n.replacement
            && !catalog.resolve(rep).is_some_and(|r| access.may_see(&r.tool.name, r.def) && r.state.is_dispatchable())
        {
            n.replacement = None;
            n.action = None;
        }
        ToolError::new(codes::TOOL_REMOVED, n.message()).with_details(json!({
            "replacement": n.replacement,
            "action": n.action,
            "removed_in_version": n.removed_in_version.as_ref().map(|v| v.to_string()),
            "search_tool": TOOL_SEARCH,
        }))
    }

    #[allow(clippy::too_many_arguments)]
    async fn pipeline(
        &self,
        meta: &mut CallMeta,
        tool_counters: &mut Option<Arc<ToolCounters>>,
        mut args: Value,
        config: Value,
        caller: &Caller,
        confirmed: bool,
        cancel: &CancellationToken,
        bridge: &Arc<dyn ClientBridge>,
        started_at_ms: u64,
    ) -> Result<ToolResponse, ToolError> {
        let stage = tracing::info_span!(target: "quiver::trace", "resolve");
        let entered = stage.enter();
        let catalog = self.source.catalog();
        let access = &caller.access;

        // 1-2. Resolve the name; a tool the caller may not see does not exist.
        let Some(resolved) = catalog.resolve(&meta.called_name).filter(|r| access.may_see(&r.tool.name, r.def)) else {
            meta.policy.push(Cow::Borrowed("resolve:unknown"));
            return Err(Self::unknown_tool(&catalog, access, &meta.called_name));
        };
        let def: &ToolDef = resolved.def;
        let plugin: &Arc<PluginEntry> = resolved.plugin;
        let tool_name = resolved.tool.name.as_str();
        meta.tool = Some(tool_name.to_owned());
        meta.plugin = Some(plugin.manifest.id.clone());
        let index = catalog.tool_index(tool_name).ok_or_else(|| {
            ToolError::new(ErrorCode::PROTOCOL, format!("catalog inconsistency: `{tool_name}` has no index"))
        })?;
        let state = self.tool_state(&catalog, index);
        *tool_counters = Some(state.counters.clone());
        meta.plugin_version = Some(state.version.clone());
        meta.sha256 = Some(plugin.provenance.sha256.clone());
        meta.signer_key_id = plugin.provenance.signer_key_id.clone();
        meta.lifecycle_state = Some(resolved.state);
        meta.notice = resolved.notice(&meta.called_name);
        if !resolved.state.is_dispatchable() {
            meta.policy.push(Cow::Borrowed("resolve:removed"));
            let notice = meta.notice.clone().unwrap_or_else(|| Notice {
                name: meta.called_name.clone(),
                state: resolved.state,
                replacement: None,
                action: None,
                first_deprecated_version: None,
                planned_removal_version: None,
                removed_in_version: None,
                replay_supported: false,
            });
            return Err(Self::removed(&catalog, access, &notice));
        }
        meta.policy.push(Cow::Borrowed(if resolved.is_canonical() { "resolve:canonical" } else { "resolve:alias" }));

        // An alias of a consolidated tool's action fills in `action`.
        if args.is_null() {
            args = Value::Object(Map::new());
        }
        if let (Some(a), Value::Object(m)) = (resolved.action, &mut args) {
            match m.get("action") {
                None => {
                    m.insert("action".to_owned(), Value::String(a.to_owned()));
                }
                Some(Value::String(given)) if given == a => {}
                Some(given) => {
                    meta.policy.push(Cow::Borrowed("arguments:action-conflict"));
                    return Err(ToolError::invalid(format!(
                        "`{}` means `{tool_name}` with action `{a}`, but the arguments name action {given}; drop `action` or call `{tool_name}` directly",
                        meta.called_name
                    ))
                    .with_details(json!({ "errors": [{
                        "pointer": "/action", "keyword": "const", "expected": a, "got": given, "hint": "remove `action`",
                    }] })));
                }
            }
        }
        let action: Option<String> = if def.spec.actions.is_empty() {
            None
        } else {
            args.get("action").and_then(Value::as_str).map(str::to_owned)
        };
        meta.action.clone_from(&action);

        drop(entered);
        // 2b. Scopes of the action (the tool's own were checked by `may_see`).
        let stage = tracing::info_span!(target: "quiver::trace", "scopes");
        let entered = stage.enter();
        if !access.may_call(tool_name, def, action.as_deref()) {
            meta.policy.push(Cow::Borrowed("scopes:denied"));
            let missing: Vec<&str> = def.scopes_for(action.as_deref()).filter(|s| !access.holds(s)).collect();
            return Err(ToolError::denied(format!(
                "action `{}` of `{tool_name}` needs scope(s) {}, which this session does not hold; use another action or ask the user to grant the scope",
                action.as_deref().unwrap_or_default(),
                missing.iter().map(|s| format!("`{s}`")).collect::<Vec<_>>().join(", ")
            ))
            .with_details(json!({ "missing_scopes": missing })));
        }
        meta.policy.push(Cow::Borrowed("scopes:ok"));
        drop(entered);

        // 3. Arguments against the precompiled input schema.
        let stage = tracing::info_span!(target: "quiver::trace", "validation");
        let entered = stage.enter();
        if let Err(e) = validate::arguments(tool_name, def, &args, meta.lane == Lane::Generic) {
            meta.policy.push(Cow::Borrowed("arguments:invalid"));
            if meta.lane == Lane::Generic {
                self.counters.record_run_tool_invalid();
            }
            return Err(e);
        }
        meta.policy.push(Cow::Borrowed("arguments:ok"));
        drop(entered);

        // 3b. Rate limits (before approval: nobody is asked about a call that is refused).
        let stage = tracing::info_span!(target: "quiver::trace", "rate_limit");
        let entered = stage.enter();
        if let Some(limits) = &state.limits
            && let Err((scope, limit, wait)) = limits.check(&caller.session_id, caller.principal.as_deref())
        {
            meta.policy.push(Cow::Borrowed("rate:limited"));
            if let (Some(all), Some(tool)) = (self.counters.metrics(), state.counters.metrics()) {
                tool.rate_limited(all, scope);
            }
            return Err(limits::refused(tool_name, scope, limit, wait));
        }

        drop(entered);

        // 4. Approval.
        let confirmed = self
            .approve(meta, tool_name, def, action.as_deref(), &args, caller, confirmed, cancel, bridge)
            .instrument(tracing::info_span!(target: "quiver::trace", "approval"))
            .await?;

        // 5. Circuit breaker.
        let stage = tracing::info_span!(target: "quiver::trace", "dispatch");
        let entered = stage.enter();
        let admission = if state.breaker.is_closed() {
            Admission::Pass
        } else {
            state.breaker.admit(self.now_ns(), self.settings.breaker_cooldown)
        };
        match admission {
            Admission::Refuse(wait) => {
                meta.policy.push(Cow::Borrowed("breaker:open"));
                let wait_ms = wait.as_millis().max(1) as u64;
                return Err(ToolError::new(
                    codes::CIRCUIT_OPEN,
                    format!(
                        "`{tool_name}` failed {} times in a row and is paused; try again in {wait_ms} ms, or use another tool",
                        self.settings.breaker_failures
                    ),
                )
                .retryable()
                .with_details(json!({ "retry_after_ms": wait_ms })));
            }
            Admission::Probe => meta.policy.push(Cow::Borrowed("breaker:half-open-probe")),
            Admission::Pass => meta.policy.push(Cow::Borrowed("breaker:closed")),
        }
        // A probe whose caller goes away before the outcome is known must not leave the breaker
        // half-open forever.
        let mut probe = ProbeRelease { breaker: &state.breaker, armed: admission == Admission::Probe };

        // 6-8. Invoke under the deadline, within the concurrency limits, retrying retryable errors.
        let policies = def.policies;
        let timeout = if policies.timeout_ms == 0 {
            Duration::from_secs(365 * 24 * 3600)
        } else {
            Duration::from_millis(policies.timeout_ms)
        };
        let deadline = Instant::now() + timeout;
        let scopes = access.scopes();
        let secrets = state.secrets.load();
        let request = RequestView {
            request_id: &meta.request_id,
            tool_id: &def.spec.name,
            tool_version: &state.version,
            timestamp: started_at_ms,
            agent_context: AgentView {
                session_id: &caller.session_id,
                client: &caller.client,
                mode: &caller.mode,
                scopes: &scopes,
            },
            inputs: &args,
            invocation_policies: PoliciesView {
                timeout_ms: policies.timeout_ms,
                max_result_bytes: policies.max_result_bytes,
                confirmed,
                action: action.as_deref(),
            },
            config: if config.is_null() {
                self.settings.plugin_config.get(resolved.plugin.id()).unwrap_or(&Value::Null)
            } else {
                &config
            },
            memory_snippet: self.memory.snippet(&caller.session_id, resolved.plugin.id(), tool_name),
            secrets: &secrets,
        };
        let mut body = Vec::with_capacity(256 + args_len_hint(&args));
        serde_json::to_writer(&mut body, &request)
            .map_err(|e| ToolError::new(ErrorCode::PROTOCOL, format!("cannot encode the request: {e}")))?;
        // serde_json writes valid UTF-8.
        let body = String::from_utf8(body).map_err(|e| ToolError::new(ErrorCode::PROTOCOL, e.to_string()))?;
        drop(entered);
        let result = self
            .invoke_with_retries(
                meta,
                tool_name,
                plugin,
                resolved.tool.tool,
                &state,
                body,
                deadline,
                policies.retries,
                cancel,
                bridge,
            )
            .instrument(stage)
            .await;

        // 9. Output against the output schema.
        let stage = tracing::info_span!(target: "quiver::trace", "output");
        let _entered = stage.enter();
        let result = match result {
            Ok((r, n)) if r.status == Status::Ok => match validate::output(tool_name, def, &r.outputs) {
                Ok(()) => Ok((r, n)),
                Err(e) => {
                    meta.policy.push(Cow::Borrowed("output:invalid"));
                    Err(e)
                }
            },
            other => other,
        };

        // The breaker learns the outcome.
        probe.armed = false;
        if let Some(s) =
            state.breaker.record(admission, verdict(&result), || self.now_ns(), self.settings.breaker_failures)
        {
            state.counters.set_breaker(s);
            meta.policy.push(Cow::Borrowed(if s == BreakerState::Open {
                "breaker:opened"
            } else {
                "breaker:closed-after-probe"
            }));
            tracing::warn!(tool = tool_name, state = s.as_str(), "circuit breaker changed state");
        }
        let (mut response, raw_len) = result?;

        // What the tool asked to remember, for its later calls in this session (never sent to
        // the client).
        if !response.memory_writes.is_empty() {
            let writes = std::mem::take(&mut response.memory_writes);
            for refused in self.memory.write(&caller.session_id, resolved.plugin.id(), tool_name, &writes) {
                tracing::warn!(tool = tool_name, session = %caller.session_id, "{refused}");
            }
        }

        // 10. Result size.
        self.limit_size(meta, &mut response, def, policies.max_result_bytes, raw_len, &caller.session_id);
        Ok(response)
    }

    #[allow(clippy::too_many_arguments)]
    async fn approve(
        &self,
        meta: &mut CallMeta,
        tool: &str,
        def: &ToolDef,
        action: Option<&str>,
        args: &Value,
        caller: &Caller,
        confirmed: bool,
        cancel: &CancellationToken,
        bridge: &Arc<dyn ClientBridge>,
    ) -> Result<bool, ToolError> {
        if !def.needs_confirmation(action) {
            meta.policy.push(Cow::Borrowed("approval:not-required"));
            return Ok(confirmed);
        }
        let effects = def.side_effects_for(action).as_str();
        let what = match action {
            Some(a) => format!("`{tool}` (action `{a}`)"),
            None => format!("`{tool}`"),
        };
        let details = json!({ "needs_confirmation": true, "side_effects": effects, "action": action, "confirm_meta_key": codes::CONFIRM_META_KEY });
        match caller.approval {
            // `deny` is final: checked before the caller's confirmation, and nobody is asked.
            Approval::Deny => {
                meta.policy.push(Cow::Borrowed("approval:denied-by-profile"));
                Err(ToolError::denied(format!(
                    "{what} has {effects} side effects and needs a person's confirmation, which this session's profile refuses; do not retry (a confirmation cannot override it). Tell the user what you wanted to do so they can do it themselves or change the profile's approval setting."
                ))
                .with_details(json!({ "needs_confirmation": true, "side_effects": effects, "action": action, "denied_by_profile": true })))
            }
            _ if confirmed => {
                meta.policy.push(Cow::Borrowed("approval:confirmed-by-caller"));
                Ok(true)
            }
            Approval::Allow => {
                meta.policy.push(Cow::Borrowed("approval:allowed-by-profile"));
                Ok(true)
            }
            Approval::Ask if bridge.can_elicit() => {
                let mut shown = args.to_string();
                if shown.len() > 500 {
                    let mut cut = 497;
                    while !shown.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    shown.truncate(cut);
                    shown.push_str("...");
                }
                let request = json!({
                    "message": format!("Allow {what} ({effects} side effects) with these arguments?\n{shown}"),
                    "requestedSchema": {
                        "type": "object",
                        "properties": { "confirm": { "type": "boolean", "title": "Run it", "description": "Run this call once", "default": false } },
                        "required": ["confirm"]
                    }
                });
                let answer = tokio::select! {
                    biased;
                    _ = cancel.cancelled() => return Err(cancelled(tool)),
                    a = bridge.elicit(request) => a,
                };
                match answer {
                    Ok(v)
                        if v.get("action").and_then(Value::as_str) == Some("accept")
                            && v.pointer("/content/confirm").and_then(Value::as_bool) != Some(false) =>
                    {
                        meta.policy.push(Cow::Borrowed("approval:confirmed-by-user"));
                        Ok(true)
                    }
                    Ok(v) => {
                        meta.policy.push(Cow::Borrowed("approval:declined-by-user"));
                        Err(ToolError::denied(format!(
                            "the user did not allow {what}; do not retry it unless the user asks for it"
                        ))
                        .with_details(json!({ "user_action": v.get("action").cloned().unwrap_or(Value::Null) })))
                    }
                    Err(e) => {
                        meta.policy.push(Cow::Borrowed("approval:ask-failed"));
                        Err(ToolError::new(
                            codes::CONFIRMATION_REQUIRED,
                            format!("{what} needs a person's confirmation and asking the user failed ({e}). Ask the user in the conversation whether to run it; if they agree, repeat the call marked as confirmed (MCP request `_meta` key `{}`: true; CLI `--yes`).", codes::CONFIRM_META_KEY),
                        )
                        .with_details(details))
                    }
                }
            }
            Approval::Ask => {
                meta.policy.push(Cow::Borrowed("approval:cannot-ask"));
                Err(ToolError::new(
                    codes::CONFIRMATION_REQUIRED,
                    format!(
                        "{what} has {effects} side effects and needs a person's confirmation before it runs, and this client cannot ask the user. Ask the user in the conversation whether to run it; if they agree, repeat the call marked as confirmed (MCP request `_meta` key `{}`: true; CLI `--yes`). Never confirm on your own.",
                        codes::CONFIRM_META_KEY
                    ),
                )
                .with_details(details))
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn invoke_with_retries(
        &self,
        meta: &mut CallMeta,
        tool_name: &str,
        plugin: &Arc<PluginEntry>,
        tool: usize,
        state: &Arc<ToolState>,
        mut body: String,
        deadline: Instant,
        max_retries: u32,
        cancel: &CancellationToken,
        bridge: &Arc<dyn ClientBridge>,
    ) -> Result<(ToolResponse, usize), ToolError> {
        loop {
            let attempt_body = if meta.retries < max_retries { body.clone() } else { std::mem::take(&mut body) };
            let (response, raw_len) = self
                .attempt(&meta.request_id, tool_name, plugin, tool, state, attempt_body, deadline, cancel, bridge)
                .await?;
            let retryable = response.status == Status::Error && response.error.as_ref().is_some_and(|e| e.retryable);
            if !retryable || meta.retries >= max_retries {
                return Ok((response, raw_len));
            }
            let delay = self.backoff(meta.retries);
            if Instant::now() + delay >= deadline {
                meta.policy.push(Cow::Borrowed("retry:no-time-left"));
                return Ok((response, raw_len));
            }
            meta.retries += 1;
            let code = response.error.as_ref().map(|e| e.code.as_str()).unwrap_or_default();
            meta.policy.push(Cow::Owned(format!("retry:{}:{code}:{}ms", meta.retries, delay.as_millis())));
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return Err(cancelled(tool_name)),
                _ = tokio::time::sleep(delay) => {}
            }
        }
    }

    /// One invocation on a blocking thread. The caller stops waiting at the deadline or on
    /// cancellation; the thread cannot be killed, so it keeps its tool permit until the plugin
    /// returns (the overrun counts against the tool) and sees `is_cancelled() == true`.
    #[allow(clippy::too_many_arguments)]
    async fn attempt(
        &self,
        request_id: &str,
        tool_name: &str,
        plugin: &Arc<PluginEntry>,
        tool: usize,
        state: &Arc<ToolState>,
        body: String,
        deadline: Instant,
        cancel: &CancellationToken,
        bridge: &Arc<dyn ClientBridge>,
    ) -> Result<(ToolResponse, usize), ToolError> {
        if cancel.is_cancelled() {
            return Err(cancelled(tool_name));
        }
        // The tool's own slot first: a saturated tool must not hold host-wide slots while it waits.
        let tool_permit =
            acquire(&state.semaphore, deadline, cancel, tool_name, "the tool's concurrency limit").await?;
        let dispatch = plugin.backend.dispatch(tool);
        // The host-wide slots bound the blocking threads; inline calls take no thread and remote
        // calls run in their worker, so neither ever waits behind slow thread calls.
        let _global = if dispatch == Dispatch::Thread {
            Some(acquire(&self.global, deadline, cancel, tool_name, "the host's call slots").await?)
        } else {
            None
        };
        let sink = Arc::new(RouterSink::new(
            bridge.clone(),
            cancel.clone(),
            deadline,
            request_id.to_owned(),
            state.counters.clone(),
        ));
        match dispatch {
            Dispatch::Inline => {
                // The tool answers within microseconds and never blocks: run it on this task
                // and skip the thread handoff; its deadline is checked after.
                let raw = plugin.backend.invoke(&plugin.tools[tool].spec.name, &body, sink.clone());
                sink.finished();
                drop(tool_permit);
                return settle(raw, tool_name, state, deadline, cancel);
            }
            Dispatch::Remote => {
                let call = plugin.backend.start(&plugin.tools[tool].spec.name, body, sink.clone(), deadline);
                return self.await_remote(call, tool_name, state, sink, tool_permit, deadline, cancel).await;
            }
            Dispatch::Thread => {}
        }
        let plugin = plugin.clone();
        let plugin_sink = sink.clone();
        let mut handle = tokio::task::spawn_blocking(move || {
            let name = plugin.tools[tool].spec.name.as_str();
            let out = plugin.backend.invoke(name, &body, plugin_sink.clone());
            plugin_sink.finished();
            drop(tool_permit);
            out
        });
        let mut guard = AbandonOnDrop { sink: &sink, armed: true };
        let joined = tokio::select! {
            biased;
            r = &mut handle => r,
            _ = cancel.cancelled() => {
                // `guard` marks the call abandoned.
                return Err(cancelled(tool_name));
            }
            _ = tokio::time::sleep_until(deadline.into()) => {
                guard.armed = false;
                sink.abandon(true);
                return Err(timeout_error(tool_name));
            }
        };
        guard.armed = false;
        let raw = joined.map_err(|e| {
            ToolError::new(ErrorCode::PROTOCOL, format!("the thread running `{tool_name}` failed: {e}"))
        })?;
        settle(raw, tool_name, state, deadline, cancel)
    }

    /// Waits for a call running elsewhere (a worker process). When the caller stops waiting
    /// (cancellation, deadline), the call is aborted and a reaper keeps the tool's slot until the
    /// call is really over: the backend kills a worker whose call overran its deadline, so the
    /// slot always comes back.
    #[allow(clippy::too_many_arguments)]
    async fn await_remote(
        &self,
        call: RemoteCall,
        tool_name: &str,
        state: &Arc<ToolState>,
        sink: Arc<RouterSink>,
        tool_permit: OwnedSemaphorePermit,
        deadline: Instant,
        cancel: &CancellationToken,
    ) -> Result<(ToolResponse, usize), ToolError> {
        let RemoteCall { mut answer, abort } = call;
        let outcome = tokio::select! {
            biased;
            r = &mut answer => Ok(r),
            _ = cancel.cancelled() => Err(AbortReason::Cancelled),
            _ = tokio::time::sleep_until(deadline.into()) => Err(AbortReason::Deadline),
        };
        let reason = match outcome {
            Ok(r) => {
                sink.finished();
                drop(tool_permit);
                if cancel.is_cancelled() {
                    return Err(cancelled(tool_name));
                }
                return settle(r?, tool_name, state, deadline, cancel);
            }
            Err(reason) => reason,
        };
        sink.abandon(reason == AbortReason::Deadline);
        abort(reason);
        tokio::spawn(async move {
            let _slot = tool_permit;
            tokio::select! {
                _ = &mut answer => {}
                _ = tokio::time::sleep_until(deadline.into()) => {
                    abort(AbortReason::Deadline);
                    let _ = answer.await;
                }
            }
            sink.finished();
        });
        match reason {
            AbortReason::Cancelled => Err(cancelled(tool_name)),
            AbortReason::Deadline => {
                state.counters.timed_out();
                Err(timeout_error(tool_name))
            }
        }
    }

    /// Cuts a result over `max` bytes down to fit, keeping the tool's shape: the largest string
    /// and array values of `outputs` are shortened (strings end with a marker naming the handle)
    /// until the JSON fits, and the cut output is checked against the output schema. When no cut
    /// fits or matches the schema, no structured output is sent: `outputs` becomes null and a
    /// text preview of the JSON goes in `content`. Either way the status is `partial`, the full
    /// text is kept under a handle for `result_handle_ttl` (for this session only), and
    /// [`CallMeta::truncation`] says what was done.
    fn limit_size(
        &self,
        meta: &mut CallMeta,
        response: &mut ToolResponse,
        def: &ToolDef,
        max: u64,
        raw_len: usize,
        session: &str,
    ) {
        if max == 0 || response.status == Status::Error || raw_len as u64 <= max {
            return;
        }
        let Ok(text) = serde_json::to_string(&response.outputs) else { return };
        if text.len() as u64 <= max {
            return;
        }
        let max = max as usize;
        let handle = format!("res-{}", meta.request_id);
        let uri = format!("{RESULT_URI_PREFIX}{handle}");
        let total = text.len();
        let marker = |n: usize| format!("… [{n} more bytes cut; the full result is at {uri}]");
        let mut cut = response.outputs.clone();
        let has_output_schema =
            def.output_schema.as_deref().is_some_and(|s| s.get("type").and_then(Value::as_str) == Some("object"));
        let (structured, reason, cuts) = match fit(&mut cut, max, &marker) {
            None => (
                false,
                Some(format!("no shortening of its strings and arrays brings the output under {max} bytes")),
                Vec::new(),
            ),
            Some(cuts) => match &def.output_validator {
                Some(v) if !v.is_valid(&cut) => {
                    let why = v
                        .iter_errors(&cut)
                        .next()
                        .map(|e| format!("`{}` at `{}`", e.kind().keyword(), e.instance_path().as_str()))
                        .unwrap_or_default();
                    (
                        false,
                        Some(format!("the shortened output no longer matches the output schema ({why})")),
                        Vec::new(),
                    )
                }
                _ => (true, None, cuts),
            },
        };
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
        self.results.insert(handle.clone(), session, text);
        meta.truncation = Some(Truncation {
            handle: handle.clone(),
            uri,
            total_bytes: total,
            shown_bytes: shown,
            limit_bytes: max,
            structured,
            reason,
            has_output_schema,
            cuts,
        });
        meta.result_handle = Some(handle);
        meta.policy.push(Cow::Borrowed("result:truncated"));
        if !structured {
            meta.policy.push(Cow::Borrowed("result:unstructured"));
        }
    }
}

/// A tool's concurrency slots: what its manifest asks for, but never more than three quarters of
/// the host's slots, so one slow tool cannot take every slot.
fn tool_slots(requested: u32, host: usize) -> usize {
    let host = host.clamp(1, Semaphore::MAX_PERMITS);
    let cap = (host - host / 4).max(1);
    (requested as usize).clamp(1, cap)
}

/// A plugin's answer, unless it raced a cancellation or the deadline (a tool that saw
/// `is_cancelled` and stopped early did not produce a result).
fn settle(
    raw: String,
    tool_name: &str,
    state: &ToolState,
    deadline: Instant,
    cancel: &CancellationToken,
) -> Result<(ToolResponse, usize), ToolError> {
    if cancel.is_cancelled() {
        return Err(cancelled(tool_name));
    }
    if Instant::now() >= deadline {
        state.counters.timed_out();
        return Err(timeout_error(tool_name));
    }
    parse_response(tool_name, raw)
}

fn timeout_error(tool_name: &str) -> ToolError {
    ToolError::new(
        ErrorCode::TIMEOUT,
        format!("`{tool_name}` did not answer before its deadline and was told to stop; try a smaller request, or try again later"),
    )
    .retryable()
}

/// Reads a plugin's answer; returns it with its size in bytes.
fn parse_response(tool_name: &str, raw: String) -> Result<(ToolResponse, usize), ToolError> {
    let response: ToolResponse = serde_json::from_str(&raw).map_err(|e| {
        let mut shown = raw.clone();
        shown.truncate(shown.char_indices().nth(200).map(|(i, _)| i).unwrap_or(shown.len()));
        ToolError::new(
            ErrorCode::PROTOCOL,
            format!("`{tool_name}` answered something that is not a tool response ({e}): {shown}"),
        )
    })?;
    Ok((response, raw.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

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
