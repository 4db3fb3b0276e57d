//! Transcripts and replay: recorded calls keep working after renames and deprecations.

use std::io::Write;
use std::sync::Arc;

use quiver_abi::ErrorCode;
use quiver_catalog::{Catalog, ConflictPolicy, PluginEntry};
use quiver_manifest::{AliasSpec, LifecycleState, Manifest};
use quiver_router::{ReplayVerdict, Router, RouterSettings, replay};
use semver::Version;
use serde_json::json;

use crate::{everyone, fixture, support};

/// Release "0.2.0" of the marker plugin as a manifest change only: the standalone tool
/// `marker_shout` is retired and its name becomes an alias (in `state`) of `marker_text`'s
/// `shout` action. Same library, same code.
fn retire_shout(plugin: &PluginEntry, state: LifecycleState) -> Router {
    retire_shout_with(plugin, state, state != LifecycleState::Removed)
}

/// [`retire_shout`] with the alias's `replay_supported` given.
fn retire_shout_with(plugin: &PluginEntry, state: LifecycleState, replay_supported: bool) -> Router {
    let mut m: Manifest = plugin.manifest.clone();
    m.version = Version::new(0, 2, 0);
    m.tools.retain(|t| t.name != "marker_shout");
    let text = m.tools.iter_mut().find(|t| t.name == "marker_text").unwrap();
    text.aliases.push(AliasSpec {
        name: "marker_shout".into(),
        state,
        action: Some("shout".into()),
        first_deprecated_version: Some(Version::new(0, 2, 0)),
        planned_removal_version: (state == LifecycleState::Deprecated).then(|| Version::new(0, 3, 0)),
        removed_in_version: (state == LifecycleState::Removed).then(|| Version::new(0, 2, 0)),
        replay_supported,
    });
    let entry = support::entry_with(plugin, m, plugin.backend.clone());
    let catalog = Catalog::build(vec![Arc::new(entry)], ConflictPolicy::Error).unwrap();
    assert!(catalog.resolve("marker_shout").unwrap().alias.is_some());
    Router::new(Arc::new(Arc::new(catalog)), RouterSettings::default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transcript_recorded_before_a_deprecation_replays_identically_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let f = fixture(RouterSettings { transcript_dir: Some(dir.path().to_owned()), ..RouterSettings::default() });

    // Recorded with 0.1.0, where `marker_shout` is a canonical tool.
    let recorded = [
        f.typed("marker_shout", json!({"text": "hello"}), everyone()).await,
        f.generic("marker_shout", json!({"text": "generic"}), everyone()).await,
        f.typed("marker_echo", json!({"text": "same"}), everyone()).await,
        f.typed("marker_text", json!({"action": "echo", "text": "t"}), everyone()).await,
        f.typed("marker_fail", json!({"fail": true}), everyone()).await,
        f.typed("marker_nope", json!({}), everyone()).await,
    ];
    assert_eq!(recorded[0].response.outputs, json!({"text": "HELLO"}));
    assert!(recorded[0].meta.notice.is_none());
    f.router.flush_transcripts();
    let path = f.router.transcript_path("test-session").unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.lines().count(), 6, "{text}");
    let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(first["called_name"], "marker_shout");
    assert_eq!(first["arguments"], json!({"text": "hello"}));
    assert_eq!(first["lane"], "typed");
    assert_eq!(first["tool"], "marker_shout");
    assert_eq!(first["plugin"], "marker-plugin");
    assert_eq!(first["plugin_version"], "0.1.0");
    assert_eq!(first["response"]["outputs"], json!({"text": "HELLO"}));
    assert!(first["policy"].as_array().unwrap().iter().any(|p| p == "approval:not-required"));
    assert!(first["duration_us"].as_u64().is_some() && first["started_at_ms"].as_u64().unwrap() > 0);

    // The summary `quiver stats` prints.
    let stats = quiver_telemetry::stats_from_transcript(&path).unwrap();
    assert_eq!(stats.calls, 6);
    assert_eq!(stats.status.error, 2);
    assert_eq!(stats.tools["marker_shout"].calls, 2);
    assert_eq!(stats.errors[ErrorCode::UNKNOWN_TOOL], 1);
    assert_eq!(stats.lanes["generic"].calls, 1);
    assert_eq!(stats.lanes["typed"].success_rate, 0.6);
    assert!(stats.duration_ms.p95 >= stats.duration_ms.p50);

    // Replayed against 0.2.0, where `marker_shout` is a deprecated alias of marker_text/shout.
    let after = retire_shout(&f.host.catalog().plugins()[0], LifecycleState::Deprecated);
    let report = replay(&path, &after, everyone()).await.unwrap();
    assert!(
        report.all_identical(),
        "{:#?}",
        report.entries.iter().map(|e| (&e.called_name, &e.verdict)).collect::<Vec<_>>()
    );
    assert_eq!(report.identical, 6);
    for e in report.entries.iter().filter(|e| e.called_name == "marker_shout") {
        let o = e.outcome.as_ref().unwrap();
        assert_eq!(o.meta.tool(), Some("marker_text"));
        assert_eq!(o.meta.action.as_deref(), Some("shout"));
        assert_eq!(o.meta.plugin_version(), Some("0.2.0"));
        let n = o.meta.notice.as_ref().expect("the notice is added in metadata");
        assert_eq!(n.state, LifecycleState::Deprecated);
        assert_eq!(n.replacement.as_deref(), Some("marker_text"));
        assert!(n.message().contains("deprecated since 0.2.0 and will be removed in 0.3.0"), "{}", n.message());
    }

    // A removed alias that keeps `replay_supported: true` still replays (through the tool and
    // action it named), with its removal notice: recorded transcripts keep working.
    let removed_replayable = retire_shout_with(&f.host.catalog().plugins()[0], LifecycleState::Removed, true);
    let report = replay(&path, &removed_replayable, everyone()).await.unwrap();
    assert_eq!((report.identical, report.changed, report.failed), (6, 0, 0), "{:#?}", report.entries);
    for e in report.entries.iter().filter(|e| e.called_name == "marker_shout") {
        let o = e.outcome.as_ref().unwrap();
        assert_eq!((o.meta.tool(), o.meta.action.as_deref()), (Some("marker_text"), Some("shout")));
        let n = o.meta.notice.as_ref().expect("the removal notice");
        assert_eq!(n.state, LifecycleState::Removed);
    }
    // A live call by the removed name is still refused.
    let live =
        removed_replayable.call(quiver_router::Call::new("marker_shout", json!({"text": "x"}), everyone())).await;
    assert_eq!(live.response.error.unwrap().code, "tool_removed");

    // With `replay_supported: false` those lines are not run: they fail, saying so and naming
    // the replacement; the same holds for a name still dispatchable (a deprecated alias).
    for state in [LifecycleState::Removed, LifecycleState::Deprecated] {
        let unsupported = retire_shout_with(&f.host.catalog().plugins()[0], state, false);
        let report = replay(&path, &unsupported, everyone()).await.unwrap();
        assert_eq!((report.identical, report.changed, report.failed), (4, 0, 2), "{state:?}");
        for e in report.entries.iter().filter(|e| e.called_name == "marker_shout") {
            assert!(e.outcome.is_none(), "{state:?}: not run");
            match &e.verdict {
                ReplayVerdict::Failed { reason } => assert!(
                    reason.starts_with("replay_unsupported")
                        && reason.contains("replay_supported: false")
                        && reason.contains("marker_text"),
                    "{reason}"
                ),
                v => panic!("{v:?}"),
            }
        }
    }
    let mut line: serde_json::Value = serde_json::from_str(text.lines().nth(2).unwrap()).unwrap();
    line["arguments"]["text"] = json!("different");
    let mut file = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
    writeln!(file, "{line}").unwrap();
    writeln!(file, "not a record").unwrap();
    drop(file);
    let report = replay(&path, &after, everyone()).await.unwrap();
    assert_eq!((report.identical, report.changed, report.failed), (6, 1, 1));
    let changed = report.entries.iter().find(|e| matches!(e.verdict, ReplayVerdict::Changed { .. })).unwrap();
    assert_eq!(
        changed.verdict,
        ReplayVerdict::Changed { diff: r#"outputs differ: /text: "same" -> "different""#.into() }
    );

    // A crash cut the last line short (mid-character, no newline): that line is left out and
    // reported, the rest replays.
    let whole = text.lines().next().unwrap();
    let mut cut = whole.as_bytes()[..whole.len() / 2].to_vec();
    cut.extend_from_slice("é".as_bytes().split_at(1).0);
    let mut file = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
    file.write_all(&cut).unwrap();
    drop(file);
    let report = replay(&path, &after, everyone()).await.expect("a cut last line is no error");
    assert_eq!((report.identical, report.changed, report.failed), (6, 1, 1));
    assert!(report.cut_last_line, "the cut line is reported");
    let stats = quiver_telemetry::stats_from_transcript(&path).unwrap();
    assert_eq!(stats.calls, 7);
    assert!(stats.cut_last_line);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn surfaces_and_meta_tool_calls_reach_the_transcript_and_stats() {
    let dir = tempfile::tempdir().unwrap();
    let f = fixture(RouterSettings { transcript_dir: Some(dir.path().to_owned()), ..RouterSettings::default() });
    let caller = everyone();
    f.router.record_surface(&caller, 4, 7, 5000);
    f.router.record_meta_call(&caller, "tool_search", true);
    f.router.record_meta_call(&caller, "tool_search", false);
    f.router.record_meta_call(&caller, "list_tools", true);
    f.typed("marker_echo", json!({"text": "x"}), caller.clone()).await;
    f.router.flush_transcripts();
    let path = f.router.transcript_path("test-session").unwrap();
    let stats = quiver_telemetry::stats_from_transcript(&path).unwrap();
    assert_eq!(stats.calls, 1);
    assert_eq!(stats.unreadable_lines, 0);
    assert_eq!((stats.surfaces.n_surfaces, stats.surfaces.last_typed, stats.surfaces.last_total), (1, 4, 7));
    assert_eq!((stats.generic.search_calls, stats.generic.search_failures, stats.generic.list_calls), (2, 1, 1));
    // Replay runs the calls and passes over the events.
    let report = replay(&path, &f.router, everyone()).await.unwrap();
    assert_eq!((report.identical, report.failed), (1, 0));
}

/// A call whose result was cut to its size limit replays identically in another process (as
/// `quiver replay` runs): the cut result names its handle, which must be the recorded one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_result_replays_identically_in_another_process() {
    let dir = tempfile::tempdir().unwrap();
    let f = fixture(RouterSettings { transcript_dir: Some(dir.path().to_owned()), ..RouterSettings::default() });
    let big = f.typed("marker_big", json!({"bytes": 5000}), everyone()).await;
    assert_eq!(big.response.status, quiver_abi::Status::Partial);
    f.router.flush_transcripts();
    let path = f.router.transcript_path("test-session").unwrap();
    let other = fixture(RouterSettings::default());
    let mut replayer = everyone();
    replayer.session_id = "replay-1".into();
    let report = replay(&path, &other.router, replayer).await.unwrap();
    assert_eq!((report.identical, report.changed, report.failed), (1, 0, 0), "{:#?}", report.entries[0].verdict);
}

/// A session whose result was cut (and that read the rest by its handle) replays identically in
/// another process: the cut result names the same handle, and the read of it finds the result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_result_and_the_read_of_its_handle_replay_identically() {
    let dir = tempfile::tempdir().unwrap();
    let f = fixture(RouterSettings { transcript_dir: Some(dir.path().to_owned()), ..RouterSettings::default() });
    let big = f.typed("marker_big", json!({"bytes": 5000}), everyone()).await;
    assert_eq!(big.response.status, quiver_abi::Status::Partial);
    let handle = big.meta.result_handle.clone().unwrap();
    let read = f.generic("quiver.read_result", json!({"handle": handle, "offset": 9, "length": 5}), everyone()).await;
    assert_eq!(read.response.outputs["text"], "01234", "{:?}", read.response.error);
    f.router.flush_transcripts();
    let path = f.router.transcript_path("test-session").unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let second: serde_json::Value = serde_json::from_str(text.lines().nth(1).unwrap()).unwrap();
    assert_eq!(second["called_name"], "quiver.read_result");
    assert_eq!(second["arguments"], json!({"handle": handle, "offset": 9, "length": 5}), "the arguments as called");

    // `quiver replay` runs in a process of its own: another router, another session.
    let other = fixture(RouterSettings::default());
    let mut replayer = everyone();
    replayer.session_id = "replay-1".into();
    let report = replay(&path, &other.router, replayer).await.unwrap();
    assert_eq!(
        (report.identical, report.changed, report.failed),
        (2, 0, 0),
        "{:#?}",
        report.entries.iter().map(|e| (&e.called_name, &e.verdict)).collect::<Vec<_>>()
    );
}

/// A replay honours the tool's rate limits without failing for them: recorded calls made over
/// time, replayed at once, wait for their bucket (`retry_after_ms`) instead of coming back
/// `rate_limited`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_waits_for_rate_limits_instead_of_failing_on_them() {
    let dir = tempfile::tempdir().unwrap();
    let f = fixture(RouterSettings { transcript_dir: Some(dir.path().to_owned()), ..RouterSettings::default() });
    for text in ["a", "b", "c", "d"] {
        let o = f.typed("marker_echo", json!({"text": text}), everyone()).await;
        assert_eq!(o.response.outputs["text"], text);
    }
    f.router.flush_transcripts();
    let path = f.router.transcript_path("test-session").unwrap();
    let limited = quiver_manifest::RateLimits {
        session: Some(quiver_manifest::RateLimit { per_minute: 3000, burst: Some(1) }),
        ..Default::default()
    };
    let other = fixture(RouterSettings {
        rate_limits: [("marker_echo".to_owned(), limited)].into_iter().collect(),
        ..RouterSettings::default()
    });
    let report = replay(&path, &other.router, everyone()).await.unwrap();
    assert_eq!(
        (report.identical, report.changed, report.failed),
        (4, 0, 0),
        "{:#?}",
        report.entries.iter().map(|e| &e.verdict).collect::<Vec<_>>()
    );
}
