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
//!   bit 2       HANDOFF   a waiter has claimed the next acquisition (see "Fairness"): a free
//!                         lock is then reserved for that waiter
//!   bits 3..=4  EPOCH     handoffs completed, modulo 4 (queued waiters watch it move)
//!   bits 5..=12 SPINNERS  threads awake in `lock` polling the word, in units of 32 (at most 255)
//!   bits 13..   SLEEPERS  threads registered as (possible) sleepers, in units of 8192 (at most
//!                         2^19 - 1 threads asleep on one lock)
//! ```
//!
//! Invariants: `SLEEPERS` counts exactly the threads that have registered in their current
//! `lock` call and not yet acquired; `SPINNERS` counts exactly the threads that have joined the
//! spinners and not yet left (each leaves with the CAS that takes the lock or registers it to
//! sleep); `HANDOFF` is set by a spinner's CAS from a value with `LOCKED` set (that spinner is
//! the *claimant*) and cleared by a CAS that takes the lock (the claimant's, or another
//! thread's that takes a reserved lock over) or by the claimant's CAS that registers it to
//! sleep; a thread sleeps only in `futex_wait(state, v)` where `v` has `LOCKED` set and
//! `WOKEN` clear and counts the thread among the sleepers.
//!
//! - `lock` fast path: `fetch_or(LOCKED, Acquire)` (`lock bts` on x86). If `LOCKED` was clear
//!   this thread holds the lock, whoever spins or sleeps; it then loads the word, and if
//!   `HANDOFF` is set — the free lock was reserved for a claimant — it *backs out*: it
//!   releases the lock as `unlock` does (below) and takes the slow path. A `compare_exchange(0,
//!   LOCKED)` instead fails whenever a thread spins or sleeps (their counts are in the word),
//!   so under contention a holder re-taking its lock paid two locked RMWs and a load where
//!   one RMW does (the lab's `locks` experiment measures the runs against std's and
//!   parking_lot's mutexes: `docs/results.md`).
//! - `lock` slow path, one loop. If `LOCKED` is clear — and `HANDOFF` too, unless this thread
//!   is the claimant or has seen the lock free and reserved for a whole spin budget (see
//!   "Fairness") — take the lock with a CAS that sets `LOCKED` and in the same write leaves the
//!   spinners and the sleepers (if counted there), clears `WOKEN` (if this thread has returned
//!   from a wait) and `HANDOFF`, and, for the claimant, moves `EPOCH`. Anyone may take a free,
//!   unclaimed lock — *barging*. While the word says `LOCKED` (or a claim reserves it): join
//!   the spinners (one CAS, which also clears `WOKEN` for a woken thread), then poll for at
//!   most one *spin budget* ([`SPIN_BUDGET_NS`]), longer while queued for a handoff; a
//!   spinner may claim the handoff (one CAS from a value with `LOCKED` set and `HANDOFF`
//!   clear). Between two polls, `spinners ×`
//!   [`POLL_SHARE`] × (this thread's measured cost of a poll) pass: spent in `pause` when the
//!   threads that want the lock (spinners, sleepers and the holder) fit on the CPUs, in
//!   `sched_yield` when they do not (an oversubscribed CPU may be the one the holder needs).
//!   Past the budget, register: one CAS from a value with `LOCKED` set that leaves the
//!   spinners, adds `SLEEPER` (first time only), clears `WOKEN` and gives up this thread's
//!   claim, then `futex_wait(state, new)` on exactly the value that CAS wrote. Nobody sleeps on
//!   a free lock: a free, reserved one is polled until its claimant takes it or it may be
//!   taken over. After any return from the wait the thread joins the spinners again with a
//!   fresh budget.
//! - `unlock`: `fetch_sub(LOCKED, Release)`. If the old value was exactly `LOCKED` (nobody
//!   spinning or sleeping) that is all — one locked instruction. Otherwise, on the value it
//!   left: wake only if there are sleepers, nobody re-took the lock meanwhile (its unlock will
//!   do it), no wake is pending (`WOKEN` clear) and *nobody is spinning* (a spinner will take
//!   the lock, and leaves the spinners — registering to sleep — only while some thread holds
//!   it, whose unlock then wakes) unless this thread owes a wake (see "Fairness"): CAS `WOKEN`
//!   in (re-reading on failure), then `futex_wake(state, 1)`.
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
//! - **Polling costs the holder a bounded share of its time, whatever the thread count and
//!   the machine.** A poll costs the holder about one cache-line round trip, and each thread
//!   measures what its polls cost (the load timed between two fenced TSC reads, less what the
//!   reads cost alone; a moving average over the polls that found the lock held and missed
//!   in this core's cache). Each spinner waits
//!   `spinners × POLL_SHARE × cost` between polls, so all of them together poll about once per
//!   `POLL_SHARE` round trips: the holder loses about `1 / POLL_SHARE` of its time, with 2
//!   threads or 16 on 16 CPUs, on a machine with a short round trip or a long one alike. The
//!   price: the spinners notice a release about `POLL_SHARE / 2` round trips after it on
//!   average, unless a thread barges in first (in a busy lock, one usually does). The
//!   rule holds oversubscribed too: there a spinner yields until its next poll is due instead
//!   of polling after every yield, which would take the line from the holder once per context
//!   switch of the other CPUs (parking_lot polls after every yield; the lab's `locks`
//!   experiment at T = 4 × cores measures the difference). Waiting is measured in TSC ticks,
//!   not in `pause`s, whose length differs between microarchitectures by more than 10 ×. One
//!   exception: a thread re-taking the lock after a [`Condvar`](super::Condvar) wait polls
//!   2, 4, 8, … round trips apart before the spacing reaches the bound, because the thread
//!   that woke it usually releases the lock a few instructions later.
//! - **Spinners yield only when the CPUs are oversubscribed**, judged from the word (threads
//!   that want the lock vs the CPUs this process may run on): on a machine with spare CPUs a
//!   yield is a wasted system call; on an oversubscribed one it hands the CPU to the preempted
//!   holder.
//! - **No wake while someone spins** (Go's `sync.Mutex` rule), and at most one wake in flight
//!   (`WOKEN`): unlocks make no system call while an awake thread is about to take the lock.
//! - **Sleep after one spin budget** ([`SPIN_BUDGET_NS`]), about one futex sleep-and-wake
//!   round trip: a thread that polls longer has spent more than the wake-up that polling
//!   would have saved it.
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
//! Assume a fair scheduler (every runnable thread eventually runs; under a real-time policy a
//! spinning waiter can keep a claimant of lower priority off its CPU, as with any spinning
//! lock). Every CAS in the slow path except the acquiring ones compares against a value with
//! `LOCKED` set, or, for joining the spinners, `HANDOFF`; `HANDOFF` is set only from a value
//! with `LOCKED` set; nobody sleeps on a free lock. Suppose an execution ends with threads
//! asleep forever in `lock` and no other thread left to run. Let `F` be the word's final
//! value. Nobody holds the lock (a holder would run and unlock), so `LOCKED` is clear in `F`;
//! nobody spins (a spinner is awake, and within its budget — or, queued, once handoffs stop
//! completing — acquires or registers to sleep; one facing a free, reserved lock takes it
//! within a budget), so `SPINNERS` is zero in `F`; the sleepers are counted in `F`.
//!
//! 1. `WOKEN` clear in `F`. Let `U` be the last unlock (its `fetch_sub` cleared `LOCKED` for
//!    the last time). After `U` no acquisition succeeds — neither a CAS nor the fast path's
//!    `fetch_or` (a later unlock would follow; a fast path that backs out unlocks too). Were
//!    `HANDOFF` set just after `U`, the thread that set it last would be awake in `lock` (a
//!    thread that sets the bit believes it holds the claim until it sees the bit cleared or
//!    clears it going to sleep, which it does only from a value with `LOCKED` set), and it —
//!    or a thread taking the reservation over within a budget — would take the free lock. So
//!    `HANDOFF` is clear after `U`, every CAS but an acquiring one then needs `LOCKED` set,
//!    and no RMW but `U`'s own CAS changes the word after `U`. So the value `U`'s
//!    `unlock_slow` read is `F` (or `F` without `WOKEN`): sleepers counted, `LOCKED`, `WOKEN`
//!    and `SPINNERS` clear — so `U` set `WOKEN`, contradicting `F`. (An unlocker that owes a
//!    wake, see "Fairness", wakes on a weaker condition; that only adds wakes.)
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
//! replaced by a compare-and-block model and the spin budget cut to one poll; under loom every
//! spinner claims at once and a reserved free lock is taken over at first sight, so the
//! models explore claims, handoffs and claims lost (the turn and queueing rules, which decide
//! only when to claim or sleep, have no clock under loom).
//!
//! # Fork
//!
//! A child forked while other threads were in `lock` inherits their counts (spinners,
//! sleepers, a claim) but not the threads. A claim is taken over within a spin budget, and
//! phantom sleepers only cost wakes that find nobody; phantom *spinners* keep every unlock
//! from waking a sleeper (a spinner is expected to take the lock), so in a child that uses
//! such a lock from several threads, a thread that goes to sleep can sleep for ever. (std's
//! three-state mutex has no such count.) In such a child, use the lock from one thread only,
//! or replace it with a new one; POSIX allows a multi-threaded process's child only
//! async-signal-safe calls until it execs anyway.
//!
//! # Orderings
//!
//! Every transition is an atomic RMW on the one word, so all of them are totally ordered
//! (modification order) whatever their ordering argument; the protocol above needs only that
//! and the kernel's compare-and-queue being atomic with respect to `futex_wake` on the word.
//! The RMW that sets `LOCKED` (the fast path's `fetch_or`, the slow path's CAS) is `Acquire`
//! and reads from the previous holder's `Release` `fetch_sub`, or from a later RMW in its
//! release sequence (every write to the word is an RMW), which orders critical sections.
//! Joining, registering, `WOKEN` and the plain loads only decide when to try or sleep:
//! `Relaxed`. The fast path's look for `HANDOFF` too: sequenced after its `fetch_or` on the
//! same word, that load reads the RMW's value or a later one (coherence), so a reservation
//! made before the `fetch_or` is seen; a claim made after it is one on a held lock, and
//! backing out of it only costs a release. (The load, rather than the `fetch_or`'s own
//! result, keeps the RMW a `lock bts`: using more of the result than `LOCKED` makes it a
//! `lock cmpxchg` loop.)
//!
//! Linearisation points: `lock` and a successful `try_lock` at the RMW that sets `LOCKED` (for
//! a fast path that backs out, at the later one of its slow path); a failed `try_lock` at the
//! load (or failed CAS) that saw `LOCKED` or another thread's `HANDOFF`; `unlock` at its
//! `fetch_sub`.
//!
//! # Fairness
//!
//! Barging is what makes a contended lock fast (the thread that just released it, whose
//! caches hold the data, takes it again without a context switch), and what lets one thread's
//! wait grow without bound: with as many threads as CPUs hammering one lock on a 16-core
//! machine, version 2 without a handoff finished the lab's runs well ahead of std's mutex
//! while its four longest waits were many times std's (`docs/results.md`, the 16-core
//! machine's column, measured before the handoff). So barging is bounded by time:
//!
//! - A spinner that has waited one spin budget, and has seen no handoff complete for a turn
//!   (below), *claims the handoff*: it sets `HANDOFF` in a word that says `LOCKED`. From then
//!   on a free lock is reserved for the claimant (the fast path backs out on the bit, the
//!   slow path and `try_lock` leave it); the claimant polls 2, 4, 8 … up to
//!   [`HANDOFF_POLL_SHARE`] round trips apart and takes the lock at the first poll after the
//!   release that finds it free (a thread backing out holds it for a few instructions, at
//!   most once per reservation and thread: it then waits in the slow path), clearing the bit
//!   and moving `EPOCH`. It gives the claim up when it goes to sleep,
//!   with a fresh budget spent, and loses it to a take-over (below).
//! - A reservation lasts about a spin budget: a spinner that has seen the lock free and
//!   reserved, with the same `EPOCH`, for a whole budget takes it over (clearing the bit), so
//!   a claimant off its CPU idles the lock for a budget (a spinner that sees a back-out's
//!   brief hold starts timing again, which adds at most a budget per thread that backs out),
//!   and a child forked while another thread held a claim (it inherits the claim, not the
//!   thread) can still take its lock (a multi-threaded child can still hang: see "Fork"
//!   below). A claimant that finds the bit gone is an ordinary waiter again. (The bit can be
//!   claimed anew by a third thread before the first claimant looks again, which then also
//!   believes it holds the claim: either may take the free lock, whoever does clears the bit,
//!   and the stale one's sleep clears it too; the other then finds it gone. That costs
//!   fairness, never exclusion, which rests on the RMWs that set `LOCKED` alone.) `try_lock` never takes a reservation over.
//! - Between two handoffs the lock is barged as before for about a *turn*: [`HANDOFF_TURN`] ×
//!   the handoff latency (claim to acquisition, a moving average measured by the claimants;
//!   never more than a spin budget; [`HANDOFF_TURN_OVERSUBSCRIBED`] ×, up to
//!   [`OVERSUBSCRIBED_TURN_BUDGETS`] budgets, when the threads that want the lock outnumber
//!   the CPUs): a spinner claims only when `EPOCH` has
//!   not moved for a turn since it first saw that value. So handoffs take a bounded share of the lock's time
//!   (a thread that has just started watching may see a fresh epoch late, so the turn is a
//!   lower bound only approximately), and consecutive holders keep their caches warm.
//! - While the threads that want the lock fit on the CPUs, waiters past one budget that saw
//!   `EPOCH` move within the last turn and budget are *queued*: handoffs are completing, so
//!   they stay awake for theirs instead of sleeping, and poll up to
//!   `POLL_SHARE / HANDOFF_POLL_SHARE` times more often the longer they have waited, so that
//!   the longest waiter usually claims next. When handoffs stop (one thread holds the lock
//!   for long), they sleep a turn and a budget later. Oversubscribed, nobody queues: a waiter
//!   kept awake takes CPU time from the holder (it yields, but every yield is a system call
//!   and a context switch), so waiters sleep after their budget and come back through the
//!   wakes the claimants owe (below).
//! - A claimant that acquires while threads sleep owes a wake: its next slow unlock wakes one
//!   sleeper even if threads spin (the one exception to "no wake while someone spins"), so
//!   sleepers join the queue instead of sleeping while spinners take every turn.
//!
//! The costs: the lock idles from each handed-off release to the claimant's next poll (longer,
//! up to a budget, when the claimant is off its CPU); while a claim stands the claimant's polls
//! cost the holder up to `1 / HANDOFF_POLL_SHARE` of its time, and urgent waiters' polls as
//! much again. No bound on a wait is promised; the lab's `locks` experiment measures the four
//! longest waits and idle times beside std's, and the run time beside std's, parking_lot's and
//! the futex mutex's, at T = cores and T = 4 × cores.

use crate::futex::Parking;
use crate::primitives::{spin_loop, yield_now, AtomicU32, Ordering::*};
#[cfg(not(loom))]
use crate::time::ticks;

const LOCKED: u32 = 1;
const WOKEN: u32 = 2;
const HANDOFF: u32 = 4;
const EPOCH_ONE: u32 = 8;
const EPOCH: u32 = 3 * EPOCH_ONE;
const SPINNER: u32 = 1 << 5;
const SPINNERS: u32 = 0xff * SPINNER;
const SLEEPER: u32 = 1 << 13;

/// How many times the loom models reached the futex wait (they assert that it happened).
#[cfg(all(test, loom))]
pub(super) static MODEL_SLEEPS: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);
/// How many times a claimant took the lock through the handoff in the loom models (they assert
/// that it happened).
#[cfg(all(test, loom))]
pub(super) static MODEL_HANDOFFS: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);
/// How many times the fast path backed out of a lock reserved before it came, in the loom
/// models.
#[cfg(all(test, loom))]
pub(super) static MODEL_BACK_OUTS: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

/// The spinners together poll the word about once per `POLL_SHARE` × the cost of one poll
/// (each waits `spinners × POLL_SHARE × cost` between polls). A poll that finds the line in
/// the holder's cache moves it, and the holder's next write moves it back: one cache-line
/// round trip of the holder's time per poll. So polling costs the holder about
/// `1 / POLL_SHARE` of its time, on any machine and at any thread count. The cost is measured,
/// not assumed: each thread times its own polls ([`PollCost`]).
#[cfg_attr(loom, allow(dead_code))]
const POLL_SHARE: u64 = 32;
/// How long a thread polls before it sleeps, and how long it waits before it may claim the
/// handoff (see "Fairness"): about the raw futex wake-up latency of the machines the lab has
/// measured (`docs/results.md`), past which waiting asleep costs the waiter no more than
/// polling would. A constant for now: a budget set to the latency the mutex measured on its
/// own wakes was tried, and in a full lab run on a 2-vCPU guest the Mutex's run time against
/// parking_lot's at T = cores drifted upwards as the run went on (more handoffs between two
/// threads, presumably from a budget that had shrunk; the learned value was not logged).
/// Also tried: a budget set once per process to the median of its first 15 wakes (stamped by
/// the unlocker, timed by the sleeper the kernel woke), never below this constant nor above
/// twice it. On a 2-vCPU Zen 3 guest whose idle futex wake-up is about twice this constant
/// (lab `rings`, `wake-futex`, in `docs/results.md`), the mutex's own wakes mostly took far
/// less than an idle one, so the budget never left this constant, and the change was dropped
/// (the stop note of 2026-11-28 has the samples).
#[cfg_attr(loom, allow(dead_code))]
const SPIN_BUDGET_NS: u64 = 20_000;

/// The claimant of the handoff polls at most this many round trips apart (its polls cost the
/// holder about `1 / HANDOFF_POLL_SHARE` of its time while the claim stands, usually one
/// critical section): after the release, the lock idles until the claimant's next poll.
#[cfg_attr(loom, allow(dead_code))]
const HANDOFF_POLL_SHARE: u64 = POLL_SHARE / 4;
/// A thread served by a handoff keeps the lock (barging allowed) for about this many times the
/// measured handoff latency before the next claim: a handoff leaves the lock idle from the
/// release to the claimant's next poll, so handoffs cost about `1 / (1 + HANDOFF_TURN)` of the
/// lock's time, and a thread waits about `(waiters - 1) × (1 + HANDOFF_TURN)` latencies past
/// one spin budget for its turn.
#[cfg_attr(loom, allow(dead_code))]
const HANDOFF_TURN: u64 = 4;
/// The turn when the threads that want the lock outnumber the CPUs, capped at
/// [`OVERSUBSCRIBED_TURN_BUDGETS`] spin budgets rather than one: a claimant may be off its
/// CPU when the lock is released, so a handoff costs more and varies more (its measured
/// latency includes the scheduler's delays), and each one served while threads sleep costs a
/// futex wake (see "Fairness"), while every waiter's wait is dominated by the scheduler's
/// time slices anyway. On a 2-vCPU guest at T = 4 × cores, capping it at one budget made the
/// lab's runs slower than parking_lot's.
#[cfg_attr(loom, allow(dead_code))]
const HANDOFF_TURN_OVERSUBSCRIBED: u64 = 16;
/// The longest oversubscribed turn, in spin budgets: for handoffs slowed by other reasons
/// than the lock's own threads — a holder or claimant preempted by other processes — where
/// the turn would otherwise follow the measured latency up to milliseconds, and every
/// waiter's wait with it.
#[cfg_attr(loom, allow(dead_code))]
const OVERSUBSCRIBED_TURN_BUDGETS: u32 = 8;

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

/// What one poll of a contended word costs this thread, learned from its own polls: a moving
/// average (each sample moves it by an eighth of the gap; the first sample is taken whole) of
/// how long a poll's load took, in [`ticks`] (the TSC on x86-64, nanoseconds elsewhere), less
/// what the two clock reads cost alone. Only misses teach it: a sample under
/// [`PollCost::HIT`] found the line in this core's cache (the holder has not written it since
/// the last poll, so that poll cost the holder nothing), and one over [`PollCost::CLAMP`] was
/// interrupted or preempted between its clock reads; both say nothing about a round trip and
/// are dropped. Per thread, so learning writes no shared line; a thread with no estimate yet
/// starts from the one some thread last published (a padded shared word, written by a thread
/// only when its estimate has moved by more than a quarter since it last published).
#[cfg(not(loom))]
struct PollCost;

/// One step of the moving averages here: `e` moved by an eighth of the gap to `sample`
/// (rounded up, so it can climb from small values), or `sample` itself when there is no
/// estimate yet (`e == 0`).
#[cfg(not(loom))]
fn average(e: u64, sample: u64) -> u64 {
    match e {
        0 => sample,
        e if sample >= e => e + (sample - e).div_ceil(8),
        e => e - (e - sample) / 8,
    }
}

/// The process's last published poll cost, on a cache line of its own.
#[cfg(not(loom))]
#[repr(align(128))]
struct SharedCost(std::sync::atomic::AtomicU64);

#[cfg(not(loom))]
impl PollCost {
    /// The shortest sample taken for a miss (in ticks): a load from this core's own cache
    /// takes a few cycles, a cache-line transfer between cores several dozen at least.
    const HIT: u64 = 24;
    /// The longest sample believed (in ticks): about one or two cache-line round trips
    /// across sockets.
    const CLAMP: u64 = 1024;

    /// This thread's estimate and the value it last published (0: none).
    fn with<R>(f: impl FnOnce(&std::cell::Cell<(u64, u64)>) -> R) -> R {
        std::thread_local!(static COST: std::cell::Cell<(u64, u64)> = const { std::cell::Cell::new((0, 0)) });
        COST.with(f)
    }

    fn shared() -> &'static std::sync::atomic::AtomicU64 {
        static SHARED: SharedCost = SharedCost(std::sync::atomic::AtomicU64::new(0));
        &SHARED.0
    }

    /// The current estimate (0 before any miss was timed in the process: poll at once).
    fn get() -> u64 {
        PollCost::with(|c| match c.get().0 {
            0 => PollCost::shared().load(std::sync::atomic::Ordering::Relaxed),
            e => e,
        })
    }

    /// What the two fenced clock reads around a poll cost by themselves (the least of a few
    /// empty pairs, measured once per process), taken off every sample.
    fn clock_cost() -> u64 {
        static COST: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(u64::MAX);
        match COST.load(std::sync::atomic::Ordering::Relaxed) {
            u64::MAX => {
                let least = (0..8)
                    .map(|_| {
                        let t0 = ticks::ordered();
                        ticks::ordered().saturating_sub(t0)
                    })
                    .min()
                    .unwrap_or(0);
                COST.store(least, std::sync::atomic::Ordering::Relaxed);
                least
            }
            c => c,
        }
    }

    fn learn(sample: u64) {
        let sample = sample.saturating_sub(PollCost::clock_cost());
        if !(PollCost::HIT..=PollCost::CLAMP).contains(&sample) {
            return;
        }
        PollCost::with(|c| {
            let (mine, published) = c.get();
            let e = match mine {
                0 => PollCost::shared().load(std::sync::atomic::Ordering::Relaxed),
                e => e,
            };
            let e = average(e, sample);
            // Publish for new threads when it moved by more than a quarter since this thread
            // last did: a write to a shared line, rare once the estimate has settled.
            if e.abs_diff(published) > published / 4 {
                PollCost::shared().store(e, std::sync::atomic::Ordering::Relaxed);
                c.set((e, e));
            } else {
                c.set((e, published));
            }
        })
    }
}

/// Sets this thread's "owes a wake" flag to `owe` and returns what it was: set when the
/// thread was served by the handoff while threads slept, consumed by its next slow unlock
/// (see "Fairness"). A hint: a guard sent to another thread, or a flag left by one lock and
/// consumed by another, costs one wake too few or one too many, which the protocol allows.
/// Under loom no thread owes a wake.
fn owe_wake(owe: bool) -> bool {
    #[cfg(not(loom))]
    {
        std::thread_local!(static OWED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) });
        OWED.try_with(|c| c.replace(owe)).unwrap_or(false)
    }
    #[cfg(loom)]
    {
        let _ = owe;
        false
    }
}

/// A waiter's clock for the handoff (see "Fairness"; under loom there is no clock: every
/// spinner may claim at once, and a reserved free lock may be taken over at once, so that the
/// models explore claims, handoffs and claims lost).
struct Waiting {
    /// When this thread first found the lock held in this `lock` call.
    #[cfg(not(loom))]
    since: std::time::Instant,
    /// The handoff epoch this thread last saw, and when it first saw it.
    #[cfg(not(loom))]
    epoch: Option<(u32, std::time::Instant)>,
    /// When this thread last saw the epoch move (a handoff completed).
    #[cfg(not(loom))]
    progress: Option<std::time::Instant>,
    /// The epoch with which this thread first saw the lock free but reserved for another
    /// thread's claim, and when.
    #[cfg(not(loom))]
    reserved: Option<(u32, std::time::Instant)>,
    /// When this thread claimed the handoff, if it holds the claim.
    #[cfg(not(loom))]
    claimed: Option<std::time::Instant>,
}

/// The process's handoff latency in nanoseconds: a moving average (an eighth per sample) of
/// the time from a claim to the claimant's acquisition, on a line of its own.
#[cfg(not(loom))]
static HANDOFF_NS: SharedCost = SharedCost(std::sync::atomic::AtomicU64::new(0));

/// What [`Waiting::look`] decided from one poll.
struct Look {
    /// This thread may claim the handoff.
    claim: bool,
    /// This thread must stay awake: handoffs are completing, the next may be its.
    queued: bool,
    /// Divides this thread's poll spacing: 1 to `POLL_SHARE / HANDOFF_POLL_SHARE`.
    urgency: u64,
}

impl Waiting {
    fn start() -> Waiting {
        Waiting {
            #[cfg(not(loom))]
            since: std::time::Instant::now(),
            #[cfg(not(loom))]
            epoch: None,
            #[cfg(not(loom))]
            progress: None,
            #[cfg(not(loom))]
            reserved: None,
            #[cfg(not(loom))]
            claimed: None,
        }
    }

    /// Decides from a poll that read `state` (see "Fairness"):
    /// - *claim*: the thread has waited a spin budget and the handoff epoch has not moved for
    ///   a turn ([`HANDOFF_TURN`] × the handoff latency) since this thread first saw it, so a
    ///   holder served by a handoff keeps the lock for at least about a turn;
    /// - *queued*: the threads that want the lock fit on the CPUs, and this one has waited a
    ///   spin budget and saw the epoch move within the last turn and budget — handoffs are
    ///   completing, so it stays awake for its own;
    /// - *urgency*: how many spin budgets it has waited, which divides its poll spacing, so
    ///   that the longest waiters poll most often and usually make the next claim.
    fn look(&mut self, state: u32) -> Look {
        #[cfg(not(loom))]
        {
            let now = std::time::Instant::now();
            let epoch = state & EPOCH;
            match self.epoch {
                Some((e, _)) if e == epoch => {}
                Some(_) => {
                    self.progress = Some(now);
                    self.epoch = Some((epoch, now));
                }
                None => self.epoch = Some((epoch, now)),
            }
            let oversubscribed = (state & SPINNERS) / SPINNER + state / SLEEPER + 1 > cpus();
            let turns = if oversubscribed {
                HANDOFF_TURN_OVERSUBSCRIBED
            } else {
                HANDOFF_TURN
            };
            let budget = std::time::Duration::from_nanos(SPIN_BUDGET_NS);
            let latency = HANDOFF_NS.0.load(std::sync::atomic::Ordering::Relaxed);
            // While the threads fit on the CPUs a turn never exceeds a spin budget: one slow
            // handoff must not keep the others from claiming for long. Oversubscribed, slow
            // handoffs are the rule, and each costs the holder a wake (see the constants).
            let cap = if oversubscribed {
                budget * OVERSUBSCRIBED_TURN_BUDGETS
            } else {
                budget
            };
            let turn = std::time::Duration::from_nanos(turns * latency).min(cap);
            let waited = now - self.since;
            let overdue = waited >= budget;
            let unmoved = self
                .epoch
                .map_or(std::time::Duration::ZERO, |(_, t)| now - t);
            let urgency = (waited.as_nanos() / budget.as_nanos().max(1)).max(1);
            Look {
                claim: overdue && unmoved >= turn,
                queued: !oversubscribed
                    && overdue
                    && self.progress.is_some_and(|p| now - p < turn + budget),
                urgency: urgency.min(u128::from(POLL_SHARE / HANDOFF_POLL_SHARE)) as u64,
            }
        }
        #[cfg(loom)]
        {
            let _ = state;
            Look {
                claim: true,
                queued: false,
                urgency: 1,
            }
        }
    }

    /// Whether this thread, which does not hold the claim, may take over a lock that `state`
    /// shows free but reserved: it has seen it so, with the same epoch (no handoff since), for
    /// a spin budget. The claimant polls at most [`HANDOFF_POLL_SHARE`] round trips apart, so
    /// it has then been off its CPU for that long — or no longer exists (a child process forked
    /// while another thread held a claim inherits the claim but not the thread).
    fn may_take_over(&mut self, state: u32) -> bool {
        #[cfg(not(loom))]
        {
            let now = std::time::Instant::now();
            match self.reserved {
                Some((e, t)) if e == state & EPOCH => {
                    now - t >= std::time::Duration::from_nanos(SPIN_BUDGET_NS)
                }
                _ => {
                    self.reserved = Some((state & EPOCH, now));
                    false
                }
            }
        }
        #[cfg(loom)]
        {
            let _ = state;
            true
        }
    }

    /// The word was seen held or unreserved: a reservation seen later is a new one, and is
    /// timed afresh.
    fn not_reserved(&mut self) {
        #[cfg(not(loom))]
        {
            self.reserved = None;
        }
    }

    fn claim(&mut self) {
        #[cfg(not(loom))]
        {
            self.claimed = Some(std::time::Instant::now());
        }
    }

    /// The claimant has acquired: learn the handoff latency.
    fn served(&self) {
        #[cfg(not(loom))]
        if let Some(t) = self.claimed {
            let sample = t.elapsed().as_nanos().min(u128::from(u32::MAX)) as u64;
            // A racy read-modify-write on purpose: a lost sample only slows the learning.
            let e = HANDOFF_NS.0.load(std::sync::atomic::Ordering::Relaxed);
            HANDOFF_NS.0.store(
                average(e, sample).max(1),
                std::sync::atomic::Ordering::Relaxed,
            );
        }
    }

    /// The claim is gone: given up to sleep, or taken over.
    fn unclaim(&mut self) {
        #[cfg(not(loom))]
        {
            self.claimed = None;
        }
    }
}

/// One thread's spinning in one `lock` call: a deadline and whether the last wait yielded
/// (under loom: one poll).
struct Spin {
    #[cfg(not(loom))]
    deadline: std::time::Instant,
    #[cfg(not(loom))]
    yielded: bool,
    /// The next poll's spacing is `2 << ramp` round trips (capped by the bound), and `ramp`
    /// grows by one per poll up to 16: it starts at 0 for a condition variable's re-lock (see
    /// `lock_after_wait`), at 16 otherwise (the bound from the first poll).
    #[cfg(not(loom))]
    ramp: u32,
    /// This thread holds the handoff claim: it polls at most [`HANDOFF_POLL_SHARE`] round
    /// trips apart, whatever the number of spinners.
    #[cfg(not(loom))]
    claimant: bool,
    #[cfg(loom)]
    polls: u32,
}

impl Spin {
    fn start(ramp: bool) -> Spin {
        #[cfg(loom)]
        let _ = ramp;
        Spin {
            #[cfg(not(loom))]
            deadline: std::time::Instant::now() + std::time::Duration::from_nanos(SPIN_BUDGET_NS),
            #[cfg(not(loom))]
            yielded: false,
            #[cfg(not(loom))]
            ramp: if ramp { 0 } else { 16 },
            #[cfg(not(loom))]
            claimant: false,
            #[cfg(loom)]
            polls: 1,
        }
    }

    /// This thread has just claimed the handoff: a fresh budget, and polls that start 2 round
    /// trips apart and ramp up to [`HANDOFF_POLL_SHARE`].
    fn claim(&mut self) {
        #[cfg(not(loom))]
        {
            *self = Spin::start(true);
            self.claimant = true;
        }
    }

    /// The claim was taken over: the usual poll spacing again.
    fn unclaim(&mut self) {
        #[cfg(not(loom))]
        {
            self.claimant = false;
        }
    }

    /// One poll of the word: under loom a load; otherwise a load timed into [`PollCost`],
    /// unless it follows a yield while some estimate exists already (a poll just after a
    /// context switch also pays for the caches and TLB the switch disturbed, which is not what
    /// the holder pays).
    #[inline]
    fn poll(&self, state: &AtomicU32) -> u32 {
        #[cfg(loom)]
        {
            state.load(Relaxed)
        }
        #[cfg(not(loom))]
        {
            if self.yielded && PollCost::get() != 0 {
                return state.load(Relaxed);
            }
            let t0 = ticks::ordered();
            let s = state.load(Relaxed);
            if s & LOCKED != 0 {
                // A free lock is taken at once: timing it would delay the CAS, and the lock is
                // often free only between the holder's unlock and its next lock.
                PollCost::learn(ticks::ordered().saturating_sub(t0));
            }
            s
        }
    }

    /// Waits until the next poll of a word that read `state`, or returns false when the budget
    /// is spent (never while `queued`: handoffs are completing and the next may be this
    /// thread's, or the lock is free and reserved for a claim, which is taken within a budget).
    fn pause(&mut self, state: u32, queued: bool, urgency: u64) -> bool {
        #[cfg(loom)]
        {
            let _ = (state, queued, urgency);
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
            if now >= self.deadline && !queued {
                return false;
            }
            let spinners = (state & SPINNERS) / SPINNER;
            let bound = if self.claimant {
                HANDOFF_POLL_SHARE
            } else {
                u64::from(spinners.max(1)) * POLL_SHARE / urgency
            };
            let spacing = (2u64 << self.ramp).min(bound);
            self.ramp = (self.ramp + 1).min(16);
            let wait = spacing * PollCost::get();
            let until = ticks::now().saturating_add(wait);
            let deadline = self.deadline;
            // Oversubscribed, the wait is spent giving the CPU away (the holder may be the
            // thread that needs it); otherwise pausing. Either way the next poll comes only
            // when it is due: a poll after every yield would pull the line to this CPU once per
            // context switch.
            let oversubscribed = spinners + state / SLEEPER + 1 > cpus();
            self.yielded = oversubscribed;
            loop {
                if oversubscribed {
                    yield_now();
                } else {
                    for _ in 0..4 {
                        spin_loop();
                    }
                }
                // Never wait past the budget: a spinner with many others (or on a machine with
                // slow round trips) polls at least once before it sleeps.
                if ticks::now() >= until || (!queued && std::time::Instant::now() >= deadline) {
                    return true;
                }
            }
        }
    }
}

/// Spindle's mutex: barging, until a waiter that has waited one spin budget claims the next
/// acquisition; waiters poll at a bounded total rate, yield only when the CPUs are
/// oversubscribed, then futex-sleep; unlocks make no system call while an awake thread is
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
        if !self.lock_fast() {
            self.lock_slow();
        }
    }

    /// The fast path: takes a free lock whoever spins or sleeps, unless a claimant holds its
    /// reservation (see "Protocol"). False when the slow path must run.
    #[inline(always)]
    fn lock_fast(&self) -> bool {
        let old = self.state.fetch_or(LOCKED, Acquire);
        if old & LOCKED != 0 {
            return false;
        }
        if self.state.load(Relaxed) & HANDOFF == 0 {
            return true;
        }
        // The models count the back-outs from a reservation that stood before the `fetch_or`
        // (the case the fast path exists to handle), not those from a claim made after it.
        #[cfg(all(test, loom))]
        if old & HANDOFF != 0 {
            MODEL_BACK_OUTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        self.back_out();
        false
    }

    /// The fast path took a lock reserved for a claimant (or a claim arrived just after it
    /// took the lock): releases it as `unlock` does.
    #[cold]
    #[inline(never)]
    fn back_out(&self) {
        // SAFETY: this thread's `fetch_or` has just set LOCKED: it holds the lock.
        unsafe { self.unlock() };
    }

    /// Acquires the lock after a condition variable's wait: the thread that woke it usually
    /// holds the lock for a few more instructions, so the first polls come sooner (2, 4, 8, …
    /// round trips apart) before the spacing reaches its bound. Only here: in a contended
    /// `lock`, faster first polls take the line from a holder that keeps the lock.
    #[inline]
    pub(crate) fn lock_after_wait(&self) {
        if !self.lock_fast() {
            self.lock_contended(true);
        }
    }

    #[cold]
    #[inline(never)]
    fn lock_slow(&self) {
        self.lock_contended(false)
    }

    #[inline(always)]
    fn lock_contended(&self, ramp: bool) {
        // Whether this thread is counted among the sleepers, among the spinners, whether it
        // has returned from a wait in this call (then each of its CASes also clears WOKEN), and
        // whether it holds the handoff claim.
        let (mut registered, mut spinning, mut woken, mut claimant) = (false, false, false, false);
        let mut spin: Option<Spin> = None;
        // Started when the thread first finds the lock held (no clock read before the first
        // attempt: a thread that backed out of a reserved lock comes here with it free).
        let mut waiting: Option<Waiting> = None;
        let mut state = self.state.load(Relaxed);
        loop {
            // The word no longer carries a claim while this thread thinks it holds one: another
            // thread took the lock over (see `may_take_over`). An ordinary waiter again.
            if claimant && state & HANDOFF == 0 {
                claimant = false;
                if let Some(w) = waiting.as_mut() {
                    w.unclaim();
                }
                if let Some(s) = spin.as_mut() {
                    s.unclaim();
                }
            }
            let (free, reserved) = (state & LOCKED == 0, state & HANDOFF != 0);
            if !(free && reserved) {
                if let Some(w) = waiting.as_mut() {
                    w.not_reserved();
                }
            }
            // A free lock is anyone's, unless it is reserved for the claimant of the handoff;
            // a reserved one is taken over after a spin budget (the claimant is off its CPU,
            // or gone).
            if free
                && (!reserved
                    || claimant
                    || waiting.as_mut().is_some_and(|w| w.may_take_over(state)))
            {
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
                if reserved {
                    new &= !HANDOFF;
                }
                if claimant {
                    // A handoff completed: the epoch moves (queued waiters watch it).
                    new = (new & !EPOCH) | ((new & EPOCH).wrapping_add(EPOCH_ONE) & EPOCH);
                }
                match self.state.compare_exchange(state, new, Acquire, Relaxed) {
                    Ok(_) => {
                        if let Some(w) = waiting.as_ref().filter(|_| claimant) {
                            w.served();
                            #[cfg(all(test, loom))]
                            MODEL_HANDOFFS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        if claimant && new >= SLEEPER {
                            // Served by the handoff while threads sleep: this thread's unlock
                            // wakes one even if others spin, so that sleepers join the queue.
                            owe_wake(true);
                        }
                        return;
                    }
                    Err(s) => {
                        state = s;
                        continue;
                    }
                }
            }
            // Join the spinners (unless 255 already spin: then sleep at once).
            if spin.is_none() {
                spin = Some(Spin::start(ramp));
                waiting.get_or_insert_with(Waiting::start);
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
            if let Some(spin) = spin.as_mut().filter(|_| spinning) {
                let waiting = waiting.as_mut().expect("started with the spin");
                let look = waiting.look(state);
                // Claim the handoff: the lock is held (a free, unreserved one was taken above)
                // and nobody claims it.
                if look.claim && !claimant && state & HANDOFF == 0 {
                    debug_assert!(state & LOCKED != 0);
                    let new = state | HANDOFF;
                    match self.state.compare_exchange(state, new, Relaxed, Relaxed) {
                        Ok(_) => {
                            claimant = true;
                            spin.claim();
                            waiting.claim();
                            state = new;
                        }
                        Err(s) => {
                            state = s;
                            continue;
                        }
                    }
                }
                // Never asleep on a free, reserved lock: it is taken within a budget.
                let queued = !claimant && (look.queued || state & LOCKED == 0);
                if spin.pause(state, queued, look.urgency) {
                    state = spin.poll(&self.state);
                    continue;
                }
            }
            if state & LOCKED == 0 {
                // Free but reserved for another thread's claim (only a thread that could not
                // join the spinners, 255 spinning already, gets here so): poll until the
                // claimant takes it or this thread may take it over, rather than sleep on a
                // value no unlock will change.
                debug_assert!(state & HANDOFF != 0 && !claimant);
                yield_now();
                state = self.state.load(Relaxed);
                continue;
            }
            // Leave the spinners, register (once), clear WOKEN and give up the handoff claim in
            // one CAS, then sleep on what it wrote: a sleep value says LOCKED and never carries
            // WOKEN (see "Why no wake-up is lost").
            let mut new = state & !WOKEN;
            if spinning {
                new -= SPINNER;
            }
            if !registered {
                new += SLEEPER;
            }
            if claimant {
                new &= !HANDOFF;
            }
            if new != state {
                if let Err(s) = self.state.compare_exchange(state, new, Relaxed, Relaxed) {
                    state = s;
                    continue;
                }
                registered = true;
                spinning = false;
                if claimant {
                    claimant = false;
                    if let Some(w) = waiting.as_mut() {
                        w.unclaim();
                    }
                }
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

    /// Acquires the lock if it is free (even if threads sleep on it: barging), unless it is
    /// reserved for a thread that claimed the handoff: then it fails although no thread holds
    /// the lock (and [`is_locked`](Self::is_locked) says false), as parking_lot's does during
    /// a fair unlock's handoff.
    #[inline]
    pub fn try_lock(&self) -> bool {
        let mut state = self.state.load(Relaxed);
        while state & (LOCKED | HANDOFF) == 0 {
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
        // Nothing to wake: leave the thread's flag (if set) for a later unlock, which at worst
        // wakes once more than needed. This path runs on every unlock while threads spin.
        if state < SLEEPER || state & (LOCKED | WOKEN) != 0 {
            return;
        }
        let owed = owe_wake(false);
        loop {
            if state < SLEEPER || state & (LOCKED | WOKEN) != 0 || (state & SPINNERS != 0 && !owed)
            {
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
