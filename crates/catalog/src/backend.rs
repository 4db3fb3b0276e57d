//! How a tool is reached: the trait the loader implements and the router calls.

use std::sync::Arc;

pub use quiver_abi::LogLevel;

/// Runs calls of one plugin. Today an in-process library (`quiver-lifecycle`); tomorrow a worker
/// process for untrusted bundles, behind the same trait. The router never knows which.
pub trait ToolBackend: Send + Sync {
    /// Runs one call and blocks until the tool answers. `tool` is the plugin-local name,
    /// `request` the JSON of a `quiver_abi::ToolRequest`; the answer is the JSON of a
    /// `quiver_abi::ToolResponse`. Must never panic or unwind.
    fn invoke(&self, tool: &str, request: &str, sink: Arc<dyn CallSink>) -> String;
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
