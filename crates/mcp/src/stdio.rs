//! The stdio transport: newline-delimited JSON-RPC over the process's pipes (`rmcp`'s
//! `stdio_pipes`, non-blocking on Linux). Reading is bounded by `max_message_bytes`; what does
//! not parse is answered here with a JSON-RPC error instead of reaching (or stopping) the
//! protocol loop. Each outgoing message is one `write` of one complete line.
//!
//! The call lane: once the session is initialized, a `tools/call` line is not handed to
//! `rmcp`'s serve loop (which spawns a task per request, sends the response over a channel
//! and spawns another task to write it). The transport runs the same handler `rmcp` would
//! (`Service::handle_request` of the session's [`Connection`], with a request context built
//! as `rmcp` builds it), polls it once in place, and writes the response line itself when it
//! is ready; a call that is not ready stays in flight in the lane, driven from `receive`,
//! and is answered when done (any number at once). `notifications/cancelled` cancels a lane
//! call's token (and its response is dropped, as `rmcp` drops a cancelled request's).
//! Notifications a call emits go through `rmcp` as before and each is awaited until written,
//! so they reach the client before the call's response; requests to the client
//! (elicitation, sampling) go out through `rmcp` and their answers come back through it.
//! Answers go out as they are ready, not in request order (JSON-RPC matches them by id, and
//! `rmcp` answers the requests it serves in the order they finish too).
//! While the input already holds the next request, the lane's response lines are held back
//! (a few KiB at most) and written together once the input runs dry. When the client closes
//! its input, the lane's calls in flight are still answered (each under its own deadline)
//! before the session ends, and a last line without its newline is read as a line.

use std::collections::HashMap;
use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use futures_util::stream::{FuturesUnordered, StreamExt};
use rmcp::RoleServer;
use rmcp::model::{
    CallToolRequest, CallToolResponse, ClientJsonRpcMessage, ClientNotification, ClientRequest, ProtocolVersion,
    RequestId, RequestMetaObject, ServerJsonRpcMessage, ServerResult,
};
use rmcp::service::{Peer, RxJsonRpcMessage, Service, ServiceExt, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{Mutex, OwnedMutexGuard};
use tokio_util::sync::CancellationToken;

use crate::connection::Routed;
use crate::results::call_result_with;
use crate::wire::{Framing, Refusal, call_message, parse, parse_call, too_large};
use crate::{Connection, QuiverServer};

/// Serves one MCP session on this process's stdin and stdout until the client closes stdin.
/// Only protocol messages are written to stdout.
pub async fn serve_stdio(server: QuiverServer) -> io::Result<()> {
    let (read, write) = rmcp::transport::stdio_pipes();
    serve_io(server, read, write).await
}

/// Serves one MCP session over any byte streams (stdio, a socket, an in-memory pipe in tests)
/// until the reader ends.
pub async fn serve_io<R, W>(server: QuiverServer, read: R, write: W) -> io::Result<()>
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    // One handler, shared by `rmcp` (every other request) and the call lane.
    let connection = Arc::new(server.connection());
    let transport = LineTransport::new(read, write, server.options().max_message_bytes, connection.clone());
    let running = match connection.serve(transport).await {
        Ok(r) => r,
        Err(e) => {
            // The client went away (or broke the handshake) before the session started.
            tracing::info!(error = %e, "MCP session ended before it was initialized");
            return Ok(());
        }
    };
    match running.waiting().await {
        Ok(reason) => {
            tracing::info!(?reason, "MCP session ended");
            Ok(())
        }
        Err(e) => Err(io::Error::other(format!("the MCP session task failed: {e}"))),
    }
}

enum LineRead {
    Line,
    /// Over the limit; the id its first bytes name, if any.
    Oversized(Option<RequestId>),
    Eof,
    Io(io::Error),
}

/// The output half, shared by the send futures; `None` once closed.
type Output<W> = Arc<Mutex<Option<W>>>;

/// Newline-delimited JSON-RPC with bounded lines and answers to malformed input.
struct LineTransport<R, W> {
    lines: Lines<R>,
    out: Output<W>,
    /// An `initialize` request has been passed on.
    initialize_seen: bool,
    lane: CallLane,
    /// The lane's responses on their way out (a line at a time, under the output's lock).
    outbox: Outbox<W>,
}

/// The input, read a bounded line at a time.
struct Lines<R> {
    reader: BufReader<R>,
    line: Vec<u8>,
    /// Dropping the rest of an oversized line (kept here: `receive` may be cancelled).
    discarding: bool,
    max_bytes: usize,
}

/// Writes one frame (a whole line) and flushes.
async fn write_frame<W: AsyncWrite + Unpin>(out: &Output<W>, frame: &[u8]) -> io::Result<()> {
    let mut guard = out.lock().await;
    let w = guard.as_mut().ok_or_else(|| io::Error::new(io::ErrorKind::BrokenPipe, "the output is closed"))?;
    w.write_all(frame).await?;
    w.flush().await
}

impl<R: AsyncRead + Unpin> Lines<R> {
    /// The next line is already read in whole (reading it will not wait; not so while the
    /// rest of an oversized line is dropped).
    fn holds_a_line(&self) -> bool {
        !self.discarding && self.reader.buffer().contains(&b'\n')
    }

    /// Reads one `\n`-terminated line into `self.line`, never buffering more than
    /// `max_bytes`. Cancellation-safe: a partial line stays in `self.line`.
    async fn read_line(&mut self) -> LineRead {
        loop {
            let (consumed, done) = {
                let available = match self.reader.fill_buf().await {
                    Ok(a) => a,
                    Err(e) => return LineRead::Io(e),
                };
                if available.is_empty() {
                    // A last line without its newline is a line all the same.
                    return if self.discarding || self.line.is_empty() { LineRead::Eof } else { LineRead::Line };
                }
                let newline = available.iter().position(|b| *b == b'\n');
                let take = newline.map_or(available.len(), |i| i + 1);
                if self.discarding {
                    if newline.is_some() {
                        self.discarding = false;
                    }
                    (take, None)
                } else if self.line.len() + take > self.max_bytes + 2 {
                    // + 2: the line's own "\r\n" does not count against the limit. Its id, if
                    // its first bytes name one, so the answer reaches the request.
                    self.line.extend_from_slice(&available[..take]);
                    let id = crate::wire::top_level_id(&self.line);
                    self.line.clear();
                    self.discarding = newline.is_none();
                    (take, Some(LineRead::Oversized(id)))
                } else {
                    self.line.extend_from_slice(&available[..take]);
                    (take, newline.map(|_| LineRead::Line))
                }
            };
            self.reader.consume(consumed);
            if let Some(r) = done {
                return r;
            }
        }
    }
}

impl<R, W> LineTransport<R, W>
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    fn new(read: R, write: W, max_bytes: usize, connection: Arc<Connection>) -> Self {
        let out = Arc::new(Mutex::new(Some(write)));
        LineTransport {
            lines: Lines {
                reader: BufReader::with_capacity(64 * 1024, read),
                line: Vec::new(),
                discarding: false,
                max_bytes,
            },
            outbox: Outbox::new(out.clone()),
            out,
            initialize_seen: false,
            lane: CallLane::new(connection),
        }
    }

    /// Sends an answer written by the transport itself: queued with the lane's response lines,
    /// which `receive` writes as it polls (never suspended on output: it stays
    /// cancellation-safe) and in whole before the session ends.
    fn answer(&mut self, message: ServerJsonRpcMessage) {
        match encode(&message) {
            Ok(frame) => self.outbox.push(frame),
            Err(e) => tracing::error!(error = %e, "cannot encode an error answer"),
        }
    }

    /// Lets a message through, or answers it here: before `initialize`, only `initialize` and
    /// `ping` requests go on (the protocol loop would end the session on anything else).
    fn admit(&mut self, message: ClientJsonRpcMessage) -> Option<ClientJsonRpcMessage> {
        if self.initialize_seen {
            return Some(message);
        }
        match &message {
            ClientJsonRpcMessage::Request(r) => match &r.request {
                ClientRequest::InitializeRequest(_) => {
                    self.initialize_seen = true;
                    Some(message)
                }
                ClientRequest::PingRequest(_) => Some(message),
                other => {
                    tracing::debug!(method = other.method(), "request before initialize");
                    self.answer(ServerJsonRpcMessage::error(
                        rmcp::model::ErrorData::invalid_request(
                            format!("the session is not initialized: send `initialize` before `{}`", other.method()),
                            None,
                        ),
                        Some(r.id.clone()),
                    ));
                    None
                }
            },
            _ => {
                tracing::debug!("ignoring a notification or response received before initialize");
                None
            }
        }
    }
}

/// `tools/call` requests the lane has taken, in this process (for tests).
static LANE_CALLS: AtomicU64 = AtomicU64::new(0);

/// How many `tools/call` requests the stdio call lane has taken in this process (tests use it
/// to tell which path served a call; not part of the API).
#[doc(hidden)]
pub fn lane_calls() -> u64 {
    LANE_CALLS.load(Ordering::Relaxed)
}

/// Lane calls answered with a line written from the tool's output text, in this process.
static LANE_LINES: AtomicU64 = AtomicU64::new(0);

/// How many lane calls were answered with a line written from the tool's output text
/// (`results::call_line`) in this process (for tests; not part of the API).
#[doc(hidden)]
pub fn lane_lines() -> u64 {
    LANE_LINES.load(Ordering::Relaxed)
}

/// A lane call's future: its id and serial, and its response line (`None` when it could not
/// be encoded).
type LaneCall = Pin<Box<dyn Future<Output = (RequestId, u64, Option<Vec<u8>>)> + Send>>;

/// A call taken by the lane, not yet polled.
struct Started {
    id: RequestId,
    serial: u64,
    token: CancellationToken,
    future: LaneCall,
}

/// `tools/call` requests served next to `rmcp`'s serve loop (see the module doc).
struct CallLane {
    connection: Arc<Connection>,
    /// The session's client, once it is initialized.
    peer: Option<Peer<RoleServer>>,
    /// Calls not answered at their first poll.
    in_flight: FuturesUnordered<LaneCall>,
    /// Their cancellation tokens by request id, with the serial of the call holding the id
    /// (a response whose entry is gone was cancelled and is dropped).
    pending: HashMap<RequestId, (u64, CancellationToken)>,
    serial: u64,
}

impl CallLane {
    fn new(connection: Arc<Connection>) -> CallLane {
        CallLane { connection, peer: None, in_flight: FuturesUnordered::new(), pending: HashMap::new(), serial: 0 }
    }

    /// Takes a `tools/call` for the lane, or gives it back for `rmcp`: before the session is
    /// initialized (the transport then refuses it as any request), and when its `_meta`
    /// names a protocol version (`rmcp` scopes such a handler to that version).
    #[allow(clippy::result_large_err)] // Given back once per session at most, moved not copied.
    fn start(&mut self, id: RequestId, mut request: CallToolRequest) -> Result<Started, (RequestId, CallToolRequest)> {
        if self.peer.is_none() {
            self.peer = self.connection.peer();
        }
        let Some(peer) = &self.peer else { return Err((id, request)) };
        if request.extensions.get::<RequestMetaObject>().is_some_and(|m| m.protocol_version().is_some()) {
            return Err((id, request));
        }
        let context = crate::connection::call_context(id.clone(), peer.clone(), &mut request.extensions);
        let token = context.ct.clone();
        self.serial += 1;
        let serial = self.serial;
        let connection = self.connection.clone();
        let answer_to = id.clone();
        // What `rmcp`'s handler does with a result for the protocol version (see `finish`).
        let current = context.protocol_version().is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str());
        // A session that did not start with `initialize` (none here) goes through `rmcp`'s
        // whole handler, which checks such a request's own metadata.
        let inline_session = context.peer.peer_info().is_none();
        let future: LaneCall = Box::pin(async move {
            let answer = if inline_session {
                connection.handle_request(ClientRequest::CallToolRequest(request), context).await
            } else {
                match connection.call_tool_routed(request.params, context).await {
                    // The usual case: the line written from the tool's own output text.
                    Ok(Routed::Outcome(outcome, structured_text)) => {
                        match crate::results::call_line(&answer_to, outcome, structured_text, current) {
                            Ok(line) => {
                                LANE_LINES.fetch_add(1, Ordering::Relaxed);
                                return (answer_to, serial, Some(line));
                            }
                            Err(outcome) => Ok(finish(call_result_with(*outcome, structured_text).into(), current)),
                        }
                    }
                    Ok(Routed::Answered(response)) => Ok(finish(response, current)),
                    Err(error) => Err(error),
                }
            };
            let answer = match answer {
                Ok(result) => ServerJsonRpcMessage::response(result, answer_to.clone()),
                Err(error) => {
                    crate::connection::log_error_answer(&answer_to, &error);
                    ServerJsonRpcMessage::error(error, Some(answer_to.clone()))
                }
            };
            let frame = encode(&answer).inspect_err(|e| tracing::error!(error = %e, "cannot encode a response")).ok();
            (answer_to, serial, frame)
        });
        LANE_CALLS.fetch_add(1, Ordering::Relaxed);
        Ok(Started { id, serial, token, future })
    }

    /// Polls a call once: a ready answer goes out now (or with the next ones, `more_input`:
    /// another line is already read), else the call joins those in flight.
    fn poll_started<W: AsyncWrite + Send + Unpin + 'static>(
        &mut self,
        mut call: Started,
        cx: &mut Context<'_>,
        outbox: &mut Outbox<W>,
        more_input: bool,
    ) {
        match call.future.as_mut().poll(cx) {
            Poll::Ready((_, _, frame)) => {
                if let Some(frame) = frame {
                    outbox.push(frame);
                    let _ = outbox.poll_send(cx, more_input);
                }
            }
            Poll::Pending => {
                self.pending.insert(call.id, (call.serial, call.token));
                self.in_flight.push(call.future);
            }
        }
    }

    /// Drives the calls in flight and the output (held back while `more_input`); never ready
    /// (it is one branch of a select).
    fn poll_progress<W: AsyncWrite + Send + Unpin + 'static>(
        &mut self,
        cx: &mut Context<'_>,
        outbox: &mut Outbox<W>,
        more_input: bool,
    ) -> Poll<()> {
        // Polled only with calls in it: an empty `FuturesUnordered` still registers the waker
        // on every poll, and this runs once per line read.
        while !self.in_flight.is_empty()
            && let Poll::Ready(Some((id, serial, frame))) = self.in_flight.poll_next_unpin(cx)
        {
            match self.pending.get(&id) {
                Some((s, _)) if *s == serial => {
                    self.pending.remove(&id);
                }
                _ => {
                    tracing::debug!(%id, "dropping the response of a cancelled call");
                    continue;
                }
            }
            if let Some(frame) = frame {
                outbox.push(frame);
            }
        }
        let _ = outbox.poll_send(cx, more_input);
        Poll::Pending
    }

    /// Drives the calls in flight until each has answered and every response line is written
    /// (the input ended); ready then.
    fn poll_drain<W: AsyncWrite + Send + Unpin + 'static>(
        &mut self,
        cx: &mut Context<'_>,
        outbox: &mut Outbox<W>,
    ) -> Poll<()> {
        let _ = self.poll_progress(cx, outbox, false);
        if !self.in_flight.is_empty() {
            return Poll::Pending;
        }
        outbox.poll_drain(cx)
    }

    /// `notifications/cancelled` for `id`: a lane call in flight is cancelled and will not be
    /// answered.
    fn cancel(&mut self, id: &RequestId) {
        if let Some((_, token)) = self.pending.remove(id) {
            tracing::info!(%id, "cancelled");
            token.cancel();
        }
    }

    fn cancel_all(&mut self) {
        for (_, (_, token)) in self.pending.drain() {
            token.cancel();
        }
    }
}

impl Drop for CallLane {
    fn drop(&mut self) {
        self.cancel_all();
    }
}

/// Waiting for the output's lock.
type Locking<W> = Pin<Box<dyn Future<Output = OwnedMutexGuard<Option<W>>> + Send>>;

/// Response lines waiting to be written by the lane, from the task that polls `receive`. They
/// are written whole under the output's lock (so a line never interleaves with one `rmcp`
/// sends); while the input already holds the next line, lines are held back (up to
/// [`HOLD_BYTES`]) and go out together in one write.
struct Outbox<W> {
    out: Output<W>,
    /// Whole lines, one after the other.
    lines: Vec<u8>,
    /// Bytes of `lines` already written.
    written: usize,
    guard: Option<OwnedMutexGuard<Option<W>>>,
    /// Waiting for the lock (another line is being written).
    locking: Option<Locking<W>>,
}

impl<W: AsyncWrite + Send + Unpin + 'static> Outbox<W> {
    fn new(out: Output<W>) -> Self {
        Outbox { out, lines: Vec::new(), written: 0, guard: None, locking: None }
    }

    fn push(&mut self, line: Vec<u8>) {
        if self.lines.is_empty() {
            self.lines = line;
        } else {
            self.lines.extend_from_slice(&line);
        }
    }

    /// [`Self::poll_drain`], unless lines may wait for the next ones (`hold`: the next request
    /// is already read) and there are not many yet (or a write is under way).
    fn poll_send(&mut self, cx: &mut Context<'_>, hold: bool) -> Poll<()> {
        if hold && self.guard.is_none() && self.locking.is_none() && self.lines.len() < HOLD_BYTES {
            return Poll::Ready(());
        }
        self.poll_drain(cx)
    }

    /// Writes and flushes what is queued; ready when it all went out (or the output is gone,
    /// the lines then dropped), the lock released.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            let Some(guard) = &mut self.guard else {
                if self.lines.is_empty() {
                    return Poll::Ready(());
                }
                if let Some(locking) = &mut self.locking {
                    let guard = std::task::ready!(locking.as_mut().poll(cx));
                    self.locking = None;
                    self.guard = Some(guard);
                } else {
                    match self.out.clone().try_lock_owned() {
                        Ok(guard) => self.guard = Some(guard),
                        Err(_) => self.locking = Some(Box::pin(self.out.clone().lock_owned())),
                    }
                }
                continue;
            };
            let Some(w) = guard.as_mut() else {
                tracing::debug!(bytes = self.lines.len(), "the output is closed; dropping responses");
                self.lines.clear();
                self.written = 0;
                self.guard = None;
                return Poll::Ready(());
            };
            let result = if self.written < self.lines.len() {
                match std::task::ready!(Pin::new(&mut *w).poll_write(cx, &self.lines[self.written..])) {
                    Ok(0) => Err(io::Error::from(io::ErrorKind::WriteZero)),
                    Ok(n) => {
                        self.written += n;
                        if self.written == self.lines.len() {
                            self.lines.clear();
                            self.written = 0;
                        }
                        continue;
                    }
                    Err(e) => Err(e),
                }
            } else {
                std::task::ready!(Pin::new(&mut *w).poll_flush(cx))
            };
            if let Err(e) = result {
                tracing::debug!(error = %e, "cannot send a response");
                self.lines.clear();
                self.written = 0;
            }
            self.guard = None;
            return Poll::Ready(());
        }
    }
}

/// A `tools/call` result as `rmcp`'s handler finishes it for the session's protocol version:
/// `resultType: "complete"` only for 2026-07-28 and later (the lane calls the handler's
/// `call_tool` itself).
fn finish(response: CallToolResponse, current: bool) -> ServerResult {
    let mut result = ServerResult::from(response);
    if current {
        result.fill_missing_cache_hints();
    } else {
        result.strip_result_type_for_legacy_peer();
    }
    result
}

/// Room for a typical response line up front (a tool result with its `_meta` is a few hundred
/// bytes), so serializing it does not grow the buffer step by step.
const FRAME_CAPACITY: usize = 1024;

/// At most this many bytes of response lines are held back for the next ones.
const HOLD_BYTES: usize = 16 * 1024;

fn encode(message: &ServerJsonRpcMessage) -> io::Result<Vec<u8>> {
    let mut frame = match message {
        rmcp::model::JsonRpcMessage::Error(e) => crate::wire::error_json(e),
        other => {
            let mut frame = Vec::with_capacity(FRAME_CAPACITY);
            serde_json::to_writer(&mut frame, other).map(|()| frame)
        }
    }
    .map_err(io::Error::other)?;
    frame.push(b'\n');
    Ok(frame)
}

impl<R, W> Transport<RoleServer> for LineTransport<R, W>
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    type Error = io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), io::Error>> + Send + 'static {
        let frame = encode(&item);
        let out = self.out.clone();
        async move { write_frame(&out, &frame?).await }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            let read = {
                let LineTransport { lines, lane, outbox, .. } = self;
                let more_input = lines.holds_a_line();
                // The lane's calls and output make progress whenever the serve loop polls
                // this future (its branch never completes); the read ends the select.
                tokio::select! {
                    biased;
                    () = poll_fn(|cx| lane.poll_progress(cx, outbox, more_input)) => continue,
                    read = lines.read_line() => read,
                }
            };
            match read {
                LineRead::Line => {}
                LineRead::Oversized(id) => {
                    tracing::warn!(limit = self.lines.max_bytes, "refused a message over the size limit");
                    self.answer(ServerJsonRpcMessage::error(too_large(self.lines.max_bytes), id));
                    continue;
                }
                LineRead::Eof => {
                    // The client closed its input: the calls it sent are still answered (a
                    // client piping in a file of requests expects every answer) before the
                    // session ends. Each runs under its own deadline; a client that wants them
                    // gone sends `notifications/cancelled` first, or ends the process.
                    let LineTransport { lane, outbox, .. } = self;
                    poll_fn(|cx| lane.poll_drain(cx, outbox)).await;
                    return None;
                }
                LineRead::Io(e) => {
                    tracing::info!(error = %e, "cannot read from the client");
                    return None;
                }
            }
            let mut bytes: &[u8] = &self.lines.line;
            bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
            bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
            bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
            if bytes.iter().all(u8::is_ascii_whitespace) {
                self.lines.line.clear();
                continue;
            }
            if let Some((id, call)) = parse_call(bytes) {
                self.lines.line.clear();
                // JSON-RPC ids tell a session's requests in progress apart: a second call under
                // the id of one still running would take its answer (the first one's is then
                // dropped as if cancelled). Refused, the running call keeps its id.
                if self.lane.pending.contains_key(&id) {
                    self.answer(ServerJsonRpcMessage::error(
                        rmcp::model::ErrorData::invalid_request(
                            format!("Invalid Request: id {id} belongs to a request still in progress; give each request its own id"),
                            None,
                        ),
                        Some(id),
                    ));
                    continue;
                }
                match self.lane.start(id, call) {
                    Ok(started) => {
                        // Polled once in place; this `poll_fn` is ready at once, so `receive`
                        // never waits between taking the line and handing the call over (it
                        // stays cancellation-safe).
                        let LineTransport { lines, lane, outbox, .. } = self;
                        let more_input = lines.holds_a_line();
                        let mut started = Some(started);
                        poll_fn(|cx| {
                            if let Some(call) = started.take() {
                                lane.poll_started(call, cx, outbox, more_input);
                            }
                            Poll::Ready(())
                        })
                        .await;
                        continue;
                    }
                    Err((id, call)) => {
                        if let Some(m) = self.admit(call_message(id, call)) {
                            return Some(m);
                        }
                        continue;
                    }
                }
            }
            let parsed = parse(bytes, Framing::Line);
            self.lines.line.clear();
            match parsed {
                Ok(Some(message)) => {
                    if let ClientJsonRpcMessage::Notification(n) = &message
                        && let ClientNotification::CancelledNotification(c) = &n.notification
                        && let Some(id) = &c.params.request_id
                    {
                        self.lane.cancel(id);
                    }
                    if let Some(m) = self.admit(message) {
                        return Some(m);
                    }
                }
                Ok(None) => tracing::debug!("ignoring a malformed notification or response"),
                Err(Refusal { id, error }) => {
                    tracing::debug!(code = error.code.0, message = %error.message, "refused a malformed message");
                    self.answer(ServerJsonRpcMessage::error(error, id));
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), io::Error> {
        self.lane.cancel_all();
        if let Some(mut w) = self.out.lock().await.take() {
            let _ = w.shutdown().await;
        }
        Ok(())
    }
}
