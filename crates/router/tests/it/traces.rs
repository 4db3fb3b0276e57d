//! Trace records of calls (issue 13): with export on, each call through the pipeline hands the
//! exporter's queue one record with a boundary per stage it reached, its host-service round
//! trips, its typed attributes and the client's `traceparent`.

use std::sync::Arc;

use quiver_router::{Call, Router, RouterSettings};
use quiver_telemetry::{CallTrace, HostService, TRACE_STAGES, TraceExport, TraceMessage, TraceParent};
use serde_json::json;

use crate::{TestBridge, everyone, support};

fn records(rx: &std::sync::mpsc::Receiver<TraceMessage>) -> Vec<CallTrace> {
    rx.try_iter()
        .filter_map(|m| match m {
            TraceMessage::Call(t) => Some(t),
            TraceMessage::Flush(_) => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_traced_call_records_every_stage_its_host_services_and_its_parent() {
    let (plugins, host) = support::marker_host();
    let (export, rx) = TraceExport::channel(16);
    let router = Arc::new(Router::new(host, RouterSettings::default()).with_traces(export.clone()));
    assert!(router.exports_traces());
    let parent = TraceParent::from_meta(Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), Some("v=1"));
    let bridge = TestBridge::new(true, json!({"action": "accept", "content": {"answer": "blue"}}));
    let mut call = Call::new("marker_ask", json!({"question": "colour?"}), everyone()).with_bridge(bridge.clone());
    call.trace_parent = parent.clone().map(Box::new);
    let o = router.call(call).await;
    assert!(o.response.error.is_none(), "{:?}", o.response.error);
    assert_eq!(bridge.elicitations.load(std::sync::atomic::Ordering::SeqCst), 1, "the wrapped bridge still asks");

    let got = records(&rx);
    assert_eq!(got.len(), 1, "one record per call");
    let t = &got[0];
    assert_eq!(t.parent(), parent.as_ref());
    assert_eq!((t.tool(), t.request_id(), t.error_code()), (Some("marker_ask"), o.meta.request_id.as_str(), None));
    assert_eq!(t.lane(), quiver_telemetry::Lane::Typed);
    let stages: Vec<_> = t.stages().collect();
    assert_eq!(stages.iter().map(|s| s.0).collect::<Vec<_>>(), TRACE_STAGES, "a boundary per stage");
    assert_eq!(stages[0].1, t.started());
    assert!(stages.windows(2).all(|w| w[0].2 == w[1].1 && w[0].1 <= w[0].2), "consecutive stages: {stages:?}");
    let trips: Vec<_> = t.host_trips().collect();
    assert_eq!(trips.iter().map(|h| h.service).collect::<Vec<_>>(), [HostService::Elicitation]);
    let (dispatch_start, dispatch_end) = (stages[5].1, stages[5].2);
    assert!(dispatch_start <= trips[0].start && trips[0].end <= dispatch_end, "asked while the tool ran");

    // A call that fails at resolve: only that stage, its typed error code, through the generic lane.
    let o = router.run_tool(Call::generic("no_such_tool", json!({}), everyone())).await;
    let code = o.response.error.as_ref().map(|e| e.code.clone());
    let got = records(&rx);
    assert_eq!(got.len(), 1);
    let t = &got[0];
    assert_eq!(t.stages().map(|s| s.0).collect::<Vec<_>>(), ["resolve"]);
    assert_eq!(t.error_code().map(str::to_owned), code);
    assert_eq!((t.lane(), t.tool(), t.parent()), (quiver_telemetry::Lane::Generic, None, None));
    assert_eq!(export.dropped(), 0);
    drop(plugins);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_export_a_call_uses_the_callers_own_bridge() {
    let (_plugins, host) = support::marker_host();
    let router = Router::new(host, RouterSettings::default());
    assert!(!router.exports_traces());
    let bridge = TestBridge::new(true, json!({"action": "accept", "content": {"answer": "blue"}}));
    let o = router
        .call(Call::new("marker_ask", json!({"question": "colour?"}), everyone()).with_bridge(bridge.clone()))
        .await;
    assert!(o.response.error.is_none(), "{:?}", o.response.error);
    assert_eq!(bridge.elicitations.load(std::sync::atomic::Ordering::SeqCst), 1);
}
