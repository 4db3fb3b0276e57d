//! Messages the protocol layer never sees: what to answer to bytes that are not a valid
//! JSON-RPC message, shared by the stdio and HTTP transports.

use rmcp::model::{
    CallToolRequest, CallToolRequestMethod, CallToolRequestParams, ClientJsonRpcMessage, ClientRequest, CustomRequest,
    ErrorData, InitializeRequestParams, JsonRpcRequest, JsonRpcVersion2_0, NumberOrString, RequestId,
};
use serde_json::{Value, json};

/// Why a message was refused, and the id to answer to (when it had a usable one).
#[derive(Debug)]
pub(crate) struct Refusal {
    pub(crate) id: Option<RequestId>,
    pub(crate) error: ErrorData,
}

/// How a transport delimits messages, for the advice of its refusals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// stdio: one message per line.
    Line,
    /// Streamable HTTP: one message per POST body.
    Post,
}

impl Framing {
    /// How to send messages one at a time on this transport.
    fn one_at_a_time(self) -> &'static str {
        match self {
            Framing::Line => "send one message per line",
            Framing::Post => "send one message per POST",
        }
    }
}

/// Entry points for the fuzz targets in `fuzz/` (not part of the API).
#[doc(hidden)]
pub mod fuzzing {
    /// Decodes one incoming message as both transports do (their refusals differ only in the
    /// advice's wording; stdio's is used): `Ok(true)` for a request or notification the server
    /// would handle, `Ok(false)` for one it ignores, `Err` with the JSON-RPC error it would
    /// answer.
    pub fn decode(bytes: &[u8]) -> Result<bool, String> {
        match super::parse(bytes, super::Framing::Line) {
            Ok(m) => Ok(m.is_some()),
            Err(r) => Err(format!("{:?}", r.error)),
        }
    }
}

/// Parses one message that came framed as `framing` says; `Err` carries the error to answer
/// with, `Ok(None)` means the message is to be ignored without an answer (a malformed
/// notification or response).
pub(crate) fn parse(bytes: &[u8], framing: Framing) -> Result<Option<ClientJsonRpcMessage>, Refusal> {
    if let Some((id, call)) = parse_call(bytes) {
        return Ok(Some(call_message(id, call)));
    }
    match serde_json::from_slice::<ClientJsonRpcMessage>(bytes) {
        Ok(ClientJsonRpcMessage::Request(r)) => {
            let refused = match &r.request {
                ClientRequest::CustomRequest(c) => bad_params(c),
                other => dropped_params(other, bytes),
            };
            match refused {
                Some(error) => Err(Refusal { id: Some(r.id.clone()), error }),
                None => Ok(Some(ClientJsonRpcMessage::Request(r))),
            }
        }
        Ok(m) => Ok(Some(m)),
        Err(e) => refuse(bytes, &e, framing).map(|()| None),
    }
}

/// A `tools/call` request, field for field (no `flatten`, no untagged enum).
#[derive(serde::Deserialize)]
struct CallLine {
    #[allow(dead_code)] // Checked by its type: "2.0" only.
    jsonrpc: JsonRpcVersion2_0,
    id: RequestId,
    #[allow(dead_code)] // Checked by its type: "tools/call" only.
    method: CallToolRequestMethod,
    params: CallToolRequestParams,
    /// A message with `result` or `error` is not a request (rmcp's classification).
    result: Option<serde::de::IgnoredAny>,
    error: Option<serde::de::IgnoredAny>,
}

/// The hot path: a well-formed `tools/call` read straight into its concrete type, giving the
/// message `rmcp`'s general parse gives (the request's `_meta` in its extensions). That parse
/// buffers the message and tries every request type in turn (an error built per miss): about
/// a tenth of the server's CPU per call. Anything else (or any doubt) returns `None` and takes
/// the general parse. [`call_message`] makes the message of what it returns.
pub(crate) fn parse_call(bytes: &[u8]) -> Option<(RequestId, CallToolRequest)> {
    const METHOD: &[u8] = b"\"tools/call\"";
    if !bytes.windows(METHOD.len()).any(|w| w == METHOD) {
        return None;
    }
    let line: CallLine = serde_json::from_slice(bytes).ok()?;
    if line.result.is_some() || line.error.is_some() {
        return None;
    }
    let mut params = line.params;
    let meta = params.meta.take();
    let mut request = CallToolRequest::new(params);
    if let Some(meta) = meta {
        request.extensions.insert(meta);
    }
    Some((line.id, request))
}

/// The message of a `tools/call` request read by [`parse_call`].
pub(crate) fn call_message(id: RequestId, request: CallToolRequest) -> ClientJsonRpcMessage {
    ClientJsonRpcMessage::Request(JsonRpcRequest::new(id, ClientRequest::CallToolRequest(request)))
}

/// Requests of the MCP methods clients send to servers (2025-11-25).
const STANDARD_REQUESTS: [&str; 13] = [
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "logging/setLevel",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
];

/// True for the method of a standard MCP request (client to server).
pub(crate) fn is_standard_request(method: &str) -> bool {
    STANDARD_REQUESTS.contains(&method)
}

/// Fields of a request's `params`: name and JSON type (`string` or `object`).
type Fields = &'static [(&'static str, &'static str)];

/// The first field of a standard request's `params` that is missing or of the wrong type,
/// worded with its name and what it takes (serde's own message names neither).
fn field_problem(method: &str, params: &Value) -> Option<String> {
    let Value::Object(p) = params else {
        return Some(format!("`params` must be an object, not {}", kind(params)));
    };
    let (required, optional): (Fields, Fields) = match method {
        "tools/call" => (&[("name", "string")], &[("arguments", "object"), ("_meta", "object")]),
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => (&[("uri", "string")], &[]),
        "prompts/get" => (&[("name", "string")], &[("arguments", "object")]),
        "tools/list" | "resources/list" | "resources/templates/list" | "prompts/list" => (&[], &[("cursor", "string")]),
        "logging/setLevel" => {
            const LEVELS: [&str; 8] = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"];
            return match p.get("level") {
                Some(Value::String(l)) if LEVELS.contains(&l.as_str()) => None,
                Some(Value::String(l)) => {
                    Some(format!("`level` `{}` is not a log level; use one of {}", echo(l), LEVELS.join(", ")))
                }
                Some(other) => {
                    Some(format!("`level` must be a string (one of {}), not {}", LEVELS.join(", "), kind(other)))
                }
                None => Some(format!("`level` is missing; use one of {}", LEVELS.join(", "))),
            };
        }
        _ => return None,
    };
    let wrong = |field: &str, want: &str, v: &Value| match (want, v) {
        ("string", Value::String(_)) | ("object", Value::Object(_)) => None,
        _ => Some(format!(
            "`{field}` must be {}{}, not {}",
            if want == "object" { "an object" } else { "a string" },
            if field == "cursor" {
                " (the opaque `nextCursor` of a previous page; leave it out for the first page)"
            } else {
                ""
            },
            kind(v)
        )),
    };
    for (field, want) in required {
        match p.get(*field) {
            None => return Some(format!("`{field}` ({want}) is missing")),
            Some(v) => {
                if let Some(w) = wrong(field, want, v) {
                    return Some(w);
                }
            }
        }
    }
    optional.iter().find_map(|(field, want)| p.get(*field).filter(|v| !v.is_null()).and_then(|v| wrong(field, want, v)))
}

/// A JSON value's kind, for messages (`a string`, `an array`, ...).
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `rmcp` reads a standard method whose parameters do not fit as a custom request (which would
/// be answered "method not found"); it is a request with invalid parameters (`-32602`).
fn bad_params(c: &CustomRequest) -> Option<ErrorData> {
    let method = c.method.as_str();
    if !STANDARD_REQUESTS.contains(&method) {
        return None;
    }
    let params = c.params.clone().unwrap_or(Value::Null);
    let why = field_problem(method, &params)
        .or_else(|| match method {
            "tools/call" => serde_json::from_value::<CallToolRequestParams>(params).err().map(|e| e.to_string()),
            "initialize" => serde_json::from_value::<InitializeRequestParams>(params).err().map(|e| e.to_string()),
            _ => None,
        })
        .unwrap_or_else(|| "they do not match the method's parameters (see the MCP specification)".to_owned());
    Some(invalid_params(method, &why))
}

/// `rmcp` reads the parameters of a list request (`tools/list`, `resources/list`, ...) that do
/// not fit as no parameters at all (`{"cursor": 5}` would be answered with the first page);
/// such a request has invalid parameters (`-32602`). `bytes` is the message as it came: read
/// again only for a list request whose parameters came out absent.
pub(crate) fn dropped_params(request: &ClientRequest, bytes: &[u8]) -> Option<ErrorData> {
    let absent = match request {
        ClientRequest::ListToolsRequest(r) => r.params.is_none(),
        ClientRequest::ListResourcesRequest(r) => r.params.is_none(),
        ClientRequest::ListResourceTemplatesRequest(r) => r.params.is_none(),
        ClientRequest::ListPromptsRequest(r) => r.params.is_none(),
        _ => false,
    };
    if !absent {
        return None;
    }
    let message: Value = serde_json::from_slice(bytes).ok()?;
    let method = request.method();
    let why = field_problem(method, message.get("params").filter(|p| !p.is_null())?)?;
    Some(invalid_params(method, &why))
}

fn invalid_params(method: &str, why: &str) -> ErrorData {
    ErrorData::invalid_params(format!("Invalid params for `{method}`: {why}"), Some(json!({ "method": method })))
}

fn id_of(v: &Value) -> Option<RequestId> {
    match v {
        Value::String(s) => Some(NumberOrString::String(s.as_str().into())),
        Value::Number(n) => n.as_i64().map(NumberOrString::Number),
        _ => None,
    }
}

/// Classifies a message that failed to parse. `Ok(())`: nothing to answer.
fn refuse(bytes: &[u8], typed: &serde_json::Error, framing: Framing) -> Result<(), Refusal> {
    let value: Value = match serde_json::from_slice(bytes) {
        Ok(v) => v,
        // Valid JSON nested deeper than the parser goes: answered under its id when the top
        // level names one, so the client waiting for it is not left hanging.
        Err(e) if e.to_string().contains("recursion limit") => {
            return Err(Refusal {
                id: top_level_id(bytes),
                error: ErrorData::invalid_request(
                    "Invalid Request: the message nests arrays and objects more than 128 levels deep, the server's limit; send flatter arguments",
                    None,
                ),
            });
        }
        Err(e) => {
            return Err(Refusal {
                id: None,
                error: ErrorData::parse_error(format!("Parse error: the message is not valid JSON ({e})"), None),
            });
        }
    };
    let obj = match value {
        Value::Object(o) => o,
        Value::Array(_) => {
            return Err(Refusal {
                id: None,
                error: ErrorData::invalid_request(
                    format!("Invalid Request: JSON-RPC batches are not supported; {}", framing.one_at_a_time()),
                    None,
                ),
            });
        }
        _ => {
            return Err(Refusal {
                id: None,
                error: ErrorData::invalid_request("Invalid Request: a JSON-RPC message must be a JSON object", None),
            });
        }
    };
    let id = obj.get("id").and_then(id_of);
    if obj.contains_key("id") && id.is_none() {
        return Err(Refusal {
            id: None,
            error: ErrorData::invalid_request("Invalid Request: `id` must be a string or an integer", None),
        });
    }
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(Refusal {
            id,
            error: ErrorData::invalid_request("Invalid Request: `jsonrpc` must be \"2.0\"", None),
        });
    }
    // Neither a request nor a response (JSON-RPC 2.0 §4, §5): refused as such, under its id.
    if obj.contains_key("method") && (obj.contains_key("result") || obj.contains_key("error")) {
        return Err(Refusal {
            id,
            error: ErrorData::invalid_request(
                "Invalid Request: a message is either a request or notification (with `method`) or a response (with `result` or `error`), not both; send a request without `result` and `error`",
                None,
            ),
        });
    }
    match (obj.get("method"), id) {
        (Some(Value::String(method)), Some(id)) => {
            let params = obj.get("params").cloned().unwrap_or(Value::Null);
            let why = is_standard_request(method)
                .then(|| field_problem(method, &params))
                .flatten()
                .unwrap_or_else(|| echo(&typed.to_string()));
            Err(Refusal {
                id: Some(id),
                error: ErrorData::invalid_params(
                    format!("Invalid params for `{}`: {why}", echo(method)),
                    Some(json!({ "method": echo(method) })),
                ),
            })
        }
        // A notification or a response we cannot read: JSON-RPC forbids answering either.
        (Some(Value::String(_)), None) => Ok(()),
        (None, _) if obj.contains_key("result") || obj.contains_key("error") => Ok(()),
        (_, id) => Err(Refusal {
            id,
            error: ErrorData::invalid_request(
                "Invalid Request: not a JSON-RPC request, notification or response",
                None,
            ),
        }),
    }
}

/// The `id` member at the top level of the JSON object `bytes` starts with, read without
/// parsing the rest: a scan that skips strings and nested values, for a message too deep to
/// parse or too large to read whole (its first bytes). `None` when there is none before the
/// bytes end, or it is not a string or an integer.
pub(crate) fn top_level_id(bytes: &[u8]) -> Option<RequestId> {
    let (mut depth, mut at_key, mut i) = (0usize, false, 0usize);
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                let start = i + 1;
                let mut end = start;
                while *bytes.get(end)? != b'"' {
                    end += if bytes[end] == b'\\' { 2 } else { 1 };
                }
                if depth == 1 && at_key {
                    at_key = false;
                    if &bytes[start..end] == b"id" {
                        let value = bytes.get(end + 1..)?.trim_ascii_start().strip_prefix(b":")?;
                        let mut de = serde_json::Deserializer::from_slice(value);
                        return id_of(&serde::Deserialize::deserialize(&mut de).ok()?);
                    }
                }
                i = end;
            }
            b'{' => {
                depth += 1;
                at_key = depth == 1;
            }
            b'[' => depth += 1,
            b'}' | b']' => depth = depth.checked_sub(1)?,
            b',' if depth == 1 => at_key = true,
            _ => {}
        }
        i += 1;
    }
    None
}

/// An error reply's JSON. When the request's id could not be read, `"id": null` (JSON-RPC 2.0
/// §5 and MCP up to 2025-11-25 require the member; `rmcp` omits it, and the Python SDK then
/// waits for an answer that never matches).
pub(crate) fn error_json(error: &rmcp::model::JsonRpcError) -> serde_json::Result<Vec<u8>> {
    let mut v = serde_json::to_value(error)?;
    if let Value::Object(m) = &mut v {
        m.entry("id").or_insert(Value::Null);
    }
    serde_json::to_vec(&v)
}

/// At most this many characters of a name a client sent are echoed back in messages.
pub(crate) const ECHO_CHARS: usize = 64;

/// `name` for an error message: whole when short, else its first [`ECHO_CHARS`] characters
/// and how long it was.
pub(crate) fn echo(name: &str) -> String {
    if name.chars().count() <= ECHO_CHARS {
        return name.to_owned();
    }
    let head: String = name.chars().take(ECHO_CHARS).collect();
    format!("{head}... ({} bytes)", name.len())
}

/// The answer to a method this server does not serve: what it does serve.
pub(crate) fn method_not_found(method: &str) -> ErrorData {
    ErrorData::new(
        rmcp::model::ErrorCode::METHOD_NOT_FOUND,
        format!(
            "Method not found: `{}`. This server serves tools (tools/list, tools/call), tool documentation and cut results as resources (resources/list, resources/templates/list, resources/read), logging/setLevel and ping; it has no prompts and no resource subscriptions.",
            echo(method)
        ),
        None,
    )
}

/// The answer to a message larger than the configured limit.
pub(crate) fn too_large(limit: usize) -> ErrorData {
    ErrorData::invalid_request(
        format!(
            "Invalid Request: the message is larger than the server's limit of {limit} bytes (server.max_message_bytes)"
        ),
        Some(json!({ "max_message_bytes": limit })),
    )
}

#[cfg(test)]
mod tests {
    use rmcp::model::GetMeta;

    #[test]
    fn bad_params_name_the_field_and_what_it_takes() {
        let why = |m: &str, p: serde_json::Value| super::field_problem(m, &p);
        assert_eq!(
            why("tools/call", serde_json::json!({"name": "t", "arguments": "x"})).unwrap(),
            "`arguments` must be an object, not a string"
        );
        assert_eq!(why("tools/call", serde_json::json!({"arguments": {}})).unwrap(), "`name` (string) is missing");
        assert_eq!(why("tools/call", serde_json::json!("str")).unwrap(), "`params` must be an object, not a string");
        assert!(
            why("logging/setLevel", serde_json::json!({"level": "bogus"})).unwrap().contains("use one of debug, info")
        );
        assert_eq!(why("resources/read", serde_json::json!({})).unwrap(), "`uri` (string) is missing");
        assert_eq!(why("tools/call", serde_json::json!({"name": "t", "arguments": {"a": 1}})), None);
        assert_eq!(why("logging/setLevel", serde_json::json!({"level": "warning"})), None);
    }

    #[test]
    fn the_top_level_id_is_read_without_parsing_the_rest() {
        use super::{NumberOrString, top_level_id};
        let deep = format!(r#"{{"jsonrpc":"2.0","id":80,"params":{}{}}}"#, "[".repeat(500), "]".repeat(500));
        assert_eq!(top_level_id(deep.as_bytes()), Some(NumberOrString::Number(80)));
        let nested_first = r#"{"params":{"id":1,"a":["id",{"id":2}]},"x":"\"id\":3","id":"req-4"}"#;
        assert_eq!(top_level_id(nested_first.as_bytes()), Some(NumberOrString::String("req-4".into())));
        // Cut short (an oversized message's first bytes), absent, or not a valid id.
        assert_eq!(top_level_id(br#"{"jsonrpc":"2.0","params":{"pad":"xxxx"#), None);
        assert_eq!(top_level_id(br#"{"jsonrpc":"2.0","id":8,"params":{"pad":"xx"#), Some(NumberOrString::Number(8)));
        assert_eq!(top_level_id(br#"[{"id":1}]"#), None);
        assert_eq!(top_level_id(br#"{"id":null}"#), None);
        assert_eq!(top_level_id(br#"{"id":1.5}"#), None);
    }

    use super::*;

    fn code(bytes: &str) -> Option<(i32, Option<RequestId>)> {
        match parse(bytes.as_bytes(), Framing::Line) {
            Ok(_) => None,
            Err(r) => Some((r.error.code.0, r.id)),
        }
    }

    #[test]
    fn classifies_bad_messages() {
        assert_eq!(code("{not json").map(|c| c.0), Some(-32700));
        assert_eq!(code("[1,2]").map(|c| c.0), Some(-32600));
        assert_eq!(code("42").map(|c| c.0), Some(-32600));
        assert_eq!(code(r#"{"jsonrpc":"1.0","id":3,"method":"ping"}"#).map(|c| c.0), Some(-32600));
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":{},"method":"ping"}"#).map(|c| c.0), Some(-32600));
        let (c, id) = code(r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":5}}"#).unwrap();
        assert_eq!((c, id), (-32602, Some(NumberOrString::Number(7))));
        let (c, _) = code(r#"{"jsonrpc":"2.0","id":8,"method":"initialize","params":{}}"#).unwrap();
        assert_eq!(c, -32602);
        assert_eq!(code(r#"{"jsonrpc":"2.0","id":9,"method":"tools/list","params":5}"#).map(|c| c.0), Some(-32602));
        // A cursor of the wrong type (rmcp reads it as no parameters at all).
        let (c, id) = code(r#"{"jsonrpc":"2.0","id":10,"method":"tools/list","params":{"cursor":5}}"#).unwrap();
        assert_eq!((c, id), (-32602, Some(NumberOrString::Number(10))));
        assert!(
            parse(br#"{"jsonrpc":"2.0","id":10,"method":"tools/list","params":{"cursor":null}}"#, Framing::Line)
                .is_ok()
        );
        // `method` with `result` or `error`: neither a request nor a response.
        let (c, id) = code(r#"{"jsonrpc":"2.0","id":11,"method":"ping","result":{}}"#).unwrap();
        assert_eq!((c, id), (-32600, Some(NumberOrString::Number(11))));
        assert_eq!(code(r#"{"jsonrpc":"2.0","method":"ping","error":{}}"#), Some((-32600, None)));
        // Unknown methods parse (the handler answers -32601); broken notifications are ignored.
        assert!(parse(br#"{"jsonrpc":"2.0","id":1,"method":"no/such"}"#, Framing::Line).unwrap().is_some());
        let broken = br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":5}"#;
        assert!(parse(broken, Framing::Line).unwrap().is_none());
    }

    #[test]
    fn a_batch_is_refused_with_the_advice_of_its_transport() {
        let batch = br#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping"}]"#;
        for (framing, advice) in
            [(Framing::Line, "send one message per line"), (Framing::Post, "send one message per POST")]
        {
            let refusal = parse(batch, framing).unwrap_err();
            assert_eq!(refusal.error.code.0, -32600);
            assert_eq!(refusal.error.message, format!("Invalid Request: JSON-RPC batches are not supported; {advice}"));
        }
    }

    #[test]
    fn the_tools_call_fast_path_gives_the_general_parse() {
        let lines = [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}"#,
            r#"{"params":{"_meta":{"progressToken":"p1","x":[1]},"name":"e","arguments":{}},"method":"tools/call","id":"a","jsonrpc":"2.0"}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","requestState":"s","extra":true}}"#,
        ];
        for line in lines {
            let (id, call) = parse_call(line.as_bytes()).expect(line);
            let fast = call_message(id, call);
            let general = serde_json::from_slice::<ClientJsonRpcMessage>(line.as_bytes()).unwrap();
            assert_eq!(serde_json::to_value(&fast).unwrap(), serde_json::to_value(&general).unwrap(), "{line}");
            let ClientJsonRpcMessage::Request(r) = fast else { panic!("{line}") };
            let ClientJsonRpcMessage::Request(g) = general else { panic!("{line}") };
            assert_eq!(r.request.get_meta().0, g.request.get_meta().0, "{line}");
        }
        // Not requests, or not well-formed: the general parse decides.
        for line in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","result":{}}"#,
            r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"e"}}"#,
            r#"{"jsonrpc":"1.0","id":1,"method":"tools/call","params":{"name":"e"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"name":"tools/call"}}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":5}}"#,
        ] {
            assert!(parse_call(line.as_bytes()).is_none(), "{line}");
        }
    }
}
