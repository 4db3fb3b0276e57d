//! A router outcome as an MCP `tools/call` result.

use quiver_abi::{ErrorCode, Status, ToolError};
use quiver_router::CallOutcome;
use rmcp::model::{CallToolResult, ContentBlock, ErrorData};
use serde_json::{Value, json};

use crate::listing::{meta_of, notice_json};

/// What a typed-lane call of a name that does not exist (or is invisible to the session)
/// becomes: the protocol error the MCP specification asks for (`-32602`), with the router's
/// message, which suggests similar names and `tool_search`.
pub(crate) fn unknown_tool(outcome: &CallOutcome) -> Option<ErrorData> {
    let e = outcome.response.error.as_ref()?;
    (e.code == ErrorCode::UNKNOWN_TOOL && outcome.meta.tool.is_none())
        .then(|| ErrorData::invalid_params(e.message.clone(), Some(json!({ "code": e.code, "details": e.details }))))
}

fn error_text(e: &ToolError) -> String {
    let mut text = format!("Error ({}): {}", e.code, e.message);
    if e.retryable {
        text.push_str("\nThis error is temporary; the same call may succeed if you try again.");
    }
    if !e.details.is_null() {
        text.push_str("\nDetails: ");
        text.push_str(&e.details.to_string());
    }
    text
}

fn blocks(raw: Vec<Value>) -> Vec<ContentBlock> {
    raw.into_iter()
        .map(|b| {
            serde_json::from_value::<ContentBlock>(b.clone()).unwrap_or_else(|e| {
                tracing::warn!(error = %e, "a tool returned a content block that is not valid MCP; sending it as text");
                ContentBlock::text(b.to_string())
            })
        })
        .collect()
}

/// The MCP result of a call: content blocks (the tool's own, else its structured output as
/// JSON text), observations and the deprecation notice as text the model reads,
/// `structuredContent` (the tool's `outputs` when they are an object), `isError`, and `_meta`
/// with the router's call metadata under [`crate::META_PREFIX`].
pub(crate) fn call_result(outcome: CallOutcome) -> CallToolResult {
    let CallOutcome { response, meta } = outcome;
    let notice = meta.notice.as_ref().map(notice_json);
    let mut pairs = vec![("call", serde_json::to_value(&meta).unwrap_or(Value::Null))];
    let mut result = match response.status {
        Status::Ok | Status::Partial => {
            let mut content = blocks(response.content);
            if content.is_empty() && !response.outputs.is_null() {
                content.push(ContentBlock::text(response.outputs.to_string()));
            }
            let mut r = CallToolResult::success(content);
            if response.outputs.is_object() {
                r.structured_content = Some(response.outputs);
            }
            r
        }
        Status::Error => {
            let error = response.error.unwrap_or_else(|| ToolError::tool("the tool failed without saying why"));
            let text = error_text(&error);
            pairs.push(("error", serde_json::to_value(&error).unwrap_or(Value::Null)));
            let mut content = blocks(response.content);
            content.insert(0, ContentBlock::text(text));
            CallToolResult::error(content)
        }
    };
    for o in response.observations {
        result.content.push(ContentBlock::text(o));
    }
    if let Some(n) = &meta.notice {
        result.content.push(ContentBlock::text(format!("Note: {}", n.message())));
    }
    if let Some(n) = notice {
        pairs.push(("notice", n));
    }
    result.meta = Some(meta_of(pairs));
    result
}

/// A meta tool's result: compact JSON as text and as structured content.
pub(crate) fn json_result(value: Value) -> CallToolResult {
    let mut r = CallToolResult::success(vec![ContentBlock::text(value.to_string())]);
    if value.is_object() {
        r.structured_content = Some(value);
    }
    r
}

/// A meta tool's failure (bad arguments, invalid regex), for the model to read and retry.
pub(crate) fn tool_error(error: ToolError) -> CallToolResult {
    let text = error_text(&error);
    let mut r = CallToolResult::error(vec![ContentBlock::text(text)]);
    r.meta = Some(meta_of([("error", serde_json::to_value(&error).unwrap_or(Value::Null))]));
    r
}
