//! Asymmetric fences: a free [`light`] fence on the hot path, paid for by a process-wide
//! [`heavy`] barrier on the cold path (Paul Khuong, "Preemption Is GC for Memory Reordering",
//! 2019; folly's `asymmetricLightBarrier`/`asymmetricHeavyBarrier`).
//!
//! # The contract
//!
//! Take a hot thread `H` that runs `store A; light(); load B` and a cold thread `C` that runs
//! `store B; heavy(); load A`. Then at least one of the loads sees the other thread's store —
//! the store-buffering outcome "both loads miss" is forbidden, exactly as if both sides had
//! used a `SeqCst` fence. More generally, when `heavy()` returns, every other thread of the
//! process has executed a full memory barrier at some point between the call and the return:
//! its stores before that point are visible to the caller, and its loads after that point see
//! every store the caller made before the call.
//!
//! `light()` is only a compiler fence: x86-TSO keeps every other order (load→load,
//! load→store, store→store), and the one it relaxes, store→load, is what `heavy()` repairs
//! from the other side.
//!
//! # Methods, best first ([`heavy_method`] says which one `heavy()` uses)
//!
//! 1. Expedited membarrier ([`Method::MembarrierExpedited`]):
//!    `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)` (Linux ≥ 4.14; the process registers on first
//!    use). The kernel sends an IPI to every CPU that is running a thread of this process; the
//!    others went through a context switch, which is a full barrier.
//! 2. The mprotect trick ([`Method::Mprotect`]): remove write permission from a private dirty page.
//!    The kernel must shoot the stale TLB entry down on every CPU that may cache it — every CPU
//!    running this process — by IPI, and an interrupt serialises the CPU that takes it. Works on
//!    x86-64 Linux without `membarrier` (old kernels, sandboxes), *unless* the CPU broadcasts
//!    TLB invalidations without interrupts (AMD `INVLPGB`, used by Linux ≥ 6.15): then this
//!    method reports itself unavailable (as it does when `/proc/cpuinfo` cannot be read). It
//!    is not architecturally a barrier elsewhere (AArch64 broadcasts TLB invalidations too).
//! 3. Global membarrier ([`Method::MembarrierGlobal`]): `membarrier(MEMBARRIER_CMD_GLOBAL)` waits
//!    for an RCU grace period: correct for every thread, but milliseconds per call.
//!
//! On targets other than Linux on x86-64 or AArch64 `light()` is compiled as a `SeqCst` fence,
//! and [`Method::Fence`] (a `SeqCst` fence) is the last resort: a heavy-side-only fence could
//! not repair a compiler-fence light side. On Linux/x86-64, if neither `membarrier` nor
//! `mprotect` works (only a seccomp filter forbidding both does that), the process aborts with
//! a message rather than run protocols whose barrier is missing.
//! Under `--cfg loom` both fences are `SeqCst` fences ([`Method::Fence`]), so loom models of
//! the protocols built on them check the interleavings they allow.
//!
//! # AArch64
//!
//! The contract is the same; what keeps it differs. Arm's memory model relaxes every order
//! (load→load, load→store, store→store, store→load), not only store→load, so a compiler
//! fence keeps nothing but the compiler's order there. The protocols built on the pair ask
//! nothing of `light()` beyond store→load: their other orders are `Release` stores and
//! `Acquire` loads (`ldar`/`stlr`), which Arm honours (the SMR read sides; the pool's pushes;
//! see each module's orderings). And `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)` keeps its
//! documented contract on every architecture: on arm64 its IPI handler executes `smp_mb()`
//! (`dmb ish`) on each CPU running a thread of the process, and a thread that is not running
//! passed a context switch, which is a full barrier there too (`dsb ish` in `__switch_to`,
//! `smp_mb__after_spinlock()` = `smp_mb()` in the scheduler: both there for `membarrier`).
//! So on Linux/AArch64:
//! - `light()` is a `SeqCst` fence (`dmb ish`) until [`heavy_method`] has settled on
//!   [`Method::MembarrierExpedited`] (the process registered); from then on it is a compiler
//!   fence, for good. It decides with one load of a flag that only ever goes from "fence" to
//!   "compiler fence", so a thread that reads a stale value fences when it need not, never the
//!   reverse; and no `heavy()` returns before the method is settled. SMR collectors and
//!   domains settle it when they are made (`fence::prepare`), so their readers start
//!   fence-free.
//! - [`Method::Mprotect`] is unavailable: AArch64 broadcasts TLB invalidations in hardware
//!   (`tlbi … is`), so write-protecting a page interrupts no CPU and orders nothing.
//! - Without an expedited membarrier (kernels before 4.14, a seccomp filter) `heavy()` is a
//!   `SeqCst` fence ([`Method::Fence`]) and `light()` stays one, as on other targets:
//!   correct by the memory model, the readers paying a `dmb ish` each. Global membarrier
//!   (an RCU grace period, milliseconds per call) is not chosen: the fences cost less. If an
//!   expedited membarrier that worked fails later and no membarrier works at all, the process
//!   aborts with a message, as on x86-64: `light()` can no longer be repaired then.
//!
//! Under `qemu-aarch64` (user-mode emulation) `membarrier` reaches the host kernel, which
//! interrupts the host CPUs running the emulator's threads, that is, the emulated threads.
//!
//! # Coalescing
//!
//! A barrier costs a system call and an IPI to every CPU that runs another thread of the
//! process (the lab's `fences` experiment measures it idle and under load). When several
//! threads call `heavy()` at once
//! they do not each need their own: a caller only needs *some* barrier that **started after**
//! its own writes were globally visible. A caller that arrives while a barrier is in flight
//! cannot use that one, so sharing happens when two or more callers arrive during the same
//! barrier — the more CPUs run callers, the likelier (the lab's `fences` experiment reports the
//! barriers issued per call). Words:
//!
//! - `state`: bit 0 = a barrier is in flight; bits 1.. = `started`, the number of barriers
//!   begun so far.
//! - `done`: the number of the last barrier that has completed (barriers run one at a time,
//!   so `done` only grows, and barrier `n` completed means barriers `1..=n` did).
//! - `finished`: an [`EventCount`] bumped after each completion.
//!
//! ```text
//! heavy():
//!     s0 = fetch_add(state, 0)         // an RMW: the latest value, and a full barrier
//!     target = (s0 >> 1) + 1           // the first barrier that cannot have started before us
//!     loop:
//!         if done >= target: return    // someone ran barrier `target` (or a later one)
//!         s = state
//!         if s & 1 == 0 and now < hold_until: yield; continue   // see "Convoys"
//!         if s & 1 == 0 and CAS(state, s → s + 3):   // leader: started += 1, in flight
//!             n = (s >> 1) + 1         // n >= target
//!             issue the barrier
//!             if callers sleep: hold_until = now + barrier duration / 2
//!             done = n; state &= !1; finished.increment(); return
//!         else:
//!             key = finished.value(); if done < target: finished.wait(key)
//! ```
//!
//! **Why it suffices.** If the caller's RMW read `started = k`, barrier `k + 1` had not been
//! begun: the leader that begins it does so with a CAS later in `state`'s modification order.
//! Every write to `state` is an RMW, so that CAS reads from a release sequence headed by our
//! RMW and synchronises with it: our earlier writes happen before the leader issues the
//! barrier, whose IPIs therefore reach every CPU after our writes became visible (on x86 the
//! `lock`ed RMW drained our store buffer) — the contract's second half. The first half holds
//! because the barrier had completed (its leader stores `done ≥ target` with `Release` only
//! after the system call returned) before our `Acquire` load observed it. The RMW is needed
//! because a barrier issued by *another* thread does not order *our* store buffer before its
//! IPIs (the caller's own `membarrier` would), and a plain load could read a stale `state`.
//!
//! **No lost wake-up.** A follower sleeps on `finished` only after reading its version and
//! then re-checking `done`; the leader stores `done` before it increments `finished`, so a
//! completion after the re-check changes the version the follower sleeps on
//! ([`EventCount`]'s own guarantee). A follower that sees no leader becomes one (after a hold,
//! which ends by the clock), so some barrier with number ≥ `target` is always begun: the
//! state's `started` field only grows, and each leader's `n` is at least every waiting
//! caller's `target` when it began after them.
//!
//! **Convoys.** Callers that call `heavy()` again as soon as it returns (a reclaimer in a
//! loop, the lab's coalescing section) fall into step: when a barrier ends, the callers it
//! served return while the ones it woke are still waking, the first caller back leads the next
//! barrier at once, and everyone else arrives just after it started, so each waits for that
//! barrier and the one after: about twice a lone caller's latency, and one barrier per two
//! callers or fewer. So a leader whose barrier ended with callers asleep holds the next start
//! for half a barrier's duration (a moving average of the leaders' own barriers, so the
//! machine sets it): callers that arrive meanwhile share the next barrier. Callers that come
//! one at a time never wait: only a barrier that had callers asleep sets a hold. The hold only
//! delays a leader's CAS, and ends by the clock, so the arguments above and below are
//! unchanged; under loom there is no clock and no hold.
//!
//! **Linearisation.** `heavy()` takes effect at the start of the barrier it waited for.
//!
//! **Fork.** As with a mutex, a child forked while another thread was leading a barrier
//! inherits a barrier "in flight" that no thread will finish: such a child must not call
//! `heavy()`. (The expedited registration is redone in the child on its first `EPERM`.)

use std::sync::OnceLock;

use crate::primitives::{AtomicU64, Ordering::*};
use crate::EventCount;

/// The hot side of an asymmetric fence: a compiler fence (on Linux/x86-64, when [`heavy`] has
/// a process-wide barrier; on Linux/AArch64 once [`heavy`] has settled on an expedited
/// membarrier, see "AArch64" in the [module documentation](self)); a `SeqCst` fence
/// otherwise. Pair it with [`heavy`] on the cold side.
#[inline(always)]
pub fn light() {
    #[cfg(all(target_arch = "x86_64", target_os = "linux", not(loom)))]
    std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
    #[cfg(all(target_arch = "aarch64", target_os = "linux", not(loom)))]
    {
        if LIGHT_FENCES.load(std::sync::atomic::Ordering::Relaxed) {
            std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        } else {
            std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
        }
    }
    #[cfg(not(all(
        any(target_arch = "x86_64", target_arch = "aarch64"),
        target_os = "linux",
        not(loom)
    )))]
    crate::primitives::fence(SeqCst);
}

/// Linux/AArch64: whether [`light`] must be a full fence. True until [`heavy_method`] settles
/// on an expedited membarrier, then false for good (see "AArch64" in the module
/// documentation).
#[cfg(all(target_arch = "aarch64", target_os = "linux", not(loom)))]
static LIGHT_FENCES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Whether [`light`] executes a full (`SeqCst`) fence in this process now, rather than a
/// compiler fence: never on Linux/x86-64; on Linux/AArch64 until [`heavy`] has settled on an
/// expedited membarrier; always elsewhere and under loom.
pub fn light_fences() -> bool {
    #[cfg(all(target_arch = "x86_64", target_os = "linux", not(loom)))]
    return false;
    #[cfg(all(target_arch = "aarch64", target_os = "linux", not(loom)))]
    return LIGHT_FENCES.load(std::sync::atomic::Ordering::Relaxed);
    #[allow(unreachable_code)]
    true
}

/// Settles now which barrier [`heavy`] uses, so that on Linux/AArch64 [`light`] becomes a
/// compiler fence before the first `heavy()` rather than after it (the first expedited
/// membarrier registers the process, which may wait for an RCU grace period: milliseconds
/// that a constructor pays better than a reclaimer's first scan). A no-op elsewhere, where
/// `light()` is decided at compile time.
#[inline]
pub(crate) fn prepare() {
    #[cfg(all(target_arch = "aarch64", target_os = "linux", not(loom)))]
    let _ = heavy_method();
}

/// How a process-wide barrier is issued. See the [module documentation](self).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Method {
    /// `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`: IPIs to the CPUs running this process.
    MembarrierExpedited,
    /// Write-protect a dirty private page: TLB shoot-down IPIs to the same CPUs.
    Mprotect,
    /// `membarrier(MEMBARRIER_CMD_GLOBAL)`: waits for an RCU grace period (milliseconds).
    MembarrierGlobal,
    /// A `SeqCst` fence; only a barrier when [`light`] is one too (loom, other targets, and
    /// AArch64 without an expedited membarrier).
    Fence,
}

impl Method {
    /// Short name used in reports (`membarrier-expedited`, `mprotect`, …).
    pub fn name(self) -> &'static str {
        match self {
            Method::MembarrierExpedited => "membarrier-expedited",
            Method::Mprotect => "mprotect",
            Method::MembarrierGlobal => "membarrier-global",
            Method::Fence => "seqcst-fence",
        }
    }
}

/// Why [`barrier`] could not issue a barrier by the method asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unavailable {
    /// The method that failed.
    pub method: Method,
    /// The `errno` the kernel returned (0 when the method does not exist on this target).
    pub errno: i32,
}

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} barrier unavailable (errno {})",
            self.method.name(),
            self.errno
        )
    }
}

impl std::error::Error for Unavailable {}

/// The method [`heavy`] uses in this process, chosen on first use: the first of
/// membarrier-expedited, mprotect and membarrier-global that works (on Linux/AArch64:
/// membarrier-expedited, else a `SeqCst` fence, with [`light`] fenced to match).
pub fn heavy_method() -> Method {
    *HEAVY_METHOD.get_or_init(|| {
        #[cfg(all(target_arch = "aarch64", target_os = "linux", not(loom)))]
        {
            if barrier(Method::MembarrierExpedited).is_ok() {
                // From here on every `heavy()` interrupts the process's running threads.
                LIGHT_FENCES.store(false, std::sync::atomic::Ordering::Release);
                return Method::MembarrierExpedited;
            }
            return Method::Fence;
        }
        #[allow(unreachable_code)]
        for m in [
            Method::MembarrierExpedited,
            Method::Mprotect,
            Method::MembarrierGlobal,
        ] {
            if barrier(m).is_ok() {
                return m;
            }
        }
        no_barrier()
    })
}

/// Nothing can issue a process-wide barrier. Where [`light`] is a `SeqCst` fence, a `SeqCst`
/// fence on the heavy side is enough. On Linux/x86-64 `light()` is a compiler fence, and
/// returning without a barrier would silently break every protocol built on the pair, so the
/// process stops with a message instead (this needs a seccomp filter that forbids both
/// `membarrier` and `mprotect`); so does Linux/AArch64 once `light()` has become a compiler
/// fence (an expedited membarrier that worked, then no membarrier at all).
fn no_barrier() -> Method {
    #[cfg(all(target_arch = "x86_64", target_os = "linux", not(loom)))]
    {
        eprintln!(
            "spindle-sync: no process-wide barrier is available (membarrier and mprotect both \
             fail); asymmetric fences cannot be honoured, aborting"
        );
        std::process::abort();
    }
    #[cfg(all(target_arch = "aarch64", target_os = "linux", not(loom)))]
    if !LIGHT_FENCES.load(std::sync::atomic::Ordering::Relaxed) {
        eprintln!(
            "spindle-sync: membarrier stopped working after light() became a compiler fence; \
             asymmetric fences cannot be honoured, aborting"
        );
        std::process::abort();
    }
    #[allow(unreachable_code)]
    {
        crate::primitives::fence(SeqCst);
        Method::Fence
    }
}

static HEAVY_METHOD: OnceLock<Method> = OnceLock::new();

/// The cold side of an asymmetric fence; see the [module documentation](self). Concurrent
/// callers share barriers.
#[cfg(not(loom))]
pub fn heavy() {
    coalescer().heavy(heavy_method());
}

/// Under loom: a `SeqCst` fence, like [`light`] (loom cannot model IPIs).
#[cfg(loom)]
pub fn heavy() {
    crate::primitives::fence(SeqCst);
}

/// Number of barriers `heavy()` has issued in this process, and number of `heavy()` calls:
/// their ratio shows how much coalescing saved.
#[cfg(not(loom))]
pub fn heavy_counts() -> (u64, u64) {
    let c = coalescer();
    (c.state.load(Relaxed) >> 1, c.calls.load(Relaxed))
}

/// Issue one barrier by `method` (uncoalesced), or say why it is unavailable. The first
/// `MembarrierExpedited` call registers the process.
pub fn barrier(method: Method) -> Result<(), Unavailable> {
    sys::barrier(method).map_err(|errno| Unavailable { method, errno })
}

/// Issue a barrier by a method already known to work. If it fails now (a seccomp filter
/// installed later, a transient `ENOMEM`), fall back to the next method; if nothing works for
/// a second, stop the process as [`heavy_method`] does at start-up: returning without a
/// barrier would break the contract, and retrying forever would hang every caller.
fn issue(method: Method) {
    for _round in 0..1000 {
        let mut m = Some(method);
        while let Some(cur) = m {
            if barrier(cur).is_ok() {
                return;
            }
            m = match cur {
                Method::MembarrierExpedited => Some(Method::Mprotect),
                Method::Mprotect => Some(Method::MembarrierGlobal),
                Method::MembarrierGlobal | Method::Fence => None,
            };
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    no_barrier();
}

/// The coalescing state (see the module documentation).
pub(crate) struct Coalescer {
    state: AtomicU64,
    done: AtomicU64,
    finished: EventCount,
    calls: AtomicU64,
    /// Callers asleep on `finished` (a hint for the hold below).
    sleepers: AtomicU64,
    /// Until when (ns on [`Coalescer::now`]'s clock) no new barrier starts: set by a leader
    /// whose barrier ended with callers asleep (see "Convoys"; no clock under loom).
    #[cfg_attr(loom, allow(dead_code))]
    hold_until: AtomicU64,
    /// The barrier's duration (ns), a moving average over the leaders' barriers.
    #[cfg_attr(loom, allow(dead_code))]
    barrier_ns: AtomicU64,
}

const IN_FLIGHT: u64 = 1;

impl Coalescer {
    pub(crate) fn new() -> Coalescer {
        Coalescer {
            state: AtomicU64::new(0),
            done: AtomicU64::new(0),
            finished: EventCount::new(),
            calls: AtomicU64::new(0),
            sleepers: AtomicU64::new(0),
            hold_until: AtomicU64::new(0),
            barrier_ns: AtomicU64::new(0),
        }
    }

    /// Nanoseconds since the first call (a clock for the hold; none under loom).
    #[cfg(not(loom))]
    fn now() -> u64 {
        static ORIGIN: OnceLock<std::time::Instant> = OnceLock::new();
        ORIGIN
            .get_or_init(std::time::Instant::now)
            .elapsed()
            .as_nanos() as u64
    }

    /// Whether a leader must wait before starting a barrier (see "Convoys").
    fn holding(&self) -> bool {
        #[cfg(not(loom))]
        {
            let until = self.hold_until.load(Relaxed);
            until != 0 && Coalescer::now() < until
        }
        #[cfg(loom)]
        {
            false
        }
    }

    /// Wait for a barrier that started after this call; issue it if nobody else does.
    #[cfg(not(loom))]
    pub(crate) fn heavy(&self, method: Method) {
        self.heavy_with(|| issue(method));
    }

    /// [`Coalescer::heavy`] with the barrier itself abstracted (loom models pass a recorder).
    pub(crate) fn heavy_with(&self, issue: impl FnOnce()) {
        self.calls.fetch_add(1, Relaxed);
        // An RMW, not a load: it reads the latest `state`, and (being `lock`ed) it is the full
        // barrier that makes our writes visible before any later leader's CAS.
        let target = (self.state.fetch_add(0, SeqCst) >> 1) + 1;
        let mut issue = Some(issue);
        loop {
            if self.done.load(Acquire) >= target {
                return;
            }
            let s = self.state.load(SeqCst);
            if s & IN_FLIGHT == 0 && self.holding() {
                crate::primitives::yield_now();
                continue;
            }
            if s & IN_FLIGHT == 0
                && self
                    .state
                    .compare_exchange(s, s + 2 + IN_FLIGHT, SeqCst, Relaxed)
                    .is_ok()
            {
                let n = (s >> 1) + 1;
                debug_assert!(n >= target);
                #[cfg(not(loom))]
                let t0 = Coalescer::now();
                (issue.take().expect("a caller leads at most once"))();
                #[cfg(not(loom))]
                {
                    let t1 = Coalescer::now();
                    let b = self.barrier_ns.load(Relaxed);
                    let b = if b == 0 {
                        t1 - t0
                    } else {
                        b - b / 8 + (t1 - t0) / 8
                    };
                    self.barrier_ns.store(b, Relaxed);
                    if self.sleepers.load(Relaxed) > 0 {
                        self.hold_until.store(t1 + b / 2, Relaxed);
                    }
                }
                self.done.store(n, Release);
                self.state.fetch_and(!IN_FLIGHT, Release);
                self.finished.increment();
                return;
            }
            let key = self.finished.value();
            if self.done.load(Acquire) >= target {
                return;
            }
            if self.state.load(SeqCst) & IN_FLIGHT == 0 {
                continue; // the leader finished between our loads: try to lead
            }
            self.sleepers.fetch_add(1, Relaxed);
            let _ = self.finished.wait(key, None);
            self.sleepers.fetch_sub(1, Relaxed);
        }
    }
}

#[cfg(not(loom))]
fn coalescer() -> &'static Coalescer {
    static C: OnceLock<Coalescer> = OnceLock::new();
    C.get_or_init(Coalescer::new)
}

#[cfg(all(target_os = "linux", not(loom)))]
mod sys {
    use super::Method;
    use rustix::mm::{mmap_anonymous, mprotect, MapFlags, MprotectFlags, ProtFlags};
    use rustix::thread::{membarrier, MembarrierCommand};
    use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering::*};
    use std::sync::Mutex;

    pub(super) fn barrier(method: Method) -> Result<(), i32> {
        match method {
            Method::MembarrierExpedited => expedited(),
            Method::Mprotect => mprotect_ipi(),
            Method::MembarrierGlobal => {
                membarrier(MembarrierCommand::Global).map_err(|e| e.raw_os_error())
            }
            Method::Fence => {
                std::sync::atomic::fence(SeqCst);
                Ok(())
            }
        }
    }

    fn expedited() -> Result<(), i32> {
        static REGISTERED: AtomicBool = AtomicBool::new(false);
        let register = || {
            membarrier(MembarrierCommand::RegisterPrivateExpedited).map_err(|e| e.raw_os_error())
        };
        if !REGISTERED.load(Acquire) {
            register()?;
            REGISTERED.store(true, Release);
        }
        match membarrier(MembarrierCommand::PrivateExpedited) {
            // A child of `fork` inherits REGISTERED but not the kernel's registration (EPERM):
            // register this process too, once, and retry.
            Err(e) if e == rustix::io::Errno::PERM => {
                register()?;
                membarrier(MembarrierCommand::PrivateExpedited).map_err(|e| e.raw_os_error())
            }
            r => r.map_err(|e| e.raw_os_error()),
        }
    }

    /// Whether the CPU can invalidate other CPUs' TLB entries without an interrupt (AMD's
    /// `INVLPGB`, which Linux ≥ 6.15 uses for processes that run on many CPUs): then
    /// write-protecting a page interrupts nobody and is no barrier. Unknown (no `/proc`)
    /// counts as yes, and so does every architecture but x86-64 (AArch64 broadcasts TLB
    /// invalidations in hardware, `tlbi … is`).
    fn broadcast_tlb_flush() -> bool {
        if !cfg!(target_arch = "x86_64") {
            return true;
        }
        static ANSWER: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *ANSWER.get_or_init(|| match std::fs::read_to_string("/proc/cpuinfo") {
            Ok(info) => info
                .lines()
                .filter(|l| l.starts_with("flags"))
                .any(|l| l.split_whitespace().any(|f| f == "invlpgb")),
            Err(_) => true,
        })
    }

    /// The page whose write permission we toggle, mapped on first use; the mutex serialises
    /// the toggles (two interleaved toggles could leave the page read-only while another
    /// caller writes it).
    fn mprotect_ipi() -> Result<(), i32> {
        if broadcast_tlb_flush() {
            return Err(rustix::io::Errno::NOTSUP.raw_os_error());
        }
        static PAGE: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
        static LOCK: Mutex<()> = Mutex::new(());
        let _g = LOCK.lock().unwrap_or_else(|p| p.into_inner());
        let mut page = PAGE.load(Relaxed);
        if page.is_null() {
            // SAFETY: a fresh anonymous private mapping, never unmapped.
            page = unsafe {
                mmap_anonymous(
                    std::ptr::null_mut(),
                    4096,
                    ProtFlags::READ | ProtFlags::WRITE,
                    MapFlags::PRIVATE,
                )
            }
            .map_err(|e| e.raw_os_error())? as *mut u8;
            PAGE.store(page, Relaxed);
        }
        // SAFETY: `page` is our mapping; only this function changes its protection, under LOCK.
        unsafe {
            mprotect(
                page.cast(),
                4096,
                MprotectFlags::READ | MprotectFlags::WRITE,
            )
            .map_err(|e| e.raw_os_error())?;
            // Dirty the page so the PTE is present and writable: removing write permission
            // then forces a TLB shoot-down on every CPU that may cache it.
            std::ptr::write_volatile(page, std::ptr::read_volatile(page).wrapping_add(1));
            mprotect(page.cast(), 4096, MprotectFlags::READ).map_err(|e| e.raw_os_error())
        }
    }
}

#[cfg(any(not(target_os = "linux"), loom))]
mod sys {
    use super::Method;
    pub(super) fn barrier(method: Method) -> Result<(), i32> {
        match method {
            Method::Fence => {
                crate::primitives::fence(super::SeqCst);
                Ok(())
            }
            _ => Err(0),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn every_method_either_works_or_says_why() {
        for m in [
            Method::MembarrierExpedited,
            Method::Mprotect,
            Method::MembarrierGlobal,
            Method::Fence,
        ] {
            match barrier(m) {
                Ok(()) => {}
                Err(e) => {
                    assert_eq!(e.method, m);
                    assert!(e.to_string().contains(m.name()));
                }
            }
        }
        // mprotect works on every x86-64 Linux without a seccomp filter, so heavy() has a
        // real barrier here.
        if cfg!(target_arch = "x86_64") {
            assert_ne!(heavy_method(), Method::Fence);
        }
        // On AArch64 light() is a full fence exactly when heavy() is one.
        if cfg!(target_arch = "aarch64") {
            let method = heavy_method();
            assert_eq!(light_fences(), method == Method::Fence);
            assert_eq!(
                barrier(Method::Mprotect).map_err(|e| e.method),
                Err(Method::Mprotect)
            );
        }
    }

    #[test]
    fn concurrent_heavy_calls_share_barriers_and_all_return() {
        let c = Coalescer::new();
        let issued = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..200 {
                        c.heavy_with(|| {
                            issued.fetch_add(1, Relaxed);
                            std::thread::sleep(std::time::Duration::from_micros(50));
                        });
                    }
                });
            }
        });
        let issued = issued.load(Relaxed);
        // Every call returned; each was covered by a barrier, and at most one per call ran.
        assert!((1..=8 * 200).contains(&issued), "issued {issued}");
        assert_eq!(c.calls.load(Relaxed), 8 * 200);
        assert_eq!(c.state.load(Relaxed) >> 1, issued);
        assert_eq!(c.done.load(Relaxed), issued);
    }
}

/// Loom model of the coalescing logic. Each caller stores its "write" (`w[i] = 1`, Relaxed)
/// and calls `heavy_with`; the barrier is modelled by a recorder that, like a real barrier,
/// observes every write that was globally visible when it started, and records which callers'
/// writes it saw. When `heavy_with` returns to caller `i`, some barrier must have seen `w[i]`.
/// Mutant checked by hand: with `target = state >> 1` (joining a barrier already in flight)
/// the three-caller model fails.
#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::sync::atomic::AtomicBool;
    use loom::sync::Arc;

    struct Shared {
        c: Coalescer,
        w: Vec<AtomicU64>,
        seen: Vec<AtomicBool>,
    }

    fn barrier_recorder(s: &Shared) {
        for (w, seen) in s.w.iter().zip(&s.seen) {
            if w.load(SeqCst) == 1 {
                seen.store(true, Relaxed);
            }
        }
    }

    fn model(callers: usize, preemption_bound: usize) {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(preemption_bound);
        b.check(move || {
            let s = Arc::new(Shared {
                c: Coalescer::new(),
                w: (0..callers).map(|_| AtomicU64::new(0)).collect(),
                seen: (0..callers).map(|_| AtomicBool::new(false)).collect(),
            });
            let handles: Vec<_> = (1..callers)
                .map(|i| {
                    let s = s.clone();
                    loom::thread::spawn(move || caller(&s, i))
                })
                .collect();
            caller(&s, 0);
            for h in handles {
                h.join().unwrap();
            }
        });
    }

    fn caller(s: &Shared, i: usize) {
        s.w[i].store(1, Relaxed);
        s.c.heavy_with(|| barrier_recorder(s));
        assert!(
            s.seen[i].load(Relaxed),
            "caller {i} returned without a barrier that saw its write"
        );
    }

    #[test]
    fn two_callers() {
        model(2, 3);
    }

    #[test]
    fn three_callers() {
        model(3, 2);
    }
}
