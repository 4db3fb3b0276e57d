//! Stdio sessions resume by a key the client chooses (`_meta` of `initialize`, or the
//! server's `--resume` key): a reconnect under the same key starts with the loaded set the
//! session had; another key, or none, starts fresh.

use std::sync::Arc;
use std::time::Duration;

use quiver_catalog::ExposureMode;
use quiver_mcp::{SESSION_META_KEY, ServerOptions, SessionStore};
use serde_json::{Value, json};

use crate::support::{Fixture, RawClient, names};

async fn initialize_with(c: &mut RawClient, meta: Option<Value>) -> Value {
    let mut params = json!({ "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "lazy-resume", "version": "1" } });
    if let Some(m) = meta {
        params["_meta"] = m;
    }
    let r = c.request("initialize", params).await;
    if r.get("result").is_some() {
        c.send_json(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" })).await;
    }
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_with_the_same_key_restores_the_loaded_set() {
    let store = Arc::new(SessionStore::memory(Duration::from_secs(60)));
    let options = ServerOptions { session_store: Some(store.clone()), ..ServerOptions::default() };
    let f = Fixture::new(ExposureMode::Lazy, options);
    let key = json!({ SESSION_META_KEY: "agent-7" });

    let mut first = RawClient::start(&f.server);
    initialize_with(&mut first, Some(key.clone())).await;
    let before = names(&first.list_all().await);
    let r = first.call("tool_search", json!({ "query": "echo text back" })).await;
    let loaded: Vec<String> = serde_json::from_value(r["result"]["structuredContent"]["loaded"].clone()).unwrap();
    assert!(!loaded.is_empty(), "{r}");
    let after = names(&first.list_all().await);
    assert!(loaded.iter().all(|n| after.contains(n) && !before.contains(n)), "{after:?}");
    drop(first);

    // Reconnect: same key, same loaded set.
    let mut again = RawClient::start(&f.server);
    initialize_with(&mut again, Some(key.clone())).await;
    assert_eq!(names(&again.list_all().await), after, "restored");
    assert_eq!(store.load("agent-7").await.unwrap().unwrap().snapshot.loaded, loaded);

    // No key, or another key: a fresh session.
    let mut fresh = RawClient::start(&f.server);
    initialize_with(&mut fresh, None).await;
    assert_eq!(names(&fresh.list_all().await), before);
    let mut other = RawClient::start(&f.server);
    initialize_with(&mut other, Some(json!({ SESSION_META_KEY: "agent-8" }))).await;
    assert_eq!(names(&other.list_all().await), before);

    // A key that cannot name a session, or is not a string, is refused with what to send.
    for bad in [json!("../etc"), json!(7)] {
        let mut c = RawClient::start(&f.server);
        let r = initialize_with(&mut c, Some(json!({ SESSION_META_KEY: bad }))).await;
        let message = r["error"]["message"].as_str().unwrap_or_default();
        assert_eq!(r["error"]["code"], -32602, "{r}");
        assert!(message.contains(SESSION_META_KEY) || message.contains("A-Z, a-z, 0-9"), "{message}");
    }
}
