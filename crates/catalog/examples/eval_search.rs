//! Evaluates tool search on a labelled query set.
//!
//! ```text
//! cargo run --release -p quiver-catalog --example eval_search -- TOOLS.json QUERIES.jsonl \
//!     [--k 1,5,10] [--misses | --misses-all] [--json] [--ablation] [--set key=value]... \
//!     [--embedding MODEL_DIR]
//! ```
//!
//! TOOLS.json is a JSON array of MCP tools or OpenAI function definitions; QUERIES.jsonl has one
//! `{"query": "...", "expected": ["tool", ...]}` per line. Prints recall@k, MRR and latency
//! on all queries and on the tuning and check halves (`--json`: the report as JSON; `--misses`:
//! the tuning-half queries that missed at
//! the smallest k (the check half's queries are not for looking at while tuning; `--misses-all`
//! shows both halves); `--set`: a configuration override for tuning experiments (`k1=1.5`,
//! `weight.name=2`, `b.param_desc=0.3`, `name_coverage=0.3`, `required_prior=0.1`, ...); `--embedding`: a model2vec model folder (`model.safetensors`,
//! `tokenizer.json`) whose ranking is fused with the lexical one; `--ablation`: a Markdown table of every ablation
//! variant of `quiver_catalog::eval::ablations` on both halves and on the check-half queries for
//! tools the tuning half never asks for).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use quiver_catalog::eval::{Split, ablations, evaluate, load_queries, load_tools};
#[cfg(feature = "semantic")]
use quiver_catalog::search::embed::StaticEmbedding;
use quiver_catalog::search::{FIELD_COUNT, SearchConfig, SearchIndex};

const USAGE: &str = "usage: eval_search TOOLS.json QUERIES.jsonl [--k 1,5,10] [--misses | --misses-all] [--json] [--ablation] [--set key=value]... [--embedding MODEL_DIR]";

struct Args {
    tools: PathBuf,
    queries: PathBuf,
    ks: Vec<usize>,
    misses: bool,
    /// Show the check half's misses too.
    misses_all: bool,
    json: bool,
    ablation: bool,
    /// Configuration overrides (`--set key=value`), applied in order.
    config: SearchConfig,
    /// A model2vec model folder: rank by the fusion of lexical and semantic rankings.
    embedding: Option<PathBuf>,
}

/// Applies one `--set key=value` override: `k1`, `weight.FIELD`, `b.FIELD` (FIELD: name, alias,
/// title, description, domain, capability, param_name, param_desc, snippet, example, or `all`)
/// and the numeric knobs of [`SearchConfig`] by their field names.
fn apply_set(config: &mut SearchConfig, spec: &str) -> Result<(), String> {
    let (key, value) = spec.split_once('=').ok_or_else(|| format!("--set `{spec}`: expected key=value"))?;
    let v: f32 = value.parse().map_err(|_| format!("--set {key}: `{value}` is not a number"))?;
    const FIELDS: [&str; FIELD_COUNT] = [
        "name",
        "alias",
        "title",
        "description",
        "domain",
        "capability",
        "param_name",
        "param_desc",
        "snippet",
        "example",
    ];
    let fields = |name: &str| -> Result<Vec<usize>, String> {
        if name == "all" {
            return Ok((0..FIELD_COUNT).collect());
        }
        FIELDS.iter().position(|f| *f == name).map(|i| vec![i]).ok_or_else(|| format!("--set: unknown field `{name}`"))
    };
    if let Some(f) = key.strip_prefix("weight.") {
        fields(f)?.into_iter().for_each(|i| config.weights[i] = v);
        return Ok(());
    }
    if let Some(f) = key.strip_prefix("b.") {
        fields(f)?.into_iter().for_each(|i| config.b[i] = v);
        return Ok(());
    }
    let slot = match key {
        "k1" => &mut config.k1,
        "synonym_weight" => &mut config.synonym_weight,
        "related_weight" => &mut config.related_weight,
        "prefix_weight" => &mut config.prefix_weight,
        "name_coverage" => &mut config.name_coverage,
        "filler_weight" => &mut config.filler_weight,
        "typo_weight" => &mut config.typo_weight,
        "value_type_weight" => &mut config.value_type_weight,
        "translation_weight" => &mut config.translation_weight,
        "translated_expansion" => &mut config.translated_expansion,
        "loanword_weight" => &mut config.loanword_weight,
        "required_prior" => &mut config.required_prior,
        "semantic_weight" => &mut config.semantic_weight,
        "semantic_rrf_k" => &mut config.semantic_rrf_k,
        _ => return Err(format!("--set: unknown key `{key}`")),
    };
    *slot = v;
    Ok(())
}

fn parse_args() -> Result<Args, String> {
    let mut positional = Vec::new();
    let mut ks = vec![1, 5, 10];
    let (mut misses, mut misses_all, mut json, mut ablation) = (false, false, false, false);
    let mut config = SearchConfig::default();
    let mut embedding = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--misses" => misses = true,
            "--misses-all" => (misses, misses_all) = (true, true),
            "--json" => json = true,
            "--ablation" => ablation = true,
            "-h" | "--help" => return Err(USAGE.to_string()),
            "--embedding" => embedding = Some(PathBuf::from(args.next().ok_or("--embedding needs a model folder")?)),
            "--set" => apply_set(&mut config, &args.next().ok_or("--set needs key=value")?)?,
            "--k" => {
                let list = args.next().ok_or("--k needs a value, e.g. --k 1,5,10")?;
                ks = list
                    .split(',')
                    .map(|s| match s.trim().parse::<usize>() {
                        Ok(k) if k > 0 => Ok(k),
                        _ => Err(format!("--k: `{s}` is not a positive integer")),
                    })
                    .collect::<Result<_, _>>()?;
            }
            s if s.starts_with("--") => return Err(format!("unknown option {s}\n{USAGE}")),
            _ => positional.push(PathBuf::from(arg)),
        }
    }
    let [tools, queries]: [PathBuf; 2] = positional.try_into().map_err(|_| format!("expected two files\n{USAGE}"))?;
    Ok(Args { tools, queries, ks, misses, misses_all, json, ablation, config, embedding })
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let loaded = load_tools(&args.tools).and_then(|t| Ok((t, load_queries(&args.queries)?)));
    let (tools, queries) = match loaded {
        Ok(x) => x,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    if args.ablation {
        println!("| variant | tune R@1 | tune R@5 | check R@1 | check R@5 | check MRR | unseen R@1 | unseen R@5 |");
        println!("|---|---|---|---|---|---|---|---|");
        for (label, config) in ablations() {
            let index = SearchIndex::build_with(tools.clone(), config);
            let report = evaluate(&index, &queries, &[1, 5]);
            let half = |s: Split| report.splits.iter().find(|r| r.split == s).cloned();
            let (Some(t), Some(c)) = (half(Split::Tune), half(Split::Check)) else { continue };
            let r = |x: &quiver_catalog::eval::SplitReport, k| x.recall_at(k).unwrap_or(0.0);
            let u = &report.check_unseen_tools;
            println!(
                "| {label} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |",
                r(&t, 1),
                r(&t, 5),
                r(&c, 1),
                r(&c, 5),
                c.mrr,
                r(u, 1),
                r(u, 5)
            );
        }
        return ExitCode::SUCCESS;
    }
    // The model is read once per process (as `quiver` does at start-up), so it is timed apart
    // from the index build, which a host repeats for every catalog it builds.
    #[cfg_attr(not(feature = "semantic"), allow(unused_mut))]
    let mut load_ms: Option<f64> = None;
    #[cfg(feature = "semantic")]
    let model = match &args.embedding {
        Some(dir) => {
            let start = Instant::now();
            match StaticEmbedding::load(dir) {
                Ok(model) => {
                    load_ms = Some(start.elapsed().as_secs_f64() * 1e3);
                    Some(std::sync::Arc::new(model))
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
        None => None,
    };
    let start = Instant::now();
    #[cfg_attr(not(feature = "semantic"), allow(unused_mut))]
    let mut index = SearchIndex::build_with(tools, args.config);
    #[cfg(feature = "semantic")]
    if let Some(model) = model {
        index = index.with_embedding(model);
    }
    #[cfg(not(feature = "semantic"))]
    if args.embedding.is_some() {
        eprintln!(
            "error: --embedding needs the `semantic` feature: cargo run --release -p quiver-catalog --features semantic --example eval_search -- ..."
        );
        return ExitCode::FAILURE;
    }
    let build_ms = start.elapsed().as_secs_f64() * 1e3;
    let mut report = evaluate(&index, &queries, &args.ks);
    if !args.misses_all {
        report.misses.retain(|m| m.split == Split::Tune);
    }
    if args.json {
        if !args.misses {
            report.misses.clear();
        }
        match serde_json::to_string_pretty(&report) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        print!("{}", report.render(args.misses));
        println!("index build {build_ms:.1} ms");
        if let Some(load_ms) = load_ms {
            println!("model load {load_ms:.1} ms (once per process, not in the index build)");
        }
    }
    ExitCode::SUCCESS
}
