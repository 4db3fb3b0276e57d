//! The per-call host services ([`HostServices`] and the plugin thread's [`CallSink`]): the
//! session's [`ClientBridge`] (the same trait) plus the call's cancellation, answered from the
//! caller's token and the call's deadline; a plugin thread's questions block on the runtime.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::Instant;

use quiver_catalog::{CallSink, HostServices, LogLevel, Question};
use quiver_telemetry::ToolCounters;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::{BoxFuture, ClientBridge};

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

    /// The caller stopped waiting before it had the call's answer: tell the tool. For the deadline
    /// (`timed_out`), count the call's one timeout, and an overrun against the tool while it
    /// keeps running (the plugin may also have returned just before: then the timeout alone).
    pub(crate) fn abandon(&self, timed_out: bool) {
        self.abandoned.store(true, Ordering::Release);
        if !timed_out {
            return;
        }
        match self.state.compare_exchange(RUNNING, OVERRUN, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => self.counters.overrun_started(),
            Err(_) => self.counters.timed_out(),
        }
    }
}

/// The call's host services: the session's bridge, plus the call's own cancellation and a log
/// line in the host's log.
impl HostServices for RouterSink {
    fn log(&self, level: LogLevel, message: &str) {
        log_line(&self.request_id, level, message);
        self.bridge.log(level, message);
    }

    fn progress(&self, progress: f64, total: Option<f64>, message: &str) {
        self.bridge.progress(progress, total, message);
    }

    fn is_cancelled(&self) -> bool {
        self.abandoned.load(Ordering::Acquire) || self.token.is_cancelled() || Instant::now() >= self.deadline
    }

    fn can_elicit(&self) -> bool {
        self.bridge.can_elicit()
    }

    fn elicit(&self, request: Value) -> BoxFuture<Result<Value, String>> {
        self.bridge.elicit(request)
    }

    fn can_sample(&self) -> bool {
        self.bridge.can_sample()
    }

    fn sample(&self, request: Value) -> BoxFuture<Result<Value, String>> {
        self.bridge.sample(request)
    }
}

impl CallSink for RouterSink {
    fn services(&self) -> &dyn HostServices {
        self
    }

    /// Blocks the plugin's thread on the runtime until the client answers, the caller cancels or
    /// the deadline passes.
    fn ask(&self, question: Question, request: &str) -> Result<String, String> {
        let what = question.as_str();
        if HostServices::is_cancelled(self) {
            return Err(format!("{what} refused: the call is cancelled or past its deadline"));
        }
        let Some(runtime) = &self.runtime else {
            return Err(inline_cannot_ask(what));
        };
        let value: Value = serde_json::from_str(request).map_err(|e| format!("{what} request is not JSON: {e}"))?;
        let fut = match question {
            Question::Elicitation => self.bridge.elicit(value),
            Question::Sampling => self.bridge.sample(value),
        };
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

/// The host services of an inline call, borrowed from the caller for the call's length (an
/// inline tool runs on the caller's task and cannot outlive it: no `Arc`, no copy of the
/// request id, no clone of the cancellation token). Answers as [`RouterSink`] does without a
/// runtime handle.
pub(crate) struct InlineSink<'a> {
    pub(crate) bridge: &'a dyn ClientBridge,
    pub(crate) token: &'a CancellationToken,
    pub(crate) deadline: Instant,
    pub(crate) request_id: &'a str,
}

impl HostServices for InlineSink<'_> {
    fn log(&self, level: LogLevel, message: &str) {
        log_line(self.request_id, level, message);
        self.bridge.log(level, message);
    }

    fn progress(&self, progress: f64, total: Option<f64>, message: &str) {
        self.bridge.progress(progress, total, message);
    }

    fn is_cancelled(&self) -> bool {
        self.token.is_cancelled() || Instant::now() >= self.deadline
    }

    fn can_elicit(&self) -> bool {
        self.bridge.can_elicit()
    }

    fn elicit(&self, request: Value) -> BoxFuture<Result<Value, String>> {
        self.bridge.elicit(request)
    }

    fn can_sample(&self) -> bool {
        self.bridge.can_sample()
    }

    fn sample(&self, request: Value) -> BoxFuture<Result<Value, String>> {
        self.bridge.sample(request)
    }
}

impl CallSink for InlineSink<'_> {
    fn services(&self) -> &dyn HostServices {
        self
    }

    fn ask(&self, question: Question, _request: &str) -> Result<String, String> {
        let what = question.as_str();
        if HostServices::is_cancelled(self) {
            return Err(format!("{what} refused: the call is cancelled or past its deadline"));
        }
        Err(inline_cannot_ask(what))
    }
}

fn inline_cannot_ask(what: &str) -> String {
    format!(
        "{what} is not available to a tool with inline execution (it runs on the caller's task and cannot wait for the client); declare `execution: thread` in its manifest"
    )
}

/// A tool's log line in the host's log.
fn log_line(request_id: &str, level: LogLevel, message: &str) {
    match level {
        LogLevel::Debug => tracing::debug!(request_id = %request_id, "{message}"),
        LogLevel::Info => tracing::info!(request_id = %request_id, "{message}"),
        LogLevel::Warning => tracing::warn!(request_id = %request_id, "{message}"),
        LogLevel::Error => tracing::error!(request_id = %request_id, "{message}"),
    }
}

/// Marks the call abandoned when the caller's future goes away while the plugin still runs
/// (e.g. the client disconnected and the server dropped the request, or the call was
/// cancelled): the tool then sees `is_cancelled() == true`, and its pool thread is retired (a
/// new one takes its place while it finishes).
pub(crate) struct AbandonOnDrop<'a> {
    pub(crate) sink: &'a RouterSink,
    pub(crate) armed: bool,
    pub(crate) pool: &'a crate::pool::Pool,
    pub(crate) ticket: &'a crate::pool::Ticket,
}

impl Drop for AbandonOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.sink.abandon(false);
            self.pool.retire(self.ticket);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sink(counters: Arc<ToolCounters>) -> RouterSink {
        let deadline = Instant::now();
        RouterSink::new(Arc::new(crate::NullBridge), CancellationToken::new(), deadline, "r-1".into(), counters, None)
    }

    /// A deadline abandon counts one timeout whether the plugin still runs (and an overrun
    /// until it returns) or returned just before the caller stopped waiting; a cancellation
    /// counts none.
    #[test]
    fn a_timed_out_call_counts_one_timeout_however_it_races_the_plugin() {
        let counters = quiver_telemetry::Counters::default();
        let stats = |name: &str| {
            let t = &counters.snapshot().tools[name];
            (t.timeouts, t.overruns)
        };
        let running = sink(counters.tool("running", &[]));
        running.abandon(true);
        assert_eq!(stats("running"), (1, 1));
        running.finished();
        assert_eq!(stats("running"), (1, 0));
        // The plugin returned, then the caller's deadline fired before the answer reached it.
        let returned = sink(counters.tool("returned", &[]));
        returned.finished();
        returned.abandon(true);
        assert_eq!(stats("returned"), (1, 0));
        let cancelled = sink(counters.tool("cancelled", &[]));
        cancelled.abandon(false);
        cancelled.finished();
        assert_eq!(stats("cancelled"), (0, 0));
    }
}
