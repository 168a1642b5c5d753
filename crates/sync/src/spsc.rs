//! A bounded single-producer single-consumer ring that blocks, and costs nothing for it when
//! nobody waits: with no waiter, a push or a pop executes no `lock`ed instruction and no fence.
//!
//! ```
//! use spindle_sync::spsc;
//!
//! let (mut tx, mut rx) = spsc::ring::<u64>(1024);
//! let consumer = std::thread::spawn(move || {
//!     let mut sum = 0;
//!     while let Ok(v) = rx.pop() {
//!         sum += v; // blocks while the ring is empty; errs once the producer is gone
//!     }
//!     sum
//! });
//! for i in 1..=100 {
//!     tx.push(i).unwrap(); // blocks while the ring is full
//! }
//! drop(tx);
//! assert_eq!(consumer.join().unwrap(), 5050);
//! ```
//!
//! # Protocol
//!
//! Two [`SpEventCount`]s, each on its own cache line, hold the indices, and each side is the
//! single producer of one of them:
//!
//! - `written`: version `2·tail + producer_gone`, published by the producer;
//! - `read`: version `2·head + consumer_gone`, published by the consumer.
//!
//! `tail` and `head` count items pushed and popped: modulo 2^64 in the handles, modulo 2^63 in
//! the versions (the shift drops the top bit). The slot array has a power of two of slots,
//! `S ≥ capacity`, and slot `i mod S` holds item `i` (2^63 is a multiple of `S`, so this
//! survives the indices' wrap): a position is an index masked, with no counter of its own to
//! keep. Each side also keeps, in its own handle, its index and what it last saw of the other
//! side: the producer its `limit` (the head seen, plus the capacity: the index the ring is
//! full at), the consumer its `cached_tail`. So a side reads the other side's cache line only
//! when its cached view says the ring is full (producer) or empty (consumer), and its fast
//! path is one comparison of two words of its own. A fresh look turns the other side's 63-bit
//! index into a full one by the distance between them, which is at most the capacity.
//!
//! ```text
//! try_push(x):                                   try_pop():
//!   if tail == limit:                              if head == cached_tail:
//!       r = read.value()                               w = written.value()
//!       limit = tail + capacity - (2·tail - r)/2       cached_tail = head + (w - 2·head)/2
//!       still full → Full (Disconnected if r & 1)      still empty → Empty (Disconnected if w & 1)
//!   slot[tail mod S] = x                           x = slot[head mod S]
//!   tail += 1; written.publish(2·tail)             head += 1; read.publish(2·head)
//! ```
//!
//! (The differences are taken on versions with the gone bit cleared, modulo 2^64, and halved:
//! the distance modulo 2^63.) The blocking forms take the same fast path, and wait only when
//! a fresh look still finds the ring full or empty, in functions that are given the shared
//! ring and an index, never the handle (see `wait_for_room`).
//!
//! **Invariants.** `head ≤ tail ≤ head + capacity` (modulo 2^63): the producer writes slot
//! `tail` only after seeing `head > tail - capacity`, so that slot's previous item has been
//! moved out; the consumer reads slot `head` only after seeing `tail > head`, so it has been
//! written. Slots `[head, tail)` hold initialised items owned by the ring; all others are
//! uninitialised. A gone bit, once set, stays set (only its side publishes, and it publishes
//! nothing after it is gone).
//!
//! **Orderings.** `publish` is a `Release` store and `value` an `Acquire` load: the item
//! written to a slot happens-before the consumer's read of it, and the consumer's move out of
//! a slot happens-before the producer's next write to it. Nothing else is shared.
//!
//! **Linearisation points.** A push: the producer's store of the new `written` version. A pop:
//! the consumer's load that showed `tail > head` (its item is then the oldest and only it can
//! take it). `Full` and `Empty`: the reload of the other side's version.
//!
//! **Blocking, and why no wake-up is lost.** A consumer that finds the ring empty looks again
//! a few times before it waits (the first look after a hold that adapts to a stream, see
//! `HOLD_UNIT_TICKS`): loads, and a store of the hold (a hint), which change nothing below.
//! It then waits on `written` for the exact version it saw (`2·head`, or with the gone bit):
//! any push or the producer's drop changes that version, and [`SpEventCount`] guarantees that
//! a wait on a version returns once the version differs. The producer blocks on `read` the
//! same way. So the blocking forms inherit the event count's argument (see [`eventcount`]),
//! including its reliance on interrupts; `push`/`pop` add no condition of their own: the
//! waited-on version *is* the index.
//!
//! **Disconnection.** Dropping a side publishes its version with the gone bit, which wakes a
//! blocked other side. The consumer drains what was pushed before the producer left, then
//! gets `Disconnected`. The producer learns that the consumer left when it reloads `read`,
//! that is when its cached view says the ring is full: a push into an abandoned ring with room
//! succeeds (its item is dropped with the ring), so that a push never reads the consumer's
//! line; [`Producer::is_abandoned`] asks at any time. Items left in the ring are dropped when
//! the second side goes, each exactly once.
//!
//! **Cost.** With no waiter, a push is the slot write, a store of the new version and a load
//! of the sleepers word (on a line of its own that nobody writes while nobody waits); a pop is
//! the slot read and the same store and load on the other event count. A non-blocking ring
//! (rtrb) does the same minus the loads. A consumer that sleeps before nearly every item (a
//! producer that pushes once a millisecond) asks for fenced signals: each push then also
//! issues an `mfence` and wakes it, and the consumer sleeps with no barrier of its own (the
//! event count's fact 4). A side about to block withdraws such a request from the other side's
//! count (the other side has work then): once the consumer stops sleeping, pushes stay fenced
//! until it waits again or the producer finds the ring full.
//!
//! The slot array starts on a 128-byte boundary, so that an item of 64 bytes (or a multiple)
//! fills whole cache lines: the consumer reading one item never shares a line with the item
//! the producer is writing next.
//!
//! [`eventcount`]: crate::eventcount

use std::alloc::Layout;
use std::marker::PhantomData;
use std::mem::{ManuallyDrop, MaybeUninit};
use std::ptr::NonNull;
use std::time::Duration;

use crate::eventcount::SpEventCount;
use crate::primitives::{spin_for, spin_loop, Arc, AtomicU32, CachePadded, Ordering::Relaxed};
use crate::time::Deadline;

crate::channel::errors! {
    put: TryPushError, PushTimeoutError, PushError, "push";
    take: TryPopError, PopTimeoutError, PopError, "pop";
}

/// Indices live in bits 1..64 of a version: they count modulo 2^63.
const INDEX_MASK: u64 = u64::MAX >> 1;
const GONE: u64 = 1;

/// The version that publishes index `i` (modulo 2^63).
#[inline(always)]
fn version(i: u64) -> u64 {
    i << 1
}

/// A new ring that holds up to `capacity` items: its producer and its consumer. A ring of
/// capacity 0 is accepted, as rtrb accepts one: it is always full and always empty
/// (`try_push` answers `Full`, `try_pop` `Empty`, and the blocking forms wait until the other
/// side goes or their deadline passes).
///
/// The slot array is `capacity` rounded up to a power of two (a ring of 1000 `u64`s takes
/// 1024 slots), so that a slot's position is its item's index masked: no position counter to
/// keep beside the index on each push and pop.
///
/// The first ring of a process also registers the process for `membarrier`, the barrier a
/// side issues before it sleeps (see [`SpEventCount`]): registering waits for an RCU grace
/// period, milliseconds once per process, which is paid here rather than by the first wait
/// that sleeps.
///
/// # Panics
/// If `capacity` exceeds `2^62` or the slots would not fit in memory (as
/// `Vec::with_capacity` does).
#[inline]
pub fn ring<T>(capacity: usize) -> (Producer<T>, Consumer<T>) {
    ring_at(capacity, 0)
}

/// A ring whose indices start at `start` rather than 0 (the tests start them near the points
/// where they wrap: 2^63 in the versions, 2^64 in the handles).
///
/// Inline, with the allocation out of line: the handles are then made in the caller's frame
/// from values in registers. Returned through memory by a call, their address would escape to
/// that call, and the compiler would keep their indices in memory around every push and pop.
#[inline]
fn ring_at<T>(capacity: usize, start: u64) -> (Producer<T>, Consumer<T>) {
    let shared = Shared::<T>::new(capacity, start);
    (
        Producer {
            tail: start,
            limit: start.wrapping_add(capacity as u64),
            shared: ManuallyDrop::new(shared.clone()),
            _not_sync: PhantomData,
        },
        Consumer {
            head: start,
            cached_tail: start,
            shared: ManuallyDrop::new(shared),
            _not_sync: PhantomData,
        },
    )
}

struct Shared<T> {
    written: CachePadded<SpEventCount>,
    read: CachePadded<SpEventCount>,
    /// The consumer's hold (see `wait_for_items`): on a line of its own, written only on the
    /// consumer's wait path, read by nobody else.
    hold: CachePadded<AtomicU32>,
    /// The most items the ring holds (at most `slots.len()`).
    capacity: usize,
    /// A power of two of slots (one slot, unused, for capacity 0).
    slots: Slots<T>,
}

/// The slot array: `len` uninitialised `T`s, starting on a 128-byte boundary (two cache lines,
/// as `CachePadded`), so that an item whose size is a multiple of 64 bytes takes whole cache
/// lines of its own. From a `Vec` (aligned to `T` only) a 64-byte item straddles two lines,
/// one of them shared with the next item, which the producer is writing while the consumer
/// reads this one.
struct Slots<T> {
    ptr: NonNull<MaybeUninit<T>>,
    len: usize,
}

impl<T> Slots<T> {
    /// The alignment of the slot array.
    const ALIGN: usize = 128;

    fn layout(len: usize) -> Layout {
        Layout::array::<T>(len)
            .and_then(|l| l.align_to(Self::ALIGN))
            .unwrap_or_else(|_| panic!("spsc::ring: {len} slots do not fit in memory"))
    }

    /// `len > 0` slots.
    fn new(len: usize) -> Slots<T> {
        let layout = Self::layout(len);
        let ptr = if layout.size() == 0 {
            NonNull::dangling() // zero-sized items: nothing to allocate
        } else {
            // SAFETY: the layout's size is not zero.
            let p = unsafe { std::alloc::alloc(layout) };
            match NonNull::new(p.cast()) {
                Some(p) => p,
                None => std::alloc::handle_alloc_error(layout),
            }
        };
        Slots { ptr, len }
    }

    fn len(&self) -> usize {
        self.len
    }
}

impl<T> Drop for Slots<T> {
    fn drop(&mut self) {
        let layout = Self::layout(self.len);
        if layout.size() != 0 {
            // SAFETY: allocated in `new` with this layout; the items were dropped (or moved
            // out) by the ring before.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr().cast(), layout) };
        }
    }
}

// SAFETY: items move from the producer's thread to the consumer's (T: Send); each slot is
// accessed by one side at a time, handed over by the Release/Acquire versions (see above).
unsafe impl<T: Send> Send for Shared<T> {}
// SAFETY: as above; `&Shared` only gives access to slots through the side that owns them.
unsafe impl<T: Send> Sync for Shared<T> {}

impl<T> Shared<T> {
    /// The shared part of a ring of `capacity` whose indices start at `start`.
    #[inline(never)]
    fn new(capacity: usize, start: u64) -> Arc<Shared<T>> {
        assert!(
            capacity <= 1 << 62,
            "spsc::ring: capacity {capacity} exceeds 2^62"
        );
        SpEventCount::prepare_barrier();
        let slots = Slots::new(capacity.next_power_of_two());
        let shared = Arc::new(Shared {
            written: CachePadded(SpEventCount::new()),
            read: CachePadded(SpEventCount::new()),
            hold: CachePadded(AtomicU32::new(0)),
            capacity,
            slots,
        });
        if start != 0 {
            // Nobody else holds the ring yet: this thread may publish on both counts.
            shared.written.publish(version(start));
            shared.read.publish(version(start));
        }
        shared
    }

    fn capacity(&self) -> usize {
        self.capacity
    }

    /// The slot position of item `index`.
    #[inline]
    fn position(&self, index: u64) -> usize {
        index as usize & (self.slots.len() - 1)
    }

    /// The first slot, as a raw pointer valid for the whole array (the allocation's own
    /// pointer, so that chunks and the handles may offset it).
    #[inline]
    fn base(&self) -> *mut MaybeUninit<T> {
        self.slots.ptr.as_ptr()
    }

    /// The `n ≤ capacity` slots of items `index..index + n`, as raw runs (start and length of
    /// each), the second empty unless they wrap: what the chunks hand out.
    #[inline]
    fn runs(&self, index: u64, n: usize) -> ((*mut T, usize), (*mut T, usize)) {
        let pos = self.position(index);
        let first = n.min(self.slots.len() - pos);
        let base = self.base().cast::<T>();
        // SAFETY: `pos` < the slot count: the offset stays in the slot array.
        ((unsafe { base.add(pos) }, first), (base, n - first))
    }

    /// The slot at `pos`, as a raw pointer.
    #[inline]
    fn slot(&self, pos: usize) -> *mut MaybeUninit<T> {
        debug_assert!(pos < self.slots.len());
        // SAFETY: in bounds (every caller passes a `position`, below the slot count).
        unsafe { self.base().add(pos) }
    }
}

impl<T> Drop for Shared<T> {
    fn drop(&mut self) {
        // Both sides are gone: drop the items still in the ring, each once.
        let head = self.read.value() >> 1;
        let tail = self.written.value() >> 1;
        let n = tail.wrapping_sub(head) & INDEX_MASK;
        for i in 0..n {
            // SAFETY: the slots of items [head, tail) hold initialised items nobody else can
            // reach.
            unsafe { (*self.slot(self.position(head.wrapping_add(i)))).assume_init_drop() };
        }
    }
}

/// The writing side of an [`spsc` ring](ring): `Send`, neither `Clone` nor `Sync`.
pub struct Producer<T> {
    /// Items pushed (modulo 2^64; the version keeps it modulo 2^63).
    tail: u64,
    /// The index the ring is full at, by the consumer's head as last seen: that head plus
    /// the capacity.
    limit: u64,
    /// Dropped by hand, moved out first (see `Drop`).
    shared: ManuallyDrop<Arc<Shared<T>>>,
    _not_sync: PhantomData<std::cell::Cell<()>>,
}

/// The reading side of an [`spsc` ring](ring): `Send`, neither `Clone` nor `Sync`.
pub struct Consumer<T> {
    /// Items popped (modulo 2^64; the version keeps it modulo 2^63).
    head: u64,
    /// The producer's tail as last seen.
    cached_tail: u64,
    /// Dropped by hand, moved out first (see `Drop`).
    shared: ManuallyDrop<Arc<Shared<T>>>,
    _not_sync: PhantomData<std::cell::Cell<()>>,
}

// SAFETY: a handle owns its side; moving it moves the side (T: Send, see Shared).
unsafe impl<T: Send> Send for Producer<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for Consumer<T> {}

/// Why [`wait_off`] gave up.
enum Stopped {
    Gone,
    Timeout,
}

/// The producer's limit (the index the ring is full at) by a fresh look at the consumer's
/// head, for a producer at `tail`; and whether the consumer is gone.
#[inline]
fn room<T>(shared: &Shared<T>, tail: u64) -> (u64, bool) {
    let r = shared.read.value();
    // The head lies at most `capacity` behind the tail; the difference is taken modulo 2^63
    // as versions hold them (shifted, so that no 63-bit mask takes a register).
    let used = version(tail).wrapping_sub(r & !GONE) >> 1;
    let free = shared.capacity() as u64 - used;
    (tail.wrapping_add(free), r & GONE != 0)
}

/// The producer's tail by a fresh look, for a consumer at `head`; and whether the producer is
/// gone.
#[inline]
fn items<T>(shared: &Shared<T>, head: u64) -> (u64, bool) {
    let w = shared.written.value();
    // At most `capacity` ahead of the head (modulo 2^63, as in `room`).
    let ready = (w & !GONE).wrapping_sub(version(head)) >> 1;
    (head.wrapping_add(ready), w & GONE != 0)
}

/// Defines a cold wait path that cannot unwind: `extern "C"`, whose calls the compiler knows
/// never unwind (a panic reaching its boundary aborts the process; nothing in these paths
/// panics). A call that may unwind gives the caller's loop a landing pad, which drops the
/// handle and so keeps it in memory: the compiler would then store the handle's index to
/// memory on every push or pop, before the `Release` store of the version and the producer's
/// `asm` look at the sleepers word (both may read memory a landing pad can reach), one store
/// more per item than the ring itself does, which costs the most where stores are what the
/// core waits for (streaming between two CPUs: the lab's `rings`). Rust calls these, never C,
/// and both sides are compiled together: the ABI is chosen for that guarantee alone.
/// Under loom, whose checks panic out of the model, they keep Rust's ABI.
macro_rules! cold_wait {
    ($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty $body:block) => {
        $(#[$doc])*
        #[cold]
        #[inline(never)]
        #[cfg(not(loom))]
        #[allow(improper_ctypes_definitions)]
        extern "C" fn $name<T>($($arg: $ty),*) -> $ret $body

        $(#[$doc])*
        #[cold]
        #[inline(never)]
        #[cfg(loom)]
        fn $name<T>($($arg: $ty),*) -> $ret $body
    };
}

cold_wait! {
    /// Block until item `tail` has a free slot: the new limit, or why not.
    ///
    /// This and `wait_for_items` are free functions of the shared ring and an index on
    /// purpose: the blocking paths pass them nothing of the handle, so the handle's address
    /// never escapes the caller's loop and the compiler keeps its fields in registers around
    /// the fast path (with `&mut self` passed to a cold function, the fields went through the
    /// stack on every push and pop). And the handle's methods stay small enough to inline.
    fn wait_for_room(
        shared: &Shared<T>,
        tail: u64,
        deadline: Option<Deadline>,
    ) -> Result<u64, Stopped> {
        for _ in 0..quick_polls(&shared.read) {
            spin_loop();
            let (limit, _) = room(shared, tail);
            if limit != tail {
                return Ok(limit);
            }
        }
        loop {
            let (limit, gone) = room(shared, tail);
            if limit != tail {
                return Ok(limit);
            }
            if gone {
                return Err(Stopped::Gone);
            }
            // Full: wait for the head (`tail - capacity`) to move.
            let head = tail.wrapping_sub(shared.capacity() as u64);
            wait_off(&shared.read, &shared.written, version(head), deadline)?;
        }
    }
}

cold_wait! {
    /// Block until item `head` is in the ring: the new cached tail, or why not.
    fn wait_for_items(
        shared: &Shared<T>,
        head: u64,
        deadline: Option<Deadline>,
    ) -> Result<u64, Stopped> {
        // Quick looks first, the first one after the consumer's hold (see `HOLD_UNIT_TICKS`).
        let polls = quick_polls(&shared.written);
        if polls > 0 {
            let hold = shared.hold.load(Relaxed);
            for look in 0..polls {
                if look == 0 && hold > 0 {
                    spin_for(HOLD_UNIT_TICKS << hold);
                } else {
                    spin_loop();
                }
                let (tail, _) = items(shared, head);
                if tail != head {
                    // Found at the first look, with the ring less than half full: a stream
                    // the consumer keeps up with; hold back longer next time. Otherwise
                    // (found later, or the producer close to filling the ring), shorter.
                    let half = shared.capacity() as u64 / 2;
                    let next = if look == 0 && tail.wrapping_sub(head) < half {
                        (hold + 1).min(MAX_HOLD)
                    } else {
                        hold.saturating_sub(1)
                    };
                    if next != hold {
                        shared.hold.store(next, Relaxed);
                    }
                    return Ok(tail);
                }
            }
            if hold != 0 {
                shared.hold.store(0, Relaxed);
            }
        }
        loop {
            let (tail, gone) = items(shared, head);
            if tail != head {
                return Ok(tail);
            }
            if gone {
                return Err(Stopped::Gone);
            }
            wait_off(&shared.written, &shared.read, version(head), deadline)?;
        }
    }
}

/// The consumer's hold: a consumer that keeps up with a stream finds the ring empty after
/// nearly every item, looks again at once and takes the one item pushed meanwhile, so that
/// each look pulls the producer's `written` line and each item's line moves between the two
/// CPUs while the producer is still writing the next one: both sides slow down (lab `rings`,
/// sections `stream8` and `stream64`). So its first quick look waits `2^hold` units of this
/// many TSC ticks, `hold` growing (up to `MAX_HOLD`: 8192 ticks, 2–4 µs) while that first look
/// finds items and the ring less than half full, falling when it finds the ring closer to
/// full or only a later look finds an item, and reset when no look does. A consumer waiting
/// for a reply (ping-pong) or for a slow producer keeps `hold` at 0: its first look comes one
/// `pause` after the empty ring, as before. The unit and the cap are those of the unbounded
/// channel's receivers (`list.rs`). Ticks, not pauses: see `spin_for`.
const HOLD_UNIT_TICKS: u64 = 64;
const MAX_HOLD: u32 = 7;

/// How many times a side that found the ring full or empty looks again, a `pause` before
/// each look, before it waits on the other side's event count `ec`: a reply that comes within
/// a few hundred nanoseconds (ping-pong between two CPUs) is then seen in a loop of a load and
/// a pause, as a ring that never blocks sees it, rather than on the way into and back out of
/// the event count's wait. A few looks are enough: more would only delay the sleep, and a
/// second pause per look delays seeing the reply. None once that count's waiters have learnt
/// to yield at once (their producer shares their CPU, which these looks would only keep from
/// running), none once their spins go unanswered (a slow producer: the looks would only add to
/// the CPU time of a consumer that sleeps before every item), and none under loom. The lab's
/// `rings` measures each side of this: ping-pong on two CPUs against rtrb, on one CPU against
/// kanal, and the idle consumer's CPU time.
#[inline]
fn quick_polls(ec: &SpEventCount) -> u32 {
    const QUICK_POLLS: u32 = if cfg!(loom) { 0 } else { 8 };
    ec.polls_worth_spinning(QUICK_POLLS)
}

/// Block until the other side's index in `ec` is no longer the one of version `at` (what this
/// side last saw, and found the ring full or empty at; its gone bit ignored). `Ok` when it
/// moved (or had already moved), `Gone` when it still stands and the other side is gone,
/// `Timeout` at the deadline.
///
/// `other` is the other side's count: about to wait, this side withdraws a request for fenced
/// signals left there (the other side has work: the ring is full or empty), so that its
/// signals do not stay fenced once it stops sleeping. Here, not in the caller: a second call
/// on the caller's path nearly doubled the time per item of the lab's `rings` stream section
/// (8-byte items between two CPUs, on the Zen 4 guest).
#[inline]
fn wait_off(
    ec: &SpEventCount,
    other: &SpEventCount,
    at: u64,
    deadline: Option<Deadline>,
) -> Result<(), Stopped> {
    let seen = ec.value();
    if seen & !GONE != at & !GONE {
        return Ok(());
    }
    if seen & GONE != 0 {
        return Err(Stopped::Gone);
    }
    other.withdraw_unneeded_request();
    ec.wait(seen, deadline)
        .map(drop)
        .map_err(|_| Stopped::Timeout)
}

/// A chunk was asked for with more slots than are free (or items than are readable).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooFew(pub usize);

/// [`Consumer::peek`] found no item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeekError {
    /// The ring is empty.
    Empty,
}

impl std::fmt::Display for PeekError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the ring is empty")
    }
}
impl std::error::Error for PeekError {}

impl std::fmt::Display for TooFew {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "only {} slots or items are available", self.0)
    }
}
impl std::error::Error for TooFew {}

impl<T> Producer<T> {
    /// The number of slots.
    pub fn capacity(&self) -> usize {
        self.shared.capacity()
    }

    /// Items in the ring now, as this side sees it (reads the consumer's index).
    pub fn len(&self) -> usize {
        let head = self.shared.read.value() >> 1;
        (self.tail.wrapping_sub(head) & INDEX_MASK) as usize
    }

    /// Whether the ring is empty now (reads the consumer's index).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Free slots now (reads the consumer's index).
    pub fn slots(&self) -> usize {
        self.capacity() - self.len()
    }

    /// Whether the ring is full now (reads the consumer's index).
    pub fn is_full(&self) -> bool {
        self.slots() == 0
    }

    /// Whether the consumer is gone.
    pub fn is_abandoned(&self) -> bool {
        self.shared.read.value() & GONE != 0
    }

    /// Free slots by the cached head, reloading it if fewer than `want`; and whether the
    /// consumer is gone (known only when it reloaded).
    #[inline]
    fn free(&mut self, want: usize) -> (usize, bool) {
        let free = self.limit.wrapping_sub(self.tail);
        if free >= want as u64 {
            return (free as usize, false);
        }
        let (limit, gone) = room(&self.shared, self.tail);
        self.limit = limit;
        (limit.wrapping_sub(self.tail) as usize, gone)
    }

    /// Push without blocking.
    #[inline]
    pub fn try_push(&mut self, value: T) -> Result<(), TryPushError<T>> {
        if self.tail == self.limit {
            let (limit, gone) = room(&self.shared, self.tail);
            self.limit = limit;
            if limit == self.tail {
                return Err(if gone {
                    TryPushError::Disconnected(value)
                } else {
                    TryPushError::Full(value)
                });
            }
        }
        self.write_and_publish(value);
        Ok(())
    }

    /// Write item `tail` and publish it. The caller saw `tail != limit`.
    #[inline(always)]
    fn write_and_publish(&mut self, value: T) {
        debug_assert!(self.tail != self.limit);
        // SAFETY: item `tail`'s slot is free (head > tail - capacity was seen with Acquire).
        unsafe { (*self.shared.slot(self.shared.position(self.tail))).write(value) };
        self.tail = self.tail.wrapping_add(1);
        self.shared.written.publish(version(self.tail));
    }

    /// Push, blocking while the ring is full. Fails only when the consumer is gone.
    #[inline]
    pub fn push(&mut self, value: T) -> Result<(), PushError<T>> {
        self.push_deadline(value, None).map_err(|e| match e {
            PushTimeoutError::Disconnected(v) | PushTimeoutError::Timeout(v) => PushError(v),
        })
    }

    /// Push, blocking while the ring is full for at most `timeout`.
    pub fn push_timeout(&mut self, value: T, timeout: Duration) -> Result<(), PushTimeoutError<T>> {
        self.push_deadline(value, Some(Deadline::after(timeout)))
    }

    /// Push, blocking while the ring is full until `deadline` (`None`: no deadline).
    #[inline]
    pub fn push_deadline(
        &mut self,
        value: T,
        deadline: Option<Deadline>,
    ) -> Result<(), PushTimeoutError<T>> {
        // Wait for a free slot first and move the value only then, once, into it: a value
        // moved in and out of `try_push`'s result on each try goes through the stack several
        // times, and those stores compete for the store buffer with the slot's (lab `rings`,
        // 64-byte items).
        if self.tail == self.limit {
            // A fresh look at the head, inline (on one thread the cached one is always
            // stale), and only then the cold path that waits.
            self.limit = room(&self.shared, self.tail).0;
        }
        if self.tail == self.limit {
            match wait_for_room(&self.shared, self.tail, deadline) {
                Ok(limit) => self.limit = limit,
                Err(Stopped::Gone) => return Err(PushTimeoutError::Disconnected(value)),
                Err(Stopped::Timeout) => return Err(PushTimeoutError::Timeout(value)),
            }
        }
        self.write_and_publish(value);
        Ok(())
    }

    /// Up to `n` free slots to write in place, as at most two slices (the ring wraps).
    /// Fails with the number of free slots if there are fewer than `n`.
    pub fn write_chunk_uninit(&mut self, n: usize) -> Result<WriteChunkUninit<'_, T>, TooFew> {
        let (free, _) = self.free(n);
        if free < n {
            return Err(TooFew(free));
        }
        Ok(WriteChunkUninit { producer: self, n })
    }

    /// `n` free slots holding `T::default()`, to overwrite in place and then commit (rtrb's
    /// `write_chunk`: the defaults make the slots safe to hand out as `&mut [T]`). Fails with
    /// the number of free slots if there are fewer than `n`. (Should `T::default()` panic, the
    /// defaults made before it leak.)
    pub fn write_chunk(&mut self, n: usize) -> Result<WriteChunk<'_, T>, TooFew>
    where
        T: Default,
    {
        let mut uninit = self.write_chunk_uninit(n)?;
        let (a, b) = uninit.as_mut_slices();
        for slot in a.iter_mut().chain(b.iter_mut()) {
            slot.write(T::default());
        }
        Ok(WriteChunk {
            producer: uninit.producer,
            n,
        })
    }

    /// Push copies of as many items of `items` as fit now; returns how many. One version
    /// store for the lot.
    pub fn push_slice(&mut self, items: &[T]) -> usize
    where
        T: Copy,
    {
        let (free, _) = self.free(items.len());
        let n = free.min(items.len());
        if n == 0 {
            return 0;
        }
        let mut chunk = WriteChunkUninit { producer: self, n };
        let (a, b) = chunk.as_mut_slices();
        let k = a.len();
        for (slot, item) in a.iter_mut().zip(items) {
            slot.write(*item);
        }
        for (slot, item) in b.iter_mut().zip(&items[k..]) {
            slot.write(*item);
        }
        // SAFETY: all n slots were just written.
        unsafe { chunk.commit_all() };
        n
    }

    /// Make `n` items written in place visible to the consumer.
    fn commit(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        self.tail = self.tail.wrapping_add(n as u64);
        self.shared.written.publish(version(self.tail));
    }
}

impl<T> Drop for Producer<T> {
    /// Inline: a call would take the handle's address, and a handle whose address escapes
    /// anywhere in the caller's function lives in memory there, its index stored on every push
    /// (see `cold_wait!`).
    #[inline]
    fn drop(&mut self) {
        // The gone bit wakes a consumer blocked on `written`.
        self.shared.written.publish(version(self.tail) | GONE);
        // Dropping the `Arc` in place would hand `Arc::drop_slow` the address of this handle,
        // which then counts as escaped in the caller's whole function: the compiler would keep
        // the handle's fields in memory, not registers, around every push. Moved out first, the
        // `Arc` drops from a temporary of its own.
        // SAFETY: `shared` is not used again; the handle is being dropped.
        drop(unsafe { ManuallyDrop::take(&mut self.shared) });
    }
}

/// Free slots of a ring, to be written in place and then committed: see
/// [`Producer::write_chunk_uninit`]. Dropping it without committing pushes nothing (written
/// values are then leaked, not dropped).
pub struct WriteChunkUninit<'a, T> {
    producer: &'a mut Producer<T>,
    n: usize,
}

impl<T> WriteChunkUninit<'_, T> {
    /// The chunk's slots, in ring order: the second slice is empty unless the chunk wraps.
    pub fn as_mut_slices(&mut self) -> (&mut [MaybeUninit<T>], &mut [MaybeUninit<T>]) {
        let ((a, na), (b, nb)) = self.producer.shared.runs(self.producer.tail, self.n);
        // SAFETY: the slots of items `tail..tail + n` (wrapping) are free and only this
        // producer may touch them until it commits; the two runs are disjoint and in bounds,
        // and `MaybeUninit<T>` has `T`'s layout.
        unsafe {
            (
                std::slice::from_raw_parts_mut(a.cast(), na),
                std::slice::from_raw_parts_mut(b.cast(), nb),
            )
        }
    }

    /// The number of slots in the chunk.
    pub fn len(&self) -> usize {
        self.n
    }

    /// Whether the chunk has no slots.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Push the first `n` slots of the chunk (clamped to its length).
    ///
    /// # Safety
    /// Those slots must have been initialised through [`as_mut_slices`](Self::as_mut_slices).
    pub unsafe fn commit(self, n: usize) {
        self.producer.commit(n.min(self.n));
    }

    /// Push every slot of the chunk.
    ///
    /// # Safety
    /// Every slot must have been initialised.
    pub unsafe fn commit_all(self) {
        self.producer.commit(self.n);
    }

    /// Fill the chunk from `iter` until either ends, push what was written, and return how
    /// many.
    pub fn fill_from_iter(mut self, iter: impl IntoIterator<Item = T>) -> usize {
        let mut iter = iter.into_iter();
        let mut written = 0;
        let (a, b) = self.as_mut_slices();
        for slot in a.iter_mut().chain(b.iter_mut()) {
            match iter.next() {
                Some(v) => {
                    slot.write(v);
                    written += 1;
                }
                None => break,
            }
        }
        // SAFETY: the first `written` slots were just initialised.
        unsafe { self.commit(written) };
        written
    }
}

/// Free slots of a ring holding `T::default()`, to overwrite in place and then commit: see
/// [`Producer::write_chunk`]. The values of slots not committed are dropped with the chunk.
pub struct WriteChunk<'a, T> {
    producer: &'a mut Producer<T>,
    /// The slots from the producer's position that hold values this chunk owns.
    n: usize,
}

impl<T> WriteChunk<'_, T> {
    /// The chunk's slots as raw runs: (start, length) of each, the second empty unless the
    /// chunk wraps.
    fn runs(&self) -> ((*mut T, usize), (*mut T, usize)) {
        self.producer.shared.runs(self.producer.tail, self.n)
    }

    /// The chunk's values, in ring order: the second slice is empty unless the chunk wraps.
    pub fn as_mut_slices(&mut self) -> (&mut [T], &mut [T]) {
        let ((a, na), (b, nb)) = self.runs();
        // SAFETY: the slots of items `tail..tail + n` (wrapping) hold initialised values that
        // only this producer may touch until it commits; the runs are disjoint and in bounds.
        unsafe {
            (
                std::slice::from_raw_parts_mut(a, na),
                std::slice::from_raw_parts_mut(b, nb),
            )
        }
    }

    /// The number of slots in the chunk.
    pub fn len(&self) -> usize {
        self.n
    }

    /// Whether the chunk has no slots.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Drops the values of the chunk's slots from `k` on, and keeps the first `k`.
    fn truncate(&mut self, k: usize) {
        let k = k.min(self.n);
        let ((a, na), (b, nb)) = self.runs();
        let (from_a, from_b) = (k.min(na), k.saturating_sub(na));
        // Forget them first: should a value's `drop` panic, the unwinding drops the chunk
        // again, which must not drop them a second time (the rest of them leak instead).
        self.n = k;
        // SAFETY: slots [k, n) held initialised values this chunk owned, and no longer counts
        // as owning (above); each is dropped once.
        unsafe {
            std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(
                a.add(from_a),
                na - from_a,
            ));
            std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(
                b.add(from_b),
                nb - from_b,
            ));
        }
    }

    /// Push the first `n` values of the chunk (clamped to its length); the others are
    /// dropped.
    pub fn commit(mut self, n: usize) {
        self.truncate(n);
        let n = self.n;
        self.n = 0; // the producer owns them now: nothing left for `Drop`
        self.producer.commit(n);
    }

    /// Push every value of the chunk.
    pub fn commit_all(self) {
        let n = self.n;
        self.commit(n);
    }
}

impl<T> Drop for WriteChunk<'_, T> {
    fn drop(&mut self) {
        self.truncate(0);
    }
}

impl<T> Consumer<T> {
    /// The number of slots.
    pub fn capacity(&self) -> usize {
        self.shared.capacity()
    }

    /// Items in the ring now (reads the producer's index).
    pub fn len(&self) -> usize {
        let tail = self.shared.written.value() >> 1;
        (tail.wrapping_sub(self.head) & INDEX_MASK) as usize
    }

    /// Whether the ring is empty now (reads the producer's index).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the producer is gone (items it pushed may remain).
    pub fn is_abandoned(&self) -> bool {
        self.shared.written.value() & GONE != 0
    }

    /// Readable items now (rtrb's name for [`len`](Self::len) on this side).
    pub fn slots(&self) -> usize {
        self.len()
    }

    /// The next item, left in the ring: `Err(PeekError::Empty)` if there is none (whether or
    /// not the producer is gone), as rtrb's `peek`.
    pub fn peek(&self) -> Result<&T, PeekError> {
        let tail = self.shared.written.value() >> 1;
        if tail == self.head & INDEX_MASK {
            return Err(PeekError::Empty);
        }
        // SAFETY: item `head`'s slot holds it, written before the version loaded above with
        // Acquire. It stays there while the reference lives: only this consumer frees a slot,
        // by popping, which needs `&mut self`.
        Ok(unsafe { (*self.shared.slot(self.shared.position(self.head))).assume_init_ref() })
    }

    /// Readable items by the cached tail, reloading it if fewer than `want`; and whether the
    /// producer is gone (known only when it reloaded).
    #[inline]
    fn available(&mut self, want: usize) -> (usize, bool) {
        let ready = self.cached_tail.wrapping_sub(self.head);
        if ready >= want as u64 {
            return (ready as usize, false);
        }
        let (tail, gone) = items(&self.shared, self.head);
        self.cached_tail = tail;
        (tail.wrapping_sub(self.head) as usize, gone)
    }

    /// Pop without blocking.
    #[inline]
    pub fn try_pop(&mut self) -> Result<T, TryPopError> {
        if self.head == self.cached_tail {
            let (tail, gone) = items(&self.shared, self.head);
            self.cached_tail = tail;
            if tail == self.head {
                return Err(if gone {
                    TryPopError::Disconnected
                } else {
                    TryPopError::Empty
                });
            }
        }
        Ok(self.read_and_publish())
    }

    /// Move item `head` out and publish its slot as free. The caller saw `head != cached_tail`.
    #[inline(always)]
    fn read_and_publish(&mut self) -> T {
        debug_assert!(self.head != self.cached_tail);
        // SAFETY: item `head`'s slot holds it, written before the version we loaded with
        // Acquire; moving it out leaves the slot free for the producer after our publish.
        let value =
            unsafe { (*self.shared.slot(self.shared.position(self.head))).assume_init_read() };
        self.head = self.head.wrapping_add(1);
        self.shared.read.publish(version(self.head));
        value
    }

    /// Pop, blocking while the ring is empty. Fails only when the producer is gone and every
    /// item it pushed was popped.
    #[inline]
    pub fn pop(&mut self) -> Result<T, PopError> {
        self.pop_deadline(None).map_err(|_| PopError)
    }

    /// Pop, blocking while the ring is empty for at most `timeout`.
    pub fn pop_timeout(&mut self, timeout: Duration) -> Result<T, PopTimeoutError> {
        self.pop_deadline(Some(Deadline::after(timeout)))
    }

    /// Pop, blocking while the ring is empty until `deadline` (`None`: no deadline).
    #[inline]
    pub fn pop_deadline(&mut self, deadline: Option<Deadline>) -> Result<T, PopTimeoutError> {
        if self.head == self.cached_tail {
            // As in `push_deadline`: a fresh look inline first, the cold path only if empty.
            self.cached_tail = items(&self.shared, self.head).0;
        }
        if self.head == self.cached_tail {
            match wait_for_items(&self.shared, self.head, deadline) {
                Ok(tail) => self.cached_tail = tail,
                Err(Stopped::Gone) => return Err(PopTimeoutError::Disconnected),
                Err(Stopped::Timeout) => return Err(PopTimeoutError::Timeout),
            }
        }
        Ok(self.read_and_publish())
    }

    /// Up to `n` readable items to read in place, as at most two slices (the ring wraps).
    /// Fails with the number of readable items if there are fewer than `n`.
    pub fn read_chunk(&mut self, n: usize) -> Result<ReadChunk<'_, T>, TooFew> {
        let (ready, _) = self.available(n);
        if ready < n {
            return Err(TooFew(ready));
        }
        Ok(ReadChunk { consumer: self, n })
    }

    /// Pop copies of as many items as fit in `out` and are readable now; returns how many.
    /// One version store for the lot.
    pub fn pop_slice(&mut self, out: &mut [T]) -> usize
    where
        T: Copy,
    {
        let (ready, _) = self.available(out.len());
        let n = ready.min(out.len());
        if n == 0 {
            return 0;
        }
        let chunk = ReadChunk { consumer: self, n };
        let (a, b) = chunk.as_slices();
        out[..a.len()].copy_from_slice(a);
        out[a.len()..n].copy_from_slice(b);
        chunk.commit_all();
        n
    }

    /// Release `n` items read in place (already moved out or dropped) to the producer.
    fn release(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        self.head = self.head.wrapping_add(n as u64);
        self.shared.read.publish(version(self.head));
    }
}

impl<T> Drop for Consumer<T> {
    /// Inline, as the producer's.
    #[inline]
    fn drop(&mut self) {
        // The gone bit wakes a producer blocked on `read`; the items left are dropped with
        // the ring.
        self.shared.read.publish(version(self.head) | GONE);
        // SAFETY: `shared` is not used again; as in `Producer`'s drop.
        drop(unsafe { ManuallyDrop::take(&mut self.shared) });
    }
}

/// Readable items of a ring, read in place: see [`Consumer::read_chunk`]. Dropping it pops
/// nothing.
pub struct ReadChunk<'a, T> {
    consumer: &'a mut Consumer<T>,
    n: usize,
}

impl<'a, T> ReadChunk<'a, T> {
    /// The chunk's two runs of items as raw parts: (start, length) of each, the second empty
    /// unless the chunk wraps. Raw pointers from the slot array, so that `commit` may drop
    /// through them (a pointer taken from the `&[T]` of `as_slices` may not write).
    fn runs(&self) -> ((*mut T, usize), (*mut T, usize)) {
        self.consumer.shared.runs(self.consumer.head, self.n)
    }

    /// The chunk's items, oldest first: the second slice is empty unless the chunk wraps.
    pub fn as_slices(&self) -> (&[T], &[T]) {
        let ((a, na), (b, nb)) = self.runs();
        // SAFETY: the slots of items `head..head + n` (wrapping) hold initialised items that
        // only this consumer may touch until it releases them; the runs are disjoint and in
        // bounds.
        unsafe {
            (
                std::slice::from_raw_parts(a, na),
                std::slice::from_raw_parts(b, nb),
            )
        }
    }

    /// The chunk's items, oldest first and mutable in place (as rtrb's): the second slice is
    /// empty unless the chunk wraps.
    pub fn as_mut_slices(&mut self) -> (&mut [T], &mut [T]) {
        let ((a, na), (b, nb)) = self.runs();
        // SAFETY: as in `as_slices`; `&mut self` makes these the only references to the items
        // while they live, and the two runs do not overlap.
        unsafe {
            (
                std::slice::from_raw_parts_mut(a, na),
                std::slice::from_raw_parts_mut(b, nb),
            )
        }
    }

    /// The number of items in the chunk.
    pub fn len(&self) -> usize {
        self.n
    }

    /// Whether the chunk has no items.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Pop the first `n` items of the chunk (clamped to its length), dropping them.
    pub fn commit(self, n: usize) {
        let n = n.min(self.n);
        let ((a, na), (b, _)) = self.runs();
        let first = n.min(na);
        // SAFETY: these items are initialised and ours; each is dropped once, then released.
        unsafe {
            std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(a, first));
            std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(b, n - first));
        }
        self.consumer.release(n);
    }

    /// Pop every item of the chunk, dropping them.
    pub fn commit_all(self) {
        let n = self.n;
        self.commit(n);
    }
}

impl<'a, T> IntoIterator for ReadChunk<'a, T> {
    type Item = T;
    type IntoIter = ReadChunkIntoIter<'a, T>;

    /// Move the items out one by one; the ones taken are popped when the iterator is dropped.
    fn into_iter(self) -> ReadChunkIntoIter<'a, T> {
        ReadChunkIntoIter {
            consumer: self.consumer,
            n: self.n,
            taken: 0,
        }
    }
}

/// Moves the items of a [`ReadChunk`] out; pops the ones taken when dropped.
pub struct ReadChunkIntoIter<'a, T> {
    consumer: &'a mut Consumer<T>,
    n: usize,
    taken: usize,
}

impl<T> Iterator for ReadChunkIntoIter<'_, T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        if self.taken == self.n {
            return None;
        }
        let c = &*self.consumer;
        let pos = c.shared.position(c.head.wrapping_add(self.taken as u64));
        self.taken += 1;
        // SAFETY: item `head + taken` is initialised and ours; it is moved out once, and
        // released (not dropped) when the iterator is dropped.
        Some(unsafe { (*c.shared.slot(pos)).assume_init_read() })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.n - self.taken, Some(self.n - self.taken))
    }
}

impl<T> Drop for ReadChunkIntoIter<'_, T> {
    fn drop(&mut self) {
        self.consumer.release(self.taken);
    }
}

impl<T> std::fmt::Debug for Producer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("capacity", &self.capacity())
            .field("pushed", &self.tail)
            .finish()
    }
}

impl<T> std::fmt::Debug for Consumer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("capacity", &self.capacity())
            .field("popped", &self.head)
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::rc::Rc;

    /// A push blocked on a full ring returns with the single slot a pop frees (with and
    /// without a deadline), and every item arrives once, in order.
    #[test]
    fn spsc_blocked_push_takes_a_single_free_slot() {
        let (mut tx, mut rx) = ring::<u32>(64);
        for i in 0..64 {
            tx.try_push(i).unwrap();
        }
        let consumer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(5));
            assert_eq!(rx.pop(), Ok(0)); // one slot, then nothing for a while
            std::thread::sleep(Duration::from_millis(50));
            assert_eq!(rx.pop(), Ok(1));
            rx
        });
        tx.push(64).unwrap(); // returns with the single slot the first pop freed
        assert_eq!(tx.push_timeout(65, Duration::from_secs(5)), Ok(()));
        let mut rx = consumer.join().unwrap();
        for i in 2..66 {
            assert_eq!(rx.try_pop(), Ok(i));
        }
        assert_eq!(rx.try_pop(), Err(TryPopError::Empty));
    }

    /// Indices wrap twice: modulo 2^63 in the versions, modulo 2^64 in the handles. Rings
    /// started just before each point push and pop across it, by single items, slices and
    /// chunks, with `len`, `slots` and fullness right at every step, and the items left at
    /// the end dropped once each.
    #[test]
    fn spsc_indices_wrap_in_versions_and_handles() {
        for start in [(1u64 << 63) - 5, u64::MAX - 4, u64::MAX] {
            let (mut tx, mut rx) = ring_at::<Rc<u64>>(4, start);
            let live = Rc::new(0);
            let mut next = 0u64;
            let mut expect = 0u64;
            for round in 0..12 {
                let n = 1 + round % 4;
                for _ in 0..n {
                    tx.try_push(Rc::new(next)).unwrap();
                    next += 1;
                }
                assert_eq!(tx.len(), n);
                assert_eq!(rx.len(), n);
                assert_eq!(tx.slots(), 4 - n);
                assert_eq!(tx.is_full(), n == 4);
                if n == 4 {
                    assert!(matches!(
                        tx.try_push(Rc::new(99)),
                        Err(TryPushError::Full(_))
                    ));
                }
                for _ in 0..n {
                    assert_eq!(*rx.try_pop().unwrap(), expect);
                    expect += 1;
                }
                assert_eq!(rx.try_pop(), Err(TryPopError::Empty));
                assert!(tx.is_empty() && rx.is_empty());
            }
            let (mut tx2, mut rx2) = ring_at::<u64>(4, start);
            for k in 0..8u64 {
                assert_eq!(tx2.push_slice(&[k, k + 1, k + 2]), 3);
                let mut out = [0; 3];
                assert_eq!(rx2.pop_slice(&mut out), 3);
                assert_eq!(out, [k, k + 1, k + 2]);
            }
            // Blocking on both sides across the wrap: a ring of 2 between two threads.
            let (mut tx3, mut rx3) = ring_at::<u64>(2, start);
            let consumer =
                std::thread::spawn(move || (0..1000).map(|_| rx3.pop().unwrap()).sum::<u64>());
            (0..1000).for_each(|k| tx3.push(k).unwrap());
            assert_eq!(consumer.join().unwrap(), 999 * 1000 / 2);
            // Items left in the ring at the end are dropped, once each.
            for _ in 0..3 {
                tx.try_push(live.clone()).unwrap();
            }
            assert_eq!(Rc::strong_count(&live), 4);
            drop((tx, rx));
            assert_eq!(Rc::strong_count(&live), 1);
        }
    }

    /// A ring of capacity 0, as rtrb's: always full, always empty; blocking forms wait for
    /// their deadline or for the other side to go.
    #[test]
    fn spsc_capacity_zero_is_always_full_and_empty() {
        let (mut tx, mut rx) = ring::<u8>(0);
        assert_eq!((tx.capacity(), tx.slots(), rx.slots()), (0, 0, 0));
        assert_eq!(tx.try_push(1), Err(TryPushError::Full(1)));
        assert_eq!(rx.try_pop(), Err(TryPopError::Empty));
        assert_eq!(rx.peek(), Err(PeekError::Empty));
        let short = Duration::from_millis(2);
        assert_eq!(tx.push_timeout(2, short), Err(PushTimeoutError::Timeout(2)));
        assert_eq!(rx.pop_timeout(short), Err(PopTimeoutError::Timeout));
        assert!(matches!(tx.write_chunk_uninit(1), Err(TooFew(0))));
        assert!(tx.write_chunk_uninit(0).is_ok());
        assert_eq!(tx.push_slice(&[1, 2]), 0);
        assert!(matches!(rx.read_chunk(1), Err(TooFew(0))));
        drop(rx);
        assert_eq!(tx.push(3), Err(PushError(3)));
        let (tx, mut rx) = ring::<u8>(0);
        drop(tx);
        assert_eq!(rx.pop(), Err(PopError));
    }

    /// rtrb's `peek` and `slots`: peek leaves the item, sees what the producer pushed, and
    /// answers Empty on an empty ring, abandoned or not.
    #[test]
    fn spsc_peek_and_slots_as_rtrb() {
        let (mut tx, mut rx) = ring::<String>(2);
        assert_eq!(rx.peek(), Err(PeekError::Empty));
        tx.push("a".into()).unwrap();
        tx.push("b".into()).unwrap();
        assert_eq!((tx.slots(), rx.slots()), (0, 2));
        assert_eq!(rx.peek().map(String::as_str), Ok("a"));
        assert_eq!(
            rx.peek().map(String::as_str),
            Ok("a"),
            "peek leaves the item"
        );
        assert_eq!(rx.pop().unwrap(), "a");
        assert_eq!(rx.peek().map(String::as_str), Ok("b"));
        drop(tx);
        assert_eq!(rx.pop().unwrap(), "b");
        assert_eq!(rx.peek(), Err(PeekError::Empty));
        assert_eq!(PeekError::Empty.to_string(), "the ring is empty");
    }

    #[test]
    fn spsc_push_pop_in_order_and_full_empty() {
        let (mut tx, mut rx) = ring::<u32>(3);
        assert_eq!(rx.try_pop(), Err(TryPopError::Empty));
        for i in 0..3 {
            tx.try_push(i).unwrap();
        }
        assert_eq!(tx.try_push(9), Err(TryPushError::Full(9)));
        assert_eq!((tx.len(), rx.len(), tx.slots()), (3, 3, 0));
        for round in 0..10 {
            assert_eq!(rx.try_pop(), Ok(round));
            tx.try_push(round + 3).unwrap();
        }
        assert_eq!(rx.try_pop(), Ok(10));
        assert_eq!(rx.len(), 2);
    }

    #[test]
    fn spsc_disconnection_drains_then_errs() {
        let (mut tx, mut rx) = ring::<String>(4);
        tx.push("a".into()).unwrap();
        tx.push("b".into()).unwrap();
        drop(tx);
        assert!(rx.is_abandoned());
        assert_eq!(rx.pop().as_deref(), Ok("a"));
        assert_eq!(rx.try_pop().as_deref(), Ok("b"));
        assert_eq!(rx.try_pop(), Err(TryPopError::Disconnected));
        assert_eq!(rx.pop(), Err(PopError));

        let (mut tx, rx) = ring::<u8>(1);
        tx.push(1).unwrap();
        drop(rx);
        assert!(tx.is_abandoned());
        assert_eq!(tx.try_push(2), Err(TryPushError::Disconnected(2)));
        assert_eq!(tx.push(3), Err(PushError(3)));
    }

    #[test]
    fn spsc_items_are_dropped_exactly_once() {
        let token = Rc::new(());
        // Rc is not Send, but a ring used on one thread is fine to test drops with: build it
        // through a helper that does not require Send.
        {
            let (mut tx, mut rx) = ring::<Rc<()>>(4);
            for _ in 0..4 {
                tx.try_push(token.clone()).unwrap();
            }
            assert_eq!(Rc::strong_count(&token), 5);
            drop(rx.try_pop().unwrap());
            assert_eq!(Rc::strong_count(&token), 4);
            // Partial chunk iteration: one moved out and dropped, two left in the ring.
            let mut it = rx.read_chunk(3).unwrap().into_iter();
            drop(it.next());
            drop(it);
            assert_eq!(rx.len(), 2);
            rx.read_chunk(1).unwrap().commit(1);
            assert_eq!(Rc::strong_count(&token), 2);
            drop(tx);
        }
        assert_eq!(
            Rc::strong_count(&token),
            1,
            "the ring dropped what was left"
        );
    }

    #[test]
    fn spsc_timeouts_fire() {
        let (mut tx, mut rx) = ring::<u8>(1);
        assert_eq!(
            rx.pop_timeout(Duration::from_millis(2)),
            Err(PopTimeoutError::Timeout)
        );
        tx.push(1).unwrap();
        assert_eq!(
            tx.push_timeout(2, Duration::from_millis(2)),
            Err(PushTimeoutError::Timeout(2))
        );
    }

    #[test]
    fn spsc_chunks_wrap_around() {
        let (mut tx, mut rx) = ring::<u32>(4);
        assert_eq!(tx.push_slice(&[0, 1, 2]), 3);
        let mut out = [0; 2];
        assert_eq!(rx.pop_slice(&mut out), 2);
        assert_eq!(out, [0, 1]);
        // 3 free slots from position 3: one at the end, two at the start.
        let mut chunk = tx.write_chunk_uninit(3).unwrap();
        let (a, b) = chunk.as_mut_slices();
        assert_eq!((a.len(), b.len()), (1, 2));
        assert_eq!(chunk.fill_from_iter(10..), 3);
        assert_eq!(tx.write_chunk_uninit(1).err(), Some(TooFew(0)));
        let mut chunk = rx.read_chunk(4).unwrap();
        let (a, b) = chunk.as_slices();
        assert_eq!((a, b), (&[2, 10][..], &[11, 12][..]));
        // Items can be changed in place before they are popped (rtrb's `as_mut_slices`).
        let (a, b) = chunk.as_mut_slices();
        a[0] = 20;
        b[1] = 30;
        assert_eq!(chunk.as_slices(), (&[20, 10][..], &[11, 30][..]));
        chunk.commit(3);
        assert_eq!(rx.try_pop(), Ok(30));
        assert!(rx.is_empty());
        assert_eq!(rx.read_chunk(1).err(), Some(TooFew(0)));
    }

    /// A capacity that is not a power of two: the ring holds exactly that many items, its
    /// slot array is the next power of two (chunks wrap there), and order survives many laps.
    #[test]
    fn spsc_capacity_not_a_power_of_two() {
        let (mut tx, mut rx) = ring::<u32>(5);
        assert_eq!((tx.capacity(), rx.capacity()), (5, 5));
        assert_eq!(tx.push_slice(&[0, 1, 2, 3, 4, 5]), 5);
        assert!(tx.is_full());
        assert_eq!(tx.try_push(9), Err(TryPushError::Full(9)));
        let mut out = [0; 5];
        assert_eq!(rx.pop_slice(&mut out), 5);
        assert_eq!(out, [0, 1, 2, 3, 4]);
        // Five free slots from position 5 of 8: three at the end, two at the start.
        let chunk = tx.write_chunk_uninit(5).unwrap();
        assert_eq!(chunk.fill_from_iter(10..), 5);
        let chunk = rx.read_chunk(5).unwrap();
        assert_eq!(chunk.as_slices(), (&[10, 11, 12][..], &[13, 14][..]));
        chunk.commit_all();
        for i in 0..1000u32 {
            tx.try_push(i).unwrap();
            if i % 3 == 2 {
                tx.try_push(i + 1_000_000).unwrap();
                assert_eq!(rx.try_pop(), Ok(i));
                assert_eq!(rx.try_pop(), Ok(i + 1_000_000));
            } else {
                assert_eq!(rx.try_pop(), Ok(i));
            }
        }
        assert!(rx.is_empty());
    }

    /// rtrb's `write_chunk`: slots hold defaults, overwritten in place; a partial commit pushes
    /// the first values and drops the rest, as does dropping the chunk; chunks wrap.
    #[test]
    fn spsc_write_chunk_of_defaults() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static DROPS: AtomicUsize = AtomicUsize::new(0);
        #[derive(Default)]
        struct D(u32);
        impl Drop for D {
            fn drop(&mut self) {
                DROPS.fetch_add(1, Ordering::Relaxed);
            }
        }
        let (mut tx, mut rx) = ring::<D>(4);
        assert!(!tx.is_full());
        let mut chunk = tx.write_chunk(3).unwrap();
        let (a, b) = chunk.as_mut_slices();
        assert_eq!((a.len(), b.len()), (3, 0));
        assert!(a.iter().all(|d| d.0 == 0));
        a[0] = D(7); // the default it replaces is dropped: 1
        a[1] = D(8); // 2
        chunk.commit(2); // the third default is dropped: 3
        assert_eq!(DROPS.load(Ordering::Relaxed), 3);
        assert_eq!(rx.try_pop().unwrap().0, 7); // 4
        assert_eq!(rx.try_pop().unwrap().0, 8); // 5
                                                // From position 2: two slots at the end, two at the start.
        let mut chunk = tx.write_chunk(4).unwrap();
        let (a, b) = chunk.as_mut_slices();
        assert_eq!((a.len(), b.len()), (2, 2));
        b[1] = D(9); // 6
        drop(chunk); // four values dropped, nothing pushed: 10
        assert_eq!(DROPS.load(Ordering::Relaxed), 10);
        assert!(rx.is_empty());
        let mut chunk = tx.write_chunk(4).unwrap();
        let (a, b) = chunk.as_mut_slices();
        for (i, d) in a.iter_mut().chain(b.iter_mut()).enumerate() {
            d.0 = i as u32 + 1; // in place: nothing dropped
        }
        chunk.commit_all();
        assert!(tx.is_full());
        assert!(tx.write_chunk(1).is_err());
        let got: Vec<u32> = rx.read_chunk(4).unwrap().into_iter().map(|d| d.0).collect();
        assert_eq!(got, [1, 2, 3, 4]); // four more dropped: 14
        assert_eq!(DROPS.load(Ordering::Relaxed), 14);
    }

    /// A value whose `drop` panics during a partial commit: the unwinding drops the chunk,
    /// which must drop nothing twice (the values after the panicking one may leak).
    #[test]
    fn spsc_write_chunk_survives_a_panicking_drop() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static DROPS: [AtomicUsize; 4] = [const { AtomicUsize::new(0) }; 4];
        #[derive(Default)]
        struct P(usize);
        impl Drop for P {
            fn drop(&mut self) {
                DROPS[self.0].fetch_add(1, Ordering::Relaxed);
                if self.0 == 2 {
                    panic!("drop of value 2");
                }
            }
        }
        let (mut tx, _rx) = ring::<P>(4);
        let mut chunk = tx.write_chunk(4).unwrap();
        let (a, _) = chunk.as_mut_slices();
        for (i, p) in a.iter_mut().enumerate() {
            std::mem::forget(std::mem::replace(p, P(i)));
        }
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| chunk.commit(2)));
        assert!(r.is_err());
        assert!(
            DROPS.iter().all(|d| d.load(Ordering::Relaxed) <= 1),
            "a value dropped twice"
        );
        assert_eq!(DROPS[2].load(Ordering::Relaxed), 1);
    }

    #[test]
    fn spsc_blocking_pop_wakes_on_push_and_on_drop() {
        let (mut tx, mut rx) = ring::<u64>(2);
        let h = std::thread::spawn(move || {
            let mut got = Vec::new();
            while let Ok(v) = rx.pop() {
                got.push(v);
            }
            got
        });
        for i in 0..1000 {
            tx.push(i).unwrap();
            if i % 100 == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        drop(tx);
        assert_eq!(h.join().unwrap(), (0..1000).collect::<Vec<_>>());
    }

    #[test]
    fn spsc_zero_sized_items() {
        let (mut tx, mut rx) = ring::<()>(2);
        tx.try_push(()).unwrap();
        tx.try_push(()).unwrap();
        assert!(tx.try_push(()).is_err());
        assert_eq!(rx.try_pop(), Ok(()));
        assert_eq!(rx.len(), 1);
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::thread;

    /// A one-slot ring: the producer blocks on a full ring and the consumer on an empty one,
    /// so every push and pop hands over through a possible sleep; items arrive in order and
    /// the producer's drop ends the consumer's loop (a lost wake-up is a loom deadlock).
    #[test]
    fn spsc_blocking_handover_and_disconnect() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(|| {
            let (mut tx, mut rx) = ring::<u32>(1);
            let c = thread::spawn(move || {
                let mut got = Vec::new();
                while let Ok(v) = rx.pop() {
                    got.push(v);
                }
                got
            });
            tx.push(1).unwrap();
            tx.push(2).unwrap();
            drop(tx);
            assert_eq!(c.join().unwrap(), vec![1, 2]);
        });
    }

    /// The consumer goes while the producer is blocked on a full ring: the producer wakes with
    /// its value back.
    #[test]
    fn spsc_consumer_drop_wakes_a_blocked_producer() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(|| {
            let (mut tx, mut rx) = ring::<u32>(1);
            let p = thread::spawn(move || {
                tx.push(1).unwrap();
                tx.push(2)
            });
            let first = rx.try_pop();
            drop(rx);
            match p.join().unwrap() {
                Ok(()) => assert_eq!(first, Ok(1), "2 fitted only if 1 was popped"),
                Err(PushError(v)) => assert_eq!(v, 2),
            }
        });
    }
}
