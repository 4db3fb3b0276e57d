//! Each step of the pipeline, through the typed lane and `run_tool`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use quiver_abi::{ErrorCode, Status};
use quiver_manifest::LifecycleState;
use quiver_router::{Approval, Call, CallOutcome, CancellationToken, Lane, NullBridge, Router, RouterSettings, codes};
use quiver_telemetry::BreakerState;
use serde_json::{Value, json};

use crate::{TestBridge, caller, code, everyone, fixture, support, with};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typed_call_reaches_the_real_plugin_with_full_metadata() {
    let f = fixture(RouterSettings::default());
    let o = f.typed("marker_echo", json!({"text": "hi"}), everyone()).await;
    assert_eq!(o.response.status, Status::Ok, "{:?}", o.response.error);
    assert_eq!(o.response.outputs, json!({"text": "hi", "version": "0.1.0"}));
    let m = &o.meta;
    assert_eq!(m.tool(), Some("marker_echo"));
    assert_eq!(m.plugin(), Some("marker-plugin"));
    assert_eq!(m.plugin_version(), Some("0.1.0"));
    assert_eq!(m.sha256().map(str::len), Some(64));
    assert_eq!(m.signer_key_id(), Some(f.plugins.key.key_id().as_str()));
    assert_eq!(m.lifecycle_state, Some(LifecycleState::Active));
    assert_eq!(m.lane, Lane::Typed);
    assert!(m.notice.is_none());
    let policy: Vec<&str> = m.policy.iter().map(|p| p.as_ref()).collect();
    assert_eq!(policy, ["resolve:canonical", "scopes:ok", "arguments:ok", "approval:not-required", "breaker:closed"]);
    assert!(!m.request_id.is_empty());
    // The meta serializes (the MCP layer puts it in `_meta`).
    let v = serde_json::to_value(m).unwrap();
    assert_eq!(v["tool"], "marker_echo");
    assert!(v["duration_ms"].as_f64().unwrap() > 0.0);

    let stats = f.router.telemetry().snapshot();
    assert_eq!(stats.lanes["typed"].calls, 1);
    assert_eq!(stats.tools["marker_echo"].status.ok, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_tool_refuses_to_dispatch_itself_and_the_other_meta_tools() {
    let f = fixture(RouterSettings::default());
    for name in ["run_tool", "list_tools", "tool_search"] {
        let o = f.generic(name, json!({}), everyone()).await;
        assert_eq!(code(&o), ErrorCode::INVALID_ARGUMENTS, "{name}");
        let e = o.response.error.as_ref().unwrap();
        assert_eq!(e.details["errors"][0]["pointer"], "/name");
        assert!(e.message.contains(&format!("Call `{name}` directly")), "{}", e.message);
        assert_eq!(o.meta.lane, Lane::Generic);
        assert!(o.meta.tool().is_none());
    }
    // Also when `run_tool` arrives by name through `call`.
    let o = f.router.call(Call::new("run_tool", json!({"name": "run_tool"}), everyone())).await;
    assert_eq!(code(&o), ErrorCode::INVALID_ARGUMENTS);
    // A malformed envelope.
    let o = f.router.call(Call::new("run_tool", json!({"name": "marker_echo", "arguments": "text"}), everyone())).await;
    assert_eq!(o.response.error.unwrap().details["errors"][0]["pointer"], "/arguments");

    let s = f.router.telemetry().snapshot();
    assert_eq!(s.generic.run_calls, 5);
    assert_eq!(s.generic.run_validation_failures, 5);
    assert_eq!(s.lanes["generic"].success_rate, 0.0);

    // And the generic lane works for a real tool.
    let o = f.generic("marker_echo", json!({"text": "via run_tool"}), everyone()).await;
    assert_eq!(o.response.outputs["text"], "via run_tool");
    assert_eq!(o.meta.lane, Lane::Generic);
    assert_eq!(o.meta.called_name, "marker_echo");
}

/// (label, tool, arguments, caller, client bridge, confirmed, expected code or "ok").
type Case = (&'static str, &'static str, Value, quiver_router::Caller, Option<Arc<TestBridge>>, bool, &'static str);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_and_scopes_behave_identically_through_both_lanes() {
    let f = fixture(RouterSettings::default());
    let accept = TestBridge::accepting();
    let decline = TestBridge::new(true, json!({"action": "decline"}));
    let cases: Vec<Case> = vec![
        // Destructive tool, nobody can be asked: refused with how to confirm.
        ("ask, no client", "marker_delete", json!({"key": "k"}), everyone(), None, false, codes::CONFIRMATION_REQUIRED),
        (
            "deny",
            "marker_delete",
            json!({"key": "k"}),
            with(everyone(), Approval::Deny),
            None,
            false,
            ErrorCode::PERMISSION_DENIED,
        ),
        // `deny` is final: neither the caller's confirmation nor a user's answer turns it into allow.
        (
            "deny, confirmed by caller",
            "marker_delete",
            json!({"key": "k"}),
            with(everyone(), Approval::Deny),
            None,
            true,
            ErrorCode::PERMISSION_DENIED,
        ),
        (
            "deny, user would accept",
            "marker_delete",
            json!({"key": "k"}),
            with(everyone(), Approval::Deny),
            Some(accept.clone()),
            true,
            ErrorCode::PERMISSION_DENIED,
        ),
        ("allow", "marker_delete", json!({"key": "k"}), with(everyone(), Approval::Allow), None, false, "ok"),
        ("confirmed", "marker_delete", json!({"key": "k"}), everyone(), None, true, "ok"),
        ("elicit accept", "marker_delete", json!({"key": "k"}), everyone(), Some(accept.clone()), false, "ok"),
        (
            "elicit decline",
            "marker_delete",
            json!({"key": "k"}),
            everyone(),
            Some(decline.clone()),
            false,
            ErrorCode::PERMISSION_DENIED,
        ),
        // An accepted form that does not say `confirm: true` (the box left unticked and the
        // field left out, or not a boolean) is no confirmation.
        (
            "elicit accept, nothing ticked",
            "marker_delete",
            json!({"key": "k"}),
            everyone(),
            Some(TestBridge::new(true, json!({"action": "accept", "content": {}}))),
            false,
            ErrorCode::PERMISSION_DENIED,
        ),
        (
            "elicit accept, no content",
            "marker_delete",
            json!({"key": "k"}),
            everyone(),
            Some(TestBridge::new(true, json!({"action": "accept"}))),
            false,
            ErrorCode::PERMISSION_DENIED,
        ),
        (
            "elicit accept, confirm not a boolean",
            "marker_delete",
            json!({"key": "k"}),
            everyone(),
            Some(TestBridge::new(true, json!({"action": "accept", "content": {"confirm": "false"}}))),
            false,
            ErrorCode::PERMISSION_DENIED,
        ),
        // Scopes: invisible is unknown.
        ("no scope", "marker_secret", json!({}), caller(&[], &[]), None, false, ErrorCode::UNKNOWN_TOOL),
        ("scope", "marker_secret", json!({}), caller(&["marker.secret"], &[]), None, false, "ok"),
        ("gated", "marker_secret", json!({}), caller(&["*"], &["marker_secret"]), None, false, ErrorCode::UNKNOWN_TOOL),
        // Consolidated tool: per-action scope and confirmation.
        ("read action", "marker_text", json!({"action": "shout", "text": "a"}), caller(&[], &[]), None, false, "ok"),
        (
            "action scope missing",
            "marker_text",
            json!({"action": "erase", "text": "a"}),
            caller(&[], &[]),
            None,
            false,
            ErrorCode::PERMISSION_DENIED,
        ),
        (
            "action needs confirmation",
            "marker_text",
            json!({"action": "erase", "text": "a"}),
            caller(&["marker.admin"], &[]),
            None,
            false,
            codes::CONFIRMATION_REQUIRED,
        ),
        (
            "action confirmed",
            "marker_text",
            json!({"action": "erase", "text": "a"}),
            caller(&["marker.admin"], &[]),
            None,
            true,
            "ok",
        ),
    ];
    for (label, tool, args, who, bridge, confirmed, expected) in cases {
        let mut outcomes = Vec::new();
        for lane in [Lane::Typed, Lane::Generic] {
            let mut call = match lane {
                Lane::Typed => Call::new(tool, args.clone(), who.clone()),
                Lane::Generic => Call::generic(tool, args.clone(), who.clone()),
            }
            .confirmed(confirmed);
            if let Some(b) = &bridge {
                call = call.with_bridge(b.clone());
            }
            let o = f.router.call(call).await;
            assert_eq!(code(&o), expected, "{label} ({lane:?}): {:?}", o.response.error);
            assert_eq!(o.meta.lane, lane);
            outcomes.push(o);
        }
        let (t, g) = (&outcomes[0], &outcomes[1]);
        assert_eq!(t.response.outputs, g.response.outputs, "{label}");
        assert_eq!(
            t.response.error.as_ref().map(|e| &e.message),
            g.response.error.as_ref().map(|e| &e.message),
            "{label}"
        );
        assert_eq!(t.meta.policy, g.meta.policy, "{label}");
    }
    assert_eq!(accept.elicitations.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert_eq!(decline.elicitations.load(std::sync::atomic::Ordering::SeqCst), 2);

    // The refusal says how to confirm; the plugin learns the call was confirmed.
    let o = f.typed("marker_delete", json!({"key": "k"}), everyone()).await;
    let e = o.response.error.unwrap();
    assert!(e.message.contains(codes::CONFIRM_META_KEY) && e.message.contains("Ask the user"), "{}", e.message);
    assert_eq!(e.details["side_effects"], "destructive");
    let o = f.typed("marker_delete", json!({"key": "k"}), with(everyone(), Approval::Allow)).await;
    assert_eq!(o.response.outputs, json!({"deleted": "k", "confirmed": true}));

    // An invisible tool's error is word for word the error of a catalog without that tool.
    let plugin = f.host.catalog().plugins()[0].clone();
    let mut without = plugin.manifest.clone();
    without.tools.retain(|t| t.name != "marker_secret");
    let entry = crate::support::entry_with(&plugin, without, plugin.backend.clone());
    let catalog = quiver_catalog::Catalog::build(vec![Arc::new(entry)], quiver_catalog::ConflictPolicy::Error).unwrap();
    let other = quiver_router::Router::new(Arc::new(Arc::new(catalog)), RouterSettings::default());
    for (name, gated) in
        [("marker_secret", &[][..]), ("marker_secret", &["marker_secret"][..]), ("marker_secrte", &[][..])]
    {
        for lane in [Lane::Typed, Lane::Generic] {
            let make = |c| match lane {
                Lane::Typed => Call::new(name, json!({}), c),
                Lane::Generic => Call::generic(name, json!({}), c),
            };
            let hidden = f.router.call(make(caller(&[], gated))).await.response;
            let absent = other.call(make(caller(&[], gated))).await.response;
            assert_eq!(hidden, absent, "{name} {gated:?} {lane:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_arguments_come_back_with_json_pointers_expected_got_and_hints() {
    let f = fixture(RouterSettings::default());
    let o = f.typed("marker_echo", json!({"text": 5}), everyone()).await;
    let e = o.response.error.unwrap();
    assert_eq!(e.code, ErrorCode::INVALID_ARGUMENTS);
    assert!(!e.retryable);
    assert_eq!(
        e.details["errors"][0],
        json!({"pointer": "/text", "keyword": "type", "expected": "string", "got": "integer 5", "hint": "pass a string here"})
    );
    assert!(e.message.contains("/text: expected string, got integer 5"), "{}", e.message);
    assert!(e.details.get("input_schema").is_none(), "the typed lane already has the schema");

    let o = f.typed("marker_echo", json!({}), everyone()).await;
    let e = o.response.error.unwrap();
    assert_eq!(e.details["errors"][0]["pointer"], "/text");
    assert_eq!(e.details["errors"][0]["got"], "nothing (missing)");

    let o = f.typed("marker_text", json!({"action": "Echo", "text": "x", "txet": 1}), everyone()).await;
    let e = o.response.error.unwrap();
    let errors = e.details["errors"].as_array().unwrap();
    let at =
        |p: &str| errors.iter().find(|x| x["pointer"] == p).unwrap_or_else(|| panic!("no error at {p}: {errors:?}"));
    assert!(at("/action")["expected"].as_str().unwrap().contains("echo"));
    assert!(at("/txet")["hint"].as_str().unwrap().starts_with("did you mean `text`?"));

    // Through the generic lane the error carries the input schema, and counts as a run_tool
    // validation failure.
    let o = f.generic("marker_echo", json!({"text": 5}), everyone()).await;
    let e = o.response.error.unwrap();
    assert_eq!(e.details["errors"][0]["pointer"], "/text");
    assert_eq!(e.details["input_schema"]["properties"]["text"]["type"], "string");
    assert_eq!(f.router.telemetry().snapshot().generic.run_validation_failures, 1);

    // Null arguments count as an empty object.
    let o = f.typed("marker_secret", Value::Null, everyone()).await;
    assert_eq!(code(&o), "ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aliases_fill_in_their_action_and_carry_notices() {
    let f = fixture(RouterSettings::default());
    let o = f.typed("marker_say", json!({"text": "quiet"}), everyone()).await;
    assert_eq!(o.response.outputs, json!({"text": "quiet"}));
    assert_eq!(o.meta.tool(), Some("marker_text"));
    assert_eq!(o.meta.action.as_deref(), Some("echo"));
    let n = o.meta.notice.unwrap();
    assert_eq!(n.state, LifecycleState::HiddenCompatibility);
    assert_eq!(n.replacement.as_deref(), Some("marker_text"));

    let o = f.typed("marker_yell", json!({"text": "loud"}), everyone()).await;
    assert_eq!(o.response.outputs, json!({"text": "LOUD"}));
    assert_eq!(o.meta.lifecycle_state, Some(LifecycleState::Deprecated));
    let msg = o.meta.notice.unwrap().message();
    assert!(
        msg.contains("deprecated") && msg.contains("marker_text") && msg.contains("shout") && msg.contains("0.3.0"),
        "{msg}"
    );

    // The alias's own action is fine; another action is an error pointing at `action`.
    let o = f.typed("marker_yell", json!({"text": "x", "action": "shout"}), everyone()).await;
    assert_eq!(code(&o), "ok");
    let o = f.typed("marker_yell", json!({"text": "x", "action": "echo"}), everyone()).await;
    let e = o.response.error.unwrap();
    assert_eq!(e.code, ErrorCode::INVALID_ARGUMENTS);
    assert_eq!(e.details["errors"][0]["pointer"], "/action");
    // Same through run_tool.
    let o = f.generic("marker_yell", json!({"text": "loud"}), everyone()).await;
    assert_eq!(o.response.outputs, json!({"text": "LOUD"}));
    assert!(o.meta.notice.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removed_names_name_the_replacement_and_the_removing_version() {
    let f = fixture(RouterSettings::default());
    for name in ["marker_scream", "marker_gone"] {
        let o = f.typed(name, json!({"text": "x"}), everyone()).await;
        let e = o.response.error.unwrap();
        assert_eq!(e.code, codes::TOOL_REMOVED, "{name}");
        assert!(e.message.contains(&format!("`{name}` was removed in version 0.1.0")), "{}", e.message);
        assert!(e.message.contains("call `marker_text`"), "{}", e.message);
        assert_eq!(e.details["replacement"], "marker_text");
        assert_eq!(e.details["removed_in_version"], "0.1.0");
        assert_eq!(o.meta.lifecycle_state, Some(LifecycleState::Removed));
    }
    assert!(
        f.typed("marker_scream", json!({}), everyone())
            .await
            .response
            .error
            .unwrap()
            .message
            .contains("with action `shout`")
    );
    // A replacement the caller may not see is not named.
    let o = f.typed("marker_gone", json!({"text": "x"}), caller(&["*"], &["marker_text"])).await;
    let e = o.response.error.unwrap();
    assert_eq!(e.code, codes::TOOL_REMOVED);
    assert!(!e.message.contains("marker_text"), "{}", e.message);
    assert!(e.message.contains("tool_search"), "{}", e.message);
    // An alias of a tool the caller may not see does not exist.
    let o = f.typed("marker_scream", json!({"text": "x"}), caller(&["*"], &["marker_text"])).await;
    assert_eq!(code(&o), ErrorCode::UNKNOWN_TOOL);
}

/// A deprecated tool still runs and carries its notice, but the notice never names a
/// replacement the caller may not see (as for removed names).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deprecation_notices_never_name_a_replacement_the_caller_may_not_see() {
    let f = fixture(RouterSettings::default());
    let plugin = f.host.catalog().plugins()[0].clone();
    let mut m = plugin.manifest.clone();
    let shout = m.tools.iter_mut().find(|t| t.name == "marker_shout").unwrap();
    shout.lifecycle.state = LifecycleState::Deprecated;
    shout.lifecycle.replacement = Some("marker_secret".into());
    let entry = support::entry_with(&plugin, m, plugin.backend.clone());
    let catalog = quiver_catalog::Catalog::build(vec![Arc::new(entry)], quiver_catalog::ConflictPolicy::Error).unwrap();
    let router = Router::new(Arc::new(Arc::new(catalog)), RouterSettings::default());
    for lane in [Lane::Typed, Lane::Generic] {
        let make = |c| match lane {
            Lane::Typed => Call::new("marker_shout", json!({"text": "x"}), c),
            Lane::Generic => Call::generic("marker_shout", json!({"text": "x"}), c),
        };
        // Without the scope `marker.secret`: deprecated, pointing at tool_search instead.
        let o = router.call(make(caller(&[], &[]))).await;
        assert_eq!(o.response.outputs, json!({"text": "X"}), "{lane:?}");
        let n = o.meta.notice.expect("a deprecated tool carries its notice");
        assert_eq!(n.replacement, None, "{lane:?}: {n:?}");
        assert!(!n.message().contains("marker_secret") && n.message().contains("tool_search"), "{}", n.message());
        // Gated away: the same.
        let o = router.call(make(caller(&["*"], &["marker_secret"]))).await;
        assert!(!o.meta.notice.unwrap().message().contains("marker_secret"), "{lane:?}");
        // A caller who may see the replacement is told its name.
        let o = router.call(make(caller(&["marker.secret"], &[]))).await;
        let n = o.meta.notice.unwrap();
        assert_eq!(n.replacement.as_deref(), Some("marker_secret"), "{lane:?}");
        assert!(n.message().contains("call `marker_secret` instead"), "{}", n.message());
    }
}

/// A profile's `gated` list may name an alias: it gates the tool that alias reaches, so neither
/// the alias, nor the tool, nor its other names can be called (through either lane).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gating_an_alias_gates_the_tool_it_reaches() {
    let f = fixture(RouterSettings::default());
    for gated in ["marker_yell", "marker_say", "marker_text"] {
        let who = || with(caller(&["*"], &[gated]), Approval::Allow);
        for name in ["marker_yell", "marker_say", "marker_text"] {
            let args = json!({"text": "x", "action": "echo"});
            let args = if name == "marker_text" { args } else { json!({"text": "x"}) };
            let o = f.typed(name, args.clone(), who()).await;
            assert_eq!(code(&o), ErrorCode::UNKNOWN_TOOL, "gated {gated}, called {name}: {:?}", o.response);
            let o = f.generic(name, args, who()).await;
            assert_eq!(code(&o), ErrorCode::UNKNOWN_TOOL, "gated {gated}, run_tool {name}: {:?}", o.response);
        }
        // Other tools are not affected.
        let o = f.typed("marker_echo", json!({"text": "x"}), who()).await;
        assert_eq!(code(&o), "ok", "gated {gated}: {:?}", o.response);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_names_get_suggestions_among_visible_tools_only() {
    let f = fixture(RouterSettings::default());
    let suggestions = |o: &quiver_router::CallOutcome| -> Vec<String> {
        let e = o.response.error.as_ref().unwrap();
        assert_eq!(e.code, ErrorCode::UNKNOWN_TOOL);
        assert!(e.message.contains("tool_search"), "{}", e.message);
        serde_json::from_value(e.details["suggestions"].clone()).unwrap()
    };
    let o = f.typed("marker_ech", json!({}), everyone()).await;
    assert_eq!(suggestions(&o)[0], "marker_echo");
    assert!(o.response.error.unwrap().message.contains("did you mean `marker_echo`"));

    // Close to an invisible tool: never suggested to a caller who may not see it.
    let o = f.typed("marker_secrte", json!({}), caller(&[], &[])).await;
    assert!(!suggestions(&o).contains(&"marker_secret".to_owned()), "{:?}", suggestions(&o));
    let o = f.typed("marker_secrte", json!({}), caller(&[], &["marker_secret"]).clone()).await;
    assert!(!suggestions(&o).contains(&"marker_secret".to_owned()));
    let o = f.typed("marker_secrte", json!({}), caller(&["marker.secret"], &[])).await;
    assert_eq!(suggestions(&o)[0], "marker_secret");
    // Aliases and removed tools are not suggested either.
    for typo in ["marker_sya", "marker_gon", "marker_screem"] {
        let o = f.typed(typo, json!({}), everyone()).await;
        let s = suggestions(&o);
        assert!(
            !s.iter().any(|n| ["marker_say", "marker_gone", "marker_scream"].contains(&n.as_str())),
            "{typo}: {s:?}"
        );
    }
    // Through run_tool too.
    let o = f.generic("marker_secrte", json!({}), caller(&[], &[])).await;
    assert!(!suggestions(&o).contains(&"marker_secret".to_owned()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_is_reported_within_ten_percent_while_other_tools_keep_answering() {
    let _timing = crate::TIMING.read().await;
    let f = fixture(RouterSettings::default());
    let bridge = TestBridge::new(false, Value::Null);
    let router = f.router.clone();
    let b = bridge.clone();
    let slow = tokio::spawn(async move {
        let started = Instant::now();
        let o = router.call(Call::new("marker_wait", json!({"ms": 5000}), crate::everyone()).with_bridge(b)).await;
        (o, started.elapsed())
    });
    // Other calls answer meanwhile.
    tokio::time::sleep(Duration::from_millis(20)).await;
    for i in 0..20 {
        let t = Instant::now();
        let o = f.typed("marker_echo", json!({"text": format!("{i}")}), everyone()).await;
        assert_eq!(code(&o), "ok");
        assert!(t.elapsed() < Duration::from_millis(100), "echo took {:?}", t.elapsed());
    }
    let (o, took) = slow.await.unwrap();
    let e = o.response.error.as_ref().unwrap();
    assert_eq!(e.code, ErrorCode::TIMEOUT);
    // A read: safe to try again.
    assert!(e.retryable && !e.message.contains("may have taken effect"), "{e:?}");
    let deadline = Duration::from_millis(300);
    eprintln!("timeout of a 300 ms deadline reported after {took:?}");
    assert!(took >= deadline && took <= deadline + deadline / 10, "timeout reported after {took:?}");
    assert!(o.meta.duration >= deadline && o.meta.duration <= deadline + deadline / 10, "{:?}", o.meta.duration);

    // The plugin saw the cancellation through host services and stopped; the overrun ended.
    let waited = Instant::now();
    while bridge.logs().is_empty() && waited.elapsed() < Duration::from_secs(2) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let logs = bridge.logs();
    assert!(logs.iter().any(|l| l.starts_with("marker_wait saw cancellation after")), "{logs:?}");
    tokio::time::sleep(Duration::from_millis(20)).await;
    let s = f.router.telemetry().snapshot();
    assert_eq!(s.tools["marker_wait"].timeouts, 1);
    assert_eq!(s.tools["marker_wait"].overruns, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_call_stops_waiting_at_once_and_the_plugin_sees_it() {
    let _timing = crate::TIMING.read().await;
    let f = fixture(RouterSettings::default());
    let bridge = TestBridge::new(false, Value::Null);
    let cancel = CancellationToken::new();
    let call = Call::new("marker_wait", json!({"ms": 280}), everyone())
        .with_bridge(bridge.clone())
        .with_cancel(cancel.clone());
    let c2 = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        c2.cancel();
    });
    let started = Instant::now();
    let o = f.router.call(call).await;
    let took = started.elapsed();
    assert_eq!(code(&o), ErrorCode::CANCELLED);
    assert!(took < Duration::from_millis(100), "cancelled call returned after {took:?}");
    let waited = Instant::now();
    while bridge.logs().is_empty() && waited.elapsed() < Duration::from_secs(2) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(bridge.logs().iter().any(|l| l.starts_with("marker_wait saw cancellation")), "{:?}", bridge.logs());
    // A caller that goes away (its future dropped, e.g. the client disconnected) is a
    // cancellation too, as far as the plugin can tell.
    let bridge = TestBridge::new(false, Value::Null);
    let router = f.router.clone();
    let b = bridge.clone();
    let task = tokio::spawn(async move {
        router.call(Call::new("marker_wait", json!({"ms": 280}), crate::everyone()).with_bridge(b)).await
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    task.abort();
    let waited = Instant::now();
    while bridge.logs().is_empty() && waited.elapsed() < Duration::from_secs(2) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let logs = bridge.logs();
    assert!(logs.iter().any(|l| l.starts_with("marker_wait saw cancellation")), "{logs:?}");
    let ms: u64 = logs[0].rsplit(' ').nth(1).unwrap().parse().unwrap();
    assert!(ms < 200, "the plugin noticed only after {ms} ms");

    // A call cancelled before it starts never reaches the plugin.
    let cancel = CancellationToken::new();
    cancel.cancel();
    let o = f.router.call(Call::new("marker_echo", json!({"text": "x"}), everyone()).with_cancel(cancel)).await;
    assert_eq!(code(&o), ErrorCode::CANCELLED);
}

/// A write that is not idempotent and may have run (it timed out, or its process died under
/// it) is neither retried nor offered for a retry: a second attempt could repeat its effect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_whose_outcome_is_unknown_is_not_retried_nor_offered_for_a_retry() {
    let _timing = crate::TIMING.read().await;
    let f = fixture(RouterSettings { retry_base: Duration::from_millis(5), ..RouterSettings::default() });
    let charges = |o: &CallOutcome| o.response.outputs["charges"].as_u64();

    // The tool's process died under the call (as a worker reports it): one charge, no retry.
    let o = f.typed("marker_charge", json!({"key": "crash", "outcome": "plugin_crashed"}), everyone()).await;
    let e = o.response.error.as_ref().expect("an error");
    assert_eq!(e.code, "plugin_crashed");
    assert!(!e.retryable, "{e:?}");
    assert!(
        e.message.contains("may have taken effect")
            && e.message.contains("`marker_charge`")
            && e.message.contains("write"),
        "{}",
        e.message
    );
    assert_eq!(o.meta.retries, 0);
    let o = f.typed("marker_charge", json!({"key": "crash"}), everyone()).await;
    assert_eq!(charges(&o), Some(2), "the failed call ran once: {:?}", o.response);

    // The same through the generic lane.
    let o = f.generic("marker_charge", json!({"key": "generic", "outcome": "timeout"}), everyone()).await;
    assert!(o.response.error.as_ref().is_some_and(|e| !e.retryable), "{:?}", o.response.error);
    assert_eq!(o.meta.retries, 0);

    // Past its deadline, after the charge was made: a timeout that does not invite a retry.
    let o = f.typed("marker_charge", json!({"key": "slow", "ms": 600}), everyone()).await;
    let e = o.response.error.as_ref().expect("an error");
    assert_eq!(e.code, ErrorCode::TIMEOUT);
    assert!(!e.retryable && e.message.contains("may have taken effect"), "{e:?}");
    assert_eq!(o.meta.retries, 0);

    // An error the tool itself marks retryable says nothing ran: it is retried as before.
    let o = f.typed("marker_charge", json!({"key": "busy", "outcome": "tool_error"}), everyone()).await;
    let e = o.response.error.as_ref().expect("an error");
    assert!(e.retryable && !e.message.contains("may have taken effect"), "{e:?}");
    assert_eq!(o.meta.retries, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retryable_errors_are_retried_with_backoff_and_others_are_not() {
    let _timing = crate::TIMING.read().await;
    let f = fixture(RouterSettings { retry_base: Duration::from_millis(20), ..RouterSettings::default() });
    let started = Instant::now();
    let o = f.typed("marker_flaky", json!({"key": "a", "failures": 2}), everyone()).await;
    assert_eq!(o.response.outputs, json!({"attempts": 3}), "{:?}", o.response.error);
    assert_eq!(o.meta.retries, 2);
    // Backoff: first delay in [10, 20] ms, second in [20, 40] ms.
    assert!(started.elapsed() >= Duration::from_millis(30), "{:?}", started.elapsed());
    let retries: Vec<&str> = o.meta.policy.iter().map(|p| p.as_ref()).filter(|p| p.starts_with("retry:")).collect();
    assert_eq!(retries.len(), 2, "{retries:?}");
    assert!(
        retries[0].starts_with("retry:1:tool_error:") && retries[1].starts_with("retry:2:tool_error:"),
        "{retries:?}"
    );

    // More failures than `retries: 3`: the last retryable error comes back.
    let o = f.typed("marker_flaky", json!({"key": "b", "failures": 10}), everyone()).await;
    let e = o.response.error.unwrap();
    assert!(e.retryable && e.message.contains("transient failure 4 of 10"), "{}", e.message);
    assert_eq!(o.meta.retries, 3);

    // Not retryable: no retry.
    let o = f.typed("marker_fail", json!({"fail": true}), everyone()).await;
    assert_eq!(code(&o), ErrorCode::TOOL_ERROR);
    assert_eq!(o.meta.retries, 0);
    // Same through run_tool.
    let o = f.generic("marker_flaky", json!({"key": "c", "failures": 1}), everyone()).await;
    assert_eq!(o.meta.retries, 1);
    assert_eq!(f.router.telemetry().retries(), 6);
    assert_eq!(f.router.telemetry().snapshot().tools["marker_flaky"].retries, 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_breaker_opens_after_consecutive_failures_and_closes_after_a_good_probe() {
    let _timing = crate::TIMING.read().await;
    let cooldown = Duration::from_millis(200);
    let f = fixture(RouterSettings { breaker_failures: 3, breaker_cooldown: cooldown, ..RouterSettings::default() });
    let fail = |b: bool| json!({"fail": b});
    // Invalid arguments and other tools do not count.
    assert_eq!(code(&f.typed("marker_fail", json!({}), everyone()).await), ErrorCode::INVALID_ARGUMENTS);
    for _ in 0..2 {
        assert_eq!(code(&f.typed("marker_fail", fail(true), everyone()).await), ErrorCode::TOOL_ERROR);
    }
    // A success resets the count.
    assert_eq!(code(&f.typed("marker_fail", fail(false), everyone()).await), "ok");
    for _ in 0..2 {
        f.typed("marker_fail", fail(true), everyone()).await;
    }
    let third = f.typed("marker_fail", fail(true), everyone()).await;
    assert_eq!(code(&third), ErrorCode::TOOL_ERROR);
    assert!(third.meta.policy.iter().any(|p| p == "breaker:opened"), "{:?}", third.meta.policy);
    let opened = Instant::now();
    assert_eq!(f.router.telemetry().snapshot().tools["marker_fail"].breaker, Some(BreakerState::Open));

    // Open: refused without reaching the tool, through both lanes; other tools unaffected.
    let o = f.typed("marker_fail", fail(false), everyone()).await;
    let e = o.response.error.unwrap();
    assert_eq!(e.code, codes::CIRCUIT_OPEN);
    assert!(e.retryable && e.details["retry_after_ms"].as_u64().unwrap() <= 200);
    assert_eq!(code(&f.generic("marker_fail", fail(false), everyone()).await), codes::CIRCUIT_OPEN);
    assert_eq!(code(&f.typed("marker_echo", json!({"text": "x"}), everyone()).await), "ok");

    // After the cooldown one probe goes through; its success closes the breaker.
    tokio::time::sleep(cooldown.saturating_sub(opened.elapsed()) + Duration::from_millis(20)).await;
    let probe = f.typed("marker_fail", fail(false), everyone()).await;
    assert_eq!(code(&probe), "ok");
    let policy: Vec<&str> = probe.meta.policy.iter().map(|p| p.as_ref()).collect();
    assert!(
        policy.contains(&"breaker:half-open-probe") && policy.contains(&"breaker:closed-after-probe"),
        "{policy:?}"
    );
    let after = f.typed("marker_fail", fail(false), everyone()).await;
    assert!(after.meta.policy.iter().any(|p| p == "breaker:closed"));
    let s = f.router.telemetry().snapshot();
    assert_eq!(s.tools["marker_fail"].breaker, Some(BreakerState::Closed));
    assert_eq!(s.tools["marker_fail"].breaker_opens, 1);

    // A failed probe opens it again.
    for _ in 0..3 {
        f.typed("marker_fail", fail(true), everyone()).await;
    }
    tokio::time::sleep(cooldown + Duration::from_millis(20)).await;
    let probe = f.typed("marker_fail", fail(true), everyone()).await;
    assert!(probe.meta.policy.iter().any(|p| p == "breaker:opened"), "{:?}", probe.meta.policy);
    assert_eq!(code(&f.typed("marker_fail", fail(false), everyone()).await), codes::CIRCUIT_OPEN);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_per_tool_concurrency_limit_queues_calls() {
    let _timing = crate::TIMING.read().await;
    let f = fixture(RouterSettings::default());
    // marker_wait allows 2 calls at once: 4 calls of 100 ms take two rounds.
    let started = Instant::now();
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let r = f.router.clone();
            tokio::spawn(async move { r.call(Call::new("marker_wait", json!({"ms": 100}), crate::everyone())).await })
        })
        .collect();
    for h in handles {
        let o = h.await.unwrap();
        assert_eq!(o.response.outputs["cancelled"], false, "{:?}", o.response);
    }
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(200), "4 calls with a limit of 2 took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_concurrent_calls_across_tools_finish_without_deadlock() {
    let _load = crate::TIMING.write().await;
    let f = fixture(RouterSettings::default());
    let started = Instant::now();
    let tools: [(&str, Value); 5] = [
        ("marker_echo", json!({"text": "x"})),
        ("marker_shout", json!({"text": "x"})),
        ("marker_say", json!({"text": "x"})),
        ("marker_big", json!({"bytes": 10})),
        ("marker_sleep", json!({"ms": 1})),
    ];
    let mut handles = Vec::with_capacity(4000);
    for i in 0..4000usize {
        let (name, args) = tools[i % tools.len()].clone();
        let r = f.router.clone();
        let lane_generic = i % 3 == 0;
        handles.push(tokio::spawn(async move {
            if lane_generic {
                r.run_tool(Call::generic(name, args, crate::everyone())).await
            } else {
                r.call(Call::new(name, args, crate::everyone())).await
            }
        }));
    }
    let all = tokio::time::timeout(Duration::from_secs(120), async {
        let mut ok = 0;
        for h in handles {
            if h.await.unwrap().response.status == Status::Ok {
                ok += 1;
            }
        }
        ok
    })
    .await
    .expect("4000 calls did not finish within 120 s: deadlock?");
    assert_eq!(all, 4000);
    let s = f.router.telemetry().snapshot();
    assert_eq!(s.calls, 4000);
    assert_eq!(s.lanes["generic"].calls, 1334);
    eprintln!("4000 calls in {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn big_results_are_cut_to_fit_their_output_schema_and_retrievable_by_handle() {
    let f = fixture(RouterSettings { result_handle_ttl: Duration::from_millis(400), ..RouterSettings::default() });
    let o = f.typed("marker_big", json!({"bytes": 5000}), everyone()).await;
    assert_eq!(o.response.status, Status::Partial);
    // The cut result keeps the tool's shape: `{"text": ...}`, its longest string shortened,
    // with a marker saying how much was cut and where the rest is.
    let out = &o.response.outputs;
    let keys: Vec<&String> = out.as_object().expect("an object").keys().collect();
    assert_eq!(keys, ["text"], "{out}");
    let text = out["text"].as_str().unwrap();
    assert!(text.starts_with("0123456789"), "{text}");
    assert!(serde_json::to_string(out).unwrap().len() <= 1024);
    let handle = o.meta.result_handle.clone().unwrap();
    assert!(text.contains(&format!("quiver://results/{handle}")), "{text}");
    let t = o.meta.truncation.as_ref().expect("truncation recorded");
    assert!(t.structured, "{t:?}");
    assert_eq!(t.total_bytes, 5000 + r#"{"text":""}"#.len());
    assert_eq!(t.cuts.len(), 1);
    assert_eq!(t.cuts[0].pointer, "/text");
    assert_eq!(t.cuts[0].total, 5000);
    assert!(text.starts_with(&text[..t.cuts[0].kept]));
    // The cut result validates against the tool's output schema.
    let catalog = quiver_catalog::CatalogSource::catalog(f.host.as_ref());
    let r = catalog.resolve("marker_big").unwrap();
    let validator = r.def.output_validator.as_ref().expect("marker_big has an output schema").get().unwrap();
    assert!(validator.is_valid(out), "{out}");
    assert!(o.response.observations.iter().any(|n| n.contains(&handle)));
    assert!(o.meta.policy.iter().any(|p| p == "result:truncated"));

    let full = f.router.fetch_result(&handle, 0, usize::MAX).unwrap();
    let v: Value = serde_json::from_str(&full).unwrap();
    let expected: String = (0..5000).map(|i| char::from(b'0' + (i % 10) as u8)).collect();
    assert_eq!(v, json!({"text": expected}));
    assert_eq!(f.router.fetch_result(&handle, 9, 5).unwrap(), "01234");
    assert_eq!(f.router.fetch_result("res-nope", 0, 10), None);

    // The generic lane serves the handle to the session that made it, and to nobody else.
    let o2 = f.generic("quiver.read_result", json!({"handle": handle, "offset": 9, "length": 5}), everyone()).await;
    assert_eq!(o2.response.status, Status::Ok, "{:?}", o2.response.error);
    assert_eq!(o2.response.outputs["text"], "01234");
    assert_eq!(o2.response.outputs["total_bytes"], t.total_bytes);
    assert_eq!(o2.response.outputs["next_offset"], 14);
    let mut stranger = everyone();
    stranger.session_id = "someone-else".into();
    let o3 = f.generic("quiver.read_result", json!({"handle": handle}), stranger).await;
    assert_eq!(code(&o3), ErrorCode::INVALID_ARGUMENTS);

    // Small results are untouched.
    let o = f.typed("marker_big", json!({"bytes": 100}), everyone()).await;
    assert_eq!(o.response.status, Status::Ok);
    assert!(o.meta.result_handle.is_none());
    // Handles expire.
    tokio::time::sleep(Duration::from_millis(450)).await;
    assert_eq!(f.router.fetch_result(&handle, 0, 10), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_schema_violation_is_an_error_naming_the_pointer() {
    let f = fixture(RouterSettings::default());
    let o = f.typed("marker_bad_output", json!({"text": "seven"}), everyone()).await;
    let e = o.response.error.unwrap();
    assert_eq!(e.code, codes::INVALID_OUTPUT);
    assert_eq!(e.details["pointer"], "/value");
    assert_eq!(e.details["errors"][0]["expected"], "integer");
    assert_eq!(e.details["errors"][0]["got"], r#"string "seven""#);
    assert!(e.message.contains("`/value`") && e.message.contains("fault of the tool"), "{}", e.message);
    assert!(o.meta.policy.iter().any(|p| p == "output:invalid"));
    // Panics are errors too, and the host keeps running.
    let o = f.typed("marker_panic", json!({"text": "boom"}), everyone()).await;
    assert_eq!(code(&o), ErrorCode::PANIC);
    assert_eq!(code(&f.typed("marker_echo", json!({"text": "still here"}), everyone()).await), "ok");
}

/// `Call::outputs_as_text`: an output the router can check as text comes back as that text
/// (the same value), and everything the output stage and the size limit do still happens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_passed_on_as_text_is_the_same_result_checked_the_same_way() {
    let f = fixture(RouterSettings::default());
    let call = |name: &str, args: Value| Call::new(name, args, everyone()).with_outputs_as_text(true);
    let as_value = f.typed("marker_echo", json!({"text": "hé \"x\""}), everyone()).await;
    assert!(as_value.outputs_text.is_none());
    let mut as_text = f.router.call(call("marker_echo", json!({"text": "hé \"x\""}))).await;
    assert_eq!(as_text.response.status, Status::Ok);
    assert_eq!(as_text.response.outputs, Value::Null, "the output is not also a value");
    let text = as_text.outputs_text.clone().expect("marker_echo's output schema is checked on text");
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), as_value.response.outputs);
    as_text.outputs_as_value();
    assert_eq!((as_text.response.outputs, as_text.outputs_text), (as_value.response.outputs, None));
    // An output its schema refuses: the same error, from the same validator.
    let bad = f.router.call(call("marker_bad_output", json!({"text": "seven"}))).await;
    assert!(bad.outputs_text.is_none());
    let e = bad.response.error.expect("invalid output");
    assert_eq!((e.code.as_str(), &e.details["pointer"]), (codes::INVALID_OUTPUT, &json!("/value")));
    // Over the size limit: cut as a value, as without text.
    let big = f.router.call(call("marker_big", json!({"bytes": 5000}))).await;
    assert_eq!(big.response.status, Status::Partial);
    assert!(big.outputs_text.is_none() && big.meta.truncation.is_some());
    assert!(big.response.outputs["text"].as_str().unwrap().starts_with("0123456789"));
    let small = f.router.call(call("marker_big", json!({"bytes": 100}))).await;
    assert_eq!(small.response.status, Status::Ok);
    assert!(small.outputs_text.is_some_and(|t| t.len() > 100));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_asks_the_user_through_the_client_bridge() {
    let f = fixture(RouterSettings::default());
    let bridge = TestBridge::new(true, json!({"action": "accept", "content": {"answer": "blue"}}));
    let o = f
        .router
        .call(Call::new("marker_ask", json!({"question": "colour?"}), everyone()).with_bridge(bridge.clone()))
        .await;
    assert_eq!(
        o.response.outputs,
        json!({"answer": {"action": "accept", "content": {"answer": "blue"}}}),
        "{:?}",
        o.response.error
    );
    // Without an eliciting client the tool gets an error it can report.
    let o = f
        .router
        .call(Call::new("marker_ask", json!({"question": "colour?"}), everyone()).with_bridge(Arc::new(NullBridge)))
        .await;
    let e = o.response.error.unwrap();
    assert_eq!(e.code, ErrorCode::TOOL_ERROR);
    assert!(e.message.contains("cannot ask the user"), "{}", e.message);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_settings_from_the_host_config_reach_the_tool() {
    let settings = RouterSettings {
        plugin_config: [("marker-plugin".to_owned(), json!({"greeting": "hello"}))].into_iter().collect(),
        ..RouterSettings::default()
    };
    let f = fixture(settings);
    let o = f.typed("marker_echo", json!({"text": "hi"}), everyone()).await;
    assert_eq!(o.response.outputs["config"], json!({"greeting": "hello"}), "{:?}", o.response);
    // A call that brings its own settings (contract-test fixtures) overrides the host's.
    let own = f
        .router
        .call(Call { config: json!({"greeting": "own"}), ..Call::new("marker_echo", json!({"text": "x"}), everyone()) })
        .await;
    assert_eq!(own.response.outputs["config"], json!({"greeting": "own"}));
}

mod scope_leaks {
    use std::sync::OnceLock;

    use proptest::prelude::*;
    use serde_json::json;

    use crate::{Fixture, caller, fixture};

    fn shared() -> &'static (Fixture, tokio::runtime::Runtime) {
        static F: OnceLock<(Fixture, tokio::runtime::Runtime)> = OnceLock::new();
        F.get_or_init(|| {
            let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
            (fixture(quiver_router::RouterSettings::default()), rt)
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// Whatever a caller without `marker.secret` sends (names near the hidden tool, through
        /// either lane), nothing in the outcome — message, details, suggestions, metadata —
        /// names `marker_secret`, except an echo of the caller's own input.
        #[test]
        fn errors_never_reveal_a_tool_outside_the_callers_scopes(
            stem in prop::sample::select(vec!["marker_secret", "marker_secre", "marker_secrett", "secret", "marker_sec", "marker_", "marker_secret_x"]),
            generic in any::<bool>(),
            admin in any::<bool>(),
            args in prop::sample::select(vec![json!({}), json!({"text": 1}), json!({"path": "x"})]),
        ) {
            let (f, rt) = shared();
            let scopes: Vec<&str> = if admin { vec!["marker.admin"] } else { vec![] };
            let who = caller(&scopes, &[]);
            let o = rt.block_on(async {
                if generic { f.generic(stem, args.clone(), who).await } else { f.typed(stem, args.clone(), who).await }
            });
            let text = format!("{} {}", serde_json::to_string(&o.response).unwrap(), serde_json::to_string(&o.meta).unwrap());
            let scrubbed = text.replace(&format!("`{stem}`"), "").replace(&format!("\"{stem}\""), "");
            prop_assert!(!scrubbed.contains("marker_secret"), "{stem}: {text}");
            prop_assert_eq!(o.response.error.as_ref().map(|e| e.code.as_str()), Some("unknown_tool"));
        }
    }
}

/// One slow thread tool cannot take every host slot, and inline calls never wait behind thread
/// calls (issue: 300 slow calls in flight made a fast inline tool wait 7 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_tool_cannot_take_every_slot_and_inline_calls_never_wait_for_one() {
    let f = Arc::new(fixture(RouterSettings { max_concurrency: 4, ..RouterSettings::default() }));
    let finished = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut slow = Vec::new();
    for _ in 0..10 {
        let (f, finished) = (f.clone(), finished.clone());
        slow.push(tokio::spawn(async move {
            let o = f.typed("marker_sleep", json!({"ms": 1500}), everyone()).await;
            finished.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            o
        }));
    }
    tokio::time::sleep(Duration::from_millis(150)).await;
    // An inline tool answers while every slow call is still running.
    let echo = f.typed("marker_echo", json!({"text": "fast"}), everyone()).await;
    assert_eq!(echo.response.status, Status::Ok, "{:?}", echo.response);
    assert_eq!(finished.load(std::sync::atomic::Ordering::SeqCst), 0, "the inline call waited for the slow ones");
    // Another thread tool still finds a host slot: marker_sleep holds at most 3 of the 4.
    let other = f.typed("marker_panic", json!({"text": "x"}), everyone()).await;
    assert_eq!(other.response.error.as_ref().map(|e| e.code.as_str()), Some("panic"), "{:?}", other.response);
    assert_eq!(finished.load(std::sync::atomic::Ordering::SeqCst), 0, "the thread call waited for the slow ones");
    for s in slow {
        s.await.unwrap();
    }
}

/// `memory_writes` are kept per session and tool and come back to the tool on its next calls
/// (`ToolRequest.memory_snippet`, read with `Context::recall`); another session or tool never
/// sees them, a null value forgets a key, and oversized writes are refused, not half-kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_writes_come_back_to_the_same_tool_in_the_same_session() {
    let f = fixture(RouterSettings::default());
    let remember = |text: &str| json!({ "text": text });
    let first = f.typed("marker_remember", remember("a"), everyone()).await;
    assert_eq!(first.response.outputs, json!({ "previous": null }), "{:?}", first.response);
    let second = f.typed("marker_remember", remember("b"), everyone()).await;
    assert_eq!(second.response.outputs, json!({ "previous": "a" }), "{:?}", second.response);
    // Through the generic lane it is the same tool in the same session.
    let third = f.generic("marker_remember", remember("c"), everyone()).await;
    assert_eq!(third.response.outputs, json!({ "previous": "b" }), "{:?}", third.response);
    // Another session starts empty.
    let other = quiver_router::Caller::new("other-session", quiver_catalog::Access::unrestricted());
    let o = f.typed("marker_remember", remember("x"), other.clone()).await;
    assert_eq!(o.response.outputs, json!({ "previous": null }));
    // `forget` writes null: the key is gone.
    let o = f.typed("marker_remember", json!({ "text": "y", "forget": true }), other.clone()).await;
    assert_eq!(o.response.outputs, json!({ "previous": "x" }));
    let o = f.typed("marker_remember", remember("z"), other.clone()).await;
    assert_eq!(o.response.outputs, json!({ "previous": null }));
    // A value over the per-tool bound is refused (the previous value stays) and logged, and the
    // call itself still answers.
    let big = "m".repeat(64 * 1024);
    let o = f.typed("marker_remember", remember(&big), everyone()).await;
    assert_eq!(o.response.outputs, json!({ "previous": "c" }));
    let o = f.typed("marker_remember", remember("d"), everyone()).await;
    assert_eq!(o.response.outputs, json!({ "previous": "c" }), "the oversized write was not kept");
}

/// The plugin's own backend, with every tool run inline (as a manifest's `execution: inline`
/// makes the loader do).
struct AllInline(Arc<dyn quiver_catalog::ToolBackend>);

impl quiver_catalog::ToolBackend for AllInline {
    fn invoke(&self, tool: &str, request: &str, sink: Arc<dyn quiver_catalog::CallSink>) -> String {
        self.0.invoke(tool, request, sink)
    }
    fn dispatch(&self, _index: usize) -> quiver_catalog::Dispatch {
        quiver_catalog::Dispatch::Inline
    }
}

/// An inline tool runs on a runtime thread, which must not block on a client's answer: its
/// elicitation is refused with a reason naming the fix (it used to end in a caught panic,
/// "host failure during elicitation"), and the call itself still completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_tool_cannot_elicit_and_is_told_why() {
    let (_p, router) = router_over(|b| Arc::new(AllInline(b)), RouterSettings::default());
    let bridge = TestBridge::new(true, json!({"action": "accept", "content": {"answer": "blue"}}));
    let o = router.call(Call::new("marker_ask", json!({"question": "colour?"}), everyone()).with_bridge(bridge)).await;
    let e = o.response.error.expect("the tool reports the refused elicitation");
    assert_eq!(e.code, ErrorCode::TOOL_ERROR);
    assert!(e.message.contains("not available to a tool with inline execution"), "{}", e.message);
    assert!(e.message.contains("execution: thread"), "{}", e.message);
}

/// A router over the marker plugin with its backend wrapped by `wrap` (the rest of the plugin,
/// its manifest and schemas, as loaded). Keep the `Plugins` alive while the router is used.
fn router_over(
    wrap: impl FnOnce(Arc<dyn quiver_catalog::ToolBackend>) -> Arc<dyn quiver_catalog::ToolBackend>,
    settings: RouterSettings,
) -> (support::Plugins, Router) {
    let (plugins, host) = support::marker_host();
    let plugin = host.catalog().plugins()[0].clone();
    let entry = support::entry_with(&plugin, plugin.manifest.clone(), wrap(plugin.backend.clone()));
    let catalog =
        Arc::new(quiver_catalog::Catalog::build(vec![Arc::new(entry)], quiver_catalog::ConflictPolicy::Error).unwrap());
    (plugins, Router::new(Arc::new(catalog), settings))
}

/// A gate a stuck call waits for (see [`Stuck`]).
fn gate() -> Arc<(std::sync::Mutex<bool>, std::sync::Condvar)> {
    Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()))
}

/// The plugin's own backend, except that a call whose request holds `"ms":4242` first waits
/// for the test to open a gate, whatever its deadline or cancellation (a tool stuck in code
/// that never checks `is_cancelled`).
struct Stuck {
    inner: Arc<dyn quiver_catalog::ToolBackend>,
    open: Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
}

impl quiver_catalog::ToolBackend for Stuck {
    fn invoke(&self, tool: &str, request: &str, sink: Arc<dyn quiver_catalog::CallSink>) -> String {
        if request.contains("\"ms\":4242") {
            let (lock, cv) = &*self.open;
            let mut open = lock.lock().unwrap();
            while !*open {
                open = cv.wait(open).unwrap();
            }
        }
        self.inner.invoke(tool, request, sink)
    }
    fn dispatch(&self, index: usize) -> quiver_catalog::Dispatch {
        self.inner.dispatch(index)
    }
}

/// Thread-execution calls run on the router's bounded pool of threads (as many as the host's
/// call slots, here 2). Two calls stuck past their deadline get their callers a `timeout` at
/// the deadline, and the pool starts threads in their place: with both stuck threads still
/// running, calls of other thread tools keep answering (three at once on two slots), a
/// plugin's panic is a tool error and the pool keeps serving; the stuck calls' overruns are
/// counted until they return.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stuck_thread_calls_are_replaced_in_the_pool_and_panics_leave_it_serving() {
    let _timing = crate::TIMING.read().await;
    let open = gate();
    let settings = RouterSettings { max_concurrency: 2, ..RouterSettings::default() };
    let (_p, router) = router_over(|inner| Arc::new(Stuck { inner, open: open.clone() }), settings);
    let router = Arc::new(router);
    let call = |name: &str, args: Value| {
        let router = router.clone();
        let call = Call::new(name, args, everyone());
        tokio::spawn(async move {
            let started = Instant::now();
            let o = router.call(call).await;
            (o, started.elapsed())
        })
    };
    // marker_wait's deadline is 300 ms; both calls hang past it.
    let stuck = [call("marker_wait", json!({"ms": 4242})), call("marker_wait", json!({"ms": 4242}))];
    for s in stuck {
        let (o, took) = s.await.unwrap();
        assert_eq!(code(&o), ErrorCode::TIMEOUT, "{:?}", o.response);
        assert!(took >= Duration::from_millis(300) && took < Duration::from_millis(330), "timeout after {took:?}");
    }
    assert_eq!(router.telemetry().snapshot().tools["marker_wait"].overruns, 2);
    // Both pool threads are still stuck; their places were taken by new threads.
    let sleeps = [call("marker_sleep", json!({"ms": 30})), call("marker_sleep", json!({"ms": 30}))];
    let panic = call("marker_panic", json!({"text": "boom"}));
    for s in sleeps {
        let (o, _) = s.await.unwrap();
        assert_eq!(o.response.status, Status::Ok, "{:?}", o.response);
    }
    let (o, _) = panic.await.unwrap();
    assert_eq!(code(&o), "panic", "{:?}", o.response);
    let (o, _) = call("marker_sleep", json!({"ms": 1})).await.unwrap();
    assert_eq!(o.response.status, Status::Ok, "the pool serves after a panic: {:?}", o.response);
    // The stuck calls return; their overruns end.
    *open.0.lock().unwrap() = true;
    open.1.notify_all();
    let waited = Instant::now();
    while router.telemetry().snapshot().tools["marker_wait"].overruns != 0 && waited.elapsed() < Duration::from_secs(5)
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(router.telemetry().snapshot().tools["marker_wait"].overruns, 0);
    let (o, _) = call("marker_wait", json!({"ms": 1})).await.unwrap();
    assert_eq!(o.response.status, Status::Ok, "{:?}", o.response);
}

/// The same plugin with every tool inline, its backend taking the call's host services
/// borrowed (`ToolBackend::invoke_borrowed`, as the in-process backend does).
struct AllInlineBorrowed(Arc<dyn quiver_catalog::ToolBackend>);

impl quiver_catalog::ToolBackend for AllInlineBorrowed {
    fn invoke(&self, tool: &str, request: &str, sink: Arc<dyn quiver_catalog::CallSink>) -> String {
        self.0.invoke(tool, request, sink)
    }
    fn invoke_borrowed(
        &self,
        tool: &str,
        request: &str,
        sink: &dyn quiver_catalog::CallSink,
        answer: &mut dyn FnMut(&str),
    ) -> bool {
        self.0.invoke_borrowed(tool, request, sink, answer)
    }
    fn dispatch(&self, _index: usize) -> quiver_catalog::Dispatch {
        quiver_catalog::Dispatch::Inline
    }
}

/// An inline call's borrowed host services answer as the owned ones do: elicitation is
/// refused with the reason and the fix, the deadline shows in `is_cancelled`, logs reach the
/// client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_call_with_borrowed_host_services_logs_and_cannot_elicit() {
    let (_p, router) = router_over(|b| Arc::new(AllInlineBorrowed(b)), RouterSettings::default());
    let bridge = TestBridge::new(true, json!({"action": "accept", "content": {"answer": "blue"}}));
    let o = router
        .call(Call::new("marker_ask", json!({"question": "colour?"}), everyone()).with_bridge(bridge.clone()))
        .await;
    let e = o.response.error.expect("the tool reports the refused elicitation");
    assert_eq!(e.code, ErrorCode::TOOL_ERROR);
    assert!(e.message.contains("not available to a tool with inline execution"), "{}", e.message);
    // Run inline, marker_wait blocks its caller's task, sees its 300 ms deadline pass through
    // `is_cancelled` and logs it through the same borrowed services.
    let o = router.call(Call::new("marker_wait", json!({"ms": 2000}), everyone()).with_bridge(bridge.clone())).await;
    assert_eq!(code(&o), ErrorCode::TIMEOUT, "{:?}", o.response);
    let logs = bridge.logs();
    assert!(logs.iter().any(|l| l.starts_with("marker_wait saw cancellation after")), "{logs:?}");
}

/// The plugin's own backend, answering an error when it runs outside the caller's tokio
/// runtime context.
struct NeedsRuntime(Arc<dyn quiver_catalog::ToolBackend>);

impl quiver_catalog::ToolBackend for NeedsRuntime {
    fn invoke(&self, tool: &str, request: &str, sink: Arc<dyn quiver_catalog::CallSink>) -> String {
        if tokio::runtime::Handle::try_current().is_err() {
            return r#"{"status":"error","error":{"code":"tool_error","message":"no tokio runtime on this thread"}}"#
                .to_owned();
        }
        self.0.invoke(tool, request, sink)
    }
    fn dispatch(&self, index: usize) -> quiver_catalog::Dispatch {
        self.0.dispatch(index)
    }
}

/// A thread-execution call runs in the caller's runtime context (as on a tokio blocking
/// thread), on both kinds of runtime.
#[test]
fn a_thread_call_runs_in_the_callers_runtime_context() {
    let (_p, router) = router_over(|b| Arc::new(NeedsRuntime(b)), RouterSettings::default());
    let current = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let multi = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    for rt in [&current, &multi] {
        let o = rt.block_on(router.call(Call::new("marker_sleep", json!({"ms": 1}), everyone())));
        assert_eq!(o.response.status, Status::Ok, "{:?}", o.response);
    }
}

/// The plugin's own backend as a remote one (`Dispatch::Remote`, as a worker process is): each
/// call runs on a thread of its own, and one whose request holds `"ms":4242` first waits for the
/// test to open a gate (a call stuck past its deadline).
struct StuckRemote {
    inner: Arc<dyn quiver_catalog::ToolBackend>,
    open: Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
}

impl quiver_catalog::ToolBackend for StuckRemote {
    fn invoke(&self, tool: &str, request: &str, sink: Arc<dyn quiver_catalog::CallSink>) -> String {
        self.inner.invoke(tool, request, sink)
    }
    fn dispatch(&self, _index: usize) -> quiver_catalog::Dispatch {
        quiver_catalog::Dispatch::Remote
    }
    fn start(
        &self,
        tool: &str,
        request: String,
        sink: Arc<dyn quiver_catalog::CallSink>,
        _deadline: Instant,
    ) -> quiver_catalog::RemoteCall {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let (inner, open, tool) = (self.inner.clone(), self.open.clone(), tool.to_owned());
        std::thread::spawn(move || {
            if request.contains("\"ms\":4242") {
                let (lock, cv) = &*open;
                let mut open = lock.lock().unwrap();
                while !*open {
                    open = cv.wait(open).unwrap();
                }
            }
            let _ = tx.send(inner.invoke(&tool, &request, sink));
        });
        quiver_catalog::RemoteCall {
            answer: Box::pin(async move {
                rx.await.map_err(|_| quiver_abi::ToolError::new("protocol_error", "the test thread ended"))
            }),
            abort: Box::new(|_| {}),
        }
    }
}

/// A remote call that times out is counted once as a timeout, and as an overrun until it
/// returns (the answer its caller got says `timeout` once; so do the tool's statistics).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_call_past_its_deadline_is_one_timeout_and_one_overrun_until_it_returns() {
    let _timing = crate::TIMING.read().await;
    let open = gate();
    let (_p, router) =
        router_over(|inner| Arc::new(StuckRemote { inner, open: open.clone() }), RouterSettings::default());
    // marker_wait's deadline is 300 ms; the call hangs past it.
    let o = router.call(Call::new("marker_wait", json!({"ms": 4242}), everyone())).await;
    assert_eq!(code(&o), ErrorCode::TIMEOUT, "{:?}", o.response);
    let stats = router.telemetry().snapshot().tools["marker_wait"].clone();
    assert_eq!((stats.timeouts, stats.overruns), (1, 1), "{stats:?}");
    *open.0.lock().unwrap() = true;
    open.1.notify_all();
    let waited = Instant::now();
    while router.telemetry().snapshot().tools["marker_wait"].overruns != 0 && waited.elapsed() < Duration::from_secs(5)
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let stats = router.telemetry().snapshot().tools["marker_wait"].clone();
    assert_eq!((stats.timeouts, stats.overruns), (1, 0), "{stats:?}");
    // A remote call that answers in time counts no timeout.
    let o = router.call(Call::new("marker_wait", json!({"ms": 1}), everyone())).await;
    assert_eq!(o.response.status, Status::Ok, "{:?}", o.response);
    assert_eq!(router.telemetry().snapshot().tools["marker_wait"].timeouts, 1);
}

/// A catalog source whose snapshot a test replaces (a hot swap).
struct Swappable(std::sync::Mutex<Arc<quiver_catalog::Catalog>>);

impl quiver_catalog::CatalogSource for Swappable {
    fn catalog(&self) -> Arc<quiver_catalog::Catalog> {
        self.0.lock().unwrap().clone()
    }
}

/// Rate-limit buckets outlive a hot swap of the tool's plugin to new library bytes (a new
/// release): a caller who used up a limit is still limited after the swap, as long as the
/// limit is the same. (The breaker starts fresh with the new code; the buckets guard the
/// service behind the tool, which did not change.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_buckets_outlive_a_hot_swap_to_new_bytes() {
    let f = fixture(RouterSettings::default());
    let plugin = f.host.catalog().plugins()[0].clone();
    let build = |sha: &str| {
        let mut entry = support::entry_with(&plugin, plugin.manifest.clone(), plugin.backend.clone());
        entry.provenance.sha256 = sha.to_owned();
        quiver_catalog::Catalog::build(vec![Arc::new(entry)], quiver_catalog::ConflictPolicy::Error).unwrap()
    };
    let limit = quiver_manifest::RateLimits {
        session: Some(quiver_manifest::RateLimit { per_minute: 1, burst: Some(1) }),
        ..Default::default()
    };
    let source = Arc::new(Swappable(std::sync::Mutex::new(Arc::new(build(&"a".repeat(64))))));
    let router = Router::new(
        source.clone(),
        RouterSettings { rate_limits: [("marker_echo".to_owned(), limit)].into_iter().collect(), ..Default::default() },
    );
    let echo = || Call::new("marker_echo", json!({"text": "x"}), everyone());
    assert_eq!(code(&router.call(echo()).await), "ok");
    assert_eq!(code(&router.call(echo()).await), codes::Code::RateLimited.as_str());
    // The same plugin, new bytes.
    *source.0.lock().unwrap() = Arc::new(build(&"b".repeat(64)));
    let o = router.call(echo()).await;
    assert_eq!(code(&o), codes::Code::RateLimited.as_str(), "the swap reset the bucket: {:?}", o.response);
    // Another session has its own bucket, before and after.
    let mut someone_else = everyone();
    someone_else.session_id = "another-session".into();
    assert_eq!(code(&router.call(Call::new("marker_echo", json!({"text": "x"}), someone_else)).await), "ok");
}
