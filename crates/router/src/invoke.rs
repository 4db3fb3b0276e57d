//! Stage `dispatch`: the request sent to the tool, its concurrency slots, the invocation under
//! the deadline (inline, on a thread, or remote), retries of retryable errors, and reading the
//! tool's answer.

use std::cell::Cell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quiver_abi::{Status, ToolError, ToolResponse};
use quiver_catalog::{AbortReason, Dispatch, PluginEntry, RemoteCall};
use serde::Serialize;
use serde_json::Value;
use tokio::sync::oneshot::error::TryRecvError;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::codes::Code;
use crate::policy::{Retry, Step};
use crate::pool::{Pool, Refused, Work, spin_until};
use crate::router::{ToolState, cancelled};
use crate::sink::{AbandonOnDrop, InlineSink, RouterSink};
use crate::stages::{CallContext, Target};
use crate::{Caller, Router};
use quiver_catalog::shape::Shape;
use quiver_manifest::SideEffects;

/// What every attempt of one call shares.
pub(crate) struct Invocation<'a> {
    pub(crate) tool_name: &'a str,
    pub(crate) plugin: &'a Arc<PluginEntry>,
    /// The tool's index in its plugin.
    pub(crate) tool: usize,
    pub(crate) state: &'a Arc<ToolState>,
    pub(crate) deadline: Instant,
    /// The output's shape, when the call passes the output on as text and it has one.
    pub(crate) text_shape: Option<&'a Shape>,
    /// The call's risk when it is not safe to repeat (it changes something and the tool is
    /// not idempotent): then an error that leaves its outcome unknown is not retried.
    pub(crate) unsafe_effect: Option<SideEffects>,
}

/// A tool's answer as read: its size in bytes, and its outputs as JSON text when the call
/// passes them on as text and they were checked so ([`quiver_catalog::shape`]; `outputs` of the
/// response is then null).
pub(crate) struct Raw {
    pub(crate) len: usize,
    pub(crate) text: Option<Box<str>>,
}

/// The answer of a tool, as read.
pub(crate) type Answer = Result<(ToolResponse, Raw), ToolError>;

/// How far [`Router::dispatch_now`] got.
// `Done` is what nearly every call returns, moved once: boxing it would allocate per call.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Dispatched {
    /// The stage's outcome.
    Done(Answer),
    /// The rest needs waiting: [`Router::dispatch_wait`].
    Wait(Wait),
}

/// What [`Router::dispatch_wait`] goes on from: the request, and the first answer when an
/// inline attempt already ran and asked for a retry.
pub(crate) struct Wait {
    body: String,
    /// Boxed: a retry after an inline attempt is rare, and a call that waits moves this.
    first: Option<Box<(ToolResponse, Raw)>>,
}

/// A response that asks to be tried again.
fn retryable(response: &ToolResponse) -> bool {
    response.status == Status::Error && response.error.as_ref().is_some_and(|e| e.retryable)
}

/// Appends the JSON of `value` to `out`.
fn put<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) -> Result<(), ToolError> {
    serde_json::to_writer(out, value).map_err(|e| Code::Protocol.error(format!("cannot encode the request: {e}")))
}

/// A caller's `agent_context` object ([`quiver_abi::AgentContext`]'s wire format, in its
/// order); [`Caller::agent_context_json`] keeps it for the caller's next calls.
fn write_agent_context(caller: &Caller, b: &mut Vec<u8>) -> Result<(), ToolError> {
    b.extend_from_slice(b"{\"session_id\":");
    put(b, caller.session_id.as_str())?;
    b.extend_from_slice(b",\"client\":");
    put(b, caller.client.as_str())?;
    b.extend_from_slice(b",\"mode\":");
    put(b, caller.mode.as_str())?;
    b.extend_from_slice(b",\"scopes\":[");
    for (i, scope) in caller.access.scope_names().enumerate() {
        if i > 0 {
            b.push(b',');
        }
        put(b, scope)?;
    }
    b.extend_from_slice(b"]}");
    Ok(())
}

thread_local! {
    /// The request buffer of the inline calls on this thread: written, read by the plugin and
    /// given back within one call, so inline calls allocate no request.
    static REQUEST_BUFFER: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// Largest request buffer kept for the next call.
const KEPT_BUFFER: usize = 64 * 1024;

/// An empty buffer for a request of about `hint` bytes: this thread's kept one, if any (a
/// thread or remote call keeps the buffer it takes; the next inline call here makes another).
fn request_buffer(hint: usize) -> Vec<u8> {
    let mut b = REQUEST_BUFFER.take();
    b.clear();
    b.reserve(hint);
    b
}

/// Gives an inline call's request back to this thread's buffer.
fn recycle(body: String) {
    let b = body.into_bytes();
    if b.capacity() <= KEPT_BUFFER {
        REQUEST_BUFFER.set(b);
    }
}

/// A cheap guess of the serialized size of the arguments (to size the request buffer once).
fn args_len_hint(args: &Value) -> usize {
    match args {
        Value::Object(m) => m.len() * 32,
        _ => 16,
    }
}

async fn acquire(
    sem: &Arc<Semaphore>,
    deadline: Instant,
    cancel: &CancellationToken,
    tool: &str,
    what: &str,
) -> Result<OwnedSemaphorePermit, ToolError> {
    if let Ok(p) = sem.clone().try_acquire_owned() {
        return Ok(p);
    }
    tokio::select! {
        biased;
        _ = cancel.cancelled() => Err(cancelled(tool)),
        p = sem.clone().acquire_owned() => p.map_err(|_| Code::Protocol.error("the router is shutting down")),
        _ = tokio::time::sleep_until(deadline.into()) => Err(Code::Timeout.error(
            format!("`{tool}` did not start before its deadline: {what} stayed busy. Try again later."),
        ).retryable()),
    }
}

impl Router {
    /// What every attempt of the call shares.
    fn invocation<'t>(&self, cx: &CallContext, target: &'t Target<'_>) -> Invocation<'t> {
        let timeout_ms = target.def().policies.timeout_ms;
        let timeout =
            if timeout_ms == 0 { Duration::from_secs(365 * 24 * 3600) } else { Duration::from_millis(timeout_ms) };
        Invocation {
            tool_name: target.name(),
            plugin: target.plugin(),
            tool: target.resolved.tool.tool,
            state: &target.state,
            // From the call's start (no clock read of its own): the time the earlier stages
            // took counts against the tool's timeout, as the caller's wait does.
            deadline: cx.started + timeout,
            text_shape: if cx.outputs_as_text { target.def().output_shape() } else { None },
            unsafe_effect: {
                let (spec, action) = (&target.def().spec, cx.meta.action.as_deref());
                (!spec.repeat_safe(action)).then(|| spec.side_effects_of(action))
            },
        }
    }

    /// Stage `dispatch`, as far as it goes without waiting: an inline tool with a free slot
    /// runs here, on the caller's stack, and its answer is the stage's outcome unless it asks
    /// for a retry. Anything that waits (a slot, a thread, a worker, a retry's pause) is left
    /// to [`Router::dispatch_wait`], whose future exists only for the calls that need it.
    pub(crate) fn dispatch_now(&self, cx: &mut CallContext, target: &Target<'_>) -> Dispatched {
        let inv = self.invocation(cx, target);
        let mut body = match self.request_body(cx, target) {
            Ok(body) => body,
            Err(e) => return Dispatched::Done(Err(e)),
        };
        if inv.plugin.backend.dispatch(inv.tool) != Dispatch::Inline {
            return Dispatched::Wait(Wait { body, first: None });
        }
        // The tool's slot is borrowed for the call (no `Arc` clone). An inline tool takes no
        // host-wide slot: those bound the blocking threads.
        let Ok(_slot) = inv.state.semaphore.try_acquire() else {
            return Dispatched::Wait(Wait { body, first: None });
        };
        if cx.cancel.is_cancelled() {
            return Dispatched::Done(Err(cancelled(inv.tool_name)));
        }
        let max_retries = target.def().policies.retries;
        let attempt_body = if max_retries > 0 { body.clone() } else { std::mem::take(&mut body) };
        match self.inline(cx, &inv, attempt_body) {
            (Ok(answer), _) if retryable(&answer.0) && cx.meta.retries < max_retries => {
                Dispatched::Wait(Wait { body, first: Some(Box::new(answer)) })
            }
            (answer, at) => {
                // The clock reading of the deadline check ends the call's duration too.
                cx.answered = Some(at);
                Dispatched::Done(answer)
            }
        }
    }

    /// The rest of stage `dispatch` after [`Router::dispatch_now`]: runs the tool under its
    /// deadline, within the concurrency limits, retrying retryable errors.
    pub(crate) async fn dispatch_wait(&self, cx: &mut CallContext, target: &Target<'_>, wait: Wait) -> Answer {
        let inv = self.invocation(cx, target);
        let Wait { mut body, mut first } = wait;
        let max_retries = target.def().policies.retries;
        loop {
            let (response, raw) = match first.take() {
                Some(answer) => *answer,
                None => {
                    let attempt_body =
                        if cx.meta.retries < max_retries { body.clone() } else { std::mem::take(&mut body) };
                    self.attempt(cx, &inv, attempt_body).await?
                }
            };
            if !retryable(&response) || cx.meta.retries >= max_retries {
                return Ok((response, raw));
            }
            let delay = self.backoff(cx.meta.retries);
            if Instant::now() + delay >= inv.deadline {
                cx.step(Step::RetryNoTimeLeft);
                return Ok((response, raw));
            }
            cx.meta.retries += 1;
            let code = response.error.as_ref().map(|e| e.code.as_str()).unwrap_or_default();
            cx.step(Step::Retry(Retry::new(cx.meta.retries, code, delay.as_millis() as u64)));
            tokio::select! {
                biased;
                _ = cx.cancel.cancelled() => return Err(cancelled(inv.tool_name)),
                _ = tokio::time::sleep(delay) => {}
            }
        }
    }

    /// The JSON of the call's `ToolRequest`, written from borrowed parts (no copies of the
    /// arguments or the caller's strings) with its keys as literals: a derived `Serialize` ran
    /// every key through the string escaper, and the tool's name and version are escaped once
    /// per tool (`ToolState::request_tool`). Field for field the wire format of
    /// [`quiver_abi::ToolRequest`], in its order; the integration tests parse what the router
    /// sends back into `ToolRequest` and check it against `schemas/tool-request.schema.json`.
    fn request_body(&self, cx: &CallContext, target: &Target<'_>) -> Result<String, ToolError> {
        let policies = target.def().policies;
        let plugin_id = target.plugin().id();
        // Most tools declare no secrets: their calls skip the shared map's load.
        let secrets = (!target.def().spec.secrets.is_empty()).then(|| target.state.secrets.load());
        let config = if cx.config.is_null() {
            self.settings.plugin_config.get(plugin_id).unwrap_or(&Value::Null)
        } else {
            &cx.config
        };
        let memory = self.memory.snippet(&cx.caller.session_id, plugin_id, target.name());
        let caller = &cx.caller;
        let mut b = request_buffer(256 + args_len_hint(&cx.args));
        b.extend_from_slice(b"{\"request_id\":");
        put(&mut b, cx.meta.request_id.as_str())?;
        b.push(b',');
        b.extend_from_slice(target.state.request_tool.as_bytes());
        b.extend_from_slice(b",\"timestamp\":");
        put(&mut b, &cx.started_at_ms)?;
        b.extend_from_slice(b",\"agent_context\":");
        caller.agent_context_json(write_agent_context, &mut b)?;
        b.extend_from_slice(b",\"inputs\":");
        put(&mut b, &cx.args)?;
        b.extend_from_slice(b",\"invocation_policies\":{\"timeout_ms\":");
        put(&mut b, &policies.timeout_ms)?;
        b.extend_from_slice(b",\"max_result_bytes\":");
        put(&mut b, &policies.max_result_bytes)?;
        b.extend_from_slice(if cx.approved { b",\"confirmed\":true" } else { b",\"confirmed\":false" });
        if let Some(action) = cx.meta.action.as_deref() {
            b.extend_from_slice(b",\"action\":");
            put(&mut b, action)?;
        }
        b.push(b'}');
        if !config.is_null() {
            b.extend_from_slice(b",\"config\":");
            put(&mut b, config)?;
        }
        if let Some(memory) = &memory {
            b.extend_from_slice(b",\"memory_snippet\":");
            put(&mut b, memory.as_str())?;
        }
        if let Some(secrets) = secrets.as_deref().filter(|s| !s.is_empty()) {
            b.extend_from_slice(b",\"secrets\":");
            put(&mut b, &**secrets)?;
        }
        b.push(b'}');
        // SAFETY: every byte was written by serde_json's writer (which writes valid UTF-8 for
        // any value: strings come from `&str`s) or copied from a `str` (the ASCII literals here,
        // `ToolState::request_tool`); the buffer was emptied before (`request_buffer`).
        Ok(unsafe { String::from_utf8_unchecked(b) })
    }

    /// One invocation. The caller stops waiting at the deadline or on cancellation; a thread
    /// cannot be killed, so it keeps its tool permit until the plugin returns (the overrun
    /// counts against the tool) and sees `is_cancelled() == true`.
    async fn attempt(&self, cx: &CallContext, inv: &Invocation<'_>, body: String) -> Answer {
        if cx.cancel.is_cancelled() {
            return Err(cancelled(inv.tool_name));
        }
        let dispatch = inv.plugin.backend.dispatch(inv.tool);
        if dispatch != Dispatch::Inline {
            return self.off_task(cx, inv, body, dispatch).await;
        }
        let _slot = match inv.state.semaphore.try_acquire() {
            Ok(slot) => slot,
            Err(_) => {
                let slot = acquire(
                    &inv.state.semaphore,
                    inv.deadline,
                    &cx.cancel,
                    inv.tool_name,
                    "the tool's concurrency limit",
                );
                return match slot.await {
                    Ok(_slot) => self.inline(cx, inv, body).0,
                    Err(e) => Err(e),
                };
            }
        };
        self.inline(cx, inv, body).0
    }

    /// Runs an inline tool on this thread, its slot held by the caller. The tool answers within
    /// microseconds and never blocks: no thread handoff; its deadline is checked after, with
    /// the clock reading returned beside the answer.
    fn inline(&self, cx: &CallContext, inv: &Invocation<'_>, body: String) -> (Answer, Instant) {
        let cancel = &cx.cancel;
        let local_name = inv.plugin.tools[inv.tool].spec.name.as_str();
        // The sink is borrowed for the call when the backend can take it so; without a runtime
        // handle either way: an inline tool runs on a runtime thread, which cannot block on a
        // client's answer (elicitation and sampling are refused with a reason).
        let borrowed =
            InlineSink { bridge: &*cx.bridge, token: cancel, deadline: inv.deadline, request_id: &cx.meta.request_id };
        // The answer is read where the backend holds it (no copy of the plugin's string).
        let mut settled = None;
        let served = inv.plugin.backend.invoke_borrowed(local_name, &body, &borrowed, &mut |raw| {
            let at = Instant::now();
            settled = Some((settle(raw, inv, None, at), at));
        });
        let answer = if served {
            settled.unwrap_or_else(|| {
                let e = Code::Protocol.error(format!("the backend of `{}` returned no answer", inv.tool_name));
                (Err(e), Instant::now())
            })
        } else {
            let sink = Arc::new(self.sink(cx, inv, None));
            let raw = inv.plugin.backend.invoke(local_name, &body, sink.clone());
            sink.finished();
            let at = Instant::now();
            (settle(&raw, inv, None, at), at)
        };
        recycle(body);
        answer
    }

    /// A thread or remote attempt: its slots, then the pool thread or the worker.
    async fn off_task(&self, cx: &CallContext, inv: &Invocation<'_>, body: String, dispatch: Dispatch) -> Answer {
        let (cancel, deadline) = (&cx.cancel, inv.deadline);
        let local_name = inv.plugin.tools[inv.tool].spec.name.as_str();
        // The tool's own slot first: a saturated tool must not hold host-wide slots while it waits.
        let tool_permit =
            acquire(&inv.state.semaphore, deadline, cancel, inv.tool_name, "the tool's concurrency limit").await?;
        // The host-wide slots bound the blocking threads; remote calls run in their worker, so
        // they never wait behind slow thread calls.
        let global = if dispatch == Dispatch::Thread {
            Some(acquire(&self.global, deadline, cancel, inv.tool_name, "the host's call slots").await?)
        } else {
            None
        };
        let sink = Arc::new(self.sink(cx, inv, Some(tokio::runtime::Handle::current())));
        if dispatch == Dispatch::Remote {
            let call = inv.plugin.backend.start(local_name, body, sink.clone(), deadline);
            self.await_remote(cx, inv, call, sink, tool_permit).await
        } else {
            let _global = global;
            on_thread(&self.pool, cx, inv, body, sink, tool_permit).await
        }
    }

    /// The host side of one attempt (logs, progress, questions, `is_cancelled`).
    fn sink(&self, cx: &CallContext, inv: &Invocation<'_>, runtime: Option<tokio::runtime::Handle>) -> RouterSink {
        RouterSink::new(
            cx.bridge.clone(),
            cx.cancel.clone(),
            inv.deadline,
            cx.meta.request_id.clone(),
            inv.state.counters.clone(),
            runtime,
        )
    }

    /// Waits for a call running elsewhere (a worker process). When the caller stops waiting
    /// (cancellation, deadline), the call is aborted and a reaper keeps the tool's slot until the
    /// call is really over: the backend kills a worker whose call overran its deadline, so the
    /// slot always comes back.
    async fn await_remote(
        &self,
        cx: &CallContext,
        inv: &Invocation<'_>,
        call: RemoteCall,
        sink: Arc<RouterSink>,
        tool_permit: OwnedSemaphorePermit,
    ) -> Answer {
        let (cancel, deadline) = (&cx.cancel, inv.deadline);
        let RemoteCall { mut answer, abort } = call;
        let outcome = tokio::select! {
            biased;
            r = &mut answer => Ok(r),
            _ = cancel.cancelled() => Err(AbortReason::Cancelled),
            _ = tokio::time::sleep_until(deadline.into()) => Err(AbortReason::Deadline),
        };
        let reason = match outcome {
            Ok(r) => {
                sink.finished();
                drop(tool_permit);
                if cancel.is_cancelled() {
                    return Err(cancelled(inv.tool_name));
                }
                let raw = r.map_err(|e| after_handoff(e, inv))?;
                return settle(&raw, inv, Some(cancel), Instant::now());
            }
            Err(reason) => reason,
        };
        sink.abandon(reason == AbortReason::Deadline);
        abort(reason);
        tokio::spawn(async move {
            let _slot = tool_permit;
            tokio::select! {
                _ = &mut answer => {}
                _ = tokio::time::sleep_until(deadline.into()) => {
                    abort(AbortReason::Deadline);
                    let _ = answer.await;
                }
            }
            sink.finished();
        });
        // `abandon` counted the deadline's timeout.
        match reason {
            AbortReason::Cancelled => Err(cancelled(inv.tool_name)),
            AbortReason::Deadline => Err(timeout_error(inv)),
        }
    }
}

/// Runs the plugin on one of the router's pool threads (`pool.rs`); the caller stops waiting
/// at the deadline or on cancellation, and then retires the thread (it keeps running the
/// plugin, holding the tool's slot, while a new thread takes its place in the pool).
async fn on_thread(
    pool: &Pool,
    cx: &CallContext,
    inv: &Invocation<'_>,
    body: String,
    sink: Arc<RouterSink>,
    tool_permit: OwnedSemaphorePermit,
) -> Answer {
    let (cancel, deadline) = (&cx.cancel, inv.deadline);
    let plugin = inv.plugin.clone();
    let tool = inv.tool;
    let plugin_sink = sink.clone();
    let (tx, mut rx) = tokio::sync::oneshot::channel();
    let spin = inv.state.spin.budget();
    let handed = Instant::now();
    let job = Box::new(ThreadCall {
        plugin,
        tool,
        body,
        sink: plugin_sink,
        _permit: tool_permit,
        out: String::new(),
        took: Duration::ZERO,
        tx: Some(tx),
    });
    let ticket = pool.run(job, handed).map_err(|refused| pool_refused(inv.tool_name, refused))?;
    let mut guard = AbandonOnDrop { sink: &sink, armed: true, pool, ticket: &ticket };
    // A tool that answered fast lately: wait a little for its answer without sleeping (bounded
    // by `pool::SPIN` and the deadline; see `pool.rs` for why).
    let early = spin.and_then(|budget| {
        let mut got = None;
        spin_until((handed + budget).min(deadline), || match rx.try_recv() {
            Ok(raw) => {
                got = Some(Ok(raw));
                true
            }
            Err(TryRecvError::Closed) => true,
            Err(TryRecvError::Empty) => false,
        });
        if got.is_none() {
            inv.state.spin.missed();
        }
        got
    });
    let answer = if let Some(answer) = early {
        answer
    } else {
        tokio::select! {
            biased;
            r = &mut rx => r,
            _ = cancel.cancelled() => {
                // `guard` marks the call abandoned and retires the thread.
                return Err(cancelled(inv.tool_name));
            }
            _ = tokio::time::sleep_until(deadline.into()) => {
                guard.armed = false;
                sink.abandon(true);
                pool.retire(&ticket);
                inv.state.spin.record(handed.elapsed());
                return Err(timeout_error(inv));
            }
        }
    };
    guard.armed = false;
    let done = answer.map_err(|_| {
        Code::Protocol.error(format!("the thread running `{}` failed before it answered", inv.tool_name))
    })?;
    // The job's parts (its permit, the `Arc`s, the request) are dropped here, on the caller's
    // thread, with the copies it made, and the run time is recorded here: their counters do
    // not travel between processors.
    inv.state.spin.record(done.took);
    settle(&done.out, inv, Some(cancel), Instant::now())
}

/// The error of a thread-execution call the pool could not take.
fn pool_refused(tool_name: &str, refused: Refused) -> ToolError {
    match refused {
        Refused::Full(n) => Code::Protocol
            .error(format!(
                "`{tool_name}` could not start: all {n} of the host's tool threads are busy (the host is overloaded); try again later"
            ))
            .retryable(),
        Refused::Spawn(e) => Code::Protocol
            .error(format!("`{tool_name}` could not start: the host cannot start a thread ({e}); try again later"))
            .retryable(),
    }
}

/// A thread-execution call as a pool thread runs it.
struct ThreadCall {
    plugin: Arc<PluginEntry>,
    tool: usize,
    body: String,
    sink: Arc<RouterSink>,
    /// The tool's slot, held until the caller has the answer (or, past the caller's deadline,
    /// until the plugin returns).
    _permit: OwnedSemaphorePermit,
    out: String,
    /// How long the plugin ran (the caller records it for the next callers'
    /// [`crate::pool::SpinHint`]).
    took: Duration,
    /// Where the finished job goes back to its caller, who drops it (see `on_thread`).
    tx: Option<tokio::sync::oneshot::Sender<Box<ThreadCall>>>,
}

impl Work for ThreadCall {
    fn run(&mut self) {
        // In the caller's runtime context, as a tokio blocking thread would be (a backend may
        // look for the runtime; the plugin's questions block on it through the sink).
        let _runtime = self.sink.runtime.as_ref().map(tokio::runtime::Handle::enter);
        let name = self.plugin.tools[self.tool].spec.name.as_str();
        let started = Instant::now();
        // The sink lent, not shared: the job holds it until the caller drops the job.
        let (backend, body, out) = (&self.plugin.backend, self.body.as_str(), &mut self.out);
        if !backend.invoke_borrowed(name, body, &*self.sink, &mut |answer| answer.clone_into(out)) {
            *out = backend.invoke(name, body, self.sink.clone());
        }
        self.took = started.elapsed();
        self.sink.finished();
    }

    fn answer(mut self: Box<Self>) {
        if let Some(tx) = self.tx.take() {
            // A caller that stopped waiting gets nothing: the job, its slot included, is
            // dropped here.
            let _ = tx.send(self);
        }
    }
}

/// A plugin's answer, unless it raced a cancellation or the deadline (a tool that saw
/// `is_cancelled` and stopped early did not produce a result). `cancel` is the token of a
/// caller that stopped waiting for a thread or a worker; an inline tool's caller waited for
/// its answer, whole, and gets it (`None`; it was checked before the tool ran).
fn settle(raw: &str, inv: &Invocation<'_>, cancel: Option<&CancellationToken>, now: Instant) -> Answer {
    if cancel.is_some_and(CancellationToken::is_cancelled) {
        return Err(cancelled(inv.tool_name));
    }
    if now >= inv.deadline {
        inv.state.counters.timed_out();
        return Err(timeout_error(inv));
    }
    let mut answer = parse_response(inv.tool_name, raw, inv.text_shape);
    if inv.unsafe_effect.is_some()
        && let Ok((response, _)) = &mut answer
        && let Some(e) = response.error.take()
    {
        response.error = Some(after_handoff(e, inv));
    }
    answer
}

/// The host's error for a call past its deadline, after the tool was handed it.
fn timeout_error(inv: &Invocation<'_>) -> ToolError {
    let tool_name = inv.tool_name;
    let e = Code::Timeout.error(format!("`{tool_name}` did not answer before its deadline and was told to stop"));
    match inv.unsafe_effect {
        Some(effect) => quiver_catalog::not_safe_to_repeat(e, tool_name, effect),
        None => {
            let mut e = e.retryable();
            e.message.push_str("; try a smaller request, or try again later");
            e
        }
    }
}

/// `e`, an error that came after the tool was handed the call (from the backend, or parsed
/// from the tool's answer). When its code leaves the outcome unknown ([`Code::outcome_unknown`])
/// and the call is not safe to repeat, it is not retryable, whatever its maker said: the router
/// does not retry it, and the caller is told to check the effect first. Every backend gets this
/// here, in one place; an error that knows nothing ran uses another code.
fn after_handoff(e: ToolError, inv: &Invocation<'_>) -> ToolError {
    match inv.unsafe_effect {
        Some(effect) if e.retryable && Code::of(&e).is_some_and(Code::outcome_unknown) => {
            quiver_catalog::not_safe_to_repeat(e, inv.tool_name, effect)
        }
        _ => e,
    }
}

/// How the plugin SDK writes a successful answer that carries nothing but its output (the
/// common case): these bytes, the output's JSON, and `}`.
const PLAIN_OK: &str = r#"{"status":"ok","outputs":"#;

/// The answer `raw` when it is exactly [`PLAIN_OK`], a JSON value and `}`: only the output is
/// parsed (no field-by-field reading of the envelope). The same response as the general parse
/// (`plain_answers_read_as_the_general_parse_reads_them`); `None` for anything else. With a
/// `shape` the output accepts, it is kept as text instead (already checked: no `Value`).
fn plain_ok(raw: &str, shape: Option<&Shape>) -> Option<(ToolResponse, Option<Box<str>>)> {
    let rest = raw.strip_prefix(PLAIN_OK)?.strip_suffix('}')?;
    if let Some(shape) = shape
        && shape.accepts(rest)
    {
        let text = rest.trim_matches(is_json_space).into();
        return Some((ToolResponse { status: Status::Ok, ..ToolResponse::default() }, Some(text)));
    }
    let outputs: Value = serde_json::from_str(rest).ok()?;
    Some((ToolResponse { status: Status::Ok, outputs, ..ToolResponse::default() }, None))
}

/// JSON's whitespace (around a value).
fn is_json_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r')
}

/// Reads a plugin's answer; returns it with its size in bytes (and its output as text: see
/// [`plain_ok`]).
fn parse_response(tool_name: &str, raw: &str, shape: Option<&Shape>) -> Answer {
    if let Some((response, text)) = plain_ok(raw, shape) {
        return Ok((response, Raw { len: raw.len(), text }));
    }
    let response: ToolResponse = serde_json::from_str(raw).map_err(|e| {
        let mut shown = raw.to_owned();
        shown.truncate(shown.char_indices().nth(200).map(|(i, _)| i).unwrap_or(shown.len()));
        Code::Protocol.error(format!("`{tool_name}` answered something that is not a tool response ({e}): {shown}"))
    })?;
    Ok((response, Raw { len: raw.len(), text: None }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_callers_agent_context_is_written_once_and_again_when_it_changed() {
        let context = |c: &Caller| {
            let mut b = Vec::new();
            c.agent_context_json(write_agent_context, &mut b).unwrap();
            serde_json::from_slice::<quiver_abi::AgentContext>(&b).unwrap()
        };
        let mut caller = Caller::new("s\"1", quiver_catalog::Access::new(["fs.read", "*"], []));
        caller.client = "c\n".into();
        caller.mode = "plan".into();
        let expected = quiver_abi::AgentContext {
            session_id: "s\"1".into(),
            client: "c\n".into(),
            mode: "plan".into(),
            scopes: vec!["*".into(), "fs.read".into()],
        };
        // Written, then kept: the same object both times.
        assert_eq!(context(&caller), expected);
        assert_eq!(context(&caller), expected);
        // Each field it came from, changed afterwards, is seen (the kept text is not used).
        let mut changed = caller.clone();
        changed.session_id = "s2".into();
        assert_eq!(context(&changed).session_id, "s2");
        let mut changed = caller.clone();
        changed.client = "other".into();
        assert_eq!(context(&changed).client, "other");
        let mut changed = caller.clone();
        changed.mode = "agent".into();
        assert_eq!(context(&changed).mode, "agent");
        let mut changed = caller.clone();
        changed.access = quiver_catalog::Access::new(["net"], []);
        assert_eq!(context(&changed).scopes, ["net"]);
        // Equal scopes in a new set are written again, and read the same.
        let mut changed = caller.clone();
        changed.access = quiver_catalog::Access::new(["fs.read", "*"], []);
        assert_eq!(context(&changed), expected);
        assert_eq!(context(&caller), expected);
    }

    #[test]
    fn plain_answers_read_as_the_general_parse_reads_them() {
        let outputs = [
            r#"{"text":"hello","version":"0.1.0"}"#,
            r#"{}"#,
            r#"null"#,
            r#"[1,2,{"a":"}"}]"#,
            r#""a string with } and \" in it""#,
            r#"{"a":{"b":[true,false,null,1.5e3,-2]},"a":2}"#,
            r#"  {"padded" : 1 }  "#,
        ];
        for o in outputs {
            let raw = format!("{PLAIN_OK}{o}}}");
            let fast = plain_ok(&raw, None).expect(&raw).0;
            let general: ToolResponse = serde_json::from_str(&raw).unwrap();
            assert_eq!(fast, general, "{raw}");
        }
        // Anything else goes to the general parse (which may refuse it).
        for raw in [
            r#"{"status":"ok","outputs":{"a":1},"observations":["x"]}"#,
            r#"{"status":"ok","outputs":{"a":1}} "#,
            r#"{"status":"ok","outputs":{"a":1}"#,
            r#"{"status":"ok","outputs":{"a":1}}}"#,
            r#"{"status":"ok","outputs":}"#,
            r#"{"status":"error","outputs":null,"error":{"code":"tool_error","message":"m"}}"#,
            r#"{"outputs":{"a":1},"status":"ok"}"#,
            r#"{ "status":"ok","outputs":{"a":1}}"#,
        ] {
            assert!(plain_ok(raw, None).is_none(), "{raw}");
        }
    }

    #[test]
    fn an_output_its_shape_accepts_is_kept_as_text_and_any_other_is_read_as_before() {
        let shape = Shape::of(&serde_json::json!({
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"]
        }))
        .unwrap();
        let raw = format!("{PLAIN_OK} {{\"text\":\"hi\"}}\n}}");
        let (response, text) = plain_ok(&raw, Some(&shape)).unwrap();
        assert_eq!(text.as_deref(), Some(r#"{"text":"hi"}"#));
        assert_eq!(response, ToolResponse { status: Status::Ok, ..ToolResponse::default() });
        let answer = parse_response("t", &raw, Some(&shape)).unwrap();
        assert_eq!((answer.1.len, answer.1.text.as_deref()), (raw.len(), Some(r#"{"text":"hi"}"#)));
        // Not accepted (a required property missing): the output as a `Value`, for the output
        // stage to word the error.
        let raw = format!("{PLAIN_OK}{{\"other\":1}}}}");
        let (response, text) = plain_ok(&raw, Some(&shape)).unwrap();
        assert_eq!((response.outputs, text), (serde_json::json!({"other": 1}), None));
    }
}
