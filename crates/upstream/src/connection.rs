//! One upstream server's connection: started, watched and restarted with backoff by a
//! supervisor task; the host services its calls need (progress, logs, elicitation, sampling)
//! routed back to the calling session.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use quiver_catalog::{CallSink, LogLevel};
use quiver_lifecycle::RescanSignal;
use quiver_manifest::{SecretRef, UpstreamConfig, ValueSource};
use rmcp::model::{
    ClientCapabilities, ClientConfig, CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams,
    ElicitResult, ErrorData, Implementation, LoggingLevel, LoggingMessageNotificationParam, ProgressNotificationParam,
    ProgressToken, Tool,
};
use rmcp::service::{NotificationContext, Peer, RequestContext, RoleClient};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, ServiceExt};
use tokio::io::AsyncBufReadExt;

/// A configured value: as written, or read now from an environment variable or a file
/// (resolved against `base`) through the same reader as plugin secrets. The error names the
/// variable or file, never a value.
pub(crate) fn resolve(v: &ValueSource, base: &std::path::Path) -> Result<String, String> {
    let secret = match v {
        ValueSource::Literal(v) => return Ok(v.clone()),
        ValueSource::Env { env } => SecretRef::Env(env.clone()),
        ValueSource::File { file } => SecretRef::File(file.clone()),
    };
    secret.resolve(base).map(|s| s.expose().to_owned()).map_err(|e| e.to_string())
}

/// An error with its causes (`tls handshake: invalid peer certificate: UnknownIssuer`), each
/// once.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cause = c.source();
    }
    out
}

/// What the supervisor last learned from the server (also kept on disk, so the tools of a
/// server that is down when Quiver starts are still found, and their calls say why they fail).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct Listing {
    pub tools: Vec<Tool>,
    pub server_version: String,
    pub server_title: String,
    /// The listed tools that are not valid MCP tools, one line each (which and why): left out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub invalid: Vec<String>,
}

/// The server's tools, page by page, as [`Peer::list_all_tools`] reads them, except that a tool
/// that does not fit MCP's `Tool` (no `inputSchema`, say) is left out and named, with what is
/// wrong, instead of failing the whole list (rmcp then reads the page as some other result).
async fn list_tools(peer: &Peer<RoleClient>) -> Result<(Vec<Tool>, Vec<String>), rmcp::ServiceError> {
    use rmcp::model::{ClientRequest, CustomResult, ListToolsRequest, PaginatedRequestParams, ServerResult};
    let (mut tools, mut invalid, mut cursor) = (Vec::new(), Vec::new(), None);
    loop {
        let request = ListToolsRequest {
            method: Default::default(),
            params: Some(PaginatedRequestParams::default().with_cursor(cursor)),
            extensions: Default::default(),
        };
        cursor = match peer.send_request(ClientRequest::ListToolsRequest(request)).await? {
            ServerResult::ListToolsResult(page) => {
                tools.extend(page.tools);
                page.next_cursor
            }
            ServerResult::CustomResult(CustomResult(page)) => {
                let Some(listed) = page.get("tools").and_then(serde_json::Value::as_array) else {
                    return Err(rmcp::ServiceError::UnexpectedResponse);
                };
                for t in listed {
                    match serde_json::from_value::<Tool>(t.clone()) {
                        Ok(tool) => tools.push(tool),
                        Err(e) => {
                            let name = t.get("name").and_then(serde_json::Value::as_str).unwrap_or("(no name)");
                            invalid.push(format!("`{name}`: not a valid MCP tool ({e})"));
                        }
                    }
                }
                page.get("nextCursor").and_then(serde_json::Value::as_str).map(str::to_owned)
            }
            _ => return Err(rmcp::ServiceError::UnexpectedResponse),
        };
        if cursor.is_none() {
            return Ok((tools, invalid));
        }
    }
}

/// The state the source, the backend and the client handler share.
pub(crate) struct Connection {
    pub cfg: UpstreamConfig,
    base_dir: PathBuf,
    /// `<state_dir>/upstreams/<name>.json`: the last listing.
    cache: Option<PathBuf>,
    /// The live peer, while connected.
    peer: Mutex<Option<Peer<RoleClient>>>,
    /// A one-line state for operators (`quiver list`) and for errors.
    pub status: Mutex<String>,
    /// The latest tool list, and whether the source has not taken it yet.
    pub listing: Mutex<(Option<Listing>, bool)>,
    /// Set once the first connection attempt ended (either way).
    first: (Mutex<bool>, Condvar),
    /// Sinks of calls in flight, by the progress token sent with them.
    calls: Mutex<HashMap<ProgressToken, Arc<dyn CallSink>>>,
    /// The last lines the server wrote on stderr (shown when it fails).
    stderr: Mutex<VecDeque<String>>,
    signal: Mutex<Option<RescanSignal>>,
    stopped: AtomicBool,
}

/// Removes a call's sink when the call ends, however it ends.
pub(crate) struct Registered<'a> {
    conn: &'a Connection,
    token: ProgressToken,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.conn.calls.lock().unwrap_or_else(|e| e.into_inner()).remove(&self.token);
    }
}

const STDERR_LINES: usize = 5;

impl Connection {
    pub fn new(cfg: UpstreamConfig, base_dir: PathBuf, state_dir: Option<PathBuf>) -> Arc<Connection> {
        let cache = state_dir.map(|d| d.join("upstreams").join(format!("{}.json", cfg.name)));
        // The last listing seen, until the server answers again.
        let cached: Option<Listing> =
            cache.as_ref().and_then(|p| std::fs::read(p).ok()).and_then(|b| serde_json::from_slice(&b).ok());
        let has_cache = cached.is_some();
        Arc::new(Connection {
            cfg,
            base_dir,
            cache,
            peer: Mutex::new(None),
            status: Mutex::new("connecting".to_owned()),
            listing: Mutex::new((cached, has_cache)),
            first: (Mutex::new(false), Condvar::new()),
            calls: Mutex::new(HashMap::new()),
            stderr: Mutex::new(VecDeque::new()),
            signal: Mutex::new(None),
            stopped: AtomicBool::new(false),
        })
    }

    pub fn peer(&self) -> Option<Peer<RoleClient>> {
        self.peer.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn status(&self) -> String {
        self.status.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn set_status(&self, s: String) {
        *self.status.lock().unwrap_or_else(|e| e.into_inner()) = s;
    }

    pub fn set_signal(&self, s: RescanSignal) {
        *self.signal.lock().unwrap_or_else(|e| e.into_inner()) = Some(s);
    }

    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
    }

    /// Waits until the first connection attempt has ended, at most `limit`.
    pub fn wait_first(&self, limit: Duration) {
        let (m, cv) = &self.first;
        let g = m.lock().unwrap_or_else(|e| e.into_inner());
        let _ = cv.wait_timeout_while(g, limit, |done| !*done);
    }

    fn first_done(&self) {
        let (m, cv) = &self.first;
        *m.lock().unwrap_or_else(|e| e.into_inner()) = true;
        cv.notify_all();
    }

    pub fn register(&self, token: ProgressToken, sink: Arc<dyn CallSink>) -> Registered<'_> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner()).insert(token.clone(), sink);
        Registered { conn: self, token }
    }

    /// The sink of the one call in flight. Logs, elicitation and sampling requests of an
    /// upstream over stdio do not say which call they belong to: with one call in flight the
    /// answer is certain; with several, nobody is asked and nothing is shown to any session, so
    /// no session ever sees another's.
    fn only_call(&self) -> Option<Arc<dyn CallSink>> {
        let calls = self.calls.lock().unwrap_or_else(|e| e.into_inner());
        (calls.len() == 1).then(|| calls.values().next().cloned()).flatten()
    }

    fn last_stderr(&self) -> String {
        let lines = self.stderr.lock().unwrap_or_else(|e| e.into_inner());
        if lines.is_empty() {
            String::new()
        } else {
            format!("; its last words: {}", lines.iter().cloned().collect::<Vec<_>>().join(" | "))
        }
    }

    fn store_listing(&self, listing: Listing) {
        if let Some(path) = &self.cache {
            let write = || -> std::io::Result<()> {
                std::fs::create_dir_all(path.parent().unwrap_or(std::path::Path::new(".")))?;
                let tmp = path.with_extension("json.tmp");
                std::fs::write(&tmp, serde_json::to_vec(&listing).map_err(std::io::Error::other)?)?;
                std::fs::rename(&tmp, path)
            };
            if let Err(e) = write() {
                tracing::warn!(source = %self.cfg.name, file = %path.display(), error = %e, "cannot keep the upstream's tool list");
            }
        }
        *self.listing.lock().unwrap_or_else(|e| e.into_inner()) = (Some(listing), true);
        if let Some(s) = self.signal.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            s.request();
        }
    }

    /// Reads the tool list again (after `tools/list_changed`).
    async fn relist(self: Arc<Self>, peer: Peer<RoleClient>) {
        match list_tools(&peer).await {
            Ok((tools, invalid)) => {
                let mut listing = self.listing.lock().unwrap_or_else(|e| e.into_inner()).0.clone().unwrap_or(Listing {
                    tools: Vec::new(),
                    server_version: String::new(),
                    server_title: String::new(),
                    invalid: Vec::new(),
                });
                listing.tools = tools;
                listing.invalid = invalid;
                tracing::info!(source = %self.cfg.name, tools = listing.tools.len(), "upstream tool list changed");
                self.store_listing(listing);
            }
            Err(e) => {
                tracing::warn!(source = %self.cfg.name, error = %e, "cannot read the upstream's changed tool list")
            }
        }
    }

    /// Connects, serves until the connection ends, and starts again with backoff, until the
    /// source is dropped.
    pub async fn supervise(self: Arc<Self>) {
        let mut backoff = Duration::from_millis(250);
        let mut restarts = 0u32;
        loop {
            if self.stopped.load(Ordering::Acquire) {
                return;
            }
            let started = Instant::now();
            match self.clone().connect().await {
                Ok(running) => {
                    let peer = running.peer().clone();
                    let info = peer.peer_info();
                    let (version, title) = info
                        .and_then(|i| i.server_info.clone())
                        .map(|s| (s.version, s.title.unwrap_or_default()))
                        .unwrap_or_default();
                    match tokio::time::timeout(Duration::from_millis(self.cfg.connect_timeout_ms), list_tools(&peer))
                        .await
                    {
                        Ok(Ok((tools, invalid))) => {
                            tracing::info!(source = %self.cfg.name, tools = tools.len(), restarts, "upstream connected");
                            *self.peer.lock().unwrap_or_else(|e| e.into_inner()) = Some(peer);
                            self.set_status(format!("connected ({})", self.describe()));
                            self.store_listing(Listing {
                                tools,
                                server_version: version,
                                server_title: title,
                                invalid,
                            });
                            self.first_done();
                            let _ = running.waiting().await;
                        }
                        Ok(Err(e)) => {
                            self.set_status(format!("down: tools/list failed: {e}"));
                            let _ = running.cancel().await;
                        }
                        Err(_) => {
                            self.set_status("down: tools/list did not answer in time".to_owned());
                            let _ = running.cancel().await;
                        }
                    }
                    *self.peer.lock().unwrap_or_else(|e| e.into_inner()) = None;
                    if !self.status().starts_with("down") {
                        self.set_status(format!("down: the connection ended{}", self.last_stderr()));
                    }
                }
                Err(e) => self.set_status(format!("down: {e}{}", self.last_stderr())),
            }
            self.first_done();
            if self.stopped.load(Ordering::Acquire) {
                return;
            }
            tracing::warn!(source = %self.cfg.name, state = %self.status(), retry_in_ms = backoff.as_millis() as u64, "upstream unavailable");
            if started.elapsed() > Duration::from_secs(30) {
                backoff = Duration::from_millis(250);
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(30));
            restarts += 1;
        }
    }

    fn describe(&self) -> String {
        match (&self.cfg.command, &self.cfg.url) {
            (Some(c), _) => format!("`{c}` over stdio"),
            (None, Some(u)) => u.clone(),
            _ => String::new(),
        }
    }

    async fn connect(self: Arc<Self>) -> Result<rmcp::service::RunningService<RoleClient, Handler>, String> {
        let handler = Handler { conn: Arc::downgrade(&self) };
        let limit = Duration::from_millis(self.cfg.connect_timeout_ms);
        if let Some(program) = &self.cfg.command {
            let mut cmd = tokio::process::Command::new(program);
            cmd.args(&self.cfg.args).env_clear();
            for k in ["PATH", "HOME", "LANG", "LC_ALL", "TMPDIR"] {
                if let Some(v) = std::env::var_os(k) {
                    cmd.env(k, v);
                }
            }
            for (k, v) in &self.cfg.env {
                cmd.env(k, resolve(v, &self.base_dir).map_err(|e| format!("env.{k}: {e}"))?);
            }
            cmd.current_dir(
                self.cfg.cwd.as_ref().map(|d| self.base_dir.join(d)).unwrap_or_else(|| self.base_dir.clone()),
            );
            #[cfg(target_os = "linux")]
            // SAFETY: prctl is async-signal-safe; it only asks the kernel to end the server when
            // the thread that started it (the upstream runtime, alive as long as the host) ends.
            unsafe {
                cmd.pre_exec(|| {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                    Ok(())
                });
            }
            let (transport, stderr) = TokioChildProcess::builder(cmd)
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| format!("cannot start `{program}`: {e}"))?;
            if let Some(stderr) = stderr {
                let conn = Arc::downgrade(&self);
                let name = self.cfg.name.clone();
                tokio::spawn(async move {
                    let mut lines = tokio::io::BufReader::new(stderr).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        tracing::debug!(source = %name, "{line}");
                        let Some(conn) = conn.upgrade() else { break };
                        let mut ring = conn.stderr.lock().unwrap_or_else(|e| e.into_inner());
                        if ring.len() == STDERR_LINES {
                            ring.pop_front();
                        }
                        ring.push_back(line.chars().take(300).collect());
                    }
                });
            }
            match tokio::time::timeout(limit, handler.serve(transport)).await {
                Ok(r) => r.map_err(|e| format!("MCP initialize failed: {}", chain(&e))),
                Err(_) => Err(format!("MCP initialize did not finish within {} ms", limit.as_millis())),
            }
        } else if let Some(url) = &self.cfg.url {
            use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
            let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
            let mut headers = HashMap::new();
            for (k, v) in &self.cfg.headers {
                let value = resolve(v, &self.base_dir).map_err(|e| format!("headers.{k}: {e}"))?;
                let name = http::HeaderName::try_from(k.as_str())
                    .map_err(|e| format!("headers.{k}: not a header name: {e}"))?;
                let value = http::HeaderValue::try_from(value)
                    .map_err(|_| format!("headers.{k}: the value is not a valid header value"))?;
                headers.insert(name, value);
            }
            config = config.custom_headers(headers);
            let transport = StreamableHttpClientTransport::from_config(config);
            match tokio::time::timeout(limit, handler.serve(transport)).await {
                Ok(r) => r.map_err(|e| format!("MCP initialize with {url} failed: {}", chain(&e))),
                Err(_) => Err(format!("MCP initialize with {url} did not finish within {} ms", limit.as_millis())),
            }
        } else {
            Err("the source has neither `command` nor `url`".to_owned())
        }
    }
}

/// The MCP client side of the connection.
pub(crate) struct Handler {
    conn: Weak<Connection>,
}

fn level(l: LoggingLevel) -> LogLevel {
    match l {
        LoggingLevel::Debug => LogLevel::Debug,
        LoggingLevel::Info | LoggingLevel::Notice => LogLevel::Info,
        LoggingLevel::Warning => LogLevel::Warning,
        _ => LogLevel::Error,
    }
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        let mut caps = ClientCapabilities::default();
        caps.sampling = Some(Default::default());
        caps.elicitation = Some(Default::default());
        ClientConfig::new(caps, Implementation::new("quiver", env!("CARGO_PKG_VERSION")))
    }

    async fn on_progress(&self, params: ProgressNotificationParam, _context: NotificationContext<RoleClient>) {
        let Some(conn) = self.conn.upgrade() else { return };
        let sink = conn.calls.lock().unwrap_or_else(|e| e.into_inner()).get(&params.progress_token).cloned();
        if let Some(sink) = sink {
            sink.progress(params.progress, params.total, params.message.as_deref().unwrap_or(""));
        }
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let Some(conn) = self.conn.upgrade() else { return };
        let text = match &params.data {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        match conn.only_call() {
            Some(sink) => sink.log(level(params.level), &text),
            None => tracing::info!(source = %conn.cfg.name, "upstream log: {text}"),
        }
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let Some(conn) = self.conn.upgrade() else { return };
        if let Some(peer) = conn.peer() {
            tokio::spawn(conn.relist(peer));
        }
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        self.relay("elicitation", &request, |sink, text| sink.elicit(text)).await
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        self.relay("sampling", &params, |sink, text| sink.sample(text)).await
    }
}

impl Handler {
    /// Hands a server's request (`what`: elicitation or sampling) to the one call in flight, on a
    /// blocking thread (the sink waits for the client's answer), and reads the answer back.
    async fn relay<R: serde::de::DeserializeOwned>(
        &self,
        what: &str,
        request: &impl serde::Serialize,
        ask: impl FnOnce(&dyn CallSink, &str) -> Result<String, String> + Send + 'static,
    ) -> Result<R, ErrorData> {
        let internal = |e: String| ErrorData::internal_error(e, None);
        let sink = self.sink_for(what)?;
        let text = serde_json::to_string(request).map_err(|e| internal(e.to_string()))?;
        let answer = tokio::task::spawn_blocking(move || ask(&*sink, &text))
            .await
            .map_err(|e| internal(e.to_string()))?
            .map_err(internal)?;
        serde_json::from_str(&answer).map_err(|e| internal(e.to_string()))
    }

    fn sink_for(&self, what: &str) -> Result<Arc<dyn CallSink>, ErrorData> {
        let conn = self.conn.upgrade().ok_or_else(|| ErrorData::internal_error("the source is gone", None))?;
        conn.only_call().ok_or_else(|| {
            ErrorData::invalid_request(
                format!(
                    "Quiver cannot tell which of its calls this {what} request belongs to (none or several are in flight on this connection), so it asks nobody"
                ),
                None,
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_resolve_from_env_and_files_and_name_what_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("tok"), "s3cret\n").unwrap();
        let file = ValueSource::File { file: "tok".into() };
        assert_eq!(resolve(&file, dir.path()).unwrap(), "s3cret");
        let missing = ValueSource::Env { env: "QUIVER_TEST_SURELY_UNSET_VARIABLE".into() };
        let e = resolve(&missing, dir.path()).unwrap_err();
        assert!(e.contains("QUIVER_TEST_SURELY_UNSET_VARIABLE"), "{e}");
        let e = resolve(&ValueSource::File { file: "nope".into() }, dir.path()).unwrap_err();
        assert!(e.contains("nope") && !e.contains("s3cret"), "{e}");
    }
}
