use quiver_abi::{
    Status, ToolRequest, ToolResponse,
    sdk::Host,
    serde_json::{Value, json},
};

use super::{__quiver_plugin::registry, transform};

fn call(tool: &str, args: Value) -> ToolResponse {
    let request = ToolRequest { tool_id: tool.into(), inputs: args, ..ToolRequest::default() };
    registry().call(tool, request, Host::Detached)
}

fn ok(tool: &str, args: Value) -> Value {
    let r = call(tool, args.clone());
    assert_eq!(r.status, Status::Ok, "{tool} {args}: {:?}", r.error);
    r.outputs
}

fn err(tool: &str, args: Value) -> quiver_abi::ToolError {
    let r = call(tool, args.clone());
    assert_eq!(r.status, Status::Error, "{tool} {args} unexpectedly ok: {}", r.outputs);
    r.error.unwrap()
}

// --- json_query ------------------------------------------------------------------------------

#[test]
fn pointer_and_dotted_paths_agree() {
    let doc = json!({ "a": { "b": [ { "c": 1 }, { "c": 2, "d/e": "slash", "t~x": "tilde" } ] }, "odd.key": true });
    for (path, want) in [
        ("/a/b/1/c", json!(2)),
        ("a.b[1].c", json!(2)),
        ("$.a.b[1].c", json!(2)),
        ("a.b.1.c", json!(2)),
        ("a.b[-2].c", json!(1)),
        ("/a/b/1/d~1e", json!("slash")),
        ("/a/b/1/t~0x", json!("tilde")),
        ("a.b[1][\"d/e\"]", json!("slash")),
        ("['odd.key']", json!(true)),
        ("/odd.key", json!(true)),
    ] {
        let out = ok("json_query", json!({ "document": doc, "path": path }));
        assert_eq!(out["value"], want, "{path}");
    }
    let wild = ok("json_query", json!({ "document": doc, "path": "a.b.*.c" }));
    assert_eq!(wild["value"], json!([1, 2]));
    assert_eq!(wild["pointers"], json!(["/a/b/0/c", "/a/b/1/c"]));
    let none = ok("json_query", json!({ "document": doc, "path": "a.b[*].zzz" }));
    assert_eq!((none["value"].clone(), none["length"].clone()), (json!([]), json!(0)));
}

#[test]
fn query_errors_explain_the_fix() {
    let doc = json!({ "user": { "name": "Ada", "roles": ["admin"] } });
    let e = err("json_query", json!({ "document": doc, "path": "user.email" }));
    assert_eq!(e.code, "not_found");
    assert!(e.message.contains("/user") && e.message.contains("name, roles"), "{}", e.message);
    let e = err("json_query", json!({ "document": doc, "path": "user.roles[3]" }));
    assert_eq!(e.code, "not_found");
    assert!(e.message.contains("1 items"), "{}", e.message);
    let e = err("json_query", json!({ "document": doc, "path": "/user/name/first" }));
    assert_eq!(e.code, "not_found");
    assert!(e.message.contains("string"), "{}", e.message);
    assert_eq!(err("json_query", json!({ "document": doc, "path": "/user/roles/-" })).code, "invalid_arguments");
    assert_eq!(err("json_query", json!({ "document": doc, "path": "/user/roles/x" })).code, "invalid_arguments");
    assert_eq!(err("json_query", json!({ "document": doc, "path": "/a~" })).code, "invalid_arguments");
    assert_eq!(err("json_query", json!({ "document": doc, "path": "user..name" })).code, "invalid_arguments");
    assert_eq!(err("json_query", json!({ "document": doc, "path": "user[name]" })).code, "invalid_arguments");
    assert_eq!(err("json_query", json!({ "document": doc, "path": "user[\"name]" })).code, "invalid_arguments");
    assert_eq!(err("json_query", json!({ "document": doc, "path": "user.roles[0" })).code, "invalid_arguments");
    let e = err("json_query", json!({ "document": "{\n  \"a\": [1, 2\n}", "path": "a" }));
    assert_eq!(e.code, "invalid_arguments");
    assert_eq!(e.details, json!({ "line": 3, "column": 1 }));
    // A plain string can be queried as a string.
    let s = ok("json_query", json!({ "document": "not json", "path": "", "parse_string": false }));
    assert_eq!((s["value"].clone(), s["length"].clone()), (json!("not json"), json!(8)));
}

// --- json_format -----------------------------------------------------------------------------

#[test]
fn format_round_trips_and_keeps_text() {
    let src = r#"{"b":[],"a":{"y":"\"q\"","x":-1.0e3},"a":2,"s":"caf\u00e9 ✓"}"#;
    let pretty = ok("json_format", json!({ "json": src }))["formatted"].as_str().unwrap().to_owned();
    assert_eq!(
        pretty,
        "{\n  \"b\": [],\n  \"a\": {\n    \"y\": \"\\\"q\\\"\",\n    \"x\": -1.0e3\n  },\n  \"a\": 2,\n  \"s\": \"caf\\u00e9 ✓\"\n}"
    );
    let compact = ok("json_format", json!({ "json": pretty, "style": "compact" }));
    assert_eq!(compact["formatted"], src);
    assert_eq!(compact["changed"], true);
    let again = ok("json_format", json!({ "json": src, "style": "compact" }));
    assert_eq!(again["changed"], false);
    let sorted = ok("json_format", json!({ "json": src, "style": "compact", "sort_keys": true }));
    assert_eq!(sorted["formatted"], r#"{"a":{"x":-1.0e3,"y":"\"q\""},"a":2,"b":[],"s":"caf\u00e9 ✓"}"#);
    for (text, kind) in [("42", "number"), ("\"x\"", "string"), ("null", "null"), (" true ", "boolean")] {
        let out = ok("json_format", json!({ "json": text }));
        assert_eq!(out["value_type"], kind);
        assert_eq!(out["formatted"], text.trim());
    }
}

#[test]
fn format_errors_point_at_line_and_column() {
    let e = err("json_format", json!({ "json": "{\n  \"a\": 1\n  \"b\": 2\n}" }));
    assert_eq!(e.code, "invalid_arguments");
    assert_eq!(e.details, json!({ "line": 3, "column": 3 }));
    assert!(e.message.contains("line 3 column 3"), "{}", e.message);
    let e = err("json_format", json!({ "json": "" }));
    assert_eq!(e.details["line"], 1);
    assert_eq!(err("json_format", json!({ "json": "[1] [2]" })).code, "invalid_arguments");
    assert_eq!(err("json_format", json!({ "json": "{}", "indent": 0 })).code, "invalid_arguments");
    // Nesting is capped (the parser and writer recurse), at the same depth as serde_json's.
    let deep = "[".repeat(200) + &"]".repeat(200);
    let e = err("json_format", json!({ "json": deep }));
    assert_eq!(e.code, "invalid_arguments");
    assert!(e.message.contains("128 levels"), "{}", e.message);
    let ok_deep = "[".repeat(128) + &"]".repeat(128);
    assert_eq!(ok("json_format", json!({ "json": ok_deep, "style": "compact" }))["bytes"], 256);
}

// --- text_stats ------------------------------------------------------------------------------

#[test]
fn stats_count_unicode_and_words() {
    let out =
        ok("text_stats", json!({ "text": "Grüße, Welt!\r\nIt's a well-known fact — isn't it?", "top_words": 100 }));
    assert_eq!(out["chars"], 48);
    assert_eq!(out["bytes"], 52);
    assert_eq!(out["words"], 9);
    assert_eq!(out["lines"], 2);
    assert_eq!(out["sentences"], 2);
    let words: Vec<&str> = out["top_words"].as_array().unwrap().iter().map(|w| w["word"].as_str().unwrap()).collect();
    assert_eq!(words, ["a", "fact", "grüße", "isn't", "it", "it's", "well-known", "welt"]);
    let min = ok("text_stats", json!({ "text": "a bb ccc bb", "min_word_length": 2, "top_words": 5 }));
    assert_eq!(min["top_words"], json!([{ "word": "bb", "count": 2 }, { "word": "ccc", "count": 1 }]));
    assert_eq!(min["average_word_length"], 2.0);
    assert_eq!(min["reading_time_seconds"], 2);
}

// --- text_diff -------------------------------------------------------------------------------

/// Rebuilds (old, new) from a whole-file unified diff (context large enough for one hunk).
fn sides(diff: &str) -> (String, String) {
    let (mut old, mut new) = (String::new(), String::new());
    let mut last: Option<char> = None;
    for line in diff.lines().skip(2) {
        if line.starts_with("@@") {
            continue;
        }
        if line == "\\ No newline at end of file" {
            // The previous line had no newline: take it back.
            match last {
                Some('-') => _ = old.pop(),
                Some('+') => _ = new.pop(),
                _ => {
                    old.pop();
                    new.pop();
                }
            }
            continue;
        }
        let (tag, body) = line.split_at(1);
        let tag = tag.chars().next().unwrap();
        if tag != '+' {
            old.push_str(body);
            old.push('\n');
        }
        if tag != '-' {
            new.push_str(body);
            new.push('\n');
        }
        last = Some(tag);
    }
    (old, new)
}

#[test]
fn unified_diff_rebuilds_both_texts() {
    let mut seed = 7u64;
    let mut next = || {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) as usize
    };
    for algorithm in ["myers", "patience"] {
        for _ in 0..200 {
            let (n, m) = (next() % 30, next() % 30);
            let old = (0..n).map(|_| ["x", "y", "z", "w"][next() % 4]).collect::<Vec<_>>().join("\n");
            let new = (0..m).map(|_| ["x", "y", "z", "w"][next() % 4]).collect::<Vec<_>>().join("\n");
            let out = ok("text_diff", json!({ "old": old, "new": new, "context": 100, "algorithm": algorithm }));
            if old == new {
                assert_eq!(out["identical"], true);
                continue;
            }
            let (o, n) = sides(out["diff"].as_str().unwrap());
            assert_eq!((o.as_str(), n.as_str()), (old.as_str(), new.as_str()), "{algorithm}: {}", out["diff"]);
        }
    }
}

#[test]
fn diff_options() {
    // Whitespace leniency.
    let (old, new) = ("fn main() {\n    run();\n}\n", "fn main()  {\n\trun(); \n}\n");
    assert_eq!(ok("text_diff", json!({ "old": old, "new": new }))["removed"], 2);
    let lenient = ok("text_diff", json!({ "old": old, "new": new, "whitespace": "ignore_changes" }));
    assert_eq!(lenient["identical"], true, "{lenient}");
    assert_eq!(ok("text_diff", json!({ "old": "a b", "new": "ab", "whitespace": "ignore_all" }))["identical"], true);
    // Word-level rendering of a one-word change in prose.
    let w = ok("text_diff", json!({ "old": "The quick brown fox.\n", "new": "The slow brown fox.\n", "words": true }));
    assert_eq!(w["word_diff"], "The [-quick-]{+slow+} brown fox.\n");
    assert_eq!(w["added"], 1);
    assert!(ok("text_diff", json!({ "old": "a", "new": "b" })).get("word_diff").is_none());
    // Similarity.
    assert_eq!(ok("text_diff", json!({ "old": "a\nb\n", "new": "a\nb\n" }))["similarity"], 1.0);
    assert_eq!(ok("text_diff", json!({ "old": "a\n", "new": "b\n" }))["similarity"], 0.0);
    assert_eq!(err("text_diff", json!({ "old": "a", "new": "b", "algorithm": "histogram" })).code, "invalid_arguments");
}

#[test]
fn unified_diff_hunks() {
    let old: String = (1..=20).map(|i| format!("line {i}\n")).collect();
    let new =
        old.replace("line 3\n", "line three\n").replace("line 17\n", "").replace("line 20\n", "line 20\nline 21\n");
    let out = ok("text_diff", json!({ "old": old, "new": new }));
    assert_eq!(
        out["diff"],
        "--- a\n+++ b\n\
         @@ -1,6 +1,6 @@\n line 1\n line 2\n-line 3\n+line three\n line 4\n line 5\n line 6\n\
         @@ -14,7 +14,7 @@\n line 14\n line 15\n line 16\n-line 17\n line 18\n line 19\n line 20\n+line 21\n"
    );
    assert_eq!((out["added"].clone(), out["removed"].clone(), out["hunks"].clone()), (json!(2), json!(2), json!(2)));
    // With no context every change is its own hunk, and deletions use the GNU `start,0` form.
    let zero = ok("text_diff", json!({ "old": "a\nb\nc\n", "new": "a\nc\n", "context": 0 }));
    assert_eq!(zero["diff"], "--- a\n+++ b\n@@ -2 +1,0 @@\n-b\n");
    // Removing everything.
    let gone = ok("text_diff", json!({ "old": "a\nb\n", "new": "" }));
    assert_eq!(gone["diff"], "--- a\n+++ b\n@@ -1,2 +0,0 @@\n-a\n-b\n");
    // Large, completely different texts still diff (bounded by similar's deadline).
    let big_old: String = (0..3000).map(|i| format!("{i}\n")).collect();
    let big_new: String = (0..3000).map(|i| format!("x{i}\n")).collect();
    let big = ok("text_diff", json!({ "old": big_old, "new": big_new }));
    assert_eq!(
        (big["added"].clone(), big["removed"].clone(), big["hunks"].clone()),
        (json!(3000), json!(3000), json!(1))
    );
}

// --- text_transform --------------------------------------------------------------------------

#[test]
fn case_styles() {
    for (input, snake, camel, pascal, kebab, constant) in [
        ("hello world", "hello_world", "helloWorld", "HelloWorld", "hello-world", "HELLO_WORLD"),
        (
            "getHTTPResponse",
            "get_http_response",
            "getHttpResponse",
            "GetHttpResponse",
            "get-http-response",
            "GET_HTTP_RESPONSE",
        ),
        (
            "  --Already_snake__case--",
            "already_snake_case",
            "alreadySnakeCase",
            "AlreadySnakeCase",
            "already-snake-case",
            "ALREADY_SNAKE_CASE",
        ),
        (
            "version2Update v10",
            "version2_update_v10",
            "version2UpdateV10",
            "Version2UpdateV10",
            "version2-update-v10",
            "VERSION2_UPDATE_V10",
        ),
        ("ÉcoleNormale", "école_normale", "écoleNormale", "ÉcoleNormale", "école-normale", "ÉCOLE_NORMALE"),
    ] {
        assert_eq!(transform::snake(input), snake);
        assert_eq!(transform::camel(input), camel);
        assert_eq!(transform::pascal(input), pascal);
        assert_eq!(transform::kebab(input), kebab);
        assert_eq!(transform::constant(input), constant);
    }
    assert_eq!(transform::title("hello   wORLD\tagain"), "Hello   World\tAgain");
    assert_eq!(transform::collapse_whitespace("  a \n\t b  "), "a b");
    assert_eq!(transform::slugify("  Crème Brûlée: 10 Recipes (2024)  "), "creme-brulee-10-recipes-2024");
    assert_eq!(transform::slugify("東京 Tokyo"), "tokyo");
    let out = ok("text_transform", json!({ "text": "  x  ", "operation": "trim" }));
    assert_eq!(
        (out["result"].clone(), out["changed"].clone(), out["operation"].clone()),
        (json!("x"), json!(true), json!("trim"))
    );
}

#[test]
fn base64_matches_rfc4648_vectors() {
    for (plain, enc) in [
        ("", ""),
        ("f", "Zg=="),
        ("fo", "Zm8="),
        ("foo", "Zm9v"),
        ("foob", "Zm9vYg=="),
        ("fooba", "Zm9vYmE="),
        ("foobar", "Zm9vYmFy"),
    ] {
        assert_eq!(transform::base64_encode(plain.as_bytes(), false), enc);
        assert_eq!(transform::base64_decode(enc).unwrap(), plain.as_bytes());
        assert_eq!(transform::base64_decode(enc.trim_end_matches('=')).unwrap(), plain.as_bytes());
    }
    assert_eq!(transform::base64_encode(&[0xfb, 0xff], false), "+/8=");
    assert_eq!(transform::base64_encode(&[0xfb, 0xff], true), "-_8");
    assert_eq!(transform::base64_decode("-_8").unwrap(), vec![0xfb, 0xff]);
    assert_eq!(transform::base64_decode("Zm9v\nYmFy").unwrap(), b"foobar");
    assert!(transform::base64_decode("Zm9vY").is_err());
    assert!(transform::base64_decode("Zm=9v").is_err());
    assert!(transform::base64_decode("Zm9v!").is_err());
    let e = err("text_transform", json!({ "text": "Zm9v*", "operation": "base64_decode" }));
    assert_eq!(e.code, "invalid_arguments");
}

#[test]
fn url_encoding_round_trips() {
    let s = "a b/c?d=e&f=ü~._-";
    let enc = transform::url_encode(s, false);
    assert_eq!(enc, "a%20b%2Fc%3Fd%3De%26f%3D%C3%BC~._-");
    assert_eq!(transform::url_decode(&enc, false).unwrap(), s.as_bytes());
    assert_eq!(transform::url_decode("a+b", false).unwrap(), b"a+b");
    assert_eq!(transform::url_decode("a+b", true).unwrap(), b"a b");
    assert!(transform::url_decode("%zz", false).is_err());
    assert!(transform::url_decode("%4", false).is_err());
    assert_eq!(err("text_transform", json!({ "text": "%FF", "operation": "url_decode" })).code, "tool_error");
    assert_eq!(
        transform::html_escape("<a href=\"x\">Tom & 'Jerry'</a>"),
        "&lt;a href=&quot;x&quot;&gt;Tom &amp; &#39;Jerry&#39;&lt;/a&gt;"
    );
}

#[test]
fn transform_schema_is_a_plain_enum() {
    let schema = quiver_abi::sdk::schema_of::<crate::TransformInput>();
    let ops = schema["properties"]["operation"]["enum"].as_array().expect("operation is an inline enum");
    assert_eq!(ops.len(), 17);
    assert!(ops.contains(&json!("base64_url_encode")));
}

#[test]
fn manifest_names_every_registered_tool() {
    let manifest = include_str!("../tool.yaml");
    for tool in ["json_query", "json_format", "text_stats", "text_diff", "text_transform"] {
        assert!(manifest.contains(&format!("- name: {tool}\n")), "{tool} missing from tool.yaml");
        let r = registry().call(tool, ToolRequest::default(), Host::Detached);
        assert_ne!(r.error.map(|e| e.code), Some("unknown_tool".to_owned()), "{tool} not registered");
    }
}

#[test]
fn every_fixture_holds() {
    // The cases `cargo xtask contract-test` runs through the real host, here in-process.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let report = quiver_abi::fixtures::run_fixtures(crate::__quiver_plugin::registry(), &dir);
    assert!(report.ran >= 10, "only {} fixture cases found in {}", report.ran, dir.display());
    assert!(report.failures.is_empty(), "{report}");
}

#[test]
fn jsonpath_singular_detection_and_errors() {
    let doc = json!({ "a.b": { "c": [1, 2, 3] }, "x": { "y": 1 } });
    // A quoted name holding `.`, `*`, `:` or `,` is still one node.
    assert_eq!(ok("json_query", json!({ "document": doc, "path": "$['a.b'].c[0]" }))["value"], 1);
    assert_eq!(ok("json_query", json!({ "document": {"k*,:": 5}, "path": "$['k*,:']" }))["value"], 5);
    // Unions and wildcards give lists.
    assert_eq!(ok("json_query", json!({ "document": doc, "path": "$['a.b'].c[0,2]" }))["value"], json!([1, 3]));
    // A missing key names what is there.
    let e = err("json_query", json!({ "document": doc, "path": "$.x.z" }));
    assert_eq!(e.code, "not_found");
    assert!(e.message.contains('y'), "{}", e.message);
    let e = err("json_query", json!({ "document": doc, "path": "$.x[?@ ==]" }));
    assert!(e.message.contains("RFC 9535") && e.message.contains("character"), "{}", e.message);
}
