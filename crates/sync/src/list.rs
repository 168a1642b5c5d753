//! The unbounded flavour of [`mpmc`](crate::mpmc): [`mpmc::unbounded`](crate::mpmc::unbounded),
//! as crossbeam-channel's `unbounded()`. Values live in a linked list of blocks of
//! `BLOCK_SLOTS` slots; a send never blocks, a receive blocks through an [`EventCount`] when
//! the list is empty.
//!
//! # Protocol
//!
//! Two positions, each an index word and a block pointer: `tail` (where senders claim) and
//! `head` (where receivers claim). Indices count `lap · LAP + offset`, `LAP = BLOCK_SLOTS + 1`:
//! offsets `0..BLOCK_SLOTS` name a block's slots, and offset `BLOCK_SLOTS` is a *gap* that an
//! index occupies only while the thread that claimed the block's last slot moves its position
//! to the next block; everyone else waits (spins, yields, naps) for the gap to close. The tail
//! word carries two flags in its low bits: `tail = index·4 | DISCONNECTED | RECEIVERS_WAIT`.
//! A slot's `state` collects `WRITTEN` (its sender's), `READ` (its receiver's) and `DESTROY`.
//!
//! ```text
//! send(x):
//!   t = load(tail); DISCONNECTED → Disconnected;  offset(t) == gap → wait, reload
//!   (about to claim a block's last slot → allocate the next block first)
//!   b = load(tail.block)
//!   CAS(tail, t → t + 1, keeping DISCONNECTED, clearing RECEIVERS_WAIT)    // the claim
//!   claimed the last slot → store(tail.block, new); tail += 1 (past the gap); b.next = new
//!   write x; fetch_or(slot.state, WRITTEN)
//!   RECEIVERS_WAIT was in t → not_empty.increment()
//!
//! try_recv:
//!   h = load(head); offset(h) == gap → wait, reload
//!   b = load(head.block)
//!   h below tail_seen (a tail index loaded before) → claimed by a sender: go on; else
//!   t = load(tail); index(t) == h → Empty (or Disconnected if the flag is in t); tail_seen = t
//!   CAS(head, h → h + 1)                                                   // the claim
//!   claimed the last slot → wait for b.next; store(head.block, next); head = h + 2
//!   wait for WRITTEN (the sender may be in flight: spin, yield, nap); move the value out
//!   last slot → destroy b from slot 0;  else fetch_or(READ) found DESTROY → destroy from h + 1
//! ```
//!
//! **Invariants.** `head ≤ tail` in index order, and every index below `tail` was claimed by
//! exactly one sender (the CAS), every index below `head` by exactly one receiver, who then
//! reads that slot exactly once. A block pointer is dereferenced only by a thread that claimed
//! an index in that block (so the block lives: its slot is not read yet, or is being read by
//! that thread), except by the destroyer. Position words and their block pointers agree: a
//! position's block is stored *before* its index leaves the gap (`Release`), and a thread loads
//! the index (`Acquire`) before the block, so a thread whose claim succeeds has the block of the
//! index it claimed (a stale block goes with a stale index, whose CAS fails).
//!
//! **Reclamation.** The reader of a block's last slot destroys the block: for each earlier
//! slot it checks `READ`; the first slot not yet read gets `DESTROY` (`fetch_or`), and its reader,
//! whose own `fetch_or(READ)` finds `DESTROY`, continues from the slot after. Every earlier slot
//! was claimed by a receiver (head passed it), so each is read at last; the thread that finds
//! every slot read frees the block. Senders touch a block only until their `WRITTEN`, which
//! the slot's reader waits for, and the last slot's sender stores `next` before its `WRITTEN`.
//!
//! **Blocking, and why no wake-up is lost** (the argument of the bounded flavour, simpler: a
//! send never waits, and `Empty` has no in-flight case, since a receiver that finds
//! `tail ≠ head` claims the index and then waits for its value). A receiver that finds the
//! list empty reads `e = not_empty.value()`, sets `RECEIVERS_WAIT` in `tail` (`fetch_or`), and
//! tries again. A sender whose CAS came before the `fetch_or` in `tail`'s modification order is
//! visible to the second try (`tail ≠ head`). One whose CAS came after sees the flag, or finds
//! it cleared by an earlier such sender, and that sender increments `not_empty` after its
//! `WRITTEN`; the increment is ordered after `e`, so `wait(e)` returns. A receiver that sees the
//! list still empty sleeps on `e`. The flag is shared: the sender that clears it wakes every
//! sleeper, and each that finds nothing sets it again. Selects and async receives are on an
//! observer list pushed before they set the flag, which that sender wakes too (`select.rs`).
//!
//! **Disconnection** as crossbeam-channel's: the last sender sets `DISCONNECTED` in `tail` and
//! signals; receivers take what is left, then fail. The last receiver sets it too (later sends
//! fail: their CAS compares the whole word) and drops what is queued at once.
//!
//! **Orderings.** Claims are `SeqCst` CAS (any `lock`ed instruction on x86); `WRITTEN` is
//! released by the sender and acquired by the reader, `READ` and `DESTROY` are `AcqRel`, so
//! the destroyer's `free` comes after every reader's move-out. The flag argument uses only
//! `tail`'s modification order.
//!
//! **`tail_seen`.** Receivers load `tail`, whose line the senders keep writing, only when
//! their index reaches the tail index some receiver loaded last (kept in `head`'s line): below
//! it, the index was claimed by a sender, which is all a claim needs (the value is waited for).
//! A receiver storing an older value than another's only makes the bound lower: it stays a
//! lower bound of `tail`. `Empty` is still decided by a load of `tail` itself.
//!
//! **Linearisation points.** A send: its CAS; a receive: its CAS; `Empty`: the load of `tail`
//! that showed `head`'s index.
//!
//! **Cost.** A send is one CAS and one `fetch_or` (two `lock`ed instructions), plus an
//! allocation and one `fetch_add` per `BLOCK_SLOTS` sends; a receive is one CAS and one
//! `fetch_or`. Waking costs nothing more unless a receiver waits.

#[cfg(not(loom))]
use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::ptr;

use crate::eventcount::EventCount;
use crate::primitives::{
    spin_loop, Arc, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, CachePadded, Ordering::*,
};
use crate::select::{Ctx, Observers};
use crate::time::Deadline;

/// Slots per block: 31 and a gap make a lap of 32 (two under loom, so that the models cross
/// blocks with three values).
#[cfg(not(loom))]
const BLOCK_SLOTS: usize = 31;
#[cfg(loom)]
const BLOCK_SLOTS: usize = 2;
const LAP: u64 = BLOCK_SLOTS as u64 + 1;

const RECEIVERS_WAIT: u64 = 1;
const DISCONNECTED: u64 = 2;
const SHIFT: u32 = 2;

const WRITTEN: u32 = 1;
const READ: u32 = 2;
const DESTROY: u32 = 4;

/// A slot's value: under loom, loom's cell, so that the models check who may touch it when.
#[cfg(not(loom))]
struct ValueCell<T>(UnsafeCell<MaybeUninit<T>>);
#[cfg(loom)]
struct ValueCell<T>(loom::cell::UnsafeCell<MaybeUninit<T>>);

impl<T> ValueCell<T> {
    #[cfg(not(loom))]
    fn new() -> Self {
        ValueCell(UnsafeCell::new(MaybeUninit::uninit()))
    }

    #[cfg(loom)]
    fn new() -> Self {
        ValueCell(loom::cell::UnsafeCell::new(MaybeUninit::uninit()))
    }

    /// # Safety
    /// The caller owns the slot: it claimed the index and nobody else reads or writes it.
    unsafe fn write(&self, value: T) {
        #[cfg(not(loom))]
        // SAFETY: the caller's.
        unsafe {
            (*self.0.get()).write(value);
        }
        #[cfg(loom)]
        // SAFETY: the caller's.
        self.0.with_mut(|p| unsafe { (*p).write(value) });
    }

    /// # Safety
    /// As `write`, and the value was written (its `WRITTEN` acquired) and not moved out.
    unsafe fn take(&self) -> T {
        #[cfg(not(loom))]
        // SAFETY: the caller's.
        unsafe {
            (*self.0.get()).assume_init_read()
        }
        #[cfg(loom)]
        // SAFETY: the caller's.
        self.0.with(|p| unsafe { (*p).assume_init_read() })
    }
}

struct Slot<T> {
    state: AtomicU32,
    value: ValueCell<T>,
}

pub(crate) struct Block<T> {
    next: AtomicPtr<Block<T>>,
    slots: [Slot<T>; BLOCK_SLOTS],
}

impl<T> Block<T> {
    fn new() -> Box<Block<T>> {
        Box::new(Block {
            next: AtomicPtr::new(ptr::null_mut()),
            slots: std::array::from_fn(|_| Slot {
                state: AtomicU32::new(0),
                value: ValueCell::new(),
            }),
        })
    }

    /// Slot `offset` (< `BLOCK_SLOTS`).
    ///
    /// # Safety
    /// `block` lives: the caller holds an index in it, or destroys it.
    unsafe fn slot<'a>(block: *const Block<T>, offset: usize) -> &'a Slot<T> {
        // SAFETY: the caller's; offsets below BLOCK_SLOTS only.
        unsafe { (*block).slots.get_unchecked(offset) }
    }

    /// # Safety
    /// Nobody uses `block` any more.
    unsafe fn free(block: *mut Block<T>) {
        // SAFETY: the caller's; blocks come from `Box::into_raw`.
        drop(unsafe { Box::from_raw(block) });
    }

    /// The next block, once the sender of this block's last slot has linked it.
    fn wait_next(&self) -> *mut Block<T> {
        let mut pauses = 0;
        loop {
            let next = self.next.load(Acquire);
            if !next.is_null() {
                return next;
            }
            pause(&mut pauses);
        }
    }

    /// Frees `block` once every slot from `start` on (but the last, whose reader calls this
    /// with 0) has been read; stops at the first slot not read yet, leaving `DESTROY` for its
    /// reader to continue from the next one.
    ///
    /// # Safety
    /// The caller read the last slot, or found `DESTROY` in slot `start - 1`.
    unsafe fn destroy(block: *mut Block<T>, start: usize) {
        for i in start..BLOCK_SLOTS - 1 {
            // SAFETY: the block lives until this loop (or a later reader's) finishes.
            let slot = unsafe { Block::slot(block, i) };
            if slot.state.load(Acquire) & READ == 0
                && slot.state.fetch_or(DESTROY, AcqRel) & READ == 0
            {
                return;
            }
        }
        // SAFETY: every slot has been read; nobody holds an index in this block any more.
        unsafe { Block::free(block) };
    }
}

/// Spins of a thread that waits for another one in flight, before it settles.
const SPINS: u32 = 64;

/// One pause of a thread that waits for another one in flight (a gap being closed, a value
/// being written: a few instructions, unless that thread was preempted in between): spins,
/// then the bounded flavour's settling pauses (yields, then naps).
fn pause(pauses: &mut u32) {
    *pauses += 1;
    if cfg!(loom) || *pauses > SPINS {
        crate::mpmc::settle(pauses.saturating_sub(SPINS));
    } else {
        spin_loop();
    }
}

struct Position<T> {
    index: AtomicU64,
    block: AtomicPtr<Block<T>>,
    /// In `head`: the tail index some receiver loaded last (a lower bound of the tail, since
    /// the tail only grows), so that receivers behind it claim without loading `tail`, whose
    /// line the senders keep writing. Unused in `tail`.
    tail_seen: AtomicU64,
}

pub(crate) struct Chan<T> {
    tail: CachePadded<Position<T>>,
    head: CachePadded<Position<T>>,
    not_empty: CachePadded<EventCount>,
    /// Selects waiting for a value (see `select.rs`).
    recv_select: Observers,
    pub(crate) senders: AtomicUsize,
    pub(crate) receivers: AtomicUsize,
}

// SAFETY: values move between threads (T: Send); each slot's value is touched only by the
// threads that claimed its index, handed over through `WRITTEN`.
unsafe impl<T: Send> Send for Chan<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for Chan<T> {}

/// Why a receive found nothing.
pub(crate) enum Nothing {
    Empty,
    Disconnected,
}

/// The number of slots before index `i`: 31 per lap, and a gap counts as the lap's end.
fn slots_before(i: u64) -> u64 {
    (i / LAP) * BLOCK_SLOTS as u64 + i % LAP
}

impl<T> Chan<T> {
    pub(crate) fn new() -> Chan<T> {
        let first = Box::into_raw(Block::new());
        Chan {
            tail: CachePadded(Position {
                index: AtomicU64::new(0),
                block: AtomicPtr::new(first),
                tail_seen: AtomicU64::new(0),
            }),
            head: CachePadded(Position {
                index: AtomicU64::new(0),
                block: AtomicPtr::new(first),
                tail_seen: AtomicU64::new(0),
            }),
            not_empty: CachePadded(EventCount::new()),
            recv_select: Observers::new(),
            senders: AtomicUsize::new(1),
            receivers: AtomicUsize::new(1),
        }
    }

    /// Sends `value`; it comes back only if the channel is disconnected.
    #[inline]
    pub(crate) fn send(&self, value: T) -> Result<(), T> {
        let mut next_block: Option<Box<Block<T>>> = None;
        let mut pauses = 0;
        let mut tail = self.tail.index.load(Acquire);
        loop {
            if tail & DISCONNECTED != 0 {
                return Err(value);
            }
            let idx = tail >> SHIFT;
            let offset = (idx % LAP) as usize;
            if offset == BLOCK_SLOTS {
                // The sender of the last slot is moving `tail` to the next block.
                pause(&mut pauses);
                tail = self.tail.index.load(Acquire);
                continue;
            }
            let last = offset + 1 == BLOCK_SLOTS;
            if last && next_block.is_none() {
                next_block = Some(Block::new());
            }
            let block = self.tail.block.load(Acquire);
            let new = ((idx + 1) << SHIFT) | (tail & DISCONNECTED);
            match self
                .tail
                .index
                .compare_exchange_weak(tail, new, SeqCst, Acquire)
            {
                Ok(_) => {
                    if last {
                        let next = Box::into_raw(next_block.take().expect("allocated above"));
                        self.tail.block.store(next, Release);
                        self.tail.index.fetch_add(1 << SHIFT, Release);
                        // SAFETY: we hold an index in `block`, whose reader waits for us.
                        unsafe { (*block).next.store(next, Release) };
                    }
                    // SAFETY: our claim; the block lives until this slot is read, which
                    // waits for WRITTEN below.
                    let slot = unsafe { Block::slot(block, offset) };
                    // SAFETY: the slot is ours to write (claimed, never written before).
                    unsafe { slot.value.write(value) };
                    slot.state.fetch_or(WRITTEN, Release);
                    if tail & RECEIVERS_WAIT != 0 {
                        self.not_empty.increment();
                        self.recv_select.notify();
                    }
                    return Ok(());
                }
                Err(t) => {
                    tail = t;
                    spin_loop();
                }
            }
        }
    }

    /// Receives a value if one was sent: `Empty` only when every sent value was received.
    #[inline]
    pub(crate) fn try_recv(&self) -> Result<T, Nothing> {
        let (block, offset) = self.claim_recv()?;
        // SAFETY: claimed just now.
        Ok(unsafe { Self::read(block, offset) })
    }

    /// Claims the next index for a receive (and, for a block's last slot, moves `head` to the
    /// next block): the first half of a receive. Its slot's block and offset.
    #[inline]
    pub(crate) fn claim_recv(&self) -> Result<(*mut Block<T>, usize), Nothing> {
        let mut pauses = 0;
        let mut head = self.head.index.load(Acquire);
        loop {
            let idx = head >> SHIFT;
            let offset = (idx % LAP) as usize;
            if offset == BLOCK_SLOTS {
                // The reader of the last slot is moving `head` to the next block.
                pause(&mut pauses);
                head = self.head.index.load(Acquire);
                continue;
            }
            let block = self.head.block.load(Acquire);
            // Claimed by a sender? Below a tail index seen before, surely; else look.
            if idx >= self.head.tail_seen.load(Relaxed) {
                let tail = self.tail.index.load(SeqCst);
                if tail >> SHIFT == idx {
                    return Err(if tail & DISCONNECTED != 0 {
                        Nothing::Disconnected
                    } else {
                        Nothing::Empty
                    });
                }
                self.head.tail_seen.store(tail >> SHIFT, Relaxed);
            }
            match self
                .head
                .index
                .compare_exchange_weak(head, (idx + 1) << SHIFT, SeqCst, Acquire)
            {
                Ok(_) => {
                    let last = offset + 1 == BLOCK_SLOTS;
                    if last {
                        // SAFETY: we hold an index in `block`, which lives until we read it.
                        let next = unsafe { (*block).wait_next() };
                        self.head.block.store(next, Release);
                        self.head.index.store((idx + 2) << SHIFT, Release);
                    }
                    return Ok((block, offset));
                }
                Err(h) => {
                    head = h;
                    spin_loop();
                }
            }
        }
    }

    /// The second half of a receive: waits for the claimed slot's value, moves it out, and
    /// destroys the block if this reader is its last.
    ///
    /// # Safety
    /// `(block, offset)` came from [`Self::claim_recv`] and was not read since.
    #[inline]
    pub(crate) unsafe fn read(block: *mut Block<T>, offset: usize) -> T {
        // SAFETY: we hold an index in `block`, which lives until we read it.
        let slot = unsafe { Block::slot(block, offset) };
        let mut pauses = 0;
        while slot.state.load(Acquire) & WRITTEN == 0 {
            // Its sender claimed the index and has not written yet.
            pause(&mut pauses);
        }
        // SAFETY: our claim, written (WRITTEN acquired), read once: by us.
        let value = unsafe { slot.value.take() };
        if offset + 1 == BLOCK_SLOTS {
            // SAFETY: we read the last slot.
            unsafe { Block::destroy(block, 0) };
        } else if slot.state.fetch_or(READ, AcqRel) & DESTROY != 0 {
            // SAFETY: the destroyer stopped at our slot.
            unsafe { Block::destroy(block, offset + 1) };
        }
        value
    }

    /// Registers a select waiting for a value (see `select.rs`): on the observer list, then
    /// the flag.
    pub(crate) fn watch(&self, ctx: &Arc<Ctx>) {
        self.recv_select.add(ctx);
        self.tail.index.fetch_or(RECEIVERS_WAIT, SeqCst);
    }

    /// The observer list of receives waiting for a value.
    pub(crate) fn recv_watchers(&self) -> &Observers {
        &self.recv_select
    }

    /// A watch that stays registered: set the flag again.
    pub(crate) fn rearm(&self) {
        self.tail.index.fetch_or(RECEIVERS_WAIT, SeqCst);
    }

    pub(crate) fn unwatch(&self, ctx: &Arc<Ctx>) {
        self.recv_select.remove(ctx);
    }

    /// Receives, blocking while the list is empty, until `deadline` (`Err(None)`: timed out).
    pub(crate) fn recv(&self, deadline: Option<Deadline>) -> Result<T, Option<Nothing>> {
        loop {
            match self.try_recv() {
                Err(Nothing::Empty) => {}
                r => return r.map_err(Some),
            }
            let e = self.not_empty.value();
            self.tail.index.fetch_or(RECEIVERS_WAIT, SeqCst);
            match self.try_recv() {
                Err(Nothing::Empty) => {}
                r => return r.map_err(Some),
            }
            if self.not_empty.wait(e, deadline).is_err() {
                return Err(None);
            }
        }
    }

    /// The last sender or the last receiver went.
    pub(crate) fn disconnect(&self) {
        self.tail.index.fetch_or(DISCONNECTED, SeqCst);
        self.not_empty.increment();
        self.recv_select.notify();
    }

    /// The last receiver went: drop what is queued now (waiting for senders in flight).
    pub(crate) fn disconnect_receivers(&self) {
        self.disconnect();
        while let Ok(value) = self.try_recv() {
            drop(value);
        }
    }

    pub(crate) fn is_disconnected(&self) -> bool {
        self.tail.index.load(SeqCst) & DISCONNECTED != 0
    }

    pub(crate) fn len(&self) -> usize {
        loop {
            let tail = self.tail.index.load(SeqCst) >> SHIFT;
            let head = self.head.index.load(SeqCst) >> SHIFT;
            if self.tail.index.load(SeqCst) >> SHIFT == tail {
                return (slots_before(tail) - slots_before(head)) as usize;
            }
        }
    }
}

impl<T> Drop for Chan<T> {
    fn drop(&mut self) {
        // Every handle is gone: nothing is in flight. Drop the values in [head, tail) and
        // free the blocks from head's on.
        let tail = self.tail.index.load(Relaxed) >> SHIFT;
        let mut idx = self.head.index.load(Relaxed) >> SHIFT;
        let mut block = self.head.block.load(Relaxed);
        while idx != tail {
            let offset = (idx % LAP) as usize;
            if offset == BLOCK_SLOTS {
                // SAFETY: a block whose every slot is behind us; `next` was linked before
                // its last slot was written.
                let next = unsafe { (*block).next.load(Relaxed) };
                // SAFETY: as above.
                unsafe { Block::free(block) };
                block = next;
            } else {
                // SAFETY: a claimed, written, unread slot; we own the channel.
                unsafe { drop(Block::slot(block, offset).value.take()) };
            }
            idx += 1;
        }
        // SAFETY: the block of the first index nobody claimed.
        unsafe { Block::free(block) };
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use crate::mpmc::{unbounded, TryRecvError};
    use loom::thread;

    /// Two senders, one receiver, three values across a block boundary (two slots per block
    /// under loom): the claims, the gap, the linking of the next block, the destruction by the
    /// last slot's reader, and the receiver's sleep and wake-up (a lost one is a loom deadlock).
    ///
    /// Preemption bound 1: with 2, loom finds a schedule where the last slot's sender is
    /// preempted between closing the gap and linking `next`, the other sender waits at the gap
    /// and the receiver for `next`, and the two waiters' yields alternate without loom ever
    /// resuming the preempted thread, until the branch limit (a limitation of loom's yield
    /// scheduling: two threads spinning with `yield_now` on a third, preempted one, fail the same
    /// way in a ten-line model). A real scheduler runs the preempted thread.
    #[test]
    fn list_two_senders_cross_a_block() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(1);
        b.max_branches = 20_000;
        b.check(|| {
            let (tx, rx) = unbounded::<u32>();
            let a = {
                let tx = tx.clone();
                thread::spawn(move || {
                    tx.send(1).unwrap();
                    tx.send(2).unwrap();
                })
            };
            let c = thread::spawn(move || tx.send(3).unwrap());
            let mut got = [rx.recv().unwrap(), rx.recv().unwrap(), rx.recv().unwrap()];
            got.sort();
            assert_eq!(got, [1, 2, 3]);
            a.join().unwrap();
            c.join().unwrap();
            assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
        });
    }

    /// One sender, one receiver, three values across a block boundary.
    #[test]
    fn list_one_sender_crosses_a_block() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(2);
        b.max_branches = 20_000;
        b.check(|| {
            let (tx, rx) = unbounded::<u32>();
            let a = thread::spawn(move || {
                for v in 1..=3 {
                    tx.send(v).unwrap();
                }
            });
            let got = [rx.recv().unwrap(), rx.recv().unwrap(), rx.recv().unwrap()];
            assert_eq!(got, [1, 2, 3]);
            a.join().unwrap();
        });
    }

    /// Two receivers take three values across a block boundary, so a block's earlier slot may
    /// be read after its last one: the destroyer leaves `DESTROY`, and that slot's reader frees
    /// the block. (Loom does not track `Box`: a mutant that frees without looking at `READ`
    /// passes this model; the stress test `unbounded_stress_each_value_once_in_order` aborts
    /// on it with heap corruption within seconds.)
    #[test]
    fn list_two_receivers_destroy_in_turn() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(2);
        b.max_branches = 20_000;
        b.check(|| {
            let (tx, rx) = unbounded::<u32>();
            for v in 1..=3 {
                tx.send(v).unwrap();
            }
            drop(tx);
            let other = {
                let rx = rx.clone();
                thread::spawn(move || rx.iter().sum::<u32>())
            };
            let mine: u32 = rx.iter().sum();
            assert_eq!(mine + other.join().unwrap(), 6);
        });
    }

    /// The last receiver goes while a sender is sending: the value is either refused (handed
    /// back) or dropped with the queue, never both, never leaked.
    #[test]
    fn list_receiver_leaves_during_a_send() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(2);
        b.max_branches = 20_000;
        b.check(|| {
            let (tx, rx) = unbounded::<loom::sync::Arc<()>>();
            let token = loom::sync::Arc::new(());
            let t = token.clone();
            let sender = thread::spawn(move || {
                let _ = tx.send(t.clone());
                tx.send(t).is_ok()
            });
            drop(rx);
            sender.join().unwrap();
            assert_eq!(loom::sync::Arc::strong_count(&token), 1);
        });
    }
}
