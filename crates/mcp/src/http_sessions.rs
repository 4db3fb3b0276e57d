//! The session manager of the streamable HTTP transport: `rmcp`'s [`LocalSessionManager`]
//! (sessions live in this process), with two additions.
//!
//! - The `initialize` it forwards to a session carries the session's `Mcp-Session-Id`
//!   ([`HttpSessionId`]), so the session can key its state in the [`crate::SessionStore`] by the
//!   id the client holds. A replayed `initialize` (rmcp's cross-instance restore) goes through
//!   the same path, with rmcp's `SessionRestoreMarker` next to it.
//! - **In-place calls.** `rmcp` hands every request to the session's worker task (two round
//!   trips to open the request's channel and push the message), which forwards it to the
//!   service loop, which spawns the handler; the answer travels back the same way: four
//!   channel hops and three task wake-ups per call. A `tools/call` is instead run here, on the
//!   HTTP request's own task, by the same handler with the request context `rmcp` would build
//!   (as the stdio call lane does), when nothing of it needs the worker:
//!   - no `progressToken` (progress is routed to the request's stream by the worker) and no
//!     protocol version in its `_meta`;
//!   - a client that declared neither elicitation nor sampling (requests to the client during
//!     a call are routed to the call's stream by the worker);
//!   - no event store (events would not be kept where other instances resume from);
//!   - fewer than `max_requests_per_session` in-place calls of the session still running.
//!
//!   Logs a call emits are notifications without a request, which the worker sends on the
//!   session's standalone stream either way. The call is polled once in place: a ready answer
//!   is the stream's one event, without an event id (there is nothing left to resume). A call
//!   not ready continues as a task of its own; its stream starts with a priming event, and its
//!   answer is kept for [`COMPLETED_TTL`] so a client that lost the connection resumes it with
//!   `Last-Event-ID` (ids `q<serial>/<index>`, which `rmcp`'s never are).
//!   `notifications/cancelled` cancels such a call's token, and its answer is dropped, as
//!   `rmcp` drops a cancelled request's.
//!
//!   Idle sessions are closed here ([`QuiverSessions::close_idle`], from a sweeper task of the
//!   HTTP server): `rmcp`'s worker restarts its idle timer only on its own events, which
//!   in-place calls are not, so its timer is off.
//!
//!   Requests handed to the worker are counted until their answer is on their stream
//!   ([`WorkerCall`]), so a shutdown gives them the grace in-place calls get
//!   ([`QuiverSessions::running_calls`]).
//!
//! Bodies are parsed once, by `rmcp`. A standard method whose parameters do not fit its type
//! reaches the session manager as a custom request (which the handler would answer "method not
//! found"), and a list request's (`tools/list`, ...) as no parameters at all (which would answer
//! the first page; only such a request without parameters has its body read again);
//! [`QuiverSessions::create_stream`] stops either there, unsent, and marks the request's
//! [`Refused`] flag, from which the HTTP layer answers `-32602` with status 400.

use std::collections::HashMap;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_core::Stream;
use futures_util::StreamExt;
use rmcp::model::{
    CancelledNotification, ClientJsonRpcMessage, ClientNotification, ClientRequest, GetExtensions, RequestId,
    RequestMetaObject, ServerJsonRpcMessage,
};
use rmcp::service::Service;
use rmcp::transport::streamable_http_server::session::local::{LocalSessionManager, LocalSessionManagerError};
use rmcp::transport::streamable_http_server::session::{
    EventStore, RestoreOutcome, ServerSseMessage, SessionId, SessionManager,
};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::connection::Connection;
use crate::server::Shared;

/// The `Mcp-Session-Id` of the session an `initialize` starts (an extension of the request).
#[derive(Debug, Clone)]
pub struct HttpSessionId(pub SessionId);

/// Set when the session manager stopped a request whose parameters do not fit its standard
/// method (an extension of the HTTP request; see the module documentation).
#[derive(Debug, Clone, Default)]
pub(crate) struct Refused(pub(crate) Arc<AtomicBool>);

impl Refused {
    pub(crate) fn is_set(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// The body of the HTTP request a message came in (an extension of the HTTP request), read
/// again only for a list request whose parameters came out absent ([`dropped_list_params`]).
#[derive(Debug, Clone)]
pub(crate) struct RequestBody(pub(crate) axum::body::Bytes);

/// True for a request `rmcp` read as a custom request although its method is a standard one.
fn misread_standard_request(message: &ClientJsonRpcMessage) -> bool {
    matches!(message, ClientJsonRpcMessage::Request(r)
        if matches!(&r.request, ClientRequest::CustomRequest(c) if crate::wire::is_standard_request(&c.method)))
}

/// True for a list request whose parameters `rmcp` read as absent because they do not fit
/// (see [`crate::wire::dropped_params`]).
fn dropped_list_params(message: &ClientJsonRpcMessage) -> bool {
    let ClientJsonRpcMessage::Request(r) = message else { return false };
    let body =
        r.request.extensions().get::<axum::http::request::Parts>().and_then(|p| p.extensions.get::<RequestBody>());
    body.is_some_and(|b| crate::wire::dropped_params(&r.request, &b.0).is_some())
}

/// The flag the HTTP layer put on the request this message came in.
fn refused_flag(message: &ClientJsonRpcMessage) -> Option<&Refused> {
    let ClientJsonRpcMessage::Request(r) = message else { return None };
    r.request.extensions().get::<axum::http::request::Parts>()?.extensions.get::<Refused>()
}

/// A boxed event stream (an in-place call still running, its resumption).
type Events = Pin<Box<dyn Stream<Item = ServerSseMessage> + Send + Sync>>;

/// A request's response stream: the session worker's (with the request counted as running
/// until its answer is on it), an in-place answer, or none for a request stopped before it.
pub(crate) enum Answer<S> {
    Worker(S, Option<WorkerCall>),
    Ready(Option<ServerSseMessage>),
    Running(Events),
    Nothing,
}

impl<S: Stream<Item = ServerSseMessage> + Unpin> Stream for Answer<S> {
    type Item = ServerSseMessage;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ServerSseMessage>> {
        match &mut *self {
            Answer::Worker(s, call) => {
                let next = Pin::new(s).poll_next(cx);
                if let Poll::Ready(event) = &next
                    && event.as_ref().is_none_or(|e| e.message.as_deref().is_some_and(is_answer))
                {
                    *call = None;
                }
                next
            }
            Answer::Ready(event) => Poll::Ready(event.take()),
            Answer::Running(s) => s.as_mut().poll_next(cx),
            Answer::Nothing => Poll::Ready(None),
        }
    }
}

/// A request handed to a session's worker, counted in [`QuiverSessions::running_calls`] until
/// its answer is on its stream, or the stream ends or is dropped (cancelled, or the client went
/// away: no one is left to answer).
pub(crate) struct WorkerCall(Arc<AtomicUsize>);

impl WorkerCall {
    fn new(running: &Arc<AtomicUsize>) -> WorkerCall {
        running.fetch_add(1, Ordering::AcqRel);
        WorkerCall(running.clone())
    }
}

impl Drop for WorkerCall {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response or an error: what answers a request.
fn is_answer(message: &ServerJsonRpcMessage) -> bool {
    matches!(message, ServerJsonRpcMessage::Response(_) | ServerJsonRpcMessage::Error(_))
}

/// How long the answer of an in-place call that was not ready at once is kept for a client
/// resuming its stream (`rmcp` keeps a completed request's events as long by default).
pub(crate) const COMPLETED_TTL: Duration = Duration::from_secs(60);

/// At most this many answers of in-place calls kept per session for resumption (the oldest
/// finished go first).
const KEPT_ANSWERS: usize = 64;

/// `tools/call` requests served in place, in this process (for tests).
static IN_PLACE_CALLS: AtomicU64 = AtomicU64::new(0);

/// How many `tools/call` requests the HTTP transport served in place in this process (tests use
/// it to tell which path served a call; not part of the API).
#[doc(hidden)]
pub fn http_in_place_calls() -> u64 {
    IN_PLACE_CALLS.load(Ordering::Relaxed)
}

/// Milliseconds on a process-wide monotonic clock.
fn now_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    u64::try_from(START.get_or_init(Instant::now).elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// HTTP sessions' in-place handlers by session id (in [`Shared`]).
pub(crate) type InPlaceSessions = RwLock<HashMap<SessionId, Arc<InPlace>>>;

/// A session's handler for in-place calls, and those calls (see the module documentation).
pub(crate) struct InPlace {
    /// A view of the session's [`Connection`] (dropping it ends nothing).
    handler: Arc<Connection>,
    /// When a request of this session last arrived ([`now_ms`]), for [`QuiverSessions::close_idle`].
    touched: AtomicU64,
    calls: Mutex<Calls>,
}

#[derive(Default)]
struct Calls {
    serial: u64,
    kept: Vec<Kept>,
}

/// An in-place call that was not ready at its first poll.
struct Kept {
    serial: u64,
    request: RequestId,
    token: CancellationToken,
    answer: watch::Receiver<Option<Arc<ServerJsonRpcMessage>>>,
    /// Where its answer is published, so a shutdown can answer a call the grace did not see
    /// end ([`QuiverSessions::answer_at_shutdown`]). Weak: the task running the call holds the
    /// sender, and its end without an answer (cancelled) ends the call's stream.
    publish: std::sync::Weak<watch::Sender<Option<Arc<ServerJsonRpcMessage>>>>,
    /// When it was answered (or cancelled).
    finished: Option<Instant>,
}

impl InPlace {
    /// Makes `handler` (a view of an initialized session) serve the session's in-place calls.
    pub(crate) fn register(shared: &Shared, id: SessionId, handler: Connection) {
        let entry = Arc::new(InPlace {
            handler: Arc::new(handler),
            touched: AtomicU64::new(now_ms()),
            calls: Mutex::new(Calls::default()),
        });
        shared.in_place.write().unwrap_or_else(|e| e.into_inner()).insert(id, entry);
    }

    /// The session ended: no more in-place calls (those running finish on their own).
    pub(crate) fn forget(shared: &Shared, id: &SessionId) {
        shared.in_place.write().unwrap_or_else(|e| e.into_inner()).remove(id);
    }

    fn calls(&self) -> std::sync::MutexGuard<'_, Calls> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn running(&self) -> usize {
        self.calls().kept.iter().filter(|k| k.finished.is_none()).count()
    }

    /// Keeps a call that was not ready at once; returns its serial.
    fn keep(
        &self,
        request: RequestId,
        token: CancellationToken,
        publish: &Arc<watch::Sender<Option<Arc<ServerJsonRpcMessage>>>>,
    ) -> u64 {
        let (answer, publish) = (publish.subscribe(), Arc::downgrade(publish));
        let mut calls = self.calls();
        let now = Instant::now();
        calls.kept.retain(|k| k.finished.is_none_or(|f| now.duration_since(f) < COMPLETED_TTL));
        while calls.kept.len() >= KEPT_ANSWERS {
            match calls.kept.iter().position(|k| k.finished.is_some()) {
                Some(i) => drop(calls.kept.remove(i)),
                None => break,
            }
        }
        calls.serial += 1;
        let serial = calls.serial;
        calls.kept.push(Kept { serial, request, token, answer, publish, finished: None });
        serial
    }

    fn finish(&self, serial: u64) {
        if let Some(k) = self.calls().kept.iter_mut().find(|k| k.serial == serial) {
            k.finished = Some(Instant::now());
        }
    }

    /// `notifications/cancelled` for one of this session's running in-place calls.
    fn cancel(&self, request: &RequestId) {
        for k in self.calls().kept.iter().filter(|k| k.finished.is_none() && &k.request == request) {
            k.token.cancel();
        }
    }

    /// The answer a resuming client is owed after event `index` of call `serial`.
    fn resume(&self, serial: u64, index: u64) -> Option<Events> {
        let calls = self.calls();
        let kept = calls.kept.iter().find(|k| k.serial == serial)?;
        if index >= 1 {
            return Some(Box::pin(futures_util::stream::empty()));
        }
        Some(answer_events(None, kept.answer.clone(), serial))
    }
}

/// A `tools/call` the session serves in place, taken apart for [`QuiverSessions::serve_in_place`].
struct InPlaceCall {
    entry: Arc<InPlace>,
    peer: rmcp::service::Peer<rmcp::RoleServer>,
    id: RequestId,
    request: ClientRequest,
}

/// The events of an in-place call not ready at once: `priming` (when sent), then its answer
/// when it comes (none when it was cancelled).
fn answer_events(
    priming: Option<ServerSseMessage>,
    mut answer: watch::Receiver<Option<Arc<ServerJsonRpcMessage>>>,
    serial: u64,
) -> Events {
    let answered = async move {
        let message = answer.wait_for(Option::is_some).await.ok()?.clone()?;
        // (The fields are public, the struct is not exhaustive: no clone of the answer.)
        let mut event = ServerSseMessage::retry(Duration::ZERO);
        (event.event_id, event.message, event.retry) = (Some(format!("q{serial}/1")), Some(message), None);
        Some(event)
    };
    let answered = futures_util::stream::once(answered).filter_map(std::future::ready);
    Box::pin(futures_util::stream::iter(priming).chain(answered))
}

/// `q<serial>/<index>`: an event id of an in-place call.
fn in_place_event(id: &str) -> Option<(u64, u64)> {
    let (serial, index) = id.strip_prefix('q')?.split_once('/')?;
    Some((serial.parse().ok()?, index.parse().ok()?))
}

/// [`LocalSessionManager`] that tags each session's `initialize` with its id and serves
/// `tools/call` in place (see the module documentation).
pub(crate) struct QuiverSessions {
    pub(crate) local: Arc<LocalSessionManager>,
    pub(crate) shared: Arc<Shared>,
    /// Requests handed to the sessions' workers and not answered yet ([`WorkerCall`]).
    pub(crate) worker_calls: Arc<AtomicUsize>,
}

impl QuiverSessions {
    fn entry(&self, id: &SessionId) -> Option<Arc<InPlace>> {
        self.shared.in_place.read().unwrap_or_else(|e| e.into_inner()).get(id).cloned()
    }

    /// A request of session `id` arrives now.
    fn touch(&self, id: &SessionId) {
        if let Some(entry) = self.entry(id) {
            entry.touched.store(now_ms(), Ordering::Relaxed);
        }
    }

    /// What serving `message` in place needs, when it is a `tools/call` the session may serve
    /// so (see the module documentation); else the message, given back for the worker.
    #[allow(clippy::result_large_err)] // The message is moved back, as it came, once per request.
    fn in_place_for(&self, id: &SessionId, message: ClientJsonRpcMessage) -> Result<InPlaceCall, ClientJsonRpcMessage> {
        let eligible = |message: &ClientJsonRpcMessage| {
            let ClientJsonRpcMessage::Request(r) = message else { return None };
            let ClientRequest::CallToolRequest(call) = &r.request else { return None };
            let meta = call.extensions.get::<RequestMetaObject>();
            if meta.is_some_and(|m| m.protocol_version().is_some() || m.get_progress_token().is_some())
                || self.local.event_store().is_some()
            {
                return None;
            }
            let entry = self.entry(id)?;
            let client = entry.handler.client()?;
            let busy = entry.running() >= self.local.session_config.channel_capacity.max(1);
            if client.can_elicit || client.can_sample || busy {
                return None;
            }
            let peer = client.peer.clone();
            Some((peer, entry))
        };
        let Some((peer, entry)) = eligible(&message) else { return Err(message) };
        let ClientJsonRpcMessage::Request(request) = message else { return Err(message) };
        Ok(InPlaceCall { entry, peer, id: request.id, request: request.request })
    }

    /// Runs a `tools/call` with the session's handler on this task (see the module
    /// documentation).
    async fn serve_in_place<S>(&self, call: InPlaceCall) -> Answer<S> {
        let InPlaceCall { entry, peer, id, mut request } = call;
        // The id of a call still running would share its cancellation (and its resumption):
        // refused under that id, as on stdio.
        if entry.calls().kept.iter().any(|k| k.finished.is_none() && k.request == id) {
            let error = rmcp::model::ErrorData::invalid_request(
                format!(
                    "Invalid Request: id {id} belongs to a request still in progress; give each request its own id"
                ),
                None,
            );
            return Answer::Ready(Some(ServerSseMessage::from_message(ServerJsonRpcMessage::error(error, Some(id)))));
        }
        let context = crate::connection::call_context(id.clone(), peer, request.extensions_mut());
        let token = context.ct.clone();
        let handler = entry.handler.clone();
        let answer_to = id.clone();
        let mut call = Box::pin(async move {
            match handler.handle_request(request, context).await {
                Ok(result) => ServerJsonRpcMessage::response(result, answer_to),
                Err(error) => {
                    crate::connection::log_error_answer(&answer_to, &error);
                    ServerJsonRpcMessage::error(error, Some(answer_to))
                }
            }
        });
        IN_PLACE_CALLS.fetch_add(1, Ordering::Relaxed);
        entry.touched.store(now_ms(), Ordering::Relaxed);
        if let Poll::Ready(answer) = poll_fn(|cx| Poll::Ready(call.as_mut().poll(cx))).await {
            return Answer::Ready(Some(ServerSseMessage::from_message(answer)));
        }
        // Not ready: it runs on as a task of its own (a dropped connection does not cancel it),
        // and its answer is kept for resumption.
        let (tx, rx) = watch::channel(None);
        let tx = Arc::new(tx);
        let serial = entry.keep(id, token.clone(), &tx);
        tokio::spawn(async move {
            let answer = call.await;
            if !token.is_cancelled() {
                // Unless a shutdown answered it already.
                tx.send_if_modified(|v| v.is_none().then(|| *v = Some(Arc::new(answer))).is_some());
            }
            entry.finish(serial);
        });
        let priming =
            self.local.session_config.sse_retry.map(|retry| ServerSseMessage::priming(format!("q{serial}/0"), retry));
        Answer::Running(answer_events(priming, rx, serial))
    }
}

impl QuiverSessions {
    /// Requests of every session still running (not answered, not cancelled): in-place calls,
    /// and requests through the sessions' workers (a `tools/call` with a `progressToken`, ...).
    pub(crate) fn running_calls(&self) -> usize {
        let all = self.shared.in_place.read().unwrap_or_else(|e| e.into_inner());
        all.values().map(|e| e.running()).sum::<usize>() + self.worker_calls.load(Ordering::Acquire)
    }

    /// At the end of a shutdown's grace: answers each in-place call still running with an error
    /// saying so, and cancels it (its stream would otherwise end with no answer). Returns how
    /// many it answered. (Calls through a session's worker are `rmcp`'s: they end with it.)
    pub(crate) fn answer_at_shutdown(&self, grace: Duration) -> usize {
        let all: Vec<Arc<InPlace>> =
            self.shared.in_place.read().unwrap_or_else(|e| e.into_inner()).values().cloned().collect();
        let mut answered = 0;
        for entry in all {
            for k in entry.calls().kept.iter().filter(|k| k.finished.is_none() && !k.token.is_cancelled()) {
                let error = rmcp::model::ErrorData::internal_error(
                    format!(
                        "the server is shutting down and this call was still running {} ms into its shutdown grace, so it was cancelled; it may have taken effect: check before calling it again, once the server is back",
                        grace.as_millis()
                    ),
                    Some(
                        serde_json::json!({ "code": quiver_router::codes::Code::Cancelled.as_str(), "reason": "shutdown" }),
                    ),
                );
                let message = Arc::new(ServerJsonRpcMessage::error(error, Some(k.request.clone())));
                let Some(publish) = k.publish.upgrade() else { continue };
                if publish.send_if_modified(|v| v.is_none().then(|| *v = Some(message)).is_some()) {
                    answered += 1;
                }
                k.token.cancel();
            }
        }
        answered
    }

    /// Closes the sessions without a request for `idle` and without an in-place call running
    /// (`rmcp`'s own idle timer is off: it restarts only on messages through the session's
    /// worker, which in-place calls do not pass). Sessions not yet initialized are `rmcp`'s
    /// (`init_timeout`).
    pub(crate) async fn close_idle(&self, idle: Duration) {
        let idle_ms = u64::try_from(idle.as_millis()).unwrap_or(u64::MAX);
        let now = now_ms();
        let expired: Vec<SessionId> = {
            let all = self.shared.in_place.read().unwrap_or_else(|e| e.into_inner());
            all.iter()
                .filter(|(_, e)| now.saturating_sub(e.touched.load(Ordering::Relaxed)) >= idle_ms && e.running() == 0)
                .map(|(id, _)| id.clone())
                .collect()
        };
        for id in expired {
            tracing::info!(session = %id, idle_ms, "HTTP session closed: idle");
            InPlace::forget(&self.shared, &id);
            if let Err(e) = SessionManager::close_session(&*self.local, &id).await {
                tracing::warn!(session = %id, error = %e, "could not close an idle HTTP session");
            }
        }
    }
}

impl SessionManager for QuiverSessions {
    type Error = LocalSessionManagerError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        SessionManager::create_session(&*self.local).await
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        mut message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        message.insert_extension(HttpSessionId(id.clone()));
        SessionManager::initialize_session(&*self.local, id, message).await
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        SessionManager::has_session(&*self.local, id).await
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        SessionManager::close_session(&*self.local, id).await
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        if (misread_standard_request(&message) || dropped_list_params(&message))
            && let Some(flag) = refused_flag(&message)
        {
            flag.0.store(true, Ordering::Release);
            return Ok(Answer::Nothing);
        }
        let message = match self.in_place_for(id, message) {
            Ok(call) => return Ok(self.serve_in_place(call).await),
            Err(message) => message,
        };
        self.touch(id);
        // (Only requests come here: rmcp hands notifications and responses to `accept_message`.)
        let call = WorkerCall::new(&self.worker_calls);
        Ok(Answer::Worker(SessionManager::create_stream(&*self.local, id, message).await?, Some(call)))
    }

    async fn accept_message(&self, id: &SessionId, message: ClientJsonRpcMessage) -> Result<(), Self::Error> {
        if let Some(entry) = self.entry(id) {
            entry.touched.store(now_ms(), Ordering::Relaxed);
            if let ClientJsonRpcMessage::Notification(n) = &message
                && let ClientNotification::CancelledNotification(CancelledNotification { params, .. }) = &n.notification
                && let Some(request) = &params.request_id
            {
                entry.cancel(request);
            }
        }
        SessionManager::accept_message(&*self.local, id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.touch(id);
        SessionManager::create_standalone_stream(&*self.local, id).await
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        if let Some((serial, index)) = in_place_event(&last_event_id)
            && let Some(events) = self.entry(id).and_then(|e| e.resume(serial, index))
        {
            return Ok(futures_util::future::Either::Left(events));
        }
        self.touch(id);
        Ok(futures_util::future::Either::Right(SessionManager::resume(&*self.local, id, last_event_id).await?))
    }

    async fn restore_session(&self, id: SessionId) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        SessionManager::restore_session(&*self.local, id).await
    }

    fn event_store(&self) -> Option<Arc<dyn EventStore>> {
        SessionManager::event_store(&*self.local)
    }
}
