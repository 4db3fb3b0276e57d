//! The streamable HTTP transport: `rmcp`'s session-managing service at `/mcp`, served with
//! axum. `rmcp` checks `Host` and `Origin` (403 for anything but the allowed ones: loopback by
//! default); the `/mcp` handler in front of it (which then calls `rmcp`'s service in place)
//! answers bodies that are too large or not JSON-RPC with a JSON-RPC error, so every client sees
//! a protocol error rather than a plain-text one. A body is parsed once, by `rmcp`; the handler
//! reads the bytes again only to word the error of one `rmcp` refused.
//!
//! Operations: `GET /metrics` is the Prometheus text exposition of the router's
//! [`quiver_telemetry::Metrics`], behind the same authentication as `/mcp` (404 when metrics
//! are off); [`serve_metrics_on`] serves it alone for stdio mode.
//!
//! Security (issue 10): with `auth`, every `/mcp` request needs a valid bearer token (401 with
//! `WWW-Authenticate: Bearer resource_metadata=...` otherwise, and the RFC 9728 metadata at
//! `/.well-known/oauth-protected-resource[/mcp]`); a session belongs to the principal that
//! opened it. Without `auth` only a loopback bind is served unless `insecure_no_auth`. Sessions
//! are capped (503 beyond `max_sessions`), closed after `session_idle_timeout` without a request,
//! and each has a bounded queue (`max_requests_per_session`); connections are capped and closed
//! when idle (no byte either way) for the idle timeout, when the first byte of a request does
//! not arrive within [`FIRST_BYTE_TIMEOUT`], or when a request's head is still arriving after
//! [`HttpOptions::request_head_timeout`] (a client dripping its headers a byte at a time would
//! otherwise hold a slot forever, since each byte restarts the idle timer); a request refused
//! for its credentials (401) closes its connection.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use rmcp::model::JsonRpcError;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::local::SessionConfig;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use quiver_telemetry::Metrics;

use crate::auth::{AuthFailure, Authenticator, Principal};
use crate::dashboard::{self, Dashboard, UiState};
use crate::http_sessions::{QuiverSessions, Refused, RequestBody};
use crate::wire::{Framing, Refusal, error_json, parse, too_large};
use crate::{QuiverServer, SessionStore};

/// Where the protected resource metadata (RFC 9728) is served.
pub const RESOURCE_METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

/// A connection whose first request byte does not arrive within this is closed.
pub const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(10);

/// A request's head (request line and headers) must arrive within this of its first byte
/// (the default of [`HttpOptions::request_head_timeout`]).
pub const REQUEST_HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// The session store's record of the request's session, read by the transport (shared stores
/// only), for the session to take what another instance changed.
#[derive(Debug, Clone)]
pub(crate) struct StoreRecord(pub(crate) Arc<crate::StoredSession>);

/// Who opened an HTTP request, as the transport established it; read by the session when it
/// starts (through the request parts `rmcp` hands to the handler).
#[derive(Debug, Clone)]
pub struct HttpIdentity {
    /// The authenticated principal; `None` when the server runs without authentication.
    pub principal: Option<Principal>,
    /// True when the client's self-declared name may pick the profile (loopback bind without
    /// authentication only).
    pub client_hint: bool,
}

/// The path the MCP endpoint is served at.
pub const MCP_PATH: &str = "/mcp";

/// The path of the Prometheus metrics (same authentication as [`MCP_PATH`]).
pub const METRICS_PATH: &str = "/metrics";

/// Content type of the Prometheus text exposition format.
pub const PROMETHEUS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Serves only `GET /metrics` (for stdio mode: `quiver serve --metrics ADDR`), with `auth` when
/// given; without it only a loopback address is served. Runs until `shutdown` is cancelled.
pub async fn serve_metrics_on(
    metrics: Arc<Metrics>,
    listener: TcpListener,
    auth: Option<Arc<Authenticator>>,
    shutdown: CancellationToken,
) -> io::Result<()> {
    let local = listener.local_addr()?;
    if auth.is_none() && !local.ip().is_loopback() {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "refusing to serve metrics on {local} without authentication: configure server.auth in quiver.yaml or bind a loopback address"
            ),
        ));
    }
    let gate = Arc::new(Gate {
        auth,
        client_hint: false,
        sessions: Arc::new(LocalSessionManager::default()),
        max_sessions: 1,
        owners: Mutex::new(HashMap::new()),
        store: None,
        max_bytes: 0,
    });
    let app = axum::Router::new()
        .route(METRICS_PATH, axum::routing::get(metrics_page).with_state(Some(metrics)))
        .route_layer(axum::middleware::from_fn_with_state(gate, operator_only));
    tracing::info!(addr = %local, path = METRICS_PATH, "serving metrics over HTTP");
    axum::serve(listener, app).with_graceful_shutdown(async move { shutdown.cancelled().await }).await
}

/// Who may reach the HTTP transport, and the bounds of its sessions.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Browser origins (`scheme://host[:port]`, `:*` for any port; without a port, the scheme's
    /// default port) allowed besides the loopback ones (`http(s)://localhost`, `127.0.0.1`,
    /// `[::1]`, any port). A request whose `Origin`
    /// is not allowed gets 403; requests without `Origin` (non-browser clients) pass.
    pub allowed_origins: Vec<String>,
    /// `Host` names allowed besides `localhost`, `127.0.0.1` and `::1` (DNS-rebinding
    /// protection); needed when serving under another name. A specific (non-wildcard) address
    /// the server is bound to is added automatically.
    pub allowed_hosts: Vec<String>,
    /// Cancel to stop serving: no new connection is taken, calls still running answer (within
    /// `shutdown_grace`), then the sessions end and `serve_http` returns.
    pub shutdown: CancellationToken,
    /// Bearer authentication; `None`: none (then only a loopback bind is served, unless
    /// `insecure_no_auth`).
    pub auth: Option<Arc<Authenticator>>,
    /// Serve a non-loopback address without authentication (the operator said so explicitly).
    pub insecure_no_auth: bool,
    /// Most sessions at once (503 beyond).
    pub max_sessions: usize,
    /// A session (and a connection) idle this long is closed.
    pub session_idle_timeout: Duration,
    /// Queue bound of each session.
    pub max_requests_per_session: usize,
    /// Longest a request's head may take to arrive, from its first byte.
    pub request_head_timeout: Duration,
    /// At shutdown, how long calls still running may take to answer before their sessions end.
    pub shutdown_grace: Duration,
    /// The operator dashboard at `/ui` (its data behind the same authentication as `/mcp`);
    /// `None`: no dashboard.
    pub dashboard: Option<Arc<Dashboard>>,
}

impl Default for HttpOptions {
    fn default() -> HttpOptions {
        HttpOptions {
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            shutdown: CancellationToken::new(),
            auth: None,
            insecure_no_auth: false,
            max_sessions: 256,
            session_idle_timeout: Duration::from_secs(600),
            max_requests_per_session: 64,
            request_head_timeout: REQUEST_HEAD_TIMEOUT,
            shutdown_grace: Duration::from_secs(10),
            dashboard: None,
        }
    }
}

impl HttpOptions {
    /// The options of `server` in a configuration (auth is built by the caller, which reads the
    /// JWKS file).
    pub fn from_config(config: &quiver_manifest::ServerConfig) -> HttpOptions {
        HttpOptions {
            allowed_origins: config.allowed_origins.clone(),
            max_sessions: config.max_sessions as usize,
            session_idle_timeout: Duration::from_millis(config.session_idle_timeout_ms),
            max_requests_per_session: config.max_requests_per_session as usize,
            ..HttpOptions::default()
        }
    }
}

/// How often an open response stream sends a keep-alive: rmcp's 15 s, or a third of the idle
/// timeout when that is shorter (at least 100 ms).
fn sse_keep_alive(idle: Duration) -> Duration {
    (idle / 3).clamp(Duration::from_millis(100), Duration::from_secs(15))
}

/// An allowed origin as the operator means it: an entry without a port names the scheme's
/// default port, as an `Origin` without one does (RFC 6454), where rmcp would let it match every
/// port. `:*`, explicit ports, `null` and unknown schemes are kept as written.
fn exact_origin(entry: &str) -> String {
    let entry = entry.trim();
    let (default_port, authority) = match entry.split_once("://") {
        Some(("https", authority)) => (443, authority),
        Some(("http", authority)) => (80, authority),
        _ => return entry.to_owned(),
    };
    // `[::1]:8080` has its port after the bracket; `host:8080` after the one colon.
    let has_port = match authority.rfind(']') {
        Some(end) => authority[end..].contains(':'),
        None => authority.contains(':'),
    };
    if has_port { entry.to_owned() } else { format!("{entry}:{default_port}") }
}

const LOOPBACK_ORIGINS: [&str; 6] = [
    "http://localhost:*",
    "http://127.0.0.1:*",
    "http://[::1]:*",
    "https://localhost:*",
    "https://127.0.0.1:*",
    "https://[::1]:*",
];

/// Serves MCP over streamable HTTP at `http://ADDR/mcp` until `opts.shutdown` is cancelled.
pub async fn serve_http(server: QuiverServer, addr: SocketAddr, opts: HttpOptions) -> io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    serve_http_on(server, listener, opts).await
}

/// [`serve_http`] on a listener the caller bound (e.g. to port 0, reading the port from it).
pub async fn serve_http_on(server: QuiverServer, listener: TcpListener, opts: HttpOptions) -> io::Result<()> {
    let local = listener.local_addr()?;
    let loopback = local.ip().is_loopback();
    if opts.auth.is_none() && !loopback {
        if !opts.insecure_no_auth {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "refusing to serve MCP on {local} without authentication: anyone who can reach it could run the tools. Configure server.auth (bearer tokens: `quiver token`, or jwt) in quiver.yaml, bind a loopback address, or pass --insecure-no-auth if a proxy in front authenticates"
                ),
            ));
        }
        tracing::warn!(addr = %local, "serving MCP WITHOUT AUTHENTICATION on a non-loopback address (--insecure-no-auth); every profile choice falls back to the default profile");
    }
    let mut hosts: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    if !local.ip().is_unspecified() && !local.ip().is_loopback() {
        hosts.push(local.ip().to_string());
    }
    hosts.extend(opts.allowed_hosts.iter().cloned());
    let mut origins: Vec<String> = LOOPBACK_ORIGINS.iter().map(|s| (*s).to_owned()).collect();
    origins.extend(opts.allowed_origins.iter().map(|o| exact_origin(o)));
    let max_bytes = server.options().max_message_bytes;
    let sessions_end = CancellationToken::new();
    let mut config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts)
        .with_allowed_origins(origins)
        .enforce_origin_validation()
        .with_max_request_body_bytes(max_bytes)
        // Not the shutdown token itself: sessions end only once the calls still running have
        // answered (or the grace is over), see `drain` below.
        .with_cancellation_token(sessions_end.clone())
        // An open response stream (a call still running, a GET stream) sends a keep-alive well
        // within the idle timeout, so its connection is never closed as idle while it waits.
        .with_sse_keep_alive(Some(sse_keep_alive(opts.session_idle_timeout)));
    // With a session store, rmcp keeps each session's `initialize` there and replays it when a
    // request names a session this instance does not know (a restart, another instance).
    let store = server.options().session_store.clone();
    if let Some(store) = &store {
        config.session_store = Some(Arc::new(crate::sessions::RmcpStore(store.clone())));
        tracing::info!(store = %store.describe(), "sessions resume from the session store");
    }
    let factory = server.clone();
    let mut sessions = LocalSessionManager::default();
    let mut session_config = SessionConfig::default();
    // Idle sessions are closed by the sweeper below, not by rmcp's worker (whose timer does not
    // see the calls served in place).
    session_config.keep_alive = None;
    session_config.channel_capacity = opts.max_requests_per_session.max(1);
    session_config.init_timeout = Some(opts.session_idle_timeout.min(Duration::from_secs(30)));
    sessions.session_config = session_config;
    let sessions = Arc::new(sessions);
    let manager = Arc::new(QuiverSessions {
        local: sessions.clone(),
        shared: server.shared.clone(),
        worker_calls: Default::default(),
    });
    spawn_idle_sweeper(manager.clone(), opts.session_idle_timeout, opts.shutdown.clone());
    let service: McpService = StreamableHttpService::new(move || Ok(factory.connection()), manager.clone(), config);
    let gate = Arc::new(Gate {
        auth: opts.auth.clone(),
        client_hint: loopback && opts.auth.is_none(),
        sessions,
        max_sessions: opts.max_sessions.max(1),
        owners: Mutex::new(HashMap::new()),
        store,
        max_bytes,
    });
    let endpoint = Arc::new(Endpoint { gate: gate.clone(), service });
    let metadata = axum::routing::get(resource_metadata).with_state(gate.clone());
    let mut operator = axum::Router::new()
        .route(METRICS_PATH, axum::routing::get(metrics_page).with_state(server.shared.router.metrics().cloned()));
    if let Some(dashboard) = &opts.dashboard {
        let ui = UiState { server: server.clone(), dashboard: dashboard.clone() };
        operator = operator
            .route("/ui/api/state", axum::routing::get(dashboard::state).with_state(ui.clone()))
            .route("/ui/api/search", axum::routing::get(dashboard::search).with_state(ui));
    }
    let operator = operator.route_layer(axum::middleware::from_fn_with_state(gate.clone(), operator_only));
    // The page itself holds no data (it is the same for everyone); its API is authenticated.
    let operator = if opts.dashboard.is_some() {
        operator
            .route("/ui", axum::routing::get(dashboard::index))
            .route("/ui/", axum::routing::get(dashboard::index))
            .route("/ui/style.css", axum::routing::get(dashboard::style))
            .route("/ui/app.js", axum::routing::get(dashboard::script))
    } else {
        operator
    };
    // One handler in front of rmcp: authentication first, then sessions, then the body; it
    // calls rmcp's service in place (no middleware layer, no per-request clone of the service).
    let app = axum::Router::new()
        .route(MCP_PATH, axum::routing::any(admit).with_state(endpoint))
        .route(RESOURCE_METADATA_PATH, metadata.clone())
        .route(&format!("{RESOURCE_METADATA_PATH}{MCP_PATH}"), metadata)
        .merge(operator);
    tracing::info!(addr = %local, path = MCP_PATH, auth = opts.auth.is_some(), "serving MCP over streamable HTTP");
    // At shutdown no connection is accepted; calls still running get `shutdown_grace` to answer
    // on their open streams, then the sessions (and their GET streams) end and the server
    // returns once the connections have closed.
    let drain = {
        let (shutdown, manager, grace) = (opts.shutdown.clone(), manager.clone(), opts.shutdown_grace);
        async move {
            shutdown.cancelled().await;
            let until = tokio::time::Instant::now() + grace;
            while manager.running_calls() > 0 && tokio::time::Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            // Calls still running are answered with an error and cancelled; their answers get
            // a moment to go out on their streams before the sessions end.
            if manager.running_calls() > 0 {
                let answered = manager.answer_at_shutdown(grace);
                tracing::warn!(answered, "calls still running after the shutdown grace were cancelled");
                let flush = tokio::time::Instant::now() + Duration::from_millis(500);
                while manager.running_calls() > 0 && tokio::time::Instant::now() < flush {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            sessions_end.cancel();
        }
    };
    tokio::spawn(drain);
    let shutdown = opts.shutdown.clone();
    let listener = GuardedListener {
        inner: listener,
        slots: Arc::new(Semaphore::new(opts.max_sessions.max(1).saturating_mul(4))),
        idle: opts.session_idle_timeout,
        head_timeout: opts.request_head_timeout,
    };
    axum::serve(listener, app).with_graceful_shutdown(async move { shutdown.cancelled().await }).await
}

/// Closes idle sessions: checked every eighth of the idle timeout (between 10 ms and 1 s), so
/// a session closes between its idle timeout and that much later.
fn spawn_idle_sweeper(manager: Arc<QuiverSessions>, idle: Duration, stop: CancellationToken) {
    let tick = (idle / 8).clamp(Duration::from_millis(10), Duration::from_secs(1));
    tokio::spawn(async move {
        let mut every = tokio::time::interval(tick);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = every.tick() => manager.close_idle(idle).await,
            }
        }
    });
}

/// `rmcp`'s streamable HTTP service as Quiver serves it.
type McpService = StreamableHttpService<crate::connection::Connection, QuiverSessions>;

/// The `/mcp` endpoint: the gate, then `rmcp`'s service, called in place. (As a `tower`
/// service behind a middleware, `rmcp`'s service was cloned per request, its configuration
/// with it: every allowed host and origin string allocated and freed again per request.)
struct Endpoint {
    gate: Arc<Gate>,
    service: McpService,
}

impl Endpoint {
    async fn serve(&self, request: Request) -> Response {
        self.service.handle(request).await.map(Body::new)
    }
}

/// Authentication, session ownership and the session cap, in front of `rmcp`.
struct Gate {
    auth: Option<Arc<Authenticator>>,
    client_hint: bool,
    sessions: Arc<LocalSessionManager>,
    max_sessions: usize,
    /// Session id → the principal that opened it.
    owners: Mutex<HashMap<String, String>>,
    /// The session store, where sessions this instance did not open are found with their
    /// principal.
    store: Option<Arc<SessionStore>>,
    /// Largest request body (`max_message_bytes`).
    max_bytes: usize,
}

impl Gate {
    /// `resource_metadata` URL for `WWW-Authenticate`: from the configured resource, else from
    /// the request's `Host`.
    fn metadata_url(&self, request_host: Option<&str>) -> String {
        match self.auth.as_ref().and_then(|a| a.resource.as_deref()).and_then(split_url) {
            Some((origin, path)) => format!("{origin}{RESOURCE_METADATA_PATH}{path}"),
            None => format!("http://{}{RESOURCE_METADATA_PATH}{MCP_PATH}", request_host.unwrap_or("localhost")),
        }
    }
}

/// `https://host[:port]/path` → (`https://host[:port]`, `/path`).
fn split_url(url: &str) -> Option<(&str, &str)> {
    let scheme_end = url.find("://")? + 3;
    match url[scheme_end..].find('/') {
        Some(slash) => Some((&url[..scheme_end + slash], &url[scheme_end + slash..])),
        None => Some((url, "")),
    }
}

async fn resource_metadata(State(gate): State<Arc<Gate>>, request: Request) -> Response {
    let Some(auth) = &gate.auth else {
        return Response::builder().status(StatusCode::NOT_FOUND).body(Body::empty()).unwrap_or_default();
    };
    let mut doc = auth.metadata.clone();
    if doc.get("resource").is_none() {
        let host = request.headers().get(header::HOST).and_then(|v| v.to_str().ok()).unwrap_or("localhost");
        doc["resource"] = serde_json::Value::String(format!("http://{host}{MCP_PATH}"));
    }
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(doc.to_string()))
        .unwrap_or_default()
}

/// 503 for a request whose session only the shared store could tell about, while the store
/// cannot be read: the session is not lost, so the client keeps its id and retries.
fn store_unavailable(e: &crate::sessions::StoreError) -> Response {
    let message = format!(
        "the session store cannot be read ({e}); the session is not lost: retry later \
         (check the server that `sessions.store` names)"
    );
    plain_error(StatusCode::SERVICE_UNAVAILABLE, &message)
}

fn plain_error(status: StatusCode, message: &str) -> Response {
    let body = serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": message}});
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .unwrap_or_default()
}

/// Authenticates, keeps sessions with their principal, and caps new sessions.
/// The request's principal (`None` without `auth`), or the 401 answer with its challenge.
fn authenticate(gate: &Gate, request: &Request) -> Result<Option<Principal>, Box<Response>> {
    let Some(auth) = &gate.auth else { return Ok(None) };
    let value = request.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    match auth.authenticate(value) {
        Ok(p) => Ok(Some(p)),
        Err(failure) => {
            let host = request.headers().get(header::HOST).and_then(|v| v.to_str().ok());
            let mut challenge = format!("Bearer resource_metadata=\"{}\"", gate.metadata_url(host));
            if let AuthFailure::Invalid(why) = &failure {
                tracing::warn!(reason = %why, "HTTP request refused: invalid credentials");
                challenge.push_str(", error=\"invalid_token\"");
            }
            let mut response =
                plain_error(StatusCode::UNAUTHORIZED, "authentication required: send `Authorization: Bearer TOKEN`");
            if let Ok(v) = challenge.parse() {
                response.headers_mut().insert(header::WWW_AUTHENTICATE, v);
            }
            // A client without credentials keeps no connection slot: it comes back on a new
            // connection once it has a token.
            response.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
            Err(Box::new(response))
        }
    }
}

/// The operator endpoints (`/metrics`, the dashboard's data): the same authentication as
/// `/mcp`, and the principal must be an operator (`server.auth.operators`): they name every
/// tool, whatever the principal's scopes.
async fn operator_only(State(gate): State<Arc<Gate>>, request: Request, next: Next) -> Response {
    match authenticate(&gate, &request) {
        Ok(None) => next.run(request).await,
        Ok(Some(p)) if gate.auth.as_ref().is_some_and(|a| a.is_operator(&p)) => next.run(request).await,
        Ok(Some(p)) => {
            tracing::warn!(principal = %p.name, "operator endpoint refused: not in server.auth.operators");
            plain_error(
                StatusCode::FORBIDDEN,
                &format!(
                    "principal `{}` may not read operator data (metrics, dashboard): add it to server.auth.operators",
                    p.name
                ),
            )
        }
        Err(refused) => *refused,
    }
}

/// `GET /metrics`: the Prometheus text exposition.
async fn metrics_page(State(metrics): State<Option<Arc<Metrics>>>) -> Response {
    let Some(metrics) = metrics else {
        return Response::builder()
            .status(StatusCode::NOT_FOUND)
            .body(Body::from("metrics are off in this server\n"))
            .unwrap_or_default();
    };
    Response::builder()
        .header(header::CONTENT_TYPE, PROMETHEUS_CONTENT_TYPE)
        .body(Body::from(metrics.render()))
        .unwrap_or_default()
}

/// The `/mcp` handler in front of `rmcp`: authentication (before anything else), session
/// ownership and the session cap, DELETE of an unknown session, then the body.
async fn admit(State(endpoint): State<Arc<Endpoint>>, mut request: Request) -> Response {
    let gate = &endpoint.gate;
    let principal = match authenticate(gate, &request) {
        Ok(p) => p,
        Err(refused) => return *refused,
    };
    let who = principal.as_ref().map_or("", |p| p.name.as_str());
    let session = request.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_owned);
    match &session {
        Some(id) => {
            if let Err(refused) = gate.check_owner(id, who, &mut request).await {
                return refused;
            }
            if request.method() == Method::DELETE {
                match gate.knows(id).await {
                    Ok(true) => {}
                    Ok(false) => return unknown_session(),
                    Err(refused) => return refused,
                }
            }
        }
        None if request.method() == Method::POST => {
            let open = gate.sessions.sessions.read().await.len();
            if open >= gate.max_sessions {
                tracing::warn!(open, max = gate.max_sessions, "HTTP session refused: the session cap is reached");
                return plain_error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "too many open sessions; retry later (server.max_sessions)",
                );
            }
        }
        None => {}
    }
    // The opener of a session this request may start.
    let opener = session.is_none().then(|| who.to_owned());
    request.extensions_mut().insert(HttpIdentity { principal, client_hint: gate.client_hint });
    let response = check_body(&endpoint, request).await;
    if let Some(opener) = opener
        && let Some(id) = response.headers().get("mcp-session-id").and_then(|v| v.to_str().ok())
    {
        let live = gate.sessions.sessions.read().await;
        let mut owners = gate.owners.lock().unwrap_or_else(|e| e.into_inner());
        // Forget the owners of sessions that ended (idle timeout, DELETE).
        if owners.len() > gate.max_sessions {
            owners.retain(|k, _| live.keys().any(|s| s.as_ref() == k.as_str()));
        }
        owners.insert(id.to_owned(), opener);
    }
    response
}

impl Gate {
    /// A session is its opener's: another principal holding its id gets "no such session".
    /// With a store other instances share, every request reads its session's record: a
    /// session opened elsewhere names its principal there, one deleted elsewhere is gone, and
    /// the session takes the loaded set another instance wrote (the record travels to it in
    /// the request's extensions; one store read per request). An id no session could have is
    /// not looked up: it reaches rmcp, which answers 404.
    async fn check_owner(&self, id: &str, who: &str, request: &mut Request) -> Result<(), Response> {
        let mut owned = self.owners.lock().unwrap_or_else(|e| e.into_inner()).get(id).map(|o| o == who);
        let shared_store = self.store.as_ref().filter(|s| s.is_shared() && crate::valid_session_key(id));
        let local_only = owned.is_none() && self.auth.is_some() && crate::valid_session_key(id);
        if let Some(store) = shared_store.or(self.store.as_ref().filter(|_| local_only)) {
            match store.load(id).await {
                Ok(Some(record)) => {
                    if owned.is_none() {
                        let mine = record.principal.as_deref().unwrap_or_default() == who;
                        if mine {
                            self.owners.lock().unwrap_or_else(|e| e.into_inner()).insert(id.to_owned(), who.to_owned());
                        }
                        owned = Some(mine);
                    }
                    request.extensions_mut().insert(StoreRecord(Arc::new(record)));
                }
                Ok(None) if shared_store.is_some() => {
                    // Ended elsewhere (DELETE on another instance) or expired.
                    let known = self.sessions.sessions.read().await.contains_key(id);
                    if known {
                        let _ = rmcp::transport::streamable_http_server::session::SessionManager::close_session(
                            &*self.sessions,
                            &id.to_owned().into(),
                        )
                        .await;
                    }
                    return Err(plain_error(StatusCode::NOT_FOUND, "no such session"));
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "could not read the session store");
                    // A session this instance does not hold cannot be told apart from one that
                    // ended: "no such session" would make the client start over.
                    if owned.is_none() && !self.sessions.sessions.read().await.contains_key(id) {
                        return Err(store_unavailable(&e));
                    }
                }
            }
        }
        if self.auth.is_some() && owned != Some(true) {
            return Err(plain_error(StatusCode::NOT_FOUND, "no such session"));
        }
        Ok(())
    }

    /// Whether a session exists: on this instance, else in the store; the 503 answer when
    /// the store cannot tell.
    async fn knows(&self, id: &str) -> Result<bool, Response> {
        if self.sessions.sessions.read().await.contains_key(id) {
            return Ok(true);
        }
        match &self.store {
            Some(store) => match store.load(id).await {
                Ok(record) => Ok(record.is_some()),
                Err(e) => {
                    tracing::warn!(error = %e, "could not read the session store");
                    Err(store_unavailable(&e))
                }
            },
            None => Ok(false),
        }
    }
}

/// Accepts connections up to a cap; each is closed when idle (see [`IdleIo`]).
struct GuardedListener {
    inner: TcpListener,
    slots: Arc<Semaphore>,
    idle: Duration,
    head_timeout: Duration,
}

impl axum::serve::Listener for GuardedListener {
    type Io = IdleIo;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (IdleIo, SocketAddr) {
        loop {
            let permit = match self.slots.clone().acquire_owned().await {
                Ok(p) => p,
                Err(_) => std::future::pending().await,
            };
            match self.inner.accept().await {
                Ok((stream, addr)) => {
                    let _ = stream.set_nodelay(true);
                    let io = IdleIo {
                        inner: stream,
                        idle: self.idle,
                        deadline: Box::pin(tokio::time::sleep(FIRST_BYTE_TIMEOUT.min(self.idle))),
                        head: Head::Waiting,
                        head_timeout: self.head_timeout,
                        _permit: permit,
                    };
                    return (io, addr);
                }
                Err(e) => {
                    tracing::debug!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// A connection that fails with `TimedOut` when no byte moved either way before its deadline
/// (first: [`FIRST_BYTE_TIMEOUT`]; then the idle timeout), or when a request's head takes longer
/// than `head_timeout` to arrive; it frees its slot when dropped.
struct IdleIo {
    inner: TcpStream,
    idle: Duration,
    deadline: Pin<Box<tokio::time::Sleep>>,
    head: Head,
    head_timeout: Duration,
    _permit: OwnedSemaphorePermit,
}

/// Where the connection is in reading a request's head (HTTP/1: request line and headers, up to
/// the blank line), as far as the bytes read tell: no HTTP parsing, only line ends counted.
#[derive(Debug, Clone, Copy)]
enum Head {
    /// No byte of the next request yet (or a response was written since the last head).
    Waiting,
    /// A head is arriving: since when, and how many line ends in a row ended its bytes so far
    /// (`\r` is skipped; two mean the blank line).
    Reading { since: tokio::time::Instant, line_ends: u8 },
    /// The head is complete; the rest until the next response is its body (or a pipelined
    /// request, which is not timed).
    Body,
}

impl Head {
    /// `bytes` were read at `now`.
    fn read(&mut self, bytes: &[u8], now: tokio::time::Instant) {
        let (since, mut line_ends) = match *self {
            Head::Body => return,
            Head::Waiting => (now, 0),
            Head::Reading { since, line_ends } => (since, line_ends),
        };
        for &b in bytes {
            match b {
                b'\n' => {
                    line_ends += 1;
                    if line_ends == 2 {
                        *self = Head::Body;
                        return;
                    }
                }
                b'\r' => {}
                _ => line_ends = 0,
            }
        }
        *self = Head::Reading { since, line_ends };
    }
}

impl IdleIo {
    /// Bytes moved: the idle deadline starts again, no later than the head's.
    fn touch(&mut self, now: tokio::time::Instant) {
        let mut deadline = now + self.idle;
        if let Head::Reading { since, .. } = self.head {
            deadline = deadline.min(since + self.head_timeout);
        }
        self.deadline.as_mut().reset(deadline);
    }

    fn wrote(&mut self) {
        self.head = Head::Waiting;
        self.touch(tokio::time::Instant::now());
    }
}

fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "HTTP connection idle")
}

impl AsyncRead for IdleIo {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    let now = tokio::time::Instant::now();
                    let this = &mut *self;
                    this.head.read(&buf.filled()[before..], now);
                    this.touch(now);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => match self.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(timed_out())),
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

impl AsyncWrite for IdleIo {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, data);
        if let Poll::Ready(Ok(n)) = r
            && n > 0
        {
            self.wrote();
        }
        r
    }
    // Vectored writes pass through, so hyper writes a response's head and body with one
    // `writev` instead of first copying them into one buffer.
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = r
            && n > 0
        {
            self.wrote();
        }
        r
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

fn json_rpc_error(status: StatusCode, refusal: Refusal) -> Response {
    let body = error_json(&JsonRpcError::new(refusal.id, refusal.error)).unwrap_or_default();
    let mut response = Response::builder().status(status).header(header::CONTENT_TYPE, "application/json");
    if status == StatusCode::PAYLOAD_TOO_LARGE {
        // The rest of the body was not read: the connection cannot carry another request.
        response = response.header(header::CONNECTION, "close");
    }
    response.body(Body::from(body)).unwrap_or_else(|_| Response::new(Body::empty()))
}

/// rmcp's plain-text refusals (no `Mcp-Session-Id`, an unknown session, a foreign `Origin` or
/// `Host`, a method or media type it does not take) as JSON-RPC errors under the request's id
/// (`None` when it has none), saying what to do; the status and rmcp's other headers (`Allow`)
/// stay. Anything else passes unchanged.
async fn as_json_rpc(response: Response, id: Option<rmcp::model::RequestId>) -> Response {
    let status = response.status();
    let plain = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_none_or(|v| v.starts_with("text/plain"));
    if !status.is_client_error() || !plain {
        return response;
    }
    let (parts, body) = response.into_parts();
    let said = axum::body::to_bytes(body, 4096).await.unwrap_or_default();
    let said = String::from_utf8_lossy(&said);
    let said = said.trim();
    let message = if status == StatusCode::BAD_REQUEST && said.contains("Session ID is required") {
        "this request needs the `Mcp-Session-Id` header: send `initialize` first (without it), then send the id it answers with in `Mcp-Session-Id` on every later request".to_owned()
    } else if status == StatusCode::NOT_FOUND && said.contains("Session not found") {
        "no session has the id sent in `Mcp-Session-Id` (it ended, timed out, or never existed): start a new one with `initialize`".to_owned()
    } else if status == StatusCode::FORBIDDEN && said.contains("Origin") {
        format!("{said}: a browser page's origin must be listed in `server.allowed_origins` in quiver.yaml")
    } else if status == StatusCode::FORBIDDEN && said.contains("Host") {
        format!("{said}: to serve under another name, start Quiver with `quiver serve --allow-host NAME`")
    } else {
        said.to_owned()
    };
    let mut answer =
        json_rpc_error(status, Refusal { id, error: rmcp::model::ErrorData::invalid_request(message, None) });
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            answer.headers_mut().insert(name.clone(), value.clone());
        }
    }
    answer
}

/// DELETE of a session that does not exist (never did, or already ended) is 404, as the
/// streamable HTTP transport specifies (`rmcp` answers 202 to any DELETE); a session only the
/// store knows is deleted there (rmcp deletes its records).
fn unknown_session() -> Response {
    let refusal = Refusal {
        id: None,
        error: rmcp::model::ErrorData::invalid_request(
            "Session not found: it never existed or has already ended; start a new one with initialize",
            None,
        ),
    };
    json_rpc_error(StatusCode::NOT_FOUND, refusal)
}

/// Answers JSON POST bodies that are too large or not a JSON-RPC message with a JSON-RPC
/// error (413 / 400); passes everything else to `rmcp` unchanged.
///
/// The body is parsed once, by `rmcp`. Only when `rmcp` does not accept it (any status but
/// 2xx) or the session manager stopped it (a standard method with parameters that do not fit,
/// see [`Refused`]) are the kept bytes read again here, to answer with the JSON-RPC error the
/// message deserves (what a body that is not JSON-RPC gets takes precedence over `rmcp`'s own
/// refusals, such as an unknown session).
async fn check_body(endpoint: &Endpoint, request: Request) -> Response {
    let max_bytes = endpoint.gate.max_bytes;
    let is_json = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(';').next().is_some_and(|e| e.trim().eq_ignore_ascii_case("application/json")));
    if request.method() != Method::POST || !is_json {
        return as_json_rpc(endpoint.serve(request).await, None).await;
    }
    let (mut parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, max_bytes).await {
        Ok(b) => b,
        Err(_) => {
            return json_rpc_error(StatusCode::PAYLOAD_TOO_LARGE, Refusal { id: None, error: too_large(max_bytes) });
        }
    };
    let refused = Refused::default();
    parts.extensions.insert(refused.clone());
    parts.extensions.insert(RequestBody(bytes.clone()));
    let response = endpoint.serve(Request::from_parts(parts, Body::from(bytes.clone()))).await;
    if response.status().is_success() && !refused.is_set() {
        return response;
    }
    match parse(&bytes, Framing::Post) {
        Ok(Some(_)) if !refused.is_set() => as_json_rpc(response, crate::wire::top_level_id(&bytes)).await,
        // Stopped by the session manager: `parse` names why (it always refuses such a request).
        Ok(Some(_)) => json_rpc_error(
            StatusCode::BAD_REQUEST,
            Refusal {
                id: None,
                error: rmcp::model::ErrorData::invalid_params(
                    "Invalid params: they do not match the method's parameters",
                    None,
                ),
            },
        ),
        // A notification or response too broken to read: accepted and ignored, as JSON-RPC asks.
        Ok(None) => Response::builder().status(StatusCode::ACCEPTED).body(Body::empty()).unwrap_or_default(),
        Err(refusal) => json_rpc_error(StatusCode::BAD_REQUEST, refusal),
    }
}
