//! Carries one call to the upstream server and its answer back, for the router.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use quiver_abi::{ErrorCode, ToolError};
use quiver_catalog::{AbortReason, CallSink, Dispatch, Placement, RemoteCall, ToolBackend};
use quiver_lifecycle::worker::{PLUGIN_CRASHED, PLUGIN_UNAVAILABLE};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotification, CancelledNotificationParam, ClientNotification,
    ClientRequest, ServerResult,
};
use rmcp::service::{PeerRequestOptions, ServiceError};
use serde::Deserialize;

use crate::connection::Connection;
use crate::convert::{error, response_json};

pub(crate) struct UpstreamBackend {
    conn: Arc<Connection>,
    /// Quiver name → upstream name.
    names: HashMap<String, String>,
}

impl UpstreamBackend {
    pub fn new(conn: Arc<Connection>, names: HashMap<String, String>) -> UpstreamBackend {
        UpstreamBackend { conn, names }
    }
}

/// The part of a `ToolRequest` an upstream needs.
#[derive(Deserialize)]
struct Inputs {
    #[serde(default)]
    inputs: serde_json::Value,
}

async fn call(
    conn: Arc<Connection>,
    upstream: String,
    request: String,
    sink: Arc<dyn CallSink>,
    mut abort: tokio::sync::watch::Receiver<Option<AbortReason>>,
) -> Result<String, ToolError> {
    let name = conn.cfg.name.clone();
    let Some(peer) = conn.peer() else {
        return Err(error(
            PLUGIN_UNAVAILABLE,
            format!("upstream server `{name}` is not reachable ({}); it is retried with backoff", conn.status()),
            true,
        ));
    };
    let inputs = serde_json::from_str::<Inputs>(&request)
        .map_err(|e| error(ErrorCode::PROTOCOL, format!("the host built a bad request: {e}"), false))?
        .inputs;
    let mut params = CallToolRequestParams::new(upstream.clone());
    if let serde_json::Value::Object(args) = inputs {
        params = params.with_arguments(args);
    }
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let handle = peer.send_request_with_option(request, PeerRequestOptions::no_options()).await.map_err(|e| {
        error(PLUGIN_UNAVAILABLE, format!("upstream server `{name}` could not be sent the call: {e}"), true)
    })?;
    let _registered = conn.register(handle.progress_token.clone(), sink);
    let id = handle.id.clone();
    let answer = tokio::select! {
        answer = handle.rx => answer,
        reason = async { abort.wait_for(Option::is_some).await.ok().and_then(|r| *r) } => {
            let reason = reason.unwrap_or(AbortReason::Cancelled);
            let note = CancelledNotification::new(CancelledNotificationParam::new(
                Some(id),
                Some(match reason {
                    AbortReason::Cancelled => "cancelled by the client".to_owned(),
                    AbortReason::Deadline => "deadline passed".to_owned(),
                }),
            ));
            let _ = peer.send_notification(ClientNotification::CancelledNotification(note)).await;
            return Err(match reason {
                AbortReason::Cancelled => error(ErrorCode::CANCELLED, format!("`{upstream}` was cancelled"), false),
                AbortReason::Deadline => error(ErrorCode::TIMEOUT, format!("`{upstream}` passed its deadline"), true),
            });
        }
    };
    match answer {
        Ok(Ok(ServerResult::CallToolResult(r))) => Ok(response_json(r)),
        Ok(Ok(ServerResult::InputRequiredResult(_))) => Err(error(
            ErrorCode::TOOL_ERROR,
            format!(
                "upstream `{name}` asked for more input through a multi-round-trip request, which Quiver does not relay yet"
            ),
            false,
        )),
        Ok(Ok(other)) => Err(error(
            ErrorCode::PROTOCOL,
            format!("upstream `{name}` answered tools/call with something else: {}", kind(&other)),
            false,
        )),
        Ok(Err(ServiceError::McpError(e))) => {
            let code = if e.code == rmcp::model::ErrorCode::INVALID_PARAMS {
                ErrorCode::INVALID_ARGUMENTS
            } else {
                ErrorCode::TOOL_ERROR
            };
            Err(error(code, format!("upstream `{name}`: {}", e.message), false))
        }
        Ok(Err(ServiceError::TransportClosed)) | Err(_) => Err(error(
            PLUGIN_CRASHED,
            format!(
                "upstream server `{name}` closed the connection during `{upstream}` (it exited or crashed); it is restarted, and the next call reaches it"
            ),
            false,
        )),
        Ok(Err(e)) => Err(error(ErrorCode::TOOL_ERROR, format!("upstream `{name}`: {e}"), false)),
    }
}

fn kind(r: &ServerResult) -> String {
    let text = format!("{r:?}");
    text.split(['(', ' ', '{']).next().unwrap_or("").to_owned()
}

impl ToolBackend for UpstreamBackend {
    fn invoke(&self, tool: &str, request: &str, sink: Arc<dyn CallSink>) -> String {
        let call = self.start(tool, request.to_owned(), sink, Instant::now());
        let (tx, rx) = std::sync::mpsc::channel();
        crate::runtime().spawn(async move {
            let _ = tx.send(call.answer.await);
        });
        let answer = rx.recv().unwrap_or_else(|_| Err(error(PLUGIN_CRASHED, "the upstream runtime stopped", false)));
        answer.unwrap_or_else(|e| serde_json::json!({"status": "error", "error": e}).to_string())
    }

    fn dispatch(&self, _index: usize) -> Dispatch {
        Dispatch::Remote
    }

    fn start(&self, tool: &str, request: String, sink: Arc<dyn CallSink>, _deadline: Instant) -> RemoteCall {
        let Some(upstream) = self.names.get(tool).cloned() else {
            return RemoteCall::ready(Err(error(
                ErrorCode::UNKNOWN_TOOL,
                format!("`{tool}` is not a tool of upstream `{}`", self.conn.cfg.name),
                false,
            )));
        };
        let (tx, rx) = tokio::sync::watch::channel(None);
        // Runs on the upstream runtime: the connection's tasks live there, and a caller that
        // stops polling (a dropped request) still gets the cancellation sent.
        let task = crate::runtime().spawn(call(self.conn.clone(), upstream, request, sink, rx));
        let answer = Box::pin(async move {
            task.await
                .unwrap_or_else(|e| Err(error(PLUGIN_CRASHED, format!("the upstream call task failed: {e}"), false)))
        });
        RemoteCall {
            answer,
            abort: Box::new(move |reason| {
                let _ = tx.send(Some(reason));
            }),
        }
    }

    fn placement(&self) -> Placement {
        Placement {
            isolation: "upstream",
            detail: format!("upstream MCP server `{}`: {}", self.conn.cfg.name, self.conn.status()),
        }
    }
}
