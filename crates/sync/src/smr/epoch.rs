//! Epoch-based reclamation with fence-free readers.
//!
//! ```
//! # #[cfg(not(loom))] {
//! use std::sync::atomic::{AtomicPtr, Ordering::*};
//! use spindle_sync::smr::epoch;
//!
//! let shared = AtomicPtr::new(Box::into_raw(Box::new(1u64)));
//! {
//!     let guard = epoch::pin();                   // readers: pin, load, dereference
//!     // SAFETY: `shared` always holds a live Box, retired only through `defer_destroy`.
//!     assert_eq!(unsafe { *shared.load(Acquire) }, 1);
//! }
//! let guard = epoch::pin();                       // a writer: unlink, then retire
//! let old = shared.swap(Box::into_raw(Box::new(2u64)), AcqRel);
//! // SAFETY: `old` is unlinked and came from a Box; it is retired once.
//! unsafe { guard.defer_destroy(old) };
//! # drop(guard);
//! # unsafe { drop(Box::from_raw(shared.load(Acquire))) };
//! # }
//! ```
//!
//! A [`Collector`] owns the global epoch, the participants and the garbage;
//! [`Collector::register`] gives a thread a [`LocalHandle`]; [`LocalHandle::pin`] returns a
//! [`Guard`], and while any guard of a thread lives, nothing that was reachable when it pinned
//! is freed. [`pin`] uses a default collector and a thread-local handle. [`Guard::defer`] and
//! [`Guard::defer_destroy`] retire garbage; [`Guard::flush`] and [`Collector::collect`] push
//! reclamation along; [`Collector::pending`] counts what is retired and not yet freed.
//!
//! # The words
//!
//! - `epoch` (global, own cache line): the current epoch `E`, a `u64` that only grows by 1.
//!   Changed only by an *advance*, and advances are serialised by the `advancing` flag.
//! - per participant record (own cache lines, in an intrusive push-only list, never freed
//!   before the collector, reused by a later thread after its owner leaves — claimed by a CAS
//!   on `in_use`): `state` = `(e << 1) | 1` while pinned in epoch `e`, `0` while not pinned.
//!   Only the owner writes `state`. Owner-only fields: the nesting depth (with a bit saying
//!   the handle is gone, so that the outermost unpin tests one word), and the local *bag* of
//!   deferred functions.
//! - `garbage`: a lock-free stack of *sealed bags*, each tagged with an epoch. Only push and
//!   take-all (`swap(null)`) are used, so there is no ABA.
//!
//! # Read side (hot: plain `mov`s and a compiler fence)
//!
//! ```text
//! pin():   (outermost only: the owner sees its own `state` pinned and bumps a nesting counter)
//!     e = epoch                                   // Relaxed
//!     loop:
//!         state = e<<1 | 1                        // Release store: a plain mov on x86
//!         fence::light()                          // compiler fence only
//!         e' = epoch                              // Acquire load: a plain mov on x86
//!         if e' == e: break                       // linearisation point of pin
//!         e = e'
//! unpin(): state = 0                              // Release store: a plain mov on x86
//! ```
//!
//! No `lock`ed instruction and no `mfence`: under x86-TSO the reload may be satisfied before
//! the `state` store leaves the store buffer (store→load reordering: the FSSF case).
//! The cold side repairs that with a process-wide barrier, below. (`Release` on the `state`
//! stores costs nothing on x86; it makes the C++-model argument go through for a reader that
//! unpins and re-pins between two scans.)
//!
//! # Cold side
//!
//! ```text
//! retire(f):  push f on the thread's local bag; when 64 are there (or on flush): seal:
//!     fence(SeqCst)          // the unlink stores made before retire are globally visible…
//!     g = epoch              // …before we read the epoch we tag the bag with
//!     push (g, bag) on garbage
//! advance() (under the `advancing` try-lock; skipped if someone else holds it):
//!     g = epoch
//!     barrier since the store of g became visible:     Barrier::Heavy: fence::heavy() now
//!         Barrier::Prepaid: the ticket taken right after that store has completed (checked
//!         without blocking; if not, give up until the next collect; after 10 ms, heavy())
//!     for every record: if pinned in an epoch ≠ g: give up (the barrier stays paid)
//!     epoch = g + 1          // SeqCst store (xchg); Prepaid: take the next ticket now
//! free(): take all sealed bags; free those tagged t with t + 2 ≤ epoch; push the rest back
//! ```
//!
//! **Why the writer fences before reading the epoch.** Say a writer unlinks `X` (store `U`),
//! and reads the epoch as `g` while `U` still sits in its store buffer. The epoch advances to
//! `g+1`; a reader pins in `g+1` and, not seeing `U`, loads `X`. The epoch can still advance to
//! `g+2` (the reader is in the current epoch `g+1`, which is allowed), and `X`, tagged `g`, is
//! freed under the reader. With the fence, `U` is globally visible before the tag is read, so
//! every reader that pins in an epoch published after that read (`≥ g+1`) sees `U` (TSO is
//! multi-copy atomic: once any thread could have read `g+1`, `U` is visible to all; Armv8 is
//! other-multi-copy atomic, which gives the same for a store seen by a thread other than its
//! writer, and the fence is a `dmb ish` there).
//!
//! **Why freeing at `t + 2` is safe.** Let `X` be unlinked, tagged `t`, and freed after the
//! advance `t+1 → t+2` by some thread `A`. Its scan `S` came after a barrier `B` that came
//! after the store of `t+1` was visible. Take a reader `R` that dereferences `X` in a pin that
//! lasts past the free. At `S`, `R`'s `state` store was either
//! (a) visible: then `R` was pinned in `t+1` (any other pinned epoch stops the advance), so its
//!     confirming reload read `t+1`, written after the writer's tag read, hence after `U` was
//!     visible; `R`'s later load of the pointer (TSO keeps load→load order; on AArch64 the
//!     reload is an `Acquire` load, `ldar`, which keeps it) sees `U` or a later value, never
//!     `X`; or
//! (b) not visible: during `B`, `R` executed a full barrier at some point `P` (the contract of
//!     [`fence::heavy`], or an interrupt for a prepaid ticket). Had `R`'s
//!     `state` store preceded `P`, it would have been visible at `S`. So it follows `P`, and
//!     so does its reload, which therefore reads `≥ t+1`, and (a)'s argument applies again.
//!
//! Either way `R` never loads `X`. One advance would not be enough: the scan for `t → t+1`
//! accepts readers pinned in `t`, which may have loaded `X` before `U`. Without the barrier,
//! (b) is exactly FSSF: `R`'s store delayed past `S`, its reload early, reading `t`.
//!
//! **Orderings, in the C++ model** (what loom checks, where `fence::light` is a `SeqCst`
//! fence). Freeing happens after a load of the epoch (`Acquire`) that reads the advancer's
//! `SeqCst` store, which follows its scan; the scan's loads of `state` are `Acquire` and read
//! either a reader's `Release` unpin (so the reader's accesses happen before the free) or a
//! pinned state, covered by the argument above. Bags are pushed with `Release` and taken with
//! `Acquire`, so the deferred functions see what the retiring thread wrote.
//!
//! **Linearisation points.** `pin`: the confirming reload. `unpin`: the `state` store. A
//! retirement: the seal's epoch read (the bag is tagged later than each of its items was
//! unlinked, which is conservative). An advance: the `SeqCst` store of the epoch.
//!
//! # Garbage
//!
//! Reclamation is driven by retiring threads (each seal tries one advance and frees what it
//! can) and by [`Guard::flush`] / [`Collector::collect`]; readers never do cold work. On a
//! healthy system with no reader preempted while pinned, garbage stays at a few bags per
//! retiring thread (`Heavy`), or what is retired in two ticket completions (`Prepaid`: with
//! the eBPF source a tick or two each; 10 ms at worst, when the fallback pays `heavy()`). The
//! collector only *polls* tickets ([`PrepaidBarrier::is_complete`]); with the `/proc` source,
//! whose state only its background poller updates, polling works too: the poller runs while
//! some thread blocks in `PrepaidBarrier::wait` *and* for 50 ms after any `is_complete` that
//! returned `false`, so the collector's own checks keep it polling. A ticket then completes
//! at the poller's pace (a few ms; ~10 ms when a tickless idle CPU shows only idle ticks),
//! and an advance pays the fallback `heavy()` only when that takes longer than 10 ms, or when
//! collects are too far apart for the ticket to be checked within them.
//!
//! A reader that is merely *preempted* while pinned stops advances until it runs again: on an
//! oversubscribed machine, every pinned reader must be scheduled between two advances. The
//! lab's read-mostly workload (more readers than CPUs) shows it: epoch schemes, ours and the
//! peers', hold orders of magnitude more garbage there than hazard pointers.
//!
//! **A stalled reader makes garbage unbounded.** A reader pinned in epoch `e` that stops
//! running (preempted, descheduled, stopped in a debugger) stops every advance past `e + 1`,
//! so nothing retired from then on is freed until it unpins: memory grows with the write rate
//! for as long as the stall lasts. That is inherent to epochs. Hazard pointers
//! ([`super::hazard`]) bound it: a stalled reader holds back only the objects in its slots.
//!
//! Records are never freed while the collector lives (a scan may be walking them); a thread
//! that leaves seals its bag, marks its record free, and the next thread to register reuses it.

use std::cell::{Cell, UnsafeCell};
use std::marker::PhantomData;
use std::ptr;
use std::sync::Arc;

use super::{heavy_barrier, AtomicPtr, AtomicUsize, Barrier, CachePadded, Deferred};
use crate::fence;
use crate::primitives::{fence as atomic_fence, AtomicBool, AtomicU64, Ordering::*};
#[cfg(not(loom))]
use crate::{prepaid::PrepaidBarrier, prepaid::Ticket, time::Deadline};

/// Deferred functions a thread collects before it seals them into the global garbage.
const BAG_CAPACITY: usize = 64;

const PINNED: u64 = 1;
/// In `Record::nest`: the handle was dropped while guards lived; the last guard releases.
const ORPHAN: usize = 1 << (usize::BITS - 1);

/// A participant. Aligned to 128 bytes so that two threads' `state` words never share a line
/// (or an adjacent-line prefetch pair).
#[repr(align(128))]
struct Record {
    /// `(epoch << 1) | PINNED` while pinned, 0 otherwise. Written only by the owner.
    state: AtomicU64,
    /// Whether a thread owns this record.
    in_use: AtomicBool,
    /// The length of `bag`, for [`Collector::pending`] (owner writes, anyone reads).
    local_pending: AtomicUsize,
    /// The next record in the participants list; set before the record is published.
    next: AtomicPtr<Record>,
    /// The collector the record belongs to (immutable).
    global: *const Global,
    /// `&(*global).epoch`, so that `pin` loads the epoch without first loading `global`.
    epoch: *const AtomicU64,
    // Owner-only fields.
    /// Guards beyond the outermost one (pinned-ness itself is `state & PINNED`, which the
    /// owner reads back: one store less per pin and unpin), plus [`ORPHAN`] once the handle
    /// is gone while guards live. The outermost unpin reads only this word: zero means "not
    /// nested, handle alive", anything else takes the cold path.
    nest: Cell<usize>,
    bag: UnsafeCell<Vec<Deferred>>,
    /// Keeps the collector alive while the record is claimed (guards outlive handles).
    collector: UnsafeCell<Option<Collector>>,
}

/// A sealed bag of garbage, tagged with the epoch read after its items were unlinked.
struct SealedBag {
    epoch: u64,
    items: Vec<Deferred>,
    next: *mut SealedBag,
}

/// State only the holder of `advancing` touches.
struct AdvanceState {
    /// A barrier has been paid since the current epoch's store became visible.
    barrier_paid: bool,
    /// Prepaid: the ticket taken right after the current epoch's store, and when.
    #[cfg(not(loom))]
    ticket: Option<(Ticket, Deadline)>,
}

struct Global {
    epoch: CachePadded<AtomicU64>,
    participants: CachePadded<AtomicPtr<Record>>,
    garbage: CachePadded<AtomicPtr<SealedBag>>,
    /// Deferred functions in sealed bags, not yet run.
    sealed_pending: AtomicUsize,
    advancing: AtomicBool,
    advance: UnsafeCell<AdvanceState>,
    barrier: Barrier,
    /// The epoch at which a retiring thread last walked the garbage: bags only become
    /// eligible when the epoch moves, so seals skip the walk until it does (a heuristic, not
    /// part of the protocol; `collect` always walks).
    walked_at: std::sync::atomic::AtomicU64,
    /// Statistics (std atomics even under loom: not part of the protocol).
    advances: std::sync::atomic::AtomicU64,
    fallbacks: std::sync::atomic::AtomicU64,
}

// SAFETY: the raw pointers are to records and bags owned by the collector and reached only
// through its atomics; `advance` is only touched by the holder of `advancing`.
unsafe impl Send for Global {}
// SAFETY: as above.
unsafe impl Sync for Global {}

/// An epoch-based garbage collector: the global epoch, the participants and the garbage. Cheap
/// to clone (an `Arc`); see the [module documentation](self).
#[derive(Clone)]
pub struct Collector {
    global: Arc<Global>,
}

impl std::fmt::Debug for Collector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Collector")
            .field("epoch", &self.epoch())
            .field("pending", &self.pending())
            .field("barrier", &self.global.barrier)
            .finish()
    }
}

impl Default for Collector {
    fn default() -> Collector {
        Collector::new()
    }
}

impl Collector {
    /// A collector with the default advance policy ([`Barrier::default_policy`]:
    /// `fence::heavy()` before each scan; prepaid tickets are opt-in through
    /// [`Collector::with_barrier`]).
    pub fn new() -> Collector {
        Collector::with_barrier(Barrier::default_policy())
    }

    /// A collector whose epoch advances use `barrier` (see [`Barrier`]).
    pub fn with_barrier(barrier: Barrier) -> Collector {
        // Readers fence-free from the start where that is decided at run time (AArch64).
        crate::fence::prepare();
        Collector {
            global: Arc::new(Global {
                epoch: CachePadded(AtomicU64::new(0)),
                participants: CachePadded(AtomicPtr::new(ptr::null_mut())),
                garbage: CachePadded(AtomicPtr::new(ptr::null_mut())),
                sealed_pending: AtomicUsize::new(0),
                advancing: AtomicBool::new(false),
                advance: UnsafeCell::new(AdvanceState {
                    // Epoch 0 was stored before any reader could see the collector.
                    barrier_paid: true,
                    #[cfg(not(loom))]
                    ticket: None,
                }),
                barrier,
                walked_at: std::sync::atomic::AtomicU64::new(u64::MAX),
                advances: std::sync::atomic::AtomicU64::new(0),
                fallbacks: std::sync::atomic::AtomicU64::new(0),
            }),
        }
    }

    /// The advance policy.
    pub fn barrier(&self) -> Barrier {
        self.global.barrier
    }

    /// The current global epoch.
    pub fn epoch(&self) -> u64 {
        self.global.epoch.load(Relaxed)
    }

    /// Deferred functions retired and not yet run: in sealed bags, and in threads' local bags.
    /// Exact when no thread is retiring; a snapshot that may be off by a bag otherwise.
    pub fn pending(&self) -> usize {
        let g = &*self.global;
        let mut n = g.sealed_pending.load(Relaxed);
        let mut p = g.participants.load(Acquire);
        while !p.is_null() {
            // SAFETY: records are freed only when the collector is dropped.
            let r = unsafe { &*p };
            n += r.local_pending.load(Relaxed);
            p = r.next.load(Acquire);
        }
        n
    }

    /// Register the calling thread (or any owner that stays on one thread): claims a free
    /// participant record, or adds one.
    pub fn register(&self) -> LocalHandle {
        let g = &*self.global;
        let mut p = g.participants.load(Acquire);
        while !p.is_null() {
            // SAFETY: records are freed only when the collector is dropped.
            let r = unsafe { &*p };
            if !r.in_use.load(Relaxed)
                && r.in_use
                    .compare_exchange(false, true, Acquire, Relaxed)
                    .is_ok()
            {
                return self.claim(r);
            }
            p = r.next.load(Acquire);
        }
        let fresh = Box::into_raw(Box::new(Record {
            state: AtomicU64::new(0),
            in_use: AtomicBool::new(true),
            local_pending: AtomicUsize::new(0),
            next: AtomicPtr::new(ptr::null_mut()),
            global: Arc::as_ptr(&self.global),
            epoch: &self.global.epoch.0,
            nest: Cell::new(0),
            bag: UnsafeCell::new(Vec::new()),
            collector: UnsafeCell::new(None),
        }));
        let mut head = g.participants.load(Relaxed);
        loop {
            // SAFETY: `fresh` is ours until the CAS below publishes it.
            unsafe { (*fresh).next.store(head, Relaxed) };
            match g
                .participants
                .compare_exchange(head, fresh, Release, Relaxed)
            {
                Ok(_) => break,
                Err(h) => head = h,
            }
        }
        // SAFETY: published, and freed only with the collector.
        self.claim(unsafe { &*fresh })
    }

    fn claim(&self, r: &Record) -> LocalHandle {
        debug_assert_eq!(r.state.load(Relaxed), 0);
        debug_assert_eq!(r.nest.get(), 0);
        // SAFETY: we own the record (`in_use` CAS or fresh); owner-only field.
        unsafe { *r.collector.get() = Some(self.clone()) };
        LocalHandle {
            record: r,
            epoch: r.epoch,
        }
    }

    /// One attempt to advance the epoch, then free every bag whose epoch is old enough.
    /// Returns the number of deferred functions run. Never blocks (with `Barrier::Heavy` it
    /// issues a process-wide barrier, tens of µs).
    pub fn collect(&self) -> usize {
        self.global.try_advance();
        self.global.free_expired()
    }

    /// How many times the epoch advanced, and how many of those advances had to issue
    /// `fence::heavy()` because a prepaid ticket was outstanding for longer than
    /// [`PREPAID_PATIENCE`](super::PREPAID_PATIENCE).
    pub fn advance_counts(&self) -> (u64, u64) {
        (
            self.global.advances.load(Relaxed),
            self.global.fallbacks.load(Relaxed),
        )
    }
}

impl Global {
    /// Advance the epoch if every pinned participant is in the current one and the barrier
    /// since the current epoch's store is paid. Returns whether it advanced.
    fn try_advance(&self) -> bool {
        if self
            .advancing
            .compare_exchange(false, true, Acquire, Relaxed)
            .is_err()
        {
            return false; // someone else is advancing
        }
        // SAFETY: we hold `advancing`.
        let advanced = unsafe { self.advance_locked(&mut *self.advance.get()) };
        self.advancing.store(false, Release);
        advanced
    }

    fn advance_locked(&self, s: &mut AdvanceState) -> bool {
        // Only advances change the epoch, and they are serialised by `advancing`.
        let e = self.epoch.load(Relaxed);
        if !s.barrier_paid {
            match self.barrier {
                Barrier::Heavy => heavy_barrier(),
                #[cfg(not(loom))]
                Barrier::Prepaid => {
                    if let Some((t, since)) = s.ticket {
                        if !PrepaidBarrier::global().is_complete(t) {
                            let waited =
                                Deadline::now().as_nanos().saturating_sub(since.as_nanos());
                            if u128::from(waited) < super::PREPAID_PATIENCE.as_nanos() {
                                return false; // try again at the next collect
                            }
                            heavy_barrier();
                            self.fallbacks.fetch_add(1, Relaxed);
                        }
                    } else {
                        heavy_barrier();
                    }
                    s.ticket = None;
                }
            }
            s.barrier_paid = true;
        }
        let mut p = self.participants.load(Acquire);
        while !p.is_null() {
            // SAFETY: records are freed only when the collector is dropped.
            let r = unsafe { &*p };
            let st = r.state.load(Acquire);
            if st & PINNED != 0 && st >> 1 != e {
                return false; // a reader is still in the previous epoch
            }
            p = r.next.load(Acquire);
        }
        self.epoch.store(e + 1, SeqCst);
        self.advances.fetch_add(1, Relaxed);
        s.barrier_paid = false;
        #[cfg(not(loom))]
        if self.barrier == Barrier::Prepaid {
            // `ticket()` begins with a SeqCst fence: the new epoch is visible before the time
            // it records.
            s.ticket = Some((PrepaidBarrier::global().ticket(), Deadline::now()));
        }
        true
    }

    /// Run the deferred functions of every bag tagged `t` with `t + 2 ≤ epoch`; returns how
    /// many ran.
    fn free_expired(&self) -> usize {
        let mut list = self.garbage.swap(ptr::null_mut(), Acquire);
        if list.is_null() {
            return 0;
        }
        let e = self.epoch.load(Acquire);
        let mut expired = Vec::new();
        let (mut keep_head, mut keep_tail): (*mut SealedBag, *mut SealedBag) =
            (ptr::null_mut(), ptr::null_mut());
        while !list.is_null() {
            // SAFETY: bags on the stack were made by `Box::into_raw`; we took them all.
            let mut bag = unsafe { Box::from_raw(list) };
            list = bag.next;
            if bag.epoch + 2 <= e {
                expired.push(bag);
            } else {
                bag.next = keep_head;
                let raw = Box::into_raw(bag);
                if keep_tail.is_null() {
                    keep_tail = raw;
                }
                keep_head = raw;
            }
        }
        if !keep_head.is_null() {
            self.push_bags(keep_head, keep_tail);
        }
        let mut freed = 0;
        for bag in expired {
            freed += bag.items.len();
            for d in bag.items {
                // SAFETY: tagged t with t + 2 ≤ epoch: no reader can still reach it (module
                // documentation); each bag is taken by exactly one collector.
                unsafe { d.run() };
            }
        }
        self.sealed_pending.fetch_sub(freed, Relaxed);
        freed
    }

    /// Push the chain `head..=tail` (linked through `next`) on the garbage stack.
    fn push_bags(&self, head: *mut SealedBag, tail: *mut SealedBag) {
        let mut top = self.garbage.load(Relaxed);
        loop {
            // SAFETY: the chain is ours until the CAS publishes it.
            unsafe { (*tail).next = top };
            match self.garbage.compare_exchange(top, head, Release, Relaxed) {
                Ok(_) => return,
                Err(t) => top = t,
            }
        }
    }

    /// Seal `items` with the current epoch and push them on the garbage stack.
    fn seal(&self, items: Vec<Deferred>) {
        // The unlink stores made before these items were retired must be globally visible
        // before the epoch is read (module documentation: "Why the writer fences").
        atomic_fence(SeqCst);
        let epoch = self.epoch.load(Relaxed);
        self.sealed_pending.fetch_add(items.len(), Relaxed);
        let bag = Box::into_raw(Box::new(SealedBag {
            epoch,
            items,
            next: ptr::null_mut(),
        }));
        self.push_bags(bag, bag);
    }
}

impl Drop for Global {
    fn drop(&mut self) {
        // No handle or guard is left (each claimed record holds a `Collector`), so every
        // local bag was sealed and no reader is pinned: run all garbage, free the records.
        let mut list = self.garbage.load(Relaxed);
        while !list.is_null() {
            // SAFETY: we own every bag now.
            let bag = unsafe { Box::from_raw(list) };
            list = bag.next;
            for d in bag.items {
                // SAFETY: no reader exists any more.
                unsafe { d.run() };
            }
        }
        let mut p = self.participants.load(Relaxed);
        while !p.is_null() {
            // SAFETY: records were made by `Box::into_raw` and nobody else can reach them.
            let r = unsafe { Box::from_raw(p) };
            p = r.next.load(Relaxed);
        }
    }
}

impl Record {
    fn global(&self) -> &Global {
        // SAFETY: a claimed record holds a `Collector`, which keeps the `Global` alive.
        unsafe { &*self.global }
    }

    /// A pin inside a pinned section: one more guard to drop before unpinning. Out of line,
    /// so that the outermost pin's path has no taken branch.
    #[cold]
    #[inline(never)]
    fn nest_more(&self) {
        self.nest.set(self.nest.get() + 1);
    }

    /// The outermost pin (module documentation, "Read side").
    #[inline(always)]
    fn enter(&self, epoch: &AtomicU64) {
        let mut e = epoch.load(Relaxed);
        loop {
            self.state.store((e << 1) | PINNED, Release);
            fence::light();
            let now = epoch.load(Acquire);
            if now == e {
                return;
            }
            e = now;
        }
    }

    /// Add a deferred function to the local bag; seal and collect when it is full.
    fn defer(&self, d: Deferred) {
        // SAFETY: owner-only field; the borrow ends before anything that could re-enter.
        let len = unsafe {
            let bag = &mut *self.bag.get();
            bag.push(d);
            bag.len()
        };
        self.local_pending.store(len, Relaxed);
        if len >= BAG_CAPACITY {
            self.seal_and_collect(false);
        }
    }

    /// Seal the local bag (if any) and make one collection attempt.
    #[cold]
    #[inline(never)]
    fn seal_and_collect(&self, always_walk: bool) {
        let _ = self.seal_local();
        let g = self.global();
        g.try_advance();
        // Walking the garbage costs one step per bag; it can free something new only once
        // the epoch has moved since the last walk (or a late bag arrived with an old tag,
        // which the next walk frees). Explicit flushes always walk.
        let e = g.epoch.load(Relaxed);
        if g.walked_at.swap(e, Relaxed) != e || always_walk {
            g.free_expired();
        }
    }

    /// Seal the local bag into the global garbage; returns whether it held anything.
    fn seal_local(&self) -> bool {
        // SAFETY: owner-only field; taken out before anything could re-enter.
        let items = unsafe { std::mem::take(&mut *self.bag.get()) };
        if items.is_empty() {
            return false;
        }
        // `seal` counts them in `sealed_pending` before we stop counting them here, so
        // `pending()` may briefly count them twice but never misses them.
        self.global().seal(items);
        self.local_pending.store(0, Relaxed);
        true
    }

    /// The last handle and the last guard are gone: seal the bag and free the record for the
    /// next thread.
    ///
    /// # Safety
    /// `this` is a record the caller owns, with no handle or guard left. It takes a raw
    /// pointer, not `&self`: dropping the last `Collector` at the end frees the record.
    #[cold]
    #[inline(never)]
    unsafe fn release(this: *const Record) {
        let (collector, sealed) = {
            // SAFETY: the caller owns the record; nothing frees it before `drop(c)` below.
            let r = unsafe { &*this };
            let sealed = r.seal_local();
            // SAFETY: owner-only field; we still own the record.
            let collector = unsafe { (*r.collector.get()).take() };
            r.in_use.store(false, Release);
            (collector, sealed)
        };
        if let Some(c) = collector {
            // A thread that leaves with garbage pushes reclamation along once (a thread that
            // retired nothing pays no barrier for leaving).
            if sealed {
                c.global.try_advance();
                c.global.free_expired();
            }
            // Dropping the last `Collector` frees the record: nothing touches it from here.
            drop(c);
        }
    }
}

/// A thread's registration with a [`Collector`]. Not `Send`: pin it on the thread that made
/// it. Dropping it (after its guards) seals its garbage and frees its record for reuse.
pub struct LocalHandle {
    record: *const Record,
    /// The record's `epoch` pointer, copied here: the handle has no interior mutability, so a
    /// loop that pins through `&LocalHandle` keeps this in a register.
    epoch: *const AtomicU64,
}

impl std::fmt::Debug for LocalHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalHandle")
            .field("pinned", &self.is_pinned())
            .finish()
    }
}

impl LocalHandle {
    #[inline(always)]
    fn record(&self) -> &Record {
        // SAFETY: the handle keeps its record claimed, and the record's collector alive.
        unsafe { &*self.record }
    }

    /// Pin the thread: until the returned guard (and every other guard of this handle) is
    /// dropped, nothing reachable now is freed. Nested pins are cheap (a counter).
    #[inline]
    pub fn pin(&self) -> Guard {
        let r = self.record();
        if r.state.load(Relaxed) & PINNED != 0 {
            r.nest_more();
        } else {
            // SAFETY: points into the `Global`, which the claimed record keeps alive.
            r.enter(unsafe { &*self.epoch });
        }
        Guard {
            record: self.record,
            _not_send: PhantomData,
        }
    }

    /// Whether a guard of this handle is alive.
    pub fn is_pinned(&self) -> bool {
        self.record().state.load(Relaxed) & PINNED != 0
    }

    /// The collector this handle belongs to.
    pub fn collector(&self) -> &Collector {
        // SAFETY: set when claimed, taken only at release (after this handle is gone).
        unsafe { (*self.record().collector.get()).as_ref() }
            .expect("a live handle's record holds its collector")
    }

    /// Seal this thread's local bag and make one collection attempt (as [`Guard::flush`]).
    pub fn flush(&self) {
        self.record().seal_and_collect(true);
    }
}

impl Drop for LocalHandle {
    fn drop(&mut self) {
        let r = self.record();
        if r.state.load(Relaxed) & PINNED == 0 {
            // SAFETY: our record, and this was its last handle with no guard left.
            unsafe { Record::release(self.record) };
        } else {
            // The last guard releases the record.
            r.nest.set(r.nest.get() | ORPHAN);
        }
    }
}

/// A pinned section: while it lives, nothing that was reachable when the thread pinned is
/// freed. Not `Send`. Dropping the outermost guard unpins.
pub struct Guard {
    record: *const Record,
    _not_send: PhantomData<*mut ()>,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Guard")
    }
}

impl Guard {
    /// A nested guard, or the last guard of a thread whose handle is gone.
    ///
    /// # Safety
    /// `this` is the record of a live guard that is being dropped.
    #[cold]
    #[inline(never)]
    unsafe fn drop_cold(this: *const Record) {
        // SAFETY: the guard keeps the record claimed until the release below.
        let r = unsafe { &*this };
        let n = r.nest.get();
        if n & !ORPHAN != 0 {
            r.nest.set(n - 1);
            return;
        }
        r.state.store(0, Release);
        r.nest.set(0);
        // SAFETY: our record; its handle is gone and this was its last guard.
        unsafe { Record::release(this) };
    }

    #[inline(always)]
    fn record(&self) -> &Record {
        // SAFETY: a guard keeps its record claimed (pinned), hence its collector alive.
        unsafe { &*self.record }
    }

    /// Run `f` once no thread can still be pinned in a section that began before this call.
    /// `f` runs on whichever thread collects.
    pub fn defer<F: FnOnce() + Send + 'static>(&self, f: F) {
        self.record().defer(Deferred::closure(f));
    }

    /// Drop `ptr` as a `Box<T>` once no thread can still be pinned in a section that began
    /// before this call.
    ///
    /// # Safety
    /// `ptr` came from `Box::into_raw`, is already unreachable for threads that pin from now
    /// on, is retired exactly once, and may be dropped on another thread.
    pub unsafe fn defer_destroy<T>(&self, ptr: *mut T) {
        self.record().defer(Deferred::destroy_box(ptr));
    }

    /// Seal this thread's local bag and make one collection attempt (one epoch advance at
    /// most; freeing needs two after the bag's epoch, so call again to free everything).
    pub fn flush(&self) {
        self.record().seal_and_collect(true);
    }

    /// The collector this guard's thread is registered with.
    pub fn collector(&self) -> &Collector {
        // SAFETY: set when claimed, taken only at release (after every guard is gone).
        unsafe { (*self.record().collector.get()).as_ref() }
            .expect("a live guard's record holds its collector")
    }
}

impl Drop for Guard {
    #[inline]
    fn drop(&mut self) {
        let r = self.record();
        if r.nest.get() == 0 {
            r.state.store(0, Release);
        } else {
            // SAFETY: this guard's record, pinned by it.
            unsafe { Guard::drop_cold(self.record) };
        }
    }
}

/// The collector behind [`pin`].
#[cfg(not(loom))]
pub fn default_collector() -> &'static Collector {
    static C: std::sync::OnceLock<Collector> = std::sync::OnceLock::new();
    C.get_or_init(Collector::new)
}

#[cfg(not(loom))]
thread_local! {
    static HANDLE: LocalHandle = default_collector().register();
}

/// Pin the current thread with the [`default_collector`] (through a thread-local handle).
#[cfg(not(loom))]
#[inline]
pub fn pin() -> Guard {
    HANDLE
        .try_with(LocalHandle::pin)
        // During thread-local destruction: a temporary handle; the guard keeps its record.
        .unwrap_or_else(|_| default_collector().register().pin())
}

/// Whether the current thread is pinned with the [`default_collector`].
#[cfg(not(loom))]
pub fn is_pinned() -> bool {
    HANDLE.try_with(LocalHandle::is_pinned).unwrap_or(false)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn records(c: &Collector) -> usize {
        let mut n = 0;
        let mut p = c.global.participants.load(Acquire);
        while !p.is_null() {
            n += 1;
            // SAFETY: records live as long as the collector.
            p = unsafe { (*p).next.load(Acquire) };
        }
        n
    }

    #[test]
    fn nested_pins_unpin_at_the_outermost_guard() {
        let c = Collector::with_barrier(Barrier::Heavy);
        let h = c.register();
        let outer = h.pin();
        let inner = h.pin();
        drop(inner);
        assert!(h.is_pinned());
        drop(outer);
        assert!(!h.is_pinned());
    }

    #[test]
    fn records_are_reused_after_a_handle_leaves() {
        let c = Collector::with_barrier(Barrier::Heavy);
        for _ in 0..5 {
            drop(c.register());
        }
        let a = c.register();
        let b = c.register();
        assert_eq!(records(&c), 2);
        drop((a, b));
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| drop(c.register().pin()));
            }
        });
        assert!(records(&c) <= 4);
    }

    #[test]
    fn a_guard_outliving_its_handle_keeps_the_record_until_unpin() {
        let c = Collector::with_barrier(Barrier::Heavy);
        let g = c.register().pin();
        // SAFETY: a fresh Box, retired once.
        unsafe { g.defer_destroy(Box::into_raw(Box::new(5u32))) };
        assert_eq!(c.pending(), 1);
        assert_eq!(g.collector().epoch(), c.epoch());
        drop(g);
        for _ in 0..4 {
            c.collect();
        }
        assert_eq!(c.pending(), 0);
        assert_eq!(records(&c), 1);
    }

    #[test]
    fn nested_guards_outliving_their_handle_release_the_record_once() {
        let c = Collector::with_barrier(Barrier::Heavy);
        let h = c.register();
        let (a, b, d) = (h.pin(), h.pin(), h.pin());
        drop(h);
        // Not in the order they were made: the record stays pinned until the last one.
        drop(b);
        drop(a);
        let g = c.register().pin();
        assert_eq!(
            records(&c),
            2,
            "the orphaned record was released while pinned"
        );
        drop(g);
        drop(d);
        // Both records are free now: two threads' worth of handles reuse them.
        let (x, y) = (c.register(), c.register());
        assert_eq!(records(&c), 2);
        assert!(!x.is_pinned() && !y.is_pinned());
        let p = x.pin();
        drop(y);
        drop(p);
        assert_eq!(records(&c), 2);
    }

    #[test]
    fn epochs_advance_only_past_current_readers() {
        let c = Collector::with_barrier(Barrier::Heavy);
        let reader = c.register();
        let g = reader.pin();
        c.collect();
        let e = c.epoch();
        assert_eq!(
            e, 1,
            "a reader in the current epoch does not stop one advance"
        );
        c.collect();
        c.collect();
        assert_eq!(c.epoch(), e, "but it stops the next");
        drop(g);
        c.collect();
        assert_eq!(c.epoch(), e + 1);
    }
}
