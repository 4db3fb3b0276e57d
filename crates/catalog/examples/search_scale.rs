//! Search and catalog build at scale, on catalogs synthesized deterministically from a tool list.
//!
//! ```text
//! cargo run --release -p quiver-catalog --example search_scale -- TOOLS.json QUERIES.jsonl \
//!     [--sizes 1437,10000] [--build 50000] [--no-match 50000] [--embedding MODEL_DIR]
//! ```
//!
//! A catalog of N tools is the tool list repeated: copy 0 is the list as it is, copy `c > 0`
//! renames every tool `vendorC.NAME` and keeps its description and schema (what a host that
//! aggregates many servers exposing the same tools sees). Prints:
//! - for each of `--sizes`: p50/p99 of the QUERIES over a search index of that many tools;
//! - `--build`: the time and peak memory of building a [`quiver_catalog::Catalog`] from an N-tool
//!   list (`catalog_from_tool_list`, the path `quiver eval`/`surface_bytes` use for external tool
//!   lists) and its search index (built on a catalog's first search); peak memory is the process's peak resident set (Linux `VmHWM`) minus its resident set
//!   before the build, so the input JSON is not counted;
//! - `--no-match`: p50 of a query whose words occur in no tool, over an N-tool index;
//! - `--embedding` (feature `semantic`): the `--sizes` indexes fuse a model2vec model's ranking
//!   with the lexical one, and their build time includes embedding every tool.
//!
//! Build time and memory come first, in a fresh process, so nothing else has raised the peak.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use quiver_catalog::catalog_from_tool_list;
use quiver_catalog::eval::load_queries;
use quiver_catalog::search::{Query, SearchDoc, SearchIndex};
use quiver_manifest::LifecycleState;
use serde_json::Value;

const USAGE: &str = "usage: search_scale TOOLS.json QUERIES.jsonl [--sizes 1437,10000] [--build 50000] [--no-match 50000] [--embedding MODEL_DIR]";

/// The tool list grown (or cut) to `n` tools; see the module docs.
fn synthesize(tools: &[Value], n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| {
            let (copy, t) = (i / tools.len(), &tools[i % tools.len()]);
            let mut t = t.clone();
            if copy > 0
                && let Some(Value::String(name)) = t.get_mut("name")
            {
                *name = format!("vendor{copy}.{name}");
            }
            t
        })
        .collect()
}

fn docs_of(tools: &[Value]) -> Vec<SearchDoc> {
    let json = serde_json::to_string(tools).expect("serializable");
    quiver_catalog::eval::parse_tools("synthesized", &json).expect("tool list")
}

/// `(VmRSS, VmHWM)` of this process in MiB (Linux); zeros elsewhere.
fn memory_mib() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .map_or(0.0, |kib| kib / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Median and 99th percentile of `times` (µs).
fn percentiles(mut times: Vec<f64>) -> (f64, f64) {
    times.sort_by(f64::total_cmp);
    let at = |p: f64| times[((times.len() as f64 - 1.0) * p).round() as usize];
    (at(0.5), at(0.99))
}

fn size_list(v: &str) -> Result<Vec<usize>, String> {
    v.split(',').map(|s| s.trim().parse::<usize>().map_err(|_| format!("`{s}` is not a tool count\n{USAGE}"))).collect()
}

fn run() -> Result<(), String> {
    let mut positional = Vec::new();
    let (mut sizes, mut build, mut no_match) = (vec![1437, 10_000], None, None);
    let mut embedding: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value\n{USAGE}"));
        match arg.as_str() {
            "--sizes" => sizes = size_list(&value()?)?,
            "--build" => build = Some(size_list(&value()?)?[0]),
            "--no-match" => no_match = Some(size_list(&value()?)?[0]),
            "--embedding" => embedding = Some(PathBuf::from(value()?)),
            s if s.starts_with("--") => return Err(format!("unknown option {s}\n{USAGE}")),
            _ => positional.push(PathBuf::from(arg)),
        }
    }
    let [tools_path, queries_path]: [PathBuf; 2] =
        positional.try_into().map_err(|_| format!("expected two files\n{USAGE}"))?;
    let text = std::fs::read_to_string(&tools_path).map_err(|e| format!("{}: {e}", tools_path.display()))?;
    let tools: Vec<Value> = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", tools_path.display()))?;
    if tools.is_empty() {
        return Err(format!("{}: no tools", tools_path.display()));
    }
    let queries = load_queries(&queries_path).map_err(|e| e.to_string())?;
    #[cfg(feature = "semantic")]
    let model = match &embedding {
        Some(dir) => Some(std::sync::Arc::new(
            quiver_catalog::search::embed::StaticEmbedding::load(dir).map_err(|e| e.to_string())?,
        )),
        None => None,
    };
    #[cfg(not(feature = "semantic"))]
    if embedding.is_some() {
        return Err("--embedding needs the `semantic` feature: cargo run --release -p quiver-catalog --features semantic --example search_scale -- ...".to_owned());
    }

    if let Some(n) = build {
        let list = synthesize(&tools, n);
        let (before, _) = memory_mib();
        let start = Instant::now();
        let catalog = catalog_from_tool_list("synthesized", list, LifecycleState::Deferred)?;
        let catalog_secs = start.elapsed().as_secs_f64();
        // The search index is built on the catalog's first search: counted here, as a host
        // that serves search pays it before its first answer.
        let (index, _) = catalog.search_index();
        let secs = start.elapsed().as_secs_f64();
        let (_, peak) = memory_mib();
        println!(
            "build {n} tools: {secs:.2} s ({catalog_secs:.2} s catalog, then its search index), peak memory +{:.0} MiB (process peak {peak:.0} MiB, {} tools, {} searchable)",
            peak - before,
            catalog.tools().len(),
            index.len()
        );
    }
    for &n in &sizes {
        let docs = docs_of(&synthesize(&tools, n));
        let start = Instant::now();
        #[cfg_attr(not(feature = "semantic"), allow(unused_mut))]
        let mut index = SearchIndex::build(docs);
        #[cfg(feature = "semantic")]
        if let Some(model) = &model {
            index = index.with_embedding(model.clone());
        }
        let build_ms = start.elapsed().as_secs_f64() * 1e3;
        let mut times = Vec::with_capacity(queries.len());
        for round in 0..2 {
            for q in &queries {
                let start = Instant::now();
                std::hint::black_box(index.search(&Query::text(q.query.as_str()).with_limit(10), &|_| true).ok());
                if round == 1 {
                    times.push(start.elapsed().as_secs_f64() * 1e6);
                }
            }
        }
        let (p50, p99) = percentiles(times);
        println!(
            "search {n} tools: p50 {p50:.1} µs, p99 {p99:.1} µs ({} queries, top 10; index built in {build_ms:.0} ms{})",
            queries.len(),
            if embedding.is_some() { ", with the embedding model" } else { "" }
        );
    }
    if let Some(n) = no_match {
        let index = SearchIndex::build(docs_of(&synthesize(&tools, n)));
        let query = Query::text("qzxv wkpj").with_limit(10);
        let mut times = Vec::with_capacity(10_000);
        for _ in 0..10_000 {
            let start = Instant::now();
            let hits = index.search(&query, &|_| true).map(|r| r.total).unwrap_or(0);
            times.push(start.elapsed().as_secs_f64() * 1e6);
            assert_eq!(hits, 0, "the no-match query matched");
        }
        let (p50, p99) = percentiles(times);
        println!("no-match query {n} tools: p50 {p50:.2} µs, p99 {p99:.2} µs");
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
