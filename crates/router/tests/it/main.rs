//! Acceptance tests of the router against real plugin libraries (the marker test plugin, built,
//! signed and loaded through `quiver_lifecycle`), plus the contract schemas.

mod pipeline;
mod replay;
mod schemas;
mod support;
mod traces;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use quiver_catalog::Access;
use quiver_lifecycle::Host;
use quiver_router::{Approval, BoxFuture, Call, CallOutcome, Caller, ClientBridge, LogLevel, Router, RouterSettings};
use serde_json::{Value, json};

/// Timing-sensitive tests hold this for reading, the load test for writing, so that the load
/// test's 4000 calls never run beside a test that measures a deadline on two cores.
pub static TIMING: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// A router over a freshly loaded marker plugin.
pub struct Fixture {
    pub router: Arc<Router>,
    pub host: Arc<Host>,
    pub plugins: support::Plugins,
}

pub fn fixture(settings: RouterSettings) -> Fixture {
    let (plugins, host) = support::marker_host();
    let router = Arc::new(Router::new(host.clone(), settings));
    Fixture { router, host, plugins }
}

/// A caller holding every scope, approval `Ask`.
pub fn everyone() -> Caller {
    Caller::new("test-session", Access::unrestricted())
}

/// A caller with the given scopes and gated tools.
pub fn caller(scopes: &[&str], gated: &[&str]) -> Caller {
    Caller::new("test-session", Access::new(scopes.iter().copied(), gated.iter().copied()))
}

impl Fixture {
    pub async fn typed(&self, name: &str, args: Value, caller: Caller) -> CallOutcome {
        self.router.call(Call::new(name, args, caller)).await
    }
    pub async fn generic(&self, name: &str, args: Value, caller: Caller) -> CallOutcome {
        self.router.run_tool(Call::generic(name, args, caller)).await
    }
}

/// The error code of an outcome, or `"ok"` / `"partial"`.
pub fn code(o: &CallOutcome) -> String {
    match &o.response.error {
        Some(e) => e.code.clone(),
        None => format!("{:?}", o.response.status).to_lowercase(),
    }
}

/// A client bridge that records logs and answers elicitations with a fixed answer.
pub struct TestBridge {
    pub can_elicit: bool,
    pub answer: Value,
    pub elicitations: AtomicUsize,
    pub logs: Mutex<Vec<String>>,
}

impl TestBridge {
    pub fn new(can_elicit: bool, answer: Value) -> Arc<TestBridge> {
        Arc::new(TestBridge { can_elicit, answer, elicitations: AtomicUsize::new(0), logs: Mutex::new(Vec::new()) })
    }
    pub fn accepting() -> Arc<TestBridge> {
        TestBridge::new(true, json!({"action": "accept", "content": {"confirm": true}}))
    }
    pub fn logs(&self) -> Vec<String> {
        self.logs.lock().unwrap().clone()
    }
}

impl ClientBridge for TestBridge {
    fn log(&self, _level: LogLevel, message: &str) {
        self.logs.lock().unwrap().push(message.to_owned());
    }
    fn progress(&self, _progress: f64, _total: Option<f64>, _message: &str) {}
    fn can_elicit(&self) -> bool {
        self.can_elicit
    }
    fn elicit(&self, _request: Value) -> BoxFuture<Result<Value, String>> {
        self.elicitations.fetch_add(1, Ordering::SeqCst);
        let a = self.answer.clone();
        Box::pin(async move { Ok(a) })
    }
    fn can_sample(&self) -> bool {
        false
    }
    fn sample(&self, _request: Value) -> BoxFuture<Result<Value, String>> {
        Box::pin(async { Err("no sampling".to_owned()) })
    }
}

/// Approval helper for table tests.
pub fn with(c: Caller, a: Approval) -> Caller {
    c.with_approval(a)
}
