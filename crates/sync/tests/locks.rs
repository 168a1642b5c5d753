//! Stress tests of every lock on real threads, oversubscribed (4 threads per CPU, at least 8):
//! count mutual-exclusion breaches and lost increments, assert zero. No timing is asserted.

#![cfg(not(loom))]

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::*};

use lock_api::{Mutex, RawMutex};
use spindle_sync::lock::{FutexMutex, SpinLock, SpindleLock, TicketLock};

mod common;

/// Threads of every test: 4 per CPU.
fn threads() -> usize {
    common::per_cpu(4, 8)
}

/// State guarded by the lock under test: a plain (non-atomic) counter, and an "inside" flag
/// that a second thread in the critical section would find set.
struct Guarded<R: RawMutex> {
    lock: R,
    inside: AtomicBool,
    count: UnsafeCell<u64>,
}

// SAFETY: `count` is only accessed with `lock` held (that is what the test checks).
unsafe impl<R: RawMutex + Sync> Sync for Guarded<R> {}

/// `threads()` threads each take the lock `rounds` times through the raw API (every fourth
/// attempt through `try_lock`, falling back to `lock`); returns the number of breaches seen.
fn hammer<R: RawMutex + Sync>(rounds: u64) -> u64 {
    let g = Guarded {
        lock: R::INIT,
        inside: AtomicBool::new(false),
        count: UnsafeCell::new(0),
    };
    let breaches = AtomicU64::new(0);
    let try_hits = AtomicUsize::new(0);
    let (g, breaches, try_hits) = (&g, &breaches, &try_hits);
    std::thread::scope(|s| {
        for _ in 0..threads() {
            s.spawn(move || {
                for i in 0..rounds {
                    if i % 4 == 0 && g.lock.try_lock() {
                        try_hits.fetch_add(1, Relaxed);
                    } else {
                        g.lock.lock();
                    }
                    assert!(g.lock.is_locked());
                    if g.inside.swap(true, Relaxed) {
                        breaches.fetch_add(1, Relaxed);
                    }
                    // SAFETY: the lock is held (or the breach is counted and the test fails).
                    unsafe { *g.count.get() += 1 };
                    if !g.inside.swap(false, Relaxed) {
                        breaches.fetch_add(1, Relaxed);
                    }
                    // SAFETY: taken above.
                    unsafe { g.lock.unlock() };
                }
            });
        }
    });
    assert!(!g.lock.is_locked());
    // SAFETY: every thread has been joined.
    let count = unsafe { *g.count.get() };
    assert_eq!(count, rounds * threads() as u64, "lost increments");
    breaches.load(Relaxed)
}

/// The same through `lock_api::Mutex` guards, with `try_lock` and `MutexGuard::map`.
fn guards<R: RawMutex + Sync>(rounds: u64) {
    let m: Mutex<R, (u64, u64)> = Mutex::new((0, 0));
    std::thread::scope(|s| {
        for t in 0..threads() {
            let m = &m;
            s.spawn(move || {
                for i in 0..rounds {
                    let mut g = if (i + t as u64) % 3 == 0 {
                        match m.try_lock() {
                            Some(g) => g,
                            None => m.lock(),
                        }
                    } else {
                        m.lock()
                    };
                    // Two fields that must always move together.
                    assert_eq!(g.0, g.1, "a torn update was visible");
                    g.0 += 1;
                    let mut second = lock_api::MutexGuard::map(g, |p| &mut p.1);
                    *second += 1;
                }
            });
        }
    });
    let (a, b) = m.into_inner();
    assert_eq!(
        (a, b),
        (rounds * threads() as u64, rounds * threads() as u64)
    );
}

/// `total` critical sections in all, split across `threads()` threads (so the work, and the
/// test's duration, does not grow with the core count).
fn check<R: RawMutex + Sync>(total: u64) {
    let rounds = (total / threads() as u64).max(100);
    assert_eq!(hammer::<R>(rounds), 0, "mutual-exclusion breaches");
    guards::<R>(rounds / 2);
    // Uncontended try_lock semantics.
    let r = R::INIT;
    assert!(r.try_lock());
    assert!(!r.try_lock());
    assert!(r.is_locked());
    // SAFETY: taken above.
    unsafe { r.unlock() };
    assert!(!r.is_locked());
}

#[test]
fn spindle_mutex() {
    check::<SpindleLock>(800_000);
    let m = spindle_sync::lock::Mutex::new(5);
    *m.lock() += 1;
    assert_eq!(*m.lock(), 6);
}

#[test]
fn futex_mutex() {
    check::<FutexMutex>(800_000);
}

#[test]
fn spinlock() {
    check::<SpinLock>(800_000);
}

#[test]
fn ticket_lock() {
    // FIFO hand-off to descheduled threads: slow when oversubscribed, so fewer rounds.
    check::<TicketLock>(160_000);
}

/// Sleepers must be woken: one thread holds the lock long enough for the others to reach the
/// futex wait (they spin only briefly), then releases it. A lost wake-up hangs this test.
#[test]
fn sleeping_locks_wake_their_sleepers() {
    fn run<R: RawMutex + Sync>() {
        let m: Mutex<R, u64> = Mutex::new(0);
        let g = m.lock();
        std::thread::scope(|s| {
            for _ in 0..threads() {
                s.spawn(|| *m.lock() += 1);
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
            drop(g);
        });
        assert_eq!(m.into_inner(), threads() as u64);
    }
    for _ in 0..5 {
        run::<SpindleLock>();
        run::<FutexMutex>();
    }
}
