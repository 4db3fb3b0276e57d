//! Rate limits per tool, per session and per principal: GCRA token buckets (`governor`). A
//! tool's buckets live in its per-tool state (built once per catalog snapshot, kept across
//! unrelated swaps); tools without limits pay one `Option` check per call.

use std::hash::BuildHasher;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use foldhash::fast::FixedState;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota, RateLimiter};
use quiver_abi::ToolError;
use quiver_manifest::{RateLimit, RateLimits};
use quiver_telemetry::LimitScope;
use serde_json::json;

use crate::codes::Code;

const KEY_SEED: u64 = 0x5157_4956_4552_4c49;

/// Keyed buckets are swept of idle keys every this many checks.
const SWEEP_EVERY: u64 = 4096;

/// Buckets keyed by a 64-bit hash of the session id or principal name (no copy of the string
/// per call; a collision of two live keys would only make them share a bucket).
struct Keyed {
    limit: RateLimit,
    buckets: DefaultKeyedRateLimiter<u64>,
    checks: AtomicU64,
}

/// The buckets of one tool.
pub(crate) struct Limits {
    tool: Option<(RateLimit, DefaultDirectRateLimiter)>,
    session: Option<Keyed>,
    principal: Option<Keyed>,
}

fn quota(l: &RateLimit) -> Quota {
    let per_minute = NonZeroU32::new(l.per_minute.max(1)).unwrap_or(NonZeroU32::MIN);
    let burst = NonZeroU32::new(l.burst()).unwrap_or(NonZeroU32::MIN);
    Quota::per_minute(per_minute).allow_burst(burst)
}

impl Limits {
    /// The buckets for `limits`; `None` when nothing is limited.
    pub(crate) fn new(limits: &RateLimits) -> Option<Limits> {
        if limits.is_empty() {
            return None;
        }
        let keyed = |l: &Option<RateLimit>| {
            l.map(|limit| Keyed { limit, buckets: RateLimiter::keyed(quota(&limit)), checks: AtomicU64::new(0) })
        };
        Some(Limits {
            tool: limits.tool.map(|l| (l, RateLimiter::direct(quota(&l)))),
            session: keyed(&limits.session),
            principal: keyed(&limits.principal),
        })
    }

    /// Takes a token from each bucket that applies, narrowest first; the first empty one
    /// refuses the call with the scope and how long until a token is back.
    pub(crate) fn check(
        &self,
        session: &str,
        principal: Option<&str>,
    ) -> Result<(), (LimitScope, RateLimit, Duration)> {
        let clock = DefaultClock::default();
        if let Some(k) = &self.session {
            k.check(session, &clock).map_err(|d| (LimitScope::Session, k.limit, d))?;
        }
        if let Some(k) = &self.principal {
            // Callers without a principal (stdio, no auth) share the bucket of "".
            k.check(principal.unwrap_or(""), &clock).map_err(|d| (LimitScope::Principal, k.limit, d))?;
        }
        if let Some((limit, bucket)) = &self.tool {
            bucket.check().map_err(|n| (LimitScope::Tool, *limit, n.wait_time_from(clock.now())))?;
        }
        Ok(())
    }
}

impl Keyed {
    fn check(&self, key: &str, clock: &DefaultClock) -> Result<(), Duration> {
        if self.checks.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            self.buckets.retain_recent();
        }
        let key = FixedState::with_seed(KEY_SEED).hash_one(key);
        self.buckets.check_key(&key).map_err(|n| n.wait_time_from(clock.now()))
    }
}

/// The `rate_limited` error: names the tool, the scope and the limit, and says when to retry.
pub(crate) fn refused(tool: &str, scope: LimitScope, limit: RateLimit, wait: Duration) -> ToolError {
    let retry_after_ms = (wait.as_millis() as u64).max(1);
    let scope_text = match scope {
        LimitScope::Tool => "for all callers",
        LimitScope::Session => "per session",
        LimitScope::Principal => "per principal",
    };
    Code::RateLimited.error(
        format!(
            "`{tool}` is rate limited {scope_text} ({} calls a minute, bursts of {}); retry after {retry_after_ms} ms, or use another tool meanwhile",
            limit.per_minute,
            limit.burst()
        ),
    )
    .retryable()
    .with_details(json!({
        "retry_after_ms": retry_after_ms,
        "scope": scope.as_str(),
        "per_minute": limit.per_minute,
        "burst": limit.burst(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_over_the_limit_is_refused_with_a_wait_and_other_keys_are_unaffected() {
        let limits =
            RateLimits { session: Some(RateLimit { per_minute: 60, burst: Some(3) }), ..RateLimits::default() };
        let l = Limits::new(&limits).unwrap();
        for _ in 0..3 {
            assert!(l.check("s1", None).is_ok());
        }
        let (scope, _, wait) = l.check("s1", None).unwrap_err();
        assert_eq!(scope, LimitScope::Session);
        assert!(wait > Duration::ZERO && wait <= Duration::from_secs(1), "{wait:?}");
        assert!(l.check("s2", None).is_ok(), "another session has its own bucket");
        assert!(Limits::new(&RateLimits::default()).is_none());
    }
}
