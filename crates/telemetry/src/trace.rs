//! Per-call trace records: what a call hands the trace exporter, and the queue it goes through.
//!
//! Trace export is "record, don't build": on the call path a call with export on keeps a
//! fixed-size [`CallTrace`] (one raw clock-counter read per stage boundary, the call's typed attributes, the
//! client's `traceparent` as sent) and hands it at its end to [`TraceExport::send`], a bounded
//! non-blocking queue (full: the record is dropped and counted; a call never waits). The
//! exporter thread (`otlp.rs`, feature `otlp`) turns records into OpenTelemetry spans with
//! explicit timestamps and parents. Export off, a call holds no record: one branch on an
//! `Option` per stage boundary.
//!
//! Records carry no argument values, messages or secrets: tool, action, lane, status, error
//! code, request id, stage and host-service timings only.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use quiver_abi::Status;

use crate::Lane;

/// The pipeline stages a call's span has a child for, in order (a stage boundary marked by
/// [`CallTrace::stage_done`] ends the next one in this list).
pub const TRACE_STAGES: [&str; 7] = ["resolve", "scopes", "validation", "rate_limit", "approval", "dispatch", "output"];

/// Records a queue holds before calls' records are dropped (and counted).
pub const TRACE_QUEUE: usize = 4096;

/// A client's W3C trace context as sent in a request's `_meta` (`traceparent`, `tracestate`).
/// Parsed once, by the exporter (a malformed one is ignored there: the call starts a trace of
/// its own, as W3C Trace Context asks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceParent {
    /// `traceparent` as sent.
    pub traceparent: String,
    /// `tracestate` as sent (kept in the exported context).
    pub tracestate: Option<String>,
}

impl TraceParent {
    /// The trace context of a request whose `_meta` holds `traceparent` (and maybe `tracestate`).
    pub fn from_meta(traceparent: Option<&str>, tracestate: Option<&str>) -> Option<TraceParent> {
        traceparent.map(|tp| TraceParent {
            traceparent: tp.to_owned(),
            tracestate: tracestate.filter(|s| !s.is_empty()).map(str::to_owned),
        })
    }
}

/// A host service a tool used during a call (each round trip gets a child span).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostService {
    /// A log line for the client.
    Log,
    /// A progress report.
    Progress,
    /// Asking the user (MCP elicitation).
    Elicitation,
    /// Asking the client's model (MCP sampling).
    Sampling,
}

impl HostService {
    /// The span name (`host.log`, `host.progress`, `host.elicitation`, `host.sampling`).
    pub fn span_name(self) -> &'static str {
        match self {
            HostService::Log => "host.log",
            HostService::Progress => "host.progress",
            HostService::Elicitation => "host.elicitation",
            HostService::Sampling => "host.sampling",
        }
    }
}

/// One host-service round trip: which service, when it started and ended (on the record's
/// time line, [`CallTrace::host_trips`]).
#[derive(Debug, Clone, Copy)]
pub struct HostTrip {
    pub service: HostService,
    pub start: Instant,
    pub end: Instant,
}

/// When a host-service round trip started: a read of the clock the record's stage boundaries
/// are read on ([`HostTrips::begin`]), so trips and stages are placed on one time line.
#[derive(Debug, Clone, Copy)]
pub struct TripStart(u64);

/// A round trip as recorded: raw reads of the record's clock.
#[derive(Debug, Clone, Copy)]
pub struct RawTrip {
    service: HostService,
    start: u64,
    end: u64,
}

/// The host-service round trips of one call, appended from whichever thread the tool calls the
/// service on (only calls whose tool uses a host service take the lock).
#[derive(Debug, Default)]
pub struct HostTrips(Mutex<Vec<RawTrip>>);

impl HostTrips {
    /// A round trip starts now.
    pub fn begin() -> TripStart {
        TripStart(clock().raw())
    }

    /// A round trip of `service` that started at `start` and ends now.
    pub fn record(&self, service: HostService, start: TripStart) {
        let trip = RawTrip { service, start: start.0, end: clock().raw() };
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(trip);
    }

    /// Takes the round trips so far, in the order they ended.
    pub fn take(&self) -> Vec<RawTrip> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// The trace record of one call (see the module docs).
#[derive(Debug)]
pub struct CallTrace {
    lane: Lane,
    parent: Option<TraceParent>,
    /// When the call started (the pipeline's own clock read).
    started: Instant,
    /// Raw reads of the process's [`quanta::Clock`] (the TSC where it is stable: a few ns each,
    /// against ~20 ns for `Instant::now`): `marks[0]` when the record started, `marks[i]` when
    /// stage `i - 1` ended. Turned into times only by the exporter ([`CallTrace::stages`]).
    marks: [u64; TRACE_STAGES.len() + 1],
    clock: &'static quanta::Clock,
    /// How many of `marks` are set (at least 1).
    reached: u8,
    host: Vec<RawTrip>,
    tool: Option<String>,
    action: Option<String>,
    request_id: String,
    status: Status,
    error_code: Option<Cow<'static, str>>,
}

impl CallTrace {
    /// The record of a call of `lane` that started at `started`, under the client's `parent`.
    pub fn start(lane: Lane, started: Instant, parent: Option<TraceParent>) -> CallTrace {
        let clock = clock();
        CallTrace {
            lane,
            parent,
            started,
            marks: [clock.raw(); TRACE_STAGES.len() + 1],
            clock,
            reached: 1,
            host: Vec::new(),
            tool: None,
            action: None,
            request_id: String::new(),
            status: Status::Ok,
            error_code: None,
        }
    }

    /// The current stage ended now (and the next one starts): one clock read.
    #[inline]
    pub fn stage_done(&mut self) {
        if let Some(m) = self.marks.get_mut(self.reached as usize) {
            *m = self.clock.raw();
            self.reached += 1;
        }
    }

    /// How the call ended: the tool and action it reached, its request id, status and error
    /// code (`Cow::Borrowed` for the codes the host knows: no allocation).
    pub fn finish(
        &mut self,
        tool: Option<&str>,
        action: Option<&str>,
        request_id: &str,
        status: Status,
        error_code: Option<Cow<'static, str>>,
    ) {
        self.tool = tool.map(str::to_owned);
        self.action = action.map(str::to_owned);
        self.request_id = request_id.to_owned();
        self.status = status;
        self.error_code = error_code;
    }

    /// The call's host-service round trips ([`HostTrips::take`] at its end).
    pub fn set_host_trips(&mut self, trips: Vec<RawTrip>) {
        self.host = trips;
    }

    pub fn lane(&self) -> Lane {
        self.lane
    }
    pub fn parent(&self) -> Option<&TraceParent> {
        self.parent.as_ref()
    }
    pub fn tool(&self) -> Option<&str> {
        self.tool.as_deref()
    }
    pub fn action(&self) -> Option<&str> {
        self.action.as_deref()
    }
    pub fn request_id(&self) -> &str {
        &self.request_id
    }
    pub fn status(&self) -> Status {
        self.status
    }
    pub fn error_code(&self) -> Option<&str> {
        self.error_code.as_deref()
    }
    /// When the call started.
    pub fn started(&self) -> Instant {
        self.started
    }
    /// The time of a raw mark: the call's start plus the clock's delta since `marks[0]`.
    fn at(&self, raw: u64) -> Instant {
        self.started + Duration::from_nanos(self.clock.delta_as_nanos(self.marks[0], raw))
    }
    /// When the call ended (its last stage boundary).
    pub fn ended(&self) -> Instant {
        self.at(self.marks[self.reached as usize - 1])
    }
    /// The stages the call went through: name, start, end.
    pub fn stages(&self) -> impl Iterator<Item = (&'static str, Instant, Instant)> + '_ {
        TRACE_STAGES
            .iter()
            .zip(self.marks.windows(2))
            .take(self.reached as usize - 1)
            .map(|(n, w)| (*n, self.at(w[0]), self.at(w[1])))
    }
    /// The host-service round trips, on the time line of the stages (one clock for both: a
    /// trip made while a stage ran lies within it).
    pub fn host_trips(&self) -> impl Iterator<Item = HostTrip> + '_ {
        self.host.iter().map(|t| HostTrip { service: t.service, start: self.at(t.start), end: self.at(t.end) })
    }
}

/// What goes through the queue to the exporter thread.
#[doc(hidden)]
#[expect(clippy::large_enum_variant, reason = "a record is stored in its queue slot: no allocation per call")]
pub enum TraceMessage {
    /// A finished call.
    Call(CallTrace),
    /// Export everything queued so far, then answer.
    Flush(SyncSender<()>),
}

/// The sending side of the trace queue (cheap to clone; one per router).
#[derive(Clone)]
pub struct TraceExport {
    tx: SyncSender<TraceMessage>,
    dropped: Arc<AtomicU64>,
}

impl std::fmt::Debug for TraceExport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceExport").field("dropped", &self.dropped()).finish_non_exhaustive()
    }
}

impl TraceExport {
    /// A queue of `capacity` records and its receiving end (the exporter's, or a test's).
    #[doc(hidden)]
    pub fn channel(capacity: usize) -> (TraceExport, Receiver<TraceMessage>) {
        clock(); // calibrated here, not on the first traced call
        let (tx, rx) = std::sync::mpsc::sync_channel(capacity);
        (TraceExport { tx, dropped: Arc::new(AtomicU64::new(0)) }, rx)
    }

    /// Hands a finished call's record to the exporter; never blocks (a full queue drops it and
    /// counts it in [`TraceExport::dropped`]).
    #[inline]
    pub fn send(&self, trace: CallTrace) {
        match self.tx.try_send(TraceMessage::Call(trace)) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Records dropped so far because the queue was full (or the exporter gone).
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Waits until the exporter handled every record sent before (false: no exporter).
    pub fn flush(&self) -> bool {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.tx.send(TraceMessage::Flush(tx)).is_ok() && rx.recv().is_ok()
    }
}

/// The clock trace records read their stage boundaries from (calibrated once per process).
fn clock() -> &'static quanta::Clock {
    static CLOCK: OnceLock<quanta::Clock> = OnceLock::new();
    CLOCK.get_or_init(quanta::Clock::new)
}

/// The process's trace export, set once by [`crate::init`] when an OTLP endpoint is configured.
static EXPORT: OnceLock<TraceExport> = OnceLock::new();

/// The trace export [`crate::init`] started, if any: give it to the router
/// (`Router::with_traces`) so calls record their trace.
pub fn trace_export() -> Option<TraceExport> {
    EXPORT.get().cloned()
}

/// Makes `export` the process's trace export (the first one set wins).
#[cfg_attr(not(feature = "otlp"), allow(dead_code))]
pub(crate) fn set_trace_export(export: TraceExport) {
    let _ = EXPORT.set(export);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_trip_made_during_a_stage_lies_within_it() {
        // The pipeline's start is read before the record starts (and may be read long before,
        // on a loaded machine); a trip made between two boundaries must still fall between them.
        let start = Instant::now();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut t = CallTrace::start(Lane::Typed, start, None);
        t.stage_done();
        let host = HostTrips::default();
        let trip = HostTrips::begin();
        host.record(HostService::Elicitation, trip);
        t.stage_done();
        t.set_host_trips(host.take());
        let stages: Vec<_> = t.stages().collect();
        let trips: Vec<_> = t.host_trips().collect();
        assert!(stages[1].1 <= trips[0].start && trips[0].end <= stages[1].2, "{stages:?} {trips:?}");
    }

    #[test]
    fn stages_are_the_spans_between_consecutive_boundaries() {
        let start = Instant::now();
        let mut t = CallTrace::start(Lane::Typed, start, None);
        assert_eq!(t.stages().count(), 0);
        t.stage_done();
        t.stage_done();
        let stages: Vec<_> = t.stages().collect();
        assert_eq!(stages.iter().map(|s| s.0).collect::<Vec<_>>(), ["resolve", "scopes"]);
        assert_eq!(stages[0].1, start);
        assert_eq!(stages[0].2, stages[1].1, "one clock read ends a stage and starts the next");
        assert_eq!(t.ended(), stages[1].2);
        // More boundaries than stages are ignored.
        for _ in 0..20 {
            t.stage_done();
        }
        assert_eq!(t.stages().count(), TRACE_STAGES.len());
    }

    #[test]
    fn a_full_queue_drops_and_counts_without_blocking() {
        let (export, rx) = TraceExport::channel(2);
        for _ in 0..5 {
            export.send(CallTrace::start(Lane::Generic, Instant::now(), None));
        }
        assert_eq!(export.dropped(), 3);
        assert_eq!(rx.try_iter().count(), 2);
        drop(rx);
        export.send(CallTrace::start(Lane::Generic, Instant::now(), None));
        assert_eq!(export.dropped(), 4, "no exporter: dropped too");
        assert!(!export.flush());
    }

    #[test]
    fn a_trace_parent_is_kept_as_sent_and_an_empty_tracestate_dropped() {
        assert_eq!(TraceParent::from_meta(None, Some("a=1")), None);
        let p = TraceParent::from_meta(Some("00-x"), Some("")).unwrap();
        assert_eq!((p.traceparent.as_str(), p.tracestate), ("00-x", None));
    }
}
