//! Session hooks with a real plugin (`tests/plugins/hooks-plugin`): its manifest names a tool
//! the host calls when a session starts and ends; a failing hook never fails the session.

use std::time::{Duration, Instant};

use quiver_catalog::ExposureMode;
use quiver_mcp::ServerOptions;
use serde_json::json;

use crate::support::{Fixture, RawClient, names};

/// The events the hook recorded, read through `hooks_events` by client `c`, once one matches
/// `wanted` (or the wait runs out).
async fn events_until(c: &mut RawClient, wanted: impl Fn(&str) -> bool) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = c.call("hooks_events", json!({})).await;
        let events: Vec<String> = serde_json::from_value(r["result"]["structuredContent"]["events"].clone())
            .unwrap_or_else(|e| panic!("{e}: {r}"));
        if events.iter().any(|e| wanted(e)) || Instant::now() > deadline {
            return events;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_hear_sessions_start_and_end_and_a_failing_hook_fails_nothing() {
    let f = Fixture::new(ExposureMode::Full, ServerOptions::default());
    f.install("hooks-plugin");

    let mut a = RawClient::start(&f.server);
    a.initialize("hook-a", json!({})).await;
    let events = events_until(&mut a, |e| e.starts_with("session_start ") && e.contains(" hook-a ")).await;
    let start = events.iter().find(|e| e.contains(" hook-a ")).expect("the start hook ran for hook-a");
    assert!(start.starts_with("session_start mcp-") && start.ends_with(" test hook-a resumed=false"), "{start}");
    let id = start.split(' ').nth(1).unwrap().to_owned();

    // Closing the connection ends the session: the end hook gets the same session id.
    drop(a);
    let mut b = RawClient::start(&f.server);
    b.initialize("hook-b", json!({})).await;
    let events = events_until(&mut b, |e| e.starts_with("session_end ") && e.contains(" hook-a ")).await;
    assert!(events.contains(&format!("session_end {id} test hook-a resumed=false")), "{events:?}");

    // A hook that fails is logged; the session works as usual.
    let mut failing = RawClient::start(&f.server);
    failing.initialize("fail-hooks", json!({})).await;
    let events = events_until(&mut failing, |e| e.contains(" fail-hooks ")).await;
    assert!(events.iter().any(|e| e.starts_with("session_start ") && e.contains(" fail-hooks ")), "{events:?}");
    let tools = names(&failing.list_all().await);
    assert!(tools.contains(&"hooks_events".to_owned()) && tools.contains(&"marker_echo".to_owned()), "{tools:?}");
    let r = failing.call("marker_echo", json!({"text": "still here"})).await;
    assert_ne!(r["result"]["isError"], true, "{r}");
}
