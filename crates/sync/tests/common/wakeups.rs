//! What the event-count stress tests (`eventcount.rs`, `two_word.rs`) count, and the handshake
//! that finds a lost wake-up: the things that must never happen, tallied by every waiter.

use std::sync::atomic::{AtomicU64, Ordering::*};
use std::time::{Duration, Instant};

use spindle_sync::eventcount::TimedOut;
use spindle_sync::Deadline;

/// How long after a burst a waiter may still be behind its last version before the handshake
/// counts it as a lost wake-up (unless the process was not run meanwhile: see
/// [`super::Heartbeat::excuses`]).
pub const HANDSHAKE_LIMIT: Duration = Duration::from_secs(3);

#[derive(Default)]
pub struct Tally {
    pub lost_wakeups: AtomicU64,
    pub same_version: AtomicU64,
    pub early_timeouts: AtomicU64,
    pub timeouts_without_deadline: AtomicU64,
    pub waits: AtomicU64,
    pub timeouts: AtomicU64,
    pub handshakes: AtomicU64,
}

impl Tally {
    /// One wait on version `old`, with `deadline`, that returned `result`.
    pub fn wait(&self, old: u64, deadline: Option<Deadline>, result: Result<u64, TimedOut>) {
        self.waits.fetch_add(1, Relaxed);
        match result {
            Ok(v) if v == old => {
                self.same_version.fetch_add(1, Relaxed);
            }
            Ok(_) => {}
            Err(TimedOut) => {
                self.timeouts.fetch_add(1, Relaxed);
                match deadline {
                    None => {
                        self.timeouts_without_deadline.fetch_add(1, Relaxed);
                    }
                    Some(d) if !d.has_passed() => {
                        self.early_timeouts.fetch_add(1, Relaxed);
                    }
                    Some(_) => {}
                }
            }
        }
    }

    /// No lost wake-up, no `Ok(old)`, no early timeout or timeout without a deadline, and at
    /// least one handshake (the test did run).
    pub fn assert_sound(&self) {
        assert_eq!(self.lost_wakeups.load(Relaxed), 0, "lost wake-ups");
        assert_eq!(self.same_version.load(Relaxed), 0, "Ok(v) with v == old");
        assert_eq!(
            self.early_timeouts.load(Relaxed),
            0,
            "timeouts before the deadline"
        );
        assert_eq!(
            self.timeouts_without_deadline.load(Relaxed),
            0,
            "timeouts without a deadline"
        );
        assert!(self.handshakes.load(Relaxed) > 0);
    }
}

/// After a burst ending at version `v`: wait until every waiter has seen at least `v`. A waiter
/// still below `v` [`HANDSHAKE_LIMIT`] later slept through the signal that made `v` (versions
/// only grow in these tests), unless the process was not run meanwhile. `now` reads the
/// count's version, for the message.
pub fn handshake(now: impl Fn() -> u64, v: u64, seen: &[AtomicU64], tally: &Tally) {
    tally.handshakes.fetch_add(1, Relaxed);
    let start = Instant::now();
    let mut spins = 0u32;
    loop {
        let behind = seen.iter().filter(|s| s.load(Acquire) < v).count();
        if behind == 0 {
            return;
        }
        if start.elapsed() > HANDSHAKE_LIMIT {
            let what = format!("{behind} waiter(s) behind version {v} (now {})", now());
            if !super::heartbeat().excuses(&what, start, HANDSHAKE_LIMIT) {
                tally.lost_wakeups.fetch_add(behind as u64, Relaxed);
            }
            return;
        }
        spins += 1;
        if spins < 100 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}
