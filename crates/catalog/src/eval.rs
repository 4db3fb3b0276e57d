//! Offline evaluation of tool search: load a tool catalog and labelled queries, run every query
//! through a [`SearchIndex`] and report recall@k, MRR and latency.
//!
//! Inputs:
//! - a tools file: a JSON array of MCP `Tool` objects (`name`, `title?`, `description`,
//!   `inputSchema`) or OpenAI-style function definitions (`{"type": "function", "function":
//!   {name, description, parameters}}` or bare `{name, description, parameters}`);
//! - a queries file, JSON Lines: `{"query": "...", "expected": ["tool", ...]}` per line (other
//!   fields such as `id` are allowed).
//!
//! Metrics: recall@k = |expected ∩ top-k| / |expected|, averaged over queries; MRR of the first
//! expected hit within the top [`MRR_DEPTH`]; latency per query (p50, p99) in microseconds,
//! measured around each search after one warm-up pass.
//!
//! Tuning protocol ([`split_of`]): queries are split deterministically into a *tuning* half and a
//! *check* half, stratified by category (the id up to its trailing number: `multiple`,
//! `live_multiple`) and ordered within a category by a stable hash of the id. Ranking changes are
//! tuned on the tuning half only; the check half says whether they carry over. Every report
//! gives both halves.

use std::collections::HashSet;
use std::fmt;
use std::path::Path;
use std::time::Instant;

use serde::Serialize;
use serde_json::Value;

use crate::search::{Field, Query, SearchConfig, SearchDoc, SearchIndex};

/// Depth of the ranking MRR looks at.
pub const MRR_DEPTH: usize = 50;

/// Which half of a query set a query belongs to; see [`split_of`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Split {
    /// Queries that ranking changes may be tuned on.
    Tune,
    /// Queries held out to check that a change carries over.
    Check,
}

impl Split {
    /// `tune` or `check`.
    pub fn as_str(self) -> &'static str {
        match self {
            Split::Tune => "tune",
            Split::Check => "check",
        }
    }
}

/// The category of a query id: the id without its trailing `_NUMBER` part
/// (`live_multiple_2-1-0` → `live_multiple`, `multiple_41` → `multiple`); ids without one are
/// their own category (`""` for none).
pub fn category(id: &str) -> &str {
    match id.rsplit_once('_') {
        Some((head, tail)) if tail.starts_with(|c: char| c.is_ascii_digit()) => head,
        _ => "",
    }
}

/// A stable hash (unlike `std`'s, it never changes between Rust releases): 64-bit FNV-1a, then
/// the MurmurHash3 finaliser so that the last bytes of similar ids (`multiple_1`, `multiple_2`)
/// reach the high bits too.
pub fn stable_hash(text: &str) -> u64 {
    let mut h = text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// The split of each query, in input order. Within each category, queries are ordered by
/// ([`stable_hash`] of the id, id) and the first half (rounded up) is [`Split::Tune`]. Queries
/// without id are keyed by their text.
pub fn split_of(queries: &[EvalQuery]) -> Vec<Split> {
    let key = |q: &EvalQuery| q.id.clone().unwrap_or_else(|| q.query.clone());
    let mut by_cat: std::collections::BTreeMap<String, Vec<(u64, String, usize)>> = Default::default();
    for (i, q) in queries.iter().enumerate() {
        let k = key(q);
        by_cat.entry(category(&k).to_owned()).or_default().push((stable_hash(&k), k, i));
    }
    let mut out = vec![Split::Check; queries.len()];
    for list in by_cat.values_mut() {
        list.sort();
        for (_, _, i) in &list[..list.len().div_ceil(2)] {
            out[*i] = Split::Tune;
        }
    }
    out
}

/// Where in an input file an error is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// The file as a whole (unreadable, not JSON, not an array).
    File,
    /// An element of the tools array, and the field at fault (empty for the element itself).
    Element {
        /// Array index, from 0.
        index: usize,
        /// Field path within the element (`function.name`); empty for the element itself.
        field: String,
    },
    /// A line of a JSON Lines file, from 1, and the field at fault (empty for the whole line).
    Line {
        /// Line number, from 1.
        line: usize,
        /// Field at fault; empty for the whole line.
        field: String,
    },
}

/// A bad input file: which file, where in it, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvalError {
    /// The file name (or the label given for in-memory input).
    pub source: String,
    /// Where in the file.
    pub location: Location,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for EvalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.source)?;
        match &self.location {
            Location::File => {}
            Location::Element { index, field } if field.is_empty() => write!(f, ": [{index}]")?,
            Location::Element { index, field } => write!(f, ": [{index}].{field}")?,
            Location::Line { line, field } if field.is_empty() => write!(f, ":{line}")?,
            Location::Line { line, field } => write!(f, ":{line}: field `{field}`")?,
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for EvalError {}

/// One labelled query.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EvalQuery {
    /// Optional identifier from the input.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The user request.
    pub query: String,
    /// Names of the tools that answer it.
    pub expected: Vec<String>,
}

impl EvalQuery {
    /// A query without id.
    pub fn new(query: impl Into<String>, expected: Vec<String>) -> Self {
        EvalQuery { id: None, query: query.into(), expected }
    }

    /// One query per manifest example: each example request of a document must find that
    /// document.
    pub fn from_examples(docs: &[SearchDoc]) -> Vec<EvalQuery> {
        docs.iter().flat_map(|d| d.examples.iter().map(|e| EvalQuery::new(e.clone(), vec![d.name.clone()]))).collect()
    }
}

fn read(path: &Path) -> Result<String, EvalError> {
    std::fs::read_to_string(path).map_err(|e| EvalError {
        source: path.display().to_string(),
        location: Location::File,
        message: e.to_string(),
    })
}

/// Reads a tools file; see [`parse_tools`].
pub fn load_tools(path: &Path) -> Result<Vec<SearchDoc>, EvalError> {
    parse_tools(&path.display().to_string(), &read(path)?)
}

/// Reads a queries file; see [`parse_queries`].
pub fn load_queries(path: &Path) -> Result<Vec<EvalQuery>, EvalError> {
    parse_queries(&path.display().to_string(), &read(path)?)
}

/// Parses a JSON array of MCP tools or OpenAI function definitions into search documents.
/// `source` names the input in errors.
pub fn parse_tools(source: &str, json: &str) -> Result<Vec<SearchDoc>, EvalError> {
    let err = |location: Location, message: String| EvalError { source: source.to_string(), location, message };
    let value: Value = serde_json::from_str(json).map_err(|e| err(Location::File, format!("invalid JSON: {e}")))?;
    let Value::Array(items) = value else {
        return Err(err(Location::File, "expected a JSON array of tool definitions".into()));
    };
    let mut docs = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let at = |field: &str| Location::Element { index, field: field.to_string() };
        if !item.is_object() {
            return Err(err(at(""), "expected a tool object".into()));
        }
        // OpenAI wraps the definition: {"type": "function", "function": {...}}.
        let (tool, prefix) = match item.get("function") {
            Some(inner @ Value::Object(_)) => (inner, "function."),
            Some(_) => return Err(err(at("function"), "expected an object".into())),
            None => (item, ""),
        };
        let string = |key: &str, required: bool| -> Result<String, EvalError> {
            match tool.get(key) {
                Some(Value::String(s)) => Ok(s.clone()),
                None | Some(Value::Null) if !required => Ok(String::new()),
                None => Err(err(at(&format!("{prefix}{key}")), "missing".into())),
                Some(_) => Err(err(at(&format!("{prefix}{key}")), "expected a string".into())),
            }
        };
        let name = string("name", true)?;
        if name.trim().is_empty() {
            return Err(err(at(&format!("{prefix}name")), "empty tool name".into()));
        }
        let description = string("description", false)?;
        let title = string("title", false)?;
        let mut schema = None;
        for key in ["inputSchema", "input_schema", "parameters"] {
            match tool.get(key) {
                None | Some(Value::Null) => {}
                Some(v @ Value::Object(_)) => {
                    schema = Some(v);
                    break;
                }
                Some(_) => {
                    return Err(err(at(&format!("{prefix}{key}")), "expected a JSON Schema object".into()));
                }
            }
        }
        let mut doc = match schema {
            Some(s) => SearchDoc::from_input_schema(name, description, s),
            None => SearchDoc::new(name, description),
        };
        doc.title = title;
        docs.push(doc);
    }
    Ok(docs)
}

/// Parses JSON Lines of `{"query": "...", "expected": ["tool", ...]}`; blank lines and lines
/// starting with `#` (a header saying how the queries were written) are skipped.
/// `source` names the input in errors.
pub fn parse_queries(source: &str, jsonl: &str) -> Result<Vec<EvalQuery>, EvalError> {
    let mut out = Vec::new();
    for (i, line) in jsonl.lines().enumerate() {
        let line_no = i + 1;
        let err = |field: &str, message: String| EvalError {
            source: source.to_string(),
            location: Location::Line { line: line_no, field: field.to_string() },
            message,
        };
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let value: Value = serde_json::from_str(line).map_err(|e| err("", format!("invalid JSON: {e}")))?;
        let Value::Object(obj) = value else {
            return Err(err("", "expected a JSON object".into()));
        };
        let query = match obj.get("query") {
            Some(Value::String(s)) => s.clone(),
            Some(_) => return Err(err("query", "expected a string".into())),
            None => return Err(err("query", "missing".into())),
        };
        let expected = match obj.get("expected") {
            Some(Value::Array(list)) => list
                .iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s.clone()),
                    _ => Err(err("expected", "expected an array of tool names".into())),
                })
                .collect::<Result<Vec<_>, _>>()?,
            Some(Value::String(s)) => vec![s.clone()],
            Some(_) => return Err(err("expected", "expected an array of tool names".into())),
            None => return Err(err("expected", "missing".into())),
        };
        if expected.is_empty() {
            return Err(err("expected", "no expected tool".into()));
        }
        let id = match obj.get("id") {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Number(n)) => Some(n.to_string()),
            _ => None,
        };
        out.push(EvalQuery { id, query, expected });
    }
    Ok(out)
}

/// Recall at one cut-off.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecallAt {
    /// The cut-off.
    pub k: usize,
    /// Mean recall@k over the queries.
    pub recall: f64,
}

/// Latency of one search, over all queries.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Latency {
    /// Median, in microseconds.
    pub p50_us: f64,
    /// 99th percentile, in microseconds.
    pub p99_us: f64,
    /// Mean, in microseconds.
    pub mean_us: f64,
}

/// A query whose expected tools were not all in the top `k` for the smallest `k` evaluated.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Miss {
    /// Identifier of the query, if it had one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The half of the query set the query belongs to ([`split_of`]).
    pub split: Split,
    /// The request.
    pub query: String,
    /// The expected tools.
    pub expected: Vec<String>,
    /// Rank (from 1, within the top [`MRR_DEPTH`]) of each expected tool; `None` when absent.
    pub expected_ranks: Vec<Option<usize>>,
    /// The top tools returned (as many as the largest `k`).
    pub returned: Vec<String>,
}

/// Recall and MRR over one half of the queries ([`split_of`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SplitReport {
    /// Which half.
    pub split: Split,
    /// Number of its queries.
    pub queries: usize,
    /// Recall at each cut-off, ascending.
    pub recall: Vec<RecallAt>,
    /// Mean reciprocal rank.
    pub mrr: f64,
}

impl SplitReport {
    /// Recall at cut-off `k`, if it was evaluated.
    pub fn recall_at(&self, k: usize) -> Option<f64> {
        self.recall.iter().find(|r| r.k == k).map(|r| r.recall)
    }
}

/// The outcome of [`evaluate`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvalReport {
    /// Number of queries.
    pub queries: usize,
    /// Number of documents in the index.
    pub tools: usize,
    /// Recall at each requested cut-off, ascending.
    pub recall: Vec<RecallAt>,
    /// Mean reciprocal rank of the first expected tool within the top [`MRR_DEPTH`].
    pub mrr: f64,
    /// The same measures on the tuning half and on the check half ([`split_of`]).
    pub splits: Vec<SplitReport>,
    /// The same measures on the check-half queries none of whose expected tools is expected by
    /// any tuning-half query. The split is by query, so most check queries ask for tools the
    /// tuning half also asks for: a change that learns which tools tend to be right (rather
    /// than how to match a request) carries over to the check half but not to these.
    pub check_unseen_tools: SplitReport,
    /// Per-query search latency.
    pub latency: Latency,
    /// Expected tool names that are not in the index (each counts as a miss).
    pub unknown_expected: Vec<String>,
    /// Queries that missed at the smallest cut-off.
    pub misses: Vec<Miss>,
}

impl EvalReport {
    /// Recall at cut-off `k`, if it was evaluated.
    pub fn recall_at(&self, k: usize) -> Option<f64> {
        self.recall.iter().find(|r| r.k == k).map(|r| r.recall)
    }

    /// Human-readable report; with `misses`, every missed query follows the summary.
    pub fn render(&self, misses: bool) -> String {
        use fmt::Write;
        let mut s = String::new();
        let _ = writeln!(s, "queries: {}  tools: {}", self.queries, self.tools);
        for r in &self.recall {
            let _ = writeln!(s, "recall@{:<3} {:.3}", r.k, r.recall);
        }
        let _ = writeln!(s, "MRR@{MRR_DEPTH}     {:.3}", self.mrr);
        for sp in &self.splits {
            let cells: Vec<String> = sp.recall.iter().map(|r| format!("R@{} {:.3}", r.k, r.recall)).collect();
            let _ = writeln!(
                s,
                "{:<5} half  {} queries  {}  MRR {:.3}",
                sp.split.as_str(),
                sp.queries,
                cells.join("  "),
                sp.mrr
            );
        }
        let u = &self.check_unseen_tools;
        if u.queries > 0 && u.queries < self.queries {
            let cells: Vec<String> = u.recall.iter().map(|r| format!("R@{} {:.3}", r.k, r.recall)).collect();
            let _ = writeln!(
                s,
                "check half, tools the tuning half never asks for: {} queries  {}  MRR {:.3}",
                u.queries,
                cells.join("  "),
                u.mrr
            );
        }
        let _ = writeln!(
            s,
            "latency     p50 {:.1} µs  p99 {:.1} µs  mean {:.1} µs",
            self.latency.p50_us, self.latency.p99_us, self.latency.mean_us
        );
        if !self.unknown_expected.is_empty() {
            let _ = writeln!(
                s,
                "expected tools not in the catalog ({}): {}",
                self.unknown_expected.len(),
                self.unknown_expected.join(", ")
            );
        }
        if misses {
            let k = self.recall.first().map_or(0, |r| r.k);
            let _ = writeln!(s, "\nmisses at k={k} ({}):", self.misses.len());
            for m in &self.misses {
                let ranks: Vec<String> = m
                    .expected
                    .iter()
                    .zip(&m.expected_ranks)
                    .map(|(name, r)| match r {
                        Some(r) => format!("{name} (#{r})"),
                        None => format!("{name} (-)"),
                    })
                    .collect();
                let _ = writeln!(
                    s,
                    "- {}{}",
                    m.id.as_deref().map_or(String::new(), |id| format!("[{id}] ")),
                    m.query.replace('\n', " ")
                );
                let _ = writeln!(s, "  expected: {}", ranks.join(", "));
                let _ = writeln!(s, "  returned: {}", m.returned.join(", "));
            }
        }
        s
    }
}

impl fmt::Display for EvalReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render(false))
    }
}

/// The ablation variants: the default configuration, then each technique switched off (or, for
/// the field weights, flattened) on its own. `(label, config)`.
pub fn ablations() -> Vec<(&'static str, SearchConfig)> {
    let base = SearchConfig::default();
    let with = |f: &dyn Fn(&mut SearchConfig)| {
        let mut c = base.clone();
        f(&mut c);
        c
    };
    vec![
        ("default", base.clone()),
        (
            "tuned field weights (name 3, alias 2.5, title 2, param names 1.5, ...)",
            with(&|c| {
                use Field::*;
                for (field, w, b) in [
                    (Name, 3.0, 0.5),
                    (Alias, 2.5, 0.5),
                    (Title, 2.0, 0.5),
                    (Description, 1.0, 0.75),
                    (Domain, 1.5, 0.0),
                    (Capability, 1.5, 0.3),
                    (ParamName, 1.5, 0.5),
                    (ParamDesc, 0.8, 0.5),
                    (Snippet, 0.8, 0.75),
                    (Example, 1.0, 0.75),
                ] {
                    c.weights[field as usize] = w;
                    c.b[field as usize] = b;
                }
            }),
        ),
        ("no parameter descriptions", with(&|c| c.weights[Field::ParamDesc as usize] = 0.0)),
        (
            "previous BM25 constants (k1 1.2, b 0.75 on every field)",
            with(&|c| {
                c.k1 = 1.2;
                c.b = [0.75; crate::search::FIELD_COUNT];
            }),
        ),
        ("no value types (dates, times, amounts, ...)", with(&|c| c.value_type_weight = 0.0)),
        (
            "no query translation (CC-CEDICT, Korean Learners' Dictionary, FreeDict Indonesian, MultiWordNet, WikDict German)",
            with(&|c| c.translation_weight = 0.0),
        ),
        ("no loanwords in Hangul or Katakana (sound keys)", with(&|c| c.loanword_weight = 0.0)),
        ("no synonym table (generic rows)", with(&|c| c.synonym_weight = 0.0)),
        ("no WordNet related words", with(&|c| c.related_weight = 0.0)),
        (
            "neither synonym table nor WordNet",
            with(&|c| {
                c.synonym_weight = 0.0;
                c.related_weight = 0.0;
            }),
        ),
        ("no name-coverage boost", with(&|c| c.name_coverage = 0.0)),
        ("no filler down-weighting", with(&|c| c.filler_weight = 1.0)),
        ("no prefix completion", with(&|c| c.prefix_weight = 0.0)),
        ("no exact-name tier", with(&|c| c.name_match_first = false)),
        ("no typo tolerance", with(&|c| c.typo_weight = 0.0)),
        ("no near-duplicate collapsing", with(&|c| c.diversify = false)),
        ("with multi-intent splitting (off by default)", with(&|c| c.split_intents = true)),
        ("with the required-parameter prior 0.1 (off by default)", with(&|c| c.required_prior = 0.1)),
    ]
}

/// Runs every query through `index` (text mode, no filter) and measures recall at each of `ks`
/// (sorted and deduplicated; empty means `[1, 5, 10]`; each search returns at most
/// [`Query::MAX_LIMIT`] hits, so larger cut-offs see only those), MRR and latency. One untimed
/// warm-up pass precedes the timed one.
pub fn evaluate(index: &SearchIndex, queries: &[EvalQuery], ks: &[usize]) -> EvalReport {
    let mut ks: Vec<usize> = ks.iter().copied().filter(|&k| k > 0).collect();
    if ks.is_empty() {
        ks = vec![1, 5, 10];
    }
    ks.sort_unstable();
    ks.dedup();
    let depth = MRR_DEPTH.max(*ks.last().unwrap_or(&1)).min(Query::MAX_LIMIT);
    let run = |q: &EvalQuery| {
        index.search(&Query::text(q.query.as_str()).with_limit(depth), &|_| true).map(|r| r.hits).unwrap_or_default()
    };
    for q in queries {
        std::hint::black_box(run(q));
    }

    let mut known: HashSet<&str> = HashSet::new();
    index.docs().iter().for_each(|d| {
        known.insert(d.name.as_str());
    });
    let mut unknown: Vec<String> = Vec::new();
    let splits = split_of(queries);
    let tuned_tools: HashSet<&str> = queries
        .iter()
        .zip(&splits)
        .filter(|(_, s)| **s == Split::Tune)
        .flat_map(|(q, _)| q.expected.iter().map(String::as_str))
        .collect();
    let unseen = |q: &EvalQuery| q.expected.iter().all(|e| !tuned_tools.contains(e.as_str()));
    // Sums of recall@k per cut-off and of reciprocal ranks: all queries, tuning half, check half,
    // check-half queries for tools the tuning half never asks for.
    let mut recall_sum = vec![vec![0f64; ks.len()]; 4];
    let mut rr_sum = [0f64; 4];
    let mut times = Vec::with_capacity(queries.len());
    let mut misses = Vec::new();
    for (q, &split) in queries.iter().zip(&splits) {
        let parts: &[usize] = match split {
            Split::Tune => &[0, 1],
            Split::Check if unseen(q) => &[0, 2, 3],
            Split::Check => &[0, 2],
        };
        let start = Instant::now();
        let hits = run(q);
        times.push(start.elapsed().as_secs_f64() * 1e6);
        let names: Vec<&str> = hits.iter().map(|h| index.doc(h.doc).name.as_str()).collect();
        let ranks: Vec<Option<usize>> =
            q.expected.iter().map(|e| names.iter().position(|n| n == e).map(|p| p + 1)).collect();
        for e in &q.expected {
            if !known.contains(e.as_str()) && !unknown.contains(e) {
                unknown.push(e.clone());
            }
        }
        let n_expected = q.expected.len().max(1) as f64;
        for (i, &k) in ks.iter().enumerate() {
            let found = ranks.iter().filter(|r| r.is_some_and(|r| r <= k)).count();
            for &p in parts {
                recall_sum[p][i] += found as f64 / n_expected;
            }
            if i == 0 && found < q.expected.len() {
                misses.push(Miss {
                    id: q.id.clone(),
                    split,
                    query: q.query.clone(),
                    expected: q.expected.clone(),
                    expected_ranks: ranks.clone(),
                    returned: names.iter().take(*ks.last().unwrap_or(&k)).map(|s| s.to_string()).collect(),
                });
            }
        }
        if let Some(first) = ranks.iter().flatten().min() {
            for &p in parts {
                rr_sum[p] += 1.0 / *first as f64;
            }
        }
    }
    let counts = [
        queries.len(),
        splits.iter().filter(|&&s| s == Split::Tune).count(),
        splits.iter().filter(|&&s| s == Split::Check).count(),
        queries.iter().zip(&splits).filter(|(q, s)| **s == Split::Check && unseen(q)).count(),
    ];
    let recall_of = |p: usize| -> Vec<RecallAt> {
        ks.iter().zip(&recall_sum[p]).map(|(&k, &s)| RecallAt { k, recall: s / counts[p].max(1) as f64 }).collect()
    };
    let report_of = |p: usize, split| SplitReport {
        split,
        queries: counts[p],
        recall: recall_of(p),
        mrr: rr_sum[p] / counts[p].max(1) as f64,
    };
    let split_reports = vec![report_of(1, Split::Tune), report_of(2, Split::Check)];
    times.sort_by(f64::total_cmp);
    let pct = |p: f64| -> f64 {
        if times.is_empty() {
            return 0.0;
        }
        let i = ((times.len() as f64 - 1.0) * p).round() as usize;
        times[i]
    };
    let latency = Latency {
        p50_us: pct(0.50),
        p99_us: pct(0.99),
        mean_us: times.iter().sum::<f64>() / times.len().max(1) as f64,
    };
    unknown.sort();
    EvalReport {
        queries: queries.len(),
        tools: index.len(),
        recall: recall_of(0),
        mrr: rr_sum[0] / counts[0].max(1) as f64,
        splits: split_reports,
        check_unseen_tools: report_of(3, Split::Check),
        latency,
        unknown_expected: unknown,
        misses,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_mcp_and_openai_tools() {
        let json = r#"[
            {"name": "read_file", "title": "Read", "description": "Read a file",
             "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}}},
            {"type": "function", "function": {"name": "get_weather", "description": "Weather",
             "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
            {"name": "bare", "description": "Bare", "parameters": {"properties": {}}},
            {"name": "nodesc"}
        ]"#;
        let docs = parse_tools("t.json", json).unwrap();
        assert_eq!(docs.len(), 4);
        assert_eq!(docs[0].title, "Read");
        assert_eq!(docs[0].params[0].name, "path");
        assert_eq!(docs[1].name, "get_weather");
        assert_eq!(docs[1].params[0].name, "city");
        assert_eq!(docs[3].description, "");
    }

    #[test]
    fn tool_errors_name_file_index_and_field() {
        let e = parse_tools("t.json", r#"[{"name": "a"}, {"description": "x"}]"#).unwrap_err();
        assert_eq!(e.to_string(), "t.json: [1].name: missing");
        let e = parse_tools("t.json", r#"[{"type": "function", "function": {"name": 3}}]"#).unwrap_err();
        assert_eq!(e.to_string(), "t.json: [0].function.name: expected a string");
        let e = parse_tools("t.json", r#"[{"name": "a", "inputSchema": []}]"#).unwrap_err();
        assert_eq!(e.location, Location::Element { index: 0, field: "inputSchema".into() });
        let e = parse_tools("t.json", r#"{"name": "a"}"#).unwrap_err();
        assert_eq!(e.location, Location::File);
        assert!(e.to_string().starts_with("t.json: expected a JSON array"));
        let e = parse_tools("t.json", "[1]").unwrap_err();
        assert_eq!(e.to_string(), "t.json: [0]: expected a tool object");
    }

    #[test]
    fn parses_queries_and_reports_line_errors() {
        let ok = "{\"id\": \"q1\", \"query\": \"weather\", \"expected\": [\"get_weather\"]}\n\n{\"query\": \"x\", \"expected\": [\"a\", \"b\"], \"extra\": 1}\n";
        let qs = parse_queries("q.jsonl", ok).unwrap();
        assert_eq!(qs.len(), 2);
        assert_eq!(qs[0].id.as_deref(), Some("q1"));
        assert_eq!(qs[1].expected, ["a", "b"]);

        let bad = "{\"query\": \"a\", \"expected\": [\"x\"]}\n{\"query\": \"b\"}\n";
        let e = parse_queries("q.jsonl", bad).unwrap_err();
        assert_eq!(e.to_string(), "q.jsonl:2: field `expected`: missing");
        let headed = parse_queries("q.jsonl", "# written before running\n{\"query\": \"a\", \"expected\": [\"t\"]}\n");
        assert_eq!(headed.unwrap().len(), 1, "a `#` header line is not a query");
        let e = parse_queries("q.jsonl", "\n\nnot json\n").unwrap_err();
        assert_eq!(e.location, Location::Line { line: 3, field: String::new() });
        assert!(e.to_string().starts_with("q.jsonl:3: invalid JSON"));
        let e = parse_queries("q.jsonl", "{\"query\": 1, \"expected\": []}").unwrap_err();
        assert_eq!(e.to_string(), "q.jsonl:1: field `query`: expected a string");
        let e = parse_queries("q.jsonl", "{\"query\": \"a\", \"expected\": [1]}").unwrap_err();
        assert_eq!(e.to_string(), "q.jsonl:1: field `expected`: expected an array of tool names");
    }

    #[test]
    fn evaluate_computes_recall_mrr_and_misses() {
        let docs = vec![
            SearchDoc::new("get_weather", "Current weather forecast for a city"),
            SearchDoc::new("read_file", "Read the contents of a file from disk"),
            SearchDoc::new("send_email", "Send an email message to a recipient"),
        ];
        let index = SearchIndex::build(docs);
        let queries = vec![
            EvalQuery::new("what is the weather in Paris", vec!["get_weather".into()]),
            EvalQuery::new("read a file from disk", vec!["read_file".into()]),
            // Two expected tools: one found, one unknown to the index.
            EvalQuery::new("email my boss", vec!["send_email".into(), "no_such_tool".into()]),
            // Nothing matches.
            EvalQuery::new("zzzz qqqq", vec!["read_file".into()]),
        ];
        let report = evaluate(&index, &queries, &[5, 1]);
        assert_eq!(report.queries, 4);
        assert_eq!(report.recall.iter().map(|r| r.k).collect::<Vec<_>>(), [1, 5]);
        assert!((report.recall_at(1).unwrap() - 2.5 / 4.0).abs() < 1e-9);
        assert!((report.recall_at(5).unwrap() - 2.5 / 4.0).abs() < 1e-9);
        assert!((report.mrr - 3.0 / 4.0).abs() < 1e-9);
        assert_eq!(report.unknown_expected, ["no_such_tool"]);
        assert_eq!(report.misses.len(), 2);
        assert_eq!(report.misses[0].expected_ranks, [Some(1), None]);
        assert!(report.latency.p50_us <= report.latency.p99_us);
        let text = report.render(true);
        assert!(text.contains("recall@1"), "{text}");
        assert!(text.contains("no_such_tool (-)"), "{text}");
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["recall"][0]["k"], 1);
    }

    #[test]
    fn split_is_stratified_balanced_and_stable() {
        assert_eq!(category("live_multiple_2-1-0"), "live_multiple");
        assert_eq!(category("multiple_41"), "multiple");
        assert_eq!(category("noid"), "");
        assert_eq!(category("a_b"), "");
        let mk = |id: String| EvalQuery { id: Some(id), query: "q".into(), expected: vec!["t".into()] };
        let mut queries: Vec<EvalQuery> = (0..21).map(|i| mk(format!("multiple_{i}"))).collect();
        queries.extend((0..40).map(|i| mk(format!("live_multiple_{i}-0-1"))));
        let splits = split_of(&queries);
        let tuned = |cat: &str| {
            queries
                .iter()
                .zip(&splits)
                .filter(|(q, s)| category(q.id.as_deref().unwrap()) == cat && **s == Split::Tune)
                .count()
        };
        assert_eq!(tuned("multiple"), 11);
        assert_eq!(tuned("live_multiple"), 20);
        // Order of the input does not matter; the id alone decides.
        let mut reversed = queries.clone();
        reversed.reverse();
        let mut back = split_of(&reversed);
        back.reverse();
        assert_eq!(back, splits);
        // Not a prefix/suffix cut: both halves take early and late ids.
        let first_ten: Vec<Split> = splits[..10].to_vec();
        assert!(first_ten.contains(&Split::Tune) && first_ten.contains(&Split::Check), "{first_ten:?}");
        assert_eq!(stable_hash("multiple_0"), stable_hash("multiple_0"));
        assert_ne!(stable_hash("multiple_0"), stable_hash("multiple_1"));
    }

    #[test]
    fn report_has_both_halves() {
        let index = SearchIndex::build(vec![
            SearchDoc::new("get_weather", "Current weather forecast for a city"),
            SearchDoc::new("read_file", "Read the contents of a file from disk"),
        ]);
        let queries: Vec<EvalQuery> = (0..8)
            .map(|i| EvalQuery {
                id: Some(format!("multiple_{i}")),
                query: if i % 2 == 0 { "weather in Paris".into() } else { "zzzz".into() },
                expected: vec!["get_weather".into()],
            })
            .collect();
        let report = evaluate(&index, &queries, &[1]);
        assert_eq!(report.splits.len(), 2);
        assert_eq!(report.splits[0].split, Split::Tune);
        assert_eq!(report.splits[0].queries + report.splits[1].queries, 8);
        let halves = report.splits.iter().map(|s| s.recall_at(1).unwrap() * s.queries as f64).sum::<f64>();
        assert!((halves / 8.0 - report.recall_at(1).unwrap()).abs() < 1e-9);
        assert!((report.recall_at(1).unwrap() - 0.5).abs() < 1e-9);
        assert!(report.render(false).contains("check half"));
    }

    #[test]
    fn check_queries_for_tools_the_tuning_half_never_asks_for_are_reported_apart() {
        let index = SearchIndex::build(vec![
            SearchDoc::new("get_weather", "Current weather forecast for a city"),
            SearchDoc::new("read_file", "Read the contents of a file from disk"),
        ]);
        let queries: Vec<EvalQuery> = (0..8)
            .map(|i| EvalQuery { id: Some(format!("multiple_{i}")), query: String::new(), expected: Vec::new() })
            .collect();
        let splits = split_of(&queries);
        // Every tuning query asks for `get_weather`; one check query asks for `read_file` (and is
        // found), the others for `get_weather` (not found: their text matches nothing).
        let mut first_check = true;
        let queries: Vec<EvalQuery> = queries
            .into_iter()
            .zip(&splits)
            .map(|(mut q, s)| {
                let new_tool = *s == Split::Check && std::mem::take(&mut first_check);
                q.expected = vec![if new_tool { "read_file" } else { "get_weather" }.into()];
                q.query = if new_tool { "read a file".into() } else { "zzzz".into() };
                q
            })
            .collect();
        let report = evaluate(&index, &queries, &[1]);
        let unseen = &report.check_unseen_tools;
        assert_eq!(unseen.split, Split::Check);
        assert_eq!(unseen.queries, 1);
        assert!((unseen.recall_at(1).unwrap() - 1.0).abs() < 1e-9);
        assert!((report.splits[1].recall_at(1).unwrap() - 0.25).abs() < 1e-9);
        assert!(report.render(false).contains("tools the tuning half never asks for: 1 queries  R@1 1.000"));
    }

    #[test]
    fn examples_become_queries() {
        let mut doc = SearchDoc::new("tz_convert", "Convert a time between time zones");
        doc.examples = vec!["what time is it in Tokyo when it is 9am in Paris".into()];
        let queries = EvalQuery::from_examples(std::slice::from_ref(&doc));
        assert_eq!(queries.len(), 1);
        assert_eq!(queries[0].expected, ["tz_convert"]);
        let index = SearchIndex::build(vec![doc, SearchDoc::new("other", "Something else")]);
        let report = evaluate(&index, &queries, &[1]);
        assert_eq!(report.recall_at(1), Some(1.0));
    }
}
