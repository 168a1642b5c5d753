//! Locks: a futex mutex, two spinlocks, and Spindle's own [`Mutex`].
//!
//! Every lock here implements [`lock_api::RawMutex`], so each has a `lock_api::Mutex<R, T>`
//! alias with RAII guards, `try_lock` and `MutexGuard::map`:
//!
//! | raw lock | alias | what it is |
//! |---|---|---|
//! | [`SpindleLock`] | [`Mutex<T>`] | Spindle's mutex: barging, bounded by a handoff to a waiter past one spin budget; waiters poll at a bounded total rate, yield only when oversubscribed, then futex-sleep |
//! | [`FutexMutex`] | [`FutexMutexT<T>`] | the classic 3-state futex mutex (what std does) |
//! | [`SpinLock`] | [`SpinMutex<T>`] | test-and-test-and-set, 16 `pause`s then `sched_yield` |
//! | [`TicketLock`] | [`TicketMutex<T>`] | FIFO ticket spinlock, same pause/yield policy |
//!
//! [`Condvar`] is the condition variable for Spindle's [`Mutex`], with parking_lot's API
//! (`wait`, `wait_for`, `wait_until`, `wait_while` and its timed forms, `notify_one`,
//! `notify_all`); a notify with no waiter makes no system call.
//!
//! Each module's header states its protocol: words, invariants, orderings, linearisation
//! points and, for the sleeping locks, why no wake-up is lost. Loom models of every lock are
//! in `loom_models.rs`; `tests/locks.rs` counts mutual-exclusion breaches on real threads.
//!
//! # Which lock when
//!
//! The lab's `locks` experiment runs T = cores and T = 4 × cores threads hammering one lock
//! and reports run duration, longest wait and longest idle time per lock, beside std's and
//! parking_lot's mutexes and two spinlocks that exist only for comparison; the figures per
//! machine are in `docs/results.md`, and `cargo run --release -- lab locks` measures yours.
//!
//! Spindle's [`Mutex`] (v2) is meant to be the default: the lab's guarantees are that at
//! T = cores and T = 4 × cores its runs take at most as long as std's, parking_lot's and the
//! futex mutex's, and its four longest waits and idle times are at most std's. Where each
//! holds, per machine, is in `docs/results.md` (not every machine there has measured v2; the
//! file says which version and which claims each run tested). Earlier runs of version 1 found
//! parking_lot's mutex the fastest sleeping lock on 2 vCPUs and the slowest on 16 cores, where
//! std's was fastest — which is why version 2 bounds the total poll rate instead of copying
//! either.
//!
//! - **[`SpinLock`]** was among the two fastest locks at T = 4 × cores on both machines, but
//!   its longest waits were longer than std's on one of them. Its `sched_yield` is what keeps it usable
//!   under oversubscription: the same spinlock without the yield leaves the lock idle for
//!   whole scheduler slices while a waiter spins on the CPU its holder needs. Use it for
//!   critical sections of a few instructions.
//! - **[`TicketLock`]**: never under oversubscription. FIFO hand-off waits for the next
//!   ticket's thread to be scheduled, so a run can take many times as long as with any other
//!   lock.

pub mod condvar;
mod futex_mutex;
mod mutex;
mod spin;
mod ticket;

#[cfg(all(test, loom))]
mod loom_models;

pub use condvar::{Condvar, WaitTimeoutResult};
pub use futex_mutex::FutexMutex;
pub use mutex::SpindleLock;
pub use spin::SpinLock;
pub use ticket::TicketLock;

#[cfg(not(loom))]
pub use futex_mutex::FutexMutexT;
#[cfg(not(loom))]
pub use mutex::{Mutex, MutexGuard};
#[cfg(not(loom))]
pub use spin::SpinMutex;
#[cfg(not(loom))]
pub use ticket::TicketMutex;

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

/// The improved spinlock's waiting policy: 16 `pause`s, then one `sched_yield`, repeat.
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
