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
//! spin a little while version == v     // 128 polls; a sched_yield after one (which: learnt)
//!                                      // (single producer: at every poll, once learnt at 0)
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
//! With one producer the version needs no atomic read-modify-write, and the sleepers flag
//! need not share its word. [`SpEventCount`] keeps two words on two cache lines: the version
//! `V` (a `u64` only the producer writes, with plain stores of a value it keeps in a register)
//! and the sleepers word `S` (a `u32`): bit 0 is the flag F, set by waiters; bit 1 (M) a
//! waiter's request for fenced signals and bit 2 (A) the producer's acknowledgement of it
//! (fact 4 below); bits 3..32 count the producer's clears, so a waiter can tell that its
//! announcement was taken even if another waiter has set the flag again since.
//!
//! Signal (`add(d)`), with `local` the producer's own copy of the version:
//! ```text
//! local += d; store(V, local)          // mov: a release store on x86-TSO
//! s = load(S)                          // mov
//! if s & (F|M):                        // predictable branch
//!     if s & M:                        // fenced signals were asked for
//!         mfence; s = load(S)
//!         if s & (M|A) == M: cas(S, s, s|A)   // acknowledge, once
//!     if s & F:
//!         fetch_add(S, 7); futex_wake(S, all)  // clears F, keeps M and A, bumps the count
//! ```
//! Wait (`wait(v)`):
//! ```text
//! spin while V == v: 128 polls, or one look once spins go unanswered (below)
//! ask = F|M once spins go unanswered (the idle regime), else F (withdrawing a standing M|A)
//! loop:
//!     b = fetch_or(S, ask); s = b | ask  // lock or: announce, a full barrier
//!     if b has M and A: return Changed if V != v       // the producer fences: fact 4
//!     else (fresh announcement) a process-wide barrier (membarrier, or mprotect where that
//!         is unavailable); return Changed if V != v
//!     futex_wait(S, s, min(deadline, 1 s))    // the 1 s after a barrier: a backstop, fact 3
//!         (no IPI barrier here: naps of 4, 8, 16, … ms during the first second instead)
//!     return Changed if V != v; TimedOut if the deadline passed
//!     if S != s: the producer took our announcement (maybe an older waiter's), or a request
//!         was acknowledged or withdrawn: announce again
//! ```
//!
//! **The fast path** is a store, a load of a word that nobody writes while nobody waits (on a
//! cache line of its own, away from the version that readers poll), and a branch: no `lock`ed
//! instruction and no fence, and no dependency through memory from one signal to the next (the
//! version comes from a register), so its cost does not hinge on whether the core renames
//! memory. The earlier design (a non-`lock`ed `add [V], 2` with the flag in bit 0, then a test
//! of that bit) did: it cost about a plain increment on Zen 1 and several times one on
//! Sapphire and Emerald Rapids Xeons (the Xeon column of `docs/results.md`, and
//! `../shared/measurements`). The lab's `eventcount` experiment measures the signal against a
//! release store of the version on the machine at hand. The store and the load need no `lock`
//! because they touch different words: the producer never overwrites a flag.
//!
//! **The spin** is learnt per event count, outside the protocol (it only decides when to
//! announce). While spins get answered (a producer that signals within microseconds:
//! streaming, ping-pong) waiters poll 128 times before announcing; after 8 full spins in a
//! row went unanswered (a producer that signals once a millisecond: every wait ends asleep,
//! and the spin before it was CPU time thrown away) they poll 8 times. One answered spin
//! makes them full again, and so does a wait answered within 250 µs of its spin
//! (`SP_PROMPT`): a producer grown prompt again is noticed at its first answer, and two
//! threads handing off to each other, both asleep after a hiccup, do not each find its
//! partner asleep during every spin and sleep through every hand-off for good. A new
//! event count's first wait spins in full and decides alone: answered, the spins stay full;
//! not, they turn short at once. The same learnt state decides fenced signals (fact 4):
//! waiters whose spins go unanswered ask for them; a wait answered during its spin or within
//! `SP_PROMPT` withdraws the request, and so does a trusting waiter that finds it standing.
//! A thread whose signal has just woken a waiter (here, or on a multi-producer count made with
//! `EventCount::stretching`: the channels') *stretches* its next wait's spin through the
//! time that waiter takes to wake up and reply (learnt per process; see
//! `stretched_spin`): without it two threads handing off to each other, once
//! one of them slept, each found its partner asleep and slept in turn, and every hand-off
//! paid a wake-up. The lab's `rings` experiment measures both sides of the trade: the idle
//! consumer's CPU time, and ping-pong on two CPUs and on one, beside rtrb and the channels.
//!
//! **Why no wake-up is lost or late.** The producer's store to `V` and its load of `S` form
//! the store-buffering pattern: x86-TSO lets the load complete while the store still sits in
//! the store buffer, so a producer can miss a flag whose waiter, in turn, still reads the old
//! version. Three facts close the gap.
//! 1. The waiter's `lock or` is a full barrier, so its announcement is globally visible before
//!    it reads `V`; any producer load that executes afterwards sees the flag — until the
//!    producer clears it, which changes `S` for good (the clear count), so the waiter notices.
//! 2. A signal whose load missed the announcement executed its store to `V` before that load.
//!    Before it sleeps on a fresh announcement, the waiter issues a process-wide barrier
//!    (`membarrier`-expedited, or an `mprotect` TLB shoot-down where that is unavailable; see
//!    `SpEventCount::announcement_barrier`), then reads `V` again. Either interrupts
//!    every CPU that runs a thread of this process and returns only once each has run the
//!    handler, which executes a serialising instruction (a full barrier); a CPU that does not
//!    run one has passed a context switch, also a full barrier. The interrupt lands between
//!    two instructions of the producer: if its look at `S` came before, so did its store,
//!    which the handler's barrier makes visible to the waiter's read; if after, the look runs
//!    after the announcement and sees the flag by (1). The producer's `asm` load is the light
//!    side of this asymmetric fence (a compiler barrier), the waiter's barrier the heavy side.
//!    No signal can slip between them, so a waiter that sleeps is woken by the next signal's
//!    futex wake, never by a timeout: no wake-up is lost, and none is late.
//! 3. The barrier costs the waiter a system call only when it is about to sleep, which costs a
//!    futex sleep and wake anyway. The signal's fast path keeps its store, load and branch. A
//!    waiter that slept after its barrier still re-reads the version once a second: not part of
//!    the argument, a backstop should some platform's barrier stop interrupting CPUs (whose
//!    result would then show in [`SpEventCount::late_wakeups`] instead of as a waiter asleep
//!    for good).
//! 4. **Fenced signals.** A consumer whose producer signals once a millisecond sleeps before
//!    every message, and a barrier before each sleep would cost it (and the producer's CPU,
//!    which the barrier interrupts) more than the sleep itself. Such a waiter (its spins go
//!    unanswered) sets M with its announcement. A producer whose look finds M fences (`mfence`)
//!    and looks again, so against any announcement its store and second look form Dekker's
//!    pattern with a full barrier on both sides: the waiter reads the new version or the
//!    producer sees the flag. It sets A with a `lock`ed instruction the first time it sees M
//!    without A, which makes every version it stored before visible before A is. A waiter
//!    whose `fetch_or` returns M and A may sleep after one look at `V` and no barrier: every
//!    signal before the acknowledgement is visible (its store preceded A), and every later one
//!    sees M (the producer reads `S` at or after its own acknowledgement, by coherence) and is
//!    fenced — unless M was withdrawn since, and a value of `S` without M is newer than the
//!    withdrawal, hence than our flag, which only the producer's wake clears. So the request
//!    can be withdrawn at any time (an answered spin does, `fetch_and`; so does the SPSC
//!    ring's side that is about to wait itself, when no flag stands on the other side's
//!    count: its waiter has work), and a waiter that finds M without A takes the barrier as
//!    before; the next signal acknowledges. A request outlives its need only while the
//!    count's waiters stop waiting altogether: each signal pays the fence until one waits
//!    again and its spin is answered. The sleep arms no backstop: nothing here rests on how a
//!    platform delivers interrupts. While M stands, each signal costs an `mfence` and a second
//!    load (once acknowledged, no system call and no `lock`); a waiter of the idle regime
//!    sleeps at the cost of a futex wait, like a waiter on a `lock`ed word.
//!
//! Where the only process-wide barrier is `membarrier(GLOBAL)`, which waits for an RCU grace
//! period (milliseconds), the waiter does not issue it: it sleeps in naps of 4, 8, 16, … ms for
//! the first second after its announcement, re-reading `V` after each (and, before the first,
//! watches `V` for 2 µs: a store usually drains in well under one), and relies on the timer
//! interrupt (every CPU takes several a second, and each drains the store buffer: Paul Khuong,
//! "Preemption Is GC for Memory Reordering", 2019) to bound how late a wake-up can be: one
//! nap. [`SpEventCount::late_wakeups`] counts such wake-ups; with an IPI barrier it stays zero
//! (`tests/eventcount.rs` asserts it over a million bursts whose waiters arrive exactly at
//! burst ends). An earlier version relied on the watch and the naps alone, and on 2-vCPU KVM
//! guests that test saw a few late wake-ups per million such bursts.
//!
//! The futex sleeps on `S`, not `V`: the producer's clear changes `S`, so a waiter about to
//! sleep when the producer clears and wakes fails the kernel's comparison and returns instead
//! of sleeping on a flag nobody will see. One clear answers every waiter and wakes them all;
//! the producer's `lock`ed clear drains its store first, so a waiter that finds its
//! announcement taken finds the new version too — or, if the clear answered an older waiter's
//! flag, it announces again. A waiter that times out leaves the flag for the next signal to
//! clear: one wasted wake-up call. The clear count wraps at 2^29 (the low 3 bits are F, M and
//! A): a waiter would have to miss exactly that many clears between two looks. This relies on
//! interrupts: a core isolated with `nohz_full` running one thread may not take one for much
//! longer; use the multi-producer [`EventCount`] there.

//! **Orderings.** The version store is `Release` (the producer's earlier writes are visible to
//! a waiter that sees the version); the waiter's loads of `V` are `Acquire`. The producer's
//! load of `S` is an `asm` load, which the compiler can neither move above the store nor hoist
//! out of a loop of signals; x86 needs nothing more, by (2). Elsewhere (and under Miri) it is a
//! `SeqCst` fence and a load, and the waiter's `fetch_or` and load are `SeqCst`, which makes
//! the store-buffering outcome impossible by the memory model alone; there the waiter needs no
//! barrier and no naps. The loom models check the asymmetric version: the producer's look is
//! `fence::light()` and a load, the waiter's barrier `fence::heavy()`, both `SeqCst` fences
//! under loom, which loom orders against each other (`sp_window_closed_by_the_waiter_barrier`
//! shows that without the waiter's barrier both sides can miss). Fenced signals (fact 4): the
//! producer's fence is a `SeqCst` fence and its acknowledgement `Release` (`Relaxed` on
//! x86-64, whose `lock cmpxchg` drains the store buffer whatever Rust names, for the code
//! generation reason of the wake's clear); a waiter that relies on it reads the acknowledgement
//! with its `SeqCst` `fetch_or` and then issues a `SeqCst` fence before its look at `V`, which
//! x86 gets from the `lock`ed `fetch_or` itself. `sp_fenced_signals_close_the_window` checks the
//! words with the producer's first look unfenced (loom's `light()` is a fence, so the full
//! type's models cannot), and that each part is needed.
//!
//! **Linearisation points.** A signal: its store to `V`. A wait that returns `Changed`: the
//! load that observed the new version.
//!
//! **On AArch64** (and any target but x86-64) the producer's look at `S` is the `SeqCst` fence
//! and load above (`dmb ish` on AArch64), and the waiter's `SeqCst` announcement and loads
//! close the window by the memory model: correct with no barrier and no naps, at the price
//! of a fence per signal. [`TwoWordEventCount`] is the seed's two-word protocol with its own
//! C++-model argument and loom models; see its module.
//!
//! The single-producer contract is in the types: [`SpEventCount::producer`] hands out one
//! [`SpProducer`], which is neither `Clone` nor `Sync`; a second one is refused until the first
//! is dropped (the drop and the next hand-out synchronise through an atomic flag, so the next
//! producer starts from the last version). The version wraps at 2^64.

use std::cell::Cell;
use std::convert::Infallible;
use std::marker::PhantomData;

pub mod two_word;
pub use two_word::{TwoWordEventCount, TwoWordProducer};

use crate::futex::Parking;
use crate::primitives::{
    spin_loop, yield_now, AtomicBool, AtomicU32, AtomicU64, CachePadded, Ordering, Ordering::*,
};
use crate::time::Deadline;

/// Pause-loop iterations before a waiter flips the sleepers flag. What that takes depends on
/// the CPU's `pause` latency; the lab's "waiter still spinning" figures show its effect.
#[cfg(not(loom))]
const SPIN_BEFORE_FLAG: u32 = 128;
/// Halfway through that spin the waiter calls `sched_yield` once (a single-producer waiter
/// that has learnt to yield at once yields at every poll: see `SpEventCount::wait_until`): if
/// the thread it waits for shares its CPU (oversubscription, or both pinned to one CPU), the
/// yield lets it run now instead of after the waiter has gone through the futex (the lab's
/// one-CPU ping-pong in `rings`); otherwise it costs one system call that returns at once.
/// This is where the single-producer event count's waiters start; they learn to yield earlier
/// when the yield is what brought the version (`SpEventCount::wait_until`). The
/// multi-producer one's waiters learn it from how long their yields take, up to this
/// (`Core::wait`).
#[cfg(not(loom))]
const YIELD_AT: u32 = SPIN_BEFORE_FLAG / 2;
#[cfg(loom)]
const YIELD_AT: u32 = u32::MAX;

/// Yields the CPU (`sched_yield`) and says whether that let other threads run first: whether
/// it took more than [`GAVE_WAY`] times the fastest yield this process has seen, the cost of
/// the system call alone, and a microsecond more than that (a yield with nobody to give the
/// CPU to returns as soon as the system call does; one that gives way returns only after at
/// least two context switches; the microsecond keeps one unusually fast yield from making
/// ordinary ones look long). A yield that a hypervisor stretched reads as having given way:
/// for a multi-producer waiter, the next seven waits that reach their yield and find it quick
/// undo the lesson; for a single-producer one it counts only if the version moved right
/// after it.
fn yield_gave_way() -> bool {
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    static FASTEST_NS: AtomicU64 = AtomicU64::new(u64::MAX);
    let start = std::time::Instant::now();
    yield_now();
    let took = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
    let fastest = FASTEST_NS.load(Relaxed);
    if took < fastest {
        FASTEST_NS.fetch_min(took, Relaxed);
        return false;
    }
    took > fastest
        .saturating_mul(GAVE_WAY)
        .max(fastest.saturating_add(1_000))
}

/// How many times the fastest yield's duration a yield must take to count as having given the
/// CPU away (see [`yield_gave_way`]).
const GAVE_WAY: u64 = 3;

/// A multi-producer waiter's lesson from its yield at poll `yield_at` (see `Core::wait`):
/// yield at once after a yield that gave way, else twice as late, up to [`YIELD_AT`].
fn next_yield_at(yield_at: u32, gave_way: bool) -> u32 {
    if gave_way {
        0
    } else {
        yield_at.saturating_mul(2).saturating_add(1).min(YIELD_AT)
    }
}
/// Pause-loop iterations between the flag flip and the futex wait.
#[cfg(not(loom))]
const SPIN_AFTER_FLAG: u32 = 32;
// No spinning under loom: a spin iteration is a `yield_now` there, and loom deprioritises a
// thread that yields, which would hide exactly the interleavings the models are for.
#[cfg(loom)]
const SPIN_BEFORE_FLAG: u32 = 0;
#[cfg(loom)]
const SPIN_AFTER_FLAG: u32 = 0;

/// Full spins in a row that must go unanswered before a single-producer waiter stops spinning
/// (see `SpEventCount::wait_until`); any wait answered during a spin, or soon after it
/// (`SP_PROMPT`), makes its spins full again at once.
const SP_SPIN_TRUST: u32 = 8;

/// A single-producer wait that went past its spin but was answered within this long counts
/// as answered, and makes the next spins full again. Without it, two threads handing off to
/// each other could both lose trust during a hiccup (a preempted vCPU) and then stay asleep
/// for good: each one's partner is asleep too, so even a full spin (a few µs) ends
/// before the partner's futex wake-up and context switch answer it (the lab's `rings` wake
/// section measures that floor on each machine), and every hand-off pays a wake-up. A
/// producer that signals rarely — the case for not spinning — keeps its waiter asleep for
/// far longer (the lab's idle consumer: 1 ms).
#[cfg(not(loom))]
const SP_PROMPT: std::time::Duration = std::time::Duration::from_micros(250);
/// Zero under loom, whose spins are empty: a new event count's waiters then enter the idle
/// regime after their first wait and stay in it, so that the models explore fenced signals
/// (`sp_idle_regime_*` withdraw the request from another thread).
#[cfg(loom)]
const SP_PROMPT: std::time::Duration = std::time::Duration::ZERO;

/// The longest *stretched* spin (see `stretched_spin`), and the first one's
/// length, before any reply time has been measured.
#[cfg(not(loom))]
const STRETCH_MAX: std::time::Duration = std::time::Duration::from_micros(200);
/// Stretched spins that missed in a row, after which a thread stops stretching (it probes again
/// at every `STRETCH_PROBE`-th chance).
#[cfg(not(loom))]
const STRETCH_MISSES: u32 = 3;
#[cfg(not(loom))]
const STRETCH_PROBE: u32 = 32;

/// How long the replies to a stretched spin take (ns; 0 until the first): how long after its
/// start the version moved, up at once to a longer reply, down slowly (an eighth of the way)
/// to a shorter one, and doubled by a stretch that missed. A property of the machine (the
/// partner's wake-up latency, mostly), so one per process.
#[cfg(not(loom))]
static REPLY_NS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

#[cfg(not(loom))]
thread_local! {
    /// Set when this thread's signal woke a waiter of a single-producer count, or of a
    /// multi-producer count made with `EventCount::stretching`; its next wait on such a count
    /// stretches its spin (see `stretched_spin`).
    static WOKE_A_WAITER: Cell<bool> = const { Cell::new(false) };
    /// Stretched spins of this thread that missed in a row, and the chances skipped since.
    static STRETCH_MISSED: Cell<(u32, u32)> = const { Cell::new((0, 0)) };
}

/// **Stretched spins.** A thread whose signal just woke a waiter (its `WOKE_A_WAITER`) and
/// now waits itself is most likely waiting for that waiter's reply: a ping-pong, or a
/// producer the consumer woke after a full ring. The reply cannot come before the waiter's
/// wake-up and context switch (tens of microseconds in the guests measured: the lab's
/// `eventcount` and `rings` wake sections), far past a normal spin (`SPIN_BEFORE_FLAG`
/// polls, about a microsecond), so this thread would go to sleep as well, and the partner's
/// reply would have to wake it in turn: each hand-off then pays a wake-up, and the pair never
/// gets out of that regime, since neither is spinning when the other replies (the lab's
/// `rings` ping-pong on two CPUs, against rtrb, shows it).
/// Spinning once through the partner's wake-up breaks it: the reply finds this thread
/// awake, and its next message finds the partner still spinning after its reply.
///
/// The stretch lasts twice the replies measured in this process (`REPLY_NS`: the
/// machine's wake-up latency plus the partner's work; it follows a longer reply at once and
/// a shorter one slowly), at most `STRETCH_MAX`, which is also the first stretch's
/// length. A stretch that misses doubles the next (up to the maximum). A thread whose
/// stretched spins miss at the maximum `STRETCH_MISSES` times in a row (a pipeline
/// stage that wakes the next stage, then waits for a slow upstream) stops stretching, and
/// tries again at every `STRETCH_PROBE`-th chance. The stretch begins with a
/// `sched_yield`, for a partner that shares this CPU; with `share_cpu` it yields on every
/// poll, where a `pause` cannot bring the reply: a single-producer waiter passes what it has
/// learnt (`yield_at` 0: its partner shares its CPU), a multi-producer one its `yield_at` 0,
/// which means its yields gave the CPU away, or that none has been timed yet (a new
/// channel): a stretch that yields where pauses would do is late by one system call at
/// most, in a wait that covers a wake-up of tens of microseconds. Outside the protocol: the
/// waiter then waits as it would have. Both event counts stretch, the multi-producer one
/// where it was made with `EventCount::stretching` (the channels' sides, which fell into the
/// same regime; commit a3cb96a has the figures). `version` reads the count's version.
#[cfg(not(loom))]
#[cold]
fn stretched_spin(
    version: impl Fn() -> u64,
    old: u64,
    deadline: Option<Deadline>,
    share_cpu: bool,
) -> Option<u64> {
    if !WOKE_A_WAITER.replace(false) {
        return None;
    }
    let (missed, skipped) = STRETCH_MISSED.get();
    if missed >= STRETCH_MISSES {
        if skipped + 1 < STRETCH_PROBE {
            STRETCH_MISSED.set((missed, skipped + 1));
            return None;
        }
        STRETCH_MISSED.set((missed, 0));
    }
    let est = REPLY_NS.load(std::sync::atomic::Ordering::Relaxed);
    let max = STRETCH_MAX.as_nanos() as u64;
    let budget = if est == 0 { max } else { (2 * est).min(max) };
    // A partner on this CPU (both pinned to one, or oversubscribed) cannot reply while
    // this thread spins: let it run first (otherwise the call returns at once).
    yield_now();
    let start = Deadline::now();
    let mut i = 0u32;
    loop {
        let v = version();
        if v != old {
            // Up at once to a longer reply, down slowly: the stretch must cover the
            // slow replies (a partner asleep), not the mean of quick and slow ones.
            let took = Deadline::now().as_nanos().saturating_sub(start.as_nanos());
            let next = if est == 0 {
                took
            } else {
                took.max((7 * est + took) / 8)
            };
            REPLY_NS.store(next.max(1), std::sync::atomic::Ordering::Relaxed);
            STRETCH_MISSED.set((0, 0));
            return Some(v);
        }
        i = i.wrapping_add(1);
        if i % 64 == 0 || share_cpu {
            let now = Deadline::now();
            if deadline.is_some_and(|d| now >= d) {
                // The caller's deadline, not the partner's silence: no lesson.
                return None;
            }
            if now.as_nanos().saturating_sub(start.as_nanos()) >= budget {
                if budget < max {
                    // Too short for this machine's replies, perhaps: the next is twice
                    // as long (up to the maximum).
                    REPLY_NS.store(budget, std::sync::atomic::Ordering::Relaxed);
                } else {
                    let (missed, _) = STRETCH_MISSED.get();
                    STRETCH_MISSED.set((missed.saturating_add(1), 0));
                }
                return None;
            }
        }
        if share_cpu {
            yield_now();
        } else {
            spin_loop();
        }
    }
}

/// How long a single-producer waiter watches the version after announcing itself, for a
/// signal whose version store may still be in its producer's store buffer, where no barrier
/// closes that window (see "Why no wake-up is lost"). A store usually drains in well under a
/// microsecond.
const SP_DRAIN: std::time::Duration = std::time::Duration::from_micros(2);
/// For how long after an announcement a single-producer waiter sleeps in naps, re-reading the
/// version after each (see the module documentation). Zero under loom, whose producer is
/// atomic.
#[cfg(not(loom))]
const SP_FLAG_SETTLE: std::time::Duration = std::time::Duration::from_secs(1);
#[cfg(loom)]
const SP_FLAG_SETTLE: std::time::Duration = std::time::Duration::ZERO;
/// The longest a single-producer waiter sleeps without re-reading the version, where its
/// barrier closed the window (see `wait_until`).
const SP_BACKSTOP: std::time::Duration = std::time::Duration::from_secs(1);
/// The first nap of a single-producer waiter; each next one doubles.
const SP_FIRST_NAP: std::time::Duration = std::time::Duration::from_millis(4);

const FLAG: u64 = 1;
const VERSION_MASK: u64 = u64::MAX >> 1;

/// The single-producer sleepers word `S`: a waiter may be asleep (set by waiters, cleared by
/// the producer's wake).
const SP_FLAG: u32 = 1;
/// In `S`: a waiter in the idle regime asks the producer to fence between its version store
/// and its look at `S` (set by waiters, cleared when spins are answered again).
const SP_MODE: u32 = 2;
/// In `S`: the producer saw `SP_MODE` and fences every signal while it stands (set by the
/// producer, cleared with `SP_MODE`).
const SP_ACK: u32 = 4;
/// What the producer's wake adds to `S`: with `SP_FLAG` set, it clears the flag, keeps
/// `SP_MODE` and `SP_ACK`, and counts the clear in bits 3.. (1 + 7 = 8).
const SP_CLEAR: u32 = 7;
/// Whether waiters of the idle regime ask for fenced signals: where the producer's look at `S`
/// is not fenced by itself (x86-64, outside Miri), and under loom, which checks the protocol.
const FENCED_SIGNALS: bool = cfg!(any(loom, all(target_arch = "x86_64", not(miri))));
/// The ordering of the producer's acknowledgement: `Release` in the memory model (versions
/// stored before it are visible to a waiter that reads it). On x86-64 `Relaxed`, for the
/// reason the wake's clear is (see `SpEventCount::wake_sleepers`): the `lock cmpxchg` drains
/// the version stores before it whatever ordering Rust names, and a stronger one makes LLVM
/// reload the producer's state after it.
#[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
const ACK_ORDER: Ordering = Relaxed;
#[cfg(not(all(target_arch = "x86_64", not(loom), not(miri))))]
const ACK_ORDER: Ordering = Release;

/// The fence between a waiter's `lock`ed announcement and its look at `V` when it relies on
/// fenced signals: `SeqCst` in the memory model; on x86-64 the `lock`ed `fetch_or` is already a
/// full barrier, and only the compiler must keep the load after it.
#[inline(always)]
fn fence_after_announcement() {
    #[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
    std::sync::atomic::compiler_fence(SeqCst);
    #[cfg(not(all(target_arch = "x86_64", not(loom), not(miri))))]
    crate::primitives::fence(SeqCst);
}

/// How a single-producer waiter's announcement was made safe to sleep on (see the module
/// documentation, "Why no wake-up is lost or late").
#[derive(Clone, Copy, PartialEq, Eq)]
enum Window {
    /// No barrier was available: the waiter sleeps in naps for a while.
    Open,
    /// The waiter's process-wide barrier closed it (fact 2): a backstop timer stays armed.
    Barrier,
    /// The producer fences its signals and had acknowledged that (fact 4).
    Fenced,
}

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

/// The multi-producer event count's word, its futex handle, and when its waiters yield.
struct Core {
    word: AtomicU64,
    parking: Parking,
    /// The poll of its spin after which a waiter yields, learnt by the waiters (see
    /// [`Core::wait`]) and shared by all of them; a heuristic outside the protocol (a std
    /// atomic even under loom, where nothing spins). Beside `word`, which every wait reads
    /// anyway, and written only when it changes.
    yield_at: std::sync::atomic::AtomicU32,
    /// Whether a signal that wakes this count's sleepers makes the signaller's next wait a
    /// stretched spin (see `stretched_spin`): set for the channels' counts, where two threads
    /// hand off to each other; not for counts where a wake-up is answered by I/O (the
    /// write-ahead log's: its writers' throughput fell with stretched spins, which spun
    /// through fsyncs on CPUs the other writers needed; commit a3cb96a has the figures).
    /// Read only outside loom, where nothing spins.
    #[cfg_attr(loom, allow(dead_code))]
    stretch: bool,
}

impl Core {
    /// A word at version 0 whose waiters first yield after poll `yield_at`.
    #[cfg(not(loom))]
    const fn new(yield_at: u32, stretch: bool) -> Core {
        Core {
            word: AtomicU64::new(0),
            parking: Parking::new(),
            yield_at: std::sync::atomic::AtomicU32::new(yield_at),
            stretch,
        }
    }

    #[cfg(loom)]
    fn new(yield_at: u32, stretch: bool) -> Core {
        Core {
            word: AtomicU64::new(0),
            parking: Parking::new(),
            yield_at: std::sync::atomic::AtomicU32::new(yield_at),
            stretch,
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
    fn wait_for_change(&self, old: u64, deadline: Option<Deadline>) -> Result<u64, TimedOut> {
        match self.wait::<Infallible>(old, deadline, &mut |_| None) {
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
        #[cfg(not(loom))]
        if self.stretch {
            WOKE_A_WAITER.set(true);
        }
    }

    // Under loom the spin constants are 0 (see their definitions).
    #[cfg_attr(loom, allow(clippy::reversed_empty_ranges))]
    /// The waiter side of the multi-producer protocol.
    fn wait<T>(
        &self,
        old: u64,
        deadline: Option<Deadline>,
        pred: &mut dyn FnMut(&mut WaitState) -> Option<T>,
    ) -> Waited<T> {
        let old = old & VERSION_MASK;
        let idle = old << 1;
        let flagged = idle | FLAG;
        let version = |w: u64| w >> 1;

        // The spin yields once, after poll `yield_at`, which the waiters learn from how long
        // their yields take (`yield_gave_way`). A yield that gave the CPU to other threads
        // (more runnable threads than CPUs) makes the next waits yield at once, as kanal's
        // waiters always do; one that returned at once, nobody else wanting this CPU, makes
        // the next wait yield later (doubling, up to `YIELD_AT`), so that with CPUs to spare
        // the yield soon becomes one system call late in each spin that lasts that long.
        // Waits that end before the yield teach nothing. A new event count starts at 0 (yield
        // after the first poll; a `select!`'s context, which lives for one wait, starts at
        // `YIELD_AT`) and a yield that gave way goes back to 0 rather than halving: waits that
        // reach their yield are few (in the lab's `rings` MPMC section on a 2-CPU machine,
        // 8 threads, a new channel every run, a few per thousand messages), so a start at
        // `YIELD_AT` and halving left most waits spinning first, and the section measured
        // that slower than this rule (commit 80864b4 has the figures of each rule tried;
        // `docs/results.md` has the section's). The single-producer event count learns
        // from *where* in the spin the version moved instead; with several waiters that
        // misleads (two senders wait on a full channel, one yields to a receiver, and the
        // other sees the receiver's signal as an answer from another CPU). Whatever the
        // lesson, the spin has the same length and the protocol below follows.
        let yield_at = self.yield_at.load(std::sync::atomic::Ordering::Relaxed);
        // After waking a sleeper, a stretched spin (see `stretched_spin`).
        #[cfg(not(loom))]
        if self.stretch && WOKE_A_WAITER.get() {
            if let Some(v) = stretched_spin(
                || version(self.word.load(Acquire)),
                old,
                deadline,
                yield_at == 0,
            ) {
                return Waited::Changed(v);
            }
        }
        for i in 0..SPIN_BEFORE_FLAG {
            let w = self.word.load(Acquire);
            if version(w) != old {
                return Waited::Changed(version(w));
            }
            if i == yield_at {
                let at = next_yield_at(yield_at, yield_gave_way());
                if at != yield_at {
                    self.yield_at
                        .store(at, std::sync::atomic::Ordering::Relaxed);
                }
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
                continue;
            }

            self.parking
                .wait64_low(&self.word, flagged as u32, state.deadline);

            let w = self.word.load(Acquire);
            if version(w) != old {
                return Waited::Changed(version(w));
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
        EventCount {
            core: Core::new(0, false),
        }
    }

    /// A new event count at version 0.
    #[cfg(loom)]
    pub fn new() -> EventCount {
        EventCount {
            core: Core::new(0, false),
        }
    }

    /// A new event count whose waiters spin to the middle of their spin before their first
    /// yield, as a long-lived event count's do once its yields have returned at once: for
    /// one that lives for a single wait (a blocked `select!`'s context), which would
    /// otherwise start each wait yielding after its first poll and forget what it learnt.
    pub(crate) fn spinning_first() -> EventCount {
        EventCount {
            core: Core::new(YIELD_AT, false),
        }
    }

    /// A new event count at version 0 whose signals, when they wake a sleeper, make the
    /// signaller's next wait a stretched spin (see `stretched_spin`): for a channel's sides,
    /// where the woken thread's reply is what the signaller waits for next.
    pub(crate) fn stretching() -> EventCount {
        EventCount {
            core: Core::new(0, true),
        }
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
        self.core.wait_for_change(old, deadline)
    }

    /// Wait like [`wait`](Self::wait), calling `pred` before each sleep: it may stop the wait
    /// (returning `Some`) or move `state.deadline`.
    pub fn wait_until<T>(
        &self,
        old: u64,
        deadline: Option<Deadline>,
        mut pred: impl FnMut(&mut WaitState) -> Option<T>,
    ) -> Waited<T> {
        self.core.wait(old, deadline, &mut pred)
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

/// A single-producer event count: the producer's signal is a plain store and a load when
/// nobody sleeps. See the [module documentation](self) for the protocol and its reliance on
/// interrupts.
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
    /// `V`: written only by the producer. On a cache line of its own: readers poll it, and a
    /// producer load of `S` from a line that readers keep pulling away costs the producer
    /// about as much as the rest of a ring's push (measured: 7.7 against 3.5 ns per item when
    /// streaming through an SPSC ring on Zen 3).
    version: CachePadded<AtomicU64>,
    /// `S`: bit 0 (F) set while a waiter may be asleep, bit 1 (M) a request for fenced
    /// signals, bit 2 (A) the producer's acknowledgement, bits 3.. the producer's clears; the
    /// futex word.
    sleepers: AtomicU32,
    producer_taken: AtomicBool,
    parking: Parking,
    /// Late wake-ups ([`SpEventCount::late_wakeups`]): a diagnostic, not part of the protocol
    /// (a std atomic even under loom).
    late: std::sync::atomic::AtomicU64,
    /// Barriers waiters issued before sleeping ([`SpEventCount::waiter_barriers`]): a
    /// diagnostic like `late`.
    barriers: std::sync::atomic::AtomicU64,
    /// Sleeps that relied on fenced signals ([`SpEventCount::fenced_sleeps`]): a diagnostic.
    fenced: std::sync::atomic::AtomicU64,
    /// After how many polls of the spin a waiter yields (see `wait_until`; 0: at every poll): a
    /// heuristic the waiters learn, not part of the protocol (a std atomic even under loom).
    yield_at: std::sync::atomic::AtomicU32,
    /// Whether waiters spin in full or briefly (see `wait_until`), another learnt heuristic:
    /// the *trust*, `SP_SPIN_TRUST` after a spin that was answered, one less after each full
    /// spin that was not (spins are short at 0). Written only when it changes: with a prompt
    /// producer, never. A new event count starts at trust 1: its first wait spins in full,
    /// and decides (a producer that answers it earns the full trust at once).
    spin: std::sync::atomic::AtomicU32,
}

impl SpEventCount {
    /// A new event count at version 0, with its producer handle available.
    #[cfg(not(loom))]
    pub const fn new() -> SpEventCount {
        SpEventCount {
            version: CachePadded(AtomicU64::new(0)),
            sleepers: AtomicU32::new(0),
            producer_taken: AtomicBool::new(false),
            parking: Parking::new(),
            late: std::sync::atomic::AtomicU64::new(0),
            barriers: std::sync::atomic::AtomicU64::new(0),
            fenced: std::sync::atomic::AtomicU64::new(0),
            yield_at: std::sync::atomic::AtomicU32::new(YIELD_AT),
            spin: std::sync::atomic::AtomicU32::new(1),
        }
    }

    /// A new event count at version 0, with its producer handle available.
    #[cfg(loom)]
    pub fn new() -> SpEventCount {
        SpEventCount {
            version: CachePadded(AtomicU64::new(0)),
            sleepers: AtomicU32::new(0),
            producer_taken: AtomicBool::new(false),
            parking: Parking::new(),
            late: std::sync::atomic::AtomicU64::new(0),
            barriers: std::sync::atomic::AtomicU64::new(0),
            fenced: std::sync::atomic::AtomicU64::new(0),
            yield_at: std::sync::atomic::AtomicU32::new(YIELD_AT),
            spin: std::sync::atomic::AtomicU32::new(1),
        }
    }

    /// The producer handle, or `None` while another one exists.
    #[inline]
    pub fn producer(&self) -> Option<SpProducer<'_>> {
        self.producer_taken
            .compare_exchange(false, true, Acquire, Relaxed)
            .ok()
            .map(|_| SpProducer {
                ec: self,
                // The hand-out synchronised with the previous producer's drop.
                local: self.version.load(Relaxed),
                _not_sync: PhantomData,
            })
    }

    /// The current version (`Acquire`).
    #[inline]
    pub fn value(&self) -> u64 {
        self.version.load(Acquire)
    }

    /// Whether a waiter has announced that it may sleep.
    pub fn has_waiters(&self) -> bool {
        self.sleepers.load(Relaxed) & SP_FLAG != 0
    }

    /// How many waits on this event count found the version changed when a sleep of theirs
    /// ended at its timeout while their announcement still stood untaken: the signal came, but
    /// the producer did not see the announcement, and the waiter learnt of the new version only
    /// because its sleep timed out — a wake-up late by up to that sleep's length (a nap: 4 ms,
    /// then 8, …). Zero where the waiter's barrier closes the window (see the module
    /// documentation, fact 2: any system with `membarrier` or `mprotect`); the stress tests
    /// assert that it stays zero. Counted on the waiter's slow path only. (A timeout that
    /// coincides with the nanoseconds between a signal's version store and its look at the
    /// announcement counts too.) The multi-producer [`EventCount`] needs no such counter: its
    /// flag and version share one word that every signal changes with a `lock`ed instruction.
    pub fn late_wakeups(&self) -> u64 {
        self.late.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many process-wide barriers waiters on this event count issued before sleeping
    /// (see the module documentation, fact 2): what closing the store-buffering window cost.
    pub fn waiter_barriers(&self) -> u64 {
        self.barriers.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many times a waiter went to sleep with no barrier because the producer had
    /// acknowledged its request for fenced signals (see the module documentation, fact 4).
    pub fn fenced_sleeps(&self) -> u64 {
        self.fenced.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many of `max` polls a waiter may spend before it waits, by what the waiters have
    /// learnt (`wait_until`): none once their spins go unanswered (a producer that signals
    /// rarely: each wait ends asleep) or once they yield at once (their producer shares their
    /// CPU, where polling only delays it); else at most as many as they poll before yielding.
    pub(crate) fn polls_worth_spinning(&self, max: u32) -> u32 {
        if self.spin.load(std::sync::atomic::Ordering::Relaxed) == 0 {
            return 0;
        }
        max.min(self.yield_at.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Publish `new` as the version and wake any sleepers: the producer's signal.
    ///
    /// Crate-internal, for types that hold the producer role by construction (the SPSC
    /// ring's two sides): only one thread at a time may call it, and after the last call the
    /// role must be handed over with release/acquire synchronisation (as a thread join or an
    /// `Arc` does). Breaking that contract loses versions, never memory safety.
    #[inline]
    pub(crate) fn publish(&self, new: u64) {
        self.version.store(new, Release);
        let s = self.sleepers_after_store();
        if s & (SP_FLAG | SP_MODE) != 0 {
            self.signal_slow(s);
        }
    }

    /// The slow part of a signal, after a look at `S` that found `s`: a waiter announced
    /// itself, or asked for fenced signals (`SP_MODE`, see "Fenced signals" in the module
    /// documentation). Asked, the producer fences and looks again, which settles the
    /// store-buffering race with any waiter's announcement (Dekker: its `lock`ed announcement
    /// against our fence), and acknowledges the request once (`SP_ACK`). The acknowledgement is
    /// a `lock`ed instruction, so every version stored before it is visible before it is; and
    /// the producer's later looks at `S` read the acknowledged word or a newer one, so they see
    /// `SP_MODE` and fence as long as nobody has withdrawn the request.
    #[inline(always)]
    fn signal_slow(&self, mut s: u32) {
        if s & SP_MODE != 0 {
            s = self.sleepers_after_fence();
            if s & (SP_MODE | SP_ACK) == SP_MODE {
                s = match self
                    .sleepers
                    .compare_exchange(s, s | SP_ACK, ACK_ORDER, Relaxed)
                {
                    Ok(_) => s | SP_ACK,
                    // A waiter changed `S` meanwhile: the next signal acknowledges.
                    Err(now) => now,
                };
            }
        }
        if s & SP_FLAG != 0 {
            self.wake_sleepers();
        }
    }

    /// Withdraw a request for fenced signals if no waiter's flag stands: for a caller that
    /// knows nobody will wait on this count for a while (the SPSC ring's other side, when it
    /// is about to wait itself: the ring is full or empty, so this count's waiter has work).
    /// A request nobody needs any more would otherwise keep every signal fenced until a
    /// waiter's spin is answered again. Safe at any time (fact 4).
    pub(crate) fn withdraw_unneeded_request(&self) {
        let s = self.sleepers.load(Relaxed);
        if s & (SP_MODE | SP_FLAG) == SP_MODE {
            self.withdraw_fenced_signals();
        }
    }

    /// The producer's second look at `S`, after a full fence (fenced signals). On x86-64 one
    /// `asm` block, `mfence` and the load, for the reason of `sleepers_after_store`: it lets the
    /// compiler keep the producer's state in registers across the slow path.
    #[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
    #[inline(always)]
    fn sleepers_after_fence(&self) -> u32 {
        let s: u32;
        // SAFETY: as in `sleepers_after_store`; `mfence` touches no memory operand.
        unsafe {
            std::arch::asm!(
                "mfence",
                "mov {s:e}, dword ptr [{p}]",
                p = in(reg) self.sleepers.as_ptr(),
                s = out(reg) s,
                options(nostack, readonly, preserves_flags),
            );
        }
        s
    }

    #[cfg(not(all(target_arch = "x86_64", not(loom), not(miri))))]
    #[inline(always)]
    fn sleepers_after_fence(&self) -> u32 {
        crate::primitives::fence(SeqCst);
        self.sleepers.load(Relaxed)
    }

    /// The producer's load of `S`, after its store to `V`. On x86-64 an `asm` load: the
    /// compiler must emit it after the store (the asm may read any memory) and cannot hoist it
    /// out of a loop of signals, yet — unlike a compiler fence — it lets the compiler keep the
    /// producer's state in registers (`readonly`: the asm writes no memory). Elsewhere a
    /// `SeqCst` fence and a load (see the module documentation).
    #[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
    #[inline(always)]
    fn sleepers_after_store(&self) -> u32 {
        let s: u32;
        // SAFETY: `sleepers` is a live, aligned u32 for the borrow; an aligned 32-bit `mov` is
        // an atomic load on x86-64, and every other access to the word is atomic.
        unsafe {
            std::arch::asm!(
                "mov {s:e}, dword ptr [{p}]",
                p = in(reg) self.sleepers.as_ptr(),
                s = out(reg) s,
                options(nostack, readonly, preserves_flags),
            );
        }
        s
    }

    #[cfg(all(not(all(target_arch = "x86_64", not(miri))), not(loom)))]
    #[inline(always)]
    fn sleepers_after_store(&self) -> u32 {
        crate::primitives::fence(SeqCst);
        self.sleepers.load(Relaxed)
    }

    /// Under loom: [`fence::light`](crate::fence::light) (a `SeqCst` fence there) and a
    /// relaxed load, the x86 path's semantics in the model: the `asm` load is a compiler
    /// barrier, i.e. the light side of an asymmetric fence, and the waiter pays the heavy side
    /// ([`SpEventCount::settle`]). Loom orders two `SeqCst` fences; that is exactly what
    /// `membarrier` provides between the waiter's barrier and the producer's instruction
    /// stream.
    #[cfg(loom)]
    fn sleepers_after_store(&self) -> u32 {
        crate::fence::light();
        self.sleepers.load(Relaxed)
    }

    /// The wake of a signal: a waiter announced itself.
    ///
    /// Only the producer clears, and it saw the flag: adding `SP_CLEAR` clears it, keeps the
    /// fenced-signal bits and counts the clear (a waiter's `fetch_or` of a standing flag
    /// changes nothing). The clear must follow the
    /// version store (the module documentation's "the producer's `lock`ed clear drains its
    /// store first"): `Release` in the memory model.
    ///
    /// On x86-64 (not loom, not Miri) this is inline, with no call: a `lock xadd` and a raw
    /// `futex(FUTEX_WAKE_PRIVATE)` system call declared to write no memory. The compiler can
    /// then see that the slow path touches nothing but `S`, and keeps a ring's indices in
    /// registers across it: with an opaque call here, streaming through an SPSC ring cost 4.9
    /// instead of 3.9 ns per item on Zen 3. For the same reason the clear is `Relaxed`: LLVM
    /// takes any read-modify-write stronger than that to modify every escaped variable, and
    /// reloads them. The order the protocol needs still holds: the compiler keeps the clear
    /// after the version store (it depends on a branch on the `asm` load of `S`, which itself
    /// must follow the store, since it may read it), and keeps the wake after the clear (the
    /// `asm` may read `S`); the processor drains the version store before any `lock`ed
    /// instruction, whatever ordering Rust names. The flag it sets for stretched spins
    /// (`WOKE_A_WAITER`) is a store into this thread's TLS block, where no ring index lives.
    #[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
    #[inline(always)]
    fn wake_sleepers(&self) {
        self.sleepers.fetch_add(SP_CLEAR, Relaxed);
        crate::futex::wake_all_private_inline(&self.sleepers);
        WOKE_A_WAITER.set(true);
    }

    #[cfg(not(all(target_arch = "x86_64", not(loom), not(miri))))]
    #[cold]
    #[inline(never)]
    fn wake_sleepers(&self) {
        self.sleepers.fetch_add(SP_CLEAR, Release);
        self.parking.wake32(&self.sleepers, u32::MAX);
        #[cfg(not(loom))]
        WOKE_A_WAITER.set(true);
    }

    /// After an announcement that left `S` at `s`: the new version if it has moved past `old`,
    /// checked until no signal can still be in the producer's store buffer with its look at
    /// `S` already made (see "Why no wake-up is lost"); `None` if the waiter may
    /// sleep. With `watch` false (a barrier will close that window before the sleep, see
    /// [`settle`](Self::settle)) one look: watching would only spend the waiter's time.
    /// Under loom (an atomic producer, `SPIN_AFTER_FLAG` 0) one look.
    fn changed_since(&self, old: u64, s: u32, watch: bool) -> Option<u64> {
        if !watch {
            let v = self.version.load(SeqCst);
            return (v != old).then_some(v);
        }
        // A signal whose look at `S` comes after the announcement sees it. One whose look came
        // before it may still hold its version in the store buffer: watch the version for
        // `SP_DRAIN`, far longer than a store takes to drain, in time rather than in `pause`s
        // (a `pause` lasts a few cycles on some cores and a hundred and more on others).
        let start = std::time::Instant::now();
        let mut i = 0u32;
        loop {
            let v = self.version.load(Acquire);
            if v != old {
                return Some(v);
            }
            if self.sleepers.load(Relaxed) != s {
                break;
            }
            i += 1;
            if i >= SPIN_AFTER_FLAG && (cfg!(loom) || start.elapsed() >= SP_DRAIN) {
                break;
            }
            spin_loop();
        }
        let v = self.version.load(SeqCst);
        (v != old).then_some(v)
    }

    /// Before the first sleep on a fresh announcement that the watch did not answer: close
    /// the store-buffering window for good. A process-wide barrier (the heavy side of
    /// [`crate::fence`]) makes every CPU running this process execute a full barrier; a
    /// signal whose look at `S` missed our announcement executed its store to `V` before that
    /// look, so once the barrier returns the store is visible, and the load below sees it.
    /// Returns the new version if it moved, and whether the window is closed (then the waiter
    /// may sleep without naps: any signal from now on sees the flag, by fact 1).
    ///
    /// Only where the heavy fence is IPI-based (membarrier-expedited or mprotect): a
    /// membarrier-global barrier waits for an RCU grace period (milliseconds), more than the
    /// naps it would save, so there the waiter keeps the naps. Where the producer's look is a
    /// `SeqCst` fence and a load (not x86-64, or Miri), the memory model already forbids the
    /// window and no barrier is needed.
    fn settle(&self, old: u64) -> (Option<u64>, bool) {
        let closed = Self::barrier_after_announcement();
        if closed {
            self.barriers
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let v = self.version.load(SeqCst);
        ((v != old).then_some(v), closed)
    }

    /// The barrier a waiter issues before sleeping: membarrier-expedited, as
    /// [`crate::fence::heavy`] prefers, and the mprotect shoot-down where that is unavailable
    /// (`None` where neither works). Both interrupt every CPU running a thread of this
    /// process; membarrier interrupts no other CPU and costs one system call, where mprotect
    /// costs two, a lock and a page fault, and may interrupt CPUs the process ran on before.
    /// The lab's `rings` experiment measures what a sleeping waiter costs (its idle
    /// consumer), and its `eventcount` experiment the wake-up after such a barrier (`wake-sp`).
    #[cfg(all(target_arch = "x86_64", target_os = "linux", not(loom), not(miri)))]
    fn announcement_barrier() -> Option<crate::fence::Method> {
        use crate::fence::Method;
        static METHOD: std::sync::OnceLock<Option<Method>> = std::sync::OnceLock::new();
        *METHOD.get_or_init(|| {
            if crate::fence::heavy_method() == Method::MembarrierExpedited {
                Some(Method::MembarrierExpedited)
            } else if crate::fence::barrier(Method::Mprotect).is_ok() {
                Some(Method::Mprotect)
            } else {
                None
            }
        })
    }

    /// Settles now which barrier a sleeping waiter will issue, and issues it once. The first
    /// `membarrier` of a process registers it (`MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED`),
    /// which waits for an RCU grace period when the process already has threads: several
    /// milliseconds, which the first wait to sleep would otherwise pay. A ring calls this when
    /// it is made (see `spsc::ring`); elsewhere a no-op.
    pub(crate) fn prepare_barrier() {
        #[cfg(all(target_arch = "x86_64", target_os = "linux", not(loom), not(miri)))]
        let _ = Self::announcement_barrier();
    }

    /// Whether [`settle`](Self::settle) will close the store-buffering window (a barrier is
    /// available, or the producer's look needs none): then the waiter need not watch the
    /// version after announcing itself.
    #[cfg(all(target_arch = "x86_64", target_os = "linux", not(loom), not(miri)))]
    fn window_closes() -> bool {
        Self::announcement_barrier().is_some()
    }

    #[cfg(not(all(target_arch = "x86_64", target_os = "linux", not(loom), not(miri))))]
    fn window_closes() -> bool {
        cfg!(loom) || !cfg!(all(target_arch = "x86_64", not(miri)))
    }

    /// Issues the barrier of [`announcement_barrier`](Self::announcement_barrier); returns
    /// whether there was one.
    #[cfg(all(target_arch = "x86_64", target_os = "linux", not(loom), not(miri)))]
    fn barrier_after_announcement() -> bool {
        use crate::fence::Method;
        match Self::announcement_barrier() {
            Some(Method::Mprotect) => {
                // A failure now (a seccomp filter installed since) falls back to the next.
                if crate::fence::barrier(Method::Mprotect).is_err() {
                    crate::fence::heavy();
                }
                true
            }
            Some(_) => {
                crate::fence::heavy();
                true
            }
            None => false,
        }
    }

    #[cfg(loom)]
    fn barrier_after_announcement() -> bool {
        crate::fence::heavy();
        true
    }

    /// Elsewhere the producer's look is a `SeqCst` fence and a load, and the memory model
    /// already closes the window — except on x86-64 outside Linux (not Miri), whose look is the
    /// `asm` load and which has no process-wide barrier here: there the waiter keeps the naps.
    /// Where it closes, the waiter still issues a `SeqCst` fence (a `dmb ish` on AArch64,
    /// before a sleep that costs a system call anyway): its `SeqCst` announcement and load
    /// already suffice in the C++ model, and the fence makes this path exactly what the loom
    /// models check (their `fence::heavy()` is a `SeqCst` fence; loom models `SeqCst` accesses
    /// only as acquire/release).
    #[cfg(not(any(
        all(target_arch = "x86_64", target_os = "linux", not(loom), not(miri)),
        loom
    )))]
    fn barrier_after_announcement() -> bool {
        let closes = !cfg!(all(target_arch = "x86_64", not(miri)));
        if closes {
            crate::primitives::fence(SeqCst);
        }
        closes
    }

    /// Spins are answered again: trust them, and withdraw any request for fenced signals.
    fn trust_spins(&self) {
        self.spin
            .store(SP_SPIN_TRUST, std::sync::atomic::Ordering::Relaxed);
        if self.sleepers.load(Relaxed) & SP_MODE != 0 {
            self.withdraw_fenced_signals();
        }
    }

    /// Withdraw the request for fenced signals and its acknowledgement: the producer's signals
    /// return to a store, a load and a branch. Safe at any time: a sleeping waiter that relied
    /// on the acknowledgement announced itself before this, so the producer's next look finds
    /// its flag either way (see "Fenced signals" in the module documentation).
    #[cold]
    fn withdraw_fenced_signals(&self) {
        self.sleepers.fetch_and(!(SP_MODE | SP_ACK), Relaxed);
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

    // Under loom the spin constants are 0 (see their definitions).
    #[cfg_attr(loom, allow(clippy::reversed_empty_ranges))]
    /// Wait like [`wait`](Self::wait), calling `pred` before each sleep: it may stop the wait
    /// or move `state.deadline`.
    pub fn wait_until<T>(
        &self,
        old: u64,
        deadline: Option<Deadline>,
        mut pred: impl FnMut(&mut WaitState) -> Option<T>,
    ) -> Waited<T> {
        // The spin pauses for `yield_at` polls, which the waiters learn, then yields: once,
        // or, at `yield_at` 0, at every poll (for at most `SP_PROMPT`; see below). When the
        // version moves at the first poll after the (first) yield, the producer ran on this
        // CPU (oversubscribed, or both pinned to one CPU), and the polls before the yield
        // only delayed it, so the next wait yields earlier (halving, down to yielding at
        // once: a one-CPU hand-off is then two yields); also when, yielding at once, it moves
        // right after a later yield that gave the CPU away. When it moves at any other poll,
        // before the yield or well after it, the yield did not bring it, and the next wait
        // yields later (up to `YIELD_AT`). A heuristic: whatever it learns, the protocol below
        // follows.
        //
        // The flag is looked at here, so that a wait with nothing to stretch makes no call:
        // a one-CPU hand-off pays for every instruction of its wait.
        let yield_at = self.yield_at.load(std::sync::atomic::Ordering::Relaxed);
        #[cfg(not(loom))]
        if WOKE_A_WAITER.get() {
            if let Some(v) =
                stretched_spin(|| self.version.load(Acquire), old, deadline, yield_at == 0)
            {
                if self.spin.load(std::sync::atomic::Ordering::Relaxed) != SP_SPIN_TRUST {
                    self.trust_spins();
                }
                return Waited::Changed(v);
            }
        }
        let learn = |at: u32| {
            if at != yield_at {
                self.yield_at
                    .store(at, std::sync::atomic::Ordering::Relaxed);
            }
        };
        // The spin, also learnt: in full while spins get answered (a prompt producer:
        // streaming, ping-pong), none once `SP_SPIN_TRUST` full spins in a row went
        // unanswered (a producer that signals rarely: each wait ends in a sleep, and a spin
        // before it is CPU time thrown away — even the eight polls this once kept put the
        // lab's idle consumer above std's `sync_channel`, section `idle` of `rings`). A
        // producer that has become prompt again answers a wait within `SP_PROMPT`, which
        // makes the spins full again. Like `yield_at`, a heuristic outside the protocol.
        let spin = self.spin.load(std::sync::atomic::Ordering::Relaxed);
        let full = spin > 0;
        if !full {
            // One look, as the first poll of a spin: a version that moved before the wait
            // began returns at once, teaching nothing (not an answer within `SP_PROMPT`) and
            // leaving no announcement behind.
            let v = self.version.load(Acquire);
            if v != old {
                return Waited::Changed(v);
            }
        }
        let polls = if full { SPIN_BEFORE_FLAG } else { 0 };
        // Yielding at once: whether the last yield gave the CPU away, and when the second
        // began.
        let mut gave_way = false;
        let mut yielding_since = None;
        for i in 0..polls {
            let v = self.version.load(Acquire);
            if v != old {
                // At the first poll the version had moved before the wait began: no lesson.
                if i > 0 {
                    if i == yield_at.saturating_add(1) || gave_way {
                        learn(yield_at / 2);
                    } else {
                        learn(yield_at.saturating_mul(2).saturating_add(1).min(YIELD_AT));
                    }
                    if spin != SP_SPIN_TRUST {
                        self.trust_spins();
                    }
                }
                return Waited::Changed(v);
            }
            if i == yield_at {
                yield_now();
            } else if yield_at == 0 {
                // Yielding at once: the partner shares this CPU, where a `pause` cannot bring
                // its reply and only keeps it from running. When the first yield did not bring
                // it either (the scheduler ran this thread again first: a partner just woken
                // may not be due yet), every poll yields, and an answer right after a yield
                // that gave the CPU away (timed, see `yield_gave_way`) keeps the lesson; one
                // after a yield that returned at once (the partner runs on another CPU, and is
                // slow) teaches to yield later, as a pause did. Pausing there put the lab's
                // one-CPU ping-pong (`rings`, `pingpong1`) into a regime where the spin ran
                // out and about one hand-off in twenty slept on the futex, a quarter slower,
                // in about a third of the runs (commit f105c34 has the figures). Each yield
                // may give the CPU to another thread for a whole time slice, so these yields
                // stop after `SP_PROMPT` or at the deadline, and the wait goes on below.
                let now = Deadline::now();
                let since = *yielding_since.get_or_insert(now);
                if now.as_nanos().saturating_sub(since.as_nanos()) >= SP_PROMPT.as_nanos() as u64
                    || deadline.is_some_and(|d| now >= d)
                {
                    break;
                }
                gave_way = yield_gave_way();
            } else {
                spin_loop();
            }
        }
        // Unanswered: a full spin costs one unit of trust.
        let next = spin.saturating_sub(1);
        if next != spin {
            self.spin.store(next, std::sync::atomic::Ordering::Relaxed);
        }
        // Spins go unanswered (the idle regime): ask the producer for fenced signals, so that
        // an announcement it has acknowledged needs no barrier before the sleep.
        let ask = if next == 0 && FENCED_SIGNALS {
            SP_FLAG | SP_MODE
        } else {
            SP_FLAG
        };

        let mut state = WaitState {
            started: Deadline::now(),
            deadline,
            iteration: 0,
        };
        // The version moved after the spin: if promptly (`SP_PROMPT`), trust spins again.
        let started = state.started;
        let answered = |v: u64| {
            let waited = Deadline::now()
                .as_nanos()
                .saturating_sub(started.as_nanos());
            if waited < SP_PROMPT.as_nanos() as u64
                && self.spin.load(std::sync::atomic::Ordering::Relaxed) != SP_SPIN_TRUST
            {
                self.trust_spins();
            }
            Waited::Changed(v)
        };
        // Our standing announcement: when it was made, the value of `S` it left, and how its
        // window was closed (None: not made, or taken by the producer); and the next nap.
        let mut announced: Option<(Deadline, u32, Window)> = None;
        let mut nap = SP_FIRST_NAP;
        loop {
            if let Some(t) = pred(&mut state) {
                return Waited::Stopped(t);
            }
            state.iteration = state.iteration.wrapping_add(1);
            if state.deadline.is_some_and(Deadline::has_passed) {
                return Waited::TimedOut;
            }

            let (since, s, window) = match announced {
                Some(a) => a,
                None => {
                    if ask == SP_FLAG && self.sleepers.load(Relaxed) & SP_MODE != 0 {
                        // A request left by a waiter of the idle regime, which has ended.
                        self.withdraw_fenced_signals();
                    }
                    let before = self.sleepers.fetch_or(ask, SeqCst);
                    let s = before | ask;
                    let window = if before & (SP_MODE | SP_ACK) == SP_MODE | SP_ACK {
                        // The producer fences its signals (fact 4): one look after our
                        // `lock`ed announcement settles the race.
                        fence_after_announcement();
                        let v = self.version.load(SeqCst);
                        if v != old {
                            return answered(v);
                        }
                        self.fenced
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        Window::Fenced
                    } else {
                        if let Some(v) = self.changed_since(old, s, !Self::window_closes()) {
                            return answered(v);
                        }
                        let (changed, closed) = self.settle(old);
                        if let Some(v) = changed {
                            return answered(v);
                        }
                        if closed {
                            Window::Barrier
                        } else {
                            Window::Open
                        }
                    };
                    nap = SP_FIRST_NAP;
                    // Only naps need the time of the announcement (a clock read saved on the
                    // fenced path, which a consumer of the idle regime takes per message).
                    let since = if window == Window::Open {
                        Deadline::now()
                    } else {
                        state.started
                    };
                    *announced.insert((since, s, window))
                }
            };

            let mut sleep_until = state.deadline;
            let mut wake_at = |wake: Deadline| {
                sleep_until = Some(sleep_until.map_or(wake, |d| d.min(wake)));
            };
            match window {
                Window::Open => {
                    let now = Deadline::now();
                    if now < since.saturating_add(SP_FLAG_SETTLE) {
                        wake_at(now.saturating_add(nap));
                        nap = nap.saturating_mul(2);
                    }
                }
                // A backstop, not part of the argument: should a platform's barrier ever fail
                // to interrupt the producer's CPU (a TLB flush that stops needing interrupts,
                // as AMD's INVLPGB did), a waiter re-reads the version once a second instead
                // of sleeping through the signal for good, and `late_wakeups` shows it.
                Window::Barrier if !cfg!(loom) => {
                    wake_at(Deadline::now().saturating_add(SP_BACKSTOP))
                }
                // A window the producer's fence closed rests on no such platform behaviour: no
                // timer, and no clock read.
                Window::Barrier | Window::Fenced => {}
            }
            self.parking.wait32(&self.sleepers, s, sleep_until);

            let v = self.version.load(Acquire);
            if v != old {
                if sleep_until.is_some_and(Deadline::has_passed) && self.sleepers.load(Relaxed) == s
                {
                    self.late.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                return answered(v);
            }
            if self.sleepers.load(Relaxed) != s {
                // The producer took the announcement (for an older waiter's version, or its
                // store is about to be seen): announce again.
                announced = None;
            }
        }
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
    /// The version, which only this handle writes.
    local: u64,
    /// `Cell<()>` is `Send` but not `Sync`.
    _not_sync: PhantomData<Cell<()>>,
}

impl SpProducer<'_> {
    /// Advance the version by one and wake any sleepers; returns the previous version.
    #[inline]
    pub fn increment(&mut self) -> u64 {
        self.add(1)
    }

    /// Advance the version by `delta` (modulo 2^64) and wake any sleepers; returns the
    /// previous version. With no sleeper: one plain store, one load and a predictable branch.
    #[inline]
    pub fn add(&mut self, delta: u64) -> u64 {
        let old = self.local;
        self.local = old.wrapping_add(delta);
        self.ec.publish(self.local);
        old
    }

    /// The event count this producer signals.
    pub fn event_count(&self) -> &SpEventCount {
        self.ec
    }
}

impl Drop for SpProducer<'_> {
    #[inline]
    fn drop(&mut self) {
        // Release: the next producer's Acquire hand-out sees every version we wrote.
        self.ec.producer_taken.store(false, Release);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;
    use std::time::Duration;

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
        assert_eq!(p.add(41), 1);
        assert_eq!(sp.value(), 42);
        p.add(u64::MAX - 42);
        assert_eq!(sp.value(), u64::MAX);
        assert_eq!(p.increment(), u64::MAX);
        assert_eq!(sp.value(), 0, "the version wraps at 2^64");
        assert!(!sp.has_waiters());
        drop(p);
        let mut p = sp.producer().unwrap();
        assert_eq!(
            p.increment(),
            0,
            "the next producer starts from the last version"
        );
    }

    #[test]
    fn producer_signal_takes_the_announcement_and_counts_the_clear() {
        let sp = SpEventCount::new();
        let mut p = sp.producer().unwrap();
        assert_eq!(p.increment(), 0);
        assert_eq!(sp.sleepers.load(Relaxed), 0, "no waiter, nothing cleared");
        // What a waiter's announcement leaves: the flag on clear count 0.
        sp.sleepers.fetch_or(SP_FLAG, SeqCst);
        assert!(sp.has_waiters());
        assert_eq!(p.add(2), 1);
        assert_eq!(
            sp.sleepers.load(Relaxed),
            8,
            "flag cleared, one clear counted (bits 3..)"
        );
        assert!(!sp.has_waiters());
        p.increment();
        assert_eq!(sp.sleepers.load(Relaxed), 8, "no flag, no clear");
        assert_eq!(sp.value(), 4);
    }

    #[test]
    fn producer_acknowledges_a_request_for_fenced_signals_and_keeps_it() {
        let sp = SpEventCount::new();
        let mut p = sp.producer().unwrap();
        // A waiter of the idle regime asks, and announces itself.
        sp.sleepers.fetch_or(SP_FLAG | SP_MODE, SeqCst);
        p.increment();
        assert_eq!(
            sp.sleepers.load(Relaxed),
            8 | SP_MODE | SP_ACK,
            "acknowledged, flag cleared and counted, request kept"
        );
        p.increment();
        assert_eq!(
            sp.sleepers.load(Relaxed),
            8 | SP_MODE | SP_ACK,
            "no flag: nothing changes"
        );
        // A side about to wait withdraws a request only if no flag stands.
        sp.sleepers.fetch_or(SP_FLAG, SeqCst);
        sp.withdraw_unneeded_request();
        assert_eq!(
            sp.sleepers.load(Relaxed),
            8 | SP_FLAG | SP_MODE | SP_ACK,
            "a flag stands"
        );
        p.increment();
        assert_eq!(sp.sleepers.load(Relaxed), 16 | SP_MODE | SP_ACK);
        sp.withdraw_unneeded_request();
        assert_eq!(sp.sleepers.load(Relaxed), 16, "no flag: withdrawn");
        // Asked again, and withdrawn by a waiter.
        sp.sleepers.fetch_or(SP_MODE, SeqCst);
        p.increment();
        assert_eq!(sp.sleepers.load(Relaxed), 16 | SP_MODE | SP_ACK);
        sp.withdraw_fenced_signals();
        assert_eq!(
            sp.sleepers.load(Relaxed),
            16,
            "withdrawn with its acknowledgement"
        );
        p.increment();
        assert_eq!(
            sp.sleepers.load(Relaxed),
            16,
            "no request, no acknowledgement"
        );
    }

    /// The multi-producer spin's yield point: back to "at once" after a yield that gave the
    /// CPU away, from anywhere; after a yield that returned at once, 0 → 1 → 3 → … up to
    /// `YIELD_AT` in seven steps, and no further.
    #[cfg(not(loom))]
    #[test]
    fn the_yield_point_restarts_at_once_and_backs_off_by_doubling() {
        assert_eq!(next_yield_at(YIELD_AT, true), 0);
        assert_eq!(next_yield_at(5, true), 0);
        let mut at = 0;
        let mut steps = 0;
        while at < YIELD_AT {
            at = next_yield_at(at, false);
            steps += 1;
        }
        assert_eq!((at, steps), (YIELD_AT, 7));
        assert_eq!(next_yield_at(YIELD_AT, false), YIELD_AT);
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
        // Long enough for the spin to end before the deadline (under Miri too), so that the
        // waiter gets to announce itself.
        let wait = Duration::from_millis(if cfg!(miri) { 2000 } else { 50 });
        let ec = EventCount::new();
        let d = Deadline::after(wait);
        assert_eq!(ec.wait(0, Some(d)), Err(TimedOut));
        assert!(d.has_passed());
        assert!(ec.has_waiters(), "a timed-out waiter leaves the flag set");
        ec.increment();
        assert!(!ec.has_waiters(), "the signal that saw the flag clears it");

        let sp = SpEventCount::new();
        let d = Deadline::after(wait);
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
        // A predicate that wants to be called periodically keeps a short deadline ahead (long
        // enough that it has not passed by the check after the call, also under emulation).
        let r = ec.wait_until(0, None, |s| {
            s.deadline = Some(Deadline::after(Duration::from_millis(20)));
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
        // The single producer's first nap ends at the moved deadline and calls the predicate
        // again, which sees the deadline it moved, not the one the wait began with.
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

    /// The single-producer window at a burst's end: the producer publishes a burst of two
    /// versions (store, look at `S`) while a waiter that read the first version announces
    /// itself. Whatever the interleaving, the waiter returns with a newer version, woken by a
    /// signal (a sleep through the signal is a loom deadlock: under loom a sleep with no
    /// deadline ends only by a wake), and no wake-up is counted late.
    #[test]
    fn sp_window_at_a_burst_end() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(|| {
            let ec = Arc::new(SpEventCount::new());
            let mut p = ec.producer().unwrap();
            p.increment();
            let e2 = ec.clone();
            let w = thread::spawn(move || e2.wait(1, None));
            p.increment();
            p.increment();
            let got = w.join().unwrap().unwrap();
            assert!(got == 2 || got == 3, "woke with {got}");
            assert_eq!(ec.late_wakeups(), 0);
        });
    }

    /// The window itself, on the words: the producer stores `V` and looks at `S` after
    /// `fence::light()`; the waiter announces with a `SeqCst` `fetch_or`, optionally issues
    /// `fence::heavy()`, and reads `V`. Returns whether some execution had both miss: the
    /// producer saw no flag and the waiter the old version (a waiter that would then sleep
    /// through the signal).
    fn window_open(waiter_barrier: bool) -> bool {
        use loom::sync::atomic::{AtomicU32, AtomicU64};
        static MISSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        MISSED.store(false, std::sync::atomic::Ordering::Relaxed);
        loom::model(move || {
            let words = Arc::new((AtomicU64::new(0), AtomicU32::new(0)));
            let w = words.clone();
            let waiter = thread::spawn(move || {
                w.1.fetch_or(1, SeqCst);
                if waiter_barrier {
                    crate::fence::heavy();
                }
                w.0.load(SeqCst)
            });
            words.0.store(1, Release);
            crate::fence::light();
            let flag = words.1.load(Relaxed) & 1 != 0;
            let version = waiter.join().unwrap();
            if !flag && version == 0 {
                MISSED.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        });
        MISSED.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// With the waiter's barrier no execution has both sides miss (what `settle` relies on);
    /// without it loom finds one, so the model does reach the window.
    #[test]
    fn sp_window_closed_by_the_waiter_barrier() {
        assert!(!window_open(true), "the barrier left the window open");
        assert!(
            window_open(false),
            "loom found no execution with the window open: the model does not reach it"
        );
    }

    /// Fenced signals (fact 4) on the words, with the producer's first look at `S` unfenced, as
    /// the x86 `asm` load is (loom's `fence::light()` is a fence, which would hide the window).
    /// `S` starts clear; a requester thread sets M (an earlier waiter of the idle regime); the
    /// waiter reads `old`, announces F|M, and relies on the producer's fences if its
    /// `fetch_or` returned M and A (or, as a mutant, M alone), then fences and reads `V`; the
    /// producer signals versions 1 and 2, fencing and acknowledging when it sees M (or, as a
    /// mutant, acknowledging without fencing); a withdrawer may clear M and A at any time.
    /// Returns whether some execution had a relying waiter read `old` again while no signal
    /// after `old` saw its flag: a waiter that would sleep through the signal. (The producer
    /// does not clear F here, so that a wake for an older version hides nothing.)
    fn fenced_signals_miss(producer_fences: bool, waiter_needs_ack: bool, withdraw: bool) -> bool {
        use loom::sync::atomic::{AtomicU32, AtomicU64};
        static MISSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        MISSED.store(false, std::sync::atomic::Ordering::Relaxed);
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(move || {
            let words = Arc::new((AtomicU64::new(0), AtomicU32::new(0)));
            let r = words.clone();
            let requester = thread::spawn(move || {
                r.1.fetch_or(SP_MODE, Relaxed);
            });
            let withdrawer = withdraw.then(|| {
                let w = words.clone();
                thread::spawn(move || {
                    w.1.fetch_and(!(SP_MODE | SP_ACK), Relaxed);
                })
            });
            let w = words.clone();
            let waiter = thread::spawn(move || {
                let old = w.0.load(Acquire);
                let before = w.1.fetch_or(SP_FLAG | SP_MODE, SeqCst);
                let relies = if waiter_needs_ack {
                    before & (SP_MODE | SP_ACK) == SP_MODE | SP_ACK
                } else {
                    before & SP_MODE != 0
                };
                crate::primitives::fence(SeqCst);
                (old, relies, w.0.load(SeqCst))
            });
            let mut flag_seen_at = 0;
            for version in 1..=2u64 {
                words.0.store(version, Release);
                let mut s = words.1.load(Relaxed);
                if s & SP_MODE != 0 {
                    if producer_fences {
                        crate::primitives::fence(SeqCst);
                        s = words.1.load(Relaxed);
                    }
                    if s & (SP_MODE | SP_ACK) == SP_MODE {
                        s = match words.1.compare_exchange(s, s | SP_ACK, Release, Relaxed) {
                            Ok(_) => s | SP_ACK,
                            Err(now) => now,
                        };
                    }
                }
                if s & SP_FLAG != 0 {
                    flag_seen_at = version;
                }
            }
            let (old, relies, v) = waiter.join().unwrap();
            requester.join().unwrap();
            if let Some(w) = withdrawer {
                w.join().unwrap();
            }
            if relies && v == old && old < 2 && flag_seen_at <= old {
                MISSED.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        });
        MISSED.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Fenced signals close the window, also when the request is withdrawn meanwhile; and
    /// both halves are needed: without the producer's fence, or with a waiter that relies on
    /// the request before the producer has acknowledged it, loom finds a waiter that sleeps
    /// through the signal.
    #[test]
    fn sp_fenced_signals_close_the_window() {
        assert!(
            !fenced_signals_miss(true, true, false),
            "fenced signals missed a waiter"
        );
        assert!(
            !fenced_signals_miss(true, true, true),
            "fenced signals missed a waiter when the request was withdrawn"
        );
        assert!(
            fenced_signals_miss(false, true, false),
            "an unfenced producer missed nobody: the model does not reach the window"
        );
        assert!(
            fenced_signals_miss(true, false, false),
            "a waiter relying on an unacknowledged request missed nothing: the model does not \
             reach the window"
        );
    }

    /// The full type in the idle regime (its waiter asks for fenced signals from its first
    /// wait on, see `SP_PROMPT`): a waiter that follows three versions, while another thread
    /// withdraws the request at some point (as a waiter whose spin was answered does). Under
    /// loom the producer's look is fenced anyway; this checks the rest: the acknowledgement
    /// and the withdrawal change `S` under a waiter about to sleep, which must announce again,
    /// not sleep on a stale value or return early.
    #[test]
    fn sp_idle_regime_waiter_follows_versions() {
        static FENCED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(2);
        b.check(|| {
            let ec = Arc::new(SpEventCount::new());
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
            let e3 = ec.clone();
            let withdrawer = thread::spawn(move || e3.withdraw_fenced_signals());
            let mut p = ec.producer().unwrap();
            for _ in 0..3 {
                p.increment();
            }
            drop(p);
            withdrawer.join().unwrap();
            assert_eq!(w.join().unwrap(), 3);
            assert_eq!(ec.late_wakeups(), 0);
            if ec.fenced_sleeps() > 0 {
                FENCED.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        });
        assert!(
            FENCED.load(std::sync::atomic::Ordering::Relaxed),
            "no execution slept on fenced signals: the model does not reach them"
        );
    }

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
    /// signals published one after another, a waiter that follows each version. Under loom a
    /// new count's waiters enter the idle regime after their first wait (see `SP_PROMPT`).
    #[test]
    fn sp_waiter_follows_versions() {
        waiter_follows_versions(None, 0);
    }

    /// The same in the trusting regime (spins stay full, so announcements set F alone, the
    /// only kind off x86-64), and with a request for fenced signals left standing, which the
    /// trusting waiter withdraws before it announces.
    #[test]
    fn sp_trusting_waiter_follows_versions() {
        waiter_follows_versions(Some(u32::MAX), 0);
        waiter_follows_versions(Some(u32::MAX), SP_MODE | SP_ACK);
    }

    /// A waiter following versions 1 and 2; `trust` presets the learnt spin state, `sleepers`
    /// the word `S`.
    fn waiter_follows_versions(trust: Option<u32>, sleepers: u32) {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(move || {
            let ec = Arc::new(SpEventCount::new());
            if let Some(t) = trust {
                ec.spin.store(t, std::sync::atomic::Ordering::Relaxed);
            }
            ec.sleepers.store(sleepers, Relaxed);
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
