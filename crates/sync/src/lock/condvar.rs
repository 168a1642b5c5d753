//! A condition variable for Spindle's [`Mutex`](super::Mutex), with parking_lot's API: `wait`,
//! `wait_for`, `wait_until`, `wait_while` (and its timed forms), `notify_one`, `notify_all`.
//!
//! Users who move from std's or parking_lot's mutex bring their condition variables along;
//! this is the one that goes with Spindle's lock.
//!
//! # The words
//!
//! - `seq` (`u32`, the futex word): an event count of notifications. Every notify that finds
//!   a waiter adds 1 before it wakes anybody.
//! - `waiters` (`u32`): threads between their registration in `wait` (made while they hold the
//!   mutex) and their wake-up. A notify that reads 0 makes no system call.
//!
//! # Protocol
//!
//! ```text
//! wait(guard):                          // the caller holds the mutex
//!     waiters += 1                      // lock xadd
//!     s = seq
//!     unlock; futex_wait(seq, s, deadline); waiters -= 1
//!     lock                              // the Mutex's re-lock after a wait: its first polls
//!                                       // come sooner (the notifier releases soon)
//! notify_one / notify_all:
//!     if waiters == 0: return           // nobody registered: no system call
//!     seq += 1                          // lock xadd
//!     futex_wake(seq, 1 / all)
//! ```
//!
//! **No lost notification.** Take a waiter W and a notify N that is ordered after W released
//! the mutex — N's caller changed the waited-for state under the mutex after W checked it,
//! which is how a condition variable must be used (a state change made without the mutex can
//! race with a waiter's check under any condition variable). W's increment of `waiters` and
//! its load of `seq` happen before W's unlock, which happens before N through the mutex. So
//! N's load of `waiters` sees W's increment (W decrements only after it woke), and N's
//! increment of `seq` comes after W's load in `seq`'s modification order: the value W
//! compares against is gone. The kernel compares `seq` with `s` under the futex bucket lock
//! that `futex_wake` takes too: either W compares after N's increment and does not sleep, or
//! W is queued before N's wake. `notify_all` wakes every queued thread. `notify_one` wakes one
//! queued thread: the longest queued of equal priority (Linux queues futex waiters in
//! priority order, FIFO within a priority), hence W or a thread that queued before it; a
//! thread that started waiting after N can be woken instead only if it has a higher priority,
//! and then it returns from its wait as from a spurious wake-up while W sleeps on — the same
//! as std's futex condition variable on Linux.
//!
//! **No thundering herd, no requeue.** `notify_one` wakes at most one sleeper (the event
//! counts wake every sleeper on a signal, which suits a version but not a condition
//! variable). `notify_all` wakes them all, and they contend for the mutex, which Spindle's
//! Mutex bounds (its waiters poll at a bounded total rate and sleep after 20 µs); parking_lot
//! instead requeues them onto the mutex's queue with one more futex operation, which this
//! design leaves out.
//!
//! **Spurious wake-ups.** A wait can return without a notify aimed at it (a notify that came
//! between its registration and its sleep, or `notify_one` taken by a later waiter as above).
//! Loop on the condition, or use [`Condvar::wait_while`].
//!
//! **Orderings.** The mutex orders the waited-for state. `waiters` and `seq` are read and
//! changed with `SeqCst` read-modify-writes and loads (a `lock`ed instruction or a plain
//! `mov` on x86): the argument above uses only the mutex's happens-before and each word's
//! modification order.
//!
//! **Linearisation.** A notify: its increment of `seq`. A wait: its load of `seq` (it waits
//! for notifies after that point).
//!
//! Loom models are in `loom_models.rs` (under loom a futex wake reaches every sleeper, so the
//! models check that no notification is lost, not that `notify_one` wakes exactly one);
//! `tests/locks.rs` runs a bounded buffer with two condition variables under 4 × CPUs threads
//! and counts lost notifications.

#[cfg(not(loom))]
use std::time::{Duration, Instant};

use crate::futex::{Parking, WaitResult};
use crate::primitives::{AtomicU32, Ordering::*};
use crate::time::Deadline;

use super::SpindleLock;

/// The guard [`Condvar`] takes: a guard of Spindle's `lock_api` mutex.
#[cfg(not(loom))]
pub type Guard<'a, T> = lock_api::MutexGuard<'a, SpindleLock, T>;

/// A condition variable for [`Mutex`](super::Mutex): see the [module documentation](self).
///
/// ```
/// use spindle_sync::lock::{Condvar, Mutex};
///
/// let pair = (Mutex::new(false), Condvar::new());
/// std::thread::scope(|s| {
///     s.spawn(|| {
///         *pair.0.lock() = true;
///         pair.1.notify_one();
///     });
///     let mut ready = pair.0.lock();
///     pair.1.wait_while(&mut ready, |ready| !*ready);
///     assert!(*ready);
/// });
/// ```
pub struct Condvar {
    seq: AtomicU32,
    waiters: AtomicU32,
    parking: Parking,
}

/// Whether a timed wait returned because its time ran out (parking_lot's type of the same
/// name).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitTimeoutResult(bool);

impl WaitTimeoutResult {
    /// The wait ended because its timeout passed (the condition may still have become true).
    pub fn timed_out(self) -> bool {
        self.0
    }
}

impl Default for Condvar {
    fn default() -> Self {
        Condvar::new()
    }
}

impl std::fmt::Debug for Condvar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Condvar")
            .field("waiters", &self.waiters.load(Relaxed))
            .finish()
    }
}

impl Condvar {
    /// A condition variable with no waiters.
    #[cfg(not(loom))]
    pub const fn new() -> Condvar {
        Condvar {
            seq: AtomicU32::new(0),
            waiters: AtomicU32::new(0),
            parking: Parking::new(),
        }
    }

    /// A condition variable with no waiters.
    #[cfg(loom)]
    pub fn new() -> Condvar {
        Condvar {
            seq: AtomicU32::new(0),
            waiters: AtomicU32::new(0),
            parking: Parking::new(),
        }
    }

    /// Wake one thread blocked on this condition variable; returns whether one was woken
    /// (false also when none was waiting, which costs no system call).
    #[inline]
    pub fn notify_one(&self) -> bool {
        if self.waiters.load(SeqCst) == 0 {
            return false;
        }
        self.notify_slow(1) > 0
    }

    /// Wake every thread blocked on this condition variable; returns how many were woken.
    #[inline]
    pub fn notify_all(&self) -> usize {
        if self.waiters.load(SeqCst) == 0 {
            return 0;
        }
        self.notify_slow(i32::MAX as u32)
    }

    #[cold]
    #[inline(never)]
    fn notify_slow(&self, n: u32) -> usize {
        self.seq.fetch_add(1, SeqCst);
        self.parking.wake32(&self.seq, n)
    }

    #[cfg(not(loom))]
    /// Block until notified, with the mutex released meanwhile and held again on return. May
    /// return spuriously (see the [module documentation](self)).
    pub fn wait<T: ?Sized>(&self, guard: &mut Guard<'_, T>) {
        self.wait_deadline(guard, None);
    }

    #[cfg(not(loom))]
    /// [`wait`](Self::wait), giving up at `timeout`.
    pub fn wait_until<T: ?Sized>(
        &self,
        guard: &mut Guard<'_, T>,
        timeout: Instant,
    ) -> WaitTimeoutResult {
        let left = timeout.saturating_duration_since(Instant::now());
        WaitTimeoutResult(self.wait_deadline(guard, Some(Deadline::after(left))))
    }

    #[cfg(not(loom))]
    /// [`wait`](Self::wait), giving up after `timeout`.
    pub fn wait_for<T: ?Sized>(
        &self,
        guard: &mut Guard<'_, T>,
        timeout: Duration,
    ) -> WaitTimeoutResult {
        WaitTimeoutResult(self.wait_deadline(guard, Some(Deadline::after(timeout))))
    }

    #[cfg(not(loom))]
    /// Block while `condition` holds for the protected value (checked first, and after every
    /// wake-up, with the mutex held).
    pub fn wait_while<T: ?Sized, F>(&self, guard: &mut Guard<'_, T>, mut condition: F)
    where
        F: FnMut(&mut T) -> bool,
    {
        while condition(&mut **guard) {
            self.wait(guard);
        }
    }

    #[cfg(not(loom))]
    /// [`wait_while`](Self::wait_while), giving up at `timeout`; `timed_out()` is true if the
    /// condition still held then.
    pub fn wait_while_until<T: ?Sized, F>(
        &self,
        guard: &mut Guard<'_, T>,
        condition: F,
        timeout: Instant,
    ) -> WaitTimeoutResult
    where
        F: FnMut(&mut T) -> bool,
    {
        let left = timeout.saturating_duration_since(Instant::now());
        self.wait_while_deadline(guard, condition, Deadline::after(left))
    }

    #[cfg(not(loom))]
    /// [`wait_while`](Self::wait_while), giving up after `timeout`.
    pub fn wait_while_for<T: ?Sized, F>(
        &self,
        guard: &mut Guard<'_, T>,
        condition: F,
        timeout: Duration,
    ) -> WaitTimeoutResult
    where
        F: FnMut(&mut T) -> bool,
    {
        self.wait_while_deadline(guard, condition, Deadline::after(timeout))
    }

    #[cfg(not(loom))]
    fn wait_while_deadline<T: ?Sized, F>(
        &self,
        guard: &mut Guard<'_, T>,
        mut condition: F,
        deadline: Deadline,
    ) -> WaitTimeoutResult
    where
        F: FnMut(&mut T) -> bool,
    {
        while condition(&mut **guard) {
            if self.wait_deadline(guard, Some(deadline)) {
                return WaitTimeoutResult(condition(&mut **guard));
            }
        }
        WaitTimeoutResult(false)
    }

    /// The protocol's wait on the guard's mutex; returns whether the deadline passed.
    #[cfg(not(loom))]
    fn wait_deadline<T: ?Sized>(
        &self,
        guard: &mut Guard<'_, T>,
        deadline: Option<Deadline>,
    ) -> bool {
        // SAFETY: the guard proves the lock is held; `wait_raw` releases and retakes it before
        // returning, and the guard (borrowed mutably meanwhile) is not used in between.
        unsafe { self.wait_raw(lock_api::MutexGuard::mutex(guard).raw(), deadline) }
    }

    /// The protocol's wait on a raw lock the caller holds (see the [module
    /// documentation](self)); returns whether the deadline passed. The lock is held again on
    /// return.
    ///
    /// # Safety
    /// The calling thread holds `lock`.
    pub(crate) unsafe fn wait_raw(&self, lock: &SpindleLock, deadline: Option<Deadline>) -> bool {
        self.waiters.fetch_add(1, SeqCst);
        let s = self.seq.load(SeqCst);
        // SAFETY: the caller holds the lock.
        unsafe { lock.unlock() };
        let r = self.parking.wait32(&self.seq, s, deadline);
        self.waiters.fetch_sub(1, SeqCst);
        lock.lock_after_wait();
        // A wake or a changed word can come after the deadline: it still ends a timed wait.
        r == WaitResult::TimedOut || deadline.is_some_and(Deadline::has_passed)
    }
}
