//! The streamable HTTP transport: `rmcp`'s session-managing service at `/mcp`, served with
//! axum. `rmcp` checks `Host` and `Origin` (403 for anything but the allowed ones: loopback by
//! default); a layer in front of it answers bodies that are too large or not JSON-RPC with a
//! JSON-RPC error, so every client sees a protocol error rather than a plain-text one.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use rmcp::model::JsonRpcError;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::QuiverServer;
use crate::wire::{Refusal, error_json, parse, too_large};

/// The path the MCP endpoint is served at.
pub const MCP_PATH: &str = "/mcp";

/// Who may reach the HTTP transport.
#[derive(Debug, Clone, Default)]
pub struct HttpOptions {
    /// Browser origins (`scheme://host[:port]`, `:*` for any port) allowed besides the loopback
    /// ones (`http(s)://localhost`, `127.0.0.1`, `[::1]`, any port). A request whose `Origin`
    /// is not allowed gets 403; requests without `Origin` (non-browser clients) pass.
    pub allowed_origins: Vec<String>,
    /// `Host` names allowed besides `localhost`, `127.0.0.1` and `::1` (DNS-rebinding
    /// protection); needed when serving under another name. A specific (non-wildcard) address
    /// the server is bound to is added automatically.
    pub allowed_hosts: Vec<String>,
    /// Cancel to stop serving: open sessions end and `serve_http` returns.
    pub shutdown: CancellationToken,
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
    let mut hosts: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    if !local.ip().is_unspecified() && !local.ip().is_loopback() {
        hosts.push(local.ip().to_string());
    }
    hosts.extend(opts.allowed_hosts.iter().cloned());
    let mut origins: Vec<String> = LOOPBACK_ORIGINS.iter().map(|s| (*s).to_owned()).collect();
    origins.extend(opts.allowed_origins.iter().cloned());
    let max_bytes = server.options().max_message_bytes;
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts)
        .with_allowed_origins(origins)
        .enforce_origin_validation()
        .with_max_request_body_bytes(max_bytes)
        .with_cancellation_token(opts.shutdown.child_token());
    let factory = server.clone();
    let sessions = Arc::new(LocalSessionManager::default());
    let service = StreamableHttpService::new(move || Ok(factory.connection()), sessions.clone(), config);
    let app = axum::Router::new()
        .route_service(MCP_PATH, service)
        .layer(axum::middleware::from_fn_with_state(max_bytes, check_body))
        .layer(axum::middleware::from_fn_with_state(sessions, check_delete));
    tracing::info!(addr = %local, path = MCP_PATH, "serving MCP over streamable HTTP");
    let shutdown = opts.shutdown.clone();
    axum::serve(listener, app).with_graceful_shutdown(async move { shutdown.cancelled().await }).await
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

/// DELETE of a session that does not exist (never did, or already ended) is 404, as the
/// streamable HTTP transport specifies; `rmcp` answers 202 to any DELETE.
async fn check_delete(State(sessions): State<Arc<LocalSessionManager>>, request: Request, next: Next) -> Response {
    if request.method() == Method::DELETE
        && let Some(id) = request.headers().get("mcp-session-id").and_then(|v| v.to_str().ok())
        && !sessions.sessions.read().await.contains_key(id)
    {
        let refusal = Refusal {
            id: None,
            error: rmcp::model::ErrorData::invalid_request(
                "Session not found: it never existed or has already ended; start a new one with initialize",
                None,
            ),
        };
        return json_rpc_error(StatusCode::NOT_FOUND, refusal);
    }
    next.run(request).await
}

/// Answers JSON POST bodies that are too large or not a JSON-RPC message with a JSON-RPC
/// error (413 / 400); passes everything else to `rmcp` unchanged.
async fn check_body(State(max_bytes): State<usize>, request: Request, next: Next) -> Response {
    let is_json = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(';').next().is_some_and(|e| e.trim().eq_ignore_ascii_case("application/json")));
    if request.method() != Method::POST || !is_json {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, max_bytes).await {
        Ok(b) => b,
        Err(_) => {
            return json_rpc_error(StatusCode::PAYLOAD_TOO_LARGE, Refusal { id: None, error: too_large(max_bytes) });
        }
    };
    match parse(&bytes) {
        Ok(Some(_)) => next.run(Request::from_parts(parts, Body::from(bytes))).await,
        // A notification or response too broken to read: accepted and ignored, as JSON-RPC asks.
        Ok(None) => Response::builder().status(StatusCode::ACCEPTED).body(Body::empty()).unwrap_or_default(),
        Err(refusal) => json_rpc_error(StatusCode::BAD_REQUEST, refusal),
    }
}
