//! The futex layer: sleep while a 32-bit word holds an expected value; wake sleepers.
//!
//! A futex wait is a compare-and-block done by the kernel under its hash-bucket lock: the
//! kernel re-reads the word *after* queueing the waiter and sleeps only if it still holds
//! `expected`. A waker that changes the word and then calls `wake` therefore either finds the
//! waiter queued (and wakes it) or the waiter's re-read sees the new value (and it does not
//! sleep). That is the whole guarantee against lost wake-ups that every protocol in this crate
//! builds on: *change the word, then wake*; *publish "I may sleep" in the word, then wait on
//! the value that includes it*.
//!
//! What this module adds over the raw system call:
//! - deadlines are absolute points on `CLOCK_MONOTONIC` ([`Deadline`]), so a wait that is
//!   interrupted and restarted never extends its deadline (`FUTEX_WAIT_BITSET`, which takes an
//!   absolute time, unlike `FUTEX_WAIT`);
//! - `EINTR` restarts the wait inside; the caller sees [`WaitResult::Woken`],
//!   [`WaitResult::ValueChanged`] or [`WaitResult::TimedOut`] only;
//! - private (process-local, the default: cheaper hashing) and shared (process-shared memory)
//!   variants.
//!
//! A `Woken` result may be spurious (a stale wake aimed at an earlier use of the same word):
//! callers always re-check their condition, as every loop in this crate does.
//!
//! Under `--cfg loom` the internal `Parking` type replaces the kernel with a loom mutex and
//! condition variable that reproduce the compare-and-block semantics, so loom can find lost
//! wake-ups as deadlocks.

use std::num::NonZeroU32;

use rustix::io::Errno;
use rustix::thread::futex;

use crate::time::Deadline;

/// How a wait ended. Whatever the answer, re-check the condition you were waiting for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitResult {
    /// A `wake` call woke this thread (possibly one aimed at an earlier use of the word).
    Woken,
    /// The word did not hold the expected value, so the thread did not sleep.
    ValueChanged,
    /// The deadline passed.
    TimedOut,
}

/// Which processes can wake a futex word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Only threads of this process (`FUTEX_PRIVATE_FLAG`): the word's address alone is the key.
    Private,
    /// Any process mapping the same memory (the key is the underlying page).
    Shared,
}

impl Scope {
    fn flags(self) -> futex::Flags {
        match self {
            Scope::Private => futex::Flags::PRIVATE,
            Scope::Shared => futex::Flags::empty(),
        }
    }
}

/// Sleep while `*word == expected`, until woken or until `deadline` (`None`: no deadline).
/// Process-private.
pub fn wait(
    word: &std::sync::atomic::AtomicU32,
    expected: u32,
    deadline: Option<Deadline>,
) -> WaitResult {
    wait_in(Scope::Private, word, expected, deadline)
}

/// Wake up to `n` threads sleeping on `word`; returns how many were woken. Process-private.
pub fn wake(word: &std::sync::atomic::AtomicU32, n: u32) -> usize {
    wake_in(Scope::Private, word, n)
}

/// [`wait`] with an explicit [`Scope`]; use [`Scope::Shared`] for words in shared memory.
pub fn wait_in(
    scope: Scope,
    word: &std::sync::atomic::AtomicU32,
    expected: u32,
    deadline: Option<Deadline>,
) -> WaitResult {
    let timeout = deadline.map(Deadline::timespec);
    loop {
        // FUTEX_WAIT_BITSET with every bit set behaves as FUTEX_WAIT, except that its timeout
        // is an absolute CLOCK_MONOTONIC time.
        let r = futex::wait_bitset(
            word,
            scope.flags(),
            expected,
            timeout.as_ref(),
            NonZeroU32::MAX,
        );
        match r {
            Ok(()) => return WaitResult::Woken,
            Err(Errno::AGAIN) => return WaitResult::ValueChanged,
            Err(Errno::TIMEDOUT) => return WaitResult::TimedOut,
            // A signal handler ran; the absolute deadline makes restarting exact.
            Err(Errno::INTR) => continue,
            // EFAULT/EINVAL/ENOSYS cannot arise from a valid `&AtomicU32` on Linux ≥ 2.6.25;
            // treat anything else as a spurious wake-up: callers re-check their condition.
            Err(_) => return WaitResult::Woken,
        }
    }
}

/// [`wake`] with an explicit [`Scope`].
pub fn wake_in(scope: Scope, word: &std::sync::atomic::AtomicU32, n: u32) -> usize {
    // `n` above i32::MAX means "all" to the kernel only up to i32::MAX.
    futex::wake(word, scope.flags(), n.min(i32::MAX as u32)).unwrap_or(0)
}

/// `futex(word, FUTEX_WAKE_PRIVATE, all)` as one inline `syscall` instruction that the
/// compiler knows writes no memory (`readonly`): a wake uses the word's address as a key and
/// never writes user memory. For hot paths whose wake is rare (the single-producer event
/// count): the compiler need not reload what it holds in registers after it. It is declared
/// `readonly` rather than `nomem` (the kernel reads nothing either) on purpose: an asm that
/// may read memory cannot be moved above the caller's preceding atomic write of `word`, and
/// a wake hoisted above the write it announces would be a lost wake-up. Returns nothing:
/// callers that wake "all" do not need the count, and an error (the address is always valid)
/// changes nothing.
#[cfg(all(target_arch = "x86_64", target_os = "linux", not(loom), not(miri)))]
#[inline(always)]
pub(crate) fn wake_all_private_inline(word: &std::sync::atomic::AtomicU32) {
    const SYS_FUTEX: usize = 202;
    const FUTEX_WAKE_PRIVATE: usize = 1 | 128;
    // SAFETY: futex(2) with FUTEX_WAKE writes no user memory; it clobbers rax
    // (the result), rcx and r11 (the syscall instruction), as declared.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") SYS_FUTEX => _,
            in("rdi") word.as_ptr(),
            in("rsi") FUTEX_WAKE_PRIVATE,
            in("rdx") i32::MAX as usize,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack, readonly, preserves_flags),
        );
    }
}

/// The low (least significant) 32 bits of a 64-bit atomic word, as the address a futex call
/// takes. Only ever handed to the kernel, which reads it atomically; Rust code never performs
/// a 32-bit access to the 64-bit atomic, so there is no mixed-size access on our side.
#[cfg(not(any(loom, miri)))]
fn low_half(word: &std::sync::atomic::AtomicU64) -> &std::sync::atomic::AtomicU32 {
    #[cfg(not(target_endian = "little"))]
    compile_error!("spindle-sync assumes a little-endian target for 64-bit futex words");
    // SAFETY: the first four bytes of an 8-byte-aligned AtomicU64 are a 4-byte-aligned, live
    // u32 for as long as the borrow (little-endian: the least significant half); see above for
    // why no Rust access of that size happens.
    unsafe {
        &*(word as *const std::sync::atomic::AtomicU64).cast::<std::sync::atomic::AtomicU32>()
    }
}

/// The sleeping side of a protocol's futex word, in one place so that loom can replace it.
///
/// In a normal build this is a zero-sized handle over the functions above. Under loom it holds
/// a mutex and condition variable: `wait` checks the word under the mutex and sleeps on the
/// condition variable; `wake` takes the mutex and notifies. Because the waker changed the word
/// *before* taking the mutex, the model has exactly the kernel's compare-and-block guarantee.
/// Timed waits return `TimedOut` at once under loom (a legal, if impatient, schedule).
pub(crate) struct Parking {
    #[cfg(loom)]
    lock: loom::sync::Mutex<()>,
    #[cfg(loom)]
    cv: loom::sync::Condvar,
}

impl Parking {
    #[cfg(not(loom))]
    pub(crate) const fn new() -> Parking {
        Parking {}
    }

    #[cfg(loom)]
    pub(crate) fn new() -> Parking {
        Parking {
            lock: loom::sync::Mutex::new(()),
            cv: loom::sync::Condvar::new(),
        }
    }

    /// Sleep while `word == expected`.
    #[cfg(not(loom))]
    #[inline]
    pub(crate) fn wait32(
        &self,
        word: &crate::primitives::AtomicU32,
        expected: u32,
        deadline: Option<Deadline>,
    ) -> WaitResult {
        wait(word, expected, deadline)
    }

    /// Sleep while the low 32 bits of `word` equal `expected`.
    #[cfg(not(any(loom, miri)))]
    #[inline]
    pub(crate) fn wait64_low(
        &self,
        word: &crate::primitives::AtomicU64,
        expected: u32,
        deadline: Option<Deadline>,
    ) -> WaitResult {
        wait(low_half(word), expected, deadline)
    }

    /// Under Miri: poll the whole word, yielding, instead of handing its low half to the
    /// futex. Miri emulates the futex with a 4-byte atomic read of that half, and reports it
    /// as a mixed-size race with the protocol's 8-byte accesses; the kernel's read is no Rust
    /// access. (What Miri checks here is the code around the wait, not the futex.)
    #[cfg(all(miri, not(loom)))]
    pub(crate) fn wait64_low(
        &self,
        word: &crate::primitives::AtomicU64,
        expected: u32,
        deadline: Option<Deadline>,
    ) -> WaitResult {
        loop {
            if word.load(std::sync::atomic::Ordering::SeqCst) as u32 != expected {
                return WaitResult::ValueChanged;
            }
            if deadline.is_some_and(Deadline::has_passed) {
                return WaitResult::TimedOut;
            }
            std::thread::yield_now();
        }
    }

    #[cfg(not(loom))]
    #[inline]
    pub(crate) fn wake32(&self, word: &crate::primitives::AtomicU32, n: u32) -> usize {
        wake(word, n)
    }

    #[cfg(not(any(loom, miri)))]
    #[inline]
    pub(crate) fn wake64_low(&self, word: &crate::primitives::AtomicU64, n: u32) -> usize {
        wake(low_half(word), n)
    }

    /// Under Miri the waiters poll (see `wait64_low`): nobody to wake.
    #[cfg(all(miri, not(loom)))]
    pub(crate) fn wake64_low(&self, _word: &crate::primitives::AtomicU64, _n: u32) -> usize {
        0
    }

    #[cfg(loom)]
    fn model_wait(&self, still: impl Fn() -> bool, deadline: Option<Deadline>) -> WaitResult {
        let guard = self.lock.lock().unwrap();
        if !still() {
            return WaitResult::ValueChanged;
        }
        if deadline.is_some() {
            return WaitResult::TimedOut;
        }
        drop(self.cv.wait(guard).unwrap());
        WaitResult::Woken
    }

    #[cfg(loom)]
    pub(crate) fn wait32(
        &self,
        word: &crate::primitives::AtomicU32,
        expected: u32,
        deadline: Option<Deadline>,
    ) -> WaitResult {
        use crate::primitives::Ordering::SeqCst;
        self.model_wait(|| word.load(SeqCst) == expected, deadline)
    }

    #[cfg(loom)]
    pub(crate) fn wait64_low(
        &self,
        word: &crate::primitives::AtomicU64,
        expected: u32,
        deadline: Option<Deadline>,
    ) -> WaitResult {
        use crate::primitives::Ordering::SeqCst;
        self.model_wait(|| word.load(SeqCst) as u32 == expected, deadline)
    }

    #[cfg(loom)]
    pub(crate) fn wake32(&self, _word: &crate::primitives::AtomicU32, _n: u32) -> usize {
        drop(self.lock.lock().unwrap());
        self.cv.notify_all();
        1
    }

    #[cfg(loom)]
    pub(crate) fn wake64_low(&self, _word: &crate::primitives::AtomicU64, _n: u32) -> usize {
        drop(self.lock.lock().unwrap());
        self.cv.notify_all();
        1
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn wait_returns_at_once_when_the_value_differs() {
        let w = AtomicU32::new(1);
        assert_eq!(wait(&w, 0, None), WaitResult::ValueChanged);
        assert_eq!(
            wait_in(Scope::Shared, &w, 0, None),
            WaitResult::ValueChanged
        );
    }

    #[test]
    fn wait_times_out_at_an_absolute_deadline() {
        let w = AtomicU32::new(0);
        let deadline = Deadline::after(Duration::from_millis(20));
        assert_eq!(wait(&w, 0, Some(deadline)), WaitResult::TimedOut);
        assert!(deadline.has_passed());
        // A deadline in the past does not sleep.
        assert_eq!(
            wait(&w, 0, Some(Deadline::from_nanos(0))),
            WaitResult::TimedOut
        );
    }

    #[test]
    fn wake_reaches_a_sleeper() {
        let w = Arc::new(AtomicU32::new(0));
        let w2 = w.clone();
        let t = std::thread::spawn(move || {
            while w2.load(SeqCst) == 0 {
                wait(&w2, 0, Some(Deadline::after(Duration::from_secs(10))));
            }
        });
        std::thread::sleep(Duration::from_millis(10));
        w.store(1, SeqCst);
        wake(&w, 1);
        t.join().unwrap();
        assert_eq!(wake(&w, u32::MAX), 0, "nobody left to wake");
    }
}
