//! Prometheus metrics through the `metrics` crate, rendered on demand (`/metrics` on the HTTP
//! transport, `serve --metrics ADDR` in stdio mode). No global recorder is installed: a
//! [`Metrics`] owns its recorder, so several hosts (tests) can live in one process.
//!
//! Cheap on the call path: every handle a call touches is registered once, when the router
//! builds its per-tool state for a catalog snapshot ([`Metrics::tool`]), so a call does a few
//! atomic adds and histogram records, with no string formatting, lookup or lock. Label values are
//! bounded: tool and action names come from the catalog (never from what a caller sends), lanes,
//! statuses and error codes from fixed lists (unknown codes count as `other`), profiles from the
//! configuration, rejection stages from the lifecycle's fixed set.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, Key, Label, Metadata, Recorder};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder};
use quiver_abi::Status;

use crate::counters::{BreakerState, KNOWN_CODES};

/// The lane label of a call: by its canonical name, by an alias, or through `run_tool`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricLane {
    /// The tool's canonical name.
    Typed,
    /// An alias (a renamed tool's old name, or an action alias of a consolidated tool).
    Alias,
    /// The generic lane, `run_tool`.
    Generic,
}

impl MetricLane {
    const ALL: [MetricLane; 3] = [MetricLane::Typed, MetricLane::Alias, MetricLane::Generic];
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            MetricLane::Typed => "typed",
            MetricLane::Alias => "alias",
            MetricLane::Generic => "generic",
        }
    }
    fn index(self) -> usize {
        self as usize
    }
}

const STATUSES: [&str; 3] = ["ok", "partial", "error"];

fn status_index(s: Status) -> usize {
    match s {
        Status::Ok => 0,
        Status::Partial => 1,
        Status::Error => 2,
    }
}

/// Latency buckets, seconds: 50 µs to 60 s.
const SECONDS_BUCKETS: [f64; 17] =
    [0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 15.0, 60.0];
/// Surface size buckets, bytes.
const BYTES_BUCKETS: [f64; 10] = [256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 12288.0, 16384.0, 32768.0, 65536.0];

static METADATA: Metadata<'static> = Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));

/// Metric names, with their help texts (rendered as `# HELP`).
const DESCRIPTIONS: &[(&str, &str)] = &[
    ("quiver_calls_total", "Tool calls through the router, by lane and status (unknown tools included)."),
    ("quiver_call_duration_seconds", "Wall time of the router pipeline per call, by lane."),
    ("quiver_call_errors_total", "Failed calls by error code (codes outside the known list count as other)."),
    ("quiver_validation_failures_total", "Calls refused because their arguments failed validation, by lane."),
    ("quiver_tool_calls_total", "Calls per tool (canonical name), by lane and status."),
    ("quiver_tool_call_duration_seconds", "Wall time of calls per tool."),
    ("quiver_tool_errors_total", "Failed calls per tool and error code."),
    ("quiver_tool_action_calls_total", "Calls per effective action of consolidated tools, by status."),
    ("quiver_tool_action_duration_seconds", "Wall time of calls per effective action of consolidated tools."),
    ("quiver_tool_retries_total", "Retries made per tool."),
    ("quiver_tool_retry_successes_total", "Calls per tool that succeeded after at least one retry."),
    ("quiver_tool_breaker_state", "Circuit breaker state per tool: 0 closed, 1 open, 2 half-open."),
    ("quiver_tool_breaker_opens_total", "Times each tool's circuit breaker opened."),
    ("quiver_rate_limited_total", "Calls refused by a rate limit, per tool and limit scope."),
    ("quiver_meta_calls_total", "Calls of the meta tools (tool_search, list_tools, run_tool)."),
    ("quiver_tool_search_zero_results_total", "tool_search calls that found nothing."),
    ("quiver_tool_search_loads_total", "Tools loaded into sessions by tool_search."),
    ("quiver_surface_bytes", "Bytes of the tool surface sent to a client (tools/list), per profile."),
    ("quiver_sessions_active", "MCP sessions open now."),
    ("quiver_sessions_total", "MCP sessions started."),
    ("quiver_plugins_loaded", "Plugins in the current catalog."),
    ("quiver_tools_loaded", "Tools in the current catalog."),
    ("quiver_bundle_rejections_total", "Bundles rejected, by the check that failed."),
];

/// The host's metrics: a Prometheus recorder of its own and the handles every call shares.
pub struct Metrics {
    recorder: PrometheusRecorder,
    handle: PrometheusHandle,
    calls: [[Counter; 3]; 3],
    durations: [Histogram; 3],
    errors: [Counter; KNOWN_CODES.len()],
    validation: [Counter; 3],
    meta: [Counter; 3],
    search_zero: Counter,
    search_loads: Counter,
    sessions_active: Gauge,
    sessions_total: Counter,
    plugins_loaded: Gauge,
    tools_loaded: Gauge,
    /// Per profile name (from the configuration), registered on a session's first surface.
    surfaces: Mutex<BTreeMap<String, Histogram>>,
    /// Per rejection stage (a fixed set of names).
    rejections: Mutex<BTreeMap<&'static str, Counter>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// The meta tools counted by [`Metrics::meta_call`].
pub const META_TOOLS: [&str; 3] = ["tool_search", "list_tools", "run_tool"];

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// A fresh set of metrics with its own recorder.
    pub fn new() -> Metrics {
        let builder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &SECONDS_BUCKETS)
            .and_then(|b| b.set_buckets_for_metric(Matcher::Suffix("_bytes".into()), &BYTES_BUCKETS));
        // Both bucket lists are non-empty constants, the only way `set_buckets_for_metric` fails.
        let recorder = builder.unwrap_or_default().build_recorder();
        for (name, help) in DESCRIPTIONS {
            recorder.describe_counter((*name).into(), None, (*help).into());
        }
        let handle = recorder.handle();
        let r = &recorder;
        let calls = MetricLane::ALL.map(|l| {
            STATUSES.map(|s| counter(r, "quiver_calls_total", vec![lbl("lane", l.as_str()), lbl("status", s)]))
        });
        let durations =
            MetricLane::ALL.map(|l| histogram(r, "quiver_call_duration_seconds", vec![lbl("lane", l.as_str())]));
        let errors = KNOWN_CODES.map(|c| counter(r, "quiver_call_errors_total", vec![lbl("code", c)]));
        let validation =
            MetricLane::ALL.map(|l| counter(r, "quiver_validation_failures_total", vec![lbl("lane", l.as_str())]));
        let meta = META_TOOLS.map(|t| counter(r, "quiver_meta_calls_total", vec![lbl("tool", t)]));
        Metrics {
            search_zero: counter(r, "quiver_tool_search_zero_results_total", vec![]),
            search_loads: counter(r, "quiver_tool_search_loads_total", vec![]),
            sessions_active: gauge(r, "quiver_sessions_active", vec![]),
            sessions_total: counter(r, "quiver_sessions_total", vec![]),
            plugins_loaded: gauge(r, "quiver_plugins_loaded", vec![]),
            tools_loaded: gauge(r, "quiver_tools_loaded", vec![]),
            calls,
            durations,
            errors,
            validation,
            meta,
            surfaces: Mutex::new(BTreeMap::new()),
            rejections: Mutex::new(BTreeMap::new()),
            handle,
            recorder,
        }
    }

    /// The Prometheus text exposition (format 0.0.4) of every metric.
    pub fn render(&self) -> String {
        self.handle.render()
    }

    /// Folds recorded histogram samples into their buckets so memory stays bounded between
    /// scrapes; call it every few seconds (rendering does it too).
    pub fn run_upkeep(&self) {
        self.handle.run_upkeep();
    }

    /// The handles of one tool (by canonical name) and of each of its declared actions. Call it
    /// when building per-tool state, not per call.
    pub fn tool(&self, name: &str, actions: &[&str]) -> ToolMetrics {
        let r = &self.recorder;
        let tool = || lbl("tool", name);
        ToolMetrics {
            calls: MetricLane::ALL.map(|l| {
                STATUSES.map(|s| {
                    counter(r, "quiver_tool_calls_total", vec![tool(), lbl("lane", l.as_str()), lbl("status", s)])
                })
            }),
            duration: histogram(r, "quiver_tool_call_duration_seconds", vec![tool()]),
            errors: std::array::from_fn(|_| OnceLock::new()),
            retries: counter(r, "quiver_tool_retries_total", vec![tool()]),
            retry_successes: counter(r, "quiver_tool_retry_successes_total", vec![tool()]),
            breaker: gauge(r, "quiver_tool_breaker_state", vec![tool()]),
            breaker_opens: counter(r, "quiver_tool_breaker_opens_total", vec![tool()]),
            rate_limited: std::array::from_fn(|_| OnceLock::new()),
            actions: actions
                .iter()
                .map(|a| ActionMetrics {
                    name: (*a).into(),
                    calls: STATUSES.map(|s| {
                        counter(r, "quiver_tool_action_calls_total", vec![tool(), lbl("action", a), lbl("status", s)])
                    }),
                    duration: histogram(r, "quiver_tool_action_duration_seconds", vec![tool(), lbl("action", a)]),
                })
                .collect(),
            name: name.into(),
        }
    }

    /// Records one finished call. `tool` is `None` when the name did not resolve to a tool the
    /// caller may see (nothing about the name is recorded then).
    pub fn record_call(
        &self,
        lane: MetricLane,
        status: Status,
        error_code: Option<&str>,
        duration: Duration,
        retries: u32,
        tool: Option<(&ToolMetrics, Option<&str>)>,
    ) {
        let secs = duration.as_secs_f64();
        let st = status_index(status);
        self.calls[lane.index()][st].increment(1);
        self.durations[lane.index()].record(secs);
        let code = error_code.map(code_index);
        if let Some(c) = code {
            self.errors[c].increment(1);
            if KNOWN_CODES[c] == "invalid_arguments" {
                self.validation[lane.index()].increment(1);
            }
        }
        if let Some((t, action)) = tool {
            t.calls[lane.index()][st].increment(1);
            t.duration.record(secs);
            if retries > 0 {
                t.retries.increment(u64::from(retries));
                if status != Status::Error {
                    t.retry_successes.increment(1);
                }
            }
            if let Some(c) = code {
                t.errors[c]
                    .get_or_init(|| {
                        counter(
                            &self.recorder,
                            "quiver_tool_errors_total",
                            vec![lbl("tool", &t.name), lbl("code", KNOWN_CODES[c])],
                        )
                    })
                    .increment(1);
            }
            if let Some(a) = action.and_then(|a| t.actions.iter().find(|m| &*m.name == a)) {
                a.calls[st].increment(1);
                a.duration.record(secs);
            }
        }
    }

    /// A call of a meta tool (`tool_search`, `list_tools`, `run_tool`); other names are ignored.
    pub fn meta_call(&self, tool: &str) {
        if let Some(i) = META_TOOLS.iter().position(|t| *t == tool) {
            self.meta[i].increment(1);
        }
    }

    /// The outcome of a `tool_search`: how many hits, how many tools it loaded.
    pub fn search_result(&self, hits: usize, loaded: usize) {
        if hits == 0 {
            self.search_zero.increment(1);
        }
        self.search_loads.increment(loaded as u64);
    }

    /// A surface of `bytes` was sent to a session of `profile` (a configured profile name).
    pub fn surface(&self, profile: &str, bytes: usize) {
        let mut map = self.surfaces.lock().unwrap_or_else(|e| e.into_inner());
        if !map.contains_key(profile) {
            let h = histogram(&self.recorder, "quiver_surface_bytes", vec![lbl("profile", profile)]);
            map.insert(profile.to_owned(), h);
        }
        if let Some(h) = map.get(profile) {
            h.record(bytes as f64);
        }
    }

    /// A session started.
    pub fn session_started(&self) {
        self.sessions_total.increment(1);
        self.sessions_active.increment(1.0);
    }

    /// A session ended.
    pub fn session_ended(&self) {
        self.sessions_active.decrement(1.0);
    }

    /// The catalog now serves `plugins` plugins and `tools` tools.
    pub fn catalog(&self, plugins: usize, tools: usize) {
        self.plugins_loaded.set(plugins as f64);
        self.tools_loaded.set(tools as f64);
    }

    /// A bundle was rejected at `stage` (one of the lifecycle's fixed stage names).
    pub fn bundle_rejected(&self, stage: &'static str) {
        let mut map = self.rejections.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(stage)
            .or_insert_with(|| counter(&self.recorder, "quiver_bundle_rejections_total", vec![lbl("stage", stage)]))
            .increment(1);
    }
}

/// Which limit refused a call (label `scope` of `quiver_rate_limited_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitScope {
    /// The tool's limit across all callers.
    Tool,
    /// The tool's limit per session.
    Session,
    /// The tool's limit per authenticated principal.
    Principal,
}

impl LimitScope {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            LimitScope::Tool => "tool",
            LimitScope::Session => "session",
            LimitScope::Principal => "principal",
        }
    }
}

/// Handles of one tool, registered once per catalog snapshot that brings the tool.
pub struct ToolMetrics {
    calls: [[Counter; 3]; 3],
    duration: Histogram,
    errors: [OnceLock<Counter>; KNOWN_CODES.len()],
    retries: Counter,
    retry_successes: Counter,
    breaker: Gauge,
    breaker_opens: Counter,
    rate_limited: [OnceLock<Counter>; 3],
    actions: Box<[ActionMetrics]>,
    name: Box<str>,
}

impl std::fmt::Debug for ToolMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolMetrics").field("tool", &self.name).finish_non_exhaustive()
    }
}

struct ActionMetrics {
    name: Box<str>,
    calls: [Counter; 3],
    duration: Histogram,
}

impl ToolMetrics {
    /// Records the breaker's new state; `opened` when it just went from closed/half-open to open.
    pub fn breaker(&self, state: BreakerState, opened: bool) {
        self.breaker.set(match state {
            BreakerState::Closed => 0.0,
            BreakerState::Open => 1.0,
            BreakerState::HalfOpen => 2.0,
        });
        if opened {
            self.breaker_opens.increment(1);
        }
    }

    /// A call of this tool refused by the limit of `scope`.
    pub fn rate_limited(&self, metrics: &Metrics, scope: LimitScope) {
        self.rate_limited[scope as usize]
            .get_or_init(|| {
                counter(
                    &metrics.recorder,
                    "quiver_rate_limited_total",
                    vec![lbl("tool", &self.name), lbl("scope", scope.as_str())],
                )
            })
            .increment(1);
    }
}

fn code_index(code: &str) -> usize {
    KNOWN_CODES.iter().position(|c| *c == code).unwrap_or(KNOWN_CODES.len() - 1)
}

fn lbl(k: &'static str, v: &str) -> Label {
    Label::new(k, v.to_owned())
}

fn counter(r: &PrometheusRecorder, name: &'static str, labels: Vec<Label>) -> Counter {
    r.register_counter(&Key::from_parts(name, labels), &METADATA)
}

fn gauge(r: &PrometheusRecorder, name: &'static str, labels: Vec<Label>) -> Gauge {
    r.register_gauge(&Key::from_parts(name, labels), &METADATA)
}

fn histogram(r: &PrometheusRecorder, name: &'static str, labels: Vec<Label>) -> Histogram {
    r.register_histogram(&Key::from_parts(name, labels), &METADATA)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(text: &str, series: &str) -> Option<f64> {
        text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
    }

    #[test]
    fn calls_count_per_lane_tool_action_and_code() {
        let m = Metrics::new();
        let t = m.tool("fs_edit", &["replace", "insert"]);
        let ms = Duration::from_millis(3);
        m.record_call(MetricLane::Typed, Status::Ok, None, ms, 0, Some((&t, Some("replace"))));
        m.record_call(MetricLane::Generic, Status::Ok, None, ms, 2, Some((&t, Some("replace"))));
        m.record_call(MetricLane::Alias, Status::Error, Some("invalid_arguments"), ms, 0, Some((&t, Some("insert"))));
        m.record_call(MetricLane::Typed, Status::Error, Some("made_up_code"), ms, 0, None);
        m.meta_call("tool_search");
        m.search_result(0, 0);
        m.surface("agent", 3000);
        let text = m.render();
        let v = |s: &str| value(&text, s).unwrap_or_else(|| panic!("no series {s} in\n{text}"));
        assert_eq!(v(r#"quiver_tool_calls_total{tool="fs_edit",lane="typed",status="ok"}"#), 1.0);
        assert_eq!(v(r#"quiver_tool_calls_total{tool="fs_edit",lane="generic",status="ok"}"#), 1.0);
        assert_eq!(v(r#"quiver_tool_action_calls_total{tool="fs_edit",action="replace",status="ok"}"#), 2.0);
        assert_eq!(v(r#"quiver_tool_action_calls_total{tool="fs_edit",action="insert",status="error"}"#), 1.0);
        assert_eq!(v(r#"quiver_tool_errors_total{tool="fs_edit",code="invalid_arguments"}"#), 1.0);
        assert_eq!(v(r#"quiver_validation_failures_total{lane="alias"}"#), 1.0);
        assert_eq!(v(r#"quiver_call_errors_total{code="other"}"#), 1.0);
        assert_eq!(v(r#"quiver_tool_retry_successes_total{tool="fs_edit"}"#), 1.0);
        assert_eq!(v(r#"quiver_tool_call_duration_seconds_count{tool="fs_edit"}"#), 3.0);
        assert_eq!(v(r#"quiver_calls_total{lane="typed",status="error"}"#), 1.0);
        assert_eq!(v(r#"quiver_meta_calls_total{tool="tool_search"}"#), 1.0);
        assert_eq!(v("quiver_tool_search_zero_results_total"), 1.0);
        assert_eq!(v(r#"quiver_surface_bytes_bucket{profile="agent",le="4096"}"#), 1.0);
        assert!(!text.contains("made_up_code"), "{text}");
        assert!(text.contains("# HELP quiver_tool_calls_total"), "{text}");
    }
}
