//! The benchmarks' discarding dispatch records trace spans only. A test binary of its own: tracing
//! caches each callsite's interest across every dispatcher alive in the process, so a test
//! running beside others that install dispatchers could see a span enabled by theirs.
#![cfg(feature = "otlp")]

#[test]
fn the_discarding_dispatch_records_trace_spans_only() {
    let (dispatch, _provider) = quiver_telemetry::discarding_dispatch();
    tracing::dispatcher::with_default(&dispatch, || {
        let call = tracing::info_span!(target: "quiver::trace", "quiver.call");
        assert!(!call.is_disabled(), "trace spans are recorded");
        let other = tracing::info_span!("not.a.trace.span");
        assert!(other.is_disabled(), "other spans are not");
    });
}
