//! The operator dashboard at `/ui` on the HTTP transport: the catalog with lifecycle states,
//! aliases and deprecations; plugin provenance (signer, sha256, isolation); live sessions;
//! per-tool calls, errors and latency (charts drawn in the page from the router's counters);
//! recent bundle rejections; a search playground showing ranks and scores under a profile.
//!
//! The page is three embedded files (HTML, CSS, vanilla JS; no framework, no CDN) with no data
//! in them; the data is served as JSON under `/ui/api/`, behind the same authentication as
//! `/mcp`. With authentication on, the operator opens `/ui#token=TOKEN`: the fragment never
//! reaches the server, the page keeps the token in `sessionStorage` and sends it as a bearer
//! token with each API request.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Query as UrlQuery, State};
use axum::http::{StatusCode, header};
use axum::response::Response;
use quiver_catalog::search::Query;
use serde_json::{Value, json};

use crate::QuiverServer;
use crate::server::SessionProfile;

const INDEX_HTML: &str = include_str!("dashboard/index.html");
const STYLE_CSS: &str = include_str!("dashboard/style.css");
const APP_JS: &str = include_str!("dashboard/app.js");

/// Rejections kept for the dashboard.
const MAX_REJECTIONS: usize = 50;

/// What the dashboard needs besides the server: the profiles offered in the search playground
/// and the log of recent bundle rejections (fed by the host's scans).
#[derive(Debug, Default)]
pub struct Dashboard {
    profiles: Vec<SessionProfile>,
    rejections: Mutex<VecDeque<Value>>,
}

impl Dashboard {
    /// A dashboard offering `profiles` in its search playground.
    pub fn new(profiles: Vec<SessionProfile>) -> Dashboard {
        Dashboard { profiles, rejections: Mutex::new(VecDeque::new()) }
    }

    /// Records a rejected bundle (its manifest path, the failed stage and the message).
    pub fn rejected(&self, bundle: &str, stage: &str, message: &str) {
        let at_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let mut log = self.rejections.lock().unwrap_or_else(|e| e.into_inner());
        if log.len() == MAX_REJECTIONS {
            log.pop_front();
        }
        log.push_back(json!({"at_ms": at_ms, "bundle": bundle, "stage": stage, "message": message}));
    }
}

#[derive(Clone)]
pub(crate) struct UiState {
    pub(crate) server: QuiverServer,
    pub(crate) dashboard: Arc<Dashboard>,
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    Response::builder()
        .header(header::CONTENT_TYPE, content_type)
        .header(header::CACHE_CONTROL, "no-store")
        .header(
            "content-security-policy",
            "default-src 'self'; style-src 'self'; script-src 'self'; img-src 'self' data:",
        )
        .header("x-frame-options", "DENY")
        .body(Body::from(body))
        .unwrap_or_default()
}

pub(crate) async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX_HTML)
}

pub(crate) async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE_CSS)
}

pub(crate) async fn script() -> Response {
    asset("text/javascript; charset=utf-8", APP_JS)
}

fn json_response(value: &Value) -> Response {
    Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-store")
        .body(Body::from(value.to_string()))
        .unwrap_or_default()
}

/// `GET /ui/api/state`: everything the page shows but the search playground.
pub(crate) async fn state(State(ui): State<UiState>) -> Response {
    json_response(&snapshot(&ui))
}

fn version_text<T: ToString>(v: &Option<T>) -> Value {
    v.as_ref().map(|v| Value::String(v.to_string())).unwrap_or(Value::Null)
}

fn snapshot(ui: &UiState) -> Value {
    let shared = &ui.server.shared;
    let catalog = shared.source.catalog();
    let stats = shared.router.telemetry().snapshot();
    let tools: Vec<Value> = catalog
        .tools()
        .iter()
        .map(|r| {
            let def = catalog.def(r);
            let plugin = catalog.plugin_of(r);
            let life = &def.spec.lifecycle;
            let s = stats.tools.get(&r.name);
            json!({
                "name": r.name,
                "plugin": plugin.manifest.id,
                "version": plugin.manifest.version.to_string(),
                "state": life.state.as_str(),
                "replacement": life.replacement,
                "planned_removal_version": version_text(&life.planned_removal_version),
                "actions": def.spec.actions.iter().map(|a| &a.name).collect::<Vec<_>>(),
                "aliases": def.spec.aliases.iter().map(|a| json!({
                    "name": a.name,
                    "state": a.state.as_str(),
                    "action": a.action,
                    "first_deprecated_version": version_text(&a.first_deprecated_version),
                    "planned_removal_version": version_text(&a.planned_removal_version),
                    "removed_in_version": version_text(&a.removed_in_version),
                })).collect::<Vec<_>>(),
                "calls": s.map(|s| s.calls).unwrap_or(0),
                "errors": s.map(|s| s.status.error).unwrap_or(0),
                "p50_ms": s.map(|s| s.duration_ms.p50).unwrap_or(0.0),
                "p95_ms": s.map(|s| s.duration_ms.p95).unwrap_or(0.0),
                "breaker": s.and_then(|s| s.breaker).map(|b| b.as_str()),
            })
        })
        .collect();
    let plugins: Vec<Value> = catalog
        .plugins()
        .iter()
        .map(|p| {
            let placement = p.backend.placement();
            json!({
                "id": p.manifest.id,
                "version": p.manifest.version.to_string(),
                "signer_key_id": p.provenance.signer_key_id,
                "sha256": p.provenance.sha256,
                "isolation": placement.isolation,
                "detail": placement.detail,
                "tools": p.tools.len(),
            })
        })
        .collect();
    let sessions: Vec<Value> = shared.live_sessions().iter().map(|l| l.view()).collect();
    let rejections: Vec<Value> =
        ui.dashboard.rejections.lock().unwrap_or_else(|e| e.into_inner()).iter().rev().cloned().collect();
    json!({
        "server": {"name": shared.options.name, "version": shared.options.version},
        "totals": {"calls": stats.calls, "errors": stats.status.error, "retries": stats.retries},
        "tools": tools,
        "plugins": plugins,
        "sessions": sessions,
        "rejections": rejections,
        "profiles": ui.dashboard.profiles.iter().map(|p| &p.name).collect::<Vec<_>>(),
    })
}

#[derive(serde::Deserialize)]
pub(crate) struct SearchParams {
    #[serde(default)]
    q: String,
    #[serde(default)]
    profile: String,
}

/// `GET /ui/api/search?q=...&profile=...`: the ranked hits with their scores, as a session of
/// that profile would see them.
pub(crate) async fn search(State(ui): State<UiState>, UrlQuery(params): UrlQuery<SearchParams>) -> Response {
    let Some(profile) = ui.dashboard.profiles.iter().find(|p| p.name == params.profile) else {
        let names: Vec<&str> = ui.dashboard.profiles.iter().map(|p| p.name.as_str()).collect();
        let body =
            json!({"error": format!("unknown profile `{}`; choose one of {}", params.profile, names.join(", "))});
        let mut r = json_response(&body);
        *r.status_mut() = StatusCode::BAD_REQUEST;
        return r;
    };
    let catalog = ui.server.shared.source.catalog();
    let (index, docs) = catalog.search_index();
    let access = &profile.access;
    let filter = |d: usize| {
        let r = &catalog.tools()[docs[d]];
        access.may_see(&r.name, catalog.def(r))
    };
    let query = Query::text(params.q.chars().take(500).collect::<String>()).with_limit(Query::MAX_LIMIT);
    match index.search(&query, &filter) {
        Ok(result) => {
            let hits: Vec<Value> = result
                .hits
                .iter()
                .enumerate()
                .map(|(rank, h)| {
                    let r = &catalog.tools()[docs[h.doc]];
                    json!({"rank": rank + 1, "name": r.name, "score": h.score, "plugin": catalog.plugin_of(r).manifest.id})
                })
                .collect();
            json_response(&json!({"profile": profile.name, "total": result.total, "hits": hits}))
        }
        Err(e) => {
            let mut r = json_response(&json!({"error": e.to_string()}));
            *r.status_mut() = StatusCode::BAD_REQUEST;
            r
        }
    }
}
