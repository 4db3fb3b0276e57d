//! What a caller hands the router and what it gets back.

use std::sync::Arc;
use std::time::Duration;

use quiver_abi::ToolResponse;
use quiver_catalog::{Access, Notice};
use quiver_manifest::LifecycleState;
use serde::Serialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

pub use quiver_catalog::LogLevel;
pub use quiver_telemetry::Lane;

/// A boxed, sendable future (no `futures` dependency).
pub use quiver_catalog::BackendFuture as BoxFuture;
/// The client side of a session, as the router and a running tool reach it: the one
/// host-services trait, [`quiver_catalog::HostServices`] (logs, progress, elicitation,
/// sampling), under the name the MCP layer implements it by. [`NullBridge`] for the CLI and tests.
pub use quiver_catalog::HostServices as ClientBridge;
/// A bridge to nobody: drops logs and progress, cannot elicit or sample.
pub use quiver_catalog::NullSink as NullBridge;

/// One shared [`NullBridge`] (no allocation per call).
fn null_bridge() -> Arc<dyn ClientBridge> {
    static BRIDGE: std::sync::OnceLock<Arc<dyn ClientBridge>> = std::sync::OnceLock::new();
    BRIDGE.get_or_init(|| Arc::new(NullBridge)).clone()
}

/// What the session does when a tool needs a person's confirmation and the call is not
/// already confirmed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Approval {
    /// Ask the user through the client when it can elicit; otherwise refuse with an error that
    /// says how to confirm.
    #[default]
    Ask,
    /// Refuse every call that needs confirmation.
    Deny,
    /// Proceed without asking (the operator approved these tools for this session).
    Allow,
}

impl From<quiver_manifest::ApprovalMode> for Approval {
    fn from(mode: quiver_manifest::ApprovalMode) -> Approval {
        use quiver_manifest::ApprovalMode as M;
        match mode {
            M::Ask => Approval::Ask,
            M::Deny => Approval::Deny,
            M::Allow => Approval::Allow,
        }
    }
}

impl Approval {
    /// The approval of a command whose operator confirmed every call up front (`--yes`):
    /// `ask` becomes `allow`; `deny` stays final.
    pub fn confirmed_by_operator(self, yes: bool) -> Approval {
        match self {
            Approval::Ask if yes => Approval::Allow,
            other => other,
        }
    }
}

/// Who is calling.
#[derive(Debug, Clone)]
pub struct Caller {
    /// Session id (one MCP connection, one CLI run).
    pub session_id: String,
    /// Client name (MCP `clientInfo.name`).
    pub client: String,
    /// Profile mode (`agent`, `plan`, ...).
    pub mode: String,
    /// Scopes and gates: what the session may see and call.
    pub access: Access,
    /// What to do about calls that need confirmation.
    pub approval: Approval,
    /// The authenticated principal (HTTP auth); `None` on stdio and without authentication.
    /// Keys the per-principal rate limits.
    pub principal: Option<String>,
    /// The session offers `tool_search` (every mode but `full`): errors point there only then.
    pub searches: bool,
    /// The `agent_context` of this caller's requests as the router writes it, made on the
    /// first call ([`Caller::agent_context_json`]).
    agent_context: std::sync::OnceLock<AgentContextJson>,
}

/// True when `a` and `b` are the same bytes: a plain loop for the short strings of a caller.
/// (`==` calls the C library's `memcmp`; with it, its AVX-512 variant took 15% of the
/// pipeline bench's samples on these few bytes and each call 220 ns longer: more than
/// writing the strings again.)
fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let (mut x, mut y) = (a.chunks_exact(8), b.chunks_exact(8));
    for (p, q) in x.by_ref().zip(y.by_ref()) {
        if u64::from_ne_bytes(p.try_into().unwrap_or_default()) != u64::from_ne_bytes(q.try_into().unwrap_or_default())
        {
            return false;
        }
    }
    x.remainder().iter().zip(y.remainder()).all(|(p, q)| p == q)
}

/// A caller's `agent_context` as JSON, with the fields it was written from: it stands for the
/// caller only while they are unchanged (a caller's fields are public).
#[derive(Debug, Clone)]
struct AgentContextJson {
    session_id: String,
    client: String,
    mode: String,
    access: Access,
    json: Box<str>,
}

impl Caller {
    /// A caller with the given session id and access, approval `Ask`, no client name or mode.
    pub fn new(session_id: impl Into<String>, access: Access) -> Caller {
        Caller {
            session_id: session_id.into(),
            client: String::new(),
            mode: String::new(),
            access,
            approval: Approval::Ask,
            principal: None,
            searches: true,
            agent_context: std::sync::OnceLock::new(),
        }
    }

    /// The caller's `agent_context` object of a tool request, as JSON: written once and
    /// reused by every call of this caller (a session's calls share one `Arc<Caller>`), or
    /// written again when a field it came from has changed since. `write` writes it.
    pub(crate) fn agent_context_json<E>(
        &self,
        write: impl FnOnce(&Caller, &mut Vec<u8>) -> Result<(), E>,
        out: &mut Vec<u8>,
    ) -> Result<(), E> {
        if let Some(made) = self.agent_context.get() {
            if same(&made.session_id, &self.session_id)
                && same(&made.client, &self.client)
                && same(&made.mode, &self.mode)
                && made.access.same_scopes_as(&self.access)
            {
                out.extend_from_slice(made.json.as_bytes());
                return Ok(());
            }
            return write(self, out);
        }
        let start = out.len();
        write(self, out)?;
        // The writer writes JSON text (UTF-8) only; anything else is not kept.
        if let Ok(json) = std::str::from_utf8(&out[start..]) {
            let _ = self.agent_context.set(AgentContextJson {
                session_id: self.session_id.clone(),
                client: self.client.clone(),
                mode: self.mode.clone(),
                access: self.access.clone(),
                json: json.into(),
            });
        }
        Ok(())
    }

    /// The same caller with another approval policy.
    pub fn with_approval(mut self, approval: Approval) -> Caller {
        self.approval = approval;
        self
    }
}

/// One call, from any entry point.
pub struct Call {
    /// The name as called: canonical, alias, or (generic lane) the name given to `run_tool`.
    /// For [`crate::Router::run_tool`], `run_tool` itself.
    pub name: String,
    /// The arguments as called. For `run_tool`: `{"name": ..., "arguments": {...}}`.
    pub arguments: Value,
    /// Which lane the call came through.
    pub lane: Lane,
    /// Who is calling (shared: a session's calls all hold its one caller).
    pub caller: Arc<Caller>,
    /// A request id chosen by the caller; one is generated when `None`.
    pub request_id: Option<String>,
    /// A person already confirmed this call (through the client's own approval step).
    pub confirmed: bool,
    /// Cancels the call: the router stops waiting at once and the tool sees
    /// `is_cancelled() == true`.
    pub cancel: CancellationToken,
    /// The client side of the session.
    pub bridge: Arc<dyn ClientBridge>,
    /// The plugin's settings from the host configuration (`plugin_config.<plugin id>`), passed
    /// to the tool as `ToolRequest.config`; null when none.
    pub config: Value,
    /// The client's W3C trace context (`_meta.traceparent`): the parent of the call's span when
    /// traces are exported (boxed: rare, and a call is moved whole a few times).
    pub trace_parent: Option<Box<quiver_telemetry::TraceParent>>,
    /// The caller takes a successful output as JSON text ([`CallOutcome::outputs_text`]) when
    /// the router can check it as text: no `serde_json::Value` is built for it. Off by
    /// default; the MCP server turns it on (it sends the output on as text).
    pub outputs_as_text: bool,
}

impl std::fmt::Debug for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Call")
            .field("name", &self.name)
            .field("lane", &self.lane)
            .field("session", &self.caller.session_id)
            .field("request_id", &self.request_id)
            .field("confirmed", &self.confirmed)
            .finish_non_exhaustive()
    }
}

impl Call {
    /// A typed-lane call with a fresh cancellation token and no client bridge.
    pub fn new(name: impl Into<String>, arguments: Value, caller: impl Into<Arc<Caller>>) -> Call {
        Call {
            name: name.into(),
            arguments,
            lane: Lane::Typed,
            caller: caller.into(),
            request_id: None,
            confirmed: false,
            cancel: CancellationToken::new(),
            bridge: null_bridge(),
            config: Value::Null,
            trace_parent: None,
            outputs_as_text: false,
        }
    }

    /// A `run_tool` call (generic lane) of `name` with `arguments`.
    pub fn generic(name: &str, arguments: Value, caller: impl Into<Arc<Caller>>) -> Call {
        let mut c =
            Call::new(quiver_catalog::RUN_TOOL, serde_json::json!({ "name": name, "arguments": arguments }), caller);
        c.lane = Lane::Generic;
        c
    }

    /// The same call with a client bridge.
    pub fn with_bridge(mut self, bridge: Arc<dyn ClientBridge>) -> Call {
        self.bridge = bridge;
        self
    }

    /// The same call marked as confirmed by a person.
    pub fn confirmed(mut self, confirmed: bool) -> Call {
        self.confirmed = confirmed;
        self
    }

    /// The same call taking a successful output as JSON text when it can
    /// ([`Call::outputs_as_text`]).
    pub fn with_outputs_as_text(mut self, on: bool) -> Call {
        self.outputs_as_text = on;
        self
    }

    /// The same call with a cancellation token.
    pub fn with_cancel(mut self, cancel: CancellationToken) -> Call {
        self.cancel = cancel;
        self
    }
}

/// The answer to a call: the contract response and what the router knows about the call.
#[derive(Debug, Clone)]
pub struct CallOutcome {
    /// What the model reads.
    pub response: ToolResponse,
    /// Result metadata (MCP `_meta`), telemetry and transcripts.
    pub meta: CallMeta,
    /// With [`Call::outputs_as_text`]: the tool's output as compact JSON text (an object,
    /// already checked against the output schema), and `response.outputs` is null. `None`
    /// when the output is in `response.outputs` as usual ([`CallOutcome::outputs_as_value`]
    /// puts it there in any case).
    pub outputs_text: Option<Box<str>>,
}

impl CallOutcome {
    /// Moves an output held as text ([`CallOutcome::outputs_text`]) into `response.outputs`.
    pub fn outputs_as_value(&mut self) {
        if let Some(text) = self.outputs_text.take() {
            // Checked JSON: it parses.
            self.response.outputs = serde_json::from_str(&text).unwrap_or_default();
        }
    }

    /// The kind of the call's error, when it failed with a code the host knows.
    pub fn code(&self) -> Option<crate::codes::Code> {
        self.response.error.as_ref().and_then(crate::codes::Code::of)
    }
}

fn as_millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    // Whole microseconds (`0.083`, not `0.08265199999999999`).
    s.serialize_f64(d.as_micros() as f64 / 1000.0)
}

/// The names of the tool a call reached, as [`CallMeta`] carries them: made once per tool and
/// catalog snapshot and shared by its calls (a call takes one reference count, not five strings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolNames {
    /// The canonical tool.
    pub tool: Arc<str>,
    /// Plugin id.
    pub plugin: Arc<str>,
    /// Plugin version.
    pub plugin_version: Arc<str>,
    /// sha256 of the plugin library.
    pub sha256: Arc<str>,
    /// Key id of the manifest's signer.
    pub signer_key_id: Option<Arc<str>>,
}

/// What the router knows about a call besides its response. It serializes with the tool's
/// names as fields of their own (`tool`, `plugin`, `plugin_version`, `sha256`, `signer_key_id`).
#[derive(Debug, Clone)]
pub struct CallMeta {
    /// Request id.
    pub request_id: String,
    /// The name as called.
    pub called_name: String,
    /// The canonical tool it reached, its plugin, version, library and signer (`None` when the
    /// name did not resolve or is invisible). Read them with [`CallMeta::tool`] and the like.
    pub names: Option<Arc<ToolNames>>,
    /// The consolidated-tool action run, if any.
    pub action: Option<String>,
    /// Lifecycle state of the name as called.
    pub lifecycle_state: Option<LifecycleState>,
    /// Deprecation or compatibility notice for the name as called (boxed: rare, and a call's
    /// metadata is moved several times per call).
    pub notice: Option<Box<Notice>>,
    /// Lane.
    pub lane: Lane,
    /// Wall time of the pipeline.
    pub duration: Duration,
    /// Retries made.
    pub retries: u32,
    /// Handle of the full result when it was truncated ([`crate::Router::fetch_result`]).
    pub result_handle: Option<String>,
    /// How the result was cut to its size limit, when it was.
    pub truncation: Option<Box<crate::Truncation>>,
    /// Policy decisions, in pipeline order (e.g. `approval:not-required`, `breaker:closed`,
    /// `retry:1:tool_error`, `result:truncated`).
    pub policy: crate::policy::Record,
}

/// [`CallMeta`] as it serializes.
#[derive(Serialize)]
struct MetaFields<'a> {
    request_id: &'a str,
    called_name: &'a str,
    tool: Option<&'a str>,
    action: Option<&'a str>,
    plugin: Option<&'a str>,
    plugin_version: Option<&'a str>,
    sha256: Option<&'a str>,
    signer_key_id: Option<&'a str>,
    lifecycle_state: Option<LifecycleState>,
    notice: Option<&'a Notice>,
    lane: Lane,
    #[serde(rename = "duration_ms", serialize_with = "as_millis")]
    duration: Duration,
    retries: u32,
    result_handle: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    truncation: Option<&'a crate::Truncation>,
    policy: &'a crate::policy::Record,
}

impl Serialize for CallMeta {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        MetaFields {
            request_id: &self.request_id,
            called_name: &self.called_name,
            tool: self.tool(),
            action: self.action.as_deref(),
            plugin: self.plugin(),
            plugin_version: self.plugin_version(),
            sha256: self.sha256(),
            signer_key_id: self.signer_key_id(),
            lifecycle_state: self.lifecycle_state,
            notice: self.notice.as_deref(),
            lane: self.lane,
            duration: self.duration,
            retries: self.retries,
            result_handle: self.result_handle.as_deref(),
            truncation: self.truncation.as_deref(),
            policy: &self.policy,
        }
        .serialize(s)
    }
}

impl CallMeta {
    /// The canonical tool the call reached.
    pub fn tool(&self) -> Option<&str> {
        self.names.as_deref().map(|n| &*n.tool)
    }

    /// Its plugin's id.
    pub fn plugin(&self) -> Option<&str> {
        self.names.as_deref().map(|n| &*n.plugin)
    }

    /// Its plugin's version.
    pub fn plugin_version(&self) -> Option<&str> {
        self.names.as_deref().map(|n| &*n.plugin_version)
    }

    /// The sha256 of its plugin's library.
    pub fn sha256(&self) -> Option<&str> {
        self.names.as_deref().map(|n| &*n.sha256)
    }

    /// The key id of its plugin's signer.
    pub fn signer_key_id(&self) -> Option<&str> {
        self.names.as_deref().and_then(|n| n.signer_key_id.as_deref())
    }

    pub(crate) fn new(request_id: String, called_name: String, lane: Lane) -> CallMeta {
        CallMeta {
            request_id,
            called_name,
            names: None,
            action: None,
            lifecycle_state: None,
            notice: None,
            lane,
            duration: Duration::ZERO,
            retries: 0,
            result_handle: None,
            truncation: None,
            policy: crate::policy::Record::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn call_meta_serializes_the_tool_names_as_fields_of_their_own() {
        let mut m = CallMeta::new("r1".into(), "echo".into(), Lane::Typed);
        m.duration = Duration::from_micros(1500);
        assert_eq!(
            serde_json::to_value(&m).unwrap(),
            json!({
                "request_id": "r1", "called_name": "echo", "tool": null, "action": null, "plugin": null,
                "plugin_version": null, "sha256": null, "signer_key_id": null, "lifecycle_state": null,
                "notice": null, "lane": "typed", "duration_ms": 1.5, "retries": 0, "result_handle": null,
                "policy": [],
            })
        );
        m.names = Some(Arc::new(ToolNames {
            tool: "echo".into(),
            plugin: "p".into(),
            plugin_version: "1.0.0".into(),
            sha256: "ab".into(),
            signer_key_id: Some("k".into()),
        }));
        m.policy.push(crate::policy::Step::ResolveCanonical);
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(
            (&v["tool"], &v["plugin"], &v["plugin_version"], &v["sha256"], &v["signer_key_id"], &v["policy"]),
            (&json!("echo"), &json!("p"), &json!("1.0.0"), &json!("ab"), &json!("k"), &json!(["resolve:canonical"]))
        );
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys.len(), 15, "{keys:?}");
    }
}
