//! The per-call [`CallSink`]: bridges a plugin thread's synchronous host-service calls to the
//! session's asynchronous [`ClientBridge`], and answers `is_cancelled` from the caller's token
//! and the call's deadline.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::Instant;

use quiver_catalog::{CallSink, LogLevel};
use quiver_telemetry::ToolCounters;
use tokio_util::sync::CancellationToken;

use crate::ClientBridge;

const RUNNING: u8 = 0;
const DONE: u8 = 1;
const OVERRUN: u8 = 2;

pub(crate) struct RouterSink {
    pub(crate) bridge: Arc<dyn ClientBridge>,
    /// The caller's token (a clone: no per-call token tree, no lock).
    pub(crate) token: CancellationToken,
    pub(crate) deadline: Instant,
    /// The runtime a plugin thread blocks on for the client's answers; `None` for an inline
    /// call (it runs on a runtime thread, which must not block).
    pub(crate) runtime: Option<tokio::runtime::Handle>,
    pub(crate) request_id: String,
    pub(crate) counters: Arc<ToolCounters>,
    state: AtomicU8,
    /// The caller stopped waiting (timeout, cancellation, or its future was dropped).
    abandoned: AtomicBool,
}

impl RouterSink {
    pub(crate) fn new(
        bridge: Arc<dyn ClientBridge>,
        token: CancellationToken,
        deadline: Instant,
        request_id: String,
        counters: Arc<ToolCounters>,
        runtime: Option<tokio::runtime::Handle>,
    ) -> RouterSink {
        RouterSink {
            bridge,
            token,
            deadline,
            runtime,
            request_id,
            counters,
            state: AtomicU8::new(RUNNING),
            abandoned: AtomicBool::new(false),
        }
    }

    /// The plugin call returned (called on the plugin thread).
    pub(crate) fn finished(&self) {
        if self.state.swap(DONE, Ordering::AcqRel) == OVERRUN {
            self.counters.overrun_ended();
            tracing::info!(request_id = %self.request_id, "a timed-out call finally returned");
        }
    }

    /// The caller stopped waiting before the call returned: tell the tool, and count the overrun
    /// against it while its thread keeps running.
    pub(crate) fn abandon(&self, timed_out: bool) {
        self.abandoned.store(true, Ordering::Release);
        if timed_out && self.state.compare_exchange(RUNNING, OVERRUN, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            self.counters.overrun_started();
        }
    }

    fn ask(
        &self,
        what: &str,
        request: &str,
        f: impl FnOnce(serde_json::Value) -> crate::BoxFuture<Result<serde_json::Value, String>>,
    ) -> Result<String, String> {
        if self.is_cancelled() {
            return Err(format!("{what} refused: the call is cancelled or past its deadline"));
        }
        let Some(runtime) = &self.runtime else {
            return Err(format!(
                "{what} is not available to a tool with inline execution (it runs on the caller's task and cannot wait for the client); declare `execution: thread` in its manifest"
            ));
        };
        let value: serde_json::Value =
            serde_json::from_str(request).map_err(|e| format!("{what} request is not JSON: {e}"))?;
        let fut = f(value);
        let token = self.token.clone();
        let deadline = self.deadline;
        let answer = runtime.block_on(async move {
            tokio::select! {
                r = fut => r,
                _ = token.cancelled() => Err(format!("{what} abandoned: the call was cancelled")),
                _ = tokio::time::sleep_until(deadline.into()) => Err(format!("{what} abandoned: the call's deadline passed")),
            }
        })?;
        Ok(answer.to_string())
    }
}

impl CallSink for RouterSink {
    fn log(&self, level: LogLevel, message: &str) {
        match level {
            LogLevel::Debug => tracing::debug!(request_id = %self.request_id, "{message}"),
            LogLevel::Info => tracing::info!(request_id = %self.request_id, "{message}"),
            LogLevel::Warning => tracing::warn!(request_id = %self.request_id, "{message}"),
            LogLevel::Error => tracing::error!(request_id = %self.request_id, "{message}"),
        }
        self.bridge.log(level, message);
    }

    fn progress(&self, progress: f64, total: Option<f64>, message: &str) {
        self.bridge.progress(progress, total, message);
    }

    fn is_cancelled(&self) -> bool {
        self.abandoned.load(Ordering::Acquire) || self.token.is_cancelled() || Instant::now() >= self.deadline
    }

    fn elicit(&self, request: &str) -> Result<String, String> {
        if !self.bridge.can_elicit() {
            return Err("this client cannot ask the user (no elicitation support)".to_owned());
        }
        self.ask("elicitation", request, |v| self.bridge.elicit(v))
    }

    fn sample(&self, request: &str) -> Result<String, String> {
        if !self.bridge.can_sample() {
            return Err("this client cannot run a model (no sampling support)".to_owned());
        }
        self.ask("sampling", request, |v| self.bridge.sample(v))
    }
}

/// Marks the call abandoned when the caller's future goes away while the plugin still runs
/// (e.g. the client disconnected and the server dropped the request): the tool then sees
/// `is_cancelled() == true`.
pub(crate) struct AbandonOnDrop<'a> {
    pub(crate) sink: &'a RouterSink,
    pub(crate) armed: bool,
}

impl Drop for AbandonOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.sink.abandon(false);
        }
    }
}
