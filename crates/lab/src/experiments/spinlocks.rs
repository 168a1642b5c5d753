//! Two spinlocks that exist only to be measured against: the "terrible" test-and-set lock and
//! AMD's test-and-test-and-set lock without yield (Malte Skarupke's `terrible_spinlock` and
//! `spinlock_amd`). Nobody should use them, so they live in the lab, not in `spindle-sync`.
//!
//! # Protocol (both)
//!
//! One word, `locked: AtomicBool` (`false` free, `true` held); `unlock` is
//! `store(false, Release)`.
//!
//! - [`TasLock::lock`]: `swap(true, Acquire)` in a loop until it returns `false`. No `pause`, no
//!   read-only test first: every attempt takes the cache line exclusive, so waiters keep
//!   stealing it from the holder and from each other.
//! - [`TtasLock::lock`]: a `Relaxed` load, and only when it reads `false` a
//!   `compare_exchange_weak(false, true, Acquire, Relaxed)`; one `pause` per failed round.
//!   Waiters share the line until the lock changes hands, but never tell the kernel they wait,
//!   so a waiter sharing a CPU with a preempted holder burns its whole time slice.
//!
//! Invariant: at most one thread's successful `swap`/CAS has moved `locked` from `false` to
//! `true` since the last `store(false)` — each is a single atomic read-modify-write on one
//! location. Orderings: the successful `Acquire` RMW reads from the previous holder's `Release`
//! store, so the previous critical section happens-before the next; the test load is a hint
//! (a stale value costs a failed CAS or one more round). Linearisation points: the successful
//! RMW (`lock`, `try_lock`), the store (`unlock`).
//!
//! These protocols are checked by the mutual-exclusion stress test below (oversubscribed);
//! they have no loom model because the lab crate is not built under loom, and they are the
//! textbook spinlocks that `spindle-sync`'s loom-checked `SpinLock` refines.

use std::sync::atomic::{AtomicBool, Ordering::*};

use parking_lot::lock_api::{GuardSend, RawMutex};

/// `swap` in a tight loop, no `pause`: the "terrible" spinlock.
pub struct TasLock {
    locked: AtomicBool,
}

/// Test-and-test-and-set with `pause`, never yielding (AMD's recommendation).
pub struct TtasLock {
    locked: AtomicBool,
}

// SAFETY: `lock`/`try_lock` return only after the successful RMW of the protocol above, which
// gives the caller exclusive ownership until its `unlock`; `unlock` is only called by the owner,
// as the trait requires of its callers.
unsafe impl RawMutex for TasLock {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = TasLock {
        locked: AtomicBool::new(false),
    };
    type GuardMarker = GuardSend;

    fn lock(&self) {
        // Deliberately no `pause`.
        while self.locked.swap(true, Acquire) {}
    }

    fn try_lock(&self) -> bool {
        !self.locked.swap(true, Acquire)
    }

    unsafe fn unlock(&self) {
        self.locked.store(false, Release);
    }
}

// SAFETY: as for `TasLock`: the successful CAS gives exclusive ownership until `unlock`.
unsafe impl RawMutex for TtasLock {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = TtasLock {
        locked: AtomicBool::new(false),
    };
    type GuardMarker = GuardSend;

    fn lock(&self) {
        while !self.try_lock() {
            std::hint::spin_loop();
        }
    }

    fn try_lock(&self) -> bool {
        !self.locked.load(Relaxed)
            && self
                .locked
                .compare_exchange_weak(false, true, Acquire, Relaxed)
                .is_ok()
    }

    unsafe fn unlock(&self) {
        self.locked.store(false, Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::lock_api::Mutex;
    use std::sync::atomic::AtomicU64;

    /// 2 × CPUs threads increment a plain counter under the lock and check, inside the critical
    /// section, that nobody else is in it: breaches are counted, and must be zero.
    fn exclusion<R: RawMutex + Send + Sync>() {
        let threads = 2 * std::thread::available_parallelism().map_or(2, |n| n.get());
        let rounds = 200_000 / threads as u64;
        let lock = Mutex::<R, u64>::new(0);
        let inside = AtomicU64::new(0);
        let breaches = AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    for _ in 0..rounds {
                        let mut g = lock.lock();
                        if inside.fetch_add(1, Relaxed) != 0 {
                            breaches.fetch_add(1, Relaxed);
                        }
                        *g += 1;
                        inside.fetch_sub(1, Relaxed);
                    }
                });
            }
        });
        assert_eq!(breaches.into_inner(), 0);
        assert_eq!(lock.into_inner(), rounds * threads as u64);
    }

    #[test]
    fn tas_excludes() {
        exclusion::<TasLock>();
    }

    #[test]
    fn ttas_excludes() {
        exclusion::<TtasLock>();
    }

    #[test]
    fn try_lock_fails_while_held() {
        let l = TtasLock::INIT;
        assert!(l.try_lock());
        assert!(!l.try_lock());
        // SAFETY: this thread holds the lock.
        unsafe { l.unlock() };
        let t = TasLock::INIT;
        assert!(t.try_lock() && !t.try_lock());
    }
}
