//! A per-tool circuit breaker made of atomics: closed → open after N consecutive failures →
//! half-open (one probe) after a cooldown → closed on the probe's success, open again on its
//! failure.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::AcqRel, Ordering::Acquire, Ordering::Release};
use std::time::Duration;

use quiver_telemetry::BreakerState;

/// What the breaker says about a new call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Closed: go ahead.
    Pass,
    /// Half-open: this call is the one probe.
    Probe,
    /// Open: refuse; the cooldown ends in this long.
    Refuse(Duration),
}

/// How a finished call counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Success,
    Failure,
    /// Neither (e.g. cancelled by the caller): releases a probe without deciding.
    Neutral,
}

#[derive(Debug, Default)]
pub(crate) struct Breaker {
    failures: AtomicU32,
    /// Nanoseconds (since the router's epoch, plus one) when the breaker opened; 0 when closed.
    opened_at: AtomicU64,
    probing: AtomicBool,
}

impl Breaker {
    /// True while closed (one atomic load: the call path's fast check).
    pub(crate) fn is_closed(&self) -> bool {
        self.opened_at.load(Acquire) == 0
    }

    /// `now` is nanoseconds since the router's epoch.
    pub(crate) fn admit(&self, now: u64, cooldown: Duration) -> Admission {
        let opened = self.opened_at.load(Acquire);
        if opened == 0 {
            return Admission::Pass;
        }
        let cool = cooldown.as_nanos() as u64;
        let elapsed = now.saturating_sub(opened - 1);
        if elapsed < cool {
            return Admission::Refuse(Duration::from_nanos(cool - elapsed));
        }
        if self.probing.compare_exchange(false, true, AcqRel, Acquire).is_ok() {
            Admission::Probe
        } else {
            Admission::Refuse(Duration::ZERO)
        }
    }

    /// Records a finished call; returns the new state when it changed.
    pub(crate) fn record(
        &self,
        admission: Admission,
        verdict: Verdict,
        now: impl Fn() -> u64,
        threshold: u32,
    ) -> Option<BreakerState> {
        let probe = admission == Admission::Probe;
        match verdict {
            Verdict::Success => {
                self.failures.store(0, Release);
                if probe {
                    self.opened_at.store(0, Release);
                    self.probing.store(false, Release);
                    return Some(BreakerState::Closed);
                }
                None
            }
            Verdict::Failure => {
                let n = self.failures.fetch_add(1, AcqRel).saturating_add(1);
                if probe {
                    self.opened_at.store(now() + 1, Release);
                    self.probing.store(false, Release);
                    return Some(BreakerState::Open);
                }
                if n >= threshold.max(1) && self.opened_at.compare_exchange(0, now() + 1, AcqRel, Acquire).is_ok() {
                    return Some(BreakerState::Open);
                }
                None
            }
            Verdict::Neutral => {
                if probe {
                    self.probing.store(false, Release);
                }
                None
            }
        }
    }

    #[cfg(test)]
    fn state(&self, now: u64, cooldown: Duration) -> BreakerState {
        match self.opened_at.load(Acquire) {
            0 => BreakerState::Closed,
            t if now.saturating_sub(t - 1) < cooldown.as_nanos() as u64 => BreakerState::Open,
            _ => BreakerState::HalfOpen,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const COOL: Duration = Duration::from_millis(100);
    const MS: u64 = 1_000_000;

    #[test]
    fn opens_after_n_failures_half_opens_after_cooldown_and_closes_on_success() {
        let b = Breaker::default();
        for i in 0..2 {
            assert_eq!(b.admit(i, COOL), Admission::Pass);
            assert_eq!(b.record(Admission::Pass, Verdict::Failure, || i, 3), None);
        }
        // A success resets the count.
        assert_eq!(b.record(Admission::Pass, Verdict::Success, || 2, 3), None);
        for i in 0..2 {
            b.record(Admission::Pass, Verdict::Failure, || i, 3);
        }
        assert_eq!(b.record(Admission::Pass, Verdict::Failure, || 10 * MS, 3), Some(BreakerState::Open));
        assert_eq!(b.state(10 * MS, COOL), BreakerState::Open);
        assert!(matches!(b.admit(50 * MS, COOL), Admission::Refuse(d) if d == Duration::from_millis(60)));
        // Cooldown over: one probe, others refused.
        assert_eq!(b.state(111 * MS, COOL), BreakerState::HalfOpen);
        assert_eq!(b.admit(111 * MS, COOL), Admission::Probe);
        assert!(matches!(b.admit(111 * MS, COOL), Admission::Refuse(_)));
        // Probe fails: open again for a full cooldown.
        assert_eq!(b.record(Admission::Probe, Verdict::Failure, || 120 * MS, 3), Some(BreakerState::Open));
        assert!(matches!(b.admit(200 * MS, COOL), Admission::Refuse(_)));
        assert_eq!(b.admit(221 * MS, COOL), Admission::Probe);
        // A neutral outcome frees the probe slot without deciding.
        assert_eq!(b.record(Admission::Probe, Verdict::Neutral, || 222 * MS, 3), None);
        assert_eq!(b.admit(223 * MS, COOL), Admission::Probe);
        assert_eq!(b.record(Admission::Probe, Verdict::Success, || 224 * MS, 3), Some(BreakerState::Closed));
        assert_eq!(b.admit(225 * MS, COOL), Admission::Pass);
    }
}
