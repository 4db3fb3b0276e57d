//! The policy record of a call: typed [`Step`]s, one per decision of a pipeline [`Stage`], in
//! pipeline order. Rendered as the same short strings in `_meta`, logs and transcripts
//! (`resolve:canonical`, `breaker:closed`, `retry:1:tool_error:100ms`, ...).

/// The stages of the pipeline, in order; their names are stable (spans, logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stage {
    /// `run_tool`'s envelope (generic lane only).
    RunTool,
    /// The name in the catalog snapshot, visibility, the alias's action.
    Resolve,
    /// The action's scopes.
    Scopes,
    /// The arguments against the input schema.
    Validate,
    /// Rate limits per tool, session and principal.
    RateLimit,
    /// A person's confirmation.
    Approval,
    /// The tool's circuit breaker.
    Breaker,
    /// Concurrency slots, the invocation under its deadline, retries.
    Dispatch,
    /// The output against the output schema, and the result-size limit.
    Output,
}

impl Stage {
    /// The stage's stable name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Stage::RunTool => "run_tool",
            Stage::Resolve => "resolve",
            Stage::Scopes => "scopes",
            Stage::Validate => "validate",
            Stage::RateLimit => "rate_limit",
            Stage::Approval => "approval",
            Stage::Breaker => "breaker",
            Stage::Dispatch => "dispatch",
            Stage::Output => "output",
        }
    }
}

/// One decision of the pipeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// `run_tool` served `quiver.read_result` itself.
    RunToolReadResult,
    /// `run_tool`'s envelope was refused.
    RunToolRefused,
    /// No visible tool by that name.
    ResolveUnknown,
    /// The name was removed.
    ResolveRemoved,
    /// Called by its canonical name.
    ResolveCanonical,
    /// Called by an alias.
    ResolveAlias,
    /// The alias's action and the arguments' `action` disagree.
    ActionConflict,
    /// The action needs scopes the session lacks.
    ScopesDenied,
    /// Scopes held.
    ScopesOk,
    /// Arguments refused by the input schema.
    ArgumentsInvalid,
    /// Arguments valid.
    ArgumentsOk,
    /// A rate limit refused the call.
    RateLimited,
    /// The call needs no confirmation.
    ApprovalNotRequired,
    /// The profile refuses calls that need confirmation.
    ApprovalDeniedByProfile,
    /// The caller marked the call confirmed.
    ApprovalConfirmedByCaller,
    /// The profile allows it without asking.
    ApprovalAllowedByProfile,
    /// The user confirmed when asked.
    ApprovalConfirmedByUser,
    /// The user declined when asked.
    ApprovalDeclinedByUser,
    /// Asking the user failed.
    ApprovalAskFailed,
    /// The client cannot ask the user.
    ApprovalCannotAsk,
    /// The breaker is open: refused.
    BreakerOpen,
    /// The call is the half-open breaker's probe.
    BreakerHalfOpenProbe,
    /// The breaker is closed.
    BreakerClosed,
    /// This call's failure opened the breaker.
    BreakerOpened,
    /// This probe's success closed the breaker.
    BreakerClosedAfterProbe,
    /// A retry of a retryable error.
    Retry(Retry),
    /// A retryable error, but no time left before the deadline for another attempt.
    RetryNoTimeLeft,
    /// The output does not match the output schema.
    OutputInvalid,
    /// The result was cut to its size limit.
    ResultTruncated,
    /// The cut result has no structured output.
    ResultUnstructured,
}

/// A retry: its number (1-based), the code that caused it and the delay before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retry {
    /// 1 for the first retry.
    pub attempt: u32,
    /// Delay before the attempt, in milliseconds.
    pub delay_ms: u64,
    /// `retry:<attempt>:<code>:<delay>ms` (rendered once, when the retry is made).
    text: Box<str>,
}

impl Retry {
    pub(crate) fn new(attempt: u32, code: &str, delay_ms: u64) -> Retry {
        Retry { attempt, delay_ms, text: format!("retry:{attempt}:{code}:{delay_ms}ms").into_boxed_str() }
    }
}

impl Step {
    /// The stage that made the decision.
    pub fn stage(&self) -> Stage {
        use Step::*;
        match self {
            RunToolReadResult | RunToolRefused => Stage::RunTool,
            ResolveUnknown | ResolveRemoved | ResolveCanonical | ResolveAlias | ActionConflict => Stage::Resolve,
            ScopesDenied | ScopesOk => Stage::Scopes,
            ArgumentsInvalid | ArgumentsOk => Stage::Validate,
            RateLimited => Stage::RateLimit,
            ApprovalNotRequired
            | ApprovalDeniedByProfile
            | ApprovalConfirmedByCaller
            | ApprovalAllowedByProfile
            | ApprovalConfirmedByUser
            | ApprovalDeclinedByUser
            | ApprovalAskFailed
            | ApprovalCannotAsk => Stage::Approval,
            BreakerOpen | BreakerHalfOpenProbe | BreakerClosed | BreakerOpened | BreakerClosedAfterProbe => {
                Stage::Breaker
            }
            Retry(_) | RetryNoTimeLeft => Stage::Dispatch,
            OutputInvalid | ResultTruncated | ResultUnstructured => Stage::Output,
        }
    }

    /// The step as recorded (`stage:decision`).
    pub fn as_str(&self) -> &str {
        use Step::*;
        match self {
            RunToolReadResult => "run_tool:read_result",
            RunToolRefused => "run_tool:refused",
            ResolveUnknown => "resolve:unknown",
            ResolveRemoved => "resolve:removed",
            ResolveCanonical => "resolve:canonical",
            ResolveAlias => "resolve:alias",
            ActionConflict => "arguments:action-conflict",
            ScopesDenied => "scopes:denied",
            ScopesOk => "scopes:ok",
            ArgumentsInvalid => "arguments:invalid",
            ArgumentsOk => "arguments:ok",
            RateLimited => "rate:limited",
            ApprovalNotRequired => "approval:not-required",
            ApprovalDeniedByProfile => "approval:denied-by-profile",
            ApprovalConfirmedByCaller => "approval:confirmed-by-caller",
            ApprovalAllowedByProfile => "approval:allowed-by-profile",
            ApprovalConfirmedByUser => "approval:confirmed-by-user",
            ApprovalDeclinedByUser => "approval:declined-by-user",
            ApprovalAskFailed => "approval:ask-failed",
            ApprovalCannotAsk => "approval:cannot-ask",
            BreakerOpen => "breaker:open",
            BreakerHalfOpenProbe => "breaker:half-open-probe",
            BreakerClosed => "breaker:closed",
            BreakerOpened => "breaker:opened",
            BreakerClosedAfterProbe => "breaker:closed-after-probe",
            Retry(r) => &r.text,
            RetryNoTimeLeft => "retry:no-time-left",
            OutputInvalid => "output:invalid",
            ResultTruncated => "result:truncated",
            ResultUnstructured => "result:unstructured",
        }
    }
}

impl AsRef<str> for Step {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq<str> for Step {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for Step {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// A policy record shown as its steps joined by `,` (logs).
pub struct Joined<'a>(pub &'a [Step]);

impl std::fmt::Display for Joined<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, s) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            f.write_str(s.as_str())?;
        }
        Ok(())
    }
}
