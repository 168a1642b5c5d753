//! Event counts: a version counter that threads can block on, free for the writer when nobody
//! sleeps.
//!
//! A waiter reads the version with [`EventCount::value`], inspects whatever data the version
//! guards, and if it needs to wait, calls [`EventCount::wait`] with the version it saw. The wait
//! returns as soon as the version differs — including when it changed *before* the call, which
//! is what makes the pattern immune to the lost wake-up of a misused condition variable: the
//! waiter never needs a lock around "check, then sleep" because the version it passes in
//! records what it has already seen (Paul Khuong, "Preemption Is GC for Memory Reordering",
//! 2019; Concurrency Kit's `ck_ec`; folly's `EventCount`).
//!
//! # The word
//!
//! One `AtomicU64`: bit 0 is the *sleepers* flag `F`, bits 1..64 the version (so the version
//! wraps at 2^63, and a signal adds 2 per version). Futex calls act on the low 32 bits, which
//! hold the flag *and* the version's low 31 bits (x86-64 is little-endian); both matter, see
//! below.
//!
//! # Multi-producer protocol ([`EventCount`])
//!
//! Signal (`add(d)`):
//! ```text
//! old = fetch_add(word, 2d)            // lock xadd: the only instruction on the fast path
//! if old & F:                          // a waiter may be asleep
//!     fetch_and(word, !F); futex_wake(word, all)
//! ```
//! Wait (`wait(v)`):
//! ```text
//! spin a little while version == v
//! loop:
//!     CAS(word, 2v → 2v|F)             // publish "a sleeper may be present"
//!         fails with version != v  → return Changed
//!         fails with 2v|F          → the flag is already set: fine
//!     spin a little while word == 2v|F
//!     futex_wait(low32(word), low32(2v|F), deadline)   // sleeps only if still 2v|F
//!     return Changed if version != v; TimedOut if the deadline passed
//! ```
//!
//! **Invariants.** (1) Only a signal that saw the flag in the value its `fetch_add` returned
//! clears it, and it wakes everybody *after* clearing. (2) A waiter sleeps only while the word's
//! low half is exactly that of `2v|F`: its version and a standing flag. Both are needed. The
//! flag alone is not enough, because a flag can belong to *another* waiter: after a signal
//! cleared our flag and moved the version to `v+1`, a second waiter may flag `2(v+1)|F`; a
//! futex that compared only the flag would let us sleep on that newer flag although our
//! version `v` is gone, until some later signal. (An earlier layout of this module did exactly
//! that — flag in the sign bit, futex on the high half — and the stress test found the lost
//! wake-ups within seconds.) The version alone is not enough either: a signal may clear a
//! flag set after its own increment, and the waiter that set it must then notice the flag gone.
//!
//! **No lost wake-up.** All read-modify-writes of the word are totally ordered (the word's
//! modification order; on x86 every `lock`ed instruction is a full barrier anyway). Take a
//! waiter whose futex wait compared the low half to that of `2v|F` and went to sleep. The signal that moves
//! the version past `v` is a `fetch_add` ordered either before the waiter's CAS — then the CAS
//! or the kernel's comparison would have seen the new version and the waiter would not sleep —
//! or after it. In the latter case the `fetch_add` returns a value with the flag set *unless*
//! another signal cleared the flag in between; that other signal also changed the version
//! (it added 2 first), so it is the one that moved the version past `v`, and it wakes all
//! sleepers after clearing. Either way the clearing signal's `futex_wake` comes after the
//! waiter's flag, and the kernel's compare-and-block (the comparison is made under the futex
//! bucket lock that `futex_wake` takes too) means the waiter is either already queued, and
//! woken, or compares and sees the new word. A clear that races with a *new* flag (a second
//! waiter flips it between a signal's `fetch_add` and its `fetch_and`) erases that flag; the
//! second waiter then finds `2v'` instead of `2v'|F` in its futex comparison or after its spin,
//! and flips the flag again — the loop never sleeps on a value it did not just see. The futex
//! compares 32 bits, so a waiter could sleep through exactly a multiple of 2^31 signals
//! arriving between its last load and its futex call; that is the same (accepted) window as
//! `ck_ec`'s 64-bit event count.
//!
//! **Orderings.** Signals use `Release` (data written before the signal is visible to a
//! waiter that sees the new version); every load or CAS that can return `Changed` uses
//! `Acquire`. Nothing else needs ordering: the lost-wake-up argument rests only on the single
//! word's modification order and the kernel's bucket lock.
//!
//! **Linearisation points.** A signal: its `fetch_add`. A wait that returns `Changed`: the
//! load (or failed CAS) that observed the new version.
//!
//! **Cost.** With no waiter a signal is one `lock xadd` and one predictable branch.
//!
//! # Single-producer protocol ([`SpEventCount`])
//!
//! With one producer, the version needs no atomic increment: on x86-64 the producer uses
//! `add qword ptr [word], 2d` *without* the `lock` prefix, then tests bit 0 of the word. Adding
//! an even number never changes bit 0, so a flag standing before the add is still there after
//! it; a flag set just after the add is seen too, which only costs a spurious wake (the waiter
//! that set it finds its flag cleared and sets it again). Waiters still flip the flag with a
//! `lock cmpxchg`.
//!
//! Why not the non-`lock`ed `xadd` that Paul Khuong's "Preemption Is GC for Memory Reordering"
//! (2019) suggests, which returns the old value: which of the two sequences is cheaper depends
//! on the core — the lab's `eventcount` experiment measures both (`signal-plain-xadd` and
//! `signal-sp`) beside a plain increment, and they have come out in both orders on different
//! microarchitectures, so the choice is under review. The post's other option, `inc` with the
//! flag in the sign bit read from the condition codes, forces the futex onto the half that
//! holds the sign bit, which does not hold the version's low bits (see the invariants above).
//! Why one instruction and not a load and a store: an interrupt cannot split an instruction,
//! and interrupt entry drains the store buffer; with two instructions the producer could be
//! preempted between its load and its store for longer than the waiters' one-second window
//! below, and then overwrite a flag after they trusted it.
//!
//! Under x86-TSO a `lock`ed instruction acts on memory with the store buffer drained; the
//! producer's plain `add` reads its own latest version (from memory or its own store buffer), so
//! versions are never lost. What can be lost is a *flag*: a waiter's CAS can land between the
//! producer's load and its store, or while the producer's store still sits in its store buffer;
//! the store then overwrites the flag. The waiter cannot tell from the memory model how long
//! that window lasts. It can tell from the clock: every interrupt return (`iret`) is a full
//! barrier, and interrupts reach every CPU several times a second (the HZ tick, 250 Hz here).
//! So, as that post argues, once the flag has stood unchanged for one second, no store of the
//! producer that could overwrite it is still in flight, and the next signal will see it.
//!
//! A waiter therefore: spins; flips the flag; spins; then, for one second after the flip (the
//! clock restarts whenever the word changes under it), sleeps with *growing timeouts* (1 ms, 2,
//! 4, … ms) and re-checks after each; only then does it block on the futex with the caller's
//! deadline alone. If a signal overwrote its flag, the waiter notices within one timeout, so a
//! lost flag costs latency, never a hang. This relies on interrupts: a core isolated with
//! `nohz_full` running one thread may not take one for longer (see that post); use the
//! multi-producer [`EventCount`] there.
//!
//! The single-producer contract is in the types: [`SpEventCount::producer`] hands out one
//! [`SpProducer`], which is neither `Clone` nor `Sync`; a second one is refused until the first
//! is dropped (the drop and the next hand-out synchronise through an atomic flag, so the next
//! producer sees the last version).
//!
//! The overwritten flag is real: with the one-second window removed (the waiter trusting its
//! flag at once), the stress test `tests/eventcount.rs` has lost wake-ups when the producer
//! used an unlocked `xadd`. The memory model does not exclude the race for today's `add`
//! either, so the window stays; with it, no run of the stress test has lost a wake-up.
//!
//! On other architectures, and in the loom build, the producer uses the multi-producer
//! `fetch_add` (the protocol above), which is correct everywhere.

use std::cell::Cell;
use std::convert::Infallible;
use std::marker::PhantomData;
use std::time::Duration;

use crate::futex::Parking;
use crate::primitives::{spin_loop, AtomicBool, AtomicU64, Ordering::*};
use crate::time::Deadline;

/// Pause-loop iterations before a waiter flips the sleepers flag. What that takes depends on
/// the CPU's `pause` latency; the lab's "waiter still spinning" figures show its effect.
#[cfg(not(loom))]
const SPIN_BEFORE_FLAG: u32 = 128;
/// Pause-loop iterations between the flag flip and the futex wait.
#[cfg(not(loom))]
const SPIN_AFTER_FLAG: u32 = 32;
// No spinning under loom: a spin iteration is a `yield_now` there, and loom deprioritises a
// thread that yields, which would hide exactly the interleavings the models are for.
#[cfg(loom)]
const SPIN_BEFORE_FLAG: u32 = 0;
#[cfg(loom)]
const SPIN_AFTER_FLAG: u32 = 0;

/// How long a single-producer waiter sleeps with timeouts after flipping the flag before it
/// trusts the flag to be seen (see the module documentation). Zero under loom, whose producer
/// is atomic.
#[cfg(not(loom))]
const SP_FLAG_SETTLE: Duration = Duration::from_secs(1);
#[cfg(loom)]
const SP_FLAG_SETTLE: Duration = Duration::ZERO;
/// The first timed sleep of a single-producer waiter; each next one doubles.
const SP_FIRST_TIMEOUT: Duration = Duration::from_millis(1);

const FLAG: u64 = 1;
const VERSION_MASK: u64 = u64::MAX >> 1;

/// The deadline passed before the version changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimedOut;

/// How a predicate wait ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waited<T> {
    /// The version differs from the one waited on; this is the version seen.
    Changed(u64),
    /// The deadline (possibly moved by the predicate) passed.
    TimedOut,
    /// The predicate asked to stop, with this value.
    Stopped(T),
}

/// What a wait predicate sees and may change: called before each sleep, it can stop the wait
/// or move its deadline (as `ck_ec_wait_pred` allows). A sleep ends only at a signal or at the
/// deadline, so a predicate that wants to run periodically keeps a near deadline ahead of it.
#[derive(Clone, Copy, Debug)]
pub struct WaitState {
    /// When the wait began.
    pub started: Deadline,
    /// The current deadline; `None` is "no deadline". The predicate may change it.
    pub deadline: Option<Deadline>,
    /// How many times the predicate has been called before, in this wait.
    pub iteration: u32,
}

/// The word and its futex handle, shared by both event counts.
struct Core {
    word: AtomicU64,
    parking: Parking,
}

impl Core {
    #[cfg(not(loom))]
    const fn new() -> Core {
        Core {
            word: AtomicU64::new(0),
            parking: Parking::new(),
        }
    }

    #[cfg(loom)]
    fn new() -> Core {
        Core {
            word: AtomicU64::new(0),
            parking: Parking::new(),
        }
    }

    #[inline]
    fn value(&self) -> u64 {
        self.word.load(Acquire) >> 1
    }

    fn has_waiters(&self) -> bool {
        self.word.load(Relaxed) & FLAG != 0
    }

    /// [`Core::wait`] without a predicate.
    fn wait_for_change(
        &self,
        old: u64,
        deadline: Option<Deadline>,
        single_producer: bool,
    ) -> Result<u64, TimedOut> {
        match self.wait::<Infallible>(old, deadline, single_producer, &mut |_| None) {
            Waited::Changed(v) => Ok(v),
            Waited::TimedOut => Err(TimedOut),
            Waited::Stopped(never) => match never {},
        }
    }

    /// The slow part of a signal: the returned old word had the flag set.
    #[cold]
    #[inline(never)]
    fn wake_sleepers(&self) {
        self.word.fetch_and(!FLAG, Release);
        self.parking.wake64_low(&self.word, u32::MAX);
    }

    // Under loom the spin constants are 0 (see their definitions).
    #[cfg_attr(loom, allow(clippy::reversed_empty_ranges))]
    /// The waiter side, shared by both protocols; `single_producer` adds the timed sleeps of
    /// the first second after a flag flip.
    fn wait<T>(
        &self,
        old: u64,
        deadline: Option<Deadline>,
        single_producer: bool,
        pred: &mut dyn FnMut(&mut WaitState) -> Option<T>,
    ) -> Waited<T> {
        let old = old & VERSION_MASK;
        let idle = old << 1;
        let flagged = idle | FLAG;
        let version = |w: u64| w >> 1;

        for _ in 0..SPIN_BEFORE_FLAG {
            let w = self.word.load(Acquire);
            if version(w) != old {
                return Waited::Changed(version(w));
            }
            spin_loop();
        }

        let mut state = WaitState {
            started: Deadline::now(),
            deadline,
            iteration: 0,
        };
        // Single producer: when the flag was first seen standing (None: not yet), and the
        // next timed sleep.
        let mut flag_since: Option<Deadline> = None;
        let mut timeout = SP_FIRST_TIMEOUT;
        loop {
            if let Some(t) = pred(&mut state) {
                return Waited::Stopped(t);
            }
            state.iteration = state.iteration.wrapping_add(1);
            if state.deadline.is_some_and(Deadline::has_passed) {
                return Waited::TimedOut;
            }

            // Publish "a sleeper may be present".
            match self.word.compare_exchange(idle, flagged, Acquire, Acquire) {
                Ok(_) => {}
                Err(w) if w == flagged => {}
                Err(w) => {
                    debug_assert_ne!(version(w), old);
                    return Waited::Changed(version(w));
                }
            }

            // Spin while the flag stands; anything else is a new version or a cleared flag.
            let mut w = flagged;
            for _ in 0..SPIN_AFTER_FLAG {
                w = self.word.load(Acquire);
                if w != flagged {
                    break;
                }
                spin_loop();
            }
            if w != flagged {
                if version(w) != old {
                    return Waited::Changed(version(w));
                }
                // A signal cleared a flag it did not see us set; set it again.
                flag_since = None;
                continue;
            }

            let mut sleep_until = state.deadline;
            if single_producer {
                let now = Deadline::now();
                let since = *flag_since.get_or_insert(now);
                if now < since.saturating_add(SP_FLAG_SETTLE) {
                    let nap = now.saturating_add(timeout);
                    timeout = timeout.saturating_mul(2);
                    sleep_until = Some(sleep_until.map_or(nap, |d| d.min(nap)));
                }
            }
            self.parking
                .wait64_low(&self.word, flagged as u32, sleep_until);

            let w = self.word.load(Acquire);
            if version(w) != old {
                return Waited::Changed(version(w));
            }
            if w != flagged {
                flag_since = None;
            }
        }
    }
}

/// A multi-producer event count. See the [module documentation](self) for the protocol.
///
/// ```
/// use spindle_sync::eventcount::EventCount;
/// use std::sync::atomic::{AtomicU32, Ordering};
///
/// static EC: EventCount = EventCount::new();
/// static DATA: AtomicU32 = AtomicU32::new(0);
///
/// let consumer = std::thread::spawn(|| loop {
///     let seen = EC.value();
///     let d = DATA.load(Ordering::Relaxed);
///     if d != 0 {
///         return d;
///     }
///     EC.wait(seen, None).unwrap(); // returns at once if a signal came after `value()`
/// });
/// DATA.store(42, Ordering::Relaxed);
/// EC.increment();
/// assert_eq!(consumer.join().unwrap(), 42);
/// ```
pub struct EventCount {
    core: Core,
}

impl EventCount {
    /// A new event count at version 0.
    #[cfg(not(loom))]
    pub const fn new() -> EventCount {
        EventCount { core: Core::new() }
    }

    /// A new event count at version 0.
    #[cfg(loom)]
    pub fn new() -> EventCount {
        EventCount { core: Core::new() }
    }

    /// The current version (an `Acquire` load: data written before the signal that produced
    /// this version is visible).
    #[inline]
    pub fn value(&self) -> u64 {
        self.core.value()
    }

    /// Advance the version by one and wake any sleepers; returns the previous version.
    #[inline]
    pub fn increment(&self) -> u64 {
        self.add(1)
    }

    /// Advance the version by `delta` (modulo 2^63) and wake any sleepers; returns the
    /// previous version. With no sleeper this is one `lock xadd` and a predictable branch.
    #[inline]
    pub fn add(&self, delta: u64) -> u64 {
        let old = self.core.word.fetch_add(delta << 1, Release);
        if old & FLAG != 0 {
            self.core.wake_sleepers();
        }
        old >> 1
    }

    /// Whether a waiter has announced that it may sleep (the flag is set).
    pub fn has_waiters(&self) -> bool {
        self.core.has_waiters()
    }

    /// Wait until the version differs from `old` or `deadline` passes (`None`: no deadline).
    /// Returns the version seen. Returns at once if the version already differs.
    pub fn wait(&self, old: u64, deadline: Option<Deadline>) -> Result<u64, TimedOut> {
        self.core.wait_for_change(old, deadline, false)
    }

    /// Wait like [`wait`](Self::wait), calling `pred` before each sleep: it may stop the wait
    /// (returning `Some`) or move `state.deadline`.
    pub fn wait_until<T>(
        &self,
        old: u64,
        deadline: Option<Deadline>,
        mut pred: impl FnMut(&mut WaitState) -> Option<T>,
    ) -> Waited<T> {
        self.core.wait(old, deadline, false, &mut pred)
    }
}

impl Default for EventCount {
    fn default() -> Self {
        EventCount::new()
    }
}

impl std::fmt::Debug for EventCount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventCount")
            .field("value", &self.value())
            .field("has_waiters", &self.has_waiters())
            .finish()
    }
}

/// A single-producer event count: the producer's signal costs a plain (non-`lock`ed) `add`
/// when nobody sleeps. See the [module documentation](self) for the protocol and its reliance
/// on interrupts.
///
/// ```
/// use spindle_sync::eventcount::SpEventCount;
///
/// let ec = SpEventCount::new();
/// std::thread::scope(|s| {
///     let mut producer = ec.producer().expect("the only producer");
///     assert!(ec.producer().is_none(), "a second producer is refused");
///     s.spawn(|| ec.wait(0, None).unwrap());
///     producer.increment();
/// });
/// assert_eq!(ec.value(), 1);
/// ```
pub struct SpEventCount {
    core: Core,
    producer_taken: AtomicBool,
}

impl SpEventCount {
    /// A new event count at version 0, with its producer handle available.
    #[cfg(not(loom))]
    pub const fn new() -> SpEventCount {
        SpEventCount {
            core: Core::new(),
            producer_taken: AtomicBool::new(false),
        }
    }

    /// A new event count at version 0, with its producer handle available.
    #[cfg(loom)]
    pub fn new() -> SpEventCount {
        SpEventCount {
            core: Core::new(),
            producer_taken: AtomicBool::new(false),
        }
    }

    /// The producer handle, or `None` while another one exists.
    pub fn producer(&self) -> Option<SpProducer<'_>> {
        self.producer_taken
            .compare_exchange(false, true, Acquire, Relaxed)
            .ok()
            .map(|_| SpProducer {
                ec: self,
                _not_sync: PhantomData,
            })
    }

    /// The current version (`Acquire`).
    #[inline]
    pub fn value(&self) -> u64 {
        self.core.value()
    }

    /// Whether a waiter has announced that it may sleep.
    pub fn has_waiters(&self) -> bool {
        self.core.has_waiters()
    }

    /// Wait until the version differs from `old` or `deadline` passes (`None`: no deadline).
    pub fn wait(&self, old: u64, deadline: Option<Deadline>) -> Result<u64, TimedOut> {
        self.core.wait_for_change(old, deadline, true)
    }

    /// Wait like [`wait`](Self::wait), calling `pred` before each sleep (including each timed
    /// sleep of the first second): it may stop the wait or move `state.deadline`.
    pub fn wait_until<T>(
        &self,
        old: u64,
        deadline: Option<Deadline>,
        mut pred: impl FnMut(&mut WaitState) -> Option<T>,
    ) -> Waited<T> {
        self.core.wait(old, deadline, true, &mut pred)
    }
}

impl Default for SpEventCount {
    fn default() -> Self {
        SpEventCount::new()
    }
}

impl std::fmt::Debug for SpEventCount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpEventCount")
            .field("value", &self.value())
            .field("has_waiters", &self.has_waiters())
            .finish()
    }
}

/// The one producer of an [`SpEventCount`]: not `Clone`, not `Sync` (it may move to another
/// thread, which then becomes the producer).
///
/// Sharing it between threads does not compile:
/// ```compile_fail
/// fn shared<T: Sync>(_: &T) {}
/// let ec = spindle_sync::SpEventCount::new();
/// shared(&ec.producer().unwrap());
/// ```
/// nor does cloning it:
/// ```compile_fail
/// let ec = spindle_sync::SpEventCount::new();
/// let p = ec.producer().unwrap();
/// let q = p.clone();
/// ```
/// while moving it to another thread does:
/// ```
/// let ec = spindle_sync::SpEventCount::new();
/// let mut p = ec.producer().unwrap();
/// std::thread::scope(|s| {
///     s.spawn(move || p.increment());
/// });
/// assert_eq!(ec.value(), 1);
/// ```
pub struct SpProducer<'a> {
    ec: &'a SpEventCount,
    /// `Cell<()>` is `Send` but not `Sync`.
    _not_sync: PhantomData<Cell<()>>,
}

impl SpProducer<'_> {
    /// Advance the version by one and wake any sleepers.
    #[inline]
    pub fn increment(&mut self) {
        self.add(1)
    }

    /// Advance the version by `delta` (modulo 2^63) and wake any sleepers. With no sleeper:
    /// one plain `add` to memory and a predictable branch. (Unlike [`EventCount::add`] it does
    /// not return the previous version: that would cost the fast path a register it cannot
    /// keep across the asm barrier; read [`SpEventCount::value`] if you need it.)
    #[inline]
    pub fn add(&mut self, delta: u64) {
        let core = &self.ec.core;
        if producer_add(&core.word, delta << 1) {
            core.wake_sleepers();
        }
    }

    /// The event count this producer signals.
    pub fn event_count(&self) -> &SpEventCount {
        self.ec
    }
}

impl Drop for SpProducer<'_> {
    fn drop(&mut self) {
        // Release: the next producer's Acquire hand-out sees every version we wrote.
        self.ec.producer_taken.store(false, Release);
    }
}

/// The producer's signal: `add` without `lock`, then a test of the flag bit (x86-64).
/// `delta2` is even, so the add never touches the flag. Returns whether the flag was set.
#[cfg(all(target_arch = "x86_64", not(loom)))]
#[inline(always)]
fn producer_add(word: &AtomicU64, delta2: u64) -> bool {
    let flag: u32;
    // SAFETY: `word` is a valid, aligned u64 for the borrow. The asm has no `nomem`, so it is
    // also a compiler barrier: the producer's earlier data writes are emitted before it, and
    // x86-TSO keeps stores in program order, which makes the new version a release. The add is
    // one instruction, so no interrupt can fall between its load and its store. Racing waiters
    // only ever touch the word with `lock`ed instructions; the one effect of the race (a flag
    // overwritten) is handled by the waiters, see the module documentation. Zeroing `f` first
    // keeps the byte `setnz` from depending on the register's previous value.
    unsafe {
        std::arch::asm!(
            "xor {f:e}, {f:e}",
            "add qword ptr [{p}], {d}",
            "test byte ptr [{p}], 1",
            "setnz {f:l}",
            p = in(reg) word.as_ptr(),
            d = in(reg) delta2,
            f = out(reg) flag,
            options(nostack),
        );
    }
    flag != 0
}

#[cfg(not(all(target_arch = "x86_64", not(loom))))]
#[inline(always)]
fn producer_add(word: &AtomicU64, delta2: u64) -> bool {
    word.fetch_add(delta2, Release) & FLAG != 0
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    #[test]
    fn versions_count_and_wrap() {
        let ec = EventCount::new();
        assert_eq!(ec.increment(), 0);
        assert_eq!(ec.add(5), 1);
        assert_eq!(ec.value(), 6);
        assert!(!ec.has_waiters());
        ec.add(VERSION_MASK - 6);
        assert_eq!(ec.value(), VERSION_MASK);
        assert_eq!(ec.increment(), VERSION_MASK);
        assert_eq!(ec.value(), 0, "the version wraps at 2^63");
        assert!(!ec.has_waiters(), "the carry leaves the word, not the flag");

        let sp = SpEventCount::new();
        let mut p = sp.producer().unwrap();
        p.increment();
        p.add(41);
        assert_eq!(sp.value(), 42);
        p.add(VERSION_MASK - 42);
        assert_eq!(sp.value(), VERSION_MASK);
        p.increment();
        assert_eq!(sp.value(), 0, "the version wraps at 2^63");
        assert!(!sp.has_waiters());
    }

    #[test]
    fn producer_add_sees_the_flag_before_and_after_it() {
        let w = AtomicU64::new(10);
        assert!(!producer_add(&w, 2));
        assert_eq!(w.load(Relaxed), 12);
        w.store(13, Relaxed);
        assert!(producer_add(&w, 2), "a standing flag survives an even add");
        assert_eq!(w.load(Relaxed), 15);
        w.store(u64::MAX, Relaxed);
        assert!(producer_add(&w, 2), "and a wrapping one");
        assert_eq!(w.load(Relaxed), 1);
    }

    #[test]
    fn wait_returns_at_once_on_a_stale_version() {
        let ec = EventCount::new();
        ec.increment();
        assert_eq!(ec.wait(0, None), Ok(1));
        let sp = SpEventCount::new();
        sp.producer().unwrap().increment();
        assert_eq!(sp.wait(0, None), Ok(1));
    }

    #[test]
    fn wait_times_out_and_leaves_the_flag_for_the_next_signal() {
        let ec = EventCount::new();
        let d = Deadline::after(Duration::from_millis(5));
        assert_eq!(ec.wait(0, Some(d)), Err(TimedOut));
        assert!(d.has_passed());
        assert!(ec.has_waiters(), "a timed-out waiter leaves the flag set");
        ec.increment();
        assert!(!ec.has_waiters(), "the signal that saw the flag clears it");

        let sp = SpEventCount::new();
        let d = Deadline::after(Duration::from_millis(5));
        assert_eq!(sp.wait(0, Some(d)), Err(TimedOut));
        assert!(d.has_passed());
    }

    #[test]
    fn producer_handle_is_unique_until_dropped() {
        let sp = SpEventCount::new();
        let p = sp.producer().unwrap();
        assert!(sp.producer().is_none());
        drop(p);
        let mut p = sp.producer().expect("free again after drop");
        p.increment();
        assert_eq!(p.event_count().value(), 1);
    }

    #[test]
    fn predicate_can_stop_and_move_the_deadline() {
        let ec = EventCount::new();
        // A predicate that wants to be called periodically keeps a short deadline ahead.
        let r = ec.wait_until(0, None, |s| {
            s.deadline = Some(Deadline::after(Duration::from_millis(1)));
            (s.iteration == 3).then_some("stop")
        });
        assert_eq!(r, Waited::Stopped("stop"));

        // The predicate shortens an infinite wait to a deadline in the past.
        let r: Waited<()> = ec.wait_until(0, None, |s| {
            s.deadline = Some(Deadline::from_nanos(0));
            None
        });
        assert_eq!(r, Waited::TimedOut);

        // And it sees the deadline it moved on the next call.
        let sp = SpEventCount::new();
        let mut seen = Vec::new();
        let r: Waited<()> = sp.wait_until(0, Some(Deadline::after(Duration::from_secs(60))), |s| {
            seen.push(s.deadline);
            if s.iteration == 0 {
                s.deadline = Some(Deadline::after(Duration::from_millis(3)));
            }
            None
        });
        assert_eq!(r, Waited::TimedOut);
        // The single producer's first naps (1 ms, 2 ms) call the predicate again, and it sees
        // the deadline it moved, not the one the wait began with.
        assert!(seen.len() >= 2);
        assert!(seen[1] < seen[0]);
    }

    #[test]
    fn sleeping_waiters_are_woken() {
        for single_producer in [false, true] {
            let mp = EventCount::new();
            let sp = SpEventCount::new();
            let woke = AtomicU32::new(0);
            std::thread::scope(|s| {
                for _ in 0..3 {
                    s.spawn(|| {
                        let r = if single_producer {
                            sp.wait(0, None)
                        } else {
                            mp.wait(0, None)
                        };
                        assert_eq!(r, Ok(1));
                        woke.fetch_add(1, Relaxed);
                    });
                }
                // Let them reach the futex (no timing is asserted: if they have not, the
                // signal still finds the flag or the waiters find the new version).
                std::thread::sleep(Duration::from_millis(20));
                if single_producer {
                    sp.producer().unwrap().increment();
                } else {
                    mp.increment();
                }
            });
            assert_eq!(woke.load(Relaxed), 3);
        }
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::sync::Arc;
    use loom::thread;

    /// One waiter, one signal: the waiter must return with the new version (a lost wake-up is
    /// a loom deadlock).
    #[test]
    fn mp_one_waiter_one_signal() {
        loom::model(|| {
            let ec = Arc::new(EventCount::new());
            let e2 = ec.clone();
            let w = thread::spawn(move || e2.wait(0, None));
            ec.increment();
            assert_eq!(w.join().unwrap(), Ok(1));
        });
    }

    /// Two producers, one waiter that waits until both signals arrived.
    #[test]
    fn mp_two_producers() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(|| {
            let ec = Arc::new(EventCount::new());
            let producers: Vec<_> = (0..2)
                .map(|_| {
                    let e = ec.clone();
                    thread::spawn(move || {
                        e.increment();
                    })
                })
                .collect();
            let mut v = 0;
            while v < 2 {
                v = ec.wait(v, None).unwrap();
            }
            for p in producers {
                p.join().unwrap();
            }
            assert_eq!(ec.value(), 2);
        });
    }

    /// Two waiters on one signal: the clear-then-wake of one signal must reach both, including
    /// a waiter that flipped the flag between the signal's add and its clear.
    #[test]
    fn mp_two_waiters() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(|| {
            let ec = Arc::new(EventCount::new());
            let waiters: Vec<_> = (0..2)
                .map(|_| {
                    let e = ec.clone();
                    thread::spawn(move || e.wait(0, None))
                })
                .collect();
            ec.increment();
            for w in waiters {
                assert_eq!(w.join().unwrap(), Ok(1));
            }
        });
    }

    /// One producer signalling twice while a waiter follows each version: a signal that woke
    /// the waiter must not leave behind a flag state in which the next sleep is unannounced.
    #[test]
    fn mp_waiter_follows_two_signals() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(4);
        b.check(|| {
            let ec = Arc::new(EventCount::new());
            let e2 = ec.clone();
            let w = thread::spawn(move || {
                let mut v = 0;
                while v < 2 {
                    v = e2.wait(v, None).unwrap();
                }
                v
            });
            ec.increment();
            ec.increment();
            assert_eq!(w.join().unwrap(), 2);
        });
    }

    /// The waiter side of the single-producer count (its producer is atomic under loom):
    /// signals published one after another, a waiter that follows each version.
    #[test]
    fn sp_waiter_follows_versions() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(|| {
            let ec = Arc::new(SpEventCount::new());
            let e2 = ec.clone();
            let w = thread::spawn(move || {
                let mut v = 0;
                while v < 2 {
                    v = e2.wait(v, None).unwrap();
                }
                v
            });
            let mut p = ec.producer().unwrap();
            p.increment();
            p.increment();
            drop(p);
            assert_eq!(w.join().unwrap(), 2);
        });
    }

    /// A waiter whose data is published before the signal sees the data (Release/Acquire).
    #[test]
    fn mp_signal_publishes_data() {
        loom::model(|| {
            let ec = Arc::new(EventCount::new());
            let data = Arc::new(loom::sync::atomic::AtomicU64::new(0));
            let (e2, d2) = (ec.clone(), data.clone());
            let w = thread::spawn(move || {
                let seen = e2.value();
                let v = d2.load(Relaxed);
                if v == 0 {
                    e2.wait(seen, None).unwrap();
                    assert_eq!(d2.load(Relaxed), 7);
                }
            });
            data.store(7, Relaxed);
            ec.increment();
            w.join().unwrap();
        });
    }
}
