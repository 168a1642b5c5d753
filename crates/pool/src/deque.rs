//! Each worker's deque of shared jobs: a Chase–Lev work-stealing deque of fixed capacity (a
//! push to a full deque fails and the caller puts the job elsewhere, so the ring never grows
//! and no old ring needs reclaiming).
//!
//! Only jobs that another worker may take go here: spawned tasks, and join halves a worker
//! promoted because a thief asked for work (see `registry`). A join that nobody asked about
//! never touches this deque.
//!
//! # Protocol (Chase and Lev 2005; the C11 orderings of Lê, Pop, Cohen and Zappa Nardelli 2013)
//!
//! Words: `bottom` (written by the owner only), `top` (advanced by a CAS, by the owner taking
//! the last job or by a thief), and the ring of slots; slot `i mod capacity` holds job `i`.
//! Jobs `[top, bottom)` are in the deque.
//!
//! - **push** (owner): `b = bottom; t = top (Acquire)` (or the owner's last look at `top`,
//!   which is never larger); full if `b − t = capacity`; write slot
//!   `b`; `bottom = b + 1` (Release: the slot's contents, and the job's closure behind it,
//!   happen-before a thief's Acquire load of `bottom` that shows it). On x86-64 that is two
//!   plain stores and a plain store: **no `lock`ed instruction and no fence**.
//! - **pop** (owner, LIFO): `bottom = b − 1`; a `SeqCst` fence; `t = top` (on x86-64 the store
//!   and the fence are one `SeqCst` swap, an `xchg`, and the load is `SeqCst`). If `t < b` the
//!   job at
//!   `b − 1` is the owner's with no race (a thief that read `bottom` before the decrement sees
//!   `top` already beyond it, and its CAS fails). If `t = b − 1` it is the last job: owner and
//!   thieves race with a CAS on `top`. The fence is what stops the owner's decrement of
//!   `bottom` and a thief's increment of `top` from both passing each other unseen (a
//!   store-buffering pattern: each writes one word and reads the other). In the C++ model:
//!   the swap precedes the owner's load of `top` in the single order of `SeqCst` operations;
//!   if that load missed a thief's CAS, the CAS (and the thief's fence after its Acquire load
//!   of it) come later in that order, so the thief's load of `bottom` after its fence sees the
//!   decrement.
//! - **steal** (any thread, FIFO): `t = top (Acquire)`; a `SeqCst` fence; `b = bottom
//!   (Acquire)`; if `t < b`, read slot `t` and CAS `top` from `t` to `t + 1`: the CAS is the
//!   linearisation point, and a failed CAS discards what was read.
//!
//! A thief may read a slot the owner is overwriting: the owner writes slot `t + capacity` only
//! after it saw `top > t`, so such a thief's CAS from `t` fails and its (torn) read is thrown
//! away. Slots are two atomic words so that the racy read is not a data race.
//!
//! Linearisation points: push, the Release store of `bottom`; pop, the load of `top` after the
//! fence (or the CAS for the last job); steal, the CAS (or the load of `bottom` when empty).

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};

use crate::job::JobRef;
use crate::primitives::{fence, AtomicIsize, AtomicUsize, CachePadded};

/// Slots per worker deque (16 bytes each, touched only as far as a deque ever fills): a scope
/// that spawns faster than the workers run its jobs fills it before its pushes go to the
/// pool's injector (a mutex).
pub(crate) const CAPACITY: usize = 1 << 16;

struct Slot {
    data: AtomicUsize,
    exec: AtomicUsize,
}

pub(crate) struct Deque {
    /// `bottom`, and the owner's last look at `top` (owner-only, beside `bottom` on the
    /// owner's line): a push re-reads `top` only when that look says the ring is full.
    bottom: CachePadded<(AtomicIsize, AtomicIsize)>,
    top: CachePadded<AtomicIsize>,
    slots: Box<[Slot]>,
}

/// `n` empty slots. Zeroed memory from the allocator: a large ring costs only the pages a
/// deque ever reaches (the allocator maps fresh zero pages for it).
#[cfg(not(loom))]
fn zeroed_slots(n: usize) -> Box<[Slot]> {
    let layout = std::alloc::Layout::array::<Slot>(n).expect("deque capacity");
    // SAFETY: the layout is non-zero-sized (n ≥ 1, as a power of two); all-zero bytes are a
    // valid `AtomicUsize`, so the slice is initialised; the Box frees it with the same layout.
    unsafe {
        let p = std::alloc::alloc_zeroed(layout).cast::<Slot>();
        if p.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, n))
    }
}

/// Under loom, whose atomics are not plain memory.
#[cfg(loom)]
fn zeroed_slots(n: usize) -> Box<[Slot]> {
    (0..n)
        .map(|_| Slot {
            data: AtomicUsize::new(0),
            exec: AtomicUsize::new(0),
        })
        .collect()
}

/// What a steal found.
#[derive(Debug)]
pub(crate) enum Steal {
    Empty,
    /// Lost a race with the owner or another thief: try again.
    Retry,
    Success(JobRef),
}

impl Deque {
    pub(crate) fn new() -> Deque {
        Deque::with_capacity(CAPACITY)
    }

    pub(crate) fn with_capacity(capacity: usize) -> Deque {
        assert!(capacity.is_power_of_two());
        Deque {
            bottom: CachePadded((AtomicIsize::new(0), AtomicIsize::new(0))),
            top: CachePadded(AtomicIsize::new(0)),
            slots: zeroed_slots(capacity),
        }
    }

    #[inline]
    fn bottom(&self) -> &AtomicIsize {
        &self.bottom.0 .0
    }

    #[inline]
    fn slot(&self, i: isize) -> &Slot {
        &self.slots[i as usize & (self.slots.len() - 1)]
    }

    /// Jobs in the deque now, as a racy estimate (never negative).
    #[inline]
    pub(crate) fn len(&self) -> usize {
        let b = self.bottom().load(Relaxed);
        let t = self.top.load(Relaxed);
        b.saturating_sub(t).max(0) as usize
    }

    /// Push a job; the owner only. Gives the job back if the deque is full.
    #[inline]
    pub(crate) fn push(&self, job: JobRef) -> Result<(), JobRef> {
        let (bottom, seen_top) = &*self.bottom;
        let b = bottom.load(Relaxed);
        // A stale `top` is smaller than the real one, so it can only make the ring look
        // fuller: every slot it calls free is free (its job was taken by a CAS the Acquire
        // load that cached it saw). Reading `top` on every push would miss the cache each time
        // a thief has stolen since.
        if b - seen_top.load(Relaxed) >= self.slots.len() as isize {
            let t = self.top.load(Acquire);
            seen_top.store(t, Relaxed);
            if b - t >= self.slots.len() as isize {
                return Err(job);
            }
        }
        let (data, exec) = job.into_words();
        let s = self.slot(b);
        s.data.store(data, Relaxed);
        s.exec.store(exec, Relaxed);
        bottom.store(b + 1, Release);
        Ok(())
    }

    /// Take the newest job; the owner only.
    #[inline]
    pub(crate) fn pop(&self) -> Option<JobRef> {
        let b = self.bottom().load(Relaxed) - 1;
        let t = self.publish_then_load_top(b);
        if t > b {
            self.bottom().store(b + 1, Relaxed);
            return None;
        }
        let s = self.slot(b);
        let words = (s.data.load(Relaxed), s.exec.load(Relaxed));
        if t == b {
            let won = self.top.compare_exchange(t, t + 1, SeqCst, Relaxed).is_ok();
            self.bottom().store(b + 1, Relaxed);
            if !won {
                return None;
            }
        }
        // SAFETY: the words were written by `push` from a JobRef, and this pop owns job `b`.
        Some(unsafe { JobRef::from_words(words) })
    }

    /// `bottom = b`, a full fence, then `top`: the store-buffering fence of `pop`. On x86-64 a
    /// `SeqCst` swap (one `xchg`, a full barrier, cheaper than the `mfence` a fence compiles
    /// to) and a `SeqCst` load; elsewhere, and under loom (which models `SeqCst` fences
    /// exactly but `SeqCst` accesses only as acquire/release, so it cannot check the swap
    /// form), a store, a `SeqCst` fence and a load.
    #[inline(always)]
    fn publish_then_load_top(&self, b: isize) -> isize {
        #[cfg(all(target_arch = "x86_64", not(loom)))]
        {
            self.bottom().swap(b, SeqCst);
            self.top.load(SeqCst)
        }
        #[cfg(not(all(target_arch = "x86_64", not(loom))))]
        {
            self.bottom().store(b, Relaxed);
            fence(SeqCst);
            self.top.load(Relaxed)
        }
    }

    /// Take the oldest job; any thread.
    #[inline]
    pub(crate) fn steal(&self) -> Steal {
        let t = self.top.load(Acquire);
        fence(SeqCst);
        let b = self.bottom().load(Acquire);
        if t >= b {
            return Steal::Empty;
        }
        let s = self.slot(t);
        let words = (s.data.load(Relaxed), s.exec.load(Relaxed));
        if self
            .top
            .compare_exchange(t, t + 1, SeqCst, Relaxed)
            .is_err()
        {
            return Steal::Retry;
        }
        // SAFETY: the CAS made job `t` ours, so the slot held job `t` as pushed (the owner
        // overwrites it only once `top` has passed `t`).
        Steal::Success(unsafe { JobRef::from_words(words) })
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::sync::Arc;

    fn job(n: usize) -> JobRef {
        // SAFETY: never executed; the words only identify the job in the model.
        unsafe { JobRef::from_words((n, n)) }
    }

    /// Owner pushes two jobs and pops until empty while a thief steals until empty: every job
    /// is taken exactly once (the race for the last job included), none is lost. (Without the
    /// fence in `pop`, the thief's second steal and the owner's pop both take job 2.)
    #[test]
    fn pop_and_steal_take_each_job_once() {
        loom::model(|| {
            let d = Arc::new(Deque::with_capacity(2));
            d.push(job(1)).unwrap();
            d.push(job(2)).unwrap();
            let thief = {
                let d = d.clone();
                loom::thread::spawn(move || {
                    let mut got = Vec::new();
                    while got.len() < 2 {
                        match d.steal() {
                            Steal::Success(j) => got.push(j.into_words().0),
                            Steal::Empty => break,
                            Steal::Retry => loom::thread::yield_now(),
                        }
                    }
                    got
                })
            };
            let mut mine = Vec::new();
            while let Some(j) = d.pop() {
                mine.push(j.into_words().0);
            }
            let stolen = thief.join().unwrap();
            let mut all = mine.clone();
            all.extend(stolen.iter().copied());
            all.sort_unstable();
            assert_eq!(all, vec![1, 2], "owner took {mine:?}, thief {stolen:?}");
        });
    }

    /// A push after a concurrent steal emptied the deque reuses the slot: the thief never
    /// returns the new job twice or a torn one.
    #[test]
    fn push_over_a_stolen_slot() {
        loom::model(|| {
            let d = Arc::new(Deque::with_capacity(1));
            d.push(job(1)).unwrap();
            let thief = {
                let d = d.clone();
                loom::thread::spawn(move || {
                    let mut got = Vec::new();
                    for _ in 0..2 {
                        if let Steal::Success(j) = d.steal() {
                            got.push(j.into_words());
                        }
                    }
                    got
                })
            };
            let mut mine = Vec::new();
            match d.push(job(2)) {
                Ok(()) => {}
                Err(j) => mine.push(j.into_words()), // full: kept by the owner
            }
            while let Some(j) = d.pop() {
                mine.push(j.into_words());
            }
            let got = thief.join().unwrap();
            let mut all: Vec<_> = mine.iter().chain(got.iter()).copied().collect();
            all.sort_unstable();
            assert_eq!(all, vec![(1, 1), (2, 2)], "owner {mine:?}, thief {got:?}");
        });
    }
}
