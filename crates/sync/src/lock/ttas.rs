//! [`TtasLock`]: test-and-test-and-set with `pause`, as AMD recommends (the seed's
//! `spinlock_amd`).
//!
//! # Protocol
//!
//! One word, `locked: AtomicBool` (`false` free, `true` held).
//!
//! - `lock`: read `locked` with a plain (`Relaxed`) load; only when it reads `false` try
//!   `compare_exchange_weak(false, true, Acquire, Relaxed)`. After each failed round, one `pause`
//!   (`spin_loop`). Reading first lets every waiter keep the line in the shared state, so the
//!   line moves only when the lock changes hands; `pause` tells the core that this is a spin
//!   loop (it yields pipeline resources to an SMT sibling and avoids the memory-order
//!   mis-speculation flush when the loop exits). It never tells the *kernel* anything: a waiter
//!   that shares a CPU with a preempted holder burns its whole time slice.
//! - `unlock`: `store(false, Release)`.
//!
//! Invariant: at most one thread's CAS has moved `locked` from `false` to `true` since the last
//! `store(false)`.
//!
//! Orderings: the successful `Acquire` CAS reads from the previous holder's `Release` store, so
//! the previous critical section happens-before the next. The test load is only a hint and
//! needs no ordering: a stale `false` makes the CAS fail, a stale `true` costs one more round.
//!
//! Linearisation points: `lock` and `try_lock` at the successful CAS (a failed `try_lock` at
//! its load or CAS), `unlock` at the store.

use crate::primitives::{spin_loop, AtomicBool, Ordering::*};

/// Test-and-test-and-set spinlock with `pause` (AMD's recommendation), never yielding.
pub struct TtasLock {
    locked: AtomicBool,
}

/// A [`lock_api::Mutex`] over [`TtasLock`].
#[cfg(not(loom))]
pub type TtasMutex<T> = lock_api::Mutex<TtasLock, T>;

impl TtasLock {
    super::maybe_const_fn! {
        /// An unlocked lock.
        pub fn new() -> TtasLock {
            TtasLock {
                locked: AtomicBool::new(false),
            }
        }
    }

    /// Acquires the lock, spinning with `pause`.
    #[inline]
    pub fn lock(&self) {
        loop {
            if self.try_lock() {
                return;
            }
            spin_loop();
        }
    }

    /// Acquires the lock if it is free.
    #[inline]
    pub fn try_lock(&self) -> bool {
        !self.locked.load(Relaxed)
            && self
                .locked
                .compare_exchange_weak(false, true, Acquire, Relaxed)
                .is_ok()
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

super::raw_mutex_impl!(TtasLock);
