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

/// The steps that carry nothing but their kind, in the order of their codes in a [`Record`].
static UNIT_STEPS: [Step; 29] = [
    Step::RunToolReadResult,
    Step::RunToolRefused,
    Step::ResolveUnknown,
    Step::ResolveRemoved,
    Step::ResolveCanonical,
    Step::ResolveAlias,
    Step::ActionConflict,
    Step::ScopesDenied,
    Step::ScopesOk,
    Step::ArgumentsInvalid,
    Step::ArgumentsOk,
    Step::RateLimited,
    Step::ApprovalNotRequired,
    Step::ApprovalDeniedByProfile,
    Step::ApprovalConfirmedByCaller,
    Step::ApprovalAllowedByProfile,
    Step::ApprovalConfirmedByUser,
    Step::ApprovalDeclinedByUser,
    Step::ApprovalAskFailed,
    Step::ApprovalCannotAsk,
    Step::BreakerOpen,
    Step::BreakerHalfOpenProbe,
    Step::BreakerClosed,
    Step::BreakerOpened,
    Step::BreakerClosedAfterProbe,
    Step::RetryNoTimeLeft,
    Step::OutputInvalid,
    Step::ResultTruncated,
    Step::ResultUnstructured,
];

impl Step {
    /// The step's index in [`UNIT_STEPS`]; `None` for a retry (it carries its details).
    #[inline]
    fn code(&self) -> Option<u8> {
        use Step::*;
        Some(match self {
            RunToolReadResult => 0,
            RunToolRefused => 1,
            ResolveUnknown => 2,
            ResolveRemoved => 3,
            ResolveCanonical => 4,
            ResolveAlias => 5,
            ActionConflict => 6,
            ScopesDenied => 7,
            ScopesOk => 8,
            ArgumentsInvalid => 9,
            ArgumentsOk => 10,
            RateLimited => 11,
            ApprovalNotRequired => 12,
            ApprovalDeniedByProfile => 13,
            ApprovalConfirmedByCaller => 14,
            ApprovalAllowedByProfile => 15,
            ApprovalConfirmedByUser => 16,
            ApprovalDeclinedByUser => 17,
            ApprovalAskFailed => 18,
            ApprovalCannotAsk => 19,
            BreakerOpen => 20,
            BreakerHalfOpenProbe => 21,
            BreakerClosed => 22,
            BreakerOpened => 23,
            BreakerClosedAfterProbe => 24,
            RetryNoTimeLeft => 25,
            OutputInvalid => 26,
            ResultTruncated => 27,
            ResultUnstructured => 28,
            Retry(_) => return None,
        })
    }
}

/// Steps a [`Record`] keeps as one-byte codes (a call that runs records five or six).
const CODES: usize = 22;

/// The policy record of one call ([`crate::CallMeta::policy`]): its steps in pipeline order
/// ([`Record::iter`]). Kept as one-byte codes in place while every step carries nothing but its
/// kind (every call that is not retried, up to 22 steps): an ordinary call allocates nothing
/// for its record, and the record is as small as a `Vec`.
#[derive(Clone)]
pub struct Record(Steps);

#[derive(Clone)]
enum Steps {
    Codes { len: u8, codes: [u8; CODES] },
    Steps(Vec<Step>),
}

impl Record {
    /// An empty record.
    pub const fn new() -> Record {
        Record(Steps::Codes { len: 0, codes: [0; CODES] })
    }

    /// Appends a step.
    #[inline]
    pub fn push(&mut self, step: Step) {
        if let (Steps::Codes { len, codes }, Some(code)) = (&mut self.0, step.code())
            && let Some(slot) = codes.get_mut(usize::from(*len))
        {
            *slot = code;
            *len += 1;
            return;
        }
        self.push_slow(step);
    }

    /// [`Record::push`] of a retry, or past the room for codes, or once the steps are kept whole.
    #[cold]
    fn push_slow(&mut self, step: Step) {
        if let Steps::Steps(all) = &mut self.0 {
            return all.push(step);
        }
        let mut all: Vec<Step> = self.iter().cloned().collect();
        all.push(step);
        self.0 = Steps::Steps(all);
    }

    /// The steps, in order.
    pub fn iter(&self) -> Iter<'_> {
        Iter { record: self, next: 0 }
    }

    /// Number of steps.
    pub fn len(&self) -> usize {
        match &self.0 {
            Steps::Codes { len, .. } => usize::from(*len),
            Steps::Steps(all) => all.len(),
        }
    }

    /// True when no step is recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The steps of a [`Record`], in order.
pub struct Iter<'a> {
    record: &'a Record,
    next: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = &'a Step;

    fn next(&mut self) -> Option<&'a Step> {
        let step = match &self.record.0 {
            Steps::Codes { len, codes } => {
                codes[..usize::from(*len)].get(self.next).map(|&c| &UNIT_STEPS[usize::from(c)])
            }
            Steps::Steps(all) => all.get(self.next),
        };
        self.next += 1;
        step
    }
}

impl<'a> IntoIterator for &'a Record {
    type Item = &'a Step;
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl Default for Record {
    fn default() -> Record {
        Record::new()
    }
}

impl From<Vec<Step>> for Record {
    fn from(steps: Vec<Step>) -> Record {
        let mut r = Record::new();
        for s in steps {
            r.push(s);
        }
        r
    }
}

impl PartialEq for Record {
    fn eq(&self, other: &Record) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for Record {}

impl std::fmt::Debug for Record {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl serde::Serialize for Record {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

/// A policy record shown as its steps joined by `,` (logs).
pub struct Joined<'a>(pub &'a Record);

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unit_step_has_its_code() {
        for (i, step) in UNIT_STEPS.iter().enumerate() {
            assert_eq!(step.code(), Some(i as u8), "{step}");
        }
        assert_eq!(Step::Retry(Retry::new(1, "tool_error", 10)).code(), None);
    }

    #[test]
    fn a_record_keeps_its_steps_in_order() {
        let unit: Vec<Step> = (0..CODES + 3).map(|i| UNIT_STEPS[i % UNIT_STEPS.len()].clone()).collect();
        let mut retried = unit.clone();
        retried.insert(3, Step::Retry(Retry::new(1, "tool_error", 10)));
        for steps in [unit, retried] {
            for n in 0..=steps.len() {
                let mut r = Record::new();
                for s in &steps[..n] {
                    r.push(s.clone());
                }
                assert_eq!(r.iter().cloned().collect::<Vec<_>>(), steps[..n], "{n}");
                assert_eq!(r.len(), n);
                assert_eq!(r, Record::from(steps[..n].to_vec()));
                assert_eq!(serde_json::to_value(&r).unwrap(), serde_json::to_value(&steps[..n]).unwrap());
                assert_eq!(Joined(&r).to_string(), steps[..n].iter().map(Step::as_str).collect::<Vec<_>>().join(","));
            }
        }
    }
}
