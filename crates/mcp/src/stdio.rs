//! The stdio transport: newline-delimited JSON-RPC over the process's pipes (`rmcp`'s
//! `stdio_pipes`, non-blocking on Linux). Reading is bounded by `max_message_bytes`; what does
//! not parse is answered here with a JSON-RPC error instead of reaching (or stopping) the
//! protocol loop. Each outgoing message is one `write` of one complete line.

use std::io;
use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, ServerJsonRpcMessage};
use rmcp::service::{RxJsonRpcMessage, ServiceExt, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::Mutex;

use crate::QuiverServer;
use crate::wire::{Refusal, parse, too_large};

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
    let transport = LineTransport::new(read, write, server.options().max_message_bytes);
    let running = match server.connection().serve(transport).await {
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
    Oversized,
    Eof,
    Io(io::Error),
}

/// The output half, shared by the send futures; `None` once closed.
type Output<W> = Arc<Mutex<Option<W>>>;

/// Newline-delimited JSON-RPC with bounded lines and answers to malformed input.
struct LineTransport<R, W> {
    reader: BufReader<R>,
    line: Vec<u8>,
    /// Dropping the rest of an oversized line (kept here: `receive` may be cancelled).
    discarding: bool,
    max_bytes: usize,
    out: Output<W>,
    /// An `initialize` request has been passed on.
    initialize_seen: bool,
}

/// Writes one frame (a whole line) and flushes.
async fn write_frame<W: AsyncWrite + Unpin>(out: &Output<W>, frame: &[u8]) -> io::Result<()> {
    let mut guard = out.lock().await;
    let w = guard.as_mut().ok_or_else(|| io::Error::new(io::ErrorKind::BrokenPipe, "the output is closed"))?;
    w.write_all(frame).await?;
    w.flush().await
}

impl<R, W> LineTransport<R, W>
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    fn new(read: R, write: W, max_bytes: usize) -> Self {
        LineTransport {
            reader: BufReader::with_capacity(64 * 1024, read),
            line: Vec::new(),
            discarding: false,
            max_bytes,
            out: Arc::new(Mutex::new(Some(write))),
            initialize_seen: false,
        }
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
                    return LineRead::Eof;
                }
                let newline = available.iter().position(|b| *b == b'\n');
                let take = newline.map_or(available.len(), |i| i + 1);
                if self.discarding {
                    if newline.is_some() {
                        self.discarding = false;
                    }
                    (take, None)
                } else if self.line.len() + take > self.max_bytes + 2 {
                    // + 2: the line's own "\r\n" does not count against the limit.
                    self.line.clear();
                    self.discarding = newline.is_none();
                    (take, Some(LineRead::Oversized))
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

    /// Sends an answer written by the transport itself, from its own task: `receive` is never
    /// suspended on output (it must stay cancellation-safe).
    fn answer(&self, message: ServerJsonRpcMessage) {
        match encode(&message) {
            Ok(frame) => {
                let out = self.out.clone();
                tokio::spawn(async move {
                    if let Err(e) = write_frame(&out, &frame).await {
                        tracing::debug!(error = %e, "cannot send an error answer");
                    }
                });
            }
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

fn encode(message: &ServerJsonRpcMessage) -> io::Result<Vec<u8>> {
    let mut frame = match message {
        rmcp::model::JsonRpcMessage::Error(e) => crate::wire::error_json(e),
        other => serde_json::to_vec(other),
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
            match self.read_line().await {
                LineRead::Line => {}
                LineRead::Oversized => {
                    tracing::warn!(limit = self.max_bytes, "refused a message over the size limit");
                    self.answer(ServerJsonRpcMessage::error(too_large(self.max_bytes), None));
                    continue;
                }
                LineRead::Eof => return None,
                LineRead::Io(e) => {
                    tracing::info!(error = %e, "cannot read from the client");
                    return None;
                }
            }
            let mut bytes: &[u8] = &self.line;
            bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
            bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
            bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
            if bytes.iter().all(u8::is_ascii_whitespace) {
                self.line.clear();
                continue;
            }
            let parsed = parse(bytes);
            self.line.clear();
            match parsed {
                Ok(Some(message)) => {
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
        if let Some(mut w) = self.out.lock().await.take() {
            let _ = w.shutdown().await;
        }
        Ok(())
    }
}
