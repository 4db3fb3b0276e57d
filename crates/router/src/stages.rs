//! The pipeline's stages over one per-call [`CallContext`]: each stage is a short method of
//! [`Router`] that reads what it needs from the context, records its decision as a typed
//! [`Step`] and returns a typed outcome, or the error that ends the call. In order:
//! [`Stage::Resolve`], [`Stage::Scopes`], [`Stage::Validate`], [`Stage::RateLimit`],
//! [`Stage::Approval`], [`Stage::Breaker`], [`Stage::Dispatch`] (in `invoke.rs`),
//! [`Stage::Output`]. A new stage is one more method and one more line in
//! [`Router::pipeline_now`] (and in [`Router::pipeline_rest`] when it comes after a wait).
//!
//! [`Stage::Resolve`]: crate::policy::Stage::Resolve
//! [`Stage::Scopes`]: crate::policy::Stage::Scopes
//! [`Stage::Validate`]: crate::policy::Stage::Validate
//! [`Stage::RateLimit`]: crate::policy::Stage::RateLimit
//! [`Stage::Approval`]: crate::policy::Stage::Approval
//! [`Stage::Breaker`]: crate::policy::Stage::Breaker
//! [`Stage::Dispatch`]: crate::policy::Stage::Dispatch
//! [`Stage::Output`]: crate::policy::Stage::Output

use std::sync::Arc;
use std::time::Instant;

use quiver_abi::{ErrorCode, Status, ToolError, ToolResponse};
use quiver_catalog::{Catalog, Notice, PluginEntry, Resolved, ToolDef, ToolRef};
use quiver_telemetry::{BreakerState, Lane, ToolCounters, next_request_id};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use crate::breaker::{Admission, Breaker, Verdict};
use crate::codes::Code;
use crate::invoke::{Answer, Dispatched, Raw, Wait};
use crate::policy::Step;
use crate::router::{ToolState, cancelled};
use crate::{Approval, Call, CallMeta, Caller, ClientBridge, Router, codes, limits, validate};

/// One call as it moves through the stages: what the caller sent, who is calling, and what the
/// stages have decided so far ([`CallMeta`], with its policy record).
pub(crate) struct CallContext {
    pub(crate) meta: CallMeta,
    /// The arguments (an alias's action filled in by the resolve stage).
    pub(crate) args: Value,
    /// `ToolRequest.config` as the caller gave it (null: the host's `plugin_config`).
    pub(crate) config: Value,
    pub(crate) caller: Arc<Caller>,
    /// The caller marked the call as confirmed by a person.
    pub(crate) confirmed: bool,
    /// The approval stage let the call run as confirmed (`ToolRequest`'s `confirmed`).
    pub(crate) approved: bool,
    pub(crate) cancel: CancellationToken,
    pub(crate) bridge: Arc<dyn ClientBridge>,
    pub(crate) started: Instant,
    pub(crate) started_at_ms: u64,
    /// When an inline tool's answer was settled, for a call that ended with it (the clock
    /// reading of its deadline check, which also ends the call's duration).
    pub(crate) answered: Option<Instant>,
    /// The arguments as called, for the transcript (when transcripts are on).
    pub(crate) recorded: Option<Value>,
    /// The counters of the tool the call reached.
    pub(crate) tool_counters: Option<Arc<ToolCounters>>,
    /// The call's trace record, when traces are exported (`traced.rs`).
    pub(crate) trace: Option<Box<crate::traced::Traced>>,
    /// The caller takes an output as JSON text ([`Call::outputs_as_text`]).
    pub(crate) outputs_as_text: bool,
    /// The output as JSON text, checked against the output schema (see [`Raw`]).
    pub(crate) outputs_text: Option<Box<str>>,
}

impl CallContext {
    /// The context of `call`, started now.
    #[inline]
    pub(crate) fn new(call: Call, recorded: Option<Value>, clock: &crate::clock::WallClock) -> CallContext {
        let started = Instant::now();
        let Call {
            name,
            arguments,
            lane,
            caller,
            request_id,
            confirmed,
            cancel,
            bridge,
            config,
            trace_parent: _,
            outputs_as_text,
        } = call;
        // A transcript records the output as a value.
        let outputs_as_text = outputs_as_text && recorded.is_none();
        CallContext {
            meta: CallMeta::new(request_id.unwrap_or_else(next_request_id), name, lane),
            args: arguments,
            config,
            caller,
            confirmed,
            approved: false,
            cancel,
            bridge,
            started,
            started_at_ms: clock.millis_at(started),
            answered: None,
            recorded,
            tool_counters: None,
            trace: None,
            outputs_as_text,
            outputs_text: None,
        }
    }

    #[inline]
    pub(crate) fn step(&mut self, step: Step) {
        self.meta.policy.push(step);
    }
}

/// The resolve stage's outcome: the tool a call reached and its per-tool state.
pub(crate) struct Target<'c> {
    pub(crate) resolved: Resolved<'c>,
    pub(crate) state: Arc<ToolState>,
}

impl<'c> Target<'c> {
    pub(crate) fn name(&self) -> &'c str {
        self.resolved.tool.name.as_str()
    }
    pub(crate) fn def(&self) -> &'c ToolDef {
        self.resolved.def
    }
    pub(crate) fn plugin(&self) -> &'c Arc<PluginEntry> {
        self.resolved.plugin
    }

    /// The target of a call that waited, found again by the name it was called by in the
    /// snapshot it resolved in (the same snapshot resolves a name the same way every time).
    fn again(catalog: &'c Catalog, called: &str, state: Arc<ToolState>) -> Result<Target<'c>, ToolError> {
        let resolved = catalog
            .resolve(called)
            .ok_or_else(|| Code::Protocol.error(format!("catalog inconsistency: `{called}` no longer resolves")))?;
        Ok(Target { resolved, state })
    }
}

/// A half-open breaker's probe slot, released without a verdict when dropped armed (the caller
/// went away before the outcome was known).
struct ProbeRelease<'a> {
    breaker: &'a Breaker,
    armed: bool,
}

impl Drop for ProbeRelease<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.breaker.record(Admission::Probe, Verdict::Neutral, || 0, 0);
        }
    }
}

/// [`ProbeRelease`] for a call that waits: it owns the tool's state, so the slot is released
/// also when the waiting call is dropped before it runs again.
pub(crate) struct HeldProbe {
    state: Arc<ToolState>,
    armed: bool,
}

impl HeldProbe {
    /// The outcome is known (the breaker learns it): nothing to release.
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for HeldProbe {
    fn drop(&mut self) {
        if self.armed {
            self.state.breaker.record(Admission::Probe, Verdict::Neutral, || 0, 0);
        }
    }
}

/// How far [`Router::pipeline_now`] got.
pub(crate) enum Ran {
    /// The call's response, or the error that ended it.
    Done(Result<ToolResponse, ToolError>),
    /// The call waits (for the user's answer, or in stage dispatch): [`Router::pipeline_rest`]
    /// goes on from here.
    Wait(Rest),
}

/// Where a call that waits goes on: the snapshot it resolved in and the tool's state (the
/// target is found again in the same snapshot, so nothing borrowed is kept).
pub(crate) struct Rest {
    catalog: Arc<Catalog>,
    state: Arc<ToolState>,
    at: RestAt,
}

enum RestAt {
    /// The user is to be asked ([`Router::ask_user`]), then breaker and dispatch.
    Ask,
    /// Stage dispatch waits ([`Router::dispatch_wait`]), the breaker having admitted the call.
    Dispatch { admission: Admission, wait: Wait, probe: Option<HeldProbe> },
}

/// The position of `tool` (a reference into `catalog.tools()`, as [`Catalog::resolve`] hands
/// out) in that slice: its offset, checked, instead of a search by name on every call.
fn index_in(catalog: &Catalog, tool: &ToolRef) -> Option<usize> {
    let tools = catalog.tools();
    let size = std::mem::size_of::<ToolRef>().max(1);
    let offset = (tool as *const ToolRef as usize).wrapping_sub(tools.as_ptr() as usize) / size;
    match tools.get(offset) {
        Some(t) if std::ptr::eq(t, tool) => Some(offset),
        // Not a reference into this snapshot (never, with `Catalog::resolve`): search by name.
        _ => catalog.tool_index(&tool.name),
    }
}

/// How a finished invocation counts for the breaker.
fn verdict(result: &Answer) -> Verdict {
    let code = match result {
        Ok((r, _)) if r.status != Status::Error => return Verdict::Success,
        Ok((r, _)) => r.error.as_ref().map(|e| e.code.as_str()).unwrap_or(ErrorCode::TOOL_ERROR),
        Err(e) => e.code.as_str(),
    };
    match Code::parse(code) {
        Some(Code::Cancelled) => Verdict::Neutral,
        // The tool worked; the request was wrong.
        Some(Code::InvalidArguments | Code::NotFound | Code::PermissionDenied) => Verdict::Success,
        _ => Verdict::Failure,
    }
}

/// Marks the end of a pipeline stage (and the start of the next) in the call's trace record:
/// one clock read when traces are exported, one branch on an `Option` when not.
#[inline]
fn stage_done(cx: &mut CallContext) {
    if let Some(t) = &mut cx.trace {
        t.stage_done();
    }
}

/// Runs a synchronous stage, then marks its end.
#[inline]
fn staged<T>(cx: &mut CallContext, stage: impl FnOnce(&mut CallContext) -> T) -> T {
    let out = stage(cx);
    stage_done(cx);
    out
}

impl Router {
    /// The stages, in order (see the crate docs), as far as they go without waiting: a call of
    /// an inline tool that needs no one's confirmation runs to its end here, on the caller's
    /// stack, with no future of its own. Each stage ends with a boundary in the call's trace
    /// record (`quiver_telemetry::TRACE_STAGES`; the breaker belongs to `dispatch`).
    pub(crate) fn pipeline_now(&self, cx: &mut CallContext) -> Ran {
        let catalog = self.catalog_now();
        let target = match staged(cx, |cx| self.resolve(cx, &catalog)) {
            Ok(target) => target,
            Err(e) => return Ran::Done(Err(e)),
        };
        let approval = match self.checks(cx, &target) {
            Ok(Approved::Decided(approval)) => approval,
            Ok(Approved::Ask) => {
                let Target { state, .. } = target;
                return Ran::Wait(Rest { catalog, state, at: RestAt::Ask });
            }
            Err(e) => return Ran::Done(Err(e)),
        };
        stage_done(cx);
        if let Err(e) = approval.map(|a| cx.approved = a) {
            return Ran::Done(Err(e));
        }
        let admission = match self.breaker(cx, &target) {
            Ok(admission) => admission,
            Err(e) => {
                stage_done(cx);
                return Ran::Done(Err(e));
            }
        };
        // A probe whose caller goes away before the outcome is known must not leave the breaker
        // half-open forever.
        let mut probe = ProbeRelease { breaker: &target.state.breaker, armed: admission == Admission::Probe };
        match self.dispatch_now(cx, &target) {
            Dispatched::Done(answer) => {
                probe.armed = false;
                stage_done(cx);
                Ran::Done(self.after_dispatch(cx, &target, admission, answer))
            }
            Dispatched::Wait(wait) => {
                // The waiting call holds the probe from here on.
                probe.armed = false;
                drop(probe);
                let Target { state, .. } = target;
                let probe = (admission == Admission::Probe).then(|| HeldProbe { state: state.clone(), armed: true });
                Ran::Wait(Rest { catalog, state, at: RestAt::Dispatch { admission, wait, probe } })
            }
        }
    }

    /// The stages from scopes to approval; approval's outcome (its boundary not yet marked).
    fn checks(&self, cx: &mut CallContext, target: &Target<'_>) -> Result<Approved, ToolError> {
        staged(cx, |cx| self.scopes(cx, target))?;
        staged(cx, |cx| self.validate(cx, target))?;
        staged(cx, |cx| self.rate_limit(cx, target))?;
        Ok(self.approval(cx, target))
    }

    /// The rest of [`Router::pipeline_now`] for a call that waits: asking the user, or stage
    /// dispatch's wait, then the stages after it.
    pub(crate) async fn pipeline_rest(&self, cx: &mut CallContext, rest: Rest) -> Result<ToolResponse, ToolError> {
        let Rest { catalog, state, at } = rest;
        let target = Target::again(&catalog, &cx.meta.called_name, state)?;
        let (admission, answer) = match at {
            RestAt::Ask => {
                let ask = Confirmation::new(target.name(), target.def(), cx.meta.action.clone());
                let approval = self.ask_user(cx, &ask).await;
                stage_done(cx);
                cx.approved = approval?;
                let admission = self.breaker(cx, &target).inspect_err(|_| stage_done(cx))?;
                let mut probe = ProbeRelease { breaker: &target.state.breaker, armed: admission == Admission::Probe };
                let answer = match self.dispatch_now(cx, &target) {
                    Dispatched::Done(answer) => answer,
                    Dispatched::Wait(wait) => self.dispatch_wait(cx, &target, wait).await,
                };
                probe.armed = false;
                (admission, answer)
            }
            RestAt::Dispatch { admission, wait, probe } => {
                let answer = self.dispatch_wait(cx, &target, wait).await;
                // The outcome is known: the breaker learns it below.
                if let Some(probe) = probe {
                    probe.disarm();
                }
                (admission, answer)
            }
        };
        stage_done(cx);
        self.after_dispatch(cx, &target, admission, answer)
    }

    /// The stages after dispatch: the output check, what the breaker learns, memory writes and
    /// the size limit.
    fn after_dispatch(
        &self,
        cx: &mut CallContext,
        target: &Target<'_>,
        admission: Admission,
        answer: Answer,
    ) -> Result<ToolResponse, ToolError> {
        staged(cx, |cx| {
            let mut result = answer;
            if let Err(e) = self.output(cx, target, &result) {
                result = Err(e);
            }
            self.breaker_learns(cx, target, admission, &result);
            let (mut response, raw) = result?;
            self.keep(cx, target, &mut response, raw);
            Ok(response)
        })
    }

    /// Stage `resolve`: the name in the snapshot (a tool the caller may not see does not
    /// exist), its per-tool state, removed names refused, an alias's action filled in.
    fn resolve<'c>(&self, cx: &mut CallContext, catalog: &'c Arc<Catalog>) -> Result<Target<'c>, ToolError> {
        let access = &cx.caller.access;
        let Some(resolved) = catalog.resolve(&cx.meta.called_name).filter(|r| access.may_see(&r.tool.name, r.def))
        else {
            let error = Self::unknown_tool(catalog, access, &cx.meta.called_name, cx.caller.searches);
            cx.step(Step::ResolveUnknown);
            return Err(error);
        };
        let tool_name = resolved.tool.name.as_str();
        let index = index_in(catalog, resolved.tool)
            .ok_or_else(|| Code::Protocol.error(format!("catalog inconsistency: `{tool_name}` has no index")))?;
        let (state, names) = self.tool_state(catalog, index);
        cx.tool_counters = Some(state.counters.clone());
        cx.meta.names = Some(names);
        cx.meta.lifecycle_state = Some(resolved.state);
        cx.meta.notice = resolved.notice(&cx.meta.called_name).map(|mut n| {
            // A deprecated tool's replacement may be one the caller may not see.
            if resolved.is_canonical() {
                Self::hide_unseen_replacement(catalog, access, &mut n);
            }
            Box::new(n)
        });
        if !resolved.state.is_dispatchable() {
            cx.step(Step::ResolveRemoved);
            let notice = cx.meta.notice.as_deref().cloned().unwrap_or_else(|| Notice {
                name: cx.meta.called_name.clone(),
                state: resolved.state,
                replacement: None,
                action: None,
                first_deprecated_version: None,
                planned_removal_version: None,
                removed_in_version: None,
                replay_supported: false,
            });
            return Err(Self::removed(catalog, &cx.caller.access, &notice));
        }
        cx.step(if resolved.is_canonical() { Step::ResolveCanonical } else { Step::ResolveAlias });
        let target = Target { resolved, state };
        fill_action(cx, &target)?;
        Ok(target)
    }

    /// Stage `scopes`: the action's scopes (the tool's own were checked when resolving).
    fn scopes(&self, cx: &mut CallContext, target: &Target<'_>) -> Result<(), ToolError> {
        let (tool_name, def) = (target.name(), target.def());
        let action = cx.meta.action.as_deref();
        let access = &cx.caller.access;
        if access.may_call(tool_name, def, action) {
            cx.step(Step::ScopesOk);
            return Ok(());
        }
        let missing: Vec<&str> = def.scopes_for(action).filter(|s| !access.holds(s)).collect();
        let error = ToolError::denied(format!(
            "action `{}` of `{tool_name}` needs scope(s) {}, which this session does not hold; use another action or ask the user to grant the scope",
            action.unwrap_or_default(),
            missing.iter().map(|s| format!("`{s}`")).collect::<Vec<_>>().join(", ")
        ))
        .with_details(json!({ "missing_scopes": missing }));
        cx.step(Step::ScopesDenied);
        Err(error)
    }

    /// Stage `validate`: the arguments against the precompiled input schema.
    fn validate(&self, cx: &mut CallContext, target: &Target<'_>) -> Result<(), ToolError> {
        let generic = cx.meta.lane == Lane::Generic;
        if let Err(e) = validate::arguments(target.name(), target.def(), &cx.args, generic) {
            cx.step(Step::ArgumentsInvalid);
            if generic {
                self.counters.record_run_tool_invalid();
            }
            return Err(e);
        }
        cx.step(Step::ArgumentsOk);
        Ok(())
    }

    /// Stage `rate_limit`: before approval, so nobody is asked about a call that is refused.
    fn rate_limit(&self, cx: &mut CallContext, target: &Target<'_>) -> Result<(), ToolError> {
        let state = &target.state;
        let Some(limits) = &state.limits else { return Ok(()) };
        let Err((scope, limit, wait)) = limits.check(&cx.caller.session_id, cx.caller.principal.as_deref()) else {
            return Ok(());
        };
        cx.step(Step::RateLimited);
        if let (Some(all), Some(tool)) = (self.counters.metrics(), state.counters.metrics()) {
            tool.rate_limited(all, scope);
        }
        Err(limits::refused(target.name(), scope, limit, wait))
    }

    /// Stage `approval`: whether the call may run (`Ok(confirmed)` when it may), or the
    /// question to ask the user first.
    fn approval(&self, cx: &mut CallContext, target: &Target<'_>) -> Approved {
        let def = target.def();
        let action = cx.meta.action.as_deref();
        if !def.needs_confirmation(action) {
            cx.step(Step::ApprovalNotRequired);
            return Approved::Decided(Ok(cx.confirmed));
        }
        let ask = Confirmation::new(target.name(), def, action.map(str::to_owned));
        Approved::Decided(match cx.caller.approval {
            // `deny` is final: checked before the caller's confirmation, and nobody is asked.
            Approval::Deny => {
                cx.step(Step::ApprovalDeniedByProfile);
                Err(ask.denied_by_profile())
            }
            _ if cx.confirmed => {
                cx.step(Step::ApprovalConfirmedByCaller);
                Ok(true)
            }
            Approval::Allow => {
                cx.step(Step::ApprovalAllowedByProfile);
                Ok(true)
            }
            Approval::Ask if cx.bridge.can_elicit() => return Approved::Ask,
            Approval::Ask => {
                cx.step(Step::ApprovalCannotAsk);
                Err(ask.cannot_ask())
            }
        })
    }

    /// Asks the user through the client (MCP elicitation) whether the call may run.
    async fn ask_user(&self, cx: &mut CallContext, ask: &Confirmation<'_>) -> Result<bool, ToolError> {
        let request = ask.form(&cx.args);
        let answer = tokio::select! {
            biased;
            _ = cx.cancel.cancelled() => return Err(cancelled(ask.tool)),
            a = cx.bridge.elicit(request) => a,
        };
        match answer {
            // Only the box ticked is a yes: an accepted form without `confirm: true` (left
            // unticked and left out, or not a boolean) is no confirmation.
            Ok(v)
                if v.get("action").and_then(Value::as_str) == Some("accept")
                    && v.pointer("/content/confirm").and_then(Value::as_bool) == Some(true) =>
            {
                cx.step(Step::ApprovalConfirmedByUser);
                Ok(true)
            }
            Ok(v) => {
                cx.step(Step::ApprovalDeclinedByUser);
                Err(ToolError::denied(format!(
                    "the user did not allow {}; do not retry it unless the user asks for it",
                    ask.what
                ))
                .with_details(json!({ "user_action": v.get("action").cloned().unwrap_or(Value::Null) })))
            }
            Err(e) => {
                cx.step(Step::ApprovalAskFailed);
                Err(ask.ask_failed(&e))
            }
        }
    }

    /// Stage `breaker`: the tool's circuit breaker admits the call (or its half-open probe).
    fn breaker(&self, cx: &mut CallContext, target: &Target<'_>) -> Result<Admission, ToolError> {
        let breaker = &target.state.breaker;
        let admission = if breaker.is_closed() {
            Admission::Pass
        } else {
            breaker.admit(self.now_ns(), self.settings.breaker_cooldown)
        };
        match admission {
            Admission::Refuse(wait) => {
                cx.step(Step::BreakerOpen);
                let wait_ms = wait.as_millis().max(1) as u64;
                return Err(Code::CircuitOpen
                    .error(format!(
                        "`{}` failed {} times in a row and is paused; try again in {wait_ms} ms, or use another tool",
                        target.name(),
                        self.settings.breaker_failures
                    ))
                    .retryable()
                    .with_details(json!({ "retry_after_ms": wait_ms })));
            }
            Admission::Probe => cx.step(Step::BreakerHalfOpenProbe),
            Admission::Pass => cx.step(Step::BreakerClosed),
        }
        Ok(admission)
    }

    /// The breaker learns the outcome of an admitted call.
    fn breaker_learns(&self, cx: &mut CallContext, target: &Target<'_>, admission: Admission, result: &Answer) {
        let state = &target.state;
        let learned =
            state.breaker.record(admission, verdict(result), || self.now_ns(), self.settings.breaker_failures);
        if let Some(s) = learned {
            state.counters.set_breaker(s);
            cx.step(if s == BreakerState::Open { Step::BreakerOpened } else { Step::BreakerClosedAfterProbe });
            tracing::warn!(tool = target.name(), state = s.as_str(), "circuit breaker changed state");
        }
    }

    /// Stage `output`: an `ok` result against the output schema (an output kept as text was
    /// checked as it was read).
    fn output(&self, cx: &mut CallContext, target: &Target<'_>, answer: &Answer) -> Result<(), ToolError> {
        match answer {
            Ok((r, raw)) if r.status == Status::Ok && raw.text.is_none() => {
                validate::output(target.name(), target.def(), &r.outputs).inspect_err(|_| cx.step(Step::OutputInvalid))
            }
            _ => Ok(()),
        }
    }

    /// What the tool asked to remember (kept for its later calls in this session, never sent to
    /// the client), then the result-size limit.
    fn keep(&self, cx: &mut CallContext, target: &Target<'_>, response: &mut ToolResponse, raw: Raw) {
        if !response.memory_writes.is_empty() {
            let writes = std::mem::take(&mut response.memory_writes);
            let (session, plugin, tool) = (&cx.caller.session_id, target.plugin().id(), target.name());
            for refused in self.memory.write(session, plugin, tool, &writes) {
                tracing::warn!(tool, session = %session, "{refused}");
            }
        }
        let max = target.def().policies.max_result_bytes;
        match raw.text {
            // Within the limit: passed on as text.
            Some(text) if max == 0 || raw.len as u64 <= max => cx.outputs_text = Some(text),
            // Maybe over it: cut as a value.
            Some(text) => {
                response.outputs = serde_json::from_str(&text).unwrap_or_default();
                self.limit_size(cx, target, response, raw.len);
            }
            None => self.limit_size(cx, target, response, raw.len),
        }
    }
}

/// An alias of a consolidated tool's action fills in `action`; the effective action goes to
/// [`CallMeta::action`].
fn fill_action(cx: &mut CallContext, target: &Target<'_>) -> Result<(), ToolError> {
    if cx.args.is_null() {
        cx.args = Value::Object(Map::new());
    }
    if let (Some(a), Value::Object(m)) = (target.resolved.action, &mut cx.args) {
        match m.get("action") {
            None => {
                m.insert("action".to_owned(), Value::String(a.to_owned()));
            }
            Some(Value::String(given)) if given == a => {}
            Some(given) => {
                let error = ToolError::invalid(format!(
                    "`{}` means `{}` with action `{a}`, but the arguments name action {given}; drop `action` or call `{}` directly",
                    cx.meta.called_name,
                    target.name(),
                    target.name()
                ))
                .with_details(json!({ "errors": [{
                    "pointer": "/action", "keyword": "const", "expected": a, "got": given, "hint": "remove `action`",
                }] }));
                cx.step(Step::ActionConflict);
                return Err(error);
            }
        }
    }
    if !target.def().spec.actions.is_empty() {
        cx.meta.action = cx.args.get("action").and_then(Value::as_str).map(str::to_owned);
    }
    Ok(())
}

/// The approval stage's outcome.
enum Approved {
    /// Whether the call may run (`Ok(confirmed)`), decided without asking anyone.
    Decided(Result<bool, ToolError>),
    /// The user is to be asked ([`Router::ask_user`], in [`Router::pipeline_rest`]).
    Ask,
}

/// The texts of the approval stage for one call that needs confirmation.
struct Confirmation<'a> {
    tool: &'a str,
    /// `` `tool` `` or `` `tool` (action `a`) ``.
    what: String,
    effects: &'static str,
    action: Option<String>,
}

impl<'a> Confirmation<'a> {
    fn new(tool: &'a str, def: &ToolDef, action: Option<String>) -> Confirmation<'a> {
        let what = match &action {
            Some(a) => format!("`{tool}` (action `{a}`)"),
            None => format!("`{tool}`"),
        };
        Confirmation { tool, what, effects: def.side_effects_for(action.as_deref()).as_str(), action }
    }

    fn details(&self) -> Value {
        json!({ "needs_confirmation": true, "side_effects": self.effects, "action": self.action, "confirm_meta_key": codes::CONFIRM_META_KEY })
    }

    fn denied_by_profile(&self) -> ToolError {
        let (what, effects) = (&self.what, self.effects);
        ToolError::denied(format!(
            "{what} has {effects} side effects and needs a person's confirmation, which this session's profile refuses; do not retry (a confirmation cannot override it). Tell the user what you wanted to do so they can do it themselves or change the profile's approval setting."
        ))
        .with_details(json!({ "needs_confirmation": true, "side_effects": effects, "action": self.action, "denied_by_profile": true }))
    }

    fn cannot_ask(&self) -> ToolError {
        let (what, effects) = (&self.what, self.effects);
        Code::ConfirmationRequired
            .error(format!(
                "{what} has {effects} side effects and needs a person's confirmation before it runs, and this client cannot ask the user. Ask the user in the conversation whether to run it; if they agree, repeat the call marked as confirmed (MCP request `_meta` key `{}`: true; CLI `--yes`). Never confirm on your own.",
                codes::CONFIRM_META_KEY
            ))
            .with_details(self.details())
    }

    fn ask_failed(&self, why: &str) -> ToolError {
        Code::ConfirmationRequired
            .error(format!(
                "{} needs a person's confirmation and asking the user failed ({why}). Ask the user in the conversation whether to run it; if they agree, repeat the call marked as confirmed (MCP request `_meta` key `{}`: true; CLI `--yes`).",
                self.what,
                codes::CONFIRM_META_KEY
            ))
            .with_details(self.details())
    }

    /// The elicitation form: the call, its arguments (at most 500 bytes shown), one checkbox.
    fn form(&self, args: &Value) -> Value {
        let mut shown = args.to_string();
        if shown.len() > 500 {
            let mut cut = 497;
            while !shown.is_char_boundary(cut) {
                cut -= 1;
            }
            shown.truncate(cut);
            shown.push_str("...");
        }
        json!({
            "message": format!("Allow {} ({} side effects) with these arguments?\n{shown}", self.what, self.effects),
            "requestedSchema": {
                "type": "object",
                "properties": { "confirm": { "type": "boolean", "title": "Run it", "description": "Run this call once", "default": false } },
                "required": ["confirm"]
            }
        })
    }
}
