//! [`TicketLock`]: a fair (FIFO) ticket spinlock with the same pause-then-yield policy as
//! [`SpinLock`](super::SpinLock) (the `ticket_spinlock` of Malte Skarupke's "Measuring Mutexes, Spinlocks and how Bad the Linux
//! Scheduler Really is", 2020).
//!
//! # Protocol
//!
//! Two words: `next` (the next ticket to hand out) and `serving` (the ticket that may hold the
//! lock). Both wrap at 2³²; only equality is ever tested, so wrapping is harmless as long as
//! fewer than 2³² threads wait at once.
//!
//! - `lock`: `my = next.fetch_add(1, Relaxed)`; wait until `serving.load(Acquire) == my`,
//!   pausing 16 times between reads and then yielding ([`Backoff`](super::Backoff)).
//! - `unlock`: `serving.store(serving.load(Relaxed) + 1, Release)`. Only the holder writes
//!   `serving`, so a plain load and store suffice (no locked instruction: that post notes that a
//!   `fetch_add` here makes the uncontended path twice as slow); the store must be `Release`.
//! - `try_lock`: read `t = next` and check `serving == t` (nobody holds or waits), then
//!   `compare_exchange(t, t + 1)` on `next`. If the CAS succeeds, nobody took a ticket in
//!   between, so nobody could have advanced `serving` either (advancing it needs the lock):
//!   `serving` is still `t` and the ticket `t` we took is being served.
//!
//! Invariant: the holder is the thread whose ticket equals `serving`; tickets are unique because
//! `fetch_add` is one atomic RMW; `serving` only moves when its holder unlocks.
//!
//! Orderings: the waiter's `Acquire` load that sees `serving == my` reads from the previous
//! holder's `Release` store, ordering the critical sections. Taking a ticket needs no
//! ordering: it only fixes the position in the queue. Under x86-TSO every one of these is a
//! plain `mov` except the `lock xadd`.
//!
//! Fairness: strictly FIFO, which is exactly its weakness under oversubscription: when the
//! next ticket's owner is not running, nobody else may take the lock (a lock convoy).
//!
//! Linearisation points: `lock` at the load that sees its ticket served (its queue position is
//! fixed at the `fetch_add`), `unlock` at the store, `try_lock` at the successful CAS.

use super::Backoff;
use crate::primitives::{AtomicU32, Ordering::*};

/// FIFO ticket spinlock that pauses 16 times, then yields.
pub struct TicketLock {
    next: AtomicU32,
    serving: AtomicU32,
}

/// A [`lock_api::Mutex`] over [`TicketLock`].
#[cfg(not(loom))]
pub type TicketMutex<T> = lock_api::Mutex<TicketLock, T>;

impl TicketLock {
    super::maybe_const_fn! {
        /// An unlocked lock.
        pub fn new() -> TicketLock {
            TicketLock {
                next: AtomicU32::new(0),
                serving: AtomicU32::new(0),
            }
        }
    }

    /// Takes a ticket and waits for it to be served.
    #[inline]
    pub fn lock(&self) {
        let my = self.next.fetch_add(1, Relaxed);
        if self.serving.load(Acquire) != my {
            self.wait_for(my);
        }
    }

    #[cold]
    #[inline(never)]
    fn wait_for(&self, my: u32) {
        let mut backoff = Backoff::new();
        loop {
            backoff.snooze();
            if self.serving.load(Acquire) == my {
                return;
            }
        }
    }

    /// Acquires the lock if nobody holds it or waits for it.
    #[inline]
    pub fn try_lock(&self) -> bool {
        let t = self.next.load(Relaxed);
        self.serving.load(Acquire) == t
            && self
                .next
                .compare_exchange(t, t.wrapping_add(1), Acquire, Relaxed)
                .is_ok()
    }

    /// Serves the next ticket.
    ///
    /// # Safety
    ///
    /// The caller holds the lock.
    #[inline]
    pub unsafe fn unlock(&self) {
        let s = self.serving.load(Relaxed);
        self.serving.store(s.wrapping_add(1), Release);
    }

    /// Whether some thread holds the lock (a racy snapshot).
    #[inline]
    pub fn is_locked(&self) -> bool {
        self.next.load(Relaxed) != self.serving.load(Relaxed)
    }
}

super::raw_mutex_impl!(TicketLock);
