//! [`TasLock`]: the seed's "terrible" test-and-set spinlock, kept as the lab's bad example.
//!
//! # Protocol
//!
//! One word, `locked: AtomicBool` (`false` free, `true` held).
//!
//! - `lock`: `swap(true, Acquire)` in a loop until it returns `false`. No `pause`, no read-only
//!   test first: every attempt is a read-modify-write that takes the cache line in the
//!   exclusive state, so waiters on other cores keep stealing the line from the holder and from
//!   each other, and to the CPU and the kernel they look like busy threads that must not be
//!   disturbed. That is the point of keeping it: the lab shows what this costs.
//! - `unlock`: `store(false, Release)`.
//!
//! Invariant: at most one thread has seen its `swap` return `false` since the last
//! `store(false)`, because `swap` is a single atomic read-modify-write on one location.
//!
//! Orderings: the `Acquire` swap that returns `false` reads from the previous holder's
//! `Release` store (or the initial value), so everything the previous holder wrote in its
//! critical section happens-before this holder's critical section. Failed swaps need no
//! ordering, but `swap` has one ordering for both outcomes; on x86 every locked instruction is
//! a full barrier anyway.
//!
//! Linearisation points: `lock` at the successful `swap`, `unlock` at the store, `try_lock` at
//! its single `swap`.

use crate::primitives::{AtomicBool, Ordering::*};

/// The seed's "terrible" test-and-set spinlock: `swap` in a tight loop, no `pause`.
///
/// Do not use it; it exists so the lab can measure it. See the module docs for the protocol.
pub struct TasLock {
    locked: AtomicBool,
}

/// A [`lock_api::Mutex`] over [`TasLock`].
#[cfg(not(loom))]
pub type TasMutex<T> = lock_api::Mutex<TasLock, T>;

impl TasLock {
    super::maybe_const_fn! {
        /// An unlocked lock.
        pub fn new() -> TasLock {
            TasLock {
                locked: AtomicBool::new(false),
            }
        }
    }

    /// Acquires the lock, spinning with `swap` until it succeeds.
    #[inline]
    pub fn lock(&self) {
        while super::test_and_set(&self.locked) {
            // Deliberately no `pause`: this is the terrible spinlock. Under loom this tells the
            // model checker the thread cannot progress alone; in a real build it is nothing.
            super::model_yield();
        }
    }

    /// Acquires the lock if it is free.
    #[inline]
    pub fn try_lock(&self) -> bool {
        !super::test_and_set(&self.locked)
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

super::raw_mutex_impl!(TasLock);
