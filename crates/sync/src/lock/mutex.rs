//! [`SpindleLock`] (and [`Mutex<T>`]): Spindle's recommended lock.
//!
//! # Protocol
//!
//! One 32-bit word, `state`, which is also the futex word:
//!
//! ```text
//!   bit 0      LOCKED    some thread holds the lock
//!   bit 1      WOKEN     an unlocker has issued a futex_wake that no waiter has yet answered
//!   bits 2..   SLEEPERS  threads registered as (possible) sleepers, counted in units of 4
//! ```
//!
//! - `lock` fast path: `compare_exchange(0, LOCKED, Acquire)`.
//! - `lock` slow path, one loop: read the word; if `LOCKED` is clear, take the lock with a CAS
//!   that sets `LOCKED` (and, for a thread that had registered, also subtracts its `SLEEPER`
//!   and clears `WOKEN` if it returned from a wait). Anyone may take a free lock — *barging*:
//!   the lock never waits for a particular thread to be scheduled, which is what keeps it from
//!   sitting idle while a woken thread is still on its way to a CPU. While the word says
//!   `LOCKED`, first spin [`SPIN`] rounds with `pause`, then yield the CPU [`YIELDS`] times
//!   (which lets a preempted holder run on an oversubscribed CPU), then register with a CAS
//!   (`+ SLEEPER` once, and clearing `WOKEN` after a wait) and `futex_wait(state, new)` on
//!   exactly the value that CAS wrote. After any return from the wait the thread spins again
//!   ([`SPIN_AFTER_WAKE`] rounds) before it re-registers.
//! - `unlock`: `fetch_sub(LOCKED, Release)`. If the old value was exactly `LOCKED` (no
//!   sleepers, no wake pending) that is all — one locked instruction, as in a spinlock.
//!   Otherwise wake only if there are sleepers, nobody re-took the lock meanwhile (its unlock
//!   will do it) and no wake is pending (`WOKEN` clear): CAS `WOKEN` in, then
//!   `futex_wake(state, 1)`.
//!
//! `WOKEN` is what avoids the wake storm of the three-state mutex: while a woken thread is on
//! its way, or spinning after its wake, unlocks make no system call at all. It is Go's
//! `sync.Mutex` `mutexWoken` idea on a futex word.
//!
//! # Why no wake-up is lost
//!
//! A thread sleeps only in `futex_wait(state, v)` where `v` is the value its own registration
//! CAS wrote (or read, when there was nothing to change): `v` has `LOCKED` set and counts the
//! thread. The kernel queues the thread and sleeps only if the word still equals `v`,
//! atomically with respect to `futex_wake`. So at the moment it sleeps the lock is held by
//! some thread H and the word counts a sleeper. Two cases:
//!
//! 1. `WOKEN` clear in `v`. Every change to the word after this moment happens after the
//!    thread is queued. H's unlock (or the unlock of whoever re-takes the lock after H, by
//!    induction) sees `SLEEPERS > 0`; it either finds `WOKEN` set (case 2) or sets it and calls
//!    `futex_wake`, which finds the queue non-empty and wakes someone.
//! 2. `WOKEN` set. An unlocker set it and called (or is about to call) `futex_wake`. Either
//!    that wake took a queued thread out of the kernel, or the queue was empty because every
//!    registered thread was between its registration and its wait — and such a thread's wait
//!    returns at once, since `WOKEN` was set after it registered. Either way some thread has
//!    returned from its wait; it treats itself as woken and its next CAS (acquire or
//!    re-register) clears `WOKEN`, putting us back in case 1 (or it holds the lock and its
//!    unlock will wake). Clearing a `WOKEN` that was meant for another thread only permits an
//!    extra wake; it never prevents one.
//!
//! The loom models check this argument with the futex replaced by a compare-and-block model.
//!
//! # Orderings
//!
//! Every transition is an atomic RMW on the one word, so all of them are totally ordered
//! (modification order) whatever their ordering argument; the protocol above needs only that.
//! The CAS that sets `LOCKED` is `Acquire` and reads from (or after, through the RMW release
//! sequence) the previous holder's `Release` `fetch_sub`, which orders critical sections.
//! Registration, `WOKEN` and the plain loads only decide when to try or sleep: `Relaxed`.
//!
//! Linearisation points: `lock`/`try_lock` at the CAS that sets `LOCKED`, `unlock` at its
//! `fetch_sub`.
//!
//! # Fairness
//!
//! None is promised: a barging thread can take the lock ahead of sleepers, so one thread's
//! wait is not bounded by the lock. What the lab measures instead is that the *lock* is not
//! left idle, and that the throughput stays at a spinlock's; see the module docs of
//! [`lock`](super).

use crate::futex::Parking;
use crate::primitives::{spin_loop, yield_now, AtomicU32, Ordering::*};

const LOCKED: u32 = 1;
const WOKEN: u32 = 2;
const SLEEPER: u32 = 4;

/// How many times the loom models reached the futex wait (they assert that it happened).
#[cfg(all(test, loom))]
pub(super) static MODEL_SLEEPS: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

/// Rounds of `pause` before yielding, on arrival.
const SPIN: u32 = if cfg!(loom) { 1 } else { 40 };
/// `sched_yield` calls before sleeping, on arrival.
const YIELDS: u32 = if cfg!(loom) { 1 } else { 2 };
/// Rounds of `pause` after returning from a futex wait, before sleeping again.
const SPIN_AFTER_WAKE: u32 = if cfg!(loom) { 1 } else { 40 };

/// Spindle's recommended lock: barging, spin then yield then futex-sleep, and unlocks that
/// make no system call while a woken thread is on its way. See the module docs.
pub struct SpindleLock {
    state: AtomicU32,
    parking: Parking,
}

/// Spindle's recommended mutex: a [`lock_api::Mutex`] over [`SpindleLock`].
#[cfg(not(loom))]
pub type Mutex<T> = lock_api::Mutex<SpindleLock, T>;
/// The guard of [`Mutex`].
#[cfg(not(loom))]
pub type MutexGuard<'a, T> = lock_api::MutexGuard<'a, SpindleLock, T>;

impl SpindleLock {
    super::maybe_const_fn! {
        /// An unlocked lock.
        pub fn new() -> SpindleLock {
            SpindleLock {
                state: AtomicU32::new(0),
                parking: Parking::new(),
            }
        }
    }

    /// Acquires the lock.
    #[inline]
    pub fn lock(&self) {
        if self
            .state
            .compare_exchange(0, LOCKED, Acquire, Relaxed)
            .is_err()
        {
            self.lock_slow();
        }
    }

    #[cold]
    #[inline(never)]
    fn lock_slow(&self) {
        // Whether this thread's SLEEPER is counted in the word, and whether it has returned
        // from a wait since its last CAS (so that it owes the word a clearing of WOKEN).
        let mut registered = false;
        let mut woken = false;
        // Spin rounds, then yield rounds, left before (re-)registering and sleeping.
        let mut spins = SPIN;
        let mut yields = YIELDS;
        let mut state = self.state.load(Relaxed);
        loop {
            if state & LOCKED == 0 {
                let mut new = state | LOCKED;
                if registered {
                    new -= SLEEPER;
                }
                if woken {
                    new &= !WOKEN;
                }
                match self.state.compare_exchange(state, new, Acquire, Relaxed) {
                    Ok(_) => return,
                    Err(s) => {
                        state = s;
                        continue;
                    }
                }
            }
            if spins > 0 {
                spins -= 1;
                spin_loop();
                state = self.state.load(Relaxed);
                continue;
            }
            if yields > 0 {
                yields -= 1;
                yield_now();
                state = self.state.load(Relaxed);
                continue;
            }
            // Register (once) and answer a wake (clear WOKEN), then sleep on what we wrote.
            let mut new = state;
            if !registered {
                new += SLEEPER;
            }
            if woken {
                new &= !WOKEN;
            }
            if new != state {
                if let Err(s) = self.state.compare_exchange(state, new, Relaxed, Relaxed) {
                    state = s;
                    continue;
                }
                // This CAS paid any WOKEN debt (`woken` is set again after the wait).
                registered = true;
            }
            #[cfg(all(test, loom))]
            MODEL_SLEEPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.parking.wait32(&self.state, new, None);
            // Woken, or the word changed, or a spurious return: in every case this thread may
            // be the one an unlocker's WOKEN refers to, so it owes a clearing of WOKEN.
            woken = true;
            spins = SPIN_AFTER_WAKE;
            state = self.state.load(Relaxed);
        }
    }

    /// Acquires the lock if it is free (even if threads sleep on it: barging).
    #[inline]
    pub fn try_lock(&self) -> bool {
        let mut state = self.state.load(Relaxed);
        while state & LOCKED == 0 {
            match self
                .state
                .compare_exchange_weak(state, state | LOCKED, Acquire, Relaxed)
            {
                Ok(_) => return true,
                Err(s) => state = s,
            }
        }
        false
    }

    /// Releases the lock; wakes one sleeper only when one is registered, nobody re-took the
    /// lock meanwhile, and no earlier wake is still pending.
    ///
    /// # Safety
    ///
    /// The caller holds the lock.
    #[inline]
    pub unsafe fn unlock(&self) {
        let old = self.state.fetch_sub(LOCKED, Release);
        if old != LOCKED {
            self.unlock_slow(old - LOCKED);
        }
    }

    #[cold]
    #[inline(never)]
    fn unlock_slow(&self, mut state: u32) {
        loop {
            if state < SLEEPER || state & (LOCKED | WOKEN) != 0 {
                return;
            }
            match self
                .state
                .compare_exchange(state, state | WOKEN, Relaxed, Relaxed)
            {
                Ok(_) => {
                    self.parking.wake32(&self.state, 1);
                    return;
                }
                Err(s) => state = s,
            }
        }
    }

    /// Whether some thread holds the lock (a racy snapshot).
    #[inline]
    pub fn is_locked(&self) -> bool {
        self.state.load(Relaxed) & LOCKED != 0
    }
}

super::raw_mutex_impl!(SpindleLock);
