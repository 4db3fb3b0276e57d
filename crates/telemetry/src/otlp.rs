//! Trace export over OTLP/HTTP with protobuf bodies (feature `otlp`).
//!
//! The spans of [`crate::TRACE_TARGET`] (a call, its stages, its host-service round trips) go
//! through `tracing-opentelemetry` to the SDK's batch span processor (its own thread) and the
//! OTLP exporter (reqwest's blocking client; no gRPC). A client's W3C trace context arrives as
//! the fields of a [`crate::REMOTE_PARENT_SPAN`] span ([`crate::remote_parent_span`]): the
//! [`RemoteParent`] layer makes it the current OpenTelemetry context while that span is
//! entered, so the call span created inside it becomes the client span's child. The carrier
//! span itself is never exported.

use std::cell::RefCell;

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{TraceContextExt, TracerProvider};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::span;
use tracing::{Subscriber, field};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

use crate::logging::{BoxedLayer, REMOTE_PARENT_SPAN, TRACE_TARGET};

/// The tracer provider (keep it to flush at exit) and the layers that feed it.
pub(crate) fn layers(settings: &crate::OtlpSettings) -> Result<(SdkTracerProvider, Vec<BoxedLayer>), String> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(settings.traces_url.clone())
        .build()
        .map_err(|e| format!("cannot export traces to {}: {e}", settings.traces_url))?;
    let resource = opentelemetry_sdk::Resource::builder().with_service_name(settings.service_name.clone()).build();
    let provider = SdkTracerProvider::builder().with_resource(resource).with_batch_exporter(exporter).build();
    let layers = trace_layers(&provider);
    Ok((provider, layers))
}

/// The layers that turn [`TRACE_TARGET`] spans into OpenTelemetry spans of `provider`.
fn trace_layers(provider: &SdkTracerProvider) -> Vec<BoxedLayer> {
    let tracer = provider.tracer("quiver");
    let export = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_level(false)
        .with_filter(filter_fn(|m| m.target() == TRACE_TARGET && m.name() != REMOTE_PARENT_SPAN))
        .boxed();
    let remote =
        RemoteParent.with_filter(filter_fn(|m| m.target() == TRACE_TARGET && m.name() == REMOTE_PARENT_SPAN)).boxed();
    vec![export, remote]
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

/// How many spans the exporters of [`discarding_dispatch`] dropped so far (flush first).
#[doc(hidden)]
pub fn discarded_spans() -> u64 {
    DISCARDED.load(std::sync::atomic::Ordering::Relaxed)
}

/// For benchmarks: a dispatcher with exactly the trace layers `quiver serve --otlp` installs
/// (no log layer), whose spans are built, recorded and handed to the batch processor as in
/// production, then dropped instead of sent. Keep the provider alive while measuring.
#[doc(hidden)]
pub fn discarding_dispatch() -> (tracing::Dispatch, SdkTracerProvider) {
    use tracing_subscriber::layer::SubscriberExt;
    let provider = SdkTracerProvider::builder().with_batch_exporter(Discard).build();
    let subscriber = tracing_subscriber::registry().with(trace_layers(&provider));
    (tracing::Dispatch::new(subscriber), provider)
}

/// The trace context a client sent (`traceparent`, `tracestate`), read from a span's fields.
#[derive(Default)]
struct Carrier {
    traceparent: Option<String>,
    tracestate: Option<String>,
}

impl field::Visit for Carrier {
    fn record_str(&mut self, field: &field::Field, value: &str) {
        match field.name() {
            "traceparent" => self.traceparent = Some(value.to_owned()),
            "tracestate" if !value.is_empty() => self.tracestate = Some(value.to_owned()),
            _ => {}
        }
    }
    fn record_debug(&mut self, _field: &field::Field, _value: &dyn std::fmt::Debug) {}
}

impl Extractor for Carrier {
    fn get(&self, key: &str) -> Option<&str> {
        match key {
            "traceparent" => self.traceparent.as_deref(),
            "tracestate" => self.tracestate.as_deref(),
            _ => None,
        }
    }
    fn keys(&self) -> Vec<&str> {
        vec!["traceparent", "tracestate"]
    }
}

/// The remote context of a carrier span (stored in its extensions).
struct RemoteContext(opentelemetry::Context);

thread_local! {
    /// The contexts this thread attached, by carrier span, innermost last.
    static ATTACHED: RefCell<Vec<(span::Id, opentelemetry::ContextGuard)>> = const { RefCell::new(Vec::new()) };
}

/// Makes a carrier span's remote context the current OpenTelemetry context while it is entered.
struct RemoteParent;

impl<S> Layer<S> for RemoteParent
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &span::Attributes<'_>, id: &span::Id, ctx: Context<'_, S>) {
        let mut carrier = Carrier::default();
        attrs.record(&mut carrier);
        if carrier.traceparent.is_none() {
            return;
        }
        let cx = TraceContextPropagator::new().extract(&carrier);
        // A malformed `traceparent` is ignored (the call starts a trace of its own), as W3C
        // Trace Context asks.
        if cx.span().span_context().is_valid()
            && let Some(span) = ctx.span(id)
        {
            span.extensions_mut().insert(RemoteContext(cx));
        }
    }

    fn on_enter(&self, id: &span::Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let ext = span.extensions();
        if let Some(RemoteContext(cx)) = ext.get::<RemoteContext>() {
            let guard = cx.clone().attach();
            ATTACHED.with(|a| a.borrow_mut().push((id.clone(), guard)));
        }
    }

    fn on_exit(&self, id: &span::Id, _ctx: Context<'_, S>) {
        ATTACHED.with(|a| {
            let mut a = a.borrow_mut();
            if let Some(i) = a.iter().rposition(|(x, _)| x == id) {
                a.remove(i);
            }
        });
    }
}

/// The spans of a test subscriber with the export layers over an in-memory exporter are
/// checked end to end in `crates/cli/tests/it/traces.rs` (a real server, a real collector).
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_carrier_reads_both_fields_and_a_bad_traceparent_gives_no_context() {
        let good = Carrier {
            traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
            tracestate: Some("vendor=1".into()),
        };
        let cx = TraceContextPropagator::new().extract(&good);
        let sc = cx.span().span_context().clone();
        assert!(sc.is_valid() && sc.is_remote());
        assert_eq!(sc.trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(sc.span_id().to_string(), "00f067aa0ba902b7");
        assert_eq!(sc.trace_state().get("vendor"), Some("1"));
        let bad = Carrier { traceparent: Some("00-zz-00f067aa0ba902b7-01".into()), tracestate: None };
        assert!(!TraceContextPropagator::new().extract(&bad).span().span_context().is_valid());
    }
}
