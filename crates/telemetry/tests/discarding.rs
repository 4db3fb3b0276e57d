//! The benchmarks' discarding export runs the real exporter thread and SDK: a call's record
//! becomes a call span and one child per stage it reached and per host-service round trip.
#![cfg(feature = "otlp")]

use std::time::Instant;

use quiver_telemetry::{CallTrace, HostService, HostTrips, Lane};

#[test]
fn the_discarding_export_turns_a_record_into_its_span_tree() {
    let exporter = quiver_telemetry::discarding_export();
    let export = exporter.export();
    let host = HostTrips::default();
    let mut trace = CallTrace::start(Lane::Typed, Instant::now(), None);
    trace.stage_done();
    trace.stage_done();
    host.record(HostService::Progress, HostTrips::begin());
    trace.finish(Some("tool"), None, "r-1", quiver_abi::Status::Ok, None);
    trace.set_host_trips(host.take());
    exporter.flush();
    let before = quiver_telemetry::discarded_spans();
    export.send(trace);
    exporter.flush();
    assert_eq!(quiver_telemetry::discarded_spans() - before, 4, "call, resolve, scopes, host.progress");
    assert_eq!(export.dropped(), 0);
}
