//! Serializable statistics: from live counters ([`crate::Counters::snapshot`]) or from a
//! transcript file ([`stats_from_transcript`]).

use std::collections::BTreeMap;
use std::path::Path;

use quiver_abi::Status;
use serde::{Deserialize, Serialize};

use crate::BreakerState;

/// Calls per outcome class.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusCounts {
    /// `ok` responses.
    pub ok: u64,
    /// `partial` responses (e.g. truncated results).
    pub partial: u64,
    /// `error` responses.
    pub error: u64,
}

impl StatusCounts {
    fn add(&mut self, status: Status) {
        match status {
            Status::Ok => self.ok += 1,
            Status::Partial => self.partial += 1,
            Status::Error => self.error += 1,
        }
    }
}

/// Durations in milliseconds (live counters: bucket midpoints, within about 12%; transcripts: exact).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct DurationStats {
    /// Median.
    pub p50: f64,
    /// 95th percentile.
    pub p95: f64,
    /// Largest.
    pub max: f64,
}

impl DurationStats {
    /// Nearest-rank percentiles of exact values (milliseconds).
    pub fn from_values(mut ms: Vec<f64>) -> DurationStats {
        if ms.is_empty() {
            return DurationStats::default();
        }
        ms.sort_by(f64::total_cmp);
        let at = |q: f64| {
            let rank = ((q * ms.len() as f64).ceil() as usize).clamp(1, ms.len());
            ms[rank - 1]
        };
        DurationStats { p50: at(0.50), p95: at(0.95), max: ms[ms.len() - 1] }
    }
}

/// One lane's figures.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LaneStats {
    /// Calls.
    pub calls: u64,
    /// By outcome.
    pub status: StatusCounts,
    /// (ok + partial) / calls; 0 when there were no calls.
    pub success_rate: f64,
    /// Durations.
    pub duration_ms: DurationStats,
}

impl LaneStats {
    pub(crate) fn new(calls: u64, status: StatusCounts, duration_ms: DurationStats) -> LaneStats {
        let success_rate = if calls == 0 { 0.0 } else { (status.ok + status.partial) as f64 / calls as f64 };
        LaneStats { calls, status, success_rate, duration_ms }
    }
}

/// One tool's figures (by canonical name; calls that did not resolve count under the called name).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolStats {
    /// Calls.
    pub calls: u64,
    /// By outcome.
    pub status: StatusCounts,
    /// Retries made.
    pub retries: u64,
    /// Calls that hit their deadline.
    pub timeouts: u64,
    /// Timed-out calls still running (live counters only).
    pub overruns: u64,
    /// Breaker state (live counters only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breaker: Option<BreakerState>,
    /// Times the breaker opened (live counters only).
    pub breaker_opens: u64,
    /// Durations.
    pub duration_ms: DurationStats,
}

/// Use of the generic lane.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GenericStats {
    /// `list_tools` calls.
    pub list_calls: u64,
    /// `run_tool` calls.
    pub run_calls: u64,
    /// `run_tool` calls refused for invalid arguments.
    pub run_validation_failures: u64,
    /// `tool_search` calls.
    #[serde(default)]
    pub search_calls: u64,
    /// `tool_search` calls that failed (invalid arguments, bad regex).
    #[serde(default)]
    pub search_failures: u64,
}

/// Schema counts of the surfaces sent to clients.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SurfaceCounts {
    /// Surfaces built.
    pub n_surfaces: u64,
    /// Typed tool schemas sent, summed over surfaces.
    pub typed_schemas: u64,
    /// All tool schemas sent (typed plus meta), summed over surfaces.
    pub total_schemas: u64,
    /// Typed schemas of the last surface.
    pub last_typed: u64,
    /// All schemas of the last surface.
    pub last_total: u64,
}

/// A summary of calls: what `quiver stats` prints.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// Calls.
    pub calls: u64,
    /// By outcome.
    pub status: StatusCounts,
    /// Per lane (`typed`, `generic`).
    pub lanes: BTreeMap<String, LaneStats>,
    /// Per tool.
    pub tools: BTreeMap<String, ToolStats>,
    /// Error responses per error code.
    pub errors: BTreeMap<String, u64>,
    /// Durations of all calls.
    pub duration_ms: DurationStats,
    /// Retries made.
    pub retries: u64,
    /// Generic lane use.
    pub generic: GenericStats,
    /// Surface schema counts (live counters only).
    pub surfaces: SurfaceCounts,
    /// Transcript lines that could not be read (transcripts only).
    pub unreadable_lines: u64,
    /// True when the last line was cut short (a crash while writing it) and left out.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cut_last_line: bool,
}

/// Summarizes a transcript file (one [`TranscriptRecord`] per line). Unreadable lines are
/// counted, not fatal; an unreadable file is an error.
pub fn stats_from_transcript(path: &Path) -> std::io::Result<Stats> {
    let (lines, cut) = crate::transcript::read_transcript_lines(path)?;
    let mut stats = Stats { cut_last_line: cut, ..Stats::default() };
    let mut all = Vec::new();
    let mut per_lane: BTreeMap<String, (StatusCounts, Vec<f64>)> = BTreeMap::new();
    let mut per_tool: BTreeMap<String, (ToolStats, Vec<f64>)> = BTreeMap::new();
    for line in lines {
        if line.trim().is_empty() {
            continue;
        }
        let rec = match crate::TranscriptLine::parse(&line) {
            Ok(crate::TranscriptLine::Call(r)) => r,
            Ok(crate::TranscriptLine::Event(e)) => {
                match (e.event.as_str(), e.tool.as_deref()) {
                    ("surface", _) => {
                        let s = &mut stats.surfaces;
                        s.n_surfaces += 1;
                        s.last_typed = e.typed.unwrap_or(0);
                        s.last_total = e.total.unwrap_or(0);
                        s.typed_schemas += s.last_typed;
                        s.total_schemas += s.last_total;
                    }
                    ("meta_call", Some("tool_search")) => {
                        stats.generic.search_calls += 1;
                        stats.generic.search_failures += u64::from(e.ok == Some(false));
                    }
                    ("meta_call", Some("list_tools")) => stats.generic.list_calls += 1,
                    _ => {}
                }
                continue;
            }
            Err(_) => {
                stats.unreadable_lines += 1;
                continue;
            }
        };
        let status = rec.response.status;
        let ms = rec.duration_us as f64 / 1000.0;
        stats.calls += 1;
        stats.status.add(status);
        stats.retries += u64::from(rec.retries);
        all.push(ms);
        if let Some(e) = &rec.response.error {
            *stats.errors.entry(e.code.clone()).or_default() += 1;
        }
        let lane = per_lane.entry(rec.lane.as_str().to_owned()).or_default();
        lane.0.add(status);
        lane.1.push(ms);
        if rec.lane == crate::Lane::Generic {
            stats.generic.run_calls += 1;
            if rec.response.error.as_ref().is_some_and(|e| e.code == quiver_abi::ErrorCode::INVALID_ARGUMENTS) {
                stats.generic.run_validation_failures += 1;
            }
        }
        let name = rec.tool.clone().unwrap_or_else(|| rec.called_name.clone());
        let tool = per_tool.entry(name).or_default();
        tool.0.calls += 1;
        tool.0.status.add(status);
        tool.0.retries += u64::from(rec.retries);
        if rec.response.error.as_ref().is_some_and(|e| e.code == quiver_abi::ErrorCode::TIMEOUT) {
            tool.0.timeouts += 1;
        }
        tool.1.push(ms);
    }
    stats.duration_ms = DurationStats::from_values(all);
    for (k, (s, d)) in per_lane {
        let calls = s.ok + s.partial + s.error;
        stats.lanes.insert(k, LaneStats::new(calls, s, DurationStats::from_values(d)));
    }
    for (k, (mut t, d)) in per_tool {
        t.duration_ms = DurationStats::from_values(d);
        stats.tools.insert(k, t);
    }
    Ok(stats)
}
