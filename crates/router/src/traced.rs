//! Trace records of calls (exported over OTLP by `quiver-telemetry` when the router was given a
//! [`TraceExport`]): a call with export on keeps a [`CallTrace`] in its context (stage
//! boundaries marked by the pipeline, one clock read each), its host-service round trips
//! (log, progress, elicitation, sampling) timed through a wrapped [`ClientBridge`], and hands
//! it to the exporter's queue when it ends. Export off, a call holds no record and its bridge
//! is not wrapped. Records never carry argument values, messages or secrets: tool, action,
//! lane, status, error code, request id.

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};

use quiver_abi::ToolResponse;
use quiver_telemetry::{CallTrace, HostService, HostTrips, RawTrip, TraceExport, TraceParent};
use serde_json::Value;

use crate::call::{BoxFuture, ClientBridge, LogLevel};
use crate::codes::Code;
use crate::stages::CallContext;

/// A call's trace record and the bridge that times its host services (one allocation).
pub(crate) struct Traced {
    record: CallTrace,
    bridge: Arc<TracedBridge>,
}

impl Traced {
    /// Marks a stage boundary (see [`CallTrace::stage_done`]).
    #[inline]
    pub(crate) fn stage_done(&mut self) {
        self.record.stage_done();
    }
}

/// Starts the trace record of `cx` (export on): the bridge is wrapped to time host services.
pub(crate) fn start(cx: &mut CallContext, parent: Option<Box<TraceParent>>) {
    let bridge =
        Arc::new(TracedBridge { inner: cx.bridge.clone(), host: HostTrips::default(), deferred: OnceLock::new() });
    cx.bridge = bridge.clone();
    cx.trace =
        Some(Box::new(Traced { record: CallTrace::start(cx.meta.lane, cx.started, parent.map(|p| *p)), bridge }));
}

/// Records how the call ended and hands its record to the exporter.
pub(crate) fn finish(export: &TraceExport, traced: Traced, cx: &CallContext, response: &ToolResponse) {
    let Traced { mut record, bridge } = traced;
    let meta = &cx.meta;
    let code = response.error.as_ref().map(|e| match Code::of(e) {
        Some(c) => Cow::Borrowed(c.as_str()),
        None => Cow::Owned(e.code.clone()),
    });
    record.finish(meta.tool(), meta.action.as_deref(), &meta.request_id, response.status, code);
    record.set_host_trips(bridge.take());
    export.send(record);
}

/// A client bridge that times each host-service round trip of one call.
struct TracedBridge {
    inner: Arc<dyn ClientBridge>,
    host: HostTrips,
    /// The round trips that end in a future (elicitation, sampling), made on first use.
    deferred: OnceLock<Arc<HostTrips>>,
}

impl TracedBridge {
    fn deferred(&self) -> Arc<HostTrips> {
        self.deferred.get_or_init(Arc::default).clone()
    }

    /// Every round trip so far.
    fn take(&self) -> Vec<RawTrip> {
        let mut trips = self.host.take();
        if let Some(d) = self.deferred.get() {
            trips.extend(d.take());
        }
        trips
    }
}

impl ClientBridge for TracedBridge {
    fn log(&self, level: LogLevel, message: &str) {
        let start = HostTrips::begin();
        self.inner.log(level, message);
        self.host.record(HostService::Log, start);
    }
    fn progress(&self, progress: f64, total: Option<f64>, message: &str) {
        let start = HostTrips::begin();
        self.inner.progress(progress, total, message);
        self.host.record(HostService::Progress, start);
    }
    fn can_elicit(&self) -> bool {
        self.inner.can_elicit()
    }
    fn elicit(&self, request: Value) -> BoxFuture<Result<Value, String>> {
        let (start, host, answer) = (HostTrips::begin(), self.deferred(), self.inner.elicit(request));
        Box::pin(async move {
            let answer = answer.await;
            host.record(HostService::Elicitation, start);
            answer
        })
    }
    fn can_sample(&self) -> bool {
        self.inner.can_sample()
    }
    fn sample(&self, request: Value) -> BoxFuture<Result<Value, String>> {
        let (start, host, answer) = (HostTrips::begin(), self.deferred(), self.inner.sample(request));
        Box::pin(async move {
            let answer = answer.await;
            host.record(HostService::Sampling, start);
            answer
        })
    }
}
