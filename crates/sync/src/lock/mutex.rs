//! [`SpindleLock`] (and [`Mutex<T>`]): Spindle's mutex (v2).
//!
//! # Protocol
//!
//! One 32-bit word, `state`, which is also the futex word:
//!
//! ```text
//!   bit 0       LOCKED    some thread holds the lock
//!   bit 1       WOKEN     an unlocker has issued (or is about to issue) a futex_wake; cleared
//!                         by the next CAS of a woken thread or of any thread going to sleep
//!   bits 2..=9  SPINNERS  threads awake in `lock` polling the word, in units of 4 (at most 255)
//!   bits 10..   SLEEPERS  threads registered as (possible) sleepers, in units of 1024
//! ```
//!
//! Invariants: `SLEEPERS` counts exactly the threads that have registered in their current
//! `lock` call and not yet acquired; `SPINNERS` counts exactly the threads that have joined the
//! spinners and not yet left (each leaves with the CAS that takes the lock or registers it to
//! sleep); a thread sleeps only in `futex_wait(state, v)` where `v` has `LOCKED` set, `WOKEN`
//! clear and counts the thread among the sleepers.
//!
//! - `lock` fast path: `compare_exchange(0, LOCKED, Acquire)`.
//! - `lock` slow path, one loop. If `LOCKED` is clear, take the lock with a CAS that sets
//!   `LOCKED` and in the same write leaves the spinners and the sleepers (if counted there)
//!   and clears `WOKEN` (if this thread has returned from a wait). Anyone may take a free lock —
//!   *barging*: the lock never waits for a particular thread to be scheduled. While the word
//!   says `LOCKED`: join the spinners (one CAS, which also clears `WOKEN` for a woken thread),
//!   then poll for at most [`SPIN_BUDGET_NS`]. Between two polls: when the threads that want
//!   the lock (spinners, sleepers and the holder) fit on the CPUs, `pause` for `spinners ×`
//!   [`POLL_NS`]; when they do not, one `sched_yield` (an oversubscribed CPU may be the one
//!   the holder needs, and the scheduler spaces the polls). Past the budget, register: one
//!   CAS from a value with `LOCKED` set that leaves the spinners, adds `SLEEPER` (first time
//!   only) and clears `WOKEN`, then `futex_wait(state, new)` on exactly the value that CAS
//!   wrote. After any return from the
//!   wait the thread joins the spinners again with a fresh budget.
//! - `unlock`: `fetch_sub(LOCKED, Release)`. If the old value was exactly `LOCKED` (nobody
//!   spinning or sleeping) that is all — one locked instruction. Otherwise, on the value it
//!   left: wake only if there are sleepers, nobody re-took the lock meanwhile (its unlock will
//!   do it), no wake is pending (`WOKEN` clear) and *nobody is spinning* (a spinner will take
//!   the lock, and leaves the spinners — registering to sleep — only while some thread holds
//!   it, whose unlock then wakes): CAS `WOKEN` in (re-reading on failure), then
//!   `futex_wake(state, 1)`.
//!
//! # Why it is fast (the design)
//!
//! The cost of a contended lock is the holder's: every poll of the word by a waiter takes the
//! line away from the holder, whose next `lock`/`unlock` then misses (a cache-line round trip:
//! `docs/results.md` gives it per machine), and every `futex_wake` is a system call the holder
//! pays. Version 1 let every waiter poll after each `pause` for a fixed count, so the poll
//! rate grew with the number of waiters (16 waiters on 16 cores can take the line from the
//! holder between any two of its operations), and a `pause` lasts a few cycles on some
//! microarchitectures and over a hundred on others, so the same count meant different times.
//!
//! - **The poll rate is bounded whatever the thread count.** Each spinner waits
//!   `spinners × POLL_NS` between polls, so all of them together poll the line about once per
//!   [`POLL_NS`], with 2 threads or 16 on 16 CPUs, and the holder loses its line at most that
//!   often (oversubscribed, the polls are spaced by the scheduler instead).
//!   Spinning is measured in nanoseconds (the TSC-backed monotonic clock), not in `pause`s.
//! - **Spinners yield only when the CPUs are oversubscribed**, judged from the word (threads
//!   that want the lock vs the CPUs this process may run on): on a machine with spare CPUs a
//!   yield is a wasted system call; on an oversubscribed one it hands the CPU to the preempted
//!   holder.
//! - **No wake while someone spins** (Go's `sync.Mutex` rule), and at most one wake in flight
//!   (`WOKEN`): unlocks make no system call while an awake thread is about to take the lock.
//! - **Sleep after [`SPIN_BUDGET_NS`]**, about one or two futex sleep-and-wake round trips:
//!   longer waits are cheaper asleep than polling.
//!
//! `WOKEN` is what avoids the wake storm of the three-state mutex (std's): while a woken
//! thread is on its way, unlocks make no system call. It is cleared by the woken thread's next
//! CAS (join the spinners, acquire or sleep again), and also by *any* thread that goes to
//! sleep: a sleeper must not sleep on a value that carries `WOKEN`, or the word could come back
//! to exactly that value after the wake it refers to had been spent, and the sleeper would
//! sleep through the one wake meant for it. The price is at most one extra wake per sleep
//! that begins while a wake is pending.
//!
//! # Why no wake-up is lost
//!
//! Every CAS in the slow path except the acquiring one compares against a value with `LOCKED`
//! set. Suppose an execution ends with threads asleep forever in `lock` and no other thread left
//! to run. Let `F` be the word's final value. Nobody holds the lock (a holder would run and
//! unlock), so `LOCKED` is clear in `F`; nobody spins (a spinner is awake and within its budget
//! acquires or registers to sleep), so `SPINNERS` is zero in `F`; the sleepers are counted in
//! `F`.
//!
//! 1. `WOKEN` clear in `F`. Let `U` be the last unlock (its `fetch_sub` cleared `LOCKED` for
//!    the last time). After it no CAS but `U`'s own can succeed: the acquiring CAS would need a
//!    later unlock, every other CAS needs `LOCKED` set. So the value `U`'s `unlock_slow` read
//!    is `F` (or `F` without `WOKEN`): sleepers counted, `LOCKED`, `WOKEN` and `SPINNERS`
//!    clear — so `U` set `WOKEN`, contradicting `F`.
//! 2. `WOKEN` set in `F`. Let `U` be the unlock whose CAS set it last, at time `t`; `U` calls
//!    `futex_wake` after `t`, and no CAS clears `WOKEN` after `t`. A sleeper's last wait
//!    compared the word with a value whose `WOKEN` is clear; after `t` the word always carries
//!    `WOKEN`, so every sleeper's last wait queued it before `t`. So `U`'s wake finds a
//!    non-empty queue and takes some thread out of it after `t`. That thread is in a `lock`
//!    call with its `woken` flag set, and its next successful CAS — joining the spinners,
//!    acquiring or sleeping again — clears `WOKEN`: a contradiction.
//!
//! A spurious or early return from `futex_wait` is harmless: the thread re-checks the word and
//! behaves as woken. Clearing a `WOKEN` that was meant for another thread only permits an
//! extra wake; it never prevents one. The loom models check this argument with the futex
//! replaced by a compare-and-block model and the spin budget cut to one poll.
//!
//! # Orderings
//!
//! Every transition is an atomic RMW on the one word, so all of them are totally ordered
//! (modification order) whatever their ordering argument; the protocol above needs only that
//! and the kernel's compare-and-queue being atomic with respect to `futex_wake` on the word.
//! The CAS that sets `LOCKED` is `Acquire` and reads from the previous holder's `Release`
//! `fetch_sub`, or from a later RMW in its release sequence (every write to the word is an
//! RMW), which orders critical sections. Joining, registering, `WOKEN` and the plain loads only
//! decide when to try or sleep: `Relaxed`.
//!
//! Linearisation points: `lock` and a successful `try_lock` at the CAS that sets `LOCKED`; a
//! failed `try_lock` at the load (or failed CAS) that saw `LOCKED`; `unlock` at its
//! `fetch_sub`.
//!
//! # Fairness
//!
//! None is promised: a barging thread can take the lock ahead of spinners and sleepers, so one
//! thread's wait is not bounded by the lock. The lab's `locks` experiment measures the longest
//! wait and the longest idle times beside std's, at T = cores and T = 4 × cores.

use crate::futex::Parking;
use crate::primitives::{spin_loop, yield_now, AtomicU32, Ordering::*};

const LOCKED: u32 = 1;
const WOKEN: u32 = 2;
const SPINNER: u32 = 4;
const SPINNERS: u32 = 0xff * SPINNER;
const SLEEPER: u32 = 1 << 10;

/// How many times the loom models reached the futex wait (they assert that it happened).
#[cfg(all(test, loom))]
pub(super) static MODEL_SLEEPS: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

/// The spinners together poll the word about once per this many nanoseconds (each waits
/// `spinners × POLL_NS` between polls): several cache-line round trips (the machine line of
/// each run in `docs/results.md` gives one), so polling costs the holder a bounded share of
/// its time whatever the thread count. A time, not a `pause` count, so it means the same on
/// every microarchitecture; it is not derived per machine yet.
#[cfg_attr(loom, allow(dead_code))]
const POLL_NS: u64 = 500;
/// How long a thread polls before it sleeps: about one or two futex sleep-and-wake round trips
/// (the `eventcount` experiment's raw futex floor, per machine in `docs/results.md`), past
/// which waiting asleep is the cheaper way.
#[cfg_attr(loom, allow(dead_code))]
const SPIN_BUDGET_NS: u64 = 20_000;

/// The CPUs this process may run on (cached; 0 until first asked).
#[cfg(not(loom))]
fn cpus() -> u32 {
    use std::sync::atomic::{AtomicU32 as StdU32, Ordering};
    static CPUS: StdU32 = StdU32::new(0);
    match CPUS.load(Ordering::Relaxed) {
        0 => {
            let n = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
            CPUS.store(n, Ordering::Relaxed);
            n
        }
        n => n,
    }
}

/// One thread's spinning in one `lock` call: a deadline (under loom: one poll).
struct Spin {
    #[cfg(not(loom))]
    deadline: std::time::Instant,
    #[cfg(loom)]
    polls: u32,
}

impl Spin {
    fn start() -> Spin {
        Spin {
            #[cfg(not(loom))]
            deadline: std::time::Instant::now() + std::time::Duration::from_nanos(SPIN_BUDGET_NS),
            #[cfg(loom)]
            polls: 1,
        }
    }

    /// Waits until the next poll of a word that read `state`, or returns false when the budget
    /// is spent.
    fn pause(&mut self, state: u32) -> bool {
        #[cfg(loom)]
        {
            let _ = state;
            if self.polls == 0 {
                return false;
            }
            self.polls -= 1;
            spin_loop();
            true
        }
        #[cfg(not(loom))]
        {
            let now = std::time::Instant::now();
            if now >= self.deadline {
                return false;
            }
            let spinners = (state & SPINNERS) / SPINNER;
            if spinners + state / SLEEPER + 1 > cpus() {
                // Oversubscribed: give the CPU away once; the scheduler spaces the polls.
                yield_now();
                return true;
            }
            let until = now + std::time::Duration::from_nanos(POLL_NS * u64::from(spinners.max(1)));
            while std::time::Instant::now() < until {
                for _ in 0..4 {
                    spin_loop();
                }
            }
            true
        }
    }
}

/// Spindle's mutex: barging; waiters poll at a bounded total rate, yield only when the CPUs
/// are oversubscribed, then futex-sleep; unlocks make no system call while an awake thread is
/// about to take the lock. See the module docs.
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
        // Whether this thread is counted among the sleepers, among the spinners, and whether it
        // has returned from a wait in this call (then each of its CASes also clears WOKEN).
        let (mut registered, mut spinning, mut woken) = (false, false, false);
        let mut spin = None;
        let mut state = self.state.load(Relaxed);
        loop {
            if state & LOCKED == 0 {
                let mut new = state | LOCKED;
                if registered {
                    new -= SLEEPER;
                }
                if spinning {
                    new -= SPINNER;
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
            // Join the spinners (unless 255 already spin: then sleep at once).
            if spin.is_none() {
                spin = Some(Spin::start());
                if state & SPINNERS != SPINNERS {
                    let mut new = state + SPINNER;
                    if woken {
                        new &= !WOKEN;
                    }
                    match self.state.compare_exchange(state, new, Relaxed, Relaxed) {
                        Ok(_) => {
                            spinning = true;
                            state = new;
                        }
                        Err(s) => {
                            spin = None;
                            state = s;
                            continue;
                        }
                    }
                }
            }
            if spinning && spin.as_mut().is_some_and(|s| s.pause(state)) {
                state = self.state.load(Relaxed);
                continue;
            }
            // Leave the spinners, register (once) and clear WOKEN in one CAS, then sleep on
            // what it wrote: a sleep value never carries WOKEN (see "Why no wake-up is lost").
            let mut new = state & !WOKEN;
            if spinning {
                new -= SPINNER;
            }
            if !registered {
                new += SLEEPER;
            }
            if new != state {
                if let Err(s) = self.state.compare_exchange(state, new, Relaxed, Relaxed) {
                    state = s;
                    continue;
                }
                registered = true;
                spinning = false;
            }
            #[cfg(all(test, loom))]
            MODEL_SLEEPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.parking.wait32(&self.state, new, None);
            // Woken, or the word changed, or a spurious return: in every case this thread may
            // be the one an unlocker's WOKEN refers to, so its next CAS clears WOKEN.
            woken = true;
            spin = None;
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
    /// lock meanwhile, nobody spins and no earlier wake is still pending.
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
            if state < SLEEPER || state & (LOCKED | WOKEN | SPINNERS) != 0 {
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
