//! A router outcome as an MCP `tools/call` result.

use quiver_abi::{Status, ToolError};
use quiver_manifest::LifecycleState;
use quiver_router::codes::Code;
use quiver_router::{CallMeta, CallOutcome, Lane, Truncation};
use rmcp::model::{CallToolResult, ContentBlock, ErrorData, RequestId};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::listing::{meta_of, notice_json};

/// What a typed-lane call of a name that does not exist (or is invisible to the session)
/// becomes: the protocol error the MCP specification asks for (`-32602`), with the router's
/// message, which suggests similar names and `tool_search`.
pub(crate) fn unknown_tool(outcome: &CallOutcome) -> Option<ErrorData> {
    let e = outcome.response.error.as_ref()?;
    (outcome.code() == Some(Code::UnknownTool) && outcome.meta.tool().is_none())
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

/// A tool error as `_meta` carries it (its fields moved, not re-serialized).
fn error_json(e: ToolError) -> Value {
    let mut m = Map::new();
    m.insert("code".into(), Value::String(e.code));
    m.insert("message".into(), Value::String(e.message));
    m.insert("retryable".into(), Value::Bool(e.retryable));
    if !e.details.is_null() {
        m.insert("details".into(), e.details);
    }
    Value::Object(m)
}

fn blocks(raw: Vec<Value>) -> Vec<ContentBlock> {
    raw.into_iter()
        .map(|b| {
            ContentBlock::deserialize(&b).unwrap_or_else(|e| {
                tracing::warn!(error = %e, "a tool returned a content block that is not valid MCP; sending it as text");
                ContentBlock::text(b.to_string())
            })
        })
        .collect()
}

/// What `_meta` says about a call: who served it and how (the full record, with policy
/// decisions and provenance, is in telemetry and transcripts; provenance is in `tools/list`).
/// Compact: what a call has in the usual case is left out, so every result does not repeat it:
/// `tool` when it is the name called (it differs for an alias or a replacement), `lane` when
/// `typed` (`generic` for `run_tool`), `state` when `active`.
fn call_json(meta: &mut CallMeta) -> Value {
    let mut m = Map::new();
    m.insert("request_id".into(), Value::String(std::mem::take(&mut meta.request_id)));
    if let Some(t) = meta.tool().filter(|t| *t != meta.called_name) {
        m.insert("tool".into(), Value::String(t.to_owned()));
    }
    if let Some(a) = &meta.action {
        m.insert("action".into(), Value::String(a.clone()));
    }
    if let Some(p) = meta.plugin() {
        m.insert("plugin".into(), Value::String(p.to_owned()));
    }
    if let Some(v) = meta.plugin_version() {
        m.insert("version".into(), Value::String(v.to_owned()));
    }
    // A hidden-compatibility name dispatches with no visible trace (telemetry records it).
    if let Some(s) =
        meta.lifecycle_state.filter(|s| !matches!(s, LifecycleState::HiddenCompatibility | LifecycleState::Active))
    {
        m.insert("state".into(), Value::String(s.as_str().to_owned()));
    }
    if meta.lane != Lane::Typed {
        m.insert("lane".into(), Value::String(meta.lane.as_str().to_owned()));
    }
    // Whole microseconds: `0.083`, not `0.08265199999999999`.
    m.insert("duration_ms".into(), json!(meta.duration.as_micros() as f64 / 1000.0));
    if meta.retries > 0 {
        m.insert("retries".into(), json!(meta.retries));
    }
    if let Some(h) = &meta.result_handle {
        m.insert("result_handle".into(), Value::String(h.clone()));
    }
    Value::Object(m)
}

/// The `resource_link` block pointing at a cut result's full text.
fn result_link(t: &Truncation) -> ContentBlock {
    let link = json!({
        "type": "resource_link",
        "uri": t.uri,
        "name": t.handle,
        "title": "Full result",
        "description": format!("The whole result ({} bytes of JSON); this answer was cut to {} bytes.", t.total_bytes, t.shown_bytes),
        "mimeType": "application/json",
        "size": t.total_bytes,
    });
    ContentBlock::deserialize(&link).unwrap_or_else(|_| ContentBlock::text(format!("Full result: {}", t.uri)))
}

/// The MCP result of a call: content blocks (the tool's own, else its structured output as
/// JSON text), observations and the deprecation notice as text the model reads,
/// `structuredContent` (the tool's `outputs` when they are an object), `isError`, and `_meta`
/// under [`crate::META_PREFIX`]: `call` (request id, tool, plugin and version, lane, duration,
/// result handle), `notice` for deprecated and compatibility names, `error` for failures, and
/// `truncation` for a result cut to its size limit (with a `resource_link` to the full result;
/// a result that could not be cut to its output schema has no structured content and is marked
/// `isError`, since clients require structured content from such tools otherwise).
#[cfg(test)]
pub(crate) fn call_result(outcome: CallOutcome) -> CallToolResult {
    call_result_with(outcome, true)
}

/// [`call_result`]; with `structured_text` false, structured content is not repeated as text
/// (profile `structured_text`).
pub(crate) fn call_result_with(outcome: CallOutcome, structured_text: bool) -> CallToolResult {
    let CallOutcome { mut response, mut meta, outputs_text } = outcome;
    let mut pairs = Vec::with_capacity(3);
    pairs.push(("call", call_json(&mut meta)));
    let mut result = match response.status {
        // An output passed on as text (an object, checked): its text copy is the tool's own.
        Status::Ok if let Some(text) = outputs_text => {
            let mut content = blocks(response.content);
            if content.is_empty() && structured_text {
                content.push(ContentBlock::text(String::from(text.clone())));
            }
            response.outputs = serde_json::from_str(&text).unwrap_or_default();
            let mut r = CallToolResult::success(content);
            r.structured_content = Some(response.outputs);
            r
        }
        Status::Ok | Status::Partial => {
            let mut content = blocks(response.content);
            if content.is_empty() && !response.outputs.is_null() && (structured_text || !response.outputs.is_object()) {
                // Written straight into a string (`Display` goes through the formatter).
                content.push(ContentBlock::text(serde_json::to_string(&response.outputs).unwrap_or_default()));
            }
            let mut r = CallToolResult::success(content);
            if response.outputs.is_object() {
                r.structured_content = Some(response.outputs);
            }
            if let Some(t) = &meta.truncation {
                r.content.push(result_link(t));
                // Clients hold a tool with an output schema to structured content unless the
                // result is an error: a result that could not be cut to its schema is one.
                if !t.structured && t.has_output_schema {
                    r.is_error = Some(true);
                }
                pairs.push(("truncation", serde_json::to_value(t).unwrap_or(Value::Null)));
            }
            r
        }
        Status::Error => {
            let error = response.error.unwrap_or_else(|| ToolError::tool("the tool failed without saying why"));
            let mut content = Vec::with_capacity(1 + response.content.len());
            content.push(ContentBlock::text(error_text(&error)));
            content.extend(blocks(response.content));
            pairs.push(("error", error_json(error)));
            CallToolResult::error(content)
        }
    };
    for o in response.observations {
        result.content.push(ContentBlock::text(o));
    }
    if let Some(n) = meta.notice.as_ref().filter(|n| n.state != LifecycleState::HiddenCompatibility) {
        result.content.push(ContentBlock::text(format!("Note: {}", n.message())));
        pairs.push(("notice", notice_json(n)));
    }
    result.meta = Some(meta_of(pairs));
    result
}

/// The JSON-RPC response line of a call whose output was passed on as text and that has
/// nothing else to say (no content blocks, observations, notice or truncation): written here
/// from the tool's own text, with no `Value` of it built, parsed or serialized. The same
/// message as [`call_result_with`]'s result in a response, by the test
/// `a_written_line_is_the_message_rmcp_would_send`; `result_type`: with `resultType:
/// "complete"` (protocol 2026-07-28 and later, as `rmcp` sends it). Anything else is given
/// back.
pub(crate) fn call_line(
    id: &RequestId,
    outcome: Box<CallOutcome>,
    structured_text: bool,
    result_type: bool,
) -> Result<Vec<u8>, Box<CallOutcome>> {
    let simple = |o: &CallOutcome| {
        let r = &o.response;
        r.status == Status::Ok
            && r.content.is_empty()
            && r.observations.is_empty()
            && o.meta.truncation.is_none()
            && o.meta.notice.as_ref().is_none_or(|n| n.state == LifecycleState::HiddenCompatibility)
    };
    if outcome.outputs_text.is_none() || !simple(&outcome) {
        return Err(outcome);
    }
    let CallOutcome { mut meta, outputs_text, .. } = *outcome;
    let Some(text) = outputs_text else { unreachable!("checked above") };
    let call = meta_of([("call", call_json(&mut meta))]);
    let mut line = Vec::with_capacity(160 + 2 * text.len());
    line.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    put(&mut line, id);
    line.extend_from_slice(if result_type {
        br#","result":{"resultType":"complete","content":["#
    } else {
        br#","result":{"content":["#
    });
    if structured_text {
        line.extend_from_slice(br#"{"type":"text","text":"#);
        put(&mut line, &*text);
        line.push(b'}');
    }
    line.extend_from_slice(br#"],"structuredContent":"#);
    line.extend_from_slice(text.as_bytes());
    line.extend_from_slice(br#","isError":false,"_meta":"#);
    put(&mut line, &call);
    line.extend_from_slice(b"}}\n");
    Ok(line)
}

/// Appends the JSON of `value` (a string, a request id, a map with string keys: writing them
/// into a `Vec` cannot fail).
fn put<T: serde::Serialize + ?Sized>(line: &mut Vec<u8>, value: &T) {
    serde_json::to_writer(line, value).expect("writing JSON into a Vec cannot fail");
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
    r.meta = Some(meta_of([("error", error_json(error))]));
    r
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use quiver_abi::ToolResponse;
    use quiver_catalog::Notice;
    use quiver_router::ToolNames;

    use super::*;

    fn outcome(state: LifecycleState) -> CallOutcome {
        let notice = Notice {
            name: "old_name".into(),
            state,
            replacement: Some("new_name".into()),
            action: None,
            first_deprecated_version: None,
            planned_removal_version: None,
            removed_in_version: None,
            replay_supported: false,
        };
        CallOutcome {
            response: ToolResponse::ok(json!({"text": "hi"})),
            meta: CallMeta {
                request_id: "r1".into(),
                called_name: "old_name".into(),
                names: Some(Arc::new(ToolNames {
                    tool: "new_name".into(),
                    plugin: "p".into(),
                    plugin_version: "1.0.0".into(),
                    sha256: "".into(),
                    signer_key_id: None,
                })),
                action: None,
                lifecycle_state: Some(state),
                notice: Some(Box::new(notice)),
                lane: Lane::Typed,
                duration: Duration::from_millis(1),
                retries: 0,
                result_handle: None,
                truncation: None,
                policy: Default::default(),
            },
            outputs_text: None,
        }
    }

    #[test]
    fn hidden_compatibility_names_leave_no_visible_trace() {
        let r = serde_json::to_value(call_result(outcome(LifecycleState::HiddenCompatibility))).unwrap();
        let text = r.to_string();
        assert!(!text.contains("compatibility"), "{text}");
        assert!(!text.contains("old_name"), "{text}");
        assert_eq!(r["content"].as_array().unwrap().len(), 1, "{text}");
        // A deprecated name still carries its notice, as text and in _meta.
        let r = serde_json::to_value(call_result(outcome(LifecycleState::Deprecated))).unwrap();
        assert!(r["_meta"]["io.github.quiver/notice"].is_object(), "{r}");
        assert_eq!(r["content"].as_array().unwrap().len(), 2, "{r}");
    }

    #[test]
    fn call_meta_leaves_out_what_a_call_has_in_the_usual_case() {
        let call =
            |o: CallOutcome| serde_json::to_value(call_result(o)).unwrap()["_meta"]["io.github.quiver/call"].clone();
        // Called by its own name, typed lane, active: no `tool`, `lane` or `state`.
        let mut o = outcome(LifecycleState::Active);
        o.meta.notice = None;
        o.meta.called_name = "new_name".into();
        let usual = call(o.clone());
        assert_eq!(
            usual,
            json!({ "request_id": "r1", "plugin": "p", "version": "1.0.0", "duration_ms": 1.0 }),
            "{usual}"
        );
        // Each one is there when it says something.
        o.meta.called_name = "old_name".into();
        o.meta.lane = Lane::Generic;
        o.meta.lifecycle_state = Some(LifecycleState::Deprecated);
        let unusual = call(o);
        assert_eq!(
            (&unusual["tool"], &unusual["lane"], &unusual["state"]),
            (&json!("new_name"), &json!("generic"), &json!("deprecated")),
            "{unusual}"
        );
    }

    #[test]
    fn the_text_copy_of_structured_content_follows_the_profile() {
        let mut o = outcome(LifecycleState::Active);
        o.meta.notice = None;
        o.meta.duration = Duration::from_nanos(82_651_999);
        let with = serde_json::to_value(call_result_with(o.clone(), true)).unwrap();
        assert_eq!(with["content"][0]["text"], r#"{"text":"hi"}"#, "{with}");
        assert_eq!(with["structuredContent"]["text"], "hi");
        // Whole microseconds.
        assert_eq!(with["_meta"]["io.github.quiver/call"]["duration_ms"], 82.651, "{with}");
        let without = serde_json::to_value(call_result_with(o.clone(), false)).unwrap();
        assert_eq!(without["content"], json!([]), "{without}");
        assert_eq!(without["structuredContent"]["text"], "hi");
        // Outputs that are not an object have no structured content: their text stays.
        o.response = ToolResponse::ok(json!("plain"));
        let plain = serde_json::to_value(call_result_with(o, false)).unwrap();
        assert_eq!(plain["content"][0]["text"], r#""plain""#, "{plain}");
    }

    /// `outcome` with its output held as text, as the router hands it over for
    /// `Call::outputs_as_text`.
    fn as_text(mut o: CallOutcome) -> CallOutcome {
        o.outputs_text = Some(o.response.outputs.to_string().into());
        o.response.outputs = Value::Null;
        o
    }

    #[test]
    fn a_written_line_is_the_message_rmcp_would_send() {
        use rmcp::model::{NumberOrString, ServerJsonRpcMessage, ServerResult};
        let mut o = outcome(LifecycleState::HiddenCompatibility);
        o.response = ToolResponse::ok(json!({"text": "a \"quoted\" line\nwith é", "n": [1, 2.5, null]}));
        let message = |o: CallOutcome, id: &NumberOrString, structured_text: bool, current: bool| {
            let mut result = ServerResult::CallToolResult(call_result_with(o, structured_text));
            if !current {
                result.strip_result_type_for_legacy_peer();
            }
            serde_json::to_value(ServerJsonRpcMessage::response(result, id.clone())).unwrap()
        };
        for id in [NumberOrString::Number(7), NumberOrString::String("req-\"1\"".into())] {
            for (structured_text, current) in [(true, false), (false, false), (true, true), (false, true)] {
                let line = call_line(&id, Box::new(as_text(o.clone())), structured_text, current)
                    .unwrap_or_else(|_| panic!("written"));
                assert_eq!(line.last(), Some(&b'\n'));
                let written: Value = serde_json::from_slice(&line).unwrap();
                let rmcp = message(o.clone(), &id, structured_text, current);
                assert_eq!(written, rmcp, "{}", String::from_utf8_lossy(&line));
                assert_eq!(written["result"].get("resultType").is_some(), current);
                // The same message from the general path with the output held as text.
                assert_eq!(written, message(as_text(o.clone()), &id, structured_text, current));
            }
        }
    }

    #[test]
    fn only_a_plain_result_is_written_as_a_line() {
        let id = rmcp::model::NumberOrString::Number(1);
        let plain = as_text(outcome(LifecycleState::Active));
        let mut cases = Vec::new();
        // Held as a value.
        cases.push(outcome(LifecycleState::Active));
        // With a notice the model reads.
        cases.push(as_text(outcome(LifecycleState::Deprecated)));
        let mut o = plain.clone();
        o.response.observations.push("note".into());
        cases.push(o);
        let mut o = plain.clone();
        o.response.content.push(json!({"type": "text", "text": "own"}));
        cases.push(o);
        for o in cases {
            let before = format!("{o:?}");
            let back = call_line(&id, Box::new(o), true, false).expect_err("given back");
            assert_eq!(format!("{back:?}"), before);
        }
        let mut plain = plain;
        plain.meta.notice = None;
        assert!(call_line(&id, Box::new(plain), true, false).is_ok());
    }
}
