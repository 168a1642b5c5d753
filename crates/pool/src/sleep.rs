//! How idle workers sleep, and how a push wakes exactly one of them.
//!
//! # Words
//!
//! - `sleepers`: one bit per worker, set while the worker has announced that it may sleep.
//!   Written by sleepers (announce, withdraw) and by wakers (claim); only read by a push.
//! - `state[i]`: worker `i`'s futex word, `ASLEEP` from before its announcement until a waker
//!   that claimed its bit stores `AWAKE` (or it withdraws).
//!
//! # Protocol
//!
//! ```text
//! sleep(i, ready):                         notify_one() (after any push):
//!   state[i] = ASLEEP                        light fence (a compiler fence on x86-64, and
//!                                            on AArch64 once membarrier is registered)
//!   sleepers |= bit(i)        (lock or)      m = sleepers                 (plain load)
//!   heavy fence (membarrier)                 if m ≠ 0: claim one bit by CAS; if claimed:
//!   if ready(): withdraw; return                 state[j] = AWAKE; futex_wake(state[j])
//!   while state[i] = ASLEEP: futex_wait
//!   withdraw (clear bit(i) if still set)
//! ```
//!
//! `ready()` is the sleeper's whole reason to stay awake: work in any deque, the injector or
//! its mailbox, the latch it waits for, or the pool shutting down.
//!
//! **Why no wake-up is lost.** A push stores its job (plain stores on x86-64: no `lock`ed
//! instruction, no fence), then loads `sleepers`. The sleeper's announcement is a locked RMW
//! followed by [`spindle_sync::fence::heavy`]: a process-wide barrier that makes every running
//! thread of the process execute a full fence before it returns (threads not running have
//! passed a context switch, which is one). Take the pushing thread's fence point: if its load
//! of `sleepers` comes after it, the load sees the announcement (which preceded the barrier) and
//! the push wakes a sleeper; if the load comes before it, so does the job's store (program
//! order, drained by the fence), and the sleeper's `ready()` after the barrier sees the job.
//! Either way the job does not sit while everybody sleeps. The waker that claims a bit (CAS) is
//! the only one to store `AWAKE` to that worker's word and wake it: one futex wake of one
//! sleeper per push, never a herd. A worker that withdraws finds its bit either still set (it
//! clears it: nobody will wake it) or claimed (a waker's `AWAKE` store and futex wake are on
//! their way; at worst they end its next sleep early, and a sleep that ends re-checks `ready()`
//! before it sleeps again — a spurious wake-up, never a lost one).
//!
//! **The last worker to sleep skips the barrier.** A worker whose announcing RMW finds every
//! other worker's bit already set, and that waits only for pool work (not for a latch that a
//! worker of another pool sets), sleeps without the heavy fence. Who could push without a
//! locked instruction? Only a worker of this pool, and every one of them is announced at that
//! RMW: before it pushes anything it must leave `sleep`, whose last step is its own locked RMW
//! on the same word (or a waker's claiming CAS cleared its bit first, and the worker still
//! does that RMW before running anything). That RMW comes after ours in the word's order, so
//! the worker's later load of `sleepers` (after its push) sees our bit — or a waker already
//! claimed us — and it wakes a sleeper. Every other push is a locked instruction before its
//! load of `sleepers` (the injector's and the mailboxes' counters, the shutdown flag): two
//! locked RMWs are ordered, so either it sees our bit or our `ready()` sees its job. An idle
//! pool thus sleeps without interrupting every CPU that runs one of the process's threads,
//! and its workers burn less CPU between wake-ups, which is also what makes the kernel run a
//! woken worker at once. Beyond 64 workers (two words) the barrier is always issued, and so
//! it is on every architecture but x86-64: the argument needs every `lock`ed RMW to be a full
//! barrier, and an Arm read-modify-write (`ldaxr`/`stlxr`, or an LSE atomic) lets a later
//! plain load complete before its store is visible.
//!
//! **Orderings in the C++ model.** `ASLEEP` is stored before the announcing RMW (Release in
//! `SeqCst`) and a waker's claiming CAS (Acquire) reads that RMW or a later one, so the waker's
//! `AWAKE` is later in the word's order than `ASLEEP`. Under loom both fences are `SeqCst`
//! fences (loom cannot model IPIs), which make the store-buffering pattern above correct too.

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};

use crate::primitives::{futex_wait, futex_wake, AtomicU32, AtomicU64, CachePadded};

const AWAKE: u32 = 0;
const ASLEEP: u32 = 1;

pub(crate) struct Sleep {
    sleepers: Box<[CachePadded<AtomicU64>]>,
    state: Box<[CachePadded<AtomicU32>]>,
    /// Every worker's bit, when all fit in one word (`None` beyond 64 workers).
    everyone: Option<u64>,
}

impl Sleep {
    pub(crate) fn new(workers: usize) -> Sleep {
        Sleep {
            sleepers: (0..workers.div_ceil(64))
                .map(|_| CachePadded(AtomicU64::new(0)))
                .collect(),
            state: (0..workers)
                .map(|_| CachePadded(AtomicU32::new(AWAKE)))
                .collect(),
            everyone: match workers {
                64 => Some(u64::MAX),
                n if n < 64 => Some((1u64 << n) - 1),
                _ => None,
            },
        }
    }

    /// Whether any worker has announced that it may sleep (a racy hint).
    #[inline]
    pub(crate) fn has_sleepers(&self) -> bool {
        spindle_sync::fence::light();
        self.sleepers.iter().any(|w| w.load(Relaxed) != 0)
    }

    /// Worker `i` has nothing to do: sleep until woken, unless `ready()` after announcing.
    /// Returns whether a waker claimed this worker (a push meant it to look for work).
    ///
    /// `only_pool_work`: `ready()` waits only for what this pool's workers and outside threads
    /// push (no latch that a worker of another pool sets); then a worker that announces
    /// itself last, every other worker's bit already set, skips the heavy fence (see the
    /// module documentation).
    pub(crate) fn sleep(&self, i: usize, only_pool_work: bool, ready: impl Fn() -> bool) -> bool {
        let (word, bit) = (&self.sleepers[i / 64], 1u64 << (i % 64));
        let state = &self.state[i];
        state.store(ASLEEP, Relaxed);
        let before = word.fetch_or(bit, SeqCst);
        // The skip rests on x86's `lock`ed instructions being full barriers (see "The last
        // worker to sleep skips the barrier"); elsewhere an atomic read-modify-write followed
        // by a load is no barrier (an Arm `stlxr` lets a later load pass it), so every sleep
        // takes the barrier.
        if !(cfg!(target_arch = "x86_64") && only_pool_work && self.everyone == Some(before | bit))
        {
            spindle_sync::fence::heavy();
        }
        if !ready() {
            while state.load(Acquire) == ASLEEP {
                futex_wait(state, ASLEEP);
            }
        }
        let claimed = word.fetch_and(!bit, SeqCst) & bit == 0;
        state.store(AWAKE, Relaxed);
        claimed
    }

    /// Wake one sleeper, if any announced itself; after a push. Returns whether one was woken.
    #[inline]
    pub(crate) fn notify_one(&self) -> bool {
        spindle_sync::fence::light();
        for (w, word) in self.sleepers.iter().enumerate() {
            let mut m = word.load(Relaxed);
            while m != 0 {
                let b = m.trailing_zeros() as usize;
                match word.compare_exchange_weak(m, m & !(1 << b), SeqCst, Relaxed) {
                    Ok(_) => {
                        self.wake(w * 64 + b);
                        return true;
                    }
                    Err(now) => m = now,
                }
            }
        }
        false
    }

    /// Wake worker `i` if it sleeps; after a push meant for it, or setting a latch it waits on.
    #[inline]
    pub(crate) fn notify_worker(&self, i: usize) {
        spindle_sync::fence::light();
        let (word, bit) = (&self.sleepers[i / 64], 1u64 << (i % 64));
        if word.load(Relaxed) & bit != 0 && word.fetch_and(!bit, SeqCst) & bit != 0 {
            self.wake(i);
        }
    }

    /// Wake every sleeper (shutdown).
    pub(crate) fn notify_all(&self) {
        for i in 0..self.state.len() {
            self.notify_worker(i);
        }
    }

    fn wake(&self, i: usize) {
        self.state[i].store(AWAKE, Release);
        futex_wake(&self.state[i]);
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use crate::primitives::AtomicUsize;
    use loom::sync::Arc;

    /// A push (a plain store of the job, then `notify_one`) against a worker going to sleep
    /// whose `ready()` looks for the job: the worker never sleeps through the push (under loom
    /// a futex wait is a yield, so a lost wake-up shows as a waiter that never leaves its loop,
    /// which loom reports).
    #[test]
    fn a_push_never_sleeps_through_a_sleeper() {
        loom::model(|| {
            let sleep = Arc::new(Sleep::new(2));
            let job = Arc::new(AtomicUsize::new(0));
            let worker = {
                let (sleep, job) = (sleep.clone(), job.clone());
                loom::thread::spawn(move || {
                    while job.load(Acquire) == 0 {
                        sleep.sleep(1, true, || job.load(Acquire) != 0);
                    }
                })
            };
            job.store(1, Release);
            sleep.notify_one();
            worker.join().unwrap();
        });
    }

    /// A latch set for a specific worker (`notify_worker`) while another sleeper exists.
    #[test]
    fn notify_worker_wakes_that_worker() {
        loom::model(|| {
            let sleep = Arc::new(Sleep::new(2));
            let latch = Arc::new(AtomicUsize::new(0));
            let worker = {
                let (sleep, latch) = (sleep.clone(), latch.clone());
                loom::thread::spawn(move || {
                    while latch.load(Acquire) == 0 {
                        sleep.sleep(0, false, || latch.load(Acquire) != 0);
                    }
                })
            };
            latch.store(1, Release);
            sleep.notify_worker(0);
            worker.join().unwrap();
        });
    }
}
