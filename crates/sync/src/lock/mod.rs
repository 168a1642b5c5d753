//! Locks: spinlocks for the lab's comparisons, a futex mutex, and Spindle's recommended
//! [`Mutex`].
//!
//! Every lock here implements [`lock_api::RawMutex`], so each has a `lock_api::Mutex<R, T>`
//! alias with RAII guards, `try_lock` and `MutexGuard::map`:
//!
//! | raw lock | alias | what it is |
//! |---|---|---|
//! | [`SpindleLock`] | [`Mutex<T>`] | **the recommended lock**: barging, spin, yield, then futex sleep |
//! | [`FutexMutex`] | [`FutexMutexT<T>`] | the classic 3-state futex mutex (what std does) |
//! | [`SpinLock`] | [`SpinMutex<T>`] | test-and-test-and-set, 16 `pause`s then `sched_yield` |
//! | [`TicketLock`] | [`TicketMutex<T>`] | FIFO ticket spinlock, same pause/yield policy |
//! | [`TtasLock`] | [`TtasMutex<T>`] | test-and-test-and-set with `pause`, never yields |
//! | [`TasLock`] | [`TasMutex<T>`] | `swap` in a tight loop: the "terrible" spinlock |
//!
//! Each module's header states its protocol: words, invariants, orderings, linearisation
//! points and, for the sleeping locks, why no wake-up is lost. Loom models of every lock are
//! in `loom_models.rs`; `tests/locks.rs` counts mutual-exclusion breaches on real threads.
//!
//! # Which lock when
//!
//! Figures from one run of `spindle lab` (quick profile, 2026-11-21) on a 2-vCPU KVM guest
//! (AMD EPYC, Zen 5, Linux 6.18, HZ 250, TSC 2.6 GHz): T threads each loop 16 × 16384 times
//! over `lock; unlock` (no work inside), unpinned; "idle" is the time from an unlock to the
//! next acquisition. 43 runs per lock at T = 8, 10 at T = 2. Your machine will differ: run the
//! lab.
//!
//! | lock (T = 8 on 2 CPUs) | average run | four longest waits | four longest idle times |
//! |---|---|---|---|
//! | [`Mutex`] (Spindle) | 64.1 ms | 44.0, 43.5, 40.2, 40.1 ms | 226, 180, 167, 137 µs |
//! | `std::sync::Mutex` | 64.0 ms | 52.0, 47.9, 40.0, 40.0 ms | 278, 244, 175, 162 µs |
//! | `parking_lot::Mutex` | 63.9 ms | 52.0, 51.0, 48.0, 47.9 ms | 162, 157, 144, 133 µs |
//! | [`FutexMutex`] | 63.8 ms | 48.0, 48.0, 48.0, 47.9 ms | 387, 172, 157, 148 µs |
//! | [`SpinLock`] | 63.9 ms | 56.7, 55.9, 55.9, 53.7 ms | 260, 233, 177, 164 µs |
//! | [`TtasLock`] | 221 ms | 271, 254, 250, 238 ms | 56.0 ms × 4 |
//! | [`TasLock`] | 209 ms | 276, 262, 248, 240 ms | 56.0 ms × 4 |
//! | [`TicketLock`] | ≥ 500 ms (every run hit the 500 ms cap) | 16.1, 8.1, 8.1, 8.1 ms | 4.02 ms, 556, 526, 525 µs |
//!
//! - **Default: [`Mutex`].** Under 4× oversubscription every sane lock (Spindle, std,
//!   parking_lot, FutexMutex, SpinLock) takes the same time per run, within 0.5%: with no work
//!   inside, the run is bound by handing the lock from thread to thread, whichever lock it is.
//!   Spindle's longest waits were the shortest of the eight here; its longest idle times were
//!   between parking_lot's and std's. It is not *proven* better than std: the lab's claims
//!   "run ≤ 1.0 × SpinLock's" and "longest idle ≤ 1.0 × std's" were both *undecided* (median
//!   per-run ratios 1.001 and 1.03, each on the good side in 21 of 43 trials; with equal locks
//!   these claims are coin flips, and the lab says so instead of rounding). Choose it over std
//!   when you want `lock_api` guards, a `const` constructor and an unlock that makes no system
//!   call while a woken thread is already on its way.
//! - **[`FutexMutex`]** is the textbook three-state mutex, kept as a reference for what std
//!   does; it ran as fast.
//! - **[`SpinLock`]** only when threads never outnumber CPUs and critical sections are a few
//!   instructions: at T = 8 its waits were the longest of the sane locks (up to 56.7 ms). Its
//!   `sched_yield` is what keeps it usable at all: the same spinlock without the yield
//!   ([`TtasLock`]) and the terrible one ([`TasLock`]) took 3.3–3.5× longer and left the lock
//!   idle for 56 ms at a time (whole scheduler slices).
//! - **[`TicketLock`]**: never under oversubscription. FIFO hand-off waits for the next
//!   ticket's thread to be scheduled: every run at T = 8 hit the 500 ms cap (over 7.8× the
//!   others), and even at T = 2, 6 of 10 did.
//! - [`TtasLock`] and [`TasLock`] exist for the lab's comparison only.

mod futex_mutex;
mod mutex;
mod spin;
mod tas;
mod ticket;
mod ttas;

#[cfg(all(test, loom))]
mod loom_models;

pub use futex_mutex::FutexMutex;
pub use mutex::SpindleLock;
pub use spin::SpinLock;
pub use tas::TasLock;
pub use ticket::TicketLock;
pub use ttas::TtasLock;

#[cfg(not(loom))]
pub use futex_mutex::FutexMutexT;
#[cfg(not(loom))]
pub use mutex::{Mutex, MutexGuard};
#[cfg(not(loom))]
pub use spin::SpinMutex;
#[cfg(not(loom))]
pub use tas::TasMutex;
#[cfg(not(loom))]
pub use ticket::TicketMutex;
#[cfg(not(loom))]
pub use ttas::TtasMutex;

use crate::primitives::{spin_loop, yield_now};

/// A constructor that is `const` in a normal build and not under loom (whose atomics have no
/// `const fn new`).
macro_rules! maybe_const_fn {
    ($(#[$m:meta])* $vis:vis fn $name:ident() -> $ret:ty $body:block) => {
        #[cfg(not(loom))]
        $(#[$m])*
        #[allow(clippy::new_without_default)]
        $vis const fn $name() -> $ret $body
        #[cfg(loom)]
        $(#[$m])*
        #[allow(clippy::new_without_default)]
        $vis fn $name() -> $ret $body
    };
}
pub(crate) use maybe_const_fn;

/// `lock_api::RawMutex` (normal build) and `Default` from a lock's inherent `new`, `lock`,
/// `try_lock`, `unlock` and `is_locked`. Under loom there is no `RawMutex` (it needs a `const
/// INIT`); the models call the inherent methods.
macro_rules! raw_mutex_impl {
    ($t:ty) => {
        #[cfg(not(loom))]
        // SAFETY: `lock`/`try_lock` return only when the calling thread has exclusive ownership
        // (the protocol in the module docs), and `unlock` is only called by the owner, as the
        // trait requires of its callers.
        unsafe impl lock_api::RawMutex for $t {
            #[allow(clippy::declare_interior_mutable_const)]
            const INIT: Self = <$t>::new();
            type GuardMarker = lock_api::GuardSend;

            #[inline]
            fn lock(&self) {
                <$t>::lock(self)
            }

            #[inline]
            fn try_lock(&self) -> bool {
                <$t>::try_lock(self)
            }

            #[inline]
            unsafe fn unlock(&self) {
                // SAFETY: the trait's caller holds the lock.
                unsafe { <$t>::unlock(self) }
            }

            #[inline]
            fn is_locked(&self) -> bool {
                <$t>::is_locked(self)
            }
        }

        impl Default for $t {
            fn default() -> Self {
                <$t>::new()
            }
        }

        impl core::fmt::Debug for $t {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.debug_struct(stringify!($t))
                    .field("locked", &self.is_locked())
                    .finish()
            }
        }
    };
}
pub(crate) use raw_mutex_impl;

/// The seed's waiting policy: 16 `pause`s, then one `sched_yield`, repeat.
pub(crate) struct Backoff {
    pauses: u32,
}

impl Backoff {
    const PAUSES: u32 = 16;

    pub(crate) fn new() -> Backoff {
        Backoff { pauses: 0 }
    }

    /// Waits a little: a `pause`, or every 17th call a `sched_yield`.
    #[inline]
    pub(crate) fn snooze(&mut self) {
        if self.pauses < Self::PAUSES {
            self.pauses += 1;
            spin_loop();
        } else {
            self.pauses = 0;
            yield_now();
        }
    }
}

/// `flag.swap(true, Acquire)`: sets a lock flag and returns its previous value (`false`: the
/// caller now holds the lock).
///
/// Under loom this is the equivalent `compare_exchange(false, true, Acquire, Relaxed)`: on a
/// flag that only ever holds `false` or `true`, both return the same previous value and leave
/// the flag `true`; they differ only in that a failed `swap` still writes (`true` over `true`).
/// Our protocols never rely on that write (unlock is a plain `Release` store, so no release
/// sequence runs through a failed attempt), but loom counts every such write as progress and
/// never ends its exploration of a spinning `swap` loop.
#[inline(always)]
pub(crate) fn test_and_set(flag: &crate::primitives::AtomicBool) -> bool {
    use crate::primitives::Ordering::{Acquire, Relaxed};
    #[cfg(not(loom))]
    {
        let _ = Relaxed;
        flag.swap(true, Acquire)
    }
    #[cfg(loom)]
    {
        flag.compare_exchange(false, true, Acquire, Relaxed)
            .is_err()
    }
}

/// Nothing in a normal build; under loom, tells the model checker that a spinning thread
/// cannot progress alone (for the one lock that deliberately does not `pause`).
#[inline(always)]
pub(crate) fn model_yield() {
    #[cfg(loom)]
    loom::thread::yield_now();
}
