//! `quiver stats TRANSCRIPT`: call statistics read back from a transcript file.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use quiver_telemetry::stats_from_transcript;

use crate::GlobalArgs;
use crate::commands::list::print_table;

#[derive(Debug, Args)]
pub struct StatsArgs {
    /// A transcript file (`<session>.jsonl`).
    pub transcript: PathBuf,
}

pub fn run(g: &GlobalArgs, a: &StatsArgs) -> Result<()> {
    let stats = stats_from_transcript(&a.transcript)
        .with_context(|| format!("cannot read the transcript {}", a.transcript.display()))?;
    if g.json {
        println!("{}", serde_json::to_string_pretty(&stats)?);
        return Ok(());
    }
    let d = &stats.duration_ms;
    println!(
        "{} calls: {} ok, {} partial, {} error; {} retries; duration p50 {:.1} ms, p95 {:.1} ms, max {:.1} ms",
        stats.calls, stats.status.ok, stats.status.partial, stats.status.error, stats.retries, d.p50, d.p95, d.max
    );
    for (lane, l) in &stats.lanes {
        println!("lane {lane}: {} calls, success rate {:.1}%", l.calls, l.success_rate * 100.0);
    }
    let (sf, gn) = (&stats.surfaces, &stats.generic);
    println!(
        "surfaces: {} sent, last {} typed of {} tools; tool_search {} calls ({} failed), list_tools {}, run_tool {} ({} refused)",
        sf.n_surfaces,
        sf.last_typed,
        sf.last_total,
        gn.search_calls,
        gn.search_failures,
        gn.list_calls,
        gn.run_calls,
        gn.run_validation_failures
    );
    if stats.cut_last_line {
        println!("the last line was cut short (the writer stopped mid-line) and was left out");
    }
    if stats.unreadable_lines > 0 {
        println!("{} unreadable lines skipped", stats.unreadable_lines);
    }
    if !stats.tools.is_empty() {
        println!();
        let rows: Vec<Vec<String>> = stats
            .tools
            .iter()
            .map(|(name, t)| {
                vec![
                    name.clone(),
                    t.calls.to_string(),
                    t.status.ok.to_string(),
                    t.status.partial.to_string(),
                    t.status.error.to_string(),
                    t.timeouts.to_string(),
                    format!("{:.1}", t.duration_ms.p50),
                    format!("{:.1}", t.duration_ms.p95),
                ]
            })
            .collect();
        print_table(&["TOOL", "CALLS", "OK", "PARTIAL", "ERROR", "TIMEOUTS", "P50 MS", "P95 MS"], &rows);
    }
    if !stats.errors.is_empty() {
        println!();
        let rows: Vec<Vec<String>> = stats.errors.iter().map(|(code, n)| vec![code.clone(), n.to_string()]).collect();
        print_table(&["ERROR CODE", "COUNT"], &rows);
    }
    Ok(())
}
