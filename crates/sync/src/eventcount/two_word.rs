//! The two-word single-producer event count of Paul Khuong's "Preemption Is GC for Memory
//! Reordering" (2019, the note on non-x86 targets; Composite OS's blockpoints): a version
//! written only by the producer, with plain stores, and a sleepers flag written by waiters.
//! Its correctness rests on the C++ memory model alone: no TSO, no interrupt, no
//! process-wide barrier. So it is what AArch64 (and any weak memory model) can run as is,
//! and on x86-64 it is the portable comparison for [`SpEventCount`](super::SpEventCount),
//! whose signal relies on x86-TSO and on the waiter's barrier (the lab's `eventcount`
//! experiment measures the two side by side).
//!
//! A waiter reads the version ([`TwoWordEventCount::value`]), inspects the data the version
//! guards, and if it must wait calls [`TwoWordEventCount::wait`] with the version it read;
//! the wait returns as soon as the version differs, including when it changed before the
//! call. One producer ([`TwoWordEventCount::producer`]) signals.
//!
//! # The words
//!
//! - `V`, the version: an `AtomicU64` only the producer writes, with plain (`Release`)
//!   stores of a value it keeps in a register. Waiters sleep on it: the futex compares its
//!   low 32 bits (little-endian: the first four bytes).
//! - `F`, the sleepers flag: an `AtomicU32`, 1 while a waiter may be asleep. Waiters set it
//!   (store 1); only the producer clears it (store 0), and only *before* an increment.
//!
//! # Protocol
//!
//! ```text
//! signal (producer; `local` is its copy of V):
//!     f = F                           // Relaxed
//!     if f: F = 0                     // clear, before the increment; remember must_wake
//!     local += 1; V = local           // Release: the linearisation point
//!     fence(SeqCst)                   // (P) store V → load F
//!     if f or F: futex_wake(V, all)   // Relaxed re-check
//!
//! wait(old) (any thread):
//!     spin a little while V == old    // Acquire loads
//!     loop:
//!         F = 1                       // Relaxed store: announce
//!         fence(SeqCst)               // (W) store F → load V
//!         if V != old: return V       // Acquire
//!         futex_wait(V, old)          // the kernel re-reads V under its bucket lock
//!         if V != old: return V
//! ```
//!
//! With nobody waiting a signal is two loads of `F` (on a line nobody writes while nobody
//! waits), a store of `V`, a full fence and two predictable branches: on AArch64 `ldr`,
//! `stlr`, `dmb ish`, `ldr`; on x86-64 `mov`, `mov`, `mfence`, `mov`.
//!
//! # Why no wake-up is lost
//!
//! The futex gives the last step: a waker that changes `V` and then calls `futex_wake`
//! either finds the waiter queued, or the kernel's comparison (made after queueing, under the
//! bucket lock, with full barriers on both sides: `futex(2)`'s own guarantee on every
//! architecture) sees the new `V`. So it suffices that a waiter which compares `V` equal to
//! `old` after signal `s` stored `V_s ≠ old` is woken by a `futex_wake` issued after that
//! store. Take a waiter `W` whose `old` is the version before `s` (an older `old` differs from
//! `V` at `W`'s first look after `s`'s store became visible, and `W` does not sleep). `W`'s
//! announcement is a store `A` of 1 to `F`, then fence `(W)`, then loads of `V` (its own and
//! the kernel's). Signal `s` is: look `f` at `F`, clear `C` if `f` was set, store `S` to `V`,
//! fence `(P)`, re-check load `B` of `F`. The fences are `SeqCst`, so they are in the single
//! total order of the C++ model ([atomics.order]):
//!
//! - `(W)` before `(P)`: `A` is sequenced before `(W)` and `B` after `(P)`, so `B` reads `A`
//!   or a store after it in `F`'s modification order (the fence-fence rule). Stores of 1 by
//!   other waiters leave `F` set, so `B` sees the flag set and `s` wakes; the only clear
//!   that can come after `A` and still precede `B` is `s`'s own `C` (a clear of an earlier
//!   signal `s' < s` happens before `A`: `W` read `V_{s−1}` with an `Acquire` load that
//!   synchronises with the `Release` store `s−1` made after `C'`, and `A` follows that
//!   load), and `C` runs only when `f` was set, which makes `s` wake anyway.
//! - `(P)` before `(W)`: symmetrically, `S` is sequenced before `(P)` and `W`'s loads of `V`
//!   after `(W)`, so they read `S` or a later store: `W` sees `V ≠ old` and does not sleep.
//!
//! Either way `W` is not left asleep. Both fences are needed: without `(P)` the producer's
//! re-check may be satisfied before its store of `V` is visible, without `(W)` the waiter's
//! load of `V` before its flag is; that is the store-buffering pattern, and the C++ model (and
//! Arm, and x86-TSO) allow both loads to miss. The loom model `two_word_fences_close_the_window`
//! finds that execution with either fence removed and none with both.
//!
//! Why the clear comes before the increment (the post's point): a clear after the increment
//! could erase the flag of a waiter that already read the new version and is about to sleep
//! on it; nothing would wake that waiter at the next signal, whose look finds `F` clear. A
//! clear before the increment can only erase flags of waiters of older versions (above), and
//! `must_wake` wakes them. The loom model `two_word_clear_after_the_increment_loses_a_wakeup`
//! shows the lost wake-up of the other order.
//!
//! A flag outlives its waiter (a wait that returns, or times out, leaves it): the next signal
//! clears it and makes one `futex_wake` call that wakes nobody. A waiter whose flag another
//! waiter's store re-set, or that a clear erased, needs nothing of it: every sleep is preceded
//! by the waiter's own store and fence. Spurious wake-ups (a wake aimed at another version,
//! a signal) make the waiter look at `V` again and, unchanged, announce again.
//!
//! The futex compares 32 bits: a waiter could sleep through exactly a multiple of 2^32
//! signals arriving between its last look at `V` and its futex call, the window of
//! [`EventCount`](super::EventCount) and `ck_ec`.
//!
//! # Orderings, summed up
//!
//! `V`'s stores are `Release` and the waiter's loads that can return `Changed` are `Acquire`
//! (data written before a signal is visible to a waiter that sees its version; they also
//! order a clear before a later waiter's flag, above). The two `SeqCst` fences carry the
//! lost-wake-up argument; nothing else needs ordering (`F`'s accesses are `Relaxed`). The
//! fences are the whole cost over a plain release store; they are what x86-TSO plus an
//! asymmetric barrier saves [`SpEventCount`](super::SpEventCount) on x86-64. (A `SeqCst`
//! store of `V` and `SeqCst` load of `F`, `stlr` + `ldar` on AArch64, would be correct in the
//! C++ model too, without the `dmb`, but loom treats `SeqCst` accesses as acquire/release
//! and could not check that form; the fences are what the loom models check, exactly.)
//!
//! **Linearisation points.** A signal: its store to `V`. A wait that returns a version: the
//! load that observed it.
//!
//! The single-producer contract is in the types, as for `SpEventCount`: one
//! [`TwoWordProducer`] at a time, neither `Clone` nor `Sync`.

use std::cell::Cell;
use std::convert::Infallible;
use std::marker::PhantomData;

use super::{TimedOut, WaitState, Waited, SPIN_BEFORE_FLAG, YIELD_AT};
use crate::futex::{Parking, WaitResult};
use crate::primitives::{
    fence, spin_loop, yield_now, AtomicBool, AtomicU32, AtomicU64, CachePadded, Ordering::*,
};
use crate::time::Deadline;

/// The two-word single-producer event count. See the [module documentation](self).
///
/// ```
/// use spindle_sync::eventcount::TwoWordEventCount;
///
/// let ec = TwoWordEventCount::new();
/// std::thread::scope(|s| {
///     let mut producer = ec.producer().expect("the only producer");
///     assert!(ec.producer().is_none(), "a second producer is refused");
///     s.spawn(|| ec.wait(0, None).unwrap());
///     producer.increment();
/// });
/// assert_eq!(ec.value(), 1);
/// ```
pub struct TwoWordEventCount {
    /// `V`: written only by the producer; waiters poll it and sleep on its low half. On a
    /// cache line of its own.
    version: CachePadded<AtomicU64>,
    /// `F`: 1 while a waiter may be asleep.
    sleepers: AtomicU32,
    producer_taken: AtomicBool,
    parking: Parking,
    /// Late wake-ups ([`TwoWordEventCount::late_wakeups`]): a diagnostic, not part of the
    /// protocol (a std atomic even under loom).
    late: std::sync::atomic::AtomicU64,
}

impl TwoWordEventCount {
    /// A new event count at version 0, with its producer handle available.
    #[cfg(not(loom))]
    pub const fn new() -> TwoWordEventCount {
        TwoWordEventCount {
            version: CachePadded(AtomicU64::new(0)),
            sleepers: AtomicU32::new(0),
            producer_taken: AtomicBool::new(false),
            parking: Parking::new(),
            late: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// A new event count at version 0, with its producer handle available.
    #[cfg(loom)]
    pub fn new() -> TwoWordEventCount {
        TwoWordEventCount {
            version: CachePadded(AtomicU64::new(0)),
            sleepers: AtomicU32::new(0),
            producer_taken: AtomicBool::new(false),
            parking: Parking::new(),
            late: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The producer handle, or `None` while another one exists.
    #[inline]
    pub fn producer(&self) -> Option<TwoWordProducer<'_>> {
        self.producer_taken
            .compare_exchange(false, true, Acquire, Relaxed)
            .ok()
            .map(|_| TwoWordProducer {
                ec: self,
                // The hand-out synchronised with the previous producer's drop.
                local: self.version.load(Relaxed),
                _not_sync: PhantomData,
            })
    }

    /// The current version (`Acquire`: data written before the signal that produced it is
    /// visible).
    #[inline]
    pub fn value(&self) -> u64 {
        self.version.load(Acquire)
    }

    /// Whether a waiter's flag stands (it may be asleep, or may have left since).
    pub fn has_waiters(&self) -> bool {
        self.sleepers.load(Relaxed) != 0
    }

    /// How many waits found the version changed when a sleep of theirs ended at its
    /// deadline: the signal came, but no wake reached the sleeper, which learnt of the new
    /// version only from its timeout. The protocol makes that impossible (see "Why no
    /// wake-up is lost"); the stress tests assert that it stays zero. (A deadline that
    /// expires in the nanoseconds between a signal's store and its wake counts too.)
    pub fn late_wakeups(&self) -> u64 {
        self.late.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The producer's signal: publish `new` as the version, waking sleepers if a flag
    /// stands; returns whether it woke. `CLEAR_FIRST` and `FENCED` are the protocol (`true`);
    /// the loom models instantiate the mutants to show that each is needed.
    #[inline(always)]
    fn publish<const CLEAR_FIRST: bool, const FENCED: bool>(&self, new: u64) -> bool {
        let f = if CLEAR_FIRST {
            self.sleepers.load(Relaxed)
        } else {
            0
        };
        if f != 0 {
            self.sleepers.store(0, Relaxed);
        }
        self.version.store(new, Release);
        if FENCED {
            fence(SeqCst);
        }
        let again = self.sleepers.load(Relaxed);
        if f != 0 || again != 0 {
            if !CLEAR_FIRST && again != 0 {
                // The mutant: clear after the increment.
                self.sleepers.store(0, Relaxed);
            }
            self.wake();
            return true;
        }
        false
    }

    /// The waiter's announcement, then its look at `V` ((W) in the module documentation):
    /// the new version if it moved past `old`, `None` if the waiter may sleep. `FENCED` is the
    /// protocol (`true`); `false`, a loom mutant.
    #[inline(always)]
    fn announce_and_look<const FENCED: bool>(&self, old: u64) -> Option<u64> {
        self.sleepers.store(1, Relaxed);
        if FENCED {
            fence(SeqCst);
        }
        let v = self.version.load(Acquire);
        (v != old).then_some(v)
    }

    /// The slow part of a signal: a flag stood.
    #[cold]
    #[inline(never)]
    fn wake(&self) {
        self.parking.wake64_low(&self.version, u32::MAX);
    }

    /// Wait until the version differs from `old` or `deadline` passes (`None`: no deadline).
    /// Returns the version seen. Returns at once if the version already differs.
    pub fn wait(&self, old: u64, deadline: Option<Deadline>) -> Result<u64, TimedOut> {
        match self.wait_until::<Infallible>(old, deadline, |_| None) {
            Waited::Changed(v) => Ok(v),
            Waited::TimedOut => Err(TimedOut),
            Waited::Stopped(never) => match never {},
        }
    }

    /// Wait like [`wait`](Self::wait), calling `pred` before each sleep: it may stop the wait
    /// (returning `Some`) or move `state.deadline`.
    pub fn wait_until<T>(
        &self,
        old: u64,
        deadline: Option<Deadline>,
        mut pred: impl FnMut(&mut WaitState) -> Option<T>,
    ) -> Waited<T> {
        self.wait_impl(old, deadline, &mut pred)
    }

    // Under loom the spin constants are 0 (see their definitions).
    #[cfg_attr(loom, allow(clippy::reversed_empty_ranges))]
    /// The waiter side.
    fn wait_impl<T>(
        &self,
        old: u64,
        deadline: Option<Deadline>,
        pred: &mut dyn FnMut(&mut WaitState) -> Option<T>,
    ) -> Waited<T> {
        for i in 0..SPIN_BEFORE_FLAG {
            let v = self.version.load(Acquire);
            if v != old {
                return Waited::Changed(v);
            }
            if i == YIELD_AT {
                yield_now();
            } else {
                spin_loop();
            }
        }
        let mut state = WaitState {
            started: Deadline::now(),
            deadline,
            iteration: 0,
        };
        loop {
            if let Some(t) = pred(&mut state) {
                return Waited::Stopped(t);
            }
            state.iteration = state.iteration.wrapping_add(1);
            if state.deadline.is_some_and(Deadline::has_passed) {
                return Waited::TimedOut;
            }
            if let Some(v) = self.announce_and_look::<true>(old) {
                return Waited::Changed(v);
            }
            let slept = self
                .parking
                .wait64_low(&self.version, old as u32, state.deadline);
            let v = self.version.load(Acquire);
            if v != old {
                if slept == WaitResult::TimedOut {
                    self.late.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                return Waited::Changed(v);
            }
        }
    }
}

impl Default for TwoWordEventCount {
    fn default() -> Self {
        TwoWordEventCount::new()
    }
}

impl std::fmt::Debug for TwoWordEventCount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TwoWordEventCount")
            .field("value", &self.value())
            .field("has_waiters", &self.has_waiters())
            .finish()
    }
}

/// The one producer of a [`TwoWordEventCount`]: not `Clone`, not `Sync` (it may move to
/// another thread, which then becomes the producer).
///
/// ```compile_fail
/// fn shared<T: Sync>(_: &T) {}
/// let ec = spindle_sync::eventcount::TwoWordEventCount::new();
/// shared(&ec.producer().unwrap());
/// ```
pub struct TwoWordProducer<'a> {
    ec: &'a TwoWordEventCount,
    /// The version, which only this handle writes.
    local: u64,
    /// `Cell<()>` is `Send` but not `Sync`.
    _not_sync: PhantomData<Cell<()>>,
}

impl TwoWordProducer<'_> {
    /// Advance the version by one and wake any sleepers; returns the previous version.
    #[inline]
    pub fn increment(&mut self) -> u64 {
        self.add(1)
    }

    /// Advance the version by `delta` (modulo 2^64) and wake any sleepers; returns the
    /// previous version. With no sleeper: two loads, a store, a full fence and two
    /// predictable branches.
    #[inline]
    pub fn add(&mut self, delta: u64) -> u64 {
        let old = self.local;
        self.local = old.wrapping_add(delta);
        let _woke = self.ec.publish::<true, true>(self.local);
        old
    }

    /// The event count this producer signals.
    pub fn event_count(&self) -> &TwoWordEventCount {
        self.ec
    }
}

impl Drop for TwoWordProducer<'_> {
    #[inline]
    fn drop(&mut self) {
        // Release: the next producer's Acquire hand-out sees every version we wrote.
        self.ec.producer_taken.store(false, Release);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn two_word_versions_count_wrap_and_hand_over() {
        let ec = TwoWordEventCount::new();
        let mut p = ec.producer().unwrap();
        assert!(ec.producer().is_none());
        assert_eq!(p.increment(), 0);
        assert_eq!(p.add(41), 1);
        assert_eq!(ec.value(), 42);
        p.add(u64::MAX - 42);
        assert_eq!(p.increment(), u64::MAX);
        assert_eq!(ec.value(), 0, "the version wraps at 2^64");
        drop(p);
        let mut p = ec.producer().expect("free again after drop");
        assert_eq!(
            p.increment(),
            0,
            "the next producer starts from the last version"
        );
        assert_eq!(p.event_count().value(), 1);
    }

    #[test]
    fn two_word_signal_clears_the_flag_before_the_increment() {
        let ec = TwoWordEventCount::new();
        let mut p = ec.producer().unwrap();
        p.increment();
        assert!(!ec.has_waiters());
        // What an announcement leaves.
        ec.sleepers.store(1, Relaxed);
        assert!(ec.has_waiters());
        p.increment();
        assert!(!ec.has_waiters(), "the signal that saw the flag clears it");
        assert_eq!(ec.value(), 2);
    }

    #[test]
    fn two_word_wait_returns_at_once_on_a_new_version_and_times_out() {
        let ec = TwoWordEventCount::new();
        let mut p = ec.producer().unwrap();
        p.increment();
        assert_eq!(ec.wait(0, None), Ok(1));
        // Long enough under Miri (interpreted, far slower) for the spin to end and the
        // waiter to announce itself before the deadline.
        let d = Deadline::after(Duration::from_millis(if cfg!(miri) { 500 } else { 5 }));
        assert_eq!(ec.wait(1, Some(d)), Err(TimedOut));
        assert!(d.has_passed());
        assert!(ec.has_waiters(), "a timed-out waiter leaves its flag");
        p.increment();
        assert!(!ec.has_waiters());
        assert_eq!(ec.late_wakeups(), 0);
    }

    #[test]
    fn two_word_sleeper_is_woken_and_sees_the_data() {
        let ec = TwoWordEventCount::new();
        let data = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|s| {
            let w = s.spawn(|| {
                let v = ec.wait(0, None).unwrap();
                (v, data.load(Relaxed))
            });
            std::thread::sleep(Duration::from_millis(20));
            data.store(7, Relaxed);
            ec.producer().unwrap().increment();
            assert_eq!(w.join().unwrap(), (1, 7));
        });
    }

    #[test]
    fn two_word_predicate_stops_and_moves_the_deadline() {
        let ec = TwoWordEventCount::new();
        let r = ec.wait_until(0, None, |s| {
            s.deadline = Some(Deadline::after(Duration::from_millis(20)));
            (s.iteration == 2).then_some("stop")
        });
        assert_eq!(r, Waited::Stopped("stop"));
        let r: Waited<()> = ec.wait_until(0, None, |s| {
            s.deadline = Some(Deadline::from_nanos(0));
            None
        });
        assert_eq!(r, Waited::TimedOut);
    }
}

/// Loom models. Under loom the spins are empty and the futex is a mutex and condition
/// variable with the kernel's compare-and-block semantics (`futex::Parking`); a sleep with no
/// deadline ends only by a wake, so a lost wake-up is a loom deadlock.
#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::sync::Arc;
    use loom::thread;

    /// A waiter follows versions 1..=3 while the producer signals three times: it returns
    /// each time with a newer version, woken by a signal, never late.
    #[test]
    fn two_word_waiter_follows_versions() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(|| {
            let ec = Arc::new(TwoWordEventCount::new());
            let e2 = ec.clone();
            let w = thread::spawn(move || {
                let mut v = 0;
                while v < 3 {
                    let next = e2.wait(v, None).unwrap();
                    assert!(next > v, "returned {next} waiting on {v}");
                    v = next;
                }
                v
            });
            let mut p = ec.producer().unwrap();
            for _ in 0..3 {
                p.increment();
            }
            drop(p);
            assert_eq!(w.join().unwrap(), 3);
            assert_eq!(ec.late_wakeups(), 0);
        });
    }

    /// Two waiters, one of version 0 and one that may start on version 1, while the producer
    /// signals twice: a clear can erase one waiter's flag while the other's stands; both
    /// must be woken (`must_wake`, and the re-check after the fence).
    #[test]
    fn two_word_two_waiters() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(2);
        b.check(|| {
            let ec = Arc::new(TwoWordEventCount::new());
            let waiters: Vec<_> = (0..2)
                .map(|_| {
                    let e = ec.clone();
                    thread::spawn(move || {
                        let mut v = e.value();
                        while v < 2 {
                            v = e.wait(v, None).unwrap();
                        }
                    })
                })
                .collect();
            let mut p = ec.producer().unwrap();
            p.increment();
            p.increment();
            drop(p);
            for w in waiters {
                w.join().unwrap();
            }
        });
    }

    /// A waiter that sees a signal's version sees the data written before it.
    #[test]
    fn two_word_signal_publishes_data() {
        loom::model(|| {
            let ec = Arc::new(TwoWordEventCount::new());
            let data = Arc::new(loom::sync::atomic::AtomicU64::new(0));
            let (e2, d2) = (ec.clone(), data.clone());
            let w = thread::spawn(move || {
                let seen = e2.value();
                if d2.load(Relaxed) == 0 {
                    e2.wait(seen, None).unwrap();
                    assert_eq!(d2.load(Relaxed), 7);
                }
            });
            data.store(7, Relaxed);
            ec.producer().unwrap().increment();
            w.join().unwrap();
        });
    }

    /// The protocol on its words, with the sleep left out: a waiter reads the version and,
    /// unless it has moved, announces itself and looks again (`announce_and_look`, the real
    /// code); the producer publishes versions 1 and 2 (`publish`, the real code, or one of its
    /// mutants) and records which signals woke. Returns whether some execution had the
    /// waiter decide to sleep on a version `old < 2` while no signal after `old` woke: a
    /// lost wake-up (the futex would let it sleep, since any wake the producer issued before
    /// its store of a newer version came before that store; see the module documentation).
    fn loses_a_wakeup(signal: fn(&TwoWordEventCount, u64) -> bool, waiter_fenced: bool) -> bool {
        // Per call, not a static: the models that call this run in parallel.
        let missed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let m = missed.clone();
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(move || {
            let ec = Arc::new(TwoWordEventCount::new());
            let e2 = ec.clone();
            let w = thread::spawn(move || {
                let old = e2.value();
                let look = if waiter_fenced {
                    e2.announce_and_look::<true>(old)
                } else {
                    e2.announce_and_look::<false>(old)
                };
                (old, look.is_none())
            });
            let _p = ec.producer().unwrap();
            let woke = [signal(&ec, 1), signal(&ec, 2)];
            let (old, sleeps) = w.join().unwrap();
            if sleeps && old < 2 && !woke[old as usize..].iter().any(|&w| w) {
                m.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        });
        missed.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Both fences are needed, and they suffice: with the producer's or the waiter's fence
    /// removed loom finds an execution in which the waiter decides to sleep and no signal
    /// after its version wakes it; with both, none.
    #[test]
    fn two_word_fences_close_the_window() {
        assert!(
            !loses_a_wakeup(|ec, v| ec.publish::<true, true>(v), true),
            "the protocol lost a wake-up"
        );
        assert!(
            loses_a_wakeup(|ec, v| ec.publish::<true, false>(v), true),
            "no lost wake-up without the producer's fence: the model does not reach the window"
        );
        assert!(
            loses_a_wakeup(|ec, v| ec.publish::<true, true>(v), false),
            "no lost wake-up without the waiter's fence: the model does not reach the window"
        );
    }

    /// The order "clear, then increment" is needed: a producer that clears the flag after its
    /// increment (when its re-check finds it) erases the flag of a waiter that already read
    /// the new version, and loom finds that waiter asleep through the next signal.
    #[test]
    fn two_word_clear_after_the_increment_loses_a_wakeup() {
        assert!(
            loses_a_wakeup(|ec, v| ec.publish::<false, true>(v), true),
            "clearing after the increment lost no wake-up: the model does not reach the race"
        );
    }
}
