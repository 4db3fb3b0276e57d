//! `quiver eval search`: measures search quality (recall@k, MRR, latency) on labelled queries,
//! either for any tool list (`--tools`) or for the live catalog against its manifests' examples,
//! ranked as the host ranks: with the `search:` settings of its configuration file (an
//! embedding model and its fusion weight), when there is one.

use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::{Args, Subcommand};
use quiver_catalog::eval::{EvalQuery, evaluate, load_queries, load_tools};

use crate::GlobalArgs;
use crate::settings::Settings;

#[derive(Debug, Args)]
pub struct EvalArgs {
    #[command(subcommand)]
    pub what: EvalWhat,
}

#[derive(Debug, Subcommand)]
pub enum EvalWhat {
    /// Tool search: recall@k, MRR and latency.
    Search(EvalSearchArgs),
}

#[derive(Debug, Args)]
pub struct EvalSearchArgs {
    /// A JSON array of MCP Tool objects or OpenAI-style function definitions [default: the live
    /// catalog of the plugins folder].
    #[arg(long, value_name = "TOOLS.json")]
    pub tools: Option<PathBuf>,
    /// Labelled queries, one JSON object per line: {"query": "...", "expected": ["tool", ...]}
    /// [default with the live catalog: every manifest example must find its tool].
    #[arg(long, value_name = "QUERIES.jsonl")]
    pub queries: Option<PathBuf>,
    /// Cut-offs for recall@k, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,5,10")]
    pub k: Vec<usize>,
    /// List the queries whose expected tools were not in the top k, at the smallest k given
    /// (the strictest cut-off), with what was returned instead.
    #[arg(long)]
    pub misses: bool,
    /// Fail (exit 1) when recall at the largest k is below this.
    #[arg(long, value_name = "RECALL")]
    pub min_recall: Option<f64>,
}

pub fn run(g: &GlobalArgs, a: &EvalArgs) -> Result<()> {
    let EvalWhat::Search(a) = &a.what;
    if a.k.is_empty() || a.k.contains(&0) {
        return Err(crate::UsageError("--k takes positive cut-offs such as 1,5,10".to_owned()).into());
    }
    let (index, build_time, queries) = match &a.tools {
        Some(path) => {
            let Some(qpath) = &a.queries else {
                return Err(crate::UsageError(
                    "--tools needs --queries (labelled queries for that tool list)".to_owned(),
                )
                .into());
            };
            let docs = load_tools(path)?;
            let search = crate::settings::search_setup_only(g)?;
            let started = std::time::Instant::now();
            let index = search.index(docs);
            (index, started.elapsed(), load_queries(qpath)?)
        }
        None => {
            let settings = Settings::load(g)?;
            let host = settings.start_host()?;
            let catalog = host.catalog();
            let docs = catalog.search_index().0.docs().to_vec();
            let queries = match &a.queries {
                Some(q) => load_queries(q)?,
                None => EvalQuery::from_examples(&docs),
            };
            // The examples are the questions: index without them, so a tool must be found by what
            // it says about itself, not by its own examples.
            let docs = docs.into_iter().map(|mut d| {
                d.examples.clear();
                d
            });
            let docs: Vec<_> = docs.collect();
            let started = std::time::Instant::now();
            let index = settings.search.index(docs);
            (index, started.elapsed(), queries)
        }
    };
    if queries.is_empty() {
        bail!("no queries to evaluate: give --queries, or add `examples` to the tools' manifests");
    }
    let report = evaluate(&index, &queries, &a.k);
    let build_ms = build_time.as_secs_f64() * 1000.0;
    if g.json {
        let mut v = serde_json::to_value(&report)?;
        if let serde_json::Value::Object(m) = &mut v {
            m.insert("index_build_ms".into(), serde_json::json!(build_ms));
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("index built in {build_ms:.2} ms ({} tools)", report.tools);
        print!("{}", report.render(a.misses));
    }
    if let Some(min) = a.min_recall {
        let k = a.k.iter().copied().max().unwrap_or(1);
        let got = report.recall_at(k).unwrap_or(0.0);
        if got < min {
            eprintln!("recall@{k} {got:.3} is below --min-recall {min}");
            return Err(crate::Reported.into());
        }
    }
    Ok(())
}
