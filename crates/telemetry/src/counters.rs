//! Lock-free call counters. Every field is an atomic; the only lock guards the per-tool registry
//! and is taken when a tool is first seen (the router does that when it builds its per-tool
//! state for a catalog snapshot), never on the call path.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use quiver_abi::Status;
use serde::{Deserialize, Serialize};

use crate::stats::{DurationStats, GenericStats, LaneStats, Stats, StatusCounts, SurfaceCounts, ToolStats};

/// How a call reached the router.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Lane {
    /// By the tool's own (typed) name: canonical, alias or action alias.
    #[default]
    Typed,
    /// Through the generic `run_tool` meta tool.
    Generic,
}

impl Lane {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Lane::Typed => "typed",
            Lane::Generic => "generic",
        }
    }
    fn index(self) -> usize {
        match self {
            Lane::Typed => 0,
            Lane::Generic => 1,
        }
    }
}

/// State of a tool's circuit breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum BreakerState {
    /// Calls pass.
    #[default]
    Closed,
    /// Calls are refused until the cooldown ends.
    Open,
    /// One probe call is let through; its outcome closes or reopens the breaker.
    HalfOpen,
}

impl BreakerState {
    /// Kebab-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half-open",
        }
    }
    fn from_u8(v: u8) -> BreakerState {
        match v {
            1 => BreakerState::Open,
            2 => BreakerState::HalfOpen,
            _ => BreakerState::Closed,
        }
    }
    fn to_u8(self) -> u8 {
        match self {
            BreakerState::Closed => 0,
            BreakerState::Open => 1,
            BreakerState::HalfOpen => 2,
        }
    }
}

/// Calls by status (their sum is the number of calls: one atomic add per call).
#[derive(Debug, Default)]
struct StatusCounters {
    ok: AtomicU64,
    partial: AtomicU64,
    error: AtomicU64,
}

impl StatusCounters {
    fn add(&self, status: Status) {
        match status {
            Status::Ok => &self.ok,
            Status::Partial => &self.partial,
            Status::Error => &self.error,
        }
        .fetch_add(1, Relaxed);
    }
    fn snapshot(&self) -> StatusCounts {
        StatusCounts { ok: self.ok.load(Relaxed), partial: self.partial.load(Relaxed), error: self.error.load(Relaxed) }
    }
    fn calls(&self) -> u64 {
        let s = self.snapshot();
        s.ok + s.partial + s.error
    }
}

/// Counters of one tool (by canonical name), shared between the registry and the router's
/// per-tool state. A hot swap that changes the tool's actions gets a new `ToolCounters` with
/// handles for the new actions ([`Counters::tool`]); the totals ([`ToolTotals`]) carry on.
#[derive(Debug, Default)]
pub struct ToolCounters {
    totals: Arc<ToolTotals>,
    /// The declared actions the metric handles were registered for.
    actions: Box<[Box<str>]>,
    /// Prometheus handles, when metrics are on.
    metrics: Option<crate::ToolMetrics>,
}

impl std::ops::Deref for ToolCounters {
    type Target = ToolTotals;
    fn deref(&self) -> &ToolTotals {
        &self.totals
    }
}

/// The running totals of one tool, kept across hot swaps.
#[derive(Debug, Default)]
pub struct ToolTotals {
    status: StatusCounters,
    retries: AtomicU64,
    timeouts: AtomicU64,
    overruns: AtomicU64,
    breaker: AtomicU8,
    breaker_opens: AtomicU64,
    durations: Histogram,
}

impl ToolCounters {
    /// A call timed out and its thread is still running (an overrun that counts against the tool).
    pub fn overrun_started(&self) {
        self.timeouts.fetch_add(1, Relaxed);
        self.overruns.fetch_add(1, Relaxed);
    }
    /// A call answered only after its deadline had passed (reported as a timeout).
    pub fn timed_out(&self) {
        self.timeouts.fetch_add(1, Relaxed);
    }
    /// An overrunning call finally returned.
    pub fn overrun_ended(&self) {
        self.overruns.fetch_sub(1, Relaxed);
    }
    /// Calls still running past their deadline.
    pub fn overruns(&self) -> u64 {
        self.overruns.load(Relaxed)
    }
    /// Records the breaker's new state (counting openings).
    pub fn set_breaker(&self, state: BreakerState) {
        let old = self.breaker.swap(state.to_u8(), Relaxed);
        let opened = state == BreakerState::Open && old != BreakerState::Open.to_u8();
        if opened {
            self.breaker_opens.fetch_add(1, Relaxed);
        }
        if let Some(m) = &self.metrics {
            m.breaker(state, opened);
        }
    }
    /// The tool's Prometheus handles, when metrics are on.
    pub fn metrics(&self) -> Option<&crate::ToolMetrics> {
        self.metrics.as_ref()
    }
    /// The breaker state last recorded.
    pub fn breaker(&self) -> BreakerState {
        BreakerState::from_u8(self.breaker.load(Relaxed))
    }
    fn snapshot(&self) -> ToolStats {
        let status = self.status.snapshot();
        ToolStats {
            calls: status.ok + status.partial + status.error,
            status,
            retries: self.retries.load(Relaxed),
            timeouts: self.timeouts.load(Relaxed),
            overruns: self.overruns.load(Relaxed),
            breaker: Some(self.breaker()),
            breaker_opens: self.breaker_opens.load(Relaxed),
            duration_ms: self.durations.snapshot(),
        }
    }
}

/// Error codes counted one by one; others are counted as `other`.
pub(crate) const KNOWN_CODES: [&str; 15] = [
    "invalid_arguments",
    "tool_error",
    "panic",
    "unknown_tool",
    "not_found",
    "permission_denied",
    "timeout",
    "cancelled",
    "protocol_error",
    "invalid_output",
    "circuit_open",
    "confirmation_required",
    "tool_removed",
    "rate_limited",
    "other",
];

/// A log-linear histogram of durations in microseconds: 4 buckets per power of two, atomics only.
#[derive(Debug)]
pub(crate) struct Histogram {
    buckets: [AtomicU64; Histogram::N],
    max_us: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram { buckets: std::array::from_fn(|_| AtomicU64::new(0)), max_us: AtomicU64::new(0) }
    }
}

impl Histogram {
    const N: usize = 8 + 4 * 40;

    fn index(us: u64) -> usize {
        if us < 8 {
            return us as usize;
        }
        let e = 63 - us.leading_zeros() as usize; // >= 3
        let sub = ((us >> (e - 2)) & 3) as usize;
        (8 + (e - 3) * 4 + sub).min(Self::N - 1)
    }

    /// Smallest value of bucket `i`.
    fn lower(i: usize) -> u64 {
        if i < 8 {
            return i as u64;
        }
        let e = (i - 8) / 4 + 3;
        let sub = ((i - 8) % 4) as u64;
        (1u64 << e) + sub * (1u64 << (e - 2))
    }

    pub(crate) fn record(&self, d: Duration) {
        let us = d.as_micros().min(u128::from(u64::MAX)) as u64;
        self.buckets[Self::index(us)].fetch_add(1, Relaxed);
        // A load first: the maximum rarely changes, and a read costs less than a read-modify-write.
        if us > self.max_us.load(Relaxed) {
            self.max_us.fetch_max(us, Relaxed);
        }
    }

    fn quantile(counts: &[u64], total: u64, q: f64) -> f64 {
        if total == 0 {
            return 0.0;
        }
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (i, &c) in counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let lo = Self::lower(i) as f64;
                let hi = if i + 1 < Self::N { Self::lower(i + 1) as f64 } else { lo };
                return (lo + hi) / 2.0 / 1000.0;
            }
        }
        0.0
    }

    pub(crate) fn snapshot(&self) -> DurationStats {
        let counts: Vec<u64> = self.buckets.iter().map(|b| b.load(Relaxed)).collect();
        let total: u64 = counts.iter().sum();
        let max_ms = self.max_us.load(Relaxed) as f64 / 1000.0;
        DurationStats {
            p50: Self::quantile(&counts, total, 0.50).min(max_ms),
            p95: Self::quantile(&counts, total, 0.95).min(max_ms),
            max: max_ms,
        }
    }
}

/// What the router tells telemetry about one finished call.
#[derive(Clone, Copy)]
pub struct CallEvent<'a> {
    /// Request id.
    pub request_id: &'a str,
    /// The name as called.
    pub called_name: &'a str,
    /// Canonical tool, when the name resolved.
    pub tool: Option<&'a str>,
    /// Plugin id.
    pub plugin: Option<&'a str>,
    /// Plugin version.
    pub version: Option<&'a str>,
    /// Lane.
    pub lane: Lane,
    /// Outcome class.
    pub status: Status,
    /// Error code when `status` is error.
    pub error_code: Option<&'a str>,
    /// Wall time of the whole pipeline.
    pub duration: Duration,
    /// Retries made.
    pub retries: u32,
    /// Policy decisions, in pipeline order (shown joined by `,`).
    pub policy: &'a dyn std::fmt::Display,
    /// The tool's counters, when the call reached a tool.
    pub tool_counters: Option<&'a ToolCounters>,
    /// The effective action of a consolidated tool.
    pub action: Option<&'a str>,
}

impl std::fmt::Debug for CallEvent<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallEvent")
            .field("request_id", &self.request_id)
            .field("called_name", &self.called_name)
            .field("status", &self.status)
            .field("error_code", &self.error_code)
            .field("policy", &format_args!("{}", self.policy))
            .finish_non_exhaustive()
    }
}

/// The router's counters. Updating them takes no lock.
#[derive(Debug, Default)]
pub struct Counters {
    lanes: [StatusCounters; 2],
    lane_durations: [Histogram; 2],
    retries: AtomicU64,
    errors: [AtomicU64; KNOWN_CODES.len()],
    list_calls: AtomicU64,
    search_calls: AtomicU64,
    search_failures: AtomicU64,
    run_calls: AtomicU64,
    run_validation_failures: AtomicU64,
    surfaces: AtomicU64,
    surface_typed: AtomicU64,
    surface_total: AtomicU64,
    last_typed: AtomicU64,
    last_total: AtomicU64,
    tools: RwLock<BTreeMap<String, Arc<ToolCounters>>>,
    metrics: Option<Arc<crate::Metrics>>,
}

impl Counters {
    /// Fresh counters.
    pub fn new() -> Counters {
        Counters::default()
    }

    /// Fresh counters that also feed `metrics`.
    pub fn with_metrics(metrics: Arc<crate::Metrics>) -> Counters {
        Counters { metrics: Some(metrics), ..Counters::default() }
    }

    /// The Prometheus metrics these counters feed, when on.
    pub fn metrics(&self) -> Option<&Arc<crate::Metrics>> {
        self.metrics.as_ref()
    }

    /// The counters of a tool (with its declared `actions`), created on first use. Takes a
    /// lock: call it when building per-tool state, not per call.
    ///
    /// A tool whose declared actions changed (a hot swap to a version with other actions) gets
    /// new counters with handles for exactly those actions, sharing the old ones' totals; the
    /// router's per-tool state of the old version keeps the old handles until its calls end.
    pub fn tool(&self, name: &str, actions: &[&str]) -> Arc<ToolCounters> {
        let same = |t: &ToolCounters| t.actions.iter().map(|a| &**a).eq(actions.iter().copied());
        if let Some(t) = self.tools.read().unwrap_or_else(|e| e.into_inner()).get(name)
            && same(t)
        {
            return t.clone();
        }
        let mut tools = self.tools.write().unwrap_or_else(|e| e.into_inner());
        let totals = match tools.get(name) {
            Some(t) if same(t) => return t.clone(),
            Some(t) => t.totals.clone(),
            None => Arc::default(),
        };
        let fresh = Arc::new(ToolCounters {
            totals,
            actions: actions.iter().map(|a| Box::from(*a)).collect(),
            metrics: self.metrics.as_ref().map(|m| m.tool(name, actions)),
        });
        tools.insert(name.to_owned(), fresh.clone());
        fresh
    }

    /// Records a finished call and emits its `tracing` event (target `quiver::call`).
    pub fn record_call(&self, ev: &CallEvent<'_>) {
        let lane = ev.lane.index();
        self.lanes[lane].add(ev.status);
        self.lane_durations[lane].record(ev.duration);
        if ev.retries > 0 {
            self.retries.fetch_add(u64::from(ev.retries), Relaxed);
        }
        if let Some(code) = ev.error_code {
            let i = KNOWN_CODES.iter().position(|c| *c == code).unwrap_or(KNOWN_CODES.len() - 1);
            self.errors[i].fetch_add(1, Relaxed);
        }
        if let Some(m) = &self.metrics {
            let mlane = match (ev.lane, ev.tool) {
                (Lane::Generic, _) => crate::MetricLane::Generic,
                (Lane::Typed, Some(tool)) if tool != ev.called_name => crate::MetricLane::Alias,
                (Lane::Typed, _) => crate::MetricLane::Typed,
            };
            let tool = ev.tool_counters.and_then(|t| t.metrics.as_ref()).map(|t| (t, ev.action));
            m.record_call(mlane, ev.status, ev.error_code, ev.duration, ev.retries, tool);
        }
        if let Some(t) = ev.tool_counters {
            t.status.add(ev.status);
            t.durations.record(ev.duration);
            if ev.retries > 0 {
                t.retries.fetch_add(u64::from(ev.retries), Relaxed);
            }
        }
        let status = match ev.status {
            Status::Ok => "ok",
            Status::Partial => "partial",
            Status::Error => "error",
        };
        tracing::info!(
            target: "quiver::call",
            request_id = ev.request_id,
            called = ev.called_name,
            tool = ev.tool.unwrap_or(""),
            plugin = ev.plugin.unwrap_or(""),
            version = ev.version.unwrap_or(""),
            lane = ev.lane.as_str(),
            status,
            error = ev.error_code.unwrap_or(""),
            duration_us = ev.duration.as_micros() as u64,
            retries = ev.retries,
            policy = %ev.policy,
            "tool call"
        );
    }

    /// A `list_tools` call on the generic lane.
    pub fn record_list_tools(&self) {
        self.list_calls.fetch_add(1, Relaxed);
        if let Some(m) = &self.metrics {
            m.meta_call("list_tools");
        }
    }

    /// A `tool_search` call, and whether it succeeded.
    pub fn record_tool_search(&self, ok: bool) {
        self.search_calls.fetch_add(1, Relaxed);
        if let Some(m) = &self.metrics {
            m.meta_call("tool_search");
        }
        if !ok {
            self.search_failures.fetch_add(1, Relaxed);
        }
    }

    /// A `run_tool` call on the generic lane.
    pub fn record_run_tool(&self) {
        self.run_calls.fetch_add(1, Relaxed);
        if let Some(m) = &self.metrics {
            m.meta_call("run_tool");
        }
    }

    /// A `run_tool` call whose arguments (its own, or the target tool's) failed validation.
    pub fn record_run_tool_invalid(&self) {
        self.run_validation_failures.fetch_add(1, Relaxed);
    }

    /// A surface was built and sent: `n_typed` typed tool schemas among `n_total` (typed plus
    /// meta tools). Called by the catalog/MCP layer.
    pub fn record_surface(&self, n_typed: usize, n_total: usize) {
        self.surfaces.fetch_add(1, Relaxed);
        self.surface_typed.fetch_add(n_typed as u64, Relaxed);
        self.surface_total.fetch_add(n_total as u64, Relaxed);
        self.last_typed.store(n_typed as u64, Relaxed);
        self.last_total.store(n_total as u64, Relaxed);
    }

    /// Retries made so far (all tools).
    pub fn retries(&self) -> u64 {
        self.retries.load(Relaxed)
    }

    /// Calls so far on a lane (every status).
    pub fn calls(&self, lane: Lane) -> u64 {
        self.lanes[lane.index()].calls()
    }

    /// Calls so far that failed with `code`.
    pub fn errors_with_code(&self, code: &str) -> u64 {
        KNOWN_CODES.iter().position(|c| *c == code).map(|i| self.errors[i].load(Relaxed)).unwrap_or(0)
    }

    /// A consistent-enough snapshot (each counter is read once; no global lock).
    pub fn snapshot(&self) -> Stats {
        let mut lanes = BTreeMap::new();
        let mut status = StatusCounts::default();
        let mut calls = 0;
        for lane in [Lane::Typed, Lane::Generic] {
            let c = &self.lanes[lane.index()];
            let s = c.snapshot();
            let n = s.ok + s.partial + s.error;
            calls += n;
            status.ok += s.ok;
            status.partial += s.partial;
            status.error += s.error;
            lanes.insert(lane.as_str().to_owned(), LaneStats::new(n, s, self.lane_durations[lane.index()].snapshot()));
        }
        let errors = KNOWN_CODES
            .iter()
            .zip(&self.errors)
            .filter_map(|(c, n)| {
                let n = n.load(Relaxed);
                (n > 0).then(|| ((*c).to_owned(), n))
            })
            .collect();
        let tools = self
            .tools
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(k, v)| (k.clone(), v.snapshot()))
            .collect();
        // Overall durations: merge both lanes' percentiles by taking the busier lane's figures
        // would be wrong; recompute from a merged histogram instead.
        let merged = Histogram::default();
        for h in &self.lane_durations {
            for (m, b) in merged.buckets.iter().zip(&h.buckets) {
                m.fetch_add(b.load(Relaxed), Relaxed);
            }
            merged.max_us.fetch_max(h.max_us.load(Relaxed), Relaxed);
        }
        Stats {
            calls,
            status,
            lanes,
            tools,
            errors,
            duration_ms: merged.snapshot(),
            retries: self.retries.load(Relaxed),
            generic: GenericStats {
                list_calls: self.list_calls.load(Relaxed),
                run_calls: self.run_calls.load(Relaxed),
                run_validation_failures: self.run_validation_failures.load(Relaxed),
                search_calls: self.search_calls.load(Relaxed),
                search_failures: self.search_failures.load(Relaxed),
            },
            surfaces: SurfaceCounts {
                n_surfaces: self.surfaces.load(Relaxed),
                typed_schemas: self.surface_typed.load(Relaxed),
                total_schemas: self.surface_total.load(Relaxed),
                last_typed: self.last_typed.load(Relaxed),
                last_total: self.last_total.load(Relaxed),
            },
            unreadable_lines: 0,
            cut_last_line: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev<'a>(tool: &'a str, counters: &'a ToolCounters, action: &'a str) -> CallEvent<'a> {
        CallEvent {
            request_id: "r-1",
            called_name: tool,
            tool: Some(tool),
            plugin: Some("p"),
            version: Some("1.0.0"),
            lane: Lane::Typed,
            status: Status::Ok,
            error_code: None,
            duration: Duration::from_micros(10),
            retries: 0,
            policy: &"",
            tool_counters: Some(counters),
            action: Some(action),
        }
    }

    fn series(text: &str, name: &str) -> f64 {
        text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok()).unwrap_or(0.0)
    }

    /// A hot swap hands the router a new version of a tool whose actions changed: the handles it
    /// gets must count the new actions, and the tool's totals must carry on across the swap.
    #[test]
    fn a_hot_swapped_tool_gets_handles_for_its_new_actions_and_keeps_its_totals() {
        let metrics = Arc::new(crate::Metrics::new());
        let counters = Counters::with_metrics(metrics.clone());
        let v1 = counters.tool("fs_edit", &["replace"]);
        counters.record_call(&ev("fs_edit", &v1, "replace"));
        // Version 2 adds `insert`.
        let v2 = counters.tool("fs_edit", &["replace", "insert"]);
        counters.record_call(&ev("fs_edit", &v2, "insert"));
        counters.record_call(&ev("fs_edit", &v2, "replace"));
        let text = metrics.render();
        assert_eq!(
            series(&text, r#"quiver_tool_action_calls_total{tool="fs_edit",action="insert",status="ok"}"#),
            1.0,
            "the new action is counted:\n{text}"
        );
        assert_eq!(
            series(&text, r#"quiver_tool_action_calls_total{tool="fs_edit",action="replace",status="ok"}"#),
            2.0,
            "{text}"
        );
        assert_eq!(series(&text, r#"quiver_tool_calls_total{tool="fs_edit",lane="typed",status="ok"}"#), 3.0, "{text}");
        let stats = counters.snapshot();
        assert_eq!(stats.tools["fs_edit"].calls, 3, "the totals carry on across the swap");
        // The same action set again (an unrelated rescan) returns the same handles.
        assert!(Arc::ptr_eq(&v2, &counters.tool("fs_edit", &["replace", "insert"])));
    }

    #[test]
    fn histogram_buckets_are_monotonic_and_quantiles_close() {
        let mut last = 0;
        for us in [0u64, 1, 7, 8, 9, 15, 16, 100, 1000, 123_456, 10_000_000] {
            let i = Histogram::index(us);
            assert!(i >= last, "{us}");
            assert!(Histogram::lower(i) <= us, "{us} -> {i} lower {}", Histogram::lower(i));
            assert!(i + 1 >= Histogram::N || Histogram::lower(i + 1) > us, "{us}");
            last = i;
        }
        let h = Histogram::default();
        for ms in 1..=100u64 {
            h.record(Duration::from_millis(ms));
        }
        let s = h.snapshot();
        assert!((s.p50 - 50.0).abs() < 50.0 * 0.15, "{s:?}");
        assert!((s.p95 - 95.0).abs() < 95.0 * 0.15, "{s:?}");
        assert_eq!(s.max, 100.0);
    }

    #[test]
    fn counters_add_up_per_lane_tool_and_code() {
        let c = Counters::new();
        let t = c.tool("echo", &[]);
        let policy = "approval:not-required";
        let ev = |lane, status, code| CallEvent {
            request_id: "r",
            called_name: "echo",
            tool: Some("echo"),
            plugin: Some("p"),
            version: Some("1.0.0"),
            lane,
            status,
            error_code: code,
            duration: Duration::from_millis(2),
            retries: 1,
            policy: &policy,
            tool_counters: Some(&t),
            action: None,
        };
        c.record_call(&ev(Lane::Typed, Status::Ok, None));
        c.record_call(&ev(Lane::Generic, Status::Error, Some("timeout")));
        c.record_call(&ev(Lane::Generic, Status::Ok, None));
        c.record_run_tool();
        c.record_run_tool_invalid();
        c.record_list_tools();
        c.record_surface(5, 8);
        t.set_breaker(BreakerState::Open);
        t.set_breaker(BreakerState::Open);
        let s = c.snapshot();
        assert_eq!(s.calls, 3);
        assert_eq!(s.retries, 3);
        assert_eq!(s.lanes["typed"].success_rate, 1.0);
        assert_eq!(s.lanes["generic"].success_rate, 0.5);
        assert_eq!(s.errors["timeout"], 1);
        assert_eq!(s.tools["echo"].calls, 3);
        assert_eq!(s.tools["echo"].breaker, Some(BreakerState::Open));
        assert_eq!(s.tools["echo"].breaker_opens, 1);
        assert_eq!((s.generic.list_calls, s.generic.run_calls, s.generic.run_validation_failures), (1, 1, 1));
        assert_eq!((s.surfaces.typed_schemas, s.surfaces.total_schemas), (5, 8));
        assert_eq!(c.errors_with_code("timeout"), 1);
    }
}
