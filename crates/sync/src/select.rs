//! Waiting on several channel operations at once: [`Select`] and [`select!`](crate::select!),
//! as crossbeam-channel's, over any [`mpmc`](crate::mpmc) senders and receivers (bounded,
//! rendezvous, unbounded, mixed element types).
//!
//! # Protocol
//!
//! An operation completes in two steps, as in crossbeam-channel: `select` *claims* one (a
//! slot index won by the channel's CAS, a partner's packet taken from a rendezvous queue, or
//! the news that the channel is disconnected) and returns it as a [`SelectedOperation`]; its
//! `send` / `recv` *completes* it (writes or moves the value, which can no longer fail or
//! block for want of room or values). A claimed slot is *in flight* to everyone else, exactly
//! as one claimed by a plain `send` / `recv` between its CAS and its stamp store.
//!
//! ```text
//! select(deadline):
//!   loop:
//!     try phase: try to claim each operation, from a random one on  → claimed: return it
//!     ctx = new context {selected: WAITING, ec: event count};  e = ctx.ec.value()
//!     register ctx on each operation's channel:
//!       bounded / unbounded: push ctx on the side's observer list, then set the side's
//!                            flag (bounded: WATCHED in tail or head; unbounded: its
//!                            waiting flag)
//!       rendezvous:          queue an entry (ctx, index, own packet) as a blocked operation
//!     none ready now (judged after registering) → ctx.ec.wait(e, deadline)
//!     CAS(ctx.selected, WAITING → ABORTED)   // closes the registration
//!     unregister everywhere
//!     the CAS failed → a rendezvous partner (or its disconnection) selected operation i:
//!                      return i, with the own packet it was selected through
//!     deadline passed → Timeout
//! ```
//!
//! **Rendezvous entries.** A partner that pops an entry carrying a context must first win
//! `CAS(ctx.selected, WAITING → i)` (`Ctx::try_select`); if it loses (the select took another
//! operation, or closed its registration), it drops the entry and pops the next. So a select
//! commits to at most one operation: the one whose CAS won, or, after its own CAS to `ABORTED`
//! won, only what its next try phase claims. A selected receiver's packet then settles as a
//! plain one (the partner writes the value and stores `DONE`); a selected sender's packet is
//! filled by the select's owner in [`SelectedOperation::send`], and the partner, which popped
//! it, waits for its `full` word.
//!
//! **Why no wake-up is lost.** For the slot channels, the argument of a blocked `recv`
//! (`mpmc.rs`, `list.rs`) with the observer list in place of (bounded: under its own flag,
//! `WATCHED`) or beside (unbounded) the event count: the context is on the list before the
//! flag is set (`fetch_or`); an operation whose CAS comes after that `fetch_or` in the index
//! word's modification order sees the flag (or finds it cleared by an earlier one that saw
//! it), and after its stamp store wakes every context on the list — which it sees, as the push
//! happened-before the `fetch_or` its CAS read. One whose CAS came before is visible to the
//! readiness check after registering (`len`, or the stamp for the in-flight case), and the
//! select does not sleep. For rendezvous entries, the partner
//! that pops one selects it under the channel's lock and, once it has released the lock,
//! increments `ctx.ec` (or wakes the task: wakers run with no lock of the crate held); the
//! readiness check reads the queues under the same lock. So every change that could let a registered
//! operation proceed either is seen by the check, or increments `ctx.ec` after `e` was read,
//! and `wait(e)` returns.
//!
//! **Invariants.** A context is registered only between its creation and its `ABORTED` CAS
//! (a fresh one each round, so a stale entry popped late can never select a later round);
//! `selected` changes once, from `WAITING`. A select returns exactly one operation, claimed
//! either by its own try phase (no partner can select it then: it is registered nowhere) or by
//! the partner whose CAS won. Dropping a [`SelectedOperation`] without completing it panics,
//! as crossbeam-channel's does: its claim would otherwise stall the slot or the partner.
//!
//! **Orderings.** The context's CAS is `SeqCst`; the flag and observer arguments use the index
//! words' modification orders and the observer lock; values move by the channels' own
//! `Release`/`Acquire` stamps and packet states.
//!
//! **Linearisation points.** The selected operation's claim: its channel's CAS, or the
//! rendezvous critical section that paired it. `Timeout` / `TrySelectError`: the end of the
//! last try phase.
//!
//! **`ready`** (crossbeam-channel's: which operation could proceed, without performing it)
//! runs the same loop with readiness checks in place of claims, and registers on *watch lists*
//! only: the slot channels' observer lists (and flags), and a rendezvous' list of selects to
//! wake when a partner of the wanted kind is queued (notified after the queuing critical
//! section, and on disconnection). Nothing is claimed and no partner can select it, so it
//! returns a hint.
//!
//! **Fairness.** Each try phase starts at a random operation (crossbeam-channel shuffles), so
//! a busy first operation cannot starve the others. A *biased* selection
//! ([`Select::new_biased`], `select_biased!`) starts at the first operation added instead: it
//! takes the first ready one in the order added, and may starve the later ones.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::task::Waker;
use std::time::Duration;

use crate::eventcount::EventCount;
use crate::lock::{SpinLock, SpindleLock};
use crate::primitives::{yield_now, Arc, AtomicU32, AtomicU64, AtomicUsize, Ordering::*};
use crate::time::{Deadline, IntoDeadline};

/// `Ctx::selected` before anything is selected.
const WAITING: usize = usize::MAX;
/// `Ctx::selected` once the select closed its registration.
const ABORTED: usize = usize::MAX - 1;
/// Set in `Ctx::selected` with the index when a disconnection selected the operation.
const BY_DISCONNECTION: usize = 1 << (usize::BITS - 2);

/// A blocked select's context: what the rendezvous partners select through, and what every
/// channel it registered with wakes.
pub(crate) struct Ctx {
    selected: AtomicUsize,
    ec: EventCount,
    /// An async operation's task (`None` for a select, which sleeps on `ec`).
    waker: Option<WakerSlot>,
}

/// A task's waker, replaceable while registered (a task may move between polls). Only clones
/// and moves happen under its lock: the waker's own code (`wake`, `drop`) runs after it.
pub(crate) struct WakerSlot {
    lock: SpindleLock,
    waker: UnsafeCell<Option<Waker>>,
}

// SAFETY: the waker is accessed only under the lock.
unsafe impl Send for WakerSlot {}
// SAFETY: as above.
unsafe impl Sync for WakerSlot {}

/// The two locks this module holds for a few instructions at a time.
trait ShortLock {
    fn acquire(&self);
    /// # Safety
    /// Held by the caller.
    unsafe fn release(&self);
}

impl ShortLock for SpindleLock {
    fn acquire(&self) {
        self.lock();
    }
    unsafe fn release(&self) {
        // SAFETY: the caller's.
        unsafe { self.unlock() }
    }
}

impl ShortLock for SpinLock {
    fn acquire(&self) {
        self.lock();
    }
    unsafe fn release(&self) {
        // SAFETY: the caller's.
        unsafe { self.unlock() }
    }
}

/// A held lock, released when dropped (also if the code under it panics: a waker's `clone` is
/// foreign code).
struct Held<'a, L: ShortLock>(&'a L);

impl<'a, L: ShortLock> Held<'a, L> {
    fn new(lock: &'a L) -> Held<'a, L> {
        lock.acquire();
        Held(lock)
    }
}

impl<L: ShortLock> Drop for Held<'_, L> {
    fn drop(&mut self) {
        // SAFETY: acquired in `Held::new`.
        unsafe { self.0.release() };
    }
}

impl WakerSlot {
    fn with<R>(&self, f: impl FnOnce(&mut Option<Waker>) -> R) -> R {
        let _held = Held::new(&self.lock);
        // SAFETY: the lock is held.
        f(unsafe { &mut *self.waker.get() })
    }
}

impl Ctx {
    fn new() -> Arc<Ctx> {
        Arc::new(Ctx {
            selected: AtomicUsize::new(WAITING),
            ec: EventCount::spinning_first(),
            waker: None,
        })
    }

    /// The context of an async operation: waking it wakes `waker`'s task.
    pub(crate) fn for_task(waker: &Waker) -> Arc<Ctx> {
        Arc::new(Ctx {
            selected: AtomicUsize::new(WAITING),
            ec: EventCount::new(),
            waker: Some(WakerSlot {
                lock: SpindleLock::new(),
                waker: UnsafeCell::new(Some(waker.clone())),
            }),
        })
    }

    /// A task polled again: wake this waker from now on.
    pub(crate) fn set_waker(&self, waker: &Waker) {
        if let Some(slot) = &self.waker {
            let new = Some(waker.clone());
            drop(slot.with(|w| std::mem::replace(w, new)));
        }
    }

    /// A rendezvous partner (or the channel's disconnection) picks operation `index`: true if
    /// it won; false if the select has an operation already or closed its registration. The
    /// winner wakes the context (`wake`) once it holds no lock.
    pub(crate) fn try_select(&self, index: usize, by_disconnection: bool) -> bool {
        let value = index
            | if by_disconnection {
                BY_DISCONNECTION
            } else {
                0
            };
        self.selected
            .compare_exchange(WAITING, value, SeqCst, SeqCst)
            .is_ok()
    }

    /// What a partner selected: `None` while nothing was; else the operation's index and
    /// whether a disconnection selected it.
    pub(crate) fn selection(&self) -> Option<(usize, bool)> {
        match self.selected.load(SeqCst) {
            WAITING | ABORTED => None,
            v => Some((v & !BY_DISCONNECTION, v & BY_DISCONNECTION != 0)),
        }
    }

    /// Closes the registration: true if nothing was selected (nothing will be now).
    pub(crate) fn close(&self) -> bool {
        self.selected
            .compare_exchange(WAITING, ABORTED, SeqCst, SeqCst)
            .is_ok()
    }

    /// Something changed on a channel it watches, or a partner selected it: the select or the
    /// task tries again. Called with no lock held: a task's waker is foreign code, which may
    /// take the executor's locks.
    pub(crate) fn wake(&self) {
        match &self.waker {
            None => {
                self.ec.increment();
            }
            Some(slot) => {
                if let Some(w) = slot.with(|w| w.clone()) {
                    w.wake();
                }
            }
        }
    }
}

/// The most waits that register without yielding after yields that did not help (see
/// `Observers::yield_window`): a partner that never answers within an executor's round trip
/// (the current-thread ping-pong's echo task, whose partner is the `block_on` future, polled
/// only once the run queue is empty; a ping-pong across two workers) yields on one wait in 64.
const YIELD_WINDOW_MAX: u32 = 63;

/// The selects and async operations waiting on one side of a channel. Empty (one load) unless
/// one waits; it is read only by an operation that found the side's waiting flag.
///
/// Selects are contexts (`list`): they stay registered until they unregister. Async operations
/// are *task entries* (`tasks`): a key and the task's waker, and a notification takes them
/// all — it moves each waker out and wakes it, with no clone, and marks every key below the
/// next one as taken (`taken_below`), so that a completing operation whose entry is gone knows
/// it without the lock. A woken task that still has to wait registers again (and sets the
/// side's flag again), which is what a woken select does with the flag. Two locked sections
/// per wait (register, notify) and none at completion, where a context cost five (its waker
/// slot's lock to set, clone and clear the waker, the list's to add, remove and notify).
pub(crate) struct Observers {
    /// Contexts on `list` plus entries in `tasks`.
    count: AtomicUsize,
    /// A spin lock (it yields after a few pauses): every section under it is a few
    /// instructions (a push, a search of a short list, taking the entries), and its release is
    /// a plain store, where a sleeping lock's release is a `lock`ed instruction, paid twice per
    /// wait.
    lock: SpinLock,
    list: UnsafeCell<Vec<Arc<Ctx>>>,
    tasks: UnsafeCell<Tasks>,
    /// Keys below this were taken by a notification (stored under the lock).
    taken_below: AtomicU64,
    /// Waits of async tasks left to register at once, without yielding first: set to
    /// `yield_window` after a yield that did not help (`futures.rs`, `watch`). Both are
    /// hints, `Relaxed`: a race can lose a count or a doubling or halving of the window, which
    /// only makes tasks yield somewhat more or less often, never changes what they do after.
    yield_skips: AtomicU32,
    /// How many waits a missed yield skips: doubled (plus one) by each miss up to
    /// [`YIELD_WINDOW_MAX`], halved by each yield after which the operation proceeded. A side
    /// whose yields usually help (a stream across two CPUs) keeps it near zero; one whose
    /// yields never help (a ping-pong's reply) soon yields once in 64 waits.
    yield_window: AtomicU32,
}

/// The task entries of an [`Observers`], under its lock.
struct Tasks {
    /// The next entry's key: keys increase, so that `taken_below` covers every entry a
    /// notification took.
    next: u64,
    entries: Vec<(u64, Waker)>,
}

// SAFETY: the list and the task entries are accessed only under the lock.
unsafe impl Send for Observers {}
// SAFETY: as above.
unsafe impl Sync for Observers {}

impl Observers {
    pub(crate) fn new() -> Observers {
        Observers {
            count: AtomicUsize::new(0),
            lock: SpinLock::new(),
            list: UnsafeCell::new(Vec::new()),
            tasks: UnsafeCell::new(Tasks {
                next: 0,
                entries: Vec::new(),
            }),
            taken_below: AtomicU64::new(0),
            yield_skips: AtomicU32::new(0),
            yield_window: AtomicU32::new(0),
        }
    }

    /// Whether an async task that cannot proceed should yield before registering: not for
    /// the next `yield_window` waits (up to [`YIELD_WINDOW_MAX`]) after a yield that did not
    /// help.
    #[inline]
    pub(crate) fn should_yield(&self) -> bool {
        match self.yield_skips.load(Relaxed) {
            0 => true,
            n => {
                self.yield_skips.store(n - 1, Relaxed);
                false
            }
        }
    }

    /// A task yielded and still cannot proceed: the next waits register at once, more of them
    /// after each miss.
    #[inline]
    pub(crate) fn yield_missed(&self) {
        let window = (self.yield_window.load(Relaxed) * 2 + 1).min(YIELD_WINDOW_MAX);
        self.yield_window.store(window, Relaxed);
        self.yield_skips.store(window, Relaxed);
    }

    /// A task yielded and then proceeded: a later miss skips fewer waits.
    #[inline]
    pub(crate) fn yield_helped(&self) {
        let window = self.yield_window.load(Relaxed);
        if window != 0 {
            self.yield_window.store(window / 2, Relaxed);
        }
    }

    /// `count += n`, under the lock: a load and a store, not a `lock`ed instruction. Enough
    /// for `notify`'s look: a watcher sets the side's flag after this, with a `SeqCst`
    /// read-modify-write (release), and an operation that finds the flag read it with its own
    /// (acquire), or found it cleared by a later one in the same word's modification order
    /// (a release sequence of read-modify-writes); either way the store happens-before that
    /// operation's load of `count`. Every other change to `count` is made under the lock too.
    fn count_add(&self, n: usize) {
        self.count.store(self.count.load(Relaxed) + n, Relaxed);
    }

    /// `count -= n`, under the lock (see `count_add`; a decrease only spares a look).
    fn count_sub(&self, n: usize) {
        self.count.store(self.count.load(Relaxed) - n, Relaxed);
    }

    fn with_tasks<R>(&self, f: impl FnOnce(&mut Tasks) -> R) -> R {
        let _held = Held::new(&self.lock);
        // SAFETY: the lock is held.
        f(unsafe { &mut *self.tasks.get() })
    }

    /// Registers a task: its entry's key. The caller sets the side's flag after this (as a
    /// select does after `add`).
    pub(crate) fn add_task(&self, waker: &Waker) -> u64 {
        // Cloned before the lock: a waker's `clone` is foreign code.
        let waker = waker.clone();
        self.with_tasks(|t| {
            let key = t.next;
            t.next += 1;
            t.entries.push((key, waker));
            self.count_add(1);
            key
        })
    }

    /// A task polled again while registered under `key`: true if its entry still stands with
    /// a waker that wakes the same task. False if a notification took the entry, or if the
    /// task's waker changed (the entry is withdrawn then): the task registers again.
    pub(crate) fn renew_task(&self, key: u64, waker: &Waker) -> bool {
        if key < self.taken_below.load(Acquire) {
            return false;
        }
        let same = self.with_tasks(|t| {
            t.entries
                .iter()
                .find(|e| e.0 == key)
                .map(|e| e.1.will_wake(waker))
        });
        match same {
            Some(true) => true,
            Some(false) => {
                self.remove_task(key);
                false
            }
            None => false,
        }
    }

    /// Withdraws the entry `key`, unless a notification took it already (one load then, in
    /// the caller).
    #[inline]
    pub(crate) fn remove_task(&self, key: u64) {
        if key >= self.taken_below.load(Acquire) {
            self.remove_standing_task(key);
        }
    }

    #[cold]
    #[inline(never)]
    fn remove_standing_task(&self, key: u64) {
        let gone = self.with_tasks(|t| {
            let i = t.entries.iter().position(|e| e.0 == key)?;
            self.count_sub(1);
            Some(t.entries.swap_remove(i).1)
        });
        drop(gone); // the waker's drop is foreign code: after the lock
    }

    fn with<R>(&self, f: impl FnOnce(&mut Vec<Arc<Ctx>>) -> R) -> R {
        let _held = Held::new(&self.lock);
        // SAFETY: the lock is held.
        f(unsafe { &mut *self.list.get() })
    }

    pub(crate) fn add(&self, ctx: &Arc<Ctx>) {
        self.with(|list| {
            list.push(ctx.clone());
            self.count.fetch_add(1, SeqCst);
        });
    }

    pub(crate) fn remove(&self, ctx: &Arc<Ctx>) {
        self.with(|list| {
            if let Some(i) = list.iter().position(|c| Arc::ptr_eq(c, ctx)) {
                list.swap_remove(i);
                self.count.fetch_sub(1, SeqCst);
            }
        });
    }

    /// Wakes every registered select (called after the side's waiting flag was found).
    // `SeqCst` (a plain load on x86): a watcher's push, then its flag `fetch_or` and its
    // reading of the other index, against a disconnection's `fetch_or` then this load, is the
    // store-buffering pattern across two words; sequential consistency rules out that both miss.
    #[inline]
    pub(crate) fn notify(&self) {
        if self.count.load(SeqCst) != 0 {
            self.notify_all();
        }
    }

    #[cold]
    fn notify_all(&self) {
        // Woken after the lock is released: a task's waker may take the executor's locks or
        // make a system call, and selects registering meanwhile should not wait for that.
        // The common case first, one task and no select: its waker alone, out of the list.
        let one = {
            let _held = Held::new(&self.lock);
            // SAFETY: the lock is held.
            let (list, tasks) = unsafe { (&*self.list.get(), &mut *self.tasks.get()) };
            if list.is_empty() && tasks.entries.len() == 1 {
                let (_, w) = tasks.entries.pop().expect("one entry");
                self.count_sub(1);
                self.taken_below.store(tasks.next, Release);
                Some(w)
            } else {
                None
            }
        };
        match one {
            Some(w) => w.wake(),
            None => self.notify_many(),
        }
    }

    /// `notify_all` for any mix of selects and tasks (the lock taken again: a select or a
    /// second task is the rare case).
    #[cold]
    #[inline(never)]
    fn notify_many(&self) {
        // Up to four of each without allocating.
        let mut few: [Option<Arc<Ctx>>; 4] = [None, None, None, None];
        let mut wakers: [Option<Waker>; 4] = [None, None, None, None];
        let (more, more_wakers) = {
            let _held = Held::new(&self.lock);
            // SAFETY: the lock is held.
            let (list, tasks) = unsafe { (&*self.list.get(), &mut *self.tasks.get()) };
            for (slot, c) in few.iter_mut().zip(list.iter()) {
                *slot = Some(c.clone());
            }
            let more = list.get(few.len()..).map(<[Arc<Ctx>]>::to_vec);
            // Every task entry is taken: its waker moves out, to be woken once.
            let n = tasks.entries.len();
            let more_wakers: Vec<Waker> = if n > wakers.len() {
                let rest = tasks.entries.drain(wakers.len()..);
                rest.map(|(_, w)| w).collect()
            } else {
                Vec::new()
            };
            for (slot, (_, w)) in wakers.iter_mut().zip(tasks.entries.drain(..)) {
                *slot = Some(w);
            }
            if n != 0 {
                self.count_sub(n);
                self.taken_below.store(tasks.next, Release);
            }
            (more, more_wakers)
        };
        for c in few.iter().flatten().chain(more.iter().flatten()) {
            c.wake();
        }
        for w in wakers.into_iter().flatten().chain(more_wakers) {
            w.wake();
        }
    }
}

/// What a claim took: read by the completion on the same channel.
#[derive(Clone, Copy)]
pub(crate) struct Token {
    /// Bounded: the claimed index. Unbounded receive: the claimed slot's offset in its block.
    pub(crate) index: u64,
    /// Unbounded receive: the claimed slot's block. Rendezvous: a packet (`Arc::into_raw`),
    /// either the partner's (popped by the claim) or, with `own`, the select's own, through
    /// which a partner selected it.
    pub(crate) ptr: *const (),
    /// Bounded: the other side's waiting flags that were in the word the claim replaced (the
    /// completion wakes the waiters they stand for: blocked threads, watchers, or both).
    pub(crate) wake: u64,
    pub(crate) own: bool,
    /// The operation was claimed because the channel is disconnected: it completes with an
    /// error.
    pub(crate) disconnected: bool,
}

impl Default for Token {
    fn default() -> Token {
        Token {
            index: 0,
            ptr: std::ptr::null(),
            wake: 0,
            own: false,
            disconnected: false,
        }
    }
}

/// What a try phase found for one operation.
pub(crate) enum Attempt {
    /// Claimed: the token says what.
    Claimed,
    /// The other side of the slot it needs claimed it and has not finished (a few instructions,
    /// unless that thread was preempted): try again soon.
    InFlight,
    NotReady,
}

/// One side of a channel, as a select sees it (implemented by `mpmc`'s flavours).
pub(crate) trait Handle {
    /// The channel's address: a completion checks it was handed the selected channel.
    fn channel(&self) -> *const ();
    fn try_claim(&self, send: bool, token: &mut Token) -> Attempt;
    /// Registers `ctx` for operation `index`; a rendezvous queues an entry and keeps its packet
    /// in `reg`.
    fn register(&self, send: bool, ctx: &Arc<Ctx>, index: usize, reg: &mut Token);
    /// Whether the operation could proceed now: values or room, a disconnection, or a queued
    /// rendezvous partner (not one of `own`'s entries).
    fn is_ready(&self, send: bool, own: Option<&Arc<Ctx>>) -> bool;
    /// For [`Select::ready`]: wake `ctx` when the operation may have become ready, without
    /// letting a partner select it (a rendezvous puts it on a watch list, not in a queue).
    fn watch(&self, send: bool, ctx: &Arc<Ctx>);
    fn unwatch(&self, send: bool, ctx: &Arc<Ctx>);
    /// A watch that stays registered (an async operation polled again): set the side's
    /// waiting flag again, which a waking operation cleared.
    fn rearm(&self, send: bool);
    /// Undoes `register`. `selected`: a partner selected this operation through `reg`, which
    /// the completion then uses; otherwise `reg`'s packet is released.
    fn unregister(&self, send: bool, ctx: &Arc<Ctx>, reg: &mut Token, selected: bool);
    /// Releases a claimed receive never completed: receives the value and drops it.
    fn abandon_recv(&self, token: &mut Token);
}

/// The nap of a select that saw an operation in flight (see `mpmc::wait`).
const IN_FLIGHT_FIRST_NAP: Duration = Duration::from_micros(100);
const IN_FLIGHT_MAX_NAP: Duration = Duration::from_millis(10);

#[derive(Clone, Copy)]
struct Op<'a> {
    handle: &'a (dyn Handle + 'a),
    send: bool,
    index: usize,
    reg: Token,
}

/// How many operations a selection keeps without allocating (a `select!` rarely has more).
const INLINE_OPS: usize = 4;

/// The operations of a selection: the first [`INLINE_OPS`] in place, the rest on the heap, so
/// that a `select!` allocates nothing before it has to block.
///
/// `repr(C)`, the uninitialised array last: where the compiler orders the fields itself it put
/// the array between the fields that start at zero, and then zeroed the whole selection with
/// one `memset` call (an uninitialised byte may hold any value, zero included): 281 bytes at
/// every `select!`, about a fifth of a receive's time in a two-channel `select!` stream (`perf`
/// of a probe shaped like lab `rings`' section `select`, on a Zen 3 guest). Last, the array is
/// left alone.
#[repr(C)]
struct Ops<'a> {
    len: usize,
    spilled: Vec<Op<'a>>,
    /// `inline[..len.min(INLINE_OPS)]` are initialised (`Op` is `Copy`: nothing to drop).
    inline: [MaybeUninit<Op<'a>>; INLINE_OPS],
}

impl<'a> Ops<'a> {
    #[inline]
    fn new() -> Ops<'a> {
        Ops {
            inline: [MaybeUninit::uninit(); INLINE_OPS],
            len: 0,
            spilled: Vec::new(),
        }
    }

    #[inline]
    fn len(&self) -> usize {
        self.len
    }

    #[inline]
    fn push(&mut self, op: Op<'a>) {
        match self.inline.get_mut(self.len) {
            Some(slot) => *slot = MaybeUninit::new(op),
            None => self.spilled.push(op),
        }
        self.len += 1;
    }

    /// The `i`-th operation; `i < len`.
    #[inline]
    fn get(&self, i: usize) -> &Op<'a> {
        debug_assert!(i < self.len);
        match self.inline.get(i) {
            // SAFETY: `i < len`, and the first `len` inline slots (up to INLINE_OPS) are set.
            Some(op) => unsafe { op.assume_init_ref() },
            None => &self.spilled[i - INLINE_OPS],
        }
    }

    /// The `i`-th operation; `i < len`.
    #[inline]
    fn get_mut(&mut self, i: usize) -> &mut Op<'a> {
        debug_assert!(i < self.len);
        match self.inline.get_mut(i) {
            // SAFETY: as in `get`.
            Some(op) => unsafe { op.assume_init_mut() },
            None => &mut self.spilled[i - INLINE_OPS],
        }
    }

    /// Removes the `i`-th, moving the last into its place.
    fn swap_remove(&mut self, i: usize) {
        let last = *self.get(self.len - 1);
        *self.get_mut(i) = last;
        if self.len > INLINE_OPS {
            self.spilled.pop();
        }
        self.len -= 1;
    }
}

/// Waits on several send and receive operations and completes the first that can proceed, as
/// crossbeam-channel's `Select`.
///
/// ```
/// use spindle_sync::mpmc::{self, Select};
///
/// let (tx1, rx1) = mpmc::channel::<u32>(1);
/// let (_tx2, rx2) = mpmc::unbounded::<&str>();
/// tx1.send(7).unwrap();
///
/// let mut sel = Select::new();
/// let first = sel.recv(&rx1);
/// let second = sel.recv(&rx2);
/// let oper = sel.select();
/// assert_eq!(oper.index(), first);
/// assert_eq!(oper.recv(&rx1), Ok(7)); // complete it on the channel it names
/// # let _ = second;
/// ```
///
/// A selected operation was *claimed*: its completion ([`SelectedOperation::recv`] or
/// [`SelectedOperation::send`]) cannot block or find the channel full or empty; it reports a
/// disconnection if that is why it was selected. The protocol is in the module's source.
#[repr(C)] // `ops` last, for the reason given at `Ops`
pub struct Select<'a> {
    next_index: usize,
    /// Tries operations in the order added (see [`Select::new_biased`]).
    biased: bool,
    ops: Ops<'a>,
}

/// An operation [`Select`] chose and claimed; complete it with [`send`](Self::send) or
/// [`recv`](Self::recv) on the same sender or receiver.
///
/// # Panics
/// When dropped without being completed, as crossbeam-channel's does. A claimed receive is
/// released first (its value received and dropped); a claimed send holds its slot (or its
/// rendezvous partner) for ever, since only the completion has the value: receivers then wait
/// at that slot, and so does the last receiver's drop (which drops what is queued).
#[must_use = "a selected operation must be completed with `send` or `recv`"]
pub struct SelectedOperation<'a> {
    pub(crate) index: usize,
    pub(crate) send: bool,
    pub(crate) handle: &'a (dyn Handle + 'a),
    pub(crate) token: Token,
}

/// [`Select::try_select`] found no operation that could proceed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrySelectError;

/// [`Select::try_ready`] found no operation ready.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TryReadyError;

/// [`Select::ready_timeout`] found no operation ready before the deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadyTimeoutError;

impl std::fmt::Display for TryReadyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("no operation was ready")
    }
}

impl std::fmt::Display for ReadyTimeoutError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("timed out waiting for an operation to be ready")
    }
}

impl std::error::Error for TryReadyError {}
impl std::error::Error for ReadyTimeoutError {}

/// [`Select::select_timeout`] found no operation that could proceed before the deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SelectTimeoutError;

impl std::fmt::Display for TrySelectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("no operation could proceed")
    }
}

impl std::fmt::Display for SelectTimeoutError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("timed out waiting for an operation that could proceed")
    }
}

impl std::error::Error for TrySelectError {}
impl std::error::Error for SelectTimeoutError {}

/// How long a select may wait.
enum Patience {
    No,
    Until(Option<Deadline>),
}

impl Default for Select<'_> {
    fn default() -> Self {
        Select::new()
    }
}

impl std::fmt::Debug for Select<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Select")
            .field("operations", &self.ops.len())
            .finish()
    }
}

impl std::fmt::Debug for SelectedOperation<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SelectedOperation")
            .field("index", &self.index)
            .finish()
    }
}

impl<'a> Select<'a> {
    /// An empty selection. Each attempt starts at a random operation, so that a busy one cannot
    /// starve the others.
    #[inline]
    pub fn new() -> Select<'a> {
        Select {
            ops: Ops::new(),
            next_index: 0,
            biased: false,
        }
    }

    /// An empty selection that tries its operations in the order they were added, as
    /// crossbeam-channel's `Select::new_biased`: of several ready operations the first added
    /// wins, every time (a busy early one can starve the later ones).
    ///
    /// ```
    /// use spindle_sync::mpmc::{channel, Select};
    ///
    /// let (tx1, rx1) = channel::<u32>(4);
    /// let (tx2, rx2) = channel::<u32>(4);
    /// tx1.send(1).unwrap();
    /// tx2.send(2).unwrap();
    /// let mut sel = Select::new_biased();
    /// let first = sel.recv(&rx1);
    /// sel.recv(&rx2);
    /// let oper = sel.select();
    /// assert_eq!(oper.index(), first); // both are ready: the first added is chosen
    /// assert_eq!(oper.recv(&rx1), Ok(1));
    /// ```
    #[inline]
    pub fn new_biased() -> Select<'a> {
        Select {
            biased: true,
            ..Select::new()
        }
    }

    /// Where an attempt starts among `n` operations.
    #[inline]
    fn start(&self, n: usize) -> usize {
        if self.biased {
            0
        } else {
            random_below(n)
        }
    }

    #[inline]
    pub(crate) fn add(&mut self, handle: &'a (dyn Handle + 'a), send: bool) -> usize {
        let index = self.next_index;
        self.next_index += 1;
        self.ops.push(Op {
            handle,
            send,
            index,
            reg: Token::default(),
        });
        index
    }

    /// Removes the operation with this index (as returned by [`send`](Self::send) or
    /// [`recv`](Self::recv)); the other indices stay as they were.
    ///
    /// # Panics
    /// If no operation has this index (never added, or removed already).
    pub fn remove(&mut self, index: usize) {
        let i = (0..self.ops.len())
            .find(|&i| self.ops.get(i).index == index)
            .expect("no operation with this index");
        self.ops.swap_remove(i);
    }

    /// Completes nothing, waits for nothing: the first operation that can proceed now, if any.
    #[inline]
    pub fn try_select(&mut self) -> Result<SelectedOperation<'a>, TrySelectError> {
        match self.try_once() {
            Ok(oper) => Ok(oper),
            Err(false) => Err(TrySelectError),
            Err(true) => self.run(Patience::No).ok_or(TrySelectError),
        }
    }

    /// Blocks until an operation can proceed, and claims it. With no operation added, blocks
    /// for ever (as crossbeam-channel's).
    #[inline]
    pub fn select(&mut self) -> SelectedOperation<'a> {
        match self.try_once() {
            Ok(oper) => oper,
            Err(_) => self
                .run(Patience::Until(None))
                .expect("a select without a deadline returns an operation"),
        }
    }

    /// [`select`](Self::select), for at most `timeout`.
    #[inline]
    pub fn select_timeout(
        &mut self,
        timeout: Duration,
    ) -> Result<SelectedOperation<'a>, SelectTimeoutError> {
        self.select_deadline(Deadline::after(timeout))
    }

    /// [`select`](Self::select), until `deadline`: a [`Deadline`] or an
    /// [`Instant`](std::time::Instant) as crossbeam-channel takes (`None`: no deadline; see
    /// [`IntoDeadline`]).
    #[inline]
    pub fn select_deadline(
        &mut self,
        deadline: impl IntoDeadline,
    ) -> Result<SelectedOperation<'a>, SelectTimeoutError> {
        match self.try_once() {
            Ok(oper) => Ok(oper),
            Err(_) => self
                .run(Patience::Until(deadline.into_deadline()))
                .ok_or(SelectTimeoutError),
        }
    }

    /// The index of an operation that is *ready* — could proceed now, or its channel is
    /// disconnected — without performing it, as crossbeam-channel's `try_ready`. A hint: another
    /// thread may take the value or the room before the caller's own `try_recv` / `try_send`.
    pub fn try_ready(&mut self) -> Result<usize, TryReadyError> {
        self.run_ready(Patience::No).ok_or(TryReadyError)
    }

    /// [`try_ready`](Self::try_ready), blocking until an operation is ready. With no operation
    /// added, blocks for ever.
    pub fn ready(&mut self) -> usize {
        self.run_ready(Patience::Until(None))
            .expect("a ready without a deadline returns an operation")
    }

    /// [`ready`](Self::ready), for at most `timeout`.
    pub fn ready_timeout(&mut self, timeout: Duration) -> Result<usize, ReadyTimeoutError> {
        self.ready_deadline(Deadline::after(timeout))
    }

    /// [`ready`](Self::ready), until `deadline` (a [`Deadline`] or an
    /// [`Instant`](std::time::Instant); `None`: no deadline; see [`IntoDeadline`]).
    pub fn ready_deadline(
        &mut self,
        deadline: impl IntoDeadline,
    ) -> Result<usize, ReadyTimeoutError> {
        self.run_ready(Patience::Until(deadline.into_deadline()))
            .ok_or(ReadyTimeoutError)
    }

    /// The first ready operation's index, from the one at `start` on.
    fn first_ready(&self, start: usize) -> Option<usize> {
        let n = self.ops.len();
        (start..n)
            .chain(0..start)
            .map(|i| self.ops.get(i))
            .find_map(|op| op.handle.is_ready(op.send, None).then_some(op.index))
    }

    /// `ready`: as `run`, with readiness checks for claims and watch lists for registration
    /// (the same argument: a change after the watch wakes `ctx`, one before is seen by the
    /// check that follows it).
    fn run_ready(&mut self, patience: Patience) -> Option<usize> {
        let n = self.ops.len();
        if n == 0 {
            if let Patience::Until(deadline) = patience {
                sleep_until(deadline);
            }
            return None;
        }
        let start = self.start(n);
        loop {
            if let Some(index) = self.first_ready(start) {
                return Some(index);
            }
            let Patience::Until(deadline) = patience else {
                return None;
            };
            let ctx = Ctx::new();
            let e = ctx.ec.value();
            for i in 0..n {
                let op = self.ops.get(i);
                op.handle.watch(op.send, &ctx);
            }
            let ready = self.first_ready(start);
            if ready.is_none() {
                let _ = ctx.ec.wait(e, deadline);
            }
            for i in 0..n {
                let op = self.ops.get(i);
                op.handle.unwatch(op.send, &ctx);
            }
            if ready.is_some() {
                return ready;
            }
            if deadline.is_some_and(Deadline::has_passed) {
                return None;
            }
        }
    }

    fn selected(&self, i: usize, token: Token) -> SelectedOperation<'a> {
        let op = self.ops.get(i);
        SelectedOperation {
            index: op.index,
            send: op.send,
            handle: op.handle,
            token,
        }
    }

    /// One try phase, inlined into the caller's `select!`: what the selection costs when an
    /// operation can proceed at once.
    #[inline]
    fn try_once(&self) -> Result<SelectedOperation<'a>, bool> {
        self.try_phase(self.start(self.ops.len()))
    }

    /// Tries to claim each operation once, from the one at `start` on. `Err(in_flight)`: none
    /// was claimed (some other side's operation was in flight). The operation is read once
    /// into registers and the result built from them (reading the `Op` back whole, after the
    /// field stores of `add`, would make the processor wait for those stores to reach the
    /// cache).
    #[inline(always)]
    fn try_phase(&self, start: usize) -> Result<SelectedOperation<'a>, bool> {
        let n = self.ops.len();
        let mut in_flight = false;
        for k in 0..n {
            // (start + k) mod n, without a division.
            let i = if start + k < n {
                start + k
            } else {
                start + k - n
            };
            let op = self.ops.get(i);
            let (handle, send, index) = (op.handle, op.send, op.index);
            let mut token = Token::default();
            match handle.try_claim(send, &mut token) {
                Attempt::Claimed => {
                    return Ok(SelectedOperation {
                        index,
                        send,
                        handle,
                        token,
                    })
                }
                Attempt::InFlight => in_flight = true,
                Attempt::NotReady => {}
            }
        }
        Err(in_flight)
    }

    /// The whole selection, after [`try_once`](Self::try_once) found nothing (it tries again
    /// first: the try phase of each round).
    #[cold]
    #[inline(never)]
    fn run(&mut self, patience: Patience) -> Option<SelectedOperation<'a>> {
        let n = self.ops.len();
        if n == 0 {
            return match patience {
                Patience::No => None,
                Patience::Until(deadline) => {
                    sleep_until(deadline);
                    None
                }
            };
        }
        let start = self.start(n);
        let mut pauses = 0;
        let mut nap = IN_FLIGHT_FIRST_NAP;
        loop {
            let in_flight = match self.try_phase(start) {
                Ok(oper) => return Some(oper),
                Err(in_flight) => in_flight,
            };
            let deadline = match patience {
                Patience::No if in_flight => {
                    // Linearizable, as `try_recv`: wait out the operation in flight.
                    pauses += 1;
                    crate::mpmc::settle(pauses);
                    continue;
                }
                Patience::No => return None,
                Patience::Until(deadline) => deadline,
            };

            let ctx = Ctx::new();
            let e = ctx.ec.value();
            for i in 0..n {
                let op = self.ops.get_mut(i);
                op.handle.register(op.send, &ctx, op.index, &mut op.reg);
            }
            let ready = (0..n).any(|i| {
                let op = self.ops.get(i);
                op.handle.is_ready(op.send, Some(&ctx))
            });
            if in_flight {
                // Give the CPU to the thread we wait for, then nap (see `mpmc::wait`).
                yield_now();
                if !cfg!(loom) {
                    let until = Deadline::after(nap);
                    nap = (nap * 2).min(IN_FLIGHT_MAX_NAP);
                    let _ = ctx
                        .ec
                        .wait(e, Some(deadline.map_or(until, |d| d.min(until))));
                }
            } else if !ready {
                let _ = ctx.ec.wait(e, deadline);
            }
            let selected = ctx
                .selected
                .compare_exchange(WAITING, ABORTED, SeqCst, SeqCst)
                .err();
            let mut chosen = None;
            for i in 0..n {
                let op = self.ops.get_mut(i);
                let this = selected.is_some_and(|v| v & !BY_DISCONNECTION == op.index);
                op.handle.unregister(op.send, &ctx, &mut op.reg, this);
                if this {
                    let mut token = std::mem::take(&mut op.reg);
                    token.own = true;
                    token.disconnected = selected.is_some_and(|v| v & BY_DISCONNECTION != 0);
                    chosen = Some((i, token));
                }
            }
            if let Some((i, token)) = chosen {
                return Some(self.selected(i, token));
            }
            if deadline.is_some_and(Deadline::has_passed) {
                return None;
            }
        }
    }
}

impl SelectedOperation<'_> {
    /// The index [`Select::send`] or [`Select::recv`] gave this operation.
    #[inline]
    pub fn index(&self) -> usize {
        self.index
    }

    /// Checks that a completion names the selected channel and direction: the very sender or
    /// receiver that was added (no call through the handle), or another end of its channel.
    #[inline]
    pub(crate) fn check(&self, handle: &dyn Handle, send: bool) {
        let same =
            std::ptr::addr_eq(self.handle, handle) || self.handle.channel() == handle.channel();
        assert!(
            same && self.send == send,
            "completed a selected operation on another channel or direction than the selected one"
        );
    }
}

impl Drop for SelectedOperation<'_> {
    fn drop(&mut self) {
        // A receive can be released: its value is received and dropped. A send's claim (a
        // slot, or a partner waiting for the value) stays, as crossbeam-channel's.
        if !self.send {
            self.handle.abandon_recv(&mut self.token);
        }
        // Not while unwinding (a completion on the wrong channel panicked): that would abort.
        if !std::thread::panicking() {
            panic!("dropped a SelectedOperation without completing it with `send` or `recv`");
        }
    }
}

/// A number below `n` from a per-thread xorshift (0 under loom, which wants determinism).
fn random_below(n: usize) -> usize {
    if cfg!(loom) || n == 1 {
        return 0;
    }
    thread_local! {
        static STATE: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    }
    STATE.with(|s| {
        let mut x = s.get();
        if x == 0 {
            // Seed from the thread-local's address: differs between threads.
            x = (s as *const _ as usize as u32) | 1;
        }
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        s.set(x);
        ((u64::from(x) * n as u64) >> 32) as usize
    })
}

fn sleep_until(deadline: Option<Deadline>) {
    loop {
        match deadline {
            None => std::thread::park(),
            Some(d) if d.has_passed() => return,
            Some(d) => std::thread::sleep(d.remaining()),
        }
    }
}

/// Waits on several channel operations and runs the arm of the first that can proceed, as
/// crossbeam-channel's `select!`.
///
/// Arms: `recv(r) -> res => body`, where `r` is a [`Receiver`](crate::mpmc::Receiver) (or a
/// reference to one) and `res` a pattern for the `Result<T, RecvError>`; `send(s, msg) -> res
/// => body`, where `msg` is evaluated only if that send is chosen; at most one `default =>
/// body` (run if no operation can proceed now) or `default(timeout) => body` (if none can
/// within `timeout`). Without a default, it blocks. Bodies are blocks or expressions followed by
/// a comma.
///
/// ```
/// use spindle_sync::{mpmc, select};
/// use std::time::Duration;
///
/// let (tx, rx) = mpmc::channel::<u32>(4);
/// let (done_tx, done_rx) = mpmc::unbounded::<()>();
/// tx.send(5).unwrap();
/// let got = select! {
///     recv(rx) -> v => v.unwrap(),
///     recv(done_rx) -> _ => 0,
///     default(Duration::from_secs(1)) => panic!("nothing within a second"),
/// };
/// assert_eq!(got, 5);
/// # drop(done_tx);
/// ```
#[macro_export]
macro_rules! select {
    ($($arms:tt)*) => {
        $crate::__spindle_select!(@parse [] [] $($arms)*)
    };
}

/// [`select!`](crate::select!) that tries its operations in the order of its arms, as
/// crossbeam-channel's `select_biased!` (a
/// [`Select::new_biased`](crate::mpmc::Select::new_biased)): of several ready operations the
/// first arm's wins, every time; a busy early arm can starve later ones.
///
/// ```
/// use spindle_sync::{mpmc, select_biased};
///
/// let (urgent_tx, urgent) = mpmc::channel::<&str>(4);
/// let (normal_tx, normal) = mpmc::channel::<&str>(4);
/// normal_tx.send("later").unwrap();
/// urgent_tx.send("now").unwrap();
/// let got = select_biased! {
///     recv(urgent) -> v => v.unwrap(),
///     recv(normal) -> v => v.unwrap(),
/// };
/// assert_eq!(got, "now");
/// ```
#[macro_export]
macro_rules! select_biased {
    ($($arms:tt)*) => {
        $crate::__spindle_select!(@parse [biased] [] $($arms)*)
    };
}

/// The parser and generator behind [`select!`] and [`select_biased!`]: not an interface.
#[doc(hidden)]
#[macro_export]
macro_rules! __spindle_select {
    // Parsing: each arm becomes `(recv (r) (pat) (body))`, `(send (s) (msg) (pat) (body))`;
    // the default becomes `now (body)` or `timeout (t) (body)`.
    (@parse [$($ops:tt)*] [$($def:tt)*]) => {
        $crate::__spindle_select!(@start [$($ops)*] [$($def)*])
    };
    (@parse [$($ops:tt)*] $def:tt recv($r:expr) -> $p:pat => $body:block, $($rest:tt)*) => {
        $crate::__spindle_select!(@parse [$($ops)* (recv ($r) ($p) ($body))] $def $($rest)*)
    };
    (@parse [$($ops:tt)*] $def:tt recv($r:expr) -> $p:pat => $body:block $($rest:tt)*) => {
        $crate::__spindle_select!(@parse [$($ops)* (recv ($r) ($p) ($body))] $def $($rest)*)
    };
    (@parse [$($ops:tt)*] $def:tt recv($r:expr) -> $p:pat => $body:expr, $($rest:tt)*) => {
        $crate::__spindle_select!(@parse [$($ops)* (recv ($r) ($p) ($body))] $def $($rest)*)
    };
    (@parse [$($ops:tt)*] $def:tt recv($r:expr) -> $p:pat => $body:expr) => {
        $crate::__spindle_select!(@parse [$($ops)* (recv ($r) ($p) ($body))] $def)
    };
    (@parse [$($ops:tt)*] $def:tt send($s:expr, $m:expr) -> $p:pat => $body:block, $($rest:tt)*) => {
        $crate::__spindle_select!(@parse [$($ops)* (send ($s) ($m) ($p) ($body))] $def $($rest)*)
    };
    (@parse [$($ops:tt)*] $def:tt send($s:expr, $m:expr) -> $p:pat => $body:block $($rest:tt)*) => {
        $crate::__spindle_select!(@parse [$($ops)* (send ($s) ($m) ($p) ($body))] $def $($rest)*)
    };
    (@parse [$($ops:tt)*] $def:tt send($s:expr, $m:expr) -> $p:pat => $body:expr, $($rest:tt)*) => {
        $crate::__spindle_select!(@parse [$($ops)* (send ($s) ($m) ($p) ($body))] $def $($rest)*)
    };
    (@parse [$($ops:tt)*] $def:tt send($s:expr, $m:expr) -> $p:pat => $body:expr) => {
        $crate::__spindle_select!(@parse [$($ops)* (send ($s) ($m) ($p) ($body))] $def)
    };
    (@parse $ops:tt [] default => $body:block, $($rest:tt)*) => {
        $crate::__spindle_select!(@parse $ops [now ($body)] $($rest)*)
    };
    (@parse $ops:tt [] default => $body:block $($rest:tt)*) => {
        $crate::__spindle_select!(@parse $ops [now ($body)] $($rest)*)
    };
    (@parse $ops:tt [] default => $body:expr, $($rest:tt)*) => {
        $crate::__spindle_select!(@parse $ops [now ($body)] $($rest)*)
    };
    (@parse $ops:tt [] default => $body:expr) => {
        $crate::__spindle_select!(@parse $ops [now ($body)])
    };
    (@parse $ops:tt [] default($t:expr) => $body:block, $($rest:tt)*) => {
        $crate::__spindle_select!(@parse $ops [timeout ($t) ($body)] $($rest)*)
    };
    (@parse $ops:tt [] default($t:expr) => $body:block $($rest:tt)*) => {
        $crate::__spindle_select!(@parse $ops [timeout ($t) ($body)] $($rest)*)
    };
    (@parse $ops:tt [] default($t:expr) => $body:expr, $($rest:tt)*) => {
        $crate::__spindle_select!(@parse $ops [timeout ($t) ($body)] $($rest)*)
    };
    (@parse $ops:tt [] default($t:expr) => $body:expr) => {
        $crate::__spindle_select!(@parse $ops [timeout ($t) ($body)])
    };
    (@parse $ops:tt [$($def:tt)+] default $($rest:tt)*) => {
        ::core::compile_error!("select! takes at most one `default` arm")
    };
    (@parse $ops:tt $def:tt $($rest:tt)+) => {
        ::core::compile_error!(
            "select! arms are `recv(r) -> res => body`, `send(s, msg) -> res => body`, \
             `default => body` or `default(timeout) => body`, separated by commas"
        )
    };

    // Binding: each channel is borrowed once, and added to the selection (biased: `ops`
    // begins with the word `biased`, from `select_biased!`).
    (@start [biased $($ops:tt)*] $def:tt) => {{
        let mut __select = $crate::mpmc::Select::new_biased();
        $crate::__spindle_select!(@bind __select [$($ops)*] [] $def)
    }};
    (@start [$($ops:tt)*] $def:tt) => {{
        let mut __select = $crate::mpmc::Select::new();
        $crate::__spindle_select!(@bind __select [$($ops)*] [] $def)
    }};
    (@bind $sel:ident [(recv ($r:expr) ($p:pat) ($body:expr)) $($rest:tt)*] [$($done:tt)*] $def:tt) => {{
        let __handle: &$crate::mpmc::Receiver<_> = &$r;
        let __index = $sel.recv(__handle);
        $crate::__spindle_select!(
            @bind $sel [$($rest)*] [$($done)* (recv __handle __index ($p) ($body))] $def
        )
    }};
    (@bind $sel:ident [(send ($s:expr) ($m:expr) ($p:pat) ($body:expr)) $($rest:tt)*] [$($done:tt)*] $def:tt) => {{
        let __handle: &$crate::mpmc::Sender<_> = &$s;
        let __index = $sel.send(__handle);
        $crate::__spindle_select!(
            @bind $sel [$($rest)*] [$($done)* (send __handle __index ($m) ($p) ($body))] $def
        )
    }};
    (@bind $sel:ident [] $done:tt []) => {{
        let __oper = $sel.select();
        $crate::__spindle_select!(@dispatch __oper $done)
    }};
    (@bind $sel:ident [] $done:tt [now ($body:expr)]) => {{
        match $sel.try_select() {
            ::core::result::Result::Ok(__oper) => $crate::__spindle_select!(@dispatch __oper $done),
            ::core::result::Result::Err(_) => $body,
        }
    }};
    (@bind $sel:ident [] $done:tt [timeout ($t:expr) ($body:expr)]) => {{
        match $sel.select_timeout($t) {
            ::core::result::Result::Ok(__oper) => $crate::__spindle_select!(@dispatch __oper $done),
            ::core::result::Result::Err(_) => $body,
        }
    }};

    // Dispatching: complete the chosen operation and run its arm.
    (@dispatch $oper:ident [(recv $h:ident $i:ident ($p:pat) ($body:expr)) $($rest:tt)*]) => {
        if $oper.index() == $i {
            let $p = $oper.recv($h);
            $body
        } else {
            $crate::__spindle_select!(@dispatch $oper [$($rest)*])
        }
    };
    (@dispatch $oper:ident [(send $h:ident $i:ident ($m:expr) ($p:pat) ($body:expr)) $($rest:tt)*]) => {
        if $oper.index() == $i {
            let $p = $oper.send($h, $m);
            $body
        } else {
            $crate::__spindle_select!(@dispatch $oper [$($rest)*])
        }
    };
    (@dispatch $oper:ident []) => {
        ::core::unreachable!("select! chose an operation it did not add")
    };
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::{Observers, YIELD_WINDOW_MAX};

    /// How many waits in a row register before the next one yields.
    fn skipped(o: &Observers) -> u32 {
        let mut n = 0;
        while !o.should_yield() {
            n += 1;
            assert!(
                n <= YIELD_WINDOW_MAX,
                "a wait yields at least once per window"
            );
        }
        n
    }

    /// Misses double the window (plus one) up to its cap; each yield that helped halves it.
    #[test]
    fn the_yield_window_grows_with_misses_and_shrinks_with_hits() {
        let o = Observers::new();
        assert_eq!(skipped(&o), 0, "a new side yields at its first wait");
        let mut windows = Vec::new();
        for _ in 0..8 {
            o.yield_missed();
            windows.push(skipped(&o));
        }
        assert_eq!(windows, [1, 3, 7, 15, 31, 63, 63, 63]);
        o.yield_helped();
        o.yield_helped();
        o.yield_missed();
        assert_eq!(skipped(&o), 31, "two hits halve 63 twice: 15 · 2 + 1");
        for _ in 0..7 {
            o.yield_helped();
        }
        o.yield_missed();
        assert_eq!(skipped(&o), 1, "hits bring the window back to zero");
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use crate::mpmc::{channel, unbounded, RecvError, Select};
    use crate::primitives::model;
    use loom::thread;

    /// A select blocked on two bounded channels is woken by a send on either: the observer
    /// list and the flag lose no wake-up (a lost one is a loom deadlock).
    #[test]
    fn select_bounded_recv_is_woken() {
        model(|| {
            let (_tx1, rx1) = channel::<u32>(1);
            let (tx2, rx2) = channel::<u32>(1);
            // Kept: a disconnection would wake the select and hide a lost wake-up.
            let _keep = tx2.clone();
            let t = thread::spawn(move || tx2.send(5).unwrap());
            let mut sel = Select::new();
            sel.recv(&rx1);
            let i2 = sel.recv(&rx2);
            let oper = sel.select();
            assert_eq!(oper.index(), i2);
            assert_eq!(oper.recv(&rx2), Ok(5));
            t.join().unwrap();
        });
    }

    /// A select send on a full bounded channel is woken by the receive that makes room.
    #[test]
    fn select_bounded_send_is_woken() {
        model(|| {
            let (tx, rx) = channel::<u32>(1);
            tx.send(1).unwrap();
            let _keep = rx.clone();
            let t = thread::spawn(move || rx.recv().unwrap() + rx.recv().unwrap());
            let mut sel = Select::new();
            sel.send(&tx);
            sel.select().send(&tx, 2).unwrap();
            assert_eq!(t.join().unwrap(), 3);
        });
    }

    /// `ready` on a rendezvous is woken by a sender that queues itself (the watch list), and
    /// then reports the receive ready; the receive that follows pairs with that sender.
    #[test]
    fn ready_rendezvous_is_woken_by_a_queued_sender() {
        model(|| {
            let (tx, rx) = channel::<u32>(0);
            let _keep = tx.clone();
            let t = thread::spawn(move || tx.send(4).unwrap());
            let mut sel = Select::new();
            let i = sel.recv(&rx);
            assert_eq!(sel.ready(), i);
            assert_eq!(rx.recv(), Ok(4));
            t.join().unwrap();
        });
    }

    /// The same over an unbounded channel.
    #[test]
    fn select_unbounded_recv_is_woken() {
        model(|| {
            let (tx, rx) = unbounded::<u32>();
            let _keep = tx.clone();
            let t = thread::spawn(move || tx.send(6).unwrap());
            let mut sel = Select::new();
            sel.recv(&rx);
            assert_eq!(sel.select().recv(&rx), Ok(6));
            t.join().unwrap();
        });
    }

    /// A select receive meets a plain rendezvous send, each possibly first: either the select's
    /// try phase pops the blocked sender, or the sender pops the select's entry and wins its
    /// context. The value arrives once; neither blocks for ever.
    #[test]
    fn select_rendezvous_recv_meets_send() {
        model(|| {
            let (tx, rx) = channel::<u32>(0);
            let _keep = tx.clone();
            let t = thread::spawn(move || tx.send(7).unwrap());
            let mut sel = Select::new();
            sel.recv(&rx);
            assert_eq!(sel.select().recv(&rx), Ok(7));
            t.join().unwrap();
        });
    }

    /// A select send meets a plain rendezvous receive: when the receiver pops the select's
    /// entry, it waits for the value the select's owner writes in its completion.
    #[test]
    fn select_rendezvous_send_meets_recv() {
        model(|| {
            let (tx, rx) = channel::<u32>(0);
            let _keep = rx.clone();
            let t = thread::spawn(move || rx.recv());
            let mut sel = Select::new();
            sel.send(&tx);
            sel.select().send(&tx, 8).unwrap();
            assert_eq!(t.join().unwrap(), Ok(8));
        });
    }

    /// The last sender goes while a select waits on its rendezvous: the disconnection selects
    /// the receive, which fails.
    #[test]
    fn select_rendezvous_disconnection() {
        model(|| {
            let (tx, rx) = channel::<u32>(0);
            let t = thread::spawn(move || drop(tx));
            let mut sel = Select::new();
            sel.recv(&rx);
            assert_eq!(sel.select().recv(&rx), Err(RecvError));
            t.join().unwrap();
        });
    }
}
