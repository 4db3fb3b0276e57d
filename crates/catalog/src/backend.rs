//! How a tool is reached: the trait a tool source implements and the router calls.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

pub use quiver_abi::LogLevel;
use quiver_abi::ToolError;

/// A boxed, sendable future (no `futures` dependency).
pub type BackendFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// How the router runs a call of one tool. The backend decides (from the manifest's execution
/// policy and from where the plugin runs); the router never reads the manifest for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dispatch {
    /// On the caller's task through [`ToolBackend::invoke`]: the tool answers within
    /// microseconds and never blocks, so the thread handoff would cost more than the call.
    Inline,
    /// On a blocking thread through [`ToolBackend::invoke`]: the caller gets its timeout at the
    /// deadline even if the tool hangs, but the thread cannot be stopped.
    Thread,
    /// Through [`ToolBackend::start`]: the call runs elsewhere (a worker process) and answers
    /// asynchronously; [`RemoteCall::abort`] really stops it.
    Remote,
}

/// Why the caller gave up on a remote call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AbortReason {
    /// The caller cancelled (client `notifications/cancelled`, dropped request).
    Cancelled,
    /// The call's deadline passed.
    Deadline,
}

/// A call started with [`ToolBackend::start`].
pub struct RemoteCall {
    /// Resolves to the JSON of a `quiver_abi::ToolResponse`, or to a host-side error (the worker
    /// crashed, could not be started, ...). Always resolves, also after [`RemoteCall::abort`]:
    /// the router holds the tool's concurrency slot until it does.
    pub answer: BackendFuture<Result<String, ToolError>>,
    /// Stops the call: [`AbortReason::Cancelled`] tells the tool; [`AbortReason::Deadline`] also
    /// escalates (the worker is killed after a short grace) until the call's resources are back.
    /// May be called more than once.
    pub abort: Box<dyn Fn(AbortReason) + Send + Sync>,
}

impl RemoteCall {
    /// A call that already has its answer.
    pub fn ready(answer: Result<String, ToolError>) -> RemoteCall {
        RemoteCall { answer: Box::pin(std::future::ready(answer)), abort: Box::new(|_| {}) }
    }
}

impl std::fmt::Debug for RemoteCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteCall").finish_non_exhaustive()
    }
}

/// Where a plugin's code runs, for operators (`quiver list`, `tools/list` `_meta`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// `in_process` or `process`.
    pub isolation: &'static str,
    /// A one-line description: worker state, process id, sandbox.
    pub detail: String,
}

impl Placement {
    /// A plugin loaded into the host process.
    pub fn in_process() -> Placement {
        Placement { isolation: "in_process", detail: "in the host process (trusted)".to_owned() }
    }
}

/// Runs calls of one plugin: an in-process library or a worker process (`quiver-lifecycle`),
/// behind the same trait. The router never knows which; it asks [`ToolBackend::dispatch`].
pub trait ToolBackend: Send + Sync {
    /// Runs one call and blocks until the tool answers. `tool` is the plugin-local name,
    /// `request` the JSON of a `quiver_abi::ToolRequest`; the answer is the JSON of a
    /// `quiver_abi::ToolResponse`. Must never panic or unwind.
    fn invoke(&self, tool: &str, request: &str, sink: Arc<dyn CallSink>) -> String;

    /// How calls of the tool at `index` (its position in the manifest) are run.
    fn dispatch(&self, _index: usize) -> Dispatch {
        Dispatch::Thread
    }

    /// Starts one call that runs elsewhere ([`Dispatch::Remote`]); `deadline` is the caller's.
    /// The default runs [`ToolBackend::invoke`] on the calling thread.
    fn start(&self, tool: &str, request: String, sink: Arc<dyn CallSink>, _deadline: Instant) -> RemoteCall {
        RemoteCall::ready(Ok(self.invoke(tool, &request, sink)))
    }

    /// Where the plugin runs.
    fn placement(&self) -> Placement {
        Placement::in_process()
    }
}

/// The host side of one running call: where a tool's logs, progress and questions go.
/// Implemented by the router (per call) and, through it, by the MCP server.
pub trait CallSink: Send + Sync {
    /// A log line from the tool.
    fn log(&self, level: LogLevel, message: &str);
    /// A progress report; `total` when known.
    fn progress(&self, progress: f64, total: Option<f64>, message: &str);
    /// True once the call is cancelled or past its deadline.
    fn is_cancelled(&self) -> bool;
    /// Asks the user (MCP elicitation); request and answer are JSON text.
    fn elicit(&self, request: &str) -> Result<String, String>;
    /// Asks the client's model (MCP sampling); request and answer are JSON text.
    fn sample(&self, request: &str) -> Result<String, String>;
}

/// A sink that drops logs and progress, never cancels and cannot ask anyone.
#[derive(Debug, Default, Clone, Copy)]
pub struct NullSink;

impl CallSink for NullSink {
    fn log(&self, _level: LogLevel, _message: &str) {}
    fn progress(&self, _progress: f64, _total: Option<f64>, _message: &str) {}
    fn is_cancelled(&self) -> bool {
        false
    }
    fn elicit(&self, _request: &str) -> Result<String, String> {
        Err("this session cannot ask the user (no interactive client)".to_owned())
    }
    fn sample(&self, _request: &str) -> Result<String, String> {
        Err("this session cannot ask a model (no sampling-capable client)".to_owned())
    }
}
