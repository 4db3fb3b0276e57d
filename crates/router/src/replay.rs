//! Replaying transcripts against the current catalog: the guarantee that recorded calls keep
//! working across renames and deprecations.

use std::path::Path;

use quiver_abi::{Status, ToolResponse};
use quiver_telemetry::{Lane, TranscriptRecord};
use serde_json::Value;

use crate::codes::Code;
use crate::{Call, CallOutcome, Caller, Router};

/// Times a replayed call refused by a rate limit waits for its bucket and runs again.
const MAX_RATE_LIMIT_WAITS: usize = 100;

/// How a replayed call compares with its recording (outputs and status; metadata such as
/// notices, durations and request ids is not compared).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplayVerdict {
    /// Same status, same outputs (and, for errors, the same error code).
    Identical,
    /// It ran but answered differently.
    Changed {
        /// A short description of the differences.
        diff: String,
    },
    /// It could not be replayed: an unreadable line, or an error where the recording succeeded.
    Failed {
        /// Why.
        reason: String,
    },
}

/// One replayed line.
#[derive(Debug, Clone)]
pub struct ReplayEntry {
    /// Line number in the transcript (1-based).
    pub line: usize,
    /// Request id of the recording.
    pub request_id: String,
    /// The name as recorded.
    pub called_name: String,
    /// The lane as recorded.
    pub lane: Lane,
    /// The comparison.
    pub verdict: ReplayVerdict,
    /// The replayed call (absent for unreadable lines); its `meta.notice` tells when the
    /// recorded name is now deprecated or an alias.
    pub outcome: Option<CallOutcome>,
}

/// What a replay found.
#[derive(Debug, Clone, Default)]
pub struct ReplayReport {
    /// Every line, in order.
    pub entries: Vec<ReplayEntry>,
    /// Lines that replayed identically.
    pub identical: usize,
    /// Lines that ran but answered differently.
    pub changed: usize,
    /// Lines that failed.
    pub failed: usize,
    /// True when the last line was cut short (a crash while writing it): it was left out.
    pub cut_last_line: bool,
}

impl ReplayReport {
    /// True when every line replayed identically.
    pub fn all_identical(&self) -> bool {
        self.changed == 0 && self.failed == 0
    }
}

fn short(v: &Value) -> String {
    let mut s = v.to_string();
    if s.len() > 60 {
        let mut cut = 57;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str("...");
    }
    s
}

fn escape(k: &str) -> String {
    k.replace('~', "~0").replace('/', "~1")
}

fn json_diff(at: &str, a: &Value, b: &Value, out: &mut Vec<String>, max: usize) {
    if out.len() >= max || a == b {
        return;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let p = format!("{at}/{}", escape(k));
                match (x.get(k), y.get(k)) {
                    (Some(u), Some(v)) => json_diff(&p, u, v, out, max),
                    (Some(u), None) => out.push(format!("{p}: {} removed", short(u))),
                    (None, Some(v)) => out.push(format!("{p}: {} added", short(v))),
                    (None, None) => {}
                }
                if out.len() >= max {
                    return;
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (u, v)) in x.iter().zip(y).enumerate() {
                json_diff(&format!("{at}/{i}"), u, v, out, max);
            }
        }
        // Two long strings shortened alike would read the same: show where they part.
        (Value::String(x), Value::String(y)) if short(a) == short(b) => {
            let (mut xs, mut ys, mut i) = (x.char_indices(), y.char_indices(), 0);
            let (cx, cy) = loop {
                match (xs.next(), ys.next()) {
                    (Some((_, p)), Some((_, q))) if p == q => i += 1,
                    (p, q) => break (p.map_or(x.len(), |(b, _)| b), q.map_or(y.len(), |(b, _)| b)),
                }
            };
            let from = |t: &str, at: usize| Value::String(t[at..].to_owned());
            out.push(format!(
                "{}: strings differ from character {i}: {} -> {}",
                if at.is_empty() { "/" } else { at },
                short(&from(x, cx)),
                short(&from(y, cy))
            ));
        }
        _ => out.push(format!("{}: {} -> {}", if at.is_empty() { "/" } else { at }, short(a), short(b))),
    }
}

fn status_name(s: Status) -> &'static str {
    match s {
        Status::Ok => "ok",
        Status::Partial => "partial",
        Status::Error => "error",
    }
}

fn compare(old: &ToolResponse, new: &ToolResponse) -> ReplayVerdict {
    let err = |r: &ToolResponse| r.error.as_ref().map(|e| format!("{}: {}", e.code, e.message)).unwrap_or_default();
    if old.status != Status::Error && new.status == Status::Error {
        return ReplayVerdict::Failed { reason: err(new) };
    }
    if old.status != new.status {
        let mut diff = format!("status {} -> {}", status_name(old.status), status_name(new.status));
        if new.status == Status::Error {
            diff.push_str(&format!(" ({})", err(new)));
        }
        return ReplayVerdict::Changed { diff };
    }
    if old.status == Status::Error {
        let (a, b) = (old.error.as_ref().map(|e| e.code.as_str()), new.error.as_ref().map(|e| e.code.as_str()));
        if a != b {
            return ReplayVerdict::Changed {
                diff: format!("error code {} -> {}", a.unwrap_or("none"), b.unwrap_or("none")),
            };
        }
    }
    if old.outputs != new.outputs {
        let mut out = Vec::new();
        json_diff("", &old.outputs, &new.outputs, &mut out, 3);
        return ReplayVerdict::Changed { diff: format!("outputs differ: {}", out.join("; ")) };
    }
    ReplayVerdict::Identical
}

/// Re-runs every call of a transcript through `router` (the current catalog) as `caller`, in
/// order, through the lane it was recorded on, and compares status and outputs with the
/// recording. The recorded `confirmed` flag is passed on; confirmations the user gave
/// interactively are not, so `caller.approval` decides those (use `Approval::Allow` to replay
/// confirmed side-effecting calls, `Deny` to never run them). A call a rate limit refuses (and
/// that was not refused so when recorded) waits `retry_after_ms` and runs again.
pub async fn replay(path: &Path, router: &Router, caller: Caller) -> std::io::Result<ReplayReport> {
    let (lines, cut) = quiver_telemetry::read_transcript_lines(path)?;
    let mut report = ReplayReport { cut_last_line: cut, ..ReplayReport::default() };
    for (i, line) in lines.into_iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let rec: TranscriptRecord = match quiver_telemetry::TranscriptLine::parse(&line) {
            Ok(quiver_telemetry::TranscriptLine::Call(r)) => *r,
            // Surfaces and meta tool calls are context, not calls to re-run.
            Ok(quiver_telemetry::TranscriptLine::Event(_)) => continue,
            Err(e) => {
                report.failed += 1;
                report.entries.push(ReplayEntry {
                    line: i + 1,
                    request_id: String::new(),
                    called_name: String::new(),
                    lane: Lane::Typed,
                    verdict: ReplayVerdict::Failed { reason: format!("unreadable transcript line: {e}") },
                    outcome: None,
                });
                continue;
            }
        };
        let (name, arguments, removed_notice) = match replay_target(router, &caller, &rec) {
            Ok(t) => t,
            Err(reason) => {
                report.failed += 1;
                report.entries.push(ReplayEntry {
                    line: i + 1,
                    request_id: rec.request_id,
                    called_name: rec.called_name,
                    lane: rec.lane,
                    verdict: ReplayVerdict::Failed { reason },
                    outcome: None,
                });
                continue;
            }
        };
        let mut outcome = rerun(router, &caller, &rec, &name, &arguments).await;
        if removed_notice.is_some() {
            outcome.meta.notice = removed_notice.map(Box::new);
        }
        let verdict = compare(&rec.response, &outcome.response);
        match verdict {
            ReplayVerdict::Identical => report.identical += 1,
            ReplayVerdict::Changed { .. } => report.changed += 1,
            ReplayVerdict::Failed { .. } => report.failed += 1,
        }
        report.entries.push(ReplayEntry {
            line: i + 1,
            request_id: rec.request_id,
            called_name: rec.called_name,
            lane: rec.lane,
            verdict,
            outcome: Some(outcome),
        });
    }
    Ok(report)
}

/// Runs a recorded call again through the lane it was recorded on. Calls recorded over time and
/// replayed at once meet the tool's rate limits: a replay honours them (they guard paid or
/// fragile services) by waiting for the bucket, as the error says, rather than reporting a call
/// that works as failed.
async fn rerun(router: &Router, caller: &Caller, rec: &TranscriptRecord, name: &str, arguments: &Value) -> CallOutcome {
    let call = || {
        let mut call = match rec.lane {
            Lane::Typed => Call::new(name, arguments.clone(), caller.clone()),
            Lane::Generic => Call::generic(name, arguments.clone(), caller.clone()),
        }
        .confirmed(rec.confirmed);
        // The recorded request id again: a cut result names its handle (`res-<request id>`)
        // in its output, and a later recorded `quiver.read_result` reads it by that handle.
        if !rec.request_id.is_empty() {
            call.request_id = Some(rec.request_id.clone());
        }
        call
    };
    let mut outcome = router.call(call()).await;
    let recorded_limited = rec.response.error.as_ref().is_some_and(|e| e.code == Code::RateLimited.as_str());
    for _ in 0..MAX_RATE_LIMIT_WAITS {
        let wait = match &outcome.response.error {
            Some(e) if !recorded_limited && e.code == Code::RateLimited.as_str() => {
                e.details.get("retry_after_ms").and_then(Value::as_u64).unwrap_or(1000)
            }
            _ => break,
        };
        tokio::time::sleep(std::time::Duration::from_millis(wait.clamp(1, 60_000))).await;
        outcome = router.call(call()).await;
    }
    outcome
}

/// What to run for a recorded call, by the names' `replay_supported` promise: a name whose
/// manifest says `replay_supported: false` is not replayed (the reason names the replacement);
/// a removed name that keeps `replay_supported: true` (the default) replays through the tool
/// and action it named, with its removal notice. Live calls by removed names stay refused: this
/// applies to replays only. Names the caller may not see are left to the router (which answers
/// as for any unknown name).
fn replay_target(
    router: &Router,
    caller: &Caller,
    rec: &TranscriptRecord,
) -> Result<(String, Value, Option<quiver_catalog::Notice>), String> {
    let keep = || (rec.called_name.clone(), rec.arguments.clone(), None);
    let catalog = router.catalog_now();
    let Some(r) = catalog.resolve(&rec.called_name).filter(|r| caller.access.may_see(&r.tool.name, r.def)) else {
        return Ok(keep());
    };
    let supported = r.alias.map_or(r.def.spec.lifecycle.replay_supported, |a| a.replay_supported);
    if !supported {
        let instead = match r.action {
            Some(a) => format!("; call `{}` with action `{a}` instead", r.tool.name),
            None if !r.is_canonical() => format!("; call `{}` instead", r.tool.name),
            None => String::new(),
        };
        return Err(format!(
            "replay_unsupported: plugin `{}` marks `{}` replay_supported: false, so recorded calls by that name are not replayed{instead}",
            r.plugin.manifest.id, rec.called_name
        ));
    }
    if r.state.is_dispatchable() {
        return Ok(keep());
    }
    let mut arguments = rec.arguments.clone();
    if let (Some(a), Value::Object(m)) = (r.action, &mut arguments) {
        m.entry("action").or_insert_with(|| Value::String(a.to_owned()));
    }
    Ok((r.tool.name.clone(), arguments, r.notice(&rec.called_name)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use quiver_abi::ToolError;
    use serde_json::json;

    #[test]
    fn compares_status_outputs_and_error_codes() {
        let ok = |v| ToolResponse::ok(v);
        assert_eq!(compare(&ok(json!({"a": 1})), &ok(json!({"a": 1}))), ReplayVerdict::Identical);
        match compare(&ok(json!({"a": 1, "b": [1, 2]})), &ok(json!({"a": 2, "b": [1, 3], "c": true}))) {
            ReplayVerdict::Changed { diff } => {
                assert_eq!(diff, "outputs differ: /a: 1 -> 2; /b/1: 2 -> 3; /c: true added")
            }
            v => panic!("{v:?}"),
        }
        // Long strings that part after the shortened prefix say where.
        let long = "x".repeat(100);
        match compare(&ok(json!({"t": format!("{long}abc")})), &ok(json!({"t": format!("{long}abd")}))) {
            ReplayVerdict::Changed { diff } => {
                assert_eq!(diff, r#"outputs differ: /t: strings differ from character 102: "c" -> "d""#)
            }
            v => panic!("{v:?}"),
        }
        match compare(&ok(json!({"t": long.clone()})), &ok(json!({"t": format!("{long}é and more")}))) {
            ReplayVerdict::Changed { diff } => {
                assert_eq!(diff, r#"outputs differ: /t: strings differ from character 100: "" -> "é and more""#)
            }
            v => panic!("{v:?}"),
        }
        let e = |c: &str| ToolResponse::error(ToolError::new(c, "m"));
        assert!(
            matches!(compare(&ok(json!(1)), &e("unknown_tool")), ReplayVerdict::Failed { reason } if reason.starts_with("unknown_tool"))
        );
        assert_eq!(compare(&e("timeout"), &e("timeout")), ReplayVerdict::Identical);
        assert!(matches!(compare(&e("timeout"), &e("panic")), ReplayVerdict::Changed { .. }));
        assert!(
            matches!(compare(&e("timeout"), &ok(json!(1))), ReplayVerdict::Changed { diff } if diff == "status error -> ok")
        );
    }
}
