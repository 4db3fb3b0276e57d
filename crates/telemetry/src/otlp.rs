//! Trace export over OTLP/HTTP with protobuf bodies (feature `otlp`).
//!
//! Calls hand their [`CallTrace`] records to a bounded queue (`trace.rs`); one exporter thread
//! (`quiver-traces`) turns each into OpenTelemetry spans with the records' own timestamps (a
//! span per call, a child per pipeline stage and per host-service round trip) and ends them
//! into the SDK's batch span processor, which POSTs them with the OTLP exporter (reqwest's
//! blocking client; no gRPC). A client's W3C `traceparent` is parsed here, once, by the SDK's
//! propagator: a valid one is the call span's remote parent, a malformed one is ignored.
//!
//! The thread never makes a call wait: it blocks on the queue only while no records arrive
//! (the first record after a quiet spell wakes it), and otherwise sleeps between batches, so a
//! busy server's calls enqueue without waking anyone.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{Span as _, SpanKind, Status as SpanStatus, TraceContextExt, Tracer as _, TracerProvider};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracer, SdkTracerProvider};

use crate::trace::{CallTrace, TRACE_QUEUE, TRACE_STAGES, TraceExport, TraceMessage};

/// How long the exporter thread sleeps between batches while records keep arriving.
const BATCH_INTERVAL: Duration = Duration::from_millis(10);

/// The running exporter thread; dropping it exports what is queued, flushes the batch
/// processor and stops the thread.
pub(crate) struct ExportThread {
    export: TraceExport,
    thread: Option<JoinHandle<()>>,
    provider: SdkTracerProvider,
    /// Set when the thread should end (after a last drain).
    stop: Arc<AtomicBool>,
}

/// Starts exporting calls' traces to `settings.traces_url`.
pub(crate) fn start(settings: &crate::OtlpSettings) -> Result<ExportThread, String> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(settings.traces_url.clone())
        .build()
        .map_err(|e| format!("cannot export traces to {}: {e}", settings.traces_url))?;
    let resource = opentelemetry_sdk::Resource::builder().with_service_name(settings.service_name.clone()).build();
    let provider = SdkTracerProvider::builder().with_resource(resource).with_span_processor(batch(exporter)).build();
    ExportThread::spawn(provider)
}

/// The SDK's batch processor over `exporter`, its span queue sized for a full record queue
/// (8 spans a call; the SDK's default of 2048 spans drops spans of bursts over 256 calls)
/// unless `OTEL_BSP_MAX_QUEUE_SIZE` says otherwise.
fn batch<E: opentelemetry_sdk::trace::SpanExporter + 'static>(exporter: E) -> BatchSpanProcessor {
    let mut config = BatchConfigBuilder::default();
    if std::env::var_os("OTEL_BSP_MAX_QUEUE_SIZE").is_none() {
        config = config.with_max_queue_size(TRACE_QUEUE * (TRACE_STAGES.len() + 1));
    }
    BatchSpanProcessor::builder(exporter).with_batch_config(config.build()).build()
}

impl ExportThread {
    fn spawn(provider: SdkTracerProvider) -> Result<ExportThread, String> {
        let (export, rx) = TraceExport::channel(TRACE_QUEUE);
        let stop = Arc::new(AtomicBool::new(false));
        let tracer = provider.tracer("quiver");
        let thread = {
            let (stop, export) = (stop.clone(), export.clone());
            std::thread::Builder::new()
                .name("quiver-traces".into())
                .spawn(move || run(&rx, &tracer, &stop, &export))
                .map_err(|e| format!("cannot start the trace exporter thread: {e}"))?
        };
        Ok(ExportThread { export, thread: Some(thread), provider, stop })
    }

    /// The queue calls send their records to.
    pub(crate) fn export(&self) -> &TraceExport {
        &self.export
    }

    /// Exports every record queued so far and waits until the batch processor handed them
    /// to its exporter.
    pub(crate) fn flush(&self) {
        self.export.flush();
        let _ = self.provider.force_flush();
    }
}

impl Drop for ExportThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Wakes the thread if it waits for records (the answer comes after the last drain).
        self.export.flush();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Err(e) = self.provider.shutdown() {
            eprintln!("quiver: trace export: cannot flush the last spans: {e}");
        }
    }
}

/// The exporter thread: waits for records, then exports them in batches until the queue stays
/// empty for one interval.
fn run(rx: &Receiver<TraceMessage>, tracer: &SdkTracer, stop: &AtomicBool, export: &TraceExport) {
    let mut warned = 0;
    loop {
        // Quiet: block (the next record wakes this thread).
        let first = match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(m) => m,
            Err(RecvTimeoutError::Timeout) => {
                warned = warn_dropped(export, warned);
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => return,
        };
        let mut clock = Clock::now();
        handle(first, tracer, &clock);
        // Busy: sleep between drains, so senders find no waiting receiver to wake.
        loop {
            if stop.load(Ordering::Acquire) {
                for m in rx.try_iter() {
                    handle(m, tracer, &clock);
                }
                return;
            }
            std::thread::sleep(BATCH_INTERVAL);
            clock = Clock::now();
            let mut n = 0usize;
            for m in rx.try_iter() {
                handle(m, tracer, &clock);
                n += 1;
            }
            warned = warn_dropped(export, warned);
            if n == 0 {
                break;
            }
        }
    }
}

/// Logs the records dropped since the last warning (a full queue).
fn warn_dropped(export: &TraceExport, warned: u64) -> u64 {
    let dropped = export.dropped();
    if dropped > warned {
        tracing::warn!(dropped = dropped - warned, "trace export cannot keep up; calls' traces were dropped");
    }
    dropped
}

fn handle(message: TraceMessage, tracer: &SdkTracer, clock: &Clock) {
    match message {
        TraceMessage::Call(trace) => export_call(tracer, clock, &trace),
        TraceMessage::Flush(done) => {
            let _ = done.send(());
        }
    }
}

/// Wall-clock times of `Instant`s (one reading of both clocks per batch).
struct Clock {
    instant: Instant,
    system: SystemTime,
}

impl Clock {
    fn now() -> Clock {
        Clock { instant: Instant::now(), system: SystemTime::now() }
    }
    fn at(&self, t: Instant) -> SystemTime {
        match self.instant.checked_duration_since(t) {
            Some(ago) => self.system - ago,
            None => self.system + t.duration_since(self.instant),
        }
    }
}

/// One call's spans: the call (kind server, under the client's span when it sent a valid
/// `traceparent`), a child per stage it reached and per host-service round trip.
fn export_call(tracer: &SdkTracer, clock: &Clock, trace: &CallTrace) {
    let parent = trace.parent().map(remote_context).unwrap_or_default();
    let mut attributes = Vec::with_capacity(6);
    attributes.push(KeyValue::new("lane", trace.lane().as_str()));
    if let Some(t) = trace.tool() {
        attributes.push(KeyValue::new("tool", t.to_owned()));
    }
    if let Some(a) = trace.action() {
        attributes.push(KeyValue::new("action", a.to_owned()));
    }
    attributes.push(KeyValue::new("request_id", trace.request_id().to_owned()));
    attributes.push(KeyValue::new(
        "status",
        match trace.status() {
            quiver_abi::Status::Ok => "ok",
            quiver_abi::Status::Partial => "partial",
            quiver_abi::Status::Error => "error",
        },
    ));
    if let Some(code) = trace.error_code() {
        attributes.push(KeyValue::new("error.code", code.to_owned()));
    }
    let mut call = tracer
        .span_builder("quiver.call")
        .with_kind(SpanKind::Server)
        .with_start_time(clock.at(trace.started()))
        .with_attributes(attributes)
        .start_with_context(tracer, &parent);
    if let Some(code) = trace.error_code() {
        call.set_status(SpanStatus::error(code.to_owned()));
    }
    let cx = parent.with_span(call);
    let child = |name: &'static str, start: Instant, end: Instant| {
        let mut span = tracer.span_builder(name).with_start_time(clock.at(start)).start_with_context(tracer, &cx);
        span.end_with_timestamp(clock.at(end));
    };
    for (name, start, end) in trace.stages() {
        child(name, start, end);
    }
    for trip in trace.host_trips() {
        child(trip.service.span_name(), trip.start, trip.end);
    }
    cx.span().end_with_timestamp(clock.at(trace.ended()));
}

/// The context of a client's span (empty when its `traceparent` is malformed).
fn remote_context(parent: &crate::TraceParent) -> Context {
    let cx = TraceContextPropagator::new().extract(&Carrier(parent));
    if cx.span().span_context().is_valid() { cx } else { Context::new() }
}

/// The trace context a client sent, as the propagator reads it.
struct Carrier<'a>(&'a crate::TraceParent);

impl Extractor for Carrier<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        match key {
            "traceparent" => Some(self.0.traceparent.as_str()),
            "tracestate" => self.0.tracestate.as_deref(),
            _ => None,
        }
    }
    fn keys(&self) -> Vec<&str> {
        vec!["traceparent", "tracestate"]
    }
}

/// An exporter that counts and drops what it is given (benchmarks).
#[derive(Debug)]
struct Discard;

/// Spans [`Discard`] was given.
static DISCARDED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl opentelemetry_sdk::trace::SpanExporter for Discard {
    async fn export(&self, batch: Vec<opentelemetry_sdk::trace::SpanData>) -> opentelemetry_sdk::error::OTelSdkResult {
        DISCARDED.fetch_add(batch.len() as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
}

/// How many spans the exporters of [`discarding_export`] dropped so far
/// ([`DiscardingExport::flush`] first).
#[doc(hidden)]
pub fn discarded_spans() -> u64 {
    DISCARDED.load(std::sync::atomic::Ordering::Relaxed)
}

/// For benchmarks: trace export exactly as `quiver serve --otlp` runs it (the queue, the
/// exporter thread, the SDK's batch processor), whose spans are dropped by the exporter
/// instead of sent. Give [`DiscardingExport::export`] to a router; keep the value alive while
/// measuring.
#[doc(hidden)]
pub fn discarding_export() -> DiscardingExport {
    let provider = SdkTracerProvider::builder().with_span_processor(batch(Discard)).build();
    DiscardingExport(ExportThread::spawn(provider).expect("the trace exporter thread starts"))
}

/// See [`discarding_export`].
#[doc(hidden)]
pub struct DiscardingExport(ExportThread);

impl DiscardingExport {
    /// The queue to hand to a router.
    pub fn export(&self) -> TraceExport {
        self.0.export().clone()
    }
    /// Exports everything queued so far (the spans reach [`discarded_spans`]).
    pub fn flush(&self) {
        self.0.flush();
    }
    /// The exporter thread's id (to read its CPU time).
    pub fn thread(&self) -> Option<std::thread::Thread> {
        self.0.thread.as_ref().map(|t| t.thread().clone())
    }
}

/// The spans of one call through the real exporter thread and SDK are checked end to end in
/// `crates/cli/tests/it/traces.rs` (a real server, a real collector).
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_context_reads_both_fields_and_a_bad_traceparent_gives_none() {
        let good = crate::TraceParent {
            traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
            tracestate: Some("vendor=1".into()),
        };
        let cx = remote_context(&good);
        let sc = cx.span().span_context().clone();
        assert!(sc.is_valid() && sc.is_remote());
        assert_eq!(sc.trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(sc.span_id().to_string(), "00f067aa0ba902b7");
        assert_eq!(sc.trace_state().get("vendor"), Some("1"));
        let bad = crate::TraceParent { traceparent: "00-zz-00f067aa0ba902b7-01".into(), tracestate: None };
        assert!(!remote_context(&bad).has_active_span());
    }

    #[test]
    fn clock_maps_instants_before_and_after_its_reading() {
        let clock = Clock::now();
        let d = Duration::from_millis(5);
        assert_eq!(clock.at(clock.instant - d), clock.system - d);
        assert_eq!(clock.at(clock.instant + d), clock.system + d);
    }
}
