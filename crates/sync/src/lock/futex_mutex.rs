//! [`FutexMutex`]: the classic three-state futex mutex (Drepper, "Futexes Are Tricky", mutex
//! 3), with a short spin before sleeping as Rust's std mutex does.
//!
//! # Protocol
//!
//! One 32-bit word, `state`, which is also the futex word:
//!
//! | value | meaning |
//! |---|---|
//! | 0 `UNLOCKED` | free |
//! | 1 `LOCKED` | held, and no thread has announced that it may be asleep |
//! | 2 `CONTENDED` | held, and some threads may be asleep in `futex_wait` |
//!
//! - `lock` fast path: `compare_exchange(0, 1, Acquire)`.
//! - `lock` slow path: spin up to [`SPIN`] rounds while the word reads 1 (a holder with no
//!   sleepers is probably about to leave); if it reads 0, try the fast-path CAS again. Then
//!   loop: `swap(2, Acquire)`; if it returned 0 we hold the lock (in state 2, conservatively:
//!   we cannot know whether other sleepers remain, so our unlock will wake one, possibly for
//!   nothing). Otherwise sleep with `futex_wait(state, 2)`, and after waking spin again and
//!   retry. A thread that once went to sleep always takes the lock with 2, never 1.
//! - `unlock`: `swap(0, Release)`; if it returned 2, `futex_wake(state, 1)`.
//!
//! Why no wake-up is lost: a thread sleeps only through `futex_wait(state, 2)`, which the
//! kernel turns into "queue me, then sleep only if `state` is still 2", atomically with respect
//! to `futex_wake` on the same word. Before waiting, the thread stored 2 itself (the `swap`)
//! while the lock was held. The holder's unlock therefore sees 2 (or a later holder's unlock
//! does, since every thread that acquires after a `swap(2)` keeps 2), and calls `futex_wake`
//! *after* storing 0: either the sleeper was already queued and is woken, or the kernel's
//! re-read sees 0 ≠ 2 and it does not sleep.
//!
//! Invariant: `state != 0` iff some thread holds the lock; if some thread is asleep (or about
//! to sleep) in `futex_wait`, `state` is 2 or the lock is free and a wake is on its way.
//!
//! Orderings: acquiring RMWs are `Acquire` and read from the releasing `swap(0, Release)` of
//! the previous holder, which orders critical sections. The spin loads are `Relaxed`: they
//! only choose when to try. The futex system call is a full barrier in the kernel, but the
//! argument above needs only the atomicity of its compare-and-block.
//!
//! Linearisation points: `lock` at the RMW that moves the word from 0, `unlock` at its `swap`,
//! `try_lock` at its CAS.

use crate::futex::Parking;
use crate::primitives::{spin_loop, AtomicU32, Ordering::*};

const UNLOCKED: u32 = 0;
const LOCKED: u32 = 1;
const CONTENDED: u32 = 2;

/// How many times the loom models reached the futex wait (they assert that it happened).
#[cfg(all(test, loom))]
pub(super) static MODEL_SLEEPS: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

/// Spin rounds before sleeping (std uses 100). Tiny under loom to keep the model small.
const SPIN: u32 = if cfg!(loom) { 2 } else { 100 };

/// The classic three-state futex mutex (0 free, 1 held, 2 held with possible sleepers).
pub struct FutexMutex {
    state: AtomicU32,
    parking: Parking,
}

/// A [`lock_api::Mutex`] over [`FutexMutex`].
#[cfg(not(loom))]
pub type FutexMutexT<T> = lock_api::Mutex<FutexMutex, T>;

impl FutexMutex {
    super::maybe_const_fn! {
        /// An unlocked mutex.
        pub fn new() -> FutexMutex {
            FutexMutex {
                state: AtomicU32::new(UNLOCKED),
                parking: Parking::new(),
            }
        }
    }

    /// Acquires the mutex, sleeping in the kernel when it stays held.
    #[inline]
    pub fn lock(&self) {
        if self
            .state
            .compare_exchange(UNLOCKED, LOCKED, Acquire, Relaxed)
            .is_err()
        {
            self.lock_contended();
        }
    }

    #[cold]
    #[inline(never)]
    fn lock_contended(&self) {
        let mut state = self.spin();
        if state == UNLOCKED {
            match self
                .state
                .compare_exchange(UNLOCKED, LOCKED, Acquire, Relaxed)
            {
                Ok(_) => return,
                Err(s) => state = s,
            }
        }
        loop {
            // Announce a (possible) sleeper. Skip the store if the word already says so.
            if state != CONTENDED && self.state.swap(CONTENDED, Acquire) == UNLOCKED {
                return;
            }
            #[cfg(all(test, loom))]
            MODEL_SLEEPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.parking.wait32(&self.state, CONTENDED, None);
            state = self.spin();
        }
    }

    /// Spins while the lock is held without sleepers; returns the last value read.
    fn spin(&self) -> u32 {
        let mut left = SPIN;
        loop {
            let state = self.state.load(Relaxed);
            if state != LOCKED || left == 0 {
                return state;
            }
            spin_loop();
            left -= 1;
        }
    }

    /// Acquires the mutex if it is free.
    #[inline]
    pub fn try_lock(&self) -> bool {
        self.state
            .compare_exchange(UNLOCKED, LOCKED, Acquire, Relaxed)
            .is_ok()
    }

    /// Releases the mutex, waking one sleeper if there may be one.
    ///
    /// # Safety
    ///
    /// The caller holds the mutex.
    #[inline]
    pub unsafe fn unlock(&self) {
        if self.state.swap(UNLOCKED, Release) == CONTENDED {
            self.wake();
        }
    }

    #[cold]
    #[inline(never)]
    fn wake(&self) {
        self.parking.wake32(&self.state, 1);
    }

    /// Whether some thread holds the mutex (a racy snapshot).
    #[inline]
    pub fn is_locked(&self) -> bool {
        self.state.load(Relaxed) != UNLOCKED
    }
}

super::raw_mutex_impl!(FutexMutex);
