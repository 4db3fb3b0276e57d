//! The router's [`ClientBridge`] over one MCP request: logs and progress become notifications
//! (queued, then sent by the request's own task so they precede its response), elicitation and
//! sampling become requests to the client, associated with the originating request.
// Logging and sampling are deprecated by SEP-2577 (protocol 2026-07-28); Quiver serves
// protocol revisions up to 2025-11-25, where both are current.
#![allow(deprecated)]

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, Ordering};

use quiver_router::{BoxFuture, ClientBridge, LogLevel};
use rmcp::RoleServer;
use rmcp::model::{
    ClientResult, CreateMessageRequest, CreateMessageRequestParams, ElicitRequest, ElicitRequestParams, LoggingLevel,
    LoggingMessageNotification, LoggingMessageNotificationParam, ProgressNotification, ProgressNotificationParam,
    ProgressToken, RequestId, ServerNotification, ServerRequest,
};
use rmcp::service::{OriginatingRequestId, Peer};
use serde_json::Value;
use tokio::sync::Notify;

/// Queued notifications per call before the oldest ones are dropped (a tool flooding logs
/// must not exhaust memory).
pub(crate) const NOTIFICATION_QUEUE: usize = 256;

/// The rank of an MCP logging level (debug 0 ... emergency 7).
pub(crate) fn level_rank(level: &LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

fn mcp_level(level: LogLevel) -> LoggingLevel {
    match level {
        LogLevel::Debug => LoggingLevel::Debug,
        LogLevel::Info => LoggingLevel::Info,
        LogLevel::Warning => LoggingLevel::Warning,
        LogLevel::Error => LoggingLevel::Error,
    }
}

/// What a session knows about its client, shared by the bridges of its calls.
#[derive(Debug)]
pub(crate) struct ClientSide {
    pub(crate) peer: Peer<RoleServer>,
    /// Least severe level sent as `notifications/message` (a [`level_rank`]).
    pub(crate) log_level: AtomicU8,
    pub(crate) can_elicit: bool,
    pub(crate) can_sample: bool,
}

/// The bridge of one `tools/call` request.
pub(crate) struct CallBridge {
    client: Arc<ClientSide>,
    request: RequestId,
    progress_token: Option<ProgressToken>,
    last_progress: Mutex<Option<f64>>,
    logger: String,
    /// Notifications not yet sent (no allocation until a tool logs or reports progress).
    notes: Mutex<VecDeque<ServerNotification>>,
    /// Signalled when `notes` gains one.
    ready: Notify,
}

impl CallBridge {
    /// A bridge for request `request` of a session; its notifications are queued until the
    /// request's task takes them ([`CallBridge::ready`], [`CallBridge::take`]).
    pub(crate) fn new(
        client: Arc<ClientSide>,
        request: RequestId,
        progress_token: Option<ProgressToken>,
        logger: String,
    ) -> CallBridge {
        CallBridge {
            client,
            request,
            progress_token,
            last_progress: Mutex::new(None),
            logger,
            notes: Mutex::new(VecDeque::new()),
            ready: Notify::new(),
        }
    }

    fn queue(&self, n: ServerNotification) {
        {
            let mut notes = self.notes.lock().unwrap_or_else(|e| e.into_inner());
            if notes.len() >= NOTIFICATION_QUEUE {
                tracing::debug!(logger = %self.logger, "notification queue full; dropping a tool notification");
                return;
            }
            notes.push_back(n);
        }
        self.ready.notify_one();
    }

    /// Resolves when a notification was queued since the last call (a permit is kept when
    /// nobody waits, so none is missed).
    pub(crate) async fn ready(&self) {
        self.ready.notified().await
    }

    /// The queued notifications, oldest first.
    pub(crate) fn take(&self) -> VecDeque<ServerNotification> {
        std::mem::take(&mut *self.notes.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn originating(&self) -> OriginatingRequestId {
        OriginatingRequestId(self.request.clone())
    }
}

impl ClientBridge for CallBridge {
    fn log(&self, level: LogLevel, message: &str) {
        let level = mcp_level(level);
        if level_rank(&level) < self.client.log_level.load(Ordering::Relaxed) {
            return;
        }
        let mut params = LoggingMessageNotificationParam::new(level, Value::String(message.to_owned()));
        params.logger = Some(self.logger.clone());
        self.queue(ServerNotification::LoggingMessageNotification(LoggingMessageNotification::new(params)));
    }

    fn progress(&self, progress: f64, total: Option<f64>, message: &str) {
        let Some(token) = &self.progress_token else { return };
        if !progress.is_finite() {
            return;
        }
        // Progress must increase with every notification: drop reports that do not.
        {
            let mut last = self.last_progress.lock().unwrap_or_else(|e| e.into_inner());
            if last.is_some_and(|l| progress <= l) {
                return;
            }
            *last = Some(progress);
        }
        let mut params = ProgressNotificationParam::new(token.clone(), progress);
        params.total = total.filter(|t| t.is_finite());
        if !message.is_empty() {
            params.message = Some(message.to_owned());
        }
        self.queue(ServerNotification::ProgressNotification(ProgressNotification::new(params)));
    }

    fn can_elicit(&self) -> bool {
        self.client.can_elicit
    }

    fn elicit(&self, request: Value) -> BoxFuture<Result<Value, String>> {
        let peer = self.client.peer.clone();
        let origin = self.originating();
        Box::pin(async move {
            let params: ElicitRequestParams = serde_json::from_value(request).map_err(|e| {
                format!("the elicitation request is not a valid MCP form (message, flat requestedSchema): {e}")
            })?;
            let mut request = ElicitRequest::new(params);
            request.extensions.insert(origin);
            match peer.send_request(ServerRequest::ElicitRequest(request)).await {
                Ok(ClientResult::ElicitResult(r)) => serde_json::to_value(r).map_err(|e| e.to_string()),
                Ok(other) => Err(format!("the client answered elicitation with something else: {other:?}")),
                Err(e) => Err(format!("the client did not answer the elicitation: {e}")),
            }
        })
    }

    fn can_sample(&self) -> bool {
        self.client.can_sample
    }

    fn sample(&self, request: Value) -> BoxFuture<Result<Value, String>> {
        let peer = self.client.peer.clone();
        let origin = self.originating();
        Box::pin(async move {
            let params: CreateMessageRequestParams = serde_json::from_value(request)
                .map_err(|e| format!("the sampling request is not valid sampling/createMessage parameters: {e}"))?;
            params.validate().map_err(|e| format!("the sampling request is not valid: {e}"))?;
            let mut request = CreateMessageRequest::new(params);
            request.extensions.insert(origin);
            match peer.send_request(ServerRequest::CreateMessageRequest(request)).await {
                Ok(ClientResult::CreateMessageResult(r)) => serde_json::to_value(r).map_err(|e| e.to_string()),
                Ok(other) => Err(format!("the client answered sampling with something else: {other:?}")),
                Err(e) => Err(format!("the client did not answer the sampling request: {e}")),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The forms the conformance tools send survive the typed elicitation model intact.
    #[test]
    fn conformance_forms_round_trip() {
        let form = serde_json::json!({
            "message": "m",
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "name": { "type": "string", "default": "John Doe" },
                    "age": { "type": "integer", "default": 30 },
                    "score": { "type": "number", "default": 95.5 },
                    "status": { "type": "string", "enum": ["active", "inactive"], "default": "active" },
                    "verified": { "type": "boolean", "default": true },
                    "titled": { "type": "string", "oneOf": [{ "const": "v1", "title": "One" }] },
                    "legacy": { "type": "string", "enum": ["a", "b"], "enumNames": ["A", "B"] },
                    "multi": { "type": "array", "items": { "type": "string", "enum": ["x", "y"] } },
                    "titledMulti": { "type": "array", "items": { "anyOf": [{ "const": "v1", "title": "One" }] } }
                },
                "required": []
            }
        });
        let params: ElicitRequestParams = serde_json::from_value(form.clone()).unwrap();
        let back = serde_json::to_value(&params).unwrap();
        let props = &back["requestedSchema"]["properties"];
        assert_eq!(props["age"]["default"], 30);
        assert_eq!(props["score"]["default"], 95.5);
        assert_eq!(props["legacy"]["enumNames"][1], "B");
        assert_eq!(props["titled"]["oneOf"][0]["title"], "One");
        assert_eq!(props["titledMulti"]["items"]["anyOf"][0]["const"], "v1");
        assert_eq!(back["mode"], "form");
    }
}
