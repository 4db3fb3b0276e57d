//! How a tool is reached: the trait a tool source implements and the router calls.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

pub use quiver_abi::LogLevel;
use quiver_abi::ToolError;
use serde_json::Value;

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

    /// Runs one [`Dispatch::Inline`] call as [`ToolBackend::invoke`] does, with a borrowed sink
    /// (the router keeps it on its stack: nothing is allocated or reference-counted for the
    /// call's host services), handing the answer to `answer` where the backend holds it (no
    /// copy of the plugin's string). Returns false, without calling `answer`, when this backend
    /// needs an owned sink; the router then calls [`ToolBackend::invoke`].
    fn invoke_borrowed(
        &self,
        _tool: &str,
        _request: &str,
        _sink: &dyn CallSink,
        _answer: &mut dyn FnMut(&str),
    ) -> bool {
        false
    }

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

/// The host's services to a running tool, defined once: logs, progress, cancellation,
/// elicitation (asking the user) and sampling (asking the client's model). Implemented by the
/// MCP server per request (re-exported by `quiver-router` as `ClientBridge`), by the router per
/// call (which adds the call's deadline and cancellation), by a worker process's side of a call,
/// and by [`NullSink`]. Elicitation and sampling are asynchronous here; a plugin's thread reaches
/// them through a [`CallSink`], which blocks for the answer.
pub trait HostServices: Send + Sync {
    /// A log line from the tool (MCP `notifications/message`).
    fn log(&self, level: LogLevel, message: &str);
    /// A progress report; `total` when known (MCP `notifications/progress`).
    fn progress(&self, progress: f64, total: Option<f64>, message: &str);
    /// True once the call is cancelled or past its deadline. A session-wide implementation
    /// (one that does not know the call) keeps the default: never.
    fn is_cancelled(&self) -> bool {
        false
    }
    /// True when the client supports elicitation.
    fn can_elicit(&self) -> bool;
    /// MCP `elicitation/create`: `request` holds its params (`message`, `requestedSchema`); the
    /// answer is its result (`action`: accept | decline | cancel, `content`).
    fn elicit(&self, request: Value) -> BackendFuture<Result<Value, String>>;
    /// True when the client supports sampling.
    fn can_sample(&self) -> bool;
    /// MCP `sampling/createMessage`: params in, result out.
    fn sample(&self, request: Value) -> BackendFuture<Result<Value, String>>;
}

/// A question a tool asks through the host: elicitation or sampling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Question {
    /// Ask the user ([`HostServices::elicit`]).
    Elicitation,
    /// Ask the client's model ([`HostServices::sample`]).
    Sampling,
}

impl Question {
    /// `elicitation` or `sampling`, for messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Question::Elicitation => "elicitation",
            Question::Sampling => "sampling",
        }
    }

    /// The refusal when the client cannot answer this kind of question.
    fn unsupported(self) -> String {
        match self {
            Question::Elicitation => "this client cannot ask the user (no elicitation support)",
            Question::Sampling => "this client cannot run a model (no sampling support)",
        }
        .to_owned()
    }
}

/// One running call as a plugin's (synchronous) thread reaches the host: its
/// [`HostServices`], and how the thread waits for an answer. Not a second definition of the
/// services: the plugin-facing forms (`log`, `progress`, `is_cancelled`, `elicit`, `sample`
/// with JSON text) are methods of `dyn CallSink` over [`CallSink::services`] and
/// [`CallSink::ask`].
pub trait CallSink: Send + Sync {
    /// The services this call reaches.
    fn services(&self) -> &dyn HostServices;
    /// Asks `question` (its request as JSON text) and blocks the calling thread until the
    /// answer (JSON text) or the call's end. Called only when the services support the question.
    fn ask(&self, question: Question, request: &str) -> Result<String, String>;
}

impl<'a> dyn CallSink + 'a {
    /// A log line from the tool.
    pub fn log(&self, level: LogLevel, message: &str) {
        self.services().log(level, message);
    }
    /// A progress report; `total` when known.
    pub fn progress(&self, progress: f64, total: Option<f64>, message: &str) {
        self.services().progress(progress, total, message);
    }
    /// True once the call is cancelled or past its deadline.
    pub fn is_cancelled(&self) -> bool {
        self.services().is_cancelled()
    }
    /// Asks the user (MCP elicitation); request and answer are JSON text.
    pub fn elicit(&self, request: &str) -> Result<String, String> {
        self.question(Question::Elicitation, request)
    }
    /// Asks the client's model (MCP sampling); request and answer are JSON text.
    pub fn sample(&self, request: &str) -> Result<String, String> {
        self.question(Question::Sampling, request)
    }

    fn question(&self, question: Question, request: &str) -> Result<String, String> {
        let services = self.services();
        let supported = match question {
            Question::Elicitation => services.can_elicit(),
            Question::Sampling => services.can_sample(),
        };
        if !supported {
            return Err(question.unsupported());
        }
        self.ask(question, request)
    }
}

/// Host services to nobody: drops logs and progress, never cancels and cannot ask anyone.
/// Also the sink of a call made outside any session (tests, benches).
#[derive(Debug, Default, Clone, Copy)]
pub struct NullSink;

impl HostServices for NullSink {
    fn log(&self, _level: LogLevel, _message: &str) {}
    fn progress(&self, _progress: f64, _total: Option<f64>, _message: &str) {}
    fn can_elicit(&self) -> bool {
        false
    }
    fn elicit(&self, _request: Value) -> BackendFuture<Result<Value, String>> {
        Box::pin(std::future::ready(Err(Question::Elicitation.unsupported())))
    }
    fn can_sample(&self) -> bool {
        false
    }
    fn sample(&self, _request: Value) -> BackendFuture<Result<Value, String>> {
        Box::pin(std::future::ready(Err(Question::Sampling.unsupported())))
    }
}

impl CallSink for NullSink {
    fn services(&self) -> &dyn HostServices {
        self
    }
    fn ask(&self, question: Question, _request: &str) -> Result<String, String> {
        Err(question.unsupported())
    }
}

/// `e`, the error of a call of `tool` (risk `effect`, not idempotent) that ended without an
/// answer its caller can trust (a timeout, a crash, a server error after the request went out),
/// made what the caller must be told: not retryable, and that the call may have taken effect,
/// so look before trying again. The router and the adapters use it alike.
pub fn not_safe_to_repeat(mut e: ToolError, tool: &str, effect: quiver_manifest::SideEffects) -> ToolError {
    e.retryable = false;
    e.message.push_str(if e.message.ends_with('.') { " " } else { ". " });
    e.message.push_str(&format!(
        "The call may have taken effect: `{tool}` is not idempotent and its side effects are `{}`, so check what it did before calling it again",
        effect.as_str()
    ));
    e
}
