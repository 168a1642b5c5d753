//! Stress tests of the SPSC ring and the MPMC channel under oversubscription (3 threads per
//! CPU for the rings and the ping-pongs, 4 per CPU for the channel's streams), counting what
//! must never happen:
//!
//! - **order** (SPSC): the consumer sees 0, 1, 2, … from its producer; (MPMC) each receiver
//!   sees each sender's values in increasing order;
//! - **loss or duplication**: per producer, the count, the sum and the sum of squares of what
//!   was received equal what was sent;
//! - **a lost wake-up**: every blocking call has a deadline of 5 s, and a timeout counts as a
//!   stall. Both sides run until they are done, so a healthy run never waits that long for the
//!   other side — unless a wake-up was lost, or the machine stopped running the process
//!   (`common::Heartbeat` tells), or, on a channel with several threads per side, the
//!   waiter's side made progress meanwhile (`common::starved`: a starved waiter, or one left
//!   asleep while its rivals work, which the channel of one sender and one receiver catches);
//!   those two are printed and not counted;
//! - a `Disconnected` before the last item, or none after it.
//!
//! Capacities are small (1 to 1024 slots) so that both sides block often; calls mix blocking,
//! non-blocking and chunked forms. Each test moves `SPINDLE_STRESS_MESSAGES` messages (default
//! 10^8 across its pairs) or as many as fit in `SPINDLE_STRESS_SECONDS` (default 30): the rate
//! depends on the machine, and the test must end in bounded time on any of them. No timing is
//! asserted.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::time::{Duration, Instant};

use spindle_sync::{mpmc, spsc};

mod common;
use common::{time_limit, Rng};

const PATIENCE: Duration = Duration::from_secs(5);

/// The MPMC tests each oversubscribe the CPUs on their own; run side by side (cargo runs a
/// file's tests in parallel) they would multiply that, and under 6 × or more a waiter of the
/// channel stress test can lose every race for its whole patience (`common::starved`). One at
/// a time.
fn mpmc_alone() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn messages() -> u64 {
    std::env::var("SPINDLE_STRESS_MESSAGES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000_000)
}

#[derive(Default)]
struct Tally {
    out_of_order: AtomicU64,
    stalls: AtomicU64,
    /// Timeouts while the process was frozen (see `common::Heartbeat`): reported, not failed.
    excused: AtomicU64,
    /// Timeouts of a waiter whose side was served meanwhile (see `common::starved`): reported,
    /// not failed.
    starved: AtomicU64,
    early_disconnects: AtomicU64,
    received: AtomicU64,
}

impl Tally {
    /// A blocking call that started at `t0` waited out its patience, while other threads of
    /// its side of the channel completed `served` operations.
    fn stall(&self, heartbeat: &common::Heartbeat, what: &str, t0: Instant, served: u64) {
        if common::starved(what, t0, PATIENCE, served) {
            self.starved.fetch_add(1, Relaxed);
        } else if heartbeat.excuses(what, t0, PATIENCE) {
            self.excused.fetch_add(1, Relaxed);
        } else {
            self.stalls.fetch_add(1, Relaxed);
        }
    }
}

/// What one producer sent, or one consumer received from one producer.
#[derive(Default, Clone, Copy, Debug, PartialEq, Eq)]
struct Digest {
    count: u64,
    sum: u64,
    squares: u64,
}

impl Digest {
    fn add(&mut self, v: u64) {
        self.count += 1;
        self.sum = self.sum.wrapping_add(v);
        self.squares = self.squares.wrapping_add(v.wrapping_mul(v));
    }
    fn merge(&mut self, o: Digest) {
        self.count += o.count;
        self.sum = self.sum.wrapping_add(o.sum);
        self.squares = self.squares.wrapping_add(o.squares);
    }
}

/// Ring capacities, cycled through the pairs: roomy and tiny alternate, so that even 3 pairs
/// mix rings that rarely block with rings that block on every message.
const CAPACITIES: &[usize] = &[1024, 1, 64, 2, 7, 3];

/// Messages are handed to producers in blocks from a shared budget, so fast pairs (roomy
/// rings) move more than slow ones (tiny rings, which block on nearly every message).
const BLOCK: u64 = 4096;

/// Claim the next block of the budget, if any is left and there is time.
fn claim(budget: &AtomicU64, started: Instant) -> u64 {
    if started.elapsed() >= time_limit() {
        return 0;
    }
    let mut left = budget.load(Relaxed);
    loop {
        let k = left.min(BLOCK);
        if k == 0 {
            return 0;
        }
        match budget.compare_exchange_weak(left, left - k, Relaxed, Relaxed) {
            Ok(_) => return k,
            Err(l) => left = l,
        }
    }
}

#[test]
fn spsc_ring_stress_order_no_loss_no_lost_wakeup() {
    // 3 threads per CPU: pairs of producer and consumer, 1.5 pairs per CPU (at least 3).
    let pairs = (common::per_cpu(3, 6) / 2).max(3);
    let budget = AtomicU64::new(messages());
    let started = Instant::now();
    let tally = Tally::default();
    let heartbeat = common::heartbeat();
    let sent_total = AtomicU64::new(0);
    std::thread::scope(|s| {
        for p in 0..pairs {
            let cap = CAPACITIES[p % CAPACITIES.len()];
            let (mut tx, mut rx) = spsc::ring::<u64>(cap);
            let (tally, sent_total, budget) = (&tally, &sent_total, &budget);
            s.spawn(move || {
                let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (p as u64 + 1));
                let mut next = 0u64;
                let mut end = 0u64;
                loop {
                    if next == end {
                        match claim(budget, started) {
                            0 => break,
                            k => end += k,
                        }
                    }
                    match rng.below(8) {
                        // A chunk of up to 16, written in place.
                        0 => {
                            let want = (1 + rng.below(16)).min(end - next) as usize;
                            let free = tx.slots().min(want);
                            if let Ok(chunk) = tx.write_chunk_uninit(free) {
                                next += chunk.fill_from_iter(next..) as u64;
                            }
                        }
                        // Non-blocking, retried.
                        1 => match tx.try_push(next) {
                            Ok(()) => next += 1,
                            Err(spsc::TryPushError::Full(_)) => std::hint::spin_loop(),
                            Err(spsc::TryPushError::Disconnected(_)) => {
                                tally.early_disconnects.fetch_add(1, Relaxed);
                                break;
                            }
                        },
                        // Blocking: (when the call started, its result).
                        _ => match (Instant::now(), tx.push_timeout(next, PATIENCE)) {
                            (_, Ok(())) => next += 1,
                            (t0, Err(spsc::PushTimeoutError::Timeout(_))) => {
                                let what = format!("producer {p} (capacity {cap}) for space");
                                tally.stall(heartbeat, &what, t0, 0);
                            }
                            (_, Err(spsc::PushTimeoutError::Disconnected(_))) => {
                                tally.early_disconnects.fetch_add(1, Relaxed);
                                break;
                            }
                        },
                    }
                }
                sent_total.fetch_add(next, Relaxed);
                // Dropping tx disconnects: the consumer drains, then sees Disconnected.
            });
            s.spawn(move || {
                let mut rng = Rng(0xdead_beef_cafe_f00d ^ (p as u64 + 1));
                let mut expect = 0u64;
                let check = |v: u64, expect: &mut u64| {
                    if v != *expect {
                        tally.out_of_order.fetch_add(1, Relaxed);
                    }
                    *expect = v + 1;
                };
                loop {
                    match rng.below(8) {
                        0 => {
                            let n = rx.len().min(1 + rng.below(16) as usize);
                            if let Ok(chunk) = rx.read_chunk(n) {
                                for v in chunk {
                                    check(v, &mut expect);
                                }
                            }
                        }
                        1 => match rx.try_pop() {
                            Ok(v) => check(v, &mut expect),
                            Err(spsc::TryPopError::Empty) => std::hint::spin_loop(),
                            Err(spsc::TryPopError::Disconnected) => break,
                        },
                        _ => match (Instant::now(), rx.pop_timeout(PATIENCE)) {
                            (_, Ok(v)) => check(v, &mut expect),
                            (t0, Err(spsc::PopTimeoutError::Timeout)) => {
                                let what = format!("consumer {p} (capacity {cap}) for an item");
                                tally.stall(heartbeat, &what, t0, 0);
                            }
                            (_, Err(spsc::PopTimeoutError::Disconnected)) => break,
                        },
                    }
                }
                tally.received.fetch_add(expect, Relaxed);
            });
        }
    });
    let sent = sent_total.load(Relaxed);
    eprintln!(
        "spsc: {pairs} pairs moved {sent} messages in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(tally.out_of_order.load(Relaxed), 0, "out of order");
    assert_eq!(tally.received.load(Relaxed), sent, "lost or duplicated");
    assert_eq!(tally.stalls.load(Relaxed), 0, "stalls (lost wake-ups)");
    let excused = tally.excused.load(Relaxed);
    if excused > 0 {
        eprintln!("{excused} timeouts while the process was frozen (not counted)");
    }
    assert_eq!(
        tally.early_disconnects.load(Relaxed),
        0,
        "early disconnects"
    );
    assert!(sent > 0);
}

/// One timed call of a ping-pong side: its value, a timeout, or the other side gone.
enum Try<T> {
    Got(T),
    TimedOut,
    Gone,
}

/// The shared state of a ping-pong stress test's pairs.
struct PingPong {
    pairs: usize,
    budget: AtomicU64,
    started: Instant,
    tally: Tally,
    round_trips: AtomicU64,
}

impl PingPong {
    /// Pairs for 3 threads per CPU (at least 3), and a hundredth of the stress budget.
    fn new() -> PingPong {
        PingPong {
            pairs: (common::per_cpu(3, 6) / 2).max(3),
            budget: AtomicU64::new(messages() / 100),
            started: Instant::now(),
            tally: Tally::default(),
            round_trips: AtomicU64::new(0),
        }
    }

    /// Pinger `p`: sends tokens 0, 1, … while the budget lasts, each followed by waiting for
    /// its echo; counts a reply that is not the token sent, stalls and early disconnects.
    /// Returning drops the caller's sending end, which ends the echo.
    fn pinger(
        &self,
        p: usize,
        mut send: impl FnMut(u64) -> Try<()>,
        mut recv: impl FnMut() -> Try<u64>,
    ) {
        let (tally, heartbeat) = (&self.tally, common::heartbeat());
        let (mut token, mut end) = (0u64, 0u64);
        'run: loop {
            if token == end {
                match claim(&self.budget, self.started) {
                    0 => break,
                    k => end += k,
                }
            }
            loop {
                let t0 = Instant::now();
                match send(token) {
                    Try::Got(()) => break,
                    Try::TimedOut => {
                        tally.stall(heartbeat, &format!("pinger {p} for space"), t0, 0)
                    }
                    Try::Gone => {
                        tally.early_disconnects.fetch_add(1, Relaxed);
                        break 'run;
                    }
                }
            }
            loop {
                let t0 = Instant::now();
                match recv() {
                    Try::Got(v) => {
                        if v != token {
                            tally.out_of_order.fetch_add(1, Relaxed);
                        }
                        break;
                    }
                    Try::TimedOut => {
                        let what = format!("pinger {p} for the reply to {token}");
                        tally.stall(heartbeat, &what, t0, 0);
                    }
                    Try::Gone => {
                        tally.early_disconnects.fetch_add(1, Relaxed);
                        break 'run;
                    }
                }
            }
            token += 1;
        }
        self.round_trips.fetch_add(token, Relaxed);
    }

    /// Echo `p`: receives tokens and sends each back until the pinger disconnects; a
    /// timeout counts as a stall (`send` returning `TimedOut` ends the echo too).
    fn echo(
        &self,
        p: usize,
        mut recv: impl FnMut() -> Try<u64>,
        mut send: impl FnMut(u64) -> Try<()>,
    ) {
        let (tally, heartbeat) = (&self.tally, common::heartbeat());
        loop {
            let t0 = Instant::now();
            let v = match recv() {
                Try::Got(v) => v,
                Try::Gone => break,
                Try::TimedOut => {
                    tally.stall(heartbeat, &format!("echo {p} for a token"), t0, 0);
                    continue;
                }
            };
            let t0 = Instant::now();
            match send(v) {
                Try::Got(()) => {}
                // The pinger is gone (its disconnect is counted there).
                Try::Gone => break,
                Try::TimedOut => {
                    tally.stall(heartbeat, &format!("echo {p} for space"), t0, 0);
                    break;
                }
            }
        }
    }

    /// Prints the round trips made and asserts that nothing that must never happen did.
    fn check(&self, what: &str) {
        let done = self.round_trips.load(Relaxed);
        eprintln!(
            "{what} ping-pong: {} pairs made {done} round trips in {:.1} s",
            self.pairs,
            self.started.elapsed().as_secs_f64()
        );
        let tally = &self.tally;
        assert_eq!(
            tally.out_of_order.load(Relaxed),
            0,
            "a reply was not the token sent"
        );
        assert_eq!(tally.stalls.load(Relaxed), 0, "stalls (lost wake-ups)");
        assert_eq!(
            tally.early_disconnects.load(Relaxed),
            0,
            "early disconnects"
        );
        assert!(done > 0);
    }
}

/// Pairs of threads hand a token back and forth through two one-slot rings, 3 threads per
/// CPU: each waits right after its push has (often) woken its partner, the case the
/// single-producer event count's *stretched spin* is for (`stretched_spin` in `eventcount.rs`), and
/// with oversubscription the partner often shares the waiter's CPU. Counts a reply that is not
/// the token sent, and stalls (a blocking call that times out: a lost wake-up, see the file's
/// documentation).
#[test]
fn spsc_ping_pong_stress_no_lost_wakeup() {
    let pp = PingPong::new();
    std::thread::scope(|s| {
        for p in 0..pp.pairs {
            let (mut ping_tx, mut ping_rx) = spsc::ring::<u64>(1);
            let (mut pong_tx, mut pong_rx) = spsc::ring::<u64>(1);
            let pp = &pp;
            s.spawn(move || {
                pp.pinger(
                    p,
                    |v| match ping_tx.push_timeout(v, PATIENCE) {
                        Ok(()) => Try::Got(()),
                        Err(spsc::PushTimeoutError::Timeout(_)) => Try::TimedOut,
                        Err(spsc::PushTimeoutError::Disconnected(_)) => Try::Gone,
                    },
                    || match pong_rx.pop_timeout(PATIENCE) {
                        Ok(v) => Try::Got(v),
                        Err(spsc::PopTimeoutError::Timeout) => Try::TimedOut,
                        Err(spsc::PopTimeoutError::Disconnected) => Try::Gone,
                    },
                )
            });
            s.spawn(move || {
                pp.echo(
                    p,
                    || match ping_rx.pop_timeout(PATIENCE) {
                        Ok(v) => Try::Got(v),
                        Err(spsc::PopTimeoutError::Timeout) => Try::TimedOut,
                        Err(spsc::PopTimeoutError::Disconnected) => Try::Gone,
                    },
                    // A push that fails on a ring whose consumer is gone: the pinger ended.
                    |v| match pong_tx.push_timeout(v, PATIENCE) {
                        Ok(()) => Try::Got(()),
                        Err(_) if pong_tx.is_abandoned() => Try::Gone,
                        Err(_) => Try::TimedOut,
                    },
                )
            });
        }
    });
    pp.check("spsc");
}

/// The same hand-off through the MPMC channel: pings through a one-slot bounded channel, pongs
/// through an unbounded one, 3 threads per CPU. Both sides' event counts stretch the
/// signaller's next spin after a wake (`EventCount::stretching`), and the pinger's receives
/// and sends carry deadlines, which end a stretch early. Counts what the SPSC test counts.
#[test]
fn mpmc_ping_pong_stress_no_lost_wakeup() {
    let _alone = mpmc_alone();
    let pp = PingPong::new();
    std::thread::scope(|s| {
        for p in 0..pp.pairs {
            let (ping_tx, ping_rx) = mpmc::channel::<u64>(1);
            let (pong_tx, pong_rx) = mpmc::unbounded::<u64>();
            let pp = &pp;
            s.spawn(move || {
                pp.pinger(
                    p,
                    |v| match ping_tx.send_timeout(v, PATIENCE) {
                        Ok(()) => Try::Got(()),
                        Err(mpmc::SendTimeoutError::Timeout(_)) => Try::TimedOut,
                        Err(mpmc::SendTimeoutError::Disconnected(_)) => Try::Gone,
                    },
                    || match pong_rx.recv_timeout(PATIENCE) {
                        Ok(v) => Try::Got(v),
                        Err(mpmc::RecvTimeoutError::Timeout) => Try::TimedOut,
                        Err(mpmc::RecvTimeoutError::Disconnected) => Try::Gone,
                    },
                )
            });
            s.spawn(move || {
                pp.echo(
                    p,
                    || match ping_rx.recv_timeout(PATIENCE) {
                        Ok(v) => Try::Got(v),
                        Err(mpmc::RecvTimeoutError::Timeout) => Try::TimedOut,
                        Err(mpmc::RecvTimeoutError::Disconnected) => Try::Gone,
                    },
                    // Unbounded: a send fails only when the pinger is gone.
                    |v| match pong_tx.send(v) {
                        Ok(()) => Try::Got(()),
                        Err(_) => Try::Gone,
                    },
                )
            });
        }
    });
    pp.check("mpmc");
}

#[test]
fn mpmc_channel_stress_no_loss_no_dup_no_lost_wakeup() {
    let _alone = mpmc_alone();
    // 4 threads per CPU: half senders, half receivers (at least 4 + 4).
    let threads = common::per_cpu(4, 8);
    let (senders, receivers) = (threads / 2, threads - threads / 2);
    // Three channels: one sender and one receiver on a single slot (blocking all the time;
    // with no rival on either side, every timeout there is judged by the heartbeat alone, see
    // `common::starved`), then the other threads split between a tiny channel and a roomier
    // one. (capacity, senders, receivers):
    let (tx_rest, rx_rest) = (senders - 1, receivers - 1);
    let plan = [
        (1usize, 1usize, 1usize),
        (2, tx_rest / 2, rx_rest / 2),
        (256, tx_rest - tx_rest / 2, rx_rest - rx_rest / 2),
    ];
    let budget = AtomicU64::new(messages());
    let started = Instant::now();
    let tally = Tally::default();
    let heartbeat = common::heartbeat();
    // Per channel, the sends and the receives completed (see `common::starved`).
    let served: Vec<[common::Served; 2]> = plan.iter().map(|_| Default::default()).collect();
    let sent: Vec<Digest> = std::thread::scope(|s| {
        let mut handles = Vec::new();
        let mut receiver_handles = Vec::new();
        let mut first_id = 0;
        for (c, &(cap, n_tx, n_rx)) in plan.iter().enumerate() {
            let (tx, rx) = mpmc::channel::<u64>(cap);
            let [sends, receives] = &served[c];
            for i in 0..n_tx {
                let (tx, tally, budget) = (tx.clone(), &tally, &budget);
                let id = (first_id + i) as u64;
                handles.push(s.spawn(move || {
                    let mut rng = Rng(0x1234_5678 ^ (id + 1));
                    let mut d = Digest::default();
                    let mut seq = 0u64;
                    let mut end = 0u64;
                    loop {
                        if seq == end {
                            match claim(budget, started) {
                                0 => break,
                                k => end += k,
                            }
                        }
                        // value = sender id in the top 16 bits, sequence number below.
                        let v = (id << 48) | seq;
                        let ok = if rng.below(4) == 0 {
                            match tx.try_send(v) {
                                Ok(()) => true,
                                Err(mpmc::TrySendError::Full(_)) => false,
                                Err(mpmc::TrySendError::Disconnected(_)) => {
                                    tally.early_disconnects.fetch_add(1, Relaxed);
                                    break;
                                }
                            }
                        } else {
                            let before = sends.now();
                            match (Instant::now(), tx.send_timeout(v, PATIENCE)) {
                                (_, Ok(())) => true,
                                (t0, Err(mpmc::SendTimeoutError::Timeout(_))) => {
                                    let what = format!(
                                        "sender {id} (capacity {cap}, {} queued)",
                                        tx.len()
                                    );
                                    tally.stall(heartbeat, &what, t0, sends.now() - before);
                                    false
                                }
                                (_, Err(mpmc::SendTimeoutError::Disconnected(_))) => {
                                    tally.early_disconnects.fetch_add(1, Relaxed);
                                    break;
                                }
                            }
                        };
                        if ok {
                            sends.add();
                            d.add(seq);
                            seq += 1;
                        }
                    }
                    (id, d)
                }));
            }
            for r in 0..n_rx {
                let (rx, tally) = (rx.clone(), &tally);
                receiver_handles.push(s.spawn(move || {
                    let mut rng = Rng(0x8765_4321 ^ ((first_id + r) as u64 + 1));
                    let mut last = vec![None::<u64>; senders];
                    let mut got = vec![Digest::default(); senders];
                    let mut take = |v: u64| {
                        let (id, seq) = ((v >> 48) as usize, v & ((1 << 48) - 1));
                        if last[id].is_some_and(|l| l >= seq) {
                            tally.out_of_order.fetch_add(1, Relaxed);
                        }
                        last[id] = Some(seq);
                        got[id].add(seq);
                        receives.add();
                    };
                    loop {
                        if rng.below(4) == 0 {
                            match rx.try_recv() {
                                Ok(v) => take(v),
                                Err(mpmc::TryRecvError::Empty) => std::hint::spin_loop(),
                                Err(mpmc::TryRecvError::Disconnected) => break,
                            }
                        } else {
                            let before = receives.now();
                            match (Instant::now(), rx.recv_timeout(PATIENCE)) {
                                (_, Ok(v)) => take(v),
                                (t0, Err(mpmc::RecvTimeoutError::Timeout)) => {
                                    let what = format!(
                                        "receiver {r} (capacity {cap}, {} queued)",
                                        rx.len()
                                    );
                                    tally.stall(heartbeat, &what, t0, receives.now() - before);
                                }
                                (_, Err(mpmc::RecvTimeoutError::Disconnected)) => break,
                            }
                        }
                    }
                    got
                }));
            }
            first_id += n_tx;
            // The originals go: the channel disconnects when the clones do.
            drop((tx, rx));
        }
        let mut sent = vec![Digest::default(); senders];
        for h in handles {
            let (id, d) = h.join().unwrap();
            sent[id as usize] = d;
        }
        let mut received = vec![Digest::default(); senders];
        for h in receiver_handles {
            for (total, d) in received.iter_mut().zip(h.join().unwrap()) {
                total.merge(d);
            }
        }
        for (id, (s, r)) in sent.iter().zip(&received).enumerate() {
            if s != r {
                eprintln!("sender {id}: sent {s:?}, received {r:?}");
                tally.received.fetch_add(1, Relaxed); // counts mismatching senders here
            }
        }
        sent
    });
    let total: u64 = sent.iter().map(|d| d.count).sum();
    eprintln!(
        "mpmc: {senders} senders and {receivers} receivers moved {total} messages in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(
        tally.received.load(Relaxed),
        0,
        "senders whose values were lost or duplicated"
    );
    assert_eq!(tally.out_of_order.load(Relaxed), 0, "out of order");
    assert_eq!(tally.stalls.load(Relaxed), 0, "stalls (lost wake-ups)");
    let (excused, starved) = (tally.excused.load(Relaxed), tally.starved.load(Relaxed));
    if excused + starved > 0 {
        eprintln!(
            "{excused} timeouts while the process was frozen, {starved} of starved waiters \
             (not counted)"
        );
    }
    assert_eq!(
        tally.early_disconnects.load(Relaxed),
        0,
        "early disconnects"
    );
    assert!(total > 0);
}

/// Disconnection under load: a side that goes while the other is blocked wakes it, and items
/// pushed before the producer left are all delivered.
#[test]
fn rings_disconnect_wakes_blocked_sides() {
    let rounds = 2 * common::cpus() as u64 * 50;
    let stop = AtomicBool::new(false);
    for round in 0..rounds {
        let (mut tx, mut rx) = spsc::ring::<u64>(1 + (round % 3) as usize);
        std::thread::scope(|s| {
            let c = s.spawn(move || {
                let mut n = 0;
                while rx.pop().is_ok() {
                    n += 1;
                }
                n
            });
            let k = round % 17;
            for i in 0..k {
                tx.push(i).unwrap();
            }
            drop(tx);
            assert_eq!(c.join().unwrap(), k);
        });
        let (tx, rx) = mpmc::channel::<u64>(1);
        std::thread::scope(|s| {
            let blocked = s.spawn(move || {
                tx.send(0).unwrap();
                tx.send(1) // blocks: full, until the receiver goes
            });
            while !stop.load(Relaxed) && rx.is_empty() {
                std::thread::yield_now();
            }
            drop(rx);
            assert_eq!(blocked.join().unwrap(), Err(mpmc::SendError(1)));
        });
    }
}

/// `try_recv` and `try_send` are linearizable (crossbeam-channel's test logic, written anew):
/// T threads on a channel of capacity 4 each `send(0)` then `try_recv()`; every `try_recv`
/// follows a completed send whose message no other thread can take without leaving its own,
/// so none may answer `Empty`. The mirror: a full channel, each thread `recv()` then
/// `try_send(0)`, none may answer `Full`. T oversubscribes the CPUs 2–4 × (at least 4), so
/// threads are preempted between claiming a slot and finishing with it.
#[test]
fn mpmc_try_recv_and_try_send_are_linearizable() {
    let _alone = mpmc_alone();
    const CAP: usize = 4;
    let threads = common::per_cpu(2, 4).min(4 * common::cpus());
    let rounds = 25_000 / threads as u64 + 1000;
    let limit = common::time_limit();
    let started = Instant::now();
    let (false_empty, false_full) = (AtomicU64::new(0), AtomicU64::new(0));
    let (tx, rx) = mpmc::channel::<u64>(CAP);
    std::thread::scope(|s| {
        for _ in 0..threads {
            let (tx, rx, false_empty) = (tx.clone(), rx.clone(), &false_empty);
            s.spawn(move || {
                for _ in 0..rounds {
                    if started.elapsed() > limit {
                        break;
                    }
                    tx.send(0).unwrap();
                    if rx.try_recv() == Err(mpmc::TryRecvError::Empty) {
                        false_empty.fetch_add(1, Relaxed);
                        rx.recv().unwrap(); // keep the balance
                    }
                }
            });
        }
    });
    assert!(rx.is_empty());
    for _ in 0..CAP {
        tx.send(0).unwrap();
    }
    std::thread::scope(|s| {
        for _ in 0..threads {
            let (tx, rx, false_full) = (tx.clone(), rx.clone(), &false_full);
            s.spawn(move || {
                for _ in 0..rounds {
                    if started.elapsed() > 2 * limit {
                        break;
                    }
                    rx.recv().unwrap();
                    if let Err(mpmc::TrySendError::Full(v)) = tx.try_send(0) {
                        false_full.fetch_add(1, Relaxed);
                        tx.send(v).unwrap();
                    }
                }
            });
        }
    });
    assert_eq!(false_empty.load(Relaxed), 0, "try_recv answered Empty");
    assert_eq!(false_full.load(Relaxed), 0, "try_send answered Full");
}

/// Dropping the last receiver drops the queued messages at once, senders still alive; later
/// sends fail and hand their value back; each message is dropped exactly once.
#[test]
fn mpmc_last_receiver_drops_queued_messages() {
    let token = std::sync::Arc::new(());
    let (tx, rx) = mpmc::channel::<std::sync::Arc<()>>(8);
    let rx2 = rx.clone();
    for _ in 0..5 {
        tx.send(token.clone()).unwrap();
    }
    assert_eq!(std::sync::Arc::strong_count(&token), 6);
    drop(rx);
    assert_eq!(
        std::sync::Arc::strong_count(&token),
        6,
        "a receiver is left"
    );
    drop(rx2);
    assert_eq!(
        std::sync::Arc::strong_count(&token),
        1,
        "queued messages outlived the receivers"
    );
    match tx.send(token.clone()) {
        Err(mpmc::SendError(v)) => drop(v),
        Ok(()) => panic!("sent with no receiver"),
    }
    assert_eq!(std::sync::Arc::strong_count(&token), 1);
    drop(tx);
    assert_eq!(std::sync::Arc::strong_count(&token), 1);
}
