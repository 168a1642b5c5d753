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
//! A slot's `state` goes `EMPTY → WRITTEN` (its sender's store); its flag in the block's
//! `read` array goes up once its reader has moved the value out (the reader's store). Each is
//! written by one thread with a plain `Release` store (and reset with `Relaxed` ones by the
//! sender that reuses the block, see "Reclamation"): no slot needs a `lock`ed instruction.
//! The `read` flags share no line with the slots (only with the block's `next`, which the last
//! slot's sender writes once), so that a receiver's store does not take a slot's line back
//! from a sender writing the next slots (a `lock`ed claim after it would wait for that
//! transfer).
//!
//! ```text
//! send(x):
//!   t = load(tail); DISCONNECTED → Disconnected;  offset(t) == gap → wait, reload
//!   (about to claim a block's last slot → take a spare block, or allocate one, first)
//!   b = load(tail.block)
//!   CAS(tail, t → t + 1, keeping DISCONNECTED, clearing RECEIVERS_WAIT)    // the claim
//!   claimed the last slot → store(tail.block, new); tail += 1 (past the gap); b.next = new
//!   write x; store(slot.state, WRITTEN)
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
//!   last slot → reclaim b;  else store(b.read[offset], true)
//! ```
//!
//! **Invariants.** `head ≤ tail` in index order, and every index below `tail` was claimed by
//! exactly one sender (the CAS), every index below `head` by exactly one receiver, who then
//! reads that slot exactly once. A block pointer is dereferenced only by a thread that claimed
//! an index in that block (so the block lives: its slot is not read yet, or is being read by
//! that thread), except by the thread that reclaims it (the reader of its last slot, or a
//! later one that sweeps the deferred blocks) and the sender that takes it as a spare.
//! Position words and their block pointers agree: a position's block is stored *before* its
//! index leaves the gap (`Release`), and a thread loads the index (`Acquire`) before the
//! block, so a thread whose claim succeeds has the block of the index it claimed (a stale
//! block goes with a stale index, whose CAS fails). Indices never repeat (62 bits), so a block
//! address that comes back, recycled, cannot fool a claim either.
//!
//! **Reclamation.** The reader of a block's last slot reclaims the block: if every earlier
//! slot is read (`Acquire`, pairing with each reader's `Release` store after its move-out),
//! nobody touches the block any more, and it goes to the spare blocks (a few, for the senders'
//! next blocks, so that a stream reuses its memory instead of calling the allocator from both
//! ends: glibc's arena lock made producer and consumer sleep on each other) or is freed. If
//! some earlier reader is not done (it claimed its index and is in flight, or is a select
//! between claiming and completing), the block goes on the *deferred* stack instead, linked
//! through its `next` (nobody reads a passed block's `next` again), and every later reclaimer
//! looks at the deferred blocks again (on a channel gone quiet, they wait for the next
//! reclamation or the channel's drop). Nobody waits for a reader; a reader does no `lock`ed
//! instruction for the reclamation. A sender that took a spare for the next block and then
//! claimed another slot gives it back. Senders touch a block only until their `WRITTEN`, which
//! the slot's reader waits for, and the last slot's sender stores `next` before its `WRITTEN`.
//! A spare block is reset (slots `EMPTY`, flags down, `next` null) by the sender that takes
//! it, before `tail.block` publishes it (`Release`).
//!
//! **Blocking, and why no wake-up is lost** (the argument of the bounded flavour, simpler: a
//! send never waits, and `Empty` has no in-flight case, since a receiver that finds
//! `tail ≠ head` claims the index and then waits for its value). A receiver that finds the
//! list empty (and still empty after a few looks, see `Position::hold`: plain `try_recv`s,
//! which the argument does not need) reads `e = not_empty.value()`, sets `RECEIVERS_WAIT` in
//! `tail` (`fetch_or`), and tries again. A sender whose CAS came before the `fetch_or` in
//! `tail`'s modification order is visible to the second try (`tail ≠ head`). One whose CAS
//! came after sees the flag, or finds it cleared by an earlier such sender, and that sender
//! increments `not_empty` after its `WRITTEN`; the increment is ordered after `e`, so
//! `wait(e)` returns. A receiver that sees the list still empty sleeps on `e`. The flag is
//! shared: the sender that clears it wakes every sleeper, and each that finds nothing sets it
//! again. Selects and async receives are on an observer list pushed before they set the flag,
//! which that sender wakes too (`select.rs`).
//!
//! **Disconnection** as crossbeam-channel's: the last sender sets `DISCONNECTED` in `tail` and
//! signals; receivers take what is left, then fail. The last receiver sets it too (later sends
//! fail: their CAS compares the whole word) and drops what is queued at once.
//!
//! **Orderings.** Claims are `SeqCst` CAS (any `lock`ed instruction on x86); `WRITTEN` is
//! released by the sender and acquired by the reader, the `read` flag released by the reader and
//! acquired by the reclaimer, so the block's reuse or `free` comes after every reader's
//! move-out. The spare and deferred stacks hand blocks over with `Release`/`Acquire`
//! (`compare_exchange`, `swap`). The flag argument uses only `tail`'s modification order.
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
//! **Cost.** A send is one CAS (one `lock`ed instruction), plus, per `BLOCK_SLOTS` sends, a
//! spare block (or an allocation) and one `fetch_add`; a receive is one CAS, plus a
//! reclamation per block. Waking costs nothing more unless a receiver waits.

#[cfg(not(loom))]
use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::ptr;

use crate::eventcount::EventCount;
use crate::primitives::{
    spin_for, spin_loop, Arc, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize,
    CachePadded, Ordering::*,
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

const EMPTY: u32 = 0;
const WRITTEN: u32 = 1;

/// Spare blocks a channel keeps for its senders (see "Reclamation"). Keeping 32, or up to
/// 1024 in a locked pool, streamed no faster between two vCPUs in the harness of [`Slot`]'s
/// note.
const SPARES: usize = 4;

/// Looks a receiver takes at an empty list, after the first one, before it raises
/// `RECEIVERS_WAIT` (see `recv`); the longest first hold, `2^MAX_HOLD` units; and the unit,
/// in TSC ticks. A clock, not a count of `pause`s: a `pause` lasts a few cycles on some cores
/// and over a hundred on others, so a hold counted in pauses was a different hold on each
/// machine. The cap (8192 ticks: 2–4 µs at 2–4 GHz) was chosen by sweeping it against kanal
/// on the Zen 4 guest and the 16-core Xeon of `docs/results/` (a probe; the stop note of
/// 2026-11-26 has its table); lab `rings`, section `unbounded`, checks the result against
/// kanal on each machine. A hold only grows while values keep coming (see
/// `Position::hold`), so an idle receiver never spends it.
const LOOKS: u32 = 4;
const MAX_HOLD: u32 = 7;
const HOLD_UNIT_TICKS: u64 = 64;

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

    /// Under loom, a mutable access to the cell: the model fails if a reader's move-out is
    /// not ordered before the block's reuse or `free`.
    fn reclaim(&self) {
        #[cfg(loom)]
        self.0.with_mut(|_| ());
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

/// A slot: its state beside its value, so that a receiver a few slots behind its sender
/// reads lines the sender has left. Tried and dropped in a scratch harness that streamed
/// 8-byte values between two vCPUs, alternated with kanal (the stop note of 2026-11-28 has
/// the figures):
/// - The states in an array of flags apart from the values. A `u64` slot took 9 bytes instead
///   of 16, and a growing queue was cheaper to fill on one thread. But all of a block's states
///   then share one line, and a receiver within a block of its sender takes that line from the
///   sender at every value: slower than this layout in the guest's slowest phase, mixed in
///   the others.
/// - Prefetching two lines ahead (the sender for writing, the receiver for reading, or the
///   receiver alone), and a receiver two or more blocks behind asking for the next block's
///   lines all at once: no gain.
struct Slot<T> {
    state: AtomicU32,
    value: ValueCell<T>,
}

#[repr(C)]
pub(crate) struct Block<T> {
    /// Slot `i`'s value has been moved out (the last slot's is unused: its reader reclaims).
    read: [AtomicBool; BLOCK_SLOTS],
    next: AtomicPtr<Block<T>>,
    /// Keeps the slots off the lines of `read` wherever the allocator puts the block (it
    /// aligns to 16 bytes: the last flag's line ends before byte 31 + 63 < 128). Aligning the
    /// block to lines instead made every allocation take glibc's slow aligned path.
    _gap: [u8; GAP],
    slots: [Slot<T>; BLOCK_SLOTS],
}

/// Bytes between `next` and the slots: the slots start at byte 128 of a block.
const GAP: usize = 128 - BLOCK_SLOTS - 1 - 8;

impl<T> Block<T> {
    fn new() -> Box<Block<T>> {
        Box::new(Block {
            next: AtomicPtr::new(ptr::null_mut()),
            slots: std::array::from_fn(|_| Slot {
                state: AtomicU32::new(EMPTY),
                value: ValueCell::new(),
            }),
            read: std::array::from_fn(|_| AtomicBool::new(false)),
            _gap: [0; GAP],
        })
    }

    /// Slot `offset` (< `BLOCK_SLOTS`).
    ///
    /// # Safety
    /// `block` lives: the caller holds an index in it, or reclaims it.
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

    /// Whether every slot but the last has been read (`Acquire`: their readers' move-outs
    /// come before what the caller does next with the block).
    ///
    /// # Safety
    /// `block` lives.
    unsafe fn all_read(block: *const Block<T>) -> bool {
        (0..BLOCK_SLOTS - 1).all(|i| {
            // SAFETY: the caller's.
            unsafe { (*block).read[i].load(Acquire) }
        })
    }
}

/// The blocks behind `head`: spares for the senders, and the deferred ones whose earlier
/// readers were not done when their last slot was read (see "Reclamation").
struct Recycler<T> {
    spares: [AtomicPtr<Block<T>>; SPARES],
    /// A stack linked through `next`: pushed with `compare_exchange`, emptied whole with
    /// `swap` (a stack that is only ever taken whole has no ABA problem).
    deferred: AtomicPtr<Block<T>>,
}

impl<T> Recycler<T> {
    fn new() -> Self {
        Recycler {
            spares: std::array::from_fn(|_| AtomicPtr::new(ptr::null_mut())),
            deferred: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// A block for a sender: a spare, reset, or a new one.
    fn block(&self) -> Box<Block<T>> {
        for spare in &self.spares {
            if spare.load(Relaxed).is_null() {
                continue;
            }
            let block = spare.swap(ptr::null_mut(), Acquire);
            if !block.is_null() {
                // SAFETY: spares come from `Box::into_raw` and nobody else uses them (`swap`
                // took this one; its reclaimer saw every slot read before `Release`-ing it).
                let block = unsafe { Box::from_raw(block) };
                block.next.store(ptr::null_mut(), Relaxed);
                for (slot, read) in block.slots.iter().zip(block.read.iter()) {
                    slot.state.store(EMPTY, Relaxed);
                    read.store(false, Relaxed);
                }
                return block;
            }
        }
        Block::new()
    }

    /// The reader of `block`'s last slot is done with it: reuse it, free it, or defer it.
    ///
    /// # Safety
    /// The caller read `block`'s last slot, so nobody will claim an index in it again.
    unsafe fn reclaim(&self, block: *mut Block<T>) {
        // SAFETY: the caller's: the block lives until reclaimed, which is done only here.
        unsafe {
            if Block::all_read(block) {
                self.keep(block);
            } else {
                self.defer(block);
            }
            // Deferred blocks whose readers have finished since.
            if !self.deferred.load(Relaxed).is_null() {
                let mut b = self.deferred.swap(ptr::null_mut(), Acquire);
                while !b.is_null() {
                    let next = (*b).next.load(Relaxed);
                    if Block::all_read(b) {
                        self.keep(b);
                    } else {
                        self.defer(b);
                    }
                    b = next;
                }
            }
        }
    }

    /// Pushes `block` on the deferred stack.
    ///
    /// # Safety
    /// `block` lives, is behind `head`, and is neither spare nor deferred.
    unsafe fn defer(&self, block: *mut Block<T>) {
        let mut top = self.deferred.load(Relaxed);
        loop {
            // SAFETY: the caller's; nobody reads a passed block's `next` but this stack.
            unsafe { (*block).next.store(top, Relaxed) };
            match self
                .deferred
                .compare_exchange_weak(top, block, Release, Relaxed)
            {
                Ok(_) => return,
                Err(t) => top = t,
            }
        }
    }

    /// Keeps `block` as a spare, or frees it if there are enough.
    ///
    /// # Safety
    /// Nobody uses `block` any more: every slot has been read (acquired), or it was never
    /// published (a spare a sender took and did not use; `block` resets it again).
    unsafe fn keep(&self, block: *mut Block<T>) {
        // SAFETY: the caller's.
        for slot in unsafe { &(*block).slots } {
            slot.value.reclaim();
        }
        for spare in &self.spares {
            if spare.load(Relaxed).is_null()
                && spare
                    .compare_exchange(ptr::null_mut(), block, Release, Relaxed)
                    .is_ok()
            {
                return;
            }
        }
        // SAFETY: the caller's.
        unsafe { Block::free(block) };
    }
}

impl<T> Drop for Recycler<T> {
    fn drop(&mut self) {
        for spare in &self.spares {
            let block = spare.load(Relaxed);
            if !block.is_null() {
                // SAFETY: a spare; the channel is going, nobody uses it.
                unsafe { Block::free(block) };
            }
        }
        let mut block = self.deferred.load(Relaxed);
        while !block.is_null() {
            // SAFETY: deferred blocks are behind `head`, their values moved out (every
            // receiver is gone); `next` links the stack.
            let next = unsafe { (*block).next.load(Relaxed) };
            // SAFETY: as above.
            unsafe { Block::free(block) };
            block = next;
        }
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
    /// In `head`: how long (`2^hold` units of `HOLD_UNIT_TICKS`) a receiver that finds the
    /// list empty waits before it looks again. A receiver that keeps up with a stream would
    /// otherwise look again at once, take the one value sent meanwhile, find the list empty
    /// again, and so on: each look loads `tail` and each value's line moves between the two
    /// CPUs while the sender still writes it, which slows the sender down (lab `rings`,
    /// section `unbounded`; the figures are in `docs/results.md`). It grows while the first
    /// look finds a value and falls when later looks do or none does, so that a receiver
    /// waiting for a reply (a ping-pong) looks again within a unit. Receivers store it
    /// (`Relaxed`: a hint). Unused in `tail`.
    hold: AtomicU32,
}

pub(crate) struct Chan<T> {
    tail: CachePadded<Position<T>>,
    head: CachePadded<Position<T>>,
    not_empty: CachePadded<EventCount>,
    /// Selects waiting for a value (see `select.rs`).
    recv_select: Observers,
    recycler: CachePadded<Recycler<T>>,
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
                hold: AtomicU32::new(0),
            }),
            head: CachePadded(Position {
                index: AtomicU64::new(0),
                block: AtomicPtr::new(first),
                tail_seen: AtomicU64::new(0),
                hold: AtomicU32::new(0),
            }),
            not_empty: CachePadded(EventCount::stretching()),
            recv_select: Observers::new(),
            recycler: CachePadded(Recycler::new()),
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
                next_block = Some(self.recycler.block());
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
                    if let Some(unused) = next_block.take() {
                        // We took it for the last slot, then lost that slot to another sender.
                        // SAFETY: a block nobody else has seen.
                        unsafe { self.recycler.keep(Box::into_raw(unused)) };
                    }
                    // SAFETY: our claim; the block lives until this slot is read, which
                    // waits for WRITTEN below.
                    let slot = unsafe { Block::slot(block, offset) };
                    // SAFETY: the slot is ours to write (claimed, never written before).
                    unsafe { slot.value.write(value) };
                    slot.state.store(WRITTEN, Release);
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
        Ok(unsafe { self.read(block, offset) })
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
    /// reclaims the block if this is its last slot.
    ///
    /// # Safety
    /// `(block, offset)` came from [`Self::claim_recv`] and was not read since.
    #[inline]
    pub(crate) unsafe fn read(&self, block: *mut Block<T>, offset: usize) -> T {
        // SAFETY: we hold an index in `block`, which lives until we read it.
        let slot = unsafe { Block::slot(block, offset) };
        let mut pauses = 0;
        while slot.state.load(Acquire) != WRITTEN {
            // Its sender claimed the index and has not written yet.
            pause(&mut pauses);
        }
        // SAFETY: our claim, written (WRITTEN acquired), read once: by us.
        let value = unsafe { slot.value.take() };
        if offset + 1 == BLOCK_SLOTS {
            // SAFETY: we read the last slot.
            unsafe { self.recycler.reclaim(block) };
        } else {
            // Our last touch of the block.
            // SAFETY: as above.
            unsafe { (*block).read[offset].store(true, Release) };
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
        // A receiver that finds the list empty looks again a few times before it raises
        // `RECEIVERS_WAIT`: the first look after `2^hold` units, the next ones 1, 2, 4 and 8
        // units apart. The hold adapts to the stream (see `Position::hold`).
        match self.try_recv() {
            Err(Nothing::Empty) => {}
            r => return r.map_err(Some),
        }
        // No looks under loom (they only add schedules), nor past the deadline.
        if !cfg!(loom) && !deadline.is_some_and(|d| d.has_passed()) {
            let hold = self.head.hold.load(Relaxed);
            for look in 0..=LOOKS {
                let units = if look == 0 {
                    1u64 << hold
                } else {
                    1 << (look - 1)
                };
                spin_for(units * HOLD_UNIT_TICKS);
                match self.try_recv() {
                    Err(Nothing::Empty) => {}
                    r => {
                        // Found at the first look: a stream; hold back longer next time.
                        // Later: whatever comes, comes slower than the hold; shorten it.
                        let next = if look == 0 {
                            (hold + 1).min(MAX_HOLD)
                        } else {
                            hold.saturating_sub(look)
                        };
                        if next != hold {
                            self.head.hold.store(next, Relaxed);
                        }
                        return r.map_err(Some);
                    }
                }
            }
            if hold != 0 {
                self.head.hold.store(0, Relaxed);
            }
        }
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

#[cfg(all(test, not(loom)))]
mod tests {
    use crate::mpmc::unbounded;

    /// Blocks go round: two receivers take values across many blocks, with a value on the
    /// heap in each, so that blocks are deferred, reused as spares and freed. Under Miri
    /// (named for CI's `mpmc` filter) this checks that no block is used after its reuse or
    /// free and none leaks; natively it checks every value arrives once.
    #[test]
    fn mpmc_unbounded_blocks_are_reused_and_freed() {
        let rounds = if cfg!(miri) { 4 } else { 200 };
        let per_round: u64 = 3 * super::BLOCK_SLOTS as u64 + 5;
        let (tx, rx) = unbounded::<Box<u64>>();
        let other = {
            let rx = rx.clone();
            std::thread::spawn(move || {
                let (mut n, mut sum) = (0u64, 0u64);
                while let Ok(v) = rx.recv() {
                    n += 1;
                    sum += *v;
                }
                (n, sum)
            })
        };
        let (mut n, mut sum) = (0u64, 0u64);
        for round in 0..rounds {
            for v in 0..per_round {
                tx.send(Box::new(round * per_round + v)).unwrap();
            }
            // Take some here, leave the rest to the other receiver or the next round.
            for _ in 0..per_round / 2 {
                if let Ok(v) = rx.try_recv() {
                    n += 1;
                    sum += *v;
                }
            }
        }
        drop(tx);
        while let Ok(v) = rx.recv() {
            n += 1;
            sum += *v;
        }
        let (n2, sum2) = other.join().unwrap();
        let total = rounds * per_round;
        assert_eq!(n + n2, total);
        assert_eq!(sum + sum2, total * (total - 1) / 2);
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use crate::mpmc::{unbounded, TryRecvError};
    use loom::thread;

    /// Checks `f` under loom with this preemption bound and branch limit.
    fn check(preemption_bound: usize, max_branches: usize, f: impl Fn() + Sync + Send + 'static) {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(preemption_bound);
        b.max_branches = max_branches;
        b.check(f);
    }

    /// Two senders, one receiver, three values across a block boundary (two slots per block
    /// under loom): the claims, the gap, the linking of the next block, the reclamation by the
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
        check(1, 20_000, || {
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
        check(2, 20_000, || one_sender_in_order(3));
    }

    /// A sender thread sends `1..=n`; this thread receives them, in order.
    fn one_sender_in_order(n: u32) {
        let (tx, rx) = unbounded::<u32>();
        let s = thread::spawn(move || {
            for v in 1..=n {
                tx.send(v).unwrap();
            }
        });
        let got: Vec<u32> = (0..n).map(|_| rx.recv().unwrap()).collect();
        assert_eq!(got, (1..=n).collect::<Vec<u32>>());
        s.join().unwrap();
    }

    /// Two receivers take three values across a block boundary, so a block's earlier slot may
    /// be read after its last one: the reclaimer defers the block, and it is freed with the
    /// channel. Reclaiming a block touches every value cell mutably under loom, so a mutant
    /// that reuses a block without looking at the `read` flags fails this model (a data race
    /// with the earlier slot's move-out).
    #[test]
    fn list_two_receivers_reclaim_in_turn() {
        check(2, 20_000, || {
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

    /// Two receivers take five values, three blocks under loom: a block deferred while its
    /// earlier slot's reader is in flight is looked at again by the next block's reclaimer,
    /// which makes it a spare only once that reader is done.
    #[test]
    fn list_deferred_block_is_reclaimed_later() {
        check(2, 20_000, || {
            let (tx, rx) = unbounded::<u32>();
            for v in 1..=5 {
                tx.send(v).unwrap();
            }
            let other = {
                let rx = rx.clone();
                thread::spawn(move || rx.iter().sum::<u32>())
            };
            drop(tx);
            let mine: u32 = rx.iter().sum();
            assert_eq!(mine + other.join().unwrap(), 15);
        });
    }

    /// One sender thread and one receiver, five values over three blocks: the first block is
    /// reclaimed as a spare and taken again by the sender for the third, so the reset of a
    /// reused block and its publication are checked (a `Relaxed` hand-over of spares fails).
    #[test]
    fn list_spare_block_is_reused() {
        check(2, 50_000, || one_sender_in_order(5));
    }

    /// The last receiver goes while a sender is sending: the value is either refused (handed
    /// back) or dropped with the queue, never both, never leaked.
    #[test]
    fn list_receiver_leaves_during_a_send() {
        check(2, 20_000, || {
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
