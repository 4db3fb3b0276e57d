//! One MCP session: the `rmcp` handler, the session's catalog view and its notifications.
// Logging is deprecated by SEP-2577 (protocol 2026-07-28); Quiver serves revisions up to
// 2025-11-25, where it is current.
#![allow(deprecated)]

use std::borrow::Cow;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use quiver_catalog::{
    Catalog, ExposureMode, LIST_TOOLS, ListToolsArgs, MetaSchema, RUN_TOOL, SearchRequest, Session, TOOL_SEARCH,
    ToolSearchArgs, list_tools_schema, tool_search_schema,
};
use quiver_router::codes::Code;
use quiver_router::{Call, CallOutcome, Caller, Lane};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CustomRequest, CustomResult, ErrorData, GetPromptRequestParams,
    GetPromptResponse, Implementation, InitializeRequestParams, InitializeResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams,
    ReadResourceResponse, ServerCapabilities, ServerConfig, SetLevelRequestParams, SubscribeRequestParams,
    UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::bridge::{CallBridge, ClientSide, level_rank};
use crate::listing::Listing;
use crate::resources;
use crate::results::{call_result_with, json_result, tool_error, unknown_tool};
use crate::server::Shared;
use crate::{SESSION_META_KEY, SessionStore, StoredSession};
use rmcp::transport::streamable_http_server::session::SessionRestoreMarker;

/// The newest protocol revision served. Later revisions drop server-to-client requests, which
/// elicitation (and so approvals) and sampling need.
const NEWEST_PROTOCOL: ProtocolVersion = ProtocolVersion::V_2025_11_25;

/// Default least severe log level sent before the client calls `logging/setLevel`.
const DEFAULT_LOG_RANK: u8 = 1; // info

/// Mutable state of a session, behind a lock never held across an `await`.
struct SessionState {
    session: Session,
    /// The listing of the current surface, for the snapshot it was built from.
    listing: Option<Arc<Listing>>,
    /// Fingerprint of the listing the client was last given or told about.
    announced: u64,
}

/// An initialized session.
pub(crate) struct Live {
    /// Shared with each of the session's calls (`Call::caller`).
    caller: Arc<Caller>,
    mode: ExposureMode,
    /// Profile `structured_text`: structured results also as JSON text.
    structured_text: bool,
    client: Arc<ClientSide>,
    state: Mutex<SessionState>,
    /// Where the session is kept so it can resume (key and store), when it is.
    stored: Option<StoredAt>,
}

/// A session's place in the session store.
struct StoredAt {
    store: Arc<SessionStore>,
    key: String,
    /// The revision of the record this session last wrote or read; writes are serialized so
    /// the store never goes back to an older loaded set.
    rev: tokio::sync::Mutex<u64>,
    /// When this session last wrote its record: a session in use rewrites it after half its
    /// lifetime, so a store's expiry only forgets sessions nobody uses.
    written: Mutex<std::time::Instant>,
}

impl Live {
    /// What the operator dashboard shows of this session.
    pub(crate) fn view(&self) -> serde_json::Value {
        let state = self.lock();
        json!({
            "id": self.caller.session_id,
            "client": self.caller.client,
            "profile": self.caller.mode,
            "mode": self.mode.as_str(),
            "surface_bytes": state.listing.as_ref().map(|l| l.bytes),
            "loaded": state.session.loaded().iter().map(|(n, _)| n).collect::<Vec<_>>(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SessionState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes the session's record (its loaded set changed, or it started), before the answer
    /// that changed it, so the client's next request finds it on any instance. A store that
    /// fails is logged; the session goes on.
    async fn persist(&self) {
        let Some(at) = &self.stored else { return };
        let mut rev = at.rev.lock().await;
        let snapshot = self.lock().session.snapshot();
        let record = StoredSession {
            id: self.caller.session_id.clone(),
            principal: self.caller.principal.clone(),
            profile: self.caller.mode.clone(),
            client: self.caller.client.clone(),
            snapshot,
            rev: *rev + 1,
        };
        match at.store.save(&at.key, &record).await {
            Ok(()) => {
                *rev = record.rev;
                *at.written.lock().unwrap_or_else(|e| e.into_inner()) = std::time::Instant::now();
            }
            Err(e) => {
                tracing::warn!(session = %self.caller.session_id, error = %e, "could not save the session; it will not resume elsewhere with its latest loads")
            }
        }
    }

    /// With a store other instances share: takes the loaded set another instance wrote since
    /// this one last read or wrote the record (the HTTP transport read it for this request).
    /// With any store: rewrites the record after half its lifetime, so a session in use never
    /// expires there.
    async fn refresh(&self, shared: &Shared, context: &RequestContext<RoleServer>) {
        let Some(at) = &self.stored else { return };
        let record = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|p| p.extensions.get::<crate::http::StoreRecord>());
        if let Some(record) = record.filter(|_| at.store.is_shared()) {
            let record = &record.0;
            let mut rev = at.rev.lock().await;
            if record.rev > *rev && record.principal == self.caller.principal {
                let catalog = shared.source.catalog();
                let mut state = self.lock();
                state.session.restore(&catalog, &record.snapshot);
                state.listing = None;
                *rev = record.rev;
            }
        }
        let stale = at.written.lock().unwrap_or_else(|e| e.into_inner()).elapsed() > at.store.ttl() / 2;
        if stale {
            self.persist().await;
        }
    }

    /// The listing of the session's surface on `catalog` (cached until the session or the
    /// snapshot changes).
    fn listing_locked(state: &mut SessionState, shared: &Shared, catalog: &Arc<Catalog>) -> Arc<Listing> {
        if let Some(l) = &state.listing
            && Arc::ptr_eq(&l.catalog, catalog)
        {
            return l.clone();
        }
        let surface = state.session.surface(catalog);
        let listing = Arc::new(Listing::build(&shared.tools.for_catalog(catalog), catalog, &surface));
        state.listing = Some(listing.clone());
        listing
    }

    /// True (and the new fingerprint recorded) when the surface differs from what the client
    /// was last given or told about.
    fn surface_changed(&self, shared: &Shared) -> bool {
        let catalog = shared.source.catalog();
        let mut state = self.lock();
        let listing = Live::listing_locked(&mut state, shared, &catalog);
        if listing.fingerprint == state.announced {
            return false;
        }
        state.announced = listing.fingerprint;
        true
    }

    async fn announce_if_changed(&self, shared: &Shared) {
        if self.surface_changed(shared) {
            tracing::debug!(session = %self.caller.session_id, "surface changed; sending tools/list_changed");
            if let Err(e) = self.client.peer.notify_tool_list_changed().await {
                tracing::debug!(session = %self.caller.session_id, error = %e, "could not send tools/list_changed");
            }
        }
    }

    /// Keeps the session consistent with a new snapshot (a rescan) and tells the client when
    /// its surface changed.
    async fn on_catalog_change(&self, shared: &Shared, catalog: &Catalog) {
        let warnings = {
            let mut state = self.lock();
            state.listing = None;
            state.session.reconcile(catalog)
        };
        for w in warnings {
            tracing::warn!(session = %self.caller.session_id, "{w}");
        }
        self.announce_if_changed(shared).await;
    }
}

/// The handler of one MCP session (one stdio connection, one HTTP session). Made by
/// [`crate::QuiverServer::connection`]; `rmcp` drives it.
pub struct Connection {
    shared: Arc<Shared>,
    live: OnceLock<Arc<Live>>,
    /// Cancelled when the session ends: stops its catalog watcher.
    stop: CancellationToken,
    /// A second handle on another connection's session (the HTTP transport's in-place calls):
    /// dropping it ends nothing.
    view: bool,
    /// The HTTP session this connection serves, once initialized over HTTP.
    http_id: OnceLock<crate::HttpSessionId>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("session", &self.live.get().map(|l| l.caller.session_id.as_str()))
            .finish_non_exhaustive()
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        if self.view {
            return;
        }
        if let Some(id) = self.http_id.get() {
            crate::http_sessions::InPlace::forget(&self.shared, &id.0);
        }
        self.stop.cancel();
        if let Some(live) = self.live.get() {
            crate::hooks::spawn(&self.shared, &live.caller, crate::hooks::HookEvent::SessionEnd, false);
        }
        if self.live.get().is_some()
            && let Some(m) = self.shared.router.metrics()
        {
            m.session_ended();
        }
    }
}

/// The context `rmcp` builds for a request it dispatches: the request's `_meta` and
/// extensions moved out of it. For the calls the transports serve themselves (the stdio call
/// lane, HTTP in-place calls).
pub(crate) fn call_context(
    id: rmcp::model::RequestId,
    peer: rmcp::service::Peer<RoleServer>,
    extensions: &mut rmcp::model::Extensions,
) -> RequestContext<RoleServer> {
    let mut context = RequestContext::new(id, peer);
    context.meta = extensions.remove::<rmcp::model::RequestMetaObject>().unwrap_or_default();
    context.extensions = std::mem::take(extensions);
    context
}

fn not_initialized() -> ErrorData {
    ErrorData::invalid_request("the session is not initialized: send `initialize` first", None)
}

impl Connection {
    pub(crate) fn new(shared: Arc<Shared>) -> Connection {
        Connection {
            shared,
            live: OnceLock::new(),
            stop: CancellationToken::new(),
            view: false,
            http_id: OnceLock::new(),
        }
    }

    /// A handle on this initialized session for calls the HTTP transport serves in place
    /// (`None` before `initialize`). It shares the session's state; dropping it ends nothing.
    fn view(&self) -> Option<Connection> {
        let live = self.live.get()?.clone();
        Some(Connection {
            shared: self.shared.clone(),
            live: OnceLock::from(live),
            stop: self.stop.clone(),
            view: true,
            http_id: OnceLock::new(),
        })
    }

    /// The client's side of an initialized session, for the HTTP transport's in-place calls.
    pub(crate) fn client(&self) -> Option<&ClientSide> {
        self.live.get().map(|l| &*l.client)
    }

    fn live(&self) -> Result<&Arc<Live>, ErrorData> {
        self.live.get().ok_or_else(not_initialized)
    }

    /// The client of an initialized session (the peer `rmcp` gives this session's handlers),
    /// for the stdio call lane's request contexts; `None` before `initialize`.
    pub(crate) fn peer(&self) -> Option<rmcp::service::Peer<RoleServer>> {
        self.live.get().map(|l| l.client.peer.clone())
    }

    fn start(
        &self,
        request: &InitializeRequestParams,
        peer: rmcp::service::Peer<RoleServer>,
        http: Option<&crate::HttpIdentity>,
        resumed: Option<(String, Option<StoredSession>)>,
    ) -> Arc<Live> {
        let shared = &self.shared;
        let client_name = request.client_info.name.clone();
        // Stdio: the client is a local process the operator started, so its name may pick the
        // profile. HTTP: only as the transport allows (see `HttpIdentity`).
        let identity = crate::SessionIdentity {
            client_name: &client_name,
            principal: http.and_then(|h| h.principal.as_ref()),
            client_hint: http.is_none_or(|h| h.client_hint),
        };
        let profile = (shared.profiles)(&identity);
        let principal = identity.principal.map(|p| p.name.clone());
        let (key, record) = match resumed {
            Some((key, record)) => (Some(key), record),
            None => (None, None),
        };
        let session_id = match &record {
            Some(r) => r.id.clone(),
            None => format!("mcp-{}", quiver_telemetry::next_request_id()),
        };
        if let Some(r) = &record
            && r.profile != profile.name
        {
            // The configuration changed (or differs between instances): the current one wins.
            tracing::warn!(session = %session_id, stored = %r.profile, current = %profile.name, "the resumed session's profile is no longer the one this configuration picks; using the current one");
        }
        tracing::info!(session = %session_id, client = %client_name, principal = ?principal, profile = %profile.name, mode = profile.policy.mode.as_str(), "MCP session started");
        let caller = profile.caller(session_id.clone(), client_name, principal.clone());
        let caps = &request.capabilities;
        let client = Arc::new(ClientSide {
            peer,
            log_level: AtomicU8::new(DEFAULT_LOG_RANK),
            can_elicit: caps.elicitation.is_some(),
            can_sample: caps.sampling.is_some(),
        });
        let mode = profile.policy.mode;
        let structured_text = profile.structured_text;
        let mut session = Session::new(session_id, profile.policy, profile.access);
        let catalog = shared.source.catalog();
        if let Some(r) = &record {
            let restored = session.restore(&catalog, &r.snapshot);
            tracing::info!(session = %session.id, restored = ?restored, "MCP session resumed from the session store");
        }
        let mut state = SessionState { session, listing: None, announced: 0 };
        state.announced = Live::listing_locked(&mut state, shared, &catalog).fingerprint;
        let stored = match (key, &shared.options.session_store) {
            (Some(key), Some(store)) => Some(StoredAt {
                store: store.clone(),
                key,
                rev: tokio::sync::Mutex::new(record.as_ref().map_or(0, |r| r.rev)),
                written: Mutex::new(std::time::Instant::now()),
            }),
            _ => None,
        };
        let live = Arc::new(Live {
            caller: Arc::new(caller),
            mode,
            structured_text,
            client,
            state: Mutex::new(state),
            stored,
        });
        self.watch_catalog(live.clone());
        live
    }

    /// The session's key in the store and its stored record, when it has one: HTTP sessions by
    /// their `Mcp-Session-Id` (the record is read only when rmcp replays `initialize` for a
    /// session this instance does not know), stdio sessions by the key the client chose
    /// (`_meta` of `initialize`, else `quiver serve --resume`). A record opened by another
    /// principal is refused.
    async fn resume(
        &self,
        request: &InitializeRequestParams,
        context: &RequestContext<RoleServer>,
        http: Option<&crate::HttpIdentity>,
    ) -> Result<Option<(String, Option<StoredSession>)>, ErrorData> {
        let Some(store) = &self.shared.options.session_store else { return Ok(None) };
        let http_id = context.extensions.get::<crate::HttpSessionId>();
        let (key, restoring) = match http_id {
            Some(id) => (id.0.to_string(), context.extensions.get::<SessionRestoreMarker>().is_some()),
            None if context.extensions.get::<axum::http::request::Parts>().is_some() => return Ok(None),
            None => {
                // rmcp may have moved the request's `_meta` into the context.
                let from_meta = request
                    .meta
                    .as_ref()
                    .and_then(|m| m.0.0.get(SESSION_META_KEY))
                    .or_else(|| context.meta.0.0.get(SESSION_META_KEY));
                let key = match from_meta {
                    Some(Value::String(k)) => Some(k.clone()),
                    Some(_) => {
                        return Err(ErrorData::invalid_params(
                            format!(
                                "`_meta.{SESSION_META_KEY}` of initialize must be a string: the session key to resume"
                            ),
                            None,
                        ));
                    }
                    None => self.shared.options.resume_key.clone(),
                };
                let Some(key) = key else { return Ok(None) };
                if !crate::valid_session_key(&key) {
                    return Err(ErrorData::invalid_params(
                        format!(
                            "session key `{key}` is not valid: use 1 to {} characters of A-Z, a-z, 0-9, `_`, `.` and `-`",
                            crate::MAX_SESSION_KEY_LEN
                        ),
                        None,
                    ));
                }
                (key, true)
            }
        };
        if !restoring {
            return Ok(Some((key, None)));
        }
        let record = match store.load(&key).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "could not read the session store; the session starts anew");
                None
            }
        };
        let principal = http.and_then(|h| h.principal.as_ref()).map(|p| p.name.clone());
        if let Some(r) = &record
            && r.principal != principal
        {
            tracing::warn!(stored = ?r.principal, principal = ?principal, "refused to resume a session opened by another principal");
            return Err(ErrorData::invalid_request("no such session", None));
        }
        Ok(Some((key, record)))
    }

    /// Follows catalog changes for this session until it ends.
    fn watch_catalog(&self, live: Arc<Live>) {
        let shared = self.shared.clone();
        let stop = self.stop.clone();
        let mut changes = shared.changes.clone();
        changes.mark_unchanged();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    changed = changes.changed() => {
                        if changed.is_err() {
                            break;
                        }
                        let catalog = changes.borrow_and_update().clone();
                        live.on_catalog_change(&shared, &catalog).await;
                    }
                }
            }
        });
    }

    fn offers(live: &Live, meta_tool: &str) -> bool {
        live.mode.meta_tools().contains(&meta_tool)
    }

    /// `tool_search`: search, load the hits into the session, tell the client its list changed.
    async fn tool_search(&self, live: &Live, arguments: Value) -> CallToolResponse {
        let request = match parse_args::<ToolSearchArgs>(TOOL_SEARCH, tool_search_schema(), arguments) {
            Ok(r) => r,
            Err(e) => return tool_error(e).into(),
        };
        let catalog = self.shared.source.catalog();
        let (response, before) = {
            let mut state = live.lock();
            state.session.next_turn();
            let before = Live::listing_locked(&mut state, &self.shared, &catalog);
            let r = state.session.search(&catalog, &request, true);
            if r.as_ref().is_ok_and(|r| !r.loaded.is_empty() || !r.unloaded.is_empty()) {
                state.listing = None;
            }
            (r, before)
        };
        match response {
            Ok(r) => {
                if let Some(m) = self.shared.router.metrics() {
                    m.search_result(r.total, r.loaded.len());
                }
                let mut value = serde_json::to_value(&r).unwrap_or(Value::Null);
                if !r.loaded.is_empty() {
                    // Report what changed for the client: tools newly in its list, and loaded
                    // tools the profile's caps left out of it.
                    let after = {
                        let mut state = live.lock();
                        Live::listing_locked(&mut state, &self.shared, &catalog)
                    };
                    let listed_in = |l: &Listing, n: &str| l.tools.iter().any(|t| t.name == n);
                    let added: Vec<&String> =
                        r.loaded.iter().filter(|n| listed_in(&after, n) && !listed_in(&before, n)).collect();
                    let unlisted: Vec<&String> = r.loaded.iter().filter(|n| !listed_in(&after, n)).collect();
                    if let Value::Object(m) = &mut value {
                        m.insert("loaded".into(), json!(added));
                        let mut note = String::new();
                        if !added.is_empty() {
                            note.push_str("The loaded tools are now in your tool list: call them by name. ");
                        }
                        if !unlisted.is_empty() {
                            m.insert("not_listed".into(), json!(unlisted));
                            note.push_str("Tools in not_listed did not fit this session's tool list. ");
                        }
                        // Weaker matches are listed, not loaded (a search loads its confident
                        // matches only, so the session keeps room for more loads).
                        let weaker: Vec<&str> = r
                            .tools
                            .iter()
                            .map(|t| t.name.as_str())
                            .filter(|n| !listed_in(&after, n) && !r.loaded.iter().any(|l| l == n))
                            .collect();
                        if !weaker.is_empty() {
                            note.push_str(&format!(
                                "Weaker matches were not loaded ({}): search for one by name to load it. ",
                                weaker.join(", ")
                            ));
                        }
                        note.push_str(if Connection::offers(live, RUN_TOOL) {
                            "If your tool list does not show a tool, call it through run_tool."
                        } else {
                            "If your client does not refresh its tool list, list the tools again."
                        });
                        m.insert("note".into(), Value::String(note));
                        if added.is_empty() && unlisted.is_empty() {
                            m.remove("loaded");
                            m.remove("note");
                        } else {
                            // Each newly loaded tool's prompt snippet: how to use it, shown the
                            // moment it becomes callable.
                            let snippets: serde_json::Map<String, Value> = added
                                .iter()
                                .chain(unlisted.iter())
                                .filter_map(|n| {
                                    let snippet = catalog.resolve(n)?.def.spec.prompt_snippet.trim().to_owned();
                                    (!snippet.is_empty()).then(|| ((*n).clone(), Value::String(snippet)))
                                })
                                .collect();
                            if !snippets.is_empty() {
                                m.insert("how_to_use".into(), Value::Object(snippets));
                            }
                        }
                    }
                    live.persist().await;
                    live.announce_if_changed(&self.shared).await;
                } else if !r.unloaded.is_empty() {
                    live.persist().await;
                    live.announce_if_changed(&self.shared).await;
                }
                json_result(value).into()
            }
            Err(e) => tool_error(quiver_abi::ToolError::invalid(e.to_string())).into(),
        }
    }

    /// `list_tools`: everything `run_tool` can reach, filtered and paged; loads nothing.
    fn list_tools_meta(&self, live: &Live, arguments: Value) -> CallToolResponse {
        let request = match parse_args::<ListToolsArgs>(LIST_TOOLS, list_tools_schema(), arguments) {
            Ok(r) => r,
            Err(e) => return tool_error(e).into(),
        };
        let catalog = self.shared.source.catalog();
        let response = {
            let mut state = live.lock();
            state.session.next_turn();
            state.session.search(&catalog, &request, false)
        };
        match response {
            Ok(r) => json_result(serde_json::to_value(&r).unwrap_or(Value::Null)).into(),
            Err(e) => tool_error(quiver_abi::ToolError::invalid(e.to_string())).into(),
        }
    }

    /// Any other call: through the router, with this request's bridge; notifications the tool
    /// causes are sent from this task, before the response.
    async fn dispatch(
        &self,
        live: &Live,
        params: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<Routed, ErrorData> {
        let name = params.name.into_owned();
        let arguments = Value::Object(params.arguments.unwrap_or_default());
        // The tool and arguments a repeated malformed call is judged by (inside `run_tool`), and
        // for `run_tool`, its envelope: a mistake in `run_tool`'s own fields counts against
        // `run_tool` with that envelope, not against the tool it names.
        let (target, target_args) = match (name == RUN_TOOL, arguments.get("name").and_then(Value::as_str)) {
            (true, Some(inner)) => (inner.to_owned(), arguments.get("arguments").cloned().unwrap_or(Value::Null)),
            _ => (name.clone(), arguments.clone()),
        };
        let envelope = (name == RUN_TOOL && target != RUN_TOOL).then(|| arguments.clone());
        {
            let mut state = live.lock();
            state.session.next_turn();
            let repeats = &state.session.repeats;
            let refused = envelope.as_ref().and_then(|e| repeats.refusal(RUN_TOOL, e));
            if let Some(refusal) = refused.or_else(|| repeats.refusal(&target, &target_args)) {
                return Ok(Routed::Answered(
                    tool_error(
                        quiver_abi::ToolError::invalid(refusal).with_details(json!({ "hint": { "level": "refused" } })),
                    )
                    .into(),
                ));
            }
        }
        // The router serves `run_tool` (the generic lane) whatever the mode lists: it is no side
        // door, every check of a direct call applies.
        let lane = if name == RUN_TOOL { Lane::Generic } else { Lane::Typed };
        let confirmed =
            context.meta.0.0.get(quiver_router::codes::CONFIRM_META_KEY).and_then(Value::as_bool).unwrap_or(false);
        let logger = match (&lane, arguments.get("name").and_then(Value::as_str)) {
            (Lane::Generic, Some(inner)) => inner.to_owned(),
            _ => name.clone(),
        };
        let bridge = Arc::new(CallBridge::new(
            live.client.clone(),
            context.id.clone(),
            context.meta.get_progress_token(),
            logger,
        ));
        let call = Call {
            name,
            arguments,
            lane,
            caller: live.caller.clone(),
            request_id: None,
            confirmed,
            cancel: context.ct.clone(),
            bridge: bridge.clone(),
            // The router adds the plugin's `plugin_config` entry itself.
            config: Value::Null,
            // Trace export: a client's W3C trace context parents the call's span.
            trace_parent: if self.shared.router.exports_traces() {
                let meta = |k: &str| context.meta.0.0.get(k).and_then(Value::as_str);
                quiver_telemetry::TraceParent::from_meta(meta("traceparent"), meta("tracestate")).map(Box::new)
            } else {
                None
            },
            // Sent on as text (`results::call_line`, or as the text copy of structured content).
            outputs_as_text: true,
        };
        let peer = &live.client.peer;
        // Boxed: the router's future is large, and rmcp moves this handler's future into a
        // task of its own per request (memmoves of its whole size in the profile).
        let mut routed = Box::pin(self.shared.router.call(call));
        let outcome: CallOutcome = loop {
            tokio::select! {
                biased;
                _ = bridge.ready() => {
                    for n in bridge.take() {
                        let _ = peer.send_notification(n).await;
                    }
                }
                outcome = &mut routed => break outcome,
            }
        };
        for n in bridge.take() {
            let _ = peer.send_notification(n).await;
        }
        if lane == Lane::Typed
            && let Some(e) = unknown_tool(&outcome)
        {
            return Err(e);
        }
        let mut outcome = outcome;
        // A `run_tool` call the router refused before reaching any tool: its envelope was wrong.
        match envelope {
            // `quiver.read_result` is no catalog tool and its envelope was read: a bad handle
            // gets no hint about `run_tool`'s fields (nor, for want of a schema, any other).
            Some(_) if outcome.meta.called_name == quiver_router::READ_RESULT => {}
            Some(envelope) if outcome.meta.tool().is_none() => self.escalate(live, RUN_TOOL, &envelope, &mut outcome),
            _ => self.escalate(live, &target, &target_args, &mut outcome),
        }
        if live.mode.uses_intent() {
            self.note_call(live, &target).await;
        }
        Ok(Routed::Outcome(Box::new(outcome), live.structured_text))
    }

    /// `tools/call`: the meta tools answered here, any other call through the router (its
    /// outcome, for the caller to turn into a result or a response line).
    pub(crate) async fn call_tool_routed(
        &self,
        params: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<Routed, ErrorData> {
        let live = self.live()?.clone();
        live.refresh(&self.shared, &context).await;
        let arguments = || Value::Object(params.arguments.clone().unwrap_or_default());
        if params.name == TOOL_SEARCH && Connection::offers(&live, TOOL_SEARCH) {
            let r = self.tool_search(&live, arguments()).await;
            self.shared.router.record_meta_call(&live.caller, TOOL_SEARCH, !is_error(&r));
            return Ok(Routed::Answered(r));
        }
        if params.name == LIST_TOOLS && Connection::offers(&live, LIST_TOOLS) {
            let r = self.list_tools_meta(&live, arguments());
            self.shared.router.record_meta_call(&live.caller, LIST_TOOLS, !is_error(&r));
            return Ok(Routed::Answered(r));
        }
        self.dispatch(&live, params, context).await
    }

    /// A call is intent (adaptive, hybrid): a tool called by a name not in the session's tool
    /// list joins it, and the client is told its list changed (before the answer).
    async fn note_call(&self, live: &Live, name: &str) {
        let catalog = self.shared.source.catalog();
        let changed = {
            let mut state = live.lock();
            let listing = Live::listing_locked(&mut state, &self.shared, &catalog);
            let Some(resolved) = catalog.resolve(name) else { return };
            // The common case, a tool already listed, costs one lookup.
            if listing.tools.iter().any(|t| t.name == resolved.tool.name) {
                return;
            }
            let added = state.session.note_call(&catalog, name).is_some();
            if added {
                state.listing = None;
            }
            added
        };
        if changed {
            live.persist().await;
            live.announce_if_changed(&self.shared).await;
        }
    }

    /// Escalating hints for a repeated identical malformed call (see `quiver_catalog::hints`).
    /// Only `invalid_arguments` errors count: the tool was visible to the caller, so its schema
    /// reveals nothing new.
    fn escalate(&self, live: &Live, tool: &str, arguments: &Value, outcome: &mut CallOutcome) {
        let mut state = live.lock();
        match &mut outcome.response.error {
            Some(e) if Code::of(e) == Some(Code::InvalidArguments) => {
                let catalog = self.shared.source.catalog();
                // The input schema of the tool the name reaches (an alias's too, with the action
                // it fills in as the only one); for a meta tool (a malformed `run_tool`
                // envelope), the schema it advertises.
                let schema = match quiver_catalog::meta_schema(tool) {
                    Some(meta) => Some(meta.schema.clone()),
                    None => catalog.resolve(tool).map(|r| match r.action {
                        Some(action) => {
                            let mut schema = (*r.def.input_schema).clone();
                            if let Some(p) = schema.pointer_mut("/properties/action") {
                                *p = json!({ "type": "string", "enum": [action] });
                            }
                            Arc::new(schema)
                        }
                        None => r.def.input_schema.clone(),
                    }),
                };
                let hint = state.session.repeats.record_failure(tool, arguments, schema.as_deref());
                e.message = format!("{} {}", e.message, hint.message);
                if let Value::Object(d) = &mut e.details {
                    d.insert("hint".into(), hint.details);
                } else if e.details.is_null() {
                    e.details = json!({ "hint": hint.details });
                }
            }
            None => state.session.repeats.record_success(tool, arguments),
            Some(_) => {}
        }
    }
}

/// How a `tools/call` went ([`Connection::call_tool_routed`]).
pub(crate) enum Routed {
    /// Answered without the router (a meta tool, a refused repeat).
    Answered(CallToolResponse),
    /// The router's outcome, and whether structured content is repeated as text (profile
    /// `structured_text`).
    Outcome(Box<CallOutcome>, bool),
}

/// Whether a meta tool's result is an error (for its counters).
fn is_error(r: &CallToolResponse) -> bool {
    matches!(r, CallToolResponse::Complete(c) if c.is_error == Some(true))
}

/// A meta tool's arguments: checked against its advertised schema (repairable errors), then read
/// into its type.
fn parse_args<T: serde::de::DeserializeOwned + Into<SearchRequest>>(
    tool: &str,
    schema: &MetaSchema,
    arguments: Value,
) -> Result<SearchRequest, quiver_abi::ToolError> {
    quiver_router::meta_arguments(tool, schema, &arguments)?;
    // The schema was derived from `T`: what it accepts, `T` reads.
    serde_json::from_value::<T>(arguments)
        .map(Into::into)
        .map_err(|e| quiver_abi::ToolError::invalid(format!("invalid arguments of `{tool}`: {e}")))
}

impl ServerHandler for Connection {
    fn get_info(&self) -> ServerConfig {
        let o = &self.shared.options;
        let capabilities = ServerCapabilities::builder()
            .enable_logging()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_resources()
            .build();
        let mut info = ServerConfig::new(capabilities)
            .with_protocol_version(NEWEST_PROTOCOL)
            .with_server_info(Implementation::new(o.name.clone(), o.version.clone()).with_title("Quiver tool host"));
        info.instructions.clone_from(&o.instructions);
        info
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&NEWEST_PROTOCOL))
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        if self.live.get().is_some() {
            return Err(ErrorData::invalid_request("the session is already initialized", None));
        }
        context.peer.set_peer_info(request.clone());
        let result = self.negotiate_initialize(&request)?;
        let http = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<crate::HttpIdentity>());
        let resumed = self.resume(&request, &context, http).await?;
        let persist = resumed.is_some();
        let was_stored = resumed.as_ref().is_some_and(|(_, record)| record.is_some());
        let live = self.start(&request, context.peer.clone(), http, resumed);
        if persist {
            live.persist().await;
        }
        let registered = Arc::downgrade(&live);
        crate::hooks::spawn(&self.shared, &live.caller, crate::hooks::HookEvent::SessionStart, was_stored);
        if self.live.set(live).is_ok() {
            self.shared.register_session(registered);
            if let Some(m) = self.shared.router.metrics() {
                m.session_started();
            }
            // Over HTTP, `tools/call` may be served beside rmcp's session worker (see
            // `http_sessions.rs`): the transport finds this session's handler by its id.
            if let Some(id) = context.extensions.get::<crate::HttpSessionId>()
                && let Some(view) = self.view()
                && self.http_id.set(id.clone()).is_ok()
            {
                crate::http_sessions::InPlace::register(&self.shared, id.0.clone(), view);
            }
        }
        Ok(result)
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let live = self.live()?;
        live.refresh(&self.shared, &context).await;
        let catalog = self.shared.source.catalog();
        let listing = {
            let mut state = live.lock();
            let listing = Live::listing_locked(&mut state, &self.shared, &catalog);
            state.announced = listing.fingerprint;
            listing
        };
        let cursor = request.as_ref().and_then(|r| r.cursor.as_deref());
        if cursor.is_none() {
            // A surface is sent once per listing, counted at its first page.
            let n_meta = listing.tools.iter().filter(|t| quiver_catalog::META_TOOLS.contains(&t.name.as_ref())).count();
            let n_total = listing.tools.len();
            self.shared.router.record_surface(&live.caller, n_total - n_meta, n_total, listing.bytes);
        }
        listing.page(cursor, self.shared.options.page_size)
    }

    async fn call_tool(
        &self,
        params: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        Ok(match self.call_tool_routed(params, context).await? {
            Routed::Answered(r) => r,
            Routed::Outcome(outcome, structured_text) => call_result_with(*outcome, structured_text).into(),
        })
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let live = self.live()?;
        resources::list(&self.shared.source.catalog(), &live.caller.access)
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.live()?;
        resources::templates()
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let live = self.live()?;
        let catalog = self.shared.source.catalog();
        resources::read(&request.uri, &catalog, &live.caller.access, &self.shared.router, &live.caller.session_id)
            .map(Into::into)
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let live = self.live()?;
        live.client.log_level.store(level_rank(&request.level), Ordering::Relaxed);
        Ok(())
    }

    async fn on_initialized(&self, _context: NotificationContext<RoleServer>) {}

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        Err(crate::wire::method_not_found(&request.method))
    }

    async fn get_prompt(
        &self,
        _request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        Err(crate::wire::method_not_found("prompts/get"))
    }

    async fn subscribe(
        &self,
        _request: SubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Err(crate::wire::method_not_found("resources/subscribe"))
    }

    async fn unsubscribe(
        &self,
        _request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Err(crate::wire::method_not_found("resources/unsubscribe"))
    }
}

/// Logs a JSON-RPC error answer of a call: the client's own mistakes (an unknown tool, bad
/// parameters, a malformed request) only at debug level, since any client can make them and the
/// client is told; anything else, the server's failures, as a warning.
pub(crate) fn log_error_answer(id: &rmcp::model::RequestId, error: &rmcp::model::ErrorData) {
    use rmcp::model::ErrorCode;
    let clients = [ErrorCode::INVALID_PARAMS, ErrorCode::METHOD_NOT_FOUND, ErrorCode::INVALID_REQUEST];
    if clients.contains(&error.code) {
        tracing::debug!(%id, code = error.code.0, message = %error.message, "answered with an error");
    } else {
        tracing::warn!(%id, ?error, "response error");
    }
}
