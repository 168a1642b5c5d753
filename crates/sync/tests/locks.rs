//! Stress tests of every lock on real threads, oversubscribed (4 threads per CPU, at least 8):
//! count mutual-exclusion breaches and lost increments, assert zero. No timing is asserted.
//! Each of a lock's two hammers (raw API, then guards) stops after its rounds or after
//! `SPINDLE_STRESS_SECONDS` (default 30; every thread does at least one round), whichever comes
//! first: under emulation (CI's AArch64 step caps it at 3 s) a FIFO lock's hand-offs to
//! descheduled threads are slow enough that the rounds alone took a minute.

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

/// Whether a thread that has done `i` of its `rounds` does another: always the first, none
/// past the rounds, and past the deadline none (the clock read every 64 rounds).
fn go_on(i: u64, rounds: u64, deadline: std::time::Instant) -> bool {
    i < rounds && (i % 64 != 0 || i == 0 || std::time::Instant::now() < deadline)
}

/// `threads()` threads each take the lock `rounds` times (or until the time cap) through the
/// raw API (every fourth attempt through `try_lock`, falling back to `lock`); returns the
/// number of breaches seen. Lost increments: the counter against the rounds the threads did.
fn hammer<R: RawMutex + Sync>(rounds: u64) -> u64 {
    let g = Guarded {
        lock: R::INIT,
        inside: AtomicBool::new(false),
        count: UnsafeCell::new(0),
    };
    let breaches = AtomicU64::new(0);
    let try_hits = AtomicUsize::new(0);
    let done = AtomicU64::new(0);
    let deadline = std::time::Instant::now() + common::time_limit();
    let (g, breaches, try_hits, done) = (&g, &breaches, &try_hits, &done);
    std::thread::scope(|s| {
        for _ in 0..threads() {
            s.spawn(move || {
                let mut i = 0;
                while go_on(i, rounds, deadline) {
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
                    i += 1;
                }
                done.fetch_add(i, Relaxed);
            });
        }
    });
    assert!(!g.lock.is_locked());
    // SAFETY: every thread has been joined.
    let count = unsafe { *g.count.get() };
    assert_eq!(count, done.load(Relaxed), "lost increments");
    breaches.load(Relaxed)
}

/// The same through `lock_api::Mutex` guards, with `try_lock` and `MutexGuard::map`.
fn guards<R: RawMutex + Sync>(rounds: u64) {
    let m: Mutex<R, (u64, u64)> = Mutex::new((0, 0));
    let done = AtomicU64::new(0);
    let deadline = std::time::Instant::now() + common::time_limit();
    std::thread::scope(|s| {
        for t in 0..threads() {
            let (m, done) = (&m, &done);
            s.spawn(move || {
                let mut i = 0;
                while go_on(i, rounds, deadline) {
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
                    i += 1;
                }
                done.fetch_add(i, Relaxed);
            });
        }
    });
    let (a, b) = m.into_inner();
    let done = done.load(Relaxed);
    assert_eq!((a, b), (done, done));
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

/// Spindle's handoff (see "Fairness" in `lock/mutex.rs`): critical sections long enough, one
/// in eight, that waiters pass a spin budget and claim the next acquisition, so that claims,
/// reserved free locks, claimants giving their claim up to sleep and queued waiters all
/// happen, mixed with `try_lock` (which must leave a reserved lock alone). Counts breaches
/// and lost increments; a lost wake-up hangs the test.
#[test]
fn spindle_mutex_handoffs_under_long_holds() {
    let g = Guarded {
        lock: SpindleLock::INIT,
        inside: AtomicBool::new(false),
        count: UnsafeCell::new(0),
    };
    let breaches = AtomicU64::new(0);
    let rounds = 800u64;
    let (g, breaches) = (&g, &breaches);
    std::thread::scope(|s| {
        for t in 0..threads() {
            s.spawn(move || {
                for i in 0..rounds {
                    if (i + t as u64) % 5 == 0 {
                        while !g.lock.try_lock() {
                            std::hint::spin_loop();
                        }
                    } else {
                        g.lock.lock();
                    }
                    if g.inside.swap(true, Relaxed) {
                        breaches.fetch_add(1, Relaxed);
                    }
                    // SAFETY: the lock is held (or the breach is counted and the test fails).
                    unsafe { *g.count.get() += 1 };
                    if (i + t as u64) % 8 == 0 {
                        // Several times the mutex's spin budget (`SPIN_BUDGET_NS`).
                        let until =
                            std::time::Instant::now() + std::time::Duration::from_micros(250);
                        while std::time::Instant::now() < until {
                            std::hint::spin_loop();
                        }
                    }
                    if !g.inside.swap(false, Relaxed) {
                        breaches.fetch_add(1, Relaxed);
                    }
                    // SAFETY: taken above.
                    unsafe { g.lock.unlock() };
                }
            });
        }
    });
    assert_eq!(breaches.load(Relaxed), 0, "mutual-exclusion breaches");
    assert!(!g.lock.is_locked());
    // SAFETY: every thread has been joined.
    let count = unsafe { *g.count.get() };
    assert_eq!(count, rounds * threads() as u64, "lost increments");
}

/// A child forked while another thread held the handoff claim inherits the claim but not the
/// thread: its lock must still be taken (over, after a spin budget), not reserved forever. The
/// parent holds the lock while waiters pass their spin budget and claim, then forks after a
/// delay that varies across attempts (a claim stands for about one budget, so some forks land
/// inside one); the child releases and re-takes the lock under a 5 s alarm (the atfork idiom).
#[test]
fn spindle_mutex_survives_fork_with_a_claim() {
    extern "C" {
        fn fork() -> i32;
        fn _exit(code: i32) -> !;
        fn waitpid(pid: i32, status: *mut i32, options: i32) -> i32;
        fn alarm(seconds: u32) -> u32;
    }
    if let Some(why) = common::emulated() {
        eprintln!("skipped: forks a multithreaded process, which hangs at times under {why}");
        return;
    }
    for attempt in 0..200u64 {
        let lock: &'static SpindleLock = Box::leak(Box::new(SpindleLock::INIT));
        lock.lock();
        let waiters: Vec<_> = (0..threads().min(8))
            .map(|_| {
                std::thread::spawn(move || {
                    lock.lock();
                    // SAFETY: taken above.
                    unsafe { lock.unlock() };
                })
            })
            .collect();
        let until = std::time::Instant::now() + std::time::Duration::from_micros(attempt % 50 * 4);
        while std::time::Instant::now() < until {
            std::hint::spin_loop();
        }
        // SAFETY: the child only releases and takes the lock (atomics, futex and clock calls)
        // and leaves with _exit; the parent waits for it.
        let pid = unsafe { fork() };
        if pid == 0 {
            // SAFETY: the child holds the lock (the parent did at the fork); then it exits
            // without running anything else of the parent's.
            unsafe {
                alarm(5);
                lock.unlock();
                lock.lock();
                _exit(0);
            }
        }
        assert!(pid > 0, "fork failed");
        let mut status = 0;
        // SAFETY: waits for the child just forked.
        assert_eq!(unsafe { waitpid(pid, &mut status, 0) }, pid);
        assert_eq!(
            status, 0,
            "attempt {attempt}: the child could not take its lock (status {status:#x}: 0xe is the alarm)"
        );
        // SAFETY: taken above.
        unsafe { lock.unlock() };
        for w in waiters {
            w.join().expect("waiter");
        }
    }
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

/// Spindle's `Condvar`: a bounded buffer (capacity 4) with a "not empty" and a "not full"
/// condition variable, `threads()` / 2 producers and as many consumers, every hand-over
/// signalled with `notify_one` (producers' and consumers' waits mixed: `wait_while`, `wait_for`
/// with short timeouts, plain `wait` in a loop). Lost notifications are what must never
/// happen: each wait is bounded (`wait_while_for`, 2 s), and a wait that times out while its
/// condition had already become false counts as one. Also checks that every item arrives once
/// and that `notify_all` at the end releases every consumer.
#[test]
fn condvar_bounded_buffer_loses_no_notification() {
    use spindle_sync::lock::{Condvar, Mutex};
    use std::collections::VecDeque;
    use std::time::{Duration, Instant};

    struct Buffer {
        items: VecDeque<u64>,
        done: bool,
    }
    const CAPACITY: usize = 4;
    const PATIENCE: Duration = Duration::from_secs(2);
    common::heartbeat();
    let side = (threads() / 2).max(2);
    let per_producer: u64 = if cfg!(debug_assertions) {
        20_000
    } else {
        200_000
    };
    let buf = Mutex::new(Buffer {
        items: VecDeque::new(),
        done: false,
    });
    let (not_empty, not_full) = (Condvar::new(), Condvar::new());
    let lost = AtomicU64::new(0);
    let sum = AtomicU64::new(0);
    let received = AtomicU64::new(0);
    let started = Instant::now();
    let limit = common::time_limit();
    let (buf, not_empty, not_full, lost, sum, received) =
        (&buf, &not_empty, &not_full, &lost, &sum, &received);
    let sent = AtomicU64::new(0);
    let sent = &sent;
    std::thread::scope(|s| {
        let producers: Vec<_> = (0..side)
            .map(|p| {
                s.spawn(move || {
                    for i in 0..per_producer {
                        if started.elapsed() > limit {
                            break;
                        }
                        let mut g = buf.lock();
                        let t0 = Instant::now();
                        let r = not_full.wait_while_for(
                            &mut g,
                            |b| b.items.len() >= CAPACITY,
                            PATIENCE,
                        );
                        if r.timed_out() {
                            // Consumers exist and drain: a full buffer for 2 s means a
                            // consumer slept through a "not empty" or we through "not full".
                            drop(g);
                            if !common::heartbeat().excuses("a producer", t0, PATIENCE) {
                                lost.fetch_add(1, Relaxed);
                            }
                            continue;
                        }
                        let item = (p as u64) << 32 | i;
                        g.items.push_back(item);
                        sent.fetch_add(item, Relaxed);
                        drop(g);
                        not_empty.notify_one();
                    }
                })
            })
            .collect();
        for c in 0..side {
            s.spawn(move || loop {
                let mut g = buf.lock();
                match c % 3 {
                    0 => {
                        let t0 = Instant::now();
                        let r = not_empty.wait_while_for(
                            &mut g,
                            |b| b.items.is_empty() && !b.done,
                            PATIENCE,
                        );
                        if r.timed_out()
                            && !g.items.is_empty()
                            && !common::heartbeat().excuses("a consumer", t0, PATIENCE)
                        {
                            lost.fetch_add(1, Relaxed);
                        }
                    }
                    1 => {
                        while g.items.is_empty() && !g.done {
                            not_empty.wait_for(&mut g, Duration::from_micros(200));
                        }
                    }
                    _ => {
                        let t0 = Instant::now();
                        let deadline = t0 + PATIENCE;
                        while g.items.is_empty() && !g.done {
                            if not_empty.wait_until(&mut g, deadline).timed_out() {
                                if !g.items.is_empty()
                                    && !common::heartbeat().excuses("a consumer", t0, PATIENCE)
                                {
                                    lost.fetch_add(1, Relaxed);
                                }
                                break;
                            }
                        }
                    }
                }
                match g.items.pop_front() {
                    Some(item) => {
                        drop(g);
                        sum.fetch_add(item, Relaxed);
                        received.fetch_add(1, Relaxed);
                        not_full.notify_one();
                    }
                    None if g.done => break,
                    None => {}
                }
            });
        }
        for p in producers {
            p.join().unwrap();
        }
        buf.lock().done = true;
        not_empty.notify_all();
    });
    eprintln!(
        "Condvar bounded buffer: {side} producers, {side} consumers, {} items in {:.1} s, {} lost notifications",
        received.load(Relaxed),
        started.elapsed().as_secs_f64(),
        lost.load(Relaxed)
    );
    assert_eq!(lost.load(Relaxed), 0, "lost notifications");
    assert_eq!(
        sum.load(Relaxed),
        sent.load(Relaxed),
        "items lost or doubled"
    );
    assert!(received.load(Relaxed) > 0);
}

#[test]
fn condvar_timeouts_and_notify_counts() {
    use spindle_sync::lock::{Condvar, Mutex};
    use std::time::{Duration, Instant};

    let m = Mutex::new(0u32);
    let cv = Condvar::new();
    assert!(!cv.notify_one(), "nobody waits");
    assert_eq!(cv.notify_all(), 0);
    let mut g = m.lock();
    let t = Instant::now();
    assert!(cv.wait_for(&mut g, Duration::from_millis(20)).timed_out());
    assert!(t.elapsed() >= Duration::from_millis(20));
    assert!(cv
        .wait_while_until(
            &mut g,
            |v| *v == 0,
            Instant::now() + Duration::from_millis(5)
        )
        .timed_out());
    assert!(!cv
        .wait_while_for(&mut g, |v| *v != 0, Duration::from_secs(5))
        .timed_out());
    drop(g);
    // Three sleepers, one notify_all: all three return, and it reports how many it woke.
    let woken = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                let mut g = m.lock();
                cv.wait_while(&mut g, |v| *v == 0);
                woken.fetch_add(1, Relaxed);
            });
        }
        // Wait until all three are registered (each holds no lock while asleep).
        while format!("{cv:?}") != "Condvar { waiters: 3 }" {
            std::thread::yield_now();
        }
        *m.lock() = 1;
        let n = cv.notify_all();
        assert!(n <= 3, "woke {n}");
    });
    assert_eq!(woken.load(Relaxed), 3);
}

/// Spindle's `Condvar` in strict hand-offs, where nothing but the notify can end a wait:
/// `threads()` / 2 pairs, each passing a turn back and forth through one mutex and one
/// condition variable (`notify_one` after every pass). A waiter that sleeps through its
/// notification has nobody else to wake it: its `wait_while_for` (2 s) times out and counts a
/// lost notification (unless the process was frozen: `common::Heartbeat`). (The bounded-buffer test cannot see one: there the next hand-over
/// repairs it.)
#[test]
fn condvar_hand_offs_lose_no_notification() {
    use spindle_sync::lock::{Condvar, Mutex};
    use std::time::{Duration, Instant};

    const PATIENCE: Duration = Duration::from_secs(2);
    common::heartbeat();
    let pairs = (threads() / 2).max(2);
    let passes: u64 = if cfg!(debug_assertions) {
        5_000
    } else {
        50_000
    };
    let lost = AtomicU64::new(0);
    let done = AtomicU64::new(0);
    let started = Instant::now();
    let limit = common::time_limit();
    std::thread::scope(|s| {
        for _ in 0..pairs {
            let (lost, done) = (&lost, &done);
            let shared = std::sync::Arc::new((Mutex::new(0u64), Condvar::new()));
            for side in 0..2u64 {
                let shared = shared.clone();
                s.spawn(move || {
                    let (turn, cv) = (&shared.0, &shared.1);
                    let mut g = turn.lock();
                    while *g < 2 * passes {
                        if started.elapsed() > limit {
                            *g = u64::MAX - 1;
                            cv.notify_one();
                            break;
                        }
                        if *g % 2 == side {
                            *g += 1;
                            done.fetch_add(1, Relaxed);
                            cv.notify_one();
                            continue;
                        }
                        let t0 = Instant::now();
                        let r = cv.wait_while_for(
                            &mut g,
                            |t| *t % 2 != side && *t < 2 * passes,
                            PATIENCE,
                        );
                        if r.timed_out() {
                            if !common::heartbeat().excuses("a hand-off side", t0, PATIENCE) {
                                lost.fetch_add(1, Relaxed);
                            }
                            *g = u64::MAX - 1;
                            cv.notify_one();
                        }
                    }
                });
            }
        }
    });
    eprintln!(
        "Condvar hand-offs: {pairs} pairs, {} passes in {:.1} s, {} lost notifications",
        done.load(Relaxed),
        started.elapsed().as_secs_f64(),
        lost.load(Relaxed)
    );
    assert_eq!(lost.load(Relaxed), 0, "lost notifications");
    assert!(done.load(Relaxed) > 0);
}
