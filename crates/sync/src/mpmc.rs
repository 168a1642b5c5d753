//! A bounded many-producer many-consumer channel that blocks through [`EventCount`]s, and
//! costs one atomic read-modify-write per operation when nobody waits. Capacity 0 makes a
//! rendezvous channel, as crossbeam-channel's `bounded(0)` (see [`channel`]); [`unbounded`]
//! makes one whose sends never block, as crossbeam-channel's `unbounded()`.
//!
//! ```
//! use spindle_sync::mpmc;
//!
//! let (tx, rx) = mpmc::channel::<u32>(64);
//! let workers: Vec<_> = (0..3)
//!     .map(|_| {
//!         let rx = rx.clone();
//!         std::thread::spawn(move || rx.iter().map(u64::from).sum::<u64>())
//!     })
//!     .collect();
//! drop(rx);
//! for i in 0..1000 {
//!     tx.send(i).unwrap(); // blocks while the channel is full
//! }
//! drop(tx); // receivers drain what is left, then their `recv` errs
//! let total: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
//! assert_eq!(total, 999 * 1000 / 2);
//! ```
//!
//! # Protocol
//!
//! The slot protocol is Dmitry Vyukov's bounded MPMC queue (2010). Each slot carries a
//! *stamp*; indices count `lap + position`, with `lap` a multiple of `one_lap`, the power of
//! two above the capacity, so that the next index needs no division. A sender at index `i`
//! may fill slot `i`'s position once its stamp is `i` (the receiver of the previous lap has
//! emptied it), claims it by a CAS of the `tail` word from `i` to `next(i)`, writes the value
//! and stores the stamp `i + 1`. A receiver at index `i` may take the slot once its stamp is
//! `i + 1`, claims it by a CAS of `head`, moves the value out and stores the stamp
//! `i + one_lap`, which is the next lap's sender's `i`.
//!
//! The two index words carry flags in their low bits:
//!
//! - `tail = index·8 | WATCHED | DISCONNECTED | RECEIVERS_WAIT`
//! - `head = index·8 | WATCHED | SENDERS_WAIT`
//!
//! `RECEIVERS_WAIT` and `SENDERS_WAIT` stand for blocked `recv`s and `send`s, which sleep on
//! the side's event count; `WATCHED` for selects and async tasks, which wait on the side's
//! observer list (see "Watchers" below).
//!
//! ```text
//! try_send(x):                                       (try_recv is the mirror image)
//!   t = tail's recent value (see "Where a claim starts")
//!   loop:
//!     DISCONNECTED in t → Disconnected
//!     s = stamp[t]
//!     s == t:       CAS(tail, t → next(t), keeping DISCONNECTED, clearing RECEIVERS_WAIT
//!                   and WATCHED)
//!                   on success: write; store(stamp[t], t + 1)
//!                               if RECEIVERS_WAIT was in t: not_empty.increment()
//!                               if WATCHED was in t: wake the receive side's observers
//!     s == t + 1 − one_lap:   the slot holds last lap's item: Full if head == t − one_lap,
//!                             else its receiver is still moving it out (spin a little)
//!     otherwise:    another sender took t: back off, reload tail (unchanged: last lap's
//!                   sender of this slot is still writing it: in flight, as above)
//!   a failed CAS backs off too: 2^k pauses, k = 0, 1, … 6 (see `back_off`)
//! ```
//!
//! **Where a claim starts.** Beside each index word, on its line, is a plain copy of a value
//! the word had recently (`Index`): the thread that has just changed the word (a claim's CAS, a
//! waiter's flag, the disconnection) stores the new value there, and a claim starts from that
//! copy instead of loading the word. On x86 a load of a word this thread has just changed with
//! a `lock`ed instruction is not served from the store buffer: it waits until the write reaches
//! the cache. Back-to-back operations of one thread (a producer filling the channel, a consumer
//! draining it, both sides of a current-thread async runtime) paid that wait at every
//! operation; a value written by a plain store is forwarded. The copy is safe because it only
//! ever holds a value the word had, so starting from it is starting from a stale load of the
//! word, which the protocol already allows: a claim succeeds only by a CAS from the word's
//! exact current value; a stale index finds its slot's stamp already past it (a slot's stamp
//! leaves index `i` as soon as `i` is claimed, except while its claimer is in flight, when the
//! CAS fails), so it can show neither a free slot nor `Full` nor `Empty`, and the claim takes
//! the word's value from the failed CAS or reloads it, as after losing a race. A copy that lags
//! costs one failed CAS or one reload, never a wrong answer. The blocking argument below is
//! unchanged: a waiter's second try may start from a copy older than its flag, but it ends,
//! like every claim, at a CAS or at the `SeqCst` load of the other index that shows `Full` or
//! `Empty`, and that load comes after the flag's `fetch_or`.
//!
//! **The claim's fast path.** `try_send` and `try_recv`, which every send and receive tries
//! first (sync or async; a select's claims go to the loop), inline the loop's first round only,
//! for its common outcomes: the slot free (written) and the CAS unopposed, or the channel full
//! (empty, or empty and disconnected) at the first look. Everything else (a lost race, a slot
//! in flight, a sender's disconnection) calls the loop, out of line, which starts again from
//! the index's recent value. That takes two costs off the path from one operation's CAS to the
//! next one's when a thread sends or receives back to back (lab `rings`, sections
//! `async-stream-ct` and `onethread`): the no-ops with which the build pads the inlined code to
//! align the loop's head (64 bytes), and the wait of the CAS for `next`'s selection between
//! both outcomes for the new index word, which is now the old word plus one index with its
//! flags cleared, behind a branch taken only at a lap's last slot (`next_word`). The answers,
//! and the loads that decide them, are the loop's first round's; its CAS is the strong form (no
//! spurious failure sends it to the loop). After a lost first CAS the loop starts from the
//! copy again rather than from the value the CAS read, and skips the back-off of a first
//! failure: at worst one more failed CAS.
//!
//! A full channel asks `tail` itself whether it is disconnected (`Chan::full`): the copy can
//! lack the flag when a claimer's note of its own word lands after the disconnection's.
//!
//! **The slot is found before the CAS.** A `lock`ed instruction lets no later load start
//! before it completes, so the claimed slot's address (from the slot array's pointer and the
//! lap size) is computed before the CAS and handed to the write or read (`claim_send_at`,
//! `claim_recv_at`). Looked up again after the CAS, as the compiler must (a `SeqCst` CAS
//! orders those loads too), those loads lay on the path from one operation's CAS to the next
//! one's (lab `rings`, sections `onethread` and `async-stream-ct`, time such runs).
//!
//! **One read-modify-write.** The CAS that claims the index is the only one. Waking is paid
//! only by an operation whose CAS found the other side's waiting flag — the CAS reads the flag
//! in the same instant as it claims the index, so telling costs nothing more.
//!
//! **Blocking, and why no wake-up is lost.** A receiver that finds the channel empty reads
//! `e = not_empty.value()`, sets `RECEIVERS_WAIT` in `tail` (`fetch_or`), then tries again:
//! - A sender whose CAS comes after the `fetch_or` in `tail`'s modification order sees the
//!   flag, or finds it cleared by an earlier sender that saw it; either way that sender
//!   increments `not_empty` after its stamp store. The increment is ordered after `e` (the
//!   receiver's `fetch_or` happens-before the sender's CAS reading it), so `wait(e)` returns.
//! - A sender whose CAS came before the `fetch_or` is visible to the second try (the
//!   `fetch_or` read its `tail` value): either its stamp store is visible too and the
//!   receiver takes the item (or another receiver did, which is fine), or it is still *in
//!   flight* between its CAS and its stamp store. A receiver that sees an in-flight sender does
//!   not sleep on `not_empty` without a deadline: it yields, then waits with short growing
//!   timeouts (100 µs, doubling to 10 ms), so a sender preempted in that window of a few
//!   instructions delays it, never strands it.
//! - If the second try sees `head == tail`, every claimed slot has been taken, and every later
//!   send is of the first kind: the receiver may sleep on `not_empty` until its deadline.
//!
//! Senders that find the channel full do the same on `head`, `SENDERS_WAIT` and `not_full`.
//! Several waiters share one flag; the operation that clears it wakes them all (an
//! [`EventCount`] signal wakes every sleeper), and each one that finds nothing to do sets the
//! flag again before it sleeps. A waiter that times out leaves its flag: one spurious signal.
//! Waiters are not served in turn (nor are crossbeam-channel's): a woken waiter retries, and a
//! thread that was already running may take the value or the slot first. Under heavy
//! oversubscription one waiter can lose that race for seconds while the rest of its side is
//! served; a caller that needs a bound on its wait gives a deadline.
//!
//! **Watchers: selects and async tasks** wait on each side's list of their contexts and task
//! entries (`Observers`, `select.rs`) under a flag of their own, `WATCHED`, pushed on the list
//! before the flag is set; the operation that clears the flag wakes the list (one load when
//! it is empty). The argument is the blocked receiver's above, with the list in place of the
//! event count: the push happens-before the `fetch_or` that a later CAS reads. With a flag of
//! their own, an operation that finds only watchers does not pay the event count's `lock
//! xadd`, and one that finds only blocked threads does not look at the list. When watchers
//! shared the waiting flags with blocked threads, every wake-up of a task or a select paid
//! that `xadd` too (lab `rings`, section `async-stream-ct`; the figures are in the commit that
//! split the flags and in `docs/results.md`).
//! Blocked threads and watchers on one side at once, so that one claim hands over both flags:
//! the stress test `async_stress_each_value_once` (`tests/async.rs`; a loom model of one
//! blocked and one async receiver against two sends exceeds loom's branch limit).
//!
//! **Disconnection** (as crossbeam-channel): when the last `Sender` or the last `Receiver`
//! goes, `DISCONNECTED` is set in `tail`, both event counts are signalled and both sides'
//! observer lists notified (blocked threads and watchers alike). Senders then fail
//! at once; receivers take what is left and then fail. When the last `Receiver` goes, it drops
//! the items still in the channel at once (waiting for a sender in flight to finish writing
//! one); items left when the last `Sender` goes stay for the receivers. Each item is dropped
//! once.
//!
//! **`try_*` are linearizable.** A `try_recv` that finds the head slot claimed by a sender
//! still writing it waits (yields, then naps) instead of answering `Empty`: that sender's
//! value may be behind a completed send the caller knows of. `try_send` waits the same way for
//! a receiver still moving a value out. So `Empty` and `Full` are answered only at the loads
//! that show `head == tail` and `head + one_lap == tail`.
//!
//! **Orderings.** The copies of the index words are `Relaxed`: nothing is handed over through
//! them. The claims are `SeqCst` CAS (any `lock`ed instruction on x86); the stamp
//! stores are `Release` and the stamp loads `Acquire`, which hands each value from its sender
//! to its receiver and each emptied slot back. The flag and disconnection arguments above use
//! only the modification orders of `tail` and `head` and release/acquire through them.
//!
//! **Linearisation points.** A send or receive: its successful CAS. `Full` / `Empty`: the load
//! of the other index that showed `head + one_lap == tail` / `head == tail`.
//!
//! **Why not fewer RMWs, or a ticket (fetch-add) design.** A fetch-add claims an index even
//! when the channel is full, so a `try_send` could not fail without a second RMW to undo it;
//! the CAS fails instead, so `try_*` are honest and blocking stays a property of the waiter.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::time::Duration;

use crate::eventcount::EventCount;
#[cfg(feature = "futures-core")]
pub use crate::futures::RecvStream;
pub use crate::futures::{RecvFut, SendFut};
use crate::primitives::{
    spin_loop, yield_now, Arc, AtomicU64, AtomicUsize, CachePadded, Ordering::*,
};
use crate::rendezvous::{Failed, Wait};
use crate::select::{Attempt, Ctx, Handle, Observers, Token};
pub use crate::select::{
    ReadyTimeoutError, Select, SelectTimeoutError, SelectedOperation, TryReadyError, TrySelectError,
};
use crate::time::{Deadline, IntoDeadline};

crate::channel::errors! {
    put: TrySendError, SendTimeoutError, SendError, "send";
    take: TryRecvError, RecvTimeoutError, RecvError, "receive";
}

/// A blocked receiver waits on `not_empty` (in `tail`).
const RECEIVERS_WAIT: u64 = 1;
/// A blocked sender waits on `not_full` (in `head`).
const SENDERS_WAIT: u64 = 1;
const DISCONNECTED: u64 = 2;
/// A select or an async task watches the side (in `tail` for receives, `head` for sends): it
/// waits on the side's list of observers, not on its event count.
const WATCHED: u64 = 4;
/// The flags that ask the operation that clears them to wake the other side.
const WAKE: u64 = RECEIVERS_WAIT | WATCHED;
const _: () = assert!(
    SENDERS_WAIT == RECEIVERS_WAIT && WAKE & DISCONNECTED == 0 && WAKE | DISCONNECTED == FLAGS
);
const SHIFT: u32 = 3;
/// The flag bits below the index in an index word.
const FLAGS: u64 = (1 << SHIFT) - 1;
/// Indices are counted modulo 2^61 (they live in bits 3..64 of a word and in the stamps).
const INDEX_MASK: u64 = u64::MAX >> SHIFT;
/// How many times the slot protocol re-reads a slot whose other side is in flight before it
/// reports that (the public `try_*` then yield and nap until it settles; see [`settle`]).
#[cfg(not(loom))]
const IN_FLIGHT_SPINS: u32 = 64;
#[cfg(loom)]
const IN_FLIGHT_SPINS: u32 = 1;
/// Timed waits of an operation that waits for an in-flight one.
const IN_FLIGHT_FIRST_NAP: Duration = Duration::from_micros(100);
const IN_FLIGHT_MAX_NAP: Duration = Duration::from_millis(10);

/// A new channel with `capacity` slots: its first sender and first receiver. A channel of
/// capacity 0 is a *rendezvous*, as crossbeam-channel's `bounded(0)`: a send completes when a
/// receiver takes its value, `try_send` succeeds only when a receiver is blocked in `recv`,
/// and `try_recv` only when a sender is blocked in `send` (its protocol: a lock and two queues
/// of blocked operations, documented in the crate's `rendezvous.rs`).
///
/// ```
/// let (tx, rx) = spindle_sync::mpmc::channel::<&str>(0);
/// let t = std::thread::spawn(move || tx.send("hello")); // blocks until received
/// assert_eq!(rx.recv(), Ok("hello"));
/// assert!(t.join().unwrap().is_ok());
/// ```
///
/// # Panics
/// If `capacity` is 2^60 or more (two laps must fit the 2^61 indices).
pub fn channel<T>(capacity: usize) -> (Sender<T>, Receiver<T>) {
    if capacity == 0 {
        let chan = Arc::new(crate::rendezvous::Chan::new());
        return (
            Sender {
                flavor: Flavor::Zero(chan.clone()),
            },
            Receiver {
                flavor: Flavor::Zero(chan),
            },
        );
    }
    assert!(
        (capacity as u64) < 1 << 60,
        "capacity {capacity} is too large"
    );
    let one_lap = (capacity as u64 + 1).next_power_of_two();
    let slots = (0..capacity as u64)
        .map(|i| Slot {
            stamp: AtomicU64::new(i),
            value: UnsafeCell::new(MaybeUninit::uninit()),
        })
        .collect();
    let chan = Arc::new(Chan {
        tail: CachePadded(Index::new()),
        head: CachePadded(Index::new()),
        not_empty: CachePadded(EventCount::stretching()),
        not_full: CachePadded(EventCount::stretching()),
        recv_select: CachePadded(Observers::new()),
        send_select: CachePadded(Observers::new()),
        slots,
        one_lap,
        senders: AtomicUsize::new(1),
        receivers: AtomicUsize::new(1),
    });
    (
        Sender {
            flavor: Flavor::Array(chan.clone()),
        },
        Receiver {
            flavor: Flavor::Array(chan),
        },
    )
}

/// A new unbounded channel, as crossbeam-channel's `unbounded()`: sends never block (nor fail,
/// while a receiver exists); receivers block while it is empty. Values live in a linked list
/// of blocks of 31 (protocol in the crate's `list.rs`); `capacity()` is `None`.
///
/// ```
/// let (tx, rx) = spindle_sync::mpmc::unbounded::<u32>();
/// for i in 0..1000 {
///     tx.send(i).unwrap(); // never blocks
/// }
/// assert_eq!(rx.len(), 1000);
/// drop(tx);
/// assert_eq!(rx.iter().sum::<u32>(), 999 * 1000 / 2);
/// ```
pub fn unbounded<T>() -> (Sender<T>, Receiver<T>) {
    let chan = Arc::new(crate::list::Chan::new());
    (
        Sender {
            flavor: Flavor::List(chan.clone()),
        },
        Receiver {
            flavor: Flavor::List(chan),
        },
    )
}

/// A receiver that never receives and is never disconnected, as crossbeam-channel's
/// `never()`: for a [`select!`](crate::select!) arm that is sometimes absent.
///
/// ```
/// use spindle_sync::{mpmc, select};
/// use std::time::Duration;
///
/// let (tx, rx) = mpmc::channel::<u32>(1);
/// let optional: Option<mpmc::Receiver<u32>> = None;
/// let never = mpmc::never();
/// tx.send(3).unwrap();
/// let got = select! {
///     recv(rx) -> v => v.unwrap(),
///     recv(optional.as_ref().unwrap_or(&never)) -> _ => unreachable!(),
///     default(Duration::from_secs(1)) => 0,
/// };
/// assert_eq!(got, 3);
/// ```
pub fn never<T>() -> Receiver<T> {
    // A rendezvous with one sender counted that does not exist: nothing is ever sent, and
    // the count never reaches zero, so the channel never disconnects. (The count goes up by
    // one before the only real sender goes, which takes it back down to that one.)
    let (tx, rx) = channel::<T>(0);
    tx.flavor.counts().0.fetch_add(1, Relaxed);
    drop(tx);
    rx
}

struct Slot<T> {
    stamp: AtomicU64,
    value: UnsafeCell<MaybeUninit<T>>,
}

/// An index word (`tail` or `head`), and beside it on its line a value it had recently, which
/// claims start from (see "Where a claim starts" above). Derefs to the word.
struct Index {
    word: AtomicU64,
    /// A value `word` had: stored (plainly) by the thread that has just written `word`.
    recent: AtomicU64,
}

impl Index {
    fn new() -> Index {
        Index {
            word: AtomicU64::new(0),
            recent: AtomicU64::new(0),
        }
    }

    /// A value the word had recently: where a claim starts.
    #[inline(always)]
    fn recent(&self) -> u64 {
        self.recent.load(Relaxed)
    }

    /// Records `w`, the value this thread has just given the word.
    #[inline(always)]
    fn note(&self, w: u64) {
        self.recent.store(w, Relaxed);
    }

    /// Sets `flag` in the word (`SeqCst`), and notes the result; returns the word as it was.
    #[inline]
    fn set_flag(&self, flag: u64) -> u64 {
        let old = self.word.fetch_or(flag, SeqCst);
        self.note(old | flag);
        old
    }
}

impl std::ops::Deref for Index {
    type Target = AtomicU64;
    fn deref(&self) -> &AtomicU64 {
        &self.word
    }
}

pub(crate) struct Chan<T> {
    tail: CachePadded<Index>,
    head: CachePadded<Index>,
    not_empty: CachePadded<EventCount>,
    not_full: CachePadded<EventCount>,
    /// Selects waiting for a value / for room (see `select.rs`). On lines of their own: their
    /// words are written while threads wait and are woken, and the fields below are read by
    /// every operation.
    recv_select: CachePadded<Observers>,
    send_select: CachePadded<Observers>,
    slots: Box<[Slot<T>]>,
    one_lap: u64,
    senders: AtomicUsize,
    receivers: AtomicUsize,
}

// SAFETY: values move between threads (T: Send); each slot's value is accessed only by the
// thread whose CAS claimed its index, handed over by the Release/Acquire stamps.
unsafe impl<T: Send> Send for Chan<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for Chan<T> {}

/// Why a non-blocking attempt found nothing to do.
pub(crate) enum Blocked<T> {
    /// Full / empty: the other index shows it.
    Settled(T),
    /// A slot's other side claimed it and has not finished.
    InFlight(T),
    Disconnected(T),
}

impl Blocked<()> {
    /// The same reason, carrying `value` back.
    #[inline(always)]
    fn with<T>(self, value: T) -> Blocked<T> {
        match self {
            Blocked::Settled(()) => Blocked::Settled(value),
            Blocked::InFlight(()) => Blocked::InFlight(value),
            Blocked::Disconnected(()) => Blocked::Disconnected(value),
        }
    }
}

impl<T> Chan<T> {
    fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Sets `WATCHED` (a watcher of the receive side, on its list already) and says whether a
    /// receive could proceed now: `tail` as the flag's `fetch_or` read it against `head` loaded
    /// after it (what [`Flavor::is_ready`] computes with a length, from the same two words,
    /// without the second read of `tail` that a consistent length needs). A send whose claim
    /// comes after the `fetch_or` in `tail`'s modification order finds the flag and notifies;
    /// one that came before is in the value read. A receiver taking that item meanwhile makes
    /// the answer a spurious "ready", which only costs the caller a poll.
    #[inline]
    fn arm_recv_ready(&self) -> bool {
        let tail = self.tail.set_flag(WATCHED);
        let head = self.head.load(SeqCst);
        tail & DISCONNECTED != 0 || tail >> SHIFT != head >> SHIFT
    }

    /// The same for a watcher of the send side: sets `WATCHED` in `head`; ready unless `tail`,
    /// loaded after, is a lap ahead of the `head` the `fetch_or` read (full), or shows the
    /// disconnection.
    #[inline]
    fn arm_send_ready(&self) -> bool {
        let head = self.head.set_flag(WATCHED) >> SHIFT;
        let tail = self.tail.load(SeqCst);
        tail & DISCONNECTED != 0 || head.wrapping_add(self.one_lap) & INDEX_MASK != tail >> SHIFT
    }

    /// The index word after `word` (whose index is `idx`), its flags cleared: within a lap
    /// one addition to the word, behind a branch the predictor learns (taken once a lap, or
    /// always at capacity 1), so that a claim's CAS waits for two instructions after its load
    /// of the word rather than for [`Self::next`]'s choice between both outcomes.
    #[inline(always)]
    fn next_word(&self, word: u64, idx: u64) -> u64 {
        if (idx & (self.one_lap - 1)) + 1 < self.slots.len() as u64 {
            (word & !FLAGS) + (1 << SHIFT)
        } else {
            self.next(idx) << SHIFT
        }
    }

    /// The index after `idx`.
    #[inline]
    fn next(&self, idx: u64) -> u64 {
        let pos = idx & (self.one_lap - 1);
        if pos + 1 < self.slots.len() as u64 {
            idx + 1
        } else {
            (idx & !(self.one_lap - 1)).wrapping_add(self.one_lap) & INDEX_MASK
        }
    }

    /// The slot of index `idx` (an index, not an index word: shift the word first).
    #[inline]
    fn slot(&self, idx: u64) -> &Slot<T> {
        let pos = (idx & (self.one_lap - 1)) as usize;
        // SAFETY: position < capacity for every index this channel produces.
        unsafe { self.slots.get_unchecked(pos) }
    }

    #[inline(always)]
    pub(crate) fn try_send(&self, value: T) -> Result<(), Blocked<T>> {
        // The common case, inlined with no loop: connected, the slot free, the CAS unopposed
        // (see "The claim's fast path" above).
        let tail = self.tail.recent();
        let idx = tail >> SHIFT;
        let slot = self.slot(idx);
        if tail & DISCONNECTED == 0 {
            let stamp = slot.stamp.load(Acquire);
            if stamp == idx {
                let new = self.next_word(tail, idx);
                if self
                    .tail
                    .compare_exchange(tail, new, SeqCst, Relaxed)
                    .is_ok()
                {
                    self.tail.note(new);
                    // SAFETY: claimed just now.
                    unsafe { self.write_at(slot, idx, tail & WAKE, value) };
                    return Ok(());
                }
            } else if self.last_laps(stamp, idx) && self.full_at(idx) {
                // Full, as the claim loop's first round would find it (the waiting sender's
                // common case: answered without a call).
                return Err(self.full().with(value));
            }
        }
        self.try_send_slow(value)
    }

    /// Whether a send's slot at index `idx`, stamped `stamp`, still holds last lap's item.
    #[inline(always)]
    fn last_laps(&self, stamp: u64, idx: u64) -> bool {
        stamp.wrapping_add(self.one_lap) & INDEX_MASK == (idx + 1) & INDEX_MASK
    }

    /// Whether a send that found last lap's item at index `idx` found the channel full:
    /// `head` a lap behind, by the `SeqCst` load that is `Full`'s linearisation point.
    #[inline(always)]
    fn full_at(&self, idx: u64) -> bool {
        (self.head.load(SeqCst) >> SHIFT).wrapping_add(self.one_lap) & INDEX_MASK == idx
    }

    /// A receive found index `idx` unwritten: if `tail` is there too (the `SeqCst` load that
    /// is `Empty`'s linearisation point), the channel is empty, and disconnected if `tail`
    /// says so; None while a sender that claimed `idx` is still writing it.
    #[inline(always)]
    fn empty_at(&self, idx: u64) -> Option<Blocked<()>> {
        let tail = self.tail.load(SeqCst);
        (tail >> SHIFT == idx).then_some(if tail & DISCONNECTED != 0 {
            Blocked::Disconnected(())
        } else {
            Blocked::Settled(())
        })
    }

    /// Why a send found the channel full: `Settled`, unless the disconnection came first. The
    /// claim read `DISCONNECTED` from a copy of `tail` (`Index::recent`), which can lack it:
    /// a claimer's note of its own new word may land after the disconnection's note of the
    /// flag. A free slot would show it (the CAS fails against the word and reads it); a full
    /// channel asks the word itself, on this rare path.
    #[cold]
    fn full(&self) -> Blocked<()> {
        if self.tail.load(SeqCst) & DISCONNECTED != 0 {
            Blocked::Disconnected(())
        } else {
            Blocked::Settled(())
        }
    }

    /// [`Self::try_send`]'s other cases, out of line: a lost race, a receiver in flight, the
    /// disconnection — the claim loop, from its start.
    #[cold]
    #[inline(never)]
    fn try_send_slow(&self, value: T) -> Result<(), Blocked<T>> {
        match self.claim_send_at() {
            Ok((idx, slot, wake)) => {
                // SAFETY: claimed just now.
                unsafe { self.write_at(slot, idx, wake, value) };
                Ok(())
            }
            Err(b) => Err(b.with(value)),
        }
    }

    /// Claims the next index for a send (its slot empty), or says why not: the first half of
    /// a send; `wake` holds the receivers' waiting flags that were in the word the CAS replaced
    /// (`RECEIVERS_WAIT`, `WATCHED`: which of them the completion wakes).
    #[inline(always)]
    fn claim_send(&self) -> Result<(u64, u64), Blocked<()>> {
        self.claim_send_at().map(|(idx, _, wake)| (idx, wake))
    }

    /// [`Self::claim_send`], with the claimed index's slot: found before the CAS, so that the
    /// write after it does not look for it again.
    #[inline(always)]
    fn claim_send_at(&self) -> Result<(u64, &Slot<T>, u64), Blocked<()>> {
        let mut spins = 0;
        let mut contended = 0;
        let mut tail = self.tail.recent();
        loop {
            if tail & DISCONNECTED != 0 {
                return Err(Blocked::Disconnected(()));
            }
            let idx = tail >> SHIFT;
            let slot = self.slot(idx);
            let stamp = slot.stamp.load(Acquire);
            if stamp == idx {
                let new = (self.next(idx) << SHIFT) | (tail & DISCONNECTED);
                match self.tail.compare_exchange_weak(tail, new, SeqCst, Relaxed) {
                    Ok(_) => {
                        self.tail.note(new);
                        return Ok((idx, slot, tail & WAKE));
                    }
                    Err(t) => {
                        tail = t;
                        back_off(&mut contended);
                    }
                }
            } else if self.last_laps(stamp, idx) {
                // Last lap's item is still here.
                if self.full_at(idx) {
                    return Err(self.full());
                }
                spins += 1;
                if spins > IN_FLIGHT_SPINS {
                    return Err(Blocked::InFlight(()));
                }
                spin_loop();
                tail = self.tail.load(Relaxed);
            } else {
                // Another sender claimed `idx` since we loaded `tail`, or last lap's sender of
                // this slot is still writing it (claimed, stamp not stored): then `tail` stays
                // put, and that sender is in flight.
                back_off(&mut contended);
                let t = self.tail.load(Relaxed);
                if t == tail {
                    spins += 1;
                    if spins > IN_FLIGHT_SPINS {
                        return Err(Blocked::InFlight(()));
                    }
                }
                tail = t;
            }
        }
    }

    /// The second half of a send: writes the value at a claimed index and publishes it.
    ///
    /// # Safety
    /// `idx` was claimed by [`Self::claim_send`] and not written since.
    #[inline(always)]
    unsafe fn write(&self, idx: u64, wake: u64, value: T) {
        // SAFETY: the caller's.
        unsafe { self.write_at(self.slot(idx), idx, wake, value) }
    }

    /// [`Self::write`] into `slot`, the slot of `idx`.
    ///
    /// # Safety
    /// As `write`'s.
    #[inline(always)]
    unsafe fn write_at(&self, slot: &Slot<T>, idx: u64, wake: u64, value: T) {
        // SAFETY: the claim's CAS gave us index `idx`, whose slot is empty (stamp `idx`,
        // loaded with Acquire after its last receiver's Release).
        unsafe { (*slot.value.get()).write(value) };
        slot.stamp.store((idx + 1) & INDEX_MASK, Release);
        if wake != 0 {
            if wake & RECEIVERS_WAIT != 0 {
                self.not_empty.increment();
            }
            if wake & WATCHED != 0 {
                self.recv_select.notify();
            }
        }
    }

    #[inline(always)]
    pub(crate) fn try_recv(&self) -> Result<T, Blocked<()>> {
        // The common case, inlined with no loop (as in `try_send`): the slot written, the CAS
        // unopposed.
        let head = self.head.recent();
        let idx = head >> SHIFT;
        let slot = self.slot(idx);
        let stamp = slot.stamp.load(Acquire);
        if stamp == (idx + 1) & INDEX_MASK {
            let new = self.next_word(head, idx);
            if self
                .head
                .compare_exchange(head, new, SeqCst, Relaxed)
                .is_ok()
            {
                self.head.note(new);
                // SAFETY: claimed just now.
                return Ok(unsafe { self.read_at(slot, idx, head & WAKE) });
            }
        } else if stamp == idx {
            // Empty, as the claim loop's first round would find it (the waiting receiver's
            // common case: answered without a call).
            if let Some(why) = self.empty_at(idx) {
                return Err(why);
            }
        }
        self.try_recv_slow()
    }

    /// [`Self::try_recv`]'s other cases, out of line: the claim loop, from its start (as
    /// [`Self::try_send_slow`]).
    #[cold]
    #[inline(never)]
    fn try_recv_slow(&self) -> Result<T, Blocked<()>> {
        let (idx, slot, wake) = self.claim_recv_at()?;
        // SAFETY: claimed just now.
        Ok(unsafe { self.read_at(slot, idx, wake) })
    }

    /// Claims the next index for a receive (its slot written), or says why not: the first
    /// half of a receive; `wake` holds the senders' waiting flags (`SENDERS_WAIT`, `WATCHED`).
    #[inline(always)]
    fn claim_recv(&self) -> Result<(u64, u64), Blocked<()>> {
        self.claim_recv_at().map(|(idx, _, wake)| (idx, wake))
    }

    /// [`Self::claim_recv`], with the claimed index's slot (as [`Self::claim_send_at`]).
    #[inline(always)]
    fn claim_recv_at(&self) -> Result<(u64, &Slot<T>, u64), Blocked<()>> {
        let mut spins = 0;
        let mut contended = 0;
        let mut head = self.head.recent();
        loop {
            let idx = head >> SHIFT;
            let slot = self.slot(idx);
            let stamp = slot.stamp.load(Acquire);
            if stamp == (idx + 1) & INDEX_MASK {
                let new = self.next(idx) << SHIFT;
                match self.head.compare_exchange_weak(head, new, SeqCst, Relaxed) {
                    Ok(_) => {
                        self.head.note(new);
                        return Ok((idx, slot, head & WAKE));
                    }
                    Err(h) => {
                        head = h;
                        back_off(&mut contended);
                    }
                }
            } else if stamp == idx {
                // Nothing written at this index yet.
                if let Some(why) = self.empty_at(idx) {
                    return Err(why);
                }
                spins += 1;
                if spins > IN_FLIGHT_SPINS {
                    return Err(Blocked::InFlight(()));
                }
                spin_loop();
                head = self.head.load(Relaxed);
            } else {
                // Another receiver claimed `idx` since we loaded `head`, or last lap's receiver
                // of this slot is still moving its value out: then `head` stays put, and that
                // receiver is in flight.
                back_off(&mut contended);
                let h = self.head.load(Relaxed);
                if h == head {
                    spins += 1;
                    if spins > IN_FLIGHT_SPINS {
                        return Err(Blocked::InFlight(()));
                    }
                }
                head = h;
            }
        }
    }

    /// The second half of a receive: moves the value out of a claimed index and frees its
    /// slot for the next lap.
    ///
    /// # Safety
    /// `idx` was claimed by [`Self::claim_recv`] and not read since.
    #[inline(always)]
    unsafe fn read(&self, idx: u64, wake: u64) -> T {
        // SAFETY: the caller's.
        unsafe { self.read_at(self.slot(idx), idx, wake) }
    }

    /// [`Self::read`] from `slot`, the slot of `idx`.
    ///
    /// # Safety
    /// As `read`'s.
    #[inline(always)]
    unsafe fn read_at(&self, slot: &Slot<T>, idx: u64, wake: u64) -> T {
        // SAFETY: the claim's CAS gave us index `idx`, whose slot holds its sender's value
        // (stamp `idx + 1`, loaded with Acquire after its Release).
        let value = unsafe { (*slot.value.get()).assume_init_read() };
        slot.stamp
            .store(idx.wrapping_add(self.one_lap) & INDEX_MASK, Release);
        if wake != 0 {
            if wake & SENDERS_WAIT != 0 {
                self.not_full.increment();
            }
            if wake & WATCHED != 0 {
                self.send_select.notify();
            }
        }
        value
    }

    fn send_deadline(
        &self,
        mut value: T,
        deadline: Option<Deadline>,
    ) -> Result<(), SendTimeoutError<T>> {
        let mut nap = IN_FLIGHT_FIRST_NAP;
        loop {
            match self.try_send(value) {
                Ok(()) => return Ok(()),
                Err(Blocked::Disconnected(v)) => return Err(SendTimeoutError::Disconnected(v)),
                Err(Blocked::Settled(v) | Blocked::InFlight(v)) => value = v,
            }
            let e = self.not_full.value();
            self.head.set_flag(SENDERS_WAIT);
            let in_flight = match self.try_send(value) {
                Ok(()) => return Ok(()),
                Err(Blocked::Disconnected(v)) => return Err(SendTimeoutError::Disconnected(v)),
                Err(Blocked::Settled(v)) => {
                    value = v;
                    false
                }
                Err(Blocked::InFlight(v)) => {
                    value = v;
                    true
                }
            };
            if wait(&self.not_full, e, deadline, in_flight, &mut nap).is_err() {
                return Err(SendTimeoutError::Timeout(value));
            }
        }
    }

    fn recv_deadline(&self, deadline: Option<Deadline>) -> Result<T, RecvTimeoutError> {
        let mut nap = IN_FLIGHT_FIRST_NAP;
        loop {
            match self.try_recv() {
                Ok(v) => return Ok(v),
                Err(Blocked::Disconnected(())) => return Err(RecvTimeoutError::Disconnected),
                Err(_) => {}
            }
            let e = self.not_empty.value();
            self.tail.set_flag(RECEIVERS_WAIT);
            let in_flight = match self.try_recv() {
                Ok(v) => return Ok(v),
                Err(Blocked::Disconnected(())) => return Err(RecvTimeoutError::Disconnected),
                Err(Blocked::Settled(())) => false,
                Err(Blocked::InFlight(())) => true,
            };
            if wait(&self.not_empty, e, deadline, in_flight, &mut nap).is_err() {
                return Err(RecvTimeoutError::Timeout);
            }
        }
    }

    /// [`Self::try_send`], waiting out a receiver in flight: `Full` only when the channel is.
    fn try_send_settled(&self, mut value: T) -> Result<(), Blocked<T>> {
        let mut pauses = 0;
        loop {
            match self.try_send(value) {
                Err(Blocked::InFlight(v)) => {
                    value = v;
                    pauses += 1;
                    settle(pauses);
                }
                r => return r,
            }
        }
    }

    /// [`Self::try_recv`], waiting out a sender in flight: `Empty` only when the channel is.
    fn try_recv_settled(&self) -> Result<T, Blocked<()>> {
        let mut pauses = 0;
        loop {
            match self.try_recv() {
                Err(Blocked::InFlight(())) => {
                    pauses += 1;
                    settle(pauses);
                }
                r => return r,
            }
        }
    }

    fn disconnect(&self) {
        self.tail.set_flag(DISCONNECTED);
        self.not_empty.increment();
        self.not_full.increment();
        self.recv_select.notify();
        self.send_select.notify();
    }

    fn len(&self) -> usize {
        loop {
            let tail = self.tail.load(SeqCst) >> SHIFT;
            let head = self.head.load(SeqCst) >> SHIFT;
            if self.tail.load(SeqCst) >> SHIFT != tail {
                continue;
            }
            let lap_pos = |i: u64| (i & !(self.one_lap - 1), i & (self.one_lap - 1));
            let ((tl, tp), (hl, hp)) = (lap_pos(tail), lap_pos(head));
            return if tl == hl {
                (tp - hp) as usize
            } else {
                // The tail is one lap ahead.
                (self.slots.len() as u64 - hp + tp) as usize
            };
        }
    }
}

/// After a claim lost its CAS, or found its index taken, to another operation of its side:
/// 2^`contended` `pause`s, doubling up to [`BACKOFF_LIMIT`]. Retrying at once (one `pause`)
/// keeps every contender's next CAS on the line while the winner still needs it, and the index
/// word then moves between cores once per attempt rather than once per claim.
#[inline(always)]
fn back_off(contended: &mut u32) {
    if cfg!(loom) {
        spin_loop();
        return;
    }
    for _ in 0..1u32 << *contended {
        spin_loop();
    }
    if *contended < BACKOFF_LIMIT {
        *contended += 1;
    }
}

/// The longest contention back-off is 2^6 = 64 `pause`s.
const BACKOFF_LIMIT: u32 = 6;

/// The `pause`-th pause (from 1) of a `try_*` that found the other side of its slot in flight
/// (claimed, not yet written or moved out): a few `sched_yield`s, for an operation that shares our CPU, then
/// naps of 50 µs doubling to 1 ms, for one whose thread was preempted in that window of a few
/// instructions. (crossbeam-channel's `try_recv` waits the same way: answering `Empty` while
/// a completed send's value sits behind a slot in flight is not linearizable.)
pub(crate) fn settle(pause: u32) {
    if cfg!(loom) || pause <= 4 {
        yield_now();
        return;
    }
    let micros = 50u64 << (pause - 5).min(5);
    std::thread::sleep(Duration::from_micros(micros.min(1000)));
}

/// Wait on `ec` past version `e`: until the deadline if the other side is settled, in short
/// naps if an operation of the other side is in flight (see the module documentation).
fn wait(
    ec: &EventCount,
    e: u64,
    deadline: Option<Deadline>,
    in_flight: bool,
    nap: &mut Duration,
) -> Result<(), ()> {
    if !in_flight {
        return ec.wait(e, deadline).map(drop).map_err(drop);
    }
    // Give the CPU to the thread we wait for, in case it shares ours; then nap.
    yield_now();
    // Loom explores schedules, not time: the yield is the nap there (and keeps the model
    // deterministic, which reading the clock would not).
    if cfg!(loom) {
        return Ok(());
    }
    let wake = Deadline::after(*nap);
    *nap = (*nap * 2).min(IN_FLIGHT_MAX_NAP);
    let until = deadline.map_or(wake, |d| d.min(wake));
    match ec.wait(e, Some(until)) {
        Ok(_) => Ok(()),
        Err(_) if deadline.is_some_and(|d| d.has_passed()) => Err(()),
        Err(_) => Ok(()),
    }
}

impl<T> Drop for Chan<T> {
    fn drop(&mut self) {
        // Every handle is gone, so nothing is in flight: drop the values in [head, tail) —
        // those written: a select's claimed send that was never completed (its
        // `SelectedOperation` dropped, which panics) left its slot unwritten.
        let tail = self.tail.load(Relaxed) >> SHIFT;
        let mut idx = self.head.load(Relaxed) >> SHIFT;
        while idx != tail {
            let slot = self.slot(idx);
            if slot.stamp.load(Relaxed) == (idx + 1) & INDEX_MASK {
                // SAFETY: a written index in [head, tail) holds a value nobody else can reach.
                unsafe { (*slot.value.get()).assume_init_drop() };
            }
            idx = self.next(idx);
        }
    }
}

/// The sending side of an [`mpmc` channel](channel): `Clone`, `Send` and `Sync`.
pub struct Sender<T> {
    pub(crate) flavor: Flavor<T>,
}

/// The receiving side of an [`mpmc` channel](channel): `Clone`, `Send` and `Sync`.
pub struct Receiver<T> {
    pub(crate) flavor: Flavor<T>,
}

/// A channel with slots (the protocol above), a rendezvous (capacity 0), or an unbounded list
/// of blocks (`list.rs`).
pub(crate) enum Flavor<T> {
    Array(Arc<Chan<T>>),
    Zero(Arc<crate::rendezvous::Chan<T>>),
    List(Arc<crate::list::Chan<T>>),
}

impl<T> Clone for Flavor<T> {
    fn clone(&self) -> Self {
        match self {
            Flavor::Array(c) => Flavor::Array(c.clone()),
            Flavor::Zero(c) => Flavor::Zero(c.clone()),
            Flavor::List(c) => Flavor::List(c.clone()),
        }
    }
}

impl<T> Flavor<T> {
    /// `None`: unbounded.
    fn capacity(&self) -> Option<usize> {
        match self {
            Flavor::Array(c) => Some(c.capacity()),
            Flavor::Zero(_) => Some(0),
            Flavor::List(_) => None,
        }
    }

    fn len(&self) -> usize {
        match self {
            Flavor::Array(c) => c.len(),
            Flavor::Zero(_) => 0,
            Flavor::List(c) => c.len(),
        }
    }

    fn is_full(&self) -> bool {
        self.capacity() == Some(self.len())
    }

    fn is_disconnected(&self) -> bool {
        match self {
            Flavor::Array(c) => c.tail.load(SeqCst) & DISCONNECTED != 0,
            Flavor::Zero(c) => c.is_disconnected(),
            Flavor::List(c) => c.is_disconnected(),
        }
    }

    /// The handle counters: senders, receivers.
    fn counts(&self) -> (&AtomicUsize, &AtomicUsize) {
        match self {
            Flavor::Array(c) => (&c.senders, &c.receivers),
            Flavor::Zero(c) => (&c.senders, &c.receivers),
            Flavor::List(c) => (&c.senders, &c.receivers),
        }
    }

    fn send(&self, value: T, deadline: Option<Deadline>) -> Result<(), SendTimeoutError<T>> {
        match self {
            Flavor::Array(c) => c.send_deadline(value, deadline),
            Flavor::List(c) => c.send(value).map_err(SendTimeoutError::Disconnected),
            Flavor::Zero(c) => c.send(value, Wait::Until(deadline)).map_err(|e| match e {
                Failed::NoPartner(v) => SendTimeoutError::Timeout(v),
                Failed::Disconnected(v) => SendTimeoutError::Disconnected(v),
            }),
        }
    }

    /// The list an async operation waiting for operation `send` registers on (`None`: an
    /// unbounded send, which never waits).
    pub(crate) fn task_list(&self, send: bool) -> Option<&Observers> {
        match (self, send) {
            (Flavor::Array(c), true) => Some(&c.send_select),
            (Flavor::Array(c), false) => Some(&c.recv_select),
            (Flavor::List(_), true) => None,
            (Flavor::List(c), false) => Some(c.recv_watchers()),
            (Flavor::Zero(c), send) => Some(c.watchers(send)),
        }
    }

    /// Registers a task waiting for operation `send`: its entry on the side's list, then the
    /// side's flag (as a select's `watch`). The entry's key, if it needs one, and whether the
    /// operation could proceed once the flag was set (see [`Self::rearm_ready`]).
    #[inline]
    pub(crate) fn watch_task(&self, send: bool, waker: &std::task::Waker) -> (Option<u64>, bool) {
        match self.task_list(send) {
            Some(list) => {
                let key = list.add_task(waker);
                (Some(key), self.rearm_ready(send))
            }
            None => (None, self.is_ready(send, None)),
        }
    }

    /// [`Self::rearm`], then whether the operation could proceed ([`Handle::is_ready`]): for a
    /// bounded channel, from the flag's `fetch_or` and one load of the other index.
    #[inline]
    pub(crate) fn rearm_ready(&self, send: bool) -> bool {
        match (self, send) {
            (Flavor::Array(c), true) => c.arm_send_ready(),
            (Flavor::Array(c), false) => c.arm_recv_ready(),
            _ => {
                self.rearm(send);
                self.is_ready(send, None)
            }
        }
    }

    /// A registered task polled again: true if its entry stands (see `Observers::renew_task`).
    pub(crate) fn renew_task(&self, send: bool, key: u64, waker: &std::task::Waker) -> bool {
        self.task_list(send)
            .is_some_and(|l| l.renew_task(key, waker))
    }

    /// Withdraws a task's entry (nothing if a notification took it).
    #[inline]
    pub(crate) fn unwatch_task(&self, send: bool, key: u64) {
        if let Some(l) = self.task_list(send) {
            l.remove_task(key);
        }
    }

    fn recv(&self, deadline: Option<Deadline>) -> Result<T, RecvTimeoutError> {
        match self {
            Flavor::Array(c) => c.recv_deadline(deadline),
            Flavor::Zero(c) => c.recv(Wait::Until(deadline)).map_err(|e| match e {
                Failed::NoPartner(()) => RecvTimeoutError::Timeout,
                Failed::Disconnected(()) => RecvTimeoutError::Disconnected,
            }),
            Flavor::List(c) => c.recv(deadline).map_err(|e| match e {
                None => RecvTimeoutError::Timeout,
                Some(_) => RecvTimeoutError::Disconnected,
            }),
        }
    }
}

impl<T> Handle for Flavor<T> {
    fn channel(&self) -> *const () {
        match self {
            Flavor::Array(c) => (&**c as *const Chan<T>).cast(),
            Flavor::Zero(c) => (&**c as *const crate::rendezvous::Chan<T>).cast(),
            Flavor::List(c) => (&**c as *const crate::list::Chan<T>).cast(),
        }
    }

    fn try_claim(&self, send: bool, token: &mut Token) -> Attempt {
        let claimed = match (self, send) {
            (Flavor::Array(c), true) => c.claim_send(),
            (Flavor::Array(c), false) => c.claim_recv(),
            (Flavor::List(c), true) => {
                // Room always: the completion sends (or finds the channel disconnected).
                token.disconnected = c.is_disconnected();
                return Attempt::Claimed;
            }
            (Flavor::List(c), false) => {
                return match c.claim_recv() {
                    Ok((block, offset)) => {
                        token.ptr = block.cast_const().cast();
                        token.index = offset as u64;
                        Attempt::Claimed
                    }
                    Err(crate::list::Nothing::Disconnected) => {
                        token.disconnected = true;
                        Attempt::Claimed
                    }
                    Err(crate::list::Nothing::Empty) => Attempt::NotReady,
                };
            }
            (Flavor::Zero(c), send) => {
                return match c.select_try(send, token) {
                    true => Attempt::Claimed,
                    false => Attempt::NotReady,
                };
            }
        };
        match claimed {
            Ok((index, wake)) => {
                token.index = index;
                token.wake = wake;
                Attempt::Claimed
            }
            Err(Blocked::Disconnected(())) => {
                token.disconnected = true;
                Attempt::Claimed
            }
            Err(Blocked::InFlight(())) => Attempt::InFlight,
            Err(Blocked::Settled(())) => Attempt::NotReady,
        }
    }

    fn register(&self, send: bool, ctx: &Arc<Ctx>, index: usize, reg: &mut Token) {
        match self {
            Flavor::Zero(c) => c.select_register(send, ctx, index, reg),
            _ => self.watch(send, ctx),
        }
    }

    fn watch(&self, send: bool, ctx: &Arc<Ctx>) {
        match (self, send) {
            (Flavor::Array(c), true) => {
                c.send_select.add(ctx);
                c.head.set_flag(WATCHED);
            }
            (Flavor::Array(c), false) => {
                c.recv_select.add(ctx);
                c.tail.set_flag(WATCHED);
            }
            (Flavor::List(_), true) => {}
            (Flavor::List(c), false) => c.watch(ctx),
            (Flavor::Zero(c), send) => c.watch(send, ctx),
        }
    }

    fn rearm(&self, send: bool) {
        match (self, send) {
            (Flavor::Array(c), true) => {
                c.head.set_flag(WATCHED);
            }
            (Flavor::Array(c), false) => {
                c.tail.set_flag(WATCHED);
            }
            (Flavor::List(c), false) => c.rearm(),
            // A rendezvous' watch list has no flag; an unbounded send never waits.
            (Flavor::Zero(_) | Flavor::List(_), _) => {}
        }
    }

    fn unwatch(&self, send: bool, ctx: &Arc<Ctx>) {
        match (self, send) {
            (Flavor::Array(c), true) => c.send_select.remove(ctx),
            (Flavor::Array(c), false) => c.recv_select.remove(ctx),
            (Flavor::List(_), true) => {}
            (Flavor::List(c), false) => c.unwatch(ctx),
            (Flavor::Zero(c), send) => c.unwatch(send, ctx),
        }
    }

    fn is_ready(&self, send: bool, own: Option<&Arc<Ctx>>) -> bool {
        match (self, send) {
            (Flavor::Zero(c), send) => c.select_ready(send, own),
            (Flavor::List(_), true) => true,
            (_, true) => {
                self.len() < self.capacity().unwrap_or(usize::MAX) || self.is_disconnected()
            }
            (_, false) => self.len() > 0 || self.is_disconnected(),
        }
    }

    fn unregister(&self, send: bool, ctx: &Arc<Ctx>, reg: &mut Token, selected: bool) {
        match self {
            Flavor::Zero(c) => c.select_unregister(send, reg, selected),
            _ => self.unwatch(send, ctx),
        }
    }

    fn abandon_recv(&self, token: &mut Token) {
        drop(complete_recv(self, token));
    }
}

/// The second half of a send claimed on `flavor` (by a select, or an async send); the value
/// comes back if the claim found the channel disconnected.
pub(crate) fn complete_send<T>(flavor: &Flavor<T>, token: &mut Token, msg: T) -> Result<(), T> {
    match flavor {
        _ if token.disconnected && token.ptr.is_null() => Err(msg),
        Flavor::Array(c) => {
            // SAFETY: the claim took `token.index` on this channel.
            unsafe { c.write(token.index, token.wake, msg) };
            Ok(())
        }
        Flavor::List(c) => c.send(msg),
        Flavor::Zero(c) => c.select_send(token, msg),
    }
}

/// The second half of a receive claimed on `flavor` (by a select, or an async receive).
pub(crate) fn complete_recv<T>(flavor: &Flavor<T>, token: &mut Token) -> Result<T, RecvError> {
    let r = match flavor {
        _ if token.disconnected && token.ptr.is_null() => Err(()),
        // SAFETY: the select claimed `token.index` on this channel.
        Flavor::Array(c) => Ok(unsafe { c.read(token.index, token.wake) }),
        Flavor::List(c) => {
            // SAFETY: the select claimed this slot on this channel.
            Ok(unsafe { c.read(token.ptr.cast_mut().cast(), token.index as usize) })
        }
        Flavor::Zero(c) => c.select_recv(token),
    };
    r.map_err(|()| RecvError)
}

impl<'a> Select<'a> {
    /// Adds a send on `sender`; returns its index (0, 1, … in the order added).
    #[inline]
    pub fn send<T>(&mut self, sender: &'a Sender<T>) -> usize {
        self.add(&sender.flavor, true)
    }

    /// Adds a receive on `receiver`; returns its index (0, 1, … in the order added).
    #[inline]
    pub fn recv<T>(&mut self, receiver: &'a Receiver<T>) -> usize {
        self.add(&receiver.flavor, false)
    }
}

impl SelectedOperation<'_> {
    /// Completes a selected send on `sender` (the one [`Select::send`] was given): fails only
    /// if the channel is disconnected, handing `msg` back.
    ///
    /// # Panics
    /// If `sender` is not the selected operation's.
    #[inline]
    pub fn send<T>(mut self, sender: &Sender<T>, msg: T) -> Result<(), SendError<T>> {
        self.check(&sender.flavor, true);
        let r = complete_send(&sender.flavor, &mut self.token, msg);
        std::mem::forget(self);
        r.map_err(SendError)
    }

    /// Completes a selected receive on `receiver` (the one [`Select::recv`] was given): fails
    /// only if the channel is disconnected and empty.
    ///
    /// # Panics
    /// If `receiver` is not the selected operation's.
    #[inline]
    pub fn recv<T>(mut self, receiver: &Receiver<T>) -> Result<T, RecvError> {
        self.check(&receiver.flavor, false);
        let r = complete_recv(&receiver.flavor, &mut self.token);
        std::mem::forget(self);
        r
    }
}

impl<T> Sender<T> {
    /// Send without blocking: `Full` only when every slot holds a value. A slot whose value a
    /// receiver has claimed but not yet moved out is waited for (a few instructions, or naps
    /// if that receiver's thread was preempted in between), as crossbeam-channel does.
    ///
    /// On a rendezvous channel (capacity 0), `Full` unless a receiver is blocked in `recv`;
    /// on an [`unbounded`] one, never `Full`.
    #[inline]
    pub fn try_send(&self, value: T) -> Result<(), TrySendError<T>> {
        // The bounded channel's send, inlined into the caller: a slot free now. Anything else
        // (full, a receiver in flight, disconnected, the other flavours) out of line.
        let value = match &self.flavor {
            Flavor::Array(c) => match c.try_send(value) {
                Ok(()) => return Ok(()),
                Err(Blocked::Settled(v) | Blocked::InFlight(v) | Blocked::Disconnected(v)) => v,
            },
            _ => value,
        };
        self.try_send_slow(value)
    }

    #[inline(never)]
    fn try_send_slow(&self, value: T) -> Result<(), TrySendError<T>> {
        match &self.flavor {
            Flavor::List(c) => c.send(value).map_err(TrySendError::Disconnected),
            Flavor::Array(c) => c.try_send_settled(value).map_err(|e| match e {
                Blocked::Settled(v) | Blocked::InFlight(v) => TrySendError::Full(v),
                Blocked::Disconnected(v) => TrySendError::Disconnected(v),
            }),
            Flavor::Zero(c) => c.send(value, Wait::No).map_err(|e| match e {
                Failed::NoPartner(v) => TrySendError::Full(v),
                Failed::Disconnected(v) => TrySendError::Disconnected(v),
            }),
        }
    }

    /// Send, blocking while the channel is full. Fails only when every receiver is gone.
    #[inline]
    pub fn send(&self, value: T) -> Result<(), SendError<T>> {
        // As `try_send`: a free slot of a bounded channel, or an unbounded one's send,
        // inlined; the rest out of line.
        let value = match &self.flavor {
            Flavor::Array(c) => match c.try_send(value) {
                Ok(()) => return Ok(()),
                Err(Blocked::Settled(v) | Blocked::InFlight(v) | Blocked::Disconnected(v)) => v,
            },
            Flavor::List(c) => return c.send(value).map_err(SendError),
            Flavor::Zero(_) => value,
        };
        self.send_slow(value)
    }

    #[inline(never)]
    fn send_slow(&self, value: T) -> Result<(), SendError<T>> {
        self.flavor
            .send(value, None)
            .map_err(|e| SendError(e.into_inner()))
    }

    /// Send, blocking while the channel is full for at most `timeout`.
    pub fn send_timeout(&self, value: T, timeout: Duration) -> Result<(), SendTimeoutError<T>> {
        self.flavor.send(value, Some(Deadline::after(timeout)))
    }

    /// Send, blocking while the channel is full until `deadline`: a [`Deadline`], an
    /// [`Instant`](std::time::Instant) as crossbeam-channel takes, or `None` for no deadline
    /// (see [`IntoDeadline`]).
    pub fn send_deadline(
        &self,
        value: T,
        deadline: impl IntoDeadline,
    ) -> Result<(), SendTimeoutError<T>> {
        self.flavor.send(value, deadline.into_deadline())
    }

    /// The number of slots, as crossbeam-channel says: `Some` for a bounded channel (`Some(0)`
    /// for a rendezvous), `None` for an [`unbounded`] one.
    pub fn capacity(&self) -> Option<usize> {
        self.flavor.capacity()
    }

    /// Values in the channel now (always 0 in a rendezvous).
    pub fn len(&self) -> usize {
        self.flavor.len()
    }

    /// Whether the channel is empty now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the channel is full now (a rendezvous always is, as crossbeam-channel's; an
    /// unbounded one never).
    pub fn is_full(&self) -> bool {
        self.flavor.is_full()
    }

    /// Whether the other side (every receiver) is gone.
    pub fn is_disconnected(&self) -> bool {
        self.flavor.is_disconnected()
    }

    /// Whether `other` sends into the same channel (as crossbeam-channel's `same_channel`).
    pub fn same_channel(&self, other: &Sender<T>) -> bool {
        self.flavor.channel() == other.flavor.channel()
    }
}

impl<T> Receiver<T> {
    /// Receive without blocking: `Empty` only when no value has been sent that is not yet
    /// received. A value whose sender has claimed its slot but not finished writing is waited
    /// for (a few instructions, or naps if that sender's thread was preempted in between), as
    /// crossbeam-channel does.
    ///
    /// On a rendezvous channel (capacity 0), `Empty` unless a sender is blocked in `send`.
    #[inline]
    pub fn try_recv(&self) -> Result<T, TryRecvError> {
        // The bounded channel's receive, inlined into the caller: a value there now. Anything
        // else (empty, a sender in flight, disconnected, the other flavours) out of line.
        if let Flavor::Array(c) = &self.flavor {
            if let Ok(v) = c.try_recv() {
                return Ok(v);
            }
        }
        self.try_recv_slow()
    }

    #[inline(never)]
    fn try_recv_slow(&self) -> Result<T, TryRecvError> {
        match &self.flavor {
            Flavor::Array(c) => c.try_recv_settled().map_err(|e| match e {
                Blocked::Settled(()) | Blocked::InFlight(()) => TryRecvError::Empty,
                Blocked::Disconnected(()) => TryRecvError::Disconnected,
            }),
            Flavor::List(c) => c.try_recv().map_err(|e| match e {
                crate::list::Nothing::Empty => TryRecvError::Empty,
                crate::list::Nothing::Disconnected => TryRecvError::Disconnected,
            }),
            Flavor::Zero(c) => c.recv(Wait::No).map_err(|e| match e {
                Failed::NoPartner(()) => TryRecvError::Empty,
                Failed::Disconnected(()) => TryRecvError::Disconnected,
            }),
        }
    }

    /// Receive, blocking while the channel is empty. Fails only when every sender is gone and
    /// the channel is empty.
    #[inline]
    pub fn recv(&self) -> Result<T, RecvError> {
        // As `try_recv`: a value in a bounded or unbounded channel inlined, the rest out of
        // line.
        match &self.flavor {
            Flavor::Array(c) => {
                if let Ok(v) = c.try_recv() {
                    return Ok(v);
                }
            }
            Flavor::List(c) => {
                if let Ok(v) = c.try_recv() {
                    return Ok(v);
                }
            }
            Flavor::Zero(_) => {}
        }
        self.recv_slow()
    }

    #[inline(never)]
    fn recv_slow(&self) -> Result<T, RecvError> {
        self.flavor.recv(None).map_err(|_| RecvError)
    }

    /// Receive, blocking while the channel is empty for at most `timeout`.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        self.flavor.recv(Some(Deadline::after(timeout)))
    }

    /// Receive, blocking while the channel is empty until `deadline`: a [`Deadline`], an
    /// [`Instant`](std::time::Instant) as crossbeam-channel takes, or `None` for no deadline
    /// (see [`IntoDeadline`]).
    pub fn recv_deadline(&self, deadline: impl IntoDeadline) -> Result<T, RecvTimeoutError> {
        self.flavor.recv(deadline.into_deadline())
    }

    /// A blocking iterator that ends when every sender is gone and the channel is empty (also
    /// `for x in &rx`).
    pub fn iter(&self) -> Iter<'_, T> {
        Iter { rx: self }
    }

    /// An iterator over the values in the channel now: it ends at the first `try_recv` that
    /// finds nothing, without blocking.
    pub fn try_iter(&self) -> TryIter<'_, T> {
        TryIter { rx: self }
    }

    /// The number of slots, as crossbeam-channel says: `Some` for a bounded channel (`Some(0)`
    /// for a rendezvous), `None` for an [`unbounded`] one.
    pub fn capacity(&self) -> Option<usize> {
        self.flavor.capacity()
    }

    /// Values in the channel now (always 0 in a rendezvous).
    pub fn len(&self) -> usize {
        self.flavor.len()
    }

    /// Whether the channel is empty now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the channel is full now (a rendezvous always is, as crossbeam-channel's; an
    /// unbounded one never).
    pub fn is_full(&self) -> bool {
        self.flavor.is_full()
    }

    /// Whether the other side (every sender) is gone.
    pub fn is_disconnected(&self) -> bool {
        self.flavor.is_disconnected()
    }

    /// Whether `other` receives from the same channel (as crossbeam-channel's
    /// `same_channel`).
    pub fn same_channel(&self, other: &Receiver<T>) -> bool {
        self.flavor.channel() == other.flavor.channel()
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        self.flavor.counts().0.fetch_add(1, Relaxed);
        Sender {
            flavor: self.flavor.clone(),
        }
    }
}

impl<T> Clone for Receiver<T> {
    fn clone(&self) -> Self {
        self.flavor.counts().1.fetch_add(1, Relaxed);
        Receiver {
            flavor: self.flavor.clone(),
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        if self.flavor.counts().0.fetch_sub(1, AcqRel) != 1 {
            return;
        }
        match &self.flavor {
            Flavor::Array(c) => c.disconnect(),
            Flavor::Zero(c) => c.disconnect(),
            Flavor::List(c) => c.disconnect(),
        }
    }
}

impl<T> Drop for Receiver<T> {
    /// The last receiver disconnects, then drops the values still queued at once (as
    /// crossbeam-channel does), not when the last sender goes: what they hold (a file, a
    /// socket, an `Rc`) is released as soon as nobody can receive it. After `DISCONNECTED` no
    /// sender can claim an index (its CAS compares the whole `tail` word), so the values to drop
    /// are those of the indices claimed before; a sender still writing one is waited for.
    fn drop(&mut self) {
        if self.flavor.counts().1.fetch_sub(1, AcqRel) != 1 {
            return;
        }
        match &self.flavor {
            Flavor::Array(c) => {
                c.disconnect();
                while let Ok(value) = c.try_recv_settled() {
                    drop(value);
                }
            }
            // A rendezvous holds no values: blocked senders get theirs back.
            Flavor::Zero(c) => c.disconnect(),
            Flavor::List(c) => c.disconnect_receivers(),
        }
    }
}

/// [`Receiver::iter`]: blocks for each value; ends when every sender is gone and the channel is
/// empty.
#[derive(Debug)]
pub struct Iter<'a, T> {
    rx: &'a Receiver<T>,
}

impl<T> Iterator for Iter<'_, T> {
    type Item = T;
    fn next(&mut self) -> Option<T> {
        self.rx.recv().ok()
    }
}

/// [`Receiver::try_iter`]: the values in the channel now, without blocking.
#[derive(Debug)]
pub struct TryIter<'a, T> {
    rx: &'a Receiver<T>,
}

impl<T> Iterator for TryIter<'_, T> {
    type Item = T;
    fn next(&mut self) -> Option<T> {
        self.rx.try_recv().ok()
    }
}

/// A receiver consumed into a blocking iterator (`for x in rx`).
#[derive(Debug)]
pub struct IntoIter<T> {
    rx: Receiver<T>,
}

impl<T> Iterator for IntoIter<T> {
    type Item = T;
    fn next(&mut self) -> Option<T> {
        self.rx.recv().ok()
    }
}

impl<'a, T> IntoIterator for &'a Receiver<T> {
    type Item = T;
    type IntoIter = Iter<'a, T>;
    fn into_iter(self) -> Iter<'a, T> {
        self.iter()
    }
}

impl<T> IntoIterator for Receiver<T> {
    type Item = T;
    type IntoIter = IntoIter<T>;
    fn into_iter(self) -> IntoIter<T> {
        IntoIter { rx: self }
    }
}

// As crossbeam-channel's and std's: a panic cannot leave a channel half-updated (every slot
// changes hands by one CAS and one stamp store), so handles may cross `catch_unwind`.
impl<T> std::panic::UnwindSafe for Sender<T> {}
impl<T> std::panic::RefUnwindSafe for Sender<T> {}
impl<T> std::panic::UnwindSafe for Receiver<T> {}
impl<T> std::panic::RefUnwindSafe for Receiver<T> {}

impl<T> std::fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sender")
            .field("capacity", &self.capacity())
            .field("len", &self.len())
            .finish()
    }
}

impl<T> std::fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver")
            .field("capacity", &self.capacity())
            .field("len", &self.len())
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize as StdAtomicUsize;

    /// `Chan::full`'s case, staged: the disconnection's flag is in `tail`, but the copy a claim
    /// starts from lacks it (a claimer's note landed after the disconnection's). A full channel
    /// must answer `Disconnected`, not `Full`, at every capacity (capacity 1: every index is
    /// its lap's last).
    #[test]
    fn a_full_channel_reports_a_disconnection_its_copy_of_tail_lacks() {
        for cap in [1, 2, 5] {
            let (tx, rx) = channel::<usize>(cap);
            for i in 0..cap {
                tx.send(i).unwrap();
            }
            let Flavor::Array(c) = &tx.flavor else {
                unreachable!("a bounded channel")
            };
            let stale = c.tail.recent();
            c.tail.fetch_or(DISCONNECTED, SeqCst);
            c.tail.note(stale);
            assert_eq!(
                tx.try_send(7),
                Err(TrySendError::Disconnected(7)),
                "capacity {cap}"
            );
            assert_eq!(
                tx.send_timeout(8, Duration::from_millis(1)),
                Err(SendTimeoutError::Disconnected(8)),
                "capacity {cap}"
            );
            drop(rx);
        }
    }

    #[test]
    fn mpmc_fifo_full_empty_and_len() {
        for cap in [1, 2, 3, 7, 8] {
            let (tx, rx) = channel::<usize>(cap);
            assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
            for round in 0..3 {
                for i in 0..cap {
                    tx.try_send(round * 100 + i).unwrap();
                    assert_eq!(tx.len(), i + 1);
                }
                assert!(tx.is_full());
                assert_eq!(tx.try_send(99), Err(TrySendError::Full(99)));
                for i in 0..cap {
                    assert_eq!(rx.try_recv(), Ok(round * 100 + i));
                }
                assert!(rx.is_empty());
            }
        }
    }

    /// Indices wrap modulo 2^61: a channel started two laps before the wrap keeps FIFO order,
    /// `Full`, `Empty`, `len` and the drop of what is left across it.
    #[test]
    fn mpmc_indices_wrap() {
        for cap in [1, 3, 4] {
            let (tx, rx) = channel::<Arc<usize>>(cap);
            let Flavor::Array(c) = &tx.flavor else {
                unreachable!()
            };
            let start = (INDEX_MASK + 1) - 2 * c.one_lap;
            c.tail.store(start << SHIFT, Relaxed);
            c.tail.note(start << SHIFT);
            c.head.store(start << SHIFT, Relaxed);
            c.head.note(start << SHIFT);
            for (i, slot) in c.slots.iter().enumerate() {
                slot.stamp.store(start + i as u64, Relaxed);
            }
            let witness = Arc::new(0);
            let mut next_in = 0;
            let mut next_out = 0;
            for round in 0..6 {
                while next_in - next_out < cap {
                    tx.try_send(Arc::new(next_in)).unwrap();
                    next_in += 1;
                }
                assert_eq!(tx.len(), cap);
                assert!(matches!(
                    tx.try_send(witness.clone()),
                    Err(TrySendError::Full(_))
                ));
                for _ in 0..(round % cap) + 1 {
                    assert_eq!(*rx.try_recv().unwrap(), next_out);
                    next_out += 1;
                }
                assert_eq!(rx.len(), next_in - next_out);
            }
            assert!(c.tail.load(Relaxed) >> SHIFT < start, "the indices wrapped");
            let left: Vec<_> = (next_out..next_in)
                .map(|_| rx.try_recv().unwrap())
                .collect();
            assert!(left.iter().enumerate().all(|(k, v)| **v == next_out + k));
            assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
            // Refill, and let the channel drop what it holds at the wrapped indices.
            let held: Vec<_> = (0..cap).map(Arc::new).collect();
            for h in &held {
                tx.try_send(h.clone()).unwrap();
            }
            drop((tx, rx));
            assert!(held.iter().all(|h| Arc::strong_count(h) == 1));
            assert_eq!(Arc::strong_count(&witness), 1);
        }
    }

    /// A claim starts from a copy of its index word that may lag (see "Where a claim starts"):
    /// with the copies set back to values the words had before, at random, every `try_send`
    /// and `try_recv` still answers as a queue does (the value, `Full`, `Empty`).
    #[test]
    fn mpmc_stale_copies_of_the_index_words_give_right_answers() {
        let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for cap in [1, 3, 4, 8] {
            let (tx, rx) = channel::<u64>(cap);
            let Flavor::Array(c) = &tx.flavor else {
                unreachable!()
            };
            let mut model = std::collections::VecDeque::new();
            let (mut tails, mut heads) = (vec![0], vec![0]);
            for i in 0..20_000u64 {
                if next() % 3 == 0 {
                    c.tail.note(tails[next() as usize % tails.len()]);
                }
                if next() % 3 == 0 {
                    c.head.note(heads[next() as usize % heads.len()]);
                }
                if next() % 2 == 0 {
                    let r = tx.try_send(i);
                    if model.len() < cap {
                        assert_eq!(r, Ok(()));
                        model.push_back(i);
                    } else {
                        assert_eq!(r, Err(TrySendError::Full(i)));
                    }
                } else {
                    assert_eq!(rx.try_recv().ok(), model.pop_front());
                }
                tails.push(c.tail.load(Relaxed));
                heads.push(c.head.load(Relaxed));
            }
        }
    }

    #[test]
    fn mpmc_same_channel() {
        for (tx, rx) in [channel::<u8>(0), channel::<u8>(2), unbounded::<u8>()] {
            let (tx2, rx2) = (tx.clone(), rx.clone());
            assert!(tx.same_channel(&tx2) && rx.same_channel(&rx2));
            let (other_tx, other_rx) = channel::<u8>(2);
            assert!(!tx.same_channel(&other_tx) && !rx.same_channel(&other_rx));
        }
    }

    #[test]
    fn mpmc_disconnection_like_crossbeam() {
        let (tx, rx) = channel::<String>(4);
        let tx2 = tx.clone();
        tx.send("a".into()).unwrap();
        drop(tx);
        assert!(!rx.is_disconnected(), "one sender is left");
        tx2.send("b".into()).unwrap();
        drop(tx2);
        assert!(rx.is_disconnected());
        assert_eq!(rx.recv().as_deref(), Ok("a"));
        assert_eq!(rx.try_recv().as_deref(), Ok("b"));
        assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
        assert_eq!(rx.recv(), Err(RecvError));

        let (tx, rx) = channel::<u8>(4);
        drop(rx.clone());
        tx.send(1).unwrap();
        drop(rx);
        assert_eq!(tx.try_send(2), Err(TrySendError::Disconnected(2)));
        assert_eq!(tx.send(3), Err(SendError(3)));
    }

    /// The errors carry crossbeam-channel's names, in their types and in what they print.
    #[test]
    fn mpmc_errors_are_named_after_send_and_recv() {
        let name = std::any::type_name::<SendError<u8>>();
        assert!(name.ends_with("mpmc::SendError<u8>"), "{name}");
        assert_eq!(format!("{:?}", SendError(3)), "SendError(..)");
        assert_eq!(format!("{:?}", TrySendError::Full(3)), "Full(..)");
        assert!(TrySendError::Disconnected(3).is_disconnected());
        assert!(SendTimeoutError::Timeout(3).is_timeout());
        assert_eq!(SendTimeoutError::Disconnected(4).into_inner(), 4);
        assert_eq!(format!("{RecvError:?}"), "RecvError");
        assert_eq!(
            RecvTimeoutError::Disconnected.to_string(),
            "nothing to take, and the sending side is gone"
        );
        let boxed: Box<dyn std::error::Error> = Box::new(SendError(3));
        assert_eq!(boxed.to_string(), "the receiving side is gone");
    }

    #[test]
    fn mpmc_values_are_dropped_exactly_once() {
        static LIVE: StdAtomicUsize = StdAtomicUsize::new(0);
        struct Counted;
        impl Counted {
            fn new() -> Counted {
                LIVE.fetch_add(1, SeqCst);
                Counted
            }
        }
        impl Drop for Counted {
            fn drop(&mut self) {
                LIVE.fetch_sub(1, SeqCst);
            }
        }
        {
            let (tx, rx) = channel::<Counted>(3);
            for _ in 0..3 {
                tx.send(Counted::new()).unwrap();
            }
            drop(rx.recv().unwrap());
            tx.send(Counted::new()).unwrap(); // wraps to the next lap
            assert_eq!(LIVE.load(SeqCst), 3);
            let rejected = tx.try_send(Counted::new()).unwrap_err().into_inner();
            drop(rejected);
            assert_eq!(LIVE.load(SeqCst), 3);
        }
        assert_eq!(LIVE.load(SeqCst), 0, "the channel dropped what was left");
    }

    /// crossbeam-channel's iterators, capacity and unwind safety.
    #[test]
    fn mpmc_iterators_capacity_and_unwind_safety() {
        fn unwind_safe<X: std::panic::UnwindSafe + std::panic::RefUnwindSafe>(_: &X) {}
        let (tx, rx) = channel::<u32>(4);
        unwind_safe(&tx);
        unwind_safe(&rx);
        assert_eq!((tx.capacity(), rx.capacity()), (Some(4), Some(4)));
        for i in 0..3 {
            tx.send(i).unwrap();
        }
        assert_eq!(rx.try_iter().collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(rx.try_iter().next(), None, "try_iter does not block");
        tx.send(3).unwrap();
        tx.send(4).unwrap();
        let mut by_ref = Vec::new();
        for x in &rx {
            by_ref.push(x);
            if by_ref.len() == 2 {
                break;
            }
        }
        assert_eq!(by_ref, [3, 4]);
        let producer = std::thread::spawn(move || {
            for i in 5..10 {
                tx.send(i).unwrap();
            }
        });
        let owned: Vec<u32> = rx.into_iter().collect();
        producer.join().unwrap();
        assert_eq!(owned, [5, 6, 7, 8, 9], "ends when the sender is gone");
    }

    #[test]
    fn mpmc_timeouts_fire() {
        let (tx, rx) = channel::<u8>(1);
        assert_eq!(
            rx.recv_timeout(Duration::from_millis(2)),
            Err(RecvTimeoutError::Timeout)
        );
        tx.send(1).unwrap();
        assert_eq!(
            tx.send_timeout(2, Duration::from_millis(2)),
            Err(SendTimeoutError::Timeout(2))
        );
    }

    #[test]
    fn mpmc_blocked_sides_wake_on_disconnect() {
        let (tx, rx) = channel::<u8>(1);
        let waiting = std::thread::spawn(move || rx.recv());
        std::thread::sleep(Duration::from_millis(5));
        drop(tx);
        assert_eq!(waiting.join().unwrap(), Err(RecvError));

        let (tx, rx) = channel::<u8>(1);
        tx.send(0).unwrap();
        let waiting = std::thread::spawn(move || tx.send(1));
        std::thread::sleep(Duration::from_millis(5));
        drop(rx);
        assert_eq!(waiting.join().unwrap(), Err(SendError(1)));
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::thread;

    /// Two senders into a one-slot channel, one receiver taking both: the slot protocol, the
    /// waiting flags in both index words, and the wake-ups (a lost one is a loom deadlock).
    #[test]
    fn mpmc_two_senders_one_slot() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(2);
        b.check(|| {
            let (tx, rx) = channel::<u32>(1);
            let senders: Vec<_> = (1..=2)
                .map(|v| {
                    let tx = tx.clone();
                    thread::spawn(move || tx.send(v).unwrap())
                })
                .collect();
            drop(tx);
            let mut got = [rx.recv().unwrap(), rx.recv().unwrap()];
            got.sort();
            assert_eq!(got, [1, 2]);
            for s in senders {
                s.join().unwrap();
            }
            assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
        });
    }

    /// `try_recv` is linearizable: a sender may be in flight on the head slot (claimed, not yet
    /// written) while a later send completes; a `try_recv` that knows of the completed send must
    /// get a value, not `Empty`; and the last receiver's drop, which drains the queue, ends.
    /// (Under loom a spin is a yield that lets the in-flight sender finish, so this model does
    /// not tell the waiting `try_recv` from one that answers `Empty` after a bounded spin; the
    /// stress test `mpmc_try_recv_and_try_send_are_linearizable` does.)
    #[test]
    fn mpmc_try_recv_after_a_completed_send_finds_a_value() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(2);
        b.check(|| {
            let (tx, rx) = channel::<u32>(2);
            let sent = Arc::new(crate::primitives::AtomicBool::new(false));
            let early = {
                let tx = tx.clone();
                thread::spawn(move || tx.send(1).unwrap())
            };
            let late = {
                let sent = sent.clone();
                thread::spawn(move || {
                    tx.send(2).unwrap();
                    sent.store(true, Release);
                })
            };
            while !sent.load(Acquire) {
                thread::yield_now();
            }
            assert!(rx.try_recv().is_ok(), "Empty after a completed send");
            early.join().unwrap();
            late.join().unwrap();
            drop(rx);
        });
    }

    /// An async receive that finds the channel empty registers (its task entry, then the flag
    /// with `arm_recv_ready`'s look at the indices) while another thread sends: whichever comes
    /// first, the receive is woken and gets the value (a lost wake-up is a deadlock of
    /// `block_on`, which loom reports).
    #[test]
    fn mpmc_async_recv_meets_a_send() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(2);
        b.check(|| {
            let (tx, rx) = channel::<u32>(1);
            let sender = thread::spawn(move || tx.send(7).unwrap());
            assert_eq!(loom::future::block_on(rx.recv_async()), Ok(7));
            sender.join().unwrap();
        });
    }

    /// The same for an async send into a full channel (`arm_send_ready`) while another thread
    /// takes the value in it, then the one sent.
    #[test]
    fn mpmc_async_send_meets_a_recv() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(2);
        b.check(|| {
            let (tx, rx) = channel::<u32>(1);
            tx.send(1).unwrap();
            let receiver = thread::spawn(move || rx.recv().unwrap() * 10 + rx.recv().unwrap());
            assert_eq!(loom::future::block_on(tx.send_async(2)), Ok(()));
            assert_eq!(receiver.join().unwrap(), 12);
        });
    }

    /// Two receivers and one sender that sends one value and leaves: exactly one receiver gets
    /// it, both end with Disconnected.
    #[test]
    fn mpmc_two_receivers_disconnect() {
        let mut b = loom::model::Builder::new();
        // Receivers that find a sender in flight retry (a yield under loom), which multiplies
        // the branches of a schedule; one preemption already covers the disconnect races.
        b.preemption_bound = Some(1);
        b.max_branches = 20_000;
        b.check(|| {
            let (tx, rx) = channel::<u32>(1);
            let receivers: Vec<_> = (0..2)
                .map(|_| {
                    let rx = rx.clone();
                    thread::spawn(move || rx.iter().count())
                })
                .collect();
            drop(rx);
            tx.send(7).unwrap();
            drop(tx);
            let total: usize = receivers.into_iter().map(|r| r.join().unwrap()).sum();
            assert_eq!(total, 1);
        });
    }
}
