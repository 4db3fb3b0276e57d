//! Session hooks: the tools plugins name in their manifest's `hooks` (`session_start`,
//! `session_end`), called through the router (scopes, validation, policies and telemetry as for
//! any call) with the session's context. A hook runs in a task of its own, only for sessions
//! whose profile may see its tool, bounded by `SessionHooks::TIMEOUT_MS`; its result goes to
//! nobody and a failure is logged: a hook never delays or fails the session.

use std::sync::Arc;
use std::time::Duration;

use quiver_manifest::SessionHooks;
use quiver_router::{Call, Caller, Lane, NullBridge};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::server::Shared;

/// Which hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HookEvent {
    SessionStart,
    SessionEnd,
}

impl HookEvent {
    fn as_str(self) -> &'static str {
        match self {
            HookEvent::SessionStart => "session_start",
            HookEvent::SessionEnd => "session_end",
        }
    }
}

/// Starts the `event` hooks of every plugin for the session of `caller` in the background
/// (no-op outside a tokio runtime or when no plugin has one).
pub(crate) fn spawn(shared: &Arc<Shared>, caller: &Arc<Caller>, event: HookEvent, resumed: bool) {
    let catalog = shared.source.catalog();
    let tools: Vec<String> = catalog
        .plugins()
        .iter()
        .filter_map(|p| match event {
            HookEvent::SessionStart => p.manifest.hooks.session_start.clone(),
            HookEvent::SessionEnd => p.manifest.hooks.session_end.clone(),
        })
        .filter(|t| catalog.resolve(t).is_some_and(|r| caller.access.may_see(&r.tool.name, r.def)))
        .collect();
    if tools.is_empty() {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        tracing::warn!(session = %caller.session_id, event = event.as_str(), "session hooks skipped: no async runtime");
        return;
    };
    let (shared, caller) = (shared.clone(), caller.clone());
    runtime.spawn(async move {
        for tool in tools {
            run(&shared, &caller, &tool, event, resumed).await;
        }
    });
}

async fn run(shared: &Shared, caller: &Arc<Caller>, tool: &str, event: HookEvent, resumed: bool) {
    let cancel = CancellationToken::new();
    let call = Call {
        name: tool.to_owned(),
        arguments: json!({
            "event": event.as_str(),
            "session_id": caller.session_id,
            "profile": caller.mode,
            "client": caller.client,
            "resumed": resumed,
        }),
        lane: Lane::Typed,
        caller: caller.clone(),
        request_id: None,
        confirmed: false,
        cancel: cancel.clone(),
        bridge: Arc::new(NullBridge),
        config: serde_json::Value::Null,
        trace_parent: None,
        // The output is not read.
        outputs_as_text: true,
    };
    let limit = Duration::from_millis(SessionHooks::TIMEOUT_MS);
    match tokio::time::timeout(limit, shared.router.call(call)).await {
        Err(_) => {
            cancel.cancel();
            tracing::warn!(session = %caller.session_id, tool, event = event.as_str(), timeout_ms = SessionHooks::TIMEOUT_MS, "session hook timed out; the session goes on");
        }
        Ok(outcome) => match &outcome.response.error {
            Some(e) => {
                tracing::warn!(session = %caller.session_id, tool, event = event.as_str(), code = %e.code, error = %e.message, "session hook failed; the session goes on")
            }
            None => tracing::debug!(session = %caller.session_id, tool, event = event.as_str(), "session hook ran"),
        },
    }
}
