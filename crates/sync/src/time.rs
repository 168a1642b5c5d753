//! Absolute deadlines on `CLOCK_MONOTONIC`, the clock the futex layer waits against.
//!
//! `std::time::Instant` is `CLOCK_MONOTONIC` on Linux too, but it does not expose its
//! `timespec`, and a futex wait needs one. A [`Deadline`] is a point on that clock in
//! nanoseconds; it is `Copy`, totally ordered, and saturates instead of overflowing, so
//! `Deadline::after(Duration::MAX)` is simply "never" in practice (about 584 years).
//!
//! The crate's spin holds use a second, cheaper clock (`ticks`, crate-private): the TSC on
//! x86-64, so that a hold lasts as long on every core (a `pause` does not).

use std::time::Duration;

use rustix::time::{clock_gettime, ClockId, Timespec};

/// A cheap clock for spacing polls: the TSC on x86-64 (`ordered` reads wait for the loads
/// before them, so a load between two of them is timed whole), nanoseconds of `Instant`
/// elsewhere (and under Miri, which has no TSC).
#[cfg(not(loom))]
pub(crate) mod ticks {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    #[inline]
    pub fn now() -> u64 {
        // SAFETY: `rdtsc` exists on every x86-64 CPU and has no memory effects.
        unsafe { core::arch::x86_64::_rdtsc() }
    }

    #[cfg(all(target_arch = "x86_64", not(miri)))]
    #[inline]
    pub fn ordered() -> u64 {
        // SAFETY: `lfence` and `rdtsc` exist on every x86-64 CPU (SSE2 is baseline). The first
        // `lfence` waits for earlier loads to complete, the second keeps later ones behind.
        unsafe {
            core::arch::x86_64::_mm_lfence();
            let t = core::arch::x86_64::_rdtsc();
            core::arch::x86_64::_mm_lfence();
            t
        }
    }

    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    pub fn now() -> u64 {
        static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        let origin = *ORIGIN.get_or_init(std::time::Instant::now);
        origin.elapsed().as_nanos() as u64
    }

    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    pub fn ordered() -> u64 {
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        now()
    }
}

/// A point in time on `CLOCK_MONOTONIC`, in nanoseconds since the clock's origin (boot).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Deadline {
    ns: u64,
}

impl Deadline {
    /// The current time.
    pub fn now() -> Deadline {
        let t = clock_gettime(ClockId::Monotonic);
        Deadline {
            ns: (t.tv_sec as u64)
                .saturating_mul(1_000_000_000)
                .saturating_add(t.tv_nsec as u64),
        }
    }

    /// `d` from now.
    pub fn after(d: Duration) -> Deadline {
        Deadline::now().saturating_add(d)
    }

    /// This deadline moved later by `d` (saturating).
    pub fn saturating_add(self, d: Duration) -> Deadline {
        let d = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Deadline {
            ns: self.ns.saturating_add(d),
        }
    }

    /// Nanoseconds since the clock's origin.
    pub fn as_nanos(self) -> u64 {
        self.ns
    }

    /// A deadline from nanoseconds since the clock's origin (the inverse of [`as_nanos`]).
    ///
    /// [`as_nanos`]: Deadline::as_nanos
    pub fn from_nanos(ns: u64) -> Deadline {
        Deadline { ns }
    }

    /// Time left until the deadline, zero if it has passed.
    pub fn remaining(self) -> Duration {
        Duration::from_nanos(self.ns.saturating_sub(Deadline::now().ns))
    }

    /// Whether the deadline has passed.
    pub fn has_passed(self) -> bool {
        Deadline::now() >= self
    }

    pub(crate) fn timespec(self) -> Timespec {
        Timespec {
            tv_sec: (self.ns / 1_000_000_000) as i64,
            tv_nsec: (self.ns % 1_000_000_000) as i64,
        }
    }
}

/// A `std` [`Instant`](std::time::Instant) as a deadline on the same clock (`Instant` is
/// `CLOCK_MONOTONIC` on Linux), found from the time left until it: never earlier than the
/// instant, later by the nanoseconds between two clock reads; an instant in the past is now.
impl From<std::time::Instant> for Deadline {
    fn from(at: std::time::Instant) -> Deadline {
        match at.checked_duration_since(std::time::Instant::now()) {
            Some(left) => Deadline::after(left),
            None => Deadline::now(),
        }
    }
}

/// What the channels' `*_deadline` methods take: a [`Deadline`], a `std`
/// [`Instant`](std::time::Instant) (as crossbeam-channel's take), or an `Option<Deadline>`
/// (`None`: no deadline).
///
/// ```
/// use std::time::{Duration, Instant};
/// let (_tx, rx) = spindle_sync::mpmc::channel::<u32>(1);
/// assert!(rx.recv_deadline(Instant::now() + Duration::from_millis(1)).is_err());
/// assert!(rx.recv_deadline(spindle_sync::Deadline::now()).is_err());
/// ```
pub trait IntoDeadline {
    /// The deadline, `None` for none.
    fn into_deadline(self) -> Option<Deadline>;
}

impl IntoDeadline for Deadline {
    fn into_deadline(self) -> Option<Deadline> {
        Some(self)
    }
}

impl IntoDeadline for Option<Deadline> {
    fn into_deadline(self) -> Option<Deadline> {
        self
    }
}

impl IntoDeadline for std::time::Instant {
    fn into_deadline(self) -> Option<Deadline> {
        Some(self.into())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn deadlines_order_and_saturate() {
        let a = Deadline::now();
        let b = a.saturating_add(Duration::from_millis(5));
        assert!(b > a);
        assert_eq!(b.as_nanos() - a.as_nanos(), 5_000_000);
        assert_eq!(a.saturating_add(Duration::MAX).as_nanos(), u64::MAX);
        let ts = Deadline::from_nanos(3_000_000_123).timespec();
        assert_eq!((ts.tv_sec, ts.tv_nsec), (3, 123));
        assert!(Deadline::from_nanos(0).has_passed());
        assert_eq!(Deadline::from_nanos(0).remaining(), Duration::ZERO);
    }
}
