//! A call's start in wall-clock milliseconds (`ToolRequest.timestamp`, transcripts) from the
//! monotonic clock read the call makes anyway: the wall clock is read again at most once a
//! second, so a call reads one clock at its start instead of two.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long a reading of the wall clock is used before it is read again (so a change of the
/// system clock shows within this time).
const REREAD: Duration = Duration::from_secs(1);

pub(crate) struct WallClock {
    epoch: Instant,
    /// Wall-clock nanoseconds since the Unix epoch minus monotonic nanoseconds since `epoch`, at
    /// the last reading of the wall clock.
    offset_ns: AtomicU64,
    /// Monotonic nanoseconds since `epoch` at that reading; `u64::MAX` before the first.
    read_at_ns: AtomicU64,
}

impl WallClock {
    pub(crate) fn new() -> WallClock {
        WallClock { epoch: Instant::now(), offset_ns: AtomicU64::new(0), read_at_ns: AtomicU64::new(u64::MAX) }
    }

    /// The monotonic clock's start (the router's epoch).
    pub(crate) fn epoch(&self) -> Instant {
        self.epoch
    }

    /// Milliseconds since the Unix epoch at `at`, an instant read just now.
    pub(crate) fn millis_at(&self, at: Instant) -> u64 {
        let mono = at.saturating_duration_since(self.epoch).as_nanos() as u64;
        let read_at = self.read_at_ns.load(Relaxed);
        if read_at == u64::MAX || mono.saturating_sub(read_at) >= REREAD.as_nanos() as u64 || mono < read_at {
            let wall = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
            // Two racing readers store readings a few nanoseconds apart: either is right.
            self.offset_ns.store(wall.saturating_sub(mono), Relaxed);
            self.read_at_ns.store(mono, Relaxed);
            return wall / 1_000_000;
        }
        mono.saturating_add(self.offset_ns.load(Relaxed)) / 1_000_000
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wall_ms() -> u64 {
        SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
    }

    #[test]
    fn follows_the_wall_clock_between_readings() {
        let clock = WallClock::new();
        for _ in 0..200 {
            let before = wall_ms();
            let at = clock.millis_at(Instant::now());
            let after = wall_ms();
            // A reading is exact; between readings the monotonic clock may run a little apart
            // from the wall clock (slewing), far less than a millisecond a second.
            assert!(before.saturating_sub(1) <= at && at <= after + 1, "{before} <= {at} <= {after}");
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}
