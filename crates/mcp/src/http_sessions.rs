//! The session manager of the streamable HTTP transport: `rmcp`'s [`LocalSessionManager`]
//! (sessions live in this process), with one addition: the `initialize` it forwards to a
//! session carries the session's `Mcp-Session-Id` ([`HttpSessionId`]), so the session can key
//! its state in the [`crate::SessionStore`] by the id the client holds. A replayed
//! `initialize` (rmcp's cross-instance restore) goes through the same path, with rmcp's
//! `SessionRestoreMarker` next to it.
//!
//! Bodies are parsed once, by `rmcp`. A standard method whose parameters do not fit its type
//! reaches the session manager as a custom request (which the handler would answer "method not
//! found"); [`QuiverSessions::create_stream`] stops it there, unsent, and marks the request's
//! [`Refused`] flag, from which the HTTP layer answers `-32602` with status 400.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use futures_core::Stream;
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, GetExtensions, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::local::{LocalSessionManager, LocalSessionManagerError};
use rmcp::transport::streamable_http_server::session::{
    EventStore, RestoreOutcome, ServerSseMessage, SessionId, SessionManager,
};

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

/// True for a request `rmcp` read as a custom request although its method is a standard one.
fn misread_standard_request(message: &ClientJsonRpcMessage) -> bool {
    matches!(message, ClientJsonRpcMessage::Request(r)
        if matches!(&r.request, ClientRequest::CustomRequest(c) if crate::wire::is_standard_request(&c.method)))
}

/// The flag the HTTP layer put on the request this message came in.
fn refused_flag(message: &ClientJsonRpcMessage) -> Option<&Refused> {
    let ClientJsonRpcMessage::Request(r) = message else { return None };
    r.request.extensions().get::<axum::http::request::Parts>()?.extensions.get::<Refused>()
}

/// A request's response stream: the session's, or none for a request stopped before it.
pub(crate) struct Answer<S>(Option<S>);

impl<S: Stream + Unpin> Stream for Answer<S> {
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        match self.0.as_mut() {
            Some(s) => Pin::new(s).poll_next(cx),
            None => Poll::Ready(None),
        }
    }
}

/// [`LocalSessionManager`] that tags each session's `initialize` with its id.
pub(crate) struct QuiverSessions {
    pub(crate) local: Arc<LocalSessionManager>,
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
        if misread_standard_request(&message)
            && let Some(flag) = refused_flag(&message)
        {
            flag.0.store(true, Ordering::Release);
            return Ok(Answer(None));
        }
        Ok(Answer(Some(SessionManager::create_stream(&*self.local, id, message).await?)))
    }

    async fn accept_message(&self, id: &SessionId, message: ClientJsonRpcMessage) -> Result<(), Self::Error> {
        SessionManager::accept_message(&*self.local, id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        SessionManager::create_standalone_stream(&*self.local, id).await
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        SessionManager::resume(&*self.local, id, last_event_id).await
    }

    async fn restore_session(&self, id: SessionId) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        SessionManager::restore_session(&*self.local, id).await
    }

    fn event_store(&self) -> Option<Arc<dyn EventStore>> {
        SessionManager::event_store(&*self.local)
    }
}
