//! Hazard pointers with fence-free readers.
//!
//! ```
//! # #[cfg(not(loom))] {
//! use std::sync::atomic::{AtomicPtr, Ordering::*};
//! use spindle_sync::smr::hazard::{Domain, HazardPointer};
//!
//! let shared = AtomicPtr::new(Box::into_raw(Box::new(1u64)));
//! let mut hp = HazardPointer::new();              // a slot in the global domain
//! let p = hp.protect(&shared);                    // load, publish, re-check
//! // SAFETY: protected, and `shared` only ever holds live Boxes retired through the domain.
//! assert_eq!(unsafe { *p }, 1);
//! hp.reset();
//! let old = shared.swap(Box::into_raw(Box::new(2u64)), AcqRel);
//! // SAFETY: unlinked, from a Box, retired once.
//! unsafe { Domain::global().retire(old) };
//! # unsafe { drop(Box::from_raw(shared.load(Acquire))) };
//! # }
//! ```
//!
//! A [`Domain`] owns hazard *slots* and retired objects. A [`HazardPointer`] owns one slot;
//! [`HazardPointer::protect`] makes the pointer it returns safe to dereference until the next
//! `protect` or [`HazardPointer::reset`]. [`Domain::retire`] / [`Domain::retire_with`] hand
//! over an unlinked object; every `threshold` retirements the retiring thread reclaims:
//! frees every retired object that no slot protects.
//!
//! # The words
//!
//! - slot records (own cache lines; an intrusive push-only list, never freed before the domain;
//!   claimed by a CAS on `in_use`, so a dropped `HazardPointer`'s slot is reused): `ptr`, the
//!   protected address or null. Only the owner writes `ptr`.
//! - `retired`: a lock-free stack of retired objects (push, and take-all by `swap(null)`: no
//!   ABA), with `retired_len` (incremented *before* a push, decremented after a take, so it
//!   never under-counts) and `pending` (retired, not yet freed).
//!
//! # Read side (hot: plain `mov`s and a compiler fence)
//!
//! ```text
//! protect(src):
//!     p = src                                     // Relaxed
//!     loop:
//!         slot = p                                // Release store: a plain mov on x86
//!         fence::light()                          // compiler fence only
//!         q = src                                 // Acquire load: a plain mov on x86
//!         if q == p: return p                     // linearisation point
//!         p = q
//! reset():  slot = null                           // Release store
//! ```
//!
//! # Cold side
//!
//! ```text
//! retire(x):   retired_len += 1; push x on retired; if retired_len ≥ threshold: reclaim()
//! reclaim():   batch = take all of retired
//!              barrier: fence::heavy()   (Barrier::Heavy, the default here)
//!                    or: a prepaid ticket for the batch, which waits (without blocking)
//!                        until it completes, or 10 ms, then fence::heavy()   (Barrier::Prepaid)
//!              protected = every slot's ptr (Acquire loads)
//!              free the batch's objects not in `protected`; push the others back
//! ```
//!
//! `threshold = 2 × slots + 64`, so a reclaim frees at least about half of what it scans.
//!
//! **Why it is safe.** A writer unlinks `X` (store `U`) and retires it; the push is a `lock
//! cmpxchg`, so `U` is globally visible before `X` is on the stack, hence before any reclaimer
//! takes it (on AArch64 the push is a `Release` CAS and the take an `Acquire` swap: `U`
//! happens before the take, and the barrier's `dmb ish` on each CPU orders it for every
//! reader, Armv8 being other-multi-copy atomic). The reclaimer's barrier `B` comes after that, and its scan `S` after `B`. Take a
//! reader `R` whose `protect` returned `X` and who dereferences `X` after the free. `R` stored
//! `X` in its slot and then re-loaded `src` and found `X`, so that re-load came before `U` was
//! visible. During `B`, `R` executed a full barrier at some point `P` (the contract of
//! [`fence::heavy`], or an interrupt for a prepaid ticket). If `R`'s
//! re-load followed `P` it would see `U` (visible before `B` began); so it precedes `P`, and
//! so does `R`'s slot store, which therefore was visible at `S`: `X` is protected and kept. (A
//! reader that changed its slot between its `protect` and `S` is no longer protecting `X`, by
//! contract.) Without the barrier this is the FSSF interleaving: the slot store delayed in `R`'s
//! store buffer past `S`, the re-load executed early.
//!
//! **Orderings, in the C++ model** (loom). The scan's `Acquire` loads read either a reader's
//! `Release` reset or `Release` store of a *later* protection, so every access the reader made
//! under an earlier protection happens before the free. The stack's `Release` pushes and
//! `Acquire` takes carry the retiring thread's writes to the deleter.
//!
//! # Garbage bound
//!
//! Let `S` be the number of slots, `T` the threshold, and `R` the number of threads that
//! retire or call [`Domain::reclaim`] concurrently. A reclaim keeps at most `S` objects (each
//! slot protects one address, and an object is retired once). Every push that takes the count
//! to `T` is followed by its pusher's own take, so between two takes the stack gains fewer
//! than `T` objects plus at most one push per concurrent retirer plus at most `S` pushed back
//! per reclaim in flight: it never holds more than `T + R·(S + 1)`. Each of the `R` threads
//! holds at most one detached batch, no larger than the stack was. Hence, with `Heavy`:
//!
//! - **one retiring thread**: `pending ≤ T` (the stack is the only place garbage is, and it is
//!   taken whenever it reaches `T`; at most `S` of a batch survive);
//! - **in general**: `pending ≤ (R + 1)·(T + R·(S + 1))`
//!   ([`Domain::pending_bound`]): about `T + R·S` per retiring thread.
//!
//! This holds **whatever readers do**: a stalled reader holds back at most the objects in its
//! own slots. (Contrast [`super::epoch`], where a stalled pinned reader makes garbage grow
//! without bound.) With `Prepaid`, a batch whose ticket is incomplete is parked and checked
//! again only at the next `reclaim` (after [`PREPAID_PATIENCE`](super::PREPAID_PATIENCE),
//! 10 ms, that reclaim pays `fence::heavy()` for it); while retirements continue this adds
//! what is retired in about 10 ms, and if they stop, parked batches wait for the next explicit
//! [`Domain::reclaim`]. The bound above is for `Heavy`, the default.

use std::marker::PhantomData;
use std::ptr;

use super::{heavy_barrier, AtomicPtr, AtomicUsize, Barrier, CachePadded, Deferred};
use crate::fence;
use crate::primitives::{AtomicBool, Ordering::*};
#[cfg(not(loom))]
use crate::{prepaid::PrepaidBarrier, prepaid::Ticket, time::Deadline};

/// Retirements between reclaims beyond twice the number of slots.
const THRESHOLD_BASE: usize = 64;

/// A hazard slot, on its own cache lines.
#[repr(align(128))]
struct Slot {
    /// The protected address, or null. Written only by the owner.
    ptr: AtomicPtr<()>,
    in_use: AtomicBool,
    /// The next slot; set before the slot is published.
    next: AtomicPtr<Slot>,
}

/// A retired object on the `retired` stack.
struct Retired {
    action: Deferred,
    next: *mut Retired,
}

/// Prepaid: a detached batch waiting for its ticket.
#[cfg(not(loom))]
struct Waiting {
    ticket: Ticket,
    since: Deadline,
    items: Vec<Deferred>,
    next: *mut Waiting,
}

/// A set of hazard slots and the objects retired against them; see the
/// [module documentation](self).
pub struct Domain {
    slots: CachePadded<AtomicPtr<Slot>>,
    slot_count: AtomicUsize,
    retired: CachePadded<AtomicPtr<Retired>>,
    /// Objects on `retired` (never under-counted).
    retired_len: AtomicUsize,
    /// Retired, not yet freed.
    pending: CachePadded<AtomicUsize>,
    #[cfg(not(loom))]
    waiting: AtomicPtr<Waiting>,
    barrier: Barrier,
}

// SAFETY: all shared state is behind atomics; the raw pointers are to slots and retired
// objects owned by the domain.
unsafe impl Send for Domain {}
// SAFETY: as above.
unsafe impl Sync for Domain {}

impl std::fmt::Debug for Domain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Domain")
            .field("slots", &self.slot_count.load(Relaxed))
            .field("pending", &self.pending())
            .field("barrier", &self.barrier)
            .finish()
    }
}

impl Default for Domain {
    fn default() -> Domain {
        Domain::new()
    }
}

impl Domain {
    /// A domain whose reclaims use `fence::heavy()` (see the module documentation for why
    /// the default, [`Barrier::Heavy`]).
    pub fn new() -> Domain {
        Domain::with_barrier(Barrier::Heavy)
    }

    /// A domain whose reclaims use `barrier`.
    pub fn with_barrier(barrier: Barrier) -> Domain {
        // Readers fence-free from the start where that is decided at run time (AArch64).
        crate::fence::prepare();
        Domain {
            slots: CachePadded(AtomicPtr::new(ptr::null_mut())),
            slot_count: AtomicUsize::new(0),
            retired: CachePadded(AtomicPtr::new(ptr::null_mut())),
            retired_len: AtomicUsize::new(0),
            pending: CachePadded(AtomicUsize::new(0)),
            #[cfg(not(loom))]
            waiting: AtomicPtr::new(ptr::null_mut()),
            barrier,
        }
    }

    /// The process-wide domain behind [`HazardPointer::new`].
    #[cfg(not(loom))]
    pub fn global() -> &'static Domain {
        static D: std::sync::OnceLock<Domain> = std::sync::OnceLock::new();
        D.get_or_init(Domain::new)
    }

    /// The reclaim barrier.
    pub fn barrier(&self) -> Barrier {
        self.barrier
    }

    /// Objects retired and not yet freed.
    pub fn pending(&self) -> usize {
        self.pending.load(Relaxed)
    }

    /// Hazard slots ever created (claimed or free).
    pub fn slots(&self) -> usize {
        self.slot_count.load(Relaxed)
    }

    /// Retirements that trigger a reclaim: `2 × slots + 64`.
    pub fn threshold(&self) -> usize {
        2 * self.slots() + THRESHOLD_BASE
    }

    /// The documented bound on [`Domain::pending`] with `retirers` threads retiring
    /// concurrently and `Barrier::Heavy` (module documentation, "Garbage bound").
    pub fn pending_bound(&self, retirers: usize) -> usize {
        let r = retirers.max(1);
        (r + 1) * (self.threshold() + r * (self.slots() + 1))
    }

    fn claim_slot(&self) -> &Slot {
        let mut p = self.slots.load(Acquire);
        while !p.is_null() {
            // SAFETY: slots are freed only with the domain.
            let s = unsafe { &*p };
            if !s.in_use.load(Relaxed)
                && s.in_use
                    .compare_exchange(false, true, Acquire, Relaxed)
                    .is_ok()
            {
                return s;
            }
            p = s.next.load(Acquire);
        }
        let fresh = Box::into_raw(Box::new(Slot {
            ptr: AtomicPtr::new(ptr::null_mut()),
            in_use: AtomicBool::new(true),
            next: AtomicPtr::new(ptr::null_mut()),
        }));
        self.slot_count.fetch_add(1, Relaxed);
        let mut head = self.slots.load(Relaxed);
        loop {
            // SAFETY: `fresh` is ours until the CAS publishes it.
            unsafe { (*fresh).next.store(head, Relaxed) };
            match self.slots.compare_exchange(head, fresh, Release, Relaxed) {
                Ok(_) => break,
                Err(h) => head = h,
            }
        }
        // SAFETY: published; freed only with the domain.
        unsafe { &*fresh }
    }

    /// Retire `ptr`, a `Box<T>`: it is dropped once no hazard pointer protects it.
    ///
    /// # Safety
    /// `ptr` came from `Box::into_raw`, is already unlinked (no `protect` from now on can
    /// return it), is retired exactly once, and may be dropped on another thread.
    pub unsafe fn retire<T>(&self, ptr: *mut T) {
        self.push_retired(Deferred::destroy_box(ptr));
    }

    /// Retire `ptr` with a custom deleter, called once no hazard pointer protects it.
    ///
    /// # Safety
    /// As [`Domain::retire`], with "dropped" read as "passed to `deleter`" (on any thread).
    pub unsafe fn retire_with<T>(&self, ptr: *mut T, deleter: unsafe fn(*mut T)) {
        self.push_retired(Deferred::with_deleter(ptr, deleter));
    }

    fn push_retired(&self, action: Deferred) {
        let node = Box::into_raw(Box::new(Retired {
            action,
            next: ptr::null_mut(),
        }));
        self.pending.fetch_add(1, Relaxed);
        let len = self.retired_len.fetch_add(1, Relaxed) + 1;
        self.push_chain(node, node);
        if len >= self.threshold() {
            self.reclaim();
        }
    }

    /// Push the chain `head..=tail` on the retired stack. The `lock cmpxchg` also makes the
    /// caller's earlier stores (the unlink) globally visible before the objects can be taken.
    fn push_chain(&self, head: *mut Retired, tail: *mut Retired) {
        let mut top = self.retired.load(Relaxed);
        loop {
            // SAFETY: the chain is ours until the CAS publishes it.
            unsafe { (*tail).next = top };
            match self.retired.compare_exchange(top, head, Release, Relaxed) {
                Ok(_) => return,
                Err(t) => top = t,
            }
        }
    }

    /// Take every retired object off the stack.
    fn take_retired(&self) -> Vec<Deferred> {
        let mut list = self.retired.swap(ptr::null_mut(), Acquire);
        let mut out = Vec::new();
        while !list.is_null() {
            // SAFETY: made by `Box::into_raw`; the swap gave us the whole chain.
            let node = unsafe { Box::from_raw(list) };
            list = node.next;
            out.push(node.action);
        }
        self.retired_len.fetch_sub(out.len(), Relaxed);
        out
    }

    /// Free every retired object that no hazard pointer protects (after the barrier); returns
    /// how many were freed. With `Barrier::Prepaid`, objects whose ticket has not completed
    /// yet wait for a later call.
    pub fn reclaim(&self) -> usize {
        let batch = self.take_retired();
        let eligible = match self.barrier {
            Barrier::Heavy => {
                if batch.is_empty() {
                    return 0;
                }
                heavy_barrier();
                batch
            }
            #[cfg(not(loom))]
            Barrier::Prepaid => self.prepaid_eligible(batch),
        };
        if eligible.is_empty() {
            return 0;
        }
        let mut protected = Vec::new();
        let mut p = self.slots.load(Acquire);
        while !p.is_null() {
            // SAFETY: slots are freed only with the domain.
            let s = unsafe { &*p };
            let h = s.ptr.load(Acquire);
            if !h.is_null() {
                protected.push(h as usize);
            }
            p = s.next.load(Acquire);
        }
        protected.sort_unstable();
        let mut freed = Vec::new();
        let (mut keep_head, mut keep_tail): (*mut Retired, *mut Retired) =
            (ptr::null_mut(), ptr::null_mut());
        let mut kept = 0;
        for action in eligible {
            if protected.binary_search(&action.address()).is_ok() {
                let raw = Box::into_raw(Box::new(Retired {
                    action,
                    next: keep_head,
                }));
                if keep_tail.is_null() {
                    keep_tail = raw;
                }
                keep_head = raw;
                kept += 1;
            } else {
                freed.push(action);
            }
        }
        if kept > 0 {
            self.retired_len.fetch_add(kept, Relaxed);
            self.push_chain(keep_head, keep_tail);
        }
        let n = freed.len();
        for action in freed {
            // SAFETY: unlinked before the barrier and in no slot after it (module
            // documentation); each object is on exactly one list, so it runs once.
            unsafe { action.run() };
        }
        self.pending.fetch_sub(n, Relaxed);
        n
    }

    /// Prepaid: park `batch` with a fresh ticket, and return every parked object whose ticket
    /// has completed (or has waited [`PREPAID_PATIENCE`](super::PREPAID_PATIENCE), after one
    /// `fence::heavy()` for all of those).
    #[cfg(not(loom))]
    fn prepaid_eligible(&self, batch: Vec<Deferred>) -> Vec<Deferred> {
        let barrier = PrepaidBarrier::global();
        if !batch.is_empty() {
            // The batch was unlinked before it was pushed (a locked CAS), hence before the
            // ticket's own SeqCst fence.
            let w = Box::into_raw(Box::new(Waiting {
                ticket: barrier.ticket(),
                since: Deadline::now(),
                items: batch,
                next: ptr::null_mut(),
            }));
            let mut top = self.waiting.load(Relaxed);
            loop {
                // SAFETY: ours until published.
                unsafe { (*w).next = top };
                match self.waiting.compare_exchange(top, w, Release, Relaxed) {
                    Ok(_) => break,
                    Err(t) => top = t,
                }
            }
        }
        let mut list = self.waiting.swap(ptr::null_mut(), Acquire);
        let now = Deadline::now().as_nanos();
        let (mut ready, mut overdue, mut keep) = (Vec::new(), Vec::new(), Vec::new());
        while !list.is_null() {
            // SAFETY: made by `Box::into_raw`; the swap gave us the whole chain.
            let w = unsafe { Box::from_raw(list) };
            list = w.next;
            if barrier.is_complete(w.ticket) {
                ready.extend(w.items);
            } else if u128::from(now.saturating_sub(w.since.as_nanos()))
                >= super::PREPAID_PATIENCE.as_nanos()
            {
                overdue.extend(w.items);
            } else {
                keep.push(w);
            }
        }
        for w in keep {
            let w = Box::into_raw(w);
            let mut top = self.waiting.load(Relaxed);
            loop {
                // SAFETY: ours until published.
                unsafe { (*w).next = top };
                match self.waiting.compare_exchange(top, w, Release, Relaxed) {
                    Ok(_) => break,
                    Err(t) => top = t,
                }
            }
        }
        if !overdue.is_empty() {
            heavy_barrier();
            ready.append(&mut overdue);
        }
        ready
    }
}

impl Drop for Domain {
    fn drop(&mut self) {
        // No `HazardPointer` borrows the domain any more: free everything.
        for action in self.take_retired() {
            // SAFETY: no reader can exist (they borrow the domain).
            unsafe { action.run() };
        }
        #[cfg(not(loom))]
        {
            let mut list = self.waiting.load(Relaxed);
            while !list.is_null() {
                // SAFETY: we own the chain.
                let w = unsafe { Box::from_raw(list) };
                list = w.next;
                for action in w.items {
                    // SAFETY: as above.
                    unsafe { action.run() };
                }
            }
        }
        let mut p = self.slots.load(Relaxed);
        while !p.is_null() {
            // SAFETY: made by `Box::into_raw`; nothing else reaches it now.
            let s = unsafe { Box::from_raw(p) };
            p = s.next.load(Relaxed);
        }
    }
}

/// One hazard slot of a [`Domain`]. Dropping it clears the slot and frees it for reuse.
pub struct HazardPointer<'domain> {
    slot: &'domain Slot,
    _domain: PhantomData<&'domain Domain>,
}

impl std::fmt::Debug for HazardPointer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HazardPointer")
            .field("protecting", &self.slot.ptr.load(Relaxed))
            .finish()
    }
}

#[cfg(not(loom))]
impl HazardPointer<'static> {
    /// A hazard pointer in the [global domain](Domain::global).
    #[allow(clippy::new_without_default)]
    pub fn new() -> HazardPointer<'static> {
        HazardPointer::new_in(Domain::global())
    }
}

impl<'domain> HazardPointer<'domain> {
    /// A hazard pointer in `domain` (a free slot is reused, or a new one added).
    pub fn new_in(domain: &'domain Domain) -> HazardPointer<'domain> {
        HazardPointer {
            slot: domain.claim_slot(),
            _domain: PhantomData,
        }
    }

    /// Load `src` and protect what it points to: the returned pointer (null included) stays
    /// valid until the next `protect` or `reset` of this hazard pointer, provided that objects
    /// are unlinked from `src` before being retired to this hazard pointer's domain.
    #[inline]
    pub fn protect<T>(&mut self, src: &AtomicPtr<T>) -> *mut T {
        let mut p = src.load(Relaxed);
        loop {
            self.slot.ptr.store(p.cast(), Release);
            fence::light();
            let q = src.load(Acquire);
            if q == p {
                return p;
            }
            p = q;
        }
    }

    /// [`HazardPointer::protect`] as a reference tied to this hazard pointer's borrow.
    ///
    /// # Safety
    /// `src` holds null or pointers to live `T`s that are retired only to this hazard
    /// pointer's domain, after being unlinked from `src`.
    #[inline]
    pub unsafe fn protect_ref<T>(&mut self, src: &AtomicPtr<T>) -> Option<&T> {
        let p = self.protect(src);
        // SAFETY: protected; live by the caller's contract.
        unsafe { p.as_ref() }
    }

    /// Stop protecting anything.
    #[inline]
    pub fn reset(&mut self) {
        self.slot.ptr.store(ptr::null_mut(), Release);
    }
}

impl Drop for HazardPointer<'_> {
    fn drop(&mut self) {
        self.reset();
        self.slot.in_use.store(false, Release);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn slots_are_reused() {
        let d = Domain::new();
        for _ in 0..5 {
            drop(HazardPointer::new_in(&d));
        }
        let a = HazardPointer::new_in(&d);
        let b = HazardPointer::new_in(&d);
        assert_eq!(d.slots(), 2);
        assert_eq!(d.threshold(), 2 * 2 + THRESHOLD_BASE);
        drop((a, b));
    }

    #[test]
    fn reclaim_frees_exactly_the_unprotected() {
        let d = Domain::new();
        let src = AtomicPtr::new(Box::into_raw(Box::new(1u64)));
        let mut hp = HazardPointer::new_in(&d);
        let held = hp.protect(&src);
        let fresh = Box::into_raw(Box::new(2u64));
        let old = src.swap(fresh, AcqRel);
        assert_eq!(old, held);
        // SAFETY: unlinked, from a Box, retired once (each).
        unsafe {
            d.retire(old);
            d.retire(Box::into_raw(Box::new(3u64)));
        }
        assert_eq!(d.reclaim(), 1);
        assert_eq!(d.pending(), 1);
        // SAFETY: still protected.
        assert_eq!(unsafe { *held }, 1);
        hp.reset();
        assert_eq!(d.reclaim(), 1);
        assert_eq!(d.pending(), 0);
        // SAFETY: the last node is linked and ours.
        drop(unsafe { Box::from_raw(src.load(Acquire)) });
    }

    #[test]
    fn custom_deleters_run_once() {
        use std::sync::atomic::AtomicUsize as StdUsize;
        static RUNS: StdUsize = StdUsize::new(0);
        unsafe fn count(p: *mut u8) {
            RUNS.fetch_add(1, Relaxed);
            // SAFETY: made by Box::into_raw below.
            drop(unsafe { Box::from_raw(p) });
        }
        let d = Domain::new();
        for _ in 0..10 {
            // SAFETY: fresh Boxes, retired once.
            unsafe { d.retire_with(Box::into_raw(Box::new(0u8)), count) };
        }
        d.reclaim();
        assert_eq!(RUNS.load(Relaxed), 10);
        assert_eq!(d.pending(), 0);
    }
}
