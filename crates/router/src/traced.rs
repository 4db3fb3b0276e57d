//! Trace spans of a call (target `quiver::trace`, exported over OTLP by `quiver-telemetry` when
//! an exporter is configured; otherwise disabled, and each costs one atomic load): the call
//! span with its attributes, and a child span per host-service round trip (log, progress,
//! elicitation, sampling) through a wrapped [`ClientBridge`]. Attributes never carry argument
//! values, messages or secrets: tool, action, lane, status, error code, request id.

use std::sync::Arc;

use quiver_abi::{Status, ToolResponse};
use serde_json::Value;
use tracing::{Instrument, Span, field};

use crate::call::{BoxFuture, ClientBridge, LogLevel};
use crate::{CallMeta, Lane};

/// The span of one call (attributes filled in by [`record_outcome`]).
pub(crate) fn call_span(lane: Lane) -> Span {
    tracing::info_span!(
        target: "quiver::trace",
        "quiver.call",
        otel.kind = "server",
        lane = lane.as_str(),
        tool = field::Empty,
        action = field::Empty,
        status = field::Empty,
        error.code = field::Empty,
        request_id = field::Empty,
        otel.status_code = field::Empty,
    )
}

/// Records what the call reached and how it ended on its span.
pub(crate) fn record_outcome(span: &Span, meta: &CallMeta, response: &ToolResponse) {
    if span.is_disabled() {
        return;
    }
    span.record("tool", meta.tool.as_deref());
    span.record("action", meta.action.as_deref());
    span.record("request_id", meta.request_id.as_str());
    span.record(
        "status",
        match response.status {
            Status::Ok => "ok",
            Status::Partial => "partial",
            Status::Error => "error",
        },
    );
    if let Some(e) = &response.error {
        span.record("error.code", e.code.as_str());
        span.record("otel.status_code", "error");
    }
}

/// `bridge`, with a span per host-service round trip under `call` when traces are on.
pub(crate) fn bridge(bridge: Arc<dyn ClientBridge>, call: &Span) -> Arc<dyn ClientBridge> {
    if call.is_disabled() { bridge } else { Arc::new(TracedBridge { inner: bridge, call: call.clone() }) }
}

struct TracedBridge {
    inner: Arc<dyn ClientBridge>,
    call: Span,
}

impl ClientBridge for TracedBridge {
    fn log(&self, level: LogLevel, message: &str) {
        let _s = tracing::info_span!(target: "quiver::trace", parent: &self.call, "host.log").entered();
        self.inner.log(level, message);
    }
    fn progress(&self, progress: f64, total: Option<f64>, message: &str) {
        let _s = tracing::info_span!(target: "quiver::trace", parent: &self.call, "host.progress").entered();
        self.inner.progress(progress, total, message);
    }
    fn can_elicit(&self) -> bool {
        self.inner.can_elicit()
    }
    fn elicit(&self, request: Value) -> BoxFuture<Result<Value, String>> {
        let span = tracing::info_span!(target: "quiver::trace", parent: &self.call, "host.elicitation");
        Box::pin(self.inner.elicit(request).instrument(span))
    }
    fn can_sample(&self) -> bool {
        self.inner.can_sample()
    }
    fn sample(&self, request: Value) -> BoxFuture<Result<Value, String>> {
        let span = tracing::info_span!(target: "quiver::trace", parent: &self.call, "host.sampling");
        Box::pin(self.inner.sample(request).instrument(span))
    }
}
