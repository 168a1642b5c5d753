//! The SWMR rotary set (seed 001, "SWMR Rotary Set Ho!" and "The Rotary Set
//! Implementation"): an unordered circular set whose readers read the head item and
//! *pull* it (read it and advance the head to the next item, round-robin) lock-free in O(1),
//! while one writer at a time inserts (O(1)) and removes (O(N)) under a writer lock that
//! readers never take. A reader never waits for a writer preempted in the middle of an update.
//!
//! ```
//! # #[cfg(not(loom))] {
//! use spindle_sync::RotarySet;
//! let streams = RotarySet::new();
//! for s in ["a", "b", "c"] {
//!     streams.insert(s);
//! }
//! let mut reader = streams.reader();
//! let first = *reader.pull_head().unwrap();
//! let second = *reader.pull_head().unwrap();
//! assert_ne!(first, second); // round-robin
//! assert!(streams.remove(|s| *s == "b"));
//! assert_eq!(streams.len(), 2);
//! # }
//! ```
//!
//! # The words
//!
//! - nodes in a circular singly-linked list: `value`, `next` (readers only go forward, so
//!   the seed's backward links are not needed: the writer finds a predecessor by walking);
//! - `head`: a pair (node, tag) changed only by a 16-byte compare-and-swap (`cmpxchg16b` on
//!   x86-64). Readers move the node; only the writer changes the tag, once per insert and
//!   once per removal. Off x86-64 and under loom the pair's CAS takes a small lock instead,
//!   readers' pulls included: there the readers are *not* lock-free (a reader preempted in
//!   that lock delays the others), and the loom models check the protocol over that locked
//!   pair, not the instruction;
//! - the writer lock (a [`SpindleLock`]), and a hazard-pointer
//!   [`Domain`] of the set's own.
//!
//! # Operations
//!
//! ```text
//! head():      h = protect(head.node); return h's value              (lin.: the validation)
//! pull_head(): loop { t = head.tag; h = protect(head.node); n = h.next
//!                     if CAS(head, (h, t) → (n, t)): return h's value } (lin.: the CAS)
//! insert(x):   lock; h = head.node
//!              empty: x.next = x; CAS(head, (null, t) → (x, t+1))     (lin.: the CAS)
//!              else:  x.next = h.next; h.next = x  (Release)         (lin.: that store)
//!                     loop { (c, t) = head; CAS(head, (c, t) → (c, t+1)) }
//! remove(f):   lock; walk from head.node to the first n with f(n.value), p its predecessor
//!              alone (n.next = n): CAS(head, (n, t) → (null, t+1))
//!              else: p.next = n.next (Release); loop { (c, t) = head
//!                         CAS(head, (c, t) → (c == n ? n.next : c, t+1)) }   (lin.: this CAS)
//!              retire n
//! ```
//!
//! **Invariants.** (1) Every node reachable by `next` from a linked node is linked (a removal
//! sets `p.next` to `n.next` in one store, and removals are one at a time, so `n.next` is
//! linked). (2) After its removal's CAS, `head` never holds `n` again. A reader stores into
//! `head` only a node it read from `h.next`, with a CAS that expects the tag it read *before*
//! that `next`. If that CAS succeeds, no removal's CAS came between the tag read and it; a
//! removal's unlink comes before its CAS, so when `n` was unlinked by then, the reader read
//! `h.next` after that unlink became visible (the tag it read was written after the unlink,
//! and it read `next` after the tag, Acquire) and `h.next ≠ n` (invariant 1 if `h` is linked;
//! `h` cannot have been removed, its removal's CAS would have changed the tag). If `n`'s
//! removal is still between unlink and CAS, its CAS reads `head = n` and moves it on. The tag
//! is 64 bits, so it never comes back to a value a stalled reader holds.
//!
//! **Round-robin, and its one gap.** A pull whose CAS succeeds moved `head` from `h` to the
//! `h.next` it read after the tag, and no insert or removal finished its tag step in between:
//! so `h.next` was still that node, and the pull is exactly "return the head, advance it".
//! The gap is an insert's own window, between its `h.next` store and its tag step: a reader
//! that read `h.next` before the store may CAS in that window and skip the new item for one
//! revolution (the item is in the set, it comes up on the next turn). No item is ever lost,
//! doubled or freed under a reader. Bumping the tag on inserts closes the rest: without it, a
//! reader stalled across a whole revolution could skip an inserted item long after.
//!
//! **Memory model.** On x86-64 the readers' 8-byte `Acquire` loads of the pair's halves race
//! with the writer's 16-byte `lock cmpxchg16b`: mixed-size atomics, outside Rust's model but
//! defined by the hardware (aligned 8-byte loads never tear against the locked 16-byte
//! read-modify-write, and TSO keeps the reader's loads in order and the unlink store before
//! the locked instruction). A torn pair only makes the reader's CAS fail.
//!
//! **Reclamation.** By invariant 2, once `n` is retired no `protect` of `head.node` can
//! return it; that is the hazard-pointer contract, so `n` (and its value) is freed only when
//! no reader's hazard pointer holds it ([`super::smr::hazard`]: readers publish with plain
//! stores, the reclaimer pays a heavy barrier). A reader's reference stays valid until its
//! next call on the same [`Reader`].
//!
//! **Why readers never wait** (x86-64). A reader's loop fails only when `head` changed between
//! its reads and its CAS: another reader advanced it, or the writer inserted or removed; each
//! is progress. No reader step waits for the writer, who may stop anywhere (between unlink
//! and CAS included): the node then at `head` is still valid, and readers pull past it.
//!
//! The writer lock is not re-entrant: `remove`'s predicate must not call `insert` or `remove`
//! on the same set (it would deadlock).

use std::marker::PhantomData;
use std::ptr;

use crate::lock::SpindleLock;
use crate::primitives::{AtomicPtr, AtomicU64, AtomicUsize, Ordering::*};
use crate::smr::hazard::{Domain, HazardPointer};

struct Node<T> {
    value: T,
    next: AtomicPtr<Node<T>>,
}

/// `head`: the node and the removal tag, 16 bytes, compared and swapped together.
#[repr(C, align(16))]
struct Head<T> {
    node: AtomicPtr<Node<T>>,
    tag: AtomicU64,
    /// Taken around a pair CAS where `cmpxchg16b` is not used (off x86-64, and under loom),
    /// readers' CASes included (see the module documentation).
    #[cfg(any(loom, not(target_arch = "x86_64")))]
    pair: SpindleLock,
}

impl<T> Head<T> {
    fn new() -> Head<T> {
        Head {
            node: AtomicPtr::new(ptr::null_mut()),
            tag: AtomicU64::new(0),
            #[cfg(any(loom, not(target_arch = "x86_64")))]
            pair: SpindleLock::new(),
        }
    }

    /// Replaces `(node, tag)` by `new` if it is `old`; otherwise returns what it is (read
    /// atomically). SeqCst.
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    fn cas(
        &self,
        old: (*mut Node<T>, u64),
        new: (*mut Node<T>, u64),
    ) -> Result<(), (*mut Node<T>, u64)> {
        let (mut lo, mut hi) = (old.0 as u64, old.1);
        // SAFETY: `self` is 16-byte aligned (repr align(16)) and `node` and `tag` are its
        // first and second words; `lock cmpxchg16b` reads and writes them as one 16-byte
        // atomic, a full barrier. The instruction takes the new low word in rbx, which LLVM
        // may use for its own values (and may even allocate to a `reg` operand): every
        // operand has an explicit register here, rbx is swapped with rsi around the
        // instruction and restored, and success is read from rdx:rax (left equal to `old` on
        // success, loaded with the different current pair on failure), not from a flag
        // register an operand might share with rbx. Every x86-64 CPU Linux runs on today has
        // cmpxchg16b (x86-64-v2); `RotarySet::new` checks.
        unsafe {
            core::arch::asm!(
                "xchg rsi, rbx",
                "lock cmpxchg16b xmmword ptr [rdi]",
                "mov rbx, rsi",
                in("rdi") self as *const Head<T>,
                inout("rsi") new.0 as u64 => _,
                inout("rax") lo,
                inout("rdx") hi,
                in("rcx") new.1,
                options(nostack),
            );
        }
        if (lo, hi) == (old.0 as u64, old.1) {
            Ok(())
        } else {
            Err((lo as *mut Node<T>, hi))
        }
    }

    /// As above, under the pair lock.
    #[cfg(any(loom, not(target_arch = "x86_64")))]
    fn cas(
        &self,
        old: (*mut Node<T>, u64),
        new: (*mut Node<T>, u64),
    ) -> Result<(), (*mut Node<T>, u64)> {
        self.pair.lock();
        let now = (self.node.load(SeqCst), self.tag.load(SeqCst));
        let r = if now == old {
            self.node.store(new.0, SeqCst);
            self.tag.store(new.1, SeqCst);
            Ok(())
        } else {
            Err(now)
        };
        // SAFETY: locked above, by this thread.
        unsafe { self.pair.unlock() };
        r
    }

    /// The pair, read atomically (a failing CAS reads it).
    fn load(&self) -> (*mut Node<T>, u64) {
        let guess = (self.node.load(Acquire), self.tag.load(Acquire));
        match self.cas(guess, guess) {
            Ok(()) => guess,
            Err(now) => now,
        }
    }
}

/// An unordered circular set: lock-free round-robin reads, one writer at a time (see the
/// [module documentation](self)).
pub struct RotarySet<T> {
    head: Head<T>,
    writer: SpindleLock,
    len: AtomicUsize,
    domain: Domain,
    _owns: PhantomData<Box<Node<T>>>,
}

// SAFETY: values are shared with readers on any thread (`&T`: T: Sync) and dropped on
// whichever thread reclaims (T: Send); all shared words are atomics.
unsafe impl<T: Send + Sync> Send for RotarySet<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for RotarySet<T> {}

impl<T> Default for RotarySet<T> {
    fn default() -> Self {
        RotarySet::new()
    }
}

/// Holds the writer lock; releases it when dropped.
struct Writing<'a>(&'a SpindleLock);

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        // SAFETY: locked by this thread when this guard was made.
        unsafe { self.0.unlock() };
    }
}

impl<T> RotarySet<T> {
    /// An empty set.
    ///
    /// # Panics
    /// On an x86-64 CPU without `cmpxchg16b` (none that Linux supports today, which needs
    /// x86-64-v2 for most distributions).
    pub fn new() -> RotarySet<T> {
        #[cfg(all(target_arch = "x86_64", not(loom)))]
        assert!(
            std::arch::is_x86_feature_detected!("cmpxchg16b"),
            "RotarySet needs the cmpxchg16b instruction"
        );
        RotarySet {
            head: Head::new(),
            writer: SpindleLock::new(),
            len: AtomicUsize::new(0),
            domain: Domain::new(),
            _owns: PhantomData,
        }
    }

    /// Items in the set (exact while no writer is inside an update).
    pub fn len(&self) -> usize {
        self.len.load(Relaxed)
    }

    /// No items (see [`len`](Self::len)).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A reader: pulls and reads the head through a hazard pointer of its own. One per
    /// thread (or more); cheap to keep.
    pub fn reader(&self) -> Reader<'_, T> {
        Reader {
            set: self,
            hp: HazardPointer::new_in(&self.domain),
        }
    }

    fn write(&self) -> Writing<'_> {
        self.writer.lock();
        Writing(&self.writer)
    }

    /// Adds `value` after the head (O(1), under the writer lock): it comes up after the
    /// items readers are about to pull.
    pub fn insert(&self, value: T) {
        let _w = self.write();
        let x = Box::into_raw(Box::new(Node {
            value,
            next: AtomicPtr::new(ptr::null_mut()),
        }));
        let (h, t) = self.head.load();
        if h.is_null() {
            // SAFETY: `x` is ours until published.
            unsafe { (*x).next.store(x, Relaxed) };
            // Readers do not change a null head, and tags change under this lock only.
            let set = self.head.cas((ptr::null_mut(), t), (x, t + 1));
            assert!(set.is_ok(), "a null head changed under the writer lock");
        } else {
            // SAFETY: `h` is linked (only this lock's holder unlinks) and not freed; `x` is
            // ours until the Release store publishes it with its `next` set.
            unsafe {
                (*x).next.store((*h).next.load(Acquire), Relaxed);
                (*h).next.store(x, Release);
            }
            // The tag step: a pull that read `h.next` before the store cannot succeed later.
            self.bump(|c| c);
        }
        self.len.fetch_add(1, Relaxed);
    }

    /// Replaces `head = (c, t)` by `(node(c), t + 1)`, retrying while readers move `c`.
    fn bump(&self, node: impl Fn(*mut Node<T>) -> *mut Node<T>) {
        let mut cur = self.head.load();
        while let Err(now) = self.head.cas(cur, (node(cur.0), cur.1 + 1)) {
            cur = now;
        }
    }

    /// Removes an item for which `matches` is true, the first found going round from the
    /// item after the head (the head's item last); false if none does. O(N), under the
    /// writer lock; readers go on meanwhile.
    pub fn remove(&self, matches: impl FnMut(&T) -> bool) -> bool {
        self.remove_pausing(matches, || {})
    }

    /// [`remove`](Self::remove), calling `pause` in the middle of the update (after the
    /// unlink, before the head's tag step), still under the writer lock: for the lab, which
    /// stops a writer there to show that readers do not wait for it.
    #[doc(hidden)]
    pub fn remove_pausing(
        &self,
        mut matches: impl FnMut(&T) -> bool,
        pause: impl FnOnce(),
    ) -> bool {
        let _w = self.write();
        let (h, _) = self.head.load();
        if h.is_null() {
            return false;
        }
        // Walk from the head: p, then n = p.next, until n matches or the ring is done.
        let mut p = h;
        let n = loop {
            // SAFETY: linked nodes are not freed while this lock is held (only its holder
            // retires), and `next` of a linked node is linked (invariant 1).
            let n = unsafe { (*p).next.load(Acquire) };
            // SAFETY: `n` is linked, as above.
            if matches(unsafe { &(*n).value }) {
                break n;
            }
            if n == h {
                return false;
            }
            p = n;
        };
        // SAFETY: as above.
        let after = unsafe { (*n).next.load(Acquire) };
        if after != n {
            // SAFETY: as above; the store is the unlink (readers reach `n` only from `head`
            // after this).
            unsafe { (*p).next.store(after, Release) };
        }
        pause();
        let next = if after == n { ptr::null_mut() } else { after };
        self.bump(|c| if c == n { next } else { c });
        self.len.fetch_sub(1, Relaxed);
        // SAFETY: unlinked and out of `head` for good (invariant 2); made by Box::into_raw;
        // retired once.
        unsafe { self.domain.retire(n) };
        true
    }
}

impl<T> Drop for RotarySet<T> {
    fn drop(&mut self) {
        // No reader is left (they borrow the set): free the ring; the domain frees what
        // was retired.
        let h = self.head.node.load(Relaxed);
        if h.is_null() {
            return;
        }
        let mut p = h;
        loop {
            // SAFETY: linked nodes, each freed once; we own them all now.
            let next = unsafe { (*p).next.load(Relaxed) };
            // SAFETY: made by Box::into_raw, linked, freed only here.
            drop(unsafe { Box::from_raw(p) });
            if next == h {
                break;
            }
            p = next;
        }
    }
}

/// A reader of a [`RotarySet`]: its hazard pointer keeps the item it last returned alive
/// until its next call.
pub struct Reader<'s, T> {
    set: &'s RotarySet<T>,
    hp: HazardPointer<'s>,
}

impl<T> Reader<'_, T> {
    /// The head item, without moving the head. Lock-free, O(1).
    pub fn head(&mut self) -> Option<&T> {
        let h = self.hp.protect(&self.set.head.node);
        // SAFETY: protected (validated against `head`, which never holds a retired node).
        unsafe { h.as_ref().map(|n| &n.value) }
    }

    /// The head item, and the head moved to the next item: round-robin among the readers.
    /// Lock-free, O(1).
    pub fn pull_head(&mut self) -> Option<&T> {
        let head = &self.set.head;
        loop {
            let t = head.tag.load(Acquire);
            let h = self.hp.protect(&head.node);
            if h.is_null() {
                return None;
            }
            // SAFETY: protected, as in `head`.
            let n = unsafe { (*h).next.load(Acquire) };
            if head.cas((h, t), (n, t)).is_ok() {
                // SAFETY: as above.
                return Some(unsafe { &(*h).value });
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize as StdUsize;
    use std::sync::Arc;

    #[test]
    fn pulls_go_round_robin_and_removal_takes_one_item() {
        let set = RotarySet::new();
        assert!(set.reader().pull_head().is_none());
        for i in 0..5 {
            set.insert(i);
        }
        assert_eq!(set.len(), 5);
        let mut r = set.reader();
        let mut seen: Vec<i32> = (0..10).map(|_| *r.pull_head().unwrap()).collect();
        // Each item once per round, and the second round repeats the first.
        assert_eq!(seen[..5], seen[5..]);
        seen.truncate(5);
        seen.sort();
        assert_eq!(seen, [0, 1, 2, 3, 4]);
        let before = *r.head().unwrap();
        assert_eq!(*r.head().unwrap(), before, "head() does not move the head");
        assert!(set.remove(|v| *v == 3));
        assert!(!set.remove(|v| *v == 3));
        let mut left: Vec<i32> = (0..4).map(|_| *r.pull_head().unwrap()).collect();
        left.sort();
        assert_eq!(left, [0, 1, 2, 4]);
        for v in [0, 1, 2, 4] {
            assert!(set.remove(|x| *x == v));
        }
        assert!(set.is_empty() && r.pull_head().is_none() && r.head().is_none());
        set.insert(7);
        assert_eq!(r.pull_head(), Some(&7));
        assert_eq!(r.pull_head(), Some(&7));
    }

    struct Counted(Arc<StdUsize>);

    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Relaxed);
        }
    }

    #[test]
    fn every_value_is_dropped_once() {
        let drops = Arc::new(StdUsize::new(0));
        {
            let set = RotarySet::new();
            for _ in 0..10 {
                set.insert(Counted(Arc::clone(&drops)));
            }
            let mut n = 0;
            while n < 4 && set.remove(|_| true) {
                n += 1;
            }
            assert_eq!(set.len(), 6);
        }
        assert_eq!(drops.load(Relaxed), 10);
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    //! A reader pulls (and reads what it pulled) while the writer removes an item (the head's,
    //! the next one, or the only one), reclaims, and inserts another: the reader never sees
    //! a freed item (each item's drop sets its loom flag), pulls only items that were in the
    //! set, and the set ends as it should, with no freed item in it.

    use super::*;
    use loom::sync::atomic::AtomicBool;
    use loom::sync::Arc;

    struct Item {
        id: usize,
        freed: Arc<[AtomicBool; 3]>,
    }

    impl Drop for Item {
        fn drop(&mut self) {
            self.freed[self.id].store(true, Relaxed);
        }
    }

    /// The set starts with `initial`; the writer removes `gone`, reclaims, inserts item 2.
    fn model(initial: &'static [usize], gone: usize) {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(2);
        b.check(move || {
            let freed = Arc::new([
                AtomicBool::new(false),
                AtomicBool::new(false),
                AtomicBool::new(false),
            ]);
            let set = Arc::new(RotarySet::new());
            for &id in initial {
                set.insert(Item {
                    id,
                    freed: Arc::clone(&freed),
                });
            }
            let reader = {
                let set = Arc::clone(&set);
                let freed = Arc::clone(&freed);
                loom::thread::spawn(move || {
                    let mut r = set.reader();
                    for _ in 0..2 {
                        if let Some(item) = r.pull_head() {
                            assert!(item.id < 3, "a pulled item is garbage");
                            assert!(!freed[item.id].load(Relaxed), "pulled a freed item");
                        }
                    }
                })
            };
            assert!(set.remove(|i| i.id == gone));
            set.domain.reclaim();
            set.insert(Item {
                id: 2,
                freed: Arc::clone(&freed),
            });
            reader.join().unwrap();
            let mut r = set.reader();
            let mut ids: Vec<usize> = (0..set.len())
                .map(|_| {
                    let item = r.pull_head().unwrap();
                    assert!(
                        !freed[item.id].load(Relaxed),
                        "a freed item is still in the set"
                    );
                    item.id
                })
                .collect();
            ids.sort();
            let mut want: Vec<usize> = initial.iter().copied().filter(|&i| i != gone).collect();
            want.push(2);
            assert_eq!(ids, want);
        });
    }

    #[test]
    fn pull_races_remove_reclaim_and_insert() {
        model(&[0, 1], 0);
    }

    /// The removed item is the one after the head: the node a pulling reader is about to
    /// move the head to.
    #[test]
    fn pull_races_removal_of_the_next_item() {
        model(&[0, 1], 1);
    }

    #[test]
    fn pull_races_removal_of_the_only_item() {
        model(&[0], 0);
    }
}
