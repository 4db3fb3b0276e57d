//! The session manager of the streamable HTTP transport: `rmcp`'s [`LocalSessionManager`]
//! (sessions live in this process), with one addition: the `initialize` it forwards to a
//! session carries the session's `Mcp-Session-Id` ([`HttpSessionId`]), so the session can key
//! its state in the [`crate::SessionStore`] by the id the client holds. A replayed
//! `initialize` (rmcp's cross-instance restore) goes through the same path, with rmcp's
//! `SessionRestoreMarker` next to it.

use std::sync::Arc;

use futures_core::Stream;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::local::{LocalSessionManager, LocalSessionManagerError};
use rmcp::transport::streamable_http_server::session::{
    EventStore, RestoreOutcome, ServerSseMessage, SessionId, SessionManager,
};

/// The `Mcp-Session-Id` of the session an `initialize` starts (an extension of the request).
#[derive(Debug, Clone)]
pub struct HttpSessionId(pub SessionId);

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
        SessionManager::create_stream(&*self.local, id, message).await
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
