//! [`SpindleLock`] (and [`Mutex<T>`]): Spindle's mutex.
//!
//! # Protocol
//!
//! One 32-bit word, `state`, which is also the futex word:
//!
//! ```text
//!   bit 0      LOCKED    some thread holds the lock
//!   bit 1      WOKEN     an unlocker has issued (or is about to issue) a futex_wake; cleared
//!                        by the next CAS of a woken thread or of any thread going to sleep
//!   bits 2..   SLEEPERS  threads registered as (possible) sleepers, counted in units of 4
//! ```
//!
//! Invariants: `SLEEPERS` counts exactly the threads that have registered in their current
//! `lock` call and not yet acquired (each registers at most once per call and leaves the count
//! with the CAS that takes the lock); a thread sleeps only in `futex_wait(state, v)` where `v`
//! has `LOCKED` set, `WOKEN` clear and counts the thread.
//!
//! - `lock` fast path: `compare_exchange(0, LOCKED, Acquire)`.
//! - `lock` slow path, one loop: read the word; if `LOCKED` is clear, take the lock with a CAS
//!   that sets `LOCKED` (and, for a thread that had registered, also subtracts its `SLEEPER`;
//!   for a thread that has returned from a wait, also clears `WOKEN`). Anyone may take a free
//!   lock — *barging*: the lock never waits for a particular thread to be scheduled, which is
//!   what keeps it from sitting idle while a woken thread is still on its way to a CPU. While
//!   the word says `LOCKED`, first spin [`SPIN`] rounds of `pause` + plain load, then yield the
//!   CPU [`YIELDS`] times (which lets a preempted holder run on an oversubscribed CPU), then
//!   register: one CAS from a value with `LOCKED` set that adds `SLEEPER` (first time only) and
//!   clears `WOKEN`, then `futex_wait(state, new)` on exactly the value that CAS wrote (or,
//!   when there was nothing to change — registered and `WOKEN` already clear — the value just
//!   read). After any return from the wait the thread spins again ([`SPIN_AFTER_WAKE`] rounds,
//!   no more yields) before it clears `WOKEN` and sleeps again the same way.
//! - `unlock`: `fetch_sub(LOCKED, Release)`. If the old value was exactly `LOCKED` (no
//!   sleepers, no wake pending) that is all — one locked instruction. Otherwise, on the value
//!   it left: wake only if there are sleepers, nobody re-took the lock meanwhile (its unlock
//!   will do it) and no wake is pending (`WOKEN` clear): CAS `WOKEN` in (re-reading on failure),
//!   then `futex_wake(state, 1)`.
//!
//! `WOKEN` is what avoids the wake storm of the three-state mutex: while a woken thread is on
//! its way, or spinning after its wake, unlocks make no system call at all. It is Go's
//! `sync.Mutex` `mutexWoken` idea on a futex word. It is cleared by the woken thread's next
//! CAS (acquire or sleep again), and also by *any* thread that goes to sleep: a sleeper must
//! not sleep on a value that carries `WOKEN`, or the word could come back to exactly that value
//! after the wake it refers to had been spent (`WOKEN` cleared by the woken thread, which took
//! the lock and left; set again by an unlock whose wake found nobody queued; the lock re-taken
//! and the count restored by a new sleeper), and the sleeper would sleep through the one wake
//! meant for it (a lost wake-up, found by reading the protocol: that interleaving needs about
//! four preemptions, more than the loom models explore). The price is at most one extra wake
//! per sleep that begins while a wake is pending.
//!
//! # Why no wake-up is lost
//!
//! Suppose an execution ends with threads asleep forever in `lock` and no other thread left to
//! run. Let `F` be the word's final value. Nobody holds the lock (a holder would run and
//! unlock), so `LOCKED` is clear in `F`, and the sleepers are counted in `F`.
//!
//! 1. `WOKEN` clear in `F`. Let `U` be the last unlock (its `fetch_sub` cleared `LOCKED` for the
//!    last time). Every sleeper registered before it (registration needs `LOCKED` set), and no
//!    CAS after it can change the word except `U`'s own (acquiring sets `LOCKED`; registering
//!    and clearing `WOKEN` need `LOCKED` set). So `U`'s `unlock_slow` saw `SLEEPERS > 0`,
//!    `LOCKED` and `WOKEN` clear, and set `WOKEN` — contradicting `F`.
//! 2. `WOKEN` set in `F`. Let `U` be the unlock whose CAS set it last, at time `t`; `U` calls
//!    `futex_wake` after `t`, and no CAS clears `WOKEN` after `t`. A sleeper's last wait
//!    compared the word with a value whose `WOKEN` is clear; after `t` the word always carries
//!    `WOKEN`, so every sleeper's last wait queued it before `t` (a later comparison would have
//!    failed, and the thread would have had to CAS again, clearing `WOKEN`). So `U`'s wake finds
//!    a non-empty queue and takes some thread out of it after `t`. That thread is in a `lock`
//!    call with its `woken` flag set and, after at most [`SPIN_AFTER_WAKE`] rounds, performs a
//!    successful CAS — acquiring or sleeping again — and both clear `WOKEN`: a contradiction.
//!
//! A spurious or early return from `futex_wait` is harmless: the thread re-checks the word and
//! behaves as woken. Clearing a `WOKEN` that was meant for another thread only permits an
//! extra wake; it never prevents one. The loom models check this argument with the futex
//! replaced by a compare-and-block model; a variant of `unlock` that never wakes makes the
//! three-thread models deadlock.
//!
//! # Orderings
//!
//! Every transition is an atomic RMW on the one word, so all of them are totally ordered
//! (modification order) whatever their ordering argument; the protocol above needs only that
//! and the kernel's compare-and-queue being atomic with respect to `futex_wake` on the word.
//! The CAS that sets `LOCKED` is `Acquire` and reads from the previous holder's `Release`
//! `fetch_sub`, or from a later RMW in its release sequence (every write to the word is an
//! RMW), which orders critical sections. Registration, `WOKEN` and the plain loads only decide
//! when to try or sleep: `Relaxed`.
//!
//! Linearisation points: `lock` and a successful `try_lock` at the CAS that sets `LOCKED`; a
//! failed `try_lock` at the load (or failed CAS) that saw `LOCKED`; `unlock` at its
//! `fetch_sub`.
//!
//! # Fairness
//!
//! None is promised: a barging thread can take the lock ahead of sleepers, so one thread's
//! wait is not bounded by the lock. What the lab measures instead is that the *lock* is not
//! left idle, and that the throughput stays at a spinlock's; see the module docs of
//! [`lock`](super).
//!
//! # Against the goal
//!
//! The goal, tested as two guarantees by the lab's `locks` experiment at T = 4 × cores: run
//! duration ≤ 1.0 × the best spinlock's, and longest idle time ≤ 1.0 × std's. Not met: on both
//! machines measured (`docs/results.md`) the spinlock's runs were shorter, and on the 16-core
//! one this lock's runs and idle times were also longer than std's. Structural limits:
//! the unlock must be a locked RMW (to see sleepers) where a spinlock's is a plain store, so
//! this lock cannot beat a spinlock on the uncontended path; a hand-off to long waiters
//! (parking_lot's and WTF::Lock's eventual fairness) has not been tried. Variants that were
//! tried and not kept (more yields after a wake-up, longer spins) are in the project history.

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

/// Spindle's mutex: barging, spin then yield then futex-sleep, and unlocks that
/// make no system call while a woken thread is on its way. See the module docs.
pub struct SpindleLock {
    state: AtomicU32,
    parking: Parking,
}

/// Spindle's mutex: a [`lock_api::Mutex`] over [`SpindleLock`].
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
        // from a wait in this call (then its acquiring CAS also clears WOKEN; every sleeping
        // CAS clears WOKEN anyway).
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
            // Register (once) and clear WOKEN, then sleep on what we wrote: a sleep value
            // never carries WOKEN (see "Why no wake-up is lost").
            let mut new = state & !WOKEN;
            if !registered {
                new += SLEEPER;
            }
            if new != state {
                if let Err(s) = self.state.compare_exchange(state, new, Relaxed, Relaxed) {
                    state = s;
                    continue;
                }
                registered = true;
            }
            #[cfg(all(test, loom))]
            MODEL_SLEEPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.parking.wait32(&self.state, new, None);
            // Woken, or the word changed, or a spurious return: in every case this thread may
            // be the one an unlocker's WOKEN refers to, so its next CAS clears WOKEN.
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
