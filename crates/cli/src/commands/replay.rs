//! `quiver replay TRANSCRIPT`: re-runs a recorded transcript against the plugins loaded now and
//! says, line by line, whether each call still answers the same.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use quiver_mcp::SessionProfile;
use quiver_router::{ReplayVerdict, Router, replay};
use serde_json::json;

use crate::commands::list::print_table;
use crate::settings::Settings;
use crate::{GlobalArgs, Reported};

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// A transcript file (`<session>.jsonl`, written when `transcripts.dir` is set).
    pub transcript: PathBuf,
    /// Profile whose scopes and gates apply [default: the configuration's default profile].
    #[arg(long, value_name = "NAME", env = "QUIVER_PROFILE")]
    pub profile: Option<String>,
    /// Run recorded calls that need confirmation (otherwise only those recorded as confirmed run).
    #[arg(long)]
    pub yes: bool,
}

pub fn run(g: &GlobalArgs, a: &ReplayArgs) -> Result<()> {
    crate::commands::check_transcript_path(&a.transcript)?;
    let settings = Settings::load(g)?;
    let (profile_name, profile) = settings.profile(a.profile.as_deref())?;
    let host = settings.start_host()?;
    // The profile decides, as in a session; `--yes` confirms every recorded call under `ask`
    // (recorded confirmations are passed on anyway); `deny` is final.
    let mut caller = SessionProfile::from_config(&profile_name, &profile).caller(
        format!("replay-{}", std::process::id()),
        "quiver-cli",
        None,
    );
    caller.approval = caller.approval.confirmed_by_operator(a.yes);
    // Replays are not recorded again.
    let router = Router::new(host, quiver_router::RouterSettings { transcript_dir: None, ..settings.router() });
    let rt =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start the async runtime")?;
    let report = rt
        .block_on(replay(&a.transcript, &router, caller))
        .with_context(|| format!("cannot read the transcript {}", a.transcript.display()))?;

    let verdict = |v: &ReplayVerdict| match v {
        ReplayVerdict::Identical => ("identical", String::new()),
        ReplayVerdict::Changed { diff } => ("changed", diff.clone()),
        ReplayVerdict::Failed { reason } => ("failed", reason.clone()),
    };
    if g.json {
        let entries: Vec<_> = report
            .entries
            .iter()
            .map(|e| {
                let (v, detail) = verdict(&e.verdict);
                json!({
                    "line": e.line, "request_id": e.request_id, "called_name": e.called_name, "lane": e.lane,
                    "verdict": v, "detail": detail,
                    "notice": e.outcome.as_ref().and_then(|o| o.meta.notice.as_ref()),
                })
            })
            .collect();
        let out = json!({
            "entries": entries, "identical": report.identical, "changed": report.changed, "failed": report.failed, "cut_last_line": report.cut_last_line,
        });
        println!("{out:#}");
    } else {
        let rows: Vec<Vec<String>> = report
            .entries
            .iter()
            .map(|e| {
                let (v, mut detail) = verdict(&e.verdict);
                if let Some(n) = e.outcome.as_ref().and_then(|o| o.meta.notice.as_ref()) {
                    detail = if detail.is_empty() { n.message() } else { format!("{detail}; {}", n.message()) };
                }
                vec![e.line.to_string(), e.called_name.clone(), v.to_owned(), detail]
            })
            .collect();
        print_table(&["LINE", "CALLED", "VERDICT", "DETAIL"], &rows);
        println!("{} identical, {} changed, {} failed", report.identical, report.changed, report.failed);
        if report.cut_last_line {
            println!("the last line was cut short (the writer stopped mid-line) and was left out");
        }
    }
    if report.all_identical() { Ok(()) } else { Err(Reported.into()) }
}
