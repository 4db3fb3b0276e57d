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

/// A `200` answer: its `Content-Type` (when it has one) and body.
struct Answer {
    content_type: Option<String>,
    body: String,
}

/// `GET` over plain HTTP/1.0 (the server closes the connection after the body).
fn fetch(url: &str, token: Option<&str>) -> Result<Answer> {
    let (authority, path) = split_url(url)?;
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
    let mut lines = head.lines();
    let status = lines.next().unwrap_or("").split(' ').nth(1).unwrap_or("");
    let content_type = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-type"))
        .map(|(_, v)| v.trim().to_owned());
    match status {
        "200" => Ok(Answer { content_type, body: body.to_owned() }),
        "401" => anyhow::bail!("{url}: authentication required; pass --token TOKEN (or set QUIVER_TOKEN)"),
        "403" => anyhow::bail!("{url}: HTTP {status}: {}", body.trim()),
        _ => {
            let body = body.trim();
            let said = if body.is_empty() {
                String::new()
            } else {
                format!(": {}", body.chars().take(200).collect::<String>())
            };
            anyhow::bail!(
                "{url}: HTTP {status}{said}; point `quiver stats` at the server's metrics (http://{authority}/metrics), served by `quiver serve --http` or `--metrics`"
            )
        }
    }
}

/// The authority and path of an `http://` URL (`/metrics` when it has no path, or only `/`).
fn split_url(url: &str) -> Result<(&str, &str)> {
    let rest =
        url.strip_prefix("http://").context("only http:// URLs are supported (serve HTTP behind a TLS proxy)")?;
    Ok(match rest.find('/') {
        Some(i) if &rest[i..] != "/" => (&rest[..i], &rest[i..]),
        Some(i) => (&rest[..i], "/metrics"),
        None => (rest, "/metrics"),
    })
}

/// The series of a Prometheus text exposition, or the number (from 1) of its first line that is
/// neither a sample, a comment nor blank.
fn parse_metrics(text: &str) -> Result<Vec<Series>, usize> {
    let mut series = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        series.push(parse_sample(line).ok_or(n + 1)?);
    }
    Ok(series)
}

/// One sample line: `name{label="value",...} value [timestamp]`, label values with the
/// format's escapes (`\\`, `\"`, `\n`).
fn parse_sample(line: &str) -> Option<Series> {
    let name_end = line
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit())))
        .map_or(line.len(), |(i, _)| i);
    if name_end == 0 {
        return None;
    }
    let (name, mut rest) = line.split_at(name_end);
    let mut labels = BTreeMap::new();
    if let Some(inner) = rest.strip_prefix('{') {
        rest = inner;
        loop {
            rest = rest.trim_start();
            if let Some(after) = rest.strip_prefix('}') {
                rest = after;
                break;
            }
            let key_end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))?;
            if key_end == 0 {
                return None;
            }
            let key = &rest[..key_end];
            rest = rest[key_end..].trim_start().strip_prefix('=')?.trim_start().strip_prefix('"')?;
            let mut value = String::new();
            let mut chars = rest.char_indices();
            let close = loop {
                match chars.next()? {
                    (i, '"') => break i,
                    (_, '\\') => match chars.next()?.1 {
                        'n' => value.push('\n'),
                        c @ ('\\' | '"') => value.push(c),
                        _ => return None,
                    },
                    (_, c) => value.push(c),
                }
            };
            rest = rest[close + 1..].trim_start();
            labels.insert(key.to_owned(), value);
            match rest.strip_prefix(',') {
                Some(after) => rest = after,
                None if rest.starts_with('}') => {}
                None => return None,
            }
        }
    }
    if !rest.starts_with([' ', '\t']) {
        return None;
    }
    let mut fields = rest.split_ascii_whitespace();
    let value: f64 = fields.next()?.parse().ok()?;
    if let Some(timestamp) = fields.next() {
        timestamp.parse::<i64>().ok()?;
    }
    if fields.next().is_some() {
        return None;
    }
    Some((name.to_owned(), labels, value))
}

/// The series `url` answered with, or an error saying what came back instead of Prometheus text
/// (a status page, a dashboard, another service) and where to point instead.
fn read_metrics(url: &str, answer: &Answer) -> Result<Vec<Series>> {
    let ctype = answer.content_type.as_deref().unwrap_or("");
    let says_prometheus = ctype.starts_with("text/plain") || ctype.starts_with("application/openmetrics-text");
    let why = match parse_metrics(&answer.body) {
        Ok(series) if !answer.body.trim().is_empty() || says_prometheus => return Ok(series),
        Ok(_) => "an empty body".to_owned(),
        Err(line) => {
            let body = answer.body.trim();
            let cut = if body.chars().nth(80).is_some() { "..." } else { "" };
            let start: String = body
                .chars()
                .take(80)
                .map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() })
                .collect();
            format!("a body starting `{start}{cut}` (line {line} is not a metric sample)")
        }
    };
    let what = match &answer.content_type {
        Some(t) => format!("Content-Type `{t}`"),
        None => "no Content-Type".to_owned(),
    };
    let metrics = split_url(url).map(|(authority, _)| format!("http://{authority}/metrics")).unwrap_or_default();
    anyhow::bail!(
        "{url}: the answer is not Prometheus text metrics ({what}, {why}); point `quiver stats` at the server's /metrics ({metrics}), served by `quiver serve --http` or `--metrics`"
    )
}

/// The sum of `values`; 0 (not -0, the empty sum of `f64`) when there are none.
fn total<'a>(values: impl Iterator<Item = &'a f64>) -> f64 {
    values.fold(0.0, |sum, v| sum + v)
}

fn from_server(g: &GlobalArgs, url: &str, token: Option<&str>) -> Result<()> {
    let series = read_metrics(url, &fetch(url, token)?)?;
    let sum = |name: &str, pick: &dyn Fn(&BTreeMap<String, String>) -> bool| -> f64 {
        total(series.iter().filter(|(n, l, _)| n == name && pick(l)).map(|(_, _, v)| v))
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
    crate::commands::check_transcript_path(&a.transcript)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_read_with_escapes_and_timestamps_and_anything_else_is_refused() {
        let text = "# HELP quiver_x_total X.\n# TYPE quiver_x_total counter\n\
                    quiver_x_total{tool=\"a\\\"b,c\",lane=\"typed\",} 3\n\
                    quiver_up 1 1700000000000\n\
                    quiver_d_bucket{le=\"+Inf\"} +Inf\n\n";
        let series = parse_metrics(text).unwrap();
        assert_eq!(series.len(), 3, "{series:?}");
        assert_eq!(series[0].0, "quiver_x_total");
        assert_eq!(series[0].1.get("tool").map(String::as_str), Some("a\"b,c"));
        assert_eq!(series[0].1.get("lane").map(String::as_str), Some("typed"));
        assert_eq!((series[1].0.as_str(), series[1].2), ("quiver_up", 1.0));
        assert_eq!(series[2].2, f64::INFINITY);
        for (body, line) in [
            ("{\"status\": \"ok\"}", 1),
            ("{\n  \"calls\": 7\n}", 1),
            ("quiver_up 1\n  \"calls\": 7", 2),
            ("<!DOCTYPE html>", 1),
            ("OK", 1),
            ("hello world 5", 1),
            ("quiver_up{tool=\"a} 1", 1),
            ("quiver_up 1 2 3", 1),
        ] {
            assert_eq!(parse_metrics(body).map(|s| s.len()), Err(line), "{body}");
        }
    }

    #[test]
    fn an_empty_sum_is_zero_not_minus_zero() {
        let none: [f64; 0] = [];
        assert!(total(none.iter()).is_sign_positive());
        assert_eq!(total([1.5, 2.0].iter()), 3.5);
    }
}
