//! Stress tests of the two-word single-producer event count ([`TwoWordEventCount`]) under
//! oversubscription, counting what must never happen:
//!
//! - a **lost wake-up**: after a burst of signals the producer waits until every waiter has
//!   seen the burst's last version; a waiter that has not, 3 s later, slept through a signal
//!   (unless the heartbeat shows the process was not run). Waiters without deadline, with
//!   long deadlines (10 s) and with short ones (20–500 µs) all take part;
//! - a **late wake-up** ([`TwoWordEventCount::late_wakeups`]): a sleep that ended at its
//!   deadline although the version had moved, in a test whose waiters announce themselves
//!   exactly while the producer publishes bursts of 1–4 signals (the window the two fences
//!   close) and sleep with 1 s deadlines;
//! - a wait that returns `Ok(v)` with `v` equal to the version it waited on, a `TimedOut`
//!   before the deadline or from a wait that had none;
//! - in a ping-pong between pairs of threads, each the producer of one count and the waiter
//!   of the other: a reply that is not the version expected, and a stall.
//!
//! Sizes: `SPINDLE_STRESS_SIGNALS` (default 10^7) signals for the first test,
//! `SPINDLE_STRESS_BURSTS` (default 10^6) bursts for the second, a tenth of the signals in
//! round trips for the third, each capped by `SPINDLE_STRESS_SECONDS` (default 30 s); CI's
//! AArch64 step under `qemu-aarch64` sets smaller ones. No timing is asserted.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::time::{Duration, Instant};

use spindle_sync::eventcount::{TimedOut, TwoWordEventCount};
use spindle_sync::Deadline;

mod common;
use common::wakeups::{handshake, Tally, HANDSHAKE_LIMIT};
use common::{time_limit, Rng};

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Waiters (`waiters` threads) wait on versions with `deadline(i, rng)` (which may dawdle
/// first); the producer runs rounds of `round` until it returns false (or as many as fit in
/// `SPINDLE_STRESS_SECONDS`), each followed by a handshake. Returns the count, the tally and
/// the rounds run.
fn run(
    waiters: usize,
    deadline: impl Fn(usize, &mut Rng) -> Option<Deadline> + Sync,
    round: impl Fn(&mut spindle_sync::eventcount::TwoWordProducer<'_>, &mut Rng) -> bool + Sync,
) -> (TwoWordEventCount, Tally, u64) {
    common::heartbeat();
    let ec = TwoWordEventCount::new();
    let seen: Vec<AtomicU64> = (0..waiters).map(|_| AtomicU64::new(0)).collect();
    let stop = AtomicBool::new(false);
    let tally = Tally::default();
    let started = Instant::now();
    let done = AtomicU64::new(0);
    std::thread::scope(|s| {
        for (i, seen_i) in seen.iter().enumerate() {
            let (ec, stop, tally, deadline) = (&ec, &stop, &tally, &deadline);
            s.spawn(move || {
                let mut rng = Rng(0x7e57_2e0d ^ (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
                loop {
                    // Version first, then the stop flag: the final signal comes after `stop`.
                    let old = ec.value();
                    if stop.load(Acquire) {
                        break;
                    }
                    seen_i.store(old, Release);
                    let d = deadline(i, &mut rng);
                    tally.wait(old, d, ec.wait(old, d));
                }
            });
        }
        let (ec, seen, tally, stop, done, round) = (&ec, &seen, &tally, &stop, &done, &round);
        s.spawn(move || {
            let mut producer = ec.producer().expect("the only producer");
            let mut rng = Rng(0x2e0d_f00d_5eed_0001);
            let mut n = 0;
            while started.elapsed() < time_limit() && round(&mut producer, &mut rng) {
                handshake(|| ec.value(), ec.value(), seen, tally);
                n += 1;
            }
            done.store(n, Relaxed);
            stop.store(true, Release);
            producer.increment();
        });
    });
    (ec, tally, done.into_inner())
}

/// Lost wake-ups with mixed deadlines and random bursts: 3 threads per CPU in all.
#[test]
fn two_word_no_lost_wakeups() {
    let total = env_or("SPINDLE_STRESS_SIGNALS", 10_000_000);
    let sent = AtomicU64::new(0);
    let started = Instant::now();
    let (ec, tally, rounds) = run(
        common::per_cpu(3, 7) - 1,
        |i, rng| {
            for _ in 0..rng.below(64) {
                std::hint::spin_loop();
            }
            match i % 5 {
                0 | 1 => None,
                2 | 3 => Some(Deadline::after(Duration::from_secs(10))),
                _ => Some(Deadline::after(Duration::from_micros(20 + rng.below(480)))),
            }
        },
        |p, rng| {
            if sent.load(Relaxed) >= total {
                return false;
            }
            // Half the bursts 1–8 signals (the race at a burst's end, often), half long.
            let k = if rng.next() & 1 == 0 {
                1 + rng.below(8)
            } else {
                1 + rng.below(8192)
            };
            for _ in 0..k {
                p.increment();
            }
            sent.fetch_add(k, Relaxed);
            true
        },
    );
    eprintln!(
        "TwoWordEventCount: {} signals, {} waits ({} timed out), {rounds} handshakes in {:.1} s",
        sent.load(Relaxed),
        tally.waits.load(Relaxed),
        tally.timeouts.load(Relaxed),
        started.elapsed().as_secs_f64()
    );
    tally.assert_sound();
    assert!(ec.value() >= sent.load(Relaxed));
}

/// The window the fences close: waiters (2 threads per CPU in all) re-read the version and
/// wait again at once, so that they announce themselves while the producer publishes its next
/// burst of 1–4 signals; every wait has a 1 s deadline, so a wake-up that the protocol lost
/// would show as a late one (the handshake waits 3 s) rather than as a hang.
#[test]
fn two_word_no_late_wakeups() {
    let bursts = env_or("SPINDLE_STRESS_BURSTS", 1_000_000);
    let started = Instant::now();
    let left = AtomicU64::new(bursts);
    let (ec, tally, rounds) = run(
        common::per_cpu(2, 4) - 1,
        |_, _| Some(Deadline::after(Duration::from_secs(1))),
        |p, rng| {
            if left.fetch_sub(1, Relaxed) == 0 {
                return false;
            }
            for _ in 0..1 + rng.below(4) {
                p.increment();
            }
            true
        },
    );
    eprintln!(
        "TwoWordEventCount, bursts of 1-4 signals: {rounds} bursts, {} waits ({} timed out), {} \
         late wake-ups in {:.1} s",
        tally.waits.load(Relaxed),
        tally.timeouts.load(Relaxed),
        ec.late_wakeups(),
        started.elapsed().as_secs_f64()
    );
    tally.assert_sound();
    assert_eq!(ec.late_wakeups(), 0, "late wake-ups in {rounds} bursts");
}

/// Pairs of threads (3 threads per CPU in all, rounded down to pairs) hand versions back and
/// forth: each is the producer of its own count and waits on its partner's, with a 3 s
/// deadline. Counts replies that are not the version expected, and stalls (a wait that timed
/// out while the process ran: a lost wake-up).
#[test]
fn two_word_ping_pong() {
    common::heartbeat();
    let pairs = (common::per_cpu(3, 6) / 2).max(2);
    let round_trips = (env_or("SPINDLE_STRESS_SIGNALS", 10_000_000) / 10 / pairs as u64).max(1);
    let wrong = AtomicU64::new(0);
    let stalls = AtomicU64::new(0);
    let done = AtomicU64::new(0);
    let started = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..pairs {
            let counts: &'static [TwoWordEventCount; 2] = Box::leak(Box::new([
                TwoWordEventCount::new(),
                TwoWordEventCount::new(),
            ]));
            let stop: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
            for side in 0..2usize {
                let (wrong, stalls, done) = (&wrong, &stalls, &done);
                s.spawn(move || {
                    let (mine, theirs) = (&counts[side], &counts[1 - side]);
                    let mut p = mine.producer().expect("one producer per count");
                    for v in 1..=round_trips {
                        if side == 0 {
                            if stop.load(Relaxed) || started.elapsed() > time_limit() {
                                stop.store(true, Relaxed);
                                // Let the partner go: it waits for version v.
                                p.increment();
                                return;
                            }
                            p.increment();
                        }
                        // Wait for the partner's version v (or its stop).
                        let mut seen = theirs.value();
                        while seen < v && !stop.load(Relaxed) {
                            let start = Instant::now();
                            let d = Deadline::after(HANDSHAKE_LIMIT);
                            match theirs.wait(seen, Some(d)) {
                                Ok(next) => seen = next,
                                Err(TimedOut) => {
                                    let what = format!("ping-pong side {side} at {v}");
                                    if !common::heartbeat().excuses(&what, start, HANDSHAKE_LIMIT) {
                                        stalls.fetch_add(1, Relaxed);
                                    }
                                    seen = theirs.value();
                                }
                            }
                        }
                        if stop.load(Relaxed) && seen < v {
                            if side == 1 {
                                p.increment();
                            }
                            return;
                        }
                        if seen != v {
                            wrong.fetch_add(1, Relaxed);
                        }
                        if side == 1 {
                            p.increment();
                        }
                        done.fetch_add(1, Relaxed);
                    }
                });
            }
        }
    });
    eprintln!(
        "TwoWordEventCount ping-pong: {pairs} pairs, {} replies in {:.1} s",
        done.load(Relaxed),
        started.elapsed().as_secs_f64()
    );
    assert_eq!(
        wrong.load(Relaxed),
        0,
        "replies that were not the version expected"
    );
    assert_eq!(stalls.load(Relaxed), 0, "stalls (lost wake-ups)");
    assert!(done.load(Relaxed) > 0);
}
