//! `quiver stats TRANSCRIPT | URL`: call statistics read back from a transcript file, or from a
//! running server's Prometheus metrics (`http://HOST:PORT/metrics`, with `--token` when the
//! server authenticates).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use quiver_telemetry::stats_from_transcript;

use crate::GlobalArgs;
use crate::commands::list::print_table;

#[derive(Debug, Args)]
pub struct StatsArgs {
    /// A transcript file (`<session>.jsonl`), or a running server's metrics URL
    /// (`http://127.0.0.1:8765/metrics`; `/metrics` is added when the URL has no path).
    pub transcript: PathBuf,
    /// Bearer token for a server with authentication (server.auth).
    #[arg(long, env = "QUIVER_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

/// One series of the Prometheus text format: name, labels, value.
type Series = (String, BTreeMap<String, String>, f64);

/// `GET` over plain HTTP/1.0 (the server closes the connection after the body).
fn fetch(url: &str, token: Option<&str>) -> Result<String> {
    let rest =
        url.strip_prefix("http://").context("only http:// URLs are supported (serve HTTP behind a TLS proxy)")?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/metrics"),
    };
    let mut stream =
        std::net::TcpStream::connect(authority).with_context(|| format!("cannot connect to {authority}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut req = format!("GET {path} HTTP/1.0\r\nHost: {authority}\r\n");
    if let Some(t) = token {
        req.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    req.push_str("\r\n");
    stream.write_all(req.as_bytes())?;
    let mut raw = Vec::new();
    stream.take(64 << 20).read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").context("the server's answer has no HTTP header")?;
    let status = head.split(' ').nth(1).unwrap_or("");
    match status {
        "200" => Ok(body.to_owned()),
        "401" => anyhow::bail!("{url}: authentication required; pass --token TOKEN (or set QUIVER_TOKEN)"),
        _ => anyhow::bail!("{url}: HTTP {status}: {}", body.trim()),
    }
}

/// Parses the Prometheus text exposition (the subset Quiver writes: no escapes in label values).
fn parse_metrics(text: &str) -> Vec<Series> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let value: f64 = value.parse().ok()?;
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => {
                    let inner = rest.strip_suffix('}')?;
                    let labels = inner
                        .split("\",")
                        .filter_map(|kv| {
                            let (k, v) = kv.split_once("=\"")?;
                            Some((k.to_owned(), v.trim_end_matches('"').to_owned()))
                        })
                        .collect();
                    (n.to_owned(), labels)
                }
                None => (series.to_owned(), BTreeMap::new()),
            };
            Some((name, labels, value))
        })
        .collect()
}

fn from_server(g: &GlobalArgs, url: &str, token: Option<&str>) -> Result<()> {
    let series = parse_metrics(&fetch(url, token)?);
    let sum = |name: &str, pick: &dyn Fn(&BTreeMap<String, String>) -> bool| -> f64 {
        series.iter().filter(|(n, l, _)| n == name && pick(l)).map(|(_, _, v)| v).sum()
    };
    let label = |l: &BTreeMap<String, String>, k: &str| l.get(k).cloned().unwrap_or_default();
    let mut tools: BTreeMap<String, [f64; 4]> = BTreeMap::new();
    for (n, l, v) in &series {
        let t = tools.entry(label(l, "tool"));
        match n.as_str() {
            "quiver_tool_calls_total" => {
                let e = t.or_default();
                e[0] += v;
                if l.get("status").is_some_and(|s| s == "error") {
                    e[1] += v;
                }
            }
            "quiver_tool_call_duration_seconds_sum" => t.or_default()[2] += v,
            "quiver_tool_call_duration_seconds_count" => t.or_default()[3] += v,
            _ => {}
        }
    }
    let lanes: BTreeMap<String, (f64, f64)> = ["typed", "alias", "generic"]
        .iter()
        .map(|lane| {
            let calls = sum("quiver_calls_total", &|l| l.get("lane").is_some_and(|x| x == lane));
            let errors = sum("quiver_calls_total", &|l| {
                l.get("lane").is_some_and(|x| x == lane) && l.get("status").is_some_and(|s| s == "error")
            });
            ((*lane).to_owned(), (calls, errors))
        })
        .collect();
    let codes: BTreeMap<String, f64> = series
        .iter()
        .filter(|(n, _, v)| n == "quiver_call_errors_total" && *v > 0.0)
        .map(|(_, l, v)| (label(l, "code"), *v))
        .collect();
    let one = |name: &str| sum(name, &|_| true);
    if g.json {
        let tools: BTreeMap<&String, serde_json::Value> = tools
            .iter()
            .map(|(k, v)| {
                let mean_ms = if v[3] > 0.0 { v[2] / v[3] * 1000.0 } else { 0.0 };
                (k, serde_json::json!({"calls": v[0], "errors": v[1], "mean_ms": mean_ms}))
            })
            .collect();
        let out = serde_json::json!({
            "source": url,
            "lanes": lanes.iter().map(|(k, (c, e))| (k.clone(), serde_json::json!({"calls": c, "errors": e}))).collect::<BTreeMap<_, _>>(),
            "errors": codes,
            "tools": tools,
            "sessions_active": one("quiver_sessions_active"),
            "plugins_loaded": one("quiver_plugins_loaded"),
            "tools_loaded": one("quiver_tools_loaded"),
            "bundle_rejections": one("quiver_bundle_rejections_total"),
            "rate_limited": one("quiver_rate_limited_total"),
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!(
        "{url}: {} plugins, {} tools, {} sessions open; {} bundle rejections; {} calls refused by rate limits",
        one("quiver_plugins_loaded"),
        one("quiver_tools_loaded"),
        one("quiver_sessions_active"),
        one("quiver_bundle_rejections_total"),
        one("quiver_rate_limited_total"),
    );
    for (lane, (calls, errors)) in &lanes {
        println!("lane {lane}: {calls} calls, {errors} errors");
    }
    let rows: Vec<Vec<String>> = tools
        .iter()
        .filter(|(name, v)| !name.is_empty() && v[0] > 0.0)
        .map(|(name, v)| {
            let mean = if v[3] > 0.0 { v[2] / v[3] * 1000.0 } else { 0.0 };
            vec![name.clone(), v[0].to_string(), v[1].to_string(), format!("{mean:.2}")]
        })
        .collect();
    if !rows.is_empty() {
        println!();
        print_table(&["TOOL", "CALLS", "ERRORS", "MEAN MS"], &rows);
    }
    if !codes.is_empty() {
        println!();
        let rows: Vec<Vec<String>> = codes.iter().map(|(c, n)| vec![c.clone(), n.to_string()]).collect();
        print_table(&["ERROR CODE", "COUNT"], &rows);
    }
    Ok(())
}

pub fn run(g: &GlobalArgs, a: &StatsArgs) -> Result<()> {
    if let Some(url) = a.transcript.to_str().filter(|s| s.starts_with("http://") || s.starts_with("https://")) {
        return from_server(g, url, a.token.as_deref());
    }
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
