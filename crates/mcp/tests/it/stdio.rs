//! The server over a newline-delimited stream, as `quiver serve` runs it on stdio.

use std::time::Duration;

use quiver_catalog::ExposureMode;
use quiver_mcp::ServerOptions;
use serde_json::{Value, json};

use crate::support::{Fixture, RawClient, names};

fn options() -> ServerOptions {
    ServerOptions { max_message_bytes: 4096, page_size: 4, ..ServerOptions::default() }
}

fn error_code(m: &Value) -> i64 {
    m["error"]["code"].as_i64().unwrap_or_else(|| panic!("not an error: {m}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_json_rpc_errors_and_the_session_survives() {
    let f = Fixture::new(ExposureMode::Full, options());
    let mut c = RawClient::start(&f.server);

    // Before initialize: requests are refused with their id; notifications are ignored.
    c.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).await;
    c.send(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#).await;
    let m = c.recv().await;
    assert_eq!((error_code(&m), &m["id"]), (-32600, &json!(1)), "{m}");
    assert!(m["error"]["message"].as_str().unwrap().contains("initialize"), "{m}");
    // Ping is allowed before initialize.
    c.send(r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#).await;
    assert_eq!(c.recv().await, json!({"jsonrpc": "2.0", "id": 2, "result": {}}));
    // Garbage before initialize: a parse error, and the session still starts.
    c.send("this is not json").await;
    let m = c.recv().await;
    // JSON-RPC 2.0: an unreadable id is answered with `"id": null`, not without `id`.
    assert_eq!((error_code(&m), m.get("id")), (-32700, Some(&Value::Null)), "{m}");

    c.initialize("bad-input-test", json!({})).await;

    // Malformed JSON, batches, wrong versions, bad ids.
    for (line, code) in [
        ("{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":", -32700),
        ("[{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"ping\"}]", -32600),
        ("\"just a string\"", -32600),
        ("{\"jsonrpc\":\"1.0\",\"id\":5,\"method\":\"ping\"}", -32600),
        ("{\"jsonrpc\":\"2.0\",\"id\":[6],\"method\":\"ping\"}", -32600),
    ] {
        c.send(line).await;
        let m = c.recv().await;
        assert_eq!(error_code(&m), code, "{line} -> {m}");
        if line.starts_with('[') {
            // The advice fits the transport: over stdio a message is a line.
            let text = m["error"]["message"].as_str().unwrap();
            assert!(text.contains("batches are not supported; send one message per line"), "{m}");
        }
    }
    // Unknown method: -32601 with the id, saying what is served; a huge name is not echoed whole.
    let m = c.request("resources/not-a-method", json!({})).await;
    assert_eq!(error_code(&m), -32601, "{m}");
    assert!(m["error"]["message"].as_str().unwrap().contains("tools/call"), "{m}");
    for method in ["prompts/get", "resources/subscribe"] {
        let m = c.request(method, json!({"name": "x", "uri": "quiver://tools/x"})).await;
        assert_eq!(error_code(&m), -32601, "{m}");
        assert!(m["error"]["message"].as_str().unwrap().contains("tools/call"), "{method}: {m}");
    }
    let m = c.request(&"m".repeat(3000), json!({})).await;
    assert_eq!(error_code(&m), -32601, "{m}");
    assert!(m.to_string().len() < 1000, "the method name was echoed whole: {} bytes", m.to_string().len());
    let m = c.call(&"t".repeat(3000), json!({})).await;
    assert_eq!(error_code(&m), -32602, "{m}");
    assert!(m.to_string().len() < 1500, "the tool name was echoed whole: {} bytes", m.to_string().len());
    // Known method, invalid params: -32602 with the id.
    c.send(r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":42}}"#).await;
    let m = c.recv().await;
    assert_eq!((error_code(&m), &m["id"]), (-32602, &json!(7)), "{m}");
    // A second initialize is refused.
    let m = c
        .request("initialize", json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "again", "version": "1"}}))
        .await;
    assert_eq!(error_code(&m), -32600, "{m}");
    // An oversized message (limit 4096 bytes) is refused without reading it as a request,
    // under the id its first bytes name (else `null`); a message just under the limit is fine.
    let big = format!(r#"{{"jsonrpc":"2.0","id":8,"method":"ping","params":{{"pad":"{}"}}}}"#, "x".repeat(5000));
    c.send(&big).await;
    let m = c.recv().await;
    assert_eq!((error_code(&m), m.get("id")), (-32600, Some(&json!(8))), "{m}");
    assert_eq!(m["error"]["data"]["max_message_bytes"], 4096, "{m}");
    // (Read in 64 KiB chunks: an id after the first chunk is not seen.)
    let big = format!(r#"{{"jsonrpc":"2.0","method":"ping","params":{{"pad":"{}"}},"id":8}}"#, "x".repeat(70_000));
    c.send(&big).await;
    let m = c.recv().await;
    assert_eq!((error_code(&m), m.get("id")), (-32600, Some(&Value::Null)), "{m}");
    // Valid JSON nested past the parser's limit is answered under its id, and called deep.
    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":"deep","method":"ping","params":{{"a":{}{}}}}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    c.send(&deep).await;
    let m = c.recv().await;
    assert_eq!((error_code(&m), &m["id"]), (-32600, &json!("deep")), "{m}");
    assert!(m["error"]["message"].as_str().unwrap().contains("128 levels deep"), "{m}");
    let fits =
        format!(r#"{{"jsonrpc":"2.0","id":9,"method":"ping","params":{{"_meta":{{"pad":"{}"}}}}}}"#, "x".repeat(3000));
    c.send(&fits).await;
    assert_eq!(c.recv().await["id"], 9);
    // Invalid cursors: not ours, and ours but pointing nowhere.
    for cursor in ["nope", "ffffffffffffffff00000004", "00000000000000000000000"] {
        let m = c.request("tools/list", json!({ "cursor": cursor })).await;
        assert_eq!(error_code(&m), -32602, "{cursor} -> {m}");
    }
    // Blank lines and CRLF are tolerated.
    c.send_raw(b"\r\n\n").await;
    c.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"ping\"}\r\n").await;
    assert_eq!(c.recv().await["id"], 10);
    // An unknown tool is a protocol error (-32602) that suggests names and tool_search.
    let m = c.call("test_simple_txt", json!({})).await;
    assert_eq!(error_code(&m), -32602, "{m}");
    assert!(m["error"]["message"].as_str().unwrap().contains("test_simple_text"), "{m}");

    // After all that, the session works.
    let r = c.call("test_simple_text", json!({})).await;
    assert_eq!(r["result"]["content"][0]["text"], "This is a simple text response for testing.", "{r}");
    assert!(c.notes.is_empty(), "no stray messages: {:?}", c.notes);
}

/// A list request's `cursor` that is not a string is invalid params naming the field (rmcp reads
/// such parameters as none at all, which answered the first page); no cursor, or `null`, is
/// the first page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_that_is_not_a_string_is_refused_naming_the_field() {
    let f = Fixture::new(ExposureMode::Full, options());
    let mut c = RawClient::start(&f.server);
    c.initialize("cursor-type-test", json!({})).await;
    for (method, cursor, kind) in [
        ("tools/list", json!(5), "a number"),
        ("tools/list", json!({"offset": 4}), "an object"),
        ("tools/list", json!(["x"]), "an array"),
        ("resources/list", json!(true), "a boolean"),
    ] {
        let m = c.request(method, json!({ "cursor": cursor })).await;
        assert_eq!(error_code(&m), -32602, "{method} {cursor} -> {m}");
        let text = m["error"]["message"].as_str().unwrap();
        assert!(text.contains(&format!("Invalid params for `{method}`: `cursor` must be a string")), "{m}");
        assert!(text.contains("`nextCursor` of a previous page") && text.ends_with(&format!("not {kind}")), "{m}");
    }
    for params in [json!({}), json!({ "cursor": null })] {
        let m = c.request("tools/list", params.clone()).await;
        assert_eq!(m["result"]["tools"].as_array().map(Vec::len), Some(4), "{params} -> {m}");
    }
}

/// A message with `method` and `result` (or `error`) is neither a request nor a response:
/// `-32600` under its id (`null` without one), saying so; it used to be invalid params.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_with_method_and_result_or_error_is_an_invalid_request() {
    let f = Fixture::new(ExposureMode::Full, options());
    let mut c = RawClient::start(&f.server);
    c.initialize("method-and-result-test", json!({})).await;
    for (line, id) in [
        (r#"{"jsonrpc":"2.0","id":21,"method":"ping","result":{}}"#, json!(21)),
        (r#"{"jsonrpc":"2.0","id":"r","method":"tools/list","params":{},"result":{"tools":[]}}"#, json!("r")),
        (
            r#"{"jsonrpc":"2.0","id":22,"method":"tools/call","params":{"name":"marker_echo","arguments":{"text":"x"}},"error":{"code":1,"message":"m"}}"#,
            json!(22),
        ),
        (r#"{"jsonrpc":"2.0","method":"notifications/initialized","result":{}}"#, Value::Null),
    ] {
        c.send(line).await;
        let m = c.recv().await;
        assert_eq!((error_code(&m), &m["id"]), (-32600, &id), "{line} -> {m}");
        let text = m["error"]["message"].as_str().unwrap();
        assert!(text.contains("(with `method`) or a response (with `result` or `error`), not both"), "{m}");
    }
    // The session goes on.
    assert_eq!(c.call("marker_echo", json!({"text": "x"})).await["result"]["isError"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_ending_ends_the_session_cleanly() {
    let f = Fixture::new(ExposureMode::Full, options());
    let mut c = RawClient::start(&f.server);
    c.initialize("eof-test", json!({})).await;
    // Half a message, then EOF: no answer, no crash, the server returns.
    c.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":1,").await;
    tokio::io::AsyncWriteExt::shutdown(&mut c.write).await.expect("close");
    let done = tokio::time::timeout(Duration::from_secs(10), c.server).await.expect("the server stops");
    done.expect("no panic").expect("clean end");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_is_the_surface_in_order_with_metadata_and_pages() {
    let f = Fixture::new(ExposureMode::Full, options());
    let mut c = RawClient::start(&f.server);
    c.initialize("list-test", json!({})).await;
    let tools = c.list_all().await;
    // Full mode: every visible tool of both plugins, sorted by name (the catalog's order), no
    // meta tools; four per page.
    let got = names(&tools);
    let mut sorted = got.clone();
    sorted.sort();
    assert_eq!(got, sorted);
    assert_eq!(got.len(), 19, "{got:?}");
    assert!(got.contains(&"test_deferred_echo".to_owned()), "full mode lists deferred tools too");
    assert!(got.contains(&"json_schema_2020_12_tool".to_owned()) && got.contains(&"marker_echo".to_owned()));
    // A second listing is byte-identical.
    assert_eq!(c.list_all().await, tools);

    let simple = tools.iter().find(|t| t["name"] == "test_simple_text").unwrap();
    assert_eq!(simple["annotations"]["readOnlyHint"], true, "{simple}");
    // destructiveHint and idempotentHint mean something only for tools that are not read-only.
    assert!(simple["annotations"].get("destructiveHint").is_none(), "{simple}");
    assert_eq!(simple["outputSchema"]["type"], "object", "{simple}");
    let meta = &simple["_meta"];
    assert_eq!(meta["io.github.quiver/plugin"], "conformance-tools", "{meta}");
    assert_eq!(meta["io.github.quiver/version"], "0.1.0");
    assert_eq!(meta["io.github.quiver/state"], "active");
    assert_eq!(meta["io.github.quiver/sha256"].as_str().unwrap().len(), 64);
    assert_eq!(meta["io.github.quiver/signer"], f.key.pair.public_key().key_id().as_str());
    // The 2020-12 keywords of a manifest schema reach the client, its `$schema` included as the
    // author wrote it (SEP-1613; the conformance scenario json-schema-2020-12 checks it).
    let schema = &tools.iter().find(|t| t["name"] == "json_schema_2020_12_tool").unwrap()["inputSchema"];
    assert_eq!(schema["$schema"], "https://json-schema.org/draft/2020-12/schema", "{schema}");
    assert_eq!(schema["additionalProperties"], false);
    assert!(schema["$defs"]["address"].is_object());

    // A cursor from a listing that has since changed is refused.
    let first = c.request("tools/list", json!({})).await;
    let cursor = first["result"]["nextCursor"].as_str().unwrap().to_owned();
    f.remove("marker-plugin");
    let m = c.request("tools/list", json!({ "cursor": cursor })).await;
    assert_eq!(m["error"]["code"], -32602, "{m}");
    assert!(m["error"]["message"].as_str().unwrap().contains("changed"), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_search_loads_matches_and_announces_the_change() {
    let f = Fixture::new(ExposureMode::Hybrid, options());
    let mut c = RawClient::start(&f.server);
    c.initialize("lazy-client", json!({})).await;
    let listed = names(&c.list_all().await);
    // Lazy: the active tools, then tool_search; the deferred tool is not listed.
    assert_eq!(listed.last().map(String::as_str), Some("tool_search"), "{listed:?}");
    assert!(!listed.contains(&"test_deferred_echo".to_owned()) && !listed.contains(&"run_tool".to_owned()));
    let search = c.list_all().await.into_iter().find(|t| t["name"] == "tool_search").unwrap();
    // Its description indexes what can be found.
    assert!(search["description"].as_str().unwrap().contains("conformance"), "{search}");
    assert_eq!(search["_meta"]["io.github.quiver/meta"], true);

    let r = c.call("tool_search", json!({ "query": "deferred echo" })).await;
    let found = &r["result"]["structuredContent"];
    assert_eq!(found["tools"][0]["name"], "test_deferred_echo", "{r}");
    assert_eq!(found["loaded"], json!(["test_deferred_echo"]), "{r}");
    // A search loads its confident matches only; weaker ones are named, not loaded.
    assert!(found["tools"].as_array().unwrap().iter().any(|t| t["name"] == "marker_echo"), "{r}");
    assert!(found["note"].as_str().unwrap().contains("Weaker matches were not loaded (marker_echo)"), "{r}");
    // The moment a tool is loaded is when its prompt snippet is shown.
    assert_eq!(
        found["how_to_use"]["test_deferred_echo"],
        "test_deferred_echo(text) returns text unchanged; use it to check a round trip.",
        "{r}"
    );
    // The change was announced before the answer.
    assert_eq!(c.notes.len(), 1, "{:?}", c.notes);
    assert_eq!(c.notes[0]["method"], "notifications/tools/list_changed");
    let relisted = names(&c.list_all().await);
    assert_eq!(relisted.last().map(String::as_str), Some("test_deferred_echo"), "loaded tools follow the meta tools");
    let r = c.call("test_deferred_echo", json!({ "text": "found" })).await;
    assert_eq!(r["result"]["content"][0]["text"], "found", "{r}");

    // Searching again changes nothing: no second notification.
    c.notes.clear();
    c.call("tool_search", json!({ "query": "deferred echo" })).await;
    assert!(c.notes.is_empty(), "{:?}", c.notes);
    // Bad arguments and bad regexes are tool errors the model can read.
    let r = c.call("tool_search", json!({ "query": "x", "bogus": 1 })).await;
    assert_eq!(r["result"]["isError"], true, "{r}");
    let r = c.call("tool_search", json!({ "query": "(", "mode": "regex" })).await;
    assert_eq!(r["result"]["isError"], true, "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_generic_lane_reaches_deferred_tools_without_a_refresh() {
    let f = Fixture::new(ExposureMode::Hybrid, options());
    let mut c = RawClient::start(&f.server);
    c.initialize("hybrid-client", json!({})).await;
    let listed = names(&c.list_all().await);
    assert!(
        listed.ends_with(&["tool_search".to_owned(), "list_tools".to_owned(), "run_tool".to_owned()]),
        "{listed:?}"
    );
    assert!(!listed.contains(&"test_deferred_echo".to_owned()));
    // list_tools lists what run_tool can reach and loads nothing.
    let r = c.call("list_tools", json!({ "query": "deferred echo" })).await;
    assert_eq!(r["result"]["structuredContent"]["tools"][0]["name"], "test_deferred_echo", "{r}");
    assert!(c.notes.is_empty());
    let r = c.call("run_tool", json!({ "name": "test_deferred_echo", "arguments": { "text": "via run_tool" } })).await;
    assert_eq!(r["result"]["content"][0]["text"], "via run_tool", "{r}");
    assert_eq!(r["result"]["_meta"]["io.github.quiver/call"]["lane"], "generic", "{r}");
    assert!(c.notes.is_empty(), "run_tool changes no list: {:?}", c.notes);
    // Invalid arguments through either lane: a tool error with JSON pointers.
    for (name, args) in [
        ("marker_echo", json!({ "text": 5 })),
        ("run_tool", json!({ "name": "test_deferred_echo", "arguments": { "text": 5 } })),
    ] {
        let r = c.call(name, args).await;
        assert_eq!(r["result"]["isError"], true, "{r}");
        let text = r["result"]["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("invalid_arguments") && text.contains("/text"), "{text}");
    }
    // run_tool refuses the meta tools, as a tool error.
    let r = c.call("run_tool", json!({ "name": "tool_search", "arguments": { "query": "x" } })).await;
    assert_eq!(r["result"]["isError"], true, "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_progress_and_levels_reach_the_client() {
    let f = Fixture::new(ExposureMode::Full, options());
    let mut c = RawClient::start(&f.server);
    c.initialize("services-test", json!({})).await;
    assert_eq!(c.request("logging/setLevel", json!({ "level": "debug" })).await["result"], json!({}));
    let r = c.call("test_tool_with_logging", json!({})).await;
    assert_eq!(r["result"]["isError"], false, "{r}");
    let logs: Vec<&Value> = c.notes.iter().filter(|n| n["method"] == "notifications/message").collect();
    assert_eq!(logs.len(), 3, "{:?}", c.notes);
    assert_eq!(logs[0]["params"]["data"], "Tool execution started");
    assert_eq!(logs[0]["params"]["level"], "info");
    assert_eq!(logs[0]["params"]["logger"], "test_tool_with_logging");

    // Above the tool's level: nothing.
    c.notes.clear();
    c.request("logging/setLevel", json!({ "level": "error" })).await;
    c.call("test_tool_with_logging", json!({})).await;
    assert!(c.notes.is_empty(), "{:?}", c.notes);

    // Progress only with a token, strictly increasing, before the response.
    let r = c
        .request(
            "tools/call",
            json!({ "name": "test_tool_with_progress", "arguments": {}, "_meta": { "progressToken": "p-1" } }),
        )
        .await;
    assert_eq!(r["result"]["isError"], false, "{r}");
    let progress: Vec<f64> = c
        .notes
        .iter()
        .filter(|n| n["method"] == "notifications/progress")
        .map(|n| {
            assert_eq!(n["params"]["progressToken"], "p-1");
            assert_eq!(n["params"]["total"], 100.0);
            n["params"]["progress"].as_f64().unwrap()
        })
        .collect();
    assert_eq!(progress, [0.0, 50.0, 100.0]);
    c.notes.clear();
    c.call("test_tool_with_progress", json!({})).await;
    assert!(c.notes.is_empty(), "no token, no progress: {:?}", c.notes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_blocks_errors_and_structured_content() {
    let f = Fixture::new(ExposureMode::Full, options());
    let mut c = RawClient::start(&f.server);
    c.initialize("content-test", json!({})).await;
    let r = c.call("test_multiple_content_types", json!({})).await;
    let kinds: Vec<&str> =
        r["result"]["content"].as_array().unwrap().iter().map(|b| b["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["text", "image", "resource"], "{r}");
    assert_eq!(r["result"]["structuredContent"]["summary"], "text, image and resource");
    let r = c.call("test_audio_content", json!({})).await;
    assert_eq!(r["result"]["content"][0]["mimeType"], "audio/wav", "{r}");
    let r = c.call("test_error_handling", json!({})).await;
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert!(r["result"]["content"][0]["text"].as_str().unwrap().contains("This tool intentionally returns an error"));
    assert_eq!(r["result"]["_meta"]["io.github.quiver/error"]["code"], "tool_error");
    // A panicking tool is a tool error, and the session goes on.
    let r = c.call("marker_panic", json!({ "text": "boom" })).await;
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert_eq!(
        c.call("marker_echo", json!({ "text": "still here" })).await["result"]["structuredContent"]["text"],
        "still here"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elicitation_and_sampling_round_trip_through_the_client() {
    let f = Fixture::new(ExposureMode::Full, options());
    let mut c = RawClient::start(&f.server);
    c.initialize("services-test", json!({ "elicitation": {}, "sampling": {} })).await;
    let mut asked = Vec::new();
    let r = c
        .request_with(
            "tools/call",
            json!({ "name": "test_elicitation", "arguments": { "message": "Who are you?" } }),
            |m| {
                asked.push(m.clone());
                json!({ "action": "accept", "content": { "username": "ann", "email": "ann@example.com" } })
            },
        )
        .await;
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0]["method"], "elicitation/create");
    assert_eq!(asked[0]["params"]["message"], "Who are you?");
    assert_eq!(asked[0]["params"]["requestedSchema"]["required"], json!(["username", "email"]));
    let text = r["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("action=accept") && text.contains("ann@example.com"), "{text}");

    let r = c
        .request_with("tools/call", json!({ "name": "test_sampling", "arguments": { "prompt": "Say hi" } }), |m| {
            assert_eq!(m["method"], "sampling/createMessage");
            assert_eq!(m["params"]["messages"][0]["content"]["text"], "Say hi");
            assert_eq!(m["params"]["maxTokens"], 100);
            json!({ "role": "assistant", "content": { "type": "text", "text": "hi there" }, "model": "m", "stopReason": "endTurn" })
        })
        .await;
    assert_eq!(r["result"]["content"][0]["text"], "LLM response: hi there", "{r}");

    // A client without the capabilities: the tool gets an error, the call a tool error.
    let mut plain = RawClient::start(&f.server);
    plain.initialize("no-caps", json!({})).await;
    let r = plain.call("test_elicitation", json!({ "message": "x" })).await;
    assert_eq!(r["result"]["isError"], true, "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_reaches_the_call() {
    let f = Fixture::new(ExposureMode::Full, options());
    let mut c = RawClient::start(&f.server);
    c.initialize("cancel-test", json!({})).await;
    c.send(r#"{"jsonrpc":"2.0","id":"slow","method":"tools/call","params":{"name":"marker_sleep","arguments":{"ms":20000}}}"#).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    c.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"slow","reason":"test"}}"#)
        .await;
    // The router records the call as cancelled long before its 20 s; no response is sent for it.
    let start = std::time::Instant::now();
    loop {
        let stats = f.router.telemetry().snapshot();
        if stats.errors.get("cancelled").copied().unwrap_or(0) == 1 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "the call was not cancelled: {stats:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(c.quiet_for(Duration::from_millis(300)).await, None);
    assert_eq!(c.request("ping", json!({})).await["result"], json!({}));
}

/// A call sent under the id of a call still running is refused under that id, and the running
/// call is still answered: each id gets its answers, none is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_reusing_the_id_of_one_in_progress_is_refused_and_both_are_answered() {
    let f = Fixture::new(ExposureMode::Full, options());
    let mut c = RawClient::start(&f.server);
    c.initialize("dup-test", json!({})).await;
    let slow =
        r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"marker_sleep","arguments":{"ms":300}}}"#;
    c.send(slow).await;
    c.send(
        r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"marker_echo","arguments":{"text":"x"}}}"#,
    )
    .await;
    let first = c.recv().await;
    assert_eq!((error_code(&first), &first["id"]), (-32600, &json!(9)), "{first}");
    assert!(first["error"]["message"].as_str().unwrap().contains("still in progress"), "{first}");
    let second = c.recv().await;
    assert_eq!(second["id"], 9, "{second}");
    assert!(
        second.get("result").is_some() && second["result"]["isError"] != true,
        "the running call's answer: {second}"
    );
    // Once answered, the id may be used again.
    assert!(
        c.request("tools/call", json!({"name": "marker_echo", "arguments": {"text": "y"}}))
            .await
            .get("result")
            .is_some()
    );
}

/// A client that closes its input after its last request (`quiver serve < requests.jsonl`)
/// still gets an answer to every request it sent: the calls in flight are answered before the
/// session ends, and a last line without its newline is read as a line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_sent_before_the_input_closes_is_answered() {
    use tokio::io::AsyncWriteExt;
    let f = Fixture::new(ExposureMode::Full, options());
    let mut c = RawClient::start(&f.server);
    c.initialize("eof-test", json!({})).await;
    c.send(r#"{"jsonrpc":"2.0","id":"slow","method":"tools/call","params":{"name":"marker_sleep","arguments":{"ms":300}}}"#).await;
    c.send(r#"{"jsonrpc":"2.0","id":"echo","method":"tools/call","params":{"name":"marker_echo","arguments":{"text":"x"}}}"#).await;
    // Refused by the transport itself (a malformed request): answered before the end too.
    c.send(r#"{"jsonrpc":"2.0","id":"bad","method":"tools/call","params":{"arguments":{}}}"#).await;
    c.send_raw(br#"{"jsonrpc":"2.0","id":"last","method":"ping"}"#).await;
    c.write.shutdown().await.unwrap();
    let (mut answered, mut refused) = (Vec::new(), Vec::new());
    while let Some(v) = c.next_or_end().await {
        match (v["id"].as_str(), v.get("result").is_some()) {
            (Some(id), true) => answered.push(id.to_owned()),
            (Some(id), false) => refused.push((id.to_owned(), v["error"]["message"].as_str().unwrap_or("").to_owned())),
            _ => {}
        }
    }
    answered.sort();
    assert_eq!(answered, ["echo", "last", "slow"]);
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0].0, "bad");
    assert!(refused[0].1.contains("`name` (string) is missing"), "{refused:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rescan_that_changes_the_surface_notifies_the_session() {
    let f = Fixture::new(ExposureMode::Full, options());
    let mut c = RawClient::start(&f.server);
    c.initialize("rescan-test", json!({})).await;
    assert!(names(&c.list_all().await).contains(&"marker_echo".to_owned()));
    f.remove("marker-plugin");
    let n = c.recv().await;
    assert_eq!(n["method"], "notifications/tools/list_changed", "{n}");
    assert!(!names(&c.list_all().await).contains(&"marker_echo".to_owned()));
    // A rescan that changes nothing this session sees sends nothing.
    f.changes.send_replace(f.host.catalog());
    assert_eq!(c.quiet_for(Duration::from_millis(300)).await, None);
    // Adding it back is announced again.
    f.install("marker-plugin");
    assert_eq!(c.recv().await["method"], "notifications/tools/list_changed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deprecated_names_carry_their_notice() {
    let f = Fixture::new(ExposureMode::Full, options());
    let mut c = RawClient::start(&f.server);
    c.initialize("deprecation-test", json!({})).await;
    let tools = c.list_all().await;
    assert!(!names(&tools).contains(&"test_text_old".to_owned()));
    let simple = tools.iter().find(|t| t["name"] == "test_simple_text").unwrap();
    // Notices belong in call results only: nothing about the alias in tools/list.
    assert!(!simple.to_string().contains("test_text_old"), "{simple}");
    let r = c.call("test_text_old", json!({})).await;
    let notice = &r["result"]["_meta"]["io.github.quiver/notice"];
    assert_eq!(notice["replacement"], "test_simple_text", "{r}");
    assert!(notice["message"].as_str().unwrap().contains("deprecated"), "{r}");
    assert_eq!(r["result"]["content"][0]["text"], "This is a simple text response for testing.");
    let last = r["result"]["content"].as_array().unwrap().last().unwrap()["text"].as_str().unwrap().to_owned();
    assert!(last.starts_with("Note: tool `test_text_old` is deprecated"), "{last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_ask_the_user_through_elicitation() {
    let f = Fixture::new(ExposureMode::Full, options());
    let mut c = RawClient::start(&f.server);
    c.initialize("approval-test", json!({ "elicitation": {} })).await;
    for (answer, confirmed) in
        [(json!({ "action": "accept", "content": { "confirm": true } }), true), (json!({ "action": "decline" }), false)]
    {
        let mut asked = 0;
        let r = c
            .request_with("tools/call", json!({ "name": "test_confirmed_write", "arguments": {} }), |m| {
                asked += 1;
                assert_eq!(m["method"], "elicitation/create", "{m}");
                assert!(m["params"]["message"].as_str().unwrap().contains("test_confirmed_write"), "{m}");
                answer.clone()
            })
            .await;
        assert_eq!(asked, 1);
        if confirmed {
            assert_eq!(r["result"]["content"][0]["text"], "confirmed: true", "{r}");
        } else {
            assert_eq!(r["result"]["isError"], true, "{r}");
        }
    }
    // A client that cannot be asked gets a tool error saying how to confirm; the confirmation
    // key in the request's `_meta` runs it.
    let mut plain = RawClient::start(&f.server);
    plain.initialize("no-elicitation", json!({})).await;
    let r = plain.call("test_confirmed_write", json!({})).await;
    assert_eq!(r["result"]["isError"], true, "{r}");
    let key = quiver_router::codes::CONFIRM_META_KEY;
    let r = plain
        .request("tools/call", json!({ "name": "test_confirmed_write", "arguments": {}, "_meta": { key: true } }))
        .await;
    assert_eq!(r["result"]["content"][0]["text"], "confirmed: true", "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_search_unloads_tools_and_announces_the_change() {
    let f = Fixture::new(ExposureMode::Hybrid, options());
    let mut c = RawClient::start(&f.server);
    c.initialize("lazy-client", json!({})).await;
    c.call("tool_search", json!({ "query": "deferred echo" })).await;
    assert!(names(&c.list_all().await).contains(&"test_deferred_echo".to_owned()));
    c.notes.clear();
    let r = c.call("tool_search", json!({ "query": "", "unload": ["test_deferred_echo"] })).await;
    let out = &r["result"]["structuredContent"];
    assert_eq!(out["unloaded"], json!(["test_deferred_echo"]), "{r}");
    assert!(out.get("loaded").is_none() && out["tools"] == json!([]), "unload only loads nothing: {r}");
    assert_eq!(c.notes.len(), 1, "{:?}", c.notes);
    assert_eq!(c.notes[0]["method"], "notifications/tools/list_changed");
    assert!(!names(&c.list_all().await).contains(&"test_deferred_echo".to_owned()), "gone from the list");
    // Unloading what is not loaded changes nothing and announces nothing.
    c.notes.clear();
    let r = c.call("tool_search", json!({ "query": "", "unload": ["test_deferred_echo"] })).await;
    assert!(r["result"]["structuredContent"].get("unloaded").is_none(), "{r}");
    assert!(c.notes.is_empty(), "{:?}", c.notes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_malformed_calls_get_escalating_hints_then_a_refusal() {
    let f = Fixture::new(ExposureMode::Full, options());
    let mut c = RawClient::start(&f.server);
    c.initialize("hint-client", json!({})).await;
    let bad = json!({ "txt": 1 });
    let mut messages = Vec::new();
    for level in 1..=3 {
        let r = c.call("marker_echo", bad.clone()).await;
        assert_eq!(r["result"]["isError"], true, "{r}");
        let body = &r["result"]["structuredContent"];
        let text = r["result"]["content"][0]["text"].as_str().unwrap().to_owned();
        assert!(text.contains("invalid_arguments") || body.to_string().contains("invalid_arguments"), "{r}");
        assert!(r.to_string().contains(&format!("\"level\":{level}")), "level {level}: {r}");
        messages.push(text);
    }
    assert!(messages[0].contains("takes"), "{}", messages[0]);
    assert!(messages[1].contains("a valid call looks like"), "{}", messages[1]);
    assert!(messages[2].contains("whole input schema"), "{}", messages[2]);
    // The fourth identical call is refused without running, and says what to do instead.
    let r = c.call("marker_echo", bad.clone()).await;
    assert_eq!(r["result"]["isError"], true, "{r}");
    let text = r.to_string();
    assert!(text.contains("refused without running") && text.contains("tool_search"), "{r}");
    // A corrected call runs, and clears the record.
    let r = c.call("marker_echo", json!({ "text": "fixed" })).await;
    assert_ne!(r["result"]["isError"], true, "{r}");
}

/// Mistakes in `run_tool`'s own fields count against `run_tool` with those arguments, not
/// against the tool it names: after three envelopes with a stray field, the same tool called
/// correctly (directly or through `run_tool`) runs, and the third such envelope is the one
/// refused on its next repeat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_tool_envelope_mistakes_do_not_lock_out_the_tool_they_name() {
    let f = Fixture::new(ExposureMode::Full, options());
    let mut c = RawClient::start(&f.server);
    c.initialize("hint-client", json!({})).await;
    let stray = json!({ "name": "marker_echo", "arguments": { "text": "hi" }, "x": 1 });
    for _ in 0..3 {
        let r = c.call("run_tool", stray.clone()).await;
        assert_eq!(r["result"]["isError"], true, "{r}");
        assert!(!r.to_string().contains("refused without running"), "{r}");
    }
    let r = c.call("marker_echo", json!({ "text": "hi" })).await;
    assert_ne!(r["result"]["isError"], true, "a valid direct call was refused: {r}");
    let r = c.call("run_tool", json!({ "name": "marker_echo", "arguments": { "text": "hi" } })).await;
    assert_ne!(r["result"]["isError"], true, "a valid call through run_tool was refused: {r}");
    let r = c.call("run_tool", stray.clone()).await;
    assert!(r.to_string().contains("refused without running"), "the repeated envelope ran again: {r}");
}

/// A malformed `run_tool` envelope (here: naming a meta tool) gets a hint about `run_tool`'s own
/// fields, not "no named fields", and the message names each meta tool once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_run_tool_envelope_gets_a_hint_about_run_tools_fields() {
    let f = Fixture::new(ExposureMode::Full, options());
    let mut c = RawClient::start(&f.server);
    c.initialize("hint-client", json!({})).await;
    let r = c.call("run_tool", json!({ "name": "run_tool" })).await;
    assert_eq!(r["result"]["isError"], true, "{r}");
    let text = r["result"]["content"][0]["text"].as_str().unwrap().to_owned();
    assert!(!text.contains("no named fields"), "{text}");
    assert!(text.contains("name (string, required)"), "{text}");
    assert_eq!(text.matches("`list_tools`").count(), 1, "{text}");
}

/// Adaptive and hybrid sessions count calls as intent: a tool called through `run_tool` becomes
/// typed in the session's tool list (announced with `list_changed`, once); a lazy session's
/// list only changes through `tool_search`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_through_run_tool_makes_the_tool_typed_in_adaptive_and_hybrid() {
    for mode in [ExposureMode::Adaptive, ExposureMode::Hybrid] {
        let f = Fixture::new(mode, options());
        let mut c = RawClient::start(&f.server);
        c.initialize("intent-client", json!({})).await;
        let listed = names(&c.list_all().await);
        assert!(!listed.contains(&"test_deferred_echo".to_owned()), "{mode:?}: {listed:?}");
        c.notes.clear();
        let r = c.call("run_tool", json!({ "name": "test_deferred_echo", "arguments": { "text": "hi" } })).await;
        assert_eq!(r["result"]["content"][0]["text"], "hi", "{r}");
        assert_eq!(c.notes.len(), 1, "{mode:?}: {:?}", c.notes);
        assert_eq!(c.notes[0]["method"], "notifications/tools/list_changed");
        let relisted = names(&c.list_all().await);
        assert_eq!(relisted.last().map(String::as_str), Some("test_deferred_echo"), "{mode:?}: {relisted:?}");
        // Calling it again (now typed, or again through run_tool) announces nothing.
        c.notes.clear();
        c.call("test_deferred_echo", json!({ "text": "again" })).await;
        c.call("run_tool", json!({ "name": "test_deferred_echo", "arguments": { "text": "hi" } })).await;
        assert!(c.notes.is_empty(), "{mode:?}: {:?}", c.notes);
    }
    let f = Fixture::new(ExposureMode::Hybrid, options());
    let mut c = RawClient::start(&f.server);
    c.initialize("lazy-client", json!({})).await;
    c.notes.clear();
    let r = c.call("run_tool", json!({ "name": "test_deferred_echo", "arguments": { "text": "hi" } })).await;
    assert_eq!(r["result"]["content"][0]["text"], "hi", "{r}");
    assert!(c.notes.is_empty(), "{:?}", c.notes);
    assert!(!names(&c.list_all().await).contains(&"test_deferred_echo".to_owned()));
}

/// A response with the parts that differ from call to call (request id, duration) blanked.
fn comparable(mut m: Value) -> Value {
    if let Some(call) = m["result"]["_meta"].get_mut("io.github.quiver/call") {
        call["request_id"] = json!("-");
        call["duration_ms"] = json!(0);
    }
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lane_call_answers_as_the_rmcp_path_does() {
    let f = Fixture::new(ExposureMode::Full, options());
    let mut c = RawClient::start(&f.server);
    // Before initialize a call is refused as any request (the lane takes no call yet).
    c.send(
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"marker_echo","arguments":{"text":"x"}}}"#,
    )
    .await;
    let m = c.recv().await;
    assert_eq!((error_code(&m), &m["id"]), (-32600, &json!(1)), "{m}");
    assert_eq!(m["error"]["message"], "the session is not initialized: send `initialize` before `tools/call`", "{m}");
    c.initialize("lane-test", json!({})).await;
    // The same requests through the lane (a plain `tools/call` line) and, in a second session
    // (repeated failures are remembered per session), through rmcp's dispatch (the method
    // written with an escaped slash, which the lane's reader leaves to the general parse):
    // the same answers, results and errors.
    let mut other = RawClient::start(&f.server);
    other.initialize("lane-test", json!({})).await;
    let calls = [
        json!({ "name": "marker_echo", "arguments": { "text": "same" } }),
        json!({ "name": "test_error_handling", "arguments": {} }),
        json!({ "name": "no_such_tool", "arguments": {} }),
        json!({ "name": "marker_echo", "arguments": { "wrong": 1 } }),
        json!({ "name": "test_multiple_content_types", "arguments": {} }),
    ];
    for params in calls {
        let line = json!({ "jsonrpc": "2.0", "id": "same-id", "method": "tools/call", "params": params }).to_string();
        let (before, lines_before) = (quiver_mcp::lane_calls(), quiver_mcp::lane_lines());
        c.send(&line).await;
        let lane = c.recv().await;
        assert!(quiver_mcp::lane_calls() > before, "the lane did not take {line}");
        // A plain result is written from the tool's own output text (`marker_echo`'s output
        // schema is checked on text); errors and other results go through `rmcp`'s types.
        if params["arguments"]["text"] == "same" {
            assert!(quiver_mcp::lane_lines() > lines_before, "not written from the output text: {line}");
        }
        other.send(&line.replace("tools/call", "tools\\/call")).await;
        let rmcp = other.recv().await;
        assert_eq!(lane["id"], "same-id", "{lane}");
        assert_eq!(comparable(lane), comparable(rmcp), "{line}");
    }
    assert!(c.notes.is_empty() && other.notes.is_empty(), "no stray messages: {:?} {:?}", c.notes, other.notes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lane_call_sends_its_notifications_before_its_response() {
    let f = Fixture::new(ExposureMode::Full, options());
    let mut c = RawClient::start(&f.server);
    c.initialize("lane-order-test", json!({})).await;
    assert_eq!(c.request("logging/setLevel", json!({ "level": "debug" })).await["result"], json!({}));
    for (id, name) in [(1, "test_tool_with_progress"), (2, "test_tool_with_logging")] {
        let before = quiver_mcp::lane_calls();
        c.send_json(&json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": { "name": name, "arguments": {}, "_meta": { "progressToken": "t" } } }))
            .await;
        // Every line up to the response, in the order written.
        let mut seen = Vec::new();
        loop {
            let m = c.recv().await;
            let done = m.get("id") == Some(&json!(id));
            seen.push(m);
            if done {
                break;
            }
        }
        assert!(quiver_mcp::lane_calls() > before, "the lane did not take {name}");
        let response = seen.pop().expect("the response");
        assert_eq!(response["result"]["isError"], false, "{response}");
        let method = if id == 1 { "notifications/progress" } else { "notifications/message" };
        assert_eq!(seen.len(), 3, "three notifications, all before the response: {seen:?}");
        assert!(seen.iter().all(|n| n["method"] == method), "{seen:?}");
        // Nothing of this call comes after its response.
        assert_eq!(c.quiet_for(Duration::from_millis(200)).await, None);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_lane_calls_in_flight_are_all_answered_and_one_cancelled() {
    let f = Fixture::new(ExposureMode::Full, options());
    let mut c = RawClient::start(&f.server);
    c.initialize("lane-flight-test", json!({})).await;
    let before = quiver_mcp::lane_calls();
    // Eight sleeps sent at once, the first ones sleeping longest: answered out of order, each
    // with its own id; a ninth, long one is cancelled and never answered.
    c.send(r#"{"jsonrpc":"2.0","id":"long","method":"tools/call","params":{"name":"marker_sleep","arguments":{"ms":20000}}}"#).await;
    for i in 0..8 {
        let ms = 400 - i * 40;
        c.send_json(&json!({ "jsonrpc": "2.0", "id": format!("s{i}"), "method": "tools/call",
            "params": { "name": "marker_sleep", "arguments": { "ms": ms } } }))
            .await;
    }
    c.send(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"long","reason":"test"}}"#)
        .await;
    let mut ids = Vec::new();
    for _ in 0..8 {
        let m = c.recv().await;
        assert_eq!(m["result"]["isError"], false, "{m}");
        ids.push(m["id"].as_str().expect("a string id").to_owned());
    }
    assert!(quiver_mcp::lane_calls() >= before + 9, "the lane took the calls");
    // Answered as they finish, not as sent: the last sent (s7, 120 ms) before the first (s0,
    // 400 ms). (Neighbours 40 ms apart may swap when a loaded machine delays a send.)
    let at = |id: &str| ids.iter().position(|x| x == id).unwrap_or(usize::MAX);
    assert!(at("s7") < at("s0"), "the shortest sleep answered before the longest: {ids:?}");
    ids.sort();
    assert_eq!(ids, (0..8).map(|i| format!("s{i}")).collect::<Vec<_>>());
    // The cancelled call: the router records it cancelled, and it gets no response.
    let start = std::time::Instant::now();
    while f.router.telemetry().snapshot().errors.get("cancelled").copied().unwrap_or(0) != 1 {
        assert!(start.elapsed() < Duration::from_secs(10), "the call was not cancelled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(c.quiet_for(Duration::from_millis(300)).await, None);
    assert_eq!(c.call("marker_echo", json!({ "text": "after" })).await["result"]["structuredContent"]["text"], "after");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_lane_calls_are_each_answered_once_in_whole_lines() {
    let f = Fixture::new(ExposureMode::Full, options());
    let mut c = RawClient::start(&f.server);
    c.initialize("lane-pipeline-test", json!({})).await;
    // Twenty inline calls and a ping in one write: the lane holds answers back while the next
    // request is already read, then writes them together; each is a whole line, once.
    let mut batch = String::new();
    for i in 0..20 {
        batch.push_str(
            &json!({ "jsonrpc": "2.0", "id": i, "method": "tools/call",
                "params": { "name": "marker_echo", "arguments": { "text": format!("t{i}") } } })
            .to_string(),
        );
        batch.push('\n');
        if i == 10 {
            batch.push_str("{\"jsonrpc\":\"2.0\",\"id\":\"p\",\"method\":\"ping\"}\n");
        }
    }
    c.send_raw(batch.as_bytes()).await;
    let mut texts = std::collections::BTreeMap::new();
    let mut pinged = false;
    for _ in 0..21 {
        let m = c.recv().await;
        if m["id"] == "p" {
            pinged = true;
            continue;
        }
        let id = m["id"].as_i64().unwrap_or_else(|| panic!("{m}"));
        let text = m["result"]["structuredContent"]["text"].as_str().unwrap_or_else(|| panic!("{m}")).to_owned();
        assert!(texts.insert(id, text).is_none(), "answered twice: {m}");
    }
    assert!(pinged);
    assert_eq!(texts.len(), 20);
    assert!(texts.iter().all(|(id, text)| *text == format!("t{id}")), "{texts:?}");
    assert_eq!(c.quiet_for(Duration::from_millis(200)).await, None);
}

/// An unknown name's error points at `tool_search` only where the session has it: in `full`
/// mode (no meta tools) it says the tool list is complete, also for a call of `tool_search`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_tool_errors_point_at_tool_search_only_where_the_session_has_it() {
    for (mode, offers) in [(ExposureMode::Full, false), (ExposureMode::Hybrid, true), (ExposureMode::Lazy, true)] {
        let f = Fixture::new(mode, options());
        let mut c = RawClient::start(&f.server);
        c.initialize("unknown-client", json!({})).await;
        let names = if offers { &["marker_ech"][..] } else { &["marker_ech", "tool_search", "list_tools"][..] };
        for name in names {
            let r = c.call(name, json!({})).await;
            let e = &r["error"];
            assert_eq!(e["data"]["code"], "unknown_tool", "{mode:?} {name}: {r}");
            let message = e["message"].as_str().unwrap();
            assert_eq!(message.contains("Use `tool_search`"), offers, "{mode:?} {name}: {message}");
            assert_eq!(message.contains("tool list shows every tool"), !offers, "{mode:?} {name}: {message}");
            assert_eq!(e["data"]["details"].get("search_tool").is_some(), offers, "{mode:?} {name}: {r}");
        }
        // Through run_tool too.
        let r = c.call("run_tool", json!({ "name": "marker_ech", "arguments": {} })).await;
        let text = r["result"]["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("unknown_tool") && text.contains("marker_echo"), "{mode:?}: {text}");
        assert_eq!(text.contains("Use `tool_search`"), offers, "{mode:?}: {text}");
    }
}

/// `run_tool` with `quiver.read_result` and a bad handle is refused for the handle, with no
/// hint about `run_tool`'s own fields (the envelope was right).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_result_handle_gets_no_hint_about_run_tools_fields() {
    let f = Fixture::new(ExposureMode::Hybrid, options());
    let mut c = RawClient::start(&f.server);
    c.initialize("handle-client", json!({})).await;
    for _ in 0..2 {
        let r =
            c.call("run_tool", json!({ "name": "quiver.read_result", "arguments": { "handle": "res-nope" } })).await;
        assert_eq!(r["result"]["isError"], true, "{r}");
        let text = r["result"]["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("unknown or expired result handle"), "{text}");
        assert!(!text.contains("`run_tool` takes") && !text.contains("Hint"), "{text}");
    }
}
