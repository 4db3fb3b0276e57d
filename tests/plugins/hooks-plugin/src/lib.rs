//! Test plugin for session hooks: its manifest names `hooks_on_session` as the session start
//! and end hook; the tool records each event it receives in the library's memory (so it is
//! plugin code that ran), and `hooks_events` lists them. For clients named `fail-hooks` the
//! hook fails after recording, to prove a failing hook never fails the session. Not a bundled
//! user tool.

use std::sync::Mutex;

use quiver_abi::{
    Context, Tool, ToolError,
    schemars::JsonSchema,
    serde::{Deserialize, Serialize},
};

static EVENTS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// What the host sends a session hook.
#[derive(Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct SessionEvent {
    /// `session_start` or `session_end`.
    pub event: String,
    /// The session's id.
    pub session_id: String,
    /// Its profile.
    pub profile: String,
    /// The client's name.
    pub client: String,
    /// True when the session resumed from the session store.
    pub resumed: bool,
}

/// Nothing to report.
#[derive(Serialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct Recorded {
    /// Events recorded so far.
    pub count: usize,
}

/// Records one session event.
pub struct OnSession;
impl Tool for OnSession {
    const NAME: &'static str = "hooks_on_session";
    type Input = SessionEvent;
    type Output = Recorded;
    fn call(&self, e: SessionEvent, _cx: &mut Context<'_>) -> Result<Recorded, ToolError> {
        let mut events = EVENTS.lock().unwrap_or_else(|p| p.into_inner());
        events.push(format!("{} {} {} {} resumed={}", e.event, e.session_id, e.profile, e.client, e.resumed));
        if e.client == "fail-hooks" {
            return Err(ToolError::new("hook_failed", "this hook fails for clients named fail-hooks"));
        }
        Ok(Recorded { count: events.len() })
    }
}

/// No arguments.
#[derive(Deserialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct NoInput {}

/// The recorded events.
#[derive(Serialize, JsonSchema)]
#[serde(crate = "quiver_abi::serde")]
#[schemars(crate = "quiver_abi::schemars")]
pub struct Events {
    /// `EVENT SESSION PROFILE CLIENT resumed=BOOL`, oldest first.
    pub events: Vec<String>,
}

/// Lists the recorded events.
pub struct ListEvents;
impl Tool for ListEvents {
    const NAME: &'static str = "hooks_events";
    type Input = NoInput;
    type Output = Events;
    fn call(&self, _input: NoInput, _cx: &mut Context<'_>) -> Result<Events, ToolError> {
        Ok(Events { events: EVENTS.lock().unwrap_or_else(|p| p.into_inner()).clone() })
    }
}

quiver_abi::export_plugin! {
    manifest: include_str!("../tool.yaml"),
    tools: [OnSession, ListEvents],
}
