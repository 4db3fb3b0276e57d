//! Per-session state (loaded tools, search history, intent) and the search facade a session
//! uses. Survives catalog swaps: [`Session::reconcile`] keeps what still exists.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use crate::search::{Query, QueryMode, SearchError};
use crate::surface::{ExposureMode, Partition, Surface, SurfaceEntry, SurfacePolicy, meta_descriptor};
use crate::{Access, Catalog};

/// Longest search response, in bytes of serialized entries.
pub const MAX_SEARCH_RESPONSE_BYTES: usize = 16 * 1024;
/// Bytes of `tool_search`'s description given to its catalog index.
pub const SEARCH_INDEX_BUDGET: usize = 600;
/// How many recent intent texts adaptive selection looks at.
const INTENT_WINDOW: usize = 4;
/// Share (percent) of the typed-tool cap and of the byte budget that the first turn may fill
/// with tools the profile did not name (active tools pinned by their manifests), meta tools
/// included; the rest stays free for tools the session loads, calls or its intent picks. With
/// no `eager` tools the first turn is at most this share of the budget.
pub const HEAD_SHARE_PERCENT: usize = 50;
/// How many tools adaptive selection picks per turn at most.
const INTENT_PICKS: usize = 6;

/// A search as a caller asks for it (the `tool_search` / `list_tools` arguments).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SearchRequest {
    /// Words, or a regex in regex mode. Empty: list by name.
    pub query: String,
    /// `text` (default) or `regex`.
    pub mode: Option<String>,
    /// Only this domain.
    pub domain: Option<String>,
    /// Only mutating (true) or read-only (false) tools.
    pub mutating: Option<bool>,
    /// Only tools requiring all of these scopes.
    pub scopes: Option<Vec<String>>,
    /// Page size (default 20 for listings, 5 for tool_search; at most 50).
    pub limit: Option<usize>,
    /// Page start.
    pub offset: Option<usize>,
    /// `compact` (default) or `full` (adds input schemas).
    pub detail: Option<String>,
    /// Load the matches into the session (tool_search only; default true).
    pub load: Option<bool>,
    /// Tools to drop from the session's loaded set (tool_search only), applied before the
    /// search; with an empty `query` nothing else happens.
    #[serde(default)]
    pub unload: Option<Vec<String>>,
}

/// One search hit, compact by default.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchEntry {
    /// Tool name.
    pub name: String,
    /// First sentence of the description.
    pub summary: String,
    /// Required argument names.
    pub required: Vec<String>,
    /// True when the tool can change something.
    pub mutates: bool,
    /// Scopes the tool requires (the caller holds them, or it would not be listed).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub auth_required: Vec<String>,
    /// Domain.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub domain: String,
    /// Input schema (detail `full` only).
    #[serde(rename = "inputSchema", skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<Value>,
}

/// A page of search results.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct SearchResponse {
    /// Entries, best first.
    pub tools: Vec<SearchEntry>,
    /// Matches before paging.
    pub total: usize,
    /// Offset of the next page, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_offset: Option<usize>,
    /// True when the byte bound cut the page short.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// Names loaded into the session by this search.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub loaded: Vec<String>,
    /// Names dropped from the session by `unload`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unloaded: Vec<String>,
    /// Relevance of each entry of `tools` (same order; empty for listings without a query).
    /// Only comparable within one response; not sent.
    #[serde(skip)]
    pub scores: Vec<f32>,
}

/// A past search.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SearchRecord {
    /// Turn of the search.
    pub turn: u64,
    /// The query.
    pub query: String,
    /// Names returned.
    pub hits: Vec<String>,
}

/// What a session store keeps of a session so that it can resume (a reconnect, a restart,
/// another instance): the tools it loaded, called into its surface and unloaded. Searches,
/// intent and hint counters are not kept: they describe the conversation in progress, and a
/// resumed session that lost them only ranks a little less well.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
#[serde(default)]
pub struct SessionSnapshot {
    /// Tools loaded by search, in load order.
    pub loaded: Vec<String>,
    /// Tools called by a name not on the surface, in call order.
    pub called: Vec<String>,
    /// Tools the session unloaded.
    pub dropped: Vec<String>,
    /// The turn the session had reached.
    pub turn: u64,
}

/// One client session: its profile's surface policy and access, and what it has loaded.
#[derive(Debug, Clone)]
pub struct Session {
    /// Session id.
    pub id: String,
    /// Surface settings of the session's profile.
    pub policy: SurfacePolicy,
    /// Scopes and gates of the session's profile.
    pub access: Access,
    turn: u64,
    loaded: Vec<(String, u64)>,
    searches: Vec<SearchRecord>,
    intent: Vec<String>,
    /// Repeated identical malformed calls (escalating hints, then refusal).
    pub repeats: crate::hints::RepeatGuard,
    /// Tools the session unloaded: kept out of intent-based picks until loaded again.
    dropped: Vec<String>,
    /// Tools called by a name not on the surface (adaptive, hybrid), in call order.
    called: Vec<String>,
}

fn summary(description: &str) -> String {
    let end = description.find(". ").map(|i| i + 1).unwrap_or(description.len());
    let s = description[..end].trim();
    if s.chars().count() <= 160 {
        s.to_owned()
    } else {
        let cut: String = s.chars().take(157).collect();
        format!("{cut}...")
    }
}

fn required_args(schema: &Value) -> Vec<String> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

impl Session {
    /// A new session.
    pub fn new(id: impl Into<String>, policy: SurfacePolicy, access: Access) -> Session {
        Session {
            id: id.into(),
            policy,
            access,
            turn: 0,
            loaded: Vec::new(),
            searches: Vec::new(),
            intent: Vec::new(),
            repeats: crate::hints::RepeatGuard::default(),
            dropped: Vec::new(),
            called: Vec::new(),
        }
    }

    /// Current turn (advanced by [`Session::next_turn`]).
    pub fn turn(&self) -> u64 {
        self.turn
    }

    /// Advances the turn (the server calls this once per tool call).
    pub fn next_turn(&mut self) {
        self.turn += 1;
    }

    /// Tools loaded by search: (name, turn loaded), in load order.
    pub fn loaded(&self) -> &[(String, u64)] {
        &self.loaded
    }

    /// Past searches, oldest first.
    pub fn searches(&self) -> &[SearchRecord] {
        &self.searches
    }

    /// Records text that says what the session is doing (search queries, called tools); adaptive
    /// selection ranks deferred tools against the most recent ones.
    pub fn note_intent(&mut self, text: impl Into<String>) {
        let t = text.into();
        if t.trim().is_empty() {
            return;
        }
        self.intent.push(t);
        if self.intent.len() > INTENT_WINDOW {
            self.intent.remove(0);
        }
    }

    /// Records a call by `name` (a tool name or one of its aliases) as intent. In modes that use
    /// intent, the tool it names joins the session's surface (partition `called`, in call
    /// order, under the caps) when the session may see it and it is not on the surface yet.
    /// Returns the tool's name when the surface gained it.
    pub fn note_call(&mut self, catalog: &Catalog, name: &str) -> Option<String> {
        if !self.policy.mode.uses_intent() {
            return None;
        }
        let resolved = catalog.resolve(name)?;
        let tool = resolved.tool.name.clone();
        let def = resolved.def;
        if !resolved.state.is_dispatchable()
            || !def.spec.lifecycle.state.is_visible()
            || !self.access.may_see(&tool, def)
            || self.called.contains(&tool)
            || self.surface(catalog).contains(&tool)
        {
            return None;
        }
        self.dropped.retain(|d| *d != tool);
        self.called.push(tool.clone());
        Some(tool)
    }

    /// What a session store keeps of this session (see [`SessionSnapshot`]).
    pub fn snapshot(&self) -> SessionSnapshot {
        SessionSnapshot {
            loaded: self.loaded.iter().map(|(n, _)| n.clone()).collect(),
            called: self.called.clone(),
            dropped: self.dropped.clone(),
            turn: self.turn,
        }
    }

    /// Resumes a stored session: its loaded and called tools come back as far as this session
    /// may still see them in `catalog` (same rules as [`Session::load`]: a tool removed since,
    /// or outside the profile's scopes, stays out). What the session had loaded, called or
    /// unloaded before is replaced by the snapshot's. Returns the names restored as loaded.
    pub fn restore(&mut self, catalog: &Catalog, snapshot: &SessionSnapshot) -> Vec<String> {
        self.turn = self.turn.max(snapshot.turn);
        self.loaded.clear();
        self.called.clear();
        self.dropped.clear();
        let loaded = self.load(catalog, &snapshot.loaded);
        for n in &snapshot.called {
            let visible = catalog.tool_index(n).is_some_and(|i| {
                let r = &catalog.tools()[i];
                let def = catalog.def(r);
                def.spec.lifecycle.state.is_visible() && self.access.may_see(&r.name, def)
            });
            if visible && self.policy.mode.uses_intent() && !self.called.contains(n) && !loaded.contains(n) {
                self.called.push(n.clone());
            }
        }
        for n in &snapshot.dropped {
            if !self.dropped.contains(n) && !self.loaded.iter().any(|(l, _)| l == n) {
                self.dropped.push(n.clone());
            }
        }
        loaded
    }

    /// Tools the session called by a name not on its surface, in call order.
    pub fn called(&self) -> &[String] {
        &self.called
    }

    /// Loads tools into the session (names the session may not see, or that are not visible
    /// tools, are ignored). Returns the names newly loaded.
    pub fn load(&mut self, catalog: &Catalog, names: &[String]) -> Vec<String> {
        let mut added = Vec::new();
        self.called.retain(|c| !names.contains(c));
        for n in names {
            let Some(i) = catalog.tool_index(n) else { continue };
            let r = &catalog.tools()[i];
            let def = catalog.def(r);
            if def.spec.lifecycle.state.is_visible()
                && self.access.may_see(&r.name, def)
                && !self.loaded.iter().any(|(l, _)| l == n)
            {
                self.loaded.push((n.clone(), self.turn));
                self.dropped.retain(|d| d != n);
                added.push(n.clone());
            }
        }
        added
    }

    /// Drops tools from the session's loaded set, and keeps them out of intent-based picks until
    /// they are loaded again. Returns the names that were loaded and are now gone (unknown or
    /// never-loaded names are ignored).
    pub fn unload(&mut self, names: &[String]) -> Vec<String> {
        let mut removed = Vec::new();
        self.loaded.retain(|(n, _)| {
            let drop = names.contains(n);
            if drop {
                removed.push(n.clone());
            }
            !drop
        });
        self.called.retain(|n| {
            let drop = names.contains(n);
            if drop && !removed.contains(n) {
                removed.push(n.clone());
            }
            !drop
        });
        for n in &removed {
            if !self.dropped.contains(n) {
                self.dropped.push(n.clone());
            }
        }
        removed
    }

    /// Keeps the session consistent with a new catalog: loaded tools that still exist (a
    /// replaced tool stays loaded) are kept; removed ones are dropped. Returns a warning per
    /// dropped tool.
    pub fn reconcile(&mut self, catalog: &Catalog) -> Vec<String> {
        let mut warnings = Vec::new();
        self.loaded.retain(|(n, _)| {
            let keep = catalog
                .tool_index(n)
                .is_some_and(|i| catalog.def(&catalog.tools()[i]).spec.lifecycle.state.is_visible());
            if !keep {
                warnings.push(format!(
                    "tool `{n}` was loaded in session {} but is no longer in the catalog; dropped",
                    self.id
                ));
            }
            keep
        });
        self.called.retain(|n| {
            catalog.tool_index(n).is_some_and(|i| catalog.def(&catalog.tools()[i]).spec.lifecycle.state.is_visible())
        });
        warnings
    }

    /// Runs a search for this session: only tools it may see, never hidden, deprecated or
    /// removed names. With `load` (tool_search), the hits are loaded into the session.
    pub fn search(
        &mut self,
        catalog: &Catalog,
        req: &SearchRequest,
        load: bool,
    ) -> Result<SearchResponse, SearchError> {
        let unloaded = match (&req.unload, load) {
            (Some(names), true) => self.unload(names),
            _ => Vec::new(),
        };
        if load && req.unload.as_ref().is_some_and(|u| !u.is_empty()) && req.query.trim().is_empty() {
            return Ok(SearchResponse { unloaded, ..SearchResponse::default() });
        }
        let resp = search_catalog(catalog, &self.access, req, if load { 5 } else { 20 })?;
        self.searches.push(SearchRecord {
            turn: self.turn,
            query: req.query.clone(),
            hits: resp.tools.iter().map(|t| t.name.clone()).collect(),
        });
        self.note_intent(req.query.clone());
        let mut resp = resp;
        resp.unloaded = unloaded;
        // An empty query lists tools by name: a listing, not matches, so nothing is loaded.
        if load && req.load.unwrap_or(true) && !req.query.trim().is_empty() {
            let names = confident_matches(&resp);
            resp.loaded = self.load(catalog, &names);
        }
        Ok(resp)
    }

    /// The surface this session sees now.
    pub fn surface(&self, catalog: &Catalog) -> Surface {
        let p = &self.policy;
        let mut s = Surface::default();
        let visible_to_me = |i: usize| {
            let r = &catalog.tools()[i];
            let def = catalog.def(r);
            def.spec.lifecycle.state.is_visible() && self.access.may_see(&r.name, def)
        };

        if p.mode == ExposureMode::Full {
            for (i, r) in catalog.tools().iter().enumerate() {
                if visible_to_me(i) {
                    push(&mut s, catalog, i, &r.name, Partition::Head);
                }
            }
            s.total_bytes = s.to_bytes().len();
            return s;
        }

        // Candidates in priority order; each partition sorted for output later.
        let mut head: Vec<usize> = Vec::new();
        for n in &p.eager {
            match catalog.tool_index(n).filter(|&i| visible_to_me(i)) {
                Some(i) if !head.contains(&i) => head.push(i),
                Some(_) => {}
                None => s.ignored_eager.push(n.clone()),
            }
        }
        if p.mode.pins_active() {
            for (i, r) in catalog.tools().iter().enumerate() {
                if catalog.def(r).spec.lifecycle.state == quiver_manifest::LifecycleState::Active
                    && visible_to_me(i)
                    && !head.contains(&i)
                {
                    head.push(i);
                }
            }
        }
        let mut loaded: Vec<usize> = Vec::new();
        for (n, _) in &self.loaded {
            if let Some(i) = catalog.tool_index(n).filter(|&i| visible_to_me(i))
                && !loaded.contains(&i)
            {
                loaded.push(i);
            }
        }
        let mut called: Vec<usize> = Vec::new();
        if p.mode.uses_intent() {
            for n in &self.called {
                if let Some(i) = catalog.tool_index(n).filter(|&i| visible_to_me(i))
                    && !loaded.contains(&i)
                    && !called.contains(&i)
                {
                    called.push(i);
                }
            }
        }
        let mut intent: Vec<usize> = Vec::new();
        if p.mode.uses_intent() && !self.intent.is_empty() {
            let text = self.intent.join(" ");
            let (index, tools) = catalog.search_index();
            let q = Query::text(text).with_limit(INTENT_PICKS);
            let filter = |d: usize| {
                let i = tools[d];
                visible_to_me(i)
                    && !head.contains(&i)
                    && !loaded.contains(&i)
                    && !called.contains(&i)
                    && !self.dropped.contains(&catalog.tools()[i].name)
            };
            if let Ok(res) = index.search(&q, &filter) {
                intent.extend(res.hits.iter().map(|h| tools[h.doc]));
            }
        }

        // Admit in priority order under the caps. Eager tools may use the whole budget; other
        // active tools only the head share, so that tools a session loads still fit and the
        // head never depends on what was loaded (its bytes stay stable for prompt caching).
        let n_eager = head.len() - head.iter().filter(|&&i| !p.eager.contains(&catalog.tools()[i].name)).count();
        let meta: Vec<SurfaceEntry> = p
            .mode
            .meta_tools()
            .iter()
            .map(|m| {
                let d = meta_descriptor(m, catalog, &self.access, SEARCH_INDEX_BUDGET);
                let n = serde_json::to_vec(&d).map(|v| v.len()).unwrap_or(0);
                SurfaceEntry { name: (*m).to_owned(), partition: Partition::Meta, descriptor: Arc::new(d), bytes: n }
            })
            .collect();
        let meta_bytes: usize = meta.iter().map(|m| m.bytes).sum();
        let head_max_tools = (p.max_typed_tools * HEAD_SHARE_PERCENT / 100).max(1);
        let head_max_bytes = (p.byte_budget * HEAD_SHARE_PERCENT / 100).saturating_sub(meta_bytes);
        let mut admitted: Vec<(usize, Partition)> = Vec::new();
        let mut bytes = 0usize;
        for (list, part) in [
            (&head, Partition::Head),
            (&loaded, Partition::Loaded),
            (&called, Partition::Called),
            (&intent, Partition::Intent),
        ] {
            for (k, &i) in list.iter().enumerate() {
                if admitted.iter().any(|(j, _)| *j == i) {
                    continue;
                }
                let (_, n) = catalog.descriptor(i);
                let (max_tools, max_bytes) = if part == Partition::Head && k >= n_eager {
                    (head_max_tools, head_max_bytes)
                } else {
                    (p.max_typed_tools, p.byte_budget)
                };
                if admitted.len() < max_tools && bytes + n <= max_bytes {
                    bytes += n;
                    admitted.push((i, part));
                } else {
                    s.dropped.push(catalog.tools()[i].name.clone());
                }
            }
        }

        s.dropped.retain(|d| !admitted.iter().any(|(i, _)| catalog.tools()[*i].name == *d));
        s.dropped.dedup();

        // Serialize: head sorted by name, meta fixed, loaded in load order, intent by name.
        let mut head_out: Vec<usize> =
            admitted.iter().filter(|(_, p)| *p == Partition::Head).map(|(i, _)| *i).collect();
        head_out.sort_unstable();
        for i in head_out {
            push(&mut s, catalog, i, &catalog.tools()[i].name, Partition::Head);
        }
        for m in meta {
            s.entries.push(m);
            s.n_meta += 1;
        }
        for part in [Partition::Loaded, Partition::Called] {
            for &(i, _) in admitted.iter().filter(|(_, p)| *p == part) {
                push(&mut s, catalog, i, &catalog.tools()[i].name, part);
            }
        }
        let mut intent_out: Vec<usize> =
            admitted.iter().filter(|(_, p)| *p == Partition::Intent).map(|(i, _)| *i).collect();
        intent_out.sort_unstable();
        for i in intent_out {
            push(&mut s, catalog, i, &catalog.tools()[i].name, Partition::Intent);
        }
        s.total_bytes = s.to_bytes().len();
        s
    }
}

/// Most tools one `tool_search` loads.
pub const MAX_LOADS_PER_SEARCH: usize = 3;
/// A match below this share of the best match's relevance is listed but not loaded.
pub const LOAD_SCORE_SHARE: f32 = 0.6;

/// The matches a search loads: the best one, and the next ones that are nearly as relevant
/// (at least [`LOAD_SCORE_SHARE`] of its score), at most [`MAX_LOADS_PER_SEARCH`]. The rest of
/// the page is listed for the model to load by a narrower search (or call through `run_tool`):
/// loading every weak match would fill the session's budget after one search. A listing
/// without relevance (an empty query) loads its page, bounded the same way.
fn confident_matches(resp: &SearchResponse) -> Vec<String> {
    let best = resp.scores.first().copied().unwrap_or(0.0);
    resp.tools
        .iter()
        .enumerate()
        .filter(|(k, _)| resp.scores.get(*k).is_none_or(|&s| s >= best * LOAD_SCORE_SHARE))
        .take(MAX_LOADS_PER_SEARCH)
        .map(|(_, t)| t.name.clone())
        .collect()
}

fn push(s: &mut Surface, catalog: &Catalog, i: usize, name: &str, partition: Partition) {
    let (d, n) = catalog.descriptor(i);
    s.entries.push(SurfaceEntry { name: name.to_owned(), partition, descriptor: d.clone(), bytes: n });
    s.n_typed += 1;
    s.typed_bytes += n;
}

/// Searches the catalog as `access` may see it. `default_limit` applies when the request has
/// none. The response is bounded to [`MAX_SEARCH_RESPONSE_BYTES`].
pub fn search_catalog(
    catalog: &Catalog,
    access: &Access,
    req: &SearchRequest,
    default_limit: usize,
) -> Result<SearchResponse, SearchError> {
    let (index, tools) = catalog.search_index();
    let mode = match req.mode.as_deref() {
        Some("regex") => QueryMode::Regex,
        _ => QueryMode::Text,
    };
    let full = req.detail.as_deref() == Some("full");
    let filter = |d: usize| {
        let r = &catalog.tools()[tools[d]];
        let def = catalog.def(r);
        access.may_see(&r.name, def)
            && req.domain.as_deref().is_none_or(|dm| def.spec.domain.eq_ignore_ascii_case(dm))
            && req.mutating.is_none_or(|m| def.spec.side_effects.mutates() == m)
            && req.scopes.as_ref().is_none_or(|sc| sc.iter().all(|x| def.spec.scopes.contains(x)))
    };
    let limit = req.limit.unwrap_or(default_limit).clamp(1, Query::MAX_LIMIT);
    let offset = req.offset.unwrap_or(0);
    let (hits, scores, total): (Vec<usize>, Vec<f32>, usize) = if req.query.trim().is_empty() {
        // No query: list by name.
        let all: Vec<usize> = (0..tools.len()).filter(|&d| filter(d)).collect();
        let total = all.len();
        (all.into_iter().skip(offset).take(limit).collect(), Vec::new(), total)
    } else {
        let mut q = Query::text(req.query.clone()).with_limit(limit).with_offset(offset);
        q.mode = mode;
        let res = index.search(&q, &filter)?;
        (res.hits.iter().map(|h| h.doc).collect(), res.hits.iter().map(|h| h.score).collect(), res.total)
    };
    let mut out = SearchResponse {
        tools: Vec::new(),
        total,
        next_offset: None,
        truncated: false,
        loaded: Vec::new(),
        unloaded: Vec::new(),
        scores: Vec::new(),
    };
    let mut bytes = 0usize;
    for (k, d) in hits.iter().enumerate() {
        let r = &catalog.tools()[tools[*d]];
        let def = catalog.def(r);
        let entry = SearchEntry {
            name: r.name.clone(),
            summary: summary(&def.spec.description),
            required: required_args(&def.input_schema),
            mutates: def.spec.side_effects.mutates(),
            auth_required: def.spec.scopes.clone(),
            domain: def.spec.domain.clone(),
            input_schema: full.then(|| (*def.input_schema).clone()),
        };
        let n = serde_json::to_vec(&entry).map(|v| v.len()).unwrap_or(0);
        if bytes + n > MAX_SEARCH_RESPONSE_BYTES && !out.tools.is_empty() {
            out.truncated = true;
            break;
        }
        bytes += n;
        out.tools.push(entry);
        if let Some(&score) = scores.get(k) {
            out.scores.push(score);
        }
    }
    let shown = offset + out.tools.len();
    if shown < total {
        out.next_offset = Some(shown);
    }
    Ok(out)
}

/// Counts of a surface, for telemetry and `quiver` reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SurfaceStats {
    /// Mode.
    pub mode: ExposureMode,
    /// Typed tools shown.
    pub n_typed: usize,
    /// Meta tools shown.
    pub n_meta: usize,
    /// Bytes of typed descriptors.
    pub typed_bytes: usize,
    /// Bytes of the serialized surface.
    pub total_bytes: usize,
    /// Tools left out by the caps.
    pub n_dropped: usize,
}

impl Surface {
    /// The surface's figures.
    pub fn stats(&self, mode: ExposureMode) -> SurfaceStats {
        SurfaceStats {
            mode,
            n_typed: self.n_typed,
            n_meta: self.n_meta,
            typed_bytes: self.typed_bytes,
            total_bytes: self.total_bytes,
            n_dropped: self.dropped.len(),
        }
    }
}

/// Names per partition (for tests and `quiver` output).
pub fn partitions(surface: &Surface) -> BTreeMap<&'static str, Vec<&str>> {
    let mut m: BTreeMap<&'static str, Vec<&str>> = BTreeMap::new();
    for e in &surface.entries {
        let k = match e.partition {
            Partition::Head => "head",
            Partition::Meta => "meta",
            Partition::Loaded => "loaded",
            Partition::Called => "called",
            Partition::Intent => "intent",
        };
        m.entry(k).or_default().push(e.name.as_str());
    }
    m
}
