//! Prepaid process-wide barriers: wait until every CPU has executed a barrier of its own
//! accord — an interrupt, a context switch, a stint in the idle loop — instead of sending
//! IPIs (Paul Khuong's `barrierd`, "Preemption Is GC for Memory Reordering", 2019).
//!
//! ```
//! use spindle_sync::prepaid::{Completion, PrepaidBarrier};
//! use spindle_sync::Deadline;
//! use std::time::Duration;
//!
//! let barrier = PrepaidBarrier::global();
//! // ... writes that every thread must see ...
//! let ticket = barrier.ticket();
//! match barrier.wait(ticket, Deadline::after(Duration::from_millis(50))) {
//!     Completion::Prepaid => {} // every CPU took a barrier after the ticket
//!     Completion::Forced => {}  // the deadline passed and fence::heavy() paid instead
//! }
//! assert!(barrier.is_complete(ticket));
//! ```
//!
//! # The contract
//!
//! A thread makes some writes, takes a [`Ticket`], and waits. When [`PrepaidBarrier::wait`]
//! returns (either way), or once [`PrepaidBarrier::is_complete`] has returned `true`, every
//! thread of the process has executed a full memory barrier at some point after the
//! ticket: its stores before that point are visible to the waiter, and its loads after that
//! point see the waiter's writes. This is [`fence::heavy`](crate::fence::heavy)'s contract
//! with the barrier point moved to "after the ticket", so it pairs with
//! [`fence::light`](crate::fence::light) on the hot side the same way: for
//! `store A; light(); load B` against `store B; t = ticket(); wait(t); load A`, one of the
//! loads sees the other thread's store.
//!
//! # Words
//!
//! - A **ticket** is `CLOCK_MONOTONIC` in nanoseconds, read by [`PrepaidBarrier::ticket`]
//!   after `mfence; lfence` (the caller's earlier stores are globally visible before the
//!   clock is read, SDM vol. 2 on `RDTSC`) and followed by `lfence` (no later load of the
//!   caller is performed before the clock was read).
//! - Per CPU `c`, a **barrier-after time** `B[c]`: evidence that `c` executed a barrier,
//!   was idle, or was offline at some moment after `B[c]`. Each value read is evidence by
//!   itself; it need not grow: the eBPF stamp can go back when program runs nest (an outer
//!   run reads the clock, an inner one stores a newer stamp, the outer one stores its older
//!   one), which is harmless, since the older stamp is still the stamp of a barrier that
//!   executed after its clock read. (The `/proc` and offline times only grow.)
//! - `forced`: the latest clock value read just before a
//!   [`fence::heavy`](crate::fence::heavy) that a forced wait issued, minus one: the barrier
//!   on every CPU came after every ticket strictly before that clock read.
//! - `completed`: the largest ticket a check found complete.
//! - `progress`: an [`EventCount`] bumped whenever the background thread sees the horizon
//!   `min_c B[c]` advance, and after every forced barrier.
//! - `waiters` (pending waits) and `demand` (an [`EventCount`] the background thread sleeps on
//!   when nobody waits).
//!
//! **Completion rule.** Ticket `t` is complete iff `completed ≥ t`, or `forced ≥ t`, or for
//! every possible CPU `c` one of: `c` is idle (eBPF flag read after the ticket), `B[c] ≥ t`
//! (for an eBPF stamp: `last_event_ns[c] > t + SLACK`), or (eBPF) `c` is the CPU the check
//! itself runs on. A check that succeeds raises `completed` to `t` (`fetch_max`). Completion
//! is a fact about the past — every CPU executed a barrier after `t` — so it stays true, and
//! it covers every earlier ticket (a barrier after `t` is after `t' ≤ t`); what a check reads
//! may not stay so (after a migration the checker's own CPU is another one; an idle flag gets
//! cleared), and without `completed` a second check of the same ticket could return
//! `false`. It also makes repeated checks one load.
//!
//! **Clock assumption.** Times read by different threads are compared, so the argument
//! assumes `CLOCK_MONOTONIC` is one clock across CPUs: a read that returns more than another
//! read was made later in real time. Linux only keeps the TSC as its clocksource while the
//! TSCs are synchronised, and otherwise falls back to a global clock, which is what makes the
//! system-wide clock monotonic for causally ordered reads; we rely on the same property for
//! reads that are merely close in time. The eBPF stamps come from `bpf_ktime_get_ns`, the
//! kernel's NMI-safe `ktime_get_mono_fast_ns`, a different code path from the vDSO's
//! `clock_gettime` that tickets use; both apply the same `mult`/`shift`/base, updated together
//! in `timekeeping_update`, so they agree to nanoseconds. `SLACK` ([`CLOCK_SLACK_NS`], 1 µs)
//! is a margin on that one comparison; it costs at most a microsecond of latency.
//!
//! They do not agree inside a *time namespace* (`unshare --time`, CRIU): the vDSO adds the
//! namespace's monotonic offset, `bpf_ktime_get_ns` does not, and with a negative offset
//! every stamp would look later than every ticket. Loading the eBPF source therefore reads
//! `/proc/self/timens_offsets` (no file: a kernel without time namespaces, offset 0) and
//! refuses a non-zero monotonic offset, and after attaching it checks the clocks: it sleeps
//! ~2 ms (context switches and ticks stamp the map), reads every stamp, then the clock, and
//! refuses the source if a stamp exceeds that reading by more than `SLACK`. Either way
//! [`global`](PrepaidBarrier::global) falls back to `/proc`, whose times are all vDSO reads.
//! (A process that enters a time namespace after loading, by `setns` while single-threaded,
//! is not detected.)
//!
//! # Sources, best first
//!
//! **[`Source::Ebpf`]** (root, or `CAP_BPF` + `CAP_PERFMON`; Linux ≥ 5.12 for the atomic
//! exchange). Two hand-assembled programs on raw tracepoints (`sched_switch`, the local
//! APIC timer, hrtimer expiry, device interrupts, reschedule and function-call IPIs;
//! `cpu_idle`) stamp each CPU's entry of an mmapped array: `last_event_ns` and an `idle` flag
//! (layout and listings in the `bpf` submodule). `B[c] = last_event_ns[c] − SLACK − 1`; an
//! idle flag read after the ticket completes `c` outright; a CPU missing from both
//! `/sys/devices/system/cpu/online` and the header line of `/proc/interrupts`, read after a
//! clock read `s`, has `B[c] ≥ s` (see *Offline CPUs*).
//! [`is_complete`](PrepaidBarrier::is_complete) reads the mapping: no system call.
//!
//! *Why a stamp newer than the ticket is a barrier on that CPU.* The program stores the stamp
//! with an atomic exchange, which the x86 JIT emits as `xchg`, a locked instruction, and whose
//! operand is the value the clock returned, so the exchange cannot execute before the clock
//! read. Take the instant the exchange executes as `c`'s barrier point. (1) Stores `c` made
//! before it are globally visible once the stamp is (a locked instruction drains the store
//! buffer first; x86-TSO keeps stores in order anyway), and the waiter reads the stamp before
//! it reads anything else, in order (TSO keeps loads in order; the loads are `Acquire` for
//! the compiler). (2) Loads `c` makes after it cannot be performed before the locked
//! instruction, which executed after the clock read that returned more than `t + SLACK`,
//! hence after the waiter read `t`, when the waiter's writes were already globally visible.
//! So the kernel events need not be barriers themselves: they are only what makes the
//! program run on every CPU often (every tick, switch and interrupt). Interrupts and context
//! switches *are* barriers too (interrupt return is `iret`, serialising; a context switch
//! takes the run-queue lock with a locked instruction), which is the argument of Paul
//! Khuong's "Preemption Is GC for Memory Reordering" (2019); the exchange makes it hold for every event without relying on which path the kernel takes
//! back to user mode (`sysret` is not serialising).
//!
//! *Why an idle flag is enough.* The flag is set by an exchange on idle entry and cleared by an
//! exchange on idle exit (and by every event, so a skipped exit cannot leave it standing).
//! A waiter that reads `idle[c] = 1` after its ticket knows that `c`'s stores before entering
//! idle are visible (they precede the set), and that `c` has not yet performed the clearing
//! exchange, so every user-mode instruction `c` runs later comes after a locked instruction
//! performed after the waiter's read, hence after the ticket. An idle CPU runs no user code.
//!
//! *The checker's own CPU.* A thread that runs the check on CPU `m` (the vDSO's `getcpu`,
//! read after the ticket: no system call) needs no event from `m`. No other thread of the
//! process is on `m` at that moment: each one either runs on another CPU, whose own entry
//! covers it, or is not running — it left its CPU through a context switch, after which its
//! stores were visible, and it will come back through one, after the check and hence after
//! the ticket. A migration between `getcpu` and the check does not matter: whatever runs on
//! `m` afterwards was switched in after the `getcpu` call. This is what lets a waiter on an
//! otherwise idle machine complete at once, instead of waiting for its own CPU to take a
//! tick or for its own sleep to stamp it. (The poller applies the same rule to its CPU.)
//!
//! *Offline CPUs* run nothing; one that comes back online runs its bring-up and a context
//! switch before any user code. The online mask alone is not trusted: LXCFS can virtualise
//! `/sys/devices/system/cpu/online` (a container may see `0-1` on a 16-CPU host, whose CPUs
//! 2–15 run its threads). A CPU counts as offline only if it is also missing from the header
//! of `/proc/interrupts` (the CPUs the kernel's online mask held when it generated the file;
//! LXCFS leaves it alone), read in the same refresh, with the clock read *before* both
//! files. If `/proc/interrupts` is unreadable, no CPU counts as offline: waits then complete
//! by stamps, or are forced at their deadline. The background thread repeats this refresh
//! while it polls: at every poll while some possible CPU counts as offline (the rule is then
//! what completes tickets), otherwise every 100 ms.
//!
//! **[`Source::Proc`]** (any user). The background thread polls `/proc/interrupts` (the sum of
//! each CPU's column over the rows that count interrupts taken by that CPU: device IRQs,
//! `LOC` (local timer), `RES`, `CAL`, `TLB`, `NMI`, …) and `/proc/stat` (idle + iowait per
//! CPU), every millisecond *while waits are pending*. For snapshot `k`, begun at `s_k` (clock
//! read before the files are read, for the first snapshot too): a CPU whose interrupt total
//! or idle time grew since snapshot `k−1` took an interrupt, or was idle, after `s_{k−1}`, so
//! `B[c] = s_{k−1}`; a CPU missing from the header was offline after `s_k`. An interrupt
//! counter is incremented
//! inside the handler, which returns with `iret`; `iret` is serialising, so it completes only
//! once the increment is globally visible — which it was not when snapshot `k−1` was read,
//! after `s_{k−1}` — and everything the CPU runs afterwards runs after that; its earlier
//! stores are visible with the increment (TSO, multi-copy atomic: visible to the poller
//! means visible to all). Idle time grows only while the CPU sits in the idle loop, which
//! runs no user code and hands the CPU back through a context switch (run-queue lock: a
//! locked instruction). The poller publishes the horizon `min_c B[c]` with `Release`;
//! `is_complete` is one `Acquire` load. Rows are counted only when known to count interrupts
//! taken by that CPU (`RTR`, `MCP`, `ERR`, `MIS` and unknown rows are not).
//!
//! Coarse: idle time moves in 10 ms `USER_HZ` ticks, so a tickless idle CPU, which takes no
//! interrupt, shows progress only every ~10 ms; a `nohz_full` CPU running one thread may
//! show none, and waits on it hit their deadline and force `heavy()`. Each poll reads and
//! parses two files and reads the online list twice (see `procfs::Reader::read`).
//!
//! **[`Source::Heavy`]**: no cheap source. `wait` issues
//! [`fence::heavy`](crate::fence::heavy) at once and returns [`Completion::Forced`];
//! `is_complete` is true only for tickets a forced barrier covered.
//!
//! [`PrepaidBarrier::global`] tries them in that order, once; [`PrepaidBarrier::with_source`]
//! forces one (the lab compares them).
//!
//! | situation | what happens |
//! |---|---|
//! | not root / no `CAP_BPF` (`EPERM`) | Proc |
//! | kernel without eBPF, atomics, mmapable arrays, or a required tracepoint | Proc |
//! | time namespace with a monotonic offset; `/proc/self/timens_offsets` unreadable; stamps ahead of the clock at load | Proc |
//! | `/proc` unreadable (sandbox) or unparsable | Heavy |
//! | CPU hot-plug | offline CPUs complete by the mask rule (eBPF: missing from the online list *and* the `/proc/interrupts` header) or by missing from `/proc/interrupts` (Proc); a CPU that comes online gates completion until it shows an event; a `/proc` read that straddles a hot-plug is discarded |
//! | online list virtualised (LXCFS) | eBPF: CPUs listed in `/proc/interrupts` never count as offline, so nothing changes; `/proc/interrupts` unreadable: the offline rule is off (stamps, or forced at the deadline) |
//! | `/proc/stat` virtualised (LXCFS renumbers its `cpuN` lines to the container's cpuset) | **known gap**: the Proc source would credit one CPU's idle time to another. Where the online list is virtualised too, Proc's hot-plug check fails every read and `global()` ends on Heavy (safe); where only `/proc/stat` is, use eBPF or Heavy (`with_source`) — LXCFS is not detected |
//! | a CPU that takes no interrupt (`nohz_full`), a stuck poller, a thread that cannot be spawned | the wait reaches its deadline and issues `fence::heavy()`: latency, never a hang |
//!
//! # AArch64: disabled
//!
//! Both cheap sources rest on an x86 fact: an interrupt, taken and returned from, orders the
//! interrupted CPU's memory accesses (`iret` is serialising and the stores before it drain
//! in order, TSO; the eBPF stamp is a `lock`ed exchange). On AArch64 exception entry and
//! exception return (`eret`) are *context synchronisation events*: they make the CPU fetch
//! and execute what follows with the new exception level and system registers in effect, and
//! they are precise (every instruction before the interrupted point has executed, none
//! after). They are not barriers: the Arm ARM gives them no ordering of memory accesses, so
//! stores the interrupted code made may still be in flight, visible to no other CPU, after
//! the handler has run and its own stores (the `/proc/interrupts` counter, an eBPF stamp)
//! are visible (Arm lets stores become visible out of order), and loads after `eret` may
//! have been satisfied early. Linux's arm64 interrupt path issues no `dmb` of its own that it
//! promises to keep. So "this CPU took an interrupt after the ticket" proves nothing there,
//! and neither does the interrupt counter; the eBPF exchange would be a barrier on its own
//! (an `ldaxr`/`stlxr` pair is not even that: a later load may pass its store), and it is
//! implemented for the x86 JIT only. Context switches *are* full barriers on arm64 (`dsb
//! ish` in `__switch_to`, `smp_mb()` after the run-queue lock, both kept for `membarrier`),
//! so a source that counted only switches and idle stints could work; `/proc` has no
//! per-CPU switch counts to poll, and that source is not written. Hence on AArch64
//! [`PrepaidBarrier::with_source`] refuses [`Source::Ebpf`] and [`Source::Proc`] with
//! [`SourceErrorKind::NotSupported`], saying why, and [`PrepaidBarrier::global`] is
//! [`Source::Heavy`]: every wait issues [`fence::heavy`](crate::fence::heavy) (an expedited
//! membarrier there) and returns [`Completion::Forced`]. Correct, never silent; the SMR
//! collectors' `Barrier::Prepaid` policy then costs what `Barrier::Heavy` does.
//!
//! # Waiting and why no wake-up is lost
//!
//! ```text
//! wait(t, deadline):
//!     if is_complete(t): return Prepaid
//!     Heavy source: return force(t)
//!     spin a few µs re-checking is_complete(t)
//!     start the background thread (once); waiters += 1 (if it was 0: demand.increment())
//!     loop:
//!         key = progress.value()
//!         if is_complete(t): return Prepaid        // this thread's own check
//!         if deadline passed: return force(t)
//!         progress.wait(key, min(deadline, now + NAP))
//!     (waiters -= 1 on every exit)
//! force(t): h = now (re-read until > t); fence::heavy(); forced = max(forced, h − 1);
//!           progress.increment(); return Forced
//! ```
//!
//! The version `key` is read *before* the re-check. Whoever makes `t` complete afterwards —
//! the poller publishing a horizon (Proc), the kernel stamping the map (eBPF, noticed by the
//! poller), a forced barrier — is followed by a `progress.increment()` after the state
//! change, which moves the version away from `key`, so the `EventCount` wait returns at once
//! or is woken ([`EventCount`]'s guarantee). The eBPF map changes without an increment; the
//! poller turns those changes into increments every 500 µs. `NAP` (20 ms; 1 ms when the
//! poller could not be started) bounds a sleep anyway, so a missed increment costs latency,
//! never progress, and the deadline bounds everything.
//!
//! The poller sleeps on `demand` when `waiters == 0` and no `is_complete` caller showed
//! interest lately (`interest_until`, see below): it reads `demand`'s version, then `waiters`
//! and `interest_until`; a waiter increments `waiters`, then `demand` (an `is_complete`
//! caller raises `interest_until`, then increments `demand`). If the poller read 0 (or an
//! expired time), the waiter's increment came later in that word's order, so its `demand`
//! increment changes the version the poller sleeps on. The poller therefore never sleeps
//! while a wait is pending, and never polls while no one needs it. It is one thread per
//! barrier instance, started by the first wait; it does not keep the process alive (a plain
//! std thread), and dropping a [`PrepaidBarrier`] stops it (and closes the eBPF programs,
//! which detaches them).
//!
//! Callers that poll [`is_complete`](PrepaidBarrier::is_complete) instead of waiting (a
//! reclaimer checking its ticket at each collection) need the poller too for `/proc`, whose
//! state only the poller updates, and for eBPF when a CPU counts as offline (the offline
//! refresh). An `is_complete` that returns `false` there sets `interest_until = now + 50 ms`
//! (at most once per 10 ms) and keeps the poller polling until then.
//!
//! `Completion::Prepaid` is returned when `is_complete(t)` held on the waiting thread; that
//! includes a ticket covered by another wait's forced barrier. `Forced` means this call
//! issued (or shared, through `heavy()`'s coalescing) a barrier.
//!
//! # Loom
//!
//! The module is compiled out under `--cfg loom` (`#[cfg(not(loom))]` in `lib.rs`): its
//! guarantee rests on the kernel, the clock and x86 instruction semantics, which loom cannot
//! model. `tests/prepaid.rs` checks it instead with a store-buffering stress test on real
//! threads under oversubscription, counting forbidden outcomes.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering::*};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::eventcount::EventCount;
use crate::time::Deadline;

mod bpf;
mod procfs;

/// Margin between the kernel's reading of `CLOCK_MONOTONIC` in eBPF programs and the vDSO's
/// reading in [`PrepaidBarrier::ticket`] (see the module documentation): an eBPF stamp must
/// be more than this much later than the ticket to count.
pub const CLOCK_SLACK_NS: u64 = 1_000;

/// Why the eBPF and `/proc` sources are refused on AArch64 (see "AArch64" in the module
/// documentation).
pub(crate) const NOT_ON_AARCH64: &str = "on AArch64 an interrupt is no memory barrier \
    (exception entry and return are context-synchronising, which orders instruction fetch and \
    system registers, not memory), so a CPU's interrupts say nothing about its stores: \
    prepaid barriers are disabled there and waits issue fence::heavy()";

/// Pause iterations a waiter spends re-checking before it sleeps (a few µs).
const SPIN_CHECKS: u32 = 32;
const PAUSES_PER_CHECK: u32 = 8;
/// Longest sleep of a waiter between re-checks while the poller runs.
const NAP: Duration = Duration::from_millis(20);
/// Longest sleep when no poller could be started (eBPF waiters then poll the map themselves).
const NAP_NO_POLLER: Duration = Duration::from_millis(1);
/// Poll period of the eBPF map while waits are pending.
const EBPF_POLL: Duration = Duration::from_micros(500);
/// Poll period of `/proc` while waits are pending.
const PROC_POLL: Duration = Duration::from_millis(1);
/// Minimum period between refreshes of the offline CPUs (online mask and the
/// `/proc/interrupts` header).
const ONLINE_REFRESH_NS: u64 = 100_000_000;
/// How long the poller keeps polling after an `is_complete` that returned `false`.
const INTEREST_NS: u64 = 50_000_000;
/// `is_complete` renews that interest at most this often.
const INTEREST_RENEW_NS: u64 = 10_000_000;

const ONLINE_PATH: &str = "/sys/devices/system/cpu/online";
const POSSIBLE_PATH: &str = "/sys/devices/system/cpu/possible";

/// Where a [`PrepaidBarrier`] learns that every CPU took a barrier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// eBPF programs on raw tracepoints stamp each CPU's entry of an mmapped map.
    Ebpf,
    /// A background thread polls `/proc/interrupts` and `/proc/stat`.
    Proc,
    /// No cheap source: waits issue [`fence::heavy`](crate::fence::heavy).
    Heavy,
}

impl Source {
    /// Short name used in reports: `ebpf`, `proc`, `heavy`.
    pub fn name(self) -> &'static str {
        match self {
            Source::Ebpf => "ebpf",
            Source::Proc => "proc",
            Source::Heavy => "heavy",
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A point on `CLOCK_MONOTONIC` (nanoseconds), read after the caller's earlier writes were
/// globally visible. Tickets order like the times they hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ticket(u64);

impl Ticket {
    /// Nanoseconds on `CLOCK_MONOTONIC`, as [`Deadline::as_nanos`].
    pub fn as_nanos(self) -> u64 {
        self.0
    }
}

/// How a [`PrepaidBarrier::wait`] ended. Either way the barrier happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    /// Every CPU took a barrier after the ticket (or another wait's forced barrier covered it).
    Prepaid,
    /// The deadline passed first (or the source is [`Source::Heavy`]):
    /// [`fence::heavy`](crate::fence::heavy) was issued.
    Forced,
}

/// What kind of failure a [`SourceError`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceErrorKind {
    /// The kernel refused for lack of privilege (`EPERM`/`EACCES`): not root, no `CAP_BPF`.
    NotPermitted,
    /// The kernel or target lacks the feature (`ENOSYS`, no mmapable arrays, not x86-64).
    NotSupported,
    /// A required raw tracepoint does not exist.
    MissingTracepoint,
    /// The verifier rejected a program (its log is in the message).
    Rejected,
    /// A file the source needs is unreadable or unparsable.
    Unreadable,
    /// Anything else.
    Other,
}

/// Why a source could not be set up; [`Display`](std::fmt::Display) says why in words.
#[derive(Clone, Debug)]
pub struct SourceError {
    source: Source,
    kind: SourceErrorKind,
    errno: Option<i32>,
    why: String,
}

impl SourceError {
    /// The source that failed.
    pub fn failed_source(&self) -> Source {
        self.source
    }
    /// The kind of failure.
    pub fn kind(&self) -> SourceErrorKind {
        self.kind
    }
    /// The `errno` of the failing call, if there was one.
    pub fn errno(&self) -> Option<i32> {
        self.errno
    }
}

impl std::fmt::Display for SourceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} source unavailable: {}", self.source.name(), self.why)
    }
}

impl std::error::Error for SourceError {}

/// A prepaid process-wide barrier. See the [module documentation](self).
pub struct PrepaidBarrier {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for PrepaidBarrier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrepaidBarrier")
            .field("source", &self.inner.source)
            .field("cpus", &self.inner.cpus)
            .finish()
    }
}

enum Backend {
    Ebpf(bpf::Loaded),
    Proc(Mutex<ProcPoller>),
    Heavy,
}

struct ProcPoller {
    reader: procfs::Reader,
    tracker: procfs::Tracker,
}

const POLLER_NONE: u8 = 0;
const POLLER_RUNNING: u8 = 1;
const POLLER_FAILED: u8 = 2;

struct Inner {
    source: Source,
    backend: Backend,
    /// Possible CPUs `0..cpus`.
    cpus: usize,
    /// eBPF: per CPU, the latest start time of a refresh that showed it offline (missing
    /// from the online mask and the `/proc/interrupts` header).
    offline_since: Vec<AtomicU64>,
    /// Proc: the published horizon. eBPF: the poller's last horizon (to decide bumps).
    horizon: AtomicU64,
    forced: AtomicU64,
    /// The largest ticket a check found complete (completion is permanent and covers every
    /// earlier ticket; see `Inner::is_complete`).
    completed: AtomicU64,
    progress: EventCount,
    demand: EventCount,
    waiters: AtomicU64,
    poller: AtomicU8,
    shutdown: AtomicBool,
    /// The poller keeps polling until this time (ns) for callers of `is_complete`.
    interest_until: AtomicU64,
    /// eBPF: the last refresh showed a possible CPU offline.
    some_offline: AtomicBool,
    /// What was tried before this source (for `global()`), and source details.
    notes: String,
    /// Statistics: polls done, forced waits, prepaid waits.
    polls: AtomicU64,
    forced_waits: AtomicU64,
    prepaid_waits: AtomicU64,
}

/// The clock, ordered: earlier stores are globally visible before it is read (`mfence;
/// lfence`), and later loads are not performed before it (`lfence`).
fn ordered_now() -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: fences only; no memory or register is touched besides flags-free fencing.
    unsafe {
        core::arch::asm!("mfence", "lfence", options(nostack, preserves_flags));
    }
    #[cfg(not(target_arch = "x86_64"))]
    std::sync::atomic::fence(SeqCst);
    let t = Deadline::now().as_nanos();
    #[cfg(target_arch = "x86_64")]
    // SAFETY: as above.
    unsafe {
        core::arch::asm!("lfence", options(nostack, preserves_flags));
    }
    #[cfg(not(target_arch = "x86_64"))]
    std::sync::atomic::fence(SeqCst);
    t
}

/// Number of possible CPUs (highest possible CPU number + 1).
fn possible_cpus() -> Result<usize, String> {
    let list = procfs::read_cpu_list(POSSIBLE_PATH)?;
    list.iter()
        .max()
        .map(|m| m + 1)
        .ok_or_else(|| format!("{POSSIBLE_PATH}: empty"))
}

impl PrepaidBarrier {
    /// The process-wide barrier, created on first use with the best source that works:
    /// eBPF, else `/proc`, else heavy barriers.
    pub fn global() -> &'static PrepaidBarrier {
        static GLOBAL: OnceLock<PrepaidBarrier> = OnceLock::new();
        GLOBAL.get_or_init(|| {
            let mut notes = Vec::new();
            for s in [Source::Ebpf, Source::Proc] {
                match PrepaidBarrier::build(s, &notes) {
                    Ok(b) => return b,
                    Err(e) => notes.push(e.to_string()),
                }
            }
            PrepaidBarrier::build(Source::Heavy, &notes).unwrap_or_else(|_| PrepaidBarrier {
                inner: Arc::new(Inner::new(Source::Heavy, Backend::Heavy, 0, String::new())),
            })
        })
    }

    /// A new barrier driven by `source`, or why that source is unavailable. Each instance
    /// has its own state (for eBPF: its own programs and map) and background thread.
    pub fn with_source(source: Source) -> Result<PrepaidBarrier, SourceError> {
        PrepaidBarrier::build(source, &[])
    }

    fn build(source: Source, tried: &[String]) -> Result<PrepaidBarrier, SourceError> {
        let mut notes = String::new();
        for t in tried {
            notes.push_str(t);
            notes.push_str("; ");
        }
        let (backend, cpus) = match source {
            Source::Ebpf => {
                let cpus = possible_cpus().map_err(|why| SourceError {
                    source: Source::Ebpf,
                    kind: SourceErrorKind::Unreadable,
                    errno: None,
                    why,
                })?;
                let loaded = bpf::load(cpus)?;
                notes.push_str(&format!(
                    "ebpf: {} CPUs, tracepoints {}",
                    cpus,
                    loaded.attached.join(",")
                ));
                (Backend::Ebpf(loaded), cpus)
            }
            Source::Proc if !cfg!(target_arch = "x86_64") => {
                return Err(SourceError {
                    source: Source::Proc,
                    kind: SourceErrorKind::NotSupported,
                    errno: None,
                    why: if cfg!(target_arch = "aarch64") {
                        NOT_ON_AARCH64.into()
                    } else {
                        "the /proc source's argument (an interrupt is a full barrier) is made \
                         for x86-64 only"
                            .into()
                    },
                });
            }
            Source::Proc => {
                // The first snapshot's start time is read before `open` reads the files: an
                // interrupt counted in them must not be credited as "after s0".
                let s0 = ordered_now();
                let reader = procfs::Reader::open()?;
                let cpus = possible_cpus()
                    .unwrap_or(reader.snap.in_interrupts.len())
                    .max(reader.snap.in_interrupts.len());
                notes.push_str(&format!("proc: {cpus} CPUs"));
                let mut tracker = procfs::Tracker::new(cpus);
                tracker.update(s0, &reader.snap);
                (
                    Backend::Proc(Mutex::new(ProcPoller { reader, tracker })),
                    cpus,
                )
            }
            Source::Heavy => {
                notes.push_str(&format!("heavy: {}", crate::fence::heavy_method().name()));
                (Backend::Heavy, 0)
            }
        };
        let inner = Inner::new(source, backend, cpus, notes);
        if source == Source::Ebpf {
            inner.refresh_online(&mut procfs::InterruptsHeader::new());
        }
        Ok(PrepaidBarrier {
            inner: Arc::new(inner),
        })
    }

    /// The source this barrier uses.
    pub fn source(&self) -> Source {
        self.inner.source
    }

    /// One line for reports: the source, the CPUs it watches, the tracepoints attached, and
    /// (for [`global`](Self::global)) why better sources were not used.
    pub fn describe(&self) -> String {
        self.inner.notes.clone()
    }

    /// Waits that ended `(Prepaid, Forced)` so far, and background polls done.
    pub fn stats(&self) -> (u64, u64, u64) {
        let i = &self.inner;
        (
            i.prepaid_waits.load(Relaxed),
            i.forced_waits.load(Relaxed),
            i.polls.load(Relaxed),
        )
    }

    /// Take a ticket: call it *after* the writes the barrier must publish. A `SeqCst` fence
    /// (`mfence; lfence`), then `CLOCK_MONOTONIC`, then `lfence`.
    #[inline]
    pub fn ticket(&self) -> Ticket {
        Ticket(ordered_now())
    }

    /// Whether every CPU has taken a barrier after `t` (see the module documentation). For
    /// eBPF this reads the mapped map (two loads per CPU, no system call); for `/proc` the
    /// horizon the background thread published; for Heavy, whether a forced barrier covered
    /// `t`. The background thread polls while waits are pending and, for `/proc` (or eBPF
    /// with offline CPUs), for 50 ms after an `is_complete` that returned `false`, so
    /// polling `is_complete` alone makes progress too. Once it returned `true` for `t`, it
    /// returns `true` for `t` and every earlier ticket, on every thread, with one load.
    pub fn is_complete(&self, t: Ticket) -> bool {
        let i = &self.inner;
        if i.is_complete(t.0) {
            return true;
        }
        let wants_poller = match i.backend {
            Backend::Proc(_) => true,
            Backend::Ebpf(_) => i.some_offline.load(Relaxed),
            Backend::Heavy => false,
        };
        if wants_poller {
            Inner::note_interest(&self.inner);
        }
        false
    }

    /// Wait until every CPU has taken a barrier after `t`: spin briefly, then sleep on an
    /// event count that the background thread bumps; if `deadline` passes first, issue
    /// [`fence::heavy`](crate::fence::heavy) and return [`Completion::Forced`]. Returns
    /// within about one poll period of the deadline, whatever the machine does.
    pub fn wait(&self, t: Ticket, deadline: Deadline) -> Completion {
        let i = &self.inner;
        let done = |c: Completion| {
            match c {
                Completion::Prepaid => &i.prepaid_waits,
                Completion::Forced => &i.forced_waits,
            }
            .fetch_add(1, Relaxed);
            c
        };
        if i.is_complete(t.0) {
            return done(Completion::Prepaid);
        }
        if i.source == Source::Heavy {
            return done(i.force(t.0));
        }
        for _ in 0..SPIN_CHECKS {
            for _ in 0..PAUSES_PER_CHECK {
                core::hint::spin_loop();
            }
            if i.is_complete(t.0) {
                return done(Completion::Prepaid);
            }
        }
        let polled = Inner::start_poller(&self.inner);
        let _registered = Registration::new(i);
        let nap = if polled { NAP } else { NAP_NO_POLLER };
        loop {
            let key = i.progress.value();
            if i.is_complete(t.0) {
                return done(Completion::Prepaid);
            }
            let now = Deadline::now();
            if now >= deadline {
                return done(i.force(t.0));
            }
            let _ = i
                .progress
                .wait(key, Some(deadline.min(now.saturating_add(nap))));
        }
    }
}

impl Drop for PrepaidBarrier {
    fn drop(&mut self) {
        self.inner.shutdown.store(true, SeqCst);
        self.inner.demand.increment();
    }
}

/// A pending wait, counted in `waiters` for its lifetime.
struct Registration<'a>(&'a Inner);

impl<'a> Registration<'a> {
    fn new(i: &'a Inner) -> Registration<'a> {
        if i.waiters.fetch_add(1, SeqCst) == 0 {
            i.demand.increment();
        }
        Registration(i)
    }
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        self.0.waiters.fetch_sub(1, SeqCst);
    }
}

impl Inner {
    fn new(source: Source, backend: Backend, cpus: usize, notes: String) -> Inner {
        Inner {
            source,
            backend,
            cpus,
            offline_since: (0..cpus).map(|_| AtomicU64::new(0)).collect(),
            horizon: AtomicU64::new(0),
            forced: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            progress: EventCount::new(),
            demand: EventCount::new(),
            waiters: AtomicU64::new(0),
            poller: AtomicU8::new(POLLER_NONE),
            shutdown: AtomicBool::new(false),
            interest_until: AtomicU64::new(0),
            some_offline: AtomicBool::new(false),
            notes,
            polls: AtomicU64::new(0),
            forced_waits: AtomicU64::new(0),
            prepaid_waits: AtomicU64::new(0),
        }
    }

    /// Whether `t` is complete. Once a check succeeds for `t`, `completed ≥ t` answers every
    /// later check of any ticket `≤ t` at once: completion is a fact about the past ("every
    /// CPU executed a barrier after `t`"), so it cannot become false again — the state a
    /// check reads can (the checker's own CPU after a migration, an idle flag cleared since),
    /// which without this could make `is_complete` return `true` and then `false` — and a
    /// barrier after `t` is after every `t' ≤ t` too. A thread that reads `completed`
    /// (`Acquire`) after the successful checker's `fetch_max` (`Release`) sees what that
    /// checker saw: the evidence's stores were globally visible before it (x86-TSO is
    /// multi-copy atomic), and its own later loads come after the barriers, as above.
    fn is_complete(&self, t: u64) -> bool {
        if self.completed.load(Acquire) >= t {
            return true;
        }
        if self.check(t) {
            self.completed.fetch_max(t, Release);
            return true;
        }
        false
    }

    /// The completion rule itself (see the module documentation), read from the source.
    fn check(&self, t: u64) -> bool {
        if self.forced.load(Acquire) >= t {
            return true;
        }
        let need = t.saturating_add(CLOCK_SLACK_NS);
        match &self.backend {
            Backend::Ebpf(map) => {
                // The CPU this check runs on needs no event (see "The checker's own CPU").
                let me = rustix::thread::sched_getcpu();
                (0..map.entries()).all(|c| {
                    // The idle flag first: seen clear, the stamp read next is at least as new
                    // as the idle exit (both are exchanges, stamp first).
                    c == me
                        || map.idle(c)
                        || map.last_event(c) > need
                        || self.offline_since[c].load(Acquire) >= t
                })
            }
            Backend::Proc(_) => self.horizon.load(Acquire) >= t,
            Backend::Heavy => false,
        }
    }

    /// Issue a heavy barrier that covers every ticket strictly before `h`, the clock read
    /// just before it, and publish `h − 1`. Not `h`: a ticket equal to `h` may have been read
    /// by another thread later in real time than `h` (the same nanosecond), its writes not
    /// yet visible when `heavy()` ran; a ticket `< h` was read earlier (the clock
    /// assumption), its writes already visible. `h` is re-read until it exceeds `t` (the
    /// caller read `t` before this call; the clock moves on within nanoseconds), so `t` is
    /// covered.
    fn force(&self, t: u64) -> Completion {
        let mut h = ordered_now();
        while h <= t {
            core::hint::spin_loop();
            h = ordered_now();
        }
        crate::fence::heavy();
        self.forced.fetch_max(h - 1, Release);
        self.progress.increment();
        Completion::Forced
    }

    /// eBPF: the horizon as of `r` (a clock read before the map reads).
    fn ebpf_horizon(&self, map: &bpf::Loaded, r: u64) -> u64 {
        let me = rustix::thread::sched_getcpu();
        (0..map.entries())
            .map(|c| {
                let b = if c == me || map.idle(c) {
                    r
                } else {
                    map.last_event(c).saturating_sub(CLOCK_SLACK_NS + 1)
                };
                b.max(self.offline_since[c].load(Acquire))
            })
            .min()
            .unwrap_or(u64::MAX)
    }

    /// Read the online mask and the `/proc/interrupts` header (clock read before both);
    /// record "offline after s" for CPUs missing from both (`procfs::offline_cpus`: the mask
    /// alone may be virtualised). Without a readable header, no CPU is recorded.
    fn refresh_online(&self, header: &mut procfs::InterruptsHeader) {
        let s = ordered_now();
        let Ok(online) = procfs::read_cpu_list(ONLINE_PATH) else {
            return;
        };
        let offline = procfs::offline_cpus(self.offline_since.len(), &online, header.read());
        for &c in &offline {
            self.offline_since[c].fetch_max(s, Release);
        }
        self.some_offline.store(!offline.is_empty(), Relaxed);
    }

    /// An `is_complete` caller found its ticket incomplete: keep the poller polling for
    /// [`INTEREST_NS`] (renewed at most every [`INTEREST_RENEW_NS`]). The renewal stores the
    /// time, then increments `demand`, so a poller that read the old time sleeps on a version
    /// that the increment changes (the same argument as for `waiters`).
    fn note_interest(this: &Arc<Inner>) {
        let now = Deadline::now().as_nanos();
        if this.interest_until.load(Relaxed) >= now + (INTEREST_NS - INTEREST_RENEW_NS) {
            return;
        }
        this.interest_until.fetch_max(now + INTEREST_NS, SeqCst);
        if Inner::start_poller(this) {
            this.demand.increment();
        }
    }

    /// Whether the poller has anything to do: a pending wait or recent interest.
    fn in_demand(&self) -> bool {
        self.waiters.load(SeqCst) != 0
            || self.interest_until.load(SeqCst) > Deadline::now().as_nanos()
    }

    /// Start the background thread if it is not running; false if it cannot run.
    fn start_poller(this: &Arc<Inner>) -> bool {
        match this.poller.load(Acquire) {
            POLLER_RUNNING => return true,
            POLLER_FAILED => return false,
            _ => {}
        }
        if this
            .poller
            .compare_exchange(POLLER_NONE, POLLER_RUNNING, AcqRel, Acquire)
            .is_err()
        {
            return this.poller.load(Acquire) == POLLER_RUNNING;
        }
        let me = Arc::clone(this);
        let spawned = std::thread::Builder::new()
            .name(format!("spindle-prepaid-{}", this.source.name()))
            .stack_size(64 << 10)
            .spawn(move || me.poll_loop());
        if spawned.is_err() {
            this.poller.store(POLLER_FAILED, Release);
            return false;
        }
        true
    }

    fn poll_loop(&self) {
        let period = match self.backend {
            Backend::Ebpf(_) => EBPF_POLL,
            _ => PROC_POLL,
        };
        let mut last_online = ordered_now();
        let mut header = procfs::InterruptsHeader::new();
        loop {
            if self.shutdown.load(SeqCst) {
                return;
            }
            let key = self.demand.value();
            if !self.in_demand() {
                if self.shutdown.load(SeqCst) {
                    return;
                }
                let _ = self.demand.wait(key, None);
                continue;
            }
            self.poll_once(&mut last_online, &mut header);
            let key = self.demand.value();
            let _ = self.demand.wait(key, Some(Deadline::after(period)));
        }
    }

    fn poll_once(&self, last_online: &mut u64, header: &mut procfs::InterruptsHeader) {
        self.polls.fetch_add(1, Relaxed);
        let h = match &self.backend {
            Backend::Ebpf(map) => {
                let r = ordered_now();
                // With a possible CPU offline, the offline rule is all that completes it:
                // refresh it at every poll (two small reads); otherwise every 100 ms, to
                // notice unplugs.
                if self.some_offline.load(Relaxed)
                    || r.saturating_sub(*last_online) >= ONLINE_REFRESH_NS
                {
                    *last_online = r;
                    self.refresh_online(header);
                }
                self.ebpf_horizon(map, r)
            }
            Backend::Proc(p) => {
                let mut p = p.lock().unwrap_or_else(|e| e.into_inner());
                let s = ordered_now();
                if p.reader.read().is_err() {
                    return; // a transient failure: no evidence this time
                }
                let ProcPoller { reader, tracker } = &mut *p;
                tracker.update(s, &reader.snap)
            }
            Backend::Heavy => return,
        };
        if h > self.horizon.load(Relaxed) {
            self.horizon.store(h, Release);
            self.progress.increment();
        }
    }
}
