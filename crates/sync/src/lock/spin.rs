//! [`SpinLock`]: test-and-test-and-set that pauses 16 times, then yields the CPU (the improved
//! `spinlock` of Malte Skarupke's "Measuring Mutexes, Spinlocks and how Bad the Linux Scheduler
//! Really is", 2020).
//!
//! # Protocol
//!
//! One word, `locked: AtomicBool` (`false` free, `true` held).
//!
//! - `try_lock`: `!locked.load(Relaxed) && !locked.swap(true, Acquire)` — read first so waiters
//!   share the cache line, then one `swap` (an `xchg`, cheaper than a CAS and enough here).
//! - `lock`: `try_lock` in a loop; between attempts [`Backoff`](super::Backoff): 16 `pause`s,
//!   then one `sched_yield`, then 16 `pause`s again. The yield is a hint to the *kernel*: on an
//!   oversubscribed CPU it lets a preempted holder (or another waiter) run instead of this
//!   thread burning the rest of its slice. That post found 16 a good period; we keep it.
//! - `unlock`: `store(false, Release)`.
//!
//! Invariant: at most one thread's `swap` has returned `false` since the last `store(false)`.
//!
//! Orderings: the `Acquire` swap that returns `false` reads from the previous `Release` store,
//! which orders the critical sections; the test load is only a hint (a stale value costs one
//! round or one failed swap, never a wrong answer).
//!
//! Linearisation points: `lock`/`try_lock` at the successful swap (a failed `try_lock` at its
//! load or swap), `unlock` at the store.

use super::Backoff;
use crate::primitives::{AtomicBool, Ordering::*};

/// Test-and-test-and-set spinlock that pauses 16 times, then calls `sched_yield`.
pub struct SpinLock {
    locked: AtomicBool,
}

/// A [`lock_api::Mutex`] over [`SpinLock`].
#[cfg(not(loom))]
pub type SpinMutex<T> = lock_api::Mutex<SpinLock, T>;

impl SpinLock {
    super::maybe_const_fn! {
        /// An unlocked lock.
        pub fn new() -> SpinLock {
            SpinLock {
                locked: AtomicBool::new(false),
            }
        }
    }

    /// Acquires the lock: pause ×16, yield, repeat.
    #[inline]
    pub fn lock(&self) {
        if !self.try_lock() {
            self.lock_slow();
        }
    }

    #[cold]
    #[inline(never)]
    fn lock_slow(&self) {
        let mut backoff = Backoff::new();
        loop {
            backoff.snooze();
            if self.try_lock() {
                return;
            }
        }
    }

    /// Acquires the lock if it is free.
    #[inline]
    pub fn try_lock(&self) -> bool {
        !self.locked.load(Relaxed) && !super::test_and_set(&self.locked)
    }

    /// Releases the lock.
    ///
    /// # Safety
    ///
    /// The caller holds the lock.
    #[inline]
    pub unsafe fn unlock(&self) {
        self.locked.store(false, Release);
    }

    /// Whether some thread holds the lock (a racy snapshot).
    #[inline]
    pub fn is_locked(&self) -> bool {
        self.locked.load(Relaxed)
    }
}

super::raw_mutex_impl!(SpinLock);
